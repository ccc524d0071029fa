/*
 * onnx_wire.c - a bounded reader of the protobuf wire format, as much of it as ONNX files use: varints
 * (at most 10 bytes, the 10th at most 1), 32- and 64-bit little-endian fixed fields, and length-delimited
 * fields whose length must fit in what remains of the enclosing message. Group wire types (3, 4, long
 * deprecated and never written by ONNX) and field number 0 are errors. Repeated scalars are read packed
 * or unpacked, as protobuf parsers must accept both. Nothing here reads past the bytes it was given; every
 * error names the message, the field and the byte offset in the image.
 */
#include "import/onnx/onnx_internal.h"

#include "core/core.h"

#include <string.h>

/* A varint at p[0..n); returns bytes used, 0 when it runs past n or is malformed (*bad set for malformed). */
static size_t read_varint(const uint8_t *p, size_t n, uint64_t *v, bool *bad) {
    uint64_t x = 0;
    *bad = false;
    for (size_t i = 0; i < 10; i++) {
        if (i >= n) return 0;
        if (i == 9 && p[i] > 1) {
            *bad = true;
            return 0;
        }
        x |= (uint64_t)(p[i] & 0x7f) << (7 * i);
        if (!(p[i] & 0x80)) {
            *v = x;
            return i + 1;
        }
    }
    *bad = true;
    return 0;
}

static uint64_t le(const uint8_t *p, size_t n) {
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++)
        x |= (uint64_t)p[i] << (8 * i);
    return x;
}

static kiln_status varint_error(const kiln__pb *c, bool bad, const char *what, const char *part) {
    size_t at = c->at + c->pos;
    if (bad)
        return kiln__error(KILN_E_FORMAT,
                           "%s: bad varint (%s) at byte offset %zu: over 10 bytes or above 2^64", what, part,
                           at);
    return kiln__error(KILN_E_FORMAT, "%s: truncated varint (%s) at byte offset %zu: the message ends", what,
                       part, at);
}

kiln_status kiln__pb_next(kiln__pb *c, const char *what, kiln__pb_field *f, bool *done) {
    uint64_t key, len;
    bool bad;
    size_t used, left = c->size - c->pos;
    *done = left == 0;
    if (*done) return KILN_OK;
    f->at = c->at + c->pos;
    used = read_varint(c->base + c->pos, left, &key, &bad);
    if (!used) return varint_error(c, bad, what, "field key");
    if (key >> 3 == 0 || key >> 3 > 0x1fffffffu)
        return kiln__error(KILN_E_FORMAT, "%s: field number %llu at byte offset %zu is out of range", what,
                           (unsigned long long)(key >> 3), f->at);
    c->pos += used;
    left -= used;
    f->number = (uint32_t)(key >> 3);
    f->wire = (uint32_t)(key & 7);
    f->data = NULL;
    f->len = 0;
    f->v = 0;
    switch (f->wire) {
    case KILN__PB_VARINT:
        used = read_varint(c->base + c->pos, left, &f->v, &bad);
        if (!used) return varint_error(c, bad, what, "value");
        c->pos += used;
        return KILN_OK;
    case KILN__PB_I64:
    case KILN__PB_I32: {
        size_t n = f->wire == KILN__PB_I64 ? 8 : 4;
        if (left < n)
            return kiln__error(KILN_E_FORMAT,
                               "%s: field %u at byte offset %zu needs %zu bytes, %zu remain in the message",
                               what, f->number, f->at, n, left);
        f->v = le(c->base + c->pos, n);
        c->pos += n;
        return KILN_OK;
    }
    case KILN__PB_LEN:
        used = read_varint(c->base + c->pos, left, &len, &bad);
        if (!used) return varint_error(c, bad, what, "length");
        c->pos += used;
        left -= used;
        if (len > left)
            return kiln__error(KILN_E_FORMAT,
                               "%s: field %u at byte offset %zu has length %llu, over the %zu bytes left in "
                               "the message",
                               what, f->number, f->at, (unsigned long long)len, left);
        f->data = c->base + c->pos;
        f->len = (size_t)len;
        c->pos += (size_t)len;
        return KILN_OK;
    default:
        return kiln__error(KILN_E_FORMAT,
                           "%s: field %u at byte offset %zu has wire type %u, which ONNX never uses", what,
                           f->number, f->at, f->wire);
    }
}

kiln__pb kiln__pb_sub(const kiln__pb_field *f) {
    kiln__pb c = {f->data, f->len, 0, f->at};
    /* The content starts after the key and length varints; error offsets point at the field's key,
     * which is close enough to find it and never past it. */
    return c;
}

kiln_status kiln__pb_count(kiln__pb c, const char *what, uint32_t number, int64_t *n) {
    kiln__pb_field f;
    bool done;
    *n = 0;
    for (;;) {
        kiln_status s = kiln__pb_next(&c, what, &f, &done);
        if (s) return s;
        if (done) return KILN_OK;
        if (f.number == number) (*n)++;
    }
}

kiln_status kiln__pb_expect(const kiln__pb_field *f, uint32_t wire, const char *what, const char *field) {
    static const char *const names[8] = {
        "varint", "fixed64", "length-delimited", "group start", "group end", "fixed32", "6", "7"};
    if (f->wire == wire) return KILN_OK;
    return kiln__error(KILN_E_FORMAT, "%s: field %s (%u) at byte offset %zu is %s, expected %s", what, field,
                       f->number, f->at, names[f->wire & 7], names[wire & 7]);
}

kiln_status kiln__pb_int32(const kiln__pb_field *f, const char *what, const char *field, int32_t *out) {
    kiln_status s = kiln__pb_expect(f, KILN__PB_VARINT, what, field);
    int64_t v = (int64_t)f->v;
    if (s) return s;
    if (v < INT32_MIN || v > INT32_MAX)
        return kiln__error(KILN_E_FORMAT, "%s: field %s at byte offset %zu: %lld does not fit in int32", what,
                           field, f->at, (long long)v);
    *out = (int32_t)v;
    return KILN_OK;
}

static size_t item_size(uint32_t wire) {
    return wire == KILN__PB_I64 ? 8 : wire == KILN__PB_I32 ? 4 : 0;
}

kiln_status kiln__pb_packed_count(const kiln__pb_field *f, uint32_t wire, const char *what, int64_t *n) {
    if (f->wire == wire) {
        *n = 1;
        return KILN_OK;
    }
    if (f->wire != KILN__PB_LEN) return kiln__pb_expect(f, wire, what, "of a repeated scalar");
    if (wire == KILN__PB_VARINT) {
        int64_t k = 0;
        for (size_t i = 0; i < f->len; i++)
            k += !(f->data[i] & 0x80);
        *n = k;
        return KILN_OK;
    }
    if (f->len % item_size(wire))
        return kiln__error(KILN_E_FORMAT,
                           "%s: packed field %u at byte offset %zu: %zu bytes is not a multiple of %zu", what,
                           f->number, f->at, f->len, item_size(wire));
    *n = (int64_t)(f->len / item_size(wire));
    return KILN_OK;
}

kiln_status kiln__pb_packed_read(const kiln__pb_field *f, uint32_t wire, const char *what, uint64_t *out,
                                 int64_t cap, int64_t *n) {
    if (f->wire == wire) {
        if (*n >= cap) return kiln__error(KILN_E_INTERNAL, "%s: more elements than counted", what);
        out[(*n)++] = f->v;
        return KILN_OK;
    }
    if (wire == KILN__PB_VARINT) {
        kiln__pb c = {f->data, f->len, 0, f->at};
        while (c.pos < c.size) {
            bool bad;
            uint64_t v;
            size_t used = read_varint(c.base + c.pos, c.size - c.pos, &v, &bad);
            if (!used) return varint_error(&c, bad, what, "packed element");
            if (*n >= cap) return kiln__error(KILN_E_INTERNAL, "%s: more elements than counted", what);
            out[(*n)++] = v;
            c.pos += used;
        }
        return KILN_OK;
    }
    for (size_t i = 0; i + item_size(wire) <= f->len; i += item_size(wire)) {
        if (*n >= cap) return kiln__error(KILN_E_INTERNAL, "%s: more elements than counted", what);
        out[(*n)++] = le(f->data + i, item_size(wire));
    }
    return KILN_OK;
}
