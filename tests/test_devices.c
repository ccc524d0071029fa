/*
 * test_devices.c - the scheduler through the public API: a model whose device list puts a restricted CPU
 * backend (its own buffers, declared not host, running only some ops) before the CPU splits every graph
 * between the two, with copies through the buffer verbs, and must compute exactly what the CPU alone
 * computes: same kernels, same thread count, so the logits are compared bit for bit. The cost rule
 * (NAME@N) keeps small batches on the CPU.
 */
#include "harness.h"

#include <stdlib.h>
#include <string.h>

#define RESTRICTED "cpu-restricted:linear+matmul+rms_norm_mul+swiglu+add"

static kiln_model *load(const char *devices) {
    kiln_model_params mp = kiln_model_params_default();
    kiln_model *m = NULL;
    mp.n_threads = 2;
    mp.devices = devices;
    CHECK_OK(kiln_model_load_ex(KILN_MODEL_PATH, &mp, &m));
    return m;
}

/* Two sequences: a prompt of 6 for sequence 0 and of 3 for sequence 1 in one batch, then 4 steps that
 * decode one token of each in one batch. Every step's logits rows go to out (n_vocab floats each). */
static int run(kiln_model *m, float *out) {
    static const int32_t p0[6] = {1, 403, 407, 261, 378, 432}, p1[3] = {1, 286, 261};
    kiln_ctx_params cp = harness_ctx_params();
    kiln_ctx *c = NULL;
    kiln_batch b;
    int32_t V = kiln_model_n_vocab(m), rows = 0, next[2] = {5, 9};
    cp.n_seq_max = 2;
    cp.n_ctx = 64;
    CHECK_OK(kiln_ctx_create(m, &cp, &c));
    CHECK_OK(kiln_batch_init(16, &b));
    if (!c || !b.token) return 0;
    for (int i = 0; i < 6; i++)
        kiln_batch_add(&b, p0[i], i, 0, i == 5);
    for (int i = 0; i < 3; i++)
        kiln_batch_add(&b, p1[i], i, 1, i == 2);
    for (int step = 0; step < 5; step++) {
        CHECK_OK(kiln_ctx_decode_batch(c, &b));
        for (int s = 0; s < 2; s++) {
            const float *l = kiln_ctx_logits(c, s - 2);
            CHECK(l != NULL);
            if (l) memcpy(out + (size_t)rows++ * (size_t)V, l, (size_t)V * sizeof(float));
        }
        kiln_batch_clear(&b);
        for (int s = 0; s < 2; s++)
            kiln_batch_add(&b, next[s] + step, kiln_kv_seq_pos_max(c, s) + 1, s, true);
    }
    kiln_batch_free(&b);
    kiln_ctx_destroy(c);
    return rows;
}

static void a_graph_split_over_a_restricted_backend_computes_the_same_bits(void) {
    kiln_model *cpu = load(NULL), *split = load(RESTRICTED ",cpu");
    if (!cpu || !split) goto done;
    size_t V = (size_t)kiln_model_n_vocab(cpu);
    float *a = calloc(10 * V, sizeof *a), *b = calloc(10 * V, sizeof *b);
    int na = run(cpu, a), nb = run(split, b);
    CHECK_EQ_INT(na, 10);
    CHECK_EQ_INT(nb, 10);
    CHECK(memcmp(a, b, 10 * V * sizeof *a) == 0);
    free(a);
    free(b);
done:
    kiln_model_destroy(cpu);
    kiln_model_destroy(split);
}

static void plan_info_reports_the_splits_and_copies(void) {
    kiln_model *m = load(RESTRICTED ",cpu");
    kiln_ctx *c = NULL;
    kiln_plan_info info;
    kiln_ctx_params cp = harness_ctx_params();
    if (!m) return;
    CHECK_OK(kiln_ctx_create(m, &cp, &c));
    CHECK_OK(kiln_ctx_plan_info(c, 8, 1, &info));
    printf("restricted + cpu, 8 tokens: %d splits, %d copies\n", info.n_splits, info.n_copies);
    CHECK(info.n_splits > 2); /* attention stays on the CPU in every layer, between offloaded work */
    CHECK(info.n_copies > 0);
    kiln_ctx_destroy(c);
    kiln_model_destroy(m);
}

/* "@8": the restricted backend takes nodes of batches of 8 tokens or more; smaller ones stay whole. */
static void the_cost_rule_keeps_small_batches_on_the_cpu(void) {
    kiln_model *m = load(RESTRICTED "@8");
    kiln_ctx *c = NULL;
    kiln_plan_info info;
    kiln_ctx_params cp = harness_ctx_params();
    if (!m) return;
    CHECK_OK(kiln_ctx_create(m, &cp, &c));
    CHECK_OK(kiln_ctx_plan_info(c, 1, 1, &info));
    CHECK_EQ_INT(info.n_splits, 1);
    CHECK_EQ_INT(info.n_copies, 0);
    CHECK_OK(kiln_ctx_plan_info(c, 8, 1, &info));
    CHECK(info.n_splits > 1);
    kiln_ctx_destroy(c);
    kiln_model_destroy(m);
}

static int n_lines, n_split_lines;
static void count_line(void *user, const char *line) {
    (void)user;
    n_lines++;
    n_split_lines += strstr(line, "split") != NULL;
}

static void the_log_says_what_was_compiled_and_how_it_was_split(void) {
    kiln_model *m = load(RESTRICTED ",cpu");
    kiln_ctx *c = NULL;
    kiln_plan_info info;
    kiln_ctx_params cp = harness_ctx_params();
    if (!m) return;
    cp.log = count_line;
    CHECK_OK(kiln_ctx_create(m, &cp, &c));
    CHECK_OK(kiln_ctx_plan_info(c, 4, 1, &info));
    CHECK(n_lines > 1);
    CHECK(n_split_lines > 0);
    kiln_ctx_destroy(c);
    kiln_model_destroy(m);
}

static void bad_device_lists_are_refused_with_named_errors(void) {
    static const struct {
        const char *devices, *mentions;
    } cases[] = {
        {"gpu9", "gpu9"},
        {"cpu,cpu", "listed twice"},
        {"cpu," RESTRICTED, "the CPU is the last"},
        {RESTRICTED "@x", "batch threshold"},
        {"cpu-restricted:nosuchop", "nosuchop"},
        {",cpu", "empty entry"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kiln_model_params mp = kiln_model_params_default();
        kiln_model *m = NULL;
        mp.devices = cases[i].devices;
        kiln_status st = kiln_model_load_ex(KILN_MODEL_PATH, &mp, &m);
        CHECK(st == KILN_E_INVALID_ARG || st == KILN_E_NOT_FOUND);
        CHECK(m == NULL);
        CHECK_ERROR_MENTIONS(cases[i].mentions);
    }
}

int main(void) {
    RUN(a_graph_split_over_a_restricted_backend_computes_the_same_bits);
    RUN(plan_info_reports_the_splits_and_copies);
    RUN(the_cost_rule_keeps_small_batches_on_the_cpu);
    RUN(the_log_says_what_was_compiled_and_how_it_was_split);
    RUN(bad_device_lists_are_refused_with_named_errors);
    return harness_finish();
}
