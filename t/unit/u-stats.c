/* u-stats - the paired test of capy-gate --paired (libcore/stats) against values computed
 * independently with Python's math module (no scipy here), by closed forms where Student's t
 * has one and by Simpson's rule on the density otherwise:
 *
 *	dens = lambda x, nu: exp(lgamma((nu+1)/2) - lgamma(nu/2)) / sqrt(nu*pi) * (1+x*x/nu)**(-(nu+1)/2)
 *	p2(t, nu) = 1 - 2 * Simpson(dens, 0, |t|, 200000 intervals)
 *	nu = 1 (Cauchy): p = 1 - 2/pi atan|t|;  nu = 2: p = 1 - |t| / sqrt(2 + t^2)
 *	critical values: nu = 1: tan(pi/2 (1 - alpha)); nu = 2: (1-a) sqrt(2) / sqrt(1 - (1-a)^2)
 *	sign test: min(1, 2 * sum(comb(n, i) for i <= min(k, j)) / 2^n)
 */
#include "test.h"
#include "stats/stats.h"

#define CHECK_NEAR(a, b, tol)                                                                                          \
	CHECK_MSG(fabs((a) - (b)) <= (tol), "%.17g != %.17g (tol %g)", (double)(a), (double)(b), (double)(tol))

static void test_t_two_sided(void)
{
	CHECK_NEAR(capy_stats_t_two_sided(2.0, 1), 0.2951672353008665, 1e-13);
	CHECK_NEAR(capy_stats_t_two_sided(-2.0, 1), 0.2951672353008665, 1e-13);
	CHECK_NEAR(capy_stats_t_two_sided(1.5, 2), 0.2723931248910011, 1e-13);
	CHECK_NEAR(capy_stats_t_two_sided(2.0, 5), 0.1019394788298652, 1e-11);
	CHECK_NEAR(capy_stats_t_two_sided(2.262157162798205, 9), 0.05, 1e-11);
	CHECK_NEAR(capy_stats_t_two_sided(0.7, 30), 0.48932044349966863, 1e-11);
	CHECK_NEAR(capy_stats_t_two_sided(0, 7), 1.0, 1e-15);
	CHECK(capy_stats_t_two_sided(INFINITY, 3) == 0);
	CHECK(isnan(capy_stats_t_two_sided(1, 0)));
}

static void test_betai(void)
{
	/* I_x(1, 1) = x; I_x(a, 1) = x^a; I_x(1, b) = 1 - (1-x)^b */
	CHECK_NEAR(capy_stats_betai(1, 1, 0.3), 0.3, 1e-14);
	CHECK_NEAR(capy_stats_betai(3, 1, 0.6), 0.216, 1e-14);
	CHECK_NEAR(capy_stats_betai(1, 4, 0.2), 1 - pow(0.8, 4), 1e-14);
	CHECK(capy_stats_betai(2, 3, 0) == 0 && capy_stats_betai(2, 3, 1) == 1);
	CHECK(isnan(capy_stats_betai(2, 3, 1.5)));
}

static void test_t_critical(void)
{
	CHECK_NEAR(capy_stats_t_critical(0.05, 1), 12.706204736174696, 1e-9);
	CHECK_NEAR(capy_stats_t_critical(0.05, 2), 4.302652729749463, 1e-10);
	CHECK_NEAR(capy_stats_t_critical(0.05, 9), 2.262157162798205, 1e-9); /* tables: 2.262 */
	CHECK_NEAR(capy_stats_t_critical(0.05, 5), 2.570581835636314, 1e-9); /* tables: 2.571 */
}

static void test_sign(void)
{
	CHECK_NEAR(capy_stats_sign_test(2, 10), 0.03857421875, 1e-14);
	CHECK_NEAR(capy_stats_sign_test(10, 2), 0.03857421875, 1e-14);
	CHECK_NEAR(capy_stats_sign_test(5, 5), 1.0, 1e-14);
	CHECK_NEAR(capy_stats_sign_test(0, 7), 0.015625, 1e-14);
	CHECK(capy_stats_sign_test(0, 0) == 1);
}

static void test_paired(void)
{
	/* mean 0.0035, sd 0.004277849927241488, se 0.0017464249196572983, t 2.004094170098538,
	 * p2(t, 5) 0.10140794943608011; interval expm1(mean -+ 2.570581835636314 se) */
	const double d[] = { 0.01, -0.002, 0.004, 0.003, 0.0, 0.006 };
	struct capy_paired p;

	capy_stats_paired(d, 6, &p);
	CHECK_EQ_U64(p.n, 6);
	CHECK_NEAR(p.mean, 0.0035, 1e-15);
	CHECK_NEAR(p.sd, 0.004277849927241488, 1e-15);
	CHECK_NEAR(p.se, 0.0017464249196572983, 1e-15);
	CHECK_NEAR(p.t, 2.004094170098538, 1e-12);
	CHECK_NEAR(p.p, 0.10140794943608011, 1e-10);
	CHECK_NEAR(p.change, expm1(0.0035), 1e-15);
	CHECK_NEAR(p.change_lo, -0.0009888389520015582, 1e-9);
	CHECK_NEAR(p.change_hi, 0.00802132802044351, 1e-9);
	CHECK_EQ_U64(p.worse, 4);
	CHECK_EQ_U64(p.better, 1);
	CHECK_EQ_U64(p.ties, 1);
	CHECK_NEAR(p.sign_p, 0.375, 1e-14); /* 2 (C(5,0) + C(5,1)) / 32 */
}

static void test_paired_degenerate(void)
{
	const double zero[] = { 0, 0, 0 }, shift[] = { 0.01, 0.01, 0.01, 0.01 };
	struct capy_paired p;

	capy_stats_paired(zero, 3, &p);
	CHECK(p.p == 1 && p.t == 0 && p.change == 0 && p.ties == 3 && p.sign_p == 1);
	capy_stats_paired(shift, 4, &p);
	CHECK(p.p == 0 && isinf(p.t) && p.t > 0);
	CHECK_NEAR(p.change_lo, expm1(0.01), 1e-15);
	capy_stats_paired(shift, 1, &p);
	CHECK(p.p == 1 && isnan(p.se) && isnan(p.change_lo));
}

int main(void)
{
	RUN(test_t_two_sided);
	RUN(test_betai);
	RUN(test_t_critical);
	RUN(test_sign);
	RUN(test_paired);
	RUN(test_paired_degenerate);
	return test_summary();
}
