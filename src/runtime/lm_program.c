/*
 * lm_program.c - the language model's program (see context.h): its inputs, its key (the token bucket T
 * and the output bucket O) and its builder, which emits the input leaves, the KV cache leaves, and the
 * architecture's forward pass (kiln__model_build).
 */
#include "runtime/context.h"

#include "core/core.h"

#include <string.h>

static const char *const input_names[KILN_LM_N_INPUTS] = {"ids", "pos", "kv_cells", "kq_mask", "out_ids"};

int32_t kiln__bucket(const kiln_ctx *c, int32_t n) {
    int32_t b = 1;
    while (b < n)
        b *= 2;
    return KILN__MIN(b, c->n_batch);
}

/* Room for the forward pass of any bucket: the builders emit under 192 tensors per layer. */
static int32_t capacity(void *user, const int64_t *key) {
    const kiln_ctx *c = user;
    (void)key;
    return 192 * c->model->hp.n_layer + 256;
}

/* The cost rule sees the batch's tokens. */
static int32_t work(void *user, const int64_t *key) {
    (void)user;
    return (int32_t)key[0];
}

/* The input leaves, the cache leaves, then the architecture's forward pass. Input data pointers are bound
 * before each run (kiln__lm_run); here they point at the context's buffers as they are now. */
static kiln_status build(void *user, kiln_graph *g, const int64_t *key) {
    kiln_ctx *c = user;
    const kiln_hparams *hp = &c->model->hp;
    int32_t T = (int32_t)key[0], O = (int32_t)key[1];
    int64_t ne_t[1] = {T}, ne_o[1] = {O}, ne_mask[2] = {c->n_ctx, T};
    int64_t ne_cache[2] = {(int64_t)hp->n_head_kv * hp->head_dim, c->n_ctx};
    size_t cache_bytes = c->kv_row_bytes * (size_t)ne_cache[1];
    kiln_batch_inputs in = {0};
    kiln_tensor *output;
    kiln_tensor **caches = kiln__alloc_array(2 * (size_t)hp->n_layer, sizeof *caches);
    if (!caches) return kiln__nomem("cache leaves");
    in.ids = kiln__graph_leaf(g, input_names[KILN_LM_IDS], KILN_TYPE_I32, 1, ne_t, c->ids, KILN_TENSOR_INPUT);
    in.pos = kiln__graph_leaf(g, input_names[KILN_LM_POS], KILN_TYPE_I32, 1, ne_t, c->pos, KILN_TENSOR_INPUT);
    in.cells = kiln__graph_leaf(g, input_names[KILN_LM_CELLS], KILN_TYPE_I32, 1, ne_t, c->cell_of,
                                KILN_TENSOR_INPUT);
    in.mask =
        kiln__graph_leaf(g, input_names[KILN_LM_MASK], KILN_TYPE_F32, 2, ne_mask, c->mask, KILN_TENSOR_INPUT);
    in.out_ids = kiln__graph_leaf(g, input_names[KILN_LM_OUT_IDS], KILN_TYPE_I32, 1, ne_o, c->out_ids,
                                  KILN_TENSOR_INPUT);
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
    output = kiln__model_build(c->model, g, &in);
    (void)output; /* the builder marked it as the graph's output */
    kiln__dealloc(caches);
    return KILN_OK;
}

kiln_status kiln__lm_program_create(kiln_ctx *c, const kiln_ctx_params *p) {
    kiln_program_def def;
    kiln_status s;
    memset(&def, 0, sizeof def);
    def.name = c->embeddings ? "encoder" : "decoder";
    def.n_inputs = KILN_LM_N_INPUTS;
    def.inputs = input_names;
    def.n_key = 2;
    def.capacity = capacity;
    def.build = build;
    def.work = work;
    def.user = c;
    if ((s = kiln__passes_parse(p->passes && *p->passes ? p->passes : "all", &def.passes))) return s;
    if (p->no_fuse) def.passes = kiln__passes_without_fusions(def.passes);
    def.check_passes = p->check_passes;
    def.log = p->log;
    def.log_user = p->log_user;
    return kiln__program_create(c->engine, &def, &c->program);
}

kiln_status kiln__lm_plan(kiln_ctx *c, int32_t T, int32_t O, kiln_program_plan **out) {
    int64_t key[2] = {T, O};
    size_t need = (size_t)c->n_ctx * (size_t)T; /* the mask for T tokens; no overflow: n_ctx, T < 2^31 */
    if (need > c->mask_cap) {
        float *m = kiln__realloc_array(c->mask, need, sizeof *m);
        if (!m) return kiln__nomem("the attention mask");
        c->mask = m;
        c->mask_cap = need;
    }
    return kiln__program_plan(c->program, key, out);
}

kiln_status kiln__lm_run(kiln_ctx *c, kiln_program_plan *plan) {
    kiln__program_bind(plan, KILN_LM_IDS, c->ids);
    kiln__program_bind(plan, KILN_LM_POS, c->pos);
    kiln__program_bind(plan, KILN_LM_CELLS, c->cell_of);
    kiln__program_bind(plan, KILN_LM_MASK, c->mask);
    kiln__program_bind(plan, KILN_LM_OUT_IDS, c->out_ids);
    return kiln__program_run(c->program, plan);
}
