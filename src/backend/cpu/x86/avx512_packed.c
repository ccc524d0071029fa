/*
 * avx512_packed.c - VNNI matmul tiles over repacked Q8_0 and Q4_0 weights (layout in repack.c). One
 * 64-byte load holds 4 bytes of each of 16 rows; vpdpbusd with the 4 matching activation bytes broadcast
 * to every lane advances 16 row dots at once, so no horizontal sums and no per-row scale shuffles are
 * needed. Up to 4 activation columns share each weight load (prefill); decode uses one column.
 *
 *   Q8_0  weights are stored as q + 128 (unsigned): sum((q + 128) x) = sum(q x) + 128 sum(x), and sum(x)
 *         is the q8 row's block sum s, so the correction is one broadcast per block and column.
 *   Q4_0  nibbles n are unsigned: sum((n - 8) x) = sum(n x) - 8 s.
 * The reference is the unpacked scalar tile (kernels_mm_ref.c); tests compare the two.
 */
#include "backend/cpu/kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define KILN_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline)) KILN_AVX512
#define CMAX 4
#define SMAX 4 /* decode streams at most */

INLINE __m512i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* The end of block b for one column (q8 row xr): the integer dot isum less the weights' bias (bias times the
 * row's block sum), scaled by the 16 row scales wd and the column's block scale, added into acc. */
INLINE __m512 block_end(int bias, __m512i isum, __m512 wd, const char *xr, int64_t k, int64_t b, __m512 acc) {
    __m512i corr = _mm512_set1_epi32(bias * kiln__q8_row_s(xr, k)[b]);
    __m512 scale = _mm512_mul_ps(wd, _mm512_set1_ps(kiln__q8_row_d(xr, k)[b]));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(isum, corr)), scale, acc);
}

/* Block b of one group times C columns, accumulated into acc. */
INLINE void block(int type, int C, int64_t k, const unsigned char *w, int64_t b, const char *x, size_t xs,
                  __m512 *acc) {
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    const int bias = type == KILN_TYPE_Q8_0 ? 128 : 8;
    const unsigned char *q = w + b * (type == KILN_TYPE_Q8_0 ? 544 : 288);
    __m512 wd = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(q + (type == KILN_TYPE_Q8_0 ? 512 : 256))));
    __m512i isum[CMAX];
    for (int c = 0; c < C; c++) isum[c] = _mm512_setzero_si512();
    if (type == KILN_TYPE_Q8_0) {
        for (int j = 0; j < 8; j++) {
            __m512i wv = _mm512_loadu_si512((const void *)(q + 64 * j));
            for (int c = 0; c < C; c++)
                isum[c] = _mm512_dpbusd_epi32(isum[c], wv, bcast4((const int8_t *)(x + c * xs) + b * 32 + 4 * j));
        }
    } else {
        for (int j = 0; j < 4; j++) {
            __m512i wv = _mm512_loadu_si512((const void *)(q + 64 * j));
            __m512i lo = _mm512_and_si512(wv, low4), hi = _mm512_and_si512(_mm512_srli_epi16(wv, 4), low4);
            for (int c = 0; c < C; c++) {
                const int8_t *xb = (const int8_t *)(x + c * xs) + b * 32;
                isum[c] = _mm512_dpbusd_epi32(isum[c], lo, bcast4(xb + 4 * j));
                isum[c] = _mm512_dpbusd_epi32(isum[c], hi, bcast4(xb + 16 + 4 * j));
            }
        }
    }
    for (int c = 0; c < C; c++) acc[c] = block_end(bias, isum[c], wd, x + c * xs, k, b, acc[c]);
}

/* Q8_0 blocks b and b + 1 of one group times one column, bit for bit as two calls of block(), when block b
 * starts on a 64-byte boundary: the pair's 1088 bytes are 17 whole cache lines, read with aligned loads, and
 * the second block's vectors (which start 32 bytes into a line) are put together from two lines each. */
INLINE void pair_q8_0(int64_t k, const unsigned char *w, int64_t b, const char *x, __m512 *acc) {
    const __m512i *l = (const __m512i *)(const void *)(w + b * 544);
    const int8_t *xb = (const int8_t *)x + b * 32;
    __m512i line[17];
    for (int i = 0; i < 17; i++) line[i] = _mm512_load_si512((const void *)(l + i));
    __m512i isum = _mm512_setzero_si512();
    for (int j = 0; j < 8; j++) isum = _mm512_dpbusd_epi32(isum, line[j], bcast4(xb + 4 * j));
    *acc = block_end(128, isum, _mm512_cvtph_ps(_mm512_castsi512_si256(line[8])), x, k, b, *acc);
    isum = _mm512_setzero_si512();
    for (int j = 0; j < 8; j++)
        isum = _mm512_dpbusd_epi32(isum, _mm512_alignr_epi64(line[9 + j], line[8 + j], 4), bcast4(xb + 32 + 4 * j));
    *acc = block_end(128, isum, _mm512_cvtph_ps(_mm512_extracti64x4_epi64(line[16], 1)), x, k, b + 1, *acc);
}

/* One group of 16 rows times C columns. A single column (decode) walks the group's blocks as S
 * interleaved streams, each into its own accumulator; the partial sums are added in a fixed order. How
 * many streams feed a thread fastest depends on the memory system: 4 on Sapphire Rapids (more misses in
 * flight), each prefetching into L1 PREFETCH_BLOCKS blocks ahead when PF is set; 1 on the AMD EPYC
 * measured (one sequential run, which its hardware prefetcher follows); see kiln__cpu_decode_streams.
 * There Q4_0 decodes fastest without software prefetches, and Q8_0, whose
 * stream moves twice the bytes per instruction, with prefetches into L2 only (prefetcht1),
 * L2_PREFETCH_BLOCKS (13 KB) ahead. Paired A/B runs of kiln bench on the EPYC (docs/performance.md): the
 * L2 prefetches on top of L1 ones 6 blocks ahead, +6% and +9% (medians); then dropping the L1 ones, +12%
 * (faster in 9 of 10); without any prefetch, 0.86x; 12 or 48 blocks instead of 24, 0.99x and 0.96x. The
 * same L2 prefetch made the Q4_0, F16 and K-quant one-stream tiles 3-7% slower, so they have none.
 * A 544-byte Q8_0 block leaves every other block 32 bytes into a cache line, so the one-stream tile
 * reads a group that starts on a line two blocks at a time (pair_q8_0): 17 aligned line loads instead
 * of 16 loads of which half split a line; 40 paired runs: +3.6% (median), faster in 26. */
#define PREFETCH_BLOCKS 6
#define L2_PREFETCH_BLOCKS 24
INLINE void group(int type, int C, int S, int PF, int64_t k, const unsigned char *w, const unsigned char *next,
                  const char *x, size_t xs, float *out, size_t os) {
    const int64_t nb = k / KILN_Q8_BLOCK;
    if (C == 1) {
        __m512 acc[SMAX];
        int64_t seg = nb / S;
        for (int s = 0; s < S; s++) acc[s] = _mm512_setzero_ps();
        const int64_t bs = type == KILN_TYPE_Q8_0 ? 544 : 288;
        if (type == KILN_TYPE_Q8_0 && S == 1 && PF && ((uintptr_t)w & 63) == 0) {
            int64_t i = 0;
            for (; i + 1 < nb; i += 2) {
                uintptr_t far = (uintptr_t)w + (uintptr_t)((i + L2_PREFETCH_BLOCKS) * bs);
                for (int64_t o = 0; o < 2 * bs; o += 64) _mm_prefetch((const char *)(far + (uintptr_t)o), _MM_HINT_T1);
                pair_q8_0(k, w, i, x, &acc[0]);
            }
            for (; i < nb; i++) block(type, 1, k, w, i, x, xs, &acc[0]);
            _mm512_storeu_ps(out, acc[0]);
            return;
        }
        for (int64_t i = 0; i < seg; i++)
            for (int s = 0; s < S; s++) {
                /* Short streams (a group is 9-50 KB) end before the hardware prefetcher ramps up. Near the
                 * end of its segment a stream prefetches the start of the same stream in the next group,
                 * so every group starts warm (prefetching past the buffer's end cannot fault). */
                int64_t j = i + PREFETCH_BLOCKS;
                uintptr_t ahead = j < seg ? (uintptr_t)w + (uintptr_t)((s * seg + j) * bs)
                                          : (uintptr_t)next + (uintptr_t)((s * seg + j - seg) * bs);
                for (int64_t o = 0; PF && S > 1 && o < bs; o += 64)
                    _mm_prefetch((const char *)(ahead + (uintptr_t)o), _MM_HINT_T0);
                const uintptr_t far = ahead + (uintptr_t)((L2_PREFETCH_BLOCKS - PREFETCH_BLOCKS) * bs);
                for (int64_t o = 0; PF && S == 1 && o < bs; o += 64)
                    _mm_prefetch((const char *)(far + (uintptr_t)o), _MM_HINT_T1);
                block(type, 1, k, w, s * seg + i, x, xs, &acc[s]);
            }
        for (int64_t b = S * seg; b < nb; b++) block(type, 1, k, w, b, x, xs, &acc[0]);
        for (int s = 1; s < S; s++) acc[0] = _mm512_add_ps(acc[0], acc[s]);
        _mm512_storeu_ps(out, acc[0]);
        return;
    }
    __m512 acc[CMAX];
    for (int c = 0; c < C; c++) acc[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) block(type, C, k, w, b, x, xs, acc);
    for (int c = 0; c < C; c++) _mm512_storeu_ps(out + c * os, acc[c]);
}

#define DEFINE_PACKED(fn, type, S, PF)                                                                         \
    KILN_AVX512 static void fn(int64_t k, const void *w, size_t ws, int64_t nr, const void *x, size_t xs,      \
                               int64_t nc, float *out, size_t os) {                                            \
        for (int64_t g = 0; g < nr / 16; g++) {                                                                \
            const unsigned char *wg = (const unsigned char *)w + g * ws, *wn = wg + ws;                        \
            for (int64_t c0 = 0; c0 < nc; c0 += CMAX) {                                                        \
                const char *xc = (const char *)x + c0 * xs;                                                    \
                float *o = out + c0 * os + g * 16;                                                             \
                switch (nc - c0 < CMAX ? (int)(nc - c0) : CMAX) {                                              \
                case 4: group(type, 4, S, PF, k, wg, wn, xc, xs, o, os); break;                                \
                case 3: group(type, 3, S, PF, k, wg, wn, xc, xs, o, os); break;                                \
                case 2: group(type, 2, S, PF, k, wg, wn, xc, xs, o, os); break;                                \
                default: group(type, 1, S, PF, k, wg, wn, xc, xs, o, os); break;                               \
                }                                                                                              \
            }                                                                                                  \
        }                                                                                                      \
    }

DEFINE_PACKED(packed_q8_0, KILN_TYPE_Q8_0, 4, 1)
DEFINE_PACKED(packed_q4_0, KILN_TYPE_Q4_0, 4, 1)
DEFINE_PACKED(packed_q8_0_one, KILN_TYPE_Q8_0, 1, 1)
DEFINE_PACKED(packed_q4_0_one, KILN_TYPE_Q4_0, 1, 0)

kiln_mm_fn kiln__cpu_avx512_packed_variant(kiln_type type, int streams) {
    switch (type) {
    case KILN_TYPE_Q8_0: return streams == 1 ? packed_q8_0_one : packed_q8_0;
    case KILN_TYPE_Q4_0: return streams == 1 ? packed_q4_0_one : packed_q4_0;
    case KILN_TYPE_F16:
    case KILN_TYPE_BF16: return kiln__cpu_avx512_half_variant(type, streams);
    case KILN_TYPE_Q4_K:
    case KILN_TYPE_Q6_K: return kiln__cpu_avx512_kquants_variant(type, streams);
    default: return NULL;
    }
}

void kiln__cpu_isa_init_avx512_packed(kiln_cpu_isa *t) {
    int streams = kiln__cpu_decode_streams();
    t->mm_packed[KILN_TYPE_Q8_0] = kiln__cpu_avx512_packed_variant(KILN_TYPE_Q8_0, streams);
    t->mm_packed[KILN_TYPE_Q4_0] = kiln__cpu_avx512_packed_variant(KILN_TYPE_Q4_0, streams);
}

#else
void kiln__cpu_isa_init_avx512_packed(kiln_cpu_isa *t) { (void)t; }
kiln_mm_fn kiln__cpu_avx512_packed_variant(kiln_type type, int streams) {
    (void)type, (void)streams;
    return NULL;
}
#endif
