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
 */
#ifndef KILN_BACKEND_H
#define KILN_BACKEND_H

#include "graph/graph.h"

typedef struct kiln_backend kiln_backend;

typedef struct kiln_buffer {
    void *base;
    size_t size;
} kiln_buffer;

typedef struct kiln_backend_iface {
    const char *(*name)(const kiln_backend *b);
    bool (*supports_op)(const kiln_backend *b, const kiln_tensor *node);
    kiln_status (*buffer_alloc)(kiln_backend *b, size_t size, kiln_buffer *out);
    void (*buffer_free)(kiln_backend *b, kiln_buffer *buf);
    kiln_status (*compute)(kiln_backend *b, kiln_graph *g);
    void (*destroy)(kiln_backend *b);
} kiln_backend_iface;

struct kiln_backend {
    const kiln_backend_iface *iface;
    void *context;
};

/* The CPU backend with a persistent pool of n_threads threads (0 = number of online cores). */
kiln_status kiln__backend_cpu_create(int32_t n_threads, kiln_backend **out);

const char *kiln__backend_name(const kiln_backend *b);
bool kiln__backend_supports_op(const kiln_backend *b, const kiln_tensor *node);
kiln_status kiln__backend_buffer_alloc(kiln_backend *b, size_t size, kiln_buffer *out);
void kiln__backend_buffer_free(kiln_backend *b, kiln_buffer *buf);
/* Checks that the backend supports every node, then computes the graph. */
kiln_status kiln__backend_compute(kiln_backend *b, kiln_graph *g);
void kiln__backend_destroy(kiln_backend *b);

#endif
