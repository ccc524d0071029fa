/*
 * fuzz_tokenizer.c - libFuzzer target for the tokenizers and detokenizers: arbitrary bytes, valid UTF-8 or
 * not, through every tokenizer model Kiln implements, and arbitrary id sequences through the detokenizers.
 *
 * The vocabularies are every test vocab file (tests/data/vocab): SentencePiece (llama-spm, phi-3),
 * byte-level BPE with three pre-tokenizers (gpt-2, deepseek-coder, starcoder) and WordPiece (bert-bge).
 * Byte 0 of the input chooses what runs: bit 0 whether special tokens are parsed, bit 1 whether the rest is
 * text (0) or token ids (1: little-endian u16 pairs, each taken modulo n_vocab + 2 and shifted down by one,
 * so that -1 and n_vocab, just outside the vocabulary, occur too), and bits 2..7 which vocabulary (modulo
 * 6) and which other pre-tokenizer (modulo their count) run on it: one of each per input keeps the rate
 * of executions six times higher than running all, and the fuzzer reaches every choice through byte 0.
 * Text, with the chosen vocabulary:
 *   - tokenizing must succeed (it may only fail for lack of memory) and every id must be in the vocab;
 *   - asking with no buffer must report the count that tokenizing into a buffer then produces;
 *   - detokenizing the ids must succeed and yield valid UTF-8 (kiln_detokenize repairs bytes), and the
 *     streaming detokenizer fed the same ids one at a time must produce the same bytes;
 *   - byte-level BPE is lossless: without special parsing, the tokens' bytes concatenate to the input,
 *     provided the vocabulary spells every byte of it (starcoder's lacks C0, C1 and F5..FF, which
 *     llama.cpp drops as Kiln does).
 * Every other pre-tokenizer (llama-bpe, qwen2, deepseek-llm, falcon, default, ...) splits the text too, and
 * its words must tile the input exactly.
 * Ids, with the chosen vocabulary: kiln_detokenize fails with KILN_E_INVALID_ARG exactly when an id is
 * outside the vocabulary; otherwise it and the streaming detokenizer (which must refuse each bad id alone and
 * go on) give the same valid UTF-8. Any crash, sanitizer report, leak or trap is a bug.
 */
#include "kiln.h"
#include "tokenizer/pretok.h"
#include "tokenizer/vocab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_VOCABS 6
static const char *vocab_names[N_VOCABS] = {"llama-spm",      "phi-3",     "gpt-2",
                                            "deepseek-coder", "starcoder", "bert-bge"};
static kiln_vocab *vocabs[N_VOCABS];
static bool byte_spelled[N_VOCABS][256]; /* the byte alone tokenizes to itself */

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    for (size_t i = 0; i < N_VOCABS; i++) {
        char path[1024];
        kiln_gguf *g = NULL;
        snprintf(path, sizeof path, "%s/ggml-vocab-%s.gguf", KILN_FUZZ_VOCAB_DIR, vocab_names[i]);
        if (kiln_gguf_open(path, &g) != KILN_OK || kiln_vocab_create(g, &vocabs[i]) != KILN_OK) {
            fprintf(stderr, "fuzz_tokenizer: cannot load %s: %s\n", path, kiln_last_error());
            abort();
        }
        kiln_gguf_close(g);
        for (int b = 0; b < 256; b++) {
            char one = (char)b;
            int32_t ids[4];
            size_t n = 0;
            kiln__piece p = {"", 0, false};
            if (kiln_tokenize(vocabs[i], &one, 1, false, ids, 4, &n) == KILN_OK && n == 1)
                kiln__tokenizer_ops_get(vocabs[i])->piece(vocabs[i], ids[0], &p);
            byte_spelled[i][b] = p.len == 1 && p.data[0] == one;
        }
    }
    return 0;
}

static bool valid_utf8(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint8_t b = (uint8_t)s[i];
        size_t k = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC2 ? 2 : 0;
        if (k == 0 || i + k > n) return false;
        for (size_t j = 1; j < k; j++)
            if (((uint8_t)s[i + j] & 0xC0) != 0x80) return false;
        i += k;
    }
    return true;
}

/* The bytes of each token's piece, concatenated, must be the input (byte-level BPE only). */
static void check_lossless(const kiln_vocab *v, const int32_t *ids, size_t n, const char *text, size_t len) {
    const kiln__tokenizer_ops *ops = kiln__tokenizer_ops_get(v);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        kiln__piece p;
        ops->piece(v, ids[i], &p);
        if (p.len > len - at || memcmp(p.data, text + at, p.len) != 0) __builtin_trap();
        at += p.len;
    }
    if (at != len) __builtin_trap();
}

static bool all_spelled(size_t k, const char *text, size_t len) {
    for (size_t i = 0; i < len; i++)
        if (!byte_spelled[k][(uint8_t)text[i]]) return false;
    return true;
}

/* The streaming detokenizer fed ids one at a time, then flushed, gives `want` (want NULL: some ids are
 * bad; each must be refused alone, and the stream goes on over the rest). */
static void check_stream(const kiln_vocab *v, const int32_t *ids, size_t n, const char *want,
                         size_t want_len) {
    kiln_detok *d = NULL;
    kiln_str piece;
    size_t at = 0;
    int32_t n_vocab = kiln_vocab_n_tokens(v);
    if (kiln_detok_create(v, true, &d) != KILN_OK) return;
    for (size_t i = 0; i <= n; i++) {
        bool ok_id = i == n || (ids[i] >= 0 && ids[i] < n_vocab);
        kiln_status st = i < n ? kiln_detok_push(d, ids[i], &piece) : kiln_detok_flush(d, &piece);
        if (st == KILN_E_NOMEM) break;
        if (!ok_id) {
            if (st != KILN_E_INVALID_ARG) __builtin_trap();
            continue;
        }
        if (st != KILN_OK || !valid_utf8(piece.data, piece.len)) __builtin_trap();
        if (want && (piece.len > want_len - at || memcmp(piece.data, want + at, piece.len) != 0))
            __builtin_trap();
        at += piece.len;
    }
    if (want && at != want_len) __builtin_trap();
    kiln_detok_destroy(d);
}

static void run_vocab(size_t k, const char *text, size_t len, bool special) {
    const kiln_vocab *v = vocabs[k];
    size_t n = 0, again = 0, out_len = 0;
    /* First ask for the count alone, then tokenize into a buffer of exactly that size. */
    kiln_status st = kiln_tokenize_special(v, text, len, false, special, NULL, 0, &n);
    if (st == KILN_E_NOMEM) return;
    if (st != (n > 0 ? KILN_E_RANGE : KILN_OK)) __builtin_trap();
    int32_t *ids = malloc((n + 1) * sizeof *ids);
    if (!ids) return;
    st = kiln_tokenize_special(v, text, len, false, special, ids, n, &again);
    if (st == KILN_E_NOMEM) goto done;
    if (st != KILN_OK || again != n) __builtin_trap();
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= kiln_vocab_n_tokens(v)) __builtin_trap();
    if (v->kind == KILN__VOCAB_BPE && !special && all_spelled(k, text, len))
        check_lossless(v, ids, n, text, len);
    st = kiln_detokenize(v, ids, n, true, NULL, 0, &out_len);
    if (st != KILN_OK && st != KILN_E_RANGE) __builtin_trap();
    char *out = malloc(out_len + 1);
    if (!out) goto done;
    if (kiln_detokenize(v, ids, n, true, out, out_len + 1, &again) != KILN_OK || again != out_len)
        __builtin_trap();
    if (!valid_utf8(out, out_len)) __builtin_trap();
    check_stream(v, ids, n, out, out_len);
    free(out);
done:
    free(ids);
}

/* Ids (some possibly outside the vocabulary) through both detokenizers. */
static void run_ids(size_t k, const uint8_t *data, size_t size) {
    const kiln_vocab *v = vocabs[k];
    int32_t n_vocab = kiln_vocab_n_tokens(v);
    size_t n = size / 2, out_len = 0, again = 0;
    bool bad = false;
    int32_t *ids = malloc((n + 1) * sizeof *ids);
    if (!ids) return;
    for (size_t i = 0; i < n; i++) {
        ids[i] = (int32_t)((data[2 * i] | (uint32_t)data[2 * i + 1] << 8) % (uint32_t)(n_vocab + 2)) - 1;
        bad = bad || ids[i] < 0 || ids[i] >= n_vocab;
    }
    kiln_status st = kiln_detokenize(v, ids, n, true, NULL, 0, &out_len);
    if (bad) {
        if (st != KILN_E_INVALID_ARG || kiln_last_error()[0] == '\0') __builtin_trap();
        check_stream(v, ids, n, NULL, 0);
        free(ids);
        return;
    }
    if (st != KILN_OK && st != KILN_E_RANGE) __builtin_trap();
    char *out = malloc(out_len + 1);
    if (out) {
        if (kiln_detokenize(v, ids, n, true, out, out_len + 1, &again) != KILN_OK || again != out_len ||
            !valid_utf8(out, out_len))
            __builtin_trap();
        check_stream(v, ids, n, out, out_len);
        free(out);
    }
    free(ids);
}

static void run_pretok(kiln__pretok_kind kind, const char *text, size_t len) {
    uint32_t *bounds = NULL;
    size_t n = 0;
    if (kiln__pretok_split(kind, text, len, &bounds, &n) != KILN_OK) return;
    if (len > 0 && (n == 0 || bounds[0] != 0 || bounds[n] != len)) __builtin_trap();
    for (size_t i = 0; i < n; i++)
        if (bounds[i + 1] <= bounds[i]) __builtin_trap(); /* words are non-empty and in order */
    kiln_free(bounds);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    bool special = data[0] & 1;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    size_t k = (size_t)(data[0] >> 2) % N_VOCABS;
    int n_kinds = KILN__PRETOK_UNKNOWN - KILN__PRETOK_DEFAULT;
    if (data[0] & 2) {
        run_ids(k, data + 1, len);
        return 0;
    }
    run_vocab(k, text, len, special);
    run_pretok((kiln__pretok_kind)(KILN__PRETOK_DEFAULT + (data[0] >> 2) % n_kinds), text, len);
    return 0;
}
