/*
 * avx512_half.c - AVX-512 matmul tiles over repacked F16 and BF16 weights (layout in repack_pairs.c).
 *
 * One 64-byte load holds elements 2p, 2p + 1 of the 16 rows of a group. Its halves widen to two float
 * vectors in "pair lanes" (lanes 2j, 2j + 1 hold the two elements of one row), and one broadcast pair of
 * activations (x[2p], x[2p + 1]) multiplies both; no horizontal sums, and at the end adding each lane
 * pair gives the 16 row dots. F16 widens with vcvtph2ps; BF16 is the upper half of a float, so an
 * interleave with zeros widens it (that interleave works within 128-bit lanes, which only changes which
 * row each lane pair holds: the final permutation undoes it).
 *
 *   decode   (1 column) memory-bound: the group's pairs are walked as S independent streams, each
 *            with its own accumulators and a software prefetch AHEAD bytes in front (near its end, into
 *            the same stream of the next group), because one thread's read bandwidth grows with the
 *            number of streams in flight and short streams end before the hardware prefetcher ramps up
 *            (Sapphire Rapids). The one-stream variant (AMD, kiln__cpu_decode_streams) issues no
 *            prefetches: there the hardware prefetcher follows one sequential run faster alone.
 *   prefill  (several columns) compute-bound: CHUNK pairs of the group are widened once into an L1
 *            buffer of floats, then every column tile of up to CMAX columns reads it, so each weight
 *            load feeds 2 * CMAX FMAs (24 accumulators of the 32 registers) and the FMA ports do no
 *            conversions; partial sums wait in memory between chunks.
 *
 * Results depend only on the group and the column count of the pass (1 or more), never on nr or on
 * where a thread's rows start. The reference is the unpacked scalar tile (kernels_mm_ref.c), which sums
 * left to right; these sum even and odd elements in separate lanes (and decode in S segments).
 */
#include "backend/cpu/kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define KILN_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline)) KILN_AVX512
#define CMAX 12
#define SMAX 8 /* decode streams at most: 8 on Sapphire Rapids, 1 where kiln__cpu_decode_streams() says */
#define AHEAD 2048
#define PAIR_BYTES 64 /* one element pair of 16 rows */
#define CHUNK 256     /* pairs converted at a time: 32 KiB of floats */
#define CBLOCK (8 * CMAX)

/* The 64 bytes at q as two float vectors in pair lanes. */
INLINE void widen(int type, const unsigned char *q, __m512 *a, __m512 *b) {
    if (type == KILN_TYPE_F16) {
        __m512i v = _mm512_loadu_si512((const void *)q);
        *a = _mm512_cvtph_ps(_mm512_castsi512_si256(v));       /* rows 0-7 */
        *b = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(v, 1)); /* rows 8-15 */
    } else {
        __m512i v = _mm512_loadu_si512((const void *)q), z = _mm512_setzero_si512();
        *a = _mm512_castsi512_ps(_mm512_unpacklo_epi16(z, v)); /* rows 0,1, 4,5, 8,9, 12,13 */
        *b = _mm512_castsi512_ps(_mm512_unpackhi_epi16(z, v)); /* rows 2,3, 6,7, 10,11, 14,15 */
    }
}

/* (x[2p], x[2p + 1]) in every lane pair. */
INLINE __m512 pair(const float *x, int64_t p) {
    double d;
    memcpy(&d, x + 2 * p, sizeof d);
    return _mm512_castpd_ps(_mm512_set1_pd(d));
}

/* The 16 row dots from the pair-lane accumulators: lane pair for row r, first element + second. */
INLINE __m512 rows16(int type, __m512 a, __m512 b) {
    const __m512i f16 = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i bf16 = _mm512_setr_epi32(0, 2, 16, 18, 4, 6, 20, 22, 8, 10, 24, 26, 12, 14, 28, 30);
    __m512i first = type == KILN_TYPE_F16 ? f16 : bf16;
    __m512i second = _mm512_add_epi32(first, _mm512_set1_epi32(1));
    return _mm512_add_ps(_mm512_permutex2var_ps(a, first, b), _mm512_permutex2var_ps(a, second, b));
}

INLINE void store16(float *out, int rows, __m512 v) {
    _mm512_mask_storeu_ps(out, (__mmask16)((1u << rows) - 1), v);
}

/* One group times one column (np pairs), as S interleaved streams; next is the following group,
 * only prefetched (prefetching past the end of the weights cannot fault). */
INLINE void group_decode(int type, int S, int PF, int64_t np, const unsigned char *w, const unsigned char *next,
                         const float *x, float *out, int rows) {
    __m512 acc[SMAX][2];
    const int64_t seg = np / S, ahead = AHEAD / PAIR_BYTES;
    for (int s = 0; s < S; s++) acc[s][0] = acc[s][1] = _mm512_setzero_ps();
    for (int64_t i = 0; i < seg; i++)
#pragma GCC unroll 16
        for (int s = 0; s < S; s++) {
            int64_t p = s * seg + i, j = i + ahead;
            uintptr_t pf = j < seg ? (uintptr_t)w + (uintptr_t)((s * seg + j) * PAIR_BYTES)
                                   : (uintptr_t)next + (uintptr_t)((s * seg + j - seg) * PAIR_BYTES);
            if (PF) _mm_prefetch((const char *)pf, _MM_HINT_T0);
            __m512 a, b, xp = pair(x, p);
            widen(type, w + p * PAIR_BYTES, &a, &b);
            acc[s][0] = _mm512_fmadd_ps(a, xp, acc[s][0]);
            acc[s][1] = _mm512_fmadd_ps(b, xp, acc[s][1]);
        }
    for (int64_t p = S * seg; p < np; p++) { /* fewer than S pairs left over */
        __m512 a, b, xp = pair(x, p);
        widen(type, w + p * PAIR_BYTES, &a, &b);
        acc[0][0] = _mm512_fmadd_ps(a, xp, acc[0][0]);
        acc[0][1] = _mm512_fmadd_ps(b, xp, acc[0][1]);
    }
    for (int s = 1; s < S; s++) {
        acc[0][0] = _mm512_add_ps(acc[0][0], acc[s][0]);
        acc[0][1] = _mm512_add_ps(acc[0][1], acc[s][1]);
    }
    store16(out, rows, rows16(type, acc[0][0], acc[0][1]));
}

/* Pairs [p0, p0 + n) of a group as floats in pair lanes, 32 per pair (a, then b). */
INLINE void convert(int type, const unsigned char *w, int64_t p0, int64_t n, float *f) {
    for (int64_t p = 0; p < n; p++) {
        __m512 a, b;
        widen(type, w + (p0 + p) * PAIR_BYTES, &a, &b);
        _mm512_store_ps(f + 32 * p, a);
        _mm512_store_ps(f + 32 * p + 16, b);
    }
}

/* Pairs [p0, p0 + n) of C columns against a converted chunk f: each weight pair, loaded once, feeds 2 C
 * FMAs. The pair-lane sums continue from part and return there, so splitting K into chunks changes no
 * bit of the result. */
INLINE void chunk_tile(int C, const float *f, int64_t p0, int64_t n, const char *x, size_t xs,
                       __m512 (*part)[2]) {
    __m512 acc[CMAX][2];
#pragma GCC unroll 12
    for (int c = 0; c < C; c++) acc[c][0] = part[c][0], acc[c][1] = part[c][1];
    for (int64_t p = 0; p < n; p++) {
        __m512 a = _mm512_load_ps(f + 32 * p), b = _mm512_load_ps(f + 32 * p + 16);
#pragma GCC unroll 12
        for (int c = 0; c < C; c++) {
            __m512 xp = pair((const float *)(x + c * xs), p0 + p);
            acc[c][0] = _mm512_fmadd_ps(a, xp, acc[c][0]);
            acc[c][1] = _mm512_fmadd_ps(b, xp, acc[c][1]);
        }
    }
#pragma GCC unroll 12
    for (int c = 0; c < C; c++) part[c][0] = acc[c][0], part[c][1] = acc[c][1];
}

#define TILE_CASE(n)                                                                                   \
    case n: chunk_tile(n, f, p0, len, xc, xs, part + c0); break;

/* One group times nc > 1 columns. The weights are converted once per CHUNK pairs into an L1-resident
 * float buffer that every column tile then reads, so the FMA ports do FMAs only (converting inside the
 * tile took 2-4 of every 26-28 of their slots); CBLOCK columns keep their partial sums between chunks. */
INLINE void group_prefill(int type, int64_t np, const unsigned char *w, const char *x, size_t xs, int64_t nc,
                          float *out, size_t os, int rows) {
    float f[CHUNK * 32] __attribute__((aligned(64)));
    __m512 part[CBLOCK][2];
    for (int64_t cb = 0; cb < nc; cb += CBLOCK) {
        int64_t ncb = nc - cb < CBLOCK ? nc - cb : CBLOCK;
        for (int64_t c = 0; c < ncb; c++) part[c][0] = part[c][1] = _mm512_setzero_ps();
        for (int64_t p0 = 0; p0 < np; p0 += CHUNK) {
            int64_t len = np - p0 < CHUNK ? np - p0 : CHUNK;
            convert(type, w, p0, len, f);
            for (int64_t c0 = 0; c0 < ncb; c0 += CMAX) {
                const char *xc = x + (cb + c0) * xs;
                switch (ncb - c0 < CMAX ? (int)(ncb - c0) : CMAX) {
                    TILE_CASE(12) TILE_CASE(11) TILE_CASE(10) TILE_CASE(9) TILE_CASE(8) TILE_CASE(7)
                    TILE_CASE(6) TILE_CASE(5) TILE_CASE(4) TILE_CASE(3) TILE_CASE(2) TILE_CASE(1)
                }
            }
        }
        for (int64_t c = 0; c < ncb; c++) store16(out + (cb + c) * os, rows, rows16(type, part[c][0], part[c][1]));
    }
}

INLINE void packed_half(int type, int S, int PF, int64_t k, const void *w, size_t ws, int64_t nr, const void *x,
                        size_t xs, int64_t nc, float *out, size_t os) {
    const int64_t np = k / 2;
    for (int64_t g = 0; g * 16 < nr; g++) {
        const unsigned char *wg = (const unsigned char *)w + g * ws;
        int rows = nr - g * 16 < 16 ? (int)(nr - g * 16) : 16;
        const unsigned char *next = (const unsigned char *)((uintptr_t)wg + ws);
        if (nc == 1) group_decode(type, S, PF, np, wg, next, x, out + g * 16, rows);
        else group_prefill(type, np, wg, (const char *)x, xs, nc, out + g * 16, os, rows);
    }
}

#define DEFINE_HALF(fn, type, S, PF)                                                                   \
    KILN_AVX512 static void fn(int64_t k, const void *w, size_t ws, int64_t nr, const void *x, size_t xs,  \
                               int64_t nc, float *out, size_t os) {                                    \
        packed_half(type, S, PF, k, w, ws, nr, x, xs, nc, out, os);                                    \
    }

DEFINE_HALF(packed_f16, KILN_TYPE_F16, 8, 1)
DEFINE_HALF(packed_bf16, KILN_TYPE_BF16, 8, 1)
DEFINE_HALF(packed_f16_one, KILN_TYPE_F16, 1, 0)
DEFINE_HALF(packed_bf16_one, KILN_TYPE_BF16, 1, 0)

kiln_mm_fn kiln__cpu_avx512_half_variant(kiln_type type, int streams) {
    if (type == KILN_TYPE_F16) return streams == 1 ? packed_f16_one : packed_f16;
    if (type == KILN_TYPE_BF16) return streams == 1 ? packed_bf16_one : packed_bf16;
    return NULL;
}

void kiln__cpu_isa_init_avx512_half(kiln_cpu_isa *t) {
    int streams = kiln__cpu_decode_streams();
    t->mm_packed[KILN_TYPE_F16] = kiln__cpu_avx512_half_variant(KILN_TYPE_F16, streams);
    t->mm_packed[KILN_TYPE_BF16] = kiln__cpu_avx512_half_variant(KILN_TYPE_BF16, streams);
    /* F32 weights keep the level's 512-bit unpacked tile: the AVX2 pair tile (inherited from the base
     * table) has not been measured against it on an AVX-512 machine. */
    t->mm_packed[KILN_TYPE_F32] = NULL;
}

#else
/* Not x86-64: the level is never supported, so its table is never filled. */
void kiln__cpu_isa_init_avx512_half(kiln_cpu_isa *t) { (void)t; }
kiln_mm_fn kiln__cpu_avx512_half_variant(kiln_type type, int streams) {
    (void)type, (void)streams;
    return NULL;
}
#endif
