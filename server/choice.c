/*
 * choice.c - one choice from logits to events (choice.h).
 *
 * Per token: penalize a copy of the logits when presence or frequency penalties are set (OpenAI's rule,
 * over the tokens generated so far: logit -= presence * (count > 0) + frequency * count), sample, record
 * the logprob of the raw logits and the top alternatives, then either finish (EOS or end of turn, unless
 * ignore_eos) or push the token through the detokenizer and the stop strings, emit what came out, and
 * finish on a stop, at max_tokens, or when the choice's grammar allows nothing but the end (the sampler
 * masks the logits by the grammar and advances it by each token).
 */
#include "choice.h"
#include "error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

kiln_status ks__gen_scratch_init(ks_gen_scratch *s, const kiln_model *model) {
    memset(s, 0, sizeof *s);
    s->vocab = kiln_model_vocab(model);
    s->n_vocab = kiln_model_n_vocab(model);
    s->eos = kiln_vocab_eos(s->vocab);
    s->piece_cap = 256;
    s->logits = malloc((size_t)s->n_vocab * sizeof *s->logits);
    s->counts = calloc((size_t)s->n_vocab, sizeof *s->counts);
    s->piece = malloc(s->piece_cap);
    if (!s->logits || !s->counts || !s->piece) {
        ks__gen_scratch_free(s);
        return kiln__error(KILN_E_NOMEM, "engine: sampling scratch for %d logits", s->n_vocab);
    }
    return KILN_OK;
}

void ks__gen_scratch_free(ks_gen_scratch *s) {
    kiln_grammar_vocab_destroy(s->gvocab);
    free(s->logits);
    free(s->counts);
    free(s->piece);
    memset(s, 0, sizeof *s);
}

/* Room for one more pending token (k alternatives each). */
static kiln_status pending_reserve(ks_pending *p, int32_t k) {
    if (p->n < p->cap) return KILN_OK;
    int32_t cap = p->cap ? 2 * p->cap : 8;
    size_t rows = (size_t)cap * (size_t)(k > 0 ? k : 1);
    void *a = realloc(p->tokens, (size_t)cap * sizeof *p->tokens);
    if (a) p->tokens = a;
    void *b = realloc(p->logprobs, (size_t)cap * sizeof *p->logprobs);
    if (b) p->logprobs = b;
    void *c = realloc(p->start, (size_t)cap * sizeof *p->start);
    if (c) p->start = c;
    void *d = realloc(p->end, (size_t)cap * sizeof *p->end);
    if (d) p->end = d;
    void *e = realloc(p->top, rows * sizeof *p->top);
    if (e) p->top = e;
    void *f = realloc(p->top_text_at, rows * sizeof *p->top_text_at);
    if (f) p->top_text_at = f;
    void *g = realloc((void *)p->top_rows, (size_t)cap * sizeof *p->top_rows);
    if (g) p->top_rows = g;
    if (!a || !b || !c || !d || !e || !f || !g)
        return kiln__error(KILN_E_NOMEM, "engine: logprobs of %d held-back tokens", cap);
    p->cap = cap;
    return KILN_OK;
}

static void pending_free(ks_pending *p) {
    free(p->tokens);
    free(p->logprobs);
    free(p->start);
    free(p->end);
    free(p->top);
    free(p->top_text_at);
    free((void *)p->top_rows);
    free(p->text);
    memset(p, 0, sizeof *p);
}

/* The choice's matcher, on the engine's token trie (made once, with EOS and the end of turn as ends). */
static kiln_status grammar_init(ks_choice *c, const ks_choice_params *p, ks_gen_scratch *s) {
    if (!s->gvocab) {
        int32_t ends[2], n = 0;
        if (s->eos >= 0) ends[n++] = s->eos;
        if (p->eot_token >= 0 && p->eot_token != s->eos) ends[n++] = p->eot_token;
        kiln_status st = kiln_grammar_vocab_create(s->vocab, ends, n, &s->gvocab);
        if (st != KILN_OK) return st;
    }
    kiln_status st = kiln_grammar_matcher_create(p->grammar, s->gvocab, &c->grammar);
    return st == KILN_OK ? kiln_sampler_set_grammar(c->sampler, c->grammar) : st;
}

kiln_status ks__choice_init(ks_choice *c, int32_t index, const ks_choice_params *p,
                            const kiln_sampler_params *sp, const ks_request *req, ks_gen_scratch *s) {
    memset(c, 0, sizeof *c);
    c->index = index;
    c->p = p;
    c->draft = -1;
    kiln_sampler_params mine = *sp;
    mine.seed = sp->seed + (uint64_t)index;
    kiln_status st = kiln_sampler_create(s->n_vocab, &mine, &c->sampler);
    if (st == KILN_OK && p->grammar) st = grammar_init(c, p, s); /* may make the engine's token trie */
    if (st == KILN_OK) st = kiln_detok_create(s->vocab, p->strip_leading_space, &c->detok);
    if (st == KILN_OK) st = ks__stop_init(&c->stop, req->stop, req->n_stop);
    if (st == KILN_OK && !(c->generated = malloc((size_t)p->max_tokens * sizeof *c->generated)))
        st = kiln__error(KILN_E_NOMEM, "engine: room for max_tokens %d", p->max_tokens);
    if (st == KILN_OK && p->logprobs >= 0) st = pending_reserve(&c->pend, p->logprobs);
    if (st != KILN_OK) ks__choice_free(c);
    return st;
}

void ks__choice_free(ks_choice *c) {
    kiln_sampler_destroy(c->sampler);
    kiln_grammar_matcher_destroy(c->grammar);
    kiln_detok_destroy(c->detok);
    ks__stop_free(&c->stop);
    pending_free(&c->pend);
    free(c->generated);
    memset(c, 0, sizeof *c);
}

/* The logits to sample from: the raw ones, or a penalized copy in scratch. */
static const float *penalized(const ks_choice *c, ks_gen_scratch *s, const float *logits) {
    float presence = c->p->presence_penalty, frequency = c->p->frequency_penalty;
    if ((presence == 0 && frequency == 0) || c->n_generated == 0) return logits;
    memcpy(s->logits, logits, (size_t)s->n_vocab * sizeof *logits);
    for (int32_t i = 0; i < c->n_generated; i++)
        s->counts[c->generated[i]]++;
    for (int32_t i = 0; i < c->n_generated; i++) {
        int32_t t = c->generated[i];
        if (s->counts[t] == 0) continue; /* already applied */
        s->logits[t] -= presence + frequency * (float)s->counts[t];
        s->counts[t] = 0;
    }
    return s->logits;
}

/* log(sum(exp(logits))) over the non-NaN logits, computed around the largest. */
static double log_sum_exp(const float *logits, int32_t n) {
    float max = -INFINITY;
    for (int32_t i = 0; i < n; i++)
        if (logits[i] > max) max = logits[i];
    if (!isfinite(max)) return max;
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++)
        if (logits[i] == logits[i]) sum += exp((double)logits[i] - (double)max);
    return (double)max + log(sum);
}

/* The k highest logits into ids[k] (descending, lowest id first among equals); returns how many. */
static int32_t top_k_ids(const float *logits, int32_t n, int32_t k, int32_t *ids) {
    int32_t found = 0;
    for (int32_t i = 0; i < n && k > 0; i++) {
        float v = logits[i];
        if (v != v || (found == k && !(v > logits[ids[k - 1]]))) continue;
        int32_t at = found < k ? found++ : k - 1;
        while (at > 0 && v > logits[ids[at - 1]]) {
            ids[at] = ids[at - 1];
            at--;
        }
        ids[at] = i;
    }
    return found;
}

/* Append the text of token id to the pending texts; *at receives its offset. */
static kiln_status add_token_text(ks_pending *p, ks_gen_scratch *s, int32_t id, size_t *at) {
    size_t len = 0;
    kiln_status st = kiln_detokenize(s->vocab, &id, 1, false, s->piece, s->piece_cap, &len);
    if (st == KILN_E_RANGE) {
        char *grown = realloc(s->piece, len + 1);
        if (!grown) return kiln__error(KILN_E_NOMEM, "engine: the text of token %d", id);
        s->piece = grown;
        s->piece_cap = len + 1;
        st = kiln_detokenize(s->vocab, &id, 1, false, s->piece, s->piece_cap, &len);
    }
    if (st != KILN_OK) return st;
    if (p->text_len + len > p->text_cap) {
        size_t cap = 2 * (p->text_len + len) + 64;
        char *grown = realloc(p->text, cap);
        if (!grown) return kiln__error(KILN_E_NOMEM, "engine: texts of the top logprobs");
        p->text = grown;
        p->text_cap = cap;
    }
    if (len) memcpy(p->text + p->text_len, s->piece, len);
    *at = p->text_len;
    p->text_len += len;
    return KILN_OK;
}

/* Record the chosen token's logprob (log-softmax of the raw logits) and its top alternatives. */
static kiln_status pending_add(ks_choice *c, ks_gen_scratch *s, const float *logits, int32_t token) {
    ks_pending *p = &c->pend;
    int32_t k = c->p->logprobs;
    kiln_status st = pending_reserve(p, k);
    if (st != KILN_OK) return st;
    double lse = log_sum_exp(logits, s->n_vocab);
    int32_t i = p->n;
    p->tokens[i] = token;
    p->logprobs[i] = logits[token] == logits[token] ? (float)((double)logits[token] - lse) : -INFINITY;
    p->start[i] = p->end[i] = c->produced;
    ks_top_logprob *row = p->top + (size_t)i * (size_t)k;
    int32_t ids[20];
    int32_t found = top_k_ids(logits, s->n_vocab, k, ids);
    for (int32_t j = 0; j < k; j++) {
        row[j] = (ks_top_logprob){.token = -1, .logprob = -INFINITY, .text = NULL, .len = 0};
        p->top_text_at[(size_t)i * (size_t)k + (size_t)j] = 0;
        if (j >= found) continue;
        row[j].token = ids[j];
        row[j].logprob = (float)((double)logits[ids[j]] - lse);
        st = add_token_text(p, s, ids[j], &p->top_text_at[(size_t)i * (size_t)k + (size_t)j]);
        if (st != KILN_OK) return st;
        row[j].len = p->text_len - p->top_text_at[(size_t)i * (size_t)k + (size_t)j];
    }
    p->n++;
    return KILN_OK;
}

/* Emit text with the first `release` pending tokens, then forget those tokens. */
static void emit_text(ks_choice *c, kiln_str text, int32_t release, ks_emit_fn emit, void *user) {
    if (text.len == 0 && release == 0) return;
    ks_pending *p = &c->pend;
    int32_t k = c->p->logprobs;
    ks_event ev = {.kind = KS_EVENT_TEXT, .choice = c->index, .text = text.data, .len = text.len};
    if (release > 0) {
        for (int32_t i = 0; i < release; i++) {
            ks_top_logprob *row = p->top + (size_t)i * (size_t)k;
            for (int32_t j = 0; j < k; j++)
                row[j].text = p->text + p->top_text_at[(size_t)i * (size_t)k + (size_t)j];
            p->top_rows[i] = row;
        }
        ev.n_tokens = release;
        ev.tokens = p->tokens;
        ev.token_logprobs = p->logprobs;
        ev.top = p->top_rows;
    }
    emit(user, &ev);
    int32_t keep = p->n - release;
    if (keep > 0) {
        size_t rows = (size_t)k;
        memmove(p->tokens, p->tokens + release, (size_t)keep * sizeof *p->tokens);
        memmove(p->logprobs, p->logprobs + release, (size_t)keep * sizeof *p->logprobs);
        memmove(p->start, p->start + release, (size_t)keep * sizeof *p->start);
        memmove(p->end, p->end + release, (size_t)keep * sizeof *p->end);
        memmove(p->top, p->top + (size_t)release * rows, (size_t)keep * rows * sizeof *p->top);
        memmove(p->top_text_at, p->top_text_at + (size_t)release * rows,
                (size_t)keep * rows * sizeof *p->top_text_at);
    }
    p->n = keep;
    if (keep == 0) p->text_len = 0;
}

/* Pass a piece of detokenized text (the newest pending token's) through the stop strings and emit. */
static kiln_status feed(ks_choice *c, kiln_str piece, bool final, ks_emit_fn emit, void *user,
                        bool *matched) {
    ks_pending *p = &c->pend;
    c->produced += piece.len;
    if (p->n > 0) p->end[p->n - 1] = c->produced;
    kiln_str out;
    kiln_status st = ks__stop_push(&c->stop, piece.data, piece.len, final, &out, matched);
    if (st != KILN_OK) return st;
    c->emitted += out.len;
    int32_t release = 0;
    while (release < p->n &&
           (*matched ? p->start[release] < c->emitted : final || p->end[release] <= c->emitted))
        release++;
    emit_text(c, out, release, emit, user);
    if (*matched) p->n = 0, p->text_len = 0; /* tokens of the stop string itself */
    return KILN_OK;
}

kiln_status ks__choice_step(ks_choice *c, ks_gen_scratch *s, const float *logits, ks_emit_fn emit, void *user,
                            int32_t *token) {
    int32_t t = 0;
    kiln_status st = c->draft >= 0 ? kiln_sampler_sample_draft(c->sampler, penalized(c, s, logits), c->draft, &t)
                                   : kiln_sampler_sample(c->sampler, penalized(c, s, logits), &t);
    if (st != KILN_OK) return st;
    *token = t;
    c->generated[c->n_generated++] = t;
    if (c->p->logprobs >= 0 && (st = pending_add(c, s, logits, t)) != KILN_OK) return st;
    bool end_token = !c->p->ignore_eos && (t == s->eos || t == c->p->eot_token);
    bool grammar_end = c->grammar && kiln_grammar_matcher_is_done(c->grammar);
    end_token |= grammar_end && (t == s->eos || t == c->p->eot_token);
    bool last = end_token || grammar_end || c->n_generated >= c->p->max_tokens, matched = false;
    kiln_str piece = {"", 0};
    if (!end_token && (st = kiln_detok_push(c->detok, t, &piece)) != KILN_OK) return st;
    if ((st = feed(c, piece, false, emit, user, &matched)) != KILN_OK) return st;
    if (!matched && last) {
        if ((st = kiln_detok_flush(c->detok, &piece)) != KILN_OK) return st;
        if ((st = feed(c, piece, true, emit, user, &matched)) != KILN_OK) return st;
    }
    if (!matched && !last) return KILN_OK;
    c->done = true;
    c->finish = matched || end_token || grammar_end ? KS_FINISH_STOP : KS_FINISH_LENGTH;
    ks_event ev = {.kind = KS_EVENT_CHOICE_END, .choice = c->index, .finish = c->finish};
    emit(user, &ev);
    return KILN_OK;
}
