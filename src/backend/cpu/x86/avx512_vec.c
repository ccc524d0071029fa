/*
 * avx512_vec.c - AVX-512 elementwise row helpers (references: kernels_vec_ref.c). add, mul and
 * scale_mul do the reference's float operations lane by lane, so they give its exact bits; sum_sq keeps
 * 16 partial sums (a different order: within float rounding of the reference); exp, swiglu, silu and
 * gelu use kiln__exp16 (within 2.5e-7 relative of expf). Tails are masked loads and stores.
 */
#include "backend/cpu/kernels.h"

#if defined(__x86_64__)
#include "backend/cpu/x86/avx512_exp.h"

#include <immintrin.h>

#define KILN_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))

static inline __mmask16 tail(int64_t n) { return (__mmask16)((1u << n) - 1); }

KILN_AVX512 static void exp_f32(const float *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, kiln__exp16(_mm512_loadu_ps(x + i)));
    if (i < n) _mm512_mask_storeu_ps(y + i, tail(n - i), kiln__exp16(_mm512_maskz_loadu_ps(tail(n - i), x + i)));
}

KILN_AVX512 static void add_f32(float *out, const float *x, const float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, _mm512_add_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    for (; i < n; i++) out[i] = x[i] + y[i];
}

KILN_AVX512 static void mul_f32(float *out, const float *x, const float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    for (; i < n; i++) out[i] = x[i] * y[i];
}

/* g * (1 / (1 + e^-g)) * u, the reference's order of operations. */
KILN_AVX512 static inline __m512 swiglu16(__m512 g, __m512 u) {
    const __m512 one = _mm512_set1_ps(1.0f);
    __m512 sig = _mm512_div_ps(one, _mm512_add_ps(one, kiln__exp16(_mm512_sub_ps(_mm512_setzero_ps(), g))));
    return _mm512_mul_ps(_mm512_mul_ps(g, sig), u);
}

KILN_AVX512 static void swiglu_f32(float *out, const float *g, const float *u, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, swiglu16(_mm512_loadu_ps(g + i), _mm512_loadu_ps(u + i)));
    if (i < n) {
        __mmask16 m = tail(n - i);
        _mm512_mask_storeu_ps(out + i, m, swiglu16(_mm512_maskz_loadu_ps(m, g + i), _mm512_maskz_loadu_ps(m, u + i)));
    }
}

/* silu(x) = x * (1 / (1 + e^-x)), the reference's order; below -88 (and at -inf) x * 0, as the reference's
 * 1 / (1 + inf) = 0 gives (the clamped exp would leave a tiny nonzero factor, and -inf * it = -inf). */
KILN_AVX512 static inline __m512 silu16(__m512 x) {
    const __m512 one = _mm512_set1_ps(1.0f);
    __m512 sig = _mm512_div_ps(one, _mm512_add_ps(one, kiln__exp16(_mm512_sub_ps(_mm512_setzero_ps(), x))));
    __mmask16 far = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-88.0f), _CMP_LT_OQ);
    return _mm512_mask_mul_ps(_mm512_mul_ps(x, sig), far, x, _mm512_setzero_ps());
}

/* GELU, tanh form, as x * sigmoid(2u) = x / (1 + e^(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3): the same
 * function as the reference's 0.5 x (1 + tanh u) without its cancellation in 1 + tanh u for negative x.
 * Below -10 the true value is under 1.2e-37 in magnitude and the result is x * 0 (-0, NaN at -inf), as
 * the reference's tanh = -1 gives; +inf gives +inf and NaN stays NaN. */
KILN_AVX512 static inline __m512 gelu16(__m512 x) {
    __m512 inner = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(0.044715f), _mm512_mul_ps(x, x)), x, x);
    __m512 e = kiln__exp16(_mm512_mul_ps(inner, _mm512_set1_ps(-1.5957691216057308f)));
    __m512 g = _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
    __mmask16 far = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-10.0f), _CMP_LT_OQ);
    return _mm512_mask_mul_ps(g, far, x, _mm512_setzero_ps());
}

KILN_AVX512 static void silu_f32(float *out, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, silu16(_mm512_loadu_ps(x + i)));
    if (i < n) _mm512_mask_storeu_ps(out + i, tail(n - i), silu16(_mm512_maskz_loadu_ps(tail(n - i), x + i)));
}

KILN_AVX512 static void gelu_f32(float *out, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, gelu16(_mm512_loadu_ps(x + i)));
    if (i < n) _mm512_mask_storeu_ps(out + i, tail(n - i), gelu16(_mm512_maskz_loadu_ps(tail(n - i), x + i)));
}

KILN_AVX512 static float sum_sq_f32(const float *x, int64_t n) {
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        acc = _mm512_fmadd_ps(v, v, acc);
    }
    if (i < n) {
        __m512 v = _mm512_maskz_loadu_ps(tail(n - i), x + i);
        acc = _mm512_fmadd_ps(v, v, acc);
    }
    return _mm512_reduce_add_ps(acc);
}

KILN_AVX512 static void scale_mul_f32(float *out, float s, const float *x, const float *w, int64_t n) {
    const __m512 sv = _mm512_set1_ps(s);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_mul_ps(sv, _mm512_loadu_ps(x + i)), _mm512_loadu_ps(w + i)));
    for (; i < n; i++) out[i] = (s * x[i]) * w[i];
}

void kiln__cpu_isa_init_avx512_vec(kiln_cpu_isa *t) {
    t->exp_f32 = exp_f32;
    t->add_f32 = add_f32;
    t->mul_f32 = mul_f32;
    t->swiglu_f32 = swiglu_f32;
    t->silu_f32 = silu_f32;
    t->gelu_f32 = gelu_f32;
    t->sum_sq_f32 = sum_sq_f32;
    t->scale_mul_f32 = scale_mul_f32;
}

#else
void kiln__cpu_isa_init_avx512_vec(kiln_cpu_isa *t) { (void)t; }
#endif
