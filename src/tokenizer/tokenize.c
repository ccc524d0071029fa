/*
 * tokenize.c - the public kiln_tokenize and the table that picks a tokenizer for each vocab kind.
 *
 * Only SentencePiece ("llama") is implemented. The other kinds a vocab can load as have no row here
 * yet, so tokenizing or detokenizing with them fails with KILN_E_UNSUPPORTED naming the model.
 */
#include "tokenizer/vocab.h"

static const kiln__tokenizer_ops spm_ops = {kiln__spm_tokenize, kiln__spm_piece};

const kiln__tokenizer_ops *kiln__tokenizer_ops_get(const kiln_vocab *vocab) {
    switch (vocab->kind) {
    case KILN__VOCAB_SPM: return &spm_ops;
    case KILN__VOCAB_BPE:
    case KILN__VOCAB_WPM:
    case KILN__VOCAB_UGM:
    case KILN__VOCAB_RWKV: break;
    }
    kiln__error(KILN_E_UNSUPPORTED, "tokenizer model '%s' is not implemented yet (only 'llama' is)",
                vocab->model);
    return NULL;
}

kiln_status kiln_tokenize(const kiln_vocab *vocab, const char *text, size_t len, bool add_bos, int32_t *ids,
                          size_t cap, size_t *n_out) {
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
        kiln_status st = ops->tokenize(vocab, text, len, &sink);
        if (st != KILN_OK) return st;
    }
    *n_out = sink.n;
    if (sink.n > cap)
        return kiln__error(KILN_E_RANGE, "kiln_tokenize: the text needs %zu tokens but the buffer holds %zu",
                           sink.n, cap);
    return KILN_OK;
}
