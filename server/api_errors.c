/*
 * api_errors.c - OpenAI's error envelope, {"error": {"message", "type", "param", "code"}}, and the
 * helpers that fill a ks_api_error. The message is always valid UTF-8: a client's bytes quoted in it are
 * cut at a character boundary by the callers (they quote only validated strings) and jansson escapes the
 * rest.
 */
#include "api.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void utf8_sanitize(char *s);

static void fill(ks_api_error *err, int status, const char *type, const char *code, const char *param,
                 const char *fmt, va_list ap) {
    err->status = status;
    err->type = type;
    err->code = code;
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    utf8_sanitize(err->message); /* "%.40s" or the buffer's end may have cut a character */
}

bool ks_api_fail(ks_api_error *err, int status, const char *type, const char *code, const char *param,
                 const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fill(err, status, type, code, param, fmt, ap);
    va_end(ap);
    return false;
}

bool ks_api_bad(ks_api_error *err, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fill(err, 400, "invalid_request_error", NULL, param, fmt, ap);
    va_end(ap);
    return false;
}

char *ks_api_error_json(const ks_api_error *err) {
    json_t *inner = json_pack("{s:s, s:s, s:o, s:o}", "message", err->message, "type",
                              err->type ? err->type : "server_error", "param",
                              err->param[0] ? json_string(err->param) : json_null(), "code",
                              err->code ? json_string(err->code) : json_null());
    if (!inner) return NULL;
    json_t *root = json_pack("{s:o}", "error", inner);
    if (!root) return NULL;
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return s;
}

/* The length of the valid UTF-8 character at p (RFC 3629: no overlong forms, no surrogates, nothing above
 * U+10FFFF, no NUL), or 0 when the bytes there are not one. */
static size_t utf8_char(const unsigned char *p, size_t avail) {
    unsigned c = p[0], cp, min;
    size_t need;
    if (c == 0) return 0;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF)
        need = 1, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF)
        need = 2, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4)
        need = 3, min = 0x10000;
    else
        return 0;
    if (avail <= need) return 0;
    cp = c & (0x3Fu >> need);
    for (size_t k = 1; k <= need; k++) {
        if ((p[k] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (p[k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return need + 1;
}

bool ks_api_utf8_valid(const char *s, size_t len) {
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0, k; i < len; i += k)
        if ((k = utf8_char(p + i, len - i)) == 0) return false;
    return true;
}

/* Replace each byte that does not start a valid character with '?' (a message may quote a cut string). */
static void utf8_sanitize(char *s) {
    unsigned char *p = (unsigned char *)s;
    size_t len = strlen(s);
    for (size_t i = 0, k; i < len; i += k)
        if ((k = utf8_char(p + i, len - i)) == 0) p[i] = '?', k = 1;
}

json_t *ks_api_json_lossy(const char *s, size_t len) {
    if (ks_api_utf8_valid(s, len)) return json_stringn(s, len);
    const unsigned char *p = (const unsigned char *)s;
    char *buf = malloc(len * 3 + 1);
    if (!buf) return NULL;
    size_t o = 0;
    for (size_t i = 0, k; i < len; i += k) {
        if ((k = utf8_char(p + i, len - i)) == 0) {
            memcpy(buf + o, "\xEF\xBF\xBD", 3), o += 3, k = 1;
        } else {
            memcpy(buf + o, s + i, k), o += k;
        }
    }
    json_t *j = json_stringn(buf, o);
    free(buf);
    return j;
}
