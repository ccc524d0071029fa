/*
 * npy.c - the .npy reader and writer of `kiln onnx run` (npy.h says what is accepted).
 *
 * A header is "\x93NUMPY", major and minor version bytes, a little-endian header length (2 bytes in 1.0,
 * 4 in 2.0 and 3.0), then that many bytes of a Python dict literal such as
 * {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded with spaces and a newline; the data
 * follows. The dict is read by a small scanner over the header's bytes only (never past its length).
 */
#include "npy.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int npy_fail(char *err, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    return -1;
}

typedef struct scan {
    const char *p, *end;
} scan;

static void skip_space(scan *s) {
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
        s->p++;
}

static bool eat(scan *s, char c) {
    skip_space(s);
    if (s->p < s->end && *s->p == c) {
        s->p++;
        return true;
    }
    return false;
}

/* A quoted string ('...' or "...", no escapes): its bytes in [*str, *str + *len). */
static bool quoted(scan *s, const char **str, size_t *len) {
    char q;
    skip_space(s);
    if (s->p >= s->end || (*s->p != '\'' && *s->p != '"')) return false;
    q = *s->p++;
    *str = s->p;
    while (s->p < s->end && *s->p != q) {
        if (*s->p == '\\') return false;
        s->p++;
    }
    if (s->p >= s->end) return false;
    *len = (size_t)(s->p - *str);
    s->p++;
    return true;
}

static bool word(scan *s, const char *w) {
    size_t n = strlen(w);
    skip_space(s);
    if ((size_t)(s->end - s->p) < n || memcmp(s->p, w, n) != 0) return false;
    s->p += n;
    return true;
}

/* (d0, d1, ...) with a trailing comma allowed: "()" is rank 0, "(5,)" rank 1. */
static int shape_tuple(scan *s, npy_array *a, char *err, size_t cap) {
    a->rank = 0;
    if (!eat(s, '(')) return npy_fail(err, cap, "'shape' is not a tuple");
    while (!eat(s, ')')) {
        int64_t d = 0;
        skip_space(s);
        if (s->p >= s->end || *s->p < '0' || *s->p > '9')
            return npy_fail(err, cap, "'shape' holds something other than a dim");
        while (s->p < s->end && *s->p >= '0' && *s->p <= '9') {
            if (d > (INT64_MAX - 9) / 10) return npy_fail(err, cap, "a dim of 'shape' overflows");
            d = d * 10 + (*s->p++ - '0');
        }
        if (a->rank == KILN_MAX_ONNX_RANK)
            return npy_fail(err, cap, "'shape' has over %d dims", KILN_MAX_ONNX_RANK);
        a->shape[a->rank++] = d;
        if (!eat(s, ',')) {
            if (!eat(s, ')')) return npy_fail(err, cap, "'shape' is not a tuple of dims");
            break;
        }
    }
    return 0;
}

/* The dict: 'descr', 'fortran_order' and 'shape', each exactly once, in any order. */
static int header_dict(scan *s, npy_array *a, char *err, size_t cap) {
    bool have_descr = false, have_order = false, have_shape = false;
    if (!eat(s, '{')) return npy_fail(err, cap, "the header is not a dict");
    while (!eat(s, '}')) {
        const char *key, *val;
        size_t klen, vlen;
        if (!quoted(s, &key, &klen) || !eat(s, ':'))
            return npy_fail(err, cap, "the header dict is malformed");
        if (klen == 5 && !memcmp(key, "descr", 5) && !have_descr) {
            if (!quoted(s, &val, &vlen)) return npy_fail(err, cap, "'descr' is not a string");
            if (vlen == 3 && !memcmp(val, "<f4", 3))
                a->type = KILN_ONNX_FLOAT;
            else if (vlen == 3 && !memcmp(val, "<i8", 3))
                a->type = KILN_ONNX_INT64;
            else
                return npy_fail(err, cap, "element type '%.*s' (float32 '<f4' and int64 '<i8' are read)",
                                (int)(vlen > 16 ? 16 : vlen), val);
            have_descr = true;
        } else if (klen == 13 && !memcmp(key, "fortran_order", 13) && !have_order) {
            if (word(s, "True")) return npy_fail(err, cap, "Fortran order (C order is read)");
            if (!word(s, "False")) return npy_fail(err, cap, "'fortran_order' is not True or False");
            have_order = true;
        } else if (klen == 5 && !memcmp(key, "shape", 5) && !have_shape) {
            if (shape_tuple(s, a, err, cap)) return -1;
            have_shape = true;
        } else {
            return npy_fail(err, cap, "the header has an unknown or repeated key '%.*s'",
                            (int)(klen > 32 ? 32 : klen), key);
        }
        if (!eat(s, ',')) {
            if (!eat(s, '}')) return npy_fail(err, cap, "the header dict is malformed");
            break;
        }
    }
    if (!have_descr || !have_order || !have_shape)
        return npy_fail(err, cap, "the header lacks 'descr', 'fortran_order' or 'shape'");
    skip_space(s);
    if (s->p != s->end) return npy_fail(err, cap, "the header has bytes after its dict");
    return 0;
}

int npy_parse(const uint8_t *buf, size_t len, npy_array *out, char *err, size_t cap) {
    size_t start, hlen, n = 1;
    scan s;
    memset(out, 0, sizeof *out);
    if (len < 10 || memcmp(buf, "\x93NUMPY", 6) != 0)
        return npy_fail(err, cap, "not a .npy file (no \\x93NUMPY magic)");
    if (buf[6] == 1) {
        hlen = (size_t)buf[8] | (size_t)buf[9] << 8;
        start = 10;
    } else if (buf[6] == 2 || buf[6] == 3) {
        if (len < 12) return npy_fail(err, cap, "truncated header");
        hlen = (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
        start = 12;
    } else {
        return npy_fail(err, cap, "format version %u.%u (1.0 to 3.0 are read)", buf[6], buf[7]);
    }
    if (hlen > NPY_MAX_HEADER || hlen > len - start)
        return npy_fail(err, cap, "header of %zu bytes, over the %zu bytes after it in the file", hlen,
                        len - start);
    s.p = (const char *)buf + start;
    s.end = s.p + hlen;
    if (header_dict(&s, out, err, cap)) return -1;
    for (int32_t i = 0; i < out->rank; i++)
        if (out->shape[i] != 0 && n > SIZE_MAX / 8 / (uint64_t)out->shape[i])
            return npy_fail(err, cap, "the element count overflows");
        else
            n *= (size_t)out->shape[i];
    out->size = n * (out->type == KILN_ONNX_FLOAT ? 4 : 8);
    if (out->size != len - start - hlen)
        return npy_fail(err, cap, "%zu bytes of data, the shape needs %zu", len - start - hlen, out->size);
    out->data = buf + start + hlen;
    return 0;
}

/* The descr NumPy writes for type, or NULL for one the writer does not write. */
static const char *descr_of(kiln_onnx_type type, size_t *es) {
    switch (type) {
    case KILN_ONNX_FLOAT: return *es = 4, "<f4";
    case KILN_ONNX_INT64: return *es = 8, "<i8";
    case KILN_ONNX_INT32: return *es = 4, "<i4";
    case KILN_ONNX_BOOL: return *es = 1, "|b1";
    case KILN_ONNX_UINT8: return *es = 1, "|u1";
    case KILN_ONNX_INT8: return *es = 1, "|i1";
    default: return NULL;
    }
}

int npy_image(kiln_onnx_type type, int32_t rank, const int64_t *shape, const void *data, uint8_t **out,
              size_t *out_len) {
    char header[96 + 24 * KILN_MAX_ONNX_RANK];
    size_t n = 1, len, es = 0, bytes;
    const char *descr = descr_of(type, &es);
    int at;
    *out = NULL;
    if (!descr || rank < 0 || rank > KILN_MAX_ONNX_RANK) return errno = EINVAL, -1;
    at = snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (int32_t i = 0; i < rank; i++) {
        if (shape[i] < 0 || (shape[i] && n > SIZE_MAX / es / (size_t)shape[i])) return errno = EOVERFLOW, -1;
        at += snprintf(header + at, sizeof header - (size_t)at, "%lld,%s", (long long)shape[i],
                       i + 1 < rank ? " " : "");
        n *= (size_t)shape[i];
    }
    at += snprintf(header + at, sizeof header - (size_t)at, "), }");
    len = (size_t)at;
    while ((10 + len + 1) % 64)
        header[len++] = ' '; /* data aligned to 64 bytes, as NumPy does */
    header[len++] = '\n';
    bytes = n * es;
    if (bytes > SIZE_MAX - 10 - len || !(*out = malloc(10 + len + bytes))) return errno = ENOMEM, -1;
    uint8_t pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (uint8_t)(len & 0xff), (uint8_t)(len >> 8)};
    memcpy(*out, pre, 10);
    memcpy(*out + 10, header, len);
    if (bytes) memcpy(*out + 10 + len, data, bytes);
    *out_len = 10 + len + bytes;
    return 0;
}

int npy_write(const char *path, kiln_onnx_type type, int32_t rank, const int64_t *shape, const void *data) {
    uint8_t *image;
    size_t len;
    FILE *f;
    bool ok;
    if (npy_image(type, rank, shape, data, &image, &len)) return -1;
    if (!(f = fopen(path, "wb"))) {
        free(image);
        return -1;
    }
    ok = fwrite(image, 1, len, f) == len;
    if (fclose(f) != 0) ok = false;
    free(image);
    if (!ok && !errno) errno = EIO;
    return ok ? 0 : -1;
}
