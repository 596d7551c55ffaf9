/* expert-cache.c - the expert cache's policy (expert-cache.h): decayed-frequency scores in
 * the log domain, a min-heap of the residents by score, the step's uses gathered per step. */
#include "expert-cache.h"
#include "../core.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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

int capy_expert_cache_new(struct capy_expert_cache **out, const struct capy_expert_cache_params *p,
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
	c->log_margin = log2(c->p.margin);
	c->n = n;
	c->key = malloc(n * sizeof(*c->key));
	c->hpos = malloc(n * sizeof(*c->hpos));
	c->uses = calloc(n, sizeof(*c->uses));
	c->touched = malloc(n * sizeof(*c->touched));
	c->heap = malloc(n * sizeof(*c->heap));
	c->cand = malloc(n * sizeof(*c->cand));
	if (!c->key || !c->hpos || !c->uses || !c->touched || !c->heap || !c->cand) {
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
	for (uint64_t i = 0; i < n; i++) {
		if (ids[i] < 0 || (uint32_t)ids[i] >= c->p.experts)
			continue;
		uint64_t x = (uint64_t)layer * c->p.experts + (uint32_t)ids[i];
		if (c->hpos[x] >= 0)
			c->st.hits++;
		else
			c->st.misses++;
		if (c->uses[x]++ == 0)
			c->touched[c->nt++] = x;
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

uint64_t capy_expert_cache_step(struct capy_expert_cache *c, struct capy_expert_swap *swaps, uint64_t cap)
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
	c->t++;
	c->st.steps++;
	return made;
}

uint64_t capy_expert_cache_resize(struct capy_expert_cache *c, uint64_t slots)
{
	uint64_t ev = 0;

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
}
