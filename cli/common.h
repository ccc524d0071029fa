/*
 * common.h - helpers shared by the kiln subcommands: the bundled-model lookup, option parsing with
 * checked numbers, error reporting, a monotonic clock, and the engine options every command that runs a
 * model shares (threads, devices, CPU level, graph passes, the runtime log).
 *
 * The library reads no environment variable; the CLI maps the KILN_* variables to parameters here:
 * KILN_CPU (unless --cpu) to kiln_set_cpu_level, KILN_PASSES (unless --passes) to kiln_ctx_params.passes,
 * and KILN_CHECK_PASSES (set, not "0") to kiln_ctx_params.check_passes.
 */
#ifndef KILN_CLI_COMMON_H
#define KILN_CLI_COMMON_H

#include "kiln.h"

#include <stdbool.h>
#include <stdint.h>

/* Exit codes: 0 success, 1 runtime failure, 2 usage error. */
enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

/* The model to use when no -m is given: $KILN_MODEL, then the installed copy next to the executable's
 * prefix, then the build-time install path, then the source tree's models/ folder. */
const char *cli_default_model(void);

/* Print "kiln <cmd>: <what>: <kiln_last_error()>" (or without "<what>: " when what is NULL) to stderr
 * and return CLI_FAIL. */
int cli_fail(const char *cmd, kiln_status status, const char *what);
/* Print "kiln <cmd>: <message>" plus a hint to use --help, return CLI_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Parse the value of option `opt` (argv[*i + 1]); advances *i. Return false (after printing) on a missing
 * or malformed value. */
bool cli_arg_str(const char *cmd, int argc, char **argv, int *i, const char **out);
bool cli_arg_int(const char *cmd, int argc, char **argv, int *i, long lo, long hi, long *out);
bool cli_arg_float(const char *cmd, int argc, char **argv, int *i, double lo, double hi, double *out);
bool cli_arg_u64(const char *cmd, int argc, char **argv, int *i, uint64_t *out);
/* If argv[*i] is a sampling option (--temp, --top-k, --top-p, --min-p, --repeat-penalty, --repeat-last-n,
 * --seed), parse its value into params (and set *seed_given for --seed) and return true, with *ok false
 * when the value was malformed (already reported). Returns false for any other option. */
bool cli_arg_sampling(const char *cmd, int argc, char **argv, int *i, kiln_sampler_params *params, bool *seed_given,
                      bool *ok);

/* --kv-type: f32, f16 or q8_0. */
bool cli_arg_kv_type(const char *cmd, int argc, char **argv, int *i, kiln_type *out);

double cli_now_seconds(void);

/* The text of -f FILE: the whole of FILE ("-": standard input, read to its end) in a NUL-terminated
 * buffer the caller frees, its length in *len. Any size that fits in memory; a NUL byte inside the text
 * is refused, since a text ends at its first NUL. Returns CLI_OK, or CLI_FAIL after printing what went
 * wrong ("kiln <cmd>: FILE: ..."). */
int cli_read_text(const char *cmd, const char *path, char **out, size_t *len);

/* Options shared by the commands that run a model. Zero-initialized means every default. */
typedef struct cli_engine {
    long n_threads;      /* -t, --threads; 0 = kiln_default_threads() */
    const char *devices; /* --devices LIST; NULL = --device, else the CPU alone */
    const char *device;  /* --device auto|cpu|vulkan[:N]; NULL = $KILN_DEVICE, else cpu */
    long gpu_layers;     /* --gpu-layers N|all|auto, as kiln_model_params.gpu_layers (0 = all) */
    const char *cpu;     /* --cpu LEVEL; NULL = $KILN_CPU, else the best level of this CPU */
    const char *passes;  /* --passes LIST; NULL = $KILN_PASSES, else all */
    bool verbose;        /* the runtime's log lines go to stderr, prefixed "kiln: " */
} cli_engine;

/* If argv[*i] is -t/--threads, --devices, --device or --cpu, parse its value into e and return true, with
 * *ok false when the value was malformed (already reported). Returns false for any other option. */
bool cli_arg_engine(const char *cmd, int argc, char **argv, int *i, cli_engine *e, bool *ok);

/* The device list kiln_model_params gets: --devices LIST, else --device (else $KILN_DEVICE) mapped to a
 * list ("cpu" -> NULL; "auto", "vulkan", "vulkan:N" as they are). NULL for the CPU alone. */
const char *cli_engine_devices(const cli_engine *e);

/* Set the CPU kernel level: --cpu, else $KILN_CPU, else leave the best level of this CPU. Returns CLI_OK,
 * or CLI_USAGE after reporting a level that is not known. */
int cli_engine_cpu_level(const char *cmd, const cli_engine *e);

/* Set the CPU kernel level (cli_engine_cpu_level), then load the model with e's threads and devices,
 * drawing a progress bar on stderr while weights are prepared when stderr is a terminal. Returns CLI_OK,
 * CLI_USAGE for a bad level, or CLI_FAIL after printing what went wrong (with `what` as cli_fail). */
int cli_model_load(const char *cmd, const char *path, const cli_engine *e, const char *what,
                   kiln_model **out);

/* Context parameters with e's passes (else $KILN_PASSES), $KILN_CHECK_PASSES, and, when e->verbose, a
 * log that prints each runtime line to stderr as "kiln: <line>". The strings are borrowed from e and the
 * environment: they must outlive kiln_ctx_create. */
kiln_ctx_params cli_ctx_params(const cli_engine *e);

/* Print the plan figures of ctx for batches of n_tokens with n_outputs logits rows to stderr
 * (kiln run --verbose, kiln graph). */
int cli_print_plan_info(const char *cmd, kiln_ctx *ctx, int32_t n_tokens, int32_t n_outputs);

/* Parse a comma-separated list of integers in lo..hi (at most max of them) for option opt, as -npp 128,256
 * takes; advances *i. */
bool cli_arg_int_list(const char *cmd, int argc, char **argv, int *i, long lo, long hi, long *out, int max,
                      int *n);

int cmd_run(int argc, char **argv);
int cmd_devices(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_graph(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_batched_bench(int argc, char **argv);
int cmd_embed(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_onnx(int argc, char **argv);
int cmd_onnx_run(int argc, char **argv);   /* kiln onnx run (cmd_onnx_run.c) */
int cmd_onnx_bench(int argc, char **argv); /* kiln onnx bench (cmd_onnx_bench.c) */
/* The model's fed inputs as buffers of their shapes, symbolic dims bound by --dims ("NAME=N,...", 1 where it
 * says nothing), data NULL; *out to free(). CLI_OK, or CLI_USAGE / CLI_FAIL after reporting (cmd_onnx.c). */
int cli_onnx_inputs(kiln_onnx *m, const char *dims, kiln_onnx_buffer **out);

#endif
