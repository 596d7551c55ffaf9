/* capy-ppl - perplexity of a model over a text (or token ids), in sliding windows. */
#include "tool/tool.h"
#include "artifact/artifact.h"
#include "engine/engine.h"
#include "tp/tp.h"
#include "model/assets.h"
#include "offload/plan.h"
#include "ppl/ppl.h"
#include "util/file.h"
#include "util/parse.h"

#include <ctype.h>
#include <math.h>
#include <unistd.h>

static const char *const usage[] = {
	"capy-ppl <model.capy> <file> [--ids] [--ctx <n>] [--stride <n>] [--json [--per-token]] [--argmax-counts <out>]",
	"capy-ppl <model.capy> --plan [--gpu-mem <size>] [--expert-slots <n>] [--ctx <n>] [--kv <type>]",
	NULL,
};

static bool opt_ids, opt_json, opt_per_token, opt_quiet, opt_plan;
static int64_t opt_ctx = 2048, opt_stride, opt_threads, opt_gpu;
static int64_t opt_expert_slots = -1; /* -1: not given (the option takes 0 and up) */
static int64_t opt_tp;
static const char *opt_tp_payload;
static uint64_t opt_gpu_mem;
static const char *opt_argmax, *opt_kv = "bf16", *opt_device = "cpu", *opt_expert_threads;

static const struct capy_opt opts[] = {
	CAPY_OPT_FLAG(0, "ids", &opt_ids, "the file holds whitespace-separated token ids, not text"),
	CAPY_OPT_INT(0, "ctx", &opt_ctx, "n", "tokens per window (default 2048)", 2, 1 << 24),
	CAPY_OPT_INT(0, "stride", &opt_stride, "n", "step between windows (default: --ctx)", 1, 1 << 24),
	CAPY_OPT_FLAG(0, "json", &opt_json, "print JSON: ppl, tokens, per-window NLL"),
	CAPY_OPT_FLAG(0, "per-token", &opt_per_token, "with --json: the NLL of every scored token too"),
	CAPY_OPT_STRING(0, "argmax-counts", &opt_argmax, "out",
			"write how often each token id was the argmax (input of capy-shortlist)"),
	CAPY_OPT_INT('t', "threads", &opt_threads, "n", "CPU threads (default: one per CPU)", 0, 1024),
	CAPY_OPT_STRING(0, "device", &opt_device, "cpu|cuda", "where to run (default cpu)"),
	CAPY_OPT_INT(0, "gpu", &opt_gpu, "n", "cuda: the GPU to run on (default 0)", 0, 1024),
	CAPY_OPT_SIZE(0, "gpu-mem", &opt_gpu_mem, "size", "cuda: device memory the engine may take (default: what it needs)"),
	CAPY_OPT_INT(0, "expert-slots", &opt_expert_slots, "n",
		     "cuda: expert slots on the GPU at most (default: what --gpu-mem holds; 0: none)", 0, 1e9),
	CAPY_OPT_STRING(0, "expert-cpu-threads", &opt_expert_threads, "n",
			"cuda: CPU threads for the experts not on the GPU (default auto)"),
	CAPY_OPT_FLAG(0, "plan", &opt_plan, "print the memory plan for a GPU of --gpu-mem and exit (no GPU needed)"),
	CAPY_OPT_INT(0, "tp", &opt_tp, "n",
		     "tensor parallelism over n ranks (cpu: simulated in one process, for tests; docs/tp.md)", 1,
		     CAPY_TP_MAX_RANKS),
	CAPY_OPT_STRING(0, "tp-payload", &opt_tp_payload, "fp32|fp16-shift|bf16",
			"--tp's all-reduce payload (default fp32; docs/tp.md)"),
	CAPY_OPT_STRING(0, "kv", &opt_kv, "bf16|f32|int8", "KV cache type (default bf16)"),
	CAPY_OPT_FLAG('q', "quiet", &opt_quiet, "no progress or timing on stderr"),
	CAPY_OPT_END(),
};

struct argcount {
	int32_t id;
	uint64_t n;
};

static int cmp_count(const void *a, const void *b)
{
	const struct argcount *x = a, *y = b;
	if (x->n != y->n)
		return x->n > y->n ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

static void write_counts(const char *path, const char *model, const uint64_t *counts, uint64_t V, uint64_t scored)
{
	struct argcount *c = malloc(V * sizeof(*c));
	struct capy_outfile of;
	struct capy_err err = { 0 };
	uint64_t n = 0;
	FILE *f;

	if (!c)
		capy_die("out of memory");
	for (uint64_t i = 0; i < V; i++)
		if (counts[i])
			c[n++] = (struct argcount){ (int32_t)i, counts[i] };
	qsort(c, n, sizeof(*c), cmp_count);
	if (capy_outfile_open(&of, path, &err) < 0)
		capy_die("%s", err.msg);
	f = fdopen(dup(of.fd), "w");
	if (!f)
		capy_die("cannot write '%s': %s", path, strerror(errno));
	fprintf(f, "# capy-ppl argmax counts: model %s, %" PRIu64 " scored tokens, %" PRIu64 " distinct ids\n",
		model, scored, n);
	fprintf(f, "# id count (most frequent first; ties by id)\n");
	for (uint64_t i = 0; i < n; i++)
		fprintf(f, "%" PRId32 " %" PRIu64 "\n", c[i].id, c[i].n);
	if (fclose(f) != 0)
		capy_die("cannot write '%s': %s", path, strerror(errno));
	if (capy_outfile_commit(&of, &err) < 0)
		capy_die("%s", err.msg);
	free(c);
}

static void show_progress(void *ud, uint64_t end, uint64_t n, double nll_sum, uint64_t scored)
{
	fprintf(stderr, "\r%s: %" PRIu64 "/%" PRIu64 " tokens, ppl so far %.4f", capy_tool_name, end, n,
		exp(nll_sum / (double)scored));
}

int cmd_main(int argc, char **argv)
{
	struct capy_artifact *a;
	struct capy_assets as;
	struct capy_engine *e;
	struct capy_engine_opts eo = { 0 };
	struct capy_tokens toks = { 0 };
	struct capy_err err = { 0 };
	enum capy_kv_dtype kv;
	int kv_type;
	struct capy_ppl_opts po = { 0 };
	struct capy_ppl_result r;
	uint64_t V, N, scored, *counts = NULL;
	double t0;
	double *tok_nll;
	char *text;
	size_t len;
	int n = capy_opt_parse(argc, argv, usage, opts);

	capy_expert_opts(usage, opts, opt_expert_slots, opt_expert_threads, &eo);
	capy_tp_opts(usage, opts, opt_tp, opt_tp_payload, &eo);
	if (opt_plan && n == 1) {
		if ((kv_type = capy_kv_dtype_parse(opt_kv)) < 0)
			capy_usage_error(usage, opts, "--kv: '%s' is not bf16, f32 or int8", opt_kv);
		/* One sequence of --ctx tokens at a time, in steps of the engine's default size. */
		return capy_plan_print(argv[0], &(struct capy_plan_opts){ .gpu_mem = opt_gpu_mem,
				       .max_context = (uint64_t)opt_ctx, .max_seqs = 1, .kv = (enum capy_kv_dtype)kv_type,
				       .expert_slots = eo.expert_slots });
	}
	if (n != 2)
		capy_usage_error(usage, opts, n < 2 ? "a model and a file are needed" : "unexpected argument '%s'", argv[2]);
	if (opt_per_token && !opt_json)
		capy_usage_error(usage, opts, "--per-token goes with --json");
	if (!opt_stride)
		opt_stride = opt_ctx;
	if (opt_stride > opt_ctx)
		capy_usage_error(usage, opts, "--stride %" PRId64 " is larger than --ctx %" PRId64, opt_stride, opt_ctx);
	if ((kv_type = capy_kv_dtype_parse(opt_kv)) < 0)
		capy_usage_error(usage, opts, "--kv: '%s' is not bf16, f32 or int8", opt_kv);
	kv = (enum capy_kv_dtype)kv_type;

	if (capy_artifact_open(&a, argv[0], &err) < 0 || capy_assets_from_artifact(&as, a, &err) < 0)
		capy_die("%s", err.msg);
	if (capy_read_file(argv[1], 1u << 30, &text, &len, &err) < 0)
		capy_die("%s", err.msg);
	if (opt_ids) {
		char what[4200];
		snprintf(what, sizeof(what), "'%s'", argv[1]);
		if (capy_tokens_parse(text, len, what, &toks, &err) < 0)
			capy_die("%s", err.msg);
	} else {
		if (!as.tok)
			capy_die("'%s' has no tokenizer.json (use --ids)", argv[0]);
		if (capy_tokenizer_encode(as.tok, text, len, 0, &toks, &err) < 0)
			capy_die("'%s': %s", argv[1], err.msg);
	}
	free(text);
	N = toks.n;
	if (N < 2)
		capy_die("'%s' holds %" PRIu64 " tokens; at least 2 are needed", argv[1], N);
	eo.threads = (int)opt_threads;
	eo.kv = kv;
	eo.max_context = (uint64_t)opt_ctx;
	eo.max_seqs = 1;
	capy_device_opts(usage, opts, opt_device, opt_gpu, opt_gpu_mem, &eo);
	if (capy_engine_new(&e, a, &eo, &err) < 0)
		capy_die("%s", err.msg);
	/* A GPU takes the plan's attention cache up front (and says so at start). */
	if (strcmp(opt_device, "cpu")) {
		if (capy_engine_reserve(e, (uint64_t)opt_ctx, 1, &err) < 0)
			capy_die("--ctx %" PRId64 ": %s", opt_ctx, err.msg);
		if (!opt_quiet)
			capy_plan_log(e);
	}
	V = capy_engine_config(e)->vocab_size;
	tok_nll = calloc(N, sizeof(double));
	if (opt_argmax)
		counts = calloc(V, sizeof(*counts));
	if (!tok_nll || (opt_argmax && !counts))
		capy_die("out of memory");

	t0 = capy_now();
	po.ctx = (uint64_t)opt_ctx;
	po.stride = (uint64_t)opt_stride;
	po.tok_nll = tok_nll;
	po.argmax_counts = counts;
	po.progress = opt_quiet || opt_json ? NULL : show_progress;
	if (capy_ppl_run(e, toks.ids, N, &po, &r, &err) < 0)
		capy_die("%s", err.msg);
	scored = r.scored;
	if (po.progress)
		fputc('\n', stderr);
	if (opt_json) {
		char buf[256];
		printf("{\"model\": \"%s\", \"windows\": [", argv[0]);
		for (size_t w = 0; w < r.n_windows; w++) {
			capy_ppl_format_window(buf, sizeof(buf), &r.windows[w]);
			printf("%s%s", w ? ", " : "", buf);
		}
		printf("], \"tokens\": %" PRIu64 ", \"scored\": %" PRIu64 ", \"nll\": %.9g, \"ppl\": %.9g", N, scored,
		       r.nll_sum / (double)scored, exp(r.nll_sum / (double)scored));
		if (opt_per_token) {
			printf(", \"token_nll\": [");
			for (uint64_t t = 1; t < N; t++)
				printf(t > 1 ? ", %.9g" : "%.9g", tok_nll[t]);
			printf("]");
		}
		printf("}\n");
	} else {
		char line[256];
		capy_ppl_format_summary(line, sizeof(line), &r, (uint64_t)opt_ctx, (uint64_t)opt_stride);
		printf("%s\n", line);
	}
	if (!opt_quiet) {
		fprintf(stderr, "%s: %" PRIu64 " tokens in %.2f s (%.1f tok/s), %d threads\n", capy_tool_name, N,
			capy_now() - t0, (double)N / (capy_now() - t0), capy_engine_threads(e));
		capy_offload_log(e, N, "token");
	}
	if (counts)
		write_counts(opt_argmax, argv[0], counts, V, scored);
	free(counts);
	free(tok_nll);
	capy_ppl_result_release(&r);
	capy_engine_free(e);
	capy_tokens_release(&toks);
	capy_assets_release(&as);
	capy_artifact_close(a);
	return CAPY_EXIT_OK;
}
