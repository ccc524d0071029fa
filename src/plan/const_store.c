/*
 * const_store.c - see const_store.h. Entries are few (one per folded constant per layer), so lookup is
 * a linear scan over a growable array.
 */
#include "plan/const_store.h"

#include "core/core.h"
#include "plan/plan.h"

#include <string.h>

typedef struct entry {
    kiln_tensor key; /* op, type, shape, parameters; src[] are the sources' data pointers (cast) */
    int64_t src_ne[KILN_MAX_SRC][KILN_MAX_DIMS]; /* and their shapes and strides: a source may be a view */
    size_t src_nb[KILN_MAX_SRC][KILN_MAX_DIMS];  /* of a constant (a transposed weight, say) */
    void *data;
    bool owned;
} entry;

struct kiln_const_store {
    kiln_backend *backend;
    entry *entries;
    int32_t n, cap;
    size_t bytes;
};

kiln_status kiln__const_store_create(kiln_backend *backend, kiln_const_store **out) {
    kiln_const_store *s = kiln__calloc(1, sizeof *s);
    if (!s) return kiln__nomem("the constant store");
    s->backend = backend;
    *out = s;
    return KILN_OK;
}

void kiln__const_store_destroy(kiln_const_store *s) {
    if (!s) return;
    for (int32_t i = 0; i < s->n; i++)
        if (s->entries[i].owned) kiln__dealloc(s->entries[i].data);
    kiln__dealloc(s->entries);
    kiln__dealloc(s);
}

size_t kiln__const_store_bytes(const kiln_const_store *s) {
    return s->bytes;
}

/* A source's bytes: a constant leaf's data, or for a view of one (constant folding takes those too) its
 * base's data at the view's offset. */
static void *source_bytes(const kiln_tensor *src) {
    return src->view_src ? (char *)src->view_src->data + src->view_offset : src->data;
}

static void make_key(const kiln_tensor *node, entry *e) {
    kiln_tensor *key = &e->key;
    memset(e, 0, sizeof *e);
    key->op = node->op;
    key->type = node->type;
    memcpy(key->ne, node->ne, sizeof key->ne);
    memcpy(key->ip, node->ip, sizeof key->ip);
    memcpy(key->fp, node->fp, sizeof key->fp);
    for (int k = 0; k < KILN_MAX_SRC && node->src[k]; k++) {
        key->src[k] = (kiln_tensor *)source_bytes(node->src[k]);
        memcpy(e->src_ne[k], node->src[k]->ne, sizeof e->src_ne[k]);
        memcpy(e->src_nb[k], node->src[k]->nb, sizeof e->src_nb[k]);
    }
}

static bool key_equal(const entry *x, const entry *y) {
    const kiln_tensor *a = &x->key, *b = &y->key;
    return a->op == b->op && a->type == b->type && !memcmp(a->ne, b->ne, sizeof a->ne) &&
           !memcmp(a->ip, b->ip, sizeof a->ip) && !memcmp(a->fp, b->fp, sizeof a->fp) &&
           !memcmp(a->src, b->src, sizeof a->src) && !memcmp(x->src_ne, y->src_ne, sizeof x->src_ne) &&
           !memcmp(x->src_nb, y->src_nb, sizeof x->src_nb);
}

/* A concat whose sources are contiguous in memory, one after the other: the result is the first one. */
static void *adjacent_concat(const kiln_tensor *node) {
    const char *next;
    if (node->op != KILN_OP_CONCAT) return NULL;
    next = (const char *)node->src[0]->data;
    for (int k = 0; k < KILN_MAX_SRC && node->src[k]; k++) {
        if (node->src[k]->view_src || !kiln__tensor_is_contiguous(node->src[k])) return NULL;
        if ((const char *)node->src[k]->data != next) return NULL;
        next += kiln__tensor_nbytes(node->src[k]);
    }
    return node->src[0]->data;
}

/* Evaluate node into a fresh buffer on the backend: a small graph of copies of its source leaves. The
 * sources are leaves with the sources' shapes, strides and bytes (a view of a constant becomes a leaf
 * over its base's bytes, strided as the view). The result (a computed node, never a view: constant
 * folding skips views) is read back through the buffer
 * verbs into host memory, where the constant leaf that replaces the node will point. */
static kiln_status evaluate(kiln_const_store *s, const kiln_tensor *node, void **data) {
    kiln_graph *g = NULL;
    kiln_tensor proto = *node;
    size_t arena_size = 0;
    kiln_buffer arena = {0};
    kiln_status st = kiln__graph_create(16, &g);
    for (int k = 0; !st && k < KILN_MAX_SRC && node->src[k]; k++) {
        const kiln_tensor *src = node->src[k];
        proto.src[k] = kiln__graph_leaf(g, src->name, src->type, src->n_dims, src->ne, source_bytes(src),
                                        KILN_TENSOR_CONST);
        if (proto.src[k]) memcpy(proto.src[k]->nb, src->nb, sizeof src->nb);
    }
    kiln_tensor *t = st ? NULL : kiln__graph_node_like(g, &proto);
    if (!st && !t) st = kiln__graph_status(g);
    if (!st) {
        kiln__graph_set_output(g, t);
        if (!(st = kiln__graph_order(g)) && !(st = kiln__plan_measure(g, &arena_size, NULL)) &&
            !(st = kiln__backend_buffer_alloc(s->backend, arena_size, &arena)) &&
            !(st = kiln__plan_commit(g, arena.base, arena.size)) &&
            !(st = kiln__backend_compute(s->backend, g))) {
            *data = kiln__alloc(kiln__tensor_nbytes(t));
            if (!*data)
                st = kiln__nomem("a folded constant");
            else if ((st = kiln__buffer_get(&arena, t->plan_offset, *data, kiln__tensor_nbytes(t)))) {
                kiln__dealloc(*data);
                *data = NULL;
            }
        }
    }
    kiln__backend_buffer_free(s->backend, &arena);
    kiln__graph_destroy(g);
    return st;
}

kiln_status kiln__const_store_eval(void *user, const kiln_tensor *node, void **data) {
    kiln_const_store *s = user;
    entry e;
    kiln_status st;
    make_key(node, &e);
    for (int32_t i = 0; i < s->n; i++)
        if (key_equal(&s->entries[i], &e)) {
            *data = s->entries[i].data;
            return KILN_OK;
        }
    if (s->n == s->cap) {
        int32_t cap = s->cap ? 2 * s->cap : 16;
        entry *p = kiln__realloc_array(s->entries, (size_t)cap, sizeof *p);
        if (!p) return kiln__nomem("the constant store");
        s->entries = p;
        s->cap = cap;
    }
    e.data = adjacent_concat(node);
    if (!e.data) {
        if ((st = evaluate(s, node, &e.data))) return st;
        e.owned = true;
        s->bytes += kiln__tensor_nbytes(node);
    }
    s->entries[s->n++] = e;
    *data = e.data;
    return KILN_OK;
}
