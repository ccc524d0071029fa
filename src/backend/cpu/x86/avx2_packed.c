/*
 * avx2_packed.c - AVX2 matmul tiles over repacked Q8_0 and Q4_0 weights (the 16-row layout of repack.c,
 * shared with the AVX-512 tiles, so one packed copy serves either level) times q8 activation rows.
 *
 * A 64-byte vector of the layout holds 4 bytes of each of 16 rows; its two 32-byte halves are two ymm
 * registers of 8 rows each. The 4 matching activation bytes, broadcast to every lane, multiply a half with
 * vpmaddubsw (unsigned x signed bytes to int16 pair sums), so each instruction advances 8 row dots and no
 * horizontal sums or per-row scale shuffles are needed. Without VNNI the int16 stage must not saturate:
 *   Q4_0  nibbles n (0..15) are the unsigned operand: a pair sum is at most 2 * 15 * 127 = 3810, so the
 *         8 products of a block (4 vectors, low and high nibbles) add in int16 (at most 30480 < 32767)
 *         before one vpmaddwd widens them; sum((n - 8) x) = sum(n x) - 8 s with the q8 block sum s.
 *   Q8_0  the stored q + 128 would reach 2 * 255 * 127 and saturate, so the weights are flipped back to
 *         signed q and multiplied as |q| times x with q's sign (vpsignb): at most 2 * 128 * 127 = 32512,
 *         one vpmaddwd per product.
 * On Zen 1 both multiplies issue on one pipe, so the int16 stage of Q4_0 nearly halves its multiply work.
 *
 * Prefill (several columns) takes each 8-row half of a group in turn against up to CMAX columns, so one
 * weight vector, unpacked once, feeds CMAX multiplies (16 ymm registers: 4 int16 or int32 block sums, 4
 * float sums, the weights and one broadcast). Decode (one column) walks both halves together, so the
 * group's bytes are read once, in order. Every (row, column) sums its blocks in order with the same
 * instructions either way, so results do not depend on the column count or on how rows are split; the
 * integer block dots are exact, and only the float sum over blocks differs from the reference
 * (kernels_mm_ref.c), which tests compare. Decode prefetches PREFETCH bytes ahead (Q8_0 tg32 +45% on Zen 1;
 * the K-quant tiles do the same, spread over a super-block's blocks).
 */
#include "backend/cpu/kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define KILN_AVX2 __attribute__((target("avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline)) KILN_AVX2
#define CMAX 4
/* Decode streams a group's blocks once, in order; one thread's demand misses alone read about 7 GB/s on
 * Zen 1, so it asks for the bytes this far ahead (the bandwidth probe's best distance on this machine). */
#define PREFETCH 2048

INLINE __m256i bcast4(const char *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* Block b of halves [h0, h0 + H) of one group (q at the group's first byte) times C columns: the exact
 * integer dots, less the weights' bias, scaled and added into acc[h][c]. */
INLINE void block(int type, int H, int h0, int C, int64_t k, const unsigned char *q, int64_t b, const char *x,
                  size_t xs, __m256 (*acc)[CMAX]) {
    const __m256i ones = _mm256_set1_epi16(1), low4 = _mm256_set1_epi8(0x0f), flip = _mm256_set1_epi8((char)0x80);
    const unsigned char *blk = q + b * (type == KILN_TYPE_Q8_0 ? 544 : 288);
    __m256i isum[2][CMAX];
    for (int h = 0; h < H; h++)
        for (int c = 0; c < C; c++) isum[h][c] = _mm256_setzero_si256();
    if (type == KILN_TYPE_Q4_0) {
        for (int j = 0; j < 4; j++)
            for (int h = 0; h < H; h++) {
                __m256i wv = _mm256_loadu_si256((const __m256i *)(const void *)(blk + 64 * j + 32 * (h0 + h)));
                __m256i lo = _mm256_and_si256(wv, low4), hi = _mm256_and_si256(_mm256_srli_epi16(wv, 4), low4);
                for (int c = 0; c < C; c++) {
                    const char *xb = x + c * xs + b * KILN_Q8_BLOCK;
                    isum[h][c] = _mm256_add_epi16(isum[h][c], _mm256_maddubs_epi16(lo, bcast4(xb + 4 * j)));
                    isum[h][c] = _mm256_add_epi16(isum[h][c], _mm256_maddubs_epi16(hi, bcast4(xb + 16 + 4 * j)));
                }
            }
        for (int h = 0; h < H; h++)
            for (int c = 0; c < C; c++) {
                __m256i bias = _mm256_set1_epi32(8 * kiln__q8_row_s(x + c * xs, k)[b]);
                isum[h][c] = _mm256_sub_epi32(_mm256_madd_epi16(isum[h][c], ones), bias);
            }
    } else {
        for (int j = 0; j < 8; j++)
            for (int h = 0; h < H; h++) {
                __m256i wv = _mm256_xor_si256(
                    _mm256_loadu_si256((const __m256i *)(const void *)(blk + 64 * j + 32 * (h0 + h))), flip);
                __m256i wabs = _mm256_sign_epi8(wv, wv);
                for (int c = 0; c < C; c++) {
                    __m256i xv = _mm256_sign_epi8(bcast4(x + c * xs + b * KILN_Q8_BLOCK + 4 * j), wv);
                    isum[h][c] = _mm256_add_epi32(isum[h][c], _mm256_madd_epi16(_mm256_maddubs_epi16(wabs, xv), ones));
                }
            }
    }
    const unsigned char *scales = blk + (type == KILN_TYPE_Q8_0 ? 512 : 256);
    for (int h = 0; h < H; h++) {
        __m256 wd = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(scales + 16 * (h0 + h))));
        for (int c = 0; c < C; c++) {
            __m256 scale = _mm256_mul_ps(wd, _mm256_set1_ps(kiln__q8_row_d(x + c * xs, k)[b]));
            acc[h][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[h][c]), scale, acc[h][c]);
        }
    }
}

/* Halves [h0, h0 + H) of one group times C columns, every block, stored to out (row 8 h0 first). */
INLINE void halves(int type, int H, int h0, int C, int64_t k, const unsigned char *w, const char *x, size_t xs,
                   float *out, size_t os) {
    __m256 acc[2][CMAX];
    for (int h = 0; h < H; h++)
        for (int c = 0; c < C; c++) acc[h][c] = _mm256_setzero_ps();
    const int64_t bytes = type == KILN_TYPE_Q8_0 ? 544 : 288;
    for (int64_t b = 0; b < k / KILN_Q8_BLOCK; b++) {
        if (H == 2) /* decode: this block's lines, PREFETCH bytes ahead */
            for (int64_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)w + b * bytes + PREFETCH + o, _MM_HINT_T0);
        block(type, H, h0, C, k, w, b, x, xs, acc);
    }
    for (int h = 0; h < H; h++)
        for (int c = 0; c < C; c++) _mm256_storeu_ps(out + c * os + 8 * (h0 + h), acc[h][c]);
}

#define HALF_CASE(n) case n: halves(type, 1, h, n, k, wg, xc, xs, o, os); break;

INLINE void packed(int type, int64_t k, const void *w, size_t ws, int64_t nr, const void *x, size_t xs, int64_t nc,
                   float *out, size_t os) {
    for (int64_t g = 0; g < nr / 16; g++) {
        const unsigned char *wg = (const unsigned char *)w + g * ws;
        if (nc == 1) {
            halves(type, 2, 0, 1, k, wg, x, xs, out + g * 16, os);
            continue;
        }
        for (int h = 0; h < 2; h++)
            for (int64_t c0 = 0; c0 < nc; c0 += CMAX) {
                const char *xc = (const char *)x + c0 * xs;
                float *o = out + c0 * os + g * 16;
                switch (nc - c0 < CMAX ? (int)(nc - c0) : CMAX) {
                    HALF_CASE(4) HALF_CASE(3) HALF_CASE(2) HALF_CASE(1)
                }
            }
    }
}

KILN_AVX2 static void packed_q8_0(int64_t k, const void *w, size_t ws, int64_t nr, const void *x, size_t xs,
                                  int64_t nc, float *out, size_t os) {
    packed(KILN_TYPE_Q8_0, k, w, ws, nr, x, xs, nc, out, os);
}

KILN_AVX2 static void packed_q4_0(int64_t k, const void *w, size_t ws, int64_t nr, const void *x, size_t xs,
                                  int64_t nc, float *out, size_t os) {
    packed(KILN_TYPE_Q4_0, k, w, ws, nr, x, xs, nc, out, os);
}

void kiln__cpu_isa_init_avx2_packed(kiln_cpu_isa *t) {
    t->mm_packed[KILN_TYPE_Q8_0] = packed_q8_0;
    t->mm_packed[KILN_TYPE_Q4_0] = packed_q4_0;
}

#else
void kiln__cpu_isa_init_avx2_packed(kiln_cpu_isa *t) { (void)t; }
#endif
