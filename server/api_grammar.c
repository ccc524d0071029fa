/*
 * api_grammar.c - the request fields that constrain generation: OpenAI's response_format ("text",
 * "json_object", "json_schema" with {name, schema, strict}), and llama-server's "grammar" (GBNF text) and
 * "json_schema" (a schema). A schema is compiled to GBNF by the library (kiln_json_schema_to_gbnf, the
 * converter Python and the CLI use too), and the GBNF is compiled here once, so a grammar or schema that
 * Kiln cannot compile is a 400 naming the field and the reason, before the request is queued. strict is
 * accepted either way: Kiln always enforces what it accepts.
 */
#include "api.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* {"type": "object"}: any JSON object, what OpenAI's json_object mode promises. */
static const char ANY_OBJECT[] = "{\"type\":\"object\"}";

static bool compile_check(const char *gbnf, size_t len, const char *param, ks_api_error *err) {
    kiln_grammar *g = NULL;
    kiln_status st = kiln_grammar_parse(gbnf, len, &g);
    kiln_grammar_destroy(g);
    if (st == KILN_E_NOMEM) return ks_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    if (st != KILN_OK) return ks_api_bad(err, param, "'%s' cannot be used: %s", param, kiln_last_error());
    return true;
}

/* A schema (JSON value) -> GBNF in r->grammar. */
static bool from_schema(const json_t *schema, const char *param, ks_api_request *r, ks_api_error *err) {
    char *text = json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!text) return ks_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    char *gbnf = NULL;
    size_t len = 0;
    kiln_status st = kiln_json_schema_to_gbnf(text, strlen(text), &gbnf, &len);
    free(text);
    if (st == KILN_E_NOMEM) return ks_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    if (st != KILN_OK)
        return ks_api_bad(err, param, "the JSON schema in '%s' cannot be enforced: %s", param,
                          kiln_last_error());
    r->grammar = strdup(gbnf);
    kiln_free(gbnf);
    if (!r->grammar) return ks_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    return compile_check(r->grammar, len, param, err);
}

static bool parse_response_format(const json_t *v, ks_api_request *r, ks_api_error *err) {
    json_t *t = json_is_object(v) ? json_object_get(v, "type") : NULL;
    if (!json_is_string(t))
        return ks_api_bad(err, "response_format", "'response_format' must be an object with a 'type'");
    const char *type = json_string_value(t);
    if (strcmp(type, "text") == 0) return true;
    if (strcmp(type, "json_object") == 0) {
        json_t *schema = json_object_get(v, "schema"); /* llama-server's extension */
        if (schema && !json_is_null(schema)) return from_schema(schema, "response_format", r, err);
        json_t *any = json_loads(ANY_OBJECT, 0, NULL);
        if (!any) return ks_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
        bool ok = from_schema(any, "response_format", r, err);
        json_decref(any);
        return ok;
    }
    if (strcmp(type, "json_schema") != 0)
        return ks_api_bad(err, "response_format",
                          "response_format type '%.40s' is not supported; use 'text', 'json_object' or "
                          "'json_schema'",
                          type);
    json_t *js = json_object_get(v, "json_schema");
    if (!json_is_object(js))
        return ks_api_bad(err, "response_format",
                          "response_format 'json_schema' needs a 'json_schema' object");
    json_t *strict = json_object_get(js, "strict");
    if (strict && !json_is_boolean(strict) && !json_is_null(strict))
        return ks_api_bad(err, "response_format", "response_format json_schema 'strict' must be a boolean");
    json_t *schema = json_object_get(js, "schema");
    if (!schema || json_is_null(schema))
        schema = json_loads(ANY_OBJECT, 0, NULL);
    else
        json_incref(schema);
    if (!schema) return ks_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    bool ok = from_schema(schema, "response_format", r, err);
    json_decref(schema);
    return ok;
}

bool ks_api_parse_grammar(const json_t *root, ks_api_request *r, ks_api_error *err) {
    json_t *rf = json_object_get(root, "response_format"), *g = json_object_get(root, "grammar"),
           *js = json_object_get(root, "json_schema");
    int given = (g && !json_is_null(g)) + (js && !json_is_null(js));
    if (rf && !json_is_null(rf)) {
        if (!parse_response_format(rf, r, err)) return false;
        given += r->grammar != NULL;
    }
    if (given > 1)
        return ks_api_bad(err, r->grammar ? "response_format" : "grammar",
                          "give only one of 'grammar', 'json_schema' and a JSON 'response_format'");
    if (js && !json_is_null(js)) return from_schema(js, "json_schema", r, err);
    if (!g || json_is_null(g)) return true;
    if (!json_is_string(g)) return ks_api_bad(err, "grammar", "'grammar' must be a string of GBNF rules");
    size_t len = json_string_length(g);
    if (len == 0) return true; /* llama-server: an empty grammar means none */
    if (strlen(json_string_value(g)) != len)
        return ks_api_bad(err, "grammar", "'grammar' holds a NUL character");
    if (!(r->grammar = strdup(json_string_value(g))))
        return ks_api_fail(err, 500, "server_error", NULL, NULL, "out of memory");
    return compile_check(r->grammar, len, "grammar", err);
}
