/*
 * sched.c - the scheduler (see sched.h): assignment of nodes to backends, splits, the rewrite that
 * inserts copies, per-backend arenas, and running a committed plan.
 *
 * Where a tensor's bytes live is its "home": the backend that computed it, or HOST_LEAF for a leaf. A
 * view's home is its root's (view_src). For arena membership a leaf-rooted view counts as the last
 * backend's, which is host memory like the leaves.
 *
 * A copy is a leaf whose src[0] is the tensor it copies, and a twin a leaf whose src[0] and view_src are
 * the copy: nothing computes them (leaves are never in the execution order), but a later
 * kiln__graph_order still reaches, and orders first, everything they were made from.
 */
#include "runtime/sched.h"

#include "core/core.h"
#include "plan/plan.h"

#include <stdio.h>
#include <string.h>

#define HOST_LEAF (-1)

struct kiln_sched {
    kiln_sched_backend *list; /* [n] */
    bool *is_host;            /* [n] */
    int32_t n;
    int32_t first_layer; /* partial offload (kiln__sched_set_first_layer) */
};

typedef struct sched_split {
    int32_t backend;
    int32_t i0, i1;          /* execution-order nodes [i0, i1) */
    int32_t copy0, n_copies; /* the copies made before it: copies[copy0 .. copy0 + n_copies) */
} sched_split;

typedef struct sched_copy {
    const kiln_tensor *src; /* the root whose bytes are copied: a leaf, or a computed node */
    kiln_tensor *dst;       /* the copy, a leaf of the graph in dst_backend's arena */
    int32_t src_backend;    /* src's home (HOST_LEAF for a leaf) */
    int32_t dst_backend;
    int32_t split;     /* made before this split */
    size_t dst_offset; /* in dst_backend's arena */
    size_t bytes;
} sched_copy;

typedef struct sched_output {
    kiln_tensor *node; /* the graph's output */
    kiln_tensor host;  /* its twin in host memory, when copied back */
    void *mirror;      /* the twin's root bytes (plan-owned), or NULL when not copied back */
    const kiln_tensor *root;
    int32_t src_backend;
    size_t bytes;
} sched_output;

struct kiln_sched_plan {
    kiln_sched *sched;
    kiln_graph *g;
    int32_t n_nodes, n_tensors0; /* at plan time, before the copies were added */
    int32_t *home;               /* by tensor id (< n_tensors0): where its bytes live */
    int32_t *layer;              /* by tensor id (< n_tensors0): its layer for assignment, or -1 */
    int32_t *run;                /* [n_nodes] the backend whose split holds the node */
    uint8_t *member;             /* [n_backends][n_nodes] the nodes each arena holds */
    int32_t *keep_until;         /* by tensor id (final count): the plan's keep_until */
    int32_t *copy_of, *twin_of;  /* [n_backends][n_tensors0] copy index / twin leaf id, or -1 */
    sched_split *splits;
    int32_t n_splits;
    sched_copy *copies;
    int32_t n_copies, copies_cap;
    kiln_tensor **twins; /* views onto copies */
    int32_t n_twins, twins_cap;
    sched_output *outputs;
    int32_t n_outputs;
    size_t *planned, *arena_bytes; /* [n_backends] */
    kiln_buffer *arenas;           /* [n_backends] as committed */
    void *staging;
    size_t staging_bytes;
    bool committed;
};

/* ---- The scheduler ---- */

kiln_status kiln__sched_create(const kiln_sched_backend *list, int32_t n, kiln_sched **out) {
    kiln_sched *s;
    *out = NULL;
    if (!list || n < 1)
        return kiln__error(KILN_E_INVALID_ARG, "scheduler: %d backends given (at least the CPU is needed)",
                           n);
    for (int32_t i = 0; i < n; i++) {
        kiln_backend *b = list[i].backend;
        size_t a;
        if (!b) return kiln__error(KILN_E_INVALID_ARG, "scheduler: backend %d is NULL", i);
        if (list[i].min_batch < 0)
            return kiln__error(KILN_E_INVALID_ARG,
                               "scheduler: backend %d (%s) has min_batch %d (must be >= 0)", i,
                               kiln__backend_name(b), list[i].min_batch);
        for (int32_t j = 0; j < i; j++)
            if (list[j].backend == b)
                return kiln__error(KILN_E_INVALID_ARG, "scheduler: backend %s is listed twice (%d and %d)",
                                   kiln__backend_name(b), j, i);
        a = kiln__backend_alignment(b);
        if (a > KILN_PLAN_ALIGN || KILN_PLAN_ALIGN % a != 0)
            return kiln__error(KILN_E_UNSUPPORTED,
                               "scheduler: backend %s needs %zu-byte alignment; the planner aligns to %d",
                               kiln__backend_name(b), a, KILN_PLAN_ALIGN);
    }
    if (!kiln__backend_is_host(list[n - 1].backend))
        return kiln__error(KILN_E_INVALID_ARG,
                           "scheduler: the last backend (%s) must be a host backend (the CPU fallback)",
                           kiln__backend_name(list[n - 1].backend));
    s = kiln__calloc(1, sizeof *s);
    if (s) s->list = kiln__alloc_array((size_t)n, sizeof *s->list);
    if (s) s->is_host = kiln__alloc_array((size_t)n, sizeof *s->is_host);
    if (!s || !s->list || !s->is_host) {
        kiln__sched_destroy(s);
        return kiln__nomem("the scheduler");
    }
    memcpy(s->list, list, (size_t)n * sizeof *list);
    for (int32_t i = 0; i < n; i++) s->is_host[i] = kiln__backend_is_host(list[i].backend);
    s->n = n;
    *out = s;
    return KILN_OK;
}

kiln_status kiln__sched_set_first_layer(kiln_sched *s, int32_t first_layer) {
    if (first_layer < 0)
        return kiln__error(KILN_E_INVALID_ARG, "scheduler: first layer %d is negative", first_layer);
    s->first_layer = first_layer;
    return KILN_OK;
}

void kiln__sched_destroy(kiln_sched *s) {
    if (!s) return;
    kiln__dealloc(s->list);
    kiln__dealloc(s->is_host);
    kiln__dealloc(s);
}

int32_t kiln__sched_n_backends(const kiln_sched *s) { return s->n; }
kiln_backend *kiln__sched_backend(const kiln_sched *s, int32_t i) { return s->list[i].backend; }

/* ---- Assignment and splits ---- */

static const kiln_tensor *root_of(const kiln_tensor *t) { return t->view_src ? t->view_src : t; }

/* Views compute nothing; cache_write is a view that does (it writes the cache). */
static bool computes(const kiln_tensor *t) {
    return !kiln__op_is_view(t->op) || t->op == KILN_OP_CACHE_WRITE;
}

static bool touches_cache(const kiln_tensor *t) {
    if (t->op == KILN_OP_CACHE_WRITE) return true;
    for (int k = 0; k < KILN_MAX_SRC; k++)
        if (t->src[k] && (root_of(t->src[k])->flags & KILN_TENSOR_CACHE)) return true;
    return false;
}

/* Where the KV cache that node t touches lives: the home of its first cache root (HOST_LEAF: the last). */
static int32_t cache_home(const kiln_sched_plan *p, const kiln_tensor *t) {
    for (int k = 0; k < KILN_MAX_SRC; k++)
        if (t->src[k] && (root_of(t->src[k])->flags & KILN_TENSOR_CACHE)) return p->home[root_of(t->src[k])->id];
    return HOST_LEAF;
}

/* Whether the backends before the last admit a node of this layer (-1: of none). */
static bool admits_layer(const kiln_sched *s, int32_t layer) {
    return s->first_layer <= 0 || layer >= s->first_layer;
}

/* The backend of computing node t of the given layer: the first that supports it, whose min_batch the
 * batch reaches and whose first_layer admits the layer; a node that touches a KV cache runs where the
 * cache lives. */
static kiln_status choose(const kiln_sched_plan *p, const kiln_tensor *t, int32_t layer, int32_t n_tokens,
                          int32_t *out) {
    const kiln_sched *s = p->sched;
    int32_t last = s->n - 1, h = touches_cache(t) ? cache_home(p, t) : HOST_LEAF;
    if (h != HOST_LEAF) {
        if (!kiln__backend_supports_op(s->list[h].backend, t))
            return kiln__error(KILN_E_UNSUPPORTED, "scheduler: the KV cache lives on %s, which cannot run node '%s' (%s)",
                               kiln__backend_name(s->list[h].backend), t->name, kiln__op_name(t->op));
        *out = h;
        return KILN_OK;
    }
    if (!touches_cache(t))
        for (int32_t i = 0; i < last; i++)
            if (n_tokens >= s->list[i].min_batch && admits_layer(s, layer) &&
                kiln__backend_supports_op(s->list[i].backend, t)) {
                *out = i;
                return KILN_OK;
            }
    if (!kiln__backend_supports_op(s->list[last].backend, t))
        return kiln__error(KILN_E_UNSUPPORTED,
                           "scheduler: no backend runs node '%s' (%s); the fallback %s cannot either",
                           t->name, kiln__op_name(t->op), kiln__backend_name(s->list[last].backend));
    *out = last;
    return KILN_OK;
}

/* Homes of every tensor and the split backend of every node (views join the run they sit in). p->layer
 * gets every tensor's layer: its tag, or for an untagged node the highest of its sources' (see sched.h). */
static kiln_status assign(kiln_sched_plan *p, int32_t n_tokens) {
    int32_t first = -1, cur = -1;
    kiln_status st;
    for (int32_t id = 0; id < p->n_tensors0; id++) {
        const kiln_tensor *t = kiln__graph_tensor(p->g, id);
        p->home[id] = HOST_LEAF;
        p->layer[id] = t->layer;
        /* A KV cache lives in host memory, or in the buffers of the device backend that holds it. */
        for (int32_t b = 0; (t->flags & KILN_TENSOR_CACHE) && t->op == KILN_OP_NONE && b < p->sched->n - 1; b++)
            if (!p->sched->is_host[b] && kiln__backend_owns(p->sched->list[b].backend, t->data)) {
                p->home[id] = b;
                break;
            }
    }
    for (int32_t i = 0; i < p->n_nodes; i++) {
        kiln_tensor *t = kiln__graph_node(p->g, i);
        for (int k = 0; k < KILN_MAX_SRC && t->layer < 0; k++)
            if (t->src[k] && t->src[k]->id < p->n_tensors0)
                p->layer[t->id] = KILN__MAX(p->layer[t->id], p->layer[t->src[k]->id]);
        if (!computes(t)) {
            p->home[t->id] = p->home[root_of(t)->id];
            p->run[i] = cur;
            continue;
        }
        if ((st = choose(p, t, p->layer[t->id], n_tokens, &cur))) return st;
        p->home[t->id] = t->op == KILN_OP_CACHE_WRITE ? p->home[root_of(t)->id] : cur;
        p->run[i] = cur;
        if (first < 0) first = cur;
    }
    if (first < 0) first = p->sched->n - 1;
    for (int32_t i = 0; i < p->n_nodes && p->run[i] < 0; i++) p->run[i] = first;
    return KILN_OK;
}

static void build_splits(kiln_sched_plan *p) {
    p->n_splits = 0;
    for (int32_t i = 0; i < p->n_nodes; i++) {
        if (p->n_splits && p->splits[p->n_splits - 1].backend == p->run[i]) {
            p->splits[p->n_splits - 1].i1 = i + 1;
            continue;
        }
        p->splits[p->n_splits++] = (sched_split){p->run[i], i, i + 1, 0, 0};
    }
}

/* The arena each node's bytes are in: its backend for computing nodes, its root's home for views. */
static void build_members(kiln_sched_plan *p) {
    int32_t last = p->sched->n - 1;
    memset(p->member, 0, (size_t)p->sched->n * (size_t)p->n_nodes);
    for (int32_t i = 0; i < p->n_nodes; i++) {
        kiln_tensor *t = kiln__graph_node(p->g, i);
        int32_t b = computes(t) && t->op != KILN_OP_CACHE_WRITE ? p->run[i] : p->home[root_of(t)->id];
        p->member[(size_t)(b == HOST_LEAF ? last : b) * (size_t)p->n_nodes + (size_t)i] = 1;
    }
}

/* ---- The rewrite: copies and twins ---- */

/* Whether backend b must read root r (home hr) through a copy. */
static bool needs_copy(const kiln_sched_plan *p, const kiln_tensor *r, int32_t b) {
    int32_t hr = p->home[r->id];
    const bool *host = p->sched->is_host;
    if (hr == HOST_LEAF) return !host[b] && !(r->flags & (KILN_TENSOR_WEIGHT | KILN_TENSOR_CONST));
    return hr != b && !(host[b] && host[hr]);
}

/* Bytes a tensor's elements span from its data pointer (kiln__tensor_span), as a status. */
static kiln_status span_bytes(const kiln_tensor *t, size_t *out) {
    *out = kiln__tensor_span(t);
    if (*out == SIZE_MAX) return kiln__error(KILN_E_RANGE, "scheduler: the bytes of '%s' overflow", t->name);
    return KILN_OK;
}

/* array with room for `need` elements (grown by doubling), or NULL with array untouched. */
static void *grown(void *array, int32_t *cap, int32_t need, size_t elem) {
    void *q;
    int32_t c = *cap ? *cap : 16;
    if (need <= *cap) return array;
    while (c < need) c *= 2;
    q = kiln__realloc_array(array, (size_t)c, elem);
    if (q) *cap = c;
    return q;
}

static kiln_status graph_room(kiln_sched_plan *p, const kiln_tensor *r, int32_t b) {
    return kiln__error_prefix(kiln__graph_status(p->g),
                              "scheduler: no room in the graph for a copy of '%s' on %s: ", r->name,
                              kiln__backend_name(p->sched->list[b].backend));
}

/* The copy of root r in backend b's arena, made before split `split` if it is new. */
static kiln_status copy_for(kiln_sched_plan *p, const kiln_tensor *r, int32_t b, int32_t split,
                            kiln_tensor **out) {
    int32_t *slot = &p->copy_of[(size_t)b * (size_t)p->n_tensors0 + (size_t)r->id];
    sched_copy *c;
    kiln_tensor *t;
    kiln_status st;
    if (*slot >= 0) {
        *out = p->copies[*slot].dst;
        return KILN_OK;
    }
    if (!(c = grown(p->copies, &p->copies_cap, p->n_copies + 1, sizeof *c)))
        return kiln__nomem("the scheduler's copies");
    p->copies = c;
    t = kiln__graph_leaf(p->g, NULL, r->type, r->n_dims, r->ne, NULL, 0);
    if (!t) return graph_room(p, r, b);
    memcpy(t->nb, r->nb, sizeof t->nb);
    t->src[0] = (kiln_tensor *)r; /* provenance: keeps r in any later execution order; nothing computes t */
    kiln__tensor_set_name(t, "%s@%s", r->name, kiln__backend_name(p->sched->list[b].backend));
    c = &p->copies[p->n_copies];
    *c = (sched_copy){r, t, p->home[r->id], b, split, 0, 0};
    if ((st = span_bytes(r, &c->bytes))) return st;
    *slot = p->n_copies++;
    *out = t;
    return KILN_OK;
}

/* A twin of view v (its shape, strides and offset) onto the copy of its root in backend b's arena. */
static kiln_status twin_for(kiln_sched_plan *p, const kiln_tensor *v, kiln_tensor *copy, int32_t b,
                            kiln_tensor **out) {
    int32_t *slot = &p->twin_of[(size_t)b * (size_t)p->n_tensors0 + (size_t)v->id];
    kiln_tensor *t, **twins;
    if (*slot >= 0) {
        *out = kiln__graph_tensor(p->g, *slot);
        return KILN_OK;
    }
    if (!(twins = grown(p->twins, &p->twins_cap, p->n_twins + 1, sizeof *twins)))
        return kiln__nomem("the scheduler's views");
    p->twins = twins;
    t = kiln__graph_leaf(p->g, NULL, v->type, v->n_dims, v->ne, NULL, 0);
    if (!t) return graph_room(p, v, b);
    memcpy(t->nb, v->nb, sizeof t->nb);
    t->src[0] = copy;
    t->view_src = copy;
    t->view_offset = v->view_offset;
    kiln__tensor_set_name(t, "%s@%s", v->name, kiln__backend_name(p->sched->list[b].backend));
    p->twins[p->n_twins++] = t;
    *slot = t->id;
    *out = t;
    return KILN_OK;
}

/* Make every computing node read only what its backend can reach, split by split. */
static kiln_status insert_copies(kiln_sched_plan *p) {
    kiln_status st;
    for (int32_t sp = 0; sp < p->n_splits; sp++) {
        sched_split *split = &p->splits[sp];
        split->copy0 = p->n_copies;
        for (int32_t i = split->i0; i < split->i1; i++) {
            kiln_tensor *t = kiln__graph_node(p->g, i);
            if (!computes(t)) continue;
            for (int k = 0; k < KILN_MAX_SRC; k++) {
                kiln_tensor *s = t->src[k], *copy = NULL;
                const kiln_tensor *r = s ? root_of(s) : NULL;
                if (!s || !needs_copy(p, r, split->backend)) continue;
                if ((st = copy_for(p, r, split->backend, sp, &copy))) return st;
                if (s == r)
                    t->src[k] = copy;
                else if ((st = twin_for(p, s, copy, split->backend, &t->src[k])))
                    return st;
            }
        }
        split->n_copies = p->n_copies - split->copy0;
    }
    return KILN_OK;
}

/* ---- Arenas, outputs, staging ---- */

/* Each backend's planned region, then its copies' destinations after it. */
static kiln_status measure(kiln_sched_plan *p) {
    int32_t nb = p->sched->n, nt = kiln__graph_n_tensors(p->g);
    kiln_status st;
    p->keep_until = kiln__alloc_array((size_t)nt, sizeof *p->keep_until);
    if (!p->keep_until) return kiln__nomem("the scheduler's lifetimes");
    for (int32_t id = 0; id < nt; id++) p->keep_until[id] = -1;
    for (int32_t c = 0; c < p->n_copies; c++) {
        const sched_copy *cp = &p->copies[c];
        int32_t step = p->splits[cp->split].i0;
        if (cp->src_backend != HOST_LEAF)
            p->keep_until[cp->src->id] = KILN__MAX(p->keep_until[cp->src->id], step);
    }
    for (int32_t b = 0; b < nb; b++) {
        kiln_plan_subset sub = {p->member + (size_t)b * (size_t)p->n_nodes, p->keep_until};
        uint64_t end;
        if ((st = kiln__plan_measure_subset(p->g, &sub, &p->planned[b], NULL))) return st;
        end = p->planned[b];
        for (int32_t c = 0; c < p->n_copies; c++) {
            sched_copy *cp = &p->copies[c];
            if (cp->dst_backend != b) continue;
            if (kiln__align_up(end, KILN_PLAN_ALIGN, &end) || end > SIZE_MAX ||
                kiln__add_overflow_u64(end, cp->bytes, &end))
                return kiln__error(KILN_E_RANGE, "scheduler: the %s arena overflows",
                                   kiln__backend_name(p->sched->list[b].backend));
            cp->dst_offset = (size_t)(end - cp->bytes);
        }
        if (end > SIZE_MAX)
            return kiln__error(KILN_E_RANGE, "scheduler: the %s arena overflows",
                               kiln__backend_name(p->sched->list[b].backend));
        p->arena_bytes[b] = (size_t)end;
    }
    return KILN_OK;
}

/* Outputs whose bytes live on a backend that is not host get a twin in plan-owned host memory. */
static kiln_status prepare_outputs(kiln_sched_plan *p) {
    kiln_status st;
    p->n_outputs = kiln__graph_n_outputs(p->g);
    p->outputs = kiln__calloc((size_t)p->n_outputs + 1, sizeof *p->outputs);
    if (!p->outputs) return kiln__nomem("the scheduler's outputs");
    for (int32_t i = 0; i < p->n_outputs; i++) {
        sched_output *o = &p->outputs[i];
        o->node = kiln__graph_output(p->g, i);
        o->root = root_of(o->node);
        o->src_backend = o->root->id < p->n_tensors0 ? p->home[o->root->id] : HOST_LEAF;
        if (o->src_backend == HOST_LEAF || p->sched->is_host[o->src_backend]) continue;
        /* A device-held KV cache leaf (a cache_write's root) lives in its own buffer, not in an arena:
         * no twin; whoever owns that buffer reads it (kiln__sched_plan_output gives the node). */
        if (o->root->op == KILN_OP_NONE) continue;
        if ((st = span_bytes(o->root, &o->bytes))) return st;
        o->mirror = kiln__alloc(o->bytes ? o->bytes : 1);
        if (!o->mirror) return kiln__nomem("an output's host copy");
        o->host = *o->node;
        memset(o->host.src, 0, sizeof o->host.src);
        o->host.view_src = NULL;
        o->host.data = (char *)o->mirror + (o->node == o->root ? 0 : o->node->view_offset);
    }
    return KILN_OK;
}

/* The staging buffer of copies between two backends that are both not host. */
static kiln_status prepare_staging(kiln_sched_plan *p) {
    for (int32_t c = 0; c < p->n_copies; c++) {
        const sched_copy *cp = &p->copies[c];
        if (cp->src_backend != HOST_LEAF && !p->sched->is_host[cp->src_backend] &&
            !p->sched->is_host[cp->dst_backend])
            p->staging_bytes = KILN__MAX(p->staging_bytes, cp->bytes);
    }
    if (!p->staging_bytes) return KILN_OK;
    p->staging = kiln__alloc(p->staging_bytes);
    return p->staging ? KILN_OK : kiln__nomem("the scheduler's staging buffer");
}

static kiln_status alloc_tables(kiln_sched_plan *p) {
    size_t nb = (size_t)p->sched->n, nn = (size_t)p->n_nodes + 1, nt = (size_t)p->n_tensors0 + 1, pairs;
    if (kiln__mul_overflow_size(nb, nt, &pairs))
        return kiln__error(KILN_E_RANGE, "scheduler: tables overflow");
    p->home = kiln__alloc_array(nt, sizeof *p->home);
    p->layer = kiln__alloc_array(nt, sizeof *p->layer);
    p->run = kiln__alloc_array(nn, sizeof *p->run);
    p->member = kiln__alloc_array(nb, nn);
    p->copy_of = kiln__alloc_array(pairs, sizeof *p->copy_of);
    p->twin_of = kiln__alloc_array(pairs, sizeof *p->twin_of);
    p->splits = kiln__alloc_array(nn, sizeof *p->splits);
    p->planned = kiln__calloc(nb, sizeof *p->planned);
    p->arena_bytes = kiln__calloc(nb, sizeof *p->arena_bytes);
    p->arenas = kiln__calloc(nb, sizeof *p->arenas);
    if (!p->home || !p->layer || !p->run || !p->member || !p->copy_of || !p->twin_of || !p->splits ||
        !p->planned || !p->arena_bytes || !p->arenas)
        return kiln__nomem("the scheduler's plan");
    for (size_t i = 0; i < pairs; i++) p->copy_of[i] = p->twin_of[i] = -1;
    return KILN_OK;
}

kiln_status kiln__sched_plan_create(kiln_sched *s, kiln_graph *g, int32_t n_tokens, kiln_sched_plan **out) {
    kiln_sched_plan *p;
    kiln_status st;
    *out = NULL;
    if (n_tokens < 0) return kiln__error(KILN_E_INVALID_ARG, "scheduler: n_tokens is %d", n_tokens);
    if ((st = kiln__graph_status(g))) return kiln__error_prefix(st, "scheduler: the graph failed to build: ");
    p = kiln__calloc(1, sizeof *p);
    if (!p) return kiln__nomem("the scheduler's plan");
    p->sched = s;
    p->g = g;
    p->n_nodes = kiln__graph_n_nodes(g);
    p->n_tensors0 = kiln__graph_n_tensors(g);
    if (!(st = alloc_tables(p)) && !(st = assign(p, n_tokens))) {
        build_splits(p);
        build_members(p);
        if (!(st = insert_copies(p)) && !(st = measure(p)) && !(st = prepare_outputs(p)))
            st = prepare_staging(p);
    }
    if (st) {
        kiln__sched_plan_destroy(p);
        return st;
    }
    *out = p;
    return KILN_OK;
}

void kiln__sched_plan_destroy(kiln_sched_plan *p) {
    if (!p) return;
    for (int32_t i = 0; p->outputs && i < p->n_outputs; i++) kiln__dealloc(p->outputs[i].mirror);
    kiln__dealloc(p->outputs);
    kiln__dealloc(p->home);
    kiln__dealloc(p->layer);
    kiln__dealloc(p->run);
    kiln__dealloc(p->member);
    kiln__dealloc(p->keep_until);
    kiln__dealloc(p->copy_of);
    kiln__dealloc(p->twin_of);
    kiln__dealloc(p->splits);
    kiln__dealloc(p->copies);
    kiln__dealloc(p->twins);
    kiln__dealloc(p->planned);
    kiln__dealloc(p->arena_bytes);
    kiln__dealloc(p->arenas);
    kiln__dealloc(p->staging);
    kiln__dealloc(p);
}

size_t kiln__sched_plan_arena_bytes(const kiln_sched_plan *p, int32_t b) {
    return b >= 0 && b < p->sched->n ? p->arena_bytes[b] : 0;
}

/* ---- Commit and compute ---- */

static kiln_status check_arena(const kiln_sched_plan *p, const kiln_buffer *a, int32_t b) {
    kiln_backend *be = p->sched->list[b].backend;
    if (p->arena_bytes[b] == 0) return KILN_OK;
    if (a->backend != be)
        return kiln__error(KILN_E_INVALID_ARG, "scheduler: arena %d belongs to %s, not to %s", b,
                           a->backend ? kiln__backend_name(a->backend) : "no backend",
                           kiln__backend_name(be));
    if (a->size < p->arena_bytes[b])
        return kiln__error(KILN_E_RANGE, "scheduler: the %s arena has %zu bytes; the plan needs %zu",
                           kiln__backend_name(be), a->size, p->arena_bytes[b]);
    return KILN_OK;
}

kiln_status kiln__sched_plan_commit(kiln_sched_plan *p, kiln_buffer *arenas) {
    kiln_status st;
    p->committed = false;
    for (int32_t b = 0; b < p->sched->n; b++)
        if ((st = check_arena(p, &arenas[b], b))) return st;
    for (int32_t c = 0; c < p->n_copies; c++) {
        sched_copy *cp = &p->copies[c];
        if (cp->src_backend == HOST_LEAF && !cp->src->data)
            return kiln__error(KILN_E_INVALID_ARG, "scheduler: leaf '%s', copied to %s, has no data",
                               cp->src->name, kiln__backend_name(p->sched->list[cp->dst_backend].backend));
        cp->dst->data = (char *)arenas[cp->dst_backend].base + cp->dst_offset;
    }
    for (int32_t i = 0; i < p->n_twins; i++)
        p->twins[i]->data = (char *)p->twins[i]->view_src->data + p->twins[i]->view_offset;
    for (int32_t b = 0; b < p->sched->n; b++) {
        kiln_plan_subset sub = {p->member + (size_t)b * (size_t)p->n_nodes, p->keep_until};
        if ((st = kiln__plan_commit_subset(p->g, &sub, arenas[b].base, arenas[b].size))) return st;
        p->arenas[b] = arenas[b];
    }
    p->committed = true;
    return KILN_OK;
}

/* One copy through the verbs: a set from host memory, a get into host memory, or both via staging. */
static kiln_status do_copy(kiln_sched_plan *p, const sched_copy *c) {
    const bool *host = p->sched->is_host;
    kiln_buffer *dst = &p->arenas[c->dst_backend];
    kiln_status st;
    if (c->src_backend == HOST_LEAF || host[c->src_backend])
        return kiln__buffer_set(dst, c->dst_offset, c->src->data, c->bytes);
    if (host[c->dst_backend])
        return kiln__buffer_get(&p->arenas[c->src_backend], c->src->plan_offset, c->dst->data, c->bytes);
    if ((st = kiln__buffer_get(&p->arenas[c->src_backend], c->src->plan_offset, p->staging, c->bytes)))
        return st;
    return kiln__buffer_set(dst, c->dst_offset, p->staging, c->bytes);
}

kiln_status kiln__sched_compute(kiln_sched_plan *p) {
    kiln_status st;
    if (!p->committed)
        return kiln__error(KILN_E_INVALID_ARG, "scheduler: compute before a successful commit");
    for (int32_t sp = 0; sp < p->n_splits; sp++) {
        const sched_split *split = &p->splits[sp];
        for (int32_t c = split->copy0; c < split->copy0 + split->n_copies; c++)
            if ((st = do_copy(p, &p->copies[c])))
                return kiln__error_prefix(
                    st, "scheduler: copying '%s' before split %d: ", p->copies[c].src->name, sp);
        if ((st = kiln__backend_compute_range(p->sched->list[split->backend].backend, p->g, split->i0,
                                              split->i1)))
            return st;
    }
    for (int32_t i = 0; i < p->n_outputs; i++) {
        const sched_output *o = &p->outputs[i];
        if (o->mirror &&
            (st = kiln__buffer_get(&p->arenas[o->src_backend], o->root->plan_offset, o->mirror, o->bytes)))
            return kiln__error_prefix(st, "scheduler: copying output '%s' back: ", o->node->name);
    }
    return KILN_OK;
}

kiln_tensor *kiln__sched_plan_output(const kiln_sched_plan *p, int32_t i) {
    if (i < 0 || i >= p->n_outputs) return NULL;
    return p->outputs[i].mirror ? &p->outputs[i].host : p->outputs[i].node;
}

/* ---- Inspection ---- */

int32_t kiln__sched_plan_n_splits(const kiln_sched_plan *p) { return p->n_splits; }

int32_t kiln__sched_plan_split_backend(const kiln_sched_plan *p, int32_t split) {
    return split >= 0 && split < p->n_splits ? p->splits[split].backend : -1;
}

int32_t kiln__sched_plan_n_copies(const kiln_sched_plan *p) { return p->n_copies; }

size_t kiln__sched_plan_copy_bytes(const kiln_sched_plan *p) {
    size_t total = 0;
    for (int32_t c = 0; c < p->n_copies; c++) total += p->copies[c].bytes;
    return total;
}

kiln_status kiln__sched_plan_verify(const kiln_sched_plan *p) {
    for (int32_t b = 0; b < p->sched->n; b++) {
        kiln_plan_subset sub = {p->member + (size_t)b * (size_t)p->n_nodes, p->keep_until};
        kiln_status st = kiln__plan_verify_subset(p->g, &sub);
        if (st)
            return kiln__error_prefix(
                st, "scheduler: the %s arena: ", kiln__backend_name(p->sched->list[b].backend));
    }
    return KILN_OK;
}

static const char *where(const kiln_sched_plan *p, int32_t b) {
    return b == HOST_LEAF ? "host" : kiln__backend_name(p->sched->list[b].backend);
}

void kiln__sched_plan_describe(const kiln_sched_plan *p, void (*write)(void *user, const char *line),
                               void *user) {
    char line[512];
    int n = snprintf(line, sizeof line, "schedule: %d splits, %d copies (%zu bytes); arenas:", p->n_splits,
                     p->n_copies, kiln__sched_plan_copy_bytes(p));
    for (int32_t b = 0; b < p->sched->n && n > 0 && (size_t)n < sizeof line; b++)
        n += snprintf(line + n, sizeof line - (size_t)n, " %s %zu bytes", where(p, b), p->arena_bytes[b]);
    write(user, line);
    for (int32_t sp = 0; sp < p->n_splits; sp++) {
        const sched_split *s = &p->splits[sp];
        n = snprintf(line, sizeof line, "split %d: %s, nodes [%d, %d): %d nodes, %d copies in; ops:", sp,
                     where(p, s->backend), s->i0, s->i1, s->i1 - s->i0, s->n_copies);
        /* the distinct ops of its computing nodes, in first-use order */
        for (int32_t i = s->i0; i < s->i1 && n > 0 && (size_t)n < sizeof line; i++) {
            const kiln_tensor *t = kiln__graph_node(p->g, i);
            bool seen = !computes(t);
            for (int32_t j = s->i0; j < i && !seen; j++)
                seen = kiln__graph_node(p->g, j)->op == t->op;
            if (!seen) n += snprintf(line + n, sizeof line - (size_t)n, " %s", kiln__op_name(t->op));
        }
        write(user, line);
        for (int32_t c = s->copy0; c < s->copy0 + s->n_copies; c++) {
            const sched_copy *cp = &p->copies[c];
            snprintf(line, sizeof line, "  copy '%s' %s -> %s: %zu bytes", cp->src->name,
                     where(p, cp->src_backend), where(p, cp->dst_backend), cp->bytes);
            write(user, line);
        }
    }
    for (int32_t i = 0; i < p->n_outputs; i++) {
        const sched_output *o = &p->outputs[i];
        if (!o->mirror) continue;
        snprintf(line, sizeof line, "output '%s' %s -> host: %zu bytes", o->node->name,
                 where(p, o->src_backend), o->bytes);
        write(user, line);
    }
}
