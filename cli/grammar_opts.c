/*
 * grammar_opts.c - --grammar-file and --json-schema (grammar_opts.h). The schema goes through
 * kiln_json_schema_to_gbnf, the converter the server and the Python binding use.
 */
#include "grammar_opts.h"
#include "common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool cli_arg_grammar(const char *cmd, int argc, char **argv, int *i, cli_grammar *g, bool *ok) {
    if (!strcmp(argv[*i], "--grammar-file"))
        *ok = cli_arg_str(cmd, argc, argv, i, &g->file);
    else if (!strcmp(argv[*i], "--json-schema"))
        *ok = cli_arg_str(cmd, argc, argv, i, &g->schema);
    else
        return false;
    if (*ok && g->file && g->schema) {
        cli_usage_error(cmd, "give --grammar-file or --json-schema, not both");
        *ok = false;
    }
    return true;
}

/* The GBNF text the options name (malloc'd into *text). */
static int grammar_text(const char *cmd, const cli_grammar *g, char **text, size_t *len) {
    if (g->file) return cli_read_text(cmd, g->file, text, len);
    char *schema = NULL;
    size_t n = strlen(g->schema);
    int rc = g->schema[0] == '@' ? cli_read_text(cmd, g->schema + 1, &schema, &n) : CLI_OK;
    if (rc) return rc;
    char *gbnf = NULL;
    kiln_status s = kiln_json_schema_to_gbnf(schema ? schema : g->schema, n, &gbnf, len);
    free(schema);
    if (s) return cli_fail(cmd, s, "compiling the JSON schema");
    *text = malloc(*len + 1);
    if (*text) memcpy(*text, gbnf, *len + 1);
    kiln_free(gbnf);
    return *text ? CLI_OK : cli_fail(cmd, KILN_E_NOMEM, "copying the grammar");
}

int cli_grammar_setup(const char *cmd, cli_grammar *g, const kiln_model *model, kiln_sampler *sampler) {
    if (!g->file && !g->schema) return CLI_OK;
    char *text = NULL;
    size_t len = 0;
    int rc = grammar_text(cmd, g, &text, &len);
    if (rc) return rc;
    kiln_status s = kiln_grammar_parse(text, len, &g->grammar);
    free(text);
    if (s) return cli_fail(cmd, s, g->file ? "reading the grammar" : "compiling the schema's grammar");
    if ((s = kiln_grammar_vocab_create(kiln_model_vocab(model), NULL, 0, &g->vocab)) ||
        (s = kiln_grammar_matcher_create(g->grammar, g->vocab, &g->matcher)) ||
        (s = kiln_sampler_set_grammar(sampler, g->matcher)))
        return cli_fail(cmd, s, "preparing the grammar");
    return CLI_OK;
}

bool cli_grammar_done(const cli_grammar *g) {
    return g->matcher && kiln_grammar_matcher_is_done(g->matcher);
}

void cli_grammar_free(cli_grammar *g) {
    kiln_grammar_matcher_destroy(g->matcher);
    kiln_grammar_vocab_destroy(g->vocab);
    kiln_grammar_destroy(g->grammar);
    g->matcher = NULL, g->vocab = NULL, g->grammar = NULL;
}
