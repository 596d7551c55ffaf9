/* thread.h - a fixed pool of worker threads running one function on all of them.
 *
 * capy_pool_run(pool, fn, ctx) calls fn(ctx, ith, nth) once on each of the nth
 * threads (the caller is thread 0) and returns when all have finished. Work is
 * split by (ith, nth) deterministically, as ggml does, or taken from an atomic
 * counter in ctx when items vary in cost. No allocation happens in run().
 *
 * Thread-safety: one capy_pool_run at a time per pool.
 */
#ifndef CAPY_UTIL_THREAD_H
#define CAPY_UTIL_THREAD_H

#include "err.h"

struct capy_pool;

typedef void (*capy_pool_fn)(void *ctx, int ith, int nth);

/* nthreads <= 0 means one per online CPU. */
int capy_pool_new(struct capy_pool **out, int nthreads, struct capy_err *err);
void capy_pool_free(struct capy_pool *pool);
void capy_pool_run(struct capy_pool *pool, capy_pool_fn fn, void *ctx);
int capy_pool_size(const struct capy_pool *pool);

int capy_cpu_count(void);

/* The slice [begin, end) of n items that thread ith of nth owns. */
static inline void capy_slice(uint64_t n, int ith, int nth, uint64_t *begin, uint64_t *end)
{
	uint64_t per = (n + (uint64_t)nth - 1) / (uint64_t)nth;
	uint64_t b = per * (uint64_t)ith;

	*begin = CAPY_MIN(b, n);
	*end = CAPY_MIN(b + per, n);
}

#endif
