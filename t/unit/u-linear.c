/* u-linear.c - the CPU linear kernels (libcore/cpu/linear.h) against fp64 references, across
 * every ISA this CPU has, every row split and every batch size; NVFP4 bit-identity; the
 * activation rule against the recorded vLLM vectors (t/fixtures/nvfp4_vectors.json). */
#include "test.h"
#include "cpu/linear.h"
#include "quant/floats.h"
#include "quant/nvfp4.h"
#include "util/file.h"
#include "util/json.h"
#include "util/rng.h"
#include "util/thread.h"

static struct capy_rng rng;
static int nisa; /* ISAs available: CAPY_ISA_SCALAR .. nisa - 1 */

static double unif(double lo, double hi)
{
	return lo + (hi - lo) * capy_rng_uniform(&rng);
}

static uint64_t below(uint64_t n)
{
	return capy_rng_next(&rng) % n;
}

static void *xalloc(size_t bytes)
{
	void *p = aligned_alloc(64, CAPY_ALIGN_UP(bytes ? bytes : 1, 64));

	if (!p)
		abort();
	return p;
}

/* Activations [m][k]: normal, a per-row magnitude over four decades, a few outliers, and a
 * zero row when zero_row is set (row 1). */
static float *make_x(uint64_t m, uint64_t k, bool zero_row)
{
	float *x = xalloc(m * k * sizeof(float));

	for (uint64_t i = 0; i < m; i++) {
		double mag = pow(10.0, unif(-2, 2));
		for (uint64_t j = 0; j < k; j++) {
			double v = capy_rng_normal(&rng) * mag;
			if (below(50) == 0)
				v *= 20;
			x[i * k + j] = zero_row && i == 1 ? 0.0f : (float)v;
		}
	}
	return x;
}

/* Call prepare + rows for all rows under isa; returns the prepared input (workspace in *ws). */
static void run_isa(int isa, const struct capy_linear *w, const float *x, uint64_t m, float *y,
		    void **ws)
{
	struct capy_linear_input *in;
	size_t bytes = capy_linear_input_bytes(w, m);

	CHECK(capy_isa_set((enum capy_isa)isa) == 0);
	*ws = xalloc(bytes + 8);
	/* An unaligned workspace must work too. */
	capy_linear_prepare(w, x, m, (uint8_t *)*ws + 8 * (m & 1), &in);
	capy_linear_rows(w, in, y, 0, w->n);
}

/* Rows computed in s slices (capy_slice) give the same bits as all at once, and touch nothing
 * else (y is pre-filled with a guard pattern). */
static void check_splits(int isa, const struct capy_linear *w, const float *x, uint64_t m,
			 const float *want, const char *what)
{
	struct capy_linear_input *in;
	void *ws = xalloc(capy_linear_input_bytes(w, m));
	float *y = xalloc((m * w->n + 16) * sizeof(float));

	capy_isa_set((enum capy_isa)isa);
	capy_linear_prepare(w, x, m, ws, &in);
	for (int s = 1; s <= 4; s++) {
		bool same = true, guard = true;
		memset(y, 0x5a, (m * w->n + 16) * sizeof(float));
		for (int t = s - 1; t >= 0; t--) { /* any order */
			uint64_t b, e;
			capy_slice(w->n, t, s, &b, &e);
			capy_linear_rows(w, in, y, b, e);
		}
		same = !memcmp(y, want, m * w->n * sizeof(float));
		for (int g = 0; g < 16; g++)
			guard &= ((uint8_t *)(y + m * w->n))[g] == 0x5a;
		CHECK_MSG(same && guard, "%s: %s, %d slices: %s", what, capy_isa_name((enum capy_isa)isa), s,
			  same ? "wrote past y" : "bits differ from one call");
	}
	/* A middle range writes only its rows. */
	if (w->n >= 3) {
		bool ok = true;
		memset(y, 0x5a, m * w->n * sizeof(float));
		capy_linear_rows(w, in, y, 1, w->n - 1);
		for (uint64_t i = 0; i < m; i++)
			for (uint64_t r = 0; r < w->n; r++) {
				bool inside = r >= 1 && r < w->n - 1;
				uint32_t bits = capy_f32_bits(y[i * w->n + r]);
				ok &= inside ? bits == capy_f32_bits(want[i * w->n + r]) : bits == 0x5a5a5a5a;
			}
		CHECK_MSG(ok, "%s: %s: rows [1, n-1) wrote outside their range", what,
			  capy_isa_name((enum capy_isa)isa));
	}
	free(ws);
	free(y);
}

/* Each row of a batch equals the same row computed alone (m = 1). */
static void check_batch_invariance(const struct capy_linear *w, const float *x, uint64_t m,
				   const float *want, const char *what)
{
	float *y = xalloc(w->n * sizeof(float));
	bool ok = true;

	for (uint64_t i = 0; i < m; i++) {
		void *ws;
		run_isa(capy_isa_get(), w, x + i * w->k, 1, y, &ws);
		ok &= !memcmp(y, want + i * w->n, w->n * sizeof(float));
		free(ws);
	}
	CHECK_MSG(ok, "%s: %s: a row differs between m = %" PRIu64 " and m = 1", what,
		  capy_isa_name(capy_isa_get()), m);
	free(y);
}

static double norm_diff(const float *a, const float *b, size_t len)
{
	double d = 0, s = 0;

	for (size_t i = 0; i < len; i++) {
		d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
		s += (double)b[i] * b[i];
	}
	return s > 0 ? sqrt(d / s) : sqrt(d);
}

/* --- plain weights ------------------------------------------------------------------------- */

static const enum capy_dtype plain_dts[] = { CAPY_DT_F32, CAPY_DT_F16, CAPY_DT_BF16 };

static float widen(const void *data, enum capy_dtype dt, uint64_t i)
{
	if (dt == CAPY_DT_F32)
		return ((const float *)data)[i];
	if (dt == CAPY_DT_F16)
		return capy_f16_to_f32(((const uint16_t *)data)[i]);
	return capy_bf16_to_f32(((const uint16_t *)data)[i]);
}

/* Random weights; F16 also gets some subnormals. */
static void *make_plain(enum capy_dtype dt, uint64_t n, uint64_t k)
{
	size_t es = dt == CAPY_DT_F32 ? 4 : 2;
	uint8_t *w = xalloc(n * k * es);

	for (uint64_t i = 0; i < n * k; i++) {
		float v = (float)(capy_rng_normal(&rng) * 0.05);
		uint16_t h;
		if (dt == CAPY_DT_F32) {
			memcpy(w + 4 * i, &v, 4);
			continue;
		}
		h = dt == CAPY_DT_F16 ? capy_f32_to_f16(v) : capy_f32_to_bf16(v);
		if (dt == CAPY_DT_F16 && below(40) == 0)
			h = (uint16_t)(below(0x400) | (below(2) << 15));
		memcpy(w + 2 * i, &h, 2);
	}
	return w;
}

static void test_plain(void)
{
	static const uint64_t shapes[][2] = { { 1, 1 },   { 3, 7 },   { 5, 16 },  { 17, 33 },
					      { 31, 100 }, { 64, 257 }, { 9, 1000 }, { 6, 2048 } };
	static const uint64_t ms[] = { 1, 2, 3, 4, 5, 8, 17 };

	for (size_t d = 0; d < ARRAY_SIZE(plain_dts); d++)
		for (size_t s = 0; s < ARRAY_SIZE(shapes); s++)
			for (size_t mi = 0; mi < ARRAY_SIZE(ms); mi++) {
				enum capy_dtype dt = plain_dts[d];
				uint64_t n = shapes[s][0], k = shapes[s][1], m = ms[mi];
				void *data = make_plain(dt, n, k);
				float *x = make_x(m, k, false), *y[CAPY_ISA_COUNT] = { 0 };
				struct capy_linear w;
				struct capy_err err = { 0 };
				char what[96];
				bool close = true;

				snprintf(what, sizeof(what), "%s [%" PRIu64 ", %" PRIu64 "] m=%" PRIu64,
					 capy_dtype_name(dt), n, k, m);
				CHECK_MSG(capy_linear_init(&w, dt, n, k, 0, NULL, data, &err) == 0, "%s: %s",
					  what, err.msg);
				for (int isa = 0; isa < nisa; isa++) {
					void *ws;
					y[isa] = xalloc(m * n * sizeof(float));
					run_isa(isa, &w, x, m, y[isa], &ws);
					free(ws);
				}
				/* fp64 reference; each lane sums at most k/8 products, then 3 levels of
				 * adds: error <= (k/8 + 5) u sum|x w| (u = 2^-24, one more u without FMA). */
				for (uint64_t i = 0; i < m; i++)
					for (uint64_t r = 0; r < n; r++) {
						double ref = 0, abs = 0, tol;
						for (uint64_t j = 0; j < k; j++) {
							double t = (double)x[i * k + j] * widen(data, dt, r * k + j);
							ref += t;
							abs += fabs(t);
						}
						tol = ((double)k / 8 + 6) * 0x1p-24 * abs + 1e-30;
						for (int isa = 0; isa < nisa; isa++) {
							double got = y[isa][i * n + r];
							if (fabs(got - ref) > tol && close) {
								close = false;
								CHECK_MSG(false, "%s: %s: y[%" PRIu64 "][%" PRIu64 "] = %.9g, fp64 %.9g",
									  what, capy_isa_name((enum capy_isa)isa), i, r, got, ref);
							}
						}
					}
				CHECK(close);
				for (int isa = 1; isa < nisa; isa++) {
					double rel = norm_diff(y[isa], y[0], m * n);
					CHECK_MSG(rel <= 1e-5, "%s: %s vs scalar: %g relative", what,
						  capy_isa_name((enum capy_isa)isa), rel);
				}
				for (int isa = 0; isa < nisa; isa++) {
					float *again = xalloc(m * n * sizeof(float));
					void *ws;
					run_isa(isa, &w, x, m, again, &ws);
					CHECK_MSG(!memcmp(again, y[isa], m * n * sizeof(float)), "%s: %s: run to run",
						  what, capy_isa_name((enum capy_isa)isa));
					free(ws);
					free(again);
					check_splits(isa, &w, x, m, y[isa], what);
					if (m == 17) {
						capy_isa_set((enum capy_isa)isa);
						check_batch_invariance(&w, x, m, y[isa], what);
					}
				}
				for (int isa = 0; isa < nisa; isa++)
					free(y[isa]);
				free(x);
				free(data);
			}
}

/* k = 1, x = 1: y is each weight widened, exactly, for every F16 and BF16 pattern but NaN. */
static void test_plain_widening(void)
{
	const uint64_t n = 65536;
	uint16_t *data = xalloc(n * 2);
	float one = 1.0f, *y = xalloc(n * sizeof(float));

	for (int d = 1; d < 3; d++) {
		enum capy_dtype dt = plain_dts[d];
		struct capy_linear w;
		for (uint64_t i = 0; i < n; i++) {
			uint16_t h = (uint16_t)i;
			bool nan = dt == CAPY_DT_F16 ? (h & 0x7c00) == 0x7c00 && (h & 0x3ff)
						     : (h & 0x7f80) == 0x7f80 && (h & 0x7f);
			data[i] = nan ? 0 : h;
		}
		CHECK(capy_linear_init(&w, dt, n, 1, 0, NULL, data, NULL) == 0);
		for (int isa = 0; isa < nisa; isa++) {
			uint64_t bad = 0;
			void *ws;
			run_isa(isa, &w, &one, 1, y, &ws);
			for (uint64_t i = 0; i < n; i++)
				bad += y[i] != widen(data, dt, i);
			CHECK_MSG(!bad, "%s: %s: %" PRIu64 " weights not widened exactly", capy_dtype_name(dt),
				  capy_isa_name((enum capy_isa)isa), bad);
			free(ws);
		}
	}
	free(data);
	free(y);
}

/* --- NVFP4 --------------------------------------------------------------------------------- */

/* An NVFP4 record. random: any codes, any finite E4M3 scale byte (negative ones too);
 * otherwise the weights are quantized from normal floats by ModelOpt's rule, each part with
 * its own scale_2. input_scale per part as given. */
static uint8_t *make_nvfp4(uint64_t n, uint64_t k, uint32_t np, const uint64_t *parts,
			   const float *input_scale, bool random)
{
	struct capy_nvfp4_layout l;
	uint8_t *rec;
	float s2[CAPY_MAX_PARTS];
	uint64_t r = 0;

	CHECK(capy_nvfp4_layout(n, k, np, &l) == 0);
	rec = xalloc(l.slice_bytes);
	memset(rec, 0, l.slice_bytes);
	for (uint32_t p = 0; p < np; p++) {
		uint64_t rows = parts[p];
		if (random) {
			for (uint64_t i = 0; i < rows * k / 2; i++)
				rec[l.codes_off + r * k / 2 + i] = (uint8_t)below(256);
			for (uint64_t i = 0; i < rows * k / 16; i++) {
				uint8_t s = (uint8_t)below(0x7f);
				rec[l.scales_off + r * k / 16 + i] = below(8) ? s : (uint8_t)(s | 0x80);
			}
			s2[p] = (float)unif(1e-4, 1e-2);
		} else {
			float *wf = xalloc(rows * k * sizeof(float)), amax = 0;
			for (uint64_t i = 0; i < rows * k; i++) {
				wf[i] = (float)(capy_rng_normal(&rng) * 0.02 * (1 + (double)p));
				amax = fmaxf(amax, fabsf(wf[i]));
			}
			s2[p] = capy_nvfp4_weight_scale2(amax);
			capy_nvfp4_quantize(wf, rows, k, s2[p], rec + l.codes_off + r * k / 2,
					    rec + l.scales_off + r * k / 16);
			free(wf);
		}
		r += rows;
	}
	memcpy(rec + l.globals_off, s2, 4 * np);
	memcpy(rec + l.globals_off + 4 * np, input_scale, 4 * np);
	return rec;
}

/* fp64 references of the dequantized product: exact (x_dq = q * s / gs in real arithmetic)
 * and as the float32 reference code computes x_dq and w_dq; absum bounds the exact sum's terms. */
static void nvfp4_reference(const struct capy_linear *w, const float *x, uint64_t m, double *exact,
			    double *vllm, double *absum)
{
	const uint64_t k = w->k, n = w->n;
	uint8_t *ac = xalloc(k / 2), *as = xalloc(k / 16);
	uint64_t r0 = 0;

	for (uint32_t p = 0; p < w->nparts; p++) {
		uint64_t r1 = r0 + w->part_rows[p];
		float s2 = w->scale2[p];
		for (uint64_t i = 0; i < m; i++) {
			const float *xi = x + i * k;
			float is = w->input_scale[p], amax = 0, gs;
			for (uint64_t j = 0; j < k; j++)
				amax = fmaxf(amax, fabsf(xi[j]));
			if (is == 0)
				is = capy_nvfp4_weight_scale2(amax);
			gs = 1.0f / is;
			capy_nvfp4_quantize_act(xi, k, is, ac, as);
			for (uint64_t r = r0; r < r1; r++) {
				const uint8_t *wc = w->codes + r * k / 2, *ws = w->scales + r * k / 16;
				double sum = 0, abs = 0, sumf = 0;
				for (uint64_t j = 0; j < k; j++) {
					float qa = capy_nvfp4_code_value(ac, j), sa = capy_e4m3_to_f32(as[j / 16]);
					float qw = capy_nvfp4_code_value(wc, j), sw = capy_e4m3_to_f32(ws[j / 16]);
					double t = (double)qa * sa * qw * sw;
					float xdq = qa * (sa / gs), wdq = qw * sw * s2;
					sum += t;
					abs += fabs(t);
					sumf += (double)xdq * wdq;
				}
				exact[i * n + r] = sum * s2 / gs;
				absum[i * n + r] = abs * fabs((double)s2 / gs);
				vllm[i * n + r] = sumf;
			}
		}
		r0 = r1;
	}
	free(ac);
	free(as);
}

struct nv_shape {
	uint64_t k;
	uint32_t np;
	uint64_t parts[3];
	float is[3]; /* input_scale per part, 0 = dynamic; < 0: calibrated from the data */
	bool random;
};

static void test_nvfp4(void)
{
	static const struct nv_shape shapes[] = {
		{ 16, 1, { 1 }, { -1 }, false },
		{ 16, 1, { 3 }, { 0 }, true },
		{ 32, 1, { 5 }, { -1 }, true },
		{ 48, 2, { 9, 8 }, { -1, -2 }, false },
		{ 128, 2, { 16, 17 }, { -1, -1 }, false }, /* one input_scale, two scale_2 */
		{ 144, 3, { 7, 5, 7 }, { -1, 0, -2 }, true },
		{ 272, 1, { 64 }, { 0 }, false },
		{ 1040, 2, { 20, 17 }, { 0, 0 }, false },
		{ 2048, 1, { 8 }, { -1 }, true },
	};

	for (size_t s = 0; s < ARRAY_SIZE(shapes); s++)
		for (uint64_t m = 1; m <= 17; m++) {
			const struct nv_shape *sh = &shapes[s];
			uint64_t n = 0, k = sh->k;
			float is[3], *x = make_x(m, k, m >= 2), *y[CAPY_ISA_COUNT] = { 0 };
			double *exact, *vllm, *absum, worst = 0, worst_v = 0;
			struct capy_linear w;
			struct capy_err err = { 0 };
			uint8_t *rec;
			char what[96];

			for (uint32_t p = 0; p < sh->np; p++) {
				n += sh->parts[p];
				/* Calibrated: about the data's amax / 2688, some blocks clamped at 448. */
				is[p] = sh->is[p] < 0 ? (float)(unif(0.3, 3) * 10.0 / 2688 * -sh->is[p]) : 0;
			}
			if (sh->np == 2 && sh->is[0] == sh->is[1])
				is[1] = is[0];
			rec = make_nvfp4(n, k, sh->np, sh->parts, is, sh->random);
			snprintf(what, sizeof(what), "NVFP4 [%" PRIu64 ", %" PRIu64 "] %u parts m=%" PRIu64, n, k,
				 sh->np, m);
			CHECK_MSG(capy_linear_init(&w, CAPY_DT_NVFP4, n, k, sh->np, sh->parts, rec, &err) == 0,
				  "%s: %s", what, err.msg);
			for (int isa = 0; isa < nisa; isa++) {
				void *ws;
				y[isa] = xalloc(m * n * sizeof(float));
				run_isa(isa, &w, x, m, y[isa], &ws);
				free(ws);
				CHECK_MSG(!memcmp(y[isa], y[0], m * n * sizeof(float)), "%s: %s differs from scalar",
					  what, capy_isa_name((enum capy_isa)isa));
			}
			exact = xalloc(m * n * sizeof(double));
			vllm = xalloc(m * n * sizeof(double));
			absum = xalloc(m * n * sizeof(double));
			nvfp4_reference(&w, x, m, exact, vllm, absum);
			for (uint64_t e = 0; e < m * n; e++) {
				/* One float rounding of the exact sum, plus the reference's own fp64 error. */
				double d = fabs(y[0][e] - exact[e]) - 0x1p-40 * absum[e];
				double dv = fabs(y[0][e] - vllm[e]);
				if (d > 0)
					worst = fmax(worst, d / (0x1p-24 * fabs(exact[e]) + 1e-300));
				if (absum[e] > 0)
					worst_v = fmax(worst_v, dv / absum[e]);
				else
					worst_v = fmax(worst_v, dv);
			}
			CHECK_MSG(worst <= 1.0, "%s: %g float roundings from the exact fp64 result", what, worst);
			CHECK_MSG(worst_v <= 1e-6, "%s: %g relative to the float32-dequantized reference", what,
				  worst_v);
			for (int isa = 0; isa < nisa; isa++)
				check_splits(isa, &w, x, m, y[0], what);
			if (m == 17)
				check_batch_invariance(&w, x, m, y[0], what);
			for (int isa = 0; isa < nisa; isa++)
				free(y[isa]);
			free(exact);
			free(vllm);
			free(absum);
			free(x);
			free(rec);
		}
}

/* Threads of a pool computing slices give the same bits as one call. */
struct pool_job {
	const struct capy_linear *w;
	const struct capy_linear_input *in;
	float *y;
};

static void pool_fn(void *ctx, int ith, int nth)
{
	struct pool_job *j = ctx;
	uint64_t b, e;

	capy_slice(j->w->n, ith, nth, &b, &e);
	capy_linear_rows(j->w, j->in, j->y, b, e);
}

static void test_threads(void)
{
	const uint64_t n = 300, k = 512, m = 3, parts[2] = { 150, 150 };
	const float is[2] = { 0.004f, 0 };
	uint8_t *rec = make_nvfp4(n, k, 2, parts, is, false);
	float *x = make_x(m, k, false), *y1 = xalloc(m * n * 4), *y3 = xalloc(m * n * 4);
	struct capy_linear w;
	struct capy_linear_input *in;
	struct capy_pool *pool;
	void *ws;

	CHECK(capy_linear_init(&w, CAPY_DT_NVFP4, n, k, 2, parts, rec, NULL) == 0);
	CHECK(capy_pool_new(&pool, 3, NULL) == 0);
	ws = xalloc(capy_linear_input_bytes(&w, m));
	capy_isa_set(capy_isa_best());
	capy_linear_prepare(&w, x, m, ws, &in);
	capy_linear_rows(&w, in, y1, 0, n);
	capy_pool_run(pool, pool_fn, &(struct pool_job){ &w, in, y3 });
	CHECK(!memcmp(y1, y3, m * n * 4));
	capy_pool_free(pool);
	free(ws);
	free(rec);
	free(x);
	free(y1);
	free(y3);
}

/* A row with Inf or NaN gives NaN outputs (quantization would hide it); the others do not
 * change. */
static void test_nvfp4_nonfinite(void)
{
	const uint64_t n = 5, k = 64, m = 3, parts[1] = { 5 };
	const float is[1] = { 0 };
	uint8_t *rec = make_nvfp4(n, k, 1, parts, is, false);
	float *x = make_x(m, k, false), y[15], ref[15];
	struct capy_linear w;

	CHECK(capy_linear_init(&w, CAPY_DT_NVFP4, n, k, 1, parts, rec, NULL) == 0);
	for (int isa = 0; isa < nisa; isa++) {
		void *ws;
		x[1 * k + 7] = 1.0f;
		run_isa(isa, &w, x, m, ref, &ws);
		free(ws);
		x[1 * k + 7] = isa & 1 ? NAN : -INFINITY;
		run_isa(isa, &w, x, m, y, &ws);
		free(ws);
		for (uint64_t r = 0; r < n; r++) {
			CHECK(isnan(y[1 * n + r]));
			CHECK(capy_f32_bits(y[r]) == capy_f32_bits(ref[r]));
			CHECK(capy_f32_bits(y[2 * n + r]) == capy_f32_bits(ref[2 * n + r]));
		}
	}
	free(rec);
	free(x);
}

/* At the int64 bound: k = CAPY_LINEAR_NVFP4_MAX_K, every product and scale at its largest (6 x 6
 * with both block scales 448) sums without overflow to the exact value. */
static void test_nvfp4_bound(void)
{
	const uint64_t k = CAPY_LINEAR_NVFP4_MAX_K, parts[1] = { 1 };
	const float is[1] = { 1.0f };
	struct capy_nvfp4_layout l;
	uint8_t *rec;
	float *x = xalloc(k * sizeof(float)), y;
	struct capy_linear w;
	struct capy_err err = { 0 };

	capy_nvfp4_layout(1, k, 1, &l);
	rec = make_nvfp4(1, k, 1, parts, is, true);
	memset(rec + l.codes_off, 0x77, k / 2);  /* 6.0 */
	memset(rec + l.scales_off, 0x7e, k / 16); /* 448 */
	memcpy(rec + l.globals_off, &(float){ 1.0f }, 4);
	for (uint64_t j = 0; j < k; j++)
		x[j] = 6.0f * 448.0f; /* s = e4m3(min(amax / 6, 448)) = 448, q = 6 */
	CHECK_MSG(capy_linear_init(&w, CAPY_DT_NVFP4, 1, k, 1, parts, rec, &err) == 0, "%s", err.msg);
	for (int isa = 0; isa < nisa; isa++) {
		void *ws;
		run_isa(isa, &w, x, 1, &y, &ws);
		free(ws);
		CHECK_MSG(y == (float)(36.0 * 448 * 448 * (double)k), "%s: %g",
			  capy_isa_name((enum capy_isa)isa), (double)y);
	}
	/* One block more is refused. */
	CHECK(capy_linear_init(&w, CAPY_DT_NVFP4, 1, k + 16, 1, parts, rec, &err) == CAPY_EINVAL);
	CHECK_CONTAINS(err.msg, "int64");
	free(rec);
	free(x);
}

/* The definition of linear.h computed independently of the kernels' layout: the reference
 * quantization (capy_nvfp4_quantize_act), the decoded values as integers, one int64 sum, the
 * double expression. Weight scale bytes must be finite (0x7f is NaN to capy_e4m3_to_f32). */
static void nvfp4_int64_reference(const struct capy_linear *w, const float *x, uint64_t m,
				  float *y)
{
	const uint64_t k = w->k, n = w->n;
	uint8_t *ac = xalloc(k / 2), *as = xalloc(k / 16);
	uint64_t r0 = 0;

	for (uint32_t p = 0; p < w->nparts; p++) {
		uint64_t r1 = r0 + w->part_rows[p];
		for (uint64_t i = 0; i < m; i++) {
			const float *xi = x + i * k;
			float is = w->input_scale[p], amax = 0, gs;
			for (uint64_t j = 0; j < k; j++)
				amax = fmaxf(amax, fabsf(xi[j]));
			if (is == 0)
				is = capy_nvfp4_weight_scale2(amax);
			gs = 1.0f / is;
			capy_nvfp4_quantize_act(xi, k, is, ac, as);
			for (uint64_t r = r0; r < r1; r++) {
				const uint8_t *wc = w->codes + r * k / 2, *ws = w->scales + r * k / 16;
				int64_t acc = 0;
				for (uint64_t b = 0; b < k / 16; b++) {
					int64_t dot = 0;
					for (uint64_t j = 16 * b; j < 16 * b + 16; j++)
						dot += (int64_t)(2 * capy_nvfp4_code_value(ac, j)) *
						       (int64_t)(2 * capy_nvfp4_code_value(wc, j));
					acc += dot * (int64_t)(capy_e4m3_to_f32(as[b]) * 512.0f) *
					       (int64_t)(capy_e4m3_to_f32(ws[b]) * 512.0f);
				}
				y[i * n + r] = (float)(((double)acc * 0x1p-20) *
						       ((double)w->scale2[p] / (double)gs));
			}
		}
		r0 = r1;
	}
	free(ac);
	free(as);
}

/* The largest values everywhere, for every batch size 1..17 through every ISA: codes +-6 (and
 * random), weight scales 448 / -448 / the smallest subnormal (and 0x7f, which the kernels read
 * as 480, in a second pass compared across ISAs only), activations that quantize to +-6 with
 * block scale 448, blocks of opposite signs so partial sums go both ways; k with a partial
 * last chunk and above the int32 range of any one row's sum. Each ISA's bits equal the
 * independent int64 reference, any row range included. */
static void test_nvfp4_extremes(void)
{
	const uint64_t k = 4096 + 16 * 9, n = 21, parts[2] = { 12, 9 };
	const float is[2] = { 1.0f, 0 };

	for (int nan_scales = 0; nan_scales < 2; nan_scales++)
		for (uint64_t m = 1; m <= 17; m++) {
			struct capy_nvfp4_layout l;
			uint8_t *rec;
			float *x = xalloc(m * k * sizeof(float)), *ref = xalloc(m * n * sizeof(float));
			struct capy_linear w;
			char what[64];

			capy_nvfp4_layout(n, k, 2, &l);
			rec = make_nvfp4(n, k, 2, parts, is, true);
			for (uint64_t e = 0; e < n * k / 2; e++) {
				static const uint8_t big[4] = { 0x77, 0xff, 0x7f, 0xf7 };
				rec[l.codes_off + e] = below(4) ? big[below(4)] : (uint8_t)below(256);
			}
			for (uint64_t e = 0; e < n * k / 16; e++) {
				static const uint8_t sc[5] = { 0x7e, 0xfe, 0x7e, 0x01, 0x7f };
				rec[l.scales_off + e] = sc[below(nan_scales ? 5 : 4)];
			}
			for (uint64_t i = 0; i < m; i++)
				for (uint64_t j = 0; j < k; j++) {
					/* Row 0 all at the largest magnitude, the others mostly. */
					float mag = i == 0 || below(8) ? 6.0f * 448.0f : (float)unif(0, 2688);
					x[i * k + j] = ((j / 16 + i) & 1) ? -mag : mag;
				}
			snprintf(what, sizeof(what), "extremes m=%" PRIu64 "%s", m,
				 nan_scales ? " (0x7f scales)" : "");
			CHECK(capy_linear_init(&w, CAPY_DT_NVFP4, n, k, 2, parts, rec, NULL) == 0);
			if (!nan_scales) {
				nvfp4_int64_reference(&w, x, m, ref);
			} else {
				void *ws;
				run_isa(CAPY_ISA_SCALAR, &w, x, m, ref, &ws);
				free(ws);
			}
			for (int isa = 0; isa < nisa; isa++) {
				float *y = xalloc(m * n * sizeof(float));
				void *ws;
				run_isa(isa, &w, x, m, y, &ws);
				free(ws);
				CHECK_MSG(!memcmp(y, ref, m * n * sizeof(float)), "%s: %s differs from the %s",
					  what, capy_isa_name((enum capy_isa)isa),
					  nan_scales ? "scalar kernel" : "int64 reference");
				check_splits(isa, &w, x, m, ref, what);
				free(y);
			}
			free(rec);
			free(x);
			free(ref);
		}
}

/* The recorded vLLM activation vectors: project each row on identity weights (code 1.0, block
 * scale 1.0, scale_2 1.0) with the recorded input_scale; y = x_dq, which the reference computes
 * as q * float(s / gs) and we as q * s / gs rounded once: equal where |q| is a power of two,
 * within one ulp otherwise. */
static cJSON *vectors;

static void test_nvfp4_vectors(void)
{
	const cJSON *it;
	int count = 0;

	cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(vectors, "activations")) {
		const cJSON *shape = cJSON_GetObjectItemCaseSensitive(it, "shape");
		const cJSON *xb = cJSON_GetObjectItemCaseSensitive(it, "x_f32_bits");
		const cJSON *dq = cJSON_GetObjectItemCaseSensitive(it, "x_dq_f32_bits");
		const cJSON *fp4 = cJSON_GetObjectItemCaseSensitive(it, "fp4_values");
		const char *name = cJSON_GetObjectItemCaseSensitive(it, "name")->valuestring;
		uint64_t m = (uint64_t)cJSON_GetArrayItem(shape, 0)->valuedouble;
		uint64_t k = (uint64_t)cJSON_GetArrayItem(shape, 1)->valuedouble, parts[1] = { k };
		float is = capy_f32_from_bits(
			(uint32_t)cJSON_GetObjectItemCaseSensitive(it, "input_scale_f32_bits")->valuedouble);
		struct capy_nvfp4_layout l;
		struct capy_linear w;
		float *x = xalloc(m * k * 4), *y = xalloc(m * k * 4);
		uint8_t *rec;

		capy_nvfp4_layout(k, k, 1, &l);
		rec = make_nvfp4(k, k, 1, parts, &is, true);
		memset(rec + l.codes_off, 0, k * k / 2);
		memset(rec + l.scales_off, 0x38, k * k / 16);
		memcpy(rec + l.globals_off, &(float){ 1.0f }, 4);
		for (uint64_t r = 0; r < k; r++)
			rec[l.codes_off + r * k / 2 + r / 2] = r & 1 ? 0x20 : 0x02;
		for (uint64_t e = 0; e < m * k; e++)
			x[e] = capy_f32_from_bits((uint32_t)cJSON_GetArrayItem(xb, (int)e)->valuedouble);
		CHECK(capy_linear_init(&w, CAPY_DT_NVFP4, k, k, 1, parts, rec, NULL) == 0);
		for (int isa = 0; isa < nisa; isa++) {
			uint64_t bad = 0;
			void *ws;
			run_isa(isa, &w, x, m, y, &ws);
			free(ws);
			for (uint64_t e = 0; e < m * k; e++) {
				float want = capy_f32_from_bits((uint32_t)cJSON_GetArrayItem(dq, (int)e)->valuedouble);
				double q = fabs(cJSON_GetArrayItem(fp4, (int)e)->valuedouble);
				bool pow2 = q == 0 || q == 0.5 || q == 1 || q == 2 || q == 4;
				float ulp = nextafterf(fabsf(want), INFINITY) - fabsf(want);
				if (pow2 ? y[e] != want : fabsf(y[e] - want) > ulp)
					bad++;
			}
			CHECK_MSG(!bad, "%s: %s: %" PRIu64 " elements differ from vLLM's x_dq", name,
				  capy_isa_name((enum capy_isa)isa), bad);
		}
		free(rec);
		free(x);
		free(y);
		count++;
	}
	CHECK(count >= 3);
}

/* --- capy_linear_init -------------------------------------------------------------------- */

static void test_init_errors(void)
{
	static uint8_t rec[4096];
	const uint64_t two[2] = { 2, 3 }, zero[2] = { 5, 0 };
	struct capy_linear w;
	struct capy_err err = { 0 };
	struct capy_nvfp4_layout l;
	float bad = NAN;

#define REFUSE(call, needle)                                                                       \
	do {                                                                                       \
		capy_err_clear(&err);                                                              \
		CHECK_EQ_INT(call, CAPY_EINVAL);                                                    \
		CHECK_CONTAINS(err.msg, needle);                                                   \
	} while (0)

	REFUSE(capy_linear_init(&w, CAPY_DT_I8, 4, 4, 0, NULL, rec, &err), "unsupported weight dtype I8");
	REFUSE(capy_linear_init(&w, CAPY_DT_F32, 0, 4, 0, NULL, rec, &err), "empty matrix [0, 4]");
	REFUSE(capy_linear_init(&w, CAPY_DT_BF16, 4, 0, 0, NULL, rec, &err), "empty matrix [4, 0]");
	REFUSE(capy_linear_init(&w, CAPY_DT_F16, 4, 4, 0, NULL, NULL, &err), "no weight data");
	REFUSE(capy_linear_init(&w, CAPY_DT_F32, 1ull << 40, 1ull << 40, 0, NULL, rec, &err),
	       "too large");
	REFUSE(capy_linear_init(&w, CAPY_DT_NVFP4, 4, 24, 0, NULL, rec, &err), "not a multiple of 16");
	REFUSE(capy_linear_init(&w, CAPY_DT_NVFP4, 4, CAPY_LINEAR_NVFP4_MAX_K * 2ull, 0, NULL, rec, &err),
	       "cannot overflow");
	REFUSE(capy_linear_init(&w, CAPY_DT_NVFP4, 4, 16, 9, two, rec, &err), "at most 8");
	REFUSE(capy_linear_init(&w, CAPY_DT_NVFP4, 4, 16, 2, two, rec, &err), "add up to 5 rows");
	REFUSE(capy_linear_init(&w, CAPY_DT_NVFP4, 5, 16, 2, zero, rec, &err), "part 1 has 0 rows");
	REFUSE(capy_linear_init(&w, CAPY_DT_NVFP4, 5, 16, 2, NULL, rec, &err), "no part sizes");
	capy_nvfp4_layout(5, 16, 2, &l);
	memcpy(rec + l.globals_off + 4, &bad, 4);
	REFUSE(capy_linear_init(&w, CAPY_DT_NVFP4, 5, 16, 2, two, rec, &err),
	       "part 1: weight_scale_2 nan");
	memset(rec, 0, sizeof(rec));
	memcpy(rec + l.globals_off + 8, &(float){ -1.0f }, 4);
	REFUSE(capy_linear_init(&w, CAPY_DT_NVFP4, 5, 16, 2, two, rec, &err), "part 0: input_scale -1");
	memcpy(rec + l.globals_off + 8, &(float){ 1e-45f }, 4); /* 1/input_scale overflows */
	REFUSE(capy_linear_init(&w, CAPY_DT_NVFP4, 5, 16, 2, two, rec, &err), "input_scale");
	memset(rec, 0, sizeof(rec));
	CHECK(capy_linear_init(&w, CAPY_DT_NVFP4, 5, 16, 2, two, rec, &err) == 0);
	CHECK(capy_linear_init(&w, CAPY_DT_NVFP4, 5, 16, 0, NULL, rec, &err) == 0 && w.nparts == 1 &&
	      w.part_rows[0] == 5);
#undef REFUSE
}

/* The activation is quantized once per distinct input_scale: parts that share one need no more
 * workspace than a single part. */
static void test_variants(void)
{
	const uint64_t one[1] = { 8 }, two[2] = { 4, 4 }, m = 3;
	const float same[2] = { 0.01f, 0.01f }, diff[2] = { 0.01f, 0 };
	uint8_t *r1 = make_nvfp4(8, 256, 1, one, same, true), *r2 = make_nvfp4(8, 256, 2, two, same, true);
	uint8_t *r3 = make_nvfp4(8, 256, 2, two, diff, true);
	struct capy_linear w1, w2, w3;

	CHECK(capy_linear_init(&w1, CAPY_DT_NVFP4, 8, 256, 1, one, r1, NULL) == 0);
	CHECK(capy_linear_init(&w2, CAPY_DT_NVFP4, 8, 256, 2, two, r2, NULL) == 0);
	CHECK(capy_linear_init(&w3, CAPY_DT_NVFP4, 8, 256, 2, two, r3, NULL) == 0);
	CHECK_EQ_U64(capy_linear_input_bytes(&w2, m), capy_linear_input_bytes(&w1, m));
	CHECK(capy_linear_input_bytes(&w3, m) > capy_linear_input_bytes(&w1, m));
	CHECK(capy_linear_input_bytes(&w1, UINT64_MAX / 2) == SIZE_MAX);
	free(r1);
	free(r2);
	free(r3);
}

static void test_isa(void)
{
	enum capy_isa best = capy_isa_best();

	CHECK(capy_isa_set(CAPY_ISA_SCALAR) == 0 && capy_isa_get() == CAPY_ISA_SCALAR);
	CHECK(capy_isa_set(best) == 0 && capy_isa_get() == best);
	CHECK(best == CAPY_ISA_AVX512_VNNI || capy_isa_set((enum capy_isa)(best + 1)) == -1);
	CHECK(capy_isa_set(CAPY_ISA_COUNT) == -1);
	CHECK_STR(capy_isa_name(CAPY_ISA_AVX512_VNNI), "avx512-vnni");
	CHECK_STR(capy_isa_name(CAPY_ISA_COUNT), "unknown");
}

int main(void)
{
	if (!(vectors = test_fixture_json("nvfp4_vectors.json")))
		return 1;
	capy_rng_seed(&rng, 20240611);
	nisa = (int)capy_isa_best() + 1;
	printf("ISAs tested: ");
	for (int isa = 0; isa < nisa; isa++)
		printf("%s%s", isa ? ", " : "", capy_isa_name((enum capy_isa)isa));
	if (nisa < CAPY_ISA_COUNT) {
		printf("; skipped (not on this CPU): ");
		for (int isa = nisa; isa < CAPY_ISA_COUNT; isa++)
			printf("%s%s", isa > nisa ? ", " : "", capy_isa_name((enum capy_isa)isa));
	}
	printf("\n");
	RUN(test_isa);
	RUN(test_init_errors);
	RUN(test_variants);
	RUN(test_plain_widening);
	RUN(test_plain);
	RUN(test_nvfp4_vectors);
	RUN(test_nvfp4);
	RUN(test_nvfp4_nonfinite);
	RUN(test_nvfp4_bound);
	RUN(test_nvfp4_extremes);
	RUN(test_threads);
	capy_isa_set(capy_isa_best());
	cJSON_Delete(vectors);
	return test_summary();
}
