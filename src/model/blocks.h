/*
 * blocks.h - the pieces a transformer block is made of, emitted once here as plain graph ops and composed
 * by the forward pass (decoder.c) for every architecture. Which variant a piece takes follows from the
 * model: its norm and feed-forward kinds, its hyperparameters, and which optional weights the file has
 * (biases, a fused QKV projection, per-head QK norms).
 *
 * Every piece emits the plain, unfused forms the graph passes look for (rms_norm then mul, silu(gate) *
 * up, GELU via kiln__gelu_unfused, a bias as add, attention as matmul / scale / add mask / softmax /
 * matmul); nothing here calls a kernel. x and h are activations [E, T] of a batch of T tokens.
 */
#ifndef KILN_MODEL_BLOCKS_H
#define KILN_MODEL_BLOCKS_H

#include "model/model.h"

/* norm(x) * w (+ b): RMSNorm, or LayerNorm with its bias, by the model's norm kind. */
kiln_tensor *kiln__blk_norm(const kiln_model *m, kiln_graph *g, kiln_tensor *x, const kiln_tensor_info *w,
                            const kiln_tensor_info *b);

/* W x, plus the bias b when the model has it. W [K, N], x [K, T] -> [N, T]. */
kiln_tensor *kiln__blk_linear(kiln_graph *g, const kiln_tensor_info *w, const kiln_tensor_info *b, kiln_tensor *x);

/* Rows [r0, r0 + n) of y [N, T] as a strided view [n, T] (a part of a fused projection). */
kiln_tensor *kiln__blk_rows(kiln_graph *g, kiln_tensor *y, int64_t r0, int64_t n);

/* Self-attention in its plain form over every cache cell: q [D, Hq, T], cache views kc, vc
 * [Hkv * D, C], and the additive mask [C, T] (which cells each token sees). Returns [Hq * D, T]. */
kiln_tensor *kiln__blk_attention_core(kiln_graph *g, const kiln_hparams *hp, kiln_tensor *q, kiln_tensor *kc,
                                      kiln_tensor *vc, kiln_tensor *mask, int64_t T);

/* The attention block of layer il: Q, K, V projections (separate or fused, with optional biases),
 * optional per-head RMSNorm of Q and K, rope, the cache writes, attention, and the output projection.
 * h [E, T] -> [E, T]. */
kiln_tensor *kiln__blk_attention(const kiln_model *m, kiln_graph *g, const kiln_batch_inputs *in, int32_t il,
                                 kiln_tensor *h);

/* The feed-forward block of layer il, by the model's feed-forward kind. h [E, T] -> [E, T]. */
kiln_tensor *kiln__blk_ffn(const kiln_model *m, kiln_graph *g, int32_t il, kiln_tensor *h);

/* The logits [V, O] of the tokens out_ids [O] names in x [E, T]: final norm and output projection of
 * those columns. */
kiln_tensor *kiln__blk_logits(const kiln_model *m, kiln_graph *g, kiln_tensor *x, kiln_tensor *out_ids);

#endif
