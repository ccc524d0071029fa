/*
 * json_value.h - a small, bounded JSON reader for the JSON Schema compiler: the document becomes a tree
 * of kg_json values (strings decoded to UTF-8, numbers kept as their source text and as a double, object
 * members in source order). Input limits: KG_JSON_MAX_BYTES bytes and KG_JSON_MAX_DEPTH nesting; every
 * failure is KILN_E_FORMAT naming the line and column. The library needs no JSON library for this.
 */
#ifndef KILN_GRAMMAR_JSON_VALUE_H
#define KILN_GRAMMAR_JSON_VALUE_H

#include "core/core.h"

#define KG_JSON_MAX_BYTES (1u << 20)
#define KG_JSON_MAX_DEPTH 64

typedef enum kg_json_type { KGJ_NULL, KGJ_BOOL, KGJ_NUMBER, KGJ_STRING, KGJ_ARRAY, KGJ_OBJECT } kg_json_type;

typedef struct kg_json {
    kg_json_type type;
    bool boolean;
    double number;
    char *text; /* STRING: the decoded bytes; NUMBER: the source text (NUL-terminated) */
    size_t len;
    struct kg_json *items; /* ARRAY elements, OBJECT member values */
    char **keys;           /* OBJECT member names (NUL-terminated; may hold no NUL inside: refused) */
    size_t n;
} kg_json;

kiln_status kiln__json_parse(const char *text, size_t len, kg_json *out);
void kiln__json_free(kg_json *v);
/* The member named key of an object, or NULL. */
const kg_json *kiln__json_get(const kg_json *obj, const char *key);

#endif
