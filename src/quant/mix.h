/*
 * mix.h - the per-tensor type choice of the quantization mixes (mix.c), shared by the file converter
 * (quantize_file.c) and the tests.
 */
#ifndef KILN_QUANT_MIX_H
#define KILN_QUANT_MIX_H

#include "kiln.h"

/* What the choice needs to know about the whole model. Counters advance as tensors are chosen, in file
 * order, as llama.cpp counts them. */
typedef struct kiln__mix_state {
    bool has_output;        /* an output.weight tensor exists (otherwise token_embd doubles as output) */
    int64_t n_gqa;          /* attention heads per KV head (1 when the metadata does not say) */
    int32_t n_attn_v, i_attn_v;     /* attn_v.weight tensors in the file / seen so far */
    int32_t n_ffn_down, i_ffn_down; /* ffn_down tensors in the file / seen so far */
} kiln__mix_state;

/* Count the tensors the rules depend on. */
void kiln__mix_state_init(kiln__mix_state *st, const kiln_gguf *gguf);

/* The type a tensor gets: *quantize = false (and the source type returned) for tensors that are copied
 * as they are (1-D tensors, names not ending in "weight"). Otherwise the mix's choice, after llama.cpp's
 * fallback for rows that are not a multiple of 256 (Q2_K, Q3_K -> Q4_0; Q4_K -> Q5_0; Q5_K -> Q5_1;
 * Q6_K -> Q8_0; F16 when even the fallback's block does not divide the row). */
kiln_type kiln__mix_choose(kiln_quant_mix mix, kiln__mix_state *st, const char *name, kiln_type src_type,
                           int32_t n_dims, const int64_t ne[4], bool *quantize);

/* The mix's base type (Q4_K for Q4_K_M, ...). */
kiln_type kiln__mix_base_type(kiln_quant_mix mix);

#endif
