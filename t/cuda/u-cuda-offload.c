/* u-cuda-offload.c - expert offload's placement independence (issue 10, item 5): on every MoE
 * fixture (routed experts quantized to NVFP4, as capy-convert --quantize-experts does) and on
 * capy-tiny-nvfp4, the same script of steps through CUDA engines that hold every routed expert,
 * a quarter of them, half of them, or none (the rest computed by the CPU's expert threads, 1
 * to 8 of them) gives bitwise the same logits: a prompt in one step (prompt rows: the grouped
 * GEMMs, reading non-resident experts from host memory), greedy decode, a prompt in short
 * steps (exact rows with misses on several rows), a batch of prompts of mixed lengths and then
 * decode steps of the batch (several sequences' misses in one CPU job), and greedy decode
 * sampled on the GPU (no logits to the host), through the three ways of waking the CPU
 * (CAPY_CUDA_OFFLOAD_WAKE: a host node that posts each layer's job; the GPU's own request
 * with a wake-up node beside it; the GPU's own request to a pool armed for the step), and with
 * the experts left in the mapped artifact (CAPY_MEMLOCK below them: the GPU reads the mapping
 * as pageable memory where it can, else registered with the driver; CAPY_CUDA_OFFLOAD_PAGEABLE=0
 * registers it anyway). The offload counts add up: hits + misses = the exact rows' routed
 * slots, no hits without slots, loads into slots. An elastic attention cache lends
 * slots to a long sequence and takes them back, with the same logits.
 * make test-cuda; the first GPU (CAPY_GPU picks another). */
#include "test.h"
#include "test-fixture.h"
#include "cuda-test.h"
#include "engine/engine.h"
#include "sample/sample.h"

#include <string.h>

#define PROMPT 40
#define DECODE 24
#define SHORT 12  /* a prompt in steps of 5 tokens */
#define NB 4      /* a batch of sequences */
#define BSTEPS 6
#define GDEC 12   /* greedy decode sampled on the GPU */

static struct capy_artifact *open_quantized(const char *name)
{
	char model[4096], out[256];
	struct capy_convert_opts o = { 0 };
	struct capy_convert_stats st;
	struct capy_err err = { 0 };
	struct capy_artifact *a = NULL;
	const char *base = strrchr(name, '/');

	test_fixture_path(name, model, sizeof(model));
	snprintf(out, sizeof(out), "/tmp/capy-offload-%d-%s.capy", (int)getpid(), base ? base + 1 : name);
	o.model_dir = model;
	o.out_path = out;
	o.threads = 2;
	o.quantize_experts = true;
	CHECK_EQ_INT(capy_convert(&o, &st, &err), 0);
	CHECK_MSG(capy_artifact_open(&a, out, &err) == 0, "%s", err.msg);
	unlink(out);
	return a;
}

struct config {
	const char *what;
	int64_t slots;  /* engine.h's expert_slots; > 0 here: a fraction 1 / slots of the experts */
	int threads;
	const char *wake; /* CAPY_CUDA_OFFLOAD_WAKE */
	const char *memlock;  /* CAPY_MEMLOCK (NULL: unset): below the experts, the mapped artifact */
	const char *pageable; /* CAPY_CUDA_OFFLOAD_PAGEABLE (NULL: unset); "0": the mapping registered */
	const char *wait;     /* CAPY_CUDA_OFFLOAD_WAIT (NULL: unset, the stream's wait) */
	const char *policy;   /* CAPY_CUDA_OFFLOAD_POLICY (NULL: unset, experts) */
};

static const struct config configs[] = {
	{ "all resident", 0, 0, "host", NULL, NULL, NULL, NULL },
	{ "a quarter, 3 threads, host", 4, 3, "host", NULL, NULL, NULL, NULL },
	{ "half, 2 threads, host", 2, 2, "host", NULL, NULL, NULL, NULL },
	{ "none, 1 thread, host", CAPY_EXPERT_SLOTS_NONE, 1, "host", NULL, NULL, NULL, NULL },
	{ "none, 3 threads, host", CAPY_EXPERT_SLOTS_NONE, 3, "host", NULL, NULL, NULL, NULL },
	{ "a quarter, 4 threads, kick", 4, 4, "kick", NULL, NULL, NULL, NULL },
	{ "half, 1 thread, kick", 2, 1, "kick", NULL, NULL, NULL, NULL },
	{ "none, 8 threads, kick", CAPY_EXPERT_SLOTS_NONE, 8, "kick", NULL, NULL, NULL, NULL },
	{ "none, 2 threads, kick", CAPY_EXPERT_SLOTS_NONE, 2, "kick", NULL, NULL, NULL, NULL },
	{ "a quarter, 4 threads, arm", 4, 4, "arm", NULL, NULL, NULL, NULL },
	{ "half, 1 thread, arm", 2, 1, "arm", NULL, NULL, NULL, NULL },
	{ "none, 8 threads, arm", CAPY_EXPERT_SLOTS_NONE, 8, "arm", NULL, NULL, NULL, NULL },
	{ "none, 2 threads, arm, mapped", CAPY_EXPERT_SLOTS_NONE, 2, "arm", "1", NULL, NULL, NULL },
	{ "a quarter, 3 threads, mapped+reg", 4, 3, "host", "1", "0", NULL, NULL },
	{ "a quarter, 4 threads, arm, kernel", 4, 4, "arm", NULL, NULL, "kernel", NULL },
	{ "none, 3 threads, kick, kernel", CAPY_EXPERT_SLOTS_NONE, 3, "kick", NULL, NULL, "kernel", NULL },
	{ "half, 2 threads, arm, kernel, layers", 2, 2, "arm", NULL, NULL, "kernel", "layers" },
	{ "a quarter, 3 threads, host, layers", 4, 3, "host", NULL, NULL, NULL, "layers" },
};

static void setenv_or_unset(const char *name, const char *value)
{
	if (value)
		setenv(name, value, 1);
	else
		unsetenv(name);
}

static struct capy_engine *open_gpu(const struct capy_artifact *a, const struct config *cf, uint64_t experts)
{
	struct capy_engine_opts o = { .threads = 2, .device = "cuda", .step_tokens = 64, .max_seqs = NB + 2,
				      .max_context = 256 };
	struct capy_engine *e = NULL;
	struct capy_err err = { 0 };
	const char *g = getenv("CAPY_GPU");

	o.gpu = g ? (int)strtol(g, NULL, 10) : 0;
	o.expert_threads = cf->threads;
	o.expert_slots = cf->slots > 0 ? (int64_t)(experts / (uint64_t)cf->slots) : cf->slots;
	setenv("CAPY_CUDA_OFFLOAD_WAKE", cf->wake, 1); /* read when the engine opens */
	setenv_or_unset("CAPY_MEMLOCK", cf->memlock);
	setenv_or_unset("CAPY_CUDA_OFFLOAD_WAIT", cf->wait);
	setenv_or_unset("CAPY_CUDA_OFFLOAD_POLICY", cf->policy);
	setenv_or_unset("CAPY_CUDA_OFFLOAD_PAGEABLE", cf->pageable);
	CHECK_MSG(capy_engine_new(&e, a, &o, &err) == 0, "%s: %s", cf->what, err.msg);
	return e;
}

static uint64_t moe_layers(const struct capy_model_config *c)
{
	uint64_t n = 0;

	for (uint64_t i = 0; i < c->n_layers; i++)
		n += c->moe_layer[i];
	return n;
}

/* Rows of logits the script writes. */
static uint64_t script_rows(void)
{
	return PROMPT + DECODE + SHORT + NB + NB * BSTEPS;
}

/* The script; every logits row into out, the GPU-sampled tokens into gtok. Returns the exact
 * rows' routed slots it ran (k each), for the counts. */
static uint64_t script(struct capy_engine *e, float *out, int32_t *gtok, uint64_t V, uint64_t k)
{
	struct capy_err err = { 0 };
	struct capy_seq *s = NULL, *b[NB];
	int32_t p[PROMPT], tok;
	uint64_t row = 0, exact = 0;

	for (int i = 0; i < PROMPT; i++)
		p[i] = (int32_t)((i * 37 + 11) % V);
	capy_seq_new(e, &s, &err);
	CHECK_MSG(capy_engine_forward(e, s, p, PROMPT, out, true, &err) == 0, "%s", err.msg);
	row += PROMPT;
	tok = test_argmax(out + (row - 1) * V, V);
	for (int i = 0; i < DECODE; i++) {
		CHECK_MSG(capy_engine_forward(e, s, &tok, 1, out + row * V, false, &err) == 0, "%s", err.msg);
		tok = test_argmax(out + row * V, V);
		row++;
		exact += k;
	}
	capy_seq_free(s);
	/* a prompt in steps of 5, 5 and 2 tokens: exact rows, all logits */
	capy_seq_new(e, &s, &err);
	for (int at = 0; at < SHORT;) {
		uint64_t n = SHORT - at < 5 ? (uint64_t)(SHORT - at) : 5;
		struct capy_step_item it = { .seq = s, .tokens = p + 3 + at, .n = n, .logits = out + row * V, .all_logits = true };
		CHECK_MSG(capy_engine_step(e, &it, 1, &err) == 0, "%s", err.msg);
		row += n;
		at += (int)n;
		exact += n * k;
	}
	capy_seq_free(s);
	/* a batch: prompts of 3, 9, 17 and 20 tokens in one step (exact and grouped rows), then
	 * decode steps of all of them */
	{
		struct capy_step_item it[NB];
		int32_t next[NB];
		static const uint64_t len[NB] = { 3, 9, 17, 20 };
		for (int q = 0; q < NB; q++) {
			capy_seq_new(e, &b[q], &err);
			it[q] = (struct capy_step_item){ .seq = b[q], .tokens = p + q, .n = len[q], .logits = out + (row + q) * V };
			exact += len[q] < 16 ? len[q] * k : 0;
		}
		CHECK_MSG(capy_engine_step(e, it, NB, &err) == 0, "%s", err.msg);
		for (int q = 0; q < NB; q++)
			next[q] = test_argmax(out + (row + q) * V, V);
		row += NB;
		for (int st = 0; st < BSTEPS; st++) {
			for (int q = 0; q < NB; q++)
				it[q] = (struct capy_step_item){ .seq = b[q], .tokens = &next[q], .n = 1, .logits = out + (row + q) * V };
			CHECK_MSG(capy_engine_step(e, it, NB, &err) == 0, "%s", err.msg);
			for (int q = 0; q < NB; q++)
				next[q] = test_argmax(out + (row + q) * V, V);
			row += NB;
			exact += NB * k;
		}
		for (int q = 0; q < NB; q++)
			capy_seq_free(b[q]);
	}
	{ /* greedy on the GPU: the token of each step, no logits */
		struct capy_sampler *sm = NULL;
		CHECK_MSG(capy_sampler_new(&sm, V, &(struct capy_sampler_params){ .temperature = 0 }, &err) == 0, "%s",
			  err.msg);
		capy_seq_new(e, &s, &err);
		CHECK_MSG(capy_engine_forward(e, s, p, PROMPT, NULL, false, &err) == 0, "%s", err.msg);
		tok = p[PROMPT - 1];
		for (int i = 0; i < GDEC; i++) {
			struct capy_step_item it = { .seq = s, .tokens = &tok, .n = 1, .sampler = sm, .token = &tok };
			CHECK_MSG(capy_engine_step(e, &it, 1, &err) == 0, "%s", err.msg);
			gtok[i] = tok;
			exact += k;
		}
		capy_seq_free(s);
		capy_sampler_free(sm);
	}
	CHECK_EQ_U64(row, script_rows());
	return exact;
}

static void model(const char *name)
{
	struct capy_artifact *a = open_quantized(name);
	float *ref = NULL, *got = NULL;
	int32_t gref[GDEC], ggot[GDEC];
	uint64_t V = 0, rows = script_rows();

	if (!a)
		return;
	for (size_t c = 0; c < ARRAY_SIZE(configs); c++) {
		const struct config *cf = &configs[c];
		uint64_t experts = 0;
		for (size_t i = 0; i < a->nstacks; i++)
			experts += a->stacks[i].count;
		struct capy_engine *e = open_gpu(a, cf, experts);
		if (!e)
			continue;
		const struct capy_model_config *mc = capy_engine_config(e);
		V = mc->vocab_size;
		if (!ref) {
			ref = calloc(rows * V, sizeof(float));
			got = calloc(rows * V, sizeof(float));
		}
		float *dst = c == 0 ? ref : got;
		memset(dst, 0, rows * V * sizeof(float));
		const uint64_t exact = script(e, dst, c == 0 ? gref : ggot, V, mc->n_experts_per_tok);
		struct capy_offload_stats st;
		const bool off = capy_engine_offload_stats(e, &st);
		if (c == 0) {
			CHECK_MSG(!off, "%s: all resident, yet offloading", name);
			printf("%-30s %-26s reference: %" PRIu64 " rows of logits\n", name, cf->what, rows);
		} else {
			size_t bad = bits_differ(got, ref, rows * V);
			printf("%-30s %-26s %zu of %" PRIu64 " logits differ; %" PRIu64 " slots of %" PRIu64
			       " experts, %" PRIu64 " resident, hits %" PRIu64 " misses %" PRIu64 " streamed %" PRIu64
			       " loads %" PRIu64 " evictions %" PRIu64 ", %d CPU threads, %s\n",
			       name, cf->what, bad, rows * V, st.slots, st.experts, st.resident, st.hits, st.misses,
			       st.streamed, st.loads, st.evictions, st.cpu_threads, capy_offload_host_name(st.host));
			CHECK_MSG(bad == 0, "%s, %s: logits not bitwise equal to all resident", name, cf->what);
			CHECK_MSG(!memcmp(ggot, gref, sizeof(gref)), "%s, %s: tokens sampled on the GPU differ from all resident",
				  name, cf->what);
			CHECK_MSG(off, "%s, %s: not offloading", name, cf->what);
			/* the model's MoE layers (an MTP head's experts are a stack too, not run here) */
			CHECK_EQ_U64(st.experts, mc->n_experts * moe_layers(mc));
			CHECK_EQ_U64(st.hits + st.misses, exact * moe_layers(mc));
			CHECK(st.streamed > 0);
			/* the hand-off's counts and times: a job per layer and step with misses, each
			 * reading at least one expert, run for a while and waited for by the GPU */
			CHECK(st.misses ? st.jobs > 0 : st.jobs == 0);
			CHECK(st.jobs <= st.misses && st.job_bytes >= st.jobs);
			CHECK(!st.jobs || (st.job_seconds > 0 && st.wait_seconds > 0));
			CHECK_EQ_INT(st.cpu_threads, cf->threads);
			if (!cf->memlock)
				CHECK_EQ_INT(st.host, CAPY_OFFLOAD_HOST_PINNED);
			else if (cf->pageable)
				CHECK_EQ_INT(st.host, CAPY_OFFLOAD_HOST_REGISTERED);
			else
				CHECK(st.host != CAPY_OFFLOAD_HOST_PINNED);
			if (cf->slots < 0) {
				CHECK_EQ_U64(st.slots, 0);
				CHECK_EQ_U64(st.hits, 0);
				CHECK_EQ_U64(st.loads, 0);
			} else {
				CHECK_EQ_U64(st.slots, experts / (uint64_t)cf->slots);
				CHECK(st.loads > 0 && st.hits > 0 && st.misses > 0);
				CHECK(st.resident <= st.slots);
			}
		}
		CHECK_EQ_U64(capy_engine_pages_used(e), 0);
		capy_engine_free(e);
	}
	free(ref);
	free(got);
	capy_artifact_close(a);
}

static void test_models(void)
{
	static const char *const names[] = { "qwen3_5_moe", "qwen3_5_moe-nvfp4", "qwen3_next", "qwen4_exp",
					     "share/models/capy-tiny-nvfp4" };

	const char *only = getenv("CAPY_OFFLOAD_MODEL"); /* one model (a name's substring), to run less */

	for (size_t i = 0; i < ARRAY_SIZE(names); i++)
		if (!only || strstr(names[i], only))
			model(names[i]);
}

/* The elastic attention cache (offload/plan.h): a sequence that grows past the held pages
 * takes slots from the expert cache (its coldest experts leave, the kept ones in the lent
 * slots move), gives them back when it ends, and the logits stay bitwise those of an engine
 * with every expert resident, twice over (the second time into slots the first one left). */
#define ELONG 4500
#define EDEC 8
static void test_elastic(void)
{
	struct capy_artifact *a = open_quantized("qwen3_5_moe");
	struct capy_err err = { 0 };
	int32_t *p = malloc(ELONG * sizeof(*p));
	float *ref = NULL, *got = NULL;
	uint64_t V = 0, experts = 0;

	if (!a || !p)
		goto out;
	for (size_t i = 0; i < a->nstacks; i++)
		experts += a->stacks[i].count;
	for (int i = 0; i < ELONG; i++)
		p[i] = (int32_t)((i * 53 + 7) % 500) + 3;
	for (int round = 0; round < 2; round++) {
		struct capy_engine_opts o = { .threads = 2, .device = "cuda", .step_tokens = 512, .max_seqs = 1,
					      .max_context = 8192, .expert_threads = 2,
					      .expert_slots = round ? (int64_t)experts / 2 : 0 };
		struct capy_engine *e = NULL;
		setenv("CAPY_CUDA_OFFLOAD_WAKE", "host", 1);
		unsetenv("CAPY_MEMLOCK");
		unsetenv("CAPY_CUDA_OFFLOAD_PAGEABLE");
		unsetenv("CAPY_CUDA_OFFLOAD_WAIT");
		unsetenv("CAPY_CUDA_OFFLOAD_POLICY");
		CHECK_MSG(capy_engine_new(&e, a, &o, &err) == 0, "%s", err.msg);
		if (!e)
			goto out;
		V = capy_engine_config(e)->vocab_size;
		if (!ref) {
			ref = calloc(2 * (EDEC + 1) * V, sizeof(float));
			got = calloc(2 * (EDEC + 1) * V, sizeof(float));
		}
		float *dst = round ? got : ref;
		for (int pass = 0; pass < 2; pass++) {
			struct capy_seq *s = NULL;
			float *l = malloc(V * sizeof(float));
			float *row = dst + (uint64_t)pass * (EDEC + 1) * V;
			capy_seq_new(e, &s, &err);
			CHECK_MSG(capy_engine_forward(e, s, p, ELONG, l, false, &err) == 0, "%s", err.msg);
			memcpy(row, l, V * sizeof(float));
			for (int i = 0; i < EDEC; i++) {
				int32_t tok = test_argmax(row + (uint64_t)i * V, V);
				CHECK_MSG(capy_engine_forward(e, s, &tok, 1, row + (uint64_t)(i + 1) * V, false, &err) == 0, "%s",
					  err.msg);
			}
			struct capy_offload_stats st;
			if (round && capy_engine_offload_stats(e, &st)) {
				printf("elastic, pass %d: %" PRIu64 " slots, %" PRIu64 " lent to the attention cache (%" PRIu64
				       " pages held), %" PRIu64 " resident, hits %" PRIu64 " misses %" PRIu64 " evictions %" PRIu64 "\n",
				       pass, st.slots, st.slots_lent, capy_engine_pages_held(e), st.resident, st.hits, st.misses,
				       st.evictions);
				CHECK(st.slots_lent > 0);
				CHECK_EQ_U64(st.slots + st.slots_lent, experts / 2);
				CHECK(st.resident <= st.slots);
			}
			capy_seq_free(s);
			free(l);
			if (round && capy_engine_offload_stats(e, &st)) { /* the sequence ended: the slots are back */
				CHECK_EQ_U64(st.slots_lent, 0);
				CHECK_EQ_U64(st.slots, experts / 2);
			}
		}
		CHECK_MSG(round || !capy_engine_offload_stats(e, NULL), "all resident, yet offloading");
		capy_engine_free(e);
	}
	if (ref && got) {
		size_t bad = bits_differ(got, ref, 2 * (EDEC + 1) * V);
		printf("elastic: %zu of %" PRIu64 " logits differ from all resident\n", bad, 2 * (EDEC + 1) * V);
		CHECK_MSG(bad == 0, "elastic: logits not bitwise equal to all resident");
	}
out:
	free(p);
	free(ref);
	free(got);
	capy_artifact_close(a);
}

/* Offload refuses BF16 routed experts (the CPU's exact kernels are W4A4), in one line. */
static void test_bf16_refused(void)
{
	struct capy_artifact *a = test_open_fixture("qwen3_5_moe");
	struct capy_engine_opts o = { .threads = 1, .device = "cuda", .step_tokens = 64, .expert_slots = 2 };
	struct capy_engine *e = NULL;
	struct capy_err err = { 0 };

	if (!a)
		return;
	CHECK_EQ_INT(capy_engine_new(&e, a, &o, &err), CAPY_EUNSUPPORTED);
	CHECK_MSG(strstr(err.msg, "--quantize-experts") && !strchr(err.msg, '\n'), "%s", err.msg);
	capy_artifact_close(a);
}

int main(void)
{
	if (!test_gpu_init())
		return 1;
	RUN(test_bf16_refused);
	RUN(test_models);
	RUN(test_elastic);
	return test_summary();
}
