/* cuda-impl.h - the CUDA backend's private structures: the weights in device memory (the
 * model/weights binding with every matrix as a kernel descriptor), the device buffers of a
 * step, the attention-cache pages and the per-sequence state. Include only inside
 * libcore/backend/cuda/. The kernels are behind kernels/capy-kernels.h.
 *
 * A step runs on one stream: the host stages the step's metadata (rows, items, block
 * tables, state pointers, PLE rows) in pinned memory, uploads it in one copy, enqueues the
 * layers' kernels and copies the logits back; the only synchronization is that last copy. */
#ifndef CAPY_BACKEND_CUDA_IMPL_H
#define CAPY_BACKEND_CUDA_IMPL_H

#include "../../engine/backend.h"
#include "../../model/weights.h"
#include "../../offload/plan.h"
#include "../../util/thread.h"
#include "../../../kernels/capy-kernels.h"

#include <cuda_runtime_api.h>

/* --- weights in device memory ----------------------------------------------------------- */

struct cu_attn {
	struct ck_linear q, k, v, o, idx_qk;
	const float *q_norm, *k_norm, *idx_q_norm, *idx_k_norm;
	bool qsa;
};

struct cu_gdn {
	struct ck_linear qkv, z, b, a, out;
	const float *conv, *neg_a, *dt_bias, *norm;
};

struct cu_mlp {
	struct ck_linear gate_up, down;
};

struct cu_moe {
	struct ck_linear router, shared_gate;
	/* the routed experts where every one of them is (device memory; offloading: the host
	 * copy's device mapping) and, offloading, the slot pool's view (records slot_bytes apart) */
	struct ck_expert_stack gate_up, down;
	struct ck_expert_stack slot_gu, slot_dn;
	int stack;                        /* the artifact's expert stack (offloading) */
	struct cu_mlp shared;
};

struct cu_hc {
	const float *norm;
	struct ck_linear down, up, inject;
	bool has_inject;
};

struct cu_ple {
	struct ck_linear key, value;
	const float *norm_key, *norm_query, *norm_conv, *conv;
};

struct cu_layer {
	const struct capy_layer_w *h;     /* the host binding (types, slots, PLE table) */
	struct cu_attn attn;
	struct cu_gdn gdn;
	struct cu_mlp mlp;
	struct cu_moe moe;
	struct cu_hc hc_attn, hc_mlp;
	struct cu_ple ple;
	const float *in_norm, *post_norm;
};

/* The MTP head (opts.mtp; mtp.c): fc over [embedding | hidden], its three norms and its
 * decoder layer (full attention on kv_slot n_kv, the family's MLP or MoE; qwen4_exp: QSA
 * attention between the layer's hc mixers, and the head's own final mixer). */
struct cu_mtp {
	bool present;
	struct ck_linear fc;
	const float *norm_emb, *norm_hidden, *norm;
	struct cu_layer layer;
	struct cu_hc mixer;               /* qwen4_exp */
};

/* A range of the mapped artifact copied to device memory. */
struct cu_span {
	uint64_t off, len;                /* in the artifact file */
	uint8_t *dev;
};

/* --- the step's device buffers ---------------------------------------------------------- */

/* A logits row's token mask (engine.h's step-item mask): the item's callback, and once the
 * chunk has asked for it (after lm_head is enqueued), its bits and lowest allowed id; none:
 * the row gets no token (NULL bits, or nothing allowed). */
struct cu_row_mask {
	const uint32_t *(*fn)(void *ud);
	void *ud;
	const uint32_t *bits;
	int32_t first;
	bool none;
};

struct cu_scratch {
	uint64_t tmax;
	float *x, *xn, *blk, *out, *inj, *mix, *tmp, *big1, *big2, *big3;
	float *moe_out, *moe_w, *ple_emb, *rows, *hid, *logits;
	uint32_t *gdn_count;              /* [tmax][value heads] zeros (ck_gdn_decode) */
	int32_t *moe_ids, *row_idx;       /* row_idx: [logits_rows] rows whose logits a chunk computes */
	int32_t *mtp_ids;                 /* the MTP head's draft vocabulary on the device (up to V ids) */
	int32_t *mtp_ids_host;            /* host: the ids mtp_ids holds (mtp_ids_n of them) */
	uint64_t mtp_ids_n;
	int32_t *row_idx_host;            /* pinned staging of row_idx */
	float **row_dst;                  /* host: where each of those rows' logits go */
	struct capy_sampler **row_smp;    /* host: the sampler of each of those rows, or NULL */
	int32_t **row_tok;                /* host: where its token goes */
	struct cu_row_mask *row_mask;     /* host: its token mask (structured output), if any */
	struct ck_sample_row *smp_rows, *smp_rows_host; /* [logits_rows] device, pinned */
	struct ck_sample_out *smp_out, *smp_out_host;   /* [logits_rows] device, pinned */
	uint32_t *smp_mask, *smp_mask_host;             /* [logits_rows][ceil(V / 32)] device, pinned */
	void *lin_ws, *moe_ws, *attn_ws;
	size_t lin_ws_bytes, moe_ws_bytes, attn_ws_bytes;
	uint8_t *sel;                     /* QSA: [tmax][sel_cap] */
	uint64_t sel_cap;
	uint64_t logits_rows;             /* rows the logits buffer holds */
	/* step metadata: one device block and its pinned host staging copy */
	uint8_t *meta_dev, *meta_host;
	size_t meta_bytes;
	float *ple_host;                  /* pinned [tmax][ple_dim] gathered PLE rows */
	float *logits_host;               /* pinned [logits_rows][V] */
	int32_t *hist;                    /* host: a sequence's PLE context and tokens */
};

/* A decode step captured as CUDA graphs: the layers' kernels for steps of T rows in
 * n_items items, valid while the buffers its kernels were given stay where they are (gen). */
#define CU_GRAPH_ITEMS 16 /* items of a captured step with windows (each one's rows in its shape) */

struct cu_graph {
	uint64_t T, gen, used;
	uint32_t n_items;
	uint16_t rows[CU_GRAPH_ITEMS];   /* the first items' rows (windows: K + 1; decode: 1) */
	cudaGraphExec_t exec[2];         /* the step's two parts (forward.c, ple_split) */
};

#define CU_GRAPHS 32

struct cuda_engine {
	struct capy_engine *core;
	const struct capy_artifact *a;
	struct capy_model_config c;
	struct capy_engine_opts opts;
	int device;
	cudaStream_t stream;
	/* A second stream for work of a step that does not depend on the main chain: in decode
	 * steps, the shared expert beside the router and the routed experts, and a GDN layer's
	 * output-gate projection beside its recurrence (forked and joined by the two events; in a
	 * captured graph, two branches). */
	cudaStream_t side;
	cudaEvent_t ev_fork, ev_join;
	cudaEvent_t ev_upload;            /* the sampling rows and masks uploaded on the side stream */
	cudaEvent_t ev_rows;              /* the logits rows' indexes uploaded on the side stream */
	unsigned fork;                    /* what runs there (enum cu_fork; CAPY_CUDA_FORK, 0: none) */
	struct capy_pool *ple_pool;       /* host threads gathering PLE rows (models with PLE) */
	struct ck_blas *blas;             /* cuBLASLt for prompt rows' BF16 linears, or NULL */
	const struct capy_batch *batch;   /* the step being run (cu_step) */
	struct capy_weights hw;           /* host binding (pointers into the mapped artifact) */
	struct cu_layer *layers;
	const void *embed;
	enum ck_dtype embed_dtype;
	const float *final_norm;
	struct cu_hc hc_final;
	struct ck_linear lm_head;
	struct cu_mtp mtp;
	struct cu_span *spans;            /* artifact ranges in device memory, by offset */
	size_t nspans;
	uint8_t *weights_dev;
	uint64_t weights_dev_bytes;
	float *small_dev;                 /* the fp32 vectors of the binding */
	uint64_t small_used, small_cap;
	float *inv_freq;                  /* [rot / 2] */
	uint64_t rot;
	struct cu_scratch s;
	/* attention-cache pages: one device allocation of pages_cap pages */
	uint64_t P, page_bytes;
	struct ck_kv_layer *kv;           /* [n_kv] */
	uint8_t *pages;
	uint32_t pages_cap;
	/* state sizes (floats) */
	struct ck_gdn_shape gdn;
	uint64_t gdn_floats, ple_floats;  /* per layer slot */
	uint64_t device_bytes;            /* everything this engine took */
	struct capy_plan plan;            /* the memory plan its sizes come from (offload/plan.h) */
	char budget[48];                  /* what the plan's budget is, when not --gpu-mem */
	struct ck_step step;              /* the step being run (device pointers) */
	struct cu_graph graphs[CU_GRAPHS];
	uint64_t gen;                     /* bumped when a buffer kernels are given moves */
	uint64_t steps;
	bool no_graphs;                   /* CAPY_CUDA_GRAPHS=0: every step launched eagerly */
	bool no_window_graphs;            /* CAPY_CUDA_GRAPHS=decode: windows launched eagerly (A/B timing) */
	unsigned skip;                    /* CAPY_CUDA_SKIP: parts left out, for timing (cu_skip_parse) */
	bool no_fuse;                     /* CAPY_CUDA_FUSE=0: decode's fused kernels off (same bits; A/B timing) */
	struct cu_offload *off;           /* expert offload (offload.c), NULL with every expert resident */
	const char *trace_file;           /* CAPY_CUDA_TRACE: the kernel trace's file, or NULL */
	uint32_t trace_cap;
};

/* A sequence's recurrent state: one device block (GDN slots, then PLE windows) and, on the
 * host, the PLE token contexts (the n-gram hashing runs on the host, which gathers the rows). */
struct cu_state {
	float *dev;
	int32_t (*ple_ctx)[16];           /* [n_ple] */
};

/* Whether an item's rows take the prompt paths (cuBLASLt linears, grouped expert GEMMs, flash
 * attention): CK_GROUPED_MIN_ROWS rows or more, unless it keeps states. A verification window
 * (keep_states) must give the bits of one-token steps, so its rows take the decode paths
 * whatever its length. (The flash kernel looks at an item's length alone: in a step that also
 * has a prompt chunk, it computes a window of 16 or more rows too, and the exact attention
 * enqueued after it writes those rows again: wasted work, the same bits.) */
static inline bool cu_prompt_item(const struct capy_batch_item *it)
{
	return it->n >= CK_GROUPED_MIN_ROWS && !it->states;
}

/* Make the engine's GPU the calling thread's current device: the CUDA runtime's current
 * device is per thread, and capy-serve steps the engine from its own thread (with --gpu 1,
 * that thread would otherwise launch on GPU 0). */
static inline void cu_use_device(const struct cuda_engine *e)
{
	cudaSetDevice(e->device);
}

/* The CUDA error as a capy error (CAPY_EIO, naming what failed). */
int cu_err(struct capy_err *err, cudaError_t rc, const char *what);
/* A kernel entry point's result (0 or -cudaError) as a capy error. */
int cu_check(struct capy_err *err, int rc, const char *what);
/* Enqueue a kernel entry point; on failure return its error (err in scope) naming `what`. */
/* Parts of a step that CAPY_CUDA_SKIP=name,name can leave out: a measurement knob only (the
 * results are wrong), to time a part inside the captured step by the difference it makes. */
enum cu_part {
	CU_NORM = 1 << 0, CU_ROUTE = 1 << 1, CU_EXPERTS = 1 << 2, CU_MOE_IN = 1 << 3, CU_SHARED = 1 << 4,
	CU_COMBINE = 1 << 5, CU_GDN_IN = 1 << 6, CU_GDN_CORE = 1 << 7, CU_GDN_OUT = 1 << 8, CU_ATT_IN = 1 << 9,
	CU_ATT_CORE = 1 << 10, CU_ATT_OUT = 1 << 11, CU_LM_HEAD = 1 << 12, CU_ATT_KV = 1 << 13, CU_ATT_ATTN = 1 << 14,
	CU_ATT_GATE = 1 << 15, CU_PLE_HOST = 1 << 16, /* the host's gather of PLE rows */
};
unsigned cu_skip_parse(const char *list);
enum cu_fork { CU_FORK_SHARED = 1 << 0, CU_FORK_GDN_Z = 1 << 1, CU_FORK_ALL = 3 };
#define PART(part) (!(e->skip & (part)))

#define TRY(call, what)                                                 \
	do {                                                            \
		int rc_ = (call);                                       \
		if (rc_)                                                \
			return cu_check(err, rc_, what);                \
	} while (0)


/* weights.c */
int cu_weights_upload(struct cuda_engine *e, struct capy_err *err);
/* The kernels' descriptor of host matrix l with its data at `data` (a device address). */
struct ck_linear cu_lin_at(const struct capy_linear *l, const void *data);
void cu_weights_release(struct cuda_engine *e);

/* state.c */
int cu_pages_layout(struct cuda_engine *e, struct capy_err *err);
uint64_t cu_page_bytes(const struct capy_engine *core);
int cu_pages_reserve(struct capy_engine *core, uint32_t n, struct capy_err *err);
uint32_t cu_pages_release(struct capy_engine *core, uint32_t n);
uint32_t cu_pages_elastic(const struct capy_engine *core);
void cu_page_copy(struct capy_engine *core, uint32_t dst, uint32_t src);
uint64_t cu_state_bytes(const struct capy_engine *core);
int cu_state_new(struct capy_engine *core, void **out, struct capy_err *err);
void cu_state_copy(struct capy_engine *core, void *dst, const void *src);
/* To and from host bytes, for the context cache's tiers (engine/backend.h). */
int cu_page_read(struct capy_engine *core, uint32_t id, void *dst, struct capy_err *err);
int cu_page_write(struct capy_engine *core, uint32_t id, const void *src, struct capy_err *err);
uint64_t cu_state_io_bytes(const struct capy_engine *core);
int cu_state_read(struct capy_engine *core, const void *st, void *dst, struct capy_err *err);
int cu_state_write(struct capy_engine *core, void *st, const void *src, struct capy_err *err);
void cu_state_free(struct capy_engine *core, void *st);
int cu_context_reserve(struct cuda_engine *e, uint64_t ctx, struct capy_err *err);

/* blocks.c: the layers' blocks, each reading the block input [T][H] (or the streams) */
int cu_attention(struct cuda_engine *e, const struct cu_layer *l, const float *xn, float *out, struct capy_err *err);
int cu_gdn(struct cuda_engine *e, const struct cu_layer *l, const float *xn, float *out, struct capy_err *err);
/* The MLP or MoE block into out; with fold, a MoE block leaves its combine undone and returns
 * 1: cu_ffn_fold then adds it into the residual stream x and norms the sum into xn with
 * next_norm (NULL: the add alone), the bits of combine, then ck_add_rmsnorm. */
int cu_ffn(struct cuda_engine *e, const struct cu_layer *l, const float *xn, float *out, bool fold, struct capy_err *err);
int cu_ffn_fold(struct cuda_engine *e, const float *next_norm, struct capy_err *err);
/* A hyper-connection mixer: X's streams normed into xn, mixed into mixed [T][H], and with inj
 * the injection weights [T][hc]. pending: X is first given the last block's injection (out
 * times inj, ck_hc_add_injected) in the norm's launch; X is then written. */
int cu_hc_mix(struct cuda_engine *e, const struct cu_hc *h, float *X, uint64_t T, float *mixed, float *inj,
	      bool pending, struct capy_err *err);
int cu_ple(struct cuda_engine *e, const struct cu_layer *l, float *X, struct capy_err *err);
int cu_linear(struct cuda_engine *e, const struct ck_linear *w, const float *x, uint64_t m, float *y,
	      struct capy_err *err);

/* offload.c: expert offload (with the plan's all_resident false) */
struct cu_offload;
int cu_offload_open(struct cuda_engine *e, struct capy_err *err);
void cu_offload_close(struct cuda_engine *e);
/* One MoE layer's routed experts into moe_out (after ck_moe_route), the misses on the CPU. */
int cu_offload_experts(struct cuda_engine *e, const struct cu_layer *l, const float *xn, struct capy_err *err);
int cu_offload_before_step(struct cuda_engine *e, struct capy_err *err);
int cu_offload_after_step(struct cuda_engine *e, struct capy_err *err);
bool cu_offload_stats(const struct capy_engine *core, struct capy_offload_stats *s);
/* The end of a step's layers on the stream (inside a captured graph too): the branch of the
 * CPU's wake-up nodes (CAPY_CUDA_OFFLOAD_WAKE=kick) joins it. */
int cu_offload_layers_end(struct cuda_engine *e, struct capy_err *err);
/* The elastic attention cache (offload/plan.h): whether the pages share the slot pool, the
 * most pages it holds, storage for ids [0, n) (slots lent to the cache as needed), and the
 * slots above the storage of ids [0, n) given back (returns the ids with storage). */
bool cu_offload_elastic(const struct cuda_engine *e);
uint32_t cu_offload_pages_max(const struct cuda_engine *e);
int cu_offload_pages(struct cuda_engine *e, uint32_t n, struct capy_err *err);
uint32_t cu_offload_pages_release(struct cuda_engine *e, uint32_t n);

/* forward.c */
int cu_step(struct capy_engine *core, const struct capy_batch *b, struct capy_err *err);
/* Stage batch b as the step (e->step), uploaded on the stream: item i's rows at positions
 * first[i] .. first[i] + n - 1 of its sequence (first NULL: from the sequence's length), the
 * prompt paths for the items cu_prompt_item takes, and the kept-state blocks of items that keep
 * states (ck_step.gdn_keep / ple_keep; the MTP head's rows keep none). The stream is idle (the
 * last step or head call ended synchronized). */
int cu_stage(struct cuda_engine *e, const struct capy_batch *b, const uint64_t *first, struct capy_err *err);
/* A decoder layer of a family without hyper-connections (qwen3_5, qwen3_5_moe, qwen3_next) on
 * the staged step: its input normed in xn, its mixer and FFN added into the residual x, then x
 * normed with next_norm into xn (NULL: x alone). */
int cu_layer_plain(struct cuda_engine *e, const struct cu_layer *l, const float *next_norm, struct capy_err *err);
/* A qwen4_exp decoder layer on the staged step's streams x [T][hc * H]: PLE (if the layer has
 * it), each block between its hc mixers, the block's output injected into the streams.
 * pending: x still lacks the last layer's final injection (out times inj); defer: leave this
 * layer's final injection to the next layer's first mixer (the same bits, one launch less). */
int cu_layer_hc(struct cuda_engine *e, const struct cu_layer *l, bool pending, bool defer, struct capy_err *err);

/* mtp.c: the MTP head's rows (backend op mtp). */
int cu_mtp(struct capy_engine *core, const struct capy_mtp_rows *r, struct capy_err *err);

#endif
