/*
 * onnx_lower.h - an ONNX graph as Kiln graph IR: the lowering that a session's program calls as its
 * builder, once per shape key.
 *
 * The key is the value of every dynamic dimension of the inputs a caller feeds, in the order the dims are
 * first met (input by input, axis by axis): a symbolic dim (dim_param "batch") is one key entry wherever it
 * appears; a dim the file leaves unnamed is an entry of its own. A model with no dynamic dim has the key
 * {1}. The lowering declares each fed input as a leaf flagged KILN_TENSOR_INPUT with its ONNX name (data
 * bound per run), initializers and folded constants as weight leaves pointing at the reader's data (used in
 * place), emits the nodes in the reader's topological order, and marks the graph's outputs in ONNX order.
 *
 * Layout: Kiln's shapes are ggml's (ne[0] innermost), so an ONNX tensor [B, S, H] is ne = {H, S, B}; ONNX
 * axis a of a rank-r tensor is Kiln dim r - 1 - a. Every value the lowering produces is contiguous (views
 * that are not, transposes, are followed by a copy), so each op may assume dense rows. What lowers to
 * what is the table in docs/onnx.md; anything else is KILN_E_UNSUPPORTED naming the node and operator.
 */
#ifndef KILN_ONNX_LOWER_H
#define KILN_ONNX_LOWER_H

#include "import/onnx/onnx_internal.h"

#include "graph/graph.h"

#define KILN_ONNX_MAX_SYMS 8                   /* dynamic dims of the fed inputs (the program's key length) */
#define KILN_ONNX_MAX_CONSTS 64                /* constants of the lowering's own (distinct lengths) */
#define KILN_ONNX_HOST_MAX (1 << 23)           /* elements of one host value */
#define KILN_ONNX_HOST_BYTES ((size_t)1 << 28) /* scratch of the host values of one key */
#define KILN_ONNX_HOST_SMALL 4096              /* float constants computed on the host when no larger */
#define KILN_ONNX_LEAF_BYTES ((size_t)1 << 28) /* constant leaves from host values, per session */

/* A value computed on the host (onnx_host.c): int64, int32 and bool elements held as int64 in i (bools 0
 * or 1; type KILN_ONNX_INT64 or KILN_ONNX_BOOL), floats as double holding float32 values in f. */
typedef struct kiln__onnx_host {
    int32_t type; /* 0: none */
    int32_t rank;
    int64_t dims[KILN_MAX_ONNX_RANK];
    int64_t n;
    int64_t *i;
    double *f;
} kiln__onnx_host;

/* What the lowering knows of a model beyond the model itself: the key's layout and scratch. Built once per
 * session by kiln__onnx_lower_init; the builder reads it. */
typedef struct kiln__onnx_lowering {
    const kiln_onnx *m;
    int32_t n_syms;                            /* entries of the key (0: the key is {1}) */
    const char *sym_names[KILN_ONNX_MAX_SYMS]; /* dim_param, or "input:axis" for an unnamed dim */
    int8_t (*axis_sym)[KILN_MAX_ONNX_RANK]; /* [n_feed][axis]: the key entry of each fed input's dim, or -1 */
    kiln_tensor **vals;                     /* [n_values] scratch: each value's tensor while building */
    char (*sym_store)[KILN_MAX_NAME];       /* storage of the unnamed dims' names */
    /* Constants the lowering makes (the vectors of 1/K or 1 that reductions multiply by), kept for every
     * plan of the session: found by length and value, made at most once each. */
    struct kiln__onnx_const {
        int64_t n;
        float value;
        float *data;
    } consts[KILN_ONNX_MAX_CONSTS];
    int32_t n_consts;
    /* Values computed on the host for the key being lowered (onnx_host.c), in scratch blocks freed when the
     * next key is lowered. */
    struct kiln__onnx_host *host; /* [n_values]; type 0: not a host value */
    struct kiln__onnx_block *blocks;
    size_t host_bytes;
    /* The bytes of constant leaves made from host values, kept for the session (every plan may point at
     * them), one copy per distinct content. */
    struct kiln__onnx_leaf {
        uint64_t hash;
        size_t size;
        void *data;
    } * leaves;
    int32_t n_leaves, cap_leaves;
    size_t leaf_bytes;
    /* The ONNX shape of each computed value of rank over 4 (rank 0 for the others): Kiln holds it in 4 dims,
     * the outermost ONNX dims merged into dim 3 (row-major order is unchanged). Reset per key. */
    struct kiln__onnx_big {
        int32_t rank;
        int64_t dims[KILN_MAX_ONNX_RANK];
    } * big;
    /* Per fed input: its Kiln type (F32, or I32 for integer ids that only index constant tables) and, for
     * I32, the rows of the tables it indexes (ids are checked against it when bound). */
    kiln_type *feed_type;
    int64_t *feed_rows;
    /* kiln_onnx_session_params.weights "q8_0": MatMul/Gemm weights quantized once per session, per value
     * (q8: the weight transposed to Kiln's [K, N], as MatMul and Gemm transB = 0 read it; q8_rows: as it
     * lies, Gemm transB = 1). */
    bool q8_weights;
    void **q8, **q8_rows;
} kiln__onnx_lowering;

/* Check that the fed inputs can be run (float, rank <= 4, every dim known or dynamic) and lay out the
 * key. Frees nothing on failure beyond what it allocated; pair with kiln__onnx_lower_free. */
kiln_status kiln__onnx_lower_init(kiln__onnx_lowering *l, const kiln_onnx *m);
void kiln__onnx_lower_free(kiln__onnx_lowering *l);

/* The element types a session takes and returns (float, int64, int32, uint8, int8, bool). */
bool kiln__onnx_fed_type(int32_t type);

/* Tensors the graph for a key needs room for (every node lowers to a few, the passes add some). */
int32_t kiln__onnx_lower_capacity(const kiln__onnx_lowering *l);

/* Emit the graph for key (n_syms values, each >= 1) into g. */
kiln_status kiln__onnx_lower(kiln__onnx_lowering *l, kiln_graph *g, const int64_t *key);

/* Host values (onnx_host.c): is node n computed on the host (every input a constant or a host value, and
 * an operator the host computes), compute it, a value's host form (computed, or a constant converted on
 * first use; NULL otherwise), and its integer elements (NULL unless it is an integer host value). */
bool kiln__onnx_host_node(kiln__onnx_lowering *l, const kiln__onnx_node *n);
kiln_status kiln__onnx_host_eval(kiln__onnx_lowering *l, const kiln__onnx_node *n);
const kiln__onnx_host *kiln__onnx_host_of(kiln__onnx_lowering *l, const char *name);
const int64_t *kiln__onnx_ints_of(kiln__onnx_lowering *l, const char *name, int64_t *n);
/* Forget every host value and free their scratch (before lowering a key, and at the end); room for n
 * elements of size bytes in that scratch, NULL past KILN_ONNX_HOST_BYTES per key or out of memory. */
void kiln__onnx_host_reset(kiln__onnx_lowering *l);
void *kiln__onnx_scratch(kiln__onnx_lowering *l, int64_t n, size_t size);
/* Index maps (onnx_index.c), shared by the host and the runtime lowering: the result dims of Identity, Cast,
 * Reshape, Flatten, Squeeze and Unsqueeze (v: the shape or axes input, NULL when absent), or -1 with *why;
 * Slice's start, step and count per axis (-1 when its inputs are not known); the flat source index of every
 * output element of Slice, Transpose, Gather, GatherElements and GatherND (indices known on the host) over
 * data of the given shape, or -1 with *why. */
int32_t kiln__onnx_reshape_dims(const kiln__onnx_node *n, int32_t r, const int64_t *in, const int64_t *v,
                                int64_t nv, int64_t *out, const char **why);
int32_t kiln__onnx_slice_params(kiln__onnx_lowering *l, const kiln__onnx_node *n, int32_t r,
                                const int64_t *dims, int64_t *start, int64_t *step, int64_t *count);
int64_t kiln__onnx_index_map(kiln__onnx_lowering *l, const kiln__onnx_node *n, int32_t x_rank,
                             const int64_t *x_dims, int32_t *out_rank, int64_t *out_dims, int64_t **idx,
                             const char **why);

/* Attention as torch.onnx exports it, ending at the Transpose t (onnx_attention.c): the fused attention
 * op's result for t's output, or NULL when the chain does not match (then t is lowered as written). */
kiln_tensor *kiln__onnx_fuse_attention(kiln__onnx_lowering *l, kiln_graph *g, const kiln__onnx_node *t);
/* A constant of n floats, each value, kept by the session (one per (n, value)); NULL when it cannot be
 * made (the error is set). */
kiln_tensor *kiln__onnx_filled(kiln__onnx_lowering *l, kiln_graph *g, int64_t n, float value);

/* The ONNX shape (rank and dims) of a Kiln tensor that holds a rank-r value. */
void kiln__onnx_shape_of(const kiln_tensor *t, int32_t rank, int64_t *dims);

#endif /* KILN_ONNX_LOWER_H */
