/*
 * dequant_legacy.c - scalar reference dequantizers for the 32-element "legacy" types with a minimum or a
 * fifth bit: Q4_1, Q5_0, Q5_1. Each element is one multiply (and one add), rounded in float exactly as
 * ggml and the gguf Python package compute it, so results are bit-exact.
 *
 * Q4_1: x[j] = d * q[j] + m, q[j] = 4-bit, element j in the low nibble of qs[j], j + 16 in the high one.
 * Q5_0: x[j] = d * (q[j] - 16), q[j] = 5-bit: the nibble as in Q4_1 plus bit j of qh (a little-endian u32).
 * Q5_1: x[j] = d * q[j] + m, q[j] = 5-bit as in Q5_0.
 */
#include "tensor/types.h"

static uint32_t load_u32_le(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The 32 unsigned quants of a 16-byte nibble array plus an optional 32-bit high-bit mask. */
static void unpack_nibbles(const uint8_t *qs, uint32_t qh, int high_bit, int q[32]) {
    for (int j = 0; j < 16; j++) {
        q[j] = qs[j] & 0x0f;
        q[j + 16] = qs[j] >> 4;
        if (high_bit) {
            q[j] |= (int)((qh >> j) & 1u) << 4;
            q[j + 16] |= (int)((qh >> (j + 16)) & 1u) << 4;
        }
    }
}

void kiln__dequant_q4_1(const void *src, float *y, int64_t n) {
    const kiln_block_q4_1 *b = src;
    int q[32];
    for (int64_t i = 0; i < n / KILN_QK4_1; i++, y += KILN_QK4_1) {
        float d = kiln_fp16_to_fp32(b[i].d), m = kiln_fp16_to_fp32(b[i].m);
        unpack_nibbles(b[i].qs, 0, 0, q);
        for (int j = 0; j < KILN_QK4_1; j++) {
            float t = d * (float)q[j]; /* separate statements: never fused into an FMA */
            y[j] = t + m;
        }
    }
}

void kiln__dequant_q5_0(const void *src, float *y, int64_t n) {
    const kiln_block_q5_0 *b = src;
    int q[32];
    for (int64_t i = 0; i < n / KILN_QK5_0; i++, y += KILN_QK5_0) {
        float d = kiln_fp16_to_fp32(b[i].d);
        unpack_nibbles(b[i].qs, load_u32_le(b[i].qh), 1, q);
        for (int j = 0; j < KILN_QK5_0; j++) y[j] = d * (float)(q[j] - 16);
    }
}

void kiln__dequant_q5_1(const void *src, float *y, int64_t n) {
    const kiln_block_q5_1 *b = src;
    int q[32];
    for (int64_t i = 0; i < n / KILN_QK5_1; i++, y += KILN_QK5_1) {
        float d = kiln_fp16_to_fp32(b[i].d), m = kiln_fp16_to_fp32(b[i].m);
        unpack_nibbles(b[i].qs, load_u32_le(b[i].qh), 1, q);
        for (int j = 0; j < KILN_QK5_1; j++) {
            float t = d * (float)q[j];
            y[j] = t + m;
        }
    }
}
