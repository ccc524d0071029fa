/*
 * context.c - an inference context: the KV cache, the input buffers, the backend, the constant store,
 * and a small cache of compiled plans (compile.c), one per batch size.
 *
 * kiln_ctx_decode checks the request, takes the plan for its batch size (compiling it on first use),
 * writes the token ids and positions into the plan's input buffers, sets the KV position as the run-time
 * argument and computes. Only compiling allocates: a warmed-up decode step allocates nothing.
 */
#include "model/compile.h"

#include "core/core.h"
#include "tensor/types.h"

#include <stdlib.h>
#include <string.h>

kiln_ctx_params kiln_ctx_params_default(void) {
    kiln_ctx_params p = {0, 0, NULL, false, KILN_TYPE_F32};
    return p;
}

static kiln_status ctx_init(kiln_ctx *c, const kiln_ctx_params *p) {
    const kiln_hparams *hp = &c->model->hp;
    uint64_t kv_bytes;
    const char *passes = p->passes ? p->passes : getenv("KILN_PASSES");
    const char *check = getenv("KILN_CHECK_PASSES");
    kiln_status s;
    if (p->n_ctx < 0 || p->n_threads < 0)
        return kiln__error(KILN_E_INVALID_ARG, "n_ctx %d and n_threads %d must be >= 0", p->n_ctx, p->n_threads);
    if ((s = kiln__passes_parse(passes && *passes ? passes : "all", &c->passes))) return s;
    if (p->no_fuse) c->passes = kiln__passes_without_fusions(c->passes);
    c->check_passes = check && *check && strcmp(check, "0") != 0;
    c->n_ctx = p->n_ctx ? p->n_ctx : hp->n_ctx_train;
    if (kiln__has(&c->model->pos_embd) && c->n_ctx > hp->n_ctx_train)
        return kiln__error(KILN_E_INVALID_ARG, "n_ctx %d exceeds the %d positions of the model's position table",
                           c->n_ctx, hp->n_ctx_train);
    c->kv_type = p->kv_type;
    if (!kiln__is_kv_cache_type(c->kv_type))
        return kiln__error(KILN_E_UNSUPPORTED, "KV-cache type %d is not one of f32, f16, q8_0", (int)c->kv_type);
    if ((s = kiln_type_row_bytes(c->kv_type, (int64_t)hp->n_head_kv * hp->head_dim, &c->kv_row_bytes)))
        return kiln__error_prefix(s, "a %s KV cache for %d heads of %d: ", kiln__type_name(c->kv_type),
                                  hp->n_head_kv, hp->head_dim);
    kv_bytes = c->kv_row_bytes;
    if (kiln__mul_overflow_u64(kv_bytes, (uint64_t)c->n_ctx * 2u * (uint64_t)hp->n_layer, &kv_bytes) ||
        kv_bytes > SIZE_MAX)
        return kiln__error(KILN_E_RANGE, "a KV cache of %d tokens overflows", c->n_ctx);
    if ((s = kiln__backend_cpu_create(p->n_threads, &c->backend))) return s;
    if ((s = kiln__backend_buffer_alloc(c->backend, (size_t)kv_bytes, &c->kv))) return s;
    memset(c->kv.base, 0, c->kv.size);
    if ((s = kiln__const_store_create(c->backend, &c->consts))) return s;
    c->ids = kiln__alloc_array((size_t)c->n_ctx, sizeof *c->ids);
    c->pos = kiln__alloc_array((size_t)c->n_ctx, sizeof *c->pos);
    if (!c->ids || !c->pos) return kiln__nomem("context buffers");
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
    for (int i = 0; i < KILN_PLAN_CACHE; i++) kiln__compiled_free(&c->plans[i]);
    if (c->backend) {
        kiln__backend_buffer_free(c->backend, &c->kv);
        kiln__backend_buffer_free(c->backend, &c->arena);
    }
    kiln__const_store_destroy(c->consts);
    kiln__backend_destroy(c->backend);
    kiln__dealloc(c->ids);
    kiln__dealloc(c->pos);
    kiln__dealloc(c);
}

int32_t kiln_ctx_n_past(const kiln_ctx *c) { return c->n_past; }
int32_t kiln_ctx_n_ctx(const kiln_ctx *c) { return c->n_ctx; }
void kiln_ctx_reset(kiln_ctx *c) { c->n_past = 0; }

kiln_status kiln_ctx_decode(kiln_ctx *c, const int32_t *tokens, int32_t n, const float **logits) {
    kiln_compiled *plan;
    int32_t n_vocab;
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
    }
    if ((s = kiln__ctx_plan(c, n, &plan))) return s;
    for (int32_t i = 0; i < n; i++) {
        c->ids[i] = tokens[i];
        c->pos[i] = c->n_past + i;
    }
    if ((s = kiln__compiled_run(c, plan))) return s;
    c->n_past += n;
    *logits = plan->logits->data;
    return KILN_OK;
}

kiln_status kiln_ctx_plan_info(kiln_ctx *c, int32_t n_tokens, kiln_plan_info *out) {
    kiln_compiled *plan;
    int32_t count;
    const kiln_pass *passes = kiln__passes(&count);
    kiln_status s;
    if (!c || !out || n_tokens <= 0 || n_tokens > c->n_ctx)
        return kiln__error(KILN_E_INVALID_ARG, "kiln_ctx_plan_info: bad arguments (n_tokens %d)", n_tokens);
    if ((s = kiln__ctx_plan(c, n_tokens, &plan))) return s;
    memset(out, 0, sizeof *out);
    out->n_tokens = n_tokens;
    out->nodes_before = plan->passes.nodes_before;
    out->nodes_after = plan->passes.nodes_after;
    out->rounds = plan->passes.rounds;
    out->n_passes = count;
    for (int32_t i = 0; i < count && i < 16; i++) {
        out->passes[i].name = passes[i].name;
        out->passes[i].ran = plan->passes.pass[i].ran;
        out->passes[i].rewrites = plan->passes.pass[i].rewrites;
        out->passes[i].nodes_after = plan->passes.pass[i].nodes_after;
    }
    out->naive_bytes = plan->plan.naive_bytes;
    out->arena_bytes = plan->plan.arena_bytes;
    out->n_buffers = plan->plan.n_buffers;
    out->n_reused = plan->plan.n_reused;
    out->n_inplace = plan->plan.n_inplace;
    out->const_bytes = kiln__const_store_bytes(c->consts);
    return KILN_OK;
}

kiln_status kiln_ctx_graph_dump(kiln_ctx *c, int32_t n_tokens, bool optimized, bool dot,
                                void (*write)(void *user, const char *line), void *user) {
    kiln_graph *g = NULL;
    kiln_status s;
    if (!c || !write || n_tokens <= 0 || n_tokens > c->n_ctx)
        return kiln__error(KILN_E_INVALID_ARG, "kiln_ctx_graph_dump: bad arguments (n_tokens %d)", n_tokens);
    if ((s = kiln__compile_graph(c, n_tokens, optimized, &g, NULL))) return s;
    if (dot) kiln__graph_dump_dot(g, write, user);
    else kiln__graph_dump(g, write, user);
    kiln__graph_destroy(g);
    return KILN_OK;
}
