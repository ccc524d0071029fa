/*
 * mix.c - the quantization mixes: which type each tensor gets. The rules follow llama.cpp's
 * llama_tensor_get_type for the llama family without an importance matrix:
 *  - the output projection (or token_embd when the output is tied to it) gets Q6_K, except in the Q8_0
 *    mix (Q8_0), and Q8_0 when its rows are not a multiple of 256;
 *  - attn_v: Q2_K -> Q3_K (Q4_K with 4 or more query heads per KV head); Q3_K_M -> Q5_K for the first 2 layers, then Q4_K; Q4_K_S -> Q5_K for the first
 *    4 layers; Q4_K_M and Q5_K_M -> Q6_K on the "more bits" layers (the first and last eighth and every
 *    third layer in between);
 *  - ffn_down: Q2_K -> Q3_K; Q3_K_M -> Q5_K for the first sixteenth, then Q4_K; Q4_K_S -> Q5_K for the
 *    first eighth; Q4_K_M and Q5_K_M -> Q6_K on the "more bits" layers;
 *  - attn_output: Q2_K -> Q3_K; Q3_K_M -> Q4_K;
 *  - everything else (token_embd included when there is a separate output) gets the base type.
 */
#include "quant/mix.h"

#include "core/core.h"
#include "tensor/types.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

static const struct {
    kiln_quant_mix mix;
    const char *name;
    kiln_type base;
} mixes[] = {
    {KILN_MIX_Q4_0, "Q4_0", KILN_TYPE_Q4_0},     {KILN_MIX_Q8_0, "Q8_0", KILN_TYPE_Q8_0},
    {KILN_MIX_Q2_K, "Q2_K", KILN_TYPE_Q2_K},     {KILN_MIX_Q3_K_M, "Q3_K_M", KILN_TYPE_Q3_K},
    {KILN_MIX_Q4_K_S, "Q4_K_S", KILN_TYPE_Q4_K}, {KILN_MIX_Q4_K_M, "Q4_K_M", KILN_TYPE_Q4_K},
    {KILN_MIX_Q5_K_M, "Q5_K_M", KILN_TYPE_Q5_K}, {KILN_MIX_Q6_K, "Q6_K", KILN_TYPE_Q6_K},
};

kiln_status kiln_quant_mix_parse(const char *name, kiln_quant_mix *out) {
    for (size_t i = 0; name && i < KILN__ARRAY_LEN(mixes); i++) {
        if (strcasecmp(name, mixes[i].name) == 0) {
            *out = mixes[i].mix;
            return KILN_OK;
        }
    }
    return kiln__error(KILN_E_INVALID_ARG,
                       "unknown quantization mix '%s' (known: Q4_K_M, Q5_K_M, Q4_K_S, Q3_K_M, Q2_K, Q6_K, Q8_0, Q4_0)",
                       name ? name : "(null)");
}

const char *kiln_quant_mix_name(kiln_quant_mix mix) {
    for (size_t i = 0; i < KILN__ARRAY_LEN(mixes); i++)
        if (mixes[i].mix == mix) return mixes[i].name;
    return "?";
}

kiln_type kiln__mix_base_type(kiln_quant_mix mix) {
    for (size_t i = 0; i < KILN__ARRAY_LEN(mixes); i++)
        if (mixes[i].mix == mix) return mixes[i].base;
    return KILN_TYPE_F32;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

/* <arch>.attention.head_count / head_count_kv, 1 when either is missing. */
static int64_t gqa_ratio(const kiln_gguf *gguf) {
    kiln_str arch;
    char key[160];
    int64_t heads = 0, kv = 0;
    if (kiln_gguf_get_str(gguf, "general.architecture", &arch) || arch.len > 64) return 1;
    snprintf(key, sizeof key, "%.*s.attention.head_count", (int)arch.len, arch.data);
    if (kiln_gguf_get_int(gguf, key, &heads)) return 1;
    snprintf(key, sizeof key, "%.*s.attention.head_count_kv", (int)arch.len, arch.data);
    if (kiln_gguf_get_int(gguf, key, &kv)) kv = heads;
    kiln__error_clear();
    return heads > 0 && kv > 0 ? heads / kv : 1;
}

/* Count one tensor of the model into the state's totals. */
static void mix_state_count(kiln__mix_state *st, const char *name) {
    if (strcmp(name, "output.weight") == 0) st->has_output = true;
    if (strstr(name, "attn_v.weight")) st->n_attn_v++;
    if (strstr(name, "ffn_down")) st->n_ffn_down++;
}

void kiln__mix_state_init(kiln__mix_state *st, const kiln_gguf *gguf) {
    memset(st, 0, sizeof *st);
    st->n_gqa = gqa_ratio(gguf);
    for (int64_t i = 0; i < kiln_gguf_tensor_count(gguf); i++) {
        kiln_tensor_info t;
        if (kiln_gguf_tensor_info(gguf, i, &t)) continue;
        mix_state_count(st, t.name);
    }
}

kiln_status kiln_quant_mix_types(kiln_quant_mix mix, const kiln_tensor_info *tensors, int64_t count,
                                 int64_t n_gqa, kiln_type *types) {
    kiln__mix_state st;
    if ((!tensors || !types) && count > 0)
        return kiln__error(KILN_E_INVALID_ARG, "kiln_quant_mix_types: NULL argument");
    if (count < 0)
        return kiln__error(KILN_E_INVALID_ARG, "kiln_quant_mix_types: negative tensor count %lld",
                           (long long)count);
    if (kiln__mix_base_type(mix) == KILN_TYPE_F32)
        return kiln__error(KILN_E_INVALID_ARG, "unknown quantization mix %d", (int)mix);
    memset(&st, 0, sizeof st);
    st.n_gqa = n_gqa > 0 ? n_gqa : 1;
    for (int64_t i = 0; i < count; i++) {
        if (!tensors[i].name || tensors[i].n_dims < 1 || tensors[i].n_dims > 4)
            return kiln__error(KILN_E_INVALID_ARG,
                               "kiln_quant_mix_types: tensor %lld has no name or %d dimensions", (long long)i,
                               (int)tensors[i].n_dims);
        mix_state_count(&st, tensors[i].name);
    }
    for (int64_t i = 0; i < count; i++) {
        bool quantize;
        types[i] = kiln__mix_choose(mix, &st, tensors[i].name, tensors[i].type, tensors[i].n_dims,
                                    tensors[i].ne, &quantize);
    }
    return KILN_OK;
}

/* llama.cpp's use_more_bits: the first and last eighth of the layers, and every third in between. */
static bool use_more_bits(int32_t i, int32_t n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

static kiln_type attn_v_type(kiln_quant_mix mix, kiln_type t, int32_t i, int32_t n, int64_t n_gqa) {
    switch (mix) {
    case KILN_MIX_Q2_K: return n_gqa >= 4 ? KILN_TYPE_Q4_K : KILN_TYPE_Q3_K;
    case KILN_MIX_Q3_K_M: return i < 2 ? KILN_TYPE_Q5_K : KILN_TYPE_Q4_K;
    case KILN_MIX_Q4_K_S: return i < 4 ? KILN_TYPE_Q5_K : t;
    case KILN_MIX_Q4_K_M:
    case KILN_MIX_Q5_K_M: return use_more_bits(i, n) ? KILN_TYPE_Q6_K : t;
    default: return t;
    }
}

static kiln_type ffn_down_type(kiln_quant_mix mix, kiln_type t, int32_t i, int32_t n) {
    switch (mix) {
    case KILN_MIX_Q2_K: return KILN_TYPE_Q3_K;
    case KILN_MIX_Q3_K_M: return i < n / 16 ? KILN_TYPE_Q5_K : KILN_TYPE_Q4_K;
    case KILN_MIX_Q4_K_S: return i < n / 8 ? KILN_TYPE_Q5_K : t;
    case KILN_MIX_Q4_K_M:
    case KILN_MIX_Q5_K_M: return use_more_bits(i, n) ? KILN_TYPE_Q6_K : t;
    default: return t;
    }
}

/* llama.cpp's fallback when the row length is not a multiple of the 256-element super-block. */
static kiln_type row_fallback(kiln_type t, int64_t ne0) {
    if (ne0 % KILN_QK_K == 0) return t;
    switch (t) {
    case KILN_TYPE_Q2_K:
    case KILN_TYPE_Q3_K: t = KILN_TYPE_Q4_0; break; /* llama.cpp 0.25 (older releases chose IQ4_NL) */
    case KILN_TYPE_IQ4_XS: t = KILN_TYPE_IQ4_NL; break;
    case KILN_TYPE_Q4_K: t = KILN_TYPE_Q5_0; break;
    case KILN_TYPE_Q5_K: t = KILN_TYPE_Q5_1; break;
    case KILN_TYPE_Q6_K: t = KILN_TYPE_Q8_0; break;
    default: break;
    }
    return ne0 % kiln__type_traits(t)->block_elems == 0 ? t : KILN_TYPE_F16;
}

kiln_type kiln__mix_choose(kiln_quant_mix mix, kiln__mix_state *st, const char *name, kiln_type src_type,
                           int32_t n_dims, const int64_t ne[4], bool *quantize) {
    kiln_type t = kiln__mix_base_type(mix);
    *quantize = n_dims >= 2 && ends_with(name, "weight");
    if (!*quantize) return src_type;
    if (strcmp(name, "output.weight") == 0 || (!st->has_output && strcmp(name, "token_embd.weight") == 0)) {
        if (ne[0] % KILN_QK_K != 0) t = KILN_TYPE_Q8_0;
        else if (t != KILN_TYPE_Q8_0) t = KILN_TYPE_Q6_K;
    } else if (strstr(name, "attn_v.weight")) {
        t = attn_v_type(mix, t, st->i_attn_v++, st->n_attn_v, st->n_gqa);
    } else if (strstr(name, "ffn_down")) {
        t = ffn_down_type(mix, t, st->i_ffn_down++, st->n_ffn_down);
    } else if (strstr(name, "attn_output.weight")) {
        if (mix == KILN_MIX_Q2_K) t = KILN_TYPE_Q3_K;
        else if (mix == KILN_MIX_Q3_K_M) t = KILN_TYPE_Q4_K;
    }
    return row_fallback(t, ne[0]);
}
