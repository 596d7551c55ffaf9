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

/* --- MTP drafts ---------------------------------------------------------------------------
 * The model's own MTP head (engine.h capy_engine_mtp; an engine opened with opts.mtp) drafts
 * from the main model's hidden states: the head's row at position t takes the main model's
 * hidden state h_t and the token at t + 1. A drafter follows one sequence: every step of the
 * sequence hands it the hidden states of the positions it runs (capy_mtp_hidden_at, as the
 * step item's hidden), and each draft first runs the head over the positions it has not run
 * yet (the accepted tokens of the last window, or the prompt), the last of them with `next`,
 * which gives draft 1; draft j + 1 is the head's row at the next position from draft j's
 * output g and draft j. Rows of chained drafts are scratch: the next draft's first rows
 * overwrite them with the main model's hidden states, so a rejected draft leaves nothing
 * behind (the head's cache rows of the accepted positions are those of a sequence that never
 * saw it). Greedy drafts: the argmax over the draft vocabulary (the first maximum in its
 * order), so the acceptance rule's q is a point mass on it. */

struct capy_mtp;

/* A drafter for seq (empty or not; the head has run none of its positions) on e; ids[0 ..
 * n_ids) is the draft vocabulary (capy-shortlist's ids; copied), NULL for all of it. */
int capy_mtp_new(struct capy_mtp **out, struct capy_engine *e, struct capy_seq *seq, const int32_t *ids,
		 uint64_t n_ids, struct capy_err *err);
void capy_mtp_free(struct capy_mtp *m);
/* Positions of the sequence the head has run (their rows are final). */
uint64_t capy_mtp_len(const struct capy_mtp *m);
/* Where a step of the sequence writes the hidden states of positions [pos, pos + n)
 * (capy_step_item.hidden): pos must not be below capy_mtp_len. Valid until the next call. */
float *capy_mtp_hidden_at(struct capy_mtp *m, uint64_t pos, uint64_t n, struct capy_err *err);
/* k >= 1 drafts into out after the sequence's history and next (the token after it, not run
 * yet). The hidden states of every position from capy_mtp_len to the sequence's length must
 * have been given. *seconds (may be NULL) gets the time it took added. */
int capy_mtp_draft(struct capy_mtp *m, int32_t next, uint64_t k, int32_t *out, double *seconds,
		   struct capy_err *err);
/* Run the head over the positions whose next token the sequence already holds ([len, L - 1),
 * L its length; their hidden states given), keeping only the hidden state of L - 1, which
 * waits for the token after it. A prompt read in pieces (the scheduler) calls it after each
 * piece, so the drafter holds one piece's hidden states, not the whole prompt's; the rows are
 * the bits one call over them all would give (the head's linears are batch-invariant).
 * *seconds (may be NULL) gets the time it took added. */
int capy_mtp_catch_up(struct capy_mtp *m, double *seconds, struct capy_err *err);
/* The hidden state of position capy_mtp_len, when it was given and the sequence is one
 * longer (what capy_mtp_catch_up leaves): with the head's rows before it in the sequence's
 * pages, all a drafter resuming there needs (capy_mtp_resume). NULL otherwise. */
const float *capy_mtp_pending(const struct capy_mtp *m);
/* Start a new drafter (its head has run nothing) at len on a sequence that shares its first
 * pages with one whose drafter ran the head there (a cached prefix): the head's rows [0, len)
 * are taken as they are in the pages, hidden (hidden_size floats, copied) is the main model's
 * hidden state of position len, and the sequence must hold len + 1 tokens or more. */
int capy_mtp_resume(struct capy_mtp *m, uint64_t len, const float *hidden, struct capy_err *err);
/* Draw drafts from the head's distribution instead of taking its argmax: q = softmax(logits /
 * temperature) over the draft vocabulary (temperature > 0), with the drafter's own stream
 * seeded with seed; capy_mtp_q then gives the last draft call's q rows for the acceptance
 * rule (capy_spec_accept_q). Fails only out of memory. */
int capy_mtp_sample(struct capy_mtp *m, float temperature, uint64_t seed, uint64_t max_k, struct capy_err *err);
/* [k][vocab] the distributions the last capy_mtp_draft drew its k drafts from; NULL when the
 * drafts are the argmax (point masses). */
const float *capy_mtp_q(const struct capy_mtp *m);

/* The last draft's logits (over the draft vocabulary, in its order), for tests. */
const float *capy_mtp_logits(const struct capy_mtp *m);
/* A capy-shortlist file (one id per line in priority order, '#' comment lines) into a new
 * array *ids of *n ids, each checked to be below vocab and listed once. */
int capy_shortlist_read(const char *path, uint64_t vocab, int32_t **ids, uint64_t *n, struct capy_err *err);

/* --- verification ------------------------------------------------------------------------ */

/* What windows did, for the tools' statistics. */
struct capy_spec_stats {
	uint64_t windows;    /* verification steps */
	uint64_t drafted;    /* draft tokens verified */
	uint64_t accepted;   /* of them accepted */
	uint64_t tokens;     /* tokens the windows gave (accepted + one each) */
	double seconds;      /* in windows, all told */
	double cut_seconds;  /* of it, cutting sequences back (capy_seq_truncate) */
	double draft_seconds; /* drafting (the MTP head), outside the windows */
	uint64_t mtp_windows, ngram_windows; /* windows by the drafter that filled them */
};

/* The acceptance of k drafts against the target's rows[k + 1][vocab] (row i: the target after
 * drafts[0..i)), in order, with s: out gets the accepted drafts then the token that replaced
 * the first rejected one, or after all k the bonus token from row k; returns how many (1 ..
 * k + 1). rows are modified. */
uint64_t capy_spec_accept(struct capy_sampler *s, float *rows, uint64_t vocab, const int32_t *drafts, uint64_t k,
			  int32_t *out);
/* The same with each draft's distribution: q[i * vocab ..] the distribution drafts[i] was drawn
 * from (capy_sampler_verify_q); NULL: point masses, as capy_spec_accept. */
uint64_t capy_spec_accept_q(struct capy_sampler *s, float *rows, uint64_t vocab, const int32_t *drafts, uint64_t k,
			    const float *q, int32_t *out);

/* One window on seq (see above): next is the token after seq's history (not yet run),
 * drafts[0..k) its proposed continuation (1 <= k, k + 1 tokens at most the engine's step);
 * rows has room for (k + 1) * vocab floats. On success out[0..*n_out) as capy_spec_accept,
 * the sequence advanced by *n_out tokens (next and the accepted drafts) and st (may be NULL)
 * counts the window. On failure the sequence is as before. */
int capy_spec_window(struct capy_engine *e, struct capy_seq *seq, struct capy_sampler *s, int32_t next,
		     const int32_t *drafts, uint64_t k, float *rows, int32_t *out, uint64_t *n_out,
		     struct capy_spec_stats *st, struct capy_err *err);
/* The same, and the hidden states of the window's k + 1 positions into hidden ((k + 1) *
 * hidden_size floats, e.g. capy_mtp_hidden_at(m, len, k + 1); NULL: none), the drafts'
 * distributions q as capy_spec_accept_q (NULL: point masses). */
int capy_spec_window_hidden(struct capy_engine *e, struct capy_seq *seq, struct capy_sampler *s, int32_t next,
			    const int32_t *drafts, uint64_t k, const float *q, float *rows, float *hidden, int32_t *out,
			    uint64_t *n_out, struct capy_spec_stats *st, struct capy_err *err);

#endif
