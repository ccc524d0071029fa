/*
 * avx512_mm.c - AVX-512 (F/BW/VL/DQ) + VNNI matmul tiles and activation quantizer, compiled with target
 * attributes. Tiles hold up to 4 weight rows x 4 activation columns (float weights) or 4 x 2 (quantized
 * weights) of accumulators. Every (row, column) accumulator runs the same instruction sequence whatever
 * the tile shape, so results do not depend on how rows are split over threads.
 *
 * Integer dots run two 32-blocks per 512-bit vpdpbusd (unsigned x signed bytes, no saturation):
 *   Q8_0  sum(w * x) = sum((x + 128) * w) - 128 * sum(w): the activation bytes are flipped to unsigned
 *         once per column and the weight correction is one vpdpbusd per row, shared by all columns.
 *   Q4_0  sum((n - 8) * x) = sum(n * x) - sum(8 * x): nibbles n are already unsigned; the correction
 *         depends on the column only.
 * References: kernels_mm_ref.c.
 */
#include "backend/cpu/kernels.h"

#if defined(__x86_64__)
#include "tensor/types.h"

#include <immintrin.h>

#define KILN_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline)) KILN_AVX512
#define RMAX 4
#define CMAX 4

INLINE __mmask16 tail_mask16(int64_t n) { return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1); }

/* Sixteen weights of row type T starting at element i (n of them valid, the rest zero). */
INLINE __m512 load_w(int type, const char *row, int64_t i, int64_t n) {
    __mmask16 m = tail_mask16(n);
    if (type == KILN_TYPE_F32) return _mm512_maskz_loadu_ps(m, (const float *)row + i);
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)row + i);
    if (type == KILN_TYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

INLINE void tile_float(int type, int R, int C, int64_t k, const char *w, size_t ws, const char *x, size_t xs,
                       float *out, size_t os) {
    __m512 acc[RMAX][CMAX];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) acc[r][c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < k; i += 16) {
        int64_t n = k - i;
        __m512 xv[CMAX];
        for (int c = 0; c < C; c++) xv[c] = load_w(KILN_TYPE_F32, x + c * xs, i, n);
        for (int r = 0; r < R; r++) {
            __m512 wv = load_w(type, w + r * ws, i, n);
            for (int c = 0; c < C; c++) acc[r][c] = _mm512_fmadd_ps(wv, xv[c], acc[r][c]);
        }
    }
    for (int c = 0; c < C; c++)
        for (int r = 0; r < R; r++) out[c * os + r] = _mm512_reduce_add_ps(acc[r][c]);
}

/* [a x 8, b x 8] from the first two floats of v. */
INLINE __m512 spread2(__m128 v) {
    const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(v));
}

/* Weight blocks b and b + 1 (only b when two == 0) of a row: unsigned or signed bytes and scales. */
INLINE __m512i load_wq(int type, const char *row, int64_t b, int two, __m512 *scale) {
    uint32_t h;
    if (type == KILN_TYPE_Q8_0) {
        const kiln_block_q8_0 *blk = (const kiln_block_q8_0 *)row + b;
        __m256i lo = _mm256_loadu_si256((const __m256i *)blk[0].qs);
        __m256i hi = two ? _mm256_loadu_si256((const __m256i *)blk[1].qs) : _mm256_setzero_si256();
        h = blk[0].d | (two ? (uint32_t)blk[1].d << 16 : 0u);
        *scale = spread2(_mm_cvtph_ps(_mm_cvtsi32_si128((int)h)));
        return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    }
    const kiln_block_q4_0 *blk = (const kiln_block_q4_0 *)row + b;
    const __m512i shifts = _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4);
    __m128i q0 = _mm_loadu_si128((const __m128i *)blk[0].qs);
    __m128i q1 = two ? _mm_loadu_si128((const __m128i *)blk[1].qs) : _mm_setzero_si128();
    __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_broadcastsi128_si256(q0)),
                                   _mm256_broadcastsi128_si256(q1), 1);
    h = blk[0].d | (two ? (uint32_t)blk[1].d << 16 : 0u);
    *scale = spread2(_mm_cvtph_ps(_mm_cvtsi32_si128((int)h)));
    return _mm512_and_si512(_mm512_srlv_epi64(v, shifts), _mm512_set1_epi8(0x0f));
}

INLINE void tile_quant(int type, int R, int C, int64_t k, const char *w, size_t ws, const char *x, size_t xs,
                       float *out, size_t os) {
    const __m512i flip = _mm512_set1_epi8((char)0x80), eights = _mm512_set1_epi8(8);
    int64_t nb = k / KILN_Q8_BLOCK;
    __m512 acc[RMAX][2];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) acc[r][c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b += 2) {
        int two = b + 1 < nb;
        __mmask64 m = two ? ~(__mmask64)0 : (__mmask64)0xffffffffu;
        __m512i xq[2], corr_c[2];
        __m512 xd[2];
        for (int c = 0; c < C; c++) {
            const char *xr = x + c * xs;
            const float *d = kiln__q8_row_d(xr, k) + b;
            xq[c] = _mm512_maskz_loadu_epi8(m, xr + b * KILN_Q8_BLOCK);
            xd[c] = spread2(two ? _mm_castpd_ps(_mm_load_sd((const double *)d)) : _mm_load_ss(d));
            if (type == KILN_TYPE_Q8_0) xq[c] = _mm512_maskz_xor_epi32(two ? 0xffff : 0x00ff, xq[c], flip);
            else corr_c[c] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), eights, xq[c]);
        }
        for (int r = 0; r < R; r++) {
            __m512 wd;
            __m512i wq = load_wq(type, w + r * ws, b, two, &wd), corr_r = _mm512_setzero_si512();
            if (type == KILN_TYPE_Q8_0) corr_r = _mm512_dpbusd_epi32(_mm512_setzero_si512(), flip, wq);
            for (int c = 0; c < C; c++) {
                __m512i t = _mm512_dpbusd_epi32(_mm512_setzero_si512(), type == KILN_TYPE_Q8_0 ? xq[c] : wq,
                                                type == KILN_TYPE_Q8_0 ? wq : xq[c]);
                t = _mm512_sub_epi32(t, type == KILN_TYPE_Q8_0 ? corr_r : corr_c[c]);
                acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(wd, xd[c]), acc[r][c]);
            }
        }
    }
    for (int c = 0; c < C; c++)
        for (int r = 0; r < R; r++) out[c * os + r] = _mm512_reduce_add_ps(acc[r][c]);
}

#define DEFINE_MM(fn, tile, type, CT)                                                                  \
    KILN_AVX512 static void fn(int64_t k, const void *w, size_t ws, int64_t nr, const void *x, size_t xs, \
                               int64_t nc, float *out, size_t os) {                                    \
        for (int64_t c0 = 0; c0 < nc; c0 += CT) {                                                      \
            const char *xc = (const char *)x + c0 * xs;                                                \
            int64_t cc = nc - c0 < CT ? nc - c0 : CT;                                                  \
            for (int64_t r0 = 0; r0 < nr; r0 += RMAX) {                                                \
                const char *wr = (const char *)w + r0 * ws;                                            \
                float *o = out + c0 * os + r0;                                                         \
                int rr = nr - r0 < RMAX ? (int)(nr - r0) : RMAX;                                       \
                switch (rr * 8 + (int)cc) {                                                            \
                case 4 * 8 + 4: tile(type, 4, CT > 3 ? 4 : CT, k, wr, ws, xc, xs, o, os); break;        \
                case 4 * 8 + 3: tile(type, 4, CT > 2 ? 3 : CT, k, wr, ws, xc, xs, o, os); break;        \
                case 4 * 8 + 2: tile(type, 4, 2, k, wr, ws, xc, xs, o, os); break;                      \
                case 4 * 8 + 1: tile(type, 4, 1, k, wr, ws, xc, xs, o, os); break;                      \
                default:                                                                               \
                    for (int r = 0; r < rr; r++)                                                       \
                        for (int64_t c = 0; c < cc; c++)                                               \
                            tile(type, 1, 1, k, wr + r * ws, ws, xc + c * xs, xs, o + c * os + r, os);  \
                }                                                                                      \
            }                                                                                          \
        }                                                                                              \
    }

DEFINE_MM(mm_f32, tile_float, KILN_TYPE_F32, 4)
DEFINE_MM(mm_f16, tile_float, KILN_TYPE_F16, 4)
DEFINE_MM(mm_bf16, tile_float, KILN_TYPE_BF16, 4)
DEFINE_MM(mm_q8_0, tile_quant, KILN_TYPE_Q8_0, 2)
DEFINE_MM(mm_q4_0, tile_quant, KILN_TYPE_Q4_0, 2)

KILN_AVX512 static void quantize_q8(const float *x, void *row, int64_t k) {
    int8_t *q = row;
    float *d = (float *)((char *)row + k);
    int32_t *s = (int32_t *)((char *)row + k + k / KILN_Q8_BLOCK * 4);
    for (int64_t b = 0; b < k / KILN_Q8_BLOCK; b++) {
        __m512 v0 = _mm512_loadu_ps(x + b * KILN_Q8_BLOCK), v1 = _mm512_loadu_ps(x + b * KILN_Q8_BLOCK + 16);
        float db = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1))) / 127.0f;
        float id = db != 0.0f ? 1.0f / db : 0.0f;
        /* clamped as in the reference: NaN -> -127, and the block sum cannot overflow */
        const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
        __m512i i0 = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v0, _mm512_set1_ps(id)), lo), hi));
        __m512i i1 = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v1, _mm512_set1_ps(id)), lo), hi));
        _mm_storeu_si128((__m128i *)(q + b * KILN_Q8_BLOCK), _mm512_cvtsepi32_epi8(i0));
        _mm_storeu_si128((__m128i *)(q + b * KILN_Q8_BLOCK + 16), _mm512_cvtsepi32_epi8(i1));
        d[b] = db;
        s[b] = _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
    }
}

KILN_AVX512 static void f16_to_f32(const uint16_t *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask16(n - i);
        _mm512_mask_storeu_ps(y + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x + i)));
    }
}

KILN_AVX512 static void bf16_to_f32(const uint16_t *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask16(n - i);
        __m512i v = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, x + i)), 16);
        _mm512_mask_storeu_ps(y + i, m, _mm512_castsi512_ps(v));
    }
}

KILN_AVX512 static float dot_f32(const float *x, const float *y, int64_t n) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask16(n - i);
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i), acc);
    }
    return _mm512_reduce_add_ps(acc);
}

KILN_AVX512 static void axpy_f32(float *y, float a, const float *x, int64_t n) {
    __m512 av = _mm512_set1_ps(a);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask16(n - i);
        _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
    }
}

KILN_AVX512 static void scale_f32(float *y, float a, int64_t n) {
    __m512 av = _mm512_set1_ps(a);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask16(n - i);
        _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(av, _mm512_maskz_loadu_ps(m, y + i)));
    }
}

void kiln__cpu_isa_init_avx512(kiln_cpu_isa *t) {
    t->dot_f32 = dot_f32;
    t->axpy_f32 = axpy_f32;
    t->scale_f32 = scale_f32;
    t->mm[KILN_TYPE_F32] = mm_f32;
    t->mm[KILN_TYPE_F16] = mm_f16;
    t->mm[KILN_TYPE_BF16] = mm_bf16;
    t->mm[KILN_TYPE_Q8_0] = mm_q8_0;
    t->mm[KILN_TYPE_Q4_0] = mm_q4_0;
    t->quantize_q8 = quantize_q8;
    t->f16_to_f32 = f16_to_f32;
    t->bf16_to_f32 = bf16_to_f32;
}

#else
/* Not x86-64: the level is never supported, so its table is never filled. */
void kiln__cpu_isa_init_avx512(kiln_cpu_isa *t) { (void)t; }
#endif
