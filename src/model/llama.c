/*
 * llama.c - the Llama family: Llama 1/2, Llama 3 (rope frequency divisors), and Mistral-style models
 * (a llama whose metadata sets attention.sliding_window).
 *
 * Per block (x is the residual stream [E, T]; the forward pass itself is decoder.c):
 *   h = rms_norm(x) * attn_norm
 *   q, k, v = Wq h, Wk h, Wv h (+ biases when the file has them); rope in NORMAL (adjacent pairs) mode
 *   K, V caches get k, v at the cells of the batch; attention of q over the cells its mask shows (GQA)
 *   x = x + Wo attn
 *   h = rms_norm(x) * ffn_norm
 *   x = x + W_down (silu(W_gate h) * W_up h)
 * NORMAL mode because llama.cpp's converter permutes the rows of HF's Q and K weights so that the pairs
 * HF rotates (i, i + D/2) sit next to each other. Llama 3 divides each pair's rope frequency by a factor:
 * rope_freqs.weight as the converter writes it, or computed here from rope.scaling.type = "llama3".
 */
#include "model/model.h"

#include <math.h>

void kiln__llama3_rope_factors(const kiln_hparams *hp, float *out) {
    const double pi = 3.14159265358979323846;
    double low_wavelen = hp->rope_orig_ctx / (double)hp->rope_low_freq;
    double high_wavelen = hp->rope_orig_ctx / (double)hp->rope_high_freq;
    for (int32_t i = 0; i < hp->n_rot / 2; i++) {
        /* the converter's float32 frequency: 1 / base^(2i / n_rot) */
        float freq = 1.0f / powf(hp->rope_freq_base, (float)(2 * i) / (float)hp->n_rot);
        double wavelen = 2.0 * pi / freq;
        if (wavelen < high_wavelen) {
            out[i] = 1.0f;
        } else if (wavelen > low_wavelen) {
            out[i] = hp->rope_factor;
        } else {
            double smooth = (hp->rope_orig_ctx / wavelen - hp->rope_low_freq) / (hp->rope_high_freq - hp->rope_low_freq);
            out[i] = (float)(1.0 / ((1.0 - smooth) / hp->rope_factor + smooth));
        }
    }
}

kiln_status kiln__llama_load_weights(kiln_model *m) {
    static const kiln_block_spec spec = {.qkv_bias = KILN_PART_OPTIONAL, .out_bias = KILN_PART_OPTIONAL};
    kiln_status s;
    m->norm = KILN_NORM_RMS;
    m->ffn = KILN_FFN_SWIGLU;
    m->hp.rope_mode = KILN_ROPE_NORMAL;
    if ((s = kiln__load_common_weights(m))) return s;
    return kiln__load_block_weights(m, &spec);
}
