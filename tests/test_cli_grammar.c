/*
 * test_cli_grammar.c - `kiln run --grammar-file F` and `--json-schema JSON_OR_@FILE` (docs/grammar.md):
 * stdout holds only text the grammar allows, the run ends by itself once the grammar is complete, and a
 * grammar or schema Kiln cannot compile exits 1 with a message naming the reason. (The JSON outputs of
 * the schema corpus are validated against a JSON Schema validator in tests/server and python/tests.)
 */
#include "harness.h"

#include <stdlib.h>

typedef struct run_result {
    char out[8192];
    char err[8192];
    int code;
} run_result;

static void kiln(run_result *r, const char *args) {
    char cmd[4096], errpath[512];
    snprintf(errpath, sizeof errpath, "%s/cli_grammar_stderr.txt", KILN_TEST_TMP);
    snprintf(cmd, sizeof cmd, "'%s' run -m '%s' %s", KILN_CLI_PATH, KILN_MODEL_PATH, args);
    r->code = harness_run_command(cmd, errpath, r->out, sizeof r->out, r->err, sizeof r->err);
}

static void write_file(const char *name, const char *text, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", KILN_TEST_TMP, name);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) fputs(text, f), fclose(f);
}

static void grammar_file_constrains_and_ends_the_run(void) {
    static run_result r;
    char path[512], args[1024];
    write_file("id.gbnf", "# an id\nroot ::= \"id-\" [0-9]{3} (\",\" [a-c])?\n", path, sizeof path);
    for (int seed = 1; seed <= 3; seed++) {
        snprintf(args, sizeof args, "-p 'Once' --temp 1 --seed %d -n 100 --grammar-file '%s'", seed, path);
        kiln(&r, args);
        CHECK_EQ_INT(r.code, 0);
        const char *t = r.out + 4; /* after the prompt */
        size_t n = strlen(t);
        bool ok = strncmp(r.out, "Once", 4) == 0 && (n == 6 || n == 8) && strncmp(t, "id-", 3) == 0;
        for (int i = 3; ok && i < 6; i++)
            ok = t[i] >= '0' && t[i] <= '9';
        if (ok && n == 8) ok = t[6] == ',' && t[7] >= 'a' && t[7] <= 'c';
        if (!ok) harness_fail(__FILE__, __LINE__, "seed %d printed '%s'", seed, r.out);
    }
}

static void json_schema_inline_and_from_a_file(void) {
    static run_result r;
    kiln(&r, "--temp 1 --seed 5 -n 50 --json-schema '{\"enum\": [\"red\", \"green\", [1, null]]}'");
    CHECK_EQ_INT(r.code, 0);
    CHECK(!strcmp(r.out, "\"red\"") || !strcmp(r.out, "\"green\"") || !strcmp(r.out, "[1,null]"));
    char path[512], args[1024];
    write_file("flag.json",
               "{\"type\": \"object\", \"properties\": {\"ok\": {\"const\": true}}, "
               "\"required\": [\"ok\"], \"additionalProperties\": false}",
               path, sizeof path);
    snprintf(args, sizeof args, "--temp 0 -n 60 --json-schema @'%s'", path);
    kiln(&r, args);
    CHECK_EQ_INT(r.code, 0);
    /* {"ok":true} with whitespace only where the grammar's ws allows it */
    char squeezed[256];
    size_t k = 0;
    for (const char *c = r.out; *c && k + 1 < sizeof squeezed; c++)
        if (*c != ' ' && *c != '\n' && *c != '\t') squeezed[k++] = *c;
    squeezed[k] = 0;
    if (strcmp(squeezed, "{\"ok\":true}") != 0) harness_fail(__FILE__, __LINE__, "printed '%s'", r.out);
}

static void uncompilable_grammars_and_schemas_exit_1_with_the_reason(void) {
    static run_result r;
    char path[512], args[1024];
    write_file("bad.gbnf", "root ::= item\n", path, sizeof path);
    snprintf(args, sizeof args, "--grammar-file '%s'", path);
    kiln(&r, args);
    CHECK_EQ_INT(r.code, 1);
    CHECK(strstr(r.err, "line 1, column 10: rule 'item' is used but never defined") != NULL);
    kiln(&r, "--json-schema '{\"type\": \"string\", \"pattern\": \"x\"}'");
    CHECK_EQ_INT(r.code, 1);
    CHECK(strstr(r.err, "'pattern' cannot be enforced") != NULL);
    kiln(&r, "--json-schema '{\"type\": '");
    CHECK_EQ_INT(r.code, 1);
    CHECK(strstr(r.err, "not valid JSON") != NULL);
    kiln(&r, "--json-schema '{}' --grammar-file x");
    CHECK_EQ_INT(r.code, 2);
    CHECK(strstr(r.err, "not both") != NULL);
}

int main(void) {
    RUN(grammar_file_constrains_and_ends_the_run);
    RUN(json_schema_inline_and_from_a_file);
    RUN(uncompilable_grammars_and_schemas_exit_1_with_the_reason);
    return harness_finish();
}
