/*
 * compile.c - compiling and running the forward pass of a context (see compile.h): the architecture
 * builder emits the plain graph, the pass pipeline rewrites it, the planner lays out its memory, and the
 * result is kept per batch size so that decoding token after token reuses one plan.
 */
#include "model/compile.h"

#include "core/core.h"

#include <string.h>

/* Leaves for the inputs and caches, then the architecture's forward pass (KV position 0: the run-time
 * argument is set before each run). */
static kiln_status build(kiln_ctx *c, kiln_graph *g, int32_t n, kiln_tensor **logits) {
    const kiln_hparams *hp = &c->model->hp;
    int64_t ne_t[1] = {n};
    int64_t ne_cache[2] = {(int64_t)hp->n_head_kv * hp->head_dim, c->n_ctx};
    size_t cache_bytes = c->kv_row_bytes * (size_t)ne_cache[1];
    kiln_batch_inputs in = {0};
    kiln_tensor **caches = kiln__alloc_array(2 * (size_t)hp->n_layer, sizeof *caches);
    if (!caches) return kiln__nomem("cache leaves");
    in.ids = kiln__graph_leaf(g, "ids", KILN_TYPE_I32, 1, ne_t, c->ids, KILN_TENSOR_INPUT);
    in.pos = kiln__graph_leaf(g, "pos", KILN_TYPE_I32, 1, ne_t, c->pos, KILN_TENSOR_INPUT);
    for (int32_t il = 0; il < hp->n_layer; il++) {
        char *base = (char *)c->kv.base + (size_t)il * 2 * cache_bytes;
        caches[il] = kiln__tensor_set_name(
            kiln__graph_leaf(g, "k", c->kv_type, 2, ne_cache, base, KILN_TENSOR_CACHE), "cache_k_l%d", il);
        caches[hp->n_layer + il] = kiln__tensor_set_name(
            kiln__graph_leaf(g, "v", c->kv_type, 2, ne_cache, base + cache_bytes, KILN_TENSOR_CACHE),
            "cache_v_l%d", il);
    }
    in.k_cache = caches;
    in.v_cache = caches + hp->n_layer;
    in.n_tokens = n;
    in.n_past = 0;
    *logits = kiln__model_build(c->model, g, &in);
    kiln__dealloc(caches);
    return kiln__graph_status(g) ? kiln__error_prefix(kiln__graph_status(g), "building the graph: ") : KILN_OK;
}

kiln_status kiln__compile_graph(kiln_ctx *c, int32_t n_tokens, bool optimize, kiln_graph **out,
                                kiln_pipeline_stats *stats) {
    kiln_graph *g = NULL;
    kiln_tensor *logits = NULL;
    kiln_pipeline_stats local;
    kiln_pass_env env = {kiln__const_store_eval, c->consts};
    kiln_status s = kiln__graph_create(192 * c->model->hp.n_layer + 256, &g);
    if (!s) s = build(c, g, n_tokens, &logits);
    if (!s) s = optimize ? kiln__pipeline_run(g, &env, c->passes, c->check_passes, stats ? stats : &local)
                         : kiln__graph_order(g);
    if (s) {
        kiln__graph_destroy(g);
        return s;
    }
    *out = g;
    return KILN_OK;
}

void kiln__compiled_free(kiln_compiled *p) {
    kiln__graph_destroy(p->graph);
    kiln__dealloc(p->npast);
    memset(p, 0, sizeof *p);
}

static kiln_status compile(kiln_ctx *c, int32_t n_tokens, kiln_compiled *p) {
    size_t arena = 0;
    kiln_status s = kiln__compile_graph(c, n_tokens, true, &p->graph, &p->passes);
    if (s) return s;
    if ((s = kiln__plan_measure(p->graph, &arena, &p->plan))) return s;
    p->logits = kiln__graph_output(p->graph, 0);
    p->npast = kiln__alloc_array((size_t)kiln__graph_n_nodes(p->graph) + 1, sizeof *p->npast);
    if (!p->npast) return kiln__nomem("a compiled plan");
    for (int32_t i = 0; i < kiln__graph_n_nodes(p->graph); i++) {
        kiln_tensor *t = kiln__graph_node(p->graph, i);
        if (t->flags & KILN_TENSOR_NPAST) p->npast[p->n_npast++] = t;
    }
    p->n_tokens = n_tokens;
    return KILN_OK;
}

kiln_status kiln__ctx_plan(kiln_ctx *c, int32_t n_tokens, kiln_compiled **out) {
    kiln_compiled *slot = &c->plans[0];
    kiln_status s;
    for (int i = 0; i < KILN_PLAN_CACHE; i++) {
        if (c->plans[i].n_tokens == n_tokens) {
            c->plans[i].last_used = ++c->clock;
            *out = &c->plans[i];
            return KILN_OK;
        }
        if (c->plans[i].last_used < slot->last_used) slot = &c->plans[i];
    }
    kiln__compiled_free(slot);
    if ((s = compile(c, n_tokens, slot))) {
        kiln__compiled_free(slot);
        return s;
    }
    slot->last_used = ++c->clock;
    *out = slot;
    return KILN_OK;
}

kiln_status kiln__compiled_run(kiln_ctx *c, kiln_compiled *p) {
    kiln_status s;
    for (int32_t i = 0; i < p->n_npast; i++) p->npast[i]->ip[0] = c->n_past;
    if (p->plan.arena_bytes > c->arena.size) {
        kiln__backend_buffer_free(c->backend, &c->arena);
        if ((s = kiln__backend_buffer_alloc(c->backend, p->plan.arena_bytes, &c->arena))) return s;
    }
    if ((s = kiln__plan_commit(p->graph, c->arena.base, c->arena.size))) return s;
    return kiln__backend_compute(c->backend, p->graph);
}
