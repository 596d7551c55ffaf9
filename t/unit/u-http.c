/* u-http.c - unit tests for libcore/serve/http: real loopback sockets, a test handler and a
 * small HTTP client written here. Every wait is bounded. */
#include "test.h"
#include "serve/http-impl.h"
#include "util/buf.h"
#include "util/log.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

/* --- a small HTTP client ------------------------------------------------------------------ */

struct tconn {
	int fd;
	size_t len;
	char buf[256 << 10];
};

static struct tconn *tc_open_rcvbuf(int port, int rcvbuf)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	struct tconn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (rcvbuf)
		setsockopt(c->fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		if (c->fd >= 0)
			close(c->fd);
		free(c);
		return NULL;
	}
	return c;
}

static struct tconn *tc_open(int port)
{
	return tc_open_rcvbuf(port, 0);
}

static void tc_close(struct tconn *c)
{
	if (c) {
		close(c->fd);
		free(c);
	}
}

static int tc_send(struct tconn *c, const void *p, size_t n)
{
	const char *s = p;

	while (n) {
		ssize_t k = send(c->fd, s, n, MSG_NOSIGNAL);
		if (k <= 0)
			return -1;
		s += k;
		n -= (size_t)k;
	}
	return 0;
}

static int tc_sends(struct tconn *c, const char *s)
{
	return tc_send(c, s, strlen(s));
}

/* More bytes: 1; the server closed (or reset) the connection: 0; timeout or error: -1. */
static int tc_fill(struct tconn *c, int64_t deadline)
{
	struct pollfd p = { .fd = c->fd, .events = POLLIN };
	int64_t left = deadline - now_ms();
	ssize_t n;

	if (c->len == sizeof(c->buf) || left <= 0 || poll(&p, 1, (int)left) <= 0)
		return -1;
	n = recv(c->fd, c->buf + c->len, sizeof(c->buf) - c->len, 0);
	if (n < 0)
		return errno == ECONNRESET ? 0 : -1;
	if (!n)
		return 0;
	c->len += (size_t)n;
	return 1;
}

static void tc_consume(struct tconn *c, size_t n)
{
	memmove(c->buf, c->buf + n, c->len - n);
	c->len -= n;
}

static int tc_line(struct tconn *c, char *out, size_t size, int64_t deadline)
{
	for (;;) {
		char *e = memmem(c->buf, c->len, "\r\n", 2);
		if (e) {
			size_t n = (size_t)(e - c->buf), k = CAPY_MIN(n, size - 1);
			memcpy(out, c->buf, k);
			out[k] = 0;
			tc_consume(c, n + 2);
			return 0;
		}
		if (tc_fill(c, deadline) <= 0)
			return -1;
	}
}

static int tc_bytes(struct tconn *c, struct capy_buf *out, size_t n, int64_t deadline)
{
	while (c->len < n)
		if (tc_fill(c, deadline) <= 0)
			return -1;
	capy_buf_add(out, c->buf, n);
	tc_consume(c, n);
	return 0;
}

struct tresp {
	int status;
	struct capy_buf head; /* "Name: value\n" lines */
	struct capy_buf body;
	bool chunked;
};

static void tr_release(struct tresp *r)
{
	capy_buf_release(&r->head);
	capy_buf_release(&r->body);
	memset(r, 0, sizeof(*r));
}

/* The value of header name, or NULL. */
static const char *tr_header(const struct tresp *r, const char *name, char *val, size_t size)
{
	size_t nl = strlen(name);

	for (const char *p = r->head.data; p && *p;) {
		const char *e = strchr(p, '\n');
		if (!strncasecmp(p, name, nl) && p[nl] == ':') {
			const char *v = p + nl + 1;
			size_t k;
			while (*v == ' ')
				v++;
			k = CAPY_MIN((size_t)(e - v), size - 1);
			memcpy(val, v, k);
			val[k] = 0;
			return val;
		}
		p = e + 1;
	}
	return NULL;
}

static int tc_head(struct tconn *c, struct tresp *r, int64_t deadline)
{
	char line[8192], v[64];

	memset(r, 0, sizeof(*r));
	if (tc_line(c, line, sizeof(line), deadline) < 0 ||
	    sscanf(line, "HTTP/1.%*d %d", &r->status) != 1)
		return -1;
	for (;;) {
		if (tc_line(c, line, sizeof(line), deadline) < 0)
			return -1;
		if (!line[0])
			break;
		capy_buf_puts(&r->head, line);
		capy_buf_putc(&r->head, '\n');
	}
	r->chunked = tr_header(r, "Transfer-Encoding", v, sizeof(v)) && strstr(v, "chunked");
	return 0;
}

/* One chunk of a chunked body appended to out: its size, 0 at the end, -1 on timeout. */
static long tc_chunk(struct tconn *c, struct capy_buf *out, int64_t deadline)
{
	char line[128];
	unsigned long n;

	if (tc_line(c, line, sizeof(line), deadline) < 0)
		return -1;
	n = strtoul(line, NULL, 16);
	if (!n) {
		do
			if (tc_line(c, line, sizeof(line), deadline) < 0)
				return -1;
		while (line[0]);
		return 0;
	}
	if (tc_bytes(c, out, n, deadline) < 0 || tc_line(c, line, sizeof(line), deadline) < 0)
		return -1;
	return (long)n;
}

static int tc_response(struct tconn *c, struct tresp *r, int timeout_ms)
{
	int64_t deadline = now_ms() + timeout_ms;
	char v[64];

	if (tc_head(c, r, deadline) < 0)
		return -1;
	if (r->chunked) {
		long n;
		while ((n = tc_chunk(c, &r->body, deadline)) > 0)
			;
		return n < 0 ? -1 : 0;
	}
	if (tr_header(r, "Content-Length", v, sizeof(v)))
		return tc_bytes(c, &r->body, strtoul(v, NULL, 10), deadline);
	return 0;
}

/* Whether the server closes the connection within timeout_ms (data before that is dropped). */
static bool tc_closed(struct tconn *c, int timeout_ms)
{
	int64_t deadline = now_ms() + timeout_ms;

	for (;;) {
		int rc = tc_fill(c, deadline);
		if (rc == 0)
			return true;
		if (rc < 0)
			return false;
		c->len = 0;
	}
}

/* One request on a new connection. */
static int request(int port, const char *raw, struct tresp *r)
{
	struct tconn *c = tc_open(port);
	int rc = -1;

	memset(r, 0, sizeof(*r));
	if (c && !tc_sends(c, raw))
		rc = tc_response(c, r, 3000);
	tc_close(c);
	return rc;
}

/* --- the server side: handlers and shared state -------------------------------------------- */

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	char *log[256];
	int n_log;
	int cancels;
	int64_t cancel_ms;
	int pieces_written, pieces_acked;
	bool lockstep_ok;
	int write_rc;
	int64_t write_fail_ms;
	uint64_t bytes_written;
	int writer_done;
	int gone_seen;
	int64_t gone_ms;
	pthread_t writer;
	bool have_writer;
} T = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

static void test_log(void *arg, const char *line, size_t len)
{
	(void)arg;
	pthread_mutex_lock(&T.mu);
	if (T.n_log < (int)ARRAY_SIZE(T.log))
		T.log[T.n_log++] = strndup(line, len);
	pthread_cond_broadcast(&T.cv);
	pthread_mutex_unlock(&T.mu);
}

static void reset_state(void)
{
	pthread_mutex_lock(&T.mu);
	for (int i = 0; i < T.n_log; i++)
		free(T.log[i]);
	T.n_log = 0;
	T.cancels = 0;
	T.cancel_ms = 0;
	T.pieces_written = T.pieces_acked = 0;
	T.lockstep_ok = true;
	T.write_rc = 0;
	T.write_fail_ms = 0;
	T.bytes_written = 0;
	T.writer_done = 0;
	T.gone_seen = 0;
	T.gone_ms = 0;
	pthread_mutex_unlock(&T.mu);
}

/* Wait (bounded) until a log line containing needle shows up; returns a copy or NULL. */
static char *wait_log(const char *needle, int timeout_ms)
{
	int64_t deadline = now_ms() + timeout_ms;
	char *found = NULL;

	pthread_mutex_lock(&T.mu);
	while (!found) {
		struct timespec ts;
		for (int i = 0; i < T.n_log && !found; i++)
			if (strstr(T.log[i], needle))
				found = strdup(T.log[i]);
		if (found || now_ms() >= deadline)
			break;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 20 * 1000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&T.cv, &T.mu, &ts);
	}
	pthread_mutex_unlock(&T.mu);
	return found;
}

/* Wait (bounded) until *flag (read under T.mu) is at least want. */
static bool wait_int(const int *flag, int want, int timeout_ms)
{
	int64_t deadline = now_ms() + timeout_ms;
	bool ok;

	pthread_mutex_lock(&T.mu);
	while (*flag < want && now_ms() < deadline) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 10 * 1000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&T.cv, &T.mu, &ts);
	}
	ok = *flag >= want;
	pthread_mutex_unlock(&T.mu);
	return ok;
}

static void on_cancel(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&T.mu);
	T.cancels++;
	T.cancel_ms = now_ms();
	pthread_cond_broadcast(&T.cv);
	pthread_mutex_unlock(&T.mu);
}

/* GET|POST /echo: what the request looked like, as JSON */
static void h_echo(struct capy_http_exchange *x, void *arg)
{
	struct capy_buf b = { 0 };
	const char *xt = capy_http_header(x, "X-TEST");
	size_t len;

	(void)arg;
	capy_http_body(x, &len);
	capy_buf_printf(&b, "{\"method\":\"%s\",\"path\":\"%s\",\"query\":\"%s\",\"remote\":\"%s\","
			"\"len\":%zu,\"x_test\":\"%s\"}",
			capy_http_method(x), capy_http_path(x), capy_http_query(x),
			capy_http_remote(x), len, xt ? xt : "");
	capy_http_log_field(x, "tokens", "42");
	capy_http_log_field(x, "note", "\"hi\"");
	capy_http_add_header(x, "X-Echo", "yes");
	capy_http_respond(x, 200, NULL, b.data, b.len);
	capy_buf_release(&b);
}

/* POST /raw: the body back, byte for byte */
static void h_raw(struct capy_http_exchange *x, void *arg)
{
	size_t len;
	const char *body = capy_http_body(x, &len);

	(void)arg;
	capy_http_respond(x, 200, "application/octet-stream", body, len);
}

static void h_health(struct capy_http_exchange *x, void *arg)
{
	(void)arg;
	capy_http_respond(x, 200, "text/plain", "ok\n", 3);
}

static void h_none(struct capy_http_exchange *x, void *arg)
{
	(void)x;
	(void)arg;
}

static void h_error(struct capy_http_exchange *x, void *arg)
{
	(void)arg;
	capy_http_respond_error(x, 400, "bad \"thing\"");
}

/* POST /wait: wait for the client to go (at most 5 s), noting when it was seen */
static void h_wait(struct capy_http_exchange *x, void *arg)
{
	int64_t deadline = now_ms() + 5000;

	(void)arg;
	capy_http_on_cancel(x, on_cancel, NULL);
	pthread_mutex_lock(&T.mu);
	while (!T.cancels && now_ms() < deadline) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 5 * 1000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&T.cv, &T.mu, &ts);
		if (capy_http_client_gone(x) && !T.gone_seen) {
			T.gone_seen = 1;
			T.gone_ms = now_ms();
		}
	}
	if (capy_http_client_gone(x) && !T.gone_seen) {
		T.gone_seen = 1;
		T.gone_ms = now_ms();
	}
	pthread_cond_broadcast(&T.cv);
	pthread_mutex_unlock(&T.mu);
	capy_http_respond(x, 200, NULL, "{}", 2);
}

enum wmode { W_LOCKSTEP, W_UNTIL_FAIL, W_FINITE, W_SILENT };

struct writer {
	struct capy_http_stream *st;
	enum wmode mode;
	size_t size;
	int interval_ms;
};

static void *writer_main(void *arg)
{
	struct writer *w = arg;
	char *piece = malloc(w->size + 64);
	int64_t end = now_ms() + 10000;

	if (w->mode == W_SILENT) {
		/* an engine still reading the prompt: nothing to write until told to stop */
		wait_int(&T.cancels, 1, 3000);
		pthread_mutex_lock(&T.mu);
		T.write_rc = capy_http_stream_write(w->st, "x", 1);
		pthread_mutex_unlock(&T.mu);
	} else if (w->mode == W_LOCKSTEP) {
		for (int i = 0; i < 5; i++) {
			sleep_ms(30);
			snprintf(piece, 64, "data: piece %d\n\n", i);
			pthread_mutex_lock(&T.mu);
			T.pieces_written = i + 1; /* counted before it can arrive */
			pthread_cond_broadcast(&T.cv);
			pthread_mutex_unlock(&T.mu);
			capy_http_stream_write(w->st, piece, strlen(piece));
			if (!wait_int(&T.pieces_acked, i + 1, 3000)) {
				pthread_mutex_lock(&T.mu);
				T.lockstep_ok = false;
				pthread_mutex_unlock(&T.mu);
			}
		}
	} else {
		memset(piece, 'x', w->size);
		for (int i = 0; now_ms() < end && (w->mode != W_FINITE || i < 3); i++) {
			int rc = capy_http_stream_write(w->st, piece, w->size);
			if (rc < 0) {
				pthread_mutex_lock(&T.mu);
				T.write_rc = rc;
				T.write_fail_ms = now_ms();
				pthread_mutex_unlock(&T.mu);
				/* as an engine would: carry on until told to stop (bounded) */
				wait_int(&T.cancels, 1, 1000);
				break;
			}
			pthread_mutex_lock(&T.mu);
			T.bytes_written += w->size;
			pthread_mutex_unlock(&T.mu);
			if (w->interval_ms)
				sleep_ms(w->interval_ms);
		}
	}
	capy_http_log_field(capy_http_stream_exchange(w->st), "writer", "\"done\"");
	capy_http_stream_close(w->st);
	pthread_mutex_lock(&T.mu);
	T.writer_done = 1;
	pthread_cond_broadcast(&T.cv);
	pthread_mutex_unlock(&T.mu);
	free(piece);
	free(w);
	return NULL;
}

static long query_num(const char *q, const char *key, long def)
{
	const char *p = strstr(q, key);

	return p ? strtol(p + strlen(key), NULL, 10) : def;
}

/* POST /stream?mode=lockstep|fail|finite&size=N&interval=MS */
static void h_stream(struct capy_http_exchange *x, void *arg)
{
	const char *q = capy_http_query(x);
	struct writer *w = calloc(1, sizeof(*w));

	(void)arg;
	w->mode = strstr(q, "mode=fail")     ? W_UNTIL_FAIL
		  : strstr(q, "mode=finite") ? W_FINITE
		  : strstr(q, "mode=silent") ? W_SILENT
					     : W_LOCKSTEP;
	w->size = (size_t)query_num(q, "size=", 16);
	w->interval_ms = (int)query_num(q, "interval=", 20);
	w->st = capy_http_stream_open(x, 200, NULL);
	capy_http_on_cancel(x, on_cancel, NULL);
	pthread_mutex_lock(&T.mu);
	T.have_writer = !pthread_create(&T.writer, NULL, writer_main, w);
	pthread_mutex_unlock(&T.mu);
}

/* POST /sync?sleep=MS: a stream written and closed by the handler itself, before it returns */
static void h_sync(struct capy_http_exchange *x, void *arg)
{
	struct capy_http_stream *st = capy_http_stream_open(x, 200, "text/event-stream");

	(void)arg;
	capy_http_stream_write(st, "data: 1\n\n", 9);
	sleep_ms((int)query_num(capy_http_query(x), "sleep=", 0));
	capy_http_stream_write(st, "data: 2\n\n", 9);
	capy_http_stream_close(st);
}

static void join_writer(void)
{
	bool have;

	wait_int(&T.writer_done, 1, 12000);
	pthread_mutex_lock(&T.mu);
	have = T.have_writer;
	T.have_writer = false;
	pthread_mutex_unlock(&T.mu);
	if (have)
		pthread_join(T.writer, NULL);
}

/* Anthropic's shape for /v1/messages, OpenAI's elsewhere */
static void test_error_body(void *arg, const char *path, int status, const char *message,
			    struct capy_buf *out)
{
	if (!strncmp(path, "/v1/messages", 12)) {
		capy_buf_printf(out, "{\"type\":\"error\",\"error\":{\"type\":\"%s\",\"message\":",
				status == 401 ? "authentication_error" : "invalid_request_error");
		capy_buf_json_str(out, message, strlen(message));
		capy_buf_puts(out, "}}");
		return;
	}
	capy_http_error_openai(arg, path, status, message, out);
}

static const struct capy_http_route routes[] = {
	{ "/echo", "GET, POST", h_echo, NULL, false },
	{ "/raw", "POST", h_raw, NULL, false },
	{ "/stream", "POST", h_stream, NULL, false },
	{ "/wait", "POST", h_wait, NULL, false },
	{ "/sync", "POST", h_sync, NULL, false },
	{ "/none", "GET", h_none, NULL, false },
	{ "/error", "GET", h_error, NULL, false },
	{ "/health", "GET,HEAD", h_health, NULL, true },
	{ "/v1/messages", "POST", h_echo, NULL, false },
	{ "/models/*", "GET", h_echo, NULL, false },
};

static struct capy_http *start(struct capy_http_opts *o)
{
	struct capy_err err = { 0 };
	struct capy_http *h = NULL;

	reset_state();
	o->routes = routes;
	o->n_routes = ARRAY_SIZE(routes);
	o->log = test_log;
	if (!o->error_body)
		o->error_body = test_error_body;
	if (capy_http_start(&h, o, &err) < 0) {
		fprintf(stderr, "capy_http_start: %s\n", err.msg);
		return NULL;
	}
	return h;
}

/* --- tests --------------------------------------------------------------------------------- */

static void test_plain(void)
{
	struct capy_http_opts o = { 0 };
	struct capy_http *h = start(&o);
	struct tresp r;
	char req[256], v[128], *line;
	int port;

	CHECK(h != NULL);
	if (!h)
		return;
	port = capy_http_port(h);
	CHECK(port > 0);
	snprintf(req, sizeof(req),
		 "GET /echo?a=1&b=two HTTP/1.1\r\nHost: x\r\nX-Test: hello\r\n\r\n");
	CHECK_EQ_INT(request(port, req, &r), 0);
	CHECK_EQ_INT(r.status, 200);
	CHECK(tr_header(&r, "Content-Type", v, sizeof(v)) && !strcmp(v, "application/json"));
	CHECK(tr_header(&r, "X-Echo", v, sizeof(v)) && !strcmp(v, "yes"));
	CHECK(tr_header(&r, "x-request-id", v, sizeof(v)) && !strncmp(v, "req_", 4));
	CHECK(tr_header(&r, "Keep-Alive", v, sizeof(v)) && !strcmp(v, "timeout=75"));
	CHECK(r.body.data && strstr(r.body.data, "\"path\":\"/echo\""));
	CHECK(r.body.data && strstr(r.body.data, "\"query\":\"a=1&b=two\""));
	CHECK(r.body.data && strstr(r.body.data, "\"x_test\":\"hello\""));
	CHECK(r.body.data && strstr(r.body.data, "\"remote\":\"127.0.0.1:"));
	line = wait_log("\"path\":\"/echo\"", 2000);
	CHECK(line != NULL);
	if (line) {
		CHECK_CONTAINS(line, "\"method\":\"GET\"");
		CHECK_CONTAINS(line, "\"status\":200");
		CHECK_CONTAINS(line, "\"aborted\":false");
		CHECK_CONTAINS(line, "\"tokens\":42,\"note\":\"hi\"");
		CHECK_CONTAINS(line, "\"remote\":\"127.0.0.1:");
		CHECK_CONTAINS(line, "\"id\":\"req_");
		CHECK_CONTAINS(line, "\"bytes\":");
		CHECK_CONTAINS(line, "\"ms\":");
		CHECK(!strstr(line, "hello")); /* no header values or body in the log */
		CHECK(!strstr(line, "a=1"));   /* nor the query */
		{
			cJSON *j = NULL;
			CHECK_EQ_INT(capy_json_parse(line, strlen(line), "log", &j, NULL), 0);
			cJSON_Delete(j);
		}
		free(line);
	}
	tr_release(&r);

	/* a handler's own error answer, in the formatter's shape */
	CHECK_EQ_INT(request(port, "GET /error HTTP/1.1\r\nHost: x\r\n\r\n", &r), 0);
	CHECK_EQ_INT(r.status, 400);
	CHECK(r.body.data && !strcmp(r.body.data, "{\"error\":{\"message\":\"bad \\\"thing\\\"\","
					       "\"type\":\"invalid_request_error\",\"param\":null,"
					       "\"code\":null}}"));
	tr_release(&r);
	/* a handler that does not answer gets a 500 sent for it */
	CHECK_EQ_INT(request(port, "GET /none HTTP/1.1\r\nHost: x\r\n\r\n", &r), 0);
	CHECK_EQ_INT(r.status, 500);
	tr_release(&r);
	/* prefix routes; HEAD */
	CHECK_EQ_INT(request(port, "GET /models/qwen-3 HTTP/1.1\r\nHost: x\r\n\r\n", &r), 0);
	CHECK_EQ_INT(r.status, 200);
	CHECK(r.body.data && strstr(r.body.data, "\"path\":\"/models/qwen-3\""));
	tr_release(&r);
	capy_http_stop(h, 1);
}

static void test_keepalive(void)
{
	struct capy_http_opts o = { 0 };
	struct capy_http *h = start(&o);
	struct tconn *c;
	struct tresp r1, r2;
	const char *p;
	char remote1[64] = "", remote2[64] = "";

	CHECK(h != NULL);
	if (!h)
		return;
	c = tc_open(capy_http_port(h));
	CHECK(c != NULL);
	if (c) {
		CHECK_EQ_INT(tc_sends(c, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n"
					 "abc"),
			     0);
		CHECK_EQ_INT(tc_response(c, &r1, 3000), 0);
		CHECK_EQ_INT(r1.status, 200);
		CHECK(r1.body.data && strstr(r1.body.data, "\"len\":3"));
		CHECK_EQ_INT(tc_sends(c, "GET /echo?second HTTP/1.1\r\nHost: x\r\n\r\n"), 0);
		CHECK_EQ_INT(tc_response(c, &r2, 3000), 0);
		CHECK_EQ_INT(r2.status, 200);
		CHECK(r2.body.data && strstr(r2.body.data, "\"query\":\"second\""));
		if (r1.body.data && (p = strstr(r1.body.data, "\"remote\":\"")))
			sscanf(p + 10, "%63[^\"]", remote1);
		if (r2.body.data && (p = strstr(r2.body.data, "\"remote\":\"")))
			sscanf(p + 10, "%63[^\"]", remote2);
		CHECK(remote1[0] && !strcmp(remote1, remote2)); /* the same connection */
		/* pipelined: two requests in one write */
		tr_release(&r1);
		tr_release(&r2);
		CHECK_EQ_INT(tc_sends(c, "GET /echo?p1 HTTP/1.1\r\nHost: x\r\n\r\n"
					 "GET /echo?p2 HTTP/1.1\r\nHost: x\r\n\r\n"),
			     0);
		CHECK_EQ_INT(tc_response(c, &r1, 3000), 0);
		CHECK_EQ_INT(tc_response(c, &r2, 3000), 0);
		CHECK(r1.body.data && strstr(r1.body.data, "\"query\":\"p1\""));
		CHECK(r2.body.data && strstr(r2.body.data, "\"query\":\"p2\""));
		tr_release(&r1);
		tr_release(&r2);
		tc_close(c);
	}
	capy_http_stop(h, 1);
}

static void test_body_bytes(void)
{
	struct capy_http_opts o = { 0 };
	struct capy_http *h = start(&o);
	struct tconn *c;
	struct tresp r;
	static const char nul_body[] = "a\0b\0\0c";

	CHECK(h != NULL);
	if (!h)
		return;
	c = tc_open(capy_http_port(h));
	CHECK(c != NULL);
	if (c) {
		CHECK_EQ_INT(tc_sends(c, "POST /raw HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n\r\n"),
			     0);
		CHECK_EQ_INT(tc_send(c, nul_body, 6), 0);
		CHECK_EQ_INT(tc_response(c, &r, 3000), 0);
		CHECK_EQ_INT(r.status, 200);
		CHECK_EQ_U64(r.body.len, 6);
		CHECK(r.body.len == 6 && !memcmp(r.body.data, nul_body, 6));
		tr_release(&r);
		/* a chunked upload is reassembled */
		CHECK_EQ_INT(tc_sends(c, "POST /raw HTTP/1.1\r\nHost: x\r\n"
					 "Transfer-Encoding: chunked\r\n\r\n"
					 "3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n"),
			     0);
		CHECK_EQ_INT(tc_response(c, &r, 3000), 0);
		CHECK_EQ_INT(r.status, 200);
		CHECK(r.body.len == 7 && !memcmp(r.body.data, "abcdefg", 7));
		tr_release(&r);
		tc_close(c);
	}
	capy_http_stop(h, 1);
}

static void test_stream(void)
{
	struct capy_http_opts o = { 0 };
	struct capy_http *h = start(&o);
	struct tconn *c;
	struct tresp r;
	char v[128], *line;

	CHECK(h != NULL);
	if (!h)
		return;
	c = tc_open(capy_http_port(h));
	CHECK(c != NULL);
	if (!c) {
		capy_http_stop(h, 1);
		return;
	}
	CHECK_EQ_INT(tc_sends(c, "POST /stream?mode=lockstep HTTP/1.1\r\nHost: x\r\n"
				 "Accept: application/json\r\nContent-Length: 2\r\n\r\n{}"),
		     0);
	CHECK_EQ_INT(tc_head(c, &r, now_ms() + 3000), 0);
	CHECK_EQ_INT(r.status, 200);
	CHECK(r.chunked);
	CHECK(!tr_header(&r, "Content-Length", v, sizeof(v)));
	CHECK(tr_header(&r, "Content-Type", v, sizeof(v)) && !strcmp(v, "text/event-stream"));
	CHECK(tr_header(&r, "Cache-Control", v, sizeof(v)) && !strcmp(v, "no-cache"));
	for (int i = 0; i < 5; i++) {
		struct capy_buf b = { 0 };
		char want[32];
		int written;

		snprintf(want, sizeof(want), "data: piece %d\n\n", i);
		CHECK_EQ_INT(tc_chunk(c, &b, now_ms() + 3000), (long)strlen(want));
		CHECK(b.data && !strcmp(b.data, want));
		pthread_mutex_lock(&T.mu);
		written = T.pieces_written;
		T.pieces_acked = i + 1; /* the writer waits for this before its next piece */
		pthread_cond_broadcast(&T.cv);
		pthread_mutex_unlock(&T.mu);
		CHECK_EQ_INT(written, i + 1); /* piece i arrived before piece i+1 was written */
		capy_buf_release(&b);
	}
	CHECK_EQ_INT(tc_chunk(c, &r.body, now_ms() + 3000), 0); /* the end */
	join_writer();
	CHECK(T.lockstep_ok);
	CHECK_EQ_INT(T.cancels, 0);
	line = wait_log("\"path\":\"/stream\"", 2000);
	CHECK(line && strstr(line, "\"aborted\":false"));
	CHECK(line && strstr(line, "\"writer\":\"done\""));
	CHECK(line && strstr(line, "\"bytes\":75"));
	free(line);
	tr_release(&r);
	/* the connection is still good for another request */
	CHECK_EQ_INT(tc_sends(c, "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n"), 0);
	CHECK_EQ_INT(tc_response(c, &r, 3000), 0);
	CHECK_EQ_INT(r.status, 200);
	tr_release(&r);
	tc_close(c);
	capy_http_stop(h, 1);
}

/* the handler writes, dawdles past the write timeout and closes before returning: all of it
 * goes out once it returns (the write timeout counts from then) */
static void test_stream_from_handler(void)
{
	struct capy_http_opts o = { .write_timeout_ms = 100 };
	struct capy_http *h = start(&o);
	struct tresp r;
	char *line;

	CHECK(h != NULL);
	if (!h)
		return;
	CHECK_EQ_INT(request(capy_http_port(h), "POST /sync?sleep=300 HTTP/1.1\r\nHost: x\r\n"
						 "Content-Length: 0\r\n\r\n",
			     &r),
		     0);
	CHECK_EQ_INT(r.status, 200);
	CHECK(r.chunked);
	CHECK(r.body.data && !strcmp(r.body.data, "data: 1\n\ndata: 2\n\n"));
	line = wait_log("\"path\":\"/sync\"", 2000);
	CHECK(line && strstr(line, "\"aborted\":false") && strstr(line, "\"bytes\":18"));
	free(line);
	tr_release(&r);
	capy_http_stop(h, 1);
}

static void test_stream_disconnect(void)
{
	struct capy_http_opts o = { 0 };
	struct capy_http *h = start(&o);
	struct tconn *c;
	struct tresp r;
	struct capy_buf b = { 0 };
	int64_t closed_at;
	char *line;

	CHECK(h != NULL);
	if (!h)
		return;
	c = tc_open(capy_http_port(h));
	CHECK(c != NULL);
	if (!c) {
		capy_http_stop(h, 1);
		return;
	}
	CHECK_EQ_INT(tc_sends(c, "POST /stream?mode=fail&size=10&interval=20 HTTP/1.1\r\n"
				 "Host: x\r\nContent-Length: 0\r\n\r\n"),
		     0);
	CHECK_EQ_INT(tc_head(c, &r, now_ms() + 3000), 0);
	CHECK_EQ_INT(r.status, 200);
	CHECK(tc_chunk(c, &b, now_ms() + 3000) > 0);
	closed_at = now_ms();
	tc_close(c);
	CHECK(wait_int(&T.cancels, 1, 2000));
	CHECK_MSG(T.cancel_ms - closed_at < 500, "cancel after %" PRId64 " ms",
		  T.cancel_ms - closed_at);
	join_writer();
	CHECK_EQ_INT(T.write_rc, CAPY_ECANCELED);
	CHECK(T.write_fail_ms && T.write_fail_ms - closed_at < 1000);
	CHECK_EQ_INT(T.cancels, 1); /* once */
	line = wait_log("\"path\":\"/stream\"", 2000);
	CHECK(line && strstr(line, "\"aborted\":true"));
	CHECK(line && strstr(line, "\"error\":\"client gone\""));
	free(line);
	capy_buf_release(&b);
	tr_release(&r);
	capy_http_stop(h, 1);
}

/* a stream open but still silent (the model reads a long prompt) when the client leaves */
static void test_silent_stream_disconnect(void)
{
	struct capy_http_opts o = { 0 };
	struct capy_http *h = start(&o);
	struct tconn *c;
	struct tresp r;
	int64_t closed_at;

	CHECK(h != NULL);
	if (!h)
		return;
	c = tc_open(capy_http_port(h));
	CHECK(c != NULL);
	if (!c) {
		capy_http_stop(h, 1);
		return;
	}
	CHECK_EQ_INT(tc_sends(c, "POST /stream?mode=silent HTTP/1.1\r\nHost: x\r\n"
				 "Content-Length: 0\r\n\r\n"),
		     0);
	CHECK_EQ_INT(tc_head(c, &r, now_ms() + 3000), 0);
	CHECK_EQ_INT(r.status, 200);
	sleep_ms(100);
	closed_at = now_ms();
	tc_close(c);
	CHECK(wait_int(&T.cancels, 1, 2000));
	CHECK_MSG(T.cancel_ms - closed_at <= 200, "cancel after %" PRId64 " ms",
		  T.cancel_ms - closed_at);
	join_writer();
	CHECK_EQ_INT(T.write_rc, CAPY_ECANCELED);
	tr_release(&r);
	capy_http_stop(h, 1);
}

static void wait_disconnect(bool half_close)
{
	struct capy_http_opts o = { 0 };
	struct capy_http *h = start(&o);
	struct tconn *c;
	int64_t closed_at;

	CHECK(h != NULL);
	if (!h)
		return;
	c = tc_open(capy_http_port(h));
	CHECK(c != NULL);
	if (!c) {
		capy_http_stop(h, 1);
		return;
	}
	CHECK_EQ_INT(tc_sends(c, "POST /wait HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"), 0);
	sleep_ms(150); /* the handler is waiting, nothing written */
	CHECK_EQ_INT(T.cancels, 0);
	closed_at = now_ms();
	if (half_close)
		shutdown(c->fd, SHUT_WR);
	else
		tc_close(c);
	CHECK(wait_int(&T.cancels, 1, 2000));
	CHECK(wait_int(&T.gone_seen, 1, 2000));
	CHECK_MSG(T.gone_ms - closed_at <= 200, "client_gone after %" PRId64 " ms",
		  T.gone_ms - closed_at);
	CHECK_MSG(T.cancel_ms - closed_at <= 200, "cancel after %" PRId64 " ms",
		  T.cancel_ms - closed_at);
	if (half_close)
		tc_close(c);
	free(wait_log("\"path\":\"/wait\"", 2000));
	capy_http_stop(h, 1);
	CHECK_EQ_INT(T.cancels, 1);
}

static void test_wait_disconnect(void)
{
	wait_disconnect(false);
	wait_disconnect(true);
}

static void test_auth(void)
{
	static const char *const keys[] = { "sk-one", "sk-two-longer" };
	struct capy_http_opts o = { .api_keys = keys, .n_api_keys = 2 };
	struct capy_http *h = start(&o);
	struct tresp r;
	char v[128];
	int port;

	CHECK(h != NULL);
	if (!h)
		return;
	port = capy_http_port(h);
	CHECK_EQ_INT(request(port, "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n", &r), 0);
	CHECK_EQ_INT(r.status, 401);
	CHECK(r.body.data && strstr(r.body.data, "{\"error\":{\"message\":\"missing API key"));
	CHECK(r.body.data && strstr(r.body.data, "\"code\":\"invalid_api_key\""));
	CHECK(tr_header(&r, "WWW-Authenticate", v, sizeof(v)) && !strcmp(v, "Bearer"));
	tr_release(&r);
	{
		static const struct {
			const char *headers;
			int status;
		} cases[] = {
			{ "Authorization: Bearer sk-on\r\n", 401 },   /* a prefix */
			{ "Authorization: Bearer sk-one1\r\n", 401 }, /* longer */
			{ "Authorization: sk-one\r\n", 401 },         /* no scheme */
			{ "x-api-key: sk-two\r\n", 401 },
			{ "Authorization: Bearer sk-two-longer\r\n", 200 },
			{ "authorization: bearer   sk-one  \r\n", 200 },
			{ "X-Api-Key: sk-one\r\n", 200 },
			/* one good credential is enough */
			{ "Authorization: Bearer nope\r\nx-api-key: sk-two-longer\r\n", 200 },
		};
		for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
			char req[256];
			snprintf(req, sizeof(req), "GET /echo HTTP/1.1\r\nHost: x\r\n%s\r\n",
				 cases[i].headers);
			CHECK_EQ_INT(request(port, req, &r), 0);
			CHECK_MSG(r.status == cases[i].status, "case %zu: %d", i, r.status);
			if (cases[i].status == 401)
				CHECK(r.body.data && strstr(r.body.data, "invalid API key"));
			tr_release(&r);
		}
	}
	/* open path */
	CHECK_EQ_INT(request(port, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", &r), 0);
	CHECK_EQ_INT(r.status, 200);
	CHECK(r.body.data && !strcmp(r.body.data, "ok\n"));
	tr_release(&r);
	/* Anthropic's path gets Anthropic's error shape; ?beta=true is not part of the path */
	CHECK_EQ_INT(request(port, "POST /v1/messages?beta=true HTTP/1.1\r\nHost: x\r\n"
				   "Content-Length: 2\r\n\r\n{}",
			     &r),
		     0);
	CHECK_EQ_INT(r.status, 401);
	{
		static const char want[] = "{\"type\":\"error\",\"error\":{\"type\":"
					   "\"authentication_error\",\"message\":";
		CHECK(r.body.data && !strncmp(r.body.data, want, strlen(want)));
	}
	tr_release(&r);
	CHECK_EQ_INT(request(port, "POST /v1/messages?beta=true HTTP/1.1\r\nHost: x\r\n"
				   "x-api-key: sk-one\r\nContent-Length: 2\r\n\r\n{}",
			     &r),
		     0);
	CHECK_EQ_INT(r.status, 200);
	CHECK(r.body.data && strstr(r.body.data, "\"path\":\"/v1/messages\",\"query\":\"beta=true\""));
	tr_release(&r);
	capy_http_stop(h, 1);

	/* bad keys are refused at start */
	{
		static const char *const bad[] = { "has space" };
		struct capy_http_opts b = { .api_keys = bad, .n_api_keys = 1 };
		struct capy_err err = { 0 };
		struct capy_http *hb = NULL;

		b.routes = routes;
		b.n_routes = ARRAY_SIZE(routes);
		CHECK_EQ_INT(capy_http_start(&hb, &b, &err), CAPY_EINVAL);
		CHECK_CONTAINS(err.msg, "API key 1");
		CHECK(hb == NULL);
	}
}

static void test_limits(void)
{
	struct capy_http_opts o = { .max_body = 1024, .max_header = 4096 };
	struct capy_http *h = start(&o);
	struct tconn *c;
	struct tresp r;
	struct capy_buf big = { 0 };
	char v[128];
	int port;

	CHECK(h != NULL);
	if (!h)
		return;
	port = capy_http_port(h);
	/* body over the limit, announced */
	CHECK_EQ_INT(request(port, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2000\r\n\r\n", &r),
		     0);
	CHECK_EQ_INT(r.status, 413);
	CHECK(r.body.data && strstr(r.body.data, "request body too large (2000 bytes, limit 1024)"));
	CHECK(tr_header(&r, "Connection", v, sizeof(v)) && !strcmp(v, "close"));
	tr_release(&r);
	/* chunked, found out while reading; the connection stays usable */
	c = tc_open(port);
	CHECK(c != NULL);
	if (c) {
		capy_buf_puts(&big, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
		for (int i = 0; i < 3; i++) {
			capy_buf_puts(&big, "320\r\n");
			for (int k = 0; k < 800; k++)
				capy_buf_putc(&big, 'y');
			capy_buf_puts(&big, "\r\n");
		}
		capy_buf_puts(&big, "0\r\n\r\n");
		CHECK_EQ_INT(tc_send(c, big.data, big.len), 0);
		CHECK_EQ_INT(tc_response(c, &r, 3000), 0);
		CHECK_EQ_INT(r.status, 413);
		tr_release(&r);
		CHECK_EQ_INT(tc_sends(c, "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n"), 0);
		CHECK_EQ_INT(tc_response(c, &r, 3000), 0);
		CHECK_EQ_INT(r.status, 200);
		tr_release(&r);
		tc_close(c);
	}
	capy_buf_release(&big);
	/* a body at the limit is fine */
	capy_buf_puts(&big, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1024\r\n\r\n");
	for (int k = 0; k < 1024; k++)
		capy_buf_putc(&big, 'z');
	CHECK_EQ_INT(request(port, big.data, &r), 0);
	CHECK_EQ_INT(r.status, 200);
	CHECK(r.body.data && strstr(r.body.data, "\"len\":1024"));
	tr_release(&r);
	capy_buf_release(&big);
	/* unknown path, wrong method */
	CHECK_EQ_INT(request(port, "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", &r), 0);
	CHECK_EQ_INT(r.status, 404);
	CHECK(r.body.data && !strcmp(r.body.data, "{\"error\":{\"message\":\"unknown path '/nope'\","
					       "\"type\":\"not_found_error\",\"param\":null,"
					       "\"code\":null}}"));
	tr_release(&r);
	CHECK_EQ_INT(request(port, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n", &r), 0);
	CHECK_EQ_INT(r.status, 405);
	CHECK(tr_header(&r, "Allow", v, sizeof(v)) && !strcmp(v, "POST"));
	CHECK(r.body.data && strstr(r.body.data, "method 'GET' is not allowed for '/stream'"));
	tr_release(&r);
	CHECK_EQ_INT(request(port, "DELETE /echo HTTP/1.1\r\nHost: x\r\n\r\n", &r), 0);
	CHECK_EQ_INT(r.status, 405);
	CHECK(tr_header(&r, "Allow", v, sizeof(v)) && !strcmp(v, "GET, POST"));
	tr_release(&r);
	/* headers over max_header: our 431; far over: libmicrohttpd's 431 (or a close) */
	capy_buf_puts(&big, "GET /echo HTTP/1.1\r\nHost: x\r\nX-Big: ");
	for (int k = 0; k < 6000; k++)
		capy_buf_putc(&big, 'h');
	capy_buf_puts(&big, "\r\n\r\n");
	CHECK_EQ_INT(request(port, big.data, &r), 0);
	CHECK_EQ_INT(r.status, 431);
	CHECK(r.body.data && strstr(r.body.data, "request headers too large"));
	tr_release(&r);
	capy_buf_release(&big);
	capy_buf_puts(&big, "GET /echo HTTP/1.1\r\nHost: x\r\nX-Big: ");
	for (int k = 0; k < 100000; k++)
		capy_buf_putc(&big, 'h');
	capy_buf_puts(&big, "\r\n\r\n");
	c = tc_open(port);
	if (c) {
		int rc;
		tc_send(c, big.data, big.len); /* may fail once the server gave up */
		rc = tc_response(c, &r, 3000);
		CHECK(rc < 0 || r.status == 431);
		tr_release(&r);
		tc_close(c);
		if (rc == 0) {
			char *line = wait_log("\"error\":\"refused by libmicrohttpd\"", 2000);
			CHECK(line && strstr(line, "\"status\":431") &&
			      strstr(line, "\"aborted\":false") && strstr(line, "\"method\":null"));
			free(line);
		}
	}
	capy_buf_release(&big);
	/* still serving */
	CHECK_EQ_INT(request(port, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", &r), 0);
	CHECK_EQ_INT(r.status, 200);
	tr_release(&r);
	capy_http_stop(h, 1);
}

static void test_connection_cap(void)
{
	struct capy_http_opts o = { .max_connections = 2 };
	struct capy_http *h = start(&o);
	struct tconn *a, *b, *c, *d;
	struct tresp r;
	char v[64];
	int port;

	CHECK(h != NULL);
	if (!h)
		return;
	port = capy_http_port(h);
	a = tc_open(port);
	b = tc_open(port);
	CHECK(a && b);
	if (!a || !b) {
		tc_close(a);
		tc_close(b);
		capy_http_stop(h, 1);
		return;
	}
	/* both served and kept open */
	CHECK_EQ_INT(tc_sends(a, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"), 0);
	CHECK_EQ_INT(tc_response(a, &r, 3000), 0);
	CHECK_EQ_INT(r.status, 200);
	tr_release(&r);
	CHECK_EQ_INT(tc_sends(b, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"), 0);
	CHECK_EQ_INT(tc_response(b, &r, 3000), 0);
	CHECK_EQ_INT(r.status, 200);
	tr_release(&r);
	/* a third is answered 503 and closed */
	c = tc_open(port);
	CHECK(c != NULL);
	if (c) {
		CHECK_EQ_INT(tc_sends(c, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"), 0);
		CHECK_EQ_INT(tc_response(c, &r, 3000), 0);
		CHECK_EQ_INT(r.status, 503);
		CHECK(r.body.data && strstr(r.body.data, "too many connections"));
		CHECK(tr_header(&r, "Connection", v, sizeof(v)) && !strcmp(v, "close"));
		CHECK(tc_closed(c, 2000));
		tr_release(&r);
		tc_close(c);
	}
	/* past the 16 extra connections that get a 503, libmicrohttpd closes at once */
	{
		struct tconn *extra[HTTP_OVERFLOW_CONNECTIONS], *last;
		int n = 0;

		for (int i = 0; i < HTTP_OVERFLOW_CONNECTIONS; i++)
			if ((extra[n] = tc_open(port)))
				n++;
		CHECK_EQ_INT(n, HTTP_OVERFLOW_CONNECTIONS);
		sleep_ms(200);
		last = tc_open(port);
		CHECK(!last || tc_closed(last, 2000));
		tc_close(last);
		for (int i = 0; i < n; i++)
			tc_close(extra[i]);
		sleep_ms(200);
	}
	/* once one closes, there is room again */
	tc_close(a);
	sleep_ms(200);
	d = tc_open(port);
	CHECK(d != NULL);
	if (d) {
		CHECK_EQ_INT(tc_sends(d, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"), 0);
		CHECK_EQ_INT(tc_response(d, &r, 3000), 0);
		CHECK_EQ_INT(r.status, 200);
		tr_release(&r);
		tc_close(d);
	}
	tc_close(b);
	capy_http_stop(h, 1);
}

static void test_slow_clients(void)
{
	struct capy_http_opts o = { .request_timeout_ms = 300, .idle_timeout_ms = 500 };
	struct capy_http *h = start(&o);
	struct tconn *c;
	struct tresp r;
	int64_t t0, dt;
	bool closed = false;
	int port;

	CHECK(h != NULL);
	if (!h)
		return;
	port = capy_http_port(h);
	/* slowloris: headers one byte at a time */
	c = tc_open(port);
	CHECK(c != NULL);
	if (c) {
		const char *req = "GET /echo HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
		t0 = now_ms();
		for (const char *p = req; *p && !closed; p++) {
			struct pollfd pf = { .fd = c->fd, .events = POLLIN };
			if (tc_send(c, p, 1) < 0 || poll(&pf, 1, 50) > 0)
				closed = true;
		}
		closed = closed || tc_closed(c, 2000);
		dt = now_ms() - t0;
		CHECK(closed);
		CHECK_MSG(dt >= 250 && dt < 1500, "dropped after %" PRId64 " ms", dt);
		tc_close(c);
	}
	/* headers on time, the body too slow */
	c = tc_open(port);
	CHECK(c != NULL);
	if (c) {
		closed = false;
		t0 = now_ms();
		tc_sends(c, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n");
		for (int i = 0; i < 100 && !closed; i++) {
			struct pollfd pf = { .fd = c->fd, .events = POLLIN };
			if (tc_sends(c, "b") < 0 || poll(&pf, 1, 50) > 0)
				closed = true;
		}
		closed = closed || tc_closed(c, 2000);
		dt = now_ms() - t0;
		CHECK(closed);
		CHECK_MSG(dt >= 250 && dt < 1500, "dropped after %" PRId64 " ms", dt);
		tc_close(c);
	}
	{
		char *line = wait_log("\"error\":\"request timeout\"", 2000);
		CHECK(line != NULL);
		free(line);
	}
	/* an idle keep-alive connection is closed after the idle timeout, not before */
	c = tc_open(port);
	CHECK(c != NULL);
	if (c) {
		CHECK_EQ_INT(tc_sends(c, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"), 0);
		CHECK_EQ_INT(tc_response(c, &r, 3000), 0);
		tr_release(&r);
		t0 = now_ms();
		CHECK(tc_closed(c, 3000));
		dt = now_ms() - t0;
		CHECK_MSG(dt >= 400 && dt < 2000, "idle close after %" PRId64 " ms", dt);
		tc_close(c);
	}
	/* a normal request is unaffected */
	CHECK_EQ_INT(request(port, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", &r), 0);
	CHECK_EQ_INT(r.status, 200);
	tr_release(&r);
	capy_http_stop(h, 1);
	{
		char *l;
		pthread_mutex_lock(&T.mu);
		l = NULL;
		for (int i = 0; i < T.n_log; i++)
			if (strstr(T.log[i], "request timeout"))
				l = T.log[i];
		CHECK(l && strstr(l, "\"aborted\":true"));
		pthread_mutex_unlock(&T.mu);
	}
}

/* a stream the client does not read: dropped for its pile-up, or for taking nothing */
static void test_slow_reader(void)
{
	struct capy_http_opts o = { .max_stream_buffer = 256 << 10, .write_timeout_ms = 400 };
	struct capy_http *h = start(&o);
	struct tconn *c;
	struct tresp r;
	char *line;

	CHECK(h != NULL);
	if (!h)
		return;
	/* fast writer: the buffer fills */
	c = tc_open_rcvbuf(capy_http_port(h), 4096);
	CHECK(c != NULL);
	if (c) {
		CHECK_EQ_INT(tc_sends(c, "POST /stream?mode=fail&size=16384&interval=1 HTTP/1.1\r\n"
					 "Host: x\r\nContent-Length: 0\r\n\r\n"),
			     0);
		CHECK_EQ_INT(tc_head(c, &r, now_ms() + 3000), 0);
		join_writer();
		CHECK_EQ_INT(T.write_rc, CAPY_ECANCELED);
		CHECK(wait_int(&T.cancels, 1, 2000));
		line = wait_log("\"path\":\"/stream\"", 3000);
		CHECK(line && strstr(line, "\"aborted\":true"));
		CHECK(line && (strstr(line, "\"error\":\"client too slow\"") ||
			       strstr(line, "\"error\":\"client not reading\"")));
		free(line);
		CHECK(tc_closed(c, 3000));
		tr_release(&r);
		tc_close(c);
	}
	capy_http_stop(h, 1);

	/* a writer that stays under a large buffer limit: the write timeout. The kernel's socket
	 * buffers (up to 4 MiB of send buffer here) fill first, in about a second. */
	o.max_stream_buffer = 64u << 20;
	h = start(&o);
	CHECK(h != NULL);
	if (!h)
		return;
	c = tc_open_rcvbuf(capy_http_port(h), 4096);
	CHECK(c != NULL);
	if (c) {
		CHECK_EQ_INT(tc_sends(c, "POST /stream?mode=fail&size=65536&interval=20 HTTP/1.1\r\n"
					 "Host: x\r\nContent-Length: 0\r\n\r\n"),
			     0);
		CHECK_EQ_INT(tc_head(c, &r, now_ms() + 3000), 0);
		join_writer();
		CHECK_EQ_INT(T.write_rc, CAPY_ECANCELED);
		CHECK(wait_int(&T.cancels, 1, 2000));
		line = wait_log("\"path\":\"/stream\"", 3000);
		CHECK(line && strstr(line, "\"error\":\"client not reading\""));
		free(line);
		tr_release(&r);
		tc_close(c);
	}
	capy_http_stop(h, 1);
}

static void test_garbage(void)
{
	struct capy_http_opts o = { 0 };
	struct capy_http *h = start(&o);
	static const char *const bad[] = {
		"\x01\x02\x03 garbage \xff\xfe\r\n\r\n",
		"GET /hea",
		"GET /echo HTTP/1.1\r\nHost: x\r\nBad Header Line\r\n\r\n",
		"GET /echo HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
		"GET /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n",
		"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
		"GET /echo HTTP/9.9\r\nHost: x\r\n\r\n",
		"\r\n\r\n\r\n",
		"GET\r\n\r\n",
	};
	struct tresp r;
	int port;

	CHECK(h != NULL);
	if (!h)
		return;
	port = capy_http_port(h);
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		struct tconn *c = tc_open(port);
		CHECK(c != NULL);
		if (!c)
			continue;
		tc_sends(c, bad[i]);
		if (i == 1)
			shutdown(c->fd, SHUT_WR); /* a request line cut short */
		if (tc_response(c, &r, 1000) == 0)
			CHECK_MSG(r.status >= 400 && r.status < 600, "case %zu: status %d", i, r.status);
		tr_release(&r);
		tc_close(c);
	}
	/* an unknown method is a 405 of ours */
	CHECK_EQ_INT(request(port, "FOO /echo HTTP/1.1\r\nHost: x\r\n\r\n", &r), 0);
	CHECK_EQ_INT(r.status, 405);
	tr_release(&r);
	CHECK_EQ_INT(request(port, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", &r), 0);
	CHECK_EQ_INT(r.status, 200);
	tr_release(&r);
	capy_http_stop(h, 1);
}

static void test_listen(void)
{
	struct capy_http_opts o = { 0 }, o2 = { 0 };
	struct capy_http *h = start(&o), *h2 = NULL;
	struct capy_err err = { 0 };
	struct tresp r;
	char want[128];

	CHECK(h != NULL);
	if (!h)
		return;
	o2.routes = routes;
	o2.n_routes = ARRAY_SIZE(routes);
	o2.port = capy_http_port(h);
	CHECK(capy_http_start(&h2, &o2, &err) < 0);
	CHECK(h2 == NULL);
	snprintf(want, sizeof(want),
		 "cannot listen on 127.0.0.1:%d: address already in use (is another capy-serve "
		 "running?)",
		 o2.port);
	CHECK_STR(err.msg, want);
	/* the first server is unharmed */
	CHECK_EQ_INT(request(o2.port, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n", &r), 0);
	CHECK_EQ_INT(r.status, 200);
	tr_release(&r);
	capy_http_stop(h, 1);

	o2.host = "no-such-host.invalid";
	o2.port = 0;
	CHECK(capy_http_start(&h2, &o2, &err) < 0);
	CHECK_CONTAINS(err.msg, "cannot resolve host 'no-such-host.invalid'");
	o2.host = "127.0.0.1";
	o2.port = 70000;
	CHECK_EQ_INT(capy_http_start(&h2, &o2, &err), CAPY_EINVAL);
	/* names and IPv6 literals */
	o2.port = 0;
	o2.host = "localhost";
	CHECK_EQ_INT(capy_http_start(&h2, &o2, &err), 0);
	if (h2)
		capy_http_stop(h2, 1);
	h2 = NULL;
	o2.host = "::1";
	if (capy_http_start(&h2, &o2, &err) == 0) {
		CHECK(capy_http_port(h2) > 0);
		capy_http_stop(h2, 1);
	} else {
		fprintf(stderr, "note: no IPv6 loopback here (%s)\n", err.msg);
	}
	/* a route without a handler is refused */
	{
		static const struct capy_http_route bad[] = { { "/x", "GET", NULL, NULL, false } };
		o2.host = NULL;
		o2.routes = bad;
		o2.n_routes = 1;
		CHECK_EQ_INT(capy_http_start(&h2, &o2, &err), CAPY_EINVAL);
		CHECK_CONTAINS(err.msg, "no handler");
	}
}

static bool connect_refused(int port)
{
	struct tconn *c = tc_open(port);

	if (!c)
		return true;
	/* accepted by the kernel after all: refused only if nobody answers */
	tc_close(c);
	return false;
}

static void test_quiesce_stop(void)
{
	struct capy_http_opts o = { 0 };
	struct capy_http *h = start(&o);
	struct tconn *c;
	struct tresp r;
	struct capy_buf b = { 0 };
	int64_t t0, dt;
	int port;

	CHECK(h != NULL);
	if (!h)
		return;
	port = capy_http_port(h);
	c = tc_open(port);
	CHECK(c != NULL);
	if (!c) {
		capy_http_stop(h, 1);
		return;
	}
	/* a stream that never ends by itself */
	CHECK_EQ_INT(tc_sends(c, "POST /stream?mode=fail&size=8&interval=30 HTTP/1.1\r\n"
				 "Host: x\r\nContent-Length: 0\r\n\r\n"),
		     0);
	CHECK_EQ_INT(tc_head(c, &r, now_ms() + 3000), 0);
	CHECK(tc_chunk(c, &b, now_ms() + 3000) > 0);
	capy_http_quiesce(h);
	capy_http_quiesce(h); /* idempotent */
	CHECK(connect_refused(port));
	CHECK(tc_chunk(c, &b, now_ms() + 3000) > 0); /* the stream goes on */
	CHECK_EQ_INT(T.cancels, 0);
	t0 = now_ms();
	capy_http_stop(h, 0.3);
	dt = now_ms() - t0;
	CHECK_MSG(dt >= 250 && dt < 2000, "stop took %" PRId64 " ms", dt);
	CHECK_EQ_INT(T.cancels, 1);
	CHECK(tc_closed(c, 2000));
	join_writer(); /* its writes failed after stop; it closed the stream afterwards */
	CHECK_EQ_INT(T.write_rc, CAPY_ECANCELED);
	{
		char *line = wait_log("\"error\":\"server stopping\"", 2000);
		CHECK(line && strstr(line, "\"writer\":\"done\""));
		free(line);
	}
	tr_release(&r);
	capy_buf_release(&b);
	tc_close(c);

	/* a stream that finishes within the bound is not cancelled */
	h = start(&o);
	CHECK(h != NULL);
	if (!h)
		return;
	c = tc_open(capy_http_port(h));
	CHECK(c != NULL);
	if (c) {
		CHECK_EQ_INT(tc_sends(c, "POST /stream?mode=finite&size=5&interval=100 HTTP/1.1\r\n"
					 "Host: x\r\nContent-Length: 0\r\n\r\n"),
			     0);
		CHECK_EQ_INT(tc_head(c, &r, now_ms() + 3000), 0);
		t0 = now_ms();
		capy_http_stop(h, 5);
		dt = now_ms() - t0;
		CHECK_MSG(dt < 2000, "stop took %" PRId64 " ms", dt);
		CHECK_EQ_INT(T.cancels, 0);
		while (tc_chunk(c, &b, now_ms() + 2000) > 0)
			;
		CHECK_EQ_U64(b.len, 15);
		join_writer();
		CHECK_EQ_INT(T.write_rc, 0);
		tr_release(&r);
		capy_buf_release(&b);
		tc_close(c);
	} else {
		capy_http_stop(h, 1);
	}
}

/* internals: constant-time key check, method lists */
static void test_auth_check(void)
{
	static const char *const keys[] = { "alpha", "beta-key" };
	struct capy_http h = { 0 };

	CHECK_EQ_INT(http_auth_init(&h, keys, 2, NULL), 0);
	CHECK(http_auth_check(&h, "Bearer alpha", NULL));
	CHECK(http_auth_check(&h, "BEARER\tbeta-key", NULL));
	CHECK(http_auth_check(&h, NULL, " beta-key "));
	CHECK(!http_auth_check(&h, "Bearer alph", NULL));
	CHECK(!http_auth_check(&h, "Bearer alphaa", NULL));
	CHECK(!http_auth_check(&h, "Bearer ", NULL));
	CHECK(!http_auth_check(&h, "Bearer", NULL));
	CHECK(!http_auth_check(&h, "Basic alpha", NULL));
	CHECK(!http_auth_check(&h, "Beareralpha", NULL));
	CHECK(!http_auth_check(&h, NULL, ""));
	CHECK(!http_auth_check(&h, NULL, NULL));
	CHECK(!http_auth_check(&h, "", "alpha\x01"));
	free(h.keys);
	h.keys = NULL;
	CHECK(http_auth_init(&h, (const char *const[]){ "" }, 1, NULL) < 0);
}

int main(void)
{
	capy_log_set_level(CAPY_LOG_ERROR);
	RUN(test_auth_check);
	RUN(test_plain);
	RUN(test_keepalive);
	RUN(test_body_bytes);
	RUN(test_stream);
	RUN(test_stream_from_handler);
	RUN(test_stream_disconnect);
	RUN(test_silent_stream_disconnect);
	RUN(test_wait_disconnect);
	RUN(test_auth);
	RUN(test_limits);
	RUN(test_connection_cap);
	RUN(test_slow_clients);
	RUN(test_slow_reader);
	RUN(test_garbage);
	RUN(test_listen);
	RUN(test_quiesce_stop);
	reset_state();
	return test_summary();
}
