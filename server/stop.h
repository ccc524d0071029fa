/*
 * stop.h - stop strings over a stream of text pieces. Text is fed as the detokenizer produces it; what
 * comes back is the text that can be emitted now. A stop string is never emitted, and text that might be
 * the start of one (a suffix that is a proper prefix of some stop string) is held back until the next
 * piece decides it, so a stop split across tokens is caught. Once a stop matches, the text before it is
 * the last that comes back. Stop strings are matched as bytes; since a match starts where a stop's first
 * byte (a UTF-8 lead byte) matches, held-back text always starts on a character boundary.
 *
 * A ks_stop is used by one thread; its buffer grows only when a piece is larger than any seen before.
 */
#ifndef KILN_SERVER_STOP_H
#define KILN_SERVER_STOP_H

#include "kiln.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ks_stop {
    char **stops; /* [n] copies, NUL-terminated */
    size_t *lens; /* [n] */
    int32_t n;
    char *buf; /* held text at buf[held_at .. held_at + held) */
    size_t cap;
    size_t held_at, held;
    bool matched;
} ks_stop;

/* Copy n stop strings (each non-empty). */
kiln_status ks__stop_init(ks_stop *s, const char *const *stops, int32_t n);
void ks__stop_free(ks_stop *s);

/* Feed a piece; `final` says it is the last one, so nothing is held back. *emit receives the text that is
 * safe to emit now (valid until the next call on s; it may point into `text`). *matched is set when a stop
 * string appeared: *emit then ends right before it and the stream is over (later calls return nothing).
 * Fails only with KILN_E_NOMEM. */
kiln_status ks__stop_push(ks_stop *s, const char *text, size_t len, bool final, kiln_str *emit,
                          bool *matched);

#endif
