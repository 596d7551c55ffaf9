/* spec.h - speculative decoding: drafts of the next tokens, verified by the target model in
 * one step, and the acceptance rule that keeps the target's output distribution exactly.
 *
 *	struct capy_ngram *g;
 *	capy_ngram_new(&g, 2, &err);                    // matches of 2 tokens or more
 *	capy_ngram_add(g, prompt, n, &err);            // and every token once it is final
 *	uint64_t k = capy_ngram_draft(g, 4, drafts);   // up to 4 drafts, 0 when nothing matches
 *	if (k)
 *		capy_spec_window(e, s, smp, next, drafts, k, rows, out, &m, &st, &err);
 *	// out[0..m): the m - 1 accepted drafts, then the target's own token; the sequence holds
 *	// next and the accepted drafts, and out[m - 1] is the token to run next.
 *
 * A window runs [next, d1 .. dk] through the model in one step with keep_states and all
 * logits (engine.h): row i is the target's distribution after d1 .. di. Row by row,
 * capy_sampler_verify accepts di+1 or replaces it (greedy: the draft is accepted exactly when
 * it is the argmax, so the output is the argmax chain, bit for bit that of one token per step;
 * sampling: accepted with probability p(d), else drawn from p without d, which is the standard
 * rule min(1, p/q) with q the drafter's point mass). After all k drafts the row k gives a
 * bonus token. Then the sequence is cut back to its accepted length (capy_seq_truncate: the
 * attention pages cut, the recurrent state the step kept at that length).
 *
 * N-gram drafts: a suffix automaton over every token given (the prompt, earlier turns, what
 * was generated), built online in O(1) amortised per token. The draft is the continuation of
 * the earliest earlier occurrence of the longest suffix of the history that occurred before,
 * when that suffix has at least min_match tokens.
 *
 * Thread-safety: a drafter belongs to one thread at a time; a window is an engine step.
 */
#ifndef CAPY_SPEC_H
#define CAPY_SPEC_H

#include "../util/err.h"

struct capy_engine;
struct capy_seq;
struct capy_sampler;

/* --- n-gram drafts --------------------------------------------------------------------- */

struct capy_ngram;

/* A drafter whose matches have at least min_match (>= 1) tokens. */
int capy_ngram_new(struct capy_ngram **out, uint64_t min_match, struct capy_err *err);
void capy_ngram_free(struct capy_ngram *g);
/* Append tokens to the history. On failure (out of memory) the history is unchanged. */
int capy_ngram_add(struct capy_ngram *g, const int32_t *ids, uint64_t n, struct capy_err *err);
uint64_t capy_ngram_len(const struct capy_ngram *g);
/* Up to k tokens that followed the earliest earlier occurrence of the longest suffix of the
 * history seen before (of min_match tokens or more) into out; how many (0: no such match).
 * *match (may be NULL) gets the suffix's length. */
uint64_t capy_ngram_draft(const struct capy_ngram *g, uint64_t k, int32_t *out, uint64_t *match);

/* --- verification ------------------------------------------------------------------------ */

/* What windows did, for the tools' statistics. */
struct capy_spec_stats {
	uint64_t windows;    /* verification steps */
	uint64_t drafted;    /* draft tokens verified */
	uint64_t accepted;   /* of them accepted */
	uint64_t tokens;     /* tokens the windows gave (accepted + one each) */
	double seconds;      /* in windows, all told */
	double cut_seconds;  /* of it, cutting sequences back (capy_seq_truncate) */
};

/* The acceptance of k drafts against the target's rows[k + 1][vocab] (row i: the target after
 * drafts[0..i)), in order, with s: out gets the accepted drafts then the token that replaced
 * the first rejected one, or after all k the bonus token from row k; returns how many (1 ..
 * k + 1). rows are modified. */
uint64_t capy_spec_accept(struct capy_sampler *s, float *rows, uint64_t vocab, const int32_t *drafts, uint64_t k,
			  int32_t *out);

/* One window on seq (see above): next is the token after seq's history (not yet run),
 * drafts[0..k) its proposed continuation (1 <= k, k + 1 tokens at most the engine's step);
 * rows has room for (k + 1) * vocab floats. On success out[0..*n_out) as capy_spec_accept,
 * the sequence advanced by *n_out tokens (next and the accepted drafts) and st (may be NULL)
 * counts the window. On failure the sequence is as before. */
int capy_spec_window(struct capy_engine *e, struct capy_seq *seq, struct capy_sampler *s, int32_t next,
		     const int32_t *drafts, uint64_t k, float *rows, int32_t *out, uint64_t *n_out,
		     struct capy_spec_stats *st, struct capy_err *err);

#endif
