/* plan.h - the memory plan of a GPU engine: what the CUDA backend puts in device memory and
 * what stays in host RAM, computed from the artifact's tensor table, the model's configuration
 * and the options alone (no GPU, no CUDA runtime), so that `--plan` prints it on any machine
 * and the backend allocates exactly these sizes: it calls the same functions.
 *
 *	struct capy_host_mem h;
 *	struct capy_plan p;
 *	if (capy_host_mem_read(&h, &err) < 0 ||
 *	    capy_plan_compute(&p, a, &c, &(struct capy_plan_opts){ .gpu_mem = 16ull << 30,
 *			      .max_context = 32768, .max_seqs = 4, .step_tokens = 260 }, &h, &err) < 0 ||
 *	    capy_plan_check(&p, &err) < 0)
 *		die("%s", err.msg);
 *
 * The plan, for one GPU of gpu_mem bytes: the fixed parts first (the non-expert weights as
 * uploaded, the small fp32 vectors, the attention-cache pages of max_seqs sequences at
 * max_context tokens, their recurrent states, the step's buffers for step_tokens tokens and
 * the attention workspace for max_context), then the rest as slots of routed experts. A slot
 * holds one expert record of the largest stride among the artifact's expert stacks (one
 * expert is one contiguous range there, so one copy fills a slot); slots are capped at the
 * number of experts, and when every expert fits ("all resident") the upload is the
 * artifact's device tensors in one piece, exactly as without a plan. Experts that are not all
 * resident are held in host RAM, all of them in one page-locked allocation when
 * RLIMIT_MEMLOCK allows it, else read from the mapped artifact (not page-locked, slower).
 *
 * The MTP head (mtp.*: its weights, its expert stack, its layer's rows in every attention-cache
 * page, its buffers) is counted only with opts.mtp, where the artifact holds one; an engine
 * without it neither uploads nor keeps it.
 *
 * Elastic attention cache (offloading with a max_context beyond CAPY_PLAN_KV_HELD tokens):
 * only the pages of max_seqs sequences of CAPY_PLAN_KV_HELD tokens are held from the start;
 * the slots are counted as if the rest of the attention cache were not there, and the pages
 * beyond the held ones are taken from the slot pool as contexts grow (the expert cache gives
 * up its coldest experts) and given back when they end. The budget still has to hold every
 * sequence at max_context with no slots at all: that is what capy_plan_check checks.
 *
 * capy_plan_check refuses a plan whose fixed parts do not fit gpu_mem, or that needs more
 * host RAM than is available (the RAM guard), with the numbers.
 *
 * Why offload/: the plan is the budget of the expert cache (expert-cache.h's slots) and of
 * its host side; it needs artifact/, model/ and engine/'s page layout only, and it is built
 * into every build, CUDA or not. The kernels' workspace formulas (in kernels/, C++) are
 * transcribed below in C; the CUDA backend compares them with the kernels' own at open and
 * refuses to run where the kernels would need more than planned.
 *
 * Not counted: the CUDA context itself (a few hundred MiB outside --gpu-mem), the step's
 * metadata block (block tables; under 1 MiB), the recurrent states speculative verification
 * keeps (--draft-tokens per drafting sequence, engine/backend.h's kept states), and the prefix
 * cache's snapshots of recurrent state (capy-serve's --cache-mib).
 *
 * Thread-safety: pure functions of their arguments, except capy_host_mem_read (reads files
 * and the environment).
 */
#ifndef CAPY_OFFLOAD_PLAN_H
#define CAPY_OFFLOAD_PLAN_H

#include "../artifact/artifact.h"
#include "../engine/engine.h"
#include "../model/config.h"
#include "../util/buf.h"

/* Every device allocation of the backend is a multiple of this (the kernels' alignment). */
#define CAPY_PLAN_ALIGN 256
/* An elastic attention cache holds this many tokens per sequence from the start. */
#define CAPY_PLAN_KV_HELD 4096

/* --- the sizes the CUDA backend allocates -------------------------------------------------- */

/* A range of the mapped artifact that is copied to device memory. */
struct capy_plan_range {
	uint64_t off, len;
};

/* Tensors that stay in host memory, read by rows (the PLE n-gram tables). */
bool capy_plan_host_only(const struct capy_tensor_info *t);
/* Members of an expert stack: the routed experts. */
static inline bool capy_plan_is_expert(const struct capy_tensor_info *t)
{
	return t->stack >= 0;
}
/* The MTP head's tensors and expert stack (mtp.*): on the device only with engine opts.mtp. */
bool capy_plan_is_mtp(const char *name);

/* The byte ranges of the device tensors (all of them, or with experts false all but the
 * routed experts; the MTP head's only with mtp), sorted by offset and merged where they touch
 * (stacks interleave slices of several tensors), in *out (n of them; free() it); *bytes gets
 * the device bytes they take, each range rounded up to CAPY_PLAN_ALIGN. */
int capy_plan_ranges(const struct capy_artifact *a, bool experts, bool mtp, struct capy_plan_range **out, size_t *n,
		     uint64_t *bytes, struct capy_err *err);

/* Floats of the binding's small fp32 vectors (norms, conv kernels, gate parameters): an upper
 * bound, each vector 64-float aligned. */
uint64_t capy_plan_small_floats(const struct capy_model_config *c);

/* Layers with each kind of state, as model/weights numbers them (KV: attention layers, GDN:
 * linear-attention layers, PLE: qwen4_exp's PLE layers). */
void capy_plan_layer_counts(const struct capy_model_config *c, int *n_kv, int *n_gdn, int *n_ple);

/* A sequence's recurrent state: floats of one GDN layer's slot (conv window and delta-rule
 * state; kernels' ck_gdn_state_floats), of one PLE layer's conv windows, and of the whole
 * state (every GDN slot, then every PLE slot). */
uint64_t capy_plan_gdn_floats(const struct capy_model_config *c);
uint64_t capy_plan_ple_floats(const struct capy_model_config *c);
uint64_t capy_plan_state_floats(const struct capy_model_config *c);

/* The step's buffers for steps of T tokens (bytes; floats are 4 bytes): the activations, the
 * logits of up to logits_rows rows, and the kernels' workspaces (the NVFP4 linears'
 * activation quantization, the routed experts', the sampler's records); on the host, the
 * pinned staging copies. With the MTP head (mtp): its matrices in the workspaces, big1 wide
 * enough for its [embedding | hidden] rows (2 H), and its draft vocabulary's ids. */
struct capy_plan_scratch {
	uint64_t T, logits_rows;
	uint64_t x, xn, blk, out, inj, mix, tmp, big1, big2, big3;
	uint64_t moe_out, moe_w, moe_ids, ple_emb, rows, hid, logits, row_idx;
	uint64_t lin_ws, moe_ws;
	uint64_t smp_rows, smp_out;       /* the GPU sampler's row settings and results */
	uint64_t smp_mask;                /* its rows' token masks (structured output): ceil(V / 32) words each */
	uint64_t mtp_ids;                 /* the MTP head's draft vocabulary: up to V int32 ids */
	uint64_t gdn_count;               /* GDN decode: [T][value heads] block counters (ck_gdn_decode) */
	uint64_t device;                  /* the sum of the above */
	uint64_t host_logits, host_row_idx, host_smp_rows, host_smp_out, host_smp_mask, host_ple;
	uint64_t host;                    /* the sum of the host_ ones */
};

/* The GPU sampler's records per logits row: kernels/capy-kernels.h's struct ck_sample_row and
 * struct ck_sample_out (CK_SAMPLE_CAP = 2048 candidates), which the backend asserts at compile
 * time. */
#define CAPY_PLAN_SAMPLE_ROW_BYTES 24
#define CAPY_PLAN_SAMPLE_OUT_BYTES (16 + 2048 * 8)

void capy_plan_scratch(struct capy_plan_scratch *s, const struct capy_artifact *a, const struct capy_model_config *c,
		       uint64_t T, bool mtp);

/* The buffers that grow with the longest context of a step: the context they are sized for
 * (from `have`, or 1024 when 0, doubled until it holds ctx tokens), the attention kernels'
 * workspace (shared with the QSA block selection's) and the QSA selection mask, for steps of
 * T tokens over cap tokens of context. */
uint64_t capy_plan_context_cap(uint64_t have, uint64_t ctx);
uint64_t capy_plan_attn_ws(const struct capy_model_config *c, uint64_t T, uint64_t cap);
uint64_t capy_plan_sel_bytes(const struct capy_model_config *c, uint64_t T, uint64_t cap);

/* --- expert offload ---------------------------------------------------------------------- */

/* The device buffers of an offloading engine (bytes): a slot map per expert stack ([E] int32:
 * the slot of each expert, or -1) and the step's two slot-id arrays ([T * k] int32: the
 * resident experts' slots for the exact rows, the expert ids for the prompt rows). */
uint64_t capy_plan_offload_dev(const struct capy_artifact *a, const struct capy_model_config *c, uint64_t T);

/* The page-locked hand-over area of an offloading engine for steps of T tokens (S = T * k
 * routed slots), each part an offset into one allocation that the GPU writes and reads
 * through its mapping: the misses' count, their experts, their slots and their rows' indexes
 * ([S] each), the rows x ([T][H] floats), the CPU's results ([S][H]), every MoE layer's routed
 * ids ([stacks][S], for the expert cache) and a CPU job per MoE layer, CAPY_PLAN_JOB_BYTES
 * apart (the GPU writes their counts and request words and waits on their done words). */
struct capy_plan_hand {
	uint64_t n_misses, expert, miss_slot, x_row, x, out, route, job, bytes;
};
#define CAPY_PLAN_JOB_BYTES 4096
void capy_plan_offload_hand(struct capy_plan_hand *h, const struct capy_artifact *a, const struct capy_model_config *c,
			    uint64_t T);
uint64_t capy_plan_offload_host(const struct capy_artifact *a, const struct capy_model_config *c, uint64_t T);

/* --- host memory --------------------------------------------------------------------------- */

#define CAPY_PLAN_UNKNOWN UINT64_MAX

struct capy_host_mem {
	uint64_t available;               /* MemAvailable; CAPY_PLAN_UNKNOWN when it cannot be read */
	uint64_t memlock;                 /* RLIMIT_MEMLOCK (soft); CAPY_PLAN_UNKNOWN: unlimited */
	char meminfo[256];                /* the file available came from */
};

/* MemAvailable of $CAPY_MEMINFO (default /proc/meminfo) and the soft RLIMIT_MEMLOCK, or
 * $CAPY_MEMLOCK (a size, or "unlimited") in its place: the environment lets a test play a
 * small machine. A missing meminfo leaves available unknown; a malformed one, or a bad
 * CAPY_MEMLOCK, fails with CAPY_EFORMAT naming it. */
int capy_host_mem_read(struct capy_host_mem *h, struct capy_err *err);
/* MemAvailable of a /proc/meminfo text ("MemAvailable:   123456 kB"); -1 when absent. */
int capy_host_mem_parse(const char *text, uint64_t *available);

/* --- the plan ------------------------------------------------------------------------------ */

struct capy_plan_opts {
	uint64_t gpu_mem;                 /* device memory of the GPU the engine may take (0: no cap) */
	uint64_t max_context;             /* tokens of one sequence the attention cache is held for */
	uint64_t max_seqs;                /* sequences at once (0: 1) */
	uint64_t step_tokens;             /* tokens of one step (0: 512, the engine's default) */
	enum capy_kv_dtype kv;
	const char *budget;               /* what gpu_mem is, in messages (NULL: "--gpu-mem") */
	int64_t expert_slots;             /* a cap on the slots (engine.h's expert_slots: 0 none,
					   * CAPY_EXPERT_SLOTS_NONE: no slots at all) */
	bool mtp;                         /* the MTP head (engine.h's opts.mtp), where the artifact
					   * holds one: its weights, its layer's rows in every
					   * attention-cache page, its buffers */
	uint64_t kept_states;             /* recurrent states each sequence keeps besides its own for
					   * speculative verification (engine.h's opts.kept_states) */
};

struct capy_plan {
	struct capy_plan_opts o;          /* as given, defaults filled in */
	enum capy_family family;
	bool mtp;                         /* the MTP head counted (asked for, and in the artifact) */
	bool has_mtp;                     /* the artifact holds an MTP head (mtp.fc.weight) */
	/* device memory, fixed parts */
	uint64_t weights;                 /* the non-expert device tensors, as uploaded */
	uint64_t small;                   /* the fp32 vectors and the RoPE table */
	uint64_t page_tokens, page_bytes, pages, kv; /* the attention cache: pages x page_bytes */
	bool elastic;                     /* its pages beyond pages_held come from the slot pool */
	uint64_t pages_held;              /* elastic: the pages held from the start (else pages) */
	uint64_t state_bytes, states;     /* one sequence's recurrent state; max_seqs of them */
	uint64_t scratch;                 /* the step's buffers (struct capy_plan_scratch) */
	uint64_t mask_rows, masks;        /* of which the token masks: rows of them, their bytes
					   * (as many again page-locked on the host) */
	uint64_t context_cap, context;    /* attention workspace and QSA mask for context_cap tokens */
	uint64_t fixed;                   /* the sum of the fixed parts */
	/* routed experts */
	uint64_t experts, expert_bytes;   /* every routed expert (all stacks) and their bytes as stored */
	uint64_t moe_layers;              /* expert stacks */
	uint64_t slot_bytes, slots;       /* a slot holds the largest expert record; slots gpu_mem holds */
	uint64_t offload_dev;             /* offloading: the slot maps and the step's slot ids (a
					   * fixed part then, counted in fixed) */
	uint64_t pool;                    /* offloading: the slot pool's allocation; elastic: the held
					   * pages, then room for the slots or for every page beyond
					   * the held ones, whichever is more */
	bool all_resident;
	uint64_t weights_all;             /* the upload when all are resident: every device tensor */
	uint64_t device;                  /* device memory the engine takes */
	uint64_t device_resident;         /* what it would take with every expert resident */
	/* host memory */
	uint64_t host_experts;            /* routed experts held in host RAM (0 when all resident) */
	uint64_t host_staging;            /* the step's pinned staging buffers (offloading: with the
					   * hand-over buffers of the CPU's experts) */
	uint64_t host_need;
	bool pinned;                      /* host_experts in one page-locked allocation (memlock allows) */
	struct capy_host_mem host;
};

/* The plan of artifact a (configuration c) with options o on a host with memory h (NULL:
 * unknown). Fails only on an artifact the backend could not run (CAPY_EUNSUPPORTED, e.g. a
 * page layout out of range) or out of memory; whether the plan fits is capy_plan_check's. */
int capy_plan_compute(struct capy_plan *p, const struct capy_artifact *a, const struct capy_model_config *c,
		      const struct capy_plan_opts *o, const struct capy_host_mem *h, struct capy_err *err);

/* 0 if the engine can start with this plan; else CAPY_ENOMEM and one line with the numbers:
 * the fixed parts do not fit gpu_mem, or the host RAM needed exceeds the RAM available (the
 * RAM guard, naming needed, free and the page-locked limit). */
int capy_plan_check(const struct capy_plan *p, struct capy_err *err);

/* The plan as a short table (what --plan prints): every part in MiB, the slots, the experts
 * resident of all, the host RAM and whether it is page-locked or the mapped artifact. */
void capy_plan_format(const struct capy_plan *p, const char *what, struct capy_buf *b);
/* The plan in one line (the start line of the tools). */
void capy_plan_summary(const struct capy_plan *p, char *buf, size_t size);

#endif
