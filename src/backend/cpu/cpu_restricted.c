/*
 * cpu_restricted.c - a CPU backend that behaves, towards the scheduler, like a device (see backend.h).
 *
 * It wraps a real CPU backend of its own (its own thread pool and packed weights, the same kernels) and
 * changes two things: supports_op accepts only the ops it was given (views always: they compute nothing),
 * and its buffers are its own allocations declared not host, so the scheduler must move every byte in and
 * out through the buffer verbs below. Its kernels still dereference tensor data as host pointers, which is
 * what makes it a unified-memory backend: leaves flagged KILN_TENSOR_WEIGHT or KILN_TENSOR_CONST are read
 * where they lie in host memory, and everything else must have been copied into its buffers.
 *
 * Buffers start at a KILN_BACKEND_ALIGN boundary; the allocation's own start is kept in the word before
 * `base`, so buffer_free can release it.
 */
#include "backend/backend.h"

#include "core/core.h"

#include <string.h>

typedef struct restricted_context {
    kiln_backend *cpu;           /* the inner CPU backend that computes */
    bool allowed[KILN_OP_COUNT]; /* ops this instance accepts */
} restricted_context;

static const char *restricted_name(const kiln_backend *b) {
    (void)b;
    return "cpu-restricted";
}

static bool restricted_supports_op(const kiln_backend *b, const kiln_tensor *node) {
    const restricted_context *c = b->context;
    if (kiln__op_is_view(node->op) && node->op != KILN_OP_CACHE_WRITE) return true;
    return node->op > KILN_OP_NONE && node->op < KILN_OP_COUNT && c->allowed[node->op] &&
           kiln__backend_supports_op(c->cpu, node);
}

static bool restricted_is_host(const kiln_backend *b) {
    (void)b;
    return false;
}

static size_t restricted_alignment(const kiln_backend *b) {
    (void)b;
    return KILN_BACKEND_ALIGN;
}

static kiln_status restricted_buffer_alloc(kiln_backend *b, size_t size, kiln_buffer *out) {
    size_t total;
    char *raw;
    (void)b;
    if (kiln__add_overflow_size(size, KILN_BACKEND_ALIGN + sizeof(void *), &total))
        return kiln__error(KILN_E_RANGE, "a %zu-byte cpu-restricted buffer overflows", size);
    raw = kiln__alloc(total);
    if (!raw)
        return kiln__error(KILN_E_NOMEM, "out of memory allocating a %zu-byte cpu-restricted buffer", size);
    out->base = (void *)(((uintptr_t)raw + sizeof(void *) + KILN_BACKEND_ALIGN - 1) &
                         ~(uintptr_t)(KILN_BACKEND_ALIGN - 1));
    memcpy((char *)out->base - sizeof(void *), &raw, sizeof raw);
    out->size = size;
    return KILN_OK;
}

static void restricted_buffer_free(kiln_backend *b, kiln_buffer *buf) {
    void *raw;
    (void)b;
    memcpy(&raw, (char *)buf->base - sizeof(void *), sizeof raw);
    kiln__dealloc(raw);
}

/* The verbs: the wrappers have checked the ranges. */
static kiln_status restricted_set(kiln_buffer *buf, size_t offset, const void *src, size_t size) {
    memcpy((char *)buf->base + offset, src, size);
    return KILN_OK;
}

static kiln_status restricted_get(const kiln_buffer *buf, size_t offset, void *dst, size_t size) {
    memcpy(dst, (const char *)buf->base + offset, size);
    return KILN_OK;
}

static kiln_status restricted_memset(kiln_buffer *buf, size_t offset, int value, size_t size) {
    memset((char *)buf->base + offset, value, size);
    return KILN_OK;
}

static kiln_status restricted_copy(const kiln_buffer *src, size_t src_offset, kiln_buffer *dst,
                                   size_t dst_offset, size_t size) {
    memmove((char *)dst->base + dst_offset, (const char *)src->base + src_offset, size);
    return KILN_OK;
}

static kiln_status restricted_compute(kiln_backend *b, kiln_graph *g, int32_t i0, int32_t i1) {
    restricted_context *c = b->context;
    kiln__backend_set_abort(c->cpu, b->abort_fn, b->abort_user); /* the callback set on this backend */
    return c->cpu->iface->compute(c->cpu, g, i0, i1);
}

static void restricted_memory(const kiln_backend *b, kiln_backend_memory *out) {
    const restricted_context *c = b->context;
    kiln__backend_memory(c->cpu, out);
}

static void restricted_destroy(kiln_backend *b) {
    restricted_context *c = b->context;
    kiln__backend_destroy(c->cpu);
    kiln__dealloc(c);
    kiln__dealloc(b);
}

static const kiln_backend_iface restricted_iface = {
    .name = restricted_name,
    .supports_op = restricted_supports_op,
    .is_host = restricted_is_host,
    .alignment = restricted_alignment,
    .buffer_alloc = restricted_buffer_alloc,
    .buffer_free = restricted_buffer_free,
    .buffer_set = restricted_set,
    .buffer_get = restricted_get,
    .buffer_memset = restricted_memset,
    .buffer_copy = restricted_copy,
    .compute = restricted_compute,
    .destroy = restricted_destroy,
    .memory = restricted_memory,
};

kiln_status kiln__backend_cpu_restricted_create(int32_t n_threads, const kiln_op *ops, int32_t n_ops,
                                                kiln_backend **out) {
    kiln_backend *b;
    restricted_context *c;
    kiln_status s;
    *out = NULL;
    if (n_ops < 0 || (n_ops > 0 && !ops))
        return kiln__error(KILN_E_INVALID_ARG, "cpu-restricted backend: %d ops given without a list", n_ops);
    for (int32_t i = 0; i < n_ops; i++)
        if (ops[i] <= KILN_OP_NONE || ops[i] >= KILN_OP_COUNT)
            return kiln__error(KILN_E_INVALID_ARG,
                               "cpu-restricted backend: op %d (entry %d) is not a computing op", (int)ops[i],
                               i);
    b = kiln__calloc(1, sizeof *b);
    c = kiln__calloc(1, sizeof *c);
    if (!b || !c) {
        kiln__dealloc(b);
        kiln__dealloc(c);
        return kiln__nomem("the cpu-restricted backend");
    }
    if ((s = kiln__backend_cpu_create(n_threads, &c->cpu))) {
        kiln__dealloc(b);
        kiln__dealloc(c);
        return s;
    }
    for (int32_t i = 0; i < n_ops; i++) c->allowed[ops[i]] = true;
    b->iface = &restricted_iface;
    b->context = c;
    *out = b;
    return KILN_OK;
}
