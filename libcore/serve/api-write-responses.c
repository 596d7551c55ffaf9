/* api-write-responses.c - responses of /v1/responses: `event: <type>` SSE with a
 * sequence_number from 0 (reference/captured/sse_examples/responses_stream.txt), output items
 * for reasoning (reasoning_text), messages (output_text), function and custom tool calls, and
 * the response object that response.completed / .incomplete / .failed and the non-streamed
 * body carry. */
#include "serve/api-impl.h"

static void item_id(const struct capy_api_writer *w, const struct wpart *pt, struct capy_buf *d)
{
	switch (pt->kind) {
	case WP_REASONING:
		capy_buf_printf(d, "rs_%s", w->id);
		break;
	case WP_TEXT:
		capy_buf_printf(d, "msg_%s", w->id);
		break;
	case WP_CALL:
		capy_buf_printf(d, "%s_%s_%d", pt->custom ? "ctc" : "fc", w->id, pt->call);
		return;
	}
	if (pt->nth)
		capy_buf_printf(d, "_%d", pt->nth);
}

static void q_item_id(const struct capy_api_writer *w, const struct wpart *pt, struct capy_buf *d)
{
	capy_buf_putc(d, '"');
	item_id(w, pt, d);
	capy_buf_putc(d, '"');
}

static const char *item_status(const struct wpart *pt, bool done)
{
	if (!done)
		return "in_progress";
	return pt->incomplete || !pt->closed ? "incomplete" : "completed";
}

/* A custom tool's input: the "input" string of the arguments the model wrote for the
 * function it saw (api-tools.c), else the arguments text itself. */
static void custom_input(const struct wpart *pt, struct capy_buf *d)
{
	struct capy_tdoc *doc = capy_tdoc_new();
	struct capy_tval *v = NULL;
	const char *s = NULL;
	size_t len = 0;

	if (!doc) {
		d->oom = true;
		return;
	}
	if (!capy_tdoc_parse_json(doc, pt->text.data ? pt->text.data : "", pt->text.len, "input",
				  &v, NULL))
		s = capy_tval_strv(capy_tval_get(v, "input"), &len);
	if (s)
		capy_buf_json_str(d, s, len);
	else
		capy_buf_json_str(d, pt->text.data ? pt->text.data : "", pt->text.len);
	capy_tdoc_free(doc);
}

/* The name the client knows the tool by: a namespace function's own name. */
static void call_name(const struct wpart *pt, struct capy_buf *d)
{
	const char *name = pt->ns && pt->ns_name ? pt->ns_name : pt->name;

	capy_buf_json_str(d, name, strlen(name));
}

static void text_part(const struct capy_api_writer *w, const struct wpart *pt, bool full,
		      struct capy_buf *d)
{
	if (pt->kind == WP_REASONING) {
		capy_buf_puts(d, "{\"type\":\"reasoning_text\",\"text\":");
		wpart_text(pt, full, d);
		capy_buf_putc(d, '}');
		return;
	}
	capy_buf_puts(d, "{\"type\":\"output_text\",\"text\":");
	wpart_text(pt, full, d);
	capy_buf_puts(d, ",\"annotations\":[],\"logprobs\":");
	if (full)
		wjson_logprob_list(w, d, pt->lp_from, pt->lp_to);
	else
		capy_buf_puts(d, "[]");
	capy_buf_putc(d, '}');
}

/* An output item, as added (empty, in progress) or done (full). */
static void item_json(const struct capy_api_writer *w, const struct wpart *pt, bool done,
		      struct capy_buf *d)
{
	const char *status = item_status(pt, done);

	switch (pt->kind) {
	case WP_REASONING:
		capy_buf_puts(d, "{\"type\":\"reasoning\",\"id\":");
		q_item_id(w, pt, d);
		capy_buf_puts(d, ",\"summary\":[],\"content\":[");
		if (done)
			text_part(w, pt, true, d);
		capy_buf_printf(d, "],\"encrypted_content\":null,\"status\":\"%s\"}", status);
		return;
	case WP_TEXT:
		capy_buf_puts(d, "{\"type\":\"message\",\"id\":");
		q_item_id(w, pt, d);
		capy_buf_printf(d, ",\"status\":\"%s\",\"role\":\"assistant\",\"content\":[", status);
		if (done)
			text_part(w, pt, true, d);
		capy_buf_puts(d, "]}");
		return;
	case WP_CALL:
		capy_buf_printf(d, "{\"type\":\"%s\",\"id\":", pt->custom ? "custom_tool_call" : "function_call");
		q_item_id(w, pt, d);
		capy_buf_printf(d, ",\"call_id\":\"call_%s_%d\"", w->id, pt->call);
		if (pt->ns && pt->ns_name) {
			capy_buf_puts(d, ",\"namespace\":");
			capy_buf_json_str(d, pt->ns, strlen(pt->ns));
		}
		capy_buf_puts(d, ",\"name\":");
		call_name(pt, d);
		if (pt->custom) {
			capy_buf_puts(d, ",\"input\":");
			if (done)
				custom_input(pt, d);
			else
				capy_buf_puts(d, "\"\"");
			capy_buf_putc(d, '}');
			return;
		}
		capy_buf_puts(d, ",\"arguments\":");
		wpart_text(pt, done, d);
		capy_buf_printf(d, ",\"status\":\"%s\"}", status);
		return;
	}
}

static void usage_json(struct capy_buf *d, const struct capy_api_usage *u)
{
	capy_buf_printf(d, "{\"input_tokens\":%" PRId64 ",\"input_tokens_details\":{\"cached_tokens\":%" PRId64,
			u->prompt_tokens, u->cached_tokens);
	if (u->cache_tier && u->cached_tokens)
		capy_buf_printf(d, ",\"cache_tier\":\"%s\"", u->cache_tier);
	capy_buf_printf(d,
			"},\"output_tokens\":%" PRId64 ",\"output_tokens_details\":{\"reasoning_tokens\":%" PRId64
			"},\"total_tokens\":%" PRId64 "}",
			u->completion_tokens, u->reasoning_tokens, u->prompt_tokens + u->completion_tokens);
}

/* A request value echoed in the response, or its default. */
static void echo(const struct capy_api_writer *w, struct capy_buf *d, const char *key,
		 const char *dflt)
{
	struct capy_tval *v = pget(w->req->body, key);

	if (v)
		wjson_tval(d, v);
	else
		capy_buf_puts(d, dflt);
}

/* The response object; status "in_progress" has no output and no usage yet. */
static void response_json(const struct capy_api_writer *w, struct capy_buf *d, const char *status,
			  const struct capy_api_usage *u, const struct capy_api_error *e)
{
	size_t i;

	capy_buf_printf(d, "{\"id\":\"resp_%s\",\"object\":\"response\",\"created_at\":%" PRId64
			   ",\"status\":\"%s\",\"model\":", w->id, w->created, status);
	capy_buf_json_str(d, w->model, strlen(w->model));
	capy_buf_puts(d, ",\"output\":[");
	if (strcmp(status, "in_progress"))
		for (i = 0; i < w->n_parts; i++) {
			if (i)
				capy_buf_putc(d, ',');
			item_json(w, &w->parts[i], true, d);
		}
	capy_buf_puts(d, "],\"usage\":");
	if (u)
		usage_json(d, u);
	else
		capy_buf_puts(d, "null");
	capy_buf_puts(d, ",\"error\":");
	if (e) {
		const char *code = e->code ? e->code : e->status >= 500 ? "server_error" : "invalid_request_error";

		capy_buf_puts(d, "{\"code\":");
		capy_buf_json_str(d, code, strlen(code));
		capy_buf_puts(d, ",\"message\":");
		capy_buf_json_str(d, e->msg, strlen(e->msg));
		capy_buf_putc(d, '}');
	} else {
		capy_buf_puts(d, "null");
	}
	capy_buf_printf(d, ",\"incomplete_details\":%s,\"instructions\":",
			!strcmp(status, "incomplete") ? "{\"reason\":\"max_output_tokens\"}" : "null");
	echo(w, d, "instructions", "null");
	capy_buf_printf(d, ",\"parallel_tool_calls\":%s,\"tool_choice\":",
			w->req->parallel_tool_calls ? "true" : "false");
	echo(w, d, "tool_choice", "\"auto\"");
	capy_buf_puts(d, ",\"tools\":");
	echo(w, d, "tools", "[]");
	capy_buf_puts(d, ",\"temperature\":");
	echo(w, d, "temperature", "1.0");
	capy_buf_puts(d, ",\"top_p\":");
	echo(w, d, "top_p", "1.0");
	capy_buf_puts(d, ",\"metadata\":");
	echo(w, d, "metadata", "{}");
	capy_buf_putc(d, '}');
}

/* --- events -------------------------------------------------------------------------------- */

/* Start an event's data: {"type":T,"sequence_number":N (the rest follows, then '}'). */
static struct capy_buf *ev_begin(struct capy_api_writer *w, const char *type)
{
	struct capy_buf *d = &w->tmp;

	capy_buf_reset(d);
	capy_buf_printf(d, "{\"type\":\"%s\",\"sequence_number\":%" PRId64, type, w->seq++);
	return d;
}

static void ev_end(struct capy_api_writer *w, const char *type, struct capy_buf *buf)
{
	capy_buf_putc(&w->tmp, '}');
	wsse(buf, type, &w->tmp);
}

static void ev_response(struct capy_api_writer *w, const char *type, const char *status,
			const struct capy_api_usage *u, const struct capy_api_error *e,
			struct capy_buf *buf)
{
	struct capy_buf *d = ev_begin(w, type);

	capy_buf_puts(d, ",\"response\":");
	response_json(w, d, status, u, e);
	ev_end(w, type, buf);
}

/* "item_id":..,"output_index":n[,"content_index":0] */
static void ev_item_ref(struct capy_api_writer *w, const struct wpart *pt, bool content)
{
	struct capy_buf *d = &w->tmp;

	capy_buf_puts(d, ",\"item_id\":");
	q_item_id(w, pt, d);
	capy_buf_printf(d, ",\"output_index\":%d", pt->out);
	if (content)
		capy_buf_puts(d, ",\"content_index\":0");
}

static void ev_item(struct capy_api_writer *w, const char *type, const struct wpart *pt,
		    bool done, struct capy_buf *buf)
{
	struct capy_buf *d = ev_begin(w, type);

	capy_buf_printf(d, ",\"output_index\":%d,\"item\":", pt->out);
	item_json(w, pt, done, d);
	ev_end(w, type, buf);
}

static void ev_part(struct capy_api_writer *w, const char *type, const struct wpart *pt,
		    bool full, struct capy_buf *buf)
{
	struct capy_buf *d = ev_begin(w, type);

	ev_item_ref(w, pt, true);
	capy_buf_puts(d, ",\"part\":");
	text_part(w, pt, full, d);
	ev_end(w, type, buf);
}

static void resp_begin(struct capy_api_writer *w, struct capy_buf *buf)
{
	if (!w->stream)
		return;
	ev_response(w, "response.created", "in_progress", NULL, NULL, buf);
	ev_response(w, "response.in_progress", "in_progress", NULL, NULL, buf);
}

static void resp_open(struct capy_api_writer *w, struct wpart *pt, struct capy_buf *buf)
{
	pt->out = (int)(pt - w->parts);
	if (!w->stream)
		return;
	ev_item(w, "response.output_item.added", pt, false, buf);
	if (pt->kind != WP_CALL)
		ev_part(w, "response.content_part.added", pt, false, buf);
}

static void resp_delta(struct capy_api_writer *w, struct wpart *pt, const char *s, size_t n,
		       struct capy_buf *buf)
{
	static const char *const types[] = {
		[WP_REASONING] = "response.reasoning_text.delta",
		[WP_TEXT] = "response.output_text.delta",
		[WP_CALL] = "response.function_call_arguments.delta",
	};
	struct capy_buf *d;

	if (!w->stream || pt->custom) /* a custom call's input is known at its end */
		return;
	d = ev_begin(w, types[pt->kind]);
	ev_item_ref(w, pt, pt->kind != WP_CALL);
	capy_buf_puts(d, ",\"delta\":");
	capy_buf_json_str(d, s, n);
	if (pt->kind == WP_TEXT) {
		capy_buf_puts(d, ",\"logprobs\":");
		wjson_logprob_list(w, d, w->lp_sent, w->n_lp);
	}
	ev_end(w, types[pt->kind], buf);
}

static void resp_close(struct capy_api_writer *w, struct wpart *pt, struct capy_buf *buf)
{
	struct capy_buf *d;
	const char *type;

	if (!w->stream)
		return;
	if (pt->kind == WP_CALL && pt->custom) {
		d = ev_begin(w, type = "response.custom_tool_call_input.delta");
		ev_item_ref(w, pt, false);
		capy_buf_puts(d, ",\"delta\":");
		custom_input(pt, d);
		ev_end(w, type, buf);
		d = ev_begin(w, type = "response.custom_tool_call_input.done");
		ev_item_ref(w, pt, false);
		capy_buf_puts(d, ",\"input\":");
		custom_input(pt, d);
		ev_end(w, type, buf);
	} else if (pt->kind == WP_CALL) {
		d = ev_begin(w, type = "response.function_call_arguments.done");
		ev_item_ref(w, pt, false);
		capy_buf_puts(d, ",\"name\":");
		call_name(pt, d);
		capy_buf_puts(d, ",\"arguments\":");
		capy_buf_json_str(d, pt->text.data, pt->text.len);
		ev_end(w, type, buf);
	} else {
		type = pt->kind == WP_TEXT ? "response.output_text.done" : "response.reasoning_text.done";
		d = ev_begin(w, type);
		ev_item_ref(w, pt, true);
		capy_buf_puts(d, ",\"text\":");
		capy_buf_json_str(d, pt->text.data, pt->text.len);
		if (pt->kind == WP_TEXT) {
			capy_buf_puts(d, ",\"logprobs\":");
			wjson_logprob_list(w, d, pt->lp_from, pt->lp_to);
		}
		ev_end(w, type, buf);
		ev_part(w, "response.content_part.done", pt, true, buf);
	}
	ev_item(w, "response.output_item.done", pt, true, buf);
}

static void resp_end(struct capy_api_writer *w, enum capy_api_finish f, const char *stop,
		     const struct capy_api_usage *u, struct capy_buf *buf)
{
	const char *status = f == CAPY_API_FINISH_LENGTH ? "incomplete" : "completed";

	if (!w->stream) {
		response_json(w, buf, status, u, NULL);
		return;
	}
	ev_response(w, f == CAPY_API_FINISH_LENGTH ? "response.incomplete" : "response.completed",
		    status, u, NULL, buf);
}

static void resp_error(struct capy_api_writer *w, const struct capy_api_error *e,
		       struct capy_buf *buf)
{
	ev_response(w, "response.failed", "failed", NULL, e, buf);
}

const struct wapi wapi_responses = {
	.begin = resp_begin,
	.open = resp_open,
	.delta = resp_delta,
	.close = resp_close,
	.end = resp_end,
	.error = resp_error,
};
