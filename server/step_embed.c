/*
 * step_embed.c - one step of an encoder's engine (engine_impl.h): embedding requests instead of
 * generation.
 *
 *   1. sweep: cancelled requests end (silently, or with KS_EVENT_ERROR on shutdown), queued or active;
 *   2. pack: whole inputs into one batch, first those of the request already started (a request with
 *      more inputs than one batch holds), then queued requests in submit order, admitting each whose
 *      first input fits; up to n_batch (= n_ctx) tokens and KILN_SEQ_MAX sequences. Sequence s of the
 *      batch is input embed_slots[s], at positions 0 .. len - 1, as an encoder requires;
 *   3. decode, and send every input its pooled, unit-length vector (KS_EVENT_EMBEDDING); a request whose
 *      inputs are all done gets KS_EVENT_DONE.
 *
 * An encoder keeps nothing between batches (docs/embeddings.md), so no KV cells are reserved and nothing
 * waits for cells: the head of the queue always fits, since every input has at most n_ctx tokens.
 */
#include "engine_impl.h"
#include "metrics.h"

#include <stdio.h>
#include <string.h>

/* Add r's next whole inputs while they fit. Returns whether at least one did. */
static bool pack_inputs(ks_engine *e, ks_req *r, int32_t *n_slots) {
    kiln_batch *b = &e->batch;
    bool added = false;
    while (r->next_input < r->req.n_inputs && *n_slots < KILN_SEQ_MAX) {
        int32_t len = r->input_lens[r->next_input];
        if (len > e->p.n_batch - b->n_tokens) break;
        for (int32_t k = 0; k < len; k++)
            kiln_batch_add(b, r->prompt[r->n_prefilled + k], k, *n_slots, false);
        r->n_prefilled += len;
        e->embed_slots[*n_slots].req = r;
        e->embed_slots[*n_slots].input = r->next_input++;
        (*n_slots)++;
        added = true;
    }
    return added;
}

static void deactivate(ks_engine *e, int32_t i) {
    memmove(&e->active[i], &e->active[i + 1], (size_t)(e->n_active - i - 1) * sizeof e->active[0]);
    e->n_active--;
}

/* Under mu: end the cancelled requests (onto *ended), then fill the batch. Returns the inputs packed. */
static int32_t sweep_and_pack(ks_engine *e, ks_req **ended, double now) {
    for (int32_t i = e->n_active - 1; i >= 0; i--) {
        ks_req *r = e->active[i];
        if (!r->cancel_requested && !r->shutdown_requested) continue;
        deactivate(e, i);
        r->next_queued = *ended;
        *ended = r;
    }
    ks__engine_sweep_queue(e, ended);
    kiln_batch_clear(&e->batch);
    int32_t n_slots = 0;
    for (int32_t a = 0; a < e->n_active; a++)
        pack_inputs(e, e->active[a], &n_slots);
    while (e->queue_head && e->n_active < KILN_SEQ_MAX) {
        ks_req *r = e->queue_head;
        if (!pack_inputs(e, r, &n_slots)) break;
        ks__engine_unqueue(e, r);
        r->admitted = true;
        e->active[e->n_active++] = r;
        e->delta.prompt_tokens += (uint64_t)r->req.n_prompt;
        ks__hist_observe(&e->delta.queue_time, now - r->t_submit);
    }
    e->running_seqs = n_slots;
    return n_slots;
}

/* Every input of the decoded batch gets its vector; a request without one fails. */
static void emit_embeddings(ks_engine *e, int32_t n_slots) {
    for (int32_t s = 0; s < n_slots; s++) {
        ks_req *r = e->embed_slots[s].req;
        if (r->error[0]) continue;
        const float *v = kiln_ctx_embeddings_seq(e->ctx, s);
        if (!v) {
            snprintf(r->error, sizeof r->error, "input %d: %s", e->embed_slots[s].input, kiln_last_error());
            continue;
        }
        ks_event ev = {.kind = KS_EVENT_EMBEDDING,
                       .choice = e->embed_slots[s].input,
                       .embedding = v,
                       .n_embd = kiln_model_n_embd(e->model)};
        ks__engine_emit(r, &ev);
    }
}

bool ks__engine_step_embed(ks_engine *e) {
    ks_req *ended = NULL;
    pthread_mutex_lock(&e->mu);
    int32_t n_slots = sweep_and_pack(e, &ended, ks__now());
    bool progressed = ended != NULL || n_slots > 0;
    ks__engine_publish(e, false);
    pthread_mutex_unlock(&e->mu);
    for (ks_req *r = ended, *next; r; r = next) {
        next = r->next_queued;
        ks__engine_end_request(e, r);
    }
    if (n_slots > 0) {
        kiln_status st = kiln_ctx_decode_batch(e->ctx, &e->batch);
        if (st == KILN_OK) {
            pthread_mutex_lock(&e->mu);
            e->metrics.steps++;
            pthread_mutex_unlock(&e->mu);
            emit_embeddings(e, n_slots);
        }
        e->running_seqs = 0;
        for (int32_t a = 0; a < e->n_active;) {
            ks_req *r = e->active[a];
            if (st != KILN_OK && !r->error[0])
                snprintf(r->error, sizeof r->error, "computing the embeddings failed (%s): %s",
                         kiln_status_name(st), kiln_last_error());
            bool failed = r->error[0] != '\0', done = r->next_input == r->req.n_inputs;
            if (!failed && !done) {
                a++;
                continue;
            }
            deactivate(e, a);
            if (failed)
                ks__engine_end_request(e, r);
            else
                ks__engine_complete_request(e, r);
        }
    }
    pthread_mutex_lock(&e->mu);
    ks__engine_publish(e, true);
    pthread_mutex_unlock(&e->mu);
    return progressed;
}
