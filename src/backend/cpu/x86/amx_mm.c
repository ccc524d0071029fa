/*
 * amx_mm.c - AMX-INT8 tiles for prefill over repacked Q8_0 and Q4_0 weights (layout in repack.c).
 *
 * For 16 weight rows x 16 activation columns and one 32-block: tile A holds the 16 columns' int8 quants
 * (loaded straight from the q8 rows with their stride), tile B the 16 rows' weights in the VNNI layout the
 * repacked format already has (Q4_0 nibbles are unpacked into a 512-byte buffer first), and TDPBSUD
 * (signed A x unsigned B) gives the 16 x 16 block dots at once. Each row of the int32 result is then
 * corrected (Q8_0 weights are stored + 128, Q4_0 nibbles carry + 8), converted and scaled exactly as the
 * AVX-512 packed kernel does, so both produce the same bits. Column remainders (< 16) go to that kernel.
 *
 * Two blocks are in flight (two sets of tiles) so the tile unit works while the previous result is scaled.
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

/* Two blocks in flight: tmm0/3 C (16 x 16 int32), tmm1/4 A (16 columns x 32 bytes), tmm2/5 B (8 x 64). */
static void configure(void) {
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 6; i += 3) {
        cfg.rows[i] = 16, cfg.colsb[i] = 64;
        cfg.rows[i + 1] = 16, cfg.colsb[i + 1] = 32;
        cfg.rows[i + 2] = 8, cfg.colsb[i + 2] = 64;
    }
    load_config(&cfg);
}

/* The B tile of block b: the repacked bytes themselves (Q8_0) or its nibbles spread to bytes (Q4_0). */
KILN_AMX static const unsigned char *b_tile(int type, const unsigned char *q, unsigned char *nib) {
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    if (type == KILN_TYPE_Q8_0) return q;
    for (int j = 0; j < 4; j++) {
        __m512i v = _mm512_loadu_si512((const void *)(q + 64 * j));
        _mm512_store_si512((void *)(nib + 64 * j), _mm512_and_si512(v, low4));
        _mm512_store_si512((void *)(nib + 256 + 64 * j), _mm512_and_si512(_mm512_srli_epi16(v, 4), low4));
    }
    return nib;
}

/* acc[n] += (c[n] - bias * s_n[b]) * wd * d_n[b] for the 16 columns n: the packed kernel's arithmetic. */
KILN_AMX static void scale_block(int type, int64_t k, const unsigned char *q, int64_t b, const char *x,
                                 size_t xs, int32_t c[16][16], __m512 acc[16]) {
    const int bias = type == KILN_TYPE_Q8_0 ? 128 : 8;
    __m512 wd = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(q + (type == KILN_TYPE_Q8_0 ? 512 : 256))));
    for (int n = 0; n < 16; n++) {
        const char *xr = x + n * xs;
        __m512i isum = _mm512_load_si512((const void *)c[n]);
        __m512i corr = _mm512_set1_epi32(bias * kiln__q8_row_s(xr, k)[b]);
        __m512 scale = _mm512_mul_ps(wd, _mm512_set1_ps(kiln__q8_row_d(xr, k)[b]));
        acc[n] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(isum, corr)), scale, acc[n]);
    }
}

KILN_AMX static void group16(int type, int64_t k, const unsigned char *w, const char *x, size_t xs, float *out,
                             size_t os) {
    const int64_t nb = k / KILN_Q8_BLOCK, bb = type == KILN_TYPE_Q8_0 ? 544 : 288;
    __m512 acc[16];
    int32_t c0[16][16] __attribute__((aligned(64))), c1[16][16] __attribute__((aligned(64)));
    unsigned char nib0[512] __attribute__((aligned(64))), nib1[512] __attribute__((aligned(64)));
    int64_t b = 0;
    for (int n = 0; n < 16; n++) acc[n] = _mm512_setzero_ps();
    for (; b + 2 <= nb; b += 2) {
        const unsigned char *q0 = w + b * bb, *q1 = q0 + bb;
        _tile_loadd(1, x + b * KILN_Q8_BLOCK, (long)xs);
        _tile_loadd(2, b_tile(type, q0, nib0), 64);
        _tile_loadd(4, x + (b + 1) * KILN_Q8_BLOCK, (long)xs);
        _tile_loadd(5, b_tile(type, q1, nib1), 64);
        _tile_zero(0);
        _tile_zero(3);
        _tile_dpbsud(0, 1, 2);
        _tile_dpbsud(3, 4, 5);
        _tile_stored(0, c0, 64);
        _tile_stored(3, c1, 64);
        scale_block(type, k, q0, b, x, xs, c0, acc);
        scale_block(type, k, q1, b + 1, x, xs, c1, acc);
    }
    if (b < nb) {
        const unsigned char *q0 = w + b * bb;
        _tile_loadd(1, x + b * KILN_Q8_BLOCK, (long)xs);
        _tile_loadd(2, b_tile(type, q0, nib0), 64);
        _tile_zero(0);
        _tile_dpbsud(0, 1, 2);
        _tile_stored(0, c0, 64);
        scale_block(type, k, q0, b, x, xs, c0, acc);
    }
    for (int n = 0; n < 16; n++) _mm512_storeu_ps(out + n * os, acc[n]);
}

/* The AVX-512 packed tiles, for column remainders. */
static kiln_mm_fn vnni[KILN_TYPE_COUNT];

#define DEFINE_AMX(fn, type)                                                                           \
    KILN_AMX static void fn(int64_t k, const void *w, size_t ws, int64_t nr, const void *x, size_t xs,     \
                            int64_t nc, float *out, size_t os) {                                       \
        int64_t full = nc / 16 * 16;                                                                   \
        if (full) {                                                                                    \
            configure();                                                                               \
            for (int64_t g = 0; g < nr / 16; g++)                                                      \
                for (int64_t c0 = 0; c0 < full; c0 += 16)                                              \
                    group16(type, k, (const unsigned char *)w + g * ws, (const char *)x + c0 * xs, xs, \
                            out + c0 * os + g * 16, os);                                               \
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
