/*
 * sampler.c - choosing the next token from logits.
 *
 * The chain runs in llama.cpp's default order:
 *   1. repetition penalty over the distinct tokens among the last repeat_last_n accepted ones (CTRL
 *      style: a positive logit is divided by the penalty, any other is multiplied by it);
 *   2. temperature <= 0: greedy, the highest logit with the lowest id on ties; stop here;
 *   3. top-k: keep the k highest logits (lowest id first among equals);
 *   4. top-p: keep the smallest prefix, in that order, whose softmax probability reaches top_p;
 *   5. min-p: keep the tokens whose probability is at least min_p times the highest;
 *   6. temperature: divide what is left by it, renormalize, and draw with the seeded xoshiro256**.
 * Steps 3-5 keep at least one token and decide on the untempered probabilities, as llama.cpp does.
 *
 * kiln_sampler_sample_draft is the same draw made to agree with a guessed token as often as it can:
 * with p the distribution of step 6 (a point mass when greedy), the guess with probability p(guess),
 * else a draw from p without the guess, renormalized. Its result is distributed exactly as p, so a
 * speculative decoder (src/runtime/spec.c) keeps the sampler's distribution by accepting a guess when the
 * draw returns it (the rule of Leviathan et al. and Chen et al. 2023 for a guess of probability one).
 *
 * With a grammar matcher set (kiln_sampler_set_grammar), the tokens it does not allow get -inf before
 * step 1, the draw happens among the allowed ones only (the lowest allowed id when all their logits are
 * -inf), and the matcher is advanced by the token returned.
 *
 * Input logits are never modified. A NaN logit counts as -inf and +inf as the largest float; if every
 * logit is -inf the result is token 0. All scratch is allocated in create: sampling allocates nothing.
 */
#include "core/core.h"
#include "grammar/grammar.h"
#include "sample/rng.h"

#include <float.h>
#include <math.h>
#include <string.h>

typedef struct candidate {
    int32_t id;
    float logit;
} candidate;

struct kiln_sampler {
    int32_t n_vocab;
    kiln_sampler_params params;
    kiln__rng rng;
    candidate *cands;  /* (n_vocab) working logits, later a max-heap */
    candidate *sorted; /* (n_vocab) candidates taken from the heap, best first */
    double *dist_w;    /* (n_vocab) step 6's weights of the survivors */
    uint32_t *seen;    /* (n_vocab) stamp of the last sample that penalized each token */
    uint32_t stamp;
    int32_t *history; /* (repeat_last_n) ring of accepted tokens */
    int32_t history_len, history_next;
    kiln_grammar_matcher *grammar; /* borrowed, or NULL */
};

kiln_sampler_params kiln_sampler_params_default(void) {
    kiln_sampler_params p = {
        .temperature = 0.8f,
        .top_k = 40,
        .top_p = 0.95f,
        .min_p = 0.05f,
        .repeat_penalty = 1.0f,
        .repeat_last_n = 64,
        .seed = 0,
    };
    return p;
}

static kiln_status check_params(const kiln_sampler_params *p) {
    if (!isfinite(p->temperature))
        return kiln__error(KILN_E_INVALID_ARG, "sampler: temperature %g is not finite",
                           (double)p->temperature);
    if (isnan(p->top_p) || isnan(p->min_p))
        return kiln__error(KILN_E_INVALID_ARG, "sampler: top_p %g or min_p %g is NaN", (double)p->top_p,
                           (double)p->min_p);
    if (!isfinite(p->repeat_penalty) || p->repeat_penalty <= 0)
        return kiln__error(KILN_E_INVALID_ARG, "sampler: repeat_penalty %g must be finite and > 0",
                           (double)p->repeat_penalty);
    if (p->repeat_last_n < 0)
        return kiln__error(KILN_E_INVALID_ARG, "sampler: repeat_last_n %d is negative", p->repeat_last_n);
    return KILN_OK;
}

kiln_status kiln_sampler_create(int32_t n_vocab, const kiln_sampler_params *params, kiln_sampler **out) {
    if (!out) return kiln__error(KILN_E_INVALID_ARG, "kiln_sampler_create: out is NULL");
    *out = NULL;
    if (!params) return kiln__error(KILN_E_INVALID_ARG, "kiln_sampler_create: params is NULL");
    if (n_vocab <= 0)
        return kiln__error(KILN_E_INVALID_ARG, "kiln_sampler_create: n_vocab %d must be > 0", n_vocab);
    kiln_status st = check_params(params);
    if (st != KILN_OK) return st;
    kiln_sampler *s = kiln__calloc(1, sizeof *s);
    if (!s) return kiln__nomem("the sampler");
    s->n_vocab = n_vocab;
    s->params = *params;
    s->cands = kiln__alloc_array((size_t)n_vocab, sizeof *s->cands);
    s->sorted = kiln__alloc_array((size_t)n_vocab, sizeof *s->sorted);
    s->dist_w = kiln__alloc_array((size_t)n_vocab, sizeof *s->dist_w);
    s->seen = kiln__calloc((size_t)n_vocab, sizeof *s->seen);
    s->history = kiln__alloc_array((size_t)params->repeat_last_n, sizeof *s->history);
    if (!s->cands || !s->sorted || !s->dist_w || !s->seen || !s->history) {
        kiln_sampler_destroy(s);
        return kiln__nomem("the sampler scratch");
    }
    kiln__rng_seed(&s->rng, params->seed);
    *out = s;
    return KILN_OK;
}

void kiln_sampler_destroy(kiln_sampler *sampler) {
    if (!sampler) return;
    kiln__dealloc(sampler->cands);
    kiln__dealloc(sampler->sorted);
    kiln__dealloc(sampler->dist_w);
    kiln__dealloc(sampler->seen);
    kiln__dealloc(sampler->history);
    kiln__dealloc(sampler);
}

/* Ids outside [0, n_vocab) cannot be penalized and are ignored. */
void kiln_sampler_accept(kiln_sampler *sampler, int32_t token) {
    if (!sampler || token < 0 || token >= sampler->n_vocab || sampler->params.repeat_last_n == 0) return;
    sampler->history[sampler->history_next] = token;
    sampler->history_next = (sampler->history_next + 1) % sampler->params.repeat_last_n;
    if (sampler->history_len < sampler->params.repeat_last_n) sampler->history_len++;
}

kiln_status kiln_sampler_set_grammar(kiln_sampler *sampler, kiln_grammar_matcher *matcher) {
    if (!sampler) return kiln__error(KILN_E_INVALID_ARG, "kiln_sampler_set_grammar: sampler is NULL");
    sampler->grammar = matcher;
    return KILN_OK;
}

/* -inf for every token the grammar refuses; *first the lowest allowed id (-1: none). */
static kiln_status apply_grammar(kiln_sampler *s, int32_t *first) {
    const uint32_t *bits;
    kiln_status st = kiln_grammar_matcher_mask(s->grammar, &bits);
    if (st != KILN_OK) return st;
    int32_t n = KILN__MIN(s->n_vocab, kiln__grammar_matcher_n_vocab(s->grammar));
    *first = -1;
    for (int32_t i = 0; i < s->n_vocab; i++) {
        bool ok = i < n && (bits[i >> 5] >> (i & 31) & 1u);
        if (!ok) s->cands[i].logit = -INFINITY;
        else if (*first < 0) *first = i;
    }
    if (*first < 0)
        return kiln__error(KILN_E_UNSUPPORTED, "sampler: the grammar allows no token of the vocabulary here");
    return KILN_OK;
}

static void load_logits(kiln_sampler *s, const float *logits) {
    for (int32_t i = 0; i < s->n_vocab; i++) {
        float l = logits[i];
        if (isnan(l)) l = -INFINITY;
        if (l == INFINITY) l = FLT_MAX;
        s->cands[i] = (candidate){i, l};
    }
}

/* Each distinct recent token is penalized once, however often it occurred. */
static void apply_penalty(kiln_sampler *s) {
    float penalty = s->params.repeat_penalty;
    if (penalty == 1.0f || s->history_len == 0) return;
    if (++s->stamp == 0) {
        memset(s->seen, 0, (size_t)s->n_vocab * sizeof *s->seen);
        s->stamp = 1;
    }
    for (int32_t h = 0; h < s->history_len; h++) {
        int32_t t = s->history[h];
        if (s->seen[t] == s->stamp) continue;
        s->seen[t] = s->stamp;
        float *l = &s->cands[t].logit;
        *l = *l > 0 ? *l / penalty : *l * penalty;
    }
}

static int32_t argmax(const candidate *c, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++) {
        if (c[i].logit > c[best].logit) best = i;
    }
    return c[best].id;
}

/* Heap order: higher logit first, then lower id. */
static bool better(const candidate *a, const candidate *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static void sift_down(candidate *h, int32_t n, int32_t i) {
    candidate x = h[i];
    for (;;) {
        int32_t child = 2 * i + 1;
        if (child >= n) break;
        if (child + 1 < n && better(&h[child + 1], &h[child])) child++;
        if (!better(&h[child], &x)) break;
        h[i] = h[child];
        i = child;
    }
    h[i] = x;
}

/* Move the best remaining candidate from the heap to sorted[*n_sorted]. */
static void take_next(kiln_sampler *s, int32_t *heap_len, int32_t *n_sorted) {
    s->sorted[(*n_sorted)++] = s->cands[0];
    s->cands[0] = s->cands[--*heap_len];
    if (*heap_len > 0) sift_down(s->cands, *heap_len, 0);
}

/* Steps 3-5: leave the survivors, best first, in sorted[0..return value). */
static int32_t truncate_candidates(kiln_sampler *s, double max) {
    const kiln_sampler_params *p = &s->params;
    int32_t n = s->n_vocab, heap_len = n, n_sorted = 0;
    int32_t limit = p->top_k > 0 && p->top_k < n ? p->top_k : n;
    for (int32_t i = n / 2 - 1; i >= 0; i--)
        sift_down(s->cands, n, i);
    double sum = 0;
    if (limit < n) {
        while (n_sorted < limit)
            take_next(s, &heap_len, &n_sorted);
        for (int32_t i = 0; i < limit; i++)
            sum += exp((double)s->sorted[i].logit - max);
    } else {
        for (int32_t i = 0; i < n; i++)
            sum += exp((double)s->cands[i].logit - max);
    }
    if (p->top_p < 1.0f) {
        double cum = 0;
        int32_t i = 0;
        do {
            if (i == n_sorted) take_next(s, &heap_len, &n_sorted);
            cum += exp((double)s->sorted[i++].logit - max) / sum;
        } while (cum < p->top_p && i < limit);
        limit = i;
    }
    if (p->min_p > 0.0f) {
        double threshold = max + log((double)p->min_p);
        int32_t i = 1;
        for (; i < limit; i++) {
            if (i == n_sorted) take_next(s, &heap_len, &n_sorted);
            if ((double)s->sorted[i].logit < threshold) break;
        }
        limit = i;
    }
    while (n_sorted < limit)
        take_next(s, &heap_len, &n_sorted);
    return limit;
}

/* Step 6's distribution, softmax(logit / temperature) over c[0..n): the weights into dist_w, their sum
 * added in the order the draw adds them. */
static double weigh(kiln_sampler *s, const candidate *c, int32_t n, double max) {
    double inv_t = 1.0 / (double)s->params.temperature, total = 0;
    for (int32_t i = 0; i < n; i++) {
        s->dist_w[i] = exp(((double)c[i].logit - max) * inv_t);
        total += s->dist_w[i];
    }
    return total;
}

/* Draw from the weights w of c[0..n) (sum total), leaving out token skip (-1: none) and renormalizing. */
static int32_t draw(kiln_sampler *s, const candidate *c, int32_t n, double total, int32_t skip) {
    const double *w = s->dist_w;
    double cum = 0, u;
    int32_t last = -1;
    for (int32_t i = 0; i < n && skip >= 0; i++)
        if (c[i].id == skip) total -= w[i];
    u = kiln__rng_uniform(&s->rng) * total;
    for (int32_t i = 0; i < n; i++) {
        if (w[i] <= 0 || c[i].id == skip) continue;
        cum += w[i];
        last = i;
        if (u < cum) return c[i].id;
    }
    return c[last >= 0 ? last : 0].id; /* rounding left u at the very top */
}

/* A draw that is the draft whenever it can be: with p the distribution, the draft with probability
 * p(draft), otherwise a draw from p without the draft. The result is distributed as p. */
static int32_t draw_preferring(kiln_sampler *s, const candidate *c, int32_t n, double total, int32_t draft) {
    double w = 0;
    if (draft < 0) return draw(s, c, n, total, -1);
    for (int32_t i = 0; i < n; i++)
        if (c[i].id == draft) w = s->dist_w[i];
    if (kiln__rng_uniform(&s->rng) * total < w) return draft;
    return draw(s, c, n, total, draft);
}

static kiln_status sample(kiln_sampler *s, const float *logits, int32_t draft, int32_t *token_out) {
    load_logits(s, logits);
    apply_penalty(s);
    int32_t first_allowed = -1;
    kiln_status st = s->grammar ? apply_grammar(s, &first_allowed) : KILN_OK;
    if (st != KILN_OK) return st;
    int32_t best = argmax(s->cands, s->n_vocab);
    double max = (double)s->cands[best].logit;
    if (s->params.temperature <= 0 || max == -INFINITY) {
        *token_out = max == -INFINITY && first_allowed >= 0 ? first_allowed : best;
        return s->grammar ? kiln_grammar_matcher_accept(s->grammar, *token_out) : KILN_OK;
    }
    const kiln_sampler_params *p = &s->params;
    bool truncating = (p->top_k > 0 && p->top_k < s->n_vocab) || p->top_p < 1.0f || p->min_p > 0.0f;
    const candidate *c = truncating ? s->sorted : s->cands;
    int32_t n = truncating ? truncate_candidates(s, max) : s->n_vocab;
    *token_out = draw_preferring(s, c, n, weigh(s, c, n, max), draft);
    return s->grammar ? kiln_grammar_matcher_accept(s->grammar, *token_out) : KILN_OK;
}

kiln_status kiln_sampler_sample(kiln_sampler *sampler, const float *logits, int32_t *token_out) {
    if (!sampler || !logits || !token_out)
        return kiln__error(KILN_E_INVALID_ARG, "kiln_sampler_sample: sampler, logits or token_out is NULL");
    return sample(sampler, logits, -1, token_out);
}

kiln_status kiln_sampler_sample_draft(kiln_sampler *sampler, const float *logits, int32_t draft,
                                      int32_t *token_out) {
    if (!sampler || !logits || !token_out)
        return kiln__error(KILN_E_INVALID_ARG,
                           "kiln_sampler_sample_draft: sampler, logits or token_out is NULL");
    if (draft < 0 || draft >= sampler->n_vocab)
        return kiln__error(KILN_E_INVALID_ARG, "kiln_sampler_sample_draft: draft %d is not a token of the %d",
                           draft, sampler->n_vocab);
    return sample(sampler, logits, draft, token_out);
}
