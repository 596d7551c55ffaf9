/* u-ple-touch.c - capy_weights_touch_ple (libcore/model/weights.h): one read a 4 KiB page of
 * every PLE n-gram table, counted against the tables' sizes in the artifact's own tensor
 * records, on the qwen4_exp fixture (PLE layers) and the qwen3_5_moe one (none: nothing read). */
#include "test.h"
#include "test-fixture.h"
#include "model/config.h"
#include "model/weights.h"

#include <stdio.h>

static void touch_case(const char *fixture, bool has_ple)
{
	struct capy_err err = { 0 };
	struct capy_artifact *a = test_open_fixture(fixture);
	struct capy_model_config c;
	struct capy_weights w = { 0 };
	uint64_t want = 0, tables = 0;

	CHECK_EQ_INT(capy_model_config_parse(&c, a->family, a->config, fixture, &err), 0);
	CHECK_MSG(capy_weights_bind(&w, a, &c, &err) == 0, "%s", err.msg);
	for (uint64_t i = 0; i < c.n_layers; i++) {
		char name[128];
		snprintf(name, sizeof(name), "layers.%" PRIu64 ".ple.ple_embedding.ngram_embedding.weight", i);
		const struct capy_tensor_info *t = capy_artifact_find(a, name);
		if (!t)
			continue;
		tables++;
		want += (t->bytes + 4095) / 4096;
	}
	CHECK_EQ_U64(tables, (uint64_t)w.n_ple);
	CHECK(has_ple ? want > 0 : want == 0);
	CHECK_EQ_U64(capy_weights_touch_ple(&w, &c), want);
	capy_weights_release(&w);
	capy_artifact_close(a);
}

static void test_touch(void)
{
	touch_case("qwen4_exp", true);
	touch_case("qwen3_5_moe", false);
}

int main(void)
{
	RUN(test_touch);
	return test_summary();
}
