/*
 * compile.h - an inference context's private state and its compiled plans (context.c, compile.c).
 *
 * A compiled plan is the forward graph for one bucket of batch size (tokens, and rows of logits) after the
 * pass pipeline, with its memory planned. Its inputs are leaves the context fills before each run: token
 * ids, positions, the KV cells the tokens are written to, the attention mask over every cell, and which
 * tokens' outputs to compute (logits, or an encoder's hidden states, which embed.c pools). Batches are padded up to the bucket: padding tokens write no cell, see no
 * key, and produce no logits that anyone reads. The context keeps up to KILN_PLAN_CACHE plans (least
 * recently used replaced); all share one arena per backend, grown to the largest.
 */
#ifndef KILN_RUNTIME_COMPILE_H
#define KILN_RUNTIME_COMPILE_H

#include "model/model.h"

#include "backend/backend.h"
#include "graph/passes/passes.h"
#include "plan/plan.h"
#include "runtime/engine.h"
#include "runtime/kv_cache.h"

#define KILN_PLAN_CACHE 8

typedef struct kiln_compiled {
    int32_t n_tokens;  /* the token bucket T; 0 = empty slot */
    int32_t n_outputs; /* the logits bucket O (1 <= O <= T) */
    kiln_graph *graph;
    kiln_tensor *ids, *pos, *cells, *mask, *out_ids; /* the input leaves: [T], [T], [T], [C, T], [O] */
    kiln_tensor *output; /* [V, O] logits, or [E, O] hidden states of an encoder; in host memory */
    kiln_sched_plan *sched; /* which backend runs each node; the copies between them */
    kiln_plan_stats plan;
    kiln_pipeline_stats passes;
    double compile_ms;
    uint64_t last_used;
} kiln_compiled;

struct kiln_ctx {
    const kiln_model *model;
    kiln_engine *engine; /* the model's, borrowed */
    int32_t n_ctx;       /* KV cells */
    int32_t n_batch;     /* most tokens per batch */
    int32_t n_seq_max;
    kiln_kv_cells cells;
    kiln_buffer
        kv; /* layers kv_first .. L - 1: [L - kv_first][K|V][n_ctx rows of Hkv * D elements of kv_type] */
    kiln_buffer kv_host; /* layers 0 .. kv_first - 1, in host memory, when kv is on a device that runs only
                          * the last layers (partial offload); else empty */
    int32_t kv_first;
    kiln_type kv_type;
    size_t kv_row_bytes;
    kiln_buffer arenas[KILN_MAX_BACKENDS]; /* planned intermediates per backend, shared by all plans */
    kiln_pass_set passes;
    bool check_passes;
    kiln_abort_fn abort_fn;
    void *abort_user;
    kiln_log_fn log;
    void *log_user;
    bool embeddings;      /* the context pools hidden states into embeddings (embed.c), no logits */
    kiln_pooling pooling; /* embeddings: MEAN, CLS or LAST */
    /* Inputs of the current batch, sized for the largest bucket. */
    int32_t *ids, *pos, *cell_of, *seq, *out_ids; /* [bucket(n_batch)] */
    float *mask;                                  /* [n_ctx * T] for the largest T compiled so far */
    size_t mask_cap;                              /* floats */
    /* Outputs of the last batch. */
    int32_t *out_row;                   /* [n_batch] batch index -> logits row, or -1 */
    int32_t n_outputs;                  /* rows of logits the last batch asked for */
    const float *logits;                /* [n_outputs][V], in the plan's output */
    int32_t n_last;                     /* tokens of the last batch */
    float *embd;                        /* [n_seq_max][E] the pooled embeddings of the last batch */
    int32_t *embd_tokens;               /* [n_seq_max] tokens each sequence had in it (0: no embedding) */
    int32_t *scratch_pos, *scratch_seq; /* [n_batch] the batches kiln_ctx_decode makes */
    int8_t *scratch_logits;
    kiln_compiled plans[KILN_PLAN_CACHE];
    uint64_t clock;
};

/* The bucket of a batch of n tokens (n <= n_batch): the next power of two, at most n_batch's. */
int32_t kiln__bucket(const kiln_ctx *c, int32_t n);

/* Build the graph for T tokens and O output rows into a new graph, optionally running the passes. */
kiln_status kiln__compile_graph(kiln_ctx *c, int32_t T, int32_t O, bool optimize, kiln_graph **out,
                                kiln_pipeline_stats *stats);
/* The plan for buckets (T, O) from the cache, compiled if missing. Called with the engine lock held. */
kiln_status kiln__ctx_plan(kiln_ctx *c, int32_t T, int32_t O, kiln_compiled **out);
/* Point the plan's inputs at the context's buffers, commit it into the arena and compute. Called with
 * the engine lock held. */
kiln_status kiln__compiled_run(kiln_ctx *c, kiln_compiled *plan);
void kiln__compiled_free(kiln_compiled *plan);

/* Embeddings (embed.c). Check the context parameters against the model and choose the pooling. */
kiln_status kiln__embd_init(kiln_ctx *c, const kiln_ctx_params *p);
/* An encoder's batch holds whole sequences from position 0: refuse token i of b otherwise. */
kiln_status kiln__embd_check_token(const kiln_ctx *c, const kiln_batch *b, int32_t i);
/* Pool the hidden states [E, n] of the batch's n tokens (row i is token i) into each sequence's unit
 * embedding. */
void kiln__embd_pool(kiln_ctx *c, const kiln_batch *b, const float *hidden);

/* Where layer il's K cache starts (its V cache follows n_ctx rows later): in kv_host below kv_first, else in
 * kv. */
char *kiln__ctx_cache_base(const kiln_ctx *c, int32_t il);

#endif
