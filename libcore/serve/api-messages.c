/* api-messages.c - request parsing of Anthropic /v1/messages and /v1/messages/count_tokens:
 * system, content blocks (text, tool_use, tool_result, thinking) to chat messages, prefill,
 * thinking, tools. */
#include "serve/api-impl.h"

/* Claude Code's first system block, "x-anthropic-billing-header: cc_version=...; cch=...;",
 * changes with every request and would defeat the prefix cache; it says nothing to the
 * model (vLLM drops it too). */
static bool billing_header(const char *s, size_t len)
{
	static const char h[] = "x-anthropic-billing-header";

	return len >= sizeof(h) - 1 && !memcmp(s, h, sizeof(h) - 1);
}

static const char *block_type(struct api_parse *p, const struct capy_tval *b, const char *at)
{
	const char *type;
	char tat[API_PATH_MAX];

	if (capy_tval_kind(b) != CAPY_TVAL_DICT)
		pfail(p, "invalid_type", at, "%s must be a content block object, not %s", at,
		      kind_name(b));
	type = popt_str(p, b, "type", at);
	if (!type) {
		ppath(tat, at, "type");
		pfail(p, "missing_required_parameter", tat, "%s is required", tat);
	}
	return type;
}

static const char *block_text(struct api_parse *p, const struct capy_tval *b, const char *key,
			      const char *at, size_t *len)
{
	struct capy_tval *t = pget(b, key);
	char tat[API_PATH_MAX];

	ppath(tat, at, key);
	if (!t)
		pfail(p, "missing_required_parameter", tat, "%s is required", tat);
	if (capy_tval_kind(t) != CAPY_TVAL_STR)
		pfail(p, "invalid_type", tat, "%s must be a string, not %s", tat, kind_name(t));
	return capy_tval_strv(t, len);
}

static void refuse_block(struct api_parse *p, const char *type, const char *at)
{
	char tat[API_PATH_MAX];

	ppath(tat, at, "type");
	if (!strcmp(type, "image"))
		pfail(p, "unsupported_content", at,
		      "image input is not supported by this server (%s: text only)", at);
	if (!strcmp(type, "document"))
		pfail(p, "unsupported_content", at,
		      "document input is not supported by this server (%s: text only)", at);
	pfail(p, "invalid_value", tat, "%s '%s' is not supported here", tat, type);
}

/* system: a string or text blocks, joined with "\n" into p->scratch. */
static void system_text(struct api_parse *p, const struct capy_tval *sys, const char *path)
{
	char at[API_PATH_MAX];
	bool first = true;
	size_t i, len;
	const char *s;

	capy_buf_reset(&p->scratch);
	capy_buf_puts(&p->scratch, "");
	if (capy_tval_kind(sys) == CAPY_TVAL_STR) {
		s = capy_tval_strv(sys, &len);
		if (!billing_header(s, len))
			pjoin(p, &first, s, len);
		return;
	}
	if (capy_tval_kind(sys) != CAPY_TVAL_LIST)
		pfail(p, "invalid_type", path, "%s must be a string or a list of text blocks", path);
	for (i = 0; i < capy_tval_len(sys); i++) {
		struct capy_tval *b = capy_tval_at(sys, i);
		const char *type;

		ppath_i(at, path, i);
		type = block_type(p, b, at);
		if (strcmp(type, "text"))
			refuse_block(p, type, at);
		s = block_text(p, b, "text", at, &len);
		if (len && !billing_header(s, len))
			pjoin(p, &first, s, len);
	}
	if (p->scratch.oom)
		poom(p);
}

/* A tool_result's content: a string, or blocks of text (and tool_reference, which names a
 * tool Claude Code's ToolSearch loaded: all tools are in the prompt already, so the name is
 * kept as text). Into p->scratch. */
static void tool_result_text(struct api_parse *p, const struct capy_tval *b, const char *at)
{
	struct capy_tval *c = pget(b, "content");
	char cat[API_PATH_MAX], eat[API_PATH_MAX];
	bool first = true;
	size_t i, len;
	const char *s;

	ppath(cat, at, "content");
	capy_buf_reset(&p->scratch);
	capy_buf_puts(&p->scratch, "");
	if (!c)
		return;
	if (capy_tval_kind(c) == CAPY_TVAL_STR) {
		s = capy_tval_strv(c, &len);
		pjoin(p, &first, s, len);
		return;
	}
	if (capy_tval_kind(c) != CAPY_TVAL_LIST)
		pfail(p, "invalid_type", cat, "%s must be a string or a list of content blocks", cat);
	for (i = 0; i < capy_tval_len(c); i++) {
		struct capy_tval *e = capy_tval_at(c, i);
		const char *type;

		ppath_i(eat, cat, i);
		type = block_type(p, e, eat);
		if (!strcmp(type, "text")) {
			s = block_text(p, e, "text", eat, &len);
			pjoin(p, &first, s, len);
		} else if (!strcmp(type, "tool_reference")) {
			s = popt_str(p, e, "tool_name", eat);
			if (!s)
				s = popt_str(p, e, "name", eat);
			if (s)
				pjoin(p, &first, s, strlen(s));
		} else {
			refuse_block(p, type, eat);
		}
	}
	if (p->scratch.oom)
		poom(p);
}

static void msgbuf_join(struct api_parse *p, bool *first, const char *s, size_t len)
{
	if (!*first)
		capy_buf_putc(&p->msgbuf, '\n');
	*first = false;
	capy_buf_add(&p->msgbuf, s, len);
	if (p->msgbuf.oom)
		poom(p);
}

/* A user (or system) message's blocks: each tool_result becomes a tool message, in order;
 * the text blocks become one message after them. */
static void user_blocks(struct api_parse *p, const struct capy_tval *content, const char *role,
			const char *cat)
{
	struct capy_api_request *r = p->req;
	char at[API_PATH_MAX];
	bool first = true, results = false;
	size_t i, len;
	const char *s;

	capy_buf_reset(&p->msgbuf);
	capy_buf_puts(&p->msgbuf, "");
	for (i = 0; i < capy_tval_len(content); i++) {
		struct capy_tval *b = capy_tval_at(content, i), *m;
		const char *type;

		ppath_i(at, cat, i);
		type = block_type(p, b, at);
		if (!strcmp(type, "text")) {
			s = block_text(p, b, "text", at, &len);
			if (len && !(strcmp(role, "system") == 0 && billing_header(s, len)))
				msgbuf_join(p, &first, s, len);
		} else if (!strcmp(type, "tool_result") && strcmp(role, "system")) {
			const char *id = popt_str(p, b, "tool_use_id", at);

			/* is_error is not told to the model: the text says what went wrong */
			tool_result_text(p, b, at);
			m = pmsg(p, "tool", p->scratch.data, p->scratch.len);
			pset(p, m, "tool_call_id", pstrz(p, id ? id : ""));
			ppush(p, r->messages, m);
			results = true;
		} else {
			refuse_block(p, type, at);
		}
	}
	/* a user message of tool results only adds nothing more; a system message of the
	 * billing header only is gone */
	if (!first || (!results && strcmp(role, "system")))
		ppush(p, r->messages, pmsg(p, role, p->msgbuf.data, p->msgbuf.len));
}

static void assistant_blocks(struct api_parse *p, const struct capy_tval *content,
			     const char *cat, bool last)
{
	struct capy_api_request *r = p->req;
	struct capy_tval *m, *calls = NULL;
	char at[API_PATH_MAX], iat[API_PATH_MAX];
	bool first = true, rfirst = true, reasoning = false;
	size_t i, len;
	const char *s;

	capy_buf_reset(&p->msgbuf);
	capy_buf_puts(&p->msgbuf, "");
	capy_buf_reset(&p->scratch);
	capy_buf_puts(&p->scratch, "");
	for (i = 0; i < capy_tval_len(content); i++) {
		struct capy_tval *b = capy_tval_at(content, i), *input;
		const char *type, *id, *name;

		ppath_i(at, cat, i);
		type = block_type(p, b, at);
		if (!strcmp(type, "text")) {
			s = block_text(p, b, "text", at, &len);
			if (len)
				msgbuf_join(p, &first, s, len);
		} else if (!strcmp(type, "thinking")) {
			s = block_text(p, b, "thinking", at, &len);
			pjoin(p, &rfirst, s, len);
			reasoning = true;
		} else if (!strcmp(type, "redacted_thinking")) {
			continue; /* another server's encrypted reasoning */
		} else if (!strcmp(type, "tool_use")) {
			if (last)
				pfail(p, "invalid_value", at,
				      "%s: the final assistant message cannot hold tool_use blocks (their results must follow)",
				      at);
			id = popt_str(p, b, "id", at);
			name = popt_str(p, b, "name", at);
			if (!name) {
				ppath(iat, at, "name");
				pfail(p, "missing_required_parameter", iat, "%s is required", iat);
			}
			input = popt_dict(p, b, "input", at);
			if (!calls)
				calls = plist(p);
			ppush(p, calls, pcall(p, id, name, input ? input : pdict(p)));
		} else {
			if (!strcmp(type, "tool_result"))
				pfail(p, "invalid_value", at,
				      "%s: tool_result blocks belong in user messages", at);
			refuse_block(p, type, at);
		}
	}
	if (p->scratch.oom || p->msgbuf.oom)
		poom(p);
	m = pmsg(p, "assistant", p->msgbuf.data, p->msgbuf.len);
	if (reasoning)
		pset(p, m, "reasoning_content", pstr(p, p->scratch.data, p->scratch.len));
	if (calls)
		pset(p, m, "tool_calls", calls);
	ppush(p, r->messages, m);
}

static const char *message_role(struct api_parse *p, const struct capy_tval *m, const char *at)
{
	const char *role = popt_str(p, m, "role", at);
	char rat[API_PATH_MAX];

	ppath(rat, at, "role");
	if (!role)
		pfail(p, "missing_required_parameter", rat, "%s is required", rat);
	if (!strcmp(role, "user") || !strcmp(role, "ctx") || !strcmp(role, "msg"))
		return "user"; /* ctx, msg: roles newer Claude Code versions send (vLLM maps them) */
	if (!strcmp(role, "assistant"))
		return "assistant";
	if (!strcmp(role, "system"))
		return "system"; /* Claude Code puts one after the first user message */
	pfail(p, "invalid_value", rat, "%s must be user or assistant, not '%s'", rat, role);
}

static void anthropic_messages(struct api_parse *p, const struct capy_tval *body)
{
	struct capy_api_request *r = p->req;
	struct capy_tval *msgs = pget(body, "messages"), *sys, *lastm;
	char at[API_PATH_MAX], cat[API_PATH_MAX];
	size_t i, n, len;

	n = require_messages(p, msgs);
	r->messages = plist(p);
	if ((sys = pget(body, "system"))) {
		system_text(p, sys, "system");
		if (p->scratch.len)
			ppush(p, r->messages, pmsg(p, "system", p->scratch.data, p->scratch.len));
	}
	for (i = 0; i < n; i++) {
		struct capy_tval *m = capy_tval_at(msgs, i), *content;
		const char *role;

		ppath_i(at, "messages", i);
		if (capy_tval_kind(m) != CAPY_TVAL_DICT)
			pfail(p, "invalid_type", at, "%s must be an object, not %s", at, kind_name(m));
		role = message_role(p, m, at);
		content = pget(m, "content");
		ppath(cat, at, "content");
		if (!content)
			pfail(p, "missing_required_parameter", cat, "%s is required", cat);
		if (capy_tval_kind(content) == CAPY_TVAL_STR) {
			const char *s = capy_tval_strv(content, &len);

			if (strcmp(role, "system")) {
				ppush(p, r->messages, pmsg(p, role, s, len));
			} else {
				system_text(p, content, cat);
				if (p->scratch.len)
					ppush(p, r->messages,
					      pmsg(p, role, p->scratch.data, p->scratch.len));
			}
		} else if (capy_tval_kind(content) != CAPY_TVAL_LIST) {
			pfail(p, "invalid_type", cat, "%s must be a string or a list of content blocks",
			      cat);
		} else if (!strcmp(role, "assistant")) {
			assistant_blocks(p, content, cat, i + 1 == n);
		} else {
			user_blocks(p, content, role, cat);
		}
	}
	/* A final assistant message is a prefill: generation continues its text. An empty one
	 * asks for nothing: it is dropped and the turn starts as usual. */
	lastm = capy_tval_at(r->messages, capy_tval_len(r->messages) - 1);
	if (str_eq(capy_tval_get(lastm, "role"), "assistant") &&
	    str_eq(capy_tval_get(capy_tval_at(msgs, n - 1), "role"), "assistant")) {
		const char *s = capy_tval_strv(capy_tval_get(lastm, "content"), &len);
		size_t k = 0;

		while (k < len && strchr(" \t\r\n", s[k]))
			k++;
		if (k == len) {
			struct capy_tval *keep = plist(p);

			for (k = 0; k + 1 < capy_tval_len(r->messages); k++)
				ppush(p, keep, capy_tval_at(r->messages, k));
			r->messages = keep;
		} else {
			r->continue_final_message = true;
			r->add_generation_prompt = false;
		}
	}
	if (!capy_tval_len(r->messages))
		pfail(p, "invalid_value", "messages", "messages hold nothing to answer");
}

/* thinking: {type: enabled (budget_tokens) | disabled | adaptive}. Absent means no extended
 * thinking, as in Anthropic's API: enable_thinking false. */
static void anthropic_thinking(struct api_parse *p, const struct capy_tval *body)
{
	struct capy_tval *th = popt_dict(p, body, "thinking", "");
	const char *type;
	int64_t budget;

	if (!th) {
		set_thinking(p, 0);
		return;
	}
	type = popt_str(p, th, "type", "thinking");
	if (!type)
		pfail(p, "missing_required_parameter", "thinking.type", "thinking.type is required");
	if (!strcmp(type, "enabled") || !strcmp(type, "adaptive")) {
		set_thinking(p, 1);
		/* Anthropic wants budget_tokens < max_tokens; clients (Qwen Code) send equal */
		if (popt_int(p, th, "budget_tokens", "thinking", 0, INT64_MAX, &budget))
			p->req->thinking_budget = budget;
	} else if (!strcmp(type, "disabled")) {
		set_thinking(p, 0);
	} else {
		pfail(p, "invalid_value", "thinking.type",
		      "thinking.type must be enabled, disabled or adaptive, not '%s'", type);
	}
}

static void output_config(struct api_parse *p, const struct capy_tval *body)
{
	struct capy_tval *oc = popt_dict(p, body, "output_config", "");
	struct capy_tval *fmt = popt_dict(p, oc, "format", "output_config");
	const char *type;

	/* effort: Qwen thinks or does not; the thinking field decides */
	if (!fmt)
		return;
	type = popt_str(p, fmt, "type", "output_config.format");
	if (type && !strcmp(type, "json_schema")) {
		p->req->response_format = CAPY_API_FORMAT_JSON_SCHEMA;
		p->req->response_schema = popt_dict(p, fmt, "schema", "output_config.format");
		/* Anthropic's structured outputs refuse what they cannot guarantee */
		p->req->response_strict = true;
		p->req->response_schema_at = "output_config.format.schema";
	}
}

void parse_messages(struct api_parse *p, const struct capy_tval *body, bool count_tokens)
{
	struct capy_api_request *r = p->req;

	if (!count_tokens) {
		if (!pget(body, "max_tokens"))
			pfail(p, "missing_required_parameter", "max_tokens", "max_tokens is required");
		parse_max_tokens(p, body, "max_tokens");
		r->stream = popt_bool(p, body, "stream", "", false);
	}
	anthropic_messages(p, body);
	parse_stop(p, body, "stop_sequences");
	parse_sampling(p, body);
	parse_tools_messages(p, body);
	parse_tool_choice_messages(p, body);
	finish_tools(p);
	parse_kwargs(p, body);
	anthropic_thinking(p, body);
	output_config(p, body);
}
