/* http.c - the HTTP server: start, quiesce and stop; libmicrohttpd's callbacks; routing, API
 * keys and the answers this layer gives itself (401, 404, 405, 413, 431, 500, 503).
 *
 * A request goes through libmicrohttpd's callbacks on its connection's thread:
 *   on_uri        the request line is in: the exchange is created, the connection is
 *                 RECEIVING (the request timeout runs from its first byte, or from here);
 *   on_access     first call (headers in): limits, route, key, method, Content-Length, any of
 *                 which may answer at once; then body pieces, kept up to max_body; the final
 *                 call runs the route's handler (SERVING) and queues its answer;
 *   on_completed  the answer went out or the connection failed: the exchange is released by
 *                 libmicrohttpd's side, and cancelled if it had not finished.
 * on_connection tracks connections (the watcher's list, the connection cap).
 */
#include "http-impl.h"

#include "../util/log.h"

#include <fcntl.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

int64_t http_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void http_wake(struct capy_http *h)
{
	uint64_t one = 1;

	if (h->wake_fd >= 0 && write(h->wake_fd, &one, sizeof(one)) < 0)
		(void)0; /* full or closed: the watcher wakes on its own tick */
}

void http_set_phase(struct capy_http *h, struct http_conn *c, enum http_phase p, int64_t now)
{
	c->phase = p;
	c->seq++;
	c->since_ms = now;
	c->hup = false;
	c->deadline_ms = p == HTTP_RECEIVING ? now + h->request_timeout_ms
			 : p == HTTP_SENDING ? now + h->write_timeout_ms
					     : 0;
}

static void free_conns(struct http_conn *c)
{
	while (c) {
		struct http_conn *next = c->next;
		free(c);
		c = next;
	}
}

static void server_free(struct capy_http *h)
{
	for (size_t i = 0; i < h->n_routes; i++) {
		free((char *)h->routes[i].path);
		free((char *)h->routes[i].methods);
	}
	free(h->routes);
	free(h->keys);
	free(h->host);
	free_conns(h->conns);
	free_conns(h->dead);
	pthread_cond_destroy(&h->cv);
	pthread_mutex_destroy(&h->lock);
	free(h);
}

void http_server_unref(struct capy_http *h)
{
	if (atomic_fetch_sub(&h->refs, 1) == 1)
		server_free(h);
}

/* --- defaults ----------------------------------------------------------------------------- */

static void default_log(void *arg, const char *line, size_t len)
{
	(void)arg;
	(void)len;
	capy_log_info("%s", line);
}

static const char *openai_type(int status)
{
	switch (status) {
	case 401: return "authentication_error";
	case 403: return "permission_error";
	case 404: return "not_found_error";
	case 429: return "rate_limit_error";
	}
	return status >= 500 ? "server_error" : "invalid_request_error";
}

void capy_http_error_openai(void *arg, const char *path, int status, const char *message,
			    struct capy_buf *out)
{
	(void)arg;
	(void)path;
	capy_buf_puts(out, "{\"error\":{\"message\":");
	capy_buf_json_str(out, message, strlen(message));
	capy_buf_printf(out, ",\"type\":\"%s\",\"param\":null,\"code\":%s}}", openai_type(status),
			status == 401 ? "\"invalid_api_key\"" : "null");
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	char msg[512];
	size_t n;

	(void)cls;
	if (CAPY_LOG_DEBUG > capy_log_level_now)
		return;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	n = strlen(msg);
	while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
		msg[--n] = 0;
	capy_log_debug("http: libmicrohttpd: %s", msg);
}

/* --- routes -------------------------------------------------------------------------------- */

static bool path_matches(const char *pattern, const char *path)
{
	size_t n = strlen(pattern);

	if (n && pattern[n - 1] == '*')
		return !strncmp(pattern, path, n - 1);
	return !strcmp(pattern, path);
}

static bool method_listed(const char *methods, const char *m)
{
	size_t ml = strlen(m);

	for (const char *p = methods;;) {
		const char *e = strchr(p, ',');
		size_t n = e ? (size_t)(e - p) : strlen(p);
		if (n == ml && !memcmp(p, m, n))
			return true;
		if (!e)
			return false;
		p = e + 1;
	}
}

static bool is_token_char(char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '_';
}

/* "GET, HEAD" -> "GET,HEAD"; NULL if malformed or out of memory */
static char *normalize_methods(const char *s)
{
	char *out = malloc(strlen(s) + 1), *o = out;
	bool need = true; /* a method is due */

	if (!out)
		return NULL;
	for (; *s; s++) {
		if (*s == ' ')
			continue;
		if (*s == ',') {
			if (need)
				break;
			need = true;
		} else if (is_token_char(*s)) {
			need = false;
		} else {
			break;
		}
		*o++ = *s;
	}
	*o = 0;
	if (*s || need) {
		free(out);
		return NULL;
	}
	return out;
}

/* --- answers -------------------------------------------------------------------------------- */

static bool has_header(const struct capy_http_exchange *x, const char *name)
{
	for (size_t i = 0; i < x->n_hdrs; i++)
		if (!strcasecmp(x->hdrs[i].name, name))
			return true;
	return false;
}

/* Content-Type, the request id, the handler's headers, and whether the connection stays. */
static bool add_headers(struct capy_http *h, struct capy_http_exchange *x, struct MHD_Response *r,
			const char *ctype, bool close)
{
	bool ok = true;
	char ka[32];

	if (!has_header(x, "Content-Type"))
		ok &= MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype) == MHD_YES;
	ok &= MHD_add_response_header(r, "x-request-id", x->id) == MHD_YES;
	for (size_t i = 0; i < x->n_hdrs; i++)
		ok &= MHD_add_response_header(r, x->hdrs[i].name, x->hdrs[i].value) == MHD_YES;
	if (close || atomic_load(&h->quiesced) || (x->conn && x->conn->over_limit)) {
		ok &= MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close") == MHD_YES;
	} else {
		/* clients (undici, httpx) then stop reusing an idle connection before we drop it */
		snprintf(ka, sizeof(ka), "timeout=%" PRId64, h->idle_timeout_ms / 1000);
		ok &= MHD_add_response_header(r, "Keep-Alive", ka) == MHD_YES;
	}
	return ok;
}

static enum MHD_Result queue(struct capy_http *h, struct capy_http_exchange *x,
			     struct MHD_Response *r, int status, bool whole)
{
	enum MHD_Result rc = MHD_queue_response(x->mc, (unsigned)status, r);

	MHD_destroy_response(r);
	if (whole && x->conn) {
		pthread_mutex_lock(&h->lock);
		if (x->conn)
			http_set_phase(h, x->conn, HTTP_SENDING, http_now_ms());
		pthread_mutex_unlock(&h->lock);
	}
	return rc;
}

/* An answer of this layer's own: an error body in the route's API shape. */
static enum MHD_Result refuse(struct capy_http *h, struct capy_http_exchange *x, int status,
			      const char *msg, const char *hname, const char *hvalue, bool close)
{
	struct capy_buf b = { 0 };
	struct MHD_Response *r;
	char *body;
	size_t len;

	h->error_body(h->error_arg, capy_http_path(x), status, msg, &b);
	if (b.oom || !b.data) {
		capy_buf_release(&b);
		return MHD_NO;
	}
	body = capy_buf_detach(&b, &len);
	if (!(r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE))) {
		free(body);
		return MHD_NO;
	}
	if (!add_headers(h, x, r, "application/json", close) ||
	    (hname && MHD_add_response_header(r, hname, hvalue) != MHD_YES)) {
		MHD_destroy_response(r);
		return MHD_NO;
	}
	pthread_mutex_lock(&x->mu);
	x->status = status;
	x->bytes = len;
	pthread_mutex_unlock(&x->mu);
	return queue(h, x, r, status, true);
}

static enum MHD_Result send_plain(struct capy_http *h, struct capy_http_exchange *x)
{
	struct MHD_Response *r;

	pthread_mutex_lock(&x->mu);
	r = MHD_create_response_from_buffer(x->resp_len, x->resp, MHD_RESPMEM_MUST_FREE);
	if (r) {
		x->resp = NULL; /* libmicrohttpd frees it */
		x->bytes = x->resp_len;
	}
	pthread_mutex_unlock(&x->mu);
	if (!r || !add_headers(h, x, r, x->ctype, false)) {
		if (r)
			MHD_destroy_response(r);
		http_exchange_gone(x, "out of memory");
		return MHD_NO;
	}
	return queue(h, x, r, x->status, true);
}

static enum MHD_Result send_stream(struct capy_http *h, struct capy_http_exchange *x)
{
	struct MHD_Response *r;
	bool ok;

	http_exchange_ref(x); /* the response's, until libmicrohttpd frees it */
	r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 << 10, http_stream_read, x,
					      http_stream_read_done);
	if (!r) {
		http_exchange_unref(x);
		http_exchange_gone(x, "out of memory");
		http_fire_cancel(x);
		return MHD_NO;
	}
	ok = add_headers(h, x, r, x->ctype, false);
	if (!has_header(x, "Cache-Control"))
		ok &= MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache") == MHD_YES;
	ok &= MHD_add_response_header(r, "X-Accel-Buffering", "no") == MHD_YES;
	if (!ok) {
		MHD_destroy_response(r);
		http_exchange_gone(x, "out of memory");
		http_fire_cancel(x);
		return MHD_NO;
	}
	pthread_mutex_lock(&x->mu);
	x->queued = true;
	x->last_drain_ms = http_now_ms(); /* the stall clock starts now */
	pthread_mutex_unlock(&x->mu);
	return queue(h, x, r, x->status, false);
}

/* --- libmicrohttpd's callbacks ------------------------------------------------------------- */

static struct http_conn *conn_of(struct MHD_Connection *mc)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

	return ci ? ci->socket_context : NULL;
}

static void *on_uri(void *cls, const char *uri, struct MHD_Connection *mc)
{
	struct capy_http *h = cls;
	struct http_conn *c = conn_of(mc);
	struct capy_http_exchange *x = http_exchange_new(h, c, uri);

	if (!x)
		return NULL;
	x->mc = mc;
	pthread_mutex_lock(&h->lock);
	h->n_active++;
	if (c) {
		c->x = x;
		x->conn = c;
		if (c->phase == HTTP_IDLE) /* else the watcher saw the first byte: keep its clock */
			http_set_phase(h, c, HTTP_RECEIVING, x->t_start_ms);
	}
	pthread_mutex_unlock(&h->lock);
	http_wake(h);
	return x;
}

static enum MHD_Result first_call(struct capy_http *h, struct capy_http_exchange *x,
				  const char *url, const char *method)
{
	const struct capy_http_route *route = NULL, *path_route = NULL;
	const union MHD_ConnectionInfo *hs;
	const char *cl, *te;
	bool body_expected;
	char msg[320];

	x->started = true;
	x->method = strdup(method);
	x->path = strdup(url ? url : "");
	if (!x->method || !x->path)
		return MHD_NO;
	cl = MHD_lookup_connection_value(x->mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
	te = MHD_lookup_connection_value(x->mc, MHD_HEADER_KIND,
					 MHD_HTTP_HEADER_TRANSFER_ENCODING);
	body_expected = te || (cl && strcmp(cl, "0"));

	if (x->conn && x->conn->over_limit)
		return refuse(h, x, 503, "too many connections", NULL, NULL, true);
	if (atomic_load(&h->draining))
		return refuse(h, x, 503, "the server is shutting down", NULL, NULL, true);
	hs = MHD_get_connection_info(x->mc, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
	if (hs && hs->header_size > h->max_header) {
		snprintf(msg, sizeof(msg), "request headers too large (%zu bytes, limit %zu)",
			 hs->header_size, h->max_header);
		return refuse(h, x, 431, msg, NULL, NULL, true);
	}

	for (size_t i = 0; i < h->n_routes && !route; i++) {
		if (!path_matches(h->routes[i].path, x->path))
			continue;
		if (!path_route)
			path_route = &h->routes[i];
		if (method_listed(h->routes[i].methods, x->method))
			route = &h->routes[i];
	}
	if (!path_route) {
		snprintf(msg, sizeof(msg), "unknown path '%.200s'", x->path);
		return refuse(h, x, 404, msg, NULL, NULL, body_expected);
	}
	if (!(route ? route : path_route)->open && h->n_keys) {
		const char *auth = MHD_lookup_connection_value(x->mc, MHD_HEADER_KIND,
							       MHD_HTTP_HEADER_AUTHORIZATION);
		const char *key = MHD_lookup_connection_value(x->mc, MHD_HEADER_KIND, "x-api-key");
		if (!http_auth_check(h, auth, key))
			return refuse(h, x, 401,
				      auth || key ? "invalid API key"
						  : "missing API key (send 'Authorization: Bearer "
						    "<key>' or 'x-api-key: <key>')",
				      MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer", body_expected);
	}
	if (!route) {
		struct capy_buf allow = { 0 };
		enum MHD_Result rc;

		for (size_t i = 0; i < h->n_routes; i++) {
			if (!path_matches(h->routes[i].path, x->path))
				continue;
			if (allow.len)
				capy_buf_puts(&allow, ", ");
			for (const char *p = h->routes[i].methods; *p; p++)
				if (*p == ',')
					capy_buf_puts(&allow, ", ");
				else
					capy_buf_putc(&allow, *p);
		}
		snprintf(msg, sizeof(msg), "method '%.32s' is not allowed for '%.200s'", x->method,
			 x->path);
		rc = allow.oom ? MHD_NO
			       : refuse(h, x, 405, msg, MHD_HTTP_HEADER_ALLOW, allow.data,
					body_expected);
		capy_buf_release(&allow);
		return rc;
	}
	x->route = route;
	if (cl) {
		char *end;
		unsigned long long n;

		errno = 0;
		n = strtoull(cl, &end, 10);
		if (!errno && end != cl && n > h->max_body) {
			snprintf(msg, sizeof(msg),
				 "request body too large (%llu bytes, limit %" PRIu64 ")", n,
				 h->max_body);
			return refuse(h, x, 413, msg, NULL, NULL, true);
		}
	}
	return MHD_YES;
}

static enum MHD_Result final_call(struct capy_http *h, struct capy_http_exchange *x)
{
	enum http_answer ans;
	char msg[160];

	if (atomic_load(&x->gone))
		return MHD_NO; /* cancelled while it arrived (stop): no handler, close */
	if (x->body_over) {
		snprintf(msg, sizeof(msg), "request body too large (limit %" PRIu64 " bytes)",
			 h->max_body);
		capy_buf_release(&x->body);
		return refuse(h, x, 413, msg, NULL, NULL, false);
	}
	if (x->body.oom) {
		capy_buf_release(&x->body);
		return refuse(h, x, 503, "out of memory reading the request body", NULL, NULL,
			      false);
	}
	pthread_mutex_lock(&h->lock);
	if (x->conn)
		http_set_phase(h, x->conn, HTTP_SERVING, http_now_ms());
	pthread_mutex_unlock(&h->lock);
	http_wake(h);

	x->route->fn(x, x->route->arg);

	capy_buf_release(&x->body);
	pthread_mutex_lock(&x->mu);
	ans = x->ans;
	pthread_mutex_unlock(&x->mu);
	if (ans != HTTP_ANS_STREAM)
		http_disarm_cancel(x);
	if (ans == HTTP_ANS_PLAIN)
		return send_plain(h, x);
	if (ans == HTTP_ANS_STREAM)
		return send_stream(h, x);
	if (atomic_load(&x->gone))
		return MHD_NO; /* nobody to answer: close */
	capy_log_warn("http: %s %s: the handler gave no answer", x->method, x->path);
	return refuse(h, x, 500, "internal error: the request got no answer", NULL, NULL, false);
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *mc, const char *url,
				 const char *method, const char *version, const char *upload_data,
				 size_t *upload_data_size, void **con_cls)
{
	struct capy_http *h = cls;
	struct capy_http_exchange *x = *con_cls;

	(void)version;
	if (!x)
		return MHD_NO; /* on_uri ran out of memory */
	x->mc = mc;
	if (!x->started)
		return first_call(h, x, url, method);
	if (*upload_data_size) {
		if (!x->body_over && x->body.len + *upload_data_size > h->max_body) {
			x->body_over = true; /* read the rest and drop it, then answer 413 */
			capy_buf_release(&x->body);
		}
		if (!x->body_over)
			capy_buf_add(&x->body, upload_data, *upload_data_size);
		*upload_data_size = 0;
		return MHD_YES;
	}
	return final_call(h, x);
}

static const char *fate_of(enum MHD_RequestTerminationCode toe)
{
	switch (toe) {
	case MHD_REQUEST_TERMINATED_TIMEOUT_REACHED: return "timeout";
	case MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN: return "server stopping";
	default: return "client gone";
	}
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct capy_http *h = cls;
	struct capy_http_exchange *x = *con_cls;
	const union MHD_ConnectionInfo *ci;
	int64_t now = http_now_ms();

	if (!x)
		return;
	*con_cls = NULL;
	pthread_mutex_lock(&h->lock);
	if (x->conn) {
		x->conn->x = NULL;
		http_set_phase(h, x->conn, HTTP_IDLE, now);
		x->conn = NULL;
	}
	h->n_active--;
	pthread_cond_broadcast(&h->cv);
	pthread_mutex_unlock(&h->lock);
	http_wake(h);

	pthread_mutex_lock(&x->mu);
	x->t_end_ms = now;
	/* an answer libmicrohttpd gave itself (400 for a malformed header, 431): the request
	 * never reached us, and nobody aborted it */
	if (!x->status && (ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_HTTP_STATUS))) {
		x->status = (int)ci->http_status;
		if (!x->started && x->status >= 400) {
			x->fate = "refused by libmicrohttpd";
			toe = MHD_REQUEST_TERMINATED_COMPLETED_OK;
		}
	}
	x->mc = NULL;
	pthread_mutex_unlock(&x->mu);
	if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) {
		http_exchange_gone(x, fate_of(toe));
		http_fire_cancel(x);
	}
	http_exchange_unref(x);
}

static void on_connection(void *cls, struct MHD_Connection *mc, void **socket_context,
			  enum MHD_ConnectionNotificationCode toe)
{
	struct capy_http *h = cls;
	struct http_conn *c;

	if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *fd, *addr;

		*socket_context = NULL;
		if (!(c = calloc(1, sizeof(*c))))
			return;
		fd = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
		addr = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
		c->fd = fd ? fd->connect_fd : -1;
		http_format_addr(addr ? addr->client_addr : NULL, c->remote, sizeof(c->remote));
		pthread_mutex_lock(&h->lock);
		c->over_limit = h->n_normal >= h->max_connections;
		if (!c->over_limit)
			h->n_normal++;
		h->n_conns++;
		c->next = h->conns;
		if (h->conns)
			h->conns->prev = c;
		h->conns = c;
		http_set_phase(h, c, HTTP_IDLE, http_now_ms());
		pthread_mutex_unlock(&h->lock);
		http_wake(h);
		*socket_context = c;
		return;
	}
	if (!(c = *socket_context))
		return;
	*socket_context = NULL;
	pthread_mutex_lock(&h->lock);
	if (c->prev)
		c->prev->next = c->next;
	else
		h->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	if (!c->over_limit)
		h->n_normal--;
	h->n_conns--;
	if (c->x) {
		c->x->conn = NULL;
		c->x = NULL;
	}
	c->seq++; /* what the watcher polled is stale now */
	c->fd = -1;
	c->prev = NULL;
	if (h->watching) { /* it may hold a pointer across poll(): it frees the dead */
		c->next = h->dead;
		h->dead = c;
	} else {
		free(c);
	}
	pthread_mutex_unlock(&h->lock);
	http_wake(h);
}

/* --- start and stop -------------------------------------------------------------------------- */

static int copy_routes(struct capy_http *h, const struct capy_http_opts *o, struct capy_err *err)
{
	if (o->n_routes && !o->routes)
		return capy_err_set(err, CAPY_EINVAL, "n_routes is %zu but routes is NULL",
				    o->n_routes);
	if (!(h->routes = calloc(o->n_routes ? o->n_routes : 1, sizeof(*h->routes))))
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	for (size_t i = 0; i < o->n_routes; i++) {
		const struct capy_http_route *r = &o->routes[i];

		if (!r->path || r->path[0] != '/')
			return capy_err_set(err, CAPY_EINVAL, "route %zu: the path must start with "
					    "'/'", i + 1);
		if (!r->fn)
			return capy_err_set(err, CAPY_EINVAL, "route '%s': no handler", r->path);
		h->routes[i] = *r;
		h->routes[i].path = NULL;
		h->routes[i].methods = NULL;
		h->n_routes = i + 1;
		if (!(h->routes[i].path = strdup(r->path)))
			return capy_err_set(err, CAPY_ENOMEM, "out of memory");
		if (!r->methods || !(h->routes[i].methods = normalize_methods(r->methods)))
			return capy_err_set(err, CAPY_EINVAL, "route '%s': bad method list '%s'",
					    r->path, r->methods ? r->methods : "(null)");
	}
	return 0;
}

int capy_http_start(struct capy_http **out, const struct capy_http_opts *o, struct capy_err *err)
{
	struct capy_http *h;
	pthread_condattr_t ca;
	unsigned flags;
	int family = AF_INET, rc;
	size_t pool;

	*out = NULL;
	if (!(h = calloc(1, sizeof(*h))))
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	atomic_init(&h->refs, 1);
	atomic_init(&h->quiesced, false);
	atomic_init(&h->draining, false);
	atomic_init(&h->id_next, 0);
	pthread_mutex_init(&h->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&h->cv, &ca);
	pthread_condattr_destroy(&ca);
	h->wake_fd = h->listen_fd = -1;

	h->max_body = o->max_body ? o->max_body : 32u << 20;
	h->max_header = o->max_header ? o->max_header : 64u << 10;
	h->max_connections = o->max_connections ? o->max_connections : 64;
	h->request_timeout_ms = o->request_timeout_ms ? o->request_timeout_ms : 30000;
	h->idle_timeout_ms = o->idle_timeout_ms ? o->idle_timeout_ms : 75000;
	h->write_timeout_ms = o->write_timeout_ms ? o->write_timeout_ms : 60000;
	h->max_stream_buffer = o->max_stream_buffer ? o->max_stream_buffer : 16u << 20;
	h->error_body = o->error_body ? o->error_body : capy_http_error_openai;
	h->error_arg = o->error_arg;
	h->log = o->log ? o->log : default_log;
	h->log_arg = o->log_arg;
	if (getrandom(&h->id_salt, sizeof(h->id_salt), GRND_NONBLOCK) != sizeof(h->id_salt))
		h->id_salt = (uint32_t)http_now_ms() ^ (uint32_t)getpid() << 16;

	if (!(h->host = strdup(o->host && o->host[0] ? o->host : "127.0.0.1"))) {
		rc = capy_err_set(err, CAPY_ENOMEM, "out of memory");
		goto fail;
	}
	if ((rc = copy_routes(h, o, err)) < 0 ||
	    (rc = http_auth_init(h, o->api_keys, o->n_api_keys, err)) < 0 ||
	    (rc = http_listen(h->host, o->port, &h->listen_fd, &h->port, &family, err)) < 0 ||
	    (rc = http_watch_start(h, err)) < 0)
		goto fail;

	flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
		MHD_USE_ITC | MHD_USE_ERROR_LOG;
	if (family == AF_INET6)
		flags |= MHD_USE_IPv6;
	/* libmicrohttpd's per-connection memory holds the request headers (and the send buffer):
	 * room for max_header and more, so that our 431 in the API's shape answers first */
	pool = h->max_header + CAPY_MAX(h->max_header, (size_t)32 << 10);
	h->mhd = MHD_start_daemon(
		flags, 0, NULL, NULL, on_access, h,
		MHD_OPTION_LISTEN_SOCKET, (MHD_socket)h->listen_fd,
		MHD_OPTION_CONNECTION_LIMIT, (unsigned)(h->max_connections + HTTP_OVERFLOW_CONNECTIONS),
		MHD_OPTION_CONNECTION_TIMEOUT, 0u, /* the watcher's job */
		MHD_OPTION_CONNECTION_MEMORY_LIMIT, pool,
		MHD_OPTION_URI_LOG_CALLBACK, on_uri, h,
		MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
		MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
		MHD_OPTION_EXTERNAL_LOGGER, mhd_log, h,
		MHD_OPTION_END);
	if (!h->mhd) {
		rc = capy_err_set(err, CAPY_EIO, "cannot start the HTTP server on %s:%d "
				  "(libmicrohttpd refused; run with CAPY_LOG=debug for its reason)",
				  h->host, h->port);
		goto fail;
	}
	*out = h;
	return 0;
fail:
	if (h->watching)
		http_watch_stop(h);
	if (h->listen_fd >= 0 && fcntl(h->listen_fd, F_GETFD) >= 0)
		close(h->listen_fd);
	if (h->wake_fd >= 0)
		close(h->wake_fd);
	http_server_unref(h);
	return rc;
}

int capy_http_port(const struct capy_http *h)
{
	return h->port;
}

void capy_http_quiesce(struct capy_http *h)
{
	MHD_socket fd;

	if (atomic_exchange(&h->quiesced, true))
		return;
	fd = MHD_quiesce_daemon(h->mhd);
	/* Shut the listening socket down rather than closing it: connecting clients are then
	 * refused at once, and its number cannot be reused while libmicrohttpd's thread may
	 * still look at it. It is closed in capy_http_stop. */
	if (fd != MHD_INVALID_SOCKET) {
		shutdown(fd, SHUT_RDWR);
	} else {
		h->listen_fd = -1; /* still libmicrohttpd's: it closes it */
		capy_log_debug("http: libmicrohttpd could not quiesce; stop closes the socket");
	}
}

void capy_http_stop(struct capy_http *h, double timeout_s)
{
	int64_t deadline;
	struct timespec ts;

	capy_http_quiesce(h);
	atomic_store(&h->draining, true);
	if (!(timeout_s > 0))
		timeout_s = 0;
	if (timeout_s > 1e6)
		timeout_s = 1e6;
	deadline = http_now_ms() + (int64_t)(timeout_s * 1000);
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += (time_t)timeout_s;
	ts.tv_nsec += (long)((timeout_s - (double)(time_t)timeout_s) * 1e9);
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&h->lock);
	while (h->n_active && http_now_ms() < deadline)
		if (pthread_cond_timedwait(&h->cv, &h->lock, &ts) == ETIMEDOUT)
			break;
	/* cancel what is still running, one at a time (no allocation: this must not fail) */
	for (;;) {
		struct capy_http_exchange *x = NULL;

		for (struct http_conn *c = h->conns; c && !x; c = c->next)
			if (c->x && !atomic_load(&c->x->gone))
				x = c->x;
		if (!x)
			break;
		http_exchange_ref(x);
		pthread_mutex_unlock(&h->lock);
		http_exchange_gone(x, "server stopping");
		http_fire_cancel(x);
		http_exchange_unref(x);
		pthread_mutex_lock(&h->lock);
	}
	pthread_mutex_unlock(&h->lock);
	/* shuts every connection down and joins their threads (handlers must have returned) */
	MHD_stop_daemon(h->mhd);
	h->mhd = NULL;
	http_watch_stop(h);
	if (h->listen_fd >= 0)
		close(h->listen_fd);
	close(h->wake_fd);
	h->wake_fd = -1;
	http_server_unref(h);
}
