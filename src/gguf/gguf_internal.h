/*
 * gguf_internal.h - what the GGUF reader and writer share: the layout of an open file (struct kiln_gguf),
 * the smallest encodings (the limits themselves are public, in kiln.h), little-endian decoding, the
 * value-type table, a name index (hash table used for lookups and duplicate detection) and a small arena
 * for NUL-terminated name copies.
 *
 * The format as Kiln reads and writes it, and every validation rule, are described in docs/gguf.md.
 */
#ifndef KILN_GGUF_INTERNAL_H
#define KILN_GGUF_INTERNAL_H

#include "kiln.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KILN__GGUF_MAGIC_LEN 4
#define KILN__GGUF_DEFAULT_ALIGNMENT 32u
#define KILN__GGUF_MAX_ALIGNMENT 0x80000000u /* the largest power of two a UINT32 can hold */

/* Smallest possible encodings, used to reject counts the remaining bytes cannot hold before allocating:
 * a kv is a key length (8), a key of at least one byte, a value type (4) and a value of at least one
 * byte; a tensor info is a name length (8), a name byte, n_dims (4), one dim (8), a type (4) and an
 * offset (8); a string array element is at least its length (8). */
#define KILN__GGUF_MIN_KV_BYTES 14u
#define KILN__GGUF_MIN_TENSOR_BYTES 33u
#define KILN__GGUF_MIN_STRING_BYTES 8u

/* ---- Little-endian decoding (the file is little-endian whatever the host is). ---- */

static inline uint16_t kiln__gguf_le16(const uint8_t *p) {
    return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t kiln__gguf_le32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint64_t kiln__gguf_le64(const uint8_t *p) {
    return (uint64_t)kiln__gguf_le32(p) | ((uint64_t)kiln__gguf_le32(p + 4) << 32);
}

/* ---- Value types (gguf_types.c). ---- */

/* Bytes of one scalar of type t; 0 for STRING, ARRAY and values outside the specification. */
size_t kiln__gguf_type_size(uint32_t t);
/* "UINT32", "STRING", ... or "INVALID". */
const char *kiln__gguf_type_name(uint32_t t);
/* True for the fixed-size numeric and BOOL types. */
bool kiln__gguf_type_is_scalar(uint32_t t);

/* ---- Arena (gguf_arena.c): chunks that never move, freed all at once. ---- */

typedef struct kiln__gguf_chunk kiln__gguf_chunk;
typedef struct kiln__gguf_arena {
    kiln__gguf_chunk *head;
} kiln__gguf_arena;

/* size bytes aligned to 8, or NULL when out of memory (no error set). */
void *kiln__gguf_arena_alloc(kiln__gguf_arena *a, size_t size);
/* A NUL-terminated copy of len bytes, or NULL when out of memory. */
char *kiln__gguf_arena_strndup(kiln__gguf_arena *a, const char *s, size_t len);
void kiln__gguf_arena_free(kiln__gguf_arena *a);

/* ---- Name index (gguf_index.c): open addressing, names borrowed (they must outlive the index). ---- */

typedef struct kiln__gguf_slot {
    const char *name; /* NULL: empty slot */
    size_t len;
    uint64_t hash;
    int64_t value;
} kiln__gguf_slot;

typedef struct kiln__gguf_index {
    kiln__gguf_slot *slots;
    size_t cap; /* a power of two, or 0 */
    size_t count;
} kiln__gguf_index;

/* Insert name -> value. If the name is already present, nothing changes and *existing receives its
 * value; otherwise *existing = -1. Fails only with KILN_E_NOMEM, leaving the index unchanged. */
kiln_status kiln__gguf_index_insert(kiln__gguf_index *ix, const char *name, size_t len, int64_t value,
                                    int64_t *existing);
/* The value stored for name, or -1. */
int64_t kiln__gguf_index_find(const kiln__gguf_index *ix, const char *name, size_t len);
void kiln__gguf_index_free(kiln__gguf_index *ix);

/* ---- An open file. ---- */

typedef struct kiln__gguf_kv {
    const char *key; /* NUL-terminated copy in the arena */
    kiln_gguf_type type;
    kiln_gguf_type arr_type; /* arrays: the element type; otherwise KILN_GGUF_TYPE_COUNT */
    uint64_t arr_len;        /* arrays: the element count */
    /* Scalars: the value's bytes in the file. Strings: the characters. Numeric arrays: the elements,
     * aligned for the element type (copied into the arena when the file's copy is not). */
    const uint8_t *value;
    uint64_t str_len;   /* strings: the length */
    kiln_str *strs;     /* string arrays: one entry per element, pointing into the image (arena) */
    const uint8_t *raw; /* the serialized value in the image, just after the value type */
    size_t raw_size;
} kiln__gguf_kv;

struct kiln_gguf {
    const uint8_t *base; /* the whole image */
    size_t size;
    void *map; /* the mapping to unmap (kiln_gguf_open), NULL for a borrowed buffer */
    size_t map_size;

    uint32_t version;
    size_t alignment;
    size_t data_offset; /* where the data section starts (header end rounded up to alignment) */
    size_t data_size;   /* bytes from data_offset to the end of the image (0 if it starts past it) */

    kiln__gguf_kv *kvs;
    int64_t n_kv, cap_kv;
    kiln_tensor_info *tensors;
    int64_t n_tensors, cap_tensors;

    kiln__gguf_index kv_index;
    kiln__gguf_index tensor_index;
    kiln__gguf_arena arena;
};

/* Parse and validate g->base[0 .. g->size) into g (gguf_parse.c). On failure g holds whatever was
 * built so far; kiln__gguf_free_contents releases it. */
kiln_status kiln__gguf_parse(kiln_gguf *g);
void kiln__gguf_free_contents(kiln_gguf *g);

/* The file mapping of a kiln_gguf_open handle (*size 0 and NULL for a borrowed buffer): read-only and
 * private, so pages of it may be handed back to the kernel (MADV_DONTNEED) and are read again on use. */
const void *kiln__gguf_mapping(const kiln_gguf *g, size_t *size);

/* The kv at index i, or NULL when out of range. */
const kiln__gguf_kv *kiln__gguf_kv_at(const kiln_gguf *g, int64_t i);

#endif
