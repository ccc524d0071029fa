/*
 * ops.c - op constructors of the graph IR and the shape/type rules each op enforces.
 *
 * One function, infer(), states every op's rule: it checks the sources and parameters of a node and
 * computes the shape and type the op produces. Constructors call it before adding a node (a bad shape is
 * a builder error with a message naming the op, the tensors and their shapes); kiln__op_check() calls it
 * again on an existing node, which is how validation after a rewrite is done.
 */
#include "graph/graph_internal.h"

#include "core/core.h"
#include "tensor/types.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const op_names[KILN_OP_COUNT] = {
    [KILN_OP_NONE] = "leaf",         [KILN_OP_GET_ROWS] = "get_rows", [KILN_OP_RMS_NORM] = "rms_norm",
    [KILN_OP_ADD] = "add",           [KILN_OP_MUL] = "mul",           [KILN_OP_MATMUL] = "matmul",
    [KILN_OP_ROPE] = "rope",         [KILN_OP_ATTENTION] = "attention", [KILN_OP_SILU] = "silu",
    [KILN_OP_SOFTMAX] = "softmax",   [KILN_OP_RESHAPE] = "reshape",   [KILN_OP_VIEW] = "view",
    [KILN_OP_PERMUTE] = "permute",   [KILN_OP_TRANSPOSE] = "transpose", [KILN_OP_CONT] = "cont",
    [KILN_OP_CACHE_WRITE] = "cache_write", [KILN_OP_SCALE] = "scale",   [KILN_OP_TANH] = "tanh",
    [KILN_OP_RELU] = "relu",         [KILN_OP_CONCAT] = "concat",
    [KILN_OP_LINEAR] = "linear",     [KILN_OP_ADD_ACT] = "add_act",   [KILN_OP_RMS_NORM_MUL] = "rms_norm_mul",
    [KILN_OP_SWIGLU] = "swiglu",     [KILN_OP_GELU] = "gelu",         [KILN_OP_SET] = "set",           [KILN_OP_CAST] = "cast",
    [KILN_OP_ACC] = "acc",           [KILN_OP_NORM] = "norm",
    [KILN_OP_SUB] = "sub",           [KILN_OP_DIV] = "div",           [KILN_OP_UNARY] = "unary",          [KILN_OP_WHERE] = "where", [KILN_OP_REDUCE_MAX] = "reduce_max",
};

const char *kiln__op_name(kiln_op op) {
    return (unsigned)op < KILN_OP_COUNT && op_names[op] ? op_names[op] : "unknown";
}

bool kiln__op_is_view(kiln_op op) {
    return op == KILN_OP_RESHAPE || op == KILN_OP_VIEW || op == KILN_OP_PERMUTE || op == KILN_OP_TRANSPOSE ||
           op == KILN_OP_CACHE_WRITE;
}

/* "[64, 8, 5] f32 'name'" for messages. */
static const char *describe(const kiln_tensor *t, char *buf, size_t cap) {
    snprintf(buf, cap, "'%s' [%lld, %lld, %lld, %lld] %s", t->name, (long long)t->ne[0], (long long)t->ne[1],
             (long long)t->ne[2], (long long)t->ne[3], kiln__type_name(t->type));
    return buf;
}

typedef struct shape {
    kiln_type type;
    int32_t n_dims;
    int64_t ne[KILN_MAX_DIMS];
} shape;

static void shape_of(const kiln_tensor *t, shape *out) {
    out->type = t->type;
    out->n_dims = t->n_dims;
    memcpy(out->ne, t->ne, sizeof out->ne);
}

static kiln_status bad(const kiln_tensor *t, const char *why, const kiln_tensor *a, const kiln_tensor *b) {
    char da[160], db[160];
    return kiln__error(KILN_E_INVALID_ARG, "%s: %s%s%s%s", kiln__op_name(t->op), why, a ? ": " : "",
                       a ? describe(a, da, sizeof da) : "", b ? describe(b, db, sizeof db) : "");
}

static kiln_status need_f32(const kiln_tensor *t, const kiln_tensor *x) {
    return x->type == KILN_TYPE_F32 ? KILN_OK : bad(t, "operand must be f32", x, NULL);
}

static kiln_status need_weight_type(const kiln_tensor *t, const kiln_tensor *w) {
    if (!kiln__type_traits(w->type)->supported) return bad(t, "weight type not supported", w, NULL);
    if (w->nb[0] != kiln__type_traits(w->type)->block_bytes) return bad(t, "weight rows must be contiguous", w, NULL);
    return KILN_OK;
}

static bool reshape_strides(const kiln_tensor *x, const int64_t ne[KILN_MAX_DIMS], size_t nb[KILN_MAX_DIMS]);

static kiln_status infer_view(const kiln_tensor *t, shape *out) {
    const kiln_tensor *x = t->src[0];
    const kiln_tensor *base = t->view_src;
    const size_t unit = kiln__type_traits(t->type)->block_bytes;
    size_t end;
    if (!base || (base->op != KILN_OP_NONE && kiln__op_is_view(base->op)))
        return bad(t, "view has no base tensor", x, NULL);
    if (t->type != x->type) return bad(t, "view changes the type", x, NULL);
    /* Kernels address elements (or quant blocks) through these strides: a byte stride or offset that
     * splits an element would make them read across element boundaries (misaligned, meaningless values). */
    if (t->view_offset % unit) return bad(t, "view offset is not a whole number of elements", t, base);
    for (int d = 0; d < KILN_MAX_DIMS; d++)
        if (t->ne[d] > 1 && t->nb[d] % unit) return bad(t, "view strides must be whole elements", t, NULL);
    if (kiln__add_overflow_size(t->view_offset, kiln__tensor_span(t), &end) ||
        end > kiln__tensor_nbytes(base))
        return bad(t, "view reaches outside its base", t, base);
    if (t->op == KILN_OP_RESHAPE) {
        size_t nb[KILN_MAX_DIMS];
        if (kiln__tensor_nelements(x) != kiln__tensor_nelements(t) || !reshape_strides(x, t->ne, nb) ||
            memcmp(nb, t->nb, sizeof nb) != 0)
            return bad(t, "reshape needs a source whose layout allows the new shape", x, t);
    }
    if (t->op == KILN_OP_PERMUTE || t->op == KILN_OP_TRANSPOSE)
        for (int d = 0; d < KILN_MAX_DIMS; d++)
            if (t->ip[d] < 0 || t->ip[d] > 3 || t->ne[t->ip[d]] != x->ne[d] || t->nb[t->ip[d]] != x->nb[d])
                return bad(t, "permuted shape does not match the source", x, t);
    shape_of(t, out);
    return KILN_OK;
}

static kiln_status infer_binary(const kiln_tensor *t, shape *out) {
    const kiln_tensor *a = t->src[0], *b = t->src[1];
    kiln_status s = need_f32(t, a);
    if (!s) s = need_f32(t, b);
    if (s) return s;
    for (int d = 0; d < KILN_MAX_DIMS; d++)
        if (a->ne[d] % b->ne[d] != 0) return bad(t, "second operand does not broadcast to the first", a, b);
    shape_of(a, out);
    return KILN_OK;
}

static kiln_status infer_matmul(const kiln_tensor *t, shape *out) {
    const kiln_tensor *w = t->src[0], *x = t->src[1];
    kiln_status s = need_weight_type(t, w);
    if (!s) s = need_f32(t, x);
    if (s) return s;
    if (x->nb[0] != sizeof(float)) return bad(t, "activation rows must be contiguous", x, NULL);
    if (w->ne[0] != x->ne[0]) return bad(t, "inner dimensions differ", w, x);
    if (x->ne[2] % w->ne[2] != 0 || x->ne[3] % w->ne[3] != 0)
        return bad(t, "weight batch dims do not broadcast", w, x);
    out->type = KILN_TYPE_F32;
    out->n_dims = KILN__MAX(2, x->n_dims);
    out->ne[0] = w->ne[1];
    out->ne[1] = x->ne[1];
    out->ne[2] = x->ne[2];
    out->ne[3] = x->ne[3];
    return KILN_OK;
}

static kiln_status infer_rope(const kiln_tensor *t, shape *out) {
    const kiln_tensor *x = t->src[0], *pos = t->src[1];
    kiln_status s = need_f32(t, x);
    if (s) return s;
    if (pos->type != KILN_TYPE_I32 || pos->ne[0] != x->ne[2] || kiln__tensor_nelements(pos) != pos->ne[0])
        return bad(t, "positions must be i32 [T] matching x [D, H, T]", x, pos);
    if (x->ne[3] != 1) return bad(t, "x must be [D, H, T]", x, NULL);
    if (t->ip[0] <= 0 || t->ip[0] > x->ne[0] || t->ip[0] % 2 != 0)
        return bad(t, "n_rot must be even and in (0, D]", x, NULL);
    if (t->ip[1] != KILN_ROPE_NORMAL && t->ip[1] != KILN_ROPE_NEOX) return bad(t, "unknown rope mode", x, NULL);
    if (!(t->fp[0] > 0.0f) || !isfinite(t->fp[0]) || !(t->fp[1] > 0.0f) || !isfinite(t->fp[1]))
        return bad(t, "frequency base and scale must be positive", x, NULL);
    if (t->src[2] && (t->src[2]->type != KILN_TYPE_F32 || !kiln__tensor_is_contiguous(t->src[2]) ||
                      kiln__tensor_nelements(t->src[2]) != t->ip[0] / 2))
        return bad(t, "frequency factors must be f32 [n_rot / 2], contiguous", t->src[2], NULL);
    shape_of(x, out);
    return KILN_OK;
}

bool kiln__is_kv_cache_type(kiln_type type) {
    return type == KILN_TYPE_F32 || type == KILN_TYPE_F16 || type == KILN_TYPE_Q8_0;
}

/* The attention mask: F32 [C, T] contiguous, C keys by T queries. */
static kiln_status check_mask(const kiln_tensor *t, int64_t C) {
    const kiln_tensor *q = t->src[0], *mask = t->src[3];
    if (!mask) return bad(t, "missing mask", q, NULL);
    if (mask->type != KILN_TYPE_F32 || mask->ne[0] != C || mask->ne[1] != q->ne[2] || mask->ne[2] != 1 ||
        mask->ne[3] != 1 || !kiln__tensor_is_contiguous(mask))
        return bad(t, "mask must be f32 [C, T], contiguous, for C keys and T queries", mask, q);
    return KILN_OK;
}

/* Attention over F16/Q8_0 cache rows: k and v are [Hkv * D, C], read in place. */
static kiln_status infer_attention_rows(const kiln_tensor *t, shape *out) {
    const kiln_tensor *q = t->src[0], *k = t->src[1], *v = t->src[2];
    if (!kiln__is_kv_cache_type(k->type) || v->type != k->type) return bad(t, "K and V must be f16 or q8_0 rows", k, v);
    if (memcmp(k->ne, v->ne, sizeof k->ne) || k->ne[2] != 1 || k->ne[3] != 1 || q->ne[3] != 1)
        return bad(t, "K and V must be [Hkv * D, C] cache rows of one shape", k, v);
    if (k->ne[0] % q->ne[0] != 0 || q->ne[1] % (k->ne[0] / q->ne[0]) != 0)
        return bad(t, "cache rows do not hold a whole number of KV heads dividing the query heads", q, k);
    if (k->nb[0] != kiln__type_traits(k->type)->block_bytes || v->nb[0] != k->nb[0] || q->nb[0] != sizeof(float))
        return bad(t, "rows must be contiguous", q, k);
    kiln_status s = check_mask(t, k->ne[1]);
    if (s) return s;
    shape_of(q, out);
    return KILN_OK;
}

static kiln_status infer_attention(const kiln_tensor *t, shape *out) {
    const kiln_tensor *q = t->src[0], *k = t->src[1], *v = t->src[2];
    kiln_status s = need_f32(t, q);
    if (!s && k->type != KILN_TYPE_F32) return infer_attention_rows(t, out);
    if (!s) s = need_f32(t, k);
    if (!s) s = need_f32(t, v);
    if (s) return s;
    if (q->ne[3] != 1 || k->ne[3] != 1 || v->ne[3] != 1) return bad(t, "operands must be 3-D", q, k);
    if (k->ne[0] != q->ne[0] || v->ne[0] != q->ne[0]) return bad(t, "head sizes differ", q, k);
    if (k->ne[1] != v->ne[1] || k->ne[2] != v->ne[2]) return bad(t, "K and V shapes differ", k, v);
    if (q->ne[1] % k->ne[1] != 0) return bad(t, "query heads are not a multiple of KV heads", q, k);
    if (q->nb[0] != sizeof(float) || k->nb[0] != sizeof(float) || v->nb[0] != sizeof(float))
        return bad(t, "head vectors must be contiguous", q, k);
    if ((s = check_mask(t, k->ne[2]))) return s;
    shape_of(q, out);
    return KILN_OK;
}

static kiln_status infer_cache_write(const kiln_tensor *t, shape *out) {
    const kiln_tensor *x = t->src[0], *cache = t->src[1], *idx = t->src[2];
    kiln_status s = need_f32(t, x);
    if (s) return s;
    if (cache->op != KILN_OP_NONE || !(cache->flags & KILN_TENSOR_CACHE) || !kiln__is_kv_cache_type(cache->type) ||
        cache->n_dims != 2 || !kiln__tensor_is_contiguous(cache))
        return bad(t, "destination must be a 2-D f32, f16 or q8_0 cache leaf", cache, NULL);
    if (x->nb[0] != sizeof(float)) return bad(t, "rows must be contiguous", x, NULL);
    if (x->ne[0] != cache->ne[0] || x->ne[2] != 1 || x->ne[3] != 1) return bad(t, "row widths differ", x, cache);
    if (!idx || idx->type != KILN_TYPE_I32 || idx->ne[0] != x->ne[1] || kiln__tensor_nelements(idx) != idx->ne[0] ||
        idx->nb[0] != sizeof(int32_t))
        return bad(t, "cell indices must be i32 [T], contiguous, one per row of x [W, T]", idx ? idx : x, x);
    shape_of(cache, out);
    return KILN_OK;
}

static kiln_status infer_linear(const kiln_tensor *t, shape *out) {
    const kiln_tensor *w = t->src[0], *x = t->src[1], *bias = t->src[2];
    bool trans = (t->ip[1] & KILN_LINEAR_TRANS0) != 0;
    kiln_status s = need_f32(t, x);
    if (s) return s;
    if (trans ? (w->type != KILN_TYPE_F32 || w->nb[0] != sizeof(float)) : (s = need_weight_type(t, w)) != KILN_OK)
        return s ? s : bad(t, "a transposed operand must be f32 with contiguous rows", w, NULL);
    if (x->nb[0] != sizeof(float)) return bad(t, "activation rows must be contiguous", x, NULL);
    if ((trans ? w->ne[1] : w->ne[0]) != x->ne[0]) return bad(t, "inner dimensions differ", w, x);
    if (x->ne[2] % w->ne[2] != 0 || x->ne[3] % w->ne[3] != 0)
        return bad(t, "weight batch dims do not broadcast", w, x);
    if (t->ip[0] < KILN_ACT_NONE || t->ip[0] > KILN_ACT_SILU) return bad(t, "unknown activation", x, NULL);
    out->type = KILN_TYPE_F32;
    out->n_dims = KILN__MAX(2, x->n_dims);
    out->ne[0] = trans ? w->ne[0] : w->ne[1];
    out->ne[1] = x->ne[1];
    out->ne[2] = x->ne[2];
    out->ne[3] = x->ne[3];
    if (bias && (bias->type != KILN_TYPE_F32 || bias->ne[0] != out->ne[0] ||
                 kiln__tensor_nelements(bias) != bias->ne[0] || bias->nb[0] != sizeof(float)))
        return bad(t, "bias must be f32 [N]", bias, NULL);
    return KILN_OK;
}

static kiln_status infer_concat(const kiln_tensor *t, shape *out) {
    const kiln_tensor *a = t->src[0];
    int64_t rows = 0;
    if (!t->src[1]) return bad(t, "needs at least two operands", a, NULL);
    for (int i = 0; i < KILN_MAX_SRC && t->src[i]; i++) {
        const kiln_tensor *b = t->src[i];
        if (a->type != b->type) return bad(t, "operands differ in type", a, b);
        if (a->ne[0] != b->ne[0] || b->ne[2] != 1 || b->ne[3] != 1)
            return bad(t, "operands must be 2-D with equal rows", a, b);
        if (!kiln__tensor_is_contiguous(b)) return bad(t, "operands must be contiguous", b, NULL);
        rows += b->ne[1];
    }
    *out = (shape){a->type, 2, {a->ne[0], rows, 1, 1}};
    return KILN_OK;
}

/* The region of set/acc: src1's shape with strides (4, i[0], i[1], i[2]) at byte `offset` of src0. */
static kiln_status infer_set(const kiln_tensor *t, shape *out) {
    const kiln_tensor *d = t->src[0], *x = t->src[1];
    kiln_status s = need_f32(t, d);
    size_t extent = sizeof(float) * (size_t)x->ne[0], end;
    if (!s) s = need_f32(t, x);
    if (s) return s;
    if (!kiln__tensor_is_contiguous(d)) return bad(t, "destination must be contiguous", d, NULL);
    if (x->nb[0] != sizeof(float)) return bad(t, "source rows must be contiguous", x, NULL);
    for (int k = 0; k < 3; k++) {
        if (t->ip[k] < 0) return bad(t, "negative region stride", x, NULL);
        if (x->ne[k + 1] > 1 && t->ip[k] % (int32_t)sizeof(float))
            return bad(t, "region strides must be whole elements", x, NULL);
        extent += (size_t)(x->ne[k + 1] - 1) * (size_t)t->ip[k];
    }
    if (t->offset % sizeof(float) || kiln__add_overflow_size(t->offset, extent, &end) || end > kiln__tensor_nbytes(d))
        return bad(t, "region reaches outside the destination", x, d);
    shape_of(d, out);
    return KILN_OK;
}

static kiln_status infer(const kiln_tensor *t, shape *out) {
    const kiln_tensor *x = t->src[0];
    kiln_status s;
    switch (t->op) {
    case KILN_OP_GET_ROWS:
        if ((s = need_weight_type(t, x))) return s;
        if (x->ne[2] != 1 || x->ne[3] != 1) return bad(t, "table must be 2-D", x, NULL);
        if (t->src[1]->type != KILN_TYPE_I32 || kiln__tensor_nelements(t->src[1]) != t->src[1]->ne[0])
            return bad(t, "ids must be i32 [T]", t->src[1], NULL);
        *out = (shape){KILN_TYPE_F32, 2, {x->ne[0], t->src[1]->ne[0], 1, 1}};
        return KILN_OK;
    case KILN_OP_RMS_NORM:
    case KILN_OP_NORM:
        if (!(t->fp[0] >= 0.0f) || !isfinite(t->fp[0])) return bad(t, "eps must be finite and >= 0", x, NULL);
        /* fall through */
    case KILN_OP_SILU:
    case KILN_OP_SOFTMAX:
    case KILN_OP_SCALE:
    case KILN_OP_TANH:
    case KILN_OP_RELU:
    case KILN_OP_GELU:
    case KILN_OP_CONT:
        if ((s = need_f32(t, x))) return s;
        if (t->op != KILN_OP_CONT && x->nb[0] != sizeof(float)) return bad(t, "rows must be contiguous", x, NULL);
        shape_of(x, out);
        return KILN_OK;
    case KILN_OP_ADD_ACT:
        if (t->ip[0] < KILN_ACT_NONE || t->ip[0] > KILN_ACT_SILU) return bad(t, "unknown activation", x, NULL);
        /* fall through */
    case KILN_OP_ADD:
    case KILN_OP_MUL: return infer_binary(t, out);
    case KILN_OP_RMS_NORM_MUL:
        if (!(t->fp[0] >= 0.0f) || !isfinite(t->fp[0])) return bad(t, "eps must be finite and >= 0", x, NULL);
        if (x->nb[0] != sizeof(float)) return bad(t, "rows must be contiguous", x, NULL);
        return infer_binary(t, out);
    case KILN_OP_SWIGLU:
        if ((s = infer_binary(t, out))) return s;
        if (memcmp(x->ne, t->src[1]->ne, sizeof x->ne) != 0) return bad(t, "gate and up shapes differ", x, t->src[1]);
        return KILN_OK;
    case KILN_OP_LINEAR: return infer_linear(t, out);
    case KILN_OP_CONCAT: return infer_concat(t, out);
    case KILN_OP_SET:
    case KILN_OP_ACC: return infer_set(t, out);
    case KILN_OP_CAST:
        if ((s = need_weight_type(t, x))) return s;
        *out = (shape){KILN_TYPE_F32, x->n_dims, {x->ne[0], x->ne[1], x->ne[2], x->ne[3]}};
        return KILN_OK;
    case KILN_OP_MATMUL: return infer_matmul(t, out);
    case KILN_OP_ROPE: return infer_rope(t, out);
    case KILN_OP_ATTENTION: return infer_attention(t, out);
    case KILN_OP_CACHE_WRITE: return infer_cache_write(t, out);
    case KILN_OP_RESHAPE:
    case KILN_OP_VIEW:
    case KILN_OP_PERMUTE:
    case KILN_OP_TRANSPOSE: return infer_view(t, out);
    case KILN_OP_SUB:
    case KILN_OP_DIV: return infer_binary(t, out);
    case KILN_OP_UNARY:
        if (t->ip[0] < 0 || t->ip[0] >= KILN_UNARY_COUNT) return bad(t, "unknown function", x, NULL);
        if ((s = need_f32(t, x))) return s;
        shape_of(x, out);
        return KILN_OK;
    case KILN_OP_WHERE:
        if ((s = need_f32(t, x)) || (s = need_f32(t, t->src[1])) || (s = need_f32(t, t->src[2]))) return s;
        for (int d = 0; d < KILN_MAX_DIMS; d++)
            if (x->ne[d] % t->src[1]->ne[d] != 0 || x->ne[d] % t->src[2]->ne[d] != 0)
                return bad(t, "values do not broadcast to the condition", t->src[1], t->src[2]);
        shape_of(x, out);
        return KILN_OK;
    case KILN_OP_REDUCE_MAX:
        if ((s = need_f32(t, x))) return s;
        *out = (shape){KILN_TYPE_F32, x->n_dims, {1, x->ne[1], x->ne[2], x->ne[3]}};
        return KILN_OK;
    case KILN_OP_NONE:
    case KILN_OP_COUNT: break;
    }
    return kiln__error(KILN_E_INTERNAL, "op %d has no shape rule", (int)t->op);
}

kiln_status kiln__op_check(const kiln_tensor *t) {
    shape sh;
    kiln_status s;
    for (int i = 0; i < KILN_MAX_SRC; i++)
        if (t->src[i] == t) return kiln__error(KILN_E_INTERNAL, "tensor '%s' is its own source", t->name);
    s = infer(t, &sh);
    if (s) return s;
    if (sh.type != t->type || memcmp(sh.ne, t->ne, sizeof sh.ne) != 0)
        return bad(t, "node shape differs from what its op produces", t, NULL);
    return KILN_OK;
}

/* Create a computing node: set op, sources and parameters on a scratch tensor, infer its shape, then
 * materialize it in the pool. */
static kiln_tensor *make_node(kiln_graph *g, kiln_op op, kiln_tensor *a, kiln_tensor *b, kiln_tensor *c,
                              const int32_t *ip, int n_ip, const float *fp, int n_fp) {
    kiln_tensor proto;
    shape sh;
    kiln_tensor *t;
    kiln_status s;
    if (kiln__graph_status(g) != KILN_OK) return NULL;
    if (!a) return kiln__graph_fail(g, KILN_E_INVALID_ARG, "%s: missing first operand", kiln__op_name(op));
    memset(&proto, 0, sizeof proto);
    proto.op = op;
    proto.src[0] = a;
    proto.src[1] = b;
    proto.src[2] = c;
    for (int i = 0; i < n_ip; i++) proto.ip[i] = ip[i];
    for (int i = 0; i < n_fp; i++) proto.fp[i] = fp[i];
    s = infer(&proto, &sh);
    if (s) {
        g->status = s; /* message already recorded by infer */
        return NULL;
    }
    t = kiln__graph_new_tensor(g, sh.type, sh.n_dims, sh.ne);
    if (!t) return NULL;
    proto.id = t->id;
    proto.layer = t->layer;
    proto.type = t->type;
    proto.n_dims = t->n_dims;
    memcpy(proto.ne, t->ne, sizeof proto.ne);
    memcpy(proto.nb, t->nb, sizeof proto.nb);
    *t = proto;
    snprintf(t->name, sizeof t->name, "%s", kiln__op_name(op));
    return t;
}

#define NEED(x, op)                                                                                    \
    do {                                                                                               \
        if (!(x)) return kiln__graph_fail(g, KILN_E_INVALID_ARG, "%s: missing operand", kiln__op_name(op)); \
    } while (0)

kiln_tensor *kiln__get_rows(kiln_graph *g, kiln_tensor *table, kiln_tensor *ids) {
    NEED(ids, KILN_OP_GET_ROWS);
    return make_node(g, KILN_OP_GET_ROWS, table, ids, NULL, NULL, 0, NULL, 0);
}

kiln_tensor *kiln__rms_norm(kiln_graph *g, kiln_tensor *x, float eps) {
    return make_node(g, KILN_OP_RMS_NORM, x, NULL, NULL, NULL, 0, &eps, 1);
}

kiln_tensor *kiln__add(kiln_graph *g, kiln_tensor *a, kiln_tensor *b) {
    NEED(b, KILN_OP_ADD);
    return make_node(g, KILN_OP_ADD, a, b, NULL, NULL, 0, NULL, 0);
}

kiln_tensor *kiln__mul(kiln_graph *g, kiln_tensor *a, kiln_tensor *b) {
    NEED(b, KILN_OP_MUL);
    return make_node(g, KILN_OP_MUL, a, b, NULL, NULL, 0, NULL, 0);
}

kiln_tensor *kiln__matmul(kiln_graph *g, kiln_tensor *w, kiln_tensor *x) {
    NEED(x, KILN_OP_MATMUL);
    return make_node(g, KILN_OP_MATMUL, w, x, NULL, NULL, 0, NULL, 0);
}

kiln_tensor *kiln__rope(kiln_graph *g, kiln_tensor *x, kiln_tensor *pos, int32_t n_rot, int32_t mode,
                        float freq_base, float freq_scale) {
    int32_t ip[2] = {n_rot, mode};
    float fp[2] = {freq_base, freq_scale};
    NEED(pos, KILN_OP_ROPE);
    return make_node(g, KILN_OP_ROPE, x, pos, NULL, ip, 2, fp, 2);
}

float kiln__rope_freq(float base, int32_t i, int32_t n_rot) {
    return 1.0f / powf(base, (float)i / (float)n_rot);
}

kiln_tensor *kiln__rope_ext(kiln_graph *g, kiln_tensor *x, kiln_tensor *pos, kiln_tensor *factors, int32_t n_rot,
                            int32_t mode, float freq_base, float freq_scale) {
    int32_t ip[2] = {n_rot, mode};
    float fp[2] = {freq_base, freq_scale};
    NEED(pos, KILN_OP_ROPE);
    return make_node(g, KILN_OP_ROPE, x, pos, factors, ip, 2, fp, 2);
}

kiln_tensor *kiln__attention(kiln_graph *g, kiln_tensor *q, kiln_tensor *k, kiln_tensor *v, kiln_tensor *mask,
                             float scale) {
    kiln_tensor proto;
    NEED(q, KILN_OP_ATTENTION);
    NEED(k, KILN_OP_ATTENTION);
    NEED(v, KILN_OP_ATTENTION);
    NEED(mask, KILN_OP_ATTENTION);
    memset(&proto, 0, sizeof proto); /* four sources: built through node_like */
    proto.op = KILN_OP_ATTENTION;
    proto.src[0] = q;
    proto.src[1] = k;
    proto.src[2] = v;
    proto.src[3] = mask;
    proto.fp[0] = scale;
    snprintf(proto.name, sizeof proto.name, "%s", kiln__op_name(KILN_OP_ATTENTION));
    return kiln__graph_node_like(g, &proto);
}

kiln_tensor *kiln__silu(kiln_graph *g, kiln_tensor *x) {
    return make_node(g, KILN_OP_SILU, x, NULL, NULL, NULL, 0, NULL, 0);
}

kiln_tensor *kiln__softmax(kiln_graph *g, kiln_tensor *x, float scale) {
    return make_node(g, KILN_OP_SOFTMAX, x, NULL, NULL, NULL, 0, &scale, 1);
}

kiln_tensor *kiln__cont(kiln_graph *g, kiln_tensor *x) {
    return make_node(g, KILN_OP_CONT, x, NULL, NULL, NULL, 0, NULL, 0);
}

/* ---- Views ----
 * A view records its own offset relative to src[0] and, for reshape/permute/transpose, derives its
 * strides from src[0]; view_src and view_offset resolve the chain to the root tensor that owns bytes.
 * kiln__view_refresh() re-derives all of it after a rewrite replaced src[0]. */

/* Strides for viewing x with shape ne without copying, when the regrouping of dimensions allows it
 * (each group of new dims spans whole old dims that are laid out contiguously among themselves). */
static bool reshape_strides(const kiln_tensor *x, const int64_t ne[KILN_MAX_DIMS], size_t nb[KILN_MAX_DIMS]) {
    int oi = 0, ni = 0;
    if (kiln__tensor_is_contiguous(x)) {
        const kiln_type_traits *tr = kiln__type_traits(x->type);
        nb[0] = tr->block_bytes;
        nb[1] = tr->block_bytes * (size_t)(ne[0] / tr->block_elems);
        for (int d = 2; d < KILN_MAX_DIMS; d++) nb[d] = nb[d - 1] * (size_t)ne[d - 1];
        return ne[0] % tr->block_elems == 0;
    }
    if (kiln__type_traits(x->type)->block_elems != 1) return false;
    while (ni < KILN_MAX_DIMS && oi < KILN_MAX_DIMS) {
        int nj = ni + 1, oj = oi + 1;
        int64_t np = ne[ni], op = x->ne[oi];
        size_t base = 0;
        while (np != op) {
            if (np < op) {
                if (nj >= KILN_MAX_DIMS) return false;
                np *= ne[nj++];
            } else {
                if (oj >= KILN_MAX_DIMS) return false;
                op *= x->ne[oj++];
            }
        }
        /* Old dims oi..oj-1 must chain: each non-trivial dim's stride is the previous one's span. */
        for (int k = oi, prev = -1; k < oj; k++) {
            if (x->ne[k] == 1) continue;
            if (prev >= 0 && x->nb[k] != x->nb[prev] * (size_t)x->ne[prev]) return false;
            if (prev < 0) base = x->nb[k];
            prev = k;
        }
        if (!base) base = x->nb[oi];
        nb[ni] = base;
        for (int k = ni + 1; k < nj; k++) nb[k] = nb[k - 1] * (size_t)ne[k - 1];
        ni = nj;
        oi = oj;
    }
    for (; ni < KILN_MAX_DIMS; ni++) { /* trailing unit dims of a shorter shape */
        if (ne[ni] != 1) return false;
        nb[ni] = nb[ni - 1] * (size_t)ne[ni - 1];
    }
    return true;
}

/* Derive t's strides (for the ops that derive them) and base from t->src[0] and t->offset. */
static kiln_status derive_view(kiln_tensor *t) {
    kiln_tensor *x = t->src[0];
    if (t->op == KILN_OP_RESHAPE) {
        if (kiln__tensor_nelements(x) != kiln__tensor_nelements(t) || !reshape_strides(x, t->ne, t->nb))
            return bad(t, "reshape needs a source whose layout allows the new shape", x, t);
    } else if (t->op == KILN_OP_PERMUTE || t->op == KILN_OP_TRANSPOSE) {
        for (int d = 0; d < KILN_MAX_DIMS; d++) {
            t->ne[t->ip[d]] = x->ne[d];
            t->nb[t->ip[d]] = x->nb[d];
        }
    }
    t->view_src = x->view_src ? x->view_src : x;
    if (kiln__add_overflow_size(x->view_src ? x->view_offset : 0, t->offset, &t->view_offset))
        return bad(t, "view offset overflows", x, NULL);
    return KILN_OK;
}

kiln_status kiln__view_refresh(kiln_tensor *t) {
    shape sh;
    kiln_status s;
    if (t->op == KILN_OP_CACHE_WRITE) {
        t->view_src = t->src[1];
        t->view_offset = 0;
        return KILN_OK;
    }
    if (!kiln__op_is_view(t->op)) return KILN_OK;
    if ((s = derive_view(t))) return s;
    return infer(t, &sh);
}

static kiln_tensor *make_view(kiln_graph *g, kiln_op op, kiln_tensor *x, int32_t n_dims, const int64_t *ne,
                              const size_t *nb, size_t offset, const int32_t *axes) {
    kiln_tensor *t;
    shape sh;
    kiln_status s;
    if (kiln__graph_status(g) != KILN_OK) return NULL;
    if (!x) return kiln__graph_fail(g, KILN_E_INVALID_ARG, "%s: missing operand", kiln__op_name(op));
    t = kiln__graph_new_tensor(g, x->type, n_dims, ne);
    if (!t) return NULL;
    t->op = op;
    t->src[0] = x;
    t->offset = offset;
    if (nb) memcpy(t->nb, nb, sizeof t->nb);
    if (axes) memcpy(t->ip, axes, 4 * sizeof *axes);
    snprintf(t->name, sizeof t->name, "%s", kiln__op_name(op));
    if ((s = derive_view(t)) || (s = infer(t, &sh))) {
        g->status = s;
        return NULL;
    }
    return t;
}

kiln_tensor *kiln__reshape(kiln_graph *g, kiln_tensor *x, int32_t n_dims, const int64_t *ne) {
    return make_view(g, KILN_OP_RESHAPE, x, n_dims, ne, NULL, 0, NULL);
}

kiln_tensor *kiln__reshape_2d(kiln_graph *g, kiln_tensor *x, int64_t ne0, int64_t ne1) {
    int64_t ne[2] = {ne0, ne1};
    return kiln__reshape(g, x, 2, ne);
}

kiln_tensor *kiln__reshape_3d(kiln_graph *g, kiln_tensor *x, int64_t ne0, int64_t ne1, int64_t ne2) {
    int64_t ne[3] = {ne0, ne1, ne2};
    return kiln__reshape(g, x, 3, ne);
}

kiln_tensor *kiln__view(kiln_graph *g, kiln_tensor *x, int32_t n_dims, const int64_t *ne, const size_t *nb,
                        size_t offset) {
    size_t full[KILN_MAX_DIMS];
    if (!x || !ne || !nb) return kiln__graph_fail(g, KILN_E_INVALID_ARG, "view: missing operand");
    if (n_dims < 1 || n_dims > KILN_MAX_DIMS)
        return kiln__graph_fail(g, KILN_E_INVALID_ARG, "view with %d dims (1..4 allowed)", n_dims);
    for (int d = 0; d < KILN_MAX_DIMS; d++)
        full[d] = d < n_dims ? nb[d] : full[d - 1] * (size_t)(d - 1 < n_dims ? ne[d - 1] : 1);
    return make_view(g, KILN_OP_VIEW, x, n_dims, ne, full, offset, NULL);
}

kiln_tensor *kiln__permute(kiln_graph *g, kiln_tensor *x, int32_t a0, int32_t a1, int32_t a2, int32_t a3) {
    int32_t axes[4] = {a0, a1, a2, a3};
    int64_t ne[4];
    unsigned seen = 0;
    int32_t n_dims;
    if (!x) return kiln__graph_fail(g, KILN_E_INVALID_ARG, "permute: missing operand");
    for (int d = 0; d < 4; d++) {
        if (axes[d] < 0 || axes[d] > 3 || (seen & (1u << axes[d])))
            return kiln__graph_fail(g, KILN_E_INVALID_ARG, "permute: axes (%d, %d, %d, %d) are not a permutation",
                                    a0, a1, a2, a3);
        seen |= 1u << axes[d];
        ne[axes[d]] = x->ne[d];
    }
    n_dims = x->n_dims;
    for (int d = 0; d < 4; d++)
        if (ne[d] > 1 && d + 1 > n_dims) n_dims = d + 1;
    return make_view(g, KILN_OP_PERMUTE, x, n_dims, ne, NULL, 0, axes);
}

kiln_tensor *kiln__transpose(kiln_graph *g, kiln_tensor *x) {
    static const int32_t axes[4] = {1, 0, 2, 3};
    int64_t ne[4];
    if (!x) return kiln__graph_fail(g, KILN_E_INVALID_ARG, "transpose: missing operand");
    ne[0] = x->ne[1];
    ne[1] = x->ne[0];
    ne[2] = x->ne[2];
    ne[3] = x->ne[3];
    return make_view(g, KILN_OP_TRANSPOSE, x, KILN__MAX(2, x->n_dims), ne, NULL, 0, axes);
}

kiln_tensor *kiln__cache_write(kiln_graph *g, kiln_tensor *cache, kiln_tensor *x, kiln_tensor *idx) {
    kiln_tensor *t;
    NEED(cache, KILN_OP_CACHE_WRITE);
    NEED(idx, KILN_OP_CACHE_WRITE);
    t = make_node(g, KILN_OP_CACHE_WRITE, x, cache, idx, NULL, 0, NULL, 0);
    if (t) {
        memcpy(t->nb, cache->nb, sizeof t->nb);
        kiln__view_refresh(t);
    }
    return t;
}

kiln_tensor *kiln__cast(kiln_graph *g, kiln_tensor *x) {
    return make_node(g, KILN_OP_CAST, x, NULL, NULL, NULL, 0, NULL, 0);
}

kiln_tensor *kiln__scale(kiln_graph *g, kiln_tensor *x, float scale, float bias) {
    float fp[2] = {scale, bias};
    return make_node(g, KILN_OP_SCALE, x, NULL, NULL, NULL, 0, fp, 2);
}

kiln_tensor *kiln__tanh(kiln_graph *g, kiln_tensor *x) {
    return make_node(g, KILN_OP_TANH, x, NULL, NULL, NULL, 0, NULL, 0);
}

kiln_tensor *kiln__relu(kiln_graph *g, kiln_tensor *x) {
    return make_node(g, KILN_OP_RELU, x, NULL, NULL, NULL, 0, NULL, 0);
}

kiln_tensor *kiln__norm(kiln_graph *g, kiln_tensor *x, float eps) {
    return make_node(g, KILN_OP_NORM, x, NULL, NULL, NULL, 0, &eps, 1);
}

kiln_tensor *kiln__concat(kiln_graph *g, kiln_tensor *a, kiln_tensor *b, kiln_tensor *c) {
    NEED(b, KILN_OP_CONCAT);
    return make_node(g, KILN_OP_CONCAT, a, b, c, NULL, 0, NULL, 0);
}

static kiln_tensor *make_set(kiln_graph *g, kiln_op op, kiln_tensor *dst, kiln_tensor *x, const size_t nb[3],
                             size_t offset) {
    int32_t ip[3];
    kiln_tensor proto;
    NEED(x, op);
    NEED(dst, op);
    for (int k = 0; k < 3; k++) {
        if (nb[k] > INT32_MAX) return kiln__graph_fail(g, KILN_E_RANGE, "%s: region stride %zu too large", kiln__op_name(op), nb[k]);
        ip[k] = (int32_t)nb[k];
    }
    memset(&proto, 0, sizeof proto);
    proto.op = op;
    proto.src[0] = dst;
    proto.src[1] = x;
    memcpy(proto.ip, ip, sizeof ip);
    proto.offset = offset;
    snprintf(proto.name, sizeof proto.name, "%s", kiln__op_name(op));
    return kiln__graph_node_like(g, &proto);
}

kiln_tensor *kiln__set(kiln_graph *g, kiln_tensor *dst, kiln_tensor *x, const size_t nb[3], size_t offset) {
    return make_set(g, KILN_OP_SET, dst, x, nb, offset);
}

kiln_tensor *kiln__acc(kiln_graph *g, kiln_tensor *dst, kiln_tensor *x, const size_t nb[3], size_t offset) {
    return make_set(g, KILN_OP_ACC, dst, x, nb, offset);
}

kiln_tensor *kiln__linear(kiln_graph *g, kiln_tensor *w, kiln_tensor *x, kiln_tensor *bias, float alpha,
                          int32_t act, int32_t flags) {
    int32_t ip[2] = {act, flags};
    NEED(x, KILN_OP_LINEAR);
    return make_node(g, KILN_OP_LINEAR, w, x, bias, ip, 2, &alpha, 1);
}

kiln_tensor *kiln__add_act(kiln_graph *g, kiln_tensor *a, kiln_tensor *b, int32_t act) {
    NEED(b, KILN_OP_ADD_ACT);
    return make_node(g, KILN_OP_ADD_ACT, a, b, NULL, &act, 1, NULL, 0);
}

kiln_tensor *kiln__rms_norm_mul(kiln_graph *g, kiln_tensor *x, kiln_tensor *w, float eps) {
    NEED(w, KILN_OP_RMS_NORM_MUL);
    return make_node(g, KILN_OP_RMS_NORM_MUL, x, w, NULL, NULL, 0, &eps, 1);
}

kiln_tensor *kiln__swiglu(kiln_graph *g, kiln_tensor *gate, kiln_tensor *up) {
    NEED(up, KILN_OP_SWIGLU);
    return make_node(g, KILN_OP_SWIGLU, gate, up, NULL, NULL, 0, NULL, 0);
}

kiln_tensor *kiln__gelu(kiln_graph *g, kiln_tensor *x) {
    return make_node(g, KILN_OP_GELU, x, NULL, NULL, NULL, 0, NULL, 0);
}

kiln_tensor *kiln__gelu_unfused(kiln_graph *g, kiln_tensor *x) {
    /* 0.5 x (1 + tanh(c (x + 0.044715 x^3))), c = sqrt(2 / pi) */
    kiln_tensor *x3 = kiln__mul(g, kiln__mul(g, x, x), x);
    kiln_tensor *inner = kiln__add(g, x, kiln__scale(g, x3, 0.044715f, 0.0f));
    kiln_tensor *th = kiln__tanh(g, kiln__scale(g, inner, 0.7978845608028654f, 0.0f));
    return kiln__mul(g, kiln__scale(g, x, 0.5f, 0.0f), kiln__scale(g, th, 1.0f, 1.0f));
}

kiln_tensor *kiln__sub(kiln_graph *g, kiln_tensor *a, kiln_tensor *b) {
    NEED(b, KILN_OP_SUB);
    return make_node(g, KILN_OP_SUB, a, b, NULL, NULL, 0, NULL, 0);
}

kiln_tensor *kiln__div(kiln_graph *g, kiln_tensor *a, kiln_tensor *b) {
    NEED(b, KILN_OP_DIV);
    return make_node(g, KILN_OP_DIV, a, b, NULL, NULL, 0, NULL, 0);
}

kiln_tensor *kiln__unary(kiln_graph *g, kiln_tensor *x, int32_t fn) {
    return make_node(g, KILN_OP_UNARY, x, NULL, NULL, &fn, 1, NULL, 0);
}

kiln_tensor *kiln__reduce_max(kiln_graph *g, kiln_tensor *x) {
    return make_node(g, KILN_OP_REDUCE_MAX, x, NULL, NULL, NULL, 0, NULL, 0);
}

kiln_tensor *kiln__where(kiln_graph *g, kiln_tensor *cond, kiln_tensor *x, kiln_tensor *y) {
    NEED(x, KILN_OP_WHERE);
    NEED(y, KILN_OP_WHERE);
    return make_node(g, KILN_OP_WHERE, cond, x, y, NULL, 0, NULL, 0);
}

kiln_tensor *kiln__graph_node_like(kiln_graph *g, const kiln_tensor *proto) {
    kiln_tensor *t;
    shape sh;
    kiln_status s;
    if (kiln__graph_status(g) != KILN_OK) return NULL;
    if (kiln__op_is_view(proto->op) && proto->op != KILN_OP_CACHE_WRITE) {
        t = kiln__graph_new_tensor(g, proto->type, proto->n_dims, proto->ne);
        if (!t) return NULL;
        int32_t id = t->id;
        *t = *proto;
        t->id = id;
        t->layer = g->layer; /* a pass's node: the scheduler derives its layer from its sources */
        t->flags &= ~(uint32_t)KILN_TENSOR_OUTPUT;
        if ((s = derive_view(t)) || (s = infer(t, &sh))) {
            g->status = s;
            return NULL;
        }
        return t;
    }
    if ((s = infer(proto, &sh))) {
        g->status = s;
        return NULL;
    }
    t = kiln__graph_new_tensor(g, sh.type, sh.n_dims, sh.ne);
    if (!t) return NULL;
    int32_t id = t->id;
    size_t nb[KILN_MAX_DIMS];
    memcpy(nb, t->nb, sizeof nb);
    *t = *proto;
    t->id = id;
    t->layer = g->layer;
    t->type = sh.type;
    t->n_dims = sh.n_dims;
    memcpy(t->ne, sh.ne, sizeof t->ne);
    memcpy(t->nb, nb, sizeof t->nb);
    t->flags &= ~(uint32_t)KILN_TENSOR_OUTPUT;
    t->data = NULL;
    if (t->op == KILN_OP_CACHE_WRITE) {
        memcpy(t->nb, t->src[1]->nb, sizeof t->nb);
        kiln__view_refresh(t);
    }
    return t;
}
