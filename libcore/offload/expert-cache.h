/* expert-cache.h - which routed experts live in the GPU's expert slots: the policy of the
 * expert cache of an offloading engine (issue 10), kept apart from the copies that carry it
 * out, so that it can be judged on routing traces alone (bench/expert-cache-bench.c).
 *
 *	struct capy_expert_cache *c;
 *	capy_expert_cache_new(&c, &(struct capy_expert_cache_params){ .layers = 48, .experts = 512,
 *			      .slots = 4096 }, &err);
 *	for each step:
 *		for each MoE layer l: capy_expert_cache_route(c, l, ids, n_tokens * k);
 *		n = capy_expert_cache_step(c, swaps, cap);  // then copy swaps[i].load over .evict
 *
 * The policy: every expert has a score, its routed uses decayed exponentially with the step
 * count (each use counts 1, halved every half_life steps): frequency that follows recency.
 * One pool of slots serves every layer. While slots are free, every expert that is routed
 * and not resident takes one. When none is free, after each step the experts routed in it
 * that are not resident are taken hottest first, and each replaces the coldest resident if
 * its score exceeds that one's by the factor margin (hysteresis: two experts of about the
 * same heat do not keep trading places), at most max_swaps per step (the copy budget of a
 * step). Ties go to the lower (layer, expert). Everything depends on the routing only, never
 * on timing: the same trace gives the same residency, and where an expert is changes only
 * the speed of a step, never its result (the engine computes both sides exactly alike).
 *
 * With whole_layers, the slots first hold whole layers, as many as fit (the lowest first;
 * capy_expert_cache_start names their loads), and only the slots left over follow the scores
 * above: a layer whose experts are all resident hands nothing to the CPU, and a CPU job has a
 * fixed cost (the hand-off and the threads' start, tens of microseconds) beside its experts'
 * reads, so where routing is close to uniform a few whole layers beat the same slots spread
 * over every layer (docs/perf.md). Those experts are never evicted for heat, only when the
 * slots shrink (the highest layer's first).
 *
 * With adaptive, the cache runs the other policy too, as a shadow on the same routing that
 * copies nothing, and models what each policy's misses cost the CPU in every step: a CPU job
 * for every layer with a miss (job_cost, in expert reads) plus one read a missed expert. The
 * costs are decayed over ADAPT_WINDOW steps (expert-cache.c); when the shadow's is lower by
 * more than a tenth, at least that many steps after the last switch, the policies trade
 * places: that step's swaps move the residency to the shadow's in one burst (it may exceed
 * max_swaps), and the policy that was followed becomes the shadow. Still a function of the
 * routing alone. Which policy wins depends on the routing's skew (docs/perf.md).
 *
 * Scores are kept as key = log2(score) + t / half_life at the step t of the last use, which
 * orders experts at any later step the way their decayed scores do (a common factor
 * 2^(-t/half_life) drops out), so an expert's key changes only when it is used.
 */
#ifndef CAPY_EXPERT_CACHE_H
#define CAPY_EXPERT_CACHE_H

#include "../util/err.h"

#include <stdbool.h>
#include <stdint.h>

struct capy_expert_cache_params {
	uint32_t layers;   /* MoE layers */
	uint32_t experts;  /* routed experts per layer */
	uint64_t slots;    /* expert slots on the GPU, all layers together */
	double half_life;  /* steps over which a use's weight halves (<= 0: 32) */
	double margin;     /* a newcomer must be this many times hotter than the coldest (< 1: 1.25) */
	uint32_t max_swaps; /* replacements per step (0: no limit) */
	bool whole_layers;  /* whole layers first (above); with adaptive, the policy to start with */
	bool adaptive;      /* follow the cheaper of the two policies (above) */
	double job_cost;    /* adaptive: a CPU job's fixed cost in expert reads (<= 0: 3.5) */
};

/* A replacement decided by capy_expert_cache_step: load expert (layer, load) into the slot
 * of (layer_evict, evict); evict == -1 where the slot was free. */
struct capy_expert_swap {
	uint32_t layer, layer_evict;
	int32_t load, evict;
};

struct capy_expert_cache_stats {
	uint64_t steps, hits, misses; /* per routed (token, expert): resident when routed or not */
	uint64_t loads, evictions;
	uint64_t resident;
	uint64_t switches;  /* adaptive: times the policies traded places */
	bool whole_layers;  /* the policy followed now */
};

struct capy_expert_cache;

int capy_expert_cache_new(struct capy_expert_cache **out, const struct capy_expert_cache_params *p,
			  struct capy_err *err);
void capy_expert_cache_free(struct capy_expert_cache *c);

bool capy_expert_cache_resident(const struct capy_expert_cache *c, uint32_t layer, uint32_t expert);

/* The loads to make before the first step (with whole_layers: the whole layers' experts,
 * else none), at most cap written to swaps; returns how many. Call once, after new. */
uint64_t capy_expert_cache_start(struct capy_expert_cache *c, struct capy_expert_swap *swaps, uint64_t cap);

/* One layer's routing in the current step: n expert ids (tokens x k, any order), each a hit
 * or a miss against the residency the step started with. Ids out of range are ignored. */
void capy_expert_cache_route(struct capy_expert_cache *c, uint32_t layer, const int32_t *ids, uint64_t n);

/* The step is over: scores take its uses, the clock advances, and the replacements are
 * decided and applied. Up to cap of them are written to swaps (NULL: none written);
 * returns how many were made. */
uint64_t capy_expert_cache_step(struct capy_expert_cache *c, struct capy_expert_swap *swaps, uint64_t cap);

/* A new number of slots (the elastic budget: a growing context takes slots, a finished one
 * gives them back); shrinking evicts the coldest residents first. Returns the evictions. */
uint64_t capy_expert_cache_resize(struct capy_expert_cache *c, uint64_t slots);

void capy_expert_cache_stats(const struct capy_expert_cache *c, struct capy_expert_cache_stats *s);

#endif
