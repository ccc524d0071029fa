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

/* One arena's share of a graph, when its nodes are spread over several arenas (one per backend, see
 * runtime/sched.h). Lifetimes are still analysed over the whole execution order, so a member's last use
 * may be a step that belongs to another arena; only members are placed, and a source is written over in
 * place only when it is a member too. keep_until lets a tensor outlive its last reader: its bytes are
 * kept through that step (a copy into another backend's arena reads them there). */
typedef struct kiln_plan_subset {
    const uint8_t *member;     /* [n_nodes]: nonzero for the nodes (computed or views) this arena holds */
    const int32_t *keep_until; /* [n_tensors] or NULL: a step through which the bytes must live, or -1 */
} kiln_plan_subset;

/* As kiln__plan_measure, kiln__plan_commit and kiln__plan_verify, for the members of sub only (sub NULL:
 * the whole graph). Commit sets the data of member nodes only: a member view's base must already have
 * its data (it is a leaf, or a member of the same arena). */
kiln_status kiln__plan_measure_subset(kiln_graph *g, const kiln_plan_subset *sub, size_t *size,
                                      kiln_plan_stats *stats);
kiln_status kiln__plan_commit_subset(kiln_graph *g, const kiln_plan_subset *sub, void *base, size_t size);
kiln_status kiln__plan_verify_subset(const kiln_graph *g, const kiln_plan_subset *sub);

#endif
