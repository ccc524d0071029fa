/*
 * context.c - an inference context: the KV cache, the input buffers, the graph and its arena, and the
 * backend. kiln_ctx_decode builds the forward graph for a batch, plans it into the arena and computes it.
 *
 * Everything is allocated at creation except the arena and the kernel scratch, which grow only when a
 * larger batch arrives; after the first decode of each batch size, decoding allocates nothing.
 */
#include "model/model.h"

#include "backend/backend.h"
#include "core/core.h"
#include "plan/plan.h"

#include <string.h>

struct kiln_ctx {
    const kiln_model *model;
    kiln_backend *backend;
    int32_t n_ctx;
    int32_t n_past;
    kiln_buffer kv;          /* [L][2][Hkv * D * n_ctx] f32 */
    kiln_buffer arena;       /* planned intermediates */
    kiln_graph *graph;
    int32_t *ids;            /* [n_ctx] */
    int32_t *pos;            /* [n_ctx] */
    kiln_tensor **k_cache;   /* [L], rebuilt per graph */
    kiln_tensor **v_cache;   /* [L] */
};

kiln_ctx_params kiln_ctx_params_default(void) {
    kiln_ctx_params p = {0, 0};
    return p;
}

static kiln_status ctx_init(kiln_ctx *c, const kiln_ctx_params *p) {
    const kiln_hparams *hp = &c->model->hp;
    uint64_t kv_bytes = (uint64_t)hp->n_head_kv * (uint64_t)hp->head_dim * sizeof(float);
    kiln_status s;
    if (p->n_ctx < 0 || p->n_threads < 0)
        return kiln__error(KILN_E_INVALID_ARG, "n_ctx %d and n_threads %d must be >= 0", p->n_ctx, p->n_threads);
    c->n_ctx = p->n_ctx ? p->n_ctx : hp->n_ctx_train;
    if (kiln__mul_overflow_u64(kv_bytes, (uint64_t)c->n_ctx * 2u * (uint64_t)hp->n_layer, &kv_bytes) ||
        kv_bytes > SIZE_MAX)
        return kiln__error(KILN_E_RANGE, "a KV cache of %d tokens overflows", c->n_ctx);
    if ((s = kiln__backend_cpu_create(p->n_threads, &c->backend))) return s;
    if ((s = kiln__backend_buffer_alloc(c->backend, (size_t)kv_bytes, &c->kv))) return s;
    memset(c->kv.base, 0, c->kv.size);
    if ((s = kiln__graph_create(64 * hp->n_layer + 64, &c->graph))) return s;
    c->ids = kiln__alloc_array((size_t)c->n_ctx, sizeof *c->ids);
    c->pos = kiln__alloc_array((size_t)c->n_ctx, sizeof *c->pos);
    c->k_cache = kiln__alloc_array((size_t)hp->n_layer, sizeof *c->k_cache);
    c->v_cache = kiln__alloc_array((size_t)hp->n_layer, sizeof *c->v_cache);
    if (!c->ids || !c->pos || !c->k_cache || !c->v_cache) return kiln__nomem("context buffers");
    return KILN_OK;
}

kiln_status kiln_ctx_create(const kiln_model *model, const kiln_ctx_params *params, kiln_ctx **out) {
    kiln_ctx_params p = params ? *params : kiln_ctx_params_default();
    kiln_ctx *c;
    kiln_status s;
    if (!out || !model) return kiln__error(KILN_E_INVALID_ARG, "kiln_ctx_create: NULL argument");
    *out = NULL;
    c = kiln__calloc(1, sizeof *c);
    if (!c) return kiln__nomem("a context");
    c->model = model;
    if ((s = ctx_init(c, &p))) {
        kiln_ctx_destroy(c);
        return s;
    }
    *out = c;
    return KILN_OK;
}

void kiln_ctx_destroy(kiln_ctx *c) {
    if (!c) return;
    if (c->backend) {
        kiln__backend_buffer_free(c->backend, &c->kv);
        kiln__backend_buffer_free(c->backend, &c->arena);
    }
    kiln__backend_destroy(c->backend);
    kiln__graph_destroy(c->graph);
    kiln__dealloc(c->ids);
    kiln__dealloc(c->pos);
    kiln__dealloc(c->k_cache);
    kiln__dealloc(c->v_cache);
    kiln__dealloc(c);
}

int32_t kiln_ctx_n_past(const kiln_ctx *c) { return c->n_past; }
int32_t kiln_ctx_n_ctx(const kiln_ctx *c) { return c->n_ctx; }
void kiln_ctx_reset(kiln_ctx *c) { c->n_past = 0; }

/* Leaves for the inputs and caches, then the architecture's forward pass. */
static kiln_tensor *build(kiln_ctx *c, int32_t n) {
    const kiln_hparams *hp = &c->model->hp;
    kiln_graph *g = c->graph;
    int64_t ne_t[1] = {n};
    int64_t ne_cache[2] = {(int64_t)hp->n_head_kv * hp->head_dim, c->n_ctx};
    size_t cache_bytes = (size_t)ne_cache[0] * (size_t)ne_cache[1] * sizeof(float);
    kiln_batch_inputs in = {0};
    kiln__graph_reset(g);
    in.ids = kiln__graph_leaf(g, "ids", KILN_TYPE_I32, 1, ne_t, c->ids, KILN_TENSOR_INPUT);
    in.pos = kiln__graph_leaf(g, "pos", KILN_TYPE_I32, 1, ne_t, c->pos, KILN_TENSOR_INPUT);
    for (int32_t il = 0; il < hp->n_layer; il++) {
        char *base = (char *)c->kv.base + (size_t)il * 2 * cache_bytes;
        c->k_cache[il] = kiln__graph_leaf(g, "k_cache", KILN_TYPE_F32, 2, ne_cache, base, KILN_TENSOR_CACHE);
        c->v_cache[il] = kiln__graph_leaf(g, "v_cache", KILN_TYPE_F32, 2, ne_cache, base + cache_bytes,
                                          KILN_TENSOR_CACHE);
        kiln__tensor_set_name(c->k_cache[il], "cache_k_l%d", il);
        kiln__tensor_set_name(c->v_cache[il], "cache_v_l%d", il);
    }
    in.k_cache = c->k_cache;
    in.v_cache = c->v_cache;
    in.n_tokens = n;
    in.n_past = c->n_past;
    return kiln__llama_build(c->model, g, &in);
}

static kiln_status plan_and_compute(kiln_ctx *c) {
    size_t need;
    kiln_status s;
    if ((s = kiln__graph_order(c->graph)) || (s = kiln__plan_measure(c->graph, &need))) return s;
    if (need > c->arena.size) {
        kiln__backend_buffer_free(c->backend, &c->arena);
        if ((s = kiln__backend_buffer_alloc(c->backend, need, &c->arena))) return s;
    }
    if ((s = kiln__plan_commit(c->graph, c->arena.base, c->arena.size))) return s;
    return kiln__backend_compute(c->backend, c->graph);
}

kiln_status kiln_ctx_decode(kiln_ctx *c, const int32_t *tokens, int32_t n, const float **logits) {
    int32_t n_vocab;
    kiln_tensor *out;
    kiln_status s;
    if (!c || !tokens || !logits) return kiln__error(KILN_E_INVALID_ARG, "kiln_ctx_decode: NULL argument");
    *logits = NULL;
    if (n <= 0) return kiln__error(KILN_E_INVALID_ARG, "kiln_ctx_decode: %d tokens (need at least 1)", n);
    if (n > c->n_ctx - c->n_past)
        return kiln__error(KILN_E_CONTEXT_FULL, "%d tokens do not fit: %d of %d context positions are used", n,
                           c->n_past, c->n_ctx);
    n_vocab = c->model->hp.n_vocab;
    for (int32_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= n_vocab)
            return kiln__error(KILN_E_INVALID_ARG, "token %d at index %d is outside the vocabulary (0..%d)",
                               tokens[i], i, n_vocab - 1);
        c->ids[i] = tokens[i];
        c->pos[i] = c->n_past + i;
    }
    out = build(c, n);
    if ((s = kiln__graph_status(c->graph))) return kiln__error_prefix(s, "building the graph: ");
    if (!out) return kiln__error(KILN_E_INTERNAL, "the builder returned no output");
    if ((s = plan_and_compute(c))) return s;
    c->n_past += n;
    *logits = out->data;
    return KILN_OK;
}
