/*
 * blocks.c - the shared pieces of a transformer block as plain graph ops (see blocks.h).
 */
#include "model/blocks.h"

#include <math.h>

kiln_tensor *kiln__blk_norm(const kiln_model *m, kiln_graph *g, kiln_tensor *x, const kiln_tensor_info *w,
                            const kiln_tensor_info *b) {
    const kiln_hparams *hp = &m->hp;
    if (m->norm == KILN_NORM_RMS) return kiln__mul(g, kiln__rms_norm(g, x, hp->norm_eps), kiln__weight_leaf(g, w));
    kiln_tensor *h = kiln__mul(g, kiln__norm(g, x, hp->norm_eps), kiln__weight_leaf(g, w));
    return kiln__add(g, h, kiln__weight_leaf(g, b));
}

kiln_tensor *kiln__blk_linear(kiln_graph *g, const kiln_tensor_info *w, const kiln_tensor_info *b, kiln_tensor *x) {
    kiln_tensor *y = kiln__matmul(g, kiln__weight_leaf(g, w), x);
    return kiln__has(b) ? kiln__add(g, y, kiln__weight_leaf(g, b)) : y;
}

kiln_tensor *kiln__blk_rows(kiln_graph *g, kiln_tensor *y, int64_t r0, int64_t n) {
    if (!y) return NULL;
    int64_t ne[2] = {n, y->ne[1]};
    size_t nb[2] = {y->nb[0], y->nb[1]};
    return kiln__view(g, y, 2, ne, nb, (size_t)r0 * y->nb[0]);
}

kiln_tensor *kiln__blk_attention_core(kiln_graph *g, const kiln_hparams *hp, kiln_tensor *q, kiln_tensor *kc,
                                      kiln_tensor *vc, kiln_tensor *mask, int64_t T) {
    if (!kc || !vc) return NULL;
    int64_t D = hp->head_dim, C = kc->ne[1];
    if (kc->type != KILN_TYPE_F32) { /* an F16/Q8_0 cache: the plain form reads it dequantized */
        kc = kiln__cast(g, kc);
        vc = kiln__cast(g, vc);
    }
    kiln_tensor *K = kiln__reshape_3d(g, kc, D, hp->n_head_kv, C);                    /* [D, Hkv, C] */
    kiln_tensor *V = kiln__reshape_3d(g, vc, D, hp->n_head_kv, C);                    /* [D, Hkv, C] */
    kiln_tensor *kq = kiln__matmul(g, kiln__permute(g, K, 0, 2, 1, 3), kiln__permute(g, q, 0, 2, 1, 3));
    kq = kiln__scale(g, kq, 1.0f / sqrtf((float)D), 0.0f);                            /* [C, T, Hq] */
    kq = kiln__softmax(g, kiln__add(g, kq, mask), 1.0f);                             /* mask [C, T] */
    kiln_tensor *vt = kiln__cont(g, kiln__permute(g, V, 1, 2, 0, 3));                /* [C, D, Hkv] */
    kiln_tensor *kqv = kiln__matmul(g, vt, kq);                                        /* [D, T, Hq] */
    kiln_tensor *merged = kiln__cont(g, kiln__permute(g, kqv, 0, 2, 1, 3));          /* [D, Hq, T] */
    return kiln__reshape_2d(g, merged, D * hp->n_head, T);
}

/* Q [Hq*D, T], K and V [Hkv*D, T]: three projections, or three row ranges of one fused projection. */
static void project_qkv(const kiln_layer *l, const kiln_hparams *hp, kiln_graph *g, kiln_tensor *h,
                        kiln_tensor **q, kiln_tensor **k, kiln_tensor **v) {
    int64_t Eq = (int64_t)hp->n_head * hp->head_dim, Ekv = (int64_t)hp->n_head_kv * hp->head_dim;
    if (kiln__has(&l->wqkv)) {
        kiln_tensor *qkv = kiln__blk_linear(g, &l->wqkv, &l->bqkv, h); /* [Eq + 2 Ekv, T] */
        *q = kiln__blk_rows(g, qkv, 0, Eq);
        *k = kiln__blk_rows(g, qkv, Eq, Ekv);
        *v = kiln__blk_rows(g, qkv, Eq + Ekv, Ekv);
        return;
    }
    *q = kiln__blk_linear(g, &l->wq, &l->bq, h);
    *k = kiln__blk_linear(g, &l->wk, &l->bk, h);
    *v = kiln__blk_linear(g, &l->wv, &l->bv, h);
}

/* x [D, H, T]: the optional per-head RMSNorm, then rope (with Llama 3 divisors when the model has them). */
static kiln_tensor *position(const kiln_model *m, kiln_graph *g, const kiln_batch_inputs *in, kiln_tensor *x,
                             const kiln_tensor_info *head_norm) {
    const kiln_hparams *hp = &m->hp;
    if (kiln__has(head_norm)) x = kiln__mul(g, kiln__rms_norm(g, x, hp->norm_eps), kiln__weight_leaf(g, head_norm));
    if (kiln__has(&m->pos_embd)) return x; /* learned absolute positions instead of rope */
    kiln_tensor *factors = kiln__has(&m->rope_freqs) ? kiln__weight_leaf(g, &m->rope_freqs) : NULL;
    return kiln__rope_ext(g, x, in->pos, factors, hp->n_rot, hp->rope_mode, hp->rope_freq_base, hp->rope_freq_scale);
}

kiln_tensor *kiln__blk_attention(const kiln_model *m, kiln_graph *g, const kiln_batch_inputs *in, int32_t il,
                                 kiln_tensor *h) {
    const kiln_hparams *hp = &m->hp;
    const kiln_layer *l = &m->layers[il];
    int64_t T = in->n_tokens, D = hp->head_dim, Ekv = (int64_t)hp->n_head_kv * D;
    kiln_tensor *q, *k, *v;
    project_qkv(l, hp, g, h, &q, &k, &v);
    q = position(m, g, in, kiln__reshape_3d(g, q, D, hp->n_head, T), &l->q_norm);    /* [D, Hq, T] */
    kiln_tensor *k_heads = kiln__reshape_3d(g, k, D, hp->n_head_kv, T);
    kiln_tensor *k_pos = position(m, g, in, k_heads, &l->k_norm);                   /* [D, Hkv, T] */
    /* Without rope or norm (learned positions), the cache takes k's rows as they are. */
    kiln_tensor *k_rows = k_pos == k_heads ? k : kiln__reshape_2d(g, k_pos, Ekv, T); /* [Hkv*D, T] */
    k = k_pos;
    kiln_tensor *kc = kiln__cache_write(g, in->k_cache[il], k_rows, in->cells);
    kiln_tensor *vc = kiln__cache_write(g, in->v_cache[il], v, in->cells);          /* [Hkv*D, C] */
    kiln__tensor_set_name(q, "blk.%d.q", il);
    kiln__tensor_set_name(k, "blk.%d.k", il);
    kiln_tensor *att = kiln__blk_attention_core(g, hp, q, kc, vc, in->mask, T);
    kiln__tensor_set_name(att, "blk.%d.attn", il);
    return kiln__blk_linear(g, &l->wo, &l->bo, att);
}

kiln_tensor *kiln__blk_ffn(const kiln_model *m, kiln_graph *g, int32_t il, kiln_tensor *h) {
    const kiln_layer *l = &m->layers[il];
    int64_t F = m->hp.n_ff;
    kiln_tensor *gate, *up;
    switch (m->ffn) {
    case KILN_FFN_GELU:
        up = kiln__gelu_unfused(g, kiln__blk_linear(g, &l->w_up, &l->b_up, h)); /* [F, T] */
        return kiln__blk_linear(g, &l->w_down, &l->b_down, up);
    case KILN_FFN_SWIGLU_FUSED:
        up = kiln__blk_linear(g, &l->w_up, &l->b_up, h); /* [2F, T]: gate rows, then up rows */
        gate = kiln__silu(g, kiln__blk_rows(g, up, 0, F));
        return kiln__blk_linear(g, &l->w_down, &l->b_down, kiln__mul(g, gate, kiln__blk_rows(g, up, F, F)));
    case KILN_FFN_SWIGLU: break;
    }
    gate = kiln__silu(g, kiln__matmul(g, kiln__weight_leaf(g, &l->w_gate), h)); /* [F, T] */
    up = kiln__blk_linear(g, &l->w_up, &l->b_up, h);                            /* [F, T] */
    return kiln__blk_linear(g, &l->w_down, &l->b_down, kiln__mul(g, gate, up)); /* [E, T] */
}

kiln_tensor *kiln__blk_logits(const kiln_model *m, kiln_graph *g, kiln_tensor *x, kiln_tensor *out_ids) {
    kiln_tensor *rows = kiln__get_rows(g, x, out_ids);                           /* [E, O] */
    kiln_tensor *h = kiln__blk_norm(m, g, rows, &m->output_norm, &m->output_norm_b);
    kiln_tensor *logits = kiln__matmul(g, kiln__weight_leaf(g, &m->output), h); /* [V, O] */
    return kiln__tensor_set_name(logits, "logits");
}
