/*
 * fuse_linear.c - epilogue fusions of projections and bias adds:
 *   add(matmul(w, x), b)          -> linear(w, x, bias = b)     b an f32 vector [N]
 *   add(linear(w, x), b)          -> linear(w, x, bias = b)     (no bias or activation yet)
 *   act(linear(w, x, b))          -> linear(w, x, b, act)       act = relu, gelu, silu
 *   act(add(a, b))                -> add_act(a, b, act)
 * so "matmul + add + GELU" becomes one node.
 */
#include "graph/passes/passes.h"
#include "graph/passes/match.h"

static int32_t act_of(const kiln_tensor *t) {
    return t->op == KILN_OP_RELU ? KILN_ACT_RELU : t->op == KILN_OP_GELU ? KILN_ACT_GELU
           : t->op == KILN_OP_SILU ? KILN_ACT_SILU : KILN_ACT_NONE;
}

static bool is_bias_for(const kiln_tensor *b, const kiln_tensor *m) {
    return b->type == KILN_TYPE_F32 && b->ne[0] == m->ne[0] && kiln__tensor_nelements(b) == b->ne[0] &&
           b->nb[0] == sizeof(float);
}

static kiln_tensor *fuse_one(kiln_graph *g, kiln_tensor *t) {
    kiln_tensor *x = t->src[0];
    if (t->op == KILN_OP_ADD) {
        for (int k = 0; k < 2; k++) {
            kiln_tensor *m = t->src[k], *b = t->src[1 - k];
            if (!only_use(g, m) || !is_bias_for(b, m)) continue;
            if (is_op(m, KILN_OP_MATMUL)) return kiln__linear(g, m->src[0], m->src[1], b, 1.0f, KILN_ACT_NONE, 0);
            if (is_op(m, KILN_OP_LINEAR) && !m->src[2] && m->ip[0] == KILN_ACT_NONE)
                return kiln__linear(g, m->src[0], m->src[1], b, m->fp[0], KILN_ACT_NONE, m->ip[1]);
        }
        return NULL;
    }
    int32_t act = act_of(t);
    if (act == KILN_ACT_NONE || !only_use(g, x)) return NULL;
    if (is_op(x, KILN_OP_LINEAR) && x->ip[0] == KILN_ACT_NONE)
        return kiln__linear(g, x->src[0], x->src[1], x->src[2], x->fp[0], act, x->ip[1]);
    if (is_op(x, KILN_OP_ADD)) return kiln__add_act(g, x->src[0], x->src[1], act);
    return NULL;
}

kiln_status kiln__pass_fuse_linear(kiln_graph *g, const kiln_pass_env *env, int32_t *n) {
    (void)env;
    return rewrite_each(g, fuse_one, n);
}
