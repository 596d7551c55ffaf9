/* api-writer.c - the response writer: output parts, logprob records, the calls every API's
 * writer shares, and the JSON helpers they write with. */
#include "serve/api-impl.h"

#include <math.h>
#include <utf8proc.h>

static const struct wapi *wapi_of(enum capy_api api)
{
	switch (api) {
	case CAPY_API_CHAT: return &wapi_chat;
	case CAPY_API_COMPLETIONS: return &wapi_completions;
	case CAPY_API_RESPONSES: return &wapi_responses;
	case CAPY_API_MESSAGES: return &wapi_messages;
	default: return NULL;
	}
}

/* --- JSON helpers ------------------------------------------------------------------------- */

void wjson_tval(struct capy_buf *b, const struct capy_tval *v)
{
	size_t i, n, len;
	const char *s;
	int64_t iv;
	char *txt;

	switch (capy_tval_kind(v)) {
	case CAPY_TVAL_NONE:
		capy_buf_puts(b, "null");
		break;
	case CAPY_TVAL_BOOL:
		capy_buf_puts(b, capy_tval_boolv(v) ? "true" : "false");
		break;
	case CAPY_TVAL_STR:
		s = capy_tval_strv(v, &len);
		capy_buf_json_str(b, s, len);
		break;
	case CAPY_TVAL_LIST:
		capy_buf_putc(b, '[');
		n = capy_tval_len(v);
		for (i = 0; i < n; i++) {
			if (i)
				capy_buf_putc(b, ',');
			wjson_tval(b, capy_tval_at(v, i));
		}
		capy_buf_putc(b, ']');
		break;
	case CAPY_TVAL_DICT:
		capy_buf_putc(b, '{');
		n = capy_tval_dict_len(v);
		for (i = 0; i < n; i++) {
			struct capy_tval *e;

			s = capy_tval_dict_entry(v, i, &len, &e);
			if (i)
				capy_buf_putc(b, ',');
			capy_buf_json_str(b, s, len);
			capy_buf_putc(b, ':');
			wjson_tval(b, e);
		}
		capy_buf_putc(b, '}');
		break;
	case CAPY_TVAL_INT:
		if (!capy_tval_intv(v, &iv)) {
			capy_buf_printf(b, "%" PRId64, iv);
			break;
		}
		/* a big integer, whose digits capy_tval_to_json has */
		__attribute__((fallthrough));
	case CAPY_TVAL_FLOAT:
		if (capy_tval_to_json(v, &txt, &len, NULL) < 0) {
			b->oom = true;
			break;
		}
		capy_buf_add(b, txt, len);
		free(txt);
		break;
	default:
		capy_buf_puts(b, "null");
	}
}

/* The bytes an invalid sequence at s spans: a lead byte and the continuation bytes that
 * could still have followed it ("maximal subpart": one U+FFFD for a cut character, as
 * Python's and Rust's lossy decoders do), else the one byte. */
static size_t bad_run(const unsigned char *s, size_t n)
{
	unsigned char c = s[0], lo = 0x80, hi = 0xbf;
	size_t need, k;

	if (c >= 0xc2 && c <= 0xdf)
		need = 1;
	else if (c >= 0xe0 && c <= 0xef)
		need = 2;
	else if (c >= 0xf0 && c <= 0xf4)
		need = 3;
	else
		return 1;
	if (c == 0xe0)
		lo = 0xa0;
	else if (c == 0xed)
		hi = 0x9f;
	else if (c == 0xf0)
		lo = 0x90;
	else if (c == 0xf4)
		hi = 0x8f;
	for (k = 1; k <= need && k < n; k++) {
		if (s[k] < lo || s[k] > hi)
			break;
		lo = 0x80;
		hi = 0xbf;
	}
	return k;
}

void wjson_lossy(struct capy_buf *b, const char *s, size_t n)
{
	static const char fffd[] = "\xef\xbf\xbd";
	struct capy_buf t = { 0 };
	size_t i = 0;

	while (i < n) {
		utf8proc_int32_t cp;
		utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i,
						      (utf8proc_ssize_t)(n - i), &cp);

		if (k <= 0) {
			capy_buf_add(&t, fffd, 3);
			i += bad_run((const unsigned char *)s + i, n - i);
		} else {
			capy_buf_add(&t, s + i, (size_t)k);
			i += (size_t)k;
		}
	}
	if (t.oom)
		b->oom = true;
	capy_buf_json_str(b, t.data ? t.data : "", t.len);
	capy_buf_release(&t);
}

int64_t wlossy_length(const char *s, size_t n)
{
	int64_t count = 0;
	size_t i = 0;

	while (i < n) {
		utf8proc_int32_t cp;
		utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i,
						      (utf8proc_ssize_t)(n - i), &cp);

		i += k > 0 ? (size_t)k : bad_run((const unsigned char *)s + i, n - i);
		count++;
	}
	return count;
}

void wjson_logprob(struct capy_buf *b, double lp)
{
	if (!isfinite(lp))
		lp = -9999.0;
	capy_buf_printf(b, "%.9g", lp);
}

static void bytes_list(struct capy_buf *b, const char *s, size_t n)
{
	size_t i;

	capy_buf_putc(b, '[');
	for (i = 0; i < n; i++)
		capy_buf_printf(b, i ? ",%u" : "%u", (unsigned char)s[i]);
	capy_buf_putc(b, ']');
}

void wjson_logprob_rec(struct capy_buf *b, const struct wlogprob *r, bool with_top)
{
	size_t i;

	capy_buf_puts(b, "{\"token\":");
	wjson_lossy(b, r->tok, r->len);
	capy_buf_puts(b, ",\"logprob\":");
	wjson_logprob(b, r->lp);
	capy_buf_puts(b, ",\"bytes\":");
	bytes_list(b, r->tok, r->len);
	if (with_top) {
		capy_buf_puts(b, ",\"top_logprobs\":[");
		for (i = 0; i < r->n_top; i++) {
			struct wlogprob t = { r->top[i].tok, r->top[i].len, r->top[i].lp, NULL, 0 };

			if (i)
				capy_buf_putc(b, ',');
			wjson_logprob_rec(b, &t, false);
		}
		capy_buf_putc(b, ']');
	}
	capy_buf_putc(b, '}');
}

void wjson_logprob_list(const struct capy_api_writer *w, struct capy_buf *b, size_t from,
			size_t to)
{
	size_t i;

	capy_buf_putc(b, '[');
	for (i = from; i < to && i < w->n_lp; i++) {
		if (i > from)
			capy_buf_putc(b, ',');
		wjson_logprob_rec(b, &w->lp[i], true);
	}
	capy_buf_putc(b, ']');
}

void wsse(struct capy_buf *b, const char *event, const struct capy_buf *data)
{
	if (event)
		capy_buf_printf(b, "event: %s\n", event);
	capy_buf_puts(b, "data: ");
	capy_buf_add(b, data->data ? data->data : "", data->len);
	capy_buf_puts(b, "\n\n");
	if (data->oom)
		b->oom = true;
}

/* --- parts -------------------------------------------------------------------------------- */

static struct wpart *part_new(struct capy_api_writer *w, enum wpart_kind kind)
{
	struct wpart *pt;

	if (w->n_parts == w->cap_parts) {
		size_t cap = w->cap_parts ? 2 * w->cap_parts : 8;
		struct wpart *np = realloc(w->parts, cap * sizeof(*np));

		if (!np)
			return NULL;
		w->parts = np;
		w->cap_parts = cap;
	}
	pt = &w->parts[w->n_parts];
	memset(pt, 0, sizeof(*pt));
	pt->kind = kind;
	pt->call = -1;
	pt->lp_from = pt->lp_to = w->lp_sent;
	w->open = (int)w->n_parts++;
	return pt;
}

void wpart_close(struct capy_api_writer *w, struct capy_buf *buf)
{
	struct wpart *pt;

	if (w->open < 0)
		return;
	pt = &w->parts[w->open];
	pt->closed = true;
	w->open = -1;
	wapi_of(w->api)->close(w, pt, buf);
}

struct wpart *wpart_open(struct capy_api_writer *w, enum wpart_kind kind, struct capy_buf *buf)
{
	struct wpart *pt;

	if (w->open >= 0 && w->parts[w->open].kind == kind && kind != WP_CALL)
		return &w->parts[w->open];
	wpart_close(w, buf);
	pt = part_new(w, kind);
	if (!pt)
		return NULL;
	if (kind == WP_REASONING)
		pt->nth = w->n_reasoning_items++;
	else if (kind == WP_TEXT)
		pt->nth = w->n_message_items++;
	return pt;
}

/* --- the public calls --------------------------------------------------------------------- */

static char *dup_str(const char *s, size_t n)
{
	char *d = malloc(n + 1);

	if (d) {
		if (n)
			memcpy(d, s, n);
		d[n] = 0;
	}
	return d;
}

int capy_api_writer_new(struct capy_api_writer **out, const struct capy_api_request *req,
			const struct capy_api_meta *meta, struct capy_err *err)
{
	struct capy_api_writer *w;
	const char *id = meta->id ? meta->id : "";
	size_t i;

	*out = NULL;
	if (!wapi_of(req->api))
		return capy_err_set(err, CAPY_EINVAL, "api writer: API %d writes no responses",
				    (int)req->api);
	if (strlen(id) > 64)
		return capy_err_set(err, CAPY_EINVAL, "api writer: id '%.64s...' is over 64 bytes", id);
	for (i = 0; id[i]; i++)
		if (!(id[i] == '_' || id[i] == '-' || (id[i] >= '0' && id[i] <= '9') ||
		      ((id[i] | 0x20) >= 'a' && (id[i] | 0x20) <= 'z')))
			return capy_err_set(err, CAPY_EINVAL,
					    "api writer: id '%s' may hold only letters, digits, '_' and '-'", id);
	w = calloc(1, sizeof(*w));
	if (!w)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	w->req = req;
	w->api = req->api;
	w->stream = req->stream;
	w->open = -1;
	w->created = meta->created;
	w->prompt_tokens = meta->prompt_tokens;
	w->cached_tokens = meta->cached_tokens;
	w->id = dup_str(id, strlen(id));
	w->model = dup_str(meta->model ? meta->model : "", meta->model ? strlen(meta->model) : 0);
	if (meta->echo && req->echo) {
		w->echo = dup_str(meta->echo, meta->echo_len);
		w->echo_len = meta->echo_len;
	}
	if (!w->id || !w->model || (meta->echo && req->echo && !w->echo)) {
		capy_api_writer_free(w);
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	}
	*out = w;
	return 0;
}

static int finish_buf(struct capy_api_writer *w, struct capy_buf *buf)
{
	if (buf->oom || w->tmp.oom) {
		w->tmp.oom = false;
		return CAPY_ENOMEM;
	}
	return 0;
}

int capy_api_write_begin(struct capy_api_writer *w, struct capy_buf *buf)
{
	if (w->begun)
		return CAPY_EINVAL;
	w->begun = true;
	wapi_of(w->api)->begin(w, buf);
	return finish_buf(w, buf);
}

int capy_api_write_event(struct capy_api_writer *w, const struct capy_outparse_event *ev,
			 struct capy_buf *buf)
{
	const struct wapi *a = wapi_of(w->api);
	enum wpart_kind kind;
	struct wpart *pt;
	bool fresh;

	if (!w->begun || w->ended)
		return CAPY_EINVAL;
	switch (ev->type) {
	case CAPY_OUTPARSE_REASONING:
	case CAPY_OUTPARSE_CONTENT:
		if (!ev->len)
			return 0;
		kind = ev->type == CAPY_OUTPARSE_REASONING ? WP_REASONING : WP_TEXT;
		fresh = w->open < 0 || w->parts[w->open].kind != kind;
		pt = wpart_open(w, kind, buf);
		if (!pt)
			return CAPY_ENOMEM;
		if (fresh)
			a->open(w, pt, buf);
		break;
	case CAPY_OUTPARSE_CALL_START:
		pt = wpart_open(w, WP_CALL, buf);
		if (!pt)
			return CAPY_ENOMEM;
		pt->call = w->n_calls++;
		pt->name = dup_str(ev->name ? ev->name : "", ev->name ? strlen(ev->name) : 0);
		if (!pt->name)
			return CAPY_ENOMEM;
		if (w->api == CAPY_API_RESPONSES) {
			const struct capy_tval *m = tool_mapped(w->req, pt->name);

			pt->custom = str_eq(capy_tval_get(m, "type"), "custom");
			pt->ns = capy_tval_strv(capy_tval_get(m, "namespace"), NULL);
			pt->ns_name = capy_tval_strv(capy_tval_get(m, "name"), NULL);
		}
		capy_buf_puts(&pt->text, "");
		a->open(w, pt, buf);
		return finish_buf(w, buf);
	case CAPY_OUTPARSE_CALL_ARGS:
		if (w->open < 0 || w->parts[w->open].kind != WP_CALL)
			return CAPY_EINVAL;
		pt = &w->parts[w->open];
		if (!ev->len)
			return 0;
		break;
	case CAPY_OUTPARSE_CALL_END:
		if (w->open >= 0 && w->parts[w->open].kind == WP_CALL)
			wpart_close(w, buf);
		return finish_buf(w, buf);
	default:
		return CAPY_EINVAL;
	}
	capy_buf_add(&pt->text, ev->text, ev->len);
	a->delta(w, pt, ev->text, ev->len, buf);
	pt->lp_to = w->lp_sent = w->n_lp;
	if (pt->text.oom)
		return CAPY_ENOMEM;
	return finish_buf(w, buf);
}

int capy_api_write_logprobs(struct capy_api_writer *w, const struct capy_api_logprob *rec,
			    size_t n)
{
	size_t i, k;

	if (w->req->logprobs < 0 || w->api == CAPY_API_MESSAGES)
		return 0;
	if (w->ended)
		return CAPY_EINVAL;
	for (i = 0; i < n; i++) {
		struct wlogprob *r;
		size_t ntop = CAPY_MIN(rec[i].n_top, (size_t)w->req->logprobs);

		if (w->n_lp == w->cap_lp) {
			size_t cap = w->cap_lp ? 2 * w->cap_lp : 64;
			struct wlogprob *nl = realloc(w->lp, cap * sizeof(*nl));

			if (!nl)
				return CAPY_ENOMEM;
			w->lp = nl;
			w->cap_lp = cap;
		}
		r = &w->lp[w->n_lp];
		memset(r, 0, sizeof(*r));
		r->tok = dup_str(rec[i].token ? rec[i].token : "", rec[i].len);
		r->len = rec[i].len;
		r->lp = rec[i].logprob;
		r->top = ntop ? calloc(ntop, sizeof(*r->top)) : NULL;
		if (!r->tok || (ntop && !r->top)) {
			free(r->tok);
			free(r->top);
			return CAPY_ENOMEM;
		}
		w->n_lp++;
		for (k = 0; k < ntop; k++) {
			r->top[k].tok = dup_str(rec[i].top[k].token ? rec[i].top[k].token : "",
						rec[i].top[k].len);
			if (!r->top[k].tok)
				return CAPY_ENOMEM;
			r->top[k].len = rec[i].top[k].len;
			r->top[k].lp = rec[i].top[k].logprob;
			r->n_top = k + 1;
		}
	}
	return 0;
}

int capy_api_write_end(struct capy_api_writer *w, enum capy_api_finish finish,
		       const char *stop_string, const struct capy_api_usage *usage,
		       struct capy_buf *buf)
{
	struct capy_api_usage u = { 0 };

	if (!w->begun || w->ended)
		return CAPY_EINVAL;
	w->ended = true;
	if (usage)
		u = *usage;
	if (finish == CAPY_API_FINISH_LENGTH && w->open >= 0)
		w->parts[w->open].incomplete = true;
	wpart_close(w, buf);
	wapi_of(w->api)->end(w, finish, finish == CAPY_API_FINISH_STOP ? stop_string : NULL, &u,
			     buf);
	return finish_buf(w, buf);
}

int capy_api_write_error(struct capy_api_writer *w, const struct capy_api_error *aerr,
			 struct capy_buf *buf)
{
	if (w->ended)
		return CAPY_EINVAL;
	w->ended = true;
	if (!w->stream)
		capy_api_error_body(w->api, aerr, buf);
	else
		wapi_of(w->api)->error(w, aerr, buf);
	return finish_buf(w, buf);
}

void capy_api_writer_free(struct capy_api_writer *w)
{
	size_t i, k;

	if (!w)
		return;
	for (i = 0; i < w->n_parts; i++) {
		capy_buf_release(&w->parts[i].text);
		free(w->parts[i].name);
	}
	for (i = 0; i < w->n_lp; i++) {
		for (k = 0; k < w->lp[i].n_top; k++)
			free(w->lp[i].top[k].tok);
		free(w->lp[i].top);
		free(w->lp[i].tok);
	}
	free(w->lp);
	free(w->parts);
	free(w->id);
	free(w->model);
	free(w->echo);
	capy_buf_release(&w->tmp);
	free(w);
}

void wpart_text(const struct wpart *pt, bool full, struct capy_buf *d)
{
	if (full)
		capy_buf_json_str(d, pt->text.data, pt->text.len);
	else
		capy_buf_puts(d, "\"\"");
}
