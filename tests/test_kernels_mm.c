/*
 * test_kernels_mm.c - the matmul tile kernels and the activation quantizer of every instruction-set level
 * this machine supports, against the scalar references (kernels_mm_ref.c), on random inputs of odd sizes.
 *
 * Tolerances: float-weight tiles differ from the reference only in summation order, so |got - ref| <=
 * 4e-7 * k * sum|w x| (k roundings of float epsilon 1.2e-7 each, with margin). Quantized tiles compute
 * each 32-block's integer dot exactly; only the float sum over blocks is reordered: 1e-6 * (k / 32) *
 * sum|w x|; the neon level keeps the reference's float order there too and must match it bit for bit.
 * The quantizer's output is specified exactly, so every level must produce the same bytes.
 */
#include "harness.h"

#include "backend/cpu/kernels.h"
#include "core/core.h"
#include "tensor/types.h"

#include <math.h>
#include <stdlib.h>

/* Deterministic pseudo-random floats in [-1, 1). */
static float test_rand(uint64_t *state) {
    *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((*state >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

static void fill_random(float *x, size_t n, uint64_t seed) {
    uint64_t st = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) x[i] = test_rand(&st);
}

#define MAXK 2080
#define MAXR 11
#define MAXC 7

static float wf[MAXR * MAXK], xf[MAXC * MAXK];
static unsigned char wraw[48 * MAXK * 2], xq[MAXC * 2048];

/* Random quants with sane (small, positive) block scales in one row of rb bytes of a q8-multiplied type. */
static void random_quant_row(kiln_type type, unsigned char *row, size_t rb, uint64_t *st) {
    size_t bb = kiln__type_traits(type)->block_bytes;
    for (size_t i = 0; i < rb; i++) row[i] = (unsigned char)(test_rand(st) * 127.5f + 128);
    for (size_t b = 0; b < rb / bb; b++) {
        uint16_t d = kiln_fp32_to_fp16(0.002f + 0.02f * fabsf(test_rand(st)));
        memcpy(row + b * bb, &d, 2);
    }
}

/* Random weights of a type, row by row; returns the row stride in bytes. */
static size_t make_rows(kiln_type type, int64_t k, int64_t nr, uint64_t seed) {
    size_t rb;
    uint64_t st = seed;
    kiln_type_row_bytes(type, k, &rb);
    for (int64_t r = 0; r < nr; r++) {
        unsigned char *row = wraw + r * rb;
        for (int64_t i = 0; i < k; i++) wf[r * MAXK + i] = test_rand(&st);
        if (type == KILN_TYPE_F32) memcpy(row, wf + r * MAXK, (size_t)k * 4);
        for (int64_t i = 0; type == KILN_TYPE_F16 && i < k; i++)
            ((uint16_t *)row)[i] = kiln_fp32_to_fp16(wf[r * MAXK + i]);
        for (int64_t i = 0; type == KILN_TYPE_BF16 && i < k; i++)
            ((uint16_t *)row)[i] = kiln_fp32_to_bf16(wf[r * MAXK + i]);
        if (kiln__mm_wants_q8(type)) random_quant_row(type, row, rb, &st);
        kiln_dequantize(type, row, wf + r * MAXK, k); /* what the row means, for the error bound */
    }
    return rb;
}

/* sum_i |w_i x_i| for the bound, with x as the kernel sees it (dequantized q8 when quantized). */
static double abs_dot(const float *w, const float *x, int64_t k) {
    double s = 0;
    for (int64_t i = 0; i < k; i++) s += fabs((double)w[i] * x[i]);
    return s;
}

static void check_level_tile(const kiln_cpu_isa *isa, const kiln_cpu_isa *ref, kiln_type type, int64_t k,
                             int64_t nr, int64_t nc, uint64_t seed) {
    static float got[MAXC * MAXR], want[MAXC * MAXR], xd[MAXC * MAXK];
    bool q8 = kiln__mm_wants_q8(type);
    size_t ws = make_rows(type, k, nr, seed), xs = q8 ? kiln__q8_row_bytes(k) : MAXK * sizeof(float);
    fill_random(xf, MAXC * MAXK, seed + 1);
    for (int64_t c = 0; c < nc; c++) {
        if (!q8) {
            memcpy(xd + c * MAXK, xf + c * MAXK, (size_t)k * 4);
            continue;
        }
        ref->quantize_q8(xf + c * MAXK, xq + c * xs, k);
        for (int64_t i = 0; i < k; i++)
            xd[c * MAXK + i] = kiln__q8_row_d(xq + c * xs, k)[i / 32] * (float)((int8_t *)(xq + c * xs))[i];
    }
    const void *x = q8 ? (const void *)xq : (const void *)xf;
    isa->mm[type](k, wraw, ws, nr, x, xs, nc, got, MAXR);
    ref->mm[type](k, wraw, ws, nr, x, xs, nc, want, MAXR);
    if (q8 && isa->level == KILN_CPU_NEON) /* neon does the reference's float steps after exact block dots */
        for (int64_t c = 0; c < nc; c++)
            CHECK(memcmp(got + c * MAXR, want + c * MAXR, (size_t)nr * sizeof(float)) == 0);
    for (int64_t c = 0; c < nc; c++)
        for (int64_t r = 0; r < nr; r++) {
            double bound = abs_dot(wf + r * MAXK, xd + c * MAXK, k);
            double tol = q8 ? 1e-6 * (double)(k / 32) * bound : 4e-7 * (double)k * bound;
            double err = fabs((double)got[c * MAXR + r] - want[c * MAXR + r]);
            if (!(err <= tol)) {
                harness_fail(__FILE__, __LINE__, "%s %s k=%lld nr=%lld nc=%lld (%lld,%lld): %.9g vs ref %.9g",
                             kiln__cpu_level_name(isa->level), kiln__type_name(type), (long long)k, (long long)nr,
                             (long long)nc, (long long)r, (long long)c, got[c * MAXR + r], want[c * MAXR + r]);
                return;
            }
        }
}

static const kiln_type mm_types[] = {KILN_TYPE_F32, KILN_TYPE_F16, KILN_TYPE_BF16, KILN_TYPE_Q8_0, KILN_TYPE_Q4_0};

static void every_level_matches_the_reference_tiles_for_every_weight_type_and_odd_sizes(void) {
    static const int64_t kf[] = {1, 7, 15, 16, 17, 33, 100, 257, 1029};
    static const int64_t kq[] = {32, 64, 96, 160, 544, 1056};
    const kiln_cpu_isa *ref = kiln__cpu_isa_for(KILN_CPU_REF);
    int levels = 0;
    for (int l = KILN_CPU_REF + 1; l < KILN_CPU_LEVEL_COUNT; l++) {
        if (!kiln__cpu_level_supported((kiln_cpu_level)l)) continue;
        const kiln_cpu_isa *isa = kiln__cpu_isa_for((kiln_cpu_level)l);
        levels++;
        for (size_t t = 0; t < KILN__ARRAY_LEN(mm_types); t++) {
            bool q8 = kiln__mm_wants_q8(mm_types[t]);
            const int64_t *ks = q8 ? kq : kf;
            size_t nk = q8 ? KILN__ARRAY_LEN(kq) : KILN__ARRAY_LEN(kf);
            for (size_t i = 0; i < nk; i++)
                for (int64_t nr = 1; nr <= MAXR; nr += 2)
                    for (int64_t nc = 1; nc <= MAXC; nc++) /* every remainder of the 2- and 3-column tiles */
                        check_level_tile(isa, ref, mm_types[t], ks[i], nr, nc, 1000 * (uint64_t)l + 10 * i + t);
        }
    }
    printf("  (%d SIMD levels checked; the machine's best is %s%s)\n", levels,
           kiln__cpu_level_name(kiln__cpu_max_level()), kiln__cpu_features()->asimddp ? ", with sdot" : "");
}

/* Trial t's 1024 activations for the quantizer tests: random, scaled by 1, 51, 101 or 1e-30. */
static void quantizer_trial(float *x, int trial, uint64_t seed) {
    fill_random(x, 1024, seed + (uint64_t)trial);
    for (int i = 0; i < 1024; i++) x[i] *= trial == 3 ? 1e-30f : (float)(1 + trial * 50);
}

/* Every SIMD level's per-block (sb false) or super-block q8 row of x has the bytes want. */
static void levels_quantize_to(const float *x, const unsigned char *want, bool sb) {
    static unsigned char got[2048];
    for (int l = KILN_CPU_REF + 1; l < KILN_CPU_LEVEL_COUNT; l++) {
        if (!kiln__cpu_level_supported((kiln_cpu_level)l)) continue;
        const kiln_cpu_isa *isa = kiln__cpu_isa_for((kiln_cpu_level)l);
        memset(got, 0, sizeof got);
        (sb ? isa->quantize_q8_sb : isa->quantize_q8)(x, got, 1024);
        CHECK(memcmp(got, want, kiln__q8_row_bytes(1024) - 64) == 0);
    }
}

static void every_level_quantizes_activations_to_the_same_bytes_as_the_reference(void) {
    static float x[1024];
    static unsigned char want[2048];
    const kiln_cpu_isa *ref = kiln__cpu_isa_for(KILN_CPU_REF);
    for (int trial = 0; trial < 4; trial++) {
        quantizer_trial(x, trial, 77);
        memset(x + 64, 0, 32 * sizeof(float)); /* an all-zero block gets d = 0 and zero quants */
        x[5] = 127.0f * 3.5f / 127.0f;         /* exact halves exercise round-to-even */
        ref->quantize_q8(x, want, 1024);
        CHECK(kiln__q8_row_d(want, 1024)[2] == 0.0f);
        levels_quantize_to(x, want, false);
    }
}

/* Infinite and NaN activations (a diverged model, a corrupt file) give defined bytes, never an undefined
 * float-to-int conversion or an overflowing block sum: an infinite block scales by 0, its infinite entries
 * clamp to -127 (inf * 0 is NaN) on every level alike; a NaN block keeps every quant in [-127, 127] and its
 * stored sum equal to the sum of its quants (the levels may pick different scales for NaN). */
static void every_level_gives_defined_quants_for_infinite_and_nan_activations(void) {
    static float x[256];
    static unsigned char want[512], got[512];
    const kiln_cpu_isa *ref = kiln__cpu_isa_for(KILN_CPU_REF);
    fill_random(x, 256, 41);
    x[3] = INFINITY;
    x[40] = -INFINITY;
    x[100] = NAN;
    x[101] = INFINITY;
    ref->quantize_q8(x, want, 256);
    CHECK(((int8_t *)want)[3] == -127 && ((int8_t *)want)[4] == 0);
    for (int l = KILN_CPU_REF; l < KILN_CPU_LEVEL_COUNT; l++) {
        if (!kiln__cpu_level_supported((kiln_cpu_level)l)) continue;
        memset(got, 0, sizeof got);
        kiln__cpu_isa_for((kiln_cpu_level)l)->quantize_q8(x, got, 256);
        CHECK(memcmp(got, want, 96) == 0); /* blocks 0..2: no NaN, specified exactly */
        for (int b = 0; b < 8; b++) {
            int sum = 0;
            for (int i = 0; i < 32; i++) {
                int q = ((int8_t *)got)[b * 32 + i];
                CHECK(q >= -127 && q <= 127);
                sum += q;
            }
            CHECK_EQ_INT(kiln__q8_row_s(got, 256)[b], sum);
        }
    }
}

/* The reference itself: block-wise integer dots of the q8 activations equal the float dot of what the
 * dequantizer (src/tensor) says the weights are with what the q8 row says the activations are. */
static void reference_integer_dots_equal_the_dequantized_dot(void) {
    const kiln_cpu_isa *ref = kiln__cpu_isa_for(KILN_CPU_REF);
    float out[3];
    for (int t = 3; t < 5; t++) {
        size_t ws = make_rows(mm_types[t], 256, 3, 5 + (uint64_t)t), xs = kiln__q8_row_bytes(256);
        fill_random(xf, 256, 9);
        ref->quantize_q8(xf, xq, 256);
        ref->mm[mm_types[t]](256, wraw, ws, 3, xq, xs, 1, out, 3);
        for (int r = 0; r < 3; r++) {
            double want = 0, mag = 0;
            for (int i = 0; i < 256; i++) {
                double xv = (double)kiln__q8_row_d(xq, 256)[i / 32] * ((int8_t *)xq)[i];
                want += wf[r * MAXK + i] * xv;
                mag += fabs(wf[r * MAXK + i] * xv);
            }
            CHECK_NEAR(out[r], want, 1e-6 * mag);
        }
    }
}

/* The quantizer's contract, computed independently: d = max|x| / 127, q = round-half-even(x / d). */
static void q8_rows_follow_the_documented_layout(void) {
    float x[64];
    unsigned char row[256];
    fill_random(x, 64, 3);
    kiln__cpu_isa_for(KILN_CPU_REF)->quantize_q8(x, row, 64);
    for (int b = 0; b < 2; b++) {
        double amax = 0;
        int sum = 0;
        for (int i = 0; i < 32; i++) amax = fmax(amax, fabs(x[b * 32 + i]));
        CHECK_NEAR(kiln__q8_row_d(row, 64)[b], amax / 127, 1e-7 * amax);
        for (int i = 0; i < 32; i++) {
            int q = ((int8_t *)row)[b * 32 + i];
            CHECK(fabs(q - x[b * 32 + i] / (amax / 127)) <= 0.5 + 1e-4);
            sum += q;
        }
        CHECK_EQ_INT(kiln__q8_row_s(row, 64)[b], sum);
    }
}

/* Super-block q8 rows (kernels.h): one scale per 256 elements, d = max|x| of the 256 / 127, shared by the
 * super-block's 8 blocks; q = round-half-even(x / d); sums per block. Every level gives the reference's
 * bytes, on the inputs of the per-block quantizer's test. */
static void super_block_q8_rows_share_one_scale_per_256_on_every_level(void) {
    static float x[1024];
    static unsigned char want[2048];
    const kiln_cpu_isa *ref = kiln__cpu_isa_for(KILN_CPU_REF);
    for (int trial = 0; trial < 4; trial++) {
        quantizer_trial(x, trial, 177);
        memset(x + 256, 0, 256 * sizeof(float)); /* an all-zero super-block gets d = 0 and zero quants */
        x[5] = 3.5f * 2.0f;                      /* x[5] / d is 3.5 when the super-block's max is 254 */
        x[6] = trial == 0 ? 254.0f : x[6];
        ref->quantize_q8_sb(x, want, 1024);
        for (int sb = 0; sb < 4; sb++) {
            double amax = 0;
            for (int i = 0; i < 256; i++) amax = fmax(amax, fabs(x[sb * 256 + i]));
            for (int b = sb * 8; b < sb * 8 + 8; b++) {
                int sum = 0;
                CHECK(kiln__q8_row_d(want, 1024)[b] == kiln__q8_row_d(want, 1024)[sb * 8]);
                CHECK_NEAR(kiln__q8_row_d(want, 1024)[b], amax / 127, 1e-7 * amax);
                for (int i = b * 32; i < b * 32 + 32; i++) {
                    int q = ((int8_t *)want)[i];
                    if (amax > 0) CHECK(fabs(q - x[i] / (amax / 127)) <= 0.5 + 1e-4);
                    sum += q;
                }
                CHECK_EQ_INT(kiln__q8_row_s(want, 1024)[b], sum);
            }
        }
        if (trial == 0) CHECK_EQ_INT(((int8_t *)want)[5], 4); /* 3.5 rounds to even */
        levels_quantize_to(x, want, true);
    }
}

/* Repacked weights (repack.c) through each level's packed tiles equal the unpacked reference tile. */
static void packed_tiles_match_the_reference_on_repacked_weights(void) {
    static float got[40 * 48], want[40 * 48], xs_f[40 * MAXK];
    static unsigned char packed[48 * 34 * (MAXK / 32)] __attribute__((aligned(64))), xq2[(40 + 15) * 2624] /* q8 rows of MAXK */;
    static const int64_t ncs[] = {1, 3, 7, 16, 17, 35}; /* AMX takes 16 columns at a time */
    static const int64_t ks[] = {32, 96, 160, 1056, 2080}; /* AMX unpacks 64 blocks at a time */
    const kiln_cpu_isa *ref = kiln__cpu_isa_for(KILN_CPU_REF);
    int checked = 0;
    for (int l = KILN_CPU_REF; l < KILN_CPU_LEVEL_COUNT; l++) {
        if (!kiln__cpu_level_supported((kiln_cpu_level)l)) continue;
        const kiln_cpu_isa *isa = kiln__cpu_isa_for((kiln_cpu_level)l);
        for (int t = 3; t < 5; t++) {
            kiln_type type = mm_types[t];
            if (isa->level == KILN_CPU_AVX2) CHECK(isa->mm_packed[type] != NULL); /* avx2_packed.c */
            if (!isa->mm_packed[type]) continue;
            for (size_t i = 0; i < KILN__ARRAY_LEN(ks); i++)
                for (size_t ic = 0; ic < KILN__ARRAY_LEN(ncs); ic++) {
                    int64_t k = ks[i], nr = 48, nc = ncs[ic];
                    size_t rb, xs = kiln__q8_row_bytes(k), gs = kiln__repack_group_bytes(type, k);
                    uint64_t st = 31 * (uint64_t)l + 7 * i + (uint64_t)t;
                    kiln_type_row_bytes(type, k, &rb);
                    for (int64_t r = 0; r < nr; r++) random_quant_row(type, wraw + r * rb, rb, &st);
                    CHECK(kiln__repack_supported(type, k, nr));
                    kiln__repack(type, wraw, rb, k, nr, packed);
                    fill_random(xs_f, 40 * MAXK, st);
                    for (int64_t c = 0; c < nc; c++) ref->quantize_q8(xs_f + c * MAXK, xq2 + c * xs, k);
                    isa->mm_packed[type](k, packed, gs, nr, xq2, xs, nc, got, 48);
                    ref->mm[type](k, wraw, rb, nr, xq2, xs, nc, want, 48);
                    if (isa->level == KILN_CPU_AVX512) { /* the decode variant this machine's table lacks */
                        static float other[40 * 48];
                        kiln_mm_fn alt = kiln__cpu_avx512_packed_variant(type, kiln__cpu_decode_streams() == 1 ? 0 : 1);
                        CHECK(alt != NULL);
                        alt(k, packed, gs, nr, xq2, xs, nc, other, 48);
                        for (int64_t j = 0; j < nc * 48; j++)
                            if (!(fabs(other[j] - want[j]) <= 1e-5 * (fabs(want[j]) + 1e-2) * (double)(k / 32))) {
                                harness_fail(__FILE__, __LINE__, "avx512 other-stream packed %s k=%lld nc=%lld [%lld]: %.9g vs %.9g",
                                             kiln__type_name(type), (long long)k, (long long)nc, (long long)j, other[j], want[j]);
                                break;
                            }
                        checked++;
                    }
                    if (isa->level == KILN_CPU_AMX) { /* AMX claims the packed VNNI kernel's exact bits */
                        static float vnni[40 * 48];
                        kiln__cpu_isa_for(KILN_CPU_AVX512)->mm_packed[type](k, packed, gs, nr, xq2, xs, nc, vnni, 48);
                        for (int64_t c = 0; c < nc; c++) CHECK(memcmp(got + c * 48, vnni + c * 48, 48 * sizeof(float)) == 0);
                    }
                    for (int64_t j = 0; j < nc * 48; j++)
                        if (!(fabs(got[j] - want[j]) <= 1e-5 * (fabs(want[j]) + 1e-2) * (double)(k / 32))) {
                            harness_fail(__FILE__, __LINE__, "%s packed %s k=%lld nc=%lld [%lld]: %.9g vs %.9g",
                                         kiln__cpu_level_name(isa->level), kiln__type_name(type), (long long)k,
                                         (long long)nc, (long long)j, got[j], want[j]);
                            break;
                        }
                    checked++;
                }
        }
    }
    printf("  (%d packed cases)\n", checked);
}

/* The AVX-512 one-stream decode tiles (AMD) give one column the bits that column gets in a wider tile, which
 * walks the same blocks in the same order. The Q8_0 tile reads a group that starts on a 64-byte boundary two
 * blocks at a time with aligned loads, and a group that does not (odd block counts leave every other group
 * 32 bytes off) block by block; Q4_0 reads block by block. */
static void one_stream_decode_equals_the_wide_tile_bit_for_bit(void) {
    static unsigned char packed[48 * 34 * (MAXK / 32)] __attribute__((aligned(64))), xq2[2 * 2624];
    static float xs_f[2 * MAXK], one[48], two[2 * 48];
    static const int64_t ks[] = {32, 64, 96, 1056, 2048, 2080};
    static const kiln_type types[] = {KILN_TYPE_Q8_0, KILN_TYPE_Q4_0};
    int checked = 0;
    if (!kiln__cpu_level_supported(KILN_CPU_AVX512)) {
        printf("  (no AVX-512 here: skipped)\n");
        return;
    }
    for (size_t t = 0; t < KILN__ARRAY_LEN(types); t++) {
        kiln_type type = types[t];
        kiln_mm_fn tile = kiln__cpu_avx512_packed_variant(type, 1);
        CHECK(tile != NULL);
        for (size_t i = 0; i < KILN__ARRAY_LEN(ks); i++) {
            int64_t k = ks[i], nr = 48;
            size_t rb, xs = kiln__q8_row_bytes(k), gs = kiln__repack_group_bytes(type, k);
            uint64_t st = 977 + 13 * t + i;
            kiln_type_row_bytes(type, k, &rb);
            for (int64_t r = 0; r < nr; r++) random_quant_row(type, wraw + r * rb, rb, &st);
            kiln__repack(type, wraw, rb, k, nr, packed);
            fill_random(xs_f, 2 * MAXK, st);
            for (int c = 0; c < 2; c++) kiln__cpu_isa_for(KILN_CPU_REF)->quantize_q8(xs_f + c * MAXK, xq2 + c * xs, k);
            tile(k, packed, gs, nr, xq2, xs, 1, one, 48);
            tile(k, packed, gs, nr, xq2, xs, 2, two, 48);
            CHECK(memcmp(one, two, sizeof one) == 0);
            checked++;
        }
    }
    printf("  (%d type and block-count cases)\n", checked);
}

/* The largest integer sums the AVX2 tiles' int16 stages can meet (avx2_packed.c): Q8_0 quants all -128
 * (|q| = 128 is the unsigned operand's largest value) and Q4_0 nibbles all 15, against activation quants
 * all 127 or all -127. The packed tiles must give the reference's result; a saturated stage would be off
 * by percents. */
static void packed_tiles_do_not_saturate_at_the_largest_quants(void) {
    static unsigned char packed[16 * 34 * 8] __attribute__((aligned(64))), xq2[2 * 320];
    static float x[2 * 256], got[2 * 16], want[2 * 16];
    const int64_t k = 256, nr = 16;
    const kiln_cpu_isa *ref = kiln__cpu_isa_for(KILN_CPU_REF);
    size_t xs = kiln__q8_row_bytes(k);
    for (int i = 0; i < 2 * 256; i++) x[i] = i < 256 ? 1.0f : -1.0f;
    for (int c = 0; c < 2; c++) ref->quantize_q8(x + c * 256, xq2 + c * xs, k);
    CHECK_EQ_INT(((const int8_t *)xq2)[xs], -127);
    for (int l = KILN_CPU_REF; l < KILN_CPU_LEVEL_COUNT; l++) {
        if (!kiln__cpu_level_supported((kiln_cpu_level)l)) continue;
        const kiln_cpu_isa *isa = kiln__cpu_isa_for((kiln_cpu_level)l);
        for (int t = 3; t < 5; t++) {
            kiln_type type = mm_types[t];
            size_t rb, bb = kiln__type_traits(type)->block_bytes;
            if (!isa->mm_packed[type]) continue;
            kiln_type_row_bytes(type, k, &rb);
            memset(wraw, type == KILN_TYPE_Q8_0 ? 0x80 : 0xff, rb * nr);
            for (size_t b = 0; b < rb * nr / bb; b++) {
                uint16_t d = kiln_fp32_to_fp16(0.01f + 0.001f * (float)(b % 5));
                memcpy(wraw + b * bb, &d, 2);
            }
            kiln__repack(type, wraw, rb, k, nr, packed);
            for (int64_t nc = 1; nc <= 2; nc++) { /* decode, then prefill */
                isa->mm_packed[type](k, packed, kiln__repack_group_bytes(type, k), nr, xq2, xs, nc, got, 16);
                ref->mm[type](k, wraw, rb, nr, xq2, xs, nc, want, 16);
                for (int64_t j = 0; j < nc * 16; j++) CHECK_NEAR(got[j], want[j], 1e-6 * fabs(want[j]) * (k / 32));
            }
        }
    }
}

int main(void) {
    RUN(q8_rows_follow_the_documented_layout);
    RUN(reference_integer_dots_equal_the_dequantized_dot);
    RUN(every_level_quantizes_activations_to_the_same_bytes_as_the_reference);
    RUN(super_block_q8_rows_share_one_scale_per_256_on_every_level);
    RUN(every_level_gives_defined_quants_for_infinite_and_nan_activations);
    RUN(every_level_matches_the_reference_tiles_for_every_weight_type_and_odd_sizes);
    RUN(packed_tiles_match_the_reference_on_repacked_weights);
    RUN(one_stream_decode_equals_the_wide_tile_bit_for_bit);
    RUN(packed_tiles_do_not_saturate_at_the_largest_quants);
    return harness_finish();
}
