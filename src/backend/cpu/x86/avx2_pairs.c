/*
 * avx2_pairs.c - AVX2 matmul tiles over repacked F32, F16 and BF16 weights (the pair layout of
 * repack_pairs.c, shared with the AVX-512 half-float tiles) times float activation columns.
 *
 * A pair of the layout holds elements 2p, 2p + 1 of the 16 rows of a group; each quarter (16 bytes of
 * F16/BF16, 32 of F32) is, once widened (vcvtph2ps for F16, a 16-bit shift for BF16, nothing for F32),
 * 8 floats in "pair lanes": lanes 2j, 2j + 1 hold the two elements of row 4i + j. One broadcast
 * activation pair (x[2p], x[2p + 1]) multiplies every quarter with an FMA, and at the end adding each
 * lane pair (vhaddps, then a 64-bit permutation) gives the row dots; no horizontal sum per row.
 *
 *   decode   (1 column) memory-bound: the 4 quarters of each pair into 4 accumulators, the group read
 *            once, in order.
 *   prefill  (several columns) compute-bound: K is walked in CHUNK pairs that stay in L1 while every
 *            column tile reads them: F16/BF16 chunks are widened once into an L1 buffer of floats
 *            (16 KiB; widening inside the tile, once per column tile, measured 18% slower on Zen 1), F32
 *            chunks are read where they lie. All 16 rows of the chunk meet up to 3 columns (12
 *            accumulators, 4 weights and a broadcast of the 16 ymm registers; a group of 8 rows or fewer,
 *            up to 6 columns per 8-row half), and the partial sums wait in memory between chunks. This is the outer-product
 *            form: no weight row is re-read per column tile from outside L1, which is what limited the
 *            unpacked F32 tile (avx2_mm.c: its 4 rows x 3 columns stream K floats of each row per tile).
 * Each row lane accumulates its pairs in order with one FMA per pair either way, so decode and prefill
 * give the same bits, whatever the split of rows. The reference is the unpacked scalar tile
 * (kernels_mm_ref.c), which sums left to right; these sum even and odd elements in separate lanes.
 */
#include "backend/cpu/kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define KILN_AVX2 __attribute__((target("avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline)) KILN_AVX2
#define CMAX 6
#define CHUNK 128     /* pairs per K chunk: 8 KiB of weights, 16 KiB as floats */
#define CBLOCK 96     /* columns whose partial sums wait between chunks */
#define PREFETCH 2048 /* decode asks for its bytes this far ahead, as avx2_packed.c */

/* Quarter i (rows 4i..4i+3) of pair p as floats in pair lanes. */
INLINE __m256 widen(int type, const unsigned char *w, int64_t p, int i) {
    if (type == KILN_TYPE_F32) return _mm256_loadu_ps((const float *)(const void *)w + 32 * p + 8 * i);
    __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(w + p * 64 + 16 * i));
    if (type == KILN_TYPE_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* (x[2p], x[2p + 1]) in every lane pair. */
INLINE __m256 pair(const float *x, int64_t p) {
    double d;
    memcpy(&d, x + 2 * p, sizeof d);
    return _mm256_castpd_ps(_mm256_set1_pd(d));
}

/* The 8 row dots of two pair-lane accumulators (rows 0-3 in a, 4-7 in b), first element + second. */
INLINE __m256 rows8(__m256 a, __m256 b) {
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_hadd_ps(a, b)), 0xd8));
}

INLINE void store8(float *out, int rows, __m256 v) {
    if (rows >= 8) {
        _mm256_storeu_ps(out, v);
    } else if (rows > 0) {
        float t[8];
        _mm256_storeu_ps(t, v);
        memcpy(out, t, (size_t)rows * sizeof(float));
    }
}

/* One group times one column (np pairs). */
INLINE void group_decode(int type, int64_t np, const unsigned char *w, const float *x, float *out, int rows) {
    __m256 acc[4];
    for (int i = 0; i < 4; i++) acc[i] = _mm256_setzero_ps();
    const int64_t pb = type == KILN_TYPE_F32 ? 128 : 64; /* bytes per pair of the group's 16 rows */
    for (int64_t p = 0; p < np; p++) {
        __m256 xp = pair(x, p);
        for (int64_t o = 0; o < pb; o += 64) _mm_prefetch((const char *)w + p * pb + PREFETCH + o, _MM_HINT_T0);
        for (int i = 0; i < 4; i++) acc[i] = _mm256_fmadd_ps(widen(type, w, p, i), xp, acc[i]);
    }
    store8(out, rows, rows8(acc[0], acc[1]));
    store8(out + 8, rows - 8, rows8(acc[2], acc[3]));
}

/* Pairs [p0, p0 + n) of half hh against C columns; the pair-lane sums continue from part and return
 * there (part[c][2 hh], part[c][2 hh + 1]), which changes no bit of the result. */
INLINE void chunk_tile(int C, int hh, const float *f, int64_t p0, int64_t n, const char *x,
                       size_t xs, __m256 (*part)[4], const float *pf) {
    __m256 acc[CMAX][2];
    for (int c = 0; c < C; c++) acc[c][0] = part[c][2 * hh], acc[c][1] = part[c][2 * hh + 1];
    for (int64_t p = p0; p < p0 + n; p++) {
        const float *fp = f + 32 * (p - p0) + 16 * hh;
        if (pf) { /* the next chunk's pair, both cache lines */
            _mm_prefetch((const char *)(pf + 32 * (p - p0)), _MM_HINT_T0);
            _mm_prefetch((const char *)(pf + 32 * (p - p0) + 16), _MM_HINT_T0);
        }
        __m256 a = _mm256_loadu_ps(fp), b = _mm256_loadu_ps(fp + 8);
        for (int c = 0; c < C; c++) {
            __m256 xp = pair((const float *)(const void *)(x + c * xs), p);
            acc[c][0] = _mm256_fmadd_ps(a, xp, acc[c][0]);
            acc[c][1] = _mm256_fmadd_ps(b, xp, acc[c][1]);
        }
    }
    for (int c = 0; c < C; c++) part[c][2 * hh] = acc[c][0], part[c][2 * hh + 1] = acc[c][1];
}

/* Both halves (all 16 rows) of a chunk (F32 in place, F16/BF16 widened) against C <= CMAX / 2 columns: 4
 * weight vectors per pair, so each activation pair is read once per chunk rather than once per half (the
 * activations of a column block do not fit in L1 beside the chunk, and each half re-read them from L2).
 * Same sums as two chunk_tile calls, bit for bit; chunk_tile remains for groups of 8 rows or fewer. */
INLINE void chunk_tile16(int C, const float *f, int64_t p0, int64_t n, const char *x, size_t xs,
                         __m256 (*part)[4], const float *pf) {
    __m256 acc[CMAX / 2][4];
    for (int c = 0; c < C; c++)
        for (int i = 0; i < 4; i++) acc[c][i] = part[c][i];
    for (int64_t p = p0; p < p0 + n; p++) {
        const float *fp = f + 32 * (p - p0);
        if (pf) {
            _mm_prefetch((const char *)(pf + 32 * (p - p0)), _MM_HINT_T0);
            _mm_prefetch((const char *)(pf + 32 * (p - p0) + 16), _MM_HINT_T0);
        }
        __m256 w[4];
        for (int i = 0; i < 4; i++) w[i] = _mm256_loadu_ps(fp + 8 * i);
        for (int c = 0; c < C; c++) {
            __m256 xp = pair((const float *)(const void *)(x + c * xs), p);
            for (int i = 0; i < 4; i++) acc[c][i] = _mm256_fmadd_ps(w[i], xp, acc[c][i]);
        }
    }
    for (int c = 0; c < C; c++)
        for (int i = 0; i < 4; i++) part[c][i] = acc[c][i];
}

/* Columns of tile t when n columns are cut into the fewest tiles of at most m, as evenly as possible
 * (32 columns in tiles of 6: 6, 6, 5, 5, 5, 5, not five 6s and a 2): a narrow tile has too few
 * accumulators to hide the FMA latency and spends more loads per FMA. A column's sums do not depend on
 * its tile. */
INLINE int tile_cols(int64_t n, int64_t t, int m) {
    int64_t tiles = (n + m - 1) / m;
    return (int)(n / tiles + (t < n % tiles ? 1 : 0));
}

#define TILE_CASE(n) case n: chunk_tile(n, hh, fc, p0, len, xc, xs, part + c0, hh == 0 && t == 0 ? pf : NULL); break;
#define TILE16_CASE(n) case n: chunk_tile16(n, fc, p0, len, xc, xs, part + c0, t == 0 ? pf : NULL); break;

/* One group times nc > 1 columns. */
INLINE void group_prefill(int type, int64_t np, const unsigned char *w, const char *x, size_t xs, int64_t nc,
                          float *out, size_t os, int rows) {
    __m256 part[CBLOCK][4];
    float f[CHUNK * 32] __attribute__((aligned(32)));
    for (int64_t cb = 0; cb < nc; cb += CBLOCK) {
        int64_t ncb = nc - cb < CBLOCK ? nc - cb : CBLOCK;
        for (int64_t c = 0; c < ncb; c++)
            for (int i = 0; i < 4; i++) part[c][i] = _mm256_setzero_ps();
        for (int64_t p0 = 0; p0 < np; p0 += CHUNK) {
            int64_t len = np - p0 < CHUNK ? np - p0 : CHUNK;
            const float *fc = f, *pf = NULL;
            if (type == KILN_TYPE_F32) { /* already floats in pair lanes; the first tile prefetches the next
                                          * chunk (or the next group's first), which comes from memory */
                fc = (const float *)(const void *)w + 32 * p0;
                pf = fc + 32 * len;
            } else
                for (int64_t p = 0; p < len; p++)
                    for (int i = 0; i < 4; i++) _mm256_store_ps(f + 32 * p + 8 * i, widen(type, w, p0 + p, i));
            if (rows > 8) {
                for (int64_t c0 = 0, t = 0; c0 < ncb; c0 += tile_cols(ncb, t++, CMAX / 2)) {
                    const char *xc = x + (cb + c0) * xs;
                    switch (tile_cols(ncb, t, CMAX / 2)) { TILE16_CASE(3) TILE16_CASE(2) TILE16_CASE(1) }
                }
                continue;
            }
            for (int hh = 0; hh < 2 && 8 * hh < rows; hh++)
                for (int64_t c0 = 0, t = 0; c0 < ncb; c0 += tile_cols(ncb, t++, CMAX)) {
                    const char *xc = x + (cb + c0) * xs;
                    switch (tile_cols(ncb, t, CMAX)) {
                        TILE_CASE(6) TILE_CASE(5) TILE_CASE(4) TILE_CASE(3) TILE_CASE(2) TILE_CASE(1)
                    }
                }
        }
        for (int64_t c = 0; c < ncb; c++) {
            store8(out + (cb + c) * os, rows, rows8(part[c][0], part[c][1]));
            store8(out + (cb + c) * os + 8, rows - 8, rows8(part[c][2], part[c][3]));
        }
    }
}

INLINE void packed_pairs(int type, int64_t k, const void *w, size_t ws, int64_t nr, const void *x, size_t xs,
                        int64_t nc, float *out, size_t os) {
    for (int64_t g = 0; g * 16 < nr; g++) {
        const unsigned char *wg = (const unsigned char *)w + g * ws;
        int rows = nr - g * 16 < 16 ? (int)(nr - g * 16) : 16;
        if (nc == 1) group_decode(type, k / 2, wg, (const float *)x, out + g * 16, rows);
        else group_prefill(type, k / 2, wg, (const char *)x, xs, nc, out + g * 16, os, rows);
    }
}

#define DEFINE_PAIRS(fn, type)                                                                         \
    KILN_AVX2 static void fn(int64_t k, const void *w, size_t ws, int64_t nr, const void *x, size_t xs,  \
                             int64_t nc, float *out, size_t os) {                                      \
        packed_pairs(type, k, w, ws, nr, x, xs, nc, out, os);                                          \
    }

DEFINE_PAIRS(packed_f32, KILN_TYPE_F32)
DEFINE_PAIRS(packed_f16, KILN_TYPE_F16)
DEFINE_PAIRS(packed_bf16, KILN_TYPE_BF16)

void kiln__cpu_isa_init_avx2_pairs(kiln_cpu_isa *t) {
    t->mm_packed[KILN_TYPE_F32] = packed_f32;
    t->mm_packed[KILN_TYPE_F16] = packed_f16;
    t->mm_packed[KILN_TYPE_BF16] = packed_bf16;
}

#else
void kiln__cpu_isa_init_avx2_pairs(kiln_cpu_isa *t) { (void)t; }
#endif
