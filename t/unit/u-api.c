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

int main(void)
{
	load_templates();
	CHECK(tmpl_fixture && tmpl_share && special);
	RUN(test_captured_all);
	capy_tmpl_free(tmpl_fixture);
	capy_tmpl_free(tmpl_share);
	capy_tdoc_free(special_doc);
	return test_summary();
}
