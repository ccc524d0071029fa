#version 450
// matmul.comp - d[n, m, b2, b3] = alpha * sum_k W[k, n, b2 / r2, b3 / r3] * x[k, m, b2, b3] (+ bias[n]),
// then an activation: matmul and linear. One workgroup of 64 per output element, summed by reduce.glsl
// (shared memory, or subgroup arithmetic in matmul_subgroup.spv). WTYPE (a specialization constant, one pipeline each): 0 F32, 1 F16, 2 Q8_0, 3 Q4_0, 4 Q4_K,
// 5 Q6_K. For the quantized types the arithmetic is the CPU reference's (kernels_mm_ref.c,
// kernels_mm_kquants_ref.c): each 32-block of the x row is quantized to int8 (d = amax / 127, round half to
// even), exact integer dots with the weight quants give one float term per block, and the blocks are
// summed in float:
//   Q8_0, Q4_0  d_w * d_x * I
//   Q4_K        d_x * (dl * I - ml * S), dl = d * sc, ml = dmin * m of the block's group, S = sum of the
//               block's int8 activations
//   Q6_K        d_x * (dl_j * I_j + dl_j+1 * I_j+1) over the block's two 16-element sub-blocks, with the
//               quants' - 32 inside the integer dots
#include "common.glsl"
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint WTYPE = 0;
layout(std430, set = 0, binding = 0) readonly buffer Wt { uint W[]; };
layout(std430, set = 0, binding = 1) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 2) readonly buffer Bias { float bias[]; };
layout(std430, set = 0, binding = 3) buffer D { float d[]; };
layout(push_constant) uniform P {
    uint off_w, off_x, off_d, off_bias; // off_w in bytes, the others in elements
    uint K, N, M, n_base;               // N rows in this dispatch, starting at row n_base of the output
    uint w_nb1, w_nb2, w_nb3, r2;       // weight strides in bytes
    uint x_nb1, x_nb2, x_nb3, r3;
    uint d_nb1, d_nb2, d_nb3, B2;
    float alpha;
    uint activation, has_bias, pad;
} p;

#include "quant.glsl"
#include "reduce.glsl"

void main() {
    uint n = wg_index(), col = gl_WorkGroupID.z, t = gl_LocalInvocationID.x;
    if (n >= p.N) return;
    uint m = col % p.M, b2 = (col / p.M) % p.B2, b3 = col / (p.M * p.B2);
    uint wr = p.off_w + n * p.w_nb1 + (b2 / p.r2) * p.w_nb2 + (b3 / p.r3) * p.w_nb3;
    uint xr = p.off_x + m * p.x_nb1 + b2 * p.x_nb2 + b3 * p.x_nb3;
    float sum = 0.0;
    if (WTYPE == 0u) {
        for (uint k = t; k < p.K; k += 64u) sum += uintBitsToFloat(W[(wr >> 2) + k]) * x[xr + k];
    } else if (WTYPE == 1u) {
        for (uint k = t; k < p.K; k += 64u) sum += w_f16(wr + 2u * k) * x[xr + k];
    } else {
        for (uint blk = t; blk < p.K / 32u; blk += 64u) {
            uint xb = xr + blk * 32u;
            float amax = 0.0;
            for (uint i = 0u; i < 32u; i++) amax = max(amax, abs(x[xb + i]));
            float dx = amax / 127.0, id = dx != 0.0 ? 1.0 / dx : 0.0;
            if (WTYPE == 4u) {
                uint sb = wr + (blk / 8u) * 144u, g = blk % 8u;
                int isum = 0, xs = 0;
                for (uint i = 0u; i < 32u; i++) {
                    int q = int(roundEven(clamp(x[xb + i] * id, -127.0, 127.0)));
                    isum += int(q4k_quant(sb, g, i)) * q;
                    xs += q;
                }
                uvec2 sm = q4k_scale_min(sb + 4u, g);
                float dl = w_f16(sb) * float(sm.x), ml = w_f16(sb + 2u) * float(sm.y);
                float term = dl * float(isum) - ml * float(xs);
                sum += dx * term;
                continue;
            }
            if (WTYPE == 5u) {
                uint sb = wr + (blk / 8u) * 210u, g = blk % 8u;
                int i0 = 0, i1 = 0;
                for (uint i = 0u; i < 32u; i++) {
                    int q = int(roundEven(clamp(x[xb + i] * id, -127.0, 127.0)));
                    int wq = int(q6k_quant(sb, g, i)) - 32;
                    if (i < 16u) i0 += wq * q;
                    else i1 += wq * q;
                }
                float d6 = w_f16(sb + 208u);
                float dl0 = d6 * float(w_i8(sb + 192u + 2u * g)), dl1 = d6 * float(w_i8(sb + 193u + 2u * g));
                float term = dl0 * float(i0) + dl1 * float(i1);
                sum += dx * term;
                continue;
            }
            int isum = 0;
            uint wb = wr + blk * (WTYPE == 2u ? 34u : 18u);
            for (uint i = 0u; i < 32u; i++) {
                int q = int(roundEven(clamp(x[xb + i] * id, -127.0, 127.0)));
                int wq;
                if (WTYPE == 2u) {
                    wq = w_i8(wb + 2u + i);
                } else {
                    uint byte = w_byte(wb + 2u + (i & 15u));
                    wq = int(i < 16u ? (byte & 15u) : (byte >> 4)) - 8;
                }
                isum += wq * q;
            }
            sum += w_f16(wb) * dx * float(isum);
        }
    }
    sum = wg_sum(sum);
    if (t == 0u) {
        uint row = p.n_base + n;
        float v = p.alpha * sum;
        if (p.has_bias != 0u) v += bias[p.off_bias + row];
        d[p.off_d + row + m * p.d_nb1 + b2 * p.d_nb2 + b3 * p.d_nb3] = act(p.activation, v);
    }
}
