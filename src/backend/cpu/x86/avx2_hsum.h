/*
 * avx2_hsum.h - the horizontal sum of 8 float lanes, shared by the AVX2 files (the order is fixed: the
 * two 128-bit halves, then pairs, then the last two lanes, so every AVX2 kernel sums the same way).
 */
#ifndef KILN_CPU_X86_AVX2_HSUM_H
#define KILN_CPU_X86_AVX2_HSUM_H

#include <immintrin.h>

__attribute__((target("avx2"), always_inline)) static inline float kiln__hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

#endif
