/*
 * neon.h - what the aarch64 Advanced SIMD files share: the per-file parts of the neon level's dispatch
 * table (kiln__cpu_isa_init_neon in neon_mm.c calls the others) and small inline helpers. Include only
 * inside `#if defined(__aarch64__)`.
 */
#ifndef KILN_CPU_ARM_NEON_H
#define KILN_CPU_ARM_NEON_H

#include "backend/cpu/kernels.h"

#include <arm_neon.h>

/* Elementwise rows and exp (neon_vec.c). */
void kiln__cpu_isa_init_neon_vec(kiln_cpu_isa *t);
/* Q8_0 and Q4_0 tiles with sdot (neon_dot.c, the one file built for armv8.2-a+dotprod); the caller checks
 * the asimddp hwcap first. Leaves the table unchanged when the file was built without dot products. */
void kiln__cpu_isa_init_neon_dot(kiln_cpu_isa *t);

/* Register tiles: up to 4 weight rows x 2 activation columns of accumulators. */
#define KILN_NEON_RMAX 4
#define KILN_NEON_CMAX 2

/* A half-float scale in float, by the hardware conversion (exact, as kiln_fp16_to_fp32 for non-NaN). */
static inline float kiln__neon_h2f(uint16_t h) {
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}

#endif
