/*
 * gguf_parse.c - turns the bytes of a GGUF image (versions 2 and 3) into a validated kiln_gguf.
 *
 * Every field is read through a bounds-checked cursor and validated before it is used: the magic and
 * version, the kv and tensor counts against the bytes remaining (before anything is allocated for
 * them) and the limits of kiln.h (KILN_MAX_*), every length (names, strings, arrays: against the bytes
 * remaining, then the limits), the bytes before the data section, every value and element type,
 * general.alignment, and each tensor's name, shape, type, byte size, offset alignment and bounds. Arithmetic
 * on values from the file is overflow-checked. Each failure returns a status and a message naming the field,
 * its value and its byte offset. The rules are listed in docs/gguf.md. Nothing here reads past g->base +
 * g->size.
 */
#include "gguf/gguf_internal.h"

#include "core/core.h"
#include "tensor/types.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct cursor {
    const uint8_t *base;
    size_t size, pos;
} cursor;

static size_t left(const cursor *c) {
    return c->size - c->pos;
}

static bool take(cursor *c, size_t n, const uint8_t **p) {
    if (n > left(c)) return false;
    *p = c->base + c->pos;
    c->pos += n;
    return true;
}

static bool take_u32(cursor *c, uint32_t *v) {
    const uint8_t *p;
    if (!take(c, 4, &p)) return false;
    *v = kiln__gguf_le32(p);
    return true;
}

static bool take_u64(cursor *c, uint64_t *v) {
    const uint8_t *p;
    if (!take(c, 8, &p)) return false;
    *v = kiln__gguf_le64(p);
    return true;
}

/* The file ends inside a field: "truncated file: <what> at byte offset P needs N bytes, R remain". */
static kiln_status truncated(const cursor *c, size_t need, const char *fmt, ...) KILN__PRINTF(3, 4);
static kiln_status truncated(const cursor *c, size_t need, const char *fmt, ...) {
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return kiln__error(KILN_E_FORMAT, "truncated file: %s at byte offset %zu needs %zu bytes, %zu remain",
                       what, c->pos, need, left(c));
}

/* Grow a table of elem-sized entries so that it holds at least `need` (doubling). */
static kiln_status reserve(void **table, int64_t *cap, int64_t need, size_t elem, const char *what) {
    int64_t n;
    void *p;
    if (need <= *cap) return KILN_OK;
    n = *cap ? *cap * 2 : 16;
    if (n < need) n = need;
    p = kiln__realloc_array(*table, (size_t)n, elem);
    if (!p) return kiln__nomem(what);
    *table = p;
    *cap = n;
    return KILN_OK;
}

static kiln_status parse_header(kiln_gguf *g, cursor *c, uint64_t *n_tensors, uint64_t *n_kv) {
    const uint8_t *m;
    uint32_t v;
    if (!take(c, KILN__GGUF_MAGIC_LEN, &m)) return truncated(c, KILN__GGUF_MAGIC_LEN, "the magic");
    if (memcmp(m, "GGUF", KILN__GGUF_MAGIC_LEN) != 0)
        return kiln__error(
            KILN_E_FORMAT,
            "bad magic %02x %02x %02x %02x at byte offset 0: not a GGUF file (expected \"GGUF\")", m[0], m[1],
            m[2], m[3]);
    if (!take_u32(c, &v)) return truncated(c, 4, "the version");
    if (v == 1)
        return kiln__error(
            KILN_E_UNSUPPORTED,
            "GGUF version 1 is not supported (it uses 32-bit counts; Kiln reads versions 2 and 3)");
    if (v != 2 && v != 3 && (v & 0xffffu) == 0 && (v >> 24) >= 2 && (v >> 24) <= 3)
        return kiln__error(KILN_E_UNSUPPORTED,
                           "GGUF version field 0x%08x looks like a big-endian file, which Kiln does not read",
                           v);
    if (v != 2 && v != 3)
        return kiln__error(KILN_E_UNSUPPORTED,
                           "GGUF version %u is not supported (Kiln reads versions 2 and 3)", v);
    g->version = v;
    if (!take_u64(c, n_tensors)) return truncated(c, 8, "the tensor count");
    if (!take_u64(c, n_kv)) return truncated(c, 8, "the kv count");
    if (*n_kv > left(c) / KILN__GGUF_MIN_KV_BYTES)
        return kiln__error(KILN_E_FORMAT,
                           "kv count %llu at byte offset 16 cannot fit in the %zu bytes remaining "
                           "(each kv needs at least %u)",
                           (unsigned long long)*n_kv, left(c), KILN__GGUF_MIN_KV_BYTES);
    if (*n_tensors > left(c) / KILN__GGUF_MIN_TENSOR_BYTES)
        return kiln__error(KILN_E_FORMAT,
                           "tensor count %llu at byte offset 8 cannot fit in the %zu bytes remaining "
                           "(each tensor info needs at least %u)",
                           (unsigned long long)*n_tensors, left(c), KILN__GGUF_MIN_TENSOR_BYTES);
    if (*n_kv > KILN_MAX_KVS)
        return kiln__error(KILN_E_FORMAT,
                           "kv count %llu at byte offset 16 exceeds the limit of %u (KILN_MAX_KVS)",
                           (unsigned long long)*n_kv, KILN_MAX_KVS);
    if (*n_tensors > KILN_MAX_TENSORS)
        return kiln__error(KILN_E_FORMAT,
                           "tensor count %llu at byte offset 8 exceeds the limit of %u (KILN_MAX_TENSORS)",
                           (unsigned long long)*n_tensors, KILN_MAX_TENSORS);
    return KILN_OK;
}

/* A key or tensor name: u64 length, then that many bytes; non-empty, at most KILN_MAX_NAME_BYTES bytes,
 * without NUL bytes. `what` is "kv" or "tensor", `field` "key" or "name". */
static kiln_status read_name(cursor *c, const char *what, const char *field, int64_t i, const char **name,
                             size_t *len) {
    size_t at = c->pos;
    uint64_t n;
    const uint8_t *p;
    if (!take_u64(c, &n)) return truncated(c, 8, "the %s length of %s %lld", field, what, (long long)i);
    if (n == 0)
        return kiln__error(KILN_E_FORMAT, "%s %lld at byte offset %zu has an empty %s", what, (long long)i,
                           at, field);
    if (n > KILN_MAX_NAME_BYTES)
        return kiln__error(KILN_E_FORMAT,
                           "%s %lld at byte offset %zu: %s length %llu exceeds the limit of %u bytes", what,
                           (long long)i, at, field, (unsigned long long)n, KILN_MAX_NAME_BYTES);
    if (!take(c, (size_t)n, &p))
        return kiln__error(KILN_E_FORMAT,
                           "%s %lld at byte offset %zu: %s length %llu exceeds the %zu bytes remaining", what,
                           (long long)i, at, field, (unsigned long long)n, left(c));
    if (memchr(p, 0, (size_t)n))
        return kiln__error(KILN_E_FORMAT, "%s %lld at byte offset %zu: the %s contains a NUL byte", what,
                           (long long)i, at, field);
    *name = (const char *)p;
    *len = (size_t)n;
    return KILN_OK;
}

static kiln_status parse_scalar(cursor *c, kiln__gguf_kv *kv) {
    size_t size = kiln__gguf_type_size(kv->type);
    const uint8_t *p;
    if (!take(c, size, &p))
        return truncated(c, size, "the %s value of key '%.200s'", kiln__gguf_type_name(kv->type), kv->key);
    if (kv->type == KILN_GGUF_BOOL && p[0] > 1)
        return kiln__error(KILN_E_FORMAT, "key '%.200s': BOOL value %u at byte offset %zu is neither 0 nor 1",
                           kv->key, p[0], c->pos - 1);
    kv->value = p;
    return KILN_OK;
}

static kiln_status parse_string(cursor *c, kiln__gguf_kv *kv) {
    size_t at = c->pos;
    uint64_t n;
    if (!take_u64(c, &n)) return truncated(c, 8, "the string length of key '%.200s'", kv->key);
    if (!take(c, n > SIZE_MAX ? SIZE_MAX : (size_t)n, &kv->value))
        return kiln__error(
            KILN_E_FORMAT,
            "key '%.200s': string length %llu at byte offset %zu exceeds the %zu bytes remaining", kv->key,
            (unsigned long long)n, at, left(c));
    if (n > KILN_MAX_STRING_BYTES)
        return kiln__error(
            KILN_E_FORMAT,
            "key '%.200s': string length %llu at byte offset %zu exceeds the limit of %u bytes "
            "(KILN_MAX_STRING_BYTES)",
            kv->key, (unsigned long long)n, at, KILN_MAX_STRING_BYTES);
    kv->str_len = n;
    return KILN_OK;
}

/* Walk n strings starting at the cursor, checking each length; with strs != NULL, record them. */
static kiln_status walk_strings(cursor *c, const kiln__gguf_kv *kv, uint64_t n, kiln_str *strs) {
    for (uint64_t j = 0; j < n; j++) {
        size_t at = c->pos;
        uint64_t len;
        const uint8_t *p;
        if (!take_u64(c, &len))
            return truncated(c, 8, "the length of string %llu of key '%.200s'", (unsigned long long)j,
                             kv->key);
        if (!take(c, len > SIZE_MAX ? SIZE_MAX : (size_t)len, &p))
            return kiln__error(
                KILN_E_FORMAT,
                "key '%.200s': string %llu has length %llu at byte offset %zu, exceeding the %zu "
                "bytes remaining",
                kv->key, (unsigned long long)j, (unsigned long long)len, at, left(c));
        if (len > KILN_MAX_STRING_BYTES)
            return kiln__error(
                KILN_E_FORMAT,
                "key '%.200s': string %llu has length %llu at byte offset %zu, over the limit of "
                "%u bytes (KILN_MAX_STRING_BYTES)",
                kv->key, (unsigned long long)j, (unsigned long long)len, at, KILN_MAX_STRING_BYTES);
        if (strs) strs[j] = (kiln_str){(const char *)p, (size_t)len};
    }
    return KILN_OK;
}

/* An array that fits in the bytes remaining may still be longer than KILN_MAX_ARRAY_LEN. */
static kiln_status check_array_len(const kiln__gguf_kv *kv, size_t at) {
    if (kv->arr_len <= KILN_MAX_ARRAY_LEN) return KILN_OK;
    return kiln__error(KILN_E_FORMAT,
                       "key '%.200s': array length %llu at byte offset %zu exceeds the limit of %u elements "
                       "(KILN_MAX_ARRAY_LEN)",
                       kv->key, (unsigned long long)kv->arr_len, at, KILN_MAX_ARRAY_LEN);
}

static kiln_status parse_string_array(kiln_gguf *g, cursor *c, kiln__gguf_kv *kv, size_t at) {
    cursor first = *c;
    size_t bytes;
    kiln_status s;
    if (kv->arr_len > left(c) / KILN__GGUF_MIN_STRING_BYTES)
        return kiln__error(
            KILN_E_FORMAT,
            "key '%.200s': array of %llu strings at byte offset %zu cannot fit in the %zu bytes "
            "remaining (each needs at least %u)",
            kv->key, (unsigned long long)kv->arr_len, at, left(c), KILN__GGUF_MIN_STRING_BYTES);
    if ((s = check_array_len(kv, at))) return s;
    s = walk_strings(c, kv, kv->arr_len, NULL);
    if (s) return s;
    if (kiln__mul_overflow_size((size_t)kv->arr_len, sizeof(kiln_str), &bytes))
        return kiln__nomem("a GGUF string array table");
    kv->strs = kiln__gguf_arena_alloc(&g->arena, bytes);
    if (!kv->strs) return kiln__nomem("a GGUF string array table");
    return walk_strings(&first, kv, kv->arr_len, kv->strs);
}

static kiln_status parse_numeric_array(kiln_gguf *g, cursor *c, kiln__gguf_kv *kv, size_t at) {
    size_t elem = kiln__gguf_type_size(kv->arr_type);
    uint64_t bytes;
    const uint8_t *p;
    kiln_status s;
    if (kiln__mul_overflow_u64(kv->arr_len, elem, &bytes) || bytes > left(c))
        return kiln__error(
            KILN_E_FORMAT,
            "key '%.200s': array of %llu %s elements at byte offset %zu does not fit in the %zu "
            "bytes remaining",
            kv->key, (unsigned long long)kv->arr_len, kiln__gguf_type_name(kv->arr_type), at, left(c));
    if ((s = check_array_len(kv, at))) return s;
    take(c, (size_t)bytes, &p);
    if (kv->arr_type == KILN_GGUF_BOOL) {
        for (uint64_t j = 0; j < kv->arr_len; j++)
            if (p[j] > 1)
                return kiln__error(
                    KILN_E_FORMAT,
                    "key '%.200s': BOOL element %llu = %u at byte offset %zu is neither 0 nor 1", kv->key,
                    (unsigned long long)j, p[j], (size_t)(p + j - c->base));
    }
    kv->value = p;
    if ((uintptr_t)p % elem != 0) {
        /* Copy so that kiln_gguf_arr_data returns storage aligned for the element type. */
        uint8_t *copy = kiln__gguf_arena_alloc(&g->arena, (size_t)bytes);
        if (!copy) return kiln__nomem("an aligned copy of a GGUF array");
        memcpy(copy, p, (size_t)bytes);
        kv->value = copy;
    }
    return KILN_OK;
}

static kiln_status parse_array(kiln_gguf *g, cursor *c, kiln__gguf_kv *kv) {
    size_t at = c->pos;
    uint32_t et;
    if (!take_u32(c, &et)) return truncated(c, 4, "the array element type of key '%.200s'", kv->key);
    if (et == KILN_GGUF_ARRAY)
        return kiln__error(
            KILN_E_UNSUPPORTED,
            "key '%.200s': nested arrays (ARRAY of ARRAY, at byte offset %zu) are not supported", kv->key,
            at);
    if (et >= KILN_GGUF_TYPE_COUNT)
        return kiln__error(KILN_E_FORMAT, "key '%.200s': unknown array element type %u at byte offset %zu",
                           kv->key, et, at);
    kv->arr_type = (kiln_gguf_type)et;
    at = c->pos;
    if (!take_u64(c, &kv->arr_len)) return truncated(c, 8, "the array length of key '%.200s'", kv->key);
    if (et == KILN_GGUF_STRING) return parse_string_array(g, c, kv, at);
    return parse_numeric_array(g, c, kv, at);
}

/* general.alignment must be a UINT32 power of two. */
static kiln_status apply_alignment(kiln_gguf *g, const kiln__gguf_kv *kv) {
    uint32_t a;
    if (kv->type != KILN_GGUF_UINT32)
        return kiln__error(KILN_E_FORMAT, "general.alignment must be UINT32, found %s",
                           kiln__gguf_type_name(kv->type));
    a = kiln__gguf_le32(kv->value);
    if (a == 0) return kiln__error(KILN_E_FORMAT, "general.alignment is 0; it must be a power of two > 0");
    if (a & (a - 1)) return kiln__error(KILN_E_FORMAT, "general.alignment %u is not a power of two", a);
    g->alignment = a;
    return KILN_OK;
}

static kiln_status parse_kv(kiln_gguf *g, cursor *c, int64_t i) {
    kiln__gguf_kv *kv = &g->kvs[i];
    size_t at = c->pos, len = 0;
    const char *name = NULL;
    int64_t first;
    uint32_t type;
    kiln_status s = read_name(c, "kv", "key", i, &name, &len);
    if (s) return s;
    kv->key = kiln__gguf_arena_strndup(&g->arena, name, len);
    if (!kv->key) return kiln__nomem("a GGUF key");
    s = kiln__gguf_index_insert(&g->kv_index, kv->key, len, i, &first);
    if (s) return s;
    if (first >= 0)
        return kiln__error(KILN_E_FORMAT,
                           "duplicate key '%.200s' (kv %lld at byte offset %zu; first defined by kv %lld)",
                           kv->key, (long long)i, at, (long long)first);
    if (!take_u32(c, &type)) return truncated(c, 4, "the value type of key '%.200s'", kv->key);
    if (type >= KILN_GGUF_TYPE_COUNT)
        return kiln__error(KILN_E_FORMAT, "key '%.200s': unknown value type %u at byte offset %zu", kv->key,
                           type, c->pos - 4);
    kv->type = (kiln_gguf_type)type;
    kv->arr_type = KILN_GGUF_TYPE_COUNT;
    kv->raw = c->base + c->pos;
    at = c->pos;
    if (type == KILN_GGUF_STRING)
        s = parse_string(c, kv);
    else if (type == KILN_GGUF_ARRAY)
        s = parse_array(g, c, kv);
    else
        s = parse_scalar(c, kv);
    if (s) return s;
    kv->raw_size = c->pos - at;
    if (strcmp(kv->key, "general.alignment") == 0) return apply_alignment(g, kv);
    return KILN_OK;
}

/* n_dims, then that many dimensions, each in 1..INT64_MAX, with a product that fits int64. */
static kiln_status parse_shape(cursor *c, kiln_tensor_info *t) {
    uint32_t n_dims;
    int64_t count = 1;
    if (!take_u32(c, &n_dims)) return truncated(c, 4, "n_dims of tensor '%.200s'", t->name);
    if (n_dims < 1 || n_dims > KILN_MAX_TENSOR_DIMS)
        return kiln__error(KILN_E_FORMAT,
                           "tensor '%.200s': n_dims %u at byte offset %zu is out of range 1..%d", t->name,
                           n_dims, c->pos - 4, KILN_MAX_TENSOR_DIMS);
    t->n_dims = (int32_t)n_dims;
    for (int d = 0; d < KILN_MAX_TENSOR_DIMS; d++)
        t->ne[d] = 1;
    for (int d = 0; d < (int)n_dims; d++) {
        uint64_t ne;
        if (!take_u64(c, &ne)) return truncated(c, 8, "dimension ne[%d] of tensor '%.200s'", d, t->name);
        if (ne == 0)
            return kiln__error(KILN_E_FORMAT, "tensor '%.200s': dimension ne[%d] at byte offset %zu is 0",
                               t->name, d, c->pos - 8);
        if (ne > (uint64_t)INT64_MAX)
            return kiln__error(KILN_E_FORMAT, "tensor '%.200s': dimension ne[%d] = %llu exceeds INT64_MAX",
                               t->name, d, (unsigned long long)ne);
        t->ne[d] = (int64_t)ne;
        if (kiln__mul_overflow_i64(count, t->ne[d], &count))
            return kiln__error(KILN_E_FORMAT,
                               "tensor '%.200s': element count of shape [%lld, %lld, %lld, %lld] "
                               "overflows int64",
                               t->name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                               (long long)t->ne[3]);
    }
    return KILN_OK;
}

/* The element type: known to the specification; the row length a multiple of its block size; the byte
 * size representable. */
static kiln_status parse_type(cursor *c, kiln_tensor_info *t) {
    uint32_t type;
    kiln_type_traits tr;
    if (!take_u32(c, &type)) return truncated(c, 4, "the type of tensor '%.200s'", t->name);
    if (type > INT32_MAX || kiln_type_get_traits((int32_t)type, &tr) != KILN_OK)
        return kiln__error(KILN_E_FORMAT, "tensor '%.200s': unknown tensor type %u at byte offset %zu",
                           t->name, type, c->pos - 4);
    t->type = (kiln_type)type;
    if (t->ne[0] % tr.block_elems != 0)
        return kiln__error(
            KILN_E_FORMAT,
            "tensor '%.200s': row length ne[0] = %lld is not a multiple of the %s block size %lld", t->name,
            (long long)t->ne[0], tr.name, (long long)tr.block_elems);
    if (kiln__tensor_bytes(t->type, t->ne, &t->size) != KILN_OK)
        return kiln__error(KILN_E_FORMAT,
                           "tensor '%.200s': byte size of %s shape [%lld, %lld, %lld, %lld] overflows",
                           t->name, tr.name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                           (long long)t->ne[3]);
    return KILN_OK;
}

static kiln_status parse_tensor_info(kiln_gguf *g, cursor *c, int64_t i) {
    kiln_tensor_info *t = &g->tensors[i];
    size_t at = c->pos, len = 0;
    const char *name = NULL;
    int64_t first;
    kiln_status s = read_name(c, "tensor", "name", i, &name, &len);
    if (s) return s;
    t->name = kiln__gguf_arena_strndup(&g->arena, name, len);
    if (!t->name) return kiln__nomem("a GGUF tensor name");
    s = kiln__gguf_index_insert(&g->tensor_index, t->name, len, i, &first);
    if (s) return s;
    if (first >= 0)
        return kiln__error(KILN_E_FORMAT,
                           "duplicate tensor name '%.200s' (tensor %lld at byte offset %zu; first defined by "
                           "tensor %lld)",
                           t->name, (long long)i, at, (long long)first);
    s = parse_shape(c, t);
    if (!s) s = parse_type(c, t);
    if (s) return s;
    if (!take_u64(c, &t->offset)) return truncated(c, 8, "the data offset of tensor '%.200s'", t->name);
    if (t->offset % g->alignment != 0)
        return kiln__error(KILN_E_FORMAT,
                           "tensor '%.200s': data offset %llu is not a multiple of the alignment %zu",
                           t->name, (unsigned long long)t->offset, g->alignment);
    return KILN_OK;
}

/* Place the data section and check that every tensor's bytes lie inside it. */
static kiln_status place_data(kiln_gguf *g, size_t header_end) {
    uint64_t start;
    if (kiln__align_up(header_end, g->alignment, &start) || start > SIZE_MAX)
        return kiln__error(KILN_E_FORMAT, "data section offset overflows");
    g->data_offset = (size_t)start;
    g->data_size = g->data_offset < g->size ? g->size - g->data_offset : 0;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        kiln_tensor_info *t = &g->tensors[i];
        uint64_t end;
        if (kiln__add_overflow_u64(t->offset, t->size, &end))
            return kiln__error(KILN_E_FORMAT, "tensor '%.200s': data offset %llu + %zu bytes overflows",
                               t->name, (unsigned long long)t->offset, t->size);
        if (end > g->data_size)
            return kiln__error(KILN_E_FORMAT,
                               "tensor '%.200s': data offset %llu + %zu bytes exceeds data section size %zu "
                               "(the data section starts at byte offset %zu)",
                               t->name, (unsigned long long)t->offset, t->size, g->data_size, g->data_offset);
        t->data = g->base + g->data_offset + t->offset;
    }
    return KILN_OK;
}

/* Everything before the data section stays within KILN_MAX_METADATA_BYTES. */
static kiln_status check_metadata_bytes(const cursor *c, const char *what, int64_t i) {
    if (c->pos <= KILN_MAX_METADATA_BYTES) return KILN_OK;
    return kiln__error(KILN_E_FORMAT,
                       "%s %lld ends at byte offset %zu, past the limit of %u bytes for the header, metadata "
                       "and tensor infos (KILN_MAX_METADATA_BYTES)",
                       what, (long long)i, c->pos, KILN_MAX_METADATA_BYTES);
}

kiln_status kiln__gguf_parse(kiln_gguf *g) {
    cursor c = {g->base, g->size, 0};
    uint64_t n_tensors = 0, n_kv = 0;
    kiln_status s;
    g->alignment = KILN__GGUF_DEFAULT_ALIGNMENT;
    s = parse_header(g, &c, &n_tensors, &n_kv);
    if (s) return s;
    for (int64_t i = 0; i < (int64_t)n_kv; i++) {
        s = reserve((void **)&g->kvs, &g->cap_kv, i + 1, sizeof *g->kvs, "the GGUF kv table");
        if (s) return s;
        memset(&g->kvs[i], 0, sizeof g->kvs[i]);
        g->n_kv = i + 1;
        s = parse_kv(g, &c, i);
        if (!s) s = check_metadata_bytes(&c, "kv", i);
        if (s) return s;
    }
    if (n_tensors > left(&c) / KILN__GGUF_MIN_TENSOR_BYTES)
        return kiln__error(
            KILN_E_FORMAT,
            "tensor count %llu cannot fit in the %zu bytes remaining after the metadata at byte "
            "offset %zu (each tensor info needs at least %u)",
            (unsigned long long)n_tensors, left(&c), c.pos, KILN__GGUF_MIN_TENSOR_BYTES);
    for (int64_t i = 0; i < (int64_t)n_tensors; i++) {
        s = reserve((void **)&g->tensors, &g->cap_tensors, i + 1, sizeof *g->tensors,
                    "the GGUF tensor table");
        if (s) return s;
        memset(&g->tensors[i], 0, sizeof g->tensors[i]);
        g->n_tensors = i + 1;
        s = parse_tensor_info(g, &c, i);
        if (!s) s = check_metadata_bytes(&c, "tensor info", i);
        if (s) return s;
    }
    return place_data(g, c.pos);
}

void kiln__gguf_free_contents(kiln_gguf *g) {
    kiln__gguf_index_free(&g->kv_index);
    kiln__gguf_index_free(&g->tensor_index);
    kiln__gguf_arena_free(&g->arena);
    kiln__dealloc(g->kvs);
    kiln__dealloc(g->tensors);
    g->kvs = NULL;
    g->tensors = NULL;
    g->n_kv = g->n_tensors = g->cap_kv = g->cap_tensors = 0;
}
