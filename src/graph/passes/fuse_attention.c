/*
 * fuse_attention.c - recognize the plain attention subgraph and replace it by one attention node:
 *
 *   kq  = matmul(permute(K, 0,2,1,3), permute(Q, 0,2,1,3))     K [D, Hkv, C], Q [D, Hq, T] -> [C, T, Hq]
 *   p   = softmax(add(scale(kq, s), mask), 1)                   mask F32 [C, T], broadcast over Hq
 *   out = matmul(cont(permute(V, 1,2,0,3)), p)                  [D, T, Hq]
 *
 * becomes permute(attention(Q, K, V, mask, s), 0,2,1,3). When K and V come from an F16 or Q8_0 cache
 * through cast (dequantize) nodes, the attention node takes the cache rows themselves and reads them in
 * place, so the cache is never dequantized as a whole. The mask is an input shared by every layer; what
 * must have no other reader is each intermediate (kq, its scale, the masked scores, p, the transposed V).
 * Causality, sliding windows and the separation of the sequences in a batch are all mask content, so
 * every such form fuses. The fused kernel visits only the keys each query's mask row leaves visible, and
 * never materializes the scores or the transposed V.
 */
#include "graph/passes/passes.h"
#include "graph/passes/match.h"

#include <string.h>

typedef struct attn_match {
    kiln_tensor *q, *k, *v, *mask;
    float scale;
} attn_match;

/* reshape(cast(R)) with R the [Hkv * D, C] rows of an F16/Q8_0 cache: R itself, or NULL. */
static kiln_tensor *cast_rows(kiln_tensor *t) {
    if (!is_op(t, KILN_OP_RESHAPE) || !is_op(t->src[0], KILN_OP_CAST)) return NULL;
    kiln_tensor *r = t->src[0]->src[0];
    return r->type != KILN_TYPE_F32 && kiln__is_kv_cache_type(r->type) && r->ne[2] == 1 && r->ne[3] == 1 ? r : NULL;
}

/* The mask operand: F32 [C, T], contiguous (the attention op's rule for src3). */
static bool mask_fits(const kiln_tensor *mask, int64_t C, int64_t T) {
    return mask->type == KILN_TYPE_F32 && mask->ne[0] == C && mask->ne[1] == T && mask->ne[2] == 1 &&
           mask->ne[3] == 1 && kiln__tensor_is_contiguous(mask);
}

/* K and V read from a quantized cache through casts: attention reads the rows in place instead. */
static bool match_cache_rows(attn_match *m) {
    kiln_tensor *k = cast_rows(m->k), *v = cast_rows(m->v);
    int64_t D = m->q->ne[0];
    if (!k || !v || k->type != v->type || memcmp(k->ne, v->ne, sizeof k->ne) != 0) return false;
    if (m->q->type != KILN_TYPE_F32 || m->q->ne[3] != 1 || m->q->nb[0] != sizeof(float) || k->ne[0] % D != 0 ||
        m->q->ne[1] % (k->ne[0] / D) != 0 || !mask_fits(m->mask, k->ne[1], m->q->ne[2]))
        return false;
    m->k = k;
    m->v = v;
    return true;
}

static bool match(const kiln_graph *g, const kiln_tensor *t, attn_match *m) {
    const kiln_tensor *vt = t->src[0], *p = t->src[1], *masked, *sc, *kq;
    if (t->op != KILN_OP_MATMUL || !is_op(vt, KILN_OP_CONT) || !is_op(p, KILN_OP_SOFTMAX) || p->fp[0] != 1.0f)
        return false;
    if (!is_permute(vt->src[0], 1, 2, 0, 3) || !only_use(g, vt) || !only_use(g, p)) return false;
    masked = p->src[0];
    if (!is_op(masked, KILN_OP_ADD) || !only_use(g, masked)) return false;
    sc = masked->src[0];
    if (!is_op(sc, KILN_OP_SCALE) || sc->fp[1] != 0.0f || !only_use(g, sc)) return false;
    kq = sc->src[0];
    if (!is_op(kq, KILN_OP_MATMUL) || !only_use(g, kq)) return false;
    if (!is_permute(kq->src[0], 0, 2, 1, 3) || !is_permute(kq->src[1], 0, 2, 1, 3)) return false;
    m->k = kq->src[0]->src[0];
    m->q = kq->src[1]->src[0];
    m->v = vt->src[0]->src[0];
    m->mask = masked->src[1];
    m->scale = sc->fp[0];
    if (match_cache_rows(m)) return true;
    /* The attention op's own rules, checked here so a near-miss is left alone rather than an error. */
    return m->q->type == KILN_TYPE_F32 && m->k->type == KILN_TYPE_F32 && m->v->type == KILN_TYPE_F32 &&
           m->q->ne[3] == 1 && m->k->ne[3] == 1 && m->k->ne[0] == m->q->ne[0] && m->v->ne[0] == m->k->ne[0] &&
           m->v->ne[1] == m->k->ne[1] && m->v->ne[2] == m->k->ne[2] && m->q->ne[1] % m->k->ne[1] == 0 &&
           m->q->nb[0] == sizeof(float) && m->k->nb[0] == sizeof(float) && m->v->nb[0] == sizeof(float) &&
           mask_fits(m->mask, m->k->ne[2], m->q->ne[2]);
}

static kiln_tensor *fuse_one(kiln_graph *g, kiln_tensor *t) {
    attn_match m;
    if (!match(g, t, &m)) return NULL;
    return kiln__permute(g, kiln__attention(g, m.q, m.k, m.v, m.mask, m.scale), 0, 2, 1, 3);
}

kiln_status kiln__pass_fuse_attention(kiln_graph *g, const kiln_pass_env *env, int32_t *n) {
    (void)env;
    return rewrite_each(g, fuse_one, n);
}
