/*
 * fuse_qkv.c - merge the three projections of one input (Q, K and V of an attention block) into one
 * matmul against the concatenation of their weights, and read the three results as views:
 *
 *   matmul(Wq, x), matmul(Wk, x), matmul(Wv, x)  ->  M = matmul(concat(Wq, Wk, Wv), x); views of M's rows
 *
 * The concatenation is a constant subgraph: constant folding evaluates it once (zero-copy when the file
 * already stores the three weights back to back, as llama.cpp's converter does). Only groups of exactly
 * three 2-D projections with weights of one type and a 2-D input are merged, and only when every reader
 * accepts a strided view of the result.
 */
#include "graph/passes/passes.h"
#include "graph/passes/match.h"

/* Every reader of t must accept a strided view of t: computing ops read rows through their strides,
 * and a reshape may only regroup within a row (split dim 0) while keeping the columns. */
static bool readers_accept_views(const kiln_graph *g, const kiln_tensor *t) {
    for (int32_t i = 0; i < kiln__graph_n_nodes(g); i++) {
        const kiln_tensor *r = kiln__graph_node(g, i);
        bool reads = false;
        for (int k = 0; k < KILN_MAX_SRC; k++) reads |= r->src[k] == t;
        if (!reads || !kiln__op_is_view(r->op) || r->op == KILN_OP_CACHE_WRITE) continue;
        if (r->op != KILN_OP_RESHAPE || r->src[0] != t) return false;
        bool split = r->ne[0] * r->ne[1] == t->ne[0] && r->ne[2] == t->ne[1] && r->ne[3] == 1;
        bool same_rows = r->ne[0] == t->ne[0];
        if (!split && !same_rows) return false;
    }
    return !(t->flags & KILN_TENSOR_OUTPUT);
}

static bool candidate(const kiln_graph *g, const kiln_tensor *t) {
    const kiln_tensor *w = t->src[0], *x = t->src[1];
    return is_op(t, KILN_OP_MATMUL) && is_const(w) && w->ne[2] == 1 && w->ne[3] == 1 &&
           kiln__tensor_is_contiguous(w) && x->ne[2] == 1 && x->ne[3] == 1 && readers_accept_views(g, t);
}

/* Find two more candidates after position i reading the same input with compatible weights. The cheap
 * tests come first: candidate() scans the graph for the node's readers. */
static bool find_group(const kiln_graph *g, int32_t i, kiln_tensor *group[3]) {
    int32_t found = 1;
    group[0] = kiln__graph_node(g, i);
    for (int32_t j = i + 1; j < kiln__graph_n_nodes(g) && found < 3; j++) {
        kiln_tensor *t = kiln__graph_node(g, j);
        if (is_op(t, KILN_OP_MATMUL) && t->src[1] == group[0]->src[1] && t->src[0]->type == group[0]->src[0]->type &&
            t->src[0]->ne[0] == group[0]->src[0]->ne[0] && candidate(g, t))
            group[found++] = t;
    }
    return found == 3;
}

kiln_status kiln__pass_fuse_qkv(kiln_graph *g, const kiln_pass_env *env, int32_t *n) {
    (void)env;
    *n = 0;
    kiln__graph_count_uses(g);
    for (int32_t i = 0; i < kiln__graph_n_nodes(g); i++) {
        kiln_tensor *group[3];
        if (!candidate(g, kiln__graph_node(g, i)) || !find_group(g, i, group)) continue;
        kiln_tensor *x = group[0]->src[1];
        kiln_tensor *w = kiln__concat(g, group[0]->src[0], group[1]->src[0], group[2]->src[0]);
        kiln_tensor *merged = kiln__tensor_set_name(kiln__matmul(g, w, x), "%s+qkv", group[0]->name);
        if (!merged) return kiln__graph_status(g);
        size_t offset = 0;
        for (int k = 0; k < 3; k++) {
            int64_t ne[2] = {group[k]->ne[0], x->ne[1]};
            size_t nb[2] = {sizeof(float), merged->nb[1]};
            kiln_tensor *view = kiln__view(g, merged, 2, ne, nb, offset);
            offset += (size_t)group[k]->ne[0] * sizeof(float);
            kiln_status s = pass_replace(g, group[k], kiln__tensor_set_name(view, "%s", group[k]->name));
            if (s) return s;
        }
        (*n)++;
        i = -1;
    }
    return KILN_OK;
}
