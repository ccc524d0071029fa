/*
 * onnx_shape.c - static type and shape inference for the claimed operators, one node at a time in
 * topological order, following the shape rules of the ONNX specification (numpy broadcasting both ways,
 * MatMul's batch broadcasting, Gemm, reductions, Transpose, Reshape with 0 and -1, Flatten,
 * Squeeze/Unsqueeze, Concat, Split, Slice with clamping, Gather, Expand, Shape, ConstantOfShape, Range,
 * Constant, LayerNormalization's three outputs).
 *
 * A dimension is a number, a symbol (dim_param: "batch", kept through the operators that pass it on), or
 * unknown. Shape-giving inputs (Reshape's shape, Unsqueeze's axes, Slice's starts...) are used when they
 * are constants: an initializer, a Constant node, or the output of Shape on a known shape (Kiln folds
 * those here); otherwise the dimensions they decide are unknown, and bound at run time. Inconsistent
 * shapes (dims that cannot broadcast, a MatMul whose inner dims differ, an axis out of range) are errors.
 */
#include "import/onnx/onnx_internal.h"

#include "core/core.h"

#include <math.h>
#include <string.h>

typedef struct shp {
    int32_t rank; /* -1: unknown */
    kiln_onnx_dim d[KILN_MAX_ONNX_RANK];
} shp;

static const kiln_onnx_dim unknown_dim = {-1, NULL};

static const kiln__onnx_value *input(const kiln_onnx *m, const kiln__onnx_node *n, int32_t k) {
    if (k >= n->n_inputs || !n->inputs[k][0]) return NULL;
    return kiln__onnx_value_find(m, n->inputs[k]);
}

static shp shape_of(const kiln__onnx_value *v) {
    shp s;
    s.rank = v ? v->info.rank : -1;
    for (int32_t d = 0; d < s.rank; d++)
        s.d[d] = v->info.dims[d];
    return s;
}

static shp known(int32_t rank) {
    shp s;
    s.rank = rank;
    for (int32_t d = 0; d < rank; d++)
        s.d[d] = unknown_dim;
    return s;
}

/* Elements of a constant int64 (or int32) input, at most cap; false when the input is not a known constant.
 */
static bool const_ints(const kiln_onnx *m, const kiln__onnx_node *n, int32_t k, int64_t *out, int64_t cap,
                       int64_t *count) {
    const kiln__onnx_value *v = input(m, n, k);
    const kiln__onnx_tensor *t = v ? v->init : NULL;
    if (!t || (t->type != KILN_ONNX_INT64 && t->type != KILN_ONNX_INT32) || t->n_elements > (uint64_t)cap)
        return false;
    for (uint64_t i = 0; i < t->n_elements; i++) {
        if (t->type == KILN_ONNX_INT64)
            memcpy(&out[i], (const uint8_t *)t->data + 8 * i, 8);
        else {
            int32_t x;
            memcpy(&x, (const uint8_t *)t->data + 4 * i, 4);
            out[i] = x;
        }
    }
    *count = (int64_t)t->n_elements;
    return true;
}

/* A constant scalar input as a double (float, int32 or int64). */
static bool const_scalar(const kiln_onnx *m, const kiln__onnx_node *n, int32_t k, double *out) {
    const kiln__onnx_value *v = input(m, n, k);
    const kiln__onnx_tensor *t = v ? v->init : NULL;
    if (!t || t->n_elements != 1) return false;
    if (t->type == KILN_ONNX_FLOAT) {
        float f;
        memcpy(&f, t->data, 4);
        *out = f;
    } else if (t->type == KILN_ONNX_INT64) {
        int64_t x;
        memcpy(&x, t->data, 8);
        *out = (double)x;
    } else if (t->type == KILN_ONNX_INT32) {
        int32_t x;
        memcpy(&x, t->data, 4);
        *out = x;
    } else {
        return false;
    }
    return true;
}

static kiln_status set_out(kiln_onnx *m, const kiln__onnx_node *n, int32_t k, int32_t type, const shp *s) {
    kiln__onnx_value *v;
    if (k >= n->n_outputs || !n->outputs[k][0]) return KILN_OK;
    v = kiln__onnx_value_find(m, n->outputs[k]);
    if (!v) return kiln__error(KILN_E_INTERNAL, "output '%s' has no value entry", n->outputs[k]);
    v->info.type = type;
    v->info.rank = s->rank;
    if (s->rank > 0) {
        v->info.dims = kiln__onnx_alloc(m, (size_t)s->rank, sizeof *v->info.dims, "an inferred shape");
        if (!v->info.dims) return KILN_E_NOMEM;
        memcpy(v->info.dims, s->d, (size_t)s->rank * sizeof s->d[0]);
    }
    return KILN_OK;
}

/* Normalize axis a of a rank-r tensor into [0, r) (or [0, r] when end is set). */
static kiln_status norm_axis(int64_t a, int32_t r, bool end, const char *what, int32_t *out) {
    int64_t lim = end ? r + 1 : r;
    *out = 0;
    if (a < -lim || a >= lim)
        return kiln__error(KILN_E_FORMAT, "%s %lld is out of range for rank %d", what, (long long)a, r);
    *out = (int32_t)(a < 0 ? a + lim : a);
    return KILN_OK;
}

static int64_t attr_int(const kiln__onnx_node *n, const char *name, int64_t dflt) {
    const kiln__onnx_attr *a = kiln__onnx_find_attr(n, name);
    return a ? a->i : dflt;
}

/* ---- Broadcasting. ---- */

static kiln_status bcast_dim(kiln_onnx_dim a, kiln_onnx_dim b, kiln_onnx_dim *out) {
    if (a.value == 1)
        *out = b;
    else if (b.value == 1)
        *out = a;
    else if (a.value >= 0 && b.value >= 0) {
        if (a.value != b.value)
            return kiln__error(KILN_E_FORMAT, "dimensions %lld and %lld cannot broadcast", (long long)a.value,
                               (long long)b.value);
        *out = a;
    } else if (a.value >= 0)
        *out = a;
    else if (b.value >= 0)
        *out = b;
    else if (a.param && b.param && !strcmp(a.param, b.param))
        *out = a;
    else
        *out = unknown_dim;
    return KILN_OK;
}

/* Two dims that must be equal (Concat's other axes, Expand's target...): the more known of the two. */
static kiln_status merge_dim(kiln_onnx_dim a, kiln_onnx_dim b, kiln_onnx_dim *out) {
    if (a.value >= 0 && b.value >= 0 && a.value != b.value)
        return kiln__error(KILN_E_FORMAT, "dimensions %lld and %lld differ", (long long)a.value,
                           (long long)b.value);
    *out = a.value >= 0 || a.param ? a : b;
    return KILN_OK;
}

static kiln_status bcast(const shp *a, const shp *b, shp *out) {
    shp r;
    if (a->rank < 0 || b->rank < 0) {
        out->rank = -1;
        return KILN_OK;
    }
    r.rank = KILN__MAX(a->rank, b->rank);
    for (int32_t i = 0; i < r.rank; i++) {
        int32_t ia = a->rank - 1 - i, ib = b->rank - 1 - i;
        kiln_onnx_dim da = ia >= 0 ? a->d[ia] : (kiln_onnx_dim){1, NULL};
        kiln_onnx_dim db = ib >= 0 ? b->d[ib] : (kiln_onnx_dim){1, NULL};
        kiln_status s = bcast_dim(da, db, &r.d[r.rank - 1 - i]);
        if (s) return s;
    }
    *out = r;
    return KILN_OK;
}

static kiln_status infer_broadcast(const kiln_onnx *m, const kiln__onnx_node *n, shp *out) {
    *out = shape_of(input(m, n, 0));
    for (int32_t k = 1; k < n->n_inputs; k++) {
        shp b = shape_of(input(m, n, k));
        kiln_status s = bcast(out, &b, out);
        if (s) return s;
    }
    return KILN_OK;
}

/* ---- Products. ---- */

static kiln_status same_inner(kiln_onnx_dim a, kiln_onnx_dim b) {
    if (a.value >= 0 && b.value >= 0 && a.value != b.value)
        return kiln__error(KILN_E_FORMAT, "inner dimensions %lld and %lld differ", (long long)a.value,
                           (long long)b.value);
    return KILN_OK;
}

static kiln_status infer_matmul(const kiln_onnx *m, const kiln__onnx_node *n, shp *out) {
    /* QLinearMatMul's B is its input 3 (A, a_scale, a_zero_point, B, ...) */
    shp a = shape_of(input(m, n, 0)), b = shape_of(input(m, n, strcmp(n->op->name, "QLinearMatMul") ? 1 : 3)),
        ba, bb;
    kiln_status s;
    out->rank = -1;
    if (a.rank < 0 || b.rank < 0) return KILN_OK;
    if (a.rank == 0 || b.rank == 0) return kiln__error(KILN_E_FORMAT, "MatMul of a scalar");
    if ((s = same_inner(a.d[a.rank - 1], b.d[b.rank == 1 ? 0 : b.rank - 2]))) return s;
    ba = a;
    bb = b;
    ba.rank = KILN__MAX(a.rank - 2, 0);
    bb.rank = KILN__MAX(b.rank - 2, 0);
    if ((s = bcast(&ba, &bb, out))) return s;
    if (a.rank >= 2) out->d[out->rank++] = a.d[a.rank - 2];
    if (b.rank >= 2) out->d[out->rank++] = b.d[b.rank - 1];
    return KILN_OK;
}

static kiln_status infer_gemm(const kiln_onnx *m, const kiln__onnx_node *n, shp *out) {
    shp a = shape_of(input(m, n, 0)), b = shape_of(input(m, n, 1));
    bool ta = attr_int(n, "transA", 0) != 0, tb = attr_int(n, "transB", 0) != 0;
    kiln_status s;
    out->rank = -1;
    if ((a.rank >= 0 && a.rank != 2) || (b.rank >= 0 && b.rank != 2))
        return kiln__error(KILN_E_FORMAT, "Gemm takes 2-D inputs (ranks %d and %d given)", a.rank, b.rank);
    if (a.rank < 0 || b.rank < 0) return KILN_OK;
    if ((s = same_inner(a.d[ta ? 0 : 1], b.d[tb ? 1 : 0]))) return s;
    *out = known(2);
    out->d[0] = a.d[ta ? 1 : 0];
    out->d[1] = b.d[tb ? 0 : 1];
    if (n->n_inputs > 2) {
        shp c = shape_of(input(m, n, 2)), check;
        if ((s = bcast(out, &c, &check))) return s; /* C broadcasts unidirectionally to (M, N) */
    }
    return KILN_OK;
}

/* ---- Reductions and layout. ---- */

static kiln_status infer_reduce(const kiln_onnx *m, const kiln__onnx_node *n, shp *out) {
    shp x = shape_of(input(m, n, 0));
    int64_t axes[KILN_MAX_ONNX_RANK], n_axes = 0;
    bool keep = attr_int(n, "keepdims", 1) != 0, reduce[KILN_MAX_ONNX_RANK] = {false};
    const kiln__onnx_attr *a = kiln__onnx_find_attr(n, "axes");
    if (x.rank < 0) return (out->rank = -1, KILN_OK);
    if (a) {
        if (a->n > KILN_MAX_ONNX_RANK)
            return kiln__error(KILN_E_FORMAT, "%lld axes for rank %d", (long long)a->n, x.rank);
        memcpy(axes, a->ints, (size_t)a->n * sizeof *axes);
        n_axes = a->n;
    } else if (input(m, n, 1) && !const_ints(m, n, 1, axes, KILN_MAX_ONNX_RANK, &n_axes)) {
        *out = keep ? known(x.rank) : (shp){.rank = -1};
        return KILN_OK;
    }
    if (n_axes == 0 && attr_int(n, "noop_with_empty_axes", 0)) return (*out = x, KILN_OK);
    for (int32_t d = 0; d < x.rank; d++)
        reduce[d] = n_axes == 0;
    for (int64_t i = 0; i < n_axes; i++) {
        int32_t ax;
        kiln_status s = norm_axis(axes[i], x.rank, false, "reduction axis", &ax);
        if (s) return s;
        reduce[ax] = true;
    }
    out->rank = 0;
    for (int32_t d = 0; d < x.rank; d++)
        if (!reduce[d])
            out->d[out->rank++] = x.d[d];
        else if (keep)
            out->d[out->rank++] = (kiln_onnx_dim){1, NULL};
    return KILN_OK;
}

static kiln_status infer_transpose(const kiln_onnx *m, const kiln__onnx_node *n, shp *out) {
    shp x = shape_of(input(m, n, 0));
    const kiln__onnx_attr *p = kiln__onnx_find_attr(n, "perm");
    bool seen[KILN_MAX_ONNX_RANK] = {false};
    if (x.rank < 0) return (out->rank = -1, KILN_OK);
    if (p && p->n != x.rank)
        return kiln__error(KILN_E_FORMAT, "perm has %lld entries for rank %d", (long long)p->n, x.rank);
    out->rank = x.rank;
    for (int32_t d = 0; d < x.rank; d++) {
        int64_t src = p ? p->ints[d] : x.rank - 1 - d;
        if (src < 0 || src >= x.rank || seen[src])
            return kiln__error(KILN_E_FORMAT, "perm is not a permutation of 0..%d", x.rank - 1);
        seen[src] = true;
        out->d[d] = x.d[src];
    }
    return KILN_OK;
}

/* The product of dims [lo, hi): a number, the one symbol when every other dim is 1, or unknown. */
static kiln_onnx_dim prod(const shp *x, int32_t lo, int32_t hi) {
    kiln_onnx_dim r = {1, NULL}, sym = unknown_dim;
    int32_t n_sym = 0;
    for (int32_t d = lo; d < hi; d++) {
        if (x->d[d].value < 0) {
            if (!x->d[d].param) return unknown_dim;
            sym = x->d[d];
            n_sym++;
        } else if (kiln__mul_overflow_i64(r.value, x->d[d].value, &r.value)) {
            return unknown_dim;
        }
    }
    if (n_sym == 0) return r;
    return n_sym == 1 && r.value == 1 ? sym : unknown_dim;
}

static kiln_status infer_reshape(const kiln_onnx *m, const kiln__onnx_node *n, shp *out) {
    shp x = shape_of(input(m, n, 0)), sh = shape_of(input(m, n, 1));
    int64_t t[KILN_MAX_ONNX_RANK], cnt, infer_at = -1;
    bool allowzero = attr_int(n, "allowzero", 0) != 0;
    if (!const_ints(m, n, 1, t, KILN_MAX_ONNX_RANK, &cnt)) {
        out->rank = sh.rank == 1 && sh.d[0].value >= 0 && sh.d[0].value <= KILN_MAX_ONNX_RANK
                        ? (int32_t)sh.d[0].value
                        : -1;
        if (out->rank >= 0) *out = known(out->rank);
        return KILN_OK;
    }
    *out = known((int32_t)cnt);
    for (int32_t d = 0; d < cnt; d++) {
        if (t[d] == -1) {
            if (infer_at >= 0) return kiln__error(KILN_E_FORMAT, "the target shape has more than one -1");
            infer_at = d;
        } else if (t[d] == 0 && !allowzero) {
            if (x.rank >= 0 && d >= x.rank)
                return kiln__error(KILN_E_FORMAT, "target dimension %d is 0 (copy) but the input has rank %d",
                                   d, x.rank);
            if (x.rank >= 0) out->d[d] = x.d[d];
        } else if (t[d] < 0) {
            return kiln__error(KILN_E_FORMAT, "target dimension %d is %lld", d, (long long)t[d]);
        } else {
            out->d[d].value = t[d];
        }
    }
    if (infer_at >= 0 && x.rank >= 0) {
        kiln_onnx_dim total = prod(&x, 0, x.rank), rest = prod(out, 0, (int32_t)cnt);
        out->d[infer_at] = unknown_dim;
        rest = prod(out, 0, (int32_t)infer_at);
        kiln_onnx_dim after = prod(out, (int32_t)infer_at + 1, (int32_t)cnt);
        if (total.value >= 0 && rest.value >= 0 && after.value >= 0) {
            int64_t r = rest.value * after.value;
            if (r == 0 || total.value % r)
                return kiln__error(KILN_E_FORMAT, "cannot reshape %lld elements with a -1 dimension",
                                   (long long)total.value);
            out->d[infer_at].value = total.value / r;
        }
    }
    if (infer_at < 0 && x.rank >= 0) {
        kiln_onnx_dim a = prod(&x, 0, x.rank), b = prod(out, 0, (int32_t)cnt);
        if (a.value >= 0 && b.value >= 0 && a.value != b.value)
            return kiln__error(KILN_E_FORMAT, "cannot reshape %lld elements into %lld", (long long)a.value,
                               (long long)b.value);
    }
    return KILN_OK;
}

static kiln_status infer_flatten(const kiln_onnx *m, const kiln__onnx_node *n, shp *out) {
    shp x = shape_of(input(m, n, 0));
    int32_t ax;
    kiln_status s;
    if (x.rank < 0) return (out->rank = -1, KILN_OK);
    if ((s = norm_axis(attr_int(n, "axis", 1), x.rank, true, "axis", &ax))) return s;
    *out = known(2);
    out->d[0] = prod(&x, 0, ax);
    out->d[1] = prod(&x, ax, x.rank);
    return KILN_OK;
}

static kiln_status infer_squeeze(const kiln_onnx *m, const kiln__onnx_node *n, shp *out, bool unsqueeze) {
    shp x = shape_of(input(m, n, 0));
    int64_t axes[KILN_MAX_ONNX_RANK], cnt = 0;
    bool mark[KILN_MAX_ONNX_RANK + 1] = {false};
    int32_t r;
    kiln_status s;
    out->rank = -1;
    if (input(m, n, 1) && !const_ints(m, n, 1, axes, KILN_MAX_ONNX_RANK, &cnt)) return KILN_OK;
    if (x.rank < 0) return KILN_OK;
    r = unsqueeze ? x.rank + (int32_t)cnt : x.rank;
    if (r > KILN_MAX_ONNX_RANK)
        return kiln__error(KILN_E_FORMAT, "the result has rank %d, over KILN_MAX_ONNX_RANK", r);
    for (int64_t i = 0; i < cnt; i++) {
        int32_t ax;
        if ((s = norm_axis(axes[i], r, false, "axis", &ax))) return s;
        if (mark[ax]) return kiln__error(KILN_E_FORMAT, "axis %lld is given twice", (long long)axes[i]);
        mark[ax] = true;
    }
    out->rank = 0;
    if (unsqueeze) {
        for (int32_t d = 0, j = 0; d < r; d++)
            out->d[out->rank++] = mark[d] ? (kiln_onnx_dim){1, NULL} : x.d[j++];
        return KILN_OK;
    }
    for (int32_t d = 0; d < x.rank; d++) {
        if (cnt == 0 && x.d[d].value < 0) return (out->rank = -1, KILN_OK); /* which dims are 1 is unknown */
        bool drop = cnt ? mark[d] : x.d[d].value == 1;
        if (drop && x.d[d].value >= 0 && x.d[d].value != 1)
            return kiln__error(KILN_E_FORMAT, "cannot squeeze dimension %d of size %lld", d,
                               (long long)x.d[d].value);
        if (!drop) out->d[out->rank++] = x.d[d];
    }
    return KILN_OK;
}

static kiln_status infer_concat(const kiln_onnx *m, const kiln__onnx_node *n, shp *out) {
    int32_t ax = 0;
    kiln_status s;
    *out = shape_of(input(m, n, 0));
    for (int32_t k = 0; k < n->n_inputs; k++) {
        shp x = shape_of(input(m, n, k));
        if (x.rank < 0) return (out->rank = -1, KILN_OK);
        if (k == 0) {
            if ((s = norm_axis(attr_int(n, "axis", 0), x.rank, false, "axis", &ax))) return s;
            continue;
        }
        if (x.rank != out->rank)
            return kiln__error(KILN_E_FORMAT, "input %d has rank %d, input 0 %d", k, x.rank, out->rank);
        for (int32_t d = 0; d < x.rank; d++) {
            if (d == ax) {
                if (out->d[d].value >= 0 && x.d[d].value >= 0)
                    out->d[d].value += x.d[d].value;
                else
                    out->d[d] = unknown_dim;
            } else if ((s = merge_dim(out->d[d], x.d[d], &out->d[d]))) {
                return kiln__error_prefix(s, "input %d: ", k);
            }
        }
    }
    return KILN_OK;
}

static kiln_status infer_split(const kiln_onnx *m, const kiln__onnx_node *n, shp *outs) {
    shp x = shape_of(input(m, n, 0));
    int64_t sizes[KILN_MAX_ONNX_RANK * 8], cnt = 0, total = 0;
    int32_t ax, k_out = n->n_outputs;
    kiln_status s;
    for (int32_t k = 0; k < k_out; k++)
        outs[k].rank = -1;
    if (x.rank < 0) return KILN_OK;
    if ((s = norm_axis(attr_int(n, "axis", 0), x.rank, false, "axis", &ax))) return s;
    for (int32_t k = 0; k < k_out; k++) {
        outs[k] = x;
        outs[k].d[ax] = unknown_dim;
    }
    if (input(m, n, 1)) {
        if (!const_ints(m, n, 1, sizes, (int64_t)(sizeof sizes / sizeof sizes[0]), &cnt)) return KILN_OK;
        if (cnt != k_out)
            return kiln__error(KILN_E_FORMAT, "split has %lld sizes for %d outputs", (long long)cnt, k_out);
        for (int32_t k = 0; k < k_out; k++) {
            if (sizes[k] < 0 ||
                kiln__add_overflow_u64((uint64_t)total, (uint64_t)sizes[k], (uint64_t *)&total))
                return kiln__error(KILN_E_FORMAT, "split size %lld is invalid", (long long)sizes[k]);
            outs[k].d[ax].value = sizes[k];
        }
        if (x.d[ax].value >= 0 && total != x.d[ax].value)
            return kiln__error(KILN_E_FORMAT, "split sizes add up to %lld, the axis has %lld",
                               (long long)total, (long long)x.d[ax].value);
        return KILN_OK;
    }
    if (x.d[ax].value < 0) return KILN_OK;
    int64_t parts = attr_int(n, "num_outputs", k_out), dim = x.d[ax].value, chunk;
    if (parts != k_out)
        return kiln__error(KILN_E_FORMAT, "num_outputs is %lld but the node has %d outputs", (long long)parts,
                           k_out);
    chunk = dim / parts + (dim % parts != 0);
    if (!kiln__onnx_find_attr(n, "num_outputs") && dim % parts)
        return kiln__error(KILN_E_FORMAT, "dimension %lld does not split evenly into %d outputs",
                           (long long)dim, k_out);
    for (int32_t k = 0; k < k_out; k++)
        outs[k].d[ax].value = KILN__MAX(KILN__MIN(chunk, dim - chunk * k), 0);
    return KILN_OK;
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

static kiln_status infer_slice(const kiln_onnx *m, const kiln__onnx_node *n, shp *out) {
    shp x = shape_of(input(m, n, 0));
    int64_t st[KILN_MAX_ONNX_RANK], en[KILN_MAX_ONNX_RANK], ax[KILN_MAX_ONNX_RANK], sp[KILN_MAX_ONNX_RANK];
    int64_t ns, ne, na, nsp;
    bool seen[KILN_MAX_ONNX_RANK] = {false};
    *out = x;
    if (x.rank < 0) return KILN_OK;
    bool have =
        const_ints(m, n, 1, st, KILN_MAX_ONNX_RANK, &ns) && const_ints(m, n, 2, en, KILN_MAX_ONNX_RANK, &ne);
    bool have_axes = !input(m, n, 3) || const_ints(m, n, 3, ax, KILN_MAX_ONNX_RANK, &na);
    bool have_steps = !input(m, n, 4) || const_ints(m, n, 4, sp, KILN_MAX_ONNX_RANK, &nsp);
    if (!have || !have_axes) return (*out = known(x.rank), KILN_OK);
    if (ne != ns || (input(m, n, 3) && na != ns) || (have_steps && input(m, n, 4) && nsp != ns))
        return kiln__error(KILN_E_FORMAT, "starts, ends, axes and steps differ in length");
    for (int64_t i = 0; i < ns; i++) {
        int32_t a;
        int64_t step = input(m, n, 4) && have_steps ? sp[i] : 1, dim, s0, e0;
        kiln_status s = norm_axis(input(m, n, 3) ? ax[i] : i, x.rank, false, "axis", &a);
        if (s) return s;
        if (seen[a]) return kiln__error(KILN_E_FORMAT, "axis %d is sliced twice", a);
        seen[a] = true;
        if (!have_steps) {
            out->d[a] = unknown_dim;
            continue;
        }
        if (step == 0) return kiln__error(KILN_E_FORMAT, "a step is 0");
        dim = x.d[a].value;
        if (dim < 0) {
            out->d[a] = unknown_dim;
            continue;
        }
        s0 = st[i] < 0 ? (st[i] < -dim ? -1 : st[i] + dim) : st[i];
        e0 = en[i] < 0 ? (en[i] < -dim ? -1 : en[i] + dim) : en[i];
        if (step > 0) {
            s0 = clamp64(s0, 0, dim);
            e0 = clamp64(e0, 0, dim);
            out->d[a].value = e0 > s0 ? (e0 - s0 - 1) / step + 1 : 0;
        } else if (dim == 0) {
            out->d[a].value = 0;
        } else {
            s0 = clamp64(s0, 0, dim - 1);
            e0 = clamp64(e0, -1, dim - 1);
            out->d[a].value = s0 > e0 ? (s0 - e0 - 1) / (step == INT64_MIN ? INT64_MAX : -step) + 1 : 0;
        }
        out->d[a].param = NULL;
    }
    return KILN_OK;
}

static kiln_status infer_gather(const kiln_onnx *m, const kiln__onnx_node *n, shp *out, bool elements) {
    shp x = shape_of(input(m, n, 0)), idx = shape_of(input(m, n, 1));
    int32_t ax;
    kiln_status s;
    out->rank = -1;
    if (x.rank < 0) return elements ? (*out = idx, KILN_OK) : KILN_OK;
    if (x.rank == 0) return kiln__error(KILN_E_FORMAT, "gathering from a scalar");
    if ((s = norm_axis(attr_int(n, "axis", 0), x.rank, false, "axis", &ax))) return s;
    if (elements) {
        if (idx.rank >= 0 && idx.rank != x.rank)
            return kiln__error(KILN_E_FORMAT, "indices have rank %d, data %d", idx.rank, x.rank);
        return (*out = idx, KILN_OK);
    }
    if (idx.rank < 0) return KILN_OK;
    if (x.rank - 1 + idx.rank > KILN_MAX_ONNX_RANK)
        return kiln__error(KILN_E_FORMAT, "the result's rank is over KILN_MAX_ONNX_RANK");
    out->rank = 0;
    for (int32_t d = 0; d < ax; d++)
        out->d[out->rank++] = x.d[d];
    for (int32_t d = 0; d < idx.rank; d++)
        out->d[out->rank++] = idx.d[d];
    for (int32_t d = ax + 1; d < x.rank; d++)
        out->d[out->rank++] = x.d[d];
    return KILN_OK;
}

/* GatherND: indices' dims but the last (m, which must be known), then the data's dims past batch_dims + m. */
static kiln_status infer_gather_nd(const kiln_onnx *m, const kiln__onnx_node *n, shp *out) {
    shp x = shape_of(input(m, n, 0)), idx = shape_of(input(m, n, 1));
    int64_t b = attr_int(n, "batch_dims", 0), last;
    out->rank = -1;
    if (x.rank < 0 || idx.rank < 0) return KILN_OK;
    if (idx.rank < 1) return kiln__error(KILN_E_FORMAT, "indices of rank 0");
    if (b < 0 || b >= KILN__MIN(x.rank, idx.rank))
        return kiln__error(KILN_E_FORMAT, "batch_dims %lld out of range", (long long)b);
    last = idx.d[idx.rank - 1].value;
    if (last < 0) return KILN_OK;
    if (last < 1 || b + last > x.rank)
        return kiln__error(KILN_E_FORMAT, "the indices' last dim is %lld for data of rank %d",
                           (long long)last, x.rank);
    if (idx.rank - 1 + x.rank - b - last > KILN_MAX_ONNX_RANK)
        return kiln__error(KILN_E_FORMAT, "the result's rank is over KILN_MAX_ONNX_RANK");
    out->rank = 0;
    for (int32_t d = 0; d < idx.rank - 1; d++)
        out->d[out->rank++] = idx.d[d];
    for (int64_t d = b + last; d < x.rank; d++)
        out->d[out->rank++] = x.d[d];
    return KILN_OK;
}

/* The shape given by constant input k (Expand, ConstantOfShape), or rank -1. */
static kiln_status shape_input(const kiln_onnx *m, const kiln__onnx_node *n, int32_t k, shp *out) {
    int64_t t[KILN_MAX_ONNX_RANK], cnt;
    shp sh = shape_of(input(m, n, k));
    if (!const_ints(m, n, k, t, KILN_MAX_ONNX_RANK, &cnt)) {
        bool r = sh.rank == 1 && sh.d[0].value >= 0 && sh.d[0].value <= KILN_MAX_ONNX_RANK;
        *out = r ? known((int32_t)sh.d[0].value) : (shp){.rank = -1};
        if (sh.rank == 1 && sh.d[0].value > KILN_MAX_ONNX_RANK)
            return kiln__error(KILN_E_FORMAT, "the shape input has %lld entries, over KILN_MAX_ONNX_RANK",
                               (long long)sh.d[0].value);
        return KILN_OK;
    }
    *out = known((int32_t)cnt);
    for (int32_t d = 0; d < cnt; d++) {
        if (t[d] < 0)
            return kiln__error(KILN_E_FORMAT, "shape entry %d is negative (%lld)", d, (long long)t[d]);
        out->d[d].value = t[d];
    }
    return KILN_OK;
}

/* Shape's output, folded into a constant when the dims it reads are all known. */
static kiln_status infer_shape_op(kiln_onnx *m, const kiln__onnx_node *n, shp *out) {
    shp x = shape_of(input(m, n, 0));
    int64_t start = attr_int(n, "start", 0), end;
    kiln__onnx_tensor *t;
    if (x.rank < 0) return (out->rank = 1, out->d[0] = unknown_dim, KILN_OK);
    end = attr_int(n, "end", x.rank);
    start = clamp64(start < 0 ? start + x.rank : start, 0, x.rank);
    end = clamp64(end < 0 ? end + x.rank : end, 0, x.rank);
    *out = known(1);
    out->d[0].value = end > start ? end - start : 0;
    for (int64_t d = start; d < end; d++)
        if (x.d[d].value < 0) return KILN_OK;
    t = kiln__onnx_alloc(m, 1, sizeof *t, "a folded shape");
    int64_t *vals = kiln__onnx_alloc(m, (size_t)out->d[0].value, sizeof *vals, "a folded shape");
    int64_t *dims = kiln__onnx_alloc(m, 1, sizeof *dims, "a folded shape");
    if (!t || !vals || !dims) return KILN_E_NOMEM;
    for (int64_t d = start; d < end; d++)
        vals[d - start] = x.d[d].value;
    dims[0] = out->d[0].value;
    if (!n->outputs[0][0]) return KILN_OK;
    *t = (kiln__onnx_tensor){n->outputs[0], KILN_ONNX_INT64,       1,    dims, (uint64_t)dims[0],
                             vals,          (uint64_t)dims[0] * 8, false};
    kiln__onnx_value_find(m, n->outputs[0])->init = t;
    return KILN_OK;
}

static kiln_status infer_range(const kiln_onnx *m, const kiln__onnx_node *n, shp *out) {
    double a, b, step;
    for (int32_t k = 0; k < 3; k++)
        if (input(m, n, k)->info.rank > 0)
            return kiln__error(KILN_E_FORMAT, "input '%.128s' has rank %d; Range takes scalars", n->inputs[k],
                               input(m, n, k)->info.rank);
    *out = known(1);
    if (!const_scalar(m, n, 0, &a) || !const_scalar(m, n, 1, &b) || !const_scalar(m, n, 2, &step))
        return KILN_OK;
    if (step == 0) return kiln__error(KILN_E_FORMAT, "delta is 0");
    double len = ceil((b - a) / step);
    if (!(len <= 4.0e18)) return kiln__error(KILN_E_FORMAT, "the range has too many elements");
    out->d[0].value = len > 0 ? (int64_t)len : 0;
    return KILN_OK;
}

/* Constant: the value tensor, made from value_float(s)/value_int(s) when those are given. */
static kiln_status infer_constant(kiln_onnx *m, const kiln__onnx_node *n, int32_t *type, shp *out) {
    const kiln__onnx_attr *a = &n->attrs[0];
    kiln__onnx_tensor *t = a->t;
    if (!t) {
        bool list = a->type == KILN_ONNX_ATTR_FLOATS || a->type == KILN_ONNX_ATTR_INTS;
        bool is_int = a->type == KILN_ONNX_ATTR_INT || a->type == KILN_ONNX_ATTR_INTS;
        if (a->type == KILN_ONNX_ATTR_STRING || a->type == KILN_ONNX_ATTR_STRINGS)
            return kiln__error(KILN_E_UNSUPPORTED, "string constants are not supported");
        t = kiln__onnx_alloc(m, 1, sizeof *t, "a constant");
        int64_t *dims = kiln__onnx_alloc(m, 1, sizeof *dims, "a constant");
        if (!t || !dims) return KILN_E_NOMEM;
        dims[0] = list ? a->n : 1;
        *t = (kiln__onnx_tensor){
            n->outputs[0], is_int ? KILN_ONNX_INT64 : KILN_ONNX_FLOAT, list ? 1 : 0, dims, (uint64_t)dims[0],
            NULL,          (uint64_t)dims[0] * (is_int ? 8 : 4),       false};
        t->data = list ? (is_int ? (const void *)a->ints : (const void *)a->floats)
                       : (is_int ? (const void *)&a->i : (const void *)&a->f);
    }
    *type = t->type;
    *out = known(t->rank);
    for (int32_t d = 0; d < t->rank; d++)
        out->d[d].value = t->dims[d];
    if (n->outputs[0][0]) kiln__onnx_value_find(m, n->outputs[0])->init = t;
    return KILN_OK;
}

static kiln_status infer_layer_norm(kiln_onnx *m, const kiln__onnx_node *n) {
    shp x = shape_of(input(m, n, 0)), stat;
    int32_t ax = 0;
    int32_t t = input(m, n, 0)->info.type;
    kiln_status s;
    if (x.rank >= 0 && (s = norm_axis(attr_int(n, "axis", -1), x.rank, false, "axis", &ax))) return s;
    stat = x;
    for (int32_t d = ax; d < x.rank; d++)
        stat.d[d] = (kiln_onnx_dim){1, NULL};
    if ((s = set_out(m, n, 0, t, &x))) return s;
    if ((s = set_out(m, n, 1, KILN_ONNX_FLOAT, &stat))) return s;
    return set_out(m, n, 2, KILN_ONNX_FLOAT, &stat);
}

/* ---- Types. ---- */

static const char *in_name(const kiln__onnx_node *n, int32_t k) {
    return n->inputs[k];
}

/* Check input types: T of input 0 (input 1 for Where) in the operator's set, and the inputs that share T
 * equal. */
static kiln_status check_types(const kiln_onnx *m, const kiln__onnx_node *n) {
    const kiln__onnx_op *op = n->op;
    bool where = op->shape == KILN__SHAPE_BROADCAST && op->type_from == 1;
    /* Pow's exponent has a type of its own (T1); the other broadcasting operators share T. */
    bool shared = (op->shape == KILN__SHAPE_BROADCAST && strcmp(op->name, "Pow") != 0) ||
                  (op->shape == KILN__SHAPE_MATMUL && strcmp(op->name, "MatMulInteger") != 0 &&
                   strcmp(op->name, "QLinearMatMul") != 0) ||
                  op->shape == KILN__SHAPE_GEMM || op->shape == KILN__SHAPE_CONCAT;
    const kiln__onnx_value *v0 = input(m, n, 0);
    int32_t t0 = v0 ? v0->info.type : 0;
    if (t0 && ((uint32_t)t0 >= 32 || !(op->types & KILN__TBIT(t0))))
        return kiln__error(KILN_E_UNSUPPORTED,
                           "input '%.128s' has type %s, which Kiln does not support for %s", in_name(n, 0),
                           kiln__onnx_type_name(t0), op->name);
    if (where) {
        const kiln__onnx_value *v1 = input(m, n, 1);
        t0 = v1 ? v1->info.type : 0;
        if (t0 && ((uint32_t)t0 >= 32 || !(KILN__T_ANY & KILN__TBIT(t0))))
            return kiln__error(KILN_E_UNSUPPORTED,
                               "input '%.128s' has type %s, which Kiln does not support for %s",
                               in_name(n, 1), kiln__onnx_type_name(t0), op->name);
    }
    if (!shared || !t0) return KILN_OK;
    for (int32_t k = where ? 2 : 1; k < n->n_inputs; k++) {
        const kiln__onnx_value *v = input(m, n, k);
        if (v && v->info.type && v->info.type != t0)
            return kiln__error(KILN_E_FORMAT,
                               "input '%.128s' has type %s, input '%.128s' %s; they must be equal",
                               in_name(n, k), kiln__onnx_type_name(v->info.type), in_name(n, where ? 1 : 0),
                               kiln__onnx_type_name(t0));
    }
    return KILN_OK;
}

static kiln_status out_type(const kiln_onnx *m, const kiln__onnx_node *n, int32_t *type) {
    const kiln__onnx_op *op = n->op;
    if (op->type_from >= 0) {
        const kiln__onnx_value *v = input(m, n, op->type_from);
        *type = v ? v->info.type : 0;
    } else {
        *type = op->fixed_type;
    }
    if (!strcmp(op->name, "Cast")) {
        int64_t to = attr_int(n, "to", 0);
        if (to <= 0 || to >= 32 || !(KILN__T_ANY & KILN__TBIT(to)))
            return kiln__error(KILN_E_UNSUPPORTED, "casting to %s is not supported",
                               kiln__onnx_type_name((int32_t)to));
        *type = (int32_t)to;
    } else if (!strcmp(op->name, "QuantizeLinear") && n->n_inputs > 2 && n->inputs[2][0]) {
        const kiln__onnx_value *zp = input(m, n, 2);
        *type = zp ? zp->info.type : 0; /* the zero point's type; uint8 without one */
        if (*type && *type != KILN_ONNX_UINT8 && *type != KILN_ONNX_INT8)
            return kiln__error(KILN_E_UNSUPPORTED,
                               "a zero point of type %s (Kiln quantizes to uint8 and int8)",
                               kiln__onnx_type_name(*type));
    } else if (op->shape == KILN__SHAPE_CONSTANT_OF_SHAPE) {
        const kiln__onnx_attr *a = kiln__onnx_find_attr(n, "value");
        if (a && a->t->n_elements != 1)
            return kiln__error(KILN_E_FORMAT, "value has %llu elements, not 1",
                               (unsigned long long)a->t->n_elements);
        *type = a ? a->t->type : KILN_ONNX_FLOAT;
        if (*type >= 32 || !(KILN__T_ANY & KILN__TBIT(*type)))
            return kiln__error(KILN_E_UNSUPPORTED, "value of type %s is not supported",
                               kiln__onnx_type_name(*type));
    }
    return KILN_OK;
}

kiln_status kiln__onnx_infer(kiln_onnx *m, const kiln__onnx_node *n) {
    shp out, outs[127];
    int32_t type;
    kiln_status s;
    if ((s = check_types(m, n)) || (s = out_type(m, n, &type))) return s;
    switch (n->op->shape) {
    case KILN__SHAPE_SAME: out = shape_of(input(m, n, 0)); break;
    case KILN__SHAPE_BROADCAST: s = infer_broadcast(m, n, &out); break;
    case KILN__SHAPE_MATMUL: s = infer_matmul(m, n, &out); break;
    case KILN__SHAPE_GEMM: s = infer_gemm(m, n, &out); break;
    case KILN__SHAPE_REDUCE: s = infer_reduce(m, n, &out); break;
    case KILN__SHAPE_TRANSPOSE: s = infer_transpose(m, n, &out); break;
    case KILN__SHAPE_RESHAPE: s = infer_reshape(m, n, &out); break;
    case KILN__SHAPE_FLATTEN: s = infer_flatten(m, n, &out); break;
    case KILN__SHAPE_SQUEEZE: s = infer_squeeze(m, n, &out, false); break;
    case KILN__SHAPE_UNSQUEEZE: s = infer_squeeze(m, n, &out, true); break;
    case KILN__SHAPE_CONCAT: s = infer_concat(m, n, &out); break;
    case KILN__SHAPE_SLICE: s = infer_slice(m, n, &out); break;
    case KILN__SHAPE_GATHER: s = infer_gather(m, n, &out, false); break;
    case KILN__SHAPE_GATHER_ELEMENTS: s = infer_gather(m, n, &out, true); break;
    case KILN__SHAPE_GATHER_ND: s = infer_gather_nd(m, n, &out); break;
    case KILN__SHAPE_DYNAMIC_QUANTIZE: {
        shp scalar = {0, {{0, NULL}}};
        out = shape_of(input(m, n, 0));
        if ((s = set_out(m, n, 1, KILN_ONNX_FLOAT, &scalar)) ||
            (s = set_out(m, n, 2, KILN_ONNX_UINT8, &scalar)))
            return s;
        break;
    }
    case KILN__SHAPE_EXPAND: {
        shp x = shape_of(input(m, n, 0)), target;
        if (!(s = shape_input(m, n, 1, &target)))
            s = target.rank < 0 ? (out = target, KILN_OK) : bcast(&x, &target, &out);
        break;
    }
    case KILN__SHAPE_SHAPE: s = infer_shape_op(m, n, &out); break;
    case KILN__SHAPE_CONSTANT_OF_SHAPE: s = shape_input(m, n, 0, &out); break;
    case KILN__SHAPE_RANGE: s = infer_range(m, n, &out); break;
    case KILN__SHAPE_CONSTANT: s = infer_constant(m, n, &type, &out); break;
    case KILN__SHAPE_LAYER_NORM: return infer_layer_norm(m, n);
    case KILN__SHAPE_SPLIT:
        if ((s = infer_split(m, n, outs))) return s;
        for (int32_t k = 0; k < n->n_outputs; k++)
            if ((s = set_out(m, n, k, type, &outs[k]))) return s;
        return KILN_OK;
    }
    if (s) return s;
    return set_out(m, n, 0, type, &out);
}
