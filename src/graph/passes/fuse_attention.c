/*
 * fuse_attention.c - recognize the plain attention subgraph and replace it by one attention node:
 *
 *   kq  = matmul(permute(K, 0,2,1,3), permute(Q, 0,2,1,3))     K [D, Hkv, C], Q [D, Hq, T]
 *   p   = softmax(diag_mask_inf(scale(kq, s), n_past))
 *   out = matmul(cont(permute(V, 1,2,0,3)), p)                  [D, T, Hq]
 *
 * becomes permute(attention(Q, K, V, n_past, s), 0,2,1,3). When K and V come from an F16 or Q8_0 cache
 * through cast (dequantize) nodes, the attention node takes the cache rows themselves and reads them in
 * place, so the cache is never dequantized as a whole. The fused kernel bounds each query's keys by
 * the causal position instead of masking a full score matrix, and never materializes the scores or the
 * transposed V.
 */
#include "graph/passes/passes.h"
#include "graph/passes/match.h"

#include <string.h>

typedef struct attn_match {
    kiln_tensor *q, *k, *v, *mask;
    float scale;
} attn_match;

/* reshape(cast(R)) with R the [Hkv * D, L] rows of an F16/Q8_0 cache: R itself, or NULL. */
static kiln_tensor *cast_rows(kiln_tensor *t) {
    if (!is_op(t, KILN_OP_RESHAPE) || !is_op(t->src[0], KILN_OP_CAST)) return NULL;
    kiln_tensor *r = t->src[0]->src[0];
    return r->type != KILN_TYPE_F32 && kiln__is_kv_cache_type(r->type) && r->ne[2] == 1 && r->ne[3] == 1 ? r : NULL;
}

/* K and V read from a quantized cache through casts: attention reads the rows in place instead. */
static bool match_cache_rows(attn_match *m) {
    kiln_tensor *k = cast_rows(m->k), *v = cast_rows(m->v);
    int64_t D = m->q->ne[0];
    if (!k || !v || k->type != v->type || memcmp(k->ne, v->ne, sizeof k->ne) != 0) return false;
    if (m->q->type != KILN_TYPE_F32 || m->q->ne[3] != 1 || m->q->nb[0] != sizeof(float) || k->ne[0] % D != 0 ||
        m->q->ne[1] % (k->ne[0] / D) != 0 || m->mask->ip[0] < 0 || m->mask->ip[0] + m->q->ne[2] > k->ne[1])
        return false;
    m->k = k;
    m->v = v;
    return true;
}

static bool match(const kiln_graph *g, const kiln_tensor *t, attn_match *m) {
    const kiln_tensor *vt = t->src[0], *p = t->src[1], *mask, *sc, *kq;
    if (t->op != KILN_OP_MATMUL || !is_op(vt, KILN_OP_CONT) || !is_op(p, KILN_OP_SOFTMAX) || p->fp[0] != 1.0f)
        return false;
    if (!is_permute(vt->src[0], 1, 2, 0, 3) || !only_use(g, vt) || !only_use(g, p)) return false;
    mask = p->src[0];
    if (!is_op(mask, KILN_OP_DIAG_MASK_INF) || !only_use(g, mask)) return false;
    if (mask->ip[1] != 0) return false; /* a sliding window: the attention kernel is causal only */
    sc = mask->src[0];
    if (!is_op(sc, KILN_OP_SCALE) || sc->fp[1] != 0.0f || !only_use(g, sc)) return false;
    kq = sc->src[0];
    if (!is_op(kq, KILN_OP_MATMUL) || !only_use(g, kq)) return false;
    if (!is_permute(kq->src[0], 0, 2, 1, 3) || !is_permute(kq->src[1], 0, 2, 1, 3)) return false;
    m->k = kq->src[0]->src[0];
    m->q = kq->src[1]->src[0];
    m->v = vt->src[0]->src[0];
    m->mask = (kiln_tensor *)mask;
    m->scale = sc->fp[0];
    if (match_cache_rows(m)) return true;
    /* The attention op's own rules, checked here so a near-miss is left alone rather than an error. */
    return m->q->type == KILN_TYPE_F32 && m->k->type == KILN_TYPE_F32 && m->v->type == KILN_TYPE_F32 &&
           m->q->ne[3] == 1 && m->k->ne[3] == 1 && m->k->ne[0] == m->q->ne[0] && m->v->ne[0] == m->k->ne[0] &&
           m->v->ne[1] == m->k->ne[1] && m->v->ne[2] == m->k->ne[2] && m->q->ne[1] % m->k->ne[1] == 0 &&
           mask->ip[0] >= 0 && mask->ip[0] + m->q->ne[2] <= m->k->ne[2] && m->q->nb[0] == sizeof(float) &&
           m->k->nb[0] == sizeof(float) && m->v->nb[0] == sizeof(float);
}

static kiln_tensor *fuse_one(kiln_graph *g, kiln_tensor *t) {
    attn_match m;
    if (!match(g, t, &m)) return NULL;
    kiln_tensor *att = kiln__attention(g, m.q, m.k, m.v, m.mask->ip[0], m.scale);
    if (att) att->flags |= m.mask->flags & KILN_TENSOR_NPAST;
    return kiln__permute(g, att, 0, 2, 1, 3);
}

kiln_status kiln__pass_fuse_attention(kiln_graph *g, const kiln_pass_env *env, int32_t *n) {
    (void)env;
    return rewrite_each(g, fuse_one, n);
}
