/*
 * onnx_fold.c - folds the small integer subgraphs that exporters write to compute shapes (Shape -> Gather
 * -> Unsqueeze -> Concat -> Reshape, with some Add, Mul and Div on the way), so that the shapes behind them
 * are known at load. After a node's shape is inferred, when every input is a constant (an initializer, a
 * Constant, or a value folded before it), its output is fully known and at most KILN__FOLD_MAX elements,
 * and the operator is one of these, its output becomes a constant too:
 *   Identity, Reshape, Squeeze, Unsqueeze, Flatten (any type: the same bytes, a new shape);
 *   Concat, Gather, Cast to int64, Add, Sub, Mul, Div (int64, as torch.onnx.export writes them for shapes).
 * Kiln computes them exactly as ONNX defines them (Div truncates toward zero, as C does); anything else is
 * left to run time.
 */
#include "import/onnx/onnx_internal.h"

#include "core/core.h"

#include <string.h>

#define KILN__FOLD_MAX 1024

static const kiln__onnx_tensor *const_in(const kiln_onnx *m, const kiln__onnx_node *n, int32_t k) {
    const kiln__onnx_value *v =
        k < n->n_inputs && n->inputs[k][0] ? kiln__onnx_value_find(m, n->inputs[k]) : NULL;
    return v ? v->init : NULL;
}

static int64_t get_i64(const kiln__onnx_tensor *t, uint64_t i) {
    int64_t v;
    int32_t w;
    if (t->type == KILN_ONNX_INT64) {
        memcpy(&v, (const uint8_t *)t->data + 8 * i, 8);
        return v;
    }
    memcpy(&w, (const uint8_t *)t->data + 4 * i, 4);
    return w;
}

/* Element i of the output of a numpy-broadcast binary op on two int64 tensors of rank <= 1. */
static bool binary(const char *op, const kiln__onnx_tensor *a, const kiln__onnx_tensor *b, uint64_t i,
                   int64_t *out) {
    int64_t x = get_i64(a, a->n_elements == 1 ? 0 : i), y = get_i64(b, b->n_elements == 1 ? 0 : i);
    if (!strcmp(op, "Add")) return !__builtin_add_overflow(x, y, out);
    if (!strcmp(op, "Sub")) return !__builtin_sub_overflow(x, y, out);
    if (!strcmp(op, "Mul")) return !__builtin_mul_overflow(x, y, out);
    if (y == 0 || (x == INT64_MIN && y == -1)) return false;
    *out = x / y;
    return true;
}

/* Compute the int64 elements of n's output 0 (count elements) into vals; false when Kiln does not fold it. */
static bool compute(const kiln_onnx *m, const kiln__onnx_node *n, uint64_t count, int64_t *vals) {
    const char *op = n->op_type;
    const kiln__onnx_tensor *a = const_in(m, n, 0), *b = const_in(m, n, 1);
    bool ints = a->type == KILN_ONNX_INT64 || a->type == KILN_ONNX_INT32;
    if (!strcmp(op, "Concat")) {
        uint64_t k = 0;
        for (int32_t j = 0; j < n->n_inputs; j++) {
            const kiln__onnx_tensor *t = const_in(m, n, j);
            if (!t || t->type != KILN_ONNX_INT64 || t->rank != 1) return false;
            for (uint64_t i = 0; i < t->n_elements && k < count; i++)
                vals[k++] = get_i64(t, i);
        }
        return k == count;
    }
    if (!strcmp(op, "Gather")) {
        if (!ints || a->rank != 1 || !b || (b->type != KILN_ONNX_INT64 && b->type != KILN_ONNX_INT32) ||
            b->n_elements != count)
            return false;
        for (uint64_t i = 0; i < count; i++) {
            int64_t j = get_i64(b, i);
            if (j < 0) j += (int64_t)a->n_elements;
            if (j < 0 || (uint64_t)j >= a->n_elements) return false; /* out of range: run time reports it */
            vals[i] = get_i64(a, (uint64_t)j);
        }
        return true;
    }
    if (!strcmp(op, "Cast")) {
        if (!ints || a->n_elements != count) return false;
        for (uint64_t i = 0; i < count; i++)
            vals[i] = get_i64(a, i);
        return true;
    }
    if (!b || a->type != KILN_ONNX_INT64 || b->type != KILN_ONNX_INT64 || a->rank > 1 || b->rank > 1)
        return false;
    if ((a->n_elements != 1 && a->n_elements != count) || (b->n_elements != 1 && b->n_elements != count))
        return false;
    for (uint64_t i = 0; i < count; i++)
        if (!binary(op, a, b, i, &vals[i])) return false;
    return true;
}

static bool same_bytes_op(const char *op) {
    return !strcmp(op, "Identity") || !strcmp(op, "Reshape") || !strcmp(op, "Squeeze") ||
           !strcmp(op, "Unsqueeze") || !strcmp(op, "Flatten");
}

static bool foldable(const char *op) {
    return same_bytes_op(op) || !strcmp(op, "Concat") || !strcmp(op, "Gather") || !strcmp(op, "Cast") ||
           !strcmp(op, "Add") || !strcmp(op, "Sub") || !strcmp(op, "Mul") || !strcmp(op, "Div");
}

kiln_status kiln__onnx_fold(kiln_onnx *m, const kiln__onnx_node *n) {
    kiln__onnx_value *out;
    kiln__onnx_tensor *t;
    uint64_t count = 1;
    if (!foldable(n->op_type) || n->n_outputs != 1 || !n->outputs[0][0]) return KILN_OK;
    for (int32_t k = 0; k < n->n_inputs; k++)
        if (n->inputs[k][0] && !const_in(m, n, k)) return KILN_OK;
    if (!const_in(m, n, 0)) return KILN_OK;
    out = kiln__onnx_value_find(m, n->outputs[0]);
    if (out->init || out->info.rank < 0) return KILN_OK;
    for (int32_t d = 0; d < out->info.rank; d++) {
        if (out->info.dims[d].value < 0) return KILN_OK;
        count *= (uint64_t)out->info.dims[d].value; /* bounded: stops growing past KILN__FOLD_MAX below */
        if (count > KILN__FOLD_MAX) return KILN_OK;
    }
    t = kiln__onnx_alloc(m, 1, sizeof *t, "a folded constant");
    int64_t *dims = kiln__onnx_alloc(m, (size_t)out->info.rank, sizeof *dims, "a folded constant");
    if (!t || !dims) return KILN_E_NOMEM;
    for (int32_t d = 0; d < out->info.rank; d++)
        dims[d] = out->info.dims[d].value;
    *t = (kiln__onnx_tensor){out->info.name, out->info.type, out->info.rank, dims, count, NULL, 0, false};
    if (same_bytes_op(n->op_type)) {
        const kiln__onnx_tensor *a = const_in(m, n, 0);
        if (a->n_elements != count) return KILN_OK;
        t->data = a->data;
        t->size = a->size;
    } else {
        int64_t *vals = kiln__onnx_alloc(m, (size_t)count, sizeof *vals, "a folded constant");
        if (!vals) return KILN_E_NOMEM;
        if (out->info.type != KILN_ONNX_INT64 || !compute(m, n, count, vals)) return KILN_OK;
        t->data = vals;
        t->size = count * 8;
    }
    out->init = t;
    return KILN_OK;
}
