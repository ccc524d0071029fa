/*
 * dequant_nonlinear.c - scalar reference dequantizers for the types whose 4-bit codes index a fixed value
 * table rather than an evenly spaced grid: IQ4_NL and IQ4_XS (a learned non-linear table) and MXFP4 (the
 * OCP microscaling FP4 format: E2M1 elements sharing one E8M0 exponent).
 *
 * IQ4_NL: 32 elements, x[j] = d * T[q[j]], nibbles as in Q4_0.
 * IQ4_XS: 256 elements in 8 groups of 32, x = (d * (ls - 32)) * T[q]; ls is a 6-bit group scale (4 low
 *         bits in scales_l, 2 high bits in scales_h); each group's 16 bytes of nibbles are as in IQ4_NL.
 * MXFP4:  32 elements, x[j] = e8m0_half(e) * V[q[j]] where V holds the E2M1 values doubled and
 *         e8m0_half(e) = 2^(e - 128) (so the product is 2^(e-127) * E2M1 value), nibbles as in Q4_0.
 */
#include "tensor/types.h"

#include <string.h>

const int8_t kiln__iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                       1,    13,   25,  38,  53,  69,  89,  113};
const int8_t kiln__mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* 2^(e - 128) as a float, exactly (subnormal for e < 2), the way ggml computes it. */
static float e8m0_half(uint8_t e) {
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* 32 elements from 16 bytes of nibbles through a value table, times d. */
static void table_block(float d, const uint8_t *qs, const int8_t *table, float *y) {
    for (int j = 0; j < 16; j++) {
        y[j] = d * (float)table[qs[j] & 0xf];
        y[j + 16] = d * (float)table[qs[j] >> 4];
    }
}

void kiln__dequant_iq4_nl(const void *src, float *y, int64_t n) {
    const kiln_block_iq4_nl *b = src;
    for (int64_t i = 0; i < n / KILN_QK4_NL; i++, y += KILN_QK4_NL)
        table_block(kiln_fp16_to_fp32(b[i].d), b[i].qs, kiln__iq4nl_values, y);
}

void kiln__dequant_iq4_xs(const void *src, float *y, int64_t n) {
    const kiln_block_iq4_xs *b = src;
    for (int64_t i = 0; i < n / KILN_QK_K; i++, y += KILN_QK_K) {
        float d = kiln_fp16_to_fp32(b[i].d);
        for (int g = 0; g < KILN_QK_K / 32; g++) {
            int lo = (b[i].scales_l[g / 2] >> (4 * (g % 2))) & 0xf;
            int hi = (b[i].scales_h >> (2 * g)) & 3;
            table_block(d * (float)((lo | hi << 4) - 32), b[i].qs + 16 * g, kiln__iq4nl_values, y + 32 * g);
        }
    }
}

void kiln__dequant_mxfp4(const void *src, float *y, int64_t n) {
    const kiln_block_mxfp4 *b = src;
    for (int64_t i = 0; i < n / KILN_QK_MXFP4; i++, y += KILN_QK_MXFP4)
        table_block(e8m0_half(b[i].e), b[i].qs, kiln__mxfp4_values, y);
}
