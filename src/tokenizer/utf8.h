/*
 * utf8.h - an incremental UTF-8 repairer: bytes go in one at a time, complete well-formed characters
 * come out, and every maximal ill-formed subsequence becomes one U+FFFD (the Unicode "best practice"
 * for substitution). Used by the detokenizer so that byte-fallback tokens join into characters across
 * token boundaries and the output is always valid UTF-8.
 */
#ifndef KILN_TOKENIZER_UTF8_H
#define KILN_TOKENIZER_UTF8_H

#include <stddef.h>
#include <stdint.h>

#define KILN__UTF8_REPLACEMENT "\xEF\xBF\xBD" /* U+FFFD */
#define KILN__UTF8_MAX_OUT 8                  /* the most bytes one push or flush can produce */

typedef struct kiln__utf8_joiner {
    uint8_t held[4]; /* the incomplete character so far */
    uint8_t n_held;
    uint8_t need;   /* its total length once complete */
    uint8_t lo, hi; /* the range the next byte must fall in */
} kiln__utf8_joiner;

/* Feed one byte; writes what became complete to out and returns the number of bytes written. */
size_t kiln__utf8_push(kiln__utf8_joiner *j, uint8_t byte, uint8_t out[KILN__UTF8_MAX_OUT]);

/* End of input: a held incomplete character becomes U+FFFD. Returns the bytes written to out. */
size_t kiln__utf8_flush(kiln__utf8_joiner *j, uint8_t out[KILN__UTF8_MAX_OUT]);

#endif /* KILN_TOKENIZER_UTF8_H */
