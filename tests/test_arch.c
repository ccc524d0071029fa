/*
 * test_arch.c - every supported architecture against HF transformers, its defining implementation.
 *
 * tests/data/arch/<name>.gguf are tiny random-weight models (2 layers, every structural feature of the
 * family present) and <name>.ref the logits transformers computed for them in float32, both written by
 * tools/gen_arch_refs.py (provenance in <name>.json). For each model Kiln runs the prompt (prefill) and 8
 * greedy decode steps; every logit vector must match within 1e-4 relative (max |kiln - ref| over the
 * vocabulary divided by max |ref|), and Kiln's own greedy continuation must be the reference's. This is
 * checked with the full pass pipeline and with no passes (the plain ops the builders emit), on the CPU and
 * on the Vulkan device (docs/vulkan.md; skipped with a message when the machine has none) under the same
 * tolerance; for the device the ops the scheduler left on the CPU are printed from the context's log.
 *
 * Below the end-to-end checks, the ops the architectures added are pinned against double-precision
 * references: LayerNorm's normalization, rope with Llama 3 frequency divisors, and the sliding-window mask
 * (which the attention fusion must leave alone).
 */
#include "harness.h"

#include "core/core.h"
#include "graph/passes/passes.h"
#include "graph_run.h"
#include "model/model.h"
#include "backend/backend.h"

#include <math.h>
#include <stdlib.h>

#define REL_TOL 1e-4

static const char *const ARCHS[] = {"gpt2", "qwen2", "qwen3", "llama3", "phi3", "mistral"};

typedef struct reference {
    uint32_t n_prompt, n_steps, n_vocab;
    const int32_t *prompt;  /* [n_prompt] */
    const int32_t *greedy;  /* [n_steps + 1]: argmax of each logit vector */
    const float *logits;    /* [n_steps + 1][n_vocab] */
    char *bytes;
} reference;

/* Parse "KLNREF01", u32 n_prompt, n_steps, n_vocab, i32 prompt[], i32 greedy[], f32 logits[][]. */
static bool reference_load(const char *name, reference *r) {
    char rel[64];
    size_t size = 0;
    snprintf(rel, sizeof rel, "arch/%s.ref", name);
    memset(r, 0, sizeof *r);
    r->bytes = harness_read_file(harness_data_path(rel), &size);
    if (!r->bytes || size < 20 || memcmp(r->bytes, "KLNREF01", 8) != 0) return false;
    memcpy(&r->n_prompt, r->bytes + 8, 4);
    memcpy(&r->n_steps, r->bytes + 12, 4);
    memcpy(&r->n_vocab, r->bytes + 16, 4);
    size_t want = 20 + 4 * ((size_t)r->n_prompt + r->n_steps + 1 + (size_t)(r->n_steps + 1) * r->n_vocab);
    if (size != want || r->n_prompt == 0 || r->n_prompt > 64 || r->n_steps > 64) return false;
    r->prompt = (const int32_t *)(r->bytes + 20);
    r->greedy = r->prompt + r->n_prompt;
    r->logits = (const float *)(r->greedy + r->n_steps + 1);
    return true;
}

/* max |a - ref| / max |ref| */
static double rel_error(const float *a, const float *ref, int32_t n) {
    double diff = 0.0, scale = 0.0;
    for (int32_t i = 0; i < n; i++) {
        diff = fmax(diff, fabs((double)a[i] - ref[i]));
        scale = fmax(scale, fabs((double)ref[i]));
    }
    return scale > 0.0 ? diff / scale : diff;
}

static bool have_vulkan;

/* The ops of the CPU splits of every graph a context on a device ran, from the scheduler's log lines
 * ("split N: cpu, nodes [..): .. copies in; ops: a b"), each op once. */
static char fallback_ops[256];
static bool fallback_seen;

static void keep_fallbacks(void *user, const char *line) {
    (void)user;
    if (!strncmp(line, "schedule: ", 10)) fallback_seen = true;
    if (strncmp(line, "split ", 6) || !strstr(line, ": cpu, ")) return;
    const char *ops = strstr(line, "; ops:");
    if (!ops) return;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", ops + 6);
    for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
        char padded[40];
        snprintf(padded, sizeof padded, " %s ", tok);
        char have[260];
        snprintf(have, sizeof have, " %s ", fallback_ops);
        if (strstr(have, padded)) continue;
        size_t used = strlen(fallback_ops);
        snprintf(fallback_ops + used, sizeof fallback_ops - used, "%s%s", used ? " " : "", tok);
    }
}

static const char *model_path(const char *name) {
    static char rel[64];
    snprintf(rel, sizeof rel, "arch/%s.gguf", name);
    return harness_data_path(rel);
}

/* Prefill, then n_steps decode steps each fed Kiln's own greedy token; compares every logit vector and
 * every greedy choice with the reference. Returns the worst relative error. */
static double run_against_reference(const char *name, const char *passes, const char *devices) {
    reference r;
    kiln_model *m = NULL;
    kiln_ctx *c = NULL;
    kiln_ctx_params p = harness_ctx_params();
    kiln_model_params mp = kiln_model_params_default();
    double worst = 0.0;
    if (!reference_load(name, &r)) {
        harness_fail(__FILE__, __LINE__, "%s: reference file missing or malformed", name);
        free(r.bytes);
        return 1.0;
    }
    p.n_ctx = 32;
    p.passes = passes;
    mp.devices = devices;
    if (devices) p.log = keep_fallbacks;
    CHECK_OK(kiln_model_load_ex(model_path(name), &mp, &m));
    if (m && devices) CHECK(strncmp(kiln_model_backends(m), "vulkan:", 7) == 0);
    if (m) CHECK_OK(kiln_ctx_create(m, &p, &c));
    if (!c) goto done;
    CHECK_EQ_INT(kiln_model_n_vocab(m), r.n_vocab);
    const float *logits = NULL;
    int32_t token = 0;
    for (uint32_t s = 0; s <= r.n_steps; s++) {
        kiln_status st = s == 0 ? kiln_ctx_decode(c, r.prompt, (int32_t)r.n_prompt, &logits)
                                : kiln_ctx_decode(c, &token, 1, &logits);
        CHECK_OK(st);
        if (st) break;
        double err = rel_error(logits, r.logits + (size_t)s * r.n_vocab, (int32_t)r.n_vocab);
        worst = fmax(worst, err);
        if (err > REL_TOL)
            harness_fail(__FILE__, __LINE__, "%s (passes %s, %s) step %u: relative error %.3g > %g", name,
                         passes, devices ? devices : "cpu", s, err, REL_TOL);
        token = harness_argmax(logits, (int32_t)r.n_vocab);
        if (token != r.greedy[s])
            harness_fail(__FILE__, __LINE__, "%s (passes %s, %s) step %u: greedy token %d, reference %d",
                         name, passes, devices ? devices : "cpu", s, token, r.greedy[s]);
    }
done:
    kiln_ctx_destroy(c);
    kiln_model_destroy(m);
    free(r.bytes);
    return worst;
}

static void check_arch(const char *name) {
    double a = run_against_reference(name, "all", NULL);
    double b = run_against_reference(name, "none", NULL);
    printf("  %-8s max relative error %.2e (all passes), %.2e (no passes)\n", name, a, b);
    if (!have_vulkan) {
        printf("  %-8s vulkan skipped: no Vulkan device (%s)\n", name,
               kiln_devices_note() ? kiln_devices_note() : "none");
        return;
    }
    for (int i = 0; i < 2; i++) {
        const char *passes = i ? "none" : "all";
        fallback_ops[0] = '\0';
        fallback_seen = false;
        double e = run_against_reference(name, passes, "vulkan");
        CHECK(fallback_seen); /* the context logged its schedules: the fallback list below is real */
        printf("  %-8s vulkan max relative error %.2e (%s passes); on the CPU: %s\n", name, e,
               i ? "no" : "all", fallback_ops[0] ? fallback_ops : "nothing");
    }
}

static void gpt2_matches_transformers(void) { check_arch("gpt2"); }
static void qwen2_matches_transformers(void) { check_arch("qwen2"); }
static void qwen3_matches_transformers(void) { check_arch("qwen3"); }
static void llama3_matches_transformers(void) { check_arch("llama3"); }
static void phi3_matches_transformers(void) { check_arch("phi3"); }
static void mistral_sliding_window_matches_transformers(void) { check_arch("mistral"); }

static void each_test_model_loads_as_its_architecture(void) {
    static const char *const expect[] = {"gpt2", "qwen2", "qwen3", "llama", "phi3", "llama"};
    for (size_t i = 0; i < KILN__ARRAY_LEN(ARCHS); i++) {
        kiln_model *m = NULL;
        CHECK_OK(kiln_model_load(model_path(ARCHS[i]), &m));
        if (m) CHECK_STR(kiln_model_arch(m), expect[i]);
        kiln_model_destroy(m);
    }
}

static void hyperparameters_follow_the_metadata(void) {
    kiln_model *q3 = NULL, *mi = NULL, *phi = NULL;
    CHECK_OK(kiln_model_load(model_path("qwen3"), &q3));
    CHECK_OK(kiln_model_load(model_path("mistral"), &mi));
    CHECK_OK(kiln_model_load(model_path("phi3"), &phi));
    if (q3) {
        CHECK_EQ_INT(q3->hp.head_dim, 16); /* attention.key_length, not 48 / 4 */
        CHECK_EQ_INT(q3->hp.rope_mode, KILN_ROPE_NEOX);
    }
    if (mi) CHECK_EQ_INT(mi->hp.n_swa, 4);
    if (phi) CHECK_EQ_INT(phi->hp.n_rot, 6); /* partial rotary: half of D = 12 */
    kiln_model_destroy(q3);
    kiln_model_destroy(mi);
    kiln_model_destroy(phi);
}

/* The generator's Llama 3 settings: rope_theta 500000, factor 8, low/high 1/4, original context 64. */
static void llama3_factors_computed_from_keys_equal_the_converters_tensor(void) {
    kiln_model *m = NULL;
    kiln_hparams hp = {0};
    float mine[64];
    CHECK_OK(kiln_model_load(model_path("llama3"), &m));
    if (!m) return;
    CHECK(kiln__has(&m->rope_freqs));
    hp.n_rot = m->hp.n_rot;
    hp.rope_freq_base = 500000.0f;
    hp.rope_factor = 8.0f;
    hp.rope_low_freq = 1.0f;
    hp.rope_high_freq = 4.0f;
    hp.rope_orig_ctx = 64;
    kiln__llama3_rope_factors(&hp, mine);
    const float *file = m->rope_freqs.data;
    CHECK_EQ_INT(m->rope_freqs.ne[0], hp.n_rot / 2);
    for (int32_t i = 0; i < hp.n_rot / 2; i++) CHECK_NEAR(mine[i], file[i], 1e-6 * file[i]);
    CHECK(file[0] == 1.0f && file[hp.n_rot / 2 - 1] == 8.0f); /* both ends of the blend are exercised */
    CHECK(file[1] > 1.0f && file[1] < 8.0f);
    kiln_model_destroy(m);
}

static void kiln_run_generates_with_every_test_model(void) {
    for (size_t i = 0; i < KILN__ARRAY_LEN(ARCHS); i++) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "'%s' run -m '%s' -p 'Once upon a time' -n 5 --temp 0 > '%s/arch_run.out' 2>&1",
                 KILN_CLI_PATH, model_path(ARCHS[i]), KILN_TEST_TMP);
        int rc = system(cmd);
        if (rc != 0) harness_fail(__FILE__, __LINE__, "%s: kiln run exited with %d", ARCHS[i], rc);
        char path[512];
        snprintf(path, sizeof path, "%s/arch_run.out", KILN_TEST_TMP);
        char *out = harness_read_file(path, NULL);
        CHECK(out && strncmp(out, "Once upon a time", 16) == 0);
        free(out);
    }
}

/* kiln chat on each family: two turns from piped stdin (these test models carry no chat template, so the
 * plain template is used and said so), exit 0, a reply per turn. */
static void kiln_chat_talks_with_every_test_model(void) {
    for (size_t i = 0; i < KILN__ARRAY_LEN(ARCHS); i++) {
        char cmd[1024], path[512];
        snprintf(cmd, sizeof cmd, "printf 'hello there\\nand again\\n' | '%s' chat -m '%s' -n 4 --temp 0 > '%s/arch_chat.out' 2>'%s/arch_chat.err'",
                 KILN_CLI_PATH, model_path(ARCHS[i]), KILN_TEST_TMP, KILN_TEST_TMP);
        int rc = system(cmd);
        if (rc != 0) harness_fail(__FILE__, __LINE__, "%s: kiln chat exited with %d", ARCHS[i], rc);
        snprintf(path, sizeof path, "%s/arch_chat.err", KILN_TEST_TMP);
        char *err = harness_read_file(path, NULL);
        CHECK(err && strstr(err, "no chat template") != NULL);
        free(err);
    }
}

static void a_context_cannot_outgrow_a_learned_position_table(void) {
    kiln_model *m = NULL;
    kiln_ctx *c = NULL;
    kiln_ctx_params p = harness_ctx_params();
    CHECK_OK(kiln_model_load(model_path("gpt2"), &m));
    if (!m) return;
    p.n_ctx = kiln_model_n_ctx_train(m) + 1;
    CHECK_STATUS(kiln_ctx_create(m, &p, &c), KILN_E_INVALID_ARG);
    CHECK(c == NULL);
    CHECK_ERROR_MENTIONS("position table");
    p.n_ctx = kiln_model_n_ctx_train(m);
    CHECK_OK(kiln_ctx_create(m, &p, &c));
    kiln_ctx_destroy(c);
    kiln_model_destroy(m);
}

/* ---- The ops the architectures added, against double-precision references ---- */

static void norm_subtracts_the_mean_and_divides_by_the_standard_deviation(void) {
    static float x[3 * 40];
    kiln_graph *g = NULL;
    kiln_status s;
    fill_random(x, 3 * 40, 7);
    for (int i = 0; i < 40; i++) x[40 + i] += 5.0f; /* an offset row: the mean matters */
    CHECK_OK(kiln__graph_create(64, &g));
    int64_t ne[2] = {40, 3};
    kiln_tensor *y = kiln__norm(g, kiln__graph_leaf(g, "x", KILN_TYPE_F32, 2, ne, x, KILN_TENSOR_INPUT), 1e-5f);
    kiln__graph_set_output(g, y);
    void *arena = graph_run(g, 2, &s);
    CHECK_OK(s);
    for (int r = 0; arena && r < 3; r++) {
        double mean = 0, var = 0;
        for (int i = 0; i < 40; i++) mean += x[r * 40 + i] / 40.0;
        for (int i = 0; i < 40; i++) var += (x[r * 40 + i] - mean) * (x[r * 40 + i] - mean) / 40.0;
        for (int i = 0; i < 40; i++)
            CHECK_NEAR(((float *)y->data)[r * 40 + i], (x[r * 40 + i] - mean) / sqrt(var + 1e-5), 1e-5);
    }
    free(arena);
    kiln__graph_destroy(g);
}

static void rope_divides_each_pair_frequency_by_its_factor(void) {
    enum { D = 8, H = 2, T = 3, NROT = 6 };
    static float x[D * H * T];
    static float factors[NROT / 2] = {1.0f, 2.5f, 8.0f};
    static int32_t pos[T] = {0, 5, 11};
    kiln_graph *g = NULL;
    kiln_status s;
    fill_random(x, D * H * T, 3);
    CHECK_OK(kiln__graph_create(64, &g));
    int64_t ne_x[3] = {D, H, T}, ne_p[1] = {T}, ne_f[1] = {NROT / 2};
    kiln_tensor *xt = kiln__graph_leaf(g, "x", KILN_TYPE_F32, 3, ne_x, x, KILN_TENSOR_INPUT);
    kiln_tensor *pt = kiln__graph_leaf(g, "pos", KILN_TYPE_I32, 1, ne_p, pos, KILN_TENSOR_INPUT);
    kiln_tensor *ft = kiln__graph_leaf(g, "factors", KILN_TYPE_F32, 1, ne_f, factors, KILN_TENSOR_WEIGHT);
    kiln_tensor *y = kiln__rope_ext(g, xt, pt, ft, NROT, KILN_ROPE_NEOX, 10000.0f, 1.0f);
    kiln__graph_set_output(g, y);
    void *arena = graph_run(g, 1, &s);
    CHECK_OK(s);
    for (int t = 0; arena && t < T; t++)
        for (int h = 0; h < H; h++) {
            const float *in = x + (t * H + h) * D, *out = (const float *)y->data + (t * H + h) * D;
            for (int i = 0; i < NROT / 2; i++) {
                double theta = pos[t] * pow(10000.0, -2.0 * i / NROT) / factors[i];
                double a = in[i], b = in[i + NROT / 2];
                CHECK_NEAR(out[i], a * cos(theta) - b * sin(theta), 1e-5);
                CHECK_NEAR(out[i + NROT / 2], a * sin(theta) + b * cos(theta), 1e-5);
            }
            for (int i = NROT; i < D; i++) CHECK(out[i] == in[i]); /* partial rotary: passed through */
        }
    free(arena);
    kiln__graph_destroy(g);
}

static void rope_factors_of_the_wrong_length_are_a_builder_error(void) {
    static float x[8 * 2 * 1], f[4];
    static int32_t pos[1];
    kiln_graph *g = NULL;
    CHECK_OK(kiln__graph_create(16, &g));
    int64_t ne_x[3] = {8, 2, 1}, ne_p[1] = {1}, ne_f[1] = {4};
    kiln_tensor *y = kiln__rope_ext(g, kiln__graph_leaf(g, "x", KILN_TYPE_F32, 3, ne_x, x, 0),
                                    kiln__graph_leaf(g, "pos", KILN_TYPE_I32, 1, ne_p, pos, 0),
                                    kiln__graph_leaf(g, "f", KILN_TYPE_F32, 1, ne_f, f, 0), 6, 0, 10000.0f, 1.0f);
    CHECK(y == NULL);
    CHECK_STATUS(kiln__graph_status(g), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("frequency factors");
    kiln__graph_destroy(g);
}

/* A sliding window is mask content: the query at position N_PAST + t sees the keys of positions
 * q - W + 1 .. q, the rest of its mask row is -inf. */
enum { WIN_D = 8, WIN_HQ = 4, WIN_HKV = 2, WIN_T = 3, WIN_L = 9, WIN_N_PAST = 4 };

static void fill_window_mask(float *mask, int32_t window) {
    for (int t = 0; t < WIN_T; t++)
        for (int j = 0; j < WIN_L; j++) {
            int q = WIN_N_PAST + t;
            mask[t * WIN_L + j] = j > q || (window > 0 && j <= q - window) ? -INFINITY : 0.0f;
        }
}

/* The plain attention form the model builders emit, over the window mask. */
static kiln_tensor *attention_subgraph(kiln_graph *g, float *q, float *k, float *v, float *mask) {
    int64_t ne_q[3] = {WIN_D, WIN_HQ, WIN_T}, ne_k[3] = {WIN_D, WIN_HKV, WIN_L}, ne_m[2] = {WIN_L, WIN_T};
    kiln_tensor *Q = kiln__graph_leaf(g, "q", KILN_TYPE_F32, 3, ne_q, q, KILN_TENSOR_INPUT);
    kiln_tensor *K = kiln__graph_leaf(g, "k", KILN_TYPE_F32, 3, ne_k, k, KILN_TENSOR_INPUT);
    kiln_tensor *V = kiln__graph_leaf(g, "v", KILN_TYPE_F32, 3, ne_k, v, KILN_TENSOR_INPUT);
    kiln_tensor *M = kiln__graph_leaf(g, "mask", KILN_TYPE_F32, 2, ne_m, mask, KILN_TENSOR_INPUT);
    kiln_tensor *kq = kiln__matmul(g, kiln__permute(g, K, 0, 2, 1, 3), kiln__permute(g, Q, 0, 2, 1, 3));
    kq = kiln__add(g, kiln__scale(g, kq, 0.35f, 0.0f), M);
    kiln_tensor *kqv = kiln__matmul(g, kiln__cont(g, kiln__permute(g, V, 1, 2, 0, 3)), kiln__softmax(g, kq, 1.0f));
    kiln_tensor *out = kiln__cont(g, kiln__permute(g, kqv, 0, 2, 1, 3));
    kiln__graph_set_output(g, out);
    return out;
}

static void the_window_mask_hides_keys_older_than_the_window(void) {
    enum { W = 3 };
    static float q[WIN_D * WIN_HQ * WIN_T], k[WIN_D * WIN_HKV * WIN_L], v[WIN_D * WIN_HKV * WIN_L], mask[WIN_L * WIN_T];
    kiln_graph *g = NULL;
    kiln_status s;
    fill_random(q, KILN__ARRAY_LEN(q), 5);
    fill_random(k, KILN__ARRAY_LEN(k), 6);
    fill_random(v, KILN__ARRAY_LEN(v), 7);
    fill_window_mask(mask, W);
    CHECK_OK(kiln__graph_create(64, &g));
    kiln_tensor *y = attention_subgraph(g, q, k, v, mask);
    void *arena = graph_run(g, 1, &s);
    CHECK_OK(s);
    for (int t = 0; arena && t < WIN_T; t++)
        for (int h = 0; h < WIN_HQ; h++) {
            int hk = h / (WIN_HQ / WIN_HKV), pos = WIN_N_PAST + t; /* sees keys pos - W + 1 .. pos */
            double sc[W], mx = -INFINITY, sum = 0;
            for (int j = 0; j < W; j++) {
                sc[j] = 0;
                for (int i = 0; i < WIN_D; i++)
                    sc[j] += (double)q[(t * WIN_HQ + h) * WIN_D + i] * k[((pos - W + 1 + j) * WIN_HKV + hk) * WIN_D + i];
                sc[j] *= 0.35;
                mx = fmax(mx, sc[j]);
            }
            for (int j = 0; j < W; j++) sum += exp(sc[j] - mx);
            for (int i = 0; i < WIN_D; i++) {
                double acc = 0;
                for (int j = 0; j < W; j++) acc += exp(sc[j] - mx) / sum * v[((pos - W + 1 + j) * WIN_HKV + hk) * WIN_D + i];
                CHECK_NEAR(((float *)y->data)[(t * WIN_HQ + h) * WIN_D + i], acc, 1e-5);
            }
        }
    free(arena);
    kiln__graph_destroy(g);
}

static bool graph_has_op(kiln_graph *g, kiln_op op) {
    for (int32_t i = 0; i < kiln__graph_n_nodes(g); i++)
        if (kiln__graph_node(g, i)->op == op) return true;
    return false;
}

/* With or without a window the plain form becomes one attention node, and computes the same. */
static void fuse_attention_fuses_a_windowed_mask(void) {
    static float q[WIN_D * WIN_HQ * WIN_T], k[WIN_D * WIN_HKV * WIN_L], v[WIN_D * WIN_HKV * WIN_L], mask[WIN_L * WIN_T];
    static float plain[WIN_D * WIN_HQ * WIN_T];
    kiln_pass_env env = {NULL, NULL};
    fill_random(q, KILN__ARRAY_LEN(q), 8);
    fill_random(k, KILN__ARRAY_LEN(k), 9);
    fill_random(v, KILN__ARRAY_LEN(v), 10);
    for (int32_t window = 0; window <= 2; window += 2) {
        fill_window_mask(mask, window);
        for (int fuse = 0; fuse < 2; fuse++) {
            kiln_graph *g = NULL;
            kiln_status s;
            int32_t n = 0;
            CHECK_OK(kiln__graph_create(128, &g));
            kiln_tensor *y = attention_subgraph(g, q, k, v, mask);
            CHECK_OK(kiln__graph_order(g));
            if (fuse) {
                CHECK_OK(kiln__pass_fuse_attention(g, &env, &n));
                CHECK_EQ_INT(n, 1);
                CHECK(graph_has_op(g, KILN_OP_ATTENTION) && !graph_has_op(g, KILN_OP_SOFTMAX));
                y = kiln__graph_output(g, 0);
            }
            void *arena = graph_run(g, 2, &s);
            CHECK_OK(s);
            for (int i = 0; arena && i < WIN_D * WIN_HQ * WIN_T; i++) {
                float yi = *(float *)((char *)y->data + (i % WIN_D) * y->nb[0] + (i / WIN_D % WIN_HQ) * y->nb[1] +
                                      (i / (WIN_D * WIN_HQ)) * y->nb[2]);
                if (!fuse) plain[i] = yi;
                else CHECK_NEAR(yi, plain[i], 1e-5);
            }
            free(arena);
            kiln__graph_destroy(g);
        }
    }
}

int main(void) {
    kiln_backend *probe = NULL;
    have_vulkan = kiln_device_count() > 0 && kiln__backend_vulkan_create(0, &probe) == KILN_OK;
    kiln__backend_destroy(probe);
    RUN(each_test_model_loads_as_its_architecture);
    RUN(hyperparameters_follow_the_metadata);
    RUN(gpt2_matches_transformers);
    RUN(qwen2_matches_transformers);
    RUN(qwen3_matches_transformers);
    RUN(llama3_matches_transformers);
    RUN(phi3_matches_transformers);
    RUN(mistral_sliding_window_matches_transformers);
    RUN(llama3_factors_computed_from_keys_equal_the_converters_tensor);
    RUN(kiln_run_generates_with_every_test_model);
    RUN(kiln_chat_talks_with_every_test_model);
    RUN(a_context_cannot_outgrow_a_learned_position_table);
    RUN(norm_subtracts_the_mean_and_divides_by_the_standard_deviation);
    RUN(rope_divides_each_pair_frequency_by_its_factor);
    RUN(rope_factors_of_the_wrong_length_are_a_builder_error);
    RUN(the_window_mask_hides_keys_older_than_the_window);
    RUN(fuse_attention_fuses_a_windowed_mask);
    return harness_finish();
}
