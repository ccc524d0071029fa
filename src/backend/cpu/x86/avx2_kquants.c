/*
 * avx2_kquants.c - AVX2 matmul tiles for Q4_K and Q6_K weights in their file layout times q8 activation
 * rows; also the avx512 level's tiles for weights that are not repacked. Per 32-element q8 block, one
 * 32-byte vector of unsigned weights (Q4_K 0..15, Q6_K 0..63) and one of activation quants go through
 * vpmaddubsw (int16 pair sums, at most 2 * 63 * 127 = 16002: no saturation) and vpmaddwd:
 *   Q4_K  with ones: the block's integer dot in 8 int32 lanes, scaled by dl * dx into 8 float lanes;
 *         the min term ml * dx * s is a scalar per block (the q8 block sum s);
 *   Q6_K  with the two sub-blocks' int16 scales (sc_a for elements 0-15, sc_b for 16-31): the scaled
 *         integer dot sum sc (q + 32) x, minus the same with 32 in place of the weights, which removes the
 *         + 32 of the unsigned quants exactly; then scaled by d * dx.
 * A row's weights are unpacked once per super-block for up to CMAX columns. The float terms round and
 * sum in a different order than the reference (kernels_mm_kquants_ref.c); the integer dots are exact.
 */
#include "backend/cpu/kernels.h"

#if defined(__x86_64__)
#include "backend/cpu/x86/avx2_hsum.h"
#include "tensor/types.h"

#include <immintrin.h>

#define KILN_AVX2 __attribute__((target("avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline)) KILN_AVX2
#define CMAX 4

INLINE __m256i load32(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* One Q4_K row's super-block times C columns: acc (8 lanes per column) and the scalar min sums. */
INLINE void q4_k_super(int C, const kiln_block_q4_k *blk, int64_t sb, int64_t k, const char *x, size_t xs,
                       __m256 *acc, float *mins) {
    const __m256i low4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    const float d = _cvtsh_ss(blk->d), dmin = _cvtsh_ss(blk->dmin);
    __m256i u[8];
    float dl[8], ml[8];
    for (int c = 0; c < 4; c++) {
        __m256i q = load32(blk->qs + 32 * c);
        u[2 * c] = _mm256_and_si256(q, low4);
        u[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
    }
    for (int g = 0; g < 8; g++) {
        uint8_t sc, m;
        kiln__kquant_scale_min(g, blk->scales, &sc, &m);
        dl[g] = d * (float)sc;
        ml[g] = dmin * (float)m;
    }
    for (int c = 0; c < C; c++) {
        const char *xr = x + c * xs;
        const float *dx = kiln__q8_row_d(xr, k) + sb * 8;
        const int32_t *s = kiln__q8_row_s(xr, k) + sb * 8;
        for (int g = 0; g < 8; g++) {
            __m256i xv = load32(xr + (sb * 8 + g) * KILN_Q8_BLOCK);
            __m256i i = _mm256_madd_epi16(_mm256_maddubs_epi16(u[g], xv), ones);
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), _mm256_set1_ps(dl[g] * dx[g]), acc[c]);
            mins[c] += ml[g] * (dx[g] * (float)s[g]);
        }
    }
}

INLINE void q6_k_super(int C, const kiln_block_q6_k *blk, int64_t sb, int64_t k, const char *x, size_t xs,
                       __m256 *acc) {
    const __m256i low4 = _mm256_set1_epi8(0x0f), low2 = _mm256_set1_epi8(3), k32 = _mm256_set1_epi8(32);
    const float d = _cvtsh_ss(blk->d);
    __m256i u[8], sc[8];
    for (int g = 0; g < 8; g++) { /* elements 32g..32g+31: half h, quarter q of the dequantizer's layout */
        int h = g / 4, q = g % 4;
        __m256i lo = load32(blk->ql + 64 * h + 32 * (q % 2)), hi = load32(blk->qh + 32 * h);
        if (q >= 2) lo = _mm256_srli_epi16(lo, 4);
        if (q == 1) hi = _mm256_srli_epi16(hi, 2);
        if (q == 2) hi = _mm256_srli_epi16(hi, 4);
        if (q == 3) hi = _mm256_srli_epi16(hi, 6);
        u[g] = _mm256_or_si256(_mm256_and_si256(lo, low4), _mm256_slli_epi16(_mm256_and_si256(hi, low2), 4));
        sc[g] = _mm256_setr_m128i(_mm_set1_epi16(blk->scales[2 * g]), _mm_set1_epi16(blk->scales[2 * g + 1]));
    }
    for (int c = 0; c < C; c++) {
        const char *xr = x + c * xs;
        const float *dx = kiln__q8_row_d(xr, k) + sb * 8;
        for (int g = 0; g < 8; g++) {
            __m256i xv = load32(xr + (sb * 8 + g) * KILN_Q8_BLOCK);
            __m256i wx = _mm256_madd_epi16(_mm256_maddubs_epi16(u[g], xv), sc[g]);
            __m256i bx = _mm256_madd_epi16(_mm256_maddubs_epi16(k32, xv), sc[g]);
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(wx, bx)), _mm256_set1_ps(d * dx[g]),
                                     acc[c]);
        }
    }
}

/* One row times C columns into out[c * os]. */
INLINE void row(int type, int C, int64_t k, const void *w, const char *x, size_t xs, float *out, size_t os) {
    __m256 acc[CMAX];
    float mins[CMAX];
    for (int c = 0; c < C; c++) {
        acc[c] = _mm256_setzero_ps();
        mins[c] = 0.0f;
    }
    for (int64_t sb = 0; sb < k / KILN_QK_K; sb++) {
        if (type == KILN_TYPE_Q4_K) q4_k_super(C, (const kiln_block_q4_k *)w + sb, sb, k, x, xs, acc, mins);
        else q6_k_super(C, (const kiln_block_q6_k *)w + sb, sb, k, x, xs, acc);
    }
    for (int c = 0; c < C; c++) out[c * os] = kiln__hsum8(acc[c]) - mins[c];
}

#define DEFINE_TILE(fn, type)                                                                          \
    KILN_AVX2 static void fn(int64_t k, const void *w, size_t ws, int64_t nr, const void *x, size_t xs,    \
                             int64_t nc, float *out, size_t os) {                                      \
        for (int64_t r = 0; r < nr; r++) {                                                             \
            const char *wr = (const char *)w + r * ws;                                                 \
            for (int64_t c0 = 0; c0 < nc; c0 += CMAX) {                                                \
                const char *xc = (const char *)x + c0 * xs;                                            \
                float *o = out + c0 * os + r;                                                          \
                switch (nc - c0 < CMAX ? (int)(nc - c0) : CMAX) {                                      \
                case 4: row(type, 4, k, wr, xc, xs, o, os); break;                                     \
                case 3: row(type, 3, k, wr, xc, xs, o, os); break;                                     \
                case 2: row(type, 2, k, wr, xc, xs, o, os); break;                                     \
                default: row(type, 1, k, wr, xc, xs, o, os); break;                                    \
                }                                                                                      \
            }                                                                                          \
        }                                                                                              \
    }

DEFINE_TILE(mm_q4_k, KILN_TYPE_Q4_K)
DEFINE_TILE(mm_q6_k, KILN_TYPE_Q6_K)

void kiln__cpu_isa_init_avx2_kquants(kiln_cpu_isa *t) {
    t->mm[KILN_TYPE_Q4_K] = mm_q4_k;
    t->mm[KILN_TYPE_Q6_K] = mm_q6_k;
}

#else
void kiln__cpu_isa_init_avx2_kquants(kiln_cpu_isa *t) { (void)t; }
#endif
