/*
 * fuzz_grammar.c - libFuzzer target for the grammar engine (src/grammar/): GBNF parsing, then matching.
 *
 * Input layout: the bytes up to the first 0xFF are grammar text (all of it when there is none); the bytes
 * after it are text to feed the matcher. Checks:
 *   - parsing either succeeds or fails with KILN_E_FORMAT and a message that names a line and column;
 *   - a parsed grammar's matcher takes the text in pieces of up to 3 bytes (splitting characters), each
 *     piece accepted or refused with KILN_E_INVALID_ARG / KILN_E_UNSUPPORTED and a message, and a refused
 *     piece leaves the state as it was (the same piece is refused again);
 *   - for inputs whose first byte is '#' (a comment, so any grammar can have it), the mask over the bundled
 *     model's 512-token vocabulary agrees with accepting its tokens: the lowest allowed token is accepted,
 *     and the end token is in the mask exactly when the matcher can end. (Masks for every input made the
 *     target six times slower; this keeps the parser's rate up and the masks in reach.)
 * Seeds: corpus/grammar; dictionary grammar.dict.
 */
#include "kiln.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static kiln_gguf *file;
static kiln_vocab *vocab;
static kiln_grammar_vocab *gvocab;

/* Made once per process and kept (libFuzzer's leak check counts only what one input leaks). */
static void load_vocab(void) {
    if (gvocab) return;
    if (kiln_gguf_open(KILN_FUZZ_BUNDLED_MODEL, &file) || kiln_vocab_create(file, &vocab) ||
        kiln_grammar_vocab_create(vocab, NULL, 0, &gvocab))
        abort();
}

static void check_masks(kiln_grammar_matcher *m) {
    for (int step = 0; step < 3; step++) {
        const uint32_t *bits;
        kiln_status st = kiln_grammar_matcher_mask(m, &bits);
        if (st != KILN_OK) {
            if (st != KILN_E_UNSUPPORTED || !kiln_last_error()[0]) __builtin_trap();
            return;
        }
        int32_t n = kiln_grammar_vocab_n_tokens(gvocab), eos = kiln_vocab_eos(vocab), first = -1;
        if (eos >= 0 && (bool)(bits[eos >> 5] >> (eos & 31) & 1u) != kiln_grammar_matcher_can_end(m))
            __builtin_trap();
        for (int32_t t = 0; t < n && first < 0; t++)
            if (t != eos && (bits[t >> 5] >> (t & 31) & 1u)) first = t;
        if (first < 0) return;
        if (kiln_grammar_matcher_accept(m, first) != KILN_OK) __builtin_trap();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    load_vocab();
    const uint8_t *sep = memchr(data, 0xFF, size);
    size_t glen = sep ? (size_t)(sep - data) : size;
    kiln_grammar *g = NULL;
    kiln_status st = kiln_grammar_parse((const char *)data, glen, &g);
    if (st != KILN_OK) {
        if (st != KILN_E_FORMAT || g || !strstr(kiln_last_error(), "grammar: ")) __builtin_trap();
        return 0;
    }
    kiln_grammar_matcher *m = NULL;
    if (kiln_grammar_matcher_create(g, gvocab, &m) != KILN_OK) {
        kiln_grammar_destroy(g);
        return 0; /* the start state may pass a matching limit */
    }
    const char *text = sep ? (const char *)sep + 1 : "";
    size_t tlen = sep ? size - glen - 1 : 0;
    for (size_t i = 0; i < tlen; i += 3) {
        size_t n = tlen - i < 3 ? tlen - i : 3;
        st = kiln_grammar_matcher_accept_text(m, text + i, n);
        if (st == KILN_OK) continue;
        if ((st != KILN_E_INVALID_ARG && st != KILN_E_UNSUPPORTED) || !kiln_last_error()[0]) __builtin_trap();
        if (kiln_grammar_matcher_accept_text(m, text + i, n) == KILN_OK) __builtin_trap();
        break;
    }
    if (size > 0 && data[0] == '#') check_masks(m);
    kiln_grammar_matcher_destroy(m);
    kiln_grammar_destroy(g);
    return 0;
}
