/*
 * cpu_backend.c - the CPU backend: host buffers, support for every op, and graph execution on the
 * persistent thread pool. A whole graph is one pool job: every thread walks the execution order, runs
 * its share of each computing node, and meets the others at a barrier before the next node. Per-thread
 * kernel scratch is sized from the graph and grows only when a larger graph arrives, so a warmed-up
 * decode step allocates nothing.
 */
#include "backend/backend.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/threadpool.h"

#include "core/core.h"
#include "tensor/types.h"

#include <stdlib.h>

typedef struct cpu_context {
    kiln_pool *pool;
    float *scratch;         /* [n_threads * scratch_stride] */
    size_t scratch_stride;  /* floats per thread */
    size_t scratch_cap;     /* floats allocated */
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
        kiln_cpu_args args = {t, ith, nth, c->scratch + (size_t)ith * c->scratch_stride};
        kernel(&args);
        kiln__pool_barrier(c->pool);
    }
}

static kiln_status cpu_compute(kiln_backend *b, kiln_graph *g) {
    cpu_context *c = b->context;
    size_t stride = 0, total;
    int nth = kiln__pool_size(c->pool);
    for (int32_t i = 0; i < kiln__graph_n_nodes(g); i++) {
        size_t need = kiln__cpu_scratch_floats(kiln__graph_node(g, i));
        if (need > stride) stride = need;
    }
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
