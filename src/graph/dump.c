/*
 * dump.c - a readable text listing of a graph's execution order, one line per node:
 *
 *   #12 blk.0.attn_q          matmul     f32 [64, 5, 1, 1]  <- blk.0.attn_q.weight, blk.0.attn_norm
 */
#include "graph/graph_internal.h"

#include "tensor/types.h"

#include <stdio.h>

static int print_shape(char *buf, size_t cap, const kiln_tensor *t) {
    return snprintf(buf, cap, "%s [%lld, %lld, %lld, %lld]", kiln__type_name(t->type), (long long)t->ne[0],
                    (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3]);
}

void kiln__graph_dump(const kiln_graph *g, void (*write)(void *user, const char *line), void *user) {
    char line[512], shp[96];
    for (int32_t i = 0; i < g->n_order; i++) {
        const kiln_tensor *t = g->order[i];
        int n;
        print_shape(shp, sizeof shp, t);
        n = snprintf(line, sizeof line, "#%-4d %-28s %-11s %-30s <-", i, t->name, kiln__op_name(t->op), shp);
        for (int k = 0; k < KILN_MAX_SRC && n > 0 && (size_t)n < sizeof line; k++)
            if (t->src[k]) n += snprintf(line + n, sizeof line - (size_t)n, "%s %s", k ? "," : "", t->src[k]->name);
        write(user, line);
    }
}
