/*
 * match.h - small helpers the passes use to recognize patterns: op tests, single-use checks, and the
 * replace-and-recount step every rewrite ends with.
 */
#ifndef KILN_PASSES_MATCH_H
#define KILN_PASSES_MATCH_H

#include "graph/graph.h"

#include <math.h>

static inline bool is_op(const kiln_tensor *t, kiln_op op) { return t && t->op == op; }

/* t is read by exactly one node and is not an output: fusing it away loses nothing. */
static inline bool only_use(const kiln_graph *g, const kiln_tensor *t) {
    return t && kiln__graph_uses(g, t) == 1 && !(t->flags & KILN_TENSOR_OUTPUT);
}

static inline bool near(float a, float b) { return fabsf(a - b) <= 1e-6f * fmaxf(1.0f, fabsf(b)); }

static inline bool is_permute(const kiln_tensor *t, int a0, int a1, int a2, int a3) {
    return (is_op(t, KILN_OP_PERMUTE) || is_op(t, KILN_OP_TRANSPOSE)) && t->ip[0] == a0 && t->ip[1] == a1 &&
           t->ip[2] == a2 && t->ip[3] == a3;
}

/* A constant: a weight or a folded constant leaf. */
static inline bool is_const(const kiln_tensor *t) {
    return t->op == KILN_OP_NONE && (t->flags & (KILN_TENSOR_WEIGHT | KILN_TENSOR_CONST));
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

#endif
