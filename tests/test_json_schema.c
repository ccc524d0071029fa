/*
 * test_json_schema.c - JSON Schema -> GBNF (kiln_json_schema_to_gbnf, docs/grammar.md): for each schema,
 * documents that JSON Schema says are valid are sentences of the compiled grammar and documents it says
 * are invalid are not (the verdicts follow the JSON Schema 2020-12 specification; tests/server and
 * python/tests check generated output with the jsonschema validator itself). Schemas Kiln cannot
 * enforce and malformed JSON are refused by name, and every allocation failure is reported as such.
 */
#include "harness.h"

#include <stdlib.h>

static kiln_grammar *compile(const char *schema) {
    char *gbnf = NULL;
    size_t len = 0;
    kiln_grammar *g = NULL;
    CHECK_OK(kiln_json_schema_to_gbnf(schema, strlen(schema), &gbnf, &len));
    if (gbnf) {
        CHECK_EQ_INT(strlen(gbnf), len);
        CHECK_OK(kiln_grammar_parse(gbnf, len, &g));
        if (!g) fprintf(stderr, "%s\n", gbnf);
    }
    kiln_free(gbnf);
    return g;
}

static bool valid(const kiln_grammar *g, const char *doc) {
    kiln_grammar_matcher *m = NULL;
    if (!g || kiln_grammar_matcher_create(g, NULL, &m) != KILN_OK) return false;
    bool ok =
        kiln_grammar_matcher_accept_text(m, doc, strlen(doc)) == KILN_OK && kiln_grammar_matcher_can_end(m);
    kiln_grammar_matcher_destroy(m);
    return ok;
}

#define ACCEPTS(g, doc)                                                                                      \
    do {                                                                                                     \
        if (!valid(g, doc)) harness_fail(__FILE__, __LINE__, "refused %s", doc);                             \
    } while (0)
#define REFUSES(g, doc)                                                                                      \
    do {                                                                                                     \
        if (valid(g, doc)) harness_fail(__FILE__, __LINE__, "accepted %s", doc);                             \
    } while (0)

static void objects_keep_required_and_drop_optional_properties(void) {
    kiln_grammar *g =
        compile("{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}, "
                "\"b\": {\"type\": \"string\"}, \"c\": {\"type\": \"boolean\"}}, \"required\": [\"b\"]}");
    ACCEPTS(g, "{\"b\": \"x\"}");
    ACCEPTS(g, "{\"a\": -12, \"b\": \"\\u00e9\\\"\", \"c\": false}");
    ACCEPTS(g, "{ \"a\" : 0 ,\n  \"b\" : \"\" }");
    REFUSES(g, "{\"a\": 1}");               /* b is required */
    REFUSES(g, "{\"b\": 1}");               /* b is a string */
    REFUSES(g, "{\"b\": \"x\", \"d\": 1}"); /* nothing beyond the properties is generated */
    REFUSES(g, "{\"a\": 01, \"b\": \"x\"}");
    kiln_grammar_destroy(g);
    g = compile("{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}}");
    ACCEPTS(g, "{}");
    ACCEPTS(g, "{\"a\": 3}");
    REFUSES(g, "{,\"a\": 3}");
    kiln_grammar_destroy(g);
}

static void enums_consts_and_type_lists(void) {
    kiln_grammar *g = compile("{\"enum\": [\"red\", 1.5, null, {\"k\": [true]}]}");
    ACCEPTS(g, "\"red\"");
    ACCEPTS(g, "1.5");
    ACCEPTS(g, "null");
    ACCEPTS(g, "{\"k\":[true]}");
    REFUSES(g, "\"blue\"");
    REFUSES(g, "\"red");
    kiln_grammar_destroy(g);
    g = compile("{\"type\": [\"integer\", \"null\"]}");
    ACCEPTS(g, "-7");
    ACCEPTS(g, "null");
    REFUSES(g, "1.5");
    kiln_grammar_destroy(g);
    g = compile("{\"const\": \"a\\nb\"}");
    ACCEPTS(g, "\"a\\nb\"");
    REFUSES(g, "\"a\nb\"");
    kiln_grammar_destroy(g);
}

static void arrays_count_their_items(void) {
    kiln_grammar *g = compile(
        "{\"type\": \"array\", \"items\": {\"type\": \"integer\"}, \"minItems\": 2, \"maxItems\": 3}");
    ACCEPTS(g, "[1, 2]");
    ACCEPTS(g, "[1,2,3]");
    REFUSES(g, "[1]");
    REFUSES(g, "[1, 2, 3, 4]");
    REFUSES(g, "[1, \"2\"]");
    kiln_grammar_destroy(g);
    g = compile("{\"type\": \"array\", \"maxItems\": 1}");
    ACCEPTS(g, "[]");
    ACCEPTS(g, "[{\"x\": [null, \"s\"]}]");
    REFUSES(g, "[1, 2]");
    kiln_grammar_destroy(g);
}

static void string_formats_and_lengths(void) {
    kiln_grammar *g =
        compile("{\"type\": \"object\", \"properties\": {\"t\": {\"type\": \"string\", \"format\": "
                "\"date-time\"}, \"u\": {\"type\": \"string\", \"format\": \"uuid\"}, \"s\": {\"type\": "
                "\"string\", \"minLength\": 2, \"maxLength\": 3}}, \"required\": [\"t\", \"u\", \"s\"]}");
    ACCEPTS(
        g,
        "{\"t\": \"2024-02-29T23:59:60Z\", \"u\": \"123e4567-e89b-12d3-a456-426614174000\", \"s\": \"ab\"}");
    ACCEPTS(g, "{\"t\": \"1999-12-31T00:00:00.123+05:30\", \"u\": \"00000000-0000-0000-0000-000000000000\", "
               "\"s\": \"\\u00e9\\u00e9\\u00e9\"}");
    REFUSES(
        g,
        "{\"t\": \"2024-13-01T00:00:00Z\", \"u\": \"123e4567-e89b-12d3-a456-426614174000\", \"s\": \"ab\"}");
    REFUSES(g,
            "{\"t\": \"2024-01-01T00:00:00Z\", \"u\": \"123e4567e89b12d3a456426614174000\", \"s\": \"ab\"}");
    REFUSES(g, "{\"t\": \"2024-01-01T00:00:00Z\", \"u\": \"123e4567-e89b-12d3-a456-426614174000\", \"s\": "
               "\"abcd\"}");
    kiln_grammar_destroy(g);
    /* each character of a string is one code point, so lengths count as JSON Schema counts them: a
     * \u escape of a surrogate half (two of which would make one code point) is not generated */
    g = compile("{\"type\": \"string\", \"minLength\": 2, \"maxLength\": 2}");
    ACCEPTS(g, "\"\\u00e9\\n\"");
    REFUSES(g, "\"\\ud83d\\ude00\"");
    kiln_grammar_destroy(g);
}

static void any_of_refs_recursion_and_maps(void) {
    kiln_grammar *g =
        compile("{\"$defs\": {\"node\": {\"type\": \"object\", \"properties\": {\"v\": {\"type\": "
                "\"integer\"}, \"kids\": {\"type\": \"array\", \"items\": {\"$ref\": \"#/$defs/node\"}}}, "
                "\"required\": [\"v\"]}}, \"anyOf\": [{\"$ref\": \"#/$defs/node\"}, {\"type\": \"null\"}]}");
    ACCEPTS(g, "null");
    ACCEPTS(g, "{\"v\": 1, \"kids\": [{\"v\": 2}, {\"v\": 3, \"kids\": [{\"v\": 4, \"kids\": []}]}]}");
    REFUSES(g, "{\"v\": 1, \"kids\": [{}]}");
    kiln_grammar_destroy(g);
    g = compile("{\"type\": \"object\", \"additionalProperties\": {\"type\": \"boolean\"}}");
    ACCEPTS(g, "{}");
    ACCEPTS(g, "{\"any\": true, \"key\": false}");
    REFUSES(g, "{\"any\": 1}");
    kiln_grammar_destroy(g);
    g = compile("{\"type\": \"integer\", \"minimum\": 0}");
    ACCEPTS(g, "0");
    ACCEPTS(g, "42");
    REFUSES(g, "-1");
    kiln_grammar_destroy(g);
}

static void long_property_names_stay_whole(void) {
    char schema[2048], doc[2048], name[701];
    memset(name, 'k', 700);
    name[700] = 0;
    snprintf(schema, sizeof schema,
             "{\"type\": \"object\", \"properties\": {\"%s\": {\"type\": \"integer\"}}, "
             "\"required\": [\"%s\"]}",
             name, name);
    snprintf(doc, sizeof doc, "{\"%s\": 7}", name);
    kiln_grammar *g = compile(schema);
    ACCEPTS(g, doc);
    kiln_grammar_destroy(g);
}

static void refusal(const char *schema, kiln_status want, const char *fragment) {
    char *gbnf = NULL;
    kiln_status st = kiln_json_schema_to_gbnf(schema, strlen(schema), &gbnf, NULL);
    if (st == KILN_OK) { /* compiled: the grammar must be what refuses (left recursion) */
        kiln_grammar *g = NULL;
        st = kiln_grammar_parse(gbnf, strlen(gbnf), &g);
        kiln_grammar_destroy(g);
        kiln_free(gbnf);
        gbnf = NULL;
    }
    if (st != want)
        harness_fail(__FILE__, __LINE__, "%s: %s, expected %s", schema, kiln_status_name(st),
                     kiln_status_name(want));
    CHECK(gbnf == NULL);
    CHECK_ERROR_MENTIONS(fragment);
}

static void refuses_what_it_cannot_enforce_by_name(void) {
    refusal("{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"string\", \"pattern\": \"x\"}}}",
            KILN_E_UNSUPPORTED, "schema at /properties/a: 'pattern' cannot be enforced");
    refusal("{\"type\": \"array\", \"items\": {\"type\": \"integer\", \"maximum\": 3}}", KILN_E_UNSUPPORTED,
            "schema at /items: 'maximum' cannot be enforced");
    refusal("{\"type\": \"array\", \"uniqueItems\": true}", KILN_E_UNSUPPORTED, "'uniqueItems'");
    refusal("{\"type\": \"strin\"}", KILN_E_FORMAT, "unknown type 'strin'");
    refusal("{\"$ref\": \"#/$defs/x\"}", KILN_E_FORMAT, "names no definition");
    refusal("{\"$ref\": \"other.json\"}", KILN_E_UNSUPPORTED, "is not local");
    refusal("{\"type\": \"array\", \"maxItems\": 100000}", KILN_E_UNSUPPORTED, "above the 1000");
    refusal("false", KILN_E_UNSUPPORTED, "matches nothing");
    refusal("{\"$ref\": \"#\"}", KILN_E_FORMAT, "left-recursive");
    refusal("{\"type\": \"object\",\n \"properties\": [}", KILN_E_FORMAT,
            "not valid JSON at line 2, column 17");
    refusal("{\"a\": \"\\ud800\"}", KILN_E_FORMAT, "high surrogate");
    refusal("[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[", KILN_E_FORMAT,
            "nested deeper");
    refusal("{} x", KILN_E_FORMAT, "text after the value");
}

static const char SWEEP_SCHEMA[] =
    "{\"$defs\": {\"p\": {\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"number\"}}}}, \"type\": "
    "\"object\", "
    "\"properties\": {\"a\": {\"$ref\": \"#/$defs/p\"}, \"b\": {\"type\": \"array\", \"items\": {\"enum\": "
    "[\"u\", 2]}, "
    "\"maxItems\": 3}, \"c\": {\"type\": \"string\", \"format\": \"date\"}}, \"required\": [\"a\"]}";

static kiln_status sweep_schema(void *user) {
    char **out = user;
    return kiln_json_schema_to_gbnf(SWEEP_SCHEMA, sizeof SWEEP_SCHEMA - 1, out, NULL);
}
static void sweep_schema_free(void *user) {
    kiln_free(*(char **)user);
    *(char **)user = NULL;
}

static kiln_status sweep_parse(void *user) {
    kiln_grammar **g = user;
    static const char text[] = "root ::= (\"a\" | b)+ [^x-z]{1,3}\nb ::= \"\\u00e9\" .? # c\n";
    kiln_status st = kiln_grammar_parse(text, sizeof text - 1, g);
    if (st != KILN_OK) return st;
    kiln_grammar_matcher *m = NULL;
    st = kiln_grammar_matcher_create(*g, NULL, &m);
    if (st == KILN_OK)
        st = kiln_grammar_matcher_accept_text(m,
                                              "a\xC3\xA9"
                                              "bc",
                                              6);
    kiln_grammar_matcher_destroy(m);
    return st;
}
static void sweep_parse_free(void *user) {
    kiln_grammar_destroy(*(kiln_grammar **)user);
    *(kiln_grammar **)user = NULL;
}

static void every_allocation_failure_is_reported(void) {
    char *gbnf = NULL;
    kiln_grammar *g = NULL;
    harness_sweep a = {.what = "schema", .op = sweep_schema, .teardown = sweep_schema_free, .user = &gbnf};
    CHECK(harness_alloc_sweep(&a) > 0);
    harness_sweep b = {.what = "grammar", .op = sweep_parse, .teardown = sweep_parse_free, .user = &g};
    CHECK(harness_alloc_sweep(&b) > 0);
}

int main(void) {
    RUN(objects_keep_required_and_drop_optional_properties);
    RUN(enums_consts_and_type_lists);
    RUN(arrays_count_their_items);
    RUN(string_formats_and_lengths);
    RUN(any_of_refs_recursion_and_maps);
    RUN(long_property_names_stay_whole);
    RUN(refuses_what_it_cannot_enforce_by_name);
    RUN(every_allocation_failure_is_reported);
    return harness_finish();
}
