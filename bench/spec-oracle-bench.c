/* spec-oracle-bench.c - the speculative-decoding machinery with controlled drafts (issue 13,
 * item 7): random weights make a real drafter's acceptance near zero, so an oracle replays a
 * plain greedy run's own tokens as drafts, every one right (acceptance 100 %) or with drafts
 * spoiled to hold the acceptance at 75, 50 or 25 %; decode with windows against plain decode.
 *
 *	spec-oracle-bench MODEL.capy [--tokens N] [--prompt P] [--drafts 1,2,3,4]
 *	                  [--accept 100,75,50,25] [--threads T] [--device cpu|cuda]
 *
 * Plain decode first (twice; the second is timed): P prompt tokens (fixed pseudo-random ids),
 * then N greedy tokens one step each; those N ids are the oracle. Then, for each K and acceptance a, the same prompt
 * on a fresh sequence and windows of K drafts taken from the oracle (capy_spec_window with a
 * greedy sampler): window w's drafts are right up to the j-th, where j keeps the accepted
 * drafts at a of those drafted so far (j = round(a x drafted) - accepted, 0..K), the (j+1)-th
 * is spoiled (another id), so the target rejects it and gives its own token. The ids must come
 * out as the plain run's: greedy verification changes no token (checked; exit 1 if not).
 * Printed per (K, a): decode tokens per second and against plain decode, tokens per window,
 * the measured acceptance, a window's time against a one-token step, and the cut-back time
 * (capy_seq_truncate of the rejected positions) per window. */
#include "core.h"
#include "engine/engine.h"
#include "sample/sample.h"
#include "spec/spec.h"
#include "util/parse.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, const struct capy_err *err)
{
	fprintf(stderr, "spec-oracle-bench: %s: %s\n", what, err->msg);
	exit(1);
}

static void usage(void)
{
	fprintf(stderr, "usage: spec-oracle-bench MODEL.capy [--tokens N] [--prompt P] [--drafts 1,2,3,4] "
			"[--accept 100,75,50,25] [--threads T] [--device cpu|cuda]\n");
	exit(2);
}

static uint64_t arg(const char *s, uint64_t max)
{
	struct capy_err err = { 0 };
	uint64_t v;

	if (capy_parse_u64(s, max, &v, &err) < 0)
		usage();
	return v;
}

/* A comma list of up to 8 numbers, each at most max. */
static int list(const char *s, uint64_t max, uint64_t *out)
{
	int n = 0;
	char buf[128];

	snprintf(buf, sizeof(buf), "%s", s);
	for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && n < 8; t = strtok_r(NULL, ",", &save))
		out[n++] = arg(t, max);
	if (!n)
		usage();
	return n;
}

int main(int argc, char **argv)
{
	uint64_t N = 256, P = 32, threads = 0, Ks[8] = { 1, 2, 3, 4 }, As[8] = { 100, 75, 50, 25 };
	int nk = 4, na = 4;
	const char *model = NULL, *device = "cpu";
	struct capy_artifact *a;
	struct capy_engine *e;
	struct capy_sampler *smp;
	struct capy_err err = { 0 };

	for (int i = 1; i < argc; i++) {
		if (i + 1 < argc && !strcmp(argv[i], "--tokens"))
			N = arg(argv[++i], 1u << 16);
		else if (i + 1 < argc && !strcmp(argv[i], "--prompt"))
			P = arg(argv[++i], 1u << 16);
		else if (i + 1 < argc && !strcmp(argv[i], "--drafts"))
			nk = list(argv[++i], 16, Ks);
		else if (i + 1 < argc && !strcmp(argv[i], "--accept"))
			na = list(argv[++i], 100, As);
		else if (i + 1 < argc && !strcmp(argv[i], "--threads"))
			threads = arg(argv[++i], 1024);
		else if (i + 1 < argc && !strcmp(argv[i], "--device"))
			device = argv[++i];
		else if (!model && argv[i][0] != '-')
			model = argv[i];
		else
			usage();
	}
	if (!model || !N || !P)
		usage();
	for (int i = 0; i < nk; i++)
		if (!Ks[i])
			usage();
	if (capy_artifact_open(&a, model, &err) < 0)
		die(model, &err);
	if (capy_engine_new(&e, a, &(struct capy_engine_opts){ .threads = (int)threads, .device = device }, &err) < 0)
		die("engine", &err);
	const uint64_t V = capy_engine_config(e)->vocab_size;
	uint64_t kmax = 1;
	for (int i = 0; i < nk; i++)
		kmax = CAPY_MAX(kmax, Ks[i]);
	if (kmax + 1 > capy_engine_step_tokens(e)) {
		fprintf(stderr, "spec-oracle-bench: %" PRIu64 " drafts do not fit a step\n", kmax);
		return 2;
	}
	int32_t *prompt = malloc(P * sizeof(int32_t)), *oracle = malloc((N + kmax + 1) * sizeof(int32_t));
	int32_t *got = malloc((N + kmax + 1) * sizeof(int32_t)), drafts[17], out[17];
	float *rows = malloc((kmax + 1) * V * sizeof(float));
	struct capy_seq *s;

	if (!prompt || !oracle || !got || !rows)
		die("memory", &(struct capy_err){ .msg = "out of memory" });
	if (capy_sampler_new(&smp, V, &(struct capy_sampler_params){ .temperature = 0 }, &err) < 0)
		die("sampler", &err);
	for (uint64_t i = 0; i < P; i++)
		prompt[i] = (int32_t)((i * 2654435761u + 17) % V);

	/* plain decode, twice (the first warms up the threads, pages and caches): the oracle and
	 * the time of a one-token step */
	double plain = 0;
	for (int round = 0; round < 2; round++) {
		if (capy_seq_new(e, &s, &err) < 0 || capy_engine_forward(e, s, prompt, P, rows, false, &err) < 0)
			die("prompt", &err);
		oracle[0] = capy_sampler_next(smp, rows);
		const double t0 = now();
		for (uint64_t i = 0; i + 1 < N; i++) {
			if (capy_engine_forward(e, s, &oracle[i], 1, rows, false, &err) < 0)
				die("decode", &err);
			oracle[i + 1] = capy_sampler_next(smp, rows);
		}
		plain = (now() - t0) / (double)(N - 1);
		capy_seq_free(s);
	}
	for (uint64_t i = N; i < N + kmax + 1; i++)
		oracle[i] = (oracle[i - 1] + 1) % (int32_t)V; /* past the end: never reached right */
	printf("# spec-oracle-bench %s on %s: prompt %" PRIu64 ", %" PRIu64 " greedy tokens; plain decode %.3f ms a token "
	       "(%.1f tok/s)\n",
	       model, device, P, N, 1e3 * plain, 1.0 / plain);
	printf("| drafts K | acceptance asked | measured | tokens per window | tok/s | vs plain | window / 1-token step | cut "
	       "per window |\n|---|---|---|---|---|---|---|---|\n");
	for (int ki = 0; ki < nk; ki++)
		for (int ai = 0; ai < na; ai++) {
			const uint64_t K = Ks[ki];
			const double acc = (double)As[ai] / 100.0;
			struct capy_spec_stats st = { 0 };
			uint64_t have = 1, drafted = 0, accepted = 0;
			if (capy_seq_new(e, &s, &err) < 0 || capy_engine_forward(e, s, prompt, P, rows, false, &err) < 0)
				die("prompt", &err);
			got[0] = oracle[0];
			const double t1 = now();
			while (have < N) {
				/* next = got[have - 1], not yet run; the drafts guess got[have ..] */
				int64_t j = llround(acc * (double)(drafted + K)) - (int64_t)accepted;
				j = j < 0 ? 0 : j > (int64_t)K ? (int64_t)K : j;
				for (uint64_t d = 0; d < K; d++)
					drafts[d] = oracle[have + d];
				if ((uint64_t)j < K)
					drafts[j] = (oracle[have + (uint64_t)j] + 1) % (int32_t)V; /* spoiled */
				uint64_t m;
				if (capy_spec_window(e, s, smp, got[have - 1], drafts, K, rows, out, &m, &st, &err) < 0)
					die("window", &err);
				drafted += K;
				accepted += m - 1;
				for (uint64_t i = 0; i < m && have < N + kmax; i++)
					got[have++] = out[i];
			}
			const double dt = now() - t1;
			capy_seq_free(s);
			for (uint64_t i = 0; i < N; i++)
				if (got[i] != oracle[i]) {
					fprintf(stderr,
						"spec-oracle-bench: K %" PRIu64 ", acceptance %" PRIu64 " %%: token %" PRIu64
						" is %d, the plain run's %d\n",
						K, As[ai], i, got[i], oracle[i]);
					return 1;
				}
			const double tps = (double)(have - 1) / dt;
			printf("| %" PRIu64 " | %" PRIu64 " %% | %.1f %% | %.2f | %.1f | %.2fx | %.2f | %.1f us |\n", K, As[ai],
			       100.0 * (double)st.accepted / (double)(st.drafted ? st.drafted : 1),
			       (double)st.tokens / (double)(st.windows ? st.windows : 1), tps, tps * plain,
			       st.seconds / (double)(st.windows ? st.windows : 1) / plain,
			       1e6 * st.cut_seconds / (double)(st.windows ? st.windows : 1));
			fflush(stdout);
		}
	capy_sampler_free(smp);
	free(prompt);
	free(oracle);
	free(got);
	free(rows);
	capy_engine_free(e);
	capy_artifact_close(a);
	return 0;
}
