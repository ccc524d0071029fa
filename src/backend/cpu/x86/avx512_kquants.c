/*
 * avx512_kquants.c - VNNI matmul tiles over repacked Q4_K and Q6_K weights (layout in repack_kquants.c)
 * times q8 activation rows. As in avx512_packed.c, one 64-byte load holds 4 quants of each of 16 rows, and
 * vpdpbusd (unsigned weights 0..15 or 0..63 as the u8 operand, the 4 matching signed activation bytes
 * broadcast as the s8 operand) advances 16 row dots at once. Per 32-element q8 block the integer dot is
 * exact; the float term per block follows the reference (kernels_mm_kquants_ref.c):
 *   Q4_K  (dl * I) * dx - ml * (dx * s): dl = d * sc and ml = dmin * m are formed per row exactly as
 *         the reference forms them, the min term uses the q8 row's block sum s;
 *   Q6_K  dx * (dl_a * I_a + dl_b * I_b) over the block's two 16-element sub-blocks. The weights are
 *         stored as q + 32, so I = sum (q + 32) x - 32 sum x; the half-block sums 32 sum x come from one
 *         vpdpbusd of 64 activation bytes with a vector of 32s and two shuffle-adds, per super-block
 *         and column.
 * Only the rounding of the fused products and the order of the float sums differ from the reference.
 *
 * Up to CMAX activation columns share each weight load (prefill); one column (decode) streams the weights
 * once, with software prefetches AHEAD bytes ahead: a group's super-blocks are contiguous and the groups of
 * a thread's rows follow each other, so the stream runs on into the next group (prefetching past the end
 * of the buffer cannot fault). The prefetches are spread over the super-block's blocks (prefetch_part);
 * 4 KiB ahead measured best (2 KiB 5-8% slower, 6 and 10 KiB 2-4% slower); two half-group streams, as
 * the Q4_0 tile has, measured 2-3% slower (Sapphire Rapids). On AMD (kiln__cpu_decode_streams) the
 * "_one" variants issue no prefetches, leaving the one sequential run to the hardware prefetcher.
 */
#include "backend/cpu/kernels.h"

#if defined(__x86_64__)
#include "tensor/types.h"

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define KILN_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline)) KILN_AVX512
#define CMAX 8
#define AHEAD 4096
#define Q4K_BYTES 2368 /* one super-block of a 16-row group (repack_kquants.c) */
#define Q6K_BYTES 3392

INLINE __m512i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

INLINE __m512 halves(const unsigned char *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)p));
}

/* 16 scale bytes (one per row) as floats, unsigned (Q4_K) or signed (Q6_K). */
INLINE __m512 scales_u8(const unsigned char *p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p)));
}
INLINE __m512 scales_s8(const unsigned char *p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p)));
}

/* Part g of 8 of the software prefetch of a super-block's bytes at pf (NULL: none). The prefetches are
 * spread over the super-block's 8 q8 blocks, a few lines per block among the arithmetic: issued as one
 * burst of 37-53 lines they filled the line-fill buffers and stalled the core at the burst (perf put 60%
 * of the Q4_K decode samples on the prefetch instructions). */
INLINE void prefetch_part(const unsigned char *pf, int64_t bytes, int g) {
    const int64_t lines = (bytes + 63) / 64, per = (lines + 7) / 8;
    if (!pf) return;
    for (int64_t l = g * per; l < (g + 1) * per && l < lines; l++)
        _mm_prefetch((const char *)((uintptr_t)pf + (uintptr_t)(l * 64)), _MM_HINT_T0);
}

/* Super-block sb of one group (w at its first byte) times C columns, accumulated into acc; pf: where to
 * prefetch (decode) or NULL. */
INLINE void q4_k_super(int C, const unsigned char *w, int64_t sb, int64_t k, const char *x, size_t xs,
                       __m512 *acc, const unsigned char *pf) {
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    const __m512 d = halves(w + 256), dmin = halves(w + 288);
    /* dx * s of the super-block's 8 q8 blocks per column, converted 8 at a time: a scalar conversion
     * per block and column cost more than the block's dot. */
    float xs8[CMAX][8] __attribute__((aligned(32)));
    for (int c = 0; c < C; c++) {
        const char *xr = x + c * xs;
        __m256i s = _mm256_loadu_si256((const __m256i *)(const void *)(kiln__q8_row_s(xr, k) + sb * 8));
        _mm256_store_ps(
            xs8[c], _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_loadu_ps(kiln__q8_row_d(xr, k) + sb * 8)));
    }
    for (int g = 0; g < 8; g++) {
        const int64_t b = sb * 8 + g;
        const unsigned char *q = w + 320 + 256 * g;
        prefetch_part(pf, Q4K_BYTES, g);
        __m512i isum[CMAX];
        for (int c = 0; c < C; c++) isum[c] = _mm512_setzero_si512();
        for (int j = 0; j < 4; j++) {
            __m512i wv = _mm512_loadu_si512((const void *)(q + 64 * j));
            __m512i lo = _mm512_and_si512(wv, low4), hi = _mm512_and_si512(_mm512_srli_epi16(wv, 4), low4);
            for (int c = 0; c < C; c++) {
                const int8_t *xb = (const int8_t *)(x + c * xs) + b * KILN_Q8_BLOCK;
                isum[c] = _mm512_dpbusd_epi32(isum[c], lo, bcast4(xb + 4 * j));
                isum[c] = _mm512_dpbusd_epi32(isum[c], hi, bcast4(xb + 16 + 4 * j));
            }
        }
        const __m512 dl = _mm512_mul_ps(d, scales_u8(w + 16 * g)),
                     ml = _mm512_mul_ps(dmin, scales_u8(w + 128 + 16 * g));
        for (int c = 0; c < C; c++) {
            __m512 t = _mm512_mul_ps(dl, _mm512_cvtepi32_ps(isum[c]));
            acc[c] = _mm512_fmadd_ps(t, _mm512_set1_ps(kiln__q8_row_d(x + c * xs, k)[b]), acc[c]);
            acc[c] = _mm512_fnmadd_ps(ml, _mm512_set1_ps(xs8[c][g]), acc[c]);
        }
    }
}

/* The top two bits of quad j (0..3) of a Q6_K high-bits vector, moved to bits 4-5 of each byte. The
 * 16-bit shifts carry bits across bytes, but only into bits the mask clears. */
INLINE __m512i top_bits(__m512i qh, int j) {
    const __m512i m = _mm512_set1_epi8(0x30);
    if (j == 0) return _mm512_and_si512(_mm512_slli_epi16(qh, 4), m);
    if (j == 1) return _mm512_and_si512(_mm512_slli_epi16(qh, 2), m);
    if (j == 2) return _mm512_and_si512(qh, m);
    return _mm512_and_si512(_mm512_srli_epi16(qh, 2), m);
}

INLINE void q6_k_super(int C, const unsigned char *w, int64_t sb, int64_t k, const char *x, size_t xs,
                       __m512 *acc, const unsigned char *pf) {
    const __m512i low4 = _mm512_set1_epi8(0x0f), k32 = _mm512_set1_epi8(32);
    const __m512 d = halves(w + 256);
    /* 32 * (sum of the 16 activation quants of sub-block j) at half[c][4 j]. */
    int32_t half[CMAX][64] __attribute__((aligned(64)));
    for (int c = 0; c < C; c++)
        for (int v = 0; v < 4; v++) {
            __m512i xv = _mm512_loadu_si512((const void *)(x + c * xs + sb * KILN_QK_K + 64 * v));
            __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), k32, xv);
            s = _mm512_add_epi32(s, _mm512_shuffle_epi32(s, _MM_PERM_CDAB));
            s = _mm512_add_epi32(s, _mm512_shuffle_epi32(s, _MM_PERM_BADC));
            _mm512_store_si512((void *)(half[c] + 16 * v), s);
        }
    for (int g = 0; g < 8; g++) {
        const int64_t b = sb * 8 + g;
        const unsigned char *q = w + 320 + 384 * g;
        prefetch_part(pf, Q6K_BYTES, g);
        const __m512i qh0 = _mm512_loadu_si512((const void *)(q + 256)),
                      qh1 = _mm512_loadu_si512((const void *)(q + 320));
        __m512i ia[CMAX], ib[CMAX];
        for (int c = 0; c < C; c++) ia[c] = ib[c] = _mm512_setzero_si512();
        for (int j = 0; j < 4; j++) {
            __m512i qv = _mm512_loadu_si512((const void *)(q + 64 * j));
            __m512i u0 = _mm512_or_si512(_mm512_and_si512(qv, low4), top_bits(qh0, j));
            __m512i u1 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(qv, 4), low4), top_bits(qh1, j));
            for (int c = 0; c < C; c++) {
                const int8_t *xb = (const int8_t *)(x + c * xs) + b * KILN_Q8_BLOCK;
                ia[c] = _mm512_dpbusd_epi32(ia[c], u0, bcast4(xb + 4 * j));
                ib[c] = _mm512_dpbusd_epi32(ib[c], u1, bcast4(xb + 16 + 4 * j));
            }
        }
        const __m512 dla = _mm512_mul_ps(d, scales_s8(w + 32 * g)),
                     dlb = _mm512_mul_ps(d, scales_s8(w + 32 * g + 16));
        for (int c = 0; c < C; c++) {
            __m512i a = _mm512_sub_epi32(ia[c], _mm512_set1_epi32(half[c][8 * g]));
            __m512i bb = _mm512_sub_epi32(ib[c], _mm512_set1_epi32(half[c][8 * g + 4]));
            __m512 t =
                _mm512_fmadd_ps(dlb, _mm512_cvtepi32_ps(bb), _mm512_mul_ps(dla, _mm512_cvtepi32_ps(a)));
            acc[c] = _mm512_fmadd_ps(t, _mm512_set1_ps(kiln__q8_row_d(x + c * xs, k)[b]), acc[c]);
        }
    }
}

/* One group of 16 rows (the first rows of them valid) times C columns. */
INLINE void group(int type, int C, int PF, int64_t k, const unsigned char *w, const char *x, size_t xs, float *out,
                  size_t os, int64_t rows) {
    const int64_t bytes = type == KILN_TYPE_Q4_K ? Q4K_BYTES : Q6K_BYTES;
    __m512 acc[CMAX];
    for (int c = 0; c < C; c++) acc[c] = _mm512_setzero_ps();
    for (int64_t sb = 0; sb < k / KILN_QK_K; sb++) {
        const unsigned char *ws = w + sb * bytes;
        const unsigned char *pf = C == 1 && PF ? (const unsigned char *)((uintptr_t)ws + AHEAD) : NULL;
        if (type == KILN_TYPE_Q4_K) q4_k_super(C, ws, sb, k, x, xs, acc, pf);
        else q6_k_super(C, ws, sb, k, x, xs, acc, pf);
    }
    const __mmask16 keep = rows >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << rows) - 1);
    for (int c = 0; c < C; c++) _mm512_mask_storeu_ps(out + c * os, keep, acc[c]);
}

/* The register tile: up to CMAX columns per weight load, in instantiations for each count. */
#define GROUP_CASE(n, type, PF) case n: group(type, n, PF, k, wg, xc, xs, o, os, nr - g * 16); break
#define DEFINE_TILE(fn, type, PF)                                                                          \
    KILN_AVX512 static void fn(int64_t k, const void *w, size_t ws, int64_t nr, const void *x, size_t xs,  \
                               int64_t nc, float *out, size_t os) {                                        \
        for (int64_t g = 0; g * 16 < nr; g++) {                                                            \
            const unsigned char *wg = (const unsigned char *)w + g * ws;                                   \
            for (int64_t c0 = 0; c0 < nc; c0 += CMAX) {                                                    \
                const char *xc = (const char *)x + c0 * xs;                                                \
                float *o = out + c0 * os + g * 16;                                                         \
                switch (nc - c0 < CMAX ? (int)(nc - c0) : CMAX) {                                          \
                    GROUP_CASE(8, type, PF); GROUP_CASE(7, type, PF); GROUP_CASE(6, type, PF);             \
                    GROUP_CASE(5, type, PF); GROUP_CASE(4, type, PF); GROUP_CASE(3, type, PF);             \
                    GROUP_CASE(2, type, PF);                                                               \
                default: group(type, 1, PF, k, wg, xc, xs, o, os, nr - g * 16); break;                     \
                }                                                                                          \
            }                                                                                              \
        }                                                                                                  \
    }

DEFINE_TILE(packed_q4_k, KILN_TYPE_Q4_K, 1)
DEFINE_TILE(packed_q6_k, KILN_TYPE_Q6_K, 1)
DEFINE_TILE(packed_q4_k_one, KILN_TYPE_Q4_K, 0)
DEFINE_TILE(packed_q6_k_one, KILN_TYPE_Q6_K, 0)

kiln_mm_fn kiln__cpu_avx512_kquants_variant(kiln_type type, int streams) {
    if (type == KILN_TYPE_Q4_K) return streams == 1 ? packed_q4_k_one : packed_q4_k;
    if (type == KILN_TYPE_Q6_K) return streams == 1 ? packed_q6_k_one : packed_q6_k;
    return NULL;
}

void kiln__cpu_isa_init_avx512_kquants(kiln_cpu_isa *t) {
    int streams = kiln__cpu_decode_streams();
    t->mm_packed[KILN_TYPE_Q4_K] = kiln__cpu_avx512_kquants_variant(KILN_TYPE_Q4_K, streams);
    t->mm_packed[KILN_TYPE_Q6_K] = kiln__cpu_avx512_kquants_variant(KILN_TYPE_Q6_K, streams);
}

#else
void kiln__cpu_isa_init_avx512_kquants(kiln_cpu_isa *t) { (void)t; }
kiln_mm_fn kiln__cpu_avx512_kquants_variant(kiln_type type, int streams) {
    (void)type, (void)streams;
    return NULL;
}
#endif
