/* u-engine.c - sequence state: fork gives an independent copy, a checkpoint lets a sequence
 * be cut back exactly, and bad token ids are refused. Runs on the qwen4_exp fixture, whose
 * state has every kind (KV, QSA blocks, GDN, PLE). */
#include "test.h"
#include "artifact/artifact.h"
#include "convert/convert.h"
#include "engine/engine.h"

#include <unistd.h>

static struct capy_artifact *art;
static struct capy_engine *eng;
static uint64_t V;

static void setup(void)
{
	char model[4096], out[256];
	struct capy_convert_opts o = { 0 };
	struct capy_convert_stats st;
	struct capy_err err = { 0 };

	test_fixture_path("qwen4_exp", model, sizeof(model));
	snprintf(out, sizeof(out), "/tmp/u-engine-%d.capy", (int)getpid());
	o.model_dir = model;
	o.out_path = out;
	o.threads = 1;
	CHECK_EQ_INT(capy_convert(&o, &st, &err), 0);
	CHECK_EQ_INT(capy_artifact_open(&art, out, &err), 0);
	unlink(out);
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

int main(void)
{
	RUN(setup);
	if (eng) {
		RUN(test_fork);
		RUN(test_truncate);
		RUN(test_bad_ids);
	}
	capy_engine_free(eng);
	capy_artifact_close(art);
	return test_summary();
}
