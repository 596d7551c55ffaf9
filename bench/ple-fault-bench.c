/* ple-fault-bench.c - the host's part of a PLE decode step (qwen4_exp): the n-gram rows of
 * one token per PLE layer hashed and read from the mapped artifact, as the engines gather
 * them (libcore/backend/cuda/forward.c ple_rows, one thread for a decode row), with the
 * tables' pages faulted in as rows first touch them, or touched once before (--touch:
 * capy_weights_touch_ple, as the CUDA backend does at open, timed apart). Random tokens:
 * each step's rows land on new pages, as real text's n-grams mostly do early in a run.
 *
 *	ple-fault-bench MODEL.capy [--steps N] [--touch] [--seed S]
 *
 * Prints the microseconds a step (all PLE layers' rows of one token), the median over the
 * steps and the mean, and the touch's own time. docs/perf.md, "The host's PLE gather". */
#include "core.h"
#include "model/config.h"
#include "model/weights.h"
#include "util/rng.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	struct capy_err err = { 0 };
	struct capy_artifact *a = NULL;
	struct capy_model_config c;
	struct capy_weights w = { 0 };
	uint64_t steps = 200, seed = 1;
	bool touch = false;
	const char *path = NULL;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--steps") && i + 1 < argc)
			steps = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
			seed = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--touch"))
			touch = true;
		else if (argv[i][0] != '-' && !path)
			path = argv[i];
		else {
			fprintf(stderr, "usage: ple-fault-bench MODEL.capy [--steps N] [--touch] [--seed S]\n");
			return 2;
		}
	}
	if (!path || !steps) {
		fprintf(stderr, "usage: ple-fault-bench MODEL.capy [--steps N] [--touch] [--seed S]\n");
		return 2;
	}
	if (capy_artifact_open(&a, path, &err) < 0 || capy_model_config_parse(&c, a->family, a->config, path, &err) < 0 ||
	    capy_weights_bind(&w, a, &c, &err) < 0) {
		fprintf(stderr, "ple-fault-bench: %s\n", err.msg);
		return 1;
	}
	if (!w.n_ple) {
		fprintf(stderr, "ple-fault-bench: %s: the model has no PLE layers\n", path);
		return 1;
	}
	const uint64_t ctx = c.ngram_size - 1, heads = ctx * c.heads_per_ngram;
	double t0 = now_us(), touch_us = 0;
	uint64_t pages = touch ? capy_weights_touch_ple(&w, &c) : 0;
	touch_us = now_us() - t0;

	struct capy_rng rng;
	capy_rng_seed(&rng, seed);
	int32_t *hist = calloc(ctx + 1, sizeof(*hist));
	float *row = malloc(c.ple_embed_dim * sizeof(*row));
	double *t = malloc(steps * sizeof(*t)), sum = 0, check = 0;
	uint64_t rows[64];
	size_t row_bytes = 0;
	if (!hist || !row || !t) {
		fprintf(stderr, "ple-fault-bench: out of memory\n");
		return 1;
	}
	for (uint64_t s = 0; s < steps; s++) {
		for (uint64_t q = 0; q <= ctx; q++)
			hist[q] = (int32_t)(capy_rng_next(&rng) % c.vocab_size);
		const double ts = now_us();
		for (uint64_t i = 0; i < c.n_layers; i++) {
			const struct capy_ple_w *pl = &w.layers[i].ple;
			if (!w.layers[i].has_ple)
				continue;
			capy_ple_ngram_rows(&c, pl, hist, ctx, rows);
			for (uint64_t h = 0; h < heads; h++)
				capy_ple_row(pl, rows[h], row + h * pl->hd);
			row_bytes = pl->hd * capy_dtype_size(pl->table_dtype);
			check += row[0];
		}
		t[s] = now_us() - ts;
		sum += t[s];
	}
	qsort(t, steps, sizeof(*t), cmp_double);
	printf("%s: %" PRIu64 " PLE layers x %" PRIu64 " rows of %zu bytes a token; touch %s (%" PRIu64 " pages, %.0f ms); "
	       "a step: median %.1f us, mean %.1f us (check %g)\n",
	       path, (uint64_t)w.n_ple, heads, row_bytes, touch ? "on" : "off", pages, touch_us / 1e3, t[steps / 2],
	       sum / (double)steps, check);
	free(hist);
	free(row);
	free(t);
	capy_weights_release(&w);
	capy_artifact_close(a);
	return 0;
}
