/*
 * avx512_bf16.c - F16/BF16 prefill tiles in bf16 arithmetic (AVX512-BF16), over the repacked weights of
 * repack_pairs.c, and the float-to-bf16 row conversion of their activation columns.
 *
 * The repacked layout is already vdpbf16ps's: one 64-byte load holds elements 2p, 2p + 1 of the 16 rows
 * of a group, row r in 32-bit lane r. Broadcasting the column's bf16 pair (x[2p], x[2p + 1]) to every
 * lane, one vdpbf16ps adds both products to each row's float sum: 32 products per instruction where the
 * float tiles (avx512_half.c) do 16 per FMA, with no widening and no final lane shuffle. Each pass takes
 * two groups (32 rows) and up to CMAX columns, 2 * CMAX accumulators, so every weight load feeds CMAX
 * instructions and every broadcast two.
 *
 * BF16 weights are used as stored. F16 weights are rounded to bf16 CHUNK pairs at a time into an L1
 * buffer (vcvtph2ps, then vcvtne2ps2bf16) that every column tile of the chunk reads; the partial sums
 * of CBLOCK columns wait in memory between chunks. A row's result depends only on its group and its
 * column, never on nr, the thread split or the other group of its pass.
 *
 * Arithmetic: weights and activations rounded to nearest even, subnormals to zero (the instructions'
 * rule); products exact; the float sums rounded at each step, the instruction adding the pair's second
 * product, then its first. The reference is kiln__mm_bf16_ref (kernels_mm_ref.c).
 */
#include "backend/cpu/kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define KILN_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline)) KILN_BF16
#define CMAX 12      /* columns per tile: 2 groups x 12 columns = 24 accumulators */
#define CHUNK 128    /* pairs of an F16 group rounded at a time: 8 KiB of bf16 per group */
#define CBLOCK 96    /* columns whose partial sums wait in memory between chunks */
#define PAIR_WORDS 16 /* 32-bit words per pair of a group (64 bytes) */

/* Pairs [p0, p0 + n) of an F16 group as bf16 pairs, in the same layout. */
INLINE void round_f16(const uint32_t *w, int64_t p0, int64_t n, uint32_t *f) {
    for (int64_t p = 0; p < n; p++) {
        __m512i v = _mm512_loadu_si512((const void *)(w + (p0 + p) * PAIR_WORDS));
        __m512 lo = _mm512_cvtph_ps(_mm512_castsi512_si256(v));       /* rows 0-7 */
        __m512 hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(v, 1)); /* rows 8-15 */
        _mm512_store_si512((void *)(f + p * PAIR_WORDS), (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
}

/* The bf16 pair (x[2p], x[2p + 1]) of a column in every lane. */
INLINE __m512i pair(const char *x, int64_t p) {
    int32_t v;
    memcpy(&v, x + 4 * p, sizeof v);
    return _mm512_set1_epi32(v);
}

/* Pairs [p0, p0 + n) of G groups (wg[g] at pair p0) and C columns; sums continue from part. */
INLINE void tile(int G, int C, const uint32_t *const *wg, int64_t p0, int64_t n, const char *x, size_t xs,
                 __m512 (*part)[2]) {
    __m512 acc[CMAX][2];
#pragma GCC unroll 12
    for (int c = 0; c < C; c++) acc[c][0] = part[c][0], acc[c][1] = part[c][1];
    for (int64_t p = 0; p < n; p++) {
        __m512i w0 = _mm512_loadu_si512((const void *)(wg[0] + p * PAIR_WORDS));
        __m512i w1 = G > 1 ? _mm512_loadu_si512((const void *)(wg[1] + p * PAIR_WORDS)) : w0;
#pragma GCC unroll 12
        for (int c = 0; c < C; c++) {
            __m512i xp = pair(x + c * xs, p0 + p);
            acc[c][0] = _mm512_dpbf16_ps(acc[c][0], (__m512bh)w0, (__m512bh)xp);
            if (G > 1) acc[c][1] = _mm512_dpbf16_ps(acc[c][1], (__m512bh)w1, (__m512bh)xp);
        }
    }
#pragma GCC unroll 12
    for (int c = 0; c < C; c++) part[c][0] = acc[c][0], part[c][1] = acc[c][1];
}

#define TILE_CASE(n)                                                                                   \
    case n: tile(G, n, wg, p0, len, x + (cb + c0) * xs, xs, part + c0); break;

/* Groups w and w + ws (G of them, nr rows in all) times nc columns. */
INLINE void pass(int type, int G, int64_t np, const unsigned char *w, size_t ws, const char *x, size_t xs,
                 int64_t nc, float *out, size_t os, int nr) {
    uint32_t f[2][CHUNK * PAIR_WORDS] __attribute__((aligned(64)));
    __m512 part[CBLOCK][2];
    for (int64_t cb = 0; cb < nc; cb += CBLOCK) {
        int64_t ncb = nc - cb < CBLOCK ? nc - cb : CBLOCK;
        for (int64_t c = 0; c < ncb; c++) part[c][0] = part[c][1] = _mm512_setzero_ps();
        for (int64_t p0 = 0; p0 < np; p0 += CHUNK) {
            int64_t len = np - p0 < CHUNK ? np - p0 : CHUNK;
            const uint32_t *wg[2];
            for (int g = 0; g < G; g++) {
                const uint32_t *src = (const uint32_t *)(const void *)(w + (size_t)g * ws);
                if (type == KILN_TYPE_F16) {
                    round_f16(src, p0, len, f[g]);
                    wg[g] = f[g];
                } else {
                    wg[g] = src + p0 * PAIR_WORDS;
                }
            }
            if (G == 1) wg[1] = wg[0];
            for (int64_t c0 = 0; c0 < ncb; c0 += CMAX) {
                switch (ncb - c0 < CMAX ? (int)(ncb - c0) : CMAX) {
                    TILE_CASE(12) TILE_CASE(11) TILE_CASE(10) TILE_CASE(9) TILE_CASE(8) TILE_CASE(7)
                    TILE_CASE(6) TILE_CASE(5) TILE_CASE(4) TILE_CASE(3) TILE_CASE(2) TILE_CASE(1)
                }
            }
        }
        for (int64_t c = 0; c < ncb; c++)
            for (int g = 0; g < G; g++) {
                int rows = nr - 16 * g < 16 ? nr - 16 * g : 16;
                _mm512_mask_storeu_ps(out + (cb + c) * os + 16 * g, (__mmask16)((1u << rows) - 1), part[c][g]);
            }
    }
}

INLINE void packed_bf16dot(int type, int64_t k, const void *w, size_t ws, int64_t nr, const void *x, size_t xs,
                           int64_t nc, float *out, size_t os) {
    const int64_t np = k / 2;
    for (int64_t g = 0; g * 16 < nr; g += 2) {
        const unsigned char *wg = (const unsigned char *)w + g * ws;
        int rows = nr - g * 16 < 32 ? (int)(nr - g * 16) : 32;
        if (rows > 16) pass(type, 2, np, wg, ws, (const char *)x, xs, nc, out + g * 16, os, rows);
        else pass(type, 1, np, wg, ws, (const char *)x, xs, nc, out + g * 16, os, rows);
    }
}

KILN_BF16 static void packed_f16_bf16(int64_t k, const void *w, size_t ws, int64_t nr, const void *x, size_t xs,
                                      int64_t nc, float *out, size_t os) {
    packed_bf16dot(KILN_TYPE_F16, k, w, ws, nr, x, xs, nc, out, os);
}

KILN_BF16 static void packed_bf16_bf16(int64_t k, const void *w, size_t ws, int64_t nr, const void *x, size_t xs,
                                       int64_t nc, float *out, size_t os) {
    packed_bf16dot(KILN_TYPE_BF16, k, w, ws, nr, x, xs, nc, out, os);
}

KILN_BF16 static void f32_to_bf16(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512bh b = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
        _mm512_storeu_si512((void *)(y + i), (__m512i)b);
    }
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m256bh b = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x + i));
        _mm256_mask_storeu_epi16((void *)(y + i), m, (__m256i)b);
    }
}

void kiln__cpu_isa_init_avx512_bf16(kiln_cpu_isa *t) {
    if (!kiln__cpu_features()->avx512bf16) return;
    t->mm_packed_bf16[KILN_TYPE_F16] = packed_f16_bf16;
    t->mm_packed_bf16[KILN_TYPE_BF16] = packed_bf16_bf16;
    t->f32_to_bf16 = f32_to_bf16;
    t->bf16_prefill = kiln__cpu_bf16_prefill();
}

#else
/* Not x86-64: the level is never supported, so its table is never filled. */
void kiln__cpu_isa_init_avx512_bf16(kiln_cpu_isa *t) { (void)t; }
#endif
