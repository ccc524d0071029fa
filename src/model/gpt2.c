/*
 * gpt2.c - GPT-2: LayerNorm with bias, learned absolute position embeddings, a fused and biased QKV
 * projection, a GELU (tanh approximation) MLP with biases, and (usually) the token embedding as the
 * output projection. The forward pass is decoder.c:
 *
 *   x   = token_embd[ids] + position_embd[pos]
 *   h   = layer_norm(x) * attn_norm + attn_norm_b
 *   qkv = Wqkv h + bqkv; q, k, v are row ranges of it (no rope)
 *   x   = x + Wo attn + bo
 *   h   = layer_norm(x) * ffn_norm + ffn_norm_b
 *   x   = x + W_down gelu(W_up h + b_up) + b_down
 *   logits = output (layer_norm(x_last) * output_norm + output_norm_b)
 *
 * Positions index the position table, so a context can hold at most gpt2.context_length tokens; a
 * context larger than the table is refused by kiln_ctx_create.
 */
#include "model/model.h"

kiln_status kiln__gpt2_load_weights(kiln_model *m) {
    static const kiln_block_spec spec = {.fused_qkv = true, .qkv_bias = KILN_PART_REQUIRED,
                                         .out_bias = KILN_PART_REQUIRED, .ffn_bias = KILN_PART_REQUIRED};
    int64_t ne_pos[2] = {m->hp.n_embd, m->hp.n_ctx_train};
    kiln_status s;
    m->norm = KILN_NORM_LAYER;
    m->ffn = KILN_FFN_GELU;
    if ((s = kiln__load_common_weights(m)) ||
        (s = kiln__model_weight(m, "position_embd.weight", 2, ne_pos, false, &m->pos_embd)))
        return s;
    return kiln__load_block_weights(m, &spec);
}
