/* expert-cache-bench.c - hit ratios of the expert cache's policy (libcore/offload/
 * expert-cache.h) on routing traces (bench/routing-trace.py), one token a step (batch 1).
 *
 *	expert-cache-bench TRACE... [--slots 0.05,0.125,0.25,0.5] [--half-life 32] [--copies N]
 *
 * For every trace and every cache size (a fraction of all layers' experts), the share of
 * routed (token, expert) pairs that found their expert resident, for:
 *   capy    the policy as shipped: decayed frequency (--half-life steps), margin 1.25
 * each allowed at most --copies replacements a step (0: any number; every replacement is an
 * expert copied to the GPU, and a PCIe link moves only a few per decode step),
 *   lru     the same code with a half-life of 0.01 steps: the last use decides (LRU)
 *   lfu     the same code without decay: the total count decides (LFU)
 *   static  the trace's most used experts over the whole trace, fixed from the start: an
 *           offline reference no online policy is promised to reach
 * and the replacements per token each policy made once its slots were full.
 *
 *	expert-cache-bench TRACE... --jobs [--job-us 52] [--expert-us 15] [--slots ...] [--copies N]
 *
 * compares the policy as shipped (experts: slots spread by heat over every layer) with
 * whole_layers (whole layers first, the rest by heat) and adaptive (auto: both, the one whose
 * modelled cost is lower followed; whole layers first) by what a batch-1 decode step pays on
 * the CPU: misses and CPU jobs (MoE layers with at least one miss) per token, and a model of
 * their time, jobs x job-us + misses x expert-us (defaults: a job's fixed cost and one
 * expert's read on 15 threads of the H200 host, docs/perf.md). */
#include "core.h"
#include "offload/expert-cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct trace {
	uint32_t L, E, K;
	uint64_t T;
	int32_t *ids; /* [T][L][K] */
};

static int load_trace(const char *path, struct trace *t)
{
	FILE *f = fopen(path, "rb");
	char magic[8];
	uint32_t h[4];

	if (!f) {
		fprintf(stderr, "expert-cache-bench: %s: cannot open\n", path);
		return -1;
	}
	if (fread(magic, 1, 8, f) != 8 || memcmp(magic, "CAPYRTR1", 8) || fread(h, 4, 4, f) != 4 ||
	    fread(&t->T, 8, 1, f) != 1) {
		fprintf(stderr, "expert-cache-bench: %s: not a routing trace (bench/routing-trace.py)\n", path);
		fclose(f);
		return -1;
	}
	t->L = h[0];
	t->E = h[1];
	t->K = h[2];
	uint64_t n = t->T * t->L * t->K;
	t->ids = malloc(n * sizeof(int32_t) + 1);
	if (!t->ids || fread(t->ids, 4, n, f) != n) {
		fprintf(stderr, "expert-cache-bench: %s: truncated at token data (%" PRIu64 " ids expected)\n", path, n);
		fclose(f);
		return -1;
	}
	fclose(f);
	return 0;
}

enum policy { P_EXPERTS, P_LAYERS, P_AUTO };
static const char *const policy_names[] = { "experts", "whole layers", "auto" };

/* Hit ratio of one policy; *swaps_per_token gets its replacements per token, *jobs (unless
 * NULL) the CPU jobs it left: (token, layer) pairs with a miss. opt: the command line's
 * parameters (max_swaps, job_cost), the rest filled in here. */
static double run_policy_as(const struct trace *t, const struct capy_expert_cache_params *opt, uint64_t slots,
			    double half_life, double margin, enum policy pol, double *swaps_per_token, uint64_t *jobs,
			    uint64_t *switches)
{
	struct capy_expert_cache *c;
	struct capy_err err = { 0 };
	struct capy_expert_cache_params p = *opt;
	struct capy_expert_cache_stats st;
	uint64_t swaps = 0, n_jobs = 0;

	p.layers = t->L;
	p.experts = t->E;
	p.slots = slots;
	p.half_life = half_life;
	p.margin = margin;
	p.whole_layers = pol != P_EXPERTS;
	p.adaptive = pol == P_AUTO;
	if (capy_expert_cache_new(&c, &p, &err) < 0) {
		fprintf(stderr, "expert-cache-bench: %s\n", err.msg);
		exit(1);
	}
	swaps = capy_expert_cache_start(c, NULL, 0);
	for (uint64_t tok = 0; tok < t->T; tok++) {
		for (uint32_t l = 0; l < t->L; l++) {
			const int32_t *ids = t->ids + (tok * t->L + l) * t->K;
			bool miss = false;
			for (uint32_t j = 0; j < t->K && !miss; j++)
				miss = !capy_expert_cache_resident(c, l, (uint32_t)ids[j]);
			n_jobs += miss;
			capy_expert_cache_route(c, l, ids, t->K);
		}
		swaps += capy_expert_cache_step(c, NULL, 0);
	}
	capy_expert_cache_stats(c, &st);
	capy_expert_cache_free(c);
	if (jobs)
		*jobs = n_jobs;
	if (switches)
		*switches = st.switches;
	/* replacements once the slots are full: the first fills are not copies a warm cache pays */
	*swaps_per_token = (double)(swaps - (st.resident < swaps ? st.resident : swaps)) / (double)t->T;
	return (double)st.hits / (double)(st.hits + st.misses);
}

/* The policy as shipped (spread by heat), for the hit-ratio table. */
static double run_policy(const struct trace *t, const struct capy_expert_cache_params *opt, uint64_t slots,
			 double half_life, double margin, double *swaps_per_token)
{
	return run_policy_as(t, opt, slots, half_life, margin, P_EXPERTS, swaps_per_token, NULL, NULL);
}

static int cmp_desc(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? 1 : x > y ? -1 : 0;
}

/* The fixed set of the trace's most used experts: the hits it would have. */
static double run_static(const struct trace *t, uint64_t slots)
{
	uint64_t n = (uint64_t)t->L * t->E, hits = 0, total = t->T * t->L * t->K;
	uint64_t *cnt = calloc(n, sizeof(*cnt)), *sorted = malloc(n * sizeof(*sorted));

	for (uint64_t tok = 0; tok < t->T; tok++)
		for (uint32_t l = 0; l < t->L; l++)
			for (uint32_t j = 0; j < t->K; j++)
				cnt[(uint64_t)l * t->E + (uint32_t)t->ids[(tok * t->L + l) * t->K + j]]++;
	memcpy(sorted, cnt, n * sizeof(*cnt));
	qsort(sorted, n, sizeof(*sorted), cmp_desc);
	for (uint64_t i = 0; i < slots && i < n; i++)
		hits += sorted[i];
	free(cnt);
	free(sorted);
	return (double)hits / (double)total;
}

static int usage(void)
{
	fprintf(stderr, "usage: expert-cache-bench TRACE... [--slots f,f,...] [--half-life steps] [--copies n]"
			" [--jobs [--job-us us] [--expert-us us]]\n");
	return 2;
}

int main(int argc, char **argv)
{
	double fr[16] = { 0.05, 0.125, 0.25, 0.5 }, hl = 32;
	int nf = 4;
	const char *traces[64];
	int nt = 0;
	bool jobs = false;
	double job_us = 52, expert_us = 15;
	struct capy_expert_cache_params opt = { 0 };

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--slots") && i + 1 < argc) {
			char *s = argv[++i], *end;
			for (nf = 0; nf < 16 && *s; nf++) {
				fr[nf] = strtod(s, &end);
				s = *end == ',' ? end + 1 : end;
			}
		} else if (!strcmp(argv[i], "--copies") && i + 1 < argc) {
			opt.max_swaps = (uint32_t)strtoul(argv[++i], NULL, 10);
		} else if (!strcmp(argv[i], "--jobs")) {
			jobs = true;
		} else if (!strcmp(argv[i], "--job-us") && i + 1 < argc) {
			job_us = strtod(argv[++i], NULL);
		} else if (!strcmp(argv[i], "--expert-us") && i + 1 < argc) {
			expert_us = strtod(argv[++i], NULL);
		} else if (!strcmp(argv[i], "--half-life") && i + 1 < argc) {
			hl = strtod(argv[++i], NULL);
		} else if (argv[i][0] != '-' && nt < 64) {
			traces[nt++] = argv[i];
		} else {
			return usage();
		}
	}
	if (!nt)
		return usage();
	/* the adaptive policy's model of a CPU job, in expert reads (0: its default) */
	opt.job_cost = expert_us > 0 ? job_us / expert_us : 0;
	if (jobs)
		printf("| trace | slots | policy | hits | misses / token | CPU jobs / token | CPU time / token (model) |"
		       " copies / token | switches |\n|---|---|---|---|---|---|---|---|---|\n");
	else
		printf("| trace | slots | capy | lru | lfu | static (offline) | copies / token: capy, lru, lfu |\n"
		       "|---|---|---|---|---|---|---|\n");
	for (int ti = 0; ti < nt; ti++) {
		struct trace t;
		const char *name = strrchr(traces[ti], '/') ? strrchr(traces[ti], '/') + 1 : traces[ti];
		if (load_trace(traces[ti], &t) < 0)
			return 1;
		for (int f = 0; f < nf; f++) {
			uint64_t slots = (uint64_t)(fr[f] * (double)t.L * t.E + 0.5);
			double sw, sw2, sw3;
			if (jobs) {
				for (int pol = P_EXPERTS; pol <= P_AUTO; pol++) {
					uint64_t n_jobs, n_sw;
					double h = run_policy_as(&t, &opt, slots, hl, 1.25, (enum policy)pol, &sw, &n_jobs, &n_sw);
					const double m = (1 - h) * t.L * t.K, j = (double)n_jobs / (double)t.T;
					printf("| %s | %.3g (%" PRIu64 ") | %s | %.1f %% | %.2f | %.2f | %.0f us | %.2f | %" PRIu64 " |\n",
					       name, fr[f], slots, policy_names[pol], 100 * h, m, j, j * job_us + m * expert_us, sw,
					       n_sw);
				}
				continue;
			}
			double capy = run_policy(&t, &opt, slots, hl, 1.25, &sw);
			double lru = run_policy(&t, &opt, slots, 0.01, 1.0, &sw2);
			double lfu = run_policy(&t, &opt, slots, 1e300, 1.0, &sw3);
			printf("| %s | %.3g (%" PRIu64 ") | %.1f %% | %.1f %% | %.1f %% | %.1f %% | %.2f, %.2f, %.2f |\n", name,
			       fr[f], slots, 100 * capy, 100 * lru, 100 * lfu, 100 * run_static(&t, slots), sw, sw2, sw3);
		}
		free(t.ids);
	}
	return 0;
}
