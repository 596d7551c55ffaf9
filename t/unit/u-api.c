/* u-api.c - unit tests for libcore/serve/api: request parsing of the five APIs (with the
 * captured bodies of real clients, rendered through the chat templates), the errors, and the
 * exact bytes of every response shape, streamed and not. U_API_SHOW=1 prints each response
 * the writer tests make. */
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

static bool str_is(const struct capy_tval *v, const char *s)
{
	size_t len;
	const char *t = capy_tval_strv(v, &len);

	return t && len == strlen(s) && !memcmp(t, s, len);
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
	char *body; /* NULL: an endpoint capy does not serve (Gemini's, say) */
};

static bool load_capture(const char *file, struct capture *c)
{
	struct capy_tdoc *doc = capy_tdoc_new();
	struct capy_tval *root = NULL;
	struct capy_err err = { 0 };
	size_t len;
	char *text = read_text(file, &len);
	const char *path;
	bool ok = false;

	c->body = NULL;
	if (text && !capy_tdoc_parse_json(doc, text, len, file, &root, &err) &&
	    (path = capy_tval_strv(capy_tval_get(root, "path"), NULL))) {
		ok = true;
		if (api_of_path(path, &c->api))
			ok = !capy_tval_to_json(capy_tval_get(root, "body"), &c->body, NULL, &err);
	}
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
	if (!load_capture(path, &c) || !c.body) {
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
	/* 26 captures of the shared reference, 39 of Claude Code, opencode, Codex and Qwen Code
	 * made with t/helper/fake-llm-server.py */
	CHECK_MSG(files >= 65, "%d captured bodies", files);
	CHECK(apis[CAPY_API_CHAT] && apis[CAPY_API_RESPONSES] && apis[CAPY_API_MESSAGES]);
}

/* --- parsing ------------------------------------------------------------------------------ */

static void test_parse_chat(void)
{
	struct capy_api_request r;
	int64_t n = 0;

	PARSE_OK(CAPY_API_CHAT,
		 "{\"model\":\"m\",\"messages\":["
		 "{\"role\":\"developer\",\"content\":\"Be brief.\"},"
		 "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},\"b\","
		 "{\"type\":\"text\",\"text\":\"c\",\"cache_control\":{}}],\"name\":\"ann\"},"
		 "{\"role\":\"assistant\",\"content\":null,\"reasoning_content\":\"think\","
		 "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\","
		 "\"arguments\":\"{\\\"x\\\":1}\"}}]},"
		 "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":[{\"type\":\"text\",\"text\":\"r\"}]},"
		 "{\"role\":\"assistant\",\"reasoning\":\"r2\",\"content\":[{\"type\":\"refusal\",\"refusal\":\"no\"}]}],"
		 "\"temperature\":0.7,\"top_p\":1,\"top_k\":-1,\"min_p\":0.05,\"seed\":-3,"
		 "\"presence_penalty\":1.5,\"frequency_penalty\":-0.5,\"repetition_penalty\":1.1,"
		 "\"max_tokens\":10,\"max_completion_tokens\":20,\"stop\":[\"x\",\"\",\"y\"],"
		 "\"n\":1,\"user\":\"u\",\"metadata\":{\"a\":1},\"unknown_field\":[1],"
		 "\"logprobs\":true,\"top_logprobs\":3,\"stream\":true,"
		 "\"stream_options\":{\"include_usage\":true},"
		 "\"chat_template_kwargs\":{\"enable_thinking\":false,\"preserve_thinking\":true},"
		 "\"reasoning_effort\":\"high\"}", &r);
	CHECK_JSON(r.messages,
		   "[{\"role\": \"system\", \"content\": \"Be brief.\"}, "
		   "{\"role\": \"user\", \"content\": \"a\\nb\\nc\", \"name\": \"ann\"}, "
		   "{\"role\": \"assistant\", \"content\": \"\", \"reasoning_content\": \"think\", "
		   "\"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", \"function\": "
		   "{\"name\": \"f\", \"arguments\": \"{\\\"x\\\":1}\"}}]}, "
		   "{\"role\": \"tool\", \"content\": \"r\", \"tool_call_id\": \"c1\"}, "
		   "{\"role\": \"assistant\", \"content\": \"no\", \"reasoning_content\": \"r2\"}]");
	/* explicit chat_template_kwargs win over reasoning_effort */
	CHECK_JSON(r.kwargs, "{\"enable_thinking\": false, \"preserve_thinking\": true}");
	CHECK_EQ_INT(r.thinking, 0);
	CHECK_STR(r.model, "m");
	CHECK(r.temperature.given && r.temperature.v == 0.7);
	CHECK(r.top_p.given && r.top_p.v == 1);
	CHECK(r.min_p.given && r.min_p.v == 0.05);
	CHECK(r.presence_penalty.given && r.presence_penalty.v == 1.5);
	CHECK(r.frequency_penalty.given && r.frequency_penalty.v == -0.5);
	CHECK(r.repetition_penalty.given && r.repetition_penalty.v == 1.1);
	CHECK_EQ_INT(r.top_k, -1);
	CHECK(r.seed_given && r.seed == -3);
	CHECK_EQ_INT(r.max_tokens, 20); /* max_completion_tokens wins */
	CHECK_EQ_INT(r.n_stop, 2);
	CHECK_STR(r.stop[0], "x");
	CHECK_STR(r.stop[1], "y");
	CHECK_EQ_INT(r.logprobs, 3);
	CHECK(r.stream && r.include_usage);
	CHECK(r.add_generation_prompt && !r.continue_final_message);
	CHECK(!r.tools && !r.tools_json && r.n_tools == 0);
	capy_api_request_release(&r);

	/* defaults: nothing given */
	PARSE_OK(CAPY_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stop\":\"END\","
				"\"temperature\":null,\"tools\":null,\"n\":null}", &r);
	CHECK(!r.model && !r.temperature.given && !r.top_p.given && !r.seed_given && !r.top_k);
	CHECK_EQ_INT(r.max_tokens, 0);
	CHECK_EQ_INT(r.logprobs, -1);
	CHECK_EQ_INT(r.thinking, -1);
	CHECK(!r.stream && !r.include_usage && r.parallel_tool_calls);
	CHECK_EQ_INT(r.n_stop, 1);
	CHECK_STR(r.stop[0], "END");
	CHECK_JSON(r.kwargs, "{}");
	CHECK_EQ_INT(r.tool_choice, CAPY_API_TOOLS_AUTO);
	capy_api_request_release(&r);

	/* tools: functions kept to name/description/parameters, custom tools become one-string
	 * functions, other types are dropped; tool_choice named; legacy functions */
	PARSE_OK(CAPY_API_CHAT,
		 "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":["
		 "{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":\"F.\","
		 "\"parameters\":{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"number\","
		 "\"maximum\":9007199254740991,\"default\":1.0}}},\"strict\":true}},"
		 "{\"type\":\"function\",\"function\":{\"name\":\"g\"}},"
		 "{\"type\":\"custom\",\"custom\":{\"name\":\"patch\",\"description\":\"P.\"}},"
		 "{\"type\":\"web_search\"}],"
		 "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}},"
		 "\"parallel_tool_calls\":false,\"reasoning_effort\":\"none\"}", &r);
	CHECK_EQ_INT(r.n_tools, 3);
	CHECK_STR(r.tools_json,
		  "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": \"F.\", "
		  "\"parameters\": {\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"number\", "
		  "\"maximum\": 9007199254740991, \"default\": 1.0}}}}}, "
		  "{\"type\": \"function\", \"function\": {\"name\": \"g\", \"parameters\": "
		  "{\"type\": \"object\", \"properties\": {}}}}, "
		  "{\"type\": \"function\", \"function\": {\"name\": \"patch\", \"description\": \"P.\", "
		  "\"parameters\": {\"type\": \"object\", \"properties\": {\"input\": {\"type\": "
		  "\"string\"}}, \"required\": [\"input\"]}}}]");
	CHECK_EQ_INT(r.tool_choice, CAPY_API_TOOLS_NAMED);
	CHECK_STR(r.tool_choice_name, "g");
	CHECK(!r.parallel_tool_calls);
	CHECK_JSON(r.kwargs, "{\"enable_thinking\": false}");
	capy_api_request_release(&r);

	PARSE_OK(CAPY_API_CHAT,
		 "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"functions\":[{\"name\":\"old\","
		 "\"parameters\":{\"type\":\"object\"}}],\"tool_choice\":\"required\","
		 "\"enable_thinking\":true,\"thinking_budget\":100,\"reasoning_effort\":\"none\","
		 "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"s\","
		 "\"schema\":{\"type\":\"object\"}}}}", &r);
	CHECK_EQ_INT(r.n_tools, 1);
	CHECK_EQ_INT(r.tool_choice, CAPY_API_TOOLS_REQUIRED);
	CHECK_JSON(r.kwargs, "{\"enable_thinking\": true}"); /* enable_thinking before effort */
	CHECK_EQ_INT(r.thinking_budget, 100);
	CHECK_EQ_INT(r.response_format, CAPY_API_FORMAT_JSON_SCHEMA);
	CHECK_JSON(r.response_schema, "{\"type\": \"object\"}");
	capy_api_request_release(&r);

	/* prefill the vLLM way, and integral floats as integers */
	PARSE_OK(CAPY_API_CHAT,
		 "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\","
		 "\"content\":\"Sure: \"}],\"add_generation_prompt\":false,"
		 "\"continue_final_message\":true,\"max_tokens\":16.0,\"tool_choice\":\"none\"}", &r);
	CHECK(!r.add_generation_prompt && r.continue_final_message);
	CHECK_EQ_INT(r.max_tokens, 16);
	CHECK_EQ_INT(r.tool_choice, CAPY_API_TOOLS_NONE);
	capy_api_request_release(&r);
	(void)n;
}

static void test_parse_completions(void)
{
	struct capy_api_request r;

	PARSE_OK(CAPY_API_COMPLETIONS, "{\"model\":\"m\",\"prompt\":\"Once\",\"echo\":true,\"logprobs\":2,"
				       "\"max_tokens\":5,\"stop\":[\"\\n\"],\"best_of\":1,\"suffix\":\"\"}", &r);
	CHECK(r.prompt && r.prompt_len == 4 && !memcmp(r.prompt, "Once", 4));
	CHECK(!r.prompt_ids && !r.messages && !r.tools);
	CHECK(r.echo);
	CHECK_EQ_INT(r.logprobs, 2);
	CHECK_EQ_INT(r.max_tokens, 5);
	CHECK_EQ_INT(r.n_stop, 1);
	capy_api_request_release(&r);

	PARSE_OK(CAPY_API_COMPLETIONS, "{\"prompt\":[1,2,3]}", &r);
	CHECK(!r.prompt && r.n_prompt_ids == 3 && r.prompt_ids[0] == 1 && r.prompt_ids[2] == 3);
	CHECK_EQ_INT(r.logprobs, -1);
	capy_api_request_release(&r);
	PARSE_OK(CAPY_API_COMPLETIONS, "{\"prompt\":[[7,8]]}", &r);
	CHECK(r.n_prompt_ids == 2 && r.prompt_ids[1] == 8);
	capy_api_request_release(&r);
	PARSE_OK(CAPY_API_COMPLETIONS, "{\"prompt\":[\"one\"],\"logprobs\":null}", &r);
	CHECK(r.prompt && r.prompt_len == 3);
	CHECK_EQ_INT(r.logprobs, -1);
	capy_api_request_release(&r);
}

static void test_parse_responses(void)
{
	struct capy_api_request r;

	PARSE_OK(CAPY_API_RESPONSES, "{\"model\":\"m\",\"instructions\":\"Be brief.\",\"input\":\"Hi.\","
				     "\"max_output_tokens\":50,\"reasoning\":{\"effort\":\"minimal\"},"
				     "\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"x\","
				     "\"schema\":{\"type\":\"object\"}},\"verbosity\":\"low\"},\"store\":true,"
				     "\"top_logprobs\":2,\"truncation\":\"disabled\"}", &r);
	CHECK_JSON(r.messages, "[{\"role\": \"system\", \"content\": \"Be brief.\"}, "
			       "{\"role\": \"user\", \"content\": \"Hi.\"}]");
	CHECK_EQ_INT(r.max_tokens, 50);
	CHECK_JSON(r.kwargs, "{\"enable_thinking\": false}");
	CHECK_EQ_INT(r.response_format, CAPY_API_FORMAT_JSON_SCHEMA);
	CHECK_EQ_INT(r.logprobs, 2);
	capy_api_request_release(&r);

	/* items: every role, a reasoning item + message + calls merged into one assistant turn,
	 * outputs as strings and as parts, a custom tool call, a namespaced call */
	PARSE_OK(CAPY_API_RESPONSES,
		 "{\"input\":["
		 "{\"type\":\"message\",\"role\":\"developer\",\"content\":[{\"type\":\"input_text\",\"text\":\"dev\"}]},"
		 "{\"role\":\"system\",\"content\":\"sys\"},"
		 "{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"q1\"},{\"type\":\"input_text\",\"text\":\"q2\"}]},"
		 "{\"type\":\"reasoning\",\"id\":\"rs_1\",\"summary\":[{\"type\":\"summary_text\",\"text\":\"sum\"}],"
		 "\"content\":[{\"type\":\"reasoning_text\",\"text\":\"raw\"}],\"encrypted_content\":\"xyz\"},"
		 "{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"I will.\"}]},"
		 "{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"f\",\"arguments\":\"{\\\"a\\\":1}\"},"
		 "{\"type\":\"function_call\",\"call_id\":\"c2\",\"name\":\"spawn\",\"namespace\":\"agents\",\"arguments\":\"{}\"},"
		 "{\"type\":\"function_call_output\",\"call_id\":\"c1\",\"output\":\"out1\"},"
		 "{\"type\":\"function_call_output\",\"call_id\":\"c2\",\"output\":[{\"type\":\"input_text\",\"text\":\"o\"},{\"type\":\"output_text\",\"text\":\"2\"}]},"
		 "{\"type\":\"reasoning\",\"summary\":[{\"type\":\"summary_text\",\"text\":\"only summary\"}]},"
		 "{\"type\":\"custom_tool_call\",\"call_id\":\"c3\",\"name\":\"apply_patch\",\"input\":\"*** Begin\"},"
		 "{\"type\":\"custom_tool_call_output\",\"call_id\":\"c3\",\"output\":\"done\"}],"
		 "\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"strict\":false,\"parameters\":{\"type\":\"object\"}},"
		 "{\"type\":\"custom\",\"name\":\"apply_patch\",\"description\":\"Edit.\",\"format\":{\"type\":\"grammar\","
		 "\"syntax\":\"lark\",\"definition\":\"start: x\"}},"
		 "{\"type\":\"namespace\",\"name\":\"agents\",\"description\":\"A.\",\"tools\":[{\"type\":\"function\","
		 "\"name\":\"spawn\",\"description\":\"S.\",\"parameters\":{\"type\":\"object\"}}]},"
		 "{\"type\":\"web_search\"},{\"type\":\"local_shell\"},{\"type\":\"tool_search\",\"execution\":\"client\"}],"
		 "\"tool_choice\":{\"type\":\"function\",\"name\":\"f\"},"
		 "\"include\":[\"reasoning.encrypted_content\"],\"reasoning\":{\"summary\":\"auto\"}}", &r);
	CHECK_JSON(r.messages,
		   "[{\"role\": \"system\", \"content\": \"dev\"}, "
		   "{\"role\": \"system\", \"content\": \"sys\"}, "
		   "{\"role\": \"user\", \"content\": \"q1\\nq2\"}, "
		   "{\"role\": \"assistant\", \"content\": \"I will.\", \"reasoning_content\": \"raw\", "
		   "\"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"f\", "
		   "\"arguments\": \"{\\\"a\\\":1}\"}}, {\"id\": \"c2\", \"type\": \"function\", \"function\": "
		   "{\"name\": \"agents__spawn\", \"arguments\": \"{}\"}}]}, "
		   "{\"role\": \"tool\", \"content\": \"out1\", \"tool_call_id\": \"c1\"}, "
		   "{\"role\": \"tool\", \"content\": \"o\\n2\", \"tool_call_id\": \"c2\"}, "
		   "{\"role\": \"assistant\", \"content\": \"\", \"reasoning_content\": \"only summary\", "
		   "\"tool_calls\": [{\"id\": \"c3\", \"type\": \"function\", \"function\": {\"name\": "
		   "\"apply_patch\", \"arguments\": {\"input\": \"*** Begin\"}}}]}, "
		   "{\"role\": \"tool\", \"content\": \"done\", \"tool_call_id\": \"c3\"}]");
	CHECK_EQ_INT(r.n_tools, 3);
	CHECK_STR(r.tools_json,
		  "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\"}}}, "
		  "{\"type\": \"function\", \"function\": {\"name\": \"apply_patch\", \"description\": "
		  "\"Edit.\\n\\nThe input follows this lark grammar:\\nstart: x\", \"parameters\": "
		  "{\"type\": \"object\", \"properties\": {\"input\": {\"type\": \"string\"}}, "
		  "\"required\": [\"input\"]}}}, "
		  "{\"type\": \"function\", \"function\": {\"name\": \"agents__spawn\", \"description\": "
		  "\"S.\", \"parameters\": {\"type\": \"object\"}}}]");
	CHECK_JSON(r.tool_map, "{\"apply_patch\": {\"type\": \"custom\"}, \"agents__spawn\": "
			       "{\"type\": \"namespace\", \"namespace\": \"agents\", \"name\": \"spawn\"}}");
	CHECK_EQ_INT(r.tool_choice, CAPY_API_TOOLS_NAMED);
	CHECK_STR(r.tool_choice_name, "f");
	CHECK(r.encrypted_reasoning);
	CHECK_EQ_INT(r.thinking, -1);
	CHECK(r.add_generation_prompt && !r.continue_final_message);
	capy_api_request_release(&r);

	/* a final assistant message in progress is continued (vLLM) */
	PARSE_OK(CAPY_API_RESPONSES, "{\"input\":[{\"role\":\"user\",\"content\":\"hi\"},"
				     "{\"type\":\"message\",\"role\":\"assistant\",\"status\":\"incomplete\","
				     "\"content\":[{\"type\":\"output_text\",\"text\":\"Hel\"}]}],"
				     "\"tool_choice\":{\"type\":\"allowed_tools\",\"mode\":\"required\","
				     "\"tools\":[{\"type\":\"function\",\"name\":\"f\"}]},"
				     "\"tools\":[{\"type\":\"function\",\"name\":\"f\"}]}", &r);
	CHECK(!r.add_generation_prompt && r.continue_final_message);
	CHECK_EQ_INT(r.tool_choice, CAPY_API_TOOLS_REQUIRED);
	CHECK_JSON(r.allowed_tools, "[\"f\"]");
	capy_api_request_release(&r);

	/* allowed_tools: the names listed (hosted types dropped, a namespace's functions, custom
	 * tools by name), Responses' flat form and chat's nested one */
	PARSE_OK(CAPY_API_RESPONSES, "{\"input\":\"hi\",\"tools\":[{\"type\":\"function\",\"name\":\"f\"},"
				     "{\"type\":\"custom\",\"name\":\"c\"},{\"type\":\"function\",\"name\":\"g\"},"
				     "{\"type\":\"namespace\",\"name\":\"ns\",\"tools\":[{\"type\":\"function\",\"name\":\"a\"},"
				     "{\"type\":\"function\",\"name\":\"b\"}]},{\"type\":\"image_generation\"}],"
				     "\"tool_choice\":{\"type\":\"allowed_tools\",\"mode\":\"auto\",\"tools\":["
				     "{\"type\":\"function\",\"name\":\"g\"},{\"type\":\"image_generation\"},"
				     "{\"type\":\"custom\",\"name\":\"c\"},{\"type\":\"namespace\",\"name\":\"ns\"}]}}", &r);
	CHECK_EQ_INT(r.tool_choice, CAPY_API_TOOLS_AUTO);
	CHECK_JSON(r.allowed_tools, "[\"g\", \"c\", \"ns__a\", \"ns__b\"]");
	capy_api_request_release(&r);
	PARSE_OK(CAPY_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":["
				"{\"type\":\"function\",\"function\":{\"name\":\"f\"}},{\"type\":\"function\",\"function\":"
				"{\"name\":\"g\"}}],\"tool_choice\":{\"type\":\"allowed_tools\",\"allowed_tools\":"
				"{\"mode\":\"required\",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"g\"}}]}}}", &r);
	CHECK_EQ_INT(r.tool_choice, CAPY_API_TOOLS_REQUIRED);
	CHECK_JSON(r.allowed_tools, "[\"g\"]");
	capy_api_request_release(&r);
}

static void test_parse_messages(void)
{
	struct capy_api_request r;

	PARSE_OK(CAPY_API_MESSAGES,
		 "{\"model\":\"claude\",\"max_tokens\":1024,\"system\":["
		 "{\"type\":\"text\",\"text\":\"x-anthropic-billing-header: cc_version=1; cch=abc;\"},"
		 "{\"type\":\"text\",\"text\":\"You are Claude Code.\",\"cache_control\":{\"type\":\"ephemeral\"}},"
		 "{\"type\":\"text\",\"text\":\"\\nBe careful.\"}],"
		 "\"messages\":["
		 "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Fix it.\"},{\"type\":\"text\",\"text\":\"\"}]},"
		 "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"Look first.\",\"signature\":\"s\"},"
		 "{\"type\":\"redacted_thinking\",\"data\":\"zzz\"},{\"type\":\"text\",\"text\":\"Reading.\"},"
		 "{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"Read\",\"input\":{\"path\":\"a\"},\"cache_control\":{}},"
		 "{\"type\":\"tool_use\",\"id\":\"t2\",\"name\":\"Read\",\"input\":{\"path\":\"b\"}}]},"
		 "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"and also\"},"
		 "{\"type\":\"tool_result\",\"tool_use_id\":\"t1\",\"content\":\"A\"},"
		 "{\"type\":\"tool_result\",\"tool_use_id\":\"t2\",\"is_error\":true,\"content\":[{\"type\":\"text\",\"text\":\"B1\"},"
		 "{\"type\":\"text\",\"text\":\"B2\"},{\"type\":\"tool_reference\",\"tool_name\":\"Grep\"}]}]},"
		 "{\"role\":\"system\",\"content\":[{\"type\":\"text\",\"text\":\"reminder\"}]},"
		 "{\"role\":\"assistant\",\"content\":\"Done: \"}],"
		 "\"stop_sequences\":[\"###\"],\"temperature\":0.2,\"top_k\":40,\"top_p\":0.9,"
		 "\"metadata\":{\"user_id\":\"u\"},\"context_management\":{\"edits\":[]},"
		 "\"output_config\":{\"effort\":\"high\"},\"service_tier\":\"auto\","
		 "\"thinking\":{\"type\":\"adaptive\",\"display\":\"omitted\"},"
		 "\"tools\":[{\"name\":\"Read\",\"description\":\"R.\",\"input_schema\":{\"properties\":"
		 "{\"path\":{\"type\":\"string\"}}},\"cache_control\":{},\"defer_loading\":true},"
		 "{\"type\":\"web_search_20250305\",\"name\":\"web_search\"},"
		 "{\"type\":\"bash_20250124\",\"name\":\"bash\"}],"
		 "\"tool_choice\":{\"type\":\"any\",\"disable_parallel_tool_use\":true}}", &r);
	CHECK_JSON(r.messages,
		   "[{\"role\": \"system\", \"content\": \"You are Claude Code.\\n\\nBe careful.\"}, "
		   "{\"role\": \"user\", \"content\": \"Fix it.\"}, "
		   "{\"role\": \"assistant\", \"content\": \"Reading.\", \"reasoning_content\": \"Look first.\", "
		   "\"tool_calls\": [{\"id\": \"t1\", \"type\": \"function\", \"function\": {\"name\": \"Read\", "
		   "\"arguments\": {\"path\": \"a\"}}}, {\"id\": \"t2\", \"type\": \"function\", \"function\": "
		   "{\"name\": \"Read\", \"arguments\": {\"path\": \"b\"}}}]}, "
		   "{\"role\": \"tool\", \"content\": \"A\", \"tool_call_id\": \"t1\"}, "
		   "{\"role\": \"tool\", \"content\": \"B1\\nB2\\nGrep\", \"tool_call_id\": \"t2\"}, "
		   "{\"role\": \"user\", \"content\": \"and also\"}, "
		   "{\"role\": \"system\", \"content\": \"reminder\"}, "
		   "{\"role\": \"assistant\", \"content\": \"Done: \"}]");
	CHECK(!r.add_generation_prompt && r.continue_final_message);
	CHECK_EQ_INT(r.max_tokens, 1024);
	CHECK_EQ_INT(r.n_stop, 1);
	CHECK_STR(r.stop[0], "###");
	CHECK(r.temperature.given && r.temperature.v == 0.2);
	CHECK(r.top_p.given && r.top_p.v == 0.9);
	CHECK_EQ_INT(r.top_k, 40);
	CHECK_JSON(r.kwargs, "{\"enable_thinking\": true}");
	CHECK_EQ_INT(r.thinking, 1);
	CHECK_EQ_INT(r.n_tools, 1);
	CHECK_STR(r.tools_json, "[{\"type\": \"function\", \"function\": {\"name\": \"Read\", \"description\": "
				"\"R.\", \"parameters\": {\"properties\": {\"path\": {\"type\": \"string\"}}, "
				"\"type\": \"object\"}}}]");
	CHECK_EQ_INT(r.tool_choice, CAPY_API_TOOLS_REQUIRED);
	CHECK(!r.parallel_tool_calls);
	capy_api_request_release(&r);

	/* no thinking field: no extended thinking, as in Anthropic's API; an empty final
	 * assistant message asks for nothing and is dropped; a user turn of tool results only */
	PARSE_OK(CAPY_API_MESSAGES,
		 "{\"max_tokens\":8,\"system\":\"S\",\"messages\":[{\"role\":\"user\",\"content\":\"q\"},"
		 "{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\",\"input\":{}}]},"
		 "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"t\"}]},"
		 "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"  \"}]}],"
		 "\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}],"
		 "\"tool_choice\":{\"type\":\"tool\",\"name\":\"f\"},\"stream\":true}", &r);
	CHECK_JSON(r.messages,
		   "[{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"q\"}, "
		   "{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"id\": \"t\", \"type\": "
		   "\"function\", \"function\": {\"name\": \"f\", \"arguments\": {}}}]}, "
		   "{\"role\": \"tool\", \"content\": \"\", \"tool_call_id\": \"t\"}]");
	CHECK(r.add_generation_prompt && !r.continue_final_message && r.stream);
	CHECK_JSON(r.kwargs, "{\"enable_thinking\": false}");
	CHECK_EQ_INT(r.tool_choice, CAPY_API_TOOLS_NAMED);
	CHECK_STR(r.tool_choice_name, "f");
	capy_api_request_release(&r);

	/* budgets as large as max_tokens (Qwen Code) are taken; disabled; chat_template_kwargs */
	PARSE_OK(CAPY_API_MESSAGES, "{\"max_tokens\":100,\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],"
				    "\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":100}}", &r);
	CHECK_EQ_INT(r.thinking, 1);
	CHECK_EQ_INT(r.thinking_budget, 100);
	capy_api_request_release(&r);
	PARSE_OK(CAPY_API_MESSAGES, "{\"max_tokens\":100,\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],"
				    "\"thinking\":{\"type\":\"disabled\"},\"chat_template_kwargs\":{\"x\":1},"
				    "\"tool_choice\":{\"type\":\"none\"}}", &r);
	CHECK_JSON(r.kwargs, "{\"x\": 1, \"enable_thinking\": false}");
	CHECK_EQ_INT(r.tool_choice, CAPY_API_TOOLS_NONE);
	capy_api_request_release(&r);

	/* count_tokens: the same body without max_tokens */
	PARSE_OK(CAPY_API_COUNT_TOKENS, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"q\"}],"
					"\"system\":\"S\",\"tools\":[{\"name\":\"f\",\"input_schema\":{}}]}", &r);
	CHECK_EQ_INT(capy_tval_len(r.messages), 2);
	CHECK_EQ_INT(r.n_tools, 1);
	CHECK_EQ_INT(r.max_tokens, 0);
	capy_api_request_release(&r);
}

static void test_outparse_opts(void)
{
	struct capy_outparse_opts o;
	struct capy_api_request r;

	PARSE_OK(CAPY_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stream\":true,"
				"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}", &r);
	capy_api_outparse_opts(&r, CAPY_OUTPARSE_THINK_OPEN, &o);
	CHECK(o.tools_json == r.tools_json);
	CHECK_EQ_INT(o.flags, CAPY_OUTPARSE_THINK_OPEN);
	capy_api_request_release(&r);
	PARSE_OK(CAPY_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tool_choice\":\"none\","
				"\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}", &r);
	capy_api_outparse_opts(&r, 0, &o);
	CHECK(!o.tools_json);
	CHECK_EQ_INT(o.flags, CAPY_OUTPARSE_NO_TOOL_CALLS | CAPY_OUTPARSE_HOLD_CALLS);
	capy_api_request_release(&r);
	/* a prefill the answer continues: its leading whitespace is kept */
	PARSE_OK(CAPY_API_MESSAGES, "{\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":\"q\"},"
				    "{\"role\":\"assistant\",\"content\":\"The quick\"}],\"stream\":true}", &r);
	capy_api_outparse_opts(&r, 0, &o);
	CHECK_EQ_INT(o.flags, CAPY_OUTPARSE_NO_TOOL_CALLS | CAPY_OUTPARSE_CONTINUE);
	capy_api_request_release(&r);
}

/* Prefill: the prompt ends right after the assistant's text. */
static void test_continue_final(void)
{
	struct capy_api_request r;
	struct capy_api_error aerr;
	struct capy_err err = { 0 };
	char *out;

	PARSE_OK(CAPY_API_MESSAGES, "{\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"},"
				    "{\"role\":\"assistant\",\"content\":\"The answer is \"}]}", &r);
	out = render(tmpl_share, &r, &err);
	CHECK_MSG(out != NULL, "%s", err.msg);
	if (out)
		CHECK_STR(out, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
			       "The answer is");
	free(out);
	/* this template keeps the text as it came, trailing space included (transformers) */
	out = render(tmpl_fixture, &r, &err);
	CHECK_MSG(out != NULL, "%s", err.msg);
	if (out)
		CHECK_STR(out, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
			       "The answer is ");
	free(out);
	capy_api_request_release(&r);

	/* text the template kept whole keeps its trailing space; text not in the prompt fails */
	PARSE_OK(CAPY_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\","
				"\"content\":\"ab \"}],\"add_generation_prompt\":false,"
				"\"continue_final_message\":true}", &r);
	{
		char prompt[] = "<|im_start|>assistant\nab <|im_end|>\n", bad[] = "nothing here";
		size_t len = strlen(prompt), blen = strlen(bad);

		CHECK_EQ_INT(capy_api_continue_final(&r, prompt, &len, &aerr), 0);
		CHECK_STR(prompt, "<|im_start|>assistant\nab ");
		CHECK_EQ_INT(len, strlen(prompt));
		CHECK_EQ_INT(capy_api_continue_final(&r, bad, &blen, &aerr), CAPY_EINVAL);
		CHECK_EQ_INT(aerr.status, 400);
	}
	capy_api_request_release(&r);
}

/* What the captures of the agents turn into, where it matters. */
static void test_captured_details(void)
{
	struct capy_api_request r;
	struct capy_err err = { 0 };
	char *out;

	/* Claude Code's tool round: tool_use as a call with the input object, the result as a
	 * tool message; the qwen3_5 template prints the call in XML */
	r = capture_req("claude-code-toolround/002_POST_v1_messages.json");
	CHECK_JSON(capy_tval_at(r.messages, 2),
		   "{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"id\": \"toolu_fake1\", "
		   "\"type\": \"function\", \"function\": {\"name\": \"Read\", \"arguments\": "
		   "{\"file_path\": \"/home/user/project/hello.txt\"}}}]}");
	CHECK_JSON(capy_tval_at(r.messages, 3),
		   "{\"role\": \"tool\", \"content\": \"1\\thello-file-content 42\\n2\\t\", "
		   "\"tool_call_id\": \"toolu_fake1\"}");
	out = render(tmpl_share, &r, &err);
	CHECK(out && strstr(out, "<tool_call>\n<function=Read>\n<parameter=file_path>\n"
				 "/home/user/project/hello.txt\n</parameter>\n</function>\n</tool_call>"));
	CHECK(out && strstr(out, "<|im_start|>user\n<tool_response>\n1\thello-file-content 42\n2\n"
				 "</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n"));
	free(out);
	capy_api_request_release(&r);

	/* Claude Code full mode: a system message after the user message stays in place */
	r = capture_req("claude-code/001_POST_v1_messages.json");
	CHECK_EQ_INT(capy_tval_len(r.messages), 3);
	CHECK(str_is(capy_tval_get(capy_tval_at(r.messages, 2), "role"), "system"));
	CHECK_EQ_INT(r.n_tools, 12);
	CHECK_EQ_INT(r.thinking, 1);
	capy_api_request_release(&r);

	/* opencode: arguments as a compact JSON string, parsed when rendered */
	r = capture_req("opencode-toolround-local/003_POST_v1_chat_completions.json");
	out = render(tmpl_fixture, &r, &err);
	CHECK(out && strstr(out, "{\"name\": \"read\", \"arguments\": {\"filePath\": "
				 "\"/home/user/project/hello.txt\"}}"));
	free(out);
	CHECK(r.stream && r.include_usage);
	CHECK_EQ_INT(r.max_tokens, 4096);
	capy_api_request_release(&r);

	/* Codex: developer messages as system, the custom apply_patch tool as a function of
	 * "input", its call and output; tool_search and web_search dropped */
	r = capture_req("codex-gpt55-toolround/002_POST_v1_responses.json");
	CHECK(str_is(capy_tval_get(capy_tval_at(r.messages, 0), "role"), "system"));
	CHECK_JSON(capy_tval_get(capy_tval_at(r.messages, 4), "tool_calls"),
		   "[{\"id\": \"call_fake1\", \"type\": \"function\", \"function\": {\"name\": "
		   "\"apply_patch\", \"arguments\": {\"input\": \"*** Begin Patch\\n*** Add File: "
		   "notes.txt\\n+capybara notes\\n*** End Patch\"}}}]");
	CHECK_EQ_INT(r.n_tools, 8);
	CHECK_JSON(r.tool_map, "{\"apply_patch\": {\"type\": \"custom\"}}");
	CHECK_EQ_INT(r.thinking, 1); /* reasoning.effort medium */
	out = render(tmpl_share, &r, &err);
	CHECK(out && strstr(out, "<function=apply_patch>\n<parameter=input>\n*** Begin Patch\n"));
	free(out);
	capy_api_request_release(&r);

	/* Codex with reasoning echoed back: one assistant turn; namespace tools flattened */
	r = capture_req("codex-reasoning-toolround/002_POST_v1_responses.json");
	CHECK_EQ_INT(capy_tval_len(r.messages), 6);
	CHECK(str_is(capy_tval_get(capy_tval_at(r.messages, 4), "reasoning_content"),
		     "The user wants the secret word; I should cat the file."));
	CHECK(str_is(capy_tval_get(capy_tval_at(r.messages, 4), "content"), "I will read the file first."));
	CHECK(r.tools_json && strstr(r.tools_json, "\"name\": \"multi_agent_v1__spawn_agent\""));
	CHECK_EQ_INT(r.n_tools, 12);
	CHECK_EQ_INT(r.thinking, -1);
	capy_api_request_release(&r);

	/* A reasoning round (Claude Code, thinking blocks sent back with an empty signature):
	 * the reasoning after the last user query is rendered back, as it was generated */
	r = capture_req("claude-code-reasoning-toolround-full/002_POST_v1_messages.json");
	out = render(tmpl_share, &r, &err);
	CHECK(out && strstr(out, "<|im_start|>assistant\n<think>\nThe user wants the secret word, so I "
				 "read hello.txt.\n</think>\n\nI will read the file first.\n\n<tool_call>\n"
				 "<function=Read>\n"));
	free(out);
	capy_api_request_release(&r);

	/* Qwen Code: tool results as lists of parts; a budget next to max_tokens */
	r = capture_req("qwen-code-toolround/002_POST_v1_chat_completions.json");
	CHECK(str_is(capy_tval_get(capy_tval_at(r.messages, 3), "role"), "tool"));
	CHECK_EQ_INT(r.n_tools, 14);
	capy_api_request_release(&r);
	r = capture_req("qwen-code-toolround-anthropic/002_POST_v1_messages.json");
	CHECK_EQ_INT(r.thinking_budget, 32000);
	CHECK_EQ_INT(r.max_tokens, 32768);
	CHECK(r.temperature.given && r.temperature.v == 1);
	capy_api_request_release(&r);
}

/* --- refusals ----------------------------------------------------------------------------- */

#define U "{\"role\":\"user\",\"content\":\"hi\"}"
#define CHAT(extra) "{\"messages\":[" U "]" extra "}"
#define MSGS(extra) "{\"max_tokens\":8,\"messages\":[" U "]" extra "}"
#define IR "invalid_request_error"

static void test_refused_common(void)
{
	static const enum capy_api apis[] = { CAPY_API_CHAT, CAPY_API_COMPLETIONS, CAPY_API_RESPONSES,
					      CAPY_API_MESSAGES, CAPY_API_COUNT_TOKENS };
	size_t i;

	for (i = 0; i < ARRAY_SIZE(apis); i++) {
		REFUSED(apis[i], "{\"messages\": [}", 400, IR, "",
			"request body is not valid JSON (line 1, column 15): unexpected character '}'");
		REFUSED(apis[i], "{\n  \"a\": tru\n}", 400, IR, "",
			"request body is not valid JSON (line 2, column 8): unexpected character 't'");
		REFUSED(apis[i], "", 400, IR, "",
			"request body is not valid JSON (line 1, column 1): unexpected end of input");
		REFUSED(apis[i], "[1]", 400, IR, "", "request body must be a JSON object, not a list");
		REFUSED(apis[i], "{\"model\":5}", 400, IR, "model", "model must be a string, not a number");
		REFUSED(apis[i], "{\"tools\":[{\"p\":{\"max\":1e400}}]}", 400, IR, "tools[0].p.max",
			"tools[0].p.max is not a finite number");
		REFUSED(apis[i], "{\"temperature\":NaN}", 400, IR, "temperature",
			"temperature is not a finite number");
	}
}

static void test_refused_chat(void)
{
	const enum capy_api C = CAPY_API_CHAT;
	struct capy_api_limits lim = { .max_messages = 2, .max_tools = 1, .max_stop = 2,
				       .max_tokens = 100 };

	REFUSED(C, "{}", 400, IR, "messages", "messages is required");
	REFUSED(C, "{\"messages\":{}}", 400, IR, "messages", "messages must be a list, not an object");
	REFUSED(C, "{\"messages\":[]}", 400, IR, "messages", "messages must not be empty");
	REFUSED(C, "{\"messages\":[1]}", 400, IR, "messages[0]",
		"messages[0] must be an object, not a number");
	REFUSED(C, "{\"messages\":[{\"content\":\"x\"}]}", 400, IR, "messages[0].role",
		"messages[0].role is required");
	REFUSED(C, "{\"messages\":[{\"role\":\"bot\",\"content\":\"x\"}]}", 400, IR, "messages[0].role",
		"messages[0].role must be system, developer, user, assistant or tool, not 'bot'");
	REFUSED(C, "{\"messages\":[" U ",{\"role\":\"user\",\"content\":3}]}", 400, IR, "messages[1].content",
		"messages[1].content must be a string or a list of content parts");
	REFUSED(C, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":"
		   "{\"url\":\"data:x\"}}]}]}", 400, IR, "messages[0].content[0]",
		"image input is not supported by this server (messages[0].content[0]: text only)");
	REFUSED(C, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_audio\"}]}]}", 400, IR,
		"messages[0].content[0]",
		"audio input is not supported by this server (messages[0].content[0]: text only)");
	REFUSED(C, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"file\"}]}]}", 400, IR,
		"messages[0].content[0]",
		"file input is not supported by this server (messages[0].content[0]: text only)");
	REFUSED(C, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"hologram\"}]}]}", 400, IR,
		"messages[0].content[0]", "messages[0].content[0].type 'hologram' is not a supported content part");
	REFUSED(C, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"x\"}]}]}", 400, IR,
		"messages[0].content[0].type", "messages[0].content[0].type is required");
	REFUSED(C, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":1}]}]}", 400,
		IR, "messages[0].content[0].text", "messages[0].content[0].text must be a string");
	REFUSED(C, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"f\","
		   "\"arguments\":\"{bad\"}}]}]}", 400, IR, "messages[0].tool_calls[0].function.arguments",
		"messages[0].tool_calls[0].function.arguments is not valid JSON: 1:2: expected a string key");
	REFUSED(C, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"arguments\":\"{}\"}}]}]}",
		400, IR, "messages[0].tool_calls[0].function.name",
		"messages[0].tool_calls[0].function.name is required");
	REFUSED(C, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"x\"}]}]}", 400, IR,
		"messages[0].tool_calls[0].function", "messages[0].tool_calls[0].function is required");
	REFUSED(C, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":{}}]}", 400, IR,
		"messages[0].tool_calls", "messages[0].tool_calls must be a list, not an object");
	REFUSED(C, CHAT(",\"n\":2"), 400, IR, "n", "n must be 1: this server generates one choice per request");
	REFUSED(C, CHAT(",\"temperature\":-1"), 400, IR, "temperature", "temperature must be a number >= 0");
	REFUSED(C, CHAT(",\"temperature\":\"hot\""), 400, IR, "temperature",
		"temperature must be a number, not a string");
	REFUSED(C, CHAT(",\"top_p\":0"), 400, IR, "top_p", "top_p must be a number in (0, 1]");
	REFUSED(C, CHAT(",\"min_p\":2"), 400, IR, "min_p", "min_p must be a number in [0, 1]");
	REFUSED(C, CHAT(",\"presence_penalty\":3"), 400, IR, "presence_penalty",
		"presence_penalty must be a number in [-2, 2]");
	REFUSED(C, CHAT(",\"top_k\":-2"), 400, IR, "top_k", "top_k must be an integer from -1 to 2147483647");
	REFUSED(C, CHAT(",\"max_tokens\":0"), 400, IR, "max_tokens", "max_tokens must be an integer >= 1");
	REFUSED(C, CHAT(",\"max_tokens\":1.5"), 400, IR, "max_tokens",
		"max_tokens must be an integer, not a fraction");
	REFUSED(C, CHAT(",\"max_completion_tokens\":true"), 400, IR, "max_completion_tokens",
		"max_completion_tokens must be an integer, not a boolean");
	REFUSED(C, CHAT(",\"seed\":123456789012345678901234"), 400, IR, "seed",
		"seed must be an integer that fits in 64 bits");
	REFUSED(C, CHAT(",\"stream\":\"yes\""), 400, IR, "stream", "stream must be a boolean, not a string");
	REFUSED(C, CHAT(",\"stop\":5"), 400, IR, "stop", "stop must be a string or a list of strings");
	REFUSED(C, CHAT(",\"stop\":[\"a\",7]"), 400, IR, "stop[1]", "stop[1] must be a string, not a number");
	REFUSED(C, CHAT(",\"top_logprobs\":2"), 400, IR, "top_logprobs",
		"top_logprobs needs logprobs set to true");
	REFUSED(C, CHAT(",\"logprobs\":true,\"top_logprobs\":21"), 400, IR, "top_logprobs",
		"top_logprobs must be an integer from 0 to 20");
	REFUSED(C, CHAT(",\"tool_choice\":\"always\""), 400, IR, "tool_choice",
		"tool_choice must be \"auto\", \"none\", \"required\" or a named tool, not \"always\"");
	REFUSED(C, CHAT(",\"tool_choice\":\"required\""), 400, IR, "tool_choice",
		"tool_choice requires a tool call, but there are no tools");
	REFUSED(C, CHAT(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
			"\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}}"), 400, IR,
		"tool_choice", "tool_choice names 'g', which is not among the tools");
	REFUSED(C, CHAT(",\"tool_choice\":{\"type\":\"function\",\"function\":{}}"), 400, IR,
		"tool_choice.function.name", "tool_choice.function.name is required");
	REFUSED(C, CHAT(",\"tool_choice\":{\"type\":\"file_search\"}"), 400, IR, "tool_choice.type",
		"tool_choice.type 'file_search' is not supported by this server");
	REFUSED(C, CHAT(",\"tools\":[{\"type\":\"function\"}]"), 400, IR, "tools[0].function",
		"tools[0].function is required");
	REFUSED(C, CHAT(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"\"}}]"), 400, IR,
		"tools[0].function.name", "tools[0].function.name must not be empty");
	REFUSED(C, CHAT(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":[]}}]"),
		400, IR, "tools[0].function.parameters",
		"tools[0].function.parameters must be an object, not a list");
	REFUSED(C, CHAT(",\"tools\":{}"), 400, IR, "tools", "tools must be a list, not an object");
	REFUSED(C, "{\"messages\":[" U ",{\"role\":\"assistant\",\"content\":\"a\"}],"
		   "\"continue_final_message\":true}", 400, IR, "continue_final_message",
		"continue_final_message and add_generation_prompt cannot both be true");
	REFUSED(C, CHAT(",\"continue_final_message\":true,\"add_generation_prompt\":false"), 400, IR,
		"continue_final_message", "continue_final_message needs the last message to be the assistant's");
	REFUSED(C, CHAT(",\"chat_template\":\"{{ x }}\""), 400, IR, "chat_template",
		"chat_template is not accepted in requests: the model's own template renders them");
	REFUSED(C, CHAT(",\"chat_template_kwargs\":{\"tools\":[]}"), 400, IR, "chat_template_kwargs.tools",
		"chat_template_kwargs.tools is set by the request itself");
	REFUSED(C, CHAT(",\"chat_template_kwargs\":[]"), 400, IR, "chat_template_kwargs",
		"chat_template_kwargs must be an object, not a list");
	REFUSED(C, CHAT(",\"reasoning_effort\":\"extreme\""), 400, IR, "reasoning_effort",
		"reasoning_effort must be none, minimal, low, medium, high, xhigh or max, not 'extreme'");
	REFUSED(C, CHAT(",\"response_format\":{\"type\":\"yaml\"}"), 400, IR, "response_format.type",
		"response_format.type must be text, json_object or json_schema, not 'yaml'");
	/* limits */
	check_refused(__LINE__, C, "{\"messages\":[" U "," U "," U "]}", &lim, 400, IR, "messages",
		      "messages has 3 entries, more than the limit of 2");
	check_refused(__LINE__, C, CHAT(",\"tools\":[{\"type\":\"x\"},{\"type\":\"y\"}]"), &lim, 400, IR,
		      "tools", "tools has 2 tools, more than the limit of 1");
	check_refused(__LINE__, C, CHAT(",\"stop\":[\"a\",\"b\",\"c\"]"), &lim, 400, IR, "stop",
		      "stop has 3 strings, more than the limit of 2");
	check_refused(__LINE__, C, CHAT(",\"max_tokens\":101"), &lim, 400, IR, "max_tokens",
		      "max_tokens is 101, more than this server's limit of 100");
}

static void test_refused_completions(void)
{
	const enum capy_api C = CAPY_API_COMPLETIONS;

	REFUSED(C, "{}", 400, IR, "prompt", "prompt is required");
	REFUSED(C, "{\"prompt\":\"\"}", 400, IR, "prompt", "prompt must not be empty");
	REFUSED(C, "{\"prompt\":[]}", 400, IR, "prompt", "prompt must not be empty");
	REFUSED(C, "{\"prompt\":[\"a\",\"b\"]}", 400, IR, "prompt",
		"prompt holds 2 prompts: this server takes one per request");
	REFUSED(C, "{\"prompt\":[1,-2]}", 400, IR, "prompt[1]", "prompt[1] must be a token id (an integer >= 0)");
	REFUSED(C, "{\"prompt\":[1,\"x\"]}", 400, IR, "prompt[1]", "prompt[1] must be a token id (an integer >= 0)");
	REFUSED(C, "{\"prompt\":{}}", 400, IR, "prompt",
		"prompt must be a string or a list of token ids, not an object");
	REFUSED(C, "{\"prompt\":\"a\",\"suffix\":\"b\"}", 400, IR, "suffix", "suffix is not supported by this server");
	REFUSED(C, "{\"prompt\":\"a\",\"best_of\":3}", 400, IR, "best_of",
		"best_of must be 1: this server generates one choice per request");
	REFUSED(C, "{\"prompt\":\"a\",\"logprobs\":true}", 400, IR, "logprobs",
		"logprobs must be an integer, not a boolean");
	REFUSED(C, "{\"prompt\":\"a\",\"logprobs\":30}", 400, IR, "logprobs",
		"logprobs must be an integer from 0 to 20");
}

static void test_refused_responses(void)
{
	const enum capy_api C = CAPY_API_RESPONSES;

	REFUSED(C, "{}", 400, IR, "input", "input is required");
	REFUSED(C, "{\"input\":[]}", 400, IR, "input", "input must not be empty");
	REFUSED(C, "{\"input\":5}", 400, IR, "input", "input must be a string or a list of items, not a number");
	REFUSED(C, "{\"input\":\"hi\",\"previous_response_id\":\"resp_1\"}", 400, IR, "previous_response_id",
		"previous_response_id is not supported: this server stores no responses (send the whole input)");
	REFUSED(C, "{\"input\":\"hi\",\"conversation\":\"c\"}", 400, IR, "conversation",
		"conversation is not supported: this server stores no responses (send the whole input)");
	REFUSED(C, "{\"input\":\"hi\",\"background\":true}", 400, IR, "background",
		"background responses are not supported");
	REFUSED(C, "{\"input\":[{\"type\":\"item_reference\",\"id\":\"msg_1\"}]}", 400, IR, "input[0].type",
		"input[0].type 'item_reference' is not supported: this server stores no items");
	REFUSED(C, "{\"input\":[{\"type\":\"computer_call\"}]}", 400, IR, "input[0].type",
		"input[0].type 'computer_call' is not supported by this server");
	REFUSED(C, "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\",\"image_url\":\"x\"}]}]}",
		400, IR, "input[0].content[0]",
		"image input is not supported by this server (input[0].content[0]: text only)");
	REFUSED(C, "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_file\"}]}]}", 400, IR,
		"input[0].content[0]",
		"file input is not supported by this server (input[0].content[0]: text only)");
	REFUSED(C, "{\"input\":[{\"role\":\"critic\",\"content\":\"x\"}]}", 400, IR, "input[0].role",
		"input[0].role must be user, assistant, system or developer, not 'critic'");
	REFUSED(C, "{\"input\":[{\"type\":\"message\",\"content\":\"x\"}]}", 400, IR, "input[0].role",
		"input[0].role is required");
	REFUSED(C, "{\"input\":[{\"type\":\"function_call\",\"name\":\"f\",\"arguments\":\"{}\"}]}", 400, IR,
		"input[0].call_id", "input[0].call_id is required");
	REFUSED(C, "{\"input\":[{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\",\"arguments\":\"[\"}]}",
		400, IR, "input[0].arguments",
		"input[0].arguments is not valid JSON: 1:2: unexpected end of input");
	REFUSED(C, "{\"input\":[{\"type\":\"function_call_output\",\"call_id\":\"c\",\"output\":7}]}", 400, IR,
		"input[0].output", "input[0].output must be a string or a list of content parts");
	REFUSED(C, "{\"input\":[{\"type\":\"reasoning\",\"summary\":[{\"type\":\"summary_text\"}]}]}", 400, IR,
		"input[0].summary[0].text", "input[0].summary[0].text must be a string");
	REFUSED(C, "{\"input\":\"hi\",\"prompt\":{\"id\":\"p\"}}", 400, IR, "prompt",
		"prompt templates are not supported");
	REFUSED(C, "{\"input\":\"hi\",\"reasoning\":{\"effort\":\"lots\"}}", 400, IR, "reasoning.effort",
		"reasoning.effort must be none, minimal, low, medium, high, xhigh or max, not 'lots'");
	REFUSED(C, "{\"input\":\"hi\",\"text\":{\"format\":{\"type\":\"xml\"}}}", 400, IR, "text.format.type",
		"text.format.type must be text, json_object or json_schema, not 'xml'");
	REFUSED(C, "{\"input\":\"hi\",\"tools\":[{\"type\":\"function\"}]}", 400, IR, "tools[0].name",
		"tools[0].name is required");
	REFUSED(C, "{\"input\":\"hi\",\"tools\":[{\"type\":\"namespace\",\"name\":\"n\",\"tools\":[3]}]}", 400,
		IR, "tools[0].tools[0]", "tools[0].tools[0] must be an object, not a number");
	REFUSED(C, "{\"input\":\"hi\",\"tools\":[{\"type\":\"function\",\"name\":\"f\"}],"
		   "\"tool_choice\":{\"type\":\"function\",\"name\":\"g\"}}", 400, IR, "tool_choice",
		"tool_choice names 'g', which is not among the tools");
#define ALLOWED(x) "{\"input\":\"hi\",\"tools\":[{\"type\":\"function\",\"name\":\"f\"}],\"tool_choice\":" \
		   "{\"type\":\"allowed_tools\"" x "}}"
	REFUSED(C, ALLOWED(",\"tools\":[{\"type\":\"function\",\"name\":\"f\"}]"), 400, IR, "tool_choice.mode",
		"tool_choice.mode is required");
	REFUSED(C, ALLOWED(",\"mode\":\"sometimes\",\"tools\":[{\"type\":\"function\",\"name\":\"f\"}]"), 400, IR,
		"tool_choice.mode", "tool_choice.mode must be auto or required, not 'sometimes'");
	REFUSED(C, ALLOWED(",\"mode\":\"auto\""), 400, IR, "tool_choice.tools", "tool_choice.tools is required");
	REFUSED(C, ALLOWED(",\"mode\":\"auto\",\"tools\":[]"), 400, IR, "tool_choice.tools",
		"tool_choice.tools must list at least one tool");
	REFUSED(C, ALLOWED(",\"mode\":\"required\",\"tools\":[3]"), 400, IR, "tool_choice.tools[0]",
		"tool_choice.tools[0] must be an object, not a number");
	REFUSED(C, ALLOWED(",\"mode\":\"required\",\"tools\":[{\"type\":\"function\",\"name\":\"g\"}]"), 400, IR,
		"tool_choice.tools[0]", "tool_choice.tools[0] names 'g', which is not among the tools");
	REFUSED(C, ALLOWED(",\"mode\":\"required\",\"tools\":[{\"type\":\"web_search\"}]"), 400, IR,
		"tool_choice.tools", "tool_choice.tools lists no function the model can call");
	REFUSED(CAPY_API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":[{\"type\":"
			       "\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":{\"type\":\"allowed_tools\","
			       "\"allowed_tools\":{\"mode\":\"auto\",\"tools\":[{\"type\":\"function\",\"function\":{}}]}}}",
		400, IR, "tool_choice.allowed_tools.tools[0].function.name",
		"tool_choice.allowed_tools.tools[0].function.name is required");
#undef ALLOWED
}

static void test_refused_messages(void)
{
	const enum capy_api C = CAPY_API_MESSAGES;

	REFUSED(C, "{\"messages\":[" U "]}", 400, IR, "max_tokens", "max_tokens is required");
	REFUSED(C, "{\"max_tokens\":0,\"messages\":[" U "]}", 400, IR, "max_tokens",
		"max_tokens must be an integer >= 1");
	REFUSED(C, "{\"max_tokens\":8}", 400, IR, "messages", "messages is required");
	REFUSED(C, "{\"max_tokens\":8,\"messages\":[]}", 400, IR, "messages", "messages must not be empty");
	REFUSED(C, "{\"max_tokens\":8,\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}", 400, IR,
		"messages[0].role", "messages[0].role must be user or assistant, not 'tool'");
	REFUSED(C, "{\"max_tokens\":8,\"messages\":[{\"role\":\"user\"}]}", 400, IR, "messages[0].content",
		"messages[0].content is required");
	REFUSED(C, "{\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":5}]}", 400, IR,
		"messages[0].content", "messages[0].content must be a string or a list of content blocks");
	REFUSED(C, "{\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\","
		   "\"source\":{\"type\":\"base64\",\"media_type\":\"image/png\",\"data\":\"AAAA\"}}]}]}", 400,
		IR, "messages[0].content[0]",
		"image input is not supported by this server (messages[0].content[0]: text only)");
	REFUSED(C, "{\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"document\"}]}]}",
		400, IR, "messages[0].content[0]",
		"document input is not supported by this server (messages[0].content[0]: text only)");
	REFUSED(C, "{\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\","
		   "\"tool_use_id\":\"t\",\"content\":[{\"type\":\"image\"}]}]}]}", 400, IR,
		"messages[0].content[0].content[0]",
		"image input is not supported by this server (messages[0].content[0].content[0]: text only)");
	REFUSED(C, "{\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"search_result\"}]}]}",
		400, IR, "messages[0].content[0].type", "messages[0].content[0].type 'search_result' is not supported here");
	REFUSED(C, "{\"max_tokens\":8,\"messages\":[" U ",{\"role\":\"assistant\",\"content\":[{\"type\":"
		   "\"tool_result\",\"tool_use_id\":\"t\",\"content\":\"x\"}]}," U "]}", 400, IR,
		"messages[1].content[0]", "messages[1].content[0]: tool_result blocks belong in user messages");
	REFUSED(C, "{\"max_tokens\":8,\"messages\":[" U ",{\"role\":\"assistant\",\"content\":[{\"type\":"
		   "\"tool_use\",\"id\":\"t\",\"name\":\"f\",\"input\":{}}]}]}", 400, IR, "messages[1].content[0]",
		"messages[1].content[0]: the final assistant message cannot hold tool_use blocks (their results must follow)");
	REFUSED(C, "{\"max_tokens\":8,\"messages\":[" U ",{\"role\":\"assistant\",\"content\":[{\"type\":"
		   "\"tool_use\",\"id\":\"t\",\"input\":{}}]}," U "]}", 400, IR, "messages[1].content[0].name",
		"messages[1].content[0].name is required");
	REFUSED(C, "{\"max_tokens\":8,\"messages\":[" U ",{\"role\":\"assistant\",\"content\":[{\"type\":"
		   "\"tool_use\",\"id\":\"t\",\"name\":\"f\",\"input\":\"{}\"}]}," U "]}", 400, IR,
		"messages[1].content[0].input", "messages[1].content[0].input must be an object, not a string");
	REFUSED(C, "{\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}",
		400, IR, "messages[0].content[0].text", "messages[0].content[0].text is required");
	REFUSED(C, MSGS(",\"system\":5"), 400, IR, "system", "system must be a string or a list of text blocks");
	REFUSED(C, MSGS(",\"system\":[{\"type\":\"image\"}]"), 400, IR, "system[0]",
		"image input is not supported by this server (system[0]: text only)");
	REFUSED(C, MSGS(",\"thinking\":{\"type\":\"deep\"}"), 400, IR, "thinking.type",
		"thinking.type must be enabled, disabled or adaptive, not 'deep'");
	REFUSED(C, MSGS(",\"thinking\":{\"budget_tokens\":5}"), 400, IR, "thinking.type",
		"thinking.type is required");
	REFUSED(C, MSGS(",\"tool_choice\":{\"type\":\"some\"}"), 400, IR, "tool_choice.type",
		"tool_choice.type must be auto, any, tool or none, not 'some'");
	REFUSED(C, MSGS(",\"tool_choice\":{\"type\":\"tool\"}"), 400, IR, "tool_choice.name",
		"tool_choice.name is required");
	REFUSED(C, MSGS(",\"tool_choice\":\"auto\""), 400, IR, "tool_choice",
		"tool_choice must be an object, not a string");
	REFUSED(C, MSGS(",\"tools\":[{\"name\":\"f\",\"input_schema\":[]}]"), 400, IR, "tools[0].input_schema",
		"tools[0].input_schema must be an object, not a list");
	REFUSED(C, MSGS(",\"stop_sequences\":\"x\",\"temperature\":-0.5"), 400, IR, "temperature",
		"temperature must be a number >= 0");
	REFUSED(CAPY_API_COUNT_TOKENS, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\"}]}]}",
		400, IR, "messages[0].content[0]",
		"image input is not supported by this server (messages[0].content[0]: text only)");
}

/* The error bodies and the types each API gives a status. */
static void test_error_bodies(void)
{
	static const struct {
		int status;
		const char *openai, *anthropic;
	} types[] = {
		{ 400, "invalid_request_error", "invalid_request_error" },
		{ 401, "authentication_error", "authentication_error" },
		{ 403, "permission_error", "permission_error" },
		{ 404, "not_found_error", "not_found_error" },
		{ 413, "invalid_request_error", "request_too_large" },
		{ 429, "rate_limit_error", "rate_limit_error" },
		{ 500, "server_error", "api_error" },
		{ 503, "server_error", "overloaded_error" },
	};
	struct capy_api_error e;
	struct capy_buf b = { 0 };
	char want[256];
	size_t i;

	CHECK_EQ_INT(capy_api_error_set(&e, 404, "model", "model '%s' is not served here", "gpt-9"),
		     CAPY_EINVAL);
	e.code = "model_not_found";
	capy_api_error_body(CAPY_API_CHAT, &e, &b);
	CHECK_STR(b.data, "{\"error\":{\"message\":\"model 'gpt-9' is not served here\","
			  "\"type\":\"not_found_error\",\"param\":\"model\",\"code\":\"model_not_found\"}}");
	capy_buf_reset(&b);
	capy_api_error_body(CAPY_API_MESSAGES, &e, &b);
	CHECK_STR(b.data, "{\"type\":\"error\",\"error\":{\"type\":\"not_found_error\","
			  "\"message\":\"model 'gpt-9' is not served here\"}}");
	capy_buf_reset(&b);
	/* a type given wins; messages are escaped */
	CHECK_EQ_INT(capy_api_error_set(&e, 500, NULL, "a \"quoted\"\nline"), CAPY_EIO);
	e.type = "engine_error";
	capy_api_error_body(CAPY_API_RESPONSES, &e, &b);
	CHECK_STR(b.data, "{\"error\":{\"message\":\"a \\\"quoted\\\"\\nline\",\"type\":\"engine_error\","
			  "\"param\":null,\"code\":null}}");
	for (i = 0; i < ARRAY_SIZE(types); i++) {
		capy_api_error_set(&e, types[i].status, NULL, "x");
		capy_buf_reset(&b);
		capy_api_error_body(CAPY_API_COMPLETIONS, &e, &b);
		snprintf(want, sizeof(want), "{\"error\":{\"message\":\"x\",\"type\":\"%s\",\"param\":null,"
			 "\"code\":null}}", types[i].openai);
		CHECK_STR(b.data, want);
		capy_buf_reset(&b);
		capy_api_error_body(CAPY_API_COUNT_TOKENS, &e, &b);
		snprintf(want, sizeof(want), "{\"type\":\"error\",\"error\":{\"type\":\"%s\",\"message\":\"x\"}}",
			 types[i].anthropic);
		CHECK_STR(b.data, want);
	}
	capy_buf_release(&b);
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

static const struct capy_api_usage USAGE = { 7, 0, 4, 0, NULL };

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

/* cached tokens from the host tier of the context cache: "cache_tier" beside them */
static const struct capy_api_usage USAGE2 = { 20, 16, 9, 3, "host" };

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
	     "\"cached_tokens\":16,\"cache_tier\":\"host\"},\"completion_tokens_details\":{\"reasoning_tokens\":3}}}");
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
	     "\"input_tokens\":20,\"input_tokens_details\":{\"cached_tokens\":16,\"cache_tier\":\"host\"},"
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
	     "\"input_tokens\":20,\"input_tokens_details\":{\"cached_tokens\":16,\"cache_tier\":\"host\"},"
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
	     "\"cache_read_input_tokens\":16,\"cache_tier\":\"host\"}}");
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

static void test_small_bodies(void)
{
	struct capy_buf b = { 0 };

	capy_api_models_body("qwen3.6-35b", 1767225600, 32768, &b);
	CHECK_STR(b.data, "{\"object\":\"list\",\"data\":[{\"id\":\"qwen3.6-35b\",\"object\":\"model\","
			  "\"created\":1767225600,\"owned_by\":\"capy\",\"max_model_len\":32768,"
			  "\"type\":\"model\",\"display_name\":\"qwen3.6-35b\","
			  "\"created_at\":\"2026-01-01T00:00:00Z\"}],\"has_more\":false,"
			  "\"first_id\":\"qwen3.6-35b\",\"last_id\":\"qwen3.6-35b\"}");
	capy_buf_reset(&b);
	capy_api_count_tokens_body(1234, &b);
	CHECK_STR(b.data, "{\"input_tokens\":1234}");
	capy_buf_release(&b);
}

/* Empty output; writer calls out of order; ids; what a writer refuses. */
static void test_writer_edges(void)
{
	static const struct step nothing[] = { END(CAPY_API_FINISH_EOS, NULL) };
	struct capy_api_meta meta = { "fake1", "qwen3", 1767225600, 7, 0, NULL, 0 };
	struct capy_outparse_event ev = { .type = CAPY_OUTPARSE_CONTENT, .text = "x", .len = 1 };
	struct capy_api_usage u = { 1, 0, 1, 0, NULL };
	struct capy_api_request r;
	struct capy_api_writer *w;
	struct capy_err err = { 0 };
	struct capy_buf b = { 0 };

	CASE("messages body, empty output",
	     RUN_WRITER(CAPY_API_MESSAGES, "{\"max_tokens\":1,\"messages\":[" U "]}", nothing, NULL),
	     "{\"id\":\"msg_fake1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"qwen3\","
	     "\"content\":[],\"stop_reason\":\"end_turn\",\"stop_sequence\":null,\"usage\":{"
	     "\"input_tokens\":7,\"output_tokens\":4,\"cache_creation_input_tokens\":0,"
	     "\"cache_read_input_tokens\":0}}");
	CASE("chat body, empty output", RUN_WRITER(CAPY_API_CHAT, CHAT(""), nothing, NULL),
	     "{\"id\":\"chatcmpl-fake1\",\"created\":1767225600,\"model\":\"qwen3\","
	     "\"system_fingerprint\":null,\"object\":\"chat.completion\",\"choices\":[{\"index\":0,"
	     "\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,"
	     "\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":4,"
	     "\"total_tokens\":11,\"prompt_tokens_details\":{\"cached_tokens\":0},"
	     "\"completion_tokens_details\":{\"reasoning_tokens\":0}}}");

	PARSE_OK(CAPY_API_CHAT, CHAT(",\"stream\":true"), &r);
	CHECK_EQ_INT(capy_api_writer_new(&w, &r, &meta, &err), 0);
	CHECK_EQ_INT(capy_api_write_event(w, &ev, &b), CAPY_EINVAL); /* before begin */
	CHECK_EQ_INT(capy_api_write_end(w, CAPY_API_FINISH_EOS, NULL, &u, &b), CAPY_EINVAL);
	CHECK_EQ_INT(capy_api_write_begin(w, &b), 0);
	CHECK_EQ_INT(capy_api_write_begin(w, &b), CAPY_EINVAL);
	ev.type = CAPY_OUTPARSE_CALL_ARGS; /* arguments with no call open */
	CHECK_EQ_INT(capy_api_write_event(w, &ev, &b), CAPY_EINVAL);
	ev.type = CAPY_OUTPARSE_CONTENT;
	ev.len = 0; /* an empty delta writes nothing */
	capy_buf_reset(&b);
	CHECK_EQ_INT(capy_api_write_event(w, &ev, &b), 0);
	CHECK_EQ_INT(b.len, 0);
	CHECK_EQ_INT(capy_api_write_end(w, CAPY_API_FINISH_EOS, NULL, &u, &b), 0);
	CHECK_EQ_INT(capy_api_write_event(w, &ev, &b), CAPY_EINVAL); /* after end */
	CHECK_EQ_INT(capy_api_write_error(w, NULL, &b), CAPY_EINVAL);
	capy_api_writer_free(w);
	meta.id = "bad id";
	CHECK_EQ_INT(capy_api_writer_new(&w, &r, &meta, &err), CAPY_EINVAL);
	CHECK_STR(err.msg, "api writer: id 'bad id' may hold only letters, digits, '_' and '-'");
	CHECK(w == NULL);
	meta.id = "0123456789012345678901234567890123456789012345678901234567890123456789";
	CHECK_EQ_INT(capy_api_writer_new(&w, &r, &meta, &err), CAPY_EINVAL);
	capy_api_request_release(&r);
	meta.id = "fake1";
	PARSE_OK(CAPY_API_COUNT_TOKENS, "{\"messages\":[" U "]}", &r);
	CHECK_EQ_INT(capy_api_writer_new(&w, &r, &meta, &err), CAPY_EINVAL);
	capy_api_request_release(&r);
	capy_buf_release(&b);
}

int main(void)
{
	load_templates();
	CHECK(tmpl_fixture && tmpl_share && special);
	RUN(test_captured_all);
	RUN(test_parse_chat);
	RUN(test_parse_completions);
	RUN(test_parse_responses);
	RUN(test_parse_messages);
	RUN(test_outparse_opts);
	RUN(test_continue_final);
	RUN(test_captured_details);
	RUN(test_refused_common);
	RUN(test_refused_chat);
	RUN(test_refused_completions);
	RUN(test_refused_responses);
	RUN(test_refused_messages);
	RUN(test_error_bodies);
	RUN(test_examples);
	RUN(test_chat_out);
	RUN(test_logprobs_out);
	RUN(test_completions_out);
	RUN(test_responses_out);
	RUN(test_messages_out);
	RUN(test_stream_errors);
	RUN(test_small_bodies);
	RUN(test_writer_edges);
	capy_tmpl_free(tmpl_fixture);
	capy_tmpl_free(tmpl_share);
	capy_tdoc_free(special_doc);
	return test_summary();
}
