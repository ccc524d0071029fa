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

static bool fused(kiln_op op) { return (op >= KILN_OP_LINEAR && op < KILN_OP_SUB) || op == KILN_OP_ATTENTION; }

void kiln__graph_dump_dot(const kiln_graph *g, void (*write)(void *user, const char *line), void *user) {
    char line[512], shp[96];
    write(user, "digraph kiln {");
    write(user, "  rankdir=TB; node [fontname=\"monospace\", fontsize=10];");
    for (int32_t i = 0; i < g->n_order; i++) {
        const kiln_tensor *t = g->order[i];
        print_shape(shp, sizeof shp, t);
        snprintf(line, sizeof line, "  t%d [label=\"%s\\n%s\\n%s\"%s];", t->id, t->name, kiln__op_name(t->op), shp,
                 kiln__op_is_view(t->op) ? ", style=dashed" : fused(t->op) ? ", style=filled, fillcolor=lightblue" : "");
        write(user, line);
        for (int k = 0; k < KILN_MAX_SRC; k++) {
            const kiln_tensor *s = t->src[k];
            if (!s) continue;
            if (s->op == KILN_OP_NONE) {
                snprintf(line, sizeof line, "  t%d [label=\"%s\", shape=box, color=gray];", s->id, s->name);
                write(user, line);
            }
            snprintf(line, sizeof line, "  t%d -> t%d;", s->id, t->id);
            write(user, line);
        }
    }
    write(user, "}");
}
