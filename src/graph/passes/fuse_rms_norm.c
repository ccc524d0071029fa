/*
 * fuse_rms_norm.c - rms_norm(x) * w -> rms_norm_mul(x, w): one pass over each row instead of two, and no
 * intermediate tensor. The product is computed in the same order, so results are unchanged.
 */
#include "graph/passes/passes.h"
#include "graph/passes/match.h"

static kiln_tensor *fuse_one(kiln_graph *g, kiln_tensor *t) {
    if (t->op != KILN_OP_MUL) return NULL;
    kiln_tensor *norm = t->src[0], *w = t->src[1];
    if (!is_op(norm, KILN_OP_RMS_NORM) || !only_use(g, norm) || norm->src[0]->nb[0] != sizeof(float)) return NULL;
    return kiln__rms_norm_mul(g, norm->src[0], w, norm->fp[0]);
}

kiln_status kiln__pass_fuse_rms_norm(kiln_graph *g, const kiln_pass_env *env, int32_t *n) {
    (void)env;
    return rewrite_each(g, fuse_one, n);
}
