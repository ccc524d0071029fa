/*
 * engine.c - the serving engine's public calls and its thread (engine.h): parameters, creating the
 * context, validating and queueing requests, cancellation, metrics, shutdown. What one step does lives in
 * step.c; the locking rules are in engine_impl.h.
 */
#include "engine_impl.h"
#include "error.h"
#include "metrics.h"

#include <errno.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

ks_engine_params ks_engine_params_default(void) {
    ks_engine_params p = {
        .n_parallel = 8,
        .n_ctx = 4096,
        .n_batch = 64,
        .max_queue = 64,
        .max_tokens_cap = 0,
        .cache_seqs = 8,
    };
    return p;
}

ks_request ks_request_default(void) {
    ks_request r = {
        .max_tokens = 16,
        .n = 1,
        .temperature = 1.0f,
        .top_p = 1.0f,
        .logprobs = -1,
        .eot_token = -1,
    };
    return r;
}

static void log_line(const ks_engine *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void log_line(const ks_engine *e, const char *fmt, ...) {
    if (!e->p.log) return;
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    e->p.log(e->p.log_user, line);
}

/* Check the parameters and fill in their defaults against the model. */
static kiln_status resolve_params(const kiln_model *model, ks_engine_params *p) {
    if (p->n_parallel < 1 || p->n_parallel > KILN_SEQ_MAX)
        return kiln__error(KILN_E_INVALID_ARG, "engine: n_parallel %d is outside 1 .. %d", p->n_parallel,
                           KILN_SEQ_MAX);
    int32_t train = kiln_model_n_ctx_train(model);
    if (p->n_ctx < 1) return kiln__error(KILN_E_INVALID_ARG, "engine: n_ctx %d must be >= 1", p->n_ctx);
    if (train > 0 && p->n_ctx > train) p->n_ctx = train;
    if (!kiln_model_is_causal(model)) { /* an encoder: whole inputs per batch, nothing cached */
        p->n_batch = p->n_ctx;
        p->cache_seqs = 0;
    }
    if (p->n_batch < p->n_parallel)
        return kiln__error(KILN_E_INVALID_ARG,
                           "engine: n_batch %d is below n_parallel %d: every decoding sequence needs its "
                           "token in each step",
                           p->n_batch, p->n_parallel);
    if (p->max_queue < 1)
        return kiln__error(KILN_E_INVALID_ARG, "engine: max_queue %d must be >= 1", p->max_queue);
    if (p->max_tokens_cap == 0) p->max_tokens_cap = p->n_ctx;
    if (p->max_tokens_cap < 1)
        return kiln__error(KILN_E_INVALID_ARG, "engine: max_tokens_cap %d must be >= 1 (0: n_ctx)",
                           p->max_tokens_cap);
    if (p->cache_seqs < 0)
        return kiln__error(KILN_E_INVALID_ARG, "engine: cache_seqs %d is negative", p->cache_seqs);
    if (p->cache_seqs > KILN_SEQ_MAX - p->n_parallel) p->cache_seqs = KILN_SEQ_MAX - p->n_parallel;
    if (p->draft_max < 0 || p->draft_max > KS_DRAFT_MAX)
        return kiln__error(KILN_E_INVALID_ARG, "engine: draft_max %d is outside 0 .. %d", p->draft_max,
                           KS_DRAFT_MAX);
    if (p->draft_model && p->draft_max == 0) p->draft_max = 8;
    if (p->draft_model && !kiln_model_is_causal(model))
        return kiln__error(KILN_E_INVALID_ARG, "engine: an encoder model does not generate: no draft model");
    kiln_status st;
    if (p->draft_model && (st = kiln_spec_check_draft(model, p->draft_model)) != KILN_OK)
        return kiln__error_prefix(st, "engine: ");
    return KILN_OK;
}

static void *engine_main(void *arg);

/* The draft model's context: the target's cells (fewer when the draft's position table is shorter), batch
 * size and sequence ids. */
static kiln_status draft_init(ks_engine *e) {
    kiln_ctx_params cp = kiln_ctx_params_default();
    int32_t train = kiln_model_n_ctx_train(e->p.draft_model);
    cp.n_ctx = train > 0 && train < e->p.n_ctx ? train : e->p.n_ctx;
    cp.n_batch = e->p.n_batch;
    cp.n_seq_max = e->n_seq_max;
    cp.log = e->p.log;
    cp.log_user = e->p.log_user;
    kiln_status st = kiln_ctx_create(e->p.draft_model, &cp, &e->draft_ctx);
    if (st != KILN_OK) return kiln__error_prefix(st, "engine: the draft model's context: ");
    return kiln_batch_init(e->p.n_batch, &e->draft_batch);
}

static kiln_status engine_init(ks_engine *e) {
    kiln_ctx_params cp = kiln_ctx_params_default();
    cp.n_ctx = e->p.n_ctx;
    cp.n_batch = e->p.n_batch;
    cp.n_seq_max = e->n_seq_max;
    cp.embeddings = e->embeds;
    cp.log = e->p.log;
    cp.log_user = e->p.log_user;
    kiln_status st = kiln_ctx_create(e->model, &cp, &e->ctx);
    if (st == KILN_OK) st = kiln_batch_init(e->p.n_batch, &e->batch);
    if (st == KILN_OK) st = ks__gen_scratch_init(&e->scratch, e->model);
    if (st == KILN_OK && e->p.draft_max > 0 && !e->p.draft_model &&
        !(e->spec_hist = malloc((size_t)e->p.n_ctx * sizeof(int32_t))))
        st = kiln__error(KILN_E_NOMEM, "engine: the prompt-lookup history");
    if (st == KILN_OK && e->p.draft_model) st = draft_init(e);
    if (st == KILN_OK) st = ks__pcache_init(&e->pcache, e->p.cache_seqs, e->ctx, ks__engine_release_seq, e);
    if (st == KILN_OK && e->pcache.max > 0 && !e->pcache.entries)
        st = kiln__error(KILN_E_NOMEM, "engine: the prefix cache table");
    for (int32_t s = e->n_seq_max - 1; s >= 0; s--)
        e->free_seqs[e->n_free_seqs++] = s;
    return st;
}

kiln_status ks_engine_create(kiln_model *model, const ks_engine_params *params, ks_engine **out) {
    if (!out) return kiln__error(KILN_E_INVALID_ARG, "ks_engine_create: out is NULL");
    *out = NULL;
    if (!model || !params)
        return kiln__error(KILN_E_INVALID_ARG, "ks_engine_create: model or params is NULL");
    ks_engine_params p = *params;
    kiln_status st = resolve_params(model, &p);
    if (st != KILN_OK) return st;
    ks_engine *e = calloc(1, sizeof *e);
    if (!e) return kiln__error(KILN_E_NOMEM, "ks_engine_create: the engine");
    e->model = model;
    e->p = p;
    e->embeds = !kiln_model_is_causal(model);
    e->n_seq_max = e->embeds ? KILN_SEQ_MAX : p.n_parallel + p.cache_seqs;
    e->accepting = true;
    e->next_handle = 1;
    e->metrics.kv_cells_total = p.n_ctx;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->work_cv, NULL);
    pthread_cond_init(&e->idle_cv, NULL);
    pthread_cond_init(&e->slot_cv, NULL);
    st = engine_init(e);
    if (st == KILN_OK) {
        int rc = pthread_create(&e->thread, NULL, engine_main, e);
        if (rc != 0)
            st = kiln__error(KILN_E_INTERNAL, "ks_engine_create: starting the engine thread: %s",
                             strerror(rc));
        e->thread_started = rc == 0;
    }
    if (st != KILN_OK) {
        ks_engine_destroy(e);
        return st;
    }
    log_line(e, "engine: %d parallel sequences, %d KV cells, %d tokens a step, %d cached sequences, queue %d",
             p.n_parallel, p.n_ctx, p.n_batch, p.cache_seqs, p.max_queue);
    if (p.draft_max > 0)
        log_line(e, "engine: speculative decoding, up to %d guesses per choice and step, by %s", p.draft_max,
                 p.draft_model ? "a draft model" : "prompt lookup");
    *out = e;
    return KILN_OK;
}

void ks_engine_destroy(ks_engine *e) {
    if (!e) return;
    if (e->thread_started) {
        ks_engine_shutdown(e, 0);
        pthread_mutex_lock(&e->mu);
        e->stopping = true;
        pthread_cond_signal(&e->work_cv);
        pthread_cond_broadcast(&e->slot_cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL);
    }
    ks__pcache_free(&e->pcache);
    ks__gen_scratch_free(&e->scratch);
    kiln_batch_free(&e->batch);
    kiln_batch_free(&e->draft_batch);
    kiln_ctx_destroy(e->draft_ctx);
    free(e->spec_hist);
    kiln_ctx_destroy(e->ctx);
    pthread_cond_destroy(&e->idle_cv);
    pthread_cond_destroy(&e->slot_cv);
    pthread_cond_destroy(&e->work_cv);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

/* The engine thread: a step while there is work, asleep on work_cv otherwise. */
static void *engine_main(void *arg) {
    ks_engine *e = arg;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (!e->stopping && e->n_live == 0 && !e->slot_op)
            pthread_cond_wait(&e->work_cv, &e->mu);
        if (e->slot_op) { /* a slot action (slots.c) between two steps */
            ks_slot_op *op = e->slot_op;
            pthread_mutex_unlock(&e->mu);
            ks__engine_run_slot_op(e, op);
            pthread_mutex_lock(&e->mu);
            ks__engine_publish(e, false); /* the cache's gauges changed */
            op->done = true;
            e->slot_op = NULL;
            pthread_cond_broadcast(&e->slot_cv);
            continue;
        }
        if (e->stopping && e->n_live == 0) break;
        pthread_mutex_unlock(&e->mu);
        bool progressed = e->embeds ? ks__engine_step_embed(e) : ks__engine_step(e);
        pthread_mutex_lock(&e->mu);
        if (!progressed && e->n_live > 0 && !e->stopping) {
            /* Cannot happen while admission keeps its promise; sleep rather than spin if it does. */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 10 * 1000 * 1000;
            if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
            pthread_cond_timedwait(&e->work_cv, &e->mu, &ts);
        }
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* An embedding request: its inputs, each whole in one batch, and their lengths adding up. */
static kiln_status check_inputs(const ks_engine *e, const ks_request *r) {
    if (r->n_inputs < 0 || (r->n_inputs > 0 && !r->input_lens))
        return kiln__error(KILN_E_INVALID_ARG, "request: n_inputs %d is negative or input_lens is NULL",
                           r->n_inputs);
    if (!e->embeds && r->n_inputs > 0)
        return kiln__error(KILN_E_INVALID_ARG, "request: the model is a decoder; it makes no embeddings");
    if (e->embeds && r->n_inputs == 0)
        return kiln__error(KILN_E_INVALID_ARG,
                           "request: the model is an encoder; it makes embeddings, not completions");
    int64_t sum = 0;
    for (int32_t i = 0; i < r->n_inputs; i++) {
        if (r->input_lens[i] < 1 || r->input_lens[i] > e->p.n_ctx)
            return kiln__error(KILN_E_CONTEXT_FULL,
                               "request: input %d has %d tokens; each input must have 1 .. %d (the context)",
                               i, r->input_lens[i], e->p.n_ctx);
        sum += r->input_lens[i];
    }
    if (sum != (e->embeds ? r->n_prompt : 0))
        return kiln__error(KILN_E_INVALID_ARG, "request: input_lens add up to %lld, not n_prompt %d",
                           (long long)sum, r->n_prompt);
    return KILN_OK;
}

/* Every field of a request, each failure naming its field. */
static kiln_status check_request(const ks_engine *e, const ks_request *r) {
    int32_t n_vocab = e->scratch.n_vocab;
    if (!r->prompt || r->n_prompt < 1)
        return kiln__error(KILN_E_INVALID_ARG, "request: prompt is empty (n_prompt %d)", r->n_prompt);
    for (int32_t i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= n_vocab)
            return kiln__error(KILN_E_INVALID_ARG,
                               "request: prompt[%d] = %d is outside the vocabulary (0 .. %d)", i,
                               r->prompt[i], n_vocab - 1);
    kiln_status st = check_inputs(e, r);
    if (st != KILN_OK || e->embeds) return st;
    if (r->max_tokens < 1 || r->max_tokens > e->p.max_tokens_cap)
        return kiln__error(KILN_E_INVALID_ARG, "request: max_tokens %d is outside 1 .. %d", r->max_tokens,
                           e->p.max_tokens_cap);
    if (r->n < 1 || r->n > e->p.n_parallel)
        return kiln__error(KILN_E_INVALID_ARG,
                           "request: n %d is outside 1 .. %d (the sequences decoding at once)", r->n,
                           e->p.n_parallel);
    if (!isfinite(r->temperature) || r->temperature < 0)
        return kiln__error(KILN_E_INVALID_ARG, "request: temperature %g must be finite and >= 0",
                           (double)r->temperature);
    if (!(r->top_p > 0 && r->top_p <= 1))
        return kiln__error(KILN_E_INVALID_ARG, "request: top_p %g is outside (0, 1]", (double)r->top_p);
    if (r->top_k < 0) return kiln__error(KILN_E_INVALID_ARG, "request: top_k %d is negative", r->top_k);
    if (!(r->min_p >= 0 && r->min_p <= 1))
        return kiln__error(KILN_E_INVALID_ARG, "request: min_p %g is outside [0, 1]", (double)r->min_p);
    if (!(r->presence_penalty >= -2 && r->presence_penalty <= 2))
        return kiln__error(KILN_E_INVALID_ARG, "request: presence_penalty %g is outside [-2, 2]",
                           (double)r->presence_penalty);
    if (!(r->frequency_penalty >= -2 && r->frequency_penalty <= 2))
        return kiln__error(KILN_E_INVALID_ARG, "request: frequency_penalty %g is outside [-2, 2]",
                           (double)r->frequency_penalty);
    if (r->n_stop < 0 || r->n_stop > 4 || (r->n_stop > 0 && !r->stop))
        return kiln__error(KILN_E_INVALID_ARG, "request: n_stop %d is outside 0 .. 4 or stop is NULL",
                           r->n_stop);
    for (int32_t i = 0; i < r->n_stop; i++)
        if (!r->stop[i] || !r->stop[i][0])
            return kiln__error(KILN_E_INVALID_ARG, "request: stop[%d] is empty", i);
    if (r->logprobs < -1 || r->logprobs > 20)
        return kiln__error(KILN_E_INVALID_ARG, "request: logprobs %d is outside -1 .. 20", r->logprobs);
    if (r->grammar && r->n_inputs > 0)
        return kiln__error(KILN_E_INVALID_ARG, "request: an embedding request has no use for a grammar");
    if (r->eot_token < -1 || r->eot_token >= n_vocab)
        return kiln__error(KILN_E_INVALID_ARG, "request: eot_token %d is outside -1 .. %d", r->eot_token,
                           n_vocab - 1);
    int64_t cells = (int64_t)r->n_prompt + (int64_t)r->n * (int64_t)(r->max_tokens - 1);
    if (cells > e->p.n_ctx)
        return kiln__error(KILN_E_CONTEXT_FULL,
                           "request: needs %lld KV cells (prompt %d tokens + n %d x (max_tokens %d - 1)) but "
                           "the context has %d (--ctx-size)",
                           (long long)cells, r->n_prompt, r->n, r->max_tokens, e->p.n_ctx);
    return KILN_OK;
}

void ks__req_free(ks_req *r) {
    if (!r) return;
    for (int32_t i = 0; r->choices && i < r->req.n; i++)
        ks__choice_free(&r->choices[i]);
    free(r->choices);
    for (int32_t i = 0; r->stop && i < r->req.n_stop; i++)
        free(r->stop[i]);
    free(r->stop);
    free(r->prompt);
    free(r->input_lens);
    free(r->seqs);
    free(r->n_past);
    free(r->next_token);
    free(r->batch_at);
    free(r->n_guess);
    free(r->lookup_next);
    free(r->spec_hits);
    free(r->spec_misses);
    free(r->guesses);
    free(r->draft_past);
    free(r->t_last);
    kiln_grammar_destroy(r->grammar);
    pthread_mutex_destroy(&r->cb_mu);
    free(r);
}

/* A request with its own copies of the prompt and the stop strings; it owns grammar (freed on failure). */
static ks_req *req_copy(ks_engine *e, const ks_request *in, ks_event_fn fn, void *user,
                        kiln_grammar *grammar) {
    ks_req *r = calloc(1, sizeof *r);
    if (!r) {
        kiln_grammar_destroy(grammar);
        return NULL;
    }
    pthread_mutex_init(&r->cb_mu, NULL);
    r->grammar = grammar; /* owned from here, freed with r */
    r->engine = e;
    r->fn = fn;
    r->user = user;
    r->req = *in;
    r->req.n_stop = 0;
    r->req.grammar = NULL; /* the text is compiled; its copy is not kept */
    r->prompt = malloc((size_t)in->n_prompt * sizeof *r->prompt);
    r->stop = calloc((size_t)in->n_stop + 1, sizeof *r->stop);
    if (!r->prompt || !r->stop) goto fail;
    memcpy(r->prompt, in->prompt, (size_t)in->n_prompt * sizeof *r->prompt);
    if (in->n_inputs > 0) {
        if (!(r->input_lens = malloc((size_t)in->n_inputs * sizeof *r->input_lens))) goto fail;
        memcpy(r->input_lens, in->input_lens, (size_t)in->n_inputs * sizeof *r->input_lens);
        r->req.input_lens = r->input_lens;
    }
    for (int32_t i = 0; i < in->n_stop; i++, r->req.n_stop++)
        if (!(r->stop[i] = strdup(in->stop[i]))) goto fail;
    r->req.prompt = r->prompt;
    r->req.stop = (const char *const *)r->stop;
    r->cp = (ks_choice_params){
        .max_tokens = in->max_tokens,
        .presence_penalty = in->presence_penalty,
        .frequency_penalty = in->frequency_penalty,
        .logprobs = in->logprobs,
        .ignore_eos = in->ignore_eos,
        .eot_token = in->eot_token,
        .strip_leading_space = in->n_prompt == 1 && in->prompt[0] == kiln_vocab_bos(e->scratch.vocab),
        .grammar = r->grammar,
    };
    r->sp = kiln_sampler_params_default();
    r->sp.temperature = in->temperature;
    r->sp.top_k = in->top_k;
    r->sp.top_p = in->top_p;
    r->sp.min_p = in->min_p;
    r->sp.repeat_penalty = 1.0f;
    r->sp.seed = in->seed;
    return r;
fail:
    ks__req_free(r);
    return NULL;
}

/* Sequences the engine thread will admit at its next step without anyone waiting: requests submitted
 * while they are free do not count against max_queue (a burst to an idle server is not refused). The
 * gauge is the last step's, under mu. */
static int32_t free_slots(const ks_engine *e) {
    int32_t free = e->p.n_parallel - e->metrics.running_sequences;
    return free > 0 ? free : 0;
}

kiln_status ks_engine_submit(ks_engine *e, const ks_request *req, ks_event_fn fn, void *user,
                             ks_handle *out) {
    if (!e || !req || !fn || !out)
        return kiln__error(KILN_E_INVALID_ARG, "ks_engine_submit: engine, request, callback or out is NULL");
    *out = 0;
    kiln_status st = check_request(e, req);
    if (st != KILN_OK) return st;
    kiln_grammar *grammar = NULL;
    if (req->grammar && (st = kiln_grammar_parse(req->grammar, strlen(req->grammar), &grammar)) != KILN_OK)
        return kiln__error_prefix(st == KILN_E_NOMEM ? st : KILN_E_INVALID_ARG, "request: ");
    ks_req *r = req_copy(e, req, fn, user, grammar);
    if (!r)
        return kiln__error(KILN_E_NOMEM, "ks_engine_submit: copying a request of %d tokens", req->n_prompt);
    r->t_submit = ks__now();
    pthread_mutex_lock(&e->mu);
    if (!e->accepting)
        st = kiln__error(KILN_E_UNSUPPORTED, "ks_engine_submit: the server is shutting down");
    else if (e->queued >= e->p.max_queue + free_slots(e))
        st = kiln__error(KILN_E_RANGE,
                         "ks_engine_submit: the queue is full (%d requests waiting, --max-queue %d)",
                         e->queued, e->p.max_queue);
    if (st == KILN_OK) {
        r->handle = *out = e->next_handle++;
        if (e->queue_tail)
            e->queue_tail->next_queued = r;
        else
            e->queue_head = r;
        e->queue_tail = r;
        e->queued++;
        r->next_live = e->live;
        e->live = r;
        e->n_live++;
        e->metrics.queue_depth = e->queued;
        pthread_cond_signal(&e->work_cv);
    }
    pthread_mutex_unlock(&e->mu);
    if (st != KILN_OK) ks__req_free(r);
    return st;
}

void ks__engine_retire(ks_engine *e, ks_req *r) {
    pthread_mutex_lock(&e->mu);
    for (ks_req **p = &e->live; *p; p = &(*p)->next_live)
        if (*p == r) {
            *p = r->next_live;
            e->n_live--;
            break;
        }
    r->retired = true;
    bool free_now = r->refs == 0;
    if (e->n_live == 0) pthread_cond_broadcast(&e->idle_cv);
    pthread_mutex_unlock(&e->mu);
    if (free_now) ks__req_free(r);
}

void ks_engine_cancel(ks_engine *e, ks_handle h) {
    if (!e || h == 0) return;
    pthread_mutex_lock(&e->mu);
    ks_req *r = e->live;
    while (r && r->handle != h)
        r = r->next_live;
    if (r) {
        r->cancel_requested = true;
        r->refs++;
        pthread_cond_signal(&e->work_cv);
    }
    pthread_mutex_unlock(&e->mu);
    if (!r) return;
    /* From inside this request's own callback the engine thread already holds cb_mu. */
    bool own_callback = pthread_equal(pthread_self(), e->thread) && e->emitting == r;
    if (!own_callback) pthread_mutex_lock(&r->cb_mu);
    r->silenced = true;
    if (!own_callback) pthread_mutex_unlock(&r->cb_mu);
    pthread_mutex_lock(&e->mu);
    bool free_now = --r->refs == 0 && r->retired;
    pthread_mutex_unlock(&e->mu);
    if (free_now) ks__req_free(r);
}

bool ks_engine_embeds(const ks_engine *e) {
    return e && e->embeds;
}

void ks_engine_metrics(ks_engine *e, ks_metrics *out) {
    if (!e || !out) return;
    pthread_mutex_lock(&e->mu);
    *out = e->metrics;
    pthread_mutex_unlock(&e->mu);
}

void ks_engine_shutdown(ks_engine *e, int32_t grace_ms) {
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    e->accepting = false;
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    int64_t ns = (int64_t)deadline.tv_nsec + (int64_t)(grace_ms > 0 ? grace_ms : 0) * 1000000;
    deadline.tv_sec += (time_t)(ns / 1000000000);
    deadline.tv_nsec = (long)(ns % 1000000000);
    while (e->n_live > 0)
        if (pthread_cond_timedwait(&e->idle_cv, &e->mu, &deadline) == ETIMEDOUT) break;
    if (e->n_live > 0) {
        log_line(e, "engine: shutting down, cancelling %d requests", e->n_live);
        for (ks_req *r = e->live; r; r = r->next_live)
            r->shutdown_requested = true;
        pthread_cond_signal(&e->work_cv);
        while (e->n_live > 0)
            pthread_cond_wait(&e->idle_cv, &e->mu);
    }
    pthread_mutex_unlock(&e->mu);
}
