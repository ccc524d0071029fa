/*
 * cmd_onnx_run.c - `kiln onnx run MODEL --input NAME=FILE.npy ... [--output-dir DIR]`: run an ONNX model
 * once through a kiln_onnx_session on inputs read from .npy files (npy.c), and write each output as
 * DIR/NAME.npy (the name with every byte outside [A-Za-z0-9._-] made '_'), or print its shape and first
 * values when no folder is given.
 */
#include "common.h"
#include "npy.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FEEDS 64

static const char run_help[] =
    "usage: kiln onnx run MODEL --input NAME=FILE.npy [--input ...] [--output-dir DIR] [-t N] [--device D] "
    "[--weights W]\n"
    "\n"
    "Run an ONNX model once. Every input the model takes is given as a .npy file (float32, C order; a model\n"
    "with one input takes --input FILE.npy). Its dynamic dims (batch, sequence) are bound by the arrays'\n"
    "shapes. Each output is written as DIR/NAME.npy (float32) with --output-dir, else its shape and first\n"
    "values are printed. What runs is in docs/onnx.md; a model or input Kiln cannot run is reported with "
    "the\n"
    "reason (the node and operator, or the input and what differs) and exit status 1.\n"
    "\n"
    "  -i, --input NAME=FILE    an input (repeat for each)\n"
    "  -o, --output-dir DIR     write the outputs there (the folder must exist)\n"
    "  -t, --threads N          CPU threads (default: the physical cores)\n"
    "      --cpu LEVEL          CPU kernel level: ref, avx2, avx512, amx or neon (default: the best here;\n"
    "                           also $KILN_CPU)\n"
    "      --weights W          float (default): as the file holds them; q8_0: MatMul/Gemm weights "
    "quantized\n"
    "                           to INT8 at load (blocks of 32 per output channel), run on the int8 kernels\n"
    "      --device D           cpu (default), vulkan[:N] or auto\n"
    "  -h, --help               this text\n";

typedef struct feed {
    const char *name, *path;
    uint8_t *file; /* the whole .npy file */
    float *data;   /* its elements, aligned */
} feed;

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

/* Read feed f's file into buffer b. */
static int load_feed(feed *f, kiln_onnx_buffer *b) {
    npy_array a;
    size_t len;
    char err[256];
    if (read_file(f->path, &f->file, &len)) {
        fprintf(stderr, "kiln onnx: %s: %s\n", f->path, strerror(errno));
        return CLI_FAIL;
    }
    if (npy_parse(f->file, len, &a, err, sizeof err)) {
        fprintf(stderr, "kiln onnx: %s: %s\n", f->path, err);
        return CLI_FAIL;
    }
    if (!(f->data = malloc(a.size ? a.size : 1))) {
        fprintf(stderr, "kiln onnx: %s: out of memory\n", f->path);
        return CLI_FAIL;
    }
    memcpy(f->data, a.data, a.size);
    memset(b, 0, sizeof *b);
    b->name = f->name;
    b->type = a.type;
    b->rank = a.rank;
    memcpy(b->shape, a.shape, sizeof b->shape);
    b->data = f->data;
    b->size = a.size;
    return CLI_OK;
}

static void print_output(const kiln_onnx_buffer *o, const char *dir) {
    char path[4096];
    int at;
    printf("%s: [", o->name);
    for (int32_t d = 0; d < o->rank; d++)
        printf("%s%" PRId64, d ? ", " : "", o->shape[d]);
    printf("] %s", kiln_onnx_type_name(o->type));
    if (dir && o->type != KILN_ONNX_FLOAT) {
        printf(" (not written: the .npy writer writes float outputs)\n");
        return;
    }
    if (dir) {
        at = snprintf(path, sizeof path, "%s/", dir);
        for (const char *c = o->name; *c && at < (int)sizeof path - 5; c++)
            path[at++] = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
                                 *c == '.' || *c == '_' || *c == '-'
                             ? *c
                             : '_';
        snprintf(path + at, sizeof path - (size_t)at, ".npy");
        if (npy_write_f32(path, o->rank, o->shape, o->data))
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

static int parse_args(int argc, char **argv, const char **model, feed *feeds, int *n_feeds, const char **dir,
                      const char **weights, cli_engine *e) {
    for (int i = 2; i < argc; i++) {
        bool ok = true;
        const char *v;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(run_help, stdout);
            return -1;
        } else if (!strcmp(argv[i], "-i") || !strcmp(argv[i], "--input")) {
            if (!cli_arg_str("onnx", argc, argv, &i, &v)) return CLI_USAGE;
            if (*n_feeds == MAX_FEEDS) return cli_usage_error("onnx", "more than %d inputs", MAX_FEEDS);
            const char *eq = strchr(v, '=');
            feeds[*n_feeds].name = eq ? strndup(v, (size_t)(eq - v)) : NULL;
            feeds[(*n_feeds)++].path = eq ? eq + 1 : v;
        } else if (!strcmp(argv[i], "-o") || !strcmp(argv[i], "--output-dir")) {
            if (!cli_arg_str("onnx", argc, argv, &i, dir)) return CLI_USAGE;
        } else if (!strcmp(argv[i], "--weights")) {
            if (!cli_arg_str("onnx", argc, argv, &i, weights)) return CLI_USAGE;
        } else if (cli_arg_engine("onnx", argc, argv, &i, e, &ok)) {
            if (!ok) return CLI_USAGE;
        } else if (argv[i][0] == '-') {
            return cli_usage_error("onnx", "unknown option '%s'", argv[i]);
        } else if (*model) {
            return cli_usage_error("onnx", "more than one MODEL");
        } else {
            *model = argv[i];
        }
    }
    if (!*model) return cli_usage_error("onnx", "missing MODEL");
    return CLI_OK;
}

static int run_model(kiln_onnx *m, feed *feeds, int n_feeds, const char *dir, const char *weights,
                     const cli_engine *e) {
    kiln_onnx_buffer bufs[MAX_FEEDS];
    kiln_onnx_session_params p = kiln_onnx_session_params_default();
    kiln_onnx_session *s = NULL;
    kiln_status st;
    int rc = CLI_OK;
    for (int i = 0; i < n_feeds && rc == CLI_OK; i++) {
        kiln_onnx_value_info in;
        if (!feeds[i].name && n_feeds == 1 && kiln_onnx_input_count(m) == 1 && !kiln_onnx_input(m, 0, &in))
            feeds[i].name = strdup(in.name);
        if (!feeds[i].name) return cli_usage_error("onnx", "--input %s: give it as NAME=FILE", feeds[i].path);
        rc = load_feed(&feeds[i], &bufs[i]);
    }
    if (rc) return rc;
    p.n_threads = (int32_t)e->n_threads;
    p.devices = cli_engine_devices(e);
    p.weights = weights;
    if ((st = kiln_onnx_session_create(m, &p, &s))) return cli_fail("onnx", st, NULL);
    if ((st = kiln_onnx_session_run(s, bufs, n_feeds))) {
        rc = cli_fail("onnx", st, NULL);
    } else {
        for (int32_t i = 0; i < kiln_onnx_output_count(m); i++) {
            kiln_onnx_buffer o;
            if ((st = kiln_onnx_session_output(s, i, NULL, 0, &o))) {
                rc = cli_fail("onnx", st, NULL);
                break;
            }
            print_output(&o, dir);
        }
    }
    kiln_onnx_session_destroy(s);
    return rc;
}

int cmd_onnx_run(int argc, char **argv) {
    feed feeds[MAX_FEEDS];
    int n_feeds = 0, rc;
    const char *model = NULL, *dir = NULL, *weights = NULL;
    cli_engine e;
    kiln_onnx *m = NULL;
    kiln_status st;
    memset(feeds, 0, sizeof feeds);
    memset(&e, 0, sizeof e);
    rc = parse_args(argc, argv, &model, feeds, &n_feeds, &dir, &weights, &e);
    if (rc < 0)
        rc = CLI_OK, model = NULL; /* --help was printed */
    else if (rc == CLI_OK && (rc = cli_engine_cpu_level("onnx", &e)) == CLI_OK &&
             (st = kiln_onnx_load(model, &m)))
        rc = cli_fail("onnx", st, NULL);
    if (rc == CLI_OK && model) rc = run_model(m, feeds, n_feeds, dir, weights, &e);
    kiln_onnx_destroy(m);
    for (int i = 0; i < n_feeds; i++) {
        free((void *)feeds[i].name);
        free(feeds[i].file);
        free(feeds[i].data);
    }
    return rc;
}
