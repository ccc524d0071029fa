/*
 * backend.h - the interface every compute backend implements, and the wrappers the engine calls.
 *
 * A backend is { iface, context }: iface is a table of function pointers, context the backend's private
 * state. The CPU backend is always available and supports every op; a device backend answers
 * supports_op() for what it can run, and everything else falls back to the CPU.
 *
 * Contract of each slot:
 *   name          a constant string ("cpu")
 *   supports_op   whether compute() can run this node (its op, types and layout)
 *   buffer_alloc  memory the backend can compute on (host memory for the CPU); size may be 0
 *   buffer_free   releases a buffer from buffer_alloc; a zeroed buffer is a no-op
 *   compute       runs every node of an ordered, planned graph (kiln__graph_order, kiln__plan_commit)
 *   destroy       releases the backend
 *   memory        optional: what it prepared (repacked weights); the wrapper reports zeros without it
 */
#ifndef KILN_BACKEND_H
#define KILN_BACKEND_H

#include "graph/graph.h"

typedef struct kiln_backend kiln_backend;

typedef struct kiln_buffer {
    void *base;
    size_t size;
} kiln_buffer;

typedef struct kiln_backend_memory kiln_backend_memory;

typedef struct kiln_backend_iface {
    const char *(*name)(const kiln_backend *b);
    bool (*supports_op)(const kiln_backend *b, const kiln_tensor *node);
    kiln_status (*buffer_alloc)(kiln_backend *b, size_t size, kiln_buffer *out);
    void (*buffer_free)(kiln_backend *b, kiln_buffer *buf);
    kiln_status (*compute)(kiln_backend *b, kiln_graph *g);
    void (*destroy)(kiln_backend *b);
    void (*memory)(const kiln_backend *b, kiln_backend_memory *out); /* optional: nothing prepared */
} kiln_backend_iface;

struct kiln_backend {
    const kiln_backend_iface *iface;
    void *context;
    kiln_abort_fn abort_fn; /* asked between nodes during compute; true stops it with KILN_E_ABORTED */
    void *abort_user;
};

/* The CPU backend with a persistent pool of n_threads threads (0 = number of online cores). */
kiln_status kiln__backend_cpu_create(int32_t n_threads, kiln_backend **out);

/* A backend other than the CPU by name (the first len bytes of name), for the device list of
 * kiln_model_params; KILN_E_NOT_FOUND lists the known names. */
kiln_status kiln__backend_create_named(const char *name, size_t len, int32_t n_threads, kiln_backend **out);

/* The CPU backend's weight preparation: mapping/size is a read-only file mapping whose pages it hands
 * back (MADV_DONTNEED) once it has prepared a weight lying in it; progress reports the bytes prepared of
 * the bytes a graph needs prepared (NULL: silent). */
void kiln__backend_cpu_set_mapping(kiln_backend *b, const void *mapping, size_t size);
void kiln__backend_cpu_set_progress(kiln_backend *b, kiln_progress_fn progress, void *user);

/* What a backend holds for the model: its prepared weights. */
struct kiln_backend_memory {
    int32_t n_prepared;
    uint64_t prepared_bytes;
    uint64_t released_bytes; /* mapped file bytes handed back after preparing */
};
void kiln__backend_memory(const kiln_backend *b, kiln_backend_memory *out);

/* The abort callback of the computations that follow (NULL: none). */
void kiln__backend_set_abort(kiln_backend *b, kiln_abort_fn fn, void *user);

const char *kiln__backend_name(const kiln_backend *b);
bool kiln__backend_supports_op(const kiln_backend *b, const kiln_tensor *node);
kiln_status kiln__backend_buffer_alloc(kiln_backend *b, size_t size, kiln_buffer *out);
void kiln__backend_buffer_free(kiln_backend *b, kiln_buffer *buf);
/* Checks that the backend supports every node, then computes the graph. */
kiln_status kiln__backend_compute(kiln_backend *b, kiln_graph *g);
void kiln__backend_destroy(kiln_backend *b);

#endif
