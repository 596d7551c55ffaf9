/* serve-impl.h - what server.c (start, routes, health, models, metrics) and generate.c (the
 * generation endpoints) share. Include only inside libcore/serve/. */
#ifndef CAPY_SERVE_IMPL_H
#define CAPY_SERVE_IMPL_H

#include "serve.h"
#include "api.h"
#include "http.h"
#include "../model/assets.h"
#include "../sched/sched.h"

#include <pthread.h>

/* Requests finished, by endpoint and status (from the HTTP layer's log lines). */
struct req_count {
	char endpoint[48];
	int status;
	uint64_t n;
};

struct capy_server {
	struct capy_server_opts o;
	char *model_id;
	struct capy_engine *e;
	struct capy_sched *sched;
	const struct capy_assets *as;
	struct capy_tdoc *special_doc;   /* the special-tokens map, read-only once built */
	struct capy_tval *special;
	int32_t im_start;                /* id of <|im_start|>, or -1 */
	/* The vocabulary as a byte trie for structured output (constrain/mask.h), built once:
	 * read-only, shared by every constrained request; the stop tokens are the model's eos. */
	struct capy_token_trie *trie;
	struct capy_http *http;
	int64_t created;                 /* unix seconds at start */
	pthread_mutex_t mu;              /* the counters below */
	struct req_count counts[64];
	size_t n_counts;
	struct capy_api_limits limits;
};

/* generate.c: POST /v1/chat/completions, /v1/completions, /v1/responses, /v1/messages and
 * /v1/messages/count_tokens (arg: the struct capy_server). */
void serve_chat(struct capy_http_exchange *x, void *arg);
void serve_completions(struct capy_http_exchange *x, void *arg);
void serve_responses(struct capy_http_exchange *x, void *arg);
void serve_messages(struct capy_http_exchange *x, void *arg);
void serve_count_tokens(struct capy_http_exchange *x, void *arg);

/* The API a path belongs to (for error shapes). */
enum capy_api serve_api_of_path(const char *path);

#endif
