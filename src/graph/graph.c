/*
 * graph.c - the tensor pool, leaves, outputs, topological order and validation of the graph IR.
 * Op constructors and their shape rules live in ops.c; the text dump in dump.c.
 */
#include "graph/graph_internal.h"

#include "core/core.h"
#include "tensor/types.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

kiln_status kiln__graph_create(int32_t capacity, kiln_graph **out) {
    kiln_graph *g;
    *out = NULL;
    if (capacity <= 0) return kiln__error(KILN_E_INVALID_ARG, "graph capacity %d must be positive", capacity);
    g = kiln__calloc(1, sizeof *g);
    if (!g) return kiln__nomem("a graph");
    g->tensors = kiln__calloc((size_t)capacity, sizeof *g->tensors);
    g->order = kiln__alloc_array((size_t)capacity, sizeof *g->order);
    g->outputs = kiln__alloc_array((size_t)capacity, sizeof *g->outputs);
    g->mark = kiln__alloc_array((size_t)capacity, sizeof *g->mark);
    g->stack = kiln__alloc_array((size_t)capacity, sizeof *g->stack);
    g->uses = kiln__alloc_array((size_t)capacity, sizeof *g->uses);
    if (!g->tensors || !g->order || !g->outputs || !g->mark || !g->stack || !g->uses) {
        kiln__graph_destroy(g);
        return kiln__nomem("a graph's tensor pool");
    }
    g->capacity = capacity;
    g->layer = -1;
    *out = g;
    return KILN_OK;
}

void kiln__graph_destroy(kiln_graph *g) {
    if (!g) return;
    kiln__dealloc(g->tensors);
    kiln__dealloc(g->order);
    kiln__dealloc(g->outputs);
    kiln__dealloc(g->mark);
    kiln__dealloc(g->stack);
    kiln__dealloc(g->uses);
    kiln__dealloc(g);
}

void kiln__graph_reset(kiln_graph *g) {
    g->n_tensors = 0;
    g->n_order = 0;
    g->n_outputs = 0;
    g->status = KILN_OK;
    g->layer = -1;
}

void kiln__graph_set_layer(kiln_graph *g, int32_t layer) {
    g->layer = layer < 0 ? -1 : layer;
}

kiln_status kiln__graph_status(const kiln_graph *g) { return g->status; }

kiln_tensor *kiln__graph_fail(kiln_graph *g, kiln_status status, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    if (g->status != KILN_OK) return NULL; /* keep the first error */
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    g->status = kiln__error(status, "%s", msg);
    return NULL;
}

kiln_tensor *kiln__graph_new_tensor(kiln_graph *g, kiln_type type, int32_t n_dims, const int64_t *ne) {
    kiln_tensor *t;
    const kiln_type_traits *tr = kiln__type_traits(type);
    if (g->status != KILN_OK) return NULL;
    if (n_dims < 1 || n_dims > KILN_MAX_DIMS)
        return kiln__graph_fail(g, KILN_E_INVALID_ARG, "tensor with %d dims (1..4 allowed)", n_dims);
    if (!tr->known) return kiln__graph_fail(g, KILN_E_INVALID_ARG, "tensor of unknown type %d", (int)type);
    if (g->n_tensors >= g->capacity)
        return kiln__graph_fail(g, KILN_E_RANGE, "graph is full (%d tensors)", g->capacity);
    t = &g->tensors[g->n_tensors];
    memset(t, 0, sizeof *t);
    t->id = g->n_tensors++;
    t->layer = g->layer;
    t->type = type;
    t->n_dims = n_dims;
    for (int d = 0; d < KILN_MAX_DIMS; d++) {
        t->ne[d] = d < n_dims ? ne[d] : 1;
        if (t->ne[d] <= 0)
            return kiln__graph_fail(g, KILN_E_INVALID_ARG, "tensor dim %d is %lld (must be > 0)", d,
                                    (long long)t->ne[d]);
    }
    if (t->ne[0] % tr->block_elems != 0)
        return kiln__graph_fail(g, KILN_E_INVALID_ARG, "row of %lld elements is not a multiple of the %s block %lld",
                                (long long)t->ne[0], tr->name, (long long)tr->block_elems);
    t->nb[0] = tr->block_bytes;
    t->nb[1] = tr->block_bytes * (size_t)(t->ne[0] / tr->block_elems);
    for (int d = 2; d < KILN_MAX_DIMS; d++) t->nb[d] = t->nb[d - 1] * (size_t)t->ne[d - 1];
    return t;
}

kiln_tensor *kiln__graph_leaf(kiln_graph *g, const char *name, kiln_type type, int32_t n_dims,
                              const int64_t *ne, void *data, uint32_t flags) {
    kiln_tensor *t = kiln__graph_new_tensor(g, type, n_dims, ne);
    if (!t) return NULL;
    t->data = data;
    t->flags = flags;
    kiln__tensor_set_name(t, "%s", name ? name : "");
    return t;
}

kiln_tensor *kiln__tensor_set_name(kiln_tensor *t, const char *fmt, ...) {
    va_list ap;
    if (!t) return NULL;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    return t;
}

void kiln__graph_set_output(kiln_graph *g, kiln_tensor *t) {
    if (!t || g->status != KILN_OK) return;
    t->flags |= KILN_TENSOR_OUTPUT;
    g->outputs[g->n_outputs++] = t; /* n_outputs <= n_tensors <= capacity */
}

/* Depth-first post-order from every output, with an explicit stack (graphs can be deep). mark: 0 =
 * unvisited, 1 = on the stack, 2 = emitted. */
static kiln_status visit(kiln_graph *g, kiln_tensor *root) {
    int32_t sp = 0;
    if (g->mark[root->id]) return KILN_OK;
    g->stack[sp++] = root;
    g->mark[root->id] = 1;
    while (sp > 0) {
        kiln_tensor *t = g->stack[sp - 1];
        kiln_tensor *next = NULL;
        for (int i = 0; i < KILN_MAX_SRC && !next; i++) {
            kiln_tensor *s = t->src[i];
            if (!s) continue;
            if (g->mark[s->id] == 1)
                return kiln__error(KILN_E_INTERNAL, "graph has a cycle through '%s'", s->name);
            if (g->mark[s->id] == 0) next = s;
        }
        if (next) {
            g->mark[next->id] = 1;
            g->stack[sp++] = next;
            continue;
        }
        g->mark[t->id] = 2;
        sp--;
        if (t->op != KILN_OP_NONE) g->order[g->n_order++] = t;
    }
    return KILN_OK;
}

kiln_status kiln__graph_order(kiln_graph *g) {
    if (g->status != KILN_OK) return g->status;
    memset(g->mark, 0, (size_t)g->n_tensors * sizeof *g->mark);
    g->n_order = 0;
    for (int32_t i = 0; i < g->n_outputs; i++) {
        kiln_status s = visit(g, g->outputs[i]);
        if (s) return s;
    }
    return KILN_OK;
}

kiln_status kiln__graph_validate(const kiln_graph *g) {
    if (g->status != KILN_OK) return g->status;
    for (int32_t i = 0; i < g->n_order; i++) {
        const kiln_tensor *t = g->order[i];
        kiln_status s;
        for (int k = 0; k < KILN_MAX_SRC; k++) {
            const kiln_tensor *src = t->src[k];
            bool earlier = false;
            if (!src || src->op == KILN_OP_NONE) continue;
            for (int32_t j = 0; j < i && !earlier; j++) earlier = g->order[j] == src;
            if (!earlier)
                return kiln__error(KILN_E_INTERNAL, "node %d '%s': source '%s' is not computed before it", i,
                                   t->name, src->name);
        }
        s = kiln__op_check(t);
        if (s) return kiln__error_prefix(s, "node %d '%s' (%s): ", i, t->name, kiln__op_name(t->op));
    }
    return KILN_OK;
}

int32_t kiln__graph_n_nodes(const kiln_graph *g) { return g->n_order; }
kiln_tensor *kiln__graph_node(const kiln_graph *g, int32_t i) { return g->order[i]; }
int32_t kiln__graph_n_tensors(const kiln_graph *g) { return g->n_tensors; }
kiln_tensor *kiln__graph_tensor(const kiln_graph *g, int32_t i) { return &g->tensors[i]; }
int32_t kiln__graph_n_outputs(const kiln_graph *g) { return g->n_outputs; }
kiln_tensor *kiln__graph_output(const kiln_graph *g, int32_t i) { return g->outputs[i]; }

int64_t kiln__tensor_nelements(const kiln_tensor *t) { return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]; }
int64_t kiln__tensor_nrows(const kiln_tensor *t) { return t->ne[1] * t->ne[2] * t->ne[3]; }

bool kiln__tensor_is_contiguous(const kiln_tensor *t) {
    const kiln_type_traits *tr = kiln__type_traits(t->type);
    size_t expect = tr->block_bytes;
    if (t->nb[0] != expect) return false;
    expect *= (size_t)(t->ne[0] / tr->block_elems);
    for (int d = 1; d < KILN_MAX_DIMS; d++) {
        if (t->ne[d] != 1 && t->nb[d] != expect) return false;
        expect *= (size_t)t->ne[d];
    }
    return true;
}

size_t kiln__tensor_nbytes(const kiln_tensor *t) {
    const kiln_type_traits *tr = kiln__type_traits(t->type);
    return tr->block_bytes * (size_t)(t->ne[0] / tr->block_elems) * (size_t)kiln__tensor_nrows(t);
}

size_t kiln__tensor_span(const kiln_tensor *t) {
    const kiln_type_traits *tr = kiln__type_traits(t->type);
    size_t total, step;
    for (int d = 0; d < KILN_MAX_DIMS; d++)
        if (t->ne[d] <= 0) return 0;
    if (t->ne[0] < tr->block_elems) return 0; /* no whole block, as kiln__tensor_nbytes counts */
    /* The first row up to its last block, then each further dimension's last index. */
    if (kiln__mul_overflow_size((size_t)(t->ne[0] / tr->block_elems - 1), t->nb[0], &total) ||
        kiln__add_overflow_size(total, tr->block_bytes, &total))
        return SIZE_MAX;
    for (int d = 1; d < KILN_MAX_DIMS; d++)
        if (kiln__mul_overflow_size((size_t)(t->ne[d] - 1), t->nb[d], &step) ||
            kiln__add_overflow_size(total, step, &total))
            return SIZE_MAX;
    return total;
}
