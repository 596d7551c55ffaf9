/* spec-bench.c - what a speculative window costs on one model, against a one-token step.
 *
 *	spec-bench MODEL.capy [--drafts K] [--prompt P] [--reps R] [--threads T]
 *
 * After a prompt of P tokens (default 64), each of R repetitions (default 20) times, on a
 * sequence of the same length: a one-token step; a window of K + 1 tokens with keep_states
 * and all logits (what capy_spec_window runs); the same tokens without keep_states (the GDN
 * layers then run their chunked form and keep nothing: the price of keeping states and of the
 * recurrent form together); and the cut back to one token (capy_seq_truncate: the attention
 * pages dropped, a kept state copied in). Medians, one line each on stdout. */
#include "core.h"
#include "engine/engine.h"
#include "util/parse.h"

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

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp);
	return v[n / 2];
}

static void die(const char *what, const struct capy_err *err)
{
	fprintf(stderr, "spec-bench: %s: %s\n", what, err->msg);
	exit(1);
}

static uint64_t arg(const char *s, const char *name)
{
	struct capy_err err = { 0 };
	uint64_t v;

	if (capy_parse_u64(s, 1u << 20, &v, &err) < 0 || !v) {
		fprintf(stderr, "spec-bench: %s: '%s' is not a positive integer\n", name, s);
		exit(2);
	}
	return v;
}

int main(int argc, char **argv)
{
	uint64_t K = 4, P = 64, R = 20, threads = 0;
	struct capy_artifact *a;
	struct capy_engine *e;
	struct capy_err err = { 0 };
	const char *model = NULL;

	for (int i = 1; i < argc; i++) {
		if (i + 1 < argc && !strcmp(argv[i], "--drafts"))
			K = arg(argv[++i], "--drafts");
		else if (i + 1 < argc && !strcmp(argv[i], "--prompt"))
			P = arg(argv[++i], "--prompt");
		else if (i + 1 < argc && !strcmp(argv[i], "--reps"))
			R = arg(argv[++i], "--reps");
		else if (i + 1 < argc && !strcmp(argv[i], "--threads"))
			threads = arg(argv[++i], "--threads");
		else if (!model && argv[i][0] != '-')
			model = argv[i];
		else {
			fprintf(stderr, "usage: spec-bench MODEL.capy [--drafts K] [--prompt P] [--reps R] [--threads T]\n");
			return 2;
		}
	}
	if (!model || R > 1000 || K > 63) {
		fprintf(stderr, "usage: spec-bench MODEL.capy [--drafts K] [--prompt P] [--reps R] [--threads T]\n");
		return 2;
	}
	if (capy_artifact_open(&a, model, &err) < 0)
		die(model, &err);
	if (capy_engine_new(&e, a, &(struct capy_engine_opts){ .threads = (int)threads }, &err) < 0)
		die("engine", &err);
	uint64_t V = capy_engine_config(e)->vocab_size;
	float *rows = malloc((K + 1) * V * sizeof(float));
	int32_t *ids = malloc((P + K + 1) * sizeof(int32_t));
	double *one = calloc(R, sizeof(double)), *keep = calloc(R, sizeof(double)), *plain = calloc(R, sizeof(double));
	double *cut = calloc(R, sizeof(double));
	struct capy_seq *s;

	if (!rows || !ids || !one || !keep || !plain || !cut) {
		fprintf(stderr, "spec-bench: out of memory\n");
		return 1;
	}
	for (uint64_t i = 0; i < P + K + 1; i++)
		ids[i] = (int32_t)((i * 2654435761u + 17) % V);
	for (uint64_t r = 0; r < R + 1; r++) { /* the first round warms up */
		struct capy_step_item w = { .tokens = ids + P, .n = K + 1, .logits = rows, .all_logits = true };
		double t[7];
		/* Each measurement on a fresh sequence after the same prompt (untimed). */
		for (int m = 0; m < 3; m++) {
			if (capy_seq_new(e, &s, &err) < 0 || capy_engine_forward(e, s, ids, P, rows, false, &err) < 0)
				die("prompt", &err);
			w.seq = s;
			w.keep_states = m == 1;
			w.n = m ? K + 1 : 1;
			t[2 * m] = now();
			if (capy_engine_step(e, &w, 1, &err) < 0)
				die("step", &err);
			t[2 * m + 1] = now();
			if (m == 1) {
				if (capy_seq_truncate(s, P + 1, &err) < 0)
					die("cut", &err);
				t[6] = now();
			}
			capy_seq_free(s);
		}
		if (!r)
			continue;
		one[r - 1] = t[1] - t[0];
		keep[r - 1] = t[3] - t[2];
		cut[r - 1] = t[6] - t[3];
		plain[r - 1] = t[5] - t[4];
	}
	printf("one-token step              %8.3f ms\n", 1e3 * median(one, (int)R));
	printf("window of %2" PRIu64 " (keep_states)    %8.3f ms\n", K + 1, 1e3 * median(keep, (int)R));
	printf("window of %2" PRIu64 " (no states)      %8.3f ms\n", K + 1, 1e3 * median(plain, (int)R));
	printf("cut back to 1 token         %8.3f ms (recurrent state %" PRIu64 " bytes)\n", 1e3 * median(cut, (int)R),
	       capy_engine_state_bytes(e));
	free(rows);
	free(ids);
	free(one);
	free(keep);
	free(plain);
	free(cut);
	capy_engine_free(e);
	capy_artifact_close(a);
	return 0;
}
