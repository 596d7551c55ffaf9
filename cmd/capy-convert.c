/* capy-convert - Hugging Face checkpoint -> .capy artifact; inspect, verify, synthesize. */
#include "tool/tool.h"
#include "artifact/artifact.h"
#include "convert/convert.h"
#include "model/config.h"
#include "util/hash.h"
#include "util/json.h"

#include <math.h>

static const char *const usage[] = {
	"capy-convert --model <dir> --out <file.capy> [--vision] [--quantize-experts nvfp4] [--layout-only] [--threads <n>]",
	"capy-convert --synthetic <config.json> --out <file.capy> [--quantize-experts nvfp4] [--seed <n>] [--layout-only]",
	"capy-convert --inspect <file.capy> [--json]",
	"capy-convert --verify <file.capy> [--threads <n>]",
	NULL,
};

static const char *opt_model, *opt_out, *opt_synthetic, *opt_inspect, *opt_verify, *opt_quantize;
static bool opt_vision, opt_json, opt_quiet, opt_layout_only;
static int64_t opt_threads, opt_seed = 1;

static const struct capy_opt opts[] = {
	CAPY_OPT_GROUP("Convert"),
	CAPY_OPT_STRING('m', "model", &opt_model, "dir", "Hugging Face checkpoint directory to convert"),
	CAPY_OPT_STRING('o', "out", &opt_out, "file", "artifact to write (replaced only when complete)"),
	CAPY_OPT_FLAG(0, "vision", &opt_vision, "keep the vision tower (model.visual.*)"),
	CAPY_OPT_STRING(0, "quantize-experts", &opt_quantize, "nvfp4",
			"quantize BF16 routed experts to NVFP4 with ModelOpt's rule"),
	CAPY_OPT_STRING(0, "synthetic", &opt_synthetic, "config.json",
			"write random weights of realistic scale for this config instead"),
	CAPY_OPT_INT(0, "seed", &opt_seed, "n", "seed of the synthetic weights (default 1)", 0, 9007199254740991.0),
	CAPY_OPT_FLAG(0, "layout-only", &opt_layout_only,
		      "write the tensor table without tensor data: a sparse file for --plan only"),
	CAPY_OPT_GROUP("Inspect"),
	CAPY_OPT_STRING(0, "inspect", &opt_inspect, "file", "print an artifact's metadata and tensor table"),
	CAPY_OPT_FLAG(0, "json", &opt_json, "with --inspect: print the directory as JSON"),
	CAPY_OPT_STRING(0, "verify", &opt_verify, "file", "check every checksum of an artifact"),
	CAPY_OPT_GROUP("Common"),
	CAPY_OPT_INT('t', "threads", &opt_threads, "n", "worker threads (default: one per CPU)", 0, 1024),
	CAPY_OPT_FLAG('q', "quiet", &opt_quiet, "no progress bar or summary"),
	CAPY_OPT_END(),
};

static void shape_text(char *buf, size_t n, const struct capy_tensor_info *t)
{
	size_t len = (size_t)snprintf(buf, n, "[");

	for (int i = 0; i < t->ndim && len < n; i++)
		len += (size_t)snprintf(buf + len, n - len, i ? ", %" PRIu64 : "%" PRIu64, t->shape[i]);
	if (len < n)
		snprintf(buf + len, n - len, "]");
}

/* --- inspect ---------------------------------------------------------------------- */

static void print_config_line(const struct capy_artifact *a)
{
	struct capy_model_config c;
	struct capy_err err = { 0 };
	int lin = 0, full = 0, qsa = 0;

	if (capy_model_config_parse(&c, a->family, a->config, "model.config", &err) < 0) {
		printf("model:      (config not understood: %s)\n", err.msg);
		return;
	}
	for (uint64_t i = 0; i < c.n_layers; i++) {
		lin += c.layer_types[i] == CAPY_LAYER_LINEAR;
		full += c.layer_types[i] == CAPY_LAYER_FULL;
		qsa += c.layer_types[i] == CAPY_LAYER_QSA;
	}
	printf("model:      %" PRIu64 " layers (%d linear_attention, %d %s), hidden %" PRIu64 ", vocab %" PRIu64,
	       c.n_layers, lin, full + qsa, qsa ? "qwen_sparse_attention" : "full_attention", c.hidden_size,
	       c.vocab_size);
	if (c.n_experts)
		printf(", %" PRIu64 " experts top-%" PRIu64, c.n_experts, c.n_experts_per_tok);
	if (c.mtp_layers)
		printf(", MTP %" PRIu64, c.mtp_layers);
	printf("\n");
}

static int inspect(const char *path)
{
	struct capy_err err = { 0 };
	struct capy_artifact *a;
	uint64_t tbytes = 0;
	size_t nvfp4 = 0;
	char h1[32], h2[32], hex[17], shape[128];

	if (capy_artifact_open(&a, path, &err) < 0)
		capy_die("%s", err.msg);
	if (opt_json) {
		cJSON *root = cJSON_Duplicate(a->dir, 1), *hdr = cJSON_CreateObject();
		char *text;
		capy_json_add_u64(hdr, "version", CAPY_ARTIFACT_VERSION);
		capy_json_add_u64(hdr, "data_offset", a->data_offset);
		capy_json_add_u64(hdr, "file_bytes", a->size);
		cJSON_AddItemToObject(root, "header", hdr);
		text = cJSON_Print(root);
		printf("%s\n", text);
		free(text);
		cJSON_Delete(root);
		capy_artifact_close(a);
		return CAPY_EXIT_OK;
	}
	for (size_t i = 0; i < a->ntensors; i++) {
		tbytes += a->tensors[i].bytes;
		nvfp4 += a->tensors[i].dtype == CAPY_DT_NVFP4;
	}
	capy_human_bytes(h1, sizeof(h1), (double)a->size);
	printf("artifact:   %s (%s, capy v%d)\n", path, h1, CAPY_ARTIFACT_VERSION);
	printf("family:     %s\n", a->family);
	print_config_line(a);
	if (cJSON_IsObject(a->provenance)) {
		const cJSON *src = cJSON_GetObjectItemCaseSensitive(a->provenance, "source");
		const cJSON *dir = cJSON_GetObjectItemCaseSensitive(src, "dir");
		const cJSON *conv = cJSON_GetObjectItemCaseSensitive(a->provenance, "converter");
		const cJSON *recipe = cJSON_GetObjectItemCaseSensitive(a->provenance, "recipe");
		const cJSON *ex = cJSON_GetObjectItemCaseSensitive(recipe, "experts");
		const cJSON *syn = cJSON_GetObjectItemCaseSensitive(a->provenance, "synthetic");
		printf("source:     %s, by %s, experts %s%s\n",
		       cJSON_IsObject(syn) ? "synthetic (random weights)" : cJSON_IsString(dir) ? dir->valuestring : "?",
		       cJSON_IsString(conv) ? conv->valuestring : "?", cJSON_IsString(ex) ? ex->valuestring : "?",
		       capy_artifact_layout_only(a) ? "; layout only (no tensor data)" : "");
	}
	printf("\nfiles: %zu\n", a->nfiles);
	printf("  %-32s %12s %14s  %s\n", "name", "bytes", "offset", "xxh3");
	for (size_t i = 0; i < a->nfiles; i++) {
		capy_hash_hex(a->files[i].xxh3, hex);
		printf("  %-32s %12" PRIu64 " %14" PRIu64 "  %s\n", a->files[i].name, a->files[i].bytes,
		       a->files[i].offset, hex);
	}
	capy_human_bytes(h2, sizeof(h2), (double)tbytes);
	printf("\ntensors: %zu (%zu NVFP4), %s\n", a->ntensors, nvfp4, h2);
	printf("  %-56s %-7s %-20s %14s %12s  %s\n", "name", "dtype", "shape", "offset", "bytes", "xxh3");
	for (size_t i = 0; i < a->ntensors; i++) {
		const struct capy_tensor_info *t = &a->tensors[i];
		shape_text(shape, sizeof(shape), t);
		capy_hash_hex(t->xxh3, hex);
		printf("  %-56s %-7s %-20s %14" PRIu64 " %12" PRIu64 "  %s", t->name, capy_dtype_name(t->dtype), shape,
		       t->offset, t->bytes, hex);
		if (t->stride)
			printf("  stride %" PRIu64, t->stride);
		if (t->nparts > 1) {
			printf("  parts");
			for (uint32_t p = 0; p < t->nparts; p++)
				printf("%c%" PRIu64, p ? '+' : ' ', t->parts[p]);
		}
		printf("\n");
	}
	if (a->nstacks) {
		printf("\nexpert stacks: %zu\n", a->nstacks);
		for (size_t i = 0; i < a->nstacks; i++) {
			const struct capy_expert_stack *s = &a->stacks[i];
			printf("  %-40s %" PRIu64 " experts x %" PRIu64 " bytes at offset %" PRIu64 "\n", s->name,
			       s->count, s->stride, s->offset);
		}
	}
	capy_artifact_close(a);
	return CAPY_EXIT_OK;
}

/* --- verify ------------------------------------------------------------------------- */

static void progress_add(void *ud, uint64_t n)
{
	capy_progress_add(ud, n);
}

static int verify(const char *path)
{
	struct capy_err err = { 0 };
	struct capy_artifact *a;
	struct capy_progress *bar = NULL;
	uint64_t total = 0;
	double t0 = capy_now();
	char h[32];
	int rc;

	if (capy_artifact_open(&a, path, &err) < 0)
		capy_die("%s", err.msg);
	for (size_t i = 0; i < a->nfiles; i++)
		total += a->files[i].bytes;
	for (size_t i = 0; i < a->ntensors; i++)
		total += a->tensors[i].bytes;
	if (!opt_quiet)
		bar = capy_progress_new("verify", total);
	rc = capy_artifact_verify(a, (int)opt_threads, bar ? progress_add : NULL, bar, &err);
	capy_progress_done(bar);
	if (rc < 0) {
		capy_artifact_close(a);
		capy_die("%s", err.msg);
	}
	capy_human_bytes(h, sizeof(h), (double)total);
	printf("%s: ok (%zu files, %zu tensors, %s checked in %.1f s)\n", path, a->nfiles, a->ntensors, h,
	       capy_now() - t0);
	capy_artifact_close(a);
	return CAPY_EXIT_OK;
}

/* --- convert ---------------------------------------------------------------------- */

static struct capy_progress *bar;

static void on_start(uint64_t total, void *ud)
{
	(void)ud;
	if (!opt_quiet)
		bar = capy_progress_new(opt_synthetic ? "synthesize" : "convert", total);
}

static void on_progress(void *ud, uint64_t n)
{
	(void)ud;
	capy_progress_add(bar, n);
}

static void on_tmp(const char *path, void *ud)
{
	(void)ud;
	capy_cleanup_on_signal(path);
}

static int convert(void)
{
	struct capy_convert_opts o = {
		.model_dir = opt_model,
		.config_path = opt_synthetic,
		.out_path = opt_out,
		.vision = opt_vision,
		.quantize_experts = opt_quantize != NULL,
		.seed = (uint64_t)opt_seed,
		.layout_only = opt_layout_only,
		.threads = (int)opt_threads,
		.on_start = on_start,
		.progress = on_progress,
		.on_tmp_file = on_tmp,
	};
	struct capy_convert_stats st;
	struct capy_err err = { 0 };
	double t0 = capy_now(), dt;
	char h1[32], h2[32], h3[32];
	int rc;

	rc = opt_synthetic ? capy_synthetic(&o, &st, &err) : capy_convert(&o, &st, &err);
	capy_progress_done(bar);
	if (rc < 0)
		capy_die("%s", err.msg);
	dt = capy_now() - t0;
	if (!opt_quiet) {
		capy_human_bytes(h1, sizeof(h1), (double)st.bytes);
		capy_human_bytes(h2, sizeof(h2), dt > 0 ? (double)st.payload_bytes / dt : 0);
		capy_human_bytes(h3, sizeof(h3), (double)capy_peak_rss());
		fprintf(stderr, "%s: wrote '%s': %" PRIu64 " tensors (%" PRIu64 " NVFP4%s), %" PRIu64
			" files, %s in %.1f s (%s/s, %d threads), peak RSS %s\n",
			capy_tool_name, opt_out, st.tensors, st.nvfp4_tensors,
			st.quantized_tensors ? ", experts quantized" : "", st.files, h1, dt, h2, st.threads, h3);
		if (st.skipped_vision)
			fprintf(stderr, "%s: left out %" PRIu64 " vision tensors (use --vision to keep them)\n",
				capy_tool_name, st.skipped_vision);
	}
	return CAPY_EXIT_OK;
}

int cmd_main(int argc, char **argv)
{
	int modes, n = capy_opt_parse(argc, argv, usage, opts);

	if (n)
		capy_usage_error(usage, opts, "unexpected argument '%s'", argv[0]);
	modes = !!opt_model + !!opt_synthetic + !!opt_inspect + !!opt_verify;
	if (modes != 1)
		capy_usage_error(usage, opts, "give exactly one of --model, --synthetic, --inspect, --verify");
	if ((opt_model || opt_synthetic) && !opt_out)
		capy_usage_error(usage, opts, "--out is required");
	if (!(opt_model || opt_synthetic) && (opt_out || opt_vision || opt_quantize || opt_layout_only))
		capy_usage_error(usage, opts,
				 "--out, --vision, --quantize-experts and --layout-only go with --model or --synthetic");
	if (opt_json && !opt_inspect)
		capy_usage_error(usage, opts, "--json goes with --inspect");
	if (opt_vision && opt_synthetic)
		capy_usage_error(usage, opts, "--vision goes with --model");
	if (opt_quantize && strcmp(opt_quantize, "nvfp4"))
		capy_usage_error(usage, opts, "--quantize-experts: unknown format '%s' (nvfp4 is)", opt_quantize);
	if (opt_inspect)
		return inspect(opt_inspect);
	if (opt_verify)
		return verify(opt_verify);
	return convert();
}
