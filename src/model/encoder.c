/*
 * encoder.c - the forward pass of the post-norm encoders (BERT), as a graph: summed embeddings and their
 * norm, then a stack of blocks that normalize after each residual sum. It returns the final hidden states,
 * which the context pools into sentence embeddings; there is no output projection.
 *
 *   x = token_embd[ids] + token_types[0] + position_embd[pos]                    [E, T]
 *   x = norm(x) * embd_norm (+ b)
 *   per block:  x = norm(x + attention(x)) * attn_norm (+ b)      attn_output_norm in the file
 *               x = norm(x + ffn(x)) * ffn_norm (+ b)             layer_output_norm in the file
 *   out = x[out_ids]                                                              [E, O]
 *
 * The attention and feed-forward sublayers are the decoder's (blocks.c): K and V pass through the KV
 * cache as there, and the runtime's mask makes attention bidirectional within each sequence (the model's
 * hyperparameters say it is not causal).
 */
#include "model/blocks.h"

/* The summed embeddings [E, T], normalized. */
static kiln_tensor *embed(const kiln_model *m, kiln_graph *g, const kiln_batch_inputs *in) {
    int64_t E = m->hp.n_embd;
    kiln_tensor *x = kiln__get_rows(g, kiln__weight_leaf(g, &m->tok_embd), in->ids);           /* [E, T] */
    x = kiln__add(g, x, kiln__get_rows(g, kiln__weight_leaf(g, &m->pos_embd), in->pos));       /* [E, T] */
    if (kiln__has(&m->tok_types)) {
        kiln_tensor *types = kiln__weight_leaf(g, &m->tok_types);                              /* [E, n] */
        int64_t ne[2] = {E, 1};
        size_t nb[2] = {types ? types->nb[0] : 0, types ? types->nb[1] : 0};
        kiln_tensor *type0 = kiln__view(g, types, 2, ne, nb, 0);                                 /* [E, 1] */
        if (m->tok_types.type != KILN_TYPE_F32) type0 = kiln__cast(g, type0);
        x = kiln__add(g, x, type0);                                                   /* broadcast: [E, T] */
    }
    return kiln__blk_norm(m, g, x, &m->embd_norm, &m->embd_norm_b);                          /* [E, T] */
}

kiln_tensor *kiln__encoder_build(const kiln_model *m, kiln_graph *g, const kiln_batch_inputs *in) {
    kiln_tensor *x = embed(m, g, in);                                                          /* [E, T] */
    for (int32_t il = 0; il < m->hp.n_layer; il++) {
        const kiln_layer *l = &m->layers[il];
        kiln__graph_set_layer(g, il);
        x = kiln__add(g, x, kiln__blk_attention(m, g, in, il, x));                             /* [E, T] */
        x = kiln__blk_norm(m, g, x, &l->attn_norm, &l->attn_norm_b);
        kiln__tensor_set_name(x, "blk.%d.attn_out", il);
        x = kiln__add(g, x, kiln__blk_ffn(m, g, il, x));                                       /* [E, T] */
        x = kiln__blk_norm(m, g, x, &l->ffn_norm, &l->ffn_norm_b);
        kiln__tensor_set_name(x, "blk.%d.layer_out", il);
    }
    kiln__graph_set_layer(g, -1);
    kiln_tensor *out = kiln__tensor_set_name(kiln__get_rows(g, x, in->out_ids), "hidden");     /* [E, O] */
    kiln__graph_set_output(g, out);
    return out;
}
