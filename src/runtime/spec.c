/*
 * spec.c - speculative decoding of sequence 0 of a context (kiln_spec_*): cheap guesses of the next tokens,
 * checked all at once by one batch of the target model, so that one pass over the target's weights can
 * produce several tokens.
 *
 * A step starts from a history whose last token has been chosen but not decoded. The drafter guesses up to
 * k tokens after it: prompt lookup finds the latest earlier occurrence of the history's last n tokens (n
 * from ngram_max down to ngram_min) and proposes what followed it; a draft model decodes its own greedy
 * continuation in its own context (kept in step with the history, rolled back with kiln_kv_seq_rm). The
 * target decodes [last, d1 .. dk] in one batch with logits for every token; row i is the target's
 * distribution after d1 .. di. Verification walks the rows in order:
 *   - greedy (no sampler): keep argmax(row i); go on while d_{i+1} equalled it;
 *   - with a sampler, p = the distribution kiln_sampler_sample would draw from for row i. A guess is a
 *     point mass (both drafters guess deterministically), so the standard speculative sampling rule
 *     (Leviathan et al. 2023, Chen et al. 2023: accept x with probability min(1, p(x)/q(x)), else draw
 *     from norm(max(0, p - q))) becomes: accept d_{i+1} with probability p(d_{i+1}); else draw from p
 *     without d_{i+1}, renormalized, and stop. kiln_sampler_sample_draft is that draw. After k accepted
 *     guesses the last row gives one more token by a plain draw. Each emitted token is thereby
 *     distributed as p given the tokens before it, exactly as plain sampling (tests/test_spec.c checks
 *     it by chi-square); a grammar on the sampler sees only the tokens kept, so it needs no rollback.
 * The cells of rejected guesses are forgotten.
 *
 * How many tokens to guess (k) is a cost decision. A batch's cost grows with its token bucket (kiln__bucket:
 * powers of two), so k + 1 is kept to a bucket size (k = 0, 1, 3, 7, ...) or to exactly what the
 * drafter found. With per-guess acceptance a (decayed counts of accepted guesses and of rejections), a
 * step of k guesses yields 1 + a + .. + a^k tokens on average; its cost is the measured time of the
 * bucket (a decayed mean per bucket; a bucket not measured yet is estimated from its neighbours at +50%
 * per doubling) plus k draft-model tokens. The step takes the k of most tokens per second, 0 (a plain
 * one-token step) included, so a drafter that keeps missing costs almost nothing. Prompt lookup learns
 * from 0-guess steps too (was its first guess the token chosen?); a draft model's evidence decays while it
 * is not used, and once it is nearly gone (about 22 steps) a step probes with one guess. params.fixed
 * turns this off (always as many guesses as the drafter has, up to n_draft). Which k is chosen never
 * changes greedy tokens; only a near tie can differ, since a many-token batch's logits can differ from a
 * one-token step's in the last bits (docs/runtime.md).
 */
#include "runtime/context.h"

#include "core/core.h"

#include <math.h>
#include <string.h>

#define MAX_DRAFT 64
#define N_BUCKETS 8    /* batches of 1, 2, 4 .. 128 tokens: n_draft + 1 <= 65 */
#define DECAY 0.9      /* weight of the past in the acceptance counts, per step */
#define COST_DECAY 0.8 /* and in the mean cost of a bucket, per batch of that bucket */
#define PROBE_EVIDENCE 0.1 /* a draft model unused until its counts decay below this (~22 steps) probes */

struct kiln_spec {
    kiln_ctx *target;
    kiln_ctx *draft;     /* or NULL: prompt lookup */
    int32_t *draft_toks; /* [n_ctx of the draft] the tokens in the draft's sequence 0 */
    int32_t n_draft_toks;
    kiln_spec_params p;
    kiln_batch batch; /* [n_draft + 1] */
    kiln_spec_stats stats;
    double cost[N_BUCKETS]; /* mean seconds of a target batch of bucket 2^i; 0: not measured yet */
    double draft_cost;      /* mean seconds of one draft-model token; 0: not measured yet */
    double hits, misses;    /* decayed counts: guesses accepted, guess runs ended by a rejection */
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
kiln_status kiln_spec_check_draft(const kiln_model *t, const kiln_model *d) {
    if (!t || !d) return kiln__error(KILN_E_INVALID_ARG, "kiln_spec_check_draft: NULL argument");
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
    if (p.draft && (s = kiln_spec_check_draft(target->model, p.draft->model))) return s;
    if (!(sp = kiln__calloc(1, sizeof *sp))) return kiln__nomem("the speculative decoder");
    sp->target = target;
    sp->draft = p.draft;
    sp->p = p;
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

int32_t kiln_spec_lookup(const int32_t *h, int32_t n, int32_t ngram_min, int32_t ngram_max, int32_t max,
                         int32_t *d) {
    if (!h || !d || n < 2 || max < 1 || ngram_min < 1) return 0;
    for (int32_t g = KILN__MIN(ngram_max, n - 1); g >= ngram_min; g--) {
        const int32_t *tail = h + n - g;
        for (int32_t j = n - g - 1; j >= 0; j--) {
            int32_t m = 0;
            if (memcmp(h + j, tail, (size_t)g * sizeof *h) != 0) continue;
            while (m < max && j + g + m < n) {
                d[m] = h[j + g + m];
                m++;
            }
            if (m > 0) return m;
        }
    }
    return 0;
}

/* Prompt lookup with the decoder's n-gram sizes. */
static int32_t draft_lookup(const kiln_spec *sp, const int32_t *h, int32_t n, int32_t k, int32_t *d) {
    return kiln_spec_lookup(h, n, sp->p.ngram_min, sp->p.ngram_max, k, d);
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

static double now_seconds(void) {
    return (double)kiln__now_ns() * 1e-9;
}

static int32_t bucket_index(int32_t n_tokens) {
    int32_t i = 0;
    while ((1 << i) < n_tokens)
        i++;
    return i;
}

/* The cost of a target batch of bucket index i: measured, else from the nearest measured bucket at 1.5x
 * per doubling, else in units of an unmeasured one-token step. */
static double batch_cost(const kiln_spec *sp, int32_t i) {
    if (sp->cost[i] > 0) return sp->cost[i];
    for (int32_t d = 1; d < N_BUCKETS; d++) {
        if (i - d >= 0 && sp->cost[i - d] > 0) return sp->cost[i - d] * pow(1.5, d);
        if (i + d < N_BUCKETS && sp->cost[i + d] > 0) return sp->cost[i + d] / pow(1.5, d);
    }
    return pow(1.5, i);
}

/* Expected tokens per second of a step with k guesses at per-guess acceptance a. */
static double rate(const kiln_spec *sp, int32_t k, double a) {
    double tokens = a >= 1 ? k + 1 : (1 - pow(a, k + 1)) / (1 - a);
    double draft = sp->draft ? k * (sp->draft_cost > 0 ? sp->draft_cost : 0.1 * batch_cost(sp, 0)) : 0;
    return tokens / (batch_cost(sp, bucket_index(k + 1)) + draft);
}

/* The best number of guesses among 0, the bucket-filling counts 1, 3, 7 .. below max_k, and max_k. */
static int32_t choose_k(const kiln_spec *sp, int32_t max_k) {
    double a = (sp->hits + 1) / (sp->hits + sp->misses + 2), best_rate;
    int32_t best = 0;
    if (sp->p.fixed || max_k <= 0) return KILN__MAX(max_k, 0);
    best_rate = rate(sp, 0, a);
    for (int32_t k = 1;; k = 2 * k + 1) {
        int32_t kk = KILN__MIN(k, max_k);
        double r = rate(sp, kk, a);
        if (r > best_rate) best = kk, best_rate = r;
        if (kk == max_k) break;
    }
    return best;
}

static void learn_cost(double *mean, double seconds) {
    *mean = *mean > 0 ? COST_DECAY * *mean + (1 - COST_DECAY) * seconds : seconds;
}

/* Row m's token, and whether it is the guess d[m] (never for m == k, where there is no guess). */
static kiln_status verify_row(kiln_spec *sp, kiln_sampler *smp, const float *row, const int32_t *d, int32_t m,
                              int32_t k, int32_t *tok, bool *accepted) {
    kiln_status s;
    if (!smp) *tok = argmax(row, sp->target->model->hp.n_vocab);
    else if ((s = m < k ? kiln_sampler_sample_draft(smp, row, d[m], tok) : kiln_sampler_sample(smp, row, tok)))
        return s;
    if (smp) kiln_sampler_accept(smp, *tok);
    *accepted = m < k && *tok == d[m];
    return KILN_OK;
}

static kiln_status check_step(kiln_spec *sp, const int32_t *history, int32_t n, int32_t max_out,
                              const int32_t *out, const int32_t *n_out) {
    int32_t p0;
    if (!sp || !history || !out || !n_out || n < 1 || max_out < 1)
        return kiln__error(KILN_E_INVALID_ARG, "kiln_spec_step: NULL argument, empty history or max_out < 1");
    p0 = kiln__kv_seq_pos_max(&sp->target->cells, 0) + 1;
    if (p0 != n - 1)
        return kiln__error(
            KILN_E_INVALID_ARG,
            "kiln_spec_step: the cache holds %d tokens of sequence 0, the history %d (expected one "
            "more: its last token, chosen but not decoded)",
            p0, n);
    if (sp->target->n_ctx - sp->target->cells.n_used < 1)
        return kiln__error(KILN_E_CONTEXT_FULL, "kiln_spec_step: the context is full");
    return KILN_OK;
}

/* The guesses d[0..*k) for this step, at most max_k. */
static kiln_status propose(kiln_spec *sp, const int32_t *history, int32_t n, int32_t max_k, int32_t *d,
                           int32_t *k) {
    kiln_status s;
    double t0;
    *k = 0;
    if (max_k <= 0) return KILN_OK;
    if (!sp->draft) {
        *k = choose_k(sp, draft_lookup(sp, history, n, max_k, d));
        return KILN_OK;
    }
    if ((max_k = choose_k(sp, max_k)) == 0) {
        if (sp->hits + sp->misses >= PROBE_EVIDENCE) return KILN_OK;
        max_k = 1; /* the evidence has decayed: probe with one guess */
    }
    t0 = now_seconds();
    if ((s = draft_model(sp, history, n, max_k, d, k))) return s;
    if (*k > 0) learn_cost(&sp->draft_cost, (now_seconds() - t0) / *k);
    return KILN_OK;
}

kiln_status kiln_spec_step(kiln_spec *sp, kiln_sampler *sampler, const int32_t *history, int32_t n,
                           int32_t max_out, int32_t *out, int32_t *n_out) {
    kiln_ctx *c;
    int32_t d[MAX_DRAFT], k, p0, V, m = 0, lookup_guess = -1;
    kiln_status s;
    bool accepted = true;
    double t0;
    if ((s = check_step(sp, history, n, max_out, out, n_out))) return s;
    c = sp->target;
    V = c->model->hp.n_vocab;
    p0 = n - 1;
    k = KILN__MIN(sp->p.n_draft, max_out - 1);
    k = KILN__MIN(k, c->n_ctx - c->cells.n_used - 1);
    if ((s = propose(sp, history, n, k, d, &k))) return s;
    if (k == 0 && !sp->draft && !sp->p.fixed && draft_lookup(sp, history, n, 1, d) == 1) lookup_guess = d[0];
    kiln_batch_clear(&sp->batch);
    kiln_batch_add(&sp->batch, history[n - 1], p0, 0, true);
    for (int32_t i = 0; i < k; i++)
        kiln_batch_add(&sp->batch, d[i], p0 + 1 + i, 0, true);
    t0 = now_seconds();
    if ((s = kiln_ctx_decode_batch(c, &sp->batch))) return s;
    learn_cost(&sp->cost[bucket_index(k + 1)], now_seconds() - t0);
    /* Row m follows d1 .. dm: take its token, and go on while it was the guess. */
    while (accepted) {
        if ((s = verify_row(sp, sampler, c->logits + (size_t)m * (size_t)V, d, m, k, &out[m], &accepted)))
            return s;
        m += accepted;
    }
    *n_out = m + 1;
    /* The cells of d_{m+1} .. d_k saw a wrong prefix. */
    if (m < k) kiln__kv_seq_rm(&c->cells, 0, p0 + 1 + m, INT32_MAX);
    sp->hits = DECAY * sp->hits + m + (lookup_guess >= 0 && lookup_guess == out[0]);
    sp->misses = DECAY * sp->misses + (m < k || (lookup_guess >= 0 && lookup_guess != out[0]));
    sp->stats.steps++;
    sp->stats.drafted += k;
    sp->stats.accepted += m;
    return KILN_OK;
}
