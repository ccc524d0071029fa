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
    [KILN_OP_CACHE_WRITE] = "cache_write",
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

/* Last byte + 1 that a tensor of this shape and strides touches, relative to its data pointer. */
static size_t extent_bytes(const kiln_tensor *t) {
    const kiln_type_traits *tr = kiln__type_traits(t->type);
    size_t e = tr->block_bytes + (size_t)(t->ne[0] / tr->block_elems - 1) * t->nb[0];
    for (int d = 1; d < KILN_MAX_DIMS; d++) e += (size_t)(t->ne[d] - 1) * t->nb[d];
    return e;
}

static kiln_status infer_view(const kiln_tensor *t, shape *out) {
    const kiln_tensor *x = t->src[0];
    const kiln_tensor *base = t->view_src;
    size_t end;
    if (!base || (base->op != KILN_OP_NONE && kiln__op_is_view(base->op)))
        return bad(t, "view has no base tensor", x, NULL);
    if (t->type != x->type) return bad(t, "view changes the type", x, NULL);
    if (kiln__add_overflow_size(t->view_offset, extent_bytes(t), &end) || end > kiln__tensor_nbytes(base))
        return bad(t, "view reaches outside its base", t, base);
    if (t->op == KILN_OP_RESHAPE &&
        (!kiln__tensor_is_contiguous(x) || kiln__tensor_nelements(x) != kiln__tensor_nelements(t)))
        return bad(t, "reshape needs a contiguous source with the same element count", x, t);
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
    shape_of(x, out);
    return KILN_OK;
}

static kiln_status infer_attention(const kiln_tensor *t, shape *out) {
    const kiln_tensor *q = t->src[0], *k = t->src[1], *v = t->src[2];
    kiln_status s = need_f32(t, q);
    if (!s) s = need_f32(t, k);
    if (!s) s = need_f32(t, v);
    if (s) return s;
    if (q->ne[3] != 1 || k->ne[3] != 1 || v->ne[3] != 1) return bad(t, "operands must be 3-D", q, k);
    if (k->ne[0] != q->ne[0] || v->ne[0] != q->ne[0]) return bad(t, "head sizes differ", q, k);
    if (k->ne[1] != v->ne[1] || k->ne[2] != v->ne[2]) return bad(t, "K and V shapes differ", k, v);
    if (q->ne[1] % k->ne[1] != 0) return bad(t, "query heads are not a multiple of KV heads", q, k);
    if (t->ip[0] < 0 || t->ip[0] + q->ne[2] > k->ne[2])
        return bad(t, "queries reach past the last key (pos0 + T > L)", q, k);
    if (q->nb[0] != sizeof(float) || k->nb[0] != sizeof(float) || v->nb[0] != sizeof(float))
        return bad(t, "head vectors must be contiguous", q, k);
    shape_of(q, out);
    return KILN_OK;
}

static kiln_status infer_cache_write(const kiln_tensor *t, shape *out) {
    const kiln_tensor *x = t->src[0], *cache = t->src[1];
    kiln_status s = need_f32(t, x);
    if (s) return s;
    if (cache->op != KILN_OP_NONE || !(cache->flags & KILN_TENSOR_CACHE) || cache->type != KILN_TYPE_F32 ||
        cache->n_dims != 2 || !kiln__tensor_is_contiguous(cache))
        return bad(t, "destination must be a 2-D f32 cache leaf", cache, NULL);
    if (x->ne[0] != cache->ne[0] || x->ne[2] != 1 || x->ne[3] != 1) return bad(t, "row widths differ", x, cache);
    if (t->ip[0] < 0 || t->ip[0] + x->ne[1] > cache->ne[1]) return bad(t, "rows reach past the cache", x, cache);
    out->type = cache->type;
    out->n_dims = 2;
    out->ne[0] = cache->ne[0];
    out->ne[1] = t->ip[0] + x->ne[1];
    out->ne[2] = out->ne[3] = 1;
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
        if (!(t->fp[0] >= 0.0f) || !isfinite(t->fp[0])) return bad(t, "eps must be finite and >= 0", x, NULL);
        /* fall through */
    case KILN_OP_SILU:
    case KILN_OP_SOFTMAX:
    case KILN_OP_CONT:
        if ((s = need_f32(t, x))) return s;
        if (t->op != KILN_OP_CONT && x->nb[0] != sizeof(float)) return bad(t, "rows must be contiguous", x, NULL);
        shape_of(x, out);
        return KILN_OK;
    case KILN_OP_ADD:
    case KILN_OP_MUL: return infer_binary(t, out);
    case KILN_OP_MATMUL: return infer_matmul(t, out);
    case KILN_OP_ROPE: return infer_rope(t, out);
    case KILN_OP_ATTENTION: return infer_attention(t, out);
    case KILN_OP_CACHE_WRITE: return infer_cache_write(t, out);
    case KILN_OP_RESHAPE:
    case KILN_OP_VIEW:
    case KILN_OP_PERMUTE:
    case KILN_OP_TRANSPOSE: return infer_view(t, out);
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

kiln_tensor *kiln__attention(kiln_graph *g, kiln_tensor *q, kiln_tensor *k, kiln_tensor *v, int32_t pos0,
                             float scale) {
    NEED(k, KILN_OP_ATTENTION);
    NEED(v, KILN_OP_ATTENTION);
    return make_node(g, KILN_OP_ATTENTION, q, k, v, &pos0, 1, &scale, 1);
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

/* Views: the caller gives the shape and strides; the node aliases the root base's bytes. */
static kiln_tensor *make_view(kiln_graph *g, kiln_op op, kiln_tensor *x, int32_t n_dims, const int64_t *ne,
                              const size_t *nb, size_t offset) {
    kiln_tensor *t;
    kiln_tensor *base;
    size_t base_offset;
    shape sh;
    kiln_status s;
    if (kiln__graph_status(g) != KILN_OK) return NULL;
    if (!x) return kiln__graph_fail(g, KILN_E_INVALID_ARG, "%s: missing operand", kiln__op_name(op));
    base = x->view_src ? x->view_src : x;
    base_offset = x->view_src ? x->view_offset : 0;
    t = kiln__graph_new_tensor(g, x->type, n_dims, ne);
    if (!t) return NULL;
    t->op = op;
    t->src[0] = x;
    if (nb) memcpy(t->nb, nb, sizeof t->nb);
    t->view_src = base;
    if (kiln__add_overflow_size(base_offset, offset, &t->view_offset))
        return kiln__graph_fail(g, KILN_E_INVALID_ARG, "%s: offset overflows", kiln__op_name(op));
    snprintf(t->name, sizeof t->name, "%s", kiln__op_name(op));
    s = infer(t, &sh);
    if (s) {
        g->status = s;
        return NULL;
    }
    return t;
}

kiln_tensor *kiln__reshape(kiln_graph *g, kiln_tensor *x, int32_t n_dims, const int64_t *ne) {
    return make_view(g, KILN_OP_RESHAPE, x, n_dims, ne, NULL, 0);
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
    return make_view(g, KILN_OP_VIEW, x, n_dims, ne, full, offset);
}

kiln_tensor *kiln__permute(kiln_graph *g, kiln_tensor *x, int32_t a0, int32_t a1, int32_t a2, int32_t a3) {
    int32_t axes[4] = {a0, a1, a2, a3};
    int64_t ne[4];
    size_t nb[4];
    unsigned seen = 0;
    kiln_tensor *t;
    if (!x) return kiln__graph_fail(g, KILN_E_INVALID_ARG, "permute: missing operand");
    for (int d = 0; d < 4; d++) {
        if (axes[d] < 0 || axes[d] > 3 || (seen & (1u << axes[d])))
            return kiln__graph_fail(g, KILN_E_INVALID_ARG, "permute: axes (%d, %d, %d, %d) are not a permutation",
                                    a0, a1, a2, a3);
        seen |= 1u << axes[d];
        ne[axes[d]] = x->ne[d];
        nb[axes[d]] = x->nb[d];
    }
    t = make_view(g, KILN_OP_PERMUTE, x, 4, ne, nb, 0);
    if (t) {
        memcpy(t->ip, axes, sizeof axes);
        t->n_dims = x->n_dims;
        for (int d = 0; d < 4; d++)
            if (t->ne[d] > 1 && d + 1 > t->n_dims) t->n_dims = d + 1;
    }
    return t;
}

kiln_tensor *kiln__transpose(kiln_graph *g, kiln_tensor *x) {
    kiln_tensor *t = kiln__permute(g, x, 1, 0, 2, 3);
    if (t) {
        t->op = KILN_OP_TRANSPOSE;
        t->n_dims = KILN__MAX(2, x->n_dims);
        snprintf(t->name, sizeof t->name, "%s", kiln__op_name(t->op));
    }
    return t;
}

kiln_tensor *kiln__cache_write(kiln_graph *g, kiln_tensor *cache, kiln_tensor *x, int32_t pos0) {
    kiln_tensor *t;
    NEED(cache, KILN_OP_CACHE_WRITE);
    t = make_node(g, KILN_OP_CACHE_WRITE, x, cache, NULL, &pos0, 1, NULL, 0);
    if (t) {
        t->nb[1] = cache->nb[1];
        t->view_src = cache;
        t->view_offset = 0;
    }
    return t;
}
