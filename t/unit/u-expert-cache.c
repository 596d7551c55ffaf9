/* u-expert-cache.c - the expert cache's policy (libcore/offload/expert-cache.h): filling free
 * slots, decayed scores, the hysteresis margin, the swap budget, ties, shrinking, the
 * counters, and the heap implementation against a plain linear-scan model of the same rules
 * on random skewed traces, swap for swap. */
#include "test.h"
#include "offload/expert-cache.h"

#include <stdlib.h>
#include <string.h>

static struct capy_expert_cache *make(uint32_t layers, uint32_t experts, uint64_t slots, double hl, double margin,
				      uint32_t max_swaps)
{
	struct capy_expert_cache *c = NULL;
	struct capy_err err = { 0 };
	struct capy_expert_cache_params p = { .layers = layers, .experts = experts, .slots = slots, .half_life = hl,
					      .margin = margin, .max_swaps = max_swaps };

	CHECK_MSG(capy_expert_cache_new(&c, &p, &err) == 0, "%s", err.msg);
	return c;
}

/* One step of one layer routing the given experts, then the step's end. */
static uint64_t step1(struct capy_expert_cache *c, uint32_t layer, const int32_t *ids, uint64_t n,
		      struct capy_expert_swap *sw, uint64_t cap)
{
	capy_expert_cache_route(c, layer, ids, n);
	return capy_expert_cache_step(c, sw, cap);
}

static void test_fill_and_hits(void)
{
	struct capy_expert_cache *c = make(2, 8, 3, 64, 1.25, 0);
	struct capy_expert_swap sw[8];
	struct capy_expert_cache_stats st;
	const int32_t a[] = { 1, 5, 1, 99, -1 }; /* 99 and -1 are out of range: ignored */

	CHECK(step1(c, 0, a, 5, sw, 8) == 2);
	CHECK(sw[0].layer == 0 && sw[0].load == 1 && sw[0].evict == -1); /* used twice: hottest first */
	CHECK(sw[1].load == 5 && sw[1].evict == -1);
	CHECK(capy_expert_cache_resident(c, 0, 1) && capy_expert_cache_resident(c, 0, 5));
	CHECK(!capy_expert_cache_resident(c, 1, 1) && !capy_expert_cache_resident(c, 0, 99));
	const int32_t b[] = { 1, 2 };
	/* layer 1's two, tied: the lower takes the last slot; the other is not 1.25x hotter than
	 * the coldest resident (0, 5) */
	CHECK(step1(c, 1, b, 2, sw, 8) == 1);
	CHECK(sw[0].layer == 1 && sw[0].load == 1 && sw[0].evict == -1);
	CHECK(capy_expert_cache_resident(c, 1, 1) && !capy_expert_cache_resident(c, 1, 2));
	capy_expert_cache_stats(c, &st);
	CHECK_MSG(st.hits == 0 && st.misses == 5 && st.steps == 2 && st.resident == 3, "hits %llu misses %llu",
		  (unsigned long long)st.hits, (unsigned long long)st.misses);
	const int32_t d[] = { 1, 5 };
	step1(c, 0, d, 2, sw, 8);
	capy_expert_cache_stats(c, &st);
	CHECK(st.hits == 2 && st.misses == 5);
	capy_expert_cache_free(c);
}

/* Full slots: a newcomer used once does not displace an expert used often; one used often
 * enough does, and the one it displaces is the coldest. */
static void test_margin_and_coldest(void)
{
	struct capy_expert_cache *c = make(1, 16, 2, 1000, 2.0, 0);
	struct capy_expert_swap sw[4];
	const int32_t hot[] = { 0, 0, 0, 0, 1, 1 }, once[] = { 7 }, many[] = { 9, 9, 9, 9, 9, 9, 9, 9, 9 };

	step1(c, 0, hot, 6, sw, 4); /* 0 (4 uses) and 1 (2 uses) resident */
	CHECK(step1(c, 0, once, 1, sw, 4) == 0);
	CHECK(!capy_expert_cache_resident(c, 0, 7));
	CHECK(step1(c, 0, many, 9, sw, 4) == 1);
	CHECK_MSG(sw[0].load == 9 && sw[0].evict == 1, "loaded %d evicted %d", sw[0].load, sw[0].evict);
	CHECK(capy_expert_cache_resident(c, 0, 0) && capy_expert_cache_resident(c, 0, 9));
	capy_expert_cache_free(c);
}

/* Decay: many uses long ago lose to a few recent ones. */
static void test_decay(void)
{
	struct capy_expert_cache *c = make(1, 8, 1, 2, 1.0, 0);
	struct capy_expert_swap sw[2];
	const int32_t old[] = { 3, 3, 3, 3, 3, 3, 3, 3 }, recent[] = { 4, 4 };

	step1(c, 0, old, 8, sw, 2);
	CHECK(capy_expert_cache_resident(c, 0, 3));
	step1(c, 0, recent, 2, sw, 2); /* 8 vs 2 now: stays */
	CHECK(capy_expert_cache_resident(c, 0, 3));
	for (int i = 0; i < 10; i++) /* 20 steps of half-life 2: 8 * 2^-10 */
		capy_expert_cache_step(c, NULL, 0);
	CHECK(step1(c, 0, recent, 2, sw, 2) == 1 && sw[0].load == 4 && sw[0].evict == 3);
	capy_expert_cache_free(c);
}

/* The copy budget and ties: at equal heat the lower index goes first. */
static void test_budget_and_ties(void)
{
	struct capy_expert_cache *c = make(2, 8, 8, 64, 1.25, 2);
	struct capy_expert_swap sw[8];
	const int32_t ids[] = { 6, 2, 4 };

	capy_expert_cache_route(c, 1, ids, 3);
	capy_expert_cache_route(c, 0, ids, 1);
	CHECK(capy_expert_cache_step(c, sw, 8) == 2);
	CHECK_MSG(sw[0].layer == 0 && sw[0].load == 6 && sw[1].layer == 1 && sw[1].load == 2,
		  "%u/%d then %u/%d", sw[0].layer, sw[0].load, sw[1].layer, sw[1].load);
	CHECK(!capy_expert_cache_resident(c, 1, 4) && !capy_expert_cache_resident(c, 1, 6));
	capy_expert_cache_free(c);
}

static void test_resize(void)
{
	struct capy_expert_cache *c = make(1, 8, 4, 64, 1.25, 0);
	const int32_t ids[] = { 0, 0, 0, 0, 1, 1, 1, 2, 2, 3 };
	struct capy_expert_cache_stats st;

	step1(c, 0, ids, 10, NULL, 0);
	CHECK(capy_expert_cache_resize(c, 2) == 2); /* 3 and 2 go, coldest first */
	CHECK(capy_expert_cache_resident(c, 0, 0) && capy_expert_cache_resident(c, 0, 1));
	CHECK(!capy_expert_cache_resident(c, 0, 2) && !capy_expert_cache_resident(c, 0, 3));
	CHECK(capy_expert_cache_resize(c, 6) == 0);
	const int32_t again[] = { 3 };
	CHECK(step1(c, 0, again, 1, NULL, 0) == 1); /* a free slot again */
	capy_expert_cache_stats(c, &st);
	CHECK(st.evictions == 2 && st.resident == 3 && st.loads == 5);
	capy_expert_cache_free(c);
}

/* Whole layers first: the layers that fit are loaded before the first step, lowest first; the
 * slot left over follows heat; heat never takes a whole layer's slot; shrinking takes the
 * highest whole layer's experts, which then compete as ordinary experts. */
static void test_whole_layers(void)
{
	struct capy_expert_cache *c = NULL;
	struct capy_err err = { 0 };
	struct capy_expert_cache_params p = { .layers = 3, .experts = 4, .slots = 9, .half_life = 8, .margin = 1.25,
					      .whole_layers = true };
	struct capy_expert_swap sw[16];
	struct capy_expert_cache_stats st;

	CHECK_MSG(capy_expert_cache_new(&c, &p, &err) == 0, "%s", err.msg);
	if (!c)
		return;
	CHECK(capy_expert_cache_start(c, sw, 16) == 8); /* layers 0 and 1 */
	CHECK(sw[0].layer == 0 && sw[0].load == 0 && sw[0].evict == -1 && sw[7].layer == 1 && sw[7].load == 3);
	CHECK(capy_expert_cache_start(c, sw, 16) == 0); /* once */
	for (uint32_t x = 0; x < 4; x++)
		CHECK(capy_expert_cache_resident(c, 0, x) && capy_expert_cache_resident(c, 1, x) &&
		      !capy_expert_cache_resident(c, 2, x));
	const int32_t hot[] = { 2, 2, 2, 2 }, other[] = { 1, 1, 1, 1, 1, 1 };
	CHECK(step1(c, 2, hot, 4, sw, 16) == 1); /* the free slot */
	CHECK(sw[0].layer == 2 && sw[0].load == 2 && sw[0].evict == -1);
	for (int i = 0; i < 20; i++) /* far hotter than anything of layers 0 and 1, never used */
		CHECK(step1(c, 2, other, 6, sw, 16) == (i == 0));
	CHECK(capy_expert_cache_resident(c, 2, 1) && !capy_expert_cache_resident(c, 2, 2)); /* heat vs heat */
	for (uint32_t x = 0; x < 4; x++)
		CHECK(capy_expert_cache_resident(c, 0, x) && capy_expert_cache_resident(c, 1, x));
	CHECK(capy_expert_cache_resize(c, 6) == 3); /* (2, 1), then layer 1's highest two */
	CHECK(!capy_expert_cache_resident(c, 2, 1) && !capy_expert_cache_resident(c, 1, 3) &&
	      !capy_expert_cache_resident(c, 1, 2) && capy_expert_cache_resident(c, 1, 1));
	capy_expert_cache_stats(c, &st);
	CHECK(st.loads == 10 && st.evictions == 4 && st.resident == 6);
	capy_expert_cache_free(c);
}

/* --- the same rules by linear scans -------------------------------------------------------- */

struct model {
	uint32_t E;
	uint64_t n, slots, t;
	double hl, lm;
	uint32_t max_swaps;
	double *key;
	uint32_t *uses;
	bool *res;
	uint64_t nres;
};

static bool m_colder(const struct model *m, uint64_t a, uint64_t b)
{
	return m->key[a] < m->key[b] || (m->key[a] == m->key[b] && a > b);
}

static uint64_t m_step(struct model *m, struct capy_expert_swap *sw)
{
	const double now = (double)m->t / m->hl;
	uint64_t made = 0;
	bool *cand = calloc(m->n, 1);

	for (uint64_t x = 0; x < m->n; x++)
		if (m->uses[x]) {
			double s = m->key[x] == -INFINITY ? 0 : exp2(m->key[x] - now);
			m->key[x] = log2(s + m->uses[x]) + now;
			m->uses[x] = 0;
			cand[x] = !m->res[x];
		}
	for (;;) {
		int64_t best = -1, cold = -1;
		for (uint64_t x = 0; x < m->n; x++)
			if (cand[x] && (best < 0 || m_colder(m, (uint64_t)best, x)))
				best = (int64_t)x;
		if (best < 0 || (m->max_swaps && made >= m->max_swaps))
			break;
		cand[best] = false;
		if (m->nres < m->slots) {
			m->res[best] = true;
			m->nres++;
			sw[made++] = (struct capy_expert_swap){ (uint32_t)(best / m->E), (uint32_t)(best / m->E),
								(int32_t)(best % m->E), -1 };
			continue;
		}
		for (uint64_t x = 0; x < m->n; x++)
			if (m->res[x] && (cold < 0 || m_colder(m, x, (uint64_t)cold)))
				cold = (int64_t)x;
		if (cold < 0 || !(m->key[best] > m->key[cold] + m->lm))
			break;
		m->res[cold] = false;
		m->res[best] = true;
		sw[made++] = (struct capy_expert_swap){ (uint32_t)(best / m->E), (uint32_t)(cold / m->E), (int32_t)(best % m->E),
							(int32_t)(cold % m->E) };
	}
	free(cand);
	m->t++;
	return made;
}

static void test_against_model(void)
{
	enum { L = 6, E = 64, K = 4 };
	const uint64_t slots[] = { 8, 40, 200 };
	uint64_t rng = 0x9e3779b97f4a7c15ull, diff = 0, swaps_total = 0;

	for (int si = 0; si < 3; si++) {
		struct capy_expert_cache *c = make(L, E, slots[si], 16, 1.25, si == 1 ? 3 : 0);
		struct model m = { E, (uint64_t)L * E, slots[si], 0, 16, log2(1.25), si == 1 ? 3 : 0, NULL, NULL, NULL, 0 };
		struct capy_expert_swap a[512], b[512];
		m.key = malloc(m.n * sizeof(double));
		m.uses = calloc(m.n, sizeof(uint32_t));
		m.res = calloc(m.n, sizeof(bool));
		for (uint64_t x = 0; x < m.n; x++)
			m.key[x] = -INFINITY;
		for (int step = 0; step < 400; step++) {
			for (uint32_t l = 0; l < (uint32_t)L; l++) {
				int32_t ids[3 * K];
				for (unsigned q = 0; q < 3 * K; q++) { /* skewed: the square of a uniform picks low ids */
					rng ^= rng << 13;
					rng ^= rng >> 7;
					rng ^= rng << 17;
					double u = (double)(rng >> 11) / 9007199254740992.0;
					ids[q] = (int32_t)((double)E * u * u);
					m.uses[(uint64_t)l * E + (uint64_t)ids[q]]++;
				}
				capy_expert_cache_route(c, l, ids, 3 * K);
			}
			uint64_t na = capy_expert_cache_step(c, a, 512), nb = m_step(&m, b);
			swaps_total += na;
			diff += na != nb || memcmp(a, b, na * sizeof(a[0])) != 0;
			for (uint32_t l = 0; l < (uint32_t)L; l++)
				for (uint32_t e = 0; e < (uint32_t)E; e++)
					diff += capy_expert_cache_resident(c, l, e) != m.res[(uint64_t)l * E + e];
		}
		capy_expert_cache_free(c);
		free(m.key);
		free(m.uses);
		free(m.res);
	}
	CHECK_MSG(diff == 0, "%llu differences from the linear-scan model", (unsigned long long)diff);
	CHECK(swaps_total > 100); /* the traces do exercise replacement */
}

/* --- adaptive: the two policies, the cheaper followed ------------------------------------- */

/* One adaptive run over a routing of L layers x E experts, k a token, T tokens; skew: each
 * token of a layer takes k of the layer's first 2k experts instead of any (uniform).
 * The GPU's side is mirrored from the swaps alone (each load into a free slot or the slot of
 * an evicted resident), and must be the cache's residency after every step. Returns the
 * policy followed at the end (whole layers or not); *switches gets the count. */
static bool adaptive_run(bool skew, bool start_layers, uint64_t T, uint64_t *switches, uint64_t *digest)
{
	enum { L = 4, E = 16, K = 4, SLOTS = 32 };
	struct capy_expert_cache *c = NULL;
	struct capy_err err = { 0 };
	struct capy_expert_cache_params p = { .layers = L, .experts = E, .slots = SLOTS, .max_swaps = 4,
					      .whole_layers = start_layers, .adaptive = true };
	struct capy_expert_swap sw[L * E];
	struct capy_expert_cache_stats st;
	bool mirror[L * E] = { 0 };
	uint64_t rng = 0x2545f4914f6cdd1dull, bad = 0, held = 0;

	*digest = 1469598103934665603ull;
	CHECK_MSG(capy_expert_cache_new(&c, &p, &err) == 0, "%s", err.msg);
	if (!c)
		return false;
	for (uint64_t n = capy_expert_cache_start(c, sw, L * E), i = 0; i < n; i++, held++)
		mirror[sw[i].layer * E + (uint32_t)sw[i].load] = true;
	for (uint64_t t = 0; t < T; t++) {
		for (uint32_t l = 0; l < L; l++) {
			int32_t ids[K];
			uint32_t n = 0;
			while (n < K) {
				rng ^= rng << 13;
				rng ^= rng >> 7;
				rng ^= rng << 17;
				const int32_t x = (int32_t)(rng % (skew ? 2 * K : E));
				bool dup = false;
				for (uint32_t j = 0; j < n; j++)
					dup |= ids[j] == x;
				if (!dup)
					ids[n++] = x;
			}
			capy_expert_cache_route(c, l, ids, K);
		}
		const uint64_t made = capy_expert_cache_step(c, sw, L * E);
		for (uint64_t i = 0; i < made; i++) {
			const uint64_t in = sw[i].layer * E + (uint32_t)sw[i].load;
			if (sw[i].evict >= 0) {
				const uint64_t out = sw[i].layer_evict * E + (uint32_t)sw[i].evict;
				bad += !mirror[out];
				mirror[out] = false;
			} else {
				bad += held++ >= SLOTS; /* a free slot must exist */
			}
			bad += mirror[in];
			mirror[in] = true;
			*digest = (*digest ^ (in * 131 + (uint64_t)(sw[i].evict + 1))) * 1099511628211ull;
		}
		for (uint32_t l = 0; l < L; l++)
			for (uint32_t x = 0; x < E; x++)
				bad += mirror[l * E + x] != capy_expert_cache_resident(c, l, x);
	}
	capy_expert_cache_stats(c, &st);
	CHECK_MSG(bad == 0, "adaptive (%s routing): %llu mismatches between the swaps and the residency",
		  skew ? "skewed" : "uniform", (unsigned long long)bad);
	CHECK(st.resident <= SLOTS && st.steps == T);
	*switches = st.switches;
	capy_expert_cache_free(c);
	return st.whole_layers;
}

/* Uniform routing: every layer keeps misses under the spread policy, so whole layers (half of
 * the jobs) win and are followed; routing that keeps to a few experts a layer fits the spread
 * cache (no misses) while whole layers leave two layers to the CPU: the spread policy wins.
 * Either way from either start, with at most one switch a window, the same swaps every run,
 * and the GPU's side mirrored exactly (adaptive_run). */
static void test_adaptive(void)
{
	uint64_t sw, d1, d2;

	CHECK(adaptive_run(false, false, 600, &sw, &d1) == true);
	CHECK(sw == 1);
	CHECK(adaptive_run(false, true, 600, &sw, &d1) == true);
	CHECK(sw == 0);
	CHECK(adaptive_run(true, true, 600, &sw, &d1) == false);
	CHECK(sw == 1);
	CHECK(adaptive_run(true, false, 600, &sw, &d1) == false);
	CHECK(sw == 0);
	adaptive_run(false, false, 600, &sw, &d1);
	adaptive_run(false, false, 600, &sw, &d2);
	CHECK(d1 == d2);
}

int main(void)
{
	RUN(test_fill_and_hits);
	RUN(test_margin_and_coldest);
	RUN(test_decay);
	RUN(test_budget_and_ties);
	RUN(test_resize);
	RUN(test_whole_layers);
	RUN(test_against_model);
	RUN(test_adaptive);
	return test_summary();
}
