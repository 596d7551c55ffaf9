/* serve.h - capy-serve's server: the API endpoints on the HTTP layer, requests rendered
 * and tokenized, run by the scheduler, their tokens turned back into each API's response.
 *
 *	struct capy_server *srv;
 *	capy_server_start(&srv, &(struct capy_server_opts){ .model_id = "qwen", .port = 8080 },
 *			  engine, sched, &assets, &err);
 *	...				(until SIGTERM, or capy_server_failed(srv))
 *	capy_server_stop(srv, 10);	(stop accepting, let answers finish for up to 10 s)
 *
 * Endpoints: POST /v1/chat/completions, /v1/completions, /v1/responses, /v1/messages (also
 * with ?beta=true), /v1/messages/count_tokens; GET /v1/models, /v1/models/{id}, /health
 * (200 while the engine works, 503 after an engine-wide failure), /metrics (Prometheus
 * text). docs/serving.md has the behaviour in full.
 *
 * Text output (struct capy_textout): what a response's tokens become, in order —
 * streaming detokenization (whole UTF-8 characters, special tokens dropped), stop strings
 * (text that could still become one is held back; the first match ends the answer and is
 * cut with what follows), then the output parser of text/outparse.h (reasoning, content,
 * tool calls), or for raw completions the text itself as CONTENT events.
 *
 * Thread-safety: a textout belongs to one thread at a time.
 */
#ifndef CAPY_SERVE_H
#define CAPY_SERVE_H

#include "../engine/engine.h"
#include "../model/assets.h"
#include "../sched/sched.h"
#include "../text/outparse.h"
#include "../text/tokenizer.h"

struct capy_server;

/* Zero fields take the defaults shown (the HTTP layer's, for its limits). */
struct capy_server_opts {
	const char *model_id;          /* the id /v1/models lists and OpenAI requests must name */
	const char *host;              /* 127.0.0.1 */
	int port;                      /* 8080 ... 0 picks a free one (capy_server_port) */
	const char *const *api_keys;   /* none: no authentication */
	size_t n_api_keys;
	uint64_t max_body;             /* bytes of a request body: 32 MiB */
	unsigned max_connections;      /* 64 */
	unsigned request_timeout_ms;   /* a request must arrive within: 30 s */
	unsigned idle_timeout_ms;      /* keep-alive connections: 75 s */
	size_t max_messages, max_tools; /* per request: 100,000 and 4,096 */
	uint64_t max_tokens;           /* a request's max_tokens is clamped to this (0: the context) */
	bool log_prompts;              /* put the rendered prompt into the request log */
	void (*log)(void *arg, const char *line, size_t len); /* a JSON line per request */
	void *log_arg;
};

int capy_server_start(struct capy_server **out, const struct capy_server_opts *o, struct capy_engine *e,
		      struct capy_sched *sched, const struct capy_assets *as, struct capy_err *err);
int capy_server_port(const struct capy_server *srv);
/* The scheduler hit an engine-wide failure: /health answers 503; the tool should exit 2. */
bool capy_server_failed(const struct capy_server *srv);
/* Stop accepting connections (requests on open ones are still answered). Shut down with
 *	capy_server_quiesce(srv);
 *	capy_sched_stop(sched, drain_s);	(answers finish, or end with the API's error event)
 *	capy_server_stop(srv, 2);
 * so that answers still running at the deadline get a final event rather than a cut. */
void capy_server_quiesce(struct capy_server *srv);
/* Stop accepting, wait up to timeout_s for answers in flight, cancel the rest, free. The
 * scheduler and engine stay the caller's. */
void capy_server_stop(struct capy_server *srv, double timeout_s);

struct capy_textout;

struct capy_textout_opts {
	const struct capy_tokenizer *tok;
	const char *const *stop;       /* stop strings (copied; empty ones ignored) */
	size_t n_stop;
	bool parse;                    /* false: raw text (completions) */
	struct capy_outparse_opts parse_opts;
};

int capy_textout_new(struct capy_textout **out, const struct capy_textout_opts *o, struct capy_err *err);
void capy_textout_free(struct capy_textout *t);
/* The next generated token; events go to cb. *stopped tells that a stop string matched (the
 * answer is over: later tokens are ignored). Returns 0 or the callback's / an error code. */
int capy_textout_token(struct capy_textout *t, int32_t id, capy_outparse_cb cb, void *ud, bool *stopped,
		       struct capy_err *err);
/* Text that is part of the answer without being generated (a forced start, such as an
 * opened tool call): parsed like output, not checked against stop strings. */
int capy_textout_feed_text(struct capy_textout *t, const char *s, size_t n, capy_outparse_cb cb, void *ud,
			   struct capy_err *err);
/* The answer is over: held text goes out (unless a stop string ended it), the parser
 * closes what is open. Once. */
int capy_textout_finish(struct capy_textout *t, capy_outparse_cb cb, void *ud, struct capy_err *err);
/* The stop string that matched, or NULL. */
const char *capy_textout_stop_string(const struct capy_textout *t);
/* The output parser's counts (NULL for raw text). */
const struct capy_outparse_stats *capy_textout_parse_stats(const struct capy_textout *t);

#endif
