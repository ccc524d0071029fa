/*
 * fuse_swiglu.c - silu(gate) * up -> swiglu(gate, up), the gated feed-forward of Llama-family models,
 * when gate and up have the same shape and the silu feeds nothing else.
 */
#include "graph/passes/passes.h"
#include "graph/passes/match.h"

#include <string.h>

kiln_status kiln__pass_fuse_swiglu(kiln_graph *g, const kiln_pass_env *env, int32_t *n) {
    (void)env;
    *n = 0;
    kiln__graph_count_uses(g);
    for (int32_t i = 0; i < kiln__graph_n_nodes(g); i++) {
        kiln_tensor *t = kiln__graph_node(g, i);
        if (t->op != KILN_OP_MUL) continue;
        int k = is_op(t->src[0], KILN_OP_SILU) ? 0 : is_op(t->src[1], KILN_OP_SILU) ? 1 : -1;
        if (k < 0) continue;
        kiln_tensor *silu = t->src[k], *up = t->src[1 - k];
        if (!only_use(g, silu) || memcmp(silu->ne, up->ne, sizeof up->ne) != 0) continue;
        kiln_status s = pass_replace(g, t, kiln__swiglu(g, silu->src[0], up));
        if (s) return s;
        (*n)++;
        i = -1;
    }
    return KILN_OK;
}
