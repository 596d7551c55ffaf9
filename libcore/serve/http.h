/* http.h - capy-serve's HTTP layer: libmicrohttpd below, the API handlers on top.
 *
 * The layer knows nothing about models or APIs. It listens, reads requests, routes them by
 * path and method, checks API keys, enforces limits, and hands each request (an exchange) to
 * the handler of its route, which answers once: with a whole body, or with a stream that any
 * thread writes into. It notices clients that go away, drops clients that are too slow, and
 * writes one JSON log line per request.
 *
 *	static void chat(struct capy_http_exchange *x, void *arg)
 *	{
 *		size_t len;
 *		const char *body = capy_http_body(x, &len);
 *		...parse; if the request wants a stream:
 *		struct capy_http_stream *st = capy_http_stream_open(x, 200, NULL);
 *		capy_http_on_cancel(x, cancel_generation, job);  (runs once if the client goes)
 *		submit(job, st);  (the engine thread calls capy_http_stream_write(st, ...) per
 *		                   event, capy_http_log_field(capy_http_stream_exchange(st), ...),
 *		                   then capy_http_stream_close(st))
 *	}
 *	static const struct capy_http_route routes[] = {
 *		{ "/v1/chat/completions", "POST", chat, NULL, false },
 *		{ "/health", "GET,HEAD", health, NULL, true },
 *	};
 *	struct capy_http_opts o = { .port = 8080, .routes = routes, .n_routes = 2,
 *				    .api_keys = keys, .n_api_keys = 1 };
 *	if (capy_http_start(&h, &o, &err) < 0)
 *		die("%s", err.msg);  ("cannot listen on 127.0.0.1:8080: address already in use
 *				       (is another capy-serve running?)")
 *	...
 *	capy_http_quiesce(h);
 *	capy_http_stop(h, 10);
 *
 * DESIGN
 *
 * Concurrency: one thread per connection (libmicrohttpd's MHD_USE_THREAD_PER_CONNECTION).
 * The handler runs on its connection's thread and may block as long as it likes (waiting for
 * the engine to finish a non-streamed answer, say): nothing else shares that thread, so no
 * event loop stalls and no suspend/resume dance is needed. Connections are few (coding agents,
 * a handful each; --max-connections bounds them), so a thread each is cheap, and blocking code
 * is simpler to get right than callbacks. A streamed answer is produced by another thread (the
 * engine's) writing into the stream; the connection thread, once the handler has returned,
 * sleeps in libmicrohttpd's content callback until bytes arrive and hands them on as one HTTP
 * chunk each, so every write is on the wire at once. Writes only append to a buffer: a slow
 * client never blocks the engine.
 *
 * One watcher thread per server polls the sockets of the connections that libmicrohttpd is not
 * reading at the moment: it sees a client hang up (POLLRDHUP, POLLHUP, POLLERR) while its
 * handler runs or its stream waits for the engine, and then marks the exchange gone and runs
 * its cancel callback. It also enforces the time limits (below), by shutting the socket down,
 * which makes libmicrohttpd's thread give the connection up. libmicrohttpd's own inactivity
 * timeout is off: it would also fire while a handler or stream is legitimately quiet.
 *
 * Limits and answers (error bodies in the route's API shape, through opts.error_body):
 *   - more than max_connections open connections: the request of each extra connection is
 *     answered 503 "too many connections" and the connection closed (it must send its request
 *     within request_timeout_ms), for up to 16 extra connections at a time; past those,
 *     libmicrohttpd accepts a connection and closes it at once, unanswered (0.9.75 offers no
 *     hook to answer there);
 *   - request headers over max_header: 431; far over it (past libmicrohttpd's per-connection
 *     memory, about twice max_header) libmicrohttpd answers 431 itself with an HTML body;
 *   - a body over max_body: 413 (at once from Content-Length, or after reading and dropping a
 *     chunked body; the connection is closed when the body was not read);
 *   - unknown path 404, known path with another method 405 with Allow, a protected path
 *     without a valid key 401, a request arriving while stopping 503;
 *   - a request whose headers and body take longer than request_timeout_ms from its first
 *     byte (slowloris) is dropped without an answer; so is a connection idle between requests
 *     for idle_timeout_ms, a client that takes no bytes of a stream for write_timeout_ms
 *     while some wait (or does not take a whole answer within write_timeout_ms), and one
 *     that lets more than max_stream_buffer bytes of a stream pile up;
 *   - malformed HTTP is answered 400 by libmicrohttpd (HTML body) or the connection is closed.
 *
 * Thread-safety: capy_http_start/quiesce/stop from one controlling thread (not from a
 * handler). The exchange functions are for the handler while it runs, on its thread, except
 * where marked "any thread". Callbacks (handler, cancel, error_body, log) run without any
 * lock of this layer held.
 */
#ifndef CAPY_SERVE_HTTP_H
#define CAPY_SERVE_HTTP_H

#include "../util/buf.h"
#include "../util/err.h"

struct capy_http;
struct capy_http_exchange;
struct capy_http_stream;

/* Answer the request: capy_http_respond*() or capy_http_stream_open() before returning. A
 * handler that returns without answering gets a 500 sent for it (or, if the client is gone,
 * the connection closed). */
typedef void (*capy_http_handler_fn)(struct capy_http_exchange *x, void *arg);
/* The client went away (or the server is stopping) before the answer was complete. */
typedef void (*capy_http_cancel_fn)(void *arg);
/* Append an error body for (path, status, message) to out: JSON in the API's shape. */
typedef void (*capy_http_error_fn)(void *arg, const char *path, int status, const char *message,
				   struct capy_buf *out);
/* One finished request: a JSON object, no newline. May run on any thread. */
typedef void (*capy_http_log_fn)(void *arg, const char *line, size_t len);

struct capy_http_route {
	const char *path;    /* exact, or a prefix when its last character is '*' */
	const char *methods; /* comma-separated, case-sensitive: "POST", "GET,HEAD" */
	capy_http_handler_fn fn;
	void *arg;
	bool open; /* served without an API key (/health, /metrics) */
};

/* Zero means the default for every number. The server copies what it needs: nothing here has
 * to outlive capy_http_start() except the callbacks' arguments. */
struct capy_http_opts {
	const char *host; /* IPv4 or IPv6 literal or a name; NULL: 127.0.0.1 */
	int port;         /* 0: a free port (capy_http_port) */
	const struct capy_http_route *routes; /* first match wins */
	size_t n_routes;
	const char *const *api_keys; /* none: every path is open */
	size_t n_api_keys;
	uint64_t max_body;          /* bytes; 32 MiB */
	size_t max_header;          /* bytes of request line and headers; 64 KiB */
	unsigned max_connections;   /* open connections served; 64 */
	unsigned request_timeout_ms; /* first byte to complete request; 30 s */
	unsigned idle_timeout_ms;    /* keep-alive connection between requests; 75 s */
	unsigned write_timeout_ms;   /* pending answer bytes not taken by the client; 60 s */
	size_t max_stream_buffer;    /* stream bytes written but not yet sent; 16 MiB */
	capy_http_error_fn error_body; /* NULL: capy_http_error_openai */
	void *error_arg;
	capy_http_log_fn log; /* NULL: capy_log_info */
	void *log_arg;
};

/* Listen and serve on background threads. Fails with the reason: "cannot listen on
 * 127.0.0.1:8080: address already in use (is another capy-serve running?)", "cannot resolve
 * host 'x': ...", or an invalid option. The socket is created here without SO_REUSEPORT, so a
 * second server on a busy port is refused. */
int capy_http_start(struct capy_http **out, const struct capy_http_opts *opts,
		    struct capy_err *err);
/* The port listened on (the chosen one when opts.port was 0). */
int capy_http_port(const struct capy_http *h);
/* Stop accepting connections (new ones are refused: the listening socket is closed). Requests
 * on open connections are still served, with "Connection: close". Idempotent. */
void capy_http_quiesce(struct capy_http *h);
/* Quiesce, wait up to timeout_s for the requests in flight to finish (new requests on open
 * connections get 503), then cancel the rest (their cancel callbacks run, their streams fail),
 * close every connection and free the server. Handlers still running must return once
 * cancelled: this waits for them. Streams still open stay valid until their writer closes
 * them; writes fail, close frees them (and logs the request). */
void capy_http_stop(struct capy_http *h, double timeout_s);

/* --- the exchange: one request and its answer ------------------------------------------ */

/* The request, valid until the handler returns. The path has its query string removed (and
 * percent-escapes decoded); the query is "" when there is none ("beta=true" for
 * "/v1/messages?beta=true"). Header names are case-insensitive; NULL when absent. The body is
 * NUL-terminated for convenience but may hold NUL bytes: use len. */
const char *capy_http_method(const struct capy_http_exchange *x);
const char *capy_http_path(const struct capy_http_exchange *x);
const char *capy_http_query(const struct capy_http_exchange *x);
const char *capy_http_header(const struct capy_http_exchange *x, const char *name);
const char *capy_http_body(const struct capy_http_exchange *x, size_t *len);
/* "127.0.0.1:50312", "[::1]:50312"; and the request id ("req_..."), also sent back as
 * x-request-id. Any thread, while the exchange is held. */
const char *capy_http_remote(const struct capy_http_exchange *x);
const char *capy_http_request_id(const struct capy_http_exchange *x);

/* An extra header for the answer, before answering; CAPY_EINVAL for CR, LF or an empty or
 * malformed name. */
int capy_http_add_header(struct capy_http_exchange *x, const char *name, const char *value);
/* Answer with a whole body (copied; content_type NULL: application/json). CAPY_EINVAL if
 * already answered. After it returns, the cancel callback no longer runs. */
int capy_http_respond(struct capy_http_exchange *x, int status, const char *content_type,
		      const void *body, size_t len);
/* Answer with an error body from opts.error_body for this path. */
int capy_http_respond_error(struct capy_http_exchange *x, int status, const char *message);

/* Answer with a stream: status and headers go out when the handler returns, then each write
 * as it is made (chunked; content_type NULL: text/event-stream; Cache-Control: no-cache).
 * NULL if already answered or out of memory. The stream stays valid, on any thread, until
 * capy_http_stream_close(), which every stream must get; the exchange is held as long. */
struct capy_http_stream *capy_http_stream_open(struct capy_http_exchange *x, int status,
					       const char *content_type);
/* Append n bytes (any thread; never blocks on the client). CAPY_ECANCELED once the client is
 * gone, too slow (more than max_stream_buffer pending: it is then dropped) or the server is
 * stopping; the bytes are then discarded. */
int capy_http_stream_write(struct capy_http_stream *st, const void *p, size_t n);
bool capy_http_stream_gone(const struct capy_http_stream *st);
struct capy_http_exchange *capy_http_stream_exchange(struct capy_http_stream *st);
/* End the stream (the last bytes still go out) and release it. After it returns, the cancel
 * callback no longer runs and st is gone. */
void capy_http_stream_close(struct capy_http_stream *st);

/* Whether the client went away (hung up, half-closed, dropped for being slow, or the server
 * stops) before the answer was complete. Non-blocking, any thread, while the exchange is held:
 * a handler waiting on a condition variable can check it on each wake-up. */
bool capy_http_client_gone(const struct capy_http_exchange *x);
/* Call fn(arg) once, from a thread of this layer, when the client goes away (or the server
 * stops) while the answer is still open; at once, on this thread, if it is already gone.
 * Never after capy_http_respond() or capy_http_stream_close() returned: those wait for a
 * running fn (unless called from fn itself), so fn must be quick (set a flag, signal) and
 * must not wait for the thread that answers. An answer completed just as the departure is
 * noticed may get no call: there was nothing left to cancel. One callback per exchange; a
 * second call replaces the first. */
void capy_http_on_cancel(struct capy_http_exchange *x, capy_http_cancel_fn fn, void *arg);
/* Add "key": raw_json to the request's log line (raw_json is trusted to be one JSON value:
 * 42, "text", {"a":1}). Any thread, while the exchange is held. CAPY_ENOMEM on failure. */
int capy_http_log_field(struct capy_http_exchange *x, const char *key, const char *raw_json);

/* The default error body, OpenAI's shape:
 * {"error":{"message":"...","type":"invalid_request_error","param":null,"code":null}}. */
void capy_http_error_openai(void *arg, const char *path, int status, const char *message,
			    struct capy_buf *out);

#endif
