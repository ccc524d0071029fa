/*
 * neon_mm.c - the neon level (aarch64 Advanced SIMD, part of every aarch64 CPU): matmul tiles for F32,
 * F16, BF16, Q8_0 and Q4_0 weights, the q8 activation quantizer, half-float conversions and the float
 * vector helpers of the attention kernel. References: kernels_mm_ref.c.
 *
 * Float tiles keep up to 4 weight rows x 2 activation columns of 4-lane accumulators in registers, so one
 * activation load feeds 4 rows and one weight load feeds 2 columns; F16 and BF16 weights are widened to
 * float exactly as they load. Quantized tiles (neon_qtile.h) use widening multiplies here and sdot where
 * the CPU has it (neon_dot.c). The quantizer gives the reference's exact bytes: the same float multiply,
 * maxNum/minNum clamps that send NaN to -127 as fmaxf/fminf do, and a round-to-nearest-even conversion.
 */
#include "backend/cpu/kernels.h"

#if defined(__aarch64__)
#include "backend/cpu/arm/neon_qtile.h"

#include <math.h>
#include <string.h>

/* Four elements of row type T starting at element i (n of them valid; missing ones read as zero). */
KILN_NEON_INLINE float32x4_t load4(int type, const char *row, int64_t i, int64_t n) {
    if (type == KILN_TYPE_F32) {
        if (n >= 4) return vld1q_f32((const float *)row + i);
        float t[4] = {0};
        memcpy(t, (const float *)row + i, (size_t)n * sizeof(float));
        return vld1q_f32(t);
    }
    uint16x4_t h;
    if (n >= 4) {
        h = vld1_u16((const uint16_t *)row + i);
    } else {
        uint16_t t[4] = {0};
        memcpy(t, (const uint16_t *)row + i, (size_t)n * sizeof(uint16_t));
        h = vld1_u16(t);
    }
    if (type == KILN_TYPE_F16) return vcvt_f32_f16(vreinterpret_f16_u16(h));
    return vreinterpretq_f32_u32(vshll_n_u16(h, 16)); /* bfloat16 is the top half of a float */
}

KILN_NEON_INLINE void tile_float(int type, int R, int C, int64_t k, const char *w, size_t ws, const char *x,
                                 size_t xs, float *out, size_t os) {
    float32x4_t acc[KILN_NEON_RMAX][KILN_NEON_CMAX];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) acc[r][c] = vdupq_n_f32(0.0f);
    for (int64_t i = 0; i < k; i += 4) {
        float32x4_t xv[KILN_NEON_CMAX];
        for (int c = 0; c < C; c++) xv[c] = load4(KILN_TYPE_F32, x + c * xs, i, k - i);
        for (int r = 0; r < R; r++) {
            float32x4_t wv = load4(type, w + r * ws, i, k - i);
            for (int c = 0; c < C; c++) acc[r][c] = vfmaq_f32(acc[r][c], wv, xv[c]);
        }
    }
    for (int c = 0; c < C; c++)
        for (int r = 0; r < R; r++) out[c * os + r] = vaddvq_f32(acc[r][c]);
}

KILN_NEON_INLINE void mm_float(int type, int64_t k, const void *w, size_t ws, int64_t nr, const void *x,
                               size_t xs, int64_t nc, float *out, size_t os) {
    for (int64_t c0 = 0; c0 < nc; c0 += KILN_NEON_CMAX) {
        const char *xc = (const char *)x + c0 * xs;
        bool two = nc - c0 >= 2;
        int64_t r0 = 0;
        for (; r0 + KILN_NEON_RMAX <= nr; r0 += KILN_NEON_RMAX) {
            const char *wr = (const char *)w + r0 * ws;
            if (two) tile_float(type, 4, 2, k, wr, ws, xc, xs, out + c0 * os + r0, os);
            else tile_float(type, 4, 1, k, wr, ws, xc, xs, out + c0 * os + r0, os);
        }
        for (; r0 < nr; r0++) {
            const char *wr = (const char *)w + r0 * ws;
            if (two) tile_float(type, 1, 2, k, wr, ws, xc, xs, out + c0 * os + r0, os);
            else tile_float(type, 1, 1, k, wr, ws, xc, xs, out + c0 * os + r0, os);
        }
    }
}

static void mm_f32(int64_t k, const void *w, size_t ws, int64_t nr, const void *x, size_t xs, int64_t nc,
                   float *out, size_t os) {
    mm_float(KILN_TYPE_F32, k, w, ws, nr, x, xs, nc, out, os);
}

static void mm_f16(int64_t k, const void *w, size_t ws, int64_t nr, const void *x, size_t xs, int64_t nc,
                   float *out, size_t os) {
    mm_float(KILN_TYPE_F16, k, w, ws, nr, x, xs, nc, out, os);
}

static void mm_bf16(int64_t k, const void *w, size_t ws, int64_t nr, const void *x, size_t xs, int64_t nc,
                    float *out, size_t os) {
    mm_float(KILN_TYPE_BF16, k, w, ws, nr, x, xs, nc, out, os);
}

static void mm_q8_0(int64_t k, const void *w, size_t ws, int64_t nr, const void *x, size_t xs, int64_t nc,
                    float *out, size_t os) {
    kiln__neon_mm_quant(KILN_TYPE_Q8_0, false, k, w, ws, nr, x, xs, nc, out, os);
}

static void mm_q4_0(int64_t k, const void *w, size_t ws, int64_t nr, const void *x, size_t xs, int64_t nc,
                    float *out, size_t os) {
    kiln__neon_mm_quant(KILN_TYPE_Q4_0, false, k, w, ws, nr, x, xs, nc, out, os);
}

/* The reference's arithmetic per element (kiln__q8_quantize_ref), eight vectors per block. */
static void quantize_q8(const float *x, void *row, int64_t k) {
    int8_t *q = row;
    float *d = (float *)((char *)row + k);
    int32_t *s = (int32_t *)((char *)row + k + k / KILN_Q8_BLOCK * 4);
    for (int64_t b = 0; b < k / KILN_Q8_BLOCK; b++) {
        const float *xb = x + b * KILN_Q8_BLOCK;
        float32x4_t v[8], m = vdupq_n_f32(0.0f);
        int32x4_t iv[8], sum = vdupq_n_s32(0);
        for (int j = 0; j < 8; j++) {
            v[j] = vld1q_f32(xb + 4 * j);
            m = vmaxnmq_f32(m, vabsq_f32(v[j])); /* maxNum skips NaN as fmaxf does; from 0 as the reference */
        }
        float db = vmaxnmvq_f32(m) / 127.0f, id = db != 0.0f ? 1.0f / db : 0.0f;
        for (int j = 0; j < 8; j++) {
            float32x4_t t = vmulq_n_f32(v[j], id);
            t = vminnmq_f32(vmaxnmq_f32(t, vdupq_n_f32(-127.0f)), vdupq_n_f32(127.0f)); /* NaN -> -127 */
            iv[j] = vcvtnq_s32_f32(t); /* to nearest, ties to even: nearbyintf's default mode */
            sum = vaddq_s32(sum, iv[j]);
        }
        for (int h = 0; h < 2; h++) { /* |q| <= 127: the narrowing moves are exact */
            int16x8_t lo = vcombine_s16(vmovn_s32(iv[4 * h]), vmovn_s32(iv[4 * h + 1]));
            int16x8_t hi = vcombine_s16(vmovn_s32(iv[4 * h + 2]), vmovn_s32(iv[4 * h + 3]));
            vst1q_s8(q + b * KILN_Q8_BLOCK + 16 * h, vcombine_s8(vmovn_s16(lo), vmovn_s16(hi)));
        }
        d[b] = db;
        s[b] = vaddvq_s32(sum);
    }
}

static void f16_to_f32(const uint16_t *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint16x8_t h = vld1q_u16(x + i);
        vst1q_f32(y + i, vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(h))));
        vst1q_f32(y + i + 4, vcvt_f32_f16(vreinterpret_f16_u16(vget_high_u16(h))));
    }
    for (; i < n; i++) y[i] = kiln__neon_h2f(x[i]);
}

static void bf16_to_f32(const uint16_t *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint16x8_t h = vld1q_u16(x + i);
        vst1q_f32(y + i, vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16)));
        vst1q_f32(y + i + 4, vreinterpretq_f32_u32(vshll_high_n_u16(h, 16)));
    }
    for (; i < n; i++) y[i] = kiln_bf16_to_fp32(x[i]);
}

/* Four independent accumulators hide the fused multiply-add latency on long rows. */
static float dot_f32(const float *x, const float *y, int64_t n) {
    float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = vfmaq_f32(a0, vld1q_f32(x + i), vld1q_f32(y + i));
        a1 = vfmaq_f32(a1, vld1q_f32(x + i + 4), vld1q_f32(y + i + 4));
        a2 = vfmaq_f32(a2, vld1q_f32(x + i + 8), vld1q_f32(y + i + 8));
        a3 = vfmaq_f32(a3, vld1q_f32(x + i + 12), vld1q_f32(y + i + 12));
    }
    for (; i < n; i += 4) {
        float32x4_t xv = load4(KILN_TYPE_F32, (const char *)x, i, n - i);
        a0 = vfmaq_f32(a0, xv, load4(KILN_TYPE_F32, (const char *)y, i, n - i));
    }
    return vaddvq_f32(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3)));
}

static void axpy_f32(float *y, float a, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vfmaq_n_f32(vld1q_f32(y + i), vld1q_f32(x + i), a));
    for (; i < n; i++) y[i] = fmaf(a, x[i], y[i]); /* fused like the vector lanes */
}

static void scale_f32(float *y, float a, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vmulq_n_f32(vld1q_f32(y + i), a));
    for (; i < n; i++) y[i] *= a;
}

void kiln__cpu_isa_init_neon(kiln_cpu_isa *t) {
    t->mm[KILN_TYPE_F32] = mm_f32;
    t->mm[KILN_TYPE_F16] = mm_f16;
    t->mm[KILN_TYPE_BF16] = mm_bf16;
    t->mm[KILN_TYPE_Q8_0] = mm_q8_0;
    t->mm[KILN_TYPE_Q4_0] = mm_q4_0;
    t->quantize_q8 = quantize_q8;
    t->f16_to_f32 = f16_to_f32;
    t->bf16_to_f32 = bf16_to_f32;
    t->dot_f32 = dot_f32;
    t->axpy_f32 = axpy_f32;
    t->scale_f32 = scale_f32;
    kiln__cpu_isa_init_neon_vec(t);
    if (kiln__cpu_features()->asimddp) kiln__cpu_isa_init_neon_dot(t);
}

#else
/* Not aarch64: the level is never supported, so its table is never filled. */
void kiln__cpu_isa_init_neon(kiln_cpu_isa *t) { (void)t; }
#endif
