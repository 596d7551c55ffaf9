/* tp-rounding-bench.c - the double-rounding table of tensor parallelism (issue 14, item 3;
 * docs/tp.md): on the row-parallel layers of Flash-Next's shape, how often each all-reduce
 * payload (libcore/tp/tp.h) leaves an output element far from the exact sum, against one rank.
 *
 *	tp-rounding-bench [--rows N] [--ranks N] [--seed S]
 *
 * Per layer: BF16 weights W [n][k] (normal, 1/sqrt(k)) and activation rows x [k] (normal, with
 * a few channels 20x larger, as real activations have), exact = the sum in double. One rank
 * computes each output element as one fp32 dot product over k, and either keeps it (fp32) or
 * rounds it once to bf16 (an engine whose activations are bf16); N ranks compute each its
 * contiguous k / N slice's dot product in fp32 and reduce them with each payload. The routed
 * experts' combine is a layer of its own: a token's 10 experts (weighted outputs, as the
 * combine adds them) each on a random rank, as routing by expert id puts them. Reported per layer and payload: the
 * share of elements whose error exceeds 1e-3, 1e-2 and 1e-1 of the element's exact value, the
 * largest such relative error, and the rms error against the rms output. */
#include "core.h"
#include "quant/floats.h"
#include "tp/tp.h"
#include "util/rng.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct layer {
	const char *name;
	uint64_t k, n;
	bool combine; /* the routed experts' weighted sum: k = experts a token adds */
};

/* Flash-Next: 16 heads x 256, 32 GDN value heads x 128, hidden 2560, expert and shared
 * intermediate 512, top-10 experts. */
static const struct layer layers[] = {
	{ "attention o_proj", 4096, 2560, false },
	{ "GDN out_proj", 4096, 2560, false },
	{ "shared expert down", 512, 2560, false },
	{ "routed combine (10 experts)", 10, 2560, true },
};

enum { V_TP1_FP32, V_TP1_BF16, V_FP32, V_FP16S, V_BF16, NV };
static const char *const vnames[NV] = { "1 rank, fp32", "1 rank, bf16 once", "N ranks, fp32", "N ranks, fp16-shift",
					"N ranks, bf16" };

struct tally {
	uint64_t n, over[3];
	double max_rel, se, so;
};

static void count(struct tally *t, double got, double exact)
{
	const double err = fabs(got - exact), rel = exact != 0 ? err / fabs(exact) : (err ? INFINITY : 0);

	t->n++;
	t->over[0] += rel > 1e-3;
	t->over[1] += rel > 1e-2;
	t->over[2] += rel > 1e-1;
	if (rel > t->max_rel)
		t->max_rel = rel;
	t->se += err * err;
	t->so += exact * exact;
}

int main(int argc, char **argv)
{
	uint64_t rows = 64, seed = 1;
	int ranks = 2;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--rows") && i + 1 < argc)
			rows = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--ranks") && i + 1 < argc)
			ranks = (int)strtol(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
			seed = strtoull(argv[++i], NULL, 10);
		else {
			fprintf(stderr, "usage: tp-rounding-bench [--rows N] [--ranks N] [--seed S]\n");
			return 2;
		}
	}
	if (ranks < 2 || ranks > CAPY_TP_MAX_RANKS || !rows) {
		fprintf(stderr, "tp-rounding-bench: --ranks 2..%d, --rows at least 1\n", CAPY_TP_MAX_RANKS);
		return 2;
	}
	printf("# tp-rounding-bench: %d ranks, %" PRIu64 " rows a layer, seed %" PRIu64 "\n", ranks, rows, seed);
	printf("| layer (k -> n) | payload | rel. err > 1e-3 | > 1e-2 | > 1e-1 | largest | rms err / rms |\n");
	printf("|---|---|---|---|---|---|---|\n");
	for (size_t li = 0; li < sizeof(layers) / sizeof(layers[0]); li++) {
		const struct layer *L = &layers[li];
		const uint64_t k = L->k, n = L->n;
		float *w = malloc(n * k * sizeof(float)), *x = malloc(k * sizeof(float));
		float *part[CAPY_TP_MAX_RANKS], *out = malloc(n * sizeof(float));
		double *exact = malloc(n * sizeof(double));
		struct tally t[NV];
		struct capy_rng g;

		memset(t, 0, sizeof(t));
		capy_rng_seed(&g, seed * 1000 + li);
		for (int r = 0; r < ranks; r++)
			part[r] = malloc(n * sizeof(float));
		if (!L->combine)
			for (uint64_t i = 0; i < n * k; i++) /* bf16 weights */
				w[i] = capy_bf16_to_f32(capy_f32_to_bf16((float)(capy_rng_normal(&g) / sqrt((double)k))));
		for (uint64_t row = 0; row < rows; row++) {
			if (L->combine) {
				/* w[j][i]: expert j's output element i (expert outputs of rms ~0.1), x[j]
				 * its routing weight (softmax-like, summing to ~1) */
				for (uint64_t i = 0; i < n * k; i++)
					w[i] = (float)(0.1 * capy_rng_normal(&g));
				double sum = 0;
				for (uint64_t j = 0; j < k; j++)
					sum += x[j] = (float)exp(capy_rng_normal(&g));
				for (uint64_t j = 0; j < k; j++)
					x[j] = (float)(x[j] / sum);
			} else {
				for (uint64_t j = 0; j < k; j++)
					x[j] = (float)(capy_rng_normal(&g) * (j % 97 == 5 ? 20.0 : 1.0));
			}
			/* which rank adds term j: the linears' contiguous k / N slices; a token's
			 * experts by id, which is random against the order they are added in */
			int rank_of[4096];
			for (uint64_t j = 0; j < k; j++)
				rank_of[j] = L->combine ? (int)(capy_rng_next(&g) % (uint64_t)ranks)
							: CAPY_MIN((int)(j / (k / (uint64_t)ranks)), ranks - 1);
			/* the combine's w is [experts][n]; the linears' [n][k] */
			for (uint64_t i = 0; i < n; i++) {
				double e = 0;
				float one = 0;
				for (int r = 0; r < ranks; r++)
					part[r][i] = 0;
				for (uint64_t j = 0; j < k; j++) {
					const float wv = L->combine ? w[j * n + i] : w[i * k + j];
					const float prod = wv * x[j];
					e += (double)wv * x[j];
					one += prod;
					part[rank_of[j]][i] += prod;
				}
				exact[i] = e;
				count(&t[V_TP1_FP32], one, e);
				count(&t[V_TP1_BF16], capy_bf16_to_f32(capy_f32_to_bf16(one)), e);
			}
			static const int vp[3] = { V_FP32, V_FP16S, V_BF16 };
			static const enum capy_tp_payload pl[3] = { CAPY_TP_FP32, CAPY_TP_FP16_SHIFT, CAPY_TP_BF16 };
			for (int v = 0; v < 3; v++) {
				capy_tp_reduce_row(pl[v], (const float *const *)part, ranks, n, out);
				for (uint64_t i = 0; i < n; i++)
					count(&t[vp[v]], out[i], exact[i]);
			}
		}
		for (int v = 0; v < NV; v++)
			printf("| %s (%" PRIu64 " -> %" PRIu64 ") | %s | %.4f %% | %.4f %% | %.4f %% | %.3g | %.3g |\n", L->name, k, n,
			       vnames[v], 100.0 * (double)t[v].over[0] / (double)t[v].n,
			       100.0 * (double)t[v].over[1] / (double)t[v].n, 100.0 * (double)t[v].over[2] / (double)t[v].n,
			       t[v].max_rel, sqrt(t[v].se / t[v].so));
		for (int r = 0; r < ranks; r++)
			free(part[r]);
		free(w);
		free(x);
		free(out);
		free(exact);
	}
	return 0;
}
