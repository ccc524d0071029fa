/*
 * test_kernels_pairs.c - F32, F16 and BF16 weights repacked into 16-row pair groups (repack_pairs.c) and
 * the packed tiles of every level this machine supports, against the scalar reference tile on the
 * unpacked rows, on random inputs of odd sizes; and F16/BF16 matmuls through the graph at every level.
 *
 * Tolerance, from the arithmetic: the weights are or convert to floats exactly, every product is one FMA, so the
 * only error is float rounding in the sums. A sum whose terms pass through at most n roundings is within
 * n * 2^-24 * sum|w x| of the exact value. The reference sums left to right (n = k); the packed tiles sum
 * each lane over at most k / 2 pairs, then add at most STREAMS (8) partial sums and one lane pair
 * (n <= k / 2 + 16). Both are checked against a double-precision dot, and against each other with the
 * sum of the two bounds.
 *
 * The bf16 prefill tiles (mm_packed_bf16, where the CPU has AVX512-BF16) round weights and activations
 * to bf16 first: each product is then within 2^-8 + 2^-8 + 2^-16 (BF16 weights: 2^-8) relative of the
 * exact one, which adds 2^-7 * sum|w x| to the bound against the double dot; against their reference
 * (kiln__mm_bf16_ref, the same rounded inputs) only the two float sums differ, k roundings each.
 */
#include "harness.h"

#include "backend/cpu/kernels.h"
#include "core/core.h"
#include "graph_run.h"
#include "tensor/types.h"

#include <math.h>
#include <stdlib.h>

#define MAXK 2080
#define MAXN 45
#define MAXC 35
#define U 0x1p-24

static uint16_t wbits[MAXN * MAXK];
static float wval[MAXN * MAXK], xval[MAXC * MAXK];
static unsigned char packed[3 * 16 * MAXK * 4];

static uint16_t to_half(kiln_type type, float v) {
    return type == KILN_TYPE_F16 ? kiln_fp32_to_fp16(v) : kiln_fp32_to_bf16(v);
}

static float from_half(kiln_type type, uint16_t h) {
    return type == KILN_TYPE_F16 ? kiln_fp16_to_fp32(h) : kiln_bf16_to_fp32(h);
}

/* n random rows of k weights (what they mean, exactly, in wval; F16/BF16 bits in wbits) and nc random
 * columns. The rows of a type are at weights(type), row_bytes(type, k) apart. */
static void make_inputs(kiln_type type, int64_t k, int64_t n, int64_t nc, uint64_t seed) {
    uint64_t st = seed;
    for (int64_t i = 0; i < n * k; i++) {
        if (type == KILN_TYPE_F32) {
            wval[i] = test_rand(&st);
            continue;
        }
        wbits[i] = to_half(type, test_rand(&st));
        wval[i] = from_half(type, wbits[i]);
    }
    fill_random(xval, (size_t)(nc * k), seed + 1);
}

static const void *weights(kiln_type type) { return type == KILN_TYPE_F32 ? (const void *)wval : (const void *)wbits; }
static size_t row_bytes(kiln_type type, int64_t k) { return (size_t)k * (type == KILN_TYPE_F32 ? 4 : 2); }

static void repacked_groups_hold_element_pairs_of_sixteen_rows_and_zero_padding(void) {
    const int64_t k = 64, n = 21;
    make_inputs(KILN_TYPE_F16, k, n, 0, 3);
    CHECK(kiln__repack_supported(KILN_TYPE_F16, k, n) && kiln__repack_supported(KILN_TYPE_BF16, k, n));
    CHECK(kiln__repack_supported(KILN_TYPE_F32, k, n) && kiln__repack_pads(KILN_TYPE_F32));
    CHECK(!kiln__repack_supported(KILN_TYPE_F16, 48, 16)); /* K must be whole 32-element steps */
    CHECK(!kiln__repack_supported(KILN_TYPE_F32, 48, 16));
    CHECK_EQ_INT((int64_t)kiln__repack_group_bytes(KILN_TYPE_BF16, k), k * 32);
    CHECK_EQ_INT((int64_t)kiln__repack_group_bytes(KILN_TYPE_F32, k), k * 64);
    static const unsigned char zeros[8];
    for (int f32 = 0; f32 < 2; f32++) { /* F16 (bits in wbits), then F32: the same order, 4 or 8 bytes per row's pair */
        kiln_type type = f32 ? KILN_TYPE_F32 : KILN_TYPE_F16;
        size_t pb = 2 * (f32 ? 4 : 2);
        if (f32) make_inputs(KILN_TYPE_F32, k, n, 0, 4);
        memset(packed, 0xab, sizeof packed);
        kiln__repack(type, weights(type), row_bytes(type, k), k, n, packed);
        for (int64_t g = 0; g < 2; g++)
            for (int64_t p = 0; p < k / 2; p++)
                for (int r = 0; r < 16; r++) {
                    int64_t row = g * 16 + r;
                    const unsigned char *at = packed + (size_t)(g * k / 2 + p) * 16 * pb + (size_t)r * pb;
                    const unsigned char *want = row < n ? (const unsigned char *)weights(type) +
                                                              (size_t)row * row_bytes(type, k) + (size_t)p * pb
                                                        : zeros; /* padding rows: +0 */
                    CHECK(memcmp(at, want, pb) == 0);
                }
    }
}

/* |got - want| within tol, reported with the case. */
static bool near(double got, double want, double tol, const char *what, const kiln_cpu_isa *isa, kiln_type type,
                 int64_t k, int64_t nr, int64_t nc, int64_t r, int64_t c) {
    if (fabs(got - want) <= tol) return true;
    harness_fail(__FILE__, __LINE__, "%s %s %s k=%lld nr=%lld nc=%lld (%lld,%lld): %.9g vs %.9g (tol %.3g)", what,
                 kiln__cpu_level_name(isa->level), kiln__type_name(type), (long long)k, (long long)nr,
                 (long long)nc, (long long)r, (long long)c, got, want, tol);
    return false;
}

#define OS 48 /* output stride: more than the most rows, so writes past nr show */
static float got[MAXC * OS], split[MAXC * OS], want[MAXC * OS];

/* The packed tile over all nr rows into got, and again one group at a time into split (as a thread's
 * share starts); both start as -7 so that outputs written past nr show. */
static void run_tile(kiln_mm_fn tile, int64_t k, size_t gs, int64_t nr, const void *x, size_t xs, int64_t nc) {
    for (size_t i = 0; i < MAXC * OS; i++) got[i] = split[i] = -7.0f;
    tile(k, packed, gs, nr, x, xs, nc, got, OS);
    for (int64_t g = 0; g * 16 < nr; g++)
        tile(k, packed + g * gs, gs, KILN__MIN(16, nr - g * 16), x, xs, nc, split + g * 16, OS);
}

/* got against the double-precision dot of the exact inputs and against want (the reference), each within
 * its bound times sum|w x| (times `grow`, the rounded inputs' growth of that sum); got equal to split bit
 * for bit; nothing written past nr. */
typedef struct bounds {
    double tile, ref, both, grow; /* tile vs exact, reference vs exact, tile vs reference */
} bounds;

static void check_outputs(const char *what, const kiln_cpu_isa *isa, kiln_type type, int64_t k, int64_t nr,
                          int64_t nc, bounds b) {
    char label[3][64];
    snprintf(label[0], sizeof label[0], "%s vs exact", what);
    snprintf(label[1], sizeof label[1], "%s reference vs exact", what);
    snprintf(label[2], sizeof label[2], "%s vs its reference", what);
    for (int64_t c = 0; c < nc; c++) {
        for (int64_t r = nr; r < OS; r++) CHECK(got[c * OS + r] == -7.0f && split[c * OS + r] == -7.0f);
        for (int64_t r = 0; r < nr; r++) {
            double exact = 0, mag = 0;
            for (int64_t i = 0; i < k; i++) {
                exact += (double)wval[r * k + i] * xval[c * MAXK + i];
                mag += fabs((double)wval[r * k + i] * xval[c * MAXK + i]);
            }
            mag *= b.grow;
            float g = got[c * OS + r];
            if (!near(g, exact, b.tile * mag, label[0], isa, type, k, nr, nc, r, c) ||
                !near(want[c * OS + r], exact, b.ref * mag, label[1], isa, type, k, nr, nc, r, c) ||
                !near(g, want[c * OS + r], b.both * mag, label[2], isa, type, k, nr, nc, r, c))
                return;
            if (memcmp(&g, &split[c * OS + r], sizeof g) != 0) {
                harness_fail(__FILE__, __LINE__, "%s %s %s k=%lld nc=%lld (%lld,%lld): %.9g whole, %.9g by group",
                             what, kiln__cpu_level_name(isa->level), kiln__type_name(type), (long long)k,
                             (long long)nc, (long long)r, (long long)c, g, split[c * OS + r]);
                return;
            }
        }
    }
}

/* One case of a float tile against the reference tile on the unpacked rows. */
static void check_packed(const kiln_cpu_isa *isa, kiln_mm_fn tile, const kiln_cpu_isa *ref, kiln_type type,
                         int64_t k, int64_t nr, int64_t nc) {
    const size_t xs = MAXK * sizeof(float), gs = kiln__repack_group_bytes(type, k);
    kiln__repack(type, weights(type), row_bytes(type, k), k, nr, packed);
    run_tile(tile, k, gs, nr, xval, xs, nc);
    ref->mm[type](k, weights(type), row_bytes(type, k), nr, xval, xs, nc, want, OS);
    const double n_ref = (double)k, n_packed = (double)k / 2 + 16;
    check_outputs("packed", isa, type, k, nr, nc, (bounds){n_packed * U, n_ref * U, (n_ref + n_packed) * U, 1});
}

static void packed_float_tiles_match_the_reference_at_every_level_for_odd_sizes(void) {
    static const kiln_type types[] = {KILN_TYPE_F32, KILN_TYPE_F16, KILN_TYPE_BF16};
    static const int64_t ks[] = {32, 96, 1056, 2080}, nrs[] = {16, 21, 45}, ncs[] = {1, 3, 7, 12, 13, 17, 35};
    const kiln_cpu_isa *ref = kiln__cpu_isa_for(KILN_CPU_REF);
    int checked = 0;
    for (int l = KILN_CPU_REF; l < KILN_CPU_LEVEL_COUNT; l++) {
        if (!kiln__cpu_level_supported((kiln_cpu_level)l)) continue;
        const kiln_cpu_isa *isa = kiln__cpu_isa_for((kiln_cpu_level)l);
        for (size_t t = 0; t < KILN__ARRAY_LEN(types); t++) {
            if (isa->level == KILN_CPU_AVX2) CHECK(isa->mm_packed[types[t]] != NULL); /* avx2_pairs.c */
            if (!isa->mm_packed[types[t]]) continue;
            for (size_t i = 0; i < KILN__ARRAY_LEN(ks); i++)
                for (size_t j = 0; j < KILN__ARRAY_LEN(nrs); j++)
                    for (size_t c = 0; c < KILN__ARRAY_LEN(ncs); c++) {
                        make_inputs(types[t], ks[i], nrs[j], ncs[c], 17 * (uint64_t)l + 5 * i + 3 * j + c + t);
                        check_packed(isa, isa->mm_packed[types[t]], ref, types[t], ks[i], nrs[j], ncs[c]);
                        checked++;
                        if (isa->level == KILN_CPU_AVX512 && types[t] != KILN_TYPE_F32) { /* the decode variant this machine's table lacks */
                            kiln_mm_fn alt = kiln__cpu_avx512_packed_variant(
                                types[t], kiln__cpu_decode_streams() == 1 ? 0 : 1);
                            CHECK(alt != NULL);
                            if (alt) check_packed(isa, alt, ref, types[t], ks[i], nrs[j], ncs[c]);
                            checked++;
                        }
                    }
        }
    }
    printf("  (%d packed F32/F16/BF16 cases; the machine's best level is %s)\n", checked,
           kiln__cpu_level_name(kiln__cpu_max_level()));
}

/* ---- bf16 arithmetic (mm_packed_bf16) ---- */
#define BF16_PRODUCT 0x1p-7 /* relative error of a product of two values each rounded to bf16, rounded up */
#define XS16 (((size_t)MAXK * 2 + 63) & ~(size_t)63)

static bool is_nan16(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0; }

static void activation_rows_round_to_bf16_like_the_reference_at_every_level(void) {
    static float v[77];
    static uint16_t bits[78];
    const uint32_t special[] = {0x00000001u, 0x80400000u, 0x007fffffu, 0x00800000u, 0x7f7fffffu, 0xff7fffffu,
                                0x7f800000u, 0x7fc00001u, 0xff800001u, 0x3f808000u, 0x3f818000u, 0x3f807fffu};
    int levels = 0;
    for (int l = KILN_CPU_REF; l < KILN_CPU_LEVEL_COUNT; l++) {
        if (!kiln__cpu_level_supported((kiln_cpu_level)l)) continue;
        const kiln_cpu_isa *isa = kiln__cpu_isa_for((kiln_cpu_level)l);
        levels++;
        for (int64_t n = 1; n <= 77; n += 19) {
            uint64_t st = 11 + (uint64_t)n;
            for (int64_t i = 0; i < n; i++) v[i] = test_rand(&st) * 1000.0f;
            for (size_t i = 0; i < KILN__ARRAY_LEN(special) && (int64_t)i < n; i++)
                memcpy(&v[i * 5 % n], &special[i], 4);
            memset(bits, 0xcd, sizeof bits);
            isa->f32_to_bf16(v, bits, n);
            for (int64_t i = 0; i < n; i++) {
                uint16_t expect = kiln__bf16_round(v[i]);
                if (is_nan16(expect) ? !is_nan16(bits[i]) : bits[i] != expect)
                    harness_fail(__FILE__, __LINE__, "%s n=%lld [%lld]: %.9g -> 0x%04x, want 0x%04x",
                                 kiln__cpu_level_name(isa->level), (long long)n, (long long)i, v[i], bits[i], expect);
            }
            CHECK(bits[n] == 0xcdcd); /* nothing past n */
        }
    }
    CHECK_EQ_INT(kiln__bf16_round(-0x1p-140f), 0x8000); /* a subnormal goes to zero, keeping its sign */
    CHECK(levels > 0);
}

static void check_bf16(const kiln_cpu_isa *isa, kiln_type type, int64_t k, int64_t nr, int64_t nc) {
    static uint16_t xb[MAXC * XS16 / 2];
    const size_t gs = kiln__repack_group_bytes(type, k);
    kiln__repack(type, wbits, (size_t)k * 2, k, nr, packed);
    for (int64_t c = 0; c < nc; c++) isa->f32_to_bf16(xval + c * MAXK, xb + c * XS16 / 2, k);
    run_tile(isa->mm_packed_bf16[type], k, gs, nr, xb, XS16, nc);
    kiln__mm_bf16_ref(type)(k, wbits, (size_t)k * 2, nr, xb, XS16, nc, want, OS);
    const double product = type == KILN_TYPE_BF16 ? 0x1p-8 : BF16_PRODUCT;
    check_outputs("bf16 tile", isa, type, k, nr, nc,
                  (bounds){product + k * U, product + k * U, 2 * k * U, 1 + product});
}

static void bf16_tiles_match_their_reference_and_the_exact_product_within_bf16_rounding(void) {
    static const kiln_type types[] = {KILN_TYPE_F16, KILN_TYPE_BF16};
    static const int64_t ks[] = {32, 288, 2080}, nrs[] = {16, 21, 45}, ncs[] = {4, 7, 12, 13, 35};
    int checked = 0;
    for (int l = KILN_CPU_REF; l < KILN_CPU_LEVEL_COUNT; l++) {
        if (!kiln__cpu_level_supported((kiln_cpu_level)l)) continue;
        const kiln_cpu_isa *isa = kiln__cpu_isa_for((kiln_cpu_level)l);
        for (size_t t = 0; t < KILN__ARRAY_LEN(types); t++) {
            if (!isa->mm_packed_bf16[types[t]]) continue;
            CHECK(isa->mm_packed[types[t]] != NULL); /* the bf16 tiles read the float tiles' repacked layout */
            for (size_t i = 0; i < KILN__ARRAY_LEN(ks); i++)
                for (size_t j = 0; j < KILN__ARRAY_LEN(nrs); j++)
                    for (size_t c = 0; c < KILN__ARRAY_LEN(ncs); c++) {
                        make_inputs(types[t], ks[i], nrs[j], ncs[c], 29 * (uint64_t)l + 7 * i + 3 * j + c + t);
                        check_bf16(isa, types[t], ks[i], nrs[j], ncs[c]);
                        checked++;
                    }
        }
    }
    printf("  (%d bf16 tile cases%s)\n", checked,
           checked ? "" : ": no level of this CPU has them (AVX512-BF16 absent); the reference alone was checked");
    if (!checked) { /* the reference itself, against the exact product, so the bound is exercised anywhere */
        make_inputs(KILN_TYPE_F16, 96, 5, 3, 5);
        static uint16_t xb[3 * XS16 / 2];
        const kiln_cpu_isa *ref = kiln__cpu_isa_for(KILN_CPU_REF);
        for (int c = 0; c < 3; c++) ref->f32_to_bf16(xval + c * MAXK, xb + c * XS16 / 2, 96);
        kiln__mm_bf16_ref(KILN_TYPE_F16)(96, wbits, 96 * 2, 5, xb, XS16, 3, want, OS);
        for (int c = 0; c < 3; c++)
            for (int r = 0; r < 5; r++) {
                double exact = 0, mag = 0;
                for (int i = 0; i < 96; i++) {
                    exact += (double)wval[r * 96 + i] * xval[c * MAXK + i];
                    mag += fabs((double)wval[r * 96 + i] * xval[c * MAXK + i]);
                }
                CHECK_NEAR(want[c * OS + r], exact, (BF16_PRODUCT + 96 * U) * mag * (1 + BF16_PRODUCT));
            }
    }
}

/* ---- F16/BF16 matmul through the graph ---- */
#define GK 96
#define GN 88 /* 5 full groups and one of 8 rows */
#define GM 21

typedef struct hcase {
    kiln_type type;
    int64_t m;
    uint16_t w[GN * GK];
    float x[GK * GM];
} hcase;

static float *run_h(hcase *c, int threads) {
    kiln_graph *g = NULL;
    kiln_status s;
    float *arena, *out = NULL;
    int64_t nw[2] = {GK, GN}, nx[2] = {GK, c->m};
    CHECK_OK(kiln__graph_create(16, &g));
    if (!g) return NULL;
    kiln_tensor *w = kiln__graph_leaf(g, "w", c->type, 2, nw, c->w, KILN_TENSOR_WEIGHT);
    kiln_tensor *x = kiln__graph_leaf(g, "x", KILN_TYPE_F32, 2, nx, c->x, KILN_TENSOR_INPUT);
    kiln_tensor *y = kiln__matmul(g, w, x);
    kiln__graph_set_output(g, y);
    arena = graph_run(g, threads, &s);
    CHECK_OK(s);
    if (arena) {
        out = malloc((size_t)(GN * c->m) * sizeof(float));
        memcpy(out, y->data, (size_t)(GN * c->m) * sizeof(float));
    }
    free(arena);
    kiln__graph_destroy(g);
    return out;
}

/* Bit-identical for 1 and 2 threads at every level (the row split follows the 16-row groups), and within
 * the two summation bounds above of the reference level; plus the bf16 products' error where a level
 * multiplies 4 or more columns in bf16. */
static void half_matmuls_agree_across_thread_counts_and_with_the_reference_at_every_level(void) {
    static hcase c;
    static const int64_t ms[] = {1, 4, GM};
    for (int t = 0; t < 2; t++)
        for (size_t im = 0; im < KILN__ARRAY_LEN(ms); im++) {
            uint64_t st = 7 + (uint64_t)(t * 3) + im;
            c.type = t ? KILN_TYPE_BF16 : KILN_TYPE_F16;
            c.m = ms[im];
            for (int64_t i = 0; i < GN * GK; i++) c.w[i] = to_half(c.type, test_rand(&st));
            fill_random(c.x, GK * GM, st);
            kiln__cpu_force_level(KILN_CPU_REF);
            float *ref = run_h(&c, 1);
            for (int l = KILN_CPU_REF; ref && l < KILN_CPU_LEVEL_COUNT; l++) {
                if (!kiln__cpu_level_supported((kiln_cpu_level)l)) continue;
                kiln__cpu_force_level((kiln_cpu_level)l);
                float *one = run_h(&c, 1), *two = run_h(&c, 2);
                if (one && two) {
                    CHECK(memcmp(one, two, (size_t)(GN * c.m) * sizeof(float)) == 0);
                    for (int64_t m = 0; m < c.m; m++)
                        for (int64_t n = 0; n < GN; n++) {
                            double mag = 0;
                            for (int64_t i = 0; i < GK; i++)
                                mag += fabs((double)from_half(c.type, c.w[n * GK + i]) * c.x[m * GK + i]);
                            const kiln_cpu_isa *isa = kiln__cpu_isa();
                            bool bf16 = isa->bf16_prefill && isa->mm_packed_bf16[c.type] && c.m >= 4;
                            double product = bf16 ? BF16_PRODUCT : 0;
                            CHECK_NEAR(one[m * GN + n], ref[m * GN + n], ((1.5 * GK + 16) * U + product) * mag);
                        }
                }
                free(one);
                free(two);
            }
            free(ref);
        }
    kiln__cpu_force_level(kiln__cpu_max_level());
}

int main(void) {
    RUN(repacked_groups_hold_element_pairs_of_sixteen_rows_and_zero_padding);
    RUN(packed_float_tiles_match_the_reference_at_every_level_for_odd_sizes);
    RUN(activation_rows_round_to_bf16_like_the_reference_at_every_level);
    RUN(bf16_tiles_match_their_reference_and_the_exact_product_within_bf16_rounding);
    RUN(half_matmuls_agree_across_thread_counts_and_with_the_reference_at_every_level);
    return harness_finish();
}
