/*
 * gguf_writer.h - the state of a GGUF writer, shared by gguf_write.c (adding keys and tensors) and
 * gguf_write_out.c (laying out and emitting the file). Keys are serialized as they are added, so the kv
 * section is ready to emit; tensors keep their descriptions and borrowed data until the write.
 */
#ifndef KILN_GGUF_WRITER_H
#define KILN_GGUF_WRITER_H

#include "gguf/gguf_internal.h"

/* A growable byte buffer. */
typedef struct kiln__gguf_bytes {
    uint8_t *data;
    size_t len, cap;
} kiln__gguf_bytes;

kiln_status kiln__gguf_bytes_append(kiln__gguf_bytes *b, const void *p, size_t n);
kiln_status kiln__gguf_bytes_u32(kiln__gguf_bytes *b, uint32_t v); /* little-endian */
kiln_status kiln__gguf_bytes_u64(kiln__gguf_bytes *b, uint64_t v); /* little-endian */

typedef struct kiln__gguf_wtensor {
    const char *name; /* NUL-terminated copy in the writer's arena */
    size_t name_len;
    kiln_type type;
    int32_t n_dims;
    int64_t ne[4];    /* unused dims are 1 */
    const void *data; /* borrowed until the write; NULL: produced by the fill callback */
    size_t size;      /* bytes */
} kiln__gguf_wtensor;

struct kiln_gguf_writer {
    uint32_t version;
    size_t alignment;
    kiln__gguf_bytes kv_bytes; /* the serialized kv section */
    int64_t n_kv;
    kiln__gguf_wtensor *tensors;
    int64_t n_tensors, cap_tensors;
    kiln__gguf_index keys, names;
    kiln__gguf_arena arena;
    kiln_tensor_fill_fn fill;
    void *fill_user;
    bool has_alignment_key; /* a general.alignment key was added, with this value: */
    uint32_t alignment_key;
};

#endif
