/*
 * test_tokenizer_bpe.c - byte-level BPE ("gpt2" vocabularies) and its pre-tokenizers.
 *
 * References computed by others: llama.cpp's test-tokenizer-0 vectors for gpt-2, deepseek-coder and
 * starcoder (tests/data/vocab, made with the Hugging Face tokenizers), and word splits of every supported
 * pre-tokenizer computed with Python's `regex` module from the published expressions
 * (tests/data/vocab/pretok_splits.py -> pretok_splits.txt). Small synthetic vocabularies pin merge order,
 * ignore_merges, special tokens and the failure modes.
 */
#include "tokenizer/pretok.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"
#include "vocab_vectors.h"

#include <stdlib.h>
#include <time.h>

static void matches_llama_cpp_vectors_and_round_trips_for_gpt2(void) {
    CHECK_EQ_INT(vv_check("ggml-vocab-gpt-2.gguf", true), 46);
}

static void matches_llama_cpp_vectors_and_round_trips_for_deepseek_coder(void) {
    CHECK_EQ_INT(vv_check("ggml-vocab-deepseek-coder.gguf", true), 46);
}

static void matches_llama_cpp_vectors_and_round_trips_for_starcoder(void) {
    CHECK_EQ_INT(vv_check("ggml-vocab-starcoder.gguf", true), 46);
}

/* Categories per the Unicode Character Database (as Python's unicodedata reports them); White_Space per
 * PropList.txt, which excludes U+001C..U+001F although Python's str.isspace() accepts them. */
static void classifies_code_points_like_the_unicode_database(void) {
    const struct {
        uint32_t cp;
        uint8_t flags;
    } cases[] = {
        {0x41, KILN__UCLASS_LETTER},
        {0x661, KILN__UCLASS_NUMBER},
        {0x2163, KILN__UCLASS_NUMBER},
        {0xBF, KILN__UCLASS_PUNCT},
        {0x1F600, KILN__UCLASS_SYMBOL},
        {0x301, KILN__UCLASS_MARK},
        {0x4E2D, KILN__UCLASS_LETTER},
        {0xE000, KILN__UCLASS_OTHER},
        {0x10FFFF, KILN__UCLASS_UNASSIGNED},
        {0x1C, KILN__UCLASS_OTHER},
        {0x85, KILN__UCLASS_OTHER | KILN__UFLAG_SPACE},
        {0xA0, KILN__UCLASS_SEPARATOR | KILN__UFLAG_SPACE},
        {0x2028, KILN__UCLASS_SEPARATOR | KILN__UFLAG_SPACE},
        {0x3000, KILN__UCLASS_SEPARATOR | KILN__UFLAG_SPACE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (kiln__uflags(cases[i].cp) != cases[i].flags)
            harness_fail(__FILE__, __LINE__, "U+%04X: flags %d, expected %d", cases[i].cp,
                         kiln__uflags(cases[i].cp), cases[i].flags);
    CHECK_EQ_INT(kiln__ulower(0x2163), 0x2173);     /* Ⅳ -> ⅳ */
    CHECK_EQ_INT(kiln__ulower(0x130), 'i');         /* İ lowercases to "i̇"; the first code point */
    CHECK_EQ_INT(kiln__unfd_first(0xE9), 'e');      /* é */
    CHECK_EQ_INT(kiln__unfd_first(0xD55C), 0x1112); /* 한 -> ᄒ + ... */
    CHECK_EQ_INT(kiln__unfd_first(0x4E2D), 0x4E2D);
}

static size_t unhex(const char *hex, size_t n, char *out) {
    size_t k = 0;
    for (size_t i = 0; i + 1 < n; i += 2) {
        unsigned v = 0;
        sscanf(hex + i, "%2x", &v);
        out[k++] = (char)v;
    }
    return k;
}

/* One line of pretok_splits.txt: kind, input, pieces (hex UTF-8). Returns false on a mismatch. */
static bool check_split_line(char *line, int lineno) {
    char *kind = strtok(line, " "), *input_hex = strtok(NULL, " "), *pieces_hex = strtok(NULL, " \n");
    if (!kind || !input_hex) return false;
    char text[512], piece[512];
    size_t len = unhex(input_hex, strlen(input_hex), text);
    uint32_t *bounds = NULL;
    size_t n_words = 0;
    kiln__pretok_kind k = kiln__pretok_from_name(kind, strlen(kind));
    CHECK(k != KILN__PRETOK_UNKNOWN);
    CHECK_OK(kiln__pretok_split(k, text, len, &bounds, &n_words));
    bool ok = true;
    size_t w = 0;
    for (char *p = pieces_hex; p && *p && ok; w++) {
        char *comma = strchr(p, ',');
        size_t hex_len = comma ? (size_t)(comma - p) : strlen(p);
        size_t n = unhex(p, hex_len, piece);
        ok = w < n_words && bounds[w + 1] - bounds[w] == n && memcmp(text + bounds[w], piece, n) == 0;
        p = comma ? comma + 1 : NULL;
    }
    ok = ok && w == n_words;
    if (!ok)
        harness_fail(__FILE__, __LINE__, "pretok_splits.txt line %d: %s splits \"%.*s\" differently", lineno,
                     kind, (int)len, text);
    free(bounds);
    return ok;
}

static void splits_words_like_the_published_expressions_of_every_pre_tokenizer(void) {
    char *all = harness_read_file(harness_data_path("vocab/pretok_splits.txt"), NULL);
    CHECK(all != NULL);
    if (!all) return;
    int lines = 0, passed = 0;
    for (char *save = NULL, *line = strtok_r(all, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char copy[4096];
        snprintf(copy, sizeof copy, "%s", line);
        passed += check_split_line(copy, ++lines);
    }
    CHECK_EQ_INT(lines, 300); /* 10 pre-tokenizers x 30 inputs */
    CHECK_EQ_INT(passed, lines);
    free(all);
}

/* A small "gpt2" vocabulary: the 256 byte spellings (ids 0..255 in byte order), then `extra` tokens. */
static kiln_vocab *tiny_bpe(const char *pre, const char **extra, const int32_t *extra_types, int n_extra,
                            const char **merges, int n_merges) {
    static char spell[256][4];
    kiln_str toks[300], ms[16];
    int32_t types[300];
    for (int b = 0; b < 256; b++) {
        bool kept = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        uint32_t cp = (uint32_t)b;
        if (!kept) {
            cp = 256;
            for (int k = 0; k < b; k++)
                cp += !((k >= '!' && k <= '~') || (k >= 0xA1 && k <= 0xAC) || k >= 0xAE);
        }
        size_t n = cp < 0x80 ? 1 : 2;
        if (n == 1)
            spell[b][0] = (char)cp;
        else
            spell[b][0] = (char)(0xC0 | (cp >> 6)), spell[b][1] = (char)(0x80 | (cp & 0x3F));
        toks[b] = (kiln_str){spell[b], n};
        types[b] = KILN_TOKEN_NORMAL;
    }
    for (int i = 0; i < n_extra; i++) {
        toks[256 + i] = (kiln_str){extra[i], strlen(extra[i])};
        types[256 + i] = extra_types ? extra_types[i] : KILN_TOKEN_NORMAL;
    }
    for (int i = 0; i < n_merges; i++)
        ms[i] = (kiln_str){merges[i], strlen(merges[i])};
    kiln_gguf_writer *w = NULL;
    kiln_gguf *g = NULL;
    kiln_vocab *v = NULL;
    void *mem = NULL;
    size_t size = 0;
    CHECK_OK(kiln_gguf_writer_create(&w));
    CHECK_OK(kiln_gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2", 4));
    if (pre) CHECK_OK(kiln_gguf_writer_add_str(w, "tokenizer.ggml.pre", pre, strlen(pre)));
    CHECK_OK(kiln_gguf_writer_add_str_array(w, "tokenizer.ggml.tokens", toks, (uint64_t)(256 + n_extra)));
    CHECK_OK(kiln_gguf_writer_add_array(w, "tokenizer.ggml.token_type", KILN_GGUF_INT32, types,
                                        (uint64_t)(256 + n_extra)));
    if (merges) CHECK_OK(kiln_gguf_writer_add_str_array(w, "tokenizer.ggml.merges", ms, (uint64_t)n_merges));
    CHECK_OK(kiln_gguf_writer_write_memory(w, &mem, &size));
    kiln_gguf_writer_destroy(w);
    CHECK_OK(kiln_gguf_open_memory(mem, size, &g));
    if (g) CHECK_OK(kiln_vocab_create(g, &v));
    kiln_gguf_close(g);
    kiln_free(mem);
    return v;
}

static size_t tok(const kiln_vocab *v, const char *text, bool special, int32_t *ids, size_t cap) {
    size_t n = 0;
    CHECK_OK(kiln_tokenize_special(v, text, strlen(text), false, special, ids, cap, &n));
    return n;
}

static void applies_merges_by_rank_not_by_position(void) {
    const char *extra[] = {"ab", "bc", "abc"}, *merges[] = {"b c", "a b", "a bc"};
    kiln_vocab *v = tiny_bpe("gpt-2", extra, NULL, 3, merges, 3);
    if (!v) return;
    int32_t ids[8];
    /* "b c" (rank 0) beats "a b" (rank 1) although "a b" is further left; then "a bc" applies. */
    CHECK_EQ_INT(tok(v, "abc", false, ids, 8), 1);
    CHECK_EQ_INT(ids[0], 258);
    /* There is no merge "a a", so "aab" is a + ab. */
    CHECK_EQ_INT(tok(v, "aab", false, ids, 8), 2);
    CHECK_EQ_INT(ids[0], 'a');
    CHECK_EQ_INT(ids[1], 256);
    kiln_vocab_destroy(v);
}

static void breaks_rank_ties_towards_the_left(void) {
    const char *extra[] = {"aa"}, *merges[] = {"a a"};
    kiln_vocab *v = tiny_bpe("gpt-2", extra, NULL, 1, merges, 1);
    if (!v) return;
    int32_t ids[8];
    CHECK_EQ_INT(tok(v, "aaa", false, ids, 8), 2); /* (aa)(a), not (a)(aa) */
    CHECK_EQ_INT(ids[0], 256);
    CHECK_EQ_INT(ids[1], 'a');
    kiln_vocab_destroy(v);
}

static void emits_whole_word_tokens_without_merges_only_for_llama3(void) {
    const char *extra[] = {"abc"}, *merges[] = {"x y"};
    kiln_vocab *v = tiny_bpe("llama-bpe", extra, NULL, 1, merges, 1),
               *g = tiny_bpe("gpt-2", extra, NULL, 1, merges, 1);
    int32_t ids[8];
    if (v) {
        CHECK_EQ_INT(tok(v, "abc", false, ids, 8), 1);
        CHECK_EQ_INT(ids[0], 256);
    }
    if (g) CHECK_EQ_INT(tok(g, "abc", false, ids, 8), 3);
    kiln_vocab_destroy(v);
    kiln_vocab_destroy(g);
}

static void splits_out_control_tokens_only_when_parsing_specials(void) {
    kiln_vocab *v = vv_load(harness_data_path("vocab/ggml-vocab-starcoder.gguf"));
    if (!v) return;
    int32_t ids[32];
    const char *text = "a<fim_prefix>b";
    size_t n = tok(v, text, true, ids, 32);
    CHECK_EQ_INT(n, 3);
    CHECK_EQ_INT(ids[1], 1); /* <fim_prefix> */
    CHECK_EQ_INT(kiln_vocab_find_token(v, "<fim_prefix>", 12), 1);
    CHECK_EQ_INT(kiln_vocab_token_attr(v, 1), KILN_TOKEN_CONTROL);
    n = tok(v, text, false, ids, 32);
    CHECK(n > 3);
    for (size_t i = 0; i < n && i < 32; i++)
        CHECK(ids[i] != 1);
    char out[64];
    size_t len = 0;
    const int32_t with_control[] = {ids[0], 1, ids[n - 1]};
    CHECK_OK(kiln_detokenize(v, with_control, 3, true, out, sizeof out, &len));
    CHECK_STR(out, "ab"); /* control tokens print nothing */
    kiln_vocab_destroy(v);
}

static void always_splits_out_user_defined_tokens(void) {
    const char *extra[] = {"<tool>"};
    const int32_t types[] = {KILN_TOKEN_USER_DEFINED};
    const char *merges[] = {"a b"};
    kiln_vocab *v = tiny_bpe("gpt-2", extra, types, 1, merges, 1);
    if (!v) return;
    int32_t ids[16];
    CHECK_EQ_INT(tok(v, "x<tool>y", false, ids, 16), 3);
    CHECK_EQ_INT(ids[1], 256);
    char out[32];
    size_t len = 0;
    CHECK_OK(kiln_detokenize(v, ids, 3, false, out, sizeof out, &len));
    CHECK_STR(out, "x<tool>y");
    kiln_vocab_destroy(v);
}

static void keeps_every_byte_of_invalid_utf8(void) {
    kiln_vocab *v = vv_load(harness_data_path("vocab/ggml-vocab-gpt-2.gguf"));
    if (!v) return;
    srand(7);
    for (int round = 0; round < 200; round++) {
        char text[64], back[256];
        size_t len = (size_t)(rand() % 63) + 1, n = 0, m = 0;
        for (size_t i = 0; i < len; i++)
            text[i] = (char)(rand() % 256);
        int32_t ids[128];
        CHECK_OK(kiln_tokenize(v, text, len, false, ids, 128, &n));
        for (size_t i = 0; i < n && i < 128; i++) { /* each token's bytes, concatenated */
            CHECK(ids[i] >= 0 && ids[i] < kiln_vocab_n_tokens(v));
            memcpy(back + m, v->pieces[ids[i]].data, v->pieces[ids[i]].len);
            m += v->pieces[ids[i]].len;
        }
        if (m != len || memcmp(back, text, len) != 0) {
            harness_fail(__FILE__, __LINE__, "round %d: %zu bytes came back as %zu", round, len, m);
            break;
        }
    }
    kiln_vocab_destroy(v);
}

static void reports_an_unknown_pre_tokenizer_by_name_but_still_detokenizes(void) {
    const char *extra[] = {"ab"}, *merges[] = {"a b"};
    kiln_vocab *v = tiny_bpe("mystery-pre", extra, NULL, 1, merges, 1);
    if (!v) return;
    int32_t ids[4] = {256, 0, 0, 0};
    size_t n = 0;
    CHECK_STATUS(kiln_tokenize(v, "ab", 2, false, ids, 4, &n), KILN_E_UNSUPPORTED);
    CHECK_ERROR_MENTIONS("'mystery-pre'");
    CHECK_ERROR_MENTIONS("llama-bpe");
    char out[8];
    CHECK_OK(kiln_detokenize(v, ids, 1, false, out, sizeof out, &n));
    CHECK_STR(out, "ab");
    kiln_vocab_destroy(v);
}

static void uses_the_default_pre_tokenizer_when_the_key_is_absent(void) {
    const char *extra[] = {"12"}, *merges[] = {"1 2"};
    kiln_vocab *v = tiny_bpe(NULL, extra, NULL, 1, merges, 1);
    if (!v) return;
    CHECK_STR(v->pre, "default");
    int32_t ids[8];
    CHECK_EQ_INT(tok(v, "12", false, ids, 8), 1);
    kiln_vocab_destroy(v);
}

static void fails_without_merges_and_rejects_malformed_ones(void) {
    const char *extra[] = {"ab"}, *bad[] = {"ab"};
    kiln_vocab *v = tiny_bpe("gpt-2", extra, NULL, 1, NULL, 0);
    int32_t ids[4];
    size_t n = 0;
    if (v) {
        CHECK_STATUS(kiln_tokenize(v, "ab", 2, false, ids, 4, &n), KILN_E_FORMAT);
        CHECK_ERROR_MENTIONS("tokenizer.ggml.merges");
    }
    kiln_vocab_destroy(v);
    kiln_str ms[1] = {{bad[0], 2}};
    kiln_gguf_writer *w = NULL;
    void *mem = NULL;
    size_t size = 0;
    kiln_gguf *g = NULL;
    kiln_str toks[1] = {{"a", 1}};
    CHECK_OK(kiln_gguf_writer_create(&w));
    CHECK_OK(kiln_gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2", 4));
    CHECK_OK(kiln_gguf_writer_add_str_array(w, "tokenizer.ggml.tokens", toks, 1));
    CHECK_OK(kiln_gguf_writer_add_str_array(w, "tokenizer.ggml.merges", ms, 1));
    CHECK_OK(kiln_gguf_writer_write_memory(w, &mem, &size));
    CHECK_OK(kiln_gguf_open_memory(mem, size, &g));
    if (g) {
        CHECK_STATUS(kiln_vocab_create(g, &v), KILN_E_FORMAT);
        CHECK_ERROR_MENTIONS("tokenizer.ggml.merges[0] = 'ab'");
    }
    kiln_gguf_close(g);
    kiln_free(mem);
    kiln_gguf_writer_destroy(w);
}

static void tokenizes_long_and_adversarial_text_quickly(void) {
    kiln_vocab *v = vv_load(harness_data_path("vocab/ggml-vocab-gpt-2.gguf"));
    if (!v) return;
    size_t len = 1 << 18;
    char *text = malloc(len);
    int32_t *ids = malloc(len * sizeof *ids);
    const char *kinds[] = {" ", "a", "1", "\n", "!"};
    clock_t t0 = clock();
    for (size_t k = 0; k < 5 && text && ids; k++) {
        for (size_t i = 0; i < len; i++)
            text[i] = kinds[k][0];
        size_t n = 0;
        CHECK_OK(kiln_tokenize(v, text, len, false, ids, len, &n));
        CHECK(n > 0 && n <= len);
    }
    double seconds = (double)(clock() - t0) / CLOCKS_PER_SEC;
    CHECK(seconds < 20.0); /* generous for sanitizer builds; about 0.1 s plain */
    free(text);
    free(ids);
    kiln_vocab_destroy(v);
}

int main(void) {
    RUN(matches_llama_cpp_vectors_and_round_trips_for_gpt2);
    RUN(matches_llama_cpp_vectors_and_round_trips_for_deepseek_coder);
    RUN(matches_llama_cpp_vectors_and_round_trips_for_starcoder);
    RUN(classifies_code_points_like_the_unicode_database);
    RUN(splits_words_like_the_published_expressions_of_every_pre_tokenizer);
    RUN(applies_merges_by_rank_not_by_position);
    RUN(breaks_rank_ties_towards_the_left);
    RUN(emits_whole_word_tokens_without_merges_only_for_llama3);
    RUN(splits_out_control_tokens_only_when_parsing_specials);
    RUN(always_splits_out_user_defined_tokens);
    RUN(keeps_every_byte_of_invalid_utf8);
    RUN(reports_an_unknown_pre_tokenizer_by_name_but_still_detokenizes);
    RUN(uses_the_default_pre_tokenizer_when_the_key_is_absent);
    RUN(fails_without_merges_and_rejects_malformed_ones);
    RUN(tokenizes_long_and_adversarial_text_quickly);
    return harness_finish();
}
