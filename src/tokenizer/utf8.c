/*
 * utf8.c - see utf8.h. The accepted sequences are exactly those of Unicode Table 3-7: no overlong
 * forms (C0, C1, E0 80..9F, F0 80..8F), no surrogates (ED A0..BF), nothing above U+10FFFF (F4 90..,
 * F5..FF).
 */
#include "tokenizer/utf8.h"

#include <stdbool.h>
#include <string.h>

/* Start a character with lead byte b (not ASCII); returns false if b cannot start one. */
static bool start(kiln__utf8_joiner *j, uint8_t b) {
    uint8_t lo = 0x80, hi = 0xBF, need;
    if (b >= 0xC2 && b <= 0xDF) {
        need = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
        need = 3;
        if (b == 0xE0) lo = 0xA0;
        if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 4;
        if (b == 0xF0) lo = 0x90;
        if (b == 0xF4) hi = 0x8F;
    } else {
        return false;
    }
    j->held[0] = b;
    j->n_held = 1;
    j->need = need;
    j->lo = lo;
    j->hi = hi;
    return true;
}

static size_t put_replacement(uint8_t *out) {
    memcpy(out, KILN__UTF8_REPLACEMENT, 3);
    return 3;
}

size_t kiln__utf8_push(kiln__utf8_joiner *j, uint8_t byte, uint8_t out[KILN__UTF8_MAX_OUT]) {
    size_t n = 0;
    if (j->n_held > 0) {
        if (byte >= j->lo && byte <= j->hi) {
            j->held[j->n_held++] = byte;
            j->lo = 0x80;
            j->hi = 0xBF;
            if (j->n_held < j->need) return 0;
            memcpy(out, j->held, j->n_held);
            n = j->n_held;
            j->n_held = 0;
            return n;
        }
        /* The held prefix can never complete: replace it, then treat byte as a fresh start. */
        n = put_replacement(out);
        j->n_held = 0;
    }
    if (byte < 0x80) {
        out[n++] = byte;
    } else if (!start(j, byte)) {
        n += put_replacement(out + n);
    }
    return n;
}

size_t kiln__utf8_flush(kiln__utf8_joiner *j, uint8_t out[KILN__UTF8_MAX_OUT]) {
    if (j->n_held == 0) return 0;
    j->n_held = 0;
    return put_replacement(out);
}
