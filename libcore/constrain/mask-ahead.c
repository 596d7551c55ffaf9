/* mask-ahead.c - masks computed ahead on a pool of worker threads (see mask-ahead.h): a queue
 * of jobs under one mutex, each job with its own condition variable for the thread waiting
 * on it. */
#include "mask-ahead.h"
#include "mask.h"

#include <pthread.h>
#include <time.h>

enum phase { IDLE, QUEUED, RUNNING, DONE };

struct capy_mask_pool {
	pthread_mutex_t mu;
	pthread_cond_t work;
	struct capy_mask_ahead *head, *tail; /* queued jobs, oldest first */
	bool quit;
	int n;
	pthread_t *tid;
};

struct capy_mask_ahead {
	struct capy_mask_pool *pool; /* NULL: computed in the wait */
	struct capy_mask *m;
	const struct capy_grammar_state *s;
	uint32_t *bits;
	enum phase phase;            /* under pool->mu where there is a pool */
	int rc;
	double compute_s;
	struct capy_err err;
	pthread_cond_t done;
	struct capy_mask_ahead *next;
};

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The job's work, on whichever thread owns it now. */
static void compute(struct capy_mask_ahead *a)
{
	double t0 = now();

	capy_err_clear(&a->err);
	a->rc = capy_mask_compute(a->m, a->s, a->bits, &a->err);
	a->compute_s = now() - t0;
}

static void *worker(void *arg)
{
	struct capy_mask_pool *p = arg;

	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->quit && !p->head)
			pthread_cond_wait(&p->work, &p->mu);
		if (p->quit)
			break;
		struct capy_mask_ahead *a = p->head;
		p->head = a->next;
		if (!p->head)
			p->tail = NULL;
		a->phase = RUNNING;
		pthread_mutex_unlock(&p->mu);
		compute(a);
		pthread_mutex_lock(&p->mu);
		a->phase = DONE;
		pthread_cond_signal(&a->done);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

int capy_mask_pool_new(struct capy_mask_pool **out, int threads, struct capy_err *err)
{
	struct capy_mask_pool *p = calloc(1, sizeof(*p));
	int rc;

	*out = NULL;
	if (!p || (threads > 0 && !(p->tid = calloc((size_t)threads, sizeof(*p->tid))))) {
		free(p);
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	}
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->work, NULL);
	for (; p->n < threads; p->n++)
		if ((rc = pthread_create(&p->tid[p->n], NULL, worker, p))) {
			capy_mask_pool_free(p);
			return capy_err_errno(err, rc, "cannot start a mask worker thread");
		}
	*out = p;
	return 0;
}

void capy_mask_pool_free(struct capy_mask_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->quit = true;
	pthread_cond_broadcast(&p->work);
	pthread_mutex_unlock(&p->mu);
	for (int i = 0; i < p->n; i++)
		pthread_join(p->tid[i], NULL);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->work);
	free(p->tid);
	free(p);
}

int capy_mask_ahead_new(struct capy_mask_ahead **out, struct capy_mask_pool *pool, struct capy_mask *m,
			uint32_t n_ids, struct capy_err *err)
{
	struct capy_mask_ahead *a = calloc(1, sizeof(*a));

	*out = NULL;
	if (!a || !(a->bits = calloc(capy_mask_words(n_ids), sizeof(uint32_t)))) {
		free(a);
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	}
	a->pool = pool && pool->n ? pool : NULL;
	a->m = m;
	pthread_cond_init(&a->done, NULL);
	*out = a;
	return 0;
}

/* Take a queued job back out of the queue (under the mutex). */
static void unqueue(struct capy_mask_pool *p, struct capy_mask_ahead *a)
{
	struct capy_mask_ahead **at = &p->head, *prev = NULL;

	while (*at && *at != a) {
		prev = *at;
		at = &(*at)->next;
	}
	if (!*at)
		return;
	*at = a->next;
	if (p->tail == a)
		p->tail = prev;
	a->next = NULL;
}

/* Under the mutex: the job is not with a worker any more (taken back if queued, waited for
 * if running). */
static void settle(struct capy_mask_ahead *a)
{
	if (a->phase == QUEUED) {
		unqueue(a->pool, a);
		a->phase = IDLE;
	}
	while (a->phase == RUNNING)
		pthread_cond_wait(&a->done, &a->pool->mu);
}

void capy_mask_ahead_free(struct capy_mask_ahead *a)
{
	if (!a)
		return;
	if (a->pool) {
		pthread_mutex_lock(&a->pool->mu);
		settle(a);
		pthread_mutex_unlock(&a->pool->mu);
	}
	pthread_cond_destroy(&a->done);
	free(a->bits);
	free(a);
}

void capy_mask_ahead_start(struct capy_mask_ahead *a, const struct capy_grammar_state *s)
{
	struct capy_mask_pool *p = a->pool;

	if (!p) {
		a->s = s;
		a->phase = QUEUED;
		return;
	}
	pthread_mutex_lock(&p->mu);
	settle(a);
	a->s = s;
	a->phase = QUEUED;
	a->next = NULL;
	if (p->tail)
		p->tail->next = a;
	else
		p->head = a;
	p->tail = a;
	pthread_cond_signal(&p->work);
	pthread_mutex_unlock(&p->mu);
}

int capy_mask_ahead_wait(struct capy_mask_ahead *a, const uint32_t **bits, struct capy_mask_timing *t,
			 struct capy_err *err)
{
	struct capy_mask_pool *p = a->pool;
	double t0 = now();
	enum phase was;

	if (p)
		pthread_mutex_lock(&p->mu);
	was = a->phase;
	if (p && was == QUEUED) { /* no worker has it yet: quicker done here than waited for */
		unqueue(p, a);
		a->phase = RUNNING;
	}
	while (p && was == RUNNING && a->phase == RUNNING)
		pthread_cond_wait(&a->done, &p->mu);
	if (p)
		pthread_mutex_unlock(&p->mu);
	if (was == IDLE) {
		if (t)
			*t = (struct capy_mask_timing){ 0, 0 };
		return capy_err_set(err, CAPY_EINVAL, "a token mask waited for before it was started");
	}
	if (was == QUEUED) { /* the job is this thread's alone now: no worker can reach it */
		compute(a);
		a->phase = DONE;
	}
	if (t)
		*t = (struct capy_mask_timing){ a->compute_s, now() - t0 };
	*bits = a->bits;
	if (a->rc < 0 && err)
		*err = a->err;
	return a->rc;
}
