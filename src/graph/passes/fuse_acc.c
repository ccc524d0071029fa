/*
 * fuse_acc.c - accumulate: set(d, add(view(d, R), x), R) -> acc(d, x, R), where R is one region (offset
 * and strides) of d. The plain form reads the region, adds, and writes a full copy of d with the region
 * replaced; acc adds into the region in one pass, and the planner runs it in place when d dies there.
 */
#include "graph/passes/passes.h"
#include "graph/passes/match.h"

#include <string.h>

/* v is a view of exactly the region that set t writes. */
static bool is_region_view(const kiln_tensor *v, const kiln_tensor *t) {
    if (!is_op(v, KILN_OP_VIEW) || v->src[0] != t->src[0] || v->offset != t->offset || v->nb[0] != sizeof(float))
        return false;
    for (int k = 0; k < 3; k++)
        if (v->ne[k + 1] > 1 && v->nb[k + 1] != (size_t)t->ip[k]) return false; /* strides of unit dims do not matter */
    return memcmp(v->ne, t->src[1]->ne, sizeof v->ne) == 0;
}

static kiln_tensor *fuse_one(kiln_graph *g, kiln_tensor *t) {
    kiln_tensor *sum = t->src[1];
    if (t->op != KILN_OP_SET || !is_op(sum, KILN_OP_ADD) || !only_use(g, sum)) return NULL;
    int k = is_region_view(sum->src[0], t) ? 0 : is_region_view(sum->src[1], t) ? 1 : -1;
    if (k < 0) return NULL;
    kiln_tensor *x = sum->src[1 - k];
    if (memcmp(x->ne, sum->ne, sizeof x->ne) != 0 || x->nb[0] != sizeof(float)) return NULL;
    size_t nb[3] = {(size_t)t->ip[0], (size_t)t->ip[1], (size_t)t->ip[2]};
    return kiln__acc(g, t->src[0], x, nb, t->offset);
}

kiln_status kiln__pass_fuse_acc(kiln_graph *g, const kiln_pass_env *env, int32_t *n) {
    (void)env;
    return rewrite_each(g, fuse_one, n);
}
