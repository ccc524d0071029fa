/*
 * test_spec.c - greedy speculative decoding (kiln_spec_*): the tokens are greedy decoding's, whatever the
 * drafts.
 *
 * The reference is llama.cpp's greedy continuation of the bundled stories260K model (tests/data/golden,
 * 200 tokens from BOS and 64 from "Once upon a time"; see its README): speculative decoding with prompt
 * lookup, with the model as its own draft, and with a draft that is always wrong (lookup on a history it
 * never repeats) must reproduce those ids exactly. Several prompts run one after another on one decoder.
 * A draft model of another vocabulary and a history that disagrees with the cache are refused by name.
 */
#include "harness.h"

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
        kiln_status s = kiln_spec_step(sp, ids, n, n_total - n, out, &m);
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

static void prompt_lookup_gives_the_golden_greedy_tokens(void) {
    kiln_ctx *c = make_ctx(model);
    kiln_spec *sp = NULL;
    kiln_spec_stats st;
    if (!c) return;
    CHECK_OK(kiln_spec_create(c, NULL, &sp));
    check_golden(c, sp, "\"bos_only_200\"", &st);
    check_golden(c, sp, "\"once_upon_a_time_64\"", &st);
    /* The story repeats itself ("Lily was sad and didn't know what to do"), so lookup guesses some. */
    CHECK(st.drafted > 0 && st.accepted > 0);
    CHECK(st.steps < 200 + 64);
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
    CHECK_OK(kiln_spec_create(c, &p, &sp));
    check_golden(c, sp, "\"bos_only_200\"", &st);
    check_golden(c, sp, "\"once_upon_a_time_64\"", &st);
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
    p.draft = NULL;
    p.n_draft = 64;
    CHECK_STATUS(kiln_spec_create(c, &p, &sp), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("below n_batch 64");
    p.n_draft = 4;
    CHECK_OK(kiln_spec_create(c, &p, &sp));
    CHECK_OK(kiln_ctx_decode(c, h, 2, &logits));
    CHECK_STATUS(kiln_spec_step(sp, h, 4, 8, out, &m), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("the cache holds 2 tokens of sequence 0, the history 4");
    CHECK_OK(kiln_spec_step(sp, h, 3, 1, out, &m));
    CHECK_EQ_INT(m, 1); /* max_out 1: no guess, one plain step */
    kiln_spec_destroy(sp);
    kiln_ctx_destroy(c);
    kiln_ctx_destroy(d);
    kiln_model_destroy(other);
}

int main(void) {
    CHECK_OK(kiln_model_load(KILN_MODEL_PATH, &model));
    if (!model) return harness_finish();
    RUN(prompt_lookup_gives_the_golden_greedy_tokens);
    RUN(the_model_as_its_own_draft_gives_the_golden_tokens_and_is_mostly_accepted);
    RUN(several_prompts_in_turn_each_give_plain_greedy_tokens);
    RUN(bad_drafts_and_histories_are_refused_by_name);
    kiln_model_destroy(model);
    return harness_finish();
}
