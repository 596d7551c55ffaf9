/* u-engine.c - sequence state: fork gives an independent copy, a checkpoint lets a sequence
 * be cut back exactly, shared prefixes and snapshots resume exactly, bad token ids are
 * refused, storage reserved up front serves them, and a batched step gives every sequence the
 * bits it gets alone. Runs on the
 * qwen4_exp fixture, whose state has every kind (KV pages, QSA blocks, GDN, PLE), and the
 * batch tests on every family. */
#include "test.h"
#include "test-fixture.h"
#include "artifact/artifact.h"
#include "convert/convert.h"
#include "engine/engine.h"
#include "sample/sample.h"

#include <unistd.h>

static struct capy_artifact *art;
static struct capy_engine *eng;
static uint64_t V;

static void setup(void)
{
	struct capy_err err = { 0 };

	art = test_open_fixture("qwen4_exp");
	CHECK_EQ_INT(capy_engine_new(&eng, art, &(struct capy_engine_opts){ .threads = 2 }, &err), 0);
	CHECK_MSG(!err.msg[0], "%s", err.msg);
	V = capy_engine_config(eng)->vocab_size;
}

static const int32_t A[20] = { 5, 80, 200, 17, 33, 512, 44, 90, 300, 12, 7, 8, 9, 100, 101, 102, 250, 251, 3, 4 };
static const int32_t B[6] = { 60, 61, 512, 63, 64, 65 };
static const int32_t C[3] = { 400, 401, 402 };

static void test_fork(void)
{
	struct capy_err err = { 0 };
	struct capy_seq *s, *f;
	float *l1 = malloc(V * 4), *l2 = malloc(V * 4);

	CHECK_EQ_INT(capy_seq_new(eng, &s, &err), 0);
	CHECK_EQ_INT(capy_engine_forward(eng, s, A, 20, l1, false, &err), 0);
	CHECK_EQ_INT(capy_seq_fork(s, &f, &err), 0);
	CHECK_EQ_U64(capy_seq_len(f), 20);
	for (int i = 0; i < 6; i++) {
		capy_engine_forward(eng, s, &B[i], 1, l1, false, &err);
		capy_engine_forward(eng, f, &B[i], 1, l2, false, &err);
		CHECK_MSG(!memcmp(l1, l2, V * 4), "fork differs at step %d", i);
	}
	/* The fork is independent: advancing one leaves the other where it was. */
	capy_engine_forward(eng, s, C, 3, l1, false, &err);
	CHECK_EQ_U64(capy_seq_len(s), 29);
	CHECK_EQ_U64(capy_seq_len(f), 26);
	capy_seq_free(s);
	capy_seq_free(f);
	free(l1);
	free(l2);
}

static void test_truncate(void)
{
	struct capy_err err = { 0 };
	struct capy_seq *s, *r;
	float *l1 = malloc(V * 6 * 4), *l2 = malloc(V * 6 * 4);

	capy_seq_new(eng, &s, &err);
	capy_seq_new(eng, &r, &err);
	capy_engine_forward(eng, s, A, 20, l1, false, &err);
	capy_engine_forward(eng, r, A, 20, l2, false, &err);
	CHECK_EQ_INT(capy_seq_checkpoint(s, &err), 0);
	/* Wander off (across a QSA block boundary and a PLE context change), then come back. */
	capy_engine_forward(eng, s, C, 3, l1, false, &err);
	capy_engine_forward(eng, s, B, 6, l1, true, &err);
	CHECK_EQ_INT(capy_seq_truncate(s, 20, &err), 0);
	CHECK_EQ_U64(capy_seq_len(s), 20);
	capy_engine_forward(eng, s, B, 6, l1, true, &err);
	capy_engine_forward(eng, r, B, 6, l2, true, &err);
	CHECK(!memcmp(l1, l2, V * 6 * 4));
	CHECK(capy_seq_truncate(s, 21, &err) == CAPY_EINVAL);
	CHECK_CONTAINS(err.msg, "no checkpoint");
	capy_seq_free(s);
	capy_seq_free(r);
	free(l1);
	free(l2);
}

static void test_bad_ids(void)
{
	struct capy_err err = { 0 };
	struct capy_seq *s;
	int32_t bad[2] = { 1, (int32_t)V };
	float *l = malloc(V * 4);

	capy_seq_new(eng, &s, &err);
	CHECK(capy_engine_forward(eng, s, bad, 2, l, false, &err) == CAPY_EINVAL);
	CHECK_CONTAINS(err.msg, "at position 1 is outside the vocabulary");
	CHECK_EQ_U64(capy_seq_len(s), 0);
	CHECK(capy_engine_forward(eng, s, bad, 0, l, false, &err) == CAPY_EINVAL);
	capy_seq_free(s);
	free(l);
}

/* Shared prefixes: a sequence made from the first 30 tokens of another plus the snapshot
 * taken there continues exactly as the original did, and writing into the shared pages
 * (the last one is partly filled) copies them: the original is unchanged. */
static void test_share_snapshot(void)
{
	struct capy_err err = { 0 };
	struct capy_seq *s, *d, *ref;
	struct capy_snapshot *sn;
	float *l1 = malloc(V * 20 * 4), *l2 = malloc(V * 20 * 4);
	int32_t toks[50];

	for (int i = 0; i < 50; i++)
		toks[i] = (int32_t)((i * 37 + 11) % 520);
	capy_seq_new(eng, &s, &err);
	capy_seq_new(eng, &ref, &err);
	CHECK_EQ_INT(capy_engine_forward(eng, s, toks, 30, l1, false, &err), 0);
	CHECK_EQ_INT(capy_snapshot_take(s, &sn, &err), 0);
	CHECK_EQ_U64(capy_snapshot_len(sn), 30);
	CHECK(capy_snapshot_bytes(sn) > 0);
	CHECK_EQ_INT(capy_engine_forward(eng, s, toks + 30, 20, l1, true, &err), 0);
	CHECK_EQ_INT(capy_seq_share(s, 30, &d, &err), 0);
	CHECK_EQ_U64(capy_seq_len(d), 30);
	CHECK(!memcmp(capy_seq_tokens(d), toks, 30 * sizeof(int32_t)));
	/* Without the snapshot the shared sequence has no recurrent state. */
	CHECK(capy_engine_forward(eng, d, toks + 30, 1, l2, false, &err) == CAPY_EINVAL);
	CHECK_CONTAINS(err.msg, "restore a snapshot");
	CHECK_EQ_INT(capy_seq_restore(d, sn, &err), 0);
	CHECK_EQ_INT(capy_engine_forward(eng, d, toks + 30, 20, l2, true, &err), 0);
	CHECK_MSG(!memcmp(l1, l2, V * 20 * 4), "resuming from the shared prefix differs");
	/* d and s now hold different pages past 30; s still gives what a fresh run of the same
	 * steps gives. */
	CHECK_EQ_INT(capy_engine_forward(eng, ref, toks, 30, l2, false, &err), 0);
	CHECK_EQ_INT(capy_engine_forward(eng, ref, toks + 30, 20, l2, false, &err), 0);
	capy_engine_forward(eng, s, B, 6, l1, true, &err);
	capy_engine_forward(eng, ref, B, 6, l2, true, &err);
	CHECK_MSG(!memcmp(l1, l2, V * 6 * 4), "the original changed after its pages were shared");
	/* A snapshot fits only its length. */
	CHECK(capy_seq_restore(s, sn, &err) == CAPY_EINVAL);
	CHECK(capy_seq_share(s, capy_seq_len(s) + 1, &d, &err) == CAPY_EINVAL || (capy_seq_free(d), 0));
	capy_snapshot_free(sn);
	capy_seq_free(s);
	capy_seq_free(d);
	capy_seq_free(ref);
	CHECK_EQ_U64(capy_engine_pages_used(eng), 0);
	free(l1);
	free(l2);
}

static void test_step_errors(void)
{
	struct capy_err err = { 0 };
	struct capy_seq *s;
	float *l = malloc(V * 4);
	int32_t many[600] = { 0 };

	capy_seq_new(eng, &s, &err);
	struct capy_step_item two[2] = { { .seq = s, .tokens = A, .n = 3, .logits = l },
					 { .seq = s, .tokens = B, .n = 2 } };
	CHECK(capy_engine_step(eng, two, 2, &err) == CAPY_EINVAL);
	CHECK_CONTAINS(err.msg, "the same sequence");
	struct capy_step_item big = { .seq = s, .tokens = many, .n = 600, .logits = l, .all_logits = false };
	CHECK(capy_engine_step(eng, &big, 1, &err) == CAPY_EINVAL);
	CHECK_CONTAINS(err.msg, "more than the engine's 512");
	CHECK(capy_engine_step(eng, &big, 0, &err) == CAPY_EINVAL);
	CHECK_EQ_U64(capy_seq_len(s), 0);
	capy_seq_free(s);
	free(l);
}

/* The step-item mask of test_step_samples: counts its calls; none: no mask (NULL). */
struct mask_src {
	uint32_t *bits;
	int calls;
	bool none;
};

static const uint32_t *step_mask(void *ud)
{
	struct mask_src *m = ud;

	m->calls++;
	return m->none ? NULL : m->bits;
}

/* A step with a sampler picks what capy_sampler_next picks from the same step's logits, and
 * leaves the caller's logits as the model gave them; with and without logits wanted. With a
 * token mask (asked for once, after the forward pass) it picks what capy_sampler_next_masked
 * picks: sparse masks, one allowed id (the last); a NULL mask and a mask allowing nothing
 * give -1 without a draw (the draws after are unchanged). A mask without a sampler is
 * refused. */
static void test_step_samples(void)
{
	const struct capy_sampler_params ps[] = { { 0 }, { .temperature = 0.9f, .top_k = 40, .seed = 3 },
						  { .temperature = 1.1f, .seed = 5 },
						  { .temperature = 1.1f, .repetition_penalty = 1.3f, .seed = 4 } };
	const size_t W = (V + 31) / 32;
	struct capy_err err = { 0 };
	float *l = malloc(V * 4), *raw = malloc(V * 4);
	uint32_t *bits = calloc(W, 4), *empty = calloc(W, 4);
	uint64_t r = 7;

	for (size_t c = 0; c < ARRAY_SIZE(ps); c++) {
		struct capy_sampler *a, *b, *am, *bm;
		struct capy_seq *s1, *s2, *s3;
		capy_sampler_new(&a, V, &ps[c], &err);
		capy_sampler_new(&b, V, &ps[c], &err);
		capy_sampler_new(&am, V, &ps[c], &err);
		capy_sampler_new(&bm, V, &ps[c], &err);
		capy_seq_new(eng, &s1, &err);
		capy_seq_new(eng, &s2, &err);
		capy_seq_new(eng, &s3, &err);
		for (int i = 0; i < 6; i++) {
			int32_t want, got = -1, want_m, got_m = -2, tok = A[i];
			struct mask_src m = { bits, 0, i == 1 };
			for (size_t w = 0; w < W; w++) /* a few ids allowed; at i == 4 only the last */
				r = r * 6364136223846793005ull + 1442695040888963407ull, bits[w] = (uint32_t)(r >> 33) & 0x01010101u;
			if (i == 4) {
				memset(bits, 0, W * 4);
				bits[(V - 1) / 32] = 1u << ((V - 1) % 32);
			}
			if (i == 2)
				m.bits = empty;
			struct capy_step_item plain = { .seq = s1, .tokens = &tok, .n = 1, .logits = l };
			struct capy_step_item picked = { .seq = s2, .tokens = &tok, .n = 1, .sampler = b, .token = &got };
			struct capy_step_item masked = { .seq = s3, .tokens = &tok, .n = 1, .sampler = bm, .token = &got_m,
							 .mask = step_mask, .mask_ud = &m };
			CHECK_EQ_INT(capy_engine_step(eng, &plain, 1, &err), 0);
			memcpy(raw, l, V * 4);
			want_m = i == 1 ? -1 : capy_sampler_next_masked(am, raw, m.bits);
			memcpy(raw, l, V * 4);
			want = capy_sampler_next(a, l);
			if (i % 2)
				picked.logits = l;
			CHECK_EQ_INT(capy_engine_step(eng, &picked, 1, &err), 0);
			CHECK_EQ_INT(got, want);
			if (i % 2)
				CHECK(!memcmp(l, raw, V * 4));
			CHECK_EQ_INT(capy_engine_step(eng, &masked, 1, &err), 0);
			CHECK_EQ_INT(m.calls, 1);
			CHECK_EQ_INT(got_m, want_m);
			if (i == 4)
				CHECK_EQ_INT(got_m, V - 1);
		}
		struct capy_step_item bad = { .seq = s2, .tokens = A, .n = 1, .sampler = b };
		CHECK(capy_engine_step(eng, &bad, 1, &err) == CAPY_EINVAL);
		CHECK_CONTAINS(err.msg, "nowhere for its token");
		struct capy_step_item bad_mask = { .seq = s2, .tokens = A, .n = 1, .mask = step_mask };
		CHECK(capy_engine_step(eng, &bad_mask, 1, &err) == CAPY_EINVAL);
		CHECK_CONTAINS(err.msg, "a token mask but no sampler");
		capy_seq_free(s1);
		capy_seq_free(s2);
		capy_seq_free(s3);
		capy_sampler_free(a);
		capy_sampler_free(b);
		capy_sampler_free(am);
		capy_sampler_free(bm);
	}
	free(l);
	free(raw);
	free(bits);
	free(empty);
}

/* One family: NSEQ sequences with prompts of different lengths (one longer than a page,
 * one of a single token) run alone — prompt in one forward, then DECODE tokens one at a
 * time — and together: all prompts in one step, the decode tokens of everyone in one step
 * each, and a late sequence whose prompt joins while the others decode. Every logit must
 * be bitwise the same, for 1 and 3 threads. */
#define NSEQ 4
#define DECODE 5
static void batch_family(const char *name, int threads)
{
	static const uint64_t plen[NSEQ] = { 37, 1, 70, 9 };
	struct capy_err err = { 0 };
	struct capy_artifact *a = test_open_fixture(name);
	struct capy_engine *e = NULL;
	struct capy_seq *alone[NSEQ], *tog[NSEQ];
	int32_t prompt[NSEQ][80], next[NSEQ][DECODE];
	float *ref, *got;
	uint64_t vs;

	if (!a)
		return;
	CHECK_EQ_INT(capy_engine_new(&e, a, &(struct capy_engine_opts){ .threads = threads }, &err), 0);
	if (!e) {
		capy_artifact_close(a);
		return;
	}
	vs = capy_engine_config(e)->vocab_size;
	ref = calloc(NSEQ * (DECODE + 1) * vs, sizeof(float));
	got = calloc(NSEQ * (DECODE + 1) * vs, sizeof(float));
	for (int q = 0; q < NSEQ; q++) {
		for (uint64_t i = 0; i < plen[q]; i++)
			prompt[q][i] = (int32_t)((q * 131 + i * 17 + 3) % 520);
		for (int i = 0; i < DECODE; i++)
			next[q][i] = (int32_t)((q * 7 + i * 29 + 100) % 520);
		capy_seq_new(e, &alone[q], &err);
		capy_seq_new(e, &tog[q], &err);
		CHECK_EQ_INT(capy_engine_forward(e, alone[q], prompt[q], plen[q], ref + (q * (DECODE + 1)) * vs, false, &err), 0);
		for (int i = 0; i < DECODE; i++)
			CHECK_EQ_INT(capy_engine_forward(e, alone[q], &next[q][i], 1, ref + (q * (DECODE + 1) + i + 1) * vs,
							 false, &err), 0);
	}
	/* Sequences 0-2 prefill together; 3 joins after two decode steps of the others. */
	struct capy_step_item it[NSEQ];
	for (int q = 0; q < 3; q++)
		it[q] = (struct capy_step_item){ .seq = tog[q], .tokens = prompt[q], .n = plen[q],
				.logits = got + (q * (DECODE + 1)) * vs, .all_logits = false };
	CHECK_MSG(capy_engine_step(e, it, 3, &err) == 0, "%s", err.msg);
	for (int i = 0; i < DECODE + 1; i++) {
		size_t n = 0;
		for (int q = 0; q < 3; q++)
			if (i < DECODE)
				it[n++] = (struct capy_step_item){ .seq = tog[q], .tokens = &next[q][i], .n = 1,
						.logits = got + (q * (DECODE + 1) + i + 1) * vs,
						.all_logits = false };
		if (i == 2)
			it[n++] = (struct capy_step_item){ .seq = tog[3], .tokens = prompt[3], .n = plen[3],
					.logits = got + (3 * (DECODE + 1)) * vs, .all_logits = false };
		if (i >= 3)
			it[n++] = (struct capy_step_item){ .seq = tog[3], .tokens = &next[3][i - 3], .n = 1,
					.logits = got + (3 * (DECODE + 1) + i - 2) * vs, .all_logits = false };
		if (n)
			CHECK_MSG(capy_engine_step(e, it, n, &err) == 0, "%s", err.msg);
	}
	/* The late one still has its last decode tokens to run. */
	for (int i = DECODE - 2; i < DECODE; i++)
		capy_engine_forward(e, tog[3], &next[3][i], 1, got + (3 * (DECODE + 1) + i + 1) * vs, false, &err);
	for (int q = 0; q < NSEQ; q++)
		for (int i = 0; i <= DECODE; i++)
			CHECK_MSG(!memcmp(ref + (q * (DECODE + 1) + i) * vs, got + (q * (DECODE + 1) + i) * vs, vs * 4),
				  "%s, %d threads: sequence %d, logits %d differ in a batch", name, threads, q, i);
	for (int q = 0; q < NSEQ; q++) {
		capy_seq_free(alone[q]);
		capy_seq_free(tog[q]);
	}
	CHECK_EQ_U64(capy_engine_pages_used(e), 0);
	free(ref);
	free(got);
	capy_engine_free(e);
	capy_artifact_close(a);
}

static void test_batch_invariance(void)
{
	static const char *const fam[] = { "qwen3_5-dense", "qwen3_5_moe", "qwen3_5_moe-nvfp4", "qwen3_next", "qwen4_exp" };

	for (size_t i = 0; i < ARRAY_SIZE(fam); i++) {
		batch_family(fam[i], 1);
		batch_family(fam[i], 3);
	}
}

/* capy_engine_reserve takes the attention cache's storage up front: pages for the tokens plus
 * one partly used page per sequence, none of them held by anyone; a request of more page ids
 * than there can be is refused with the count. capy_engine_describe names the backend. */
static void test_reserve_describe(void)
{
	struct capy_err err = { 0 };
	struct capy_seq *s;
	float *l = malloc(V * 4);
	char d[256];

	CHECK_MSG(capy_engine_reserve(eng, 10 * capy_engine_page_tokens(eng), 3, &err) == 0, "%s", err.msg);
	CHECK_EQ_U64(capy_engine_pages_used(eng), 0);
	CHECK_EQ_INT(capy_engine_reserve(eng, UINT64_MAX / 2, 1, &err), CAPY_EINVAL);
	CHECK_CONTAINS(err.msg, "pages are too many");
	/* The reserved storage serves sequences as before. */
	CHECK_EQ_INT(capy_seq_new(eng, &s, &err), 0);
	CHECK_EQ_INT(capy_engine_forward(eng, s, A, 20, l, false, &err), 0);
	CHECK(capy_engine_pages_used(eng) >= 1);
	capy_seq_free(s);
	CHECK_EQ_U64(capy_engine_pages_used(eng), 0);
	capy_engine_describe(eng, d, sizeof(d));
	CHECK_MSG(!strncmp(d, "cpu, 2 threads", 14), "describe: '%s'", d);
	free(l);
}

/* The page pool takes the lowest free id, and the storage above the highest id in use goes
 * back to the backend when the sequences holding the top end (64 pages and a quarter of the
 * rest at least), never below what capy_engine_reserve took. */
static struct capy_seq *import_pages(struct capy_engine *e, uint64_t pages)
{
	struct capy_err err = { 0 };
	const uint64_t P = capy_engine_page_tokens(e), n = pages * P;
	int32_t *ids = calloc(n, sizeof(*ids));
	void *pg = calloc(pages, capy_engine_page_bytes(e)), *st = calloc(1, capy_engine_state_io_bytes(e));
	struct capy_seq *s = NULL;

	for (uint64_t i = 0; i < n; i++)
		ids[i] = (int32_t)(i % 200) + 3;
	CHECK_MSG(capy_seq_import(e, ids, n, pg, st, &s, &err) == 0, "%s", err.msg);
	free(ids);
	free(pg);
	free(st);
	return s;
}

static void test_page_reuse(void)
{
	struct capy_err err = { 0 };
	struct capy_engine *e;
	struct capy_seq *a, *b, *c;
	const uint32_t *ids;
	uint64_t n;

	CHECK_EQ_INT(capy_engine_new(&e, art, &(struct capy_engine_opts){ .threads = 1 }, &err), 0);
	if (!e)
		return;
	a = import_pages(e, 100);
	b = import_pages(e, 2);
	ids = capy_seq_page_ids(b, &n);
	CHECK_EQ_U64(n, 2);
	CHECK_EQ_U64(ids[0], 100);
	CHECK_EQ_U64(capy_engine_pages_held(e), 102);
	capy_seq_free(a); /* the top is still held: nothing goes back */
	CHECK_EQ_U64(capy_engine_pages_held(e), 102);
	c = import_pages(e, 3);
	ids = capy_seq_page_ids(c, &n);
	CHECK_EQ_U64(ids[0], 0);
	CHECK_EQ_U64(ids[1], 1);
	CHECK_EQ_U64(ids[2], 2);
	capy_seq_free(b); /* ids 3..101 free at the top: their storage goes back */
	CHECK_EQ_U64(capy_engine_pages_held(e), 3);
	CHECK_EQ_U64(capy_engine_pages_used(e), 3);
	a = import_pages(e, 40); /* below the surplus that goes back: kept */
	ids = capy_seq_page_ids(a, &n);
	CHECK_EQ_U64(ids[0], 3);
	capy_seq_free(a);
	CHECK_EQ_U64(capy_engine_pages_held(e), 43);
	capy_seq_free(c);
	CHECK_EQ_U64(capy_engine_pages_used(e), 0);
	/* what capy_engine_reserve took stays */
	CHECK_EQ_INT(capy_engine_reserve(e, 100 * capy_engine_page_tokens(e), 1, &err), 0);
	CHECK(capy_engine_pages_held(e) >= 100);
	const uint64_t held = capy_engine_pages_held(e);
	a = import_pages(e, 300);
	CHECK_EQ_U64(capy_engine_pages_held(e), 300);
	capy_seq_free(a);
	CHECK_EQ_U64(capy_engine_pages_held(e), held);
	capy_engine_free(e);
}

int main(void)
{
	RUN(setup);
	if (eng) {
		RUN(test_fork);
		RUN(test_truncate);
		RUN(test_bad_ids);
		RUN(test_share_snapshot);
		RUN(test_step_errors);
		RUN(test_step_samples);
		RUN(test_reserve_describe);
		RUN(test_page_reuse);
	}
	RUN(test_batch_invariance);
	capy_engine_free(eng);
	capy_artifact_close(art);
	return test_summary();
}
