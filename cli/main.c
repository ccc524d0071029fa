/*
 * main.c - the kiln command-line tool: one table of subcommands, the usage text made from it, and the
 * dispatch. Each subcommand lives in its own cmd_<name>.c with its own --help.
 */
#include "common.h"

#include <stdio.h>
#include <string.h>

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"run", cmd_run, "generate text from a prompt (default model: the bundled stories260K)"},
    {"chat", cmd_chat, "talk with a model, one reply per stdin line, keeping the KV cache across turns"},
    {"tokenize", cmd_tokenize, "print the token ids of a text"},
    {"embed", cmd_embed, "print sentence embeddings of texts with an encoder model (BERT)"},
    {"inspect", cmd_inspect, "print a GGUF file's metadata and tensor table"},
    {"quantize", cmd_quantize, "write a quantized copy of a model (Q4_K_M, Q5_K_M, Q8_0, ...)"},
    {"perplexity", cmd_perplexity, "measure perplexity over a text, and KL divergence against a base model"},
    {"bench", cmd_bench, "measure prompt-processing and generation speed"},
    {"batched-bench", cmd_batched_bench, "measure the speed of many sequences decoded together"},
    {"graph", cmd_graph, "print the forward graph before and after the passes (text or DOT)"},
    {"serve", cmd_serve, "serve a model over HTTP with OpenAI's API (chat, completions, streaming)"},
    {"synth", cmd_synth, "write a random-weight llama GGUF of a real model's shape"},
    {"devices", cmd_devices, "list the compute devices: the CPU and each Vulkan device with its features"},
    {"onnx", cmd_onnx, "inspect an ONNX model (opset, inputs and outputs, operators, weights) or run it on .npy inputs"},
};

static void usage(FILE *out) {
    fputs("usage: kiln <command> [options]\n\ncommands:\n", out);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-13s %s\n", commands[i].name, commands[i].summary);
    fputs("\n'kiln <command> --help' describes each command. 'kiln --version' prints the version.\n", out);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return CLI_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return CLI_OK;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("kiln %s\n", KILN_VERSION_STRING);
        return CLI_OK;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "kiln: unknown command '%s' (see 'kiln --help')\n", argv[1]);
    return CLI_USAGE;
}
