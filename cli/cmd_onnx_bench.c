/*
 * cmd_onnx_bench.c - `kiln onnx bench MODEL [--dims NAME=N,...] [-r N]`: time an ONNX model's runs at the
 * shapes
 * --dims binds, on inputs made here (floats from a fixed seed in [-1, 1), integers and booleans 0, or
 * --int-value V: 0 is a valid token id everywhere, 1 an all-true attention mask, which is what a
 * transformer's attention should be timed with: an all-false mask hides every key). The first run compiles
 * the plan for those shapes and is reported apart; the next N are timed one by one and summarized by their
 * median, fastest and slowest. For comparisons with onnxruntime, bench/onnx_compare.py runs both in one
 * process (docs/performance.md).
 */
#include "common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char bench_help[] =
    "usage: kiln onnx bench MODEL [--dims NAME=N,...] [-r N] [-t N] [--device D] [--weights W]\n"
    "\n"
    "Run an ONNX model on inputs made here at the shapes --dims gives its symbolic dimensions (1 "
    "otherwise):\n"
    "floats from a fixed seed in [-1, 1), integers and booleans 0 (or --int-value). The first run compiles\n"
    "a plan for the shapes and is reported apart; the next N runs are timed, and their median, fastest and\n"
    "slowest printed.\n"
    "\n"
    "      --dims LIST      NAME=N pairs, comma-separated (e.g. batch=1,seq=128)\n"
    "      --int-value V    every integer input element V (0 .. 127) and every boolean V != 0 (default 0);\n"
    "                       1 gives a transformer an all-true attention mask (0 hides every key)\n"
    "  -r, --runs N         timed runs after the first (default 5)\n"
    "  -t, --threads N      CPU threads (default: the physical cores)\n"
    "      --cpu LEVEL      CPU kernel level: ref, avx2, avx512, amx or neon (default: the best here;\n"
    "                       also $KILN_CPU), to measure a level on a machine that has a higher one\n"
    "      --device D       cpu (default), vulkan[:N] or auto\n"
    "      --weights W      float (default) or q8_0: MatMul/Gemm weights quantized to INT8 at load\n"
    "  -h, --help           this text\n";

/* Data for each buffer: floats from a fixed seed, iv (bools: iv != 0) otherwise. */
static int fill_inputs(kiln_onnx_buffer *in, int32_t n, long iv) {
    uint64_t state = 22;
    for (int32_t i = 0; i < n; i++) {
        uint64_t count = 1;
        for (int32_t d = 0; d < in[i].rank; d++)
            if (__builtin_mul_overflow(count, (uint64_t)in[i].shape[d], &count) ||
                count > ((uint64_t)1 << 32))
                return cli_usage_error("onnx", "input '%s' is over 2^32 elements at these --dims",
                                       in[i].name);
        in[i].size = (size_t)count * kiln_onnx_type_size(in[i].type);
        if (!(in[i].data = calloc(1, in[i].size ? in[i].size : 1))) {
            fprintf(stderr, "kiln onnx: out of memory for input '%s'\n", in[i].name);
            return CLI_FAIL;
        }
        for (uint64_t j = 0; in[i].type == KILN_ONNX_FLOAT && j < count; j++) {
            state = state * 6364136223846793005ULL + 1442695040888963407ULL;
            ((float *)in[i].data)[j] = (float)((state >> 40) & 0xffffff) / 8388608.0f - 1.0f;
        }
        printf("input %s %s [", in[i].name, kiln_onnx_type_name(in[i].type));
        for (int32_t d = 0; d < in[i].rank; d++)
            printf("%s%lld", d ? ", " : "", (long long)in[i].shape[d]);
        if (in[i].type == KILN_ONNX_FLOAT)
            printf("]: floats from a fixed seed in [-1, 1)\n");
        else if (in[i].type == KILN_ONNX_BOOL)
            printf("]: all %s\n", iv ? "true" : "false");
        else
            printf("]: all %ld\n", iv);
        for (uint64_t j = 0; iv != 0 && in[i].type != KILN_ONNX_FLOAT && j < count; j++) {
            switch (in[i].type) {
            case KILN_ONNX_INT64: ((int64_t *)in[i].data)[j] = iv; break;
            case KILN_ONNX_INT32: ((int32_t *)in[i].data)[j] = (int32_t)iv; break;
            case KILN_ONNX_INT8: ((int8_t *)in[i].data)[j] = (int8_t)iv; break;
            case KILN_ONNX_UINT8: ((uint8_t *)in[i].data)[j] = (uint8_t)iv; break;
            case KILN_ONNX_BOOL: ((uint8_t *)in[i].data)[j] = 1; break;
            default: break;
            }
        }
    }
    return CLI_OK;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int bench(kiln_onnx *m, const char *dims, long runs, long iv, const char *weights,
                 const cli_engine *e) {
    kiln_onnx_buffer *in = NULL;
    kiln_onnx_session_params p = kiln_onnx_session_params_default();
    kiln_onnx_session *s = NULL;
    int32_t n = kiln_onnx_input_count(m);
    double *ms = calloc((size_t)runs, sizeof *ms), t0;
    kiln_status st = KILN_OK;
    int rc = ms ? cli_onnx_inputs(m, dims, &in) : CLI_FAIL;
    if (rc == CLI_OK) rc = fill_inputs(in, n, iv);
    p.n_threads = (int32_t)e->n_threads;
    p.devices = cli_engine_devices(e);
    p.weights = weights;
    if (rc == CLI_OK && (st = kiln_onnx_session_create(m, &p, &s))) rc = cli_fail("onnx", st, NULL);
    if (rc == CLI_OK) {
        t0 = cli_now_seconds();
        if ((st = kiln_onnx_session_run(s, in, n)))
            rc = cli_fail("onnx", st, NULL);
        else
            printf("first run (compiles the plan): %.2f ms\n", (cli_now_seconds() - t0) * 1e3);
    }
    for (long r = 0; rc == CLI_OK && r < runs; r++) {
        t0 = cli_now_seconds();
        if ((st = kiln_onnx_session_run(s, in, n))) rc = cli_fail("onnx", st, NULL);
        ms[r] = (cli_now_seconds() - t0) * 1e3;
    }
    if (rc == CLI_OK) {
        qsort(ms, (size_t)runs, sizeof *ms, cmp_double);
        printf("%ld runs: median %.2f ms, fastest %.2f, slowest %.2f; plans compiled: %lld\n", runs,
               ms[runs / 2], ms[0], ms[runs - 1], (long long)kiln_onnx_session_compiles(s));
    }
    kiln_onnx_session_destroy(s);
    for (int32_t i = 0; in && i < n; i++)
        free(in[i].data);
    free(in);
    free(ms);
    return rc;
}

int cmd_onnx_bench(int argc, char **argv) {
    const char *model = NULL, *dims = NULL, *weights = NULL;
    long runs = 5, iv = 0;
    cli_engine e;
    kiln_onnx *m = NULL;
    kiln_status st;
    int rc;
    memset(&e, 0, sizeof e);
    for (int i = 2; i < argc; i++) {
        bool ok = true;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(bench_help, stdout);
            return CLI_OK;
        } else if (!strcmp(argv[i], "--dims")) {
            if (!cli_arg_str("onnx", argc, argv, &i, &dims)) return CLI_USAGE;
        } else if (!strcmp(argv[i], "--weights")) {
            if (!cli_arg_str("onnx", argc, argv, &i, &weights)) return CLI_USAGE;
        } else if (!strcmp(argv[i], "--int-value")) {
            if (!cli_arg_int("onnx", argc, argv, &i, 0, 127, &iv)) return CLI_USAGE;
        } else if (!strcmp(argv[i], "-r") || !strcmp(argv[i], "--runs")) {
            if (!cli_arg_int("onnx", argc, argv, &i, 1, 100000, &runs)) return CLI_USAGE;
        } else if (cli_arg_engine("onnx", argc, argv, &i, &e, &ok)) {
            if (!ok) return CLI_USAGE;
        } else if (argv[i][0] == '-') {
            return cli_usage_error("onnx", "unknown option '%s'", argv[i]);
        } else if (model) {
            return cli_usage_error("onnx", "more than one MODEL");
        } else {
            model = argv[i];
        }
    }
    if (!model) return cli_usage_error("onnx", "missing MODEL (kiln onnx bench --help)");
    if ((rc = cli_engine_cpu_level("onnx", &e)) != CLI_OK) return rc;
    if ((st = kiln_onnx_load(model, &m))) return cli_fail("onnx", st, NULL);
    rc = bench(m, dims, runs, iv, weights, &e);
    kiln_onnx_destroy(m);
    return rc;
}
