/*
 * quantize_nonlinear.c - reference quantizers for IQ4_NL and IQ4_XS, the 4-bit types whose codes index
 * the non-linear table kiln__iq4nl_values. They follow the published algorithm of llama.cpp's
 * quantize_row_iq4_nl_impl without importance weights (weights x^2) and with its 7 trials per side:
 * for each group of 32, start from d = max / T[0], pick the nearest table entry for each x / d, fit the
 * least-squares d for those codes, then try 14 other starting scales (T[0] + t) / max and keep the best.
 * IQ4_NL stores that d per 32 elements; IQ4_XS stores one fp16 super-scale per 256 and a 6-bit signed
 * multiplier per group of 32, re-picking the codes against the stored group scale.
 */
#include "tensor/quantize.h"

#include <math.h>
#include <string.h>

#define NTRY 7

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* The best scale for one group of 32 (0 for an all-zero group); L receives the codes for it. */
static float fit_group(const float *xb, uint8_t *Lb) {
    const int8_t *values = kiln__iq4nl_values;
    float weight[32], amax = 0, max = 0;
    for (int j = 0; j < 32; j++) {
        weight[j] = xb[j] * xb[j];
        if (fabsf(xb[j]) > amax) {
            amax = fabsf(xb[j]);
            max = xb[j];
        }
    }
    if (amax < 1e-15f) {
        memset(Lb, 0, 32);
        return 0.f;
    }
    float d = -max / values[0], id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; j++) {
        int l = kiln__best_index_int8(16, values, id * xb[j]);
        Lb[j] = (uint8_t)l;
        float q = values[l], w = weight[j];
        sumqx += w * q * xb[j];
        sumq2 += w * q * q;
    }
    d = sumqx / sumq2;
    float best = d * sumqx;
    for (int itry = -NTRY; itry <= NTRY; itry++) {
        id = (itry + values[0]) / max;
        sumqx = sumq2 = 0;
        for (int j = 0; j < 32; j++) {
            int l = kiln__best_index_int8(16, values, id * xb[j]);
            float q = values[l], w = weight[j];
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

/* The nearest table codes of a group for scale d (d = 0 maps every element to the code nearest 0). */
static void pick_codes(const float *xb, float d, uint8_t *Lb) {
    float id = d != 0 ? 1 / d : 0;
    for (int j = 0; j < 32; j++) Lb[j] = (uint8_t)kiln__best_index_int8(16, kiln__iq4nl_values, id * xb[j]);
}

static void pack_groups(const uint8_t *L, uint8_t *qs, int n_groups) {
    for (int g = 0; g < n_groups; g++)
        for (int j = 0; j < 16; j++) qs[16 * g + j] = (uint8_t)(L[32 * g + j] | L[32 * g + 16 + j] << 4);
}

void kiln__quantize_iq4_nl(const float *x, void *dst, int64_t n) {
    kiln_block_iq4_nl *y = dst;
    uint8_t L[32];
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float d = fit_group(x, L);
        y[i].d = kiln_fp32_to_fp16(d);
        pick_codes(x, d, L);
        pack_groups(L, y[i].qs, 1);
    }
}

void kiln__quantize_iq4_xs(const float *x, void *dst, int64_t n) {
    kiln_block_iq4_xs *y = dst;
    uint8_t L[KILN_QK_K];
    float scales[8];
    for (int64_t i = 0; i < n / KILN_QK_K; i++, x += KILN_QK_K) {
        float max_scale = 0, amax_scale = 0;
        for (int g = 0; g < 8; g++) {
            scales[g] = fit_group(x + 32 * g, L + 32 * g);
            if (fabsf(scales[g]) > amax_scale) {
                amax_scale = fabsf(scales[g]);
                max_scale = scales[g];
            }
        }
        float d = -max_scale / 32, id = d != 0 ? 1 / d : 0;
        y[i].d = kiln_fp32_to_fp16(d);
        y[i].scales_h = 0;
        memset(y[i].scales_l, 0, sizeof y[i].scales_l);
        for (int g = 0; g < 8; g++) {
            int l = clampi(kiln__nearest_int(id * scales[g]), -32, 31);
            pick_codes(x + 32 * g, d * l, L + 32 * g);
            l += 32;
            y[i].scales_l[g / 2] |= (uint8_t)((l & 0xf) << (4 * (g % 2)));
            y[i].scales_h |= (uint16_t)((l >> 4) << (2 * g));
        }
        pack_groups(L, y[i].qs, 8);
    }
}
