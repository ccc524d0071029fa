/*
 * choice.h - one choice of a request, from logits to events: presence and frequency penalties, the
 * sampler (seed + choice index), logprobs of the raw logits with the top alternatives and their text,
 * the streaming detokenizer, stop strings, a grammar that constrains the sampler, and the finish reasons
 * (EOS, the end-of-turn token or a grammar that allows nothing more: "stop"; max_tokens: "length").
 * The engine owns the KV sequence and the batch; a choice only decides tokens and
 * says what to emit.
 *
 * Logprobs travel with text: a token's logprob is reported in the TEXT event that carries the last of its
 * bytes (at once when no stop string holds text back). When a stop string ends the choice, tokens that
 * contributed no emitted byte are dropped along with the stop.
 *
 * Everything a choice needs per token is allocated when it is created (its buffers grow only when a
 * held-back stretch is longer than any before); scratch shared by all choices lives in ks_gen_scratch.
 * Used by the engine thread only.
 */
#ifndef KILN_SERVER_CHOICE_H
#define KILN_SERVER_CHOICE_H

#include "engine.h"
#include "stop.h"

/* Per-engine scratch: one choice samples at a time. */
typedef struct ks_gen_scratch {
    const kiln_vocab *vocab;
    int32_t n_vocab;
    int32_t eos;
    float *logits;   /* [n_vocab] penalized copy */
    int32_t *counts; /* [n_vocab] zero between uses */
    char *piece;     /* a top alternative's text */
    size_t piece_cap;
    kiln_grammar_vocab *gvocab; /* the token trie for grammars, made by the first choice that has one */
} ks_gen_scratch;

kiln_status ks__gen_scratch_init(ks_gen_scratch *s, const kiln_model *model);
void ks__gen_scratch_free(ks_gen_scratch *s);

/* The request fields a choice reads (the engine's copy of ks_request). */
typedef struct ks_choice_params {
    int32_t max_tokens;
    float presence_penalty, frequency_penalty;
    int32_t logprobs;
    bool ignore_eos;
    int32_t eot_token;
    bool strip_leading_space;
    const kiln_grammar *grammar; /* or NULL */
} ks_choice_params;

/* Tokens whose logprobs wait for their text. */
typedef struct ks_pending {
    int32_t n, cap;
    int32_t *tokens;                 /* [cap] */
    float *logprobs;                 /* [cap] */
    size_t *start, *end;             /* [cap] byte offsets of the token's text in the choice's text */
    ks_top_logprob *top;             /* [cap * k]; text filled in when emitted */
    size_t *top_text_at;             /* [cap * k] offsets into text */
    const ks_top_logprob **top_rows; /* [cap] */
    char *text;                      /* the alternatives' texts */
    size_t text_len, text_cap;
} ks_pending;

typedef struct ks_choice {
    int32_t index;
    const ks_choice_params *p;
    kiln_sampler *sampler;
    kiln_grammar_matcher *grammar; /* or NULL */
    kiln_detok *detok;
    ks_stop stop;
    ks_pending pend;
    int32_t *generated; /* [max_tokens] */
    int32_t n_generated;
    size_t produced, emitted; /* bytes of text out of the detokenizer, and emitted */
    bool done;
    ks_finish finish;
    int32_t draft; /* a guessed token the next ks__choice_step returns whenever the sampler's distribution
                    * allows (kiln_sampler_sample_draft), or -1; set by the engine for one step */
} ks_choice;

kiln_status ks__choice_init(ks_choice *c, int32_t index, const ks_choice_params *p,
                            const kiln_sampler_params *sp, const ks_request *req, ks_gen_scratch *s);
void ks__choice_free(ks_choice *c);

/* Where a choice's events go (the engine's emit, which drops them after a cancel). */
typedef void (*ks_emit_fn)(void *user, const ks_event *ev);

/* Choose the next token from the raw logits [n_vocab], emit its text (TEXT) and, when it ends the choice,
 * the rest and CHOICE_END. *token receives the token (the next input when the choice goes on). */
kiln_status ks__choice_step(ks_choice *c, ks_gen_scratch *s, const float *logits, ks_emit_fn emit, void *user,
                            int32_t *token);

#endif
