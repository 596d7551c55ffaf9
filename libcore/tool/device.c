/* device.c - the device options of the tools that run a model (--device, --gpu, --gpu-mem,
 * --expert-slots, --expert-cpu-threads, --tp, --tp-payload), their memory plan (--plan, and the plan line at
 * start) and expert offload's counts after a run. */
#include "tool.h"
#include "../engine/engine.h"
#include "../offload/cpu-topology.h"
#include "../offload/plan.h"
#include "../tp/tp.h"

void capy_device_opts(const char *const *usage, const struct capy_opt *opts, const char *device, int64_t gpu,
		      uint64_t gpu_mem, struct capy_engine_opts *eo)
{
	if (!capy_engine_device_available(device))
		capy_usage_error(usage, opts, "--device: '%s' is not available in this build (%s)", device,
				 capy_engine_device_available("cuda") ? "cpu and cuda are" : "cpu is; cuda needs a build with nvcc");
	eo->device = device;
	eo->gpu = (int)gpu;
	eo->gpu_mem = gpu_mem;
}

void capy_expert_opts(const char *const *usage, const struct capy_opt *opts, int64_t slots, const char *threads,
		      struct capy_engine_opts *eo)
{
	struct capy_err err = { 0 };

	/* The option's 0 is "no slots"; the engine's 0 is its default (what the budget holds). */
	eo->expert_slots = slots < 0 ? 0 : slots == 0 ? CAPY_EXPERT_SLOTS_NONE : slots;
	eo->expert_threads = 0;
	if (threads && capy_expert_threads_parse(threads, &eo->expert_threads, &err) < 0)
		capy_usage_error(usage, opts, "%s", err.msg);
}

void capy_tp_opts(const char *const *usage, const struct capy_opt *opts, int64_t tp, const char *payload,
		  struct capy_engine_opts *eo)
{
	int p = payload ? capy_tp_payload_parse(payload) : CAPY_TP_FP32;

	if (p < 0)
		capy_usage_error(usage, opts, "--tp-payload: '%s' is not fp32, fp16-shift or bf16", payload);
	eo->tp = (int)tp;
	eo->tp_payload = p; /* not given: 0, fp32 */
}

int capy_plan_print(const char *model, const struct capy_plan_opts *po)
{
	struct capy_artifact *a;
	struct capy_model_config c;
	struct capy_host_mem h;
	struct capy_plan p;
	struct capy_buf b = { 0 };
	struct capy_err err = { 0 };
	char what[4200];
	int rc;

	if (capy_artifact_open(&a, model, &err) < 0)
		capy_die("%s", err.msg);
	snprintf(what, sizeof(what), "'%s': model.config", a->path);
	if (capy_model_config_parse(&c, a->family, a->config, what, &err) < 0 || capy_host_mem_read(&h, &err) < 0 ||
	    capy_plan_compute(&p, a, &c, po, &h, &err) < 0)
		capy_die("%s", err.msg);
	snprintf(what, sizeof(what), "'%s'", model);
	capy_plan_format(&p, what, &b);
	if (b.oom)
		capy_die("out of memory");
	fwrite(b.data, 1, b.len, stdout);
	fflush(stdout);
	capy_buf_release(&b);
	capy_artifact_close(a);
	if ((rc = capy_plan_check(&p, &err)) < 0) {
		capy_error("%s", err.msg);
		return CAPY_EXIT_FAIL;
	}
	return CAPY_EXIT_OK;
}

void capy_plan_log(const struct capy_engine *e)
{
	char line[1024];

	if (capy_engine_plan_line(e, line, sizeof(line)))
		fprintf(stderr, "%s: %s\n", capy_tool_name, line);
}

void capy_offload_log(const struct capy_engine *e, uint64_t tokens, const char *what)
{
	struct capy_offload_stats st;
	uint64_t looked;

	if (!capy_engine_offload_stats(e, &st))
		return;
	looked = st.hits + st.misses;
	fprintf(stderr, "%s: expert offload: %" PRIu64 " of %" PRIu64 " experts resident in %" PRIu64 " slots; %" PRIu64
		" hits, %" PRIu64 " misses (%.1f%% hits, %.2f misses per %s), %" PRIu64 " streamed; %" PRIu64 " loads, %"
		PRIu64 " evictions; %d CPU threads\n",
		capy_tool_name, st.resident, st.experts, st.slots, st.hits, st.misses,
		looked ? 100.0 * (double)st.hits / (double)looked : 0.0, tokens ? (double)st.misses / (double)tokens : 0.0,
		what, st.streamed, st.loads, st.evictions, st.cpu_threads);
	if (st.jobs)
		fprintf(stderr, "%s: expert offload: %" PRIu64 " CPU jobs, %.1f us each on the CPU (%.1f GB/s of experts), the"
			" GPU waited %.1f us for each\n", capy_tool_name, st.jobs, 1e6 * st.job_seconds / (double)st.jobs,
			st.job_seconds > 0 ? (double)st.job_bytes / st.job_seconds * 1e-9 : 0.0,
			1e6 * st.wait_seconds / (double)st.jobs);
}
