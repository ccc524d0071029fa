/*
 * hparams.c - reading a model's hyperparameters from GGUF metadata, with documented defaults for the
 * optional keys and range checks on every value.
 *
 * Required (any integer type): <arch>.context_length, embedding_length, block_count,
 * feed_forward_length, attention.head_count.
 * Optional, with defaults:
 *   <arch>.attention.head_count_kv              = attention.head_count (no grouped-query attention)
 *   <arch>.rope.dimension_count                 = embedding_length / head_count (full rotary)
 *   <arch>.rope.freq_base                       = 10000
 *   <arch>.rope.scale_linear or rope.scaling.factor = 1 (the rope frequency scale is its inverse)
 *   <arch>.attention.layer_norm_rms_epsilon     = 1e-5
 */
#include "model/model.h"

#include "core/core.h"

#include <math.h>
#include <stdio.h>

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

kiln_status kiln__hparams_read(const kiln_gguf *g, const char *arch, kiln_hparams *hp) {
    kiln_status s;
    float scale = 1.0f;
    if ((s = read_int(g, arch, "context_length", true, 0, 1, MAX_DIM, &hp->n_ctx_train)) ||
        (s = read_int(g, arch, "embedding_length", true, 0, 1, MAX_DIM, &hp->n_embd)) ||
        (s = read_int(g, arch, "block_count", true, 0, 1, 4096, &hp->n_layer)) ||
        (s = read_int(g, arch, "feed_forward_length", true, 0, 1, MAX_DIM, &hp->n_ff)) ||
        (s = read_int(g, arch, "attention.head_count", true, 0, 1, 65536, &hp->n_head)))
        return s;
    if ((s = read_int(g, arch, "attention.head_count_kv", false, hp->n_head, 1, 65536, &hp->n_head_kv)))
        return s;
    if (hp->n_embd % hp->n_head != 0)
        return kiln__error(KILN_E_FORMAT, "%s.embedding_length %d is not a multiple of head_count %d", arch,
                           hp->n_embd, hp->n_head);
    if (hp->n_head % hp->n_head_kv != 0)
        return kiln__error(KILN_E_FORMAT, "%s.attention.head_count %d is not a multiple of head_count_kv %d", arch,
                           hp->n_head, hp->n_head_kv);
    hp->head_dim = hp->n_embd / hp->n_head;
    if ((s = read_int(g, arch, "rope.dimension_count", false, hp->head_dim, 2, hp->head_dim, &hp->n_rot)))
        return s;
    if (hp->n_rot % 2 != 0)
        return kiln__error(KILN_E_FORMAT, "%s.rope.dimension_count %d is odd", arch, hp->n_rot);
    if ((s = read_float(g, arch, "rope.freq_base", 10000.0f, &hp->rope_freq_base)) ||
        (s = read_float(g, arch, "attention.layer_norm_rms_epsilon", 1e-5f, &hp->norm_eps)))
        return s;
    if ((s = read_float(g, arch, "rope.scale_linear", 1.0f, &scale))) return s;
    if (scale == 1.0f && (s = read_float(g, arch, "rope.scaling.factor", 1.0f, &scale))) return s;
    if (!(hp->rope_freq_base > 0.0f))
        return kiln__error(KILN_E_FORMAT, "%s.rope.freq_base must be positive", arch);
    if (!(scale > 0.0f)) return kiln__error(KILN_E_FORMAT, "%s rope scaling factor must be positive", arch);
    hp->rope_freq_scale = 1.0f / scale;
    hp->rope_mode = KILN_ROPE_NORMAL;
    return KILN_OK;
}
