/*
 * dequant.c - the dequantization entry points (kiln__dequantize_row, kiln_dequantize) and the scalar
 * reference dequantizers of the simplest types; the other families live in dequant_legacy.c,
 * dequant_kquants.c and dequant_nonlinear.c. These are the definitions the fast kernels are tested
 * against, bit-exact with ggml and the gguf Python package (tests/test_quant_dequant.c).
 *
 * Q8_0: 32 elements per block, x[j] = d * qs[j].
 * Q4_0: 32 elements per block, x[j] = d * ((qs[j] & 0xf) - 8), x[j + 16] = d * ((qs[j] >> 4) - 8).
 */
#include "tensor/types.h"

#include "core/core.h"

#include <string.h>

static void dequant_q8_0(const kiln_block_q8_0 *b, float *y, int64_t n) {
    for (int64_t i = 0; i < n / KILN_QK8_0; i++) {
        float d = kiln_fp16_to_fp32(b[i].d);
        for (int j = 0; j < KILN_QK8_0; j++) y[i * KILN_QK8_0 + j] = d * (float)b[i].qs[j];
    }
}

static void dequant_q4_0(const kiln_block_q4_0 *b, float *y, int64_t n) {
    for (int64_t i = 0; i < n / KILN_QK4_0; i++) {
        float d = kiln_fp16_to_fp32(b[i].d);
        for (int j = 0; j < KILN_QK4_0 / 2; j++) {
            y[i * KILN_QK4_0 + j] = d * (float)((b[i].qs[j] & 0x0f) - 8);
            y[i * KILN_QK4_0 + j + KILN_QK4_0 / 2] = d * (float)((b[i].qs[j] >> 4) - 8);
        }
    }
}

void kiln__dequantize_row(kiln_type type, const void *src, float *dst, int64_t n) {
    switch (type) {
    case KILN_TYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case KILN_TYPE_F16: {
        const uint16_t *h = src;
        for (int64_t i = 0; i < n; i++) dst[i] = kiln_fp16_to_fp32(h[i]);
        break;
    }
    case KILN_TYPE_BF16: {
        const uint16_t *h = src;
        for (int64_t i = 0; i < n; i++) dst[i] = kiln_bf16_to_fp32(h[i]);
        break;
    }
    case KILN_TYPE_Q8_0: dequant_q8_0(src, dst, n); break;
    case KILN_TYPE_Q4_0: dequant_q4_0(src, dst, n); break;
    case KILN_TYPE_Q4_1: kiln__dequant_q4_1(src, dst, n); break;
    case KILN_TYPE_Q5_0: kiln__dequant_q5_0(src, dst, n); break;
    case KILN_TYPE_Q5_1: kiln__dequant_q5_1(src, dst, n); break;
    case KILN_TYPE_Q2_K: kiln__dequant_q2_k(src, dst, n); break;
    case KILN_TYPE_Q3_K: kiln__dequant_q3_k(src, dst, n); break;
    case KILN_TYPE_Q4_K: kiln__dequant_q4_k(src, dst, n); break;
    case KILN_TYPE_Q5_K: kiln__dequant_q5_k(src, dst, n); break;
    case KILN_TYPE_Q6_K: kiln__dequant_q6_k(src, dst, n); break;
    case KILN_TYPE_Q8_K: kiln__dequant_q8_k(src, dst, n); break;
    case KILN_TYPE_IQ4_NL: kiln__dequant_iq4_nl(src, dst, n); break;
    case KILN_TYPE_IQ4_XS: kiln__dequant_iq4_xs(src, dst, n); break;
    case KILN_TYPE_MXFP4: kiln__dequant_mxfp4(src, dst, n); break;
    default: break; /* callers check kiln__type_traits(type)->supported first */
    }
}

size_t kiln__type_alignment(kiln_type type) {
    switch (type) {
    case KILN_TYPE_Q8_K: return 4;
    case KILN_TYPE_F32: /* copied with memcpy */
    case KILN_TYPE_MXFP4: return 1;
    default: return 2; /* every other supported block starts with a 16-bit field */
    }
}

kiln_status kiln_dequantize(kiln_type type, const void *src, float *dst, int64_t n) {
    const kiln_type_traits *t = kiln__type_traits(type);
    size_t bytes;
    kiln_status s;
    if (!src || !dst) return kiln__error(KILN_E_INVALID_ARG, "kiln_dequantize: NULL buffer");
    if (!t->supported)
        return kiln__error(KILN_E_UNSUPPORTED, "dequantizing type %s (%d) is not supported", t->name, (int)type);
    s = kiln_type_row_bytes(type, n, &bytes);
    if (s) return s;
    if ((uintptr_t)src % kiln__type_alignment(type) != 0)
        return kiln__error(KILN_E_INVALID_ARG, "kiln_dequantize: %s data at %p is not %zu-byte aligned", t->name,
                           src, kiln__type_alignment(type));
    kiln__dequantize_row(type, src, dst, n);
    return KILN_OK;
}
