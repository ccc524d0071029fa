/*
 * onnx_host.c - the values of an ONNX graph that Kiln computes on the host while a key is lowered: every
 * node whose inputs are constants or other host values, once the key binds the dynamic dims. Exporters
 * compute reshape targets from input shapes (Shape -> Gather -> Unsqueeze -> Concat -> Reshape), causal
 * masks from the sequence length (Range -> LessOrEqual -> And -> Where), position ids and rotary tables
 * (Range -> Mul -> Cos); all of it depends on shapes alone, so it is computed here, exactly, once per key,
 * and what the graph reads of it becomes a constant leaf (onnx_lower.c).
 *
 * Elements: int64, int32, uint8, int8 and bool values are held as int64 (bools 0 or 1), floats as double
 * holding a float32 value, every result rounded to float as float32 arithmetic would (a sum or product
 * computed in double and rounded once is the float32 result; libm's float functions for the others). Integer
 * arithmetic is overflow-checked, indices range-checked: a violation is an error naming the node, never
 * undefined behaviour. Shapes follow numpy broadcasting, any rank up to KILN_MAX_ONNX_RANK.
 *
 * Operators: Shape, Identity, Reshape, Flatten, Squeeze, Unsqueeze, Cast, Concat, Gather, GatherElements,
 * GatherND (batch_dims 0), Slice, Expand, Where, Range, ConstantOfShape, Transpose, Trilu; Equal, Less,
 * LessOrEqual, Greater, GreaterOrEqual, And, Or, Xor, Not, IsNaN; Add, Sub, Mul, Div, Mod, Pow, Max, Min,
 * Neg, Abs, Relu, Sqrt, Reciprocal, Exp, Log, Sin, Cos, Tanh, Sigmoid, Erf; QuantizeLinear, DequantizeLinear.
 * The data-movement operators read their index maps from onnx_index.c.
 */
#include "import/onnx/onnx_lower.h"

#include "core/core.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define R KILN_MAX_ONNX_RANK

/* ---- Scratch: blocks freed when the next key is lowered ---- */

typedef struct kiln__onnx_block {
    struct kiln__onnx_block *next;
    max_align_t data[];
} kiln__onnx_block;

void kiln__onnx_host_reset(kiln__onnx_lowering *l) {
    while (l->blocks) {
        kiln__onnx_block *b = l->blocks;
        l->blocks = b->next;
        kiln__dealloc(b);
    }
    l->host_bytes = 0;
    memset(l->host, 0, (size_t)KILN__MAX(1, l->m->n_values) * sizeof *l->host);
}

void *kiln__onnx_scratch(kiln__onnx_lowering *l, int64_t n, size_t size) {
    kiln__onnx_block *b;
    if (n < 0 || (uint64_t)n > (KILN_ONNX_HOST_BYTES - l->host_bytes) / size) return NULL;
    if (!(b = kiln__alloc(sizeof *b + (size_t)KILN__MAX(n, 1) * size))) return NULL;
    b->next = l->blocks;
    l->blocks = b;
    l->host_bytes += (size_t)n * size;
    return b->data;
}

/* ---- Errors ---- */

static kiln_status fail(const kiln__onnx_lowering *l, const kiln__onnx_node *n, const char *fmt, ...)
    KILN__PRINTF(3, 4);

static kiln_status fail(const kiln__onnx_lowering *l, const kiln__onnx_node *n, const char *fmt, ...) {
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return kiln__error(KILN_E_UNSUPPORTED, "node %d '%s' (%s, opset %lld): %s", (int)(n - l->m->nodes),
                       n->name, n->op_type, (long long)l->m->opset, msg);
}

/* ---- Values ---- */

static int32_t index_of(const kiln__onnx_lowering *l, const char *name) {
    const kiln__onnx_value *v = name[0] ? kiln__onnx_value_find(l->m, name) : NULL;
    return v ? (int32_t)(v - l->m->values) : -1;
}

static bool held_type(int32_t t) {
    return t == KILN_ONNX_FLOAT || t == KILN_ONNX_INT64 || t == KILN_ONNX_INT32 || t == KILN_ONNX_BOOL ||
           t == KILN_ONNX_UINT8 || t == KILN_ONNX_INT8;
}

/* A fresh value of type and shape, storage from the scratch; NULL when over the limits. */
static kiln__onnx_host *make(kiln__onnx_lowering *l, kiln__onnx_host *h, int32_t type, int32_t rank,
                             const int64_t *dims) {
    int64_t n = 1;
    memset(h, 0, sizeof *h);
    h->type =
        type == KILN_ONNX_INT32 || type == KILN_ONNX_UINT8 || type == KILN_ONNX_INT8 ? KILN_ONNX_INT64 : type;
    h->rank = rank;
    for (int32_t d = 0; d < rank; d++) {
        if (dims[d] < 0 || __builtin_mul_overflow(n, dims[d], &n) || n > KILN_ONNX_HOST_MAX) return NULL;
        h->dims[d] = dims[d];
    }
    h->n = n;
    if (h->type == KILN_ONNX_FLOAT)
        h->f = kiln__onnx_scratch(l, n, sizeof *h->f);
    else
        h->i = kiln__onnx_scratch(l, n, sizeof *h->i);
    return h->f || h->i ? h : NULL;
}

const kiln__onnx_host *kiln__onnx_host_of(kiln__onnx_lowering *l, const char *name) {
    int32_t k = index_of(l, name);
    const kiln__onnx_tensor *t;
    kiln__onnx_host h;
    if (k < 0) return NULL;
    if (l->host[k].type) return &l->host[k];
    t = l->m->values[k].init;
    if (!t || !held_type(t->type) || t->rank > R || !make(l, &h, t->type, t->rank, t->dims)) return NULL;
    for (int64_t j = 0; j < h.n; j++) {
        const uint8_t *p = (const uint8_t *)t->data;
        if (t->type == KILN_ONNX_FLOAT) {
            float v;
            memcpy(&v, p + 4 * j, 4);
            h.f[j] = v;
        } else if (t->type == KILN_ONNX_INT64) {
            memcpy(&h.i[j], p + 8 * j, 8);
        } else if (t->type == KILN_ONNX_INT32) {
            int32_t v;
            memcpy(&v, p + 4 * j, 4);
            h.i[j] = v;
        } else if (t->type == KILN_ONNX_UINT8) {
            h.i[j] = p[j];
        } else if (t->type == KILN_ONNX_INT8) {
            h.i[j] = (int8_t)p[j];
        } else {
            h.i[j] = p[j] != 0;
        }
    }
    l->host[k] = h;
    return &l->host[k];
}

const int64_t *kiln__onnx_ints_of(kiln__onnx_lowering *l, const char *name, int64_t *n) {
    const kiln__onnx_host *h = name[0] ? kiln__onnx_host_of(l, name) : NULL;
    if (!h || !h->i) return NULL;
    *n = h->n;
    return h->i;
}

static double fget(const kiln__onnx_host *h, int64_t j) {
    return h->f ? h->f[j] : (double)h->i[j];
}

/* A float as int64, truncated toward zero as ONNX's Cast does; false when out of range or NaN. */
static bool to_int(double x, int64_t *out) {
    if (!(x > -9223372036854775808.0 && x < 9223372036854775808.0)) return false;
    *out = (int64_t)x;
    return true;
}

/* ---- Broadcasting ---- */

/* numpy broadcasting of n values' shapes. */
static bool bcast_shape(const kiln__onnx_host *const *in, int32_t n, int32_t *rank, int64_t *dims) {
    *rank = 0;
    for (int32_t k = 0; k < n; k++)
        *rank = KILN__MAX(*rank, in[k]->rank);
    for (int32_t a = 0; a < *rank; a++) {
        dims[a] = 1;
        for (int32_t k = 0; k < n; k++) {
            int32_t b = a - (*rank - in[k]->rank);
            int64_t d = b >= 0 ? in[k]->dims[b] : 1;
            if (d == dims[a] || d == 1) continue;
            if (dims[a] != 1) return false;
            dims[a] = d;
        }
    }
    return true;
}

/* Walks the elements of a broadcast shape, keeping each input's element offset. */
typedef struct walk {
    int32_t rank, n_in;
    int64_t dims[R], cnt[R], st[3][R], off[3];
} walk;

static void walk_init(walk *w, const kiln__onnx_host *const *in, int32_t n_in, int32_t rank,
                      const int64_t *dims) {
    memset(w, 0, sizeof *w);
    w->rank = rank;
    w->n_in = n_in;
    memcpy(w->dims, dims, (size_t)rank * sizeof *dims);
    for (int32_t k = 0; k < n_in; k++) {
        int64_t s = 1;
        for (int32_t a = rank - 1; a >= 0; a--) {
            int32_t b = a - (rank - in[k]->rank);
            int64_t d = b >= 0 ? in[k]->dims[b] : 1;
            w->st[k][a] = d == 1 ? 0 : s;
            s *= d;
        }
    }
}

static void walk_next(walk *w) {
    for (int32_t a = w->rank - 1; a >= 0; a--) {
        for (int32_t k = 0; k < w->n_in; k++)
            w->off[k] += w->st[k][a];
        if (++w->cnt[a] < w->dims[a]) return;
        for (int32_t k = 0; k < w->n_in; k++)
            w->off[k] -= w->st[k][a] * w->dims[a];
        w->cnt[a] = 0;
    }
}

/* ---- Elementwise ---- */

static bool is(const char *op, const char *name) {
    return !strcmp(op, name);
}

/* One element of a binary op on integers (bools included); false on overflow or division by zero. */
static bool int_binary(const char *op, int64_t x, int64_t y, bool fmod_attr, int64_t *out) {
    if (is(op, "Add")) return !__builtin_add_overflow(x, y, out);
    if (is(op, "Sub")) return !__builtin_sub_overflow(x, y, out);
    if (is(op, "Mul")) return !__builtin_mul_overflow(x, y, out);
    if (is(op, "Max")) return *out = x > y ? x : y, true;
    if (is(op, "Min")) return *out = x < y ? x : y, true;
    if (is(op, "Equal")) return *out = x == y, true;
    if (is(op, "Less")) return *out = x < y, true;
    if (is(op, "LessOrEqual")) return *out = x <= y, true;
    if (is(op, "Greater")) return *out = x > y, true;
    if (is(op, "GreaterOrEqual")) return *out = x >= y, true;
    if (is(op, "And")) return *out = x && y, true;
    if (is(op, "Or")) return *out = x || y, true;
    if (is(op, "Xor")) return *out = (x != 0) != (y != 0), true;
    if (is(op, "Pow")) { /* |x| >= 2 overflows within 63 steps; 0, 1 and -1 are answered directly */
        int64_t r = 1;
        if (x == 0) return *out = y == 0, y >= 0;
        if (x == 1 || x == -1) return *out = x == 1 || y % 2 == 0 ? 1 : -1, true;
        if (y < 0) return *out = 0, true;
        for (int64_t e = 0; e < y; e++)
            if (__builtin_mul_overflow(r, x, &r)) return false;
        return *out = r, true;
    }
    if (y == 0 || (x == INT64_MIN && y == -1)) return false; /* Div, Mod */
    if (is(op, "Div")) return *out = x / y, true;
    *out = x % y; /* Mod: fmod keeps the dividend's sign, else the divisor's (Python's %) */
    if (!fmod_attr && *out != 0 && ((*out < 0) != (y < 0))) *out += y;
    return true;
}

/* One element of a binary op on float32 values (held as double). Comparisons give 0 or 1. */
static double float_binary(const char *op, double x, double y) {
    if (is(op, "Add")) return (float)(x + y);
    if (is(op, "Sub")) return (float)(x - y);
    if (is(op, "Mul")) return (float)(x * y);
    if (is(op, "Div")) return (float)(x / y);
    if (is(op, "Pow")) return powf((float)x, (float)y);
    if (is(op, "Mod")) return fmodf((float)x, (float)y);
    if (is(op, "Max")) return isnan(x) || isnan(y) ? NAN : x > y ? x : y;
    if (is(op, "Min")) return isnan(x) || isnan(y) ? NAN : x < y ? x : y;
    if (is(op, "Equal")) return x == y;
    if (is(op, "Less")) return x < y;
    if (is(op, "LessOrEqual")) return x <= y;
    if (is(op, "Greater")) return x > y;
    return x >= y; /* GreaterOrEqual */
}

static bool is_compare(const char *op) {
    return is(op, "Equal") || is(op, "Less") || is(op, "LessOrEqual") || is(op, "Greater") ||
           is(op, "GreaterOrEqual");
}

static bool is_binary(const char *op) {
    return is_compare(op) || is(op, "Add") || is(op, "Sub") || is(op, "Mul") || is(op, "Div") ||
           is(op, "Mod") || is(op, "Pow") || is(op, "Max") || is(op, "Min") || is(op, "And") ||
           is(op, "Or") || is(op, "Xor");
}

static bool is_unary(const char *op) {
    return is(op, "Neg") || is(op, "Abs") || is(op, "Relu") || is(op, "Sqrt") || is(op, "Reciprocal") ||
           is(op, "Exp") || is(op, "Log") || is(op, "Sin") || is(op, "Cos") || is(op, "Tanh") ||
           is(op, "Sigmoid") || is(op, "Erf") || is(op, "Not") || is(op, "IsNaN");
}

static double float_unary(const char *op, double v) {
    float x = (float)v;
    if (is(op, "Neg")) return -x;
    if (is(op, "Abs")) return fabsf(x);
    if (is(op, "Relu")) return x > 0.0f ? x : 0.0f;
    if (is(op, "Sqrt")) return sqrtf(x);
    if (is(op, "Reciprocal")) return 1.0f / x;
    if (is(op, "Exp")) return expf(x);
    if (is(op, "Log")) return logf(x);
    if (is(op, "Sin")) return sinf(x);
    if (is(op, "Cos")) return cosf(x);
    if (is(op, "Tanh")) return tanhf(x);
    if (is(op, "Sigmoid")) return 1.0f / (1.0f + expf(-x));
    return erff(x);
}

/* Binary (and variadic Max, Min) ops with broadcasting, one pair at a time. */
static kiln_status eval_binary(kiln__onnx_lowering *l, const kiln__onnx_node *n,
                               const kiln__onnx_host *const *in, int32_t n_in, kiln__onnx_host *out) {
    const char *op = n->op_type;
    bool fm = false;
    const kiln__onnx_attr *a = kiln__onnx_find_attr(n, "fmod");
    if (a) fm = a->i != 0;
    for (int32_t j = 0; j < n_in; j++) {
        if (!in[j]) return fail(l, n, "an omitted operand");
        if (!in[0]->f && in[j]->f) return fail(l, n, "an integer operand with a float one");
    }
    kiln__onnx_host acc = *in[0];
    for (int32_t k = 1; k < n_in; k++) {
        const kiln__onnx_host *pair[2] = {&acc, in[k]};
        int32_t rank;
        int64_t dims[R];
        bool flt = acc.f != NULL;
        int32_t type = is_compare(op) ? KILN_ONNX_BOOL : acc.type;
        if (!bcast_shape(pair, 2, &rank, dims)) return fail(l, n, "operands that do not broadcast");
        kiln__onnx_host r;
        if (!make(l, &r, type, rank, dims))
            return fail(l, n, "a shape value over %d elements", KILN_ONNX_HOST_MAX);
        walk w;
        walk_init(&w, pair, 2, rank, dims);
        for (int64_t j = 0; j < r.n; j++, walk_next(&w)) {
            if (flt) {
                double v = float_binary(op, acc.f[w.off[0]], fget(in[k], w.off[1]));
                if (r.f)
                    r.f[j] = v;
                else
                    r.i[j] = v != 0.0;
            } else if (!int_binary(op, acc.i[w.off[0]], in[k]->i[w.off[1]], fm, &r.i[j])) {
                return fail(l, n, "integer overflow or division by zero at element %lld", (long long)j);
            }
        }
        acc = r;
    }
    *out = acc;
    return KILN_OK;
}

static kiln_status eval_unary(kiln__onnx_lowering *l, const kiln__onnx_node *n, const kiln__onnx_host *x,
                              kiln__onnx_host *out) {
    const char *op = n->op_type;
    bool to_bool = is(op, "Not") || is(op, "IsNaN");
    if (!make(l, out, to_bool ? KILN_ONNX_BOOL : x->type, x->rank, x->dims))
        return fail(l, n, "out of scratch");
    for (int64_t j = 0; j < x->n; j++) {
        if (is(op, "Not"))
            out->i[j] = !x->i[j];
        else if (is(op, "IsNaN"))
            out->i[j] = x->f && isnan(x->f[j]);
        else if (x->f)
            out->f[j] = float_unary(op, x->f[j]);
        else if (is(op, "Neg") || is(op, "Abs")) {
            if (x->i[j] == INT64_MIN) return fail(l, n, "integer overflow");
            out->i[j] = is(op, "Neg") || x->i[j] < 0 ? -x->i[j] : x->i[j];
        } else if (is(op, "Relu"))
            out->i[j] = x->i[j] > 0 ? x->i[j] : 0;
        else
            return fail(l, n, "%s of an integer value", op);
    }
    return KILN_OK;
}

/* ---- Shapes and data movement ---- */

/* Copy the elements of x at the flat indices idx[0..out->n) into out (same element kind). */
static void gather_flat(const kiln__onnx_host *x, const int64_t *idx, kiln__onnx_host *out) {
    for (int64_t j = 0; j < out->n; j++) {
        if (out->f)
            out->f[j] = x->f[idx[j]];
        else
            out->i[j] = x->i[idx[j]];
    }
}

static kiln_status eval_concat(kiln__onnx_lowering *l, const kiln__onnx_node *n, kiln__onnx_host *out) {
    const kiln__onnx_host *in[128];
    const kiln__onnx_attr *a = kiln__onnx_find_attr(n, "axis");
    int64_t ax = a ? a->i : 0, dims[R], outer = 1;
    int32_t r;
    if (n->n_inputs < 1 || n->n_inputs > 128) return fail(l, n, "1 to 128 inputs");
    for (int32_t k = 0; k < n->n_inputs; k++)
        if (!(in[k] = kiln__onnx_host_of(l, n->inputs[k]))) return fail(l, n, "an input is not known");
    r = in[0]->rank;
    if (ax < 0) ax += r;
    if (ax < 0 || ax >= r) return fail(l, n, "axis out of range");
    memcpy(dims, in[0]->dims, sizeof dims);
    dims[ax] = 0;
    for (int32_t k = 0; k < n->n_inputs; k++) {
        if (in[k]->rank != r || (in[k]->f != NULL) != (in[0]->f != NULL))
            return fail(l, n, "inputs differ in rank or type");
        for (int32_t d = 0; d < r; d++)
            if (d != ax && in[k]->dims[d] != in[0]->dims[d])
                return fail(l, n, "inputs differ in a dim off the axis");
        if (__builtin_add_overflow(dims[ax], in[k]->dims[ax], &dims[ax]))
            return fail(l, n, "too many elements");
    }
    if (!make(l, out, in[0]->type, r, dims))
        return fail(l, n, "a value over %d elements", KILN_ONNX_HOST_MAX);
    for (int32_t d = 0; d < ax; d++)
        outer *= dims[d];
    int64_t at = 0;
    for (int64_t o = 0; o < outer; o++)
        for (int32_t k = 0; k < n->n_inputs; k++) {
            int64_t chunk = outer ? in[k]->n / outer : 0;
            for (int64_t e = 0; e < chunk; e++, at++) {
                if (out->f)
                    out->f[at] = in[k]->f[o * chunk + e];
                else
                    out->i[at] = in[k]->i[o * chunk + e];
            }
        }
    return KILN_OK;
}

/* The dims of a value known to the lowering: computed (Kiln's tensor) or a host value. */
static int32_t dims_of(kiln__onnx_lowering *l, const char *name, int64_t *dims) {
    int32_t k = index_of(l, name);
    const kiln__onnx_host *h;
    if (k < 0) return -1;
    if (l->vals[k] && l->big[k].rank) {
        memcpy(dims, l->big[k].dims, (size_t)l->big[k].rank * sizeof *dims);
        return l->big[k].rank;
    }
    if (l->vals[k]) {
        int32_t r = l->m->values[k].info.rank;
        if (r < 0 || r > KILN_MAX_DIMS) return -1;
        kiln__onnx_shape_of(l->vals[k], r, dims);
        return r;
    }
    if (!(h = kiln__onnx_host_of(l, name))) return -1;
    memcpy(dims, h->dims, (size_t)h->rank * sizeof *dims);
    return h->rank;
}

static kiln_status eval_shape(kiln__onnx_lowering *l, const kiln__onnx_node *n, kiln__onnx_host *out) {
    int64_t dims[R];
    int32_t r = dims_of(l, n->inputs[0], dims);
    if (r < 0) return fail(l, n, "the input's shape is not known");
    const kiln__onnx_attr *s = kiln__onnx_find_attr(n, "start"), *e = kiln__onnx_find_attr(n, "end");
    int64_t start = s ? s->i : 0, end = e ? e->i : r;
    if (start < 0) start += r;
    if (end < 0) end += r;
    start = start < 0 ? 0 : start > r ? r : start;
    end = end < 0 ? 0 : end > r ? r : end;
    if (end < start) end = start;
    int64_t len = end - start;
    if (!make(l, out, KILN_ONNX_INT64, 1, &len)) return fail(l, n, "out of scratch");
    memcpy(out->i, dims + start, (size_t)len * sizeof *dims);
    return KILN_OK;
}

static kiln_status eval_cast(kiln__onnx_lowering *l, const kiln__onnx_node *n, const kiln__onnx_host *x,
                             kiln__onnx_host *out) {
    const kiln__onnx_attr *a = kiln__onnx_find_attr(n, "to");
    int32_t to = a ? (int32_t)a->i : 0;
    if (!held_type(to)) return fail(l, n, "a cast to %s", kiln__onnx_type_name(to));
    if (!make(l, out, to, x->rank, x->dims)) return fail(l, n, "out of scratch");
    for (int64_t j = 0; j < x->n; j++) {
        if (to == KILN_ONNX_FLOAT)
            out->f[j] = (float)fget(x, j);
        else if (to == KILN_ONNX_BOOL)
            out->i[j] = x->f ? x->f[j] != 0.0 : x->i[j] != 0;
        else if (!x->f)
            out->i[j] = to == KILN_ONNX_INT32 ? (int32_t)(uint32_t)(uint64_t)x->i[j] : x->i[j];
        else if (!to_int(x->f[j], &out->i[j]))
            return fail(l, n, "element %lld (%g) does not fit the integer type", (long long)j, x->f[j]);
    }
    return KILN_OK;
}

static kiln_status eval_range(kiln__onnx_lowering *l, const kiln__onnx_node *n,
                              const kiln__onnx_host *const *in, kiln__onnx_host *out) {
    int64_t cnt;
    if (in[0]->n != 1 || in[1]->n != 1 || in[2]->n != 1)
        return fail(l, n, "start, limit and delta must be scalars");
    if (in[0]->f) {
        double s = in[0]->f[0], lim = fget(in[1], 0), d = fget(in[2], 0), c = ceil((lim - s) / d);
        if (d == 0.0 || !(c < (double)KILN_ONNX_HOST_MAX))
            return fail(l, n, "a delta of 0 or too many elements");
        cnt = c > 0 ? (int64_t)c : 0;
        if (!make(l, out, KILN_ONNX_FLOAT, 1, &cnt)) return fail(l, n, "out of scratch");
        for (int64_t j = 0; j < cnt; j++)
            out->f[j] = (float)(s + (double)j * d);
        return KILN_OK;
    }
    int64_t s = in[0]->i[0], lim = in[1]->i[0], d = in[2]->i[0], span;
    if (d == 0 || __builtin_sub_overflow(lim, s, &span)) return fail(l, n, "a delta of 0 or an overflow");
    cnt = (span > 0) == (d > 0) && span != 0 ? (span > 0 ? (span - 1) / d + 1 : (span + 1) / d + 1) : 0;
    if (cnt > KILN_ONNX_HOST_MAX) return fail(l, n, "too many elements");
    if (!make(l, out, KILN_ONNX_INT64, 1, &cnt)) return fail(l, n, "out of scratch");
    for (int64_t j = 0; j < cnt; j++)
        out->i[j] = s + j * d; /* within [s, lim): no overflow */
    return KILN_OK;
}

static kiln_status eval_trilu(kiln__onnx_lowering *l, const kiln__onnx_node *n, const kiln__onnx_host *x,
                              kiln__onnx_host *out) {
    const kiln__onnx_attr *a = kiln__onnx_find_attr(n, "upper");
    const kiln__onnx_host *kh =
        n->n_inputs > 1 && n->inputs[1][0] ? kiln__onnx_host_of(l, n->inputs[1]) : NULL;
    bool upper = !a || a->i != 0;
    int64_t k = kh && kh->i ? kh->i[0] : 0;
    if (x->rank < 2) return fail(l, n, "a value of rank under 2");
    if (!make(l, out, x->type, x->rank, x->dims)) return fail(l, n, "out of scratch");
    int64_t rows = x->dims[x->rank - 2], cols = x->dims[x->rank - 1];
    for (int64_t j = 0; j < x->n; j++) {
        int64_t c = j % cols, r = (j / cols) % rows;
        bool keep = upper ? c - r >= k : c - r <= k; /* |k| is bounded by the int64 range of c - r */
        if (out->f)
            out->f[j] = keep ? x->f[j] : 0.0;
        else
            out->i[j] = keep ? x->i[j] : 0;
    }
    return KILN_OK;
}

/* DequantizeLinear, (x - zero_point) * scale, and QuantizeLinear, saturate(round(x / scale) + zero_point):
 * per tensor (a scalar scale) or per channel along axis (a scale per index of that axis). */
static kiln_status eval_quant(kiln__onnx_lowering *l, const kiln__onnx_node *n,
                              const kiln__onnx_host *const *in, kiln__onnx_host *out) {
    const kiln__onnx_host *x = in[0], *sc = in[1], *zp = in[2];
    const kiln__onnx_attr *a = kiln__onnx_find_attr(n, "axis");
    bool dq = is(n->op_type, "DequantizeLinear");
    int64_t axis = a ? a->i : 1, inner = 1, ch = 1;
    int32_t zt = zp ? kiln__onnx_value_find(l->m, n->inputs[2])->info.type : KILN_ONNX_UINT8;
    if (!sc || !sc->f || (zp && zp->n != sc->n) || (zp && !zp->i))
        return fail(l, n, "bad scale or zero point");
    if (sc->n > 1) {
        if (axis < 0) axis += x->rank;
        if (axis < 0 || axis >= x->rank || x->dims[axis] != sc->n)
            return fail(l, n, "scales do not match the axis");
        ch = sc->n;
        for (int32_t d = (int32_t)axis + 1; d < x->rank; d++)
            inner *= x->dims[d];
    }
    if (!make(l, out, dq ? KILN_ONNX_FLOAT : KILN_ONNX_INT64, x->rank, x->dims))
        return fail(l, n, "out of scratch");
    for (int64_t j = 0; j < x->n; j++) {
        int64_t c = ch > 1 ? (j / inner) % ch : 0, z = zp ? zp->i[c] : 0;
        if (dq) {
            out->f[j] = (float)((double)((float)(fget(x, j) - (double)z)) * sc->f[c]);
        } else {
            double q = nearbyint((double)(float)(fget(x, j) / sc->f[c])) + (double)z;
            q = q != q ? 0.0 : q; /* NaN: 0, where an integer type cannot say NaN */
            double lo = zt == KILN_ONNX_INT8 ? -128 : 0, hi = zt == KILN_ONNX_INT8 ? 127 : 255;
            out->i[j] = (int64_t)(q < lo ? lo : q > hi ? hi : q);
        }
    }
    return KILN_OK;
}

/* ---- Which nodes, and the evaluation ---- */

static bool host_op(const char *op) {
    static const char *const ops[] = {"Shape",
                                      "Identity",
                                      "Reshape",
                                      "Flatten",
                                      "Squeeze",
                                      "Unsqueeze",
                                      "Cast",
                                      "Concat",
                                      "Gather",
                                      "GatherElements",
                                      "GatherND",
                                      "Slice",
                                      "Expand",
                                      "Where",
                                      "Range",
                                      "ConstantOfShape",
                                      "Transpose",
                                      "Trilu",
                                      "DequantizeLinear",
                                      "QuantizeLinear"};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (is(op, ops[i])) return true;
    return is_binary(op) || is_unary(op);
}

bool kiln__onnx_host_node(kiln__onnx_lowering *l, const kiln__onnx_node *n) {
    bool computed = false, small = true;
    const kiln__onnx_value *out = kiln__onnx_value_find(l->m, n->outputs[0]);
    if (n->n_outputs != 1 || !host_op(n->op_type) || !out) return false;
    if (is(n->op_type, "Shape")) return true;
    for (int32_t j = 0; j < n->n_inputs; j++) {
        int32_t k = index_of(l, n->inputs[j]);
        if (!n->inputs[j][0]) continue;
        if (k < 0) return false;
        if (l->host[k].type) {
            computed = true;
        } else if (l->m->values[k].init && held_type(l->m->values[k].init->type)) {
            if (l->m->values[k].init->n_elements > KILN_ONNX_HOST_SMALL) small = false;
        } else {
            return false;
        }
    }
    /* A float computation on large constants alone is the IR's (constant folding, once per session). */
    return out->info.type != KILN_ONNX_FLOAT || computed || small;
}

/* Reshape, Flatten, Squeeze, Unsqueeze and Identity: the same elements under new dims. */
static kiln_status eval_reshape(kiln__onnx_lowering *l, const kiln__onnx_node *n, const kiln__onnx_host *x,
                                kiln__onnx_host *out) {
    int64_t nv = 0;
    const int64_t *v = n->n_inputs > 1 && n->inputs[1][0] ? kiln__onnx_ints_of(l, n->inputs[1], &nv) : NULL;
    const char *why = "";
    *out = *x;
    out->rank = kiln__onnx_reshape_dims(n, x->rank, x->dims, v, nv, out->dims, &why);
    return out->rank < 0 ? fail(l, n, "%s", why) : KILN_OK;
}

/* Slice, Transpose, Expand, Gather, GatherElements and GatherND: the index map (onnx_index.c) applied. */
static kiln_status eval_movement(kiln__onnx_lowering *l, const kiln__onnx_node *n, const kiln__onnx_host *x,
                                 kiln__onnx_host *out) {
    int64_t *idx, dims[R];
    int32_t rank;
    const char *why = "";
    if (kiln__onnx_index_map(l, n, x->rank, x->dims, &rank, dims, &idx, &why) < 0)
        return fail(l, n, "%s", why);
    if (!make(l, out, x->type, rank, dims)) return fail(l, n, "out of scratch");
    gather_flat(x, idx, out);
    return KILN_OK;
}

static kiln_status eval_where(kiln__onnx_lowering *l, const kiln__onnx_node *n,
                              const kiln__onnx_host *const *in, kiln__onnx_host *out) {
    int64_t dims[R];
    int32_t rank;
    walk w;
    if (!in[1] || !in[2] || (in[1]->f != NULL) != (in[2]->f != NULL)) return fail(l, n, "bad operands");
    if (!bcast_shape(in, 3, &rank, dims)) return fail(l, n, "operands that do not broadcast");
    if (!make(l, out, in[1]->type, rank, dims))
        return fail(l, n, "a value over %d elements", KILN_ONNX_HOST_MAX);
    walk_init(&w, in, 3, rank, dims);
    for (int64_t j = 0; j < out->n; j++, walk_next(&w)) {
        bool c = in[0]->i ? in[0]->i[w.off[0]] != 0 : in[0]->f[w.off[0]] != 0.0;
        if (out->f)
            out->f[j] = c ? in[1]->f[w.off[1]] : in[2]->f[w.off[2]];
        else
            out->i[j] = c ? in[1]->i[w.off[1]] : in[2]->i[w.off[2]];
    }
    return KILN_OK;
}

/* ConstantOfShape: the value attribute's one element (float 0 without one) at every place of the shape. */
static kiln_status eval_constant_of_shape(kiln__onnx_lowering *l, const kiln__onnx_node *n,
                                          const kiln__onnx_host *shape, kiln__onnx_host *out) {
    const kiln__onnx_attr *a = kiln__onnx_find_attr(n, "value");
    const kiln__onnx_tensor *t = a ? a->t : NULL;
    if (!shape->i || shape->rank != 1 || shape->n > R)
        return fail(l, n, "the shape is not an integer vector of up to 16");
    if (t && (!held_type(t->type) || t->n_elements != 1))
        return fail(l, n, "a value of type %s", kiln__onnx_type_name(t->type));
    if (!make(l, out, t ? t->type : KILN_ONNX_FLOAT, (int32_t)shape->n, shape->i))
        return fail(l, n, "a value over %d elements, or a negative dim", KILN_ONNX_HOST_MAX);
    double f = 0.0;
    int64_t v = 0;
    if (t) { /* read as an initializer's element is */
        const uint8_t *p = t->data;
        float f32;
        int32_t i32;
        switch (t->type) {
        case KILN_ONNX_FLOAT: memcpy(&f32, p, 4), f = f32; break;
        case KILN_ONNX_INT64: memcpy(&v, p, 8); break;
        case KILN_ONNX_INT32: memcpy(&i32, p, 4), v = i32; break;
        case KILN_ONNX_UINT8: v = p[0]; break;
        case KILN_ONNX_INT8: v = (int8_t)p[0]; break;
        default: v = p[0] != 0; break;
        }
    }
    for (int64_t j = 0; j < out->n; j++) {
        if (out->f)
            out->f[j] = f;
        else
            out->i[j] = v;
    }
    return KILN_OK;
}

kiln_status kiln__onnx_host_eval(kiln__onnx_lowering *l, const kiln__onnx_node *n) {
    const char *op = n->op_type;
    int32_t k = index_of(l, n->outputs[0]), n_in = 0;
    const kiln__onnx_host *in[128] = {NULL};
    kiln__onnx_host out;
    kiln_status s;
    if (k < 0) return kiln__error(KILN_E_INTERNAL, "node output without a value");
    if (is(op, "Shape")) {
        if ((s = eval_shape(l, n, &out))) return s;
        l->host[k] = out;
        return KILN_OK;
    }
    for (int32_t j = 0; j < n->n_inputs && j < 128; j++) {
        if (!n->inputs[j][0]) continue;
        if (!(in[j] = kiln__onnx_host_of(l, n->inputs[j])))
            return fail(l, n, "input '%s' is not known", n->inputs[j]);
        n_in = j + 1;
    }
    if (!in[0] && !is(op, "Concat")) return fail(l, n, "its first input is omitted");
    if (is(op, "Identity") || is(op, "Reshape") || is(op, "Flatten") || is(op, "Squeeze") ||
        is(op, "Unsqueeze"))
        s = eval_reshape(l, n, in[0], &out);
    else if (is(op, "Cast"))
        s = eval_cast(l, n, in[0], &out);
    else if (is(op, "Concat"))
        s = eval_concat(l, n, &out);
    else if (is(op, "Slice") || is(op, "Transpose") || is(op, "Expand") || is(op, "Gather") ||
             is(op, "GatherElements") || is(op, "GatherND"))
        s = eval_movement(l, n, in[0], &out);
    else if (is(op, "Where"))
        s = eval_where(l, n, in, &out);
    else if (is(op, "Range"))
        s = n_in == 3 && in[1] && in[2] ? eval_range(l, n, in, &out) : fail(l, n, "three inputs needed");
    else if (is(op, "ConstantOfShape"))
        s = eval_constant_of_shape(l, n, in[0], &out);
    else if (is(op, "DequantizeLinear") || is(op, "QuantizeLinear"))
        s = eval_quant(l, n, in, &out);
    else if (is(op, "Trilu"))
        s = eval_trilu(l, n, in[0], &out);
    else if (is_unary(op))
        s = eval_unary(l, n, in[0], &out);
    else if (is_binary(op))
        s = eval_binary(l, n, in, n_in, &out);
    else
        return fail(l, n, "Kiln does not compute this operator on shapes");
    if (s) return s;
    l->host[k] = out;
    return KILN_OK;
}
