/*
 * avx512_exp.h - e^x for 16 float lanes, shared by the AVX-512 files (each includes it inside its own
 * target attribute region through KILN_EXP16_TARGET).
 *
 * Range reduction x = n ln2 + r with a two-part ln2 (|r| <= ln2 / 2), the degree-7 polynomial of e^r
 * (truncation error r^8 / 8! < 5e-9, below float precision) and an exact scaling by 2^n (vscalefps).
 * Inputs below -104 (including -inf) give 0; above 88.7 the result saturates near FLT_MAX's exponent.
 * test_kernels_attention checks it against libm's expf within 2.5e-7 relative.
 */
#ifndef KILN_CPU_X86_AVX512_EXP_H
#define KILN_CPU_X86_AVX512_EXP_H

#include <immintrin.h>

__attribute__((target("avx512f"), always_inline)) static inline __m512 kiln__exp16(__m512 x) {
    x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(88.7f)), _mm512_set1_ps(-104.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

#endif
