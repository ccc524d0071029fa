#version 450
// mul_mm.comp - matrix times many columns (prefill): the same product as mul_mv.comp, in 64 x 64 output
// tiles. A workgroup of 256 stages a 64-row weight tile and a 64-column activation tile in shared memory,
// one 32-element block of K at a time, and each invocation keeps a 4 x 4 block of outputs in registers
// (rows tr + 16 i, columns tc + 16 j), so every weight element is decoded once per tile rather than once
// per column and every staged value is read by 16 invocations.
//
// WTYPE (specialization constant): 0 F32 and 1 F16 stage floats (x read as float, K any length); 2 Q8_0,
// 3 Q4_0, 4 Q4_K, 5 Q6_K stage integer quants with their block factors (qblock.glsl) and the q8 rows of
// quantize_q8.comp, and each block adds the CPU reference's float term for its integer dots.
#include "common.glsl"
#define TILE 64u
#define KB 32u
layout(local_size_x = 256) in;
layout(constant_id = 0) const uint WTYPE = 0;
layout(std430, set = 0, binding = 0) readonly buffer Wt { uint W[]; };
layout(std430, set = 0, binding = 1) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer XQ { uint xq[]; };
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

// Staged tiles, k-major so that the 16 invocations reading one k see consecutive words: integer quants,
// or for F32/F16 the float bits. About 17.3 KB of shared memory in all (the backend checks the device's
// maxComputeSharedMemorySize before it chooses this kernel).
shared int qw[KB][TILE], qx[KB][TILE];
shared vec3 fw[TILE];                     // the weight blocks' factors
shared float dxs[TILE];                   // the activation blocks' scales
shared int sxs[TILE];                     // and quant sums

void stage_float(uint t, uint wbase, uint n0, uint m0, uint b2, uint b3, uint k0) {
    for (uint e = t; e < KB * TILE; e += 256u) {
        uint kk = e % KB, i = e / KB, k = k0 + kk;
        float w = 0.0, v = 0.0;
        if (k < p.K && n0 + i < p.N) {
            uint wr = wbase + (n0 + i) * p.w_nb1;
            w = WTYPE == 0u ? uintBitsToFloat(W[(wr >> 2) + k]) : w_f16(wr + 2u * k);
        }
        if (k < p.K && m0 + i < p.M) v = x[p.off_x + (m0 + i) * p.x_nb1 + b2 * p.x_nb2 + b3 * p.x_nb3 + k];
        qw[kk][i] = floatBitsToInt(w);
        qx[kk][i] = floatBitsToInt(v);
    }
}

void stage_quant(uint t, uint wbase, uint n0, uint xcol0, uint m0, uint blk) {
    uint nb = p.K / 32u, row_words = p.K / 4u + 2u * nb;
    if (t < TILE) { // one weight block per invocation
        ivec4 q[8];
        vec3 f = vec3(0.0);
        if (n0 + t < p.N) load_block(wbase + (n0 + t) * p.w_nb1, blk, q, f);
        else
            for (uint j = 0u; j < 8u; j++) q[j] = ivec4(0);
        for (uint j = 0u; j < 8u; j++) {
            qw[4u * j][t] = q[j].x;
            qw[4u * j + 1u][t] = q[j].y;
            qw[4u * j + 2u][t] = q[j].z;
            qw[4u * j + 3u][t] = q[j].w;
        }
        fw[t] = f;
    } else if (t < 2u * TILE) { // the activation blocks' scale and sum
        uint i = t - TILE;
        float dx = 0.0;
        int s = 0;
        if (m0 + i < p.M) {
            uint xr = p.off_x + (xcol0 + i) * row_words;
            dx = uintBitsToFloat(xq[xr + p.K / 4u + blk]);
            s = int(xq[xr + p.K / 4u + nb + blk]);
        }
        dxs[i] = dx;
        sxs[i] = s;
    }
    for (uint e = t; e < 8u * TILE; e += 256u) { // the activation quants, a word (4 of them) each
        uint j = e % 8u, i = e / 8u;
        ivec4 v = ivec4(0);
        if (m0 + i < p.M) v = bytes_signed(xq[p.off_x + (xcol0 + i) * row_words + 8u * blk + j]);
        qx[4u * j][i] = v.x;
        qx[4u * j + 1u][i] = v.y;
        qx[4u * j + 2u][i] = v.z;
        qx[4u * j + 3u][i] = v.w;
    }
}

void main() {
    uint t = gl_LocalInvocationID.x, tr = t % 16u, tc = t / 16u;
    uint tiles_n = (p.N + TILE - 1u) / TILE, g = wg_index();
    uint n0 = (g % tiles_n) * TILE, m0 = (g / tiles_n) * TILE;
    uint b2 = gl_WorkGroupID.z % p.B2, b3 = gl_WorkGroupID.z / p.B2;
    uint wbase = p.off_w + (b2 / p.r2) * p.w_nb2 + (b3 / p.r3) * p.w_nb3;
    uint xcol0 = (b3 * p.B2 + b2) * p.M + m0; // the q8 row of column m0
    float acc[4][4];
    for (uint i = 0u; i < 4u; i++)
        for (uint j = 0u; j < 4u; j++) acc[i][j] = 0.0;
    if (WTYPE <= 1u) {
        for (uint k0 = 0u; k0 < p.K; k0 += KB) {
            stage_float(t, wbase, n0, m0, b2, b3, k0);
            barrier();
            for (uint kk = 0u; kk < KB; kk++) {
                vec4 a = intBitsToFloat(ivec4(qw[kk][tr], qw[kk][tr + 16u], qw[kk][tr + 32u], qw[kk][tr + 48u]));
                vec4 b = intBitsToFloat(ivec4(qx[kk][tc], qx[kk][tc + 16u], qx[kk][tc + 32u], qx[kk][tc + 48u]));
                for (uint i = 0u; i < 4u; i++)
                    for (uint j = 0u; j < 4u; j++) acc[i][j] += a[i] * b[j];
            }
            barrier();
        }
    } else {
        for (uint blk = 0u; blk < p.K / 32u; blk++) {
            stage_quant(t, wbase, n0, xcol0, m0, blk);
            barrier();
            ivec4 i0[4], i1[4];
            for (uint i = 0u; i < 4u; i++) i0[i] = i1[i] = ivec4(0);
            for (uint kk = 0u; kk < KB; kk++) {
                ivec4 a = ivec4(qw[kk][tr], qw[kk][tr + 16u], qw[kk][tr + 32u], qw[kk][tr + 48u]);
                ivec4 b = ivec4(qx[kk][tc], qx[kk][tc + 16u], qx[kk][tc + 32u], qx[kk][tc + 48u]);
                for (uint i = 0u; i < 4u; i++) {
                    if (kk < 16u) i0[i] += a[i] * b;
                    else i1[i] += a[i] * b;
                }
            }
            for (uint i = 0u; i < 4u; i++)
                for (uint j = 0u; j < 4u; j++) {
                    uint c = tc + 16u * j;
                    acc[i][j] += block_term(fw[tr + 16u * i], i0[i][j], i1[i][j], dxs[c], sxs[c]);
                }
            barrier();
        }
    }
    for (uint i = 0u; i < 4u; i++)
        for (uint j = 0u; j < 4u; j++) {
            uint n = n0 + tr + 16u * i, m = m0 + tc + 16u * j;
            if (n >= p.N || m >= p.M) continue;
            uint row = p.n_base + n;
            float v = p.alpha * acc[i][j];
            if (p.has_bias != 0u) v += bias[p.off_bias + row];
            d[p.off_d + row + m * p.d_nb1 + b2 * p.d_nb2 + b3 * p.d_nb3] = act(p.activation, v);
        }
}
