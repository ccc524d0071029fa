/*
 * engine_impl.h - the engine's private state, shared by engine.c (the public calls and the engine thread)
 * and step.c (what one step does: sweep cancellations, admit, build and decode the batch, sample).
 *
 * Locks. `mu` guards the queue, the live list, the flags that other threads set (cancel, shutdown) and
 * the published metrics. Each request's `cb_mu` is held while its callback runs, so that cancel can wait
 * for a running callback and then silence the request. Order: a thread holding mu may take a cb_mu only
 * after pinning the request with a reference and dropping mu (cancel does this), so a callback that calls
 * back into the engine (submit, cancel, metrics) cannot deadlock. The engine thread never holds mu while a
 * callback runs. Everything marked "engine thread" is touched by that thread alone.
 */
#ifndef KILN_SERVER_ENGINE_IMPL_H
#define KILN_SERVER_ENGINE_IMPL_H

#include "choice.h"
#include "engine.h"
#include "prefix_cache.h"

#include <pthread.h>

#define KS_DRAFT_MAX 64 /* most guessed tokens per choice and step (ks_engine_params.draft_max) */

typedef struct ks_req {
    /* Fixed at submit. */
    struct ks_engine *engine;
    ks_handle handle;
    ks_event_fn fn;
    void *user;
    ks_request req;  /* prompt and stop point at the copies below */
    int32_t *prompt; /* [n_prompt] */
    int32_t *input_lens; /* [n_inputs] embedding requests */
    char **stop;     /* [n_stop] */
    ks_choice_params cp;
    kiln_sampler_params sp;
    kiln_grammar *grammar; /* req.grammar compiled, or NULL */
    double t_submit;

    /* Under the engine's mu. */
    struct ks_req *next_queued; /* the wait queue, in submit order */
    struct ks_req *next_live;   /* every request not yet retired */
    bool cancel_requested;      /* by the client: ends silently */
    bool shutdown_requested;    /* by ks_engine_shutdown: ends with KS_EVENT_ERROR */
    bool admitted;
    int32_t refs; /* cancel calls pinning the request */
    bool retired; /* out of the live list; freed by whoever drops the last reference */

    /* Under cb_mu. */
    pthread_mutex_t cb_mu;
    bool silenced; /* no event may reach the callback any more */

    /* Engine thread. */
    ks_choice *choices;  /* [n] */
    int32_t *seqs;       /* [n] KV sequence ids; seqs[0] holds the prompt */
    int32_t *n_past;     /* [n] cells (positions) each sequence holds */
    int32_t *next_token; /* [n] the token each choice decodes next */
    int32_t *batch_at;   /* [n] its row in this step's batch, or -1 */
    int32_t *n_guess;    /* [n] guessed tokens after it in the batch (speculate.c) */
    int32_t *lookup_next;/* [n] prompt lookup's first guess when no guess went into the batch, or -1 */
    float *spec_hits, *spec_misses; /* [n] decayed counts of kept guesses and of rejections */
    int32_t *guesses;    /* [n * KS_DRAFT_MAX] the draft model's guesses of this step (speculate.c) */
    int32_t *draft_past; /* [n] cells of each choice's history the draft context holds */
    double *t_last;      /* [n] when each choice's latest token came */
    int32_t n_prefilled; /* prompt tokens in seqs[0]'s cells (reused ones included); embedding
                          * requests: tokens of the inputs done or in this step's batch */
    int32_t next_input;  /* embedding requests: the first input not yet in a batch */
    int32_t slice;       /* prompt tokens in this step's batch */
    int32_t cached;      /* prompt tokens reused from the prefix cache */
    int32_t reserved;    /* KV cells this request may still take */
    int32_t n_running;   /* choices not finished */
    int32_t completion_tokens;
    bool first_token_seen;
    char error[256]; /* why the request failed, for its KS_EVENT_ERROR */
} ks_req;

/* A slot action handed to the engine thread (slots.c), under mu until done. */
typedef struct ks_slot_op {
    ks_slot_action action;
    int32_t slot;
    const char *path;
    kiln_status status;
    ks_slot_result result;
    bool done;
} ks_slot_op;

struct ks_engine {
    kiln_model *model;
    kiln_ctx *ctx;
    ks_engine_params p;
    int32_t n_seq_max;
    bool embeds; /* an encoder: embedding requests only (step_embed.c) */
    pthread_t thread;
    bool thread_started;

    pthread_mutex_t mu;
    pthread_cond_t work_cv; /* the engine thread waits here when idle */
    pthread_cond_t idle_cv; /* shutdown waits here for requests to finish */
    /* Under mu. */
    ks_req *queue_head, *queue_tail;
    int32_t queued;
    ks_req *live;
    int32_t n_live;
    bool accepting, stopping;
    ks_handle next_handle;
    ks_metrics metrics;
    ks_slot_op *slot_op;    /* the slot action waiting for the engine thread, or NULL */
    pthread_cond_t slot_cv; /* slot actions wait here for their turn and their end */

    /* Engine thread. */
    ks_req *active[KILN_SEQ_MAX]; /* admitted requests, in admission order */
    int32_t n_active;
    int32_t running_seqs; /* sequences of active requests still generating */
    int32_t free_seqs[KILN_SEQ_MAX];
    int32_t n_free_seqs;
    int32_t reserved_cells; /* sum of the active requests' reservations */
    ks_req *emitting;       /* the request whose callback is running */
    ks_pcache pcache;
    kiln_batch batch;
    ks_gen_scratch scratch;
    int32_t *spec_hist; /* [n_ctx] a choice's tokens, for prompt lookup; NULL unless it guesses */
    kiln_ctx *draft_ctx;    /* draft_model's context: sequence s holds the history of the running choice
                             * on the target's sequence s (nothing for cached or free sequences) */
    kiln_batch draft_batch; /* [n_batch] */
    ks_metrics delta; /* counters and histograms of this step, merged into metrics under mu */
    struct ks_embed_slot {
        ks_req *req;
        int32_t input;
    } embed_slots[KILN_SEQ_MAX]; /* an encoder's batch: sequence s holds input embed_slots[s] */
};

/* One step (step.c): sweep, admit, decode, sample, emit. Returns false when there was nothing to do. An
 * encoder's engine steps with ks__engine_step_embed instead (step_embed.c). */
bool ks__engine_step(ks_engine *e);
bool ks__engine_step_embed(ks_engine *e);

/* Shared by both steps (step.c). Under mu: take the cancelled queued requests out of the queue, chained
 * through next_queued onto *ended. */
bool ks__engine_sweep_queue(ks_engine *e, ks_req **ended);
/* Under mu: take r out of the queue. */
void ks__engine_unqueue(ks_engine *e, ks_req *r);
/* Under mu: the gauges, and with `merge` this step's counters and histograms. */
void ks__engine_publish(ks_engine *e, bool merge);
/* Pass an event to r's callback unless r was silenced (cancelled). */
void ks__engine_emit(void *req, const ks_event *ev);
/* Send an ended request ERROR (unless its client cancelled it) and retire it. */
void ks__engine_end_request(ks_engine *e, ks_req *r);
/* Send DONE to a request whose work is all done, and retire it. */
void ks__engine_complete_request(ks_engine *e, ks_req *r);

/* Run a slot action on the engine thread, between steps (slots.c). */
void ks__engine_run_slot_op(ks_engine *e, ks_slot_op *op);

/* Hand a sequence id back to the free pool after its cells were forgotten (step.c). */
void ks__engine_release_seq(void *engine, int32_t seq);

/* Retire a request after its last event (engine.c): out of the live list, and freed unless a cancel
 * still pins it. */
void ks__engine_retire(ks_engine *e, ks_req *r);

/* Free a request's memory (engine.c). */
void ks__req_free(ks_req *r);

#endif
