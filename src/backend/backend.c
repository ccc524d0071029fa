/*
 * backend.c - the public wrappers around a backend's iface (see backend.h): they check arguments,
 * ranges and support once, and supply the defaults of the optional slots, so backends implement only the
 * happy path of what they need.
 */
#include "backend/backend.h"

#include "core/core.h"

#include <string.h>

const char *kiln__backend_name(const kiln_backend *b) { return b->iface->name(b); }

bool kiln__backend_supports_op(const kiln_backend *b, const kiln_tensor *node) {
    return b->iface->supports_op(b, node);
}

bool kiln__backend_holds_kv(const kiln_backend *b, kiln_type type, size_t row_bytes, int64_t n_cells) {
    return b->iface->holds_kv ? b->iface->holds_kv(b, type, row_bytes, n_cells) : false;
}

bool kiln__backend_owns(const kiln_backend *b, const void *data) {
    return b->iface->owns ? b->iface->owns(b, data) : false;
}

bool kiln__backend_is_host(const kiln_backend *b) { return b->iface->is_host ? b->iface->is_host(b) : false; }

size_t kiln__backend_alignment(const kiln_backend *b) {
    size_t a = b->iface->alignment ? b->iface->alignment(b) : 0;
    return a ? a : KILN_BACKEND_ALIGN;
}

kiln_status kiln__backend_buffer_alloc(kiln_backend *b, size_t size, kiln_buffer *out) {
    kiln_status s;
    out->backend = NULL;
    out->base = NULL;
    out->size = 0;
    if ((s = b->iface->buffer_alloc(b, size, out))) return s;
    out->backend = b;
    return KILN_OK;
}

void kiln__backend_buffer_free(kiln_backend *b, kiln_buffer *buf) {
    if (buf && buf->base) b->iface->buffer_free(b, buf);
    if (buf) {
        buf->backend = NULL;
        buf->base = NULL;
        buf->size = 0;
    }
}

static kiln_status check_nodes(kiln_backend *b, kiln_graph *g, int32_t i0, int32_t i1) {
    for (int32_t i = i0; i < i1; i++) {
        const kiln_tensor *t = kiln__graph_node(g, i);
        if (!kiln__backend_supports_op(b, t))
            return kiln__error(KILN_E_UNSUPPORTED, "backend %s cannot run node '%s' (%s)",
                               kiln__backend_name(b), t->name, kiln__op_name(t->op));
    }
    return KILN_OK;
}

kiln_status kiln__backend_compute(kiln_backend *b, kiln_graph *g) {
    return kiln__backend_compute_range(b, g, 0, kiln__graph_n_nodes(g));
}

kiln_status kiln__backend_compute_range(kiln_backend *b, kiln_graph *g, int32_t i0, int32_t i1) {
    kiln_status s;
    if (i0 < 0 || i1 < i0 || i1 > kiln__graph_n_nodes(g))
        return kiln__error(KILN_E_RANGE, "backend %s: node range [%d, %d) outside the graph's %d nodes",
                           kiln__backend_name(b), i0, i1, kiln__graph_n_nodes(g));
    if ((s = check_nodes(b, g, i0, i1))) return s;
    return b->iface->compute(b, g, i0, i1);
}

static kiln_vulkan_test_hooks vulkan_hooks;

void kiln__vulkan_set_test_hooks(const kiln_vulkan_test_hooks *hooks) {
    memset(&vulkan_hooks, 0, sizeof vulkan_hooks);
    if (hooks) vulkan_hooks = *hooks;
}

const kiln_vulkan_test_hooks *kiln__vulkan_test_hooks(void) { return &vulkan_hooks; }

const char *kiln__backend_describe(const kiln_backend *b) {
    return b->iface->describe ? b->iface->describe(b) : b->iface->name(b);
}

const char *kiln_device_type_name(kiln_device_type type) {
    switch (type) {
    case KILN_DEVICE_INTEGRATED_GPU: return "integrated GPU";
    case KILN_DEVICE_DISCRETE_GPU: return "discrete GPU";
    case KILN_DEVICE_VIRTUAL_GPU: return "virtual GPU";
    case KILN_DEVICE_CPU: return "CPU";
    default: return "other";
    }
}

void kiln__backend_destroy(kiln_backend *b) {
    if (b) b->iface->destroy(b);
}

void kiln__backend_memory(const kiln_backend *b, kiln_backend_memory *out) {
    memset(out, 0, sizeof *out);
    if (b->iface->memory) b->iface->memory(b, out);
}

/* The op whose printed name (kiln__op_name) is the len bytes at s, or KILN_OP_NONE. */
static kiln_op op_named(const char *s, size_t len) {
    for (int op = KILN_OP_NONE + 1; op < KILN_OP_COUNT; op++) {
        const char *name = kiln__op_name((kiln_op)op);
        if (strlen(name) == len && !memcmp(name, s, len)) return (kiln_op)op;
    }
    return KILN_OP_NONE;
}

/* "vulkan" (device 0), "vulkan:N" (device N) or "auto" (-1: the first discrete or integrated GPU). */
static kiln_status vulkan_named(const char *name, size_t len, kiln_backend **out) {
    long index = 0;
    if (len == 4 && !memcmp(name, "auto", 4)) return kiln__backend_vulkan_create(-1, out);
    if (len > 7) {
        index = 0;
        for (size_t i = 7; i < len; i++) {
            if (name[i] < '0' || name[i] > '9' || index > 1000)
                return kiln__error(KILN_E_INVALID_ARG, "device '%.*s': the index after 'vulkan:' is not a number",
                                   (int)KILN__MIN(len, 64), name);
            index = index * 10 + (name[i] - '0');
        }
    }
    return kiln__backend_vulkan_create((int32_t)index, out);
}

bool kiln__backend_name_is_vulkan(const char *name, size_t len) {
    return (len == 4 && !memcmp(name, "auto", 4)) || (len == 6 && !memcmp(name, "vulkan", 6)) ||
           (len > 7 && !memcmp(name, "vulkan:", 7));
}

/* "cpu-restricted:OP+OP+...": the restricted CPU backend running the listed ops; "vulkan", "vulkan:N" and
 * "auto": a Vulkan backend. */
kiln_status kiln__backend_create_named(const char *name, size_t len, int32_t n_threads, kiln_backend **out) {
    static const char restricted[] = "cpu-restricted:";
    const size_t plen = sizeof restricted - 1;
    kiln_op ops[KILN_OP_COUNT];
    int32_t n_ops = 0;
    *out = NULL;
    if (kiln__backend_name_is_vulkan(name, len)) return vulkan_named(name, len, out);
    if (len < plen || memcmp(name, restricted, plen) != 0)
        return kiln__error(KILN_E_NOT_FOUND,
                           "device '%.*s' is not known (known: cpu, vulkan, vulkan:N, auto, cpu-restricted:OP+OP+...)",
                           (int)KILN__MIN(len, 64), name);
    for (size_t at = plen; at <= len;) {
        const char *plus = memchr(name + at, '+', len - at);
        size_t end = plus ? (size_t)(plus - name) : len;
        kiln_op op = op_named(name + at, end - at);
        if (op == KILN_OP_NONE)
            return kiln__error(KILN_E_INVALID_ARG, "device '%.*s': '%.*s' is not an op name (as kiln graph prints them)",
                               (int)KILN__MIN(len, 64), name, (int)KILN__MIN(end - at, 64), name + at);
        if (n_ops < KILN_OP_COUNT) ops[n_ops++] = op; /* a repeated op just takes another slot */
        at = end + 1;
    }
    return kiln__backend_cpu_restricted_create(n_threads, ops, n_ops, out);
}

void kiln__backend_set_abort(kiln_backend *b, kiln_abort_fn fn, void *user) {
    b->abort_fn = fn;
    b->abort_user = user;
}

void kiln__backend_set_progress(kiln_backend *b, kiln_progress_fn fn, void *user) {
    b->progress = fn;
    b->progress_user = user;
}

/* ---- Buffer verbs ---- */

/* [offset, offset + size) inside buf, checked without overflow. verb names the caller in the message. */
static kiln_status check_range(const kiln_buffer *buf, size_t offset, size_t size, const char *verb) {
    size_t end;
    if (!buf || !buf->backend)
        return kiln__error(KILN_E_INVALID_ARG, "buffer %s: the buffer was never allocated", verb);
    if (kiln__add_overflow_size(offset, size, &end) || end > buf->size)
        return kiln__error(KILN_E_RANGE,
                           "buffer %s on %s: offset %zu + %zu bytes exceeds the buffer's %zu bytes", verb,
                           kiln__backend_name(buf->backend), offset, size, buf->size);
    return KILN_OK;
}

static kiln_status no_slot(const kiln_buffer *buf, const char *verb) {
    return kiln__error(KILN_E_UNSUPPORTED, "buffer %s: backend %s is not host memory and has no %s", verb,
                       kiln__backend_name(buf->backend), verb);
}

kiln_status kiln__buffer_set(kiln_buffer *buf, size_t offset, const void *src, size_t size) {
    kiln_status s = check_range(buf, offset, size, "set");
    if (s || size == 0) return s;
    if (buf->backend->iface->buffer_set) return buf->backend->iface->buffer_set(buf, offset, src, size);
    if (!kiln__backend_is_host(buf->backend)) return no_slot(buf, "set");
    memcpy((char *)buf->base + offset, src, size);
    return KILN_OK;
}

kiln_status kiln__buffer_get(const kiln_buffer *buf, size_t offset, void *dst, size_t size) {
    kiln_status s = check_range(buf, offset, size, "get");
    if (s || size == 0) return s;
    if (buf->backend->iface->buffer_get) return buf->backend->iface->buffer_get(buf, offset, dst, size);
    if (!kiln__backend_is_host(buf->backend)) return no_slot(buf, "get");
    memcpy(dst, (const char *)buf->base + offset, size);
    return KILN_OK;
}

kiln_status kiln__buffer_memset(kiln_buffer *buf, size_t offset, int value, size_t size) {
    kiln_status s = check_range(buf, offset, size, "memset");
    if (s || size == 0) return s;
    if (buf->backend->iface->buffer_memset)
        return buf->backend->iface->buffer_memset(buf, offset, value, size);
    if (!kiln__backend_is_host(buf->backend)) return no_slot(buf, "memset");
    memset((char *)buf->base + offset, value, size);
    return KILN_OK;
}

kiln_status kiln__buffer_copy(const kiln_buffer *src, size_t src_offset, kiln_buffer *dst, size_t dst_offset,
                              size_t size) {
    kiln_status s;
    if ((s = check_range(src, src_offset, size, "copy (source)")) ||
        (s = check_range(dst, dst_offset, size, "copy")))
        return s;
    if (src->backend != dst->backend)
        return kiln__error(KILN_E_INVALID_ARG,
                           "buffer copy from a %s buffer into a %s buffer: copies stay within one backend",
                           kiln__backend_name(src->backend), kiln__backend_name(dst->backend));
    if (size == 0) return KILN_OK;
    if (dst->backend->iface->buffer_copy)
        return dst->backend->iface->buffer_copy(src, src_offset, dst, dst_offset, size);
    if (!kiln__backend_is_host(dst->backend)) return no_slot(dst, "copy");
    memmove((char *)dst->base + dst_offset, (const char *)src->base + src_offset, size);
    return KILN_OK;
}
