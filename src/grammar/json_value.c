/*
 * json_value.c - the bounded JSON reader of json_value.h: recursive descent (depth bounded), strings
 * with every escape and surrogate pairs decoded, invalid UTF-8 and NUL characters refused.
 */
#include "grammar/json_value.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct reader {
    const char *s;
    size_t len, pos;
    kiln_status st;
} reader;

static bool fail(reader *r, const char *what) {
    if (r->st != KILN_OK) return false;
    int line = 1, col = 1;
    for (size_t i = 0; i < r->pos && i < r->len; i++) {
        if (r->s[i] == '\n')
            line++, col = 1;
        else
            col++;
    }
    r->st = kiln__error(KILN_E_FORMAT, "schema: not valid JSON at line %d, column %d: %s", line, col, what);
    return false;
}

static int peek(const reader *r) {
    return r->pos < r->len ? (unsigned char)r->s[r->pos] : -1;
}

static void skip_ws(reader *r) {
    while (peek(r) == ' ' || peek(r) == '\t' || peek(r) == '\n' || peek(r) == '\r')
        r->pos++;
}

static bool grow(reader *r, char **buf, size_t *cap, size_t need) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap * 2 : 16;
    while (c < need)
        c *= 2;
    char *b = kiln__realloc(*buf, c);
    if (!b) {
        if (r->st == KILN_OK) r->st = kiln__nomem("the schema");
        return false;
    }
    *buf = b, *cap = c;
    return true;
}

static bool put_utf8(reader *r, char **buf, size_t *n, size_t *cap, uint32_t cp) {
    if (!grow(r, buf, cap, *n + 5)) return false;
    char *o = *buf + *n;
    if (cp < 0x80)
        o[0] = (char)cp, *n += 1;
    else if (cp < 0x800)
        o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3F)), *n += 2;
    else if (cp < 0x10000)
        o[0] = (char)(0xE0 | cp >> 12), o[1] = (char)(0x80 | (cp >> 6 & 0x3F)),
        o[2] = (char)(0x80 | (cp & 0x3F)), *n += 3;
    else
        o[0] = (char)(0xF0 | cp >> 18), o[1] = (char)(0x80 | (cp >> 12 & 0x3F)),
        o[2] = (char)(0x80 | (cp >> 6 & 0x3F)), o[3] = (char)(0x80 | (cp & 0x3F)), *n += 4;
    return true;
}

static bool hex4(reader *r, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        int c = peek(r), h = c >= '0' && c <= '9'   ? c - '0'
                             : c >= 'a' && c <= 'f' ? c - 'a' + 10
                             : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                                    : -1;
        if (h < 0) return fail(r, "\\u needs four hexadecimal digits");
        v = v << 4 | (uint32_t)h;
        r->pos++;
    }
    *out = v;
    return true;
}

static bool escape(reader *r, uint32_t *cp) {
    int e = peek(r);
    r->pos++;
    switch (e) {
    case '"': *cp = '"'; return true;
    case '\\': *cp = '\\'; return true;
    case '/': *cp = '/'; return true;
    case 'b': *cp = '\b'; return true;
    case 'f': *cp = '\f'; return true;
    case 'n': *cp = '\n'; return true;
    case 'r': *cp = '\r'; return true;
    case 't': *cp = '\t'; return true;
    case 'u': break;
    default: return fail(r, "unknown escape in a string");
    }
    if (!hex4(r, cp)) return false;
    if (*cp >= 0xDC00 && *cp <= 0xDFFF) return fail(r, "a lone low surrogate");
    if (*cp >= 0xD800 && *cp <= 0xDBFF) {
        uint32_t lo;
        if (peek(r) != '\\' || r->pos + 1 >= r->len || r->s[r->pos + 1] != 'u')
            return fail(r, "a high surrogate without its low half");
        r->pos += 2;
        if (!hex4(r, &lo)) return false;
        if (lo < 0xDC00 || lo > 0xDFFF) return fail(r, "a high surrogate without its low half");
        *cp = 0x10000 + ((*cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    if (*cp == 0) return fail(r, "\\u0000 in a string");
    return true;
}

static bool parse_string(reader *r, char **out, size_t *out_len) {
    char *buf = NULL;
    size_t n = 0, cap = 0;
    r->pos++;
    for (;;) {
        int c = peek(r);
        if (c < 0) {
            kiln__dealloc(buf);
            return fail(r, "unterminated string");
        }
        r->pos++;
        if (c == '"') break;
        bool ok;
        if (c == '\\') {
            uint32_t cp;
            ok = escape(r, &cp) && put_utf8(r, &buf, &n, &cap, cp);
        } else if (c < 0x20) {
            ok = fail(r, "a control character inside a string");
        } else if (c < 0x80) {
            ok = grow(r, &buf, &cap, n + 2);
            if (ok) buf[n++] = (char)c;
        } else { /* a UTF-8 sequence, validated */
            int extra = c >= 0xC2 && c <= 0xDF ? 1 : (c & 0xF0) == 0xE0 ? 2 : c >= 0xF0 && c <= 0xF4 ? 3 : -1;
            uint32_t cp = (uint32_t)c & (0x3Fu >> (extra > 0 ? extra : 0));
            ok = extra > 0 && r->pos + (size_t)extra <= r->len;
            for (int i = 0; ok && i < extra; i++) {
                unsigned char b = (unsigned char)r->s[r->pos++];
                ok = (b & 0xC0) == 0x80;
                cp = cp << 6 | (b & 0x3Fu);
            }
            static const uint32_t min_cp[4] = {0, 0x80, 0x800, 0x10000};
            ok = ok && cp >= min_cp[extra] && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
            ok = ok ? put_utf8(r, &buf, &n, &cap, cp) : fail(r, "invalid UTF-8 in a string");
        }
        if (!ok) {
            kiln__dealloc(buf);
            return false;
        }
    }
    if (!grow(r, &buf, &cap, n + 1)) {
        kiln__dealloc(buf);
        return false;
    }
    buf[n] = 0;
    *out = buf, *out_len = n;
    return true;
}

static bool parse_number(reader *r, kg_json *v) {
    size_t start = r->pos;
    if (peek(r) == '-') r->pos++;
    if (peek(r) == '0')
        r->pos++;
    else if (peek(r) >= '1' && peek(r) <= '9')
        while (peek(r) >= '0' && peek(r) <= '9')
            r->pos++;
    else
        return fail(r, "expected a value");
    if (peek(r) == '.') {
        r->pos++;
        if (!(peek(r) >= '0' && peek(r) <= '9')) return fail(r, "expected a digit after '.'");
        while (peek(r) >= '0' && peek(r) <= '9')
            r->pos++;
    }
    if (peek(r) == 'e' || peek(r) == 'E') {
        r->pos++;
        if (peek(r) == '+' || peek(r) == '-') r->pos++;
        if (!(peek(r) >= '0' && peek(r) <= '9')) return fail(r, "expected a digit in the exponent");
        while (peek(r) >= '0' && peek(r) <= '9')
            r->pos++;
    }
    v->type = KGJ_NUMBER;
    v->len = r->pos - start;
    if (!(v->text = kiln__strndup(r->s + start, v->len))) {
        r->st = kiln__nomem("the schema");
        return false;
    }
    v->number = strtod(v->text, NULL);
    return true;
}

static bool parse_value(reader *r, kg_json *v, int depth);

static bool push_item(reader *r, kg_json *v, size_t *cap) {
    if (v->n < *cap) return true;
    size_t c = *cap ? *cap * 2 : 4;
    kg_json *items = kiln__realloc_array(v->items, c, sizeof *items);
    if (items) v->items = items;
    char **keys = v->type == KGJ_OBJECT ? kiln__realloc_array(v->keys, c, sizeof *keys) : NULL;
    if (keys) v->keys = keys;
    if (!items || (v->type == KGJ_OBJECT && !keys)) {
        if (r->st == KILN_OK) r->st = kiln__nomem("the schema");
        return false;
    }
    *cap = c;
    return true;
}

static bool parse_container(reader *r, kg_json *v, int depth) {
    bool object = peek(r) == '{';
    int close = object ? '}' : ']';
    v->type = object ? KGJ_OBJECT : KGJ_ARRAY;
    if (depth >= KG_JSON_MAX_DEPTH) return fail(r, "nested deeper than 64 levels");
    r->pos++;
    skip_ws(r);
    if (peek(r) == close) {
        r->pos++;
        return true;
    }
    for (size_t cap = 0;;) {
        skip_ws(r);
        if (!push_item(r, v, &cap)) return false;
        memset(&v->items[v->n], 0, sizeof v->items[v->n]);
        if (object) {
            size_t klen;
            if (peek(r) != '"') return fail(r, "expected a member name");
            if (!parse_string(r, &v->keys[v->n], &klen)) return false;
            if (strlen(v->keys[v->n]) != klen) {
                kiln__dealloc(v->keys[v->n]);
                return fail(r, "a member name holds NUL");
            }
            skip_ws(r);
            if (peek(r) != ':') {
                kiln__dealloc(v->keys[v->n]);
                return fail(r, "expected ':' after a member name");
            }
            r->pos++;
        }
        v->n++;
        if (!parse_value(r, &v->items[v->n - 1], depth + 1)) return false;
        skip_ws(r);
        if (peek(r) == ',') {
            r->pos++;
            continue;
        }
        if (peek(r) == close) {
            r->pos++;
            return true;
        }
        return fail(r, object ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static bool literal(reader *r, const char *word) {
    size_t n = strlen(word);
    if (r->len - r->pos < n || memcmp(r->s + r->pos, word, n) != 0) return fail(r, "expected a value");
    r->pos += n;
    return true;
}

static bool parse_value(reader *r, kg_json *v, int depth) {
    skip_ws(r);
    memset(v, 0, sizeof *v);
    int c = peek(r);
    if (c == '{' || c == '[') return parse_container(r, v, depth);
    if (c == '"') {
        v->type = KGJ_STRING;
        return parse_string(r, &v->text, &v->len);
    }
    if (c == 't' || c == 'f') {
        v->type = KGJ_BOOL;
        v->boolean = c == 't';
        return literal(r, c == 't' ? "true" : "false");
    }
    if (c == 'n') return literal(r, "null");
    return parse_number(r, v);
}

kiln_status kiln__json_parse(const char *text, size_t len, kg_json *out) {
    memset(out, 0, sizeof *out);
    if (len > KG_JSON_MAX_BYTES)
        return kiln__error(KILN_E_FORMAT, "schema: %zu bytes; at most %u are accepted", len,
                           KG_JSON_MAX_BYTES);
    reader r = {.s = text, .len = len, .st = KILN_OK};
    if (parse_value(&r, out, 0)) {
        skip_ws(&r);
        if (r.pos != r.len) fail(&r, "text after the value");
    }
    if (r.st != KILN_OK) kiln__json_free(out);
    return r.st;
}

void kiln__json_free(kg_json *v) {
    if (!v) return;
    for (size_t i = 0; i < v->n; i++) {
        kiln__json_free(&v->items[i]);
        if (v->keys) kiln__dealloc(v->keys[i]);
    }
    kiln__dealloc(v->items);
    kiln__dealloc(v->keys);
    kiln__dealloc(v->text);
    memset(v, 0, sizeof *v);
}

const kg_json *kiln__json_get(const kg_json *obj, const char *key) {
    if (!obj || obj->type != KGJ_OBJECT) return NULL;
    for (size_t i = 0; i < obj->n; i++)
        if (strcmp(obj->keys[i], key) == 0) return &obj->items[i];
    return NULL;
}
