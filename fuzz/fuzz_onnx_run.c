/*
 * fuzz_onnx_run.c - libFuzzer target for running ONNX models: the lowering (onnx_lower.c), the values
 * computed on the host from the file's constants and the bound shapes (onnx_host.c: shape arithmetic, masks,
 * index maps), the session's input checks and conversions, and, for small graphs, the compiled run.
 *
 * Input: an ONNX file whose last byte (when the file is longer than one byte) picks the shapes: each
 * dynamic dim of the fed inputs is bound to 1, 2 or 3 by it. A model that loads gets a session (one
 * thread); each fed input is a zero-filled buffer of its type and shape (skipped when a shape is over
 * 4,096 elements or an input type is not one Kiln feeds); the graph is lowered (kiln_onnx_session_graph_dump,
 * as lowered), then run, and every output read. Every failure must be a status with a message; any crash,
 * sanitizer report, leak or trap is a bug. Seeds: corpus/onnx_run (the reader's seeds, and small models
 * exported from PyTorch with int64 ids and masks). See fuzz/README.md.
 */
#include "kiln.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void sink_line(void *user, const char *line) {
    (void)user;
    (void)line;
}

static void must_fail_with_message(kiln_status s) {
    if (s != KILN_OK && !kiln_last_error()[0]) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kiln_onnx *m = NULL;
    kiln_onnx_session *s = NULL;
    kiln_onnx_session_params p = kiln_onnx_session_params_default();
    kiln_onnx_buffer in[KILN_MAX_ONNX_RANK];
    void *bufs[KILN_MAX_ONNX_RANK] = {NULL};
    uint8_t pick = size > 1 ? data[size - 1] : 0;
    int32_t n_in;
    kiln_status st;
    if (kiln_onnx_load_memory(data, size > 1 ? size - 1 : size, KILN_FUZZ_ONNX_DIR, &m) != KILN_OK) return 0;
    p.n_threads = 1;
    p.n_plans = 2;
    n_in = kiln_onnx_input_count(m);
    if (n_in > KILN_MAX_ONNX_RANK || (st = kiln_onnx_session_create(m, &p, &s)) != KILN_OK) {
        if (s) __builtin_trap();
        kiln_onnx_destroy(m);
        return 0;
    }
    for (int32_t i = 0; i < n_in; i++) {
        kiln_onnx_value_info v;
        uint64_t n = 1;
        if (kiln_onnx_input(m, i, &v) != KILN_OK) __builtin_trap();
        memset(&in[i], 0, sizeof in[i]);
        in[i].name = v.name;
        in[i].type = v.type;
        in[i].rank = v.rank;
        for (int32_t d = 0; d < v.rank; d++) {
            int64_t dim = v.dims[d].value >= 0 ? v.dims[d].value : 1 + (pick + d) % 3;
            in[i].shape[d] = dim;
            if (dim > 4096 || (n *= (uint64_t)(dim ? dim : 1)) > 4096) goto done;
        }
        in[i].size = (size_t)n * kiln_onnx_type_size(v.type);
        if (!(bufs[i] = calloc(1, in[i].size ? in[i].size : 1))) goto done;
        in[i].data = bufs[i];
    }
    must_fail_with_message(kiln_onnx_session_graph_dump(s, in, n_in, false, sink_line, NULL));
    st = kiln_onnx_session_run(s, in, n_in);
    must_fail_with_message(st);
    for (int32_t i = 0; st == KILN_OK && i < kiln_onnx_output_count(m); i++) {
        kiln_onnx_buffer out;
        if (kiln_onnx_session_output(s, i, NULL, 0, &out) != KILN_OK) __builtin_trap();
        if (out.size && !out.data) __builtin_trap();
    }
done:
    for (int32_t i = 0; i < n_in; i++)
        free(bufs[i]);
    kiln_onnx_session_destroy(s);
    kiln_onnx_destroy(m);
    return 0;
}
