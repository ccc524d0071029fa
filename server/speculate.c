/*
 * speculate.c - guessed tokens for the engine's batch, by prompt lookup or a draft model (see speculate.h).
 */
#include "speculate.h"

#include <stdio.h>
#include <string.h>

#define NGRAM_MIN 1
#define NGRAM_MAX 4
#define DECAY 0.9f /* weight of the past in the acceptance counts, per step */
#define PROBE 0.1f /* a draft model's rejections below this (beyond its kept guesses): guess again */

int32_t ks__spec_room(const ks_engine *e, int32_t spare_cells) {
    int32_t decoding = 0, room;
    if (e->p.draft_max <= 0 || (!e->spec_hist && !e->draft_ctx)) return 0;
    for (int32_t a = 0; a < e->n_active; a++) {
        const ks_req *r = e->active[a];
        if (r->n_prefilled < r->req.n_prompt) continue;
        for (int32_t i = 0; i < r->req.n; i++)
            decoding += !r->choices[i].done;
    }
    room = (e->p.n_batch - decoding) / 2;
    return room < spare_cells ? room : spare_cells > 0 ? spare_cells : 0;
}

/* Whether choice i's guesses have earned a place in the batch (speculate.h). */
static bool trusted(const ks_engine *e, const ks_req *r, int32_t i) {
    return e->draft_ctx ? r->spec_hits[i] + PROBE >= r->spec_misses[i] : r->spec_hits[i] >= r->spec_misses[i];
}

/* The most guesses choice i may take this step, before the batch's room. */
static int32_t guess_cap(const ks_engine *e, const ks_req *r, int32_t i) {
    const ks_choice *c = &r->choices[i];
    int32_t max = e->p.draft_max < KS_DRAFT_MAX ? e->p.draft_max : KS_DRAFT_MAX;
    int32_t left = c->p->max_tokens - c->n_generated - 1;
    return max < left ? max : left;
}

/* Token j of choice i's history: its prompt, then what it generated (the last one not yet decoded). */
static int32_t history_at(const ks_req *r, int32_t i, int32_t j) {
    return j < r->req.n_prompt ? r->prompt[j] : r->choices[i].generated[j - r->req.n_prompt];
}

static int32_t argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t t = 1; t < n; t++)
        if (x[t] > x[best]) best = t;
    return best;
}

typedef struct drafting {
    ks_req *r;
    int32_t i;    /* the choice */
    int32_t n;    /* its history's length */
    int32_t fed;  /* history tokens this step's first draft batch brings in */
    int32_t want; /* guesses to draft (0: only catching up) */
    int32_t row;  /* its row with logits in the latest draft batch */
    bool in;      /* it has a token in the draft batch being decoded */
} drafting;

/* A failed draft decode: the sequences it touched may hold anything, so they start over. */
static void draft_failed(ks_engine *e, drafting *d, int32_t n, kiln_status st) {
    if (e->p.log) {
        char line[256];
        snprintf(line, sizeof line, "engine: the draft model's decode failed (%s): %s; no guesses this step",
                 kiln_status_name(st), kiln_last_error());
        e->p.log(e->p.log_user, line);
    }
    for (int32_t k = 0; k < n; k++) {
        kiln_kv_seq_rm(e->draft_ctx, d[k].r->seqs[d[k].i], -1, -1);
        d[k].r->draft_past[d[k].i] = 0;
        d[k].r->n_guess[d[k].i] = 0;
    }
}

/* Bring choice i's draft sequence its prompt from choice 0's when that one has it. Returns false when
 * choice i should wait for choice 0 to have it. */
static bool share_prompt(ks_engine *e, ks_req *r, int32_t i) {
    int32_t n_prompt = r->req.n_prompt;
    if (i == 0 || r->draft_past[i] >= n_prompt || r->choices[0].done) return true;
    if (r->draft_past[0] < n_prompt) return false;
    kiln_kv_seq_rm(e->draft_ctx, r->seqs[i], -1, -1);
    if (kiln_kv_seq_cp(e->draft_ctx, r->seqs[0], r->seqs[i], 0, n_prompt) != KILN_OK) {
        kiln_kv_seq_rm(e->draft_ctx, r->seqs[i], -1, -1);
        r->draft_past[i] = 0;
        return true; /* it catches up alone */
    }
    r->draft_past[i] = n_prompt;
    return true;
}

void ks__spec_draft(ks_engine *e, int32_t room) {
    if (!e->draft_ctx || room <= 0) return;
    drafting d[KILN_SEQ_MAX];
    const kiln_vocab *vocab = kiln_model_vocab(e->p.draft_model);
    int32_t nd = 0, cap = e->p.n_batch, n_vocab = kiln_vocab_n_tokens(vocab), eos = kiln_vocab_eos(vocab);
    int32_t n_ctx = kiln_ctx_n_ctx(e->draft_ctx), free = n_ctx - kiln_kv_n_used(e->draft_ctx);
    kiln_batch *b = &e->draft_batch;
    kiln_status st;
    kiln_batch_clear(b);
    for (int32_t a = 0; a < e->n_active && b->n_tokens < cap; a++) {
        ks_req *r = e->active[a];
        if (r->n_prefilled < r->req.n_prompt) continue;
        for (int32_t i = 0; i < r->req.n && b->n_tokens < cap; i++) {
            int32_t n = r->req.n_prompt + r->choices[i].n_generated, want = guess_cap(e, r, i);
            if (r->choices[i].done || nd == KILN_SEQ_MAX || !trusted(e, r, i)) continue;
            if (want > room) want = room;
            if (want > n_ctx - n) want = n_ctx - n;
            if (want <= 0 || !share_prompt(e, r, i)) continue;
            int32_t past = r->draft_past[i], fed = n - past;
            if (fed + want - 1 > free) continue; /* the draft's cells are full */
            if (b->n_tokens + fed > cap) { /* catch up as far as this batch goes; guess in a later step */
                fed = cap - b->n_tokens;
                want = 0;
            }
            for (int32_t j = 0; j < fed; j++)
                kiln_batch_add(b, history_at(r, i, past + j), past + j, r->seqs[i], want > 0 && j == fed - 1);
            d[nd++] = (drafting){
                .r = r, .i = i, .n = n, .fed = fed, .want = want, .row = b->n_tokens - 1, .in = true};
            free -= fed + (want > 0 ? want - 1 : 0);
            room -= want;
        }
    }
    /* Round j decodes each drafting choice's guess j - 1 (round 0: its history) and yields its guess j. */
    for (int32_t j = 0; b->n_tokens > 0; j++) {
        if ((st = kiln_ctx_decode_batch(e->draft_ctx, b)) != KILN_OK) {
            draft_failed(e, d, nd, st);
            return;
        }
        kiln_batch_clear(b);
        for (int32_t k = 0; k < nd; k++) {
            ks_req *r = d[k].r;
            int32_t i = d[k].i;
            if (!d[k].in) continue;
            d[k].in = false;
            r->draft_past[i] += j == 0 ? d[k].fed : 1;
            if (d[k].want <= j) continue; /* only catching up */
            const float *logits = kiln_ctx_logits(e->draft_ctx, d[k].row);
            int32_t g = logits ? argmax(logits, n_vocab) : eos;
            r->guesses[i * KS_DRAFT_MAX + j] = g;
            r->n_guess[i] = j + 1;
            if (!logits || g == eos) d[k].want = j + 1; /* nothing to guess after the end */
            if (d[k].want <= j + 1) continue;
            d[k].row = b->n_tokens;
            d[k].in = true;
            kiln_batch_add(b, g, d[k].n + j, r->seqs[i], true);
        }
    }
}

void ks__spec_add_guesses(ks_engine *e, ks_req *r, int32_t i, int32_t *room) {
    const ks_choice *c = &r->choices[i];
    int32_t n_prompt = r->req.n_prompt, n = n_prompt + c->n_generated, k;
    int32_t max = guess_cap(e, r, i), *guess = r->guesses ? r->guesses + i * KS_DRAFT_MAX : NULL,
            found[KS_DRAFT_MAX];
    if (e->draft_ctx) { /* drafted already, within the room */
        k = r->n_guess[i];
    } else {
        if (max > *room) max = *room;
        r->lookup_next[i] = -1;
        if (max <= 0 || n > e->p.n_ctx) return;
        memcpy(e->spec_hist, r->prompt, (size_t)n_prompt * sizeof *e->spec_hist);
        memcpy(e->spec_hist + n_prompt, c->generated, (size_t)c->n_generated * sizeof *e->spec_hist);
        guess = found;
        k = kiln_spec_lookup(e->spec_hist, n, NGRAM_MIN, NGRAM_MAX, max, guess);
        r->lookup_next[i] = k > 0 ? guess[0] : -1;
        if (!trusted(e, r, i)) k = 0; /* acceptance below 1/2: learn only */
    }
    for (int32_t j = 0; j < k; j++)
        kiln_batch_add(&e->batch, guess[j], r->n_past[i] + 1 + j, r->seqs[i], true);
    r->n_guess[i] = k;
    *room -= k;
}

void ks__spec_settle(ks_engine *e, ks_req *r, int32_t i, int32_t kept, int32_t token) {
    int32_t k = r->n_guess[i], guess = r->lookup_next[i];
    if (e->draft_ctx) {
        if (k == 0) {
            r->spec_misses[i] *= DECAY; /* not asked: its rejections fade until it probes */
            return;
        }
        /* The draft holds the history and guesses 0 .. k-2; the first `kept` guesses are history now. */
        r->draft_past[i] -= k - 1 - (kept < k - 1 ? kept : k - 1);
        kiln_kv_seq_rm(e->draft_ctx, r->seqs[i], r->draft_past[i], -1);
    } else if (k == 0 && guess < 0) {
        return; /* lookup had nothing to say */
    }
    r->spec_hits[i] = DECAY * r->spec_hits[i] + (float)(k > 0 ? kept : guess == token);
    r->spec_misses[i] = DECAY * r->spec_misses[i] + (float)(k > 0 ? kept < k : guess != token);
}

void ks__spec_forget(ks_engine *e, const ks_req *r, int32_t i) {
    if (e->draft_ctx) kiln_kv_seq_rm(e->draft_ctx, r->seqs[i], -1, -1);
}
