/* thread.c - a fixed pool of worker threads (see thread.h). */
#include "thread.h"

#include <pthread.h>
#include <unistd.h>

struct worker {
	struct capy_pool *pool;
	pthread_t tid;
	int ith;
};

struct capy_pool {
	int nth;
	struct worker *workers;
	pthread_mutex_t mu;
	pthread_cond_t start_cv, done_cv;
	uint64_t generation; /* bumped for every run */
	int pending;         /* workers still running the current job */
	bool quit;
	capy_pool_fn fn;
	void *ctx;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct capy_pool *p = w->pool;
	uint64_t seen = 0;

	for (;;) {
		capy_pool_fn fn;
		void *ctx;

		pthread_mutex_lock(&p->mu);
		while (!p->quit && p->generation == seen)
			pthread_cond_wait(&p->start_cv, &p->mu);
		if (p->quit) {
			pthread_mutex_unlock(&p->mu);
			return NULL;
		}
		seen = p->generation;
		fn = p->fn;
		ctx = p->ctx;
		pthread_mutex_unlock(&p->mu);

		fn(ctx, w->ith, p->nth);

		pthread_mutex_lock(&p->mu);
		if (--p->pending == 0)
			pthread_cond_signal(&p->done_cv);
		pthread_mutex_unlock(&p->mu);
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
	p->quit = true;
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
	pthread_mutex_lock(&p->mu);
	p->fn = fn;
	p->ctx = ctx;
	p->pending = p->nth - 1;
	p->generation++;
	pthread_cond_broadcast(&p->start_cv);
	pthread_mutex_unlock(&p->mu);

	fn(ctx, 0, p->nth);

	pthread_mutex_lock(&p->mu);
	while (p->pending)
		pthread_cond_wait(&p->done_cv, &p->mu);
	pthread_mutex_unlock(&p->mu);
}

int capy_pool_size(const struct capy_pool *p)
{
	return p->nth;
}
