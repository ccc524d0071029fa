/*
 * context.c - an inference context: the KV cache (its cell table and its buffer), the inputs and outputs
 * of a batch, and the program that computes it (lm_program.c, on program.h). The engine (backends,
 * prepared weights, constants) belongs to the model and is borrowed.
 *
 * kiln_ctx_decode_batch validates the whole batch first, finds free cells for its tokens, fills the
 * inputs (ids, positions, cells, the attention mask, which tokens want logits), takes the plan for its
 * bucket (compiling it on first use) and computes under the engine lock. If anything fails after the
 * cells were taken, they are given back, so a failed batch changes nothing. Only compiling allocates: a
 * warmed-up decode step allocates nothing.
 *
 * An embeddings context (an encoder's) computes every token's final hidden state instead of logits; the
 * batch's sequences are pooled into embeddings (embed.c) and their cells released when it ends.
 */
#include "runtime/context.h"

#include "core/core.h"
#include "tensor/types.h"

#include <string.h>

#define DEFAULT_BATCH 512

kiln_ctx_params kiln_ctx_params_default(void) {
    kiln_ctx_params p;
    memset(&p, 0, sizeof p);
    p.kv_type = KILN_TYPE_F32;
    p.pooling = KILN_POOLING_UNSPECIFIED;
    return p;
}

static kiln_status check_params(const kiln_model *m, const kiln_ctx_params *p) {
    if (p->n_ctx < 0 || p->n_batch < 0 || p->n_seq_max < 0)
        return kiln__error(KILN_E_INVALID_ARG, "n_ctx %d, n_batch %d and n_seq_max %d must be >= 0", p->n_ctx,
                           p->n_batch, p->n_seq_max);
    if (p->n_ctx > KILN_MAX_CTX || p->n_batch > KILN_MAX_BATCH)
        return kiln__error(KILN_E_INVALID_ARG,
                           "n_ctx %d or n_batch %d is over its limit (KILN_MAX_CTX %d, KILN_MAX_BATCH %d)",
                           p->n_ctx, p->n_batch, KILN_MAX_CTX, KILN_MAX_BATCH);
    if (p->n_seq_max > KILN_SEQ_MAX)
        return kiln__error(KILN_E_INVALID_ARG, "n_seq_max %d exceeds KILN_SEQ_MAX (%d)", p->n_seq_max,
                           KILN_SEQ_MAX);
    if (kiln__has(&m->pos_embd) && p->n_ctx > m->hp.n_ctx_train)
        return kiln__error(KILN_E_INVALID_ARG,
                           "n_ctx %d exceeds the %d positions of the model's position table", p->n_ctx,
                           m->hp.n_ctx_train);
    if (!kiln__is_kv_cache_type(p->kv_type))
        return kiln__error(KILN_E_UNSUPPORTED, "KV-cache type %d is not one of f32, f16, q8_0",
                           (int)p->kv_type);
    return KILN_OK;
}

/* The backend whose buffers hold the KV cache: the first device backend that takes every batch (no cost
 * rule) and says it holds caches of this type and size, else the CPU. The scheduler then runs every node
 * that touches the cache there (runtime/sched.h). With partial offload the device holds only the layers it
 * runs (engine.h's first_layer), and none when it runs none. */
static kiln_backend *kv_backend(const kiln_ctx *c) {
    const kiln_engine *e = c->engine;
    if (e->first_layer >= c->model->hp.n_layer) return e->cpu;
    for (int32_t i = 0; i < e->n_backends - 1; i++)
        if (e->min_batch[i] == 0 && kiln__backend_holds_kv(e->backends[i], c->kv_type, c->kv_row_bytes, c->n_ctx))
            return e->backends[i];
    return e->cpu;
}

/* The cache buffers, zeroed: the layers from kv_first in kv_backend's, those before in the CPU's. */
static kiln_status alloc_kv(kiln_ctx *c, size_t layer_bytes) {
    kiln_backend *b = kv_backend(c);
    int32_t L = c->model->hp.n_layer;
    kiln_status s;
    c->kv_first = b == c->engine->cpu ? 0 : KILN__MIN(c->engine->first_layer, L);
    s = kiln__backend_buffer_alloc(b, layer_bytes * (size_t)(L - c->kv_first), &c->kv);
    if (!s) s = kiln__buffer_memset(&c->kv, 0, 0, c->kv.size);
    if (!s && c->kv_first > 0)
        s = kiln__backend_buffer_alloc(c->engine->cpu, layer_bytes * (size_t)c->kv_first, &c->kv_host);
    if (!s && c->kv_first > 0) s = kiln__buffer_memset(&c->kv_host, 0, 0, c->kv_host.size);
    return s;
}

char *kiln__ctx_cache_base(const kiln_ctx *c, int32_t il) {
    size_t layer = 2 * c->kv_row_bytes * (size_t)c->n_ctx;
    if (il < c->kv_first) return (char *)c->kv_host.base + (size_t)il * layer;
    return (char *)c->kv.base + (size_t)(il - c->kv_first) * layer;
}

static kiln_status ctx_init(kiln_ctx *c, const kiln_ctx_params *p) {
    const kiln_hparams *hp = &c->model->hp;
    uint64_t kv_bytes;
    size_t T;
    kiln_status s;
    if ((s = check_params(c->model, p))) return s;
    c->abort_fn = p->abort_fn;
    c->abort_user = p->abort_user;
    c->n_ctx = p->n_ctx ? p->n_ctx : hp->n_ctx_train;
    c->n_batch = KILN__MIN(p->n_batch ? p->n_batch : DEFAULT_BATCH, c->n_ctx);
    c->n_seq_max = p->n_seq_max ? p->n_seq_max : 1;
    c->kv_type = p->kv_type;
    if ((s = kiln__embd_init(c, p))) return s;
    if ((s = kiln_type_row_bytes(c->kv_type, (int64_t)hp->n_head_kv * hp->head_dim, &c->kv_row_bytes)))
        return kiln__error_prefix(s, "a %s KV cache for %d heads of %d: ", kiln__type_name(c->kv_type),
                                  hp->n_head_kv, hp->head_dim);
    kv_bytes = c->kv_row_bytes;
    if (kiln__mul_overflow_u64(kv_bytes, (uint64_t)c->n_ctx * 2u * (uint64_t)hp->n_layer, &kv_bytes) ||
        kv_bytes > SIZE_MAX)
        return kiln__error(KILN_E_RANGE, "a KV cache of %d tokens overflows", c->n_ctx);
    if ((s = kiln__kv_init(&c->cells, c->n_ctx, c->n_seq_max))) return s;
    /* Fresh cells are never read before they are written (the mask hides them), but zeroed K and V keep a
     * stray read finite. Under the engine lock: on a device the allocation and the fill use its memory pool
     * and queue, which another context of the model may be computing on from another thread. */
    pthread_mutex_lock(&c->engine->lock);
    s = alloc_kv(c, hp->n_layer > 0 ? (size_t)kv_bytes / (size_t)hp->n_layer : 0);
    pthread_mutex_unlock(&c->engine->lock);
    if (s) return s;
    T = (size_t)kiln__bucket(c, c->n_batch);
    c->ids = kiln__calloc(T, sizeof *c->ids);
    c->pos = kiln__calloc(T, sizeof *c->pos);
    c->cell_of = kiln__calloc(T, sizeof *c->cell_of);
    c->seq = kiln__calloc(T, sizeof *c->seq);
    c->out_ids = kiln__calloc(T, sizeof *c->out_ids);
    c->out_row = kiln__calloc(T, sizeof *c->out_row);
    c->scratch_pos = kiln__calloc(T, sizeof *c->scratch_pos);
    c->scratch_seq = kiln__calloc(T, sizeof *c->scratch_seq);
    c->scratch_logits = kiln__calloc(T, sizeof *c->scratch_logits);
    if (!c->ids || !c->pos || !c->cell_of || !c->seq || !c->out_ids || !c->out_row || !c->scratch_pos ||
        !c->scratch_seq || !c->scratch_logits)
        return kiln__nomem("context buffers");
    return kiln__lm_program_create(c, p);
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
    c->engine = model->engine;
    if ((s = ctx_init(c, &p))) {
        kiln_ctx_destroy(c);
        return s;
    }
    *out = c;
    return KILN_OK;
}

void kiln_ctx_destroy(kiln_ctx *c) {
    if (!c) return;
    pthread_mutex_lock(&c->engine->lock); /* device buffers go back to pools other contexts use */
    kiln__program_destroy(c->program);
    if (c->kv.backend) kiln__backend_buffer_free(c->kv.backend, &c->kv);
    if (c->kv_host.backend) kiln__backend_buffer_free(c->kv_host.backend, &c->kv_host);
    pthread_mutex_unlock(&c->engine->lock);
    kiln__kv_free(&c->cells);
    kiln__dealloc(c->ids);
    kiln__dealloc(c->pos);
    kiln__dealloc(c->cell_of);
    kiln__dealloc(c->seq);
    kiln__dealloc(c->out_ids);
    kiln__dealloc(c->out_row);
    kiln__dealloc(c->scratch_pos);
    kiln__dealloc(c->scratch_seq);
    kiln__dealloc(c->scratch_logits);
    kiln__dealloc(c->mask);
    kiln__dealloc(c->embd);
    kiln__dealloc(c->embd_tokens);
    kiln__dealloc(c);
}

int32_t kiln_ctx_n_past(const kiln_ctx *c) {
    return c ? kiln__kv_seq_pos_max(&c->cells, 0) + 1 : 0;
}
int32_t kiln_ctx_n_ctx(const kiln_ctx *c) {
    return c ? c->n_ctx : 0;
}
int32_t kiln_ctx_n_batch(const kiln_ctx *c) {
    return c ? c->n_batch : 0;
}
int32_t kiln_ctx_n_seq_max(const kiln_ctx *c) {
    return c ? c->n_seq_max : 0;
}

void kiln_ctx_reset(kiln_ctx *c) {
    if (!c) return;
    kiln__kv_clear(&c->cells);
    c->n_outputs = 0;
    c->logits = NULL;
    if (c->embd_tokens) memset(c->embd_tokens, 0, (size_t)c->n_seq_max * sizeof *c->embd_tokens);
}

/* Every token's fields, and each sequence's positions continuing where it stands. last[s] is the position
 * the next token of s must have; it starts at pos_max + 1. */
static kiln_status check_batch(const kiln_ctx *c, const kiln_batch *b) {
    int32_t next[KILN_SEQ_MAX], n_vocab = c->model->hp.n_vocab;
    if (b->n_tokens <= 0 || b->n_tokens > c->n_batch)
        return kiln__error(KILN_E_INVALID_ARG, "batch has %d tokens; this context takes 1 to n_batch = %d",
                           b->n_tokens, c->n_batch);
    if (b->n_tokens > b->capacity || !b->token || !b->pos || !b->seq_id || !b->logits)
        return kiln__error(KILN_E_INVALID_ARG,
                           "batch arrays are missing or smaller than n_tokens %d (capacity %d)", b->n_tokens,
                           b->capacity);
    for (int32_t s = 0; s < c->n_seq_max; s++)
        next[s] = kiln__kv_seq_pos_max(&c->cells, s) + 1;
    for (int32_t i = 0; i < b->n_tokens; i++) {
        int32_t s = b->seq_id[i], p = b->pos[i];
        if (b->token[i] < 0 || b->token[i] >= n_vocab)
            return kiln__error(KILN_E_INVALID_ARG,
                               "token %d at batch index %d is outside the vocabulary (0..%d)", b->token[i], i,
                               n_vocab - 1);
        if (s < 0 || s >= c->n_seq_max)
            return kiln__error(KILN_E_INVALID_ARG, "sequence id %d at batch index %d is outside 0..%d", s, i,
                               c->n_seq_max - 1);
        if (c->embeddings && p != next[s]) return kiln__embd_check_token(c, b, i);
        if (p != next[s])
            return kiln__error(
                KILN_E_INVALID_ARG,
                "position %d at batch index %d does not continue sequence %d, which expects %d", p, i, s,
                next[s]);
        if (kiln__has(&c->model->pos_embd) && p >= c->model->hp.n_ctx_train)
            return kiln__error(KILN_E_INVALID_ARG,
                               "position %d at batch index %d is past the model's %d positions", p, i,
                               c->model->hp.n_ctx_train);
        if (p == INT32_MAX)
            return kiln__error(KILN_E_RANGE, "sequence %d has reached the largest position", s);
        next[s] = p + 1;
    }
    return KILN_OK;
}

/* Fill the inputs for the batch, padded to T tokens and O output rows. An embeddings context outputs
 * every token (O = T), whatever the batch's logits flags say. */
static void fill_inputs(kiln_ctx *c, const kiln_batch *b, int32_t T, int32_t O) {
    int32_t n = b->n_tokens, n_out = 0;
    for (int32_t i = 0; i < T; i++) {
        bool real = i < n;
        c->ids[i] = real ? b->token[i] : 0;
        c->pos[i] = real ? b->pos[i] : 0;
        c->seq[i] = real ? b->seq_id[i] : 0;
        if (!real) c->cell_of[i] = -1; /* padding writes no cell */
        bool out = real && (b->logits[i] || c->embeddings);
        if (real) c->out_row[i] = out ? n_out : -1;
        if (out) c->out_ids[n_out++] = i;
    }
    if (n_out == 0) c->out_ids[n_out] = n - 1; /* the graph computes one row at least; nobody reads it */
    for (int32_t j = KILN__MAX(n_out, 1); j < O; j++)
        c->out_ids[j] = c->out_ids[0];
    c->n_outputs = n_out;
    c->n_last = n;
    kiln__kv_fill_mask(&c->cells, c->pos, c->seq, n, T, c->model->hp.n_swa, c->model->hp.causal, c->mask);
}

kiln_status kiln_ctx_decode_batch(kiln_ctx *c, const kiln_batch *b) {
    kiln_program_plan *plan = NULL;
    int32_t T, O, n_out = 0;
    kiln_status s;
    if (!c || !b) return kiln__error(KILN_E_INVALID_ARG, "kiln_ctx_decode_batch: NULL argument");
    c->n_outputs = 0;
    c->logits = NULL;
    if (c->embeddings) memset(c->embd_tokens, 0, (size_t)c->n_seq_max * sizeof *c->embd_tokens);
    if ((s = check_batch(c, b))) return s;
    for (int32_t i = 0; i < b->n_tokens; i++)
        n_out += b->logits[i] != 0 || c->embeddings;
    T = kiln__bucket(c, b->n_tokens);
    O = KILN__MIN(kiln__bucket(c, KILN__MAX(n_out, 1)), T);
    if ((s = kiln__kv_find(&c->cells, b->n_tokens, c->cell_of))) return s;
    pthread_mutex_lock(&c->engine->lock);
    s = kiln__lm_plan(c, T, O, &plan);
    if (!s) {
        kiln__kv_occupy(&c->cells, c->cell_of, b->pos, b->seq_id, b->n_tokens);
        fill_inputs(c, b, T, O);
        for (int32_t i = 0; i < c->engine->n_backends; i++)
            kiln__backend_set_abort(c->engine->backends[i], c->abort_fn, c->abort_user);
        s = kiln__lm_run(c, plan);
        for (int32_t i = 0; i < c->engine->n_backends; i++)
            kiln__backend_set_abort(c->engine->backends[i], NULL, NULL);
        if (s || c->embeddings) kiln__kv_release(&c->cells, c->cell_of, b->n_tokens); /* see embed.c */
    }
    pthread_mutex_unlock(&c->engine->lock);
    if (s) {
        c->n_outputs = 0;
        return s;
    }
    if (c->embeddings) {
        kiln__embd_pool(c, b, kiln__program_output(plan, 0)->data);
        c->n_outputs = 0;
        return KILN_OK;
    }
    c->logits = kiln__program_output(plan, 0)->data;
    return KILN_OK;
}

const float *kiln_ctx_logits(kiln_ctx *c, int32_t i) {
    int32_t row;
    if (c && c->embeddings) {
        kiln__error(KILN_E_INVALID_ARG, "kiln_ctx_logits: this context computes embeddings (kiln_ctx_params."
                                        "embeddings), not logits: use kiln_ctx_embeddings_seq");
        return NULL;
    }
    if (!c || !c->logits) {
        kiln__error(KILN_E_INVALID_ARG, "kiln_ctx_logits: no batch with logits has run on this context");
        return NULL;
    }
    if (i < 0) {
        row = c->n_outputs + i;
        if (row < 0) {
            kiln__error(KILN_E_INVALID_ARG,
                        "kiln_ctx_logits: index %d, but the last batch has %d rows of logits", i,
                        c->n_outputs);
            return NULL;
        }
    } else {
        row = i < c->n_last ? c->out_row[i] : -1;
        if (row < 0) {
            kiln__error(KILN_E_INVALID_ARG,
                        "kiln_ctx_logits: token %d of the last batch (of %d) did not ask for logits", i,
                        c->n_last);
            return NULL;
        }
    }
    return c->logits + (size_t)row * (size_t)c->model->hp.n_vocab;
}

kiln_status kiln_ctx_decode(kiln_ctx *c, const int32_t *tokens, int32_t n, const float **logits) {
    kiln_batch b = {0};
    int32_t p0;
    kiln_status s = KILN_OK;
    if (!c || !tokens || !logits) return kiln__error(KILN_E_INVALID_ARG, "kiln_ctx_decode: NULL argument");
    *logits = NULL;
    if (n <= 0) return kiln__error(KILN_E_INVALID_ARG, "kiln_ctx_decode: %d tokens (need at least 1)", n);
    if (c->embeddings)
        return kiln__error(KILN_E_INVALID_ARG, "kiln_ctx_decode: this context computes embeddings, not logits: "
                                               "use kiln_ctx_decode_batch and kiln_ctx_embeddings_seq");
    if (n > c->n_ctx - c->cells.n_used)
        return kiln__error(KILN_E_CONTEXT_FULL, "%d tokens do not fit: %d of %d context positions are used",
                           n, c->cells.n_used, c->n_ctx);
    p0 = kiln__kv_seq_pos_max(&c->cells, 0) + 1;
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->model->hp.n_vocab)
            return kiln__error(KILN_E_INVALID_ARG, "token %d at index %d is outside the vocabulary (0..%d)",
                               tokens[i], i, c->model->hp.n_vocab - 1);
    /* Each chunk is a batch over the context's own arrays, so that this allocates nothing. */
    for (int32_t done = 0; done < n && !s; done += c->n_batch) {
        int32_t m = KILN__MIN(c->n_batch, n - done);
        b.n_tokens = m;
        b.capacity = m;
        b.token = (int32_t *)tokens + done;
        b.pos = c->scratch_pos;
        b.seq_id = c->scratch_seq;
        b.logits = c->scratch_logits;
        for (int32_t i = 0; i < m; i++) {
            c->scratch_pos[i] = p0 + done + i;
            c->scratch_seq[i] = 0;
            c->scratch_logits[i] = done + i == n - 1;
        }
        s = kiln_ctx_decode_batch(c, &b);
    }
    if (s) {
        /* Earlier chunks are in the cache: take them back so that a failure changes nothing. */
        kiln__kv_seq_rm(&c->cells, 0, p0, INT32_MAX);
        return s;
    }
    *logits = kiln_ctx_logits(c, -1);
    return KILN_OK;
}

kiln_status kiln_ctx_plan_info(kiln_ctx *c, int32_t n_tokens, int32_t n_outputs, kiln_plan_info *out) {
    kiln_program_plan *plan;
    int32_t count, T, O;
    const kiln_pass *passes = kiln__passes(&count);
    kiln_status s;
    if (!c || !out || n_tokens <= 0 || n_tokens > c->n_batch || n_outputs < 0 || n_outputs > n_tokens)
        return kiln__error(
            KILN_E_INVALID_ARG,
            "kiln_ctx_plan_info: n_tokens %d must be in 1..n_batch and n_outputs %d in 0..n_tokens", n_tokens,
            n_outputs);
    n_outputs = KILN__MAX(n_outputs, 1);
    T = kiln__bucket(c, n_tokens);
    O = KILN__MIN(kiln__bucket(c, n_outputs), T);
    pthread_mutex_lock(&c->engine->lock);
    s = kiln__lm_plan(c, T, O, &plan);
    pthread_mutex_unlock(&c->engine->lock);
    if (s) return s;
    memset(out, 0, sizeof *out);
    out->n_tokens = T;
    out->n_outputs = O;
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
    out->const_bytes = kiln__const_store_bytes(c->engine->consts);
    out->n_splits = kiln__sched_plan_n_splits(plan->sched);
    out->n_copies = kiln__sched_plan_n_copies(plan->sched);
    out->compile_ms = plan->compile_ms;
    return KILN_OK;
}

kiln_status kiln_ctx_graph_dump(kiln_ctx *c, int32_t n_tokens, bool optimized, bool dot,
                                void (*write)(void *user, const char *line), void *user) {
    kiln_graph *g = NULL;
    kiln_status s;
    if (!c || !write || n_tokens <= 0 || n_tokens > c->n_batch)
        return kiln__error(KILN_E_INVALID_ARG, "kiln_ctx_graph_dump: n_tokens %d must be in 1..n_batch (%d)",
                           n_tokens, c ? c->n_batch : 0);
    pthread_mutex_lock(&c->engine->lock);
    s = kiln__program_graph(c->program, (const int64_t[2]){n_tokens, 1}, optimized, &g, NULL);
    pthread_mutex_unlock(&c->engine->lock);
    if (s) return s;
    if (dot)
        kiln__graph_dump_dot(g, write, user);
    else
        kiln__graph_dump(g, write, user);
    kiln__graph_destroy(g);
    return KILN_OK;
}
