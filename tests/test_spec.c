/*
 * test_spec.c - greedy speculative decoding (kiln_spec_*): the tokens are greedy decoding's, whatever the
 * drafts.
 *
 * The reference is llama.cpp's greedy continuation of the bundled stories260K model (tests/data/golden,
 * 200 tokens from BOS and 64 from "Once upon a time"; see its README): speculative decoding with prompt
 * lookup, with the model as its own draft, and with a draft that is always wrong (lookup on a history it
 * never repeats) must reproduce those ids exactly. Several prompts run one after another on one decoder.
 * A draft model of another vocabulary and a history that disagrees with the cache are refused by name.
 *
 * Sampling: the distributions of the first and the second token emitted after a prompt, by thousands of
 * speculative steps (prompt lookup, and the model as its own draft), are compared with the exact
 * distributions by a chi-square test at significance 0.001. The exact ones come from one-token decodes
 * and a reference of the sampler chain written here (top-k, top-p, min-p on the untempered softmax, then
 * temperature, as llama.cpp orders them); the plain sampler is held to the same reference. The seeds are
 * fixed, so each run draws the same numbers: the test cannot flake.
 */
#include "harness.h"

#include <math.h>
#include <stdlib.h>

static kiln_model *model;

static kiln_ctx *make_ctx(kiln_model *m) {
    kiln_ctx_params p = harness_ctx_params();
    kiln_ctx *c = NULL;
    p.n_ctx = 512;
    p.n_batch = 64;
    CHECK_OK(kiln_ctx_create(m, &p, &c));
    return c;
}

static const kiln_sampler_params greedy_params = {.temperature = 0, .repeat_penalty = 1.0f};
static kiln_sampler *greedy_sampler; /* temperature 0: the sampler's own argmax, through the step */

/* Greedy ids (prompt included) by speculative decoding, n_total in all; the stats through *st. */
static int32_t spec_greedy(kiln_ctx *c, kiln_spec *sp, const int32_t *prompt, int32_t n_prompt,
                           int32_t n_total, int32_t *ids) {
    const float *logits;
    int32_t n = n_prompt, out[64], m;
    kiln_ctx_reset(c);
    memcpy(ids, prompt, (size_t)n_prompt * sizeof *ids);
    CHECK_OK(kiln_ctx_decode(c, prompt, n_prompt, &logits));
    ids[n++] = harness_argmax(logits, kiln_model_n_vocab(model));
    while (n < n_total) {
        kiln_status s = kiln_spec_step(sp, greedy_sampler, ids, n, n_total - n, out, &m);
        CHECK_OK(s);
        if (s) break;
        CHECK(m >= 1 && m <= n_total - n);
        memcpy(ids + n, out, (size_t)m * sizeof *ids);
        n += m;
        CHECK_EQ_INT(kiln_kv_seq_pos_max(c, 0), n - 2); /* every token but the last is in the cache */
    }
    return n;
}

static void check_golden(kiln_ctx *c, kiln_spec *sp, const char *section, kiln_spec_stats *st) {
    harness_golden g;
    int32_t ids[512], n;
    harness_golden_load(section, &g);
    n = spec_greedy(c, sp, g.prompt, (int32_t)g.n_prompt, (int32_t)g.n_ids, ids);
    CHECK_EQ_INT(n, g.n_ids);
    for (int32_t i = 0; i < n && i < (int32_t)g.n_ids; i++)
        if (ids[i] != g.ids[i]) {
            harness_fail(__FILE__, __LINE__, "%s: id %d is %d, golden %d", section, i, ids[i], g.ids[i]);
            break;
        }
    kiln_spec_get_stats(sp, st);
}

/* Fixed: every step guesses what lookup finds; adaptive: the measured-cost choice (timing-dependent, so
 * only the tokens are checked). */
static void prompt_lookup_gives_the_golden_greedy_tokens(void) {
    kiln_ctx *c = make_ctx(model);
    kiln_spec_params p = kiln_spec_params_default();
    kiln_spec *sp = NULL;
    kiln_spec_stats st;
    if (!c) return;
    p.fixed = true;
    CHECK_OK(kiln_spec_create(c, &p, &sp));
    check_golden(c, sp, "\"bos_only_200\"", &st);
    check_golden(c, sp, "\"once_upon_a_time_64\"", &st);
    /* The story repeats itself ("Lily was sad and didn't know what to do"), so lookup guesses some. */
    CHECK(st.drafted > 0 && st.accepted > 0);
    CHECK(st.steps < 200 + 64);
    kiln_spec_destroy(sp);
    CHECK_OK(kiln_spec_create(c, NULL, &sp));
    check_golden(c, sp, "\"bos_only_200\"", &st);
    check_golden(c, sp, "\"once_upon_a_time_64\"", &st);
    /* A temperature-0 sampler is greedy decoding too. */
    CHECK_OK(kiln_sampler_create(kiln_model_n_vocab(model), &greedy_params, &greedy_sampler));
    check_golden(c, sp, "\"bos_only_200\"", &st);
    kiln_sampler_destroy(greedy_sampler);
    greedy_sampler = NULL;
    kiln_spec_destroy(sp);
    kiln_ctx_destroy(c);
}

static void the_model_as_its_own_draft_gives_the_golden_tokens_and_is_mostly_accepted(void) {
    kiln_ctx *c = make_ctx(model), *d = make_ctx(model);
    kiln_spec_params p = kiln_spec_params_default();
    kiln_spec *sp = NULL;
    kiln_spec_stats st;
    if (!c || !d) return;
    p.draft = d;
    p.n_draft = 5;
    p.fixed = true;
    CHECK_OK(kiln_spec_create(c, &p, &sp));
    check_golden(c, sp, "\"bos_only_200\"", &st);
    check_golden(c, sp, "\"once_upon_a_time_64\"", &st);
    CHECK(st.drafted > 0);
    CHECK(st.accepted * 10 >= st.drafted * 9); /* same model: only a batch-shape near tie can differ */
    kiln_spec_destroy(sp);
    kiln_ctx_destroy(c);
    kiln_ctx_destroy(d);
}

static void several_prompts_in_turn_each_give_plain_greedy_tokens(void) {
    static const char *const prompts[] = {"Lily and Ben", "The dog ran", "One day, a big bird", "Tom"};
    kiln_ctx *c = make_ctx(model), *plain = make_ctx(model);
    kiln_spec_params p = kiln_spec_params_default();
    kiln_spec *sp = NULL;
    if (!c || !plain) return;
    p.ngram_min = 2;
    p.n_draft = 3;
    CHECK_OK(kiln_spec_create(c, &p, &sp));
    for (size_t k = 0; k < sizeof prompts / sizeof *prompts; k++) {
        int32_t prompt[32], ids[160], want[160], n_prompt;
        size_t np = 0;
        const float *logits;
        CHECK_OK(
            kiln_tokenize(kiln_model_vocab(model), prompts[k], strlen(prompts[k]), true, prompt, 32, &np));
        n_prompt = (int32_t)np;
        kiln_ctx_reset(plain);
        memcpy(want, prompt, np * sizeof *want);
        CHECK_OK(kiln_ctx_decode(plain, prompt, n_prompt, &logits));
        for (int32_t i = n_prompt; i < 160; i++) {
            want[i] = harness_argmax(logits, kiln_model_n_vocab(model));
            if (i + 1 < 160) CHECK_OK(kiln_ctx_decode(plain, &want[i], 1, &logits));
        }
        CHECK_EQ_INT(spec_greedy(c, sp, prompt, n_prompt, 160, ids), 160);
        CHECK(memcmp(ids, want, sizeof ids) == 0);
    }
    kiln_spec_destroy(sp);
    kiln_ctx_destroy(c);
    kiln_ctx_destroy(plain);
}

static void bad_drafts_and_histories_are_refused_by_name(void) {
    kiln_model *other = NULL;
    kiln_ctx *c = make_ctx(model), *d = NULL;
    kiln_spec_params p = kiln_spec_params_default();
    kiln_spec *sp = NULL;
    int32_t h[4] = {1, 2, 3, 4}, out[8], m;
    const float *logits;
    if (!c) return;
    CHECK_OK(kiln_model_load(harness_data_path("arch/llama3.gguf"), &other));
    if (other) d = make_ctx(other);
    p.draft = d;
    CHECK_STATUS(kiln_spec_create(c, &p, &sp), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("vocabulary");
    CHECK_STATUS(kiln_spec_check_draft(model, other), KILN_E_INVALID_ARG); /* the same check, for kiln serve */
    CHECK_ERROR_MENTIONS("vocabulary");
    CHECK_STATUS(kiln_spec_check_draft(model, NULL), KILN_E_INVALID_ARG);
    CHECK_OK(kiln_spec_check_draft(model, model));
    p.draft = NULL;
    p.n_draft = 64;
    CHECK_STATUS(kiln_spec_create(c, &p, &sp), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("below n_batch 64");
    p.n_draft = 4;
    CHECK_OK(kiln_spec_create(c, &p, &sp));
    CHECK_OK(kiln_ctx_decode(c, h, 2, &logits));
    CHECK_STATUS(kiln_spec_step(sp, NULL, h, 4, 8, out, &m), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("the cache holds 2 tokens of sequence 0, the history 4");
    CHECK_OK(kiln_spec_step(sp, NULL, h, 3, 1, out, &m));
    CHECK_EQ_INT(m, 1); /* max_out 1: no guess, one plain step */
    kiln_spec_destroy(sp);
    kiln_ctx_destroy(c);
    kiln_ctx_destroy(d);
    kiln_model_destroy(other);
}

/* ------------------------------------------------------------------------------------------------------
 * Sampling keeps the target's distribution
 * ---------------------------------------------------------------------------------------------------- */

#define V_MAX 512
#define TRIALS 2000
static const kiln_sampler_params chain = {
    .temperature = 0.9f, .top_k = 8, .top_p = 0.95f, .min_p = 0.05f, .repeat_penalty = 1.0f, .seed = 7};

/* The chain's distribution over logits x[0..V): into p (zero outside the survivors). */
static void reference_dist(const float *x, int32_t V, double *p) {
    int32_t order[V_MAX], keep = chain.top_k, n_p = 0;
    double sum = 0, cum = 0, total = 0;
    for (int32_t i = 0; i < V; i++) {
        int32_t j = i;
        for (; j > 0 && (x[order[j - 1]] < x[i]); j--) /* insertion sort: highest first, lower id on ties */
            order[j] = order[j - 1];
        order[j] = i;
        p[i] = 0;
    }
    for (int32_t i = 0; i < keep; i++)
        sum += exp((double)x[order[i]] - x[order[0]]);
    while (n_p < keep && (n_p == 0 || cum < chain.top_p))
        cum += exp((double)x[order[n_p++]] - x[order[0]]) / sum;
    for (keep = 1; keep < n_p && x[order[keep]] >= x[order[0]] + log(chain.min_p); keep++)
        ;
    for (int32_t i = 0; i < keep; i++)
        total += p[order[i]] = exp(((double)x[order[i]] - x[order[0]]) / chain.temperature);
    for (int32_t i = 0; i < keep; i++)
        p[order[i]] /= total;
}

/* Pearson's statistic of counts against probabilities p (bins expected below 5 pooled), and whether it
 * stays below the 0.999 quantile of chi-square (Wilson-Hilferty, accurate to ~1% for these degrees). */
static bool chi_square_fits(const int32_t *count, const double *p, int32_t V, int32_t n, double *stat) {
    double pooled_e = 0, pooled_o = 0, z = 3.0902, df;
    int32_t bins = 0;
    *stat = 0;
    for (int32_t i = 0; i < V; i++) {
        double e = p[i] * n;
        if (e < 5) {
            pooled_e += e, pooled_o += count[i];
            if (p[i] == 0 && count[i] > 0) return false; /* a token the chain never draws */
            continue;
        }
        *stat += (count[i] - e) * (count[i] - e) / e, bins++;
    }
    if (pooled_e > 0) *stat += (pooled_o - pooled_e) * (pooled_o - pooled_e) / pooled_e, bins++;
    df = bins - 1;
    return df >= 1 && *stat < df * pow(1 - 2 / (9 * df) + z * sqrt(2 / (9 * df)), 3);
}

/* Tokens 1 and 2 after the history h[0..n) (cache: n - 1 of them), TRIALS times, by speculative steps. */
static void spec_counts(kiln_ctx *c, kiln_spec *sp, const int32_t *h, int32_t n, int32_t *c1, int32_t *c2) {
    kiln_sampler *smp = NULL;
    int32_t hist[64], out[16], m;
    CHECK_OK(kiln_sampler_create(kiln_model_n_vocab(model), &chain, &smp));
    for (int32_t t = 0; t < TRIALS && smp; t++) {
        int32_t got = 0;
        memcpy(hist, h, (size_t)n * sizeof *h);
        CHECK_OK(kiln_kv_seq_rm(c, 0, n - 1, -1));
        while (got < 2) {
            kiln_status s = kiln_spec_step(sp, smp, hist, n + got, 8, out, &m);
            CHECK_OK(s);
            if (s) return;
            memcpy(hist + n + got, out, (size_t)m * sizeof *out);
            got += m;
        }
        c1[hist[n]]++;
        c2[hist[n + 1]]++;
    }
    kiln_sampler_destroy(smp);
}

static void sampled_tokens_keep_the_target_distribution(void) {
    static const char text[] = "Lily was sad and didn't know what to do. Lily was sad";
    kiln_ctx *c = make_ctx(model), *d = make_ctx(model), *plain = make_ctx(model);
    int32_t V = kiln_model_n_vocab(model), h[64], c1[V_MAX] = {0}, c2[V_MAX] = {0}, n;
    double p1[V_MAX], p2[V_MAX] = {0}, px[V_MAX], stat;
    const float *logits;
    kiln_sampler *smp = NULL;
    size_t nt = 0;
    if (!c || !d || !plain || V > V_MAX) return;
    CHECK_OK(kiln_tokenize(kiln_model_vocab(model), text, strlen(text), true, h, 62, &nt));
    n = (int32_t)nt;
    /* The exact distributions: token 1 after h, and token 2 summed over every possible token 1. */
    CHECK_OK(kiln_ctx_decode(plain, h, n, &logits));
    reference_dist(logits, V, p1);
    for (int32_t x = 0; x < V; x++) {
        if (p1[x] == 0) continue;
        CHECK_OK(kiln_kv_seq_rm(plain, 0, n, -1));
        CHECK_OK(kiln_ctx_decode(plain, &x, 1, &logits));
        reference_dist(logits, V, px);
        for (int32_t y = 0; y < V; y++)
            p2[y] += p1[x] * px[y];
    }
    /* The plain sampler against the reference. */
    CHECK_OK(kiln_kv_seq_rm(plain, 0, n - 1, -1));
    CHECK_OK(kiln_ctx_decode(plain, &h[n - 1], 1, &logits));
    CHECK_OK(kiln_sampler_create(V, &chain, &smp));
    for (int32_t t = 0; t < TRIALS && smp; t++) {
        int32_t tok;
        CHECK_OK(kiln_sampler_sample(smp, logits, &tok));
        c1[tok]++;
    }
    kiln_sampler_destroy(smp);
    CHECK(chi_square_fits(c1, p1, V, TRIALS, &stat));
    for (int with_draft = 0; with_draft < 2; with_draft++) {
        kiln_spec_params p = kiln_spec_params_default();
        kiln_spec *sp = NULL;
        kiln_spec_stats st;
        p.fixed = true;
        p.n_draft = 3;
        p.draft = with_draft ? d : NULL;
        memset(c1, 0, sizeof c1);
        memset(c2, 0, sizeof c2);
        kiln_ctx_reset(c);
        CHECK_OK(kiln_ctx_decode(c, h, n - 1, &logits));
        CHECK_OK(kiln_spec_create(c, &p, &sp));
        if (!sp) break;
        spec_counts(c, sp, h, n, c1, c2);
        kiln_spec_get_stats(sp, &st);
        /* Both the accepting and the rejecting path ran, many times. */
        CHECK(st.accepted > TRIALS / 10 && st.drafted - st.accepted > TRIALS / 10);
        if (!chi_square_fits(c1, p1, V, TRIALS, &stat))
            harness_fail(__FILE__, __LINE__, "draft %d: token 1 chi-square %.1f", with_draft, stat);
        if (!chi_square_fits(c2, p2, V, TRIALS, &stat))
            harness_fail(__FILE__, __LINE__, "draft %d: token 2 chi-square %.1f", with_draft, stat);
        kiln_spec_destroy(sp);
    }
    kiln_ctx_destroy(c);
    kiln_ctx_destroy(d);
    kiln_ctx_destroy(plain);
}

/* The grammar follows the kept tokens only (a rejected guess never reaches it), so it needs no rollback. */
static void a_grammar_on_the_sampler_constrains_speculative_output(void) {
    static const char text[] = "the dog ran to the park and the dog ran to the park and the dog ran to the";
    static const char gbnf[] = "root ::= [a-z ]+";
    kiln_ctx *c = make_ctx(model);
    kiln_spec_params p = kiln_spec_params_default();
    kiln_spec *sp = NULL;
    kiln_sampler *smp = NULL;
    kiln_grammar *g = NULL;
    kiln_grammar_vocab *gv = NULL;
    kiln_grammar_matcher *gm = NULL;
    kiln_spec_stats st;
    int32_t h[96], out[16], m, n;
    size_t nt = 0;
    const float *logits;
    if (!c) return;
    p.fixed = true;
    CHECK_OK(kiln_spec_create(c, &p, &sp));
    CHECK_OK(kiln_sampler_create(kiln_model_n_vocab(model), &chain, &smp));
    CHECK_OK(kiln_grammar_parse(gbnf, strlen(gbnf), &g));
    CHECK_OK(kiln_grammar_vocab_create(kiln_model_vocab(model), NULL, 0, &gv));
    CHECK_OK(kiln_grammar_matcher_create(g, gv, &gm));
    CHECK_OK(kiln_sampler_set_grammar(smp, gm));
    CHECK_OK(kiln_tokenize(kiln_model_vocab(model), text, strlen(text), true, h, 32, &nt));
    n = (int32_t)nt;
    CHECK_OK(kiln_ctx_decode(c, h, n - 1, &logits));
    for (int32_t start = n; n < start + 40 && sp && smp;) {
        kiln_status s = kiln_spec_step(sp, smp, h, n, start + 40 - n, out, &m);
        CHECK_OK(s);
        if (s) break;
        memcpy(h + n, out, (size_t)m * sizeof *out);
        n += m;
    }
    for (int32_t i = (int32_t)nt; i < n; i++) {
        kiln_str t = kiln_vocab_token_text(kiln_model_vocab(model), h[i]);
        for (size_t b = 0; b < t.len; b++) /* SPM: the space is U+2581 */
            CHECK(strchr("abcdefghijklmnopqrstuvwxyz", t.data[b]) || (unsigned char)t.data[b] >= 0x80);
    }
    kiln_spec_get_stats(sp, &st);
    CHECK(st.accepted > 0);
    kiln_sampler_destroy(smp);
    kiln_grammar_matcher_destroy(gm);
    kiln_grammar_vocab_destroy(gv);
    kiln_grammar_destroy(g);
    kiln_spec_destroy(sp);
    kiln_ctx_destroy(c);
}

int main(void) {
    CHECK_OK(kiln_model_load(KILN_MODEL_PATH, &model));
    if (!model) return harness_finish();
    RUN(prompt_lookup_gives_the_golden_greedy_tokens);
    RUN(the_model_as_its_own_draft_gives_the_golden_tokens_and_is_mostly_accepted);
    RUN(several_prompts_in_turn_each_give_plain_greedy_tokens);
    RUN(bad_drafts_and_histories_are_refused_by_name);
    RUN(sampled_tokens_keep_the_target_distribution);
    RUN(a_grammar_on_the_sampler_constrains_speculative_output);
    kiln_model_destroy(model);
    return harness_finish();
}
