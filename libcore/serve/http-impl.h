/* http-impl.h - what the files of the HTTP layer share; included only by libcore/serve/http*.c.
 *
 * Objects and their owners:
 *   struct capy_http            the server; refcounted: the owner (until capy_http_stop) plus
 *                               one per live exchange, so late stream closes stay safe.
 *   struct http_conn            one TCP connection, libmicrohttpd's socket context; created and
 *                               unlinked by its notify callback; freed by the watcher (which
 *                               may hold a pointer across poll()) or at stop.
 *   struct capy_http_exchange   one request; refcounted: libmicrohttpd's side (until the request
 *                               completes), the stream's writer (until stream_close), the
 *                               streaming response object (until libmicrohttpd frees it), and
 *                               short-lived references taken to run cancel callbacks. The last
 *                               reference writes the log line and frees it.
 *
 * Locks: h->lock (connections, phases, counts) before x->mu (answer, stream buffer, fate,
 * cancel, log fields). No lock is held while a callback runs.
 */
#ifndef CAPY_SERVE_HTTP_IMPL_H
#define CAPY_SERVE_HTTP_IMPL_H

#include "http.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <microhttpd.h>

#define HTTP_OVERFLOW_CONNECTIONS 16 /* answered 503 beyond max_connections */
#define HTTP_WATCH_TICK_MS 100       /* the watcher's longest sleep */

enum http_phase {
	HTTP_IDLE,      /* between requests: the watcher waits for a first byte */
	HTTP_RECEIVING, /* a request is arriving: it must be complete by deadline_ms */
	HTTP_SERVING,   /* the handler runs or the stream is open: hang-ups are watched */
	HTTP_SENDING,   /* a whole answer is being sent: done by deadline_ms */
};

struct http_conn {
	struct http_conn *prev, *next; /* h->conns; h->dead once libmicrohttpd closed it */
	int fd;
	bool over_limit; /* beyond max_connections: answered 503 and closed */
	bool killed;     /* the watcher shut it down */
	bool hup;        /* hung up while idle: libmicrohttpd is closing it, do not poll it */
	enum http_phase phase;
	uint64_t seq;        /* bumped on every phase change */
	int64_t since_ms;    /* when the phase began */
	int64_t deadline_ms; /* RECEIVING and SENDING */
	struct capy_http_exchange *x; /* the request in progress */
	char remote[64];
};

struct capy_http {
	/* the options, copied */
	char *host;
	struct capy_http_route *routes;
	size_t n_routes;
	uint8_t (*keys)[32]; /* SHA-256 of each API key */
	size_t n_keys;
	uint64_t max_body;
	size_t max_header;
	unsigned max_connections;
	int64_t request_timeout_ms, idle_timeout_ms, write_timeout_ms;
	size_t max_stream_buffer;
	capy_http_error_fn error_body;
	void *error_arg;
	capy_http_log_fn log;
	void *log_arg;

	struct MHD_Daemon *mhd;
	int listen_fd; /* ours to close after quiesce */
	int port;
	atomic_int refs;
	atomic_bool quiesced, draining;
	uint32_t id_salt;
	atomic_uint_fast64_t id_next;

	pthread_mutex_t lock;
	pthread_cond_t cv; /* n_active went down */
	struct http_conn *conns, *dead;
	unsigned n_conns, n_normal;
	unsigned n_active; /* exchanges libmicrohttpd has not completed */

	pthread_t watcher;
	bool watching, watch_stop;
	int wake_fd; /* eventfd */
};

enum http_answer { HTTP_ANS_NONE, HTTP_ANS_PLAIN, HTTP_ANS_STREAM };

struct capy_http_stream {
	struct capy_http_exchange *x;
};

struct http_header {
	char *name, *value;
};

struct capy_http_exchange {
	struct capy_http *h;
	struct capy_http_stream st;
	atomic_int refs;
	pthread_mutex_t mu;
	pthread_cond_t cv; /* stream data, close, gone; a cancel callback finished */

	/* the connection thread's; conn under h->lock */
	struct MHD_Connection *mc;
	struct http_conn *conn; /* NULL once libmicrohttpd completed the request */
	const struct capy_http_route *route;
	bool started;     /* the first access-handler call happened */
	char *method;     /* NULL until headers were read */
	char *path;       /* decoded, for handlers */
	char *log_path;   /* as sent, without the query */
	char *query;
	char id[40];
	char remote[64];
	char ts[32];      /* wall-clock start, ISO 8601 UTC */
	int64_t t_start_ms, t_end_ms;
	struct capy_buf body;
	bool body_over;

	/* the answer (mu) */
	enum http_answer ans;
	int status;
	char *ctype;
	char *resp;
	size_t resp_len;
	struct http_header *hdrs;
	size_t n_hdrs;

	/* the stream (mu) */
	struct capy_buf out;
	size_t out_off;
	bool closed;     /* the writer closed it */
	bool queued;     /* handed to libmicrohttpd: the handler returned */
	bool ended;      /* the reader reported the end to libmicrohttpd */
	int64_t last_drain_ms;
	uint64_t bytes;  /* body bytes handed to libmicrohttpd */

	/* the fate (mu; gone also read without it) */
	atomic_bool gone;
	const char *fate; /* why it ended early */
	bool drop;        /* the watcher is to shut the connection down */

	/* cancel (mu) */
	capy_http_cancel_fn cancel_fn;
	void *cancel_arg;
	bool armed, fired, firing;
	pthread_t firing_thread;

	struct capy_buf logx; /* ,"key":value... (mu) */
};

/* http.c */
int64_t http_now_ms(void);
void http_server_unref(struct capy_http *h);
void http_wake(struct capy_http *h);
void http_set_phase(struct capy_http *h, struct http_conn *c, enum http_phase p,
		    int64_t now); /* h->lock held */

/* http-exchange.c */
struct capy_http_exchange *http_exchange_new(struct capy_http *h, struct http_conn *c,
					     const char *uri);
void http_exchange_ref(struct capy_http_exchange *x);
void http_exchange_unref(struct capy_http_exchange *x);
/* Mark x gone for reason fate (the first reason sticks); true if it was not gone before. */
bool http_exchange_gone(struct capy_http_exchange *x, const char *fate);
void http_fire_cancel(struct capy_http_exchange *x);
void http_disarm_cancel(struct capy_http_exchange *x);
ssize_t http_stream_read(void *cls, uint64_t pos, char *buf, size_t max);
void http_stream_read_done(void *cls);

/* http-watch.c */
int http_watch_start(struct capy_http *h, struct capy_err *err);
void http_watch_stop(struct capy_http *h);

/* http-listen.c */
/* Resolve host and listen on port; fd is non-blocking and close-on-exec. */
int http_listen(const char *host, int port, int *fd, int *bound_port, int *family,
		struct capy_err *err);
/* "127.0.0.1:8080", "[::1]:8080" */
void http_format_addr(const struct sockaddr *sa, char *buf, size_t size);

/* http-auth.c */
int http_auth_init(struct capy_http *h, const char *const *keys, size_t n, struct capy_err *err);
/* Whether either credential (NULLs allowed) carries a configured key; constant time in the
 * keys. */
bool http_auth_check(const struct capy_http *h, const char *authorization, const char *x_api_key);

#endif
