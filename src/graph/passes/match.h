/*
 * match.h - small helpers the passes use to recognize patterns: op tests, single-use checks, and the
 * replace-and-recount step every rewrite ends with.
 */
#ifndef KILN_PASSES_MATCH_H
#define KILN_PASSES_MATCH_H

#include "graph/graph.h"

#include <math.h>

static inline bool is_op(const kiln_tensor *t, kiln_op op) {
    return t && t->op == op;
}

/* t is read by exactly one node and is not an output: fusing it away loses nothing. */
static inline bool only_use(const kiln_graph *g, const kiln_tensor *t) {
    return t && kiln__graph_uses(g, t) == 1 && !(t->flags & KILN_TENSOR_OUTPUT);
}

static inline bool near(float a, float b) {
    return fabsf(a - b) <= 1e-6f * fmaxf(1.0f, fabsf(b));
}

static inline bool is_permute(const kiln_tensor *t, int a0, int a1, int a2, int a3) {
    return (is_op(t, KILN_OP_PERMUTE) || is_op(t, KILN_OP_TRANSPOSE)) && t->ip[0] == a0 && t->ip[1] == a1 &&
           t->ip[2] == a2 && t->ip[3] == a3;
}

/* A constant: a weight or a folded constant leaf. */
static inline bool is_const(const kiln_tensor *t) {
    return t->op == KILN_OP_NONE && (t->flags & (KILN_TENSOR_WEIGHT | KILN_TENSOR_CONST));
}

/* A constant, or a view of one (a transposed or reshaped weight): constant folding evaluates nodes over
 * these once. */
static inline bool is_const_or_view(const kiln_tensor *t) {
    if (is_const(t)) return true;
    return kiln__op_is_view(t->op) && t->view_src && is_const(t->view_src);
}

/* Replace old by repl (see kiln__graph_replace) and recount uses. Passes scan the order from the start
 * again after each rewrite: the order changed, and patterns are consumed, so the scan ends. */
static inline kiln_status pass_replace(kiln_graph *g, kiln_tensor *old, kiln_tensor *repl) {
    kiln_status s;
    if (!repl) return kiln__graph_status(g) ? kiln__graph_status(g) : KILN_E_INTERNAL;
    s = kiln__graph_replace(g, old, repl);
    kiln__graph_count_uses(g);
    return s;
}

/* A rewrite rule: the replacement for node t, or NULL when the rule does not apply (a builder error in
 * the graph status means the rule failed). */
typedef kiln_tensor *(*rewrite_rule)(kiln_graph *g, kiln_tensor *t);

/* The loop most passes are: apply `rule` to every node of the order, replacing each node it rewrites and
 * scanning again from the start; *n counts the rewrites. */
static inline kiln_status rewrite_each(kiln_graph *g, rewrite_rule rule, int32_t *n) {
    *n = 0;
    kiln__graph_count_uses(g);
    for (int32_t i = 0; i < kiln__graph_n_nodes(g); i++) {
        kiln_tensor *t = kiln__graph_node(g, i);
        kiln_tensor *repl = rule(g, t);
        if (!repl) {
            if (kiln__graph_status(g)) return kiln__graph_status(g);
            continue;
        }
        kiln_status s = pass_replace(g, t, repl);
        if (s) return s;
        (*n)++;
        i = -1;
    }
    return KILN_OK;
}

#endif
