/*
 * bert.c - BERT encoders (BertModel as llama.cpp's converter writes it: general.architecture "bert"):
 * learned absolute positions, a token-type embedding, LayerNorm with bias after every residual sum
 * (post-norm), separate biased Q, K and V projections, a biased GELU MLP, bidirectional attention
 * (bert.attention.causal = false) and no language-model head. The forward pass is encoder.c:
 *
 *   x = token_embd[ids] + token_types[0] + position_embd[pos]
 *   x = layer_norm(x) * token_embd_norm + token_embd_norm_b
 *   per block:  x = layer_norm(x + Wo attn(x) + bo) * attn_output_norm + attn_output_norm_b
 *               x = layer_norm(x + W_down gelu(W_up x + b_up) + b_down) * layer_output_norm + ..._b
 *   out = x[out_ids]                                          the final hidden states, pooled by the context
 *
 * Every token is of type 0 (a single sentence), as sentence-transformers feeds it. Sentence embeddings
 * pool the final states of a sequence as bert.pooling_type says (context.c). Positions index the position
 * table, so a sequence has at most bert.context_length tokens.
 */
#include "model/model.h"

#include "core/core.h"

/* token_types.weight [E, n]: n = tokenizer.ggml.token_type_count when the file has it, else any n >= 1. */
static kiln_status token_types(kiln_model *m) {
    int64_t i = kiln_gguf_find_tensor(m->gguf, "token_types.weight"), count = 0;
    kiln_tensor_info info;
    kiln_status s;
    if (i < 0) return KILN_OK; /* no segment embedding: every type adds nothing */
    if ((s = kiln_gguf_tensor_info(m->gguf, i, &info))) return s;
    s = kiln_gguf_get_int(m->gguf, "tokenizer.ggml.token_type_count", &count);
    if (s == KILN_E_NOT_FOUND)
        count = info.ne[1];
    else if (s)
        return s;
    if (count < 1 || count > 65536)
        return kiln__error(KILN_E_FORMAT, "tokenizer.ggml.token_type_count %lld is outside 1..65536",
                           (long long)count);
    int64_t ne[2] = {m->hp.n_embd, count};
    return kiln__model_weight(m, "token_types.weight", 2, ne, false, &m->tok_types);
}

kiln_status kiln__bert_load_weights(kiln_model *m) {
    static const kiln_block_spec spec = {
        .qkv_bias = KILN_PART_REQUIRED, .out_bias = KILN_PART_REQUIRED, .ffn_bias = KILN_PART_REQUIRED};
    const kiln_hparams *hp = &m->hp;
    int64_t ne_embd[2] = {hp->n_embd, hp->n_vocab}, ne_pos[2] = {hp->n_embd, hp->n_ctx_train};
    int64_t ne_norm[1] = {hp->n_embd};
    kiln_status s;
    if (hp->causal)
        return kiln__error(KILN_E_UNSUPPORTED,
                           "bert.attention.causal is true; Kiln runs BERT as an encoder only");
    m->norm = KILN_NORM_LAYER;
    m->norm_order = KILN_POST_NORM;
    m->ffn = KILN_FFN_GELU;
    if ((s = kiln__model_weight(m, "token_embd.weight", 2, ne_embd, false, &m->tok_embd)) ||
        (s = kiln__model_weight(m, "position_embd.weight", 2, ne_pos, false, &m->pos_embd)) ||
        (s = token_types(m)) ||
        (s = kiln__model_weight(m, "token_embd_norm.weight", 1, ne_norm, true, &m->embd_norm)) ||
        (s = kiln__model_weight(m, "token_embd_norm.bias", 1, ne_norm, true, &m->embd_norm_b)) ||
        (s = kiln__alloc_layers(m)))
        return s;
    return kiln__load_block_weights(m, &spec);
}
