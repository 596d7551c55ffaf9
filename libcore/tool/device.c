/* device.c - the device options of the tools that run a model (--device, --gpu, --gpu-mem) and
 * their memory plan (--plan, and the plan line at start). */
#include "tool.h"
#include "../engine/engine.h"
#include "../offload/plan.h"

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
	/* The plan is sound, but the CUDA backend cannot run it yet. */
	if (!p.all_resident)
		capy_warning("expert offload is not implemented yet: --device cuda refuses this plan (%" PRIu64 " of %" PRIu64
			     " experts fit)",
			     p.slots, p.experts);
	return CAPY_EXIT_OK;
}

void capy_plan_log(const struct capy_engine *e)
{
	char line[1024];

	if (capy_engine_plan_line(e, line, sizeof(line)))
		fprintf(stderr, "%s: %s\n", capy_tool_name, line);
}
