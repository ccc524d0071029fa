/*
 * test_program.c - the compiled program (src/runtime/program.h) with a client that is not a language model:
 * an engine made on its own, and a two-layer perceptron y = W2 relu(W1 x + b1) + b2 over a batch whose
 * size is the program's key. The program computes it at every batch size (against a double-precision
 * reference computed here), hands out its outputs in the builder's order, keeps one plan per key and
 * reuses it (a warmed-up run allocates nothing), replaces the least recently used plan when its cache is
 * full, keeps its plans when a build fails, and refuses a malformed definition by name.
 *
 * Tolerance: every output is a float sum of at most 32 products of values below 1 in magnitude, computed
 * in any order; each float operation is exact to 2^-24 relative, so the error is below
 * (K + 2) * 2^-24 * sum |terms| per layer; with the hidden layer's error carried through W2, 1e-5 of the
 * sum of |terms| bounds both layers with room.
 */
#include "harness.h"

#include "core/core.h"
#include "runtime/engine.h"
#include "runtime/program.h"

#include <math.h>
#include <string.h>

enum { K = 16, H = 32, M = 8, MAX_N = 8 };

typedef struct mlp {
    float w1[H * K], b1[H], w2[M * H], b2[M];
    int builds;       /* builder calls so far */
    int64_t fail_key; /* the builder fails for this key (0: never) */
} mlp;

static const char *const INPUTS[] = {"x"};

static int32_t mlp_capacity(void *user, const int64_t *key) {
    (void)user;
    (void)key;
    return 64;
}

/* x [K, N] -> h = relu(W1 x + b1) [H, N], y = W2 h + b2 [M, N]; outputs y then h. */
static kiln_status mlp_build(void *user, kiln_graph *g, const int64_t *key) {
    mlp *m = user;
    int64_t ne_x[2] = {K, key[0]}, ne_w1[2] = {K, H}, ne_w2[2] = {H, M}, ne_b1[1] = {H}, ne_b2[1] = {M};
    m->builds++;
    if (key[0] == m->fail_key)
        return kiln__error(KILN_E_UNSUPPORTED, "this test's builder refuses batch %lld", (long long)key[0]);
    kiln_tensor *x = kiln__graph_leaf(g, "x", KILN_TYPE_F32, 2, ne_x, NULL, KILN_TENSOR_INPUT);
    kiln_tensor *w1 = kiln__graph_leaf(g, "w1", KILN_TYPE_F32, 2, ne_w1, m->w1, KILN_TENSOR_WEIGHT);
    kiln_tensor *b1 = kiln__graph_leaf(g, "b1", KILN_TYPE_F32, 1, ne_b1, m->b1, KILN_TENSOR_WEIGHT);
    kiln_tensor *w2 = kiln__graph_leaf(g, "w2", KILN_TYPE_F32, 2, ne_w2, m->w2, KILN_TENSOR_WEIGHT);
    kiln_tensor *b2 = kiln__graph_leaf(g, "b2", KILN_TYPE_F32, 1, ne_b2, m->b2, KILN_TENSOR_WEIGHT);
    kiln_tensor *h = kiln__relu(g, kiln__add(g, kiln__matmul(g, w1, x), b1));
    kiln_tensor *y = kiln__add(g, kiln__matmul(g, w2, h), b2);
    kiln__graph_set_output(g, y);
    kiln__graph_set_output(g, h);
    return KILN_OK;
}

static float uniform(uint32_t *state) { /* in [-1, 1) */
    *state = *state * 1664525u + 1013904223u;
    return (float)(*state >> 8) / (float)(1u << 23) - 1.0f;
}

static void mlp_init(mlp *m) {
    uint32_t st = 7;
    memset(m, 0, sizeof *m);
    for (int i = 0; i < H * K; i++)
        m->w1[i] = uniform(&st) / 4;
    for (int i = 0; i < H; i++)
        m->b1[i] = uniform(&st) / 4;
    for (int i = 0; i < M * H; i++)
        m->w2[i] = uniform(&st) / 8;
    for (int i = 0; i < M; i++)
        m->b2[i] = uniform(&st) / 4;
}

static kiln_program_def mlp_def(mlp *m, int32_t n_plans) {
    kiln_program_def d;
    memset(&d, 0, sizeof d);
    d.name = "mlp";
    d.n_inputs = 1;
    d.inputs = INPUTS;
    d.n_key = 1;
    d.n_plans = n_plans;
    d.capacity = mlp_capacity;
    d.build = mlp_build;
    d.user = m;
    CHECK_OK(kiln__passes_parse("all", &d.passes));
    return d;
}

static kiln_engine *engine_alone(void) {
    kiln_model_params p = kiln_model_params_default();
    kiln_engine *e = NULL;
    p.n_threads = 2;
    CHECK_OK(kiln__engine_create(&p, NULL, NULL, 0, &e));
    return e;
}

/* Run the program for a batch of n columns of x and check y and h against the double reference. */
static void run_and_check(kiln_program *p, const mlp *m, int32_t n, uint32_t seed) {
    float x[K * MAX_N];
    int64_t key[1] = {n};
    kiln_program_plan *plan = NULL;
    for (int i = 0; i < K * n; i++)
        x[i] = uniform(&seed);
    CHECK_OK(kiln__program_plan(p, key, &plan));
    if (!plan) return;
    kiln__program_bind(plan, 0, x);
    CHECK_OK(kiln__program_run(p, plan));
    const float *y = kiln__program_output(plan, 0)->data, *h = kiln__program_output(plan, 1)->data;
    CHECK(kiln__program_output(plan, 0)->ne[0] == M && kiln__program_output(plan, 0)->ne[1] == n);
    CHECK(kiln__program_output(plan, 1)->ne[0] == H && kiln__program_output(plan, 1)->ne[1] == n);
    double worst = 0;
    for (int32_t c = 0; c < n; c++) {
        double href[H], habs[H];
        for (int r = 0; r < H; r++) {
            double s = m->b1[r], a = fabs(m->b1[r]);
            for (int k = 0; k < K; k++) {
                s += (double)m->w1[r * K + k] * x[c * K + k];
                a += fabs((double)m->w1[r * K + k] * x[c * K + k]);
            }
            href[r] = s > 0 ? s : 0;
            habs[r] = a;
            worst = fmax(worst, fabs(h[c * H + r] - href[r]) / (a + 1e-30));
        }
        for (int r = 0; r < M; r++) {
            double s = m->b2[r], a = fabs(m->b2[r]);
            for (int k = 0; k < H; k++) {
                s += (double)m->w2[r * H + k] * href[k];
                a += fabs((double)m->w2[r * H + k]) * (href[k] + habs[k] * 1e-6);
            }
            worst = fmax(worst, fabs(y[c * M + r] - s) / (a + 1e-30));
        }
    }
    if (!(worst <= 1e-5))
        harness_fail(__FILE__, __LINE__, "batch %d: worst error %.3g of the sum of |terms| (tolerance 1e-5)",
                     n, worst);
}

/* The fixture every test starts from: an MLP, an engine of its own and a program over them (NULL after a
 * failed check: the test then returns). */
typedef struct fixture {
    mlp m;
    kiln_engine *e;
    kiln_program *p;
} fixture;

static bool start(fixture *f, int32_t n_plans, int64_t fail_key) {
    mlp_init(&f->m);
    f->m.fail_key = fail_key;
    f->p = NULL;
    f->e = engine_alone();
    kiln_program_def d = mlp_def(&f->m, n_plans);
    if (f->e) CHECK_OK(kiln__program_create(f->e, &d, &f->p));
    return f->p != NULL;
}

static void finish(fixture *f) {
    kiln__program_destroy(f->p);
    kiln__engine_destroy(f->e);
}

static void a_program_on_an_engine_of_its_own_computes_an_mlp_at_every_batch_size(void) {
    fixture f;
    if (!start(&f, 0, 0)) {
        finish(&f);
        return;
    }
    for (int32_t n = 1; n <= MAX_N; n++)
        run_and_check(f.p, &f.m, n, 100u + (uint32_t)n);
    CHECK(f.m.builds == MAX_N);
    finish(&f);
}

static void plans_are_kept_per_key_and_a_warmed_up_run_allocates_nothing(void) {
    fixture f;
    if (!start(&f, 0, 0)) {
        finish(&f);
        return;
    }
    kiln_program *p = f.p;
    mlp *m = &f.m;
    run_and_check(p, m, 3, 1);
    run_and_check(p, m, 8, 2);
    CHECK(m->builds == 2);
    harness_count_allocations();
    harness_zero_allocations();
    for (int i = 0; i < 4; i++)
        run_and_check(p, m, i % 2 ? 3 : 8, 3u + (uint32_t)i);
    if (!(harness_allocations() == 0))
        harness_fail(__FILE__, __LINE__, "%ld allocations in warmed-up runs", harness_allocations());
    kiln_set_allocator(NULL);
    CHECK(m->builds == 2 && kiln__program_compiles(p) == 2);
    CHECK(kiln__program_last(p) != NULL && kiln__program_last(p)->key[0] == 3);
    finish(&f);
}

static void a_full_cache_replaces_its_least_recently_used_plan(void) {
    fixture f;
    if (!start(&f, 2, 0)) {
        finish(&f);
        return;
    }
    kiln_program *p = f.p;
    mlp *m = &f.m;
    run_and_check(p, m, 1, 1); /* builds 1 */
    run_and_check(p, m, 2, 2); /* builds 2 */
    run_and_check(p, m, 1, 3); /* cached; 2 is now the older */
    run_and_check(p, m, 4, 4); /* builds 3, replacing 2 */
    CHECK(m->builds == 3);
    run_and_check(p, m, 1, 5); /* still cached */
    CHECK(m->builds == 3);
    run_and_check(p, m, 2, 6); /* was replaced: built again */
    CHECK(m->builds == 4);
    finish(&f);
}

static void a_failing_build_is_a_named_error_and_keeps_the_cached_plans(void) {
    fixture f;
    kiln_program_plan *plan = NULL;
    if (!start(&f, 1, 5)) {
        finish(&f);
        return;
    }
    run_and_check(f.p, &f.m, 2, 1);
    CHECK_STATUS(kiln__program_plan(f.p, (const int64_t[1]){5}, &plan), KILN_E_UNSUPPORTED);
    CHECK_ERROR_MENTIONS("refuses batch 5");
    CHECK(f.m.builds == 2);
    run_and_check(f.p, &f.m, 2, 2); /* the one slot still holds batch 2's plan */
    CHECK(f.m.builds == 2);
    finish(&f);
}

static void malformed_definitions_and_engines_are_refused_by_name(void) {
    mlp m;
    kiln_engine *e = engine_alone();
    kiln_program *p = NULL;
    kiln_model_params mp = kiln_model_params_default();
    kiln_engine *e2 = NULL;
    const char *const unnamed[] = {""};
    mlp_init(&m);
    if (!e) return;
    kiln_program_def d = mlp_def(&m, 0);
    d.n_key = 0;
    CHECK_STATUS(kiln__program_create(e, &d, &p), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("key");
    d = mlp_def(&m, 0);
    d.n_inputs = KILN_PROGRAM_MAX_INPUTS + 1;
    CHECK_STATUS(kiln__program_create(e, &d, &p), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("named inputs");
    d = mlp_def(&m, 0);
    d.inputs = unnamed;
    CHECK_STATUS(kiln__program_create(e, &d, &p), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("no name");
    d = mlp_def(&m, 0);
    d.build = NULL;
    CHECK_STATUS(kiln__program_create(e, &d, &p), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("builder");
    CHECK(p == NULL);
    /* An engine without a model's layers cannot split them. */
    mp.devices = "cpu-restricted:matmul,cpu";
    mp.gpu_layers = 2;
    CHECK_STATUS(kiln__engine_create(&mp, NULL, NULL, 0, &e2), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("model's layers");
    CHECK(e2 == NULL);
    kiln__engine_destroy(e);
}

int main(void) {
    RUN(a_program_on_an_engine_of_its_own_computes_an_mlp_at_every_batch_size);
    RUN(plans_are_kept_per_key_and_a_warmed_up_run_allocates_nothing);
    RUN(a_full_cache_replaces_its_least_recently_used_plan);
    RUN(a_failing_build_is_a_named_error_and_keeps_the_cached_plans);
    RUN(malformed_definitions_and_engines_are_refused_by_name);
    return harness_finish();
}
