/* u-cuda-model.c - the CUDA backend against the CPU backend on every fixture and on capy-tiny
 * (share/models, the trained model, BF16 and NVFP4): whole-model
 * logits within tolerance (prefill, all positions), greedy ids equal for 32 tokens, a batch
 * of 8 sequences bitwise equal to the 8 run alone, chunked prefill against token-by-token
 * decode, a context that spans several attention-cache pages in small steps, decode steps
 * with samplers and token masks (structured output) giving the tokens the host's masked
 * sampler picks from the same logits, speculative verification (keep_states windows cut
 * back, alone and beside other items) bitwise equal to one-token decoding, and on the models
 * with an MTP head, the head (engine.h capy_engine_mtp) and the steps' hidden states against
 * the CPU's. Runs on the first GPU (CAPY_GPU picks another); make test-cuda. */
#include "test.h"
#include "test-fixture.h"
#include "test-spec-model.h"
#include "cuda-test.h"
#include "engine/engine.h"
#include "sample/sample.h"

#include <string.h>

#define PROMPT 40
#define GREEDY 32
#define NBATCH 8

/* GPU against CPU: prefill logits' relative error and the positions whose argmax may differ,
 * decode logits' relative error (greedy ids must be equal everywhere). capy-tiny-nvfp4 is the
 * one model with W4A4 linears whose activations are trained, not random: prompt rows take the
 * tensor-core paths (grouped expert GEMMs summing in fp32, flash attention), and a sum that
 * lands an activation on the other side of an E2M1 rounding boundary moves it a whole FP4
 * step, which every later W4A4 linear carries on (docs/cuda.md). Measured on the H200 at
 * 0845d0e with capy-tiny's first weights: prefill 0.112 / 0.114, 6 and 2 of 40 argmaxes,
 * decode 2.2e-2 (BF16 KV); the retrained weights (6f52f14) have not run on a GPU yet. */
/* mtp_rel: the MTP head's logits (models with mtp.* tensors). A head row is one decoder layer
 * and lm_head on inputs both backends share (the CPU's hidden states), a fraction of the
 * whole model's arithmetic, whose logits measured 2.4e-6 .. 2.6e-4 from the CPU's (docs/
 * cuda.md); chained rows carry the head's own output forward, three times at most. So the
 * whole model's bound, 2e-3, and W4A4's on capy-tiny-nvfp4 (an FP4 bin flipped before one of
 * the head's experts moves that expert's output a whole step). On the H100 (1e2cb2f,
 * 99391e4) the head's logits came within 1.9e-6 .. 1.6e-4 of the CPU's, qwen4_exp's 1.3e-5
 * (docs/testing.md). */
struct fixture {
	const char *name;
	double prefill_rel, decode_rel, long_rel; /* long_rel: 300 tokens, last logits against the CPU */
	int argmax_off;
	double mtp_rel;
};
static const struct fixture fixtures[] = {
	{ "qwen3_5-dense", 2e-3, 2e-3, 2e-3, 1, 2e-3 },
	{ "qwen3_5_moe", 2e-3, 2e-3, 2e-3, 1, 2e-3 },
	{ "qwen3_5_moe-nvfp4", 2e-3, 2e-3, 2e-3, 1, 2e-3 },
	{ "qwen3_next", 2e-3, 2e-3, 2e-3, 1, 2e-3 },
	{ "qwen4_exp", 2e-3, 2e-3, 2e-3, 1, 2e-3 },
	{ "share/models/capy-tiny", 2e-3, 2e-3, 2e-3, 1, 2e-3 },
	/* W4A4 on trained weights: an activation that the GPU's BF16 linears or attention put a
	 * few ulps from the CPU's can land in the next FP4 bin of the quantization before an
	 * expert, which moves that expert's output by a whole FP4 step (GPU and CPU are each
	 * bitwise self-consistent, chunked or token by token). Measured on the retrained weights
	 * (docs/records, 5f85bd1): prefill 1.8e-6, decode 3.0e-6, 300 tokens 2.1e-2; on the first
	 * weights prefill 0.11. */
	{ "share/models/capy-tiny-nvfp4", 0.25, 5e-2, 5e-2, 10, 5e-2 },
};
static struct capy_engine *open_engine(const struct capy_artifact *a, const char *dev, enum capy_kv_dtype kv,
				       uint64_t step_tokens, bool mtp)
{
	struct capy_engine_opts o = { .threads = 2, .kv = kv, .device = dev, .step_tokens = step_tokens, .mtp = mtp };
	struct capy_engine *e = NULL;
	struct capy_err err = { 0 };
	const char *g = getenv("CAPY_GPU");

	o.gpu = g ? (int)strtol(g, NULL, 10) : 0;
	CHECK_MSG(capy_engine_new(&e, a, &o, &err) == 0, "%s: %s", dev, err.msg);
	return e;
}

static void make_prompt(int32_t *p, uint64_t n, uint64_t vocab, int seed)
{
	for (uint64_t i = 0; i < n; i++)
		p[i] = (int32_t)(((uint64_t)seed * 131 + i * 17 + 3) % vocab);
}

/* Prefill logits at every position: relative error, and the argmax agreement. */
static void prefill_logits(const struct fixture *fx, const char *kvn, struct capy_engine *cpu, struct capy_engine *gpu,
			   uint64_t V)
{
	struct capy_err err = { 0 };
	struct capy_seq *a = NULL, *b = NULL;
	int32_t prompt[PROMPT];
	float *lc = calloc(PROMPT * V, sizeof(float)), *lg = calloc(PROMPT * V, sizeof(float));
	int same = 0;

	make_prompt(prompt, PROMPT, V, 1);
	capy_seq_new(cpu, &a, &err);
	capy_seq_new(gpu, &b, &err);
	CHECK_MSG(capy_engine_forward(cpu, a, prompt, PROMPT, lc, true, &err) == 0, "%s", err.msg);
	CHECK_MSG(capy_engine_forward(gpu, b, prompt, PROMPT, lg, true, &err) == 0, "%s", err.msg);
	double re = rel_err(lg, lc, PROMPT * V);
	for (int t = 0; t < PROMPT; t++)
		same += test_argmax(lc + t * V, V) == test_argmax(lg + t * V, V);
	printf("%-18s kv %-4s prefill logits: rel err %.2e, argmax equal at %d/%d positions\n", fx->name, kvn, re, same,
	       PROMPT);
	CHECK_MSG(re < fx->prefill_rel, "%s kv %s: prefill logits rel err %.3e", fx->name, kvn, re);
	CHECK_MSG(same >= PROMPT - fx->argmax_off, "%s kv %s: argmax differs at %d positions", fx->name, kvn,
		  PROMPT - same);
	capy_seq_free(a);
	capy_seq_free(b);
	free(lc);
	free(lg);
}

/* Greedy decoding, each backend on its own continuation: the ids must be equal. */
static void greedy(const struct fixture *fx, const char *kvn, struct capy_engine *cpu, struct capy_engine *gpu,
		   uint64_t V)
{
	struct capy_err err = { 0 };
	struct capy_engine *es[2] = { cpu, gpu };
	int32_t ids[2][GREEDY], prompt[PROMPT];
	float *l = calloc(V, sizeof(float));
	double worst = 0;

	make_prompt(prompt, PROMPT, V, 2);
	for (int k = 0; k < 2; k++) {
		struct capy_seq *s = NULL;
		capy_seq_new(es[k], &s, &err);
		CHECK_MSG(capy_engine_forward(es[k], s, prompt, PROMPT, l, false, &err) == 0, "%s", err.msg);
		for (int i = 0; i < GREEDY; i++) {
			ids[k][i] = test_argmax(l, V);
			CHECK_MSG(capy_engine_forward(es[k], s, &ids[k][i], 1, l, false, &err) == 0, "%s", err.msg);
		}
		capy_seq_free(s);
	}
	int first = -1;
	for (int i = 0; i < GREEDY && first < 0; i++)
		if (ids[0][i] != ids[1][i])
			first = i;
	/* Where they agree, the decode logits themselves: one more step of each on the CPU's ids. */
	if (first < 0) {
		struct capy_seq *s[2] = { NULL, NULL };
		float *lc = calloc(V, sizeof(float));
		for (int k = 0; k < 2; k++) {
			capy_seq_new(es[k], &s[k], &err);
			capy_engine_forward(es[k], s[k], prompt, PROMPT, k ? l : lc, false, &err);
		}
		for (int i = 0; i < GREEDY; i++) {
			capy_engine_forward(cpu, s[0], &ids[0][i], 1, lc, false, &err);
			capy_engine_forward(gpu, s[1], &ids[0][i], 1, l, false, &err);
			double re = rel_err(l, lc, V);
			worst = re > worst ? re : worst;
		}
		capy_seq_free(s[0]);
		capy_seq_free(s[1]);
		free(lc);
	}
	printf("%-18s kv %-4s greedy %d tokens: %s (decode logits rel err <= %.2e)\n", fx->name, kvn, GREEDY,
	       first < 0 ? "ids equal" : "ids DIFFER", worst);
	CHECK_MSG(first < 0, "%s kv %s: greedy ids differ from token %d (cpu %d, cuda %d)", fx->name, kvn, first,
		  first < 0 ? 0 : ids[0][first], first < 0 ? 0 : ids[1][first]);
	CHECK_MSG(worst < fx->decode_rel, "%s kv %s: decode logits rel err %.3e", fx->name, kvn, worst);
	free(l);
}

/* 8 sequences alone, then together (prefills in one step, then decode steps of all 8):
 * every logit bitwise equal. */
static void batch8(const char *name, const char *kvn, struct capy_engine *gpu, uint64_t V)
{
	struct capy_err err = { 0 };
	struct capy_seq *alone[NBATCH], *tog[NBATCH];
	int32_t prompt[NBATCH][32], next[NBATCH][4];
	uint64_t plen[NBATCH];
	float *ref = calloc(NBATCH * 5 * V, sizeof(float)), *got = calloc(NBATCH * 5 * V, sizeof(float));
	struct capy_step_item it[NBATCH];
	size_t bad = 0;

	for (int q = 0; q < NBATCH; q++) {
		plen[q] = 1 + (uint64_t)(q * 7) % 31;
		make_prompt(prompt[q], plen[q], V, 10 + q);
		for (int i = 0; i < 4; i++)
			next[q][i] = (int32_t)((q * 7 + i * 29 + 100) % V);
		capy_seq_new(gpu, &alone[q], &err);
		capy_seq_new(gpu, &tog[q], &err);
		capy_engine_forward(gpu, alone[q], prompt[q], plen[q], ref + q * 5 * V, false, &err);
		for (int i = 0; i < 4; i++)
			capy_engine_forward(gpu, alone[q], &next[q][i], 1, ref + (q * 5 + i + 1) * V, false, &err);
	}
	for (int q = 0; q < NBATCH; q++)
		it[q] = (struct capy_step_item){ .seq = tog[q], .tokens = prompt[q], .n = plen[q],
				.logits = got + q * 5 * V, .all_logits = false };
	CHECK_MSG(capy_engine_step(gpu, it, NBATCH, &err) == 0, "%s", err.msg);
	for (int i = 0; i < 4; i++) {
		for (int q = 0; q < NBATCH; q++)
			it[q] = (struct capy_step_item){ .seq = tog[q], .tokens = &next[q][i], .n = 1,
					.logits = got + (q * 5 + i + 1) * V, .all_logits = false };
		CHECK_MSG(capy_engine_step(gpu, it, NBATCH, &err) == 0, "%s", err.msg);
	}
	bad = bits_differ(got, ref, NBATCH * 5 * V);
	printf("%-18s kv %-4s batch of %d: %zu of %" PRIu64 " logits differ from the sequences alone\n", name, kvn, NBATCH,
	       bad, (uint64_t)NBATCH * 5 * V);
	CHECK_MSG(bad == 0, "%s kv %s: batch of 8 not bitwise equal to single runs", name, kvn);
	for (int q = 0; q < NBATCH; q++) {
		capy_seq_free(alone[q]);
		capy_seq_free(tog[q]);
	}
	free(ref);
	free(got);
}

/* A step item's token mask for masked_steps: its bits (NULL: none), and how often asked. */
struct cmask {
	uint32_t *bits;
	int calls;
};

static const uint32_t *cuda_mask(void *ud)
{
	struct cmask *m = ud;

	m->calls++;
	return m->bits;
}

/* 8 sequences decoded together, each item with a sampler and (but one) a token mask: greedy
 * and top-k rows sampled on the device with their mask uploaded, rows the host samples
 * (temperature without top-k, a penalty), a row without a mask, a NULL mask (no token, no
 * draw), a mask of one id. The items ask for their logits too, so the host repeats each draw
 * with capy_sampler_next_masked on the very logits the device sampled: the same token, every
 * step; each mask asked for once a step. */
static void masked_steps(const char *name, const char *kvn, struct capy_engine *gpu, uint64_t V)
{
	enum { STEPS = 6 };
	const struct capy_sampler_params ps[NBATCH] = {
		{ .temperature = 0 },
		{ .temperature = 0.8f, .top_k = 20, .seed = 1 },
		{ .temperature = 1.2f, .top_k = 500, .top_p = 0.9f, .seed = 2 },
		{ .temperature = 1.0f, .seed = 3 },		/* no top-k: the host samples */
		{ .temperature = 0.9f, .top_k = 30, .seed = 6 },	/* no mask */
		{ .temperature = 0 },				/* a NULL mask */
		{ .temperature = 0.7f, .top_k = 5, .seed = 4 },	/* one id allowed */
		{ .temperature = 0.5f, .top_k = 40, .repetition_penalty = 1.2f, .seed = 5 }, /* the host */
	};
	const uint64_t W = (V + 31) / 32;
	struct capy_err err = { 0 };
	struct capy_sampler *dev[NBATCH], *host[NBATCH];
	struct capy_seq *s[NBATCH];
	struct capy_step_item it[NBATCH];
	struct cmask mk[NBATCH];
	uint32_t *bits = calloc(NBATCH * W, 4);
	float *l = calloc(NBATCH * V, sizeof(float)), *x = malloc(V * sizeof(float));
	int32_t tok[NBATCH], got[NBATCH], prompt[8];
	uint64_t r = 11;
	int same = 0, total = 0;

	for (int q = 0; q < NBATCH; q++) {
		capy_sampler_new(&dev[q], V, &ps[q], &err);
		capy_sampler_new(&host[q], V, &ps[q], &err);
		capy_seq_new(gpu, &s[q], &err);
		make_prompt(prompt, 8, V, 20 + q);
		CHECK_MSG(capy_engine_forward(gpu, s[q], prompt, 8, l, false, &err) == 0, "%s", err.msg);
		tok[q] = (int32_t)((uint64_t)(q * 13 + 5) % V);
	}
	for (int step = 0; step < STEPS; step++) {
		for (int q = 0; q < NBATCH; q++) {
			uint32_t *b = bits + q * W;
			for (uint64_t w = 0; w < W; w++) /* about a quarter of the ids */
				r = r * 6364136223846793005ull + 1442695040888963407ull, b[w] = (uint32_t)(r >> 29) & (uint32_t)(r >> 13);
			if (W * 32 > V)
				b[W - 1] &= (1u << (V % 32)) - 1;
			b[0] |= 1u << (q + step); /* never empty */
			if (q == 6) {
				memset(b, 0, W * 4);
				uint64_t id = (uint64_t)(step * 97 + 31) % V;
				b[id / 32] = 1u << (id % 32);
			}
			mk[q] = (struct cmask){ q == 5 ? NULL : b, 0 };
			got[q] = -2;
			it[q] = (struct capy_step_item){ .seq = s[q], .tokens = &tok[q], .n = 1, .logits = l + q * V,
							 .sampler = dev[q], .token = &got[q],
							 .mask = q == 4 ? NULL : cuda_mask, .mask_ud = &mk[q] };
		}
		CHECK_MSG(capy_engine_step(gpu, it, NBATCH, &err) == 0, "%s", err.msg);
		for (int q = 0; q < NBATCH; q++) {
			int32_t want;
			memcpy(x, l + q * V, V * sizeof(float));
			want = q == 5 ? -1 : q == 4 ? capy_sampler_next(host[q], x) : capy_sampler_next_masked(host[q], x, mk[q].bits);
			same += want == got[q];
			total++;
			CHECK_MSG(mk[q].calls == (q == 4 ? 0 : 1), "item %d: mask asked for %d times", q, mk[q].calls);
			tok[q] = got[q] >= 0 ? got[q] : (int32_t)((uint64_t)(step + q) % V);
		}
	}
	printf("%-18s kv %-4s masked decode of %d: %d of %d tokens as the host's masked sampler\n", name, kvn, NBATCH, same,
	       total);
	CHECK_MSG(same == total, "%s kv %s: masked tokens differ from the host's", name, kvn);
	for (int q = 0; q < NBATCH; q++) {
		capy_sampler_free(dev[q]);
		capy_sampler_free(host[q]);
		capy_seq_free(s[q]);
	}
	free(bits);
	free(l);
	free(x);
}

/* The same 300 tokens as one chunked prefill (steps of the engine's size) and token by
 * token: the last logits within tolerance, and against the CPU. */
static void chunked_vs_steps(const struct fixture *fx, const char *kvn, struct capy_engine *cpu, struct capy_engine *gpu,
			     uint64_t V)
{
	const char *name = fx->name;
	struct capy_err err = { 0 };
	enum { N = 300 };
	int32_t p[N];
	float *a = calloc(V, sizeof(float)), *b = calloc(V, sizeof(float)), *c = calloc(V, sizeof(float));
	struct capy_seq *s1 = NULL, *s2 = NULL, *s3 = NULL;

	make_prompt(p, N, V, 3);
	capy_seq_new(gpu, &s1, &err);
	capy_seq_new(gpu, &s2, &err);
	capy_seq_new(cpu, &s3, &err);
	CHECK_MSG(capy_engine_forward(gpu, s1, p, N, a, false, &err) == 0, "%s", err.msg);
	for (int i = 0; i < N; i++)
		capy_engine_forward(gpu, s2, &p[i], 1, b, false, &err);
	CHECK_MSG(capy_engine_forward(cpu, s3, p, N, c, false, &err) == 0, "%s", err.msg);
	double r1 = rel_err(a, b, V), r2 = rel_err(a, c, V);
	printf("%-18s kv %-4s %d tokens: chunked vs token-by-token rel err %.2e (%s), vs cpu %.2e\n", name, kvn, N, r1,
	       bits_differ(a, b, V) ? "not bitwise" : "bitwise", r2);
	CHECK_MSG(r1 < 2e-3 && r2 < fx->long_rel, "%s kv %s: long context rel err %.3e / %.3e", name, kvn, r1, r2);
	capy_seq_free(s1);
	capy_seq_free(s2);
	capy_seq_free(s3);
	free(a);
	free(b);
	free(c);
}

/* --- speculative verification (keep_states) ----------------------------------------------- */

/* A new sequence of e with the prompt p[0..n) run in one step. */
static struct capy_seq *seq_after(struct capy_engine *e, const int32_t *p, uint64_t n)
{
	struct capy_err err = { 0 };
	struct capy_seq *s = NULL;

	CHECK_MSG(capy_seq_new(e, &s, &err) == 0, "%s", err.msg);
	CHECK_MSG(capy_engine_forward(e, s, p, n, NULL, false, &err) == 0, "%s", err.msg);
	return s;
}

/* One step of s: tokens t[0..n), with all their rows' logits into rows (NULL: none), keeping
 * states where asked. */
static void run_item(struct capy_engine *e, struct capy_seq *s, const int32_t *t, uint64_t n, float *rows, bool keep)
{
	struct capy_err err = { 0 };

	CHECK_MSG(capy_engine_step(e, &(struct capy_step_item){ .seq = s, .tokens = t, .n = n, .logits = rows,
				   .all_logits = true, .keep_states = keep }, 1, &err) == 0, "%s", err.msg);
}

/* Tokens t[0..n) one step each, row i's logits into rows + i V. */
static void run_one_by_one(struct capy_engine *e, struct capy_seq *s, const int32_t *t, uint64_t n, float *rows,
			   uint64_t V)
{
	for (uint64_t i = 0; i < n; i++)
		run_item(e, s, t + i, 1, rows ? rows + i * V : NULL, false);
}

/* Whether the recurrent states of a and b (capy_snapshot_export's host bytes: every GDN
 * layer's conv window and delta-rule state, every PLE layer's windows and token context) are
 * bitwise equal. */
static bool same_state(struct capy_engine *e, struct capy_seq *a, struct capy_seq *b)
{
	struct capy_err err = { 0 };
	uint64_t n = capy_engine_state_io_bytes(e);
	uint8_t *x = malloc(n ? n : 1), *y = malloc(n ? n : 1);
	struct capy_snapshot *sa = NULL, *sb = NULL;
	bool same;

	CHECK_MSG(capy_snapshot_take(a, &sa, &err) == 0 && capy_snapshot_export(sa, x, &err) == 0, "%s", err.msg);
	CHECK_MSG(capy_snapshot_take(b, &sb, &err) == 0 && capy_snapshot_export(sb, y, &err) == 0, "%s", err.msg);
	same = n && !memcmp(x, y, n);
	capy_snapshot_free(sa);
	capy_snapshot_free(sb);
	free(x);
	free(y);
	return same;
}

/* Windows of k drafts (k + 1 rows: 1 to 4 as capy-gen runs them, and 19, a window longer than
 * CK_GROUPED_MIN_ROWS, which must still take the decode paths) after prompts that put them
 * across an attention-cache page's boundary or not: the rows are the logits of one-token
 * steps; cut back to each kept length (the drafts after it rejected), the sequence's state is
 * bitwise that of a sequence that decoded only the kept tokens, and a second window then
 * gives that sequence's rows and, cut again, its state. */
static void verify_cut(const char *name, const char *kvn, struct capy_engine *gpu, uint64_t V)
{
	enum { KMAX = 19, MORE = 3 };
	static const uint64_t ks[] = { 1, 2, 3, 4, KMAX }, plens[] = { 5, 61 };
	int32_t prompt[64], run[KMAX + 1], more[MORE];
	float *rows = malloc((KMAX + 1) * V * sizeof(float)), *ref = malloc((KMAX + 1) * V * sizeof(float));
	float *ref_more = malloc(2 * V * sizeof(float));
	int bad_rows = 0, bad_state = 0, bad_more = 0, cuts = 0;
	struct capy_err err = { 0 };

	make_prompt(prompt, 64, V, 30);
	for (size_t pi = 0; pi < ARRAY_SIZE(plens); pi++) {
		for (size_t ki = 0; ki < ARRAY_SIZE(ks); ki++) {
			const uint64_t plen = plens[pi], n = ks[ki] + 1;
			struct capy_seq *r = seq_after(gpu, prompt, plen);
			for (uint64_t i = 0; i < n; i++)
				run[i] = (int32_t)((i * 37 + n * 11 + plen) % V);
			run_one_by_one(gpu, r, run, n, ref, V);
			capy_seq_free(r);
			/* keep: the window's first token and keep - 1 accepted drafts */
			for (uint64_t keep = 1; keep <= n; keep++) {
				if (n > 5 && keep % 6 != 1 && keep != n)
					continue;
				struct capy_seq *w = seq_after(gpu, prompt, plen), *d = seq_after(gpu, prompt, plen);
				run_item(gpu, w, run, n, rows, true);
				bad_rows += keep == 1 && bits_differ(rows, ref, n * V) != 0;
				CHECK_MSG(capy_seq_truncate(w, plen + keep, &err) == 0, "%s", err.msg);
				run_one_by_one(gpu, d, run, keep, NULL, V);
				bad_state += !same_state(gpu, w, d);
				/* a second window on the cut sequence, cut after 2 of its 3 tokens */
				for (int i = 0; i < MORE; i++)
					more[i] = (int32_t)((keep * 5 + (uint64_t)i * 101 + 7) % V);
				run_item(gpu, w, more, MORE, rows, true);
				run_one_by_one(gpu, d, more, 2, ref_more, V);
				bad_more += bits_differ(rows, ref_more, 2 * V) != 0;
				CHECK_MSG(capy_seq_truncate(w, plen + keep + 2, &err) == 0, "%s", err.msg);
				bad_state += !same_state(gpu, w, d);
				cuts++;
				capy_seq_free(w);
				capy_seq_free(d);
			}
		}
	}
	printf("%-18s kv %-4s verification: %d cuts (1 to %d drafts): %d windows' rows, %d states, %d second windows "
	       "differ from one-token decoding\n", name, kvn, cuts, KMAX, bad_rows, bad_state, bad_more);
	CHECK_MSG(!bad_rows && !bad_state && !bad_more, "%s kv %s: verification not bitwise one-token decoding", name, kvn);
	free(rows);
	free(ref);
	free(ref_more);
}

/* One step of decode items, two windows (5 rows, and 20: longer than CK_GROUPED_MIN_ROWS)
 * and a prompt chunk of 24 rows (the prompt paths: grouped experts, flash attention, cuBLASLt),
 * against each item run alone: every logit bitwise equal, and after the windows are cut
 * back, every sequence's state. */
static void verify_batched(const char *name, const char *kvn, struct capy_engine *gpu, uint64_t V)
{
	enum { NI = 5 };
	static const uint64_t plen[NI] = { 9, 30, 61, 3, 17 }, n[NI] = { 1, 5, 1, 24, 20 }, cut[NI] = { 0, 2, 0, 0, 11 };
	static const bool keep[NI] = { false, true, false, false, true };
	int32_t prompt[NI][64], toks[NI][24];
	float *alone = malloc(NI * 24 * V * sizeof(float)), *tog = malloc(NI * 24 * V * sizeof(float));
	struct capy_seq *a[NI], *b[NI];
	struct capy_step_item it[NI];
	struct capy_err err = { 0 };
	size_t bad = 0;
	int bad_state = 0;

	for (int q = 0; q < NI; q++) {
		make_prompt(prompt[q], plen[q], V, 40 + q);
		for (uint64_t i = 0; i < n[q]; i++)
			toks[q][i] = (int32_t)(((uint64_t)q * 53 + i * 19 + 2) % V);
		a[q] = seq_after(gpu, prompt[q], plen[q]);
		b[q] = seq_after(gpu, prompt[q], plen[q]);
		run_item(gpu, a[q], toks[q], n[q], alone + q * 24 * V, keep[q]);
		it[q] = (struct capy_step_item){ .seq = b[q], .tokens = toks[q], .n = n[q], .logits = tog + q * 24 * V,
						 .all_logits = true, .keep_states = keep[q] };
	}
	CHECK_MSG(capy_engine_step(gpu, it, NI, &err) == 0, "%s", err.msg);
	for (int q = 0; q < NI; q++) {
		bad += bits_differ(tog + q * 24 * V, alone + q * 24 * V, n[q] * V);
		if (cut[q]) {
			CHECK_MSG(capy_seq_truncate(a[q], plen[q] + cut[q], &err) == 0, "%s", err.msg);
			CHECK_MSG(capy_seq_truncate(b[q], plen[q] + cut[q], &err) == 0, "%s", err.msg);
		}
		bad_state += !same_state(gpu, a[q], b[q]);
		capy_seq_free(a[q]);
		capy_seq_free(b[q]);
	}
	printf("%-18s kv %-4s windows beside decode items and a prompt chunk: %zu logits, %d states differ from the "
	       "items alone\n", name, kvn, bad, bad_state);
	CHECK_MSG(!bad && !bad_state, "%s kv %s: a step with windows is not bitwise its items alone", name, kvn);
	free(alone);
	free(tog);
}

/* --- the MTP head ------------------------------------------------------------------------ */

#define MTP_K 4
#define MTP_DEC 3

/* One backend's run of the MTP head on a prompt:
 * - hid: the prompt's hidden states (capy_engine_forward_hidden), dec: those of MTP_DEC decode
 *   steps after it (step items' hidden, one token each), on a second sequence;
 * - tf, tf1: the teacher-forced rows t = MTP(h[t], x[t + 1]) over the prompt, from the CPU's
 *   hidden states (so only the head's own arithmetic differs), in one call (prompt-sized: the
 *   GPU's prefill paths) and again one row a call (the decode paths);
 * - draft[0], draft[1]: MTP_K chained rows from the last position (engine.h: row j + 1 from row
 *   j's g and draft j), over the whole vocabulary and over a draft vocabulary, each backend
 *   fed its own g and the CPU's drafts as tokens; ids: each row's argmax (the first maximum in
 *   the vocabulary's order, as capy_mtp_draft picks). */
struct mtp_run {
	float *hid, *dec, *tf, *tf1, *draft[2];
	int32_t ids[2][MTP_K];
};

static void mtp_run_free(struct mtp_run *r)
{
	free(r->hid);
	free(r->dec);
	free(r->tf);
	free(r->tf1);
	free(r->draft[0]);
	free(r->draft[1]);
}

/* The hidden states of a prompt and of MTP_DEC one-token steps after it, on a new sequence. */
static void mtp_hidden(struct capy_engine *e, const int32_t *prompt, struct mtp_run *r, uint64_t H)
{
	struct capy_err err = { 0 };
	struct capy_seq *s = NULL;

	capy_seq_new(e, &s, &err);
	CHECK_MSG(capy_engine_forward_hidden(e, s, prompt, PROMPT, NULL, false, r->hid, &err) == 0, "%s", err.msg);
	for (int i = 0; i < MTP_DEC; i++) {
		struct capy_step_item it = { .seq = s, .tokens = &prompt[i], .n = 1, .hidden = r->dec + i * H };
		CHECK_MSG(capy_engine_step(e, &it, 1, &err) == 0, "%s", err.msg);
	}
	capy_seq_free(s);
}

/* The head's rows on a sequence that ran the prompt: teacher-forced (h_in: the CPU's hidden
 * states), then the two chains (chain: the tokens to feed, NULL: the run's own drafts). */
static void mtp_rows(struct capy_engine *e, const int32_t *prompt, const float *h_in, const int32_t (*chain)[MTP_K],
		     const int32_t *dv, uint64_t n_dv, struct mtp_run *r)
{
	const uint64_t V = capy_engine_config(e)->vocab_size, H = capy_engine_config(e)->hidden_size;
	struct capy_err err = { 0 };
	struct capy_seq *s = NULL;
	float *g = malloc(H * sizeof(float)), *h = malloc(H * sizeof(float));

	capy_seq_new(e, &s, &err);
	CHECK_MSG(capy_engine_forward(e, s, prompt, PROMPT, NULL, false, &err) == 0, "%s", err.msg);
	CHECK_MSG(capy_engine_mtp(e, &(struct capy_mtp_rows){ .seq = s, .pos = 0, .n = PROMPT - 1, .hidden = h_in,
						  .tokens = prompt + 1, .logits = r->tf, .all_logits = true },
				  &err) == 0, "%s", err.msg);
	for (uint64_t t = 0; t + 1 < PROMPT; t++) /* the same rows again, one a call, in order */
		CHECK_MSG(capy_engine_mtp(e, &(struct capy_mtp_rows){ .seq = s, .pos = t, .n = 1, .hidden = h_in + t * H,
							  .tokens = prompt + 1 + t, .logits = r->tf1 + t * V },
					  &err) == 0, "%s", err.msg);
	for (int mode = 0; mode < 2; mode++) {
		const uint64_t W = mode ? n_dv : V;
		int32_t tok = (int32_t)(((uint64_t)prompt[PROMPT - 1] * 3 + 1) % V); /* "next" */
		memcpy(h, h_in + (PROMPT - 1) * H, H * sizeof(float));
		for (int j = 0; j < MTP_K; j++) {
			float *row = r->draft[mode] + j * W;
			CHECK_MSG(capy_engine_mtp(e, &(struct capy_mtp_rows){ .seq = s, .pos = PROMPT - 1 + (uint64_t)j, .n = 1,
								  .hidden = h, .tokens = &tok, .g = g,
								  .ids = mode ? dv : NULL, .n_ids = mode ? n_dv : 0,
								  .logits = row },
						  &err) == 0, "%s", err.msg);
			r->ids[mode][j] = mode ? dv[test_argmax(row, W)] : test_argmax(row, W);
			memcpy(h, g, H * sizeof(float));
			tok = chain ? chain[mode][j] : r->ids[mode][j];
		}
	}
	capy_seq_free(s);
	free(g);
	free(h);
}

static void mtp_alloc(struct mtp_run *r, uint64_t V, uint64_t H, uint64_t n_dv)
{
	r->hid = calloc(PROMPT * H, sizeof(float));
	r->dec = calloc(MTP_DEC * H, sizeof(float));
	r->tf = calloc((PROMPT - 1) * V, sizeof(float));
	r->tf1 = calloc((PROMPT - 1) * V, sizeof(float));
	r->draft[0] = calloc(MTP_K * V, sizeof(float));
	r->draft[1] = calloc(MTP_K * n_dv, sizeof(float));
}

/* Rows of n logits whose argmaxes are equal in a and b. */
static int same_argmax(const float *a, const float *b, uint64_t rows, uint64_t n)
{
	int same = 0;

	for (uint64_t t = 0; t < rows; t++)
		same += test_argmax(a + t * n, n) == test_argmax(b + t * n, n);
	return same;
}

/* The MTP head on the GPU against the CPU's (both engines opened with it): the steps' hidden
 * states, the teacher-forced rows both ways, the chained drafts' logits and ids with and
 * without a draft vocabulary (every other id from the top: a priority order that is not the
 * vocabulary's), and the draft vocabulary's logits bitwise the whole vocabulary's at its ids
 * on the GPU (the first chained row: the same inputs in both chains). */
static void mtp_compare(const struct fixture *fx, const char *kvn, struct capy_engine *cpu, struct capy_engine *gpu)
{
	const uint64_t V = capy_engine_config(cpu)->vocab_size, H = capy_engine_config(cpu)->hidden_size, n_dv = V / 2;
	int32_t prompt[PROMPT], *dv = malloc(n_dv * sizeof(int32_t));
	struct mtp_run c = { 0 }, g = { 0 };
	size_t bits = 0;

	make_prompt(prompt, PROMPT, V, 4);
	for (uint64_t i = 0; i < n_dv; i++)
		dv[i] = (int32_t)(V - 1 - 2 * i);
	mtp_alloc(&c, V, H, n_dv);
	mtp_alloc(&g, V, H, n_dv);
	mtp_hidden(cpu, prompt, &c, H);
	mtp_hidden(gpu, prompt, &g, H);
	mtp_rows(cpu, prompt, c.hid, NULL, dv, n_dv, &c);
	mtp_rows(gpu, prompt, c.hid, (const int32_t(*)[MTP_K])c.ids, dv, n_dv, &g);
	const double rh = rel_err(g.hid, c.hid, PROMPT * H), rd = rel_err(g.dec, c.dec, MTP_DEC * H);
	const double rt = rel_err(g.tf, c.tf, (PROMPT - 1) * V), rt1 = rel_err(g.tf1, c.tf1, (PROMPT - 1) * V);
	const double r0 = rel_err(g.draft[0], c.draft[0], MTP_K * V), r1 = rel_err(g.draft[1], c.draft[1], MTP_K * n_dv);
	const int st = same_argmax(g.tf, c.tf, PROMPT - 1, V), st1 = same_argmax(g.tf1, c.tf1, PROMPT - 1, V);
	int ids_same = 0;
	for (int mode = 0; mode < 2; mode++)
		for (int j = 0; j < MTP_K; j++)
			ids_same += g.ids[mode][j] == c.ids[mode][j];
	for (uint64_t i = 0; i < n_dv; i++)
		bits += memcmp(&g.draft[1][i], &g.draft[0][dv[i]], sizeof(float)) != 0;
	printf("%-18s kv %-4s MTP: hidden rel err %.2e (prompt) %.2e (decode); teacher-forced logits %.2e / %.2e "
	       "(one call / a row a call), argmax equal %d / %d of %d; chained drafts %.2e / %.2e (whole / draft "
	       "vocabulary), ids equal %d of %d; draft vocabulary %s the whole vocabulary's logits\n",
	       fx->name, kvn, rh, rd, rt, rt1, st, st1, PROMPT - 1, r0, r1, ids_same, 2 * MTP_K,
	       bits ? "NOT bitwise" : "bitwise");
	CHECK_MSG(rh < fx->prefill_rel && rd < fx->decode_rel, "%s kv %s: hidden states rel err %.3e / %.3e", fx->name,
		  kvn, rh, rd);
	CHECK_MSG(rt < fx->mtp_rel && rt1 < fx->mtp_rel && r0 < fx->mtp_rel && r1 < fx->mtp_rel,
		  "%s kv %s: MTP logits rel err %.3e %.3e %.3e %.3e", fx->name, kvn, rt, rt1, r0, r1);
	CHECK_MSG(st >= PROMPT - 1 - fx->argmax_off && st1 >= PROMPT - 1 - fx->argmax_off,
		  "%s kv %s: teacher-forced MTP argmax differs at %d / %d rows", fx->name, kvn, PROMPT - 1 - st,
		  PROMPT - 1 - st1);
	CHECK_MSG(ids_same == 2 * MTP_K, "%s kv %s: %d of %d chained draft ids differ", fx->name, kvn,
		  2 * MTP_K - ids_same, 2 * MTP_K);
	CHECK_MSG(bits == 0, "%s kv %s: %zu draft-vocabulary logits differ from the whole vocabulary's", fx->name, kvn, bits);
	mtp_run_free(&c);
	mtp_run_free(&g);
	free(dv);
}

/* Models with an MTP head (mtp.* tensors): engines opened with it, BF16 and INT8 caches. */
static void mtp_family(const struct fixture *fx, const struct capy_artifact *a)
{
	static const enum capy_kv_dtype kvs[] = { CAPY_KV_BF16, CAPY_KV_INT8 };
	static const char *const kvn[] = { "bf16", "int8" };

	if (!capy_artifact_find(a, "mtp.fc.weight"))
		return;
	for (size_t k = 0; k < ARRAY_SIZE(kvs); k++) {
		struct capy_engine *cpu = open_engine(a, "cpu", kvs[k], 128, true), *gpu = open_engine(a, "cuda", kvs[k], 128, true);
		if (cpu && gpu) {
			mtp_compare(fx, kvn[k], cpu, gpu);
			CHECK_EQ_U64(capy_engine_pages_used(gpu), 0);
		}
		capy_engine_free(cpu);
		capy_engine_free(gpu);
	}
}

static void family(const struct fixture *fx)
{
	const char *name = fx->name;
	struct capy_artifact *a = test_open_fixture(name);
	static const enum capy_kv_dtype kvs[] = { CAPY_KV_BF16, CAPY_KV_INT8 };
	static const char *const kvn[] = { "bf16", "int8" };

	if (!a)
		return;
	for (size_t k = 0; k < ARRAY_SIZE(kvs); k++) {
		struct capy_engine *cpu = open_engine(a, "cpu", kvs[k], 128, false),
				   *gpu = open_engine(a, "cuda", kvs[k], 128, false);
		if (cpu && gpu) {
			uint64_t V = capy_engine_config(cpu)->vocab_size;
			prefill_logits(fx, kvn[k], cpu, gpu, V);
			greedy(fx, kvn[k], cpu, gpu, V);
			batch8(name, kvn[k], gpu, V);
			masked_steps(name, kvn[k], gpu, V);
			chunked_vs_steps(fx, kvn[k], cpu, gpu, V);
			verify_cut(name, kvn[k], gpu, V);
			verify_batched(name, kvn[k], gpu, V);
			CHECK_EQ_U64(capy_engine_pages_used(gpu), 0);
		}
		capy_engine_free(cpu);
		capy_engine_free(gpu);
	}
	mtp_family(fx, a);
	capy_artifact_close(a);
}

static void test_families(void)
{
	for (size_t i = 0; i < ARRAY_SIZE(fixtures); i++)
		family(&fixtures[i]);
}

/* Speculative sampling on rows from the GPU: the acceptance rule's outcomes over 6,000 seeds
 * against the exact probabilities (test-spec-model.h; the CPU's rows in t/unit/u-spec.c). */
static void test_spec_distribution(void)
{
	test_spec_accept_on_model(&(struct capy_engine_opts){ .threads = 2, .device = "cuda" });
}

int main(void)
{
	if (!test_gpu_init())
		return 1;
	RUN(test_families);
	RUN(test_spec_distribution);
	return test_summary();
}
