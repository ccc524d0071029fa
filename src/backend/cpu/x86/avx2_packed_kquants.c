/*
 * avx2_packed_kquants.c - AVX2 matmul tiles over repacked Q4_K and Q6_K weights (layout in
 * repack_kquants.c, shared with the AVX-512 tiles) times q8 activation rows.
 *
 * As in avx2_packed.c, each 32-byte half of a 64-byte layout vector holds 4 unsigned quants of 8 rows, and
 * vpmaddubsw with the 4 matching activation bytes broadcast advances 8 row dots in int16 pair sums, which
 * must not saturate:
 *   Q4_K  quants 0..15: pair sums at most 3810, so a block's 8 products add in int16 (at most 30480)
 *         before one vpmaddwd, which multiplies them by the block's 6-bit scale sc (at most 63 x 60960 per
 *         block, 8 blocks within 2^25); the mins' term sum_g m_g * s_g (s the q8 block sums, |s| <= 4064)
 *         is 4 more vpmaddwd per super-block. The activations are super-block q8 rows (kernels.h: one
 *         scale dx per 256, kiln_cpu_isa.q8_superblock), so a super-block's float term is one step:
 *         (d * dx) * sum_g sc_g I_g - (dmin * dx) * sum_g m_g s_g, where llama.cpp's q8_K dot has the
 *         same integers. The float work per 32-block that per-block scales need (a conversion and three
 *         multiplies per 8 rows and column) was a fifth of the tile's instructions.
 *   Q6_K  quants q + 32 (0..63): pair sums at most 16002, so two products add in int16 before each
 *         vpmaddwd, which multiplies them by the 16-element sub-block's int8 scale (|sc| <= 128: at most
 *         8.2e6 per step, 2.6e8 per super-block); the +32 comes off once per super-block as 32 sum_j sc_j
 *         S_j (S_j the sub-block's activation sum, 8 vpmaddwd), then one float step (d * dx) * (I - 32 O)
 *         on the same super-block q8 rows. Per 32-block this replaced two half sums, two conversions and
 *         three float multiplies per 8 rows and column.
 * Prefill takes each 8-row half of a group against up to CMAX columns (each weight vector unpacked once
 * for all of them); decode walks both halves of a group together, reading its bytes once, in order, and
 * prefetches them PREFETCH bytes ahead. The
 * per-(row, column) instruction sequence is the same either way. A partial last group (zero rows) stores
 * only the rows asked for. Only the rounding of the fused products and the float order differ from the
 * reference (kernels_mm_kquants_ref.c).
 */
#include "backend/cpu/kernels.h"

#if defined(__x86_64__)
#include "tensor/types.h"

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define KILN_AVX2 __attribute__((target("avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline)) KILN_AVX2
#define CMAX 4     /* most columns per pass: Q6_K */
#define Q4K_CMAX 3 /* Q4_K: its integer sums leave fewer registers (measured: decode +8% over 4 columns) */
#define Q4K_BYTES 2368 /* one super-block of a 16-row group (repack_kquants.c) */
#define Q6K_BYTES 3392
/* Decode asks for each super-block's bytes this far ahead, a few lines with each of its 8 blocks (as
 * avx2_packed.c does per block; the bandwidth probe's best distance on Zen 1). All of them at once, per
 * super-block, was no faster than none: a burst of 37-53 misses. Spread, one thread's Q4_K decode tile
 * read 6.1 -> 9.6 GB/s from DRAM on Zen 1, Q6_K 4.5 -> 8.3 (K = 2048, 16384 rows). */
#define PREFETCH 2048

/* Block g's share of the lines PREFETCH bytes past super-block w: Q4_K 5 lines from 320 g, Q6_K 7 from
 * 424 g (a super-block is 7.4 and 8 block shares of 320 and 424 bytes long). */
INLINE void prefetch_share(const unsigned char *w, int g, int stride, int lines) {
    for (int i = 0; i < lines; i++)
        _mm_prefetch((const char *)w + PREFETCH + stride * g + 64 * i, _MM_HINT_T0);
}

INLINE __m256i bcast4(const char *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

INLINE __m256i load32(const unsigned char *p) {
    return _mm256_loadu_si256((const __m256i *)(const void *)p);
}

/* 8 half floats at p as floats. */
INLINE __m256 halves8(const unsigned char *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
}

/* The 8 per-row bytes at p (rows of one half) as int16 lanes, each twice: [r0 r0 r1 r1 .. r7 r7], the
 * lanes vpmaddwd pairs with a block's int16 pair sums. */
INLINE __m256i row_pairs(const unsigned char *p) {
    const __m128i v = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(const void *)p));
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi16(v, v)), _mm_unpackhi_epi16(v, v),
                                   1);
}

/* The per-row bytes of blocks g and g + 1 at p and p + 16 (rows of one half) as int16 lanes [r0: g, g+1,
 * r1: g, g+1, ..]: vpmaddwd with (s_g, s_g+1) in every lane pair gives each row's two mins' terms. */
INLINE __m256i row_two_blocks(const unsigned char *p) {
    const __m128i a = _mm_loadl_epi64((const __m128i *)(const void *)p);
    const __m128i b = _mm_loadl_epi64((const __m128i *)(const void *)(p + 16));
    return _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(a, b));
}

/* Super-block sb (w at its first byte), halves [h0, h0 + H), C columns of super-block q8 rows. */
INLINE void q4_k_super(int H, int h0, int C, const unsigned char *w, int64_t sb, int64_t k, const char *x,
                       size_t xs, __m256 (*acc)[CMAX]) {
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    __m256i iacc[2][CMAX];
    for (int h = 0; h < H; h++)
        for (int c = 0; c < C; c++)
            iacc[h][c] = _mm256_setzero_si256();
    for (int g = 0; g < 8; g++) {
        const unsigned char *q = w + 320 + 256 * g;
        const int64_t b = sb * 8 + g;
        if (H == 2) prefetch_share(w, g, 320, 5); /* decode */
        __m256i isum[2][CMAX];
        for (int h = 0; h < H; h++)
            for (int c = 0; c < C; c++)
                isum[h][c] = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++)
            for (int h = 0; h < H; h++) {
                __m256i wv = load32(q + 64 * j + 32 * (h0 + h));
                __m256i lo = _mm256_and_si256(wv, low4),
                        hi = _mm256_and_si256(_mm256_srli_epi16(wv, 4), low4);
                for (int c = 0; c < C; c++) {
                    const char *xb = x + c * xs + b * KILN_Q8_BLOCK;
                    isum[h][c] = _mm256_add_epi16(isum[h][c], _mm256_maddubs_epi16(lo, bcast4(xb + 4 * j)));
                    isum[h][c] =
                        _mm256_add_epi16(isum[h][c], _mm256_maddubs_epi16(hi, bcast4(xb + 16 + 4 * j)));
                }
            }
        for (int h = 0; h < H; h++) {
            const __m256i sc = row_pairs(w + 16 * g + 8 * (h0 + h));
            for (int c = 0; c < C; c++)
                iacc[h][c] = _mm256_add_epi32(iacc[h][c], _mm256_madd_epi16(isum[h][c], sc));
        }
    }
    for (int h = 0; h < H; h++) {
        const int r = 8 * (h0 + h);
        const __m256 d = halves8(w + 256 + 2 * r), dmin = halves8(w + 288 + 2 * r);
        const __m256i m01 = row_two_blocks(w + 128 + r), m23 = row_two_blocks(w + 128 + 32 + r);
        const __m256i m45 = row_two_blocks(w + 128 + 64 + r), m67 = row_two_blocks(w + 128 + 96 + r);
        for (int c = 0; c < C; c++) {
            const char *xr = x + c * xs;
            const __m128i s16 = _mm_packs_epi32(
                _mm_loadu_si128((const __m128i *)(const void *)(kiln__q8_row_s(xr, k) + sb * 8)),
                _mm_loadu_si128((const __m128i *)(const void *)(kiln__q8_row_s(xr, k) + sb * 8 + 4)));
            __m256i imin = _mm256_madd_epi16(m01, _mm256_broadcastd_epi32(s16));
            imin = _mm256_add_epi32(imin,
                                    _mm256_madd_epi16(m23, _mm256_broadcastd_epi32(_mm_srli_si128(s16, 4))));
            imin = _mm256_add_epi32(imin,
                                    _mm256_madd_epi16(m45, _mm256_broadcastd_epi32(_mm_srli_si128(s16, 8))));
            imin = _mm256_add_epi32(imin,
                                    _mm256_madd_epi16(m67, _mm256_broadcastd_epi32(_mm_srli_si128(s16, 12))));
            const __m256 dx = _mm256_set1_ps(kiln__q8_row_d(xr, k)[sb * 8]);
            acc[h][c] = _mm256_fmadd_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(iacc[h][c]), acc[h][c]);
            acc[h][c] = _mm256_fnmadd_ps(_mm256_mul_ps(dmin, dx), _mm256_cvtepi32_ps(imin), acc[h][c]);
        }
    }
}

/* The top two bits of quad j (0..3) of a Q6_K high-bits vector, moved to bits 4-5 of each byte (the 16-bit
 * shifts carry bits across bytes only into bits the mask clears). */
INLINE __m256i top_bits(__m256i qh, int j) {
    const __m256i m = _mm256_set1_epi8(0x30);
    if (j == 0) return _mm256_and_si256(_mm256_slli_epi16(qh, 4), m);
    if (j == 1) return _mm256_and_si256(_mm256_slli_epi16(qh, 2), m);
    if (j == 2) return _mm256_and_si256(qh, m);
    return _mm256_and_si256(_mm256_srli_epi16(qh, 2), m);
}

/* The 8 per-row signed bytes at p (rows of one half) as int16 lanes, each twice, as row_pairs. */
INLINE __m256i row_pairs_signed(const unsigned char *p) {
    const __m128i v = _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(const void *)p));
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi16(v, v)), _mm_unpackhi_epi16(v, v),
                                   1);
}

/* The sum of activation quants 0-15 of q8 block b (in 128-bit registers: Zen 1 splits a 256-bit
 * lane-crossing shuffle into up to 8 micro-ops); 16-31 sum to the block sum less it. */
INLINE int32_t low_half_sum(const char *xr, int64_t b) {
    const __m128i xq = _mm_loadu_si128((const __m128i *)(const void *)(xr + 32 * b));
    __m128i s = _mm_madd_epi16(_mm_maddubs_epi16(_mm_set1_epi8(1), xq), _mm_set1_epi16(1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* Super-block sb of a Q6_K group (w at its first byte), halves [h0, h0 + H), C columns of super-block q8
 * rows. Each 16-element sub-block's pair sums meet its int8 scale in vpmaddwd and add in int32 with the
 * rest of the super-block; the +32 of the stored quants comes off once per super-block as 32 * sum_j sc_j
 * S_j (S_j the sub-block's activation sum, |S_j| <= 2032), then one float step: (d * dx) * (I - 32 O). */
INLINE void q6_k_super(int H, int h0, int C, const unsigned char *w, int64_t sb, int64_t k, const char *x,
                       size_t xs, __m256 (*acc)[CMAX]) {
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    __m256i iacc[2][CMAX], sp[CMAX][8];
    for (int h = 0; h < H; h++)
        for (int c = 0; c < C; c++)
            iacc[h][c] = _mm256_setzero_si256();
    for (int g = 0; g < 8; g++) {
        const unsigned char *q = w + 320 + 384 * g;
        const int64_t b = sb * 8 + g;
        if (H == 2) prefetch_share(w, g, 424, 7); /* decode */
        __m256i sca[2], scb[2];                   /* the block's two sub-block scales, per half */
        for (int h = 0; h < H; h++) {
            sca[h] = row_pairs_signed(w + 32 * g + 8 * (h0 + h));
            scb[h] = row_pairs_signed(w + 32 * g + 16 + 8 * (h0 + h));
        }
        for (int j = 0; j < 4; j += 2)
            for (int h = 0; h < H; h++) {
                const __m256i qh0 = load32(q + 256 + 32 * (h0 + h)), qh1 = load32(q + 320 + 32 * (h0 + h));
                __m256i qv0 = load32(q + 64 * j + 32 * (h0 + h)),
                        qv1 = load32(q + 64 * (j + 1) + 32 * (h0 + h));
                __m256i a0 = _mm256_or_si256(_mm256_and_si256(qv0, low4), top_bits(qh0, j));
                __m256i a1 = _mm256_or_si256(_mm256_and_si256(qv1, low4), top_bits(qh0, j + 1));
                __m256i b0 =
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qv0, 4), low4), top_bits(qh1, j));
                __m256i b1 =
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qv1, 4), low4), top_bits(qh1, j + 1));
                for (int c = 0; c < C; c++) {
                    const char *xb = x + c * xs + b * KILN_Q8_BLOCK;
                    __m256i pa = _mm256_add_epi16(_mm256_maddubs_epi16(a0, bcast4(xb + 4 * j)),
                                                  _mm256_maddubs_epi16(a1, bcast4(xb + 4 * j + 4)));
                    __m256i pb = _mm256_add_epi16(_mm256_maddubs_epi16(b0, bcast4(xb + 16 + 4 * j)),
                                                  _mm256_maddubs_epi16(b1, bcast4(xb + 16 + 4 * j + 4)));
                    iacc[h][c] =
                        _mm256_add_epi32(iacc[h][c], _mm256_add_epi32(_mm256_madd_epi16(pa, sca[h]),
                                                                      _mm256_madd_epi16(pb, scb[h])));
                }
            }
    }
    for (int c = 0; c < C; c++) { /* (S_a, S_b) of each block, an int16 pair in every lane pair */
        const char *xr = x + c * xs;
        for (int g = 0; g < 8; g++) {
            const int64_t b = sb * 8 + g;
            const int32_t lo = low_half_sum(xr, b), hi = kiln__q8_row_s(xr, k)[b] - lo;
            sp[c][g] = _mm256_set1_epi32((int32_t)(((uint32_t)lo & 0xffffu) | ((uint32_t)hi << 16)));
        }
    }
    for (int h = 0; h < H; h++) {
        const int r = 8 * (h0 + h);
        const __m256 d = halves8(w + 256 + 2 * r);
        __m256i off[CMAX];
        for (int c = 0; c < C; c++)
            off[c] = _mm256_setzero_si256();
        for (int g = 0; g < 8; g++) {
            const __m128i a = _mm_loadl_epi64((const __m128i *)(const void *)(w + 32 * g + r));
            const __m128i bb = _mm_loadl_epi64((const __m128i *)(const void *)(w + 32 * g + 16 + r));
            const __m256i scp = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(a, bb)); /* [r: sc_a, sc_b] */
            for (int c = 0; c < C; c++)
                off[c] = _mm256_add_epi32(off[c], _mm256_madd_epi16(scp, sp[c][g]));
        }
        for (int c = 0; c < C; c++) {
            const __m256 dx = _mm256_set1_ps(kiln__q8_row_d(x + c * xs, k)[sb * 8]);
            const __m256i i = _mm256_sub_epi32(iacc[h][c], _mm256_slli_epi32(off[c], 5));
            acc[h][c] = _mm256_fmadd_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(i), acc[h][c]);
        }
    }
}

/* 8 outputs of a half, of which only `rows` (0..8) exist. */
INLINE void store8(float *out, int rows, __m256 v) {
    if (rows >= 8) {
        _mm256_storeu_ps(out, v);
    } else if (rows > 0) {
        float t[8];
        _mm256_storeu_ps(t, v);
        memcpy(out, t, (size_t)rows * sizeof(float));
    }
}

/* Halves [h0, h0 + H) of one group (rows of it valid) times C columns, every super-block. */
INLINE void halves(int type, int H, int h0, int C, int64_t k, const unsigned char *w, const char *x,
                   size_t xs, float *out, size_t os, int64_t rows) {
    const int64_t bytes = type == KILN_TYPE_Q4_K ? Q4K_BYTES : Q6K_BYTES;
    __m256 acc[2][CMAX];
    for (int h = 0; h < H; h++)
        for (int c = 0; c < C; c++)
            acc[h][c] = _mm256_setzero_ps();
    for (int64_t sb = 0; sb < k / KILN_QK_K; sb++) {
        if (type == KILN_TYPE_Q4_K)
            q4_k_super(H, h0, C, w + sb * bytes, sb, k, x, xs, acc);
        else
            q6_k_super(H, h0, C, w + sb * bytes, sb, k, x, xs, acc);
    }
    for (int h = 0; h < H; h++)
        for (int c = 0; c < C; c++)
            store8(out + c * os + 8 * (h0 + h), (int)(rows - 8 * (h0 + h)), acc[h][c]);
}

#define HALF_CASE(n)                                                                                         \
    case n: halves(type, 1, h, n, k, wg, xc, xs, o, os, rows); break;

INLINE void packed(int type, int64_t k, const void *w, size_t ws, int64_t nr, const void *x, size_t xs,
                   int64_t nc, float *out, size_t os) {
    for (int64_t g = 0; g * 16 < nr; g++) {
        const unsigned char *wg = (const unsigned char *)w + g * ws;
        int64_t rows = nr - g * 16 < 16 ? nr - g * 16 : 16;
        if (nc == 1) {
            halves(type, 2, 0, 1, k, wg, x, xs, out + g * 16, os, rows);
            continue;
        }
        const int cmax = type == KILN_TYPE_Q4_K ? Q4K_CMAX : CMAX;
        for (int h = 0; h < 2 && 8 * h < rows; h++)
            for (int64_t c0 = 0; c0 < nc; c0 += cmax) {
                const char *xc = (const char *)x + c0 * xs;
                float *o = out + c0 * os + g * 16;
                switch (nc - c0 < cmax ? (int)(nc - c0) : cmax) {
                    HALF_CASE(4) HALF_CASE(3) HALF_CASE(2) HALF_CASE(1)
                }
            }
    }
}

KILN_AVX2 static void packed_q4_k(int64_t k, const void *w, size_t ws, int64_t nr, const void *x, size_t xs,
                                  int64_t nc, float *out, size_t os) {
    packed(KILN_TYPE_Q4_K, k, w, ws, nr, x, xs, nc, out, os);
}

KILN_AVX2 static void packed_q6_k(int64_t k, const void *w, size_t ws, int64_t nr, const void *x, size_t xs,
                                  int64_t nc, float *out, size_t os) {
    packed(KILN_TYPE_Q6_K, k, w, ws, nr, x, xs, nc, out, os);
}

void kiln__cpu_isa_init_avx2_packed_kquants(kiln_cpu_isa *t) {
    t->mm_packed[KILN_TYPE_Q4_K] = packed_q4_k;
    t->mm_packed[KILN_TYPE_Q6_K] = packed_q6_k;
}

#else
void kiln__cpu_isa_init_avx2_packed_kquants(kiln_cpu_isa *t) {
    (void)t;
}
#endif
