/* thread.c - a fixed pool of worker threads (see thread.h). */
#include "thread.h"

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

struct worker {
	struct capy_pool *pool;
	pthread_t tid;
	int ith;
};

/* Workers spin this many rounds (tens of microseconds) for the next job before they sleep
 * on the condition variable: the decode loop hands out a job every few microseconds, and a
 * wake-up through the kernel costs more than the job (measured 9-60 us per round trip). */
#define SPIN_ROUNDS 20000

struct capy_pool {
	int nth;
	struct worker *workers;
	pthread_mutex_t mu;
	pthread_cond_t start_cv, done_cv;
	_Atomic uint64_t generation; /* bumped for every run */
	_Atomic int pending;         /* workers still running the current job */
	_Atomic bool quit;
	int sleepers;                /* workers waiting on start_cv (under mu) */
	capy_pool_fn fn;
	void *ctx;
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct capy_pool *p = w->pool;
	uint64_t seen = 0, g = 0;

	for (;;) {
		for (int i = 0; i < SPIN_ROUNDS; i++) {
			g = atomic_load_explicit(&p->generation, memory_order_acquire);
			if (g != seen || atomic_load(&p->quit))
				break;
			cpu_relax();
		}
		if (g == seen && !atomic_load(&p->quit)) {
			pthread_mutex_lock(&p->mu);
			p->sleepers++;
			while ((g = atomic_load(&p->generation)) == seen && !atomic_load(&p->quit))
				pthread_cond_wait(&p->start_cv, &p->mu);
			p->sleepers--;
			pthread_mutex_unlock(&p->mu);
		}
		if (atomic_load(&p->quit))
			return NULL;
		seen = g;
		p->fn(p->ctx, w->ith, p->nth);
		if (atomic_fetch_sub(&p->pending, 1) == 1) {
			pthread_mutex_lock(&p->mu);
			pthread_cond_signal(&p->done_cv);
			pthread_mutex_unlock(&p->mu);
		}
	}
}

int capy_cpu_count(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (int)n : 1;
}

int capy_pool_new(struct capy_pool **out, int nthreads, struct capy_err *err)
{
	struct capy_pool *p;

	if (nthreads <= 0)
		nthreads = capy_cpu_count();
	p = calloc(1, sizeof(*p));
	if (!p)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory creating a thread pool");
	p->nth = nthreads;
	p->workers = calloc((size_t)nthreads, sizeof(*p->workers));
	if (!p->workers) {
		free(p);
		return capy_err_set(err, CAPY_ENOMEM, "out of memory creating a thread pool");
	}
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->start_cv, NULL);
	pthread_cond_init(&p->done_cv, NULL);
	for (int i = 1; i < nthreads; i++) {
		p->workers[i].pool = p;
		p->workers[i].ith = i;
		int rc = pthread_create(&p->workers[i].tid, NULL, worker_main, &p->workers[i]);
		if (rc) {
			p->nth = i; /* only threads 1..i-1 exist */
			capy_pool_free(p);
			return capy_err_errno(err, rc, "cannot start worker thread %d", i);
		}
	}
	*out = p;
	return 0;
}

void capy_pool_free(struct capy_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	atomic_store(&p->quit, true);
	pthread_cond_broadcast(&p->start_cv);
	pthread_mutex_unlock(&p->mu);
	for (int i = 1; i < p->nth; i++)
		pthread_join(p->workers[i].tid, NULL);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->start_cv);
	pthread_cond_destroy(&p->done_cv);
	free(p->workers);
	free(p);
}

void capy_pool_run(struct capy_pool *p, capy_pool_fn fn, void *ctx)
{
	if (p->nth == 1) {
		fn(ctx, 0, 1);
		return;
	}
	p->fn = fn;
	p->ctx = ctx;
	atomic_store(&p->pending, p->nth - 1);
	atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
	/* A worker that went to sleep checked the generation under the lock: wake it. */
	pthread_mutex_lock(&p->mu);
	if (p->sleepers)
		pthread_cond_broadcast(&p->start_cv);
	pthread_mutex_unlock(&p->mu);

	fn(ctx, 0, p->nth);

	for (int i = 0; i < SPIN_ROUNDS && atomic_load_explicit(&p->pending, memory_order_acquire); i++)
		cpu_relax();
	if (atomic_load_explicit(&p->pending, memory_order_acquire)) {
		pthread_mutex_lock(&p->mu);
		while (atomic_load(&p->pending))
			pthread_cond_wait(&p->done_cv, &p->mu);
		pthread_mutex_unlock(&p->mu);
	}
}

int capy_pool_size(const struct capy_pool *p)
{
	return p->nth;
}
