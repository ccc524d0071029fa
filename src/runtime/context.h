/*
 * context.h - an inference context's private state (context.c) and its program (lm_program.c).
 *
 * A context is the language-model client of a compiled program (program.h): the program's graph is the
 * model's forward pass for one batch, keyed by (T, O): the batch's token bucket and its bucket of output
 * rows. Its inputs are leaves the context fills before each run: token ids, positions, the KV cells the
 * tokens are written to, the attention mask over every cell, and which tokens' outputs to compute (logits,
 * or an encoder's hidden states, which embed.c pools); its one output is those rows. Batches are padded up
 * to the bucket: padding tokens write no cell, see no key, and produce no logits that anyone reads. The
 * KV cache is the context's own buffer, a leaf of every plan.
 */
#ifndef KILN_RUNTIME_CONTEXT_H
#define KILN_RUNTIME_CONTEXT_H

#include "model/model.h"

#include "backend/backend.h"
#include "runtime/engine.h"
#include "runtime/kv_cache.h"
#include "runtime/program.h"

/* The program's inputs, in this order (kiln__program_bind). */
enum { KILN_LM_IDS, KILN_LM_POS, KILN_LM_CELLS, KILN_LM_MASK, KILN_LM_OUT_IDS, KILN_LM_N_INPUTS };

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
    kiln_program *program; /* the forward pass, compiled per (T, O) */
    kiln_abort_fn abort_fn;
    void *abort_user;
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
};

/* The bucket of a batch of n tokens (n <= n_batch): the next power of two, at most n_batch's. */
int32_t kiln__bucket(const kiln_ctx *c, int32_t n);

/* The context's program (lm_program.c): created by ctx_init once the buffers exist. */
kiln_status kiln__lm_program_create(kiln_ctx *c, const kiln_ctx_params *p);
/* The plan for buckets (T, O), compiled on first use; the mask buffer grown to T first. With the engine
 * lock held. */
kiln_status kiln__lm_plan(kiln_ctx *c, int32_t T, int32_t O, kiln_program_plan **out);
/* Bind the context's input buffers to the plan and compute. With the engine lock held. */
kiln_status kiln__lm_run(kiln_ctx *c, kiln_program_plan *plan);

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
