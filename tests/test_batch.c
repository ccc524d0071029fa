/*
 * test_batch.c - many sequences in one context (include/kiln.h, "Models, contexts and batches"): a shared
 * batch in which one sequence prefills while others decode computes for each sequence what that sequence
 * computes alone in its own context, at every CPU level and KV-cache type, for the bundled stories260K
 * model and the tiny architecture models (a sliding window, learned positions); the KV-cache calls
 * (seq_cp shares cells, seq_rm forgets a tail that can be decoded again, seq_keep, pos_max, reset) keep
 * that promise; two contexts share one prepared copy of the weights; a warmed-up step allocates nothing;
 * KILN_SEQ_MAX sequences work; the one-sequence wrapper splits its input into n_batch chunks and takes
 * them all back when one fails; every invalid argument is refused with a named error and changes
 * nothing, as does a batch that does not fit, a position past a learned position table, and a batch the
 * abort callback stops.
 *
 * "The same" is judged per logit vector as max |batched - alone| / max |alone| (the logit scale), within a
 * tolerance derived per KV-cache type in kv_tolerance(), and per greedy step: the token chosen from the
 * batched logits is the alone run's argmax (the alone run is fed the batched run's tokens, so one near
 * tie cannot make the two runs drift apart).
 */
#include "harness.h"

#include <math.h>
#include <stdlib.h>

#define TEMP(name) KILN_TEST_TMP "/batch_" name

static const char *const LEVELS[] = {"ref", "avx2", "avx512", "amx", "neon"};
#define N_LEVELS ((int)(sizeof LEVELS / sizeof LEVELS[0]))

static const kiln_type KV_TYPES[] = {KILN_TYPE_F32, KILN_TYPE_F16, KILN_TYPE_Q8_0};

static const char *kv_name(kiln_type t) {
    return t == KILN_TYPE_F32 ? "f32" : t == KILN_TYPE_F16 ? "f16" : t == KILN_TYPE_Q8_0 ? "q8_0" : "?";
}

/* Prompts (BOS first). Every id is below 384, the smallest vocabulary of the test models. */
static const int32_t PROMPT_A[] = {1};
static const int32_t PROMPT_B[] = {1, 303, 307, 261, 378, 332, 383, 286, 261};
static const int32_t PROMPT_C[] = {1, 88, 300, 41, 77};
static const int32_t PROMPT_D[] = {1, 250, 11, 99, 356, 321, 150, 200, 37, 64, 128, 300, 5, 77};
#define LEN(a) ((int32_t)(sizeof(a) / sizeof((a)[0])))

/* max |x| over the vector, at least a tiny positive number. */
static double logit_scale(const float *x, int32_t n) {
    double scale = 1e-30;
    for (int32_t i = 0; i < n; i++)
        scale = fmax(scale, fabs((double)x[i]));
    return scale;
}

/* max |got - ref| / max |ref| */
static double rel_diff(const float *got, const float *ref, int32_t n) {
    double diff = 0.0;
    for (int32_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)ref[i]);
        if (d != d) return INFINITY; /* a NaN is never close */
        if (d > diff) diff = d;
    }
    return diff / logit_scale(ref, n);
}

/*
 * How far a sequence's logits may move when it shares batches with others, relative to the logit scale.
 *  - F32 cache: the arithmetic is the same up to summation order (batch shapes choose other matmul tiles,
 *    and attention visits the sequence's cells among other sequences' masked ones). Float32 sums of the
 *    model's <= 172 terms reorder to about 1e-6 relative per layer (test_kernels_levels.c measures ~1e-6
 *    on these logits); 1e-4 is test_arch.c's bar against transformers and leaves two decades of room.
 *  - F16 cache: both runs round K and V to f16; inputs that differ by ~1e-6 round apart only where they
 *    straddle a rounding midpoint, and then by one f16 ulp (2^-11 ~ 4.9e-4 relative) in that element.
 *    A handful of such flips spread through attention stay below 2e-3 of the logit scale.
 *  - Q8_0 cache: the same, with a flip worth one quantization step of its 32-element block,
 *    max|block| / 127 ~ 7.9e-3 of the block's range: 3e-2 allows a few such steps.
 * A greedy choice may differ only where the alone run's top two logits lie within 2 * tolerance (then
 * either is a correct greedy token); same_step() allows exactly that.
 */
static double kv_tolerance(kiln_type kv) {
    return kv == KILN_TYPE_Q8_0 ? 3e-2 : kv == KILN_TYPE_F16 ? 2e-3 : 1e-4;
}

/* Identical requests on identical state (another context, or after a refused call): only the cells the
 * cache chose may differ, which reorders nothing but the masked cells. */
#define SAME_STATE_TOL 1e-5

/* One greedy step: got (the batched logits, from which `chosen` was taken) against ref (alone). */
static bool same_step(const float *got, const float *ref, int32_t n, int32_t chosen, double tol,
                      double *worst, const char *what, int32_t step) {
    double d = rel_diff(got, ref, n), scale = logit_scale(ref, n);
    int32_t best = harness_argmax(ref, n);
    if (!(d <= *worst)) *worst = d;
    if (!(d <= tol)) {
        harness_fail(__FILE__, __LINE__,
                     "%s, step %d: logits differ by %.3g of the logit scale (tolerance %.3g)", what, step, d,
                     tol);
        return false;
    }
    if (best != chosen && ref[best] - ref[chosen] > 2.0 * tol * scale) {
        harness_fail(__FILE__, __LINE__, "%s, step %d: greedy token %d, alone %d (margin %.3g)", what, step,
                     chosen, best, (double)(ref[best] - ref[chosen]));
        return false;
    }
    return true;
}

static bool check_logits_close(const float *got, const float *ref, int32_t n, double tol, const char *what) {
    double d;
    if (!got || !ref) {
        harness_fail(__FILE__, __LINE__, "%s: missing logits (%p, %p)", what, (const void *)got,
                     (const void *)ref);
        return false;
    }
    d = rel_diff(got, ref, n);
    if (!(d <= tol)) {
        harness_fail(__FILE__, __LINE__, "%s: logits differ by %.3g of the logit scale (tolerance %.3g)",
                     what, d, tol);
        return false;
    }
    return true;
}

static kiln_ctx *make_ctx(const kiln_model *m, int32_t n_ctx, int32_t n_batch, int32_t n_seq_max) {
    kiln_ctx_params p = harness_ctx_params();
    kiln_ctx *ctx = NULL;
    p.n_ctx = n_ctx;
    p.n_batch = n_batch;
    p.n_seq_max = n_seq_max;
    CHECK_OK(kiln_ctx_create(m, &p, &ctx));
    return ctx;
}

/* Decode one batch of n tokens of sequence seq from position pos0, logits for the last only. */
static kiln_status decode_run(kiln_ctx *ctx, const int32_t *tokens, int32_t n, int32_t pos0, int32_t seq) {
    kiln_batch b;
    kiln_status s = kiln_batch_init(n, &b);
    if (s) return s;
    for (int32_t i = 0; i < n && !s; i++)
        s = kiln_batch_add(&b, tokens[i], pos0 + i, seq, i == n - 1);
    if (!s) s = kiln_ctx_decode_batch(ctx, &b);
    kiln_batch_free(&b);
    return s;
}

/* ---------------------------------------------------------------------------------------------------
 * Interleaved streams against each stream alone
 * ------------------------------------------------------------------------------------------------- */

#define N_GEN_MAX 16
#define N_STREAMS 4

typedef struct stream {
    const int32_t *prompt;
    int32_t n_prompt;
    int32_t seq;   /* its sequence id in the shared context */
    int32_t start; /* the batch at which it joins */
    int32_t chunk; /* prompt tokens per batch while it prefills */
    int32_t n_fed, n_gen;
    int32_t tokens[N_GEN_MAX]; /* greedy choices made from the shared context's logits */
    float *logits;             /* [N_GEN_MAX][n_vocab]: the logits each choice was made from */
} stream;

/* Four streams: a lone BOS from the first batch; a 9-token prompt prefilled 4 tokens a batch from the
 * second; from the third, a 5-token and a 14-token prompt prefilled whole, in the same batch as the
 * others' decode steps. Sequence ids are not the stream order. */
static void streams_init(stream *st, float *logits, int32_t n_vocab) {
    const stream init[N_STREAMS] = {
        {PROMPT_A, LEN(PROMPT_A), 3, 0, 1, 0, 0, {0}, NULL},
        {PROMPT_B, LEN(PROMPT_B), 0, 1, 4, 0, 0, {0}, NULL},
        {PROMPT_C, LEN(PROMPT_C), 2, 2, 5, 0, 0, {0}, NULL},
        {PROMPT_D, LEN(PROMPT_D), 1, 2, 14, 0, 0, {0}, NULL},
    };
    for (int k = 0; k < N_STREAMS; k++) {
        st[k] = init[k];
        st[k].logits = logits + (size_t)k * N_GEN_MAX * (size_t)n_vocab;
    }
}

/* Run the streams together in shared batches until each has n_gen greedy tokens. */
static bool run_interleaved(kiln_ctx *ctx, stream *st, int n, int32_t n_gen, int32_t n_vocab) {
    kiln_batch b;
    int32_t row[N_STREAMS];
    bool ok = true;
    CHECK_OK(kiln_batch_init(kiln_ctx_n_batch(ctx), &b));
    if (!b.token) return false;
    for (int step = 0; ok && step < 200; step++) {
        bool pending = false;
        kiln_batch_clear(&b);
        for (int k = 0; k < n; k++) {
            stream *s = &st[k];
            row[k] = -1;
            if (s->n_gen == n_gen) continue;
            pending = true;
            if (step < s->start) continue;
            if (s->n_fed < s->n_prompt) {
                int32_t end = s->n_fed + s->chunk < s->n_prompt ? s->n_fed + s->chunk : s->n_prompt;
                for (; s->n_fed < end; s->n_fed++) {
                    bool last = s->n_fed == s->n_prompt - 1;
                    CHECK_OK(kiln_batch_add(&b, s->prompt[s->n_fed], s->n_fed, s->seq, last));
                    if (last) row[k] = b.n_tokens - 1;
                }
            } else {
                CHECK_OK(
                    kiln_batch_add(&b, s->tokens[s->n_gen - 1], s->n_prompt + s->n_gen - 1, s->seq, true));
                row[k] = b.n_tokens - 1;
            }
        }
        if (!pending) break;
        if (b.n_tokens == 0) continue;
        kiln_status s = kiln_ctx_decode_batch(ctx, &b);
        CHECK_OK(s);
        if (s) ok = false;
        for (int k = 0; ok && k < n; k++) {
            if (row[k] < 0) continue;
            const float *l = kiln_ctx_logits(ctx, row[k]);
            CHECK(l != NULL);
            if (!l) {
                ok = false;
                break;
            }
            memcpy(st[k].logits + (size_t)st[k].n_gen * (size_t)n_vocab, l, (size_t)n_vocab * sizeof *l);
            st[k].tokens[st[k].n_gen++] = harness_argmax(l, n_vocab);
        }
    }
    kiln_batch_free(&b);
    return ok;
}

/* The stream alone in a fresh one-sequence context with the shared context's parameters, fed the same
 * tokens: the prompt, then each greedy token the shared run chose. Returns the worst difference. */
static double check_alone(const kiln_model *m, const kiln_ctx_params *shared, const stream *s, int32_t n_gen,
                          double tol, const char *what) {
    kiln_ctx_params p = *shared;
    kiln_ctx *ctx = NULL;
    const float *l = NULL;
    int32_t n_vocab = kiln_model_n_vocab(m);
    double worst = 0.0;
    p.n_seq_max = 1;
    CHECK_OK(kiln_ctx_create(m, &p, &ctx));
    if (!ctx) return INFINITY;
    CHECK_OK(kiln_ctx_decode(ctx, s->prompt, s->n_prompt, &l));
    for (int32_t g = 0; l && g < n_gen; g++) {
        if (!same_step(s->logits + (size_t)g * (size_t)n_vocab, l, n_vocab, s->tokens[g], tol, &worst, what,
                       g))
            break;
        if (g + 1 < n_gen && kiln_ctx_decode(ctx, &s->tokens[g], 1, &l) != KILN_OK) {
            harness_fail(__FILE__, __LINE__, "%s: decoding alone: %s", what, kiln_last_error());
            break;
        }
    }
    kiln_ctx_destroy(ctx);
    return worst;
}

/* The four streams interleaved in one context with params p, each checked against itself alone.
 * Returns false (printing why) when the context refuses p's KV-cache type. */
static bool interleaved_equals_alone(const kiln_model *m, const kiln_ctx_params *p, int32_t n_gen,
                                     const char *label) {
    int32_t n_vocab = kiln_model_n_vocab(m);
    float *logits = malloc((size_t)N_STREAMS * N_GEN_MAX * (size_t)n_vocab * sizeof *logits);
    stream st[N_STREAMS];
    kiln_ctx *ctx = NULL;
    double worst = 0.0, tol = kv_tolerance(p->kv_type);
    char what[160];
    kiln_status s;
    CHECK(logits != NULL);
    if (!logits) return false;
    s = kiln_ctx_create(m, p, &ctx);
    if (p->kv_type != KILN_TYPE_F32 && (s == KILN_E_UNSUPPORTED || s == KILN_E_INVALID_ARG)) {
        printf("  %s: skipped, the context refuses a %s cache: %s\n", label, kv_name(p->kv_type),
               kiln_last_error());
        free(logits);
        return false;
    }
    CHECK_OK(s);
    if (!ctx) {
        free(logits);
        return false;
    }
    streams_init(st, logits, n_vocab);
    if (run_interleaved(ctx, st, N_STREAMS, n_gen, n_vocab)) {
        for (int k = 0; k < N_STREAMS; k++) {
            snprintf(what, sizeof what, "%s, sequence %d (prompt of %d)", label, st[k].seq, st[k].n_prompt);
            CHECK_EQ_INT(st[k].n_gen, n_gen);
            worst = fmax(worst, check_alone(m, p, &st[k], n_gen, tol, what));
        }
    }
    printf("  %s: worst difference %.3g of the logit scale (tolerance %.3g)\n", label, worst, tol);
    kiln_ctx_destroy(ctx);
    free(logits);
    return true;
}

static kiln_ctx_params shared_params(int32_t n_ctx, kiln_type kv) {
    kiln_ctx_params p = harness_ctx_params();
    p.n_ctx = n_ctx;
    p.n_batch = 32; /* the largest shared batch holds 1 + 4 + 5 + 14 = 24 tokens */
    p.n_seq_max = 4;
    p.kv_type = kv;
    return p;
}

static void interleaved_sequences_equal_each_alone_at_every_cpu_level_and_kv_type(void) {
    kiln_model *m = NULL;
    int levels = 0;
    CHECK_OK(kiln_model_load(KILN_MODEL_PATH, &m));
    if (!m) return;
    for (int l = 0; l < N_LEVELS; l++) {
        if (kiln_set_cpu_level(LEVELS[l]) != KILN_OK || strcmp(kiln_get_cpu_level(), LEVELS[l]) != 0) {
            printf("  level %s: not on this CPU\n", LEVELS[l]);
            continue;
        }
        levels++;
        for (size_t k = 0; k < sizeof KV_TYPES / sizeof KV_TYPES[0]; k++) {
            char label[64];
            /* 29 prompt tokens and 4 * 11 decoded ones: 73 cells. */
            kiln_ctx_params p = shared_params(96, KV_TYPES[k]);
            snprintf(label, sizeof label, "level %s, kv %s", LEVELS[l], kv_name(KV_TYPES[k]));
            bool ran = interleaved_equals_alone(m, &p, 12, label);
            if (KV_TYPES[k] != KILN_TYPE_Q8_0) CHECK(ran); /* F32 and F16 work for every model */
        }
    }
    CHECK(levels >= 1); /* "ref" exists everywhere */
    CHECK_OK(kiln_set_cpu_level(NULL));
    kiln_model_destroy(m);
}

static void interleaved_on_arch(const char *name, kiln_type kv) {
    char rel[64], label[64];
    kiln_model *m = NULL;
    snprintf(rel, sizeof rel, "arch/%s.gguf", name);
    CHECK_OK(kiln_model_load(harness_data_path(rel), &m));
    if (!m) return;
    /* The models know 64 (gpt2) to 128 positions; 29 + 4 * 7 = 57 cells, positions up to 21. */
    kiln_ctx_params p = shared_params(64, kv);
    snprintf(label, sizeof label, "%s, kv %s", name, kv_name(kv));
    interleaved_equals_alone(m, &p, 8, label);
    kiln_model_destroy(m);
}

/* mistral.gguf attends over a window of 4 positions: the 14-token prompt reaches well past it, and the
 * window must follow each sequence's own positions, not the cells around it. */
static void interleaved_sequences_equal_alone_with_a_sliding_window(void) {
    interleaved_on_arch("mistral", KILN_TYPE_F32);
    interleaved_on_arch("mistral", KILN_TYPE_F16);
}

/* gpt2.gguf adds a learned position embedding: each token's row must come from its own position. */
static void interleaved_sequences_equal_alone_with_learned_positions(void) {
    interleaved_on_arch("gpt2", KILN_TYPE_F32);
    interleaved_on_arch("gpt2", KILN_TYPE_F16);
}

/* Its table has 64 rows: a sequence that forgot its first cell may go on, but not to position 64. */
static void a_position_past_the_learned_table_is_refused(void) {
    kiln_model *m = NULL;
    kiln_ctx *ctx;
    int32_t toks[64];
    const float *l = NULL;
    CHECK_OK(kiln_model_load(harness_data_path("arch/gpt2.gguf"), &m));
    if (!m) return;
    CHECK_EQ_INT(kiln_model_n_ctx_train(m), 64);
    ctx = make_ctx(m, 64, 64, 1);
    if (!ctx) goto done;
    for (int32_t i = 0; i < 64; i++)
        toks[i] = 1 + (i * 37) % 300;
    CHECK_OK(kiln_ctx_decode(ctx, toks, 64, &l));
    CHECK_OK(kiln_kv_seq_rm(ctx, 0, 0, 1));
    CHECK_EQ_INT(kiln_kv_n_used(ctx), 63);
    {
        kiln_status s = decode_run(ctx, toks, 1, 64, 0);
        CHECK(s == KILN_E_INVALID_ARG || s == KILN_E_RANGE);
        CHECK_ERROR_MENTIONS("position 64");
    }
    CHECK_EQ_INT(kiln_kv_n_used(ctx), 63);
    CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 0), 63);
done:
    kiln_ctx_destroy(ctx);
    kiln_model_destroy(m);
}

/* The other families: QK norms (qwen3), biases (qwen2), Llama 3 rope scaling, partial rotary (phi3). */
static void interleaved_sequences_equal_alone_for_the_other_architectures(void) {
    static const char *const names[] = {"qwen2", "qwen3", "llama3", "phi3"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        interleaved_on_arch(names[i], KILN_TYPE_F32);
}

/* ---------------------------------------------------------------------------------------------------
 * seq_cp, seq_rm, seq_keep, pos_max, reset
 * ------------------------------------------------------------------------------------------------- */

/* A cold one-sequence run of `prefix` then each of `fed`, compared step by step with the logits
 * `got[g]` (g = 0: after the prefix) from which tokens[g] was chosen. */
static void check_cold(const kiln_model *m, const int32_t *prefix, int32_t n_prefix, const int32_t *tokens,
                       const float *got, int32_t n_steps, const char *what) {
    kiln_ctx *ctx = make_ctx(m, 64, 0, 1);
    int32_t n_vocab = kiln_model_n_vocab(m);
    const float *l = NULL;
    double worst = 0.0;
    if (!ctx) return;
    CHECK_OK(kiln_ctx_decode(ctx, prefix, n_prefix, &l));
    for (int32_t g = 0; l && g < n_steps; g++) {
        if (!same_step(got + (size_t)g * (size_t)n_vocab, l, n_vocab, tokens[g], kv_tolerance(KILN_TYPE_F32),
                       &worst, what, g))
            break;
        if (g + 1 < n_steps && kiln_ctx_decode(ctx, &tokens[g], 1, &l) != KILN_OK) {
            harness_fail(__FILE__, __LINE__, "%s: cold run: %s", what, kiln_last_error());
            break;
        }
    }
    kiln_ctx_destroy(ctx);
}

#define CP_STEPS 6

/* Sequence 0 holds PROMPT_D (14 tokens). Sequence 1 receives its first 8 positions by seq_cp and goes on
 * with a suffix of its own; sequence 2 receives all of it and goes on with a token greedy would not pick.
 * Each, and sequence 0 itself, then decodes greedily in shared batches and must equal a cold run. */
static void seq_cp_shares_a_prefix_that_continues_like_a_cold_run(void) {
    static const int32_t suffix[4] = {300, 41, 77, 12};
    kiln_model *m = NULL;
    kiln_ctx *ctx;
    kiln_batch b;
    int32_t n_vocab, tok[3][CP_STEPS], pos[3], forced = -1;
    float *got;
    CHECK_OK(kiln_model_load(KILN_MODEL_PATH, &m));
    if (!m) return;
    n_vocab = kiln_model_n_vocab(m);
    ctx = make_ctx(m, 64, 16, 3);
    got = malloc((size_t)3 * CP_STEPS * (size_t)n_vocab * sizeof *got);
    CHECK(got != NULL);
    CHECK_OK(kiln_batch_init(16, &b));
    if (!ctx || !got || !b.token) goto done;

    CHECK_OK(decode_run(ctx, PROMPT_D, LEN(PROMPT_D), 0, 0));
    const float *l = kiln_ctx_logits(ctx, -1);
    CHECK(l != NULL);
    if (!l) goto done;
    memcpy(got, l, (size_t)n_vocab * sizeof *l);
    tok[0][0] = harness_argmax(l, n_vocab);
    forced = (tok[0][0] + 1) % n_vocab; /* not greedy's choice */
    CHECK_EQ_INT(kiln_kv_n_used(ctx), 14);

    CHECK_OK(kiln_kv_seq_cp(ctx, 0, 1, 0, 8));
    CHECK_EQ_INT(kiln_kv_n_used(ctx), 14); /* shared, not copied */
    CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 1), 7);
    CHECK_OK(kiln_kv_seq_cp(ctx, 0, 2, -1, -1));
    CHECK_EQ_INT(kiln_kv_n_used(ctx), 14);
    CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 2), 13);
    CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 0), 13);

    /* First shared batch: 0 decodes its greedy token, 1 its 4-token suffix, 2 the forced fork token. */
    kiln_batch_clear(&b);
    CHECK_OK(kiln_batch_add(&b, tok[0][0], 14, 0, true));
    for (int32_t i = 0; i < 4; i++)
        CHECK_OK(kiln_batch_add(&b, suffix[i], 8 + i, 1, i == 3));
    CHECK_OK(kiln_batch_add(&b, forced, 14, 2, true));
    CHECK_OK(kiln_ctx_decode_batch(ctx, &b));
    CHECK_EQ_INT(kiln_kv_n_used(ctx), 14 + 6);
    pos[0] = 15;
    pos[1] = 12;
    pos[2] = 15;
    {
        const int rows[3] = {0, 4, 5};
        for (int s = 0; s < 3; s++) {
            const float *r = kiln_ctx_logits(ctx, rows[s]);
            CHECK(r != NULL);
            if (!r) goto done;
            float *dst = got + ((size_t)s * CP_STEPS + (s == 0 ? 1 : 0)) * (size_t)n_vocab;
            memcpy(dst, r, (size_t)n_vocab * sizeof *r);
            tok[s][s == 0 ? 1 : 0] = harness_argmax(r, n_vocab);
        }
    }
    /* Then all three decode greedily together: sequence 0 has 2 choices so far, 1 and 2 have 1. */
    for (int32_t step = 1; step < CP_STEPS; step++) {
        kiln_batch_clear(&b);
        for (int s = 0; s < 3; s++) {
            int32_t have = s == 0 ? step + 1 : step;
            if (have >= CP_STEPS) continue;
            CHECK_OK(kiln_batch_add(&b, tok[s][have - 1], pos[s]++, s, true));
        }
        if (b.n_tokens == 0) break;
        CHECK_OK(kiln_ctx_decode_batch(ctx, &b));
        for (int s = 0, row = 0; s < 3; s++) {
            int32_t have = s == 0 ? step + 1 : step;
            if (have >= CP_STEPS) continue;
            const float *r = kiln_ctx_logits(ctx, row++);
            CHECK(r != NULL);
            if (!r) goto done;
            memcpy(got + ((size_t)s * CP_STEPS + (size_t)have) * (size_t)n_vocab, r,
                   (size_t)n_vocab * sizeof *r);
            tok[s][have] = harness_argmax(r, n_vocab);
        }
    }
    CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 0), 14 + CP_STEPS - 2);

    {
        int32_t cold1[12], cold2[15];
        memcpy(cold1, PROMPT_D, 8 * sizeof *cold1);
        memcpy(cold1 + 8, suffix, sizeof suffix);
        memcpy(cold2, PROMPT_D, sizeof PROMPT_D);
        cold2[14] = forced;
        check_cold(m, PROMPT_D, LEN(PROMPT_D), tok[0], got, CP_STEPS, "sequence 0 (the source)");
        check_cold(m, cold1, 12, tok[1], got + (size_t)CP_STEPS * (size_t)n_vocab, CP_STEPS,
                   "sequence 1 (8 positions shared, then its own suffix)");
        check_cold(m, cold2, 15, tok[2], got + (size_t)2 * CP_STEPS * (size_t)n_vocab, CP_STEPS,
                   "sequence 2 (all shared, then a forced token)");
    }
done:
    kiln_batch_free(&b);
    free(got);
    kiln_ctx_destroy(ctx);
    kiln_model_destroy(m);
}

#define RM_STEPS 6

/* Prefill PROMPT_B and decode 6 greedy steps, keeping every logit vector; forget positions 7.. (the
 * prompt's last two tokens and everything decoded) and decode them again: the same logits (within the
 * batch-shape tolerance: the second prefill is a 2-token batch) and the same greedy tokens. The tail is
 * forgotten once as [7, -1) and once as [7, pos_max + 1). */
static void seq_rm_of_a_tail_then_decoding_it_again_repeats_the_first_run(void) {
    kiln_model *m = NULL;
    kiln_ctx *ctx;
    int32_t n_vocab, tok[RM_STEPS], tok2[RM_STEPS];
    float *first = NULL, *again = NULL;
    const float *l = NULL;
    CHECK_OK(kiln_model_load(KILN_MODEL_PATH, &m));
    if (!m) return;
    n_vocab = kiln_model_n_vocab(m);
    ctx = make_ctx(m, 64, 16, 2);
    first = malloc((size_t)RM_STEPS * (size_t)n_vocab * sizeof *first);
    again = malloc((size_t)RM_STEPS * (size_t)n_vocab * sizeof *again);
    CHECK(first && again);
    if (!ctx || !first || !again) goto done;

    CHECK_OK(kiln_ctx_decode(ctx, PROMPT_B, LEN(PROMPT_B), &l));
    for (int32_t g = 0; l && g < RM_STEPS; g++) {
        memcpy(first + (size_t)g * (size_t)n_vocab, l, (size_t)n_vocab * sizeof *l);
        tok[g] = harness_argmax(l, n_vocab);
        if (g + 1 < RM_STEPS) CHECK_OK(kiln_ctx_decode(ctx, &tok[g], 1, &l));
    }
    if (!l) goto done;
    CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 0), 9 + RM_STEPS - 2);

    for (int form = 0; form < 2; form++) {
        double worst = 0.0;
        int32_t p1 = form == 0 ? -1 : kiln_kv_seq_pos_max(ctx, 0) + 1;
        CHECK_OK(kiln_kv_seq_rm(ctx, 0, 7, p1));
        CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 0), 6);
        CHECK_EQ_INT(kiln_kv_n_used(ctx), 7);
        CHECK_EQ_INT(kiln_ctx_n_past(ctx), 7);
        CHECK_OK(kiln_ctx_decode(ctx, PROMPT_B + 7, 2, &l));
        for (int32_t g = 0; l && g < RM_STEPS; g++) {
            memcpy(again + (size_t)g * (size_t)n_vocab, l, (size_t)n_vocab * sizeof *l);
            tok2[g] = harness_argmax(l, n_vocab);
            if (!same_step(again + (size_t)g * (size_t)n_vocab, first + (size_t)g * (size_t)n_vocab, n_vocab,
                           tok2[g], kv_tolerance(KILN_TYPE_F32), &worst, form ? "rm [7, end)" : "rm [7, -1)",
                           g))
                break;
            CHECK_EQ_INT(tok2[g], tok[g]);
            if (g + 1 < RM_STEPS) CHECK_OK(kiln_ctx_decode(ctx, &tok2[g], 1, &l));
        }
        CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 0), 9 + RM_STEPS - 2);
        CHECK_EQ_INT(kiln_kv_n_used(ctx), 9 + RM_STEPS - 1);
    }
done:
    free(first);
    free(again);
    kiln_ctx_destroy(ctx);
    kiln_model_destroy(m);
}

/* seq_rm in the middle leaves the rest: pos_max and n_used follow, and the sequence continues after its
 * largest position; seq -1 forgets the range in every sequence. */
static void seq_rm_of_a_middle_range_and_of_every_sequence(void) {
    kiln_model *m = NULL;
    kiln_ctx *ctx;
    CHECK_OK(kiln_model_load(KILN_MODEL_PATH, &m));
    if (!m) return;
    ctx = make_ctx(m, 32, 16, 2);
    if (!ctx) goto done;
    CHECK_OK(decode_run(ctx, PROMPT_B, 9, 0, 0));
    CHECK_OK(decode_run(ctx, PROMPT_C, 5, 0, 1));
    CHECK_OK(kiln_kv_seq_rm(ctx, 0, 2, 5));
    CHECK_EQ_INT(kiln_kv_n_used(ctx), 14 - 3);
    CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 0), 8);
    CHECK_OK(decode_run(ctx, PROMPT_C, 1, 9, 0)); /* continues after 8, not at the hole */
    CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 0), 9);
    CHECK_OK(kiln_kv_seq_rm(ctx, -1, 3, -1)); /* 0 keeps 0..1, 1 keeps 0..2 */
    CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 0), 1);
    CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 1), 2);
    CHECK_EQ_INT(kiln_kv_n_used(ctx), 5);
    CHECK_OK(kiln_kv_seq_rm(ctx, 1, -1, -1));
    CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 1), -1);
    CHECK_EQ_INT(kiln_kv_n_used(ctx), 2);
    CHECK_OK(kiln_kv_seq_rm(ctx, 0, 100, 200)); /* nothing there: not an error */
    CHECK_EQ_INT(kiln_kv_n_used(ctx), 2);
done:
    kiln_ctx_destroy(ctx);
    kiln_model_destroy(m);
}

static void seq_keep_forgets_the_others_pos_max_tracks_and_reset_empties(void) {
    kiln_model *m = NULL;
    kiln_ctx *ctx, *fresh;
    kiln_batch b;
    const float *l = NULL, *lf = NULL;
    CHECK_OK(kiln_model_load(KILN_MODEL_PATH, &m));
    if (!m) return;
    ctx = make_ctx(m, 32, 16, 3);
    fresh = make_ctx(m, 32, 16, 1);
    CHECK_OK(kiln_batch_init(16, &b));
    if (!ctx || !fresh || !b.token) goto done;
    CHECK_EQ_INT(kiln_ctx_n_ctx(ctx), 32);
    CHECK_EQ_INT(kiln_ctx_n_batch(ctx), 16);
    CHECK_EQ_INT(kiln_ctx_n_seq_max(ctx), 3);
    for (int32_t s = 0; s < 3; s++)
        CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, s), -1);
    CHECK_EQ_INT(kiln_kv_n_used(ctx), 0);
    CHECK_EQ_INT(kiln_ctx_n_past(ctx), 0);

    /* One batch: 5 tokens of 0, 3 of 1, 4 of 2, interleaved token by token. */
    for (int32_t i = 0; i < 5; i++)
        for (int32_t s = 0; s < 3; s++)
            if (i < (s == 0 ? 5 : s == 1 ? 3 : 4)) CHECK_OK(kiln_batch_add(&b, PROMPT_D[i + s], i, s, false));
    CHECK_OK(kiln_ctx_decode_batch(ctx, &b));
    CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 0), 4);
    CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 1), 2);
    CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 2), 3);
    CHECK_EQ_INT(kiln_kv_n_used(ctx), 12);
    CHECK_EQ_INT(kiln_ctx_n_past(ctx), 5);
    CHECK(kiln_ctx_logits(ctx, -1) == NULL); /* no token asked for logits */
    CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, -1), -1);
    CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 3), -1);

    /* kiln_ctx_decode appends to sequence 0 only. */
    CHECK_OK(kiln_ctx_decode(ctx, PROMPT_C, 2, &l));
    CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 0), 6);
    CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 1), 2);
    CHECK_EQ_INT(kiln_ctx_n_past(ctx), 7);
    CHECK_EQ_INT(kiln_kv_n_used(ctx), 14);

    CHECK_OK(kiln_kv_seq_keep(ctx, 1));
    CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 0), -1);
    CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 1), 2);
    CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 2), -1);
    CHECK_EQ_INT(kiln_kv_n_used(ctx), 3);
    CHECK_EQ_INT(kiln_ctx_n_past(ctx), 0);

    /* Cells shared with a forgotten sequence stay with the kept one. */
    CHECK_OK(kiln_kv_seq_cp(ctx, 1, 0, -1, -1));
    CHECK_OK(kiln_kv_seq_keep(ctx, 0));
    CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 0), 2);
    CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 1), -1);
    CHECK_EQ_INT(kiln_kv_n_used(ctx), 3);
    CHECK_EQ_INT(kiln_ctx_n_past(ctx), 3);

    /* Reset: everything gone, and sequence 0 starts over at position 0 like a fresh context. */
    kiln_ctx_reset(ctx);
    CHECK_EQ_INT(kiln_kv_n_used(ctx), 0);
    for (int32_t s = 0; s < 3; s++)
        CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, s), -1);
    CHECK_EQ_INT(kiln_ctx_n_past(ctx), 0);
    CHECK_OK(kiln_ctx_decode(ctx, PROMPT_B, LEN(PROMPT_B), &l));
    CHECK_OK(kiln_ctx_decode(fresh, PROMPT_B, LEN(PROMPT_B), &lf));
    check_logits_close(l, lf, kiln_model_n_vocab(m), SAME_STATE_TOL, "after reset vs a fresh context");
done:
    kiln_batch_free(&b);
    kiln_ctx_destroy(ctx);
    kiln_ctx_destroy(fresh);
    kiln_model_destroy(m);
}

/* ---------------------------------------------------------------------------------------------------
 * The model's shared state, allocations
 * ------------------------------------------------------------------------------------------------- */

/* stories260K in Q8_0 (its ffn_down falls back to F16): the avx512 and amx levels repack both types
 * (backend/cpu/x86/avx512_packed.c, avx512_half.c, amx_mm.c); the reference level repacks nothing. */
static void two_contexts_on_one_model_share_one_prepared_copy_of_the_weights(void) {
    kiln_quantize_params qp = kiln_quantize_params_default();
    const char *path = TEMP("stories260K_q8_0.gguf");
    qp.mix = KILN_MIX_Q8_0;
    CHECK_OK(kiln_quantize_file(KILN_MODEL_PATH, path, &qp, NULL, NULL));
    for (int lv = 0; lv < N_LEVELS; lv++) {
        kiln_model *m = NULL;
        kiln_ctx *a = NULL, *b = NULL;
        kiln_model_memory after_a, after_b;
        const float *la = NULL, *lb = NULL;
        float *keep = NULL;
        int32_t tok;
        if (kiln_set_cpu_level(LEVELS[lv]) != KILN_OK || strcmp(kiln_get_cpu_level(), LEVELS[lv]) != 0)
            continue;
        CHECK_OK(kiln_model_load(path, &m));
        if (!m) continue;
        a = make_ctx(m, 64, 16, 2);
        b = make_ctx(m, 64, 16, 2);
        keep = malloc((size_t)kiln_model_n_vocab(m) * sizeof *keep);
        if (!a || !b || !keep) goto next;
        /* A prefill and a decode step, so that both batch shapes have run. */
        CHECK_OK(kiln_ctx_decode(a, PROMPT_D, LEN(PROMPT_D), &la));
        if (!la) goto next;
        tok = harness_argmax(la, kiln_model_n_vocab(m));
        CHECK_OK(kiln_ctx_decode(a, &tok, 1, &la));
        if (!la) goto next;
        memcpy(keep, la, (size_t)kiln_model_n_vocab(m) * sizeof *keep);
        CHECK_OK(kiln_model_memory_info(m, &after_a));
        CHECK_OK(kiln_ctx_decode(b, PROMPT_D, LEN(PROMPT_D), &lb));
        CHECK_OK(kiln_ctx_decode(b, &tok, 1, &lb));
        CHECK_OK(kiln_model_memory_info(m, &after_b));
        printf("  level %s: %d weights prepared, %llu bytes\n", LEVELS[lv], after_a.n_prepared,
               (unsigned long long)after_a.prepared_bytes);
        CHECK_EQ_INT(after_b.n_prepared, after_a.n_prepared);
        CHECK_EQ_INT(after_b.prepared_bytes, after_a.prepared_bytes);
        CHECK_EQ_INT(after_b.file_bytes, after_a.file_bytes);
        if (!strcmp(LEVELS[lv], "avx512") || !strcmp(LEVELS[lv], "amx")) {
            CHECK(after_a.n_prepared > 0);
            CHECK(after_a.prepared_bytes > 0);
        }
        if (after_a.n_prepared == 0) CHECK_EQ_INT(after_a.prepared_bytes, 0);
        check_logits_close(lb, keep, kiln_model_n_vocab(m), SAME_STATE_TOL, "context B vs context A");
    next:
        free(keep);
        kiln_ctx_destroy(a);
        kiln_ctx_destroy(b);
        kiln_model_destroy(m);
    }
    CHECK_OK(kiln_set_cpu_level(NULL));
    remove(path);
}

/* One greedy step for sequences 0 .. n_seqs - 1, each at pos[s] with last token tok[s]. */
static kiln_status greedy_step(kiln_ctx *ctx, kiln_batch *b, int32_t n_seqs, int32_t *tok, int32_t *pos,
                               int32_t n_vocab) {
    kiln_status s;
    kiln_batch_clear(b);
    for (int32_t q = 0; q < n_seqs; q++)
        if ((s = kiln_batch_add(b, tok[q], pos[q], q, true))) return s;
    if ((s = kiln_ctx_decode_batch(ctx, b))) return s;
    for (int32_t q = 0; q < n_seqs; q++) {
        const float *l = kiln_ctx_logits(ctx, q);
        if (!l) return KILN_E_INTERNAL;
        tok[q] = harness_argmax(l, n_vocab);
        pos[q]++;
    }
    return KILN_OK;
}

static void a_warmed_up_step_allocates_nothing_with_one_and_with_four_sequences(void) {
    kiln_model *m = NULL;
    kiln_ctx *ctx = NULL;
    kiln_batch b = {0};
    int32_t tok[4] = {1, 1, 1, 1}, pos[4] = {0, 0, 0, 0}, n_vocab;
    long one = -1, four = -1;
    harness_count_allocations();
    CHECK_OK(kiln_model_load(KILN_MODEL_PATH, &m));
    if (!m) goto done;
    n_vocab = kiln_model_n_vocab(m);
    ctx = make_ctx(m, 128, 16, 4);
    CHECK_OK(kiln_batch_init(16, &b));
    if (!ctx || !b.token) goto done;
    /* Warm-up: each shape once. Seq 0 then holds 2 positions, the others 1. */
    CHECK_OK(greedy_step(ctx, &b, 1, tok, pos, n_vocab));
    CHECK_OK(greedy_step(ctx, &b, 4, tok, pos, n_vocab));
    harness_zero_allocations();
    for (int i = 0; i < 20; i++)
        CHECK_OK(greedy_step(ctx, &b, 1, tok, pos, n_vocab));
    one = harness_allocations();
    harness_zero_allocations();
    for (int i = 0; i < 20; i++)
        CHECK_OK(greedy_step(ctx, &b, 4, tok, pos, n_vocab));
    four = harness_allocations();
    CHECK_EQ_INT(one, 0);
    CHECK_EQ_INT(four, 0);
    CHECK_EQ_INT(kiln_kv_n_used(ctx), 42 + 3 * 21); /* 0: 1 + 1 + 20 + 20 positions; 1..3: 1 + 20 */
done:
    kiln_batch_free(&b);
    kiln_ctx_destroy(ctx);
    kiln_model_destroy(m);
    kiln_set_allocator(NULL);
}

/* KILN_SEQ_MAX sequences at once, one token each: the last id works like the first (each sees only its
 * own cell, so every row equals row 0), and keep/cp/rm reach it. One more sequence, or a negative count,
 * is refused when the context is made. */
static void kiln_seq_max_sequences_work_and_one_more_is_refused(void) {
    kiln_model *m = NULL;
    kiln_ctx *ctx = NULL;
    kiln_ctx_params p = harness_ctx_params();
    kiln_batch b = {0};
    int32_t n_vocab;
    CHECK_OK(kiln_model_load(KILN_MODEL_PATH, &m));
    if (!m) return;
    n_vocab = kiln_model_n_vocab(m);
    p.n_ctx = 128;
    p.n_seq_max = KILN_SEQ_MAX + 1;
    CHECK_STATUS(kiln_ctx_create(m, &p, &ctx), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("n_seq_max");
    CHECK(ctx == NULL);
    p.n_seq_max = -1;
    CHECK_STATUS(kiln_ctx_create(m, &p, &ctx), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("n_seq_max");
    p.n_seq_max = 1;
    p.n_batch = -1;
    CHECK_STATUS(kiln_ctx_create(m, &p, &ctx), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("n_batch");
    p.n_batch = 0;
    p.n_ctx = -1;
    CHECK_STATUS(kiln_ctx_create(m, &p, &ctx), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("n_ctx");
    kiln_ctx_destroy(ctx);

    ctx = make_ctx(m, 128, KILN_SEQ_MAX, KILN_SEQ_MAX);
    CHECK_OK(kiln_batch_init(KILN_SEQ_MAX, &b));
    if (!ctx || !b.token) goto done;
    CHECK_EQ_INT(kiln_ctx_n_seq_max(ctx), KILN_SEQ_MAX);
    for (int32_t s = 0; s < KILN_SEQ_MAX; s++)
        CHECK_OK(kiln_batch_add(&b, 300, 0, s, true));
    CHECK_OK(kiln_ctx_decode_batch(ctx, &b));
    CHECK_EQ_INT(kiln_kv_n_used(ctx), KILN_SEQ_MAX);
    CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, KILN_SEQ_MAX - 1), 0);
    CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, KILN_SEQ_MAX), -1);
    for (int32_t s = 1; s < KILN_SEQ_MAX; s += 31) {
        char what[64];
        snprintf(what, sizeof what, "sequence %d against sequence 0", s);
        check_logits_close(kiln_ctx_logits(ctx, s), kiln_ctx_logits(ctx, 0), n_vocab,
                           kv_tolerance(KILN_TYPE_F32), what);
    }
    CHECK_OK(kiln_kv_seq_keep(ctx, KILN_SEQ_MAX - 1));
    CHECK_EQ_INT(kiln_kv_n_used(ctx), 1);
    CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 0), -1);
    CHECK_OK(kiln_kv_seq_cp(ctx, KILN_SEQ_MAX - 1, 0, -1, -1));
    CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 0), 0);
    CHECK_OK(kiln_kv_seq_rm(ctx, KILN_SEQ_MAX - 1, -1, -1));
    CHECK_EQ_INT(kiln_kv_n_used(ctx), 1); /* sequence 0 still holds the cell */
    CHECK_OK(kiln_kv_seq_rm(ctx, -1, -1, -1));
    CHECK_EQ_INT(kiln_kv_n_used(ctx), 0);
done:
    kiln_batch_free(&b);
    kiln_ctx_destroy(ctx);
    kiln_model_destroy(m);
}

typedef struct abort_state {
    int32_t calls;
    int32_t stop_after; /* return true from this call on (counting from 0); -1: never, and no counting */
} abort_state;

static bool abort_after(void *user) {
    abort_state *a = user;
    return a->stop_after >= 0 && a->calls++ >= a->stop_after;
}

/* kiln_ctx_decode splits n tokens into batches of n_batch: 14 tokens through n_batch 4 equal them in one
 * batch (within the batch-shape tolerance). When a later chunk fails (the abort callback stops the second
 * one), the earlier chunks are taken back: the cache is as before the call. */
static void the_wrapper_splits_into_n_batch_chunks_and_a_failure_takes_them_all_back(void) {
    kiln_model *m = NULL;
    kiln_ctx *small = NULL, *one = NULL;
    kiln_ctx_params p = harness_ctx_params();
    abort_state st = {0, -1};
    const float *ls = NULL, *l1 = NULL;
    int32_t n_vocab, per_chunk;
    float *keep = NULL;
    CHECK_OK(kiln_model_load(KILN_MODEL_PATH, &m));
    if (!m) return;
    n_vocab = kiln_model_n_vocab(m);
    p.n_ctx = 32;
    p.n_batch = 4;
    p.abort_fn = abort_after;
    p.abort_user = &st;
    CHECK_OK(kiln_ctx_create(m, &p, &small));
    one = make_ctx(m, 32, 32, 1);
    keep = malloc((size_t)n_vocab * sizeof *keep);
    if (!small || !one || !keep) goto done;
    CHECK_OK(kiln_ctx_decode(small, PROMPT_D, LEN(PROMPT_D), &ls));
    CHECK_OK(kiln_ctx_decode(one, PROMPT_D, LEN(PROMPT_D), &l1));
    check_logits_close(ls, l1, n_vocab, kv_tolerance(KILN_TYPE_F32),
                       "14 tokens in chunks of 4 vs in one batch");
    if (!l1) goto done;
    memcpy(keep, l1, (size_t)n_vocab * sizeof *keep);
    CHECK_EQ_INT(kiln_ctx_n_past(small), 14);

    /* Count the callbacks of one 4-token chunk, then stop the second chunk of a 10-token call. */
    kiln_ctx_reset(small);
    st.calls = 0;
    st.stop_after = INT32_MAX;
    CHECK_OK(kiln_ctx_decode(small, PROMPT_D, 4, &ls));
    per_chunk = st.calls;
    CHECK(per_chunk > 0);
    st.calls = 0;
    st.stop_after = per_chunk + 1;
    CHECK_STATUS(kiln_ctx_decode(small, PROMPT_D + 4, 10, &ls), KILN_E_ABORTED);
    CHECK(ls == NULL);
    CHECK(st.calls > per_chunk + 1);
    CHECK_EQ_INT(kiln_ctx_n_past(small), 4);
    CHECK_EQ_INT(kiln_kv_n_used(small), 4);
    st.stop_after = -1;
    CHECK_OK(kiln_ctx_decode(small, PROMPT_D + 4, 10, &ls));
    check_logits_close(ls, keep, n_vocab, kv_tolerance(KILN_TYPE_F32),
                       "after the aborted call, vs in one batch");
    CHECK_EQ_INT(kiln_kv_n_used(small), 14);
done:
    free(keep);
    kiln_ctx_destroy(small);
    kiln_ctx_destroy(one);
    kiln_model_destroy(m);
}

/* ---------------------------------------------------------------------------------------------------
 * Refusals
 * ------------------------------------------------------------------------------------------------- */

/* The cache of the validation context: sequence 0 holds positions 0..3, sequence 1 nothing. */
#define CHECK_UNCHANGED(ctx)                                                                                 \
    do {                                                                                                     \
        CHECK_EQ_INT(kiln_kv_n_used(ctx), 4);                                                                \
        CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 0), 3);                                                        \
        CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 1), -1);                                                       \
    } while (0)

/* Fill b with n tokens given as (token, pos, seq) triples. */
static void batch_set(kiln_batch *b, int32_t n, const int32_t (*tps)[3]) {
    kiln_batch_clear(b);
    for (int32_t i = 0; i < n; i++)
        CHECK_OK(kiln_batch_add(b, tps[i][0], tps[i][1], tps[i][2], true));
}

static void invalid_batches_are_refused_with_named_errors_and_change_nothing(void) {
    kiln_model *m = NULL;
    kiln_ctx *ctx;
    kiln_batch b;
    CHECK_OK(kiln_model_load(KILN_MODEL_PATH, &m));
    if (!m) return;
    ctx = make_ctx(m, 16, 8, 2);
    CHECK_OK(kiln_batch_init(16, &b));
    if (!ctx || !b.token) goto done;
    CHECK_OK(decode_run(ctx, PROMPT_B, 4, 0, 0));
    CHECK_UNCHANGED(ctx);

    CHECK_STATUS(kiln_ctx_decode_batch(NULL, &b), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("NULL");
    CHECK_STATUS(kiln_ctx_decode_batch(ctx, NULL), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("NULL");

    kiln_batch_clear(&b);
    CHECK_STATUS(kiln_ctx_decode_batch(ctx, &b), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("0 tokens");
    CHECK_UNCHANGED(ctx);

    for (int32_t i = 0; i < 9; i++)
        CHECK_OK(kiln_batch_add(&b, PROMPT_D[i], i, 1, false));
    CHECK_STATUS(kiln_ctx_decode_batch(ctx, &b), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("n_batch");
    CHECK_UNCHANGED(ctx);

    {
        static const int32_t big_token[2][3] = {{300, 4, 0}, {512, 0, 1}};
        static const int32_t neg_token[2][3] = {{-1, 4, 0}, {300, 0, 1}};
        batch_set(&b, 2, big_token);
        CHECK_STATUS(kiln_ctx_decode_batch(ctx, &b), KILN_E_INVALID_ARG);
        CHECK_ERROR_MENTIONS("token 512");
        CHECK_ERROR_MENTIONS("vocabulary");
        CHECK_UNCHANGED(ctx);
        batch_set(&b, 2, neg_token);
        CHECK_STATUS(kiln_ctx_decode_batch(ctx, &b), KILN_E_INVALID_ARG);
        CHECK_ERROR_MENTIONS("token -1");
        CHECK_UNCHANGED(ctx);
    }
    {
        static const int32_t seq_neg[2][3] = {{300, 4, 0}, {300, 0, -1}};
        static const int32_t seq_big[2][3] = {{300, 4, 0}, {300, 0, 2}};
        batch_set(&b, 2, seq_neg);
        CHECK_STATUS(kiln_ctx_decode_batch(ctx, &b), KILN_E_INVALID_ARG);
        CHECK_ERROR_MENTIONS("sequence id -1");
        CHECK_UNCHANGED(ctx);
        batch_set(&b, 2, seq_big);
        CHECK_STATUS(kiln_ctx_decode_batch(ctx, &b), KILN_E_INVALID_ARG);
        CHECK_ERROR_MENTIONS("sequence id 2");
        CHECK_UNCHANGED(ctx);
    }
    {
        static const int32_t gap[2][3] = {{300, 5, 0}, {300, 0, 1}};    /* 0 continues at 4 */
        static const int32_t repeat[2][3] = {{300, 0, 1}, {300, 3, 0}}; /* 0 holds 3 */
        static const int32_t negative[1][3] = {{300, -1, 1}};
        static const int32_t gap_new[1][3] = {{300, 1, 1}};                         /* 1 starts at 0 */
        static const int32_t order[2][3] = {{300, 1, 1}, {300, 0, 1}};              /* out of order */
        static const int32_t twice[3][3] = {{300, 0, 1}, {300, 4, 0}, {300, 0, 1}}; /* one position twice */
        static const int32_t late_gap[3][3] = {{300, 4, 0}, {300, 5, 0}, {300, 7, 0}};
        batch_set(&b, 2, gap);
        CHECK_STATUS(kiln_ctx_decode_batch(ctx, &b), KILN_E_INVALID_ARG);
        CHECK_ERROR_MENTIONS("position 5");
        CHECK_UNCHANGED(ctx);
        batch_set(&b, 2, repeat);
        CHECK_STATUS(kiln_ctx_decode_batch(ctx, &b), KILN_E_INVALID_ARG);
        CHECK_ERROR_MENTIONS("position 3");
        CHECK_UNCHANGED(ctx);
        batch_set(&b, 1, negative);
        CHECK_STATUS(kiln_ctx_decode_batch(ctx, &b), KILN_E_INVALID_ARG);
        CHECK_ERROR_MENTIONS("position -1");
        CHECK_UNCHANGED(ctx);
        batch_set(&b, 1, gap_new);
        CHECK_STATUS(kiln_ctx_decode_batch(ctx, &b), KILN_E_INVALID_ARG);
        CHECK_ERROR_MENTIONS("position 1");
        CHECK_UNCHANGED(ctx);
        batch_set(&b, 2, order);
        CHECK_STATUS(kiln_ctx_decode_batch(ctx, &b), KILN_E_INVALID_ARG);
        CHECK_ERROR_MENTIONS("position 1");
        CHECK_UNCHANGED(ctx);
        batch_set(&b, 3, twice);
        CHECK_STATUS(kiln_ctx_decode_batch(ctx, &b), KILN_E_INVALID_ARG);
        CHECK_ERROR_MENTIONS("position 0");
        CHECK_UNCHANGED(ctx);
        batch_set(&b, 3, late_gap);
        CHECK_STATUS(kiln_ctx_decode_batch(ctx, &b), KILN_E_INVALID_ARG);
        CHECK_ERROR_MENTIONS("position 7");
        CHECK_UNCHANGED(ctx);
    }

    /* Logits exist only for the tokens that asked: here token 1 (of sequence 1) only. */
    kiln_batch_clear(&b);
    CHECK_OK(kiln_batch_add(&b, 300, 0, 1, false));
    CHECK_OK(kiln_batch_add(&b, 301, 1, 1, true));
    CHECK_OK(kiln_batch_add(&b, 302, 4, 0, false));
    CHECK_OK(kiln_ctx_decode_batch(ctx, &b));
    CHECK(kiln_ctx_logits(ctx, 0) == NULL);
    CHECK(kiln_last_error()[0] != '\0');
    CHECK(kiln_ctx_logits(ctx, 2) == NULL);
    CHECK(kiln_ctx_logits(ctx, 3) == NULL);  /* past the batch */
    CHECK(kiln_ctx_logits(ctx, -2) == NULL); /* only one token asked */
    CHECK(kiln_ctx_logits(ctx, 100) == NULL);
    {
        const float *one = kiln_ctx_logits(ctx, 1), *last = kiln_ctx_logits(ctx, -1);
        CHECK(one != NULL && last != NULL);
        if (one && last) CHECK(memcmp(one, last, (size_t)kiln_model_n_vocab(m) * sizeof *one) == 0);
    }
    CHECK_EQ_INT(kiln_kv_n_used(ctx), 7);
    CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 0), 4);
    CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 1), 1);
done:
    kiln_batch_free(&b);
    kiln_ctx_destroy(ctx);
    kiln_model_destroy(m);
}

static void invalid_kv_cache_calls_are_refused_with_named_errors(void) {
    kiln_model *m = NULL;
    kiln_ctx *ctx;
    CHECK_OK(kiln_model_load(KILN_MODEL_PATH, &m));
    if (!m) return;
    ctx = make_ctx(m, 16, 8, 2);
    if (!ctx) goto done;
    CHECK_OK(decode_run(ctx, PROMPT_B, 4, 0, 0));
    CHECK_OK(decode_run(ctx, PROMPT_C, 2, 0, 1));
#define CHECK_KV_UNCHANGED()                                                                                 \
    do {                                                                                                     \
        CHECK_EQ_INT(kiln_kv_n_used(ctx), 6);                                                                \
        CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 0), 3);                                                        \
        CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 1), 1);                                                        \
    } while (0)

    /* dst already holds positions of the range. */
    CHECK_STATUS(kiln_kv_seq_cp(ctx, 0, 1, 0, 2), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("already holds");
    CHECK_KV_UNCHANGED();
    CHECK_STATUS(kiln_kv_seq_cp(ctx, 0, 1, -1, -1), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("already holds");
    CHECK_KV_UNCHANGED();
    CHECK_STATUS(kiln_kv_seq_cp(ctx, 0, 1, 1, 3), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("position 1");
    CHECK_KV_UNCHANGED();

    /* Empty ranges. */
    CHECK_STATUS(kiln_kv_seq_rm(ctx, 0, 2, 2), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("[2, 2)");
    CHECK_STATUS(kiln_kv_seq_rm(ctx, 0, 3, 1), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("[3, 1)");
    CHECK_STATUS(kiln_kv_seq_rm(ctx, -1, 3, 1), KILN_E_INVALID_ARG);
    CHECK_STATUS(kiln_kv_seq_cp(ctx, 0, 1, 3, 2), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("[3, 2)");
    CHECK_STATUS(kiln_kv_seq_cp(ctx, 0, 1, 2, 2), KILN_E_INVALID_ARG);
    CHECK_KV_UNCHANGED();

    /* Sequence ids outside 0 .. n_seq_max - 1 (and -1 where it does not mean "every sequence"). */
    CHECK_STATUS(kiln_kv_seq_rm(ctx, 2, -1, -1), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("sequence id 2");
    CHECK_STATUS(kiln_kv_seq_rm(ctx, -2, -1, -1), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("sequence id -2");
    CHECK_STATUS(kiln_kv_seq_cp(ctx, -1, 1, 2, 4), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("sequence id -1");
    CHECK_STATUS(kiln_kv_seq_cp(ctx, 0, 2, 2, 4), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("sequence id 2");
    CHECK_STATUS(kiln_kv_seq_keep(ctx, -1), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("sequence id -1");
    CHECK_STATUS(kiln_kv_seq_keep(ctx, 2), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("sequence id 2");
    CHECK_KV_UNCHANGED();

    /* A range dst does not hold is shared: [2, 4) of 0 into 1, which holds 0..1. */
    CHECK_OK(kiln_kv_seq_cp(ctx, 0, 1, 2, 4));
    CHECK_EQ_INT(kiln_kv_n_used(ctx), 6);
    CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 1), 3);
#undef CHECK_KV_UNCHANGED
done:
    kiln_ctx_destroy(ctx);
    kiln_model_destroy(m);
}

/* n_ctx 16: sequence 0 holds 10 cells; a 7-token batch is refused whole, with the cache as it was, and
 * the batches that follow compute what they compute in a context that never saw the refusal. */
static void a_batch_larger_than_the_free_cells_is_refused_and_changes_nothing(void) {
    kiln_model *m = NULL;
    kiln_ctx *ctx, *ref;
    kiln_batch b;
    int32_t n_vocab;
    CHECK_OK(kiln_model_load(KILN_MODEL_PATH, &m));
    if (!m) return;
    n_vocab = kiln_model_n_vocab(m);
    ctx = make_ctx(m, 16, 16, 2);
    ref = make_ctx(m, 16, 16, 2);
    CHECK_OK(kiln_batch_init(16, &b));
    if (!ctx || !ref || !b.token) goto done;
    CHECK_OK(decode_run(ctx, PROMPT_D, 10, 0, 0));
    CHECK_OK(decode_run(ref, PROMPT_D, 10, 0, 0));

    for (int32_t i = 0; i < 7; i++)
        CHECK_OK(kiln_batch_add(&b, PROMPT_B[i], i, 1, true));
    CHECK_STATUS(kiln_ctx_decode_batch(ctx, &b), KILN_E_CONTEXT_FULL);
    CHECK_ERROR_MENTIONS("7 tokens do not fit");
    CHECK_EQ_INT(kiln_kv_n_used(ctx), 10);
    CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 0), 9);
    CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 1), -1);

    kiln_batch_clear(&b); /* mixed: one decode step of 0 and 6 prompt tokens of 1 */
    CHECK_OK(kiln_batch_add(&b, 300, 10, 0, true));
    for (int32_t i = 0; i < 6; i++)
        CHECK_OK(kiln_batch_add(&b, PROMPT_B[i], i, 1, true));
    CHECK_STATUS(kiln_ctx_decode_batch(ctx, &b), KILN_E_CONTEXT_FULL);
    CHECK_EQ_INT(kiln_kv_n_used(ctx), 10);
    CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 0), 9);
    CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 1), -1);

    /* The wrapper refuses too, without a change. */
    {
        const float *l = NULL;
        CHECK_STATUS(kiln_ctx_decode(ctx, PROMPT_B, 7, &l), KILN_E_CONTEXT_FULL);
        CHECK_EQ_INT(kiln_ctx_n_past(ctx), 10);
        CHECK_EQ_INT(kiln_kv_n_used(ctx), 10);
    }

    /* Six tokens fit exactly; both contexts must agree on every row. */
    kiln_batch_clear(&b);
    for (int32_t i = 0; i < 6; i++)
        CHECK_OK(kiln_batch_add(&b, PROMPT_B[i], i, 1, true));
    CHECK_OK(kiln_ctx_decode_batch(ctx, &b));
    CHECK_OK(kiln_ctx_decode_batch(ref, &b));
    for (int32_t i = 0; i < 6; i++) {
        char what[64];
        snprintf(what, sizeof what, "row %d after the refused batches", i);
        check_logits_close(kiln_ctx_logits(ctx, i), kiln_ctx_logits(ref, i), n_vocab, SAME_STATE_TOL, what);
    }
    CHECK_EQ_INT(kiln_kv_n_used(ctx), 16);
    kiln_batch_clear(&b);
    CHECK_OK(kiln_batch_add(&b, 300, 10, 0, true));
    CHECK_STATUS(kiln_ctx_decode_batch(ctx, &b), KILN_E_CONTEXT_FULL);
    CHECK_EQ_INT(kiln_kv_n_used(ctx), 16);
    CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 0), 9);
done:
    kiln_batch_free(&b);
    kiln_ctx_destroy(ctx);
    kiln_ctx_destroy(ref);
    kiln_model_destroy(m);
}

static void kiln_batch_add_on_a_full_batch_is_a_range_error(void) {
    kiln_batch b;
    CHECK_OK(kiln_batch_init(2, &b));
    if (!b.token) return;
    CHECK_EQ_INT(b.capacity, 2);
    CHECK_EQ_INT(b.n_tokens, 0);
    CHECK_OK(kiln_batch_add(&b, 5, 0, 0, false));
    CHECK_OK(kiln_batch_add(&b, 6, 1, 0, true));
    CHECK_STATUS(kiln_batch_add(&b, 7, 2, 0, true), KILN_E_RANGE);
    CHECK_EQ_INT(b.n_tokens, 2);
    CHECK_EQ_INT(b.token[1], 6);
    CHECK_EQ_INT(b.pos[1], 1);
    CHECK_EQ_INT(b.seq_id[1], 0);
    CHECK(b.logits[0] == 0 && b.logits[1] != 0);
    kiln_batch_clear(&b);
    CHECK_EQ_INT(b.n_tokens, 0);
    CHECK_OK(kiln_batch_add(&b, 7, 2, 0, true));
    kiln_batch_free(&b);
    CHECK(b.token == NULL && b.pos == NULL && b.seq_id == NULL && b.logits == NULL);
    CHECK_EQ_INT(b.capacity, 0);
    CHECK_EQ_INT(b.n_tokens, 0);
    kiln_batch_free(&b); /* a zeroed batch frees again harmlessly */
}

/* ---------------------------------------------------------------------------------------------------
 * The abort callback
 * ------------------------------------------------------------------------------------------------- */

/* Two-sequence batches in a context whose callback stops the call (at once, and a few nodes in) and in
 * one without a callback: the stopped calls fail with KILN_E_ABORTED and leave the cache as it was, and
 * each following batch equals the other context's. */
static void the_abort_callback_stops_a_batch_and_leaves_the_cache_as_before(void) {
    kiln_model *m = NULL;
    kiln_ctx *ctx = NULL, *ref = NULL;
    kiln_ctx_params p = harness_ctx_params();
    abort_state st = {0, -1};
    kiln_batch b1, b2;
    int32_t n_vocab;
    CHECK_OK(kiln_model_load(KILN_MODEL_PATH, &m));
    if (!m) return;
    n_vocab = kiln_model_n_vocab(m);
    p.n_ctx = 64;
    p.n_batch = 16;
    p.n_seq_max = 3;
    p.abort_fn = abort_after;
    p.abort_user = &st;
    CHECK_OK(kiln_ctx_create(m, &p, &ctx));
    ref = make_ctx(m, 64, 16, 3);
    CHECK_OK(kiln_batch_init(16, &b1));
    CHECK_OK(kiln_batch_init(16, &b2));
    if (!ctx || !ref || !b1.token || !b2.token) goto done;
    /* b1: two prompts. b2: a decode step of each and a third prompt. */
    for (int32_t i = 0; i < 9; i++)
        CHECK_OK(kiln_batch_add(&b1, PROMPT_B[i], i, 0, i == 8));
    for (int32_t i = 0; i < 5; i++)
        CHECK_OK(kiln_batch_add(&b1, PROMPT_C[i], i, 1, i == 4));
    CHECK_OK(kiln_batch_add(&b2, 261, 9, 0, true));
    CHECK_OK(kiln_batch_add(&b2, 77, 5, 1, true));
    for (int32_t i = 0; i < 3; i++)
        CHECK_OK(kiln_batch_add(&b2, PROMPT_D[i], i, 2, i == 2));

    /* Stopped before anything was cached, on the very first (compiling) call. */
    st.calls = 0;
    st.stop_after = 0;
    CHECK_STATUS(kiln_ctx_decode_batch(ctx, &b1), KILN_E_ABORTED);
    CHECK(st.calls >= 1);
    CHECK_EQ_INT(kiln_kv_n_used(ctx), 0);
    CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 0), -1);
    st.stop_after = -1;
    CHECK_OK(kiln_ctx_decode_batch(ctx, &b1));
    CHECK_OK(kiln_ctx_decode_batch(ref, &b1));
    check_logits_close(kiln_ctx_logits(ctx, -1), kiln_ctx_logits(ref, -1), n_vocab, SAME_STATE_TOL,
                       "b1 after an aborted b1");
    CHECK_EQ_INT(kiln_kv_n_used(ctx), 14);

    /* Stopped at once, then a few nodes into the graph. */
    for (int32_t stop = 0; stop <= 3; stop += 3) {
        st.calls = 0;
        st.stop_after = stop;
        CHECK_STATUS(kiln_ctx_decode_batch(ctx, &b2), KILN_E_ABORTED);
        CHECK(st.calls > stop);
        CHECK_EQ_INT(kiln_kv_n_used(ctx), 14);
        CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 0), 8);
        CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 1), 4);
        CHECK_EQ_INT(kiln_kv_seq_pos_max(ctx, 2), -1);
    }
    /* The wrapper is stopped the same way. */
    {
        const float *l = NULL;
        st.calls = 0;
        st.stop_after = 0;
        CHECK_STATUS(kiln_ctx_decode(ctx, PROMPT_D, 2, &l), KILN_E_ABORTED);
        CHECK_EQ_INT(kiln_ctx_n_past(ctx), 9);
        CHECK_EQ_INT(kiln_kv_n_used(ctx), 14);
    }
    st.stop_after = -1;
    CHECK_OK(kiln_ctx_decode_batch(ctx, &b2));
    CHECK_OK(kiln_ctx_decode_batch(ref, &b2));
    for (int32_t i = 0; i < 3; i++) {
        char what[64];
        snprintf(what, sizeof what, "b2 output %d after aborted b2s", i);
        check_logits_close(kiln_ctx_logits(ctx, i == 2 ? -1 : i), kiln_ctx_logits(ref, i == 2 ? -1 : i),
                           n_vocab, SAME_STATE_TOL, what);
    }
    CHECK_EQ_INT(kiln_kv_n_used(ctx), 19);
done:
    kiln_batch_free(&b1);
    kiln_batch_free(&b2);
    kiln_ctx_destroy(ctx);
    kiln_ctx_destroy(ref);
    kiln_model_destroy(m);
}

int main(void) {
    RUN(interleaved_sequences_equal_each_alone_at_every_cpu_level_and_kv_type);
    RUN(interleaved_sequences_equal_alone_with_a_sliding_window);
    RUN(interleaved_sequences_equal_alone_with_learned_positions);
    RUN(a_position_past_the_learned_table_is_refused);
    RUN(interleaved_sequences_equal_alone_for_the_other_architectures);
    RUN(seq_cp_shares_a_prefix_that_continues_like_a_cold_run);
    RUN(seq_rm_of_a_tail_then_decoding_it_again_repeats_the_first_run);
    RUN(seq_rm_of_a_middle_range_and_of_every_sequence);
    RUN(seq_keep_forgets_the_others_pos_max_tracks_and_reset_empties);
    RUN(two_contexts_on_one_model_share_one_prepared_copy_of_the_weights);
    RUN(a_warmed_up_step_allocates_nothing_with_one_and_with_four_sequences);
    RUN(kiln_seq_max_sequences_work_and_one_more_is_refused);
    RUN(the_wrapper_splits_into_n_batch_chunks_and_a_failure_takes_them_all_back);
    RUN(invalid_batches_are_refused_with_named_errors_and_change_nothing);
    RUN(invalid_kv_cache_calls_are_refused_with_named_errors);
    RUN(a_batch_larger_than_the_free_cells_is_refused_and_changes_nothing);
    RUN(kiln_batch_add_on_a_full_batch_is_a_range_error);
    RUN(the_abort_callback_stops_a_batch_and_leaves_the_cache_as_before);
    return harness_finish();
}
