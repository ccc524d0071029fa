/*
 * plan.h - gives every intermediate tensor of an ordered graph its place in one arena.
 *
 * Planning is two steps, as in ggml's allocator: kiln__plan_measure() computes the arena size a graph
 * needs; the caller provides a buffer at least that large; kiln__plan_commit() assigns each node's data
 * pointer inside it and resolves every view to its base's bytes plus the view offset (zero-copy).
 *
 * This first planner gives each computed node its own aligned slot (no reuse); lifetime-based reuse is
 * the graph-compiler issue's planner, which slots in behind the same two calls.
 */
#ifndef KILN_PLAN_H
#define KILN_PLAN_H

#include "graph/graph.h"

#define KILN_PLAN_ALIGN 64

/* Bytes of arena the ordered graph needs. */
kiln_status kiln__plan_measure(const kiln_graph *g, size_t *size);

/* Assign data pointers: nodes inside [base, base + size), views onto their bases. Fails if a leaf that a
 * node reads has no data, or the arena is too small. */
kiln_status kiln__plan_commit(kiln_graph *g, void *base, size_t size);

#endif
