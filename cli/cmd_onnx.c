/*
 * cmd_onnx.c - `kiln onnx inspect`: load and validate an ONNX model and print its opset, its inputs and
 * outputs with element types and shapes (symbolic dimensions by name), how many nodes of each operator it
 * has and the bytes of its initializers, as text or JSON; or (--before/--after) the Kiln graph it lowers to,
 * before or after the passes. `kiln onnx run` is cmd_onnx_run.c.
 */
#include "common.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char onnx_help[] =
    "usage: kiln onnx inspect [--json] FILE\n"
    "       kiln onnx inspect --before|--after [--dims NAME=N,...] [-t N] FILE\n"
    "       kiln onnx run MODEL --input NAME=FILE.npy ... [--output-dir DIR]   (kiln onnx run --help)\n"
    "       kiln onnx bench MODEL [--dims NAME=N,...] [-r N]                  (kiln onnx bench --help)\n"
    "\n"
    "Load an ONNX model (opsets 13 to 21, the operators in docs/onnx.md), validate it and infer its shapes,\n"
    "then print its IR version, opset and producer, its inputs and outputs (element type and shape; a\n"
    "symbolic dimension prints by name, an unknown one as '?'), its node count by operator type and the\n"
    "count and bytes of its initializers (those in external data files counted apart). A model Kiln cannot\n"
    "load is reported with the reason (the field, node, operator type and opset) and exit status 1.\n"
    "\n"
    "With --before or --after, print instead the Kiln graph the model lowers to (one line per tensor, as\n"
    "`kiln graph` does): as lowered, or after the pass pipeline (constants folded, fusions, views). "
    "Symbolic\n"
    "dimensions take the values --dims gives them by name (e.g. --dims batch=8,seq=128), 1 otherwise.\n"
    "\n"
    "      --json            machine-readable output (an unknown dimension is null, an unknown shape null)\n"
    "      --before, --after the lowered graph, before or after the passes\n"
    "      --dims LIST       NAME=N pairs, comma-separated, for the symbolic dimensions\n"
    "  -h, --help            this text\n";

static void json_string(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

static void print_shape(const kiln_onnx_value_info *v, bool json) {
    if (v->rank < 0) {
        fputs(json ? "null" : "?", stdout);
        return;
    }
    putchar('[');
    for (int32_t d = 0; d < v->rank; d++) {
        if (d) fputs(", ", stdout);
        if (v->dims[d].value >= 0)
            printf("%" PRId64, v->dims[d].value);
        else if (v->dims[d].param && json)
            json_string(v->dims[d].param);
        else if (v->dims[d].param)
            fputs(v->dims[d].param, stdout);
        else
            fputs(json ? "null" : "?", stdout);
    }
    putchar(']');
}

typedef kiln_status (*value_getter)(const kiln_onnx *, int32_t, kiln_onnx_value_info *);

static void print_values(const kiln_onnx *m, const char *title, int32_t n, value_getter get, bool json) {
    if (json)
        printf(", \"%s\": [", title);
    else
        printf("%s (%d):\n", title, n);
    for (int32_t i = 0; i < n; i++) {
        kiln_onnx_value_info v;
        if (get(m, i, &v)) continue;
        if (json) {
            printf(i ? ", {\"name\": " : "{\"name\": ");
            json_string(v.name);
            printf(", \"type\": \"%s\", \"shape\": ", kiln_onnx_type_name(v.type));
            print_shape(&v, true);
            putchar('}');
        } else {
            printf("  %-32s %-8s ", v.name, kiln_onnx_type_name(v.type));
            print_shape(&v, false);
            putchar('\n');
        }
    }
    if (json) putchar(']');
}

/* Node counts by operator type, in order of first appearance. */
static void print_ops(const kiln_onnx *m, bool json) {
    int32_t n = kiln_onnx_node_count(m), shown = 0;
    if (json)
        printf(", \"node_count\": %d, \"ops\": {", n);
    else
        printf("nodes (%d):\n", n);
    for (int32_t i = 0; i < n; i++) {
        kiln_onnx_node_info node, prev;
        int32_t count = 0;
        bool seen = false;
        kiln_onnx_node(m, i, &node);
        for (int32_t j = 0; j < i && !seen; j++)
            seen = !kiln_onnx_node(m, j, &prev) && !strcmp(prev.op_type, node.op_type);
        if (seen) continue;
        for (int32_t j = i; j < n; j++)
            count += !kiln_onnx_node(m, j, &prev) && !strcmp(prev.op_type, node.op_type);
        if (json) {
            printf(shown++ ? ", " : "");
            json_string(node.op_type);
            printf(": %d", count);
        } else {
            printf("  %-32s %d\n", node.op_type, count);
        }
    }
    if (json) putchar('}');
}

static void print_model(const kiln_onnx *m, const char *path, bool json) {
    int32_t n_init = kiln_onnx_initializer_count(m), n_ext = 0;
    uint64_t bytes = 0, ext_bytes = 0;
    for (int32_t i = 0; i < n_init; i++) {
        kiln_onnx_tensor_info t;
        if (kiln_onnx_initializer(m, i, &t)) continue;
        bytes += t.size;
        if (t.external) n_ext++, ext_bytes += t.size;
    }
    if (json) {
        printf("{\"ir_version\": %" PRId64 ", \"opset\": %" PRId64 ", \"producer\": ",
               kiln_onnx_ir_version(m), kiln_onnx_opset(m));
        json_string(kiln_onnx_producer(m));
    } else {
        printf("%s: ONNX IR version %" PRId64 ", opset %" PRId64 ", producer '%s'\n\n", path,
               kiln_onnx_ir_version(m), kiln_onnx_opset(m), kiln_onnx_producer(m));
    }
    print_values(m, "inputs", kiln_onnx_input_count(m), kiln_onnx_input, json);
    if (!json) putchar('\n');
    print_values(m, "outputs", kiln_onnx_output_count(m), kiln_onnx_output, json);
    if (!json) putchar('\n');
    print_ops(m, json);
    if (json)
        printf(", \"initializers\": {\"count\": %d, \"bytes\": %" PRIu64 ", \"external_count\": %d, "
               "\"external_bytes\": %" PRIu64 "}}\n",
               n_init, bytes, n_ext, ext_bytes);
    else
        printf("\ninitializers: %d, %" PRIu64 " bytes (%d in external data files, %" PRIu64 " bytes)\n",
               n_init, bytes, n_ext, ext_bytes);
}

static void print_line(void *user, const char *line) {
    (void)user;
    puts(line);
}

/* The value --dims gives the symbolic dimension `name` (1 when it gives none); -1 on a malformed list. */
static int64_t dim_value(const char *dims, const char *name) {
    size_t n = strlen(name);
    for (const char *p = dims; p && *p;) {
        const char *end = strchr(p, ','), *eq = strchr(p, '=');
        if (!end) end = p + strlen(p);
        if (!eq || eq > end) return -1;
        if ((size_t)(eq - p) == n && !strncmp(p, name, n)) {
            char *stop;
            long long v = strtoll(eq + 1, &stop, 10);
            return stop == end && v > 0 && v <= INT32_MAX ? v : -1;
        }
        p = *end ? end + 1 : end;
    }
    return 1;
}

int cli_onnx_inputs(kiln_onnx *m, const char *dims, kiln_onnx_buffer **out) {
    int32_t n = kiln_onnx_input_count(m);
    kiln_onnx_buffer *in = calloc((size_t)(n > 0 ? n : 1), sizeof *in);
    kiln_status st = in ? KILN_OK : KILN_E_NOMEM;
    *out = NULL;
    for (int32_t i = 0; !st && i < n; i++) {
        kiln_onnx_value_info v;
        if ((st = kiln_onnx_input(m, i, &v))) break;
        if (v.rank < 0 || v.rank > KILN_MAX_ONNX_RANK) {
            free(in);
            return cli_usage_error("onnx", "input '%s' has no known rank", v.name);
        }
        in[i].name = v.name;
        in[i].type = v.type;
        in[i].rank = v.rank;
        for (int32_t d = 0; d < v.rank; d++) {
            in[i].shape[d] = v.dims[d].value >= 0 ? v.dims[d].value
                             : v.dims[d].param    ? dim_value(dims, v.dims[d].param)
                                                  : 1;
            if (in[i].shape[d] < 0) {
                free(in);
                return cli_usage_error(
                    "onnx", "--dims '%s': give NAME=N pairs (N from 1 to 2^31-1), comma-separated", dims);
            }
        }
    }
    if (st) {
        free(in);
        return cli_fail("onnx", st, NULL);
    }
    *out = in;
    return CLI_OK;
}

/* --before / --after: the session's graph for the inputs' shapes with --dims bound. */
static int dump_graph(kiln_onnx *m, bool after, const char *dims, int threads) {
    kiln_onnx_buffer *in = NULL;
    kiln_onnx_session_params sp = kiln_onnx_session_params_default();
    kiln_onnx_session *s = NULL;
    kiln_status st;
    int rc = cli_onnx_inputs(m, dims, &in);
    if (rc) return rc;
    sp.n_threads = threads;
    st = kiln_onnx_session_create(m, &sp, &s);
    if (!st) st = kiln_onnx_session_graph_dump(s, in, kiln_onnx_input_count(m), after, print_line, NULL);
    kiln_onnx_session_destroy(s);
    free(in);
    return st ? cli_fail("onnx", st, NULL) : CLI_OK;
}

int cmd_onnx(int argc, char **argv) {
    const char *path = NULL, *dims = NULL;
    bool json = false, before = false, after = false;
    long threads = 0;
    kiln_onnx *m;
    kiln_status s;
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        fputs(onnx_help, argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_USAGE : CLI_OK;
    }
    if (!strcmp(argv[1], "run")) return cmd_onnx_run(argc, argv);
    if (!strcmp(argv[1], "bench")) return cmd_onnx_bench(argc, argv);
    if (strcmp(argv[1], "inspect") != 0) return cli_usage_error("onnx", "unknown subcommand '%s'", argv[1]);
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(onnx_help, stdout);
            return CLI_OK;
        } else if (!strcmp(argv[i], "--json"))
            json = true;
        else if (!strcmp(argv[i], "--before"))
            before = true;
        else if (!strcmp(argv[i], "--after"))
            after = true;
        else if (!strcmp(argv[i], "--dims")) {
            if (++i >= argc) return cli_usage_error("onnx", "--dims needs a value");
            dims = argv[i];
        } else if (!strcmp(argv[i], "-t") || !strcmp(argv[i], "--threads")) {
            char *stop;
            if (++i >= argc) return cli_usage_error("onnx", "%s needs a value", argv[i - 1]);
            threads = strtol(argv[i], &stop, 10);
            if (*stop || threads < 0 || threads > 1024)
                return cli_usage_error("onnx", "-t '%s' is not 0..1024", argv[i]);
        } else if (argv[i][0] == '-')
            return cli_usage_error("onnx", "unknown option '%s'", argv[i]);
        else if (path)
            return cli_usage_error("onnx", "more than one FILE");
        else
            path = argv[i];
    }
    if (!path) return cli_usage_error("onnx", "missing FILE");
    if (before && after) return cli_usage_error("onnx", "give --before or --after, not both");
    if ((json && (before || after)) || (dims && !before && !after))
        return cli_usage_error("onnx", "--json prints the model; --dims goes with --before or --after");
    if ((s = kiln_onnx_load(path, &m))) return cli_fail("onnx", s, NULL);
    if (before || after) {
        int rc = dump_graph(m, after, dims, (int)threads);
        kiln_onnx_destroy(m);
        return rc;
    }
    print_model(m, path, json);
    kiln_onnx_destroy(m);
    return CLI_OK;
}
