/*
 * avx512_kquants.c - fused dequantize-and-dot of one Q4_K or Q6_K weight row with one float column, for
 * decode (a single activation column), where the dequantize-a-row fallback spent most of its time writing
 * and re-reading the dequantized row. Each 16 quants are widened to int32 lanes, turned into the weight
 * values of the reference dequantizer (src/tensor/dequant_kquants.c: Q4_K d*sc*q - dmin*m, Q6_K
 * d*sc*(q - 32)) and multiplied into two float accumulators. The reference is that dequantizer followed by
 * a dot product; test_kernels_mm compares the two within a stated tolerance.
 */
#include "backend/cpu/kernels.h"

#if defined(__x86_64__)
#include "tensor/types.h"

#include <immintrin.h>
#include <stdint.h>

#define KILN_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline)) KILN_AVX512
/* Software prefetch distance in bytes: rows are short (1-3 KB), so a thread's rows form one long stream
 * and the prefetches run on into the next rows of its range (prefetching past the end cannot fault). */
#define AHEAD 2048

/* 16 bytes at p widened to int32 lanes. */
INLINE __m512i widen16(const uint8_t *p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p)); }

/* Per 64 elements c, 32 bytes of quants: group 2c in the low nibbles, group 2c + 1 in the high ones. Each
 * 16-byte half is loaded once and feeds both groups; four accumulators (group parity x half). */
KILN_AVX512 static float dot_q4_k(const void *w, const float *x, int64_t k) {
    const kiln_block_q4_k *b = w;
    const __m512i low4 = _mm512_set1_epi32(0xf);
    __m512 acc[4];
    for (int j = 0; j < 4; j++) acc[j] = _mm512_setzero_ps();
    for (int64_t i = 0; i < k / KILN_QK_K; i++, x += KILN_QK_K) {
        float d = _cvtsh_ss(b[i].d), dmin = _cvtsh_ss(b[i].dmin), dl[8], ml[8];
        uintptr_t ahead = (uintptr_t)(b + i) + AHEAD;
        for (int o = 0; o < 192; o += 64) _mm_prefetch((const char *)(ahead + (uintptr_t)o), _MM_HINT_T0);
        for (int g = 0; g < 8; g++) {
            uint8_t sc, m;
            kiln__kquant_scale_min(g, b[i].scales, &sc, &m);
            dl[g] = d * (float)sc;
            ml[g] = dmin * (float)m;
        }
        for (int c = 0; c < 4; c++)
            for (int h = 0; h < 2; h++) {
                __m512i v = widen16(b[i].qs + 32 * c + 16 * h);
                __m512 lo = _mm512_cvtepi32_ps(_mm512_and_si512(v, low4));
                __m512 hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4));
                __m512 wl = _mm512_fmsub_ps(_mm512_set1_ps(dl[2 * c]), lo, _mm512_set1_ps(ml[2 * c]));
                __m512 wh = _mm512_fmsub_ps(_mm512_set1_ps(dl[2 * c + 1]), hi, _mm512_set1_ps(ml[2 * c + 1]));
                acc[h] = _mm512_fmadd_ps(wl, _mm512_loadu_ps(x + 64 * c + 16 * h), acc[h]);
                acc[2 + h] = _mm512_fmadd_ps(wh, _mm512_loadu_ps(x + 64 * c + 32 + 16 * h), acc[2 + h]);
            }
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
}

/* Per 128 elements h and 16-byte slice j: quarter q takes the low (q < 2) or high nibbles of ql bytes
 * 64h + 32(q % 2) + 16j and bits 2q, 2q + 1 of qh bytes 32h + 16j; so each byte is loaded once and feeds
 * two or four quarters. Element 128h + 32q + 16j + l has scale 8h + 2q + j. One accumulator per quarter. */
INLINE __m512 q6_weights(__m512i lo, __m512i hi, float dl) {
    __m512i v = _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)), _mm512_set1_epi32(32));
    return _mm512_mul_ps(_mm512_set1_ps(dl), _mm512_cvtepi32_ps(v));
}

KILN_AVX512 static float dot_q6_k(const void *w, const float *x, int64_t k) {
    const kiln_block_q6_k *b = w;
    const __m512i low4 = _mm512_set1_epi32(0xf), low2 = _mm512_set1_epi32(3);
    __m512 acc[4];
    for (int j = 0; j < 4; j++) acc[j] = _mm512_setzero_ps();
    for (int64_t i = 0; i < k / KILN_QK_K; i++, x += KILN_QK_K) {
        float d = _cvtsh_ss(b[i].d);
        uintptr_t ahead = (uintptr_t)(b + i) + AHEAD;
        for (int o = 0; o < 256; o += 64) _mm_prefetch((const char *)(ahead + (uintptr_t)o), _MM_HINT_T0);
        for (int h = 0; h < 2; h++)
            for (int j = 0; j < 2; j++) {
                const uint8_t *ql = b[i].ql + 64 * h + 16 * j;
                const int8_t *sc = b[i].scales + 8 * h + j;
                const float *xs = x + 128 * h + 16 * j;
                __m512i qa = widen16(ql), qb = widen16(ql + 32), qh = widen16(b[i].qh + 32 * h + 16 * j);
                __m512 w0 = q6_weights(_mm512_and_si512(qa, low4), _mm512_and_si512(qh, low2), d * (float)sc[0]);
                __m512 w1 = q6_weights(_mm512_and_si512(qb, low4), _mm512_and_si512(_mm512_srli_epi32(qh, 2), low2),
                                       d * (float)sc[2]);
                __m512 w2 = q6_weights(_mm512_srli_epi32(qa, 4), _mm512_and_si512(_mm512_srli_epi32(qh, 4), low2),
                                       d * (float)sc[4]);
                __m512 w3 = q6_weights(_mm512_srli_epi32(qb, 4), _mm512_srli_epi32(qh, 6), d * (float)sc[6]);
                acc[0] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xs), acc[0]);
                acc[1] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xs + 32), acc[1]);
                acc[2] = _mm512_fmadd_ps(w2, _mm512_loadu_ps(xs + 64), acc[2]);
                acc[3] = _mm512_fmadd_ps(w3, _mm512_loadu_ps(xs + 96), acc[3]);
            }
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
}

void kiln__cpu_isa_init_avx512_kquants(kiln_cpu_isa *t) {
    t->dot_row[KILN_TYPE_Q4_K] = dot_q4_k;
    t->dot_row[KILN_TYPE_Q6_K] = dot_q6_k;
}

#else
void kiln__cpu_isa_init_avx512_kquants(kiln_cpu_isa *t) { (void)t; }
#endif
