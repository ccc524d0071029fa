/*
 * cmd_quantize.c - `kiln quantize IN.gguf OUT.gguf TYPE`: convert a model to one of the quantization
 * mixes (Q4_K_M, Q5_K_M, Q4_K_S, Q3_K_M, Q2_K, Q6_K, Q8_0, Q4_0). A progress bar goes to stderr when it
 * is a terminal; a summary (sizes, time, how many tensors got each type) always goes to stderr.
 */
#include "common.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char quantize_help[] =
    "usage: kiln quantize [--allow-requantize] IN.gguf OUT.gguf TYPE\n"
    "\n"
    "Write a quantized copy of a GGUF model. TYPE is a mix, as in llama.cpp's quantize tool:\n"
    "  Q4_K_M Q5_K_M Q4_K_S Q3_K_M Q2_K Q6_K Q8_0 Q4_0\n"
    "All metadata is kept; norms stay F32; attention V and FFN down get more bits in the _M mixes; the\n"
    "output projection gets Q6_K (Q8_0 in the Q8_0 mix); rows that are not a multiple of 256 fall back\n"
    "to a 32-element type. The output appears atomically: no partial file is left on error.\n"
    "\n"
    "      --allow-requantize  accept input tensors that are already quantized\n"
    "  -h, --help              this text\n";

typedef struct progress {
    bool tty;
    int64_t per_type[KILN_TYPE_COUNT];
} progress;

static void on_tensor(void *user, int64_t index, int64_t count, const char *name, kiln_type type) {
    progress *p = user;
    kiln_type_traits t;
    if ((int)type >= 0 && type < KILN_TYPE_COUNT) p->per_type[type]++;
    if (!p->tty) return;
    int width = 30, done = count ? (int)((index + 1) * width / count) : width;
    if (kiln_type_get_traits(type, &t)) t.name = "?";
    fprintf(stderr, "\r[%.*s%*s] %lld/%lld %-32.32s %-6s", done, "==============================", width - done, "",
            (long long)index + 1, (long long)count, name, t.name);
    fflush(stderr);
}

static double file_mib(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (double)st.st_size / (1024.0 * 1024.0) : 0.0;
}

int cmd_quantize(int argc, char **argv) {
    const char *args[3] = {NULL, NULL, NULL};
    int n_args = 0;
    kiln_quantize_params params = kiln_quantize_params_default();
    progress p = {0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(quantize_help, stdout);
            return CLI_OK;
        } else if (!strcmp(argv[i], "--allow-requantize")) params.allow_requantize = true;
        else if (argv[i][0] == '-' && argv[i][1] != '\0') return cli_usage_error("quantize", "unknown option '%s'", argv[i]);
        else if (n_args == 3) return cli_usage_error("quantize", "too many arguments ('%s')", argv[i]);
        else args[n_args++] = argv[i];
    }
    if (n_args < 3) return cli_usage_error("quantize", "expected IN.gguf OUT.gguf TYPE");
    if (kiln_quant_mix_parse(args[2], &params.mix)) return cli_usage_error("quantize", "%s", kiln_last_error());
    p.tty = isatty(STDERR_FILENO);
    double t0 = cli_now_seconds();
    kiln_status s = kiln_quantize_file(args[0], args[1], &params, on_tensor, &p);
    if (p.tty) fputc('\n', stderr);
    if (s) return cli_fail("quantize", s, NULL);
    fprintf(stderr, "kiln quantize: %s: %.2f MiB -> %.2f MiB (%s) in %.1f s; tensors:", args[1], file_mib(args[0]),
            file_mib(args[1]), kiln_quant_mix_name(params.mix), cli_now_seconds() - t0);
    for (int t = 0; t < KILN_TYPE_COUNT; t++) {
        kiln_type_traits tr;
        if (p.per_type[t] && kiln_type_get_traits(t, &tr) == KILN_OK)
            fprintf(stderr, " %s %lld", tr.name, (long long)p.per_type[t]);
    }
    fputc('\n', stderr);
    return CLI_OK;
}
