/*
 * quantize_legacy.c - reference quantizers for the 32-element types Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and
 * MXFP4. They follow ggml's quantize_row_*_ref, which the gguf Python package reproduces; Kiln's output is
 * bit-exact with gguf.quants.quantize (tests/test_quant_quantize.c). One rounding per float operation, in
 * the reference's order, never fused.
 *
 * Q4_0 / Q5_0: d = (value of largest magnitude) / -8 (-16); q = trunc(x / d + 8.5 (16.5)), at most 15 (31).
 * Q4_1 / Q5_1: d = (max - min) / 15 (31), m = min; q = trunc((x - min) / d + 0.5), at most 15 (31).
 * Q8_0: d = max|x| / 127; q = round-half-away(x / d).
 * MXFP4: e = floor(log2(max|x|)) - 2 + 127; each element takes the E2M1 code nearest to x / 2^(e-127).
 * Everywhere "/ d" means "* (1 / d)", with 1 / 0 taken as 0, as the reference does.
 */
#include "tensor/quantize.h"

#include <math.h>
#include <string.h>

/* trunc(f) limited to [0, hi]; NaN gives 0 (the reference's integer casts are only reached in range). */
static int trunc_clamp(float f, int hi) {
    if (!(f > 0)) return 0;
    if (f >= (float)hi) return hi;
    return (int)f;
}

static float inverse_or_zero(float d) { return d != 0 ? 1.0f / d : 0.0f; }

static float signed_absmax32(const float *x) {
    float amax = 0, max = 0;
    for (int j = 0; j < 32; j++) {
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

static void min_max32(const float *x, float *min, float *max) {
    *min = *max = x[0];
    for (int j = 1; j < 32; j++) {
        if (x[j] < *min) *min = x[j];
        if (x[j] > *max) *max = x[j];
    }
}

/* Pack 32 quants of up to 5 bits: low nibbles into qs (element j low, j + 16 high), bit 4 into qh. */
static void pack_nibbles(const int q[32], uint8_t qs[16], uint8_t qh[4]) {
    uint32_t h = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((q[j] & 0xf) | (q[j + 16] & 0xf) << 4);
        h |= (uint32_t)((q[j] >> 4) & 1) << j;
        h |= (uint32_t)((q[j + 16] >> 4) & 1) << (j + 16);
    }
    if (qh)
        for (int k = 0; k < 4; k++) qh[k] = (uint8_t)(h >> (8 * k));
}

/* Symmetric 4/5-bit: d = max / -(half); q = trunc(x * id + half + 0.5). */
static uint16_t quantize_symmetric(const float *x, int half, int q[32]) {
    float d = signed_absmax32(x) / (float)-half, id = inverse_or_zero(d);
    for (int j = 0; j < 32; j++) {
        float t = x[j] * id;
        q[j] = trunc_clamp(t + ((float)half + 0.5f), 2 * half - 1);
    }
    return kiln_fp32_to_fp16(d);
}

/* Affine 4/5-bit: d = (max - min) / levels; q = trunc((x - min) * id + 0.5). */
static void quantize_affine(const float *x, int levels, int q[32], uint16_t *d16, uint16_t *m16) {
    float min, max;
    min_max32(x, &min, &max);
    float d = (max - min) / (float)levels, id = inverse_or_zero(d);
    for (int j = 0; j < 32; j++) {
        float t = (x[j] - min) * id;
        q[j] = trunc_clamp(t + 0.5f, levels);
    }
    *d16 = kiln_fp32_to_fp16(d);
    *m16 = kiln_fp32_to_fp16(min);
}

void kiln__quantize_q4_0(const float *x, void *dst, int64_t n) {
    kiln_block_q4_0 *y = dst;
    int q[32];
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        y[i].d = quantize_symmetric(x, 8, q);
        pack_nibbles(q, y[i].qs, NULL);
    }
}

void kiln__quantize_q5_0(const float *x, void *dst, int64_t n) {
    kiln_block_q5_0 *y = dst;
    int q[32];
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        y[i].d = quantize_symmetric(x, 16, q);
        pack_nibbles(q, y[i].qs, y[i].qh);
    }
}

void kiln__quantize_q4_1(const float *x, void *dst, int64_t n) {
    kiln_block_q4_1 *y = dst;
    int q[32];
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        quantize_affine(x, 15, q, &y[i].d, &y[i].m);
        pack_nibbles(q, y[i].qs, NULL);
    }
}

void kiln__quantize_q5_1(const float *x, void *dst, int64_t n) {
    kiln_block_q5_1 *y = dst;
    int q[32];
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        quantize_affine(x, 31, q, &y[i].d, &y[i].m);
        pack_nibbles(q, y[i].qs, y[i].qh);
    }
}

void kiln__quantize_q8_0(const float *x, void *dst, int64_t n) {
    kiln_block_q8_0 *y = dst;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
        float d = amax / 127.0f, id = inverse_or_zero(d);
        y[i].d = kiln_fp32_to_fp16(d);
        for (int j = 0; j < 32; j++) {
            float v = roundf(x[j] * id); /* |v| <= 127 for finite input */
            y[i].qs[j] = (int8_t)(v > 127.f ? 127 : v < -127.f ? -127 : v == v ? v : 0);
        }
    }
}

void kiln__quantize_mxfp4(const float *x, void *dst, int64_t n) {
    kiln_block_mxfp4 *y = dst;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
        float e = amax > 0 ? floorf(log2f(amax)) - 2 + 127 : 0; /* in [-24, 252] for finite input */
        y[i].e = (uint8_t)(e < 0 ? 0 : e);
        uint32_t bits = y[i].e < 2 ? 0x00200000u << y[i].e : (uint32_t)(y[i].e - 1) << 23;
        float d;
        memcpy(&d, &bits, sizeof d);
        int q[32];
        for (int j = 0; j < 32; j++) {
            int best = 0;
            float best_err = fabsf(d * (float)kiln__mxfp4_values[0] - x[j]);
            for (int k = 1; k < 16; k++) {
                float err = fabsf(d * (float)kiln__mxfp4_values[k] - x[j]);
                if (err < best_err) {
                    best = k;
                    best_err = err;
                }
            }
            q[j] = best;
        }
        pack_nibbles(q, y[i].qs, NULL);
    }
}
