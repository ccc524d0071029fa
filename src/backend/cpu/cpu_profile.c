/*
 * cpu_profile.c - the CPU backend's kernel profile (cpu_profile.h). Thread 0 reads the clock before a
 * node's kernel and after the barrier every thread passes at its end, so a node's time is its wall time on
 * the whole pool, waits for the slowest thread included; the clock is read only while profiling.
 */
#include "backend/cpu/cpu_profile.h"

#include "core/core.h"

#include "tensor/types.h"

#include <stdio.h>
#include <string.h>

void kiln__cpu_profile_set(kiln_cpu_profile *p, bool on) {
    if (on) memset(p, 0, sizeof *p);
    p->on = on;
}

static bool reads_weight(kiln_op op) {
    return op == KILN_OP_MATMUL || op == KILN_OP_LINEAR || op == KILN_OP_GET_ROWS;
}

void kiln__cpu_profile_node(kiln_cpu_profile *p, const kiln_tensor *node, uint64_t ns) {
    kiln_type type = reads_weight(node->op) && node->src[0] ? node->src[0]->type : KILN_TYPE_F32;
    int32_t i = 0;
    while (i < p->n_rows && (p->rows[i].op != node->op || p->rows[i].type != type))
        i++;
    if (i == p->n_rows) {
        if (i == KILN_PROFILE_KERNELS) {
            p->unattributed++;
            return;
        }
        p->rows[p->n_rows++] = (struct kiln_cpu_profile_row){.op = node->op, .type = type};
    }
    p->rows[i].calls++;
    p->rows[i].ns += ns;
}

void kiln__cpu_profile_read(const kiln_cpu_profile *p, kiln_device_profile *out) {
    out->computes = p->computes;
    out->recorded = 0;
    out->record_ns = p->prepare_ns;
    out->submit_ns = p->run_ns;
    out->unattributed = p->unattributed;
    out->kernel_ns = 0;
    out->n_kernels = 0;
    for (int32_t i = 0; i < p->n_rows; i++) {
        kiln_kernel_time *k = &out->kernels[out->n_kernels++];
        if (reads_weight(p->rows[i].op))
            snprintf(k->name, sizeof k->name, "%s %s", kiln__op_name(p->rows[i].op), kiln__type_name(p->rows[i].type));
        else
            snprintf(k->name, sizeof k->name, "%s", kiln__op_name(p->rows[i].op));
        k->calls = p->rows[i].calls;
        k->ns = p->rows[i].ns;
        out->kernel_ns += k->ns;
    }
}
