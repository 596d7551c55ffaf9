/* convert.h - Hugging Face checkpoint -> .capy artifact, and synthetic artifacts.
 *
 *	struct capy_convert_opts o = { .model_dir = "Qwen3.6-35B-A3B", .out_path = "q.capy" };
 *	struct capy_convert_stats st;
 *	if (capy_convert(&o, &st, &err) < 0)
 *		die("%s", err.msg);
 *
 * The converter knows each family's tensors (docs/artifact.md, "Names"): it checks
 * that every expected tensor is present with the right shape and dtype and that no
 * unexpected one is, keeps NVIDIA ModelOpt NVFP4 tensors exactly as published (or,
 * on request, quantizes BF16 routed experts with ModelOpt's rule), fuses what the
 * engine wants fused, copies the tokenizer, template and configs, and writes the
 * artifact tensor by tensor under a temporary name, renamed only when complete.
 * Memory stays bounded by a few chunks per thread whatever the checkpoint's size.
 */
#ifndef CAPY_CONVERT_H
#define CAPY_CONVERT_H

#include "../artifact/artifact.h"

struct capy_convert_opts {
	const char *model_dir;   /* checkpoint directory (convert) */
	const char *config_path; /* config.json to build a synthetic model from (synthetic) */
	const char *out_path;
	bool vision;             /* keep model.visual.* */
	bool quantize_experts;   /* BF16 routed experts -> NVFP4 (ModelOpt rule) */
	uint64_t seed;           /* synthetic weights */
	bool layout_only;        /* write the tensor table but no tensor data (for --plan) */
	int threads;             /* <= 0: one per CPU */
	/* Called once the layout is fixed with the number of bytes to write, then with each
	 * block of bytes written (from any thread). */
	void (*on_start)(uint64_t payload_bytes, void *ud);
	capy_progress_fn progress;
	void *progress_ud;
	/* Called once the temporary output file exists (e.g. to remove it on a signal)
	 * and again with NULL when it is gone or renamed. */
	void (*on_tmp_file)(const char *tmp_path, void *ud);
	void *tmp_ud;
};

struct capy_convert_stats {
	uint64_t tensors, files, bytes, file_bytes;
	uint64_t nvfp4_tensors, quantized_tensors, skipped_vision;
	uint64_t payload_bytes; /* what had to be written (files + tensors) */
	int threads;
};

int capy_convert(const struct capy_convert_opts *o, struct capy_convert_stats *st,
		 struct capy_err *err);

/* Random weights of realistic scale for the model described by o->config_path
 * (a config.json; tokenizer.json & co. beside it are embedded when present). */
int capy_synthetic(const struct capy_convert_opts *o, struct capy_convert_stats *st,
		   struct capy_err *err);

#endif
