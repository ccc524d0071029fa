/*
 * quantize.c - kiln_quantize_row, the public float -> type entry point: validates the arguments and the
 * input (every value finite), then dispatches to the per-family reference quantizers (quantize.h).
 */
#include "tensor/quantize.h"

#include "core/core.h"

#include <math.h>
#include <string.h>

typedef void (*quantize_fn)(const float *x, void *dst, int64_t n);

static quantize_fn quantizer(kiln_type type) {
    switch (type) {
    case KILN_TYPE_Q4_0: return kiln__quantize_q4_0;
    case KILN_TYPE_Q4_1: return kiln__quantize_q4_1;
    case KILN_TYPE_Q5_0: return kiln__quantize_q5_0;
    case KILN_TYPE_Q5_1: return kiln__quantize_q5_1;
    case KILN_TYPE_Q8_0: return kiln__quantize_q8_0;
    case KILN_TYPE_MXFP4: return kiln__quantize_mxfp4;
    case KILN_TYPE_Q2_K: return kiln__quantize_q2_k;
    case KILN_TYPE_Q3_K: return kiln__quantize_q3_k;
    case KILN_TYPE_Q4_K: return kiln__quantize_q4_k;
    case KILN_TYPE_Q5_K: return kiln__quantize_q5_k;
    case KILN_TYPE_Q6_K: return kiln__quantize_q6_k;
    case KILN_TYPE_Q8_K: return kiln__quantize_q8_k;
    case KILN_TYPE_IQ4_NL: return kiln__quantize_iq4_nl;
    case KILN_TYPE_IQ4_XS: return kiln__quantize_iq4_xs;
    default: return NULL;
    }
}

bool kiln_quantize_supported(kiln_type type) {
    return type == KILN_TYPE_F32 || type == KILN_TYPE_F16 || type == KILN_TYPE_BF16 || quantizer(type) != NULL;
}

kiln_status kiln_quantize_row(kiln_type type, const float *src, void *dst, int64_t n) {
    const kiln_type_traits *t = kiln__type_traits(type);
    size_t bytes;
    kiln_status s;
    if (!src || !dst) return kiln__error(KILN_E_INVALID_ARG, "kiln_quantize_row: NULL buffer");
    if (!kiln_quantize_supported(type))
        return kiln__error(KILN_E_UNSUPPORTED, "quantizing to type %s (%d) is not supported", t->name, (int)type);
    s = kiln_type_row_bytes(type, n, &bytes);
    if (s) return s;
    if ((uintptr_t)dst % kiln__type_alignment(type) != 0)
        return kiln__error(KILN_E_INVALID_ARG, "kiln_quantize_row: %s destination is not %zu-byte aligned", t->name,
                           kiln__type_alignment(type));
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(src[i]))
            return kiln__error(KILN_E_RANGE, "cannot quantize a non-finite value (%g at element %lld)", (double)src[i],
                               (long long)i);
    switch (type) {
    case KILN_TYPE_F32: memcpy(dst, src, bytes); break;
    case KILN_TYPE_F16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = kiln_fp32_to_fp16(src[i]);
        break;
    case KILN_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = kiln_fp32_to_bf16(src[i]);
        break;
    default: quantizer(type)(src, dst, n); break;
    }
    return KILN_OK;
}
