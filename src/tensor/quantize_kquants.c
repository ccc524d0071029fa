/*
 * quantize_kquants.c - reference quantizers for the K-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and for Q8_K
 * (the activation type of K-quant dot products), following the published algorithm of llama.cpp's
 * quantize_row_*_ref with importance weights off (which is what llama_model_quantize does without an
 * imatrix):
 *  - Q2_K: 16 groups of 16, each fitted with make_qkx2_quants (nmax 3, weights |x|, absolute error); the
 *    group scales and mins are quantized to 4 bits against the largest of each.
 *  - Q3_K: 16 groups of 16, make_q3_quants (nmax 4, RMSE refinement); 6-bit signed group scales.
 *  - Q4_K / Q5_K: 8 groups of 32, make_qkx2_quants (nmax 15 / 31, weights mean|x| + |x|); 6-bit scales
 *    and mins.
 *  - Q6_K: 16 groups of 16, make_qx_quants (nmax 32, weights x^2); 8-bit signed group scales.
 * After the group scales are quantized, every element is re-quantized against its final scale (and min),
 * so the stored quants are the best for the stored scales.
 */
#include "tensor/quantize.h"

#include <math.h>
#include <string.h>

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Pack 256 values of 2 bits: per 128 elements, 32 bytes holding elements l, l+32, l+64, l+96. */
static void pack_crumbs(const uint8_t *L, uint8_t *qs) {
    for (int j = 0; j < KILN_QK_K; j += 128, qs += 32)
        for (int l = 0; l < 32; l++)
            qs[l] = (uint8_t)(L[j + l] | L[j + l + 32] << 2 | L[j + l + 64] << 4 | L[j + l + 96] << 6);
}

void kiln__quantize_q2_k(const float *x, void *dst, int64_t n) {
    kiln_block_q2_k *y = dst;
    uint8_t L[KILN_QK_K], Laux[16];
    float weights[16], mins[16], scales[16];
    for (int64_t i = 0; i < n / KILN_QK_K; i++, x += KILN_QK_K) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < 16; j++) {
            for (int l = 0; l < 16; l++) weights[l] = fabsf(x[16 * j + l]);
            scales[j] = kiln__make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f,
                                               15, true);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        memset(y[i].scales, 0, sizeof y[i].scales);
        y[i].d = y[i].dmin = 0;
        if (max_scale > 0) {
            float iscale = 15.f / max_scale;
            for (int j = 0; j < 16; j++) y[i].scales[j] = (uint8_t)clampi(kiln__nearest_int(iscale * scales[j]), 0, 15);
            y[i].d = kiln_fp32_to_fp16(max_scale / 15.f);
        }
        if (max_min > 0) {
            float iscale = 15.f / max_min;
            for (int j = 0; j < 16; j++)
                y[i].scales[j] |= (uint8_t)(clampi(kiln__nearest_int(iscale * mins[j]), 0, 15) << 4);
            y[i].dmin = kiln_fp32_to_fp16(max_min / 15.f);
        }
        for (int j = 0; j < 16; j++) {
            float d = kiln_fp16_to_fp32(y[i].d) * (y[i].scales[j] & 0xf);
            if (!d) continue;
            float dm = kiln_fp16_to_fp32(y[i].dmin) * (y[i].scales[j] >> 4);
            for (int ii = 0; ii < 16; ii++)
                L[16 * j + ii] = (uint8_t)clampi(kiln__nearest_int((x[16 * j + ii] + dm) / d), 0, 3);
        }
        pack_crumbs(L, y[i].qs);
    }
}

/* Pack the sixteen 6-bit Q3_K scales (already offset by 32). */
static void pack_q3_k_scales(const int ls[16], uint8_t sc[12]) {
    memset(sc, 0, 12);
    for (int j = 0; j < 16; j++) {
        int l = ls[j];
        if (j < 8) sc[j] = (uint8_t)(l & 0xf);
        else sc[j - 8] |= (uint8_t)((l & 0xf) << 4);
        sc[j % 4 + 8] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
    }
}

void kiln__quantize_q3_k(const float *x, void *dst, int64_t n) {
    kiln_block_q3_k *y = dst;
    int8_t L[KILN_QK_K];
    float scales[16];
    int ls[16];
    for (int64_t i = 0; i < n / KILN_QK_K; i++, x += KILN_QK_K) {
        float max_scale = 0, amax = 0;
        for (int j = 0; j < 16; j++) {
            scales[j] = kiln__make_q3_quants(16, 4, x + 16 * j, L + 16 * j, true);
            if (fabsf(scales[j]) > amax) {
                amax = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }
        memset(ls, 0, sizeof ls);
        y[i].d = 0;
        if (max_scale != 0) {
            float iscale = -32.f / max_scale;
            for (int j = 0; j < 16; j++) ls[j] = clampi(kiln__nearest_int(iscale * scales[j]), -32, 31) + 32;
            y[i].d = kiln_fp32_to_fp16(1 / iscale);
        }
        pack_q3_k_scales(ls, y[i].scales);
        for (int j = 0; j < 16; j++) {
            float d = kiln_fp16_to_fp32(y[i].d) * (float)(ls[j] - 32);
            if (max_scale == 0 || !d) continue;
            for (int ii = 0; ii < 16; ii++)
                L[16 * j + ii] = (int8_t)(clampi(kiln__nearest_int(x[16 * j + ii] / d), -4, 3) + 4);
        }
        memset(y[i].hmask, 0, sizeof y[i].hmask);
        uint8_t Lu[KILN_QK_K];
        for (int j = 0; j < KILN_QK_K; j++) {
            int l = L[j];
            if (l > 3) {
                y[i].hmask[j % 32] |= (uint8_t)(1u << (j / 32));
                l -= 4;
            }
            Lu[j] = (uint8_t)l;
        }
        pack_crumbs(Lu, y[i].qs);
    }
}

/* Q4_K and Q5_K: fit the 8 groups of 32, quantize their scales and mins to 6 bits, pack them, and
 * re-quantize every element to [0, nmax] against the stored scale and min. */
static void quantize_q45_k_block(const float *x, int nmax, float rmin, int nstep, uint16_t *d16, uint16_t *dmin16,
                                 uint8_t packed[12], uint8_t L[KILN_QK_K]) {
    uint8_t Laux[32];
    float weights[32], mins[8], scales[8];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = kiln__make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f,
                                           nstep, false);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < 8; j++) {
        int ls = clampi(kiln__nearest_int(inv_scale * scales[j]), 0, 63);
        int lm = clampi(kiln__nearest_int(inv_min * mins[j]), 0, 63);
        if (j < 4) {
            packed[j] = (uint8_t)ls;
            packed[j + 4] = (uint8_t)lm;
        } else {
            packed[j + 4] = (uint8_t)((ls & 0xf) | ((lm & 0xf) << 4));
            packed[j - 4] |= (uint8_t)((ls >> 4) << 6);
            packed[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *d16 = kiln_fp32_to_fp16(max_scale / 63.f);
    *dmin16 = kiln_fp32_to_fp16(max_min / 63.f);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        kiln__kquant_scale_min(j, packed, &sc, &m);
        float d = kiln_fp16_to_fp32(*d16) * sc;
        if (!d) continue;
        float dm = kiln_fp16_to_fp32(*dmin16) * m;
        for (int ii = 0; ii < 32; ii++)
            L[32 * j + ii] = (uint8_t)clampi(kiln__nearest_int((x[32 * j + ii] + dm) / d), 0, nmax);
    }
}

void kiln__quantize_q4_k(const float *x, void *dst, int64_t n) {
    kiln_block_q4_k *y = dst;
    uint8_t L[KILN_QK_K];
    for (int64_t i = 0; i < n / KILN_QK_K; i++, x += KILN_QK_K) {
        memset(y[i].scales, 0, sizeof y[i].scales);
        quantize_q45_k_block(x, 15, -1.f, 20, &y[i].d, &y[i].dmin, y[i].scales, L);
        uint8_t *q = y[i].qs;
        for (int j = 0; j < KILN_QK_K; j += 64, q += 32)
            for (int l = 0; l < 32; l++) q[l] = (uint8_t)(L[j + l] | L[j + l + 32] << 4);
    }
}

void kiln__quantize_q5_k(const float *x, void *dst, int64_t n) {
    kiln_block_q5_k *y = dst;
    uint8_t L[KILN_QK_K];
    for (int64_t i = 0; i < n / KILN_QK_K; i++, x += KILN_QK_K) {
        memset(y[i].scales, 0, sizeof y[i].scales);
        quantize_q45_k_block(x, 31, -0.5f, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
        memset(y[i].qh, 0, sizeof y[i].qh);
        uint8_t *q = y[i].qs;
        for (int j = 0; j < KILN_QK_K; j += 64, q += 32) {
            for (int l = 0; l < 32; l++) {
                int l1 = L[j + l], l2 = L[j + l + 32];
                if (l1 > 15) y[i].qh[l] |= (uint8_t)(1u << (j / 32));
                if (l2 > 15) y[i].qh[l] |= (uint8_t)(2u << (j / 32));
                q[l] = (uint8_t)((l1 & 0xf) | (l2 & 0xf) << 4);
            }
        }
    }
}

void kiln__quantize_q6_k(const float *x, void *dst, int64_t n) {
    kiln_block_q6_k *y = dst;
    int8_t L[KILN_QK_K];
    float scales[16];
    for (int64_t i = 0; i < n / KILN_QK_K; i++, x += KILN_QK_K) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < 16; ib++) {
            scales[ib] = kiln__make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib, 1);
            if (fabsf(scales[ib]) > max_abs_scale) {
                max_abs_scale = fabsf(scales[ib]);
                max_scale = scales[ib];
            }
        }
        if (max_abs_scale < 1e-15f) { /* ggml's GROUP_MAX_EPS */
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        float iscale = -128.f / max_scale;
        y[i].d = kiln_fp32_to_fp16(1 / iscale);
        for (int ib = 0; ib < 16; ib++) y[i].scales[ib] = (int8_t)clampi(kiln__nearest_int(iscale * scales[ib]), -128, 127);
        for (int j = 0; j < 16; j++) {
            float d = kiln_fp16_to_fp32(y[i].d) * y[i].scales[j];
            if (!d) continue;
            for (int ii = 0; ii < 16; ii++)
                L[16 * j + ii] = (int8_t)(clampi(kiln__nearest_int(x[16 * j + ii] / d), -32, 31) + 32);
        }
        for (int j = 0; j < KILN_QK_K; j += 128) {
            uint8_t *ql = y[i].ql + j / 2, *qh = y[i].qh + j / 4;
            for (int l = 0; l < 32; l++) {
                int q1 = L[j + l], q2 = L[j + l + 32], q3 = L[j + l + 64], q4 = L[j + l + 96];
                ql[l] = (uint8_t)((q1 & 0xf) | (q3 & 0xf) << 4);
                ql[l + 32] = (uint8_t)((q2 & 0xf) | (q4 & 0xf) << 4);
                qh[l] = (uint8_t)((q1 >> 4) | (q2 >> 4) << 2 | (q3 >> 4) << 4 | (q4 >> 4) << 6);
            }
        }
    }
}

void kiln__quantize_q8_k(const float *x, void *dst, int64_t n) {
    kiln_block_q8_k *y = dst;
    for (int64_t i = 0; i < n / KILN_QK_K; i++, x += KILN_QK_K) {
        float max = 0, amax = 0;
        for (int j = 0; j < KILN_QK_K; j++) {
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        memset(&y[i], 0, sizeof y[i]);
        if (amax == 0) continue;
        float iscale = -127.f / max;
        for (int j = 0; j < KILN_QK_K; j++) {
            y[i].qs[j] = (int8_t)clampi(kiln__nearest_int(iscale * x[j]), -128, 127);
            y[i].bsums[j / 16] = (int16_t)(y[i].bsums[j / 16] + y[i].qs[j]);
        }
        y[i].d = 1 / iscale;
    }
}
