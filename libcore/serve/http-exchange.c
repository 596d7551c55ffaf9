/* http-exchange.c - one request and its answer: accessors, whole and streamed answers, the
 * cancel callback and the request's log line. */
#include "http-impl.h"

#include <time.h>

struct capy_http_exchange *http_exchange_new(struct capy_http *h, struct http_conn *c,
					     const char *uri)
{
	struct capy_http_exchange *x = calloc(1, sizeof(*x));
	const char *q;
	struct timespec ts;
	struct tm tm;
	char day[24];

	if (!x)
		return NULL;
	if (!uri)
		uri = "";
	q = strchr(uri, '?');
	x->log_path = q ? strndup(uri, (size_t)(q - uri)) : strdup(uri);
	x->query = strdup(q ? q + 1 : "");
	if (!x->log_path || !x->query) {
		free(x->log_path);
		free(x->query);
		free(x);
		return NULL;
	}
	x->h = h;
	x->st.x = x;
	atomic_init(&x->refs, 1);
	atomic_init(&x->gone, false);
	pthread_mutex_init(&x->mu, NULL);
	pthread_cond_init(&x->cv, NULL);
	atomic_fetch_add(&h->refs, 1);
	snprintf(x->id, sizeof(x->id), "req_%08" PRIx32 "%012" PRIx64, h->id_salt,
		 (uint64_t)atomic_fetch_add(&h->id_next, 1) + 1);
	snprintf(x->remote, sizeof(x->remote), "%s", c ? c->remote : "?");
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(day, sizeof(day), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(x->ts, sizeof(x->ts), "%s.%03dZ", day, (int)(ts.tv_nsec / 1000000) % 1000);
	x->t_start_ms = http_now_ms();
	return x;
}

void http_exchange_ref(struct capy_http_exchange *x)
{
	atomic_fetch_add(&x->refs, 1);
}

static void write_log(struct capy_http_exchange *x)
{
	struct capy_http *h = x->h;
	struct capy_buf b = { 0 };
	int64_t end = x->t_end_ms ? x->t_end_ms : http_now_ms();

	capy_buf_puts(&b, "{\"ts\":\"");
	capy_buf_puts(&b, x->ts);
	capy_buf_puts(&b, "\",\"id\":\"");
	capy_buf_puts(&b, x->id);
	capy_buf_puts(&b, "\",\"method\":");
	if (x->method)
		capy_buf_json_str(&b, x->method, strlen(x->method));
	else
		capy_buf_puts(&b, "null");
	capy_buf_puts(&b, ",\"path\":");
	capy_buf_json_str(&b, x->log_path, strlen(x->log_path));
	capy_buf_printf(&b, ",\"status\":%d,\"bytes\":%" PRIu64 ",\"ms\":%" PRId64, x->status,
			x->bytes, end - x->t_start_ms);
	capy_buf_puts(&b, ",\"remote\":");
	capy_buf_json_str(&b, x->remote, strlen(x->remote));
	capy_buf_printf(&b, ",\"aborted\":%s", atomic_load(&x->gone) ? "true" : "false");
	if (x->fate) {
		capy_buf_puts(&b, ",\"error\":");
		capy_buf_json_str(&b, x->fate, strlen(x->fate));
	}
	if (x->logx.len)
		capy_buf_add(&b, x->logx.data, x->logx.len);
	capy_buf_putc(&b, '}');
	if (!b.oom)
		h->log(h->log_arg, b.data, b.len);
	capy_buf_release(&b);
}

void http_exchange_unref(struct capy_http_exchange *x)
{
	struct capy_http *h = x->h;

	if (atomic_fetch_sub(&x->refs, 1) != 1)
		return;
	write_log(x);
	for (size_t i = 0; i < x->n_hdrs; i++) {
		free(x->hdrs[i].name);
		free(x->hdrs[i].value);
	}
	free(x->hdrs);
	free(x->resp);
	free(x->ctype);
	free(x->method);
	free(x->path);
	free(x->log_path);
	free(x->query);
	capy_buf_release(&x->body);
	capy_buf_release(&x->out);
	capy_buf_release(&x->logx);
	pthread_cond_destroy(&x->cv);
	pthread_mutex_destroy(&x->mu);
	free(x);
	http_server_unref(h);
}

/* --- the request ------------------------------------------------------------------------ */

const char *capy_http_method(const struct capy_http_exchange *x)
{
	return x->method ? x->method : "";
}

const char *capy_http_path(const struct capy_http_exchange *x)
{
	return x->path ? x->path : x->log_path;
}

const char *capy_http_query(const struct capy_http_exchange *x)
{
	return x->query;
}

const char *capy_http_header(const struct capy_http_exchange *x, const char *name)
{
	if (!x->mc || !name)
		return NULL;
	return MHD_lookup_connection_value(x->mc, MHD_HEADER_KIND, name);
}

const char *capy_http_body(const struct capy_http_exchange *x, size_t *len)
{
	if (len)
		*len = x->body.len;
	return x->body.data ? x->body.data : "";
}

const char *capy_http_remote(const struct capy_http_exchange *x)
{
	return x->remote;
}

const char *capy_http_request_id(const struct capy_http_exchange *x)
{
	return x->id;
}

/* --- answering --------------------------------------------------------------------------- */

static bool is_tchar(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

int capy_http_add_header(struct capy_http_exchange *x, const char *name, const char *value)
{
	struct http_header *hdrs;
	char *n, *v;

	if (!name || !value || !name[0])
		return CAPY_EINVAL;
	for (const char *p = name; *p; p++)
		if (!is_tchar((unsigned char)*p))
			return CAPY_EINVAL;
	if (strpbrk(value, "\r\n"))
		return CAPY_EINVAL;
	n = strdup(name);
	v = strdup(value);
	pthread_mutex_lock(&x->mu);
	hdrs = n && v && x->ans == HTTP_ANS_NONE
		       ? realloc(x->hdrs, (x->n_hdrs + 1) * sizeof(*x->hdrs))
		       : NULL;
	if (!hdrs) {
		int rc = x->ans == HTTP_ANS_NONE ? CAPY_ENOMEM : CAPY_EINVAL;
		pthread_mutex_unlock(&x->mu);
		free(n);
		free(v);
		return rc;
	}
	x->hdrs = hdrs;
	x->hdrs[x->n_hdrs].name = n;
	x->hdrs[x->n_hdrs].value = v;
	x->n_hdrs++;
	pthread_mutex_unlock(&x->mu);
	return 0;
}

int capy_http_respond(struct capy_http_exchange *x, int status, const char *content_type,
		      const void *body, size_t len)
{
	char *copy, *ctype;

	if (status < 200 || status > 599 || (len && !body))
		return CAPY_EINVAL;
	copy = malloc(len ? len : 1);
	ctype = strdup(content_type ? content_type : "application/json");
	if (!copy || !ctype) {
		free(copy);
		free(ctype);
		return CAPY_ENOMEM;
	}
	if (len)
		memcpy(copy, body, len);
	pthread_mutex_lock(&x->mu);
	if (x->ans != HTTP_ANS_NONE) {
		pthread_mutex_unlock(&x->mu);
		free(copy);
		free(ctype);
		return CAPY_EINVAL;
	}
	x->ans = HTTP_ANS_PLAIN;
	x->status = status;
	x->ctype = ctype;
	x->resp = copy;
	x->resp_len = len;
	pthread_mutex_unlock(&x->mu);
	http_disarm_cancel(x);
	return 0;
}

int capy_http_respond_error(struct capy_http_exchange *x, int status, const char *message)
{
	struct capy_buf b = { 0 };
	int rc;

	x->h->error_body(x->h->error_arg, capy_http_path(x), status, message, &b);
	rc = b.oom ? CAPY_ENOMEM : capy_http_respond(x, status, "application/json", b.data, b.len);
	capy_buf_release(&b);
	return rc;
}

/* --- streams ----------------------------------------------------------------------------- */

struct capy_http_stream *capy_http_stream_open(struct capy_http_exchange *x, int status,
					       const char *content_type)
{
	char *ctype;

	if (status < 200 || status > 599)
		return NULL;
	if (!(ctype = strdup(content_type ? content_type : "text/event-stream")))
		return NULL;
	pthread_mutex_lock(&x->mu);
	if (x->ans != HTTP_ANS_NONE) {
		pthread_mutex_unlock(&x->mu);
		free(ctype);
		return NULL;
	}
	x->ans = HTTP_ANS_STREAM;
	x->status = status;
	x->ctype = ctype;
	x->last_drain_ms = http_now_ms();
	http_exchange_ref(x); /* the writer's, until capy_http_stream_close */
	pthread_mutex_unlock(&x->mu);
	return &x->st;
}

int capy_http_stream_write(struct capy_http_stream *st, const void *p, size_t n)
{
	struct capy_http_exchange *x = st->x;
	size_t pending;

	pthread_mutex_lock(&x->mu);
	if (atomic_load(&x->gone) || x->closed) {
		pthread_mutex_unlock(&x->mu);
		return CAPY_ECANCELED;
	}
	pending = x->out.len - x->out_off;
	if (n > x->h->max_stream_buffer || pending > x->h->max_stream_buffer - n) {
		/* the client takes nothing: drop it (the watcher shuts the socket and cancels) */
		atomic_store(&x->gone, true);
		x->fate = "client too slow";
		x->drop = true;
		pthread_cond_broadcast(&x->cv);
		pthread_mutex_unlock(&x->mu);
		return CAPY_ECANCELED;
	}
	if (x->out_off && (x->out_off > (64u << 10) || !pending)) {
		memmove(x->out.data, x->out.data + x->out_off, pending);
		x->out.len = pending;
		x->out_off = 0;
	}
	if (!pending)
		x->last_drain_ms = http_now_ms(); /* the stall clock starts with the first byte */
	capy_buf_add(&x->out, p, n);
	if (x->out.oom) {
		atomic_store(&x->gone, true);
		x->fate = "out of memory";
		x->drop = true;
		pthread_cond_broadcast(&x->cv);
		pthread_mutex_unlock(&x->mu);
		return CAPY_ENOMEM;
	}
	pthread_cond_broadcast(&x->cv);
	pthread_mutex_unlock(&x->mu);
	return 0;
}

bool capy_http_stream_gone(const struct capy_http_stream *st)
{
	return atomic_load(&st->x->gone);
}

struct capy_http_exchange *capy_http_stream_exchange(struct capy_http_stream *st)
{
	return st->x;
}

void capy_http_stream_close(struct capy_http_stream *st)
{
	struct capy_http_exchange *x = st->x;

	http_disarm_cancel(x);
	pthread_mutex_lock(&x->mu);
	x->closed = true;
	pthread_cond_broadcast(&x->cv);
	pthread_mutex_unlock(&x->mu);
	http_exchange_unref(x);
}

/* libmicrohttpd's content callback, on the connection thread: wait for bytes, the end, or the
 * client's departure. Each call hands on what is there, which becomes one chunk at once. */
ssize_t http_stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct capy_http_exchange *x = cls;
	ssize_t rc;

	(void)pos;
	pthread_mutex_lock(&x->mu);
	for (;;) {
		size_t pending = x->out.len - x->out_off;

		if (atomic_load(&x->gone)) {
			rc = MHD_CONTENT_READER_END_WITH_ERROR;
			break;
		}
		if (pending) {
			size_t n = CAPY_MIN(pending, max);
			memcpy(buf, x->out.data + x->out_off, n);
			x->out_off += n;
			if (x->out_off == x->out.len) {
				capy_buf_reset(&x->out);
				x->out_off = 0;
			}
			x->bytes += n;
			x->last_drain_ms = http_now_ms();
			rc = (ssize_t)n;
			break;
		}
		if (x->closed) {
			x->ended = true;
			x->last_drain_ms = http_now_ms();
			rc = MHD_CONTENT_READER_END_OF_STREAM;
			break;
		}
		pthread_cond_wait(&x->cv, &x->mu);
	}
	pthread_mutex_unlock(&x->mu);
	return rc;
}

void http_stream_read_done(void *cls)
{
	http_exchange_unref(cls);
}

/* --- fate and cancellation ---------------------------------------------------------------- */

bool capy_http_client_gone(const struct capy_http_exchange *x)
{
	return atomic_load(&x->gone);
}

bool http_exchange_gone(struct capy_http_exchange *x, const char *fate)
{
	bool was;

	pthread_mutex_lock(&x->mu);
	was = atomic_load(&x->gone);
	if (!was) {
		atomic_store(&x->gone, true);
		x->fate = fate;
	}
	pthread_cond_broadcast(&x->cv);
	pthread_mutex_unlock(&x->mu);
	return !was;
}

/* Whether the answer is complete, so that nothing is left to cancel (mu held). */
static bool answered(const struct capy_http_exchange *x)
{
	return x->ans == HTTP_ANS_PLAIN || (x->ans == HTTP_ANS_STREAM && x->closed);
}

void capy_http_on_cancel(struct capy_http_exchange *x, capy_http_cancel_fn fn, void *arg)
{
	bool now;

	pthread_mutex_lock(&x->mu);
	if (x->fired || answered(x)) {
		pthread_mutex_unlock(&x->mu);
		return;
	}
	x->cancel_fn = fn;
	x->cancel_arg = arg;
	x->armed = fn != NULL;
	now = x->armed && atomic_load(&x->gone);
	pthread_mutex_unlock(&x->mu);
	if (now)
		http_fire_cancel(x);
}

void http_fire_cancel(struct capy_http_exchange *x)
{
	capy_http_cancel_fn fn;
	void *arg;

	pthread_mutex_lock(&x->mu);
	if (!x->armed || x->fired || !x->cancel_fn) {
		pthread_mutex_unlock(&x->mu);
		return;
	}
	x->fired = true;
	x->firing = true;
	x->firing_thread = pthread_self();
	fn = x->cancel_fn;
	arg = x->cancel_arg;
	pthread_mutex_unlock(&x->mu);
	fn(arg);
	pthread_mutex_lock(&x->mu);
	x->firing = false;
	pthread_cond_broadcast(&x->cv);
	pthread_mutex_unlock(&x->mu);
}

void http_disarm_cancel(struct capy_http_exchange *x)
{
	pthread_mutex_lock(&x->mu);
	x->armed = false;
	while (x->firing && !pthread_equal(x->firing_thread, pthread_self()))
		pthread_cond_wait(&x->cv, &x->mu);
	pthread_mutex_unlock(&x->mu);
}

int capy_http_log_field(struct capy_http_exchange *x, const char *key, const char *raw_json)
{
	int rc = 0;

	if (!key || !raw_json || !raw_json[0])
		return CAPY_EINVAL;
	pthread_mutex_lock(&x->mu);
	capy_buf_putc(&x->logx, ',');
	capy_buf_json_str(&x->logx, key, strlen(key));
	capy_buf_putc(&x->logx, ':');
	capy_buf_puts(&x->logx, raw_json);
	if (x->logx.oom) {
		capy_buf_release(&x->logx);
		rc = CAPY_ENOMEM;
	}
	pthread_mutex_unlock(&x->mu);
	return rc;
}
