/*
 * test_sampler.c - the sampling chain: greedy selection and its tie rule, seeded reproducibility, the
 * empirical distribution against softmax(logits / T), what top-k, top-p and min-p may never draw, the
 * repetition penalty, non-finite logits, invalid parameters, and no allocation after create.
 *
 * Statistical checks use 100000 draws with a fixed seed: the standard error of a frequency is then at
 * most 0.0016, so the tolerance 0.01 is over six standard errors.
 */
#include "harness.h"

#include <math.h>
#include <stdlib.h>

#define DRAWS 100000

static kiln_sampler_params plain(float temperature) {
    kiln_sampler_params p = kiln_sampler_params_default();
    p.temperature = temperature;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.0f;
    p.seed = 1234;
    return p;
}

static int32_t sample_once(const kiln_sampler_params *p, const float *logits, int32_t n) {
    kiln_sampler *s = NULL;
    int32_t tok = -1;
    CHECK_OK(kiln_sampler_create(n, p, &s));
    if (s) CHECK_OK(kiln_sampler_sample(s, logits, &tok));
    kiln_sampler_destroy(s);
    return tok;
}

/* Draw DRAWS tokens and return the frequency of each in freq[0..n). */
static void frequencies(const kiln_sampler_params *p, const float *logits, int32_t n, double *freq) {
    kiln_sampler *s = NULL;
    for (int32_t i = 0; i < n; i++)
        freq[i] = 0;
    CHECK_OK(kiln_sampler_create(n, p, &s));
    if (!s) return;
    for (int d = 0; d < DRAWS; d++) {
        int32_t tok = -1;
        CHECK_OK(kiln_sampler_sample(s, logits, &tok));
        if (tok < 0 || tok >= n) {
            harness_fail(__FILE__, __LINE__, "drew %d outside [0, %d)", tok, n);
            break;
        }
        freq[tok] += 1.0 / DRAWS;
    }
    kiln_sampler_destroy(s);
}

static void greedy_picks_the_argmax_and_the_lowest_id_on_ties(void) {
    const float logits[] = {1.0f, 5.0f, 5.0f, 2.0f};
    kiln_sampler_params p = plain(0.0f);
    CHECK_EQ_INT(sample_once(&p, logits, 4), 1);
    p.temperature = -1.0f;
    CHECK_EQ_INT(sample_once(&p, logits, 4), 1);
    const float one[] = {-3.0f};
    CHECK_EQ_INT(sample_once(&p, one, 1), 0);
}

static void top_k_one_equals_greedy_at_any_temperature(void) {
    float logits[1000];
    unsigned x = 7;
    for (int i = 0; i < 1000; i++) {
        x = x * 1103515245u + 12345u;
        logits[i] = (float)((x >> 16) % 200) / 10.0f; /* many ties */
    }
    kiln_sampler_params greedy = plain(0.0f);
    int32_t want = sample_once(&greedy, logits, 1000);
    const float temps[] = {0.01f, 0.5f, 1.0f, 5.0f, 1000.0f};
    for (size_t t = 0; t < 5; t++) {
        kiln_sampler_params p = plain(temps[t]);
        p.top_k = 1;
        for (uint64_t seed = 0; seed < 20; seed++) {
            p.seed = seed;
            CHECK_EQ_INT(sample_once(&p, logits, 1000), want);
        }
    }
}

static void same_seed_repeats_and_other_seeds_differ(void) {
    float logits[64];
    for (int i = 0; i < 64; i++)
        logits[i] = (float)(i % 7) * 0.3f;
    kiln_sampler_params p = kiln_sampler_params_default();
    p.top_k = 0;
    p.seed = 99;
    kiln_sampler *a = NULL, *b = NULL, *c = NULL;
    CHECK_OK(kiln_sampler_create(64, &p, &a));
    CHECK_OK(kiln_sampler_create(64, &p, &b));
    p.seed = 100;
    CHECK_OK(kiln_sampler_create(64, &p, &c));
    if (!a || !b || !c) return;
    int same = 0, differ = 0;
    for (int i = 0; i < 200; i++) {
        int32_t ta, tb, tc;
        CHECK_OK(kiln_sampler_sample(a, logits, &ta));
        CHECK_OK(kiln_sampler_sample(b, logits, &tb));
        CHECK_OK(kiln_sampler_sample(c, logits, &tc));
        same += ta == tb;
        differ += ta != tc;
    }
    CHECK_EQ_INT(same, 200);
    CHECK(differ > 100);
    kiln_sampler_destroy(a);
    kiln_sampler_destroy(b);
    kiln_sampler_destroy(c);
}

static void draws_follow_softmax_of_logits_over_temperature(void) {
    const float logits[] = {1.0f, 2.0f, 0.5f, -1.0f, 3.0f, 2.0f};
    const float temps[] = {0.7f, 1.0f, 2.5f};
    for (size_t t = 0; t < 3; t++) {
        double freq[6], expect[6], z = 0;
        for (int i = 0; i < 6; i++)
            z += expect[i] = exp((double)logits[i] / temps[t]);
        kiln_sampler_params p = plain(temps[t]);
        frequencies(&p, logits, 6, freq);
        for (int i = 0; i < 6; i++)
            CHECK_NEAR(freq[i], expect[i] / z, 0.01);
    }
}

static void top_k_renormalizes_over_the_k_best(void) {
    const float logits[] = {1.0f, 2.0f, 0.5f, -1.0f, 3.0f, 2.0f};
    kiln_sampler_params p = plain(1.0f);
    p.top_k = 3; /* ids 4, 1, 5 */
    double freq[6], z = exp(3.0) + 2 * exp(2.0);
    frequencies(&p, logits, 6, freq);
    CHECK_NEAR(freq[4], exp(3.0) / z, 0.01);
    CHECK_NEAR(freq[1], exp(2.0) / z, 0.01);
    CHECK_NEAR(freq[5], exp(2.0) / z, 0.01);
    CHECK((freq[0] + freq[2] + freq[3]) == 0);
}

/* Probabilities 0.5, 0.3, 0.15, 0.05 at temperature 1. */
static const float quarters[] = {-0.693147f, -1.203973f, -1.897120f, -2.995732f};

static void top_p_never_draws_outside_the_nucleus(void) {
    kiln_sampler_params p = plain(1.0f);
    p.top_p = 0.75f; /* 0.5 < 0.75 <= 0.8: the nucleus is {0, 1} */
    double freq[4];
    frequencies(&p, quarters, 4, freq);
    CHECK((freq[2] + freq[3]) == 0);
    CHECK_NEAR(freq[0], 0.5 / 0.8, 0.01);
    p.top_p = 0.0f; /* keeps at least one */
    frequencies(&p, quarters, 4, freq);
    CHECK_NEAR(freq[0], 1.0, 1e-6);
}

static void min_p_never_draws_below_the_threshold(void) {
    kiln_sampler_params p = plain(1.0f);
    p.min_p = 0.2f; /* threshold 0.1: drops only id 3 */
    double freq[4];
    frequencies(&p, quarters, 4, freq);
    CHECK((freq[3]) == 0);
    CHECK_NEAR(freq[2], 0.15 / 0.95, 0.01);
    p.min_p = 0.5f; /* threshold 0.25: keeps {0, 1} */
    frequencies(&p, quarters, 4, freq);
    CHECK((freq[2] + freq[3]) == 0);
    CHECK_NEAR(freq[1], 0.3 / 0.8, 0.01);
}

static void repetition_penalty_divides_positive_and_multiplies_negative_logits(void) {
    kiln_sampler_params p = plain(0.0f);
    p.repeat_penalty = 1.5f;
    p.repeat_last_n = 2;
    kiln_sampler *s = NULL;
    const float pos[] = {2.0f, 1.8f, -1.0f}, neg[] = {-1.0f, -1.2f, -5.0f};
    int32_t tok = -1;
    CHECK_OK(kiln_sampler_create(3, &p, &s));
    if (!s) return;
    CHECK_OK(kiln_sampler_sample(s, pos, &tok));
    CHECK_EQ_INT(tok, 0);
    kiln_sampler_accept(s, 0); /* 2.0 / 1.5 = 1.33 < 1.8; -1.0 * 1.5 = -1.5 < -1.2 */
    CHECK_OK(kiln_sampler_sample(s, pos, &tok));
    CHECK_EQ_INT(tok, 1);
    CHECK_OK(kiln_sampler_sample(s, neg, &tok));
    CHECK_EQ_INT(tok, 1);
    kiln_sampler_accept(s, 2);
    kiln_sampler_accept(s, 2); /* token 0 has left the window of 2 */
    CHECK_OK(kiln_sampler_sample(s, pos, &tok));
    CHECK_EQ_INT(tok, 0);
    kiln_sampler_accept(s, 77); /* out of range: ignored */
    kiln_sampler_accept(NULL, 0);
    kiln_sampler_destroy(s);
}

static void repetition_penalty_counts_each_token_once(void) {
    kiln_sampler_params p = plain(0.0f);
    p.repeat_penalty = 1.4f; /* once: 3.0 / 1.4 = 2.14 > 2; twice would be 1.53 */
    kiln_sampler *s = NULL;
    const float logits[] = {3.0f, 2.0f};
    float copy[2];
    int32_t tok = -1;
    CHECK_OK(kiln_sampler_create(2, &p, &s));
    if (!s) return;
    kiln_sampler_accept(s, 0);
    kiln_sampler_accept(s, 0);
    memcpy(copy, logits, sizeof copy);
    CHECK_OK(kiln_sampler_sample(s, copy, &tok));
    CHECK_EQ_INT(tok, 0);
    CHECK(memcmp(copy, logits, sizeof copy) == 0); /* input untouched */
    kiln_sampler_destroy(s);
}

static void treats_nan_as_minus_infinity_and_survives_all_minus_infinity(void) {
    const float nan_logits[] = {NAN, 1.0f, NAN, 0.5f};
    kiln_sampler_params g = plain(0.0f), t = plain(1.0f);
    CHECK_EQ_INT(sample_once(&g, nan_logits, 4), 1);
    double freq[4];
    frequencies(&t, nan_logits, 4, freq);
    CHECK((freq[0] + freq[2]) == 0);
    t.top_k = 3;
    t.top_p = 0.9f;
    t.min_p = 0.01f;
    frequencies(&t, nan_logits, 4, freq);
    CHECK((freq[0] + freq[2]) == 0);
    const float dead[] = {-INFINITY, NAN, -INFINITY};
    CHECK_EQ_INT(sample_once(&g, dead, 3), 0);
    CHECK_EQ_INT(sample_once(&t, dead, 3), 0);
    const float inf[] = {0.0f, INFINITY, 1e30f};
    CHECK_EQ_INT(sample_once(&g, inf, 3), 1);
    CHECK_EQ_INT(sample_once(&t, inf, 3), 1);
}

static void rejects_invalid_parameters(void) {
    kiln_sampler_params p = kiln_sampler_params_default();
    kiln_sampler *s = (kiln_sampler *)1;
    CHECK_STATUS(kiln_sampler_create(0, &p, &s), KILN_E_INVALID_ARG);
    CHECK(s == NULL);
    CHECK_STATUS(kiln_sampler_create(-5, &p, &s), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("-5");
    CHECK_STATUS(kiln_sampler_create(10, NULL, &s), KILN_E_INVALID_ARG);
    CHECK_STATUS(kiln_sampler_create(10, &p, NULL), KILN_E_INVALID_ARG);
    p.temperature = NAN;
    CHECK_STATUS(kiln_sampler_create(10, &p, &s), KILN_E_INVALID_ARG);
    p = kiln_sampler_params_default();
    p.repeat_penalty = 0.0f;
    CHECK_STATUS(kiln_sampler_create(10, &p, &s), KILN_E_INVALID_ARG);
    p = kiln_sampler_params_default();
    p.repeat_last_n = -1;
    CHECK_STATUS(kiln_sampler_create(10, &p, &s), KILN_E_INVALID_ARG);
    p = kiln_sampler_params_default();
    CHECK_OK(kiln_sampler_create(10, &p, &s));
    int32_t tok;
    float logits[10] = {0};
    CHECK_STATUS(kiln_sampler_sample(s, NULL, &tok), KILN_E_INVALID_ARG);
    CHECK_STATUS(kiln_sampler_sample(s, logits, NULL), KILN_E_INVALID_ARG);
    CHECK_STATUS(kiln_sampler_sample(NULL, logits, &tok), KILN_E_INVALID_ARG);
    kiln_sampler_destroy(s);
    kiln_sampler_destroy(NULL);
}

static void samples_without_allocating(void) {
    enum { N = 32000 };
    float *logits = malloc(N * sizeof *logits);
    for (int i = 0; i < N; i++)
        logits[i] = (float)((i * 7919) % 1000) / 100.0f;
    kiln_sampler_params p = kiln_sampler_params_default();
    p.repeat_penalty = 1.1f;
    kiln_sampler *s = NULL;
    CHECK_OK(kiln_sampler_create(N, &p, &s));
    harness_count_allocations();
    for (int i = 0; s && i < 50; i++) {
        int32_t tok = -1;
        CHECK_OK(kiln_sampler_sample(s, logits, &tok));
        kiln_sampler_accept(s, tok);
    }
    CHECK_EQ_INT(harness_allocations(), 0);
    kiln_set_allocator(NULL);
    kiln_sampler_destroy(s);
    free(logits);
}

int main(void) {
    RUN(greedy_picks_the_argmax_and_the_lowest_id_on_ties);
    RUN(top_k_one_equals_greedy_at_any_temperature);
    RUN(same_seed_repeats_and_other_seeds_differ);
    RUN(draws_follow_softmax_of_logits_over_temperature);
    RUN(top_k_renormalizes_over_the_k_best);
    RUN(top_p_never_draws_outside_the_nucleus);
    RUN(min_p_never_draws_below_the_threshold);
    RUN(repetition_penalty_divides_positive_and_multiplies_negative_logits);
    RUN(repetition_penalty_counts_each_token_once);
    RUN(treats_nan_as_minus_infinity_and_survives_all_minus_infinity);
    RUN(rejects_invalid_parameters);
    RUN(samples_without_allocating);
    return harness_finish();
}
