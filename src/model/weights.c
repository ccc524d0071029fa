/*
 * weights.c - finding a model's weights in its GGUF file and checking each one's presence, type and exact
 * shape, for the architecture loaders. Weights stay in the file mapping; a record names where.
 *
 * The pieces every architecture shares are loaded here (kiln__load_common_weights): the token embedding,
 * the final norm, the output projection with its tied-embedding fallback, and Llama 3's optional
 * rope_freqs.weight, or the same divisors computed from the rope.scaling.* keys.
 */
#include "model/model.h"

#include "core/core.h"
#include "tensor/types.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define KILN__WEIGHT_ALIGN 4 /* bytes: the widest element a kernel loads from a weight (f32) */

kiln_status kiln__model_weight(kiln_model *m, const char *name, int32_t n_dims, const int64_t *ne, bool need_f32,
                               kiln_tensor_info *out) {
    int64_t i = kiln_gguf_find_tensor(m->gguf, name);
    kiln_status s;
    if (i < 0) return kiln__error(KILN_E_FORMAT, "tensor '%s' is missing", name);
    if ((s = kiln_gguf_tensor_info(m->gguf, i, out))) return s;
    for (int d = 0; d < 4; d++) {
        int64_t want = d < n_dims ? ne[d] : 1;
        if (out->ne[d] != want)
            return kiln__error(KILN_E_FORMAT, "tensor '%s' has shape [%lld, %lld, %lld, %lld], expected dim %d = %lld",
                               name, (long long)out->ne[0], (long long)out->ne[1], (long long)out->ne[2],
                               (long long)out->ne[3], d, (long long)want);
    }
    if (need_f32 && out->type != KILN_TYPE_F32)
        return kiln__error(KILN_E_UNSUPPORTED, "tensor '%s' has type %s; Kiln needs f32 here", name,
                           kiln__type_name(out->type));
    if (!kiln__type_traits(out->type)->supported)
        return kiln__error(KILN_E_UNSUPPORTED, "tensor '%s' has type %s, which Kiln cannot compute with yet", name,
                           kiln__type_name(out->type));
    /* The kernels read weights in place as f32 / f16 / block-scale words; a file whose general.alignment
     * is 1 or 2 can place a tensor's data at any address, which they cannot read. */
    if ((uintptr_t)out->data % KILN__WEIGHT_ALIGN != 0)
        return kiln__error(KILN_E_UNSUPPORTED,
                           "tensor '%s': its data is not %d-byte aligned (general.alignment %zu); Kiln's kernels "
                           "need at least %d",
                           name, KILN__WEIGHT_ALIGN, kiln_gguf_alignment(m->gguf), KILN__WEIGHT_ALIGN);
    m->weight_bytes += out->size;
    return KILN_OK;
}

kiln_status kiln__layer_weight(kiln_model *m, int32_t il, const char *suffix, unsigned flags, int32_t n_dims,
                               int64_t ne0, int64_t ne1, kiln_tensor_info *out) {
    char name[96];
    int64_t ne[2] = {ne0, ne1};
    snprintf(name, sizeof name, "blk.%d.%s", il, suffix);
    memset(out, 0, sizeof *out);
    if ((flags & KILN_W_OPTIONAL) && kiln_gguf_find_tensor(m->gguf, name) < 0) return KILN_OK;
    return kiln__model_weight(m, name, n_dims, ne, (flags & KILN_W_F32) != 0, out);
}

kiln_tensor *kiln__weight_leaf(kiln_graph *g, const kiln_tensor_info *w) {
    return kiln__graph_leaf(g, w->name, w->type, w->n_dims, w->ne, (void *)w->data, KILN_TENSOR_WEIGHT);
}

/* rope_freqs.weight when the file has it; else, for rope.scaling.type "llama3", the divisors computed
 * from the keys into a buffer the model owns. */
static kiln_status rope_freqs(kiln_model *m) {
    const kiln_hparams *hp = &m->hp;
    int64_t ne[1] = {hp->n_rot / 2};
    if (kiln_gguf_find_tensor(m->gguf, "rope_freqs.weight") >= 0)
        return kiln__model_weight(m, "rope_freqs.weight", 1, ne, true, &m->rope_freqs);
    if (hp->rope_scaling != KILN_ROPE_SCALING_LLAMA3) return KILN_OK;
    m->rope_buf = kiln__alloc_array((size_t)ne[0], sizeof *m->rope_buf);
    if (!m->rope_buf) return kiln__nomem("rope frequency factors");
    kiln__llama3_rope_factors(hp, m->rope_buf);
    m->rope_freqs = (kiln_tensor_info){.name = "rope_freqs (llama3)", .type = KILN_TYPE_F32, .n_dims = 1,
                                       .ne = {ne[0], 1, 1, 1}, .size = (size_t)ne[0] * sizeof(float),
                                       .data = m->rope_buf};
    return KILN_OK;
}

kiln_status kiln__load_common_weights(kiln_model *m) {
    const kiln_hparams *hp = &m->hp;
    int64_t ne_embd[2] = {hp->n_embd, hp->n_vocab};
    int64_t ne_norm[1] = {hp->n_embd};
    kiln_status s;
    if ((s = kiln__model_weight(m, "token_embd.weight", 2, ne_embd, false, &m->tok_embd)) ||
        (s = kiln__model_weight(m, "output_norm.weight", 1, ne_norm, true, &m->output_norm)))
        return s;
    if (m->norm == KILN_NORM_LAYER &&
        (s = kiln__model_weight(m, "output_norm.bias", 1, ne_norm, true, &m->output_norm_b)))
        return s;
    if (kiln_gguf_find_tensor(m->gguf, "output.weight") >= 0) {
        if ((s = kiln__model_weight(m, "output.weight", 2, ne_embd, false, &m->output))) return s;
    } else {
        m->output = m->tok_embd; /* tied embedding */
    }
    if ((s = rope_freqs(m))) return s;
    return kiln__alloc_layers(m);
}

kiln_status kiln__alloc_layers(kiln_model *m) {
    m->layers = kiln__calloc((size_t)m->hp.n_layer, sizeof *m->layers);
    return m->layers ? KILN_OK : kiln__nomem("layer table");
}

static unsigned part_flags(kiln_part p) { return KILN_W_F32 | (p == KILN_PART_OPTIONAL ? KILN_W_OPTIONAL : 0u); }

static kiln_status attention_weights(kiln_model *m, int32_t il, const kiln_block_spec *sp, kiln_layer *l) {
    const kiln_hparams *hp = &m->hp;
    int64_t E = hp->n_embd, D = hp->head_dim, Eq = (int64_t)hp->n_head * D, Ekv = (int64_t)hp->n_head_kv * D;
    kiln_status s;
    if (sp->fused_qkv) {
        if ((s = kiln__layer_weight(m, il, "attn_qkv.weight", 0, 2, E, Eq + 2 * Ekv, &l->wqkv)) ||
            (sp->qkv_bias && (s = kiln__layer_weight(m, il, "attn_qkv.bias", part_flags(sp->qkv_bias), 1,
                                                     Eq + 2 * Ekv, 0, &l->bqkv))))
            return s;
    } else {
        if ((s = kiln__layer_weight(m, il, "attn_q.weight", 0, 2, E, Eq, &l->wq)) ||
            (s = kiln__layer_weight(m, il, "attn_k.weight", 0, 2, E, Ekv, &l->wk)) ||
            (s = kiln__layer_weight(m, il, "attn_v.weight", 0, 2, E, Ekv, &l->wv)))
            return s;
        if (sp->qkv_bias &&
            ((s = kiln__layer_weight(m, il, "attn_q.bias", part_flags(sp->qkv_bias), 1, Eq, 0, &l->bq)) ||
             (s = kiln__layer_weight(m, il, "attn_k.bias", part_flags(sp->qkv_bias), 1, Ekv, 0, &l->bk)) ||
             (s = kiln__layer_weight(m, il, "attn_v.bias", part_flags(sp->qkv_bias), 1, Ekv, 0, &l->bv))))
            return s;
    }
    if (sp->qk_norm &&
        ((s = kiln__layer_weight(m, il, "attn_q_norm.weight", part_flags(sp->qk_norm), 1, D, 0, &l->q_norm)) ||
         (s = kiln__layer_weight(m, il, "attn_k_norm.weight", part_flags(sp->qk_norm), 1, D, 0, &l->k_norm))))
        return s;
    if ((s = kiln__layer_weight(m, il, "attn_output.weight", 0, 2, Eq, E, &l->wo))) return s;
    if (sp->out_bias && (s = kiln__layer_weight(m, il, "attn_output.bias", part_flags(sp->out_bias), 1, E, 0, &l->bo)))
        return s;
    return KILN_OK;
}

static kiln_status ffn_weights(kiln_model *m, int32_t il, const kiln_block_spec *sp, kiln_layer *l) {
    const kiln_hparams *hp = &m->hp;
    int64_t E = hp->n_embd, F = hp->n_ff, F_up = m->ffn == KILN_FFN_SWIGLU_FUSED ? 2 * F : F;
    kiln_status s;
    if (m->ffn == KILN_FFN_SWIGLU && (s = kiln__layer_weight(m, il, "ffn_gate.weight", 0, 2, E, F, &l->w_gate)))
        return s;
    if ((s = kiln__layer_weight(m, il, "ffn_up.weight", 0, 2, E, F_up, &l->w_up)) ||
        (s = kiln__layer_weight(m, il, "ffn_down.weight", 0, 2, F, E, &l->w_down)))
        return s;
    if (sp->ffn_bias &&
        ((s = kiln__layer_weight(m, il, "ffn_up.bias", part_flags(sp->ffn_bias), 1, F_up, 0, &l->b_up)) ||
         (s = kiln__layer_weight(m, il, "ffn_down.bias", part_flags(sp->ffn_bias), 1, E, 0, &l->b_down))))
        return s;
    return KILN_OK;
}

/* The norm of a sublayer: "<name>.weight" (and "<name>.bias" for LayerNorm). */
static kiln_status norm_weights(kiln_model *m, int32_t il, const char *name, kiln_tensor_info *w,
                                kiln_tensor_info *b) {
    char key[64];
    int64_t E = m->hp.n_embd;
    kiln_status s;
    snprintf(key, sizeof key, "%s.weight", name);
    if ((s = kiln__layer_weight(m, il, key, KILN_W_F32, 1, E, 0, w))) return s;
    if (m->norm != KILN_NORM_LAYER) return KILN_OK;
    snprintf(key, sizeof key, "%s.bias", name);
    return kiln__layer_weight(m, il, key, KILN_W_F32, 1, E, 0, b);
}

kiln_status kiln__load_block_weights(kiln_model *m, const kiln_block_spec *spec) {
    /* Post-norm blocks name their norms for what they follow (llama.cpp's BERT tensor names). */
    bool post = m->norm_order == KILN_POST_NORM;
    const char *attn_norm = post ? "attn_output_norm" : "attn_norm";
    const char *ffn_norm = post ? "layer_output_norm" : "ffn_norm";
    kiln_status s;
    for (int32_t il = 0; il < m->hp.n_layer; il++) {
        kiln_layer *l = &m->layers[il];
        if ((s = norm_weights(m, il, attn_norm, &l->attn_norm, &l->attn_norm_b)) ||
            (s = attention_weights(m, il, spec, l)) ||
            (s = norm_weights(m, il, ffn_norm, &l->ffn_norm, &l->ffn_norm_b)) || (s = ffn_weights(m, il, spec, l)))
            return s;
    }
    return KILN_OK;
}
