/* fuzz-api.c - libFuzzer target for the API request parser (libcore/serve/api) over all five
 * APIs, and the writers over what it accepts.
 *
 * Input: byte 0 picks the API (mod 5), the rest is the request body. A body that parses must
 * give a well-formed request (messages a non-empty list of dicts with a string role and
 * content, tools_json that cJSON reads, a dict of kwargs), render with a small template that
 * walks every message and prints tools with tojson (a template error is allowed, a crash is
 * not), survive continue_final_message on that prompt, and, for the four APIs that answer,
 * give a non-streamed body and SSE data lines that are all valid JSON for a fixed script of
 * output events. Anything else aborts.
 *
 *	make fuzz && t/fuzz/run.sh 300 api
 *
 * Seeds (t/fuzz/corpus/api/) are the captured bodies of t/serve/captured with long strings
 * cut; the dictionary is t/fuzz/api.dict.
 */
#include "serve/api.h"
#include "text/chat.h"

#include <cjson/cJSON.h>

static const char walk[] =
	"{%- for m in messages %}{{ m.role }}: {{ m.content }}"
	"{%- if m.reasoning_content is defined %} [{{ m.reasoning_content }}]{% endif %}"
	"{%- for c in m.tool_calls or [] %} {{ c.function.name }}({{ c.function.arguments|tojson }})"
	"{%- endfor %}\n{% endfor %}{{ tools|tojson }}{{ enable_thinking|default('') }}";

static struct capy_tmpl *tmpl;

static void check(bool ok)
{
	if (!ok)
		abort();
}

static void check_json(const char *s, size_t n)
{
	cJSON *j = cJSON_ParseWithLength(s, n);

	check(j != NULL);
	cJSON_Delete(j);
}

/* Every "data: " line of a stream is JSON but the last "[DONE]". */
static void check_sse(const struct capy_buf *b)
{
	const char *p = b->data, *end = b->data + b->len;

	while (p && p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);

		if (n > 6 && !memcmp(p, "data: ", 6) && !(n == 12 && !memcmp(p + 6, "[DONE]", 6)))
			check_json(p + 6, n - 6);
		p = nl ? nl + 1 : end;
	}
}

static void write_out(const struct capy_api_request *req, struct capy_buf *all)
{
	static const struct {
		enum capy_outparse_event_type type;
		const char *text;
	} script[] = {
		{ CAPY_OUTPARSE_REASONING, "r\"" }, { CAPY_OUTPARSE_CONTENT, "t\\\n\xc3\xa9" },
		{ CAPY_OUTPARSE_CALL_START, "f" }, { CAPY_OUTPARSE_CALL_ARGS, "{\"input\": " },
		{ CAPY_OUTPARSE_CALL_ARGS, "\"x\"}" }, { CAPY_OUTPARSE_CALL_END, NULL },
		{ CAPY_OUTPARSE_CONTENT, "after" },
	};
	struct capy_api_meta meta = { "f1", "m\"", 1, 10, 3, "echo", 4 };
	struct capy_api_usage u = { 10, 3, 5, 1, "device" };
	struct capy_api_top_logprob top = { "\xe2\x82", 2, -1.0 };
	struct capy_api_logprob lp = { "\xff", 1, -0.5, &top, 1 };
	struct capy_api_writer *w;
	struct capy_err err;
	struct capy_buf b = { 0 };
	size_t i;

	if (capy_api_writer_new(&w, req, &meta, &err) < 0)
		return;
	check(capy_api_write_begin(w, &b) == 0);
	for (i = 0; i < ARRAY_SIZE(script); i++) {
		struct capy_outparse_event ev = { .type = script[i].type, .index = 0, .id = "x" };

		if (script[i].type == CAPY_OUTPARSE_CALL_START)
			ev.name = script[i].text;
		else if (script[i].text) {
			ev.text = script[i].text;
			ev.len = strlen(ev.text);
		}
		if (ev.type == CAPY_OUTPARSE_CALL_START || ev.type == CAPY_OUTPARSE_CALL_ARGS ||
		    ev.type == CAPY_OUTPARSE_CALL_END)
			ev.name = "f";
		check(capy_api_write_logprobs(w, &lp, 1) == 0);
		check(capy_api_write_event(w, &ev, &b) == 0);
	}
	check(capy_api_write_end(w, CAPY_API_FINISH_STOP, "s\"", &u, &b) == 0);
	capy_api_writer_free(w);
	if (req->stream)
		check_sse(&b);
	else
		check_json(b.data, b.len);
	capy_buf_add(all, b.data, b.len);
	capy_buf_release(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct capy_tmpl_limits lim = {
		.max_steps = 200000, .max_output = 1 << 20, .max_memory = 64 << 20, .max_depth = 32,
	};
	const struct capy_chat_opts copts = { .limits = &lim };
	struct capy_api_limits alim = { .max_messages = 256, .max_tools = 64 };
	struct capy_api_request req;
	struct capy_api_error aerr;
	struct capy_err err;
	struct capy_buf all = { 0 };
	char *out;
	size_t i, len;
	enum capy_api api;

	if (!tmpl && capy_tmpl_compile(walk, sizeof(walk) - 1, "walk", &tmpl, &err) < 0)
		abort();
	if (size < 1)
		return 0;
	api = (enum capy_api)(data[0] % 5);
	if (capy_api_parse(api, (const char *)data + 1, size - 1, &alim, &req, &aerr) < 0) {
		check(aerr.status == 400 || aerr.status == 500);
		check(aerr.msg[0] != '\0');
		capy_api_error_body(api, &aerr, &all);
		check_json(all.data, all.len);
		capy_buf_release(&all);
		return 0;
	}
	check(req.doc && req.body && capy_tval_kind(req.kwargs) == CAPY_TVAL_DICT);
	if (api == CAPY_API_COMPLETIONS) {
		check((req.prompt && req.prompt_len) != (req.prompt_ids && req.n_prompt_ids));
	} else {
		check(capy_tval_len(req.messages) > 0);
		for (i = 0; i < capy_tval_len(req.messages); i++) {
			struct capy_tval *m = capy_tval_at(req.messages, i);

			check(capy_tval_kind(capy_tval_get(m, "role")) == CAPY_TVAL_STR);
			check(capy_tval_kind(capy_tval_get(m, "content")) == CAPY_TVAL_STR);
		}
		check((req.tools != NULL) == (req.tools_json != NULL));
		check(capy_tval_len(req.tools) == req.n_tools);
		if (req.tools_json)
			check_json(req.tools_json, strlen(req.tools_json));
		if (capy_chat_render_values(tmpl, req.doc, req.messages, req.tools, req.kwargs, NULL,
					    req.add_generation_prompt, &copts, &out, &len, &err) == 0) {
			const size_t full = len;
			/* the cut ends the prompt (which may hold NUL bytes: a message's \u0000) */
			if (req.continue_final_message &&
			    capy_api_continue_final(&req, out, &len, &aerr) == 0)
				check(len <= full && out[len] == '\0');
			free(out);
		}
	}
	if (api != CAPY_API_COUNT_TOKENS) {
		bool stream = req.stream;

		req.stream = false;
		write_out(&req, &all);
		req.stream = true;
		write_out(&req, &all);
		req.stream = stream;
	}
	capy_buf_release(&all);
	capy_api_request_release(&req);
	return 0;
}
