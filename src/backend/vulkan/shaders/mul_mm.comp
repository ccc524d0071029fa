#version 450
// mul_mm.comp - matrix times many columns (prefill): the same product as mul_mv.comp, in 64 x 64 output
// tiles. A workgroup of 256 stages a 64-row weight tile and a 64-column activation tile in shared memory as
// floats, 32 elements of K at a time, and each invocation keeps a 4 x 4 block of outputs in registers
// (rows 4 tr .. 4 tr + 3, columns 4 tc .. 4 tc + 3), read as two float4 loads per step of k, so every
// weight element is decoded once per tile rather than once per column and every staged value serves 16
// invocations.
//
// WTYPE (specialization constant): 0 F32, 1 F16, 2 Q8_0, 3 Q4_0, 4 Q4_K, 5 Q6_K. Quantized weights are
// decoded a 32-element block at a time (qblock.glsl) into floats as the CPU's dequantizer forms them, and
// multiply the float activations, as llama.cpp's Vulkan prefill does: not the CPU's int8 activations
// (quantize_q8.comp, which decode keeps), so results differ from the CPU's by the activations' rounding to
// int8 (test_backend_ops states the tolerance). Quantized K is a multiple of 32; F32/F16 K any length.
#include "common.glsl"
#define TILE 64u
#define KB 32u
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint WTYPE = 0;
layout(std430, set = 0, binding = 0) readonly buffer Wt { uint W[]; };
layout(std430, set = 0, binding = 1) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 2) readonly buffer Bias { float bias[]; };
layout(std430, set = 0, binding = 3) buffer D { float d[]; };
layout(push_constant) uniform P {
    uint off_w, off_x, off_d, off_bias;
    uint K, N, M, n_base;
    uint w_nb1, w_nb2, w_nb3, r2;
    uint x_nb1, x_nb2, x_nb3, r3;
    uint d_nb1, d_nb2, d_nb3, B2;
    float alpha;
    uint activation, has_bias, pad;
} p;

#include "quant.glsl"
#include "qblock.glsl"

// Staged tiles, k-major: element i of step kk at [kk][i / 4][i % 4], so that an invocation's four rows
// (or columns) are one float4. 16 KB of shared memory (the backend checks the device's
// maxComputeSharedMemorySize before it chooses this kernel).
shared vec4 ws[KB][TILE / 4u], xs[KB][TILE / 4u];

// The activation tile of k0..k0 + 31: columns m0.., zeros past M and K. Invocations from `first` on share it.
void stage_x(uint t, uint first, uint m0, uint b2, uint b3, uint k0) {
    for (uint e = t - first; e < KB * TILE; e += 256u - first) {
        uint kk = e % KB, i = e / KB, k = k0 + kk;
        float v = 0.0;
        if (k < p.K && m0 + i < p.M) v = x[p.off_x + (m0 + i) * p.x_nb1 + b2 * p.x_nb2 + b3 * p.x_nb3 + k];
        xs[kk][i >> 2][i & 3u] = v;
    }
}

void stage_float(uint t, uint wbase, uint n0, uint m0, uint b2, uint b3, uint k0) {
    for (uint e = t; e < KB * TILE; e += 256u) {
        uint kk = e % KB, i = e / KB, k = k0 + kk;
        float w = 0.0;
        if (k < p.K && n0 + i < p.N) {
            uint wr = wbase + (n0 + i) * p.w_nb1;
            w = WTYPE == 0u ? uintBitsToFloat(W[(wr >> 2) + k]) : w_f16(wr + 2u * k);
        }
        ws[kk][i >> 2][i & 3u] = w;
    }
    stage_x(t, 0u, m0, b2, b3, k0);
}

// Block blk of the weight rows n0..: one row per invocation of the first 64, as floats (the factors of
// qblock.glsl applied as the CPU's dequantizer does: Q4_K d sc q - dmin m, Q6_K's two scales by half);
// the other 192 stage the activations.
void stage_quant(uint t, uint wbase, uint n0, uint m0, uint b2, uint b3, uint blk) {
    if (t < TILE) {
        ivec4 q[8];
        vec3 f = vec3(0.0);
        if (n0 + t < p.N) load_block(wbase + (n0 + t) * p.w_nb1, blk, q, f);
        else
            for (uint j = 0u; j < 8u; j++) q[j] = ivec4(0);
        for (uint j = 0u; j < 8u; j++) {
            vec4 w = (j < 4u ? f.x : f.y) * vec4(q[j]) - f.z;
            ws[4u * j][t >> 2][t & 3u] = w.x;
            ws[4u * j + 1u][t >> 2][t & 3u] = w.y;
            ws[4u * j + 2u][t >> 2][t & 3u] = w.z;
            ws[4u * j + 3u][t >> 2][t & 3u] = w.w;
        }
    } else
        stage_x(t, TILE, m0, b2, b3, blk * KB);
}

void main() {
    uint t = gl_LocalInvocationID.x, tr = t % 16u, tc = t / 16u;
    uint tiles_n = (p.N + TILE - 1u) / TILE, g = wg_index();
    uint n0 = (g % tiles_n) * TILE, m0 = (g / tiles_n) * TILE;
    uint b2 = gl_WorkGroupID.z % p.B2, b3 = gl_WorkGroupID.z / p.B2;
    uint wbase = p.off_w + (b2 / p.r2) * p.w_nb2 + (b3 / p.r3) * p.w_nb3;
    float acc[4][4];
    for (uint i = 0u; i < 4u; i++)
        for (uint j = 0u; j < 4u; j++) acc[i][j] = 0.0;
    uint steps = WTYPE <= 1u ? (p.K + KB - 1u) / KB : p.K / KB;
    for (uint st = 0u; st < steps; st++) {
        if (WTYPE <= 1u) stage_float(t, wbase, n0, m0, b2, b3, st * KB);
        else stage_quant(t, wbase, n0, m0, b2, b3, st);
        barrier();
        for (uint kk = 0u; kk < KB; kk++) {
            vec4 a = ws[kk][tr], b = xs[kk][tc];
            for (uint i = 0u; i < 4u; i++)
                for (uint j = 0u; j < 4u; j++) acc[i][j] += a[i] * b[j];
        }
        barrier();
    }
    for (uint i = 0u; i < 4u; i++)
        for (uint j = 0u; j < 4u; j++) {
            uint n = n0 + 4u * tr + i, m = m0 + 4u * tc + j;
            if (n >= p.N || m >= p.M) continue;
            uint row = p.n_base + n;
            float v = p.alpha * acc[i][j];
            if (p.has_bias != 0u) v += bias[p.off_bias + row];
            d[p.off_d + row + m * p.d_nb1 + b2 * p.d_nb2 + b3 * p.d_nb3] = act(p.activation, v);
        }
}
