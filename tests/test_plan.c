/*
 * test_plan.c - the memory planner. A property test builds hundreds of random DAGs of elementwise,
 * normalizing, matmul and view ops; on every one, no two tensors that are live at the same time overlap
 * in the arena (kiln__plan_verify), and the planned run gives bit-identical outputs to a run where every
 * node has its own buffer. Plus the figures on the real model: the arena of the stories260K prefill graph
 * (512 tokens) is at most half the naive sum.
 */
#include "harness.h"
#include "graph_run.h"

#include <stdlib.h>

static float leaf_data[4][64 * 8], weight[64 * 64];

typedef struct rng {
    uint64_t s;
} rng;

static uint32_t next(rng *r, uint32_t n) {
    r->s = r->s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)((r->s >> 33) % n);
}

/* A random DAG over tensors of shape [N, M]; returns the number of outputs marked. */
static void build_random(kiln_graph *g, uint64_t seed) {
    rng r = {seed};
    int64_t N = 1 + next(&r, 40), M = 1 + next(&r, 6), ne[2] = {N, M}, nw[2] = {N, N};
    kiln_tensor *pool[64];
    int n = 0, n_leaves = 2 + (int)next(&r, 3), n_nodes = 5 + (int)next(&r, 40);
    for (int i = 0; i < n_leaves; i++) pool[n++] = kiln__graph_leaf(g, "in", KILN_TYPE_F32, 2, ne, leaf_data[i], KILN_TENSOR_INPUT);
    kiln_tensor *w = kiln__graph_leaf(g, "w", KILN_TYPE_F32, 2, nw, weight, KILN_TENSOR_WEIGHT);
    for (int i = 0; i < n_nodes && n < 64; i++) {
        kiln_tensor *a = pool[next(&r, (uint32_t)n)], *b = pool[next(&r, (uint32_t)n)], *t = NULL;
        switch (next(&r, 11)) {
        case 0: t = kiln__add(g, a, b); break;
        case 1: t = kiln__mul(g, a, b); break;
        case 2: t = kiln__silu(g, a); break;
        case 3: t = kiln__scale(g, a, 0.5f, 0.25f); break;
        case 4: t = kiln__softmax(g, a, 1.0f); break;
        case 5: t = kiln__rms_norm(g, a, 1e-5f); break;
        case 6: t = kiln__swiglu(g, a, b); break;
        case 7: t = kiln__matmul(g, w, a); break;
        case 8: t = kiln__reshape_2d(g, kiln__cont(g, a), N, M); break; /* a view that outlives nothing */
        case 9: t = kiln__cont(g, kiln__transpose(g, kiln__cont(g, kiln__transpose(g, a)))); break;
        default: t = kiln__add(g, kiln__reshape_2d(g, a, N, M), a); break; /* a view read beside its base */
        }
        pool[n++] = t;
    }
    kiln__graph_set_output(g, pool[n - 1]);
    if (next(&r, 2)) kiln__graph_set_output(g, pool[n_leaves + next(&r, (uint32_t)(n - n_leaves))]);
}

/* Every computed node in its own buffer; views onto their bases. */
static void **commit_naive(kiln_graph *g, int *count) {
    void **bufs = calloc((size_t)kiln__graph_n_nodes(g) + 1, sizeof *bufs);
    *count = 0;
    for (int32_t i = 0; i < kiln__graph_n_nodes(g); i++) {
        kiln_tensor *t = kiln__graph_node(g, i);
        if (kiln__op_is_view(t->op)) t->data = (char *)t->view_src->data + t->view_offset;
        else t->data = bufs[(*count)++] = malloc(kiln__tensor_nbytes(t));
    }
    return bufs;
}

static void random_dags_never_overlap_live_tensors_and_match_unplanned_runs(void) {
    kiln_backend *b;
    int failures = 0;
    CHECK_OK(kiln__backend_cpu_create(2, &b));
    for (int k = 0; k < 4; k++) fill_random(leaf_data[k], 64 * 8, 100 + k);
    fill_random(weight, 64 * 64, 99);
    for (uint64_t seed = 1; seed <= 300 && failures < 3; seed++) {
        kiln_graph *planned, *naive;
        size_t size;
        kiln_plan_stats st;
        int nb;
        CHECK_OK(kiln__graph_create(256, &planned));
        CHECK_OK(kiln__graph_create(256, &naive));
        build_random(planned, seed);
        build_random(naive, seed);
        CHECK_OK(kiln__graph_order(planned));
        CHECK_OK(kiln__graph_order(naive));
        CHECK_OK(kiln__plan_measure(planned, &size, &st));
        CHECK(st.arena_bytes <= st.naive_bytes);
        kiln_status s = kiln__plan_verify(planned);
        if (s) {
            harness_fail(__FILE__, __LINE__, "seed %llu: %s", (unsigned long long)seed, kiln_last_error());
            failures++;
        }
        void *arena = malloc(size ? size : 1);
        CHECK_OK(kiln__plan_commit(planned, arena, size));
        void **bufs = commit_naive(naive, &nb);
        CHECK_OK(kiln__backend_compute(b, planned));
        CHECK_OK(kiln__backend_compute(b, naive));
        for (int32_t o = 0; o < kiln__graph_n_outputs(planned); o++) {
            kiln_tensor *x = kiln__graph_output(planned, o), *y = kiln__graph_output(naive, o);
            if (memcmp(x->data, y->data, kiln__tensor_nbytes(x)) != 0) {
                harness_fail(__FILE__, __LINE__, "seed %llu: output %d differs between planned and unplanned runs",
                             (unsigned long long)seed, o);
                failures++;
            }
        }
        for (int i = 0; i < nb; i++) free(bufs[i]);
        free(bufs);
        free(arena);
        kiln__graph_destroy(planned);
        kiln__graph_destroy(naive);
    }
    kiln__backend_destroy(b);
}

static void a_chain_reuses_memory_and_computes_in_place(void) {
    kiln_graph *g;
    size_t size;
    kiln_plan_stats st;
    int64_t ne[2] = {64, 8};
    CHECK_OK(kiln__graph_create(64, &g));
    kiln_tensor *x = kiln__graph_leaf(g, "x", KILN_TYPE_F32, 2, ne, leaf_data[0], KILN_TENSOR_INPUT);
    kiln_tensor *t = kiln__silu(g, x);
    for (int i = 0; i < 10; i++) t = kiln__softmax(g, kiln__scale(g, t, 2.0f, 0.0f), 1.0f);
    kiln__graph_set_output(g, t);
    CHECK_OK(kiln__graph_order(g));
    CHECK_OK(kiln__plan_measure(g, &size, &st));
    CHECK_OK(kiln__plan_verify(g));
    CHECK_EQ_INT(st.n_buffers, 21);
    CHECK_EQ_INT(st.n_inplace, 20);          /* every op after the first writes over its dying input */
    CHECK_EQ_INT(size, 64 * 8 * sizeof(float)); /* one buffer for the whole chain */
    CHECK_EQ_INT(st.naive_bytes, 21 * 64 * 8 * sizeof(float));
    kiln__graph_destroy(g);
}

static void the_prefill_arena_of_stories260k_is_at_most_half_the_naive_sum(void) {
    kiln_model *m = NULL;
    kiln_ctx *ctx = NULL;
    kiln_ctx_params p = kiln_ctx_params_default();
    kiln_plan_info info;
    p.n_ctx = 1024;
    CHECK_OK(kiln_model_load(KILN_MODEL_PATH, &m));
    CHECK_OK(kiln_ctx_create(m, &p, &ctx));
    CHECK_OK(kiln_ctx_plan_info(ctx, 512, 1, &info));
    printf("stories260K prefill 512: naive %llu bytes, arena %llu bytes (%.1f%%)\n",
           (unsigned long long)info.naive_bytes, (unsigned long long)info.arena_bytes,
           100.0 * (double)info.arena_bytes / (double)info.naive_bytes);
    CHECK(info.arena_bytes * 2 <= info.naive_bytes);
    CHECK(info.nodes_after < info.nodes_before);
    kiln_ctx_destroy(ctx);
    kiln_model_destroy(m);
}

int main(void) {
    RUN(random_dags_never_overlap_live_tensors_and_match_unplanned_runs);
    RUN(a_chain_reuses_memory_and_computes_in_place);
    RUN(the_prefill_arena_of_stories260k_is_at_most_half_the_naive_sum);
    return harness_finish();
}
