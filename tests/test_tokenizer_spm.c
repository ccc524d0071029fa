/*
 * test_tokenizer_spm.c - the SentencePiece tokenizer against llama.cpp's test-tokenizer-0 vectors
 * (tests/data/vocab, provenance in tests/data/README.md), the stories260K golden prompt, and small
 * synthetic vocabularies that pin tie-breaking, byte fallback and the failure modes.
 */
#include "harness.h"
#include "vocab_vectors.h"

#include <stdlib.h>
#include <time.h>


static void matches_llama_cpp_vectors_for_llama_spm(void) {
    CHECK_EQ_INT(vv_check("ggml-vocab-llama-spm.gguf", true), 46);
}

static void matches_llama_cpp_vectors_for_phi3(void) {
    CHECK_EQ_INT(vv_check("ggml-vocab-phi-3.gguf", true), 46);
}

static void tokenizes_the_stories_prompt_with_bos(void) {
    kiln_vocab *v = vv_load(KILN_MODEL_PATH);
    if (!v) return;
    int32_t ids[16];
    size_t n = 0;
    CHECK_OK(kiln_tokenize(v, "Once upon a time", 16, true, ids, 16, &n));
    const int32_t expected[] = {1, 403, 407, 261, 378};
    CHECK_EQ_INT(n, 5);
    for (size_t i = 0; i < 5 && i < n; i++)
        CHECK_EQ_INT(ids[i], expected[i]);
    kiln_vocab_destroy(v);
}

static void empty_text_gives_no_tokens_but_bos_if_asked(void) {
    kiln_vocab *v = vv_load(harness_data_path("vocab/ggml-vocab-llama-spm.gguf"));
    if (!v) return;
    int32_t ids[4] = {-1, -1, -1, -1};
    size_t n = 99;
    CHECK_OK(kiln_tokenize(v, "", 0, false, ids, 4, &n));
    CHECK_EQ_INT(n, 0);
    CHECK_OK(kiln_tokenize(v, NULL, 0, false, NULL, 0, &n));
    CHECK_EQ_INT(n, 0);
    CHECK_OK(kiln_tokenize(v, "", 0, true, ids, 4, &n));
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_INT(ids[0], 1);
    kiln_vocab_destroy(v);
}

static void reports_the_needed_count_when_the_buffer_is_short(void) {
    kiln_vocab *v = vv_load(harness_data_path("vocab/ggml-vocab-llama-spm.gguf"));
    if (!v) return;
    int32_t ids[2];
    size_t n = 0;
    CHECK_STATUS(kiln_tokenize(v, "Hello world", 11, true, ids, 2, &n), KILN_E_RANGE);
    CHECK_EQ_INT(n, 3); /* <s> ▁Hello ▁world */
    CHECK_EQ_INT(ids[0], 1);
    CHECK_STATUS(kiln_tokenize(v, "Hello world", 11, true, NULL, 0, &n), KILN_E_RANGE);
    CHECK_EQ_INT(n, 3);
    kiln_vocab_destroy(v);
}

static void falls_back_to_byte_tokens_for_unknown_and_invalid_bytes(void) {
    kiln_vocab *v = vv_load(harness_data_path("vocab/ggml-vocab-llama-spm.gguf"));
    if (!v) return;
    int32_t ids[8];
    size_t n = 0;
    /* 0xFF is not a UTF-8 lead byte: one character of one byte, <0xFF> = id 3 + 0xFF. */
    CHECK_OK(kiln_tokenize(v, "\xFF", 1, false, ids, 8, &n));
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(ids[0], 29871);
    CHECK_EQ_INT(ids[1], 3 + 0xFF);
    /* A truncated 3-byte lead at the end of the text is cut short, then spelled in bytes. */
    CHECK_OK(kiln_tokenize(v, "\xE2\x82", 2, false, ids, 8, &n));
    CHECK_EQ_INT(n, 3);
    CHECK_EQ_INT(ids[1], 3 + 0xE2);
    CHECK_EQ_INT(ids[2], 3 + 0x82);
    char text[32];
    size_t len = 0;
    CHECK_OK(kiln_detokenize(v, ids, n, true, text, sizeof text, &len));
    CHECK_STR(text, "\xEF\xBF\xBD"); /* the held prefix never completes */
    kiln_vocab_destroy(v);
}

static void handles_long_inputs_in_n_log_n(void) {
    kiln_vocab *v = vv_load(harness_data_path("vocab/ggml-vocab-llama-spm.gguf"));
    if (!v) return;
    const char *words[] = {"the ",  "quick ", "brown ", "fox ", "jumps ",
                           "über ", "🦙 ",  "\n",     "aaaa", "日本語 "};
    size_t cap = 1 << 18, len = 0;
    char *text = malloc(cap + 16);
    for (unsigned i = 0; len < cap; i = i * 1103515245u + 12345u) {
        const char *w = words[(i >> 16) % 10];
        memcpy(text + len, w, strlen(w));
        len += strlen(w);
    }
    size_t n = 0;
    clock_t t0 = clock();
    CHECK_STATUS(kiln_tokenize(v, text, len, false, NULL, 0, &n), KILN_E_RANGE);
    int32_t *ids = malloc(n * sizeof *ids);
    CHECK_OK(kiln_tokenize(v, text, len, false, ids, n, &n));
    double seconds = (double)(clock() - t0) / CLOCKS_PER_SEC;
    CHECK(seconds < 20.0); /* quadratic behaviour on 256 KiB would take far longer */
    char *back = malloc(len + 1);
    size_t back_len = 0;
    CHECK_OK(kiln_detokenize(v, ids, n, true, back, len + 1, &back_len));
    CHECK_EQ_INT(back_len, len);
    CHECK(memcmp(back, text, len) == 0);
    free(back);
    free(ids);
    free(text);
    kiln_vocab_destroy(v);
}

/* Random strings of valid UTF-8 pieces round-trip exactly; random raw bytes always tokenize to valid
 * ids and detokenize without error. */
static void round_trips_random_text_and_survives_random_bytes(void) {
    kiln_vocab *v = vv_load(harness_data_path("vocab/ggml-vocab-llama-spm.gguf"));
    if (!v) return;
    const char *pieces[] = {"a",   " ",    "  ", "\n", "\t", "\xC3\xA9", "\xF0\x9F\xA6\x99", "\xE6\x97\xA5",
                            "ing", "\x01", "<s>"};
    unsigned x = 12345;
    for (int round = 0; round < 2000; round++) {
        char text[256];
        size_t len = 0;
        bool raw = round % 2;
        x = x * 1103515245u + 12345u;
        size_t parts = (x >> 16) % 24;
        for (size_t k = 0; k < parts; k++) {
            x = x * 1103515245u + 12345u;
            if (raw) {
                text[len++] = (char)(x >> 16);
            } else {
                const char *pc = pieces[(x >> 16) % 11];
                memcpy(text + len, pc, strlen(pc));
                len += strlen(pc);
            }
        }
        int32_t ids[512];
        size_t n = 0, back_len = 0;
        char back[1024];
        CHECK_OK(kiln_tokenize(v, text, len, round % 3 == 0, ids, 512, &n));
        for (size_t i = 0; i < n; i++)
            CHECK(ids[i] >= 0 && ids[i] < 32000);
        CHECK_OK(kiln_detokenize(v, ids, n, true, back, sizeof back, &back_len));
        if (!raw && (back_len != len || memcmp(back, text, len) != 0))
            harness_fail(__FILE__, __LINE__, "round %d: \"%.*s\" came back as \"%s\"", round, (int)len, text,
                         back);
        if (harness_check_failures) break;
    }
    kiln_vocab_destroy(v);
}

/* A vocab written in memory: tokens with equal scores, and optionally no byte tokens or unknown token. */
static kiln_vocab *synthetic(const char **tokens, const float *scores, const int32_t *types, int n) {
    kiln_gguf_writer *w = NULL;
    kiln_str strs[16];
    void *mem = NULL;
    size_t size = 0;
    kiln_gguf *g = NULL;
    kiln_vocab *v = NULL;
    bool no = false;
    for (int i = 0; i < n; i++)
        strs[i] = (kiln_str){tokens[i], strlen(tokens[i])};
    CHECK_OK(kiln_gguf_writer_create(&w));
    if (!w) return NULL;
    CHECK_OK(kiln_gguf_writer_add_str(w, "tokenizer.ggml.model", "llama", 5));
    CHECK_OK(kiln_gguf_writer_add_str_array(w, "tokenizer.ggml.tokens", strs, (uint64_t)n));
    CHECK_OK(kiln_gguf_writer_add_array(w, "tokenizer.ggml.scores", KILN_GGUF_FLOAT32, scores, (uint64_t)n));
    CHECK_OK(kiln_gguf_writer_add_array(w, "tokenizer.ggml.token_type", KILN_GGUF_INT32, types, (uint64_t)n));
    CHECK_OK(kiln_gguf_writer_add_scalar(w, "tokenizer.ggml.add_space_prefix", KILN_GGUF_BOOL, &no));
    CHECK_OK(kiln_gguf_writer_write_memory(w, &mem, &size));
    kiln_gguf_writer_destroy(w);
    CHECK_OK(kiln_gguf_open_memory(mem, size, &g));
    if (g) CHECK_OK(kiln_vocab_create(g, &v));
    kiln_gguf_close(g);
    kiln_free(mem);
    return v;
}

static void merges_the_leftmost_pair_on_equal_scores(void) {
    const char *tokens[] = {"<unk>", "a", "b", "ab", "ba"};
    const float scores[] = {0, 0, 0, -1, -1};
    const int32_t types[] = {2, 1, 1, 1, 1};
    kiln_vocab *v = synthetic(tokens, scores, types, 5);
    if (!v) return;
    int32_t ids[8];
    size_t n = 0;
    CHECK_OK(kiln_tokenize(v, "aba", 3, false, ids, 8, &n)); /* "ab"+"a", not "a"+"ba" */
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(ids[0], 3);
    CHECK_EQ_INT(ids[1], 1);
    CHECK_OK(kiln_tokenize(v, "bab", 3, false, ids, 8, &n)); /* "ba"+"b" */
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(ids[0], 4);
    CHECK_EQ_INT(ids[1], 2);
    kiln_vocab_destroy(v);
}

static void merges_the_higher_score_first(void) {
    const char *tokens[] = {"<unk>", "a", "b", "ab", "ba"};
    const float scores[] = {0, 0, 0, -2, -1};
    const int32_t types[] = {2, 1, 1, 1, 1};
    kiln_vocab *v = synthetic(tokens, scores, types, 5);
    if (!v) return;
    int32_t ids[8];
    size_t n = 0;
    CHECK_OK(kiln_tokenize(v, "aba", 3, false, ids, 8, &n)); /* "a"+"ba" now */
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(ids[0], 1);
    CHECK_EQ_INT(ids[1], 4);
    kiln_vocab_destroy(v);
}

static void uses_unk_without_byte_tokens_and_fails_without_either(void) {
    const char *tokens[] = {"<unk>", "a"};
    const float scores[] = {0, 0};
    const int32_t with_unk[] = {2, 1}, without_unk[] = {1, 1};
    kiln_vocab *v = synthetic(tokens, scores, with_unk, 2);
    int32_t ids[8];
    size_t n = 0;
    if (v) {
        CHECK_OK(kiln_tokenize(v, "a\xC3\xA9", 3, false, ids, 8, &n));
        CHECK_EQ_INT(n, 3); /* a, then one unk per byte of é */
        CHECK_EQ_INT(ids[1], 0);
        CHECK_EQ_INT(ids[2], 0);
    }
    kiln_vocab_destroy(v);
    v = synthetic(tokens, scores, without_unk, 2);
    if (v) {
        CHECK_STATUS(kiln_tokenize(v, "x", 1, false, ids, 8, &n), KILN_E_UNSUPPORTED);
        CHECK_ERROR_MENTIONS("0x78");
    }
    kiln_vocab_destroy(v);
}

static void rejects_invalid_arguments(void) {
    kiln_vocab *v = vv_load(KILN_MODEL_PATH);
    int32_t ids[4];
    size_t n = 0;
    CHECK_STATUS(kiln_tokenize(NULL, "a", 1, false, ids, 4, &n), KILN_E_INVALID_ARG);
    if (!v) return;
    CHECK_STATUS(kiln_tokenize(v, "a", 1, false, ids, 4, NULL), KILN_E_INVALID_ARG);
    CHECK_STATUS(kiln_tokenize(v, NULL, 1, false, ids, 4, &n), KILN_E_INVALID_ARG);
    CHECK_STATUS(kiln_tokenize(v, "a", 1, false, NULL, 4, &n), KILN_E_INVALID_ARG);
    kiln_vocab_destroy(v);
}

int main(void) {
    RUN(matches_llama_cpp_vectors_for_llama_spm);
    RUN(matches_llama_cpp_vectors_for_phi3);
    RUN(tokenizes_the_stories_prompt_with_bos);
    RUN(empty_text_gives_no_tokens_but_bos_if_asked);
    RUN(reports_the_needed_count_when_the_buffer_is_short);
    RUN(falls_back_to_byte_tokens_for_unknown_and_invalid_bytes);
    RUN(handles_long_inputs_in_n_log_n);
    RUN(round_trips_random_text_and_survives_random_bytes);
    RUN(merges_the_leftmost_pair_on_equal_scores);
    RUN(merges_the_higher_score_first);
    RUN(uses_unk_without_byte_tokens_and_fails_without_either);
    RUN(rejects_invalid_arguments);
    return harness_finish();
}
