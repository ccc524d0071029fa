/*
 * stop.c - holding back text that may begin a stop string (stop.h). After each piece the buffer holds
 * only the longest suffix that is a proper prefix of some stop, so it never exceeds the longest stop
 * string plus the largest piece; a search for whole stops therefore only has to look at held + new text.
 */
#include "stop.h"
#include "error.h"

#include <stdlib.h>
#include <string.h>

kiln_status ks__stop_init(ks_stop *s, const char *const *stops, int32_t n) {
    memset(s, 0, sizeof *s);
    if (n <= 0) return KILN_OK;
    s->stops = calloc((size_t)n, sizeof *s->stops);
    s->lens = calloc((size_t)n, sizeof *s->lens);
    if (!s->stops || !s->lens) goto nomem;
    size_t longest = 0;
    for (int32_t i = 0; i < n; i++) {
        size_t len = strlen(stops[i]);
        s->stops[i] = malloc(len + 1);
        if (!s->stops[i]) goto nomem;
        memcpy(s->stops[i], stops[i], len + 1);
        s->lens[i] = len;
        s->n = i + 1;
        if (len > longest) longest = len;
    }
    s->cap = 2 * longest + 64;
    s->buf = malloc(s->cap);
    if (!s->buf) goto nomem;
    return KILN_OK;
nomem:
    ks__stop_free(s);
    return kiln__error(KILN_E_NOMEM, "stop strings: copying %d strings", n);
}

void ks__stop_free(ks_stop *s) {
    for (int32_t i = 0; s->stops && i < s->n; i++)
        free(s->stops[i]);
    free(s->stops);
    free(s->lens);
    free(s->buf);
    memset(s, 0, sizeof *s);
}

/* The earliest position in buf[0..len) where a whole stop string starts, or -1. */
static long earliest_stop(const ks_stop *s, const char *buf, size_t len) {
    long best = -1;
    for (int32_t i = 0; i < s->n; i++) {
        const char *at = memmem(buf, len, s->stops[i], s->lens[i]);
        if (at && (best < 0 || at - buf < best)) best = at - buf;
    }
    return best;
}

/* The length of the longest suffix of buf[0..len) that is a proper prefix of some stop string. */
static size_t partial_stop(const ks_stop *s, const char *buf, size_t len) {
    size_t hold = 0;
    for (int32_t i = 0; i < s->n; i++) {
        size_t k = s->lens[i] - 1 < len ? s->lens[i] - 1 : len;
        for (; k > hold; k--)
            if (memcmp(buf + len - k, s->stops[i], k) == 0) break;
        if (k > hold) hold = k;
    }
    return hold;
}

kiln_status ks__stop_push(ks_stop *s, const char *text, size_t len, bool final, kiln_str *emit,
                          bool *matched) {
    emit->data = "";
    emit->len = 0;
    *matched = s->matched;
    if (s->matched) return KILN_OK;
    if (s->n == 0) {
        emit->data = text;
        emit->len = len;
        return KILN_OK;
    }
    memmove(s->buf, s->buf + s->held_at, s->held);
    s->held_at = 0;
    if (s->held + len > s->cap) {
        size_t cap = 2 * (s->held + len);
        char *grown = realloc(s->buf, cap);
        if (!grown) return kiln__error(KILN_E_NOMEM, "stop strings: holding back %zu bytes of text", cap);
        s->buf = grown;
        s->cap = cap;
    }
    if (len) memcpy(s->buf + s->held, text, len);
    size_t total = s->held + len;
    long at = earliest_stop(s, s->buf, total);
    if (at >= 0) {
        s->matched = *matched = true;
        s->held = 0;
        emit->data = s->buf;
        emit->len = (size_t)at;
        return KILN_OK;
    }
    s->held = final ? 0 : partial_stop(s, s->buf, total);
    s->held_at = total - s->held;
    emit->data = s->buf;
    emit->len = total - s->held;
    return KILN_OK;
}
