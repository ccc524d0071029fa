/*
 * sampler.h - the sampler's distribution, for speculative decoding (src/runtime/spec.c).
 *
 * kiln__sampler_dist runs the chain of kiln_sampler_sample (penalty, greedy or top-k/top-p/min-p and
 * temperature) on one row of logits and leaves the distribution it would draw from: tokens and weights,
 * proportional to their probabilities. kiln__sampler_draw draws from it as kiln_sampler_sample does (the
 * same random number gives the same token), optionally leaving one token out and renormalizing, which is
 * what rejection sampling needs after a rejected guess. A sampler with a grammar has no fixed
 * distribution for a run of tokens: kiln__sampler_dist answers KILN_E_UNSUPPORTED for it.
 */
#ifndef KILN_SAMPLE_SAMPLER_H
#define KILN_SAMPLE_SAMPLER_H

#include "kiln.h"

typedef struct kiln__dist {
    int32_t n;          /* tokens that may be drawn, 1 .. n_vocab */
    const int32_t *ids; /* [n] borrowed from the sampler until its next call */
    const double *w;    /* [n] weights > 0 or 0 for tokens that cannot be drawn */
    double total;       /* their sum */
} kiln__dist;

kiln_status kiln__sampler_dist(kiln_sampler *s, const float *logits, kiln__dist *d);
/* A draw from d without token skip (-1: none); d must have a token of positive weight besides skip. */
int32_t kiln__sampler_draw(kiln_sampler *s, const kiln__dist *d, int32_t skip);
bool kiln__sampler_has_grammar(const kiln_sampler *s);
/* The next uniform number in [0, 1) of the sampler's stream. */
double kiln__sampler_uniform(kiln_sampler *s);

#endif /* KILN_SAMPLE_SAMPLER_H */
