/*
 * llama.c - the Llama architecture: its weights and its forward pass as a graph.
 *
 * Per block (x is the residual stream [E, T]):
 *   h = rms_norm(x) * attn_norm
 *   q, k, v = Wq h, Wk h, Wv h            rotary embedding on q and k at positions n_past..n_past+T-1
 *   K, V caches get k, v at rows n_past..; attention of q over cache rows 0..n_past+T-1 (causal, GQA)
 *   x = x + Wo attn
 *   h = rms_norm(x) * ffn_norm
 *   x = x + W_down (silu(W_gate h) * W_up h)
 * Then logits = W_out (rms_norm(x_last) * output_norm) for the last token only. The output projection
 * falls back to the token embedding (tied weights) when the file has no output.weight.
 *
 * The builder emits plain ops only; it never calls a kernel.
 */
#include "model/model.h"

#include "core/core.h"

#include <math.h>
#include <stdio.h>

static kiln_status layer_weights(kiln_model *m, int32_t il, kiln_layer *l) {
    const kiln_hparams *hp = &m->hp;
    int64_t E = hp->n_embd, Eq = (int64_t)hp->n_head * hp->head_dim, Ekv = (int64_t)hp->n_head_kv * hp->head_dim,
            F = hp->n_ff;
    char name[96];
    kiln_status s;
#define W(field, suffix, nd, need_f32, ...)                                                            \
    do {                                                                                               \
        int64_t ne_[] = {__VA_ARGS__};                                                                 \
        snprintf(name, sizeof name, "blk.%d." suffix ".weight", il);                                   \
        if ((s = kiln__model_weight(m, name, nd, ne_, need_f32, &l->field))) return s;                  \
    } while (0)
    W(attn_norm, "attn_norm", 1, true, E);
    W(wq, "attn_q", 2, false, E, Eq);
    W(wk, "attn_k", 2, false, E, Ekv);
    W(wv, "attn_v", 2, false, E, Ekv);
    W(wo, "attn_output", 2, false, Eq, E);
    W(ffn_norm, "ffn_norm", 1, true, E);
    W(w_gate, "ffn_gate", 2, false, E, F);
    W(w_up, "ffn_up", 2, false, E, F);
    W(w_down, "ffn_down", 2, false, F, E);
#undef W
    return KILN_OK;
}

kiln_status kiln__llama_load_weights(kiln_model *m) {
    const kiln_hparams *hp = &m->hp;
    int64_t ne_embd[2] = {hp->n_embd, hp->n_vocab};
    int64_t ne_norm[1] = {hp->n_embd};
    kiln_status s;
    if ((s = kiln__model_weight(m, "token_embd.weight", 2, ne_embd, false, &m->tok_embd)) ||
        (s = kiln__model_weight(m, "output_norm.weight", 1, ne_norm, true, &m->output_norm)))
        return s;
    if (kiln_gguf_find_tensor(m->gguf, "output.weight") >= 0) {
        if ((s = kiln__model_weight(m, "output.weight", 2, ne_embd, false, &m->output))) return s;
    } else {
        m->output = m->tok_embd; /* tied embedding */
    }
    m->layers = kiln__calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) return kiln__nomem("layer table");
    for (int32_t il = 0; il < hp->n_layer; il++)
        if ((s = layer_weights(m, il, &m->layers[il]))) return s;
    return KILN_OK;
}

/* Self-attention of one block; returns Wo attn [E, T]. */
static kiln_tensor *attention_block(const kiln_model *m, kiln_graph *g, const kiln_batch_inputs *in, int32_t il,
                                    kiln_tensor *h) {
    const kiln_hparams *hp = &m->hp;
    const kiln_layer *l = &m->layers[il];
    int64_t T = in->n_tokens, D = hp->head_dim, Ekv = (int64_t)hp->n_head_kv * D;
    int64_t L = (int64_t)in->n_past + T;
    kiln_tensor *q = kiln__matmul(g, kiln__weight_leaf(g, &l->wq), h);             /* [Hq*D, T] */
    kiln_tensor *k = kiln__matmul(g, kiln__weight_leaf(g, &l->wk), h);             /* [Hkv*D, T] */
    kiln_tensor *v = kiln__matmul(g, kiln__weight_leaf(g, &l->wv), h);             /* [Hkv*D, T] */
    q = kiln__rope(g, kiln__reshape_3d(g, q, D, hp->n_head, T), in->pos, hp->n_rot, hp->rope_mode,
                   hp->rope_freq_base, hp->rope_freq_scale);                      /* [D, Hq, T] */
    k = kiln__rope(g, kiln__reshape_3d(g, k, D, hp->n_head_kv, T), in->pos, hp->n_rot, hp->rope_mode,
                   hp->rope_freq_base, hp->rope_freq_scale);                      /* [D, Hkv, T] */
    kiln_tensor *kc = kiln__cache_write(g, in->k_cache[il], kiln__reshape_2d(g, k, Ekv, T), in->n_past);
    kiln_tensor *vc = kiln__cache_write(g, in->v_cache[il], v, in->n_past);       /* [Hkv*D, L] */
    kiln_tensor *att = kiln__attention(g, q, kiln__reshape_3d(g, kc, D, hp->n_head_kv, L),
                                       kiln__reshape_3d(g, vc, D, hp->n_head_kv, L), in->n_past,
                                       1.0f / sqrtf((float)D));                   /* [D, Hq, T] */
    kiln__tensor_set_name(q, "blk.%d.q", il);
    kiln__tensor_set_name(k, "blk.%d.k", il);
    kiln__tensor_set_name(att, "blk.%d.attn", il);
    return kiln__matmul(g, kiln__weight_leaf(g, &l->wo), kiln__reshape_2d(g, att, D * hp->n_head, T));
}

/* SwiGLU feed-forward of one block; returns [E, T]. */
static kiln_tensor *ffn_block(const kiln_model *m, kiln_graph *g, int32_t il, kiln_tensor *h) {
    const kiln_layer *l = &m->layers[il];
    kiln_tensor *gate = kiln__silu(g, kiln__matmul(g, kiln__weight_leaf(g, &l->w_gate), h)); /* [F, T] */
    kiln_tensor *up = kiln__matmul(g, kiln__weight_leaf(g, &l->w_up), h);                   /* [F, T] */
    return kiln__matmul(g, kiln__weight_leaf(g, &l->w_down), kiln__mul(g, gate, up));       /* [E, T] */
}

kiln_tensor *kiln__llama_build(const kiln_model *m, kiln_graph *g, const kiln_batch_inputs *in) {
    const kiln_hparams *hp = &m->hp;
    kiln_tensor *x = kiln__get_rows(g, kiln__weight_leaf(g, &m->tok_embd), in->ids); /* [E, T] */
    for (int32_t il = 0; il < hp->n_layer; il++) {
        const kiln_layer *l = &m->layers[il];
        kiln_tensor *h = kiln__mul(g, kiln__rms_norm(g, x, hp->norm_eps), kiln__weight_leaf(g, &l->attn_norm));
        x = kiln__add(g, x, attention_block(m, g, in, il, h));
        kiln__tensor_set_name(x, "blk.%d.attn_residual", il);
        h = kiln__mul(g, kiln__rms_norm(g, x, hp->norm_eps), kiln__weight_leaf(g, &l->ffn_norm));
        x = kiln__add(g, x, ffn_block(m, g, il, h));
        kiln__tensor_set_name(x, "blk.%d.ffn_residual", il);
    }
    if (!x) return NULL;
    /* Only the last token's logits are needed: a zero-copy view of its column. */
    int64_t ne_last[2] = {hp->n_embd, 1};
    size_t nb_last[2] = {x->nb[0], x->nb[1]};
    kiln_tensor *last = kiln__view(g, x, 2, ne_last, nb_last, (size_t)(in->n_tokens - 1) * x->nb[1]);
    kiln_tensor *h = kiln__mul(g, kiln__rms_norm(g, last, hp->norm_eps), kiln__weight_leaf(g, &m->output_norm));
    kiln_tensor *logits = kiln__matmul(g, kiln__weight_leaf(g, &m->output), h); /* [V, 1] */
    kiln__tensor_set_name(logits, "logits");
    kiln__graph_set_output(g, logits);
    return logits;
}
