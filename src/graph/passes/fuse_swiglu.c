/*
 * fuse_swiglu.c - silu(gate) * up -> swiglu(gate, up), the gated feed-forward of Llama-family models,
 * when gate and up have the same shape and the silu feeds nothing else.
 */
#include "graph/passes/passes.h"
#include "graph/passes/match.h"

#include <string.h>

static kiln_tensor *fuse_one(kiln_graph *g, kiln_tensor *t) {
    if (t->op != KILN_OP_MUL) return NULL;
    int k = is_op(t->src[0], KILN_OP_SILU) ? 0 : is_op(t->src[1], KILN_OP_SILU) ? 1 : -1;
    if (k < 0) return NULL;
    kiln_tensor *silu = t->src[k], *up = t->src[1 - k];
    if (!only_use(g, silu) || memcmp(silu->ne, up->ne, sizeof up->ne) != 0) return NULL;
    return kiln__swiglu(g, silu->src[0], up);
}

kiln_status kiln__pass_fuse_swiglu(kiln_graph *g, const kiln_pass_env *env, int32_t *n) {
    (void)env;
    return rewrite_each(g, fuse_one, n);
}
