/* sched.h - the scheduler: continuous batching of generation requests on one engine, with
 * a prefix cache, on an engine thread of its own.
 *
 *	struct capy_sched *s;
 *	capy_sched_new(&s, engine, &(struct capy_sched_opts){ .max_concurrency = 8,
 *		       .cache_bytes = 1 << 30 }, &err);
 *	uint64_t id;
 *	capy_sched_submit(s, &(struct capy_gen_request){ prompt, n, .sampling = sp,
 *			  .max_new_tokens = 256, .stop_ids = eos, .n_stop_ids = 2,
 *			  .cb = on_event, .ud = conn }, &id, &err);
 *	...
 *	capy_sched_cancel(s, id);		(from any thread: the client went away)
 *	capy_sched_free(s, 10.0);		(finish or cancel what runs, within 10 s)
 *
 * Each step of the engine thread carries one token of every request that is generating
 * and pieces of the prompts being read, up to the engine's step size; new requests join
 * between steps, up to max_concurrency at once (the rest wait in order). A prompt is read in
 * pieces of at most prefill_chunk tokens, cut only where the request itself decides (its
 * length, the chunk size, its snapshot positions), never by what else is running — so a
 * request's tokens do not depend on the load (the engine's step is batch-invariant).
 *
 * Prefix cache: before a request starts, the longest prefix of its prompt that matches
 * anything cached and ends at a snapshot is taken over without being recomputed: the
 * attention-cache pages of that prefix are shared, the recurrent state restored from the
 * snapshot. Snapshots are taken at the end of every prompt, at snapshot_at (the caller's
 * choice, e.g. where the final message of a chat starts), every snapshot_interval prompt
 * tokens, and at the end of every answer; the least recently used go first when the cache
 * outgrows cache_bytes. Results with a cache hit can differ from a cold start in the last
 * bits (the tokens before the hit were cut into steps differently).
 *
 * Callbacks run on the engine thread, between steps: they must be quick and must not
 * block or call back into the scheduler except capy_sched_cancel and capy_sched_stats.
 * Everything else may be called from any thread.
 */
#ifndef CAPY_SCHED_H
#define CAPY_SCHED_H

#include "../engine/engine.h"
#include "../sample/sample.h"
#include "../kvstore/kvstore.h"

struct capy_sched;
struct capy_grammar;
struct capy_token_trie;

struct capy_sched_opts {
	int max_concurrency;        /* requests in the batch at once (0: 8) */
	uint64_t max_queue;         /* requests waiting beyond those (0: 256); more are refused */
	uint64_t max_context;       /* prompt + generated tokens of a request (0: 32768) */
	uint64_t prefill_chunk;     /* prompt tokens of one request per step (0: 256) */
	uint64_t cache_bytes;       /* prefix cache budget; 0: no prefix cache */
	uint64_t snapshot_interval; /* snapshot every this many prompt tokens (0: 4096) */
	/* Constrained requests: threads that compute each request's next token mask while the
	 * engine runs the step that gives its logits (0: 2; < 0: none, each mask computed after
	 * the step, as it is needed). The tokens are the same either way. */
	int mask_threads;
	/* The context cache's host and disk tiers (kvstore.h; NULL: none): what the prefix cache
	 * evicts is demoted there, and a prompt that matches more there than in the prefix cache
	 * is restored from it. The caller's: it outlives the scheduler (whose free demotes the
	 * prefix cache's entries into it when it has a disk tier, for a restart to find). */
	struct capy_kvstore *kvstore;
	/* KV leases: a request reserves the attention-cache pages of its prompt plus
	 * kv_lease_window tokens (0: plus its whole max_new_tokens), and extends the lease by the
	 * window each time its answer reaches the end of it. With kv_pages (the pages the requests'
	 * leases and the prefix cache's pages share; 0: no bound, leases only counted), a request
	 * whose lease does not fit first makes the prefix cache demote what it must, then waits in
	 * the queue while others run; a lease that grows past the bound makes the cache give way
	 * too (a running request is never stopped for it). So a large max_tokens reserves only
	 * a window, and pushes no one else's conversation out of the cache for tokens it may
	 * never write. */
	uint64_t kv_lease_window;
	uint64_t kv_pages;
	/* Speculative decoding (spec/spec.h): a decoding request gets up to spec_draft_tokens
	 * drafts per step from its drafters (spec_sources: n-gram drafts of its prompt and
	 * output, the MTP head), verified
	 * in its step item (keep_states) and cut back to what was accepted; 0: off. Needs an
	 * engine that keeps states (capy_engine_keeps_states) and a step of prefill_chunk +
	 * max_concurrency * (spec_draft_tokens + 1) tokens. Requests with a grammar or with
	 * logprobs decode one token per step. Greedy tokens are the same bits as without. */
	uint64_t spec_draft_tokens;
	uint64_t spec_ngram_min;    /* the shortest match that drafts (0: 2) */
	/* Where the drafts come from: CAPY_SPEC_NGRAM, CAPY_SPEC_MTP or both (0: n-gram). MTP
	 * drafts (the model's own head, spec.h capy_mtp) need an engine opened with opts.mtp;
	 * each request that can take drafts gets a drafter that follows its sequence (its steps
	 * hand over their hidden states, the head runs over each prompt piece after its step).
	 * With both, a request's window is the n-gram draft when that fills all the drafts the
	 * window may take, else the head's. Before each snapshot the head runs over every
	 * position but the last, whose hidden state the snapshot keeps, so a request that
	 * resumes from the prefix cache drafts with the head too when the snapshot's request
	 * did (not from the context cache's host and disk tiers, which keep no hidden state;
	 * with both sources it still gets n-gram drafts). spec_draft_ids[0 ..
	 * spec_n_draft_ids): MTP's draft vocabulary (capy-shortlist's ids; copied), NULL for
	 * all of it. */
	unsigned spec_sources;
	const int32_t *spec_draft_ids;
	uint64_t spec_n_draft_ids;
};

#define CAPY_SPEC_NGRAM 1u
#define CAPY_SPEC_MTP 2u

enum capy_gen_event_type {
	CAPY_GEN_START, /* the request entered the batch; cached_tokens known */
	CAPY_GEN_TOKEN, /* a generated token (not the stop token that ends the answer) */
	CAPY_GEN_END,   /* the request is over; nothing follows for it */
};

enum capy_gen_finish {
	CAPY_FINISH_STOP_TOKEN, /* a stop id was generated (not delivered as a token) */
	CAPY_FINISH_LENGTH,     /* max_new_tokens generated, or max_context reached */
	CAPY_FINISH_STOPPED,    /* the callback asked to stop (e.g. a stop string matched) */
	CAPY_FINISH_CANCELLED,  /* capy_sched_cancel */
	CAPY_FINISH_SHUTDOWN,   /* the scheduler closed before the request finished */
	CAPY_FINISH_ERROR,      /* the engine failed, or the grammar hit a dead end; error says why */
	CAPY_FINISH_GRAMMAR,    /* the request's grammar is complete: nothing more could follow */
};

#define CAPY_GEN_MAX_TOP_LOGPROBS 20

struct capy_gen_event {
	enum capy_gen_event_type type;
	uint64_t id;
	uint64_t cached_tokens;      /* START, END: prompt tokens served from the prefix cache */
	enum capy_kv_tier cache_tier; /* START, END: the tier they came from (NONE: no hit) */
	/* TOKEN */
	int32_t token;
	uint64_t index;              /* 0 for the first generated token */
	float logprob;               /* of token under the model (with top_logprobs >= 0) */
	int n_top;                   /* the top_logprobs most likely ids, most likely first */
	const int32_t *top_ids;
	const float *top_logprobs;
	/* END */
	enum capy_gen_finish finish;
	int32_t stop_token;          /* CAPY_FINISH_STOP_TOKEN */
	const char *error;           /* CAPY_FINISH_ERROR */
	uint64_t prompt_tokens, generated_tokens;
	double queue_s, prefill_s, decode_s; /* waiting, reading the prompt, generating */
	/* constrained requests: the token masks' compute time, and the part of it the request
	 * waited for (what the masks added to its latency: the rest was hidden by the steps) */
	double mask_s, mask_wait_s, mask_wait_max_s;
	/* speculative decoding (spec_draft_tokens): verification windows, drafts verified, of
	 * them accepted; the same for the windows the MTP head drafted (the rest: n-gram) */
	uint64_t spec_windows, spec_drafted, spec_accepted;
	uint64_t spec_mtp_windows, spec_mtp_drafted, spec_mtp_accepted;
};

/* Return 0 to go on; nonzero from a TOKEN event ends the request (CAPY_FINISH_STOPPED). */
typedef int (*capy_gen_cb)(void *ud, const struct capy_gen_event *ev);

struct capy_gen_request {
	const int32_t *prompt;       /* copied by capy_sched_submit */
	size_t n_prompt;
	struct capy_sampler_params sampling;
	uint64_t max_new_tokens;     /* 0: up to max_context */
	const int32_t *stop_ids;     /* ids that end the answer (copied; at most 16) */
	size_t n_stop_ids;
	int top_logprobs;            /* -1: no logprobs; 0 .. CAPY_GEN_MAX_TOP_LOGPROBS */
	uint64_t snapshot_at;        /* one more snapshot position inside the prompt (0: none) */
	capy_gen_cb cb;
	void *ud;
	/* Constrained output (structured output, forced tool calls): every token is drawn on
	 * the host from the logits masked to what the grammar can read next from where the
	 * output is (constrain/mask.h), and the request ends with CAPY_FINISH_GRAMMAR once the
	 * grammar is complete, or at a stop id where it accepts; a state no token can continue
	 * ends it with CAPY_FINISH_ERROR. A successful capy_sched_submit takes grammar over (it
	 * is freed with the request; on failure it stays the caller's). trie is the
	 * vocabulary's, built with the request's stop ids as its stop tokens; read-only and
	 * shared by any number of requests, it must outlive the scheduler. */
	struct capy_grammar *grammar;
	const struct capy_token_trie *trie;
};

struct capy_sched_stats {
	uint64_t queued, active;             /* waiting, in the batch */
	uint64_t requests, prompt_tokens, cached_tokens, generated_tokens; /* totals */
	uint64_t prefill_tokens;             /* prompt tokens computed (not from the cache) */
	double prefill_s, decode_s;          /* engine time in steps that read prompts / only decoded */
	uint64_t steps;
	uint64_t masks;                      /* token masks of constrained requests */
	double mask_s, mask_wait_s;          /* their compute time, the time waited for them */
	uint64_t cache_bytes, cache_entries, cache_snapshots;
	uint64_t cache_lookups, cache_hits;  /* requests that looked, that found a prefix */
	uint64_t kv_pages, page_bytes;       /* attention-cache pages in use, bytes each */
	uint64_t kv_pages_held;              /* pages the backend holds storage for */
	/* hits and the prompt tokens they served, by tier (enum capy_kv_tier; device = the
	 * prefix cache itself), and the lower tiers' own counts (with kvstore set) */
	uint64_t tier_hits[4], tier_cached_tokens[4];
	bool tiers;
	struct capy_kvstore_stats kv;
	uint64_t kv_leased_pages;            /* the running requests' leases */
	uint64_t kv_lease_waits;             /* admissions deferred for want of lease room */
	uint64_t spec_windows, spec_drafted, spec_accepted; /* speculative decoding, all requests */
	uint64_t spec_mtp_windows, spec_mtp_drafted, spec_mtp_accepted; /* of them, MTP's windows */
	double spec_mtp_s;                   /* the MTP head's time (drafts, prompt rows) */
	bool failed;                         /* an engine-wide failure stopped the scheduler */
	/* expert offload's counts (capy_engine_offload_stats), read on the engine thread after
	 * each step, with offloading false when the engine does not offload */
	bool offloading;
	struct capy_offload_stats offload;
};

int capy_sched_new(struct capy_sched **out, struct capy_engine *e, const struct capy_sched_opts *opts,
		   struct capy_err *err);
/* Stop taking requests (capy_sched_submit fails with CAPY_EBUSY from now on); let the running
 * ones finish for up to drain_s seconds, end the rest with CAPY_FINISH_SHUTDOWN (their callbacks
 * still get END) and stop the engine thread. The scheduler stays valid (stats, cancel) until
 * freed. Once; later calls return at once. */
void capy_sched_stop(struct capy_sched *s, double drain_s);
/* capy_sched_stop (if it was not called) and free. */
void capy_sched_free(struct capy_sched *s, double drain_s);

/* Queue a request; *id names it. Fails with CAPY_EINVAL (empty prompt, a prompt that leaves
 * no room below max_context, bad sampling parameters), CAPY_EBUSY (the queue is full, or the
 * scheduler is closing or failed), CAPY_ENOMEM. On success the callback will get START (or an
 * END if it never starts), TOKENs, and exactly one END. */
int capy_sched_submit(struct capy_sched *s, const struct capy_gen_request *r, uint64_t *id, struct capy_err *err);
/* End a request early (CAPY_FINISH_CANCELLED); unknown or finished ids are ignored. */
void capy_sched_cancel(struct capy_sched *s, uint64_t id);
void capy_sched_stats(struct capy_sched *s, struct capy_sched_stats *out);
const struct capy_sched_opts *capy_sched_options(const struct capy_sched *s);

#endif
