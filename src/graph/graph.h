/*
 * graph.h - the graph IR every forward pass is expressed in.
 *
 * A graph is a set of tensors. A tensor with op KILN_OP_NONE is a leaf: a weight pointing into the model
 * mapping, an input filled by the caller, or a persistent buffer such as a KV cache. Every other tensor
 * is a node: the result of one op applied to up to four source tensors, with small integer and float
 * parameters. View ops (reshape, view, permute, transpose) compute nothing; their result aliases their
 * source's bytes at an offset. Everything else gets memory from the plan (see plan/plan.h).
 *
 * Shapes follow the ggml convention: ne[0] is the innermost (contiguous) dimension, nb[d] is the byte
 * stride of dimension d, and unused dimensions have ne = 1. A matrix of N rows of K elements is [K, N].
 *
 * Builder functions check shapes and types as a node is added. A graph carries a sticky status: the first
 * failing builder call records an error message and every later call returns NULL, so model code can
 * emit a whole forward pass and check kiln__graph_status() once at the end.
 *
 * A graph owns a fixed-capacity pool of tensors, allocated once at creation; kiln__graph_reset() empties
 * it without freeing, so rebuilding the graph for every token allocates nothing.
 */
#ifndef KILN_GRAPH_H
#define KILN_GRAPH_H

#include "kiln.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KILN_MAX_DIMS 4
#define KILN_MAX_SRC 4
#define KILN_MAX_NAME 64
#define KILN_MAX_IPARAMS 8
#define KILN_MAX_FPARAMS 4

typedef enum kiln_op {
    KILN_OP_NONE = 0,     /* leaf: weight, input or persistent buffer */
    KILN_OP_GET_ROWS,     /* src0 table [E, R] (any supported type), src1 ids I32 [T] -> F32 [E, T] */
    KILN_OP_RMS_NORM,     /* src0 F32 [n, ...] -> x / sqrt(mean(x^2) + eps) per row; f[0] = eps */
    KILN_OP_ADD,          /* src0 F32 + src1 F32, src1 broadcast (each src1 dim divides src0's) */
    KILN_OP_MUL,          /* src0 F32 * src1 F32, broadcast as ADD */
    KILN_OP_MATMUL,       /* src0 W [K, N, b2, b3] (any supported type), src1 X F32 [K, M, B2, B3]
                           * -> F32 [N, M, B2, B3]; W broadcast over batch dims (B2 % b2 == 0) */
    KILN_OP_ROPE,         /* src0 F32 [D, H, T], src1 positions I32 [T] -> rotated; i[0] = n_rot,
                           * i[1] = mode (KILN_ROPE_NORMAL / KILN_ROPE_NEOX), f[0] = base, f[1] = scale */
    KILN_OP_ATTENTION,    /* src0 q [D, Hq, T], src1 k [D, Hkv, L], src2 v [D, Hkv, L], all F32, Hq % Hkv
                           * == 0 -> [D, Hq, T]; causal: query t sees keys j <= i[0] + t; f[0] = scale */
    KILN_OP_SILU,         /* src0 F32 -> x * sigmoid(x) */
    KILN_OP_SOFTMAX,      /* src0 F32 -> softmax(f[0] * x) along dim 0 */
    KILN_OP_RESHAPE,      /* view: same bytes, new shape (src must be contiguous) */
    KILN_OP_VIEW,         /* view: new shape and strides at a byte offset into src */
    KILN_OP_PERMUTE,      /* view: dims reordered; i[0..3] = where each src dim goes */
    KILN_OP_TRANSPOSE,    /* view: dims 0 and 1 swapped */
    KILN_OP_CONT,         /* src0 any F32 layout -> contiguous copy */
    KILN_OP_CACHE_WRITE,  /* src0 F32 [W, T] written into rows [i[0], i[0] + T) of src1, a cache leaf
                           * [W, C]; the result is the view of rows [0, i[0] + T) of the cache */
    KILN_OP_COUNT
} kiln_op;

enum { KILN_ROPE_NORMAL = 0, KILN_ROPE_NEOX = 2 };

enum kiln_tensor_flags {
    KILN_TENSOR_INPUT = 1u << 0,  /* filled by the caller before compute */
    KILN_TENSOR_OUTPUT = 1u << 1, /* read by the caller after compute; never overwritten */
    KILN_TENSOR_WEIGHT = 1u << 2, /* model weight (read-only mapping) */
    KILN_TENSOR_CACHE = 1u << 3,  /* persistent state written by the graph (KV cache) */
};

typedef struct kiln_tensor kiln_tensor;
struct kiln_tensor {
    kiln_type type;
    int32_t n_dims;
    int64_t ne[KILN_MAX_DIMS]; /* elements per dimension */
    size_t nb[KILN_MAX_DIMS];  /* byte strides; nb[0] is the element (or block) size */
    kiln_op op;
    kiln_tensor *src[KILN_MAX_SRC];
    int32_t ip[KILN_MAX_IPARAMS];
    float fp[KILN_MAX_FPARAMS];
    kiln_tensor *view_src; /* for views: the tensor whose bytes this one aliases (never itself a view) */
    size_t view_offset;    /* byte offset into view_src's data */
    uint32_t flags;
    int32_t id;            /* index in the graph's tensor pool */
    void *data;            /* leaves: set by the builder; nodes: set by the plan */
    char name[KILN_MAX_NAME];
};

typedef struct kiln_graph kiln_graph;

/* Create a graph able to hold up to `capacity` tensors. */
kiln_status kiln__graph_create(int32_t capacity, kiln_graph **out);
void kiln__graph_destroy(kiln_graph *g);
/* Forget every tensor and the sticky status; keeps the memory. */
void kiln__graph_reset(kiln_graph *g);

/* KILN_OK, or the first error a builder call recorded (its message is in kiln_last_error()). */
kiln_status kiln__graph_status(const kiln_graph *g);

/* A leaf with the given shape (n_dims values in ne), contiguous strides, and borrowed data (may be NULL
 * and set later, for inputs). */
kiln_tensor *kiln__graph_leaf(kiln_graph *g, const char *name, kiln_type type, int32_t n_dims,
                              const int64_t *ne, void *data, uint32_t flags);

/* Name a tensor (printf-style); returns t for chaining. */
kiln_tensor *kiln__tensor_set_name(kiln_tensor *t, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Op constructors: each checks its inputs and returns the new node, or NULL (graph status set). */
kiln_tensor *kiln__get_rows(kiln_graph *g, kiln_tensor *table, kiln_tensor *ids);
kiln_tensor *kiln__rms_norm(kiln_graph *g, kiln_tensor *x, float eps);
kiln_tensor *kiln__add(kiln_graph *g, kiln_tensor *a, kiln_tensor *b);
kiln_tensor *kiln__mul(kiln_graph *g, kiln_tensor *a, kiln_tensor *b);
kiln_tensor *kiln__matmul(kiln_graph *g, kiln_tensor *w, kiln_tensor *x);
kiln_tensor *kiln__rope(kiln_graph *g, kiln_tensor *x, kiln_tensor *pos, int32_t n_rot, int32_t mode,
                        float freq_base, float freq_scale);
kiln_tensor *kiln__attention(kiln_graph *g, kiln_tensor *q, kiln_tensor *k, kiln_tensor *v, int32_t pos0,
                             float scale);
kiln_tensor *kiln__silu(kiln_graph *g, kiln_tensor *x);
kiln_tensor *kiln__softmax(kiln_graph *g, kiln_tensor *x, float scale);
kiln_tensor *kiln__reshape(kiln_graph *g, kiln_tensor *x, int32_t n_dims, const int64_t *ne);
kiln_tensor *kiln__view(kiln_graph *g, kiln_tensor *x, int32_t n_dims, const int64_t *ne, const size_t *nb,
                        size_t offset);
kiln_tensor *kiln__permute(kiln_graph *g, kiln_tensor *x, int32_t a0, int32_t a1, int32_t a2, int32_t a3);
kiln_tensor *kiln__transpose(kiln_graph *g, kiln_tensor *x);
kiln_tensor *kiln__cont(kiln_graph *g, kiln_tensor *x);
kiln_tensor *kiln__cache_write(kiln_graph *g, kiln_tensor *cache, kiln_tensor *x, int32_t pos0);

/* Convenience reshapes. */
kiln_tensor *kiln__reshape_2d(kiln_graph *g, kiln_tensor *x, int64_t ne0, int64_t ne1);
kiln_tensor *kiln__reshape_3d(kiln_graph *g, kiln_tensor *x, int64_t ne0, int64_t ne1, int64_t ne2);

/* Mark an output. The execution order (kiln__graph_order) contains every node an output depends on. */
void kiln__graph_set_output(kiln_graph *g, kiln_tensor *t);

/* Compute the topological execution order of the nodes reachable from the outputs (leaves excluded,
 * views included). Fails if the graph status is an error or a cycle is found. */
kiln_status kiln__graph_order(kiln_graph *g);

/* Re-check every node in the order: sources precede it, shapes and types satisfy the op's rules, views
 * stay inside their base. Used by tests and after rewrites. */
kiln_status kiln__graph_validate(const kiln_graph *g);

int32_t kiln__graph_n_nodes(const kiln_graph *g);
kiln_tensor *kiln__graph_node(const kiln_graph *g, int32_t i);
int32_t kiln__graph_n_tensors(const kiln_graph *g);
kiln_tensor *kiln__graph_tensor(const kiln_graph *g, int32_t i);
int32_t kiln__graph_n_outputs(const kiln_graph *g);
kiln_tensor *kiln__graph_output(const kiln_graph *g, int32_t i);

/* Properties used by kernels and the planner. */
int64_t kiln__tensor_nelements(const kiln_tensor *t);
int64_t kiln__tensor_nrows(const kiln_tensor *t); /* ne[1] * ne[2] * ne[3] */
bool kiln__tensor_is_contiguous(const kiln_tensor *t);
bool kiln__op_is_view(kiln_op op);
const char *kiln__op_name(kiln_op op);
/* Bytes of a dense tensor of t's shape and type. */
size_t kiln__tensor_nbytes(const kiln_tensor *t);

/* Write a readable listing of the execution order: one line per node with op, shape, type, sources. */
void kiln__graph_dump(const kiln_graph *g, void (*write)(void *user, const char *line), void *user);

#endif
