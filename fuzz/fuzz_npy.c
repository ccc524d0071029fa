/*
 * fuzz_npy.c - libFuzzer target for the .npy reader of `kiln onnx run` (cli/npy.c): the magic, versions,
 * header length, the header's dict literal (keys, element types, Fortran order, the shape tuple) and the
 * data size against the shape.
 *
 * Each input is parsed as a whole file. A refusal must come with a message; an accepted array must have a
 * type it reads, a rank within KILN_MAX_ONNX_RANK, and data that lies inside the input with exactly the
 * bytes its shape needs (the first and last bytes are touched). Any crash, sanitizer report or trap is a
 * bug. See fuzz/README.md.
 */
#include "npy.h"

#include <stddef.h>
#include <stdint.h>

static volatile uint8_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    npy_array a;
    char err[256];
    uint64_t n = 1;
    err[0] = '\0';
    if (npy_parse(data, size, &a, err, sizeof err)) {
        if (!err[0]) __builtin_trap();
        return 0;
    }
    if (a.type != KILN_ONNX_FLOAT && a.type != KILN_ONNX_INT64) __builtin_trap();
    if (a.rank < 0 || a.rank > KILN_MAX_ONNX_RANK) __builtin_trap();
    for (int32_t i = 0; i < a.rank; i++) {
        if (a.shape[i] < 0) __builtin_trap();
        n *= (uint64_t)a.shape[i];
    }
    if (a.size != n * (a.type == KILN_ONNX_FLOAT ? 4u : 8u)) __builtin_trap();
    if (a.data < data || a.data + a.size != data + size) __builtin_trap();
    if (a.size) sink ^= a.data[0] ^ a.data[a.size - 1];
    return 0;
}
