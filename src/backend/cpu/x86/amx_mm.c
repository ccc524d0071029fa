/*
 * amx_mm.c - AMX-INT8 tiles for prefill over repacked Q8_0 and Q4_0 weights (layout in repack.c).
 *
 * For each 16-row group, a chunk of up to CHUNK 32-blocks is first unpacked into signed B tiles (the
 * VNNI layout the repacked format already has, minus its + 128 / + 8 bias) and float scales, once for all
 * column tiles. Then, for 16 activation columns and one block, tile A holds the columns' int8 quants
 * (loaded straight from the q8 rows with their stride) and TDPBSSD (signed x signed) gives the 16 x 16
 * exact block dots; each column's row of the result is converted and scaled exactly as the AVX-512
 * packed kernel does, so both levels produce the same bits. Column remainders (< 16) go to that kernel.
 *
 * The block scales (a float per row, block and column) make every block's int32 result leave the tile
 * unit: the kernel is bound by that epilogue (a store of the tile and three vector operations per 16
 * outputs), not by the tile products. Two C tiles alternate so the tile unit computes one block while
 * the previous one is scaled.
 *
 * Tile configuration: gcc 12 treats _tile_loadconfig as reading 8 bytes and drops the stores that fill
 * the 64-byte configuration, so the tiles fault. Here ldtilecfg is inline assembly whose memory operand
 * is the whole 64-byte structure, which no compiler can shrink.
 */
#include "backend/cpu/kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>

#define KILN_AMX                                                                                        \
    __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))

typedef struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;
_Static_assert(sizeof(tile_config) == 64, "AMX tile configuration is 64 bytes");

typedef struct config_bytes {
    unsigned char b[64];
} config_bytes;

static void load_config(const tile_config *cfg) {
    __asm__ volatile("ldtilecfg %0" : : "m"(*(const config_bytes *)cfg));
}

/* tmm0/tmm1: C (16 columns x 16 rows, int32) of even/odd blocks; tmm2/tmm3: A (16 columns x 32 bytes);
 * tmm4/tmm5: B (8 x 64 bytes: 16 rows x 32 signed weights in the VNNI layout). */
static void configure(void) {
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 2; i++) {
        cfg.rows[i] = 16, cfg.colsb[i] = 64;
        cfg.rows[2 + i] = 16, cfg.colsb[2 + i] = 32;
        cfg.rows[4 + i] = 8, cfg.colsb[4 + i] = 64;
    }
    load_config(&cfg);
}

/* Blocks per chunk of K whose weights are unpacked at once (32 KB of B tiles + their scales). */
#define CHUNK 64

typedef struct chunk {
    unsigned char b[CHUNK][512] __attribute__((aligned(64))); /* signed weights, B-tile layout */
    float d[CHUNK][16] __attribute__((aligned(64)));          /* the 16 rows' scales per block */
} chunk;

/* Blocks [b0, b0 + n) of one 16-row group as signed B tiles and float scales: Q8_0 bytes lose the + 128
 * of the packed layout, Q4_0 nibbles lose their + 8 (low nibbles fill B rows 0-3, high nibbles rows 4-7,
 * which is the order of elements 0-15, 16-31). Done once per group and chunk, for all column tiles. */
KILN_AMX static void unpack(int type, const unsigned char *w, int64_t b0, int64_t n, chunk *c) {
    const __m512i low4 = _mm512_set1_epi8(0x0f), eight = _mm512_set1_epi8(8), flip = _mm512_set1_epi8((char)0x80);
    const int64_t bb = type == KILN_TYPE_Q8_0 ? 544 : 288;
    for (int64_t i = 0; i < n; i++) {
        const unsigned char *q = w + (b0 + i) * bb;
        if (type == KILN_TYPE_Q8_0) {
            for (int j = 0; j < 8; j++)
                _mm512_store_si512((void *)(c->b[i] + 64 * j),
                                   _mm512_xor_si512(_mm512_loadu_si512((const void *)(q + 64 * j)), flip));
        } else {
            for (int j = 0; j < 4; j++) {
                __m512i v = _mm512_loadu_si512((const void *)(q + 64 * j));
                _mm512_store_si512((void *)(c->b[i] + 64 * j), _mm512_sub_epi8(_mm512_and_si512(v, low4), eight));
                _mm512_store_si512((void *)(c->b[i] + 256 + 64 * j),
                                   _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v, 4), low4), eight));
            }
        }
        _mm512_store_ps(c->d[i], _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(q + bb - 32))));
    }
}

/* acc[n] += c[n] * (d_w * d_n[b]) for the 16 columns n: the packed VNNI kernel's arithmetic (its integer
 * sum after the bias correction is this exact dot), so both levels give the same bits. */
KILN_AMX static inline __attribute__((always_inline)) void scale_block(const float *wd, int64_t k, int64_t b,
                                                                      const char *x, size_t xs,
                                                                      const int32_t c[16][16], __m512 acc[16]) {
    const __m512 w = _mm512_load_ps(wd);
    for (int n = 0; n < 16; n++) {
        __m512 scale = _mm512_mul_ps(w, _mm512_set1_ps(kiln__q8_row_d(x + n * xs, k)[b]));
        acc[n] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512((const void *)c[n])), scale, acc[n]);
    }
}

/* Blocks [b0, b0 + n) of 16 columns (q8 rows at x) against one group's unpacked chunk, into out (16 rows
 * of 16 columns, stride os): loaded first unless this is the first chunk. Two C tiles alternate so the
 * tile unit computes block i + 1 while block i is scaled. */
KILN_AMX static void columns16(const chunk *ch, int64_t k, int64_t b0, int64_t nblk, const char *x,
                               size_t xs, float *out, size_t os) {
    int32_t c0[16][16] __attribute__((aligned(64))), c1[16][16] __attribute__((aligned(64)));
    __m512 acc[16];
    for (int n = 0; n < 16; n++) acc[n] = b0 ? _mm512_loadu_ps(out + n * os) : _mm512_setzero_ps();
    const char *xb = x + b0 * KILN_Q8_BLOCK;
    _tile_zero(0);
    _tile_loadd(2, xb, (long)xs);
    _tile_loadd(4, ch->b[0], 64);
    _tile_dpbssd(0, 2, 4);
    int64_t i = 0;
    for (; i + 2 <= nblk; i += 2) {
        _tile_zero(1);
        _tile_loadd(3, xb + (i + 1) * KILN_Q8_BLOCK, (long)xs);
        _tile_loadd(5, ch->b[i + 1], 64);
        _tile_dpbssd(1, 3, 5);
        _tile_stored(0, c0, 64);
        scale_block(ch->d[i], k, b0 + i, x, xs, c0, acc);
        if (i + 2 < nblk) {
            _tile_zero(0);
            _tile_loadd(2, xb + (i + 2) * KILN_Q8_BLOCK, (long)xs);
            _tile_loadd(4, ch->b[i + 2], 64);
            _tile_dpbssd(0, 2, 4);
        }
        _tile_stored(1, c1, 64);
        scale_block(ch->d[i + 1], k, b0 + i + 1, x, xs, c1, acc);
    }
    if (i < nblk) { /* an odd count: the last block is in C tile 0 */
        _tile_stored(0, c0, 64);
        scale_block(ch->d[i], k, b0 + i, x, xs, c0, acc);
    }
    for (int n = 0; n < 16; n++) _mm512_storeu_ps(out + n * os, acc[n]);
}

/* The AVX-512 packed tiles, for column remainders. */
static kiln_mm_fn vnni[KILN_TYPE_COUNT];

#define DEFINE_AMX(fn, type)                                                                           \
    KILN_AMX static void fn(int64_t k, const void *w, size_t ws, int64_t nr, const void *x, size_t xs,     \
                            int64_t nc, float *out, size_t os) {                                       \
        const int64_t full = nc / 16 * 16, nb = k / KILN_Q8_BLOCK;                                     \
        if (full) {                                                                                    \
            chunk ch;                                                                                  \
            configure();                                                                               \
            for (int64_t g = 0; g < nr / 16; g++)                                                      \
                for (int64_t b0 = 0; b0 < nb; b0 += CHUNK) {                                           \
                    int64_t n = nb - b0 < CHUNK ? nb - b0 : CHUNK;                                     \
                    unpack(type, (const unsigned char *)w + g * ws, b0, n, &ch);                       \
                    for (int64_t c0 = 0; c0 < full; c0 += 16)                                          \
                        columns16(&ch, k, b0, n, (const char *)x + c0 * xs, xs, out + c0 * os + g * 16, os); \
                }                                                                                      \
            _tile_release();                                                                           \
        }                                                                                              \
        if (full < nc) vnni[type](k, w, ws, nr, (const char *)x + full * xs, xs, nc - full, out + full * os, os); \
    }

DEFINE_AMX(amx_q8_0, KILN_TYPE_Q8_0)
DEFINE_AMX(amx_q4_0, KILN_TYPE_Q4_0)

void kiln__cpu_isa_init_amx(kiln_cpu_isa *t) {
    vnni[KILN_TYPE_Q8_0] = t->mm_packed[KILN_TYPE_Q8_0];
    vnni[KILN_TYPE_Q4_0] = t->mm_packed[KILN_TYPE_Q4_0];
    if (!vnni[KILN_TYPE_Q8_0] || !vnni[KILN_TYPE_Q4_0]) return;
    t->mm_packed[KILN_TYPE_Q8_0] = amx_q8_0;
    t->mm_packed[KILN_TYPE_Q4_0] = amx_q4_0;
}

#else
void kiln__cpu_isa_init_amx(kiln_cpu_isa *t) { (void)t; }
#endif
