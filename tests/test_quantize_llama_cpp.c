/*
 * test_quantize_llama_cpp.c - files written by kiln_quantize_file load in llama.cpp, and llama.cpp's
 * greedy continuation of them is Kiln's. It uses the llama-cpp-python package through python3; when
 * that is absent (CI), the test prints loudly why it is skipped and passes.
 */
#include "harness.h"

#include <stdlib.h>

#define TMP(name) KILN_TEST_TMP "/quantize_llama_cpp_" name

static bool llama_cpp_available(void) {
    return system("python3 -c 'import llama_cpp' >/dev/null 2>&1") == 0;
}

/* Kiln's greedy continuation of the prompt (12 tokens) as text. */
static void kiln_greedy_text(const char *path, char *out, size_t cap) {
    kiln_model *m = NULL;
    kiln_ctx *ctx = NULL;
    kiln_ctx_params cp = kiln_ctx_params_default();
    int32_t ids[32];
    size_t n = 0, len = 0;
    const float *logits;
    cp.n_ctx = 64;
    out[0] = '\0';
    CHECK_OK(kiln_model_load(path, &m));
    if (!m) return;
    CHECK_OK(kiln_ctx_create(m, &cp, &ctx));
    CHECK_OK(kiln_tokenize(kiln_model_vocab(m), "Once upon a time", 16, true, ids, 32, &n));
    int32_t gen[12];
    if (ctx && kiln_ctx_decode(ctx, ids, (int32_t)n, &logits) == KILN_OK) {
        for (int i = 0; i < 12; i++) {
            int32_t best = 0;
            for (int32_t v = 1; v < kiln_model_n_vocab(m); v++)
                if (logits[v] > logits[best]) best = v;
            gen[i] = best;
            if (kiln_ctx_decode(ctx, &best, 1, &logits)) break;
        }
        CHECK_OK(kiln_detokenize(kiln_model_vocab(m), gen, 12, false, out, cap, &len));
    }
    kiln_ctx_destroy(ctx);
    kiln_model_destroy(m);
}

static void llama_cpp_loads_every_mix_and_continues_it_like_kiln(void) {
    static const char *const mixes[] = {"Q4_K_M", "Q5_K_M", "Q4_K_S", "Q3_K_M", "Q2_K", "Q6_K", "Q8_0", "Q4_0"};
    if (!llama_cpp_available()) {
        printf("    SKIPPED: the llama-cpp-python package is not installed (pip install llama-cpp-python);\n"
               "    the files Kiln quantizes were NOT checked against llama.cpp's loader in this run\n");
        return;
    }
    for (size_t i = 0; i < sizeof mixes / sizeof mixes[0]; i++) {
        kiln_quantize_params p = kiln_quantize_params_default();
        char cmd[1024], ours[256];
        size_t size;
        CHECK_OK(kiln_quant_mix_parse(mixes[i], &p.mix));
        CHECK_OK(kiln_quantize_file(KILN_MODEL_PATH, TMP("mix.gguf"), &p, NULL, NULL));
        snprintf(cmd, sizeof cmd,
                 "python3 -c \"import llama_cpp,sys; l=llama_cpp.Llama(model_path='%s', n_ctx=64, verbose=False); "
                 "sys.stdout.write(l('Once upon a time', max_tokens=12, temperature=0)['choices'][0]['text'])\" "
                 "> %s 2>/dev/null",
                 TMP("mix.gguf"), TMP("out.txt"));
        CHECK_EQ_INT(system(cmd), 0);
        char *theirs = harness_read_file(TMP("out.txt"), &size);
        kiln_greedy_text(TMP("mix.gguf"), ours, sizeof ours);
        printf("    %-6s llama.cpp: \"%s\"\n", mixes[i], theirs ? theirs : "(nothing)");
        CHECK(theirs && size > 0);
        /* llama.cpp returns the text after the prompt without Kiln's leading-space handling. */
        if (theirs && strstr(ours, theirs) == NULL && strstr(theirs, ours) == NULL)
            harness_fail(__FILE__, __LINE__, "%s: llama.cpp continues \"%s\", Kiln \"%s\"", mixes[i], theirs, ours);
        free(theirs);
    }
    remove(TMP("mix.gguf"));
    remove(TMP("out.txt"));
}

int main(void) {
    RUN(llama_cpp_loads_every_mix_and_continues_it_like_kiln);
    return harness_finish();
}
