/*
 * cpu_backend.c - the CPU backend: host buffers, support for every op, and graph execution on the
 * persistent thread pool. A whole graph is one pool job: every thread walks the execution order, runs
 * its share of each computing node, and meets the others at a barrier before the next node. Per-thread
 * kernel scratch, and the scratch a node's threads share (quantized activations), are sized from the
 * graph and grow only when a larger graph arrives, so a warmed-up decode step allocates nothing.
 */
#include "backend/backend.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/threadpool.h"

#include "core/core.h"
#include "tensor/types.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define HUGE_PAGE ((uintptr_t)2 << 20)

/* A weight rewritten for the packed kernels (repack.c). The original stays in the file mapping and is
 * no longer read, so its pages are not brought in again; the copy lives as long as the backend. */
typedef struct packed_weight {
    const void *src;  /* the weight's bytes in the mapping */
    kiln_type type;
    int64_t ne0, ne1;
    uint64_t print;   /* fingerprint of sampled words, checked on every lookup */
    void *block;      /* allocation; data is its 2 MiB aligned start */
    const void *data;
} packed_weight;

typedef struct cpu_context {
    kiln_pool *pool;
    float *scratch;         /* [n_threads * scratch_stride] */
    size_t scratch_stride;  /* floats per thread */
    size_t scratch_cap;     /* floats allocated */
    void *shared;           /* scratch shared by the threads of one node, 64-byte aligned */
    size_t shared_cap;      /* bytes allocated (plus 64 for alignment) */
    packed_weight *packs;   /* repacked copies of weights, keyed by the weight's data pointer */
    int32_t n_packs, packs_cap;
    const void **node_packed; /* [node index] the packed weight for the active level, or NULL */
    int32_t node_packed_cap;
    kiln_graph *graph;      /* the graph being computed (job argument) */
} cpu_context;

static const char *cpu_name(const kiln_backend *b) {
    (void)b;
    return "cpu";
}

static bool cpu_supports_op(const kiln_backend *b, const kiln_tensor *node) {
    (void)b;
    if (kiln__op_is_view(node->op) && node->op != KILN_OP_CACHE_WRITE) return true;
    if (!kiln__cpu_kernel(node->op)) return false;
    for (int i = 0; i < KILN_MAX_SRC; i++) {
        const kiln_tensor *s = node->src[i];
        if (s && s->type != KILN_TYPE_I32 && !kiln__type_traits(s->type)->supported) return false;
    }
    return true;
}

static kiln_status cpu_buffer_alloc(kiln_backend *b, size_t size, kiln_buffer *out) {
    (void)b;
    out->base = kiln__alloc(size);
    if (!out->base) return kiln__error(KILN_E_NOMEM, "out of memory allocating a %zu-byte CPU buffer", size);
    out->size = size;
    return KILN_OK;
}

static void cpu_buffer_free(kiln_backend *b, kiln_buffer *buf) {
    (void)b;
    kiln__dealloc(buf->base);
}

static void graph_job(void *arg, int ith, int nth) {
    cpu_context *c = arg;
    kiln_graph *g = c->graph;
    for (int32_t i = 0; i < kiln__graph_n_nodes(g); i++) {
        kiln_tensor *t = kiln__graph_node(g, i);
        kiln_cpu_kernel kernel = kiln__cpu_kernel(t->op);
        if (!kernel) continue;
        kiln_cpu_args args = {t, ith, nth, c->scratch ? c->scratch + (size_t)ith * c->scratch_stride : NULL,
                              (void *)(((uintptr_t)c->shared + 63) & ~(uintptr_t)63), c->pool, c->node_packed[i]};
        kernel(&args);
        kiln__pool_barrier(c->pool);
    }
}

/* A cheap fingerprint of a weight: 16 words sampled across it. Constant leaves made by graph passes
 * live in buffers a later plan may reuse, so the address alone does not identify their contents. */
static uint64_t fingerprint(const kiln_tensor *w) {
    size_t bytes = (size_t)w->nb[1] * (size_t)w->ne[1], step = bytes / 16;
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < 16; i++) {
        uint32_t v;
        memcpy(&v, (const char *)w->data + (i * step & ~(size_t)3), sizeof v);
        h = (h ^ v) * 1099511628211ULL;
    }
    return h;
}

/* One weight's repacking, shared by the pool's threads: thread ith rewrites its share of the 16-row
 * groups (each group depends only on its own 16 source rows; a padded last group only on its rows), so
 * the copy is the same bytes whatever the thread count, and the fresh pages fault in on every thread. */
typedef struct repack_job {
    const kiln_tensor *w;
    void *dst;
} repack_job;

static void repack_share(void *arg, int ith, int nth) {
    const repack_job *j = arg;
    const kiln_tensor *w = j->w;
    int64_t groups = (w->ne[1] + 15) / 16, g0, g1;
    kiln__cpu_split(groups, ith, nth, &g0, &g1);
    if (g0 >= g1) return;
    int64_t rows = KILN__MIN(g1 * 16, w->ne[1]) - g0 * 16;
    kiln__repack(w->type, (const char *)w->data + (size_t)g0 * 16 * w->nb[1], w->nb[1], w->ne[0], rows,
                 (char *)j->dst + (size_t)g0 * kiln__repack_group_bytes(w->type, w->ne[0]));
}

/* The packed copy of a matmul or linear node's weight, made on first sight; NULL when the active level
 * has no packed kernel for it or the weight does not qualify (then the mapping is used as it is). */
static kiln_status packed_for(cpu_context *c, const kiln_cpu_isa *isa, const kiln_tensor *node, const void **out) {
    const kiln_tensor *w = node->src[0];
    *out = NULL;
    if ((node->op != KILN_OP_MATMUL && node->op != KILN_OP_LINEAR) || !isa->mm_packed[w->type]) return KILN_OK;
    if (node->op == KILN_OP_LINEAR && (node->ip[1] & KILN_LINEAR_TRANS0)) return KILN_OK;
    if (w->op != KILN_OP_NONE || !(w->flags & (KILN_TENSOR_WEIGHT | KILN_TENSOR_CONST)) || !w->data ||
        w->ne[2] != 1 || w->ne[3] != 1 || !kiln__tensor_is_contiguous(w) ||
        !kiln__repack_supported(w->type, w->ne[0], w->ne[1]))
        return KILN_OK;
    uint64_t print = fingerprint(w);
    for (int32_t i = 0; i < c->n_packs; i++)
        if (c->packs[i].src == w->data && c->packs[i].type == w->type && c->packs[i].ne0 == w->ne[0] &&
            c->packs[i].ne1 == w->ne[1] && c->packs[i].print == print) {
            *out = c->packs[i].data;
            return KILN_OK;
        }
    if (c->n_packs == c->packs_cap) {
        int32_t cap = c->packs_cap ? 2 * c->packs_cap : 64;
        packed_weight *p = kiln__realloc_array(c->packs, (size_t)cap, sizeof *p);
        if (!p) return kiln__nomem("the packed-weight table");
        c->packs = p;
        c->packs_cap = cap;
    }
    size_t bytes = kiln__repack_group_bytes(w->type, w->ne[0]) * (size_t)((w->ne[1] + 15) / 16);
    packed_weight *pw = &c->packs[c->n_packs];
    pw->block = kiln__alloc(bytes + HUGE_PAGE);
    if (!pw->block) return kiln__error(KILN_E_NOMEM, "out of memory repacking weight '%s' (%zu bytes)", w->name, bytes);
    pw->data = (const void *)(((uintptr_t)pw->block + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
#if defined(MADV_HUGEPAGE)
    /* Decode streams the copy once per token: 2 MiB pages spare a page walk every 4 KiB (advice only). */
    madvise((void *)pw->data, bytes, MADV_HUGEPAGE);
#endif
    pw->src = w->data;
    pw->type = w->type;
    pw->ne0 = w->ne[0];
    pw->ne1 = w->ne[1];
    pw->print = print;
    repack_job job = {w, (void *)pw->data};
    kiln__pool_run(c->pool, repack_share, &job);
    c->n_packs++;
    *out = pw->data;
    return KILN_OK;
}

/* Look up (or make) the packed weight of every node, for the level in use now. */
static kiln_status prepare_packed(cpu_context *c, kiln_graph *g) {
    const kiln_cpu_isa *isa = kiln__cpu_isa();
    int32_t n = kiln__graph_n_nodes(g);
    kiln_status s;
    if (n > c->node_packed_cap) {
        const void **p = kiln__realloc_array(c->node_packed, (size_t)n, sizeof *p);
        if (!p) return kiln__nomem("the packed-weight index");
        c->node_packed = p;
        c->node_packed_cap = n;
    }
    for (int32_t i = 0; i < n; i++)
        if ((s = packed_for(c, isa, kiln__graph_node(g, i), &c->node_packed[i]))) return s;
    return KILN_OK;
}

/* Grow the shared scratch to hold the largest node's need. */
static kiln_status grow_shared(cpu_context *c, kiln_graph *g) {
    size_t need = 0;
    for (int32_t i = 0; i < kiln__graph_n_nodes(g); i++) {
        kiln_tensor *t = kiln__graph_node(g, i);
        size_t n = kiln__cpu_kernel(t->op) ? kiln__cpu_shared_bytes(t) : 0;
        if (n > need) need = n;
    }
    if (need > c->shared_cap) {
        void *p = kiln__alloc(need + 64);
        if (!p) return kiln__nomem("shared kernel scratch");
        kiln__dealloc(c->shared);
        c->shared = p;
        c->shared_cap = need;
    }
    return KILN_OK;
}

static kiln_status cpu_compute(kiln_backend *b, kiln_graph *g) {
    cpu_context *c = b->context;
    size_t stride = 0, total;
    int nth = kiln__pool_size(c->pool);
    kiln_status s;
    for (int32_t i = 0; i < kiln__graph_n_nodes(g); i++) {
        kiln_tensor *t = kiln__graph_node(g, i);
        size_t need = kiln__cpu_kernel(t->op) ? kiln__cpu_scratch_floats(t) : 0;
        if (need > stride) stride = need;
    }
    if ((s = grow_shared(c, g)) || (s = prepare_packed(c, g))) return s;
    stride = (stride + 15) & ~(size_t)15; /* keep each thread's scratch 64-byte aligned */
    if (kiln__mul_overflow_size(stride, (size_t)nth, &total))
        return kiln__error(KILN_E_RANGE, "kernel scratch size overflows");
    if (total > c->scratch_cap) {
        float *p = kiln__realloc_array(c->scratch, total, sizeof(float));
        if (!p) return kiln__nomem("kernel scratch");
        c->scratch = p;
        c->scratch_cap = total;
    }
    c->scratch_stride = stride;
    c->graph = g;
    kiln__pool_run(c->pool, graph_job, c);
    c->graph = NULL;
    return KILN_OK;
}

static void cpu_destroy(kiln_backend *b) {
    cpu_context *c = b->context;
    kiln__pool_destroy(c->pool);
    kiln__dealloc(c->scratch);
    kiln__dealloc(c->shared);
    for (int32_t i = 0; i < c->n_packs; i++) kiln__dealloc(c->packs[i].block);
    kiln__dealloc(c->packs);
    kiln__dealloc(c->node_packed);
    kiln__dealloc(c);
    kiln__dealloc(b);
}

static const kiln_backend_iface cpu_iface = {
    cpu_name, cpu_supports_op, cpu_buffer_alloc, cpu_buffer_free, cpu_compute, cpu_destroy,
};

kiln_status kiln__backend_cpu_create(int32_t n_threads, kiln_backend **out) {
    kiln_backend *b;
    cpu_context *c;
    kiln_status s;
    *out = NULL;
    if (n_threads == 0) n_threads = kiln_default_threads();
    b = kiln__calloc(1, sizeof *b);
    c = kiln__calloc(1, sizeof *c);
    if (!b || !c) {
        kiln__dealloc(b);
        kiln__dealloc(c);
        return kiln__nomem("the CPU backend");
    }
    s = kiln__pool_create(n_threads, &c->pool);
    if (s) {
        kiln__dealloc(b);
        kiln__dealloc(c);
        return s;
    }
    b->iface = &cpu_iface;
    b->context = c;
    *out = b;
    return KILN_OK;
}
