/*
 * model.h - the internal model representation shared by the loader (model.c), the hyperparameter reader
 * (hparams.c), the architecture builders (llama.c) and the inference context (context.c).
 *
 * Weights are kiln_tensor_info records pointing into the GGUF mapping: nothing is copied at load.
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
    int32_t head_dim;    /* D = E / Hq */
    int32_t n_rot;       /* rotary dimensions per head (<= D) */
    int32_t n_vocab;     /* V */
    int32_t rope_mode;   /* KILN_ROPE_NORMAL or KILN_ROPE_NEOX */
    float rope_freq_base;
    float rope_freq_scale; /* 1 / linear scaling factor */
    float norm_eps;
} kiln_hparams;

typedef struct kiln_layer {
    kiln_tensor_info attn_norm; /* [E] f32 */
    kiln_tensor_info wq;        /* [E, Hq * D] */
    kiln_tensor_info wk;        /* [E, Hkv * D] */
    kiln_tensor_info wv;        /* [E, Hkv * D] */
    kiln_tensor_info wo;        /* [Hq * D, E] */
    kiln_tensor_info ffn_norm;  /* [E] f32 */
    kiln_tensor_info w_gate;    /* [E, F] */
    kiln_tensor_info w_up;      /* [E, F] */
    kiln_tensor_info w_down;    /* [F, E] */
} kiln_layer;

struct kiln_model {
    kiln_gguf *gguf;
    kiln_vocab *vocab;
    char arch[32];
    kiln_hparams hp;
    kiln_tensor_info tok_embd;    /* [E, V] */
    kiln_tensor_info output_norm; /* [E] f32 */
    kiln_tensor_info output;      /* [E, V]; the token embedding when the file has no output.weight */
    kiln_layer *layers;           /* [L] */
    uint64_t weight_bytes;
};

/* Read and check the hyperparameters of architecture `arch` (the "<arch>." keys). */
kiln_status kiln__hparams_read(const kiln_gguf *gguf, const char *arch, kiln_hparams *hp);

/* Find tensor `name` and check its type is usable and its shape is exactly ne[0..n_dims). */
kiln_status kiln__model_weight(kiln_model *m, const char *name, int32_t n_dims, const int64_t *ne, bool need_f32,
                               kiln_tensor_info *out);

/* A graph leaf for a weight. */
kiln_tensor *kiln__weight_leaf(kiln_graph *g, const kiln_tensor_info *w);

/* Everything a builder needs for one forward pass over a batch of T tokens. */
typedef struct kiln_batch_inputs {
    kiln_tensor *ids;       /* i32 [T] token ids */
    kiln_tensor *pos;       /* i32 [T] absolute positions */
    kiln_tensor **k_cache;  /* [L] f32 [Hkv * D, n_ctx] cache leaves */
    kiln_tensor **v_cache;  /* [L] */
    int32_t n_tokens;       /* T */
    int32_t n_past;         /* tokens already in the cache */
} kiln_batch_inputs;

/* The llama builder: emits the forward pass and returns the logits node [V, 1] of the last token. */
kiln_tensor *kiln__llama_build(const kiln_model *m, kiln_graph *g, const kiln_batch_inputs *in);

/* Load the llama-family weights of a model whose hparams are read. */
kiln_status kiln__llama_load_weights(kiln_model *m);

#endif
