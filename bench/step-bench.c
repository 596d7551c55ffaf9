/* step-bench.c - engine speed on one device, against its physical limit.
 *
 *	step-bench MODEL.capy [--device cpu|cuda] [--prefill N,N,...] [--batch B,B,...]
 *	           [--decode M] [--step-tokens S] [--kv bf16|int8|f32] [--threads T]
 *	           [--sample logits|greedy|topk] [--mask none|all] [--digest]
 *
 * Prefill: one sequence of N tokens through capy_engine_forward (steps of S tokens), timed
 * from the first token to the last logits (the time to first token of an N-token prompt).
 * Decode: B sequences with prompts of P tokens (--prompt, default 16), then M steps of one token each for all of
 * them; aggregate tokens per second over the timed steps (after 2 warm-up steps). --sample:
 * each step copies every sequence's logits to the host (logits, the default, as llama.cpp's
 * benchmarks do), or picks the tokens where the backend can (greedy; topk: temperature 0.7,
 * top-k 20, top-p 0.8), the rows' logits then never leave the GPU. --mask all (with a sampler)
 * gives every item a token mask that allows every id (engine.h's step-item mask, ready at
 * once): what applying a grammar's mask costs the step by itself (the copy into the pinned
 * buffer, its upload, the sampling kernel reading it), the same tokens as --mask none.
 * With cuda, the device's copy bandwidth is measured first in the same run (a 2 GiB
 * device-to-device copy, bytes read + written), and decode is put against its floor:
 * the weight bytes one decode token reads (capy_engine_weight_bytes: every matrix once,
 * k experts per MoE layer, one token's PLE rows) over that bandwidth; with expert offload,
 * the page-locked host-to-device bandwidth too (1 GiB; bench/linear-bench --only bandwidth
 * gives the host's read bandwidth, the CPU experts' limit). --digest: a hash of
 * every decode step's logits (or picked tokens) per batch size, to check that two builds give
 * the same bits (the inputs are fixed ids, never sampled ones; the hashing is timed too).
 * Prints one line per measurement on stdout. Benchmarks live in bench/, never in tests. */
#include "core.h"
#include "engine/engine.h"
#include "sample/sample.h"
#include "util/parse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef CAPY_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* --mask all: every id allowed (the bits live in main's frame for the whole run). */
static const uint32_t *permissive_mask(void *ud)
{
	return ud;
}

static void die(const char *what, const struct capy_err *err)
{
	fprintf(stderr, "step-bench: %s: %s\n", what, err ? err->msg : "");
	exit(1);
}

#ifdef CAPY_HAVE_CUDA
/* Seconds of one cudaMemcpy of n bytes: the median of 5 (after one untimed). */
static double copy_seconds(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
	cudaEvent_t e0, e1;
	float ms[5];

	cudaEventCreate(&e0);
	cudaEventCreate(&e1);
	cudaMemcpy(dst, src, n, kind);
	for (int i = 0; i < 5; i++) {
		cudaEventRecord(e0, 0);
		cudaMemcpy(dst, src, n, kind);
		cudaEventRecord(e1, 0);
		cudaEventSynchronize(e1);
		cudaEventElapsedTime(&ms[i], e0, e1);
	}
	for (int i = 0; i < 5; i++)
		for (int j = i + 1; j < 5; j++)
			if (ms[j] < ms[i]) {
				float t = ms[i];
				ms[i] = ms[j];
				ms[j] = t;
			}
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	return ms[2] * 1e-3;
}
#endif

/* Device-to-device copy bandwidth (read + write bytes per second) of 1 GiB. */
static double copy_bandwidth(int gpu)
{
#ifdef CAPY_HAVE_CUDA
	size_t n = (size_t)1 << 30;
	void *a = NULL, *b = NULL;
	double bw = 0;

	if (cudaSetDevice(gpu) == cudaSuccess && cudaMalloc(&a, n) == cudaSuccess && cudaMalloc(&b, n) == cudaSuccess) {
		cudaMemset(a, 1, n);
		bw = 2.0 * (double)n / copy_seconds(b, a, n, cudaMemcpyDeviceToDevice);
	}
	cudaFree(a);
	cudaFree(b);
	return bw;
#else
	(void)gpu;
	return 0;
#endif
}

/* Page-locked host to device copy bandwidth of 1 GiB (what fills expert slots; the prompt
 * rows' zero-copy reads cross the same link). */
static double h2d_bandwidth(void)
{
#ifdef CAPY_HAVE_CUDA
	size_t n = (size_t)1 << 30;
	void *h = NULL, *d = NULL;
	double bw = 0;

	if (cudaMallocHost(&h, n) == cudaSuccess && cudaMalloc(&d, n) == cudaSuccess) {
		memset(h, 1, n);
		bw = (double)n / copy_seconds(d, h, n, cudaMemcpyHostToDevice);
	}
	cudaFreeHost(h);
	cudaFree(d);
	return bw;
#else
	return 0;
#endif
}

/* What expert offload did since *prev (then *prev = now), when the engine offloads. */
static void offload_line(const struct capy_engine *e, struct capy_offload_stats *prev)
{
	struct capy_offload_stats st;

	if (!capy_engine_offload_stats(e, &st))
		return;
	const uint64_t h = st.hits - prev->hits, m = st.misses - prev->misses;
	printf("  offload: %" PRIu64 " slots, %" PRIu64 " of %" PRIu64 " experts resident; hits %" PRIu64 " misses %" PRIu64
	       " (hit ratio %.1f %%), streamed %" PRIu64 ", loads %" PRIu64 ", evictions %" PRIu64 ", %d CPU threads, %s",
	       st.slots, st.resident, st.experts, h, m, h + m ? 100.0 * (double)h / (double)(h + m) : 0.0,
	       st.streamed - prev->streamed, st.loads - prev->loads, st.evictions - prev->evictions, st.cpu_threads,
	       capy_offload_host_name(st.host));
	if (st.slots) /* the cache's policy (CAPY_CUDA_OFFLOAD_POLICY) */
		printf("; policy %s (%" PRIu64 " switches)", st.whole_layers ? "whole layers" : "spread",
		       st.policy_switches - prev->policy_switches);
	printf("\n");
	const uint64_t jobs = st.jobs - prev->jobs;
	if (jobs) { /* where a step's hand-offs go: the CPU's run, and the rest of the GPU's wait */
		const double run = st.job_seconds - prev->job_seconds, wait = st.wait_seconds - prev->wait_seconds;
		printf("  hand-off: %" PRIu64 " CPU jobs, %.1f us a job on the CPU (%.1f GB/s of experts), the GPU waited"
		       " %.1f us a job: %.1f us beyond the CPU's run\n",
		       jobs, 1e6 * run / (double)jobs, run > 0 ? (double)(st.job_bytes - prev->job_bytes) / run * 1e-9 : 0.0,
		       1e6 * wait / (double)jobs, 1e6 * (wait - run) / (double)jobs);
	}
	*prev = st;
}

/* FNV-1a over n bytes, continuing from h. */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

static uint64_t *list(const char *s, size_t *n)
{
	uint64_t *v = calloc(64, sizeof(*v));
	char *dup = strdup(s), *tok, *save = NULL;

	*n = 0;
	for (tok = strtok_r(dup, ",", &save); tok && *n < 64; tok = strtok_r(NULL, ",", &save))
		v[(*n)++] = strtoull(tok, NULL, 10);
	free(dup);
	return v;
}

int main(int argc, char **argv)
{
	const char *model = NULL, *device = "cpu", *prefill = "512,4096", *batch = "1,8", *kv = "bf16", *sample = "logits",
		   *mask = "none";
	uint64_t decode = 64, step_tokens = 2048, prompt = 16, gpu_mem = 0;
	int threads = 0, expert_threads = 0, digest = 0;
	int64_t expert_slots = 0;
	struct capy_err err = { 0 };

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--device") && v)
			device = argv[++i];
		else if (!strcmp(a, "--prefill") && v)
			prefill = argv[++i];
		else if (!strcmp(a, "--batch") && v)
			batch = argv[++i];
		else if (!strcmp(a, "--decode") && v)
			decode = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(a, "--step-tokens") && v)
			step_tokens = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(a, "--prompt") && v)
			prompt = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(a, "--kv") && v)
			kv = argv[++i];
		else if (!strcmp(a, "--sample") && v)
			sample = argv[++i];
		else if (!strcmp(a, "--mask") && v)
			mask = argv[++i];
		else if (!strcmp(a, "--digest"))
			digest = 1;
		else if (!strcmp(a, "--threads") && v)
			threads = (int)strtol(argv[++i], NULL, 10);
		else if (!strcmp(a, "--gpu-mem") && v) {
			if (capy_parse_size(argv[++i], &gpu_mem, &err) < 0)
				die("--gpu-mem", &err);
		} else if (!strcmp(a, "--expert-slots") && v) {
			expert_slots = strtoll(argv[++i], NULL, 10);
			if (expert_slots == 0)
				expert_slots = CAPY_EXPERT_SLOTS_NONE;
		} else if (!strcmp(a, "--expert-threads") && v)
			expert_threads = (int)strtol(argv[++i], NULL, 10);
		else if (a[0] != '-' && !model)
			model = a;
		else {
			fprintf(stderr, "usage: step-bench MODEL [--device d] [--prefill N,..] [--batch B,..] [--decode M] "
					"[--step-tokens S] [--prompt P] [--kv t] [--sample logits|greedy|topk] [--mask none|all] "
					"[--threads T] [--gpu-mem SIZE] [--expert-slots N (0: none)] [--expert-threads N] [--digest]\n");
			return 2;
		}
	}
	if (!model)
		return fprintf(stderr, "step-bench: no model\n"), 2;
	if (strcmp(mask, "none") && strcmp(mask, "all"))
		return fprintf(stderr, "step-bench: --mask none|all\n"), 2;
	if (!strcmp(mask, "all") && !strcmp(sample, "logits"))
		return fprintf(stderr, "step-bench: --mask all needs --sample greedy or topk\n"), 2;
	double bw = strcmp(device, "cuda") ? 0 : copy_bandwidth(0);
	struct capy_artifact *art = NULL;
	struct capy_engine *e = NULL;
	size_t np, nb;
	uint64_t *pre = list(prefill, &np), *bat = list(batch, &nb), maxp = 64 + prompt, maxb = 1;
	for (size_t i = 0; i < np; i++)
		maxp = CAPY_MAX(maxp, pre[i]);
	for (size_t i = 0; i < nb; i++)
		maxb = CAPY_MAX(maxb, bat[i]);
	/* The memory plan holds the longest sequence and the largest batch the runs make (as
	 * capy-gen's holds its prompt and answer): under --gpu-mem with expert offload the
	 * attention cache is then planned and shares the budget with the slots, instead of
	 * finding the budget full of slots when a long prefill grows it. */
	const uint64_t max_context = CAPY_MAX(maxp, prompt + decode + 1);
	struct capy_engine_opts o = { .threads = threads, .device = device, .step_tokens = step_tokens, .gpu_mem = gpu_mem,
				      .expert_slots = expert_slots, .expert_threads = expert_threads,
				      .max_context = max_context, .max_seqs = maxb };
	o.kv = (enum capy_kv_dtype)capy_kv_dtype_parse(kv);
	if (capy_artifact_open(&art, model, &err) < 0)
		die(model, &err);
	double t0 = now();
	if (capy_engine_new(&e, art, &o, &err) < 0)
		die("engine", &err);
	if (strcmp(device, "cpu") && capy_engine_reserve(e, max_context, maxb, &err) < 0)
		die("reserving the attention cache", &err);
	const struct capy_model_config *c = capy_engine_config(e);
	uint64_t V = c->vocab_size, wb = capy_engine_weight_bytes(e);
	printf("model %s: %s, %" PRIu64 " layers, hidden %" PRIu64 "; device %s; engine open %.1f s\n", model,
	       capy_family_name(c->family), c->n_layers, c->hidden_size, device, now() - t0);
	if (bw > 0)
		printf("copy bandwidth %.0f GB/s; weights read per decode token %.3f GB: floor %.3f ms/token, %.0f tok/s\n",
		       bw / 1e9, (double)wb / 1e9, (double)wb / bw * 1e3, bw / (double)wb);
	else
		printf("weights read per decode token %.3f GB\n", (double)wb / 1e9);
	{
		char line[512];
		if (capy_engine_plan_line(e, line, sizeof(line)))
			printf("%s\n", line);
	}
	struct capy_offload_stats off0 = { 0 };
	if (bw > 0 && capy_engine_offload_stats(e, &off0)) {
		const double h2d = h2d_bandwidth();
		printf("pinned host to device %.1f GB/s: an expert record of %.2f MB in %.1f us\n", h2d / 1e9,
		       (double)art->stacks[0].stride / 1e6, (double)art->stacks[0].stride / h2d * 1e6);
	}

	int32_t *ids = calloc(maxp + 64, sizeof(int32_t));
	float *logits = calloc(V * 64, sizeof(float));
	uint32_t *all_bits = malloc((V + 31) / 32 * 4);
	memset(all_bits, 0xff, (V + 31) / 32 * 4);
	for (uint64_t i = 0; i < maxp + 64; i++)
		ids[i] = (int32_t)(V > 2000 ? (i * 7919 + 13) % (V - 1000) + 500 : (i * 7919 + 13) % V); /* fixtures: small V */
	if (np) { /* what a process pays once: the first prompt chunk of each matrix shape */
		struct capy_seq *s = NULL;
		if (capy_seq_new(e, &s, &err) < 0)
			die("seq", &err);
		double a = now();
		if (capy_engine_forward(e, s, ids, 64, logits, false, &err) < 0)
			die("warm-up prefill", &err);
		printf("warm-up: a 64-token prefill in %.1f ms (once per process; not in the figures below)\n",
		       (now() - a) * 1e3);
		capy_seq_free(s);
	}
	for (size_t i = 0; i < np; i++) {
		struct capy_seq *s = NULL;
		if (capy_seq_new(e, &s, &err) < 0)
			die("seq", &err);
		double a = now();
		if (capy_engine_forward(e, s, ids, pre[i], logits, false, &err) < 0)
			die("prefill", &err);
		double d = now() - a;
		printf("prefill %6" PRIu64 " tokens: %.3f s, %.0f tok/s (time to first token)\n", pre[i], d,
		       (double)pre[i] / d);
		if (digest)
			printf("digest prefill %" PRIu64 ": last logits %016" PRIx64 "\n", pre[i],
			       fnv(0xcbf29ce484222325ull, logits, V * sizeof(*logits)));
		offload_line(e, &off0);
		capy_seq_free(s);
	}
	for (size_t i = 0; i < nb; i++) {
		uint64_t B = bat[i];
		struct capy_seq **s = calloc(B, sizeof(*s));
		struct capy_step_item *it = calloc(B, sizeof(*it));
		int32_t *next = calloc(B, sizeof(int32_t));
		float *lg = calloc(B * V, sizeof(float));
		int32_t *picked = calloc(B, sizeof(int32_t));
		struct capy_sampler **smp = NULL;
		if (strcmp(sample, "logits")) {
			struct capy_sampler_params sp = { 0 };
			if (!strcmp(sample, "topk"))
				sp = (struct capy_sampler_params){ .temperature = 0.7f, .top_k = 20, .top_p = 0.8f, .seed = 1 };
			else if (strcmp(sample, "greedy"))
				die("--sample logits|greedy|topk", NULL);
			smp = calloc(B, sizeof(*smp));
			for (uint64_t q = 0; q < B; q++)
				if (capy_sampler_new(&smp[q], V, &sp, &err) < 0)
					die("sampler", &err);
		}
		for (uint64_t q = 0; q < B; q++) {
			if (capy_seq_new(e, &s[q], &err) < 0 || capy_engine_forward(e, s[q], ids + q, prompt, lg, false, &err) < 0)
				die("decode prompt", &err);
			next[q] = ids[q + prompt];
		}
		double a = 0;
		uint64_t h = 0xcbf29ce484222325ull;
		for (uint64_t step = 0; step < decode + 2; step++) {
			if (step == 2)
				a = now();
			for (uint64_t q = 0; q < B; q++) {
				it[q] = smp ? (struct capy_step_item){ .seq = s[q], .tokens = &next[q], .n = 1, .sampler = smp[q],
								       .token = &picked[q] }
					    : (struct capy_step_item){ .seq = s[q], .tokens = &next[q], .n = 1,
								       .logits = lg + q * V };
				if (!strcmp(mask, "all"))
					it[q].mask = permissive_mask, it[q].mask_ud = all_bits;
			}
			if (capy_engine_step(e, it, B, &err) < 0)
				die("decode", &err);
			if (digest)
				h = smp ? fnv(h, picked, B * sizeof(*picked)) : fnv(h, lg, B * V * sizeof(*lg));
			for (uint64_t q = 0; q < B; q++)
				next[q] = ids[(step * 31 + q) % maxp];
		}
		double d = now() - a;
		printf("decode batch %3" PRIu64 "%s: %.3f ms/step, %.1f tok/s aggregate, %.1f tok/s per sequence", B,
		       strcmp(mask, "all") ? "" : " (masked)", d / (double)decode * 1e3, (double)(B * decode) / d,
		       (double)decode / d);
		if (bw > 0 && B == 1)
			printf(" (%.0f %% of the floor)", 100.0 * ((double)wb / bw) / (d / (double)decode));
		printf("\n");
		if (digest)
			printf("digest batch %3" PRIu64 ": %s of %" PRIu64 " steps %016" PRIx64 "\n", B, smp ? "tokens" : "logits",
			       decode + 2, h);
		offload_line(e, &off0);
		for (uint64_t q = 0; q < B; q++)
			capy_seq_free(s[q]);
		free(s);
		free(it);
		free(next);
		free(lg);
		free(picked);
		for (uint64_t q = 0; smp && q < B; q++)
			capy_sampler_free(smp[q]);
		free(smp);
	}
	capy_engine_free(e);
	capy_artifact_close(art);
	free(ids);
	free(all_bits);
	free(logits);
	free(pre);
	free(bat);
	return 0;
}
