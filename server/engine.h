/*
 * engine.h - the serving engine of `kiln serve`: continuous batching of many requests over one Kiln
 * context, through the public API only (kiln.h). The HTTP and JSON layer (http.c, api.c) turns requests
 * into ks_request values and engine events into OpenAI responses; this layer knows nothing of HTTP.
 *
 * One engine thread owns the model's context. Each step it builds one kiln_batch holding one token for
 * every decoding sequence, then slices of waiting prompts (chunked prefill; short prompts that fit go
 * before a longer one, which keeps a quarter of the budget) up to the step's token budget,
 * decode has priority, so a long prompt never stalls running streams for more than one step. Sequences
 * join and leave between steps. A request with n > 1 choices prefills its prompt once and shares it with
 * kiln_kv_seq_cp. Finished sequences' cells may stay cached (the prefix cache): a new request whose prompt
 * starts with a cached sequence's tokens reuses that prefix with kiln_kv_seq_cp instead of recomputing it,
 * and at temperature 0 produces exactly what a cold run produces. The cache is bounded (cells and count)
 * and evicted least recently used when a new sequence needs room.
 *
 * Admission control: a queued request is admitted (in submit order) only when the cells it may ever need
 * are free beyond what running requests have reserved, evicting cached sequences for room; otherwise it
 * waits for running requests to finish. Nothing is ever preempted, so a running request never runs out of
 * cells.
 *
 * Events reach the caller through its callback, called on the engine thread, never after
 * KS_EVENT_DONE/KS_EVENT_ERROR for that request. Detokenization (UTF-8 safe) and stop strings (held back
 * while a stop may still match across token boundaries, never emitted) are done here, so streaming and
 * non-streaming responses see the same text.
 *
 * Encoder models (kiln_model_is_causal false: BERT) serve embedding requests instead (ks_request.n_inputs
 * > 0): each step packs whole inputs of queued requests, in submit order, into one batch of up to n_ctx
 * tokens and KILN_SEQ_MAX sequences, and sends each input's pooled, unit-length vector as a
 * KS_EVENT_EMBEDDING, then KS_EVENT_DONE once a request's inputs are all done. Such an engine refuses
 * generation requests, and a decoder's engine refuses embedding requests (KILN_E_INVALID_ARG).
 *
 * Thread safety: ks_engine_submit, ks_engine_cancel, ks_engine_metrics and ks_engine_shutdown may be called
 * from any thread.
 */
#ifndef KILN_SERVER_ENGINE_H
#define KILN_SERVER_ENGINE_H

#include "kiln.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ks_engine ks_engine;

typedef struct ks_engine_params {
    int32_t n_parallel;    /* most sequences decoding at once (--parallel); default 8 */
    int32_t n_ctx;         /* KV cells shared by every sequence (--ctx-size); default 4096, lowered to the
                            * model's context length when that is shorter */
    int32_t n_batch;       /* the per-step token budget (decode tokens + prefill slices); default 64;
                            * at least n_parallel. An encoder's engine takes n_ctx instead: each input
                            * must be whole in one batch */
    int32_t max_queue;     /* requests waiting beyond the free sequences (--max-queue), >= 1; default 64 */
    int32_t max_tokens_cap;/* largest max_tokens a request may ask for; 0 (the default) = n_ctx */
    int32_t cache_seqs;    /* finished sequences kept for the prefix cache (0: no cache); default 8, and at
                            * most KILN_SEQ_MAX - n_parallel (larger values are lowered to that) */
    int32_t draft_max;     /* speculative decoding (--lookup or --model-draft, with --draft-max): most
                            * guessed tokens per choice and step, verified in the step's shared batch,
                            * 0 .. 64; 0 (default): off */
    kiln_model *draft_model; /* --model-draft: a draft model of the same vocabulary guesses (greedily, in its
                              * own context, a sequence per decoding choice); NULL: prompt lookup guesses.
                              * Borrowed; must outlive the engine */
    kiln_log_fn log;       /* --verbose lines, or NULL */
    void *log_user;
} ks_engine_params;

ks_engine_params ks_engine_params_default(void);

/* Creates the context (n_ctx cells, n_batch tokens a batch, n_seq_max = n_parallel + cache_seqs) and
 * starts the engine thread. The model is borrowed and must outlive the engine. KILN_E_INVALID_ARG names a
 * bad parameter. Errors of every ks_engine_ call are reported through kiln_last_error(). */
kiln_status ks_engine_create(kiln_model *model, const ks_engine_params *params, ks_engine **out);
/* Stops the thread after cancelling what is left (each gets KS_EVENT_ERROR "server shutting down").
 * NULL is a no-op. Not from an event callback. */
void ks_engine_destroy(ks_engine *e);

typedef struct ks_request {
    const int32_t *prompt; /* token ids (BOS included when the model wants it); copied by submit */
    int32_t n_prompt;      /* >= 1 */
    int32_t max_tokens;    /* >= 1; at most max_tokens_cap */
    int32_t n;             /* choices, >= 1 */
    float temperature;     /* 0 = greedy */
    float top_p;           /* 1 = off */
    int32_t top_k;         /* 0 = off */
    float min_p;           /* 0 = off */
    uint64_t seed;         /* choice i samples with seed + i */
    float presence_penalty, frequency_penalty; /* OpenAI's, -2 .. 2 */
    const char *const *stop; /* stop strings, copied; NULL when n_stop is 0 */
    int32_t n_stop;        /* 0 .. 4 */
    int32_t logprobs;      /* -1: none; 0 .. 20: the chosen token's logprob and this many alternatives */
    bool ignore_eos;       /* EOS and eot_token are then ordinary tokens */
    int32_t eot_token;     /* a token that ends a choice like EOS (the chat template's end of turn, found
                            * with kiln_vocab_find_token), or -1 */
    const char *grammar;   /* GBNF text (NUL-terminated) every choice must follow, or NULL; compiled by
                            * submit (KILN_E_INVALID_ARG names what is wrong). A choice ends ("stop") once
                            * its grammar allows nothing but the end */
    /* Embedding requests (encoder engines only): prompt holds n_inputs inputs one after another, input i
     * of input_lens[i] tokens (each 1 .. n_ctx, summing to n_prompt; copied by submit). The generation
     * fields above are then ignored. 0 = a generation request. */
    int32_t n_inputs;
    const int32_t *input_lens;
} ks_request;

/* Defaults: prompt NULL, max_tokens 16, n 1, temperature 1, top_p 1, top_k 0, min_p 0, seed 0, penalties 0,
 * no stop strings, logprobs -1, ignore_eos false, eot_token -1, grammar NULL. */
ks_request ks_request_default(void);

typedef enum ks_finish { KS_FINISH_NONE = 0, KS_FINISH_STOP = 1, KS_FINISH_LENGTH = 2 } ks_finish;

typedef enum ks_event_kind {
    KS_EVENT_TEXT = 1,  /* text: new text of one choice (possibly empty when only logprobs come) */
    KS_EVENT_CHOICE_END = 2, /* choice finished: finish reason */
    KS_EVENT_DONE = 3,  /* every choice finished: usage; the last event */
    KS_EVENT_ERROR = 4, /* the request failed or was cancelled by the server: message; the last event */
    KS_EVENT_EMBEDDING = 5, /* one input's embedding: choice is the input's index, embedding its vector */
} ks_event_kind;

typedef struct ks_top_logprob {
    int32_t token;
    float logprob;
    const char *text;  /* the token's text */
    size_t len;
} ks_top_logprob;

typedef struct ks_event {
    ks_event_kind kind;
    int32_t choice;           /* 0 .. n - 1 (TEXT, CHOICE_END) */
    const char *text;         /* TEXT: UTF-8 bytes, valid during the callback */
    size_t len;
    /* TEXT with logprobs >= 0: the tokens this text came from (usually one) */
    int32_t n_tokens;
    const int32_t *tokens;
    const float *token_logprobs;           /* [n_tokens] */
    const ks_top_logprob *const *top;      /* [n_tokens][logprobs] */
    ks_finish finish;         /* CHOICE_END */
    int32_t prompt_tokens;    /* DONE: usage (the prompt once, however many choices share it) */
    int32_t completion_tokens;/* DONE: tokens sampled over all choices, a final EOS included */
    int32_t cached_tokens;    /* DONE: prompt tokens reused from the prefix cache */
    const char *message;      /* ERROR */
    const float *embedding;   /* EMBEDDING: n_embd floats, unit L2 norm, valid during the callback */
    int32_t n_embd;
} ks_event;

/* Called on the engine thread, one event at a time per engine. It may call ks_engine_submit,
 * ks_engine_cancel (its own request too) and ks_engine_metrics, but not ks_engine_shutdown or
 * ks_engine_destroy. A slow callback delays every stream. */
typedef void (*ks_event_fn)(void *user, const ks_event *ev);

typedef uint64_t ks_handle;

/* Whether the engine serves embedding requests (its model is an encoder) rather than generation. */
bool ks_engine_embeds(const ks_engine *e);

/* Queue a request (the prompt and stop strings are copied). KILN_E_INVALID_ARG names a bad field (n above
 * n_parallel included); KILN_E_CONTEXT_FULL when the request can never fit: its cells, n_prompt +
 * n * (max_tokens - 1) (the prompt is shared by the choices, and a choice's last token is never decoded),
 * exceed n_ctx (the message names the numbers); KILN_E_RANGE when max_queue requests wait beyond the
 * sequences free at the last step (the HTTP layer answers 429 with Retry-After); KILN_E_UNSUPPORTED after
 * ks_engine_shutdown. *out receives a handle for ks_engine_cancel. */
kiln_status ks_engine_submit(ks_engine *e, const ks_request *req, ks_event_fn fn, void *user, ks_handle *out);
/* Cancel (client gone): the request's sequences are freed at the next step, whether it is queued, in
 * prefill or decoding; its callback gets no further event after cancel returns (none at all: no ERROR
 * either). When called from another thread while the request's callback runs, cancel waits for that
 * callback to return. Unknown and finished handles are ignored. */
void ks_engine_cancel(ks_engine *e, ks_handle h);

/* Counters and gauges for /metrics. Histograms: cumulative bucket counts over ks_metric_buckets. A
 * request is counted (requests_*, end_to_end) and the gauges are brought up to date before its last event
 * (DONE or ERROR) is sent, so a reader woken by that event sees it. */
#define KS_HIST_BUCKETS 12
extern const double ks_metric_buckets[KS_HIST_BUCKETS]; /* seconds: 0.005 .. 60 */
typedef struct ks_histogram {
    uint64_t count[KS_HIST_BUCKETS]; /* cumulative: observations <= bucket bound */
    uint64_t total;
    double sum;
} ks_histogram;
typedef struct ks_metrics {
    uint64_t requests_ok, requests_failed, requests_cancelled;
    uint64_t prompt_tokens, generated_tokens, cached_prompt_tokens;
    uint64_t drafted_tokens, accepted_tokens; /* guessed tokens verified, and kept */
    int32_t queue_depth, running_sequences, kv_cells_used, kv_cells_total;
    int32_t draft_kv_cells_used; /* the draft model's context (0 without one): only running choices' */
    int32_t prefix_cache_sequences, prefix_cache_cells; /* cells: tokens over the cached sequences */
    uint64_t steps;           /* batches decoded; during a callback, the index of the step whose output
                               * it reports */
    ks_histogram ttft, inter_token, end_to_end, queue_time;
} ks_metrics;
void ks_engine_metrics(ks_engine *e, ks_metrics *out);

/* llama-server's slot actions (slots.c): slot k is the k-th most recently used prefix-cache entry
 * (0 .. cache_seqs - 1). SAVE writes its KV state and tokens to path (kiln_ctx_state_save); RESTORE loads
 * such a file into the cache as the most recent entry (slot 0), evicting older entries for room; ERASE
 * evicts slot k. Blocks until the engine thread has done it between two steps. KILN_E_NOT_FOUND when slot
 * k holds nothing; KILN_E_UNSUPPORTED without a prefix cache, and while a shutdown waits for running
 * requests (after ks_engine_shutdown returns, actions run again: the cache can be saved); the state
 * reader's named errors otherwise. Not from an event callback. */
typedef enum ks_slot_action { KS_SLOT_SAVE = 0, KS_SLOT_RESTORE = 1, KS_SLOT_ERASE = 2 } ks_slot_action;
typedef struct ks_slot_result {
    int32_t n_tokens; /* tokens saved, restored or erased */
    uint64_t bytes;   /* the file's size */
    double ms;        /* time the engine spent on it */
    char error[512];  /* the failure's message */
} ks_slot_result;
kiln_status ks_engine_slot(ks_engine *e, ks_slot_action action, int32_t slot, const char *path,
                           ks_slot_result *out);

/* Stop accepting (submit then fails with KILN_E_UNSUPPORTED "shutting down"); wait up to grace_ms for
 * the requests already submitted (queued ones too) to finish, then cancel the rest with KS_EVENT_ERROR
 * "server shutting down" and return once they have had it. Not from an event callback. */
void ks_engine_shutdown(ks_engine *e, int32_t grace_ms);

#endif
