#version 450
// quantize_q8.comp - the activation x [K, M, B2, B3] (rows contiguous) as the CPU's q8 rows
// (kiln__q8_quantize_ref, kernels_mm_ref.c), once per matmul node, for mul_mv.comp and mul_mm.comp to read.
// Per 32-block: amax over |x| of the span holding the block (NaN ignored): the block itself, or for Q4_K
// and Q6_K weights its 256-element super-block (span 256: the CPU's super-block q8 rows, kiln__q8_quantize_sb_ref,
// llama.cpp's q8_K), d = amax / 127 and id = 1 / d, each correctly rounded as the CPU divides, q = round half to even of clamp(x * id, -127, 127) (NaN to -127, as the CPU's fmaxf), s = the
// sum of q. Column c's row starts at word c * K * 5 / 16 of the destination: K int8 quants (4 to a word,
// the first lowest), K / 32 float d, K / 32 int s.
//
// One invocation per element, a workgroup per 8 blocks (32 invocations each): amax and the sums reduce in
// shared memory, so a decode step's vector of a few thousand elements is a few workgroups working side by
// side, not 64 invocations each walking its block (or its 256-element super-block) alone. With span 256
// the 8 blocks are one super-block (K, and so the blocks per row, are multiples of 256 and 8 then). Max and
// integer sums do not depend on order: the rows are the CPU's, bit for bit, as before.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Q { uint q[]; };
layout(push_constant) uniform P {
    uint off_x, off_q, K, M;
    uint B2, B3, x_nb1, x_nb2;
    uint x_nb3, span;
} p;

shared float amx[256];
shared int qs[256];

// a / b correctly rounded for a >= 0, b > 0 (the driver may divide as a * (1 / b)): the quotient's
// neighbours are tried against the exact residual fma(-c, b, a). As cache_write.comp.
float div_rn(float a, float b) {
    precise float c = a / b;
    if (c <= 0.0 || isinf(c)) return c;
    float lo = uintBitsToFloat(floatBitsToUint(c) - 1u), hi = uintBitsToFloat(floatBitsToUint(c) + 1u);
    precise float rc = abs(fma(-c, b, a)), rl = abs(fma(-lo, b, a)), rh = abs(fma(-hi, b, a));
    return rl < rc ? lo : rh < rc ? hi : c;
}

void main() {
    uint nb = p.K / 32u, t = gl_LocalInvocationID.x, lane = t % 32u;
    uint i = wg_index() * 8u + t / 32u; // this invocation's block, over every column
    bool live = i < nb * p.M * p.B2 * p.B3;
    uint blk = i % nb, col = i / nb;
    uint m = col % p.M, b2 = (col / p.M) % p.B2, b3 = col / (p.M * p.B2);
    uint xb = p.off_x + m * p.x_nb1 + b2 * p.x_nb2 + b3 * p.x_nb3 + 32u * blk;
    uint row = p.off_q + col * (p.K / 4u + 2u * nb);
    float v = live ? x[xb + lane] : 0.0, a = abs(v);
    amx[t] = isnan(a) ? 0.0 : a; // NaN ignored, as the CPU's amax
    barrier();
    uint w = p.span == 256u ? 256u : 32u; // the invocations that share an amax
    for (uint s = w / 2u; s > 0u; s >>= 1) {
        if (t % w < s && amx[t + s] > amx[t]) amx[t] = amx[t + s];
        barrier();
    }
    float amax = amx[t - t % w];
    float d = div_rn(amax, 127.0), id = d != 0.0 ? div_rn(1.0, d) : 0.0;
    float y = v * id;
    int qv = isnan(y) ? -127 : int(roundEven(clamp(y, -127.0, 127.0)));
    qs[t] = qv;
    barrier();
    if (live && lane % 4u == 0u)
        q[row + 8u * blk + lane / 4u] = (uint(qs[t]) & 0xffu) | ((uint(qs[t + 1u]) & 0xffu) << 8) |
                                        ((uint(qs[t + 2u]) & 0xffu) << 16) | ((uint(qs[t + 3u]) & 0xffu) << 24);
    barrier();
    for (uint s = 16u; s > 0u; s >>= 1) {
        if (lane < s) qs[t] += qs[t + s];
        barrier();
    }
    if (live && lane == 0u) {
        q[row + p.K / 4u + blk] = floatBitsToUint(d);
        q[row + p.K / 4u + nb + blk] = uint(qs[t]);
    }
}
