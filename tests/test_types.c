/*
 * test_types.c - the tensor type table, overflow-checked size arithmetic, the scalar reference
 * dequantizers on hand-computed blocks, and the IEEE half / bfloat16 conversions: edge values, rounding
 * ties to even, overflow and underflow, and every one of the 65536 bit patterns round-tripped.
 */
#include "harness.h"
#include "tensor/types.h"

#include <math.h>
#include <string.h>

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static bool fp16_is_nan(uint16_t h) {
    return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
}
static bool bf16_is_nan(uint16_t h) {
    return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0;
}

/* ---- The type table. ---- */

static void the_type_table_matches_the_gguf_block_layouts(void) {
    static const struct {
        int32_t type;
        const char *name;
        int64_t elems;
        size_t bytes;
        bool supported;
    } want[] = {
        {KILN_TYPE_F32, "f32", 1, 4, true},          {KILN_TYPE_F16, "f16", 1, 2, true},
        {KILN_TYPE_Q4_0, "q4_0", 32, 18, true},      {KILN_TYPE_Q4_1, "q4_1", 32, 20, true},
        {KILN_TYPE_Q5_0, "q5_0", 32, 22, true},     {KILN_TYPE_Q5_1, "q5_1", 32, 24, true},
        {KILN_TYPE_Q8_0, "q8_0", 32, 34, true},      {KILN_TYPE_Q8_1, "q8_1", 32, 36, false},
        {KILN_TYPE_Q2_K, "q2_k", 256, 84, true},    {KILN_TYPE_Q3_K, "q3_k", 256, 110, true},
        {KILN_TYPE_Q4_K, "q4_k", 256, 144, true},   {KILN_TYPE_Q5_K, "q5_k", 256, 176, true},
        {KILN_TYPE_Q6_K, "q6_k", 256, 210, true},   {KILN_TYPE_Q8_K, "q8_k", 256, 292, true},
        {KILN_TYPE_IQ4_NL, "iq4_nl", 32, 18, true}, {KILN_TYPE_I8, "i8", 1, 1, false},
        {KILN_TYPE_I16, "i16", 1, 2, false},         {KILN_TYPE_I32, "i32", 1, 4, false},
        {KILN_TYPE_I64, "i64", 1, 8, false},         {KILN_TYPE_F64, "f64", 1, 8, false},
        {KILN_TYPE_BF16, "bf16", 1, 2, true},        {KILN_TYPE_TQ1_0, "tq1_0", 256, 54, false},
        {KILN_TYPE_TQ2_0, "tq2_0", 256, 66, false},  {KILN_TYPE_MXFP4, "mxfp4", 32, 17, true},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        kiln_type_traits t;
        CHECK_OK(kiln_type_get_traits(want[i].type, &t));
        CHECK_STR(t.name, want[i].name);
        CHECK_EQ_INT(t.block_elems, want[i].elems);
        CHECK_EQ_INT(t.block_bytes, want[i].bytes);
        CHECK(t.known);
        CHECK_EQ_INT(t.supported, want[i].supported);
    }
}

static void types_the_specification_does_not_define_are_rejected(void) {
    static const int32_t undefined[] = {-1, 4, 5, 31, 32, 33, 36, 37, 38, 40, 1000};
    kiln_type_traits t;
    for (size_t i = 0; i < sizeof undefined / sizeof undefined[0]; i++) {
        CHECK_STATUS(kiln_type_get_traits(undefined[i], &t), KILN_E_INVALID_ARG);
        CHECK(!kiln__type_traits((kiln_type)undefined[i])->known);
    }
    CHECK_ERROR_MENTIONS("unknown tensor type 1000");
}

static void row_bytes_counts_whole_blocks(void) {
    size_t n = 0;
    CHECK_OK(kiln_type_row_bytes(KILN_TYPE_Q8_0, 64, &n));
    CHECK_EQ_INT(n, 68);
    CHECK_OK(kiln_type_row_bytes(KILN_TYPE_Q4_0, 4096, &n));
    CHECK_EQ_INT(n, 128 * 18);
    CHECK_OK(kiln_type_row_bytes(KILN_TYPE_F16, 3, &n));
    CHECK_EQ_INT(n, 6);
    CHECK_OK(kiln_type_row_bytes(KILN_TYPE_F32, 0, &n));
    CHECK_EQ_INT(n, 0);
}

static void row_bytes_rejects_partial_blocks_negative_counts_and_overflow(void) {
    size_t n = 0;
    CHECK_STATUS(kiln_type_row_bytes(KILN_TYPE_Q8_0, 33, &n), KILN_E_FORMAT);
    CHECK_ERROR_MENTIONS("row of 33 elements is not a multiple of the q8_0 block size 32");
    CHECK_STATUS(kiln_type_row_bytes(KILN_TYPE_Q4_K, 128, &n), KILN_E_FORMAT);
    CHECK_STATUS(kiln_type_row_bytes(KILN_TYPE_F32, -1, &n), KILN_E_INVALID_ARG);
    CHECK_STATUS(kiln_type_row_bytes(KILN_TYPE_F64, INT64_MAX, &n), KILN_E_RANGE);
    CHECK_STATUS(kiln_type_row_bytes((kiln_type)4, 32, &n), KILN_E_INVALID_ARG);
}

static void tensor_bytes_multiplies_rows_with_overflow_checks(void) {
    size_t n = 0;
    const int64_t ok[4] = {64, 512, 1, 1}, q[4] = {32, 3, 2, 1},
                  big[4] = {1 << 20, 1 << 20, 1 << 20, 1 << 20};
    CHECK_OK(kiln__tensor_bytes(KILN_TYPE_F32, ok, &n));
    CHECK_EQ_INT(n, 131072);
    CHECK_OK(kiln__tensor_bytes(KILN_TYPE_Q8_0, q, &n));
    CHECK_EQ_INT(n, 34 * 6);
    CHECK_STATUS(kiln__tensor_bytes(KILN_TYPE_F32, big, &n), KILN_E_RANGE);
    CHECK_ERROR_MENTIONS("overflows the byte count");
}

/* ---- Dequantization on hand-computed blocks. ---- */

static void dequantizes_q8_0_blocks(void) {
    kiln_block_q8_0 b[2];
    float y[64];
    b[0].d = 0x3800; /* 0.5 */
    for (int j = 0; j < 32; j++)
        b[0].qs[j] = (int8_t)(j - 16);
    b[1].d = 0xc000; /* -2.0 */
    for (int j = 0; j < 32; j++)
        b[1].qs[j] = (int8_t)(j % 2 ? 127 : -128);
    CHECK_OK(kiln_dequantize(KILN_TYPE_Q8_0, b, y, 64));
    CHECK(y[0] == -8.0f);    /* 0.5 * -16 */
    CHECK(y[15] == -0.5f);   /* 0.5 * -1 */
    CHECK(y[16] == 0.0f);    /* 0.5 * 0 */
    CHECK(y[31] == 7.5f);    /* 0.5 * 15 */
    CHECK(y[32] == 256.0f);  /* -2 * -128 */
    CHECK(y[33] == -254.0f); /* -2 * 127 */
    CHECK(y[63] == -254.0f);
}

static void dequantizes_q4_0_blocks(void) {
    kiln_block_q4_0 b;
    float y[32];
    b.d = 0x4000; /* 2.0 */
    /* Element j (low nibble of qs[j]) = j; element j + 16 (high nibble) = 15 - j. */
    for (int j = 0; j < 16; j++)
        b.qs[j] = (uint8_t)(j | ((15 - j) << 4));
    CHECK_OK(kiln_dequantize(KILN_TYPE_Q4_0, &b, y, 32));
    CHECK(y[0] == -16.0f);           /* 2 * (0 - 8) */
    CHECK(y[8] == 0.0f);             /* 2 * (8 - 8) */
    CHECK(y[15] == 14.0f);           /* 2 * (15 - 8) */
    CHECK(y[16] == 14.0f);           /* 2 * (15 - 8) */
    CHECK(y[23] == 0.0f);            /* 2 * (8 - 8) */
    CHECK(y[31] == -16.0f);          /* 2 * (0 - 8) */
    b.d = 0x3400;                    /* 0.25 */
    memset(b.qs, 0x9f, sizeof b.qs); /* low nibble 15, high nibble 9 */
    CHECK_OK(kiln_dequantize(KILN_TYPE_Q4_0, &b, y, 32));
    CHECK(y[3] == 1.75f);  /* 0.25 * 7 */
    CHECK(y[19] == 0.25f); /* 0.25 * 1 */
}

static void dequantizes_f16_bf16_and_f32_rows(void) {
    const uint16_t h[3] = {0x3c00, 0xc000, 0x7bff}, bf[2] = {0x3f80, 0xc2f7};
    const float f[2] = {1.5f, -3.0f};
    float y[3];
    CHECK_OK(kiln_dequantize(KILN_TYPE_F16, h, y, 3));
    CHECK(y[0] == 1.0f && y[1] == -2.0f && y[2] == 65504.0f);
    CHECK_OK(kiln_dequantize(KILN_TYPE_BF16, bf, y, 2));
    CHECK(y[0] == 1.0f && y[1] == -123.5f);
    CHECK_OK(kiln_dequantize(KILN_TYPE_F32, f, y, 2));
    CHECK(y[0] == 1.5f && y[1] == -3.0f);
}

static void dequantize_rejects_unsupported_types_and_partial_blocks(void) {
    uint8_t src[64] = {0};
    float y[64];
    CHECK_STATUS(kiln_dequantize(KILN_TYPE_IQ2_XXS, src, y, 256), KILN_E_UNSUPPORTED);
    CHECK_ERROR_MENTIONS("iq2_xxs");
    CHECK_STATUS(kiln_dequantize(KILN_TYPE_Q8_0, src, y, 31), KILN_E_FORMAT);
    CHECK_STATUS(kiln_dequantize(KILN_TYPE_Q8_0, NULL, y, 32), KILN_E_INVALID_ARG);
}

/* ---- IEEE half precision. ---- */

static void fp16_decodes_edge_values(void) {
    CHECK(kiln_fp16_to_fp32(0x0000) == 0.0f && !signbit(kiln_fp16_to_fp32(0x0000)));
    CHECK(kiln_fp16_to_fp32(0x8000) == 0.0f && signbit(kiln_fp16_to_fp32(0x8000)));
    CHECK(kiln_fp16_to_fp32(0x0001) == 0x1p-24f);           /* smallest subnormal */
    CHECK(kiln_fp16_to_fp32(0x03ff) == 1023.0f * 0x1p-24f); /* largest subnormal */
    CHECK(kiln_fp16_to_fp32(0x0400) == 0x1p-14f);           /* smallest normal */
    CHECK(kiln_fp16_to_fp32(0x3c00) == 1.0f);
    CHECK(kiln_fp16_to_fp32(0x3555) == 0.333251953125f);
    CHECK(kiln_fp16_to_fp32(0x7bff) == 65504.0f); /* largest finite */
    CHECK(kiln_fp16_to_fp32(0xfbff) == -65504.0f);
    CHECK(isinf(kiln_fp16_to_fp32(0x7c00)) && kiln_fp16_to_fp32(0x7c00) > 0);
    CHECK(isinf(kiln_fp16_to_fp32(0xfc00)) && kiln_fp16_to_fp32(0xfc00) < 0);
    CHECK(isnan(kiln_fp16_to_fp32(0x7e00)));
    CHECK(isnan(kiln_fp16_to_fp32(0x7c01))); /* signalling NaN */
    CHECK(isnan(kiln_fp16_to_fp32(0xffff)));
}

static void fp16_encodes_exact_values(void) {
    CHECK_EQ_INT(kiln_fp32_to_fp16(0.0f), 0x0000);
    CHECK_EQ_INT(kiln_fp32_to_fp16(-0.0f), 0x8000);
    CHECK_EQ_INT(kiln_fp32_to_fp16(1.0f), 0x3c00);
    CHECK_EQ_INT(kiln_fp32_to_fp16(-2.0f), 0xc000);
    CHECK_EQ_INT(kiln_fp32_to_fp16(0x1p-24f), 0x0001);
    CHECK_EQ_INT(kiln_fp32_to_fp16(1023.0f * 0x1p-24f), 0x03ff);
    CHECK_EQ_INT(kiln_fp32_to_fp16(0x1p-14f), 0x0400);
    CHECK_EQ_INT(kiln_fp32_to_fp16(65504.0f), 0x7bff);
    CHECK_EQ_INT(kiln_fp32_to_fp16(INFINITY), 0x7c00);
    CHECK_EQ_INT(kiln_fp32_to_fp16(-INFINITY), 0xfc00);
}

static void fp16_rounds_ties_to_even(void) {
    /* Between 1.0 (0x3c00) and 1 + 2^-10 (0x3c01), the midpoint 1 + 2^-11 goes to the even 0x3c00. */
    CHECK_EQ_INT(kiln_fp32_to_fp16(1.0f + 0x1p-11f), 0x3c00);
    /* Between 0x3c01 and 1 + 2^-9 (0x3c02), the midpoint 1 + 3 * 2^-11 goes to the even 0x3c02. */
    CHECK_EQ_INT(kiln_fp32_to_fp16(1.0f + 3 * 0x1p-11f), 0x3c02);
    /* Just above or below a midpoint rounds to the nearer value. */
    CHECK_EQ_INT(kiln_fp32_to_fp16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
    CHECK_EQ_INT(kiln_fp32_to_fp16(1.0f + 3 * 0x1p-11f - 0x1p-20f), 0x3c01);
    CHECK_EQ_INT(kiln_fp32_to_fp16(-(1.0f + 0x1p-11f)), 0xbc00);
    /* Subnormal ties: 1.5 * 2^-24 lies between 0x0001 and 0x0002 and goes to 0x0002; 2.5 * 2^-24 to 0x0002.
     */
    CHECK_EQ_INT(kiln_fp32_to_fp16(1.5f * 0x1p-24f), 0x0002);
    CHECK_EQ_INT(kiln_fp32_to_fp16(2.5f * 0x1p-24f), 0x0002);
    /* Between the largest subnormal and the smallest normal: 1023.5 * 2^-24 goes to the even 0x0400. */
    CHECK_EQ_INT(kiln_fp32_to_fp16(1023.5f * 0x1p-24f), 0x0400);
}

static void fp16_overflows_to_infinity_at_65520(void) {
    CHECK_EQ_INT(kiln_fp32_to_fp16(65519.0f), 0x7bff); /* below the midpoint of 65504 and 65536 */
    CHECK_EQ_INT(kiln_fp32_to_fp16(65520.0f), 0x7c00); /* the midpoint: ties to even, which is infinity */
    CHECK_EQ_INT(kiln_fp32_to_fp16(-65520.0f), 0xfc00);
    CHECK_EQ_INT(kiln_fp32_to_fp16(1e6f), 0x7c00);
    CHECK_EQ_INT(kiln_fp32_to_fp16(3.4e38f), 0x7c00);
}

static void fp16_underflows_to_zero_or_the_smallest_subnormal(void) {
    CHECK_EQ_INT(kiln_fp32_to_fp16(0x1p-25f), 0x0000);            /* half the smallest subnormal: tie to 0 */
    CHECK_EQ_INT(kiln_fp32_to_fp16(0x1p-25f + 0x1p-40f), 0x0001); /* just above half */
    CHECK_EQ_INT(kiln_fp32_to_fp16(0x1p-26f), 0x0000);
    CHECK_EQ_INT(kiln_fp32_to_fp16(-0x1p-26f), 0x8000);
    CHECK_EQ_INT(kiln_fp32_to_fp16(0x1p-149f), 0x0000); /* the smallest float subnormal */
    CHECK_EQ_INT(kiln_fp32_to_fp16(0.75f * 0x1p-24f), 0x0001);
}

static void fp16_keeps_nan_a_nan(void) {
    CHECK(fp16_is_nan(kiln_fp32_to_fp16(NAN)));
    CHECK(fp16_is_nan(kiln_fp32_to_fp16(-NAN)));
    CHECK(fp16_is_nan(kiln_fp32_to_fp16(bits_f32(0x7f800001u)))); /* payload only in the low bits */
    CHECK(fp16_is_nan(kiln_fp32_to_fp16(bits_f32(0xff800001u))));
    CHECK((kiln_fp32_to_fp16(bits_f32(0xff800001u)) & 0x8000) != 0);
}

static void every_fp16_pattern_round_trips_through_fp32(void) {
    int mismatches = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = kiln_fp16_to_fp32((uint16_t)h);
        uint16_t back = kiln_fp32_to_fp16(f);
        if (fp16_is_nan((uint16_t)h)) {
            if (!isnan(f) || !fp16_is_nan(back)) mismatches++;
        } else if (back != h) {
            mismatches++;
        }
    }
    CHECK_EQ_INT(mismatches, 0);
}

/* Reference rounding of a finite float to half precision: the nearest of the two neighbouring halves,
 * ties to the even one, 65520 and above to infinity. Differences are exact in double. */
static uint16_t fp16_reference(float f) {
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    double a = fabs((double)f);
    uint32_t lo = 0, hi = 0x7bff;
    if (a >= 65520.0) return sign | 0x7c00;
    while (lo < hi) { /* the largest half <= a */
        uint32_t mid = (lo + hi + 1) / 2;
        if ((double)kiln_fp16_to_fp32((uint16_t)mid) <= a)
            lo = mid;
        else
            hi = mid - 1;
    }
    if (lo < 0x7bff) {
        double below = a - kiln_fp16_to_fp32((uint16_t)lo), above = kiln_fp16_to_fp32((uint16_t)(lo + 1)) - a;
        if (above < below || (above == below && (lo & 1))) lo++;
    }
    return (uint16_t)(sign | lo);
}

static void fp16_encoding_matches_a_reference_over_sampled_floats(void) {
    int mismatches = 0;
    for (uint64_t u = 0; u < 0x100000000u; u += 4099) {
        float f = bits_f32((uint32_t)u);
        if (isnan(f)) continue;
        if (kiln_fp32_to_fp16(f) != fp16_reference(f) && mismatches++ < 5)
            harness_fail(__FILE__, __LINE__, "fp16 of 0x%08x: 0x%04x, reference 0x%04x", (unsigned)u,
                         kiln_fp32_to_fp16(f), fp16_reference(f));
    }
    CHECK_EQ_INT(mismatches, 0);
}

/* ---- bfloat16. ---- */

static void bf16_converts_edge_values(void) {
    CHECK(kiln_bf16_to_fp32(0x3f80) == 1.0f);
    CHECK(kiln_bf16_to_fp32(0x8000) == 0.0f && signbit(kiln_bf16_to_fp32(0x8000)));
    CHECK(kiln_bf16_to_fp32(0x0001) == 0x1p-133f);   /* smallest subnormal */
    CHECK(kiln_bf16_to_fp32(0x7f7f) == 0x1.fep127f); /* largest finite */
    CHECK(isinf(kiln_bf16_to_fp32(0x7f80)) && isinf(kiln_bf16_to_fp32(0xff80)));
    CHECK(isnan(kiln_bf16_to_fp32(0x7fc0)));
    CHECK_EQ_INT(kiln_fp32_to_bf16(1.0f), 0x3f80);
    CHECK_EQ_INT(kiln_fp32_to_bf16(-0.0f), 0x8000);
    CHECK_EQ_INT(kiln_fp32_to_bf16(INFINITY), 0x7f80);
    CHECK_EQ_INT(kiln_fp32_to_bf16(-INFINITY), 0xff80);
    CHECK_EQ_INT(kiln_fp32_to_bf16(0x1p-133f), 0x0001);
}

static void bf16_rounds_ties_to_even(void) {
    CHECK_EQ_INT(kiln_fp32_to_bf16(1.0f + 0x1p-8f), 0x3f80);            /* midpoint of 0x3f80, 0x3f81 */
    CHECK_EQ_INT(kiln_fp32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);        /* midpoint of 0x3f81, 0x3f82 */
    CHECK_EQ_INT(kiln_fp32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81); /* above the midpoint */
    CHECK_EQ_INT(kiln_fp32_to_bf16(-(1.0f + 3 * 0x1p-8f)), 0xbf82);
    CHECK_EQ_INT(kiln_fp32_to_bf16(0x1.fep127f), 0x7f7f);
    CHECK_EQ_INT(kiln_fp32_to_bf16(0x1.ffp127f), 0x7f80); /* the midpoint above the largest: infinity */
    CHECK_EQ_INT(kiln_fp32_to_bf16(bits_f32(0x7f7fffffu)), 0x7f80); /* FLT_MAX rounds up to infinity */
}

static void bf16_keeps_nan_a_quiet_nan(void) {
    CHECK(bf16_is_nan(kiln_fp32_to_bf16(NAN)));
    CHECK(bf16_is_nan(kiln_fp32_to_bf16(bits_f32(0x7f800001u)))); /* would truncate to infinity */
    CHECK(bf16_is_nan(kiln_fp32_to_bf16(bits_f32(0xffffffffu))));
    CHECK_EQ_INT(kiln_fp32_to_bf16(bits_f32(0x7f800001u)) & 0x40, 0x40); /* quiet */
}

static void every_bf16_pattern_round_trips_through_fp32(void) {
    int mismatches = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = kiln_bf16_to_fp32((uint16_t)h);
        uint16_t back = kiln_fp32_to_bf16(f);
        if (bf16_is_nan((uint16_t)h)) {
            if (!isnan(f) || !bf16_is_nan(back)) mismatches++;
        } else if (back != h || f32_bits(f) != h << 16) {
            mismatches++;
        }
    }
    CHECK_EQ_INT(mismatches, 0);
}

int main(void) {
    RUN(the_type_table_matches_the_gguf_block_layouts);
    RUN(types_the_specification_does_not_define_are_rejected);
    RUN(row_bytes_counts_whole_blocks);
    RUN(row_bytes_rejects_partial_blocks_negative_counts_and_overflow);
    RUN(tensor_bytes_multiplies_rows_with_overflow_checks);
    RUN(dequantizes_q8_0_blocks);
    RUN(dequantizes_q4_0_blocks);
    RUN(dequantizes_f16_bf16_and_f32_rows);
    RUN(dequantize_rejects_unsupported_types_and_partial_blocks);
    RUN(fp16_decodes_edge_values);
    RUN(fp16_encodes_exact_values);
    RUN(fp16_rounds_ties_to_even);
    RUN(fp16_overflows_to_infinity_at_65520);
    RUN(fp16_underflows_to_zero_or_the_smallest_subnormal);
    RUN(fp16_keeps_nan_a_nan);
    RUN(every_fp16_pattern_round_trips_through_fp32);
    RUN(fp16_encoding_matches_a_reference_over_sampled_floats);
    RUN(bf16_converts_edge_values);
    RUN(bf16_rounds_ties_to_even);
    RUN(bf16_keeps_nan_a_quiet_nan);
    RUN(every_bf16_pattern_round_trips_through_fp32);
    return harness_finish();
}
