/*
 * test_quant_dequant.c - the reference dequantizers of every quantized type, bit for bit against the
 * gguf Python package (gguf.quants, the llama.cpp project's reference), on thousands of random blocks
 * per type whose scales cover the whole half-float range (see tools/gen_quant_vectors.py for how the
 * vectors in tests/data/quant/ were made). Each block's expected float32 values are stored as a 64-bit
 * checksum (sum of bits(v_i) * (splitmix64(i) | 1) mod 2^64, NaNs canonicalized), so any differing value
 * fails the block. Q8_K is not in gguf.quants: its expected values were computed with numpy following
 * ggml's dequantize_row_q8_K. Also pinned: hand-computed blocks for the layouts, and NaN/inf scales giving
 * IEEE-defined output.
 */
#include "harness.h"
#include "tensor/types.h"

#include <math.h>
#include <stdlib.h>

static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static uint64_t block_checksum(const float *v, int n) {
    uint64_t h = 0;
    for (int i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &v[i], 4);
        if (isnan(v[i])) bits = 0x7fc00000u;
        h += (uint64_t)bits * (splitmix64((uint64_t)i) | 1u);
    }
    return h;
}

static uint32_t u32_at(const char *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Dequantize every block of tests/data/quant/dequant_<name>.bin and compare checksums. Returns the
 * number of blocks checked. */
static int check_vectors(kiln_type type, const char *name) {
    char rel[64];
    size_t size;
    snprintf(rel, sizeof rel, "quant/dequant_%s.bin", name);
    char *file = harness_read_file(harness_data_path(rel), &size);
    CHECK(file != NULL);
    if (!file) return 0;
    uint32_t n = u32_at(file + 12), elems = u32_at(file + 16), bytes = u32_at(file + 20);
    CHECK(memcmp(file, "KQDV", 4) == 0);
    CHECK_EQ_INT(u32_at(file + 8), type);
    CHECK_EQ_INT(elems, kiln__type_traits(type)->block_elems);
    CHECK_EQ_INT(bytes, kiln__type_traits(type)->block_bytes);
    CHECK_EQ_INT(size, 24 + (size_t)n * bytes + (size_t)n * 8);
    if (size != 24 + (size_t)n * bytes + (size_t)n * 8) {
        free(file);
        return 0;
    }
    /* Copy the blocks to aligned memory (the file buffer's offset 24 is aligned, but be explicit). */
    void *blocks = malloc((size_t)n * bytes);
    float *y = malloc((size_t)n * elems * sizeof(float));
    memcpy(blocks, file + 24, (size_t)n * bytes);
    CHECK_OK(kiln_dequantize(type, blocks, y, (int64_t)n * elems));
    int bad = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t want;
        memcpy(&want, file + 24 + (size_t)n * bytes + (size_t)i * 8, 8);
        if (block_checksum(y + (size_t)i * elems, (int)elems) != want && bad++ < 3)
            harness_fail(__FILE__, __LINE__, "%s block %u differs from gguf.quants (first values %.9g %.9g)",
                         name, i, (double)y[(size_t)i * elems], (double)y[(size_t)i * elems + 1]);
    }
    CHECK_EQ_INT(bad, 0);
    free(blocks);
    free(y);
    free(file);
    return (int)n;
}

static void legacy_types_match_gguf_quants_bit_for_bit(void) {
    CHECK_EQ_INT(check_vectors(KILN_TYPE_Q4_0, "q4_0"), 2048);
    CHECK_EQ_INT(check_vectors(KILN_TYPE_Q4_1, "q4_1"), 2048);
    CHECK_EQ_INT(check_vectors(KILN_TYPE_Q5_0, "q5_0"), 2048);
    CHECK_EQ_INT(check_vectors(KILN_TYPE_Q5_1, "q5_1"), 2048);
    CHECK_EQ_INT(check_vectors(KILN_TYPE_Q8_0, "q8_0"), 2048);
}

static void k_quants_match_gguf_quants_bit_for_bit(void) {
    CHECK_EQ_INT(check_vectors(KILN_TYPE_Q2_K, "q2_k"), 1024);
    CHECK_EQ_INT(check_vectors(KILN_TYPE_Q3_K, "q3_k"), 1024);
    CHECK_EQ_INT(check_vectors(KILN_TYPE_Q4_K, "q4_k"), 1024);
    CHECK_EQ_INT(check_vectors(KILN_TYPE_Q5_K, "q5_k"), 1024);
    CHECK_EQ_INT(check_vectors(KILN_TYPE_Q6_K, "q6_k"), 1024);
}

static void q8_k_matches_ggml_definition_d_times_q(void) {
    CHECK_EQ_INT(check_vectors(KILN_TYPE_Q8_K, "q8_k"), 512);
}

static void table_types_iq4_nl_iq4_xs_mxfp4_match_gguf_quants_bit_for_bit(void) {
    CHECK_EQ_INT(check_vectors(KILN_TYPE_IQ4_NL, "iq4_nl"), 2048);
    CHECK_EQ_INT(check_vectors(KILN_TYPE_IQ4_XS, "iq4_xs"), 1024);
    CHECK_EQ_INT(check_vectors(KILN_TYPE_MXFP4, "mxfp4"), 2048);
}

/* ---- Layouts on hand-computed blocks (independent of the vectors). ---- */

static void q4_k_uses_six_bit_scales_and_mins_of_each_32_element_group(void) {
    kiln_block_q4_k b;
    float y[256];
    memset(&b, 0, sizeof b);
    b.d = 0x3c00;    /* 1.0 */
    b.dmin = 0x3800; /* 0.5 */
    b.scales[0] = 2;                 /* group 0: scale 2, min 3 */
    b.scales[4] = 3;
    b.scales[8] = 0x21;              /* group 4: scale low bits 1, min low bits 2 */
    b.scales[0] |= 1 << 6;           /* group 4: scale bit 4 -> scale 17 */
    b.qs[0] = 0x75;                  /* element 0 = 5, element 32 (group 1) = 7 */
    b.qs[64] = 0x0f;                 /* element 128 (group 4) = 15 */
    CHECK_OK(kiln_dequantize(KILN_TYPE_Q4_K, &b, y, 256));
    CHECK(y[0] == 2.0f * 5 - 1.5f);  /* d*2*5 - dmin*3 */
    CHECK(y[1] == -1.5f);
    CHECK(y[32] == 0.0f);            /* group 1: scale 0, min 0 */
    CHECK(y[128] == 17.0f * 15 - 1.0f); /* scale 17, min 2 * 0.5 */
}

static void q6_k_reads_low_nibbles_and_high_bit_pairs(void) {
    kiln_block_q6_k b;
    float y[256];
    memset(&b, 0, sizeof b);
    b.d = 0x4000; /* 2.0 */
    for (int s = 0; s < 16; s++) b.scales[s] = (int8_t)(s - 8);
    b.ql[0] = 0x3a;  /* element 0 low = 10, element 64 low = 3 */
    b.qh[0] = 0xe4;  /* element 0 high = 0, 32 high = 1, 64 high = 2, 96 high = 3 */
    CHECK_OK(kiln_dequantize(KILN_TYPE_Q6_K, &b, y, 256));
    CHECK(y[0] == 2.0f * -8 * (10 - 32));
    CHECK(y[32] == 2.0f * -6 * (16 - 32));
    CHECK(y[64] == 2.0f * -4 * (3 + 32 - 32));
    CHECK(y[96] == 2.0f * -2 * (48 - 32));
}

static void mxfp4_scales_e2m1_values_by_a_power_of_two(void) {
    kiln_block_mxfp4 b;
    float y[32];
    memset(&b, 0, sizeof b);
    b.e = 127 + 3; /* 2^3 */
    b.qs[0] = 0xf7; /* element 0: code 7 = 6.0, element 16: code 15 = -6.0 */
    b.qs[1] = 0x21; /* element 1: 0.5, element 17: 1.0 */
    CHECK_OK(kiln_dequantize(KILN_TYPE_MXFP4, &b, y, 32));
    CHECK(y[0] == 48.0f && y[16] == -48.0f && y[1] == 4.0f && y[17] == 8.0f && y[2] == 0.0f);
    b.e = 0; /* 2^-127, a subnormal: still exact */
    CHECK_OK(kiln_dequantize(KILN_TYPE_MXFP4, &b, y, 32));
    CHECK(y[17] == ldexpf(1.0f, -127));
}

/* ---- Corrupt scales give IEEE-defined values, never a crash. ---- */

static void nan_and_infinite_scales_give_nan_or_infinity(void) {
    kiln_block_q4_k b;
    float y[256];
    memset(&b, 0, sizeof b);
    b.d = 0x7e00;    /* NaN */
    b.dmin = 0x7c00; /* +inf */
    memset(b.scales, 0x01, sizeof b.scales);
    memset(b.qs, 0x11, sizeof b.qs);
    CHECK_OK(kiln_dequantize(KILN_TYPE_Q4_K, &b, y, 256));
    for (int i = 0; i < 256; i++) CHECK(isnan(y[i]));
    kiln_block_q8_0 q;
    memset(&q, 0, sizeof q);
    q.d = 0x7c00;
    q.qs[1] = 1;
    q.qs[2] = -1;
    CHECK_OK(kiln_dequantize(KILN_TYPE_Q8_0, &q, y, 32));
    CHECK(isnan(y[0])); /* inf * 0 */
    CHECK(isinf(y[1]) && y[1] > 0 && isinf(y[2]) && y[2] < 0);
}

static void dequantize_rejects_misaligned_blocks_and_partial_blocks(void) {
    _Alignas(8) uint8_t buf[300] = {0};
    float y[256];
    CHECK_STATUS(kiln_dequantize(KILN_TYPE_Q8_K, buf + 2, y, 256), KILN_E_INVALID_ARG);
    CHECK_ERROR_MENTIONS("not 4-byte aligned");
    CHECK_STATUS(kiln_dequantize(KILN_TYPE_Q4_K, buf, y, 128), KILN_E_FORMAT);
    CHECK_ERROR_MENTIONS("q4_k block size 256");
    CHECK_OK(kiln_dequantize(KILN_TYPE_MXFP4, buf + 1, y, 32)); /* bytes only: any alignment */
}

int main(void) {
    RUN(legacy_types_match_gguf_quants_bit_for_bit);
    RUN(k_quants_match_gguf_quants_bit_for_bit);
    RUN(q8_k_matches_ggml_definition_d_times_q);
    RUN(table_types_iq4_nl_iq4_xs_mxfp4_match_gguf_quants_bit_for_bit);
    RUN(q4_k_uses_six_bit_scales_and_mins_of_each_32_element_group);
    RUN(q6_k_reads_low_nibbles_and_high_bit_pairs);
    RUN(mxfp4_scales_e2m1_values_by_a_power_of_two);
    RUN(nan_and_infinite_scales_give_nan_or_infinity);
    RUN(dequantize_rejects_misaligned_blocks_and_partial_blocks);
    return harness_finish();
}
