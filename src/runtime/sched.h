/*
 * sched.h - the scheduler: runs one graph over several backends, each node on the first backend (in a
 * priority list whose last entry is the CPU) that can run it, with copies wherever a backend would read
 * memory it cannot reach.
 *
 * kiln__sched_plan_create() takes an ordered, pass-optimized graph and
 *   1. assigns every computing node to the first backend whose supports_op accepts it, whose min_batch
 *      <= n_tokens and, for the backends before the last, when the node's layer is at least the
 *      scheduler's first_layer (kiln__sched_set_first_layer; partial offload) (the last backend takes
 *      whatever is left, whatever its min_batch). A node's layer is its tag (kiln_tensor.layer, set by the
 *      model builder), or for an untagged node (one the passes made) the highest layer among its sources,
 *      taken in execution order: so a fused node belongs to the layer of what it fused. Nodes that read or
 *      write a KV cache (a leaf flagged KILN_TENSOR_CACHE, or a view of one such as a cache_write result)
 *      run where the cache lives: on the device backend whose buffer holds it (kiln__backend_owns; the
 *      context put it there because that backend said it holds_kv, whatever its min_batch), and which must
 *      then support them (KILN_E_UNSUPPORTED otherwise), else on the last backend, which holds caches in
 *      host memory. Views compute nothing: their bytes are their base's, wherever that lives;
 *   2. cuts the execution order into splits: maximal runs of computing nodes on one backend, with the
 *      views among them riding along (a view never starts a split; views before the first computing node
 *      join the first split);
 *   3. rewrites the graph so that every node reads only memory its backend can read. Leaves are host
 *      memory. A host backend reads every leaf and every other host backend's results in place; a backend
 *      that is not host reads leaves flagged KILN_TENSOR_WEIGHT or KILN_TENSOR_CONST in place (the
 *      unified-memory contract for weights of backend.h) and nothing else outside its own buffers. For
 *      every other source, the whole bytes of its root (the leaf or computed node a view aliases) are
 *      copied once into the reader's arena, before the first split that needs them, into a new leaf of
 *      the graph named "<root>@<backend>"; a reader of a view reads instead a twin of the view (a leaf
 *      with the view's shape, strides and offset) onto that copy. So the graph needs room for these
 *      tensors: a full graph fails with KILN_E_RANGE;
 *   4. plans each backend's arena with the best-fit planner restricted to the nodes whose bytes that
 *      backend holds (kiln__plan_measure_subset), keeping each copied node alive until its copy is taken,
 *      and appends the copies' destinations after the planned region.
 * Plan a graph once: the rewrite is not undone by kiln__sched_plan_destroy (the copies stay in the graph,
 * and a later kiln__graph_order still orders it correctly), so a graph is scheduled by one plan. On
 * failure the graph may have been partly rewritten (and its status set): discard it.
 *
 * The caller then allocates each backend's arena (kiln__sched_plan_arena_bytes) with
 * kiln__backend_buffer_alloc on that backend, commits, fills the inputs and computes as often as it likes.
 * kiln__sched_compute runs the splits in order, doing each split's copies first through the buffer verbs
 * (a direct set or get when one side is host, else get into a staging buffer allocated at plan time and
 * set), then copies back into host memory every output whose bytes live on a backend that is not host.
 * It allocates nothing. With one backend (the CPU), a plan is one split without copies, and compute is
 * exactly kiln__backend_compute.
 *
 * Ownership: the scheduler borrows its backends (they must outlive it and its plans); a plan borrows its
 * scheduler and its graph, and borrows the arenas given to commit until the next commit or its destroy.
 * Not thread-safe: one thread uses a plan at a time.
 */
#ifndef KILN_SCHED_H
#define KILN_SCHED_H

#include "backend/backend.h"
#include "graph/graph.h"

typedef struct kiln_sched kiln_sched;           /* the priority list of backends, CPU last */
typedef struct kiln_sched_plan kiln_sched_plan; /* one graph's assignment, splits and copies */
typedef struct kiln_sched_backend {
    kiln_backend *backend;
    int32_t min_batch; /* takes a node only when the plan's n_tokens >= min_batch (ignored for the last) */
} kiln_sched_backend;

/* The list is copied. The last backend must be a host backend able to run every op (the CPU); backends
 * are distinct, min_batch >= 0, and each backend's alignment divides the planner's (KILN_PLAN_ALIGN). */
kiln_status kiln__sched_create(const kiln_sched_backend *list, int32_t n, kiln_sched **out);
void kiln__sched_destroy(kiln_sched *s); /* does not destroy the backends */
/* Partial offload: the backends before the last take only nodes of layers >= first_layer (0, the default:
 * every node, those of no layer included; INT32_MAX: none). Plans made afterwards follow it. */
kiln_status kiln__sched_set_first_layer(kiln_sched *s, int32_t first_layer);
int32_t kiln__sched_n_backends(const kiln_sched *s);
kiln_backend *kiln__sched_backend(const kiln_sched *s, int32_t i);

/* Assign, split, rewrite and measure g (see above); n_tokens is the batch size min_batch is held to. */
kiln_status kiln__sched_plan_create(kiln_sched *s, kiln_graph *g, int32_t n_tokens, kiln_sched_plan **out);
void kiln__sched_plan_destroy(kiln_sched_plan *p);

/* Bytes to allocate on backend i (0: none needed; a zeroed buffer may then be passed to commit). */
size_t kiln__sched_plan_arena_bytes(const kiln_sched_plan *p, int32_t backend_index);
/* Give every node and copy its place: arenas[i] (one per backend, in list order) must belong to backend i
 * and hold at least its arena bytes. Leaves that are copied must have their data by now. */
kiln_status kiln__sched_plan_commit(kiln_sched_plan *p, kiln_buffer *arenas);
/* Run the committed plan: splits in order, copies through the buffer verbs. Allocates nothing. */
kiln_status kiln__sched_compute(kiln_sched_plan *p);
/* Output i of the graph in host memory: the graph's tensor itself when its bytes are host memory, else a
 * tensor owned by the plan that compute fills. Valid until the plan is destroyed. */
kiln_tensor *kiln__sched_plan_output(const kiln_sched_plan *p, int32_t i);

/* The "--verbose" listing: a summary line (splits, copies, each arena in list order), then per split its
 * backend, node range and count, the distinct ops it computes, and the copies made before it (source,
 * destination, bytes), then the outputs copied back. */
void kiln__sched_plan_describe(const kiln_sched_plan *p, void (*write)(void *user, const char *line),
                               void *user);
int32_t kiln__sched_plan_n_splits(const kiln_sched_plan *p);
int32_t kiln__sched_plan_split_backend(const kiln_sched_plan *p, int32_t split); /* index in the list */
int32_t kiln__sched_plan_n_copies(const kiln_sched_plan *p);  /* copies into arenas, outputs excluded */
size_t kiln__sched_plan_copy_bytes(const kiln_sched_plan *p); /* their bytes, per compute */
/* Check every backend's arena with kiln__plan_verify_subset (tests; quadratic in the nodes). */
kiln_status kiln__sched_plan_verify(const kiln_sched_plan *p);

#endif
