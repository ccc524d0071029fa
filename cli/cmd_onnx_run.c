/*
 * cmd_onnx_run.c - `kiln onnx run MODEL --input NAME=FILE.npy | FILE.npz ... [--output-dir DIR | --output
 * FILE.npz]`: run an ONNX model once through a kiln_onnx_session on inputs read from .npy files (npy.c) or
 * .npz archives (npz.c: each member NAME.npy is input NAME), and write each output as DIR/NAME.npy (the
 * name with every byte outside [A-Za-z0-9._-] made '_') or as member NAME.npy of one .npz, or print its
 * shape and first values when neither is given.
 */
#include "common.h"
#include "npy.h"
#include "npz.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ARGS 64                    /* --input options */
#define MAX_FEEDS 256                  /* inputs, counting each member of an archive */
#define NPZ_LIMIT ((uint64_t)64 << 30) /* bytes of arrays read from one archive */

static const char run_help[] =
    "usage: kiln onnx run MODEL --input NAME=FILE.npy | FILE.npz [--input ...] [--output-dir DIR | --output "
    "FILE.npz]\n"
    "                      [-t N] [--device D] [--weights W]\n"
    "\n"
    "Run an ONNX model once. Every input the model takes is given as a .npy file (float32 or int64, C "
    "order;\n"
    "a model with one input takes --input FILE.npy) or as a member of a .npz archive (numpy.savez or\n"
    "savez_compressed: member NAME is input NAME). Its dynamic dims (batch, sequence) are bound by the\n"
    "arrays' shapes. Each output is written as DIR/NAME.npy with --output-dir, or all of them into one .npz\n"
    "with --output, else its shape and first values are printed. What runs is in docs/onnx.md; a model or\n"
    "input Kiln cannot run is reported with the reason (the node and operator, or the input and what\n"
    "differs) and exit status 1.\n"
    "\n"
    "  -i, --input NAME=FILE    an input from a .npy file, or FILE.npz: every input it holds (repeat)\n"
    "  -o, --output-dir DIR     write each output there as NAME.npy (the folder must exist)\n"
    "      --output FILE.npz    write the outputs into one .npz archive (members NAME.npy, stored)\n"
    "  -t, --threads N          CPU threads (default: the physical cores)\n"
    "      --cpu LEVEL          CPU kernel level: ref, avx2, avx512, amx or neon (default: the best here;\n"
    "                           also $KILN_CPU)\n"
    "      --weights W          float (default): as the file holds them; q8_0: MatMul/Gemm weights "
    "quantized\n"
    "                           to INT8 at load (blocks of 32 per output channel), run on the int8 kernels\n"
    "      --device D           cpu (default), vulkan[:N] or auto\n"
    "  -h, --help               this text\n";

/* One --input option: NAME=FILE, or FILE alone (a .npz, or the one input of a model that takes one). */
typedef struct input_arg {
    char *name; /* NULL: not given */
    const char *path;
} input_arg;

/* One input of the run: its name and its elements, aligned, in memory of its own. */
typedef struct feed {
    char *name;
    void *data;
    kiln_onnx_buffer b;
} feed;

typedef struct run_opts {
    const char *model, *dir, *npz, *weights;
    input_arg args[MAX_ARGS];
    int n_args;
    cli_engine e;
} run_opts;

/* The whole of path in a buffer the caller frees. */
static int read_file(const char *path, uint8_t **out, size_t *len) {
    FILE *f = fopen(path, "rb");
    long size;
    *out = NULL;
    if (!f) return -1;
    if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return -1;
    }
    *out = malloc((size_t)size + 1);
    if (!*out || fread(*out, 1, (size_t)size, f) != (size_t)size) {
        free(*out);
        *out = NULL;
        fclose(f);
        if (!errno) errno = EIO;
        return -1;
    }
    fclose(f);
    *len = (size_t)size;
    return 0;
}

/* Append array a as input `name` (copied; name taken over) to feeds. */
static int add_feed(feed *feeds, int *n, char *name, const npy_array *a, const char *path) {
    feed *f;
    for (int i = 0; i < *n; i++)
        if (!strcmp(feeds[i].name, name)) {
            fprintf(stderr, "kiln onnx: %s: input '%s' is given twice\n", path, name);
            free(name);
            return CLI_FAIL;
        }
    if (*n == MAX_FEEDS) {
        fprintf(stderr, "kiln onnx: %s: more than %d inputs\n", path, MAX_FEEDS);
        free(name);
        return CLI_FAIL;
    }
    f = &feeds[(*n)++];
    f->name = name;
    if (!(f->data = malloc(a->size ? a->size : 1))) {
        fprintf(stderr, "kiln onnx: %s: out of memory\n", path);
        return CLI_FAIL;
    }
    memcpy(f->data, a->data, a->size);
    memset(&f->b, 0, sizeof f->b);
    f->b.name = f->name;
    f->b.type = a->type;
    f->b.rank = a->rank;
    memcpy(f->b.shape, a->shape, sizeof f->b.shape);
    f->b.data = f->data;
    f->b.size = a->size;
    return CLI_OK;
}

/* The inputs option arg names: one .npy, or every member of a .npz. */
static int load_arg(const kiln_onnx *m, const input_arg *arg, int n_args, feed *feeds, int *n) {
    uint8_t *file = NULL;
    size_t len;
    char err[512];
    int rc = CLI_OK;
    if (read_file(arg->path, &file, &len)) {
        fprintf(stderr, "kiln onnx: %s: %s\n", arg->path, strerror(errno));
        return CLI_FAIL;
    }
    if (npz_is_zip(file, len)) {
        npz z;
        if (arg->name) {
            fprintf(stderr, "kiln onnx: %s=%s: a .npz names its inputs itself; give it as --input %s\n",
                    arg->name, arg->path, arg->path);
            rc = CLI_USAGE;
        } else if (npz_parse(file, len, NPZ_LIMIT, &z, err, sizeof err)) {
            fprintf(stderr, "kiln onnx: %s: %s\n", arg->path, err);
            rc = CLI_FAIL;
        } else {
            for (int32_t i = 0; i < z.n && rc == CLI_OK; i++) {
                char *name = strdup(z.members[i].name);
                rc = name ? add_feed(feeds, n, name, &z.members[i].a, arg->path) : CLI_FAIL;
            }
            npz_free(&z);
        }
    } else {
        npy_array a;
        kiln_onnx_value_info in;
        char *name = arg->name ? strdup(arg->name) : NULL;
        if (!name && n_args == 1 && kiln_onnx_input_count(m) == 1 && !kiln_onnx_input(m, 0, &in))
            name = strdup(in.name);
        if (!name) {
            fprintf(stderr, "kiln onnx: --input %s: give it as NAME=FILE\n", arg->path);
            rc = CLI_USAGE;
        } else if (npy_parse(file, len, &a, err, sizeof err)) {
            fprintf(stderr, "kiln onnx: %s: %s\n", arg->path, err);
            free(name);
            rc = CLI_FAIL;
        } else {
            rc = add_feed(feeds, n, name, &a, arg->path);
        }
    }
    free(file);
    return rc;
}

static void print_output(const kiln_onnx_buffer *o, const char *dir) {
    char path[4096];
    int at;
    printf("%s: [", o->name);
    for (int32_t d = 0; d < o->rank; d++)
        printf("%s%" PRId64, d ? ", " : "", o->shape[d]);
    printf("] %s", kiln_onnx_type_name(o->type));
    if (dir) {
        at = snprintf(path, sizeof path, "%s/", dir);
        for (const char *c = o->name; *c && at < (int)sizeof path - 5; c++)
            path[at++] = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
                                 *c == '.' || *c == '_' || *c == '-'
                             ? *c
                             : '_';
        snprintf(path + at, sizeof path - (size_t)at, ".npy");
        if (npy_write(path, o->type, o->rank, o->shape, o->data))
            printf(" (cannot write %s: %s)\n", path, strerror(errno));
        else
            printf(" -> %s\n", path);
        return;
    }
    size_t es = o->type == KILN_ONNX_INT64 ? 8 : o->type == KILN_ONNX_BOOL ? 1 : 4, n = o->size / es;
    for (size_t i = 0; i < n && i < 8; i++) {
        const uint8_t *p = (const uint8_t *)o->data + i * es;
        double v = o->type == KILN_ONNX_FLOAT   ? ((const float *)o->data)[i]
                   : o->type == KILN_ONNX_INT64 ? (double)((const int64_t *)o->data)[i]
                   : o->type == KILN_ONNX_INT32 ? (double)((const int32_t *)o->data)[i]
                                                : (double)p[0];
        printf("%s%.6g", i ? " " : ": ", v);
    }
    printf("%s\n", n > 8 ? " ..." : "");
}

/* Every output of the last run of s into the archive path. */
static int write_npz(const kiln_onnx *m, kiln_onnx_session *s, const char *path) {
    int32_t n = kiln_onnx_output_count(m);
    const char **names = calloc((size_t)n + 1, sizeof *names);
    uint8_t **images = calloc((size_t)n + 1, sizeof *images);
    size_t *lens = calloc((size_t)n + 1, sizeof *lens);
    char err[512];
    int rc = names && images && lens ? CLI_OK : CLI_FAIL;
    for (int32_t i = 0; i < n && rc == CLI_OK; i++) {
        kiln_onnx_buffer o;
        kiln_status st = kiln_onnx_session_output(s, i, NULL, 0, &o);
        if (st) {
            rc = cli_fail("onnx", st, NULL);
        } else if (npy_image(o.type, o.rank, o.shape, o.data, &images[i], &lens[i])) {
            fprintf(stderr, "kiln onnx: output '%s' (%s): %s\n", o.name, kiln_onnx_type_name(o.type),
                    errno == EINVAL ? "the .npy writer does not write this type" : strerror(errno));
            rc = CLI_FAIL;
        } else {
            names[i] = o.name;
        }
    }
    if (rc == CLI_OK && npz_write(path, n, names, images, lens, err, sizeof err)) {
        fprintf(stderr, "kiln onnx: %s\n", err);
        rc = CLI_FAIL;
    }
    if (rc == CLI_OK) printf("%d outputs -> %s\n", (int)n, path);
    for (int32_t i = 0; images && i < n; i++)
        free(images[i]);
    free(names);
    free(images);
    free(lens);
    return rc;
}

static int parse_args(int argc, char **argv, run_opts *o) {
    for (int i = 2; i < argc; i++) {
        bool ok = true;
        const char *v;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(run_help, stdout);
            return -1;
        } else if (!strcmp(argv[i], "-i") || !strcmp(argv[i], "--input")) {
            if (!cli_arg_str("onnx", argc, argv, &i, &v)) return CLI_USAGE;
            if (o->n_args == MAX_ARGS)
                return cli_usage_error("onnx", "more than %d --input options", MAX_ARGS);
            const char *eq = strchr(v, '=');
            o->args[o->n_args].name = eq ? strndup(v, (size_t)(eq - v)) : NULL;
            o->args[o->n_args++].path = eq ? eq + 1 : v;
        } else if (!strcmp(argv[i], "-o") || !strcmp(argv[i], "--output-dir")) {
            if (!cli_arg_str("onnx", argc, argv, &i, &o->dir)) return CLI_USAGE;
        } else if (!strcmp(argv[i], "--output")) {
            if (!cli_arg_str("onnx", argc, argv, &i, &o->npz)) return CLI_USAGE;
        } else if (!strcmp(argv[i], "--weights")) {
            if (!cli_arg_str("onnx", argc, argv, &i, &o->weights)) return CLI_USAGE;
        } else if (cli_arg_engine("onnx", argc, argv, &i, &o->e, &ok)) {
            if (!ok) return CLI_USAGE;
        } else if (argv[i][0] == '-') {
            return cli_usage_error("onnx", "unknown option '%s'", argv[i]);
        } else if (o->model) {
            return cli_usage_error("onnx", "more than one MODEL");
        } else {
            o->model = argv[i];
        }
    }
    if (!o->model) return cli_usage_error("onnx", "missing MODEL");
    if (o->dir && o->npz) return cli_usage_error("onnx", "--output-dir and --output: give one");
    return CLI_OK;
}

static int run_model(kiln_onnx *m, const run_opts *o, feed *feeds, int *n_feeds) {
    kiln_onnx_buffer bufs[MAX_FEEDS];
    kiln_onnx_session_params p = kiln_onnx_session_params_default();
    kiln_onnx_session *s = NULL;
    kiln_status st;
    int rc = CLI_OK;
    for (int i = 0; i < o->n_args && rc == CLI_OK; i++)
        rc = load_arg(m, &o->args[i], o->n_args, feeds, n_feeds);
    if (rc) return rc;
    for (int i = 0; i < *n_feeds; i++)
        bufs[i] = feeds[i].b;
    p.n_threads = (int32_t)o->e.n_threads;
    p.devices = cli_engine_devices(&o->e);
    p.weights = o->weights;
    if ((st = kiln_onnx_session_create(m, &p, &s))) return cli_fail("onnx", st, NULL);
    if ((st = kiln_onnx_session_run(s, bufs, *n_feeds))) {
        rc = cli_fail("onnx", st, NULL);
    } else if (o->npz) {
        rc = write_npz(m, s, o->npz);
    } else {
        for (int32_t i = 0; i < kiln_onnx_output_count(m); i++) {
            kiln_onnx_buffer out;
            if ((st = kiln_onnx_session_output(s, i, NULL, 0, &out))) {
                rc = cli_fail("onnx", st, NULL);
                break;
            }
            print_output(&out, o->dir);
        }
    }
    kiln_onnx_session_destroy(s);
    return rc;
}

int cmd_onnx_run(int argc, char **argv) {
    static feed feeds[MAX_FEEDS];
    run_opts o;
    int n_feeds = 0, rc;
    kiln_onnx *m = NULL;
    kiln_status st;
    memset(&o, 0, sizeof o);
    memset(feeds, 0, sizeof feeds);
    rc = parse_args(argc, argv, &o);
    if (rc < 0)
        rc = CLI_OK, o.model = NULL; /* --help was printed */
    else if (rc == CLI_OK && (rc = cli_engine_cpu_level("onnx", &o.e)) == CLI_OK &&
             (st = kiln_onnx_load(o.model, &m)))
        rc = cli_fail("onnx", st, NULL);
    if (rc == CLI_OK && o.model) rc = run_model(m, &o, feeds, &n_feeds);
    kiln_onnx_destroy(m);
    for (int i = 0; i < o.n_args; i++)
        free(o.args[i].name);
    for (int i = 0; i < n_feeds; i++) {
        free(feeds[i].name);
        free(feeds[i].data);
    }
    return rc;
}
