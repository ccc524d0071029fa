/*
 * gguf_get.c - typed getters of scalar metadata by key. Each checks the stored type first: a missing key
 * is KILN_E_NOT_FOUND, a different type KILN_E_FORMAT with a message naming the key and both types.
 * Values are decoded from little-endian bytes, so they need no alignment.
 */
#include "gguf/gguf_internal.h"

#include "core/core.h"

#include <string.h>

static kiln_status lookup(const kiln_gguf *g, const char *key, const kiln__gguf_kv **out) {
    int64_t i;
    if (!g || !key) return kiln__error(KILN_E_INVALID_ARG, "GGUF getter: NULL handle or key");
    i = kiln_gguf_find_key(g, key);
    if (i < 0) return kiln__error(KILN_E_NOT_FOUND, "key '%s' not found", key);
    *out = &g->kvs[i];
    return KILN_OK;
}

static kiln_status mismatch(const kiln__gguf_kv *kv, const char *wanted) {
    if (kv->type == KILN_GGUF_ARRAY)
        return kiln__error(KILN_E_FORMAT, "key '%s' has type ARRAY of %s, not %s", kv->key,
                           kiln__gguf_type_name(kv->arr_type), wanted);
    return kiln__error(KILN_E_FORMAT, "key '%s' has type %s, not %s", kv->key, kiln__gguf_type_name(kv->type),
                       wanted);
}

kiln_status kiln_gguf_get_u32(const kiln_gguf *gguf, const char *key, uint32_t *out) {
    const kiln__gguf_kv *kv = NULL;
    kiln_status s = lookup(gguf, key, &kv);
    if (s) return s;
    if (kv->type != KILN_GGUF_UINT32) return mismatch(kv, "UINT32");
    *out = kiln__gguf_le32(kv->value);
    return KILN_OK;
}

kiln_status kiln_gguf_get_f32(const kiln_gguf *gguf, const char *key, float *out) {
    const kiln__gguf_kv *kv = NULL;
    uint32_t bits;
    kiln_status s = lookup(gguf, key, &kv);
    if (s) return s;
    if (kv->type != KILN_GGUF_FLOAT32) return mismatch(kv, "FLOAT32");
    bits = kiln__gguf_le32(kv->value);
    memcpy(out, &bits, sizeof *out);
    return KILN_OK;
}

kiln_status kiln_gguf_get_bool(const kiln_gguf *gguf, const char *key, bool *out) {
    const kiln__gguf_kv *kv = NULL;
    kiln_status s = lookup(gguf, key, &kv);
    if (s) return s;
    if (kv->type != KILN_GGUF_BOOL) return mismatch(kv, "BOOL");
    *out = kv->value[0] != 0;
    return KILN_OK;
}

kiln_status kiln_gguf_get_str(const kiln_gguf *gguf, const char *key, kiln_str *out) {
    const kiln__gguf_kv *kv = NULL;
    kiln_status s = lookup(gguf, key, &kv);
    if (s) return s;
    if (kv->type != KILN_GGUF_STRING) return mismatch(kv, "STRING");
    out->data = (const char *)kv->value;
    out->len = (size_t)kv->str_len;
    return KILN_OK;
}

kiln_status kiln_gguf_get_int(const kiln_gguf *gguf, const char *key, int64_t *out) {
    const kiln__gguf_kv *kv = NULL;
    const uint8_t *p;
    uint64_t u;
    kiln_status s = lookup(gguf, key, &kv);
    if (s) return s;
    p = kv->value;
    switch (kv->type) {
    case KILN_GGUF_UINT8: *out = p[0]; return KILN_OK;
    case KILN_GGUF_INT8: *out = (int8_t)p[0]; return KILN_OK;
    case KILN_GGUF_UINT16: *out = kiln__gguf_le16(p); return KILN_OK;
    case KILN_GGUF_INT16: *out = (int16_t)kiln__gguf_le16(p); return KILN_OK;
    case KILN_GGUF_UINT32: *out = kiln__gguf_le32(p); return KILN_OK;
    case KILN_GGUF_INT32: *out = (int32_t)kiln__gguf_le32(p); return KILN_OK;
    case KILN_GGUF_INT64: *out = (int64_t)kiln__gguf_le64(p); return KILN_OK;
    case KILN_GGUF_UINT64:
        u = kiln__gguf_le64(p);
        if (u > (uint64_t)INT64_MAX)
            return kiln__error(KILN_E_RANGE, "key '%s': UINT64 value %llu does not fit in int64", kv->key,
                               (unsigned long long)u);
        *out = (int64_t)u;
        return KILN_OK;
    default: return mismatch(kv, "an integer type");
    }
}

kiln_status kiln_gguf_get_float(const kiln_gguf *gguf, const char *key, double *out) {
    const kiln__gguf_kv *kv = NULL;
    kiln_status s = lookup(gguf, key, &kv);
    if (s) return s;
    if (kv->type == KILN_GGUF_FLOAT32) {
        uint32_t bits = kiln__gguf_le32(kv->value);
        float f;
        memcpy(&f, &bits, sizeof f);
        *out = f;
        return KILN_OK;
    }
    if (kv->type == KILN_GGUF_FLOAT64) {
        uint64_t bits = kiln__gguf_le64(kv->value);
        memcpy(out, &bits, sizeof *out);
        return KILN_OK;
    }
    return mismatch(kv, "FLOAT32 or FLOAT64");
}
