/* outparse.h - incremental parser of model output: reasoning, content and tool calls.
 *
 * Qwen chat models write `{reasoning}</think>\n\n{answer}` (the prompt opened `<think>`), or
 * `<think>{reasoning}</think>{answer}`, then optional tool calls, either XML
 *
 *	<tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n...</function>\n</tool_call>
 *
 * or JSON ("hermes"): `<tool_call>\n{"name": NAME, "arguments": {...}}\n</tool_call>`. The
 * parser takes the generated text in chunks split anywhere (inside a UTF-8 sequence or a tag)
 * and reports events as soon as they are certain:
 *
 *	struct capy_outparse_opts o = { .flags = CAPY_OUTPARSE_THINK_OPEN, .tools_json = tools };
 *	struct capy_outparse *p;
 *	if (capy_outparse_new(&p, &o, err) < 0)
 *		return err->code;
 *	while (next_piece(&s, &n))                        // detokenized text, any split
 *		if (capy_outparse_feed(p, s, n, on_event, ud, err) < 0)
 *			goto fail;
 *	if (capy_outparse_finish(p, on_event, ud, err) < 0) // flushes held-back text
 *		goto fail;
 *	n_bad = capy_outparse_stats(p)->n_malformed_tool_calls;
 *	capy_outparse_free(p);
 *
 * Events, in output order (see struct capy_outparse_event):
 *	REASONING, CONTENT    text deltas; valid UTF-8 (invalid bytes become U+FFFD), never empty
 *	CALL_START            a tool call: index (0, 1, ...), id "<id_prefix><id_base+index>", name
 *	CALL_ARGS             a delta of the call's arguments: the concatenation of a call's deltas
 *	                      is one JSON object, and every prefix is a prefix of it
 *	CALL_END              the call is over; status says whether it was well formed
 * Text that might still be the start of a tag is held back; how the stream was chunked never
 * changes the concatenated deltas, the calls, their arguments or the stats.
 *
 * Rules (docs in outparse.c have the why):
 * - Reasoning: open from the start when CAPY_OUTPARSE_THINK_OPEN (the prompt ended in
 *   `<think>`), or when the output begins with `<think>` (leading whitespace allowed). It ends
 *   at `</think>`, or implicitly at a tool call; otherwise it lasts to the end (truncated
 *   output stays reasoning). `</think>` elsewhere and `<think>` after the start are text.
 * - Reasoning and each run of content are trimmed of ASCII whitespace where they touch the
 *   start, the end or a tag (the template puts newlines there); inner whitespace is kept.
 *   With CAPY_OUTPARSE_CONTINUE the output continues text of the prompt (a prefill), so
 *   whitespace at its very start is text too (" jumps" after "The quick brown fox").
 * - XML argument values lose exactly one leading and one trailing newline. A parameter whose
 *   schema type is only "string" stays a string ("007", "1e3", "true" included); other typed
 *   parameters are JSON-decoded when the value is exactly one valid JSON value (a union with
 *   "string" only when the decoded type is allowed), else kept as a string; parameters with no
 *   schema, or of a function not in tools: JSON-decoded if valid, else a string. Decoded
 *   values are copied verbatim (number spelling and key order kept). The arguments object is
 *   written as `{"k": v, "k2": v2}` in generation order. `</parameter>` ends a value only when
 *   whitespace and then `<parameter=`, `</function>` or `</tool_call>` follow it.
 * - A call whose name is not in tools is still reported, with `unknown` set and counted.
 * - A `<tool_call>` that never becomes a call (no `<function=NAME>` or JSON object after
 *   it, bad JSON, output ends first) is text of the mode it appeared in, and is counted.
 *   Streaming (the default) commits to an XML call at `<function=NAME>`: CALL_START is sent
 *   then, string arguments stream as they arrive (other values when their `</parameter>`
 *   comes). If the call breaks after that, it is closed with valid arguments and CALL_END
 *   status MALFORMED or TRUNCATED, and what broke it is parsed again as content. With
 *   CAPY_OUTPARSE_HOLD_CALLS a call's events are held until `</tool_call>`, and any call that
 *   is not well formed comes back whole as text; use it for non-streamed responses.
 * - Hermes calls commit when their first "name" member is complete and a valid name; the
 *   arguments object then streams verbatim, sent only up to places where closing quotes and
 *   brackets make it whole (inside string values, after complete values), which is how a
 *   call cut short is closed. Arguments given as a JSON string (holding the object) or null
 *   go out when complete; the first of "arguments" and "parameters" counts. Arguments that
 *   are not an object, a string holding one, or null make the call MALFORMED at its end.
 *
 * Thread-safety: a parser belongs to one thread at a time; parsers are independent.
 */
#ifndef CAPY_TEXT_OUTPARSE_H
#define CAPY_TEXT_OUTPARSE_H

#include "../util/err.h"

struct capy_outparse;

enum capy_outparse_flags {
	CAPY_OUTPARSE_THINK_OPEN = 1 << 0,    /* the prompt ended with `<think>`: start in reasoning */
	CAPY_OUTPARSE_HOLD_CALLS = 1 << 1,    /* hold each call's events until it is well formed */
	CAPY_OUTPARSE_NO_TOOL_CALLS = 1 << 2, /* `<tool_call>` is plain text (request has no tools) */
	CAPY_OUTPARSE_CONTINUE = 1 << 3,      /* the output continues the prompt's last text: keep
					       * whitespace at its start */
};

struct capy_outparse_opts {
	unsigned flags;         /* enum capy_outparse_flags */
	const char *tools_json; /* the request's tools array (OpenAI chat, Responses or Anthropic
				 * shape), or NULL; used for parameter types and `unknown` */
	size_t tools_len;       /* bytes of tools_json; 0: it is NUL-terminated */
	const char *id_prefix;  /* tool call ids are id_prefix + decimal number; NULL: "call_" */
	unsigned id_base;       /* number of the first call's id */
};

enum capy_outparse_event_type {
	CAPY_OUTPARSE_REASONING,
	CAPY_OUTPARSE_CONTENT,
	CAPY_OUTPARSE_CALL_START,
	CAPY_OUTPARSE_CALL_ARGS,
	CAPY_OUTPARSE_CALL_END,
};

enum capy_outparse_call_status {
	CAPY_OUTPARSE_CALL_OK,        /* well formed, closed by </tool_call> */
	CAPY_OUTPARSE_CALL_MALFORMED, /* broke after it was committed (streaming only) */
	CAPY_OUTPARSE_CALL_TRUNCATED, /* the output ended inside it (streaming only) */
};

enum capy_outparse_reasoning {
	CAPY_OUTPARSE_REASONING_NONE,         /* no reasoning at all */
	CAPY_OUTPARSE_REASONING_CLOSED,       /* ended by </think> */
	CAPY_OUTPARSE_REASONING_BY_TOOL_CALL, /* ended by a tool call */
	CAPY_OUTPARSE_REASONING_UNTERMINATED, /* the output ended inside it */
};

struct capy_outparse_event {
	enum capy_outparse_event_type type;
	const char *text;  /* REASONING, CONTENT, CALL_ARGS: the delta, NUL-terminated */
	size_t len;
	int index;         /* CALL_*: the call's position in this output, from 0 */
	const char *id;    /* CALL_*: NUL-terminated */
	const char *name;  /* CALL_*: the function name, valid UTF-8, NUL-terminated */
	bool unknown;      /* CALL_*: name is not among the tools */
	enum capy_outparse_call_status status; /* CALL_END */
};

/* Receives each event; the pointers live until it returns. Return 0 to go on, or a negative
 * CAPY_E* code to stop: feed/finish then return that code and the parser is done for. */
typedef int (*capy_outparse_cb)(void *ud, const struct capy_outparse_event *ev);

struct capy_outparse_stats {
	int n_tool_calls;           /* CALL_START events */
	int n_malformed_tool_calls; /* `<tool_call>`s given back as text or closed MALFORMED */
	int n_truncated_tool_calls; /* calls the end of output cut (as text or TRUNCATED) */
	int n_unknown_tool_calls;   /* reported calls whose name is not in tools */
	int n_invalid_utf8;         /* U+FFFD substitutions for invalid UTF-8 */
	enum capy_outparse_reasoning reasoning; /* final after capy_outparse_finish */
};

/* Make a parser; opts may be NULL (no flags, no tools). Fails with CAPY_EFORMAT when
 * tools_json is not a JSON array of tools (the message names the element), CAPY_EINVAL for
 * an id_prefix over 64 bytes, CAPY_ENOMEM. */
int capy_outparse_new(struct capy_outparse **out, const struct capy_outparse_opts *opts,
		      struct capy_err *err);

/* Parse the next len bytes of output; calls cb for each event that became certain. Returns
 * 0, the callback's negative code, or CAPY_ENOMEM; once failed, that code again; after
 * finish, CAPY_EINVAL. */
int capy_outparse_feed(struct capy_outparse *p, const char *chunk, size_t len,
		       capy_outparse_cb cb, void *ud, struct capy_err *err);

/* The output is over: flush held-back text and close open calls. Once per parser. */
int capy_outparse_finish(struct capy_outparse *p, capy_outparse_cb cb, void *ud,
			 struct capy_err *err);

const struct capy_outparse_stats *capy_outparse_stats(const struct capy_outparse *p);

void capy_outparse_free(struct capy_outparse *p);

/* A whole response, collected from the events. Strings are NUL-terminated and owned by the
 * result; reasoning/content are NULL when there was none. */
struct capy_outparse_call {
	char *id;
	char *name;
	char *arguments; /* JSON object text */
	size_t arguments_len;
	bool unknown;
	enum capy_outparse_call_status status;
};

struct capy_outparse_result {
	char *reasoning;
	size_t reasoning_len;
	char *content;
	size_t content_len;
	struct capy_outparse_call *calls;
	size_t n_calls;
	struct capy_outparse_stats stats; /* filled by capy_outparse_parse */
};

/* An event callback that appends to the struct capy_outparse_result *ud (start from a
 * zeroed one); returns CAPY_ENOMEM on allocation failure. */
int capy_outparse_collect(void *ud, const struct capy_outparse_event *ev);

/* Parse a whole output at once (a non-streamed response); pass CAPY_OUTPARSE_HOLD_CALLS in
 * opts to get broken calls back as text. On failure res is released. */
int capy_outparse_parse(const char *text, size_t len, const struct capy_outparse_opts *opts,
			struct capy_outparse_result *res, struct capy_err *err);

void capy_outparse_result_release(struct capy_outparse_result *res);

#endif
