/* u-mtp.c - the MTP head (engine.h capy_engine_mtp) and MTP drafts (spec.h):
 *
 * - teacher-forced rows along each fixture's reference sequence against ref.json's "mtp"
 *   section (make_fixtures.py's mtp_logits: transformers' own decoder layer and norms on the
 *   stored mtp.* tensors): every row's argmax equal, the last row's top-10 logits within
 *   MTP_TOL; for qwen3_5-dense, qwen3_5_moe, qwen3_next, qwen4_exp (capy's layout of its head,
 *   docs/spec.md: hc streams, a QSA layer, its own final mixer) and capy-tiny;
 * - the same rows run in pieces and one at a time give the same bits as one call, and logits
 *   over a draft vocabulary are bitwise those of the whole vocabulary at its ids;
 * - the chained drafts of t/fixtures/mtp_reference.py (mtp_ref.json: draft ids equal, draft
 *   logits within MTP_TOL), skipped with a loud message while that file is missing;
 * - rollback: a sequence decoded through MTP windows (rejected drafts included) drafts the
 *   bits of a sequence that ran only the accepted tokens, one per step, and its greedy tokens
 *   are those of one-token decoding; alone and with another sequence's windows in between;
 * - the head run over a prompt's pieces as they are read (capy_mtp_catch_up) drafts the bits
 *   of the head run over the whole prompt at once, and a drafter resumed on a fork of its
 *   sequence (capy_mtp_resume, as from the prefix cache) drafts the bits of the original. */
#include "test.h"
#include "test-fixture.h"
#include "engine/engine.h"
#include "sample/sample.h"
#include "spec/spec.h"

/* capy computes in fp32 from the same BF16 tensors as the fp32 reference, in its own order
 * of summation (and its own exp/rsqrt). Measured: the last row's top-10 logits (magnitude 5 -
 * 20) within 5.7e-6 .. 8.6e-6 on the four models; 1e-4 leaves ten times that for another ISA
 * path, and a wrong layout (the concat swapped, a norm left out, the pre-norm hidden state)
 * moves them by whole units. */
#define MTP_TOL 1e-4

static int64_t *json_ids(const cJSON *arr, uint64_t *n)
{
	uint64_t k = (uint64_t)cJSON_GetArraySize(arr), i = 0;
	int64_t *v = malloc((k + 1) * sizeof(*v));
	const cJSON *x;

	cJSON_ArrayForEach(x, arr)
		v[i++] = (int64_t)x->valuedouble;
	*n = k;
	return v;
}

struct model {
	struct capy_artifact *a;
	struct capy_engine *e;
	uint64_t V, H;
};

static bool open_model(struct model *m, const char *name, enum capy_kv_dtype kv)
{
	struct capy_err err = { 0 };

	m->a = test_open_fixture(name);
	if (!m->a)
		return false;
	CHECK_MSG(capy_engine_new(&m->e, m->a, &(struct capy_engine_opts){ .threads = 2, .kv = kv, .mtp = true }, &err) == 0,
		  "%s: %s", name, err.msg);
	m->V = capy_engine_config(m->e)->vocab_size;
	m->H = capy_engine_config(m->e)->hidden_size;
	return true;
}

static void close_model(struct model *m)
{
	capy_engine_free(m->e);
	capy_artifact_close(m->a);
}

/* A new sequence that ran ids[0..n) with their hidden states into *hid ([n][H]). */
static struct capy_seq *run_prefix(struct model *m, const int32_t *ids, uint64_t n, float **hid)
{
	struct capy_err err = { 0 };
	struct capy_seq *s;

	*hid = malloc(n * m->H * sizeof(float));
	CHECK_EQ_INT(capy_seq_new(m->e, &s, &err), 0);
	CHECK_MSG(capy_engine_forward_hidden(m->e, s, ids, n, NULL, false, *hid, &err) == 0, "%s", err.msg);
	return s;
}

static void check_teacher_forced(const char *name)
{
	char path[512];
	struct model m;
	struct capy_err err = { 0 };
	uint64_t T, nt, ntop;

	snprintf(path, sizeof(path), "%s/ref.json", name);
	cJSON *ref = test_fixture_json(path);
	CHECK_MSG(ref != NULL, "%s", path);
	if (!ref || !open_model(&m, name, CAPY_KV_F32))
		return;
	const cJSON *mtp = cJSON_GetObjectItem(ref, "mtp");
	int64_t *ids64 = json_ids(cJSON_GetObjectItem(ref, "ids"), &T);
	int64_t *want = json_ids(cJSON_GetObjectItem(mtp, "argmax"), &nt);
	const cJSON *top = cJSON_GetObjectItem(mtp, "top_logits_last");
	int64_t *top_ids = json_ids(cJSON_GetObjectItem(top, "ids"), &ntop);
	int32_t *ids = malloc(T * sizeof(*ids));
	for (uint64_t i = 0; i < T; i++)
		ids[i] = (int32_t)ids64[i];
	CHECK_EQ_U64(nt, T - 1);

	float *hid, *rows = malloc((T - 1) * m.V * sizeof(float)), *piece = malloc((T - 1) * m.V * sizeof(float));
	struct capy_seq *s = run_prefix(&m, ids, T, &hid);
	/* Row t at position t: h_t and the token at t + 1, predicting ids[t + 2]. */
	CHECK_MSG(capy_engine_mtp(m.e, &(struct capy_mtp_rows){ .seq = s, .pos = 0, .n = T - 1, .hidden = hid,
							      .tokens = ids + 1, .logits = rows, .all_logits = true },
				  &err) == 0, "%s", err.msg);
	uint64_t bad = 0;
	for (uint64_t t = 0; t + 1 < T; t++)
		bad += test_argmax(rows + t * m.V, m.V) != (int32_t)want[t];
	CHECK_MSG(bad == 0, "%s: %" PRIu64 " of %" PRIu64 " teacher-forced MTP argmaxes differ", name, bad, T - 1);
	double worst = 0;
	const cJSON *v;
	uint64_t i = 0;
	cJSON_ArrayForEach(v, cJSON_GetObjectItem(top, "values")) {
		double d = fabs((double)rows[(T - 2) * m.V + top_ids[i++]] - v->valuedouble);
		worst = d > worst ? d : worst;
	}
	CHECK_MSG(worst <= MTP_TOL, "%s: last MTP logits differ by %g from the reference", name, worst);
	printf("%s: teacher-forced MTP over %" PRIu64 " rows: argmax equal, top-10 logits within %.2g\n", name, T - 1,
	       worst);

	/* The same rows in three pieces, then one by one: the same bits. */
	uint64_t cut[] = { 0, (T - 1) / 3, T - 2, T - 1 };
	for (int p = 0; p < 3; p++)
		CHECK_EQ_INT(capy_engine_mtp(m.e, &(struct capy_mtp_rows){ .seq = s, .pos = cut[p], .n = cut[p + 1] - cut[p],
					   .hidden = hid + cut[p] * m.H, .tokens = ids + 1 + cut[p], .logits = piece + cut[p] * m.V,
					   .all_logits = true }, &err), 0);
	CHECK(!memcmp(piece, rows, (T - 1) * m.V * sizeof(float)));
	/* Over a draft vocabulary (every third id, then the reference's top ids): its ids' bits. */
	int32_t *sub = malloc(m.V * sizeof(*sub));
	uint64_t ns = 0;
	for (uint64_t k = 0; k < ntop; k++)
		sub[ns++] = (int32_t)top_ids[k];
	for (uint64_t k = 0; k < m.V; k += 3) {
		bool dup = false;
		for (uint64_t j = 0; j < ntop; j++)
			dup |= top_ids[j] == (int64_t)k;
		if (!dup)
			sub[ns++] = (int32_t)k;
	}
	float *sl = malloc(ns * sizeof(float));
	CHECK_EQ_INT(capy_engine_mtp(m.e, &(struct capy_mtp_rows){ .seq = s, .pos = T - 2, .n = 1, .hidden = hid + (T - 2) * m.H,
				   .tokens = ids + T - 1, .ids = sub, .n_ids = ns, .logits = sl }, &err), 0);
	bool same = true;
	for (uint64_t k = 0; k < ns; k++)
		same &= !memcmp(&sl[k], &rows[(T - 2) * m.V + sub[k]], sizeof(float));
	CHECK_MSG(same, "%s: logits over a draft vocabulary differ from the whole vocabulary's", name);
	/* Bad input is refused. */
	int32_t bad_id = (int32_t)m.V;
	CHECK(capy_engine_mtp(m.e, &(struct capy_mtp_rows){ .seq = s, .pos = 0, .n = 1, .hidden = hid, .tokens = &bad_id },
			      &err) < 0);
	CHECK(capy_engine_mtp(m.e, &(struct capy_mtp_rows){ .seq = s, .pos = T + 100000, .n = 1, .hidden = hid,
							      .tokens = ids }, &err) < 0);
	capy_seq_free(s);
	free(sl);
	free(sub);
	free(hid);
	free(rows);
	free(piece);
	free(ids);
	free(ids64);
	free(want);
	free(top_ids);
	cJSON_Delete(ref);
	close_model(&m);
}

static void test_teacher_forced(void)
{
	const char *models[] = { "qwen3_5-dense", "qwen3_5_moe", "qwen3_next", "qwen4_exp", "share/models/capy-tiny" };

	for (size_t i = 0; i < ARRAY_SIZE(models); i++)
		check_teacher_forced(models[i]);
}

/* mtp_ref.json (t/fixtures/mtp_reference.py): each case's prompt, greedy next token and K
 * chained drafts with their logits. */
static void check_chained(const char *name)
{
	char path[512], full[4096];
	struct model m;
	struct capy_err err = { 0 };
	const cJSON *c;

	snprintf(path, sizeof(path), "%s/mtp_ref.json", name);
	test_fixture_path(path, full, sizeof(full));
	if (access(full, R_OK)) {
		fprintf(stderr, "\n*** SKIPPED: %s is missing: the chained MTP drafts are NOT checked against the reference.\n"
			"*** Run `python3 t/fixtures/mtp_reference.py OUT` on the device machine and commit OUT/*/mtp_ref.json.\n\n",
			full);
		return;
	}
	cJSON *ref = test_fixture_json(path);
	CHECK(ref != NULL);
	if (!ref || !open_model(&m, name, CAPY_KV_F32))
		return;
	cJSON_ArrayForEach(c, cJSON_GetObjectItem(ref, "cases")) {
		uint64_t n, k, ok = 0;
		int64_t *p64 = json_ids(cJSON_GetObjectItem(c, "prompt"), &n);
		int64_t *want = json_ids(cJSON_GetObjectItem(c, "drafts"), &k);
		int32_t *prompt = malloc(n * sizeof(*prompt)), *got = malloc(k * sizeof(*got));
		float *hid;
		for (uint64_t i = 0; i < n; i++)
			prompt[i] = (int32_t)p64[i];
		struct capy_seq *s = run_prefix(&m, prompt, n, &hid);
		struct capy_mtp *d;
		CHECK_EQ_INT(capy_mtp_new(&d, m.e, s, NULL, 0, &err), 0);
		memcpy(capy_mtp_hidden_at(d, 0, n, &err), hid, n * m.H * sizeof(float));
		int32_t next = (int32_t)cJSON_GetObjectItem(c, "next")->valuedouble;
		/* Draft j's logits: the chain cut at j + 1 drafts (each call starts from scratch on a
		 * new sequence, so the rows are those of one chain). */
		double worst = 0;
		const cJSON *row;
		uint64_t j = 0;
		cJSON_ArrayForEach(row, cJSON_GetObjectItem(c, "logits")) {
			float *hid2;
			struct capy_seq *s2 = run_prefix(&m, prompt, n, &hid2);
			struct capy_mtp *d2;
			CHECK_EQ_INT(capy_mtp_new(&d2, m.e, s2, NULL, 0, &err), 0);
			memcpy(capy_mtp_hidden_at(d2, 0, n, &err), hid2, n * m.H * sizeof(float));
			free(hid2);
			CHECK_EQ_INT(capy_mtp_draft(d2, next, j + 1, got, NULL, &err), 0);
			const cJSON *v;
			uint64_t i = 0;
			cJSON_ArrayForEach(v, row) {
				double dd = fabs((double)capy_mtp_logits(d2)[i++] - v->valuedouble);
				worst = dd > worst ? dd : worst;
			}
			capy_mtp_free(d2);
			capy_seq_free(s2);
			j++;
		}
		CHECK_EQ_INT(capy_mtp_draft(d, next, k, got, NULL, &err), 0);
		for (uint64_t i = 0; i < k; i++)
			ok += got[i] == (int32_t)want[i];
		CHECK_MSG(ok == k, "%s: prompt of %" PRIu64 ": %" PRIu64 " of %" PRIu64 " chained drafts equal", name, n, ok, k);
		CHECK_MSG(worst <= MTP_TOL, "%s: prompt of %" PRIu64 ": chained draft logits differ by %g", name, n, worst);
		printf("%s: prompt of %" PRIu64 ": %" PRIu64 " of %" PRIu64 " chained drafts equal, logits within %.2g\n", name, n, ok, k,
		       worst);
		capy_mtp_free(d);
		capy_seq_free(s);
		free(hid);
		free(got);
		free(prompt);
		free(p64);
		free(want);
	}
	cJSON_Delete(ref);
	close_model(&m);
}

static void test_chained_reference(void)
{
	check_chained("qwen3_5_moe");
	check_chained("qwen4_exp");
	check_chained("share/models/capy-tiny");
}

/* Greedy decoding through MTP windows on sequence a (and, when `other`, another sequence b
 * decoding through its own windows between a's), against one-token steps on c; then a fresh
 * drafter on a sequence d that ran only the accepted tokens (prompt, then one token per step)
 * drafts the same ids and logits bits as a's drafter. */
static void check_rollback(const char *name, uint64_t K, bool other)
{
	struct model m;
	struct capy_err err = { 0 };
	int32_t prompt[40], out[8], drafts[8], feed[2], want;
	const uint64_t N = 40, steps = 24;
	struct capy_spec_stats st = { 0 };

	if (!open_model(&m, name, CAPY_KV_BF16))
		return;
	for (uint64_t i = 0; i < N; i++)
		prompt[i] = (int32_t)((i * 37 + 11) % (m.V - 20)); /* a repeating pattern the model half-follows */
	struct capy_sampler *smp[2];
	struct capy_seq *sq[2], *c, *d;
	struct capy_mtp *dr[2], *dd;
	float *rows = malloc((K + 1) * m.V * sizeof(float)), *l = malloc(m.V * sizeof(float));
	int32_t next[2], *gen = malloc((steps + K + 2) * sizeof(*gen));
	uint64_t ng = 0;
	for (int q = 0; q < 2; q++) {
		CHECK_EQ_INT(capy_sampler_new(&smp[q], m.V, &(struct capy_sampler_params){ 0 }, &err), 0);
		CHECK_EQ_INT(capy_seq_new(m.e, &sq[q], &err), 0);
		CHECK_EQ_INT(capy_mtp_new(&dr[q], m.e, sq[q], NULL, 0, &err), 0);
		CHECK_EQ_INT(capy_engine_forward_hidden(m.e, sq[q], prompt + q, N - (uint64_t)q, l, false,
							capy_mtp_hidden_at(dr[q], 0, N - (uint64_t)q, &err), &err), 0);
		next[q] = capy_sampler_next(smp[q], l);
	}
	gen[ng++] = next[0];
	while (ng < steps) {
		for (int q = other ? 1 : 0; q >= 0; q--) {
			uint64_t len = capy_seq_len(sq[q]), n;
			CHECK_MSG(capy_mtp_draft(dr[q], next[q], K, drafts, NULL, &err) == 0, "%s", err.msg);
			CHECK_MSG(capy_spec_window_hidden(m.e, sq[q], smp[q], next[q], drafts, K, NULL, rows,
							  capy_mtp_hidden_at(dr[q], len, K + 1, &err), out, &n,
							  q ? NULL : &st, &err) == 0, "%s", err.msg);
			next[q] = out[n - 1];
			for (uint64_t i = 0; !q && i < n; i++)
				gen[ng++] = out[i];
		}
	}
	/* One token per step on c: the same greedy tokens. */
	CHECK_EQ_INT(capy_seq_new(m.e, &c, &err), 0);
	CHECK_EQ_INT(capy_engine_forward(m.e, c, prompt, N, l, false, &err), 0);
	bool same = true;
	for (uint64_t i = 0; i < ng; i++) {
		want = test_argmax(l, m.V);
		same &= want == gen[i];
		feed[0] = gen[i];
		if (i + 1 < ng)
			CHECK_EQ_INT(capy_engine_step(m.e, &(struct capy_step_item){ .seq = c, .tokens = feed, .n = 1, .logits = l },
						      1, &err), 0);
	}
	CHECK_MSG(same, "%s K=%" PRIu64 "%s: greedy tokens through MTP windows differ from one-token steps", name, K,
		  other ? " (two sequences)" : "");
	/* d: the prompt, then the accepted tokens one per step with their hidden states. */
	CHECK_EQ_INT(capy_seq_new(m.e, &d, &err), 0);
	CHECK_EQ_INT(capy_mtp_new(&dd, m.e, d, NULL, 0, &err), 0);
	CHECK_EQ_INT(capy_engine_forward_hidden(m.e, d, prompt, N, l, false, capy_mtp_hidden_at(dd, 0, N, &err), &err), 0);
	const int32_t *hist = capy_seq_tokens(sq[0]);
	uint64_t La = capy_seq_len(sq[0]);
	for (uint64_t p = N; p < La; p++) {
		feed[0] = hist[p];
		CHECK_EQ_INT(capy_engine_step(m.e, &(struct capy_step_item){ .seq = d, .tokens = feed, .n = 1, .logits = l,
					      .hidden = capy_mtp_hidden_at(dd, p, 1, &err) }, 1, &err), 0);
	}
	int32_t da[8], db[8];
	CHECK_EQ_INT(capy_mtp_draft(dr[0], next[0], K, da, NULL, &err), 0);
	CHECK_EQ_INT(capy_mtp_draft(dd, next[0], K, db, NULL, &err), 0);
	CHECK_MSG(!memcmp(da, db, K * sizeof(*da)) && !memcmp(capy_mtp_logits(dr[0]), capy_mtp_logits(dd), m.V * sizeof(float)),
		  "%s K=%" PRIu64 ": drafts after windows differ from a sequence that never saw the rejected ones", name, K);
	printf("%s K=%" PRIu64 "%s: %" PRIu64 " windows, %" PRIu64 " of %" PRIu64 " drafts accepted, rollback exact\n", name,
	       K, other ? " beside another sequence" : "", st.windows, st.accepted, st.drafted);
	for (int q = 0; q < 2; q++) {
		capy_mtp_free(dr[q]);
		capy_seq_free(sq[q]);
		capy_sampler_free(smp[q]);
	}
	capy_mtp_free(dd);
	capy_seq_free(c);
	capy_seq_free(d);
	free(rows);
	free(l);
	free(gen);
	close_model(&m);
}

static void test_rollback(void)
{
	for (uint64_t K = 1; K <= 4; K++) {
		check_rollback("qwen3_5_moe", K, K == 3);
		check_rollback("share/models/capy-tiny", K, K == 2);
	}
	check_rollback("qwen3_next", 3, true);
	check_rollback("qwen3_5-dense", 2, false);
	/* the head's QSA keys and block summaries are in the pages too: windows of 4 rows cross
	 * its 4-token blocks, every rejected draft leaving a block completed by scratch rows */
	check_rollback("qwen4_exp", 1, false);
	check_rollback("qwen4_exp", 4, true);
}

/* The head's rows live in the sequence's pages, shared by a fork until written: a fork that
 * drafts from another next token (rewriting the head's row at the last position in its copy of
 * the page) leaves the original's rows alone. a is forked to b; a drafts, b drafts from another
 * token, a runs its window and drafts again: the bits of c, which was never forked. */
static void test_fork_copy_on_write(void)
{
	struct model m;
	struct capy_err err = { 0 };
	int32_t prompt[30], da[3], db[3], dc[3], out[4];
	uint64_t N = 30, n;
	struct capy_seq *a, *b, *c;
	struct capy_mtp *ma, *mb, *mc;
	struct capy_sampler *sa, *sc;
	float *hid, *rows;

	if (!open_model(&m, "share/models/capy-tiny", CAPY_KV_F32))
		return;
	for (uint64_t i = 0; i < N; i++)
		prompt[i] = (int32_t)(100 + i * 7);
	rows = malloc(4 * m.V * sizeof(float));
	a = run_prefix(&m, prompt, N, &hid);
	CHECK_EQ_INT(capy_seq_fork(a, &b, &err), 0);
	free(hid);
	c = run_prefix(&m, prompt, N, &hid); /* the same prompt, never shared (the same hidden bits) */
	CHECK_EQ_INT(capy_mtp_new(&ma, m.e, a, NULL, 0, &err), 0);
	CHECK_EQ_INT(capy_mtp_new(&mb, m.e, b, NULL, 0, &err), 0);
	CHECK_EQ_INT(capy_mtp_new(&mc, m.e, c, NULL, 0, &err), 0);
	memcpy(capy_mtp_hidden_at(ma, 0, N, &err), hid, N * m.H * sizeof(float));
	memcpy(capy_mtp_hidden_at(mb, 0, N, &err), hid, N * m.H * sizeof(float));
	memcpy(capy_mtp_hidden_at(mc, 0, N, &err), hid, N * m.H * sizeof(float));
	CHECK_EQ_INT(capy_sampler_new(&sa, m.V, &(struct capy_sampler_params){ 0 }, &err), 0);
	CHECK_EQ_INT(capy_sampler_new(&sc, m.V, &(struct capy_sampler_params){ 0 }, &err), 0);
	/* One draft each (no chained row past the end, which would copy the page first). */
	CHECK_EQ_INT(capy_mtp_draft(ma, 5, 1, da, NULL, &err), 0);
	CHECK_EQ_INT(capy_mtp_draft(mb, 9, 1, db, NULL, &err), 0);
	CHECK_EQ_INT(capy_mtp_draft(mc, 5, 1, dc, NULL, &err), 0);
	CHECK_EQ_INT(da[0], dc[0]);
	CHECK_EQ_INT(capy_spec_window_hidden(m.e, a, sa, 5, da, 1, NULL, rows, capy_mtp_hidden_at(ma, N, 2, &err), out, &n,
					     NULL, &err), 0);
	int32_t next = out[n - 1];
	CHECK_EQ_INT(capy_spec_window_hidden(m.e, c, sc, 5, dc, 1, NULL, rows, capy_mtp_hidden_at(mc, N, 2, &err), out, &n,
					     NULL, &err), 0);
	CHECK_EQ_INT(out[n - 1], next);
	CHECK_EQ_INT(capy_mtp_draft(ma, next, 3, da, NULL, &err), 0);
	CHECK_EQ_INT(capy_mtp_draft(mc, next, 3, dc, NULL, &err), 0);
	CHECK_MSG(!memcmp(da, dc, sizeof(da)) && !memcmp(capy_mtp_logits(ma), capy_mtp_logits(mc), m.V * sizeof(float)),
		  "a fork's MTP rows leaked into the original's pages");
	capy_mtp_free(ma);
	capy_mtp_free(mb);
	capy_mtp_free(mc);
	capy_sampler_free(sa);
	capy_sampler_free(sc);
	capy_seq_free(a);
	capy_seq_free(b);
	capy_seq_free(c);
	free(hid);
	free(rows);
	close_model(&m);
}

/* capy_mtp_catch_up: a prompt read in pieces with the head run over each piece's rows
 * (keeping only the last hidden state) drafts the bits of the same pieces with the head run
 * over the whole prompt at the first draft (capy-gen's way); both sequences read the prompt in
 * the same pieces, so the main model's hidden states are the same bits. */
static void test_catch_up(void)
{
	struct model m;
	struct capy_err err = { 0 };
	int32_t prompt[90], dc[3], dd[3];
	static const uint64_t cut[] = { 0, 1, 23, 64, 90 };
	struct capy_seq *c, *d;
	struct capy_mtp *mc, *md;

	if (!open_model(&m, "share/models/capy-tiny", CAPY_KV_F32))
		return;
	for (uint64_t i = 0; i < 90; i++)
		prompt[i] = (int32_t)(100 + (i % 13) * 31 + i);
	CHECK_EQ_INT(capy_seq_new(m.e, &c, &err), 0);
	CHECK_EQ_INT(capy_seq_new(m.e, &d, &err), 0);
	CHECK_EQ_INT(capy_mtp_new(&mc, m.e, c, NULL, 0, &err), 0);
	CHECK_EQ_INT(capy_mtp_new(&md, m.e, d, NULL, 0, &err), 0);
	CHECK_EQ_INT(capy_mtp_catch_up(mc, NULL, &err), 0); /* an empty sequence: nothing to run */
	for (int p = 0; p < 4; p++) {
		uint64_t pos = cut[p], n = cut[p + 1] - cut[p];
		float *hc = capy_mtp_hidden_at(mc, pos, n, &err), *hd = capy_mtp_hidden_at(md, pos, n, &err);
		CHECK(hc && hd);
		if (!hc || !hd)
			break;
		CHECK_MSG(capy_engine_forward_hidden(m.e, c, prompt + pos, n, NULL, false, hc, &err) == 0, "%s", err.msg);
		CHECK_MSG(capy_engine_forward_hidden(m.e, d, prompt + pos, n, NULL, false, hd, &err) == 0, "%s", err.msg);
		CHECK_MSG(capy_mtp_catch_up(mc, NULL, &err) == 0, "%s", err.msg);
		CHECK_EQ_U64(capy_mtp_len(mc), cut[p + 1] - 1);
		CHECK_EQ_U64(capy_mtp_len(md), 0);
	}
	CHECK_EQ_INT(capy_mtp_draft(mc, 7, 3, dc, NULL, &err), 0);
	CHECK_EQ_INT(capy_mtp_draft(md, 7, 3, dd, NULL, &err), 0);
	CHECK_MSG(!memcmp(dc, dd, sizeof(dc)) && !memcmp(capy_mtp_logits(mc), capy_mtp_logits(md), m.V * sizeof(float)),
		  "the head run piece by piece drafts other bits than run at once");
	CHECK_EQ_U64(capy_mtp_len(mc), 90);
	/* A position whose hidden state was not given is refused. */
	int32_t t = 5;
	CHECK_EQ_INT(capy_engine_forward(m.e, c, &t, 1, NULL, false, &err), 0);
	CHECK_EQ_INT(capy_engine_forward(m.e, c, &t, 1, NULL, false, &err), 0);
	CHECK(capy_mtp_catch_up(mc, NULL, &err) < 0);
	CHECK_CONTAINS(err.msg, "were not given");
	capy_mtp_free(mc);
	capy_mtp_free(md);
	capy_seq_free(c);
	capy_seq_free(d);
	close_model(&m);
}

/* capy_mtp_resume: a fork of a sequence whose drafter ran the head over its prompt (what the
 * prefix cache shares) resumes with the last position's hidden state (capy_mtp_pending) and
 * drafts the bits the original drafts from the same token; the original's rows stay its own. */
static void test_resume(void)
{
	struct model m;
	struct capy_err err = { 0 };
	int32_t prompt[75], da[3], db[3];
	uint64_t N = 75;
	struct capy_seq *a, *b;
	struct capy_mtp *ma, *mb;
	float *hid;

	if (!open_model(&m, "share/models/capy-tiny", CAPY_KV_F32))
		return;
	for (uint64_t i = 0; i < N; i++)
		prompt[i] = (int32_t)(200 + (i % 11) * 17 + i);
	a = run_prefix(&m, prompt, N, &hid);
	CHECK_EQ_INT(capy_mtp_new(&ma, m.e, a, NULL, 0, &err), 0);
	memcpy(capy_mtp_hidden_at(ma, 0, N, &err), hid, N * m.H * sizeof(float));
	CHECK(capy_mtp_pending(ma) == NULL); /* the hidden states of 75 positions wait, not one */
	CHECK_EQ_INT(capy_mtp_catch_up(ma, NULL, &err), 0);
	CHECK(capy_mtp_pending(ma) && !memcmp(capy_mtp_pending(ma), hid + (N - 1) * m.H, m.H * sizeof(float)));
	CHECK_EQ_INT(capy_seq_fork(a, &b, &err), 0);
	CHECK_EQ_INT(capy_mtp_new(&mb, m.e, b, NULL, 0, &err), 0);
	CHECK(capy_mtp_resume(mb, N, capy_mtp_pending(ma), &err) < 0); /* no position after it */
	CHECK_EQ_INT(capy_mtp_resume(mb, N - 1, capy_mtp_pending(ma), &err), 0);
	CHECK(capy_mtp_resume(mb, N - 1, capy_mtp_pending(ma), &err) < 0); /* once, on a new drafter */
	CHECK_EQ_INT(capy_mtp_draft(mb, 9, 3, db, NULL, &err), 0);
	float *lb = malloc(m.V * sizeof(float));
	memcpy(lb, capy_mtp_logits(mb), m.V * sizeof(float));
	CHECK_EQ_INT(capy_mtp_draft(ma, 9, 3, da, NULL, &err), 0);
	CHECK_MSG(!memcmp(da, db, sizeof(da)) && !memcmp(capy_mtp_logits(ma), lb, m.V * sizeof(float)),
		  "a resumed drafter drafts other bits than the one whose rows it shares");
	capy_mtp_free(ma);
	capy_mtp_free(mb);
	capy_seq_free(a);
	capy_seq_free(b);
	free(lb);
	free(hid);
	close_model(&m);
}

/* What the engine and the drafter refuse. */
static void test_refusals(void)
{
	struct capy_artifact *a = test_open_fixture("qwen3_5_moe");
	struct capy_engine *e;
	struct capy_seq *s;
	struct capy_mtp *d;
	struct capy_err err = { 0 };
	float h[64] = { 0 };
	int32_t t = 1, bad = 100000;

	if (!a)
		return;
	CHECK_EQ_INT(capy_engine_new(&e, a, &(struct capy_engine_opts){ .threads = 1 }, &err), 0);
	CHECK_EQ_INT(capy_seq_new(e, &s, &err), 0);
	CHECK(!capy_engine_has_mtp(e));
	CHECK(capy_engine_mtp(e, &(struct capy_mtp_rows){ .seq = s, .n = 1, .hidden = h, .tokens = &t }, &err) < 0);
	CHECK_CONTAINS(err.msg, "without its MTP head");
	CHECK(capy_mtp_new(&d, e, s, NULL, 0, &err) < 0);
	CHECK(capy_engine_step(e, &(struct capy_step_item){ .seq = s, .tokens = &t, .n = 1, .hidden = h }, 1, &err) < 0);
	capy_seq_free(s);
	capy_engine_free(e);
	CHECK_EQ_INT(capy_engine_new(&e, a, &(struct capy_engine_opts){ .threads = 1, .mtp = true }, &err), 0);
	CHECK_EQ_INT(capy_seq_new(e, &s, &err), 0);
	CHECK(capy_mtp_new(&d, e, s, &bad, 1, &err) < 0);
	CHECK_EQ_INT(capy_mtp_new(&d, e, s, &t, 1, &err), 0);
	CHECK(capy_mtp_draft(d, 1, 2, &t, NULL, &err) < 0); /* an empty sequence: nothing to draft from */
	CHECK(capy_mtp_hidden_at(d, 5, 1, &err) == NULL);    /* a gap */
	capy_mtp_free(d);
	capy_seq_free(s);
	capy_engine_free(e);
	capy_artifact_close(a);
}

int main(void)
{
	RUN(test_refusals);
	RUN(test_teacher_forced);
	RUN(test_chained_reference);
	RUN(test_rollback);
	RUN(test_fork_copy_on_write);
	RUN(test_catch_up);
	RUN(test_resume);
	return test_summary();
}
