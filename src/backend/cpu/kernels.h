/*
 * kernels.h - the CPU backend's kernels. Each op has a scalar reference kernel (kernels_*.c), always
 * compiled; SIMD variants (a later issue) live in per-ISA folders and are tested against these.
 *
 * A kernel computes its share of one node: thread ith of nth takes a contiguous range of rows (see
 * kiln__cpu_split) so results never depend on the thread count. Every source row is read through its
 * byte strides, so kernels accept views.
 */
#ifndef KILN_CPU_KERNELS_H
#define KILN_CPU_KERNELS_H

#include "graph/graph.h"

typedef struct kiln_cpu_args {
    kiln_tensor *dst; /* the node; dst->src[] are its inputs; dst->data is planned */
    int ith, nth;     /* this thread's index and the thread count */
    float *scratch;   /* this thread's scratch, kiln__cpu_scratch_floats(dst) floats */
} kiln_cpu_args;

typedef void (*kiln_cpu_kernel)(const kiln_cpu_args *a);

/* The kernel for an op, or NULL for views (which compute nothing). */
kiln_cpu_kernel kiln__cpu_kernel(kiln_op op);

/* Floats of per-thread scratch a node's kernel needs. */
size_t kiln__cpu_scratch_floats(const kiln_tensor *node);

/* Thread ith's share [*begin, *end) of n items. */
static inline void kiln__cpu_split(int64_t n, int ith, int nth, int64_t *begin, int64_t *end) {
    *begin = n * ith / nth;
    *end = n * (ith + 1) / nth;
}

/* Address of row (i1, i2, i3) of t. */
static inline char *kiln__cpu_row(const kiln_tensor *t, int64_t i1, int64_t i2, int64_t i3) {
    return (char *)t->data + i1 * (int64_t)t->nb[1] + i2 * (int64_t)t->nb[2] + i3 * (int64_t)t->nb[3];
}

/* Reference kernels. */
void kiln__cpu_get_rows(const kiln_cpu_args *a);
void kiln__cpu_rms_norm(const kiln_cpu_args *a);
void kiln__cpu_add(const kiln_cpu_args *a);
void kiln__cpu_mul(const kiln_cpu_args *a);
void kiln__cpu_matmul(const kiln_cpu_args *a);
void kiln__cpu_rope(const kiln_cpu_args *a);
void kiln__cpu_attention(const kiln_cpu_args *a);
void kiln__cpu_silu(const kiln_cpu_args *a);
void kiln__cpu_softmax(const kiln_cpu_args *a);
void kiln__cpu_cont(const kiln_cpu_args *a);
void kiln__cpu_cache_write(const kiln_cpu_args *a);

/* Shared row helpers. */
float kiln__cpu_dot_f32(const float *x, const float *y, int64_t n);
void kiln__cpu_softmax_row(float *x, int64_t n);

#endif
