/*
 * speculate.h - prompt-lookup speculation in the serving engine (ks_engine_params.lookup_draft).
 *
 * While building a step's batch, each decoding choice may add guessed tokens after its own: what followed
 * the latest earlier occurrence of its last 4 .. 1 tokens in its prompt and output (kiln_spec_lookup),
 * each with logits. Choices that guess and choices that do not share the batch. After the decode, the
 * choice samples its rows in order with the guess preferred (kiln_sampler_sample_draft, which keeps the
 * sampler's distribution; greedy: the guess exactly when it is the argmax) and stops at the first row
 * whose token is not the guess; the cells of the guesses after it are forgotten (step.c). So greedy
 * output is the same tokens with and without speculation.
 *
 * Guesses take at most half of the batch budget left after every decoding choice's own token (prompt
 * slices keep the other half), only cells free beyond every reservation (a guess's cell is temporary
 * unless accepted, and an accepted one is a token the choice had reserved), and never more than the
 * choice may still generate.
 *
 * A choice whose guesses keep missing stops guessing: each choice keeps decayed counts of kept guesses and
 * of rejections (prior: one of each), and guesses only while the estimated per-guess acceptance is at
 * least 1/2. In steps without guesses it still learns, by checking lookup's first guess against the
 * token chosen, so it resumes when its output starts repeating.
 */
#ifndef KILN_SERVER_SPECULATE_H
#define KILN_SERVER_SPECULATE_H

#include "engine_impl.h"

/* Learn from choice i's step: kept of its n_guess[i] guesses were kept, then token was chosen. */
void ks__spec_learn(ks_req *r, int32_t i, int32_t kept, int32_t token);
/* How many guessed tokens this step's batch may take in all (0 when lookup is off). */
int32_t ks__spec_room(const ks_engine *e, int32_t spare_cells);
/* Add choice i's guesses after its token (the last in the batch), taking them from *room; sets
 * r->n_guess[i]. */
void ks__spec_add_guesses(ks_engine *e, ks_req *r, int32_t i, int32_t *room);

#endif /* KILN_SERVER_SPECULATE_H */
