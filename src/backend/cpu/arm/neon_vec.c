/*
 * neon_vec.c - neon elementwise row helpers and exp (references: kernels_vec_ref.c). add, mul and
 * scale_mul do the reference's float operations lane by lane, so they give its exact bits; sum_sq keeps
 * 4-lane partial sums (another order: within float rounding of the reference); exp, swiglu, silu and gelu
 * use exp4 below (within 2.5e-7 relative of expf). Tails run the reference's scalar expressions, or exp4
 * on a zero-padded vector.
 *
 * exp4: range reduction x = n ln2 + r with a two-part ln2 (|r| <= ln2 / 2), the degree-7 Taylor
 * polynomial of e^r (truncation r^8 / 8! < 5e-9, below float precision), then scaling by 2^n in two exact
 * power-of-two factors, 2^(n/2) and 2^(n - n/2), because n reaches -150 and 128 where a single float
 * 2^n does not exist; only the second multiply rounds, so subnormal results are correctly rounded.
 * Inputs are clamped to [-104, 88.7]: -inf and anything below -104 give 0; 88.7 stays below FLT_MAX.
 */
#include "backend/cpu/kernels.h"

#if defined(__aarch64__)
#include "backend/cpu/arm/neon.h"

#include <string.h>

static inline float32x4_t pow2i(int32x4_t e) { /* 2^e for -126 <= e <= 127 */
    return vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(e, vdupq_n_s32(127)), 23));
}

static inline float32x4_t exp4(float32x4_t x) {
    x = vmaxq_f32(vminq_f32(x, vdupq_n_f32(88.7f)), vdupq_n_f32(-104.0f));
    float32x4_t n = vrndnq_f32(vmulq_n_f32(x, 1.44269504088896341f));
    float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(0.693359375f));
    r = vfmsq_f32(r, n, vdupq_n_f32(-2.12194440e-4f));
    float32x4_t p = vdupq_n_f32(1.0f / 5040.0f);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 720.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 120.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 24.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 6.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(0.5f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    int32x4_t ni = vcvtq_s32_f32(n), n1 = vshrq_n_s32(ni, 1); /* n is integral: the conversion is exact */
    return vmulq_f32(vmulq_f32(p, pow2i(n1)), pow2i(vsubq_s32(ni, n1)));
}

/* Up to 4 floats zero-padded, and back. */
static inline float32x4_t load_part(const float *x, int64_t n) {
    float t[4] = {0};
    memcpy(t, x, (size_t)n * sizeof(float));
    return vld1q_f32(t);
}

static inline void store_part(float *y, float32x4_t v, int64_t n) {
    float t[4];
    vst1q_f32(t, v);
    memcpy(y, t, (size_t)n * sizeof(float));
}

static void exp_f32(const float *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, exp4(vld1q_f32(x + i)));
    if (i < n) store_part(y + i, exp4(load_part(x + i, n - i)), n - i);
}

static void add_f32(float *out, const float *x, const float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(out + i, vaddq_f32(vld1q_f32(x + i), vld1q_f32(y + i)));
    for (; i < n; i++) out[i] = x[i] + y[i];
}

static void mul_f32(float *out, const float *x, const float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(out + i, vmulq_f32(vld1q_f32(x + i), vld1q_f32(y + i)));
    for (; i < n; i++) out[i] = x[i] * y[i];
}

/* g * (1 / (1 + e^-g)) * u, the reference's order of operations. */
static inline float32x4_t swiglu4(float32x4_t g, float32x4_t u) {
    const float32x4_t one = vdupq_n_f32(1.0f);
    float32x4_t sig = vdivq_f32(one, vaddq_f32(one, exp4(vnegq_f32(g))));
    return vmulq_f32(vmulq_f32(g, sig), u);
}

static void swiglu_f32(float *out, const float *g, const float *u, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(out + i, swiglu4(vld1q_f32(g + i), vld1q_f32(u + i)));
    if (i < n) store_part(out + i, swiglu4(load_part(g + i, n - i), load_part(u + i, n - i)), n - i);
}

/* silu and gelu as in x86/avx512_vec.c (same formulas): x * 0 below -88 and -10 respectively, where the
 * reference's factor is 0 (so -inf gives NaN as there), +inf gives +inf, NaN stays NaN. */
static inline float32x4_t silu4(float32x4_t x) {
    const float32x4_t one = vdupq_n_f32(1.0f);
    float32x4_t sig = vdivq_f32(one, vaddq_f32(one, exp4(vnegq_f32(x))));
    uint32x4_t far = vcltq_f32(x, vdupq_n_f32(-88.0f));
    return vbslq_f32(far, vmulq_n_f32(x, 0.0f), vmulq_f32(x, sig));
}

static inline float32x4_t gelu4(float32x4_t x) {
    float32x4_t inner = vfmaq_f32(x, vmulq_n_f32(vmulq_f32(x, x), 0.044715f), x);
    float32x4_t e = exp4(vmulq_n_f32(inner, -1.5957691216057308f));
    float32x4_t g = vdivq_f32(x, vaddq_f32(vdupq_n_f32(1.0f), e));
    uint32x4_t far = vcltq_f32(x, vdupq_n_f32(-10.0f));
    return vbslq_f32(far, vmulq_n_f32(x, 0.0f), g);
}

static void silu_f32(float *out, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(out + i, silu4(vld1q_f32(x + i)));
    if (i < n) store_part(out + i, silu4(load_part(x + i, n - i)), n - i);
}

static void gelu_f32(float *out, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(out + i, gelu4(vld1q_f32(x + i)));
    if (i < n) store_part(out + i, gelu4(load_part(x + i, n - i)), n - i);
}

static float sum_sq_f32(const float *x, int64_t n) {
    float32x4_t acc = vdupq_n_f32(0.0f);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        float32x4_t v = vld1q_f32(x + i);
        acc = vfmaq_f32(acc, v, v);
    }
    if (i < n) {
        float32x4_t v = load_part(x + i, n - i);
        acc = vfmaq_f32(acc, v, v);
    }
    return vaddvq_f32(acc);
}

static void scale_mul_f32(float *out, float s, const float *x, const float *w, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(out + i, vmulq_f32(vmulq_n_f32(vld1q_f32(x + i), s), vld1q_f32(w + i)));
    for (; i < n; i++) out[i] = (s * x[i]) * w[i];
}

void kiln__cpu_isa_init_neon_vec(kiln_cpu_isa *t) {
    t->exp_f32 = exp_f32;
    t->add_f32 = add_f32;
    t->mul_f32 = mul_f32;
    t->swiglu_f32 = swiglu_f32;
    t->silu_f32 = silu_f32;
    t->gelu_f32 = gelu_f32;
    t->sum_sq_f32 = sum_sq_f32;
    t->scale_mul_f32 = scale_mul_f32;
}

#endif
