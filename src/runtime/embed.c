/*
 * embed.c - sentence embeddings from an encoder's context: which models and parameters make one, what an
 * encoder's batch must hold, and the pooling of its final hidden states on the host.
 *
 * An encoder (a model whose attention is not causal, such as BERT) keeps nothing between batches, as
 * llama.cpp clears the cache for such models: every sequence of a batch starts at position 0 and is whole
 * there (each token sees every token of its sequence, which must all be present), and the cells the batch
 * took are released when it ends. The graph outputs the hidden state of every real token ([E, n], row i
 * = batch token i); pooling here takes, per sequence, the mean of its rows, the row at position 0 (CLS) or
 * the row at its largest position (LAST), then scales the result to unit L2 norm, as sentence-transformers'
 * Normalize does. Pooling on the host costs E * n additions, nothing next to the forward pass, keeps the
 * graph the same for every pooling and every mix of sequences, and needs no per-batch input beyond the
 * sequence ids the context already has.
 */
#include "runtime/context.h"

#include "core/core.h"

#include <math.h>
#include <string.h>

static const char *pooling_name(int32_t p) {
    switch (p) {
    case KILN_POOLING_NONE: return "none";
    case KILN_POOLING_MEAN: return "mean";
    case KILN_POOLING_CLS: return "cls";
    case KILN_POOLING_LAST: return "last";
    default: return "?";
    }
}

kiln_status kiln__embd_init(kiln_ctx *c, const kiln_ctx_params *p) {
    const kiln_model *m = c->model;
    int32_t E = m->hp.n_embd;
    c->embeddings = p->embeddings;
    if (!p->embeddings) {
        if (m->norm_order == KILN_POST_NORM)
            return kiln__error(KILN_E_UNSUPPORTED,
                               "model '%s' is an encoder with no language-model head: create "
                               "its context with kiln_ctx_params.embeddings = true",
                               m->arch);
        return KILN_OK;
    }
    if (m->norm_order != KILN_POST_NORM || m->hp.causal)
        return kiln__error(KILN_E_UNSUPPORTED,
                           "embeddings need an encoder model (such as bert); '%s' is a causal "
                           "decoder",
                           m->arch);
    if (p->pooling != KILN_POOLING_UNSPECIFIED && p->pooling != KILN_POOLING_MEAN &&
        p->pooling != KILN_POOLING_CLS && p->pooling != KILN_POOLING_LAST)
        return kiln__error(KILN_E_INVALID_ARG,
                           "kiln_ctx_params.pooling %d is not one of -1 (the model's), "
                           "1 mean, 2 cls, 3 last",
                           (int)p->pooling);
    c->pooling = p->pooling == KILN_POOLING_UNSPECIFIED ? (kiln_pooling)m->hp.pooling : p->pooling;
    if (c->pooling == KILN_POOLING_NONE)
        return kiln__error(KILN_E_UNSUPPORTED,
                           "the model's %s.pooling_type is 0 (none): choose one with "
                           "kiln_ctx_params.pooling (mean, cls or last)",
                           m->arch);
    c->embd = kiln__alloc_array((size_t)c->n_seq_max * (size_t)E, sizeof *c->embd);
    c->embd_tokens = kiln__calloc((size_t)c->n_seq_max, sizeof *c->embd_tokens);
    if (!c->embd || !c->embd_tokens) return kiln__nomem("the embeddings");
    return KILN_OK;
}

kiln_status kiln__embd_check_token(const kiln_ctx *c, const kiln_batch *b, int32_t i) {
    int32_t s = b->seq_id[i], p = b->pos[i];
    (void)c;
    return kiln__error(KILN_E_INVALID_ARG,
                       "position %d at batch index %d: an encoder takes each sequence whole in one batch, at "
                       "positions 0, 1, 2, ... (sequence %d %s)",
                       p, i, s,
                       p == 0 ? "appears twice at position 0"
                              : "does not continue from the batch's earlier tokens");
}

void kiln__embd_pool(kiln_ctx *c, const kiln_batch *b, const float *hidden) {
    const size_t E = (size_t)c->model->hp.n_embd;
    int32_t last_pos[KILN_SEQ_MAX] = {0};
    memset(c->embd, 0, (size_t)c->n_seq_max * E * sizeof *c->embd);
    for (int32_t i = 0; i < b->n_tokens; i++) {
        int32_t s = b->seq_id[i], p = b->pos[i];
        const float *row = hidden + (size_t)i * E;
        float *dst = c->embd + (size_t)s * E;
        bool take = c->pooling == KILN_POOLING_MEAN || (c->pooling == KILN_POOLING_CLS && p == 0) ||
                    (c->pooling == KILN_POOLING_LAST && (c->embd_tokens[s] == 0 || p > last_pos[s]));
        if (take && c->pooling != KILN_POOLING_MEAN)
            memcpy(dst, row, E * sizeof *dst);
        else if (take)
            for (size_t e = 0; e < E; e++)
                dst[e] += row[e];
        if (c->embd_tokens[s] == 0 || p > last_pos[s]) last_pos[s] = p;
        c->embd_tokens[s]++;
    }
    for (int32_t s = 0; s < c->n_seq_max; s++) {
        float *dst = c->embd + (size_t)s * E;
        double norm = 0.0;
        if (c->embd_tokens[s] == 0) continue;
        if (c->pooling == KILN_POOLING_MEAN)
            for (size_t e = 0; e < E; e++)
                dst[e] /= (float)c->embd_tokens[s];
        for (size_t e = 0; e < E; e++)
            norm += (double)dst[e] * dst[e];
        /* sentence-transformers' Normalize: x / max(||x||, 1e-12) */
        float inv = (float)(1.0 / fmax(sqrt(norm), 1e-12));
        for (size_t e = 0; e < E; e++)
            dst[e] *= inv;
    }
}

const float *kiln_ctx_embeddings_seq(kiln_ctx *c, int32_t seq) {
    if (!c || !c->embeddings) {
        kiln__error(KILN_E_INVALID_ARG, "kiln_ctx_embeddings_seq: %s",
                    c ? "this context computes logits "
                        "(create it with kiln_ctx_params.embeddings = true)"
                      : "ctx is NULL");
        return NULL;
    }
    if (seq < 0 || seq >= c->n_seq_max) {
        kiln__error(KILN_E_INVALID_ARG, "kiln_ctx_embeddings_seq: sequence id %d is outside 0..%d", seq,
                    c->n_seq_max - 1);
        return NULL;
    }
    if (c->embd_tokens[seq] == 0) {
        kiln__error(KILN_E_INVALID_ARG,
                    "kiln_ctx_embeddings_seq: sequence %d had no tokens in the last batch "
                    "(%s pooling)",
                    seq, pooling_name(c->pooling));
        return NULL;
    }
    return c->embd + (size_t)seq * (size_t)c->model->hp.n_embd;
}
