/*
 * qwen.c - Qwen2 and Qwen3. Both are llama-shaped (RMSNorm, SwiGLU, GQA; decoder.c) with rope in NEOX
 * mode: HF's rotate_half pairs (i, i + n_rot/2), and llama.cpp's converter leaves their Q and K as they are.
 *
 *   qwen2: Q, K and V projections have biases:  q = Wq h + bq, k = Wk h + bk, v = Wv h + bv
 *   qwen3: no biases; each head of q and k is RMS-normalized before rope:
 *          q = rope(rms_norm(q_head) * attn_q_norm), k = rope(rms_norm(k_head) * attn_k_norm);
 *          the head size D is attention.key_length, independent of E / Hq
 */
#include "model/model.h"

#include <string.h>

kiln_status kiln__qwen_load_weights(kiln_model *m) {
    static const kiln_block_spec qwen2 = {.qkv_bias = KILN_PART_REQUIRED};
    static const kiln_block_spec qwen3 = {.qk_norm = KILN_PART_REQUIRED};
    kiln_status s;
    m->norm = KILN_NORM_RMS;
    m->ffn = KILN_FFN_SWIGLU;
    m->hp.rope_mode = KILN_ROPE_NEOX;
    if ((s = kiln__load_common_weights(m))) return s;
    return kiln__load_block_weights(m, strcmp(m->arch, "qwen3") == 0 ? &qwen3 : &qwen2);
}
