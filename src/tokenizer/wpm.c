/*
 * wpm.c - WordPiece ("bert" vocabularies) with llama.cpp's semantics, which its test vectors pin.
 *
 * The GGUF converter stores a word-initial piece "word" as "▁word" (U+2581) and a continuation "##ing" as
 * "ing"; special tokens such as "[CLS]" are kept as they are.
 *
 * 1. Decode the text (each invalid UTF-8 byte is U+FFFD) and replace every code point by the first code
 *    point of its NFD form, which drops precomposed accents ("é" becomes "e").
 * 2. Split into words: White_Space ends a word; NUL, U+FFFD and control/format/private-use code points
 *    are dropped; punctuation, ASCII symbols and CJK ideographs are words of their own; anything else is
 *    lowercased and appended to the current word.
 * 3. Each word, prefixed with "▁", is cut greedily from the left into the longest tokens (at most the
 *    longest token's length). If some position has no token, the whole word becomes the unknown token.
 *
 * Detokenizing uses the SentencePiece piece rule (spm.c): "▁" prints as a space; WordPiece is lossy
 * (lowercasing, accents, spacing around punctuation), so text does not round-trip in general.
 */
#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"

#include <string.h>

#define SPACE_MARK "\xE2\x96\x81" /* U+2581 */

static bool is_chinese_char(uint32_t c) {
    /* The ranges of BERT's _is_chinese_char, with 0x2B920 as Hugging Face's Rust code has it. */
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) ||
           (c >= 0x2B920 && c <= 0x2CEAF) || (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* Cut one word (word[0..len), starting with "▁") into tokens, or the unknown token. */
static kiln_status emit_word(const kiln_vocab *v, const char *word, size_t len, kiln__token_sink *sink) {
    size_t start = sink->n;
    for (size_t i = 0; i < len;) {
        size_t j = KILN__MIN(len, i + v->max_token_len);
        int32_t id = -1;
        for (; j > i && id < 0; j--)
            id = kiln__vocab_find(v, word + i, j - i);
        if (id < 0) {
            sink->n = start; /* discard the word's pieces */
            if (v->unk < 0)
                return kiln__error(KILN_E_UNSUPPORTED,
                                   "tokenize: the word '%.*s' has no WordPiece spelling and the vocabulary "
                                   "has no unknown token",
                                   (int)KILN__MIN(len, 64), word);
            kiln__sink_push(sink, v->unk);
            return KILN_OK;
        }
        kiln__sink_push(sink, id);
        i = j + 1;
    }
    return KILN_OK;
}

typedef struct word_buf {
    char *data;
    size_t len; /* 3 = just the "▁" prefix, i.e. empty */
} word_buf;

static kiln_status flush_word(const kiln_vocab *v, word_buf *w, kiln__token_sink *sink) {
    kiln_status st = KILN_OK;
    if (w->len > 3) st = emit_word(v, w->data, w->len, sink);
    w->len = 3;
    return st;
}

/* What step 2 does with one code point (already NFD-mapped). */
static kiln_status add_code_point(const kiln_vocab *v, uint32_t cp, word_buf *w, kiln__token_sink *sink) {
    uint8_t flags = kiln__uflags(cp), cls = flags & KILN__UFLAG_CLASS;
    if (flags & KILN__UFLAG_SPACE) return flush_word(v, w, sink);
    if (cp == 0 || cp == 0xFFFD || cls == KILN__UCLASS_OTHER) return KILN_OK;
    bool alone =
        cls == KILN__UCLASS_PUNCT || (cp < 0x7F && cls == KILN__UCLASS_SYMBOL) || is_chinese_char(cp);
    kiln_status st = alone ? flush_word(v, w, sink) : KILN_OK;
    if (st != KILN_OK) return st;
    w->len += kiln__utf8_encode(kiln__ulower(cp), w->data + w->len);
    return alone ? flush_word(v, w, sink) : KILN_OK;
}

kiln_status kiln__wpm_tokenize(const kiln_vocab *vocab, const char *text, size_t len, bool at_start,
                               kiln__token_sink *sink) {
    (void)at_start;
    size_t cap;
    if (kiln__mul_overflow_size(len, 4, &cap) || kiln__add_overflow_size(cap, 3, &cap))
        return kiln__error(KILN_E_RANGE, "tokenize: text of %zu bytes is too long", len);
    word_buf w = {kiln__alloc(cap), 3};
    if (!w.data) return kiln__nomem("tokenizer scratch");
    memcpy(w.data, SPACE_MARK, 3);
    kiln_status st = KILN_OK;
    for (size_t i = 0; i < len && st == KILN_OK;) {
        uint32_t cp;
        i += kiln__utf8_decode((const uint8_t *)text + i, len - i, &cp);
        st = add_code_point(vocab, cp == KILN__UINVALID ? 0xFFFD : kiln__unfd_first(cp), &w, sink);
    }
    if (st == KILN_OK) st = flush_word(vocab, &w, sink);
    kiln__dealloc(w.data);
    return st;
}
