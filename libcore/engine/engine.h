/* engine.h - the inference engine: a model bound to an artifact on a backend, sequences,
 * and the batched step that runs tokens of several sequences at once.
 *
 *	struct capy_engine *e;
 *	struct capy_seq *a, *b;
 *	if (capy_engine_new(&e, artifact, &(struct capy_engine_opts){ .threads = 4 }, &err) < 0 ||
 *	    capy_seq_new(e, &a, &err) < 0 || capy_seq_new(e, &b, &err) < 0)
 *		die("%s", err.msg);
 *	capy_engine_forward(e, a, prompt_ids, n, logits, false, &err);	// one sequence, chunked
 *	struct capy_step_item items[] = {
 *		{ a, &next_a, 1, logits_a, false },			// a decode token
 *		{ b, chunk, 256, logits_b, false },			// a prefill chunk
 *	};
 *	capy_engine_step(e, items, 2, &err);				// both in one pass
 *
 * The engine is split in two (DESIGN §3): this layer owns what does not depend on the model's
 * arithmetic — sequences, their token history, the paged attention cache's bookkeeping (page
 * ids, reference counts, block tables, copy-on-write), snapshots — and a backend (engine/
 * backend.h; the CPU one is libcore/backend/cpu) computes a whole step, embedding to logits,
 * for a batch of sequences.
 *
 * Numerics: a sequence's results do not depend on which other sequences share its step:
 * the backend's linears are batch-invariant (each output element has one summation order,
 * whatever the number of rows), and everything else runs per token or per sequence. A step
 * with one sequence gives the same bits as capy_engine_forward of the same tokens. How a
 * sequence's tokens are cut into steps does matter, in the last bits, for the recurrent
 * (Gated DeltaNet) layers: one token after a non-empty history runs the recurrent form,
 * more tokens the chunked form — except in a step item with keep_states (speculative
 * verification), whose tokens run the recurrent form one by one and so give the bits of
 * one-token steps.
 *
 * Attention cache: the KV rows of the attention layers (BF16 by default, F32, or INT8 with
 * per-group scales; QSA indexer keys and pooled block keys too) live in pages of
 * capy_engine_page_tokens() tokens. Sequences share pages: capy_seq_share() gives a new
 * sequence the first n tokens of another without copying them; a page is copied only when a
 * sequence writes into a page another one still holds.
 *
 * Thread-safety: an engine and its sequences and snapshots belong to one thread at a time
 * (the engine owns its thread pool and scratch memory).
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

/* "bf16", "f32", "int8" to the type; -1 for anything else. */
int capy_kv_dtype_parse(const char *name);

struct capy_engine_opts {
	int threads;             /* <= 0: one per CPU */
	enum capy_kv_dtype kv;
	uint64_t step_tokens;    /* tokens one step may carry over all its sequences (0: 512) */
	const char *device;      /* backend name; NULL or "cpu": the CPU backend; "cuda" */
	int gpu;                 /* cuda: the device index */
	uint64_t gpu_mem;        /* cuda: bytes of device memory the engine may take (0: all free) */
	/* cuda: the attention cache its memory plan holds room for (offload/plan.h): max_seqs
	 * sequences of max_context tokens (0: none; pages are then taken on demand) */
	uint64_t max_context, max_seqs;
	const char *backend_arg; /* backend-specific setting (NULL: none) */
	/* Bind the model's MTP head (capy_engine_mtp; every family, qwen4_exp's in capy's layout): its
	 * attention layer gets rows in the attention-cache pages after the main layers', so pages
	 * are larger. Backends without one refuse it (CAPY_EUNSUPPORTED). */
	bool mtp;
	/* cuda: speculative verification's kept recurrent states per sequence (the draft tokens
	 * K of a window; engine.c keeps one state per row but the last), counted in the memory
	 * plan beside the sequences' own (0: no drafts). */
	uint64_t kept_states;
	/* cuda, expert offload (issue 10; docs/offload.md): the CPU threads that compute the
	 * routed experts not resident on the GPU (0: capy_expert_threads_choose's default from
	 * the machine's topology), and a cap on the routed-expert slots the memory plan gives
	 * the GPU (0: as many as --gpu-mem holds; n > 0: at most n; CAPY_EXPERT_SLOTS_NONE:
	 * none, every routed expert in host RAM). Zeroed options mean the defaults. */
	int expert_threads;
	int64_t expert_slots;
	/* Tensor parallelism over tp ranks (libcore/tp/tp.h, docs/tp.md; 0 or 1: off). The CPU
	 * backend simulates it in one process: the arithmetic tp GPUs would do (each rank's
	 * partial sums of the row-parallel layers, the all-reduce's payload), for tests; it is
	 * no faster. Other backends refuse it (not built yet). tp_payload: the all-reduce payload
	 * of every row (enum capy_tp_payload; 0, the default, is fp32). */
	int tp;
	int tp_payload;
};

#define CAPY_EXPERT_SLOTS_NONE (-1)

/* Where an offloading engine holds the routed experts in host RAM (offload/plan.h's pinned). */
enum capy_offload_host {
	CAPY_OFFLOAD_HOST_PINNED,     /* one page-locked copy */
	CAPY_OFFLOAD_HOST_PAGEABLE,   /* the mapped artifact, which the GPU reads as pageable memory */
	CAPY_OFFLOAD_HOST_REGISTERED, /* the mapped artifact, registered with the GPU's driver */
};

/* What expert offload has done so far (capy_engine_offload_stats): the GPU's expert cache
 * of `slots` experts (a routed expert of one layer, both its matrices), `resident` of them
 * filled; per routed (token, expert) of a step, whether it found its expert resident (hits)
 * or was computed on the CPU (misses; prefill chunks read a non-resident expert from host
 * memory instead: streamed); experts copied into slots and evicted; the CPU threads; where
 * the experts are held in host RAM. */
struct capy_offload_stats {
	uint64_t experts, slots, resident; /* slots: those the experts have now */
	uint64_t slots_lent;               /* elastic attention cache: slots its pages took */
	uint64_t steps, hits, misses, streamed;
	uint64_t loads, evictions;
	int cpu_threads;
	enum capy_offload_host host;
	/* the hand-off (docs/offload.md): CPU jobs (a MoE layer's misses of a step, where there
	 * were any), the expert bytes they read, the seconds the CPU ran them (taken to finished)
	 * and the seconds the GPU waited for them (request to resume, on the GPU's clock) */
	uint64_t jobs, job_bytes;
	double job_seconds, wait_seconds;
	/* the expert cache's policy (CAPY_CUDA_OFFLOAD_POLICY): whole layers first or not, and how
	 * often the adaptive one (auto) has changed it */
	bool whole_layers;
	uint64_t policy_switches;
};

/* "page-locked copy", "mapped artifact (pageable)" or "mapped artifact (registered)". */
const char *capy_offload_host_name(enum capy_offload_host h);

struct capy_engine;
struct capy_seq;
struct capy_snapshot;

/* Whether a backend of that name is in this build ("cpu" always is). */
bool capy_engine_device_available(const char *name);

int capy_engine_new(struct capy_engine **out, const struct capy_artifact *a,
		    const struct capy_engine_opts *opts, struct capy_err *err);
void capy_engine_free(struct capy_engine *e);
const struct capy_model_config *capy_engine_config(const struct capy_engine *e);
int capy_engine_threads(const struct capy_engine *e);
const char *capy_engine_device(const struct capy_engine *e);
/* The most tokens one capy_engine_step may carry. */
uint64_t capy_engine_step_tokens(const struct capy_engine *e);
/* Tokens per attention-cache page, and the bytes of one page. */
uint64_t capy_engine_page_tokens(const struct capy_engine *e);
uint64_t capy_engine_page_bytes(const struct capy_engine *e);
/* Pages in use (held by any sequence) and the bytes of one sequence's recurrent state. */
uint64_t capy_engine_pages_used(const struct capy_engine *e);
uint64_t capy_engine_state_bytes(const struct capy_engine *e);
/* Storage for the attention cache of `tokens` tokens over `sequences` sequences, taken now
 * rather than as they come (a GPU plans its memory up front) and kept; fails with the
 * numbers when the backend cannot hold it. Pages beyond it are still taken on demand, and
 * their storage is given back when the sequences holding the highest ids end, where the
 * backend can (the CPU's: freed). With an elastic attention cache (expert offload: its
 * pages and the expert slots share the GPU's budget, docs/offload.md) it only checks that
 * the plan holds them: the pages are taken from the expert slots as sequences grow. */
int capy_engine_reserve(struct capy_engine *e, uint64_t tokens, uint64_t sequences, struct capy_err *err);
/* Page ids the backend holds storage for now. */
uint64_t capy_engine_pages_held(const struct capy_engine *e);
/* One line on where the engine runs and what memory it holds (for the tools' logs). */
void capy_engine_describe(const struct capy_engine *e, char *buf, size_t size);
/* The memory plan of a GPU backend in one line (offload/plan.h); false (buf empty) for a
 * backend without one (the CPU). */
bool capy_engine_plan_line(const struct capy_engine *e, char *buf, size_t size);
/* Whether the backend can run steps with keep_states (speculative verification). */
bool capy_engine_keeps_states(const struct capy_engine *e);
/* Whether the engine offloads routed experts (some are not resident on its GPU), and if so
 * its counts so far in *st (may be NULL). */
bool capy_engine_offload_stats(const struct capy_engine *e, struct capy_offload_stats *st);
/* Bytes of weights the engine reads per decoded token with all experts (for reports). */
uint64_t capy_engine_weight_bytes(const struct capy_engine *e);

/* --- sequences ------------------------------------------------------------------------- */

int capy_seq_new(struct capy_engine *e, struct capy_seq **out, struct capy_err *err);
void capy_seq_free(struct capy_seq *s);
/* Tokens consumed so far, and those tokens. */
uint64_t capy_seq_len(const struct capy_seq *s);
const int32_t *capy_seq_tokens(const struct capy_seq *s);
/* The ids of the attention-cache pages the sequence holds, in token order (*n of them; some
 * may be shared with other sequences): for counting memory that sequences share. */
const uint32_t *capy_seq_page_ids(const struct capy_seq *s, uint64_t *n);
/* A copy of s, sharing its attention-cache pages (copy-on-write), with its own copy of the
 * recurrent state. */
int capy_seq_fork(const struct capy_seq *s, struct capy_seq **out, struct capy_err *err);
/* A new sequence holding the first n tokens of s (n <= len): their attention-cache pages
 * shared, their ids copied, and no recurrent state (none is allocated: a holder of pages
 * costs only its block table) until capy_seq_restore() gives it the snapshot taken at n;
 * stepping or snapshotting it before that fails with CAPY_EINVAL. */
int capy_seq_share(const struct capy_seq *s, uint64_t n, struct capy_seq **out, struct capy_err *err);

/* The recurrent state (Gated DeltaNet states and conv windows, PLE context) of s at its
 * current length, kept apart from s. */
int capy_snapshot_take(const struct capy_seq *s, struct capy_snapshot **out, struct capy_err *err);
void capy_snapshot_free(struct capy_snapshot *sn);
uint64_t capy_snapshot_len(const struct capy_snapshot *sn);
uint64_t capy_snapshot_bytes(const struct capy_snapshot *sn);
/* Give s the recurrent state of sn; capy_seq_len(s) must equal capy_snapshot_len(sn) (the
 * caller vouches that s holds the same tokens as the sequence sn was taken from). */
int capy_seq_restore(struct capy_seq *s, const struct capy_snapshot *sn, struct capy_err *err);

/* Remember the recurrent state at the current length, so the sequence can later be cut
 * back to it; one checkpoint is kept (a new one replaces it). */
int capy_seq_checkpoint(struct capy_seq *s, struct capy_err *err);
/* Cut the sequence back to n tokens: n must be the current length, the length of the
 * checkpoint, or (speculative verification) one of the lengths the sequence's last step
 * passed through when that step had keep_states (attention caches are cut, recurrent state
 * restored from the checkpoint or from the state kept at n). Positions kept by a step are
 * forgotten by the sequence's next step or truncate. */
int capy_seq_truncate(struct capy_seq *s, uint64_t n, struct capy_err *err);

/* --- the context cache's host and disk tiers (libcore/kvstore) ----------------------------
 * A cached prefix leaves the engine as host bytes — its token ids, the attention-cache pages
 * of [0, n) whole, in the cache's dtype (BF16, F32, or INT8 with its scales) and the
 * backend's page layout, and the recurrent state of a snapshot at n — and comes back as a
 * new sequence, bitwise the state it left as (through the backend: device copies on a GPU). */

/* Whether the backend can move pages and recurrent states to host memory and back. */
bool capy_engine_can_export(const struct capy_engine *e);
/* Host bytes of one recurrent state (capy_snapshot_export), the artifact and KV dtype. */
uint64_t capy_engine_state_io_bytes(const struct capy_engine *e);
const struct capy_artifact *capy_engine_artifact(const struct capy_engine *e);
enum capy_kv_dtype capy_engine_kv_dtype(const struct capy_engine *e);
/* The pages covering tokens [0, n) of s (ceil(n / page_tokens) of them, page_bytes each)
 * into dst, in token order. */
int capy_seq_export_pages(const struct capy_seq *s, uint64_t n, void *dst, struct capy_err *err);
/* The recurrent state of sn into dst (capy_engine_state_io_bytes bytes). */
int capy_snapshot_export(const struct capy_snapshot *sn, void *dst, struct capy_err *err);
/* A new sequence of the n tokens ids: fresh pages filled from pages (as
 * capy_seq_export_pages wrote them for n tokens) and its recurrent state from state (as
 * capy_snapshot_export wrote a snapshot at n). The caller vouches that they belong together
 * and to this engine's model, dtype and backend (libcore/kvstore checks an entry's identity). */
int capy_seq_import(struct capy_engine *e, const int32_t *ids, uint64_t n, const void *pages, const void *state,
		    struct capy_seq **out, struct capy_err *err);

/* --- running tokens ---------------------------------------------------------------------- */

/* One sequence's part of a step: its next n tokens, and where its logits go: NULL for
 * none, else vocab_size floats for its last token, or n * vocab_size when all_logits.
 * With a sampler, the step also picks the token after the last one with it (exactly as
 * capy_sampler_next on the last row's logits, which stay as the model gave them) and writes
 * it to *token; a backend that can does that where the logits are (CUDA: on the GPU, the
 * row's logits never copied to the host unless asked for). */
struct capy_sampler;
struct capy_step_item {
	struct capy_seq *seq;
	const int32_t *tokens;
	uint64_t n;
	float *logits;
	bool all_logits;
	struct capy_sampler *sampler;
	int32_t *token;
	/* Speculative verification (spec/spec.h): keep the recurrent state after each of the n
	 * tokens, so that capy_seq_truncate can cut the sequence back to any of those lengths,
	 * and give the same bits as n one-token steps would (the recurrent layers run token by
	 * token, never the chunked form). Needs a non-empty sequence and a backend that keeps
	 * states (capy_engine_keeps_states). */
	bool keep_states;
	/* Constrained decoding (constrain/mask.h), with a sampler: mask(mask_ud) gives the tokens
	 * the sampler may pick, a bitmask of capy_mask_words(vocab) words (bit id % 32 of word
	 * id / 32 set: allowed), and the token is capy_sampler_next_masked's. The backend asks for
	 * it as late as it can: once the step's forward pass is under way (the CPU: after it;
	 * CUDA: once the layers and lm_head are enqueued, before the sampling kernel), so a mask
	 * computed on another thread during the step (constrain/mask-ahead.h) is joined only
	 * then. Called at most once per step, from the thread of capy_engine_step, and only if
	 * the step gets as far as sampling; the bits must stay as they are until the step
	 * returns. A NULL mask, or one that allows no token, gives *token = -1 (the caller knows
	 * why: its grammar ended or failed) and the sampler draws nothing. */
	const uint32_t *(*mask)(void *mask_ud);
	void *mask_ud;
	/* NULL, or n * hidden_size floats: the hidden state of each of the n tokens after the
	 * final norm (qwen4_exp: its final hc mixer; what lm_head reads and the MTP head takes).
	 * Engines with an MTP head only. */
	float *hidden;
};

/* Run one step: every item's tokens through the model in one pass (the weights are read
 * once for all of them). Items name distinct sequences; the tokens of all items together
 * are at most capy_engine_step_tokens(). On failure no sequence has advanced. */
int capy_engine_step(struct capy_engine *e, const struct capy_step_item *items, size_t n_items,
		     struct capy_err *err);

/* Run tokens[0..n) of one sequence, in steps of capy_engine_step_tokens() tokens. logits
 * receives vocab_size floats for the last token, or n * vocab_size when all_logits. */
int capy_engine_forward(struct capy_engine *e, struct capy_seq *s, const int32_t *tokens, uint64_t n,
			float *logits, bool all_logits, struct capy_err *err);
/* The same, and the final-normed hidden states of all n tokens into hidden (n * hidden_size
 * floats; NULL: none, as capy_engine_forward). */
int capy_engine_forward_hidden(struct capy_engine *e, struct capy_seq *s, const int32_t *tokens, uint64_t n,
			       float *logits, bool all_logits, float *hidden, struct capy_err *err);

/* --- the MTP head (docs/spec.md "MTP drafts") --------------------------------------------
 * Row t of a call sits at position pos + t of seq: it takes hidden[t] (the main model's
 * final-normed hidden state at that position, or, chaining, the head's own output g of the
 * row before) and tokens[t] (the token at position pos + t + 1), and writes the head's
 * attention-cache row at that position into seq's pages (its own rows, beside the main
 * layers'; rows at positions past the sequence's length are scratch that a later call
 * overwrites, pages for them are taken as a step would). The head attends over its rows at
 * positions [0, pos + t] of seq, so the caller runs every position once, in order, before
 * drafting from it. */
struct capy_mtp_rows {
	struct capy_seq *seq;
	uint64_t pos, n;          /* pos <= capy_seq_len(seq) + step tokens, n >= 1 */
	const float *hidden;      /* [n][hidden_size] */
	const int32_t *tokens;    /* [n] */
	float *g;                 /* NULL or hidden_size floats: the last row's output */
	const int32_t *ids;       /* the draft vocabulary (capy-shortlist), NULL: all of it */
	uint64_t n_ids;
	float *logits;            /* NULL, or the last row's logits over ids (n_ids floats, in the
				   * order of ids) or the vocabulary; every row's with all_logits */
	bool all_logits;
};

bool capy_engine_has_mtp(const struct capy_engine *e);
int capy_engine_mtp(struct capy_engine *e, const struct capy_mtp_rows *r, struct capy_err *err);

#endif
