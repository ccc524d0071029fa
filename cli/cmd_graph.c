/*
 * cmd_graph.c - `kiln graph`: print a model's forward graph for a batch size, before and after the graph
 * passes, as a text listing or Graphviz DOT, with the pipeline's and the planner's figures.
 */
#include "common.h"

#include <stdio.h>
#include <string.h>

static const char graph_help[] =
    "usage: kiln graph [-m FILE] [-n TOKENS] [--passes LIST] [--no-fuse] [--dot] [--before|--after]\n"
    "\n"
    "Print the forward graph of a batch of TOKENS tokens (default 1: a decode step) before and after the\n"
    "graph passes, then the per-pass node counts, the memory plan and the split between backends\n"
    "(stderr).\n"
    "\n"
    "  -m, --model FILE    GGUF model (default: the bundled model)\n"
    "  -n, --tokens N      batch size (default 1)\n"
    "      --outputs N     rows of logits the batch keeps, for the plan figures (default 1)\n"
    "  -c, --ctx-size N    KV-cache size (default 512)\n"
    "      --passes LIST   passes to run: all, none, or a list such as cse,dce or -fuse_qkv (default all,\n"
    "                      or $KILN_PASSES)\n"
    "      --no-fuse       switch off every fusion pass\n"
    "      --devices LIST  backends in priority order, e.g. cpu-restricted:matmul+linear@8,cpu; the CPU is\n"
    "                      always last (default: cpu)\n"
    "      --cpu LEVEL     CPU kernel level: ref, avx2, avx512, amx or neon (default: the best, or\n"
    "                      $KILN_CPU)\n"
    "      --dot           Graphviz DOT instead of text (pipe into `dot -Tsvg`)\n"
    "      --before        only the graph before the passes\n"
    "      --after         only the graph after the passes\n"
    "  -h, --help          this text\n";

static void put_line(void *user, const char *line) {
    (void)user;
    puts(line);
}

int cmd_graph(int argc, char **argv) {
    const char *path = NULL;
    long n_tokens = 1, n_outputs = 1, n_ctx = 512;
    bool dot = false, before = true, after = true, no_fuse = false;
    cli_engine engine = {.n_threads = 1}; /* nothing is computed */
    kiln_ctx_params cp;
    kiln_model *m = NULL;
    kiln_ctx *ctx = NULL;
    kiln_status s;
    int rc = CLI_OK;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool ok = true;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(graph_help, stdout);
            return CLI_OK;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) ok = cli_arg_str("graph", argc, argv, &i, &path);
        else if (!strcmp(a, "-n") || !strcmp(a, "--tokens")) ok = cli_arg_int("graph", argc, argv, &i, 1, 1 << 20, &n_tokens);
        else if (!strcmp(a, "--outputs"))
            ok = cli_arg_int("graph", argc, argv, &i, 1, 1 << 20, &n_outputs);
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size"))
            ok = cli_arg_int("graph", argc, argv, &i, 1, KILN_MAX_CTX, &n_ctx);
        else if (!strcmp(a, "--passes")) ok = cli_arg_str("graph", argc, argv, &i, &engine.passes);
        else if (!strcmp(a, "--devices")) ok = cli_arg_str("graph", argc, argv, &i, &engine.devices);
        else if (!strcmp(a, "--cpu")) ok = cli_arg_str("graph", argc, argv, &i, &engine.cpu);
        else if (!strcmp(a, "--no-fuse")) no_fuse = true;
        else if (!strcmp(a, "--dot")) dot = true;
        else if (!strcmp(a, "--before")) after = false;
        else if (!strcmp(a, "--after")) before = false;
        else return cli_usage_error("graph", "unknown option '%s'", a);
        if (!ok) return CLI_USAGE;
    }
    if (n_tokens > n_ctx) return cli_usage_error("graph", "%ld tokens do not fit a context of %ld", n_tokens, n_ctx);
    if (n_outputs > n_tokens)
        return cli_usage_error("graph", "%ld outputs exceed the %ld tokens", n_outputs, n_tokens);
    cp = cli_ctx_params(&engine);
    cp.n_ctx = (int32_t)n_ctx;
    cp.n_batch = n_tokens > 512 ? (int32_t)n_tokens : 0;
    cp.no_fuse = no_fuse;
    if ((rc = cli_model_load("graph", path ? path : cli_default_model(), &engine, NULL, &m))) return rc;
    if ((s = kiln_ctx_create(m, &cp, &ctx))) rc = cli_fail("graph", s, "creating the context");
    for (int stage = 0; stage < 2 && !rc; stage++) {
        if ((stage == 0 && !before) || (stage == 1 && !after)) continue;
        if (!dot) printf("# graph for %ld token%s, %s the passes\n", n_tokens, n_tokens == 1 ? "" : "s",
                         stage ? "after" : "before");
        if ((s = kiln_ctx_graph_dump(ctx, (int32_t)n_tokens, stage == 1, dot, put_line, NULL)))
            rc = cli_fail("graph", s, "building the graph");
    }
    if (!rc) rc = cli_print_plan_info("graph", ctx, (int32_t)n_tokens, (int32_t)n_outputs);
    kiln_ctx_destroy(ctx);
    kiln_model_destroy(m);
    return rc;
}
