/*
 * kernels_arch.h - reference kernels for the ops that architectures beyond Llama need (LayerNorm's
 * normalization for GPT-2). Same contract as kernels.h: thread ith of nth computes its share of rows.
 */
#ifndef KILN_CPU_KERNELS_ARCH_H
#define KILN_CPU_KERNELS_ARCH_H

#include "backend/cpu/kernels.h"

void kiln__cpu_norm(const kiln_cpu_args *a);

#endif
