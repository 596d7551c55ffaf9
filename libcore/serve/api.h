/* api.h - the API adapters of capy-serve: request bodies in, prompt values out; model output
 * events in, response bytes (JSON bodies and SSE streams) out.
 *
 * Pure functions: no HTTP, no threads, no engine. Five endpoints:
 *
 *	CAPY_API_CHAT          POST /v1/chat/completions        (OpenAI)
 *	CAPY_API_COMPLETIONS   POST /v1/completions             (OpenAI, legacy text completions)
 *	CAPY_API_RESPONSES     POST /v1/responses               (OpenAI Responses)
 *	CAPY_API_MESSAGES      POST /v1/messages                (Anthropic)
 *	CAPY_API_COUNT_TOKENS  POST /v1/messages/count_tokens   (Anthropic)
 *
 * Parsing normalizes every chat API into what the chat template renders (messages in the
 * OpenAI-chat shape of the Qwen templates, tools in the OpenAI function shape, template kwargs)
 * plus the generation settings; docs/serving.md ("Requests in detail") has the field-by-field mapping, what is
 * ignored and what is refused. A request the server cannot serve fails with a struct
 * capy_api_error carrying the HTTP status and the message, rendered in the API's own error
 * shape by capy_api_error_body:
 *
 *	struct capy_api_request req;
 *	struct capy_api_error aerr;
 *	if (capy_api_parse(CAPY_API_CHAT, body, len, &limits, &req, &aerr) < 0) {
 *		capy_api_error_body(CAPY_API_CHAT, &aerr, &out);	(reply aerr.status)
 *		return;
 *	}
 *	capy_chat_render_values(tmpl, req.doc, req.messages, req.tools, req.kwargs, special,
 *				req.add_generation_prompt, &copts, &prompt, &plen, &err);
 *	if (req.continue_final_message)
 *		capy_api_continue_final(&req, prompt, &plen, &aerr);
 *
 * Writing turns the output parser's events (text/outparse.h) into the response:
 *
 *	struct capy_api_meta meta = { .id = "3f2a", .model = "qwen", .created = now,
 *				      .prompt_tokens = n, .cached_tokens = c };
 *	capy_api_writer_new(&w, &req, &meta, &err);
 *	capy_api_write_begin(w, &buf);				(stream: send buf)
 *	for each generated token:
 *		capy_api_write_logprobs(w, &rec, 1);		(only when req.logprobs >= 0)
 *		for each outparse event ev:
 *			capy_api_write_event(w, &ev, &buf);	(stream: send buf)
 *	capy_api_write_end(w, CAPY_API_FINISH_EOS, NULL, &usage, &buf);	(send buf: the last
 *								 SSE events, or the body)
 *	capy_api_writer_free(w);
 *
 * Each write appends to buf (reset it after sending); streams get whole SSE events, a
 * non-streamed request gets nothing until capy_api_write_end appends the whole JSON body. For
 * CAPY_API_COMPLETIONS the raw generated text comes as CAPY_OUTPARSE_CONTENT events. Text in
 * events must be whole UTF-8 (outparse guarantees it); it is passed through unsplit.
 * Ids are derived from meta.id: "chatcmpl-ID", "cmpl-ID", "resp_ID", "msg_ID", "rs_ID" (later
 * Responses message/reasoning items "msg_ID_1", ...), and for the n-th tool call (from 0)
 * "call_ID_n" (chat and Responses call_id), "fc_ID_n" / "ctc_ID_n" (Responses function /
 * custom call item), "toolu_ID_n" (Anthropic); the event's own id is not used.
 *
 * Errors: functions return 0 or a negative CAPY_E* code. capy_api_parse fails with
 * CAPY_EINVAL (the client's mistake: status 400) or CAPY_ENOMEM (status 500), both with err
 * filled; its messages follow git's style and name the field ("messages[2].content must be a
 * string or a list of content parts"). The write calls return CAPY_ENOMEM (what buf holds is
 * then incomplete) or CAPY_EINVAL (calls out of order); capy_api_writer_new fills a struct
 * capy_err.
 * Thread-safety: a request and a writer belong to one thread at a time; independent requests
 * and writers may be used from different threads.
 */
#ifndef CAPY_SERVE_API_H
#define CAPY_SERVE_API_H

#include "../text/outparse.h"
#include "../text/template.h"
#include "../util/buf.h"

enum capy_api {
	CAPY_API_CHAT,
	CAPY_API_COMPLETIONS,
	CAPY_API_RESPONSES,
	CAPY_API_MESSAGES,
	CAPY_API_COUNT_TOKENS,
};

/* --- errors ------------------------------------------------------------------------------ */

struct capy_api_error {
	int status;       /* HTTP status: 400, 401, 404, 413, 500, 503, ... */
	const char *type; /* a static string, or NULL: derived from status for the API (OpenAI
			   * invalid_request_error/authentication_error/permission_error/
			   * not_found_error/rate_limit_error/server_error; Anthropic
			   * invalid_request_error/.../request_too_large/api_error/overloaded_error) */
	const char *code; /* OpenAI "code" (a static string), or NULL */
	char param[160];  /* the field path ("messages[2].content"), "" when none */
	char msg[768];
};

/* Fill err (status, param may be NULL; type and code NULL); returns CAPY_EINVAL for statuses
 * below 500 and CAPY_EIO otherwise, so `return capy_api_error_set(...)` works. */
CAPY_PRINTF(4, 5) int capy_api_error_set(struct capy_api_error *err, int status,
					 const char *param, const char *fmt, ...);

/* The error response body in the API's shape:
 *	OpenAI:    {"error":{"message":"...","type":"...","param":"..."|null,"code":"..."|null}}
 *	Anthropic: {"type":"error","error":{"type":"...","message":"..."}}  */
void capy_api_error_body(enum capy_api api, const struct capy_api_error *err, struct capy_buf *b);

/* --- requests ---------------------------------------------------------------------------- */

/* Limits a request must keep; a zero field takes the default shown. */
struct capy_api_limits {
	size_t max_messages; /* entries of messages / input (before normalization): 100,000 */
	size_t max_tools;    /* tools: 4,096 */
	size_t max_stop;     /* stop strings / stop_sequences: 64 */
	int64_t max_tokens;  /* ceiling for max_tokens & co. (the context size, say): none */
};

enum capy_api_tool_choice {
	CAPY_API_TOOLS_AUTO,     /* also when there are no tools */
	CAPY_API_TOOLS_NONE,     /* tools are rendered, calls are not parsed (vLLM's default) */
	CAPY_API_TOOLS_REQUIRED, /* chat/Responses "required", Anthropic "any" */
	CAPY_API_TOOLS_NAMED,    /* one function, tool_choice_name (Anthropic "tool") */
};

enum capy_api_format {
	CAPY_API_FORMAT_TEXT,
	CAPY_API_FORMAT_JSON_OBJECT, /* response_format / text.format {"type":"json_object"} */
	CAPY_API_FORMAT_JSON_SCHEMA, /* ... "json_schema"; the schema in response_schema */
};

struct capy_api_param {
	double v;
	bool given;
};

struct capy_api_request {
	enum capy_api api;
	struct capy_tdoc *doc;   /* owns every value below and the parsed body */
	struct capy_tval *body;  /* the request body as parsed (numbers and key order kept) */
	const char *model;       /* "model", or NULL when absent (compared by the server) */

	/* What the chat template renders (chat APIs; NULL for completions). */
	struct capy_tval *messages; /* [{role, content (a string), reasoning_content?,
				     *   tool_calls?, tool_call_id?, name?}], roles system/user/
				     *   assistant/tool; never empty */
	struct capy_tval *tools;    /* [{type:"function", function:{name, description?,
				     *   parameters}}], or NULL when none */
	struct capy_tval *kwargs;   /* template kwargs: chat_template_kwargs, enable_thinking;
				     * a dict, never NULL */
	char *tools_json;           /* tools as JSON text (for capy_outparse_opts), or NULL */
	size_t n_tools;
	bool add_generation_prompt;
	bool continue_final_message; /* continue the last assistant message (prefill) */

	/* CAPY_API_COMPLETIONS: the prompt as text or as token ids (exactly one is set). */
	const char *prompt;
	size_t prompt_len;
	int32_t *prompt_ids;
	size_t n_prompt_ids;
	bool echo;

	/* Sampling; a param not given leaves the choice to the model's generation_config. */
	struct capy_api_param temperature, top_p, min_p;
	struct capy_api_param presence_penalty, frequency_penalty, repetition_penalty;
	int64_t top_k;          /* 0: not given; -1: given as disabled (-1 or 0 in the request) */
	int64_t seed;
	bool seed_given;
	int64_t max_tokens;     /* max_tokens / max_completion_tokens / max_output_tokens; 0: none */
	const char **stop;      /* stop strings (stop, stop_sequences), empty ones dropped */
	size_t n_stop;

	enum capy_api_tool_choice tool_choice;
	const char *tool_choice_name; /* CAPY_API_TOOLS_NAMED */
	/* tool_choice allowed_tools (chat and Responses): the names of the tools that may be
	 * called, a list of strings (every one among tools), with tool_choice REQUIRED or AUTO
	 * for its mode; NULL: any tool. */
	struct capy_tval *allowed_tools;
	bool parallel_tool_calls;     /* default true; false: a forced call is one call */

	int logprobs;           /* -1: none; else logprobs wanted with this many alternatives
				 * (chat top_logprobs, completions logprobs, Responses
				 * top_logprobs with include message.output_text.logprobs) */
	bool stream;
	bool include_usage;     /* chat/completions stream_options.include_usage */

	/* Reasoning, as the template kwargs have it (kwargs.enable_thinking): -1 not set (the
	 * template's default: on), 0 off, 1 on. thinking_budget: Anthropic budget_tokens or
	 * thinking_budget, 0: none (not enforced here; budgets >= max_tokens are accepted). */
	int thinking;
	int64_t thinking_budget;
	bool encrypted_reasoning; /* Responses include has "reasoning.encrypted_content" */

	/* Structured output, enforced by a grammar (docs/structured-output.md): the format, its
	 * schema (JSON_SCHEMA; NULL: any JSON), strict (refuse keywords the grammar cannot hold;
	 * chat json_schema.strict, Responses text.format.strict, always for Anthropic) and where
	 * the schema is in the body (for errors). */
	enum capy_api_format response_format;
	struct capy_tval *response_schema;
	bool response_strict;
	const char *response_schema_at;
	/* Names of the tools marked strict: true (a list of strings, NULL: none): a forced call
	 * of one has its arguments held to the schema in strict mode, others in relaxed mode. */
	struct capy_tval *strict_tools;

	/* Responses: the functions the model sees that are not plain function tools, by name:
	 * {"type":"custom"} for a custom (freeform) tool, rendered as a function of one string
	 * "input" and answered as a custom_tool_call; {"type":"namespace","namespace":NS,
	 * "name":N} for function N of namespace tool NS, rendered as "NS__N" (vLLM's name)
	 * and answered as a function_call with namespace NS. A dict, or NULL. */
	struct capy_tval *tool_map;
};

/* Parse the body of one endpoint. lim may be NULL (defaults). On success the caller owns req
 * and releases it with capy_api_request_release; on failure req is released already and err
 * says why (status 400 for bad requests, 500 for CAPY_ENOMEM). */
int capy_api_parse(enum capy_api api, const char *body, size_t len,
		   const struct capy_api_limits *lim, struct capy_api_request *req,
		   struct capy_api_error *err);

void capy_api_request_release(struct capy_api_request *req);

/* Options for the output parser that fit the request: the tools (none when tool_choice is
 * none), CAPY_OUTPARSE_NO_TOOL_CALLS when there are none, CAPY_OUTPARSE_HOLD_CALLS when not
 * streaming, CAPY_OUTPARSE_CONTINUE when the answer continues the final message (prefill). flags_extra (CAPY_OUTPARSE_THINK_OPEN when the prompt ends inside <think>) is
 * or-ed in. opts points into req. */
void capy_api_outparse_opts(const struct capy_api_request *req, unsigned flags_extra,
			    struct capy_outparse_opts *opts);

/* continue_final_message, as transformers does it: cut the rendered prompt right after the
 * text of the last (assistant) message, so generation continues it. Fails (status 400) when
 * the text does not appear in the prompt. */
int capy_api_continue_final(const struct capy_api_request *req, char *prompt, size_t *len,
			    struct capy_api_error *err);

/* --- responses --------------------------------------------------------------------------- */

struct capy_api_writer;

struct capy_api_meta {
	const char *id;        /* [A-Za-z0-9_-], at most 64 bytes: the response's id */
	const char *model;     /* the model id the response names */
	int64_t created;       /* unix seconds */
	int64_t prompt_tokens; /* for the events sent before generation (Anthropic
				* message_start); the final usage comes with capy_api_write_end */
	int64_t cached_tokens; /* prompt tokens served from the prefix cache */
	const char *echo;      /* completions with echo: the prompt text (NULL: none) */
	size_t echo_len;
};

enum capy_api_finish {
	CAPY_API_FINISH_EOS,    /* the model ended its turn */
	CAPY_API_FINISH_STOP,   /* a stop string matched (stop_string says which) */
	CAPY_API_FINISH_LENGTH, /* max_tokens (or the context) cut the output */
};

struct capy_api_usage {
	int64_t prompt_tokens;
	int64_t cached_tokens;     /* of prompt_tokens */
	int64_t completion_tokens;
	int64_t reasoning_tokens;  /* of completion_tokens; 0 when unknown */
	/* where the cached tokens came from ("device", "host", "disk": the context cache's
	 * tiers), written as "cache_tier" beside cached_tokens when there are some; NULL: not */
	const char *cache_tier;
};

/* One generated token's log-probability and, best first, its top alternatives. token is the
 * token's bytes (a partial UTF-8 sequence becomes U+FFFD in "token"; "bytes" keeps them). */
struct capy_api_top_logprob {
	const char *token;
	size_t len;
	double logprob;
};

struct capy_api_logprob {
	const char *token;
	size_t len;
	double logprob;
	const struct capy_api_top_logprob *top;
	size_t n_top;
};

/* A writer for one response to req (which must outlive it); the strings of meta are copied. */
int capy_api_writer_new(struct capy_api_writer **out, const struct capy_api_request *req,
			const struct capy_api_meta *meta, struct capy_err *err);

/* The events that open a stream (chat: the role chunk; Responses: response.created and
 * response.in_progress; Anthropic: message_start and ping; completions: the echo). Nothing
 * for a non-streamed request. Once, before anything else. */
int capy_api_write_begin(struct capy_api_writer *w, struct capy_buf *buf);

/* One output parser event. Streams: the SSE events it makes. */
int capy_api_write_event(struct capy_api_writer *w, const struct capy_outparse_event *ev,
			 struct capy_buf *buf);

/* Queue n token records; a stream sends them with the next delta (or the final chunk), a
 * non-streamed body lists them all. Ignored unless req->logprobs >= 0 (and always for
 * Anthropic, which has none). */
int capy_api_write_logprobs(struct capy_api_writer *w, const struct capy_api_logprob *rec,
			    size_t n);

/* The end: closes open blocks and items, the finish reason (tool calls made and no cut by
 * length: tool_calls / tool_use), usage, and the end of the stream ([DONE], message_stop,
 * response.completed or response.incomplete) or the whole non-streamed body. stop_string is
 * the matched stop string for CAPY_API_FINISH_STOP (NULL otherwise). */
int capy_api_write_end(struct capy_api_writer *w, enum capy_api_finish finish,
		       const char *stop_string, const struct capy_api_usage *usage,
		       struct capy_buf *buf);

/* A failure after the stream began, in the stream's own form: chat/completions a
 * `data: {"error":...}` chunk and `data: [DONE]`; Anthropic `event: error`; Responses
 * `response.failed`. For a non-streamed request, the error body. Ends the writer. */
int capy_api_write_error(struct capy_api_writer *w, const struct capy_api_error *aerr,
			 struct capy_buf *buf);

void capy_api_writer_free(struct capy_api_writer *w);

/* --- small bodies ------------------------------------------------------------------------ */

/* GET /v1/models: the OpenAI list (id, object, created, owned_by "capy", max_model_len) whose
 * entries also carry Anthropic's fields (type, display_name, created_at) and has_more,
 * first_id, last_id, so both SDKs' models.list() read it. */
void capy_api_models_body(const char *model_id, int64_t created, int64_t max_context,
			  struct capy_buf *b);

/* POST /v1/messages/count_tokens: {"input_tokens":N}. */
void capy_api_count_tokens_body(int64_t input_tokens, struct capy_buf *b);

#endif
