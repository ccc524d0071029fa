/*
 * types.h - internal access to the tensor type table (see types.c) and to the scalar reference
 * conversions and dequantizers (see dequant.c, fp16.h).
 */
#ifndef KILN_TENSOR_TYPES_H
#define KILN_TENSOR_TYPES_H

#include "kiln.h"

/* Traits of a type; an "unknown" entry (known = false, block_bytes = 0) for values out of the table. */
const kiln_type_traits *kiln__type_traits(kiln_type type);
const char *kiln__type_name(kiln_type type);

/* Bytes of a dense tensor of shape ne (4 dims, unused ones 1), overflow-checked. */
kiln_status kiln__tensor_bytes(kiln_type type, const int64_t ne[4], size_t *out);

/* Block layouts of the GGUF specification. Scales are IEEE half floats stored as uint16_t. */
#define KILN_QK4_0 32
typedef struct {
    uint16_t d;                  /* scale */
    uint8_t qs[KILN_QK4_0 / 2];  /* element j in low nibble of qs[j], element j+16 in high nibble */
} kiln_block_q4_0;

#define KILN_QK8_0 32
typedef struct {
    uint16_t d;            /* scale */
    int8_t qs[KILN_QK8_0]; /* quants */
} kiln_block_q8_0;

_Static_assert(sizeof(kiln_block_q4_0) == 18, "q4_0 block layout");
_Static_assert(sizeof(kiln_block_q8_0) == 34, "q8_0 block layout");

/* Dequantize one row of n elements; n is a multiple of the type's block size. Scalar reference. */
void kiln__dequantize_row(kiln_type type, const void *src, float *dst, int64_t n);

#endif
