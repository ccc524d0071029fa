/*
 * pretok.h - pre-tokenizers of byte-level BPE vocabularies: splitting text into words before BPE.
 *
 * Each tokenizer.ggml.pre names a published list of regular expressions (llama.cpp's llama-vocab.cpp,
 * the models' tokenizer.json). They are applied in turn, as llama.cpp does: each expression splits every
 * piece made so far into its matches and the text between matches (kept as pieces too), scanning leftmost
 * first with the expression's alternatives in order. Kiln implements each expression as a hand-written
 * matcher over Unicode classes (pretok_rules.c) rather than with a regex engine.
 *
 * Bytes that are not well-formed UTF-8 are kept as they are (so tokenizing stays lossless) and are
 * classed like U+FFFD (a symbol), which is where llama.cpp's decoder turns them.
 */
#ifndef KILN_TOKENIZER_PRETOK_H
#define KILN_TOKENIZER_PRETOK_H

#include "core/core.h"

typedef enum kiln__pretok_kind {
    KILN__PRETOK_DEFAULT,
    KILN__PRETOK_GPT2, /* also mpt, olmo, phi-2, ... */
    KILN__PRETOK_LLAMA3,
    KILN__PRETOK_QWEN2,
    KILN__PRETOK_DEEPSEEK_LLM,
    KILN__PRETOK_DEEPSEEK_CODER,
    KILN__PRETOK_FALCON,
    KILN__PRETOK_STARCODER, /* also refact, command-r, smollm, ... */
    KILN__PRETOK_UNKNOWN,   /* a name Kiln does not know: tokenizing fails, naming it */
} kiln__pretok_kind;

/* The kind for a tokenizer.ggml.pre value (len bytes). An absent key means "default". */
kiln__pretok_kind kiln__pretok_from_name(const char *name, size_t len);

/* The known names, comma separated, for error messages. */
const char *kiln__pretok_known_names(void);

/* Text decoded into code points, with what the matchers need to know about each. */
typedef struct kiln__ptext {
    size_t n;       /* code points */
    uint32_t *cp;   /* (n) the code point, or KILN__UINVALID for an invalid byte */
    uint8_t *flags; /* (n) kiln__uflags of the code point (of U+FFFD for an invalid byte) */
    uint32_t *off;  /* (n + 1) byte offset where each code point starts; off[n] = the byte length */
} kiln__ptext;

/* A matcher: the length in code points of the expression's match starting at pos, where the piece being
 * split ends at end (the text beyond is invisible); 0 when nothing matches there. */
typedef size_t (*kiln__pretok_matcher)(const kiln__ptext *t, size_t pos, size_t end);

/* The matchers of a kind, in the order they apply (implemented in pretok_rules.c). */
size_t kiln__pretok_rules(kiln__pretok_kind kind, const kiln__pretok_matcher **out);

/* Split len bytes of text into words. On success *bounds (kiln__alloc'd, the caller frees) holds
 * *n_words + 1 byte offsets: word i is text[bounds[i], bounds[i + 1]). */
kiln_status kiln__pretok_split(kiln__pretok_kind kind, const char *text, size_t len, uint32_t **bounds,
                               size_t *n_words);

#endif /* KILN_TOKENIZER_PRETOK_H */
