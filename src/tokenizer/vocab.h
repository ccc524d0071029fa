/*
 * vocab.h - the internal shape of a vocabulary and the seam where tokenizer algorithms plug in.
 *
 * A kiln_vocab owns copies of everything it read from the GGUF file (token texts, scores, types), so the
 * file may be closed once the vocab is built. Lookup of a text is a hash probe, never a scan.
 *
 * Each tokenizer model ("llama" = SentencePiece today; "gpt2" = byte-level BPE and "bert" = WordPiece
 * later) provides one kiln__tokenizer_ops: a tokenize function that turns text into ids, and a piece
 * function that says which bytes a token stands for when detokenizing. tokenize.c holds the table;
 * adding a tokenizer means adding a file beside spm.c and one row there.
 */
#ifndef KILN_TOKENIZER_VOCAB_H
#define KILN_TOKENIZER_VOCAB_H

#include "core/core.h"

typedef enum kiln__vocab_kind {
    KILN__VOCAB_SPM,  /* "llama": SentencePiece-style merges by score, byte fallback */
    KILN__VOCAB_BPE,  /* "gpt2": byte-level BPE with a merges list (not implemented yet) */
    KILN__VOCAB_WPM,  /* "bert": WordPiece (not implemented yet) */
    KILN__VOCAB_UGM,  /* "t5": Unigram (not implemented yet) */
    KILN__VOCAB_RWKV, /* "rwkv": greedy trie tokenizer (not implemented yet) */
} kiln__vocab_kind;

struct kiln_vocab {
    kiln__vocab_kind kind;
    char *model;         /* the tokenizer.ggml.model string, NUL-terminated */
    int32_t n_tokens;    /* >= 1 */
    kiln_str *texts;     /* (n_tokens) each points into blob and is also NUL-terminated there */
    char *blob;          /* every token text, back to back */
    float *scores;       /* (n_tokens) merge priority; 0 when the file has none */
    uint8_t *attrs;      /* (n_tokens) kiln_token_attr */
    int16_t *token_byte; /* (n_tokens) the byte a BYTE token "<0xXX>" stands for, else -1 */
    int32_t *buckets;    /* (bucket_mask + 1) open-addressing table of ids, -1 = empty */
    size_t bucket_mask;
    size_t max_token_len;     /* the longest token text in bytes */
    int32_t byte_to_id[256];  /* token for a raw byte: "<0xXX>", else the 1-byte text, else unk, else -1 */
    uint8_t byte_values[256]; /* byte_values[b] == b: storage that pieces of byte tokens point at */
    int32_t bos, eos, unk;    /* -1 when absent */
    bool add_bos;
    bool add_space_prefix;
};

/* The id whose text is exactly s[0..len), or -1. When a file repeats a text, the last id wins. */
int32_t kiln__vocab_find(const kiln_vocab *vocab, const char *s, size_t len);

/* Where tokenizer output goes: ids are stored while they fit in cap and always counted in n. */
typedef struct kiln__token_sink {
    int32_t *ids;
    size_t cap;
    size_t n;
} kiln__token_sink;

static inline void kiln__sink_push(kiln__token_sink *sink, int32_t id) {
    if (sink->n < sink->cap) sink->ids[sink->n] = id;
    sink->n++;
}

/* The bytes a token contributes to detokenized text. When unescape_spaces is set, each U+2581 in the
 * piece stands for one ' '. */
typedef struct kiln__piece {
    const char *data; /* borrowed from the vocab */
    size_t len;
    bool unescape_spaces;
} kiln__piece;

typedef struct kiln__tokenizer_ops {
    /* Append the ids for len bytes of text (no BOS; the caller adds it). */
    kiln_status (*tokenize)(const kiln_vocab *vocab, const char *text, size_t len, kiln__token_sink *sink);
    /* Describe token id (already range-checked); an empty piece means the token prints nothing. */
    void (*piece)(const kiln_vocab *vocab, int32_t id, kiln__piece *out);
} kiln__tokenizer_ops;

/* The operations for the vocab's model, or NULL (with an error set naming the model) when Kiln cannot
 * tokenize with it yet. */
const kiln__tokenizer_ops *kiln__tokenizer_ops_get(const kiln_vocab *vocab);

/* Implemented in spm.c. */
kiln_status kiln__spm_tokenize(const kiln_vocab *vocab, const char *text, size_t len, kiln__token_sink *sink);
void kiln__spm_piece(const kiln_vocab *vocab, int32_t id, kiln__piece *out);

#endif /* KILN_TOKENIZER_VOCAB_H */
