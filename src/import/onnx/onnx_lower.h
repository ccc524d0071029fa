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

#define KILN_ONNX_MAX_SYMS 8         /* dynamic dims of the fed inputs (the program's key length) */
#define KILN_ONNX_MAX_CONSTS 64      /* constants of the lowering's own (distinct lengths) */
#define KILN_ONNX_INT_POOL (1 << 16) /* elements of host-computed shape values per key */

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
    /* Integer shape values computed on the host for the key being lowered (onnx_lower_ints.c). */
    struct kiln__onnx_ints {
        const int64_t *v;
        int64_t n;
    } * ints;      /* [n_values] */
    int64_t *pool; /* their elements */
    int64_t pool_cap, pool_used;
} kiln__onnx_lowering;

/* Check that the fed inputs can be run (float, rank <= 4, every dim known or dynamic) and lay out the
 * key. Frees nothing on failure beyond what it allocated; pair with kiln__onnx_lower_free. */
kiln_status kiln__onnx_lower_init(kiln__onnx_lowering *l, const kiln_onnx *m);
void kiln__onnx_lower_free(kiln__onnx_lowering *l);

/* Tensors the graph for a key needs room for (every node lowers to a few, the passes add some). */
int32_t kiln__onnx_lower_capacity(const kiln__onnx_lowering *l);

/* Emit the graph for key (n_syms values, each >= 1) into g. */
kiln_status kiln__onnx_lower(kiln__onnx_lowering *l, kiln_graph *g, const int64_t *key);

/* Shape arithmetic (onnx_lower_ints.c): is n's output an integer value, evaluate it for the current key, and
 * a value's elements when known (computed, or an int64 constant of rank <= 1; NULL otherwise). */
bool kiln__onnx_is_int_node(const kiln_onnx *m, const kiln__onnx_node *n);
kiln_status kiln__onnx_lower_ints(kiln__onnx_lowering *l, const kiln__onnx_node *n);
const int64_t *kiln__onnx_ints_of(const kiln__onnx_lowering *l, const char *name, int64_t *n);

/* The ONNX shape (rank and dims) of a Kiln tensor that holds a rank-r value. */
void kiln__onnx_shape_of(const kiln_tensor *t, int32_t rank, int64_t *dims);

#endif /* KILN_ONNX_LOWER_H */
