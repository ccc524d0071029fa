/*
 * onnx_lower_ints.c - the int64 shape arithmetic of an ONNX graph, evaluated on the host while a key is
 * lowered. Exporters compute reshape targets from the input's shape (Shape -> Gather -> Unsqueeze -> Concat
 * -> Reshape); the reader folds that at load when the shape is static (onnx_fold.c), and here, once a key
 * binds the dynamic dims, the rest is known too: each int64 value of rank 0 or 1 is computed into the
 * lowering's pool, and Reshape, Squeeze and Unsqueeze read it like a constant.
 *
 * Operators: Shape (start, end), Gather (axis 0), Unsqueeze and Squeeze (rank 0 <-> [1]), Concat, Cast and
 * Identity of integers, Reshape and Flatten of a vector, Slice of a vector (ONNX's clamping, any step), and
 * Add, Sub, Mul, Div (truncating), broadcasting a scalar. An int64 value of any other kind is refused by
 * name when a node needs it.
 */
#include "import/onnx/onnx_lower.h"

#include "core/core.h"

#include <string.h>

/* A value's elements, or NULL (not computed, not an integer constant of rank <= 1). */
const int64_t *kiln__onnx_ints_of(const kiln__onnx_lowering *l, const char *name, int64_t *n) {
    const kiln__onnx_value *v = name[0] ? kiln__onnx_value_find(l->m, name) : NULL;
    int32_t k;
    if (!v) return NULL;
    k = (int32_t)(v - l->m->values);
    if (l->ints[k].v) {
        *n = l->ints[k].n;
        return l->ints[k].v;
    }
    if (v->init && v->init->type == KILN_ONNX_INT64 && v->init->rank <= 1) {
        *n = (int64_t)v->init->n_elements;
        return (const int64_t *)v->init->data;
    }
    return NULL;
}

/* Room for n elements in the pool. */
static int64_t *take(kiln__onnx_lowering *l, int64_t n) {
    int64_t *p;
    if (n < 0 || n > l->pool_cap - l->pool_used) return NULL;
    p = l->pool + l->pool_used;
    l->pool_used += n;
    return p;
}

static int64_t norm_axis(int64_t a, int64_t r) {
    return a < 0 ? a + r : a;
}

/* Shape of input 0: a computed float value (its Kiln dims) or an integer vector. */
static int64_t shape_op(kiln__onnx_lowering *l, const kiln__onnx_node *n, int64_t *dims) {
    const kiln__onnx_value *v = kiln__onnx_value_find(l->m, n->inputs[0]);
    int32_t k = (int32_t)(v - l->m->values), r = v->info.rank;
    int64_t cnt;
    if (r < 0 || r > KILN_MAX_ONNX_RANK) return -1;
    if (l->vals[k]) {
        if (r > KILN_MAX_DIMS) return -1;
        kiln__onnx_shape_of(l->vals[k], r, dims);
    } else if (kiln__onnx_ints_of(l, n->inputs[0], &cnt)) {
        if (r == 1) dims[0] = cnt;
    } else {
        return -1;
    }
    const kiln__onnx_attr *s = kiln__onnx_find_attr(n, "start"), *e = kiln__onnx_find_attr(n, "end");
    int64_t start = s ? norm_axis(s->i, r) : 0, end = e ? norm_axis(e->i, r) : r;
    start = start < 0 ? 0 : start > r ? r : start;
    end = end < 0 ? 0 : end > r ? r : end;
    if (end < start) end = start;
    memmove(dims, dims + start, (size_t)(end - start) * sizeof *dims);
    return end - start;
}

static bool arith(const char *op, int64_t x, int64_t y, int64_t *out) {
    if (!strcmp(op, "Add")) return !__builtin_add_overflow(x, y, out);
    if (!strcmp(op, "Sub")) return !__builtin_sub_overflow(x, y, out);
    if (!strcmp(op, "Mul")) return !__builtin_mul_overflow(x, y, out);
    if (y == 0 || (x == INT64_MIN && y == -1)) return false;
    *out = x / y;
    return true;
}

/* Slice of a vector: ONNX's clamping of starts and ends, any non-zero step. */
static int64_t slice_op(kiln__onnx_lowering *l, const kiln__onnx_node *n, const int64_t *a, int64_t na,
                        int64_t *out) {
    int64_t ns, ne, nx = 0, nst = 0, cnt = 0;
    const int64_t *st = kiln__onnx_ints_of(l, n->inputs[1], &ns),
                  *en = kiln__onnx_ints_of(l, n->inputs[2], &ne);
    const int64_t *ax = n->n_inputs > 3 ? kiln__onnx_ints_of(l, n->inputs[3], &nx) : NULL;
    const int64_t *sp = n->n_inputs > 4 ? kiln__onnx_ints_of(l, n->inputs[4], &nst) : NULL;
    if (!st || !en || ns != 1 || ne != 1 || (ax && (nx != 1 || norm_axis(ax[0], 1) != 0)) || (sp && nst != 1))
        return -1;
    int64_t step = sp ? sp[0] : 1, b = st[0], e = en[0];
    if (step == 0) return -1;
    if (step > na) step = na + 1; /* the same elements, and i + step cannot overflow */
    if (step < -na) step = -na - 1;
    if (b < 0) b += na;
    if (e < 0) e += na;
    if (step > 0) {
        b = b < 0 ? 0 : b > na ? na : b;
        e = e < 0 ? 0 : e > na ? na : e;
        for (int64_t i = b; i < e; i += step)
            out[cnt++] = a[i];
    } else {
        b = b < 0 ? -1 : b > na - 1 ? na - 1 : b;
        e = e < -1 ? -1 : e > na - 1 ? na - 1 : e;
        for (int64_t i = b; i > e; i += step)
            out[cnt++] = a[i];
    }
    return cnt;
}

/* The elements of n's output into out (room for cap), or -1 when Kiln does not evaluate this node. */
static int64_t evaluate(kiln__onnx_lowering *l, const kiln__onnx_node *n, int64_t *out, int64_t cap) {
    const char *op = n->op_type;
    int64_t na = 0, nb = 0, cnt = 0;
    const int64_t *a = n->n_inputs > 0 ? kiln__onnx_ints_of(l, n->inputs[0], &na) : NULL;
    const int64_t *b = n->n_inputs > 1 ? kiln__onnx_ints_of(l, n->inputs[1], &nb) : NULL;
    if (!strcmp(op, "Shape")) return cap >= KILN_MAX_ONNX_RANK ? shape_op(l, n, out) : -1;
    if (!strcmp(op, "Concat")) {
        for (int32_t j = 0; j < n->n_inputs; j++) {
            int64_t nj;
            const int64_t *v = kiln__onnx_ints_of(l, n->inputs[j], &nj);
            if (!v || cnt + nj > cap) return -1;
            memcpy(out + cnt, v, (size_t)nj * sizeof *v);
            cnt += nj;
        }
        return cnt;
    }
    if (!a || na > cap) return -1;
    if (!strcmp(op, "Gather")) {
        const kiln__onnx_attr *axis = kiln__onnx_find_attr(n, "axis");
        if (!b || nb > cap || (axis && axis->i != 0 && axis->i != -1)) return -1;
        for (int64_t i = 0; i < nb; i++) {
            int64_t j = b[i] < 0 ? b[i] + na : b[i];
            if (j < 0 || j >= na) return -1;
            out[i] = a[j];
        }
        return nb;
    }
    if (!strcmp(op, "Slice")) return slice_op(l, n, a, na, out);
    if (!strcmp(op, "Unsqueeze") || !strcmp(op, "Squeeze") || !strcmp(op, "Identity") ||
        !strcmp(op, "Cast") || !strcmp(op, "Reshape") || !strcmp(op, "Flatten")) {
        memcpy(out, a, (size_t)na * sizeof *a);
        return na;
    }
    if (b && (na == nb || na == 1 || nb == 1)) {
        cnt = na > nb ? na : nb;
        if (cnt > cap) return -1;
        for (int64_t i = 0; i < cnt; i++)
            if (!arith(op, a[na == 1 ? 0 : i], b[nb == 1 ? 0 : i], &out[i])) return -1;
        return cnt;
    }
    return -1;
}

bool kiln__onnx_is_int_node(const kiln_onnx *m, const kiln__onnx_node *n) {
    const kiln__onnx_value *v = kiln__onnx_value_find(m, n->outputs[0]);
    return v && (v->info.type == KILN_ONNX_INT64 || v->info.type == KILN_ONNX_INT32) && n->n_outputs == 1;
}

kiln_status kiln__onnx_lower_ints(kiln__onnx_lowering *l, const kiln__onnx_node *n) {
    const kiln__onnx_value *v = kiln__onnx_value_find(l->m, n->outputs[0]);
    int32_t k = (int32_t)(v - l->m->values);
    int64_t cap = l->pool_cap - l->pool_used, cnt;
    if (v->info.rank > 1 || (v->info.type != KILN_ONNX_INT64 && strcmp(n->op_type, "Shape") != 0) ||
        (cnt = evaluate(l, n, l->pool + l->pool_used, cap)) < 0)
        return kiln__error(
            KILN_E_UNSUPPORTED,
            "node %d '%s' (%s, opset %lld): an integer value Kiln does not compute (it evaluates "
            "shape arithmetic on vectors only)",
            (int)(n - l->m->nodes), n->name, n->op_type, (long long)l->m->opset);
    l->ints[k].v = take(l, cnt);
    l->ints[k].n = cnt;
    return KILN_OK;
}
