/* sample.h - choosing the next token from logits: greedy, temperature, top-k, top-p,
 * min-p, repetition / presence / frequency penalties, seeded and reproducible.
 *
 *	struct capy_sampler *s;
 *	capy_sampler_new(&s, vocab, &(struct capy_sampler_params){ .temperature = 0.7f, .top_p = 0.9f,
 *			 .seed = 42 }, &err);
 *	capy_sampler_prompt(s, prompt, n);      // tokens the repetition penalty also counts
 *	int32_t tok = capy_sampler_next(s, logits);  // logits are modified in place
 *
 * Order of the steps (vLLM's): penalties, temperature, top-k, top-p, min-p, then a draw
 * from the renormalized distribution with the sampler's own xoshiro stream. Temperature 0
 * is greedy (the lowest id wins a tie). The same seed and logits give the same tokens on
 * every machine. capy_sampler_next_masked draws among the tokens a mask allows (structured
 * output). Penalties: repetition (HF: positive logits divided, negative multiplied,
 * for every token of the prompt and output), presence and frequency (OpenAI: subtracted
 * once, and per occurrence, for tokens of the output).
 */
#ifndef CAPY_SAMPLE_H
#define CAPY_SAMPLE_H

#include "../util/err.h"

struct capy_sampler_params {
	float temperature;        /* 0: greedy */
	int top_k;                /* 0: off */
	float top_p;              /* 0 or 1: off */
	float min_p;              /* 0: off */
	float repetition_penalty; /* 0 or 1: off */
	float presence_penalty;   /* 0: off */
	float frequency_penalty;  /* 0: off */
	uint64_t seed;
};

struct capy_sampler;

int capy_sampler_new(struct capy_sampler **out, uint64_t vocab, const struct capy_sampler_params *p,
		     struct capy_err *err);
void capy_sampler_free(struct capy_sampler *s);
/* Tokens of the prompt (counted by the repetition penalty only). */
void capy_sampler_prompt(struct capy_sampler *s, const int32_t *ids, uint64_t n);
/* Pick the next token from logits[vocab] (modified) and record it as output. */
int32_t capy_sampler_next(struct capy_sampler *s, float *logits);
/* The same among the tokens whose bit is set in allowed (bit id % 32 of word id / 32, as
 * constrain/mask.h makes them; NULL: all): the others' logits become -inf first, so every step
 * after (penalties, temperature, top-k, top-p, min-p, the draw) sees only allowed tokens and
 * their distribution is the unmasked one renormalized over them. Returns -1 when no token is
 * allowed. With every bit set it draws what capy_sampler_next draws. */
int32_t capy_sampler_next_masked(struct capy_sampler *s, float *logits, const uint32_t *allowed);

/* Speculative sampling (spec/spec.h) with a deterministic drafter (q a point mass on draft):
 * with p the distribution capy_sampler_next would draw from these logits (penalties,
 * temperature, top-k, top-p, min-p applied), accept draft with probability p(draft) (one
 * uniform of the sampler's stream) and return it; else return a token drawn from p with
 * draft left out, renormalised (a second uniform). Over both draws the token is distributed
 * exactly as p, and a draft run then continues from the target's own distribution. Greedy
 * (temperature 0 or top_k 1) draws nothing: the argmax, whatever the draft. The returned
 * token is recorded as output, as by capy_sampler_next; logits are modified in place. */
int32_t capy_sampler_verify(struct capy_sampler *s, float *logits, int32_t draft);
/* The same for a draft drawn from a distribution q (vocab floats summing to 1, q[draft] > 0;
 * NULL: the point mass, as capy_sampler_verify): accept with probability min(1, p(draft) /
 * q(draft)), else draw from the residual max(0, p - q), renormalised. The token is then
 * distributed exactly as p. */
int32_t capy_sampler_verify_q(struct capy_sampler *s, float *logits, int32_t draft, const float *q);

/* Sampling where the logits are (a GPU backend): what a device must compute so that the host
 * picks exactly the token capy_sampler_next would pick from the same logits.
 * - GREEDY (no penalties; temperature 0 or top_k 1): the first index of the maximum of the
 *   raw logits, handed to capy_sampler_take.
 * - TOP_K (no penalties, 1 < top_k <= CAPY_SAMPLE_TOP_K_MAX): v = logit / temperature (one
 *   float division) and the id of at least every token among the top_k largest v (ties
 *   included: every token whose v equals the top_k-th largest), handed to
 *   capy_sampler_next_top in any order; only these decide the draw.
 * - HOST (penalties, or temperature > 0 without top_k): the whole row, capy_sampler_next. */
enum capy_sample_mode { CAPY_SAMPLE_HOST, CAPY_SAMPLE_GREEDY, CAPY_SAMPLE_TOP_K };
#define CAPY_SAMPLE_TOP_K_MAX 1024
enum capy_sample_mode capy_sampler_mode(const struct capy_sampler *s, float *temperature, int *top_k);
/* Record id as the next token (GREEDY), and return it. */
int32_t capy_sampler_take(struct capy_sampler *s, int32_t id);
/* The next token from n candidates (v[i] = logits[ids[i]] / temperature) as TOP_K says. */
int32_t capy_sampler_next_top(struct capy_sampler *s, const float *v, const int32_t *ids, uint64_t n);
/* Masked rows (capy_sampler_next_masked's token from the device's half): GREEDY is the first
 * index of the maximum among the allowed ids that are not NaN, or first (the lowest allowed
 * id) when there is none or logits[first] is NaN; TOP_K lists the allowed ids only, as above,
 * and first is the answer when none of them is finite. */
int32_t capy_sampler_next_top_masked(struct capy_sampler *s, const float *v, const int32_t *ids, uint64_t n,
				     int32_t first);
/* The lowest id allowed by a mask of vocab tokens (constrain/mask.h's words), or -1. */
int64_t capy_sampler_mask_first(const uint32_t *allowed, uint64_t vocab);

#endif
