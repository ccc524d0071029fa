/*
 * rewrite.c - the primitives graph passes are written with: use counts over the execution order, and
 * replacing a node by another everywhere it is read, after which the order and every view (whose base,
 * offset and strides derive from its source) are brought up to date.
 */
#include "graph/graph_internal.h"

#include "core/core.h"

#include <string.h>

void kiln__graph_count_uses(kiln_graph *g) {
    memset(g->uses, 0, (size_t)g->n_tensors * sizeof *g->uses);
    for (int32_t i = 0; i < g->n_order; i++)
        for (int k = 0; k < KILN_MAX_SRC; k++)
            if (g->order[i]->src[k]) g->uses[g->order[i]->src[k]->id]++;
    for (int32_t i = 0; i < g->n_outputs; i++) g->uses[g->outputs[i]->id]++;
}

int32_t kiln__graph_uses(const kiln_graph *g, const kiln_tensor *t) { return g->uses[t->id]; }

kiln_status kiln__graph_replace(kiln_graph *g, kiln_tensor *old, kiln_tensor *repl) {
    kiln_status s;
    if (old == repl) return KILN_OK;
    for (int32_t i = 0; i < g->n_tensors; i++) {
        kiln_tensor *t = &g->tensors[i];
        if (t == repl) continue;
        for (int k = 0; k < KILN_MAX_SRC; k++)
            if (t->src[k] == old) t->src[k] = repl;
    }
    for (int32_t i = 0; i < g->n_outputs; i++)
        if (g->outputs[i] == old) {
            g->outputs[i] = repl;
            repl->flags |= KILN_TENSOR_OUTPUT;
        }
    if ((s = kiln__graph_order(g))) return s;
    for (int32_t i = 0; i < g->n_order; i++)
        if ((s = kiln__view_refresh(g->order[i])))
            return kiln__error_prefix(s, "after replacing '%s' by '%s': ", old->name, repl->name);
    return KILN_OK;
}
