/* u-api.c - unit tests for libcore/serve/api: request parsing of the five APIs (with the
 * captured bodies of real clients, rendered through the chat templates), the errors, and the
 * exact bytes of every response shape, streamed and not. */
#include "test.h"
#include "serve/api.h"
#include "text/chat.h"

#include <dirent.h>

/* --- helpers ------------------------------------------------------------------------------ */

static char *read_text(const char *path, size_t *len)
{
	struct capy_err err = { 0 };
	char *text = NULL;

	if (capy_read_file(path, 64u << 20, &text, len, &err) < 0)
		fprintf(stderr, "%s\n", err.msg);
	return text;
}

static const char *srcdir(void)
{
	const char *d = getenv("CAPY_SRCDIR");

	return d ? d : ".";
}

/* JSON of a value (Python's separators), malloc'd; "(null)" for NULL. */
static char *js(const struct capy_tval *v)
{
	char *out = NULL;

	if (!v)
		return strdup("(null)");
	if (capy_tval_to_json(v, &out, NULL, NULL) < 0)
		return strdup("(error)");
	return out;
}

#define CHECK_JSON(v, want)                                                                        \
	do {                                                                                       \
		char *j_ = js(v);                                                                  \
		CHECK_MSG(!strcmp(j_, (want)), "\n got: %s\nwant: %s", j_, (want));                \
		free(j_);                                                                          \
	} while (0)

static int parse(enum capy_api api, const char *body, struct capy_api_request *req,
		 struct capy_api_error *err)
{
	return capy_api_parse(api, body, strlen(body), NULL, req, err);
}

/* Parse a body that must be accepted; the request is left in *req. */
#define PARSE_OK(api, body, req)                                                                   \
	do {                                                                                       \
		struct capy_api_error e_;                                                          \
		int rc_ = parse((api), (body), (req), &e_);                                        \
		CHECK_MSG(rc_ == 0, "rc %d: %s", rc_, e_.msg);                                     \
	} while (0)

/* A refused body: status, the error type in the API's body, and the exact message. */
static void check_refused(int line, enum capy_api api, const char *body,
			  const struct capy_api_limits *lim, int status, const char *type,
			  const char *param, const char *msg)
{
	struct capy_api_request req;
	struct capy_api_error err;
	struct capy_buf b = { 0 };
	char want_type[96];
	int rc = capy_api_parse(api, body, strlen(body), lim, &req, &err);

	CHECK_MSG(rc == (status >= 500 ? CAPY_ENOMEM : CAPY_EINVAL), "line %d: rc %d", line, rc);
	CHECK_MSG(err.status == status, "line %d: status %d, want %d", line, err.status, status);
	CHECK_MSG(!strcmp(err.msg, msg), "line %d:\n got: %s\nwant: %s", line, err.msg, msg);
	if (param)
		CHECK_MSG(!strcmp(err.param, param), "line %d: param '%s', want '%s'", line,
			  err.param, param);
	capy_api_error_body(api, &err, &b);
	snprintf(want_type, sizeof(want_type), "\"type\":\"%s\"", type);
	CHECK_MSG(b.data && strstr(b.data, want_type), "line %d: %s lacks %s", line,
		  b.data ? b.data : "", want_type);
	capy_buf_release(&b);
	CHECK(req.doc == NULL);
}

#define REFUSED(api, body, status, type, param, msg)                                               \
	check_refused(__LINE__, (api), (body), NULL, (status), (type), (param), (msg))

/* --- the chat templates ------------------------------------------------------------------- */

static struct capy_tmpl *tmpl_fixture, *tmpl_share;
static struct capy_tdoc *special_doc;
static struct capy_tval *special;

static struct capy_tmpl *load_template(const char *rel)
{
	struct capy_err err = { 0 };
	struct capy_tmpl *t = NULL;
	char path[4096];
	size_t len;
	char *src;

	snprintf(path, sizeof(path), "%s/%s", srcdir(), rel);
	src = read_text(path, &len);
	if (!src)
		return NULL;
	if (capy_tmpl_compile(src, len, rel, &t, &err) < 0)
		fprintf(stderr, "%s\n", err.msg);
	free(src);
	return t;
}

static void load_templates(void)
{
	struct capy_err err = { 0 };
	struct capy_tval *cfg = NULL;
	char path[4096];
	size_t len;
	char *text;

	tmpl_fixture = load_template("t/fixtures/qwen3_5_moe/chat_template.jinja");
	tmpl_share = load_template("share/chat_templates/qwen3_5.jinja");
	special_doc = capy_tdoc_new();
	text = read_text(test_fixture_path("qwen3_5_moe/tokenizer_config.json", path, sizeof(path)),
			 &len);
	if (text && !capy_tdoc_parse_json(special_doc, text, len, "tokenizer_config", &cfg, &err))
		capy_chat_special_tokens(special_doc, cfg, &special, &err);
	free(text);
}

/* Render the request's prompt with a template (continue_final_message applied); malloc'd. */
static char *render(const struct capy_tmpl *t, const struct capy_api_request *req,
		    struct capy_err *err)
{
	struct capy_api_error aerr;
	char *out = NULL;
	size_t len;

	if (capy_chat_render_values(t, req->doc, req->messages, req->tools, req->kwargs, special,
				    req->add_generation_prompt, NULL, &out, &len, err) < 0)
		return NULL;
	if (req->continue_final_message && capy_api_continue_final(req, out, &len, &aerr) < 0) {
		snprintf(err->msg, sizeof(err->msg), "%s", aerr.msg);
		free(out);
		return NULL;
	}
	return out;
}

/* --- captured bodies ---------------------------------------------------------------------- */

static bool api_of_path(const char *path, enum capy_api *api)
{
	static const struct {
		const char *path;
		enum capy_api api;
	} map[] = {
		{ "/v1/chat/completions", CAPY_API_CHAT },
		{ "/v1/completions", CAPY_API_COMPLETIONS },
		{ "/v1/responses", CAPY_API_RESPONSES },
		{ "/v1/messages/count_tokens", CAPY_API_COUNT_TOKENS },
		{ "/v1/messages", CAPY_API_MESSAGES },
	};
	size_t i, n = strcspn(path, "?");

	for (i = 0; i < ARRAY_SIZE(map); i++)
		if (n == strlen(map[i].path) && !strncmp(path, map[i].path, n)) {
			*api = map[i].api;
			return true;
		}
	return false;
}

/* A capture: {method, path, headers, body}; the body as JSON text (numbers kept). */
struct capture {
	enum capy_api api;
	char *body;
};

static bool load_capture(const char *file, struct capture *c)
{
	struct capy_tdoc *doc = capy_tdoc_new();
	struct capy_tval *root = NULL;
	struct capy_err err = { 0 };
	size_t len;
	char *text = read_text(file, &len);
	bool ok = false;

	c->body = NULL;
	if (text && !capy_tdoc_parse_json(doc, text, len, file, &root, &err) &&
	    api_of_path(capy_tval_strv(capy_tval_get(root, "path"), NULL), &c->api))
		ok = !capy_tval_to_json(capy_tval_get(root, "body"), &c->body, NULL, &err);
	free(text);
	capy_tdoc_free(doc);
	return ok;
}

static struct capy_api_request capture_req(const char *rel)
{
	struct capy_api_request req = { 0 };
	struct capy_api_error aerr;
	struct capture c;
	char path[4096];

	snprintf(path, sizeof(path), "%s/t/serve/captured/%s", srcdir(), rel);
	if (!load_capture(path, &c)) {
		CHECK_MSG(false, "cannot load %s", path);
		return req;
	}
	CHECK_MSG(parse(c.api, c.body, &req, &aerr) == 0, "%s: %s", rel, aerr.msg);
	free(c.body);
	return req;
}

static void test_captured_all(void)
{
	char dir[4096], path[8192];
	struct dirent **sub = NULL;
	int nsub, i, files = 0, apis[5] = { 0 };

	snprintf(dir, sizeof(dir), "%s/t/serve/captured", srcdir());
	nsub = scandir(dir, &sub, NULL, alphasort);
	CHECK_MSG(nsub > 0, "no %s", dir);
	for (i = 0; i < nsub; i++) {
		struct dirent **ent = NULL;
		int n, k;

		if (sub[i]->d_name[0] == '.') {
			free(sub[i]);
			continue;
		}
		snprintf(path, sizeof(path), "%s/%s", dir, sub[i]->d_name);
		n = scandir(path, &ent, NULL, alphasort);
		for (k = 0; k < n; k++) {
			struct capy_api_request req;
			struct capy_api_error aerr;
			struct capy_err err = { 0 };
			struct capture c;
			char file[8192 + 256], *out;

			if (!strstr(ent[k]->d_name, ".json")) {
				free(ent[k]);
				continue;
			}
			snprintf(file, sizeof(file), "%s/%s", path, ent[k]->d_name);
			free(ent[k]);
			CHECK_MSG(load_capture(file, &c), "cannot load %s", file);
			if (!c.body)
				continue;
			files++;
			apis[c.api]++;
			CHECK_MSG(parse(c.api, c.body, &req, &aerr) == 0, "%s: %s", file, aerr.msg);
			free(c.body);
			if (!req.doc)
				continue;
			CHECK(req.messages && capy_tval_len(req.messages) > 0);
			CHECK(capy_tval_len(req.tools) == req.n_tools);
			CHECK((req.tools != NULL) == (req.tools_json != NULL));
			out = render(tmpl_fixture, &req, &err);
			CHECK_MSG(out && strlen(out) > 0, "%s: fixture template: %s", file, err.msg);
			free(out);
			out = render(tmpl_share, &req, &err);
			CHECK_MSG(out && strstr(out, "<|im_start|>"), "%s: qwen3_5 template: %s", file,
				  err.msg);
			free(out);
			capy_api_request_release(&req);
		}
		free(ent);
		free(sub[i]);
	}
	free(sub);
	/* 26 captures of the shared reference, 18 of Codex and Qwen Code */
	CHECK_MSG(files >= 44, "%d captured bodies", files);
	CHECK(apis[CAPY_API_CHAT] && apis[CAPY_API_RESPONSES] && apis[CAPY_API_MESSAGES]);
}

/* --- writer harness ----------------------------------------------------------------------- */

enum { S_R, S_T, S_CS, S_CA, S_CE, S_LP, S_END, S_ERR };

struct step {
	int kind;
	const char *text; /* text, call name or arguments, logprob token */
	double lp;
	int finish;
	const char *stop;
};

#define R(s) { S_R, (s), 0, 0, NULL }
#define T(s) { S_T, (s), 0, 0, NULL }
#define CS(name) { S_CS, (name), 0, 0, NULL }
#define CA(s) { S_CA, (s), 0, 0, NULL }
#define CE() { S_CE, NULL, 0, 0, NULL }
#define LP(tok, v) { S_LP, (tok), (v), 0, NULL }
#define END(f, stop) { S_END, NULL, 0, (f), (stop) }
#define ERR() { S_ERR, NULL, 0, 0, NULL }

static const struct capy_api_usage USAGE = { 7, 0, 4, 0 };

/* Run a script through a writer for the request body; returns all bytes (malloc'd). Logprob
 * records get two alternatives: the token itself and "x" one nat lower. */
static char *run_writer(enum capy_api api, const char *body, const struct capy_api_meta *meta_in,
			const struct step *steps, size_t n, const struct capy_api_usage *u)
{
	struct capy_api_meta meta = { "fake1", "qwen3", 1767225600, 7, 0, NULL, 0 };
	struct capy_api_request req;
	struct capy_api_writer *w = NULL;
	struct capy_err err = { 0 };
	struct capy_buf all = { 0 }, buf = { 0 };
	int call = -1;
	size_t i;

	if (meta_in)
		meta = *meta_in;
	PARSE_OK(api, body, &req);
	CHECK_EQ_INT(capy_api_writer_new(&w, &req, &meta, &err), 0);
	if (!w)
		return strdup("");
	CHECK_EQ_INT(capy_api_write_begin(w, &buf), 0);
	capy_buf_add(&all, buf.data, buf.len);
	for (i = 0; i < n; i++) {
		const struct step *s = &steps[i];
		struct capy_outparse_event ev = { 0 };
		struct capy_api_top_logprob top[2];
		struct capy_api_logprob rec;
		struct capy_api_error ae;
		char id[32];

		capy_buf_reset(&buf);
		switch (s->kind) {
		case S_R:
		case S_T:
		case S_CA:
			ev.type = s->kind == S_R ? CAPY_OUTPARSE_REASONING :
				  s->kind == S_T ? CAPY_OUTPARSE_CONTENT : CAPY_OUTPARSE_CALL_ARGS;
			ev.text = s->text;
			ev.len = strlen(s->text);
			ev.index = call;
			CHECK_EQ_INT(capy_api_write_event(w, &ev, &buf), 0);
			break;
		case S_CS:
		case S_CE:
			if (s->kind == S_CS)
				call++;
			snprintf(id, sizeof(id), "ignored%d", call);
			ev.type = s->kind == S_CS ? CAPY_OUTPARSE_CALL_START : CAPY_OUTPARSE_CALL_END;
			ev.index = call;
			ev.id = id;
			ev.name = s->text ? s->text : "";
			CHECK_EQ_INT(capy_api_write_event(w, &ev, &buf), 0);
			break;
		case S_LP:
			top[0] = (struct capy_api_top_logprob){ s->text, strlen(s->text), s->lp };
			top[1] = (struct capy_api_top_logprob){ "x", 1, s->lp - 1 };
			rec = (struct capy_api_logprob){ s->text, strlen(s->text), s->lp, top, 2 };
			CHECK_EQ_INT(capy_api_write_logprobs(w, &rec, 1), 0);
			break;
		case S_END:
			CHECK_EQ_INT(capy_api_write_end(w, s->finish, s->stop, u ? u : &USAGE, &buf), 0);
			break;
		case S_ERR:
			capy_api_error_set(&ae, 500, NULL, "the engine failed");
			CHECK_EQ_INT(capy_api_write_error(w, &ae, &buf), 0);
			break;
		}
		capy_buf_add(&all, buf.data, buf.len);
	}
	capy_buf_release(&buf);
	capy_api_writer_free(w);
	capy_api_request_release(&req);
	capy_buf_puts(&all, "");
	return capy_buf_detach(&all, NULL);
}

/* The first line where two texts differ, for messages. */
static void show_diff(const char *got, const char *want)
{
	size_t i = 0, line = 1, start = 0;

	while (got[i] && got[i] == want[i]) {
		if (got[i] == '\n') {
			line++;
			start = i + 1;
		}
		i++;
	}
	fprintf(stderr, "  first difference on line %zu, column %zu\n  got:  %.300s\n  want: %.300s\n",
		line, i - start + 1, got + start, want + start);
}

#define CHECK_OUT(got, want)                                                                       \
	do {                                                                                       \
		const char *g_ = (got), *w_ = (want);                                              \
		bool same_ = !strcmp(g_, w_);                                                      \
		CHECK_MSG(same_, "output differs");                                                \
		if (!same_)                                                                        \
			show_diff(g_, w_);                                                         \
	} while (0)

/* A committed example (t/serve/expect/NAME) with each `from` replaced by `to`. */
static char *expect_file(const char *name, const char *const *subst, size_t n)
{
	struct capy_buf b = { 0 };
	char path[4096];
	size_t len, i;
	char *text;

	snprintf(path, sizeof(path), "%s/t/serve/expect/%s", srcdir(), name);
	text = read_text(path, &len);
	if (!text)
		return strdup("(missing)");
	for (i = 0; i < n; i += 2) {
		const char *p = text, *q;

		capy_buf_reset(&b);
		while ((q = strstr(p, subst[i]))) {
			capy_buf_add(&b, p, (size_t)(q - p));
			capy_buf_puts(&b, subst[i + 1]);
			p = q + strlen(subst[i]);
		}
		capy_buf_puts(&b, p);
		free(text);
		text = capy_buf_detach(&b, NULL);
	}
	return text;
}

#define RUN_WRITER(api, body, steps, u) run_writer((api), (body), NULL, (steps), ARRAY_SIZE(steps), (u))

/* --- responses against the captured examples --------------------------------------------- */

static const char CHAT_STREAM[] = "{\"model\":\"qwen3\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
				  "\"stream\":true,\"stream_options\":{\"include_usage\":true}}";
static const char CHAT_STREAM_TOOLS[] =
	"{\"model\":\"qwen3\",\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"}],\"stream\":true,"
	"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":"
	"{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}]}";
static const char RESP_STREAM[] = "{\"model\":\"qwen3\",\"input\":\"hi\",\"stream\":true}";
static const char MSG_STREAM[] = "{\"model\":\"qwen3\",\"max_tokens\":64,\"stream\":true,"
				 "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
static const char MSG_STREAM_TOOLS[] =
	"{\"model\":\"qwen3\",\"max_tokens\":64,\"stream\":true,\"messages\":[{\"role\":\"user\","
	"\"content\":\"weather?\"}],\"tools\":[{\"name\":\"get_weather\",\"input_schema\":{\"type\":"
	"\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}]}";

static const struct step HELLO[] = { T("Hello"), T(" from fake."), END(CAPY_API_FINISH_EOS, NULL) };
static const struct step WEATHER[] = {
	CS("get_weather"), CA("{\"cit"), CA("y\": \"Paris\"}"), CE(), END(CAPY_API_FINISH_EOS, NULL),
};

static void test_examples(void)
{
	static const char *const chat_usage[] = {
		"\"total_tokens\":11}",
		"\"total_tokens\":11,\"prompt_tokens_details\":{\"cached_tokens\":0},"
		"\"completion_tokens_details\":{\"reasoning_tokens\":0}}",
	};
	static const char *const call_id[] = { "call_fake1", "call_fake1_0" };
	static const char *const toolu_id[] = { "toolu_fake1", "toolu_fake1_0" };
	char *got, *want;

	/* chat: the role chunk, content deltas, the finish chunk, the usage chunk, [DONE] */
	got = RUN_WRITER(CAPY_API_CHAT, CHAT_STREAM, HELLO, NULL);
	want = expect_file("chat_stream.txt", chat_usage, ARRAY_SIZE(chat_usage));
	CHECK_OUT(got, want);
	free(got);
	free(want);

	/* chat tool call: id/type/name with "" arguments, then argument fragments */
	got = RUN_WRITER(CAPY_API_CHAT, CHAT_STREAM_TOOLS, WEATHER, NULL);
	want = expect_file("chat_stream_tools.txt", call_id, ARRAY_SIZE(call_id));
	CHECK_OUT(got, want);
	free(got);
	free(want);

	/* Responses: the whole event sequence, byte for byte */
	got = RUN_WRITER(CAPY_API_RESPONSES, RESP_STREAM, HELLO, NULL);
	want = expect_file("responses_stream.txt", NULL, 0);
	CHECK_OUT(got, want);
	free(got);
	free(want);

	/* Anthropic: message_start, ping, a text block, message_delta, message_stop */
	got = RUN_WRITER(CAPY_API_MESSAGES, MSG_STREAM, HELLO, NULL);
	want = expect_file("anthropic_stream.txt", NULL, 0);
	CHECK_OUT(got, want);
	free(got);
	free(want);

	got = RUN_WRITER(CAPY_API_MESSAGES, MSG_STREAM_TOOLS, WEATHER, NULL);
	want = expect_file("anthropic_stream_tools.txt", toolu_id, ARRAY_SIZE(toolu_id));
	CHECK_OUT(got, want);
	free(got);
	free(want);
}

/* --- responses: the other shapes ----------------------------------------------------------- */

static const char TOOLS2[] = "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":"
			     "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}},"
			     "{\"type\":\"function\",\"function\":{\"name\":\"get_time\"}}]";

static const struct step THINK_TWO_CALLS[] = {
	R("Two"), R(" calls."), T("Checking."), CS("get_weather"), CA("{\"city\": "), CA("\"Paris\"}"),
	CE(), CS("get_time"), CA("{}"), CE(), END(CAPY_API_FINISH_EOS, NULL),
};

static const struct capy_api_usage USAGE2 = { 20, 16, 9, 3 };

static char *body_with(const char *fmt, const char *arg)
{
	char *b = NULL;

	if (asprintf(&b, fmt, arg) < 0)
		return NULL;
	return b;
}

static void show(const char *name, const char *got)
{
	if (getenv("U_API_SHOW"))
		fprintf(stderr, "=== %s\n%s\n=== end\n", name, got);
}

#define CASE(name, got, want)                                                                      \
	do {                                                                                       \
		char *g__ = (got);                                                                 \
		show(name, g__);                                                                   \
		CHECK_OUT(g__, (want));                                                            \
		free(g__);                                                                         \
	} while (0)

static void test_chat_out(void)
{
	char *stream = body_with("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stream\":true,"
				 "\"tools\":%s}", TOOLS2);
	char *plain = body_with("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":%s}",
				TOOLS2);
	static const struct step text_only[] = { T("Hi "), T("there."), END(CAPY_API_FINISH_EOS, NULL) };
	static const struct step cut[] = { R("hmm"), T("Long"), END(CAPY_API_FINISH_LENGTH, NULL) };
	static const struct step stop[] = { T("a"), END(CAPY_API_FINISH_STOP, "END") };

	CASE("chat stream reasoning, text, two calls",
	     RUN_WRITER(CAPY_API_CHAT, stream, THINK_TWO_CALLS, &USAGE2),
	     "data: {\"id\":\"chatcmpl-fake1\",\"created\":1767225600,\"model\":\"qwen3\","
	     "\"system_fingerprint\":null,\"object\":\"chat.completion.chunk\",\"choices\":["
	     "{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,"
	     "\"finish_reason\":null}]}\n"
	     "\n"
	     "data: {\"id\":\"chatcmpl-fake1\",\"created\":1767225600,\"model\":\"qwen3\","
	     "\"system_fingerprint\":null,\"object\":\"chat.completion.chunk\",\"choices\":["
	     "{\"index\":0,\"delta\":{\"reasoning_content\":\"Two\"},\"logprobs\":null,"
	     "\"finish_reason\":null}]}\n"
	     "\n"
	     "data: {\"id\":\"chatcmpl-fake1\",\"created\":1767225600,\"model\":\"qwen3\","
	     "\"system_fingerprint\":null,\"object\":\"chat.completion.chunk\",\"choices\":["
	     "{\"index\":0,\"delta\":{\"reasoning_content\":\" calls.\"},\"logprobs\":null,"
	     "\"finish_reason\":null}]}\n"
	     "\n"
	     "data: {\"id\":\"chatcmpl-fake1\",\"created\":1767225600,\"model\":\"qwen3\","
	     "\"system_fingerprint\":null,\"object\":\"chat.completion.chunk\",\"choices\":["
	     "{\"index\":0,\"delta\":{\"content\":\"Checking.\"},\"logprobs\":null,"
	     "\"finish_reason\":null}]}\n"
	     "\n"
	     "data: {\"id\":\"chatcmpl-fake1\",\"created\":1767225600,\"model\":\"qwen3\","
	     "\"system_fingerprint\":null,\"object\":\"chat.completion.chunk\",\"choices\":["
	     "{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_fake1_0\","
	     "\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"\"}}]},"
	     "\"logprobs\":null,\"finish_reason\":null}]}\n"
	     "\n"
	     "data: {\"id\":\"chatcmpl-fake1\",\"created\":1767225600,\"model\":\"qwen3\","
	     "\"system_fingerprint\":null,\"object\":\"chat.completion.chunk\",\"choices\":["
	     "{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{"
	     "\"arguments\":\"{\\\"city\\\": \"}}]},\"logprobs\":null,\"finish_reason\":null}]}\n"
	     "\n"
	     "data: {\"id\":\"chatcmpl-fake1\",\"created\":1767225600,\"model\":\"qwen3\","
	     "\"system_fingerprint\":null,\"object\":\"chat.completion.chunk\",\"choices\":["
	     "{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{"
	     "\"arguments\":\"\\\"Paris\\\"}\"}}]},\"logprobs\":null,\"finish_reason\":null}]}\n"
	     "\n"
	     "data: {\"id\":\"chatcmpl-fake1\",\"created\":1767225600,\"model\":\"qwen3\","
	     "\"system_fingerprint\":null,\"object\":\"chat.completion.chunk\",\"choices\":["
	     "{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"call_fake1_1\","
	     "\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"arguments\":\"\"}}]},"
	     "\"logprobs\":null,\"finish_reason\":null}]}\n"
	     "\n"
	     "data: {\"id\":\"chatcmpl-fake1\",\"created\":1767225600,\"model\":\"qwen3\","
	     "\"system_fingerprint\":null,\"object\":\"chat.completion.chunk\",\"choices\":["
	     "{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"function\":{"
	     "\"arguments\":\"{}\"}}]},\"logprobs\":null,\"finish_reason\":null}]}\n"
	     "\n"
	     "data: {\"id\":\"chatcmpl-fake1\",\"created\":1767225600,\"model\":\"qwen3\","
	     "\"system_fingerprint\":null,\"object\":\"chat.completion.chunk\",\"choices\":["
	     "{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"tool_calls\"}]}\n"
	     "\n"
	     "data: [DONE]\n"
	     "\n");
	CASE("chat body, text", RUN_WRITER(CAPY_API_CHAT, plain, text_only, NULL),
	     "{\"id\":\"chatcmpl-fake1\",\"created\":1767225600,\"model\":\"qwen3\","
	     "\"system_fingerprint\":null,\"object\":\"chat.completion\",\"choices\":["
	     "{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"Hi there.\"},"
	     "\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":7,"
	     "\"completion_tokens\":4,\"total_tokens\":11,\"prompt_tokens_details\":{"
	     "\"cached_tokens\":0},\"completion_tokens_details\":{\"reasoning_tokens\":0}}}");
	CASE("chat body, reasoning and calls",
	     RUN_WRITER(CAPY_API_CHAT, plain, THINK_TWO_CALLS, &USAGE2),
	     "{\"id\":\"chatcmpl-fake1\",\"created\":1767225600,\"model\":\"qwen3\","
	     "\"system_fingerprint\":null,\"object\":\"chat.completion\",\"choices\":["
	     "{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"Checking.\","
	     "\"reasoning_content\":\"Two calls.\",\"tool_calls\":[{\"id\":\"call_fake1_0\","
	     "\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{"
	     "\\\"city\\\": \\\"Paris\\\"}\"}},{\"id\":\"call_fake1_1\",\"type\":\"function\","
	     "\"function\":{\"name\":\"get_time\",\"arguments\":\"{}\"}}]},\"logprobs\":null,"
	     "\"finish_reason\":\"tool_calls\"}],\"usage\":{\"prompt_tokens\":20,"
	     "\"completion_tokens\":9,\"total_tokens\":29,\"prompt_tokens_details\":{"
	     "\"cached_tokens\":16},\"completion_tokens_details\":{\"reasoning_tokens\":3}}}");
	CASE("chat body, cut by length", RUN_WRITER(CAPY_API_CHAT, plain, cut, NULL),
	     "{\"id\":\"chatcmpl-fake1\",\"created\":1767225600,\"model\":\"qwen3\","
	     "\"system_fingerprint\":null,\"object\":\"chat.completion\",\"choices\":["
	     "{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"Long\","
	     "\"reasoning_content\":\"hmm\"},\"logprobs\":null,\"finish_reason\":\"length\"}],"
	     "\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":4,\"total_tokens\":11,"
	     "\"prompt_tokens_details\":{\"cached_tokens\":0},\"completion_tokens_details\":{"
	     "\"reasoning_tokens\":0}}}");
	CASE("chat body, stop string", RUN_WRITER(CAPY_API_CHAT, plain, stop, NULL),
	     "{\"id\":\"chatcmpl-fake1\",\"created\":1767225600,\"model\":\"qwen3\","
	     "\"system_fingerprint\":null,\"object\":\"chat.completion\",\"choices\":["
	     "{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"a\"},"
	     "\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":7,"
	     "\"completion_tokens\":4,\"total_tokens\":11,\"prompt_tokens_details\":{"
	     "\"cached_tokens\":0},\"completion_tokens_details\":{\"reasoning_tokens\":0}}}");
	free(stream);
	free(plain);
}

static void test_logprobs_out(void)
{
	static const char chat_stream[] = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
					  "\"stream\":true,\"logprobs\":true,\"top_logprobs\":1}";
	static const char chat_body[] = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
					"\"logprobs\":true,\"top_logprobs\":2}";
	static const char chat_no[] = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
				      "\"stream\":true}";
	/* a token that is half of "€" (E2 82 AC), then the rest of it */
	static const struct step toks[] = {
		LP("Hel", -0.5), T("Hel"), LP("lo", -0.25), T("lo"), LP("\xe2\x82", -1.5),
		LP("\xac", -0.125), T("\xe2\x82\xac"), LP("<|im_end|>", -0.0625),
		END(CAPY_API_FINISH_EOS, NULL),
	};

	CASE("chat stream logprobs", RUN_WRITER(CAPY_API_CHAT, chat_stream, toks, NULL),
	     "data: {\"id\":\"chatcmpl-fake1\",\"created\":1767225600,\"model\":\"qwen3\","
	     "\"system_fingerprint\":null,\"object\":\"chat.completion.chunk\",\"choices\":["
	     "{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,"
	     "\"finish_reason\":null}]}\n"
	     "\n"
	     "data: {\"id\":\"chatcmpl-fake1\",\"created\":1767225600,\"model\":\"qwen3\","
	     "\"system_fingerprint\":null,\"object\":\"chat.completion.chunk\",\"choices\":["
	     "{\"index\":0,\"delta\":{\"content\":\"Hel\"},\"logprobs\":{\"content\":["
	     "{\"token\":\"Hel\",\"logprob\":-0.5,\"bytes\":[72,101,108],\"top_logprobs\":["
	     "{\"token\":\"Hel\",\"logprob\":-0.5,\"bytes\":[72,101,108]}]}],\"refusal\":null},"
	     "\"finish_reason\":null}]}\n"
	     "\n"
	     "data: {\"id\":\"chatcmpl-fake1\",\"created\":1767225600,\"model\":\"qwen3\","
	     "\"system_fingerprint\":null,\"object\":\"chat.completion.chunk\",\"choices\":["
	     "{\"index\":0,\"delta\":{\"content\":\"lo\"},\"logprobs\":{\"content\":["
	     "{\"token\":\"lo\",\"logprob\":-0.25,\"bytes\":[108,111],\"top_logprobs\":["
	     "{\"token\":\"lo\",\"logprob\":-0.25,\"bytes\":[108,111]}]}],\"refusal\":null},"
	     "\"finish_reason\":null}]}\n"
	     "\n"
	     "data: {\"id\":\"chatcmpl-fake1\",\"created\":1767225600,\"model\":\"qwen3\","
	     "\"system_fingerprint\":null,\"object\":\"chat.completion.chunk\",\"choices\":["
	     "{\"index\":0,\"delta\":{\"content\":\"€\"},\"logprobs\":{\"content\":["
	     "{\"token\":\"�\",\"logprob\":-1.5,\"bytes\":[226,130],\"top_logprobs\":["
	     "{\"token\":\"�\",\"logprob\":-1.5,\"bytes\":[226,130]}]},{\"token\":\"�\","
	     "\"logprob\":-0.125,\"bytes\":[172],\"top_logprobs\":[{\"token\":\"�\","
	     "\"logprob\":-0.125,\"bytes\":[172]}]}],\"refusal\":null},\"finish_reason\":null}]}\n"
	     "\n"
	     "data: {\"id\":\"chatcmpl-fake1\",\"created\":1767225600,\"model\":\"qwen3\","
	     "\"system_fingerprint\":null,\"object\":\"chat.completion.chunk\",\"choices\":["
	     "{\"index\":0,\"delta\":{},\"logprobs\":{\"content\":[{\"token\":\"<|im_end|>\","
	     "\"logprob\":-0.0625,\"bytes\":[60,124,105,109,95,101,110,100,124,62],"
	     "\"top_logprobs\":[{\"token\":\"<|im_end|>\",\"logprob\":-0.0625,\"bytes\":["
	     "60,124,105,109,95,101,110,100,124,62]}]}],\"refusal\":null},\"finish_reason\":\"stop\"}"
	     "]}\n"
	     "\n"
	     "data: [DONE]\n"
	     "\n");
	CASE("chat body logprobs", RUN_WRITER(CAPY_API_CHAT, chat_body, toks, NULL),
	     "{\"id\":\"chatcmpl-fake1\",\"created\":1767225600,\"model\":\"qwen3\","
	     "\"system_fingerprint\":null,\"object\":\"chat.completion\",\"choices\":["
	     "{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"Hello€\"},"
	     "\"logprobs\":{\"content\":[{\"token\":\"Hel\",\"logprob\":-0.5,\"bytes\":["
	     "72,101,108],\"top_logprobs\":[{\"token\":\"Hel\",\"logprob\":-0.5,\"bytes\":["
	     "72,101,108]},{\"token\":\"x\",\"logprob\":-1.5,\"bytes\":[120]}]},{"
	     "\"token\":\"lo\",\"logprob\":-0.25,\"bytes\":[108,111],\"top_logprobs\":["
	     "{\"token\":\"lo\",\"logprob\":-0.25,\"bytes\":[108,111]},{\"token\":\"x\","
	     "\"logprob\":-1.25,\"bytes\":[120]}]},{\"token\":\"�\",\"logprob\":-1.5,"
	     "\"bytes\":[226,130],\"top_logprobs\":[{\"token\":\"�\",\"logprob\":-1.5,"
	     "\"bytes\":[226,130]},{\"token\":\"x\",\"logprob\":-2.5,\"bytes\":[120]}]},"
	     "{\"token\":\"�\",\"logprob\":-0.125,\"bytes\":[172],\"top_logprobs\":["
	     "{\"token\":\"�\",\"logprob\":-0.125,\"bytes\":[172]},{\"token\":\"x\","
	     "\"logprob\":-1.125,\"bytes\":[120]}]},{\"token\":\"<|im_end|>\",\"logprob\":-0.0625,"
	     "\"bytes\":[60,124,105,109,95,101,110,100,124,62],\"top_logprobs\":["
	     "{\"token\":\"<|im_end|>\",\"logprob\":-0.0625,\"bytes\":[60,124,105,"
	     "109,95,101,110,100,124,62]},{\"token\":\"x\",\"logprob\":-1.0625,\"bytes\":["
	     "120]}]}],\"refusal\":null},\"finish_reason\":\"stop\"}],\"usage\":{"
	     "\"prompt_tokens\":7,\"completion_tokens\":4,\"total_tokens\":11,\"prompt_tokens_details"
	     "\":{\"cached_tokens\":0},\"completion_tokens_details\":{\"reasoning_tokens\":0}}}");
	CASE("chat stream, logprobs not asked", RUN_WRITER(CAPY_API_CHAT, chat_no, toks, NULL),
	     "data: {\"id\":\"chatcmpl-fake1\",\"created\":1767225600,\"model\":\"qwen3\","
	     "\"system_fingerprint\":null,\"object\":\"chat.completion.chunk\",\"choices\":["
	     "{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,"
	     "\"finish_reason\":null}]}\n"
	     "\n"
	     "data: {\"id\":\"chatcmpl-fake1\",\"created\":1767225600,\"model\":\"qwen3\","
	     "\"system_fingerprint\":null,\"object\":\"chat.completion.chunk\",\"choices\":["
	     "{\"index\":0,\"delta\":{\"content\":\"Hel\"},\"logprobs\":null,\"finish_reason\":null}]"
	     "}\n"
	     "\n"
	     "data: {\"id\":\"chatcmpl-fake1\",\"created\":1767225600,\"model\":\"qwen3\","
	     "\"system_fingerprint\":null,\"object\":\"chat.completion.chunk\",\"choices\":["
	     "{\"index\":0,\"delta\":{\"content\":\"lo\"},\"logprobs\":null,\"finish_reason\":null}]}"
	     "\n"
	     "\n"
	     "data: {\"id\":\"chatcmpl-fake1\",\"created\":1767225600,\"model\":\"qwen3\","
	     "\"system_fingerprint\":null,\"object\":\"chat.completion.chunk\",\"choices\":["
	     "{\"index\":0,\"delta\":{\"content\":\"€\"},\"logprobs\":null,\"finish_reason\":null}]}\n"
	     "\n"
	     "data: {\"id\":\"chatcmpl-fake1\",\"created\":1767225600,\"model\":\"qwen3\","
	     "\"system_fingerprint\":null,\"object\":\"chat.completion.chunk\",\"choices\":["
	     "{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}]}\n"
	     "\n"
	     "data: [DONE]\n"
	     "\n");
}

static void test_completions_out(void)
{
	static const char stream[] = "{\"prompt\":\"Say\",\"stream\":true,\"echo\":true,\"logprobs\":1,"
				     "\"stream_options\":{\"include_usage\":true}}";
	static const char body[] = "{\"prompt\":\"Say\",\"echo\":true,\"logprobs\":2}";
	static const char plain[] = "{\"prompt\":[1,2,3],\"max_tokens\":2}";
	static const struct step toks[] = {
		LP(" hi", -0.5), T(" hi"), LP("\xe2\x82", -1.5), LP("\xac", -0.125), T("\xe2\x82\xac"),
		END(CAPY_API_FINISH_LENGTH, NULL),
	};
	static const struct step text[] = { T(" a"), T(" b"), END(CAPY_API_FINISH_LENGTH, NULL) };
	struct capy_api_meta meta = { "c1", "qwen3", 1767225600, 1, 0, "Say", 3 };

	CASE("completions stream echo logprobs",
	     run_writer(CAPY_API_COMPLETIONS, stream, &meta, toks, ARRAY_SIZE(toks), NULL),
	     "data: {\"id\":\"cmpl-c1\",\"created\":1767225600,\"model\":\"qwen3\","
	     "\"system_fingerprint\":null,\"object\":\"text_completion\",\"choices\":["
	     "{\"index\":0,\"text\":\"Say\",\"logprobs\":null,\"finish_reason\":null}]}\n"
	     "\n"
	     "data: {\"id\":\"cmpl-c1\",\"created\":1767225600,\"model\":\"qwen3\","
	     "\"system_fingerprint\":null,\"object\":\"text_completion\",\"choices\":["
	     "{\"index\":0,\"text\":\" hi\",\"logprobs\":{\"tokens\":[\" hi\"],\"token_logprobs\":["
	     "-0.5],\"top_logprobs\":[{\" hi\":-0.5}],\"text_offset\":[3]},\"finish_reason\":null}]}\n"
	     "\n"
	     "data: {\"id\":\"cmpl-c1\",\"created\":1767225600,\"model\":\"qwen3\","
	     "\"system_fingerprint\":null,\"object\":\"text_completion\",\"choices\":["
	     "{\"index\":0,\"text\":\"€\",\"logprobs\":{\"tokens\":[\"�\",\"�\"],"
	     "\"token_logprobs\":[-1.5,-0.125],\"top_logprobs\":[{\"�\":-1.5},{\"�\":-0.125}],"
	     "\"text_offset\":[6,7]},\"finish_reason\":null}]}\n"
	     "\n"
	     "data: {\"id\":\"cmpl-c1\",\"created\":1767225600,\"model\":\"qwen3\","
	     "\"system_fingerprint\":null,\"object\":\"text_completion\",\"choices\":["
	     "{\"index\":0,\"text\":\"\",\"logprobs\":null,\"finish_reason\":\"length\"}]}\n"
	     "\n"
	     "data: {\"id\":\"cmpl-c1\",\"created\":1767225600,\"model\":\"qwen3\","
	     "\"system_fingerprint\":null,\"object\":\"text_completion\",\"choices\":["
	     "],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":4,\"total_tokens\":11,"
	     "\"prompt_tokens_details\":{\"cached_tokens\":0},\"completion_tokens_details\":{"
	     "\"reasoning_tokens\":0}}}\n"
	     "\n"
	     "data: [DONE]\n"
	     "\n");
	CASE("completions body echo logprobs",
	     run_writer(CAPY_API_COMPLETIONS, body, &meta, toks, ARRAY_SIZE(toks), NULL),
	     "{\"id\":\"cmpl-c1\",\"created\":1767225600,\"model\":\"qwen3\",\"system_fingerprint\":n"
	     "ull,\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\"Say hi€\","
	     "\"logprobs\":{\"tokens\":[\" hi\",\"�\",\"�\"],\"token_logprobs\":["
	     "-0.5,-1.5,-0.125],\"top_logprobs\":[{\" hi\":-0.5,\"x\":-1.5},{\"�\":-1.5,"
	     "\"x\":-2.5},{\"�\":-0.125,\"x\":-1.125}],\"text_offset\":[3,6,7]},\"finish_reason\":\"l"
	     "ength\"}],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":4,\"total_tokens\":11,"
	     "\"prompt_tokens_details\":{\"cached_tokens\":0},\"completion_tokens_details\":{"
	     "\"reasoning_tokens\":0}}}");
	CASE("completions body", RUN_WRITER(CAPY_API_COMPLETIONS, plain, text, NULL),
	     "{\"id\":\"cmpl-fake1\",\"created\":1767225600,\"model\":\"qwen3\",\"system_fingerprint\""
	     ":null,\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\" a b\","
	     "\"logprobs\":null,\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":7,"
	     "\"completion_tokens\":4,\"total_tokens\":11,\"prompt_tokens_details\":{"
	     "\"cached_tokens\":0},\"completion_tokens_details\":{\"reasoning_tokens\":0}}}");
}

static void test_responses_out(void)
{
	static const char tools[] =
		"[{\"type\":\"function\",\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\"}},"
		"{\"type\":\"custom\",\"name\":\"apply_patch\",\"description\":\"Patch.\"},"
		"{\"type\":\"namespace\",\"name\":\"agents\",\"tools\":[{\"type\":\"function\","
		"\"name\":\"spawn\",\"parameters\":{\"type\":\"object\"}}]},{\"type\":\"web_search\"}]";
	char *stream = body_with("{\"input\":\"hi\",\"stream\":true,\"instructions\":\"Be brief.\","
				 "\"temperature\":0.5,\"tools\":%s}", tools);
	char *plain = body_with("{\"input\":\"hi\",\"tools\":%s,\"metadata\":{\"k\":\"v\"}}", tools);
	static const char logprobs[] = "{\"input\":\"hi\",\"stream\":true,\"top_logprobs\":1,"
				       "\"include\":[\"message.output_text.logprobs\"]}";
	static const struct step think_call[] = {
		R("Let me check."), T("Checking."), CS("get_weather"), CA("{\"city\": "),
		CA("\"Paris\"}"), CE(), END(CAPY_API_FINISH_EOS, NULL),
	};
	static const struct step custom_ns[] = {
		CS("apply_patch"), CA("{\"input\": \"*** Begin"), CA(" Patch\"}"), CE(),
		CS("agents__spawn"), CA("{}"), CE(), END(CAPY_API_FINISH_EOS, NULL),
	};
	static const struct step cut[] = { T("Long"), END(CAPY_API_FINISH_LENGTH, NULL) };
	static const struct step lp[] = { LP("Hi", -0.5), T("Hi"), END(CAPY_API_FINISH_EOS, NULL) };

	CASE("responses stream reasoning, text, call",
	     RUN_WRITER(CAPY_API_RESPONSES, stream, think_call, &USAGE2),
	     "event: response.created\n"
	     "data: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{"
	     "\"id\":\"resp_fake1\",\"object\":\"response\",\"created_at\":1767225600,"
	     "\"status\":\"in_progress\",\"model\":\"qwen3\",\"output\":[],\"usage\":null,"
	     "\"error\":null,\"incomplete_details\":null,\"instructions\":\"Be brief.\","
	     "\"parallel_tool_calls\":true,\"tool_choice\":\"auto\",\"tools\":[{\"type\":\"function\""
	     ",\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\"}},{\"type\":\"custom\","
	     "\"name\":\"apply_patch\",\"description\":\"Patch.\"},{\"type\":\"namespace\","
	     "\"name\":\"agents\",\"tools\":[{\"type\":\"function\",\"name\":\"spawn\","
	     "\"parameters\":{\"type\":\"object\"}}]},{\"type\":\"web_search\"}],"
	     "\"temperature\":0.5,\"top_p\":1.0,\"metadata\":{}}}\n"
	     "\n"
	     "event: response.in_progress\n"
	     "data: {\"type\":\"response.in_progress\",\"sequence_number\":1,\"response\":{"
	     "\"id\":\"resp_fake1\",\"object\":\"response\",\"created_at\":1767225600,"
	     "\"status\":\"in_progress\",\"model\":\"qwen3\",\"output\":[],\"usage\":null,"
	     "\"error\":null,\"incomplete_details\":null,\"instructions\":\"Be brief.\","
	     "\"parallel_tool_calls\":true,\"tool_choice\":\"auto\",\"tools\":[{\"type\":\"function\""
	     ",\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\"}},{\"type\":\"custom\","
	     "\"name\":\"apply_patch\",\"description\":\"Patch.\"},{\"type\":\"namespace\","
	     "\"name\":\"agents\",\"tools\":[{\"type\":\"function\",\"name\":\"spawn\","
	     "\"parameters\":{\"type\":\"object\"}}]},{\"type\":\"web_search\"}],"
	     "\"temperature\":0.5,\"top_p\":1.0,\"metadata\":{}}}\n"
	     "\n"
	     "event: response.output_item.added\n"
	     "data: {\"type\":\"response.output_item.added\",\"sequence_number\":2,"
	     "\"output_index\":0,\"item\":{\"type\":\"reasoning\",\"id\":\"rs_fake1\","
	     "\"summary\":[],\"content\":[],\"encrypted_content\":null,\"status\":\"in_progress\"}}\n"
	     "\n"
	     "event: response.content_part.added\n"
	     "data: {\"type\":\"response.content_part.added\",\"sequence_number\":3,"
	     "\"item_id\":\"rs_fake1\",\"output_index\":0,\"content_index\":0,\"part\":{"
	     "\"type\":\"reasoning_text\",\"text\":\"\"}}\n"
	     "\n"
	     "event: response.reasoning_text.delta\n"
	     "data: {\"type\":\"response.reasoning_text.delta\",\"sequence_number\":4,"
	     "\"item_id\":\"rs_fake1\",\"output_index\":0,\"content_index\":0,\"delta\":\"Let me chec"
	     "k.\"}\n"
	     "\n"
	     "event: response.reasoning_text.done\n"
	     "data: {\"type\":\"response.reasoning_text.done\",\"sequence_number\":5,"
	     "\"item_id\":\"rs_fake1\",\"output_index\":0,\"content_index\":0,\"text\":\"Let me check"
	     ".\"}\n"
	     "\n"
	     "event: response.content_part.done\n"
	     "data: {\"type\":\"response.content_part.done\",\"sequence_number\":6,"
	     "\"item_id\":\"rs_fake1\",\"output_index\":0,\"content_index\":0,\"part\":{"
	     "\"type\":\"reasoning_text\",\"text\":\"Let me check.\"}}\n"
	     "\n"
	     "event: response.output_item.done\n"
	     "data: {\"type\":\"response.output_item.done\",\"sequence_number\":7,"
	     "\"output_index\":0,\"item\":{\"type\":\"reasoning\",\"id\":\"rs_fake1\","
	     "\"summary\":[],\"content\":[{\"type\":\"reasoning_text\",\"text\":\"Let me check.\"}],"
	     "\"encrypted_content\":null,\"status\":\"completed\"}}\n"
	     "\n"
	     "event: response.output_item.added\n"
	     "data: {\"type\":\"response.output_item.added\",\"sequence_number\":8,"
	     "\"output_index\":1,\"item\":{\"type\":\"message\",\"id\":\"msg_fake1\","
	     "\"status\":\"in_progress\",\"role\":\"assistant\",\"content\":[]}}\n"
	     "\n"
	     "event: response.content_part.added\n"
	     "data: {\"type\":\"response.content_part.added\",\"sequence_number\":9,"
	     "\"item_id\":\"msg_fake1\",\"output_index\":1,\"content_index\":0,\"part\":{"
	     "\"type\":\"output_text\",\"text\":\"\",\"annotations\":[],\"logprobs\":["
	     "]}}\n"
	     "\n"
	     "event: response.output_text.delta\n"
	     "data: {\"type\":\"response.output_text.delta\",\"sequence_number\":10,"
	     "\"item_id\":\"msg_fake1\",\"output_index\":1,\"content_index\":0,\"delta\":\"Checking.\""
	     ",\"logprobs\":[]}\n"
	     "\n"
	     "event: response.output_text.done\n"
	     "data: {\"type\":\"response.output_text.done\",\"sequence_number\":11,"
	     "\"item_id\":\"msg_fake1\",\"output_index\":1,\"content_index\":0,\"text\":\"Checking.\""
	     ",\"logprobs\":[]}\n"
	     "\n"
	     "event: response.content_part.done\n"
	     "data: {\"type\":\"response.content_part.done\",\"sequence_number\":12,"
	     "\"item_id\":\"msg_fake1\",\"output_index\":1,\"content_index\":0,\"part\":{"
	     "\"type\":\"output_text\",\"text\":\"Checking.\",\"annotations\":[],"
	     "\"logprobs\":[]}}\n"
	     "\n"
	     "event: response.output_item.done\n"
	     "data: {\"type\":\"response.output_item.done\",\"sequence_number\":13,"
	     "\"output_index\":1,\"item\":{\"type\":\"message\",\"id\":\"msg_fake1\","
	     "\"status\":\"completed\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\","
	     "\"text\":\"Checking.\",\"annotations\":[],\"logprobs\":[]}]}}\n"
	     "\n"
	     "event: response.output_item.added\n"
	     "data: {\"type\":\"response.output_item.added\",\"sequence_number\":14,"
	     "\"output_index\":2,\"item\":{\"type\":\"function_call\",\"id\":\"fc_fake1_0\","
	     "\"call_id\":\"call_fake1_0\",\"name\":\"get_weather\",\"arguments\":\"\","
	     "\"status\":\"in_progress\"}}\n"
	     "\n"
	     "event: response.function_call_arguments.delta\n"
	     "data: {\"type\":\"response.function_call_arguments.delta\",\"sequence_number\":15,"
	     "\"item_id\":\"fc_fake1_0\",\"output_index\":2,\"delta\":\"{\\\"city\\\": \"}\n"
	     "\n"
	     "event: response.function_call_arguments.delta\n"
	     "data: {\"type\":\"response.function_call_arguments.delta\",\"sequence_number\":16,"
	     "\"item_id\":\"fc_fake1_0\",\"output_index\":2,\"delta\":\"\\\"Paris\\\"}\"}\n"
	     "\n"
	     "event: response.function_call_arguments.done\n"
	     "data: {\"type\":\"response.function_call_arguments.done\",\"sequence_number\":17,"
	     "\"item_id\":\"fc_fake1_0\",\"output_index\":2,\"name\":\"get_weather\","
	     "\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\"}\n"
	     "\n"
	     "event: response.output_item.done\n"
	     "data: {\"type\":\"response.output_item.done\",\"sequence_number\":18,"
	     "\"output_index\":2,\"item\":{\"type\":\"function_call\",\"id\":\"fc_fake1_0\","
	     "\"call_id\":\"call_fake1_0\",\"name\":\"get_weather\",\"arguments\":\"{"
	     "\\\"city\\\": \\\"Paris\\\"}\",\"status\":\"completed\"}}\n"
	     "\n"
	     "event: response.completed\n"
	     "data: {\"type\":\"response.completed\",\"sequence_number\":19,\"response\":{"
	     "\"id\":\"resp_fake1\",\"object\":\"response\",\"created_at\":1767225600,"
	     "\"status\":\"completed\",\"model\":\"qwen3\",\"output\":[{\"type\":\"reasoning\","
	     "\"id\":\"rs_fake1\",\"summary\":[],\"content\":[{\"type\":\"reasoning_text\","
	     "\"text\":\"Let me check.\"}],\"encrypted_content\":null,\"status\":\"completed\"},"
	     "{\"type\":\"message\",\"id\":\"msg_fake1\",\"status\":\"completed\","
	     "\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"Checking.\","
	     "\"annotations\":[],\"logprobs\":[]}]},{\"type\":\"function_call\",\"id\":\"fc_fake1_0\""
	     ",\"call_id\":\"call_fake1_0\",\"name\":\"get_weather\",\"arguments\":\"{"
	     "\\\"city\\\": \\\"Paris\\\"}\",\"status\":\"completed\"}],\"usage\":{"
	     "\"input_tokens\":20,\"input_tokens_details\":{\"cached_tokens\":16},"
	     "\"output_tokens\":9,\"output_tokens_details\":{\"reasoning_tokens\":3},"
	     "\"total_tokens\":29},\"error\":null,\"incomplete_details\":null,\"instructions\":\"Be b"
	     "rief.\",\"parallel_tool_calls\":true,\"tool_choice\":\"auto\",\"tools\":["
	     "{\"type\":\"function\",\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\"}},"
	     "{\"type\":\"custom\",\"name\":\"apply_patch\",\"description\":\"Patch.\"},"
	     "{\"type\":\"namespace\",\"name\":\"agents\",\"tools\":[{\"type\":\"function\","
	     "\"name\":\"spawn\",\"parameters\":{\"type\":\"object\"}}]},{\"type\":\"web_search\"}],"
	     "\"temperature\":0.5,\"top_p\":1.0,\"metadata\":{}}}\n"
	     "\n");
	CASE("responses stream custom and namespace calls",
	     RUN_WRITER(CAPY_API_RESPONSES, stream, custom_ns, NULL),
	     "event: response.created\n"
	     "data: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{"
	     "\"id\":\"resp_fake1\",\"object\":\"response\",\"created_at\":1767225600,"
	     "\"status\":\"in_progress\",\"model\":\"qwen3\",\"output\":[],\"usage\":null,"
	     "\"error\":null,\"incomplete_details\":null,\"instructions\":\"Be brief.\","
	     "\"parallel_tool_calls\":true,\"tool_choice\":\"auto\",\"tools\":[{\"type\":\"function\""
	     ",\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\"}},{\"type\":\"custom\","
	     "\"name\":\"apply_patch\",\"description\":\"Patch.\"},{\"type\":\"namespace\","
	     "\"name\":\"agents\",\"tools\":[{\"type\":\"function\",\"name\":\"spawn\","
	     "\"parameters\":{\"type\":\"object\"}}]},{\"type\":\"web_search\"}],"
	     "\"temperature\":0.5,\"top_p\":1.0,\"metadata\":{}}}\n"
	     "\n"
	     "event: response.in_progress\n"
	     "data: {\"type\":\"response.in_progress\",\"sequence_number\":1,\"response\":{"
	     "\"id\":\"resp_fake1\",\"object\":\"response\",\"created_at\":1767225600,"
	     "\"status\":\"in_progress\",\"model\":\"qwen3\",\"output\":[],\"usage\":null,"
	     "\"error\":null,\"incomplete_details\":null,\"instructions\":\"Be brief.\","
	     "\"parallel_tool_calls\":true,\"tool_choice\":\"auto\",\"tools\":[{\"type\":\"function\""
	     ",\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\"}},{\"type\":\"custom\","
	     "\"name\":\"apply_patch\",\"description\":\"Patch.\"},{\"type\":\"namespace\","
	     "\"name\":\"agents\",\"tools\":[{\"type\":\"function\",\"name\":\"spawn\","
	     "\"parameters\":{\"type\":\"object\"}}]},{\"type\":\"web_search\"}],"
	     "\"temperature\":0.5,\"top_p\":1.0,\"metadata\":{}}}\n"
	     "\n"
	     "event: response.output_item.added\n"
	     "data: {\"type\":\"response.output_item.added\",\"sequence_number\":2,"
	     "\"output_index\":0,\"item\":{\"type\":\"custom_tool_call\",\"id\":\"ctc_fake1_0\","
	     "\"call_id\":\"call_fake1_0\",\"name\":\"apply_patch\",\"input\":\"\"}}\n"
	     "\n"
	     "event: response.custom_tool_call_input.delta\n"
	     "data: {\"type\":\"response.custom_tool_call_input.delta\",\"sequence_number\":3,"
	     "\"item_id\":\"ctc_fake1_0\",\"output_index\":0,\"delta\":\"*** Begin Patch\"}\n"
	     "\n"
	     "event: response.custom_tool_call_input.done\n"
	     "data: {\"type\":\"response.custom_tool_call_input.done\",\"sequence_number\":4,"
	     "\"item_id\":\"ctc_fake1_0\",\"output_index\":0,\"input\":\"*** Begin Patch\"}\n"
	     "\n"
	     "event: response.output_item.done\n"
	     "data: {\"type\":\"response.output_item.done\",\"sequence_number\":5,"
	     "\"output_index\":0,\"item\":{\"type\":\"custom_tool_call\",\"id\":\"ctc_fake1_0\","
	     "\"call_id\":\"call_fake1_0\",\"name\":\"apply_patch\",\"input\":\"*** Begin Patch\"}}\n"
	     "\n"
	     "event: response.output_item.added\n"
	     "data: {\"type\":\"response.output_item.added\",\"sequence_number\":6,"
	     "\"output_index\":1,\"item\":{\"type\":\"function_call\",\"id\":\"fc_fake1_1\","
	     "\"call_id\":\"call_fake1_1\",\"namespace\":\"agents\",\"name\":\"spawn\","
	     "\"arguments\":\"\",\"status\":\"in_progress\"}}\n"
	     "\n"
	     "event: response.function_call_arguments.delta\n"
	     "data: {\"type\":\"response.function_call_arguments.delta\",\"sequence_number\":7,"
	     "\"item_id\":\"fc_fake1_1\",\"output_index\":1,\"delta\":\"{}\"}\n"
	     "\n"
	     "event: response.function_call_arguments.done\n"
	     "data: {\"type\":\"response.function_call_arguments.done\",\"sequence_number\":8,"
	     "\"item_id\":\"fc_fake1_1\",\"output_index\":1,\"name\":\"spawn\",\"arguments\":\"{"
	     "}\"}\n"
	     "\n"
	     "event: response.output_item.done\n"
	     "data: {\"type\":\"response.output_item.done\",\"sequence_number\":9,"
	     "\"output_index\":1,\"item\":{\"type\":\"function_call\",\"id\":\"fc_fake1_1\","
	     "\"call_id\":\"call_fake1_1\",\"namespace\":\"agents\",\"name\":\"spawn\","
	     "\"arguments\":\"{}\",\"status\":\"completed\"}}\n"
	     "\n"
	     "event: response.completed\n"
	     "data: {\"type\":\"response.completed\",\"sequence_number\":10,\"response\":{"
	     "\"id\":\"resp_fake1\",\"object\":\"response\",\"created_at\":1767225600,"
	     "\"status\":\"completed\",\"model\":\"qwen3\",\"output\":[{\"type\":\"custom_tool_call\""
	     ",\"id\":\"ctc_fake1_0\",\"call_id\":\"call_fake1_0\",\"name\":\"apply_patch\","
	     "\"input\":\"*** Begin Patch\"},{\"type\":\"function_call\",\"id\":\"fc_fake1_1\","
	     "\"call_id\":\"call_fake1_1\",\"namespace\":\"agents\",\"name\":\"spawn\","
	     "\"arguments\":\"{}\",\"status\":\"completed\"}],\"usage\":{\"input_tokens\":7,"
	     "\"input_tokens_details\":{\"cached_tokens\":0},\"output_tokens\":4,"
	     "\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":11},"
	     "\"error\":null,\"incomplete_details\":null,\"instructions\":\"Be brief.\","
	     "\"parallel_tool_calls\":true,\"tool_choice\":\"auto\",\"tools\":[{\"type\":\"function\""
	     ",\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\"}},{\"type\":\"custom\","
	     "\"name\":\"apply_patch\",\"description\":\"Patch.\"},{\"type\":\"namespace\","
	     "\"name\":\"agents\",\"tools\":[{\"type\":\"function\",\"name\":\"spawn\","
	     "\"parameters\":{\"type\":\"object\"}}]},{\"type\":\"web_search\"}],"
	     "\"temperature\":0.5,\"top_p\":1.0,\"metadata\":{}}}\n"
	     "\n");
	CASE("responses stream incomplete", RUN_WRITER(CAPY_API_RESPONSES, stream, cut, NULL),
	     "event: response.created\n"
	     "data: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{"
	     "\"id\":\"resp_fake1\",\"object\":\"response\",\"created_at\":1767225600,"
	     "\"status\":\"in_progress\",\"model\":\"qwen3\",\"output\":[],\"usage\":null,"
	     "\"error\":null,\"incomplete_details\":null,\"instructions\":\"Be brief.\","
	     "\"parallel_tool_calls\":true,\"tool_choice\":\"auto\",\"tools\":[{\"type\":\"function\""
	     ",\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\"}},{\"type\":\"custom\","
	     "\"name\":\"apply_patch\",\"description\":\"Patch.\"},{\"type\":\"namespace\","
	     "\"name\":\"agents\",\"tools\":[{\"type\":\"function\",\"name\":\"spawn\","
	     "\"parameters\":{\"type\":\"object\"}}]},{\"type\":\"web_search\"}],"
	     "\"temperature\":0.5,\"top_p\":1.0,\"metadata\":{}}}\n"
	     "\n"
	     "event: response.in_progress\n"
	     "data: {\"type\":\"response.in_progress\",\"sequence_number\":1,\"response\":{"
	     "\"id\":\"resp_fake1\",\"object\":\"response\",\"created_at\":1767225600,"
	     "\"status\":\"in_progress\",\"model\":\"qwen3\",\"output\":[],\"usage\":null,"
	     "\"error\":null,\"incomplete_details\":null,\"instructions\":\"Be brief.\","
	     "\"parallel_tool_calls\":true,\"tool_choice\":\"auto\",\"tools\":[{\"type\":\"function\""
	     ",\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\"}},{\"type\":\"custom\","
	     "\"name\":\"apply_patch\",\"description\":\"Patch.\"},{\"type\":\"namespace\","
	     "\"name\":\"agents\",\"tools\":[{\"type\":\"function\",\"name\":\"spawn\","
	     "\"parameters\":{\"type\":\"object\"}}]},{\"type\":\"web_search\"}],"
	     "\"temperature\":0.5,\"top_p\":1.0,\"metadata\":{}}}\n"
	     "\n"
	     "event: response.output_item.added\n"
	     "data: {\"type\":\"response.output_item.added\",\"sequence_number\":2,"
	     "\"output_index\":0,\"item\":{\"type\":\"message\",\"id\":\"msg_fake1\","
	     "\"status\":\"in_progress\",\"role\":\"assistant\",\"content\":[]}}\n"
	     "\n"
	     "event: response.content_part.added\n"
	     "data: {\"type\":\"response.content_part.added\",\"sequence_number\":3,"
	     "\"item_id\":\"msg_fake1\",\"output_index\":0,\"content_index\":0,\"part\":{"
	     "\"type\":\"output_text\",\"text\":\"\",\"annotations\":[],\"logprobs\":["
	     "]}}\n"
	     "\n"
	     "event: response.output_text.delta\n"
	     "data: {\"type\":\"response.output_text.delta\",\"sequence_number\":4,"
	     "\"item_id\":\"msg_fake1\",\"output_index\":0,\"content_index\":0,\"delta\":\"Long\","
	     "\"logprobs\":[]}\n"
	     "\n"
	     "event: response.output_text.done\n"
	     "data: {\"type\":\"response.output_text.done\",\"sequence_number\":5,"
	     "\"item_id\":\"msg_fake1\",\"output_index\":0,\"content_index\":0,\"text\":\"Long\","
	     "\"logprobs\":[]}\n"
	     "\n"
	     "event: response.content_part.done\n"
	     "data: {\"type\":\"response.content_part.done\",\"sequence_number\":6,"
	     "\"item_id\":\"msg_fake1\",\"output_index\":0,\"content_index\":0,\"part\":{"
	     "\"type\":\"output_text\",\"text\":\"Long\",\"annotations\":[],\"logprobs\":["
	     "]}}\n"
	     "\n"
	     "event: response.output_item.done\n"
	     "data: {\"type\":\"response.output_item.done\",\"sequence_number\":7,"
	     "\"output_index\":0,\"item\":{\"type\":\"message\",\"id\":\"msg_fake1\","
	     "\"status\":\"incomplete\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\""
	     ",\"text\":\"Long\",\"annotations\":[],\"logprobs\":[]}]}}\n"
	     "\n"
	     "event: response.incomplete\n"
	     "data: {\"type\":\"response.incomplete\",\"sequence_number\":8,\"response\":{"
	     "\"id\":\"resp_fake1\",\"object\":\"response\",\"created_at\":1767225600,"
	     "\"status\":\"incomplete\",\"model\":\"qwen3\",\"output\":[{\"type\":\"message\","
	     "\"id\":\"msg_fake1\",\"status\":\"incomplete\",\"role\":\"assistant\","
	     "\"content\":[{\"type\":\"output_text\",\"text\":\"Long\",\"annotations\":["
	     "],\"logprobs\":[]}]}],\"usage\":{\"input_tokens\":7,\"input_tokens_details\":{"
	     "\"cached_tokens\":0},\"output_tokens\":4,\"output_tokens_details\":{"
	     "\"reasoning_tokens\":0},\"total_tokens\":11},\"error\":null,\"incomplete_details\":{"
	     "\"reason\":\"max_output_tokens\"},\"instructions\":\"Be brief.\",\"parallel_tool_calls\""
	     ":true,\"tool_choice\":\"auto\",\"tools\":[{\"type\":\"function\",\"name\":\"get_weather"
	     "\",\"parameters\":{\"type\":\"object\"}},{\"type\":\"custom\",\"name\":\"apply_patch\","
	     "\"description\":\"Patch.\"},{\"type\":\"namespace\",\"name\":\"agents\","
	     "\"tools\":[{\"type\":\"function\",\"name\":\"spawn\",\"parameters\":{"
	     "\"type\":\"object\"}}]},{\"type\":\"web_search\"}],\"temperature\":0.5,"
	     "\"top_p\":1.0,\"metadata\":{}}}\n"
	     "\n");
	CASE("responses body reasoning, text, call",
	     RUN_WRITER(CAPY_API_RESPONSES, plain, think_call, &USAGE2),
	     "{\"id\":\"resp_fake1\",\"object\":\"response\",\"created_at\":1767225600,"
	     "\"status\":\"completed\",\"model\":\"qwen3\",\"output\":[{\"type\":\"reasoning\","
	     "\"id\":\"rs_fake1\",\"summary\":[],\"content\":[{\"type\":\"reasoning_text\","
	     "\"text\":\"Let me check.\"}],\"encrypted_content\":null,\"status\":\"completed\"},"
	     "{\"type\":\"message\",\"id\":\"msg_fake1\",\"status\":\"completed\","
	     "\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"Checking.\","
	     "\"annotations\":[],\"logprobs\":[]}]},{\"type\":\"function_call\",\"id\":\"fc_fake1_0\""
	     ",\"call_id\":\"call_fake1_0\",\"name\":\"get_weather\",\"arguments\":\"{"
	     "\\\"city\\\": \\\"Paris\\\"}\",\"status\":\"completed\"}],\"usage\":{"
	     "\"input_tokens\":20,\"input_tokens_details\":{\"cached_tokens\":16},"
	     "\"output_tokens\":9,\"output_tokens_details\":{\"reasoning_tokens\":3},"
	     "\"total_tokens\":29},\"error\":null,\"incomplete_details\":null,\"instructions\":null,"
	     "\"parallel_tool_calls\":true,\"tool_choice\":\"auto\",\"tools\":[{\"type\":\"function\""
	     ",\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\"}},{\"type\":\"custom\","
	     "\"name\":\"apply_patch\",\"description\":\"Patch.\"},{\"type\":\"namespace\","
	     "\"name\":\"agents\",\"tools\":[{\"type\":\"function\",\"name\":\"spawn\","
	     "\"parameters\":{\"type\":\"object\"}}]},{\"type\":\"web_search\"}],"
	     "\"temperature\":1.0,\"top_p\":1.0,\"metadata\":{\"k\":\"v\"}}");
	CASE("responses body custom and namespace calls",
	     RUN_WRITER(CAPY_API_RESPONSES, plain, custom_ns, NULL),
	     "{\"id\":\"resp_fake1\",\"object\":\"response\",\"created_at\":1767225600,"
	     "\"status\":\"completed\",\"model\":\"qwen3\",\"output\":[{\"type\":\"custom_tool_call\""
	     ",\"id\":\"ctc_fake1_0\",\"call_id\":\"call_fake1_0\",\"name\":\"apply_patch\","
	     "\"input\":\"*** Begin Patch\"},{\"type\":\"function_call\",\"id\":\"fc_fake1_1\","
	     "\"call_id\":\"call_fake1_1\",\"namespace\":\"agents\",\"name\":\"spawn\","
	     "\"arguments\":\"{}\",\"status\":\"completed\"}],\"usage\":{\"input_tokens\":7,"
	     "\"input_tokens_details\":{\"cached_tokens\":0},\"output_tokens\":4,"
	     "\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":11},"
	     "\"error\":null,\"incomplete_details\":null,\"instructions\":null,\"parallel_tool_calls\""
	     ":true,\"tool_choice\":\"auto\",\"tools\":[{\"type\":\"function\",\"name\":\"get_weather"
	     "\",\"parameters\":{\"type\":\"object\"}},{\"type\":\"custom\",\"name\":\"apply_patch\","
	     "\"description\":\"Patch.\"},{\"type\":\"namespace\",\"name\":\"agents\","
	     "\"tools\":[{\"type\":\"function\",\"name\":\"spawn\",\"parameters\":{"
	     "\"type\":\"object\"}}]},{\"type\":\"web_search\"}],\"temperature\":1.0,"
	     "\"top_p\":1.0,\"metadata\":{\"k\":\"v\"}}");
	CASE("responses stream logprobs", RUN_WRITER(CAPY_API_RESPONSES, logprobs, lp, NULL),
	     "event: response.created\n"
	     "data: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{"
	     "\"id\":\"resp_fake1\",\"object\":\"response\",\"created_at\":1767225600,"
	     "\"status\":\"in_progress\",\"model\":\"qwen3\",\"output\":[],\"usage\":null,"
	     "\"error\":null,\"incomplete_details\":null,\"instructions\":null,\"parallel_tool_calls\""
	     ":true,\"tool_choice\":\"auto\",\"tools\":[],\"temperature\":1.0,\"top_p\":1.0,"
	     "\"metadata\":{}}}\n"
	     "\n"
	     "event: response.in_progress\n"
	     "data: {\"type\":\"response.in_progress\",\"sequence_number\":1,\"response\":{"
	     "\"id\":\"resp_fake1\",\"object\":\"response\",\"created_at\":1767225600,"
	     "\"status\":\"in_progress\",\"model\":\"qwen3\",\"output\":[],\"usage\":null,"
	     "\"error\":null,\"incomplete_details\":null,\"instructions\":null,\"parallel_tool_calls\""
	     ":true,\"tool_choice\":\"auto\",\"tools\":[],\"temperature\":1.0,\"top_p\":1.0,"
	     "\"metadata\":{}}}\n"
	     "\n"
	     "event: response.output_item.added\n"
	     "data: {\"type\":\"response.output_item.added\",\"sequence_number\":2,"
	     "\"output_index\":0,\"item\":{\"type\":\"message\",\"id\":\"msg_fake1\","
	     "\"status\":\"in_progress\",\"role\":\"assistant\",\"content\":[]}}\n"
	     "\n"
	     "event: response.content_part.added\n"
	     "data: {\"type\":\"response.content_part.added\",\"sequence_number\":3,"
	     "\"item_id\":\"msg_fake1\",\"output_index\":0,\"content_index\":0,\"part\":{"
	     "\"type\":\"output_text\",\"text\":\"\",\"annotations\":[],\"logprobs\":["
	     "]}}\n"
	     "\n"
	     "event: response.output_text.delta\n"
	     "data: {\"type\":\"response.output_text.delta\",\"sequence_number\":4,"
	     "\"item_id\":\"msg_fake1\",\"output_index\":0,\"content_index\":0,\"delta\":\"Hi\","
	     "\"logprobs\":[{\"token\":\"Hi\",\"logprob\":-0.5,\"bytes\":[72,105],"
	     "\"top_logprobs\":[{\"token\":\"Hi\",\"logprob\":-0.5,\"bytes\":[72,"
	     "105]}]}]}\n"
	     "\n"
	     "event: response.output_text.done\n"
	     "data: {\"type\":\"response.output_text.done\",\"sequence_number\":5,"
	     "\"item_id\":\"msg_fake1\",\"output_index\":0,\"content_index\":0,\"text\":\"Hi\","
	     "\"logprobs\":[{\"token\":\"Hi\",\"logprob\":-0.5,\"bytes\":[72,105],"
	     "\"top_logprobs\":[{\"token\":\"Hi\",\"logprob\":-0.5,\"bytes\":[72,"
	     "105]}]}]}\n"
	     "\n"
	     "event: response.content_part.done\n"
	     "data: {\"type\":\"response.content_part.done\",\"sequence_number\":6,"
	     "\"item_id\":\"msg_fake1\",\"output_index\":0,\"content_index\":0,\"part\":{"
	     "\"type\":\"output_text\",\"text\":\"Hi\",\"annotations\":[],\"logprobs\":["
	     "{\"token\":\"Hi\",\"logprob\":-0.5,\"bytes\":[72,105],\"top_logprobs\":["
	     "{\"token\":\"Hi\",\"logprob\":-0.5,\"bytes\":[72,105]}]}]}}\n"
	     "\n"
	     "event: response.output_item.done\n"
	     "data: {\"type\":\"response.output_item.done\",\"sequence_number\":7,"
	     "\"output_index\":0,\"item\":{\"type\":\"message\",\"id\":\"msg_fake1\","
	     "\"status\":\"completed\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\","
	     "\"text\":\"Hi\",\"annotations\":[],\"logprobs\":[{\"token\":\"Hi\","
	     "\"logprob\":-0.5,\"bytes\":[72,105],\"top_logprobs\":[{\"token\":\"Hi\","
	     "\"logprob\":-0.5,\"bytes\":[72,105]}]}]}]}}\n"
	     "\n"
	     "event: response.completed\n"
	     "data: {\"type\":\"response.completed\",\"sequence_number\":8,\"response\":{"
	     "\"id\":\"resp_fake1\",\"object\":\"response\",\"created_at\":1767225600,"
	     "\"status\":\"completed\",\"model\":\"qwen3\",\"output\":[{\"type\":\"message\","
	     "\"id\":\"msg_fake1\",\"status\":\"completed\",\"role\":\"assistant\","
	     "\"content\":[{\"type\":\"output_text\",\"text\":\"Hi\",\"annotations\":["
	     "],\"logprobs\":[{\"token\":\"Hi\",\"logprob\":-0.5,\"bytes\":[72,105],"
	     "\"top_logprobs\":[{\"token\":\"Hi\",\"logprob\":-0.5,\"bytes\":[72,"
	     "105]}]}]}]}],\"usage\":{\"input_tokens\":7,\"input_tokens_details\":{"
	     "\"cached_tokens\":0},\"output_tokens\":4,\"output_tokens_details\":{"
	     "\"reasoning_tokens\":0},\"total_tokens\":11},\"error\":null,\"incomplete_details\":null"
	     ",\"instructions\":null,\"parallel_tool_calls\":true,\"tool_choice\":\"auto\","
	     "\"tools\":[],\"temperature\":1.0,\"top_p\":1.0,\"metadata\":{}}}\n"
	     "\n");
	free(stream);
	free(plain);
}

static void test_messages_out(void)
{
	static const char tools[] =
		"[{\"name\":\"get_weather\",\"input_schema\":{\"type\":\"object\"}},"
		"{\"name\":\"get_time\",\"input_schema\":{\"type\":\"object\"}}]";
	char *stream = body_with("{\"max_tokens\":64,\"stream\":true,\"messages\":[{\"role\":\"user\","
				 "\"content\":\"hi\"}],\"tools\":%s,\"thinking\":{\"type\":\"enabled\","
				 "\"budget_tokens\":64}}", tools);
	char *plain = body_with("{\"max_tokens\":64,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
				"\"tools\":%s,\"stop_sequences\":[\"END\"]}", tools);
	static const struct step stop[] = { T("a"), END(CAPY_API_FINISH_STOP, "END") };
	static const struct step cut[] = { R("hmm"), END(CAPY_API_FINISH_LENGTH, NULL) };

	CASE("messages stream thinking, text, two tool_use",
	     RUN_WRITER(CAPY_API_MESSAGES, stream, THINK_TWO_CALLS, &USAGE2),
	     "event: message_start\n"
	     "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_fake1\","
	     "\"type\":\"message\",\"role\":\"assistant\",\"model\":\"qwen3\",\"content\":["
	     "],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":7,"
	     "\"output_tokens\":1,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0}}}\n"
	     "\n"
	     "event: ping\n"
	     "data: {\"type\":\"ping\"}\n"
	     "\n"
	     "event: content_block_start\n"
	     "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{"
	     "\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n"
	     "\n"
	     "event: content_block_delta\n"
	     "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delt"
	     "a\",\"thinking\":\"Two\"}}\n"
	     "\n"
	     "event: content_block_delta\n"
	     "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delt"
	     "a\",\"thinking\":\" calls.\"}}\n"
	     "\n"
	     "event: content_block_delta\n"
	     "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_del"
	     "ta\",\"signature\":\"capy.fake1.0\"}}\n"
	     "\n"
	     "event: content_block_stop\n"
	     "data: {\"type\":\"content_block_stop\",\"index\":0}\n"
	     "\n"
	     "event: content_block_start\n"
	     "data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{"
	     "\"type\":\"text\",\"text\":\"\"}}\n"
	     "\n"
	     "event: content_block_delta\n"
	     "data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\","
	     "\"text\":\"Checking.\"}}\n"
	     "\n"
	     "event: content_block_stop\n"
	     "data: {\"type\":\"content_block_stop\",\"index\":1}\n"
	     "\n"
	     "event: content_block_start\n"
	     "data: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{"
	     "\"type\":\"tool_use\",\"id\":\"toolu_fake1_0\",\"name\":\"get_weather\","
	     "\"input\":{}}}\n"
	     "\n"
	     "event: content_block_delta\n"
	     "data: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_de"
	     "lta\",\"partial_json\":\"{\\\"city\\\": \"}}\n"
	     "\n"
	     "event: content_block_delta\n"
	     "data: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_de"
	     "lta\",\"partial_json\":\"\\\"Paris\\\"}\"}}\n"
	     "\n"
	     "event: content_block_stop\n"
	     "data: {\"type\":\"content_block_stop\",\"index\":2}\n"
	     "\n"
	     "event: content_block_start\n"
	     "data: {\"type\":\"content_block_start\",\"index\":3,\"content_block\":{"
	     "\"type\":\"tool_use\",\"id\":\"toolu_fake1_1\",\"name\":\"get_time\","
	     "\"input\":{}}}\n"
	     "\n"
	     "event: content_block_delta\n"
	     "data: {\"type\":\"content_block_delta\",\"index\":3,\"delta\":{\"type\":\"input_json_de"
	     "lta\",\"partial_json\":\"{}\"}}\n"
	     "\n"
	     "event: content_block_stop\n"
	     "data: {\"type\":\"content_block_stop\",\"index\":3}\n"
	     "\n"
	     "event: message_delta\n"
	     "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\","
	     "\"stop_sequence\":null},\"usage\":{\"output_tokens\":9}}\n"
	     "\n"
	     "event: message_stop\n"
	     "data: {\"type\":\"message_stop\"}\n"
	     "\n");
	CASE("messages stream stop sequence", RUN_WRITER(CAPY_API_MESSAGES, stream, stop, NULL),
	     "event: message_start\n"
	     "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_fake1\","
	     "\"type\":\"message\",\"role\":\"assistant\",\"model\":\"qwen3\",\"content\":["
	     "],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":7,"
	     "\"output_tokens\":1,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0}}}\n"
	     "\n"
	     "event: ping\n"
	     "data: {\"type\":\"ping\"}\n"
	     "\n"
	     "event: content_block_start\n"
	     "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{"
	     "\"type\":\"text\",\"text\":\"\"}}\n"
	     "\n"
	     "event: content_block_delta\n"
	     "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\","
	     "\"text\":\"a\"}}\n"
	     "\n"
	     "event: content_block_stop\n"
	     "data: {\"type\":\"content_block_stop\",\"index\":0}\n"
	     "\n"
	     "event: message_delta\n"
	     "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"stop_sequence\","
	     "\"stop_sequence\":\"END\"},\"usage\":{\"output_tokens\":4}}\n"
	     "\n"
	     "event: message_stop\n"
	     "data: {\"type\":\"message_stop\"}\n"
	     "\n");
	CASE("messages stream max_tokens", RUN_WRITER(CAPY_API_MESSAGES, stream, cut, NULL),
	     "event: message_start\n"
	     "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_fake1\","
	     "\"type\":\"message\",\"role\":\"assistant\",\"model\":\"qwen3\",\"content\":["
	     "],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":7,"
	     "\"output_tokens\":1,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0}}}\n"
	     "\n"
	     "event: ping\n"
	     "data: {\"type\":\"ping\"}\n"
	     "\n"
	     "event: content_block_start\n"
	     "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{"
	     "\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n"
	     "\n"
	     "event: content_block_delta\n"
	     "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delt"
	     "a\",\"thinking\":\"hmm\"}}\n"
	     "\n"
	     "event: content_block_delta\n"
	     "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_del"
	     "ta\",\"signature\":\"capy.fake1.0\"}}\n"
	     "\n"
	     "event: content_block_stop\n"
	     "data: {\"type\":\"content_block_stop\",\"index\":0}\n"
	     "\n"
	     "event: message_delta\n"
	     "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\","
	     "\"stop_sequence\":null},\"usage\":{\"output_tokens\":4}}\n"
	     "\n"
	     "event: message_stop\n"
	     "data: {\"type\":\"message_stop\"}\n"
	     "\n");
	CASE("messages body thinking, text, two tool_use",
	     RUN_WRITER(CAPY_API_MESSAGES, plain, THINK_TWO_CALLS, &USAGE2),
	     "{\"id\":\"msg_fake1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"qwen3\","
	     "\"content\":[{\"type\":\"thinking\",\"thinking\":\"Two calls.\",\"signature\":\"capy.fa"
	     "ke1.0\"},{\"type\":\"text\",\"text\":\"Checking.\"},{\"type\":\"tool_use\","
	     "\"id\":\"toolu_fake1_0\",\"name\":\"get_weather\",\"input\":{\"city\": \"Paris\"}},"
	     "{\"type\":\"tool_use\",\"id\":\"toolu_fake1_1\",\"name\":\"get_time\","
	     "\"input\":{}}],\"stop_reason\":\"tool_use\",\"stop_sequence\":null,"
	     "\"usage\":{\"input_tokens\":4,\"output_tokens\":9,\"cache_creation_input_tokens\":0,"
	     "\"cache_read_input_tokens\":16}}");
	CASE("messages body stop sequence", RUN_WRITER(CAPY_API_MESSAGES, plain, stop, NULL),
	     "{\"id\":\"msg_fake1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"qwen3\","
	     "\"content\":[{\"type\":\"text\",\"text\":\"a\"}],\"stop_reason\":\"stop_sequence\","
	     "\"stop_sequence\":\"END\",\"usage\":{\"input_tokens\":7,\"output_tokens\":4,"
	     "\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0}}");
	free(stream);
	free(plain);
}

static void test_stream_errors(void)
{
	static const struct step fail[] = { T("Hel"), ERR() };

	CASE("chat stream error", RUN_WRITER(CAPY_API_CHAT, CHAT_STREAM, fail, NULL),
	     "data: {\"id\":\"chatcmpl-fake1\",\"created\":1767225600,\"model\":\"qwen3\","
	     "\"system_fingerprint\":null,\"object\":\"chat.completion.chunk\",\"choices\":["
	     "{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,"
	     "\"finish_reason\":null}]}\n"
	     "\n"
	     "data: {\"id\":\"chatcmpl-fake1\",\"created\":1767225600,\"model\":\"qwen3\","
	     "\"system_fingerprint\":null,\"object\":\"chat.completion.chunk\",\"choices\":["
	     "{\"index\":0,\"delta\":{\"content\":\"Hel\"},\"logprobs\":null,\"finish_reason\":null}]"
	     "}\n"
	     "\n"
	     "data: {\"error\":{\"message\":\"the engine failed\",\"type\":\"server_error\","
	     "\"param\":null,\"code\":null}}\n"
	     "\n"
	     "data: [DONE]\n"
	     "\n");
	CASE("completions stream error",
	     RUN_WRITER(CAPY_API_COMPLETIONS, "{\"prompt\":\"a\",\"stream\":true}", fail, NULL),
	     "data: {\"id\":\"cmpl-fake1\",\"created\":1767225600,\"model\":\"qwen3\","
	     "\"system_fingerprint\":null,\"object\":\"text_completion\",\"choices\":["
	     "{\"index\":0,\"text\":\"Hel\",\"logprobs\":null,\"finish_reason\":null}]}\n"
	     "\n"
	     "data: {\"error\":{\"message\":\"the engine failed\",\"type\":\"server_error\","
	     "\"param\":null,\"code\":null}}\n"
	     "\n"
	     "data: [DONE]\n"
	     "\n");
	CASE("responses stream error", RUN_WRITER(CAPY_API_RESPONSES, RESP_STREAM, fail, NULL),
	     "event: response.created\n"
	     "data: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{"
	     "\"id\":\"resp_fake1\",\"object\":\"response\",\"created_at\":1767225600,"
	     "\"status\":\"in_progress\",\"model\":\"qwen3\",\"output\":[],\"usage\":null,"
	     "\"error\":null,\"incomplete_details\":null,\"instructions\":null,\"parallel_tool_calls\""
	     ":true,\"tool_choice\":\"auto\",\"tools\":[],\"temperature\":1.0,\"top_p\":1.0,"
	     "\"metadata\":{}}}\n"
	     "\n"
	     "event: response.in_progress\n"
	     "data: {\"type\":\"response.in_progress\",\"sequence_number\":1,\"response\":{"
	     "\"id\":\"resp_fake1\",\"object\":\"response\",\"created_at\":1767225600,"
	     "\"status\":\"in_progress\",\"model\":\"qwen3\",\"output\":[],\"usage\":null,"
	     "\"error\":null,\"incomplete_details\":null,\"instructions\":null,\"parallel_tool_calls\""
	     ":true,\"tool_choice\":\"auto\",\"tools\":[],\"temperature\":1.0,\"top_p\":1.0,"
	     "\"metadata\":{}}}\n"
	     "\n"
	     "event: response.output_item.added\n"
	     "data: {\"type\":\"response.output_item.added\",\"sequence_number\":2,"
	     "\"output_index\":0,\"item\":{\"type\":\"message\",\"id\":\"msg_fake1\","
	     "\"status\":\"in_progress\",\"role\":\"assistant\",\"content\":[]}}\n"
	     "\n"
	     "event: response.content_part.added\n"
	     "data: {\"type\":\"response.content_part.added\",\"sequence_number\":3,"
	     "\"item_id\":\"msg_fake1\",\"output_index\":0,\"content_index\":0,\"part\":{"
	     "\"type\":\"output_text\",\"text\":\"\",\"annotations\":[],\"logprobs\":["
	     "]}}\n"
	     "\n"
	     "event: response.output_text.delta\n"
	     "data: {\"type\":\"response.output_text.delta\",\"sequence_number\":4,"
	     "\"item_id\":\"msg_fake1\",\"output_index\":0,\"content_index\":0,\"delta\":\"Hel\","
	     "\"logprobs\":[]}\n"
	     "\n"
	     "event: response.failed\n"
	     "data: {\"type\":\"response.failed\",\"sequence_number\":5,\"response\":{"
	     "\"id\":\"resp_fake1\",\"object\":\"response\",\"created_at\":1767225600,"
	     "\"status\":\"failed\",\"model\":\"qwen3\",\"output\":[{\"type\":\"message\","
	     "\"id\":\"msg_fake1\",\"status\":\"incomplete\",\"role\":\"assistant\","
	     "\"content\":[{\"type\":\"output_text\",\"text\":\"Hel\",\"annotations\":["
	     "],\"logprobs\":[]}]}],\"usage\":null,\"error\":{\"code\":\"server_error\","
	     "\"message\":\"the engine failed\"},\"incomplete_details\":null,\"instructions\":null,"
	     "\"parallel_tool_calls\":true,\"tool_choice\":\"auto\",\"tools\":[],"
	     "\"temperature\":1.0,\"top_p\":1.0,\"metadata\":{}}}\n"
	     "\n");
	CASE("messages stream error", RUN_WRITER(CAPY_API_MESSAGES, MSG_STREAM, fail, NULL),
	     "event: message_start\n"
	     "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_fake1\","
	     "\"type\":\"message\",\"role\":\"assistant\",\"model\":\"qwen3\",\"content\":["
	     "],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":7,"
	     "\"output_tokens\":1,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0}}}\n"
	     "\n"
	     "event: ping\n"
	     "data: {\"type\":\"ping\"}\n"
	     "\n"
	     "event: content_block_start\n"
	     "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{"
	     "\"type\":\"text\",\"text\":\"\"}}\n"
	     "\n"
	     "event: content_block_delta\n"
	     "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\","
	     "\"text\":\"Hel\"}}\n"
	     "\n"
	     "event: error\n"
	     "data: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"the engine fa"
	     "iled\"}}\n"
	     "\n");
	CASE("chat body error",
	     RUN_WRITER(CAPY_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", fail,
			NULL),
	     "{\"error\":{\"message\":\"the engine failed\",\"type\":\"server_error\","
	     "\"param\":null,\"code\":null}}");
	CASE("messages body error",
	     RUN_WRITER(CAPY_API_MESSAGES, "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
			fail, NULL),
	     "{\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"the engine failed\""
	     "}}");
}

int main(void)
{
	load_templates();
	CHECK(tmpl_fixture && tmpl_share && special);
	RUN(test_captured_all);
	RUN(test_examples);
	RUN(test_chat_out);
	RUN(test_logprobs_out);
	RUN(test_completions_out);
	RUN(test_responses_out);
	RUN(test_messages_out);
	RUN(test_stream_errors);
	capy_tmpl_free(tmpl_fixture);
	capy_tmpl_free(tmpl_share);
	capy_tdoc_free(special_doc);
	return test_summary();
}
