/*
 * simplify.c - algebraic simplification of views and copies:
 *   - a view (reshape, view, permute, transpose) with its source's exact shape, strides and no offset
 *     is the identity and is replaced by its source;
 *   - a reshape of a contiguous reshape reads the first reshape's source directly (chains collapse);
 *   - a permute of a permute becomes one permute with the composed axes, or nothing if they cancel;
 *   - a contiguous copy (cont) of a tensor that is already contiguous is dropped.
 */
#include "graph/passes/passes.h"
#include "graph/passes/match.h"

#include <string.h>

static bool same_layout(const kiln_tensor *a, const kiln_tensor *b) {
    return a->type == b->type && !memcmp(a->ne, b->ne, sizeof a->ne) && !memcmp(a->nb, b->nb, sizeof a->nb);
}

/* The replacement for t, or NULL when no rule applies. */
static kiln_tensor *simplify_one(kiln_graph *g, kiln_tensor *t) {
    kiln_tensor *x = t->src[0];
    if (kiln__op_is_view(t->op) && t->op != KILN_OP_CACHE_WRITE && t->offset == 0 && same_layout(t, x)) return x;
    if (t->op == KILN_OP_CONT && kiln__tensor_is_contiguous(x) && x->type == t->type) return x;
    if (t->op == KILN_OP_RESHAPE && is_op(x, KILN_OP_RESHAPE) && kiln__tensor_is_contiguous(x->src[0]))
        return kiln__reshape(g, x->src[0], t->n_dims, t->ne);
    if ((t->op == KILN_OP_PERMUTE || t->op == KILN_OP_TRANSPOSE) &&
        (is_op(x, KILN_OP_PERMUTE) || is_op(x, KILN_OP_TRANSPOSE))) {
        int32_t c[4];
        for (int d = 0; d < 4; d++) c[d] = t->ip[x->ip[d]];
        if (c[0] == 0 && c[1] == 1 && c[2] == 2 && c[3] == 3) return x->src[0];
        return kiln__permute(g, x->src[0], c[0], c[1], c[2], c[3]);
    }
    return NULL;
}

/* Outputs stay nodes: an output is never replaced by a leaf. */
static kiln_tensor *simplify_rule(kiln_graph *g, kiln_tensor *t) {
    kiln_tensor *repl = simplify_one(g, t);
    return repl && (t->flags & KILN_TENSOR_OUTPUT) && repl->op == KILN_OP_NONE ? NULL : repl;
}

kiln_status kiln__pass_simplify(kiln_graph *g, const kiln_pass_env *env, int32_t *n) {
    (void)env;
    return rewrite_each(g, simplify_rule, n);
}
