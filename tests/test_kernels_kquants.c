/*
 * test_kernels_kquants.c - the Q4_K and Q6_K matmul tiles over q8 activation rows (kernels.h): the scalar
 * reference tile (kernels_mm_kquants_ref.c) against an independent float computation, and every level's
 * plain and packed tiles (repack.c, x86/avx512_kquants.c) against the reference tile, on random valid
 * K-quant blocks (random quants, scales and mins, sane half-float super-block scales) and odd sizes:
 * row counts that leave a partial group of 16, column counts around the kernels' register tiles. A level's
 * tiles for a type are tested on the activation rows the matmul gives them: super-block q8 rows where the
 * level says so (kiln_cpu_isa.q8_superblock: the AVX2 Q4_K tiles), per-block rows elsewhere.
 *
 * Tolerance, as in test_kernels_mm.c: the tiles compute each 32-block's integer dot exactly and may only
 * round the per-block products differently and reorder the float sums: |got - ref| <= 1e-6 * (k / 32) *
 * sum|w x|, with w the dequantized weights and x the dequantized q8 activations.
 */
#include "harness.h"

#include "backend/cpu/kernels.h"
#include "core/core.h"
#include "tensor/types.h"

#include <math.h>

#define MAXK 2560
#define MAXR 37
#define MAXC 17

static float wf[MAXR * MAXK], xf[MAXC * MAXK], xd[MAXC * MAXK];
static unsigned char wraw[MAXR * MAXK], packed[3 * (MAXK / KILN_QK_K) * 4096];
static unsigned char xq[MAXC * (MAXK + MAXK / 4)];
static float got[MAXC * MAXR], want[MAXC * MAXR];

static const kiln_type types[] = {KILN_TYPE_Q4_K, KILN_TYPE_Q6_K};

static uint64_t next(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}

static float unit(uint64_t *s) { return (float)(next(s) & 0xffffff) / 8388608.0f - 1.0f; }

/* nr random rows of k elements; returns the row stride. wf holds what the rows mean (the dequantizer). */
static size_t finish_rows(kiln_type type, int64_t k, int64_t nr, uint64_t st);

static size_t make_rows(kiln_type type, int64_t k, int64_t nr, uint64_t seed) {
    uint64_t st = seed;
    size_t rb = (size_t)(k / KILN_QK_K) * kiln__type_traits(type)->block_bytes;
    for (size_t i = 0; i < rb * (size_t)nr; i++) wraw[i] = (unsigned char)next(&st);
    return finish_rows(type, k, nr, st);
}

/* Sane half-float super-block scales over the quants in wraw; wf from the dequantizer. */
static size_t finish_rows(kiln_type type, int64_t k, int64_t nr, uint64_t st) {
    size_t bb = kiln__type_traits(type)->block_bytes, rb = (size_t)(k / KILN_QK_K) * bb;
    for (int64_t b = 0; b < nr * (k / KILN_QK_K); b++) {
        unsigned char *blk = wraw + (size_t)b * bb;
        uint16_t d = kiln_fp32_to_fp16(0.001f + 0.01f * fabsf(unit(&st)));
        uint16_t dmin = kiln_fp32_to_fp16(0.001f + 0.01f * fabsf(unit(&st)));
        if (type == KILN_TYPE_Q4_K) {
            memcpy(blk, &d, 2);
            memcpy(blk + 2, &dmin, 2);
        } else {
            memcpy(blk + bb - 2, &d, 2); /* Q6_K: d is the last field */
        }
    }
    for (int64_t r = 0; r < nr; r++) kiln_dequantize(type, wraw + (size_t)r * rb, wf + r * MAXK, k);
    return rb;
}

/* nc random activation columns quantized to q8 rows (stride returned), super-block rows when sb (kernels.h);
 * xd holds what they mean. */
static size_t make_columns(int64_t k, int64_t nc, uint64_t seed, bool sb) {
    uint64_t st = seed;
    size_t xs = kiln__q8_row_bytes(k);
    const kiln_cpu_isa *ref = kiln__cpu_isa_for(KILN_CPU_REF);
    for (int64_t c = 0; c < nc; c++) {
        for (int64_t i = 0; i < k; i++) xf[c * MAXK + i] = unit(&st) * (1.0f + (float)(i % 7));
        (sb ? ref->quantize_q8_sb : ref->quantize_q8)(xf + c * MAXK, xq + (size_t)c * xs, k);
        const unsigned char *row = xq + (size_t)c * xs;
        for (int64_t i = 0; i < k; i++)
            xd[c * MAXK + i] = kiln__q8_row_d(row, k)[i / KILN_Q8_BLOCK] * (float)((const int8_t *)row)[i];
    }
    return xs;
}

static double abs_dot(int64_t r, int64_t c, int64_t k) {
    double s = 0;
    for (int64_t i = 0; i < k; i++) s += fabs((double)wf[r * MAXK + i] * xd[c * MAXK + i]);
    return s;
}

/* got against want for nr x nc outputs (stride MAXR); false and a report on the first miss. */
static bool agree(const char *what, const kiln_cpu_isa *isa, kiln_type type, int64_t k, int64_t nr,
                  int64_t nc) {
    for (int64_t c = 0; c < nc; c++)
        for (int64_t r = 0; r < nr; r++) {
            double tol = 1e-6 * (double)(k / 32) * abs_dot(r, c, k);
            double err = fabs((double)got[c * MAXR + r] - want[c * MAXR + r]);
            if (!(err <= tol)) {
                harness_fail(__FILE__, __LINE__,
                             "%s %s %s k=%lld nr=%lld nc=%lld (%lld,%lld): %.9g vs ref %.9g",
                             kiln__cpu_level_name(isa->level), what, kiln__type_name(type), (long long)k,
                             (long long)nr, (long long)nc, (long long)r, (long long)c, got[c * MAXR + r],
                             want[c * MAXR + r]);
                return false;
            }
        }
    return true;
}

/* The reference's block-wise integer dots equal the double-precision dot of the dequantized weights with
 * the dequantized activations, within float rounding of the block terms, for per-block and super-block
 * q8 rows alike. */
static void the_reference_tile_equals_the_float_dot_of_dequantized_weights_and_activations(void) {
    static const int64_t ks[] = {256, 768, 2560};
    const kiln_cpu_isa *ref = kiln__cpu_isa_for(KILN_CPU_REF);
    for (int t = 0; t < 4; t++)
        for (size_t i = 0; i < KILN__ARRAY_LEN(ks); i++) {
            int64_t k = ks[i], nr = 5, nc = 3;
            size_t ws = make_rows(types[t % 2], k, nr, 11 + 7 * i + (uint64_t)t);
            size_t xs = make_columns(k, nc, 5 + i, t >= 2);
            ref->mm[types[t % 2]](k, wraw, ws, nr, xq, xs, nc, got, MAXR);
            for (int64_t c = 0; c < nc; c++)
                for (int64_t r = 0; r < nr; r++) {
                    double exact = 0;
                    for (int64_t e = 0; e < k; e++) exact += (double)wf[r * MAXK + e] * xd[c * MAXK + e];
                    CHECK_NEAR(got[c * MAXR + r], exact, 1e-6 * (double)(k / 32) * abs_dot(r, c, k));
                }
        }
}

static void every_level_plain_tiles_match_the_reference_tile(void) {
    static const int64_t ks[] = {256, 512, 2560}, nrs[] = {1, 5, 16, 37}, ncs[] = {1, 3, 7, 17};
    const kiln_cpu_isa *ref = kiln__cpu_isa_for(KILN_CPU_REF);
    int checked = 0;
    for (int l = KILN_CPU_REF + 1; l < KILN_CPU_LEVEL_COUNT; l++) {
        if (!kiln__cpu_level_supported((kiln_cpu_level)l)) continue;
        const kiln_cpu_isa *isa = kiln__cpu_isa_for((kiln_cpu_level)l);
        for (int t = 0; t < 2; t++)
            for (size_t i = 0; i < KILN__ARRAY_LEN(ks); i++)
                for (size_t ir = 0; ir < KILN__ARRAY_LEN(nrs); ir++)
                    for (size_t ic = 0; ic < KILN__ARRAY_LEN(ncs); ic++) {
                        int64_t k = ks[i], nr = nrs[ir], nc = ncs[ic];
                        size_t ws = make_rows(types[t], k, nr, 100 * (uint64_t)l + 10 * i + ir);
                        size_t xs = make_columns(k, nc, 3 + ic, isa->q8_superblock[types[t]]);
                        isa->mm[types[t]](k, wraw, ws, nr, xq, xs, nc, got, MAXR);
                        ref->mm[types[t]](k, wraw, ws, nr, xq, xs, nc, want, MAXR);
                        if (!agree("plain", isa, types[t], k, nr, nc)) return;
                        checked++;
                    }
    }
    printf("  (%d cases; the machine's best level is %s)\n", checked,
           kiln__cpu_level_name(kiln__cpu_max_level()));
}

/* Repacked weights through each level's packed tiles, including a partial last group of 16 rows (the
 * padding rows must not be written), equal the reference tile on the original rows. */
static void every_level_packed_tiles_match_the_reference_tile_on_repacked_weights(void) {
    static const int64_t ks[] = {256, 768, 2560}, nrs[] = {16, 21, 37}, ncs[] = {1, 3, 6, 7, 13, 17};
    const kiln_cpu_isa *ref = kiln__cpu_isa_for(KILN_CPU_REF);
    int checked = 0;
    for (int l = KILN_CPU_REF; l < KILN_CPU_LEVEL_COUNT; l++) {
        if (!kiln__cpu_level_supported((kiln_cpu_level)l)) continue;
        const kiln_cpu_isa *isa = kiln__cpu_isa_for((kiln_cpu_level)l);
        for (int t = 0; t < 2; t++) {
            if (isa->level == KILN_CPU_AVX2) CHECK(isa->mm_packed[types[t]] != NULL); /* avx2_packed_kquants.c */
            if (!isa->mm_packed[types[t]]) continue;
            CHECK(kiln__repack_pads(types[t]));
            for (size_t i = 0; i < KILN__ARRAY_LEN(ks); i++)
                for (size_t ir = 0; ir < KILN__ARRAY_LEN(nrs); ir++)
                    for (size_t ic = 0; ic < KILN__ARRAY_LEN(ncs); ic++) {
                        int64_t k = ks[i], nr = nrs[ir], nc = ncs[ic];
                        size_t ws = make_rows(types[t], k, nr, 1000 * (uint64_t)l + 10 * i + ir);
                        size_t xs = make_columns(k, nc, 7 + ic, isa->q8_superblock[types[t]]);
                        size_t gs = kiln__repack_group_bytes(types[t], k);
                        CHECK(gs * (size_t)((nr + 15) / 16) <= sizeof packed);
                        CHECK(kiln__repack_supported(types[t], k, nr));
                        kiln__repack(types[t], wraw, ws, k, nr, packed);
                        for (int64_t j = 0; j < MAXC * MAXR; j++) got[j] = -12345.0f;
                        isa->mm_packed[types[t]](k, packed, gs, nr, xq, xs, nc, got, MAXR);
                        ref->mm[types[t]](k, wraw, ws, nr, xq, xs, nc, want, MAXR);
                        if (!agree("packed", isa, types[t], k, nr, nc)) return;
                        for (int64_t c = 0; c < nc; c++) /* rows past nr untouched */
                            for (int64_t r = nr; r < MAXR; r++) CHECK(got[c * MAXR + r] == -12345.0f);
                        checked++;
                        if (isa->level == KILN_CPU_AVX512) { /* the decode variant this machine's table lacks */
                            static float alt_out[MAXC * MAXR];
                            kiln_mm_fn alt = kiln__cpu_avx512_packed_variant(
                                types[t], kiln__cpu_decode_streams() == 1 ? 0 : 1);
                            CHECK(alt != NULL);
                            if (alt) { /* prefetching or not, the same arithmetic: the same bits */
                                alt(k, packed, gs, nr, xq, xs, nc, alt_out, MAXR);
                                for (int64_t c = 0; c < nc; c++)
                                    CHECK(memcmp(alt_out + c * MAXR, got + c * MAXR, (size_t)nr * sizeof(float)) == 0);
                            }
                        }
                    }
        }
    }
    printf("  (%d packed cases)\n", checked);
    if (kiln__cpu_level_supported(KILN_CPU_AVX512)) CHECK(checked >= 2 * 54);
}

/* The largest integer sums the AVX2 tiles' int16 stages can meet (avx2_packed_kquants.c): every quant at
 * its maximum (Q4_K 15, Q6_K 63: all quant bytes 0xff) against activation quants all 127 or all -127. The
 * tiles must give the reference's result; a saturated stage would be off by percents. */
static void packed_tiles_do_not_saturate_at_the_largest_quants(void) {
    const int64_t k = 512, nr = 16, nc = 2;
    const kiln_cpu_isa *ref = kiln__cpu_isa_for(KILN_CPU_REF);
    size_t xs = kiln__q8_row_bytes(k);
    for (int64_t c = 0; c < nc; c++) { /* per-block and super-block rows alike: every quant 127 or -127 */
        for (int64_t i = 0; i < k; i++) xf[c * MAXK + i] = c == 0 ? 1.0f : -1.0f;
        ref->quantize_q8(xf + c * MAXK, xq + (size_t)c * xs, k);
        CHECK_EQ_INT(((const int8_t *)xq)[c * (int64_t)xs], c == 0 ? 127 : -127);
        for (int64_t i = 0; i < k; i++) xd[c * MAXK + i] = kiln__q8_row_d(xq + c * xs, k)[0] * (c == 0 ? 127.0f : -127.0f);
    }
    for (int l = KILN_CPU_REF; l < KILN_CPU_LEVEL_COUNT; l++) {
        if (!kiln__cpu_level_supported((kiln_cpu_level)l)) continue;
        const kiln_cpu_isa *isa = kiln__cpu_isa_for((kiln_cpu_level)l);
        for (int t = 0; t < 2; t++) {
            if (!isa->mm_packed[types[t]]) continue;
            size_t rb = (size_t)(k / KILN_QK_K) * kiln__type_traits(types[t])->block_bytes;
            memset(wraw, 0xff, rb * (size_t)nr);
            size_t ws = finish_rows(types[t], k, nr, 3);
            kiln__repack(types[t], wraw, ws, k, nr, packed);
            for (int64_t n = 1; n <= nc; n++) { /* decode, then prefill */
                isa->mm_packed[types[t]](k, packed, kiln__repack_group_bytes(types[t], k), nr, xq, xs, n, got, MAXR);
                ref->mm[types[t]](k, wraw, ws, nr, xq, xs, n, want, MAXR);
                if (!agree("saturation", isa, types[t], k, nr, n)) return;
            }
        }
    }
}

int main(void) {
    RUN(the_reference_tile_equals_the_float_dot_of_dequantized_weights_and_activations);
    RUN(every_level_plain_tiles_match_the_reference_tile);
    RUN(every_level_packed_tiles_match_the_reference_tile_on_repacked_weights);
    RUN(packed_tiles_do_not_saturate_at_the_largest_quants);
    return harness_finish();
}
