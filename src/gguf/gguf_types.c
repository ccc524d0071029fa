/*
 * gguf_types.c - the table of GGUF metadata value types: the size of each scalar and its name as the
 * specification spells it, for validation and for error messages.
 */
#include "gguf/gguf_internal.h"

#include "core/core.h"

static const struct {
    const char *name;
    size_t size; /* 0: variable length (STRING, ARRAY) */
} value_types[KILN_GGUF_TYPE_COUNT] = {
    [KILN_GGUF_UINT8] = {"UINT8", 1},     [KILN_GGUF_INT8] = {"INT8", 1},
    [KILN_GGUF_UINT16] = {"UINT16", 2},   [KILN_GGUF_INT16] = {"INT16", 2},
    [KILN_GGUF_UINT32] = {"UINT32", 4},   [KILN_GGUF_INT32] = {"INT32", 4},
    [KILN_GGUF_FLOAT32] = {"FLOAT32", 4}, [KILN_GGUF_BOOL] = {"BOOL", 1},
    [KILN_GGUF_STRING] = {"STRING", 0},   [KILN_GGUF_ARRAY] = {"ARRAY", 0},
    [KILN_GGUF_UINT64] = {"UINT64", 8},   [KILN_GGUF_INT64] = {"INT64", 8},
    [KILN_GGUF_FLOAT64] = {"FLOAT64", 8},
};

size_t kiln__gguf_type_size(uint32_t t) {
    return t < KILN_GGUF_TYPE_COUNT ? value_types[t].size : 0;
}

const char *kiln__gguf_type_name(uint32_t t) {
    return t < KILN_GGUF_TYPE_COUNT ? value_types[t].name : "INVALID";
}

bool kiln__gguf_type_is_scalar(uint32_t t) {
    return kiln__gguf_type_size(t) != 0;
}
