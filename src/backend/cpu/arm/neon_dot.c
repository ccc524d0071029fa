/*
 * neon_dot.c - Q8_0 and Q4_0 tiles of the neon level with the Armv8.2 dot-product instruction (sdot: four
 * int8 products summed into each int32 lane), installed only when the kernel reports the asimddp hwcap.
 * This is the one file the build compiles with -march=armv8.2-a+dotprod (CMakeLists.txt), so the rest of
 * the binary runs on any aarch64; without that flag it compiles to an init that changes nothing and the
 * widening-multiply tiles of neon_mm.c stay. Same integer per block as the reference (kernels_mm_ref.c).
 */
#include "backend/cpu/kernels.h"

#if defined(__aarch64__)
#include "backend/cpu/arm/neon_qtile.h"

#if defined(__ARM_FEATURE_DOTPROD)
static void mm_q8_0(int64_t k, const void *w, size_t ws, int64_t nr, const void *x, size_t xs, int64_t nc,
                    float *out, size_t os) {
    kiln__neon_mm_quant(KILN_TYPE_Q8_0, true, k, w, ws, nr, x, xs, nc, out, os);
}

static void mm_q4_0(int64_t k, const void *w, size_t ws, int64_t nr, const void *x, size_t xs, int64_t nc,
                    float *out, size_t os) {
    kiln__neon_mm_quant(KILN_TYPE_Q4_0, true, k, w, ws, nr, x, xs, nc, out, os);
}

void kiln__cpu_isa_init_neon_dot(kiln_cpu_isa *t) {
    t->mm[KILN_TYPE_Q8_0] = mm_q8_0;
    t->mm[KILN_TYPE_Q4_0] = mm_q4_0;
}
#else
void kiln__cpu_isa_init_neon_dot(kiln_cpu_isa *t) { (void)t; }
#endif

#endif
