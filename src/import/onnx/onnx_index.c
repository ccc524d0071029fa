/*
 * onnx_index.c - where each element of a data-movement operator's output comes from: the dims of Reshape and
 * its kin, Slice's start, step and count per axis, and the flat source index of every output element of
 * Slice, Transpose, Expand, Gather, GatherElements and GatherND. One definition serves both places that move
 * data: the host evaluation of values known from shapes (onnx_host.c) and the lowering of the same operators
 * on computed data, where the map becomes a constant I32 table of an element gather (onnx_lower.c).
 *
 * Shapes are ONNX's (outermost first), any rank up to KILN_MAX_ONNX_RANK; every index is range-checked and
 * every count bounded by KILN_ONNX_HOST_MAX, so a hostile file gets a reason, never an out-of-bounds read.
 */
#include "import/onnx/onnx_lower.h"

#include "core/core.h"

#include <string.h>

#define R KILN_MAX_ONNX_RANK

static bool is(const char *op, const char *name) {
    return !strcmp(op, name);
}

int32_t kiln__onnx_reshape_dims(const kiln__onnx_node *n, int32_t r, const int64_t *in, const int64_t *v,
                                int64_t nv, int64_t *out, const char **why) {
    const char *op = n->op_type;
    int64_t total = 1, known = 1;
    int32_t ro = 0;
    const kiln__onnx_attr *a;
    for (int32_t i = 0; i < r; i++)
        if (__builtin_mul_overflow(total, in[i], &total)) return *why = "the element count overflows", -1;
    if (is(op, "Identity") || is(op, "Cast")) {
        memcpy(out, in, (size_t)r * sizeof *in);
        return r;
    }
    if (is(op, "Flatten")) {
        int64_t axis = (a = kiln__onnx_find_attr(n, "axis")) ? a->i : 1, lead = 1;
        if (axis < 0) axis += r;
        if (axis < 0 || axis > r) return *why = "axis out of range", -1;
        for (int32_t i = 0; i < axis; i++)
            lead *= in[i];
        out[0] = lead;
        out[1] = lead ? total / lead : 0;
        return 2;
    }
    if (is(op, "Reshape")) {
        int32_t infer = -1;
        bool allowzero = (a = kiln__onnx_find_attr(n, "allowzero")) && a->i != 0;
        if (!v || nv > R) return *why = "the target shape is not known or too long", -1;
        for (ro = 0; ro < (int32_t)nv; ro++) {
            out[ro] = v[ro] == 0 && !allowzero && ro < r ? in[ro] : v[ro];
            if (out[ro] == -1 && infer < 0)
                infer = ro;
            else if (out[ro] < 0 || __builtin_mul_overflow(known, out[ro], &known))
                return *why = "a target dim is negative or overflows", -1;
        }
        if (infer >= 0) {
            if (known == 0 || total % known)
                return *why = "the inferred dim does not divide the elements", -1;
            out[infer] = total / known;
        } else if (known != total) {
            return *why = "the target shape holds another number of elements", -1;
        }
        return ro;
    }
    /* Squeeze (axes optional: every dim of 1) and Unsqueeze (axes required). */
    bool unsq = is(op, "Unsqueeze");
    int32_t rank_out = unsq ? r + (int32_t)nv : r;
    uint32_t marked = 0;
    if (unsq && !v) return *why = "the axes are not known", -1;
    if (nv > R || rank_out > R) return *why = "the result's rank is over 16", -1;
    for (int64_t i = 0; v && i < nv; i++) {
        int64_t ax = v[i] < 0 ? v[i] + (unsq ? rank_out : r) : v[i];
        if (ax < 0 || ax >= (unsq ? rank_out : r) || (marked & (1u << ax)))
            return *why = "an axis out of range or repeated", -1;
        if (!unsq && in[ax] != 1) return *why = "squeezing a dim that is not 1", -1;
        marked |= 1u << ax;
    }
    for (int32_t i = 0, j = 0; i < (unsq ? rank_out : r); i++) {
        if (unsq)
            out[ro++] = marked & (1u << i) ? 1 : in[j++];
        else if (!(v ? (marked & (1u << i)) : in[i] == 1))
            out[ro++] = in[i];
    }
    return ro;
}

int32_t kiln__onnx_slice_params(kiln__onnx_lowering *l, const kiln__onnx_node *n, int32_t r,
                                const int64_t *dims, int64_t *start, int64_t *step, int64_t *count) {
    int64_t ns = 0, ne = 0, nx = 0, np = 0;
    bool has_axes = n->n_inputs > 3 && n->inputs[3][0], has_steps = n->n_inputs > 4 && n->inputs[4][0];
    const int64_t *st = kiln__onnx_ints_of(l, n->inputs[1], &ns),
                  *en = kiln__onnx_ints_of(l, n->inputs[2], &ne);
    const int64_t *ax = has_axes ? kiln__onnx_ints_of(l, n->inputs[3], &nx) : NULL;
    const int64_t *sp = has_steps ? kiln__onnx_ints_of(l, n->inputs[4], &np) : NULL;
    if (!st || !en || ns != ne || (has_axes && (!ax || nx != ns)) || (has_steps && (!sp || np != ns)))
        return -1;
    for (int32_t d = 0; d < r; d++)
        start[d] = 0, step[d] = 1, count[d] = dims[d];
    for (int64_t i = 0; i < ns; i++) {
        int64_t a = ax ? ax[i] : i, s = sp ? sp[i] : 1, b = st[i], e = en[i], d;
        if (a < 0) a += r;
        if (a < 0 || a >= r || s == 0) return -1;
        d = dims[a];
        if (b < 0) b = b < -d ? 0 : b + d; /* b + d cannot overflow: b >= -d */
        if (e < 0) e = e < -d ? -1 : e + d;
        if (s > 0) {
            b = b > d ? d : b;
            e = e > d ? d : e < 0 ? 0 : e;
            count[a] = e > b ? (e - b - 1) / s + 1 : 0;
        } else {
            b = b > d - 1 ? d - 1 : b;
            e = e > d - 1 ? d - 1 : e;
            if (e < -1) e = -1;
            count[a] = b > e ? (b - e - 1) / (s == INT64_MIN ? INT64_MAX : -s) + 1 : 0;
        }
        start[a] = b;
        step[a] = s;
    }
    return r;
}

/* ---- Index maps ---- */

typedef struct map {
    kiln__onnx_lowering *l;
    const kiln__onnx_node *n;
    int32_t x_rank;
    const int64_t *x_dims;
    int64_t xs[R];     /* the data's row-major strides */
    int32_t *out_rank; /* the output's shape */
    int64_t *out_dims;
    const char **why;
} map;

/* The output's element count and room for its indices, or -1. */
static int64_t room(map *m, int64_t **idx) {
    int64_t total = 1;
    for (int32_t d = 0; d < *m->out_rank; d++)
        if (__builtin_mul_overflow(total, m->out_dims[d], &total) || total > KILN_ONNX_HOST_MAX)
            return *m->why = "too many elements", -1;
    if (!(*idx = kiln__onnx_scratch(m->l, total, sizeof **idx))) return *m->why = "out of scratch memory", -1;
    return total;
}

/* Advance a row-major counter over dims; the innermost first. */
static void next(int64_t *cnt, const int64_t *dims, int32_t rank) {
    for (int32_t d = rank - 1; d >= 0; d--) {
        if (++cnt[d] < dims[d]) return;
        cnt[d] = 0;
    }
}

static int64_t slice_map(map *m, int64_t **idx) {
    int64_t start[R], step[R], cnt[R] = {0}, total;
    if (kiln__onnx_slice_params(m->l, m->n, m->x_rank, m->x_dims, start, step, m->out_dims) < 0)
        return *m->why = "its starts, ends, axes or steps are not known from shapes", -1;
    *m->out_rank = m->x_rank;
    if ((total = room(m, idx)) < 0) return -1;
    for (int64_t j = 0; j < total; j++, next(cnt, m->out_dims, m->x_rank)) {
        int64_t off = 0;
        for (int32_t d = 0; d < m->x_rank; d++)
            off += (start[d] + cnt[d] * step[d]) * m->xs[d];
        (*idx)[j] = off;
    }
    return total;
}

static int64_t transpose_map(map *m, int64_t **idx) {
    const kiln__onnx_attr *p = kiln__onnx_find_attr(m->n, "perm");
    int64_t perm[R], cnt[R] = {0}, total;
    uint32_t seen = 0;
    for (int32_t d = 0; d < m->x_rank; d++) {
        perm[d] = p && d < p->n ? p->ints[d] : m->x_rank - 1 - d;
        if (perm[d] < 0) perm[d] += m->x_rank;
        if (perm[d] < 0 || perm[d] >= m->x_rank || (seen & (1u << perm[d])))
            return *m->why = "a bad perm", -1;
        seen |= 1u << perm[d];
        m->out_dims[d] = m->x_dims[perm[d]];
    }
    *m->out_rank = m->x_rank;
    if ((total = room(m, idx)) < 0) return -1;
    for (int64_t j = 0; j < total; j++, next(cnt, m->out_dims, m->x_rank)) {
        int64_t off = 0;
        for (int32_t d = 0; d < m->x_rank; d++)
            off += cnt[d] * m->xs[perm[d]];
        (*idx)[j] = off;
    }
    return total;
}

/* Expand: numpy broadcasting of the data's shape and the target's, both ways. */
static int64_t expand_map(map *m, int64_t **idx) {
    int64_t nv = 0, cnt[R] = {0}, total;
    const int64_t *v = kiln__onnx_ints_of(m->l, m->n->inputs[1], &nv);
    if (!v || nv > R) return *m->why = "its shape is not known from shapes", -1;
    int32_t r = KILN__MAX(m->x_rank, (int32_t)nv);
    for (int32_t d = 0; d < r; d++) {
        int32_t dx = d - (r - m->x_rank), dv = d - (r - (int32_t)nv);
        int64_t a = dx >= 0 ? m->x_dims[dx] : 1, b = dv >= 0 ? v[dv] : 1;
        if (a != b && a != 1 && b != 1) return *m->why = "the shape does not broadcast", -1;
        m->out_dims[d] = a == 1 ? b : a;
    }
    *m->out_rank = r;
    if ((total = room(m, idx)) < 0) return -1;
    for (int64_t j = 0; j < total; j++, next(cnt, m->out_dims, r)) {
        int64_t off = 0;
        for (int32_t d = r - m->x_rank; d < r; d++) {
            int32_t dx = d - (r - m->x_rank);
            off += (m->x_dims[dx] == 1 ? 0 : cnt[d]) * m->xs[dx];
        }
        (*idx)[j] = off;
    }
    return total;
}

/* Gather (the indices' dims replace the axis) and GatherElements (the indices' shape, one index per
 * element along the axis). */
static int64_t gather_map(map *m, const kiln__onnx_host *ind, bool elements, int64_t **idx) {
    const kiln__onnx_attr *a = kiln__onnx_find_attr(m->n, "axis");
    int64_t ax = a ? a->i : 0, cnt[R] = {0}, total;
    if (ax < 0) ax += m->x_rank;
    if (ax < 0 || ax >= m->x_rank) return *m->why = "axis out of range", -1;
    if (elements) {
        if (ind->rank != m->x_rank) return *m->why = "indices and data differ in rank", -1;
        *m->out_rank = m->x_rank;
        memcpy(m->out_dims, ind->dims, (size_t)m->x_rank * sizeof *m->out_dims);
    } else {
        if (m->x_rank - 1 + ind->rank > R) return *m->why = "the result's rank is over 16", -1;
        *m->out_rank = 0;
        for (int32_t d = 0; d < m->x_rank; d++) {
            if (d != ax) m->out_dims[(*m->out_rank)++] = m->x_dims[d];
            for (int32_t e = 0; d == ax && e < ind->rank; e++)
                m->out_dims[(*m->out_rank)++] = ind->dims[e];
        }
    }
    if ((total = room(m, idx)) < 0) return -1;
    for (int64_t j = 0; j < total; j++, next(cnt, m->out_dims, *m->out_rank)) {
        int64_t at = 0, off = 0, iv;
        for (int32_t d = 0; d < ind->rank; d++) /* the element of the indices this output reads */
            at = at * ind->dims[d] + cnt[elements ? d : ax + d];
        iv = ind->i[at];
        if (iv < -m->x_dims[ax] || iv >= m->x_dims[ax]) return *m->why = "an index out of range", -1;
        if (iv < 0) iv += m->x_dims[ax];
        for (int32_t d = 0, o = 0; d < m->x_rank; d++) {
            if (d == ax) {
                off += iv * m->xs[d];
                o += elements ? 1 : ind->rank;
            } else {
                off += cnt[o++] * m->xs[d];
            }
        }
        (*idx)[j] = off;
    }
    return total;
}

/* GatherND (batch_dims 0): each index tuple of the last axis picks a slice of the data. */
static int64_t gather_nd_map(map *m, const kiln__onnx_host *ind, int64_t **idx) {
    const kiln__onnx_attr *b = kiln__onnx_find_attr(m->n, "batch_dims");
    int32_t q = ind->rank;
    int64_t last = q > 0 ? ind->dims[q - 1] : 0, inner = 1, total;
    if (b && b->i != 0) return *m->why = "batch_dims other than 0", -1;
    if (q < 1 || last < 1 || last > m->x_rank)
        return *m->why = "the indices' last dim is not 1 to the data's rank", -1;
    if (q - 1 + m->x_rank - last > R) return *m->why = "the result's rank is over 16", -1;
    *m->out_rank = 0;
    for (int32_t d = 0; d < q - 1; d++)
        m->out_dims[(*m->out_rank)++] = ind->dims[d];
    for (int32_t d = (int32_t)last; d < m->x_rank; d++)
        m->out_dims[(*m->out_rank)++] = m->x_dims[d], inner *= m->x_dims[d];
    if ((total = room(m, idx)) < 0) return -1;
    for (int64_t t = 0; t < (inner ? total / inner : 0); t++) {
        int64_t base = 0;
        for (int64_t d = 0; d < last; d++) {
            int64_t iv = ind->i[t * last + d];
            if (iv < -m->x_dims[d] || iv >= m->x_dims[d]) return *m->why = "an index out of range", -1;
            base += (iv < 0 ? iv + m->x_dims[d] : iv) * m->xs[d];
        }
        for (int64_t e = 0; e < inner; e++)
            (*idx)[t * inner + e] = base + e;
    }
    return total;
}

int64_t kiln__onnx_index_map(kiln__onnx_lowering *l, const kiln__onnx_node *n, int32_t x_rank,
                             const int64_t *x_dims, int32_t *out_rank, int64_t *out_dims, int64_t **idx,
                             const char **why) {
    const char *op = n->op_type;
    map m = {l, n, x_rank, x_dims, {0}, out_rank, out_dims, why};
    if (x_rank < 0 || x_rank > R) return *why = "a rank over 16", -1;
    for (int64_t d = x_rank - 1, s = 1; d >= 0; d--) { /* the flat indices become I32 tables */
        m.xs[d] = s;
        if (x_dims[d] < 0 || __builtin_mul_overflow(s, x_dims[d], &s) || s > INT32_MAX)
            return *why = "data of over 2^31 elements", -1;
    }
    if (is(op, "Slice")) return slice_map(&m, idx);
    if (is(op, "Transpose")) return transpose_map(&m, idx);
    if (is(op, "Expand")) return expand_map(&m, idx);
    const kiln__onnx_host *ind =
        n->n_inputs > 1 && n->inputs[1][0] ? kiln__onnx_host_of(l, n->inputs[1]) : NULL;
    if (!ind || !ind->i) {
        *why =
            "its indices are computed at run time (Kiln gathers computed data by indices known from shapes, "
            "and constant tables by fed ids)";
        return -1;
    }
    if (is(op, "Gather") || is(op, "GatherElements"))
        return gather_map(&m, ind, is(op, "GatherElements"), idx);
    if (is(op, "GatherND")) return gather_nd_map(&m, ind, idx);
    *why = "not a data-movement operator";
    return -1;
}
