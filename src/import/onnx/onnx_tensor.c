/*
 * onnx_tensor.c - decodes a TensorProto (an initializer, or a Constant's value) into little-endian elements.
 *
 * The data comes from exactly one place: external data (data_location = EXTERNAL, with location, offset
 * and length entries), raw_data, or the typed repeated field the type stores its values in (float_data,
 * int32_data for every type of 16 bits or less, int64_data, double_data, uint64_data). The element count
 * is the product of the dims (overflow-checked) and must match the bytes or values present exactly. Data
 * aligned for its type in the image or an external mapping is used in place; anything else is copied into
 * the arena. STRING tensors and segments are refused by name.
 */
#include "import/onnx/onnx_internal.h"

#include "core/core.h"

#include <stdio.h>
#include <string.h>

size_t kiln__onnx_type_size(int32_t type, bool *half) {
    *half = false;
    switch (type) {
    case 1:
    case 6:
    case 12: return 4; /* float, int32, uint32 */
    case 2:
    case 3:
    case 9:
    case 17:
    case 18:
    case 19:
    case 20:
    case 24: return 1;
    case 4:
    case 5:
    case 10:
    case 16: return 2;
    case 7:
    case 11:
    case 13:
    case 14: return 8; /* int64, double, uint64, complex64 */
    case 15: return 16;
    case 21:
    case 22:
    case 23: *half = true; return 1; /* 4-bit types, two per byte */
    default: return 0;               /* string, 2- and 6-bit types, unknown */
    }
}

typedef struct tensor_src {
    const uint8_t *raw;
    size_t raw_len;
    bool have_raw, external;
    int64_t n_typed[16]; /* values in each typed field, by field number */
    const char *location;
    uint64_t offset, length;
} tensor_src;

/* Which typed field holds values of a type, and the wire type of its elements. */
static uint32_t typed_field(int32_t type, uint32_t *wire) {
    *wire = KILN__PB_VARINT;
    switch (type) {
    case 1:
    case 14: *wire = KILN__PB_I32; return 4;
    case 7: return 7;
    case 11:
    case 15: *wire = KILN__PB_I64; return 10;
    case 12:
    case 13: return 11;
    case 2:
    case 3:
    case 4:
    case 5:
    case 6:
    case 9:
    case 10:
    case 16:
    case 17:
    case 18:
    case 19:
    case 20: return 5;
    default: return 0;
    }
}

static kiln_status parse_decimal(const char *s, const char *what, const char *key, uint64_t *out) {
    uint64_t v = 0;
    if (!*s) return kiln__error(KILN_E_FORMAT, "%s: external data %s is empty", what, key);
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9' || kiln__mul_overflow_u64(v, 10, &v) ||
            kiln__add_overflow_u64(v, (uint64_t)(*p - '0'), &v))
            return kiln__error(KILN_E_FORMAT,
                               "%s: external data %s '%.32s' is not a decimal number below 2^64", what, key,
                               s);
    }
    *out = v;
    return KILN_OK;
}

static kiln_status parse_entry(kiln_onnx *m, kiln__pb c, const char *what, tensor_src *src) {
    kiln__pb_field f;
    bool done;
    const char *key = "", *value = "";
    kiln_status s;
    for (;;) {
        if ((s = kiln__pb_next(&c, what, &f, &done))) return s;
        if (done) break;
        if (f.number != 1 && f.number != 2) continue;
        if ((s = kiln__pb_expect(&f, KILN__PB_LEN, what,
                                 f.number == 1 ? "external_data key" : "external_data value")))
            return s;
        if ((s = kiln__onnx_strdup(m, f.data, f.len, what, f.number == 1 ? &key : &value))) return s;
    }
    if (!strcmp(key, "location"))
        src->location = value;
    else if (!strcmp(key, "offset"))
        return parse_decimal(value, what, key, &src->offset);
    else if (!strcmp(key, "length"))
        return parse_decimal(value, what, key, &src->length);
    return KILN_OK; /* "checksum" and keys from newer writers carry nothing Kiln needs */
}

/* First walk: dims, type, name, and where the data is. */
static kiln_status scan(kiln_onnx *m, kiln__pb c, kiln__onnx_tensor *t, const char *what, tensor_src *src) {
    kiln__pb_field f;
    bool done;
    int64_t k;
    kiln_status s;
    for (;;) {
        if ((s = kiln__pb_next(&c, what, &f, &done))) return s;
        if (done) return KILN_OK;
        switch (f.number) {
        case 1:
            if ((s = kiln__pb_packed_count(&f, KILN__PB_VARINT, what, &k))) return s;
            if (t->rank + k > KILN_MAX_ONNX_RANK)
                return kiln__error(KILN_E_FORMAT, "%s: more than %d dims (KILN_MAX_ONNX_RANK)", what,
                                   KILN_MAX_ONNX_RANK);
            t->rank += (int32_t)k;
            break;
        case 2:
            if ((s = kiln__pb_int32(&f, what, "data_type", &t->type))) return s;
            break;
        case 3: return kiln__error(KILN_E_UNSUPPORTED, "%s: segmented tensors are not supported", what);
        case 6: return kiln__error(KILN_E_UNSUPPORTED, "%s: STRING tensors are not supported", what);
        case 8:
            if ((s = kiln__onnx_strdup(m, f.data, f.len, what, &t->name))) return s;
            break;
        case 9:
            if ((s = kiln__pb_expect(&f, KILN__PB_LEN, what, "raw_data"))) return s;
            src->raw = f.data;
            src->raw_len = f.len;
            src->have_raw = true;
            break;
        case 13:
            if ((s = kiln__pb_expect(&f, KILN__PB_LEN, what, "external_data"))) return s;
            if ((s = parse_entry(m, kiln__pb_sub(&f), what, src))) return s;
            break;
        case 14:
            if ((s = kiln__pb_expect(&f, KILN__PB_VARINT, what, "data_location"))) return s;
            src->external = f.v == 1;
            break;
        case 4:
        case 5:
        case 7:
        case 10:
        case 11: {
            uint32_t wire = f.number == 4 ? KILN__PB_I32 : f.number == 10 ? KILN__PB_I64 : KILN__PB_VARINT;
            if ((s = kiln__pb_packed_count(&f, wire, what, &k))) return s;
            src->n_typed[f.number] += k;
            break;
        }
        default: break;
        }
    }
}

static kiln_status read_dims(kiln__pb c, kiln__onnx_tensor *t, const char *what) {
    kiln__pb_field f;
    bool done;
    int64_t n = 0;
    kiln_status s;
    for (;;) {
        if ((s = kiln__pb_next(&c, what, &f, &done))) return s;
        if (done) break;
        if (f.number == 1 &&
            (s = kiln__pb_packed_read(&f, KILN__PB_VARINT, what, (uint64_t *)t->dims, t->rank, &n)))
            return s;
    }
    t->n_elements = 1;
    for (int32_t d = 0; d < t->rank; d++) {
        if (t->dims[d] < 0)
            return kiln__error(KILN_E_FORMAT, "%s: dim %d is negative (%lld)", what, d,
                               (long long)t->dims[d]);
        if (kiln__mul_overflow_u64(t->n_elements, (uint64_t)t->dims[d], &t->n_elements))
            return kiln__error(KILN_E_FORMAT, "%s: the element count overflows 64 bits", what);
    }
    return KILN_OK;
}

/* Convert the typed field's values into t->data (t->size bytes, allocated). */
static kiln_status read_typed(kiln_onnx *m, kiln__pb c, kiln__onnx_tensor *t, const char *what,
                              uint32_t number, uint32_t wire, int64_t n, size_t esize) {
    kiln__pb_field f;
    bool done;
    int64_t k = 0;
    kiln_status s;
    uint64_t *v = kiln__onnx_alloc(m, (size_t)n, sizeof *v, "a tensor's values");
    uint8_t *out = kiln__onnx_alloc(m, (size_t)t->size, 1, "a tensor's data");
    if (!v || !out) return KILN_E_NOMEM;
    for (;;) {
        if ((s = kiln__pb_next(&c, what, &f, &done))) return s;
        if (done) break;
        if (f.number == number && (s = kiln__pb_packed_read(&f, wire, what, v, n, &k))) return s;
    }
    /* Each value's low esize bytes (int32_data holds 8- and 16-bit values and float16 bits; a float's bits
     * come from a fixed32), or two 32-bit halves of a complex64 from float_data. */
    size_t per = (number == 4 || number == 10) ? (number == 4 ? 4 : 8) : esize;
    for (int64_t i = 0; i < k; i++)
        for (size_t b = 0; b < per && (size_t)i * per + b < t->size; b++)
            out[(size_t)i * per + b] = (uint8_t)(v[i] >> (8 * b));
    t->data = out;
    return KILN_OK;
}

/* Point t->data at bytes of the image or a mapping, copying them when misaligned for the element size. */
static kiln_status use_bytes(kiln_onnx *m, kiln__onnx_tensor *t, const uint8_t *p, size_t esize) {
    if (((uintptr_t)p % esize) == 0) {
        t->data = p;
        return KILN_OK;
    }
    uint8_t *copy = kiln__onnx_alloc(m, (size_t)t->size, 1, "an aligned copy of a tensor");
    if (!copy) return KILN_E_NOMEM;
    memcpy(copy, p, (size_t)t->size);
    t->data = copy;
    return KILN_OK;
}

static kiln_status resolve_data(kiln_onnx *m, kiln__pb c, kiln__onnx_tensor *t, const char *what,
                                const tensor_src *src, size_t esize) {
    static const uint64_t zero;
    uint32_t wire, number = typed_field(t->type, &wire);
    int64_t n_typed = 0, n_other = 0, want;
    for (int i = 0; i < 16; i++)
        *(i == (int)number ? &n_typed : &n_other) += src->n_typed[i];
    if (src->external) {
        const uint8_t *p;
        uint64_t size;
        kiln_status s;
        if (src->have_raw || n_typed || n_other)
            return kiln__error(KILN_E_FORMAT, "%s: external data and inline data both present", what);
        if (!src->location) return kiln__error(KILN_E_FORMAT, "%s: external data without a location", what);
        if ((s = kiln__onnx_external(m, t->name, src->location, src->offset,
                                     src->length ? src->length : UINT64_MAX, &p, &size)))
            return s;
        if (size != t->size)
            return kiln__error(KILN_E_FORMAT,
                               "%s: external data holds %llu bytes, its shape and type need %llu", what,
                               (unsigned long long)size, (unsigned long long)t->size);
        t->external = true;
        return t->size ? use_bytes(m, t, p, esize) : (t->data = &zero, KILN_OK);
    }
    if (src->have_raw) {
        if (n_typed || n_other)
            return kiln__error(KILN_E_FORMAT, "%s: raw_data and typed data both present", what);
        if (src->raw_len != t->size)
            return kiln__error(KILN_E_FORMAT, "%s: raw_data holds %zu bytes, its shape and type need %llu",
                               what, src->raw_len, (unsigned long long)t->size);
        return t->size ? use_bytes(m, t, src->raw, esize) : (t->data = &zero, KILN_OK);
    }
    if (n_other)
        return kiln__error(KILN_E_FORMAT, "%s: values in a field that does not hold %s", what,
                           kiln__onnx_type_name(t->type));
    want = (int64_t)t->n_elements * ((t->type == 14 || t->type == 15) ? 2 : 1);
    if (t->n_elements && !number)
        return kiln__error(KILN_E_UNSUPPORTED, "%s: %s values must be in raw_data", what,
                           kiln__onnx_type_name(t->type));
    if (n_typed != want)
        return kiln__error(KILN_E_FORMAT, "%s: %lld values present, its shape needs %lld", what,
                           (long long)n_typed, (long long)want);
    if (!t->size) {
        t->data = &zero;
        return KILN_OK;
    }
    return read_typed(m, c, t, what, number, wire, n_typed, esize);
}

kiln_status kiln__onnx_parse_tensor(kiln_onnx *m, kiln__pb c, kiln__onnx_tensor *t, const char *what_in) {
    char what[192];
    tensor_src src;
    bool half;
    size_t esize;
    kiln_status s;
    memset(&src, 0, sizeof src);
    t->name = "";
    t->rank = 0;
    t->type = 0;
    snprintf(what, sizeof what, "%s", what_in);
    if ((s = scan(m, c, t, what, &src))) return s;
    if (t->name[0]) snprintf(what, sizeof what, "%s '%.128s'", what_in, t->name);
    esize = kiln__onnx_type_size(t->type, &half);
    if (!esize)
        return kiln__error(KILN_E_UNSUPPORTED, "%s: element type %s is not supported", what,
                           kiln__onnx_type_name(t->type));
    t->dims = kiln__onnx_alloc(m, (size_t)t->rank, sizeof *t->dims, "a tensor's dims");
    if (!t->dims) return KILN_E_NOMEM;
    if ((s = read_dims(c, t, what))) return s;
    if (half) {
        t->size = t->n_elements / 2 + (t->n_elements & 1);
    } else if (kiln__mul_overflow_u64(t->n_elements, esize, &t->size) || t->size > SIZE_MAX / 2) {
        return kiln__error(KILN_E_FORMAT, "%s: %llu elements of %zu bytes overflow", what,
                           (unsigned long long)t->n_elements, esize);
    }
    return resolve_data(m, c, t, what, &src, esize);
}
