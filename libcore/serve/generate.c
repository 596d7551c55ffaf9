/* generate.c - the generation endpoints: a request body parsed by its API adapter, rendered
 * through the chat template (or taken as text / ids), tokenized, checked against the context,
 * run by the scheduler; on the engine thread each token goes through the text output
 * (detokenization, stop strings, output parser) into the API writer, whose bytes go to the
 * client's stream at once or, for a non-streamed request, make the body at the end.
 *
 * Lifetime of a job: the connection thread makes it and submits it. Streamed, the connection
 * thread opens the stream and returns; the engine thread's END closes the stream and frees
 * the job (or, if END came before the stream was open, the connection thread does). Not
 * streamed, the connection thread waits for END, watching for the client to leave, answers
 * and frees the job. The cancel callback only reads fields fixed before it is set.
 */
#include "serve-impl.h"
#include "../constrain/grammar.h"
#include "../constrain/json-schema.h"
#include "../text/toolcall-grammar.h"
#include "../util/json.h"

#include <math.h>
#include <sys/random.h>
#include <time.h>

struct job {
	struct capy_server *srv;
	enum capy_api api;
	struct capy_api_request req;
	bool have_req;
	struct capy_textout *to;
	struct capy_api_writer *w;
	char id[32];
	char *forced;                 /* text the answer was made to start with, or NULL */
	struct capy_grammar *grammar; /* what the answer is held to (until submitted), or NULL */
	uint64_t prompt_tokens, cached, generated;
	enum capy_kv_tier tier;       /* where the cached tokens came from */
	int64_t created;
	const char *echo;             /* completions echo: the prompt text */
	size_t echo_len;
	char *echo_buf;
	uint64_t sched_id;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct capy_buf out;          /* bytes not yet sent (stream) or the body */
	struct capy_http_stream *st;
	bool ended, failed;
	bool gone;                    /* a stream write failed: the client left (or we stop) */
	bool think_open;              /* the prompt (before a forced start) ends inside <think> */
	bool seen_reasoning, reasoning_done; /* the answer's reasoning began, ended */
	uint64_t reasoning_tokens;    /* tokens generated before the answer left its reasoning */
	int status;                   /* of a non-streamed answer */
	enum capy_gen_finish finish;
	double queue_s, prefill_s, decode_s, mask_s, mask_wait_s, mask_wait_max_s;
	uint64_t spec_windows, spec_drafted, spec_accepted;
	uint64_t spec_mtp_windows, spec_mtp_drafted, spec_mtp_accepted;
	struct capy_err err;
};

static void job_free(struct job *j)
{
	if (!j)
		return;
	capy_api_writer_free(j->w);
	capy_textout_free(j->to);
	if (j->have_req)
		capy_api_request_release(&j->req);
	capy_buf_release(&j->out);
	free(j->forced);
	capy_grammar_free(j->grammar);
	free(j->echo_buf);
	pthread_mutex_destroy(&j->mu);
	pthread_cond_destroy(&j->cv);
	free(j);
}

static void random_id(char *out, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	uint8_t r[16];

	if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r)) { /* the clock, if there is no entropy */
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		for (size_t i = 0; i < sizeof(r); i++)
			r[i] = (uint8_t)((uint64_t)ts.tv_nsec >> (i % 8 * 8)) ^ (uint8_t)(i * 37);
	}
	for (size_t i = 0; i < sizeof(r) && 2 * i + 2 < n; i++) {
		out[2 * i] = hex[r[i] >> 4];
		out[2 * i + 1] = hex[r[i] & 15];
		out[2 * i + 2] = 0;
	}
}

static void respond_api_error(struct capy_http_exchange *x, enum capy_api api, const struct capy_api_error *e)
{
	struct capy_buf b = { 0 };

	capy_api_error_body(api, e, &b);
	capy_http_respond(x, e->status, NULL, b.data, b.len);
	capy_buf_release(&b);
}

static void respond_error(struct capy_http_exchange *x, enum capy_api api, int status, const char *code,
			  const char *fmt, ...) CAPY_PRINTF(5, 6);

static void respond_error(struct capy_http_exchange *x, enum capy_api api, int status, const char *code,
			  const char *fmt, ...)
{
	struct capy_api_error e = { 0 };
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	capy_api_error_set(&e, status, NULL, "%s", msg);
	e.code = code;
	if (code) /* OpenAI's coded refusals (model_not_found, context_length_exceeded) */
		e.type = "invalid_request_error";
	respond_api_error(x, api, &e);
}

static void log_u64(struct capy_http_exchange *x, const char *key, uint64_t v)
{
	char n[32];

	snprintf(n, sizeof(n), "%" PRIu64, v);
	capy_http_log_field(x, key, n);
}

static void log_ms(struct capy_http_exchange *x, const char *key, double s)
{
	char n[32];

	snprintf(n, sizeof(n), "%.1f", s * 1000);
	capy_http_log_field(x, key, n);
}

static void log_str(struct capy_http_exchange *x, const char *key, const char *s, size_t len)
{
	struct capy_buf b = { 0 };

	capy_buf_json_str(&b, s, len);
	if (!b.oom)
		capy_http_log_field(x, key, b.data);
	capy_buf_release(&b);
}

/* --- the engine thread's side -------------------------------------------------------------- */

static int on_parse_event(void *ud, const struct capy_outparse_event *ev)
{
	struct job *j = ud;

	if (ev->type == CAPY_OUTPARSE_REASONING)
		j->seen_reasoning = true;
	else
		j->reasoning_done = true;
	return capy_api_write_event(j->w, ev, &j->out);
}

/* The token's bytes as the API shows them. */
static void token_text(const struct job *j, int32_t id, const char **s, size_t *n)
{
	*s = capy_tokenizer_piece_bytes(j->srv->as->tok, id, n);
	if (!*s) {
		*s = "";
		*n = 0;
	}
}

static void add_logprobs(struct job *j, const struct capy_gen_event *ev)
{
	struct capy_api_top_logprob top[CAPY_GEN_MAX_TOP_LOGPROBS];
	struct capy_api_logprob rec = { 0 };

	token_text(j, ev->token, &rec.token, &rec.len);
	rec.logprob = ev->logprob;
	for (int i = 0; i < ev->n_top; i++) {
		token_text(j, ev->top_ids[i], &top[i].token, &top[i].len);
		top[i].logprob = ev->top_logprobs[i];
	}
	rec.top = top;
	rec.n_top = (size_t)ev->n_top;
	capy_api_write_logprobs(j->w, &rec, 1);
}

static int begin_answer(struct job *j, uint64_t cached)
{
	struct capy_api_meta meta = { j->id, j->srv->model_id, j->created, (int64_t)j->prompt_tokens,
				      (int64_t)cached, j->echo, j->echo_len };
	int rc;

	j->cached = cached;
	if ((rc = capy_api_writer_new(&j->w, &j->req, &meta, &j->err)) < 0 ||
	    (rc = capy_api_write_begin(j->w, &j->out)) < 0)
		return rc;
	if (j->forced)
		rc = capy_textout_feed_text(j->to, j->forced, strlen(j->forced), on_parse_event, j, &j->err);
	return rc;
}

static void end_answer(struct job *j, const struct capy_gen_event *ev)
{
	struct capy_api_usage u = { (int64_t)j->prompt_tokens, (int64_t)ev->cached_tokens, (int64_t)ev->generated_tokens,
				    (int64_t)j->reasoning_tokens, ev->cached_tokens ? capy_kv_tier_name(ev->cache_tier) : NULL };
	struct capy_api_error ae = { 0 };
	const char *stop = NULL;
	enum capy_api_finish fin = CAPY_API_FINISH_EOS;
	int rc = 0;

	j->finish = ev->finish;
	j->generated = ev->generated_tokens;
	j->cached = ev->cached_tokens;
	j->tier = ev->cache_tier;
	j->queue_s = ev->queue_s;
	j->prefill_s = ev->prefill_s;
	j->decode_s = ev->decode_s;
	j->mask_s = ev->mask_s;
	j->mask_wait_s = ev->mask_wait_s;
	j->mask_wait_max_s = ev->mask_wait_max_s;
	j->spec_windows = ev->spec_windows;
	j->spec_drafted = ev->spec_drafted;
	j->spec_accepted = ev->spec_accepted;
	j->spec_mtp_windows = ev->spec_mtp_windows;
	j->spec_mtp_drafted = ev->spec_mtp_drafted;
	j->spec_mtp_accepted = ev->spec_mtp_accepted;
	if (!j->w && (rc = begin_answer(j, ev->cached_tokens)) < 0)
		goto broken;
	if (j->failed && ev->finish != CAPY_FINISH_CANCELLED)
		goto broken; /* the text pipeline failed on the way (out of memory): stopped there */
	switch (ev->finish) {
	case CAPY_FINISH_STOP_TOKEN:
	case CAPY_FINISH_GRAMMAR: /* the grammar is complete: the answer ended as a stop id would end it */
		break;
	case CAPY_FINISH_STOPPED:
		stop = capy_textout_stop_string(j->to);
		fin = stop ? CAPY_API_FINISH_STOP : CAPY_API_FINISH_EOS;
		break;
	case CAPY_FINISH_LENGTH:
		fin = CAPY_API_FINISH_LENGTH;
		break;
	case CAPY_FINISH_CANCELLED:
		return; /* the client is gone: nothing to say */
	case CAPY_FINISH_SHUTDOWN:
		capy_api_error_set(&ae, 503, NULL, "the server is shutting down");
		capy_api_write_error(j->w, &ae, &j->out);
		j->status = 503;
		return;
	case CAPY_FINISH_ERROR:
		capy_api_error_set(&ae, 500, NULL, "%s", ev->error ? ev->error : "the engine failed");
		capy_api_write_error(j->w, &ae, &j->out);
		j->status = 500;
		return;
	}
	if ((rc = capy_textout_finish(j->to, on_parse_event, j, &j->err)) < 0 ||
	    (rc = capy_api_write_end(j->w, fin, stop, &u, &j->out)) < 0)
		goto broken;
	j->status = 200;
	return;
broken:
	capy_api_error_set(&ae, 500, NULL, "%s", j->err.msg[0] ? j->err.msg : "out of memory");
	capy_buf_reset(&j->out);
	if (j->w)
		capy_api_write_error(j->w, &ae, &j->out);
	else
		capy_api_error_body(j->api, &ae, &j->out);
	j->status = 500;
}

static void log_job(struct job *j, struct capy_http_exchange *x)
{
	static const char *const why[] = { "stop", "length", "stop_string", "cancelled", "shutdown", "error", "grammar" };
	const char *f = why[j->finish];

	if (j->finish == CAPY_FINISH_STOPPED && j->gone)
		f = why[CAPY_FINISH_CANCELLED]; /* stopped because the stream could not be written */
	else if (j->finish == CAPY_FINISH_STOPPED && !capy_textout_stop_string(j->to))
		f = "stop";
	log_u64(x, "prompt_tokens", j->prompt_tokens);
	log_u64(x, "cached_tokens", j->cached);
	if (j->cached) {
		const char *t = capy_kv_tier_name(j->tier);
		log_str(x, "cache_tier", t, strlen(t));
	}
	log_u64(x, "completion_tokens", j->generated);
	log_str(x, "finish", f, strlen(f));
	log_ms(x, "queue_ms", j->queue_s);
	log_ms(x, "prefill_ms", j->prefill_s);
	log_ms(x, "decode_ms", j->decode_s);
	if (j->mask_s > 0) { /* constrained: the masks' time, and what of it the answer waited for */
		log_u64(x, "mask_us", (uint64_t)(j->mask_s * 1e6));
		log_u64(x, "mask_wait_us", (uint64_t)(j->mask_wait_s * 1e6));
		log_u64(x, "mask_wait_max_us", (uint64_t)(j->mask_wait_max_s * 1e6));
	}
	if (j->spec_windows) { /* speculative decoding: its windows, the drafts verified and accepted */
		log_u64(x, "spec_windows", j->spec_windows);
		log_u64(x, "spec_drafted", j->spec_drafted);
		log_u64(x, "spec_accepted", j->spec_accepted);
	}
	if (j->spec_mtp_windows) { /* of them, the windows the MTP head drafted */
		log_u64(x, "spec_mtp_windows", j->spec_mtp_windows);
		log_u64(x, "spec_mtp_drafted", j->spec_mtp_drafted);
		log_u64(x, "spec_mtp_accepted", j->spec_mtp_accepted);
	}
	if (j->prefill_s > 0) {
		char n[32];
		snprintf(n, sizeof(n), "%.1f", (double)(j->prompt_tokens - j->cached) / j->prefill_s);
		capy_http_log_field(x, "prefill_tok_s", n);
	}
	if (j->decode_s > 0 && j->generated > 1) {
		char n[32];
		snprintf(n, sizeof(n), "%.1f", (double)(j->generated - 1) / j->decode_s);
		capy_http_log_field(x, "decode_tok_s", n);
	}
}

/* Engine thread. Must be quick; never blocks on the client (stream writes only buffer). */
static int on_gen(void *ud, const struct capy_gen_event *ev)
{
	struct job *j = ud;
	bool stopped = false, free_it = false;
	int ret = 0;

	pthread_mutex_lock(&j->mu);
	switch (ev->type) {
	case CAPY_GEN_START:
		if (begin_answer(j, ev->cached_tokens) < 0)
			j->failed = true;
		break;
	case CAPY_GEN_TOKEN:
		if (j->failed) {
			ret = 1; /* nothing more can be written: stop generating */
			break;
		}
		if (j->req.logprobs >= 0)
			add_logprobs(j, ev);
		if (capy_textout_token(j->to, ev->token, on_parse_event, j, &stopped, &j->err) < 0)
			j->failed = true;
		/* Counted up to the first text after the reasoning (text the parser still holds
		 * back, such as the whitespace after </think>, counts with the reasoning). */
		if (!j->reasoning_done && (j->seen_reasoning || j->think_open))
			j->reasoning_tokens++;
		ret = stopped || j->failed;
		break;
	case CAPY_GEN_END:
		end_answer(j, ev);
		j->ended = true;
		break;
	}
	if (j->st) {
		if (j->out.len && capy_http_stream_write(j->st, j->out.data, j->out.len) < 0) {
			j->gone = true; /* the client is gone */
			ret = 1;
		}
		capy_buf_reset(&j->out);
		if (j->ended) {
			log_job(j, capy_http_stream_exchange(j->st));
			capy_http_stream_close(j->st);
			j->st = NULL;
			free_it = true;
		}
	}
	if (j->ended)
		pthread_cond_broadcast(&j->cv);
	pthread_mutex_unlock(&j->mu);
	if (free_it)
		job_free(j);
	return ret;
}

static void on_cancel(void *arg)
{
	struct job *j = arg;

	capy_sched_cancel(j->srv->sched, j->sched_id);
}

/* --- the connection thread's side ------------------------------------------------------------ */

static double param(const struct capy_api_param *p, double model_default, double fallback)
{
	if (p->given)
		return p->v;
	return isnan(model_default) ? fallback : model_default;
}

static struct capy_sampler_params sampling(const struct capy_server *srv, const struct capy_api_request *r)
{
	const struct capy_assets *as = srv->as;
	struct capy_sampler_params sp = { 0 };
	uint64_t seed;

	sp.temperature = (float)param(&r->temperature, as->temperature, 1.0);
	sp.top_p = (float)param(&r->top_p, as->top_p, 1.0);
	sp.min_p = (float)param(&r->min_p, as->min_p, 0.0);
	sp.repetition_penalty = (float)param(&r->repetition_penalty, as->repetition_penalty, 1.0);
	sp.presence_penalty = (float)param(&r->presence_penalty, NAN, 0.0);
	sp.frequency_penalty = (float)param(&r->frequency_penalty, NAN, 0.0);
	sp.top_k = r->top_k > 0 ? (int)r->top_k : r->top_k < 0 ? 0 : as->top_k > 0 ? (int)as->top_k : 0;
	if (r->seed_given) {
		sp.seed = (uint64_t)r->seed;
	} else if (getrandom(&seed, sizeof(seed), 0) == (ssize_t)sizeof(seed)) {
		sp.seed = seed;
	} else {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		sp.seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20);
	}
	return sp;
}

static bool ends_with(const char *s, size_t n, const char *suffix)
{
	size_t k = strlen(suffix);

	return n >= k && !memcmp(s + n - k, suffix, k);
}

/* Whether the template wrote the XML call syntax (<function=...>) into the prompt: by length,
 * since a prompt can hold NUL bytes (a message's \u0000). */
static bool xml_calls(const char *prompt, size_t len)
{
	return memmem(prompt, len, "<function=", 10) != NULL;
}

/* tool_choice required or named: the answer is made to start with the model's own tool-call
 * opening (XML where xml says the template describes <function=...>, else hermes JSON), so it is
 * a call from its first token; the call grammar continues it. Not where the prompt ends inside
 * <think>: there the grammar lets the model reason first, and nothing is forced. */
static char *forced_start(const struct job *j, bool xml)
{
	const struct capy_api_request *r = &j->req;
	struct capy_buf b = { 0 };

	if (r->tool_choice != CAPY_API_TOOLS_REQUIRED && r->tool_choice != CAPY_API_TOOLS_NAMED)
		return NULL;
	if (!r->n_tools || j->think_open)
		return NULL;
	capy_buf_puts(&b, "<tool_call>\n");
	if (r->tool_choice == CAPY_API_TOOLS_NAMED && r->tool_choice_name) {
		if (xml) {
			capy_buf_printf(&b, "<function=%s>\n", r->tool_choice_name);
		} else {
			capy_buf_puts(&b, "{\"name\": ");
			capy_buf_json_str(&b, r->tool_choice_name, strlen(r->tool_choice_name));
			capy_buf_puts(&b, ", \"arguments\": ");
		}
	}
	return capy_buf_detach(&b, NULL);
}

static bool forced_call(const struct capy_api_request *r)
{
	return (r->tool_choice == CAPY_API_TOOLS_REQUIRED || r->tool_choice == CAPY_API_TOOLS_NAMED) && r->n_tools &&
	       r->tools_json;
}

/* tool_choice allowed_tools in mode auto: a free answer, or calls of the listed tools only,
 * held by a grammar whose free text is anything without "<tool_call>" (so the whole answer is
 * masked on the host). A response format wins over it, as over plain auto: the answer is
 * then the format's JSON, with no call. */
static bool allowed_auto(const struct capy_api_request *r)
{
	return r->tool_choice == CAPY_API_TOOLS_AUTO && r->allowed_tools && r->n_tools && r->tools_json &&
	       r->response_format == CAPY_API_FORMAT_TEXT;
}

/* A grammar text compiled for the request, or the refusal (400 for what the request asked,
 * naming where: a schema the compiler refuses, a tool name XML cannot write). */
static int compile_answer(struct job *j, char *text, int rc, const struct capy_err *gerr, const char *at,
			  struct capy_api_error *ae)
{
	struct capy_err err = { 0 };

	if (rc < 0)
		return capy_api_error_set(ae, rc == CAPY_ENOMEM ? 500 : 400, at, "%s: %s", at, gerr->msg);
	rc = capy_grammar_compile(text, strlen(text), "root", &j->grammar, &err);
	free(text);
	if (rc < 0)
		return capy_api_error_set(ae, rc == CAPY_ENOMEM ? 500 : 400, at, "%s: the grammar made of it: %s", at,
					  err.msg);
	return 0;
}

/* A list of strings as an array of its strings (NULL and n 0 for none); *oom on failure. */
static const char **strings_of(const struct capy_tval *list, size_t *n, bool *oom)
{
	const char **v;

	*n = capy_tval_len(list);
	if (!*n)
		return NULL;
	if (!(v = calloc(*n, sizeof(*v)))) {
		*oom = true;
		return NULL;
	}
	for (size_t i = 0; i < *n; i++)
		v[i] = capy_tval_strv(capy_tval_at(list, i), NULL);
	return v;
}

/* tool_choice required / named / allowed_tools: the answer is held to the model's own call
 * syntax for the (allowed) tools (toolcall-grammar.h), after free reasoning where the prompt
 * opened <think> (no start is forced then), else continuing the forced start; allowed_tools
 * in mode auto lets free text come first, and no call at all (allowed_auto). */
static int call_grammar(struct job *j, bool xml, struct capy_api_error *ae)
{
	const struct capy_api_request *r = &j->req;
	bool oom = false, free_text = allowed_auto(r);
	struct capy_call_grammar_opts o = { .syntax = xml ? CAPY_CALL_XML : CAPY_CALL_HERMES,
					    .reasoning = j->think_open, .opened = !j->think_open && !free_text,
					    .parallel = r->parallel_tool_calls, .free_text = free_text };
	const char **strict = strings_of(r->strict_tools, &o.n_strict, &oom);
	const char **allowed = strings_of(r->allowed_tools, &o.n_allowed, &oom);
	struct capy_err err = { 0 };
	char *text = NULL;
	int rc;

	o.strict = strict;
	o.allowed = allowed;
	if (r->tool_choice == CAPY_API_TOOLS_NAMED)
		o.only = r->tool_choice_name;
	rc = oom ? CAPY_ENOMEM : capy_call_grammar(r->tools_json, strlen(r->tools_json), &o, &text, &err);
	free(strict);
	free(allowed);
	if (oom)
		return capy_api_error_set(ae, 500, NULL, "out of memory");
	return compile_answer(j, text, rc, &err, "tools", ae);
}

/* response_format json_object / json_schema: the answer is a JSON text of the schema (any
 * object for json_object), after free reasoning where the prompt opened <think>. */
static int format_grammar(struct job *j, struct capy_api_error *ae)
{
	const struct capy_api_request *r = &j->req;
	static const char any_object[] = "{\"type\":\"object\",\"additionalProperties\":true}";
	struct capy_schema_opts so = { .strict = r->response_strict, .prefix = "j-" };
	const char *at = r->response_schema_at ? r->response_schema_at : "response_format";
	struct capy_err err = { 0 };
	char *schema = NULL, *text = NULL, *full = NULL;
	int rc;

	if (r->response_format == CAPY_API_FORMAT_JSON_SCHEMA && r->response_schema) {
		struct capy_err e = { 0 };
		if (capy_tval_to_json(r->response_schema, &schema, NULL, &e) < 0)
			return capy_api_error_set(ae, 500, NULL, "%s", e.msg);
	}
	rc = capy_json_schema_to_gbnf(schema ? schema : any_object, schema ? strlen(schema) : strlen(any_object), &so,
				      &text, &err);
	free(schema);
	if (rc == 0 && (rc = capy_grammar_reasoning_first(text, "j-root", j->think_open, &full, &err)) < 0)
		full = NULL;
	free(text);
	return compile_answer(j, full, rc, &err, at, ae);
}

/* The prompt of a chat request: rendered, continued or forced; tokenized. */
static int chat_prompt(struct job *j, struct capy_tokens *ids, char **text, size_t *text_len,
		       struct capy_api_error *ae)
{
	const struct capy_server *srv = j->srv;
	struct capy_chat_opts co = { srv->as->tokenizer_config, srv->as->tokenizer_config_len, false, NULL };
	struct capy_err err = { 0 };
	char *prompt = NULL;
	size_t len;
	int rc;

	rc = capy_chat_render_values(srv->as->tmpl, j->req.doc, j->req.messages, j->req.tools, j->req.kwargs,
				     srv->special, j->req.add_generation_prompt, &co, &prompt, &len, &err);
	if (rc < 0)
		return capy_api_error_set(ae, rc == CAPY_ENOMEM ? 500 : 400, NULL, "the chat template refused the "
					  "conversation: %s", err.msg);
	if (j->req.continue_final_message && (rc = capy_api_continue_final(&j->req, prompt, &len, ae)) < 0) {
		free(prompt);
		return rc;
	}
	j->think_open = ends_with(prompt, len, "<think>\n") || ends_with(prompt, len, "<think>");
	bool calls = forced_call(&j->req) || allowed_auto(&j->req);
	const bool xml = xml_calls(prompt, len);
	if (j->api != CAPY_API_COUNT_TOKENS && (calls || j->req.response_format != CAPY_API_FORMAT_TEXT)) {
		rc = calls ? call_grammar(j, xml, ae) : format_grammar(j, ae);
		if (rc < 0) {
			free(prompt);
			return rc;
		}
	}
	if (j->api != CAPY_API_COUNT_TOKENS && (j->forced = forced_start(j, xml))) {
		char *p = realloc(prompt, len + strlen(j->forced) + 1);
		if (!p) {
			free(prompt);
			return capy_api_error_set(ae, 500, NULL, "out of memory");
		}
		prompt = p;
		memcpy(prompt + len, j->forced, strlen(j->forced) + 1);
		len += strlen(j->forced);
	}
	if ((rc = capy_tokenizer_encode(srv->as->tok, prompt, len, CAPY_TOK_PARSE_ADDED, ids, &err)) < 0) {
		free(prompt);
		return capy_api_error_set(ae, 400, NULL, "the prompt cannot be tokenized: %s", err.msg);
	}
	*text = prompt;
	*text_len = len;
	return 0;
}

/* Where the final message of the prompt starts (the last <|im_start|>): a snapshot there lets
 * the next turn, which renders this one differently (reasoning dropped), resume from it. */
static uint64_t last_turn_start(const struct capy_server *srv, const struct capy_tokens *ids)
{
	for (size_t i = ids->n; i-- > 0;)
		if (ids->ids[i] == srv->im_start)
			return i;
	return 0;
}

static void serve(struct capy_http_exchange *x, struct capy_server *srv, enum capy_api api)
{
	struct job *j = calloc(1, sizeof(*j));
	struct capy_api_error ae = { 0 };
	struct capy_tokens ids = { 0 };
	struct capy_err err = { 0 };
	struct capy_outparse_opts po;
	struct capy_textout_opts to = { 0 };
	struct capy_gen_request gr = { 0 };
	const struct capy_sched_opts *so = capy_sched_options(srv->sched);
	char *text = NULL;
	size_t text_len = 0, body_len;
	const char *body = capy_http_body(x, &body_len);
	int rc;

	if (!j) {
		capy_http_respond_error(x, 500, "out of memory");
		return;
	}
	pthread_mutex_init(&j->mu, NULL);
	pthread_cond_init(&j->cv, NULL);
	j->srv = srv;
	j->api = api;
	j->created = (int64_t)time(NULL);
	random_id(j->id, sizeof(j->id));
	if (capy_api_parse(api, body, body_len, &srv->limits, &j->req, &ae) < 0) {
		respond_api_error(x, api, &ae);
		goto done;
	}
	j->have_req = true;
	if (api != CAPY_API_MESSAGES && api != CAPY_API_COUNT_TOKENS && j->req.model &&
	    strcmp(j->req.model, srv->model_id)) {
		respond_error(x, api, 404, "model_not_found", "the model '%s' does not exist (this server has '%s')",
			      j->req.model, srv->model_id);
		goto done;
	}
	if (api == CAPY_API_COMPLETIONS) {
		if (j->req.prompt_ids) {
			for (size_t i = 0; i < j->req.n_prompt_ids; i++) {
				if (j->req.prompt_ids[i] < 0 || (uint64_t)j->req.prompt_ids[i] >= capy_engine_config(srv->e)->vocab_size) {
					respond_error(x, api, 400, NULL, "prompt[%zu]: token id %" PRId32 " is outside the vocabulary",
						      i, j->req.prompt_ids[i]);
					goto done;
				}
			}
			if (!(ids.ids = malloc((j->req.n_prompt_ids + 1) * sizeof(int32_t)))) {
				respond_error(x, api, 500, NULL, "out of memory");
				goto done;
			}
			memcpy(ids.ids, j->req.prompt_ids, j->req.n_prompt_ids * sizeof(int32_t));
			ids.n = ids.cap = j->req.n_prompt_ids;
			if (j->req.echo && capy_tokenizer_decode(srv->as->tok, ids.ids, ids.n, CAPY_TOK_SKIP_SPECIAL,
								 &j->echo_buf, &j->echo_len, &err) == 0)
				j->echo = j->echo_buf;
		} else {
			if (capy_tokenizer_encode(srv->as->tok, j->req.prompt, j->req.prompt_len, CAPY_TOK_PARSE_ADDED,
						  &ids, &err) < 0) {
				respond_error(x, api, 400, NULL, "prompt: %s", err.msg);
				goto done;
			}
			if (j->req.echo) {
				j->echo = j->req.prompt;
				j->echo_len = j->req.prompt_len;
			}
		}
	} else if (chat_prompt(j, &ids, &text, &text_len, &ae) < 0) {
		respond_api_error(x, api, &ae);
		goto done;
	}
	j->prompt_tokens = ids.n;
	if (api == CAPY_API_COUNT_TOKENS) {
		capy_api_count_tokens_body((int64_t)ids.n, &j->out);
		capy_http_respond(x, 200, NULL, j->out.data, j->out.len);
		goto done;
	}
	if (!ids.n) {
		respond_error(x, api, 400, NULL, "the prompt is empty");
		goto done;
	}
	if (ids.n >= so->max_context) {
		respond_error(x, api, 400, "context_length_exceeded", "the prompt has %zu tokens; this server's context "
			      "is %" PRIu64 " tokens (--max-context), which leaves no room for an answer", ids.n,
			      so->max_context);
		goto done;
	}
	if (srv->o.log_prompts && text)
		log_str(x, "prompt", text, text_len);
	else if (srv->o.log_prompts && api == CAPY_API_COMPLETIONS && j->req.prompt)
		log_str(x, "prompt", j->req.prompt, j->req.prompt_len);
	capy_api_outparse_opts(&j->req, j->think_open ? CAPY_OUTPARSE_THINK_OPEN : 0, &po);
	to.tok = srv->as->tok;
	to.stop = j->req.stop;
	to.n_stop = j->req.n_stop;
	to.parse = api != CAPY_API_COMPLETIONS;
	to.parse_opts = po;
	if (capy_textout_new(&j->to, &to, &err) < 0) {
		respond_error(x, api, 500, NULL, "%s", err.msg);
		goto done;
	}
	gr.prompt = ids.ids;
	gr.n_prompt = ids.n;
	gr.sampling = sampling(srv, &j->req);
	gr.max_new_tokens = j->req.max_tokens > 0 ? (uint64_t)j->req.max_tokens : 0;
	if (srv->o.max_tokens && (!gr.max_new_tokens || gr.max_new_tokens > srv->o.max_tokens))
		gr.max_new_tokens = srv->o.max_tokens; /* clamped, as for the context: never refused */
	gr.stop_ids = srv->as->eos;
	gr.n_stop_ids = (size_t)srv->as->n_eos;
	gr.top_logprobs = j->req.logprobs < 0 ? -1 : CAPY_MIN(j->req.logprobs, CAPY_GEN_MAX_TOP_LOGPROBS);
	gr.snapshot_at = api == CAPY_API_COMPLETIONS ? 0 : last_turn_start(srv, &ids);
	gr.cb = on_gen;
	gr.ud = j;
	gr.grammar = j->grammar;
	gr.trie = srv->trie;
	if ((rc = capy_sched_submit(srv->sched, &gr, &j->sched_id, &err)) < 0) {
		respond_error(x, api, rc == CAPY_EBUSY ? 503 : rc == CAPY_EINVAL ? 400 : 500, NULL, "%s", err.msg);
		goto done;
	}
	j->grammar = NULL; /* the scheduler's now */
	capy_tokens_release(&ids);
	free(text);
	text = NULL;
	if (j->req.stream) {
		bool free_it = false;
		pthread_mutex_lock(&j->mu);
		j->st = capy_http_stream_open(x, 200, NULL);
		if (!j->st) {
			pthread_mutex_unlock(&j->mu);
			capy_sched_cancel(srv->sched, j->sched_id); /* END will find no stream */
			pthread_mutex_lock(&j->mu);
			while (!j->ended)
				pthread_cond_wait(&j->cv, &j->mu);
			pthread_mutex_unlock(&j->mu);
			job_free(j);
			return;
		}
		if (j->out.len)
			capy_http_stream_write(j->st, j->out.data, j->out.len);
		capy_buf_reset(&j->out);
		if (j->ended) { /* it all happened before the stream was open */
			log_job(j, x);
			capy_http_stream_close(j->st);
			j->st = NULL;
			free_it = true;
		} else {
			capy_http_on_cancel(x, on_cancel, j);
		}
		pthread_mutex_unlock(&j->mu);
		if (free_it)
			job_free(j);
		return;
	}
	/* Not streamed: wait for the end, watching for the client to leave. */
	pthread_mutex_lock(&j->mu);
	bool cancelled = false;
	while (!j->ended) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 100 * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&j->cv, &j->mu, &ts);
		if (!j->ended && !cancelled && capy_http_client_gone(x)) {
			cancelled = true;
			capy_sched_cancel(srv->sched, j->sched_id);
		}
	}
	pthread_mutex_unlock(&j->mu);
	log_job(j, x);
	if (j->finish != CAPY_FINISH_CANCELLED)
		capy_http_respond(x, j->status ? j->status : 500, NULL, j->out.data, j->out.len);
done:
	capy_tokens_release(&ids);
	free(text);
	job_free(j);
}

void serve_chat(struct capy_http_exchange *x, void *arg)
{
	serve(x, arg, CAPY_API_CHAT);
}

void serve_completions(struct capy_http_exchange *x, void *arg)
{
	serve(x, arg, CAPY_API_COMPLETIONS);
}

void serve_responses(struct capy_http_exchange *x, void *arg)
{
	serve(x, arg, CAPY_API_RESPONSES);
}

void serve_messages(struct capy_http_exchange *x, void *arg)
{
	serve(x, arg, CAPY_API_MESSAGES);
}

void serve_count_tokens(struct capy_http_exchange *x, void *arg)
{
	serve(x, arg, CAPY_API_COUNT_TOKENS);
}
