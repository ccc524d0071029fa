/*
 * cpu_backend.c - the CPU backend: host buffers, support for every op, and graph execution on the
 * persistent thread pool. A range of the execution order (the whole graph, or one scheduler split) is one
 * pool job: every thread walks the range, runs its share of each computing node, and meets the others at
 * a barrier before the next node. Its buffers are host memory, so the buffer verbs use the wrappers'
 * defaults (memcpy, memset, memmove). Per-thread
 * kernel scratch, and the scratch a node's threads share (quantized activations), are sized from the
 * graph and grow only when a larger graph arrives, so a warmed-up decode step allocates nothing.
 */
#include "backend/backend.h"
#include "backend/cpu/cpu_profile.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/threadpool.h"

#include "core/core.h"
#include "tensor/types.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define HUGE_PAGE ((uintptr_t)2 << 20)

/* A weight rewritten for the packed kernels (repack.c), found again by the weight's identity: its bytes
 * in the model (the file mapping, or the model's constant store, which lives as long as the model and
 * never reuses an address) with its type and shape. When the weight lies in the model's file mapping, the
 * pages wholly inside it are handed back to the kernel once the copy exists: nothing reads them on this
 * path, and a reader elsewhere (get_rows of a tied embedding) faults them in again from the file. The
 * copy lives as long as the backend, that is as long as the model. */
typedef struct packed_weight {
    const void *src;  /* the weight's bytes */
    kiln_type type;
    int64_t ne0, ne1;
    size_t bytes;     /* of the packed copy */
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
    packed_weight *packs;   /* repacked copies of weights */
    int32_t n_packs, packs_cap;
    uint64_t packed_bytes, released_bytes;
    const char *map;        /* the model's read-only file mapping, or NULL */
    size_t map_size;
    const void **node_packed; /* [node index] the packed weight for the active level, or NULL */
    int32_t node_packed_cap;
    kiln_graph *graph;      /* the graph being computed (job argument) */
    int32_t i0, i1;         /* the range of its execution order being computed (job argument) */
    kiln_backend *self;     /* for the abort callback */
    kiln_cpu_profile prof;  /* kiln_model_profile: read and written by thread 0 and the calling thread only */
    atomic_int stop_at;     /* the node after which every thread stops: set by thread 0 when the abort
                             * callback says so; each thread compares it with the node it has just
                             * finished, so all stop after the same barrier */
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

static bool cpu_is_host(const kiln_backend *b) {
    (void)b;
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
    for (int32_t i = c->i0; i < c->i1; i++) {
        kiln_tensor *t = kiln__graph_node(g, i);
        kiln_cpu_kernel kernel = kiln__cpu_kernel(t->op);
        if (!kernel) continue;
        kiln_cpu_args args = {t, ith, nth, c->scratch ? c->scratch + (size_t)ith * c->scratch_stride : NULL,
                              (void *)(((uintptr_t)c->shared + 63) & ~(uintptr_t)63), c->pool, c->node_packed[i]};
        uint64_t t0 = ith == 0 && c->prof.on ? kiln__now_ns() : 0;
        kernel(&args);
        if (ith == 0 && c->self->abort_fn && c->self->abort_fn(c->self->abort_user))
            atomic_store_explicit(&c->stop_at, i, memory_order_relaxed);
        kiln__pool_barrier(c->pool);
        if (t0) kiln__cpu_profile_node(&c->prof, t, kiln__now_ns() - t0);
        if (atomic_load_explicit(&c->stop_at, memory_order_relaxed) <= i) return;
    }
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

/* The weight of a matmul or linear node that the active level runs from a packed copy, or NULL when the
 * level has no packed kernel for it or the weight does not qualify (then it is read as it is). */
static const kiln_tensor *packable(const kiln_cpu_isa *isa, const kiln_tensor *node) {
    const kiln_tensor *w = node->src[0];
    if ((node->op != KILN_OP_MATMUL && node->op != KILN_OP_LINEAR) || !isa->mm_packed[w->type]) return NULL;
    if (node->op == KILN_OP_LINEAR && (node->ip[1] & KILN_LINEAR_TRANS0)) return NULL;
    if (w->op != KILN_OP_NONE || !(w->flags & (KILN_TENSOR_WEIGHT | KILN_TENSOR_CONST)) || !w->data ||
        w->ne[2] != 1 || w->ne[3] != 1 || !kiln__tensor_is_contiguous(w) ||
        !kiln__repack_supported(w->type, w->ne[0], w->ne[1]))
        return NULL;
    return w;
}

static const packed_weight *find_packed(const cpu_context *c, const kiln_tensor *w) {
    for (int32_t i = 0; i < c->n_packs; i++)
        if (c->packs[i].src == w->data && c->packs[i].type == w->type && c->packs[i].ne0 == w->ne[0] &&
            c->packs[i].ne1 == w->ne[1])
            return &c->packs[i];
    return NULL;
}

static size_t packed_bytes(const kiln_tensor *w) {
    return kiln__repack_group_bytes(w->type, w->ne[0]) * (size_t)((w->ne[1] + 15) / 16);
}

/* Hand back the mapped pages wholly inside [p, p + n) when they belong to the model's file mapping. */
static void release_source(cpu_context *c, const void *p, size_t n) {
    uintptr_t page = 4096, lo = ((uintptr_t)p + page - 1) & ~(page - 1), hi = ((uintptr_t)p + n) & ~(page - 1);
    if (!c->map || (const char *)p < c->map || (const char *)p + n > c->map + c->map_size || hi <= lo) return;
#if defined(MADV_DONTNEED)
    if (madvise((void *)lo, hi - lo, MADV_DONTNEED) == 0) c->released_bytes += hi - lo;
#endif
}

/* Make the packed copy of w, on every pool thread. */
static kiln_status make_packed(cpu_context *c, const kiln_tensor *w, const void **out) {
    if (c->n_packs == c->packs_cap) {
        int32_t cap = c->packs_cap ? 2 * c->packs_cap : 64;
        packed_weight *p = kiln__realloc_array(c->packs, (size_t)cap, sizeof *p);
        if (!p) return kiln__nomem("the packed-weight table");
        c->packs = p;
        c->packs_cap = cap;
    }
    size_t bytes = packed_bytes(w);
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
    pw->bytes = bytes;
    repack_job job = {w, (void *)pw->data};
    kiln__pool_run(c->pool, repack_share, &job);
    c->n_packs++;
    c->packed_bytes += bytes;
    release_source(c, w->data, (size_t)w->nb[1] * (size_t)w->ne[1]);
    *out = pw->data;
    return KILN_OK;
}

/* Look up (or make) the packed weight of every node in [i0, i1), for the level in use now, reporting
 * progress over the bytes still to prepare. The index is sized for the whole graph, so that it stays
 * indexed by node position. */
static kiln_status prepare_packed(const kiln_backend *b, cpu_context *c, kiln_graph *g, int32_t i0,
                                  int32_t i1) {
    const kiln_cpu_isa *isa = kiln__cpu_isa();
    int32_t n = kiln__graph_n_nodes(g);
    uint64_t to_prepare = 0, done = 0;
    kiln_status s;
    if (n > c->node_packed_cap) {
        const void **p = kiln__realloc_array(c->node_packed, (size_t)n, sizeof *p);
        if (!p) return kiln__nomem("the packed-weight index");
        c->node_packed = p;
        c->node_packed_cap = n;
    }
    for (int32_t i = i0; i < i1; i++) {
        const kiln_tensor *w = packable(isa, kiln__graph_node(g, i));
        const packed_weight *pw = w ? find_packed(c, w) : NULL;
        c->node_packed[i] = pw ? pw->data : NULL;
        if (w && !pw) to_prepare += packed_bytes(w);
    }
    for (int32_t i = i0; i < i1 && to_prepare; i++) {
        const kiln_tensor *w = packable(isa, kiln__graph_node(g, i));
        if (!w || c->node_packed[i]) continue;
        const packed_weight *pw = find_packed(c, w); /* made for an earlier node of this graph */
        if (pw) {
            c->node_packed[i] = pw->data;
            continue;
        }
        if ((s = make_packed(c, w, &c->node_packed[i]))) return s;
        done += packed_bytes(w);
        if (b->progress) b->progress(b->progress_user, done, to_prepare);
    }
    return KILN_OK;
}

/* Grow the shared scratch to hold the largest need of a node in [i0, i1). */
static kiln_status grow_shared(cpu_context *c, kiln_graph *g, int32_t i0, int32_t i1) {
    size_t need = 0;
    for (int32_t i = i0; i < i1; i++) {
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

static kiln_status cpu_compute(kiln_backend *b, kiln_graph *g, int32_t i0, int32_t i1) {
    cpu_context *c = b->context;
    size_t stride = 0, total;
    int nth = kiln__pool_size(c->pool);
    kiln_status s;
    uint64_t t0 = c->prof.on ? kiln__now_ns() : 0, t1 = 0;
    if (i0 == i1) return KILN_OK;
    for (int32_t i = i0; i < i1; i++) {
        kiln_tensor *t = kiln__graph_node(g, i);
        size_t need = kiln__cpu_kernel(t->op) ? kiln__cpu_scratch_floats(t) : 0;
        if (need > stride) stride = need;
    }
    if ((s = grow_shared(c, g, i0, i1)) || (s = prepare_packed(b, c, g, i0, i1))) return s;
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
    c->i0 = i0;
    c->i1 = i1;
    atomic_store(&c->stop_at, INT32_MAX);
    if (t0) t1 = kiln__now_ns();
    kiln__pool_run(c->pool, graph_job, c);
    c->graph = NULL;
    if (t0) {
        c->prof.computes++;
        c->prof.prepare_ns += t1 - t0;
        c->prof.run_ns += kiln__now_ns() - t1;
    }
    if (atomic_load(&c->stop_at) != INT32_MAX) return kiln__error(KILN_E_ABORTED, "the computation was aborted by the caller");
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

static void cpu_memory(const kiln_backend *b, kiln_backend_memory *out) {
    const cpu_context *c = b->context;
    out->n_prepared = c->n_packs;
    out->prepared_bytes = c->packed_bytes;
    out->released_bytes = c->released_bytes;
}

static kiln_status cpu_profile(kiln_backend *b, bool on) {
    kiln__cpu_profile_set(&((cpu_context *)b->context)->prof, on);
    return KILN_OK;
}

static void cpu_profile_read(const kiln_backend *b, kiln_device_profile *out) {
    kiln__cpu_profile_read(&((const cpu_context *)b->context)->prof, out);
}

static const kiln_backend_iface cpu_iface = {
    .name = cpu_name,
    .supports_op = cpu_supports_op,
    .is_host = cpu_is_host,
    .buffer_alloc = cpu_buffer_alloc,
    .buffer_free = cpu_buffer_free,
    .compute = cpu_compute,
    .destroy = cpu_destroy,
    .memory = cpu_memory,
    .profile = cpu_profile,
    .profile_read = cpu_profile_read,
};

void kiln__backend_cpu_set_mapping(kiln_backend *b, const void *mapping, size_t size) {
    cpu_context *c = b->context;
    c->map = mapping;
    c->map_size = mapping ? size : 0;
}

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
    c->self = b;
    *out = b;
    return KILN_OK;
}
