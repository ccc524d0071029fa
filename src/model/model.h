/*
 * model.h - the internal model representation shared by the loader (model.c), the hyperparameter reader
 * (hparams.c), the per-architecture weight loaders (llama.c, qwen.c, phi3.c, gpt2.c, bert.c), the graph
 * blocks (blocks.c), the forward passes they compose (decoder.c, encoder.c) and the inference context
 * (context.c).
 *
 * Weights are kiln_tensor_info records pointing into the GGUF mapping: nothing is copied at load. A weight
 * an architecture does not have (a bias, a fused projection) is a record with name == NULL (kiln__has).
 */
#ifndef KILN_MODEL_H
#define KILN_MODEL_H

#include "kiln.h"

#include "graph/graph.h"

typedef struct kiln_hparams {
    int32_t n_ctx_train; /* context length the model was trained with */
    int32_t n_embd;      /* E: embedding width */
    int32_t n_layer;     /* L: transformer blocks */
    int32_t n_ff;        /* F: feed-forward width */
    int32_t n_head;      /* Hq: query heads */
    int32_t n_head_kv;   /* Hkv: key/value heads (grouped-query attention when < Hq) */
    int32_t head_dim;    /* D: attention.key_length, else E / Hq */
    int32_t n_rot;       /* rotary dimensions per head (<= D) */
    int32_t n_vocab;     /* V */
    int32_t rope_mode;   /* KILN_ROPE_NORMAL or KILN_ROPE_NEOX */
    float rope_freq_base;
    float rope_freq_scale; /* 1 / linear scaling factor */
    float norm_eps;        /* RMSNorm or LayerNorm epsilon, whichever the architecture uses */
    int32_t n_swa;         /* sliding attention window: a query sees its last n_swa keys (0 = no window) */
    int32_t rope_scaling;  /* KILN_ROPE_SCALING_* from rope.scaling.type */
    float rope_factor;     /* llama3: rope.scaling.factor */
    float rope_low_freq;   /* llama3: rope.scaling.low_freq_factor */
    float rope_high_freq;  /* llama3: rope.scaling.high_freq_factor */
    int32_t rope_orig_ctx; /* llama3: rope.scaling.original_context_length */
    bool causal;           /* attention.causal: a token sees only earlier positions (false: its whole
                            * sequence, as an encoder) */
    int32_t pooling;       /* pooling_type: the file's kiln_pooling for sentence embeddings */
} kiln_hparams;

enum { KILN_ROPE_SCALING_LINEAR = 0, KILN_ROPE_SCALING_LLAMA3 = 1 };

/* How a block normalizes: RMSNorm times a weight, or LayerNorm times a weight plus a bias. */
typedef enum kiln_norm_kind { KILN_NORM_RMS = 0, KILN_NORM_LAYER = 1 } kiln_norm_kind;

/* Where a block normalizes: before each sublayer, with a final norm before the output projection (a
 * decoder: x = x + f(norm(x))), or after each residual sum (BERT: x = norm(x + f(x))). */
typedef enum kiln_norm_order { KILN_PRE_NORM = 0, KILN_POST_NORM = 1 } kiln_norm_order;

/* The feed-forward variant: SwiGLU with separate gate and up projections, SwiGLU with both in one
 * projection (gate rows first, as Phi-3 stores them), or up -> GELU (tanh) -> down with biases (GPT-2). */
typedef enum kiln_ffn_kind { KILN_FFN_SWIGLU = 0, KILN_FFN_SWIGLU_FUSED = 1, KILN_FFN_GELU = 2 } kiln_ffn_kind;

/* attn_norm and ffn_norm are the norms of the attention and feed-forward sublayers: before them
 * (attn_norm, ffn_norm in the file) in a pre-norm model, after their residual sums (attn_output_norm,
 * layer_output_norm) in a post-norm one. */
typedef struct kiln_layer {
    kiln_tensor_info attn_norm;   /* [E] f32 */
    kiln_tensor_info attn_norm_b; /* [E] f32, LayerNorm only */
    kiln_tensor_info wq;          /* [E, Hq * D]; absent when wqkv is used */
    kiln_tensor_info wk;          /* [E, Hkv * D] */
    kiln_tensor_info wv;          /* [E, Hkv * D] */
    kiln_tensor_info bq, bk, bv;  /* [Hq * D], [Hkv * D], [Hkv * D] f32, optional (Qwen2) */
    kiln_tensor_info wqkv;        /* [E, (Hq + 2 Hkv) * D]: Q, K and V rows in one projection (Phi-3, GPT-2) */
    kiln_tensor_info bqkv;        /* [(Hq + 2 Hkv) * D] f32, optional */
    kiln_tensor_info q_norm;      /* [D] f32, optional: RMSNorm of each query head (Qwen3) */
    kiln_tensor_info k_norm;      /* [D] f32, optional: RMSNorm of each key head */
    kiln_tensor_info wo;          /* [Hq * D, E] */
    kiln_tensor_info bo;          /* [E] f32, optional */
    kiln_tensor_info ffn_norm;    /* [E] f32 */
    kiln_tensor_info ffn_norm_b;  /* [E] f32, LayerNorm only */
    kiln_tensor_info w_gate;      /* [E, F]; SWIGLU only */
    kiln_tensor_info w_up;        /* [E, F]; [E, 2F] (gate rows, then up rows) for SWIGLU_FUSED */
    kiln_tensor_info b_up;        /* [F] f32, optional */
    kiln_tensor_info w_down;      /* [F, E] */
    kiln_tensor_info b_down;      /* [E] f32, optional */
} kiln_layer;

struct kiln_model {
    kiln_gguf *gguf;
    kiln_vocab *vocab;
    char arch[32];
    kiln_hparams hp;
    kiln_tensor_info tok_embd;    /* [E, V] */
    kiln_tensor_info output_norm; /* [E] f32 */
    kiln_tensor_info output;      /* [E, V]; the token embedding when the file has no output.weight */
    kiln_tensor_info output_norm_b; /* [E] f32, LayerNorm only */
    kiln_tensor_info pos_embd;    /* [E, n_ctx_train] learned absolute positions (GPT-2, BERT), optional */
    kiln_tensor_info tok_types;   /* [E, n_token_types] token-type (segment) embeddings (BERT), optional;
                                   * every token is of type 0 */
    kiln_tensor_info embd_norm;   /* [E] f32 LayerNorm of the summed embeddings (BERT), optional */
    kiln_tensor_info embd_norm_b; /* [E] f32 */
    kiln_tensor_info rope_freqs;  /* [n_rot / 2] f32 frequency divisors (Llama 3), optional: the file's
                                   * rope_freqs.weight, else computed from rope.scaling.* into rope_buf */
    float *rope_buf;              /* owned; NULL unless the divisors were computed */
    kiln_norm_kind norm;
    kiln_norm_order norm_order;
    kiln_ffn_kind ffn;
    kiln_layer *layers;           /* [L] */
    uint64_t weight_bytes;
    struct kiln_engine *engine;   /* the backends, prepared weights and constants every context shares:
                                   * given by the runtime (runtime/model_load.c); opaque here */
};

static inline bool kiln__has(const kiln_tensor_info *w) { return w->name != NULL; }

/* The model's data from the GGUF file at path: architecture, hyperparameters, vocabulary, every weight
 * found and checked (no engine: runtime/model_load.c adds it). kiln__model_close frees what open made. */
kiln_status kiln__model_open(const char *path, kiln_model **out);
void kiln__model_close(kiln_model *m);

/* Read and check the hyperparameters of architecture `arch` (the "<arch>." keys). */
kiln_status kiln__hparams_read(const kiln_gguf *gguf, const char *arch, kiln_hparams *hp);

/* Find tensor `name` and check its type is usable and its shape is exactly ne[0..n_dims). */
kiln_status kiln__model_weight(kiln_model *m, const char *name, int32_t n_dims, const int64_t *ne, bool need_f32,
                               kiln_tensor_info *out);

/* Flags of kiln__layer_weight. */
enum { KILN_W_OPTIONAL = 1u << 0, KILN_W_F32 = 1u << 1 };

/* Tensor "blk.<il>.<suffix>" of shape [ne0] (n_dims 1) or [ne0, ne1] (n_dims 2). An absent KILN_W_OPTIONAL
 * tensor leaves *out zeroed (kiln__has is false); a present one must have the shape all the same. */
kiln_status kiln__layer_weight(kiln_model *m, int32_t il, const char *suffix, unsigned flags, int32_t n_dims,
                               int64_t ne0, int64_t ne1, kiln_tensor_info *out);

/* Whether a block has an optional part: never (not looked for), when the file has it, or always. */
typedef enum kiln_part { KILN_PART_NONE = 0, KILN_PART_OPTIONAL = 1, KILN_PART_REQUIRED = 2 } kiln_part;

/* The shape of an architecture's blocks beyond its norm and feed-forward kinds. */
typedef struct kiln_block_spec {
    bool fused_qkv;     /* attn_qkv holds Q, K and V rows; else attn_q, attn_k, attn_v */
    kiln_part qkv_bias; /* attn_q/k/v.bias or attn_qkv.bias */
    kiln_part out_bias; /* attn_output.bias */
    kiln_part qk_norm;  /* attn_q_norm, attn_k_norm [D] */
    kiln_part ffn_bias; /* ffn_up.bias, ffn_down.bias */
} kiln_block_spec;

/* The layer table (zeroed, for the architecture's loader to fill). */
kiln_status kiln__alloc_layers(kiln_model *m);

/* Every block's weights, by the model's norm and feed-forward kinds and the spec. */
kiln_status kiln__load_block_weights(kiln_model *m, const kiln_block_spec *spec);

/* The weights around the blocks, the same for every architecture: token_embd, output_norm (and its bias
 * for LayerNorm models), output (the token embedding when absent), the optional rope_freqs, and the layer
 * table (zeroed, for the architecture's loader to fill). */
kiln_status kiln__load_common_weights(kiln_model *m);

/* A graph leaf for a weight. */
kiln_tensor *kiln__weight_leaf(kiln_graph *g, const kiln_tensor_info *w);

/* Everything a builder needs for one forward pass over a batch of T tokens (padded to a bucket) of any
 * number of sequences, reading and writing a KV cache of C cells. */
typedef struct kiln_batch_inputs {
    kiln_tensor *ids;       /* i32 [T] token ids */
    kiln_tensor *pos;       /* i32 [T] positions in their sequences */
    kiln_tensor *cells;     /* i32 [T] the KV cell each token's K and V go to; -1 for padding */
    kiln_tensor *mask;      /* f32 [C, T] additive attention mask: 0 where token t sees cell c, else -inf */
    kiln_tensor *out_ids;   /* i32 [O] the tokens whose logits are computed */
    kiln_tensor **k_cache;  /* [L] [Hkv * D, C] cache leaves (f32, f16 or q8_0) */
    kiln_tensor **v_cache;  /* [L] */
    int32_t n_tokens;       /* T */
    int32_t n_outputs;      /* O */
} kiln_batch_inputs;

/* The forward pass of the pre-norm decoders (decoder.c): emits the graph and returns the logits node
 * [V, O] of the tokens out_ids names. */
kiln_tensor *kiln__decoder_build(const kiln_model *m, kiln_graph *g, const kiln_batch_inputs *in);

/* The forward pass of the post-norm encoders (encoder.c): emits the graph and returns the final hidden
 * states [E, O] of the tokens out_ids names. */
kiln_tensor *kiln__encoder_build(const kiln_model *m, kiln_graph *g, const kiln_batch_inputs *in);

/* The model's forward pass: the graph's one output, logits [V, O] for a decoder or hidden states [E, O]
 * for an encoder (kiln__model_output_width says which width). */
static inline kiln_tensor *kiln__model_build(const kiln_model *m, kiln_graph *g, const kiln_batch_inputs *in) {
    return m->norm_order == KILN_POST_NORM ? kiln__encoder_build(m, g, in) : kiln__decoder_build(m, g, in);
}

/* The rows of the forward pass's output: V logits for a decoder, E hidden values for an encoder. */
static inline int32_t kiln__model_output_width(const kiln_model *m) {
    return m->norm_order == KILN_POST_NORM ? m->hp.n_embd : m->hp.n_vocab;
}

/* Architecture loaders: run after the hyperparameters are read; each sets the model's norm and
 * feed-forward kinds and rope mode, and finds and checks its weights. */
kiln_status kiln__llama_load_weights(kiln_model *m); /* llama, Llama 3, Mistral (llama.c) */
kiln_status kiln__qwen_load_weights(kiln_model *m);  /* qwen2, qwen3 (qwen.c) */
kiln_status kiln__phi3_load_weights(kiln_model *m);  /* phi3 (phi3.c) */
kiln_status kiln__gpt2_load_weights(kiln_model *m);  /* gpt2 (gpt2.c) */
kiln_status kiln__bert_load_weights(kiln_model *m);  /* bert (bert.c) */

/* Llama 3 rope frequency divisors, as llama.cpp's converter computes them for rope_freqs.weight:
 * for each pair i < n_rot / 2 with wavelength w = 2 pi base^(2i / n_rot), 1 when w < orig_ctx /
 * high_freq, `factor` when w > orig_ctx / low_freq, and a smooth blend between. */
void kiln__llama3_rope_factors(const kiln_hparams *hp, float *out);

#endif
