/*
 * kernels_vec_ref.c - scalar references of the dispatch table's elementwise row helpers (kernels.h):
 * what the SIMD levels (x86/avx512_vec.c) are tested against. Rows are contiguous floats; an output may
 * be the same array as an input. The op kernels (kernels_elementwise.c, kernels_fused.c) call these for
 * contiguous rows and keep their strided loops for views.
 */
#include "backend/cpu/kernels.h"
#include "backend/cpu/kernels_fused.h"

#include <math.h>

static void exp_f32(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = expf(x[i]);
}

static void add_f32(float *out, const float *x, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = x[i] + y[i];
}

static void mul_f32(float *out, const float *x, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * y[i];
}

/* silu(g) * u with silu(g) = g * (1 / (1 + e^-g)), in kiln__act_apply's order. */
static void swiglu_f32(float *out, const float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = g[i] * (1.0f / (1.0f + expf(-g[i]))) * u[i];
}

/* The activations one value at a time, by their definitions in kiln__act_apply. */
static void silu_f32(float *out, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = kiln__act_apply(KILN_ACT_SILU, x[i]);
}

static void gelu_f32(float *out, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = kiln__act_apply(KILN_ACT_GELU, x[i]);
}

/* Exact (erf) GELU through libm, as the unary op's scalar loop computes it. */
static void gelu_erf_f32(float *out, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
}

static float sum_sq_f32(const float *x, int64_t n) {
    float ss = 0.0f;
    for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
    return ss;
}

static void scale_mul_f32(float *out, float s, const float *x, const float *w, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = (s * x[i]) * w[i];
}

void kiln__cpu_isa_init_vec_ref(kiln_cpu_isa *t) {
    t->exp_f32 = exp_f32;
    t->add_f32 = add_f32;
    t->mul_f32 = mul_f32;
    t->swiglu_f32 = swiglu_f32;
    t->silu_f32 = silu_f32;
    t->gelu_f32 = gelu_f32;
    t->gelu_erf_f32 = gelu_erf_f32;
    t->sum_sq_f32 = sum_sq_f32;
    t->scale_mul_f32 = scale_mul_f32;
}
