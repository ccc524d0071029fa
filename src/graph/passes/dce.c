/*
 * dce.c - dead-code elimination: recompute the execution order from the outputs, so nodes and constants
 * that reach no output are neither computed nor planned. Reports how many nodes it dropped.
 */
#include "graph/passes/passes.h"

kiln_status kiln__pass_dce(kiln_graph *g, const kiln_pass_env *env, int32_t *n) {
    int32_t before = kiln__graph_n_nodes(g);
    kiln_status s = kiln__graph_order(g);
    (void)env;
    *n = before > kiln__graph_n_nodes(g) ? before - kiln__graph_n_nodes(g) : 0;
    return s;
}
