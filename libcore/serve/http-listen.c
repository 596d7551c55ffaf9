/* http-listen.c - the listening socket of the HTTP layer, made here rather than by
 * libmicrohttpd so that a busy port fails with one clear line. */
#include "http-impl.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

void http_format_addr(const struct sockaddr *sa, char *buf, size_t size)
{
	char host[INET6_ADDRSTRLEN] = "?";
	unsigned port = 0;

	if (sa && sa->sa_family == AF_INET) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;
		inet_ntop(AF_INET, &s4->sin_addr, host, sizeof(host));
		port = ntohs(s4->sin_port);
		snprintf(buf, size, "%s:%u", host, port);
	} else if (sa && sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
		inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof(host));
		port = ntohs(s6->sin6_port);
		snprintf(buf, size, "[%s]:%u", host, port);
	} else {
		snprintf(buf, size, "?");
	}
}

/* host:port as the user wrote the host: "127.0.0.1:8080", "[::1]:8080", "localhost:8080" */
static void format_target(const char *host, int port, char *buf, size_t size)
{
	if (strchr(host, ':'))
		snprintf(buf, size, "[%s]:%d", host, port);
	else
		snprintf(buf, size, "%s:%d", host, port);
}

static int listen_one(const struct addrinfo *ai, int *fd_out, int *errnum)
{
	int one = 1, fd;

	fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
	if (fd < 0) {
		*errnum = errno;
		return -1;
	}
	/* SO_REUSEADDR lets a restarted server bind over connections in TIME_WAIT; on Linux it
	 * does not let two sockets listen on one port (SO_REUSEPORT would, and is not set). */
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, SOMAXCONN) < 0) {
		*errnum = errno;
		close(fd);
		return -1;
	}
	*fd_out = fd;
	return 0;
}

int http_listen(const char *host, int port, int *fd, int *bound_port, int *family,
		struct capy_err *err)
{
	struct addrinfo hints = { 0 }, *res = NULL;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char target[320], service[16];
	int rc, errnum = 0;

	if (port < 0 || port > 65535)
		return capy_err_set(err, CAPY_EINVAL, "port %d is out of range (0 to 65535)", port);
	format_target(host, port, target, sizeof(target));
	snprintf(service, sizeof(service), "%d", port);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	rc = getaddrinfo(host, service, &hints, &res);
	if (rc)
		return capy_err_set(err, CAPY_EINVAL, "cannot resolve host '%s': %s", host,
				    rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
	/* the first address that works: "localhost" may give ::1 and 127.0.0.1 */
	rc = -1;
	for (const struct addrinfo *ai = res; ai && rc < 0; ai = ai->ai_next) {
		rc = listen_one(ai, fd, &errnum);
		if (!rc)
			*family = ai->ai_family;
	}
	freeaddrinfo(res);
	if (rc < 0) {
		if (errnum == EADDRINUSE)
			return capy_err_set(err, CAPY_EIO,
					    "cannot listen on %s: address already in use "
					    "(is another capy-serve running?)",
					    target);
		if (errnum == EACCES)
			return capy_err_set(err, CAPY_EIO,
					    "cannot listen on %s: permission denied", target);
		if (errnum == EADDRNOTAVAIL)
			return capy_err_set(err, CAPY_EIO,
					    "cannot listen on %s: address not available on this "
					    "machine",
					    target);
		return capy_err_errno(err, errnum, "cannot listen on %s", target);
	}
	if (getsockname(*fd, (struct sockaddr *)&ss, &sl) < 0) {
		errnum = errno;
		close(*fd);
		return capy_err_errno(err, errnum, "cannot listen on %s: getsockname", target);
	}
	*bound_port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
					       : ntohs(((struct sockaddr_in *)&ss)->sin_port);
	return 0;
}
