/*
 * detok.c - turning token ids back into text: the streaming kiln_detok and the one-shot kiln_detokenize.
 *
 * Each token's piece (what it stands for, from the vocab kind's piece function) is fed byte by byte
 * through a UTF-8 repairer, so byte-fallback tokens join into characters across token boundaries, an
 * incomplete character is held back until it completes, and bytes that can never form valid UTF-8 come
 * out as U+FFFD. With strip_leading_space, a ' ' at the very start of the output (the space the
 * tokenizer prefixed) is dropped once; tokens that print nothing, such as BOS, do not count as a start.
 * Tokenizers that prefix no space (byte-level BPE) ignore strip_leading_space.
 */
#include "tokenizer/utf8.h"
#include "tokenizer/vocab.h"

#include <string.h>

#define SPACE_MARK "\xE2\x96\x81" /* U+2581 */

/* Bytes are stored while they fit and always counted. Writes are whole characters and never split, so
 * a truncated buffer holds the longest prefix of whole characters that fits. */
typedef struct byte_out {
    char *buf;
    size_t cap;
    size_t len;    /* bytes produced */
    size_t stored; /* bytes in buf: len, or less once truncated */
    bool truncated;
} byte_out;

typedef struct detok_state {
    kiln__utf8_joiner utf8;
    bool strip_pending;
} detok_state;

struct kiln_detok {
    const kiln_vocab *vocab; /* borrowed; must outlive the detok */
    const kiln__tokenizer_ops *ops;
    detok_state state;
    char *buf; /* (cap) the bytes of the latest push or flush */
    size_t cap;
};

static void emit(detok_state *s, byte_out *o, const uint8_t *bytes, size_t n) {
    if (n == 0) return;
    if (s->strip_pending) {
        s->strip_pending = false;
        if (bytes[0] == ' ') {
            bytes++;
            n--;
        }
    }
    if (n == 0) return;
    if (!o->truncated && n <= o->cap - o->len) {
        memcpy(o->buf + o->len, bytes, n);
        o->stored = o->len + n;
    } else {
        o->truncated = true;
    }
    o->len += n;
}

static void feed_byte(detok_state *s, byte_out *o, uint8_t byte) {
    uint8_t tmp[KILN__UTF8_MAX_OUT];
    emit(s, o, tmp, kiln__utf8_push(&s->utf8, byte, tmp));
}

static void feed_token(const kiln_vocab *vocab, const kiln__tokenizer_ops *ops, detok_state *s, byte_out *o,
                       int32_t id) {
    kiln__piece p;
    ops->piece(vocab, id, &p);
    for (size_t i = 0; i < p.len;) {
        if (p.unescape_spaces && p.len - i >= 3 && memcmp(p.data + i, SPACE_MARK, 3) == 0) {
            feed_byte(s, o, ' ');
            i += 3;
        } else {
            feed_byte(s, o, (uint8_t)p.data[i++]);
        }
    }
}

static void finish(detok_state *s, byte_out *o) {
    uint8_t tmp[KILN__UTF8_MAX_OUT];
    emit(s, o, tmp, kiln__utf8_flush(&s->utf8, tmp));
}

static kiln_status check_id(const kiln_vocab *vocab, int32_t id) {
    if (id < 0 || id >= vocab->n_tokens)
        return kiln__error(KILN_E_INVALID_ARG, "detokenize: token id %d is out of range [0, %d)", id,
                           vocab->n_tokens);
    return KILN_OK;
}

kiln_status kiln_detok_create(const kiln_vocab *vocab, bool strip_leading_space, kiln_detok **out) {
    if (!out) return kiln__error(KILN_E_INVALID_ARG, "kiln_detok_create: out is NULL");
    *out = NULL;
    if (!vocab) return kiln__error(KILN_E_INVALID_ARG, "kiln_detok_create: vocab is NULL");
    const kiln__tokenizer_ops *ops = kiln__tokenizer_ops_get(vocab);
    if (!ops) return KILN_E_UNSUPPORTED;
    /* One input byte yields at most two U+FFFD; pieces are token texts or the 5-byte unknown surface. */
    size_t longest = KILN__MAX(vocab->max_token_len, (size_t)8), cap;
    if (kiln__mul_overflow_size(longest, 6, &cap) || kiln__add_overflow_size(cap, KILN__UTF8_MAX_OUT, &cap))
        return kiln__error(KILN_E_RANGE, "kiln_detok_create: token texts are too long");
    kiln_detok *d = kiln__calloc(1, sizeof *d);
    char *buf = kiln__alloc(cap);
    if (!d || !buf) {
        kiln__dealloc(d);
        kiln__dealloc(buf);
        return kiln__nomem("the detokenizer");
    }
    d->vocab = vocab;
    d->ops = ops;
    d->state.strip_pending = strip_leading_space && ops->prefixes_space;
    d->buf = buf;
    d->cap = cap;
    *out = d;
    return KILN_OK;
}

void kiln_detok_destroy(kiln_detok *detok) {
    if (!detok) return;
    kiln__dealloc(detok->buf);
    kiln__dealloc(detok);
}

kiln_status kiln_detok_push(kiln_detok *detok, int32_t id, kiln_str *out) {
    if (!detok || !out) return kiln__error(KILN_E_INVALID_ARG, "kiln_detok_push: detok or out is NULL");
    out->data = detok->buf;
    out->len = 0;
    kiln_status st = check_id(detok->vocab, id);
    if (st != KILN_OK) return st;
    byte_out o = {detok->buf, detok->cap, 0, 0, false};
    feed_token(detok->vocab, detok->ops, &detok->state, &o, id);
    if (o.truncated)
        return kiln__error(KILN_E_INTERNAL, "kiln_detok_push: token %d overflowed the buffer", id);
    out->len = o.len;
    return KILN_OK;
}

kiln_status kiln_detok_flush(kiln_detok *detok, kiln_str *out) {
    if (!detok || !out) return kiln__error(KILN_E_INVALID_ARG, "kiln_detok_flush: detok or out is NULL");
    byte_out o = {detok->buf, detok->cap, 0, 0, false};
    finish(&detok->state, &o);
    out->data = detok->buf;
    out->len = o.len;
    return KILN_OK;
}

kiln_status kiln_detokenize(const kiln_vocab *vocab, const int32_t *ids, size_t n, bool strip_leading_space,
                            char *buf, size_t cap, size_t *n_out) {
    if (!vocab || !n_out) return kiln__error(KILN_E_INVALID_ARG, "kiln_detokenize: vocab or n_out is NULL");
    *n_out = 0;
    if (!ids && n > 0) return kiln__error(KILN_E_INVALID_ARG, "kiln_detokenize: ids is NULL but n is %zu", n);
    if (!buf && cap > 0)
        return kiln__error(KILN_E_INVALID_ARG, "kiln_detokenize: buf is NULL but cap is %zu", cap);
    const kiln__tokenizer_ops *ops = kiln__tokenizer_ops_get(vocab);
    if (!ops) return KILN_E_UNSUPPORTED;
    for (size_t i = 0; i < n; i++) {
        kiln_status st = check_id(vocab, ids[i]);
        if (st != KILN_OK) return kiln__error_prefix(st, "ids[%zu]: ", i);
    }
    detok_state s = {.strip_pending = strip_leading_space && ops->prefixes_space};
    byte_out o = {buf, cap > 0 ? cap - 1 : 0, 0, 0, false}; /* one byte kept for the terminator */
    for (size_t i = 0; i < n; i++)
        feed_token(vocab, ops, &s, &o, ids[i]);
    finish(&s, &o);
    *n_out = o.len;
    if (cap > 0) buf[o.stored] = '\0';
    if (o.truncated)
        return kiln__error(KILN_E_RANGE,
                           "kiln_detokenize: the text needs %zu bytes plus a terminator but the "
                           "buffer holds %zu",
                           o.len, cap);
    return KILN_OK;
}
