/*
 * graph_internal.h - the graph's private representation, shared by graph.c, ops.c and dump.c only.
 */
#ifndef KILN_GRAPH_INTERNAL_H
#define KILN_GRAPH_INTERNAL_H

#include "graph/graph.h"

struct kiln_graph {
    kiln_tensor *tensors; /* pool [capacity] */
    int32_t n_tensors;
    int32_t capacity;
    kiln_tensor **order; /* execution order [n_order] */
    int32_t n_order;
    kiln_tensor **outputs;
    int32_t n_outputs;
    uint8_t *mark;        /* scratch for ordering [capacity] */
    kiln_tensor **stack;  /* scratch for ordering [capacity] */
    int32_t *uses;        /* consumers of each tensor in the order, by id [capacity] (kiln__graph_count_uses) */
    kiln_status status;   /* sticky: first builder error */
    int32_t layer;        /* given to new tensors (kiln__graph_set_layer) */
};

/* Record the first builder error (message formatted like printf) and return NULL. */
kiln_tensor *kiln__graph_fail(kiln_graph *g, kiln_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* A fresh tensor with contiguous strides, or NULL (status set). */
kiln_tensor *kiln__graph_new_tensor(kiln_graph *g, kiln_type type, int32_t n_dims, const int64_t *ne);

/* Check an existing node against its op's rules: source types and shapes, parameters, and that its own
 * shape is the one the op produces. Returns a status with a message naming the mismatch. */
kiln_status kiln__op_check(const kiln_tensor *t);

#endif
