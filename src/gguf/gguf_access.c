/*
 * gguf_access.c - read-only accessors of an open GGUF file: header facts, kv metadata by index (key,
 * type, array element type, length, storage, string elements) and tensor infos, with lookups by name
 * through the hash indexes built while parsing. Out-of-range indexes return neutral values (NULL,
 * KILN_GGUF_TYPE_COUNT, 0) or a status; nothing here can read outside the image.
 */
#include "gguf/gguf_internal.h"

#include "core/core.h"

#include <string.h>

const void *kiln__gguf_mapping(const kiln_gguf *g, size_t *size) {
    *size = g->map ? g->map_size : 0;
    return g->map;
}

uint32_t kiln_gguf_version(const kiln_gguf *gguf) {
    return gguf ? gguf->version : 0;
}
size_t kiln_gguf_alignment(const kiln_gguf *gguf) {
    return gguf ? gguf->alignment : 0;
}
size_t kiln_gguf_data_offset(const kiln_gguf *gguf) {
    return gguf ? gguf->data_offset : 0;
}
int64_t kiln_gguf_kv_count(const kiln_gguf *gguf) {
    return gguf ? gguf->n_kv : 0;
}
int64_t kiln_gguf_tensor_count(const kiln_gguf *gguf) {
    return gguf ? gguf->n_tensors : 0;
}

const kiln__gguf_kv *kiln__gguf_kv_at(const kiln_gguf *g, int64_t i) {
    if (!g || i < 0 || i >= g->n_kv) return NULL;
    return &g->kvs[i];
}

int64_t kiln_gguf_find_key(const kiln_gguf *gguf, const char *key) {
    if (!gguf || !key) return -1;
    return kiln__gguf_index_find(&gguf->kv_index, key, strlen(key));
}

const char *kiln_gguf_kv_key(const kiln_gguf *gguf, int64_t i) {
    const kiln__gguf_kv *kv = kiln__gguf_kv_at(gguf, i);
    return kv ? kv->key : NULL;
}

kiln_gguf_type kiln_gguf_kv_type(const kiln_gguf *gguf, int64_t i) {
    const kiln__gguf_kv *kv = kiln__gguf_kv_at(gguf, i);
    return kv ? kv->type : KILN_GGUF_TYPE_COUNT;
}

kiln_gguf_type kiln_gguf_arr_type(const kiln_gguf *gguf, int64_t i) {
    const kiln__gguf_kv *kv = kiln__gguf_kv_at(gguf, i);
    return kv && kv->type == KILN_GGUF_ARRAY ? kv->arr_type : KILN_GGUF_TYPE_COUNT;
}

uint64_t kiln_gguf_arr_len(const kiln_gguf *gguf, int64_t i) {
    const kiln__gguf_kv *kv = kiln__gguf_kv_at(gguf, i);
    return kv && kv->type == KILN_GGUF_ARRAY ? kv->arr_len : 0;
}

const void *kiln_gguf_arr_data(const kiln_gguf *gguf, int64_t i) {
    const kiln__gguf_kv *kv = kiln__gguf_kv_at(gguf, i);
    if (!kv || kv->type != KILN_GGUF_ARRAY || kv->arr_type == KILN_GGUF_STRING) return NULL;
    return kv->value;
}

kiln_status kiln_gguf_arr_str(const kiln_gguf *gguf, int64_t i, uint64_t j, kiln_str *out) {
    const kiln__gguf_kv *kv = kiln__gguf_kv_at(gguf, i);
    if (!out) return kiln__error(KILN_E_INVALID_ARG, "kiln_gguf_arr_str: out is NULL");
    if (!kv)
        return kiln__error(KILN_E_INVALID_ARG, "kv index %lld is out of range 0..%lld", (long long)i,
                           (long long)kiln_gguf_kv_count(gguf) - 1);
    if (kv->type != KILN_GGUF_ARRAY || kv->arr_type != KILN_GGUF_STRING)
        return kiln__error(KILN_E_FORMAT, "key '%s' has type %s%s%s, not ARRAY of STRING", kv->key,
                           kiln__gguf_type_name(kv->type), kv->type == KILN_GGUF_ARRAY ? " of " : "",
                           kv->type == KILN_GGUF_ARRAY ? kiln__gguf_type_name(kv->arr_type) : "");
    if (j >= kv->arr_len)
        return kiln__error(KILN_E_RANGE, "key '%s': string index %llu is out of range (the array has %llu)",
                           kv->key, (unsigned long long)j, (unsigned long long)kv->arr_len);
    *out = kv->strs[j];
    return KILN_OK;
}

int64_t kiln_gguf_find_tensor(const kiln_gguf *gguf, const char *name) {
    if (!gguf || !name) return -1;
    return kiln__gguf_index_find(&gguf->tensor_index, name, strlen(name));
}

kiln_status kiln_gguf_tensor_info(const kiln_gguf *gguf, int64_t i, kiln_tensor_info *out) {
    if (!gguf || !out) return kiln__error(KILN_E_INVALID_ARG, "kiln_gguf_tensor_info: NULL argument");
    if (i < 0 || i >= gguf->n_tensors)
        return kiln__error(KILN_E_INVALID_ARG, "tensor index %lld is out of range 0..%lld", (long long)i,
                           (long long)gguf->n_tensors - 1);
    *out = gguf->tensors[i];
    return KILN_OK;
}
