/*
 * onnx_attention.c - scaled dot-product attention as torch.onnx exports it (GPT-2 and BERT, both exporters),
 * recognized where it ends and lowered to Kiln's fused attention op:
 *
 *   q = Transpose(q_r, [0,2,1,3])    k = Transpose(k_r, [0,2,3,1])    v = Transpose(v_r, [0,2,1,3])
 *     (q and k may each be two Transposes that compose to these: [0,2,1,3] then [0,1,3,2] for k)
 *   s = MatMul(q, k) * c   (or / c)           q_r, k_r, v_r: [B, S, H, D] (a Reshape of the projections)
 *   p = Softmax(s + mask, axis = -1)          mask broadcast over the heads: [B or 1, 1, S, C], or none
 *                                             (every key visible: a session constant of zeros [S, C])
 *   y = Transpose(MatMul(p [Cast], v), [0,2,1,3])                                       -> [B, S, H, D]
 *
 * y is attention(q_r[b], k_r[b], v_r[b], mask[b], c) per batch row b: q_r as it lies is Kiln's [D, H, S],
 * which is what the attention op takes and gives, so neither the transposes nor the scores are materialized,
 * and the fused kernel skips masked keys. The nodes of the chain were lowered before the final Transpose
 * (topological order) and nothing reads them now: dead code elimination drops them. Anything that does not
 * match exactly (other permutations, a per-head mask, a non-scalar scale, GQA's expanded K/V) is lowered
 * as written.
 */
#include "import/onnx/onnx_lower.h"

#include <string.h>

/* The largest zero mask an unmasked chain gets (64 MiB: 4096 x 4096 keys and queries); a longer one is
 * lowered as written. */
#define KILN_ONNX_ZERO_MASK_MAX ((int64_t)1 << 24)

static const kiln__onnx_node *producer(const kiln__onnx_lowering *l, const char *name, const char *op) {
    const kiln__onnx_value *v = name[0] ? kiln__onnx_value_find(l->m, name) : NULL;
    const kiln__onnx_node *n = v && v->producer >= 0 ? &l->m->nodes[v->producer] : NULL;
    return n && (!op || !strcmp(n->op_type, op)) ? n : NULL;
}

static bool perm_is(const kiln__onnx_node *t, int64_t a, int64_t b, int64_t c, int64_t d) {
    const kiln__onnx_attr *p = t ? kiln__onnx_find_attr(t, "perm") : NULL;
    return p && p->n == 4 && p->ints[0] == a && p->ints[1] == b && p->ints[2] == c && p->ints[3] == d;
}

/* The source of name through one or two Transposes (k.transpose(1, 2) then .transpose(-2, -1), as
 * hand-written attention exports), with their composed permutation; NULL when name is no Transpose. */
static const char *transposed_from(const kiln__onnx_lowering *l, const char *name, int64_t perm[4]) {
    const kiln__onnx_node *t = producer(l, name, "Transpose");
    const kiln__onnx_attr *p = t ? kiln__onnx_find_attr(t, "perm") : NULL;
    if (!p || p->n != 4) return NULL;
    for (int i = 0; i < 4; i++)
        if (p->ints[i] < 0 || p->ints[i] > 3) return NULL;
    for (int i = 0; i < 4; i++)
        perm[i] = p->ints[i];
    const kiln__onnx_node *t0 = producer(l, t->inputs[0], "Transpose");
    const kiln__onnx_attr *p0 = t0 ? kiln__onnx_find_attr(t0, "perm") : NULL;
    if (!p0 || p0->n != 4) return t->inputs[0];
    for (int i = 0; i < 4; i++)
        if (p0->ints[i] < 0 || p0->ints[i] > 3) return t->inputs[0];
    for (int i = 0; i < 4; i++) /* y = T(T(x, p0), p): y.dim[i] = x.dim[p0[p[i]]] */
        perm[i] = p0->ints[perm[i]];
    return t0->inputs[0];
}

static bool is_perm(const int64_t perm[4], int64_t a, int64_t b, int64_t c, int64_t d) {
    return perm[0] == a && perm[1] == b && perm[2] == c && perm[3] == d;
}

/* A one-element float constant or host value. */
static bool scalar(kiln__onnx_lowering *l, const char *name, float *out) {
    const kiln__onnx_host *h = kiln__onnx_host_of(l, name);
    if (!h || !h->f || h->n != 1) return false;
    *out = (float)h->f[0];
    return true;
}

/* The computed value of a rank-4 input, contiguous F32. */
static kiln_tensor *rank4(const kiln__onnx_lowering *l, const char *name) {
    const kiln__onnx_value *v = kiln__onnx_value_find(l->m, name);
    kiln_tensor *t = v ? l->vals[v - l->m->values] : NULL;
    if (!t || v->info.rank != 4 || t->type != KILN_TYPE_F32 || !kiln__tensor_is_contiguous(t)) return NULL;
    return t;
}

/* s = MatMul(q, k) * c or / c: the MatMul and the scale. */
static const kiln__onnx_node *scaled_scores(kiln__onnx_lowering *l, const char *name, float *scale) {
    const kiln__onnx_node *s = producer(l, name, NULL);
    float c;
    if (!s || s->n_inputs != 2) return NULL;
    for (int i = 0; i < 2; i++) {
        const kiln__onnx_node *mm = producer(l, s->inputs[i], "MatMul");
        if (!mm || !scalar(l, s->inputs[1 - i], &c)) continue;
        if (!strcmp(s->op_type, "Mul")) return *scale = c, mm;
        if (!strcmp(s->op_type, "Div") && i == 0 && c != 0.0f) return *scale = 1.0f / c, mm;
    }
    return NULL;
}

kiln_tensor *kiln__onnx_fuse_attention(kiln__onnx_lowering *l, kiln_graph *g, const kiln__onnx_node *t) {
    const kiln__onnx_node *mm2, *vt, *p, *add, *mm1;
    const char *mask_name = NULL;
    float scale = 1.0f;
    if (!perm_is(t, 0, 2, 1, 3) || !(mm2 = producer(l, t->inputs[0], "MatMul"))) return NULL;
    if (!perm_is(vt = producer(l, mm2->inputs[1], "Transpose"), 0, 2, 1, 3)) return NULL;
    p = producer(l, mm2->inputs[0], NULL);
    if (p && !strcmp(p->op_type, "Cast")) p = producer(l, p->inputs[0], NULL);
    if (!p || strcmp(p->op_type, "Softmax") != 0) return NULL;
    const kiln__onnx_attr *ax = kiln__onnx_find_attr(p, "axis");
    if (ax && ax->i != -1 && ax->i != 3) return NULL;
    add = producer(l, p->inputs[0], "Add");
    mm1 = NULL;
    for (int i = 0; add && i < 2 && !mm1; i++)
        if ((mm1 = scaled_scores(l, add->inputs[i], &scale))) mask_name = add->inputs[1 - i];
    if (!add) mm1 = scaled_scores(l, p->inputs[0], &scale);
    if (!mm1) return NULL;
    int64_t qp[4], kp[4];
    const char *qs = transposed_from(l, mm1->inputs[0], qp), *ks = transposed_from(l, mm1->inputs[1], kp);
    if (!qs || !ks || !is_perm(qp, 0, 2, 1, 3) || !is_perm(kp, 0, 2, 3, 1)) return NULL;
    kiln_tensor *q = rank4(l, qs), *k = rank4(l, ks), *v = rank4(l, vt->inputs[0]), *mask;
    if (!q || !k || !v || memcmp(k->ne, v->ne, sizeof k->ne) || k->ne[0] != q->ne[0] || q->ne[1] % k->ne[1] ||
        k->ne[3] != q->ne[3])
        return NULL;
    int64_t D = q->ne[0], H = q->ne[1], S = q->ne[2], B = q->ne[3], C = k->ne[2];
    if (mask_name) { /* [C, S, 1, B or 1]: the same for every head */
        const kiln__onnx_value *mv = kiln__onnx_value_find(l->m, mask_name);
        mask = mv ? l->vals[mv - l->m->values] : NULL;
        if (!mask || mask->type != KILN_TYPE_F32 || mask->ne[0] != C || mask->ne[2] != 1 ||
            (mask->ne[3] != B && mask->ne[3] != 1))
            return NULL;
        if (mask->ne[1] != S || !kiln__tensor_is_contiguous(mask))
            return NULL; /* rows broadcast: the plain form (none of the exports here writes one) */
    } else {             /* an unmasked chain: every key visible, one mask of zeros for every batch row */
        int64_t n;
        if (__builtin_mul_overflow(C, S, &n) || n > KILN_ONNX_ZERO_MASK_MAX ||
            !(mask = kiln__onnx_filled(l, g, n, 0.0f)))
            return NULL; /* the plain form */
        mask = kiln__reshape(g, mask, 4, (int64_t[]){C, S, 1, 1});
        if (!mask) return NULL;
    }
    kiln_tensor *acc = NULL, *outs[3];
    int n_out = 0;
    for (int64_t b = 0; b < B; b++) {
        size_t qb = (size_t)b * q->nb[3], kb = (size_t)b * k->nb[3],
               mb = (size_t)(mask->ne[3] == 1 ? 0 : b) * mask->nb[3];
        int64_t qne[3] = {D, H, S}, kne[3] = {D, k->ne[1], C}, mne[2] = {C, S};
        kiln_tensor *qv = kiln__view(g, q, 3, qne, q->nb, qb), *kv = kiln__view(g, k, 3, kne, k->nb, kb),
                    *vv = kiln__view(g, v, 3, kne, v->nb, kb),
                    *mv = kiln__view(g, mask, 2, mne, mask->nb, mb);
        kiln_tensor *y = kiln__attention(g, qv, kv, vv, mv, scale);
        outs[n_out++] = y ? kiln__reshape_2d(g, y, D * H, S) : NULL;
        if (!outs[n_out - 1]) return NULL;
        if (n_out == 3 || b == B - 1) { /* rows appended three at a time */
            if (acc) {
                acc = kiln__concat(g, acc, outs[0], n_out > 1 ? outs[1] : NULL);
                if (acc && n_out == 3) acc = kiln__concat(g, acc, outs[2], NULL);
            } else {
                acc = n_out == 1 ? outs[0] : kiln__concat(g, outs[0], outs[1], n_out == 3 ? outs[2] : NULL);
            }
            n_out = 0;
            if (!acc) return NULL;
        }
    }
    return kiln__reshape(g, acc, KILN_MAX_DIMS, (int64_t[]){D, H, S, B});
}
