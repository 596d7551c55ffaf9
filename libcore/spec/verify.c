/* verify.c - a speculative window: the drafts verified in one engine step, accepted by the
 * speculative-sampling rule, and the sequence cut back to what was accepted (see spec.h). */
#include "spec.h"
#include "../engine/engine.h"
#include "../sample/sample.h"

#include <time.h>

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

uint64_t capy_spec_accept(struct capy_sampler *s, float *rows, uint64_t vocab, const int32_t *drafts, uint64_t k,
			  int32_t *out)
{
	return capy_spec_accept_q(s, rows, vocab, drafts, k, NULL, out);
}

uint64_t capy_spec_accept_q(struct capy_sampler *s, float *rows, uint64_t vocab, const int32_t *drafts, uint64_t k,
			    const float *q, int32_t *out)
{
	for (uint64_t i = 0; i < k; i++) {
		int32_t t = capy_sampler_verify_q(s, rows + i * vocab, drafts[i], q ? q + i * vocab : NULL);
		out[i] = t;
		if (t != drafts[i])
			return i + 1;
	}
	out[k] = capy_sampler_next(s, rows + k * vocab); /* all accepted: the bonus token */
	return k + 1;
}

int capy_spec_window(struct capy_engine *e, struct capy_seq *seq, struct capy_sampler *s, int32_t next,
		     const int32_t *drafts, uint64_t k, float *rows, int32_t *out, uint64_t *n_out,
		     struct capy_spec_stats *st, struct capy_err *err)
{
	return capy_spec_window_hidden(e, seq, s, next, drafts, k, NULL, rows, NULL, out, n_out, st, err);
}

int capy_spec_window_hidden(struct capy_engine *e, struct capy_seq *seq, struct capy_sampler *s, int32_t next,
			    const int32_t *drafts, uint64_t k, const float *q, float *rows, float *hidden, int32_t *out,
			    uint64_t *n_out, struct capy_spec_stats *st, struct capy_err *err)
{
	uint64_t V = capy_engine_config(e)->vocab_size, len = capy_seq_len(seq), m;
	int32_t stack[64], *tokens = stack;
	double t0 = now(), t1;
	int rc;

	if (!k)
		return capy_err_set(err, CAPY_EINVAL, "a speculative window needs at least one draft");
	if (k + 1 > capy_engine_step_tokens(e))
		return capy_err_set(err, CAPY_EINVAL, "%" PRIu64 " drafts do not fit a step of %" PRIu64 " tokens", k,
				    capy_engine_step_tokens(e));
	if (k + 1 > ARRAY_SIZE(stack) && !(tokens = malloc((k + 1) * sizeof(*tokens))))
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	tokens[0] = next;
	memcpy(tokens + 1, drafts, k * sizeof(*tokens));
	rc = capy_engine_step(e, &(struct capy_step_item){ .seq = seq, .tokens = tokens, .n = k + 1, .logits = rows,
							    .all_logits = true, .keep_states = true,
							    .hidden = hidden },
			      1, err);
	if (tokens != stack)
		free(tokens);
	if (rc < 0)
		return rc;
	m = capy_spec_accept_q(s, rows, V, drafts, k, q, out);
	/* Keep next and the m - 1 accepted drafts; out[m - 1] is not run yet. */
	t1 = now();
	if ((rc = capy_seq_truncate(seq, len + m, err)) < 0)
		return rc;
	*n_out = m;
	if (st) {
		double t2 = now();
		st->windows++;
		st->drafted += k;
		st->accepted += m - 1;
		st->tokens += m;
		st->seconds += t2 - t0;
		st->cut_seconds += t2 - t1;
	}
	return 0;
}
