/* report.c - error and warning lines on stderr, and small process facts. */
#include "tool.h"

#include <sys/resource.h>
#include <time.h>

static void vreport(const char *kind, const char *fmt, va_list ap)
{
	fflush(stdout);
	fprintf(stderr, "%s: %s: ", capy_tool_name, kind);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

void capy_die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreport("error", fmt, ap);
	va_end(ap);
	exit(CAPY_EXIT_FAIL);
}

void capy_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreport("error", fmt, ap);
	va_end(ap);
}

void capy_warning(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreport("warning", fmt, ap);
	va_end(ap);
}

double capy_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

uint64_t capy_peak_rss(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_SELF, &ru) < 0)
		return 0;
	return (uint64_t)ru.ru_maxrss * 1024; /* Linux reports KiB */
}
