/*
 * phi3.c - Phi-3: llama-shaped (RMSNorm, SwiGLU, GQA; decoder.c) with two fused projections and rope in
 * NEOX mode, possibly partial (rope.dimension_count < D: the rest of each head passes unrotated).
 *
 *   qkv = Wqkv h          [(Hq + 2 Hkv) D, T]: q, k, v are row ranges of one result (strided views)
 *   gu  = W_up h          [2F, T]: gate rows first, then up rows
 *   ffn = W_down (silu(gu[0:F]) * gu[F:2F])
 * A sliding window (phi3.attention.sliding_window, 2047 in Phi-3-mini) applies as in HF. The 128k models'
 * LongRoPE factors (rope_factors_long/short.weight) are refused rather than ignored.
 */
#include "model/model.h"

#include "core/core.h"

kiln_status kiln__phi3_load_weights(kiln_model *m) {
    static const kiln_block_spec spec = {.fused_qkv = true, .qkv_bias = KILN_PART_OPTIONAL};
    kiln_status s;
    m->norm = KILN_NORM_RMS;
    m->ffn = KILN_FFN_SWIGLU_FUSED;
    m->hp.rope_mode = KILN_ROPE_NEOX;
    if (kiln_gguf_find_tensor(m->gguf, "rope_factors_long.weight") >= 0)
        return kiln__error(KILN_E_UNSUPPORTED, "phi3 long-context rope scaling (rope_factors_long.weight) is not "
                           "supported yet");
    if ((s = kiln__load_common_weights(m))) return s;
    return kiln__load_block_weights(m, &spec);
}
