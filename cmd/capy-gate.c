/* capy-gate - the regression gate: a model's greedy ids, perplexity table and served answers
 * against a recorded reference (libcore/gate; docs/gate.md). */
#include "tool/tool.h"
#include "artifact/artifact.h"
#include "cpu/linear.h"
#include "engine/engine.h"
#include "gate/gate.h"
#include "model/assets.h"
#include "util/file.h"

#include <dirent.h>
#include <unistd.h>

static const char *const usage[] = {
	"capy-gate --model <model.capy> --ref <dir> [--record] [--stages <list>] [--paired] [<options>]",
	NULL,
};

static const char *opt_model, *opt_ref, *opt_stages = "golden,ppl,greedy,timing", *opt_device = "cpu", *opt_ppl_text,
		  *opt_summary = "gate-summary.txt", *opt_bin_dir;
static bool opt_record, opt_paired, opt_quiet;
static int64_t opt_threads, opt_gpu;
static double opt_tolerance = 50;

static const struct capy_opt opts[] = {
	CAPY_OPT_STRING('m', "model", &opt_model, "model.capy", "the model to gate"),
	CAPY_OPT_STRING(0, "ref", &opt_ref, "dir", "the reference directory"),
	CAPY_OPT_FLAG(0, "record", &opt_record, "write the reference from this model instead of comparing"),
	CAPY_OPT_STRING(0, "stages", &opt_stages, "list", "comma-separated: golden,ppl,greedy,timing (default: all)"),
	CAPY_OPT_FLAG(0, "paired", &opt_paired, "ppl: a paired test per window instead of equal digits"),
	CAPY_OPT_STRING(0, "ppl-text", &opt_ppl_text, "file", "with --record: the text of the ppl stage"),
	CAPY_OPT_STRING(0, "summary", &opt_summary, "file", "where the summary goes (default gate-summary.txt)"),
	CAPY_OPT_DOUBLE(0, "timing-tolerance", &opt_tolerance, "pct", "timing: WARN when slower by more (default 50)",
			0, 1e6),
	CAPY_OPT_STRING(0, "bin-dir", &opt_bin_dir, "dir", "where capy-serve is (default: beside capy-gate)"),
	CAPY_OPT_STRING(0, "device", &opt_device, "cpu|cuda", "where to run (default cpu)"),
	CAPY_OPT_INT(0, "gpu", &opt_gpu, "n", "cuda: the GPU to run on (default 0)", 0, 1024),
	CAPY_OPT_INT('t', "threads", &opt_threads, "n", "CPU threads (default: one per CPU)", 0, 1024),
	CAPY_OPT_FLAG('q', "quiet", &opt_quiet, "no progress on stderr"),
	CAPY_OPT_END(),
};

enum stage { GOLDEN, PPL, GREEDY, TIMING, N_STAGES };

static const char *const stage_names[N_STAGES] = { "golden", "ppl", "greedy", "timing" };
static int (*const stage_fns[N_STAGES])(struct capy_gate *, struct capy_gate_report *, struct capy_err *) = {
	capy_gate_golden, capy_gate_ppl, capy_gate_greedy, capy_gate_timing,
};

/* --stages: which stages run (they run in the order above whatever the list's order). */
static void parse_stages(const char *list, bool *on)
{
	const char *p = list;

	if (!*p)
		capy_usage_error(usage, opts, "--stages: the list is empty");
	while (*p) {
		size_t len = strcspn(p, ",");
		int s;
		for (s = 0; s < N_STAGES && (strlen(stage_names[s]) != len || strncmp(p, stage_names[s], len)); s++)
			;
		if (s == N_STAGES)
			capy_usage_error(usage, opts, "--stages: '%.*s' is not golden, ppl, greedy or timing",
					 (int)len, p);
		on[s] = true;
		p += len;
		if (*p == ',')
			p++;
	}
}

/* The directory of this program (for capy-serve beside it). */
static char *own_dir(void)
{
	char buf[4096];
	ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
	char *slash;

	if (n <= 0)
		capy_die("cannot find where capy-gate is (/proc/self/exe): %s; give --bin-dir", strerror(errno));
	buf[n] = 0;
	slash = strrchr(buf, '/');
	if (slash)
		*slash = 0;
	return strdup(buf);
}

/* The gate's temporary directory (the server's log) and its removal. */
static char tmp_dir[4096];

static void remove_tmp_dir(void)
{
	DIR *d;
	struct dirent *de;

	if (!*tmp_dir)
		return;
	if ((d = opendir(tmp_dir))) {
		while ((de = readdir(d)))
			if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
				char *p = capy_path_join(tmp_dir, de->d_name);
				if (p)
					unlink(p);
				free(p);
			}
		closedir(d);
	}
	rmdir(tmp_dir);
}

/* The CPU kernels the reference was recorded with (each ISA sums in its own order, so the
 * digits are those of one ISA), here and in the capy-serve the greedy stage starts (CAPY_ISA,
 * inherited), unless CAPY_ISA already says which. */
static void use_reference_isa(const char *name)
{
	const char *env = getenv("CAPY_ISA");
	int isa;

	if (!*name || (env && *env))
		return;
	for (isa = 0; isa < CAPY_ISA_COUNT && strcmp(name, capy_isa_name((enum capy_isa)isa)); isa++)
		;
	if (isa == CAPY_ISA_COUNT) {
		capy_error("'%s/model.json': field 'cpu_isa': '%s' is not scalar, avx2, avx512 or avx512-vnni",
			   opt_ref, name);
		exit(CAPY_EXIT_USAGE);
	}
	if (capy_isa_set((enum capy_isa)isa) < 0) {
		if (!opt_paired) {
			capy_error("the reference was recorded with the %s kernels, which this CPU lacks "
				   "(its best: %s); record it here, or compare with --paired",
				   name, capy_isa_name(capy_isa_best()));
			exit(CAPY_EXIT_USAGE);
		}
		capy_warning("the reference was recorded with the %s kernels, which this CPU lacks: using %s", name,
			     capy_isa_name(capy_isa_best()));
		return;
	}
	if (setenv("CAPY_ISA", name, 1) < 0)
		capy_die("setenv: %s", strerror(errno));
}

static void write_summary(const char *path, const char *text, size_t len)
{
	struct capy_outfile of;
	struct capy_err err = { 0 };

	if (capy_outfile_open(&of, path, &err) < 0 || capy_pwrite_full(of.fd, text, len, 0, path, &err) < 0 ||
	    capy_outfile_commit(&of, &err) < 0) {
		capy_outfile_abort(&of);
		capy_die("%s", err.msg);
	}
}

int cmd_main(int argc, char **argv)
{
	struct capy_artifact *a;
	struct capy_assets as;
	struct capy_engine *e = NULL;
	struct capy_engine_opts eo = { 0 };
	struct capy_gate g = { 0 };
	struct capy_gate_identity id;
	struct capy_err err = { 0 };
	bool on[N_STAGES] = { 0 };
	int n = capy_opt_parse(argc, argv, usage, opts), fails = 0, warns = 0, ran = 0;
	char *bin_dir, *serve_bin, *summary = NULL, *default_text = NULL;
	size_t slen = 0;
	FILE *sf;
	const char *tmp;

	if (n)
		capy_usage_error(usage, opts, "unexpected argument '%s'", argv[0]);
	if (!opt_model || !opt_ref)
		capy_usage_error(usage, opts, "--model and --ref are needed");
	parse_stages(opt_stages, on);
	if (opt_ppl_text && !opt_record)
		capy_usage_error(usage, opts, "--ppl-text goes with --record (the reference holds its text)");
	if (opt_paired && opt_record)
		capy_usage_error(usage, opts, "--paired compares; it does not go with --record");
	if (opt_record && on[PPL] && !opt_ppl_text) {
		/* re-recording: the text the reference already holds */
		default_text = capy_path_join(opt_ref, "ppl-text.txt");
		if (!default_text || access(default_text, R_OK) < 0)
			capy_usage_error(usage, opts, "--record of the ppl stage needs --ppl-text (no '%s' to reuse)",
					 default_text ? default_text : "ppl-text.txt");
		opt_ppl_text = default_text;
	}
	capy_device_opts(usage, opts, opt_device, opt_gpu, 0, &eo);
	bin_dir = opt_bin_dir ? strdup(opt_bin_dir) : own_dir();
	serve_bin = bin_dir ? capy_path_join(bin_dir, "capy-serve") : NULL;
	if (!serve_bin)
		capy_die("out of memory");
	if (on[GREEDY] && access(serve_bin, X_OK) < 0)
		capy_die("cannot run '%s': %s (--bin-dir names its directory)", serve_bin, strerror(errno));

	if (capy_artifact_open(&a, opt_model, &err) < 0 || capy_assets_from_artifact(&as, a, &err) < 0)
		capy_die("%s", err.msg);
	tmp = getenv("TMPDIR");
	snprintf(tmp_dir, sizeof(tmp_dir), "%s/capy-gate.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(tmp_dir))
		capy_die("cannot create a directory in '%s': %s", tmp && *tmp ? tmp : "/tmp", strerror(errno));
	atexit(remove_tmp_dir);

	g = (struct capy_gate){
		.model_path = opt_model, .a = a, .as = &as, .ref_dir = opt_ref, .record = opt_record,
		.paired = opt_paired, .ppl_text = opt_ppl_text, .serve_bin = serve_bin, .device = opt_device,
		.gpu = (int)opt_gpu, .threads = (int)opt_threads, .tmp_dir = tmp_dir,
		.timing_tolerance = opt_tolerance / 100,
	};
	if (capy_gate_identity(a, &id, &err) < 0)
		capy_die("%s", err.msg);
	if (capy_gate_model(&g, &err) < 0) {
		capy_error("%s", err.msg);
		exit(g.bad_ref ? CAPY_EXIT_USAGE : CAPY_EXIT_FAIL);
	}
	if (!opt_record && !strcmp(opt_device, "cpu"))
		use_reference_isa(g.ref_isa);
	if (on[GOLDEN] || on[PPL]) {
		eo.threads = (int)opt_threads;
		if (capy_engine_new(&e, a, &eo, &err) < 0)
			capy_die("%s", err.msg);
		/* a GPU takes its attention cache up front: room for the longest prompt and its ids */
		if (strcmp(opt_device, "cpu") && capy_engine_reserve(e, 4096, 1, &err) < 0)
			capy_die("%s", err.msg);
		g.e = e;
	}
	sf = open_memstream(&summary, &slen);
	if (!sf)
		capy_die("out of memory");
	fprintf(sf, "capy-gate %s\nmodel: %s (%s, weights xxh3 %s)\nreference: %s%s\n"
		"engine: %s (%s kernels), %d threads\n",
		opt_record ? "record" : "summary", opt_model, id.family, id.weights_xxh3, opt_ref,
		opt_paired ? " (ppl: paired test)" : "", opt_device, capy_isa_name(capy_isa_get()),
		e ? capy_engine_threads(e) : (int)opt_threads);
	for (int s = 0; s < N_STAGES; s++) {
		struct capy_gate_report r = { 0 };
		if (!on[s])
			continue;
		if (!opt_quiet)
			fprintf(stderr, "%s: %s %s...\n", capy_tool_name, opt_record ? "recording" : "checking",
				stage_names[s]);
		if (stage_fns[s](&g, &r, &err) < 0) {
			capy_error("%s: %s", stage_names[s], err.msg);
			exit(g.bad_ref ? CAPY_EXIT_USAGE : CAPY_EXIT_FAIL);
		}
		ran++;
		fails += r.verdict == CAPY_GATE_FAIL;
		warns += r.verdict == CAPY_GATE_WARN;
		printf("%s %s %s\n", stage_names[s], capy_gate_verdict_name(r.verdict), r.line);
		fflush(stdout);
		fprintf(sf, "%s %s %s\n", stage_names[s], capy_gate_verdict_name(r.verdict), r.line);
	}
	fprintf(sf, "result: %s (%d stages, %d failed, %d warned)\n",
		opt_record ? "RECORDED" : fails ? "FAIL" : "PASS", ran, fails, warns);
	if (fclose(sf) != 0)
		capy_die("out of memory");
	write_summary(opt_summary, summary, slen);
	if (!opt_quiet)
		fprintf(stderr, "%s: %s: %d stages, %d failed, %d warned; summary in '%s'\n", capy_tool_name,
			opt_record ? "recorded" : fails ? "FAIL" : "PASS", ran, fails, warns, opt_summary);
	free(summary);
	capy_engine_free(e);
	capy_assets_release(&as);
	capy_artifact_close(a);
	free(serve_bin);
	free(bin_dir);
	free(default_text);
	return fails ? CAPY_EXIT_FAIL : CAPY_EXIT_OK;
}
