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

/* One super-block of a weight row, decoded once for all columns: quants as small integers, and the float
 * sub-block factors formed as the dequantizer forms them. */
typedef struct superblock {
    int8_t q[KILN_QK_K]; /* Q4_K: 0..15; Q6_K: q - 32 */
    float dl[16];        /* d * sc per sub-block: 8 of 32 elements (Q4_K) or 16 of 16 (Q6_K) */
    float ml[8];         /* Q4_K: dmin * m per sub-block */
} superblock;

static void decode_q4_k(const kiln_block_q4_k *blk, superblock *sb) {
    float d = kiln_fp16_to_fp32(blk->d), dmin = kiln_fp16_to_fp32(blk->dmin);
    for (int g = 0; g < 8; g++) {
        const uint8_t *q = blk->qs + 32 * (g / 2); /* sub-block 2c: low nibbles, 2c + 1: high */
        uint8_t sc, m;
        for (int l = 0; l < 32; l++) sb->q[32 * g + l] = (int8_t)((q[l] >> (4 * (g % 2))) & 0xf);
        kiln__kquant_scale_min(g, blk->scales, &sc, &m);
        sb->dl[g] = d * (float)sc;
        sb->ml[g] = dmin * (float)m;
    }
}

/* Element 128h + 32k + l from the ql/qh layout the dequantizer documents. */
static void decode_q6_k(const kiln_block_q6_k *blk, superblock *sb) {
    float d = kiln_fp16_to_fp32(blk->d);
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < 32; l++) {
                int lo = (blk->ql[64 * h + 32 * (k % 2) + l] >> (4 * (k / 2))) & 0xf;
                int hi = (blk->qh[32 * h + l] >> (2 * k)) & 3;
                sb->q[128 * h + 32 * k + l] = (int8_t)((lo | hi << 4) - 32);
            }
    for (int j = 0; j < 16; j++) sb->dl[j] = d * (float)blk->scales[j];
}

static int32_t idot(const int8_t *a, const int8_t *b, int n) {
    int32_t s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* The terms of one super-block (q8 blocks b0..b0 + 7) with one q8 activation row, added to *sum block
 * by block. */
static void add_terms(kiln_type type, const superblock *sb, int64_t k, int64_t b0, const void *xrow,
                      float *sum) {
    const float *dx = kiln__q8_row_d(xrow, k);
    const int32_t *s = kiln__q8_row_s(xrow, k);
    for (int g = 0; g < 8; g++) {
        int64_t b = b0 + g;
        const int8_t *xb = (const int8_t *)xrow + b * KILN_Q8_BLOCK, *q = sb->q + 32 * g;
        if (type == KILN_TYPE_Q4_K) {
            int32_t isum = idot(q, xb, 32);
            *sum += dx[b] * (sb->dl[g] * (float)isum - sb->ml[g] * (float)s[b]);
        } else {
            int32_t i0 = idot(q, xb, 16), i1 = idot(q + 16, xb + 16, 16);
            *sum += dx[b] * (sb->dl[2 * g] * (float)i0 + sb->dl[2 * g + 1] * (float)i1);
        }
    }
}

static void mm_kquant(kiln_type type, int64_t k, const void *w, size_t ws, int64_t nr, const void *x,
                      size_t xs, int64_t nc, float *out, size_t os) {
    size_t bb = type == KILN_TYPE_Q4_K ? sizeof(kiln_block_q4_k) : sizeof(kiln_block_q6_k);
    superblock sb;
    for (int64_t r = 0; r < nr; r++) {
        for (int64_t c = 0; c < nc; c++) out[c * os + r] = 0.0f;
        for (int64_t i = 0; i < k / KILN_QK_K; i++) {
            const void *blk = (const char *)w + r * ws + (size_t)i * bb;
            if (type == KILN_TYPE_Q4_K) decode_q4_k(blk, &sb);
            else decode_q6_k(blk, &sb);
            for (int64_t c = 0; c < nc; c++)
                add_terms(type, &sb, k, i * 8, (const char *)x + c * xs, &out[c * os + r]);
        }
    }
}

static void mm_q4_k(int64_t k, const void *w, size_t ws, int64_t nr, const void *x, size_t xs, int64_t nc,
                    float *out, size_t os) {
    mm_kquant(KILN_TYPE_Q4_K, k, w, ws, nr, x, xs, nc, out, os);
}

static void mm_q6_k(int64_t k, const void *w, size_t ws, int64_t nr, const void *x, size_t xs, int64_t nc,
                    float *out, size_t os) {
    mm_kquant(KILN_TYPE_Q6_K, k, w, ws, nr, x, xs, nc, out, os);
}

void kiln__cpu_isa_init_kquants_ref(kiln_cpu_isa *t) {
    t->mm[KILN_TYPE_Q4_K] = mm_q4_k;
    t->mm[KILN_TYPE_Q6_K] = mm_q6_k;
}
