/* u-plan.c - the memory plan's pure parts (libcore/offload/plan.h): reading MemAvailable, the
 * context sizes, the ranges the backend uploads (an expert stack is one range), and the split of
 * a budget into fixed parts and expert slots, with the refusals, on the qwen3_5_moe fixture. */
#include "test.h"
#include "test-fixture.h"
#include "engine/backend.h"
#include "offload/plan.h"

static void test_meminfo(void)
{
	uint64_t v = 0;

	CHECK_EQ_INT(capy_host_mem_parse("MemTotal: 10 kB\nMemAvailable:   24174272 kB\n", &v), 0);
	CHECK_EQ_U64(v, 24174272ull * 1024);
	CHECK_EQ_INT(capy_host_mem_parse("MemAvailable:\t7 kB", &v), 0);
	CHECK_EQ_U64(v, 7 * 1024);
	CHECK_EQ_INT(capy_host_mem_parse("MemTotal: 10 kB\n", &v), -1);
	CHECK_EQ_INT(capy_host_mem_parse("MemAvailable: lots kB\n", &v), -1);
	CHECK_EQ_INT(capy_host_mem_parse("MemAvailable: 12 MB\n", &v), -1);
	CHECK_EQ_INT(capy_host_mem_parse("MemAvailable: 99999999999999999999 kB\n", &v), -1);
}

static void test_context(void)
{
	struct capy_model_config c = { 0 };

	CHECK_EQ_U64(capy_plan_context_cap(0, 1), 1024);
	CHECK_EQ_U64(capy_plan_context_cap(0, 1025), 2048);
	CHECK_EQ_U64(capy_plan_context_cap(2048, 2048), 2048);
	CHECK_EQ_U64(capy_plan_context_cap(0, 65536), 65536);
	c.family = CAPY_FAMILY_QWEN3_5_MOE;
	c.n_heads = 16;
	c.head_dim = 256;
	/* one chunk of 256 keys: no split, no workspace; else row-chunks of partials, at most 8192 */
	CHECK_EQ_U64(capy_plan_attn_ws(&c, 512, 256), 0);
	CHECK_EQ_U64(capy_plan_attn_ws(&c, 2, 1024), 2 * 4 * 16 * 258 * 4);
	CHECK_EQ_U64(capy_plan_attn_ws(&c, 512, 65536), 8192ull * 16 * 258 * 4);
	CHECK_EQ_U64(capy_plan_sel_bytes(&c, 512, 65536), 0);
	c.family = CAPY_FAMILY_QWEN4_EXP;
	c.indexer_compress_ratio = 16;
	CHECK_EQ_U64(capy_plan_sel_bytes(&c, 10, 1024), 10240);
	CHECK_EQ_U64(capy_plan_attn_ws(&c, 1, 256), 16 * 4); /* the QSA selection's floats */
	CHECK_EQ_U64(capy_kv_pages_needed(8 * 4096, 8, 64), 520);
	CHECK_EQ_U64(capy_kv_pages_needed(1, 1, 64), 2);
}

static struct capy_artifact *art;

static void test_ranges(void)
{
	const struct capy_artifact *a = art;
	struct capy_plan_range *r;
	size_t n, n_all;
	uint64_t ne, all, sum = 0;

	CHECK_EQ_INT(capy_plan_ranges(a, false, false, &r, &n, &ne, NULL), 0);
	for (size_t i = 0; i < n; i++) {
		CHECK(i == 0 || r[i].off > r[i - 1].off + r[i - 1].len);
		sum += CAPY_ALIGN_UP(r[i].len, CAPY_PLAN_ALIGN);
	}
	CHECK_EQ_U64(sum, ne);
	free(r);
	CHECK_EQ_INT(capy_plan_ranges(a, true, false, &r, &n_all, &all, NULL), 0);
	free(r);
	/* each expert stack but the MTP head's adds at most one range (its tensors' slices
	 * interleave; it may touch a neighbour), and at most its experts' records */
	CHECK(n_all <= n + a->nstacks - 1);
	sum = ne;
	for (size_t i = 0; i < a->nstacks; i++)
		if (!capy_plan_is_mtp(a->stacks[i].name))
			sum += a->stacks[i].count * a->stacks[i].stride;
	CHECK(all > ne && all <= sum);
	/* with the MTP head: every mtp.* tensor's bytes more, its stack's records at most */
	uint64_t ne_mtp, all_mtp, mtp_bytes = 0, mtp_stack = 0;
	CHECK_EQ_INT(capy_plan_ranges(a, false, true, &r, &n, &ne_mtp, NULL), 0);
	free(r);
	CHECK_EQ_INT(capy_plan_ranges(a, true, true, &r, &n, &all_mtp, NULL), 0);
	free(r);
	for (size_t i = 0; i < a->ntensors; i++)
		if (capy_plan_is_mtp(a->tensors[i].name) && !capy_plan_is_expert(&a->tensors[i]))
			mtp_bytes += CAPY_ALIGN_UP(a->tensors[i].bytes, CAPY_PLAN_ALIGN);
	for (size_t i = 0; i < a->nstacks; i++)
		if (capy_plan_is_mtp(a->stacks[i].name))
			mtp_stack += a->stacks[i].count * a->stacks[i].stride;
	CHECK(mtp_bytes > 0 && mtp_stack > 0);
	CHECK_EQ_U64(ne_mtp, ne + mtp_bytes);
	CHECK(all_mtp > all + mtp_bytes && all_mtp <= all + mtp_bytes + mtp_stack + CAPY_PLAN_ALIGN);
}

static void test_plan(void)
{
	const struct capy_artifact *a = art;
	struct capy_model_config c;
	struct capy_host_mem h = { .available = 1ull << 40, .memlock = CAPY_PLAN_UNKNOWN };
	struct capy_plan_opts o = { .max_context = 4096, .max_seqs = 2, .step_tokens = 64 };
	struct capy_plan p, q;
	struct capy_err err = { 0 };
	char line[1024];

	CHECK_EQ_INT(capy_model_config_parse(&c, a->family, a->config, "fixture", &err), 0);
	CHECK_EQ_INT(capy_plan_compute(&p, a, &c, &o, &h, &err), 0);
	CHECK(p.all_resident);
	CHECK_EQ_U64(p.fixed, p.weights + p.small + p.kv + p.states + p.scratch + p.context);
	CHECK_EQ_U64(p.device, p.fixed - p.weights + p.weights_all);
	CHECK_EQ_U64(p.kv, capy_kv_pages_needed(2 * 4096, 2, p.page_tokens) * p.page_bytes);
	CHECK_EQ_U64(p.experts, c.n_experts * (a->nstacks - 1)); /* not the MTP head's */
	CHECK(p.has_mtp && !p.mtp);
	CHECK_EQ_U64(p.host_need, p.host_staging);
	CHECK_EQ_INT(capy_plan_check(&p, &err), 0);
	/* the token masks: a mask row per logits row (steps of 64: 64 rows), on the device and
	 * page-locked on the host, counted in the step buffers and the staging */
	{
		struct capy_plan_scratch ps;
		capy_plan_scratch(&ps, a, &c, 64, false);
		CHECK_EQ_U64(ps.logits_rows, 64);
		CHECK_EQ_U64(ps.smp_mask, 64 * ((c.vocab_size + 31) / 32) * 4);
		CHECK_EQ_U64(ps.host_smp_mask, ps.smp_mask);
		CHECK_EQ_U64(p.mask_rows, 64);
		CHECK_EQ_U64(p.masks, ps.smp_mask);
		CHECK_EQ_U64(p.scratch, ps.device);
		CHECK(ps.device > ps.smp_mask && ps.host > ps.host_smp_mask);
		struct capy_buf b = { 0 };
		capy_plan_format(&p, "fixture", &b);
		snprintf(line, sizeof(line), "token masks 64 x %" PRIu64 " bytes", ((c.vocab_size + 31) / 32) * 4);
		CHECK_MSG(b.data && strstr(b.data, line), "no '%s' in the plan", line);
		capy_buf_release(&b);
	}

	/* exactly enough for the fixed parts (with offload's maps) and 3.5 slots: 3 slots */
	const uint64_t odev = capy_plan_offload_dev(a, &c, p.o.step_tokens);
	CHECK(odev >= a->nstacks * c.n_experts * 4 + 2 * p.o.step_tokens * c.n_experts_per_tok * 4);
	o.gpu_mem = p.fixed + odev + 3 * p.slot_bytes + p.slot_bytes / 2;
	CHECK_EQ_INT(capy_plan_compute(&q, a, &c, &o, &h, &err), 0);
	CHECK(!q.all_resident);
	CHECK_EQ_U64(q.slots, 3);
	CHECK_EQ_U64(q.offload_dev, odev);
	CHECK_EQ_U64(q.fixed, p.fixed + odev);
	CHECK_EQ_U64(q.device, q.fixed + 3 * q.slot_bytes);
	CHECK_EQ_U64(q.host_staging, p.host_staging + capy_plan_offload_host(a, &c, p.o.step_tokens));
	{
		/* the hand-over area: every part in order, aligned, the last one the job */
		struct capy_plan_hand hd;
		const uint64_t S = p.o.step_tokens * c.n_experts_per_tok;
		capy_plan_offload_hand(&hd, a, &c, p.o.step_tokens);
		CHECK(hd.expert >= 4 && hd.miss_slot >= hd.expert + S * 4 && hd.x_row >= hd.miss_slot + S * 4);
		CHECK(hd.x >= hd.x_row + S * 4 && hd.out >= hd.x + p.o.step_tokens * c.hidden_size * 4);
		CHECK(hd.route >= hd.out + S * c.hidden_size * 4 && hd.job >= hd.route + a->nstacks * S * 4);
		CHECK(hd.bytes >= hd.job + a->nstacks * CAPY_PLAN_JOB_BYTES && hd.x % CAPY_PLAN_ALIGN == 0 &&
		      hd.job % CAPY_PLAN_ALIGN == 0);
	}
	/* a cap on the slots (engine.h's expert_slots) offloads even where everything fits */
	{
		struct capy_plan_opts oc = o;
		oc.gpu_mem = 0;
		oc.expert_slots = 2;
		CHECK_EQ_INT(capy_plan_compute(&q, a, &c, &oc, &h, &err), 0);
		CHECK(!q.all_resident);
		CHECK_EQ_U64(q.slots, 2);
		CHECK_EQ_U64(q.device, p.fixed + odev + 2 * q.slot_bytes);
		oc.expert_slots = CAPY_EXPERT_SLOTS_NONE;
		CHECK_EQ_INT(capy_plan_compute(&q, a, &c, &oc, &h, &err), 0);
		CHECK(!q.all_resident);
		CHECK_EQ_U64(q.slots, 0);
		CHECK_EQ_U64(q.host_experts, q.expert_bytes);
		oc.expert_slots = (int64_t)q.experts; /* a cap at the count: all resident */
		CHECK_EQ_INT(capy_plan_compute(&q, a, &c, &oc, &h, &err), 0);
		CHECK(q.all_resident);
		oc.expert_slots = 3; /* the budget's 3 and a cap of 3 */
		oc.gpu_mem = o.gpu_mem;
		CHECK_EQ_INT(capy_plan_compute(&q, a, &c, &oc, &h, &err), 0);
		CHECK_EQ_U64(q.slots, 3);
	}
	CHECK_EQ_INT(capy_plan_compute(&q, a, &c, &o, &h, &err), 0);
	CHECK_EQ_U64(q.host_experts, q.expert_bytes);
	CHECK(q.pinned);
	CHECK_EQ_INT(capy_plan_check(&q, &err), 0);
	capy_plan_summary(&q, line, sizeof(line));
	CHECK_MSG(strstr(line, "3 expert slots") && strstr(line, "page-locked"), "%s", line);

	/* a memlock limit below the experts: the mapped artifact */
	h.memlock = q.expert_bytes - 1;
	CHECK_EQ_INT(capy_plan_compute(&q, a, &c, &o, &h, &err), 0);
	CHECK(!q.pinned);
	capy_plan_summary(&q, line, sizeof(line));
	CHECK_MSG(strstr(line, "mapped artifact (not page-locked, slower)"), "%s", line);

	/* the RAM guard */
	h.available = q.host_need - 1;
	CHECK_EQ_INT(capy_plan_compute(&q, a, &c, &o, &h, &err), 0);
	CHECK_EQ_INT(capy_plan_check(&q, &err), CAPY_ENOMEM);
	CHECK_MSG(strstr(err.msg, "not enough host RAM") && strstr(err.msg, "RLIMIT_MEMLOCK"), "%s", err.msg);

	/* the fixed parts alone do not fit */
	h.available = CAPY_PLAN_UNKNOWN;
	o.gpu_mem = p.fixed - 1;
	o.budget = "the budget";
	CHECK_EQ_INT(capy_plan_compute(&q, a, &c, &o, &h, &err), 0);
	CHECK_EQ_U64(q.slots, 0);
	CHECK_EQ_INT(capy_plan_check(&q, &err), CAPY_ENOMEM);
	CHECK_MSG(!strncmp(err.msg, "the budget ", 11) && strstr(err.msg, "before any routed expert"), "%s", err.msg);

	/* just enough for everything: all resident, with no host copy */
	o.gpu_mem = p.device;
	CHECK_EQ_INT(capy_plan_compute(&q, a, &c, &o, &h, &err), 0);
	CHECK(q.all_resident);
	CHECK_EQ_U64(q.host_experts, 0);
}

/* The MTP head (opts.mtp): its tensors uploaded, its experts counted, one attention layer
 * more in every page, its buffers; the summary line says so. */
static void test_plan_mtp(void)
{
	const struct capy_artifact *a = art;
	struct capy_model_config c;
	struct capy_host_mem h = { .available = 1ull << 40, .memlock = CAPY_PLAN_UNKNOWN };
	struct capy_plan_opts o = { .max_context = 4096, .max_seqs = 2, .step_tokens = 64 };
	struct capy_plan p, q;
	struct capy_plan_scratch s0, s1;
	struct capy_kv_fields lay[16];
	struct capy_err err = { 0 };
	uint64_t P, pb0, pb1;
	int n_kv, n_gdn, n_ple;
	char line[1024];

	CHECK_EQ_INT(capy_model_config_parse(&c, a->family, a->config, "fixture", &err), 0);
	CHECK_EQ_INT(capy_plan_compute(&p, a, &c, &o, &h, &err), 0);
	o.mtp = true;
	CHECK_EQ_INT(capy_plan_compute(&q, a, &c, &o, &h, &err), 0);
	CHECK(q.mtp && q.all_resident);
	CHECK(q.weights > p.weights && q.weights_all - q.weights > p.weights_all - p.weights);
	CHECK_EQ_U64(q.experts, c.n_experts * a->nstacks);
	CHECK_EQ_U64(q.moe_layers, p.moe_layers + 1);
	capy_plan_layer_counts(&c, &n_kv, &n_gdn, &n_ple);
	CHECK_EQ_INT(capy_kv_page_layout(&c, o.kv, n_kv, CAPY_PLAN_ALIGN, lay, &P, &pb0, &err), 0);
	CHECK_EQ_INT(capy_kv_page_layout(&c, o.kv, n_kv + 1, CAPY_PLAN_ALIGN, lay, &P, &pb1, &err), 0);
	CHECK_EQ_U64(p.page_bytes, pb0);
	CHECK_EQ_U64(q.page_bytes, pb1);
	CHECK_EQ_U64(q.pages, p.pages);
	capy_plan_scratch(&s0, a, &c, 64, false);
	capy_plan_scratch(&s1, a, &c, 64, true);
	CHECK_EQ_U64(s0.mtp_ids, 0);
	CHECK_EQ_U64(s1.mtp_ids, c.vocab_size * 4);
	CHECK(s1.big1 >= 64 * 2 * c.hidden_size * 4);
	CHECK_EQ_U64(q.scratch, s1.device);
	CHECK_EQ_U64(q.fixed, q.weights + q.small + q.kv + q.states + q.scratch + q.context);
	capy_plan_summary(&q, line, sizeof(line));
	CHECK_MSG(strstr(line, "with the MTP head"), "%s", line);
	capy_plan_summary(&p, line, sizeof(line));
	CHECK_MSG(!strstr(line, "MTP"), "%s", line);
	/* asked for on an artifact without a head: nothing counted. Every fixture has a head now, so
	 * the artifact is a synthetic one from qwen4_exp's config (no mtp.* tensors), as a layout:
	 * the plan reads only its table. */
	char cfg[4096], out[256];
	struct capy_convert_stats st;
	struct capy_artifact *none = NULL;
	struct capy_model_config c4;
	test_fixture_path("qwen4_exp/config.json", cfg, sizeof(cfg));
	snprintf(out, sizeof(out), "/tmp/capy-unit-%d-no-head.capy", (int)getpid());
	CHECK_MSG(capy_synthetic(&(struct capy_convert_opts){ .config_path = cfg, .out_path = out, .seed = 1,
							     .layout_only = true, .threads = 1 }, &st, &err) == 0,
		  "%s", err.msg);
	CHECK_MSG(capy_artifact_open(&none, out, &err) == 0, "%s", err.msg);
	unlink(out);
	if (none) {
		CHECK_EQ_INT(capy_model_config_parse(&c4, none->family, none->config, "fixture", &err), 0);
		CHECK_EQ_INT(capy_plan_compute(&q, none, &c4, &o, &h, &err), 0);
		CHECK(!q.mtp && !q.has_mtp);
		capy_artifact_close(none);
	}
}

int main(void)
{
	RUN(test_meminfo);
	RUN(test_context);
	art = test_open_fixture("qwen3_5_moe");
	RUN(test_ranges);
	RUN(test_plan);
	RUN(test_plan_mtp);
	capy_artifact_close(art);
	return test_summary();
}
