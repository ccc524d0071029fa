/*
 * test_quant_quantize.c - the quantizers (kiln_quantize_row) byte for byte against references computed
 * by others, on the 2048 blocks of 32 (256 super-blocks) of tests/data/quant/quantize_input.bin (gaussian
 * at scales 1e-6..1e4, uniform, zero, constant, outliers, all positive, exact rounding ties, values whose
 * fp16 scale overflows):
 *  - Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4: the bytes of gguf.quants.quantize;
 *  - Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, IQ4_NL, IQ4_XS: the bytes of llama.cpp's reference quantizers
 *    (libggml-base from llama-cpp-python 0.3.36, no importance matrix).
 * See tools/gen_quant_vectors.py. Also pinned: non-finite input is refused by name, and on smooth data
 * more bits give a smaller round-trip error.
 */
#include "harness.h"
#include "tensor/types.h"

#include <math.h>
#include <stdlib.h>

static uint32_t u32_at(const char *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* The shared input, as floats; *n receives the count. */
static float *load_input(size_t *n) {
    size_t size;
    char *file = harness_read_file(harness_data_path("quant/quantize_input.bin"), &size);
    CHECK(file != NULL);
    if (!file) return NULL;
    CHECK(memcmp(file, "KQQI", 4) == 0);
    *n = u32_at(file + 8);
    CHECK_EQ_INT(size, 12 + *n * 4);
    float *x = malloc(*n * sizeof(float));
    memcpy(x, file + 12, *n * sizeof(float));
    free(file);
    return x;
}

/* Quantize the whole input to `type` and compare with quantize_<name>.bin; returns blocks compared. */
static int check_type(kiln_type type, const char *name) {
    size_t n = 0, size;
    char rel[64];
    float *x = load_input(&n);
    snprintf(rel, sizeof rel, "quant/quantize_%s.bin", name);
    char *want = harness_read_file(harness_data_path(rel), &size);
    CHECK(x && want);
    if (!x || !want) {
        free(x);
        free(want);
        return 0;
    }
    uint32_t nb = u32_at(want + 12), bytes = u32_at(want + 20);
    CHECK_EQ_INT(u32_at(want + 8), type);
    CHECK_EQ_INT((size_t)nb * u32_at(want + 16), n);
    CHECK_EQ_INT(size, 24 + (size_t)nb * bytes);
    uint8_t *got = aligned_alloc(8, ((size_t)nb * bytes + 7) / 8 * 8);
    CHECK_OK(kiln_quantize_row(type, x, got, (int64_t)n));
    int bad = 0;
    for (uint32_t i = 0; i < nb && size == 24 + (size_t)nb * bytes; i++)
        if (memcmp(got + (size_t)i * bytes, want + 24 + (size_t)i * bytes, bytes) != 0 && bad++ < 3)
            harness_fail(__FILE__, __LINE__, "%s block %u differs from the reference", name, i);
    CHECK_EQ_INT(bad, 0);
    free(got);
    free(want);
    free(x);
    return (int)nb;
}

static void legacy_quantizers_match_gguf_quants_byte_for_byte(void) {
    CHECK_EQ_INT(check_type(KILN_TYPE_Q4_0, "q4_0"), 2048);
    CHECK_EQ_INT(check_type(KILN_TYPE_Q4_1, "q4_1"), 2048);
    CHECK_EQ_INT(check_type(KILN_TYPE_Q5_0, "q5_0"), 2048);
    CHECK_EQ_INT(check_type(KILN_TYPE_Q5_1, "q5_1"), 2048);
    CHECK_EQ_INT(check_type(KILN_TYPE_Q8_0, "q8_0"), 2048);
}

static void mxfp4_quantizer_matches_gguf_quants_byte_for_byte(void) {
    CHECK_EQ_INT(check_type(KILN_TYPE_MXFP4, "mxfp4"), 2048);
}

static void k_quant_quantizers_match_llama_cpp_byte_for_byte(void) {
    CHECK_EQ_INT(check_type(KILN_TYPE_Q2_K, "q2_k"), 256);
    CHECK_EQ_INT(check_type(KILN_TYPE_Q3_K, "q3_k"), 256);
    CHECK_EQ_INT(check_type(KILN_TYPE_Q4_K, "q4_k"), 256);
    CHECK_EQ_INT(check_type(KILN_TYPE_Q5_K, "q5_k"), 256);
    CHECK_EQ_INT(check_type(KILN_TYPE_Q6_K, "q6_k"), 256);
    CHECK_EQ_INT(check_type(KILN_TYPE_Q8_K, "q8_k"), 256);
}

static void iq4_quantizers_match_llama_cpp_byte_for_byte(void) {
    CHECK_EQ_INT(check_type(KILN_TYPE_IQ4_NL, "iq4_nl"), 2048);
    CHECK_EQ_INT(check_type(KILN_TYPE_IQ4_XS, "iq4_xs"), 256);
}

static void non_finite_input_is_refused_naming_the_element(void) {
    float x[256] = {0};
    _Alignas(8) uint8_t out[512];
    x[77] = NAN;
    CHECK_STATUS(kiln_quantize_row(KILN_TYPE_Q4_K, x, out, 256), KILN_E_RANGE);
    CHECK_ERROR_MENTIONS("element 77");
    x[77] = INFINITY;
    CHECK_STATUS(kiln_quantize_row(KILN_TYPE_Q8_0, x, out, 256), KILN_E_RANGE);
    CHECK_STATUS(kiln_quantize_row(KILN_TYPE_Q4_K, x, out, 100), KILN_E_FORMAT);
    CHECK_STATUS(kiln_quantize_row(KILN_TYPE_IQ2_XXS, x, out, 256), KILN_E_UNSUPPORTED);
    CHECK(!kiln_quantize_supported(KILN_TYPE_IQ2_XXS) && kiln_quantize_supported(KILN_TYPE_Q6_K));
}

/* Relative RMSE of quantize -> dequantize on a smooth signal. */
static double round_trip_error(kiln_type type) {
    enum { N = 4096 };
    static float x[N], y[N];
    static _Alignas(8) uint8_t q[N * 2];
    double num = 0, den = 0;
    for (int i = 0; i < N; i++) x[i] = sinf(0.37f * (float)i) * (1.0f + 0.5f * cosf(0.011f * (float)i));
    CHECK_OK(kiln_quantize_row(type, x, q, N));
    CHECK_OK(kiln_dequantize(type, q, y, N));
    for (int i = 0; i < N; i++) {
        num += (double)(y[i] - x[i]) * (y[i] - x[i]);
        den += (double)x[i] * x[i];
    }
    return sqrt(num / den);
}

static void more_bits_give_a_smaller_round_trip_error(void) {
    double e2 = round_trip_error(KILN_TYPE_Q2_K), e3 = round_trip_error(KILN_TYPE_Q3_K);
    double e4 = round_trip_error(KILN_TYPE_Q4_K), e5 = round_trip_error(KILN_TYPE_Q5_K);
    double e6 = round_trip_error(KILN_TYPE_Q6_K), e8 = round_trip_error(KILN_TYPE_Q8_0);
    CHECK(e2 > e3 && e3 > e4 && e4 > e5 && e5 > e6 && e6 > e8);
    CHECK(e2 < 0.35 && e4 < 0.08 && e8 < 0.01); /* generous bounds: each halving of error per bit */
    CHECK(round_trip_error(KILN_TYPE_IQ4_NL) < 0.08 && round_trip_error(KILN_TYPE_IQ4_XS) < 0.08);
    CHECK(round_trip_error(KILN_TYPE_Q4_0) < 0.1 && round_trip_error(KILN_TYPE_Q5_1) < 0.04);
    CHECK(round_trip_error(KILN_TYPE_MXFP4) < 0.15 && round_trip_error(KILN_TYPE_F16) < 1e-3);
}

int main(void) {
    RUN(legacy_quantizers_match_gguf_quants_byte_for_byte);
    RUN(mxfp4_quantizer_matches_gguf_quants_byte_for_byte);
    RUN(k_quant_quantizers_match_llama_cpp_byte_for_byte);
    RUN(iq4_quantizers_match_llama_cpp_byte_for_byte);
    RUN(non_finite_input_is_refused_naming_the_element);
    RUN(more_bits_give_a_smaller_round_trip_error);
    return harness_finish();
}
