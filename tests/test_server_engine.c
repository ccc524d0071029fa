/*
 * test_server_engine.c - the serving engine of `kiln serve` (server/engine.h) on the bundled stories260K
 * model: concurrent greedy requests produce exactly what each produces decoded alone; a long prompt is
 * prefilled in slices while running streams get a token in every step; n choices share one prefill; stop
 * strings split across tokens cut the text exactly and are never emitted; a request that reuses a cached
 * prefix produces what a fresh engine produces; presence and frequency penalties follow OpenAI's rule;
 * logprobs are the log-softmax of the logits; cancellation frees cells and silences the callback at once
 * (queued, decoding, from inside the callback); a full queue, a request that can never fit and every
 * invalid field are refused with named errors; shutdown lets requests finish within its grace and ends the
 * rest with an ERROR; an idle engine sleeps.
 *
 * References are computed independently here, one sequence alone in its own kiln_ctx with greedy argmax
 * (lowest id on ties). Events are recorded by the callback on the engine thread under the collector's
 * lock; every check runs on the test thread after a bounded wait.
 */
#include "engine.h"
#include "harness.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define MAX_CHOICES 4
#define MAX_TOK 512
#define TOP 20
#define WAIT_S 60.0

static kiln_model *model;

/* ---- what a request's callback saw ---- */

typedef struct collector {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ks_engine *engine;
    char text[MAX_CHOICES][8192];
    size_t len[MAX_CHOICES];
    int32_t tokens[MAX_CHOICES][MAX_TOK]; /* from the events' logprob tokens */
    float logprobs[MAX_CHOICES][MAX_TOK];
    ks_top_logprob top[MAX_CHOICES][MAX_TOK][TOP];
    int32_t n_tokens[MAX_CHOICES];
    int text_events[MAX_CHOICES];
    uint64_t step_of_event[MAX_CHOICES][MAX_TOK]; /* metrics.steps during each TEXT event */
    ks_finish finish[MAX_CHOICES];
    int choice_ends;
    bool done, error;
    char message[256];
    int32_t prompt_tokens, completion_tokens, cached_tokens;
    int32_t max_cells_seen;
    int events_after_end;
    bool cancel_returned;
    int events_after_cancel;
    int cancel_self_after; /* > 0: the callback cancels its own request after this many TEXT events */
    ks_handle handle;
    int top_k; /* the request's logprobs, when > 0 */
    bool unsorted_top;
} collector;

static collector *collector_new(ks_engine *e) {
    collector *c = calloc(1, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->engine = e;
    return c;
}

static void collector_free(collector *c) {
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static void record_text(collector *c, const ks_event *ev, const ks_metrics *m) {
    int ch = ev->choice;
    if (c->len[ch] + ev->len < sizeof c->text[ch]) {
        memcpy(c->text[ch] + c->len[ch], ev->text, ev->len);
        c->len[ch] += ev->len;
    }
    for (int32_t i = 0; i < ev->n_tokens && c->n_tokens[ch] < MAX_TOK; i++) {
        int32_t at = c->n_tokens[ch]++;
        c->tokens[ch][at] = ev->tokens[i];
        c->logprobs[ch][at] = ev->token_logprobs[i];
    }
    if (c->text_events[ch] < MAX_TOK) c->step_of_event[ch][c->text_events[ch]] = m->steps;
    c->text_events[ch]++;
}

static void on_event(void *user, const ks_event *ev) {
    collector *c = user;
    ks_metrics m;
    ks_engine_metrics(c->engine, &m);
    bool cancel_self = false;
    pthread_mutex_lock(&c->mu);
    if (c->done || c->error) c->events_after_end++;
    if (c->cancel_returned) c->events_after_cancel++;
    if (m.kv_cells_used > c->max_cells_seen) c->max_cells_seen = m.kv_cells_used;
    switch (ev->kind) {
    case KS_EVENT_TEXT:
        for (int32_t i = 0; i < ev->n_tokens && c->top_k > 0; i++) {
            int32_t at = c->n_tokens[ev->choice] + i;
            for (int32_t j = 0; j + 1 < c->top_k; j++)
                if (ev->top[i][j].logprob < ev->top[i][j + 1].logprob) c->unsorted_top = true;
            if (at < MAX_TOK)
                memcpy(c->top[ev->choice][at], ev->top[i], sizeof(ks_top_logprob) * (size_t)c->top_k);
        }
        record_text(c, ev, &m);
        cancel_self = c->cancel_self_after > 0 && c->text_events[ev->choice] == c->cancel_self_after;
        break;
    case KS_EVENT_CHOICE_END:
        c->finish[ev->choice] = ev->finish;
        c->choice_ends++;
        break;
    case KS_EVENT_DONE:
        c->done = true;
        c->prompt_tokens = ev->prompt_tokens;
        c->completion_tokens = ev->completion_tokens;
        c->cached_tokens = ev->cached_tokens;
        break;
    case KS_EVENT_EMBEDDING: /* a decoder's engine never sends one */
        c->error = true;
        snprintf(c->message, sizeof c->message, "an embedding event from a decoder's engine");
        break;
    case KS_EVENT_ERROR:
        c->error = true;
        snprintf(c->message, sizeof c->message, "%s", ev->message);
        break;
    }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (cancel_self) {
        ks_engine_cancel(c->engine, c->handle);
        pthread_mutex_lock(&c->mu);
        c->cancel_returned = true;
        pthread_mutex_unlock(&c->mu);
    }
}

static struct timespec deadline_in(double seconds) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double t = (double)ts.tv_nsec * 1e-9 + seconds;
    ts.tv_sec += (time_t)t;
    ts.tv_nsec = (long)((t - (double)(time_t)t) * 1e9);
    return ts;
}

/* Wait (bounded) until the request ended; returns whether it did. */
static bool wait_end(collector *c, double seconds) {
    struct timespec dl = deadline_in(seconds);
    pthread_mutex_lock(&c->mu);
    while (!c->done && !c->error)
        if (pthread_cond_timedwait(&c->cv, &c->mu, &dl) != 0) break;
    bool ended = c->done || c->error;
    pthread_mutex_unlock(&c->mu);
    return ended;
}

/* Wait (bounded) until choice 0 had n TEXT events. */
static bool wait_text_events(collector *c, int n, double seconds) {
    struct timespec dl = deadline_in(seconds);
    pthread_mutex_lock(&c->mu);
    while (c->text_events[0] < n && !c->done && !c->error)
        if (pthread_cond_timedwait(&c->cv, &c->mu, &dl) != 0) break;
    bool ok = c->text_events[0] >= n;
    pthread_mutex_unlock(&c->mu);
    return ok;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Poll the metrics (bounded) until running sequences and cells used drop to the given values. */
static bool wait_idle_metrics(ks_engine *e, int32_t cells, double seconds) {
    for (double waited = 0; waited < seconds; waited += 0.002) {
        ks_metrics m;
        ks_engine_metrics(e, &m);
        if (m.running_sequences == 0 && m.kv_cells_used == cells && m.queue_depth == 0) return true;
        sleep_ms(2);
    }
    return false;
}

/* ---- references: one sequence alone ---- */

static int32_t tokenize(const char *text, int32_t *ids, int32_t cap) {
    size_t n = 0;
    CHECK_OK(kiln_tokenize(kiln_model_vocab(model), text, strlen(text), true, ids, (size_t)cap, &n));
    return (int32_t)n;
}

/* Greedy decoding of prompt alone, with OpenAI's penalties over the generated tokens; returns the count
 * (the final EOS included unless ignore_eos). */
static int32_t greedy_alone(const int32_t *prompt, int32_t n_prompt, int32_t max_tokens, bool ignore_eos,
                            float presence, float frequency, int32_t *out) {
    kiln_ctx_params cp = harness_ctx_params();
    cp.n_ctx = 1024;
    kiln_ctx *ctx = NULL;
    CHECK_OK(kiln_ctx_create(model, &cp, &ctx));
    int32_t n_vocab = kiln_model_n_vocab(model), eos = kiln_vocab_eos(kiln_model_vocab(model)), g = 0;
    float *l = malloc((size_t)n_vocab * sizeof *l);
    const float *logits = NULL;
    CHECK_OK(kiln_ctx_decode(ctx, prompt, n_prompt, &logits));
    while (ctx && logits && g < max_tokens) {
        memcpy(l, logits, (size_t)n_vocab * sizeof *l);
        for (int32_t t = 0; t < n_vocab; t++) {
            int32_t count = 0;
            for (int32_t i = 0; i < g; i++)
                count += out[i] == t;
            if (count > 0) l[t] -= presence + frequency * (float)count;
        }
        int32_t t = harness_argmax(l, n_vocab);
        out[g++] = t;
        if ((t == eos && !ignore_eos) || g == max_tokens) break;
        CHECK_OK(kiln_ctx_decode(ctx, &t, 1, &logits));
    }
    free(l);
    kiln_ctx_destroy(ctx);
    return g;
}

/* The text of generated tokens (a final EOS prints nothing). */
static void text_of(const int32_t *tokens, int32_t n, char *buf, size_t cap) {
    size_t len = 0;
    CHECK_OK(kiln_detokenize(kiln_model_vocab(model), tokens, (size_t)n, false, buf, cap, &len));
}

static ks_engine *engine_with(int32_t n_parallel, int32_t n_ctx, int32_t n_batch, int32_t cache_seqs) {
    ks_engine_params p = ks_engine_params_default();
    p.n_parallel = n_parallel;
    p.n_ctx = n_ctx;
    p.n_batch = n_batch;
    p.cache_seqs = cache_seqs;
    p.max_queue = 16;
    ks_engine *e = NULL;
    CHECK_OK(ks_engine_create(model, &p, &e));
    return e;
}

static ks_request greedy_request(const int32_t *prompt, int32_t n_prompt, int32_t max_tokens) {
    ks_request r = ks_request_default();
    r.prompt = prompt;
    r.n_prompt = n_prompt;
    r.max_tokens = max_tokens;
    r.temperature = 0;
    return r;
}

static const char *const PROMPTS[8] = {
    "Once upon a time",
    "The little dog",
    "Lily wanted to play",
    "Tom had a big red ball",
    "One day, a cat",
    "The sun was hot",
    "Mom said",
    "There was a bird in the tree",
};

/* ---- the specification ---- */

static void concurrent_greedy_requests_each_match_their_sequence_decoded_alone(void) {
    ks_engine *e = engine_with(8, 1024, 64, 0);
    int32_t prompts[8][64], n_prompt[8];
    collector *c[8];
    for (int i = 0; i < 8; i++) {
        n_prompt[i] = tokenize(PROMPTS[i], prompts[i], 64);
        ks_request r = greedy_request(prompts[i], n_prompt[i], 40);
        r.logprobs = 0;
        c[i] = collector_new(e);
        CHECK_OK(ks_engine_submit(e, &r, on_event, c[i], &c[i]->handle));
    }
    for (int i = 0; i < 8; i++) {
        CHECK(wait_end(c[i], WAIT_S));
        CHECK(c[i]->done);
        int32_t ref[64];
        int32_t n = greedy_alone(prompts[i], n_prompt[i], 40, false, 0, 0, ref);
        CHECK_EQ_INT(c[i]->n_tokens[0], n);
        CHECK_EQ_INT(c[i]->completion_tokens, n);
        for (int32_t j = 0; j < n && j < c[i]->n_tokens[0]; j++)
            CHECK_EQ_INT(c[i]->tokens[0][j], ref[j]);
        char want[4096];
        text_of(ref, n, want, sizeof want);
        c[i]->text[0][c[i]->len[0]] = '\0';
        CHECK_STR(c[i]->text[0], want);
        CHECK_EQ_INT(c[i]->finish[0], n < 40 ? KS_FINISH_STOP : KS_FINISH_LENGTH);
        CHECK_EQ_INT(c[i]->prompt_tokens, n_prompt[i]);
        CHECK_EQ_INT(c[i]->events_after_end, 0);
    }
    ks_metrics m;
    ks_engine_metrics(e, &m);
    CHECK_EQ_INT(m.requests_ok, 8);
    CHECK(wait_idle_metrics(e, 0, WAIT_S));
    ks_engine_destroy(e);
    for (int i = 0; i < 8; i++)
        collector_free(c[i]);
}

/* Prompt lookup (draft_max without a draft model): greedy output is the tokens of plain decoding, for requests that guess a
 * lot (a repetitive prompt) sharing batches with ones that do not, and every guessed cell is given back.
 * Alone, the repetitive request needs fewer steps than tokens: guesses were accepted. */
static void prompt_lookup_speculation_gives_the_plain_greedy_tokens_in_shared_batches(void) {
    static const char repeat[] = "Lily was sad and didn't know what to do. Lily was sad and didn't know what "
                                 "to do. Lily was sad and didn't know what to do.";
    ks_engine_params p = ks_engine_params_default();
    ks_engine *e = NULL;
    int32_t prompts[6][64], n_prompt[6];
    collector *c[6];
    ks_metrics m;
    p.n_parallel = 4;
    p.n_ctx = 1024;
    p.cache_seqs = 0;
    p.draft_max = 8;
    CHECK_OK(ks_engine_create(model, &p, &e));
    if (!e) return;
    for (int i = 0; i < 6; i++) {
        n_prompt[i] = tokenize(i % 2 ? PROMPTS[i] : repeat, prompts[i], 64);
        ks_request r = greedy_request(prompts[i], n_prompt[i], 48);
        r.logprobs = 0;
        c[i] = collector_new(e);
        CHECK_OK(ks_engine_submit(e, &r, on_event, c[i], &c[i]->handle));
    }
    for (int i = 0; i < 6; i++) {
        int32_t ref[64], n;
        CHECK(wait_end(c[i], WAIT_S));
        n = greedy_alone(prompts[i], n_prompt[i], 48, false, 0, 0, ref);
        CHECK_EQ_INT(c[i]->n_tokens[0], n);
        CHECK_EQ_INT(c[i]->completion_tokens, n);
        for (int32_t j = 0; j < n && j < c[i]->n_tokens[0]; j++)
            CHECK_EQ_INT(c[i]->tokens[0][j], ref[j]);
        CHECK_EQ_INT(c[i]->events_after_end, 0);
    }
    CHECK(wait_idle_metrics(e, 0, WAIT_S)); /* no guessed cell left behind */
    for (int i = 0; i < 6; i++)
        collector_free(c[i]);
    ks_engine_metrics(e, &m);
    uint64_t steps0 = m.steps;
    ks_request r = greedy_request(prompts[0], n_prompt[0], 48);
    c[0] = collector_new(e);
    CHECK_OK(ks_engine_submit(e, &r, on_event, c[0], &c[0]->handle));
    CHECK(wait_end(c[0], WAIT_S));
    ks_engine_metrics(e, &m);
    CHECK(m.steps - steps0 < (uint64_t)c[0]->completion_tokens); /* the prompt's step included */
    collector_free(c[0]);
    ks_engine_destroy(e);
}

/* Counts the engine's log lines that report a failed draft decode (the draft's sequences out of step). */
static void count_draft_failures(void *user, const char *line) {
    if (strstr(line, "draft model's decode failed")) __atomic_add_fetch((int *)user, 1, __ATOMIC_RELAXED);
}

/* A draft model (draft_model): greedy output is the tokens of plain decoding for requests sharing batches,
 * the two choices of one request included (they share the draft's prompt cells), with the model as its own
 * draft (its guesses are kept: a lone request needs fewer steps than tokens) and with a Q4_0 copy of it
 * (some guesses rejected, so the draft's cells are rolled back: a draft sequence out of step with its
 * choice would fail the draft's next batch, which the engine logs); afterwards neither context holds a
 * cell. A draft of another vocabulary, and more guesses a step than KS_DRAFT_MAX, are refused by name. */
static void a_draft_model_gives_the_plain_greedy_tokens_in_shared_batches(void) {
    enum { N_REQ = 5, MAX = 40 };
    const char *q4_path = KILN_TEST_TMP "/engine_draft_q4_0.gguf";
    kiln_quantize_params qp = kiln_quantize_params_default();
    kiln_model *q4 = NULL, *other = NULL;
    qp.mix = KILN_MIX_Q4_0;
    CHECK_OK(kiln_quantize_file(KILN_MODEL_PATH, q4_path, &qp, NULL, NULL));
    CHECK_OK(kiln_model_load(q4_path, &q4));
    kiln_model *drafts[2] = {model, q4};
    for (int d = 0; d < 2 && drafts[d]; d++) {
        ks_engine_params p = ks_engine_params_default();
        ks_engine *e = NULL;
        int32_t prompts[N_REQ][64], n_prompt[N_REQ];
        collector *c[N_REQ];
        ks_metrics m;
        p.n_parallel = 6;
        p.n_ctx = 1024;
        p.cache_seqs = 0;
        p.draft_model = drafts[d];
        p.draft_max = 6;
        int failures = 0;
        p.log = count_draft_failures;
        p.log_user = &failures;
        CHECK_OK(ks_engine_create(model, &p, &e));
        if (!e) break;
        for (int i = 0; i < N_REQ; i++) {
            n_prompt[i] = tokenize(PROMPTS[i], prompts[i], 64);
            ks_request r = greedy_request(prompts[i], n_prompt[i], MAX);
            r.logprobs = 0;
            r.n = i == 2 ? 2 : 1;
            c[i] = collector_new(e);
            CHECK_OK(ks_engine_submit(e, &r, on_event, c[i], &c[i]->handle));
        }
        for (int i = 0; i < N_REQ; i++) {
            int32_t ref[MAX], n;
            CHECK(wait_end(c[i], WAIT_S));
            n = greedy_alone(prompts[i], n_prompt[i], MAX, false, 0, 0, ref);
            for (int ch = 0; ch < (i == 2 ? 2 : 1); ch++) {
                CHECK_EQ_INT(c[i]->n_tokens[ch], n);
                for (int32_t j = 0; j < n && j < c[i]->n_tokens[ch]; j++)
                    CHECK_EQ_INT(c[i]->tokens[ch][j], ref[j]);
            }
            CHECK_EQ_INT(c[i]->events_after_end, 0);
            collector_free(c[i]);
        }
        CHECK(wait_idle_metrics(e, 0, WAIT_S)); /* no guessed cell left behind in the target */
        ks_engine_metrics(e, &m);
        CHECK_EQ_INT(m.draft_kv_cells_used, 0); /* nor any cell in the draft */
        CHECK(m.drafted_tokens > 0);
        if (d == 0) CHECK(m.accepted_tokens * 10 >= m.drafted_tokens * 9); /* only a near tie can differ */
        if (d == 1) CHECK(m.accepted_tokens > 0 && m.accepted_tokens < m.drafted_tokens);
        uint64_t steps0 = m.steps;
        ks_request r = greedy_request(prompts[0], n_prompt[0], MAX);
        c[0] = collector_new(e);
        CHECK_OK(ks_engine_submit(e, &r, on_event, c[0], &c[0]->handle));
        CHECK(wait_end(c[0], WAIT_S));
        ks_engine_metrics(e, &m);
        if (d == 0) CHECK(m.steps - steps0 < (uint64_t)c[0]->completion_tokens);
        collector_free(c[0]);
        ks_engine_destroy(e);
        CHECK_EQ_INT(failures, 0);
    }
    CHECK_OK(kiln_model_load(KILN_TEST_DATA "/arch/gpt2.gguf", &other));
    ks_engine_params p = ks_engine_params_default();
    ks_engine *e = NULL;
    p.draft_model = other;
    CHECK_STATUS(ks_engine_create(model, &p, &e), KILN_E_INVALID_ARG);
    CHECK(e == NULL && strstr(kiln_last_error(), "draft model's vocabulary"));
    p.draft_model = model;
    p.draft_max = 65; /* one past KS_DRAFT_MAX */
    CHECK_STATUS(ks_engine_create(model, &p, &e), KILN_E_INVALID_ARG);
    CHECK(e == NULL && strstr(kiln_last_error(), "draft_max 65 is outside 0 .. 64"));
    kiln_model_destroy(other);
    kiln_model_destroy(q4);
    remove(q4_path);
}

static void a_long_prompt_is_prefilled_in_slices_while_every_stream_gets_a_token_each_step(void) {
    enum { N_STREAMS = 4, LONG = 300, BATCH = 64 };
    ks_engine *e = engine_with(N_STREAMS + 1, 1024, BATCH, 0);
    int32_t prompts[N_STREAMS][64];
    collector *s[N_STREAMS];
    for (int i = 0; i < N_STREAMS; i++) {
        ks_request r = greedy_request(prompts[i], tokenize(PROMPTS[i], prompts[i], 64), 100);
        r.ignore_eos = true;
        r.logprobs = 0; /* one TEXT event per token, even one whose text is held back */
        s[i] = collector_new(e);
        CHECK_OK(ks_engine_submit(e, &r, on_event, s[i], &s[i]->handle));
    }
    for (int i = 0; i < N_STREAMS; i++)
        CHECK(wait_text_events(s[i], 3, WAIT_S));
    int32_t long_prompt[LONG];
    uint32_t x = 12345;
    long_prompt[0] = 1;
    for (int i = 1; i < LONG; i++) {
        x = x * 1664525u + 1013904223u;
        long_prompt[i] = 3 + (int32_t)(x >> 8) % 500;
    }
    ks_metrics before;
    ks_engine_metrics(e, &before);
    ks_request r = greedy_request(long_prompt, LONG, 2);
    r.logprobs = 0;
    collector *l = collector_new(e);
    CHECK_OK(ks_engine_submit(e, &r, on_event, l, &l->handle));
    CHECK(wait_end(l, WAIT_S));
    uint64_t first = l->step_of_event[0][0];
    /* 300 prompt tokens at most 64 - 4 a step: at least 5 steps after the submission. */
    CHECK(first >= before.steps + 5);
    for (int i = 0; i < N_STREAMS; i++) {
        CHECK(wait_end(s[i], WAIT_S));
        for (uint64_t step = before.steps + 1; step <= first; step++) {
            bool got = false;
            for (int k = 0; k < s[i]->text_events[0] && k < MAX_TOK; k++)
                got = got || s[i]->step_of_event[0][k] == step;
            if (!got)
                harness_fail(__FILE__, __LINE__, "stream %d got no token in step %llu", i,
                             (unsigned long long)step);
        }
        CHECK_EQ_INT(s[i]->n_tokens[0], 100);
    }
    ks_engine_destroy(e);
    collector_free(l);
    for (int i = 0; i < N_STREAMS; i++)
        collector_free(s[i]);
}

/* A stream's callback that submits another request as soon as the metrics show a given request admitted
 * (so that it arrives while that one's prompt is being prefilled), recording the step it was sent in. */
static struct {
    ks_engine *e;
    uint64_t prompt_tokens; /* submit once metrics.prompt_tokens reaches this */
    const ks_request *req;
    collector *c;
    bool sent;
    uint64_t step;
} trigger;

static void on_event_then_submit(void *user, const ks_event *ev) {
    on_event(user, ev);
    ks_metrics m;
    ks_engine_metrics(trigger.e, &m);
    if (trigger.sent || m.prompt_tokens < trigger.prompt_tokens) return;
    trigger.sent = true;
    trigger.step = m.steps;
    CHECK_OK(ks_engine_submit(trigger.e, trigger.req, on_event, trigger.c, &trigger.c->handle));
}

static void a_short_prompt_overtakes_a_long_prefill_and_both_give_what_they_give_alone(void) {
    enum { LONG = 1000, BATCH = 64 };
    ks_engine *e = engine_with(3, 2048, BATCH, 0);
    int32_t stream_prompt[64], short_prompt[64], long_prompt[LONG];
    ks_request a = greedy_request(stream_prompt, tokenize(PROMPTS[0], stream_prompt, 64), 400);
    a.ignore_eos = true;
    collector *ca = collector_new(e), *cl = collector_new(e), *cs = collector_new(e);
    uint32_t x = 777;
    long_prompt[0] = 1;
    for (int i = 1; i < LONG; i++) {
        x = x * 1664525u + 1013904223u;
        long_prompt[i] = 3 + (int32_t)(x >> 8) % 500;
    }
    ks_request l = greedy_request(long_prompt, LONG, 2), s = greedy_request(short_prompt, 0, 8);
    s.n_prompt = tokenize(PROMPTS[3], short_prompt, 64);
    l.logprobs = s.logprobs = 0; /* the tokens come with the events */
    ks_metrics m0;
    ks_engine_metrics(e, &m0);
    trigger.e = e;
    trigger.prompt_tokens = m0.prompt_tokens + (uint64_t)a.n_prompt + LONG;
    trigger.req = &s;
    trigger.c = cs;
    trigger.sent = false;
    CHECK_OK(ks_engine_submit(e, &a, on_event_then_submit, ca, &ca->handle));
    CHECK(wait_text_events(ca, 2, WAIT_S));
    CHECK_OK(ks_engine_submit(e, &l, on_event, cl, &cl->handle));
    CHECK(wait_end(cl, WAIT_S));
    CHECK(wait_end(cs, WAIT_S));
    CHECK(trigger.sent);
    /* The short prompt is admitted in the step after it was sent and finished there, while the long one,
     * admitted before it, still had most of its 1,000 tokens (about 60 a step) to go. */
    uint64_t short_first = cs->step_of_event[0][0], long_first = cl->step_of_event[0][0];
    CHECK(short_first <= trigger.step + 2);
    CHECK(short_first < long_first);
    /* Greedy output is what each prompt gives decoded alone. */
    int32_t ref[8];
    int32_t n = greedy_alone(short_prompt, s.n_prompt, 8, false, 0, 0, ref);
    CHECK_EQ_INT(cs->n_tokens[0], n);
    for (int32_t j = 0; j < n && j < cs->n_tokens[0]; j++)
        CHECK_EQ_INT(cs->tokens[0][j], ref[j]);
    n = greedy_alone(long_prompt, LONG, 2, false, 0, 0, ref);
    CHECK_EQ_INT(cl->n_tokens[0], n);
    for (int32_t j = 0; j < n && j < cl->n_tokens[0]; j++)
        CHECK_EQ_INT(cl->tokens[0][j], ref[j]);
    ks_engine_cancel(e, ca->handle);
    ks_engine_destroy(e);
    collector_free(ca);
    collector_free(cl);
    collector_free(cs);
}

static void n_choices_at_temperature_0_are_identical_and_share_one_prefill(void) {
    ks_engine *e = engine_with(4, 512, 64, 0);
    int32_t prompt[64];
    int32_t n_prompt = tokenize("The little dog ran to the park", prompt, 64);
    ks_request r = greedy_request(prompt, n_prompt, 8);
    r.n = 3;
    r.ignore_eos = true;
    collector *c = collector_new(e);
    CHECK_OK(ks_engine_submit(e, &r, on_event, c, &c->handle));
    CHECK(wait_end(c, WAIT_S));
    CHECK(c->done);
    for (int i = 0; i < 3; i++) {
        c->text[i][c->len[i]] = '\0';
        CHECK_STR(c->text[i], c->text[0]);
        CHECK_EQ_INT(c->finish[i], KS_FINISH_LENGTH);
    }
    CHECK(c->len[0] > 0);
    CHECK_EQ_INT(c->prompt_tokens, n_prompt);
    CHECK_EQ_INT(c->completion_tokens, 24);
    /* The prompt once plus 7 decoded tokens per choice; a prompt per choice would add 2 * n_prompt. */
    CHECK_EQ_INT(c->max_cells_seen, n_prompt + 3 * 7);
    ks_metrics m;
    ks_engine_metrics(e, &m);
    CHECK_EQ_INT(m.prompt_tokens, n_prompt);
    CHECK(wait_idle_metrics(e, 0, WAIT_S));
    ks_engine_destroy(e);
    collector_free(c);
}

/* The byte offset where token i's text ends, for the greedy continuation. */
static void token_ends(const int32_t *tokens, int32_t n, size_t *ends) {
    kiln_detok *d = NULL;
    CHECK_OK(kiln_detok_create(kiln_model_vocab(model), false, &d));
    size_t at = 0;
    for (int32_t i = 0; i < n; i++) {
        kiln_str s;
        CHECK_OK(kiln_detok_push(d, tokens[i], &s));
        at += s.len;
        ends[i] = at;
    }
    kiln_detok_destroy(d);
}

static void a_stop_string_split_across_tokens_is_never_emitted_and_cuts_the_text_exactly(void) {
    int32_t prompt[64], ref[64];
    int32_t n_prompt = tokenize("Once upon a time", prompt, 64);
    int32_t n = greedy_alone(prompt, n_prompt, 48, true, 0, 0, ref);
    char full[4096];
    text_of(ref, n, full, sizeof full);
    size_t ends[64];
    token_ends(ref, n, ends);
    /* A stop made of the last two bytes of token k and the first two of token k + 1, first seen there. */
    char stop[8] = "";
    int32_t k = 3;
    for (; k + 1 < n; k++) {
        size_t a = ends[k] - (k ? ends[k - 1] : 0), b = ends[k + 1] - ends[k];
        if (a < 2 || b < 2) continue;
        memcpy(stop, full + ends[k] - 2, 4);
        stop[4] = '\0';
        if (strstr(full, stop) == full + ends[k] - 2) break;
    }
    CHECK(k + 1 < n);
    ks_engine *e = engine_with(2, 512, 64, 0);
    const char *stops[2] = {"never in a story", stop};
    ks_request r = greedy_request(prompt, n_prompt, 48);
    r.ignore_eos = true;
    r.stop = stops;
    r.n_stop = 2;
    r.logprobs = 0;
    collector *c = collector_new(e);
    CHECK_OK(ks_engine_submit(e, &r, on_event, c, &c->handle));
    CHECK(wait_end(c, WAIT_S));
    c->text[0][c->len[0]] = '\0';
    full[ends[k] - 2] = '\0';
    CHECK_STR(c->text[0], full);
    CHECK_EQ_INT(c->finish[0], KS_FINISH_STOP);
    CHECK_EQ_INT(c->completion_tokens, k + 2);
    /* Tokens whose text lies wholly in the stop string are dropped with it. */
    int32_t carried = 0;
    while (carried <= k + 1 && (carried ? ends[carried - 1] : 0) < ends[k] - 2)
        carried++;
    CHECK_EQ_INT(c->n_tokens[0], carried);
    ks_engine_destroy(e);
    collector_free(c);
}

static void a_cached_prefix_is_reused_and_gives_what_a_fresh_engine_gives(void) {
    int32_t p1[64], p2[64];
    int32_t n1 = tokenize("Once upon a time, there was a little girl named Lily.", p1, 64);
    int32_t n2 = tokenize("Once upon a time, there was a little girl named Lily. She loved to", p2, 64);
    ks_engine *warm = engine_with(2, 512, 16, 4), *cold = engine_with(2, 512, 16, 4);
    collector *first = collector_new(warm), *second = collector_new(warm), *fresh = collector_new(cold),
              *again = collector_new(warm);
    ks_request r1 = greedy_request(p1, n1, 12), r2 = greedy_request(p2, n2, 24);
    r1.logprobs = r2.logprobs = 0;
    CHECK_OK(ks_engine_submit(warm, &r1, on_event, first, &first->handle));
    CHECK(wait_end(first, WAIT_S));
    ks_metrics m;
    ks_engine_metrics(warm, &m);
    CHECK_EQ_INT(m.prefix_cache_sequences, 1);
    CHECK(m.kv_cells_used > 0);
    CHECK_OK(ks_engine_submit(warm, &r2, on_event, second, &second->handle));
    CHECK_OK(ks_engine_submit(cold, &r2, on_event, fresh, &fresh->handle));
    CHECK(wait_end(second, WAIT_S));
    CHECK(wait_end(fresh, WAIT_S));
    int32_t shared = 0;
    while (shared < n1 && p1[shared] == p2[shared])
        shared++;
    CHECK(shared > 4);
    CHECK(second->cached_tokens >= shared);
    CHECK_EQ_INT(fresh->cached_tokens, 0);
    CHECK_EQ_INT(second->n_tokens[0], fresh->n_tokens[0]);
    for (int32_t j = 0; j < fresh->n_tokens[0]; j++)
        CHECK_EQ_INT(second->tokens[0][j], fresh->tokens[0][j]);
    second->text[0][second->len[0]] = fresh->text[0][fresh->len[0]] = '\0';
    CHECK_STR(second->text[0], fresh->text[0]);
    /* The same prompt again reuses all of it but its last token. */
    CHECK_OK(ks_engine_submit(warm, &r1, on_event, again, &again->handle));
    CHECK(wait_end(again, WAIT_S));
    CHECK_EQ_INT(again->cached_tokens, n1 - 1);
    again->text[0][again->len[0]] = first->text[0][first->len[0]] = '\0';
    CHECK_STR(again->text[0], first->text[0]);
    ks_engine_metrics(warm, &m);
    CHECK(m.cached_prompt_tokens >= (uint64_t)(shared + n1 - 1));
    ks_engine_destroy(warm);
    ks_engine_destroy(cold);
    collector_free(first);
    collector_free(second);
    collector_free(fresh);
    collector_free(again);
}

/* llama-server's slot save/restore: the last request's cached prompt, saved to a file, restored into a
 * new engine (a restart), is reused by the same prompt, which then gives exactly the text it gave. */
static void a_saved_slot_restored_into_a_new_engine_is_reused_and_gives_the_same_text(void) {
    int32_t p1[64];
    int32_t n1 = tokenize("Once upon a time, there was a little girl named Lily.", p1, 64);
    char path[512], bad[512];
    ks_slot_result res;
    ks_engine *before = engine_with(2, 512, 16, 4), *after = engine_with(2, 512, 16, 4), *none = engine_with(1, 64, 16, 0);
    collector *first = collector_new(before), *again = collector_new(after);
    ks_request r1 = greedy_request(p1, n1, 12);
    ks_metrics m;
    snprintf(path, sizeof path, "%s/slot0.kvs", KILN_TEST_TMP);
    snprintf(bad, sizeof bad, "%s/slot0_bad.kvs", KILN_TEST_TMP);
    CHECK_STATUS(ks_engine_slot(before, KS_SLOT_SAVE, 0, path, &res), KILN_E_NOT_FOUND);
    CHECK_ERROR_MENTIONS("slot 0 holds no cached prompt");
    CHECK_OK(ks_engine_submit(before, &r1, on_event, first, &first->handle));
    CHECK(wait_end(first, WAIT_S));
    CHECK_OK(ks_engine_slot(before, KS_SLOT_SAVE, 0, path, &res));
    CHECK_EQ_INT(res.n_tokens, n1 + 11); /* the prompt and every generated token but the last */
    CHECK(res.bytes > 64);
    CHECK_STATUS(ks_engine_slot(before, KS_SLOT_SAVE, 4, path, &res), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("slot 4 is outside 0..3");
    CHECK_OK(ks_engine_slot(before, KS_SLOT_ERASE, 0, NULL, &res));
    CHECK_EQ_INT(res.n_tokens, n1 + 11);
    ks_engine_metrics(before, &m);
    CHECK_EQ_INT(m.prefix_cache_sequences, 0);
    CHECK_STATUS(ks_engine_slot(none, KS_SLOT_SAVE, 0, path, &res), KILN_E_UNSUPPORTED);
    /* A truncated copy is refused by name and leaves the cache empty. */
    {
        size_t size = 0;
        char *bytes = harness_read_file(path, &size);
        FILE *f = fopen(bad, "wb");
        CHECK(bytes && f && fwrite(bytes, 1, size / 2, f) == size / 2);
        if (f) fclose(f);
        free(bytes);
        CHECK_STATUS(ks_engine_slot(after, KS_SLOT_RESTORE, 0, bad, &res), KILN_E_FORMAT);
        CHECK_ERROR_MENTIONS("KV state");
        ks_engine_metrics(after, &m);
        CHECK_EQ_INT(m.prefix_cache_sequences, 0);
        CHECK_EQ_INT(m.kv_cells_used, 0);
    }
    CHECK_OK(ks_engine_slot(after, KS_SLOT_RESTORE, 0, path, &res));
    CHECK_EQ_INT(res.n_tokens, n1 + 11);
    ks_engine_metrics(after, &m);
    CHECK_EQ_INT(m.prefix_cache_sequences, 1);
    CHECK_OK(ks_engine_submit(after, &r1, on_event, again, &again->handle));
    CHECK(wait_end(again, WAIT_S));
    CHECK_EQ_INT(again->cached_tokens, n1 - 1);
    again->text[0][again->len[0]] = first->text[0][first->len[0]] = '\0';
    CHECK_STR(again->text[0], first->text[0]);
    ks_engine_destroy(before);
    ks_engine_destroy(after);
    ks_engine_destroy(none);
    collector_free(first);
    collector_free(again);
}

static void penalties_subtract_presence_and_frequency_times_count_of_generated_tokens(void) {
    int32_t prompt[64], ref[64];
    int32_t n_prompt = tokenize("The cat sat", prompt, 64);
    const float cases[3][2] = {{1.5f, 0}, {0, 0.7f}, {-0.5f, 1.0f}};
    ks_engine *e = engine_with(2, 512, 64, 0);
    for (int k = 0; k < 3; k++) {
        ks_request r = greedy_request(prompt, n_prompt, 30);
        r.presence_penalty = cases[k][0];
        r.frequency_penalty = cases[k][1];
        r.ignore_eos = true;
        r.logprobs = 0;
        collector *c = collector_new(e);
        CHECK_OK(ks_engine_submit(e, &r, on_event, c, &c->handle));
        CHECK(wait_end(c, WAIT_S));
        int32_t n = greedy_alone(prompt, n_prompt, 30, true, cases[k][0], cases[k][1], ref);
        CHECK_EQ_INT(c->n_tokens[0], n);
        for (int32_t j = 0; j < n && j < c->n_tokens[0]; j++)
            CHECK_EQ_INT(c->tokens[0][j], ref[j]);
        collector_free(c);
    }
    ks_engine_destroy(e);
}

static void logprobs_are_the_log_softmax_of_the_logits_with_sorted_alternatives(void) {
    int32_t prompt[64];
    int32_t n_prompt = tokenize("Lily and Tom went", prompt, 64);
    ks_engine *e = engine_with(2, 512, 64, 0);
    ks_request r = greedy_request(prompt, n_prompt, 6);
    r.logprobs = 5;
    r.ignore_eos = true;
    collector *c = collector_new(e);
    c->top_k = 5;
    CHECK_OK(ks_engine_submit(e, &r, on_event, c, &c->handle));
    CHECK(wait_end(c, WAIT_S));
    CHECK_EQ_INT(c->n_tokens[0], 6);
    CHECK(!c->unsorted_top);
    kiln_ctx_params cp = harness_ctx_params();
    cp.n_ctx = 256;
    kiln_ctx *ctx = NULL;
    CHECK_OK(kiln_ctx_create(model, &cp, &ctx));
    const float *logits = NULL;
    CHECK_OK(kiln_ctx_decode(ctx, prompt, n_prompt, &logits));
    int32_t n_vocab = kiln_model_n_vocab(model);
    for (int32_t g = 0; g < 6 && g < c->n_tokens[0] && logits; g++) {
        double max = logits[harness_argmax(logits, n_vocab)], sum = 0;
        for (int32_t t = 0; t < n_vocab; t++)
            sum += exp((double)logits[t] - max);
        int32_t tok = c->tokens[0][g];
        CHECK_EQ_INT(tok, harness_argmax(logits, n_vocab));
        CHECK_NEAR(c->logprobs[0][g], (double)logits[tok] - max - log(sum), 1e-4);
        const ks_top_logprob *top = c->top[0][g];
        CHECK_EQ_INT(top[0].token, tok);
        for (int j = 0; j < 5; j++) {
            CHECK_NEAR(top[j].logprob, (double)logits[top[j].token] - max - log(sum), 1e-4);
            if (j > 0) CHECK(top[j - 1].logprob >= top[j].logprob);
        }
        CHECK_OK(kiln_ctx_decode(ctx, &tok, 1, &logits));
    }
    kiln_ctx_destroy(ctx);
    ks_engine_destroy(e);
    collector_free(c);
}

static void cancel_frees_the_cells_and_silences_the_callback_wherever_the_request_is(void) {
    ks_engine *e = engine_with(1, 1024, 64, 0);
    int32_t prompt[64];
    int32_t n_prompt = tokenize("Once upon a time", prompt, 64);
    ks_request r = greedy_request(prompt, n_prompt, 600);
    r.ignore_eos = true;
    r.logprobs = 0;
    collector *decoding = collector_new(e), *queued = collector_new(e), *self = collector_new(e);
    CHECK_OK(ks_engine_submit(e, &r, on_event, decoding, &decoding->handle));
    CHECK(wait_text_events(decoding, 3, WAIT_S));
    CHECK_OK(ks_engine_submit(e, &r, on_event, queued, &queued->handle)); /* waits: n_parallel is 1 */
    ks_engine_cancel(e, queued->handle);
    pthread_mutex_lock(&queued->mu);
    queued->cancel_returned = true;
    pthread_mutex_unlock(&queued->mu);
    ks_engine_cancel(e, decoding->handle);
    pthread_mutex_lock(&decoding->mu);
    decoding->cancel_returned = true;
    pthread_mutex_unlock(&decoding->mu);
    CHECK(wait_idle_metrics(e, 0, WAIT_S));
    sleep_ms(20);
    CHECK_EQ_INT(decoding->events_after_cancel, 0);
    CHECK(!decoding->done && !decoding->error);
    CHECK_EQ_INT(queued->text_events[0] + queued->choice_ends + queued->done + queued->error, 0);
    /* A callback cancelling its own request gets nothing more either. */
    self->cancel_self_after = 2;
    CHECK_OK(ks_engine_submit(e, &r, on_event, self, &self->handle));
    CHECK(wait_idle_metrics(e, 0, WAIT_S));
    sleep_ms(20);
    CHECK_EQ_INT(self->text_events[0], 2);
    CHECK_EQ_INT(self->events_after_cancel, 0);
    ks_metrics m;
    ks_engine_metrics(e, &m);
    CHECK_EQ_INT(m.requests_cancelled, 3);
    CHECK_EQ_INT(m.running_sequences, 0);
    CHECK_EQ_INT(m.kv_cells_used, 0);
    ks_engine_cancel(e, 999999); /* unknown: ignored */
    ks_engine_destroy(e);
    collector_free(decoding);
    collector_free(queued);
    collector_free(self);
}

static void a_full_queue_refuses_with_range(void) {
    ks_engine_params p = ks_engine_params_default();
    p.n_parallel = 1;
    p.n_ctx = 1024;
    p.max_queue = 2;
    ks_engine *e = NULL;
    CHECK_OK(ks_engine_create(model, &p, &e));
    int32_t prompt[64];
    ks_request r = greedy_request(prompt, tokenize("Once upon a time", prompt, 64), 500);
    r.ignore_eos = true;
    collector *c[4];
    ks_handle h;
    for (int i = 0; i < 4; i++)
        c[i] = collector_new(e);
    CHECK_OK(ks_engine_submit(e, &r, on_event, c[0], &c[0]->handle));
    CHECK(wait_text_events(c[0], 1, WAIT_S)); /* admitted: the queue is empty again */
    CHECK_OK(ks_engine_submit(e, &r, on_event, c[1], &c[1]->handle));
    CHECK_OK(ks_engine_submit(e, &r, on_event, c[2], &c[2]->handle));
    CHECK_STATUS(ks_engine_submit(e, &r, on_event, c[3], &h), KILN_E_RANGE);
    CHECK_ERROR_MENTIONS("queue is full");
    ks_metrics m;
    ks_engine_metrics(e, &m);
    CHECK_EQ_INT(m.queue_depth, 2);
    for (int i = 0; i < 3; i++)
        ks_engine_cancel(e, c[i]->handle);
    CHECK(wait_idle_metrics(e, 0, WAIT_S));
    ks_engine_destroy(e);
    for (int i = 0; i < 4; i++)
        collector_free(c[i]);
}

static void a_request_that_can_never_fit_is_refused_with_the_limits(void) {
    ks_engine *e = engine_with(4, 256, 64, 0);
    int32_t prompt[16] = {1, 100, 200, 300, 400, 50, 60, 70, 80, 90};
    ks_request r = greedy_request(prompt, 10, 200);
    r.n = 2;
    ks_handle h;
    collector *c = collector_new(e);
    CHECK_STATUS(ks_engine_submit(e, &r, on_event, c, &h), KILN_E_CONTEXT_FULL);
    CHECK_ERROR_MENTIONS("408 KV cells");
    CHECK_ERROR_MENTIONS("the context has 256");
    r.n = 1;
    r.max_tokens = 247; /* 10 + 246 = 256: fits exactly */
    CHECK_OK(ks_engine_submit(e, &r, on_event, c, &h));
    CHECK(wait_end(c, WAIT_S));
    CHECK(c->done);
    ks_engine_destroy(e);
    collector_free(c);
}

static void every_invalid_field_is_refused_by_name(void) {
    ks_engine *e = engine_with(2, 256, 64, 0);
    int32_t prompt[4] = {1, 100, 200, 300}, bad[2] = {1, 5000};
    const char *empty_stop[1] = {""};
    collector *c = collector_new(e);
    ks_handle h;
    int32_t lens[1] = {4};
    struct {
        const char *field;
        ks_request r;
    } cases[16];
    int n = 0;
    ks_request base = greedy_request(prompt, 4, 8);
#define CASE(name, stmt)                                                                                     \
    do {                                                                                                     \
        ks_request r_ = base;                                                                                \
        stmt;                                                                                                \
        cases[n].field = (name);                                                                             \
        cases[n++].r = r_;                                                                                   \
    } while (0)
    CASE("prompt is empty", r_.n_prompt = 0);
    CASE("prompt[1] = 5000", (r_.prompt = bad, r_.n_prompt = 2));
    CASE("max_tokens 0", r_.max_tokens = 0);
    CASE("n 3", r_.n = 3);
    CASE("temperature -1", r_.temperature = -1);
    CASE("top_p 0", r_.top_p = 0);
    CASE("top_k -2", r_.top_k = -2);
    CASE("min_p 1.5", r_.min_p = 1.5f);
    CASE("presence_penalty 3", r_.presence_penalty = 3);
    CASE("frequency_penalty -2.5", r_.frequency_penalty = -2.5f);
    CASE("n_stop 5", r_.n_stop = 5);
    CASE("stop[0] is empty", (r_.stop = empty_stop, r_.n_stop = 1));
    CASE("logprobs 21", r_.logprobs = 21);
    CASE("eot_token 512", r_.eot_token = 512);
    CASE("the model is a decoder; it makes no embeddings", (r_.n_inputs = 1, r_.input_lens = lens));
#undef CASE
    for (int i = 0; i < n; i++) {
        CHECK_STATUS(ks_engine_submit(e, &cases[i].r, on_event, c, &h), KILN_E_INVALID_ARG);
        CHECK_ERROR_MENTIONS(cases[i].field);
    }
    CHECK_STATUS(ks_engine_submit(e, &base, NULL, c, &h), KILN_E_INVALID_ARG);
    ks_metrics m;
    ks_engine_metrics(e, &m);
    CHECK_EQ_INT(m.queue_depth, 0);
    ks_engine_destroy(e);
    collector_free(c);

    ks_engine_params p = ks_engine_params_default();
    p.n_parallel = 8;
    p.n_batch = 4;
    CHECK_STATUS(ks_engine_create(model, &p, &e), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("n_batch 4 is below n_parallel 8");
    p = ks_engine_params_default();
    p.n_parallel = 65;
    CHECK_STATUS(ks_engine_create(model, &p, &e), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("n_parallel 65");
}

static void shutdown_lets_requests_finish_within_grace_and_ends_the_rest_with_an_error(void) {
    int32_t prompt[64];
    int32_t n_prompt = tokenize("Once upon a time", prompt, 64);
    ks_request shorter = greedy_request(prompt, n_prompt, 3), longer = greedy_request(prompt, n_prompt, 2000);
    shorter.ignore_eos = longer.ignore_eos = true;
    longer.logprobs = 0;
    /* Within the grace: the running request and the one queued behind it both finish, and shutdown
     * returns when they have, long before the grace is over. */
    ks_engine *e = engine_with(1, 2048, 64, 0);
    collector *s1 = collector_new(e), *s2 = collector_new(e), *l = collector_new(e);
    CHECK_OK(ks_engine_submit(e, &shorter, on_event, s1, &s1->handle));
    CHECK_OK(ks_engine_submit(e, &shorter, on_event, s2, &s2->handle));
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ks_engine_shutdown(e, 30000);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK(s1->done && s2->done);
    CHECK((double)(t1.tv_sec - t0.tv_sec) < 20.0);
    ks_handle h;
    CHECK_STATUS(ks_engine_submit(e, &shorter, on_event, l, &h), KILN_E_UNSUPPORTED);
    CHECK_ERROR_MENTIONS("shutting down");
    ks_engine_destroy(e);
    /* After the grace: what still runs ends with an ERROR and nothing after it. */
    e = engine_with(1, 2048, 64, 0);
    l->engine = e;
    CHECK_OK(ks_engine_submit(e, &longer, on_event, l, &l->handle));
    CHECK(wait_text_events(l, 2, WAIT_S));
    ks_engine_shutdown(e, 1);
    CHECK(l->error && !l->done);
    CHECK(strstr(l->message, "shutting down") != NULL);
    CHECK(l->n_tokens[0] < 2000);
    ks_metrics m;
    ks_engine_metrics(e, &m);
    CHECK_EQ_INT(m.requests_failed, 1);
    CHECK_EQ_INT(m.requests_ok, 0);
    CHECK_EQ_INT(m.kv_cells_used, 0);
    ks_engine_destroy(e);
    CHECK_EQ_INT(l->events_after_end, 0);
    collector_free(s1);
    collector_free(s2);
    collector_free(l);
}

static double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
           (double)ru.ru_stime.tv_usec * 1e-6;
}

static void an_idle_engine_sleeps_and_its_metrics_add_up(void) {
    ks_engine *e = engine_with(2, 512, 64, 2);
    int32_t prompt[64];
    ks_request r = greedy_request(prompt, tokenize("The sun was hot", prompt, 64), 20);
    collector *c = collector_new(e);
    CHECK_OK(ks_engine_submit(e, &r, on_event, c, &c->handle));
    CHECK(wait_end(c, WAIT_S));
    double cpu = cpu_seconds();
    sleep_ms(200);
    CHECK(cpu_seconds() - cpu < 0.05); /* a busy-waiting thread would burn ~0.2 s */
    ks_metrics m;
    ks_engine_metrics(e, &m);
    CHECK_EQ_INT(m.requests_ok, 1);
    CHECK_EQ_INT(m.generated_tokens, (uint64_t)c->completion_tokens);
    CHECK_EQ_INT(m.ttft.total, 1);
    CHECK_EQ_INT(m.end_to_end.total, 1);
    CHECK_EQ_INT(m.queue_time.total, 1);
    CHECK_EQ_INT(m.inter_token.total, (uint64_t)c->completion_tokens - 1);
    CHECK_EQ_INT(m.ttft.count[KS_HIST_BUCKETS - 1], 1);
    CHECK_EQ_INT(m.kv_cells_total, 512);
    CHECK_EQ_INT(m.prefix_cache_sequences, 1);
    CHECK_EQ_INT(m.kv_cells_used, m.prefix_cache_cells);
    CHECK(m.steps >= (uint64_t)c->completion_tokens);
    ks_engine_destroy(e);
    collector_free(c);
}

int main(void) {
    if (kiln_model_load(KILN_MODEL_PATH, &model) != KILN_OK) {
        fprintf(stderr, "cannot load %s: %s\n", KILN_MODEL_PATH, kiln_last_error());
        return 1;
    }
    RUN(concurrent_greedy_requests_each_match_their_sequence_decoded_alone);
    RUN(prompt_lookup_speculation_gives_the_plain_greedy_tokens_in_shared_batches);
    RUN(a_draft_model_gives_the_plain_greedy_tokens_in_shared_batches);
    RUN(a_long_prompt_is_prefilled_in_slices_while_every_stream_gets_a_token_each_step);
    RUN(a_short_prompt_overtakes_a_long_prefill_and_both_give_what_they_give_alone);
    RUN(n_choices_at_temperature_0_are_identical_and_share_one_prefill);
    RUN(a_stop_string_split_across_tokens_is_never_emitted_and_cuts_the_text_exactly);
    RUN(a_cached_prefix_is_reused_and_gives_what_a_fresh_engine_gives);
    RUN(a_saved_slot_restored_into_a_new_engine_is_reused_and_gives_the_same_text);
    RUN(penalties_subtract_presence_and_frequency_times_count_of_generated_tokens);
    RUN(logprobs_are_the_log_softmax_of_the_logits_with_sorted_alternatives);
    RUN(cancel_frees_the_cells_and_silences_the_callback_wherever_the_request_is);
    RUN(a_full_queue_refuses_with_range);
    RUN(a_request_that_can_never_fit_is_refused_with_the_limits);
    RUN(every_invalid_field_is_refused_by_name);
    RUN(shutdown_lets_requests_finish_within_grace_and_ends_the_rest_with_an_error);
    RUN(an_idle_engine_sleeps_and_its_metrics_add_up);
    kiln_model_destroy(model);
    return harness_finish();
}
