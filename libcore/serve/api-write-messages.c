/* api-write-messages.c - responses of Anthropic /v1/messages: `event:` + `data:` SSE
 * (message_start, ping, content blocks, message_delta, message_stop; as in
 * reference/captured/sse_examples/anthropic_stream*.txt) and the message body.
 *
 * Thinking blocks carry a signature, as Anthropic's do: @anthropic-ai/sdk sets it from
 * signature_delta, and Claude Code and opencode send thinking blocks back with it in the next
 * request (Qwen Code sends them without). capy verifies nothing, so it is a plain name of the
 * block, "capy.<id>.<index>". The thinking text is always sent, also when the request asked
 * for display "omitted": a local server has no reason to hide it, and without the text the
 * reasoning could not be rendered back into the next turn's prompt.
 */
#include "serve/api-impl.h"

static const char *stop_reason(const struct capy_api_writer *w, enum capy_api_finish f)
{
	if (f == CAPY_API_FINISH_LENGTH)
		return "max_tokens";
	if (w->n_calls)
		return "tool_use";
	if (f == CAPY_API_FINISH_STOP)
		return "stop_sequence";
	return "end_turn";
}

static void event(struct capy_api_writer *w, const char *type, struct capy_buf *buf)
{
	wsse(buf, type, &w->tmp);
}

static struct capy_buf *data(struct capy_api_writer *w)
{
	capy_buf_reset(&w->tmp);
	return &w->tmp;
}

static void usage_json(struct capy_buf *d, int64_t prompt, int64_t cached, int64_t out, const char *tier)
{
	capy_buf_printf(d, "{\"input_tokens\":%" PRId64 ",\"output_tokens\":%" PRId64
			   ",\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":%" PRId64,
			prompt - cached, out, cached);
	if (tier && cached)
		capy_buf_printf(d, ",\"cache_tier\":\"%s\"", tier);
	capy_buf_puts(d, "}");
}

static void signature(const struct capy_api_writer *w, const struct wpart *pt, struct capy_buf *d)
{
	capy_buf_printf(d, "\"capy.%s.%d\"", w->id, pt->out);
}

/* A content block: as started (empty) or whole. */
static void block_json(const struct capy_api_writer *w, const struct wpart *pt, bool full,
		       struct capy_buf *d)
{
	switch (pt->kind) {
	case WP_REASONING:
		capy_buf_puts(d, "{\"type\":\"thinking\",\"thinking\":");
		if (full) {
			capy_buf_json_str(d, pt->text.data, pt->text.len);
			capy_buf_puts(d, ",\"signature\":");
			signature(w, pt, d);
		} else {
			capy_buf_puts(d, "\"\",\"signature\":\"\"");
		}
		capy_buf_putc(d, '}');
		return;
	case WP_TEXT:
		capy_buf_puts(d, "{\"type\":\"text\",\"text\":");
		wpart_text(pt, full, d);
		capy_buf_putc(d, '}');
		return;
	case WP_CALL:
		capy_buf_printf(d, "{\"type\":\"tool_use\",\"id\":\"toolu_%s_%d\",\"name\":", w->id,
				pt->call);
		capy_buf_json_str(d, pt->name, strlen(pt->name));
		capy_buf_puts(d, ",\"input\":");
		if (full && pt->text.len)
			capy_buf_add(d, pt->text.data, pt->text.len); /* a JSON object (outparse) */
		else
			capy_buf_puts(d, "{}");
		capy_buf_putc(d, '}');
		return;
	}
}

static void msg_begin(struct capy_api_writer *w, struct capy_buf *buf)
{
	struct capy_buf *d;

	if (!w->stream)
		return;
	d = data(w);
	capy_buf_printf(d, "{\"type\":\"message_start\",\"message\":{\"id\":\"msg_%s\",\"type\":\"message\","
			   "\"role\":\"assistant\",\"model\":", w->id);
	capy_buf_json_str(d, w->model, strlen(w->model));
	capy_buf_puts(d, ",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":");
	/* output_tokens 1, as Anthropic's own message_start has it */
	usage_json(d, w->prompt_tokens, w->cached_tokens, 1, NULL);
	capy_buf_puts(d, "}}");
	event(w, "message_start", buf);
	d = data(w);
	capy_buf_puts(d, "{\"type\":\"ping\"}");
	event(w, "ping", buf);
}

static void msg_open(struct capy_api_writer *w, struct wpart *pt, struct capy_buf *buf)
{
	struct capy_buf *d;

	pt->out = (int)(pt - w->parts);
	if (!w->stream)
		return;
	d = data(w);
	capy_buf_printf(d, "{\"type\":\"content_block_start\",\"index\":%d,\"content_block\":", pt->out);
	block_json(w, pt, false, d);
	capy_buf_putc(d, '}');
	event(w, "content_block_start", buf);
}

static void msg_delta(struct capy_api_writer *w, struct wpart *pt, const char *s, size_t n,
		      struct capy_buf *buf)
{
	static const char *const kinds[][2] = {
		[WP_REASONING] = { "thinking_delta", "thinking" },
		[WP_TEXT] = { "text_delta", "text" },
		[WP_CALL] = { "input_json_delta", "partial_json" },
	};
	struct capy_buf *d;

	if (!w->stream)
		return;
	d = data(w);
	capy_buf_printf(d, "{\"type\":\"content_block_delta\",\"index\":%d,\"delta\":{\"type\":\"%s\",\"%s\":",
			pt->out, kinds[pt->kind][0], kinds[pt->kind][1]);
	capy_buf_json_str(d, s, n);
	capy_buf_puts(d, "}}");
	event(w, "content_block_delta", buf);
}

static void msg_close(struct capy_api_writer *w, struct wpart *pt, struct capy_buf *buf)
{
	struct capy_buf *d;

	if (!w->stream)
		return;
	if (pt->kind == WP_REASONING) {
		d = data(w);
		capy_buf_printf(d, "{\"type\":\"content_block_delta\",\"index\":%d,"
				   "\"delta\":{\"type\":\"signature_delta\",\"signature\":", pt->out);
		signature(w, pt, d);
		capy_buf_puts(d, "}}");
		event(w, "content_block_delta", buf);
	}
	d = data(w);
	capy_buf_printf(d, "{\"type\":\"content_block_stop\",\"index\":%d}", pt->out);
	event(w, "content_block_stop", buf);
}

static void stop_fields(const struct capy_api_writer *w, enum capy_api_finish f,
			const char *stop, struct capy_buf *d)
{
	const char *reason = stop_reason(w, f);

	capy_buf_printf(d, "\"stop_reason\":\"%s\",\"stop_sequence\":", reason);
	if (!strcmp(reason, "stop_sequence") && stop)
		capy_buf_json_str(d, stop, strlen(stop));
	else
		capy_buf_puts(d, "null");
}

static void msg_end(struct capy_api_writer *w, enum capy_api_finish f, const char *stop,
		    const struct capy_api_usage *u, struct capy_buf *buf)
{
	struct capy_buf *d;
	size_t i;

	if (w->stream) {
		d = data(w);
		capy_buf_puts(d, "{\"type\":\"message_delta\",\"delta\":{");
		stop_fields(w, f, stop, d);
		capy_buf_printf(d, "},\"usage\":{\"output_tokens\":%" PRId64 "}}", u->completion_tokens);
		event(w, "message_delta", buf);
		d = data(w);
		capy_buf_puts(d, "{\"type\":\"message_stop\"}");
		event(w, "message_stop", buf);
		return;
	}
	d = buf;
	capy_buf_printf(d, "{\"id\":\"msg_%s\",\"type\":\"message\",\"role\":\"assistant\",\"model\":", w->id);
	capy_buf_json_str(d, w->model, strlen(w->model));
	capy_buf_puts(d, ",\"content\":[");
	for (i = 0; i < w->n_parts; i++) {
		if (i)
			capy_buf_putc(d, ',');
		block_json(w, &w->parts[i], true, d);
	}
	capy_buf_puts(d, "],");
	stop_fields(w, f, stop, d);
	capy_buf_puts(d, ",\"usage\":");
	usage_json(d, u->prompt_tokens, u->cached_tokens, u->completion_tokens, u->cache_tier);
	capy_buf_putc(d, '}');
}

static void msg_error(struct capy_api_writer *w, const struct capy_api_error *e,
		      struct capy_buf *buf)
{
	struct capy_buf *d = data(w);

	api_error_object_anthropic(e, d);
	event(w, "error", buf);
}

const struct wapi wapi_messages = {
	.begin = msg_begin,
	.open = msg_open,
	.delta = msg_delta,
	.close = msg_close,
	.end = msg_end,
	.error = msg_error,
};
