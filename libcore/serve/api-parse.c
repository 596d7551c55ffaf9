/* api-parse.c - request parsing: the entry point, typed field access, the fields all APIs
 * share (sampling, stop strings, max_tokens, template kwargs), release. */
#include "serve/api-impl.h"

#include <math.h>

#define DEFAULT_MAX_MESSAGES 100000
#define DEFAULT_MAX_TOOLS 4096
#define DEFAULT_MAX_STOP 64

/* --- failing ------------------------------------------------------------------------------ */

void pfail(struct api_parse *p, const char *code, const char *param, const char *fmt, ...)
{
	va_list ap;

	p->err->status = 400;
	p->err->type = NULL;
	p->err->code = code;
	snprintf(p->err->param, sizeof(p->err->param), "%s", param ? param : "");
	va_start(ap, fmt);
	vsnprintf(p->err->msg, sizeof(p->err->msg), fmt, ap);
	va_end(ap);
	p->code = CAPY_EINVAL;
	longjmp(p->fail, 1);
}

void poom(struct api_parse *p)
{
	capy_api_error_set(p->err, 500, NULL, "out of memory parsing the request");
	p->code = CAPY_ENOMEM;
	longjmp(p->fail, 1);
}

struct capy_tval *pv(struct api_parse *p, struct capy_tval *v)
{
	if (!v)
		poom(p);
	return v;
}

void pset(struct api_parse *p, struct capy_tval *dict, const char *key, struct capy_tval *v)
{
	if (capy_tval_set(p->doc, dict, key, pv(p, v)) < 0)
		poom(p);
}

void ppush(struct api_parse *p, struct capy_tval *list, struct capy_tval *v)
{
	if (capy_tval_push(p->doc, list, pv(p, v)) < 0)
		poom(p);
}

struct capy_tval *pstr(struct api_parse *p, const char *s, size_t len)
{
	return pv(p, capy_tval_str(p->doc, s ? s : "", s ? len : 0));
}

struct capy_tval *pstrz(struct api_parse *p, const char *s)
{
	return pstr(p, s, s ? strlen(s) : 0);
}

struct capy_tval *pdict(struct api_parse *p)
{
	return pv(p, capy_tval_dict(p->doc));
}

struct capy_tval *plist(struct api_parse *p)
{
	return pv(p, capy_tval_list(p->doc));
}

/* --- paths and fields --------------------------------------------------------------------- */

/* Paths longer than API_PATH_MAX are cut (only messages show them). */
void ppath(char out[API_PATH_MAX], const char *parent, const char *key)
{
	int n;

	if (parent && parent[0])
		n = snprintf(out, API_PATH_MAX, "%s.%s", parent, key);
	else
		n = snprintf(out, API_PATH_MAX, "%s", key);
	if (n >= API_PATH_MAX)
		out[API_PATH_MAX - 1] = '\0';
}

void ppath_i(char out[API_PATH_MAX], const char *parent, size_t i)
{
	if (snprintf(out, API_PATH_MAX, "%s[%zu]", parent, i) >= API_PATH_MAX)
		out[API_PATH_MAX - 1] = '\0';
}

struct capy_tval *pget(const struct capy_tval *obj, const char *key)
{
	struct capy_tval *v = capy_tval_get(obj, key);

	return capy_tval_kind(v) == CAPY_TVAL_NONE ? NULL : v;
}

const char *kind_name(const struct capy_tval *v)
{
	switch (capy_tval_kind(v)) {
	case CAPY_TVAL_NONE: return "null";
	case CAPY_TVAL_BOOL: return "a boolean";
	case CAPY_TVAL_INT:
	case CAPY_TVAL_FLOAT: return "a number";
	case CAPY_TVAL_STR: return "a string";
	case CAPY_TVAL_LIST: return "a list";
	case CAPY_TVAL_DICT: return "an object";
	default: return "a value";
	}
}

bool str_eq(const struct capy_tval *v, const char *s)
{
	size_t len;
	const char *t = capy_tval_strv(v, &len);

	return t && len == strlen(s) && !memcmp(t, s, len);
}

const char *popt_str(struct api_parse *p, const struct capy_tval *obj, const char *key,
		     const char *path)
{
	struct capy_tval *v = pget(obj, key);
	char at[API_PATH_MAX];

	if (!v)
		return NULL;
	if (capy_tval_kind(v) != CAPY_TVAL_STR) {
		ppath(at, path, key);
		pfail(p, "invalid_type", at, "%s must be a string, not %s", at, kind_name(v));
	}
	return capy_tval_strv(v, NULL);
}

bool popt_bool(struct api_parse *p, const struct capy_tval *obj, const char *key,
	       const char *path, bool dflt)
{
	struct capy_tval *v = pget(obj, key);
	char at[API_PATH_MAX];

	if (!v)
		return dflt;
	if (capy_tval_kind(v) != CAPY_TVAL_BOOL) {
		ppath(at, path, key);
		pfail(p, "invalid_type", at, "%s must be a boolean, not %s", at, kind_name(v));
	}
	return capy_tval_boolv(v);
}

/* Integers may come as integral floats (4096.0), as pydantic accepts them. */
bool popt_int(struct api_parse *p, const struct capy_tval *obj, const char *key,
	      const char *path, int64_t min, int64_t max, int64_t *out)
{
	struct capy_tval *v = pget(obj, key);
	char at[API_PATH_MAX];
	bool beyond = false; /* an integer beyond int64: out of any range */
	int64_t i = 0;
	double d;

	if (!v)
		return false;
	ppath(at, path, key);
	if (capy_tval_intv(v, &i) < 0) {
		d = capy_tval_numv(v);
		if (capy_tval_kind(v) == CAPY_TVAL_FLOAT && d == floor(d) && fabs(d) < 9.2e18)
			i = (int64_t)d;
		else if (capy_tval_kind(v) == CAPY_TVAL_INT)
			beyond = true;
		else
			pfail(p, "invalid_type", at, "%s must be an integer, not %s", at,
			      capy_tval_kind(v) == CAPY_TVAL_FLOAT ? "a fraction" : kind_name(v));
	}
	if (beyond || i < min || i > max) {
		if (min == INT64_MIN && max == INT64_MAX)
			pfail(p, "invalid_value", at, "%s must be an integer that fits in 64 bits", at);
		if (max == INT64_MAX)
			pfail(p, "invalid_value", at, "%s must be an integer >= %" PRId64, at, min);
		pfail(p, "invalid_value", at, "%s must be an integer from %" PRId64 " to %" PRId64,
		      at, min, max);
	}
	*out = i;
	return true;
}

bool popt_num(struct api_parse *p, const struct capy_tval *obj, const char *key,
	      const char *path, double min, double max, bool min_open, double *out)
{
	struct capy_tval *v = pget(obj, key);
	char at[API_PATH_MAX];
	double d;

	if (!v)
		return false;
	ppath(at, path, key);
	if (capy_tval_kind(v) != CAPY_TVAL_INT && capy_tval_kind(v) != CAPY_TVAL_FLOAT)
		pfail(p, "invalid_type", at, "%s must be a number, not %s", at, kind_name(v));
	d = capy_tval_numv(v);
	if (!isfinite(d) || (min_open ? d <= min : d < min) || d > max) {
		if (isinf(max))
			pfail(p, "invalid_value", at, "%s must be a number %s %g", at,
			      min_open ? ">" : ">=", min);
		pfail(p, "invalid_value", at, "%s must be a number in %s%g, %g]", at,
		      min_open ? "(" : "[", min, max);
	}
	*out = d;
	return true;
}

struct capy_tval *popt_list(struct api_parse *p, const struct capy_tval *obj, const char *key,
			    const char *path)
{
	struct capy_tval *v = pget(obj, key);
	char at[API_PATH_MAX];

	if (v && capy_tval_kind(v) != CAPY_TVAL_LIST) {
		ppath(at, path, key);
		pfail(p, "invalid_type", at, "%s must be a list, not %s", at, kind_name(v));
	}
	return v;
}

struct capy_tval *popt_dict(struct api_parse *p, const struct capy_tval *obj, const char *key,
			    const char *path)
{
	struct capy_tval *v = pget(obj, key);
	char at[API_PATH_MAX];

	if (v && capy_tval_kind(v) != CAPY_TVAL_DICT) {
		ppath(at, path, key);
		pfail(p, "invalid_type", at, "%s must be an object, not %s", at, kind_name(v));
	}
	return v;
}

/* --- building messages -------------------------------------------------------------------- */

struct capy_tval *pmsg(struct api_parse *p, const char *role, const char *content, size_t len)
{
	struct capy_tval *m = pdict(p);

	pset(p, m, "role", pstrz(p, role));
	pset(p, m, "content", pstr(p, content, len));
	return m;
}

struct capy_tval *pcall(struct api_parse *p, const char *id, const char *name,
			struct capy_tval *arguments)
{
	struct capy_tval *c = pdict(p), *fn = pdict(p);

	if (id)
		pset(p, c, "id", pstrz(p, id));
	pset(p, c, "type", pstrz(p, "function"));
	pset(p, fn, "name", pstrz(p, name));
	pset(p, fn, "arguments", arguments);
	pset(p, c, "function", fn);
	return c;
}

void pjoin(struct api_parse *p, bool *first, const char *s, size_t len)
{
	if (!*first)
		capy_buf_putc(&p->scratch, '\n');
	*first = false;
	capy_buf_add(&p->scratch, s, len);
	if (p->scratch.oom)
		poom(p);
}

/* A content part that is not text: refuse it by what it is. */
static void refuse_part(struct api_parse *p, const char *type, const char *at)
{
	static const struct {
		const char *prefix, *what;
	} kinds[] = {
		{ "image", "image" }, { "input_image", "image" }, { "audio", "audio" },
		{ "input_audio", "audio" }, { "file", "file" }, { "input_file", "file" },
		{ "video", "video" }, { "document", "document" },
	};
	size_t i;

	for (i = 0; i < ARRAY_SIZE(kinds); i++)
		if (!strncmp(type, kinds[i].prefix, strlen(kinds[i].prefix)))
			pfail(p, "unsupported_content", at,
			      "%s input is not supported by this server (%s: text only)",
			      kinds[i].what, at);
	pfail(p, "invalid_value", at, "%s.type '%s' is not a supported content part", at, type);
}

void pcontent_openai(struct api_parse *p, const struct capy_tval *content, const char *path,
		     bool allow_null)
{
	char at[API_PATH_MAX], tat[API_PATH_MAX];
	bool first = true;
	size_t i, n;

	capy_buf_reset(&p->scratch);
	capy_buf_puts(&p->scratch, "");
	if (p->scratch.oom)
		poom(p);
	switch (capy_tval_kind(content)) {
	case CAPY_TVAL_STR: {
		size_t len;
		const char *s = capy_tval_strv(content, &len);

		pjoin(p, &first, s, len);
		return;
	}
	case CAPY_TVAL_NONE:
	case CAPY_TVAL_OTHER: /* absent */
		if (allow_null || !content)
			return;
		break;
	case CAPY_TVAL_LIST:
		n = capy_tval_len(content);
		for (i = 0; i < n; i++) {
			struct capy_tval *part = capy_tval_at(content, i), *text;
			const char *type, *s;
			size_t len;

			ppath_i(at, path, i);
			if (capy_tval_kind(part) == CAPY_TVAL_STR) {
				s = capy_tval_strv(part, &len);
				pjoin(p, &first, s, len);
				continue;
			}
			if (capy_tval_kind(part) != CAPY_TVAL_DICT)
				pfail(p, "invalid_type", at, "%s must be a content part object, not %s",
				      at, kind_name(part));
			type = popt_str(p, part, "type", at);
			if (!type) {
				ppath(tat, at, "type");
				pfail(p, "missing_required_parameter", tat, "%s is required", tat);
			}
			if (!strcmp(type, "text") || !strcmp(type, "input_text") ||
			    !strcmp(type, "output_text") || !strcmp(type, "refusal")) {
				const char *key = strcmp(type, "refusal") ? "text" : "refusal";

				text = pget(part, key);
				ppath(tat, at, key);
				if (capy_tval_kind(text) != CAPY_TVAL_STR)
					pfail(p, text ? "invalid_type" : "missing_required_parameter",
					      tat, "%s must be a string", tat);
				s = capy_tval_strv(text, &len);
				pjoin(p, &first, s, len);
				continue;
			}
			refuse_part(p, type, at);
		}
		return;
	default:
		break;
	}
	pfail(p, "invalid_type", path, "%s must be a string or a list of content parts", path);
}

/* --- shared fields ------------------------------------------------------------------------ */

void parse_sampling(struct api_parse *p, const struct capy_tval *body)
{
	struct capy_api_request *r = p->req;
	int64_t k;

	r->temperature.given = popt_num(p, body, "temperature", "", 0, INFINITY, false,
					&r->temperature.v);
	r->top_p.given = popt_num(p, body, "top_p", "", 0, 1, true, &r->top_p.v);
	r->min_p.given = popt_num(p, body, "min_p", "", 0, 1, false, &r->min_p.v);
	r->presence_penalty.given = popt_num(p, body, "presence_penalty", "", -2, 2, false,
					     &r->presence_penalty.v);
	r->frequency_penalty.given = popt_num(p, body, "frequency_penalty", "", -2, 2, false,
					      &r->frequency_penalty.v);
	r->repetition_penalty.given = popt_num(p, body, "repetition_penalty", "", 0, INFINITY,
					       true, &r->repetition_penalty.v);
	if (popt_int(p, body, "top_k", "", -1, INT32_MAX, &k))
		r->top_k = k > 0 ? k : -1;
	r->seed_given = popt_int(p, body, "seed", "", INT64_MIN, INT64_MAX, &r->seed);
}

void parse_stop(struct api_parse *p, const struct capy_tval *body, const char *key)
{
	struct capy_api_request *r = p->req;
	struct capy_tval *v = pget(body, key);
	char at[API_PATH_MAX];
	size_t i, n;

	if (!v)
		return;
	if (capy_tval_kind(v) == CAPY_TVAL_STR) {
		size_t len;
		const char *s = capy_tval_strv(v, &len);

		if (!len)
			return;
		r->stop = malloc(sizeof(*r->stop));
		if (!r->stop)
			poom(p);
		r->stop[r->n_stop++] = s;
		return;
	}
	if (capy_tval_kind(v) != CAPY_TVAL_LIST)
		pfail(p, "invalid_type", key, "%s must be a string or a list of strings", key);
	n = capy_tval_len(v);
	if (n > p->lim.max_stop)
		pfail(p, "array_above_max_length", key,
		      "%s has %zu strings, more than the limit of %zu", key, n, p->lim.max_stop);
	r->stop = malloc(sizeof(*r->stop) * (n ? n : 1));
	if (!r->stop)
		poom(p);
	for (i = 0; i < n; i++) {
		struct capy_tval *s = capy_tval_at(v, i);
		size_t len;

		ppath_i(at, key, i);
		if (capy_tval_kind(s) != CAPY_TVAL_STR)
			pfail(p, "invalid_type", at, "%s must be a string, not %s", at, kind_name(s));
		if (capy_tval_strv(s, &len) && len)
			r->stop[r->n_stop++] = capy_tval_strv(s, NULL);
	}
}

void parse_max_tokens(struct api_parse *p, const struct capy_tval *body, const char *key)
{
	int64_t v;

	if (!popt_int(p, body, key, "", 1, INT64_MAX, &v))
		return;
	if (p->lim.max_tokens && v > p->lim.max_tokens)
		pfail(p, "invalid_value", key, "%s is %" PRId64 ", more than this server's limit of %" PRId64,
		      key, v, p->lim.max_tokens);
	p->req->max_tokens = v;
}

void parse_kwargs(struct api_parse *p, const struct capy_tval *body)
{
	static const char *const reserved[] = {
		"messages", "tools", "documents", "add_generation_prompt",
	};
	struct capy_tval *kw = popt_dict(p, body, "chat_template_kwargs", "");
	size_t i, k, klen;

	for (i = 0; i < capy_tval_dict_len(kw); i++) {
		struct capy_tval *v;
		const char *key = capy_tval_dict_entry(kw, i, &klen, &v);
		char at[API_PATH_MAX];

		ppath(at, "chat_template_kwargs", key);
		for (k = 0; k < ARRAY_SIZE(reserved); k++)
			if (!strcmp(key, reserved[k]))
				pfail(p, "invalid_value", at, "%s is set by the request itself", at);
		if (strlen(key) != klen)
			pfail(p, "invalid_value", at, "chat_template_kwargs keys must not hold NUL");
		pset(p, p->req->kwargs, key, v);
	}
	if (capy_tval_get(p->req->kwargs, "enable_thinking"))
		p->req->thinking = capy_tval_boolv(capy_tval_get(p->req->kwargs, "enable_thinking"));
}

/* A derived enable_thinking; an explicit chat_template_kwargs.enable_thinking wins. */
void set_thinking(struct api_parse *p, int on)
{
	if (on < 0 || capy_tval_get(p->req->kwargs, "enable_thinking"))
		return;
	pset(p, p->req->kwargs, "enable_thinking", capy_tval_bool(p->doc, on));
	p->req->thinking = on;
}

void check_messages_limit(struct api_parse *p, const struct capy_tval *list, const char *key)
{
	size_t n = capy_tval_len(list);

	if (n > p->lim.max_messages)
		pfail(p, "array_above_max_length", key,
		      "%s has %zu entries, more than the limit of %zu", key, n, p->lim.max_messages);
}

size_t require_messages(struct api_parse *p, const struct capy_tval *msgs)
{
	if (!msgs)
		pfail(p, "missing_required_parameter", "messages", "messages is required");
	if (capy_tval_kind(msgs) != CAPY_TVAL_LIST)
		pfail(p, "invalid_type", "messages", "messages must be a list, not %s", kind_name(msgs));
	check_messages_limit(p, msgs, "messages");
	if (!capy_tval_len(msgs))
		pfail(p, "invalid_value", "messages", "messages must not be empty");
	return capy_tval_len(msgs);
}

/* --- the entry point ---------------------------------------------------------------------- */

/* NaN, Infinity and numbers past the double range (1e400) are Python's, not JSON's: they
 * could not be written back into tools_json, echoes or tool-call arguments. */
static void check_finite(struct api_parse *p, const struct capy_tval *v, const char *path)
{
	char at[API_PATH_MAX];
	size_t i, n;

	switch (capy_tval_kind(v)) {
	case CAPY_TVAL_FLOAT:
		if (!isfinite(capy_tval_numv(v)))
			pfail(p, "invalid_value", path, "%s is not a finite number", path[0] ? path : "body");
		return;
	case CAPY_TVAL_LIST:
		n = capy_tval_len(v);
		for (i = 0; i < n; i++) {
			ppath_i(at, path, i);
			check_finite(p, capy_tval_at(v, i), at);
		}
		return;
	case CAPY_TVAL_DICT:
		n = capy_tval_dict_len(v);
		for (i = 0; i < n; i++) {
			struct capy_tval *e;
			const char *key = capy_tval_dict_entry(v, i, NULL, &e);

			ppath(at, path, key);
			check_finite(p, e, at);
		}
		return;
	default:
		return;
	}
}

/* "request body:3:7: msg" -> "request body is not valid JSON (line 3, column 7): msg" */
static void json_error(struct api_parse *p, const char *msg)
{
	static const char what[] = "request body:";
	unsigned long line = 0, col = 0;
	int used = 0;

	if (!strncmp(msg, what, sizeof(what) - 1) &&
	    sscanf(msg + sizeof(what) - 1, "%lu:%lu: %n", &line, &col, &used) == 2 && used)
		pfail(p, "invalid_json", NULL,
		      "request body is not valid JSON (line %lu, column %lu): %s", line, col,
		      msg + sizeof(what) - 1 + used);
	pfail(p, "invalid_json", NULL, "request body is not valid JSON: %s", msg);
}

int capy_api_parse(enum capy_api api, const char *body, size_t len,
		   const struct capy_api_limits *lim, struct capy_api_request *req,
		   struct capy_api_error *err)
{
	struct api_parse p = { .req = req, .err = err };
	struct capy_err e = { 0 };
	struct capy_tval *root = NULL;
	int rc;

	memset(req, 0, sizeof(*req));
	memset(err, 0, sizeof(*err));
	req->api = api;
	req->add_generation_prompt = true;
	req->parallel_tool_calls = true;
	req->logprobs = -1;
	req->thinking = -1;
	p.lim.max_messages = lim && lim->max_messages ? lim->max_messages : DEFAULT_MAX_MESSAGES;
	p.lim.max_tools = lim && lim->max_tools ? lim->max_tools : DEFAULT_MAX_TOOLS;
	p.lim.max_stop = lim && lim->max_stop ? lim->max_stop : DEFAULT_MAX_STOP;
	p.lim.max_tokens = lim ? lim->max_tokens : 0;
	if (setjmp(p.fail)) {
		capy_buf_release(&p.scratch);
		capy_buf_release(&p.msgbuf);
		capy_api_request_release(req);
		return p.code;
	}
	req->doc = p.doc = capy_tdoc_new();
	if (!p.doc)
		poom(&p);
	req->kwargs = pdict(&p);
	rc = capy_tdoc_parse_json(p.doc, body ? body : "", body ? len : 0, "request body", &root, &e);
	if (rc == CAPY_ENOMEM)
		poom(&p);
	if (rc < 0)
		json_error(&p, e.msg);
	if (capy_tval_kind(root) != CAPY_TVAL_DICT)
		pfail(&p, "invalid_type", NULL, "request body must be a JSON object, not %s",
		      kind_name(root));
	check_finite(&p, root, "");
	req->body = root;
	req->model = popt_str(&p, root, "model", "");
	switch (api) {
	case CAPY_API_CHAT:
		parse_chat(&p, root);
		break;
	case CAPY_API_COMPLETIONS:
		parse_completions(&p, root);
		break;
	case CAPY_API_RESPONSES:
		parse_responses(&p, root);
		break;
	case CAPY_API_MESSAGES:
	case CAPY_API_COUNT_TOKENS:
		parse_messages(&p, root, api == CAPY_API_COUNT_TOKENS);
		break;
	default:
		pfail(&p, NULL, NULL, "unknown API %d", (int)api);
	}
	capy_buf_release(&p.scratch);
	capy_buf_release(&p.msgbuf);
	return 0;
}

void capy_api_request_release(struct capy_api_request *req)
{
	if (!req)
		return;
	capy_tdoc_free(req->doc);
	free(req->tools_json);
	free(req->prompt_ids);
	free((void *)req->stop);
	memset(req, 0, sizeof(*req));
	req->logprobs = -1;
	req->thinking = -1;
}

void capy_api_outparse_opts(const struct capy_api_request *req, unsigned flags_extra,
			    struct capy_outparse_opts *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->flags = flags_extra;
	if (req->tools_json && req->tool_choice != CAPY_API_TOOLS_NONE)
		opts->tools_json = req->tools_json;
	else
		opts->flags |= CAPY_OUTPARSE_NO_TOOL_CALLS;
	if (!req->stream)
		opts->flags |= CAPY_OUTPARSE_HOLD_CALLS;
	if (req->continue_final_message)
		opts->flags |= CAPY_OUTPARSE_CONTINUE;
}
