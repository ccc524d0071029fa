/*
 * cmd_bench.c - `kiln bench`: prompt-processing and generation speed of a model, modelled on llama-bench.
 *
 * Prompt processing (pp) decodes P random tokens as one batch into an empty cache; generation (tg) decodes
 * N tokens one at a time from an empty cache. Each test runs once to warm up, then R times; the table
 * shows mean +- standard deviation of tokens per second. At start-up the tool measures the machine's read
 * bandwidth (bandwidth.c: the best of several access patterns with up to T threads), and reports decode
 * bandwidth = weight bytes read per generated token x tokens per second, and its share of the measured
 * bandwidth. Weight bytes per token are all weights except the token-embedding table, of
 * which one row is read (when the output projection has its own matrix).
 */
#include "bandwidth.h"
#include "common.h"
#include "profile.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char bench_help[] =
    "usage: kiln bench -m FILE [options]\n"
    "\n"
    "Measure prompt processing and generation speed (tokens/s, mean +- sd over R runs).\n"
    "\n"
    "  -m, --model FILE    GGUF model (default: the bundled stories260K)\n"
    "  -p, --n-prompt P    prompt tokens processed as one batch (default 512; 0 skips the test)\n"
    "  -n, --n-gen N       tokens generated one at a time (default 128; 0 skips the test)\n"
    "  -t, --threads T     threads (default: physical cores)\n"
    "  --devices LIST      backends in priority order, e.g. cpu-restricted:matmul+linear@8,cpu; the CPU is\n"
    "                      always last (default: cpu)\n"
    "  --device D          where to run: auto (a discrete or integrated GPU through Vulkan, else the\n"
    "                      CPU), cpu, or vulkan[:N] (Vulkan device N of `kiln devices`, lavapipe\n"
    "                      included); default $KILN_DEVICE, else cpu. The CPU runs whatever the device\n"
    "                      cannot\n"
    "  -r, --repetitions R runs per test after one warm-up run (default 5)\n"
    "  -o, --output F      md (default) or json\n"
    "  --gpu-layers N      with --device: the device runs the last N layers and the output head,\n"
    "                      the CPU the rest (0: none; all, the default; auto: as many as fit)\n"
    "  --cpu LEVEL         force a kernel level: ref, avx2, avx512, amx or neon (same as KILN_CPU=LEVEL);\n"
    "                      a level the CPU lacks falls back to the best one below it (neon: ref)\n"
    "  --no-bandwidth      skip the start-up read-bandwidth probe (a few seconds: the best of several\n"
    "                      access patterns, page sizes and thread counts)\n"
    "  -v, --verbose       print every pattern the bandwidth probe tries to stderr\n"
    "  --profile           time every kernel of the measured runs (not the warm-up), on the device or the\n"
    "                      CPU, and print a table per test to stderr: where a run's wall time goes\n"
    "                      (preparing, running, the host) and each kernel's share (docs/runtime.md)\n"
    "  --lookup, --model-draft F  speculative mode: greedy generation after a prompt, plain against\n"
    "                      speculative (`kiln bench --lookup --help`)\n"
    "  -h, --help          this text\n";

/* The speculative mode (cmd_bench_spec.c). */
int cmd_bench_spec(int argc, char **argv);

typedef struct bench_options {
    const char *model, *output;
    long n_prompt, n_gen, reps;
    cli_engine engine;
    bool bandwidth, verbose, profile;
} bench_options;

typedef struct bench_result {
    double mean, sd; /* tokens per second */
} bench_result;

static int parse(int argc, char **argv, bench_options *o) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool ok = true;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(bench_help, stdout);
            return -1;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) ok = cli_arg_str("bench", argc, argv, &i, &o->model);
        else if (!strcmp(a, "-p") || !strcmp(a, "--n-prompt"))
            ok = cli_arg_int("bench", argc, argv, &i, 0, 1L << 20, &o->n_prompt);
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-gen"))
            ok = cli_arg_int("bench", argc, argv, &i, 0, 1L << 20, &o->n_gen);
        else if (!strcmp(a, "-r") || !strcmp(a, "--repetitions"))
            ok = cli_arg_int("bench", argc, argv, &i, 1, 1000, &o->reps);
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) ok = cli_arg_str("bench", argc, argv, &i, &o->output);
        else if (!strcmp(a, "--no-bandwidth")) o->bandwidth = false;
        else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) o->verbose = true;
        else if (!strcmp(a, "--profile")) o->profile = true;
        else if (!cli_arg_engine("bench", argc, argv, &i, &o->engine, &ok))
            return cli_usage_error("bench", "unknown option '%s'", a);
        if (!ok) return CLI_USAGE;
    }
    if (strcmp(o->output, "md") && strcmp(o->output, "json"))
        return cli_usage_error("bench", "output format '%s' is neither md nor json", o->output);
    return CLI_OK;
}

/* ---- the two tests ---- */

static void fill_tokens(int32_t *toks, long n, int32_t n_vocab) {
    uint64_t s = 12345;
    for (long i = 0; i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        toks[i] = (int32_t)((s >> 33) % (uint64_t)n_vocab);
    }
}

/* One run: the prompt as one batch (gen = false) or n tokens one at a time; returns tokens/s or < 0. */
static double run_once(kiln_ctx *ctx, const int32_t *toks, long n, bool gen) {
    const float *logits;
    kiln_status s;
    double t0;
    kiln_ctx_reset(ctx);
    t0 = cli_now_seconds();
    if (!gen) {
        if ((s = kiln_ctx_decode(ctx, toks, (int32_t)n, &logits))) {
            cli_fail("bench", s, "prompt");
            return -1;
        }
    } else {
        for (long i = 0; i < n; i++)
            if ((s = kiln_ctx_decode(ctx, &toks[i], 1, &logits))) {
                cli_fail("bench", s, "generation");
                return -1;
            }
    }
    return (double)n / (cli_now_seconds() - t0);
}

/* With profile, the measured runs (not the warm-up) are profiled and the table printed to stderr. */
static int run_test(kiln_model *m, kiln_ctx *ctx, const int32_t *toks, long n, bool gen, long reps, bool profile,
                    bench_result *out) {
    double sum = 0, sum2 = 0, v, wall = 0;
    kiln_status s;
    /* The warm-up profiled too, so that the measured runs replay what it recorded; switching on again
     * clears what it counted. */
    if (profile && (s = kiln_model_profile(m, true))) return cli_fail("bench", s, "--profile");
    if (run_once(ctx, toks, n, gen) < 0) return CLI_FAIL; /* warm-up */
    if (profile) kiln_model_profile(m, true);
    for (long r = 0; r < reps; r++) {
        if ((v = run_once(ctx, toks, n, gen)) < 0) return CLI_FAIL;
        sum += v;
        sum2 += v * v;
        wall += (double)n / v;
    }
    if (profile) {
        kiln_device_profile p;
        char test[32];
        kiln_model_profile(m, false);
        kiln_model_profile_read(m, &p);
        snprintf(test, sizeof test, "%s%ld", gen ? "tg" : "pp", n);
        cli_print_profile(stderr, test, &p, wall, reps);
    }
    out->mean = sum / (double)reps;
    out->sd = reps > 1 ? sqrt(fmax(0.0, (sum2 - sum * sum / (double)reps) / (double)(reps - 1))) : 0.0;
    return CLI_OK;
}

/* Weight bytes a generated token reads: everything but the embedding table, of which one row. */
static double bytes_per_token(const kiln_model *m) {
    const kiln_gguf *g = kiln_model_gguf(m);
    double total = (double)kiln_model_weight_bytes(m);
    int64_t e = kiln_gguf_find_tensor(g, "token_embd.weight");
    kiln_tensor_info info;
    if (e >= 0 && kiln_gguf_find_tensor(g, "output.weight") >= 0 && !kiln_gguf_tensor_info(g, e, &info))
        total -= (double)info.size - (double)info.size / (double)info.ne[1];
    return total;
}

static void print_report(const bench_options *o, const kiln_model *m, double bw, const char *bw_how,
                         const bench_result *pp, const bench_result *tg) {
    double size = (double)kiln_model_weight_bytes(m), bpt = bytes_per_token(m);
    double dec = tg ? bpt * tg->mean / 1e9 : 0;
    const char *level = kiln_get_cpu_level();
    long n_threads = o->engine.n_threads;
    if (!strcmp(o->output, "json")) {
        printf("{\"model\": \"%s\", \"size_bytes\": %.0f, \"bytes_per_token\": %.0f, \"threads\": %ld, "
               "\"cpu\": \"%s\", \"read_bandwidth_gbs\": %.2f, \"read_bandwidth_pattern\": \"%s\"",
               o->model, size, bpt, n_threads, level, bw, bw_how);
        if (pp) printf(", \"pp\": {\"n\": %ld, \"mean\": %.3f, \"sd\": %.3f}", o->n_prompt, pp->mean, pp->sd);
        if (tg)
            printf(", \"tg\": {\"n\": %ld, \"mean\": %.3f, \"sd\": %.3f, \"decode_gbs\": %.2f, \"share\": %.3f}",
                   o->n_gen, tg->mean, tg->sd, dec, bw > 0 ? dec / bw : 0);
        printf(", \"reps\": %ld}\n", o->reps);
        return;
    }
    printf("model: %s (%.2f GiB of weights, %.2f GB read per generated token)\n", o->model, size / 1073741824.0,
           bpt / 1e9);
    if (bw > 0) printf("read bandwidth: %.1f GB/s (the best pattern: %s)\n", bw, bw_how);
    printf("\n| test | threads | cpu | t/s | decode GB/s | share of read bandwidth |\n|---|---|---|---|---|---|\n");
    if (pp) printf("| pp%ld | %ld | %s | %.2f ± %.2f | | |\n", o->n_prompt, n_threads, level, pp->mean, pp->sd);
    if (tg) {
        printf("| tg%ld | %ld | %s | %.2f ± %.2f | %.2f |", o->n_gen, n_threads, level, tg->mean, tg->sd, dec);
        if (bw > 0) printf(" %.0f%% |\n", 100.0 * dec / bw);
        else printf(" |\n");
    }
}

int cmd_bench(int argc, char **argv) {
    bench_options o = {NULL, "md", 512, 128, 5, {0}, true, false, false};
    bench_result pp, tg;
    kiln_model *m = NULL;
    kiln_ctx *ctx = NULL;
    kiln_ctx_params cp;
    int32_t *toks = NULL;
    double bw = 0;
    char bw_how[160] = "";
    kiln_status s;
    int rc;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--lookup") || !strcmp(argv[i], "--model-draft") || !strcmp(argv[i], "-md"))
            return cmd_bench_spec(argc, argv);
    if ((rc = parse(argc, argv, &o))) return rc < 0 ? CLI_OK : rc;
    if (!o.model) o.model = cli_default_model();
    if ((rc = cli_model_load("bench", o.model, &o.engine, o.model, &m))) return rc;
    o.engine.n_threads = kiln_model_n_threads(m);
    cp = cli_ctx_params(&o.engine);
    cp.n_ctx = (int32_t)(o.n_prompt > o.n_gen ? o.n_prompt : o.n_gen);
    cp.n_batch = o.n_prompt > 512 ? (int32_t)o.n_prompt : 0; /* the prompt is one batch */
    toks = malloc(sizeof *toks * (size_t)(cp.n_ctx + 1));
    if (!toks) {
        kiln_model_destroy(m);
        return cli_fail("bench", KILN_E_NOMEM, "token buffer");
    }
    fill_tokens(toks, cp.n_ctx, kiln_model_n_vocab(m));
    if ((s = kiln_ctx_create(m, &cp, &ctx))) rc = cli_fail("bench", s, "creating a context");
    if (!rc && o.bandwidth) bw = cli_read_bandwidth((int)o.engine.n_threads, bw_how, sizeof bw_how, o.verbose ? stderr : NULL);
    if (!rc && o.n_prompt > 0) rc = run_test(m, ctx, toks, o.n_prompt, false, o.reps, o.profile, &pp);
    if (!rc && o.n_gen > 0) rc = run_test(m, ctx, toks, o.n_gen, true, o.reps, o.profile, &tg);
    if (!rc) print_report(&o, m, bw, bw_how, o.n_prompt > 0 ? &pp : NULL, o.n_gen > 0 ? &tg : NULL);
    kiln_ctx_destroy(ctx);
    kiln_model_destroy(m);
    free(toks);
    return rc;
}
