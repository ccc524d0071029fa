/*
 * cpu_profile.h - the CPU backend's part of kiln_model_profile: each kernel node's wall time on the pool,
 * from its start on thread 0 to the barrier that ends it, summed per op (and weight type for the ops that
 * read a weight).
 */
#ifndef KILN_CPU_PROFILE_H
#define KILN_CPU_PROFILE_H

#include "graph/graph.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct kiln_cpu_profile {
    bool on;
    int32_t n_rows;
    struct kiln_cpu_profile_row {
        kiln_op op;
        kiln_type type; /* the weight's, for matmul, linear and get_rows; else KILN_TYPE_F32 */
        uint64_t calls, ns;
    } rows[KILN_PROFILE_KERNELS];
    uint64_t computes, prepare_ns, run_ns, unattributed;
} kiln_cpu_profile;

/* Start (counters cleared) or stop. */
void kiln__cpu_profile_set(kiln_cpu_profile *p, bool on);
/* One node's time, added to its row (a new row while there is room, else unattributed). */
void kiln__cpu_profile_node(kiln_cpu_profile *p, const kiln_tensor *node, uint64_t ns);
/* The counters as kiln.h's profile: prepare_ns as record_ns (packing weights, growing scratch), run_ns as
 * submit_ns (the pool's run), rows named "matmul q4_0", "rms_norm_mul". */
void kiln__cpu_profile_read(const kiln_cpu_profile *p, kiln_device_profile *out);

#endif
