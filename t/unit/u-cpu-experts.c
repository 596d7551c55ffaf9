/* u-cpu-experts.c - the CPU side of expert offload: the topology read from fake sysfs trees
 * (t/fixtures/sysfs/) and this machine, the default expert threads, and the expert pool:
 * its results bitwise equal to the CPU backend's expert computation on the MoE fixtures'
 * real experts (1, 2, 3, 8 threads, 1..8 rows per expert, random misses), the word
 * protocol (a request word written with no wake-up, the done word), no CPU burnt while
 * idle, errors reported, clean shutdown. */
#include "test.h"
#include "test-fixture.h"

#include "cpu/expert.h"
#include "model/config.h"
#include "model/weights.h"
#include "offload/cpu-experts.h"
#include "quant/floats.h"
#include "quant/nvfp4.h"
#include "util/rng.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>

static struct capy_cpu_topology topo;

static int read_fixture(const char *name, const char *affinity)
{
	char root[4096], rel[256];
	struct capy_err err = { 0 };
	int rc;

	snprintf(rel, sizeof(rel), "sysfs/%s", name);
	test_fixture_path(rel, root, sizeof(root));
	rc = capy_cpu_topology_read(&topo, root, affinity, &err);
	CHECK_MSG(rc == 0, "%s: %s", name, err.msg);
	return rc;
}

static void check_threads(const struct capy_expert_threads *x, int n, const int *cpus, const int *l3, int host)
{
	CHECK_EQ_INT(x->n, n);
	for (int i = 0; i < n && i < x->n; i++) {
		CHECK_MSG(x->cpu[i] == cpus[i], "thread %d: cpu %d, expected %d", i, x->cpu[i], cpus[i]);
		CHECK_MSG(x->l3[i] == l3[i], "thread %d: l3 %d, expected %d", i, x->l3[i], l3[i]);
	}
	CHECK_EQ_INT(x->host_cpu, host);
}

static void test_cpu_list(void)
{
	bool set[64];

	CHECK_EQ_INT(capy_cpu_list_parse("0-3,8,10-11\n", set, 64), 0);
	CHECK(set[0] && set[3] && !set[4] && set[8] && !set[9] && set[10] && set[11] && !set[12]);
	CHECK_EQ_INT(capy_cpu_list_parse("", set, 64), 0);
	CHECK(!set[0]);
	CHECK_EQ_INT(capy_cpu_list_parse("3-1", set, 64), -1);
	CHECK_EQ_INT(capy_cpu_list_parse("0-64", set, 64), -1);
	CHECK_EQ_INT(capy_cpu_list_parse("1,x", set, 64), -1);
	CHECK_EQ_INT(capy_cpu_list_parse("-1", set, 64), -1);
}

static void test_zen4(void)
{
	struct capy_expert_threads x;
	static const int l3_15[] = { 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1 };
	static const int cpus_15[] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14 };
	static const int cpus_4[] = { 0, 1, 8, 9 }, l3_4[] = { 0, 0, 1, 1 };
	static const int cpus_20[] = { 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25 };
	static const int l3_20[] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 };

	if (read_fixture("zen4-desktop", "0-63") < 0)
		return;
	CHECK_EQ_INT(topo.n_cpus, 32);
	CHECK_EQ_INT(topo.n_cores, 16);
	CHECK_EQ_INT(topo.n_l3, 2);
	CHECK_EQ_INT(topo.n_nodes, 1);
	CHECK(topo.l3_known);
	CHECK_EQ_INT(topo.cpus[20].core, 4); /* cpu 20 is core 4's sibling */
	CHECK_EQ_INT(topo.cpus[20].l3, 0);
	CHECK_EQ_INT(topo.cpus[24].l3, 1);
	/* one thread per core, one core left to the host thread, grouped by CCD */
	capy_expert_threads_choose(&x, &topo, 0);
	check_threads(&x, 15, cpus_15, l3_15, 15);
	/* 4: two cores of each CCD (each has its own path to memory) */
	capy_expert_threads_choose(&x, &topo, 4);
	check_threads(&x, 4, cpus_4, l3_4, 15);
	/* 20: every core, then SMT siblings round-robin over the CCDs */
	capy_expert_threads_choose(&x, &topo, 20);
	check_threads(&x, 20, cpus_20, l3_20, -1);
	/* 40 threads on 32 CPUs wrap around */
	capy_expert_threads_choose(&x, &topo, 40);
	CHECK_EQ_INT(x.n, 40);
	CHECK_EQ_INT(x.host_cpu, -1);

	/* an affinity mask of 4 cores of CCD 0 with their siblings: 4 threads, none left */
	if (read_fixture("zen4-desktop", "0-3,16-19") < 0)
		return;
	CHECK_EQ_INT(topo.n_cpus, 8);
	CHECK_EQ_INT(topo.n_cores, 4);
	CHECK_EQ_INT(topo.n_l3, 1);
	static const int cpus_a[] = { 0, 1, 2, 3 }, l3_a[] = { 0, 0, 0, 0 };
	capy_expert_threads_choose(&x, &topo, 0);
	check_threads(&x, 4, cpus_a, l3_a, -1);
}

static void test_xeon(void)
{
	struct capy_expert_threads x;
	static const int cpus[] = { 0, 1, 2, 3, 4, 5, 6 }, l3[] = { 0, 0, 0, 0, 1, 1, 1 };
	char line[512];

	if (read_fixture("xeon-smt", "0-15") < 0)
		return;
	CHECK_EQ_INT(topo.n_cpus, 15); /* cpu 15 is offline */
	CHECK_EQ_INT(topo.n_cores, 8);
	CHECK_EQ_INT(topo.n_l3, 2);
	CHECK_EQ_INT(topo.n_nodes, 2);
	CHECK_EQ_INT(topo.cpus[12].node, 1);
	CHECK_EQ_INT(topo.cpus[12].core, 4); /* core_cpus_list: 4,12 */
	CHECK_EQ_INT(topo.cpus[3].node, 0);
	capy_expert_threads_choose(&x, &topo, 0);
	check_threads(&x, 7, cpus, l3, 7);
	capy_expert_threads_format(&x, &topo, line, sizeof(line));
	CHECK_STR(line, "7 expert threads on cpus 0,1,2,3,4,5,6 (2 L3 domains, 15 cpus, 8 cores)");
}

static void test_vm(void)
{
	struct capy_expert_threads x;
	static const int cpus[] = { 0, 1, 2, 3 }, l3[] = { 0, 0, 0, 0 };
	char line[512];

	if (read_fixture("vm-nocache", "0-7") < 0)
		return;
	CHECK_EQ_INT(topo.n_cpus, 4);
	CHECK_EQ_INT(topo.n_cores, 4);
	CHECK_EQ_INT(topo.n_l3, 1);
	CHECK(!topo.l3_known);
	CHECK_EQ_INT(topo.n_nodes, 1);
	capy_expert_threads_choose(&x, &topo, 0);
	check_threads(&x, 4, cpus, l3, -1);
	capy_expert_threads_format(&x, &topo, line, sizeof(line));
	CHECK_CONTAINS(line, "1 L3 domain assumed");
}

static void test_real_and_errors(void)
{
	struct capy_err err = { 0 };
	struct capy_expert_threads x;
	cpu_set_t set;
	char root[4096];
	int n;

	CHECK_MSG(capy_cpu_topology_read(&topo, NULL, NULL, &err) == 0, "%s", err.msg);
	CHECK(sched_getaffinity(0, sizeof(set), &set) == 0);
	CHECK_EQ_INT(topo.n_cpus, CPU_COUNT(&set));
	CHECK(topo.n_cores >= 1 && topo.n_cores <= topo.n_cpus);
	CHECK(topo.n_l3 >= 1 && topo.n_l3 <= topo.n_cores);
	capy_expert_threads_choose(&x, &topo, 0);
	CHECK(x.n >= 1 && x.n <= topo.n_cores);
	printf("# this machine: %d cpus, %d cores, %d L3 domains%s, %d nodes; %d default expert threads\n",
	       topo.n_cpus, topo.n_cores, topo.n_l3, topo.l3_known ? "" : " (assumed)", topo.n_nodes, x.n);

	CHECK_EQ_INT(capy_cpu_topology_read(&topo, "/nonexistent", NULL, &err), CAPY_EIO);
	CHECK_CONTAINS(err.msg, "/nonexistent/devices/system/cpu/online");
	test_fixture_path("sysfs/vm-nocache", root, sizeof(root));
	CHECK_EQ_INT(capy_cpu_topology_read(&topo, root, "8-9", &err), CAPY_EINVAL);
	CHECK_CONTAINS(err.msg, "no online CPU");
	CHECK_EQ_INT(capy_cpu_topology_read(&topo, root, "1-", &err), CAPY_EINVAL);
	CHECK_CONTAINS(err.msg, "affinity");

	CHECK_EQ_INT(capy_expert_threads_parse("auto", &n, &err), 0);
	CHECK_EQ_INT(n, 0);
	CHECK_EQ_INT(capy_expert_threads_parse("12", &n, &err), 0);
	CHECK_EQ_INT(n, 12);
	CHECK_EQ_INT(capy_expert_threads_parse("0", &n, &err), 0);
	CHECK_EQ_INT(n, 0);
	CHECK_EQ_INT(capy_expert_threads_parse("-1", &n, &err), CAPY_EINVAL);
	CHECK_CONTAINS(err.msg, "--expert-cpu-threads");
	CHECK_EQ_INT(capy_expert_threads_parse("many", &n, &err), CAPY_EINVAL);
	CHECK_EQ_INT(capy_expert_threads_parse("100000", &n, &err), CAPY_EINVAL);
}

/* --- the pool ----------------------------------------------------------------------------- */

struct layer {
	struct capy_artifact *a;
	struct capy_model_config c;
	struct capy_weights w;
	const struct capy_moe_w *m;
	struct capy_moe_w mod;
	uint64_t H, I, E;
};

static bool open_layer(struct layer *l, const char *fixture)
{
	struct capy_err err = { 0 };

	memset(l, 0, sizeof(*l));
	if (!(l->a = test_open_fixture(fixture)))
		return false;
	CHECK_EQ_INT(capy_model_config_parse(&l->c, l->a->family, l->a->config, fixture, &err), 0);
	CHECK_MSG(capy_weights_bind(&l->w, l->a, &l->c, &err) == 0, "%s", err.msg);
	for (uint64_t i = 0; i < l->c.n_layers && !l->m; i++)
		if (l->w.layers[i].moe)
			l->m = &l->w.layers[i].moe_w;
	CHECK(l->m != NULL);
	l->H = l->c.hidden_size;
	l->I = l->c.moe_intermediate_size;
	l->E = l->c.n_experts;
	return l->m != NULL;
}

static void close_layer(struct layer *l)
{
	capy_weights_release(&l->w);
	capy_artifact_close(l->a);
}

/* The CPU backend's computation of one expert over one row, as libcore/backend/cpu/moe.c
 * did it before the shared expert.c (each step spelled out here, one row at a time). */
static void reference(const struct layer *l, int32_t ex, const float *x, float *y)
{
	const struct capy_linear *gu = &l->m->gate_up[ex], *dn = &l->m->down[ex];
	size_t bytes = CAPY_MAX(capy_linear_input_bytes(gu, 1), capy_linear_input_bytes(dn, 1));
	void *ws = aligned_alloc(64, CAPY_ALIGN_UP(bytes, 64));
	float *act = malloc(2 * l->I * sizeof(float));
	struct capy_linear_input *in;

	capy_linear_prepare(gu, x, 1, ws, &in);
	capy_linear_rows(gu, in, act, 0, 2 * l->I);
	for (uint64_t i = 0; i < l->I; i++)
		act[i] = act[i] / (1.0f + expf(-act[i])) * act[l->I + i];
	capy_linear_prepare(dn, act, 1, ws, &in);
	capy_linear_rows(dn, in, y, 0, l->H);
	free(act);
	free(ws);
}

/* A job of random misses: g experts (distinct, random) with rows_per rows each (0: 1..8 at
 * random), rows in random order; x random; quantized for the GPU hand-over when nvfp4. */
struct misses {
	uint32_t n;
	int32_t expert[128];
	float *x, *ref, *out;
	int8_t *qa;
	int32_t *sa;
	float *gs;
};

static void make_misses(struct misses *s, const struct layer *l, struct capy_rng *r, uint32_t g, uint32_t rows_per,
			bool quantize)
{
	const uint64_t H = l->H;
	int32_t pick[64];
	uint32_t np = l->m->gate_up[0].nparts;

	memset(s, 0, sizeof(*s));
	for (uint32_t e = 0; e < l->E; e++)
		pick[e] = (int32_t)e;
	for (uint32_t e = 0; e < g; e++) { /* the first g of a shuffle */
		uint32_t o = e + (uint32_t)(capy_rng_next(r) % (l->E - e));
		int32_t t = pick[e];
		pick[e] = pick[o];
		pick[o] = t;
	}
	for (uint32_t e = 0; e < g; e++) {
		uint32_t m = rows_per ? rows_per : 1 + (uint32_t)(capy_rng_next(r) % 8);
		for (uint32_t i = 0; i < m; i++)
			s->expert[s->n++] = pick[e];
	}
	for (uint32_t i = s->n; i > 1; i--) { /* misses in any order */
		uint32_t o = (uint32_t)(capy_rng_next(r) % i);
		int32_t t = s->expert[i - 1];
		s->expert[i - 1] = s->expert[o];
		s->expert[o] = t;
	}
	s->x = malloc(s->n * H * sizeof(float));
	s->ref = malloc(s->n * H * sizeof(float));
	s->out = malloc(s->n * H * sizeof(float));
	for (uint64_t i = 0; i < s->n * H; i++)
		s->x[i] = (float)(capy_rng_normal(r) * 0.5);
	for (uint32_t i = 0; i < s->n; i++)
		reference(l, s->expert[i], s->x + i * H, s->ref + i * H);
	if (!quantize)
		return;
	s->qa = malloc((size_t)np * s->n * H);
	s->sa = malloc((size_t)np * s->n * (H / 16) * sizeof(int32_t));
	s->gs = malloc((size_t)np * s->n * sizeof(float));
	for (uint32_t i = 0; i < s->n; i++) { /* each row with its expert's input scales */
		const struct capy_linear *gu = &l->m->gate_up[s->expert[i]];
		void *ws = aligned_alloc(64, CAPY_ALIGN_UP(capy_linear_input_bytes(gu, 1), 64));
		int8_t qa[8 * 4096];
		int32_t sa[8 * 256];
		float gs[8];
		capy_linear_quantize_rows(gu, s->x + i * H, 1, ws, qa, sa, gs, 1); /* part p at row p */
		for (uint32_t p = 0; p < np; p++) { /* row i of part p at p * n + i */
			memcpy(s->qa + ((uint64_t)p * s->n + i) * H, qa + p * H, H);
			memcpy(s->sa + ((uint64_t)p * s->n + i) * (H / 16), sa + p * (H / 16), (H / 16) * sizeof(int32_t));
			s->gs[(uint64_t)p * s->n + i] = gs[p];
		}
		free(ws);
	}
}

static void free_misses(struct misses *s)
{
	free(s->x);
	free(s->ref);
	free(s->out);
	free(s->qa);
	free(s->sa);
	free(s->gs);
}

static void job_of(struct capy_cpu_experts_job *j, const struct layer *l, struct misses *s, bool quantized)
{
	memset(j, 0, sizeof(*j));
	j->gate_up = l->m->gate_up;
	j->down = l->m->down;
	j->n_experts = (uint32_t)l->E;
	j->n_misses = s->n;
	j->expert = s->expert;
	j->out = s->out;
	if (quantized)
		j->in = (struct capy_nvfp4_rows){ s->qa, s->sa, s->gs, s->n };
	else
		j->x = s->x;
}

/* The nvfp4 fixture's layer and g experts x m rows of random misses, quantized. */
static bool open_misses(struct layer *l, struct misses *s, uint64_t seed, uint32_t g, uint32_t m)
{
	struct capy_rng r;

	if (!open_layer(l, "qwen3_5_moe-nvfp4"))
		return false;
	capy_rng_seed(&r, seed);
	make_misses(s, l, &r, g, m, true);
	return true;
}

static struct capy_cpu_experts *new_pool(int threads, uint32_t poll_us)
{
	struct capy_cpu_experts *p = NULL;
	struct capy_err err = { 0 };

	CHECK_MSG(capy_cpu_experts_new(&p, &(struct capy_cpu_experts_opts){ .threads = threads, .poll_us = poll_us },
				       &err) == 0, "%s", err.msg);
	return p;
}

/* The hand-over format is the reference rule's: codes and scales of capy_nvfp4_quantize_act. */
static void test_handover_format(void)
{
	struct layer l;
	struct capy_rng r;
	float x[4096];

	if (!open_layer(&l, "qwen3_5_moe-nvfp4"))
		return;
	capy_rng_seed(&r, 7);
	for (uint64_t i = 0; i < l.H; i++)
		x[i] = (float)capy_rng_normal(&r);
	x[3] = 40.0f; /* one large block */
	for (uint32_t e = 0; e < l.E; e++) {
		const struct capy_linear *gu = &l.m->gate_up[e];
		void *ws = aligned_alloc(64, CAPY_ALIGN_UP(capy_linear_input_bytes(gu, 1), 64));
		int8_t qa[8 * 4096];
		int32_t sa[8 * 256];
		float gs[8];
		uint8_t codes[2048], scales[256];
		int bad = 0;
		capy_linear_quantize_rows(gu, x, 1, ws, qa, sa, gs, 1); /* part p at row p */
		for (uint32_t p = 0; p < gu->nparts; p++) {
			capy_nvfp4_quantize_act(x, l.H, gu->input_scale[p], codes, scales);
			for (uint64_t j = 0; j < l.H; j++)
				bad += qa[p * l.H + j] != (int8_t)(2 * capy_nvfp4_code_value(codes, j));
			for (uint64_t b = 0; b < l.H / 16; b++)
				bad += (float)sa[p * (l.H / 16) + b] != capy_e4m3_to_f32(scales[b]) * 512.0f;
			bad += capy_f32_bits(gs[p]) != capy_f32_bits(1.0f / gu->input_scale[p]);
		}
		CHECK_MSG(bad == 0, "expert %u: %d values differ from capy_nvfp4_quantize_act", e, bad);
		free(ws);
	}
	CHECK(l.m->gate_up[0].nparts >= 1);
	close_layer(&l);
}

static int compare(const struct misses *s, uint64_t H)
{
	int bad = 0;

	for (uint64_t i = 0; i < s->n * H; i++)
		bad += capy_f32_bits(s->out[i]) != capy_f32_bits(s->ref[i]);
	return bad;
}

/* two_scales: the up part of every gate_up gets an input_scale of its own (the fixture's
 * gate and up share one), so the hand-over's second part is read too. */
static void pool_exact(const char *fixture, bool quantized, bool two_scales)
{
	static const int threads[] = { 1, 2, 3, 8 };
	struct layer l;
	struct capy_rng r;
	struct capy_err err = { 0 };
	struct capy_linear *gu = NULL;

	if (!open_layer(&l, fixture))
		return;
	if (two_scales) {
		gu = malloc(l.E * sizeof(*gu));
		memcpy(gu, l.m->gate_up, l.E * sizeof(*gu));
		for (uint64_t e = 0; e < l.E; e++) {
			CHECK_EQ_INT(gu[e].nparts, 2);
			gu[e].input_scale[1] = gu[e].input_scale[0] * 1.75f;
		}
		l.mod = *l.m;
		l.mod.gate_up = gu;
		l.m = &l.mod;
	}
	capy_rng_seed(&r, 42);
	for (size_t t = 0; t < sizeof(threads) / sizeof(threads[0]); t++) {
		struct capy_cpu_experts *p = new_pool(threads[t], 0);
		struct capy_cpu_experts_job job;
		if (!p)
			continue;
		CHECK_EQ_INT(capy_cpu_experts_threads(p)->n, threads[t]);
		for (uint32_t m = 0; m <= 8; m++) /* m rows per expert; 0: mixed */
			for (uint32_t g = 1; g <= l.E; g += (g < 3 ? 1 : 2)) {
				struct misses s;
				make_misses(&s, &l, &r, g, m, quantized);
				job_of(&job, &l, &s, quantized);
				memset(s.out, 0xff, s.n * l.H * sizeof(float));
				CHECK_MSG(capy_cpu_experts_submit(p, &job, &err) == 0, "%s", err.msg);
				int bad = compare(&s, l.H);
				CHECK_MSG(bad == 0, "%s, %d threads, %u experts x %u rows: %d values differ", fixture,
					  threads[t], g, m, bad);
				/* the job's report: the g experts read, the times in order */
				CHECK_EQ_U64(job.experts_read, g);
				CHECK(job.taken_ns > 0 && job.finished_ns >= job.taken_ns);
				free_misses(&s);
			}
		capy_cpu_experts_forget(p, &job);
		capy_cpu_experts_free(p);
	}
	free(gu);
	close_layer(&l);
}

static void test_pool_nvfp4_quantized(void)
{
	pool_exact("qwen3_5_moe-nvfp4", true, false);
	pool_exact("qwen3_5_moe-nvfp4", true, true);
}

static void test_pool_nvfp4_float(void)
{
	pool_exact("qwen3_5_moe-nvfp4", false, false);
	pool_exact("qwen3_5_moe-nvfp4", false, true);
}

static void test_pool_plain(void)
{
	pool_exact("qwen3_5_moe", false, false);
}

static double cpu_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

/* The process's CPU time over 200 ms of sleep, in ms, printed as "# <what>: ..." and checked
 * below max_ms. */
static void idle_cpu_below(const char *what, double max_ms)
{
	const double c0 = cpu_seconds();

	sleep_ms(200);
	const double ms = (cpu_seconds() - c0) * 1e3;
	printf("# %s: %.3f ms of CPU in 200 ms\n", what, ms);
	CHECK_MSG(ms < max_ms, "%s: %.1f ms of CPU", what, ms);
}

/* Waits up to 2 s for the job's done word (written by the pool with no wake-up for us). */
static bool done_within_2s(struct capy_cpu_experts_job *job)
{
	for (int i = 0; i < 2000 && !atomic_load_explicit(&job->done, memory_order_acquire); i++)
		sleep_ms(1);
	return atomic_load_explicit(&job->done, memory_order_acquire) == 1;
}

struct writer {
	struct capy_cpu_experts_job *job;
	bool host_fn;
};

/* What the GPU's stream does (cuStreamWriteValue32): two plain stores, no wake-up; or what a
 * CUDA host node does. */
static void *write_words(void *arg)
{
	struct writer *w = arg;

	sleep_ms(20);
	if (w->host_fn) {
		capy_cpu_experts_host_fn(w->job);
	} else {
		atomic_store(&w->job->done, 0);
		atomic_store(&w->job->req, 1);
	}
	return NULL;
}

static void test_words_and_idle(void)
{
	struct layer l;
	struct capy_err err = { 0 };
	struct capy_cpu_experts *p;
	struct capy_cpu_experts_job job;
	struct misses s;
	pthread_t th;

	if (!open_misses(&l, &s, 5, 3, 2))
		return;

	/* idle: 3 threads sleeping in the futex burn (almost) nothing over 200 ms */
	if ((p = new_pool(3, 0))) {
		job_of(&job, &l, &s, true);
		CHECK_EQ_INT(capy_cpu_experts_submit(p, &job, &err), 0);
		idle_cpu_below("idle pool of 3 threads", 10);

		/* a host node's post from another thread */
		memset(s.out, 0, s.n * l.H * sizeof(float));
		job.pool = p;
		atomic_store(&job.done, 0); /* the previous step's 1 must not end this wait: in a
					     * stream the host node runs (and resets it) before the wait */
		pthread_create(&th, NULL, write_words, &(struct writer){ &job, true });
		CHECK_EQ_INT(capy_cpu_experts_wait(&job, &err), 0);
		pthread_join(th, NULL);
		CHECK_EQ_INT(compare(&s, l.H), 0);
		capy_cpu_experts_forget(p, &job);
		capy_cpu_experts_free(p);
	}

	/* the raw words with no wake-up: the pool polls every 500 us */
	if ((p = new_pool(2, 500))) {
		job_of(&job, &l, &s, true);
		CHECK_EQ_INT(capy_cpu_experts_register(p, &job, &err), 0);
		atomic_store(&job.done, 1); /* a previous step's */
		memset(s.out, 0, s.n * l.H * sizeof(float));
		pthread_create(&th, NULL, write_words, &(struct writer){ &job, false });
		pthread_join(th, NULL);
		CHECK(done_within_2s(&job));
		CHECK_EQ_INT(job.status, 0);
		CHECK_EQ_INT(compare(&s, l.H), 0);
		idle_cpu_below("polling pool (500 us)", 20);
		capy_cpu_experts_free(p); /* still registered: the pool forgets it */
	}

	/* words written by another writer, then a kick (the CUDA engine's watcher); with spin_us
	 * the threads stay awake that long after a job, then sleep: idle again costs nothing */
	{
		struct capy_cpu_experts_opts o = { .threads = 3, .spin_us = 2000 };
		p = NULL;
		CHECK_MSG(capy_cpu_experts_new(&p, &o, &err) == 0, "%s", err.msg);
	}
	if (p) {
		job_of(&job, &l, &s, true);
		CHECK_EQ_INT(capy_cpu_experts_register(p, &job, &err), 0);
		for (int round = 0; round < 3; round++) {
			memset(s.out, 0, s.n * l.H * sizeof(float));
			atomic_store(&job.done, 0);
			atomic_store_explicit(&job.req, 1, memory_order_release);
			capy_cpu_experts_kick(p); /* awake (round 1, right after round 0) or asleep (round 2) */
			CHECK_EQ_INT(capy_cpu_experts_wait(&job, &err), 0);
			CHECK_EQ_INT(compare(&s, l.H), 0);
			if (round == 1)
				sleep_ms(20); /* round 2 finds them asleep */
		}
		sleep_ms(20);
		idle_cpu_below("spinning pool (2 ms), idle", 10);
		/* the spin changed while the pool runs (the auto cache policy's switch): a job's
		 * threads then spin the new time: 300 ms (busy over the next 100 ms, where the 2 ms
		 * before would give about 6 ms of CPU), then none */
		const uint32_t spins[2] = { 300000, 0 };
		for (int v = 0; v < 2; v++) {
			capy_cpu_experts_set_spin(p, spins[v]);
			atomic_store(&job.done, 0);
			atomic_store_explicit(&job.req, 1, memory_order_release);
			capy_cpu_experts_kick(p);
			CHECK_EQ_INT(capy_cpu_experts_wait(&job, &err), 0);
			const double c0 = cpu_seconds();
			sleep_ms(100);
			const double ms = (cpu_seconds() - c0) * 1e3;
			printf("# spin set to %u us: %.3f ms of CPU in the 100 ms after a job\n", spins[v], ms);
			if (v == 0) {
				CHECK_MSG(ms > 20, "spin set to 300 ms: only %.1f ms of CPU in 100 ms", ms);
				sleep_ms(250); /* past the spin */
			} else {
				CHECK_MSG(ms < 10, "spin set to 0: %.1f ms of CPU in 100 ms", ms);
			}
		}
		capy_cpu_experts_forget(p, &job);
		capy_cpu_experts_free(p);
	}

	/* armed for a step (the CUDA engine's CAPY_CUDA_OFFLOAD_WAKE=arm): words written by
	 * another writer with no wake-up at all are taken, whether the pool slept before the arm,
	 * was still spinning, or had gone from spinning to polling; an armed pool with nothing to
	 * do polls rather than spins, and a disarmed one costs nothing */
	{
		p = NULL;
		CHECK_MSG(capy_cpu_experts_new(&p, &(struct capy_cpu_experts_opts){ .threads = 3 }, &err) == 0, "%s", err.msg);
	}
	if (p) {
		job_of(&job, &l, &s, true);
		CHECK_EQ_INT(capy_cpu_experts_register(p, &job, &err), 0);
		sleep_ms(20); /* asleep */
		capy_cpu_experts_arm(p, true);
		for (int round = 0; round < 3; round++) {
			if (round == 2)
				sleep_ms(10); /* past the arm's spin: polling */
			memset(s.out, 0, s.n * l.H * sizeof(float));
			atomic_store(&job.done, 0);
			atomic_store_explicit(&job.req, 1, memory_order_release);
			CHECK_MSG(done_within_2s(&job), "round %d: the armed pool did not take the request", round);
			CHECK_EQ_INT(job.status, 0);
			CHECK_EQ_INT(compare(&s, l.H), 0);
		}
		sleep_ms(10);
		idle_cpu_below("armed pool, idle (polls, does not spin)", 100);
		capy_cpu_experts_arm(p, false);
		sleep_ms(20);
		idle_cpu_below("disarmed pool, idle", 10);
		capy_cpu_experts_forget(p, &job);
		capy_cpu_experts_free(p);
	}
	free_misses(&s);
	close_layer(&l);
}

static void test_errors_and_shutdown(void)
{
	struct layer l;
	struct capy_rng r;
	struct capy_err err = { 0 };
	struct capy_cpu_experts *p;
	struct capy_cpu_experts_job job;
	struct misses s;

	CHECK_EQ_INT(capy_cpu_experts_new(&p, &(struct capy_cpu_experts_opts){ .threads = -2 }, &err), CAPY_EINVAL);
	if (!open_misses(&l, &s, 9, 4, 1))
		return;
	capy_rng_seed(&r, 10);
	if ((p = new_pool(3, 0))) {
		job_of(&job, &l, &s, true);
		s.expert[2] = 99;
		CHECK_EQ_INT(capy_cpu_experts_submit(p, &job, &err), CAPY_EINVAL);
		CHECK_CONTAINS(err.msg, "miss 2 names expert 99, the layer has 8");
		s.expert[2] = -1;
		CHECK_EQ_INT(capy_cpu_experts_submit(p, &job, &err), CAPY_EINVAL);
		free_misses(&s);
		make_misses(&s, &l, &r, 4, 1, true);
		job_of(&job, &l, &s, true);
		s.qa[5] = 13; /* not a 2*e2m1 value */
		CHECK_EQ_INT(capy_cpu_experts_submit(p, &job, &err), CAPY_EFORMAT);
		CHECK_CONTAINS(err.msg, "outside [-12, 12]");
		s.qa[5] = 0;
		job.n_misses = 0;
		CHECK_EQ_INT(capy_cpu_experts_submit(p, &job, &err), 0);
		/* the pool still works after the errors */
		job.n_misses = s.n;
		job.x = NULL;
		job.in.qa = NULL;
		CHECK_EQ_INT(capy_cpu_experts_submit(p, &job, &err), CAPY_EINVAL);
		job.x = s.x; /* float rows */
		CHECK_EQ_INT(capy_cpu_experts_submit(p, &job, &err), 0);
		CHECK_EQ_INT(compare(&s, l.H), 0);
		{ /* rows by index (the GPU's hand-over: a token's row once for all its misses) */
			float *x2 = malloc(s.n * l.H * sizeof(float));
			uint32_t *xr = malloc(s.n * sizeof(uint32_t));
			for (uint32_t i = 0; i < s.n; i++) {
				memcpy(x2 + (uint64_t)(s.n - 1 - i) * l.H, s.x + (uint64_t)i * l.H, l.H * sizeof(float));
				xr[i] = s.n - 1 - i;
			}
			memset(s.out, 0, s.n * l.H * sizeof(float));
			job.x = x2;
			job.x_row = xr;
			CHECK_EQ_INT(capy_cpu_experts_submit(p, &job, &err), 0);
			CHECK_EQ_INT(compare(&s, l.H), 0);
			job.x = s.x;
			job.x_row = NULL;
			free(x2);
			free(xr);
		}
		capy_cpu_experts_forget(p, &job);
		capy_cpu_experts_free(p);
	}
	/* start and stop repeatedly, also with a job requested just before the stop */
	for (int i = 0; i < 20; i++) {
		if (!(p = new_pool(1 + i % 4, 0)))
			break;
		job_of(&job, &l, &s, false);
		if (i % 2)
			CHECK_EQ_INT(capy_cpu_experts_post(p, &job, &err), 0);
		capy_cpu_experts_free(p);
		if (i % 2) {
			CHECK(atomic_load(&job.done) == 1);
			CHECK(job.status == 0 || job.status == CAPY_ECANCELED);
		}
	}
	free_misses(&s);
	close_layer(&l);
}

int main(void)
{
	RUN(test_cpu_list);
	RUN(test_zen4);
	RUN(test_xeon);
	RUN(test_vm);
	RUN(test_real_and_errors);
	RUN(test_handover_format);
	RUN(test_pool_nvfp4_quantized);
	RUN(test_pool_nvfp4_float);
	RUN(test_pool_plain);
	RUN(test_words_and_idle);
	RUN(test_errors_and_shutdown);
	return test_summary();
}
