/*
 * fuzz_onnx.c - libFuzzer target for the ONNX reader (protobuf decoding, external data, validation, shape
 * inference and folding).
 *
 * Each input is loaded with kiln_onnx_load_memory, external data allowed from fuzz/onnx_ext/ (one 256-byte
 * weights.bin; the seeds refer to it, so offsets, lengths and locations get mutated). A rejected input must
 * leave *out NULL and a message. An accepted model is walked through every getter: each input and output
 * (rank within KILN_MAX_ONNX_RANK), each node with every attribute (the first and last byte of every list
 * and tensor touched), each node output's inferred value, and each initializer's data (first and last
 * byte, aligned for its type). Any crash, sanitizer report, leak or trap is a bug. See fuzz/README.md.
 */
#include "kiln.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static volatile uint8_t sink;

static void touch(const void *p, uint64_t n) {
    if (n == 0) return;
    if (!p) __builtin_trap();
    sink ^= ((const volatile uint8_t *)p)[0];
    sink ^= ((const volatile uint8_t *)p)[n - 1];
}

static void walk_value(const kiln_onnx_value_info *v) {
    if (!v->name || v->rank > KILN_MAX_ONNX_RANK || v->rank < -1) __builtin_trap();
    for (int32_t d = 0; d < v->rank; d++) {
        sink ^= (uint8_t)v->dims[d].value;
        if (v->dims[d].param) sink ^= (uint8_t)v->dims[d].param[0];
    }
    sink ^= (uint8_t)kiln_onnx_type_name(v->type)[0];
}

static void walk_tensor(const kiln_onnx_tensor_info *t) {
    if (!t->name || t->rank < 0 || t->rank > KILN_MAX_ONNX_RANK) __builtin_trap();
    for (int32_t d = 0; d < t->rank; d++)
        sink ^= (uint8_t)t->dims[d];
    touch(t->data, t->size);
}

static void walk_node(const kiln_onnx *m, int32_t i) {
    kiln_onnx_node_info n;
    kiln_onnx_value_info v;
    if (kiln_onnx_node(m, i, &n) != KILN_OK) __builtin_trap();
    for (int32_t k = 0; k < n.n_inputs; k++)
        sink ^= (uint8_t)n.inputs[k][0];
    for (int32_t k = 0; k < n.n_outputs; k++) {
        if (!n.outputs[k][0]) continue;
        if (kiln_onnx_value(m, n.outputs[k], &v) != KILN_OK) __builtin_trap();
        walk_value(&v);
    }
    for (int32_t j = 0; j < n.n_attrs; j++) {
        kiln_onnx_attr_info a;
        if (kiln_onnx_node_attr(m, i, j, &a) != KILN_OK) __builtin_trap();
        if (a.type == KILN_ONNX_ATTR_INTS) touch(a.ints, (uint64_t)a.n * 8);
        if (a.type == KILN_ONNX_ATTR_FLOATS) touch(a.floats, (uint64_t)a.n * 4);
        if (a.type == KILN_ONNX_ATTR_STRING) touch(a.s.data, a.s.len);
        if (a.type == KILN_ONNX_ATTR_TENSOR) walk_tensor(&a.t);
        for (int64_t k = 0; a.type == KILN_ONNX_ATTR_STRINGS && k < a.n; k++)
            touch(a.strings[k].data, a.strings[k].len);
    }
    if (kiln_onnx_node_attr(m, i, n.n_attrs, &(kiln_onnx_attr_info){0}) == KILN_OK) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kiln_onnx *m = (kiln_onnx *)(uintptr_t)1;
    kiln_onnx_value_info v;
    kiln_onnx_tensor_info t;
    if (kiln_onnx_load_memory(data, size, KILN_FUZZ_ONNX_DIR, &m) != KILN_OK) {
        if (m || !kiln_last_error()[0]) __builtin_trap();
        return 0;
    }
    if (kiln_onnx_opset(m) < 13 || kiln_onnx_opset(m) > 21) __builtin_trap();
    for (int32_t i = 0; i < kiln_onnx_input_count(m); i++) {
        if (kiln_onnx_input(m, i, &v) != KILN_OK) __builtin_trap();
        walk_value(&v);
    }
    for (int32_t i = 0; i < kiln_onnx_output_count(m); i++) {
        if (kiln_onnx_output(m, i, &v) != KILN_OK) __builtin_trap();
        walk_value(&v);
    }
    for (int32_t i = 0; i < kiln_onnx_node_count(m); i++)
        walk_node(m, i);
    for (int32_t i = 0; i < kiln_onnx_initializer_count(m); i++) {
        if (kiln_onnx_initializer(m, i, &t) != KILN_OK) __builtin_trap();
        walk_tensor(&t);
    }
    if (kiln_onnx_input(m, kiln_onnx_input_count(m), &v) == KILN_OK) __builtin_trap();
    kiln_onnx_destroy(m);
    return 0;
}
