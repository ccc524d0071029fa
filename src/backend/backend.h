/*
 * backend.h - the interface every compute backend implements, and the wrappers the engine calls.
 *
 * A backend is { iface, context }: iface is a table of function pointers, context the backend's private
 * state. The CPU backend is always available and supports every op; a device backend answers
 * supports_op() for what it can run, and everything else falls back to the CPU (runtime/sched.h).
 *
 * Buffers have verbs. A buffer belongs to the backend that allocated it, and only that backend knows
 * what its memory is: for a host backend `base` is a host pointer, for any other it is an opaque device
 * address that only the backend's own slots and kernels interpret (a tensor placed in such a buffer has
 * data = base + offset, which nothing outside the backend may dereference). Code outside src/backend/
 * moves bytes in and out through kiln__buffer_set/get/memset/copy, never through `base`.
 *
 * Contract of each slot (optional slots may be NULL; their defaults live in the wrappers in backend.c):
 *   name          a constant string ("cpu")
 *   supports_op   whether compute() can run this node (its op, types and layout)
 *   is_host       optional; whether the backend's buffers are plain host memory that the host may read
 *                 and write directly (default: false)
 *   alignment     optional; the alignment of offsets a tensor may start at in its buffers (default:
 *                 KILN_BACKEND_ALIGN)
 *   buffer_alloc  memory the backend can compute on; size may be 0
 *   buffer_free   releases a buffer from buffer_alloc; a zeroed buffer is a no-op
 *   buffer_set    optional; host bytes -> buffer at offset (default for a host backend: memcpy)
 *   buffer_get    optional; buffer at offset -> host bytes (default for a host backend: memcpy)
 *   buffer_memset optional; fill a range with a byte value (default for a host backend: memset)
 *   buffer_copy   optional; buffer to buffer within this backend (default for a host backend: memmove)
 *                 The wrappers have checked every range against the buffers' sizes before a slot runs.
 *   compute       runs the execution-order nodes [i0, i1) of an ordered, planned graph (kiln__graph_order
 *                 then a plan commit); every node of the range is one this backend supports. Nodes outside
 *                 the range are neither run nor read except as sources of nodes inside it.
 *   destroy       releases the backend
 *   memory        optional: what it prepared (repacked weights) and, for a device, its memory's size; the
 *                 wrapper reports zeros without it
 *   describe      optional: the name with the device it runs on, for kiln_model_backends
 *   holds_kv      optional: whether a context's KV cache of this type, n_cells cells of row_bytes each, may
 *                 live in its buffers: then it must run every node that reads or writes the cache, for
 *                 every graph of that context (default: false; the CPU holds the cache)
 *   owns          optional: whether data points into one of its buffers (default: false); the scheduler
 *                 asks it of KV-cache leaves to find where the cache lives, host caches included, so it
 *                 must answer false for every host address and every other backend's buffer (Vulkan's
 *                 pool addresses carry a tag bit no user-space pointer has)
 *   profile       optional: start (its counters cleared) or stop timing its kernels (kiln_model_profile);
 *                 KILN_E_UNSUPPORTED when it cannot. Without it the backend is never profiled
 *   profile_read  optional, with profile: its counters, rows in any order (the engine merges and sorts)
 */
#ifndef KILN_BACKEND_H
#define KILN_BACKEND_H

#include "graph/graph.h"

/* The alignment of tensors in a buffer when a backend does not say otherwise (the planner's too). */
#define KILN_BACKEND_ALIGN 64

typedef struct kiln_backend kiln_backend;

typedef struct kiln_buffer {
    kiln_backend *backend; /* the owner; NULL for a zeroed (never allocated) buffer */
    void *base;  /* host pointer (is_host) or opaque device address; never dereferenced outside the backend */
    size_t size; /* bytes */
} kiln_buffer;

typedef struct kiln_backend_memory kiln_backend_memory;

typedef struct kiln_backend_iface {
    const char *(*name)(const kiln_backend *b);
    bool (*supports_op)(const kiln_backend *b, const kiln_tensor *node);
    bool (*is_host)(const kiln_backend *b);
    size_t (*alignment)(const kiln_backend *b);
    kiln_status (*buffer_alloc)(kiln_backend *b, size_t size, kiln_buffer *out);
    void (*buffer_free)(kiln_backend *b, kiln_buffer *buf);
    kiln_status (*buffer_set)(kiln_buffer *buf, size_t offset, const void *src, size_t size);
    kiln_status (*buffer_get)(const kiln_buffer *buf, size_t offset, void *dst, size_t size);
    kiln_status (*buffer_memset)(kiln_buffer *buf, size_t offset, int value, size_t size);
    kiln_status (*buffer_copy)(const kiln_buffer *src, size_t src_offset, kiln_buffer *dst, size_t dst_offset,
                               size_t size);
    kiln_status (*compute)(kiln_backend *b, kiln_graph *g, int32_t i0, int32_t i1);
    void (*destroy)(kiln_backend *b);
    void (*memory)(const kiln_backend *b, kiln_backend_memory *out); /* optional: nothing prepared */
    const char *(*describe)(const kiln_backend *b); /* optional: a longer name (default: name) */
    bool (*holds_kv)(const kiln_backend *b, kiln_type type, size_t row_bytes, int64_t n_cells);
    bool (*owns)(const kiln_backend *b, const void *data);
    kiln_status (*profile)(kiln_backend *b, bool on);
    void (*profile_read)(const kiln_backend *b, kiln_device_profile *out);
} kiln_backend_iface;

struct kiln_backend {
    const kiln_backend_iface *iface;
    void *context;
    kiln_abort_fn abort_fn; /* asked between nodes during compute; true stops it with KILN_E_ABORTED */
    void *abort_user;
    kiln_progress_fn progress; /* told, during compute, the bytes of weights it prepared (the CPU's packing,
                                * a device's upload) of the bytes that compute needs prepared; NULL: none */
    void *progress_user;
};

/* The CPU backend with a persistent pool of n_threads threads (0 = number of online cores). */
kiln_status kiln__backend_cpu_create(int32_t n_threads, kiln_backend **out);

/* A second, real CPU backend (its own thread pool and packed weights, the same kernels) that accepts only
 * the n_ops listed ops (views always) and whose buffers are its own allocations declared not host, so
 * that a scheduler must copy bytes in and out of it through the buffer verbs as it would for a device.
 * It is a unified-memory backend for weights: it reads leaves flagged KILN_TENSOR_WEIGHT or
 * KILN_TENSOR_CONST in host memory where they lie; every other tensor it reads must be in its buffers.
 * Named "cpu-restricted". It exists to test the scheduling machinery without a device. */
kiln_status kiln__backend_cpu_restricted_create(int32_t n_threads, const kiln_op *ops, int32_t n_ops,
                                                kiln_backend **out);

/* A Vulkan backend on device `device` of kiln_device_get (-1: the first discrete or integrated GPU, never
 * a CPU device). KILN_E_UNSUPPORTED, with a message saying why, when Kiln was built without Vulkan, there
 * is no loader, or no such device: the engine then falls back to the CPU (src/backend/vulkan/). */
kiln_status kiln__backend_vulkan_create(int32_t device, kiln_backend **out);
/* Test hooks of the Vulkan backend (docs/vulkan.md): process-wide, read when a Vulkan backend (or the
 * device list) starts. Only tests set them; the library reads no environment. Zeros: no hook. Not
 * thread-safe: set them while no model loads. */
typedef struct kiln_vulkan_test_hooks {
    const char *loader;  /* the library to dlopen instead of libvulkan.so.1 (one that is missing: no loader) */
    kiln_op refuse;      /* an op supports_op refuses (KILN_OP_NONE: none) */
    int32_t fail_alloc;  /* the pool's N-th block allocation fails as out of device memory (1: the start-up
                          * probe, so the device is dropped) */
    bool no_pool;        /* every buffer its own vkAllocateMemory, freed at once (what the pool is measured
                          * against) */
    bool portable_reduce; /* the shared-memory reductions even on a device with subgroup arithmetic (the
                           * comparison of the two shader variants) */
} kiln_vulkan_test_hooks;
void kiln__vulkan_set_test_hooks(const kiln_vulkan_test_hooks *hooks); /* NULL: none */
const kiln_vulkan_test_hooks *kiln__vulkan_test_hooks(void);

/* How many compute calls of a Vulkan backend recorded a command buffer and how many replayed one (zeros
 * for any other backend). */
void kiln__backend_vulkan_replays(const kiln_backend *b, uint64_t *recorded, uint64_t *replayed);
/* How many submissions (vkQueueSubmit calls) a Vulkan backend made (0 for any other backend). */
uint64_t kiln__backend_vulkan_submits(const kiln_backend *b);
/* The staging ring of a Vulkan backend: how many of its slots hold an upload not yet waited for, and how
 * many times an upload had to wait for a slot to come free (zeros for any other backend). */
void kiln__backend_vulkan_ring(const kiln_backend *b, uint32_t *in_flight, uint64_t *waits);
/* How many dispatches a Vulkan backend recorded, and how many barriers between them (vk_hazard.h: only
 * before a dispatch that depends on one since the last barrier); 0 for any other backend. */
void kiln__backend_vulkan_barriers(const kiln_backend *b, uint64_t *dispatches, uint64_t *barriers);
/* How many quantized matmuls of a Vulkan backend read the q8 rows an earlier one left in the scratch instead
 * of quantizing their activation again (0 for any other backend). */
uint64_t kiln__backend_vulkan_q8_reused(const kiln_backend *b);
/* "vulkan:0 (llvmpipe ...)" for a Vulkan backend; its name for any other. */
const char *kiln__backend_describe(const kiln_backend *b);

/* A backend other than the CPU by name (the first len bytes of name), for the device list of
 * kiln_model_params; KILN_E_NOT_FOUND lists the known names. */
bool kiln__backend_name_is_vulkan(const char *name, size_t len); /* "vulkan", "vulkan:N" or "auto" */
kiln_status kiln__backend_create_named(const char *name, size_t len, int32_t n_threads, kiln_backend **out);

/* The CPU backend's weight preparation: mapping/size is a read-only file mapping whose pages it hands
 * back (MADV_DONTNEED) once it has prepared a weight lying in it. */
void kiln__backend_cpu_set_mapping(kiln_backend *b, const void *mapping, size_t size);

/* What a backend holds for the model: its prepared weights. */
struct kiln_backend_memory {
    int32_t n_prepared;
    uint64_t prepared_bytes;
    uint64_t released_bytes; /* mapped file bytes handed back after preparing */
    kiln_device_memory device; /* a device backend's memory pool (zeros for the CPU) */
    uint64_t capacity;         /* a device backend's memory: its largest device-local heap (0: unknown) */
};
void kiln__backend_memory(const kiln_backend *b, kiln_backend_memory *out);

/* The abort callback of the computations that follow (NULL: none). */
void kiln__backend_set_abort(kiln_backend *b, kiln_abort_fn fn, void *user);
/* The weight-preparation progress callback of the computations that follow (NULL: silent). */
void kiln__backend_set_progress(kiln_backend *b, kiln_progress_fn fn, void *user);

const char *kiln__backend_name(const kiln_backend *b);
bool kiln__backend_holds_kv(const kiln_backend *b, kiln_type type, size_t row_bytes, int64_t n_cells);
bool kiln__backend_owns(const kiln_backend *b, const void *data);
bool kiln__backend_supports_op(const kiln_backend *b, const kiln_tensor *node);
bool kiln__backend_is_host(const kiln_backend *b);
size_t kiln__backend_alignment(const kiln_backend *b);
/* On success out->backend is b. */
kiln_status kiln__backend_buffer_alloc(kiln_backend *b, size_t size, kiln_buffer *out);
void kiln__backend_buffer_free(kiln_backend *b, kiln_buffer *buf);
/* Checks that the backend supports every node, then computes the whole graph. */
kiln_status kiln__backend_compute(kiln_backend *b, kiln_graph *g);
/* Checks the range and that the backend supports every node in it, then computes nodes [i0, i1). */
kiln_status kiln__backend_compute_range(kiln_backend *b, kiln_graph *g, int32_t i0, int32_t i1);
void kiln__backend_destroy(kiln_backend *b);

/* Buffer verbs. Each checks that [offset, offset + size) lies inside the buffer (KILN_E_RANGE, naming the
 * range and the buffer's size, otherwise) and that the backend can do it (KILN_E_UNSUPPORTED for a
 * device backend without the slot). A size of 0 is a no-op inside the bounds. */
kiln_status kiln__buffer_set(kiln_buffer *buf, size_t offset, const void *src, size_t size);
kiln_status kiln__buffer_get(const kiln_buffer *buf, size_t offset, void *dst, size_t size);
kiln_status kiln__buffer_memset(kiln_buffer *buf, size_t offset, int value, size_t size);
/* src and dst must belong to the same backend; the ranges may overlap. */
kiln_status kiln__buffer_copy(const kiln_buffer *src, size_t src_offset, kiln_buffer *dst, size_t dst_offset,
                              size_t size);


#endif
