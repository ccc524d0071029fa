/*
 * kernel_table.c - which kernel runs each op on the CPU, and how much per-thread scratch it needs.
 */
#include "backend/cpu/kernels.h"

#include <unistd.h>

kiln_cpu_kernel kiln__cpu_kernel(kiln_op op) {
    switch (op) {
    case KILN_OP_GET_ROWS: return kiln__cpu_get_rows;
    case KILN_OP_RMS_NORM: return kiln__cpu_rms_norm;
    case KILN_OP_ADD: return kiln__cpu_add;
    case KILN_OP_MUL: return kiln__cpu_mul;
    case KILN_OP_MATMUL: return kiln__cpu_matmul;
    case KILN_OP_ROPE: return kiln__cpu_rope;
    case KILN_OP_ATTENTION: return kiln__cpu_attention;
    case KILN_OP_SILU: return kiln__cpu_silu;
    case KILN_OP_SOFTMAX: return kiln__cpu_softmax;
    case KILN_OP_CONT: return kiln__cpu_cont;
    case KILN_OP_CACHE_WRITE: return kiln__cpu_cache_write;
    case KILN_OP_NONE:
    case KILN_OP_RESHAPE:
    case KILN_OP_VIEW:
    case KILN_OP_PERMUTE:
    case KILN_OP_TRANSPOSE:
    case KILN_OP_COUNT: break;
    }
    return NULL;
}

size_t kiln__cpu_scratch_floats(const kiln_tensor *node) {
    switch (node->op) {
    case KILN_OP_MATMUL: return (size_t)node->src[0]->ne[0];   /* one dequantized weight row */
    case KILN_OP_ATTENTION: return (size_t)node->src[1]->ne[2]; /* scores over all keys */
    default: return 0;
    }
}

int32_t kiln_default_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) return 1;
    return n > 256 ? 256 : (int32_t)n;
}
