/* api-write-chat.c - responses of /v1/chat/completions and /v1/completions: chunks (SSE
 * `data:` lines ending in `data: [DONE]`) and whole bodies. Field order follows the captured
 * examples (reference/captured/sse_examples/chat_stream*.txt). */
#include "serve/api-impl.h"

static const char *finish_reason(const struct capy_api_writer *w, enum capy_api_finish f)
{
	if (f == CAPY_API_FINISH_LENGTH)
		return "length";
	if (w->n_calls && w->api == CAPY_API_CHAT)
		return "tool_calls";
	return "stop";
}

static void head(const struct capy_api_writer *w, struct capy_buf *d, const char *object)
{
	capy_buf_printf(d, "{\"id\":\"%s%s\",\"created\":%" PRId64 ",\"model\":",
			w->api == CAPY_API_CHAT ? "chatcmpl-" : "cmpl-", w->id, w->created);
	capy_buf_json_str(d, w->model, strlen(w->model));
	capy_buf_printf(d, ",\"system_fingerprint\":null,\"object\":\"%s\"", object);
}

static void usage_json(struct capy_buf *d, const struct capy_api_usage *u)
{
	capy_buf_printf(d,
			"{\"prompt_tokens\":%" PRId64 ",\"completion_tokens\":%" PRId64
			",\"total_tokens\":%" PRId64 ",\"prompt_tokens_details\":{\"cached_tokens\":%" PRId64,
			u->prompt_tokens, u->completion_tokens, u->prompt_tokens + u->completion_tokens, u->cached_tokens);
	if (u->cache_tier && u->cached_tokens)
		capy_buf_printf(d, ",\"cache_tier\":\"%s\"", u->cache_tier);
	capy_buf_printf(d, "},\"completion_tokens_details\":{\"reasoning_tokens\":%" PRId64 "}}", u->reasoning_tokens);
}

/* --- logprobs ----------------------------------------------------------------------------- */

/* chat: {"content":[{token, logprob, bytes, top_logprobs}],"refusal":null} or null */
static void chat_logprobs(const struct capy_api_writer *w, struct capy_buf *d, size_t from,
			  size_t to, bool always)
{
	if (w->req->logprobs < 0 || (from >= to && !always)) {
		capy_buf_puts(d, "null");
		return;
	}
	capy_buf_puts(d, "{\"content\":");
	wjson_logprob_list(w, d, from, to);
	capy_buf_puts(d, ",\"refusal\":null}");
}

static bool same_bytes(const struct wtop *a, const struct wtop *b)
{
	return a->len == b->len && !memcmp(a->tok, b->tok, a->len);
}

/* completions: {"tokens","token_logprobs","top_logprobs":[{token: logprob}],"text_offset"} */
static void completion_logprobs(struct capy_api_writer *w, struct capy_buf *d, size_t from,
				size_t to, int64_t *offset, bool always)
{
	size_t i, k, j;

	if (w->req->logprobs < 0 || (from >= to && !always)) {
		capy_buf_puts(d, "null");
		return;
	}
	capy_buf_puts(d, "{\"tokens\":[");
	for (i = from; i < to; i++) {
		if (i > from)
			capy_buf_putc(d, ',');
		wjson_lossy(d, w->lp[i].tok, w->lp[i].len);
	}
	capy_buf_puts(d, "],\"token_logprobs\":[");
	for (i = from; i < to; i++) {
		if (i > from)
			capy_buf_putc(d, ',');
		wjson_logprob(d, w->lp[i].lp);
	}
	capy_buf_puts(d, "],\"top_logprobs\":[");
	for (i = from; i < to; i++) {
		capy_buf_puts(d, i > from ? ",{" : "{");
		for (k = 0; k < w->lp[i].n_top; k++) {
			for (j = 0; j < k && !same_bytes(&w->lp[i].top[j], &w->lp[i].top[k]); j++)
				;
			if (j < k)
				continue; /* two ids that read the same: a dict keeps one */
			if (k)
				capy_buf_putc(d, ',');
			wjson_lossy(d, w->lp[i].top[k].tok, w->lp[i].top[k].len);
			capy_buf_putc(d, ':');
			wjson_logprob(d, w->lp[i].top[k].lp);
		}
		capy_buf_putc(d, '}');
	}
	capy_buf_puts(d, "],\"text_offset\":[");
	for (i = from; i < to; i++) {
		capy_buf_printf(d, i > from ? ",%" PRId64 : "%" PRId64, *offset);
		*offset += wlossy_length(w->lp[i].tok, w->lp[i].len);
	}
	capy_buf_puts(d, "]}");
}

/* --- chunks -------------------------------------------------------------------------------- */

/* One chunk: delta (chat) or text (completions) is JSON in `body`; the records not yet sent
 * go with it. */
static void chunk(struct capy_api_writer *w, struct capy_buf *buf, const struct capy_buf *body,
		  const char *finish)
{
	struct capy_buf *d = &w->tmp;
	size_t from = w->lp_sent, to = w->n_lp;

	capy_buf_reset(d);
	if (w->api == CAPY_API_CHAT) {
		head(w, d, "chat.completion.chunk");
		capy_buf_puts(d, ",\"choices\":[{\"index\":0,\"delta\":");
		capy_buf_add(d, body->data, body->len);
		capy_buf_puts(d, ",\"logprobs\":");
		chat_logprobs(w, d, from, to, false);
	} else {
		head(w, d, "text_completion");
		capy_buf_puts(d, ",\"choices\":[{\"index\":0,\"text\":");
		capy_buf_add(d, body->data, body->len);
		capy_buf_puts(d, ",\"logprobs\":");
		completion_logprobs(w, d, from, to, &w->text_offset, false);
	}
	w->lp_sent = to;
	capy_buf_puts(d, ",\"finish_reason\":");
	if (finish)
		capy_buf_printf(d, "\"%s\"", finish);
	else
		capy_buf_puts(d, "null");
	capy_buf_puts(d, "}]}");
	if (body->oom)
		d->oom = true;
	wsse(buf, NULL, d);
}

static void chat_begin(struct capy_api_writer *w, struct capy_buf *buf)
{
	struct capy_buf b = { 0 };

	if (!w->stream)
		return;
	capy_buf_puts(&b, "{\"role\":\"assistant\",\"content\":\"\"}");
	chunk(w, buf, &b, NULL);
	capy_buf_release(&b);
}

static void chat_open(struct capy_api_writer *w, struct wpart *pt, struct capy_buf *buf)
{
	struct capy_buf b = { 0 };

	if (!w->stream || pt->kind != WP_CALL)
		return;
	capy_buf_printf(&b, "{\"tool_calls\":[{\"index\":%d,\"id\":\"call_%s_%d\",\"type\":\"function\","
			    "\"function\":{\"name\":", pt->call, w->id, pt->call);
	capy_buf_json_str(&b, pt->name, strlen(pt->name));
	capy_buf_puts(&b, ",\"arguments\":\"\"}}]}");
	chunk(w, buf, &b, NULL);
	capy_buf_release(&b);
}

static void chat_delta(struct capy_api_writer *w, struct wpart *pt, const char *s, size_t n,
		       struct capy_buf *buf)
{
	struct capy_buf b = { 0 };

	if (!w->stream)
		return;
	if (pt->kind == WP_CALL) {
		capy_buf_printf(&b, "{\"tool_calls\":[{\"index\":%d,\"function\":{\"arguments\":",
				pt->call);
		capy_buf_json_str(&b, s, n);
		capy_buf_puts(&b, "}}]}");
	} else {
		capy_buf_puts(&b, pt->kind == WP_REASONING ? "{\"reasoning_content\":" : "{\"content\":");
		capy_buf_json_str(&b, s, n);
		capy_buf_putc(&b, '}');
	}
	chunk(w, buf, &b, NULL);
	capy_buf_release(&b);
}

static void chat_close(struct capy_api_writer *w, struct wpart *pt, struct capy_buf *buf)
{
}

/* The concatenated text of every part of a kind; false when there is none. */
static bool parts_text(const struct capy_api_writer *w, enum wpart_kind kind, struct capy_buf *d)
{
	bool any = false;
	size_t i;

	for (i = 0; i < w->n_parts; i++)
		if (w->parts[i].kind == kind) {
			capy_buf_add(d, w->parts[i].text.data, w->parts[i].text.len);
			any = true;
		}
	return any;
}

static void json_text_of(const struct capy_api_writer *w, enum wpart_kind kind,
			 struct capy_buf *d, const char *none)
{
	struct capy_buf t = { 0 };

	if (parts_text(w, kind, &t))
		capy_buf_json_str(d, t.data, t.len);
	else
		capy_buf_puts(d, none);
	if (t.oom)
		d->oom = true;
	capy_buf_release(&t);
}

static void usage_chunk(struct capy_api_writer *w, const struct capy_api_usage *u,
			struct capy_buf *buf)
{
	struct capy_buf *d = &w->tmp;

	capy_buf_reset(d);
	head(w, d, w->api == CAPY_API_CHAT ? "chat.completion.chunk" : "text_completion");
	capy_buf_puts(d, ",\"choices\":[],\"usage\":");
	usage_json(d, u);
	capy_buf_putc(d, '}');
	wsse(buf, NULL, d);
}

static void chat_end(struct capy_api_writer *w, enum capy_api_finish f, const char *stop,
		     const struct capy_api_usage *u, struct capy_buf *buf)
{
	struct capy_buf *d = buf, t = { 0 };
	size_t i;
	bool any;

	if (w->stream) {
		capy_buf_puts(&t, "{}");
		chunk(w, buf, &t, finish_reason(w, f));
		capy_buf_release(&t);
		if (w->req->include_usage)
			usage_chunk(w, u, buf);
		capy_buf_puts(buf, "data: [DONE]\n\n");
		return;
	}
	head(w, d, "chat.completion");
	capy_buf_puts(d, ",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":");
	json_text_of(w, WP_TEXT, d, w->n_calls ? "null" : "\"\"");
	any = parts_text(w, WP_REASONING, &t);
	capy_buf_release(&t);
	if (any) {
		capy_buf_puts(d, ",\"reasoning_content\":");
		json_text_of(w, WP_REASONING, d, "null");
	}
	if (w->n_calls) {
		capy_buf_puts(d, ",\"tool_calls\":[");
		for (i = 0, any = false; i < w->n_parts; i++) {
			const struct wpart *pt = &w->parts[i];

			if (pt->kind != WP_CALL)
				continue;
			capy_buf_printf(d, "%s{\"id\":\"call_%s_%d\",\"type\":\"function\",\"function\":{\"name\":",
					any ? "," : "", w->id, pt->call);
			capy_buf_json_str(d, pt->name, strlen(pt->name));
			capy_buf_puts(d, ",\"arguments\":");
			capy_buf_json_str(d, pt->text.data, pt->text.len);
			capy_buf_puts(d, "}}");
			any = true;
		}
		capy_buf_putc(d, ']');
	}
	capy_buf_puts(d, "},\"logprobs\":");
	chat_logprobs(w, d, 0, w->n_lp, true);
	capy_buf_printf(d, ",\"finish_reason\":\"%s\"}],\"usage\":", finish_reason(w, f));
	usage_json(d, u);
	capy_buf_putc(d, '}');
}

static void openai_stream_error(struct capy_api_writer *w, const struct capy_api_error *e,
				struct capy_buf *buf)
{
	struct capy_buf *d = &w->tmp;

	capy_buf_reset(d);
	capy_buf_puts(d, "{\"error\":");
	api_error_object_openai(e, d);
	capy_buf_putc(d, '}');
	wsse(buf, NULL, d);
	capy_buf_puts(buf, "data: [DONE]\n\n");
}

const struct wapi wapi_chat = {
	.begin = chat_begin,
	.open = chat_open,
	.delta = chat_delta,
	.close = chat_close,
	.end = chat_end,
	.error = openai_stream_error,
};

/* --- completions --------------------------------------------------------------------------- */

static void text_chunk(struct capy_api_writer *w, const char *s, size_t n, struct capy_buf *buf,
		       const char *finish)
{
	struct capy_buf b = { 0 };

	capy_buf_json_str(&b, s, n);
	chunk(w, buf, &b, finish);
	capy_buf_release(&b);
}

static void comp_begin(struct capy_api_writer *w, struct capy_buf *buf)
{
	w->text_offset = w->echo ? wlossy_length(w->echo, w->echo_len) : 0;
	if (w->stream && w->echo && w->echo_len) {
		size_t sent = w->lp_sent;

		w->lp_sent = w->n_lp; /* nothing is queued yet: the echo has no records */
		text_chunk(w, w->echo, w->echo_len, buf, NULL);
		w->lp_sent = sent;
	}
}

static void comp_open(struct capy_api_writer *w, struct wpart *pt, struct capy_buf *buf)
{
}

static void comp_delta(struct capy_api_writer *w, struct wpart *pt, const char *s, size_t n,
		       struct capy_buf *buf)
{
	if (w->stream && pt->kind != WP_CALL)
		text_chunk(w, s, n, buf, NULL);
}

static void comp_end(struct capy_api_writer *w, enum capy_api_finish f, const char *stop,
		     const struct capy_api_usage *u, struct capy_buf *buf)
{
	struct capy_buf *d = buf, t = { 0 };
	int64_t offset;
	size_t i;

	if (w->stream) {
		text_chunk(w, "", 0, buf, finish_reason(w, f));
		if (w->req->include_usage)
			usage_chunk(w, u, buf);
		capy_buf_puts(buf, "data: [DONE]\n\n");
		return;
	}
	if (w->echo)
		capy_buf_add(&t, w->echo, w->echo_len);
	for (i = 0; i < w->n_parts; i++)
		if (w->parts[i].kind != WP_CALL)
			capy_buf_add(&t, w->parts[i].text.data, w->parts[i].text.len);
	head(w, d, "text_completion");
	capy_buf_puts(d, ",\"choices\":[{\"index\":0,\"text\":");
	capy_buf_json_str(d, t.data ? t.data : "", t.len);
	capy_buf_puts(d, ",\"logprobs\":");
	offset = w->echo ? wlossy_length(w->echo, w->echo_len) : 0;
	completion_logprobs(w, d, 0, w->n_lp, &offset, true);
	capy_buf_printf(d, ",\"finish_reason\":\"%s\"}],\"usage\":", finish_reason(w, f));
	usage_json(d, u);
	capy_buf_putc(d, '}');
	if (t.oom)
		d->oom = true;
	capy_buf_release(&t);
}

const struct wapi wapi_completions = {
	.begin = comp_begin,
	.open = comp_open,
	.delta = comp_delta,
	.close = chat_close,
	.end = comp_end,
	.error = openai_stream_error,
};
