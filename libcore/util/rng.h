/* rng.h - small, fast, seedable pseudo-random numbers (not for cryptography).
 *
 * splitmix64 expands a seed; xoshiro256** produces the stream. Same seed, same
 * numbers, on every machine.
 */
#ifndef CAPY_UTIL_RNG_H
#define CAPY_UTIL_RNG_H

#include "../core.h"

struct capy_rng {
	uint64_t s[4];
};

static inline uint64_t capy_splitmix64(uint64_t *state)
{
	uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static inline uint64_t capy_rotl64(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static inline uint64_t capy_rng_next(struct capy_rng *r)
{
	uint64_t *s = r->s;
	uint64_t out = capy_rotl64(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = capy_rotl64(s[3], 45);
	return out;
}

void capy_rng_seed(struct capy_rng *r, uint64_t seed);
/* Uniform in [0, 1). */
double capy_rng_uniform(struct capy_rng *r);
/* Standard normal (Box-Muller). */
double capy_rng_normal(struct capy_rng *r);

#endif
