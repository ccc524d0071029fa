/*
 * avx2_vec.c - AVX2 elementwise row helpers (references: kernels_vec_ref.c), for the many CPUs with AVX2
 * but no AVX-512. As in avx512_vec.c: add, mul and scale_mul do the reference's float operations lane by
 * lane (its exact bits); sum_sq keeps 8 partial sums (within float rounding of the reference); exp,
 * swiglu, silu and gelu use kiln__exp8 (avx2_exp.h, within 2.5e-7 relative of expf). Tails run the
 * reference's scalar loop, except those four, whose tails go through a zero-padded vector so that every
 * element of a row gets the same exp.
 */
#include "backend/cpu/kernels.h"

#if defined(__x86_64__)
#include "backend/cpu/x86/avx2_exp.h"
#include "backend/cpu/x86/avx2_hsum.h"

#include <immintrin.h>
#include <string.h>

#define KILN_AVX2 __attribute__((target("avx2,fma")))

/* The last n < 8 floats of a row through a vector function f of one or two arguments. */
#define TAIL(n, out, f, ...)                                                                           \
    do {                                                                                               \
        float t_[8];                                                                                   \
        _mm256_storeu_ps(t_, f(__VA_ARGS__));                                                          \
        memcpy(out, t_, (size_t)(n) * sizeof(float));                                                  \
    } while (0)

KILN_AVX2 static inline __m256 load_part(const float *x, int64_t n) {
    float t[8] = {0};
    memcpy(t, x, (size_t)n * sizeof(float));
    return _mm256_loadu_ps(t);
}

KILN_AVX2 static void exp_f32(const float *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, kiln__exp8(_mm256_loadu_ps(x + i)));
    if (i < n) TAIL(n - i, y + i, kiln__exp8, load_part(x + i, n - i));
}

KILN_AVX2 static void add_f32(float *out, const float *x, const float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) out[i] = x[i] + y[i];
}

KILN_AVX2 static void mul_f32(float *out, const float *x, const float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) out[i] = x[i] * y[i];
}

/* g * (1 / (1 + e^-g)) * u, the reference's order of operations. */
KILN_AVX2 static inline __m256 swiglu8(__m256 g, __m256 u) {
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256 sig = _mm256_div_ps(one, _mm256_add_ps(one, kiln__exp8(_mm256_sub_ps(_mm256_setzero_ps(), g))));
    return _mm256_mul_ps(_mm256_mul_ps(g, sig), u);
}

KILN_AVX2 static void swiglu_f32(float *out, const float *g, const float *u, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, swiglu8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
    if (i < n) TAIL(n - i, out + i, swiglu8, load_part(g + i, n - i), load_part(u + i, n - i));
}

/* silu and gelu as in avx512_vec.c (same formulas, same exp polynomial, the same bits): x * 0 below -88
 * and -10 respectively, where the reference's factor is 0. */
KILN_AVX2 static inline __m256 silu8(__m256 x) {
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256 sig = _mm256_div_ps(one, _mm256_add_ps(one, kiln__exp8(_mm256_sub_ps(_mm256_setzero_ps(), x))));
    __m256 far = _mm256_cmp_ps(x, _mm256_set1_ps(-88.0f), _CMP_LT_OQ);
    return _mm256_blendv_ps(_mm256_mul_ps(x, sig), _mm256_mul_ps(x, _mm256_setzero_ps()), far);
}

KILN_AVX2 static inline __m256 gelu8(__m256 x) {
    __m256 inner = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(0.044715f), _mm256_mul_ps(x, x)), x, x);
    __m256 e = kiln__exp8(_mm256_mul_ps(inner, _mm256_set1_ps(-1.5957691216057308f)));
    __m256 g = _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
    __m256 far = _mm256_cmp_ps(x, _mm256_set1_ps(-10.0f), _CMP_LT_OQ);
    return _mm256_blendv_ps(g, _mm256_mul_ps(x, _mm256_setzero_ps()), far);
}

/* Exact GELU, 0.5 x (1 + erf(z)) with z = x / sqrt 2, through Abramowitz and Stegun 7.1.26 for |z|:
 * erfc|z| = t (a1 + t (a2 + t (a3 + t (a4 + t a5)))) e^(-z^2), t = 1 / (1 + p |z|), within 1.5e-7 of
 * erfc (absolute; the shaders use the same formula). 1 + erf(z) is 2 - erfc|z| for z >= 0 and erfc|z|
 * itself below, so negative inputs lose nothing to cancellation; below z = -10 (e^(-z^2) is 0) the
 * result is x * 0, as the reference gives. */
KILN_AVX2 static inline __m256 gelu_erf8(__m256 x) {
    __m256 z = _mm256_mul_ps(x, _mm256_set1_ps(0.70710678118654752f));
    __m256 a = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), z);
    __m256 t = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_fmadd_ps(a, _mm256_set1_ps(0.3275911f), _mm256_set1_ps(1.0f)));
    __m256 p = _mm256_fmadd_ps(t, _mm256_set1_ps(1.061405429f), _mm256_set1_ps(-1.453152027f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.421413741f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.284496736f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.254829592f));
    __m256 erfc = _mm256_mul_ps(_mm256_mul_ps(p, t), kiln__exp8(_mm256_mul_ps(_mm256_sub_ps(_mm256_setzero_ps(), a), a)));
    __m256 neg = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
    __m256 one_plus = _mm256_blendv_ps(_mm256_sub_ps(_mm256_set1_ps(2.0f), erfc), erfc, neg);
    return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), one_plus);
}

KILN_AVX2 static void gelu_erf_f32(float *out, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, gelu_erf8(_mm256_loadu_ps(x + i)));
    if (i < n) TAIL(n - i, out + i, gelu_erf8, load_part(x + i, n - i));
}

KILN_AVX2 static void silu_f32(float *out, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, silu8(_mm256_loadu_ps(x + i)));
    if (i < n) TAIL(n - i, out + i, silu8, load_part(x + i, n - i));
}

KILN_AVX2 static void gelu_f32(float *out, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, gelu8(_mm256_loadu_ps(x + i)));
    if (i < n) TAIL(n - i, out + i, gelu8, load_part(x + i, n - i));
}

KILN_AVX2 static float sum_sq_f32(const float *x, int64_t n) {
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        acc = _mm256_fmadd_ps(v, v, acc);
    }
    if (i < n) {
        __m256 v = load_part(x + i, n - i);
        acc = _mm256_fmadd_ps(v, v, acc);
    }
    return kiln__hsum8(acc);
}

KILN_AVX2 static void scale_mul_f32(float *out, float s, const float *x, const float *w, int64_t n) {
    const __m256 sv = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(sv, _mm256_loadu_ps(x + i)), _mm256_loadu_ps(w + i)));
    for (; i < n; i++) out[i] = (s * x[i]) * w[i];
}

void kiln__cpu_isa_init_avx2_vec(kiln_cpu_isa *t) {
    t->exp_f32 = exp_f32;
    t->add_f32 = add_f32;
    t->mul_f32 = mul_f32;
    t->swiglu_f32 = swiglu_f32;
    t->silu_f32 = silu_f32;
    t->gelu_f32 = gelu_f32;
    t->gelu_erf_f32 = gelu_erf_f32;
    t->sum_sq_f32 = sum_sq_f32;
    t->scale_mul_f32 = scale_mul_f32;
}

#else
void kiln__cpu_isa_init_avx2_vec(kiln_cpu_isa *t) { (void)t; }
#endif
