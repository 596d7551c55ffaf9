/* stats.c - Student's t, the incomplete beta and the sign test (stats.h). */
#include "stats.h"

#include <math.h>

/* The continued fraction of I_x(a, b) (the classic expansion, evaluated by the modified Lentz
 * method): converges fast for x < (a + 1) / (a + b + 2); the caller uses the symmetry
 * I_x(a, b) = 1 - I_{1-x}(b, a) otherwise. */
static double beta_fraction(double a, double b, double x)
{
	const double tiny = 1e-300, eps = 1e-16;
	double c = 1, d = 1 - (a + b) * x / (a + 1), h;

	if (fabs(d) < tiny)
		d = tiny;
	d = 1 / d;
	h = d;
	for (int m = 1; m <= 10000; m++) {
		double m2 = 2.0 * m, num, delta;
		/* even step: m (b - m) x / ((a + 2m - 1)(a + 2m)) */
		num = m * (b - m) * x / ((a + m2 - 1) * (a + m2));
		d = 1 + num * d;
		d = fabs(d) < tiny ? 1 / tiny : 1 / d;
		c = 1 + num / c;
		if (fabs(c) < tiny)
			c = tiny;
		h *= d * c;
		/* odd step: -(a + m)(a + b + m) x / ((a + 2m)(a + 2m + 1)) */
		num = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1));
		d = 1 + num * d;
		d = fabs(d) < tiny ? 1 / tiny : 1 / d;
		c = 1 + num / c;
		if (fabs(c) < tiny)
			c = tiny;
		delta = d * c;
		h *= delta;
		if (fabs(delta - 1) < eps)
			break;
	}
	return h;
}

double capy_stats_betai(double a, double b, double x)
{
	double front;

	if (!(a > 0) || !(b > 0) || !(x >= 0) || !(x <= 1))
		return NAN;
	if (x == 0 || x == 1)
		return x;
	/* x^a (1-x)^b / (a B(a, b)), in logs */
	front = exp(lgamma(a + b) - lgamma(a) - lgamma(b) + a * log(x) + b * log1p(-x));
	if (x < (a + 1) / (a + b + 2))
		return front * beta_fraction(a, b, x) / a;
	return 1 - front * beta_fraction(b, a, 1 - x) / b;
}

double capy_stats_t_two_sided(double t, double nu)
{
	if (isnan(t) || !(nu > 0))
		return NAN;
	if (isinf(t))
		return 0;
	return capy_stats_betai(nu / 2, 0.5, nu / (nu + t * t));
}

double capy_stats_t_critical(double alpha, double nu)
{
	double lo = 0, hi = 1;

	if (!(alpha > 0 && alpha < 1) || !(nu > 0))
		return NAN;
	while (capy_stats_t_two_sided(hi, nu) > alpha && hi < 1e300)
		hi *= 2;
	/* p(t) falls as t grows: bisect to the last representable step */
	for (int i = 0; i < 200 && hi - lo > 1e-13 * hi; i++) {
		double mid = (lo + hi) / 2;
		if (capy_stats_t_two_sided(mid, nu) > alpha)
			lo = mid;
		else
			hi = mid;
	}
	return (lo + hi) / 2;
}

double capy_stats_sign_test(uint64_t k, uint64_t j)
{
	uint64_t n = k + j, lo = CAPY_MIN(k, j);
	double tail = 0;

	if (!n)
		return 1;
	/* P(X <= lo) = sum_{i <= lo} C(n, i) / 2^n, each term in logs (n may be large) */
	for (uint64_t i = 0; i <= lo; i++)
		tail += exp(lgamma((double)n + 1) - lgamma((double)i + 1) - lgamma((double)(n - i) + 1) -
			    (double)n * log(2.0));
	return CAPY_MIN(1.0, 2 * tail);
}

void capy_stats_paired(const double *d, size_t n, struct capy_paired *out)
{
	double sum = 0, ss = 0;

	memset(out, 0, sizeof(*out));
	out->n = n;
	for (size_t i = 0; i < n; i++) {
		sum += d[i];
		if (d[i] > 0)
			out->worse++;
		else if (d[i] < 0)
			out->better++;
		else
			out->ties++;
	}
	out->mean = n ? sum / (double)n : 0;
	for (size_t i = 0; i < n; i++)
		ss += (d[i] - out->mean) * (d[i] - out->mean);
	out->change = expm1(out->mean);
	out->sign_p = capy_stats_sign_test(out->worse, out->better);
	if (n < 2) {
		out->sd = out->se = out->change_lo = out->change_hi = NAN;
		out->t = out->mean ? copysign(INFINITY, out->mean) : 0;
		out->p = 1;
		return;
	}
	out->sd = sqrt(ss / (double)(n - 1));
	out->se = out->sd / sqrt((double)n);
	if (out->se == 0) {
		/* no spread: identical windows (p 1), or the same shift in every window (p 0) */
		out->t = out->mean ? copysign(INFINITY, out->mean) : 0;
		out->p = out->mean ? 0 : 1;
		out->change_lo = out->change_hi = out->change;
		return;
	}
	out->t = out->mean / out->se;
	out->p = capy_stats_t_two_sided(out->t, (double)(n - 1));
	double q = capy_stats_t_critical(0.05, (double)(n - 1));
	out->change_lo = expm1(out->mean - q * out->se);
	out->change_hi = expm1(out->mean + q * out->se);
}
