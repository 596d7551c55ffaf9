/* api-chat.c - request parsing of /v1/chat/completions and /v1/completions. */
#include "serve/api-impl.h"

/* A JSON text the template will parse (vLLM json.loads assistant tool-call arguments);
 * refused here, with the request's own path, rather than at render time. */
void check_json_text(struct api_parse *p, const char *s, size_t len, const char *at)
{
	struct capy_tval *v;
	struct capy_err e = { 0 };
	int rc = capy_tdoc_parse_json(p->doc, s, len, "arguments", &v, &e);

	if (rc == CAPY_ENOMEM)
		poom(p);
	if (rc < 0)
		pfail(p, "invalid_value", at, "%s is not valid JSON: %s", at,
		      e.msg + strlen("arguments:"));
}

/* tool_calls of an assistant message, in the normalized shape; arguments stay the JSON text
 * the client sent (libcore/text/chat.c parses it as vLLM does), or the object if it sent one. */
static struct capy_tval *chat_tool_calls(struct api_parse *p, const struct capy_tval *m,
					 const char *mat)
{
	struct capy_tval *calls = popt_list(p, m, "tool_calls", mat), *out;
	char at[API_PATH_MAX], cat[API_PATH_MAX], fat[API_PATH_MAX], aat[API_PATH_MAX];
	size_t i, n = capy_tval_len(calls);

	if (!n)
		return NULL;
	ppath(cat, mat, "tool_calls");
	out = plist(p);
	for (i = 0; i < n; i++) {
		struct capy_tval *c = capy_tval_at(calls, i), *fn, *args;
		const char *name, *id;

		ppath_i(at, cat, i);
		if (capy_tval_kind(c) != CAPY_TVAL_DICT)
			pfail(p, "invalid_type", at, "%s must be an object, not %s", at, kind_name(c));
		id = popt_str(p, c, "id", at);
		fn = popt_dict(p, c, "function", at);
		ppath(fat, at, "function");
		if (!fn)
			pfail(p, "missing_required_parameter", fat, "%s is required", fat);
		name = popt_str(p, fn, "name", fat);
		ppath(aat, fat, "name");
		if (!name)
			pfail(p, "missing_required_parameter", aat, "%s is required", aat);
		args = pget(fn, "arguments");
		ppath(aat, fat, "arguments");
		switch (capy_tval_kind(args)) {
		case CAPY_TVAL_STR: {
			size_t len;
			const char *s = capy_tval_strv(args, &len);

			if (len)
				check_json_text(p, s, len, aat);
			break;
		}
		case CAPY_TVAL_DICT:
			break;
		default:
			if (args)
				pfail(p, "invalid_type", aat, "%s must be a JSON string, not %s", aat,
				      kind_name(args));
			args = pstrz(p, "");
		}
		ppush(p, out, pcall(p, id, name, args));
	}
	return out;
}

static const char *chat_role(struct api_parse *p, const struct capy_tval *m, const char *mat)
{
	static const char *const roles[] = { "system", "user", "assistant", "tool" };
	const char *role = popt_str(p, m, "role", mat);
	char at[API_PATH_MAX];
	size_t i;

	ppath(at, mat, "role");
	if (!role)
		pfail(p, "missing_required_parameter", at, "%s is required", at);
	if (!strcmp(role, "developer"))
		return "system"; /* the Qwen templates know no developer role */
	for (i = 0; i < ARRAY_SIZE(roles); i++)
		if (!strcmp(role, roles[i]))
			return roles[i];
	pfail(p, "invalid_value", at,
	      "%s must be system, developer, user, assistant or tool, not '%s'", at, role);
}

static void chat_messages(struct api_parse *p, const struct capy_tval *body)
{
	struct capy_api_request *r = p->req;
	struct capy_tval *msgs = pget(body, "messages");
	char at[API_PATH_MAX], cat[API_PATH_MAX];
	size_t i, n;

	n = require_messages(p, msgs);
	r->messages = plist(p);
	for (i = 0; i < n; i++) {
		struct capy_tval *m = capy_tval_at(msgs, i), *nm, *calls;
		const char *role, *s;

		ppath_i(at, "messages", i);
		if (capy_tval_kind(m) != CAPY_TVAL_DICT)
			pfail(p, "invalid_type", at, "%s must be an object, not %s", at, kind_name(m));
		role = chat_role(p, m, at);
		ppath(cat, at, "content");
		pcontent_openai(p, capy_tval_get(m, "content"), cat, true);
		nm = pmsg(p, role, p->scratch.data, p->scratch.len);
		if ((s = popt_str(p, m, "name", at)))
			pset(p, nm, "name", pstrz(p, s));
		if (!strcmp(role, "assistant")) {
			s = popt_str(p, m, "reasoning_content", at);
			if (!s)
				s = popt_str(p, m, "reasoning", at);
			if (s)
				pset(p, nm, "reasoning_content", pstrz(p, s));
			if ((calls = chat_tool_calls(p, m, at)))
				pset(p, nm, "tool_calls", calls);
		} else if (!strcmp(role, "tool")) {
			if ((s = popt_str(p, m, "tool_call_id", at)))
				pset(p, nm, "tool_call_id", pstrz(p, s));
		}
		ppush(p, r->messages, nm);
	}
}

/* Reasoning effort (chat reasoning_effort, Responses reasoning.effort) as enable_thinking:
 * the Qwen templates only switch thinking on or off. */
int effort_thinking(struct api_parse *p, const char *effort, const char *at)
{
	static const char *const off[] = { "none", "minimal" };
	static const char *const on[] = { "low", "medium", "high", "xhigh", "max" };
	size_t i;

	if (!effort)
		return -1;
	for (i = 0; i < ARRAY_SIZE(off); i++)
		if (!strcmp(effort, off[i]))
			return 0;
	for (i = 0; i < ARRAY_SIZE(on); i++)
		if (!strcmp(effort, on[i]))
			return 1;
	pfail(p, "invalid_value", at,
	      "%s must be none, minimal, low, medium, high, xhigh or max, not '%s'", at, effort);
}

/* response_format {type, json_schema:{schema, strict}}: the answer is held to it (generate.c). */
static void chat_response_format(struct api_parse *p, const struct capy_tval *body)
{
	struct capy_tval *rf = popt_dict(p, body, "response_format", "");
	const char *type;

	if (!rf)
		return;
	type = popt_str(p, rf, "type", "response_format");
	if (!type || !strcmp(type, "text"))
		return;
	if (!strcmp(type, "json_object")) {
		p->req->response_format = CAPY_API_FORMAT_JSON_OBJECT;
	} else if (!strcmp(type, "json_schema")) {
		struct capy_tval *js = popt_dict(p, rf, "json_schema", "response_format");

		p->req->response_format = CAPY_API_FORMAT_JSON_SCHEMA;
		p->req->response_schema = popt_dict(p, js, "schema", "response_format.json_schema");
		p->req->response_strict = popt_bool(p, js, "strict", "response_format.json_schema", false);
		p->req->response_schema_at = "response_format.json_schema.schema";
	} else {
		pfail(p, "invalid_value", "response_format.type",
		      "response_format.type must be text, json_object or json_schema, not '%s'", type);
	}
}

/* n: one choice per request. */
static void check_n(struct api_parse *p, const struct capy_tval *body, const char *key)
{
	int64_t n;

	if (popt_int(p, body, key, "", INT64_MIN, INT64_MAX, &n) && n != 1)
		pfail(p, "unsupported_value", key,
		      "%s must be 1: this server generates one choice per request", key);
}

static void stream_fields(struct api_parse *p, const struct capy_tval *body)
{
	struct capy_tval *so;

	p->req->stream = popt_bool(p, body, "stream", "", false);
	so = popt_dict(p, body, "stream_options", "");
	p->req->include_usage = popt_bool(p, so, "include_usage", "stream_options", false);
}

void parse_chat(struct api_parse *p, const struct capy_tval *body)
{
	struct capy_api_request *r = p->req;
	int64_t top = 0, budget;
	bool lp;

	chat_messages(p, body);
	r->add_generation_prompt = popt_bool(p, body, "add_generation_prompt", "", true);
	r->continue_final_message = popt_bool(p, body, "continue_final_message", "", false);
	if (r->add_generation_prompt && r->continue_final_message)
		pfail(p, "invalid_value", "continue_final_message",
		      "continue_final_message and add_generation_prompt cannot both be true");
	if (r->continue_final_message &&
	    !str_eq(capy_tval_get(capy_tval_at(r->messages, capy_tval_len(r->messages) - 1), "role"),
		    "assistant"))
		pfail(p, "invalid_value", "continue_final_message",
		      "continue_final_message needs the last message to be the assistant's");
	if (popt_str(p, body, "chat_template", ""))
		pfail(p, "unsupported_parameter", "chat_template",
		      "chat_template is not accepted in requests: the model's own template renders them");
	check_n(p, body, "n");
	parse_max_tokens(p, body, "max_tokens");
	parse_max_tokens(p, body, "max_completion_tokens"); /* wins over max_tokens */
	parse_stop(p, body, "stop");
	parse_sampling(p, body);
	stream_fields(p, body);
	lp = popt_bool(p, body, "logprobs", "", false);
	if (popt_int(p, body, "top_logprobs", "", 0, 20, &top) && !lp)
		pfail(p, "invalid_value", "top_logprobs", "top_logprobs needs logprobs set to true");
	if (lp)
		r->logprobs = (int)top;
	parse_tools_chat(p, body);
	parse_tool_choice_openai(p, body, false);
	finish_tools(p);
	parse_kwargs(p, body);
	/* DashScope's (and Qwen Code's) top-level switches, then OpenAI's reasoning_effort */
	set_thinking(p, pget(body, "enable_thinking") ?
				popt_bool(p, body, "enable_thinking", "", true) : -1);
	if (popt_int(p, body, "thinking_budget", "", 0, INT64_MAX, &budget))
		r->thinking_budget = budget;
	set_thinking(p, effort_thinking(p, popt_str(p, body, "reasoning_effort", ""),
					"reasoning_effort"));
	chat_response_format(p, body);
}

/* prompt: a string, a list of one string, a list of token ids or a list of one such list. */
static void completions_prompt(struct api_parse *p, const struct capy_tval *body)
{
	struct capy_api_request *r = p->req;
	struct capy_tval *pr = pget(body, "prompt"), *ids = NULL;
	char at[API_PATH_MAX];
	size_t i, n;

	if (!pr)
		pfail(p, "missing_required_parameter", "prompt", "prompt is required");
	if (capy_tval_kind(pr) == CAPY_TVAL_LIST && capy_tval_len(pr) == 1 &&
	    (capy_tval_kind(capy_tval_at(pr, 0)) == CAPY_TVAL_STR ||
	     capy_tval_kind(capy_tval_at(pr, 0)) == CAPY_TVAL_LIST))
		pr = capy_tval_at(pr, 0);
	else if (capy_tval_kind(pr) == CAPY_TVAL_LIST && capy_tval_len(pr) > 1 &&
		 capy_tval_kind(capy_tval_at(pr, 0)) != CAPY_TVAL_INT)
		pfail(p, "unsupported_value", "prompt",
		      "prompt holds %zu prompts: this server takes one per request",
		      capy_tval_len(pr));
	if (capy_tval_kind(pr) == CAPY_TVAL_STR) {
		r->prompt = capy_tval_strv(pr, &r->prompt_len);
		if (!r->prompt_len)
			pfail(p, "invalid_value", "prompt", "prompt must not be empty");
		return;
	}
	if (capy_tval_kind(pr) != CAPY_TVAL_LIST)
		pfail(p, "invalid_type", "prompt",
		      "prompt must be a string or a list of token ids, not %s", kind_name(pr));
	ids = pr;
	n = capy_tval_len(ids);
	if (!n)
		pfail(p, "invalid_value", "prompt", "prompt must not be empty");
	r->prompt_ids = malloc(n * sizeof(*r->prompt_ids));
	if (!r->prompt_ids)
		poom(p);
	for (i = 0; i < n; i++) {
		int64_t id;

		ppath_i(at, "prompt", i);
		if (capy_tval_intv(capy_tval_at(ids, i), &id) < 0 || id < 0 || id > INT32_MAX)
			pfail(p, "invalid_value", at, "%s must be a token id (an integer >= 0)", at);
		r->prompt_ids[i] = (int32_t)id;
	}
	r->n_prompt_ids = n;
}

void parse_completions(struct api_parse *p, const struct capy_tval *body)
{
	struct capy_api_request *r = p->req;
	const char *suffix;
	int64_t lp;

	completions_prompt(p, body);
	r->echo = popt_bool(p, body, "echo", "", false);
	if (popt_int(p, body, "logprobs", "", 0, 20, &lp))
		r->logprobs = (int)lp;
	if ((suffix = popt_str(p, body, "suffix", "")) && suffix[0])
		pfail(p, "unsupported_parameter", "suffix", "suffix is not supported by this server");
	check_n(p, body, "n");
	check_n(p, body, "best_of");
	parse_max_tokens(p, body, "max_tokens");
	parse_stop(p, body, "stop");
	parse_sampling(p, body);
	stream_fields(p, body);
}
