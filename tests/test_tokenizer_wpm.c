/*
 * test_tokenizer_wpm.c - WordPiece ("bert" vocabularies).
 *
 * The reference is llama.cpp's test-tokenizer-0 vectors for bert-bge (tests/data/vocab, made with the
 * Hugging Face tokenizer), plus behaviours of BERT's basic tokenizer stated in its paper and code:
 * lowercasing, accent stripping, punctuation and CJK ideographs as words of their own, [UNK] for a word
 * with no spelling.
 */
#include "tokenizer/vocab.h"
#include "vocab_vectors.h"

static void matches_llama_cpp_vectors_for_bert_bge(void) {
    CHECK_EQ_INT(vv_check("ggml-vocab-bert-bge.gguf", false), 46);
}

static size_t tok(const kiln_vocab *v, const char *text, int32_t *ids, size_t cap) {
    size_t n = 0;
    CHECK_OK(kiln_tokenize(v, text, strlen(text), false, ids, cap, &n));
    return n;
}

static int32_t id_of(const kiln_vocab *v, const char *text) {
    return kiln_vocab_find_token(v, text, strlen(text));
}

static void lowercases_and_strips_accents(void) {
    kiln_vocab *v = vv_load(harness_data_path("vocab/ggml-vocab-bert-bge.gguf"));
    if (!v) return;
    int32_t a[16], b[16];
    size_t na = tok(v, "CAFÉ Naïve", a, 16), nb = tok(v, "cafe naive", b, 16);
    CHECK_EQ_INT(na, nb);
    CHECK(na == nb && memcmp(a, b, na * sizeof *a) == 0);
    kiln_vocab_destroy(v);
}

static void makes_punctuation_and_ideographs_words_of_their_own(void) {
    kiln_vocab *v = vv_load(harness_data_path("vocab/ggml-vocab-bert-bge.gguf"));
    if (!v) return;
    int32_t ids[16];
    CHECK_EQ_INT(tok(v, "hi,there!", ids, 16), 4);
    CHECK_EQ_INT(ids[0], id_of(v, "\xE2\x96\x81hi"));
    CHECK_EQ_INT(ids[1], id_of(v, "\xE2\x96\x81,"));
    CHECK_EQ_INT(ids[2], id_of(v, "\xE2\x96\x81there"));
    CHECK_EQ_INT(ids[3], id_of(v, "\xE2\x96\x81!"));
    CHECK_EQ_INT(tok(v, "\xE4\xB8\xAD\xE6\x96\x87", ids, 16), 2); /* 中文: one word per ideograph */
    kiln_vocab_destroy(v);
}

static void continues_words_with_hash_pieces_and_detokenizes_them_joined(void) {
    kiln_vocab *v = vv_load(harness_data_path("vocab/ggml-vocab-bert-bge.gguf"));
    if (!v) return;
    int32_t ids[16];
    size_t n = tok(v, "tokenization", ids, 16);
    CHECK(n >= 2); /* "▁token" + continuation pieces ("##ization" stored as "ization") */
    CHECK_EQ_INT(ids[0], id_of(v, "\xE2\x96\x81token"));
    char out[64];
    size_t len = 0;
    CHECK_OK(kiln_detokenize(v, ids, n, true, out, sizeof out, &len));
    CHECK_STR(out, "tokenization");
    kiln_vocab_destroy(v);
}

static void spells_a_word_without_pieces_as_unknown(void) {
    kiln_vocab *v = vv_load(harness_data_path("vocab/ggml-vocab-bert-bge.gguf"));
    if (!v) return;
    int32_t ids[16];
    /* U+1F9D9 (a mage emoji) is a symbol glued into the word; the word has no spelling. */
    CHECK_EQ_INT(tok(v, "ok x\xF0\x9F\xA7\x99", ids, 16), 2);
    CHECK_EQ_INT(ids[1], 100); /* [UNK] */
    kiln_vocab_destroy(v);
}

static void drops_controls_and_invalid_bytes(void) {
    kiln_vocab *v = vv_load(harness_data_path("vocab/ggml-vocab-bert-bge.gguf"));
    if (!v) return;
    int32_t a[16], b[16];
    size_t na = tok(v, "he\x01l\xFFlo\xE2\x80\x8B", a, 16), nb = tok(v, "hello", b, 16);
    CHECK_EQ_INT(na, nb);
    CHECK(na == nb && memcmp(a, b, na * sizeof *a) == 0);
    kiln_vocab_destroy(v);
}

int main(void) {
    RUN(matches_llama_cpp_vectors_for_bert_bge);
    RUN(lowercases_and_strips_accents);
    RUN(makes_punctuation_and_ideographs_words_of_their_own);
    RUN(continues_words_with_hash_pieces_and_detokenizes_them_joined);
    RUN(spells_a_word_without_pieces_as_unknown);
    RUN(drops_controls_and_invalid_bytes);
    return harness_finish();
}
