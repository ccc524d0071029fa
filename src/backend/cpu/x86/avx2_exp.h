/*
 * avx2_exp.h - e^x for 8 float lanes, the AVX2 twin of avx512_exp.h: the same range reduction
 * x = n ln2 + r (two-part ln2), the same degree-7 polynomial, so both levels give the same bits.
 * AVX2 has no vscalefps: 2^n is applied as two exact power-of-two factors 2^(n/2) and 2^(n - n/2),
 * each built in the exponent field, so every factor is a normal float over the whole clamped range and
 * only the last multiply rounds (into the subnormals, where the result is that small), as vscalefps does.
 * Inputs below -104 (including -inf) give 0; above 88.7 the result saturates near FLT_MAX's exponent.
 */
#ifndef KILN_CPU_X86_AVX2_EXP_H
#define KILN_CPU_X86_AVX2_EXP_H

#include <immintrin.h>

/* 2^e for integer lanes e in [-126, 127]. */
__attribute__((target("avx2,fma"), always_inline)) static inline __m256 kiln__pow2i8(__m256i e) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23));
}

__attribute__((target("avx2,fma"), always_inline)) static inline __m256 kiln__exp8(__m256 x) {
    x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.7f)), _mm256_set1_ps(-104.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i ni = _mm256_cvtps_epi32(n);                /* n in [-150, 128]: exact */
    __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    return _mm256_mul_ps(_mm256_mul_ps(p, kiln__pow2i8(n1)), kiln__pow2i8(n2));
}

#endif
