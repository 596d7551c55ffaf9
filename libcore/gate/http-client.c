/* http-client.c - one POST to a loopback server, for capy-gate (gate.h). Only what talking to
 * capy-serve needs: HTTP/1.1 with Connection: close, a body read to the end of the connection
 * and de-chunked when it came chunked. */
#include "gate.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Wait for fd to be ready for events before the deadline. */
static int wait_fd(int fd, short events, double deadline, struct capy_err *err)
{
	for (;;) {
		double left = deadline - now();
		struct pollfd p = { fd, events, 0 };
		int r;
		if (left <= 0)
			return capy_err_set(err, CAPY_EIO, "no answer in time");
		r = poll(&p, 1, (int)(left * 1000) + 1);
		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return capy_err_errno(err, errno, "poll");
	}
}

static int send_all(int fd, const char *p, size_t n, double deadline, struct capy_err *err)
{
	while (n) {
		ssize_t w;
		if (wait_fd(fd, POLLOUT, deadline, err) < 0)
			return capy_err_prefix(err, "sending the request");
		w = send(fd, p, n, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return capy_err_errno(err, errno, "sending the request");
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* A chunked body, decoded in place; its decoded length, or -1 when malformed. */
static long dechunk(char *body, size_t len)
{
	size_t in = 0, out = 0;

	for (;;) {
		char *end;
		unsigned long n;
		if (in >= len)
			return -1;
		n = strtoul(body + in, &end, 16);
		if (end == body + in)
			return -1;
		end = strstr(end, "\r\n");
		if (!end)
			return -1;
		in = (size_t)(end - body) + 2;
		if (n == 0)
			return (long)out;
		if (n > len - in)
			return -1;
		memmove(body + out, body + in, n);
		out += n;
		in += n + 2;
	}
}

int capy_gate_http_post(int port, const char *path, const char *body, size_t len, double timeout_s,
			struct capy_gate_response *out, struct capy_err *err)
{
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	double deadline = now() + timeout_s;
	char head[512], *resp = NULL, *hend, *p;
	size_t n = 0, cap = 0;
	bool chunked;
	int fd, rc = 0;

	memset(out, 0, sizeof(*out));
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return capy_err_errno(err, errno, "socket");
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		rc = capy_err_errno(err, errno, "connect to 127.0.0.1:%d", port);
		goto done;
	}
	snprintf(head, sizeof(head),
		 "POST %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
		 "Connection: close\r\n\r\n",
		 path, port, len);
	if ((rc = send_all(fd, head, strlen(head), deadline, err)) < 0 ||
	    (rc = send_all(fd, body, len, deadline, err)) < 0)
		goto done;
	for (;;) {
		ssize_t r;
		if (n + 4096 + 1 > cap) {
			char *q = realloc(resp, cap = 2 * (n + 4096 + 1));
			if (!q) {
				rc = capy_err_set(err, CAPY_ENOMEM, "out of memory");
				goto done;
			}
			resp = q;
		}
		if ((rc = wait_fd(fd, POLLIN, deadline, err)) < 0) {
			capy_err_prefix(err, "POST %s after %.0f s", path, timeout_s);
			goto done;
		}
		r = recv(fd, resp + n, cap - n - 1, 0);
		if (r < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			rc = capy_err_errno(err, errno, "reading the answer to POST %s", path);
			goto done;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	if (!resp) {
		rc = capy_err_set(err, CAPY_EIO, "POST %s: the server closed the connection without answering", path);
		goto done;
	}
	resp[n] = 0;
	hend = strstr(resp, "\r\n\r\n");
	if (n < 12 || strncmp(resp, "HTTP/1.", 7) || resp[8] != ' ' || !hend || resp[9] < '1' || resp[9] > '5') {
		rc = capy_err_set(err, CAPY_EFORMAT, "POST %s: not an HTTP response", path);
		goto done;
	}
	out->status = (resp[9] - '0') * 100 + (resp[10] - '0') * 10 + (resp[11] - '0');
	*hend = 0;
	chunked = false;
	/* header lines after the status line: is the body chunked? */
	for (p = strstr(resp, "\r\n"); p; p = strstr(p, "\r\n")) {
		char line[256], *eol;
		p += 2;
		eol = strstr(p, "\r\n");
		snprintf(line, sizeof(line), "%.*s",
			 (int)CAPY_MIN(eol ? (size_t)(eol - p) : strlen(p), sizeof(line) - 1), p);
		if (!strncasecmp(line, "transfer-encoding:", 18) && strstr(line + 18, "chunked"))
			chunked = true;
	}
	out->len = n - (size_t)(hend + 4 - resp);
	memmove(resp, hend + 4, out->len + 1);
	if (chunked) {
		long dec = dechunk(resp, out->len);
		if (dec < 0) {
			rc = capy_err_set(err, CAPY_EFORMAT, "POST %s: a malformed chunked body", path);
			goto done;
		}
		out->len = (size_t)dec;
		resp[dec] = 0;
	}
done:
	close(fd);
	if (rc < 0)
		free(resp);
	else
		out->body = resp;
	return rc;
}

void capy_gate_response_release(struct capy_gate_response *r)
{
	free(r->body);
	memset(r, 0, sizeof(*r));
}
