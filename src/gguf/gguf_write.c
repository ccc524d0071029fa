/*
 * gguf_write.c - building a GGUF file: the writer handle, its version and alignment, and adding keys
 * (scalars, strings, numeric and string arrays, copies from an open file) and tensors, in order.
 *
 * Each add validates its arguments (KILN_E_INVALID_ARG: empty or duplicate names, invalid types,
 * general.alignment that is not a UINT32 power of two) and either succeeds entirely or leaves the writer
 * unchanged. Keys are serialized immediately; copies from an open file reuse the value's bytes verbatim,
 * which is what makes read-then-write reproduce a file byte for byte. The layout and the output live in
 * gguf_write_out.c.
 */
#include "gguf/gguf_writer.h"

#include "core/core.h"
#include "tensor/types.h"

#include <string.h>

kiln_status kiln__gguf_bytes_append(kiln__gguf_bytes *b, const void *p, size_t n) {
    size_t need;
    if (kiln__add_overflow_size(b->len, n, &need)) return kiln__nomem("GGUF writer bytes");
    if (need > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        uint8_t *d;
        while (cap < need) {
            if (kiln__mul_overflow_size(cap, 2, &cap)) return kiln__nomem("GGUF writer bytes");
        }
        d = kiln__realloc(b->data, cap);
        if (!d) return kiln__nomem("GGUF writer bytes");
        b->data = d;
        b->cap = cap;
    }
    if (n) memcpy(b->data + b->len, p, n);
    b->len = need;
    return KILN_OK;
}

kiln_status kiln__gguf_bytes_u32(kiln__gguf_bytes *b, uint32_t v) {
    uint8_t p[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    return kiln__gguf_bytes_append(b, p, sizeof p);
}

kiln_status kiln__gguf_bytes_u64(kiln__gguf_bytes *b, uint64_t v) {
    kiln_status s = kiln__gguf_bytes_u32(b, (uint32_t)v);
    return s ? s : kiln__gguf_bytes_u32(b, (uint32_t)(v >> 32));
}

kiln_status kiln_gguf_writer_create(kiln_gguf_writer **out) {
    kiln_gguf_writer *w;
    if (!out) return kiln__error(KILN_E_INVALID_ARG, "kiln_gguf_writer_create: out is NULL");
    w = kiln__calloc(1, sizeof *w);
    if (!w) return kiln__nomem("a GGUF writer");
    w->version = 3;
    w->alignment = KILN__GGUF_DEFAULT_ALIGNMENT;
    *out = w;
    return KILN_OK;
}

void kiln_gguf_writer_destroy(kiln_gguf_writer *w) {
    if (!w) return;
    kiln__dealloc(w->kv_bytes.data);
    kiln__dealloc(w->tensors);
    kiln__gguf_index_free(&w->keys);
    kiln__gguf_index_free(&w->names);
    kiln__gguf_arena_free(&w->arena);
    kiln__dealloc(w);
}

kiln_status kiln_gguf_writer_set_version(kiln_gguf_writer *w, uint32_t version) {
    if (!w) return kiln__error(KILN_E_INVALID_ARG, "kiln_gguf_writer_set_version: writer is NULL");
    if (version != 2 && version != 3)
        return kiln__error(KILN_E_INVALID_ARG, "GGUF version %u cannot be written (only 2 and 3)", version);
    w->version = version;
    return KILN_OK;
}

static bool valid_alignment(uint64_t a) {
    return a > 0 && a <= KILN__GGUF_MAX_ALIGNMENT && (a & (a - 1)) == 0;
}

kiln_status kiln_gguf_writer_set_alignment(kiln_gguf_writer *w, size_t alignment) {
    if (!w) return kiln__error(KILN_E_INVALID_ARG, "kiln_gguf_writer_set_alignment: writer is NULL");
    if (!valid_alignment(alignment))
        return kiln__error(KILN_E_INVALID_ARG, "GGUF alignment %zu is not a power of two in 1..2^31",
                           alignment);
    w->alignment = alignment;
    return KILN_OK;
}

void kiln_gguf_writer_set_fill(kiln_gguf_writer *w, kiln_tensor_fill_fn fill, void *user) {
    if (!w) return;
    w->fill = fill;
    w->fill_user = user;
}

/* Validate a new key. general.alignment must be a UINT32 power of two (readers reject anything else);
 * `value` points to the value's little-endian bytes for scalars. */
static kiln_status check_key(const kiln_gguf_writer *w, const char *key, kiln_gguf_type type,
                             const void *value) {
    size_t len;
    if (!w || !key) return kiln__error(KILN_E_INVALID_ARG, "GGUF writer: NULL writer or key");
    len = strlen(key);
    if (len == 0) return kiln__error(KILN_E_INVALID_ARG, "GGUF writer: empty key");
    if (len > KILN_MAX_NAME_BYTES)
        return kiln__error(KILN_E_INVALID_ARG, "GGUF writer: key of %zu bytes exceeds the limit of %u", len,
                           KILN_MAX_NAME_BYTES);
    if (kiln__gguf_index_find(&w->keys, key, len) >= 0)
        return kiln__error(KILN_E_INVALID_ARG, "GGUF writer: duplicate key '%s'", key);
    if (strcmp(key, "general.alignment") == 0) {
        uint32_t a = 0;
        if (type == KILN_GGUF_UINT32) a = kiln__gguf_le32(value);
        if (type != KILN_GGUF_UINT32 || !valid_alignment(a))
            return kiln__error(KILN_E_INVALID_ARG,
                               "GGUF writer: general.alignment must be a UINT32 power of two");
    }
    return KILN_OK;
}

/* Append key and value type to the kv section; the caller appends the value and calls finish_kv. */
static kiln_status begin_kv(kiln_gguf_writer *w, const char *key, kiln_gguf_type type) {
    size_t len = strlen(key);
    kiln_status s = kiln__gguf_bytes_u64(&w->kv_bytes, len);
    if (!s) s = kiln__gguf_bytes_append(&w->kv_bytes, key, len);
    if (!s) s = kiln__gguf_bytes_u32(&w->kv_bytes, (uint32_t)type);
    return s;
}

/* Register the key once its bytes are in; on any failure (s or here) roll the kv section back to mark. */
static kiln_status finish_kv(kiln_gguf_writer *w, const char *key, kiln_gguf_type type, const uint8_t *value,
                             size_t mark, kiln_status s) {
    size_t len = strlen(key);
    int64_t existing;
    char *copy = NULL;
    if (!s) {
        copy = kiln__gguf_arena_strndup(&w->arena, key, len);
        if (!copy) s = kiln__nomem("a GGUF writer key");
    }
    if (!s) s = kiln__gguf_index_insert(&w->keys, copy, len, w->n_kv, &existing);
    if (s) {
        w->kv_bytes.len = mark;
        return s;
    }
    w->n_kv++;
    if (strcmp(key, "general.alignment") == 0 && type == KILN_GGUF_UINT32) {
        w->has_alignment_key = true;
        w->alignment_key = kiln__gguf_le32(value);
    }
    return KILN_OK;
}

kiln_status kiln_gguf_writer_add_scalar(kiln_gguf_writer *w, const char *key, kiln_gguf_type type,
                                        const void *value) {
    uint8_t le[8];
    size_t size = kiln__gguf_type_size(type), mark;
    uint64_t v = 0;
    kiln_status s;
    if (!kiln__gguf_type_is_scalar(type) || !value)
        return kiln__error(KILN_E_INVALID_ARG,
                           "GGUF writer: add_scalar needs a scalar type and a value, got %s",
                           kiln__gguf_type_name(type));
    /* The value is in host order; write it little-endian. */
    if (size == 1) {
        uint8_t x;
        memcpy(&x, value, 1);
        v = x;
    } else if (size == 2) {
        uint16_t x;
        memcpy(&x, value, 2);
        v = x;
    } else if (size == 4) {
        uint32_t x;
        memcpy(&x, value, 4);
        v = x;
    } else {
        memcpy(&v, value, 8);
    }
    for (size_t k = 0; k < 8; k++)
        le[k] = (uint8_t)(v >> (8 * k));
    if (type == KILN_GGUF_BOOL && le[0] > 1)
        return kiln__error(KILN_E_INVALID_ARG, "GGUF writer: BOOL value %u for key '%s' is neither 0 nor 1",
                           le[0], key ? key : "(null)");
    s = check_key(w, key, type, le);
    if (s) return s;
    mark = w->kv_bytes.len;
    s = begin_kv(w, key, type);
    if (!s) s = kiln__gguf_bytes_append(&w->kv_bytes, le, size);
    return finish_kv(w, key, type, le, mark, s);
}

kiln_status kiln_gguf_writer_add_str(kiln_gguf_writer *w, const char *key, const char *value, size_t len) {
    size_t mark;
    kiln_status s;
    if (!value && len) return kiln__error(KILN_E_INVALID_ARG, "GGUF writer: NULL string of length %zu", len);
    s = check_key(w, key, KILN_GGUF_STRING, NULL);
    if (s) return s;
    mark = w->kv_bytes.len;
    s = begin_kv(w, key, KILN_GGUF_STRING);
    if (!s) s = kiln__gguf_bytes_u64(&w->kv_bytes, len);
    if (!s) s = kiln__gguf_bytes_append(&w->kv_bytes, value, len);
    return finish_kv(w, key, KILN_GGUF_STRING, NULL, mark, s);
}

kiln_status kiln_gguf_writer_add_array(kiln_gguf_writer *w, const char *key, kiln_gguf_type elem_type,
                                       const void *data, uint64_t n) {
    uint64_t bytes;
    size_t mark;
    kiln_status s;
    if (!kiln__gguf_type_is_scalar(elem_type))
        return kiln__error(KILN_E_INVALID_ARG,
                           "GGUF writer: array element type %s is not numeric (use "
                           "add_str_array for strings; nested arrays are not supported)",
                           kiln__gguf_type_name(elem_type));
    if (kiln__mul_overflow_u64(n, kiln__gguf_type_size(elem_type), &bytes) || bytes > SIZE_MAX)
        return kiln__error(KILN_E_INVALID_ARG, "GGUF writer: array of %llu %s elements is too large",
                           (unsigned long long)n, kiln__gguf_type_name(elem_type));
    if (!data && n)
        return kiln__error(KILN_E_INVALID_ARG, "GGUF writer: NULL array data of %llu elements",
                           (unsigned long long)n);
    s = check_key(w, key, KILN_GGUF_ARRAY, NULL);
    if (s) return s;
    mark = w->kv_bytes.len;
    s = begin_kv(w, key, KILN_GGUF_ARRAY);
    if (!s) s = kiln__gguf_bytes_u32(&w->kv_bytes, (uint32_t)elem_type);
    if (!s) s = kiln__gguf_bytes_u64(&w->kv_bytes, n);
    if (!s) s = kiln__gguf_bytes_append(&w->kv_bytes, data, (size_t)bytes);
    return finish_kv(w, key, KILN_GGUF_ARRAY, NULL, mark, s);
}

kiln_status kiln_gguf_writer_add_str_array(kiln_gguf_writer *w, const char *key, const kiln_str *strs,
                                           uint64_t n) {
    size_t mark;
    kiln_status s;
    if (!strs && n)
        return kiln__error(KILN_E_INVALID_ARG, "GGUF writer: NULL string array of %llu elements",
                           (unsigned long long)n);
    for (uint64_t j = 0; j < n; j++)
        if (!strs[j].data && strs[j].len)
            return kiln__error(KILN_E_INVALID_ARG, "GGUF writer: string %llu is NULL with length %zu",
                               (unsigned long long)j, strs[j].len);
    s = check_key(w, key, KILN_GGUF_ARRAY, NULL);
    if (s) return s;
    mark = w->kv_bytes.len;
    s = begin_kv(w, key, KILN_GGUF_ARRAY);
    if (!s) s = kiln__gguf_bytes_u32(&w->kv_bytes, KILN_GGUF_STRING);
    if (!s) s = kiln__gguf_bytes_u64(&w->kv_bytes, n);
    for (uint64_t j = 0; j < n && !s; j++) {
        s = kiln__gguf_bytes_u64(&w->kv_bytes, strs[j].len);
        if (!s) s = kiln__gguf_bytes_append(&w->kv_bytes, strs[j].data, strs[j].len);
    }
    return finish_kv(w, key, KILN_GGUF_ARRAY, NULL, mark, s);
}

kiln_status kiln_gguf_writer_copy_kv(kiln_gguf_writer *w, const kiln_gguf *src, int64_t i) {
    const kiln__gguf_kv *kv = kiln__gguf_kv_at(src, i);
    size_t mark;
    kiln_status s;
    if (!kv)
        return kiln__error(KILN_E_INVALID_ARG, "GGUF writer: kv index %lld is out of range 0..%lld",
                           (long long)i, (long long)kiln_gguf_kv_count(src) - 1);
    s = check_key(w, kv->key, kv->type, kv->raw);
    if (s) return s;
    mark = w->kv_bytes.len;
    s = begin_kv(w, kv->key, kv->type);
    if (!s) s = kiln__gguf_bytes_append(&w->kv_bytes, kv->raw, kv->raw_size);
    return finish_kv(w, kv->key, kv->type, kv->raw, mark, s);
}

kiln_status kiln_gguf_writer_add_tensor(kiln_gguf_writer *w, const char *name, kiln_type type, int32_t n_dims,
                                        const int64_t *ne, const void *data) {
    kiln__gguf_wtensor t = {0};
    kiln_type_traits tr;
    int64_t existing;
    kiln_status s;
    if (!w || !name || !ne) return kiln__error(KILN_E_INVALID_ARG, "GGUF writer: NULL writer, name or shape");
    t.name_len = strlen(name);
    if (t.name_len == 0 || t.name_len > KILN_MAX_NAME_BYTES)
        return kiln__error(KILN_E_INVALID_ARG, "GGUF writer: tensor name length %zu is not in 1..%u",
                           t.name_len, KILN_MAX_NAME_BYTES);
    if (kiln__gguf_index_find(&w->names, name, t.name_len) >= 0)
        return kiln__error(KILN_E_INVALID_ARG, "GGUF writer: duplicate tensor name '%s'", name);
    if (kiln_type_get_traits((int32_t)type, &tr) != KILN_OK)
        return kiln__error(KILN_E_INVALID_ARG, "GGUF writer: tensor '%s' has unknown type %d", name,
                           (int)type);
    if (n_dims < 1 || n_dims > KILN_MAX_TENSOR_DIMS)
        return kiln__error(KILN_E_INVALID_ARG, "GGUF writer: tensor '%s': n_dims %d is not in 1..4", name,
                           n_dims);
    for (int d = 0; d < 4; d++) {
        t.ne[d] = d < n_dims ? ne[d] : 1;
        if (t.ne[d] <= 0)
            return kiln__error(KILN_E_INVALID_ARG, "GGUF writer: tensor '%s': ne[%d] = %lld is not positive",
                               name, d, (long long)t.ne[d]);
    }
    s = kiln__tensor_bytes(type, t.ne, &t.size);
    if (s) return kiln__error_prefix(KILN_E_INVALID_ARG, "GGUF writer: tensor '%s': ", name);
    if (w->n_tensors == w->cap_tensors) {
        int64_t cap = w->cap_tensors ? w->cap_tensors * 2 : 16;
        kiln__gguf_wtensor *p = kiln__realloc_array(w->tensors, (size_t)cap, sizeof *p);
        if (!p) return kiln__nomem("the GGUF writer tensor table");
        w->tensors = p;
        w->cap_tensors = cap;
    }
    t.name = kiln__gguf_arena_strndup(&w->arena, name, t.name_len);
    if (!t.name) return kiln__nomem("a GGUF writer tensor name");
    s = kiln__gguf_index_insert(&w->names, t.name, t.name_len, w->n_tensors, &existing);
    if (s) return s;
    t.type = type;
    t.n_dims = n_dims;
    t.data = data;
    w->tensors[w->n_tensors++] = t;
    return KILN_OK;
}
