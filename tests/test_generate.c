/*
 * test_generate.c - end to end on the bundled stories260K model against the public goldens
 * (tests/data/golden, from llama2.c's test suite): greedy generation reproduces the token ids exactly;
 * thread counts agree; batched prefill agrees with token-by-token decoding; the KV cache bound is a clear
 * error; a warmed-up decode step allocates nothing; and the loader rejects broken models with messages.
 */
#include "harness.h"

#include <math.h>
#include <stdlib.h>

/* Greedy: prefill the prompt ids, then generate until the sequence has n_total ids. */
static kiln_type greedy_kv_type = KILN_TYPE_F32;

static size_t greedy_passes(const kiln_model *m, const char *passes, const int32_t *prompt, size_t n_prompt,
                            size_t n_total, int32_t *out) {
    kiln_ctx_params p = harness_ctx_params();
    p.kv_type = greedy_kv_type;
    kiln_ctx *ctx;
    const float *logits;
    size_t n = n_prompt;
    p.passes = passes;
    p.n_ctx = 256; /* the goldens need 201 positions; the unfused attention spans the whole cache */
    CHECK_OK(kiln_ctx_create(m, &p, &ctx));
    if (!ctx) return 0;
    memcpy(out, prompt, n_prompt * sizeof *out);
    CHECK_OK(kiln_ctx_decode(ctx, prompt, (int32_t)n_prompt, &logits));
    while (logits && n < n_total) {
        out[n] = harness_argmax(logits, kiln_model_n_vocab(m));
        if (++n < n_total) CHECK_OK(kiln_ctx_decode(ctx, &out[n - 1], 1, &logits));
    }
    kiln_ctx_destroy(ctx);
    return n;
}

static size_t greedy(const kiln_model *m, const int32_t *prompt, size_t n_prompt, size_t n_total, int32_t *out) {
    return greedy_passes(m, NULL, prompt, n_prompt, n_total, out);
}

/* The bundled model with a thread pool of n_threads. */
static kiln_model *load_with_threads(int n_threads) {
    kiln_model_params mp = kiln_model_params_default();
    kiln_model *m = NULL;
    mp.n_threads = n_threads;
    CHECK_OK(kiln_model_load_ex(KILN_MODEL_PATH, &mp, &m));
    return m;
}

static void check_golden(const char *section, const char *prompt_text) {
    kiln_model *m;
    harness_golden g = {0};
    int32_t ids[256], prompt[16];
    size_t n_prompt = 0;
    harness_golden_load(section, &g);
    CHECK(g.n_ids > g.n_prompt && g.n_prompt > 0);
    CHECK_OK(kiln_model_load(KILN_MODEL_PATH, &m));
    if (!m) return;
    CHECK_OK(kiln_tokenize(kiln_model_vocab(m), prompt_text, strlen(prompt_text), true, prompt, 16, &n_prompt));
    CHECK_EQ_INT(n_prompt, g.n_prompt);
    CHECK(memcmp(prompt, g.prompt, g.n_prompt * sizeof *prompt) == 0);
    for (int t = 1; t <= 2; t++) {
        kiln_model *mt = load_with_threads(t);
        size_t n = mt ? greedy(mt, g.prompt, g.n_prompt, g.n_ids, ids) : 0;
        kiln_model_destroy(mt);
        CHECK_EQ_INT(n, g.n_ids);
        for (size_t i = 0; i < n; i++)
            if (ids[i] != g.ids[i]) {
                harness_fail(__FILE__, __LINE__, "%s, %d threads: id %zu is %d, golden %d", section, t, i, ids[i],
                             g.ids[i]);
                break;
            }
    }
    kiln_model_destroy(m);
}

static void greedy_from_bos_reproduces_the_200_golden_tokens(void) { check_golden("\"bos_only_200\"", ""); }

static void greedy_from_once_upon_a_time_reproduces_the_golden_tokens(void) {
    check_golden("\"once_upon_a_time_64\"", "Once upon a time");
}

/* The goldens hold whatever the graph compiler does: no passes, all, and all but each fusion. */
static void the_goldens_hold_with_passes_on_off_and_each_fusion_removed(void) {
    static const char *const sets[] = {"none", "all", "-fuse_attention", "-fuse_qkv", "-fuse_swiglu",
                                       "-fuse_rms_norm", "-fuse_linear", "-const_fold", "-simplify,-absorb"};
    kiln_model *m;
    harness_golden g = {0};
    int32_t ids[256];
    harness_golden_load("\"bos_only_200\"", &g);
    if (!(m = load_with_threads(2))) return;
    for (size_t k = 0; k < sizeof sets / sizeof sets[0]; k++) {
        size_t n = greedy_passes(m, sets[k], g.prompt, g.n_prompt, g.n_ids, ids);
        CHECK_EQ_INT(n, g.n_ids);
        if (memcmp(ids, g.ids, g.n_ids * sizeof *ids) != 0)
            harness_fail(__FILE__, __LINE__, "passes '%s': the greedy ids differ from the golden", sets[k]);
    }
    kiln_model_destroy(m);
}

/* A quantized KV cache changes the arithmetic slightly; greedy output must still agree with the f32 cache
 * for at least 30 tokens (f16 for all 200). Both the fused (in-place read) and plain (cast) paths. */
static void quantized_kv_caches_keep_the_greedy_output(void) {
    static const struct {
        kiln_type type;
        size_t at_least;
    } cases[] = {{KILN_TYPE_F16, 200}, {KILN_TYPE_Q8_0, 30}};
    kiln_model *m;
    harness_golden g = {0};
    int32_t ids[256];
    harness_golden_load("\"bos_only_200\"", &g);
    if (!(m = load_with_threads(2))) return;
    for (size_t k = 0; k < 2; k++) {
        for (int passes = 0; passes < 2; passes++) {
            greedy_kv_type = cases[k].type;
            size_t n = greedy_passes(m, passes ? "all" : "none", g.prompt, g.n_prompt, g.n_ids, ids), same = 0;
            while (same + 1 < n && ids[same + 1] == g.ids[same + 1]) same++;
            printf("kv %s, passes %s: %zu of %zu generated tokens equal the f32 golden\n",
                   cases[k].type == KILN_TYPE_F16 ? "f16" : "q8_0", passes ? "all" : "none", same, g.n_ids - 1);
            CHECK(same >= cases[k].at_least);
        }
    }
    greedy_kv_type = KILN_TYPE_F32;
    kiln_model_destroy(m);
}

static void batched_prefill_matches_token_by_token_decoding(void) {
    kiln_model *m;
    kiln_ctx *a, *b;
    const float *la, *lb = NULL;
    static const int32_t prompt[7] = {1, 403, 407, 261, 378, 432, 383};
    CHECK_OK(kiln_model_load(KILN_MODEL_PATH, &m));
    if (!m) return;
    kiln_ctx_params p = harness_ctx_params();
    CHECK_OK(kiln_ctx_create(m, &p, &a));
    CHECK_OK(kiln_ctx_create(m, &p, &b));
    CHECK_OK(kiln_ctx_decode(a, prompt, 7, &la));
    for (int i = 0; i < 7; i++) CHECK_OK(kiln_ctx_decode(b, &prompt[i], 1, &lb));
    CHECK_EQ_INT(kiln_ctx_n_past(a), 7);
    CHECK_EQ_INT(kiln_ctx_n_past(b), 7);
    for (int32_t i = 0; i < kiln_model_n_vocab(m) && la && lb; i++) CHECK_NEAR(la[i], lb[i], 1e-4);
    kiln_ctx_destroy(a);
    kiln_ctx_destroy(b);
    kiln_model_destroy(m);
}

static void a_request_that_overflows_the_kv_cache_is_refused_and_changes_nothing(void) {
    kiln_model *m;
    kiln_ctx *ctx;
    kiln_ctx_params p = harness_ctx_params();
    const float *logits;
    int32_t toks[9] = {1, 403, 407, 261, 378, 432, 383, 286, 261};
    p.n_ctx = 8;
    CHECK_OK(kiln_model_load(KILN_MODEL_PATH, &m));
    if (!m) return;
    CHECK_OK(kiln_ctx_create(m, &p, &ctx));
    CHECK_STATUS(kiln_ctx_decode(ctx, toks, 9, &logits), KILN_E_CONTEXT_FULL);
    CHECK_ERROR_MENTIONS("9 tokens do not fit: 0 of 8 context positions are used");
    CHECK_OK(kiln_ctx_decode(ctx, toks, 6, &logits));
    CHECK_STATUS(kiln_ctx_decode(ctx, toks, 3, &logits), KILN_E_CONTEXT_FULL);
    CHECK_EQ_INT(kiln_ctx_n_past(ctx), 6);
    CHECK_OK(kiln_ctx_decode(ctx, toks, 2, &logits));
    CHECK_STATUS(kiln_ctx_decode(ctx, toks, 1, &logits), KILN_E_CONTEXT_FULL);
    toks[0] = 512;
    kiln_ctx_reset(ctx);
    CHECK_STATUS(kiln_ctx_decode(ctx, toks, 1, &logits), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("token 512 at index 0 is outside the vocabulary");
    kiln_ctx_destroy(ctx);
    kiln_model_destroy(m);
}

static void a_warmed_up_decode_step_allocates_nothing(void) {
    kiln_model *m;
    kiln_ctx *ctx;
    kiln_ctx_params p = harness_ctx_params();
    const float *logits;
    int32_t tok = 1;
    harness_count_allocations();
    m = load_with_threads(2);
    CHECK_OK(kiln_ctx_create(m, &p, &ctx));
    CHECK_OK(kiln_ctx_decode(ctx, &tok, 1, &logits)); /* warm-up */
    harness_zero_allocations();
    for (int i = 0; i < 20; i++) {
        tok = harness_argmax(logits, kiln_model_n_vocab(m));
        CHECK_OK(kiln_ctx_decode(ctx, &tok, 1, &logits));
    }
    CHECK_EQ_INT(harness_allocations(), 0);
    kiln_ctx_destroy(ctx);
    kiln_model_destroy(m);
    kiln_set_allocator(NULL);
}

int main(void) {
    RUN(greedy_from_bos_reproduces_the_200_golden_tokens);
    RUN(greedy_from_once_upon_a_time_reproduces_the_golden_tokens);
    RUN(the_goldens_hold_with_passes_on_off_and_each_fusion_removed);
    RUN(quantized_kv_caches_keep_the_greedy_output);
    RUN(batched_prefill_matches_token_by_token_decoding);
    RUN(a_request_that_overflows_the_kv_cache_is_refused_and_changes_nothing);
    RUN(a_warmed_up_decode_step_allocates_nothing);
    return harness_finish();
}
