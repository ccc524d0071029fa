/*
 * compile.c - compiling and running the forward pass of a context (see compile.h): the architecture
 * builder emits the plain graph over input leaves, the pass pipeline rewrites it, the planner lays out
 * its memory, and the result is kept per bucket so that batches of varied sizes reuse a few plans.
 */
#include "runtime/compile.h"

#include "core/core.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

int32_t kiln__bucket(const kiln_ctx *c, int32_t n) {
    int32_t b = 1;
    while (b < n)
        b *= 2;
    return KILN__MIN(b, c->n_batch);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void logf_ctx(const kiln_ctx *c, const char *fmt, ...) KILN__PRINTF(2, 3);
static void logf_ctx(const kiln_ctx *c, const char *fmt, ...) {
    char line[256];
    va_list ap;
    if (!c->log) return;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    c->log(c->log_user, line);
}

/* The input leaves, the cache leaves, then the architecture's forward pass. Input data pointers are set
 * before each run (kiln__compiled_run); here they point at the context's buffers as they are now. */
static kiln_status build(kiln_ctx *c, kiln_graph *g, int32_t T, int32_t O, kiln_tensor **output) {
    const kiln_hparams *hp = &c->model->hp;
    int64_t ne_t[1] = {T}, ne_o[1] = {O}, ne_mask[2] = {c->n_ctx, T};
    int64_t ne_cache[2] = {(int64_t)hp->n_head_kv * hp->head_dim, c->n_ctx};
    size_t cache_bytes = c->kv_row_bytes * (size_t)ne_cache[1];
    kiln_batch_inputs in = {0};
    kiln_tensor **caches = kiln__alloc_array(2 * (size_t)hp->n_layer, sizeof *caches);
    if (!caches) return kiln__nomem("cache leaves");
    in.ids = kiln__graph_leaf(g, "ids", KILN_TYPE_I32, 1, ne_t, c->ids, KILN_TENSOR_INPUT);
    in.pos = kiln__graph_leaf(g, "pos", KILN_TYPE_I32, 1, ne_t, c->pos, KILN_TENSOR_INPUT);
    in.cells = kiln__graph_leaf(g, "kv_cells", KILN_TYPE_I32, 1, ne_t, c->cell_of, KILN_TENSOR_INPUT);
    in.mask = kiln__graph_leaf(g, "kq_mask", KILN_TYPE_F32, 2, ne_mask, c->mask, KILN_TENSOR_INPUT);
    in.out_ids = kiln__graph_leaf(g, "out_ids", KILN_TYPE_I32, 1, ne_o, c->out_ids, KILN_TENSOR_INPUT);
    for (int32_t il = 0; il < hp->n_layer; il++) {
        char *base = kiln__ctx_cache_base(c, il);
        kiln__graph_set_layer(g, il);
        caches[il] = kiln__tensor_set_name(
            kiln__graph_leaf(g, "k", c->kv_type, 2, ne_cache, base, KILN_TENSOR_CACHE), "cache_k_l%d", il);
        caches[hp->n_layer + il] = kiln__tensor_set_name(
            kiln__graph_leaf(g, "v", c->kv_type, 2, ne_cache, base + cache_bytes, KILN_TENSOR_CACHE),
            "cache_v_l%d", il);
    }
    kiln__graph_set_layer(g, -1);
    in.k_cache = caches;
    in.v_cache = caches + hp->n_layer;
    in.n_tokens = T;
    in.n_outputs = O;
    *output = kiln__model_build(c->model, g, &in);
    kiln__dealloc(caches);
    return kiln__graph_status(g) ? kiln__error_prefix(kiln__graph_status(g), "building the graph: ")
                                 : KILN_OK;
}

kiln_status kiln__compile_graph(kiln_ctx *c, int32_t T, int32_t O, bool optimize, kiln_graph **out,
                                kiln_pipeline_stats *stats) {
    kiln_graph *g = NULL;
    kiln_tensor *output = NULL;
    kiln_pipeline_stats local;
    kiln_pass_env env = {kiln__const_store_eval, c->engine->consts};
    kiln_status s = kiln__graph_create(192 * c->model->hp.n_layer + 256, &g);
    if (!s) s = build(c, g, T, O, &output);
    if (!s)
        s = optimize ? kiln__pipeline_run(g, &env, c->passes, c->check_passes, stats ? stats : &local)
                     : kiln__graph_order(g);
    if (s) {
        kiln__graph_destroy(g);
        return s;
    }
    *out = g;
    return KILN_OK;
}

void kiln__compiled_free(kiln_compiled *p) {
    kiln__sched_plan_destroy(p->sched);
    kiln__graph_destroy(p->graph);
    memset(p, 0, sizeof *p);
}

/* The leaf named `name` among the graph's tensors (the passes keep input leaves as they are). */
static kiln_tensor *find_leaf(kiln_graph *g, const char *name) {
    for (int32_t i = 0; i < kiln__graph_n_tensors(g); i++) {
        kiln_tensor *t = kiln__graph_tensor(g, i);
        if (t->op == KILN_OP_NONE && (t->flags & KILN_TENSOR_INPUT) && !strcmp(t->name, name)) return t;
    }
    return NULL;
}

static kiln_status compile(kiln_ctx *c, int32_t T, int32_t O, kiln_compiled *p) {
    size_t arena = 0;
    double t0 = now_ms();
    kiln_status s = kiln__compile_graph(c, T, O, true, &p->graph, &p->passes);
    if (s) return s;
    /* The one-arena figures of kiln_plan_info; the scheduler then plans each backend's own arena. */
    if ((s = kiln__plan_measure(p->graph, &arena, &p->plan))) return s;
    if ((s = kiln__sched_plan_create(c->engine->sched, p->graph, T, &p->sched))) return s;
    p->plan.arena_bytes = 0;
    for (int32_t i = 0; i < c->engine->n_backends; i++)
        p->plan.arena_bytes += kiln__sched_plan_arena_bytes(p->sched, i);
    p->output = kiln__sched_plan_output(p->sched, 0);
    p->ids = find_leaf(p->graph, "ids");
    p->pos = find_leaf(p->graph, "pos");
    p->cells = find_leaf(p->graph, "kv_cells");
    p->mask = find_leaf(p->graph, "kq_mask");
    p->out_ids = find_leaf(p->graph, "out_ids");
    p->n_tokens = T;
    p->n_outputs = O;
    p->compile_ms = now_ms() - t0;
    logf_ctx(c, "compiled the plan for %d tokens, %d output rows: %d -> %d nodes, arena %.1f MiB, %.1f ms", T,
             O, p->passes.nodes_before, p->passes.nodes_after, (double)p->plan.arena_bytes / (1 << 20),
             p->compile_ms);
    if (c->log && c->engine->n_backends > 1) kiln__sched_plan_describe(p->sched, c->log, c->log_user);
    return KILN_OK;
}

kiln_status kiln__ctx_plan(kiln_ctx *c, int32_t T, int32_t O, kiln_compiled **out) {
    kiln_compiled *slot = &c->plans[0];
    kiln_status s;
    for (int i = 0; i < KILN_PLAN_CACHE; i++) {
        if (c->plans[i].n_tokens == T && c->plans[i].n_outputs == O) {
            c->plans[i].last_used = ++c->clock;
            *out = &c->plans[i];
            return KILN_OK;
        }
        if (c->plans[i].last_used < slot->last_used) slot = &c->plans[i];
    }
    size_t need = (size_t)c->n_ctx * (size_t)T; /* the mask for T tokens; no overflow: n_ctx, T < 2^31 */
    if (need > c->mask_cap) {
        float *m = kiln__realloc_array(c->mask, need, sizeof *m);
        if (!m) return kiln__nomem("the attention mask");
        c->mask = m;
        c->mask_cap = need;
    }
    kiln__compiled_free(slot);
    if ((s = compile(c, T, O, slot))) {
        kiln__compiled_free(slot);
        return s;
    }
    slot->last_used = ++c->clock;
    *out = slot;
    return KILN_OK;
}

kiln_status kiln__compiled_run(kiln_ctx *c, kiln_compiled *p) {
    kiln_status s;
    /* Inputs a pass removed (a graph that never reads positions, say) are NULL. */
    if (p->ids) p->ids->data = c->ids;
    if (p->pos) p->pos->data = c->pos;
    if (p->cells) p->cells->data = c->cell_of;
    if (p->mask) p->mask->data = c->mask;
    if (p->out_ids) p->out_ids->data = c->out_ids;
    for (int32_t i = 0; i < c->engine->n_backends; i++) {
        kiln_backend *b = c->engine->backends[i];
        size_t need = kiln__sched_plan_arena_bytes(p->sched, i);
        if (need > c->arenas[i].size) {
            kiln__backend_buffer_free(b, &c->arenas[i]);
            if ((s = kiln__backend_buffer_alloc(b, need, &c->arenas[i]))) return s;
        }
    }
    if ((s = kiln__sched_plan_commit(p->sched, c->arenas))) return s;
    return kiln__sched_compute(p->sched);
}
