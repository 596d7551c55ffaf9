/* sample.c - token sampling (see sample.h). */
#include "sample.h"
#include "../util/rng.h"

#include <math.h>

struct cand {
	float logit;
	int32_t id;
};

struct capy_sampler {
	struct capy_sampler_params p;
	uint64_t vocab;
	struct capy_rng rng;
	uint32_t *out_count; /* occurrences in the output */
	uint8_t *seen;       /* in the prompt or the output */
	struct cand *c;
};

int capy_sampler_new(struct capy_sampler **out, uint64_t vocab, const struct capy_sampler_params *p,
		     struct capy_err *err)
{
	struct capy_sampler *s = calloc(1, sizeof(*s));

	if (!s)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	s->p = *p;
	s->vocab = vocab;
	s->out_count = calloc(vocab, sizeof(*s->out_count));
	s->seen = calloc(vocab, 1);
	s->c = calloc(vocab, sizeof(*s->c));
	if (!s->out_count || !s->seen || !s->c) {
		capy_sampler_free(s);
		return capy_err_set(err, CAPY_ENOMEM, "out of memory for a sampler of %" PRIu64 " tokens", vocab);
	}
	if (!(p->temperature >= 0) || !(p->top_p >= 0 && p->top_p <= 1) || !(p->min_p >= 0 && p->min_p <= 1) ||
	    p->top_k < 0 || !(p->repetition_penalty >= 0) || !isfinite(p->presence_penalty) ||
	    !isfinite(p->frequency_penalty)) {
		capy_sampler_free(s);
		return capy_err_set(err, CAPY_EINVAL, "sampling parameters out of range");
	}
	capy_rng_seed(&s->rng, p->seed);
	*out = s;
	return 0;
}

void capy_sampler_free(struct capy_sampler *s)
{
	if (!s)
		return;
	free(s->out_count);
	free(s->seen);
	free(s->c);
	free(s);
}

void capy_sampler_prompt(struct capy_sampler *s, const int32_t *ids, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		if (ids[i] >= 0 && (uint64_t)ids[i] < s->vocab)
			s->seen[ids[i]] = 1;
}

static int cmp_cand(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;

	if (x->logit != y->logit)
		return x->logit > y->logit ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

static void penalize(struct capy_sampler *s, float *l)
{
	const struct capy_sampler_params *p = &s->p;
	bool rep = p->repetition_penalty > 0 && p->repetition_penalty != 1;

	if (!rep && !p->presence_penalty && !p->frequency_penalty)
		return;
	for (uint64_t i = 0; i < s->vocab; i++) {
		if (rep && s->seen[i])
			l[i] = l[i] > 0 ? l[i] / p->repetition_penalty : l[i] * p->repetition_penalty;
		if (s->out_count[i])
			l[i] -= p->presence_penalty + p->frequency_penalty * (float)s->out_count[i];
	}
}

static int32_t record(struct capy_sampler *s, int32_t id)
{
	s->out_count[id]++;
	s->seen[id] = 1;
	return id;
}

/* The distribution over the candidates s->c[0..n) (every token within e^-40 of the best
 * after temperature, unsorted): sorted, cut by top-k, top-p and min-p; returns how many are
 * kept, their weights being exp(logit - s->c[0].logit) (*sum in all). */
static uint64_t kept_sorted(struct capy_sampler *s, uint64_t n, double *sum_out)
{
	const struct capy_sampler_params *p = &s->p;
	double sum = 0;
	float mx;

	qsort(s->c, n, sizeof(*s->c), cmp_cand);
	if (p->top_k > 0 && (uint64_t)p->top_k < n)
		n = (uint64_t)p->top_k;
	mx = s->c[0].logit;
	for (uint64_t i = 0; i < n; i++)
		sum += exp((double)(s->c[i].logit - mx));
	if (p->top_p > 0 && p->top_p < 1) {
		double keep = 0;
		uint64_t m = 0;
		while (m < n) {
			keep += exp((double)(s->c[m].logit - mx)) / sum;
			m++;
			if (keep >= p->top_p)
				break;
		}
		n = m;
	}
	if (p->min_p > 0) {
		/* Keep tokens whose probability is at least min_p times the top one's. */
		uint64_t m = 1;
		while (m < n && exp((double)(s->c[m].logit - mx)) >= p->min_p)
			m++;
		n = m;
	}
	sum = 0;
	for (uint64_t i = 0; i < n; i++)
		sum += exp((double)(s->c[i].logit - mx));
	*sum_out = sum;
	return n;
}

/* One draw from the kept candidates s->c[0..n) of weights summing to sum, leaving out the one
 * at index skip (n or more: none; then sum must not count it). */
static int32_t draw_kept(struct capy_sampler *s, uint64_t n, double sum, uint64_t skip)
{
	float mx = s->c[0].logit;
	double u = capy_rng_uniform(&s->rng) * sum, acc = 0;
	uint64_t last = n;

	for (uint64_t i = 0; i < n; i++) {
		if (i == skip)
			continue;
		acc += exp((double)(s->c[i].logit - mx));
		last = i;
		if (u < acc)
			return record(s, s->c[i].id);
	}
	return record(s, s->c[last < n ? last : n - 1].id);
}

static int32_t draw_sorted(struct capy_sampler *s, uint64_t n)
{
	double sum;

	n = kept_sorted(s, n, &sum);
	return draw_kept(s, n, sum, n);
}

/* The candidates of logits l after penalties and temperature (see draw); 0 when every logit is
 * -inf. */
static uint64_t candidates(struct capy_sampler *s, const float *l)
{
	const struct capy_sampler_params *p = &s->p;
	uint64_t m = 0;
	float mx = -INFINITY;

	for (uint64_t i = 0; i < s->vocab; i++)
		mx = fmaxf(mx, l[i] / p->temperature);
	if (mx == -INFINITY)
		return 0;
	for (uint64_t i = 0; i < s->vocab; i++) {
		float v = l[i] / p->temperature;
		if (v >= mx - 40.0f)
			s->c[m++] = (struct cand){ v, (int32_t)i };
	}
	return m;
}

/* The next token from logits l; first is the lowest id that may be drawn at all (greedy starts
 * from it, and it is the answer when every logit that may be drawn is -inf). */
static int32_t draw(struct capy_sampler *s, float *l, uint64_t first)
{
	const struct capy_sampler_params *p = &s->p;
	uint64_t n = s->vocab;

	penalize(s, l);
	if (p->temperature == 0 || p->top_k == 1) {
		uint64_t best = first;
		for (uint64_t i = first + 1; i < n; i++)
			if (l[i] > l[best])
				best = i;
		return record(s, (int32_t)best);
	}
	/* Candidates: tokens within e^-40 of the best after temperature. What is left out has a
	 * total probability below vocab * 4e-18, which no draw can resolve; sorting only the
	 * rest keeps a step cheap on a 248k vocabulary. Ties sort by id, so draws are
	 * reproducible. */
	if (!(n = candidates(s, l)))
		return record(s, (int32_t)first);
	return draw_sorted(s, n);
}

int32_t capy_sampler_next(struct capy_sampler *s, float *logits)
{
	return draw(s, logits, 0);
}

int64_t capy_sampler_mask_first(const uint32_t *allowed, uint64_t vocab)
{
	for (uint64_t w = 0; w * 32 < vocab; w++)
		if (allowed[w]) {
			uint64_t id = w * 32 + (uint64_t)__builtin_ctz(allowed[w]);
			return id < vocab ? (int64_t)id : -1;
		}
	return -1;
}

/* Disallowed logits to -inf (before the penalties: a penalty leaves -inf as it is); the lowest
 * allowed id, or -1 when none is. */
static int64_t apply_mask(const struct capy_sampler *s, float *l, const uint32_t *allowed)
{
	for (uint64_t w = 0; w * 32 < s->vocab; w++) {
		uint32_t bits = allowed[w];
		uint64_t end = CAPY_MIN(32, s->vocab - w * 32);
		if (bits == UINT32_MAX)
			continue;
		for (uint64_t j = 0; j < end; j++)
			if (!((bits >> j) & 1))
				l[w * 32 + j] = -INFINITY;
	}
	return capy_sampler_mask_first(allowed, s->vocab);
}

int32_t capy_sampler_next_masked(struct capy_sampler *s, float *logits, const uint32_t *allowed)
{
	if (!allowed)
		return draw(s, logits, 0);
	int64_t first = apply_mask(s, logits, allowed);
	return first < 0 ? -1 : draw(s, logits, (uint64_t)first);
}

enum capy_sample_mode capy_sampler_mode(const struct capy_sampler *s, float *temperature, int *top_k)
{
	const struct capy_sampler_params *p = &s->p;

	*temperature = p->temperature;
	*top_k = p->top_k;
	if ((p->repetition_penalty > 0 && p->repetition_penalty != 1) || p->presence_penalty || p->frequency_penalty)
		return CAPY_SAMPLE_HOST; /* the penalties need the sampler's counts */
	if (p->temperature == 0 || p->top_k == 1)
		return CAPY_SAMPLE_GREEDY;
	if (p->top_k > 0 && p->top_k <= CAPY_SAMPLE_TOP_K_MAX)
		return CAPY_SAMPLE_TOP_K;
	return CAPY_SAMPLE_HOST;
}

int32_t capy_sampler_take(struct capy_sampler *s, int32_t id)
{
	return record(s, id);
}

int32_t capy_sampler_next_top(struct capy_sampler *s, const float *v, const int32_t *ids, uint64_t n)
{
	return capy_sampler_next_top_masked(s, v, ids, n, 0);
}

int32_t capy_sampler_next_top_masked(struct capy_sampler *s, const float *v, const int32_t *ids, uint64_t n,
				     int32_t first)
{
	float mx = -INFINITY;
	uint64_t m = 0;

	for (uint64_t i = 0; i < n; i++)
		mx = fmaxf(mx, v[i]);
	if (mx == -INFINITY) /* nothing finite: draw()'s answer, the first id that may be drawn */
		return record(s, first);
	for (uint64_t i = 0; i < n && m < s->vocab; i++)
		if (v[i] >= mx - 40.0f)
			s->c[m++] = (struct cand){ v[i], ids[i] };
	return draw_sorted(s, m);
}

int32_t capy_sampler_verify(struct capy_sampler *s, float *logits, int32_t draft)
{
	const struct capy_sampler_params *p = &s->p;
	uint64_t n, d;
	double sum, pd;

	if (draft < 0 || (uint64_t)draft >= s->vocab)
		return capy_sampler_next(s, logits);
	/* Greedy: p is a point mass on the first maximum, so the rule accepts exactly the draft
	 * that is the argmax and otherwise gives the argmax, drawing nothing. */
	if (p->temperature == 0 || p->top_k == 1)
		return draw(s, logits, 0);
	penalize(s, logits);
	if (!(n = candidates(s, logits)))
		return record(s, 0); /* as draw(): nothing finite, the first id */
	n = kept_sorted(s, n, &sum);
	for (d = 0; d < n && s->c[d].id != draft; d++)
		;
	pd = d < n ? exp((double)(s->c[d].logit - s->c[0].logit)) : 0;
	/* Accept with probability p(draft) = pd / sum (one uniform, drawn whatever pd is). */
	if (capy_rng_uniform(&s->rng) * sum < pd)
		return record(s, draft);
	/* Rejected: the residual max(0, p - q) with q the point mass on the draft is p with the
	 * draft left out, renormalised. */
	return draw_kept(s, n, sum - pd, d);
}

int32_t capy_sampler_verify_q(struct capy_sampler *s, float *logits, int32_t draft, const float *q)
{
	const struct capy_sampler_params *p = &s->p;
	uint64_t n, d, last;
	double sum, pd, res = 0, u, acc = 0;
	float mx;

	if (!q)
		return capy_sampler_verify(s, logits, draft);
	if (draft < 0 || (uint64_t)draft >= s->vocab)
		return capy_sampler_next(s, logits);
	if (p->temperature == 0 || p->top_k == 1) /* greedy: as capy_sampler_verify */
		return draw(s, logits, 0);
	penalize(s, logits);
	if (!(n = candidates(s, logits)))
		return record(s, 0);
	n = kept_sorted(s, n, &sum);
	mx = s->c[0].logit;
	for (d = 0; d < n && s->c[d].id != draft; d++)
		;
	pd = d < n ? exp((double)(s->c[d].logit - mx)) / sum : 0;
	/* Accept with probability min(1, p(d) / q(d)) (one uniform, drawn whatever they are). */
	if (capy_rng_uniform(&s->rng) * (double)q[draft] < pd)
		return record(s, draft);
	/* The residual: p is zero outside the kept tokens, so max(0, p - q) is too. */
	for (uint64_t i = 0; i < n; i++)
		res += fmax(0, exp((double)(s->c[i].logit - mx)) / sum - (double)q[s->c[i].id]);
	if (!(res > 0)) /* p = q up to rounding: nothing left to correct */
		return draw_kept(s, n, sum, n);
	u = capy_rng_uniform(&s->rng) * res;
	last = 0;
	for (uint64_t i = 0; i < n; i++) {
		double r = fmax(0, exp((double)(s->c[i].logit - mx)) / sum - (double)q[s->c[i].id]);
		if (r <= 0)
			continue;
		acc += r;
		last = i;
		if (u < acc)
			break;
	}
	return record(s, s->c[last].id);
}
