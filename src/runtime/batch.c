/*
 * batch.c - the public batch type and the KV-cache calls of a context: argument checks at the boundary,
 * then the cell table (kv_cache.c).
 */
#include "runtime/context.h"

#include "core/core.h"

#include <string.h>

kiln_status kiln_batch_init(int32_t capacity, kiln_batch *out) {
    if (!out) return kiln__error(KILN_E_INVALID_ARG, "kiln_batch_init: out is NULL");
    memset(out, 0, sizeof *out);
    if (capacity <= 0 || capacity > KILN_MAX_BATCH)
        return kiln__error(KILN_E_INVALID_ARG,
                           "kiln_batch_init: capacity %d is not in 1..%d (KILN_MAX_BATCH)", capacity,
                           KILN_MAX_BATCH);
    out->token = kiln__calloc((size_t)capacity, sizeof *out->token);
    out->pos = kiln__calloc((size_t)capacity, sizeof *out->pos);
    out->seq_id = kiln__calloc((size_t)capacity, sizeof *out->seq_id);
    out->logits = kiln__calloc((size_t)capacity, sizeof *out->logits);
    if (!out->token || !out->pos || !out->seq_id || !out->logits) {
        kiln_batch_free(out);
        return kiln__nomem("a batch");
    }
    out->capacity = capacity;
    return KILN_OK;
}

void kiln_batch_free(kiln_batch *b) {
    if (!b) return;
    kiln__dealloc(b->token);
    kiln__dealloc(b->pos);
    kiln__dealloc(b->seq_id);
    kiln__dealloc(b->logits);
    memset(b, 0, sizeof *b);
}

kiln_status kiln_batch_add(kiln_batch *b, int32_t token, int32_t pos, int32_t seq_id, bool logits) {
    if (!b) return kiln__error(KILN_E_INVALID_ARG, "kiln_batch_add: batch is NULL");
    if (b->n_tokens < 0 || b->n_tokens >= b->capacity)
        return kiln__error(KILN_E_RANGE, "kiln_batch_add: the batch is full (%d of %d tokens)", b->n_tokens,
                           b->capacity);
    b->token[b->n_tokens] = token;
    b->pos[b->n_tokens] = pos;
    b->seq_id[b->n_tokens] = seq_id;
    b->logits[b->n_tokens] = logits ? 1 : 0;
    b->n_tokens++;
    return KILN_OK;
}

void kiln_batch_clear(kiln_batch *b) {
    if (b) b->n_tokens = 0;
}

static kiln_status check_seq(const kiln_ctx *c, const char *fn, int32_t seq, bool allow_all) {
    if (!c) return kiln__error(KILN_E_INVALID_ARG, "%s: ctx is NULL", fn);
    if ((seq == -1 && allow_all) || (seq >= 0 && seq < c->n_seq_max)) return KILN_OK;
    return kiln__error(KILN_E_INVALID_ARG, "%s: sequence id %d is outside 0..%d%s", fn, seq, c->n_seq_max - 1,
                       allow_all ? " (or -1 for all)" : "");
}

/* [p0, p1) with the open ends filled in; an empty range is an error. */
static kiln_status check_range(const char *fn, int32_t *p0, int32_t *p1) {
    if (*p0 < 0) *p0 = 0;
    if (*p1 < 0) *p1 = INT32_MAX;
    if (*p1 <= *p0) return kiln__error(KILN_E_INVALID_ARG, "%s: the range [%d, %d) is empty", fn, *p0, *p1);
    return KILN_OK;
}

kiln_status kiln_kv_seq_rm(kiln_ctx *c, int32_t seq, int32_t p0, int32_t p1) {
    kiln_status s;
    if ((s = check_seq(c, "kiln_kv_seq_rm", seq, true)) || (s = check_range("kiln_kv_seq_rm", &p0, &p1)))
        return s;
    kiln__kv_seq_rm(&c->cells, seq, p0, p1);
    return KILN_OK;
}

kiln_status kiln_kv_seq_cp(kiln_ctx *c, int32_t src, int32_t dst, int32_t p0, int32_t p1) {
    kiln_status s;
    if ((s = check_seq(c, "kiln_kv_seq_cp", src, false)) ||
        (s = check_seq(c, "kiln_kv_seq_cp", dst, false)) || (s = check_range("kiln_kv_seq_cp", &p0, &p1)))
        return s;
    return kiln__kv_seq_cp(&c->cells, src, dst, p0, p1);
}

kiln_status kiln_kv_seq_keep(kiln_ctx *c, int32_t seq) {
    kiln_status s;
    if ((s = check_seq(c, "kiln_kv_seq_keep", seq, false))) return s;
    kiln__kv_seq_keep(&c->cells, seq);
    return KILN_OK;
}

int32_t kiln_kv_seq_pos_max(const kiln_ctx *c, int32_t seq) {
    return c ? kiln__kv_seq_pos_max(&c->cells, seq) : -1;
}

int32_t kiln_kv_n_used(const kiln_ctx *c) {
    return c ? c->cells.n_used : 0;
}
