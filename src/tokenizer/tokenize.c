/*
 * tokenize.c - the public kiln_tokenize / kiln_tokenize_special and the table that picks a tokenizer for
 * each vocab kind.
 *
 * Text first goes through the special-token partition (special.c); each raw fragment then goes to the
 * vocab kind's tokenizer and each special fragment becomes its token. "llama" (SentencePiece), "gpt2"
 * (byte-level BPE) and "bert" (WordPiece) are implemented; "t5" and "rwkv" load but tokenizing or
 * detokenizing with them fails with KILN_E_UNSUPPORTED naming the model.
 */
#include "tokenizer/vocab.h"

static const kiln__tokenizer_ops spm_ops = {kiln__spm_tokenize, kiln__spm_piece, true};
static const kiln__tokenizer_ops bpe_ops = {kiln__bpe_tokenize, kiln__bpe_piece, false};
static const kiln__tokenizer_ops wpm_ops = {kiln__wpm_tokenize, kiln__spm_piece, true};

const kiln__tokenizer_ops *kiln__tokenizer_ops_get(const kiln_vocab *vocab) {
    switch (vocab->kind) {
    case KILN__VOCAB_SPM: return &spm_ops;
    case KILN__VOCAB_BPE: return &bpe_ops;
    case KILN__VOCAB_WPM: return &wpm_ops;
    case KILN__VOCAB_UGM:
    case KILN__VOCAB_RWKV: break;
    }
    kiln__error(KILN_E_UNSUPPORTED, "tokenizer model '%s' is not supported (llama, gpt2 and bert are)",
                vocab->model);
    return NULL;
}

static kiln_status tokenize_fragments(const kiln_vocab *vocab, const kiln__tokenizer_ops *ops,
                                      const char *text, size_t len, bool parse_special,
                                      kiln__token_sink *sink) {
    kiln__fragment *frags = NULL;
    size_t n = 0;
    kiln_status st = kiln__special_partition(vocab, text, len, parse_special, &frags, &n);
    bool at_start = true;
    for (size_t i = 0; i < n && st == KILN_OK; i++) {
        if (frags[i].token >= 0) {
            kiln__sink_push(sink, frags[i].token);
            at_start = true;
        } else {
            st = ops->tokenize(vocab, text + frags[i].off, frags[i].len, at_start, sink);
            at_start = false;
        }
    }
    kiln__dealloc(frags);
    return st;
}

kiln_status kiln_tokenize_special(const kiln_vocab *vocab, const char *text, size_t len, bool add_bos,
                                  bool parse_special, int32_t *ids, size_t cap, size_t *n_out) {
    if (!vocab || !n_out) return kiln__error(KILN_E_INVALID_ARG, "kiln_tokenize: vocab or n_out is NULL");
    *n_out = 0;
    if (!text && len > 0)
        return kiln__error(KILN_E_INVALID_ARG, "kiln_tokenize: text is NULL but len is %zu", len);
    if (!ids && cap > 0)
        return kiln__error(KILN_E_INVALID_ARG, "kiln_tokenize: ids is NULL but cap is %zu", cap);
    const kiln__tokenizer_ops *ops = kiln__tokenizer_ops_get(vocab);
    if (!ops) return KILN_E_UNSUPPORTED;

    kiln__token_sink sink = {ids, cap, 0};
    if (add_bos && vocab->bos >= 0) kiln__sink_push(&sink, vocab->bos);
    if (len > 0) {
        kiln_status st = tokenize_fragments(vocab, ops, text, len, parse_special, &sink);
        if (st != KILN_OK) return st;
    }
    *n_out = sink.n;
    if (sink.n > cap)
        return kiln__error(KILN_E_RANGE, "kiln_tokenize: the text needs %zu tokens but the buffer holds %zu",
                           sink.n, cap);
    return KILN_OK;
}

kiln_status kiln_tokenize(const kiln_vocab *vocab, const char *text, size_t len, bool add_bos, int32_t *ids,
                          size_t cap, size_t *n_out) {
    return kiln_tokenize_special(vocab, text, len, add_bos, false, ids, cap, n_out);
}
