/* expert-cache.c - the expert cache's policy (expert-cache.h): decayed-frequency scores in
 * the log domain, a min-heap of the residents by score, the step's uses gathered per step;
 * with adaptive, a second instance (the other policy) as a shadow. */
#include "expert-cache.h"
#include "../core.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* adaptive: steps over which the modelled costs decay (1 - 1/window a step), and the least
 * number of steps between two switches */
#define ADAPT_WINDOW 128
/* adaptive: the shadow must be cheaper by this share to be followed */
#define ADAPT_GAIN 0.1

struct capy_expert_cache {
	struct capy_expert_cache_params p;
	uint64_t n;           /* layers x experts; expert (l, e) is index l * experts + e */
	double *key;          /* log2(score) + t_last / half_life; -inf: never used */
	int64_t *hpos;        /* position in heap, -1: not resident */
	uint32_t *uses;       /* this step's uses */
	uint64_t *touched, nt; /* the experts used this step */
	uint64_t *heap, nh;   /* residents, coldest on top */
	struct cand {
		double key;
		uint64_t x;
	} *cand;              /* scratch: this step's non-resident candidates */
	uint64_t t;
	double log_margin;
	struct capy_expert_cache_stats st;
	/* adaptive */
	uint32_t *miss_layer;  /* this step's distinct missed experts, per layer */
	double cost;           /* this policy's decayed modelled CPU cost (expert reads) */
	struct capy_expert_cache *shadow; /* the other policy (NULL in the shadow itself) */
	uint64_t since;        /* steps since the last switch */
};

/* a colder than b: lower key, or the same key and the higher index (ties keep the lower). */
static bool colder(const struct capy_expert_cache *c, uint64_t a, uint64_t b)
{
	return c->key[a] < c->key[b] || (c->key[a] == c->key[b] && a > b);
}

static void heap_set(struct capy_expert_cache *c, uint64_t i, uint64_t x)
{
	c->heap[i] = x;
	c->hpos[x] = (int64_t)i;
}

static void sift_up(struct capy_expert_cache *c, uint64_t i)
{
	uint64_t x = c->heap[i];

	while (i > 0) {
		uint64_t parent = (i - 1) / 2;
		if (!colder(c, x, c->heap[parent]))
			break;
		heap_set(c, i, c->heap[parent]);
		i = parent;
	}
	heap_set(c, i, x);
}

static void sift_down(struct capy_expert_cache *c, uint64_t i)
{
	uint64_t x = c->heap[i];

	for (;;) {
		uint64_t l = 2 * i + 1, r = l + 1, m = i;
		uint64_t best = x;
		if (l < c->nh && colder(c, c->heap[l], best)) {
			m = l;
			best = c->heap[l];
		}
		if (r < c->nh && colder(c, c->heap[r], best))
			m = r;
		if (m == i)
			break;
		heap_set(c, i, c->heap[m]);
		i = m;
	}
	heap_set(c, i, x);
}

static void heap_push(struct capy_expert_cache *c, uint64_t x)
{
	c->heap[c->nh] = x;
	c->hpos[x] = (int64_t)c->nh;
	sift_up(c, c->nh++);
}

static uint64_t heap_pop(struct capy_expert_cache *c)
{
	uint64_t top = c->heap[0];

	c->hpos[top] = -1;
	if (--c->nh) {
		heap_set(c, 0, c->heap[c->nh]);
		sift_down(c, 0);
	}
	return top;
}

static int policy_new(struct capy_expert_cache **out, const struct capy_expert_cache_params *p,
		      struct capy_err *err)
{
	struct capy_expert_cache *c;
	uint64_t n = (uint64_t)p->layers * p->experts;

	*out = NULL;
	if (!p->layers || !p->experts || n > (1ull << 32))
		return capy_err_set(err, CAPY_EINVAL, "expert cache: %u layers x %u experts", p->layers, p->experts);
	if (!(c = calloc(1, sizeof(*c))))
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	c->p = *p;
	if (!(c->p.half_life > 0))
		c->p.half_life = 32;
	if (!(c->p.margin >= 1))
		c->p.margin = 1.25;
	if (!(c->p.job_cost > 0))
		c->p.job_cost = 3.5;
	c->log_margin = log2(c->p.margin);
	c->n = n;
	c->key = malloc(n * sizeof(*c->key));
	c->hpos = malloc(n * sizeof(*c->hpos));
	c->uses = calloc(n, sizeof(*c->uses));
	c->touched = malloc(n * sizeof(*c->touched));
	c->heap = malloc(n * sizeof(*c->heap));
	c->cand = malloc(n * sizeof(*c->cand));
	c->miss_layer = calloc(p->layers, sizeof(*c->miss_layer));
	if (!c->key || !c->hpos || !c->uses || !c->touched || !c->heap || !c->cand || !c->miss_layer) {
		capy_expert_cache_free(c);
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	}
	for (uint64_t i = 0; i < n; i++) {
		c->key[i] = -INFINITY;
		c->hpos[i] = -1;
	}
	*out = c;
	return 0;
}

int capy_expert_cache_new(struct capy_expert_cache **out, const struct capy_expert_cache_params *p,
			  struct capy_err *err)
{
	struct capy_expert_cache_params q = *p;
	int rc;

	if ((rc = policy_new(out, p, err)) < 0 || !p->adaptive)
		return rc;
	q.whole_layers = !p->whole_layers;
	q.adaptive = false;
	if ((rc = policy_new(&(*out)->shadow, &q, err)) < 0) {
		capy_expert_cache_free(*out);
		*out = NULL;
	}
	return rc;
}

void capy_expert_cache_free(struct capy_expert_cache *c)
{
	if (!c)
		return;
	free(c->key);
	free(c->hpos);
	free(c->uses);
	free(c->touched);
	free(c->heap);
	free(c->cand);
	free(c->miss_layer);
	capy_expert_cache_free(c->shadow);
	free(c);
}

bool capy_expert_cache_resident(const struct capy_expert_cache *c, uint32_t layer, uint32_t expert)
{
	return layer < c->p.layers && expert < c->p.experts && c->hpos[(uint64_t)layer * c->p.experts + expert] >= 0;
}

void capy_expert_cache_route(struct capy_expert_cache *c, uint32_t layer, const int32_t *ids, uint64_t n)
{
	if (layer >= c->p.layers)
		return;
	if (c->shadow)
		capy_expert_cache_route(c->shadow, layer, ids, n);
	for (uint64_t i = 0; i < n; i++) {
		if (ids[i] < 0 || (uint32_t)ids[i] >= c->p.experts)
			continue;
		uint64_t x = (uint64_t)layer * c->p.experts + (uint32_t)ids[i];
		if (c->hpos[x] >= 0)
			c->st.hits++;
		else
			c->st.misses++;
		if (c->uses[x]++ == 0) {
			c->touched[c->nt++] = x;
			c->miss_layer[layer] += c->hpos[x] < 0;
		}
	}
}

/* Hottest first: the higher key, then the lower index (colder()'s order, reversed). */
static int by_heat(const void *pa, const void *pb)
{
	const struct cand *a = pa, *b = pb;

	if (a->key != b->key)
		return a->key > b->key ? -1 : 1;
	return a->x < b->x ? -1 : a->x > b->x;
}

static void record(struct capy_expert_swap *swaps, uint64_t cap, uint64_t i, const struct capy_expert_cache *c,
		   uint64_t load, int64_t evict)
{
	if (!swaps || i >= cap)
		return;
	swaps[i].layer = (uint32_t)(load / c->p.experts);
	swaps[i].load = (int32_t)(load % c->p.experts);
	swaps[i].layer_evict = evict < 0 ? swaps[i].layer : (uint32_t)((uint64_t)evict / c->p.experts);
	swaps[i].evict = evict < 0 ? -1 : (int32_t)((uint64_t)evict % c->p.experts);
}

uint64_t capy_expert_cache_start(struct capy_expert_cache *c, struct capy_expert_swap *swaps, uint64_t cap)
{
	uint64_t made = 0;

	if (c->shadow)
		capy_expert_cache_start(c->shadow, NULL, 0);
	if (!c->p.whole_layers || c->st.steps || c->nh)
		return 0;
	/* a whole layer's experts are the hottest there are: they leave only when slots do */
	const uint64_t n = CAPY_MIN((uint64_t)c->p.layers, c->p.slots / c->p.experts) * c->p.experts;
	for (uint64_t x = 0; x < n; x++) {
		c->key[x] = INFINITY;
		heap_push(c, x);
		record(swaps, cap, made++, c, x, -1);
		c->st.loads++;
	}
	return made;
}

/* The step's uses into the scores, then its replacements (the policy itself). */
static uint64_t policy_step(struct capy_expert_cache *c, struct capy_expert_swap *swaps, uint64_t cap)
{
	const double now = (double)c->t / c->p.half_life;
	uint64_t nc = 0, made = 0;

	/* The step's uses into the scores: score(now) = 2^(key - now) + uses. */
	for (uint64_t i = 0; i < c->nt; i++) {
		uint64_t x = c->touched[i];
		double s = c->key[x] == -INFINITY ? 0 : exp2(c->key[x] - now);
		c->key[x] = log2(s + c->uses[x]) + now;
		c->uses[x] = 0;
		if (c->hpos[x] >= 0)
			sift_down(c, (uint64_t)c->hpos[x]); /* hotter: moves away from the top */
		else
			c->cand[nc++] = (struct cand){ c->key[x], x };
	}
	c->nt = 0;
	qsort(c->cand, nc, sizeof(*c->cand), by_heat);
	for (uint64_t i = 0; i < nc; i++) {
		uint64_t x = c->cand[i].x;
		if (c->p.max_swaps && made >= c->p.max_swaps)
			break;
		if (c->nh < c->p.slots) {
			heap_push(c, x);
			record(swaps, cap, made++, c, x, -1);
			c->st.loads++;
			continue;
		}
		if (!c->nh || !(c->key[x] > c->key[c->heap[0]] + c->log_margin))
			break; /* the rest are colder still */
		uint64_t out = heap_pop(c);
		heap_push(c, x);
		record(swaps, cap, made++, c, x, (int64_t)out);
		c->st.loads++;
		c->st.evictions++;
	}
	memset(c->miss_layer, 0, c->p.layers * sizeof(*c->miss_layer));
	c->t++;
	c->st.steps++;
	return made;
}

/* The step's modelled CPU cost under this policy (a job per layer with a miss, a read per
 * missed expert), into its decayed sum. */
static void add_step_cost(struct capy_expert_cache *c)
{
	double cost = 0;

	for (uint32_t l = 0; l < c->p.layers; l++)
		if (c->miss_layer[l])
			cost += c->p.job_cost + c->miss_layer[l];
	c->cost = c->cost * (1.0 - 1.0 / ADAPT_WINDOW) + cost;
}

static int by_index(const void *pa, const void *pb)
{
	const uint64_t a = *(const uint64_t *)pa, b = *(const uint64_t *)pb;

	return a < b ? -1 : a > b;
}

/* The replacements that take c's residency to s's (which holds at least as many): each
 * expert only c holds gives its slot to one only s holds, in index order, the rest of s's
 * into free slots. Returns how many (none when more than cap, with swaps). */
static uint64_t transition(struct capy_expert_cache *c, const struct capy_expert_cache *s,
			   struct capy_expert_swap *swaps, uint64_t cap)
{
	/* scratch: c's candidates (free between steps), 2n words */
	uint64_t *out = (uint64_t *)c->cand, *in = out + c->n, ne = 0, nl = 0;

	for (uint64_t i = 0; i < c->nh; i++)
		if (s->hpos[c->heap[i]] < 0)
			out[ne++] = c->heap[i];
	for (uint64_t i = 0; i < s->nh; i++)
		if (c->hpos[s->heap[i]] < 0)
			in[nl++] = s->heap[i];
	if (swaps && nl > cap)
		return 0;
	qsort(out, ne, sizeof(*out), by_index);
	qsort(in, nl, sizeof(*in), by_index);
	for (uint64_t i = 0; i < nl; i++)
		record(swaps, cap, i, c, in[i], i < ne ? (int64_t)out[i] : -1);
	c->st.loads += nl;
	c->st.evictions += ne;
	return nl;
}

/* The shadow becomes the policy followed and the followed one the shadow; the counts, which
 * are the engine's, stay. */
static void swap_roles(struct capy_expert_cache *c)
{
	struct capy_expert_cache *s = c->shadow, t = *c;
	struct capy_expert_cache_stats st = t.st;

	*c = *s;
	*s = t;
	c->shadow = s;
	s->shadow = NULL;
	s->st = c->st;
	c->st = st;
	c->since = 0;
	c->st.switches++;
}

uint64_t capy_expert_cache_step(struct capy_expert_cache *c, struct capy_expert_swap *swaps, uint64_t cap)
{
	struct capy_expert_cache *s = c->shadow;
	uint64_t made;

	if (!s)
		return policy_step(c, swaps, cap);
	add_step_cost(c);
	add_step_cost(s);
	policy_step(s, NULL, 0);
	if (++c->since >= ADAPT_WINDOW && s->cost < c->cost * (1 - ADAPT_GAIN) && s->nh >= c->nh &&
	    (made = transition(c, s, swaps, cap)) > 0) {
		const uint64_t loads = c->st.loads, evictions = c->st.evictions;
		policy_step(c, NULL, 0); /* it goes on as the shadow, its scores up to date */
		c->st.loads = loads;
		c->st.evictions = evictions;
		swap_roles(c);
		return made;
	}
	return policy_step(c, swaps, cap);
}

uint64_t capy_expert_cache_resize(struct capy_expert_cache *c, uint64_t slots)
{
	uint64_t ev = 0;

	if (c->shadow)
		capy_expert_cache_resize(c->shadow, slots);
	c->p.slots = slots;
	while (c->nh > slots) {
		uint64_t x = heap_pop(c);
		if (c->key[x] == INFINITY) /* a whole layer's: an ordinary expert from now on */
			c->key[x] = (double)c->t / c->p.half_life;
		ev++;
	}
	c->st.evictions += ev;
	return ev;
}

void capy_expert_cache_stats(const struct capy_expert_cache *c, struct capy_expert_cache_stats *s)
{
	*s = c->st;
	s->resident = c->nh;
	s->whole_layers = c->p.whole_layers;
}
