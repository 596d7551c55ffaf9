/* engine.h - the CPU inference engine: a model bound to an artifact, and sequences.
 *
 *	struct capy_engine *e;
 *	struct capy_seq *s;
 *	if (capy_engine_new(&e, artifact, &(struct capy_engine_opts){ .threads = 4 }, &err) < 0 ||
 *	    capy_seq_new(e, &s, &err) < 0)
 *		die("%s", err.msg);
 *	capy_engine_forward(e, s, prompt_ids, n, logits, 0, &err);   // prefill, logits of the last token
 *	capy_engine_forward(e, s, &next_id, 1, logits, 0, &err);       // one decode step
 *
 * The engine computes a whole step — embedding to logits — for the tokens it is given,
 * in fp32 activations from the artifact's BF16/F16/F32/NVFP4 weights. Prefill runs the
 * chunked Gated DeltaNet form, decode the recurrent one. Every reduction has a fixed
 * order and work is split over threads by output rows, so results are bit-identical
 * for any thread count. Weights stay in the mapped artifact; PLE n-gram tables are read
 * by rows with pread, never loaded whole.
 *
 * A sequence holds its position, the KV cache of the attention layers (BF16 by default,
 * F32 or INT8 with per-group scales), the Gated DeltaNet recurrent states and conv
 * windows, the PLE token context and conv states and the QSA pooled-key blocks.
 *
 * Thread-safety: one forward at a time per engine (it owns the thread pool and scratch).
 */
#ifndef CAPY_ENGINE_H
#define CAPY_ENGINE_H

#include "../artifact/artifact.h"
#include "../model/config.h"

enum capy_kv_dtype {
	CAPY_KV_BF16,
	CAPY_KV_F32,
	CAPY_KV_INT8, /* int8 values with one float scale per 32 values */
};

struct capy_engine_opts {
	int threads;             /* <= 0: one per CPU */
	enum capy_kv_dtype kv;
	uint64_t max_tokens;     /* context capacity of a sequence; 0: 4096 (grows on demand) */
};

struct capy_engine;
struct capy_seq;

int capy_engine_new(struct capy_engine **out, const struct capy_artifact *a,
		    const struct capy_engine_opts *opts, struct capy_err *err);
void capy_engine_free(struct capy_engine *e);
const struct capy_model_config *capy_engine_config(const struct capy_engine *e);
int capy_engine_threads(const struct capy_engine *e);

int capy_seq_new(struct capy_engine *e, struct capy_seq **out, struct capy_err *err);
void capy_seq_free(struct capy_seq *s);
/* Tokens consumed so far. */
uint64_t capy_seq_len(const struct capy_seq *s);
/* A copy of s, sharing nothing with it. */
int capy_seq_fork(const struct capy_seq *s, struct capy_seq **out, struct capy_err *err);
/* Remember the recurrent state at the current length, so the sequence can later be cut
 * back to it; one checkpoint is kept (a new one replaces it). */
int capy_seq_checkpoint(struct capy_seq *s, struct capy_err *err);
/* Cut the sequence back to n tokens: n must be the current length or the length of the
 * checkpoint (attention caches are cut, recurrent state restored from the checkpoint). */
int capy_seq_truncate(struct capy_seq *s, uint64_t n, struct capy_err *err);

/* Run tokens[0..n) through the model. logits receives vocab_size floats for the last
 * token, or n * vocab_size when all_logits (for perplexity). chunk: prefill at most
 * this many tokens at once (0: 512). */
int capy_engine_forward(struct capy_engine *e, struct capy_seq *s, const int32_t *tokens, uint64_t n,
			float *logits, bool all_logits, struct capy_err *err);

/* Bytes of weights the engine reads per decoded token with all experts (for reports). */
uint64_t capy_engine_weight_bytes(const struct capy_engine *e);

#endif
