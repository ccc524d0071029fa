/*
 * test_sched.c - the scheduler and the buffer verbs it relies on. Graphs built by hand (a matmul -> add
 * -> rms_norm -> mul -> softmax chain, views that cross backends, a cache write) and a few hundred random
 * DAGs run on [cpu] and on lists that put a cpu-restricted backend (a real CPU instance that accepts only
 * some ops and whose buffers are declared not host) before the CPU. Every run must give outputs
 * bit-identical to today's single-backend path (kiln__backend_compute on one CPU backend: the same
 * kernels on the same thread count), with the split and copy counts that the assignment rules imply, an
 * arena plan that passes the planner's verifier per backend, and no allocation in compute.
 */
#include "harness.h"
#include "graph_run.h"

#include "runtime/context.h"
#include "runtime/sched.h"

#include "core/core.h"

#include <stdlib.h>

#define N_THREADS 2
#define K 32 /* matmul inner size */
#define N 48 /* matmul rows: the chain's width */
#define T 5  /* tokens */

static float x_data[K * T], w_data[K * N], bias_data[N], gamma_data[N], cache_data[N * 8];
static int32_t cells_data[T] = {2, 3, 4, 5, 6};
static float *cache_at = cache_data; /* where build_cache's cache lives: host memory, or a holder's buffer */

static void fill_inputs(void) {
    fill_random(x_data, K * T, 1);
    fill_random(w_data, K * N, 2);
    fill_random(bias_data, N, 3);
    fill_random(gamma_data, N, 4);
}

static kiln_tensor *leaf(kiln_graph *g, const char *name, int64_t ne0, int64_t ne1, float *data,
                         uint32_t flags) {
    int64_t ne[2] = {ne0, ne1};
    return kiln__graph_leaf(g, name, KILN_TYPE_F32, ne1 > 1 ? 2 : 1, ne, data, flags);
}

/* ---- The graphs ---- */

/* softmax(rms_norm(W x + bias) * gamma): [N, T]. */
static void build_chain(kiln_graph *g) {
    kiln_tensor *x = leaf(g, "x", K, T, x_data, KILN_TENSOR_INPUT);
    kiln_tensor *w = leaf(g, "w", K, N, w_data, KILN_TENSOR_WEIGHT);
    kiln_tensor *bias = leaf(g, "bias", N, 1, bias_data, KILN_TENSOR_WEIGHT);
    kiln_tensor *gamma = leaf(g, "gamma", N, 1, gamma_data, KILN_TENSOR_WEIGHT);
    kiln_tensor *a = kiln__tensor_set_name(kiln__add(g, kiln__matmul(g, w, x), bias), "a");
    kiln_tensor *m = kiln__mul(g, kiln__rms_norm(g, a, 1e-5f), gamma);
    kiln__graph_set_output(g, kiln__tensor_set_name(kiln__softmax(g, m, 0.5f), "out"));
}

/* Views crossing backends: a permuted reshape of the matmul made contiguous, a strided view of the sum
 * read by a scale, a reshaped input normalized; two outputs (one a view). */
static void build_views(kiln_graph *g) {
    kiln_tensor *x = leaf(g, "x", K, T, x_data, KILN_TENSOR_INPUT);
    kiln_tensor *x2 = leaf(g, "x2", K * T, 1, x_data, KILN_TENSOR_INPUT);
    kiln_tensor *w = leaf(g, "w", K, N, w_data, KILN_TENSOR_WEIGHT);
    kiln_tensor *bias = leaf(g, "bias", N, 1, bias_data, KILN_TENSOR_WEIGHT);
    kiln_tensor *mm = kiln__matmul(g, w, x);                                          /* [N, T] */
    kiln_tensor *p = kiln__permute(g, kiln__reshape_3d(g, mm, 16, 3, T), 1, 0, 2, 3); /* [3, 16, T] */
    kiln_tensor *a = kiln__add(g, kiln__reshape_2d(g, kiln__cont(g, p), N, T), bias); /* [N, T] */
    size_t nb[4] = {sizeof(float), a ? a->nb[1] : 0, 0, 0};
    int64_t half[2] = {N / 2, T};
    kiln_tensor *v = kiln__view(g, a, 2, half, nb, N / 2 * sizeof(float)); /* [N/2, T] right half */
    kiln_tensor *s = kiln__scale(g, kiln__rms_norm(g, v, 1e-5f), 2.0f, 0.5f);
    kiln_tensor *n = kiln__rms_norm(g, kiln__reshape_2d(g, x2, K, T), 1e-6f); /* [K, T] */
    kiln_tensor *o = kiln__add(g, kiln__mul(g, n, n), kiln__reshape_2d(g, x, K, T));
    kiln__graph_set_output(g, kiln__tensor_set_name(s, "scaled"));
    kiln__graph_set_output(g, kiln__tensor_set_name(kiln__reshape_2d(g, o, K * T, 1), "flat"));
}

/* The matmul's rows written into a cache; a sum that reads the cache must stay with it, on the CPU. */
static void build_cache(kiln_graph *g) {
    kiln_tensor *x = leaf(g, "x", K, T, x_data, KILN_TENSOR_INPUT);
    kiln_tensor *w = leaf(g, "w", K, N, w_data, KILN_TENSOR_WEIGHT);
    kiln_tensor *bias = leaf(g, "bias", N, 1, bias_data, KILN_TENSOR_WEIGHT);
    kiln_tensor *cache = leaf(g, "cache", N, 8, cache_at, KILN_TENSOR_CACHE);
    int64_t ne_cells[1] = {T};
    kiln_tensor *cells = kiln__graph_leaf(g, "cells", KILN_TYPE_I32, 1, ne_cells, cells_data, KILN_TENSOR_INPUT);
    kiln_tensor *cw = kiln__cache_write(g, cache, kiln__matmul(g, w, x), cells);
    kiln__graph_set_output(g, kiln__tensor_set_name(kiln__add(g, cw, bias), "from_cache"));
}

typedef void (*graph_builder)(kiln_graph *g);

/* ---- Running ---- */

typedef struct run_result {
    float *out[4]; /* malloc'd copies of the outputs */
    size_t bytes[4];
    int n_out;
    int n_splits, n_copies;
    size_t copy_bytes, arena_bytes[3];
    int split_backend[8];
    char describe[4096];
} run_result;

static void append_line(void *user, const char *line) {
    run_result *r = user;
    size_t n = strlen(r->describe);
    snprintf(r->describe + n, sizeof r->describe - n, "%s\n", line);
}

static void keep_outputs(run_result *r, int n_out, kiln_tensor *(*get)(const void *, int32_t),
                         const void *from) {
    r->n_out = n_out;
    for (int i = 0; i < n_out && i < 4; i++) {
        const kiln_tensor *t = get(from, i);
        r->bytes[i] = kiln__tensor_nbytes(t);
        r->out[i] = malloc(r->bytes[i]);
        for (int64_t row = 0; row < kiln__tensor_nrows(t); row++) { /* outputs may be strided views */
            int64_t i1 = row % t->ne[1], i2 = row / t->ne[1] % t->ne[2], i3 = row / t->ne[1] / t->ne[2];
            size_t at = (size_t)i1 * t->nb[1] + (size_t)i2 * t->nb[2] + (size_t)i3 * t->nb[3];
            memcpy((char *)r->out[i] + (size_t)row * (size_t)t->ne[0] * sizeof(float),
                   (const char *)t->data + at, (size_t)t->ne[0] * sizeof(float));
        }
    }
}

static kiln_tensor *graph_output(const void *g, int32_t i) { return kiln__graph_output(g, i); }
static kiln_tensor *plan_output(const void *p, int32_t i) { return kiln__sched_plan_output(p, i); }

static void free_result(run_result *r) {
    for (int i = 0; i < r->n_out && i < 4; i++) free(r->out[i]);
}

/* Today's path: one CPU backend computes the whole planned graph. */
static void run_reference(kiln_backend *cpu, graph_builder build, run_result *r) {
    kiln_graph *g;
    size_t size = 0;
    memset(r, 0, sizeof *r);
    CHECK_OK(kiln__graph_create(256, &g));
    build(g);
    CHECK_OK(kiln__graph_order(g));
    CHECK_OK(kiln__plan_measure(g, &size, NULL));
    void *arena = malloc(size ? size : 1);
    CHECK_OK(kiln__plan_commit(g, arena, size));
    CHECK_OK(kiln__backend_compute(cpu, g));
    keep_outputs(r, kiln__graph_n_outputs(g), graph_output, g);
    free(arena);
    kiln__graph_destroy(g);
}

/* Plan g on the list, allocate the arenas, commit, compute `runs` times (the last with counting on when
 * allocs is not NULL). */
static void run_planned(kiln_graph *g, const kiln_sched_backend *list, int n, int32_t n_tokens, run_result *r,
                        long *allocs);

static void run_sched(const kiln_sched_backend *list, int n, int32_t n_tokens, graph_builder build,
                      run_result *r) {
    kiln_graph *g;
    memset(r, 0, sizeof *r);
    CHECK_OK(kiln__graph_create(256, &g));
    build(g);
    CHECK_OK(kiln__graph_order(g));
    run_planned(g, list, n, n_tokens, r, NULL);
    kiln__graph_destroy(g);
}

static void run_planned(kiln_graph *g, const kiln_sched_backend *list, int n, int32_t n_tokens, run_result *r,
                        long *allocs) {
    kiln_sched *s = NULL;
    kiln_sched_plan *p = NULL;
    kiln_buffer arenas[3] = {{0}};
    CHECK_OK(kiln__sched_create(list, n, &s));
    CHECK_OK(kiln__sched_plan_create(s, g, n_tokens, &p));
    if (!p) {
        kiln__sched_destroy(s);
        return;
    }
    CHECK_OK(kiln__sched_plan_verify(p));
    CHECK_OK(kiln__graph_validate(g)); /* the rewritten graph is still a valid graph */
    for (int b = 0; b < n; b++) {
        r->arena_bytes[b] = kiln__sched_plan_arena_bytes(p, b);
        if (r->arena_bytes[b])
            CHECK_OK(kiln__backend_buffer_alloc(list[b].backend, r->arena_bytes[b], &arenas[b]));
    }
    CHECK_OK(kiln__sched_plan_commit(p, arenas));
    CHECK_OK(kiln__sched_compute(p));
    if (allocs) {
        harness_count_allocations();
        harness_zero_allocations();
        for (int i = 0; i < 5; i++) CHECK_OK(kiln__sched_compute(p));
        *allocs = harness_allocations();
        kiln_set_allocator(NULL);
    }
    keep_outputs(r, kiln__graph_n_outputs(g), plan_output, p);
    r->n_splits = kiln__sched_plan_n_splits(p);
    r->n_copies = kiln__sched_plan_n_copies(p);
    r->copy_bytes = kiln__sched_plan_copy_bytes(p);
    for (int i = 0; i < r->n_splits && i < 8; i++) r->split_backend[i] = kiln__sched_plan_split_backend(p, i);
    kiln__sched_plan_describe(p, append_line, r);
    kiln__sched_plan_destroy(p);
    kiln__sched_destroy(s);
    for (int b = 0; b < n; b++) kiln__backend_buffer_free(list[b].backend, &arenas[b]);
}

static void check_same(const run_result *ref, const run_result *got, const char *what) {
    CHECK_EQ_INT(got->n_out, ref->n_out);
    for (int i = 0; i < ref->n_out && i < got->n_out && i < 4; i++)
        if (got->bytes[i] != ref->bytes[i] || memcmp(got->out[i], ref->out[i], ref->bytes[i]) != 0)
            harness_fail(__FILE__, __LINE__, "%s: output %d differs from the single-backend run", what, i);
}

/* ---- Fixtures: the CPU and two restricted instances ---- */

static kiln_backend *cpu, *mm_add, *norm_mul_softmax;

static void create_backends(void) {
    static const kiln_op ops1[] = {KILN_OP_MATMUL, KILN_OP_ADD};
    static const kiln_op ops2[] = {KILN_OP_RMS_NORM, KILN_OP_MUL, KILN_OP_SOFTMAX};
    CHECK_OK(kiln__backend_cpu_create(N_THREADS, &cpu));
    CHECK_OK(kiln__backend_cpu_restricted_create(N_THREADS, ops1, 2, &mm_add));
    CHECK_OK(kiln__backend_cpu_restricted_create(N_THREADS, ops2, 3, &norm_mul_softmax));
}

static void destroy_backends(void) {
    kiln__backend_destroy(cpu);
    kiln__backend_destroy(mm_add);
    kiln__backend_destroy(norm_mul_softmax);
}

/* ---- Specifications ---- */

static void the_cpu_alone_is_one_split_without_copies_and_matches_todays_path(void) {
    kiln_sched_backend list[] = {{cpu, 0}};
    run_result ref, got;
    run_reference(cpu, build_chain, &ref);
    run_sched(list, 1, T, build_chain, &got);
    check_same(&ref, &got, "[cpu]");
    CHECK_EQ_INT(got.n_splits, 1);
    CHECK_EQ_INT(got.n_copies, 0);
    CHECK(strstr(got.describe, "schedule: 1 splits, 0 copies (0 bytes)") != NULL);
    CHECK(strstr(got.describe, "split 0: cpu, nodes [0, 5): 5 nodes, 0 copies in") != NULL);
    free_result(&ref);
    free_result(&got);
}

static void matmul_and_add_offloaded_copy_the_input_in_and_the_sum_out(void) {
    kiln_sched_backend list[] = {{mm_add, 0}, {cpu, 0}};
    run_result ref, got;
    run_reference(cpu, build_chain, &ref);
    run_sched(list, 2, T, build_chain, &got);
    check_same(&ref, &got, "[cpu-restricted{matmul, add}, cpu]");
    /* matmul, add | rms_norm, mul, softmax: x goes in (the weights are read in place), a comes out. */
    CHECK_EQ_INT(got.n_splits, 2);
    CHECK_EQ_INT(got.split_backend[0], 0);
    CHECK_EQ_INT(got.split_backend[1], 1);
    CHECK_EQ_INT(got.n_copies, 2);
    CHECK_EQ_INT(got.copy_bytes, (K + N) * T * sizeof(float));
    CHECK(strstr(got.describe, "split 0: cpu-restricted, nodes [0, 2): 2 nodes, 1 copies in; ops: matmul add\n") !=
          NULL);
    CHECK(strstr(got.describe, "nodes [2, 5): 3 nodes, 1 copies in; ops: rms_norm mul softmax\n") != NULL);
    CHECK(strstr(got.describe, "  copy 'x' host -> cpu-restricted: 640 bytes") != NULL);
    CHECK(strstr(got.describe, "  copy 'a' cpu-restricted -> cpu: 960 bytes") != NULL);
    CHECK(strstr(got.describe, "output") == NULL); /* softmax ran on the CPU: nothing to copy back */
    free_result(&ref);
    free_result(&got);
}

static void the_normalizing_tail_offloaded_copies_the_sum_in_and_the_output_back(void) {
    kiln_sched_backend list[] = {{norm_mul_softmax, 0}, {cpu, 0}};
    run_result ref, got;
    run_reference(cpu, build_chain, &ref);
    run_sched(list, 2, T, build_chain, &got);
    check_same(&ref, &got, "[cpu-restricted{rms_norm, mul, softmax}, cpu]");
    CHECK_EQ_INT(got.n_splits, 2);
    CHECK_EQ_INT(got.split_backend[0], 1);
    CHECK_EQ_INT(got.split_backend[1], 0);
    CHECK_EQ_INT(got.n_copies, 1);
    CHECK(strstr(got.describe, "  copy 'a' cpu -> cpu-restricted: 960 bytes") != NULL);
    CHECK(strstr(got.describe, "output 'out' cpu-restricted -> host: 960 bytes") != NULL);
    free_result(&ref);
    free_result(&got);
}

static void views_crossing_backends_read_twins_of_the_copied_bytes(void) {
    kiln_sched_backend one[] = {{mm_add, 0}, {cpu, 0}}, other[] = {{norm_mul_softmax, 0}, {cpu, 0}};
    kiln_sched_backend both[] = {{mm_add, 0}, {norm_mul_softmax, 0}, {cpu, 0}};
    run_result ref, got;
    run_reference(cpu, build_views, &ref);
    run_sched(one, 2, T, build_views, &got);
    check_same(&ref, &got, "views on [cpu-restricted{matmul, add}, cpu]");
    free_result(&got);
    run_sched(other, 2, T, build_views, &got);
    check_same(&ref, &got, "views on [cpu-restricted{rms_norm, mul, softmax}, cpu]");
    /* The reshaped input x2 is copied whole into the restricted arena and read through a twin view. */
    CHECK(strstr(got.describe, "  copy 'x2' host -> cpu-restricted: 640 bytes") != NULL);
    free_result(&got);
    run_sched(both, 3, T, build_views, &got);
    check_same(&ref, &got,
               "views on [cpu-restricted{matmul, add}, cpu-restricted{rms_norm, mul, softmax}, cpu]");
    CHECK(got.n_splits >= 3);
    free_result(&got);
    free_result(&ref);
}

static void a_node_that_reads_the_cache_stays_on_the_cpu_with_it(void) {
    kiln_sched_backend list[] = {{mm_add, 0}, {cpu, 0}};
    run_result ref, got;
    memset(cache_data, 0, sizeof cache_data);
    run_reference(cpu, build_cache, &ref);
    memset(cache_data, 0, sizeof cache_data);
    run_sched(list, 2, T, build_cache, &got);
    check_same(&ref, &got, "cache on [cpu-restricted{matmul, add}, cpu]");
    /* matmul on the restricted backend; cache_write and the add (which reads the cache) on the CPU. */
    CHECK_EQ_INT(got.n_splits, 2);
    CHECK_EQ_INT(got.split_backend[1], 1);
    CHECK(strstr(got.describe, "nodes [1, 3): 2 nodes") != NULL);
    free_result(&ref);
    free_result(&got);
}

/* A cache that lives in a device backend's buffer: a cpu-restricted instance taking cache_write and add,
 * given an owns slot that recognizes the one buffer the cache is in (what holds_kv lets a context do).
 * Every node touching the cache then runs there, whatever else the list says: the matmul stays on the CPU
 * and its result and the cells are copied in, the sum comes back. A holder that cannot run a node touching
 * its cache is a named error, not a silent CPU run against bytes the CPU must not touch. */
static kiln_buffer held;

static bool owns_held(const kiln_backend *b, const void *data) {
    (void)b;
    return held.base && (const char *)data >= (const char *)held.base &&
           (const char *)data < (const char *)held.base + held.size;
}

static void a_cache_a_device_owns_takes_every_node_that_touches_it(void) {
    static const kiln_op holder_ops[] = {KILN_OP_CACHE_WRITE, KILN_OP_ADD};
    kiln_backend *inner[2] = {NULL, NULL};
    for (int v = 0; v < 2; v++) {
        kiln_backend_iface iface;
        kiln_backend holder;
        run_result ref, got;
        CHECK_OK(kiln__backend_cpu_restricted_create(N_THREADS, holder_ops, v == 0 ? 2 : 1, &inner[v]));
        if (!inner[v]) return;
        iface = *inner[v]->iface;
        iface.owns = owns_held;
        holder = *inner[v];
        holder.iface = &iface;
        kiln_sched_backend list[] = {{&holder, 0}, {cpu, 0}};
        CHECK_OK(kiln__backend_buffer_alloc(&holder, sizeof cache_data, &held));
        CHECK_OK(kiln__buffer_memset(&held, 0, 0, held.size));
        memset(cache_data, 0, sizeof cache_data);
        run_reference(cpu, build_cache, &ref);
        cache_at = held.base;
        if (v == 0) {
            float cache_back[N * 8];
            run_sched(list, 2, T, build_cache, &got);
            check_same(&ref, &got, "cache held by [cpu-restricted{cache_write, add}, cpu]");
            CHECK_EQ_INT(got.n_splits, 2);
            CHECK_EQ_INT(got.split_backend[0], 1); /* the matmul */
            CHECK_EQ_INT(got.split_backend[1], 0); /* cache_write and the add, with the cache */
            CHECK_EQ_INT(got.n_copies, 2);         /* the matmul's rows and the cells in */
            CHECK_OK(kiln__buffer_get(&held, 0, cache_back, sizeof cache_back));
            CHECK(memcmp(cache_back, cache_data, sizeof cache_data) == 0);
            free_result(&got);
        } else {
            kiln_graph *g;
            kiln_sched *s = NULL;
            kiln_sched_plan *p = NULL;
            CHECK_OK(kiln__graph_create(256, &g));
            build_cache(g);
            CHECK_OK(kiln__graph_order(g));
            CHECK_OK(kiln__sched_create(list, 2, &s));
            CHECK_STATUS(kiln__sched_plan_create(s, g, T, &p), KILN_E_UNSUPPORTED);
            CHECK_ERROR_MENTIONS("the KV cache lives on cpu-restricted");
            CHECK(p == NULL);
            kiln__sched_destroy(s);
            kiln__graph_destroy(g);
        }
        cache_at = cache_data;
        kiln__backend_buffer_free(&holder, &held);
        free_result(&ref);
        kiln__backend_destroy(inner[v]);
    }
}

static void a_backend_whose_min_batch_exceeds_the_batch_takes_nothing(void) {
    kiln_sched_backend list[] = {{mm_add, T + 1}, {cpu, 0}};
    run_result ref, got;
    run_reference(cpu, build_chain, &ref);
    run_sched(list, 2, T, build_chain, &got);
    check_same(&ref, &got, "min_batch above the batch");
    CHECK_EQ_INT(got.n_splits, 1);
    CHECK_EQ_INT(got.split_backend[0], 1);
    CHECK_EQ_INT(got.n_copies, 0);
    CHECK_EQ_INT(got.arena_bytes[0], 0);
    free_result(&got);
    list[0].min_batch = T; /* n_tokens >= min_batch: it takes its ops again */
    run_sched(list, 2, T, build_chain, &got);
    CHECK_EQ_INT(got.n_splits, 2);
    free_result(&got);
    free_result(&ref);
}

static void compute_allocates_nothing_once_warmed_up(void) {
    kiln_sched_backend list[] = {{mm_add, 0}, {norm_mul_softmax, 0}, {cpu, 0}};
    kiln_graph *g;
    run_result got;
    long allocs = -1;
    memset(&got, 0, sizeof got);
    CHECK_OK(kiln__graph_create(256, &g));
    build_views(g);
    CHECK_OK(kiln__graph_order(g));
    run_planned(g, list, 3, T, &got, &allocs);
    CHECK_EQ_INT(allocs, 0);
    free_result(&got);
    kiln__graph_destroy(g);
}

static void a_graph_without_room_for_the_copies_is_refused_with_a_reason(void) {
    kiln_sched_backend list[] = {{mm_add, 0}, {cpu, 0}};
    kiln_sched *s;
    kiln_sched_plan *p = NULL;
    kiln_graph *g;
    CHECK_OK(kiln__graph_create(9, &g)); /* x, w, bias, gamma and five nodes: full */
    build_chain(g);
    CHECK_OK(kiln__graph_order(g));
    CHECK_OK(kiln__sched_create(list, 2, &s));
    CHECK_STATUS(kiln__sched_plan_create(s, g, T, &p), KILN_E_RANGE);
    CHECK_ERROR_MENTIONS("no room in the graph for a copy of 'x' on cpu-restricted");
    CHECK(p == NULL);
    kiln__sched_destroy(s);
    kiln__graph_destroy(g);
}

static void the_backend_list_is_checked(void) {
    kiln_sched *s = NULL;
    kiln_sched_backend device_last[] = {{cpu, 0}, {mm_add, 0}}, twice[] = {{cpu, 0}, {cpu, 0}},
                       negative[] = {{mm_add, -1}, {cpu, 0}};
    CHECK_STATUS(kiln__sched_create(device_last, 2, &s), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("the last backend (cpu-restricted) must be a host backend");
    CHECK_STATUS(kiln__sched_create(twice, 2, &s), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("listed twice");
    CHECK_STATUS(kiln__sched_create(negative, 2, &s), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("min_batch -1");
    CHECK_STATUS(kiln__sched_create(NULL, 0, &s), KILN_E_INVALID_ARG);
    CHECK(s == NULL);
}

static void commit_refuses_an_arena_of_the_wrong_backend_or_size(void) {
    kiln_sched_backend list[] = {{mm_add, 0}, {cpu, 0}};
    kiln_sched *s;
    kiln_sched_plan *p;
    kiln_graph *g;
    kiln_buffer arenas[2] = {{0}};
    CHECK_OK(kiln__graph_create(64, &g));
    build_chain(g);
    CHECK_OK(kiln__graph_order(g));
    CHECK_OK(kiln__sched_create(list, 2, &s));
    CHECK_OK(kiln__sched_plan_create(s, g, T, &p));
    CHECK_OK(kiln__backend_buffer_alloc(cpu, kiln__sched_plan_arena_bytes(p, 0), &arenas[0]));
    CHECK_OK(kiln__backend_buffer_alloc(cpu, kiln__sched_plan_arena_bytes(p, 1), &arenas[1]));
    CHECK_STATUS(kiln__sched_plan_commit(p, arenas), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("arena 0 belongs to cpu, not to cpu-restricted");
    CHECK_STATUS(kiln__sched_compute(p), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("compute before a successful commit");
    kiln__backend_buffer_free(cpu, &arenas[0]);
    CHECK_OK(kiln__backend_buffer_alloc(mm_add, kiln__sched_plan_arena_bytes(p, 0) - 1, &arenas[0]));
    CHECK_STATUS(kiln__sched_plan_commit(p, arenas), KILN_E_RANGE);
    CHECK_ERROR_MENTIONS("the plan needs");
    kiln__backend_buffer_free(mm_add, &arenas[0]);
    kiln__backend_buffer_free(cpu, &arenas[1]);
    kiln__sched_plan_destroy(p);
    kiln__sched_destroy(s);
    kiln__graph_destroy(g);
}

/* ---- Buffer verbs ---- */

static void buffer_verbs_move_bytes_on_host_and_device_buffers(void) {
    kiln_backend *backends[2] = {cpu, mm_add};
    CHECK(kiln__backend_is_host(cpu));
    CHECK(!kiln__backend_is_host(mm_add));
    CHECK_EQ_INT(kiln__backend_alignment(mm_add), 64);
    for (int i = 0; i < 2; i++) {
        kiln_buffer a, b;
        unsigned char in[32], out[32];
        for (int j = 0; j < 32; j++) in[j] = (unsigned char)(j + 1);
        CHECK_OK(kiln__backend_buffer_alloc(backends[i], 64, &a));
        CHECK_OK(kiln__backend_buffer_alloc(backends[i], 64, &b));
        CHECK(a.backend == backends[i]);
        CHECK_OK(kiln__buffer_set(&a, 8, in, 32));
        CHECK_OK(kiln__buffer_copy(&a, 8, &b, 32, 32));
        CHECK_OK(kiln__buffer_memset(&b, 32, 0xAB, 4));
        CHECK_OK(kiln__buffer_get(&b, 32, out, 32));
        CHECK_EQ_INT(out[0], 0xAB);
        CHECK_EQ_INT(out[3], 0xAB);
        CHECK(memcmp(out + 4, in + 4, 28) == 0);
        kiln__backend_buffer_free(backends[i], &a);
        kiln__backend_buffer_free(backends[i], &b);
        CHECK(a.backend == NULL && a.base == NULL && a.size == 0);
    }
}

static void buffer_verbs_reject_ranges_outside_the_buffer(void) {
    kiln_buffer a, c, none = {0};
    char bytes[16] = {0};
    CHECK_OK(kiln__backend_buffer_alloc(mm_add, 64, &a));
    CHECK_OK(kiln__backend_buffer_alloc(cpu, 64, &c));
    CHECK_STATUS(kiln__buffer_set(&a, 56, bytes, 16), KILN_E_RANGE);
    CHECK_ERROR_MENTIONS("buffer set on cpu-restricted: offset 56 + 16 bytes exceeds the buffer's 64 bytes");
    CHECK_STATUS(kiln__buffer_get(&a, SIZE_MAX, bytes, 2), KILN_E_RANGE); /* offset + size overflows */
    CHECK_ERROR_MENTIONS("exceeds the buffer's 64 bytes");
    CHECK_STATUS(kiln__buffer_memset(&c, 65, 0, 0), KILN_E_RANGE);
    CHECK_ERROR_MENTIONS("buffer memset on cpu: offset 65 + 0 bytes");
    CHECK_STATUS(kiln__buffer_copy(&a, 0, &a, 60, 8), KILN_E_RANGE);
    CHECK_STATUS(kiln__buffer_copy(&a, 0, &c, 0, 8), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("copies stay within one backend");
    CHECK_STATUS(kiln__buffer_set(&none, 0, bytes, 1), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("never allocated");
    CHECK_OK(kiln__buffer_set(&a, 64, bytes, 0)); /* an empty range at the end is inside */
    kiln__backend_buffer_free(mm_add, &a);
    kiln__backend_buffer_free(cpu, &c);
}

static void the_restricted_backend_accepts_only_its_ops_and_views(void) {
    kiln_graph *g;
    static const kiln_op bad[] = {KILN_OP_NONE};
    kiln_backend *b = NULL;
    CHECK_OK(kiln__graph_create(16, &g));
    kiln_tensor *x = leaf(g, "x", K, T, x_data, KILN_TENSOR_INPUT);
    kiln_tensor *w = leaf(g, "w", K, N, w_data, KILN_TENSOR_WEIGHT);
    CHECK(kiln__backend_supports_op(mm_add, kiln__matmul(g, w, x)));
    CHECK(!kiln__backend_supports_op(mm_add, kiln__silu(g, x)));
    CHECK(kiln__backend_supports_op(mm_add, kiln__transpose(g, x)));
    CHECK_STR(kiln__backend_name(mm_add), "cpu-restricted");
    CHECK_STATUS(kiln__backend_cpu_restricted_create(1, bad, 1, &b), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("is not a computing op");
    CHECK(b == NULL);
    kiln__graph_destroy(g);
}

static void a_device_list_names_a_restricted_backend_by_its_ops(void) {
    kiln_backend *b = NULL;
    const char *good = "cpu-restricted:matmul+add+rms_norm", *typo = "cpu-restricted:matmul+addd";
    kiln_graph *g;
    CHECK_OK(kiln__backend_create_named(good, strlen(good), 1, &b));
    CHECK_OK(kiln__graph_create(16, &g));
    kiln_tensor *x = leaf(g, "x", K, T, x_data, KILN_TENSOR_INPUT);
    if (b) {
        CHECK_STR(kiln__backend_name(b), "cpu-restricted");
        CHECK(kiln__backend_supports_op(b, kiln__rms_norm(g, x, 1e-5f)));
        CHECK(!kiln__backend_supports_op(b, kiln__silu(g, x)));
    }
    kiln__backend_destroy(b);
    kiln__graph_destroy(g);
    CHECK_STATUS(kiln__backend_create_named(typo, strlen(typo), 1, &b), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("'addd' is not an op name");
    CHECK_STATUS(kiln__backend_create_named("cpu-restricted:", 15, 1, &b), KILN_E_INVALID_ARG);
    CHECK_STATUS(kiln__backend_create_named("metal", 5, 1, &b), KILN_E_NOT_FOUND);
    CHECK_ERROR_MENTIONS("device 'metal' is not known");
    CHECK(b == NULL);
}

/* ---- Random DAGs ---- */

static float dag_leaf[3][40 * 6], dag_weight[40 * 40];

typedef struct rng {
    uint64_t s;
} rng;

static uint32_t next(rng *r, uint32_t n) {
    r->s = r->s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)((r->s >> 33) % n);
}

static uint64_t dag_seed;

/* A random DAG over [N, M] tensors of elementwise, normalizing, matmul and view ops (as test_plan.c). */
static void build_random(kiln_graph *g) {
    rng r = {dag_seed};
    int64_t n = 1 + next(&r, 40), m = 1 + next(&r, 6), ne[2] = {n, m}, nw[2] = {n, n};
    kiln_tensor *pool[64];
    int count = 0, n_leaves = 1 + (int)next(&r, 3), n_nodes = 5 + (int)next(&r, 30);
    for (int i = 0; i < n_leaves; i++)
        pool[count++] = kiln__graph_leaf(g, "in", KILN_TYPE_F32, 2, ne, dag_leaf[i], KILN_TENSOR_INPUT);
    kiln_tensor *w = kiln__graph_leaf(g, "w", KILN_TYPE_F32, 2, nw, dag_weight, KILN_TENSOR_WEIGHT);
    for (int i = 0; i < n_nodes && count < 64; i++) {
        kiln_tensor *a = pool[next(&r, (uint32_t)count)], *b = pool[next(&r, (uint32_t)count)], *t = NULL;
        switch (next(&r, 10)) {
        case 0: t = kiln__add(g, a, b); break;
        case 1: t = kiln__mul(g, a, b); break;
        case 2: t = kiln__silu(g, a); break;
        case 3: t = kiln__scale(g, a, 0.5f, 0.25f); break;
        case 4: t = kiln__softmax(g, a, 1.0f); break;
        case 5: t = kiln__rms_norm(g, a, 1e-5f); break;
        case 6: t = kiln__matmul(g, w, a); break;
        case 7: t = kiln__cont(g, kiln__transpose(g, kiln__cont(g, kiln__transpose(g, a)))); break;
        case 8: t = kiln__add(g, kiln__reshape_2d(g, a, n, m), b); break;
        default: t = kiln__mul(g, kiln__transpose(g, kiln__transpose(g, a)), a); break;
        }
        pool[count++] = t;
    }
    kiln__graph_set_output(g, pool[count - 1]);
    if (next(&r, 2)) kiln__graph_set_output(g, pool[n_leaves + next(&r, (uint32_t)(count - n_leaves))]);
}

static void random_dags_give_the_same_bytes_on_every_backend_list(void) {
    kiln_sched_backend lists[3][3] = {{{mm_add, 0}, {cpu, 0}},
                                      {{norm_mul_softmax, 0}, {cpu, 0}},
                                      {{norm_mul_softmax, 0}, {mm_add, 0}, {cpu, 0}}};
    int n_list[3] = {2, 2, 3}, failures = 0;
    for (int k = 0; k < 3; k++) fill_random(dag_leaf[k], 40 * 6, 200 + k);
    fill_random(dag_weight, 40 * 40, 199);
    for (dag_seed = 1; dag_seed <= 150 && failures < 3; dag_seed++) {
        run_result ref, got;
        int before = harness_check_failures;
        run_reference(cpu, build_random, &ref);
        for (int l = 0; l < 3; l++) {
            run_sched(lists[l], n_list[l], 1, build_random, &got);
            check_same(&ref, &got, "random DAG");
            free_result(&got);
        }
        free_result(&ref);
        if (harness_check_failures != before) {
            harness_fail(__FILE__, __LINE__, "random DAG seed %llu failed", (unsigned long long)dag_seed);
            failures++;
        }
    }
}

/* ---- The model's own graph ---- */

/* The stories260K forward pass after the pass pipeline (fused linears, rms_norm_mul, swiglu, attention
 * over the KV cache with its mask input) for the batch a decode call just ran, on the CPU alone and with
 * the fused ops offloaded. The decode filled the context's inputs and cache; both runs rewrite the same
 * cells with the same rows. */
static void model_logits_are_bit_identical_with_the_fused_ops_offloaded(void) {
    static const kiln_op ops[] = {KILN_OP_LINEAR, KILN_OP_MATMUL, KILN_OP_RMS_NORM_MUL, KILN_OP_SWIGLU, KILN_OP_ADD,
                                  KILN_OP_GET_ROWS};
    kiln_backend *offload = NULL;
    kiln_model *m = NULL;
    kiln_ctx *ctx = NULL;
    kiln_model_params mp = kiln_model_params_default();
    kiln_ctx_params cp = kiln_ctx_params_default();
    int32_t tokens[7];
    const float *logits;
    mp.n_threads = N_THREADS;
    cp.n_ctx = 32;
    CHECK_OK(kiln__backend_cpu_restricted_create(N_THREADS, ops, (int32_t)KILN__ARRAY_LEN(ops), &offload));
    CHECK_OK(kiln_model_load_ex(KILN_MODEL_PATH, &mp, &m));
    CHECK_OK(kiln_ctx_create(m, &cp, &ctx));
    if (!offload || !ctx) return;
    kiln_sched_backend list[] = {{offload, 2}, {cpu, 0}};
    for (int32_t n = 1; n <= 7; n += 6) {
        kiln_graph *g;
        run_result ref, got;
        const kiln_program_plan *plan;
        for (int32_t i = 0; i < n; i++) tokens[i] = (i * 37 + 1) % kiln_model_n_vocab(m);
        CHECK_OK(kiln_ctx_decode(ctx, tokens, n, &logits));
        plan = kiln__program_last(ctx->program); /* the plan that decode ran */
        CHECK(plan != NULL);
        if (!plan) break;
        memset(&ref, 0, sizeof ref);
        memset(&got, 0, sizeof got);
        CHECK_OK(kiln__program_graph(ctx->program, plan->key, true, &g, NULL));
        run_planned(g, list + 1, 1, (int32_t)plan->key[0], &ref, NULL);
        kiln__graph_destroy(g);
        CHECK_OK(kiln__program_graph(ctx->program, plan->key, true, &g, NULL));
        run_planned(g, list, 2, (int32_t)plan->key[0], &got, NULL);
        kiln__graph_destroy(g);
        check_same(&ref, &got, n == 1 ? "stories260K, 1 token" : "stories260K, 7 tokens");
        /* min_batch 2: a single token stays on the CPU; a batch of 7 (bucket 8) spreads over both. */
        CHECK(n == 1 ? got.n_splits == 1 && got.n_copies == 0 : got.n_splits > 2 && got.n_copies > 0);
        free_result(&ref);
        free_result(&got);
    }
    kiln_ctx_destroy(ctx);
    kiln_model_destroy(m);
    kiln__backend_destroy(offload);
}

int main(void) {
    fill_inputs();
    create_backends();
    RUN(the_cpu_alone_is_one_split_without_copies_and_matches_todays_path);
    RUN(matmul_and_add_offloaded_copy_the_input_in_and_the_sum_out);
    RUN(the_normalizing_tail_offloaded_copies_the_sum_in_and_the_output_back);
    RUN(views_crossing_backends_read_twins_of_the_copied_bytes);
    RUN(a_node_that_reads_the_cache_stays_on_the_cpu_with_it);
    RUN(a_cache_a_device_owns_takes_every_node_that_touches_it);
    RUN(a_backend_whose_min_batch_exceeds_the_batch_takes_nothing);
    RUN(compute_allocates_nothing_once_warmed_up);
    RUN(a_graph_without_room_for_the_copies_is_refused_with_a_reason);
    RUN(the_backend_list_is_checked);
    RUN(commit_refuses_an_arena_of_the_wrong_backend_or_size);
    RUN(buffer_verbs_move_bytes_on_host_and_device_buffers);
    RUN(buffer_verbs_reject_ranges_outside_the_buffer);
    RUN(the_restricted_backend_accepts_only_its_ops_and_views);
    RUN(a_device_list_names_a_restricted_backend_by_its_ops);
    RUN(random_dags_give_the_same_bytes_on_every_backend_list);
    RUN(model_logits_are_bit_identical_with_the_fused_ops_offloaded);
    destroy_backends();
    return harness_finish();
}
