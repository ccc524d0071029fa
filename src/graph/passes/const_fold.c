/*
 * const_fold.c - constant folding: a node whose sources are all constants (weights or folded leaves, or
 * views of them: a transposed weight), and
 * that depends on no input or cache, is evaluated once at compile time through the
 * environment's evaluator and replaced by a constant leaf holding the result. The merged QKV weight
 * (a concat of three weights) is the main customer.
 */
#include "graph/passes/passes.h"
#include "graph/passes/match.h"

static bool foldable(const kiln_tensor *t) {
    if (t->op == KILN_OP_NONE || kiln__op_is_view(t->op)) return false;
    for (int k = 0; k < KILN_MAX_SRC; k++)
        if (t->src[k] && !is_const_or_view(t->src[k])) return false;
    return true;
}

kiln_status kiln__pass_const_fold(kiln_graph *g, const kiln_pass_env *env, int32_t *n) {
    *n = 0;
    if (!env || !env->eval) return KILN_OK;
    kiln__graph_count_uses(g);
    for (int32_t i = 0; i < kiln__graph_n_nodes(g); i++) {
        kiln_tensor *t = kiln__graph_node(g, i);
        void *data = NULL;
        kiln_status s;
        if (!foldable(t) || (t->flags & KILN_TENSOR_OUTPUT)) continue;
        if ((s = env->eval(env->eval_user, t, &data))) return s;
        kiln_tensor *leaf = kiln__graph_leaf(g, t->name, t->type, t->n_dims, t->ne, data, KILN_TENSOR_CONST);
        if ((s = pass_replace(g, t, leaf))) return s;
        (*n)++;
        i = -1;
    }
    return KILN_OK;
}
