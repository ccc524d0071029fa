/*
 * fuse_rms_norm.c - rms_norm(x) * w -> rms_norm_mul(x, w): one pass over each row instead of two, and no
 * intermediate tensor. The product is computed in the same order, so results are unchanged.
 */
#include "graph/passes/passes.h"
#include "graph/passes/match.h"

kiln_status kiln__pass_fuse_rms_norm(kiln_graph *g, const kiln_pass_env *env, int32_t *n) {
    (void)env;
    *n = 0;
    kiln__graph_count_uses(g);
    for (int32_t i = 0; i < kiln__graph_n_nodes(g); i++) {
        kiln_tensor *t = kiln__graph_node(g, i);
        if (t->op != KILN_OP_MUL) continue;
        kiln_tensor *norm = t->src[0], *w = t->src[1];
        if (!is_op(norm, KILN_OP_RMS_NORM) || !only_use(g, norm) || norm->src[0]->nb[0] != sizeof(float)) continue;
        kiln_status s = pass_replace(g, t, kiln__rms_norm_mul(g, norm->src[0], w, norm->fp[0]));
        if (s) return s;
        (*n)++;
        i = -1;
    }
    return KILN_OK;
}
