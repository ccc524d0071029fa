/*
 * kernel_table.c - which kernel runs each op on the CPU, and how much per-thread scratch it needs.
 */
#include "backend/cpu/kernels.h"
#include "backend/cpu/kernels_arch.h"
#include "backend/cpu/kernels_fused.h"
#include "backend/cpu/kernels_kv.h"

#include <stdio.h>
#include <unistd.h>

kiln_cpu_kernel kiln__cpu_kernel(kiln_op op) {
    switch (op) {
    case KILN_OP_GET_ROWS: return kiln__cpu_get_rows;
    case KILN_OP_RMS_NORM: return kiln__cpu_rms_norm;
    case KILN_OP_ADD: return kiln__cpu_add;
    case KILN_OP_MUL: return kiln__cpu_mul;
    case KILN_OP_MATMUL: return kiln__cpu_matmul;
    case KILN_OP_ROPE: return kiln__cpu_rope;
    case KILN_OP_ATTENTION: return kiln__cpu_attention_kv; /* F32: flash; reference: kiln__cpu_attention */
    case KILN_OP_SILU: return kiln__cpu_silu;
    case KILN_OP_SOFTMAX: return kiln__cpu_softmax;
    case KILN_OP_CONT: return kiln__cpu_cont;
    case KILN_OP_CACHE_WRITE: return kiln__cpu_cache_write_kv;
    case KILN_OP_CAST: return kiln__cpu_cast;
    case KILN_OP_SCALE: return kiln__cpu_scale;
    case KILN_OP_TANH: return kiln__cpu_tanh;
    case KILN_OP_RELU: return kiln__cpu_relu;
    case KILN_OP_GELU: return kiln__cpu_gelu;
    case KILN_OP_CONCAT: return kiln__cpu_concat;
    case KILN_OP_LINEAR: return kiln__cpu_linear_fast; /* kiln__cpu_linear when transposed */
    case KILN_OP_ADD_ACT: return kiln__cpu_add_act;
    case KILN_OP_RMS_NORM_MUL: return kiln__cpu_rms_norm_mul;
    case KILN_OP_SWIGLU: return kiln__cpu_swiglu;
    case KILN_OP_SET: return kiln__cpu_set;
    case KILN_OP_ACC: return kiln__cpu_acc;
    case KILN_OP_NORM: return kiln__cpu_norm;
    case KILN_OP_SUB: return kiln__cpu_sub;
    case KILN_OP_DIV: return kiln__cpu_div;
    case KILN_OP_UNARY: return kiln__cpu_unary;
    case KILN_OP_WHERE: return kiln__cpu_where;
    case KILN_OP_REDUCE_MAX: return kiln__cpu_reduce_max;
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
    case KILN_OP_MATMUL: return kiln__cpu_matmul_scratch_floats(node);
    case KILN_OP_ATTENTION: return kiln__cpu_attention_kv_scratch_floats(node); /* key tile + acc, or scores */
    case KILN_OP_LINEAR: return kiln__cpu_matmul_scratch_floats(node); /* >= one dequantized weight row */
    case KILN_OP_ROPE: return (size_t)node->src[0]->ne[0] + 2; /* cos and sin of one position's angles */
    default: return 0;
    }
}

size_t kiln__cpu_shared_bytes(const kiln_tensor *node) {
    switch (node->op) {
    case KILN_OP_MATMUL:
    case KILN_OP_LINEAR: return kiln__cpu_matmul_shared_bytes(node); /* q8 activation rows */
    default: return 0;
    }
}

/* Read a small integer from a sysfs file; -1 when absent. */
static long read_sysfs_long(const char *path) {
    FILE *f = fopen(path, "r");
    long v = -1;
    if (!f) return -1;
    if (fscanf(f, "%ld", &v) != 1) v = -1;
    fclose(f);
    return v;
}

/* Physical cores among the online CPUs: distinct (package, core) pairs in sysfs topology, so SMT
 * siblings count once. Falls back to the online CPU count where the topology is not readable. */
int32_t kiln_default_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN), cores = 0;
    long seen[256][2];
    if (n < 1) return 1;
    if (n > 256) return 256;
    for (long cpu = 0; cpu < 4096 && cores >= 0; cpu++) {
        char path[96];
        long pkg, core;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%ld/topology/core_id", cpu);
        if ((core = read_sysfs_long(path)) < 0) {
            if (cpu >= n) break;
            continue; /* offline or hidden */
        }
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%ld/topology/physical_package_id", cpu);
        pkg = read_sysfs_long(path);
        bool dup = false;
        for (long i = 0; i < cores && !dup; i++) dup = seen[i][0] == pkg && seen[i][1] == core;
        if (!dup) {
            if (cores == 256) break;
            seen[cores][0] = pkg;
            seen[cores][1] = core;
            cores++;
        }
    }
    if (cores < 1 || cores > n) return (int32_t)n;
    return (int32_t)cores;
}
