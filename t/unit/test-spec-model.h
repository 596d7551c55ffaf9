/* test-spec-model.h - the speculative acceptance rule's output distribution on a real model's
 * rows (after test.h and test-fixture.h), for the CPU's unit test (t/unit/u-spec.c) and the
 * GPU's (t/cuda/u-cuda-model.c): the rule is the host's, the rows come from the engine the
 * options open. */
#ifndef CAPY_TEST_SPEC_MODEL_H
#define CAPY_TEST_SPEC_MODEL_H

#include "engine/engine.h"
#include "sample/sample.h"
#include "spec/spec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The chi-square quantile a correct rule exceeds with probability about 3e-7 (z = 5, the
 * Wilson-Hilferty approximation). */
static inline double chi_bound(int df)
{
	double a = 2.0 / (9.0 * df), c = 1 - a + 5 * sqrt(a);

	return df * c * c * c;
}

/* The rule on a real model's rows: capy-tiny after a fixed prompt, drafts that are each row's
 * second most likely token (so both acceptance and rejection are common), the rows from one
 * keep_states window; 6,000 seeds at temperature 1, top-k 8, against the exact outcome
 * probabilities (24 outcomes; those expected fewer than 10 times pooled in one bin). */
static inline int rank_of(const float *l, uint64_t n, int r)
{
	int best[2] = { -1, -1 };

	for (uint64_t i = 0; i < n; i++) {
		if (best[0] < 0 || l[i] > l[best[0]]) {
			best[1] = best[0];
			best[0] = (int)i;
		} else if (best[1] < 0 || l[i] > l[best[1]]) {
			best[1] = (int)i;
		}
	}
	return best[r];
}

/* softmax over the top 8 of l[n] into p[n] (0 elsewhere); ties do not occur in these rows. */
static inline void top8_p(const float *l, uint64_t n, double *p)
{
	float th;
	float top[8];
	double sum = 0;

	for (int i = 0; i < 8; i++)
		top[i] = -INFINITY;
	for (uint64_t i = 0; i < n; i++) {
		if (l[i] <= top[7])
			continue;
		int j = 7;
		while (j > 0 && top[j - 1] < l[i]) {
			top[j] = top[j - 1];
			j--;
		}
		top[j] = l[i];
	}
	th = top[7];
	for (uint64_t i = 0; i < n; i++)
		sum += p[i] = l[i] >= th ? exp((double)(l[i] - top[0])) : 0;
	for (uint64_t i = 0; i < n; i++)
		p[i] /= sum;
}

static inline void test_spec_accept_on_model(const struct capy_engine_opts *opts)
{
	struct capy_artifact *a = test_open_fixture("share/models/capy-tiny");
	struct capy_engine *e;
	struct capy_seq *s, *f;
	struct capy_err err = { 0 };
	int32_t prompt[] = { 73, 2053, 7, 16, 11, 340, 2000, 400 }, d[2];
	const int N = 6000;

	if (!a)
		return;
	CHECK_EQ_INT(capy_engine_new(&e, a, opts, &err), 0);
	uint64_t Vv = capy_engine_config(e)->vocab_size;
	float *rows = malloc(3 * Vv * sizeof(float)), *work = malloc(3 * Vv * sizeof(float));
	double *p = malloc(3 * Vv * sizeof(double));
	int *count = calloc(3 * Vv, sizeof(int));
	CHECK_EQ_INT(capy_seq_new(e, &s, &err), 0);
	CHECK_EQ_INT(capy_engine_forward(e, s, prompt, 7, rows, false, &err), 0);
	/* The drafts: each the second choice of the row it is verified against. */
	CHECK_EQ_INT(capy_seq_fork(s, &f, &err), 0);
	CHECK_EQ_INT(capy_engine_step(e, &(struct capy_step_item){ .seq = f, .tokens = &prompt[7], .n = 1, .logits = rows },
				      1, &err), 0);
	d[0] = rank_of(rows, Vv, 1);
	CHECK_EQ_INT(capy_engine_step(e, &(struct capy_step_item){ .seq = f, .tokens = &d[0], .n = 1, .logits = rows }, 1,
				      &err), 0);
	d[1] = rank_of(rows, Vv, 1);
	capy_seq_free(f);
	CHECK_EQ_INT(capy_engine_step(e, &(struct capy_step_item){ .seq = s, .tokens = (int32_t[]){ prompt[7], d[0], d[1] },
				      .n = 3, .logits = rows, .all_logits = true, .keep_states = true }, 1, &err), 0);
	for (int i = 0; i < 3; i++)
		top8_p(rows + i * Vv, Vv, p + i * Vv);
	for (int seed = 0; seed < N; seed++) {
		struct capy_sampler *smp;
		int32_t out[3];
		memcpy(work, rows, 3 * Vv * sizeof(float));
		if (capy_sampler_new(&smp, Vv, &(struct capy_sampler_params){ .temperature = 1, .top_k = 8,
				     .seed = (uint64_t)seed + 1000 }, &err) < 0)
			break;
		uint64_t m = capy_spec_accept(smp, work, Vv, d, 2, out);
		count[(m - 1) * Vv + (uint64_t)out[m - 1]]++;
		capy_sampler_free(smp);
	}
	double chi = 0, pd0 = p[d[0]], pd1 = p[Vv + d[1]], pool_want = 0;
	int df = -1, impossible = 0, pool_got = 0;
	for (uint64_t x = 0; x < Vv; x++) {
		double ex[3] = { x == (uint64_t)d[0] ? 0 : p[x], x == (uint64_t)d[1] ? 0 : pd0 * p[Vv + x],
				 pd0 * pd1 * p[2 * Vv + x] };
		for (int j = 0; j < 3; j++) {
			double want = ex[j] * N;
			int got = count[(uint64_t)j * Vv + x];
			if (want == 0) {
				impossible += got;
			} else if (want < 10) {
				pool_want += want;
				pool_got += got;
			} else {
				chi += (got - want) * (got - want) / want;
				df++;
			}
		}
	}
	if (pool_want > 0) {
		chi += (pool_got - pool_want) * (pool_got - pool_want) / pool_want;
		df++;
	}
	CHECK_EQ_INT(impossible, 0);
	CHECK_MSG(df >= 8 && chi < chi_bound(df), "chi-square %.1f over %d df, bound %.1f (p(d) %.3f, %.3f)", chi, df,
		  chi_bound(df), pd0, pd1);
	printf("acceptance rule on capy-tiny's rows (%s, %d seeds): chi-square %.1f over %d df, bound %.1f; p(d) %.3f, %.3f\n",
	       opts->device ? opts->device : "cpu", N, chi, df, chi_bound(df), pd0, pd1);
	capy_seq_free(s);
	free(rows);
	free(work);
	free(p);
	free(count);
	capy_engine_free(e);
	capy_artifact_close(a);
}

#endif
