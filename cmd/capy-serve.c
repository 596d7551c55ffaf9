/* capy-serve - the OpenAI- and Anthropic-compatible HTTP server: a model on an engine, the
 * scheduler's batch and prefix cache, and the API endpoints (libcore/serve). */
#include "tool/tool.h"
#include "artifact/artifact.h"
#include "engine/engine.h"
#include "tp/tp.h"
#include "model/assets.h"
#include "offload/plan.h"
#include "sched/sched.h"
#include "serve/serve.h"
#include "spec/spec.h"
#include "util/file.h"
#include "util/log.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

static const char *const usage[] = {
	"capy-serve <model.capy> [--profile <name>] [<options>]",
	"capy-serve <model.capy> --plan [--profile <name>] [--gpu-mem <size>] [--expert-slots <n>] [--max-context <n>] [--max-concurrency <n>]",
	NULL,
};

/* Tested flag sets; --profile NAME puts its flags where it stands, so later flags win. */
static const struct profile {
	const char *name;
	const char *const args[16];
} profiles[] = {
	{ "agent", { "--max-context", "65536", "--max-concurrency", "4", "--cache-mib", "4096", "--prefill-chunk",
		     "256", "--snapshot-interval", "2048", "--spec", "auto", NULL } },
	{ "small", { "--max-context", "8192", "--max-concurrency", "2", "--cache-mib", "256", "--prefill-chunk", "128",
		     NULL } },
	{ "throughput", { "--max-context", "16384", "--max-concurrency", "16", "--cache-mib", "2048", "--prefill-chunk",
			  "512", NULL } },
	{ "test", { "--max-context", "4096", "--max-concurrency", "8", "--cache-mib", "64", "--prefill-chunk", "64",
		    "--snapshot-interval", "256", "--threads", "2", NULL } },
};

static const char *opt_host = "127.0.0.1", *opt_model_id, *opt_api_key, *opt_api_key_file, *opt_profile,
		  *opt_template, *opt_tokenizer, *opt_tokcfg, *opt_kv = "bf16", *opt_device = "cpu", *opt_backend_arg,
		  *opt_spec = "off", *opt_draft_shortlist, *opt_expert_threads;
static int64_t opt_port = 8080, opt_max_context = 32768, opt_concurrency = 8, opt_queue = 256, opt_chunk = 256,
	       opt_snapshot = 4096, opt_threads, opt_connections = 64, opt_max_messages, opt_max_tools,
	       opt_max_tokens, opt_gpu, opt_mask_threads = 2;
static int64_t opt_expert_slots = -1; /* -1: not given (the option takes 0 and up) */
static int64_t opt_tp;
static const char *opt_tp_payload;
static uint64_t opt_gpu_mem;
static double opt_host_cache_mib, opt_disk_cache_gib = 16, opt_kv_budget_mib;
static int64_t opt_lease_window = 512, opt_draft_tokens = 4, opt_ngram_min = 2;
static bool spec_asked; /* --spec on the command line itself, not only from a profile */
static const char *opt_disk_cache_dir;
static double opt_cache_mib = 1024, opt_request_timeout = 30, opt_idle_timeout = 75, opt_shutdown = 10;
static uint64_t opt_max_body = 32u << 20;
static bool opt_log_prompts, opt_plan;

static const struct capy_opt opts[] = {
	CAPY_OPT_GROUP("Listening"),
	CAPY_OPT_STRING(0, "host", &opt_host, "addr", "address to listen on (default 127.0.0.1)"),
	CAPY_OPT_INT(0, "port", &opt_port, "n", "port (default 8080; 0 picks a free one, printed)", 0, 65535),
	CAPY_OPT_STRING(0, "model-id", &opt_model_id, "id", "the model's name in the API (default: the file's name)"),
	CAPY_OPT_STRING(0, "api-key", &opt_api_key, "key", "require this key (Bearer or x-api-key); also CAPY_API_KEY"),
	CAPY_OPT_STRING(0, "api-key-file", &opt_api_key_file, "file", "require one of the keys in file (one per line)"),
	CAPY_OPT_GROUP("Capacity"),
	CAPY_OPT_STRING(0, "profile", &opt_profile, "name", "a tested set of the flags below (see Profiles)"),
	CAPY_OPT_INT(0, "max-context", &opt_max_context, "n", "prompt + answer tokens of a request (default 32768)", 16,
		     1 << 24),
	CAPY_OPT_INT(0, "max-concurrency", &opt_concurrency, "n", "requests in the batch at once (default 8)", 1, 256),
	CAPY_OPT_INT(0, "max-queue", &opt_queue, "n", "requests waiting beyond those; more get 503 (default 256)", 1,
		     1 << 20),
	CAPY_OPT_INT(0, "prefill-chunk", &opt_chunk, "n", "prompt tokens of one request per step (default 256)", 1,
		     1 << 16),
	CAPY_OPT_DOUBLE(0, "cache-mib", &opt_cache_mib, "mib", "prefix cache budget in MiB; 0 turns it off (default 1024)",
			0, 1 << 24),
	CAPY_OPT_DOUBLE(0, "host-cache-mib", &opt_host_cache_mib, "mib",
			"host-RAM tier of the context cache: what the prefix cache evicts moves there (default 0: off)", 0,
			1 << 24),
	CAPY_OPT_STRING(0, "disk-cache-dir", &opt_disk_cache_dir, "dir",
			"disk tier: what host RAM evicts is written there and found again after a restart"),
	CAPY_OPT_DOUBLE(0, "disk-cache-gib", &opt_disk_cache_gib, "gib", "the disk tier's size bound (default 16)", 0.001,
			1 << 20),
	CAPY_OPT_INT(0, "kv-lease-window", &opt_lease_window, "n",
		     "KV a request reserves beyond its prompt, grown by n as it answers (default 512; 0: max_tokens)", 0,
		     1 << 24),
	CAPY_OPT_DOUBLE(0, "kv-budget-mib", &opt_kv_budget_mib, "mib",
			"attention-cache pages the requests' leases and the prefix cache share (default 0: no bound)", 0,
			1 << 24),
	CAPY_OPT_INT(0, "snapshot-interval", &opt_snapshot, "n", "prefix-cache snapshot every n prompt tokens (default 4096)",
		     1, 1 << 24),
	CAPY_OPT_INT(0, "max-tokens", &opt_max_tokens, "n", "clamp a request's max_tokens to n (default: the context)", 0,
		     1 << 24),
	CAPY_OPT_GROUP("Limits"),
	CAPY_OPT_SIZE(0, "max-body", &opt_max_body, "size", "largest request body (default 32M)"),
	CAPY_OPT_INT(0, "max-connections", &opt_connections, "n", "open connections served (default 64)", 1, 65536),
	CAPY_OPT_INT(0, "max-messages", &opt_max_messages, "n", "messages per request (default 100000)", 1, 1e9),
	CAPY_OPT_INT(0, "max-tools", &opt_max_tools, "n", "tools per request (default 4096)", 1, 1e9),
	CAPY_OPT_DOUBLE(0, "request-timeout", &opt_request_timeout, "s", "a request must arrive within s seconds (30)",
			0.1, 86400),
	CAPY_OPT_DOUBLE(0, "idle-timeout", &opt_idle_timeout, "s", "close idle keep-alive connections after s (75)",
			0.1, 86400),
	CAPY_OPT_DOUBLE(0, "shutdown-timeout", &opt_shutdown, "s", "on SIGTERM, let answers finish for s (10)", 0, 86400),
	CAPY_OPT_GROUP("Model and engine"),
	CAPY_OPT_STRING(0, "chat-template", &opt_template, "file", "chat template (instead of the model's)"),
	CAPY_OPT_STRING(0, "tokenizer", &opt_tokenizer, "file", "tokenizer.json (instead of the model's)"),
	CAPY_OPT_STRING(0, "tokenizer-config", &opt_tokcfg, "file", "tokenizer_config.json (special tokens)"),
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
	CAPY_OPT_INT('t', "threads", &opt_threads, "n", "CPU threads (default: one per CPU)", 0, 1024),
	CAPY_OPT_STRING(0, "kv", &opt_kv, "bf16|f32|int8", "attention cache type (default bf16)"),
	CAPY_OPT_INT(0, "mask-threads", &opt_mask_threads, "n",
		     "threads computing constrained requests' token masks during the step (default 2; 0: after it)", 0, 64),
	CAPY_OPT_FLAG(0, "log-prompts", &opt_log_prompts, "put rendered prompts into the request log"),
	CAPY_OPT_GROUP("Speculative decoding"),
	CAPY_OPT_STRING(0, "spec", &opt_spec, "mtp|mtp+ngram|ngram|auto|off",
			"draft tokens (the model's MTP head, each conversation's own text), verify them in one step; "
			"auto: mtp+ngram where the model has an MTP head, else ngram (default off)"),
	CAPY_OPT_STRING(0, "draft-shortlist", &opt_draft_shortlist, "file",
			"mtp: the draft vocabulary (capy-shortlist; default all)"),
	CAPY_OPT_INT(0, "draft-tokens", &opt_draft_tokens, "k", "drafts per request and step at most (default 4)", 1, 64),
	CAPY_OPT_INT(0, "ngram-min", &opt_ngram_min, "n", "ngram: the shortest match that drafts (default 2)", 1, 1 << 20),
	CAPY_OPT_GROUP("Profiles (--profile NAME puts these flags where it stands; later flags override):\n"
		       "    agent                     --max-context 65536 --max-concurrency 4 --cache-mib 4096\n"
		       "                              --prefill-chunk 256 --snapshot-interval 2048 --spec auto\n"
		       "    small                     --max-context 8192 --max-concurrency 2 --cache-mib 256\n"
		       "                              --prefill-chunk 128\n"
		       "    throughput                --max-context 16384 --max-concurrency 16 --cache-mib 2048\n"
		       "                              --prefill-chunk 512\n"
		       "    test                      --max-context 4096 --max-concurrency 8 --cache-mib 64\n"
		       "                              --prefill-chunk 64 --snapshot-interval 256 --threads 2"),
	CAPY_OPT_END(),
};

/* The expanded argv, freed at exit (a usage error exits from deep inside the parsing). */
static char **expanded_argv;

static void free_expanded_argv(void)
{
	free(expanded_argv);
}

/* argv with every "--profile NAME" (or --profile=NAME) replaced by the profile's flags. */
static char **expand_profiles(int argc, char **argv, int *out_argc)
{
	char **out = calloc((size_t)argc * 16 + 1, sizeof(char *));
	int n = 0;

	if (!out)
		capy_die("out of memory");
	expanded_argv = out;
	atexit(free_expanded_argv);
	for (int i = 0; i < argc; i++) {
		const char *name = NULL;
		size_t p;
		if (!strcmp(argv[i], "--"))
			while (i < argc) /* the rest is positional */
				out[n++] = argv[i++];
		if (i >= argc)
			break;
		if (!strcmp(argv[i], "--spec") || !strncmp(argv[i], "--spec=", 7))
			spec_asked = true;
		if (!strcmp(argv[i], "--profile") && i + 1 < argc)
			name = argv[++i];
		else if (!strncmp(argv[i], "--profile=", 10))
			name = argv[i] + 10;
		if (!name) {
			out[n++] = argv[i];
			continue;
		}
		for (p = 0; p < ARRAY_SIZE(profiles) && strcmp(profiles[p].name, name); p++)
			;
		if (p == ARRAY_SIZE(profiles))
			capy_usage_error(usage, opts, "--profile: '%s' is not agent, small, throughput or test", name);
		for (const char *const *a = profiles[p].args; *a; a++)
			out[n++] = (char *)*a;
		opt_profile = profiles[p].name;
	}
	*out_argc = n;
	return out;
}

static enum capy_kv_dtype parse_kv(void)
{
	int kv = capy_kv_dtype_parse(opt_kv);

	if (kv < 0)
		capy_usage_error(usage, opts, "--kv: '%s' is not bf16, f32 or int8", opt_kv);
	return (enum capy_kv_dtype)kv;
}

/* The keys: --api-key, CAPY_API_KEY and the lines of --api-key-file (blank lines and lines
 * starting with # skipped). */
static size_t load_keys(const char ***keys)
{
	static const char *list[1024];
	size_t n = 0;
	const char *env = getenv("CAPY_API_KEY");

	if (opt_api_key && *opt_api_key)
		list[n++] = opt_api_key;
	if (env && *env)
		list[n++] = env;
	if (opt_api_key_file) {
		struct capy_err err = { 0 };
		char *text, *line, *save = NULL;
		size_t len;
		if (capy_read_file(opt_api_key_file, 1u << 20, &text, &len, &err) < 0)
			capy_die("%s", err.msg);
		for (line = strtok_r(text, "\r\n", &save); line && n < ARRAY_SIZE(list); line = strtok_r(NULL, "\r\n", &save))
			if (*line && *line != '#')
				list[n++] = line; /* text is kept for the life of the process */
		if (n == 0 || (n == (size_t)(!!(opt_api_key && *opt_api_key) + !!(env && *env))))
			capy_die("'%s': no API key in the file", opt_api_key_file);
	}
	*keys = list;
	return n;
}

static void log_request(void *arg, const char *line, size_t len)
{
	(void)arg;
	/* One line per request: a single write keeps lines of concurrent requests whole. */
	char *buf = malloc(len + 1);
	if (!buf)
		return;
	memcpy(buf, line, len);
	buf[len] = '\n';
	if (write(STDERR_FILENO, buf, len + 1) < 0) {
		/* nothing to do: stderr is gone */
	}
	free(buf);
}

/* A disk-cache entry that is not one of this model's (corrupt, truncated, foreign, another
 * version): the library removed it; say which and why. */
static void log_refused(void *ud, const char *path, const char *why)
{
	(void)ud;
	(void)path; /* why names it */
	capy_log_warn("context cache: refused and removed: %s", why);
}

static char *default_model_id(const char *path)
{
	const char *base = strrchr(path, '/');
	char *id = strdup(base ? base + 1 : path);
	size_t n;

	if (!id)
		capy_die("out of memory");
	n = strlen(id);
	if (n > 5 && !strcmp(id + n - 5, ".capy"))
		id[n - 5] = 0;
	return id;
}

int cmd_main(int argc, char **argv)
{
	struct capy_err err = { 0 };
	struct capy_artifact *a;
	struct capy_assets as;
	struct capy_engine *e;
	struct capy_sched *sched;
	struct capy_kvstore *kvs = NULL;
	struct capy_server *srv;
	struct capy_server_opts so = { 0 };
	struct capy_engine_opts eo = { 0 };
	struct capy_sched_opts sco = { 0 };
	bool spec, mtp_asked;
	unsigned sources;
	int32_t *draft_ids = NULL;
	uint64_t n_draft_ids = 0;
	char **args, *model_id, wbytes[32], cache[32], page[32], state[32];
	const char **keys;
	sigset_t sigs;
	int nargs, n, sig, rc = CAPY_EXIT_OK;

	args = expand_profiles(argc, argv, &nargs);
	n = capy_opt_parse(nargs, args, usage, opts);
	if (n != 1)
		capy_usage_error(usage, opts, n ? "unexpected argument '%s'" : "no model given", n ? args[1] : "");
	capy_expert_opts(usage, opts, opt_expert_slots, opt_expert_threads, &eo);
	capy_tp_opts(usage, opts, opt_tp, opt_tp_payload, &eo);
	if (strcmp(opt_spec, "mtp") && strcmp(opt_spec, "mtp+ngram") && strcmp(opt_spec, "ngram") &&
	    strcmp(opt_spec, "auto") && strcmp(opt_spec, "off"))
		capy_usage_error(usage, opts, "--spec: '%s' is not mtp, mtp+ngram, ngram, auto or off", opt_spec);
	spec = strcmp(opt_spec, "off") != 0;
	/* With drafts, a decoding request's item is a window of up to --draft-tokens + 1 tokens. */
	eo.step_tokens = (uint64_t)opt_chunk + (uint64_t)opt_concurrency * (spec ? (uint64_t)opt_draft_tokens + 1 : 1);
	eo.kept_states = spec ? (uint64_t)opt_draft_tokens : 0; /* one state a window row but the last */
	/* the MTP head where --spec takes it (auto: where the artifact has one, as the plan counts) */
	if (opt_plan)
		return capy_plan_print(args[0], &(struct capy_plan_opts){
			.gpu_mem = opt_gpu_mem, .max_context = (uint64_t)opt_max_context,
			.max_seqs = (uint64_t)opt_concurrency, .step_tokens = eo.step_tokens,
			.kv = parse_kv(), .expert_slots = eo.expert_slots,
			.mtp = !strncmp(opt_spec, "mtp", 3) || !strcmp(opt_spec, "auto"),
			.kept_states = eo.kept_states });
	/* MTP named on the command line must run; from auto (the agent profile's) it is dropped
	 * where the model or the backend has none, as drafts are where they cannot be verified. */
	mtp_asked = spec_asked && !strncmp(opt_spec, "mtp", 3);
	sources = !strcmp(opt_spec, "mtp") ? CAPY_SPEC_MTP
		  : !strcmp(opt_spec, "mtp+ngram") ? CAPY_SPEC_MTP | CAPY_SPEC_NGRAM : CAPY_SPEC_NGRAM;
	if (opt_draft_shortlist && strncmp(opt_spec, "mtp", 3) && strcmp(opt_spec, "auto"))
		capy_usage_error(usage, opts, "--draft-shortlist goes with --spec mtp, mtp+ngram or auto");
	capy_device_opts(usage, opts, opt_device, opt_gpu, opt_gpu_mem, &eo);
	so.n_api_keys = load_keys(&keys);
	so.api_keys = keys;

	/* Signals go to sigtimedwait below, in this thread only: block them before any thread
	 * starts, so every thread inherits the mask. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);

	if (capy_artifact_open(&a, args[0], &err) < 0 || capy_assets_from_artifact(&as, a, &err) < 0)
		capy_die("%s", err.msg);
	if (opt_template || opt_tokenizer || opt_tokcfg) {
		/* Files given on the command line replace the artifact's (a synthetic benchmark
		 * model has none). */
		struct capy_assets extra;
		if (capy_assets_from_files(&extra, opt_tokenizer, opt_template, opt_tokcfg, &err) < 0)
			capy_die("%s", err.msg);
		capy_assets_override(&as, &extra);
	}
	eo.threads = (int)opt_threads;
	eo.kv = parse_kv();
	eo.max_context = (uint64_t)opt_max_context;
	eo.max_seqs = (uint64_t)opt_concurrency;
	eo.backend_arg = opt_backend_arg; /* set only by test builds (t/helper/capy-serve-scripted.c) */
	/* auto: the head's tensors say whether there is one (capy-convert keeps mtp.*). */
	if (spec && !strcmp(opt_spec, "auto") && capy_artifact_find(a, "mtp.fc.weight"))
		sources |= CAPY_SPEC_MTP;
	if (mtp_asked && !capy_artifact_find(a, "mtp.fc.weight"))
		capy_die("--spec %s: '%s' has no MTP head (no mtp.* tensors)", opt_spec, args[0]);
	eo.mtp = spec && (sources & CAPY_SPEC_MTP);
	rc = capy_engine_new(&e, a, &eo, &err);
	if (rc < 0 && eo.mtp && !mtp_asked) {
		fprintf(stderr, "%s: MTP drafts off: %s\n", capy_tool_name, err.msg);
		eo.mtp = false;
		sources &= ~CAPY_SPEC_MTP;
		err = (struct capy_err){ 0 };
		rc = capy_engine_new(&e, a, &eo, &err);
	}
	if (rc < 0)
		capy_die("%s", err.msg);
	rc = CAPY_EXIT_OK;
	/* A backend that cannot keep states cannot verify drafts: asked for, that is an error;
	 * from a profile, the server runs without them and says so. */
	if (spec && !capy_engine_keeps_states(e)) {
		if (spec_asked)
			capy_die("--spec %s: the %s backend cannot verify drafts yet (use --device cpu, or --spec off)",
				 opt_spec, capy_engine_device(e));
		fprintf(stderr, "%s: speculative decoding off: the %s backend cannot verify drafts yet\n", capy_tool_name,
			capy_engine_device(e));
		spec = false;
	}
	/* A GPU takes the attention cache of every request at full context up front, so a
	 * configuration that cannot fit is refused now, with the numbers, not mid-answer. */
	if (strcmp(opt_device, "cpu") &&
	    capy_engine_reserve(e, (uint64_t)opt_concurrency * (uint64_t)opt_max_context, (uint64_t)opt_concurrency, &err) < 0)
		capy_die("--max-context %" PRId64 " x --max-concurrency %" PRId64 ": %s", opt_max_context, opt_concurrency,
			 err.msg);
	sco.max_concurrency = (int)opt_concurrency;
	sco.max_queue = (uint64_t)opt_queue;
	sco.max_context = (uint64_t)opt_max_context;
	sco.prefill_chunk = (uint64_t)opt_chunk;
	sco.cache_bytes = (uint64_t)(opt_cache_mib * 1048576.0);
	sco.snapshot_interval = (uint64_t)opt_snapshot;
	sco.mask_threads = opt_mask_threads ? (int)opt_mask_threads : -1;
	sco.kv_lease_window = (uint64_t)opt_lease_window;
	sco.spec_draft_tokens = spec ? (uint64_t)opt_draft_tokens : 0;
	sco.spec_ngram_min = (uint64_t)opt_ngram_min;
	sco.spec_sources = sources;
	if (spec && (sources & CAPY_SPEC_MTP) && opt_draft_shortlist) {
		if (capy_shortlist_read(opt_draft_shortlist, capy_engine_config(e)->vocab_size, &draft_ids, &n_draft_ids,
					&err) < 0)
			capy_die("--draft-shortlist: %s", err.msg);
		sco.spec_draft_ids = draft_ids;
		sco.spec_n_draft_ids = n_draft_ids;
	}
	sco.kv_pages = (uint64_t)(opt_kv_budget_mib * 1048576.0) / capy_engine_page_bytes(e);
	if (opt_kv_budget_mib > 0 && !sco.kv_pages)
		capy_usage_error(usage, opts, "--kv-budget-mib %g is less than one attention-cache page", opt_kv_budget_mib);
	if (opt_host_cache_mib > 0 || opt_disk_cache_dir) {
		if (!sco.cache_bytes)
			capy_usage_error(usage, opts, "--host-cache-mib and --disk-cache-dir need the prefix cache (--cache-mib > 0)");
		if (capy_kvstore_open(&kvs, e, &(struct capy_kvstore_opts){
			.host_bytes = (uint64_t)(opt_host_cache_mib * 1048576.0), .disk_dir = opt_disk_cache_dir,
			.disk_bytes = (uint64_t)(opt_disk_cache_gib * 1073741824.0), .refused = log_refused }, &err) < 0)
			capy_die("context cache: %s", err.msg);
		sco.kvstore = kvs;
	}
	if (capy_sched_new(&sched, e, &sco, &err) < 0)
		capy_die("%s", err.msg);
	free(draft_ids); /* the scheduler keeps its copy */
	model_id = opt_model_id ? strdup(opt_model_id) : default_model_id(args[0]);
	so.model_id = model_id;
	so.host = opt_host;
	so.port = (int)opt_port;
	so.max_body = opt_max_body;
	so.max_connections = (unsigned)opt_connections;
	so.request_timeout_ms = (unsigned)(opt_request_timeout * 1000);
	so.idle_timeout_ms = (unsigned)(opt_idle_timeout * 1000);
	so.max_messages = (size_t)opt_max_messages;
	so.max_tools = (size_t)opt_max_tools;
	so.max_tokens = (uint64_t)opt_max_tokens;
	so.log_prompts = opt_log_prompts;
	so.log = log_request;
	if (capy_server_start(&srv, &so, e, sched, &as, &err) < 0)
		capy_die("%s", err.msg);

	capy_human_bytes(wbytes, sizeof(wbytes), (double)capy_engine_weight_bytes(e));
	capy_human_bytes(cache, sizeof(cache), (double)sco.cache_bytes);
	capy_human_bytes(page, sizeof(page), (double)capy_engine_page_bytes(e));
	capy_human_bytes(state, sizeof(state), (double)capy_engine_state_bytes(e));
	fprintf(stderr,
		"%s: serving '%s' (%s, %s read per token) on http://%s%s%s:%d on %s with %d threads%s%s\n"
		"%s: context %" PRId64 " tokens, %" PRId64 " requests at once (%" PRId64 " more queued), prompt pieces of "
		"%" PRId64 ", prefix cache %s (snapshots of %s each, every %" PRId64 " tokens), KV pages of %" PRIu64
		" tokens (%s), %s\n",
		capy_tool_name, model_id, capy_family_name(capy_engine_config(e)->family), wbytes,
		strchr(opt_host, ':') ? "[" : "", opt_host, strchr(opt_host, ':') ? "]" : "", capy_server_port(srv),
		capy_engine_device(e), capy_engine_threads(e), opt_profile ? ", profile " : "",
		opt_profile ? opt_profile : "", capy_tool_name, opt_max_context, opt_concurrency, opt_queue, opt_chunk,
		sco.cache_bytes ? cache : "off", state, opt_snapshot, capy_engine_page_tokens(e), page,
		so.n_api_keys ? "API key required" : "no API key");
	if (spec) {
		char how[160] = "", vocab[48] = "";
		if (n_draft_ids)
			snprintf(vocab, sizeof(vocab), " over %" PRIu64 " draft ids", n_draft_ids);
		if (sources == CAPY_SPEC_NGRAM)
			snprintf(how, sizeof(how), "matches of %" PRId64 " tokens or more", opt_ngram_min);
		else if (sources == CAPY_SPEC_MTP)
			snprintf(how, sizeof(how), "the model's head%s", vocab);
		else
			snprintf(how, sizeof(how), "n-gram where a match of %" PRId64 " tokens or more fills the window, else "
				 "the model's head%s", opt_ngram_min, vocab);
		fprintf(stderr, "%s: speculative decoding: %s drafts of up to %" PRId64 " tokens per request and step (%s; "
			"not for constrained or logprobs requests)\n", capy_tool_name,
			sources == CAPY_SPEC_NGRAM ? "n-gram" : sources == CAPY_SPEC_MTP ? "MTP" : "MTP and n-gram",
			opt_draft_tokens, how);
	}
	if (kvs) {
		struct capy_kvstore_stats ks;
		char host[32], disk[32];
		capy_kvstore_stats(kvs, &ks);
		capy_human_bytes(host, sizeof(host), opt_host_cache_mib * 1048576.0);
		capy_human_bytes(disk, sizeof(disk), opt_disk_cache_gib * 1073741824.0);
		fprintf(stderr, "%s: context cache tiers: host RAM %s, disk %s%s%s (%" PRIu64 " entries, %" PRIu64
			" bytes found there)\n", capy_tool_name, opt_host_cache_mib > 0 ? host : "off",
			opt_disk_cache_dir ? opt_disk_cache_dir : "off", opt_disk_cache_dir ? " up to " : "",
			opt_disk_cache_dir ? disk : "", ks.disk_entries, ks.disk_bytes);
	}
	if (strcmp(opt_device, "cpu") || opt_tp > 1) {
		char d[512];
		capy_engine_describe(e, d, sizeof(d));
		fprintf(stderr, "%s: %s\n", capy_tool_name, d);
		capy_plan_log(e);
	}
	fflush(stderr);

	for (;;) {
		struct timespec tick = { 0, 200 * 1000000L };
		sig = sigtimedwait(&sigs, NULL, &tick);
		if (sig > 0) {
			capy_log_info("signal %d: stopping (answers in flight get %.0f s)", sig, opt_shutdown);
			break;
		}
		if (capy_server_failed(srv)) {
			/* 2, not 1: a supervisor (systemd Restart=on-failure) should start us again. */
			capy_error("the engine failed; stopping (exit 2)");
			rc = 2;
			break;
		}
	}
	/* New connections are refused at once; answers in flight get --shutdown-timeout to finish,
	 * then end with the API's error event; then the connections close. */
	capy_server_quiesce(srv);
	capy_sched_stop(sched, opt_shutdown);
	capy_server_stop(srv, 2);
	capy_sched_free(sched, 0);
	capy_kvstore_close(kvs); /* after the scheduler, which demotes into it */
	capy_engine_free(e);
	capy_assets_release(&as);
	capy_artifact_close(a);
	free(model_id);
	return rc;
}
