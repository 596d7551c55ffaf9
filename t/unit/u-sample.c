/* u-sample.c - the sampler: greedy, reproducibility by seed, the filters, the penalties,
 * and that draws follow the softmax distribution. */
#include "test.h"
#include "constrain/mask.h"
#include "sample/sample.h"

static int32_t one(const struct capy_sampler_params *p, const float *l, uint64_t v)
{
	struct capy_sampler *s;
	float buf[64];
	int32_t id;

	memcpy(buf, l, v * sizeof(float));
	if (capy_sampler_new(&s, v, p, NULL) < 0)
		return -1;
	id = capy_sampler_next(s, buf);
	capy_sampler_free(s);
	return id;
}

static void test_greedy(void)
{
	float l[5] = { 1, 3, 3, -1, 2 };
	struct capy_sampler_params p = { 0 };

	CHECK_EQ_INT(one(&p, l, 5), 1); /* the lowest id of the tied best */
	p.temperature = 1;
	p.top_k = 1;
	CHECK_EQ_INT(one(&p, l, 5), 1);
}

static void test_seed(void)
{
	float l[8] = { 0.1f, 0.5f, 0.2f, 0.9f, 0.3f, 0.4f, 0.8f, 0.6f };
	struct capy_sampler_params p = { .temperature = 1, .seed = 7 };
	struct capy_sampler *a, *b;
	int same = 0, differs = 0;

	capy_sampler_new(&a, 8, &p, NULL);
	capy_sampler_new(&b, 8, &p, NULL);
	for (int i = 0; i < 200; i++) {
		float x[8], y[8];
		memcpy(x, l, sizeof(l));
		memcpy(y, l, sizeof(l));
		same += capy_sampler_next(a, x) == capy_sampler_next(b, y);
	}
	CHECK_EQ_INT(same, 200);
	capy_sampler_free(b);
	p.seed = 8;
	capy_sampler_new(&b, 8, &p, NULL);
	for (int i = 0; i < 200; i++) {
		float x[8], y[8];
		memcpy(x, l, sizeof(l));
		memcpy(y, l, sizeof(l));
		differs += capy_sampler_next(a, x) != capy_sampler_next(b, y);
	}
	CHECK(differs > 50);
	capy_sampler_free(a);
	capy_sampler_free(b);
}

static void test_distribution(void)
{
	float l[3] = { 0, 1, 2 };
	double z = 1 + exp(1) + exp(2), want[3] = { 1 / z, exp(1) / z, exp(2) / z };
	struct capy_sampler_params p = { .temperature = 1, .seed = 3 };
	struct capy_sampler *s;
	int n[3] = { 0 }, total = 30000;

	capy_sampler_new(&s, 3, &p, NULL);
	for (int i = 0; i < total; i++) {
		float x[3] = { 0, 1, 2 };
		n[capy_sampler_next(s, x)]++;
	}
	for (int i = 0; i < 3; i++)
		CHECK_MSG(fabs((double)n[i] / total - want[i]) < 0.01, "token %d: %.4f vs %.4f", i,
			  (double)n[i] / total, want[i]);
	capy_sampler_free(s);
	(void)l;
}

static void test_filters(void)
{
	float l[4] = { 2.0f, 1.9f, -3, -4 };
	struct capy_sampler_params p = { .temperature = 1, .seed = 1 };
	int seen[4];

	/* top-k 2, top-p 0.5 and min-p 0.5 keep only the two best here, or the best. */
	p.top_k = 2;
	memset(seen, 0, sizeof(seen));
	for (uint64_t i = 0; i < 400; i++) {
		p.seed = i;
		seen[one(&p, l, 4)]++;
	}
	CHECK(seen[0] > 0 && seen[1] > 0 && !seen[2] && !seen[3]);
	p.top_k = 0;
	p.top_p = 0.5f;
	memset(seen, 0, sizeof(seen));
	for (uint64_t i = 0; i < 400; i++) {
		p.seed = i;
		seen[one(&p, l, 4)]++;
	}
	CHECK(seen[0] == 400);
	p.top_p = 1;
	p.min_p = 0.5f;
	memset(seen, 0, sizeof(seen));
	for (uint64_t i = 0; i < 400; i++) {
		p.seed = i;
		seen[one(&p, l, 4)]++;
	}
	CHECK(seen[0] > 0 && seen[1] > 0 && !seen[2] && !seen[3]);
}

static void test_penalties(void)
{
	struct capy_sampler_params p = { .repetition_penalty = 2 };
	struct capy_sampler *s;
	float l[3] = { 3, 2, -1 };
	int32_t prompt[1] = { 0 };

	/* Repetition: token 0 (in the prompt) 3/2 = 1.5 < 2. */
	capy_sampler_new(&s, 3, &p, NULL);
	capy_sampler_prompt(s, prompt, 1);
	CHECK_EQ_INT(capy_sampler_next(s, l), 1);
	CHECK(l[0] == 1.5f);
	capy_sampler_free(s);
	/* Presence / frequency apply to output tokens only. */
	p = (struct capy_sampler_params){ .frequency_penalty = 0.6f };
	capy_sampler_new(&s, 3, &p, NULL);
	{
		float a[3] = { 3, 2, -1 }, b[3] = { 3, 2, -1 }, c[3] = { 3, 2, -1 };
		CHECK_EQ_INT(capy_sampler_next(s, a), 0);   /* 3 */
		CHECK_EQ_INT(capy_sampler_next(s, b), 0);   /* 3 - 0.6 = 2.4 */
		CHECK_EQ_INT(capy_sampler_next(s, c), 1);   /* 3 - 1.2 = 1.8 < 2 */
	}
	capy_sampler_free(s);
	CHECK(capy_sampler_new(&s, 3, &(struct capy_sampler_params){ .top_p = 2 }, NULL) < 0);
}


static uint64_t lcg(uint64_t *x)
{
	*x = *x * 6364136223846793005ull + 1442695040888963407ull;
	return *x >> 33;
}

/* A device's half of sampling (capy_sampler_mode, _take, _next_top) picks the tokens
 * capy_sampler_next picks from the whole row: given any superset of the top_k in any order,
 * ties at the cut included. */
static void test_device_half(void)
{
	enum { V = 3000 };
	static float l[V], x[V], v[V];
	static int32_t ids[V];
	const struct capy_sampler_params cases[] = {
		{ .temperature = 0.7f, .top_k = 20, .top_p = 0.8f, .seed = 1 },
		{ .temperature = 1.0f, .top_k = 2, .seed = 2 },
		{ .temperature = 1.3f, .top_k = 100, .min_p = 0.05f, .seed = 3 },
		{ .temperature = 0.2f, .top_k = 1024, .top_p = 0.95f, .seed = 4 },
	};
	uint64_t r = 99;
	int same = 0, total = 0;

	for (size_t c = 0; c < ARRAY_SIZE(cases); c++) {
		struct capy_sampler *a, *b;
		float temp;
		int k;
		capy_sampler_new(&a, V, &cases[c], NULL);
		capy_sampler_new(&b, V, &cases[c], NULL);
		CHECK_EQ_INT(capy_sampler_mode(b, &temp, &k), CAPY_SAMPLE_TOP_K);
		for (int round = 0; round < 150; round++) {
			uint64_t n = 0;
			float cut;
			for (uint64_t i = 0; i < V; i++) /* coarse values: many ties */
				l[i] = (float)(lcg(&r) % 64) * 0.25f - 8.0f;
			memcpy(x, l, sizeof(l));
			/* The k-th largest v, then every v >= it, plus some others, shuffled. */
			for (uint64_t i = 0; i < V; i++)
				v[i] = l[i] / temp;
			{
				int above = 0;
				cut = -INFINITY;
				for (int q = 63; q >= 0 && above < k; q--) {
					float t = ((float)q * 0.25f - 8.0f) / temp;
					for (uint64_t i = 0; i < V; i++)
						above += v[i] == t;
					cut = t;
				}
			}
			for (uint64_t i = 0; i < V; i++)
				if (v[i] >= cut || lcg(&r) % 7 == 0)
					ids[n++] = (int32_t)i;
			for (uint64_t i = n; i > 1; i--) {
				uint64_t j = lcg(&r) % i;
				int32_t t = ids[i - 1];
				ids[i - 1] = ids[j];
				ids[j] = t;
			}
			for (uint64_t i = 0; i < n; i++)
				v[i] = l[ids[i]] / temp;
			same += capy_sampler_next(a, x) == capy_sampler_next_top(b, v, ids, n);
			total++;
		}
		capy_sampler_free(a);
		capy_sampler_free(b);
	}
	CHECK_EQ_INT(same, total);
	{
		struct capy_sampler *s;
		float temp;
		int k;
		capy_sampler_new(&s, 4, &(struct capy_sampler_params){ 0 }, NULL);
		CHECK_EQ_INT(capy_sampler_mode(s, &temp, &k), CAPY_SAMPLE_GREEDY);
		CHECK_EQ_INT(capy_sampler_take(s, 3), 3);
		capy_sampler_free(s);
		capy_sampler_new(&s, 4, &(struct capy_sampler_params){ .temperature = 1 }, NULL);
		CHECK_EQ_INT(capy_sampler_mode(s, &temp, &k), CAPY_SAMPLE_HOST); /* no top_k: the whole row */
		capy_sampler_free(s);
		capy_sampler_new(&s, 4, &(struct capy_sampler_params){ .repetition_penalty = 1.1f }, NULL);
		CHECK_EQ_INT(capy_sampler_mode(s, &temp, &k), CAPY_SAMPLE_HOST); /* penalties: the counts */
		capy_sampler_free(s);
	}
}

/* Masks: draws among allowed tokens only, the unmasked distribution renormalized over them
 * (the same draws as logits with the others at -inf), every bit set changes nothing. */
static void test_masked(void)
{
	const float base[40] = { 0.5f, 2.0f, 1.5f, -1, 3.0f, 0.1f, 2.5f, 1.0f, 0.0f, 1.2f, 0.3f, 2.2f, -0.5f, 0.7f,
				 1.9f, 0.2f, 1.1f, 0.4f, 2.9f, 0.6f, 1.3f, 0.8f, -2, 1.7f, 0.9f, 2.1f, 1.4f, 0.05f,
				 1.6f, 2.6f, 0.35f, 1.8f, 2.4f, 0.45f, 3.1f, 0.15f, 1.05f, 2.7f, 0.55f, 1.25f };
	const struct capy_sampler_params ps[4] = {
		{ .temperature = 1, .seed = 11 },
		{ .temperature = 0.7f, .top_k = 5, .top_p = 0.9f, .seed = 12 },
		{ .temperature = 1.3f, .min_p = 0.1f, .repetition_penalty = 1.3f, .frequency_penalty = 0.2f, .seed = 13 },
		{ .temperature = 0, .presence_penalty = 0.5f, .seed = 14 },
	};
	uint32_t all[2] = { UINT32_MAX, UINT32_MAX }, some[2] = { 0x80100a52u, 0x95u }; /* ids 1 4 6 9 11 20 31 32 34 36 39 */

	for (size_t k = 0; k < ARRAY_SIZE(ps); k++) {
		struct capy_sampler *a, *b, *c, *d;
		int same_all = 0, same_inf = 0, outside = 0;
		capy_sampler_new(&a, 40, &ps[k], NULL);
		capy_sampler_new(&b, 40, &ps[k], NULL);
		capy_sampler_new(&c, 40, &ps[k], NULL);
		capy_sampler_new(&d, 40, &ps[k], NULL);
		for (int i = 0; i < 300; i++) {
			float x[40], y[40], z[40], w[40];
			memcpy(x, base, sizeof(x));
			memcpy(y, base, sizeof(y));
			memcpy(z, base, sizeof(z));
			memcpy(w, base, sizeof(w));
			same_all += capy_sampler_next(a, x) == capy_sampler_next_masked(b, y, all);
			for (int id = 0; id < 40; id++)
				if (!((some[id / 32] >> (id % 32)) & 1))
					w[id] = -INFINITY;
			int32_t got = capy_sampler_next_masked(c, z, some);
			same_inf += got == capy_sampler_next(d, w);
			outside += !((some[got / 32] >> (got % 32)) & 1);
		}
		CHECK_MSG(same_all == 300 && same_inf == 300 && !outside, "params %zu: %d %d %d", k, same_all, same_inf, outside);
		capy_sampler_free(a);
		capy_sampler_free(b);
		capy_sampler_free(c);
		capy_sampler_free(d);
	}
	/* the distribution: softmax over the allowed ids {1, 3} of logits {0, 1, 2, 3} */
	{
		struct capy_sampler *s;
		uint32_t m = 0xa;
		int n[4] = { 0 }, total = 30000;
		capy_sampler_new(&s, 4, &(struct capy_sampler_params){ .temperature = 1, .seed = 5 }, NULL);
		for (int i = 0; i < total; i++) {
			float x[4] = { 0, 1, 2, 3 };
			n[capy_sampler_next_masked(s, x, &m)]++;
		}
		double want1 = exp(1) / (exp(1) + exp(3));
		CHECK(!n[0] && !n[2]);
		CHECK_MSG(fabs((double)n[1] / total - want1) < 0.01, "%.4f vs %.4f", (double)n[1] / total, want1);
		capy_sampler_free(s);
	}
	/* greedy: the best allowed token, the lowest id of a tie; nothing allowed: -1; every allowed
	 * logit -inf: the lowest allowed id */
	{
		struct capy_sampler *s;
		uint32_t m = 0x16, none = 0; /* ids 1 2 4 */
		float x[5] = { 9, 3, 3, 8, 1 }, y[5] = { 1, 1, 1, 1, 1 }, z[5] = { 0, -INFINITY, -INFINITY, 0, -INFINITY };
		capy_sampler_new(&s, 5, &(struct capy_sampler_params){ 0 }, NULL);
		CHECK_EQ_INT(capy_sampler_next_masked(s, x, &m), 1);
		CHECK_EQ_INT(capy_sampler_next_masked(s, y, &none), -1);
		CHECK_EQ_INT(capy_sampler_next_masked(s, z, &m), 1);
		capy_sampler_free(s);
		capy_sampler_new(&s, 5, &(struct capy_sampler_params){ .temperature = 1 }, NULL);
		float zz[5] = { 0, -INFINITY, -INFINITY, 0, -INFINITY };
		CHECK_EQ_INT(capy_sampler_next_masked(s, zz, &m), 1);
		capy_sampler_free(s);
	}
}

/* What the device computes for a masked row (kernels/sample.cu), done here: greedy, the first
 * index of the maximum among allowed ids that are not NaN, or first when there is none or
 * logits[first] is NaN; top-k, the allowed ids that are not NaN (any superset of the top k
 * does), shuffled. */
static int32_t device_greedy(const float *l, uint64_t V, const uint32_t *bits, int32_t first)
{
	int32_t bx = -1;

	for (uint64_t i = 0; i < V; i++)
		if (capy_mask_has(bits, (int32_t)i) && !isnan(l[i]) && (bx < 0 || l[i] > l[bx]))
			bx = (int32_t)i;
	return bx < 0 || isnan(l[first]) ? first : bx;
}

static uint64_t device_list(const float *l, uint64_t V, const uint32_t *bits, float temp, float *v, int32_t *ids,
			    uint64_t *r)
{
	uint64_t n = 0;

	for (uint64_t i = 0; i < V; i++)
		if (capy_mask_has(bits, (int32_t)i) && !isnan(l[i] / temp))
			ids[n++] = (int32_t)i;
	for (uint64_t i = n; i > 1; i--) {
		uint64_t j = lcg(r) % i;
		int32_t t = ids[i - 1];
		ids[i - 1] = ids[j];
		ids[j] = t;
	}
	for (uint64_t i = 0; i < n; i++)
		v[i] = l[ids[i]] / temp;
	return n;
}

/* A device's half of a masked row (capy_sampler_mask_first, _take, _next_top_masked) picks what
 * capy_sampler_next_masked picks from the whole row: continuous and tied logits, NaN and -inf
 * among them, a sparse mask, a single allowed id, allowed ids that are all -inf, all NaN, a NaN
 * at the lowest allowed id. */
static void test_device_half_masked(void)
{
	enum { V = 1000, W = (V + 31) / 32, KINDS = 6 };
	static float l[V], x[V], v[V];
	static int32_t ids[V];
	static uint32_t bits[W];
	const struct capy_sampler_params cases[] = {
		{ .temperature = 0, .seed = 1 },
		{ .temperature = 0.7f, .top_k = 20, .top_p = 0.8f, .seed = 2 },
		{ .temperature = 1.0f, .top_k = 2, .seed = 3 },
		{ .temperature = 1.3f, .top_k = 300, .min_p = 0.05f, .seed = 4 },
	};
	uint64_t r = 17;
	int same = 0, total = 0, outside = 0;

	CHECK_EQ_INT((int)capy_sampler_mask_first(bits, V), -1);
	bits[W - 1] = 1u << ((V - 1) % 32);
	CHECK_EQ_INT((int)capy_sampler_mask_first(bits, V), V - 1);
	bits[W - 1] = 1u << 31; /* past the vocabulary (V is not a multiple of 32) */
	CHECK_EQ_INT((int)capy_sampler_mask_first(bits, V), -1);
	for (size_t c = 0; c < ARRAY_SIZE(cases); c++) {
		struct capy_sampler *a, *b;
		float temp;
		int k;
		capy_sampler_new(&a, V, &cases[c], NULL);
		capy_sampler_new(&b, V, &cases[c], NULL);
		enum capy_sample_mode mode = capy_sampler_mode(b, &temp, &k);
		CHECK(mode != CAPY_SAMPLE_HOST);
		for (int round = 0; round < 120; round++) {
			int kind = round % KINDS;
			memset(bits, 0, sizeof(bits));
			for (uint64_t i = 0; i < V; i++) {
				uint64_t q = lcg(&r);
				l[i] = round % 2 ? (float)(q % 16) * 0.5f - 4.0f : (float)(q % 100000) * 1e-4f;
				if (q % 23 == 0)
					l[i] = NAN;
				else if (q % 29 == 0)
					l[i] = -INFINITY;
				bool on = kind == 0 ? q % 5 == 0
					: kind == 1 ? i == (uint64_t)(round * 37) % V
					: kind == 2 ? i % 3 == 0 && (l[i] = -INFINITY, true)
					: kind == 3 ? i % 4 == 1 && (l[i] = NAN, true)
					: kind == 4 ? i % 50 == 7 && (i != 7 || (l[i] = NAN, true))
						    : q % 2 == 0;
				if (on)
					bits[i / 32] |= 1u << (i % 32);
			}
			int32_t first = (int32_t)capy_sampler_mask_first(bits, V), want, got;
			memcpy(x, l, sizeof(l));
			want = capy_sampler_next_masked(a, x, bits);
			if (mode == CAPY_SAMPLE_GREEDY)
				got = capy_sampler_take(b, device_greedy(l, V, bits, first));
			else
				got = capy_sampler_next_top_masked(b, v, ids, device_list(l, V, bits, temp, v, ids, &r), first);
			same += want == got;
			outside += !capy_mask_has(bits, got);
			total++;
		}
		capy_sampler_free(a);
		capy_sampler_free(b);
	}
	CHECK_MSG(same == total && !outside, "%d of %d the same, %d outside the mask", same, total, outside);
}

int main(void)
{
	RUN(test_greedy);
	RUN(test_seed);
	RUN(test_distribution);
	RUN(test_filters);
	RUN(test_penalties);
	RUN(test_device_half);
	RUN(test_masked);
	RUN(test_device_half_masked);
	return test_summary();
}
