/* backend.h - what a backend implements for the engine, and the engine's structures a
 * backend reads. Included by engine/ and by each backend (libcore/backend/<name>/); the tools
 * use engine.h only.
 *
 * A backend is a table of operations (struct capy_backend_ops) found by name in
 * capy_backend_find(). It owns the weights, the memory of the attention-cache pages and of
 * the per-sequence recurrent state, and computes steps. The engine core owns everything
 * model-independent: page ids and reference counts, each sequence's block table (page ids in
 * token order) and token history, snapshots' lengths, and the checks before a step.
 *
 * Before calling step() the core has made sure that every page a step item writes into
 * exists, is held by that sequence only (copy-on-write) and has storage; after it returns 0
 * the core advances each sequence's length and history. step() must not change a sequence's
 * len, its pages or its history.
 */
#ifndef CAPY_ENGINE_BACKEND_H
#define CAPY_ENGINE_BACKEND_H

#include "engine.h"

struct capy_engine {
	const struct capy_artifact *a;
	struct capy_model_config c;
	struct capy_engine_opts opts;
	const struct capy_backend_ops *ops;
	void *be;                /* the backend's own state */
	uint64_t step_tokens;
	uint64_t page_tokens;    /* tokens per attention-cache page */
	/* page pool: ids 0 .. n_pages-1, reference count 0 = free; the lowest free id is taken
	 * first and free ids at the top leave the pool, so that the ids in use stay low and the
	 * storage above them can go back to the backend (pages_release) */
	uint32_t *page_ref;
	uint64_t *free_bits;     /* bit i: id i is free */
	uint32_t free_lo;        /* no free id below word free_lo */
	uint32_t n_pages, n_free, pages_used, pages_cap;
	uint32_t storage_pages;  /* ids the backend has storage for */
	uint32_t reserved_pages; /* capy_engine_reserve's: storage never given back below this */
	float *sample_logits;    /* host sampling of items without logits: vocab floats each */
	size_t sample_rows;
};

struct capy_seq {
	struct capy_engine *e;
	uint64_t len;
	int32_t *tokens;         /* [len] the history */
	uint64_t tokens_cap;
	uint32_t *pages;         /* block table: page of tokens [i P, (i + 1) P) */
	uint64_t n_pages, pages_cap;
	void *state;             /* the backend's recurrent state */
	bool state_valid;        /* false after capy_seq_share(n < len) until restored */
	struct capy_snapshot *checkpoint;
	/* the states kept by the last step with keep_states: kept[i] is the state at length
	 * kept_base + i + 1 (i < kept_n; the last one is the sequence's own state) */
	void **kept;
	uint64_t kept_cap, kept_base, kept_n;
};

struct capy_snapshot {
	struct capy_engine *e;
	uint64_t len;
	void *state;
};

/* The page holding token pos of s, and the token's row in it. */
static inline uint32_t capy_seq_page(const struct capy_seq *s, uint64_t pos)
{
	return s->pages[pos / s->e->page_tokens];
}

/* One item of a step as the backend sees it: tokens [t0, t0 + n) of the step's token rows
 * belong to seq, at positions seq->len .. seq->len + n - 1. */
struct capy_batch_item {
	struct capy_seq *seq;
	const int32_t *tokens;
	uint64_t n, t0;
	float *logits;           /* NULL: none; else as in struct capy_step_item */
	bool all_logits;
	struct capy_sampler *sampler; /* backends with ops.samples only: as in capy_step_item */
	int32_t *token;
	/* keep_states (backends with ops.keeps_states only): states[t] (t < n - 1, each made by
	 * state_new) receives the recurrent state after the item's token t; the sequence's own
	 * state ends after its last token as usual. NULL: none kept. */
	void *const *states;
	/* as in capy_step_item (with a sampler only): the backend calls it once, late */
	const uint32_t *(*mask)(void *mask_ud);
	void *mask_ud;
	float *hidden;           /* NULL, or [n][H] as in struct capy_step_item */
};

/* An item's token from its last row's logits on the host (row is changed): capy_sampler_next,
 * or with a mask, the mask asked for now and capy_sampler_next_masked (-1 without a mask or
 * with nothing allowed). For backends that sample, where the device cannot. */
int32_t capy_step_sample(const struct capy_batch_item *it, float *row);

struct capy_batch {
	const struct capy_batch_item *items;
	size_t n_items;
	uint64_t n_tokens;       /* sum of the items' n */
};

struct capy_backend_ops {
	const char *name;
	/* Bind the weights of e->a and allocate what steps of up to e->step_tokens tokens
	 * need; sets e->be. May set e->page_tokens (a multiple of 16) before returning. */
	int (*open)(struct capy_engine *e, struct capy_err *err);
	void (*close)(struct capy_engine *e);
	int (*threads)(const struct capy_engine *e);
	uint64_t (*weight_bytes)(const struct capy_engine *e);
	/* Attention-cache pages: bytes of one page; storage for ids [0, n); copy a page whole. */
	uint64_t (*page_bytes)(const struct capy_engine *e);
	int (*pages_reserve)(struct capy_engine *e, uint32_t n, struct capy_err *err);
	void (*page_copy)(struct capy_engine *e, uint32_t dst, uint32_t src);
	/* Optional: give back the storage of ids >= n (no id there is held); returns the ids it
	 * still has storage for (>= n: a backend may keep more). Called between steps. */
	uint32_t (*pages_release)(struct capy_engine *e, uint32_t n);
	/* Optional: an elastic attention cache (expert offload's budget shared with the expert
	 * slots, docs/offload.md): the most ids pages_reserve can provide, or 0 when storage is
	 * not elastic. capy_engine_reserve then only checks against it and takes nothing: the
	 * storage is taken as sequences grow, and given back when they end. */
	uint32_t (*pages_elastic)(const struct capy_engine *e);
	/* Recurrent state of a sequence: a fresh one (the start of a sequence), copy, free. */
	uint64_t (*state_bytes)(const struct capy_engine *e);
	int (*state_new)(struct capy_engine *e, void **out, struct capy_err *err);
	void (*state_copy)(struct capy_engine *e, void *dst, const void *src);
	void (*state_free)(struct capy_engine *e, void *st);
	/* Optional (the context cache's host and disk tiers need them): a page's bytes to host
	 * memory and back (page_bytes each), and a recurrent state to and from state_io_bytes
	 * host bytes, exactly (a state written back is bitwise the one read). */
	int (*page_read)(struct capy_engine *e, uint32_t id, void *dst, struct capy_err *err);
	int (*page_write)(struct capy_engine *e, uint32_t id, const void *src, struct capy_err *err);
	uint64_t (*state_io_bytes)(const struct capy_engine *e);
	int (*state_read)(struct capy_engine *e, const void *st, void *dst, struct capy_err *err);
	int (*state_write)(struct capy_engine *e, void *st, const void *src, struct capy_err *err);
	/* Optional: one line describing the device and its memory (capy_engine_describe). */
	void (*describe)(const struct capy_engine *e, char *buf, size_t size);
	/* Optional: the memory plan its sizes came from, in one line (capy_engine_plan_line). */
	void (*plan)(const struct capy_engine *e, char *buf, size_t size);
	/* Optional: expert offload's counts (capy_engine_offload_stats); false when the
	 * backend holds every routed expert where it computes. */
	bool (*offload_stats)(const struct capy_engine *e, struct capy_offload_stats *st);
	/* Run the batch; fill each item's logits (and, with samples set, sample its token). */
	int (*step)(struct capy_engine *e, const struct capy_batch *b, struct capy_err *err);
	/* step() samples the items that have a sampler itself; else the engine core gives them
	 * logits and samples on the host. */
	bool samples;
	/* step() honours batch items' states (keep_states); else such steps are refused. */
	bool keeps_states;
	/* Optional: the MTP head (opts.mtp; engine.h capy_engine_mtp), rows r->pos .. r->pos +
	 * r->n - 1, at most step_tokens of them; the core has made the pages of those positions
	 * exist and belong to r->seq alone, and checked the tokens and ids. Backends with it also
	 * fill step items' hidden. */
	int (*mtp)(struct capy_engine *e, const struct capy_mtp_rows *r, struct capy_err *err);
	/* Whether the backend runs opts.tp > 1 (the CPU: as a simulation). */
	bool tp;
};

/* Where one attention layer's rows are inside an attention-cache page (byte offsets): K and V
 * [P][nkv * hd] in the KV dtype; INT8: one float scale per 32 values [P][nkv * hd / 32] at
 * k_scale / v_scale; QSA (qwen4_exp): raw indexer keys [P][idh] float and pooled block keys
 * [P / ratio][idh] float. */
struct capy_kv_fields {
	uint64_t k, v, k_scale, v_scale, idx_keys, blocks;
};

/* The page layout every backend uses: P = 64 tokens per page, rounded up to a multiple of
 * the QSA compression ratio (a page holds whole key blocks); the n_kv layers' fields one after
 * another, each aligned to `align` bytes. Fills lay[n_kv], *P and *page_bytes. */
int capy_kv_page_layout(const struct capy_model_config *c, enum capy_kv_dtype kv, int n_kv, uint64_t align,
			struct capy_kv_fields *lay, uint64_t *P, uint64_t *page_bytes, struct capy_err *err);

/* Pages that hold `tokens` tokens over `sequences` sequences, each sequence's last page
 * partly used (what capy_engine_reserve takes and the memory plan counts). */
static inline uint64_t capy_kv_pages_needed(uint64_t tokens, uint64_t sequences, uint64_t page_tokens)
{
	return (tokens + page_tokens - 1) / page_tokens + sequences;
}

/* The backend called name ("cpu", or one added with capy_backend_add); NULL if none. */
const struct capy_backend_ops *capy_backend_find(const char *name);
/* Make a backend available by its name (test builds add scripted ones); -1 if the table
 * is full. */
int capy_backend_add(const struct capy_backend_ops *ops);

/* The CPU backend (libcore/backend/cpu). */
extern const struct capy_backend_ops capy_backend_cpu;
/* The CUDA backend (libcore/backend/cuda), in builds with CUDA. */
extern const struct capy_backend_ops capy_backend_cuda;

#endif
