/* stats.h - the paired test capy-gate --paired runs on per-window NLL: Student's t on the
 * differences, the interval of the perplexity change, and a sign test.
 *
 *	struct capy_paired p;
 *	capy_stats_paired(d, n, &p);	// d[i] = candidate - reference mean NLL of window i
 *	if (p.mean > 0 && p.p < 0.05) ...	// significantly worse
 *
 * Formulas (docs/gate.md): mean m = sum d_i / n; s^2 = sum (d_i - m)^2 / (n - 1); se = s / sqrt(n);
 * t = m / se; two-sided p = I_{nu/(nu+t^2)}(nu/2, 1/2) with nu = n - 1 (the regularized
 * incomplete beta, by its continued fraction); 95 % interval of the perplexity change
 * exp(m +- q se) - 1, q the 0.975 quantile of Student's t with nu degrees of freedom (found by
 * bisection on the same function); sign test: of the windows that moved, k worse and j better,
 * two-sided p = min(1, 2 P(X <= min(k, j))) with X ~ Binomial(k + j, 1/2).
 * Pure functions of their arguments; thread-safe.
 */
#ifndef CAPY_STATS_H
#define CAPY_STATS_H

#include "../core.h"

/* The regularized incomplete beta function I_x(a, b), a, b > 0, 0 <= x <= 1 (NAN outside). */
double capy_stats_betai(double a, double b, double x);
/* P(|T| >= |t|) for Student's t with nu > 0 degrees of freedom. */
double capy_stats_t_two_sided(double t, double nu);
/* The q with P(|T| >= q) = alpha (0 < alpha < 1), to about 1e-12 relative. */
double capy_stats_t_critical(double alpha, double nu);
/* Two-sided binomial (p = 1/2) sign test of k successes against j failures; 1 when k + j = 0. */
double capy_stats_sign_test(uint64_t k, uint64_t j);

struct capy_paired {
	size_t n;
	double mean, sd, se, t, p;    /* t and p: 0 and 1 when every d_i is equal to 0; with se 0
				       * and mean != 0, t is +-inf and p 0 */
	double change, change_lo, change_hi; /* exp(mean) - 1 and its 95 % interval (NAN for n < 2) */
	uint64_t worse, better, ties;        /* d_i > 0, < 0, == 0 */
	double sign_p;
};

/* The test of n >= 1 differences (n < 2: no spread, so sd, se, the interval are NAN and p is 1
 * unless every difference is 0). */
void capy_stats_paired(const double *d, size_t n, struct capy_paired *out);

#endif
