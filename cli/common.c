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

int cli_print_plan_info(const char *cmd, kiln_ctx *ctx, int32_t n_tokens, int32_t n_outputs) {
    kiln_plan_info info;
    kiln_status s = kiln_ctx_plan_info(ctx, n_tokens, n_outputs, &info);
    if (s) return cli_fail(cmd, s, "compiling the graph");
    fprintf(stderr,
            "kiln: graph for %d token%s (bucket %d, %d output%s): %d nodes -> %d after %d round%s of passes,"
            " compiled in %.1f ms\n",
            n_tokens, n_tokens == 1 ? "" : "s", info.n_tokens, info.n_outputs, info.n_outputs == 1 ? "" : "s",
            info.nodes_before, info.nodes_after, info.rounds, info.rounds == 1 ? "" : "s", info.compile_ms);
    for (int32_t i = 0; i < info.n_passes; i++)
        if (info.passes[i].ran)
            fprintf(stderr, "  %-16s %4d rewrites, %5d nodes after round 1\n", info.passes[i].name,
                    info.passes[i].rewrites, info.passes[i].nodes_after);
    fprintf(stderr,
            "  planner: %d buffers, naive sum %.3f MB, arena %.3f MB (%.1f%%), %d reused blocks, %d in place;"
            " folded constants %.3f MB\n",
            info.n_buffers, (double)info.naive_bytes / 1e6, (double)info.arena_bytes / 1e6,
            info.naive_bytes ? 100.0 * (double)info.arena_bytes / (double)info.naive_bytes : 0.0, info.n_reused,
            info.n_inplace, (double)info.const_bytes / 1e6);
    fprintf(stderr, "  scheduler: %d split%s, %d cop%s between backends\n", info.n_splits,
            info.n_splits == 1 ? "" : "s", info.n_copies, info.n_copies == 1 ? "y" : "ies");
    return CLI_OK;
}

bool cli_arg_int_list(const char *cmd, int argc, char **argv, int *i, long lo, long hi, long *out, int max,
                      int *n) {
    const char *s, *opt = argv[*i], *p;
    if (!cli_arg_str(cmd, argc, argv, i, &s)) return false;
    *n = 0;
    for (p = s;; p++) {
        char *end;
        long v;
        errno = 0;
        v = strtol(p, &end, 10);
        if (errno || end == p || (*end != ',' && *end != '\0') || v < lo || v > hi || *n == max) {
            cli_usage_error(cmd, "option %s: '%s' is not a list of at most %d integers in %ld..%ld", opt, s,
                            max, lo, hi);
            return false;
        }
        out[(*n)++] = v;
        p = end;
        if (*p == '\0') return true;
    }
}

/* ---- the engine options ---- */

static bool cli_device_valid(const char *d) {
    if (!strcmp(d, "auto") || !strcmp(d, "cpu") || !strcmp(d, "vulkan")) return true;
    if (strncmp(d, "vulkan:", 7) || !d[7]) return false;
    for (const char *p = d + 7; *p; p++)
        if (*p < '0' || *p > '9') return false;
    return strlen(d + 7) <= 4;
}

const char *cli_engine_devices(const cli_engine *e) {
    const char *d = e->device;
    if (e->devices) return e->devices;
    if (!d) d = getenv("KILN_DEVICE");
    if (!d || !*d || !strcmp(d, "cpu") || !cli_device_valid(d)) return NULL;
    return d;
}

/* --gpu-layers N|all|auto as kiln_model_params.gpu_layers: N > 0 itself, 0 none, all 0, auto AUTO. */
static bool arg_gpu_layers(const char *cmd, int argc, char **argv, int *i, long *out) {
    const char *s, *opt = argv[*i];
    char *end;
    long v;
    if (!cli_arg_str(cmd, argc, argv, i, &s)) return false;
    if (!strcmp(s, "all") || !strcmp(s, "auto")) {
        *out = !strcmp(s, "all") ? 0 : KILN_GPU_LAYERS_AUTO;
        return true;
    }
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 0 || v > 1L << 20) {
        cli_usage_error(cmd, "option %s: '%s' is not a layer count, all or auto", opt, s);
        return false;
    }
    *out = v == 0 ? KILN_GPU_LAYERS_NONE : v;
    return true;
}

bool cli_arg_engine(const char *cmd, int argc, char **argv, int *i, cli_engine *e, bool *ok) {
    const char *a = argv[*i];
    if (!strcmp(a, "-t") || !strcmp(a, "--threads"))
        *ok = cli_arg_int(cmd, argc, argv, i, 1, 1024, &e->n_threads);
    else if (!strcmp(a, "--devices"))
        *ok = cli_arg_str(cmd, argc, argv, i, &e->devices);
    else if (!strcmp(a, "--device")) {
        if ((*ok = cli_arg_str(cmd, argc, argv, i, &e->device)) && !cli_device_valid(e->device)) {
            cli_usage_error(cmd, "option --device: '%s' is not auto, cpu, vulkan or vulkan:N", e->device);
            *ok = false;
        }
    }
    else if (!strcmp(a, "--cpu"))
        *ok = cli_arg_str(cmd, argc, argv, i, &e->cpu);
    else if (!strcmp(a, "--gpu-layers") || !strcmp(a, "-ngl"))
        *ok = arg_gpu_layers(cmd, argc, argv, i, &e->gpu_layers);
    else
        return false;
    return true;
}

/* The weight-preparation bar: "preparing weights [#####     ] 45%", redrawn in place with \r when the
 * percentage changes, ended with a newline at 100%. Drawn only when stderr is a terminal. */
typedef struct progress_bar {
    bool open;     /* a bar is on the current stderr line */
    bool finished; /* the last bar reached 100% */
    int percent;   /* the percentage drawn last */
} progress_bar;

static progress_bar weights_bar;

static void draw_progress(void *user, uint64_t done, uint64_t total) {
    progress_bar *b = user;
    enum { WIDTH = 10 };
    if (total == 0 || done > total) done = total = 1;
    int percent = (int)((double)done * 100.0 / (double)total);
    int filled = (int)(((double)done * WIDTH) / (double)total + 0.5);
    if ((b->open && percent == b->percent) || (b->finished && done == total)) return;
    b->finished = done == total;
    fprintf(stderr, "\rpreparing weights [%.*s%*s] %d%%", filled, "##########", WIDTH - filled, "", percent);
    b->open = true;
    b->percent = percent;
    if (done == total) {
        fputc('\n', stderr);
        b->open = false;
    }
    fflush(stderr);
}

static void log_line(void *user, const char *line) {
    (void)user;
    fprintf(stderr, "kiln: %s\n", line);
}

int cli_engine_cpu_level(const char *cmd, const cli_engine *e) {
    const char *level = e->cpu, *from = "--cpu";
    if (!level) level = getenv("KILN_CPU"), from = "KILN_CPU";
    if (level && *level && kiln_set_cpu_level(level))
        return cli_usage_error(cmd, "%s %s: %s", from, level, kiln_last_error());
    return CLI_OK;
}

int cli_model_load(const char *cmd, const char *path, const cli_engine *e, const char *what,
                   kiln_model **out) {
    kiln_model_params mp = kiln_model_params_default();
    kiln_status s;
    int rc = cli_engine_cpu_level(cmd, e);
    if (rc != CLI_OK) return rc;
    mp.n_threads = (int32_t)e->n_threads;
    if (e->devices && e->device)
        return cli_usage_error(cmd, "--devices and --device are exclusive (--devices LIST names the whole list)");
    if (!e->devices && !e->device && getenv("KILN_DEVICE") && *getenv("KILN_DEVICE") &&
        !cli_device_valid(getenv("KILN_DEVICE")))
        return cli_usage_error(cmd, "KILN_DEVICE='%s' is not auto, cpu, vulkan or vulkan:N", getenv("KILN_DEVICE"));
    mp.devices = cli_engine_devices(e);
    mp.gpu_layers = (int32_t)e->gpu_layers;
    if (isatty(STDERR_FILENO)) {
        mp.progress = draw_progress;
        mp.progress_user = &weights_bar;
    }
    s = kiln_model_load_ex(path, &mp, out);
    if (weights_bar.open) { /* a bar cut short (by an error) still ends its line */
        fputc('\n', stderr);
        weights_bar.open = false;
    }
    if (s) return cli_fail(cmd, s, what);
    if (kiln_model_device_note(*out)) fprintf(stderr, "kiln %s: note: %s\n", cmd, kiln_model_device_note(*out));
    if (e->verbose) fprintf(stderr, "kiln: backends: %s\n", kiln_model_backends(*out));
    return CLI_OK;
}

kiln_ctx_params cli_ctx_params(const cli_engine *e) {
    kiln_ctx_params p = kiln_ctx_params_default();
    const char *passes = getenv("KILN_PASSES"), *check = getenv("KILN_CHECK_PASSES");
    p.passes = e->passes ? e->passes : passes && *passes ? passes : NULL;
    p.check_passes = check && *check && strcmp(check, "0") != 0;
    if (e->verbose) p.log = log_line;
    return p;
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

int cli_read_text(const char *cmd, const char *path, char **out, size_t *len) {
    bool is_stdin = !strcmp(path, "-");
    FILE *f = is_stdin ? stdin : fopen(path, "rb");
    const char *name = is_stdin ? "standard input" : path;
    size_t cap = 1 << 16, n = 0;
    char *buf = NULL, *nul;
    *out = NULL;
    *len = 0;
    if (!f) {
        fprintf(stderr, "kiln %s: %s: %s\n", cmd, path, strerror(errno));
        return CLI_FAIL;
    }
    buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - 1 - n, f);
        if (n < cap - 1) break; /* end of file or an error, told apart below */
        char *bigger = cap <= SIZE_MAX / 2 ? realloc(buf, cap * 2) : NULL;
        if (!bigger) free(buf);
        buf = bigger;
        cap *= 2;
    }
    bool failed = !buf || ferror(f);
    int err = errno;
    if (!is_stdin) fclose(f);
    if (failed) {
        fprintf(stderr, "kiln %s: %s: %s\n", cmd, name, buf ? strerror(err) : "out of memory");
        free(buf);
        return CLI_FAIL;
    }
    buf[n] = '\0';
    if ((nul = memchr(buf, '\0', n)) != NULL) {
        fprintf(stderr, "kiln %s: %s: a NUL byte at offset %zu; a text cannot contain one\n", cmd, name,
                (size_t)(nul - buf));
        free(buf);
        return CLI_FAIL;
    }
    *out = buf;
    *len = n;
    return CLI_OK;
}
