/*
 * graph.h - the graph IR every forward pass is expressed in.
 *
 * A graph is a set of tensors. A tensor with op KILN_OP_NONE is a leaf: a weight pointing into the model
 * mapping, an input filled by the caller, or a persistent buffer such as a KV cache. Every other tensor
 * is a node: the result of one op applied to up to four source tensors, with small integer and float
 * parameters. View ops (reshape, view, permute, transpose) compute nothing; their result aliases their
 * source's bytes at an offset. Everything else gets memory from the plan (see plan/plan.h).
 *
 * Nothing that changes from one run to the next is a parameter: token positions (rope), the cache cells a
 * batch writes (cache_write) and the attention mask are input tensors, so a planned graph is reused by
 * filling its inputs.
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
                           * i[1] = mode (KILN_ROPE_NORMAL / KILN_ROPE_NEOX), f[0] = base, f[1] = scale;
                           * optional src2 F32 [n_rot / 2]: per-pair frequency divisors (Llama 3) */
    KILN_OP_ATTENTION,    /* src0 q [D, Hq, T], src1 k [D, Hkv, C], src2 v [D, Hkv, C], all F32, Hq % Hkv
                           * == 0 -> [D, Hq, T]; src3 mask F32 [C, T] contiguous, additive: softmax over j
                           * of f[0] * q_t.k_j + mask[t][j]; -inf hides key j from query t, and a query
                           * that sees no key outputs zeros. K and V may instead be F16 or Q8_0 cache rows
                           * [Hkv * D, C], read in place */
    KILN_OP_SILU,         /* src0 F32 -> x * sigmoid(x) */
    KILN_OP_SOFTMAX,      /* src0 F32 -> softmax(f[0] * x) along dim 0; a row that is all -inf gives zeros */
    KILN_OP_RESHAPE,      /* view: same elements, new shape; strides derived from the source's when
                           * the source is not contiguous but the regrouping allows it */
    KILN_OP_VIEW,         /* view: new shape and strides at a byte offset into src */
    KILN_OP_PERMUTE,      /* view: dims reordered; i[0..3] = where each src dim goes */
    KILN_OP_TRANSPOSE,    /* view: dims 0 and 1 swapped */
    KILN_OP_CONT,         /* src0 any F32 layout -> contiguous copy */
    KILN_OP_CACHE_WRITE,  /* src0 F32 [W, T]: row r written into row (cell) idx[r] of src1, a cache leaf
                           * [W, C] of type F32, F16 or Q8_0 (rows converted); src2 idx I32 [T] contiguous,
                           * distinct cells, idx[r] < 0 skips row r (padding). The result is a view of
                           * the whole cache [W, C] */
    KILN_OP_SCALE,        /* src0 F32 -> f[0] * x + f[1] */
    KILN_OP_TANH,         /* src0 F32 -> tanh(x) */
    KILN_OP_RELU,         /* src0 F32 -> max(x, 0) */
    KILN_OP_CONCAT,       /* src0..srcN-1 (2 to 4) [K, Ni] of one type -> [K, sum Ni]: the rows of each
                           * source after the rows of the previous one (any type: rows copied as bytes) */
    KILN_OP_CAST,         /* src0 of any supported type (rows contiguous) -> F32 of the same shape */
    KILN_OP_SET,          /* a copy of src0 (F32, contiguous) with the region at byte offset `offset`,
                           * shaped like src1 with strides nb1..nb3 = i[0..2], replaced by src1 */
    /* Fused ops, produced by the passes in graph/passes/ (builders emit the plain forms). */
    KILN_OP_LINEAR,       /* f[0] * op(src0) . src1 (+ src2 bias [N]), then activation i[0]; i[1] =
                           * KILN_LINEAR_TRANS0 when src0 is [N, K] read transposed (F32 only) */
    KILN_OP_ADD_ACT,      /* activation i[0] of (src0 + src1), broadcast as ADD */
    KILN_OP_RMS_NORM_MUL, /* rms_norm(src0, f[0]) * src1 (src1 broadcast as MUL) */
    KILN_OP_SWIGLU,       /* silu(src0) * src1, same shapes */
    KILN_OP_GELU,         /* src0 F32 -> 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) */
    KILN_OP_ACC,          /* as SET, but src1 is added into the region: set(d, view(d) + x) in one pass,
                           * in place when src0 dies here */
    KILN_OP_NORM,         /* src0 F32 [n, ...] -> (x - mean(x)) / sqrt(var(x) + eps) per row; f[0] = eps */
    /* Elementwise ops imported graphs need (ONNX Sub, Div, Sigmoid, Erf, Sqrt, ...): scalar kernels. */
    KILN_OP_SUB,          /* src0 F32 - src1 F32, src1 broadcast as ADD */
    KILN_OP_DIV,          /* src0 F32 / src1 F32, src1 broadcast as ADD */
    KILN_OP_UNARY,        /* src0 F32 -> f(x) per element, f = i[0] (KILN_UNARY_*) */
    KILN_OP_WHERE,        /* src0 F32 condition (non-zero: true), src1 x, src2 y F32 -> x where true, y where
                           * not; the result has src0's shape, x and y broadcast to it as in ADD */
    KILN_OP_REDUCE_MAX,   /* src0 F32 [n, ...] -> [1, ...]: the largest element of each row (NaN if one is NaN) */
    KILN_OP_COUNT
} kiln_op;

/* Activations of the fused ops. */
enum { KILN_ACT_NONE = 0, KILN_ACT_RELU = 1, KILN_ACT_GELU = 2, KILN_ACT_SILU = 3 };
enum { KILN_LINEAR_TRANS0 = 1 };
/* The functions of KILN_OP_UNARY. */
enum {
    KILN_UNARY_SIGMOID = 0, /* 1 / (1 + exp(-x)) */
    KILN_UNARY_ERF,         /* erf(x) */
    KILN_UNARY_SQRT,        /* sqrt(x) */
    KILN_UNARY_EXP,         /* exp(x) */
    KILN_UNARY_LOG,         /* log(x) */
    KILN_UNARY_NEG,         /* -x */
    KILN_UNARY_RECIP,       /* 1 / x */
    KILN_UNARY_GELU_ERF,    /* 0.5 x (1 + erf(x / sqrt(2))): GELU's exact form */
    KILN_UNARY_NOT,         /* x == 0 ? 1 : 0 (a boolean held as 0 or 1; NaN counts as true) */
    KILN_UNARY_ROUND,       /* x rounded to the nearest integer, ties to even (ONNX's Round, QuantizeLinear) */
    KILN_UNARY_COUNT
};

enum { KILN_ROPE_NORMAL = 0, KILN_ROPE_NEOX = 2 };

enum kiln_tensor_flags {
    KILN_TENSOR_INPUT = 1u << 0,  /* filled by the caller before compute */
    KILN_TENSOR_OUTPUT = 1u << 1, /* read by the caller after compute; never overwritten */
    KILN_TENSOR_WEIGHT = 1u << 2, /* model weight (read-only mapping) */
    KILN_TENSOR_CACHE = 1u << 3,  /* persistent state written by the graph (KV cache) */
    KILN_TENSOR_CONST = 1u << 5,  /* a constant leaf made by constant folding (owned by the plan) */
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
    size_t offset;         /* for views: byte offset relative to src[0] (view_offset accumulates these) */
    size_t plan_offset;    /* for computed nodes: where the planner put the result in the arena */
    int32_t plan_inplace;  /* id of the source whose memory the planner reused in place, or -1 */
    uint32_t flags;
    int32_t id;            /* index in the graph's tensor pool */
    int32_t layer;         /* the model layer whose forward pass made it (kiln__graph_set_layer), or -1: the
                            * embeddings, the output head, inputs, and nodes the passes made (the scheduler
                            * gives those the highest layer of their sources) */
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

/* The layer that tensors created from now on belong to (-1: none, the state of a new or reset graph). The
 * model builders set it around each layer so that the scheduler can place layers (partial offload). */
void kiln__graph_set_layer(kiln_graph *g, int32_t layer);

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
/* Attention of q [D, Hq, T] over k, v (F32 [D, Hkv, C], or F16/Q8_0 cache rows [Hkv * D, C]) under the
 * additive mask F32 [C, T] (0 visible, -inf hidden, other values added to the scaled score). */
kiln_tensor *kiln__attention(kiln_graph *g, kiln_tensor *q, kiln_tensor *k, kiln_tensor *v, kiln_tensor *mask,
                             float scale);
kiln_tensor *kiln__silu(kiln_graph *g, kiln_tensor *x);
kiln_tensor *kiln__softmax(kiln_graph *g, kiln_tensor *x, float scale);
kiln_tensor *kiln__reshape(kiln_graph *g, kiln_tensor *x, int32_t n_dims, const int64_t *ne);
kiln_tensor *kiln__view(kiln_graph *g, kiln_tensor *x, int32_t n_dims, const int64_t *ne, const size_t *nb,
                        size_t offset);
kiln_tensor *kiln__permute(kiln_graph *g, kiln_tensor *x, int32_t a0, int32_t a1, int32_t a2, int32_t a3);
kiln_tensor *kiln__transpose(kiln_graph *g, kiln_tensor *x);
kiln_tensor *kiln__cont(kiln_graph *g, kiln_tensor *x);
/* Row r of x [W, T] into cache cell idx[r] (idx I32 [T]; negative: skipped); yields the whole cache. The cells
 * must be distinct (a batch's are): a device writes the rows in parallel, in no defined order. */
kiln_tensor *kiln__cache_write(kiln_graph *g, kiln_tensor *cache, kiln_tensor *x, kiln_tensor *idx);
kiln_tensor *kiln__scale(kiln_graph *g, kiln_tensor *x, float scale, float bias);
kiln_tensor *kiln__tanh(kiln_graph *g, kiln_tensor *x);
kiln_tensor *kiln__relu(kiln_graph *g, kiln_tensor *x);
/* Rope with per-pair frequency divisors `factors` (F32 [n_rot / 2]; NULL: as kiln__rope). */
kiln_tensor *kiln__rope_ext(kiln_graph *g, kiln_tensor *x, kiln_tensor *pos, kiln_tensor *factors, int32_t n_rot,
                            int32_t mode, float freq_base, float freq_scale);
/* The rotation frequency of rope's pair i (0, 2, 4, ... < n_rot): 1 / base^(i / n_rot) in float, as every
 * backend must compute it (the CPU kernel calls this; the Vulkan backend uploads its values), so that
 * angles agree to the bit. */
float kiln__rope_freq(float base, int32_t i, int32_t n_rot);
/* LayerNorm without its affine part (builders multiply by the weight and add the bias as plain ops). */
kiln_tensor *kiln__norm(kiln_graph *g, kiln_tensor *x, float eps);
kiln_tensor *kiln__concat(kiln_graph *g, kiln_tensor *a, kiln_tensor *b, kiln_tensor *c); /* c may be NULL */
kiln_tensor *kiln__cast(kiln_graph *g, kiln_tensor *x);
/* set/acc: the region of dst at byte offset `offset` with x's shape and strides nb[0..2] (= nb1..nb3). */
kiln_tensor *kiln__set(kiln_graph *g, kiln_tensor *dst, kiln_tensor *x, const size_t nb[3], size_t offset);
/* Fused ops (the passes create them; tests and future builders may too). */
kiln_tensor *kiln__linear(kiln_graph *g, kiln_tensor *w, kiln_tensor *x, kiln_tensor *bias, float alpha,
                          int32_t act, int32_t flags);
kiln_tensor *kiln__add_act(kiln_graph *g, kiln_tensor *a, kiln_tensor *b, int32_t act);
kiln_tensor *kiln__rms_norm_mul(kiln_graph *g, kiln_tensor *x, kiln_tensor *w, float eps);
kiln_tensor *kiln__swiglu(kiln_graph *g, kiln_tensor *gate, kiln_tensor *up);
kiln_tensor *kiln__gelu(kiln_graph *g, kiln_tensor *x);
kiln_tensor *kiln__acc(kiln_graph *g, kiln_tensor *dst, kiln_tensor *x, const size_t nb[3], size_t offset);
/* The elementwise ops of imported graphs: a - b, a / b (b broadcast as in add), f(x) (f: KILN_UNARY_*). */
kiln_tensor *kiln__sub(kiln_graph *g, kiln_tensor *a, kiln_tensor *b);
kiln_tensor *kiln__div(kiln_graph *g, kiln_tensor *a, kiln_tensor *b);
kiln_tensor *kiln__unary(kiln_graph *g, kiln_tensor *x, int32_t fn);
/* cond ? x : y per element of cond's shape (x and y broadcast to it). */
kiln_tensor *kiln__where(kiln_graph *g, kiln_tensor *cond, kiln_tensor *x, kiln_tensor *y);
/* The max of each row: [n, ...] -> [1, ...]. */
kiln_tensor *kiln__reduce_max(kiln_graph *g, kiln_tensor *x);

/* The plain (unfused) tanh-approximation GELU, as builders emit it: 8 nodes that the GELU fusion
 * recognizes. */
kiln_tensor *kiln__gelu_unfused(kiln_graph *g, kiln_tensor *x);

/* Re-derive a view's base, offset and (for reshape, permute, transpose) strides from its current
 * src[0], after a rewrite changed that source. Fails if the view is no longer possible. */
kiln_status kiln__view_refresh(kiln_tensor *t);

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

/* ---- Rewriting (used by the passes in graph/passes/) ----
 * Count, for every tensor, how many nodes of the current order read it (outputs count once more). */
void kiln__graph_count_uses(kiln_graph *g);
/* Uses counted by the last kiln__graph_count_uses. */
int32_t kiln__graph_uses(const kiln_graph *g, const kiln_tensor *t);
/* Make every reader of `old` (and the outputs list) read `repl` instead, then recompute the order and
 * re-derive every view. `repl` itself keeps its sources. */
kiln_status kiln__graph_replace(kiln_graph *g, kiln_tensor *old, kiln_tensor *repl);
/* A new node that copies `proto`'s op, sources and parameters, with its shape inferred and checked. */
kiln_tensor *kiln__graph_node_like(kiln_graph *g, const kiln_tensor *proto);

/* Properties used by kernels and the planner. */
int64_t kiln__tensor_nelements(const kiln_tensor *t);
int64_t kiln__tensor_nrows(const kiln_tensor *t); /* ne[1] * ne[2] * ne[3] */
bool kiln__tensor_is_contiguous(const kiln_tensor *t);
bool kiln__op_is_view(kiln_op op);
/* Types a KV cache may have: F32, F16, Q8_0. */
bool kiln__is_kv_cache_type(kiln_type type);
const char *kiln__op_name(kiln_op op);
/* Bytes of a dense tensor of t's shape and type. */
size_t kiln__tensor_nbytes(const kiln_tensor *t);
/* Bytes from t's data pointer to one past the last byte its elements occupy, through its strides (any
 * layout: views, gaps, transposes); 0 for an empty tensor, SIZE_MAX when the sum overflows. */
size_t kiln__tensor_span(const kiln_tensor *t);

/* Write a readable listing of the execution order: one line per node with op, shape, type, sources. */
void kiln__graph_dump(const kiln_graph *g, void (*write)(void *user, const char *line), void *user);
/* The same as Graphviz DOT: leaves as boxes, views dashed, fused ops filled. */
void kiln__graph_dump_dot(const kiln_graph *g, void (*write)(void *user, const char *line), void *user);

#endif
