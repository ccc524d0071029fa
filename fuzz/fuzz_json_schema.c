/*
 * fuzz_json_schema.c - libFuzzer target for the JSON Schema compiler (src/grammar/json_schema.c and its
 * JSON reader): arbitrary bytes as a schema. Checks:
 *   - compiling either succeeds or fails with KILN_E_FORMAT (not JSON, a malformed keyword) or
 *     KILN_E_UNSUPPORTED (what Kiln cannot enforce), with a message naming "schema";
 *   - a compiled grammar is NUL-terminated at its reported length and parses, or (a schema that refers
 *     to itself without consuming text) fails with KILN_E_FORMAT naming left recursion;
 *   - a matcher of the parsed grammar starts, and takes "{", "[", "\"" or a digit or refuses it by name.
 * Seeds: corpus/json_schema; dictionary json_schema.dict.
 */
#include "kiln.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *gbnf = NULL;
    size_t len = 0;
    kiln_status st = kiln_json_schema_to_gbnf((const char *)data, size, &gbnf, &len);
    if (st != KILN_OK) {
        if ((st != KILN_E_FORMAT && st != KILN_E_UNSUPPORTED) || gbnf || !strstr(kiln_last_error(), "schema"))
            __builtin_trap();
        return 0;
    }
    if (!gbnf || strlen(gbnf) != len) __builtin_trap();
    kiln_grammar *g = NULL;
    st = kiln_grammar_parse(gbnf, len, &g);
    if (st != KILN_OK && !(st == KILN_E_FORMAT && strstr(kiln_last_error(), "left-recursive")))
        __builtin_trap();
    kiln_grammar_matcher *m = NULL;
    if (g && kiln_grammar_matcher_create(g, NULL, &m) == KILN_OK) {
        static const char *starts[] = {"{", "[", "\"", "1"};
        for (int i = 0; i < 4; i++) {
            st = kiln_grammar_matcher_accept_text(m, starts[i], 1);
            if (st != KILN_OK && (st != KILN_E_INVALID_ARG || !kiln_last_error()[0])) __builtin_trap();
        }
    }
    kiln_grammar_matcher_destroy(m);
    kiln_grammar_destroy(g);
    kiln_free(gbnf);
    return 0;
}
