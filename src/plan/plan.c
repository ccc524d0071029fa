/*
 * plan.c - lifetime analysis and best-fit placement of intermediates (see plan.h).
 *
 * Steps are positions in the execution order. A node is defined at its step and live until the last
 * step that reads it or a view of it ("last use"); outputs live to the end. At each step the node's
 * block is chosen first and the blocks of sources that die at this step are freed after, so a result
 * never shares memory with its live inputs, except deliberately in place. Blocks are freed by step, from a
 * list of what dies at each step, so a subset's tensor can die at a step that belongs to another subset.
 */
#include "plan/plan.h"

#include "core/core.h"

#include <string.h>

typedef struct block {
    size_t offset, size;
} block;

typedef struct planner {
    block *free_list; /* sorted by offset, coalesced */
    int32_t n_free;
    size_t end;       /* arena high-water mark */
    int32_t *last;    /* by tensor id: last step that reads it; INT32_MAX for outputs; -1 once freed */
    int32_t *dies;    /* by step: the first placed tensor whose last step it is (an id), or -1 */
    int32_t *next;    /* by tensor id: the next one dying at the same step, or -1 */
    uint8_t *mine;    /* by tensor id: placed in this arena (a member of the subset) */
} planner;

static bool computes(const kiln_tensor *t) { return t->op != KILN_OP_NONE && !kiln__op_is_view(t->op); }

/* The tensor that owns the bytes t reads (t itself for computed nodes and leaves). */
static const kiln_tensor *root_of(const kiln_tensor *t) { return t->view_src ? t->view_src : t; }

static size_t aligned_size(const kiln_tensor *t) {
    return (kiln__tensor_nbytes(t) + KILN_PLAN_ALIGN - 1) & ~(size_t)(KILN_PLAN_ALIGN - 1);
}

/* Whether the node at `step` is planned in this arena (every node without a subset). */
static bool member(const kiln_plan_subset *sub, int32_t step) { return !sub || sub->member[step]; }

/* Last uses by the graph's readers, raised to the subset's keep_until (copies read bytes then). */
static void compute_last_uses(const kiln_graph *g, const kiln_plan_subset *sub, int32_t *last) {
    const int32_t *keep = sub ? sub->keep_until : NULL;
    for (int32_t i = 0; i < kiln__graph_n_tensors(g); i++) last[i] = keep ? keep[i] : -1;
    for (int32_t i = 0; i < kiln__graph_n_nodes(g); i++) {
        const kiln_tensor *t = kiln__graph_node(g, i);
        last[t->id] = KILN__MAX(last[t->id], i);
        for (int k = 0; k < KILN_MAX_SRC; k++) {
            int32_t r = t->src[k] ? root_of(t->src[k])->id : -1;
            if (r >= 0) last[r] = KILN__MAX(last[r], i);
        }
    }
    for (int32_t i = 0; i < kiln__graph_n_outputs(g); i++) last[root_of(kiln__graph_output(g, i))->id] = INT32_MAX;
}

/* Ops whose kernel may write each row over the same row of its first source. */
static bool inplace_op(kiln_op op) {
    switch (op) {
    case KILN_OP_ADD: case KILN_OP_MUL: case KILN_OP_SCALE: case KILN_OP_SILU: case KILN_OP_TANH:
    case KILN_OP_RELU: case KILN_OP_GELU: case KILN_OP_ADD_ACT: case KILN_OP_SWIGLU: case KILN_OP_RMS_NORM:
    case KILN_OP_RMS_NORM_MUL: case KILN_OP_SOFTMAX: case KILN_OP_ROPE:
    case KILN_OP_SET: case KILN_OP_ACC: case KILN_OP_NORM: return true;
    default: return false;
    }
}

/* The source t can be computed in place over, or NULL. */
static kiln_tensor *inplace_source(const planner *p, const kiln_tensor *t, int32_t step) {
    kiln_tensor *x = t->src[0];
    if (!inplace_op(t->op) || !x || !p->mine[x->id] || x->view_src || p->last[x->id] != step) return NULL;
    if (x->type != t->type || memcmp(x->ne, t->ne, sizeof x->ne) || !kiln__tensor_is_contiguous(x)) return NULL;
    for (int k = 1; k < KILN_MAX_SRC; k++) /* another operand aliasing x's bytes differently is unsafe */
        if (t->src[k] && t->src[k] != x && root_of(t->src[k]) == x) return NULL;
    return x;
}

static bool take_best_fit(planner *p, size_t size, size_t *offset) {
    int32_t best = -1;
    for (int32_t i = 0; i < p->n_free; i++)
        if (p->free_list[i].size >= size && (best < 0 || p->free_list[i].size < p->free_list[best].size)) best = i;
    if (best < 0) return false;
    *offset = p->free_list[best].offset;
    p->free_list[best].offset += size;
    p->free_list[best].size -= size;
    if (p->free_list[best].size == 0) {
        memmove(&p->free_list[best], &p->free_list[best + 1], (size_t)(p->n_free - best - 1) * sizeof(block));
        p->n_free--;
    }
    return true;
}

static void release(planner *p, size_t offset, size_t size) {
    int32_t i = 0;
    while (i < p->n_free && p->free_list[i].offset < offset) i++;
    memmove(&p->free_list[i + 1], &p->free_list[i], (size_t)(p->n_free - i) * sizeof(block));
    p->free_list[i] = (block){offset, size};
    p->n_free++;
    if (i + 1 < p->n_free && offset + size == p->free_list[i + 1].offset) { /* merge with the next */
        p->free_list[i].size += p->free_list[i + 1].size;
        memmove(&p->free_list[i + 1], &p->free_list[i + 2], (size_t)(p->n_free - i - 2) * sizeof(block));
        p->n_free--;
    }
    if (i > 0 && p->free_list[i - 1].offset + p->free_list[i - 1].size == offset) { /* and the previous */
        p->free_list[i - 1].size += p->free_list[i].size;
        memmove(&p->free_list[i], &p->free_list[i + 1], (size_t)(p->n_free - i - 1) * sizeof(block));
        p->n_free--;
    }
}

static void place(planner *p, kiln_graph *g, int32_t step, kiln_plan_stats *st) {
    kiln_tensor *t = kiln__graph_node(g, step);
    kiln_tensor *x = inplace_source(p, t, step);
    size_t size = aligned_size(t);
    st->naive_bytes += size;
    st->n_buffers++;
    t->plan_inplace = -1;
    if (x) {
        t->plan_offset = x->plan_offset;
        t->plan_inplace = x->id;
        p->last[x->id] = -1; /* its block now belongs to t */
        st->n_inplace++;
    } else if (take_best_fit(p, size, &t->plan_offset)) {
        st->n_reused++;
    } else {
        t->plan_offset = p->end;
        p->end += size;
    }
}

/* Free the blocks of the placed tensors whose last step is `step` (t itself if nothing reads it; a
 * tensor handed to an in-place successor no longer owns its block). */
static void free_dying(planner *p, kiln_graph *g, int32_t step) {
    for (int32_t id = p->dies[step]; id >= 0; id = p->next[id]) {
        const kiln_tensor *r = kiln__graph_tensor(g, id);
        if (p->last[id] != step) continue;
        p->last[id] = -1;
        release(p, r->plan_offset, aligned_size(r));
    }
}

/* Mark the subset's computed nodes as this arena's, and bucket them by the step they die at (outputs
 * never do). */
static void collect_deaths(planner *p, const kiln_graph *g, const kiln_plan_subset *sub) {
    int32_t n = kiln__graph_n_nodes(g);
    memset(p->mine, 0, (size_t)kiln__graph_n_tensors(g));
    for (int32_t i = 0; i < n; i++) p->dies[i] = -1;
    for (int32_t i = n - 1; i >= 0; i--) {
        const kiln_tensor *t = kiln__graph_node(g, i);
        int32_t d = p->last[t->id];
        if (!computes(t) || !member(sub, i)) continue;
        p->mine[t->id] = 1;
        if (d < 0 || d >= n) continue;
        p->next[t->id] = p->dies[d];
        p->dies[d] = t->id;
    }
}

kiln_status kiln__plan_measure(kiln_graph *g, size_t *size, kiln_plan_stats *stats) {
    return kiln__plan_measure_subset(g, NULL, size, stats);
}

kiln_status kiln__plan_measure_subset(kiln_graph *g, const kiln_plan_subset *sub, size_t *size,
                                      kiln_plan_stats *stats) {
    kiln_plan_stats st = {0};
    planner p = {0};
    int32_t cap = kiln__graph_n_tensors(g) + 1, steps = kiln__graph_n_nodes(g) + 1;
    p.free_list = kiln__alloc_array((size_t)cap, sizeof *p.free_list);
    p.last = kiln__alloc_array((size_t)cap, sizeof *p.last);
    p.next = kiln__alloc_array((size_t)cap, sizeof *p.next);
    p.dies = kiln__alloc_array((size_t)steps, sizeof *p.dies);
    p.mine = kiln__alloc((size_t)cap);
    if (!p.free_list || !p.last || !p.next || !p.dies || !p.mine) {
        kiln__dealloc(p.free_list);
        kiln__dealloc(p.last);
        kiln__dealloc(p.next);
        kiln__dealloc(p.dies);
        kiln__dealloc(p.mine);
        return kiln__nomem("the planner's tables");
    }
    compute_last_uses(g, sub, p.last);
    collect_deaths(&p, g, sub);
    for (int32_t i = 0; i < kiln__graph_n_nodes(g); i++) {
        if (computes(kiln__graph_node(g, i)) && member(sub, i)) place(&p, g, i, &st);
        free_dying(&p, g, i);
    }
    st.arena_bytes = p.end;
    kiln__dealloc(p.free_list);
    kiln__dealloc(p.last);
    kiln__dealloc(p.next);
    kiln__dealloc(p.dies);
    kiln__dealloc(p.mine);
    *size = st.arena_bytes;
    if (stats) *stats = st;
    return KILN_OK;
}

kiln_status kiln__plan_commit(kiln_graph *g, void *base, size_t size) {
    return kiln__plan_commit_subset(g, NULL, base, size);
}

kiln_status kiln__plan_commit_subset(kiln_graph *g, const kiln_plan_subset *sub, void *base, size_t size) {
    for (int32_t i = 0; i < kiln__graph_n_nodes(g); i++) {
        kiln_tensor *t = kiln__graph_node(g, i);
        if (!member(sub, i)) continue;
        for (int k = 0; k < KILN_MAX_SRC; k++) {
            const kiln_tensor *s = t->src[k];
            if (s && s->op == KILN_OP_NONE && !s->data)
                return kiln__error(KILN_E_INVALID_ARG, "node '%s' reads leaf '%s', which has no data", t->name,
                                   s->name);
        }
        if (kiln__op_is_view(t->op)) {
            t->data = (char *)t->view_src->data + t->view_offset;
            continue;
        }
        if (t->plan_offset > size || kiln__tensor_nbytes(t) > size - t->plan_offset)
            return kiln__error(KILN_E_INTERNAL, "arena of %zu bytes too small for '%s'", size, t->name);
        t->data = (char *)base + t->plan_offset;
    }
    return KILN_OK;
}

kiln_status kiln__plan_verify(const kiln_graph *g) { return kiln__plan_verify_subset(g, NULL); }

kiln_status kiln__plan_verify_subset(const kiln_graph *g, const kiln_plan_subset *sub) {
    int32_t n = kiln__graph_n_nodes(g), cap = kiln__graph_n_tensors(g) + 1;
    int32_t *last = kiln__alloc_array((size_t)cap, sizeof *last), *def = kiln__alloc_array((size_t)cap, sizeof *def);
    kiln_status s = KILN_OK;
    if (!last || !def) {
        kiln__dealloc(last);
        kiln__dealloc(def);
        return kiln__nomem("plan verification");
    }
    compute_last_uses(g, sub, last);
    for (int32_t i = 0; i < n; i++) def[kiln__graph_node(g, i)->id] = i;
    for (int32_t i = 0; i < n && !s; i++) {
        const kiln_tensor *a = kiln__graph_node(g, i);
        if (!computes(a) || !member(sub, i)) continue;
        for (int32_t j = i + 1; j < n && !s; j++) {
            const kiln_tensor *b = kiln__graph_node(g, j);
            if (!computes(b) || !member(sub, j)) continue;
            if (def[b->id] > last[a->id] || b->plan_inplace == a->id) continue;
            bool disjoint = a->plan_offset + kiln__tensor_nbytes(a) <= b->plan_offset ||
                            b->plan_offset + kiln__tensor_nbytes(b) <= a->plan_offset;
            if (!disjoint)
                s = kiln__error(KILN_E_INTERNAL, "'%s' (steps %d..%d, bytes %zu+%zu) overlaps '%s' (step %d, bytes %zu+%zu)",
                                a->name, def[a->id], last[a->id], a->plan_offset, kiln__tensor_nbytes(a), b->name,
                                def[b->id], b->plan_offset, kiln__tensor_nbytes(b));
        }
    }
    kiln__dealloc(last);
    kiln__dealloc(def);
    return s;
}
