/*
 * vocab.h - the internal shape of a vocabulary and the seam where tokenizer algorithms plug in.
 *
 * A kiln_vocab owns copies of everything it read from the GGUF file (token texts, scores, types), so the
 * file may be closed once the vocab is built. Lookup of a text is a hash probe, never a scan.
 *
 * Each tokenizer model ("llama" = SentencePiece in spm.c, "gpt2" = byte-level BPE in bpe.c, "bert" =
 * WordPiece in wpm.c) provides one kiln__tokenizer_ops: a tokenize function that turns text into ids, and a
 * piece function that says which bytes a token stands for when detokenizing. tokenize.c holds the table and
 * splits special tokens out of the text first (special.c); adding a tokenizer means adding a file beside
 * spm.c and one row there.
 */
#ifndef KILN_TOKENIZER_VOCAB_H
#define KILN_TOKENIZER_VOCAB_H

#include "core/core.h"
#include "tokenizer/pretok.h"

typedef enum kiln__vocab_kind {
    KILN__VOCAB_SPM,  /* "llama": SentencePiece-style merges by score, byte fallback */
    KILN__VOCAB_BPE,  /* "gpt2": byte-level BPE with a merges list and a pre-tokenizer */
    KILN__VOCAB_WPM,  /* "bert": WordPiece */
    KILN__VOCAB_UGM,  /* "t5": Unigram (recognized; tokenizing is unsupported) */
    KILN__VOCAB_RWKV, /* "rwkv": greedy trie (recognized; tokenizing is unsupported) */
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
    bool add_eos; /* a whole sequence ends with EOS ([SEP] for WordPiece) */
    bool add_space_prefix;

    /* Special tokens: every CONTROL, USER_DEFINED and UNKNOWN token with a non-empty text, longest first. */
    int32_t *specials; /* (n_specials) */
    int32_t n_specials;

    /* Byte-level BPE only (NULL / 0 otherwise). */
    char *pre;                /* tokenizer.ggml.pre, NUL-terminated; "default" when the key is absent */
    kiln__pretok_kind pretok; /* KILN__PRETOK_UNKNOWN for a name Kiln does not know */
    bool ignore_merges;       /* a word that is a token is emitted whole (Llama 3) */
    int32_t n_merges;         /* -1 when tokenizer.ggml.merges is absent */
    kiln_str *merges;         /* (n_merges) "left right", pointing into merge_blob */
    char *merge_blob;
    int32_t *merge_buckets; /* (merge_mask + 1) open-addressing table of merge ranks, -1 = empty */
    size_t merge_mask;
    kiln_str *pieces; /* (n_tokens) the bytes each token's text stands for, in piece_blob */
    char *piece_blob;
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
    /* Append the ids for len bytes of text (no BOS; the caller adds it). at_start is set for the first piece
     * of text and for text that follows a special token (SentencePiece adds its space prefix there). */
    kiln_status (*tokenize)(const kiln_vocab *vocab, const char *text, size_t len, bool at_start,
                            kiln__token_sink *sink);
    /* Describe token id (already range-checked); an empty piece means the token prints nothing. */
    void (*piece)(const kiln_vocab *vocab, int32_t id, kiln__piece *out);
    /* The tokenizer puts a space before the text (SentencePiece, WordPiece), which the detokenizer's
     * strip_leading_space removes; byte-level BPE adds none, so nothing is stripped. */
    bool prefixes_space;
} kiln__tokenizer_ops;

/* The operations for the vocab's model, or NULL (with an error set naming the model) when Kiln cannot
 * tokenize with it yet. */
const kiln__tokenizer_ops *kiln__tokenizer_ops_get(const kiln_vocab *vocab);

/* Implemented in spm.c. */
kiln_status kiln__spm_tokenize(const kiln_vocab *vocab, const char *text, size_t len, bool at_start,
                               kiln__token_sink *sink);
void kiln__spm_piece(const kiln_vocab *vocab, int32_t id, kiln__piece *out);

/* Implemented in bpe.c. kiln__bpe_prepare reads tokenizer.ggml.pre and tokenizer.ggml.merges and decodes
 * every token's text to bytes; kiln_vocab_create calls it for "gpt2" vocabularies. */
kiln_status kiln__bpe_prepare(const kiln_gguf *gguf, kiln_vocab *vocab);
kiln_status kiln__bpe_tokenize(const kiln_vocab *vocab, const char *text, size_t len, bool at_start,
                               kiln__token_sink *sink);
void kiln__bpe_piece(const kiln_vocab *vocab, int32_t id, kiln__piece *out);
/* The rank of merging left and right (encoded texts), or -1. */
int32_t kiln__bpe_merge_rank(const kiln_vocab *vocab, const char *left, size_t left_len, const char *right,
                             size_t right_len);

/* Implemented in wpm.c. */
kiln_status kiln__wpm_tokenize(const kiln_vocab *vocab, const char *text, size_t len, bool at_start,
                               kiln__token_sink *sink);

/* Implemented in special.c: the special-token list (called by kiln_vocab_create), and splitting text at
 * special tokens. */
kiln_status kiln__specials_build(kiln_vocab *vocab);

typedef struct kiln__fragment {
    int32_t token;   /* a special token, or -1 for raw text */
    size_t off, len; /* raw text: bytes [off, off + len) of the input */
} kiln__fragment;

/* Split text at special tokens, as llama.cpp's tokenizer_st_partition: longer specials first, each
 * occurrence cut out of the raw text around it. USER_DEFINED tokens are always split out; CONTROL and
 * UNKNOWN ones only when parse_special is set. *out (kiln__alloc'd, the caller frees) receives *n_out
 * fragments in text order. */
kiln_status kiln__special_partition(const kiln_vocab *vocab, const char *text, size_t len, bool parse_special,
                                    kiln__fragment **out, size_t *n_out);

/* FNV-1a over bytes, continuing from h (start with KILN__FNV_BASIS). */
#define KILN__FNV_BASIS 0xcbf29ce484222325u
static inline uint64_t kiln__fnv1a(uint64_t h, const char *s, size_t len) {
    for (size_t i = 0; i < len; i++) {
        h ^= (uint8_t)s[i];
        h *= 0x100000001b3u;
    }
    return h;
}

#endif /* KILN_TOKENIZER_VOCAB_H */
