/* api-responses.c - request parsing of /v1/responses: instructions and input items to chat
 * messages, tools, reasoning, text.format. */
#include "serve/api-impl.h"

static struct capy_tval *last_message(struct api_parse *p)
{
	size_t n = capy_tval_len(p->req->messages);

	return n ? capy_tval_at(p->req->messages, n - 1) : NULL;
}

static bool is_assistant(const struct capy_tval *m)
{
	return m && str_eq(capy_tval_get(m, "role"), "assistant");
}

/* An assistant message with nothing in it yet but, maybe, its reasoning. */
static bool only_reasoning(const struct capy_tval *m)
{
	size_t len;

	return is_assistant(m) && capy_tval_strv(capy_tval_get(m, "content"), &len) && !len &&
	       !capy_tval_get(m, "tool_calls");
}

static const char *item_role(struct api_parse *p, const struct capy_tval *it, const char *at)
{
	const char *role = popt_str(p, it, "role", at);
	char rat[API_PATH_MAX];

	ppath(rat, at, "role");
	if (!role)
		pfail(p, "missing_required_parameter", rat, "%s is required", rat);
	if (!strcmp(role, "developer") || !strcmp(role, "system"))
		return "system";
	if (!strcmp(role, "user"))
		return "user";
	if (!strcmp(role, "assistant"))
		return "assistant";
	pfail(p, "invalid_value", rat, "%s must be user, assistant, system or developer, not '%s'",
	      rat, role);
}

static void item_message(struct api_parse *p, const struct capy_tval *it, const char *at,
			 bool last)
{
	struct capy_tval *prev = last_message(p);
	const char *role = item_role(p, it, at), *status;
	char cat[API_PATH_MAX];

	ppath(cat, at, "content");
	pcontent_openai(p, capy_tval_get(it, "content"), cat, true);
	if (!strcmp(role, "assistant")) {
		/* the text of a turn whose reasoning item came first joins that message */
		if (only_reasoning(prev))
			pset(p, prev, "content", pstr(p, p->scratch.data, p->scratch.len));
		else
			ppush(p, p->req->messages,
			      pmsg(p, "assistant", p->scratch.data, p->scratch.len));
		/* vLLM: a final assistant message still in progress is continued */
		status = popt_str(p, it, "status", at);
		if (last && status && (!strcmp(status, "in_progress") || !strcmp(status, "incomplete"))) {
			p->req->continue_final_message = true;
			p->req->add_generation_prompt = false;
		}
		return;
	}
	ppush(p, p->req->messages, pmsg(p, role, p->scratch.data, p->scratch.len));
}

/* The text of a reasoning item: its reasoning_text content, else its summary. */
static void item_reasoning(struct api_parse *p, const struct capy_tval *it, const char *at)
{
	static const char *const keys[] = { "content", "summary" };
	struct capy_tval *prev = last_message(p), *m;
	char lat[API_PATH_MAX], eat[API_PATH_MAX], tat[API_PATH_MAX];
	bool first = true;
	size_t k, i;

	capy_buf_reset(&p->scratch);
	capy_buf_puts(&p->scratch, "");
	for (k = 0; k < ARRAY_SIZE(keys) && first; k++) {
		struct capy_tval *l = popt_list(p, it, keys[k], at);

		ppath(lat, at, keys[k]);
		for (i = 0; i < capy_tval_len(l); i++) {
			struct capy_tval *e = capy_tval_at(l, i), *t;
			size_t len;
			const char *s;

			ppath_i(eat, lat, i);
			if (capy_tval_kind(e) != CAPY_TVAL_DICT)
				pfail(p, "invalid_type", eat, "%s must be an object, not %s", eat,
				      kind_name(e));
			t = pget(e, "text");
			ppath(tat, eat, "text");
			if (capy_tval_kind(t) != CAPY_TVAL_STR)
				pfail(p, t ? "invalid_type" : "missing_required_parameter", tat,
				      "%s must be a string", tat);
			s = capy_tval_strv(t, &len);
			pjoin(p, &first, s, len);
		}
	}
	if (p->scratch.oom)
		poom(p);
	/* encrypted_content is another server's: there is nothing to decrypt here */
	if (only_reasoning(prev) && !capy_tval_get(prev, "reasoning_content")) {
		m = prev;
	} else {
		m = pmsg(p, "assistant", "", 0);
		ppush(p, p->req->messages, m);
	}
	pset(p, m, "reasoning_content", pstr(p, p->scratch.data, p->scratch.len));
}

static void add_call(struct api_parse *p, struct capy_tval *call)
{
	struct capy_tval *prev = last_message(p), *calls;

	if (!is_assistant(prev)) {
		prev = pmsg(p, "assistant", "", 0);
		ppush(p, p->req->messages, prev);
	}
	calls = capy_tval_get(prev, "tool_calls");
	if (!calls) {
		calls = plist(p);
		pset(p, prev, "tool_calls", calls);
	}
	ppush(p, calls, call);
}

static const char *req_str(struct api_parse *p, const struct capy_tval *it, const char *key,
			   const char *at)
{
	const char *s = popt_str(p, it, key, at);
	char kat[API_PATH_MAX];

	if (!s) {
		ppath(kat, at, key);
		pfail(p, "missing_required_parameter", kat, "%s is required", kat);
	}
	return s;
}

static void item_function_call(struct api_parse *p, const struct capy_tval *it, const char *at)
{
	const char *call_id = req_str(p, it, "call_id", at), *name = req_str(p, it, "name", at);
	const char *args = popt_str(p, it, "arguments", at);
	const char *ns = popt_str(p, it, "namespace", at);
	char aat[API_PATH_MAX];

	if (ns && ns[0]) { /* the flat name the model saw (api-tools.c) */
		capy_buf_reset(&p->scratch);
		capy_buf_printf(&p->scratch, "%s__%s", ns, name);
		if (p->scratch.oom)
			poom(p);
		name = capy_tval_strv(pstr(p, p->scratch.data, p->scratch.len), NULL);
	}
	ppath(aat, at, "arguments");
	if (args && args[0])
		check_json_text(p, args, strlen(args), aat);
	add_call(p, pcall(p, call_id, name, pstrz(p, args ? args : "")));
}

/* A custom tool call's free-form input travels as the argument "input" of the function the
 * custom tool became (api-tools.c). */
static void item_custom_call(struct api_parse *p, const struct capy_tval *it, const char *at)
{
	const char *call_id = req_str(p, it, "call_id", at), *name = req_str(p, it, "name", at);
	const char *input = popt_str(p, it, "input", at);
	struct capy_tval *args = pdict(p);

	pset(p, args, "input", pstrz(p, input ? input : ""));
	add_call(p, pcall(p, call_id, name, args));
}

static void item_call_output(struct api_parse *p, const struct capy_tval *it, const char *at)
{
	const char *call_id = req_str(p, it, "call_id", at);
	char oat[API_PATH_MAX];
	struct capy_tval *m;

	ppath(oat, at, "output");
	pcontent_openai(p, capy_tval_get(it, "output"), oat, true);
	m = pmsg(p, "tool", p->scratch.data, p->scratch.len);
	pset(p, m, "tool_call_id", pstrz(p, call_id));
	ppush(p, p->req->messages, m);
}

static void responses_input(struct api_parse *p, const struct capy_tval *body)
{
	struct capy_api_request *r = p->req;
	struct capy_tval *input = pget(body, "input");
	const char *instr = popt_str(p, body, "instructions", "");
	char at[API_PATH_MAX], tat[API_PATH_MAX];
	size_t i, n;

	r->messages = plist(p);
	if (instr)
		ppush(p, r->messages, pmsg(p, "system", instr, strlen(instr)));
	if (!input)
		pfail(p, "missing_required_parameter", "input", "input is required");
	if (capy_tval_kind(input) == CAPY_TVAL_STR) {
		size_t len;
		const char *s = capy_tval_strv(input, &len);

		ppush(p, r->messages, pmsg(p, "user", s, len));
		return;
	}
	if (capy_tval_kind(input) != CAPY_TVAL_LIST)
		pfail(p, "invalid_type", "input", "input must be a string or a list of items, not %s",
		      kind_name(input));
	check_messages_limit(p, input, "input");
	n = capy_tval_len(input);
	if (!n)
		pfail(p, "invalid_value", "input", "input must not be empty");
	for (i = 0; i < n; i++) {
		struct capy_tval *it = capy_tval_at(input, i);
		const char *type;

		ppath_i(at, "input", i);
		if (capy_tval_kind(it) != CAPY_TVAL_DICT)
			pfail(p, "invalid_type", at, "%s must be an object, not %s", at, kind_name(it));
		type = popt_str(p, it, "type", at);
		if (!type || !strcmp(type, "message"))
			item_message(p, it, at, i + 1 == n);
		else if (!strcmp(type, "reasoning"))
			item_reasoning(p, it, at);
		else if (!strcmp(type, "function_call"))
			item_function_call(p, it, at);
		else if (!strcmp(type, "custom_tool_call"))
			item_custom_call(p, it, at);
		else if (!strcmp(type, "function_call_output") ||
			 !strcmp(type, "custom_tool_call_output"))
			item_call_output(p, it, at);
		else {
			ppath(tat, at, "type");
			if (!strcmp(type, "item_reference"))
				pfail(p, "unsupported_value", tat,
				      "%s 'item_reference' is not supported: this server stores no items", tat);
			pfail(p, "unsupported_value", tat, "%s '%s' is not supported by this server", tat,
			      type);
		}
	}
	if (!capy_tval_len(r->messages))
		pfail(p, "invalid_value", "input", "input holds no messages");
}

static bool includes(const struct capy_tval *include, const char *what)
{
	size_t i;

	for (i = 0; i < capy_tval_len(include); i++)
		if (str_eq(capy_tval_at(include, i), what))
			return true;
	return false;
}

/* text.format {type: text|json_object|json_schema, schema, strict}: the answer is held to it. */
static void responses_text(struct api_parse *p, const struct capy_tval *body)
{
	struct capy_tval *text = popt_dict(p, body, "text", "");
	struct capy_tval *fmt = popt_dict(p, text, "format", "text");
	const char *type = popt_str(p, fmt, "type", "text.format");

	if (!type || !strcmp(type, "text"))
		return;
	if (!strcmp(type, "json_object")) {
		p->req->response_format = CAPY_API_FORMAT_JSON_OBJECT;
	} else if (!strcmp(type, "json_schema")) {
		p->req->response_format = CAPY_API_FORMAT_JSON_SCHEMA;
		p->req->response_schema = popt_dict(p, fmt, "schema", "text.format");
		p->req->response_strict = popt_bool(p, fmt, "strict", "text.format", false);
		p->req->response_schema_at = "text.format.schema";
	} else {
		pfail(p, "invalid_value", "text.format.type",
		      "text.format.type must be text, json_object or json_schema, not '%s'", type);
	}
}

void parse_responses(struct api_parse *p, const struct capy_tval *body)
{
	static const char *const unstored[] = { "previous_response_id", "conversation" };
	struct capy_api_request *r = p->req;
	struct capy_tval *include, *reasoning;
	int64_t top = 0;
	bool top_given;
	size_t i;

	for (i = 0; i < ARRAY_SIZE(unstored); i++)
		if (pget(body, unstored[i]))
			pfail(p, "unsupported_parameter", unstored[i],
			      "%s is not supported: this server stores no responses (send the whole input)",
			      unstored[i]);
	if (popt_bool(p, body, "background", "", false))
		pfail(p, "unsupported_parameter", "background", "background responses are not supported");
	if (pget(body, "prompt"))
		pfail(p, "unsupported_parameter", "prompt", "prompt templates are not supported");
	responses_input(p, body);
	parse_max_tokens(p, body, "max_output_tokens");
	parse_stop(p, body, "stop"); /* not OpenAI's; vLLM takes it */
	parse_sampling(p, body);
	r->stream = popt_bool(p, body, "stream", "", false);
	include = popt_list(p, body, "include", "");
	r->encrypted_reasoning = includes(include, "reasoning.encrypted_content");
	top_given = popt_int(p, body, "top_logprobs", "", 0, 20, &top);
	if (top_given || includes(include, "message.output_text.logprobs"))
		r->logprobs = (int)top;
	parse_tools_responses(p, body);
	parse_tool_choice_openai(p, body, true);
	finish_tools(p);
	parse_kwargs(p, body);
	reasoning = popt_dict(p, body, "reasoning", "");
	set_thinking(p, effort_thinking(p, popt_str(p, reasoning, "effort", "reasoning"),
					"reasoning.effort"));
	responses_text(p, body);
}
