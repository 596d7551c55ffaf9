/* progress.c - a throttled progress bar on stderr (see tool.h). */
#include "tool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

struct capy_progress {
	const char *label;
	uint64_t total;
	_Atomic uint64_t done;
	double t0, last_draw;
	bool draw;
	pthread_mutex_t mu;
};

struct capy_progress *capy_progress_new(const char *label, uint64_t total_bytes)
{
	struct capy_progress *p = calloc(1, sizeof(*p));
	const char *env = getenv("CAPY_PROGRESS");

	if (!p)
		return NULL;
	p->label = label;
	p->total = total_bytes;
	p->t0 = capy_now();
	p->draw = env && *env ? strcmp(env, "0") != 0 : isatty(STDERR_FILENO);
	pthread_mutex_init(&p->mu, NULL);
	return p;
}

void capy_human_bytes(char *buf, size_t n, double bytes)
{
	const char *units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	int u = 0;

	while (bytes >= 1024 && u < 4) {
		bytes /= 1024;
		u++;
	}
	snprintf(buf, n, u ? "%.2f %s" : "%.0f %s", bytes, units[u]);
}

static void draw(struct capy_progress *p, bool final)
{
	uint64_t done = atomic_load(&p->done);
	double dt = capy_now() - p->t0, frac = p->total ? (double)done / (double)p->total : 1;
	char a[32], b[32], r[32];
	int width = 30, fill;

	if (frac > 1)
		frac = 1;
	fill = (int)(frac * width);
	capy_human_bytes(a, sizeof(a), (double)done);
	capy_human_bytes(b, sizeof(b), (double)p->total);
	capy_human_bytes(r, sizeof(r), dt > 0 ? (double)done / dt : 0);
	fprintf(stderr, "\r%s: [%.*s%*s] %3.0f%% %s / %s, %s/s", p->label, fill,
		"##############################", width - fill, "", frac * 100, a, b, r);
	if (!final && frac > 0.01 && dt > 1)
		fprintf(stderr, ", %.0f s left  ", dt / frac - dt);
	else
		fputs("            ", stderr);
	if (final)
		fputc('\n', stderr);
}

void capy_progress_add(struct capy_progress *p, uint64_t bytes)
{
	double now;

	if (!p)
		return;
	atomic_fetch_add(&p->done, bytes);
	if (!p->draw || pthread_mutex_trylock(&p->mu))
		return;
	now = capy_now();
	if (now - p->last_draw >= 0.1) {
		p->last_draw = now;
		draw(p, false);
	}
	pthread_mutex_unlock(&p->mu);
}

void capy_progress_done(struct capy_progress *p)
{
	if (!p)
		return;
	if (p->draw)
		draw(p, true);
	pthread_mutex_destroy(&p->mu);
	free(p);
}
