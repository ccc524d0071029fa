/*
 * cmd_inspect.c - `kiln inspect`: print a GGUF file's header, metadata and tensor table, as text or JSON.
 * Long arrays are abbreviated in text mode (first elements and the length); JSON mode prints them whole.
 */
#include "common.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static const char inspect_help[] =
    "usage: kiln inspect [--json] FILE\n"
    "\n"
    "Print a GGUF file's version, alignment, metadata (key, type, value) and tensor table (name, type,\n"
    "shape, offset, bytes).\n"
    "\n"
    "      --json   machine-readable output, arrays printed in full\n"
    "  -h, --help   this text\n";

static const char *const type_names[KILN_GGUF_TYPE_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "arr", "u64", "i64", "f64"};

static void print_string(kiln_str s, bool json) {
    putchar('"');
    for (size_t i = 0; i < s.len; i++) {
        unsigned char c = (unsigned char)s.data[i];
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c == '\n') fputs("\\n", stdout);
        else if (c < 0x20 || c == 0x7f) printf(json ? "\\u%04x" : "\\x%02x", c);
        else putchar(c);
    }
    putchar('"');
}

/* Print element j of a numeric array (or the scalar at index i when data is NULL: handled by caller). */
static void print_number(kiln_gguf_type t, const void *p) {
    switch (t) {
    case KILN_GGUF_UINT8: printf("%u", *(const uint8_t *)p); break;
    case KILN_GGUF_INT8: printf("%d", *(const int8_t *)p); break;
    case KILN_GGUF_UINT16: { uint16_t v; memcpy(&v, p, 2); printf("%u", v); break; }
    case KILN_GGUF_INT16: { int16_t v; memcpy(&v, p, 2); printf("%d", v); break; }
    case KILN_GGUF_UINT32: { uint32_t v; memcpy(&v, p, 4); printf("%" PRIu32, v); break; }
    case KILN_GGUF_INT32: { int32_t v; memcpy(&v, p, 4); printf("%" PRId32, v); break; }
    case KILN_GGUF_FLOAT32: { float v; memcpy(&v, p, 4); printf("%.9g", (double)v); break; }
    case KILN_GGUF_BOOL: printf("%s", *(const uint8_t *)p ? "true" : "false"); break;
    case KILN_GGUF_UINT64: { uint64_t v; memcpy(&v, p, 8); printf("%" PRIu64, v); break; }
    case KILN_GGUF_INT64: { int64_t v; memcpy(&v, p, 8); printf("%" PRId64, v); break; }
    case KILN_GGUF_FLOAT64: { double v; memcpy(&v, p, 8); printf("%.17g", v); break; }
    default: printf("null"); break;
    }
}

static size_t elem_size(kiln_gguf_type t) {
    static const size_t sizes[KILN_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return (unsigned)t < KILN_GGUF_TYPE_COUNT ? sizes[t] : 0;
}

static void print_value(const kiln_gguf *g, int64_t i, bool json) {
    kiln_gguf_type t = kiln_gguf_kv_type(g, i);
    const char *key = kiln_gguf_kv_key(g, i);
    if (t == KILN_GGUF_STRING) {
        kiln_str s;
        kiln_gguf_get_str(g, key, &s);
        print_string(s, json);
    } else if (t == KILN_GGUF_ARRAY) {
        kiln_gguf_type et = kiln_gguf_arr_type(g, i);
        uint64_t n = kiln_gguf_arr_len(g, i), shown = json ? n : (n < 8 ? n : 8);
        const char *data = kiln_gguf_arr_data(g, i);
        putchar('[');
        for (uint64_t j = 0; j < shown; j++) {
            kiln_str s;
            if (j) fputs(", ", stdout);
            if (et == KILN_GGUF_STRING && kiln_gguf_arr_str(g, i, j, &s) == KILN_OK) print_string(s, json);
            else if (data) print_number(et, data + j * elem_size(et));
            else fputs("null", stdout);
        }
        if (shown < n) printf(", ... (%" PRIu64 " %s)", n, type_names[et < KILN_GGUF_TYPE_COUNT ? et : 0]);
        putchar(']');
    } else {
        /* Scalars are one-element numeric values: read through the typed getters. */
        int64_t iv;
        double fv;
        bool bv;
        if (t == KILN_GGUF_BOOL && kiln_gguf_get_bool(g, key, &bv) == KILN_OK) printf("%s", bv ? "true" : "false");
        else if ((t == KILN_GGUF_FLOAT32 || t == KILN_GGUF_FLOAT64) && kiln_gguf_get_float(g, key, &fv) == KILN_OK)
            printf(t == KILN_GGUF_FLOAT32 ? "%.9g" : "%.17g", fv);
        else if (kiln_gguf_get_int(g, key, &iv) == KILN_OK) printf("%" PRId64, iv);
        else if (t == KILN_GGUF_UINT64) fputs("(u64 beyond int64)", stdout);
        else fputs("null", stdout);
    }
}

static void print_text(const kiln_gguf *g, const char *path) {
    int64_t nkv = kiln_gguf_kv_count(g), nt = kiln_gguf_tensor_count(g);
    printf("file: %s\nversion: %u\nalignment: %zu\ndata offset: %zu\n\nmetadata (%" PRId64 " keys):\n", path,
           kiln_gguf_version(g), kiln_gguf_alignment(g), kiln_gguf_data_offset(g), nkv);
    for (int64_t i = 0; i < nkv; i++) {
        kiln_gguf_type t = kiln_gguf_kv_type(g, i);
        printf("  %-44s %-4s ", kiln_gguf_kv_key(g, i), type_names[t]);
        print_value(g, i, false);
        putchar('\n');
    }
    printf("\ntensors (%" PRId64 "):\n  %-36s %-6s %-28s %12s %12s\n", nt, "name", "type", "shape", "offset", "bytes");
    for (int64_t i = 0; i < nt; i++) {
        kiln_tensor_info ti;
        kiln_type_traits tr;
        char shape[96];
        int n = 0;
        if (kiln_gguf_tensor_info(g, i, &ti) || kiln_type_get_traits(ti.type, &tr)) continue;
        for (int d = 0; d < ti.n_dims; d++)
            n += snprintf(shape + n, sizeof shape - (size_t)n, "%s%" PRId64, d ? ", " : "[", ti.ne[d]);
        snprintf(shape + n, sizeof shape - (size_t)n, "]");
        printf("  %-36s %-6s %-28s %12" PRIu64 " %12zu\n", ti.name, tr.name, shape, ti.offset, ti.size);
    }
}

static void print_json(const kiln_gguf *g) {
    int64_t nkv = kiln_gguf_kv_count(g), nt = kiln_gguf_tensor_count(g);
    printf("{\"version\": %u, \"alignment\": %zu, \"data_offset\": %zu, \"metadata\": {", kiln_gguf_version(g),
           kiln_gguf_alignment(g), kiln_gguf_data_offset(g));
    for (int64_t i = 0; i < nkv; i++) {
        kiln_str key = {kiln_gguf_kv_key(g, i), strlen(kiln_gguf_kv_key(g, i))};
        printf(i ? ", " : "");
        print_string(key, true);
        printf(": {\"type\": \"%s\", \"value\": ", type_names[kiln_gguf_kv_type(g, i)]);
        print_value(g, i, true);
        putchar('}');
    }
    printf("}, \"tensors\": [");
    for (int64_t i = 0; i < nt; i++) {
        kiln_tensor_info ti;
        kiln_type_traits tr;
        if (kiln_gguf_tensor_info(g, i, &ti) || kiln_type_get_traits(ti.type, &tr)) continue;
        kiln_str name = {ti.name, strlen(ti.name)};
        printf(i ? ", {\"name\": " : "{\"name\": ");
        print_string(name, true);
        printf(", \"type\": \"%s\", \"shape\": [", tr.name);
        for (int d = 0; d < ti.n_dims; d++) printf(d ? ", %" PRId64 : "%" PRId64, ti.ne[d]);
        printf("], \"offset\": %" PRIu64 ", \"bytes\": %zu}", ti.offset, ti.size);
    }
    printf("]}\n");
}

int cmd_inspect(int argc, char **argv) {
    const char *path = NULL;
    bool json = false;
    kiln_gguf *g;
    kiln_status s;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(inspect_help, stdout);
            return CLI_OK;
        } else if (!strcmp(argv[i], "--json")) json = true;
        else if (argv[i][0] == '-') return cli_usage_error("inspect", "unknown option '%s'", argv[i]);
        else if (path) return cli_usage_error("inspect", "more than one FILE");
        else path = argv[i];
    }
    if (!path) return cli_usage_error("inspect", "missing FILE");
    if ((s = kiln_gguf_open(path, &g))) return cli_fail("inspect", s, "opening the file");
    if (json) print_json(g);
    else print_text(g, path);
    kiln_gguf_close(g);
    return CLI_OK;
}
