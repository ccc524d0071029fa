/*
 * speculate.h - speculative decoding in the serving engine (ks_engine_params.draft_max): guessed tokens
 * verified in the step's shared batch.
 *
 * While building a step's batch, each decoding choice may add guessed tokens after its own, each with
 * logits. They come from one of two drafters:
 *   - prompt lookup (no draft_model): what followed the latest earlier occurrence of the choice's last
 *     4 .. 1 tokens in its prompt and output (kiln_spec_lookup);
 *   - a draft model (draft_model): its greedy continuation of the choice's history, decoded in the
 *     draft's own context, where sequence s mirrors the running choice on the target's sequence s. Every
 *     choice that guesses in a step is drafted in the same draft batches: first one batch that brings each
 *     draft sequence up to its choice's history (its prompt on first use: choices of one request share the
 *     first choice's prompt cells with kiln_kv_seq_cp; a history that does not fit the step's n_batch is
 *     brought up over several steps, without guesses meanwhile) and yields each first guess, then one
 *     batch per further guess. After verification the draft forgets the cells of rejected guesses; a
 *     finished or cancelled choice's draft sequence is cleared, so cached and free sequences hold nothing
 *     in the draft.
 * Choices that guess and choices that do not share the batch. After the decode, the choice samples its
 * rows in order with the guess preferred (kiln_sampler_sample_draft, which keeps the sampler's
 * distribution; greedy: the guess exactly when it is the argmax) and stops at the first row whose token
 * is not the guess; the cells of the guesses after it are forgotten (step.c). So greedy output is the same
 * tokens with and without speculation.
 *
 * Guesses take at most half of the batch budget left after every decoding choice's own token (prompt
 * slices keep the other half), only cells free beyond every reservation (a guess's cell is temporary
 * unless accepted, and an accepted one is a token the choice had reserved), and never more than the
 * choice may still generate.
 *
 * A choice whose guesses keep missing stops guessing: each choice keeps decayed counts of kept guesses and
 * of rejections (prior: one of each), and guesses only while the estimated per-guess acceptance is at
 * least 1/2.
 * In steps without guesses prompt lookup still learns, by checking its first guess against the token
 * chosen, so it resumes when the output starts repeating; a draft model costs a decode to ask, so instead
 * its rejections fade (x 0.9 a step) and it probes again once they are nearly gone (below 0.1: about 22
 * steps after a single miss).
 */
#ifndef KILN_SERVER_SPECULATE_H
#define KILN_SERVER_SPECULATE_H

#include "engine_impl.h"

/* How many guessed tokens this step's batch may take in all (0 when speculation is off). */
int32_t ks__spec_room(const ks_engine *e, int32_t spare_cells);
/* With a draft model: draft this step's guesses of every decoding choice that guesses, within room, into
 * r->guesses, setting r->n_guess (which must be 0 for every choice before). A failed draft decode is
 * logged and only costs the step its guesses. */
void ks__spec_draft(ks_engine *e, int32_t room);
/* Add choice i's guesses after its token (the last in the batch), taking them from *room; sets
 * r->n_guess[i]. */
void ks__spec_add_guesses(ks_engine *e, ks_req *r, int32_t i, int32_t *room);
/* After choice i's rows were sampled: kept of its r->n_guess[i] guesses were kept, then token was chosen.
 * Learns from it, and rolls the draft's sequence back to the tokens kept. */
void ks__spec_settle(ks_engine *e, ks_req *r, int32_t i, int32_t kept, int32_t token);
/* Choice i is done (finished or cancelled): its draft sequence is cleared. */
void ks__spec_forget(ks_engine *e, const ks_req *r, int32_t i);

#endif /* KILN_SERVER_SPECULATE_H */
