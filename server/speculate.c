/*
 * speculate.c - prompt-lookup guesses for the engine's batch (see speculate.h).
 */
#include "speculate.h"

#include <string.h>

#define NGRAM_MIN 1
#define NGRAM_MAX 4
#define DECAY 0.9f /* weight of the past in the acceptance counts, per step */

int32_t ks__spec_room(const ks_engine *e, int32_t spare_cells) {
    int32_t decoding = 0, room;
    if (e->p.lookup_draft <= 0 || !e->spec_hist) return 0;
    for (int32_t a = 0; a < e->n_active; a++) {
        const ks_req *r = e->active[a];
        if (r->n_prefilled < r->req.n_prompt) continue;
        for (int32_t i = 0; i < r->req.n; i++)
            decoding += !r->choices[i].done;
    }
    room = (e->p.n_batch - decoding) / 2;
    return room < spare_cells ? room : spare_cells > 0 ? spare_cells : 0;
}

void ks__spec_add_guesses(ks_engine *e, ks_req *r, int32_t i, int32_t *room) {
    const ks_choice *c = &r->choices[i];
    int32_t n_prompt = r->req.n_prompt, n = n_prompt + c->n_generated, guess[64], k;
    int32_t max = e->p.lookup_draft < 64 ? e->p.lookup_draft : 64;
    if (max > *room) max = *room;
    if (max > c->p->max_tokens - c->n_generated - 1) max = c->p->max_tokens - c->n_generated - 1;
    r->lookup_next[i] = -1;
    if (max <= 0 || n > e->p.n_ctx) return;
    memcpy(e->spec_hist, r->prompt, (size_t)n_prompt * sizeof *e->spec_hist);
    memcpy(e->spec_hist + n_prompt, c->generated, (size_t)c->n_generated * sizeof *e->spec_hist);
    k = kiln_spec_lookup(e->spec_hist, n, NGRAM_MIN, NGRAM_MAX, max, guess);
    r->lookup_next[i] = k > 0 ? guess[0] : -1;
    if ((r->spec_hits[i] + 1) < (r->spec_misses[i] + 1)) k = 0; /* acceptance below 1/2: learn only */
    for (int32_t j = 0; j < k; j++)
        kiln_batch_add(&e->batch, guess[j], r->n_past[i] + 1 + j, r->seqs[i], true);
    r->n_guess[i] = k;
    *room -= k;
}

void ks__spec_learn(ks_req *r, int32_t i, int32_t kept, int32_t token) {
    int32_t k = r->n_guess[i], guess = r->lookup_next[i];
    if (k == 0 && guess < 0) return; /* lookup had nothing to say */
    r->spec_hits[i] = DECAY * r->spec_hits[i] + (float)(k > 0 ? kept : guess == token);
    r->spec_misses[i] = DECAY * r->spec_misses[i] + (float)(k > 0 ? kept < k : guess != token);
}
