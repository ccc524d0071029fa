/*
 * main.c - the kiln command-line tool: dispatches to its subcommands (run, tokenize, inspect).
 */
#include "common.h"

#include <stdio.h>
#include <string.h>

static const char usage[] =
    "usage: kiln <command> [options]\n"
    "\n"
    "commands:\n"
    "  run       generate text from a prompt (default model: the bundled stories260K)\n"
    "  tokenize  print the token ids of a text\n"
    "  inspect   print a GGUF file's metadata and tensor table\n"
    "  chat      talk with a model, one reply per stdin line\n"
    "  synth     write a random-weight llama GGUF of a real model's shape\n"
    "  quantize  write a quantized copy of a model (Q4_K_M, Q5_K_M, Q8_0, ...)\n"
    "  perplexity  measure perplexity over a text, and KL divergence against a base model\n"
    "  graph     print the forward graph before and after the passes (text or DOT)\n"
    "  bench     measure prompt-processing and generation speed\n"
    "\n"
    "'kiln <command> --help' describes each command. 'kiln --version' prints the version.\n";

int main(int argc, char **argv) {
    if (argc < 2) {
        fputs(usage, stderr);
        return CLI_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        fputs(usage, stdout);
        return CLI_OK;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("kiln %s\n", KILN_VERSION_STRING);
        return CLI_OK;
    }
    if (!strcmp(argv[1], "run")) return cmd_run(argc - 1, argv + 1);
    if (!strcmp(argv[1], "tokenize")) return cmd_tokenize(argc - 1, argv + 1);
    if (!strcmp(argv[1], "inspect")) return cmd_inspect(argc - 1, argv + 1);
    if (!strcmp(argv[1], "chat")) return cmd_chat(argc - 1, argv + 1);
    if (!strcmp(argv[1], "quantize")) return cmd_quantize(argc - 1, argv + 1);
    if (!strcmp(argv[1], "perplexity")) return cmd_perplexity(argc - 1, argv + 1);
    if (!strcmp(argv[1], "synth")) return cmd_synth(argc - 1, argv + 1);
    if (!strcmp(argv[1], "graph")) return cmd_graph(argc - 1, argv + 1);
    if (!strcmp(argv[1], "bench")) return cmd_bench(argc - 1, argv + 1);
    fprintf(stderr, "kiln: unknown command '%s' (see 'kiln --help')\n", argv[1]);
    return CLI_USAGE;
}
