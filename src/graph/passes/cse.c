/*
 * cse.c - common-subexpression elimination: two nodes with the same op, the same sources, the same
 * parameters and the same shape and layout compute the same values; later ones are replaced by the
 * first. Leaves that alias the same bytes with the same type, shape and strides are merged likewise
 * (a builder that makes a weight leaf per use). Input leaves are never merged (each is filled on its
 * own), and cache writes never are (each write happens once).
 */
#include "graph/passes/passes.h"
#include "graph/passes/match.h"

#include <string.h>

static bool same(const kiln_tensor *a, const kiln_tensor *b) {
    if (a->op != b->op || a->type != b->type || memcmp(a->ne, b->ne, sizeof a->ne) || memcmp(a->nb, b->nb, sizeof a->nb))
        return false;
    if (a->op == KILN_OP_NONE)
        return a->data && a->data == b->data && !(a->flags & (KILN_TENSOR_INPUT | KILN_TENSOR_CACHE)) &&
               (a->flags & ~KILN_TENSOR_OUTPUT) == (b->flags & ~KILN_TENSOR_OUTPUT);
    if (a->op == KILN_OP_CACHE_WRITE) return false; /* writes happen once each */
    return !memcmp(a->src, b->src, sizeof a->src) && !memcmp(a->ip, b->ip, sizeof a->ip) &&
           !memcmp(a->fp, b->fp, sizeof a->fp) && a->offset == b->offset;
}

/* Merge duplicate leaves read by the order. */
static kiln_status merge_leaves(kiln_graph *g, int32_t *n) {
    for (int32_t i = 0; i < kiln__graph_n_nodes(g); i++) {
        kiln_tensor *t = kiln__graph_node(g, i);
        for (int k = 0; k < KILN_MAX_SRC; k++) {
            kiln_tensor *leaf = t->src[k];
            if (!leaf || leaf->op != KILN_OP_NONE) continue;
            for (int32_t j = 0; j < kiln__graph_n_tensors(g); j++) {
                kiln_tensor *other = kiln__graph_tensor(g, j);
                if (other == leaf || other->id > leaf->id || !same(other, leaf) || !kiln__graph_uses(g, other)) continue;
                kiln_status s = pass_replace(g, leaf, other);
                if (s) return s;
                (*n)++;
                return merge_leaves(g, n);
            }
        }
    }
    return KILN_OK;
}

kiln_status kiln__pass_cse(kiln_graph *g, const kiln_pass_env *env, int32_t *n) {
    (void)env;
    *n = 0;
    kiln__graph_count_uses(g);
    kiln_status s = merge_leaves(g, n);
    if (s) return s;
    for (int32_t i = 0; i < kiln__graph_n_nodes(g); i++) {
        kiln_tensor *t = kiln__graph_node(g, i);
        for (int32_t j = 0; j < i; j++) {
            kiln_tensor *earlier = kiln__graph_node(g, j);
            if (!same(earlier, t)) continue;
            if ((s = pass_replace(g, t, earlier))) return s;
            (*n)++;
            i = -1; /* the order changed: scan again */
            break;
        }
    }
    return KILN_OK;
}
