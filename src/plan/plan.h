/*
 * plan.h - gives every intermediate tensor of an ordered graph its place in one arena.
 *
 * Planning is two steps, as in ggml's allocator. kiln__plan_measure() analyses lifetimes over the
 * execution order and assigns offsets: each computed node gets the best-fitting free block (the smallest
 * that is large enough), a block is freed after the node that reads it last, an elementwise op writes in
 * place over its first source when that source dies there, and views take no memory (they alias their
 * base, whose lifetime extends to the view's last reader). Leaves (weights, inputs, caches) are not in
 * the arena, and outputs are never freed, so nothing overwrites them. kiln__plan_commit() then turns the
 * offsets into data pointers inside a buffer of the measured size.
 *
 * Per-op kernel scratch is the backend's (it knows its thread count); it is sized once per graph too.
 */
#ifndef KILN_PLAN_H
#define KILN_PLAN_H

#include "graph/graph.h"

#define KILN_PLAN_ALIGN 64

typedef struct kiln_plan_stats {
    size_t naive_bytes;  /* the sum of every computed node's (aligned) size: one buffer each */
    size_t arena_bytes;  /* the planned arena */
    int32_t n_buffers;   /* computed nodes */
    int32_t n_reused;    /* nodes placed in a block freed by an earlier node */
    int32_t n_inplace;   /* nodes written over their dying first source */
} kiln_plan_stats;

/* Assign offsets (tensor->plan_offset) and return the arena size. stats may be NULL. The planner's
 * scratch is sized by the graph's capacity and allocated per call. */
kiln_status kiln__plan_measure(kiln_graph *g, size_t *size, kiln_plan_stats *stats);

/* Assign data pointers: nodes at base + plan_offset, views onto their bases. Fails if a leaf that a node
 * reads has no data. */
kiln_status kiln__plan_commit(kiln_graph *g, void *base, size_t size);

/* Check the plan of an ordered, measured graph: no two nodes that are live at the same step overlap in
 * the arena, except a node written in place over its dying source. */
kiln_status kiln__plan_verify(const kiln_graph *g);

#endif
