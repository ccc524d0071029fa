/*
 * dequant_kquants.c - scalar reference dequantizers for the K-quants (256-element super-blocks): Q2_K,
 * Q3_K, Q4_K, Q5_K, Q6_K, and Q8_K, the activation type of the K-quant dot products. Products are formed
 * in the order ggml and the gguf Python package use, (d * scale) * q - (dmin * min), one rounding per
 * operation and never fused, so results are bit-exact with both.
 *
 * Element order: the 2-bit (Q2_K, Q3_K low bits, Q6_K high bits) arrays hold, per 128 elements, 32 bytes
 * whose bit pairs 0..3 carry elements l, l + 32, l + 64, l + 96. The 4-bit arrays hold, per 64 elements,
 * 32 bytes with element l in the low nibble and l + 32 in the high one (Q6_K: per 128 elements, 64 bytes,
 * elements l and l + 64). A one-bit array of 32 bytes (Q3_K hmask, Q5_K qh) holds element k * 32 + l in
 * bit k of byte l. See docs/quantization.md for the full layouts.
 */
#include "tensor/types.h"

/* The hot dequantizers are compiled for AVX-512 and AVX2 as well as the baseline, picked at load time by
 * the dynamic loader (function multi-versioning). Each clone does the same float operations per element
 * (no contraction: separate statements), so every clone is bit-exact with the others. gcc only: clang 14
 * does not export the multi-versioned symbols from a static library. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define KILN_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define KILN_CLONES
#endif

/* The loops walk the packed arrays in their storage order (per 128 or 64 elements), which keeps the
 * reference readable and fast enough for the row-wise matmul path. */

KILN_CLONES void kiln__dequant_q2_k(const void *src, float *y, int64_t n) {
    const kiln_block_q2_k *b = src;
    for (int64_t i = 0; i < n / KILN_QK_K; i++, y += KILN_QK_K) {
        float d = kiln_fp16_to_fp32(b[i].d), dmin = kiln_fp16_to_fp32(b[i].dmin);
        for (int e0 = 0; e0 < KILN_QK_K; e0 += 16) { /* group e0 / 16: half h, bit pair k */
            int g = e0 / 16, h = e0 / 128, k = (e0 % 128) / 32, l0 = e0 % 32;
            float dl = d * (float)(b[i].scales[g] & 0xf), ml = dmin * (float)(b[i].scales[g] >> 4);
            for (int l = l0; l < l0 + 16; l++) {
                float t = dl * (float)((b[i].qs[32 * h + l] >> (2 * k)) & 3);
                y[128 * h + 32 * k + l] = t - ml;
            }
        }
    }
}

/* The sixteen 6-bit Q3_K scales, minus 32. */
static void q3_k_scales(const uint8_t *sc, int out[16]) {
    for (int s = 0; s < 16; s++) {
        int lo = s < 8 ? sc[s] & 0xf : sc[s - 8] >> 4;
        int hi = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
        out[s] = (lo | hi << 4) - 32;
    }
}

KILN_CLONES void kiln__dequant_q3_k(const void *src, float *y, int64_t n) {
    const kiln_block_q3_k *b = src;
    int scales[16];
    for (int64_t i = 0; i < n / KILN_QK_K; i++, y += KILN_QK_K) {
        float d = kiln_fp16_to_fp32(b[i].d);
        q3_k_scales(b[i].scales, scales);
        for (int e0 = 0; e0 < KILN_QK_K; e0 += 16) {
            int g = e0 / 16, h = e0 / 128, k = (e0 % 128) / 32, l0 = e0 % 32;
            float dl = d * (float)scales[g];
            for (int l = l0; l < l0 + 16; l++) {
                int low = (b[i].qs[32 * h + l] >> (2 * k)) & 3;
                int high = (b[i].hmask[l] >> (4 * h + k)) & 1;
                y[128 * h + 32 * k + l] = dl * (float)(low - (high ? 0 : 4));
            }
        }
    }
}

/* Shared by Q4_K and Q5_K: 8 groups of 32 with 6-bit scales and mins; per 64 elements, 32 bytes of qs
 * (group 2c in the low nibbles, 2c + 1 in the high ones); hbits NULL for Q4_K. */
static inline __attribute__((always_inline)) void dequant_q45_k(uint16_t d16, uint16_t dmin16, const uint8_t *scales, const uint8_t *qs,
                          const uint8_t *hbits, float *y) {
    float d = kiln_fp16_to_fp32(d16), dmin = kiln_fp16_to_fp32(dmin16);
    for (int g = 0; g < 8; g++) {
        uint8_t sc, m;
        kiln__kquant_scale_min(g, scales, &sc, &m);
        float dl = d * (float)sc, ml = dmin * (float)m;
        const uint8_t *q = qs + 32 * (g / 2);
        int shift = 4 * (g % 2);
        for (int l = 0; l < 32; l++) {
            int v = (q[l] >> shift) & 0xf;
            if (hbits) v |= ((hbits[l] >> g) & 1) << 4;
            float t = dl * (float)v;
            y[32 * g + l] = t - ml;
        }
    }
}

KILN_CLONES void kiln__dequant_q4_k(const void *src, float *y, int64_t n) {
    const kiln_block_q4_k *b = src;
    for (int64_t i = 0; i < n / KILN_QK_K; i++, y += KILN_QK_K)
        dequant_q45_k(b[i].d, b[i].dmin, b[i].scales, b[i].qs, NULL, y);
}

KILN_CLONES void kiln__dequant_q5_k(const void *src, float *y, int64_t n) {
    const kiln_block_q5_k *b = src;
    for (int64_t i = 0; i < n / KILN_QK_K; i++, y += KILN_QK_K)
        dequant_q45_k(b[i].d, b[i].dmin, b[i].scales, b[i].qs, b[i].qh, y);
}

KILN_CLONES void kiln__dequant_q6_k(const void *src, float *y, int64_t n) {
    const kiln_block_q6_k *b = src;
    for (int64_t i = 0; i < n / KILN_QK_K; i++, y += KILN_QK_K) {
        float d = kiln_fp16_to_fp32(b[i].d);
        for (int e0 = 0; e0 < KILN_QK_K; e0 += 16) { /* group e0 / 16: half h, quarter k */
            int h = e0 / 128, k = (e0 % 128) / 32, l0 = e0 % 32;
            const uint8_t *ql = b[i].ql + 64 * h + 32 * (k % 2), *qh = b[i].qh + 32 * h;
            float dl = d * (float)b[i].scales[e0 / 16];
            for (int l = l0; l < l0 + 16; l++) {
                int lo = (ql[l] >> (4 * (k / 2))) & 0xf, hi = (qh[l] >> (2 * k)) & 3;
                y[128 * h + 32 * k + l] = dl * (float)((lo | hi << 4) - 32);
            }
        }
    }
}

void kiln__dequant_q8_k(const void *src, float *y, int64_t n) {
    const kiln_block_q8_k *b = src;
    for (int64_t i = 0; i < n / KILN_QK_K; i++, y += KILN_QK_K)
        for (int e = 0; e < KILN_QK_K; e++) y[e] = b[i].d * (float)b[i].qs[e];
}
