/*
 * kernels_mm_kquants_ref.c - scalar reference matmul tiles (kiln_mm_fn, kernels.h) for Q4_K and Q6_K
 * weights times q8 activation rows. They define the arithmetic the packed SIMD tiles are tested against.
 *
 * A K-quant super-block (256 elements) covers 8 q8 blocks of 32. For q8 block b (activation scale dx[b],
 * quants qx, block sum s[b]) the reference forms exact integer dots, then one float term per block, and
 * sums the terms in float, block after block:
 *   Q4_K  sub-block g = b % 8 has 6-bit scale sc and min m; with dl = d * sc and ml = dmin * m (in float,
 *         exactly as the dequantizer forms them) and I = sum q * qx over the 32 elements (q = 0..15),
 *             term = dx[b] * (dl * I - ml * s[b])
 *         which is sum (dl q - ml) x with x = dx qx: the min term needs only the block sum.
 *   Q6_K  the block holds sub-blocks j = 2 (b % 8) and j + 1 (16 elements each, int8 scales sc); with
 *         dl_j = d * sc_j and I_j = sum (q - 32) * qx over the sub-block (q = 0..63),
 *             term = dx[b] * (dl_j * I_j + dl_j+1 * I_j+1)
 *         The - 32 offset is applied inside the exact integer dot (the SIMD tiles use half-block sums of
 *         the activations instead; both give the same integer).
 * Everything before the float term is exact, so a SIMD tile differs from these only by the rounding of
 * the per-block products and the order of the float sums.
 */
#include "backend/cpu/kernels.h"

#include "tensor/types.h"

static float dot_q4_k(int64_t k, const kiln_block_q4_k *wb, const void *xrow) {
    const int8_t *qx = xrow;
    const float *dx = kiln__q8_row_d(xrow, k);
    const int32_t *s = kiln__q8_row_s(xrow, k);
    float sum = 0.0f;
    for (int64_t i = 0; i < k / KILN_QK_K; i++) {
        float d = kiln_fp16_to_fp32(wb[i].d), dmin = kiln_fp16_to_fp32(wb[i].dmin);
        for (int g = 0; g < 8; g++) {
            int64_t b = i * 8 + g;
            const uint8_t *q = wb[i].qs + 32 * (g / 2); /* sub-block 2c: low nibbles, 2c + 1: high */
            const int8_t *xb = qx + b * KILN_Q8_BLOCK;
            int shift = 4 * (g % 2);
            int32_t isum = 0;
            uint8_t sc, m;
            for (int l = 0; l < 32; l++) isum += ((q[l] >> shift) & 0xf) * xb[l];
            kiln__kquant_scale_min(g, wb[i].scales, &sc, &m);
            float dl = d * (float)sc, ml = dmin * (float)m;
            sum += dx[b] * (dl * (float)isum - ml * (float)s[b]);
        }
    }
    return sum;
}

/* Q6_K element e of a super-block (0..255), q - 32, from the ql/qh layout the dequantizer documents. */
static int q6_value(const kiln_block_q6_k *blk, int e) {
    int h = e / 128, k = (e % 128) / 32, l = e % 32;
    int lo = (blk->ql[64 * h + 32 * (k % 2) + l] >> (4 * (k / 2))) & 0xf;
    int hi = (blk->qh[32 * h + l] >> (2 * k)) & 3;
    return (lo | hi << 4) - 32;
}

static float dot_q6_k(int64_t k, const kiln_block_q6_k *wb, const void *xrow) {
    const int8_t *qx = xrow;
    const float *dx = kiln__q8_row_d(xrow, k);
    float sum = 0.0f;
    for (int64_t i = 0; i < k / KILN_QK_K; i++) {
        float d = kiln_fp16_to_fp32(wb[i].d);
        for (int g = 0; g < 8; g++) {
            int64_t b = i * 8 + g;
            int32_t isum[2] = {0, 0};
            for (int e = 0; e < 32; e++)
                isum[e / 16] += q6_value(&wb[i], 32 * g + e) * qx[b * KILN_Q8_BLOCK + e];
            float dl0 = d * (float)wb[i].scales[2 * g], dl1 = d * (float)wb[i].scales[2 * g + 1];
            sum += dx[b] * (dl0 * (float)isum[0] + dl1 * (float)isum[1]);
        }
    }
    return sum;
}

static void mm_q4_k(int64_t k, const void *w, size_t ws, int64_t nr, const void *x, size_t xs, int64_t nc,
                    float *out, size_t os) {
    for (int64_t c = 0; c < nc; c++)
        for (int64_t r = 0; r < nr; r++)
            out[c * os + r] = dot_q4_k(k, (const kiln_block_q4_k *)((const char *)w + r * ws),
                                       (const char *)x + c * xs);
}

static void mm_q6_k(int64_t k, const void *w, size_t ws, int64_t nr, const void *x, size_t xs, int64_t nc,
                    float *out, size_t os) {
    for (int64_t c = 0; c < nc; c++)
        for (int64_t r = 0; r < nr; r++)
            out[c * os + r] = dot_q6_k(k, (const kiln_block_q6_k *)((const char *)w + r * ws),
                                       (const char *)x + c * xs);
}

void kiln__cpu_isa_init_kquants_ref(kiln_cpu_isa *t) {
    t->mm[KILN_TYPE_Q4_K] = mm_q4_k;
    t->mm[KILN_TYPE_Q6_K] = mm_q6_k;
}
