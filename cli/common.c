/* common.c - see common.h. */
#include "common.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static bool readable(const char *path) { return access(path, R_OK) == 0; }

const char *cli_default_model(void) {
    static char exe_relative[PATH_MAX];
    const char *env = getenv("KILN_MODEL");
    ssize_t n;
    if (env && *env) return env;
    n = readlink("/proc/self/exe", exe_relative, sizeof exe_relative - 1);
    if (n > 0) {
        char *slash;
        exe_relative[n] = '\0';
        slash = strrchr(exe_relative, '/');
        if (slash) {
            *slash = '\0';
            size_t used = strlen(exe_relative);
            snprintf(exe_relative + used, sizeof exe_relative - used, "/../share/kiln/models/stories260K.gguf");
            if (readable(exe_relative)) return exe_relative;
        }
    }
    if (readable(KILN_INSTALLED_MODEL)) return KILN_INSTALLED_MODEL;
    return KILN_SOURCE_MODEL;
}

int cli_fail(const char *cmd, kiln_status status, const char *what) {
    if (what) fprintf(stderr, "kiln %s: %s: %s (%s)\n", cmd, what, kiln_last_error(), kiln_status_name(status));
    else fprintf(stderr, "kiln %s: %s (%s)\n", cmd, kiln_last_error(), kiln_status_name(status));
    return CLI_FAIL;
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "kiln %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see 'kiln %s --help')\n", cmd);
    return CLI_USAGE;
}

bool cli_arg_str(const char *cmd, int argc, char **argv, int *i, const char **out) {
    if (*i + 1 >= argc) {
        cli_usage_error(cmd, "option %s needs a value", argv[*i]);
        return false;
    }
    *out = argv[++*i];
    return true;
}

bool cli_arg_int(const char *cmd, int argc, char **argv, int *i, long lo, long hi, long *out) {
    const char *s, *opt = argv[*i];
    char *end;
    long v;
    if (!cli_arg_str(cmd, argc, argv, i, &s)) return false;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        cli_usage_error(cmd, "option %s: '%s' is not an integer in %ld..%ld", opt, s, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

bool cli_arg_float(const char *cmd, int argc, char **argv, int *i, double lo, double hi, double *out) {
    const char *s, *opt = argv[*i];
    char *end;
    double v;
    if (!cli_arg_str(cmd, argc, argv, i, &s)) return false;
    errno = 0;
    v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi) {
        cli_usage_error(cmd, "option %s: '%s' is not a number in %g..%g", opt, s, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

bool cli_arg_u64(const char *cmd, int argc, char **argv, int *i, uint64_t *out) {
    const char *s, *opt = argv[*i];
    char *end;
    unsigned long long v;
    if (!cli_arg_str(cmd, argc, argv, i, &s)) return false;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-') {
        cli_usage_error(cmd, "option %s: '%s' is not a non-negative integer", opt, s);
        return false;
    }
    *out = (uint64_t)v;
    return true;
}

double cli_now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int cli_print_plan_info(kiln_ctx *ctx, int32_t n_tokens) {
    kiln_plan_info info;
    kiln_status s = kiln_ctx_plan_info(ctx, n_tokens, &info);
    if (s) return cli_fail("run", s, "compiling the graph");
    fprintf(stderr, "kiln: graph for %d token%s: %d nodes -> %d after %d round%s of passes\n", n_tokens,
            n_tokens == 1 ? "" : "s", info.nodes_before, info.nodes_after, info.rounds, info.rounds == 1 ? "" : "s");
    for (int32_t i = 0; i < info.n_passes; i++)
        if (info.passes[i].ran)
            fprintf(stderr, "  %-16s %4d rewrites, %5d nodes after round 1\n", info.passes[i].name, info.passes[i].rewrites,
                    info.passes[i].nodes_after);
    fprintf(stderr,
            "  planner: %d buffers, naive sum %.3f MB, arena %.3f MB (%.1f%%), %d reused blocks, %d in place;"
            " folded constants %.3f MB\n",
            info.n_buffers, (double)info.naive_bytes / 1e6, (double)info.arena_bytes / 1e6,
            info.naive_bytes ? 100.0 * (double)info.arena_bytes / (double)info.naive_bytes : 0.0, info.n_reused,
            info.n_inplace, (double)info.const_bytes / 1e6);
    return CLI_OK;
}

bool cli_arg_kv_type(const char *cmd, int argc, char **argv, int *i, kiln_type *out) {
    const char *s, *opt = argv[*i];
    if (!cli_arg_str(cmd, argc, argv, i, &s)) return false;
    if (!strcmp(s, "f32")) *out = KILN_TYPE_F32;
    else if (!strcmp(s, "f16")) *out = KILN_TYPE_F16;
    else if (!strcmp(s, "q8_0")) *out = KILN_TYPE_Q8_0;
    else {
        cli_usage_error(cmd, "option %s: '%s' is not f32, f16 or q8_0", opt, s);
        return false;
    }
    return true;
}

bool cli_arg_sampling(const char *cmd, int argc, char **argv, int *i, kiln_sampler_params *params, bool *seed_given,
                      bool *ok) {
    const char *a = argv[*i];
    double f;
    long v;
    if (!strcmp(a, "--temp")) {
        if ((*ok = cli_arg_float(cmd, argc, argv, i, 0, 100, &f))) params->temperature = (float)f;
    } else if (!strcmp(a, "--top-k")) {
        if ((*ok = cli_arg_int(cmd, argc, argv, i, 0, 1L << 30, &v))) params->top_k = (int32_t)v;
    } else if (!strcmp(a, "--top-p")) {
        if ((*ok = cli_arg_float(cmd, argc, argv, i, 0, 1, &f))) params->top_p = (float)f;
    } else if (!strcmp(a, "--min-p")) {
        if ((*ok = cli_arg_float(cmd, argc, argv, i, 0, 1, &f))) params->min_p = (float)f;
    } else if (!strcmp(a, "--repeat-penalty")) {
        if ((*ok = cli_arg_float(cmd, argc, argv, i, 0.01, 100, &f))) params->repeat_penalty = (float)f;
    } else if (!strcmp(a, "--repeat-last-n")) {
        if ((*ok = cli_arg_int(cmd, argc, argv, i, 0, 1L << 20, &v))) params->repeat_last_n = (int32_t)v;
    } else if (!strcmp(a, "--seed")) {
        if ((*ok = cli_arg_u64(cmd, argc, argv, i, &params->seed))) *seed_given = true;
    } else {
        return false;
    }
    return true;
}
