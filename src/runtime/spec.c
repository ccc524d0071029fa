/*
 * spec.c - greedy speculative decoding of sequence 0 of a context (kiln_spec_*): cheap guesses of the next
 * tokens, checked all at once by one batch of the target model, so that one pass over the target's
 * weights can produce several tokens.
 *
 * A step starts from a history whose last token has been chosen but not decoded. The drafter guesses up to
 * n_draft tokens after it: prompt lookup finds the latest earlier occurrence of the history's last n
 * tokens (n from ngram_max down to ngram_min) and proposes what followed it; a draft model decodes its own
 * greedy continuation in its own context (kept in step with the history, rolled back with kiln_kv_seq_rm).
 * The target decodes [last, d1 .. dk] in one batch with logits for every token; row i's argmax is what
 * greedy decoding would choose after d1 .. di, so the step keeps argmax(row 0), and argmax(row i) for as
 * long as each d_i equalled the argmax before it, and forgets the cells of the rejected drafts. The tokens
 * are greedy decoding's by construction. How many tokens a step guesses adapts to how the guesses fare:
 * the cap halves (down to 1) after a step whose guesses were all rejected and doubles (up to n_draft)
 * after one whose guesses were all accepted, so that a drafter that keeps missing costs little more than
 * plain decoding. Only the logits of a many-token batch may differ from a one-token step's in the last
 * bits (docs/runtime.md), so a near tie can in principle go the other way.
 */
#include "runtime/context.h"

#include "core/core.h"

#include <string.h>

#define MAX_DRAFT 64

struct kiln_spec {
    kiln_ctx *target;
    kiln_ctx *draft;     /* or NULL: prompt lookup */
    int32_t *draft_toks; /* [n_ctx of the draft] the tokens in the draft's sequence 0 */
    int32_t n_draft_toks;
    kiln_spec_params p;
    int32_t cap;      /* tokens the next step may guess: adapts between 1 and n_draft */
    kiln_batch batch; /* [n_draft + 1] */
    kiln_spec_stats stats;
};

kiln_spec_params kiln_spec_params_default(void) {
    kiln_spec_params p;
    memset(&p, 0, sizeof p);
    p.n_draft = 8;
    p.ngram_min = 1;
    p.ngram_max = 4;
    return p;
}

static int32_t argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* The draft model must speak the target's vocabulary: the same size, BOS, EOS and every token's text. */
static kiln_status check_vocab(const kiln_model *t, const kiln_model *d) {
    const kiln_vocab *vt = kiln_model_vocab(t), *vd = kiln_model_vocab(d);
    int32_t n = kiln_vocab_n_tokens(vt);
    if (kiln_vocab_n_tokens(vd) != n || kiln_vocab_bos(vd) != kiln_vocab_bos(vt) ||
        kiln_vocab_eos(vd) != kiln_vocab_eos(vt))
        return kiln__error(
            KILN_E_INVALID_ARG,
            "the draft model's vocabulary (%d tokens, BOS %d, EOS %d) is not the target's (%d, %d, %d)",
            kiln_vocab_n_tokens(vd), kiln_vocab_bos(vd), kiln_vocab_eos(vd), n, kiln_vocab_bos(vt),
            kiln_vocab_eos(vt));
    for (int32_t i = 0; i < n; i++) {
        kiln_str a = kiln_vocab_token_text(vt, i), b = kiln_vocab_token_text(vd, i);
        if (a.len != b.len || (a.len && memcmp(a.data, b.data, a.len) != 0))
            return kiln__error(KILN_E_INVALID_ARG, "the draft model's token %d differs from the target's", i);
    }
    return KILN_OK;
}

kiln_status kiln_spec_create(kiln_ctx *target, const kiln_spec_params *params, kiln_spec **out) {
    kiln_spec_params p = params ? *params : kiln_spec_params_default();
    kiln_spec *sp;
    kiln_status s;
    if (!out || !target) return kiln__error(KILN_E_INVALID_ARG, "kiln_spec_create: NULL argument");
    *out = NULL;
    if (p.n_draft < 1 || p.n_draft > MAX_DRAFT || p.n_draft + 1 > target->n_batch)
        return kiln__error(KILN_E_INVALID_ARG,
                           "kiln_spec_create: n_draft %d must be 1..%d and below n_batch %d", p.n_draft,
                           MAX_DRAFT, target->n_batch);
    if (!p.draft && (p.ngram_min < 1 || p.ngram_max < p.ngram_min || p.ngram_max > 16))
        return kiln__error(KILN_E_INVALID_ARG, "kiln_spec_create: n-gram sizes %d..%d must lie in 1..16",
                           p.ngram_min, p.ngram_max);
    if (target->embeddings || (p.draft && p.draft->embeddings))
        return kiln__error(KILN_E_INVALID_ARG, "kiln_spec_create: embeddings contexts do not generate");
    if (p.draft && (s = check_vocab(target->model, p.draft->model))) return s;
    if (!(sp = kiln__calloc(1, sizeof *sp))) return kiln__nomem("the speculative decoder");
    sp->target = target;
    sp->draft = p.draft;
    sp->p = p;
    sp->cap = p.n_draft;
    if ((s = kiln_batch_init(p.n_draft + 1, &sp->batch)) ||
        (p.draft && !(sp->draft_toks = kiln__alloc_array((size_t)p.draft->n_ctx, sizeof(int32_t))))) {
        kiln_spec_destroy(sp);
        return s ? s : kiln__nomem("the draft model's token list");
    }
    if (p.draft) kiln_ctx_reset(p.draft);
    *out = sp;
    return KILN_OK;
}

void kiln_spec_destroy(kiln_spec *sp) {
    if (!sp) return;
    kiln_batch_free(&sp->batch);
    kiln__dealloc(sp->draft_toks);
    kiln__dealloc(sp);
}

void kiln_spec_get_stats(const kiln_spec *sp, kiln_spec_stats *out) {
    if (sp && out) *out = sp->stats;
}

/* Prompt lookup: the continuation of the latest earlier occurrence of the history's last n tokens. */
static int32_t draft_lookup(const kiln_spec *sp, const int32_t *h, int32_t n, int32_t k, int32_t *d) {
    for (int32_t g = KILN__MIN(sp->p.ngram_max, n - 1); g >= sp->p.ngram_min; g--) {
        const int32_t *tail = h + n - g;
        for (int32_t j = n - g - 1; j >= 0; j--) {
            int32_t m = 0;
            if (memcmp(h + j, tail, (size_t)g * sizeof *h) != 0) continue;
            while (m < k && j + g + m < n) {
                d[m] = h[j + g + m];
                m++;
            }
            if (m > 0) return m;
        }
    }
    return 0;
}

/* A draft model: bring its sequence 0 to the history, then decode its greedy continuation of k tokens. */
static kiln_status draft_model(kiln_spec *sp, const int32_t *h, int32_t n, int32_t k, int32_t *out,
                               int32_t *got) {
    kiln_ctx *dc = sp->draft;
    const float *logits;
    int32_t keep = 0, next;
    kiln_status s;
    while (keep < sp->n_draft_toks && keep < n - 1 && sp->draft_toks[keep] == h[keep])
        keep++;
    if (keep < sp->n_draft_toks) kiln__kv_seq_rm(&dc->cells, 0, keep, INT32_MAX);
    sp->n_draft_toks = keep;
    *got = 0;
    if (n + k > dc->n_ctx) k = dc->n_ctx - n;
    if (k <= 0) return KILN_OK; /* the draft's context is full: the target decodes alone */
    if ((s = kiln_ctx_decode(dc, h + keep, n - keep, &logits))) return s;
    memcpy(sp->draft_toks + keep, h + keep, (size_t)(n - keep) * sizeof *h);
    sp->n_draft_toks = n;
    for (int32_t i = 0; i < k; i++) {
        out[i] = next = argmax(logits, dc->model->hp.n_vocab);
        *got = i + 1;
        if (i + 1 == k) break;
        if ((s = kiln_ctx_decode(dc, &next, 1, &logits))) return s;
        sp->draft_toks[sp->n_draft_toks++] = next;
    }
    return KILN_OK;
}

kiln_status kiln_spec_step(kiln_spec *sp, const int32_t *history, int32_t n, int32_t max_out, int32_t *out,
                           int32_t *n_out) {
    kiln_ctx *c;
    int32_t d[MAX_DRAFT], k, p0, V, m = 0;
    kiln_status s;
    if (!sp || !history || !out || !n_out || n < 1 || max_out < 1)
        return kiln__error(KILN_E_INVALID_ARG, "kiln_spec_step: NULL argument, empty history or max_out < 1");
    c = sp->target;
    V = c->model->hp.n_vocab;
    p0 = kiln__kv_seq_pos_max(&c->cells, 0) + 1;
    if (p0 != n - 1)
        return kiln__error(
            KILN_E_INVALID_ARG,
            "kiln_spec_step: the cache holds %d tokens of sequence 0, the history %d (expected one "
            "more: its last token, chosen but not decoded)",
            p0, n);
    k = KILN__MIN(sp->cap, max_out - 1);
    k = KILN__MIN(k, c->n_ctx - c->cells.n_used - 1);
    if (k < 0) return kiln__error(KILN_E_CONTEXT_FULL, "kiln_spec_step: the context is full");
    if (k > 0) {
        if (sp->draft && (s = draft_model(sp, history, n, k, d, &k))) return s;
        if (!sp->draft) k = draft_lookup(sp, history, n, k, d);
    }
    kiln_batch_clear(&sp->batch);
    kiln_batch_add(&sp->batch, history[n - 1], p0, 0, true);
    for (int32_t i = 0; i < k; i++)
        kiln_batch_add(&sp->batch, d[i], p0 + 1 + i, 0, true);
    if ((s = kiln_ctx_decode_batch(c, &sp->batch))) return s;
    /* Row i follows d1 .. di: keep its choice, and go on while the draft guessed it. */
    for (;;) {
        out[m] = argmax(c->logits + (size_t)m * (size_t)V, V);
        if (m == k || out[m] != d[m]) break;
        m++;
    }
    *n_out = m + 1;
    /* The cells of d_{m+1} .. d_k saw a wrong prefix. */
    if (m < k) kiln__kv_seq_rm(&c->cells, 0, p0 + 1 + m, INT32_MAX);
    if (k > 0 && m == 0) sp->cap = KILN__MAX(1, sp->cap / 2);
    if (k > 0 && m == k) sp->cap = KILN__MIN(sp->p.n_draft, sp->cap * 2);
    sp->stats.steps++;
    sp->stats.drafted += k;
    sp->stats.accepted += m;
    return KILN_OK;
}
