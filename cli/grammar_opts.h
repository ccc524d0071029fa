/*
 * grammar_opts.h - the constrained-decoding options of the CLI (docs/grammar.md): --grammar-file FILE
 * (GBNF) and --json-schema JSON_OR_@FILE (compiled to GBNF by the library's converter), and the matcher
 * they attach to a sampler.
 */
#ifndef KILN_CLI_GRAMMAR_OPTS_H
#define KILN_CLI_GRAMMAR_OPTS_H

#include "kiln.h"

#include <stdbool.h>

typedef struct cli_grammar {
    const char *file;   /* --grammar-file */
    const char *schema; /* --json-schema: JSON text, or @FILE */
    kiln_grammar *grammar;
    kiln_grammar_vocab *vocab;
    kiln_grammar_matcher *matcher;
} cli_grammar;

#define CLI_GRAMMAR_HELP                                                                                     \
    "      --grammar-file F   constrain the output to the GBNF grammar in F (llama.cpp's format)\n"          \
    "      --json-schema S    constrain the output to JSON valid under the schema S (JSON text, or @FILE)\n"

/* Consume argv[*i] (and its value) when it is one of the options above; *ok false after a usage error. */
bool cli_arg_grammar(const char *cmd, int argc, char **argv, int *i, cli_grammar *g, bool *ok);
/* Compile what the options give and attach a matcher to sampler (nothing when neither was given).
 * Returns CLI_OK, or CLI_FAIL after printing what is wrong with the grammar or schema. */
int cli_grammar_setup(const char *cmd, cli_grammar *g, const kiln_model *model, kiln_sampler *sampler);
/* Whether the grammar allows nothing more than the end. */
bool cli_grammar_done(const cli_grammar *g);
void cli_grammar_free(cli_grammar *g);

#endif
