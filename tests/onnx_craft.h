/*
 * onnx_craft.h - test helper: ONNX models written byte by byte in the protobuf wire format (field numbers
 * from onnx.proto), for the C tests of the reader and the session. Header-only (each test file is compiled
 * with harness.c alone).
 */
#ifndef KILN_TEST_ONNX_CRAFT_H
#define KILN_TEST_ONNX_CRAFT_H

#include <stdint.h>
#include <string.h>

typedef struct buf {
    uint8_t b[1024];
    size_t n;
} buf;

static inline void put_varint(buf *o, uint64_t v) {
    do {
        o->b[o->n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
}

static inline void put_key(buf *o, uint32_t field, uint32_t wire) {
    put_varint(o, (uint64_t)field << 3 | wire);
}

static inline void put_int(buf *o, uint32_t field, uint64_t v) {
    put_key(o, field, 0);
    put_varint(o, v);
}

static inline void put_bytes(buf *o, uint32_t field, const void *p, size_t n) {
    put_key(o, field, 2);
    put_varint(o, n);
    memcpy(o->b + o->n, p, n);
    o->n += n;
}

static inline void put_str(buf *o, uint32_t field, const char *s) {
    put_bytes(o, field, s, strlen(s));
}

static inline void put_msg(buf *o, uint32_t field, const buf *m) {
    put_bytes(o, field, m->b, m->n);
}

/* ValueInfoProto: name, float tensor, dims given as a number or (value < 0) the symbol "batch". */
static inline void put_value_info(buf *o, uint32_t field, const char *name, const int64_t *dims, int rank) {
    buf vi = {{0}, 0}, type = {{0}, 0}, tensor = {{0}, 0}, shape = {{0}, 0};
    for (int d = 0; d < rank; d++) {
        buf dim = {{0}, 0};
        if (dims[d] >= 0)
            put_int(&dim, 1, (uint64_t)dims[d]);
        else
            put_str(&dim, 2, "batch");
        put_msg(&shape, 1, &dim);
    }
    put_int(&tensor, 1, 1); /* FLOAT */
    put_msg(&tensor, 2, &shape);
    put_msg(&type, 1, &tensor);
    put_str(&vi, 1, name);
    put_msg(&vi, 2, &type);
    put_msg(o, field, &vi);
}

#endif
