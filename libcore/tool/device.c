/* device.c - the device options of the tools that run a model (--device, --gpu, --gpu-mem). */
#include "tool.h"
#include "../engine/engine.h"

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
