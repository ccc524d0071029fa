/*
 * test_kernels_kquants.c - the fused dequantize-and-dot row kernels for K-quant weights (dot_row in
 * kernels.h, used for single-column matmuls), at every level this machine supports, against the reference
 * computed another way: the src/tensor dequantizer's weight values times the column, summed in double.
 *
 * Tolerance: the kernels form each weight value with at most one extra rounding (fused multiply-subtract)
 * and sum in float over 32 lanes, each lane taking k / 32 terms, then a 32-way reduction:
 * |got - want| <= 2e-7 * (k / 32 + 8) * sum|w x| (float epsilon 1.2e-7 per rounding, with margin).
 */
#include "harness.h"

#include "backend/cpu/kernels.h"
#include "core/core.h"
#include "tensor/types.h"

#include <math.h>

#define MAXK 2816

static float x[MAXK], wf[MAXK];
static unsigned char wraw[MAXK]; /* at most 210 / 256 bytes per element */

static uint64_t next(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}

static float unit(uint64_t *s) { return (float)(next(s) & 0xffffff) / 8388608.0f - 1.0f; }

/* Random blocks of a K-quant type: random quants and scales, sane half-float super-block scales. */
static void make_row(kiln_type type, int64_t k, uint64_t seed) {
    uint64_t st = seed;
    size_t bb = kiln__type_traits(type)->block_bytes;
    for (size_t i = 0; i < (size_t)(k / KILN_QK_K) * bb; i++) wraw[i] = (unsigned char)next(&st);
    for (int64_t b = 0; b < k / KILN_QK_K; b++) {
        unsigned char *blk = wraw + (size_t)b * bb;
        uint16_t d = kiln_fp32_to_fp16(0.001f + 0.01f * fabsf(unit(&st)));
        uint16_t dmin = kiln_fp32_to_fp16(0.001f + 0.01f * fabsf(unit(&st)));
        if (type == KILN_TYPE_Q4_K) {
            memcpy(blk, &d, 2);
            memcpy(blk + 2, &dmin, 2);
        } else {
            memcpy(blk + bb - 2, &d, 2); /* Q6_K: d is the last field */
        }
    }
    for (int64_t i = 0; i < k; i++) x[i] = unit(&st);
    kiln_dequantize(type, wraw, wf, k);
}

static void every_level_dot_row_matches_the_dequantized_reference_dot(void) {
    static const kiln_type types[] = {KILN_TYPE_Q4_K, KILN_TYPE_Q6_K};
    static const int64_t ks[] = {256, 768, 2816};
    int checked = 0;
    for (int l = KILN_CPU_REF; l < KILN_CPU_LEVEL_COUNT; l++) {
        if (!kiln__cpu_level_supported((kiln_cpu_level)l)) continue;
        const kiln_cpu_isa *isa = kiln__cpu_isa_for((kiln_cpu_level)l);
        for (int t = 0; t < 2; t++) {
            if (!isa->dot_row[types[t]]) continue;
            for (int i = 0; i < 3; i++) {
                double want = 0, mag = 0;
                make_row(types[t], ks[i], 100 * (uint64_t)l + 10 * (uint64_t)t + (uint64_t)i);
                for (int64_t e = 0; e < ks[i]; e++) {
                    want += (double)wf[e] * x[e];
                    mag += fabs((double)wf[e] * x[e]);
                }
                float got = isa->dot_row[types[t]](wraw, x, ks[i]);
                CHECK_NEAR(got, want, 2e-7 * (double)(ks[i] / 32 + 8) * mag);
                checked++;
            }
        }
    }
    printf("  (%d cases; the machine's best level is %s)\n", checked, kiln__cpu_level_name(kiln__cpu_max_level()));
    if (kiln__cpu_level_supported(KILN_CPU_AVX512)) CHECK(checked >= 6);
}

int main(void) {
    RUN(every_level_dot_row_matches_the_dequantized_reference_dot);
    return harness_finish();
}
