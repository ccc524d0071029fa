/*
 * test_synth.c - `kiln synth` writes a loadable llama GGUF with the requested shape, llama.cpp's tensor
 * names, N(0, 0.02) weights and unit norms, reproducibly from its seed and whatever its thread count; a
 * quantization mix written directly is the very file `kiln quantize` makes from the F16 file of the same
 * seed (the quantizer is the reference); llama.cpp loads the result (checked through the llama-cpp-python
 * package when it is installed, and skipped with a message when it is not).
 */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <sys/wait.h>

#define SMALL "--n-embd 64 --n-layer 2 --n-head 4 --n-head-kv 2 --n-ff 96 --n-ctx 128"

static int sh(const char *fmt, const char *a, const char *b) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, fmt, a, b);
    int st = system(cmd);
    return WEXITSTATUS(st);
}

static const char *out_path(const char *name) {
    static char paths[4][512];
    static int next;
    char *p = paths[next++ % 4];
    snprintf(p, 512, "%s/%s", KILN_TEST_TMP, name);
    return p;
}

static void writes_a_model_of_the_requested_shape_that_loads_and_runs(void) {
    const char *path = out_path("synth_small.gguf");
    kiln_model *m = NULL;
    kiln_ctx *ctx = NULL;
    const float *logits;
    int32_t bos = 1;
    CHECK_EQ_INT(sh("'%s' synth --shape stories260k " SMALL " --type f16 -o '%s' 2>/dev/null", KILN_CLI_PATH, path), 0);
    CHECK_OK(kiln_model_load(path, &m));
    if (!m) return;
    const kiln_gguf *g = kiln_model_gguf(m);
    int64_t v;
    CHECK_OK(kiln_gguf_get_int(g, "llama.embedding_length", &v));
    CHECK_EQ_INT(v, 64);
    CHECK_OK(kiln_gguf_get_int(g, "llama.attention.head_count_kv", &v));
    CHECK_EQ_INT(v, 2);
    CHECK_EQ_INT(kiln_gguf_tensor_count(g), 3 + 9 * 2);
    kiln_tensor_info t;
    CHECK_OK(kiln_gguf_tensor_info(g, kiln_gguf_find_tensor(g, "blk.1.attn_k.weight"), &t));
    CHECK_EQ_INT(t.type, KILN_TYPE_F16);
    CHECK_EQ_INT(t.ne[0], 64);
    CHECK_EQ_INT(t.ne[1], 32);
    CHECK_EQ_INT(kiln_model_n_vocab(m), 512);
    CHECK_OK(kiln_ctx_create(m, NULL, &ctx));
    CHECK_OK(kiln_ctx_decode(ctx, &bos, 1, &logits));
    kiln_ctx_destroy(ctx);
    kiln_model_destroy(m);
}

static void weights_are_normal_with_std_0_02_and_norms_are_one(void) {
    const char *path = out_path("synth_stats.gguf");
    kiln_gguf *g = NULL;
    kiln_tensor_info t;
    CHECK_EQ_INT(sh("'%s' synth --shape stories260k --type f32 --seed 9 -o '%s' 2>/dev/null", KILN_CLI_PATH, path), 0);
    CHECK_OK(kiln_gguf_open(path, &g));
    if (!g) return;
    CHECK_OK(kiln_gguf_tensor_info(g, kiln_gguf_find_tensor(g, "token_embd.weight"), &t));
    const float *x = t.data;
    double sum = 0, sq = 0, n = (double)(t.ne[0] * t.ne[1]), beyond_4sd = 0;
    for (int64_t i = 0; i < t.ne[0] * t.ne[1]; i++) {
        sum += x[i];
        sq += (double)x[i] * x[i];
        beyond_4sd += fabs(x[i]) > 0.08;
    }
    double mean = sum / n, sd = sqrt(sq / n - mean * mean);
    CHECK_NEAR(mean, 0.0, 0.001);  /* 32768 samples: standard error of the mean is 1.1e-4 */
    CHECK_NEAR(sd, 0.02, 0.0005);  /* standard error of the sd is about 7.8e-5 */
    CHECK(beyond_4sd < 10);        /* expected about 2 */
    CHECK_OK(kiln_gguf_tensor_info(g, kiln_gguf_find_tensor(g, "blk.0.attn_norm.weight"), &t));
    CHECK_EQ_INT(t.type, KILN_TYPE_F32);
    for (int64_t i = 0; i < t.ne[0]; i++) CHECK(((const float *)t.data)[i] == 1.0f);
    kiln_gguf_close(g);
}

static void the_same_seed_gives_the_same_file_and_another_seed_does_not(void) {
    const char *a = out_path("synth_a.gguf"), *b = out_path("synth_b.gguf"), *c = out_path("synth_c.gguf");
    CHECK_EQ_INT(sh("'%s' synth " SMALL " --seed 5 -o '%s' 2>/dev/null", KILN_CLI_PATH, a), 0);
    CHECK_EQ_INT(sh("'%s' synth " SMALL " --seed 5 -o '%s' 2>/dev/null", KILN_CLI_PATH, b), 0);
    CHECK_EQ_INT(sh("'%s' synth " SMALL " --seed 6 -o '%s' 2>/dev/null", KILN_CLI_PATH, c), 0);
    CHECK_EQ_INT(sh("cmp -s '%s' '%s'", a, b), 0);
    CHECK(sh("cmp -s '%s' '%s'", a, c) != 0);
}

/* Rows of 256 (K-quant super-blocks) and three layers, so that Q4_K_M gives attention V and FFN down Q6_K
 * on some layers and not others, and the output Q6_K. */
#define KQUANT "--n-embd 256 --n-layer 3 --n-head 4 --n-head-kv 2 --n-ff 512 --n-ctx 128 --seed 3"

static void a_mix_written_directly_is_the_quantizers_file_of_the_f16_model(void) {
    const char *f16 = out_path("synth_k_f16.gguf"), *ref = out_path("synth_k_ref.gguf");
    const char *direct = out_path("synth_k_direct.gguf");
    static const char *const mixes[] = {"q4_0", "q8_0", "q4_k_m"};
    char cmd[1024];
    CHECK_EQ_INT(sh("'%s' synth " KQUANT " -t 2 -o '%s' 2>/dev/null", KILN_CLI_PATH, f16), 0);
    for (size_t i = 0; i < sizeof mixes / sizeof mixes[0]; i++) {
        snprintf(cmd, sizeof cmd, "'%s' quantize '%s' '%s' %s >/dev/null 2>&1", KILN_CLI_PATH, f16, ref,
                 mixes[i]);
        CHECK_EQ_INT(WEXITSTATUS(system(cmd)), 0);
        snprintf(cmd, sizeof cmd, "'%s' synth " KQUANT " --type %s -t 3 -o '%s' 2>/dev/null", KILN_CLI_PATH,
                 mixes[i], direct);
        CHECK_EQ_INT(WEXITSTATUS(system(cmd)), 0);
        CHECK_EQ_INT(sh("cmp -s '%s' '%s'", ref, direct), 0);
    }
    kiln_gguf *g = NULL;
    kiln_tensor_info t;
    CHECK_OK(kiln_gguf_open(direct, &g)); /* the last one, Q4_K_M */
    if (!g) return;
    CHECK_OK(kiln_gguf_tensor_info(g, kiln_gguf_find_tensor(g, "blk.0.ffn_down.weight"), &t));
    CHECK_EQ_INT(t.type, KILN_TYPE_Q4_K);
    CHECK_OK(kiln_gguf_tensor_info(g, kiln_gguf_find_tensor(g, "blk.2.ffn_down.weight"), &t));
    CHECK_EQ_INT(t.type, KILN_TYPE_Q6_K);
    CHECK_OK(kiln_gguf_tensor_info(g, kiln_gguf_find_tensor(g, "output.weight"), &t));
    CHECK_EQ_INT(t.type, KILN_TYPE_Q6_K);
    kiln_gguf_close(g);
}

/* n_ff 97: FFN down's rows have odd length, so rows start in the middle of a Box-Muller pair. */
static void the_thread_count_does_not_change_the_bytes(void) {
    const char *a = out_path("synth_t1.gguf"), *b = out_path("synth_t7.gguf");
    CHECK_EQ_INT(sh("'%s' synth " SMALL " --n-ff 97 -t 1 -o '%s' 2>/dev/null", KILN_CLI_PATH, a), 0);
    CHECK_EQ_INT(sh("'%s' synth " SMALL " --n-ff 97 -t 7 -o '%s' 2>/dev/null", KILN_CLI_PATH, b), 0);
    CHECK_EQ_INT(sh("cmp -s '%s' '%s'", a, b), 0);
    CHECK_EQ_INT(sh("'%s' synth " KQUANT " --type q4_k_m -t 1 -o '%s' 2>/dev/null", KILN_CLI_PATH, a), 0);
    CHECK_EQ_INT(sh("'%s' synth " KQUANT " --type q4_k_m -t 5 -o '%s' 2>/dev/null", KILN_CLI_PATH, b), 0);
    CHECK_EQ_INT(sh("cmp -s '%s' '%s'", a, b), 0);
}

static void bad_shapes_are_usage_errors(void) {
    const char *p = out_path("synth_bad.gguf");
    CHECK_EQ_INT(sh("'%s' synth --n-head 5 -o '%s' 2>/dev/null", KILN_CLI_PATH, p), 2);
    CHECK_EQ_INT(sh("'%s' synth --shape gpt5 -o '%s' 2>/dev/null", KILN_CLI_PATH, p), 2);
    CHECK_EQ_INT(sh("'%s' synth --type q4_1 -o '%s' 2>/dev/null", KILN_CLI_PATH, p), 2); /* a type, no mix */
    CHECK_EQ_INT(sh("'%s' synth -t 0 -o '%s' 2>/dev/null", KILN_CLI_PATH, p), 2);
}

static void llama_cpp_loads_the_result(void) {
    const char *path = out_path("synth_small.gguf");
    if (system("python3 -c 'import llama_cpp' >/dev/null 2>&1") != 0) {
        printf("SKIP llama_cpp_loads_the_result: the llama-cpp-python package is not installed "
               "(pip install llama-cpp-python to run this check)\n");
        return;
    }
    CHECK_EQ_INT(sh("python3 -c \"import llama_cpp,sys; m=llama_cpp.Llama(model_path=sys.argv[1], n_ctx=64, "
                    "verbose=False); assert m.n_vocab()==512; m.eval([1, 2, 3])\" '%s'%s",
                    path, " >/dev/null 2>&1"),
                 0);
}

int main(void) {
    RUN(writes_a_model_of_the_requested_shape_that_loads_and_runs);
    RUN(weights_are_normal_with_std_0_02_and_norms_are_one);
    RUN(the_same_seed_gives_the_same_file_and_another_seed_does_not);
    RUN(a_mix_written_directly_is_the_quantizers_file_of_the_f16_model);
    RUN(the_thread_count_does_not_change_the_bytes);
    RUN(bad_shapes_are_usage_errors);
    RUN(llama_cpp_loads_the_result);
    return harness_finish();
}
