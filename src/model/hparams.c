/*
 * hparams.c - reading a model's hyperparameters from GGUF metadata, with documented defaults for the
 * optional keys and range checks on every value.
 *
 * Required (any integer type): <arch>.context_length, embedding_length, block_count,
 * feed_forward_length, attention.head_count.
 * Optional, with defaults:
 *   <arch>.attention.head_count_kv              = attention.head_count (no grouped-query attention)
 *   <arch>.attention.key_length                 = embedding_length / head_count (the head size D; Qwen3
 *                                                 sets it independently); value_length, when present,
 *                                                 must equal it
 *   <arch>.rope.dimension_count                 = D (full rotary)
 *   <arch>.rope.freq_base                       = 10000
 *   <arch>.rope.scaling.type                    = absent: rope.scale_linear or rope.scaling.factor is a
 *                                                 linear factor (default 1; the frequency scale is its
 *                                                 inverse). "none", "linear" (rope.scaling.factor), or
 *                                                 "llama3" (rope.scaling.factor = 8, low_freq_factor = 1,
 *                                                 high_freq_factor = 4, original_context_length = 8192:
 *                                                 per-pair divisors, see kiln__llama3_rope_factors);
 *                                                 any other type is KILN_E_UNSUPPORTED
 *   <arch>.attention.layer_norm_rms_epsilon     = attention.layer_norm_epsilon (the LayerNorm key), else 1e-5
 *   <arch>.attention.sliding_window             = 0 (no window)
 *   <arch>.attention.causal                     = true (BOOL; false for an encoder such as BERT)
 *   <arch>.pooling_type                         = 0 (none); 1 mean, 2 cls, 3 last; any other value (4,
 *                                                 llama.cpp's rank) is KILN_E_UNSUPPORTED
 */
#include "model/model.h"

#include "core/core.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MAX_DIM (1 << 24)

static kiln_status read_int(const kiln_gguf *g, const char *arch, const char *suffix, bool required,
                            int32_t dflt, int32_t lo, int32_t hi, int32_t *out) {
    char key[128];
    int64_t v;
    kiln_status s;
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    s = kiln_gguf_get_int(g, key, &v);
    if (s == KILN_E_NOT_FOUND && !required) {
        *out = dflt;
        return KILN_OK;
    }
    if (s == KILN_E_NOT_FOUND) return kiln__error(KILN_E_FORMAT, "required key '%s' is missing", key);
    if (s) return s;
    if (v < lo || v > hi)
        return kiln__error(KILN_E_FORMAT, "key '%s' = %lld is outside %d..%d", key, (long long)v, lo, hi);
    *out = (int32_t)v;
    return KILN_OK;
}

static kiln_status read_float(const kiln_gguf *g, const char *arch, const char *suffix, float dflt, float *out) {
    char key[128];
    double v;
    kiln_status s;
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    s = kiln_gguf_get_float(g, key, &v);
    if (s == KILN_E_NOT_FOUND) {
        *out = dflt;
        return KILN_OK;
    }
    if (s) return s;
    if (!isfinite(v) || v < 0.0 || v > 1e30)
        return kiln__error(KILN_E_FORMAT, "key '%s' = %g is not a finite non-negative number", key, v);
    *out = (float)v;
    return KILN_OK;
}

/* rope.scaling.*: the linear frequency scale, or Llama 3's parameters. */
static kiln_status read_rope_scaling(const kiln_gguf *g, const char *arch, kiln_hparams *hp) {
    char key[128];
    kiln_str type = {0};
    float scale = 1.0f;
    kiln_status s;
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    s = kiln_gguf_get_str(g, key, &type);
    if (s && s != KILN_E_NOT_FOUND) return s;
    hp->rope_scaling = KILN_ROPE_SCALING_LINEAR;
    if (type.len == 6 && memcmp(type.data, "llama3", 6) == 0) {
        hp->rope_scaling = KILN_ROPE_SCALING_LLAMA3;
        if ((s = read_float(g, arch, "rope.scaling.factor", 8.0f, &hp->rope_factor)) ||
            (s = read_float(g, arch, "rope.scaling.low_freq_factor", 1.0f, &hp->rope_low_freq)) ||
            (s = read_float(g, arch, "rope.scaling.high_freq_factor", 4.0f, &hp->rope_high_freq)) ||
            (s = read_int(g, arch, "rope.scaling.original_context_length", false, 8192, 1, MAX_DIM,
                          &hp->rope_orig_ctx)))
            return s;
        if (!(hp->rope_factor > 0.0f) || !(hp->rope_low_freq > 0.0f) || !(hp->rope_high_freq > hp->rope_low_freq))
            return kiln__error(KILN_E_FORMAT, "%s llama3 rope scaling needs factor > 0 and high_freq_factor > "
                               "low_freq_factor > 0", arch);
    } else if (type.len == 4 && memcmp(type.data, "none", 4) == 0) {
        scale = 1.0f;
    } else if (type.len == 0 || (type.len == 6 && memcmp(type.data, "linear", 6) == 0)) {
        if ((s = read_float(g, arch, "rope.scale_linear", 1.0f, &scale))) return s;
        if (scale == 1.0f && (s = read_float(g, arch, "rope.scaling.factor", 1.0f, &scale))) return s;
    } else {
        return kiln__error(KILN_E_UNSUPPORTED, "%s.rope.scaling.type '%.*s' is not supported (none, linear, llama3)",
                           arch, (int)KILN__MIN(type.len, 32), type.data);
    }
    if (!(scale > 0.0f)) return kiln__error(KILN_E_FORMAT, "%s rope scaling factor must be positive", arch);
    hp->rope_freq_scale = 1.0f / scale;
    return KILN_OK;
}

static kiln_status read_bool(const kiln_gguf *g, const char *arch, const char *suffix, bool dflt, bool *out) {
    char key[128];
    kiln_status s;
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    *out = dflt;
    s = kiln_gguf_get_bool(g, key, out);
    return s == KILN_E_NOT_FOUND ? KILN_OK : s;
}

/* The head size: attention.key_length when present (value_length must agree), else E / Hq. */
static kiln_status read_head_dim(const kiln_gguf *g, const char *arch, kiln_hparams *hp) {
    int32_t v_len = 0;
    kiln_status s;
    if ((s = read_int(g, arch, "attention.key_length", false, 0, 1, 65536, &hp->head_dim))) return s;
    if (hp->head_dim == 0) {
        if (hp->n_embd % hp->n_head != 0)
            return kiln__error(KILN_E_FORMAT, "%s.embedding_length %d is not a multiple of head_count %d", arch,
                               hp->n_embd, hp->n_head);
        hp->head_dim = hp->n_embd / hp->n_head;
    }
    if ((s = read_int(g, arch, "attention.value_length", false, hp->head_dim, 1, 65536, &v_len))) return s;
    if (v_len != hp->head_dim)
        return kiln__error(KILN_E_UNSUPPORTED, "%s.attention.value_length %d differs from key_length %d", arch, v_len,
                           hp->head_dim);
    return KILN_OK;
}

kiln_status kiln__hparams_read(const kiln_gguf *g, const char *arch, kiln_hparams *hp) {
    kiln_status s;
    float ln_eps = 1e-5f;
    if ((s = read_int(g, arch, "context_length", true, 0, 1, KILN_MAX_CTX, &hp->n_ctx_train)) ||
        (s = read_int(g, arch, "embedding_length", true, 0, 1, MAX_DIM, &hp->n_embd)) ||
        (s = read_int(g, arch, "block_count", true, 0, 1, 4096, &hp->n_layer)) ||
        (s = read_int(g, arch, "feed_forward_length", true, 0, 1, MAX_DIM, &hp->n_ff)) ||
        (s = read_int(g, arch, "attention.head_count", true, 0, 1, 65536, &hp->n_head)))
        return s;
    if ((s = read_int(g, arch, "attention.head_count_kv", false, hp->n_head, 1, 65536, &hp->n_head_kv)))
        return s;
    if (hp->n_head % hp->n_head_kv != 0)
        return kiln__error(KILN_E_FORMAT, "%s.attention.head_count %d is not a multiple of head_count_kv %d", arch,
                           hp->n_head, hp->n_head_kv);
    if ((s = read_head_dim(g, arch, hp))) return s;
    if ((s = read_int(g, arch, "rope.dimension_count", false, hp->head_dim, 2, hp->head_dim, &hp->n_rot)))
        return s;
    if (hp->n_rot % 2 != 0)
        return kiln__error(KILN_E_FORMAT, "%s.rope.dimension_count %d is odd", arch, hp->n_rot);
    if ((s = read_float(g, arch, "rope.freq_base", 10000.0f, &hp->rope_freq_base)) ||
        (s = read_float(g, arch, "attention.layer_norm_epsilon", 1e-5f, &ln_eps)) ||
        (s = read_float(g, arch, "attention.layer_norm_rms_epsilon", ln_eps, &hp->norm_eps)) ||
        (s = read_int(g, arch, "attention.sliding_window", false, 0, 0, INT32_MAX, &hp->n_swa)))
        return s;
    if (!(hp->rope_freq_base > 0.0f))
        return kiln__error(KILN_E_FORMAT, "%s.rope.freq_base must be positive", arch);
    if ((s = read_rope_scaling(g, arch, hp))) return s;
    if ((s = read_bool(g, arch, "attention.causal", true, &hp->causal)) ||
        (s = read_int(g, arch, "pooling_type", false, KILN_POOLING_NONE, 0, INT32_MAX, &hp->pooling)))
        return s;
    if (hp->pooling > KILN_POOLING_LAST)
        return kiln__error(KILN_E_UNSUPPORTED, "%s.pooling_type %d is not supported (0 none, 1 mean, 2 cls, 3 last)",
                           arch, hp->pooling);
    hp->rope_mode = KILN_ROPE_NORMAL;
    return KILN_OK;
}
