/*
 * decoder.c - the forward pass every decoder architecture shares, as a graph: a stack of pre-norm
 * blocks between the token embedding and the output projection.
 *
 *   x = token_embd[ids] (+ position_embd[pos] for learned positions)            [E, T]
 *   per block:  x = x + attention(norm(x) * attn_norm)
 *               x = x + ffn(norm(x) * ffn_norm)
 *   logits = output (norm(x[out_ids]) * output_norm)                              [V, O], the tokens asked for
 *
 * What differs between architectures lives in the blocks (blocks.c), chosen by the model's loader: the
 * norm (RMSNorm, or LayerNorm with bias), the projections (separate or fused QKV, biases, per-head QK
 * norms), rope (mode, partial rotary, Llama 3 divisors) or learned positions, and the feed-forward
 * variant. Which keys a token sees (its sequence, causality, a sliding window) is the mask input's
 * content, made by the runtime. The result is plain ops only; the passes fuse them.
 */
#include "model/blocks.h"

kiln_tensor *kiln__decoder_build(const kiln_model *m, kiln_graph *g, const kiln_batch_inputs *in) {
    const kiln_hparams *hp = &m->hp;
    kiln_tensor *x = kiln__get_rows(g, kiln__weight_leaf(g, &m->tok_embd), in->ids); /* [E, T] */
    if (kiln__has(&m->pos_embd)) x = kiln__add(g, x, kiln__get_rows(g, kiln__weight_leaf(g, &m->pos_embd), in->pos));
    for (int32_t il = 0; il < hp->n_layer; il++) {
        const kiln_layer *l = &m->layers[il];
        kiln__graph_set_layer(g, il);
        kiln_tensor *h = kiln__blk_norm(m, g, x, &l->attn_norm, &l->attn_norm_b);
        x = kiln__add(g, x, kiln__blk_attention(m, g, in, il, h));
        kiln__tensor_set_name(x, "blk.%d.attn_residual", il);
        h = kiln__blk_norm(m, g, x, &l->ffn_norm, &l->ffn_norm_b);
        x = kiln__add(g, x, kiln__blk_ffn(m, g, il, h));
        kiln__tensor_set_name(x, "blk.%d.ffn_residual", il);
    }
    kiln__graph_set_layer(g, -1);
    kiln_tensor *logits = kiln__blk_logits(m, g, x, in->out_ids);
    kiln__graph_set_output(g, logits);
    return logits;
}
