/*
 * json_schema.c - JSON Schema -> GBNF (kiln_json_schema_to_gbnf). The sentences of the grammar are JSON
 * documents that validate against the schema, so decoding under it can only produce valid output.
 *
 * What is enforced (docs/grammar.md): type (one or a list), properties with required (properties come
 * in the schema's order; each optional one may be left out; no property beyond them is generated, which
 * every additionalProperties value allows), additionalProperties as a schema for objects without
 * properties, enum and const (any JSON values), items with minItems/maxItems, anyOf and oneOf (as
 * alternatives: a document matching two oneOf branches is possible when the branches overlap), allOf
 * with one schema, $ref to "#", "#/$defs/..." and "#/definitions/...", string minLength/maxLength, the
 * string formats date-time, date, time and uuid (other formats are annotations and are not enforced, as
 * validators do by default), and minimum 0 or 1 on integers (minimum 0 on numbers). Keywords that
 * constrain documents in other ways (pattern, other bounds, uniqueItems, not, if/then/else, ...) are
 * refused with KILN_E_UNSUPPORTED naming the keyword and where it is; annotations (title, description,
 * default, examples, $schema, $id, $comment, readOnly, ...) are ignored.
 *
 * Rules are written as they complete, children first; the primitives (json-string, json-number, the
 * formats, ws, ...) close the text. Whitespace between tokens is bounded (at most a newline and 16
 * spaces or tabs), so a document cannot grow without bound in whitespace.
 */
#include "grammar/grammar.h"
#include "grammar/json_value.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define MAX_PROPERTIES 1000u
#define MAX_REFS 256u

typedef struct kg_buf {
    char *s;
    size_t len, cap;
} kg_buf;

typedef struct conv {
    kg_buf out; /* finished rules */
    const kg_json *root;
    char path[256]; /* a JSON pointer to the schema being compiled, for messages */
    uint32_t n_rules;
    const kg_json *ref_schema[MAX_REFS]; /* $ref targets that have a rule already */
    char ref_name[MAX_REFS][32];
    uint32_t n_refs;
    kiln_status st;
} conv;

static const char PRIMITIVES[] =
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,16}\n"
    "json-char ::= [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" json-hex4)\n"
    "json-hex4 ::= ([0-9a-cA-Ce-fE-F] [0-9a-fA-F] | [dD] [0-7]) [0-9a-fA-F]{2}\n"
    "json-string ::= \"\\\"\" json-char* \"\\\"\"\n"
    "json-digits ::= \"0\" | [1-9] [0-9]{0,15}\n"
    "json-integer ::= \"-\"? json-digits\n"
    "json-uint ::= json-digits\n"
    "json-posint ::= [1-9] [0-9]{0,15}\n"
    "json-fraction ::= (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?\n"
    "json-number ::= json-integer json-fraction\n"
    "json-unumber ::= json-digits json-fraction\n"
    "json-boolean ::= \"true\" | \"false\"\n"
    "json-null ::= \"null\"\n"
    "json-value ::= json-object | json-array | json-string | json-number | json-boolean | json-null\n"
    "json-member ::= json-string ws \":\" ws json-value ws\n"
    "json-object ::= \"{\" ws (json-member (\",\" ws json-member)*)? \"}\"\n"
    "json-array ::= \"[\" ws (json-value ws (\",\" ws json-value ws)*)? \"]\"\n"
    "fmt-date ::= [0-9]{4} \"-\" (\"0\" [1-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01])\n"
    "fmt-time ::= ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" ([0-5] [0-9] | \"60\") (\".\" "
    "[0-9]{1,6})? "
    "(\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])\n"
    "fmt-uuid ::= [0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{12}\n"
    "json-date ::= \"\\\"\" fmt-date \"\\\"\"\n"
    "json-time ::= \"\\\"\" fmt-time \"\\\"\"\n"
    "json-date-time ::= \"\\\"\" fmt-date \"T\" fmt-time \"\\\"\"\n"
    "json-uuid ::= \"\\\"\" fmt-uuid \"\\\"\"\n";

static bool fail(conv *c, kiln_status st, const char *fmt, ...) KILN__PRINTF(3, 4);
static bool fail(conv *c, kiln_status st, const char *fmt, ...) {
    if (c->st != KILN_OK) return false;
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->st = kiln__error(st, "schema at %s: %s", c->path[0] ? c->path : "/", msg);
    return false;
}

static bool put(conv *c, kg_buf *b, const char *s, size_t n) {
    if (c->st != KILN_OK) return false;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        if (cap > KG_MAX_TEXT + 1)
            return fail(c, KILN_E_UNSUPPORTED, "the grammar would exceed %u bytes", KG_MAX_TEXT);
        char *s2 = kiln__realloc(b->s, cap);
        if (!s2) {
            c->st = kiln__nomem("the schema's grammar");
            return false;
        }
        b->s = s2, b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
    return true;
}

static bool putf(conv *c, kg_buf *b, const char *fmt, ...) KILN__PRINTF(3, 4);
/* Formatted text of any length (%s arguments may be long: rule bodies, property names). */
static bool putf(conv *c, kg_buf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return fail(c, KILN_E_INTERNAL, "formatting the grammar failed");
    if ((size_t)n < sizeof tmp) return put(c, b, tmp, (size_t)n);
    char *big = kiln__alloc((size_t)n + 1);
    if (!big) {
        if (c->st == KILN_OK) c->st = kiln__nomem("the schema's grammar");
        return false;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    bool ok = put(c, b, big, (size_t)n);
    kiln__dealloc(big);
    return ok;
}

/* Append "/seg" to the path (truncated when long); returns the old length to restore. */
static size_t path_push(conv *c, const char *seg) {
    size_t old = strlen(c->path);
    snprintf(c->path + old, sizeof c->path - old, "/%s", seg);
    return old;
}

/* A fresh rule name from a hint (a property name: letters and digits kept). */
static void new_name(conv *c, const char *hint, char name[32]) {
    char h[16];
    size_t n = 0;
    for (const char *p = hint; *p && n < 12; p++)
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9')) h[n++] = *p;
    h[n] = 0;
    snprintf(name, 32, "%s%s%u", n ? h : "s", n ? "-" : "", c->n_rules++);
}

/* bytes as a GBNF string literal. */
static bool put_literal(conv *c, kg_buf *b, const char *s, size_t n) {
    put(c, b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\')
            putf(c, b, "\\%c", ch);
        else if (ch < 0x20 || ch == 0x7F)
            putf(c, b, "\\x%02X", ch);
        else
            put(c, b, (const char *)&ch, 1);
    }
    return put(c, b, "\"", 1);
}

/* A JSON value as compact JSON text. */
static bool put_json(conv *c, kg_buf *b, const kg_json *v, int depth) {
    if (depth > KG_JSON_MAX_DEPTH) return fail(c, KILN_E_UNSUPPORTED, "a value nested too deeply");
    switch (v->type) {
    case KGJ_NULL: return put(c, b, "null", 4);
    case KGJ_BOOL: return v->boolean ? put(c, b, "true", 4) : put(c, b, "false", 5);
    case KGJ_NUMBER: return put(c, b, v->text, v->len);
    case KGJ_STRING:
        put(c, b, "\"", 1);
        for (size_t i = 0; i < v->len; i++) {
            unsigned char ch = (unsigned char)v->text[i];
            static const char short_escape[] = "btnvfr"; /* \b \t \n (\v has none) \f \r */
            if (ch == '"' || ch == '\\')
                putf(c, b, "\\%c", ch);
            else if (ch >= 8 && ch <= 13 && ch != 11)
                putf(c, b, "\\%c", short_escape[ch - 8]);
            else if (ch < 0x20)
                putf(c, b, "\\u%04x", ch);
            else
                put(c, b, (const char *)&ch, 1);
        }
        return put(c, b, "\"", 1);
    case KGJ_ARRAY:
    case KGJ_OBJECT:
        put(c, b, v->type == KGJ_ARRAY ? "[" : "{", 1);
        for (size_t i = 0; i < v->n; i++) {
            if (i) put(c, b, ",", 1);
            if (v->type == KGJ_OBJECT) {
                kg_json key = {.type = KGJ_STRING, .text = v->keys[i], .len = strlen(v->keys[i])};
                put_json(c, b, &key, depth + 1);
                put(c, b, ":", 1);
            }
            put_json(c, b, &v->items[i], depth + 1);
        }
        return put(c, b, v->type == KGJ_ARRAY ? "]" : "}", 1);
    }
    return false;
}

/* The JSON text of v as a GBNF literal. */
static bool put_value_literal(conv *c, kg_buf *b, const kg_json *v) {
    kg_buf tmp = {0};
    bool ok = put_json(c, &tmp, v, 0) && put_literal(c, b, tmp.s, tmp.len);
    kiln__dealloc(tmp.s);
    return ok;
}

/* Write the rule "name ::= body". */
static bool emit_rule(conv *c, const char *name, const kg_buf *body) {
    return putf(c, &c->out, "%s ::= ", name) && put(c, &c->out, body->s ? body->s : "", body->len) &&
           put(c, &c->out, "\n", 1);
}

static bool gen(conv *c, const kg_json *s, const char *hint, char name[32], int depth);

static const char *UNSUPPORTED[] = {
    "pattern",
    "patternProperties",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "minContains",
    "maxContains",
    "prefixItems",
    "dependentRequired",
    "dependentSchemas",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "unevaluatedProperties",
    "unevaluatedItems",
    "$dynamicRef",
    "additionalItems",
    "dependencies",
};

static bool check_keywords(conv *c, const kg_json *s) {
    for (size_t i = 0; i < sizeof UNSUPPORTED / sizeof *UNSUPPORTED; i++)
        if (kiln__json_get(s, UNSUPPORTED[i]))
            return fail(c, KILN_E_UNSUPPORTED, "'%s' cannot be enforced by Kiln's grammar", UNSUPPORTED[i]);
    const kg_json *u = kiln__json_get(s, "uniqueItems");
    if (u && !(u->type == KGJ_BOOL && !u->boolean))
        return fail(c, KILN_E_UNSUPPORTED, "'uniqueItems' cannot be enforced by Kiln's grammar");
    return true;
}

/* A non-negative integer keyword (absent: def); at most KG_MAX_REPEAT. */
static bool get_count(conv *c, const kg_json *s, const char *key, uint32_t def, uint32_t *out) {
    const kg_json *v = kiln__json_get(s, key);
    *out = def;
    if (!v) return true;
    if (v->type != KGJ_NUMBER || v->number < 0 || v->number != floor(v->number))
        return fail(c, KILN_E_FORMAT, "'%s' must be a non-negative integer", key);
    if (v->number > KG_MAX_REPEAT)
        return fail(c, KILN_E_UNSUPPORTED, "'%s' %g is above the %u Kiln can enforce", key, v->number,
                    KG_MAX_REPEAT);
    *out = (uint32_t)v->number;
    return true;
}

/* Repetition text for {lo,hi} with hi UINT32_MAX unbounded. */
static bool put_repeat(conv *c, kg_buf *b, uint32_t lo, uint32_t hi) {
    if (hi == UINT32_MAX) return putf(c, b, "{%u,}", lo);
    return putf(c, b, "{%u,%u}", lo, hi);
}

static bool gen_string(conv *c, const kg_json *s, char name[32]) {
    const kg_json *f = kiln__json_get(s, "format");
    if (f && f->type == KGJ_STRING) {
        const char *known[] = {"date-time", "date", "time", "uuid"};
        for (int i = 0; i < 4; i++)
            if (strcmp(f->text, known[i]) == 0) return snprintf(name, 32, "json-%s", known[i]) > 0;
    }
    uint32_t lo, hi;
    if (!get_count(c, s, "minLength", 0, &lo) || !get_count(c, s, "maxLength", UINT32_MAX, &hi)) return false;
    if (hi < lo)
        return fail(c, KILN_E_UNSUPPORTED, "maxLength %u is below minLength %u: nothing matches", hi, lo);
    if (lo == 0 && hi == UINT32_MAX) return snprintf(name, 32, "json-string") > 0;
    kg_buf body = {0};
    new_name(c, "str", name);
    bool ok = putf(c, &body, "\"\\\"\" json-char") && put_repeat(c, &body, lo, hi) &&
              putf(c, &body, " \"\\\"\"") && emit_rule(c, name, &body);
    kiln__dealloc(body.s);
    return ok;
}

static bool gen_number(conv *c, const kg_json *s, bool integer, char name[32]) {
    const kg_json *min = kiln__json_get(s, "minimum"), *max = kiln__json_get(s, "maximum");
    if (max) return fail(c, KILN_E_UNSUPPORTED, "'maximum' cannot be enforced by Kiln's grammar");
    if (!min) return snprintf(name, 32, integer ? "json-integer" : "json-number") > 0;
    if (min->type == KGJ_NUMBER && min->number == 0)
        return snprintf(name, 32, integer ? "json-uint" : "json-unumber") > 0;
    if (min->type == KGJ_NUMBER && min->number == 1 && integer) return snprintf(name, 32, "json-posint") > 0;
    return fail(c, KILN_E_UNSUPPORTED,
                "'minimum' other than 0 (or 1 for integers) cannot be enforced by Kiln's grammar");
}

/* Properties in order, each optional one may be absent: rules after-i (a member came before, so a comma
 * leads) and first-i (none came yet), from the last property back. */
static bool gen_properties(conv *c, const kg_json *s, const kg_json *props, char name[32], int depth) {
    const kg_json *req = kiln__json_get(s, "required");
    if (req && req->type != KGJ_ARRAY) return fail(c, KILN_E_FORMAT, "'required' must be an array");
    for (size_t i = 0; req && i < req->n; i++) {
        if (req->items[i].type != KGJ_STRING) return fail(c, KILN_E_FORMAT, "'required' must hold strings");
        if (!kiln__json_get(props, req->items[i].text))
            return fail(c, KILN_E_UNSUPPORTED, "required property '%.60s' is not among 'properties'",
                        req->items[i].text);
    }
    if (props->n > MAX_PROPERTIES)
        return fail(c, KILN_E_UNSUPPORTED, "more than %u properties", MAX_PROPERTIES);
    char after[32] = "\"\"", first[32] = "\"\"", value[32]; /* "" (nothing) after the last */
    bool ok = true;
    for (size_t k = props->n; ok && k-- > 0;) {
        bool required = false;
        for (size_t i = 0; req && i < req->n; i++)
            required |= strcmp(req->items[i].text, props->keys[k]) == 0;
        size_t old = path_push(c, "properties");
        path_push(c, props->keys[k]);
        ok = gen(c, &props->items[k], props->keys[k], value, depth + 1);
        c->path[old] = 0;
        kg_buf member = {0}, b1 = {0}, b2 = {0};
        char n_after[32], n_first[32];
        new_name(c, props->keys[k], n_after);
        new_name(c, props->keys[k], n_first);
        kg_json key = {.type = KGJ_STRING, .text = props->keys[k], .len = strlen(props->keys[k])};
        ok = ok && put_value_literal(c, &member, &key) && putf(c, &member, " ws \":\" ws %s ws", value);
        ok = ok && putf(c, &b1, "\",\" ws %s %s", member.s, after) &&
             (required || putf(c, &b1, " | %s", after));
        ok = ok && putf(c, &b2, "%s %s", member.s, after) && (required || putf(c, &b2, " | %s", first));
        ok = ok && emit_rule(c, n_after, &b1) && emit_rule(c, n_first, &b2);
        kiln__dealloc(member.s);
        kiln__dealloc(b1.s);
        kiln__dealloc(b2.s);
        memcpy(after, n_after, 32);
        memcpy(first, n_first, 32);
    }
    kg_buf body = {0};
    new_name(c, "obj", name);
    ok = ok && putf(c, &body, "\"{\" ws %s \"}\"", first) && emit_rule(c, name, &body);
    kiln__dealloc(body.s);
    return ok;
}

static bool gen_object(conv *c, const kg_json *s, char name[32], int depth) {
    const kg_json *props = kiln__json_get(s, "properties"), *add = kiln__json_get(s, "additionalProperties");
    if (props && props->type != KGJ_OBJECT) return fail(c, KILN_E_FORMAT, "'properties' must be an object");
    if (props && props->n > 0) return gen_properties(c, s, props, name, depth);
    const kg_json *req = kiln__json_get(s, "required");
    if (req && req->type == KGJ_ARRAY && req->n > 0)
        return fail(c, KILN_E_UNSUPPORTED, "'required' names properties that 'properties' does not define");
    if (add && add->type == KGJ_BOOL && !add->boolean)
        return snprintf(name, 32, "obj-empty%u", c->n_rules++) > 0 &&
               putf(c, &c->out, "%s ::= \"{\" ws \"}\"\n", name);
    if (!add || add->type == KGJ_BOOL) return snprintf(name, 32, "json-object") > 0;
    char value[32];
    size_t old = path_push(c, "additionalProperties");
    bool ok = gen(c, add, "value", value, depth + 1);
    c->path[old] = 0;
    kg_buf body = {0};
    new_name(c, "map", name);
    ok = ok &&
         putf(c, &body,
              "\"{\" ws (json-string ws \":\" ws %s ws (\",\" ws json-string ws \":\" ws %s ws)*)? \"}\"",
              value, value) &&
         emit_rule(c, name, &body);
    kiln__dealloc(body.s);
    return ok;
}

static bool gen_array(conv *c, const kg_json *s, char name[32], int depth) {
    const kg_json *items = kiln__json_get(s, "items");
    if (items && items->type == KGJ_ARRAY)
        return fail(c, KILN_E_UNSUPPORTED, "'items' as an array (tuples) is not supported");
    uint32_t lo, hi;
    if (!get_count(c, s, "minItems", 0, &lo) || !get_count(c, s, "maxItems", UINT32_MAX, &hi)) return false;
    if (hi < lo)
        return fail(c, KILN_E_UNSUPPORTED, "maxItems %u is below minItems %u: nothing matches", hi, lo);
    char item[32] = "json-value";
    size_t old = path_push(c, "items");
    bool ok = !items || gen(c, items, "item", item, depth + 1);
    c->path[old] = 0;
    kg_buf body = {0};
    new_name(c, "arr", name);
    if (ok && hi == 0)
        ok = put(c, &body, "\"[\" ws \"]\"", 10);
    else if (ok && lo == 0)
        ok = putf(c, &body, "\"[\" ws (%s ws (\",\" ws %s ws)", item, item) &&
             put_repeat(c, &body, 0, hi == UINT32_MAX ? hi : hi - 1) && put(c, &body, ")? \"]\"", 6);
    else if (ok)
        ok = putf(c, &body, "\"[\" ws %s ws (\",\" ws %s ws)", item, item) &&
             put_repeat(c, &body, lo - 1, hi == UINT32_MAX ? hi : hi - 1) && put(c, &body, " \"]\"", 4);
    ok = ok && emit_rule(c, name, &body);
    kiln__dealloc(body.s);
    return ok;
}

static bool gen_typed(conv *c, const kg_json *s, const char *type, char name[32], int depth) {
    if (strcmp(type, "string") == 0) return gen_string(c, s, name);
    if (strcmp(type, "integer") == 0) return gen_number(c, s, true, name);
    if (strcmp(type, "number") == 0) return gen_number(c, s, false, name);
    if (strcmp(type, "boolean") == 0) return snprintf(name, 32, "json-boolean") > 0;
    if (strcmp(type, "null") == 0) return snprintf(name, 32, "json-null") > 0;
    if (strcmp(type, "object") == 0) return gen_object(c, s, name, depth);
    if (strcmp(type, "array") == 0) return gen_array(c, s, name, depth);
    return fail(c, KILN_E_FORMAT, "unknown type '%.40s'", type);
}

/* A rule of alternatives: each element of list compiled (schemas), or each value's literal (values). */
static bool gen_alternatives(conv *c, const kg_json *list, const char *key, bool values, char name[32],
                             int depth) {
    if (list->type != KGJ_ARRAY || list->n == 0)
        return fail(c, KILN_E_FORMAT, "'%s' must be a non-empty array", key);
    kg_buf body = {0};
    bool ok = true;
    for (size_t i = 0; ok && i < list->n; i++) {
        if (i) put(c, &body, " | ", 3);
        if (values) {
            ok = put_value_literal(c, &body, &list->items[i]);
            continue;
        }
        char sub[32], seg[24];
        snprintf(seg, sizeof seg, "%s/%zu", key, i);
        size_t old = path_push(c, seg);
        ok = gen(c, &list->items[i], "alt", sub, depth + 1) && put(c, &body, sub, strlen(sub));
        c->path[old] = 0;
    }
    new_name(c, key, name);
    ok = ok && emit_rule(c, name, &body);
    kiln__dealloc(body.s);
    return ok;
}

/* "#", "#/$defs/x" or "#/definitions/x" (JSON pointer escapes ~0 ~1 not needed for plain names). */
static bool gen_ref(conv *c, const kg_json *ref, char name[32], int depth) {
    if (ref->type != KGJ_STRING) return fail(c, KILN_E_FORMAT, "'$ref' must be a string");
    const kg_json *target = NULL;
    if (strcmp(ref->text, "#") == 0)
        target = c->root;
    else if (strncmp(ref->text, "#/$defs/", 8) == 0)
        target = kiln__json_get(kiln__json_get(c->root, "$defs"), ref->text + 8);
    else if (strncmp(ref->text, "#/definitions/", 14) == 0)
        target = kiln__json_get(kiln__json_get(c->root, "definitions"), ref->text + 14);
    else
        return fail(c, KILN_E_UNSUPPORTED, "'$ref' '%.80s' is not local (#, #/$defs/..., #/definitions/...)",
                    ref->text);
    if (!target) return fail(c, KILN_E_FORMAT, "'$ref' '%.80s' names no definition", ref->text);
    for (uint32_t i = 0; i < c->n_refs; i++)
        if (c->ref_schema[i] == target) return snprintf(name, 32, "%s", c->ref_name[i]) > 0;
    if (c->n_refs >= MAX_REFS) return fail(c, KILN_E_UNSUPPORTED, "more than %u definitions", MAX_REFS);
    uint32_t i = c->n_refs++;
    c->ref_schema[i] = target;
    new_name(c, "ref", c->ref_name[i]); /* named before its body, so recursion refers to it */
    memcpy(name, c->ref_name[i], 32);
    char body_name[32];
    if (!gen(c, target, "def", body_name, depth + 1)) return false;
    return putf(c, &c->out, "%s ::= %s\n", name, body_name);
}

static bool gen(conv *c, const kg_json *s, const char *hint, char name[32], int depth) {
    if (c->st != KILN_OK) return false;
    if (depth > KG_JSON_MAX_DEPTH)
        return fail(c, KILN_E_UNSUPPORTED, "schemas nested deeper than %d", KG_JSON_MAX_DEPTH);
    if (s->type == KGJ_BOOL) {
        if (!s->boolean) return fail(c, KILN_E_UNSUPPORTED, "the schema false matches nothing");
        return snprintf(name, 32, "json-value") > 0;
    }
    if (s->type != KGJ_OBJECT) return fail(c, KILN_E_FORMAT, "a schema must be an object or a boolean");
    if (!check_keywords(c, s)) return false;
    const kg_json *v;
    if ((v = kiln__json_get(s, "$ref"))) return gen_ref(c, v, name, depth);
    if ((v = kiln__json_get(s, "const"))) {
        kg_buf body = {0};
        new_name(c, hint, name);
        bool ok = put_value_literal(c, &body, v) && emit_rule(c, name, &body);
        kiln__dealloc(body.s);
        return ok;
    }
    if ((v = kiln__json_get(s, "enum"))) return gen_alternatives(c, v, "enum", true, name, depth);
    if ((v = kiln__json_get(s, "anyOf"))) return gen_alternatives(c, v, "anyOf", false, name, depth);
    if ((v = kiln__json_get(s, "oneOf"))) return gen_alternatives(c, v, "oneOf", false, name, depth);
    if ((v = kiln__json_get(s, "allOf"))) {
        if (v->type != KGJ_ARRAY || v->n != 1)
            return fail(c, KILN_E_UNSUPPORTED,
                        "'allOf' with other than one schema cannot be enforced by Kiln's grammar");
        return gen(c, &v->items[0], hint, name, depth + 1);
    }
    const kg_json *type = kiln__json_get(s, "type");
    if (!type) {
        if (kiln__json_get(s, "properties") || kiln__json_get(s, "additionalProperties"))
            return gen_object(c, s, name, depth);
        if (kiln__json_get(s, "items")) return gen_array(c, s, name, depth);
        return snprintf(name, 32, "json-value") > 0;
    }
    if (type->type == KGJ_STRING) return gen_typed(c, s, type->text, name, depth);
    if (type->type != KGJ_ARRAY || type->n == 0)
        return fail(c, KILN_E_FORMAT, "'type' must be a string or a non-empty array");
    kg_buf body = {0};
    bool ok = true;
    for (size_t i = 0; ok && i < type->n; i++) {
        char sub[32];
        if (type->items[i].type != KGJ_STRING) ok = fail(c, KILN_E_FORMAT, "'type' must hold strings");
        ok = ok && gen_typed(c, s, type->items[i].text, sub, depth) &&
             put(c, &body, i ? " | " : "", i ? 3 : 0) && put(c, &body, sub, strlen(sub));
    }
    new_name(c, hint, name);
    ok = ok && emit_rule(c, name, &body);
    kiln__dealloc(body.s);
    return ok;
}

kiln_status kiln_json_schema_to_gbnf(const char *schema, size_t len, char **gbnf, size_t *gbnf_len) {
    if (!gbnf || (!schema && len))
        return kiln__error(KILN_E_INVALID_ARG, "kiln_json_schema_to_gbnf: NULL argument");
    *gbnf = NULL;
    if (gbnf_len) *gbnf_len = 0;
    kg_json root;
    kiln_status st = kiln__json_parse(schema ? schema : "", len, &root);
    if (st != KILN_OK) return st;
    conv c = {.root = &root, .st = KILN_OK};
    char name[32];
    if (gen(&c, &root, "root", name, 0)) {
        putf(&c, &c.out, "root ::= %s\n", name);
        put(&c, &c.out, PRIMITIVES, sizeof PRIMITIVES - 1);
    } else if (c.st == KILN_OK) {
        c.st = kiln__error(KILN_E_INTERNAL, "schema: compiling failed without a reason (a bug in Kiln)");
    }
    kiln__json_free(&root);
    if (c.st != KILN_OK) {
        kiln__dealloc(c.out.s);
        return c.st;
    }
    *gbnf = c.out.s;
    if (gbnf_len) *gbnf_len = c.out.len;
    return KILN_OK;
}
