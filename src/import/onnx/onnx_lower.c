/*
 * onnx_lower.c - a validated ONNX model, with its dynamic dims bound to a key, as Kiln graph IR
 * (onnx_lower.h says the contract, docs/onnx.md "What runs" the table of what each operator lowers to).
 *
 * Nodes are lowered one at a time in the reader's topological order. Each produces contiguous tensors, so
 * an operator may assume dense rows; an operand that is an initializer or a constant folded at load becomes
 * a weight leaf over the reader's bytes the first time it is read. Errors name the node (index, name,
 * operator, opset) and what was not supported; a shape the IR rejects comes back with the builder's message
 * behind the same prefix.
 */
#include "import/onnx/onnx_lower.h"

#include "core/core.h"
#include "tensor/quantize.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct lower {
    kiln__onnx_lowering *l;
    const kiln_onnx *m;
    kiln_graph *g;
    const kiln__onnx_node *n; /* the node being lowered */
    kiln_status status;       /* the first error of ours (the graph keeps the builder's) */
    bool indices_ok;          /* operand() may return an I32 tensor (Gather's indices, views) */
    int32_t out_rank;         /* reshape_to's last result of rank over 4, and its dims (output 0's shape) */
    int64_t out_dims[KILN_MAX_ONNX_RANK];
} lower;

/* ---- Helpers ---- */

static kiln_tensor *fail(lower *c, const char *fmt, ...) KILN__PRINTF(2, 3);

static kiln_tensor *fail(lower *c, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    if (c->status) return NULL;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!c->n) return c->status = kiln__error(KILN_E_UNSUPPORTED, "graph: %s", msg), NULL;
    c->status =
        kiln__error(KILN_E_UNSUPPORTED, "node %d '%s' (%s, opset %lld): %s", (int)(c->n - c->m->nodes),
                    c->n->name, c->n->op_type, (long long)c->m->opset, msg);
    return NULL;
}

static int32_t value_index(const kiln_onnx *m, const char *name) {
    const kiln__onnx_value *v = kiln__onnx_value_find(m, name);
    return v ? (int32_t)(v - m->values) : -1;
}

void kiln__onnx_shape_of(const kiln_tensor *t, int32_t rank, int64_t *dims) {
    for (int32_t i = 0; i < rank; i++)
        dims[i] = rank - 1 - i < KILN_MAX_DIMS ? t->ne[rank - 1 - i] : 1;
}

/* ONNX dims (rank <= 4) as Kiln's ne. */
static void ne_of(int32_t rank, const int64_t *dims, int64_t ne[KILN_MAX_DIMS]) {
    for (int d = 0; d < KILN_MAX_DIMS; d++)
        ne[d] = d < rank ? dims[rank - 1 - d] : 1;
}

static int32_t rank_of(lower *c, const char *name) {
    const kiln__onnx_value *v = kiln__onnx_value_find(c->m, name);
    return v ? v->info.rank : -1;
}

/* A weight leaf over a constant's bytes (an initializer, a Constant, or a value folded at load). */
static void *keep_bytes(lower *c, const void *bytes, size_t size);

/* A weight leaf over a constant: float in place; uint8 and int8 (quantized weights, embeddings) converted
 * to exact floats once and kept for the session. */
static kiln_tensor *const_leaf(lower *c, const kiln__onnx_tensor *init, const char *name) {
    int64_t ne[KILN_MAX_DIMS];
    const void *data = init->data;
    bool bytes = init->type == KILN_ONNX_UINT8 || init->type == KILN_ONNX_INT8;
    if (init->type != KILN_ONNX_FLOAT && !bytes)
        return fail(c, "'%s' is a %s constant: Kiln computes float tensors only at run time", name,
                    kiln__onnx_type_name(init->type));
    if (init->rank > KILN_MAX_DIMS) return fail(c, "'%s' has rank %d (Kiln runs up to 4)", name, init->rank);
    if (init->n_elements == 0) return fail(c, "'%s' is empty (Kiln runs no empty tensors)", name);
    if (bytes) {
        float *v = kiln__alloc_array((size_t)init->n_elements, sizeof *v);
        if (!v) return c->status = kiln__nomem("a quantized constant"), NULL;
        for (uint64_t i = 0; i < init->n_elements; i++)
            v[i] = init->type == KILN_ONNX_INT8 ? (float)((const int8_t *)init->data)[i]
                                                : (float)((const uint8_t *)init->data)[i];
        data = keep_bytes(c, v, (size_t)init->n_elements * sizeof *v);
        kiln__dealloc(v);
        if (!data) return NULL;
    }
    ne_of(init->rank, init->dims, ne);
    return kiln__graph_leaf(c->g, name, KILN_TYPE_F32, KILN__MAX(1, init->rank), ne, (void *)data,
                            KILN_TENSOR_WEIGHT);
}

/* FNV-1a over a leaf's bytes: the key of the session's leaf store. */
static uint64_t hash_bytes(const void *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ ((const uint8_t *)p)[i]) * 1099511628211ull;
    return h;
}

/* A copy of bytes kept for the session (one per distinct content): plans point at it. */
static void *keep_bytes(lower *c, const void *bytes, size_t size) {
    kiln__onnx_lowering *l = c->l;
    uint64_t h = hash_bytes(bytes, size);
    for (int32_t i = 0; i < l->n_leaves; i++)
        if (l->leaves[i].hash == h && l->leaves[i].size == size && !memcmp(l->leaves[i].data, bytes, size))
            return l->leaves[i].data;
    if (size > KILN_ONNX_LEAF_BYTES - l->leaf_bytes)
        return fail(c, "constants made from shapes pass %zu MiB in this session", KILN_ONNX_LEAF_BYTES >> 20),
               NULL;
    if (l->n_leaves == l->cap_leaves) {
        int32_t cap = l->cap_leaves ? 2 * l->cap_leaves : 16;
        void *grown = kiln__realloc_array(l->leaves, (size_t)cap, sizeof *l->leaves);
        if (!grown) return c->status = kiln__nomem("the session's constants"), NULL;
        l->leaves = grown;
        l->cap_leaves = cap;
    }
    void *data = kiln__alloc(KILN__MAX(size, 1));
    if (!data) return c->status = kiln__nomem("the session's constants"), NULL;
    memcpy(data, bytes, size);
    l->leaves[l->n_leaves++] = (struct kiln__onnx_leaf){h, size, data};
    l->leaf_bytes += size;
    return data;
}

/* A constant leaf of n I32 elements (indices computed on the host), shaped [n]. */
static kiln_tensor *index_leaf(lower *c, const int64_t *idx, int64_t n) {
    int32_t *v = kiln__alloc_array((size_t)KILN__MAX(n, 1), sizeof *v);
    void *kept;
    if (!v) return c->status = kiln__nomem("an index table"), NULL;
    for (int64_t i = 0; i < n; i++)
        v[i] = (int32_t)idx[i]; /* below KILN_ONNX_HOST_MAX */
    kept = keep_bytes(c, v, (size_t)n * sizeof *v);
    kiln__dealloc(v);
    return kept ? kiln__graph_leaf(c->g, "indices", KILN_TYPE_I32, 1, &n, kept, KILN_TENSOR_WEIGHT) : NULL;
}

/* A constant leaf over a host value (F32; integers and booleans exact up to 2^24). */
static kiln_tensor *host_leaf(lower *c, const kiln__onnx_host *h, const char *name) {
    int64_t ne[KILN_MAX_DIMS];
    float *v;
    void *kept;
    if (h->rank > KILN_MAX_DIMS) return fail(c, "'%s' has rank %d (Kiln runs up to 4)", name, h->rank);
    if (h->n == 0) return fail(c, "'%s' is empty (Kiln runs no empty tensors)", name);
    if (!(v = kiln__alloc_array((size_t)h->n, sizeof *v))) return c->status = kiln__nomem("a constant"), NULL;
    for (int64_t i = 0; i < h->n; i++) {
        if (h->i && (h->i[i] > (1 << 24) || h->i[i] < -(1 << 24))) {
            kiln__dealloc(v);
            return fail(c, "'%s' holds %lld, past the integers Kiln computes exactly in float (2^24)", name,
                        (long long)h->i[i]);
        }
        v[i] = h->f ? (float)h->f[i] : (float)h->i[i];
    }
    kept = keep_bytes(c, v, (size_t)h->n * sizeof *v);
    kiln__dealloc(v);
    if (!kept) return NULL;
    ne_of(h->rank, h->dims, ne);
    return kiln__graph_leaf(c->g, name, KILN_TYPE_F32, KILN__MAX(1, h->rank), ne, kept, KILN_TENSOR_WEIGHT);
}

/* Input i of the node: the tensor computed for it, or a leaf over its constant or host value. NULL for an
 * omitted one. */
static kiln_tensor *operand(lower *c, int32_t i) {
    const char *name = i < c->n->n_inputs ? c->n->inputs[i] : "";
    int32_t k;
    if (!name[0]) return NULL;
    k = value_index(c->m, name);
    if (k < 0) return fail(c, "input '%s' has no value", name);
    if (!c->l->vals[k] && c->m->values[k].init && !c->l->host[k].type &&
        (c->m->values[k].init->type == KILN_ONNX_FLOAT || c->m->values[k].init->type == KILN_ONNX_UINT8 ||
         c->m->values[k].init->type == KILN_ONNX_INT8))
        c->l->vals[k] = const_leaf(c, c->m->values[k].init, name);
    if (!c->l->vals[k] && !c->status) {
        const kiln__onnx_host *h = kiln__onnx_host_of(c->l, name);
        if (h) c->l->vals[k] = host_leaf(c, h, name);
    }
    if (!c->l->vals[k] && !c->status && !kiln__graph_status(c->g))
        return fail(c, "input '%s' is not computed before it", name);
    if (c->l->vals[k] && c->l->vals[k]->type != KILN_TYPE_F32 && !c->indices_ok)
        return fail(c, "input '%s' holds token ids (Kiln uses fed integer inputs as Gather indices only)",
                    name);
    return c->l->vals[k];
}

/* A constant integer input (a shape, axes): its elements, or NULL when it is not known on the host. */
static const int64_t *const_ints(lower *c, int32_t i, int64_t *n) {
    return i < c->n->n_inputs && c->n->inputs[i][0] ? kiln__onnx_ints_of(c->l, c->n->inputs[i], n) : NULL;
}

static int64_t attr_int(const kiln__onnx_node *n, const char *name, int64_t dflt) {
    const kiln__onnx_attr *a = kiln__onnx_find_attr(n, name);
    return a ? a->i : dflt;
}

static float attr_float(const kiln__onnx_node *n, const char *name, float dflt) {
    const kiln__onnx_attr *a = kiln__onnx_find_attr(n, name);
    return a ? a->f : dflt;
}

/* x reshaped to the ONNX dims. Over rank 4 the outermost dims are merged into Kiln's dim 3 and the ONNX
 * shape is kept for the node's output (lower_node records it). */
static kiln_tensor *reshape_to(lower *c, kiln_tensor *x, int32_t rank, const int64_t *dims) {
    int64_t ne[KILN_MAX_DIMS];
    if (!x) return NULL;
    for (int32_t i = 0; i < rank; i++)
        if (dims[i] <= 0)
            return fail(c, "the result has a dim of %lld (Kiln runs no empty tensors)", (long long)dims[i]);
    if (rank > KILN_MAX_DIMS) {
        ne[0] = dims[rank - 1], ne[1] = dims[rank - 2], ne[2] = dims[rank - 3], ne[3] = 1;
        for (int32_t i = 0; i < rank - 3; i++)
            ne[3] *= dims[i];
        c->out_rank = rank;
        memcpy(c->out_dims, dims, (size_t)rank * sizeof *dims);
        return kiln__reshape(c->g, x, KILN_MAX_DIMS, ne);
    }
    ne_of(rank, dims, ne);
    return kiln__reshape(c->g, x, KILN__MAX(1, rank), ne);
}

/* Does b broadcast to a (numpy rules, one way: each of b's dims is a's or 1)? */
static bool broadcasts_to(const kiln_tensor *b, const kiln_tensor *a) {
    for (int d = 0; d < KILN_MAX_DIMS; d++)
        if (b->ne[d] != a->ne[d] && b->ne[d] != 1) return false;
    return true;
}

static kiln_tensor *reduce_weights(lower *c, int64_t n, float value);
static void put_output(lower *c, int32_t i, kiln_tensor *t);
static int32_t dims_in(lower *c, const kiln_tensor *x, int32_t i, int64_t *dims);

/* x broadcast to the shape ne (each of x's dims is ne's or 1), as a product with ones of that shape (exact);
 * the ones are a constant of the session's (reduce_weights). */
static kiln_tensor *expand_to(lower *c, kiln_tensor *x, const int64_t ne[KILN_MAX_DIMS]) {
    int64_t n = 1;
    for (int d = 0; d < KILN_MAX_DIMS; d++)
        if (__builtin_mul_overflow(n, ne[d], &n)) return fail(c, "a broadcast shape overflows");
    kiln_tensor *ones = reduce_weights(c, n, 1.0f);
    return ones ? kiln__mul(c->g, kiln__reshape(c->g, ones, KILN_MAX_DIMS, ne), x) : NULL;
}

/* a op b with numpy broadcasting: where one operand covers the other, the op broadcasts it; where they
 * broadcast both ways ([3, 1] + [1, 4]), the first is expanded to the result's shape first. */
static kiln_tensor *broadcast(lower *c, kiln_op op, kiln_tensor *a, kiln_tensor *b) {
    kiln_graph *g = c->g;
    int64_t full[KILN_MAX_DIMS];
    if (!a || !b) return NULL;
    if (!broadcasts_to(b, a) && !broadcasts_to(a, b)) {
        for (int d = 0; d < KILN_MAX_DIMS; d++) {
            if (a->ne[d] != b->ne[d] && a->ne[d] != 1 && b->ne[d] != 1)
                return fail(c, "dims %lld and %lld do not broadcast", (long long)a->ne[d],
                            (long long)b->ne[d]);
            full[d] = a->ne[d] > b->ne[d] ? a->ne[d] : b->ne[d];
        }
        if (!(a = expand_to(c, a, full))) return NULL;
    }
    if (broadcasts_to(b, a)) {
        switch (op) {
        case KILN_OP_ADD: return kiln__add(g, a, b);
        case KILN_OP_MUL: return kiln__mul(g, a, b);
        case KILN_OP_SUB: return kiln__sub(g, a, b);
        default: return kiln__div(g, a, b);
        }
    }
    if (broadcasts_to(a, b)) { /* the first operand is the smaller: swap, exactly where the op allows */
        switch (op) {
        case KILN_OP_ADD: return kiln__add(g, b, a);
        case KILN_OP_MUL: return kiln__mul(g, b, a);
        case KILN_OP_SUB: return kiln__unary(g, kiln__sub(g, b, a), KILN_UNARY_NEG); /* -(b - a): exact */
        default: return kiln__mul(g, kiln__unary(g, b, KILN_UNARY_RECIP), a); /* a * (1 / b): two roundings */
        }
    }
    return fail(c, "operands that do not broadcast");
}

/* Swap Kiln dims 0 and k (an involution), as a copy. */
static kiln_tensor *swap_dims(kiln_graph *g, kiln_tensor *x, int k) {
    int32_t axes[KILN_MAX_DIMS] = {0, 1, 2, 3};
    axes[0] = k;
    axes[k] = 0;
    return kiln__cont(g, kiln__permute(g, x, axes[0], axes[1], axes[2], axes[3]));
}

/* ---- Operators ---- */

static kiln_tensor *lower_binary(lower *c) {
    const char *op = c->n->op_type;
    kiln_op k = !strcmp(op, "Add")   ? KILN_OP_ADD
                : !strcmp(op, "Mul") ? KILN_OP_MUL
                : !strcmp(op, "Sub") ? KILN_OP_SUB
                                     : KILN_OP_DIV;
    kiln_tensor *a = operand(c, 0), *b = operand(c, 1);
    return broadcast(c, k, a, b);
}

static kiln_tensor *lower_unary(lower *c) {
    static const struct {
        const char *name;
        int32_t fn;
    } fns[] = {{"Sigmoid", KILN_UNARY_SIGMOID}, {"Erf", KILN_UNARY_ERF}, {"Sqrt", KILN_UNARY_SQRT},
               {"Exp", KILN_UNARY_EXP},         {"Log", KILN_UNARY_LOG}, {"Neg", KILN_UNARY_NEG},
               {"Reciprocal", KILN_UNARY_RECIP}};
    kiln_tensor *x = operand(c, 0);
    const char *op = c->n->op_type;
    if (!x) return NULL;
    if (!strcmp(op, "Relu")) return kiln__relu(c->g, x);
    if (!strcmp(op, "Tanh")) return kiln__tanh(c->g, x);
    if (!strcmp(op, "Identity")) return x;
    if (!strcmp(op, "Gelu")) {
        const kiln__onnx_attr *a = kiln__onnx_find_attr(c->n, "approximate");
        if (a && a->s.len == 4 && !memcmp(a->s.data, "tanh", 4)) return kiln__gelu(c->g, x);
        if (a && !(a->s.len == 4 && !memcmp(a->s.data, "none", 4)))
            return fail(c, "approximate '%.*s' is neither 'none' nor 'tanh'", (int)KILN__MIN(a->s.len, 32),
                        a->s.data);
        return kiln__unary(c->g, x, KILN_UNARY_GELU_ERF);
    }
    if (!strcmp(op, "Cast")) { /* booleans and integers are held as exact floats */
        int64_t to = attr_int(c->n, "to", 0);
        const kiln__onnx_value *v = kiln__onnx_value_find(c->m, c->n->inputs[0]);
        if (to == KILN_ONNX_BOOL)
            return kiln__unary(c->g, kiln__unary(c->g, x, KILN_UNARY_NOT), KILN_UNARY_NOT);
        if (to != KILN_ONNX_FLOAT && v->info.type == KILN_ONNX_FLOAT)
            return fail(c, "a cast of computed floats to integers");
        return x;
    }
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++)
        if (!strcmp(op, fns[i].name)) return kiln__unary(c->g, x, fns[i].fn);
    return fail(c, "no lowering for this operator");
}

/* The weight B (input 1, a float initializer of rank 2) as a Q8_0 leaf of Kiln's [K, N] when the session
quantizes weights and K is a multiple of 32 (rows_as_is: B is [N, K] already, Gemm's transB = 1); NULL
otherwise (the float path), or on an error (c->status). Quantized once per session and value. */
static kiln_tensor *q8_weight(lower *c, bool rows_as_is) {
    const char *name = c->n->inputs[1];
    int32_t k = value_index(c->m, name);
    const kiln__onnx_tensor *t = k >= 0 ? c->m->values[k].init : NULL;
    void **slot;
    if (!c->l->q8_weights || !t || t->type != KILN_ONNX_FLOAT || t->rank != 2) return NULL;
    int64_t K = rows_as_is ? t->dims[1] : t->dims[0], N = rows_as_is ? t->dims[0] : t->dims[1],
            ne[2] = {K, N};
    if (K % 32 != 0 || K == 0 || N == 0) return NULL;
    slot = rows_as_is ? &c->l->q8_rows[k] : &c->l->q8[k];
    if (!*slot) {
        const float *b = t->data;
        float *row = kiln__alloc_array((size_t)K, sizeof *row);
        uint8_t *q = kiln__alloc_array((size_t)N, (size_t)(K / 32) * 34);
        bool finite = row && q;
        for (int64_t n = 0; finite && n < N; n++) {
            for (int64_t i = 0; i < K; i++) {
                row[i] = rows_as_is ? b[n * K + i] : b[i * N + n];
                finite = finite && isfinite(row[i]);
            }
            if (finite) kiln__quantize_q8_0(row, q + n * (K / 32) * 34, K);
        }
        kiln__dealloc(row);
        if (!finite) { /* out of memory, or a weight that is not finite: the float path */
            kiln__dealloc(q);
            return NULL;
        }
        *slot = q;
    }
    return kiln__graph_leaf(c->g, name, KILN_TYPE_Q8_0, 2, ne, *slot, KILN_TENSOR_WEIGHT);
}

/* Y = A . B with numpy's matmul rules (1-D operands promoted and their dim dropped; batch dims broadcast
 * one way). Kiln's matmul is W . X with W [K, N] and X [K, M] -> [N, M]: X is A as it lies, W is B
 * transposed: a copy that constant folding makes once when B is a weight, and that the absorb pass turns
 * into a transposed read when B is an activation. */
static kiln_tensor *matmul_of(lower *c, kiln_tensor *a, kiln_tensor *b, int32_t b_input, kiln_tensor *w) {
    kiln_graph *g = c->g;
    kiln_tensor *y;
    int32_t ra = rank_of(c, c->n->inputs[0]), rb = rank_of(c, c->n->inputs[b_input]);
    int64_t dims[KILN_MAX_DIMS + 2];
    int32_t ro = 0;
    if (!a || !b) return NULL;
    if (!w) w = rb == 1 ? b : kiln__cont(g, kiln__transpose(g, b)); /* [K, N, batch] */
    if (!w) return NULL;
    if (a->ne[2] % w->ne[2] == 0 && a->ne[3] % w->ne[3] == 0) {
        y = kiln__matmul(g, w, a); /* [N, M, batch of A] */
    } else if (w->ne[2] % a->ne[2] == 0 && w->ne[3] % a->ne[3] == 0) {
        y = kiln__cont(g, kiln__transpose(g, kiln__matmul(g, a, w))); /* (B^T A^T)^T over B's batch */
    } else { /* batch dims broadcast both ways: A expanded to the result's batch first */
        int64_t full[KILN_MAX_DIMS] = {a->ne[0], a->ne[1], KILN__MAX(a->ne[2], w->ne[2]),
                                       KILN__MAX(a->ne[3], w->ne[3])};
        y = kiln__matmul(g, w, expand_to(c, a, full));
    }
    if (!y) return NULL;
    /* The result's ONNX dims: batch, then M unless A was 1-D, then N unless B was 1-D. */
    for (int32_t d = KILN_MAX_DIMS - 1; d >= 2; d--)
        if (d - 2 < KILN__MAX(ra, rb) - 2) dims[ro++] = y->ne[d];
    if (ra > 1) dims[ro++] = y->ne[1];
    if (rb > 1) dims[ro++] = y->ne[0];
    if (ro == 0) dims[ro++] = 1; /* a dot product: a scalar, held as [1] */
    return reshape_to(c, y, ro, dims);
}

static kiln_tensor *lower_matmul(lower *c) {
    kiln_tensor *a = operand(c, 0), *b = operand(c, 1);
    return a && b ? matmul_of(c, a, b, 1, rank_of(c, c->n->inputs[1]) == 2 ? q8_weight(c, false) : NULL)
                  : NULL;
}

/* A zero point (input i, optional) shaped to broadcast against a matrix operand: per row of A ([M] as
 * [M, 1]) or per column of B ([N]), or a scalar. */
static kiln_tensor *zero_point(lower *c, int32_t i, bool per_row) {
    kiln_tensor *z = operand(c, i);
    if (!z || !per_row || kiln__tensor_nelements(z) == 1) return z;
    return kiln__reshape_2d(c->g, z, 1, kiln__tensor_nelements(z));
}

/* MatMulInteger: (A - a_zero_point) . (B - b_zero_point), the integers held as floats (the products exact,
 * the sums rounded to float32 beyond 2^24: the graph reads them through a float Cast and scales). */
static kiln_tensor *lower_matmul_integer(lower *c) {
    kiln_tensor *a = operand(c, 0), *b = operand(c, 1), *az = zero_point(c, 2, true),
                *bz = zero_point(c, 3, false);
    if (!a || !b || c->status) return NULL;
    if (az) a = broadcast(c, KILN_OP_SUB, a, az);
    if (bz) b = broadcast(c, KILN_OP_SUB, b, bz);
    return matmul_of(c, a, b, 1, NULL);
}

/* clamp(x, lo, hi) for integer-valued x (exact): lo + relu(x - lo) - relu(x - hi). */
static kiln_tensor *clamp_int(lower *c, kiln_tensor *x, float lo, float hi) {
    kiln_graph *g = c->g;
    kiln_tensor *above = kiln__relu(g, kiln__scale(g, x, 1.0f, -lo)),
                *over = kiln__relu(g, kiln__scale(g, x, 1.0f, -hi));
    return kiln__scale(g, kiln__sub(g, above, over), 1.0f, lo);
}

/* The ONNX type of input i (0 when unknown). */
static int32_t type_of(lower *c, int32_t i) {
    const kiln__onnx_value *v = kiln__onnx_value_find(c->m, c->n->inputs[i]);
    return v ? v->info.type : 0;
}

/* QLinearMatMul: saturate(round((A - a_zero_point) . (B - b_zero_point) * (a_scale * b_scale / y_scale)) +
 * y_zero_point), as the ONNX reference computes it: the integers held as floats as in MatMulInteger, the
 * multiplier formed before it scales the product, round half to even. B's parameters are per tensor or per
 * column; A's and y's per tensor (the spec also names per-row ones, which neither the ONNX reference nor
 * onnxruntime runs: refused by name). */
static kiln_tensor *lower_qlinear_matmul(lower *c) {
    static const char *const what[8] = {"a",       "a_scale",      "a_zero_point", "b",
                                        "b_scale", "b_zero_point", "y_scale",      "y_zero_point"};
    kiln_graph *g = c->g;
    for (int32_t i = 1; i < 8; i++) {
        int32_t t = type_of(c, i), want = i == 2 ? type_of(c, 0) : i == 5 ? type_of(c, 3) : KILN_ONNX_FLOAT;
        if (i == 3) continue;
        if (i == 7 && t != KILN_ONNX_UINT8 && t != KILN_ONNX_INT8)
            return fail(c, "y_zero_point of type %s (Kiln quantizes to uint8 and int8)",
                        kiln__onnx_type_name(t));
        if (i != 7 && t != want)
            return fail(c, "%s of type %s (%s expected)", what[i], kiln__onnx_type_name(t),
                        kiln__onnx_type_name(want));
    }
    kiln_tensor *v[8];
    for (int32_t i = 0; i < 8; i++) {
        v[i] = i == 4 || i == 5 ? zero_point(c, i, false) : operand(c, i);
        if (!v[i] || c->status) return NULL;
        if ((i == 1 || i == 2 || i == 6 || i == 7) && kiln__tensor_nelements(v[i]) != 1)
            return fail(c, "%s has %lld elements (Kiln runs per-tensor parameters for A and y)", what[i],
                        (long long)kiln__tensor_nelements(v[i]));
    }
    kiln_tensor *acc =
        matmul_of(c, broadcast(c, KILN_OP_SUB, v[0], v[2]), broadcast(c, KILN_OP_SUB, v[3], v[5]), 3, NULL);
    kiln_tensor *mult = broadcast(c, KILN_OP_DIV, broadcast(c, KILN_OP_MUL, v[1], v[4]), v[6]);
    if (!acc || !mult) return NULL;
    kiln_tensor *y = broadcast(c, KILN_OP_ADD,
                               kiln__unary(g, broadcast(c, KILN_OP_MUL, acc, mult), KILN_UNARY_ROUND), v[7]);
    bool int8 = type_of(c, 7) == KILN_ONNX_INT8;
    return y ? clamp_int(c, y, int8 ? -128.0f : 0.0f, int8 ? 127.0f : 255.0f) : NULL;
}

/* A scale or zero point of QuantizeLinear/DequantizeLinear shaped to broadcast along the axis of x. */
static kiln_tensor *per_axis(lower *c, kiln_tensor *x, int32_t i) {
    kiln_tensor *v = operand(c, i);
    int32_t r = rank_of(c, c->n->inputs[0]);
    int64_t axis = attr_int(c->n, "axis", 1), ne[KILN_MAX_DIMS] = {1, 1, 1, 1}, n;
    if (!v || (n = kiln__tensor_nelements(v)) == 1) return v;
    if (axis < 0) axis += r;
    if (axis < 0 || axis >= r || r > KILN_MAX_DIMS || x->ne[r - 1 - axis] != n)
        return fail(c, "per-channel parameters that do not match axis %lld", (long long)axis);
    ne[r - 1 - axis] = n;
    return kiln__reshape(c->g, v, KILN_MAX_DIMS, ne);
}

/* QuantizeLinear, saturate(round(x / scale) + zero_point), and DequantizeLinear, (x - zero_point) * scale, on
 * run-time values (integers held as floats); on constants the host computes them. */
static kiln_tensor *lower_quant(lower *c) {
    kiln_tensor *x = operand(c, 0), *scale, *zp;
    bool int8 = c->n->n_inputs > 2 && c->n->inputs[2][0] &&
                kiln__onnx_value_find(c->m, c->n->inputs[2])->info.type == KILN_ONNX_INT8;
    if (!x) return NULL;
    scale = per_axis(c, x, 1);
    zp = c->n->n_inputs > 2 && c->n->inputs[2][0] ? per_axis(c, x, 2) : NULL;
    if (!scale || c->status) return NULL;
    int64_t dims[KILN_MAX_ONNX_RANK];
    int32_t r = dims_in(c, x, 0, dims);
    if (r > KILN_MAX_DIMS && (kiln__tensor_nelements(scale) != 1 || (zp && kiln__tensor_nelements(zp) != 1)))
        return fail(c, "per-channel parameters on a value of rank %d (Kiln runs per-tensor ones there)", r);
    kiln_tensor *y;
    if (!strcmp(c->n->op_type, "DequantizeLinear")) {
        y = broadcast(c, KILN_OP_MUL, zp ? broadcast(c, KILN_OP_SUB, x, zp) : x, scale);
    } else {
        y = kiln__unary(c->g, broadcast(c, KILN_OP_DIV, x, scale), KILN_UNARY_ROUND);
        if (zp) y = broadcast(c, KILN_OP_ADD, y, zp);
        y = clamp_int(c, y, int8 ? -128.0f : 0.0f, int8 ? 127.0f : 255.0f);
    }
    return r > KILN_MAX_DIMS ? reshape_to(c, y, r, dims) : y; /* the ONNX shape kept beside it */
}

/* DynamicQuantizeLinear: scale = (max(0, max x) - min(0, min x)) / 255, zero_point = round(saturate(-min(0,
 * min x) / scale)), y = saturate(round(x / scale) + zero_point), as ONNX defines it (uint8). */
static kiln_tensor *lower_dynamic_quantize(lower *c) {
    kiln_graph *g = c->g;
    kiln_tensor *x = operand(c, 0), *flat, *hi, *lo, *scale, *zp, *y;
    int64_t n;
    if (!x) return NULL;
    n = kiln__tensor_nelements(x);
    flat = kiln__reshape(g, kiln__tensor_is_contiguous(x) ? x : kiln__cont(g, x), 1, &n);
    hi = kiln__relu(g, kiln__reduce_max(g, flat));                                 /* max(0, max x) */
    lo = kiln__relu(g, kiln__reduce_max(g, kiln__unary(g, flat, KILN_UNARY_NEG))); /* -min(0, min x) */
    scale = kiln__div(g, kiln__add(g, hi, lo), reduce_weights(c, 1, 255.0f));
    zp = kiln__unary(g, clamp_int(c, kiln__div(g, lo, scale), 0.0f, 255.0f), KILN_UNARY_ROUND);
    y = clamp_int(c, kiln__add(g, kiln__unary(g, broadcast(c, KILN_OP_DIV, x, scale), KILN_UNARY_ROUND), zp),
                  0.0f, 255.0f);
    put_output(c, 1, scale);
    put_output(c, 2, zp);
    return y;
}

/* Y = alpha op(A) op(B) + beta C, C broadcast to [M, N]. */
static kiln_tensor *lower_gemm(lower *c) {
    kiln_graph *g = c->g;
    kiln_tensor *a = operand(c, 0), *b = operand(c, 1), *bias = operand(c, 2), *x, *w, *y;
    float alpha = attr_float(c->n, "alpha", 1.0f), beta = attr_float(c->n, "beta", 1.0f);
    if (!a || !b || c->status) return NULL;
    x = attr_int(c->n, "transA", 0) ? kiln__cont(g, kiln__transpose(g, a)) : a; /* [K, M] */
    w = q8_weight(c, attr_int(c->n, "transB", 0) != 0);
    if (!w) w = attr_int(c->n, "transB", 0) ? b : kiln__cont(g, kiln__transpose(g, b)); /* [K, N] */
    y = kiln__matmul(g, w, x);
    if (y && alpha != 1.0f) y = kiln__scale(g, y, alpha, 0.0f);
    if (!bias || !y) return y;
    if (beta != 1.0f) bias = kiln__scale(g, bias, beta, 0.0f);
    return broadcast(c, KILN_OP_ADD, y, bias);
}

/* Softmax over one axis: Kiln's is over dim 0, so another axis is swapped there and back. */
static kiln_tensor *lower_softmax(lower *c) {
    kiln_tensor *x = operand(c, 0);
    int32_t r = rank_of(c, c->n->inputs[0]);
    int64_t axis = attr_int(c->n, "axis", -1);
    int k;
    if (!x) return NULL;
    if (axis < 0) axis += r;
    if (axis < 0 || axis >= r || r > KILN_MAX_DIMS)
        return fail(c, "axis %lld is out of range for rank %d", (long long)attr_int(c->n, "axis", -1), (int)r);
    k = (int)(r - 1 - axis);
    if (k == 0) return kiln__softmax(c->g, x, 1.0f);
    return swap_dims(c->g, kiln__softmax(c->g, swap_dims(c->g, x, k), 1.0f), k);
}

/* Is the value named name read by a node or the graph's outputs? */
static bool value_used(const kiln_onnx *m, const char *name) {
    if (!name[0]) return false;
    for (int32_t i = 0; i < m->n_outputs; i++)
        if (!strcmp(m->outputs[i].name, name)) return true;
    for (int32_t i = 0; i < m->n_nodes; i++)
        for (int32_t j = 0; j < m->nodes[i].n_inputs; j++)
            if (!strcmp(m->nodes[i].inputs[j], name)) return true;
    return false;
}

/* A leaf of n floats of `value` (1/n: a mean as a product; 1: a sum), made once per length and value and
 * kept by the lowering: Kiln has no reduction op, and a product with it is one matmul. */
static kiln_tensor *reduce_weights(lower *c, int64_t n, float value) {
    kiln__onnx_lowering *l = c->l;
    float *data = NULL;
    for (int32_t i = 0; i < l->n_consts && !data; i++)
        if (l->consts[i].n == n && l->consts[i].value == value) data = l->consts[i].data;
    if (!data) {
        if (l->n_consts == KILN_ONNX_MAX_CONSTS)
            return fail(c, "over %d constant lengths", KILN_ONNX_MAX_CONSTS);
        if (!(data = kiln__alloc_array((size_t)n, sizeof *data))) {
            c->status = kiln__nomem("a reduction's weights");
            return NULL;
        }
        for (int64_t i = 0; i < n; i++)
            data[i] = value;
        l->consts[l->n_consts++] = (struct kiln__onnx_const){n, value, data};
    }
    return kiln__graph_leaf(c->g, "reduce_weights", KILN_TYPE_F32, 1, &n, data, KILN_TENSOR_WEIGHT);
}

kiln_tensor *kiln__onnx_filled(kiln__onnx_lowering *l, kiln_graph *g, int64_t n, float value) {
    lower c = {.l = l, .m = l->m, .g = g};
    kiln_tensor *t = reduce_weights(&c, n, value);
    return c.status ? NULL : t;
}

/* Record output i of the node (beyond the first, which lower_node records). */
static void put_output(lower *c, int32_t i, kiln_tensor *t) {
    if (!t || i >= c->n->n_outputs || !c->n->outputs[i][0]) return;
    kiln__tensor_set_name(t, "%s", c->n->outputs[i]);
    c->l->vals[value_index(c->m, c->n->outputs[i])] = t;
}

/* LayerNormalization's Mean and InvStdDev of the rows xr [K, R...] as products with 1/K (Kiln has no
 * reduction op), shaped as x with the normalized dims (Kiln dims 0 .. k-1) kept as 1. */
static void layer_norm_stats(lower *c, kiln_tensor *x, kiln_tensor *xr, int k, float eps) {
    kiln_graph *g = c->g;
    int64_t ne[KILN_MAX_DIMS];
    kiln_tensor *ones = reduce_weights(c, xr->ne[0], 1.0f / (float)xr->ne[0]), *mean, *d, *var, *inv;
    if (!ones) return;
    mean = kiln__matmul(g, ones, xr); /* [1, R...] */
    d = kiln__sub(g, xr, mean);
    var = kiln__matmul(g, ones, kiln__mul(g, d, d));
    inv = kiln__unary(g, kiln__unary(g, kiln__scale(g, var, 1.0f, eps), KILN_UNARY_SQRT), KILN_UNARY_RECIP);
    for (int i = 0; i < KILN_MAX_DIMS; i++)
        ne[i] = i < k ? 1 : x->ne[i];
    put_output(c, 1, kiln__reshape(g, mean, x->n_dims, ne));
    put_output(c, 2, kiln__reshape(g, inv, x->n_dims, ne));
}

/* LayerNormalization: Kiln's norm over the normalized dims (merged into one row when several), times
 * Scale, plus B; Mean and InvStdDev when the graph reads them. */
static kiln_tensor *lower_layer_norm(lower *c) {
    kiln_graph *g = c->g;
    kiln_tensor *x = operand(c, 0), *scale = operand(c, 1), *bias = operand(c, 2), *xr, *y;
    int32_t r = rank_of(c, c->n->inputs[0]);
    int64_t axis = attr_int(c->n, "axis", -1), ne[KILN_MAX_DIMS] = {1, 1, 1, 1};
    float eps = attr_float(c->n, "epsilon", 1e-5f);
    if (!x || !scale || c->status) return NULL;
    if (axis < 0) axis += r;
    if (axis < 0 || axis >= r || r > KILN_MAX_DIMS)
        return fail(c, "axis %lld is out of range for rank %d", (long long)attr_int(c->n, "axis", -1), (int)r);
    int k = (int)(r - axis); /* Kiln dims 0 .. k-1 are normalized */
    for (int d = 0; d < KILN_MAX_DIMS; d++) {
        if (d < k)
            ne[0] *= x->ne[d];
        else
            ne[d - k + 1] = x->ne[d];
    }
    xr = k > 1 ? kiln__reshape(g, x, KILN_MAX_DIMS - k + 1, ne) : x; /* [K, R...] */
    y = k > 1 ? kiln__reshape(g, kiln__norm(g, xr, eps), x->n_dims, x->ne) : kiln__norm(g, x, eps);
    if (value_used(c->m, c->n->n_outputs > 1 ? c->n->outputs[1] : "") ||
        value_used(c->m, c->n->n_outputs > 2 ? c->n->outputs[2] : ""))
        layer_norm_stats(c, x, xr, k, eps);
    y = broadcast(c, KILN_OP_MUL, y, scale);
    return bias ? broadcast(c, KILN_OP_ADD, y, bias) : y;
}

/* ReduceMean, ReduceSum and ReduceMax over any axes: the reduced Kiln dims are moved innermost (a copy unless
 * they already are), merged into rows of K, and multiplied by a vector of 1/K or 1. */
static kiln_tensor *lower_reduce(lower *c) {
    kiln_graph *g = c->g;
    kiln_tensor *x = operand(c, 0), *xr;
    int32_t r = rank_of(c, c->n->inputs[0]), ro = 0, axes[KILN_MAX_DIMS] = {0, 1, 2, 3}, pos = 0;
    int64_t n_axes = 0, K = 1, ne[KILN_MAX_DIMS] = {1, 1, 1, 1}, dims[KILN_MAX_DIMS];
    const kiln__onnx_attr *attr = kiln__onnx_find_attr(c->n, "axes");
    const int64_t *v = attr ? attr->ints : const_ints(c, 1, &n_axes);
    bool mean = !strcmp(c->n->op_type, "ReduceMean"), keep = attr_int(c->n, "keepdims", 1) != 0,
         reduced[4] = {0};
    if (!x) return NULL;
    if (attr) n_axes = attr->n;
    if (!v && c->n->n_inputs > 1 && c->n->inputs[1][0])
        return fail(c, "its axes are computed from tensor values");
    if (n_axes == 0 && attr_int(c->n, "noop_with_empty_axes", 0)) return x;
    for (int32_t d = 0; d < r; d++)
        reduced[d] = n_axes == 0;
    for (int64_t i = 0; i < n_axes; i++) {
        int64_t a = v[i] < 0 ? v[i] + r : v[i];
        if (a < 0 || a >= r) return fail(c, "axis %lld out of range", (long long)v[i]);
        reduced[r - 1 - a] = true;
    }
    for (int d = 0; d < KILN_MAX_DIMS; d++) /* reduced dims first, then the others, each in order */
        if (reduced[d]) axes[d] = pos++, K *= x->ne[d];
    for (int d = 0, k = 1; d < KILN_MAX_DIMS; d++)
        if (!reduced[d]) axes[d] = pos++, ne[k++] = x->ne[d];
    ne[0] = K;
    xr = kiln__permute(g, x, axes[0], axes[1], axes[2], axes[3]);
    xr = kiln__reshape(g, kiln__tensor_is_contiguous(xr) ? xr : kiln__cont(g, xr), KILN_MAX_DIMS, ne);
    kiln_tensor *y = !strcmp(c->n->op_type, "ReduceMax") /* [1, rest] */
                         ? kiln__reduce_max(g, xr)
                         : kiln__matmul(g, reduce_weights(c, K, mean ? 1.0f / (float)K : 1.0f), xr);
    for (int32_t i = 0; i < r; i++)
        if (!reduced[r - 1 - i] || keep) dims[ro++] = reduced[r - 1 - i] ? 1 : x->ne[r - 1 - i];
    if (ro == 0) dims[ro++] = 1; /* a scalar, held as [1] */
    return reshape_to(c, y, ro, dims);
}

/* Pow with a constant scalar exponent of 1, 2, 3, 0.5, -0.5 or -1 (what exporters write for variances,
 * norms and their inverses), as products, sqrt and reciprocals. */
static kiln_tensor *lower_pow(lower *c) {
    kiln_graph *g = c->g;
    kiln_tensor *x = operand(c, 0);
    const kiln__onnx_value *e = kiln__onnx_value_find(c->m, c->n->inputs[1]);
    double p;
    if (!x) return NULL;
    if (!e->init || e->init->n_elements != 1 ||
        (e->init->type != KILN_ONNX_FLOAT && e->init->type != KILN_ONNX_INT64 &&
         e->init->type != KILN_ONNX_INT32))
        return fail(c, "the exponent is not a constant scalar");
    if (e->init->type == KILN_ONNX_FLOAT)
        p = *(const float *)e->init->data;
    else if (e->init->type == KILN_ONNX_INT64)
        p = (double)*(const int64_t *)e->init->data;
    else
        p = *(const int32_t *)e->init->data;
    if (p == 1.0) return x;
    if (p == 2.0) return kiln__mul(g, x, x);
    if (p == 3.0) return kiln__mul(g, kiln__mul(g, x, x), x);
    if (p == 0.5) return kiln__unary(g, x, KILN_UNARY_SQRT);
    if (p == -0.5) return kiln__unary(g, kiln__unary(g, x, KILN_UNARY_SQRT), KILN_UNARY_RECIP);
    if (p == -1.0) return kiln__unary(g, x, KILN_UNARY_RECIP);
    return fail(c, "exponent %g (Kiln runs 1, 2, 3, 0.5, -0.5 and -1)", p);
}

static kiln_tensor *lower_gather(lower *c);

static kiln_tensor *lower_transpose(lower *c) {
    kiln_tensor *fused = kiln__onnx_fuse_attention(c->l, c->g, c->n), *x;
    if (fused || kiln__graph_status(c->g)) return fused;
    x = operand(c, 0);
    int32_t r = rank_of(c, c->n->inputs[0]), axes[KILN_MAX_DIMS] = {0, 1, 2, 3};
    const kiln__onnx_attr *perm = kiln__onnx_find_attr(c->n, "perm");
    if (!x) return NULL;
    if (r > KILN_MAX_DIMS) return lower_gather(c);
    /* Output axis i is input axis perm[i]: Kiln source dim r-1-perm[i] goes to dim r-1-i. */
    for (int32_t i = 0; i < r; i++) {
        int64_t p = perm && i < perm->n ? perm->ints[i] : r - 1 - i;
        if (p < 0) p += r;
        if (p < 0 || p >= r) return fail(c, "perm holds %lld, out of range", (long long)p);
        axes[r - 1 - p] = r - 1 - i;
    }
    return kiln__cont(c->g, kiln__permute(c->g, x, axes[0], axes[1], axes[2], axes[3]));
}

/* The ONNX dims of the computed tensor x that holds the node's input i (any rank), or -1. */
static int32_t dims_in(lower *c, const kiln_tensor *x, int32_t i, int64_t *dims) {
    int32_t k = value_index(c->m, c->n->inputs[i]), r;
    if (k < 0) return -1;
    if (c->l->big[k].rank) {
        memcpy(dims, c->l->big[k].dims, (size_t)c->l->big[k].rank * sizeof *dims);
        return c->l->big[k].rank;
    }
    r = c->m->values[k].info.rank;
    if (r < 0 || r > KILN_MAX_DIMS) return -1;
    kiln__onnx_shape_of(x, r, dims);
    return r;
}

/* Reshape, Flatten, Squeeze and Unsqueeze: the same bytes under new dims (a view; of fed ids too). */
static kiln_tensor *lower_reshape(lower *c) {
    kiln_tensor *x;
    int32_t r, ro;
    int64_t in[KILN_MAX_ONNX_RANK], out[KILN_MAX_ONNX_RANK], n = 0;
    const int64_t *v = NULL;
    const char *why = "";
    c->indices_ok = true;
    x = operand(c, 0);
    c->indices_ok = false;
    if (!x) return NULL;
    if ((r = dims_in(c, x, 0, in)) < 0) return fail(c, "the input's rank is not known");
    if (c->n->n_inputs > 1 && c->n->inputs[1][0] && !(v = const_ints(c, 1, &n)))
        return fail(c, "its %s input is computed from tensor values (Kiln needs it from shapes)",
                    !strcmp(c->n->op_type, "Reshape") ? "shape" : "axes");
    if ((ro = kiln__onnx_reshape_dims(c->n, r, in, v, n, out, &why)) < 0) return fail(c, "%s", why);
    if (ro == 0) out[ro++] = 1; /* a scalar, held as [1] */
    return reshape_to(c, x, ro, out);
}

/* Gather's rows of a table (any tensor, axis 0) by fed or host-known ids: get_rows. */
static kiln_tensor *gather_rows(lower *c, kiln_tensor *table, kiln_tensor *ids, int32_t rt,
                                const int64_t *tdims, int32_t ri, const int64_t *idims) {
    kiln_graph *g = c->g;
    int64_t inner = 1, n_ids = 1, dims[KILN_MAX_ONNX_RANK];
    int32_t ro = 0;
    for (int32_t d = 1; d < rt; d++)
        inner *= tdims[d];
    for (int32_t d = 0; d < ri; d++)
        n_ids *= idims[d], dims[ro++] = idims[d];
    for (int32_t d = 1; d < rt; d++)
        dims[ro++] = tdims[d];
    if (table->ne[0] != inner) table = kiln__reshape_2d(g, table, inner, tdims[0]);
    if (ro == 0) dims[ro++] = 1;
    return reshape_to(c, kiln__get_rows(g, table, kiln__reshape(g, ids, 1, &n_ids)), ro, dims);
}

/* Elements of x (F32) at flat indices known on the host, as a get_rows over one-element rows. */
static kiln_tensor *gather_elements(lower *c, kiln_tensor *x, const int64_t *idx, int64_t n, int32_t ro,
                                    const int64_t *dims) {
    int64_t total = kiln__tensor_nelements(x);
    kiln_tensor *ids = index_leaf(c, idx, n);
    if (!ids) return NULL;
    if (!kiln__tensor_is_contiguous(x)) x = kiln__cont(c->g, x);
    return reshape_to(c, kiln__get_rows(c->g, kiln__reshape_2d(c->g, x, 1, total), ids), ro, dims);
}

/* Gather, GatherElements, GatherND, and Slice with negative steps: rows of a table by ids (fed, or known on
 * the host), or elements of computed data by indices known on the host. */
static kiln_tensor *lower_gather(lower *c) {
    int64_t xd[KILN_MAX_ONNX_RANK], id[KILN_MAX_ONNX_RANK], od[KILN_MAX_ONNX_RANK], *idx, n;
    int32_t rx, ri, ro;
    const char *why = "";
    const kiln__onnx_attr *ax = kiln__onnx_find_attr(c->n, "axis");
    kiln_tensor *x = operand(c, 0), *ids;
    if (!x || (rx = dims_in(c, x, 0, xd)) < 0) return x ? fail(c, "the data's rank is not known") : NULL;
    if (!strcmp(c->n->op_type, "Gather") && (!ax || ax->i == 0 || ax->i == -rx) && rx <= KILN_MAX_DIMS) {
        const kiln__onnx_host *h = kiln__onnx_host_of(c->l, c->n->inputs[1]);
        if (h && h->i) { /* ids known on the host: a constant id table */
            for (int64_t j = 0; j < h->n; j++)
                if (h->i[j] < -xd[0] || h->i[j] >= xd[0])
                    return fail(c, "index %lld out of range", (long long)h->i[j]);
            int64_t *v = kiln__alloc_array((size_t)KILN__MAX(h->n, 1), sizeof *v);
            if (!v) return c->status = kiln__nomem("indices"), NULL;
            for (int64_t j = 0; j < h->n; j++)
                v[j] = h->i[j] < 0 ? h->i[j] + xd[0] : h->i[j];
            ids = index_leaf(c, v, h->n);
            kiln__dealloc(v);
            return ids ? gather_rows(c, x, ids, rx, xd, h->rank, h->dims) : NULL;
        }
        c->indices_ok = true;
        ids = operand(c, 1);
        c->indices_ok = false;
        if (!ids) return NULL;
        if (ids->type != KILN_TYPE_I32)
            return fail(c,
                        "its indices are computed from tensor values (Kiln gathers by fed ids or by indices "
                        "known from shapes)");
        if ((ri = dims_in(c, ids, 1, id)) < 0) return fail(c, "the indices' rank is not known");
        if (x->type != KILN_TYPE_F32) return fail(c, "gathering from fed ids");
        return gather_rows(c, x, ids, rx, xd, ri, id);
    }
    if (x->type != KILN_TYPE_F32) return fail(c, "gathering from fed ids");
    if ((n = kiln__onnx_index_map(c->l, c->n, rx, xd, &ro, od, &idx, &why)) < 0) return fail(c, "%s", why);
    if (n == 0) return fail(c, "the result is empty (Kiln runs no empty tensors)");
    return gather_elements(c, x, idx, n, ro, od);
}

/* Slice: a strided view and a copy where every step is positive, else an element gather. */
static kiln_tensor *lower_slice(lower *c) {
    int64_t xd[KILN_MAX_ONNX_RANK], start[KILN_MAX_ONNX_RANK], step[KILN_MAX_ONNX_RANK],
        cnt[KILN_MAX_ONNX_RANK];
    int64_t ne[KILN_MAX_DIMS];
    size_t nb[KILN_MAX_DIMS], off = 0;
    int32_t r;
    kiln_tensor *x = operand(c, 0);
    if (!x || (r = dims_in(c, x, 0, xd)) < 0) return x ? fail(c, "the data's rank is not known") : NULL;
    if (kiln__onnx_slice_params(c->l, c->n, r, xd, start, step, cnt) < 0)
        return fail(c, "its starts, ends, axes or steps are not known from shapes");
    for (int32_t d = 0; d < r; d++) {
        if (cnt[d] == 0) return fail(c, "the result is empty (Kiln runs no empty tensors)");
        if (step[d] < 0 || r > KILN_MAX_DIMS) return lower_gather(c);
    }
    for (int d = 0; d < KILN_MAX_DIMS; d++) {
        int32_t a = r - 1 - d; /* ONNX axis of Kiln dim d */
        ne[d] = a >= 0 ? cnt[a] : 1;
        nb[d] =
            a >= 0 && cnt[a] > 1 ? x->nb[d] * (size_t)step[a] : x->nb[d]; /* within the source: no overflow */
        if (a >= 0) off += x->nb[d] * (size_t)start[a];
    }
    return kiln__cont(c->g, kiln__view(c->g, x, x->n_dims, ne, nb, off));
}

/* Split: views along the axis, each copied. */
static kiln_tensor *lower_split(lower *c) {
    int64_t xd[KILN_MAX_ONNX_RANK], n = 0, sizes[127], at = 0;
    const int64_t *v = const_ints(c, 1, &n);
    const kiln__onnx_attr *ax = kiln__onnx_find_attr(c->n, "axis");
    int32_t r, k;
    kiln_tensor *x = operand(c, 0), *first = NULL;
    if (!x || (r = dims_in(c, x, 0, xd)) < 0 || r > KILN_MAX_DIMS)
        return x ? fail(c, "data of rank over 4") : NULL;
    int64_t a = ax ? ax->i : 0;
    if (a < 0) a += r;
    if (a < 0 || a >= r) return fail(c, "axis out of range");
    k = r - 1 - (int32_t)a;
    if (v) {
        if (n != c->n->n_outputs)
            return fail(c, "%lld split sizes for %d outputs", (long long)n, c->n->n_outputs);
        for (int64_t i = 0; i < n; i++)
            sizes[i] = v[i];
    } else if (c->n->n_inputs > 1 && c->n->inputs[1][0]) {
        return fail(c, "its split sizes are computed from tensor values");
    } else { /* equal parts, the last smaller (opset 18's num_outputs rule) */
        int64_t parts = c->n->n_outputs, each = (xd[a] + parts - 1) / parts;
        for (int64_t i = 0; i < parts; i++)
            sizes[i] = KILN__MIN(each, xd[a] - KILN__MIN(xd[a], each * i));
    }
    for (int32_t i = 0; i < c->n->n_outputs; i++) {
        int64_t ne[KILN_MAX_DIMS];
        memcpy(ne, x->ne, sizeof ne);
        ne[k] = sizes[i];
        if (sizes[i] <= 0 || at + sizes[i] > xd[a]) return fail(c, "split sizes do not fill the axis");
        kiln_tensor *y = kiln__cont(c->g, kiln__view(c->g, x, x->n_dims, ne, x->nb, x->nb[k] * (size_t)at));
        at += sizes[i];
        if (i == 0)
            first = y;
        else
            put_output(c, i, y);
    }
    if (at != xd[a]) return fail(c, "split sizes do not fill the axis");
    return first;
}

/* x with Kiln dims 3 and k swapped, contiguous (an involution). */
static kiln_tensor *swap_outer(kiln_graph *g, kiln_tensor *x, int k) {
    int32_t axes[KILN_MAX_DIMS] = {0, 1, 2, 3};
    if (k == 3) return x;
    axes[3] = k;
    axes[k] = 3;
    return kiln__cont(g, kiln__permute(g, x, axes[0], axes[1], axes[2], axes[3]));
}

/* Concat: the axis moved outermost, the operands appended as rows, moved back. */
static kiln_tensor *lower_concat(lower *c) {
    kiln_graph *g = c->g;
    const kiln__onnx_attr *ax = kiln__onnx_find_attr(c->n, "axis");
    int32_t r = rank_of(c, c->n->outputs[0]);
    int64_t a = ax ? ax->i : 0, rows = 0;
    kiln_tensor *acc = NULL, *ops[127];
    int64_t ne[KILN_MAX_DIMS];
    int k;
    if (r < 1 || r > KILN_MAX_DIMS) return fail(c, "rank %d (Kiln runs 1 to 4)", r);
    if (a < 0) a += r;
    if (a < 0 || a >= r) return fail(c, "axis out of range");
    k = r - 1 - (int)a;
    for (int32_t i = 0; i < c->n->n_inputs; i++) {
        kiln_tensor *x = operand(c, i);
        if (!x) return NULL;
        x = swap_outer(g, kiln__tensor_is_contiguous(x) ? x : kiln__cont(g, x), k);
        ops[i] = x ? kiln__reshape_2d(g, x, x->ne[0] * x->ne[1] * x->ne[2], x->ne[3]) : NULL;
        if (!ops[i]) return NULL;
        if (i == 0) memcpy(ne, x->ne, sizeof ne);
        rows += x->ne[3];
    }
    if (c->n->n_inputs == 1) return operand(c, 0);
    for (int32_t i = 0; i < c->n->n_inputs;) {
        kiln_tensor *b = ops[i++], *d = i < c->n->n_inputs ? ops[i++] : NULL;
        acc = acc ? kiln__concat(g, acc, b, d) : (d ? kiln__concat(g, b, d, NULL) : b);
        if (!acc) return NULL;
    }
    ne[3] = rows;
    return swap_outer(g, kiln__reshape(g, acc, KILN_MAX_DIMS, ne), k);
}

/* Expand above rank 4 where the dims merged into Kiln's dim 3 (all but the last three) are the same in x and
 * the result, so that the broadcast happens within the last three: transformers' repeat_kv ([B, Hkv, 1, S, D]
 * to [B, Hkv, n_rep, S, D]) becomes a 4-D broadcast instead of an element gather. NULL when it does not
 * apply. */
static kiln_tensor *expand_merged(lower *c, kiln_tensor *x, const int64_t *v, int64_t n) {
    int64_t in[KILN_MAX_ONNX_RANK], out[KILN_MAX_ONNX_RANK], full[KILN_MAX_DIMS] = {1, 1, 1, 1};
    int32_t r = dims_in(c, x, 0, in), ro = (int32_t)n;
    if (r < 0 || ro != r || r > KILN_MAX_ONNX_RANK || r < 4) return NULL;
    for (int32_t d = 0; d < r; d++) {
        if (in[d] != v[d] && in[d] != 1 && v[d] != 1) return NULL;
        out[d] = in[d] == 1 ? v[d] : in[d];
        if (d < r - 3 && out[d] != in[d]) return NULL; /* a merged dim would broadcast */
    }
    for (int32_t d = 0; d < r; d++) /* Kiln dims: the last three, then the rest merged */
        if (d >= r - 3)
            full[r - 1 - d] = out[d];
        else
            full[3] *= out[d];
    if (x->ne[0] != in[r - 1] || x->ne[1] != in[r - 2] || x->ne[2] != in[r - 3]) return NULL;
    return reshape_to(c, expand_to(c, x, full), r, out);
}

/* Expand: x broadcast to the shape (numpy's rule, both ways). */
static kiln_tensor *lower_expand(lower *c) {
    kiln_tensor *x = operand(c, 0);
    int64_t n = 0, ne[KILN_MAX_DIMS], full[KILN_MAX_DIMS], dims[KILN_MAX_DIMS];
    const int64_t *v = const_ints(c, 1, &n);
    int32_t r = rank_of(c, c->n->outputs[0]);
    if (!x) return NULL;
    if (!v) return fail(c, "its shape is computed from tensor values");
    if (n > KILN_MAX_DIMS || r > KILN_MAX_DIMS || rank_of(c, c->n->inputs[0]) > KILN_MAX_DIMS) {
        kiln_tensor *y = expand_merged(c, x, v, n);
        return y || c->status || kiln__graph_status(c->g) ? y : lower_gather(c);
    }
    ne_of((int32_t)n, v, ne);
    for (int d = 0; d < KILN_MAX_DIMS; d++) {
        if (ne[d] != x->ne[d] && ne[d] != 1 && x->ne[d] != 1) return fail(c, "the shape does not broadcast");
        full[d] = KILN__MAX(ne[d], x->ne[d]);
    }
    for (int32_t i = 0; i < r; i++)
        dims[i] = full[r - 1 - i];
    if (memcmp(full, x->ne, sizeof full) != 0) x = expand_to(c, x, full);
    return reshape_to(c, x, r, dims);
}

/* Where: the condition (held as 0 or 1) expanded to the result's shape, x and y broadcast to it. */
static kiln_tensor *lower_where(lower *c) {
    kiln_tensor *cond = operand(c, 0), *x = operand(c, 1), *y = operand(c, 2);
    int64_t full[KILN_MAX_DIMS];
    if (!cond || !x || !y) return NULL;
    for (int d = 0; d < KILN_MAX_DIMS; d++) {
        full[d] = KILN__MAX(cond->ne[d], KILN__MAX(x->ne[d], y->ne[d]));
        if ((cond->ne[d] != full[d] && cond->ne[d] != 1) || (x->ne[d] != full[d] && x->ne[d] != 1) ||
            (y->ne[d] != full[d] && y->ne[d] != 1))
            return fail(c, "operands that do not broadcast");
    }
    if (memcmp(full, cond->ne, sizeof full) != 0) cond = expand_to(c, cond, full);
    return kiln__where(c->g, cond, x, y);
}

/* And, Or, Xor and Not on booleans held as 0 or 1. */
static kiln_tensor *lower_logic(lower *c) {
    const char *op = c->n->op_type;
    kiln_tensor *a = operand(c, 0), *b = strcmp(op, "Not") ? operand(c, 1) : NULL;
    if (!a || (!b && strcmp(op, "Not"))) return NULL;
    if (!strcmp(op, "Not")) return kiln__unary(c->g, a, KILN_UNARY_NOT);
    if (!strcmp(op, "And")) return broadcast(c, KILN_OP_MUL, a, b);
    kiln_tensor *t = broadcast(c, !strcmp(op, "Or") ? KILN_OP_ADD : KILN_OP_SUB, a, b);
    return kiln__unary(c->g, kiln__unary(c->g, t, KILN_UNARY_NOT), KILN_UNARY_NOT);
}

typedef kiln_tensor *(*lower_fn)(lower *c);

static const struct {
    const char *op;
    lower_fn fn;
} lowerings[] = {
    {"Add", lower_binary},
    {"Sub", lower_binary},
    {"Mul", lower_binary},
    {"Div", lower_binary},
    {"Relu", lower_unary},
    {"Tanh", lower_unary},
    {"Sigmoid", lower_unary},
    {"Erf", lower_unary},
    {"Sqrt", lower_unary},
    {"Exp", lower_unary},
    {"Log", lower_unary},
    {"Neg", lower_unary},
    {"Reciprocal", lower_unary},
    {"Gelu", lower_unary},
    {"Identity", lower_reshape},
    {"Cast", lower_unary},
    {"MatMul", lower_matmul},
    {"Gemm", lower_gemm},
    {"Softmax", lower_softmax},
    {"LayerNormalization", lower_layer_norm},
    {"Transpose", lower_transpose},
    {"Reshape", lower_reshape},
    {"Flatten", lower_reshape},
    {"Squeeze", lower_reshape},
    {"Unsqueeze", lower_reshape},
    {"ReduceMean", lower_reduce},
    {"ReduceSum", lower_reduce},
    {"Pow", lower_pow},
    {"Gather", lower_gather},
    {"GatherElements", lower_gather},
    {"GatherND", lower_gather},
    {"Slice", lower_slice},
    {"Split", lower_split},
    {"Concat", lower_concat},
    {"Expand", lower_expand},
    {"Where", lower_where},
    {"And", lower_logic},
    {"Or", lower_logic},
    {"Xor", lower_logic},
    {"Not", lower_logic},
    {"MatMulInteger", lower_matmul_integer},
    {"QLinearMatMul", lower_qlinear_matmul},
    {"QuantizeLinear", lower_quant},
    {"DequantizeLinear", lower_quant},
    {"DynamicQuantizeLinear", lower_dynamic_quantize},
    {"ReduceMax", lower_reduce},
};

/* ---- The builder ---- */

static kiln_status lower_node(lower *c, const kiln__onnx_node *n) {
    const kiln__onnx_value *out0 = kiln__onnx_value_find(c->m, n->outputs[0]);
    lower_fn fn = NULL;
    kiln_tensor *y;
    c->n = n;
    if (out0 && out0->init) return KILN_OK; /* a Constant, or computed at load (shape arithmetic) */
    if (kiln__onnx_host_node(c->l, n)) return kiln__onnx_host_eval(c->l, n);
    for (size_t i = 0; i < sizeof lowerings / sizeof lowerings[0] && !fn; i++)
        if (!strcmp(n->op_type, lowerings[i].op)) fn = lowerings[i].fn;
    if (!fn) return fail(c, "Kiln reads this operator but does not run it yet"), c->status;
    if (rank_of(c, n->outputs[0]) > KILN_MAX_DIMS && fn != lower_reshape && fn != lower_gather &&
        fn != lower_slice && fn != lower_expand && fn != lower_transpose && fn != lower_quant)
        return fail(c, "the result has rank %d (Kiln runs up to 4)", rank_of(c, n->outputs[0])), c->status;
    c->out_rank = 0;
    y = fn(c);
    if (c->status) return c->status;
    if (!y || kiln__graph_status(c->g)) {
        kiln_status s = kiln__graph_status(c->g);
        return kiln__error_prefix(s ? s : KILN_E_INTERNAL,
                                  "node %d '%s' (%s, opset %lld): ", (int)(n - c->m->nodes), n->name,
                                  n->op_type, (long long)c->m->opset);
    }
    if (y->name[0] == '\0' || y->op != KILN_OP_NONE) kiln__tensor_set_name(y, "%s", n->outputs[0]);
    c->l->vals[value_index(c->m, n->outputs[0])] = y;
    if (c->out_rank > KILN_MAX_DIMS && rank_of(c, n->outputs[0]) == c->out_rank) {
        struct kiln__onnx_big *b = &c->l->big[value_index(c->m, n->outputs[0])];
        b->rank = c->out_rank;
        memcpy(b->dims, c->out_dims, (size_t)c->out_rank * sizeof *b->dims);
    }
    return KILN_OK;
}

static kiln_status declare_inputs(lower *c, const int64_t *key) {
    const kiln_onnx *m = c->m;
    for (int32_t i = 0; i < m->n_feed; i++) {
        const char *name = m->inputs[m->feed[i]].name;
        int32_t k = value_index(m, name);
        const kiln__onnx_vinfo *info = &m->values[k].info;
        int64_t dims[KILN_MAX_DIMS], ne[KILN_MAX_DIMS];
        for (int32_t j = 0; j < info->rank; j++) {
            int8_t sym = c->l->axis_sym[i][j];
            dims[j] = sym >= 0 ? key[sym] : info->dims[j].value;
        }
        ne_of(info->rank, dims, ne);
        c->l->vals[k] = kiln__graph_leaf(c->g, name, c->l->feed_type[i], KILN__MAX(1, info->rank), ne, NULL,
                                         KILN_TENSOR_INPUT);
    }
    return kiln__graph_status(c->g);
}

kiln_status kiln__onnx_lower(kiln__onnx_lowering *l, kiln_graph *g, const int64_t *key) {
    lower c = {l, l->m, g, NULL, KILN_OK, false, 0, {0}};
    const kiln_onnx *m = l->m;
    kiln_status s;
    memset(l->vals, 0, (size_t)m->n_values * sizeof *l->vals);
    memset(l->big, 0, (size_t)m->n_values * sizeof *l->big);
    kiln__onnx_host_reset(l);
    if ((s = declare_inputs(&c, key))) return s;
    for (int32_t i = 0; i < m->n_nodes; i++)
        if ((s = lower_node(&c, &m->nodes[m->order[i]]))) return s;
    for (int32_t i = 0; i < m->n_outputs; i++) {
        int32_t k = value_index(m, m->outputs[i].name);
        kiln_tensor *t = k >= 0 ? l->vals[k] : NULL;
        if (!t && k >= 0) { /* an output known without running: a constant or a host value */
            const kiln__onnx_host *h = kiln__onnx_host_of(l, m->outputs[i].name);
            c.n = NULL;
            t = h ? host_leaf(&c, h, m->outputs[i].name) : NULL;
            if (c.status) return c.status;
        }
        if (!t) return kiln__error(KILN_E_INTERNAL, "output '%s' was not computed", m->outputs[i].name);
        /* Outputs are dense nodes of their own: the caller reads them after the run. */
        if (t->op == KILN_OP_NONE || kiln__op_is_view(t->op)) t = kiln__cont(g, t);
        kiln__graph_set_output(g, t);
    }
    return kiln__graph_status(g);
}

int32_t kiln__onnx_lower_capacity(const kiln__onnx_lowering *l) {
    int64_t n = 32 * (int64_t)l->m->n_nodes + l->m->n_values + 256;
    return n > INT32_MAX ? INT32_MAX : (int32_t)n;
}

/* The key entry named sym, added when new. */
static kiln_status add_sym(kiln__onnx_lowering *l, const char *sym, int8_t *out) {
    for (int32_t i = 0; i < l->n_syms; i++)
        if (!strcmp(l->sym_names[i], sym)) return *out = (int8_t)i, KILN_OK;
    if (l->n_syms == KILN_ONNX_MAX_SYMS)
        return kiln__error(KILN_E_UNSUPPORTED, "the inputs have more than %d dynamic dims (at '%s')",
                           KILN_ONNX_MAX_SYMS, sym);
    l->sym_names[l->n_syms] = sym;
    *out = (int8_t)l->n_syms++;
    return KILN_OK;
}

bool kiln__onnx_fed_type(int32_t t) {
    return t == KILN_ONNX_FLOAT || t == KILN_ONNX_INT64 || t == KILN_ONNX_INT32 || t == KILN_ONNX_UINT8 ||
           t == KILN_ONNX_INT8 || t == KILN_ONNX_BOOL;
}

/* The constant table behind a Gather's data: an initializer (float, uint8, int8; rank >= 1), or one
 * dequantized by DequantizeLinear (quantize_static's embeddings); NULL otherwise. */
static const kiln__onnx_tensor *table_of(const kiln_onnx *m, const char *name) {
    const kiln__onnx_value *v = kiln__onnx_value_find(m, name);
    if (v && !v->init && v->producer >= 0 && !strcmp(m->nodes[v->producer].op_type, "DequantizeLinear"))
        v = kiln__onnx_value_find(m, m->nodes[v->producer].inputs[0]);
    if (!v || !v->init || v->init->rank < 1 ||
        (v->init->type != KILN_ONNX_FLOAT && v->init->type != KILN_ONNX_UINT8 &&
         v->init->type != KILN_ONNX_INT8))
        return NULL;
    return v->init;
}

/* Is the value `name` read only as the ids of Gathers (axis 0) from constant tables, directly or through
 * Reshape, Flatten, Squeeze, Unsqueeze and Identity, or by Shape? rows: the fewest rows of those tables.
 * Such a fed integer input is held as I32 ids; any other is held as exact floats. */
static bool indexes_only(const kiln_onnx *m, const char *name, int64_t *rows, int depth) {
    bool used = false;
    if (depth > 16) return false;
    for (int32_t i = 0; i < m->n_nodes; i++) {
        const kiln__onnx_node *n = &m->nodes[i];
        for (int32_t j = 0; j < n->n_inputs; j++) {
            if (strcmp(n->inputs[j], name) != 0) continue;
            const char *op = n->op_type;
            if (!strcmp(op, "Shape")) continue;
            if ((!strcmp(op, "Reshape") || !strcmp(op, "Flatten") || !strcmp(op, "Squeeze") ||
                 !strcmp(op, "Unsqueeze") || !strcmp(op, "Identity")) &&
                j == 0) {
                if (!indexes_only(m, n->outputs[0], rows, depth + 1)) return false;
                used = true;
                continue;
            }
            const kiln__onnx_attr *ax = kiln__onnx_find_attr(n, "axis");
            const kiln__onnx_tensor *t = table_of(m, n->inputs[0]);
            if (strcmp(op, "Gather") != 0 || j != 1 || (ax && ax->i != 0) || !t) return false;
            if (t->dims[0] < *rows) *rows = t->dims[0];
            used = true;
        }
    }
    return used;
}

static kiln_status check_input(kiln__onnx_lowering *l, int32_t i) {
    const kiln_onnx *m = l->m;
    const char *name = m->inputs[m->feed[i]].name;
    const kiln__onnx_vinfo *info = &kiln__onnx_value_find(m, name)->info;
    kiln_status s;
    if (strlen(name) >= KILN_MAX_NAME)
        return kiln__error(KILN_E_UNSUPPORTED, "input '%.40s...': names over %d bytes are not run", name,
                           KILN_MAX_NAME - 1);
    if (!kiln__onnx_fed_type(info->type))
        return kiln__error(KILN_E_UNSUPPORTED,
                           "input '%s' is %s: Kiln runs float, int64, int32, uint8, int8 and bool inputs",
                           name, kiln__onnx_type_name(info->type));
    if (info->rank < 0 || info->rank > KILN_MAX_DIMS)
        return kiln__error(KILN_E_UNSUPPORTED, "input '%s' has rank %d: Kiln runs ranks 0 to 4", name,
                           info->rank);
    for (int32_t j = 0; j < info->rank; j++) {
        l->axis_sym[i][j] = -1;
        if (info->dims[j].value == 0)
            return kiln__error(KILN_E_UNSUPPORTED, "input '%s': dim %d is 0 (Kiln runs no empty tensors)",
                               name, j);
        if (info->dims[j].value > 0) continue;
        const char *sym = info->dims[j].param;
        if (!sym && l->n_syms < KILN_ONNX_MAX_SYMS) { /* an unnamed dim: a key entry of its own */
            snprintf(l->sym_store[l->n_syms], KILN_MAX_NAME, "%.40s:%d", name, j);
            sym = l->sym_store[l->n_syms];
        }
        if (!sym) sym = name;
        if ((s = add_sym(l, sym, &l->axis_sym[i][j]))) return s;
    }
    return KILN_OK;
}

kiln_status kiln__onnx_lower_init(kiln__onnx_lowering *l, const kiln_onnx *m) {
    kiln_status s;
    memset(l, 0, sizeof *l);
    l->m = m;
    l->axis_sym = kiln__calloc((size_t)KILN__MAX(1, m->n_feed), sizeof *l->axis_sym);
    l->vals = kiln__calloc((size_t)KILN__MAX(1, m->n_values), sizeof *l->vals);
    l->sym_store = kiln__calloc(KILN_ONNX_MAX_SYMS, sizeof *l->sym_store);
    l->host = kiln__calloc((size_t)KILN__MAX(1, m->n_values), sizeof *l->host);
    l->big = kiln__calloc((size_t)KILN__MAX(1, m->n_values), sizeof *l->big);
    l->feed_type = kiln__calloc((size_t)KILN__MAX(1, m->n_feed), sizeof *l->feed_type);
    l->q8 = kiln__calloc((size_t)KILN__MAX(1, m->n_values), sizeof *l->q8);
    l->q8_rows = kiln__calloc((size_t)KILN__MAX(1, m->n_values), sizeof *l->q8_rows);
    l->feed_rows = kiln__calloc((size_t)KILN__MAX(1, m->n_feed), sizeof *l->feed_rows);
    if (!l->axis_sym || !l->vals || !l->sym_store || !l->host || !l->big || !l->q8 || !l->q8_rows ||
        !l->feed_type || !l->feed_rows)
        return kiln__nomem("an ONNX lowering's tables");
    for (int32_t i = 0; i < m->n_feed; i++)
        if ((s = check_input(l, i))) return s;
    for (int32_t i = 0; i < m->n_outputs; i++) {
        const kiln__onnx_value *v = kiln__onnx_value_find(m, m->outputs[i].name);
        if (!kiln__onnx_fed_type(v->info.type))
            return kiln__error(
                KILN_E_UNSUPPORTED,
                "output '%s' is %s: Kiln runs float, int64, int32, uint8, int8 and bool outputs",
                m->outputs[i].name, kiln__onnx_type_name(v->info.type));
    }
    for (int32_t i = 0; i < m->n_feed; i++) {
        const kiln__onnx_value *v = kiln__onnx_value_find(m, m->inputs[m->feed[i]].name);
        int64_t rows = INT64_MAX;
        l->feed_type[i] = KILN_TYPE_F32;
        if (v->info.type != KILN_ONNX_FLOAT && indexes_only(m, v->info.name, &rows, 0)) {
            l->feed_type[i] = KILN_TYPE_I32;
            l->feed_rows[i] = rows;
        }
    }
    return KILN_OK;
}

void kiln__onnx_lower_free(kiln__onnx_lowering *l) {
    if (!l) return;
    for (int32_t i = 0; i < l->n_consts; i++)
        kiln__dealloc(l->consts[i].data);
    kiln__dealloc(l->axis_sym);
    kiln__dealloc(l->vals);
    kiln__dealloc(l->sym_store);
    if (l->host) kiln__onnx_host_reset(l);
    kiln__dealloc(l->host);
    kiln__dealloc(l->big);
    for (int32_t i = 0; i < l->n_leaves; i++)
        kiln__dealloc(l->leaves[i].data);
    kiln__dealloc(l->leaves);
    for (int32_t i = 0; l->q8 && l->q8_rows && i < l->m->n_values; i++) {
        kiln__dealloc(l->q8[i]);
        kiln__dealloc(l->q8_rows[i]);
    }
    kiln__dealloc(l->q8);
    kiln__dealloc(l->q8_rows);
    kiln__dealloc(l->feed_type);
    kiln__dealloc(l->feed_rows);
    memset(l, 0, sizeof *l);
}
