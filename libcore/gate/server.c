/* server.c - capy-serve as a child process of capy-gate (gate.h). */
#include "gate.h"
#include "../util/file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void nap(double s)
{
	struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* The port of the startup line "...: serving '...' (...) on http://HOST:PORT on ...", or 0. */
static int startup_port(const char *log)
{
	for (const char *line = log; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
		const char *at = strstr(line, ": serving "), *nl = strchr(line, '\n'), *url, *colon, *p;
		long port = 0;
		if (!at || (nl && at > nl) || !(url = strstr(at, " on http://")) || (nl && url > nl))
			continue;
		url += strlen(" on http://");
		colon = NULL;
		for (p = url; *p && *p != ' ' && *p != '\n'; p++)
			if (*p == ':')
				colon = p;
		if (!colon || *p != ' ')
			continue;
		for (p = colon + 1; *p >= '0' && *p <= '9' && port < 65536; p++)
			port = port * 10 + (*p - '0');
		if (*p == ' ' && port > 0 && port < 65536)
			return (int)port;
	}
	return 0;
}

/* The log's last non-empty line, for messages (one line). */
static void last_line(const char *log, char *out, size_t cap)
{
	const char *end = log + strlen(log), *start;

	while (end > log && (end[-1] == '\n' || end[-1] == '\r'))
		end--;
	for (start = end; start > log && start[-1] != '\n'; start--)
		;
	snprintf(out, cap, "%.*s", (int)CAPY_MIN((size_t)(end - start), cap - 1), start);
	if (!*out)
		snprintf(out, cap, "(nothing on its stderr)");
}

int capy_gate_server_start(struct capy_gate_server *s, const char *bin, char *const argv[], const char *log_path,
			   double timeout_s, struct capy_err *err)
{
	double deadline = now() + timeout_s;
	int fd, status;
	pid_t parent = getpid();

	memset(s, 0, sizeof(*s));
	if (!(s->log_path = strdup(log_path)))
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return capy_err_errno(err, errno, "cannot create '%s'", log_path);
	s->pid = fork();
	if (s->pid < 0) {
		s->pid = 0;
		close(fd);
		return capy_err_errno(err, errno, "cannot start '%s': fork", bin);
	}
	if (s->pid == 0) {
		int null = open("/dev/null", O_RDWR);
		/* a server outliving its gate would hold the port and the CPU */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != parent)
			_exit(127);
		if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(fd, 2) < 0)
			_exit(127);
		execv(bin, argv);
		/* only async-signal-safe calls between fork and exec (the parent has threads) */
		static const char msg[] = "capy-gate: cannot execute the server\n";
		if (write(2, msg, sizeof(msg) - 1) < 0)
			_exit(126);
		_exit(127);
	}
	close(fd);
	for (;;) {
		char *log = NULL, last[512];
		size_t len;
		int port;
		pid_t r;
		if (capy_read_file(log_path, 64u << 20, &log, &len, NULL) == 0) {
			port = startup_port(log);
			if (port) {
				free(log);
				s->port = port;
				return 0;
			}
		}
		r = waitpid(s->pid, &status, WNOHANG);
		if (r == s->pid || now() > deadline) {
			last_line(log ? log : "", last, sizeof(last));
			free(log);
			if (r == s->pid) {
				s->pid = 0;
				return capy_err_set(err, CAPY_EIO, "'%s' exited (status %d) before listening: %s", bin,
						    WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status),
						    last);
			}
			capy_gate_server_stop(s, 5);
			return capy_err_set(err, CAPY_EIO, "'%s' did not listen within %.0f s: %s", bin, timeout_s,
					    last);
		}
		free(log);
		nap(0.02);
	}
}

int capy_gate_server_stop(struct capy_gate_server *s, double timeout_s)
{
	double deadline = now() + timeout_s;
	int status, rc = -1;

	if (s->pid > 0) {
		kill(s->pid, SIGTERM);
		for (;;) {
			pid_t r = waitpid(s->pid, &status, WNOHANG);
			if (r == s->pid) {
				rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
				break;
			}
			if (r < 0 && errno != EINTR)
				break;
			if (now() > deadline) {
				kill(s->pid, SIGKILL);
				waitpid(s->pid, &status, 0);
				break;
			}
			nap(0.01);
		}
	}
	s->pid = 0;
	free(s->log_path);
	s->log_path = NULL;
	return rc;
}
