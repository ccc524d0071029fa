/*
 * types.c - the table of tensor element types (the GGUF/ggml numbering, block sizes and bytes), and the
 * overflow-checked size arithmetic every layer uses to turn element counts into bytes.
 */
#include "tensor/types.h"

#include "core/core.h"

/* Block layouts, from the GGUF specification: elements per block and bytes per block. Types Kiln can
 * compute with are marked supported; the rest can still be read and inspected. */
static const kiln_type_traits traits_table[KILN_TYPE_COUNT] = {
    [KILN_TYPE_F32] = {"f32", 1, 4, true, true},
    [KILN_TYPE_F16] = {"f16", 1, 2, true, true},
    [KILN_TYPE_Q4_0] = {"q4_0", 32, 18, true, true},
    [KILN_TYPE_Q4_1] = {"q4_1", 32, 20, true, true},
    [KILN_TYPE_Q5_0] = {"q5_0", 32, 22, true, true},
    [KILN_TYPE_Q5_1] = {"q5_1", 32, 24, true, true},
    [KILN_TYPE_Q8_0] = {"q8_0", 32, 34, true, true},
    [KILN_TYPE_Q8_1] = {"q8_1", 32, 36, true, false},
    [KILN_TYPE_Q2_K] = {"q2_k", 256, 84, true, true},
    [KILN_TYPE_Q3_K] = {"q3_k", 256, 110, true, true},
    [KILN_TYPE_Q4_K] = {"q4_k", 256, 144, true, true},
    [KILN_TYPE_Q5_K] = {"q5_k", 256, 176, true, true},
    [KILN_TYPE_Q6_K] = {"q6_k", 256, 210, true, true},
    [KILN_TYPE_Q8_K] = {"q8_k", 256, 292, true, true},
    [KILN_TYPE_IQ2_XXS] = {"iq2_xxs", 256, 66, true, false},
    [KILN_TYPE_IQ2_XS] = {"iq2_xs", 256, 74, true, false},
    [KILN_TYPE_IQ3_XXS] = {"iq3_xxs", 256, 98, true, false},
    [KILN_TYPE_IQ1_S] = {"iq1_s", 256, 50, true, false},
    [KILN_TYPE_IQ4_NL] = {"iq4_nl", 32, 18, true, true},
    [KILN_TYPE_IQ3_S] = {"iq3_s", 256, 110, true, false},
    [KILN_TYPE_IQ2_S] = {"iq2_s", 256, 82, true, false},
    [KILN_TYPE_IQ4_XS] = {"iq4_xs", 256, 136, true, true},
    [KILN_TYPE_I8] = {"i8", 1, 1, true, false},
    [KILN_TYPE_I16] = {"i16", 1, 2, true, false},
    [KILN_TYPE_I32] = {"i32", 1, 4, true, false},
    [KILN_TYPE_I64] = {"i64", 1, 8, true, false},
    [KILN_TYPE_F64] = {"f64", 1, 8, true, false},
    [KILN_TYPE_IQ1_M] = {"iq1_m", 256, 56, true, false},
    [KILN_TYPE_BF16] = {"bf16", 1, 2, true, true},
    [KILN_TYPE_TQ1_0] = {"tq1_0", 256, 54, true, false},
    [KILN_TYPE_TQ2_0] = {"tq2_0", 256, 66, true, false},
    [KILN_TYPE_MXFP4] = {"mxfp4", 32, 17, true, true},
};

kiln_status kiln_type_get_traits(int32_t type, kiln_type_traits *out) {
    if (type < 0 || type >= KILN_TYPE_COUNT || !traits_table[type].known)
        return kiln__error(KILN_E_INVALID_ARG, "unknown tensor type %d", (int)type);
    *out = traits_table[type];
    return KILN_OK;
}

const kiln_type_traits *kiln__type_traits(kiln_type type) {
    static const kiln_type_traits unknown = {"unknown", 1, 0, false, false};
    if ((int)type < 0 || type >= KILN_TYPE_COUNT || !traits_table[type].known) return &unknown;
    return &traits_table[type];
}

const char *kiln__type_name(kiln_type type) { return kiln__type_traits(type)->name; }

kiln_status kiln_type_row_bytes(kiln_type type, int64_t n, size_t *out) {
    const kiln_type_traits *t = kiln__type_traits(type);
    uint64_t bytes;
    if (!t->known) return kiln__error(KILN_E_INVALID_ARG, "unknown tensor type %d", (int)type);
    if (n < 0) return kiln__error(KILN_E_INVALID_ARG, "negative element count %lld", (long long)n);
    if (n % t->block_elems != 0)
        return kiln__error(KILN_E_FORMAT, "row of %lld elements is not a multiple of the %s block size %lld",
                           (long long)n, t->name, (long long)t->block_elems);
    if (kiln__mul_overflow_u64((uint64_t)(n / t->block_elems), t->block_bytes, &bytes) || bytes > SIZE_MAX)
        return kiln__error(KILN_E_RANGE, "row of %lld %s elements overflows the byte count", (long long)n,
                           t->name);
    *out = (size_t)bytes;
    return KILN_OK;
}

kiln_status kiln__tensor_bytes(kiln_type type, const int64_t ne[4], size_t *out) {
    size_t row;
    uint64_t total;
    kiln_status s = kiln_type_row_bytes(type, ne[0], &row);
    if (s) return s;
    total = row;
    for (int d = 1; d < 4; d++) {
        if (ne[d] < 0 || kiln__mul_overflow_u64(total, (uint64_t)ne[d], &total))
            return kiln__error(KILN_E_RANGE, "tensor of shape [%lld, %lld, %lld, %lld] overflows the byte count",
                               (long long)ne[0], (long long)ne[1], (long long)ne[2], (long long)ne[3]);
    }
    if (total > SIZE_MAX) return kiln__error(KILN_E_RANGE, "tensor too large for this platform");
    *out = (size_t)total;
    return KILN_OK;
}
