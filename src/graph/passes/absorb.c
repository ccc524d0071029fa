/*
 * absorb.c - BLAS-flag absorption: fold what a GEMM call can do for free into the linear op.
 *   scale(matmul(w, x), s)            -> linear(w, x, alpha = s)
 *   scale(linear(..., alpha), s)      -> linear(..., alpha * s)        (no bias, no activation)
 *   matmul(cont(P), x), P a permute   -> linear(P^T, x, TRANS0): read P through its strides, no copy
 * The transposed form needs P's second dimension to be contiguous (f32 rows of the transposed view). A
 * permute of a constant (an imported MatMul's weight, stored [K, N] and read as [N, K]) is left to
 * constant folding, which makes the copy once: the product then runs on the weight kernels.
 */
#include "graph/passes/passes.h"
#include "graph/passes/match.h"

static kiln_tensor *absorb_one(kiln_graph *g, kiln_tensor *t) {
    kiln_tensor *x = t->src[0];
    if (t->op == KILN_OP_SCALE && t->fp[1] == 0.0f && only_use(g, x)) {
        if (is_op(x, KILN_OP_MATMUL)) return kiln__linear(g, x->src[0], x->src[1], NULL, t->fp[0], KILN_ACT_NONE, 0);
        if (is_op(x, KILN_OP_LINEAR) && !x->src[2] && x->ip[0] == KILN_ACT_NONE)
            return kiln__linear(g, x->src[0], x->src[1], NULL, x->fp[0] * t->fp[0], KILN_ACT_NONE, x->ip[1]);
    }
    if (t->op == KILN_OP_MATMUL && is_op(x, KILN_OP_CONT) && only_use(g, x) && x->type == KILN_TYPE_F32) {
        kiln_tensor *p = x->src[0];
        if ((is_op(p, KILN_OP_PERMUTE) || is_op(p, KILN_OP_TRANSPOSE)) && p->nb[1] == sizeof(float) &&
            !is_const_or_view(p))
            return kiln__linear(g, kiln__permute(g, p, 1, 0, 2, 3), t->src[1], NULL, 1.0f, KILN_ACT_NONE,
                                KILN_LINEAR_TRANS0);
    }
    return NULL;
}

kiln_status kiln__pass_absorb(kiln_graph *g, const kiln_pass_env *env, int32_t *n) {
    (void)env;
    return rewrite_each(g, absorb_one, n);
}
