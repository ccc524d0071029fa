/*
 * avx2_mm.c - AVX2 + FMA + F16C matmul tiles and activation quantizer, compiled with target attributes
 * so the rest of the binary stays baseline x86-64. Each tile keeps up to 4 weight rows x 3 activation
 * columns (2 for the integer tiles, which need more registers per column) of accumulators in registers, so
 * one activation load feeds 4 rows and one weight load feeds 3 columns: 7 loads per 12 FMAs. Every (row, column) accumulator runs the same instruction sequence whatever the tile shape,
 * so results do not depend on how rows are split. Integer dots use vpmaddubsw: unsigned weights times
 * signed activations; its int16 pair sums cannot saturate here (|w| <= 128, |x| <= 127, 2 * 128 * 127 <
 * 32767). References: kernels_mm_ref.c.
 */
#include "backend/cpu/kernels.h"

#if defined(__x86_64__)
#include "backend/cpu/x86/avx2_hsum.h"
#include "tensor/types.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#define KILN_AVX2 __attribute__((target("avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline)) KILN_AVX2
#define RMAX 4
#define CMAX 3 /* float tiles: 4 x 3 (12 accumulators, 3 activation and 1 weight register); integer tiles 4 x 2 */

/* Eight weights of row type T starting at element i (n <= 8 of them valid, the rest zero). */
INLINE __m256 load_w(int type, const char *row, int64_t i, int64_t n) {
    if (type == KILN_TYPE_F32) {
        if (n >= 8) return _mm256_loadu_ps((const float *)row + i);
        float t[8] = {0};
        memcpy(t, (const float *)row + i, (size_t)n * sizeof(float));
        return _mm256_loadu_ps(t);
    }
    __m128i h;
    if (n >= 8) {
        h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + i));
    } else {
        uint16_t t[8] = {0};
        memcpy(t, (const uint16_t *)row + i, (size_t)n * sizeof(uint16_t));
        h = _mm_loadu_si128((const __m128i *)t);
    }
    if (type == KILN_TYPE_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

INLINE __m256 load_x(const char *row, int64_t i, int64_t n) { return load_w(KILN_TYPE_F32, row, i, n); }

INLINE void tile_float(int type, int R, int C, int64_t k, const char *w, size_t ws, const char *x, size_t xs,
                       float *out, size_t os) {
    __m256 acc[RMAX][CMAX];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) acc[r][c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < k; i += 8) {
        int64_t n = k - i;
        __m256 xv[CMAX];
        for (int c = 0; c < C; c++) xv[c] = load_x(x + c * xs, i, n);
        for (int r = 0; r < R; r++) {
            __m256 wv = load_w(type, w + r * ws, i, n);
            for (int c = 0; c < C; c++) acc[r][c] = _mm256_fmadd_ps(wv, xv[c], acc[r][c]);
        }
    }
    for (int c = 0; c < C; c++)
        for (int r = 0; r < R; r++) out[c * os + r] = kiln__hsum8(acc[r][c]);
}

/* Integer tiles: Q8_0 (type 8) and Q4_0 (type 2) weights times q8 activation rows. */
INLINE void tile_quant(int type, int R, int C, int64_t k, const char *w, size_t ws, const char *x, size_t xs,
                       float *out, size_t os) {
    const __m256i ones = _mm256_set1_epi16(1), low4 = _mm256_set1_epi8(0x0f), eights = _mm256_set1_epi8(8);
    __m256 acc[RMAX][CMAX];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) acc[r][c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < k / KILN_Q8_BLOCK; b++) {
        __m256i xq[CMAX], corr[CMAX];
        float xd[CMAX];
        for (int c = 0; c < C; c++) {
            xq[c] = _mm256_loadu_si256((const __m256i *)(x + c * xs + b * KILN_Q8_BLOCK));
            xd[c] = kiln__q8_row_d(x + c * xs, k)[b];
            if (type == KILN_TYPE_Q4_0) corr[c] = _mm256_maddubs_epi16(eights, xq[c]);
        }
        for (int r = 0; r < R; r++) {
            __m256i wq;
            float wd;
            if (type == KILN_TYPE_Q8_0) {
                const kiln_block_q8_0 *blk = (const kiln_block_q8_0 *)(w + r * ws) + b;
                wq = _mm256_loadu_si256((const __m256i *)blk->qs);
                wd = _cvtsh_ss(blk->d);
            } else {
                const kiln_block_q4_0 *blk = (const kiln_block_q4_0 *)(w + r * ws) + b;
                __m128i q = _mm_loadu_si128((const __m128i *)blk->qs);
                wq = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), low4);
                wd = _cvtsh_ss(blk->d);
            }
            __m256i wabs = type == KILN_TYPE_Q8_0 ? _mm256_sign_epi8(wq, wq) : wq;
            for (int c = 0; c < C; c++) {
                __m256i p;
                if (type == KILN_TYPE_Q8_0)
                    p = _mm256_maddubs_epi16(wabs, _mm256_sign_epi8(xq[c], wq));
                else
                    p = _mm256_sub_epi16(_mm256_maddubs_epi16(wabs, xq[c]), corr[c]);
                __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
                acc[r][c] = _mm256_fmadd_ps(f, _mm256_set1_ps(wd * xd[c]), acc[r][c]);
            }
        }
    }
    for (int c = 0; c < C; c++)
        for (int r = 0; r < R; r++) out[c * os + r] = kiln__hsum8(acc[r][c]);
}

/* Walk an nr x nc tile in register tiles of 4 rows x CT columns (fewer at the edges), columns outer so a
 * block of weight rows stays in cache. The tile's shape only groups loads: each (row, column) sum runs the
 * same sequence. */
#define TILE_COLS(tile, type, R, C, CT, ...)                                                           \
    do {                                                                                               \
        if ((CT) >= 3 && (C) >= 3) tile(type, R, 3, __VA_ARGS__);                                     \
        else if ((C) >= 2) tile(type, R, 2, __VA_ARGS__);                                             \
        else tile(type, R, 1, __VA_ARGS__);                                                           \
    } while (0)
#define DEFINE_MM(fn, tile, type, CT)                                                                  \
    KILN_AVX2 static void fn(int64_t k, const void *w, size_t ws, int64_t nr, const void *x, size_t xs,  \
                             int64_t nc, float *out, size_t os) {                                      \
        for (int64_t c0 = 0; c0 < nc; c0 += (CT)) {                                                    \
            const char *xc = (const char *)x + c0 * xs;                                                \
            int64_t r0 = 0, cols = nc - c0;                                                            \
            for (; r0 + RMAX <= nr; r0 += RMAX)                                                        \
                TILE_COLS(tile, type, 4, cols, CT, k, (const char *)w + r0 * ws, ws, xc, xs,           \
                          out + c0 * os + r0, os);                                                     \
            for (; r0 < nr; r0++)                                                                      \
                TILE_COLS(tile, type, 1, cols, CT, k, (const char *)w + r0 * ws, ws, xc, xs,           \
                          out + c0 * os + r0, os);                                                     \
        }                                                                                              \
    }

DEFINE_MM(mm_f32, tile_float, KILN_TYPE_F32, 3)
DEFINE_MM(mm_f16, tile_float, KILN_TYPE_F16, 3)
DEFINE_MM(mm_bf16, tile_float, KILN_TYPE_BF16, 3)
DEFINE_MM(mm_q8_0, tile_quant, KILN_TYPE_Q8_0, 2)
DEFINE_MM(mm_q4_0, tile_quant, KILN_TYPE_Q4_0, 2)

/* The largest |x| of n floats (a multiple of 32). */
static inline __attribute__((always_inline)) KILN_AVX2 float abs_max(const float *x, int64_t n) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += KILN_Q8_BLOCK)
        for (int j = 0; j < 4; j++) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i + 8 * j)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    return _mm_cvtss_f32(m4);
}

/* q8 rows whose scales are shared by `span` elements (kernels.h): the reference's arithmetic per element. */
static inline __attribute__((always_inline)) KILN_AVX2 void quantize_spans(const float *x, void *row, int64_t k,
                                                                            int64_t span) {
    int8_t *q = row;
    float *d = (float *)((char *)row + k);
    int32_t *s = (int32_t *)((char *)row + k + k / KILN_Q8_BLOCK * 4);
    for (int64_t b0 = 0; b0 < k; b0 += span) {
        float db = abs_max(x + b0, span) / 127.0f, id = db != 0.0f ? 1.0f / db : 0.0f;
        for (int64_t b = b0 / KILN_Q8_BLOCK; b < (b0 + span) / KILN_Q8_BLOCK; b++) {
            __m256i iv[4];
            for (int j = 0; j < 4; j++) /* clamped as in the reference: NaN -> -127, sums cannot overflow */
                iv[j] = _mm256_cvtps_epi32(
                    _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_loadu_ps(x + b * KILN_Q8_BLOCK + 8 * j),
                                                              _mm256_set1_ps(id)),
                                                _mm256_set1_ps(-127.0f)),
                                  _mm256_set1_ps(127.0f)));
            __m256i sum = _mm256_add_epi32(_mm256_add_epi32(iv[0], iv[1]), _mm256_add_epi32(iv[2], iv[3]));
            __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
            s4 = _mm_hadd_epi32(s4, s4);
            s4 = _mm_hadd_epi32(s4, s4);
            __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(iv[0], iv[1]), _mm256_packs_epi32(iv[2], iv[3]));
            p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
            _mm256_storeu_si256((__m256i *)(q + b * KILN_Q8_BLOCK), p);
            d[b] = db;
            s[b] = _mm_cvtsi128_si32(s4);
        }
    }
}

KILN_AVX2 static void quantize_q8(const float *x, void *row, int64_t k) { quantize_spans(x, row, k, KILN_Q8_BLOCK); }

KILN_AVX2 static void quantize_q8_sb(const float *x, void *row, int64_t k) {
    quantize_spans(x, row, k, KILN_Q8_SUPERBLOCK);
}

KILN_AVX2 static void f16_to_f32(const uint16_t *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
    for (; i < n; i++) y[i] = _cvtsh_ss(x[i]);
}

KILN_AVX2 static float dot_f32(const float *x, const float *y, int64_t n) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 8) acc = _mm256_fmadd_ps(load_x((const char *)x, i, n - i), load_x((const char *)y, i, n - i), acc);
    return kiln__hsum8(acc);
}

KILN_AVX2 static void axpy_f32(float *y, float a, const float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(_mm256_set1_ps(a), _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] = fmaf(a, x[i], y[i]);
}

KILN_AVX2 static void scale_f32(float *y, float a, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_set1_ps(a), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] *= a;
}

void kiln__cpu_isa_init_avx2(kiln_cpu_isa *t) {
    t->dot_f32 = dot_f32;
    t->axpy_f32 = axpy_f32;
    t->scale_f32 = scale_f32;
    t->mm[KILN_TYPE_F32] = mm_f32;
    t->mm[KILN_TYPE_F16] = mm_f16;
    t->mm[KILN_TYPE_BF16] = mm_bf16;
    t->mm[KILN_TYPE_Q8_0] = mm_q8_0;
    t->mm[KILN_TYPE_Q4_0] = mm_q4_0;
    t->quantize_q8 = quantize_q8;
    t->quantize_q8_sb = quantize_q8_sb;
    t->f16_to_f32 = f16_to_f32;
}

#else
/* Not x86-64: the level is never supported, so its table is never filled. */
void kiln__cpu_isa_init_avx2(kiln_cpu_isa *t) { (void)t; }
#endif
