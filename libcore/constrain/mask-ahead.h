/* mask-ahead.h - token masks computed ahead of need, on worker threads: the mask of a grammar
 * state is known as soon as the state is (the token just accepted), while the logits it will
 * mask are still being computed (the engine's forward pass for the next step). Computing it
 * then, rather than after the logits arrive, takes it off the token's latency: the caller waits
 * only for what is left of it when the logits are there.
 *
 *	struct capy_mask_pool *pool;                      // its worker threads, shared by maskers
 *	capy_mask_pool_new(&pool, 2, &err);               // 0 threads: each mask computed in the wait
 *	struct capy_mask_ahead *a;                        // one per masker (constrain/mask.h)
 *	capy_mask_ahead_new(&a, pool, mask, vocab, &err);
 *	capy_mask_ahead_start(a, st);                     // the mask of st, from now on
 *	... the forward pass ...
 *	const uint32_t *bits;
 *	n = capy_mask_ahead_wait(a, &bits, &t, &err);     // as capy_mask_compute; t: the times
 *	id = capy_sampler_next_masked(smp, logits, bits);
 *	capy_mask_advance(trie, st, id, &err);
 *	capy_mask_ahead_start(a, st);                     // the next one, during the next step
 *
 * The masks are those capy_mask_compute gives, whoever computes them, so a generation's tokens
 * are the same with or without threads. A job still queued when its wait comes is computed by
 * the waiting thread itself (no slower than waiting for a worker to pick it up); a running one
 * is waited for on a condition variable, never by spinning.
 *
 * Thread-safety: between start and the wait (or free), the masker, the state st and the bits
 * belong to the job: the caller must not change st (reading it is fine: the grammar's queries
 * are reads) nor use the masker. Any number of capy_mask_ahead may share a pool, from any
 * threads; one capy_mask_ahead is used by one thread at a time. The workers compete for the
 * CPU with whatever else runs (the CPU backend's forward uses every core).
 */
#ifndef CAPY_CONSTRAIN_MASK_AHEAD_H
#define CAPY_CONSTRAIN_MASK_AHEAD_H

#include "../util/err.h"

struct capy_mask;
struct capy_grammar_state;
struct capy_mask_pool;
struct capy_mask_ahead;

/* threads workers (0: none; capy_mask_ahead_wait then computes each mask itself). */
int capy_mask_pool_new(struct capy_mask_pool **out, int threads, struct capy_err *err);
/* Stops the workers; every capy_mask_ahead of the pool must be freed first. */
void capy_mask_pool_free(struct capy_mask_pool *p);

/* A job for masker m (which must outlive it) over n_ids tokens; pool NULL is a pool of 0
 * threads. */
int capy_mask_ahead_new(struct capy_mask_ahead **out, struct capy_mask_pool *pool, struct capy_mask *m,
			uint32_t n_ids, struct capy_err *err);
/* Waits for a job in flight (its result is dropped), then frees. */
void capy_mask_ahead_free(struct capy_mask_ahead *a);

/* Start computing the mask of s (a previous result not waited for is dropped, after waiting
 * for it if it is running). */
void capy_mask_ahead_start(struct capy_mask_ahead *a, const struct capy_grammar_state *s);

struct capy_mask_timing {
	double compute_s; /* the mask's own compute time (capy_mask_compute), wherever it ran */
	double wait_s;    /* what the wait took: the latency the caller saw */
};

/* The mask of the state given to the last start: *bits (capy_mask_words(n_ids) words, valid
 * until the next start) and what capy_mask_compute returns (> 0 tokens allowed, 0 the grammar
 * finished with nothing to stop on, < 0 an error in err). A wait without a start is
 * CAPY_EINVAL. t may be NULL. */
int capy_mask_ahead_wait(struct capy_mask_ahead *a, const uint32_t **bits, struct capy_mask_timing *t,
			 struct capy_err *err);

#endif
