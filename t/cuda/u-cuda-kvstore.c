/* u-cuda-kvstore.c - the context cache's host and disk tiers on the CUDA backend: a cached
 * prefix copied out of device memory (pages and recurrent state, cu_page_read and
 * cu_state_read) and back into new device pages (cu_page_write, cu_state_write) is bitwise
 * what it was, through an entry file too: the next tokens' logits equal a device-tier
 * resume's bit for bit, BF16 and INT8 KV, on qwen3_5_moe and qwen4_exp (QSA keys, PLE
 * contexts on the host). A CPU entry is refused by the CUDA engine (another backend's
 * layout). Runs on the first GPU (CAPY_GPU picks another); make test-cuda. */
#include "test.h"
#include "test-fixture.h"
#include "cuda-test.h"
#include "engine/engine.h"
#include "kvstore/kvstore.h"

#include <string.h>
#include <unistd.h>

#define PROMPT 150
#define MORE 9

static struct capy_engine *open_engine(const struct capy_artifact *a, const char *dev, enum capy_kv_dtype kv)
{
	struct capy_engine_opts o = { .threads = 2, .kv = kv, .device = dev };
	struct capy_engine *e = NULL;
	struct capy_err err = { 0 };
	const char *g = getenv("CAPY_GPU");

	o.gpu = g ? (int)strtol(g, NULL, 10) : 0;
	CHECK_MSG(capy_engine_new(&e, a, &o, &err) == 0, "%s: %s", dev, err.msg);
	return e;
}

static float *more_logits(struct capy_engine *e, struct capy_seq *s, const int32_t *more, uint64_t V)
{
	struct capy_err err = { 0 };
	float *lg = malloc(MORE * V * sizeof(float));

	CHECK_MSG(capy_engine_forward(e, s, more, MORE, lg, true, &err) == 0, "%s", err.msg);
	capy_seq_free(s);
	return lg;
}

static void check_model(const char *fixture, enum capy_kv_dtype kv)
{
	struct capy_artifact *a = test_open_fixture(fixture);
	struct capy_engine *e = open_engine(a, "cuda", kv), *cpu = open_engine(a, "cpu", kv);
	struct capy_err err = { 0 };
	struct capy_kv_ident id, cpu_id;
	struct capy_kv_entry *en, *back;
	struct capy_seq *s, *h, *r;
	struct capy_snapshot *sn;
	uint64_t V = capy_engine_config(e)->vocab_size;
	int32_t p[PROMPT], more[MORE];
	float *lg = malloc(V * sizeof(float));
	char path[256];

	for (uint64_t i = 0; i < PROMPT; i++)
		p[i] = (int32_t)((i * 7919u + 3) % V);
	for (uint64_t i = 0; i < MORE; i++)
		more[i] = (int32_t)((i * 104729u + 5) % V);
	CHECK(capy_seq_new(e, &s, &err) == 0);
	CHECK_MSG(capy_engine_forward(e, s, p, PROMPT, lg, false, &err) == 0, "%s", err.msg);
	CHECK(capy_snapshot_take(s, &sn, &err) == 0 && capy_seq_share(s, PROMPT, &h, &err) == 0);
	capy_seq_free(s);
	CHECK_MSG(capy_kv_ident_of(e, &id, &err) == 0, "%s", err.msg);
	CHECK_STR(id.backend, "cuda");
	CHECK_MSG(capy_kv_entry_capture(&en, &id, h, sn, &err) == 0, "%s", err.msg);

	CHECK(capy_seq_share(h, PROMPT, &r, &err) == 0 && capy_seq_restore(r, sn, &err) == 0);
	float *ref = more_logits(e, r, more, V);
	CHECK_MSG(capy_kv_entry_restore(en, 0, e, &r, &err) == 0, "%s", err.msg);
	float *host = more_logits(e, r, more, V);
	CHECK_MSG(!memcmp(host, ref, MORE * V * sizeof(float)), "%s: restored from host memory, logits differ", fixture);

	snprintf(path, sizeof(path), "/tmp/u-cuda-kvstore-%d%s", (int)getpid(), CAPY_KV_SUFFIX);
	CHECK_MSG(capy_kv_entry_write(en, path, 1, NULL, &err) == 0, "%s", err.msg);
	CHECK_MSG(capy_kv_entry_read(path, &id, 0, &back, NULL, &err) == 0, "%s", err.msg);
	CHECK(capy_kv_entry_restore(back, 0, e, &r, &err) == 0);
	float *disk = more_logits(e, r, more, V);
	CHECK_MSG(!memcmp(disk, ref, MORE * V * sizeof(float)), "%s: restored from disk, logits differ", fixture);
	/* the CPU backend's entries are not the GPU's */
	CHECK(capy_kv_ident_of(cpu, &cpu_id, &err) == 0);
	CHECK(capy_kv_entry_read(path, &cpu_id, 0, &back, NULL, &err) == CAPY_EINVAL);
	CHECK_CONTAINS(err.msg, "backend");
	unlink(path);

	free(ref);
	free(host);
	free(disk);
	free(lg);
	capy_kv_entry_free(back);
	capy_kv_entry_free(en);
	capy_snapshot_free(sn);
	capy_seq_free(h);
	capy_engine_free(cpu);
	capy_engine_free(e);
	capy_artifact_close(a);
}

static void test_round_trips(void)
{
	check_model("qwen3_5_moe", CAPY_KV_BF16);
	check_model("qwen3_5_moe", CAPY_KV_INT8);
	check_model("qwen4_exp", CAPY_KV_BF16);
}

int main(void)
{
	RUN(test_round_trips);
	return test_summary();
}
