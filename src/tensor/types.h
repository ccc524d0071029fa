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

#define KILN_QK4_1 32
typedef struct {
    uint16_t d;                 /* scale */
    uint16_t m;                 /* minimum: x = d * q + m */
    uint8_t qs[KILN_QK4_1 / 2]; /* nibbles, as in q4_0 */
} kiln_block_q4_1;

#define KILN_QK5_0 32
typedef struct {
    uint16_t d;                 /* scale */
    uint8_t qh[4];              /* bit j (little-endian u32) is bit 4 of element j */
    uint8_t qs[KILN_QK5_0 / 2]; /* low 4 bits, as in q4_0 */
} kiln_block_q5_0;

#define KILN_QK5_1 32
typedef struct {
    uint16_t d, m; /* scale and minimum */
    uint8_t qh[4];
    uint8_t qs[KILN_QK5_1 / 2];
} kiln_block_q5_1;

/* K-quants: super-blocks of 256 elements split into sub-blocks of 16 or 32 with quantized scales. */
#define KILN_QK_K 256
#define KILN_K_SCALE_SIZE 12
typedef struct {
    uint8_t scales[KILN_QK_K / 16]; /* per 16 elements: low nibble scale, high nibble min */
    uint8_t qs[KILN_QK_K / 4];      /* 2-bit quants */
    uint16_t d;                     /* super-block scale for the scales */
    uint16_t dmin;                  /* super-block scale for the mins */
} kiln_block_q2_k;

typedef struct {
    uint8_t hmask[KILN_QK_K / 8];       /* high bit of each 3-bit quant (set means +0, clear -4) */
    uint8_t qs[KILN_QK_K / 4];          /* low 2 bits */
    uint8_t scales[KILN_K_SCALE_SIZE];  /* sixteen 6-bit scales, offset by 32 */
    uint16_t d;                         /* super-block scale */
} kiln_block_q3_k;

typedef struct {
    uint16_t d, dmin;                   /* super-block scales for the scales and the mins */
    uint8_t scales[KILN_K_SCALE_SIZE];  /* eight 6-bit scales and eight 6-bit mins */
    uint8_t qs[KILN_QK_K / 2];          /* 4-bit quants */
} kiln_block_q4_k;

typedef struct {
    uint16_t d, dmin;
    uint8_t scales[KILN_K_SCALE_SIZE];
    uint8_t qh[KILN_QK_K / 8]; /* bit 4 of each quant */
    uint8_t qs[KILN_QK_K / 2]; /* low 4 bits */
} kiln_block_q5_k;

typedef struct {
    uint8_t ql[KILN_QK_K / 2];      /* low 4 bits */
    uint8_t qh[KILN_QK_K / 4];      /* high 2 bits */
    int8_t scales[KILN_QK_K / 16];  /* 8-bit scales */
    uint16_t d;                     /* super-block scale */
} kiln_block_q6_k;

typedef struct {
    float d;                       /* scale (IEEE single) */
    int8_t qs[KILN_QK_K];          /* quants */
    int16_t bsums[KILN_QK_K / 16]; /* sums of each group of 16 quants */
} kiln_block_q8_k;

/* Non-linear 4-bit types: the nibble indexes a fixed table of int8 values. */
#define KILN_QK4_NL 32
typedef struct {
    uint16_t d;
    uint8_t qs[KILN_QK4_NL / 2]; /* nibbles, as in q4_0 */
} kiln_block_iq4_nl;

typedef struct {
    uint16_t d;
    uint16_t scales_h;             /* bits 4..5 of the eight 6-bit scales, two bits each */
    uint8_t scales_l[KILN_QK_K / 64]; /* bits 0..3, two per byte */
    uint8_t qs[KILN_QK_K / 2];     /* per 32 elements: 16 bytes of nibbles, as in iq4_nl */
} kiln_block_iq4_xs;

#define KILN_QK_MXFP4 32
typedef struct {
    uint8_t e;                      /* E8M0 shared exponent */
    uint8_t qs[KILN_QK_MXFP4 / 2]; /* E2M1 codes, nibbles as in q4_0 */
} kiln_block_mxfp4;

_Static_assert(sizeof(kiln_block_q4_0) == 18, "q4_0 block layout");
_Static_assert(sizeof(kiln_block_q8_0) == 34, "q8_0 block layout");
_Static_assert(sizeof(kiln_block_q4_1) == 20, "q4_1 block layout");
_Static_assert(sizeof(kiln_block_q5_0) == 22, "q5_0 block layout");
_Static_assert(sizeof(kiln_block_q5_1) == 24, "q5_1 block layout");
_Static_assert(sizeof(kiln_block_q2_k) == 84, "q2_k block layout");
_Static_assert(sizeof(kiln_block_q3_k) == 110, "q3_k block layout");
_Static_assert(sizeof(kiln_block_q4_k) == 144, "q4_k block layout");
_Static_assert(sizeof(kiln_block_q5_k) == 176, "q5_k block layout");
_Static_assert(sizeof(kiln_block_q6_k) == 210, "q6_k block layout");
_Static_assert(sizeof(kiln_block_q8_k) == 292, "q8_k block layout");
_Static_assert(sizeof(kiln_block_iq4_nl) == 18, "iq4_nl block layout");
_Static_assert(sizeof(kiln_block_iq4_xs) == 136, "iq4_xs block layout");
_Static_assert(sizeof(kiln_block_mxfp4) == 17, "mxfp4 block layout");

/* The value tables of the non-linear types (ggml's kvalues_iq4nl, and E2M1 doubled for MXFP4). */
extern const int8_t kiln__iq4nl_values[16];
extern const int8_t kiln__mxfp4_values[16];

/* The 6-bit scale j (0..7) and min of a Q4_K/Q5_K scales array. */
static inline void kiln__kquant_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Per-family reference dequantizers (dequant_legacy.c, dequant_kquants.c, dequant_nonlinear.c); n is a
 * multiple of the block size; src must be aligned for the block's fields. */
void kiln__dequant_q4_1(const void *src, float *y, int64_t n);
void kiln__dequant_q5_0(const void *src, float *y, int64_t n);
void kiln__dequant_q5_1(const void *src, float *y, int64_t n);
void kiln__dequant_q2_k(const void *src, float *y, int64_t n);
void kiln__dequant_q3_k(const void *src, float *y, int64_t n);
void kiln__dequant_q4_k(const void *src, float *y, int64_t n);
void kiln__dequant_q5_k(const void *src, float *y, int64_t n);
void kiln__dequant_q6_k(const void *src, float *y, int64_t n);
void kiln__dequant_q8_k(const void *src, float *y, int64_t n);
void kiln__dequant_iq4_nl(const void *src, float *y, int64_t n);
void kiln__dequant_iq4_xs(const void *src, float *y, int64_t n);
void kiln__dequant_mxfp4(const void *src, float *y, int64_t n);

/* The alignment a supported type's data needs for the block structs' fields (1, 2 or 4 bytes). */
size_t kiln__type_alignment(kiln_type type);

/* Dequantize one row of n elements; n is a multiple of the type's block size. Scalar reference. */
void kiln__dequantize_row(kiln_type type, const void *src, float *dst, int64_t n);

#endif
