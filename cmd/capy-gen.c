/* capy-gen - one-shot generation, and the text utilities: tokenize, detokenize, render. */
#include "tool/tool.h"
#include "artifact/artifact.h"
#include "constrain/grammar.h"
#include "constrain/json-schema.h"
#include "constrain/mask.h"
#include "constrain/mask-ahead.h"
#include "engine/engine.h"
#include "tp/tp.h"
#include "model/assets.h"
#include "offload/plan.h"
#include "sample/sample.h"
#include "spec/spec.h"
#include "util/file.h"
#include "util/json.h"
#include "util/parse.h"

#include <ctype.h>
#include <math.h>
#include <unistd.h>

static const char *const usage[] = {
	"capy-gen <model.capy> (-p <text> | --prompt-ids <ids> | --messages <file>) [--chat] [-n <n>] [--ids] [<options>]",
	"capy-gen --tokenize (<model.capy> | <tokenizer.json>) < <text>",
	"capy-gen --detokenize (<model.capy> | <tokenizer.json>) < <ids>",
	"capy-gen --render (<model.capy> | --template <file>) [-p <text>] [--system <text>] [--messages <file>] [--no-think]",
	"capy-gen <model.capy> --plan [--gpu-mem <size>] [--expert-slots <n>] [--max-context <n>] [--kv <type>] [-p <text> | --prompt-ids <ids>]",
	NULL,
};

static const char *opt_prompt, *opt_prompt_ids, *opt_system, *opt_messages, *opt_template, *opt_tokcfg, *opt_tokenizer,
	*opt_device = "cpu", *opt_kv = "bf16", *opt_stop, *opt_grammar, *opt_schema, *opt_regex, *opt_spec = "off",
	*opt_draft_shortlist, *opt_expert_threads;
static const char *opt_backend_arg; /* set only by test builds (t/helper/capy-gen-scripted.c) */
static bool opt_chat, opt_no_think, opt_ids, opt_tokenize, opt_detokenize, opt_render, opt_quiet, opt_raw,
	opt_ignore_eos, opt_plan;
static int64_t opt_draft_tokens = 4, opt_ngram_min = 2;
static int64_t opt_n = 128, opt_top_k = -1, opt_threads, opt_seed = -1, opt_gpu, opt_max_context, opt_mask_threads = 1;
static int64_t opt_expert_slots = -1; /* -1: not given (the option takes 0 and up) */
static int64_t opt_tp;
static const char *opt_tp_payload;
static uint64_t opt_gpu_mem;
static double opt_temp = NAN, opt_top_p = NAN, opt_min_p = NAN, opt_rep = NAN, opt_presence, opt_frequency;

static const struct capy_opt opts[] = {
	CAPY_OPT_GROUP("Generate"),
	CAPY_OPT_STRING('p', "prompt", &opt_prompt, "text", "prompt text (with --chat: the user message)"),
	CAPY_OPT_STRING(0, "prompt-ids", &opt_prompt_ids, "ids", "prompt as token ids, e.g. \"1 2 3\""),
	CAPY_OPT_INT('n', "n-predict", &opt_n, "n", "tokens to generate at most (default 128)", 0, 1e9),
	CAPY_OPT_FLAG(0, "chat", &opt_chat, "render the prompt with the model's chat template"),
	CAPY_OPT_STRING(0, "system", &opt_system, "text", "with --chat: a system message"),
	CAPY_OPT_STRING(0, "messages", &opt_messages, "file", "with --chat/--render: messages (JSON list or request body)"),
	CAPY_OPT_FLAG(0, "no-think", &opt_no_think, "with --chat/--render: enable_thinking=false"),
	CAPY_OPT_FLAG(0, "ids", &opt_ids, "print the generated token ids instead of text"),
	CAPY_OPT_FLAG(0, "raw", &opt_raw, "print special tokens in the output text"),
	CAPY_OPT_STRING(0, "stop", &opt_stop, "text", "stop when the output contains text"),
	CAPY_OPT_FLAG(0, "ignore-eos", &opt_ignore_eos, "do not stop at end-of-sequence tokens"),
	CAPY_OPT_STRING(0, "grammar", &opt_grammar, "file", "generate only text of this GBNF grammar"),
	CAPY_OPT_STRING(0, "json-schema", &opt_schema, "file", "generate only JSON valid against this JSON Schema"),
	CAPY_OPT_STRING(0, "regex", &opt_regex, "pattern", "generate only text this regular expression matches whole"),
	CAPY_OPT_INT(0, "mask-threads", &opt_mask_threads, "n",
		     "threads computing the next token mask during the step (default 1; 0: after it)", 0, 64),
	CAPY_OPT_GROUP("Speculative decoding"),
	CAPY_OPT_STRING(0, "spec", &opt_spec, "mtp|ngram|mtp+ngram|off", "draft tokens and verify them in one step (default off)"),
	CAPY_OPT_STRING(0, "draft-shortlist", &opt_draft_shortlist, "file", "mtp: the draft vocabulary (capy-shortlist; default all)"),
	CAPY_OPT_INT(0, "draft-tokens", &opt_draft_tokens, "k", "drafts per window at most (default 4)", 1, 64),
	CAPY_OPT_INT(0, "ngram-min", &opt_ngram_min, "n", "ngram: the shortest match that drafts (default 2)", 1, 1 << 20),
	CAPY_OPT_GROUP("Sampling (defaults: the model's generation_config.json; greedy without one)"),
	CAPY_OPT_DOUBLE(0, "temp", &opt_temp, "t", "temperature; 0 is greedy", 0, 100),
	CAPY_OPT_INT(0, "top-k", &opt_top_k, "k", "keep the k most likely tokens (0: off)", 0, 1e9),
	CAPY_OPT_DOUBLE(0, "top-p", &opt_top_p, "p", "keep the most likely tokens up to probability p", 0, 1),
	CAPY_OPT_DOUBLE(0, "min-p", &opt_min_p, "p", "drop tokens below p times the best one's probability", 0, 1),
	CAPY_OPT_DOUBLE(0, "repeat-penalty", &opt_rep, "r", "repetition penalty (1: off)", 0, 100),
	CAPY_OPT_DOUBLE(0, "presence-penalty", &opt_presence, "p", "presence penalty", -100, 100),
	CAPY_OPT_DOUBLE(0, "frequency-penalty", &opt_frequency, "f", "frequency penalty", -100, 100),
	CAPY_OPT_INT(0, "seed", &opt_seed, "n", "random seed (default: from the clock, printed)", 0, 9007199254740991.0),
	CAPY_OPT_GROUP("Engine"),
	CAPY_OPT_STRING(0, "device", &opt_device, "cpu|cuda", "where to run (default cpu)"),
	CAPY_OPT_INT(0, "gpu", &opt_gpu, "n", "cuda: the GPU to run on (default 0)", 0, 1024),
	CAPY_OPT_SIZE(0, "gpu-mem", &opt_gpu_mem, "size", "cuda: device memory the engine may take (default: what it needs)"),
	CAPY_OPT_INT(0, "max-context", &opt_max_context, "n", "cuda: context the memory plan holds (default: prompt + -n)", 1,
		     1 << 24),
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
	CAPY_OPT_STRING(0, "kv", &opt_kv, "bf16|f32|int8", "KV cache type (default bf16)"),
	CAPY_OPT_GROUP("Text utilities"),
	CAPY_OPT_FLAG(0, "tokenize", &opt_tokenize, "read text on stdin, print its ids"),
	CAPY_OPT_FLAG(0, "detokenize", &opt_detokenize, "read ids on stdin, print their text"),
	CAPY_OPT_FLAG(0, "render", &opt_render, "print the rendered chat prompt and stop"),
	CAPY_OPT_STRING(0, "template", &opt_template, "file", "chat template file (instead of the model's)"),
	CAPY_OPT_STRING(0, "tokenizer", &opt_tokenizer, "file", "tokenizer.json (instead of the model's)"),
	CAPY_OPT_STRING(0, "tokenizer-config", &opt_tokcfg, "file", "tokenizer_config.json for special tokens"),
	CAPY_OPT_FLAG('q', "quiet", &opt_quiet, "no statistics on stderr"),
	CAPY_OPT_END(),
};

static char *read_stdin(size_t *len)
{
	size_t cap = 1 << 16, n = 0;
	char *buf = malloc(cap);

	for (;;) {
		ssize_t r;
		if (!buf)
			capy_die("out of memory reading standard input");
		if (n + 1 >= cap) {
			char *p = realloc(buf, cap *= 2);
			if (!p)
				free(buf);
			buf = p;
			continue;
		}
		r = read(STDIN_FILENO, buf + n, cap - n - 1);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			capy_die("cannot read standard input: %s", strerror(errno));
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	buf[n] = 0;
	*len = n;
	return buf;
}

/* Whitespace-separated ids; what names the source in errors. */
static void parse_ids(const char *text, const char *what, struct capy_tokens *out)
{
	struct capy_err err = { 0 };

	if (capy_tokens_parse(text, strlen(text), what, out, &err) < 0)
		capy_die("%s", err.msg);
}

static bool is_artifact(const char *path)
{
	uint8_t magic[8];
	FILE *f = fopen(path, "rb");
	bool yes = f && fread(magic, 1, 8, f) == 8 && !memcmp(magic, capy_artifact_magic, 8);

	if (f)
		fclose(f);
	return yes;
}

/* The tokenizer etc. of MODEL (an artifact, or a bare tokenizer.json), plus --template. */
static void load_assets(const char *model, struct capy_artifact **a, struct capy_assets *as)
{
	struct capy_err err = { 0 };

	*a = NULL;
	if (model && is_artifact(model)) {
		if (capy_artifact_open(a, model, &err) < 0 || capy_assets_from_artifact(as, *a, &err) < 0)
			capy_die("%s", err.msg);
		if (opt_template || opt_tokcfg || opt_tokenizer) {
			struct capy_assets extra;
			if (capy_assets_from_files(&extra, opt_tokenizer, opt_template, opt_tokcfg, &err) < 0)
				capy_die("%s", err.msg);
			capy_assets_override(as, &extra);
		}
		return;
	}
	if (model && access(model, R_OK) < 0)
		capy_die("cannot open '%s': %s", model, strerror(errno));
	if (capy_assets_from_files(as, model, opt_template, opt_tokcfg, &err) < 0)
		capy_die("%s", err.msg);
}

static int tokenize(const char *model)
{
	struct capy_artifact *a;
	struct capy_assets as;
	struct capy_tokens ids = { 0 };
	struct capy_err err = { 0 };
	size_t len;
	char *text;

	load_assets(model, &a, &as);
	if (!as.tok)
		capy_die("'%s' has no tokenizer.json", model);
	text = read_stdin(&len);
	if (capy_tokenizer_encode(as.tok, text, len, CAPY_TOK_PARSE_ADDED, &ids, &err) < 0)
		capy_die("standard input: %s", err.msg);
	for (size_t i = 0; i < ids.n; i++)
		printf(i ? " %" PRId32 : "%" PRId32, ids.ids[i]);
	printf("\n");
	free(text);
	capy_tokens_release(&ids);
	capy_assets_release(&as);
	capy_artifact_close(a);
	return CAPY_EXIT_OK;
}

static int detokenize(const char *model)
{
	struct capy_artifact *a;
	struct capy_assets as;
	struct capy_tokens ids = { 0 };
	struct capy_err err = { 0 };
	size_t len;
	char *text, *out;

	load_assets(model, &a, &as);
	if (!as.tok)
		capy_die("'%s' has no tokenizer.json", model);
	text = read_stdin(&len);
	parse_ids(text, "standard input", &ids);
	if (capy_tokenizer_decode(as.tok, ids.ids, ids.n, 0, &out, &len, &err) < 0)
		capy_die("%s", err.msg);
	fwrite(out, 1, len, stdout);
	free(out);
	free(text);
	capy_tokens_release(&ids);
	capy_assets_release(&as);
	capy_artifact_close(a);
	return CAPY_EXIT_OK;
}

static struct capy_tval *checked(struct capy_tval *v)
{
	if (!v)
		capy_die("out of memory");
	return v;
}

static struct capy_tval *message(struct capy_tdoc *doc, const char *role, const char *content)
{
	struct capy_tval *m = checked(capy_tval_dict(doc));

	if (capy_tval_set(doc, m, "role", checked(capy_tval_str(doc, role, strlen(role)))) < 0 ||
	    capy_tval_set(doc, m, "content", checked(capy_tval_str(doc, content, strlen(content)))) < 0)
		capy_die("out of memory");
	return m;
}

/* Render the chat prompt: the messages (and tools) of --messages — a list, or a request body
 * with "messages" and "tools", read with the template's own JSON reader so numbers keep
 * their spelling — or one user message from -p with an optional --system. */
static char *render(const struct capy_assets *as, const char *model, size_t *len)
{
	struct capy_chat_opts co = { as->tokenizer_config, as->tokenizer_config_len, false, NULL };
	struct capy_err err = { 0 };
	struct capy_tdoc *doc = capy_tdoc_new();
	struct capy_tval *messages, *tools = NULL, *kwargs = NULL, *special = NULL, *root;
	char *out, *text;
	size_t n;

	if (!doc)
		capy_die("out of memory");
	if (!as->tmpl)
		capy_die("'%s' has no chat template (give one with --template)", model ? model : "?");
	if (opt_messages) {
		if (opt_prompt || opt_system)
			capy_die("--messages does not go with -p or --system");
		if (capy_read_file(opt_messages, 64u << 20, &text, &n, &err) < 0 ||
		    capy_tdoc_parse_json(doc, text, n, opt_messages, &root, &err) < 0)
			capy_die("%s", err.msg);
		free(text);
		messages = capy_tval_get(root, "messages");
		tools = capy_tval_get(root, "tools");
		if (!messages)
			messages = root;
	} else {
		messages = checked(capy_tval_list(doc));
		if (opt_system && capy_tval_push(doc, messages, message(doc, "system", opt_system)) < 0)
			capy_die("out of memory");
		if (capy_tval_push(doc, messages, message(doc, "user", opt_prompt ? opt_prompt : "")) < 0)
			capy_die("out of memory");
	}
	if (opt_no_think) {
		kwargs = checked(capy_tval_dict(doc));
		if (capy_tval_set(doc, kwargs, "enable_thinking", checked(capy_tval_bool(doc, false))) < 0)
			capy_die("out of memory");
	}
	if (as->tokenizer_config) {
		struct capy_tval *cfg;
		if (capy_tdoc_parse_json(doc, as->tokenizer_config, as->tokenizer_config_len, "tokenizer_config.json",
					 &cfg, &err) < 0 ||
		    capy_chat_special_tokens(doc, cfg, &special, &err) < 0)
			capy_die("%s", err.msg);
	}
	if (capy_chat_render_values(as->tmpl, doc, messages, tools, kwargs, special, true, &co, &out, len, &err) < 0)
		capy_die("%s", err.msg);
	capy_tdoc_free(doc);
	return out;
}

static int render_only(const char *model)
{
	struct capy_artifact *a;
	struct capy_assets as;
	size_t len;
	char *out;

	load_assets(model, &a, &as);
	out = render(&as, model, &len);
	fwrite(out, 1, len, stdout);
	free(out);
	capy_assets_release(&as);
	capy_artifact_close(a);
	return CAPY_EXIT_OK;
}

static enum capy_kv_dtype parse_kv(void)
{
	int kv = capy_kv_dtype_parse(opt_kv);

	if (kv < 0)
		capy_usage_error(usage, opts, "--kv: '%s' is not bf16, f32 or int8", opt_kv);
	return (enum capy_kv_dtype)kv;
}

/* Structured output: a grammar (from --grammar; any compiler's struct capy_grammar fits), the
 * masker over the model's vocabulary, the state of what was generated, the job computing the
 * mask of that state while the engine computes the logits it will mask, and each token's
 * mask times (compute, waited), in microseconds. */
struct constraint {
	struct capy_grammar *g;
	struct capy_token_trie *trie;
	struct capy_mask *mask;
	struct capy_grammar_state *state;
	struct capy_mask_pool *pool;
	struct capy_mask_ahead *ahead;
	double *compute_us, *wait_us;
	size_t n, cap;
};

static struct capy_grammar *load_grammar(const char *path)
{
	struct capy_grammar *g;
	struct capy_err err = { 0 };
	size_t len;
	char *text;

	if (capy_read_file(path, 64u << 20, &text, &len, &err) < 0 ||
	    capy_grammar_compile_named(text, len, "root", path, &g, &err) < 0)
		capy_die("%s", err.msg);
	free(text);
	return g;
}

/* A JSON Schema as a grammar, relaxed as a client that did not ask for strict gets it: keywords
 * that only narrow what is valid and cannot be enforced are dropped (docs/structured-output.md). */
static struct capy_grammar *load_schema(const char *path)
{
	struct capy_grammar *g;
	struct capy_err err = { 0 };
	size_t len;
	char *text;

	if (capy_read_file(path, 64u << 20, &text, &len, &err) < 0)
		capy_die("%s", err.msg);
	if (capy_json_schema_compile(text, len, NULL, &g, &err) < 0)
		capy_die("%s: %s", path, err.msg);
	free(text);
	return g;
}

/* A regular expression as a grammar of the texts it matches whole. */
static struct capy_grammar *load_regex(const char *re)
{
	struct capy_grammar *g;
	struct capy_err err = { 0 };
	char *text;

	if (capy_regex_to_gbnf(re, strlen(re), &text, &err) < 0)
		capy_die("%s", err.msg); /* "regex: <what> at offset N" */
	if (capy_grammar_compile(text, strlen(text), "root", &g, &err) < 0)
		capy_die("--regex: the grammar it made: %s", err.msg);
	free(text);
	return g;
}

/* The constraint's name in messages. */
static const char *constraint_name(void)
{
	return opt_grammar ? opt_grammar : opt_schema ? opt_schema : "--regex";
}

/* End-of-sequence tokens are the grammar's stop tokens (allowed where it is complete), unless
 * --ignore-eos: then only the grammar's end or -n stops generation. */
static void constraint_init(struct constraint *c, struct capy_grammar *g, const struct capy_assets *as, uint32_t vocab)
{
	struct capy_err err = { 0 };

	c->g = g;
	if (!as->tok)
		capy_die("a grammar needs the model's tokenizer, and this model has none");
	if (capy_token_trie_from_tokenizer(&c->trie, as->tok, vocab, as->eos, opt_ignore_eos ? 0 : (size_t)as->n_eos,
					   NULL, 0, &err) < 0 ||
	    capy_mask_new(&c->mask, c->trie, g, NULL, &err) < 0 || capy_grammar_state_new(g, &c->state, &err) < 0 ||
	    capy_mask_pool_new(&c->pool, (int)opt_mask_threads, &err) < 0 ||
	    capy_mask_ahead_new(&c->ahead, c->pool, c->mask, vocab, &err) < 0)
		capy_die("%s", err.msg);
	capy_mask_ahead_start(c->ahead, c->state); /* the first mask, while the prompt is read */
}

static void constraint_release(struct constraint *c)
{
	capy_mask_ahead_free(c->ahead); /* first: it may be computing from the state */
	capy_mask_pool_free(c->pool);
	free(c->compute_us);
	free(c->wait_us);
	capy_grammar_state_free(c->state);
	capy_mask_free(c->mask);
	capy_token_trie_free(c->trie);
	capy_grammar_free(c->g);
}

/* The mask of the grammar's state, waited for (it was started when the state was reached):
 * what a step item's mask gives the engine, which asks for it once the step is under way. */
static const uint32_t *constraint_mask(void *ud)
{
	struct constraint *c = ud;
	struct capy_err err = { 0 };
	struct capy_mask_timing t;
	const uint32_t *bits;

	if (capy_mask_ahead_wait(c->ahead, &bits, &t, &err) < 0)
		capy_die("%s: %s", constraint_name(), err.msg);
	if (c->n == c->cap) {
		c->cap = c->cap ? 2 * c->cap : 256;
		if (!(c->compute_us = realloc(c->compute_us, c->cap * sizeof(double))) ||
		    !(c->wait_us = realloc(c->wait_us, c->cap * sizeof(double))))
			capy_die("out of memory");
	}
	c->compute_us[c->n] = t.compute_s * 1e6;
	c->wait_us[c->n++] = t.wait_s * 1e6;
	return bits;
}

/* A token of a constrained generation: none (-1) is a dead end. */
static int32_t constrained(int32_t id)
{
	if (id < 0)
		capy_die("%s: no token can continue", constraint_name());
	return id;
}

/* The next token from logits here: drawn among those the grammar allows, when there is one. */
static int32_t next_token(struct capy_sampler *smp, float *logits, struct constraint *c)
{
	if (!c->g)
		return capy_sampler_next(smp, logits);
	return constrained(capy_sampler_next_masked(smp, logits, constraint_mask(c)));
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* "median M us, p99 P, max X" of n values (sorted here). */
static void quantiles(char *out, size_t cap, double *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	snprintf(out, cap, "median %.1f us, p99 %.1f, max %.1f", v[n / 2], v[n * 99 / 100], v[n - 1]);
}

/* What the masks cost per token, and how much of it generation waited for. */
static void mask_stats(struct constraint *c)
{
	char comp[96], wait[96];
	double total = 0;

	if (!c->n)
		return;
	for (size_t i = 0; i < c->n; i++)
		total += c->wait_us[i];
	quantiles(comp, sizeof(comp), c->compute_us, c->n);
	quantiles(wait, sizeof(wait), c->wait_us, c->n);
	fprintf(stderr, "%s: token masks: %zu, computed in %s; waited for %s (%.1f us in all); %d mask thread%s\n",
		capy_tool_name, c->n, comp, wait, total, (int)opt_mask_threads, opt_mask_threads == 1 ? "" : "s");
}

/* Speculative decoding's state in generate() beside the drafter: the window's logits rows
 * and drafts, and what the windows did. */
struct spec_run {
	struct capy_spec_stats st;
	uint64_t plain_steps;         /* steps of one token (no draft) */
	float *rows;                  /* [draft_tokens + 1][vocab] */
	int32_t *drafts;              /* [draft_tokens] */
	struct capy_ngram *ngram;     /* --spec ngram (or mtp+ngram) */
	struct capy_mtp *mtp;         /* --spec mtp (or mtp+ngram) */
};

/* Where a step of the tokens at [len, len + n) puts their hidden states: the MTP drafter's
 * rows (NULL without MTP). */
static float *mtp_rows(struct spec_run *sr, uint64_t len, uint64_t n, struct capy_err *err)
{
	float *h;

	if (!sr->mtp)
		return NULL;
	if (!(h = capy_mtp_hidden_at(sr->mtp, len, n, err)))
		capy_die("%s", err->msg);
	return h;
}

/* Up to kmax drafts (kmax >= 1) into sr->drafts; how many, and in *q the distributions they
 * were drawn from (NULL: deterministic drafts). With both drafters, the n-gram draft when it
 * fills all kmax (its match is then at least --ngram-min long), else MTP's. */
static uint64_t draft(struct spec_run *sr, int32_t next, uint64_t kmax, const float **q, struct capy_err *err)
{
	uint64_t k = 0;

	*q = NULL;
	if (sr->ngram)
		k = capy_ngram_draft(sr->ngram, kmax, sr->drafts, NULL);
	if (k && (k == kmax || !sr->mtp)) {
		sr->st.ngram_windows++;
		return k;
	}
	if (!sr->mtp)
		return 0;
	if (capy_mtp_draft(sr->mtp, next, kmax, sr->drafts, &sr->st.draft_seconds, err) < 0)
		capy_die("%s", err->msg);
	sr->st.mtp_windows++;
	*q = capy_mtp_q(sr->mtp);
	return kmax;
}

/* The next tokens into queue[0..*qn) once those before are printed: the prompt's logits'
 * answer (a grammar's first token), or a step on the last printed token queue[*qn - 1]:
 * a window when the drafter has drafts (at most left - 1, so no more than left tokens come
 * back), else one token. */
static int refill(struct capy_engine *e, struct capy_seq *s, struct capy_sampler *smp, struct constraint *con,
		  float *logits, int32_t *queue, size_t *qn, uint64_t left, struct spec_run *sr, struct capy_err *err)
{
	int32_t feed = *qn ? queue[*qn - 1] : -1;
	uint64_t k = 0, m;
	const float *q = NULL;
	int rc;

	if (feed < 0) { /* a grammar's first token: the prompt's logits are here */
		queue[0] = next_token(smp, logits, con);
		*qn = 1;
		return 0;
	}
	if ((sr->ngram || sr->mtp) && left > 1)
		k = draft(sr, feed, CAPY_MIN((uint64_t)opt_draft_tokens, left - 1), &q, err);
	if (k) {
		float *hid = mtp_rows(sr, capy_seq_len(s), k + 1, err);
		if ((rc = capy_spec_window_hidden(e, s, smp, feed, sr->drafts, k, q, sr->rows, hid, queue, &m, &sr->st,
						  err)) < 0)
			return rc;
		*qn = m;
		return 0;
	}
	/* The step samples the next token itself (on the GPU, next to the logits), with the
	 * grammar's mask where there is one: the engine asks for it once the step is under way. */
	struct capy_step_item it = { .seq = s, .tokens = &feed, .n = 1, .sampler = smp, .token = &queue[0],
				     .hidden = mtp_rows(sr, capy_seq_len(s), 1, err) };
	if (con->g)
		it.mask = constraint_mask, it.mask_ud = con;
	if ((rc = capy_engine_step(e, &it, 1, err)) < 0)
		return rc;
	if (con->g)
		constrained(queue[0]);
	*qn = 1;
	sr->plain_steps++;
	return 0;
}

/* The windows' statistics (stderr). */
static void spec_stats(const struct spec_run *sr)
{
	const struct capy_spec_stats *st = &sr->st;
	double w = st->windows ? (double)st->windows : 1;

	fprintf(stderr, "%s: spec %s: %" PRIu64 " windows of up to %d drafts, %" PRIu64 " drafted, %" PRIu64
		" accepted (%.1f%%), %.2f tokens per window, %.2f ms per window (cut back %.3f ms); %" PRIu64
		" one-token steps\n",
		capy_tool_name, opt_spec, st->windows, (int)opt_draft_tokens, st->drafted, st->accepted,
		st->drafted ? 100.0 * (double)st->accepted / (double)st->drafted : 0.0, (double)st->tokens / w,
		1e3 * st->seconds / w, 1e3 * st->cut_seconds / w, sr->plain_steps);
	if (sr->mtp)
		fprintf(stderr, "%s: spec %s: %" PRIu64 " windows drafted by MTP, %" PRIu64 " by n-gram; MTP drafting %.2f ms "
			"per MTP window\n", capy_tool_name, opt_spec, st->mtp_windows, st->ngram_windows,
			1e3 * st->draft_seconds / (double)(st->mtp_windows ? st->mtp_windows : 1));
}

static double pick(double opt, double model_default, double fallback)
{
	if (!isnan(opt))
		return opt;
	return isnan(model_default) ? fallback : model_default;
}

static int generate(const char *model)
{
	struct capy_artifact *a;
	struct capy_assets as;
	struct capy_engine *e;
	struct capy_engine_opts eo = { 0 };
	struct capy_seq *s;
	struct capy_sampler *smp;
	struct capy_tokens prompt = { 0 };
	struct capy_err err = { 0 };
	struct capy_detok *dt = NULL;
	struct capy_sampler_params sp;
	struct constraint con = { 0 };
	char *stop_buf = NULL;
	size_t stop_len = 0, stop_cap = 0;
	float *logits;
	double t0, t1, t2;
	uint64_t produced = 0;
	const char *why = "length";
	struct spec_run spec_run = { 0 }, *sr = &spec_run;
	bool use_mtp = !strncmp(opt_spec, "mtp", 3), use_ngram = !!strstr(opt_spec, "ngram"), spec = use_mtp || use_ngram;
	int32_t *queue;
	size_t qn = 0, qi = 0;

	load_assets(model, &a, &as);
	if (!a)
		capy_die("'%s' is not a capy artifact", model);
	if (opt_prompt_ids) {
		parse_ids(opt_prompt_ids, "--prompt-ids", &prompt);
	} else {
		size_t len;
		char *text = opt_chat ? render(&as, model, &len) : strdup(opt_prompt);
		if (!as.tok)
			capy_die("'%s' has no tokenizer.json", model);
		if (!opt_chat)
			len = strlen(text);
		if (capy_tokenizer_encode(as.tok, text, len, CAPY_TOK_PARSE_ADDED, &prompt, &err) < 0)
			capy_die("prompt: %s", err.msg);
		free(text);
	}
	if (!prompt.n)
		capy_die("the prompt is empty");
	eo.threads = (int)opt_threads;
	eo.kv = parse_kv();
	eo.max_context = opt_max_context ? (uint64_t)opt_max_context : prompt.n + (uint64_t)opt_n;
	eo.max_seqs = 1;
	capy_expert_opts(usage, opts, opt_expert_slots, opt_expert_threads, &eo);
	capy_tp_opts(usage, opts, opt_tp, opt_tp_payload, &eo);
	eo.kept_states = spec ? (uint64_t)opt_draft_tokens : 0;
	if (opt_plan) {
		int rc = capy_plan_print(model, &(struct capy_plan_opts){ .gpu_mem = opt_gpu_mem,
					 .max_context = eo.max_context, .max_seqs = 1, .kv = eo.kv,
					 .expert_slots = eo.expert_slots, .mtp = use_mtp,
					 .kept_states = eo.kept_states });
		capy_tokens_release(&prompt);
		capy_assets_release(&as);
		capy_artifact_close(a);
		return rc;
	}
	capy_device_opts(usage, opts, opt_device, opt_gpu, opt_gpu_mem, &eo);
	eo.mtp = use_mtp;
	eo.backend_arg = opt_backend_arg;
	if (capy_engine_new(&e, a, &eo, &err) < 0 ||
	    capy_seq_new(e, &s, &err) < 0)
		capy_die("%s", err.msg);
	/* A GPU takes the plan's attention cache up front (and says so at start). */
	if (strcmp(opt_device, "cpu")) {
		if (capy_engine_reserve(e, eo.max_context, 1, &err) < 0)
			capy_die("--max-context %" PRIu64 ": %s", eo.max_context, err.msg);
		if (!opt_quiet)
			capy_plan_log(e);
	}
	sp = (struct capy_sampler_params){
		.temperature = (float)pick(opt_temp, as.temperature, 0),
		.top_k = opt_top_k >= 0 ? (int)opt_top_k : as.top_k >= 0 ? (int)as.top_k : 0,
		.top_p = (float)pick(opt_top_p, as.top_p, 1),
		.min_p = (float)pick(opt_min_p, as.min_p, 0),
		.repetition_penalty = (float)pick(opt_rep, as.repetition_penalty, 1),
		.presence_penalty = (float)opt_presence,
		.frequency_penalty = (float)opt_frequency,
		.seed = opt_seed >= 0 ? (uint64_t)opt_seed : (uint64_t)(capy_now() * 1e9),
	};
	if (capy_sampler_new(&smp, capy_engine_config(e)->vocab_size, &sp, &err) < 0)
		capy_die("%s", err.msg);
	capy_sampler_prompt(smp, prompt.ids, prompt.n);
	if (!opt_ids && as.tok && !(dt = capy_detok_new(as.tok, opt_raw ? 0 : CAPY_TOK_SKIP_SPECIAL)))
		capy_die("out of memory");
	logits = malloc(capy_engine_config(e)->vocab_size * sizeof(float));
	queue = malloc(((size_t)opt_draft_tokens + 1) * sizeof(*queue));
	if (!logits || !queue)
		capy_die("out of memory");
	if (spec) {
		if (!capy_engine_keeps_states(e))
			capy_die("--spec: the %s backend cannot verify drafts yet (use --device cpu)", capy_engine_device(e));
		if ((uint64_t)opt_draft_tokens + 1 > capy_engine_step_tokens(e))
			capy_die("--draft-tokens %" PRId64 ": a window must fit a step of %" PRIu64 " tokens", opt_draft_tokens,
				 capy_engine_step_tokens(e));
		sr->rows = malloc(((size_t)opt_draft_tokens + 1) * capy_engine_config(e)->vocab_size * sizeof(float));
		sr->drafts = malloc((size_t)opt_draft_tokens * sizeof(int32_t));
		if (!sr->rows || !sr->drafts || (use_ngram && capy_ngram_new(&sr->ngram, (uint64_t)opt_ngram_min, &err) < 0))
			capy_die("%s", err.code ? err.msg : "out of memory");
	}
	if (use_mtp) {
		int32_t *ids = NULL;
		uint64_t n_ids = 0;
		if (opt_draft_shortlist &&
		    capy_shortlist_read(opt_draft_shortlist, capy_engine_config(e)->vocab_size, &ids, &n_ids, &err) < 0)
			capy_die("--draft-shortlist: %s", err.msg);
		if (capy_mtp_new(&sr->mtp, e, s, ids, n_ids, &err) < 0)
			capy_die("%s", err.msg);
		/* Sampling: drafts drawn from the head's distribution at the same temperature (the
		 * acceptance rule takes it as q); greedy: its argmax. */
		if (sp.temperature > 0 && sp.top_k != 1 &&
		    capy_mtp_sample(sr->mtp, sp.temperature, sp.seed ^ 0x6d74702d64726166ull, (uint64_t)opt_draft_tokens, &err) < 0)
			capy_die("%s", err.msg);
		free(ids);
	}
	if (!!opt_grammar + !!opt_schema + !!opt_regex > 1)
		capy_die("--grammar, --json-schema and --regex: one constraint at a time");
	if (opt_grammar || opt_schema || opt_regex)
		constraint_init(&con, opt_grammar ? load_grammar(opt_grammar) : opt_schema ? load_schema(opt_schema)
										      : load_regex(opt_regex),
				&as, (uint32_t)capy_engine_config(e)->vocab_size);

	if (sr->ngram && capy_ngram_add(sr->ngram, prompt.ids, prompt.n, &err) < 0)
		capy_die("%s", err.msg);
	t0 = capy_now();
	if (capy_engine_forward_hidden(e, s, prompt.ids, prompt.n, logits, false, mtp_rows(sr, 0, prompt.n, &err), &err) < 0)
		capy_die("%s", err.msg);
	t1 = capy_now();
	/* queue[qi..qn): tokens the model gave that are not printed yet (a window gives
	 * several); the last of them is the next to run. */
	if (!con.g)
		queue[qn++] = capy_sampler_next(smp, logits);
	while (produced < (uint64_t)opt_n) {
		if (con.g && capy_grammar_finished(con.state)) {
			why = "grammar";
			break;
		}
		if (qi == qn) {
			if (refill(e, s, smp, &con, logits, queue, &qn, (uint64_t)opt_n - produced, sr, &err) < 0)
				capy_die("%s", err.msg);
			qi = 0;
		}
		int32_t id = queue[qi++];
		produced++;
		if (sr->ngram && capy_ngram_add(sr->ngram, &id, 1, &err) < 0)
			capy_die("%s", err.msg);
		if (!opt_ignore_eos && capy_assets_is_eos(&as, id)) {
			why = "eos";
			break;
		}
		if (con.g && capy_mask_advance(con.trie, con.state, id, &err) < 0)
			capy_die("%s: %s", constraint_name(), err.msg);
		if (con.g && produced < (uint64_t)opt_n && !capy_grammar_finished(con.state))
			capy_mask_ahead_start(con.ahead, con.state); /* during the step below */
		if (opt_ids) {
			printf(produced > 1 ? " %" PRId32 : "%" PRId32, id);
		} else if (dt) {
			const char *piece;
			size_t n;
			if (capy_detok_feed(dt, id, &piece, &n) < 0)
				capy_die("out of memory");
			fwrite(piece, 1, n, stdout);
			if (opt_stop && n) {
				if (stop_len + n + 1 > stop_cap) {
					stop_cap = 2 * (stop_len + n + 1);
					stop_buf = realloc(stop_buf, stop_cap);
					if (!stop_buf)
						capy_die("out of memory");
				}
				memcpy(stop_buf + stop_len, piece, n);
				stop_len += n;
				stop_buf[stop_len] = 0;
				if (strstr(stop_buf, opt_stop)) {
					why = "stop";
					break;
				}
			}
		}
		fflush(stdout);
	}
	if (dt) {
		const char *piece;
		size_t n;
		capy_detok_flush(dt, &piece, &n);
		fwrite(piece, 1, n, stdout);
	}
	printf("\n");
	fflush(stdout);
	t2 = capy_now();
	if (con.g && !capy_grammar_accepting(con.state))
		fprintf(stderr, "%s: warning: the output is incomplete: stopped by %s before the grammar was complete\n",
			capy_tool_name, why);
	if (!opt_quiet) {
		char rss[32];
		capy_human_bytes(rss, sizeof(rss), (double)capy_peak_rss());
		fprintf(stderr, "%s: prompt %zu tokens in %.3f s (%.1f tok/s); generated %" PRIu64 " tokens in %.3f s "
			"(%.1f tok/s), stopped by %s; %d threads, seed %" PRIu64 ", peak RSS %s\n",
			capy_tool_name, prompt.n, t1 - t0, (double)prompt.n / (t1 - t0), produced, t2 - t1,
			produced > 1 ? (double)(produced - 1) / (t2 - t1) : 0.0, why, capy_engine_threads(e), sp.seed, rss);
		if (strcmp(opt_device, "cpu") || opt_tp > 1) {
			char d[512];
			capy_engine_describe(e, d, sizeof(d));
			fprintf(stderr, "%s: %s\n", capy_tool_name, d);
		}
		mask_stats(&con);
		if (spec)
			spec_stats(sr);
		capy_offload_log(e, produced, "generated token");
	}
	capy_ngram_free(sr->ngram);
	capy_mtp_free(sr->mtp);
	free(sr->rows);
	free(sr->drafts);
	free(queue);
	constraint_release(&con);
	free(stop_buf);
	free(logits);
	capy_detok_free(dt);
	capy_sampler_free(smp);
	capy_seq_free(s);
	capy_engine_free(e);
	capy_tokens_release(&prompt);
	capy_assets_release(&as);
	capy_artifact_close(a);
	return CAPY_EXIT_OK;
}

int cmd_main(int argc, char **argv)
{
	int n = capy_opt_parse(argc, argv, usage, opts);
	int modes = opt_tokenize + opt_detokenize + opt_render;
	const char *model = n ? argv[0] : NULL;

	if (n > 1)
		capy_usage_error(usage, opts, "unexpected argument '%s'", argv[1]);
	if (modes > 1)
		capy_usage_error(usage, opts, "--tokenize, --detokenize and --render exclude each other");
	if (!capy_engine_device_available(opt_device) && !opt_plan) /* a plan needs no device */
		capy_device_opts(usage, opts, opt_device, opt_gpu, opt_gpu_mem, &(struct capy_engine_opts){ 0 });
	/* Checked here like the other values, whatever the mode; generate() sets them. */
	capy_expert_opts(usage, opts, opt_expert_slots, opt_expert_threads, &(struct capy_engine_opts){ 0 });
	if (opt_tokenize)
		return model ? tokenize(model) : (capy_usage_error(usage, opts, "--tokenize needs a model or tokenizer.json"), 2);
	if (opt_detokenize)
		return model ? detokenize(model) : (capy_usage_error(usage, opts, "--detokenize needs a model or tokenizer.json"), 2);
	if (opt_render) {
		if (!model && !opt_template)
			capy_usage_error(usage, opts, "--render needs a model or --template");
		return render_only(model);
	}
	if (!model)
		capy_usage_error(usage, opts, "no model given");
	if (opt_plan && !opt_prompt && !opt_prompt_ids && !opt_messages) {
		/* Sizing without a prompt: the context is --max-context's. */
		if (!opt_max_context)
			capy_usage_error(usage, opts, "--plan needs --max-context (or a prompt)");
		struct capy_engine_opts xo = { 0 };
		capy_expert_opts(usage, opts, opt_expert_slots, opt_expert_threads, &xo);
		return capy_plan_print(model, &(struct capy_plan_opts){ .gpu_mem = opt_gpu_mem,
				       .max_context = (uint64_t)opt_max_context, .max_seqs = 1, .kv = parse_kv(),
				       .expert_slots = xo.expert_slots, .mtp = !strncmp(opt_spec, "mtp", 3),
				       .kept_states = strcmp(opt_spec, "off") ? (uint64_t)opt_draft_tokens : 0 });
	}
	if (!!opt_prompt + !!opt_prompt_ids + !!opt_messages != 1)
		capy_usage_error(usage, opts, "give one of -p, --prompt-ids or --messages");
	if (opt_prompt_ids && opt_chat)
		capy_usage_error(usage, opts, "--prompt-ids does not go with --chat");
	if (opt_messages && !opt_chat)
		capy_usage_error(usage, opts, "--messages goes with --chat or --render");
	if (strcmp(opt_spec, "ngram") && strcmp(opt_spec, "mtp") && strcmp(opt_spec, "mtp+ngram") && strcmp(opt_spec, "off"))
		capy_usage_error(usage, opts, "--spec: '%s' is not mtp, ngram, mtp+ngram or off", opt_spec);
	if (strcmp(opt_spec, "off") && (opt_grammar || opt_schema || opt_regex))
		capy_usage_error(usage, opts, "--spec %s does not go with --grammar, --json-schema or --regex yet", opt_spec);
	if (opt_draft_shortlist && strncmp(opt_spec, "mtp", 3))
		capy_usage_error(usage, opts, "--draft-shortlist goes with --spec mtp or mtp+ngram");
	if ((opt_system || opt_no_think) && !opt_chat)
		capy_usage_error(usage, opts, "--system and --no-think go with --chat or --render");
	return generate(model);
}
