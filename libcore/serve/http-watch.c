/* http-watch.c - the watcher thread: hang-ups while a request is served, and time limits.
 *
 * libmicrohttpd's connection thread does not look at its socket while the handler runs or
 * while the stream waits for the engine, so a client that leaves then would go unnoticed
 * until the next write. The watcher polls those sockets for POLLRDHUP (peer closed or
 * half-closed), POLLHUP and POLLERR, without reading anything, and marks the exchange gone
 * and runs its cancel callback at once.
 *
 * It also polls idle connections for POLLIN, which starts the request timeout at a request's
 * first byte, and enforces every deadline by shutting the socket down (shutdown(2), never
 * close(2): the descriptor stays libmicrohttpd's, and it is only closed after the connection's
 * notify callback, which takes h->lock, so a shut-down under h->lock never hits a reused
 * number). It sleeps until the next deadline, a wake-up through wake_fd, or at most
 * HTTP_WATCH_TICK_MS (stream flags set by writers are seen on the next tick).
 */
#include "http-impl.h"

#include "../util/log.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

struct watch {
	struct pollfd *pfd;
	struct http_conn **conn;
	uint64_t *seq;
	size_t cap;
	struct capy_http_exchange **fire; /* referenced; cancelled once the lock is released */
	size_t n_fire, fire_cap;
};

static bool grow(struct watch *w, size_t n)
{
	if (n > w->cap) {
		size_t cap = CAPY_MAX(n, 2 * w->cap);
		struct pollfd *pfd = realloc(w->pfd, cap * sizeof(*pfd));
		struct http_conn **conn;
		uint64_t *seq;

		if (pfd)
			w->pfd = pfd;
		conn = pfd ? realloc(w->conn, cap * sizeof(*conn)) : NULL;
		if (conn)
			w->conn = conn;
		seq = conn ? realloc(w->seq, cap * sizeof(*seq)) : NULL;
		if (!seq)
			return false;
		w->seq = seq;
		w->cap = cap;
	}
	if (n > w->fire_cap) {
		size_t cap = CAPY_MAX(n, 2 * w->fire_cap);
		struct capy_http_exchange **fire = realloc(w->fire, cap * sizeof(*fire));

		if (!fire)
			return false;
		w->fire = fire;
		w->fire_cap = cap;
	}
	return true;
}

/* h->lock held: mark x gone for reason and queue its cancel callback */
static void doom(struct watch *w, struct capy_http_exchange *x, const char *reason)
{
	http_exchange_gone(x, reason);
	if (w->n_fire < w->fire_cap) {
		http_exchange_ref(x);
		w->fire[w->n_fire++] = x;
	}
}

static void fire_all(struct watch *w)
{
	for (size_t i = 0; i < w->n_fire; i++) {
		http_fire_cancel(w->fire[i]);
		http_exchange_unref(w->fire[i]);
	}
	w->n_fire = 0;
}

/* h->lock held */
static void drop(struct capy_http *h, struct watch *w, struct http_conn *c, const char *reason)
{
	(void)h;
	shutdown(c->fd, SHUT_RDWR);
	c->killed = true;
	if (c->x)
		doom(w, c->x, reason);
	capy_log_debug("http: %s: connection dropped (%s)", c->remote, reason);
}

/* What to poll a served connection for and when it is due; NULL, or why to drop it now. */
static const char *serving(struct capy_http *h, struct http_conn *c, int64_t now, short *ev,
			   int64_t *due)
{
	struct capy_http_exchange *x = c->x;
	const char *why = NULL;

	if (!x)
		return NULL;
	pthread_mutex_lock(&x->mu);
	if (x->drop) {
		why = x->fate ? x->fate : "client too slow";
	} else {
		/* once a stream has handed its last byte over, a hang-up is the client done
		 * reading, not a departure (a failed send still reports one) */
		if (!c->hup && !atomic_load(&x->gone) && !x->ended)
			*ev = POLLRDHUP;
		/* a stream whose bytes wait for a client that takes none (while the handler
		 * still runs, they wait for it instead) */
		if (x->ans == HTTP_ANS_STREAM && x->queued &&
		    (x->out.len > x->out_off || x->ended)) {
			*due = x->last_drain_ms + h->write_timeout_ms;
			if (now >= *due)
				why = "client not reading";
		}
	}
	pthread_mutex_unlock(&x->mu);
	return why;
}

static void *watch_main(void *arg)
{
	struct capy_http *h = arg;
	struct watch w = { 0 };

	pthread_mutex_lock(&h->lock);
	while (!h->watch_stop) {
		int64_t now = http_now_ms(), wait = HTTP_WATCH_TICK_MS;
		size_t n = 1;
		uint64_t drained;

		/* conns libmicrohttpd closed since the last round: no pointer to them is left */
		for (struct http_conn *d = h->dead, *next; d; d = next) {
			next = d->next;
			free(d);
		}
		h->dead = NULL;
		if (!grow(&w, h->n_conns + 1)) {
			pthread_mutex_unlock(&h->lock);
			poll(NULL, 0, HTTP_WATCH_TICK_MS);
			pthread_mutex_lock(&h->lock);
			continue;
		}
		w.pfd[0] = (struct pollfd){ .fd = h->wake_fd, .events = POLLIN };
		for (struct http_conn *c = h->conns; c; c = c->next) {
			const char *why = NULL;
			int64_t due = 0;
			short ev = 0;

			if (c->killed)
				continue;
			switch (c->phase) {
			case HTTP_IDLE:
				if (!c->hup)
					ev = POLLIN;
				/* a connection beyond the cap gets its 503 soon or goes */
				due = c->since_ms + (c->over_limit ? h->request_timeout_ms
								   : h->idle_timeout_ms);
				if (now >= due)
					why = "idle timeout";
				break;
			case HTTP_RECEIVING:
				due = c->deadline_ms;
				if (now >= due)
					why = "request timeout";
				break;
			case HTTP_SERVING:
				why = serving(h, c, now, &ev, &due);
				break;
			case HTTP_SENDING:
				due = c->deadline_ms;
				if (now >= due)
					why = "client not reading";
				break;
			}
			if (why) {
				drop(h, &w, c, why);
				continue;
			}
			if (due)
				wait = CAPY_MIN(wait, due - now);
			if (ev) {
				w.pfd[n] = (struct pollfd){ .fd = c->fd, .events = ev };
				w.conn[n] = c;
				w.seq[n] = c->seq;
				n++;
			}
		}
		pthread_mutex_unlock(&h->lock);
		fire_all(&w);

		poll(w.pfd, n, (int)CAPY_MAX(wait, 0));
		if ((w.pfd[0].revents & POLLIN) && read(h->wake_fd, &drained, sizeof(drained)) < 0)
			(void)0;

		pthread_mutex_lock(&h->lock);
		now = http_now_ms();
		for (size_t i = 1; i < n; i++) {
			struct http_conn *c = w.conn[i];
			short re = w.pfd[i].revents;

			if (!re || c->seq != w.seq[i])
				continue; /* nothing, or it moved on (or closed) meanwhile */
			if (c->phase == HTTP_IDLE) {
				if (re & POLLIN)
					http_set_phase(h, c, HTTP_RECEIVING, now);
				else
					c->hup = true; /* libmicrohttpd is closing it */
			} else if (c->phase == HTTP_SERVING && c->x &&
				   (re & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))) {
				bool ended;

				pthread_mutex_lock(&c->x->mu);
				ended = c->x->ended;
				pthread_mutex_unlock(&c->x->mu);
				c->hup = true;
				if (!ended)
					doom(&w, c->x, "client gone");
			}
		}
		pthread_mutex_unlock(&h->lock);
		fire_all(&w);
		pthread_mutex_lock(&h->lock);
	}
	pthread_mutex_unlock(&h->lock);
	free(w.pfd);
	free(w.conn);
	free(w.seq);
	free(w.fire);
	return NULL;
}

int http_watch_start(struct capy_http *h, struct capy_err *err)
{
	int rc;

	if ((h->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
		return capy_err_errno(err, errno, "cannot create an eventfd");
	if ((rc = pthread_create(&h->watcher, NULL, watch_main, h))) {
		close(h->wake_fd);
		h->wake_fd = -1;
		return capy_err_errno(err, rc, "cannot start the HTTP watcher thread");
	}
	h->watching = true;
	return 0;
}

void http_watch_stop(struct capy_http *h)
{
	struct http_conn *dead;

	pthread_mutex_lock(&h->lock);
	h->watch_stop = true;
	pthread_mutex_unlock(&h->lock);
	http_wake(h);
	pthread_join(h->watcher, NULL);
	pthread_mutex_lock(&h->lock);
	h->watching = false;
	dead = h->dead;
	h->dead = NULL;
	pthread_mutex_unlock(&h->lock);
	while (dead) {
		struct http_conn *next = dead->next;
		free(dead);
		dead = next;
	}
}
