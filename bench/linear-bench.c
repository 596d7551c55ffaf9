/* linear-bench.c - throughput of the CPU linear kernels (libcore/cpu/linear.h) against this
 * machine's memory read bandwidth. Not a test; results go to docs/perf.md.
 *
 *	make bench && build/bench/linear-bench [--quick] [--experts N] [--isa NAME]
 *		[--threads 1,2,...] [--m 1,4,16] [--split rows|experts]
 *		[--jobs 8x1,8x4,32x1] [--hidden 2048,2560]
 *		[--only bandwidth|decode|hot|prefill|prepare|jobs]
 *
 * 1. Read bandwidth: sum a 1 GiB buffer with each thread count (default 1 and 2, at most the
 *    CPU count; best of 5), and again between the timed passes of every kernel (the VM's share
 *    of the host varies).
 * 2. Decode: NVFP4 expert matvec over Flash-Next-shaped experts (gate_up [1024, 2048] with two
 *    parts, down [2048, 512]), one contiguous record pair per expert as in an artifact, rotating
 *    over N experts (default 512, ~900 MB) so nothing stays in cache; m from --m (activation
 *    rows per expert, default 1, 4 and 16). Rows are split over the pool's threads for each
 *    matrix ("rows"), or each thread takes whole experts ("experts"). Prints GB/s of weights
 *    read and % of the read bandwidth with as many threads. BF16 [2048, 2048] matvec the same
 *    way (64 matrices, 512 MB; m = 1, 4, 8, 16).
 * 3. The same kernels with the weights in L2 (8 NVFP4 [64, 2048], 2 BF16 [64, 2048]): what the
 *    core computes when memory is not the limit (NVFP4 at every m of --m).
 * 4. Prefill-like: m = 64 and 512 on in-cache-sized sets, GFLOP/s (2 m n k per call).
 * 5. Expert jobs of the offloading engine (libcore/offload/cpu-experts.h): one MoE layer's
 *    misses of a decode step, --jobs EXPERTSxTOKENS (default 8 experts x 1 token, 8 x 4,
 *    32 x 1), for each --hidden (2048: Qwen3.5-MoE, 2560: Flash-Next; moe_intermediate 512,
 *    gate_up in two parts), through a pool of each --threads count, the input handed over
 *    quantized as the GPU hands it; the experts of successive jobs rotate over a set larger
 *    than the caches. Prints us per job (median and best) and GB/s of expert weights read.
 */
#include "core.h"
#include "cpu/linear.h"
#include "offload/cpu-experts.h"
#include "util/thread.h"

#include <immintrin.h>
#include <math.h>
#include <time.h>

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *xalloc(size_t bytes)
{
	void *p = aligned_alloc(4096, CAPY_ALIGN_UP(bytes, 4096));

	if (!p) {
		fprintf(stderr, "linear-bench: out of memory (%zu bytes)\n", bytes);
		exit(1);
	}
	return p;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static void fill_random(uint8_t *p, size_t n)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		uint64_t v = rnd();
		memcpy(p + i, &v, 8);
	}
	for (; i < n; i++)
		p[i] = (uint8_t)rnd();
}

/* A comma-separated list of integers in [lo, hi] into out (at most max); the count, or -1. */
static int parse_list(const char *s, uint64_t *out, int max, uint64_t lo, uint64_t hi)
{
	int n = 0;

	while (*s) {
		char *end;
		unsigned long long v = strtoull(s, &end, 10);
		if (end == s || v < lo || v > hi || n == max || (*end && *end != ','))
			return -1;
		out[n++] = v;
		s = *end ? end + 1 : end;
	}
	return n;
}

/* --- read bandwidth ------------------------------------------------------------------------ */

struct bw_job {
	const uint8_t *buf;
	size_t bytes;
	uint64_t sums[64];
};

__attribute__((target("avx2"))) static void bw_fn(void *ctx, int ith, int nth)
{
	struct bw_job *j = ctx;
	uint64_t b, e;
	__m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;

	capy_slice(j->bytes / 128, ith, nth, &b, &e);
	for (uint64_t i = b * 128; i < e * 128; i += 128) {
		s0 = _mm256_add_epi64(s0, _mm256_load_si256((const __m256i *)(j->buf + i)));
		s1 = _mm256_add_epi64(s1, _mm256_load_si256((const __m256i *)(j->buf + i + 32)));
		s2 = _mm256_add_epi64(s2, _mm256_load_si256((const __m256i *)(j->buf + i + 64)));
		s3 = _mm256_add_epi64(s3, _mm256_load_si256((const __m256i *)(j->buf + i + 96)));
	}
	s0 = _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3));
	j->sums[ith] = (uint64_t)_mm256_extract_epi64(s0, 0) + (uint64_t)_mm256_extract_epi64(s0, 3);
}

static struct bw_job bw_job;

static void nop_fn(void *ctx, int ith, int nth)
{
}

/* Microseconds of one capy_pool_run of an empty job (wake the workers, wait for them). */
static double pool_overhead(struct capy_pool *pool)
{
	const int reps = 20000;
	double t = now();

	for (int i = 0; i < reps; i++)
		capy_pool_run(pool, nop_fn, NULL);
	return (now() - t) / reps * 1e6;
}

/* One pass over the buffer; GB/s. */
static double bw_pass(struct capy_pool *pool)
{
	double t = now();

	capy_pool_run(pool, bw_fn, &bw_job);
	return (double)bw_job.bytes / (now() - t) / 1e9;
}

static void bw_init(void)
{
	uint8_t *buf;

	bw_job.bytes = 1ull << 30;
	buf = xalloc(bw_job.bytes);
	memset(buf, 1, bw_job.bytes);
	bw_job.buf = buf;
}

/* --- matrices ------------------------------------------------------------------------------ */

struct mat {
	struct capy_linear w;
	uint64_t bytes; /* weight bytes read per call */
};

/* An NVFP4 record [n, k] at p with random codes and plausible scales; returns its size. */
static uint64_t nvfp4_record(uint8_t *p, uint64_t n, uint64_t k, uint32_t np, const uint64_t *parts,
			     struct mat *out)
{
	struct capy_nvfp4_layout l;
	float g[2 * CAPY_MAX_PARTS];
	struct capy_err err = { 0 };

	capy_nvfp4_layout(n, k, np, &l);
	fill_random(p, l.codes_bytes);
	for (uint64_t i = 0; i < l.scales_bytes; i++)
		p[l.scales_off + i] = (uint8_t)(0x28 + rnd() % 0x28);
	for (uint32_t i = 0; i < np; i++) {
		g[i] = 1e-3f * (float)(i + 1);
		g[np + i] = 0.01f;
	}
	memcpy(p + l.globals_off, g, 8 * np);
	if (capy_linear_init(&out->w, CAPY_DT_NVFP4, n, k, np, parts, p, &err) < 0) {
		fprintf(stderr, "linear-bench: %s\n", err.msg);
		exit(1);
	}
	out->bytes = l.codes_bytes + l.scales_bytes;
	return l.slice_bytes;
}

static void plain_matrix(uint8_t *p, uint64_t n, uint64_t k, enum capy_dtype dt, struct mat *out)
{
	size_t es = dt == CAPY_DT_F32 ? 4 : 2;

	for (uint64_t i = 0; i < n * k; i++) {
		float v = (float)((double)(rnd() % 2001) / 1000.0 - 1.0) * 0.05f;
		uint32_t u;
		memcpy(&u, &v, 4);
		if (es == 4)
			memcpy(p + 4 * i, &v, 4);
		else
			memcpy(p + 2 * i, (uint8_t *)&u + 2, 2); /* BF16 by truncation: fine for timing */
	}
	capy_linear_init(&out->w, dt, n, k, 0, NULL, p, NULL);
	out->bytes = n * k * es;
}

/* --- timed runs ---------------------------------------------------------------------------- */

struct run {
	struct mat *mats;
	size_t nmats;
	int per_call;     /* matrices per unit of work: 2 for an expert (gate_up then down) */
	bool split_units; /* each thread takes whole units instead of a slice of each matrix */
	uint64_t m;
	const float *x;
	float *y;          /* [threads][m * 4096] */
	uint8_t *ws;       /* [threads][ws_stride] */
	size_t ws_stride;
	/* set per call in the row-split mode */
	const struct capy_linear *cur;
	const struct capy_linear_input *in;
};

static void rows_fn(void *ctx, int ith, int nth)
{
	struct run *r = ctx;
	uint64_t b, e;

	capy_slice(r->cur->n, ith, nth, &b, &e);
	capy_linear_rows(r->cur, r->in, r->y, b, e);
}

static void units_fn(void *ctx, int ith, int nth)
{
	struct run *r = ctx;
	float *y = r->y + (size_t)ith * r->m * 4096;
	void *ws = r->ws + (size_t)ith * r->ws_stride;

	for (size_t u = (size_t)ith; u * r->per_call < r->nmats; u += (size_t)nth)
		for (int c = 0; c < r->per_call; c++) {
			const struct capy_linear *w = &r->mats[u * r->per_call + c].w;
			struct capy_linear_input *in;
			capy_linear_prepare(w, r->x, r->m, ws, &in);
			capy_linear_rows(w, in, y, 0, w->n);
		}
}

/* Seconds for one pass over all matrices. */
static double pass(struct capy_pool *pool, struct run *r)
{
	double t = now();

	if (r->split_units) {
		capy_pool_run(pool, units_fn, r);
	} else {
		for (size_t i = 0; i < r->nmats; i++) {
			struct capy_linear_input *in;
			capy_linear_prepare(&r->mats[i].w, r->x, r->m, r->ws, &in);
			r->cur = &r->mats[i].w;
			r->in = in;
			capy_pool_run(pool, rows_fn, r);
		}
	}
	return now() - t;
}

static uint64_t total_bytes(const struct run *r)
{
	uint64_t b = 0;

	for (size_t i = 0; i < r->nmats; i++)
		b += r->mats[i].bytes;
	return b;
}

static double flops(const struct run *r)
{
	double f = 0;

	for (size_t i = 0; i < r->nmats; i++)
		f += 2.0 * (double)r->m * (double)r->mats[i].w.n * (double)r->mats[i].w.k;
	return f;
}

/* Best of reps passes (after one warm-up pass), alternating with passes of the bandwidth test
 * on the same threads: this machine is a VM whose share of the host varies from minute to
 * minute, so each kernel is compared with the bandwidth measured next to it (*bw). */
static double best_pass(struct capy_pool *pool, struct run *r, int reps, double *bw)
{
	double best = 1e30;

	*bw = 0;
	pass(pool, r);
	for (int i = 0; i < reps; i++) {
		*bw = fmax(*bw, bw_pass(pool));
		best = fmin(best, pass(pool, r));
	}
	return best;
}

static void setup_run(struct run *r, struct mat *mats, size_t nmats, int per_call, uint64_t m,
		      int threads, const float *x)
{
	size_t ws = 0;

	memset(r, 0, sizeof(*r));
	r->mats = mats;
	r->nmats = nmats;
	r->per_call = per_call;
	r->m = m;
	r->x = x;
	for (size_t i = 0; i < nmats; i++)
		ws = CAPY_MAX(ws, capy_linear_input_bytes(&mats[i].w, m));
	r->ws_stride = CAPY_ALIGN_UP(ws, 4096);
	r->ws = xalloc(r->ws_stride * (size_t)threads);
	r->y = xalloc((size_t)threads * m * 4096 * sizeof(float));
}

static void free_run(struct run *r)
{
	free(r->ws);
	free(r->y);
}

/* --- expert jobs of the offloading engine -------------------------------------------------- */

struct job_shape {
	uint64_t experts, tokens;
};

/* A list of EXPERTSxTOKENS ("8x1,8x4,32x1") into out; the count, or -1. */
static int parse_jobs(const char *s, struct job_shape *out, int max)
{
	int n = 0;

	while (*s) {
		char *end;
		unsigned long long e = strtoull(s, &end, 10), t;
		if (end == s || *end != 'x' || !e || e > 512 || n == max)
			return -1;
		s = end + 1;
		t = strtoull(s, &end, 10);
		if (end == s || !t || t > 64 || (*end && *end != ','))
			return -1;
		out[n++] = (struct job_shape){ e, t };
		s = *end ? end + 1 : end;
	}
	return n;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Section 5: nexp experts of hidden size H, each job shape through a pool of each thread count. */
static void bench_jobs(uint64_t H, size_t nexp, const uint64_t *threads, int nthr, struct capy_pool **bwpool,
		       const struct job_shape *jobs, int njobs, bool quick)
{
	const uint64_t I = 512, gu_parts[2] = { I, I };
	struct capy_nvfp4_layout gl, dl;
	struct capy_err err = { 0 };

	capy_nvfp4_layout(2 * I, H, 2, &gl);
	capy_nvfp4_layout(H, I, 1, &dl);
	uint64_t stride = CAPY_ALIGN_UP(gl.slice_bytes + dl.slice_bytes, 4096);
	uint8_t *rec = xalloc(stride * nexp);
	struct mat *m = calloc(2 * nexp, sizeof(*m));
	struct capy_linear *gu = calloc(nexp, sizeof(*gu)), *dn = calloc(nexp, sizeof(*dn));
	for (size_t e = 0; e < nexp; e++) {
		uint8_t *p = rec + e * stride;
		nvfp4_record(p, 2 * I, H, 2, gu_parts, &m[2 * e]);
		nvfp4_record(p + gl.slice_bytes, H, I, 1, &H, &m[2 * e + 1]);
		gu[e] = m[2 * e].w;
		dn[e] = m[2 * e + 1].w;
	}
	const uint64_t ebytes = m[0].bytes + m[1].bytes;
	uint64_t maxm = 1;
	for (int jn = 0; jn < njobs; jn++)
		maxm = CAPY_MAX(maxm, jobs[jn].experts * jobs[jn].tokens);
	/* the hand-over: every expert has the same input scales here, so rows quantized for expert
	 * 0 serve them all (what the GPU would hand over) */
	float *x = xalloc(maxm * H * sizeof(float));
	for (uint64_t i = 0; i < maxm * H; i++)
		x[i] = (float)((double)(rnd() % 20001) / 10000.0 - 1.0);
	int8_t *qa = xalloc(2 * maxm * H);
	int32_t *sa = xalloc(2 * maxm * (H / 16) * sizeof(int32_t));
	float *gs = xalloc(2 * maxm * sizeof(float)), *out = xalloc(maxm * H * sizeof(float));
	void *qws = xalloc(capy_linear_input_bytes(&gu[0], maxm));
	capy_linear_quantize_rows(&gu[0], x, maxm, qws, qa, sa, gs, maxm);
	int32_t *ids = xalloc(maxm * sizeof(int32_t));

	printf("\n%zu NVFP4 experts of hidden %" PRIu64 " (gate_up [%" PRIu64 ", %" PRIu64 "] + down [%" PRIu64
	       ", %" PRIu64 "], %.2f MB each), %.0f MB\n", nexp, H, 2 * I, H, H, I, (double)ebytes / 1e6,
	       (double)stride * (double)nexp / 1e6);
	printf("\n| hidden | experts x tokens | threads | split | us per job (median) | best | GB/s (median) | "
	       "read bw GB/s |\n|---|---|---|---|---|---|---|---|\n");
	for (int ti = 0; ti < nthr; ti++) {
		struct capy_cpu_experts *pool;
		struct capy_cpu_experts_job *job = calloc(1, sizeof(*job));
		double bw = 0;
		for (int i = 0; i < 3; i++)
			bw = fmax(bw, bw_pass(bwpool[ti]));
		if (capy_cpu_experts_new(&pool, &(struct capy_cpu_experts_opts){ .threads = (int)threads[ti] },
					 &err) < 0) {
			fprintf(stderr, "linear-bench: %s\n", err.msg);
			exit(1);
		}
		job->gate_up = gu;
		job->down = dn;
		job->n_experts = (uint32_t)nexp;
		job->expert = ids;
		job->out = out;
		/* the hand-off alone: a job without misses (post, the dispatcher wakes, done, the
		 * waiter wakes), best and median of 2000 */
		{
			double rt[2000];
			for (int r = 0; r < 2000; r++) {
				double t0 = now();
				capy_cpu_experts_submit(pool, job, &err);
				rt[r] = now() - t0;
			}
			qsort(rt, 2000, sizeof(double), cmp_double);
			printf("| %" PRIu64 " | none (hand-off) | %d | | %.1f | %.1f | | |\n", H, (int)threads[ti],
			       rt[1000] * 1e6, rt[0] * 1e6);
		}
		for (int jn = 0; jn < njobs; jn++) {
			const uint64_t g = jobs[jn].experts, tok = jobs[jn].tokens, n = g * tok;
			const int reps = quick ? 20 : 200;
			double *t = calloc((size_t)reps, sizeof(double));
			uint64_t next = 0;
			if (g > nexp)
				continue;
			job->n_misses = (uint32_t)n;
			job->in = (struct capy_nvfp4_rows){ qa, sa, gs, maxm };
			for (int r = -2; r < reps; r++) {
				for (uint64_t s = 0; s < n; s++) /* token-major, as the router lists them */
					ids[s] = (int32_t)((next + s % g) % nexp);
				next += g;
				double t0 = now();
				if (capy_cpu_experts_submit(pool, job, &err) < 0) {
					fprintf(stderr, "linear-bench: %s\n", err.msg);
					exit(1);
				}
				if (r >= 0)
					t[r] = now() - t0;
			}
			qsort(t, (size_t)reps, sizeof(double), cmp_double);
			/* the pool's choice (cpu-experts.c): whole experts from 4 per thread */
			const bool whole = threads[ti] == 1 || g >= 4 * threads[ti];
			printf("| %" PRIu64 " | %" PRIu64 " x %" PRIu64 " | %d | %s | %.1f | %.1f | %.2f | %.2f |\n", H, g, tok,
			       (int)threads[ti], whole ? "experts" : "rows", t[reps / 2] * 1e6, t[0] * 1e6,
			       (double)(g * ebytes) / t[reps / 2] / 1e9, bw);
			fflush(stdout);
			free(t);
		}
		capy_cpu_experts_forget(pool, job);
		capy_cpu_experts_free(pool);
		free(job);
	}
	free(rec);
	free(m);
	free(gu);
	free(dn);
	free(x);
	free(qa);
	free(sa);
	free(gs);
	free(out);
	free(qws);
	free(ids);
}

int main(int argc, char **argv)
{
	bool quick = false;
	size_t nexp = 512;
	const char *only = NULL;
	int isa_lo = 0, isa_hi = (int)capy_isa_best();
	struct capy_pool *pool[16] = { 0 };
	double bw;
	struct capy_err err = { 0 };
	const uint64_t gu_parts[2] = { 512, 512 };
	uint64_t threads[16] = { 1, 2 }, ms_fp4[16] = { 1, 4, 16 };
	int nthr = capy_cpu_count() > 1 ? 2 : 1, nm_fp4 = 3, splits = 3; /* bit 0 rows, 1 experts */
	struct job_shape jobs[16] = { { 8, 1 }, { 8, 4 }, { 32, 1 } };
	uint64_t hiddens[4] = { 2048, 2560 };
	int njobs = 3, nhid = 2;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick"))
			quick = true;
		else if (!strcmp(argv[i], "--experts") && i + 1 < argc)
			nexp = (size_t)strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--only") && i + 1 < argc)
			only = argv[++i];
		else if (!strcmp(argv[i], "--isa") && i + 1 < argc) {
			const char *name = argv[++i];
			isa_lo = isa_hi = -1;
			for (int k = 0; k < CAPY_ISA_COUNT; k++)
				if (!strcmp(name, capy_isa_name((enum capy_isa)k)) && k <= (int)capy_isa_best())
					isa_lo = isa_hi = k;
			if (isa_lo < 0) {
				fprintf(stderr, "linear-bench: ISA '%s' unknown or not on this CPU\n", name);
				return 2;
			}
		} else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
			if ((nthr = parse_list(argv[++i], threads, 16, 1, 1024)) <= 0) {
				fprintf(stderr, "linear-bench: --threads wants up to 16 counts, e.g. 1,2,4,8,16\n");
				return 2;
			}
		} else if (!strcmp(argv[i], "--m") && i + 1 < argc) {
			if ((nm_fp4 = parse_list(argv[++i], ms_fp4, 16, 1, 512)) <= 0) {
				fprintf(stderr, "linear-bench: --m wants up to 16 row counts in 1..512, e.g. 1,2,4,8,16\n");
				return 2;
			}
		} else if (!strcmp(argv[i], "--jobs") && i + 1 < argc) {
			if ((njobs = parse_jobs(argv[++i], jobs, 16)) <= 0) {
				fprintf(stderr, "linear-bench: --jobs wants up to 16 EXPERTSxTOKENS, e.g. 8x1,8x4,32x1\n");
				return 2;
			}
		} else if (!strcmp(argv[i], "--hidden") && i + 1 < argc) {
			if ((nhid = parse_list(argv[++i], hiddens, 4, 256, 16384)) <= 0 || hiddens[0] % 256) {
				fprintf(stderr, "linear-bench: --hidden wants up to 4 hidden sizes, multiples of 256\n");
				return 2;
			}
		} else if (!strcmp(argv[i], "--split") && i + 1 < argc) {
			const char *v = argv[++i];
			splits = !strcmp(v, "rows") ? 1 : !strcmp(v, "experts") ? 2 : 0;
			if (!splits) {
				fprintf(stderr, "linear-bench: --split is rows or experts, not '%s'\n", v);
				return 2;
			}
		} else {
			fprintf(stderr, "usage: linear-bench [--quick] [--experts N] [--isa NAME] "
				"[--threads 1,2,...] [--m 1,4,16] [--split rows|experts] "
				"[--jobs 8x1,8x4,32x1] [--hidden 2048,2560] "
				"[--only bandwidth|decode|hot|prefill|prepare|jobs]\n");
			return 2;
		}
	}
	if (quick)
		nexp = CAPY_MIN(nexp, 64);
	for (int ti = 0; ti < nthr; ti++)
		if (capy_pool_new(&pool[ti], (int)threads[ti], &err) < 0) {
			fprintf(stderr, "linear-bench: %s\n", err.msg);
			return 1;
		}

	printf("# linear-bench: best ISA %s, %d CPUs\n", capy_isa_name(capy_isa_best()), capy_cpu_count());
	bw_init();
	for (int ti = 0; ti < nthr; ti++) {
		double best = 0;
		for (int i = 0; i < 5; i++)
			best = fmax(best, bw_pass(pool[ti]));
		printf("read bandwidth, %d thread%s: %.2f GB/s\n", (int)threads[ti],
		       threads[ti] > 1 ? "s" : "", best);
	}
	for (int ti = 0; ti < nthr; ti++)
		if (threads[ti] > 1)
			printf("capy_pool_run of an empty job, %d threads: %.1f us\n", (int)threads[ti],
			       pool_overhead(pool[ti]));
	if (only && !strcmp(only, "bandwidth"))
		return 0;
	if (!only || !strcmp(only, "jobs"))
		for (int h = 0; h < nhid; h++)
			bench_jobs(hiddens[h], quick ? 48 : 160, threads, nthr, pool, jobs, njobs, quick);
	if (only && !strcmp(only, "jobs"))
		return 0;

	/* Experts: gate_up then down, one contiguous range each, as in an artifact. */
	struct capy_nvfp4_layout gl, dl;
	capy_nvfp4_layout(1024, 2048, 2, &gl);
	capy_nvfp4_layout(2048, 512, 1, &dl);
	uint64_t stride = CAPY_ALIGN_UP(gl.slice_bytes + dl.slice_bytes, 4096);
	uint8_t *experts = xalloc(stride * nexp);
	struct mat *emats = calloc(2 * nexp, sizeof(*emats));
	for (size_t e = 0; e < nexp; e++) {
		uint8_t *p = experts + e * stride;
		uint64_t one = 2048;
		nvfp4_record(p, 1024, 2048, 2, gu_parts, &emats[2 * e]);
		nvfp4_record(p + gl.slice_bytes, 2048, 512, 1, &one, &emats[2 * e + 1]);
	}
	size_t nbf = quick ? 16 : 64;
	uint8_t *bf = xalloc(nbf * 2048 * 2048 * 2);
	struct mat *bmats = calloc(nbf, sizeof(*bmats));
	for (size_t i = 0; i < nbf; i++)
		plain_matrix(bf + i * 2048 * 2048 * 2, 2048, 2048, CAPY_DT_BF16, &bmats[i]);
	float *x = xalloc(512 * 2048 * sizeof(float));
	for (size_t i = 0; i < 512 * 2048; i++)
		x[i] = (float)((double)(rnd() % 20001) / 10000.0 - 1.0);

	printf("\n%zu NVFP4 experts (gate_up [1024, 2048] + down [2048, 512]), %.0f MB; "
	       "%zu BF16 [2048, 2048], %.0f MB\n", nexp, (double)stride * (double)nexp / 1e6, nbf,
	       (double)nbf * 8.388608);
	if (!only || !strcmp(only, "decode")) {
	printf("\n| kernel | m | ISA | threads | split | GB/s | read bw GB/s | %% of read bw | us per matrix |\n");
	printf("|---|---|---|---|---|---|---|---|---|\n");
	for (int isa = isa_hi; isa >= isa_lo; isa--) {
		capy_isa_set((enum capy_isa)isa);
		for (int kind = 0; kind < 2; kind++) {
			/* NVFP4: the decode shapes of experts; BF16: batched decode of m sequences. */
			static const uint64_t ms_bf16[] = { 1, 4, 8, 16 };
			const uint64_t *ms = kind ? ms_bf16 : ms_fp4;
			for (size_t mi = 0; mi < (kind ? ARRAY_SIZE(ms_bf16) : (size_t)nm_fp4); mi++) {
				uint64_t m = ms[mi];
				if (isa == CAPY_ISA_SCALAR && m > 1)
					continue;
				for (int ti = 0; ti < nthr; ti++)
					for (int split = 0; split < 2; split++) {
						int t = (int)threads[ti];
						struct run r;
						/* One thread: the two splits are the same run. */
						if (t == 1 ? split : !(splits >> split & 1))
							continue;
						size_t n = kind ? nbf : 2 * nexp;
						if (isa == CAPY_ISA_SCALAR)
							n = kind ? 4 : 16; /* slow; cache effects do not matter */
						setup_run(&r, kind ? bmats : emats, n, kind ? 1 : 2, m, t, x);
						r.split_units = split;
						double s = best_pass(pool[ti], &r, quick || isa == CAPY_ISA_SCALAR ? 1 : 3, &bw);
						double gbs = (double)total_bytes(&r) / s / 1e9;
						printf("| %s | %" PRIu64 " | %s | %d | %s | %.2f | %.2f | %.0f %% | %.1f |\n",
						       kind ? "BF16 [2048,2048]" : "NVFP4 expert", m,
						       capy_isa_name((enum capy_isa)isa), t, split ? "experts" : "rows",
						       gbs, bw, 100 * gbs / bw, s / (double)n * 1e6);
						fflush(stdout);
						free_run(&r);
					}
			}
		}
	}

	}

	/* Weights in L2: the compute rate alone. */
	if (!only || !strcmp(only, "hot")) {
	uint8_t *hot = xalloc(8 * 81920 + 2 * 64 * 2048 * 2);
	struct mat hmats[10];
	uint64_t hp = 64;
	for (int i = 0; i < 8; i++)
		nvfp4_record(hot + i * 81920, 64, 2048, 1, &hp, &hmats[i]);
	for (int i = 0; i < 2; i++)
		plain_matrix(hot + 8 * 81920 + i * 64 * 2048 * 2, 64, 2048, CAPY_DT_BF16, &hmats[8 + i]);
	printf("\n| weights in L2 | m | ISA | GB/s | ns per 128 weights x row |\n|---|---|---|---|---|\n");
	for (int isa = isa_hi; isa >= isa_lo; isa--) {
		const uint64_t *ms = ms_fp4;
		capy_isa_set((enum capy_isa)isa);
		for (int kind = 0; kind < 2; kind++)
			for (size_t mi = 0; mi < (kind ? 1 : (size_t)nm_fp4); mi++) {
				struct mat *hm = hmats + (kind ? 8 : 0);
				int nm = kind ? 2 : 8, reps = quick ? 20 : 200;
				struct capy_linear_input *in[8];
				uint8_t *ws = xalloc(8 * capy_linear_input_bytes(&hm[0].w, ms[mi]));
				float *y = xalloc(64 * ms[mi] * sizeof(float));
				double s = 1e30;
				/* Prepared once: only the rows are timed. */
				for (int i = 0; i < nm; i++)
					capy_linear_prepare(&hm[i].w, x, ms[mi],
							    ws + i * capy_linear_input_bytes(&hm[0].w, ms[mi]), &in[i]);
				for (int rep = 0; rep <= reps; rep++) {
					double t = now();
					for (int i = 0; i < nm; i++)
						capy_linear_rows(&hm[i].w, in[i], y, 0, 64);
					if (rep)
						s = fmin(s, now() - t);
				}
				printf("| %s | %" PRIu64 " | %s | %.2f | %.2f |\n",
				       kind ? "BF16 [64,2048]" : "NVFP4 [64,2048]", ms[mi],
				       capy_isa_name((enum capy_isa)isa),
				       (double)hm[0].bytes * nm / s / 1e9,
				       s * 1e9 / ((double)nm * 64 * 16 * (double)ms[mi]));
				fflush(stdout);
				free(ws);
				free(y);
			}
	}
	free(hot);
	}

	/* Prefill-like: in-cache sets, compute-bound. */
	if (!only || !strcmp(only, "prefill")) {
	printf("\n| kernel | m | ISA | threads | GFLOP/s |\n|---|---|---|---|---|\n");
	for (int isa = isa_hi; isa >= CAPY_MAX(isa_lo, CAPY_ISA_AVX2); isa--) {
		capy_isa_set((enum capy_isa)isa);
		static const uint64_t ms[] = { 64, 512 };
		for (size_t mi = 0; mi < ARRAY_SIZE(ms); mi++)
			for (int kind = 0; kind < 2; kind++)
				for (int ti = 0; ti < nthr; ti++) {
					int t = (int)threads[ti];
					struct run r;
					setup_run(&r, kind ? bmats : emats, kind ? 2 : 4, 1, ms[mi], t, x);
					double s = best_pass(pool[ti], &r, quick ? 1 : 2, &bw);
					printf("| %s | %" PRIu64 " | %s | %d | %.1f |\n",
					       kind ? "BF16 [2048,2048]" : "NVFP4 [1024,2048]+[2048,512]", ms[mi],
					       capy_isa_name((enum capy_isa)isa), t, flops(&r) / s / 1e9);
					fflush(stdout);
					free_run(&r);
				}
	}

	}

	/* Activation preparation alone (it runs once per matrix, on one thread). */
	if (!only || !strcmp(only, "prepare")) {
	printf("\n| prepare | ISA | us |\n|---|---|---|\n");
	for (int isa = isa_hi; isa >= isa_lo; isa--) {
		static const uint64_t ks[] = { 2048, 512 };
		capy_isa_set((enum capy_isa)isa);
		for (size_t ki = 0; ki < 2; ki++) {
			struct capy_linear *w = &emats[ki].w;
			void *ws = xalloc(capy_linear_input_bytes(w, 1));
			struct capy_linear_input *in;
			int reps = 2000;
			double t = now();
			for (int i = 0; i < reps; i++)
				capy_linear_prepare(w, x, 1, ws, &in);
			t = now() - t;
			printf("| m=1, k=%" PRIu64 " | %s | %.2f |\n", ks[ki], capy_isa_name((enum capy_isa)isa),
			       t / reps * 1e6);
			free(ws);
		}
	}
	}
	capy_isa_set(capy_isa_best());
	for (int ti = 0; ti < nthr; ti++)
		capy_pool_free(pool[ti]);
	free((void *)bw_job.buf);
	free(experts);
	free(emats);
	free(bf);
	free(bmats);
	free(x);
	return 0;
}
