/*
 * step.c - one step of the engine thread (engine_impl.h):
 *
 *   1. sweep: requests cancelled by their client (silently) or by shutdown (with KS_EVENT_ERROR) give
 *      their sequences' cells back, whether queued, prefilling or decoding;
 *   2. admit: queued requests in submit order while sequences and cells allow (below);
 *   3. batch: one token for every decoding sequence first, then prompt slices of prefilling requests up
 *      to n_batch tokens (chunked prefill), so a long prompt delays running streams by at most one step
 *      however long it is; short prompts that fit go before a longer one (build_batch);
 *   4. decode the batch; when a prompt is complete, its other choices share its cells (kiln_kv_seq_cp);
 *   5. sample every choice with logits and emit its events; a finished choice's sequence goes to the
 *      prefix cache, and a request whose choices are all finished gets KS_EVENT_DONE.
 *
 * Admission reserves cells: a request needs n_prompt - reused + n * (max_tokens - 1) cells, and is
 * admitted only when that many are free beyond the reservations of running requests, after evicting
 * cached sequences (least recently used first) for room. Nothing is preempted; a request whose cells are
 * not there waits, and so does everything queued behind it (no overtaking, so no starvation). The
 * sequence ids always suffice: n_seq_max = n_parallel + cache_seqs, running choices stay within
 * n_parallel and the cache within cache_seqs.
 */
#include "engine_impl.h"
#include "error.h"
#include "metrics.h"
#include "speculate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ks__engine_release_seq(void *engine, int32_t seq) {
    ks_engine *e = engine;
    e->free_seqs[e->n_free_seqs++] = seq;
}

/* The emit function of choices: events of a silenced (cancelled) request are dropped. */
void ks__engine_emit(void *user, const ks_event *ev) {
    ks_req *r = user;
    ks_engine *e = r->engine;
    pthread_mutex_lock(&r->cb_mu);
    if (!r->silenced) {
        e->emitting = r;
        r->fn(r->user, ev);
        e->emitting = NULL;
    }
    pthread_mutex_unlock(&r->cb_mu);
}

static int32_t free_cells(const ks_engine *e) {
    return e->p.n_ctx - kiln_kv_n_used(e->ctx);
}

static void forget_seq(ks_engine *e, int32_t seq) {
    kiln_kv_seq_rm(e->ctx, seq, -1, -1);
    ks__engine_release_seq(e, seq);
}

/* Give back every sequence and reservation of an admitted request that ends early. */
static void abort_request(ks_engine *e, ks_req *r) {
    for (int32_t i = 0; i < r->req.n; i++)
        if (!r->choices[i].done) {
            r->choices[i].done = true;
            ks__spec_forget(e, r, i);
            forget_seq(e, r->seqs[i]);
        }
    e->running_seqs -= r->n_running;
    r->n_running = 0;
    e->reserved_cells -= r->reserved;
    r->reserved = 0;
}

/* A finished choice: its unused reservation is returned and its sequence is cached (or forgotten). */
static void finish_choice(ks_engine *e, ks_req *r, int32_t i) {
    ks_choice *c = &r->choices[i];
    int32_t unused = r->req.max_tokens - c->n_generated;
    r->reserved -= unused;
    e->reserved_cells -= unused;
    r->n_running--;
    e->running_seqs--;
    ks__spec_forget(e, r, i);
    int32_t n = r->n_past[i], n_prompt = r->req.n_prompt;
    int32_t *tokens = e->pcache.max > 0 ? malloc((size_t)n * sizeof *tokens) : NULL;
    if (!tokens) {
        forget_seq(e, r->seqs[i]);
        return;
    }
    memcpy(tokens, r->prompt, (size_t)n_prompt * sizeof *tokens);
    memcpy(tokens + n_prompt, c->generated, (size_t)(n - n_prompt) * sizeof *tokens);
    ks__pcache_insert(&e->pcache, r->seqs[i], tokens, n);
}

/* The per-request arrays an admitted request needs. */
static bool alloc_running(const ks_engine *e, ks_req *r) {
    size_t n = (size_t)r->req.n;
    r->choices = calloc(n, sizeof *r->choices);
    r->seqs = calloc(n, sizeof *r->seqs);
    r->n_past = calloc(n, sizeof *r->n_past);
    r->next_token = calloc(n, sizeof *r->next_token);
    r->batch_at = calloc(n, sizeof *r->batch_at);
    r->n_guess = calloc(n, sizeof *r->n_guess);
    r->lookup_next = calloc(n, sizeof *r->lookup_next);
    r->spec_hits = calloc(n, sizeof *r->spec_hits);
    r->spec_misses = calloc(n, sizeof *r->spec_misses);
    r->t_last = calloc(n, sizeof *r->t_last);
    r->draft_past = calloc(n, sizeof *r->draft_past);
    r->guesses = e->draft_ctx ? calloc(n * KS_DRAFT_MAX, sizeof *r->guesses) : NULL;
    return r->choices && r->seqs && r->n_past && r->next_token && r->batch_at && r->n_guess && r->lookup_next &&
           r->spec_hits && r->spec_misses && r->t_last && r->draft_past && (r->guesses || !e->draft_ctx);
}

typedef enum admit_result { ADMIT_OK, ADMIT_WAIT, ADMIT_FAIL } admit_result;

/* Reuse the longest cached prefix (leaving at least one prompt token to compute, for its logits) and
 * reserve the request's cells, evicting cached sequences for room. Returns the reused length, or -1 when
 * the cells are not there (nothing then changes but the cache). */
static int32_t reserve_cells(ks_engine *e, ks_req *r) {
    int32_t n_prompt = r->req.n_prompt, match = 0;
    int32_t hit = ks__pcache_lookup(&e->pcache, r->prompt, n_prompt, &match);
    int32_t reuse = match < n_prompt - 1 ? match : n_prompt - 1;
    if (hit >= 0 && reuse > 0 &&
        kiln_kv_seq_cp(e->ctx, e->pcache.entries[hit].seq, r->seqs[0], 0, reuse) != KILN_OK)
        reuse = 0;
    if (hit < 0) reuse = 0;
    int32_t need = n_prompt - reuse + r->req.n * (r->req.max_tokens - 1);
    while (free_cells(e) - e->reserved_cells < need && ks__pcache_evict_lru(&e->pcache, -1)) {
    }
    if (free_cells(e) - e->reserved_cells < need) {
        if (reuse > 0) kiln_kv_seq_rm(e->ctx, r->seqs[0], -1, -1);
        return -1;
    }
    r->reserved = need;
    e->reserved_cells += need;
    return reuse;
}

static admit_result try_admit(ks_engine *e, ks_req *r, double now) {
    int32_t n = r->req.n;
    if (e->running_seqs + n > e->p.n_parallel || e->n_free_seqs < n) return ADMIT_WAIT;
    if (!r->choices && !alloc_running(e, r)) {
        snprintf(r->error, sizeof r->error, "out of memory admitting a request of %d choices", n);
        return ADMIT_FAIL;
    }
    for (int32_t i = 0; i < n; i++)
        r->seqs[i] = e->free_seqs[--e->n_free_seqs];
    int32_t reuse = reserve_cells(e, r);
    for (int32_t i = 0; reuse >= 0 && i < n; i++) {
        if (ks__choice_init(&r->choices[i], i, &r->cp, &r->sp, &r->req, &e->scratch) == KILN_OK) continue;
        snprintf(r->error, sizeof r->error, "starting choice %d: %s", i, kiln_last_error());
        kiln_kv_seq_rm(e->ctx, r->seqs[0], -1, -1);
        e->reserved_cells -= r->reserved;
        r->reserved = 0;
        reuse = -2;
    }
    if (reuse < 0) {
        for (int32_t i = n - 1; i >= 0; i--)
            ks__engine_release_seq(e, r->seqs[i]);
        return reuse == -1 ? ADMIT_WAIT : ADMIT_FAIL;
    }
    r->cached = r->n_prefilled = r->n_past[0] = reuse;
    r->n_running = n;
    e->running_seqs += n;
    r->admitted = true;
    e->active[e->n_active++] = r;
    e->delta.prompt_tokens += (uint64_t)r->req.n_prompt;
    e->delta.cached_prompt_tokens += (uint64_t)reuse;
    ks__hist_observe(&e->delta.queue_time, now - r->t_submit);
    return ADMIT_OK;
}

void ks__engine_unqueue(ks_engine *e, ks_req *r) {
    ks_req *prev = NULL;
    for (ks_req *q = e->queue_head; q; prev = q, q = q->next_queued)
        if (q == r) {
            if (prev)
                prev->next_queued = q->next_queued;
            else
                e->queue_head = q->next_queued;
            if (e->queue_tail == q) e->queue_tail = prev;
            q->next_queued = NULL;
            e->queued--;
            return;
        }
}

bool ks__engine_sweep_queue(ks_engine *e, ks_req **ended) {
    bool changed = false;
    for (ks_req *r = e->queue_head, *next; r; r = next) {
        next = r->next_queued;
        if (!r->cancel_requested && !r->shutdown_requested) continue;
        ks__engine_unqueue(e, r);
        r->next_queued = *ended;
        *ended = r;
        changed = true;
    }
    return changed;
}

/* Drop active[i] from the active list, keeping admission order. */
static void deactivate(ks_engine *e, int32_t i) {
    memmove(&e->active[i], &e->active[i + 1], (size_t)(e->n_active - i - 1) * sizeof e->active[0]);
    e->n_active--;
}

/* Under mu: end the requests cancelled since the last step and admit what fits. The ended ones are
 * chained through next_queued into *ended for their ERROR event (if any) and retirement. Returns whether
 * anything changed. */
static bool sweep_and_admit(ks_engine *e, ks_req **ended, double now) {
    bool changed = false;
    for (int32_t i = e->n_active - 1; i >= 0; i--) {
        ks_req *r = e->active[i];
        if (!r->cancel_requested && !r->shutdown_requested) continue;
        abort_request(e, r);
        deactivate(e, i);
        r->next_queued = *ended;
        *ended = r;
        changed = true;
    }
    changed |= ks__engine_sweep_queue(e, ended);
    while (e->queue_head && e->n_active < KILN_SEQ_MAX) {
        ks_req *r = e->queue_head;
        admit_result a = try_admit(e, r, now);
        if (a == ADMIT_WAIT) break;
        ks__engine_unqueue(e, r);
        changed = true;
        if (a == ADMIT_FAIL) {
            r->next_queued = *ended;
            *ended = r;
        }
    }
    return changed;
}

static void hist_add(ks_histogram *dst, ks_histogram *src) {
    for (int i = 0; i < KS_HIST_BUCKETS; i++)
        dst->count[i] += src->count[i];
    dst->total += src->total;
    dst->sum += src->sum;
}

void ks__engine_publish(ks_engine *e, bool merge) {
    ks_metrics *m = &e->metrics;
    m->queue_depth = e->queued;
    m->running_sequences = e->running_seqs;
    m->kv_cells_used = kiln_kv_n_used(e->ctx);
    m->draft_kv_cells_used = e->draft_ctx ? kiln_kv_n_used(e->draft_ctx) : 0;
    m->prefix_cache_sequences = e->pcache.n;
    m->prefix_cache_cells = ks__pcache_tokens(&e->pcache);
    if (!merge) return;
    ks_metrics *d = &e->delta;
    m->prompt_tokens += d->prompt_tokens;
    m->generated_tokens += d->generated_tokens;
    m->cached_prompt_tokens += d->cached_prompt_tokens;
    m->drafted_tokens += d->drafted_tokens;
    m->accepted_tokens += d->accepted_tokens;
    hist_add(&m->ttft, &d->ttft);
    hist_add(&m->inter_token, &d->inter_token);
    hist_add(&m->queue_time, &d->queue_time);
    memset(d, 0, sizeof *d);
}

typedef enum outcome { OUTCOME_OK, OUTCOME_FAILED, OUTCOME_CANCELLED } outcome;

/* Before a request's last event: its outcome is counted and the metrics are brought up to date, so that
 * whoever reads them after that event sees the request finished. */
static void settle(ks_engine *e, const ks_req *r, outcome o) {
    double now = ks__now();
    pthread_mutex_lock(&e->mu);
    ks__engine_publish(e, true);
    if (o == OUTCOME_OK) {
        e->metrics.requests_ok++;
        ks__hist_observe(&e->metrics.end_to_end, now - r->t_submit);
    } else if (o == OUTCOME_FAILED) {
        e->metrics.requests_failed++;
    } else {
        e->metrics.requests_cancelled++;
    }
    pthread_mutex_unlock(&e->mu);
}

void ks__engine_end_request(ks_engine *e, ks_req *r) {
    pthread_mutex_lock(&e->mu);
    bool cancelled = r->cancel_requested;
    pthread_mutex_unlock(&e->mu);
    settle(e, r, cancelled ? OUTCOME_CANCELLED : OUTCOME_FAILED);
    if (!cancelled) {
        const char *why = r->error[0] ? r->error : "server shutting down";
        ks_event ev = {.kind = KS_EVENT_ERROR, .message = why};
        ks__engine_emit(r, &ev);
    }
    ks__engine_retire(e, r);
}

static bool prefilling(const ks_req *r) {
    return r->n_prefilled < r->req.n_prompt;
}

static int32_t prompt_left(const ks_req *r) {
    return r->req.n_prompt - r->n_prefilled;
}

/* Put the next n prompt tokens of r into the batch. */
static void add_slice(kiln_batch *b, ks_req *r, int32_t n) {
    r->slice = n;
    for (int32_t j = 0; j < n; j++) {
        int32_t pos = r->n_prefilled + j;
        bool last = pos == r->req.n_prompt - 1;
        if (last) r->batch_at[0] = b->n_tokens;
        kiln_batch_add(b, r->prompt[pos], pos, r->seqs[0], last);
    }
}

/* The shortest prompt (the first admitted among equals) that is shorter than `than`, fits in `room` and
 * has no slice yet; NULL if none. */
static ks_req *shortest_prompt(ks_engine *e, int32_t than, int32_t room) {
    ks_req *best = NULL;
    for (int32_t a = 0; a < e->n_active; a++) {
        ks_req *r = e->active[a];
        int32_t left = prompt_left(r);
        if (prefilling(r) && r->slice == 0 && left < than && left <= room &&
            (!best || left < prompt_left(best)))
            best = r;
    }
    return best;
}

/* Decoding tokens first, then prompt slices up to the step budget: first every prompt that can be
 * finished in this step and is shorter than the oldest prompt still being prefilled, shortest first,
 * while that oldest one keeps a quarter of the budget; then the rest in admission order. So a short
 * prompt does not wait behind a long one's whole prefill, the long one still advances every step (it
 * cannot starve), and prompts of equal length keep their admission order. */
static void build_batch(ks_engine *e) {
    kiln_batch *b = &e->batch;
    kiln_batch_clear(b);
    ks_req *oldest = NULL;
    int32_t guess_room = ks__spec_room(e, free_cells(e) - e->reserved_cells);
    for (int32_t a = 0; a < e->n_active; a++) {
        ks_req *r = e->active[a];
        r->slice = 0;
        for (int32_t i = 0; i < r->req.n; i++) {
            r->batch_at[i] = -1;
            r->n_guess[i] = 0;
        }
    }
    ks__spec_draft(e, guess_room);
    for (int32_t a = 0; a < e->n_active; a++) {
        ks_req *r = e->active[a];
        if (prefilling(r) && !oldest) oldest = r;
        for (int32_t i = 0; i < r->req.n; i++) {
            if (prefilling(r) || r->choices[i].done) continue;
            r->batch_at[i] = b->n_tokens;
            kiln_batch_add(b, r->next_token[i], r->n_past[i], r->seqs[i], true);
            ks__spec_add_guesses(e, r, i, &guess_room);
        }
    }
    int32_t budget = e->p.n_batch - b->n_tokens;
    if (oldest) {
        int32_t keep = prompt_left(oldest) < budget / 4 ? prompt_left(oldest) : budget / 4;
        for (ks_req *r; (r = shortest_prompt(e, prompt_left(oldest), budget - keep));) {
            budget -= prompt_left(r);
            add_slice(b, r, prompt_left(r));
        }
    }
    for (int32_t a = 0; a < e->n_active && budget > 0; a++) {
        ks_req *r = e->active[a];
        if (!prefilling(r) || r->slice > 0) continue;
        int32_t n = prompt_left(r) < budget ? prompt_left(r) : budget;
        budget -= n;
        add_slice(b, r, n);
    }
}

/* After a decode: positions advance, reservations are consumed, and a completed prompt is shared with
 * the request's other choices (a request whose sharing fails gets its error and ends when sampled). */
static void account_decode(ks_engine *e) {
    for (int32_t a = 0; a < e->n_active; a++) {
        ks_req *r = e->active[a];
        if (r->slice > 0) {
            r->n_prefilled += r->slice;
            r->n_past[0] = r->n_prefilled;
            r->reserved -= r->slice;
            e->reserved_cells -= r->slice;
            if (!prefilling(r))
                for (int32_t i = 1; i < r->req.n; i++) {
                    if (kiln_kv_seq_cp(e->ctx, r->seqs[0], r->seqs[i], -1, -1) != KILN_OK && !r->error[0])
                        snprintf(r->error, sizeof r->error, "sharing the prompt with choice %d: %s", i,
                                 kiln_last_error());
                    r->n_past[i] = r->req.n_prompt;
                    r->batch_at[i] = r->batch_at[0];
                }
            continue;
        }
        for (int32_t i = 0; i < r->req.n; i++)
            if (r->batch_at[i] >= 0) {
                r->n_past[i]++;
                r->reserved--;
                e->reserved_cells--;
            }
    }
}

/* Choice i's tokens from its rows of this batch: its own token's row, then one row per guess for as long
 * as the sampler returned the guess (kiln_sampler_sample_draft keeps the distribution); an accepted
 * guess's cell stays, the rest are forgotten. Returns false when the choice failed (r->error). */
static bool sample_choice(ks_engine *e, ks_req *r, int32_t i, double now) {
    ks_choice *c = &r->choices[i];
    int32_t k = r->n_guess[i], row = r->batch_at[i], token = 0, kept = 0;
    for (int32_t j = 0;; j++) {
        const float *logits = kiln_ctx_logits(e->ctx, row + j);
        c->draft = j < k ? e->batch.token[row + j + 1] : -1;
        kiln_status st =
            logits ? ks__choice_step(c, &e->scratch, logits, ks__engine_emit, r, &token) : KILN_E_INTERNAL;
        c->draft = -1;
        if (st != KILN_OK) {
            snprintf(r->error, sizeof r->error, "choice %d: %s", i, kiln_last_error());
            return false;
        }
        r->completion_tokens++;
        e->delta.generated_tokens++;
        if (j == 0 && !r->first_token_seen)
            ks__hist_observe(&e->delta.ttft, now - r->t_submit);
        else if (j == 0 && r->t_last[i] > 0)
            ks__hist_observe(&e->delta.inter_token, now - r->t_last[i]);
        if (c->done || j == k || token != e->batch.token[row + j + 1]) break;
        r->n_past[i]++; /* the guess is kept: its cell was right */
        kept++;
        r->reserved--;
        e->reserved_cells--;
    }
    if (k > 0) kiln_kv_seq_rm(e->ctx, r->seqs[i], r->n_past[i], -1);
    e->delta.drafted_tokens += (uint64_t)k;
    e->delta.accepted_tokens += (uint64_t)kept;
    ks__spec_settle(e, r, i, kept, token);
    r->next_token[i] = token;
    r->first_token_seen = true;
    r->t_last[i] = now;
    if (c->done) finish_choice(e, r, i);
    return true;
}

/* Sample every choice of r that has logits in this batch. Returns false when the request failed (its
 * message is in r->error). */
static bool sample_request(ks_engine *e, ks_req *r, double now) {
    if (r->error[0]) return false;
    for (int32_t i = 0; i < r->req.n; i++)
        if (r->batch_at[i] >= 0 && !r->choices[i].done && !sample_choice(e, r, i, now)) return false;
    return true;
}

void ks__engine_complete_request(ks_engine *e, ks_req *r) {
    ks_event ev = {.kind = KS_EVENT_DONE,
                   .prompt_tokens = r->req.n_prompt,
                   .completion_tokens = r->completion_tokens,
                   .cached_tokens = r->cached};
    settle(e, r, OUTCOME_OK);
    ks__engine_emit(r, &ev);
    ks__engine_retire(e, r);
}

/* Every active request fails with the decode's error. */
static void fail_all(ks_engine *e, kiln_status st) {
    while (e->n_active > 0) {
        ks_req *r = e->active[0];
        snprintf(r->error, sizeof r->error, "decoding failed (%s): %s", kiln_status_name(st),
                 kiln_last_error());
        abort_request(e, r);
        deactivate(e, 0);
        ks__engine_end_request(e, r);
    }
}

/* Sample, emit, and finish what finished; requests leave the active list here. */
static void process_outputs(ks_engine *e, double now) {
    for (int32_t a = 0; a < e->n_active;) {
        ks_req *r = e->active[a];
        bool ok = sample_request(e, r, now);
        if (ok && r->n_running > 0) {
            a++;
            continue;
        }
        deactivate(e, a);
        if (ok) {
            ks__engine_complete_request(e, r);
        } else {
            abort_request(e, r);
            ks__engine_end_request(e, r);
        }
    }
}

bool ks__engine_step(ks_engine *e) {
    ks_req *ended = NULL;
    pthread_mutex_lock(&e->mu);
    bool progressed = sweep_and_admit(e, &ended, ks__now());
    ks__engine_publish(e, false);
    pthread_mutex_unlock(&e->mu);
    for (ks_req *r = ended, *next; r; r = next) {
        next = r->next_queued;
        ks__engine_end_request(e, r);
    }
    build_batch(e);
    if (e->batch.n_tokens > 0) {
        progressed = true;
        kiln_status st = kiln_ctx_decode_batch(e->ctx, &e->batch);
        if (st != KILN_OK) {
            fail_all(e, st);
        } else {
            account_decode(e);
            pthread_mutex_lock(&e->mu);
            e->metrics.steps++;
            ks__engine_publish(e, false);
            pthread_mutex_unlock(&e->mu);
            process_outputs(e, ks__now());
        }
    }
    pthread_mutex_lock(&e->mu);
    ks__engine_publish(e, true);
    pthread_mutex_unlock(&e->mu);
    return progressed;
}
