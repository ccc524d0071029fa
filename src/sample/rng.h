/*
 * rng.h - the sampler's pseudo-random numbers: xoshiro256** seeded through splitmix64. Small, fast, and
 * the same seed gives the same stream on every platform. Not for cryptography.
 */
#ifndef KILN_SAMPLE_RNG_H
#define KILN_SAMPLE_RNG_H

#include <stdint.h>

typedef struct kiln__rng {
    uint64_t s[4];
} kiln__rng;

/* Any seed is fine, 0 included: splitmix64 spreads it over the whole state. */
void kiln__rng_seed(kiln__rng *rng, uint64_t seed);
uint64_t kiln__rng_next(kiln__rng *rng);
/* Uniform in [0, 1), with 53 random bits. */
double kiln__rng_uniform(kiln__rng *rng);

#endif /* KILN_SAMPLE_RNG_H */
