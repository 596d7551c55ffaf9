/* ppl.h - perplexity of a model over token ids in sliding windows, and the way capy-ppl prints
 * it, shared by capy-ppl and capy-gate so that both print the same digits.
 *
 *	struct capy_ppl_result r;
 *	if (capy_ppl_run(engine, ids, n, &(struct capy_ppl_opts){ .ctx = 2048 }, &r, &err) < 0)
 *		die("%s", err.msg);
 *	capy_ppl_format_summary(line, sizeof(line), &r, 2048, 2048);	// "ppl 3.141593 over ..."
 *	capy_ppl_result_release(&r);
 *
 * Windows [begin, end) start every stride tokens (begin 0, stride, 2 stride, ...) and run ctx
 * tokens each, a fresh sequence per window; each scores the tokens after its first one that no
 * earlier window scored, so every token after the first is scored exactly once. A token's NLL is
 * computed in double from the fp32 logits of the position before it (log-sum-exp around the
 * row's maximum), a window's sum in token order: the numbers are those of the engine, which
 * are reproducible run to run and independent of the thread count.
 * Thread-safety: as the engine (one thread at a time).
 */
#ifndef CAPY_PPL_H
#define CAPY_PPL_H

#include "../util/err.h"

struct capy_engine;

struct capy_ppl_window {
	uint64_t begin, end; /* the tokens run: [begin, end) */
	uint64_t scored;     /* tokens scored in it (the last `scored` of the window) */
	double nll_sum;      /* their NLL, summed in order */
};

struct capy_ppl_opts {
	uint64_t ctx;    /* tokens per window (>= 2) */
	uint64_t stride; /* step between windows (1..ctx; 0: ctx) */
	double *tok_nll; /* [n] or NULL: each token's NLL (tok_nll[0] stays untouched) */
	uint64_t *argmax_counts; /* [vocab] or NULL: how often each id was the argmax, added to */
	/* Called after each window (NULL: not): the tokens up to `end` done of n. */
	void (*progress)(void *ud, uint64_t end, uint64_t n, double nll_sum, uint64_t scored);
	void *ud;
};

struct capy_ppl_result {
	struct capy_ppl_window *windows; /* malloc'd, n_windows of them */
	size_t n_windows;
	uint64_t tokens, scored;
	double nll_sum;
};

/* Score ids[0..n) (n >= 2). Fails with CAPY_EINVAL for bad options, the engine's errors, or
 * CAPY_ENOMEM; *out is then empty. */
int capy_ppl_run(struct capy_engine *e, const int32_t *ids, uint64_t n, const struct capy_ppl_opts *o,
		 struct capy_ppl_result *out, struct capy_err *err);
void capy_ppl_result_release(struct capy_ppl_result *r);

/* A window's mean NLL (0 for a window that scored nothing). */
double capy_ppl_window_nll(const struct capy_ppl_window *w);

/* The printed forms (snprintf's return value: the length they need). A mean NLL as capy-ppl
 * prints it ("%.9g"); a window as an element of capy-ppl --json's "windows"; the plain one-line
 * result "ppl 3.141593 over 1023 tokens (ctx 2048, stride 2048)". */
int capy_ppl_format_nll(char *buf, size_t size, double nll);
int capy_ppl_format_window(char *buf, size_t size, const struct capy_ppl_window *w);
int capy_ppl_format_summary(char *buf, size_t size, const struct capy_ppl_result *r, uint64_t ctx, uint64_t stride);

#endif
