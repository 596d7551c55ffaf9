/* rng.c - seeding and floating-point draws (see rng.h). */
#include "rng.h"

#include <math.h>

void capy_rng_seed(struct capy_rng *r, uint64_t seed)
{
	uint64_t st = seed;

	for (int i = 0; i < 4; i++)
		r->s[i] = capy_splitmix64(&st);
}

double capy_rng_uniform(struct capy_rng *r)
{
	return (double)(capy_rng_next(r) >> 11) * 0x1.0p-53;
}

double capy_rng_normal(struct capy_rng *r)
{
	double u1 = capy_rng_uniform(r), u2 = capy_rng_uniform(r);

	if (u1 < 1e-300)
		u1 = 1e-300;
	return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}
