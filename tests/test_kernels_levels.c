/*
 * test_kernels_levels.c - the whole engine at every kernel level this machine supports, forced the way
 * KILN_CPU does it (kiln__cpu_force_level):
 *  - the stories260K greedy goldens (tests/data/golden, from llama2.c's test suite) are reproduced token
 *    for token at every level, with 1 and 2 threads. That model has F32 weights; SIMD levels sum dot
 *    products in a different order than the reference, which moves logits by about 1e-6 relative, far
 *    less than the gaps between the top two logits along these sequences, so the ids stay exact;
 *  - quantized matmuls (plain and repacked weights, one column and several) give bit-identical results
 *    for 1 and 2 threads at every level, and agree with the reference level within the block-sum
 *    reordering bound used in test_kernels_mm.c (Q8_0, Q4_0, Q4_K, Q6_K), plus, were a level to quantize
 *    the activations with one scale per 256 (super-block q8 rows, kernels.h) and the reference with one
 *    per 32, the two roundings: each activation is within half its scale of x on both sides, so the
 *    outputs would differ by at most sum |w| * (D / 2 + d / 2) <= sum |w| * D, D the super-block's scale
 *    (max |x| over its 256 / 127) and d <= D the block's. Today every level quantizes as the reference.
 */
#include "harness.h"

#include "backend/cpu/kernels.h"
#include "graph_run.h"
#include "tensor/types.h"

#include <math.h>
#include <stdlib.h>

/* Greedy from the golden's first n_prompt ids; returns the index of the first mismatch or -1. */
static long greedy_mismatch(const kiln_model *m, const int32_t *want, size_t n_prompt, size_t n) {
    kiln_ctx_params p = harness_ctx_params();
    kiln_ctx *ctx = NULL;
    const float *logits = NULL;
    long bad = -1;
    CHECK_OK(kiln_ctx_create(m, &p, &ctx));
    if (!ctx) return 0;
    CHECK_OK(kiln_ctx_decode(ctx, want, (int32_t)n_prompt, &logits));
    for (size_t i = n_prompt; logits && i < n; i++) {
        int32_t id = harness_argmax(logits, kiln_model_n_vocab(m));
        if (id != want[i]) {
            bad = (long)i;
            break;
        }
        if (i + 1 < n) CHECK_OK(kiln_ctx_decode(ctx, &id, 1, &logits));
    }
    kiln_ctx_destroy(ctx);
    return bad;
}

static void goldens_are_exact_at_every_level_with_one_and_two_threads(void) {
    static const struct {
        const char *section;
        size_t n_prompt;
    } cases[] = {{"\"bos_only_200\"", 1}, {"\"once_upon_a_time_64\"", 5}};
    char *json = harness_read_file(harness_data_path("golden/stories260K_greedy.json"), NULL);
    kiln_model *models[2] = {NULL, NULL}; /* a pool of one thread, and of two */
    CHECK(json != NULL);
    for (int t = 1; t <= 2; t++) {
        kiln_model_params mp = kiln_model_params_default();
        mp.n_threads = t;
        CHECK_OK(kiln_model_load_ex(KILN_MODEL_PATH, &mp, &models[t - 1]));
    }
    for (int l = KILN_CPU_REF; json && models[0] && models[1] && l < KILN_CPU_LEVEL_COUNT; l++) {
        if (!kiln__cpu_level_supported((kiln_cpu_level)l)) continue;
        CHECK_EQ_INT(kiln__cpu_force_level((kiln_cpu_level)l), l);
        for (size_t c = 0; c < 2; c++) {
            int32_t ids[256];
            size_t n = harness_json_ids(json, cases[c].section, "\"token_ids\"", ids, 256);
            CHECK(n > cases[c].n_prompt);
            for (int t = 1; t <= 2; t++) {
                long bad = greedy_mismatch(models[t - 1], ids, cases[c].n_prompt, n);
                if (bad >= 0)
                    harness_fail(__FILE__, __LINE__, "level %s, %s, %d threads: first wrong id at %ld",
                                 kiln__cpu_level_name((kiln_cpu_level)l), cases[c].section, t, bad);
            }
        }
    }
    kiln__cpu_force_level(kiln__cpu_max_level());
    kiln_model_destroy(models[0]);
    kiln_model_destroy(models[1]);
    free(json);
}

/* ---- quantized matmul through the graph ---- */
#define QK 256
#define QN 88 /* n = 80 is repacked in groups of 16; n = 88 is not (88 % 16 != 0) and uses the plain tiles,
                    * except for the K-quants, whose repacking pads a partial last group */

typedef struct qcase {
    kiln_type type;
    int64_t n, m;
    unsigned char w[QN * QK * 2];
    float x[QK * 21];
} qcase;

static kiln_tensor *build_q(kiln_graph *g, void *user) {
    qcase *c = user;
    int64_t nw[2] = {QK, c->n}, nx[2] = {QK, c->m};
    kiln_tensor *w = kiln__graph_leaf(g, "w", c->type, 2, nw, c->w, KILN_TENSOR_WEIGHT);
    kiln_tensor *x = kiln__graph_leaf(g, "x", KILN_TYPE_F32, 2, nx, c->x, KILN_TENSOR_INPUT);
    kiln_tensor *y = kiln__matmul(g, w, x);
    kiln__graph_set_output(g, y);
    return y;
}

static float *run_q(qcase *c, int threads) {
    kiln_graph *g = NULL;
    kiln_status s;
    float *arena, *out = NULL;
    CHECK_OK(kiln__graph_create(16, &g));
    if (!g) return NULL;
    kiln_tensor *y = build_q(g, c);
    arena = graph_run(g, threads, &s);
    CHECK_OK(s);
    if (arena) {
        out = malloc((size_t)(c->n * c->m) * sizeof(float));
        memcpy(out, y->data, (size_t)(c->n * c->m) * sizeof(float));
    }
    free(arena);
    kiln__graph_destroy(g);
    return out;
}

/* The reordering bound of test_kernels_mm.c for output i (row i % n, column i / n): 1e-6 * (K / 32) *
 * sum |w x|, with w as the dequantizer reads it; the K-quants' per-block terms can cancel, so the bound
 * must scale with the magnitudes summed, not with the result. With superblock (the level's activation
 * rows have one scale per 256, the reference's one per 32), plus sum |w| * D (the header). */
static double tolerance(const qcase *c, int64_t i, bool superblock) {
    static float w[QK];
    const float *x = c->x + (i / c->n) * QK;
    size_t rb;
    double mag = 0, rounding = 0;
    kiln_type_row_bytes(c->type, QK, &rb);
    kiln_dequantize(c->type, c->w + (size_t)(i % c->n) * rb, w, QK);
    for (int64_t e = 0; e < QK; e++) mag += fabs((double)w[e] * x[e]);
    for (int64_t sb = 0; superblock && sb < QK / 256; sb++) {
        double amax = 0, wsum = 0;
        for (int64_t e = sb * 256; e < sb * 256 + 256; e++) {
            amax = fmax(amax, fabs(x[e]));
            wsum += fabs(w[e]);
        }
        rounding += wsum * amax / 127;
    }
    return 1e-6 * (QK / 32) * mag + rounding;
}

static void quantized_matmuls_agree_bit_for_bit_across_thread_counts_at_every_level(void) {
    static qcase c;
    static const int64_t ns[] = {80, 88}, ms[] = {1, 21}; /* 21: one AMX tile of 16 columns and 5 more */
    static const kiln_type types[] = {KILN_TYPE_Q8_0, KILN_TYPE_Q4_0, KILN_TYPE_Q4_K, KILN_TYPE_Q6_K};
    for (int t = 0; t < 4; t++)
        for (int in = 0; in < 2; in++)
            for (int im = 0; im < 2; im++) {
                uint64_t st = 99 + (uint64_t)(t * 4 + in * 2 + im);
                size_t rb, bb;
                c.type = types[t];
                c.n = ns[in];
                c.m = ms[im];
                kiln_type_row_bytes(c.type, QK, &rb);
                bb = kiln__type_traits(c.type)->block_bytes;
                for (size_t i = 0; i < rb * (size_t)c.n; i++) c.w[i] = (unsigned char)(test_rand(&st) * 127.5f + 128);
                for (size_t b = 0; b < rb * (size_t)c.n / bb; b++) {
                    uint16_t d = kiln_fp32_to_fp16(0.002f + 0.02f * fabsf(test_rand(&st)));
                    /* sane super-block scales: Q6_K keeps d last; Q4_K has d and dmin first */
                    memcpy(c.w + b * bb + (c.type == KILN_TYPE_Q6_K ? bb - 2 : 0), &d, 2);
                    if (c.type == KILN_TYPE_Q4_K) memcpy(c.w + b * bb + 2, &d, 2);
                }
                fill_random(c.x, QK * 21, st);
                kiln__cpu_force_level(KILN_CPU_REF);
                float *ref = run_q(&c, 1);
                for (int l = KILN_CPU_REF; ref && l < KILN_CPU_LEVEL_COUNT; l++) {
                    if (!kiln__cpu_level_supported((kiln_cpu_level)l)) continue;
                    kiln__cpu_force_level((kiln_cpu_level)l);
                    float *one = run_q(&c, 1), *two = run_q(&c, 2);
                    bool sb = kiln__cpu_isa_for((kiln_cpu_level)l)->q8_superblock[c.type] !=
                              kiln__cpu_isa_for(KILN_CPU_REF)->q8_superblock[c.type];
                    if (one && two) {
                        CHECK(memcmp(one, two, (size_t)(c.n * c.m) * sizeof(float)) == 0);
                        for (int64_t i = 0; i < c.n * c.m; i++)
                            CHECK_NEAR(one[i], ref[i], tolerance(&c, i, sb));
                    }
                    free(one);
                    free(two);
                }
                free(ref);
            }
    kiln__cpu_force_level(kiln__cpu_max_level());
}

static void unknown_and_unsupported_levels_are_refused_or_clamped(void) {
    kiln_cpu_level l = KILN_CPU_REF;
    CHECK(kiln__cpu_level_parse("avx512", &l) && l == KILN_CPU_AVX512);
    CHECK(kiln__cpu_level_parse("neon", &l) && l == KILN_CPU_NEON);
    CHECK(!kiln__cpu_level_parse("sse9", &l));
    CHECK_EQ_INT(kiln__cpu_force_level(KILN_CPU_LEVEL_COUNT), kiln__cpu_max_level());
    CHECK(kiln__cpu_isa_for(KILN_CPU_LEVEL_COUNT) == NULL);
    CHECK(kiln__cpu_isa_for(KILN_CPU_REF)->level == KILN_CPU_REF);
    CHECK(kiln__cpu_level_supported(KILN_CPU_REF) && kiln__cpu_level_supported(kiln__cpu_max_level()));
    CHECK(!kiln__cpu_level_supported(KILN_CPU_LEVEL_COUNT));
    kiln__cpu_force_level(kiln__cpu_max_level());
}

/* The architectures' chains are disjoint: an x86-64 build never offers neon and an aarch64 build never
 * offers the x86 levels. Forcing a level the CPU lacks lands on the first supported level down its chain,
 * and only supported levels have a dispatch table. */
static void levels_of_another_architecture_are_unsupported_and_fall_back_down_their_chain(void) {
#if defined(__x86_64__)
    CHECK(!kiln__cpu_level_supported(KILN_CPU_NEON));
#elif defined(__aarch64__)
    CHECK(!kiln__cpu_level_supported(KILN_CPU_AVX2) && !kiln__cpu_level_supported(KILN_CPU_AVX512) &&
          !kiln__cpu_level_supported(KILN_CPU_AMX));
#endif
    CHECK_EQ_INT(kiln__cpu_level_base(KILN_CPU_NEON), KILN_CPU_REF);
    CHECK_EQ_INT(kiln__cpu_level_base(KILN_CPU_AMX), KILN_CPU_AVX512);
    for (int l = KILN_CPU_REF; l < KILN_CPU_LEVEL_COUNT; l++) {
        kiln_cpu_level want = (kiln_cpu_level)l;
        while (!kiln__cpu_level_supported(want)) want = kiln__cpu_level_base(want);
        CHECK_EQ_INT(kiln__cpu_force_level((kiln_cpu_level)l), want);
        CHECK_EQ_INT(kiln__cpu_level(), want);
        CHECK((kiln__cpu_isa_for((kiln_cpu_level)l) != NULL) == kiln__cpu_level_supported((kiln_cpu_level)l));
    }
    kiln__cpu_force_level(kiln__cpu_max_level());
}

int main(void) {
    RUN(unknown_and_unsupported_levels_are_refused_or_clamped);
    RUN(levels_of_another_architecture_are_unsupported_and_fall_back_down_their_chain);
    RUN(quantized_matmuls_agree_bit_for_bit_across_thread_counts_at_every_level);
    RUN(goldens_are_exact_at_every_level_with_one_and_two_threads);
    return harness_finish();
}
