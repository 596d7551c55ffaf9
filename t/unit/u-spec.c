/* u-spec.c - speculative decoding: the n-gram drafter against a brute-force search, the
 * acceptance rule's output distribution (chi-square over many seeds, with a wrong rule
 * shown to fail the same test), reproducibility, and the engine's verification steps: a
 * step of n tokens with keep_states gives the bits of n one-token steps, and a sequence cut
 * back to a kept length continues exactly as one that never ran the rejected tokens, on
 * every fixture family and capy-tiny, alone and in a step with another sequence. */
#include "test.h"
#include "test-fixture.h"
#include "engine/engine.h"
#include "sample/sample.h"
#include "spec/spec.h"
#include "util/rng.h"
#include "test-spec-model.h"

/* --- the drafter ------------------------------------------------------------------------ */

/* The longest suffix of h[0..n) that also ends earlier, its earliest end, by brute force. */
static uint64_t brute_match(const int32_t *h, uint64_t n, uint64_t *end)
{
	for (uint64_t L = n - 1; L >= 1; L--)
		for (uint64_t j = L - 1; j + 1 < n; j++)
			if (!memcmp(h + j + 1 - L, h + n - L, L * sizeof(*h))) {
				*end = j;
				return L;
			}
	return 0;
}

static void test_ngram_small(void)
{
	struct capy_ngram *g;
	struct capy_err err = { 0 };
	int32_t h[] = { 1, 2, 3, 4, 1, 2 }, out[8];
	uint64_t match;

	CHECK_EQ_INT(capy_ngram_new(&g, 2, &err), 0);
	CHECK_EQ_U64(capy_ngram_draft(g, 4, out, &match), 0); /* empty */
	CHECK_EQ_INT(capy_ngram_add(g, h, 6, &err), 0);
	CHECK_EQ_U64(capy_ngram_len(g), 6);
	CHECK_EQ_U64(capy_ngram_draft(g, 3, out, &match), 3);
	CHECK_EQ_U64(match, 2);
	CHECK(out[0] == 3 && out[1] == 4 && out[2] == 1);
	/* The continuation may run into the suffix itself, and stops at the history's end. */
	CHECK_EQ_U64(capy_ngram_draft(g, 8, out, &match), 4);
	CHECK_EQ_INT(capy_ngram_add(g, (int32_t[]){ 9 }, 1, &err), 0);
	CHECK_EQ_U64(capy_ngram_draft(g, 3, out, &match), 0); /* 9 never occurred before */
	CHECK_EQ_U64(match, 0);
	capy_ngram_free(g);
	/* A match shorter than min_match does not draft. */
	CHECK_EQ_INT(capy_ngram_new(&g, 3, &err), 0);
	CHECK_EQ_INT(capy_ngram_add(g, h, 6, &err), 0);
	CHECK_EQ_U64(capy_ngram_draft(g, 3, out, &match), 0);
	CHECK_EQ_U64(match, 2);
	capy_ngram_free(g);
}

/* Random histories over small alphabets, token by token and in chunks: every prefix's draft
 * is the brute force's. */
static void test_ngram_brute(void)
{
	struct capy_rng r;
	struct capy_err err = { 0 };
	int32_t h[600], out[8];
	int bad = 0;

	capy_rng_seed(&r, 7);
	for (int round = 0; round < 12; round++) {
		struct capy_ngram *g;
		uint64_t alpha = 2 + (uint64_t)round % 5, n = 0;
		CHECK_EQ_INT(capy_ngram_new(&g, 1, &err), 0);
		while (n < ARRAY_SIZE(h)) {
			uint64_t chunk = 1 + capy_rng_next(&r) % 3;
			for (uint64_t i = 0; i < chunk && n + i < ARRAY_SIZE(h); i++)
				h[n + i] = (int32_t)(capy_rng_next(&r) % alpha) * 1000 + 3; /* sparse ids */
			chunk = CAPY_MIN(chunk, ARRAY_SIZE(h) - n);
			CHECK_EQ_INT(capy_ngram_add(g, h + n, chunk, &err), 0);
			n += chunk;
			uint64_t end = 0, match, want = brute_match(h, n, &end);
			uint64_t got = capy_ngram_draft(g, 5, out, &match), expect = want ? CAPY_MIN(5, n - 1 - end) : 0;
			if (match != want || got != expect || (got && memcmp(out, h + end + 1, got * sizeof(*h)))) {
				if (bad++ < 5)
					fprintf(stderr, "round %d, n %" PRIu64 ": match %" PRIu64 " want %" PRIu64 ", got %" PRIu64
						" drafts want %" PRIu64 "\n", round, n, match, want, got, expect);
			}
		}
		capy_ngram_free(g);
	}
	CHECK_EQ_INT(bad, 0);
}

/* --- the acceptance rule ---------------------------------------------------------------- */

#define V 6
#define K 2

/* The target distribution of a row as the sampler draws from it: softmax(l / temp) over the
 * top_k largest (no top-p, min-p). */
static void target_p(const float *l, float temp, int top_k, double *p)
{
	int order[V];
	double sum = 0;

	for (int i = 0; i < V; i++)
		order[i] = i;
	for (int i = 0; i < V; i++)
		for (int j = i + 1; j < V; j++)
			if (l[order[j]] > l[order[i]]) {
				int t = order[i];
				order[i] = order[j];
				order[j] = t;
			}
	for (int i = 0; i < V; i++)
		p[i] = 0;
	for (int i = 0; i < (top_k ? top_k : V); i++)
		sum += p[order[i]] = exp((double)(l[order[i]] / temp));
	for (int i = 0; i < V; i++)
		p[i] /= sum;
}

/* A deliberately wrong rule, to show the test can tell: accept with p(d), but on rejection
 * draw from p itself (the draft left in). */
static uint64_t wrong_accept(struct capy_sampler *s, float *rows, const int32_t *d, int32_t *out, struct capy_rng *r,
			     const double p[K + 1][V])
{
	for (uint64_t i = 0; i < K; i++) {
		double u = capy_rng_uniform(r), acc = 0;
		if (u < p[i][d[i]]) {
			out[i] = d[i];
			continue;
		}
		out[i] = capy_sampler_next(s, rows + i * V);
		if (out[i] != d[i])
			return i + 1;
		(void)acc;
	}
	out[K] = capy_sampler_next(s, rows + K * V);
	return K + 1;
}

/* Outcome index of a window's output: [x] for x != d0, [d0 x] for x != d1, [d0 d1 x]. */
static int outcome(const int32_t *out, uint64_t m)
{
	return (int)(m - 1) * V + out[m - 1];
}

/* Chi-square of N windows' outcomes against the exact probabilities; *df the bins used. */
static double chi_square(const float rows[K + 1][V], const int32_t *d, float temp, int top_k, bool wrong, int N,
			 int *df)
{
	double p[K + 1][V], expect[(K + 1) * V] = { 0 }, chi = 0;
	int count[(K + 1) * V] = { 0 };
	struct capy_err err = { 0 };
	struct capy_rng r;

	for (int i = 0; i <= K; i++)
		target_p(rows[i], temp, top_k, p[i]);
	for (int x = 0; x < V; x++) {
		expect[x] = x == d[0] ? 0 : p[0][x];
		expect[V + x] = x == d[1] ? 0 : p[0][d[0]] * p[1][x];
		expect[2 * V + x] = p[0][d[0]] * p[1][d[1]] * p[2][x];
	}
	capy_rng_seed(&r, 99);
	for (int seed = 0; seed < N; seed++) {
		struct capy_sampler *s;
		float work[K + 1][V];
		int32_t out[K + 1];
		uint64_t m;
		memcpy(work, rows, sizeof(work));
		if (capy_sampler_new(&s, V, &(struct capy_sampler_params){ .temperature = temp, .top_k = top_k,
				     .seed = (uint64_t)seed }, &err) < 0)
			return INFINITY;
		m = wrong ? wrong_accept(s, &work[0][0], d, out, &r, (const double(*)[V])p)
			  : capy_spec_accept(s, &work[0][0], V, d, K, out);
		count[outcome(out, m)]++;
		capy_sampler_free(s);
	}
	*df = -1;
	for (int i = 0; i < (K + 1) * V; i++) {
		double e = expect[i] * N;
		if (e == 0) {
			if (count[i])
				return INFINITY; /* an impossible outcome */
			continue;
		}
		chi += (count[i] - e) * (count[i] - e) / e;
		(*df)++;
	}
	return chi;
}

static void test_accept_distribution(void)
{
	const float rows[K + 1][V] = {
		{ 1.0f, 0.2f, 0.7f, -0.5f, 0.1f, 0.4f },
		{ -0.3f, 1.2f, 0.0f, 0.5f, 0.9f, -1.0f },
		{ 0.6f, 0.6f, -0.2f, 0.3f, 0.0f, 1.1f },
	};
	const struct {
		int32_t d[K];
		float temp;
		int top_k;
		bool wrong_differs;
	} cases[] = {
		{ { 2, 4 }, 1.0f, 0, true }, /* drafts of middling probability */
		{ { 0, 1 }, 0.7f, 0, true }, /* the most likely tokens */
		/* a first draft outside the top-k: always rejected (where the wrong rule is right) */
		{ { 3, 4 }, 1.0f, 4, false },
	};
	int df;

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		double chi = chi_square(rows, cases[i].d, cases[i].temp, cases[i].top_k, false, 40000, &df);
		CHECK_MSG(chi < chi_bound(df), "case %zu: chi-square %.1f over %d df, bound %.1f", i, chi, df, chi_bound(df));
		/* The same test on a rule that leaves the draft in the residual fails. */
		if (!cases[i].wrong_differs)
			continue;
		double wrong = chi_square(rows, cases[i].d, cases[i].temp, cases[i].top_k, true, 40000, &df);
		CHECK_MSG(wrong > chi_bound(df), "case %zu: the wrong rule passed: chi-square %.1f, bound %.1f", i, wrong,
			  chi_bound(df));
	}
}

/* A draft drawn from q (the MTP head's distribution). Rules: 0 capy_sampler_verify_q; 1 the
 * point-mass rule (capy_sampler_verify), which is exact for any draft that does not depend on
 * the target's draws, but accepts p(d) of the time, not min(1, p(d) / q(d)); 2 a wrong rule
 * (q's acceptance, then the point-mass residual). The chi-square of the token that comes out
 * against p over N seeds; *accepted how often it was the draft. */
static double chi_square_q(const float *row, const float *q, float temp, int top_k, int rule, int N, int *df,
			   int *accepted)
{
	double p[V], chi = 0;
	int count[V] = { 0 };
	struct capy_err err = { 0 };
	struct capy_rng r;

	target_p(row, temp, top_k, p);
	capy_rng_seed(&r, 1234);
	*accepted = 0;
	for (int seed = 0; seed < N; seed++) {
		struct capy_sampler *s;
		float work[V];
		double u = capy_rng_uniform(&r), acc = 0;
		int32_t d = V - 1, t;
		for (int x = 0; x < V; x++)
			if (u < (acc += q[x])) {
				d = x;
				break;
			}
		memcpy(work, row, sizeof(work));
		if (capy_sampler_new(&s, V, &(struct capy_sampler_params){ .temperature = temp, .top_k = top_k,
				     .seed = (uint64_t)seed }, &err) < 0)
			return INFINITY;
		if (rule == 0) {
			t = capy_sampler_verify_q(s, work, d, q);
		} else if (rule == 1) {
			t = capy_sampler_verify(s, work, d);
		} else if (capy_rng_uniform(&r) * q[d] < p[d]) {
			t = d;
		} else { /* p without d */
			double v = capy_rng_uniform(&r) * (1 - p[d]);
			t = -1;
			acc = 0;
			for (int x = 0; x < V && t < 0; x++)
				if (x != d && p[x] > 0 && v < (acc += p[x]))
					t = x;
			if (t < 0)
				t = d == 0 ? 1 : 0;
		}
		*accepted += t == d;
		count[t]++;
		capy_sampler_free(s);
	}
	*df = -1;
	for (int x = 0; x < V; x++) {
		double e = p[x] * N;
		if (e == 0) {
			if (count[x])
				return INFINITY;
			continue;
		}
		chi += (count[x] - e) * (count[x] - e) / e;
		(*df)++;
	}
	return chi;
}

static void test_accept_q_distribution(void)
{
	const float row[V] = { 1.0f, 0.2f, 0.7f, -0.5f, 0.1f, 0.4f };
	const float qs[][V] = {
		{ 0.05f, 0.30f, 0.05f, 0.30f, 0.20f, 0.10f }, /* far from p: many rejections */
		{ 0.30f, 0.12f, 0.22f, 0.06f, 0.12f, 0.18f }, /* close to p */
		{ 0.00f, 0.50f, 0.00f, 0.50f, 0.00f, 0.00f }, /* a shortlist of two ids */
	};
	const int N = 40000;
	int df, acc_q, acc_point, acc_wrong;

	for (size_t i = 0; i < ARRAY_SIZE(qs); i++)
		for (int top_k = 0; top_k <= 4; top_k += 4) {
			double p[V], want_q = 0, want_point = 0;
			target_p(row, 1.0f, top_k, p);
			for (int x = 0; x < V; x++) {
				want_q += fmin(p[x], qs[i][x]);  /* 1 - total variation */
				want_point += qs[i][x] * p[x];
			}
			double chi = chi_square_q(row, qs[i], 1.0f, top_k, 0, N, &df, &acc_q);
			CHECK_MSG(chi < chi_bound(df), "q %zu top-k %d: chi-square %.1f over %d df, bound %.1f", i, top_k, chi, df,
				  chi_bound(df));
			double point = chi_square_q(row, qs[i], 1.0f, top_k, 1, N, &df, &acc_point);
			CHECK_MSG(point < chi_bound(df), "q %zu top-k %d: point-mass rule %.1f", i, top_k, point);
			double wrong = chi_square_q(row, qs[i], 1.0f, top_k, 2, N, &df, &acc_wrong);
			CHECK_MSG(wrong > chi_bound(df), "q %zu top-k %d: the wrong rule passed: %.1f, bound %.1f", i, top_k, wrong,
				  chi_bound(df));
			/* Acceptance: 1 - TV(p, q) with q's rule, E_q[p(d)] with the point mass (5 sigma). */
			double sd = 5 * sqrt(0.25 / N);
			CHECK_MSG(fabs(acc_q / (double)N - want_q) < sd, "q %zu: accepted %.4f, want %.4f", i, acc_q / (double)N,
				  want_q);
			CHECK_MSG(fabs(acc_point / (double)N - want_point) < sd, "q %zu: point rule accepted %.4f, want %.4f", i,
				  acc_point / (double)N, want_point);
			CHECK(want_q >= want_point);
			if (i == 1 && top_k == 0)
				printf("q close to p: accepted %.3f with q's rule, %.3f with the point-mass rule\n",
				       acc_q / (double)N, acc_point / (double)N);
		}
	/* Greedy ignores q: the argmax. */
	struct capy_sampler *g;
	struct capy_err err = { 0 };
	float work[V];
	memcpy(work, row, sizeof(work));
	CHECK_EQ_INT(capy_sampler_new(&g, V, &(struct capy_sampler_params){ 0 }, &err), 0);
	CHECK_EQ_INT(capy_sampler_verify_q(g, work, 3, qs[0]), 0);
	capy_sampler_free(g);
}

/* Greedy: the argmax chain whatever the drafts, and nothing drawn. */
static void test_accept_greedy(void)
{
	float rows[3][4] = { { 0, 3, 1, 3 }, { 5, 0, 0, 0 }, { 0, 0, 0, 2 } };
	struct capy_sampler *s;
	struct capy_err err = { 0 };
	int32_t out[3];

	CHECK_EQ_INT(capy_sampler_new(&s, 4, &(struct capy_sampler_params){ 0 }, &err), 0);
	CHECK_EQ_U64(capy_spec_accept(s, &rows[0][0], 4, (int32_t[]){ 1, 0 }, 2, out), 3);
	CHECK(out[0] == 1 && out[1] == 0 && out[2] == 3); /* a tie: the lower id, as capy_sampler_next */
	CHECK_EQ_U64(capy_spec_accept(s, &rows[0][0], 4, (int32_t[]){ 3, 0 }, 2, out), 1);
	CHECK_EQ_INT(out[0], 1);
	capy_sampler_free(s);
}

/* The same seed gives the same windows; the stream moves on between windows. */
static void test_accept_reproducible(void)
{
	const float rows[K + 1][V] = { { 0.5f, 0.5f, 0.4f, 0.3f, 0.2f, 0.1f }, { 0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f },
				       { 0, 0, 0, 0, 0, 0 } };
	struct capy_err err = { 0 };
	int32_t a[64][K + 1], b[64][K + 1];
	uint64_t ma[64], mb[64];
	bool differ = false;

	for (int pass = 0; pass < 2; pass++) {
		struct capy_sampler *s;
		CHECK_EQ_INT(capy_sampler_new(&s, V, &(struct capy_sampler_params){ .temperature = 1, .seed = 5 }, &err), 0);
		for (int w = 0; w < 64; w++) {
			float work[K + 1][V];
			memcpy(work, rows, sizeof(work));
			if (pass)
				mb[w] = capy_spec_accept(s, &work[0][0], V, (int32_t[]){ 1, 4 }, K, b[w]);
			else
				ma[w] = capy_spec_accept(s, &work[0][0], V, (int32_t[]){ 1, 4 }, K, a[w]);
		}
		capy_sampler_free(s);
	}
	for (int w = 0; w < 64; w++) {
		CHECK(ma[w] == mb[w] && !memcmp(a[w], b[w], ma[w] * sizeof(int32_t)));
		differ |= ma[w] != ma[0] || a[w][ma[w] - 1] != a[0][ma[0] - 1];
	}
	CHECK(differ);
}

/* The rule on capy-tiny's rows (test-spec-model.h), on the CPU; t/cuda/u-cuda-model.c runs it
 * on rows from the GPU. */
static void test_accept_on_model(void)
{
	test_spec_accept_on_model(&(struct capy_engine_opts){ .threads = 2 });
}

/* --- the engine: verification steps and cutting back --------------------------------------- */

static int32_t tok(uint64_t i, uint64_t vocab)
{
	return (int32_t)((i * 2654435761u + 17) % vocab);
}

/* On one model: after prompts of several lengths (so windows cross pages' and QSA blocks'
 * boundaries), a keep_states step of n tokens gives the logits of n one-token steps bit for
 * bit, and cut back to each kept length it continues exactly as a sequence that ran only
 * those tokens. */
static void check_model(const char *name)
{
	struct capy_artifact *a = test_open_fixture(name);
	struct capy_engine *e;
	struct capy_err err = { 0 };
	const uint64_t n = 6;

	if (!a)
		return;
	CHECK_MSG(capy_engine_new(&e, a, &(struct capy_engine_opts){ .threads = 2 }, &err) == 0, "%s", err.msg);
	uint64_t Vv = capy_engine_config(e)->vocab_size;
	float *rows = malloc((n + 1) * Vv * sizeof(float)), *one = malloc(Vv * sizeof(float));
	float *next_a = malloc(Vv * sizeof(float)), *next_b = malloc(Vv * sizeof(float));
	int32_t prompt[80], run[8];
	int bad_rows = 0, bad_cut = 0;

	for (uint64_t i = 0; i < ARRAY_SIZE(prompt); i++)
		prompt[i] = tok(i, Vv);
	for (uint64_t i = 0; i < n; i++)
		run[i] = tok(1000 + i, Vv);
	for (uint64_t plen = 5; plen <= 70; plen += 13) {
		struct capy_seq *sa, *sb;
		CHECK_EQ_INT(capy_seq_new(e, &sa, &err), 0);
		CHECK_EQ_INT(capy_seq_new(e, &sb, &err), 0);
		CHECK_EQ_INT(capy_engine_forward(e, sa, prompt, plen, one, false, &err), 0);
		CHECK_EQ_INT(capy_engine_forward(e, sb, prompt, plen, one, false, &err), 0);
		CHECK_MSG(capy_engine_step(e, &(struct capy_step_item){ .seq = sa, .tokens = run, .n = n, .logits = rows,
					   .all_logits = true, .keep_states = true }, 1, &err) == 0, "%s", err.msg);
		for (uint64_t i = 0; i < n; i++) {
			CHECK_EQ_INT(capy_engine_step(e, &(struct capy_step_item){ .seq = sb, .tokens = run + i, .n = 1,
						      .logits = one }, 1, &err), 0);
			bad_rows += memcmp(one, rows + i * Vv, Vv * sizeof(float)) != 0;
		}
		/* Cut back to kept lengths and continue with two tokens, against a sequence that
		 * never ran the rest (sa for the first, a fresh verified one for the others). */
		for (uint64_t keep = 1; keep <= n; keep += 2) {
			struct capy_seq *sc, *sd;
			int32_t more[2] = { tok(7 * keep, Vv), tok(9 * keep, Vv) };
			if (keep > 1) {
				capy_seq_free(sa);
				CHECK_EQ_INT(capy_seq_new(e, &sa, &err), 0);
				CHECK_EQ_INT(capy_engine_forward(e, sa, prompt, plen, one, false, &err), 0);
				CHECK_EQ_INT(capy_engine_step(e, &(struct capy_step_item){ .seq = sa, .tokens = run, .n = n,
							      .logits = rows, .all_logits = true, .keep_states = true },
							      1, &err), 0);
			}
			CHECK_EQ_INT(capy_seq_new(e, &sd, &err), 0);
			CHECK_EQ_INT(capy_engine_forward(e, sd, prompt, plen, one, false, &err), 0);
			for (uint64_t i = 0; i < keep; i++)
				CHECK_EQ_INT(capy_engine_step(e, &(struct capy_step_item){ .seq = sd, .tokens = run + i, .n = 1 },
							      1, &err), 0);
			/* A fork keeps no states: only the original can be cut back. */
			CHECK_EQ_INT(capy_seq_fork(sa, &sc, &err), 0);
			CHECK(capy_seq_truncate(sc, plen + keep, &err) < 0);
			capy_seq_free(sc);
			CHECK_MSG(capy_seq_truncate(sa, plen + keep, &err) == 0, "%s", err.msg);
			CHECK_EQ_U64(capy_seq_len(sa), plen + keep);
			for (int j = 0; j < 2; j++) {
				CHECK_EQ_INT(capy_engine_step(e, &(struct capy_step_item){ .seq = sa, .tokens = &more[j], .n = 1,
							      .logits = next_a }, 1, &err), 0);
				CHECK_EQ_INT(capy_engine_step(e, &(struct capy_step_item){ .seq = sd, .tokens = &more[j], .n = 1,
							      .logits = next_b }, 1, &err), 0);
				bad_cut += memcmp(next_a, next_b, Vv * sizeof(float)) != 0;
			}
			/* Those steps forgot the kept states. */
			CHECK(capy_seq_truncate(sa, plen + keep + 1, &err) < 0);
			capy_seq_free(sd);
		}
		capy_seq_free(sa);
		capy_seq_free(sb);
	}
	/* In a step with another sequence (as capy-serve will run them): the same rows, and the
	 * other sequence's logits those of its step alone. */
	{
		struct capy_seq *sa, *sb;
		float *rows2 = malloc((n + 1) * Vv * sizeof(float));
		int32_t other = tok(5, Vv);
		CHECK_EQ_INT(capy_seq_new(e, &sa, &err), 0);
		CHECK_EQ_INT(capy_seq_new(e, &sb, &err), 0);
		CHECK_EQ_INT(capy_engine_forward(e, sa, prompt, 9, one, false, &err), 0);
		CHECK_EQ_INT(capy_engine_forward(e, sb, prompt + 20, 13, one, false, &err), 0);
		struct capy_step_item two[2] = {
			{ .seq = sb, .tokens = &other, .n = 1, .logits = next_a },
			{ .seq = sa, .tokens = run, .n = n, .logits = rows2, .all_logits = true, .keep_states = true },
		};
		CHECK_EQ_INT(capy_engine_step(e, two, 2, &err), 0);
		CHECK_EQ_INT(capy_seq_truncate(sa, 9 + 2, &err), 0);
		capy_seq_free(sa);
		capy_seq_free(sb);
		CHECK_EQ_INT(capy_seq_new(e, &sa, &err), 0);
		CHECK_EQ_INT(capy_seq_new(e, &sb, &err), 0);
		CHECK_EQ_INT(capy_engine_forward(e, sa, prompt, 9, one, false, &err), 0);
		CHECK_EQ_INT(capy_engine_forward(e, sb, prompt + 20, 13, one, false, &err), 0);
		CHECK_EQ_INT(capy_engine_step(e, &(struct capy_step_item){ .seq = sb, .tokens = &other, .n = 1,
					      .logits = next_b }, 1, &err), 0);
		CHECK_EQ_INT(capy_engine_step(e, &(struct capy_step_item){ .seq = sa, .tokens = run, .n = n, .logits = rows,
					      .all_logits = true, .keep_states = true }, 1, &err), 0);
		CHECK_MSG(!memcmp(rows, rows2, n * Vv * sizeof(float)), "%s: a window's rows depend on its step's company",
			  name);
		CHECK_MSG(!memcmp(next_a, next_b, Vv * sizeof(float)), "%s: a sequence's logits depend on a window beside it",
			  name);
		capy_seq_free(sa);
		capy_seq_free(sb);
		free(rows2);
	}
	CHECK_MSG(!bad_rows, "%s: %d rows of a keep_states step differ from one-token steps", name, bad_rows);
	CHECK_MSG(!bad_cut, "%s: %d continuations after a cut differ", name, bad_cut);
	/* keep_states needs a history. */
	{
		struct capy_seq *s;
		CHECK_EQ_INT(capy_seq_new(e, &s, &err), 0);
		CHECK(capy_engine_step(e, &(struct capy_step_item){ .seq = s, .tokens = run, .n = 2, .keep_states = true }, 1,
				       &err) < 0);
		CHECK_CONTAINS(err.msg, "keep_states needs a sequence with a history");
		capy_seq_free(s);
	}
	free(rows);
	free(one);
	free(next_a);
	free(next_b);
	capy_engine_free(e);
	capy_artifact_close(a);
}

static void test_verify_every_family(void)
{
	const char *models[] = { "qwen3_5-dense", "qwen3_5_moe", "qwen3_5_moe-nvfp4", "qwen3_next", "qwen4_exp",
				 "share/models/capy-tiny" };

	for (size_t i = 0; i < ARRAY_SIZE(models); i++)
		check_model(models[i]);
}

/* A window on capy-tiny: greedy, the tokens of a window are those of one-token steps. */
static void test_window_greedy(void)
{
	struct capy_artifact *a = test_open_fixture("share/models/capy-tiny");
	struct capy_engine *e;
	struct capy_sampler *s1, *s2;
	struct capy_seq *sa, *sb;
	struct capy_err err = { 0 };
	struct capy_spec_stats st = { 0 };
	int32_t prompt[] = { 73, 2053, 7, 16, 11, 340, 2000, 400 }, drafts[4] = { 263, 499, 340, 316 }, out[5], want[5];
	uint64_t m;

	if (!a)
		return;
	CHECK_EQ_INT(capy_engine_new(&e, a, &(struct capy_engine_opts){ .threads = 2 }, &err), 0);
	uint64_t Vv = capy_engine_config(e)->vocab_size;
	float *rows = malloc(5 * Vv * sizeof(float)), *l = malloc(Vv * sizeof(float));
	CHECK_EQ_INT(capy_sampler_new(&s1, Vv, &(struct capy_sampler_params){ 0 }, &err), 0);
	CHECK_EQ_INT(capy_sampler_new(&s2, Vv, &(struct capy_sampler_params){ 0 }, &err), 0);
	CHECK_EQ_INT(capy_seq_new(e, &sa, &err), 0);
	CHECK_EQ_INT(capy_seq_new(e, &sb, &err), 0);
	CHECK_EQ_INT(capy_engine_forward(e, sa, prompt, 7, l, false, &err), 0);
	CHECK_EQ_INT(capy_engine_forward(e, sb, prompt, 7, l, false, &err), 0);
	/* The drafts: the first is what the model will say (the prompt's own 8th token is not). */
	CHECK_EQ_INT(capy_spec_window(e, sa, s1, prompt[7], drafts, 4, rows, out, &m, &st, &err), 0);
	CHECK(m >= 1 && m <= 5);
	CHECK_EQ_U64(capy_seq_len(sa), 7 + m);
	int32_t feed = prompt[7];
	for (uint64_t i = 0; i < m; i++) {
		CHECK_EQ_INT(capy_engine_step(e, &(struct capy_step_item){ .seq = sb, .tokens = &feed, .n = 1, .logits = l },
					      1, &err), 0);
		want[i] = feed = capy_sampler_next(s2, l);
	}
	CHECK(!memcmp(out, want, m * sizeof(int32_t)));
	CHECK_EQ_U64(st.windows, 1);
	CHECK_EQ_U64(st.drafted, 4);
	CHECK_EQ_U64(st.accepted, m - 1);
	CHECK(capy_spec_window(e, sa, s1, 1, drafts, 0, rows, out, &m, &st, &err) < 0);
	capy_seq_free(sa);
	capy_seq_free(sb);
	capy_sampler_free(s1);
	capy_sampler_free(s2);
	free(rows);
	free(l);
	capy_engine_free(e);
	capy_artifact_close(a);
}

int main(void)
{
	RUN(test_ngram_small);
	RUN(test_ngram_brute);
	RUN(test_accept_greedy);
	RUN(test_accept_reproducible);
	RUN(test_accept_distribution);
	RUN(test_accept_q_distribution);
	RUN(test_accept_on_model);
	RUN(test_verify_every_family);
	RUN(test_window_greedy);
	return test_summary();
}
