/* api-impl.h - internals shared by the API adapter files (libcore/serve/api-*.c); not a
 * public header.
 *
 * DESIGN. Parsing walks the body as template values (capy_tdoc_parse_json keeps number kinds,
 * big integers and key order, which the rendered tools must reproduce) and builds the
 * normalized request in the same document. Every value lives in the document's arena and the
 * few heap blocks hang off the request, so a refusal or an allocation failure can leave from
 * any depth with longjmp (pfail, poom) and capy_api_request_release cleans up.
 *
 * Writing keeps the output as a list of parts (a reasoning run, a text run, a tool call) in
 * output order, each with its text; streams emit SSE events as parts open, grow and close,
 * non-streamed bodies are written from the parts at the end.
 */
#ifndef CAPY_SERVE_API_IMPL_H
#define CAPY_SERVE_API_IMPL_H

#include "core.h"
#include "serve/api.h"

#include <setjmp.h>

/* --- parsing ------------------------------------------------------------------------------ */

#define API_PATH_MAX 160

struct api_parse {
	struct capy_api_request *req;
	struct capy_tdoc *doc;
	struct capy_api_error *err;
	struct capy_api_limits lim; /* defaults filled in */
	struct capy_buf scratch;    /* joining text */
	struct capy_buf msgbuf;     /* a message's text while its blocks are walked */
	jmp_buf fail;
	int code;                   /* why fail was taken: CAPY_EINVAL or CAPY_ENOMEM */
};

/* Refuse the request: status 400, the OpenAI error code (may be NULL), the field path in
 * param / fail for lack of memory (status 500). */
CAPY_NORETURN CAPY_PRINTF(4, 5) void pfail(struct api_parse *p, const char *code,
					   const char *param, const char *fmt, ...);
CAPY_NORETURN void poom(struct api_parse *p);
/* v, or poom when it is NULL (a failed constructor). */
struct capy_tval *pv(struct api_parse *p, struct capy_tval *v);
void pset(struct api_parse *p, struct capy_tval *dict, const char *key, struct capy_tval *v);
void ppush(struct api_parse *p, struct capy_tval *list, struct capy_tval *v);
struct capy_tval *pstr(struct api_parse *p, const char *s, size_t len);
struct capy_tval *pstrz(struct api_parse *p, const char *s);
struct capy_tval *pdict(struct api_parse *p);
struct capy_tval *plist(struct api_parse *p);

/* A path below parent: "parent.key" / "parent[i]" (parent "" gives "key"). */
void ppath(char out[API_PATH_MAX], const char *parent, const char *key);
void ppath_i(char out[API_PATH_MAX], const char *parent, size_t i);

/* A field of obj; JSON null counts as absent (NULL). */
struct capy_tval *pget(const struct capy_tval *obj, const char *key);
const char *kind_name(const struct capy_tval *v);
/* Typed optional fields (absent or null: the default / false returned). `path` is the
 * object's path. The message names the field and the type it must have. */
const char *popt_str(struct api_parse *p, const struct capy_tval *obj, const char *key,
		     const char *path);
bool popt_bool(struct api_parse *p, const struct capy_tval *obj, const char *key,
	       const char *path, bool dflt);
bool popt_int(struct api_parse *p, const struct capy_tval *obj, const char *key,
	      const char *path, int64_t min, int64_t max, int64_t *out);
bool popt_num(struct api_parse *p, const struct capy_tval *obj, const char *key,
	      const char *path, double min, double max, bool min_open, double *out);
struct capy_tval *popt_list(struct api_parse *p, const struct capy_tval *obj, const char *key,
			    const char *path);
struct capy_tval *popt_dict(struct api_parse *p, const struct capy_tval *obj, const char *key,
			    const char *path);
bool str_eq(const struct capy_tval *v, const char *s);

/* A message {role, content} (content a string). */
struct capy_tval *pmsg(struct api_parse *p, const char *role, const char *content, size_t len);
/* An assistant tool call {id, type:"function", function:{name, arguments}}. */
struct capy_tval *pcall(struct api_parse *p, const char *id, const char *name,
			struct capy_tval *arguments);

/* Text of OpenAI content (a string, null or a list of parts: text/input_text/output_text/
 * refusal, strings), parts joined with "\n" as vLLM does for string templates; images, audio,
 * files and video are refused. The text is in p->scratch (NUL-terminated). */
void pcontent_openai(struct api_parse *p, const struct capy_tval *content, const char *path,
		     bool allow_null);
/* Append a text part to p->scratch, "\n" between parts (first: scratch was empty). */
void pjoin(struct api_parse *p, bool *first, const char *s, size_t len);

/* The per-API parsers (api-chat.c, api-responses.c, api-messages.c). */
void parse_chat(struct api_parse *p, const struct capy_tval *body);
void parse_completions(struct api_parse *p, const struct capy_tval *body);
void parse_responses(struct api_parse *p, const struct capy_tval *body);
void parse_messages(struct api_parse *p, const struct capy_tval *body, bool count_tokens);

/* Shared fields (api-parse.c): sampling, stop strings, stream options, kwargs, logprobs. */
void parse_sampling(struct api_parse *p, const struct capy_tval *body);
void parse_stop(struct api_parse *p, const struct capy_tval *body, const char *key);
void parse_max_tokens(struct api_parse *p, const struct capy_tval *body, const char *key);
void parse_kwargs(struct api_parse *p, const struct capy_tval *body);
void set_thinking(struct api_parse *p, int on);
/* Reasoning effort as enable_thinking: 0 for none/minimal, 1 for low..max, -1 when NULL. */
int effort_thinking(struct api_parse *p, const char *effort, const char *at);
/* A JSON text that must parse (tool-call arguments); refused with the path otherwise. */
void check_json_text(struct api_parse *p, const char *s, size_t len, const char *at);
void check_messages_limit(struct api_parse *p, const struct capy_tval *list, const char *key);
/* The body's "messages" (msgs, NULL when absent): present, a non-empty list within the limit;
 * returns its length. */
size_t require_messages(struct api_parse *p, const struct capy_tval *msgs);

/* Tools (api-tools.c): the normalized list from each API's shape, and tool_choice. */
void parse_tools_chat(struct api_parse *p, const struct capy_tval *body);
void parse_tools_responses(struct api_parse *p, const struct capy_tval *body);
void parse_tools_messages(struct api_parse *p, const struct capy_tval *body);
void parse_tool_choice_openai(struct api_parse *p, const struct capy_tval *body, bool responses);
void parse_tool_choice_messages(struct api_parse *p, const struct capy_tval *body);
/* After tools and tool_choice: check the choice names a tool, serialize tools_json. */
void finish_tools(struct api_parse *p);
/* The tool_map entry of a function name (NULL: a plain function). */
const struct capy_tval *tool_mapped(const struct capy_api_request *req, const char *name);

/* --- writing ------------------------------------------------------------------------------ */

enum wpart_kind { WP_REASONING, WP_TEXT, WP_CALL };

/* A part's text as a JSON string: the whole of it when full, else "" (the opening of a
 * streamed part, whose text follows in deltas). */
struct wpart;
void wpart_text(const struct wpart *pt, bool full, struct capy_buf *d);

struct wpart {
	enum wpart_kind kind;
	struct capy_buf text; /* reasoning or text, or the call's arguments */
	int call;             /* WP_CALL: the call's number, from 0 */
	char *name;           /* WP_CALL */
	bool custom;          /* WP_CALL: a Responses custom tool */
	const char *ns, *ns_name; /* WP_CALL: a Responses namespace tool's parts (in req) */
	int out;              /* Anthropic block index / Responses output_index */
	int nth;              /* Responses: nth reasoning or message item (ids) */
	size_t lp_from, lp_to; /* logprob records attached to this part */
	bool closed;
	bool incomplete;      /* max_tokens cut it */
};

struct wtop {
	char *tok;
	size_t len;
	double lp;
};

struct wlogprob {
	char *tok;
	size_t len;
	double lp;
	struct wtop *top;
	size_t n_top;
};

struct capy_api_writer {
	const struct capy_api_request *req;
	enum capy_api api;
	bool stream;
	char *id, *model, *echo;
	size_t echo_len;
	int64_t created, prompt_tokens, cached_tokens;

	struct wpart *parts;
	size_t n_parts, cap_parts;
	int open;     /* index of the open part, -1: none */
	int n_calls;
	int n_reasoning_items, n_message_items;
	int64_t seq;  /* Responses sequence_number */
	bool begun, ended;

	struct wlogprob *lp;
	size_t n_lp, cap_lp;
	size_t lp_sent;       /* records attached to a part or sent in a chunk */
	int64_t text_offset;  /* completions: code points written so far (echo included) */
	struct capy_buf tmp;
};

/* Compact JSON of a value (no spaces; floats as Python's repr). */
void wjson_tval(struct capy_buf *b, const struct capy_tval *v);
/* A JSON string of bytes that may not be valid UTF-8 (invalid sequences become U+FFFD). */
void wjson_lossy(struct capy_buf *b, const char *s, size_t n);
/* Code points of bytes as a client decodes them (U+FFFD for each broken byte). */
int64_t wlossy_length(const char *s, size_t n);
/* A logprob as a JSON number (non-finite values: -9999.0, as vLLM does). */
void wjson_logprob(struct capy_buf *b, double lp);
/* One record in the chat / Responses shape {token, logprob, bytes, top_logprobs}. */
void wjson_logprob_rec(struct capy_buf *b, const struct wlogprob *r, bool with_top);
/* Records [from, to) as a JSON array in the chat / Responses shape. */
void wjson_logprob_list(const struct capy_api_writer *w, struct capy_buf *b, size_t from,
			size_t to);
void wsse(struct capy_buf *b, const char *event, const struct capy_buf *data);

/* The current part, opened if needed for kind (closing another kind first). */
struct wpart *wpart_open(struct capy_api_writer *w, enum wpart_kind kind, struct capy_buf *buf);
void wpart_close(struct capy_api_writer *w, struct capy_buf *buf);

/* Per-API hooks (api-write-*.c). */
struct wapi {
	void (*begin)(struct capy_api_writer *w, struct capy_buf *buf);
	void (*open)(struct capy_api_writer *w, struct wpart *pt, struct capy_buf *buf);
	void (*delta)(struct capy_api_writer *w, struct wpart *pt, const char *s, size_t n,
		      struct capy_buf *buf);
	void (*close)(struct capy_api_writer *w, struct wpart *pt, struct capy_buf *buf);
	void (*end)(struct capy_api_writer *w, enum capy_api_finish finish, const char *stop,
		    const struct capy_api_usage *u, struct capy_buf *buf);
	void (*error)(struct capy_api_writer *w, const struct capy_api_error *e,
		      struct capy_buf *buf);
};

extern const struct wapi wapi_chat, wapi_completions, wapi_responses, wapi_messages;

/* Error type names for an API (api-error.c). */
const char *api_error_type(enum capy_api api, const struct capy_api_error *e);
void api_error_object_openai(const struct capy_api_error *e, struct capy_buf *b);
void api_error_object_anthropic(const struct capy_api_error *e, struct capy_buf *b);

#endif
