/*
 * kernels_fused.h - reference kernels for the ops that the graph passes create (fused ops) and for the
 * small elementwise ops the unfused builder forms use (scale, tanh, relu, gelu, concat).
 * Same contract as kernels.h: thread ith of nth computes its share of rows.
 */
#ifndef KILN_CPU_KERNELS_FUSED_H
#define KILN_CPU_KERNELS_FUSED_H

#include "backend/cpu/kernels.h"

void kiln__cpu_scale(const kiln_cpu_args *a);
void kiln__cpu_tanh(const kiln_cpu_args *a);
void kiln__cpu_unary(const kiln_cpu_args *a); /* KILN_OP_UNARY, function i[0] */
void kiln__cpu_relu(const kiln_cpu_args *a);
void kiln__cpu_gelu(const kiln_cpu_args *a);
void kiln__cpu_concat(const kiln_cpu_args *a);
void kiln__cpu_linear(const kiln_cpu_args *a);
void kiln__cpu_add_act(const kiln_cpu_args *a);
void kiln__cpu_rms_norm_mul(const kiln_cpu_args *a);
void kiln__cpu_swiglu(const kiln_cpu_args *a);
void kiln__cpu_set(const kiln_cpu_args *a);
void kiln__cpu_acc(const kiln_cpu_args *a);

/* The activation functions of the fused ops, one value at a time (the reference definitions). */
float kiln__act_apply(int32_t act, float x);
/* The same over a contiguous row of n floats through the level's row helpers (isa->silu_f32, gelu_f32;
 * relu exactly); out may be x. */
void kiln__act_row(const kiln_cpu_isa *isa, int32_t act, float *out, const float *x, int64_t n);

#endif
