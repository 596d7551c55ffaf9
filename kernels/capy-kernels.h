/* capy-kernels.h - the CUDA kernels of the CUDA backend (libcore/backend/cuda), as plain C
 * entry points. The kernels live in the .cu files of kernels/ (CUDA C++); nothing else
 * includes CUDA headers for them, and this header includes none.
 *
 * Conventions, everywhere below:
 * - Every pointer is a device pointer unless the comment says "host".
 * - Activations are fp32, row-major: a [T][n] matrix is T rows of n floats, tightly packed
 *   unless a stride is given (in floats).
 * - `stream` is a cudaStream_t. Entry points only enqueue work: they never allocate,
 *   synchronize or copy to the host, so a step can be captured in a CUDA graph.
 * - Each returns 0, or a negative cudaError_t (-(int)cudaGetLastError()) if the launch
 *   failed; arguments the caller got wrong are bugs (the host checks shapes when it binds).
 * - Numerics follow the CPU backend (libcore/backend/cpu), the oracle: the same formula in
 *   fp32, in the order the comment gives where a result must be reproducible. Every
 *   reduction has a fixed order per output element (no atomics), which depends neither on
 *   the number of rows nor on the other rows of the step: a sequence's results do not
 *   change with the sequences batched with it (DESIGN §5).
 */
#ifndef CAPY_KERNELS_H
#define CAPY_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Launch each kernel allowed to overlap the end of the one before it (programmatic
 * dependent launch, sm_90+; kernels/ck-common.cuh says how it stays exact). On by default;
 * 0 turns it off for every later launch (a measurement knob: CAPY_CUDA_PDL=0). */
void ck_set_dependent_launch(int on);
/* An experiment (kernels/moe.cu, CAPY_CUDA_WARM=1): the decode router runs its code once on
 * made-up values before its wait, to fetch it into the instruction caches. Same bits; off by
 * default until measured. */
void ck_set_route_warm(int on);

/* The kernel trace, a measurement knob of TRACE=1 builds (CAPY_CUDA_TRACE, docs/cuda.md;
 * elsewhere ck_trace_start fails with cudaErrorNotSupported): after
 * ck_trace_start(cap), thread 0 of block 0 of every kernel records, for the first cap kernels
 * to run, the device's global timer (ns) and its SM's clock when it started and when its wait
 * for the kernel before it returned (ck_grid_enter), its launch shape and its name; in a
 * captured graph too.
 * ck_trace_stop copies up to cap of them to host recs, says how many ran (*n, possibly more
 * than cap) and turns the trace off. Each returns 0 or a negative cudaError_t. */
struct ck_trace_rec {
	unsigned long long t_start, t_ready;
	long long clk_start, clk_ready; /* the SM's clock at the same two points (its frequency) */
	unsigned grid, block;
	char name[48];
};
struct ck_trace_buf {
	unsigned n, cap;
	struct ck_trace_rec rec[];
};
int ck_trace_start(uint32_t cap);
int ck_trace_stop(struct ck_trace_rec *recs, uint32_t cap, uint32_t *n);
/* For kernels/ck-common.cuh: each kernel file registers its setter of the trace buffer. */
int ck_trace_register(int (*set)(struct ck_trace_buf *b));
/* Prefill attention's shared memory a block, at most (0: what the GPU allows): the flash
 * kernel's tile shape follows it (the same bits at every shape; for tests and measurement, e.g.
 * 101376 runs sm_120's 99 KiB shape on a Hopper). */
void ck_set_flash_smem(size_t bytes);

/* --- the step: token rows and batch items ------------------------------------------ */

/* What every per-sequence kernel needs to know about a step, as device arrays the host
 * uploads once per step. Rows of the step are the tokens of all items stacked: item i owns
 * rows [t0[i], t0[i] + n[i]), at positions len[i] .. len[i] + n[i] - 1 of its sequence.
 * Attention pages: page id p's bytes are pages + p * page_bytes; item i's block table is
 * block_table + bt_off[i] (page ids in token order: the page of position pos is entry
 * pos / page_tokens). */
struct ck_step {
	uint64_t T;                 /* token rows */
	uint32_t n_items;
	const int32_t *ids;         /* [T] token ids */
	const int64_t *pos;         /* [T] position of each row in its sequence */
	const int32_t *item;        /* [T] the item of each row */
	const int64_t *t0, *n, *len; /* [n_items] */
	const uint32_t *bt_off;     /* [n_items] */
	const uint32_t *block_table;
	uint8_t *pages;
	uint64_t page_bytes, page_tokens;
	float *const *gdn_state;    /* [n_items] the item's GDN state block (see ck_gdn_*), or NULL */
	float *const *ple_state;    /* [n_items] the item's PLE conv windows (see ck_ple_conv), or NULL */
	/* Speculative verification (keep_states, libcore/engine/backend.h): NULL, or [T] per row
	 * the blocks, laid out as gdn_state's and ple_state's, that receive the state of the row's
	 * sequence after that row; NULL entries for rows whose state is not kept (each item's
	 * last row, whose state is the sequence's own). ck_gdn_conv, ck_gdn_recurrent and
	 * ck_ple_conv write them. */
	float *const *gdn_keep, *const *ple_keep;
	const uint8_t *grouped;     /* [T] 1 where the row's item has >= CK_GROUPED_MIN_ROWS rows
				     * and keeps no states: a prompt chunk */
	uint64_t n_grouped;         /* host: how many rows are */
	uint64_t max_item_n;        /* host: the most rows of one item */
	int64_t max_pos;            /* the largest pos of the step (for grid sizes) */
};

/* --- linears (kernels/linear.cu) ------------------------------------------------------ */

enum ck_dtype { CK_F32, CK_F16, CK_BF16, CK_NVFP4 };
#define CK_MAX_PARTS 8

/* A weight matrix W [n, k] in device memory, as the artifact stores it (docs/artifact.md).
 * Plain: n rows of k elements. NVFP4: `data` is one slice record: codes [n][k/2] (low nibble
 * = even element) at codes_off, E4M3 block scales [n][k/16] at scales_off, then nparts
 * float32 weight_scale_2 and nparts float32 input_scale at globals_off; part p covers
 * part_rows[p] consecutive rows. scale2/input_scale are host copies of the globals. */
struct ck_linear {
	enum ck_dtype dtype;
	uint64_t n, k;
	const void *data;
	uint32_t nparts;
	uint64_t part_rows[CK_MAX_PARTS];
	uint64_t codes_off, scales_off, globals_off;
	float scale2[CK_MAX_PARTS], input_scale[CK_MAX_PARTS];
};

/* Device workspace bytes ck_linear needs for m rows of input (0 for plain weights). */
size_t ck_linear_ws_bytes(const struct ck_linear *w, uint64_t m);

/* y[m][n] = x[m][k] W^T (x row stride k, y row stride n), exactly the function of the CPU's
 * capy_linear_rows (libcore/cpu/linear.h):
 * - plain weights: each weight widened exactly to fp32, products with the fp32 activation
 *   accumulated in fp32 (any fixed order per element; tolerance ~1e-6 relative vs the CPU);
 * - NVFP4 (W4A4): each row of x quantized per 16-block as capy_nvfp4_quantize_act does
 *   (with the part's input_scale, or the row's dynamic scale where it is 0), int32 block
 *   dots, the int64 fixed-point sum and the same final double-precision scaling: the result
 *   is BIT-IDENTICAL to the CPU's.
 * ws: ck_linear_ws_bytes(w, m) bytes of device memory. */
int ck_linear(const struct ck_linear *w, const float *x, uint64_t m, float *y, void *ws, void *stream);

/* ck_swiglu(act, m, w->k, h) then ck_linear(w, h, m, y) in one launch, the same bits, for the
 * matrices and row counts ck_linear_swiglu_ok accepts (BF16 on the tensor cores, decode rows):
 * act [m][2 k] (gate | up). */
bool ck_linear_swiglu_ok(const struct ck_linear *w, const float *act, uint64_t m);
int ck_linear_swiglu(const struct ck_linear *w, const float *act, uint64_t m, float *y, void *stream);

/* y[j] = x W_j^T for nw matrices over the same input, each exactly as ck_linear computes it
 * alone (the same bits); plain matrices of one dtype and k (up to 4) run in one launch, so
 * the small projections of a decode step fill the GPU together. */
int ck_linear_multi(const struct ck_linear *const *w, int nw, const float *x, uint64_t m, float *const *y,
		    void *ws, void *stream);

/* ck_linear_multi with each result put through an epilogue in the same launch, the bits of
 * ck_linear_multi then the epilogue's own kernel (CK_EP_HC_LOW: ck_hc_low_act, CK_EP_HC_INJECT:
 * ck_hc_inject_act, both with divisor d), for what ck_linear_multi_ep_ok accepts: BF16
 * matrices on the tensor cores that share a launch, and decode rows. */
enum ck_epilogue { CK_EP_NONE, CK_EP_HC_LOW, CK_EP_HC_INJECT };
bool ck_linear_multi_ep_ok(const struct ck_linear *const *w, int nw, const float *x, uint64_t m);
int ck_linear_multi_ep(const struct ck_linear *const *w, int nw, const float *x, uint64_t m, float *const *y,
		       const enum ck_epilogue *ep, float d, void *stream);

/* Some rows of a matrix (kernels/linear-mma.cu): y[t][i] = (x W^T)[t][rows[i]] for t < m,
 * i < nr (y row stride ldy, x row stride k), each element the bits ck_linear gives it in the
 * whole product (the same k slices and chain of tensor-core steps), without computing the
 * other rows: the MTP head's lm_head over a draft vocabulary. rows: device, each below w->n.
 * For the matrices (with x) ck_linear_rows_ok accepts: BF16 on the tensor cores, as ck_linear
 * runs them; others return -cudaErrorInvalidValue (compute the whole product instead). */
bool ck_linear_rows_ok(const struct ck_linear *w, const float *x);
int ck_linear_rows(const struct ck_linear *w, const float *x, uint64_t m, const int32_t *rows, uint64_t nr, float *y,
		   uint64_t ldy, void *stream);

/* Prompt rows of BF16 linears through cuBLASLt (kernels/linear-blas.cu): y[m][ldy] = x[m][k]
 * W^T, x split into BF16 hi + lo halves (as mma.cuh), two GEMMs with fp32 accumulation. Not
 * the bits of ck_linear (within ~1e-6 relative of it and of the CPU): the backend uses it only
 * for the rows of items with at least CK_GROUPED_MIN_ROWS rows, one GEMM per item, so a
 * decoding row's results never depend on it. One algorithm per matrix shape, chosen for
 * max_m rows (the step's capacity), no split-k reductions: a row's result does not depend on
 * the other rows of its GEMM. ck_blas_open loads libcublasLt.so.13; it fails (why says why)
 * where the library is missing. m must be at most max_m. */
struct ck_blas;
int ck_blas_open(struct ck_blas **out, uint64_t max_m, char *why, size_t why_size);
void ck_blas_close(struct ck_blas *b);
bool ck_gemm_supported(const struct ck_linear *w);
/* Device workspace for m rows of k inputs (0 below CK_GROUPED_MIN_ROWS rows). */
size_t ck_gemm_ws_bytes(uint64_t k, uint64_t m);
int ck_gemm(struct ck_blas *b, const struct ck_linear *w, const float *x, uint64_t m, float *y, uint64_t ldy,
	    void *ws, void *stream);
/* nw matrices over the same x [m][k] (each y[j] [m][w[j]->n]): ck_gemm's bits for each, x
 * split into its BF16 halves once for all of them. */
int ck_gemm_multi(struct ck_blas *b, const struct ck_linear *const *w, int nw, const float *x, uint64_t m,
		  float *const *y, void *ws, void *stream);

/* --- mixture of experts (kernels/moe.cu) ---------------------------------------------- */

/* Router: for each of T rows of logits [T][E], softmax over E in fp32 (max, exp(l - max),
 * sum in ascending order, divide), the top k (largest first; the lower index wins a tie),
 * their weights renormalized by their sum when norm_topk, then sorted by ascending expert
 * id (the order the reference adds them in). ids, w: [T][k]. As the CPU's route(). */
int ck_moe_route(const float *logits, uint64_t T, uint64_t E, uint64_t k, bool norm_topk, int32_t *ids,
		 float *w, void *stream);

/* A stack of E experts' matrices of one shape: expert x is `first` with its data pointer
 * advanced by x * stride bytes (for NVFP4 each expert's record carries its own globals,
 * read on the device). */
struct ck_expert_stack {
	struct ck_linear first;
	uint64_t stride;
	uint64_t E;
};

/* Rows of an item with at least this many tokens in the step (a prefill chunk) run their
 * NVFP4 routed experts as grouped GEMMs on the tensor cores; the rest (decode, short chunks,
 * and verification windows of any length, which must give the bits of one-token steps) as
 * the exact W4A4 of the CPU: ck_step.grouped says which. The choice is the row's own item's,
 * so a sequence's results never depend on the other sequences of its step. */
#define CK_GROUPED_MIN_ROWS 16

/* The routed experts of T rows: for every slot s = t * k + j (the j-th chosen expert of row
 * t, ids[s]), out[s][H] = down_x(swiglu(gate_up_x(x[t]))) with x = ids[s], as the CPU's
 * expert_worker: gate_up [2I, H] (gate rows, then up rows), swiglu(g, u) = silu(g) * u with
 * silu(v) = v / (1 + exp(-v)), down [H, I].
 * - NVFP4, rows with grouped[t] == 0 (or grouped NULL): each slot's output is bit-identical
 *   to the CPU's (each linear is ck_linear's function on that one row);
 * - NVFP4, rows with grouped[t] == 1 (n_grouped of them, counted by the host): the same
 *   quantized operands on the tensor cores (kernels/moe-grouped.cu), every product exact and
 *   the sums in fp32: within ~1e-6 relative of the CPU;
 * - plain weights: ck_linear's plain numerics per slot.
 * ws: ck_moe_ws_bytes(gate_up, down, T * k) bytes. */
size_t ck_moe_ws_bytes(const struct ck_expert_stack *gate_up, const struct ck_expert_stack *down,
		       uint64_t slots);
int ck_moe_experts(const struct ck_expert_stack *gate_up, const struct ck_expert_stack *down,
		   const float *x, uint64_t T, uint64_t k, const int32_t *ids, const uint8_t *grouped,
		   uint64_t n_grouped, float *out, void *ws, void *stream);

/* Expert offload (kernels/offload.cu; libcore/backend/cuda/offload.c). In ck_moe_experts'
 * exact path (NVFP4 stacks) a slot whose id is negative is skipped: its output row is left as
 * it was, for the CPU's result to be gathered into. The hand-over area: device addresses of
 * page-locked host memory (offload/plan.h's struct capy_plan_hand). */
struct ck_offload_hand {
	uint32_t *n_misses;
	int32_t *expert;
	uint32_t *miss_slot, *x_row;
	float *x;
	const float *out;
};
/* The CPU job's words (offload/cpu-experts.h), device addresses: its miss count, request and
 * done words; and where the request's time is written (the globaltimer, ns; NULL: not). */
struct ck_offload_job {
	uint32_t *n_misses, *req, *done;
	uint64_t *requested;
};
/* For the T * k slots of one MoE layer (ids from ck_moe_route; grouped the step's prompt-row
 * flags or NULL): sids (exact rows: slot_of[id], -1 when not resident; prompt rows: -1), gids
 * (prompt rows: id; exact rows: -1), route (every id); with hand, the exact rows' misses in
 * slot order, their rows of x ([T][H]) and, last, their count; and with job.n_misses set the
 * job's count too, then (misses or not) done = 0 and req = 1 where there are misses, else
 * done = 1: the job requested from the GPU, for a pool that looks at req words. */
int ck_offload_handoff(const int32_t *ids, const uint8_t *grouped, const float *x, uint64_t T, uint64_t k,
		       uint64_t H, const int32_t *slot_of, int32_t *sids, int32_t *gids, int32_t *route,
		       struct ck_offload_hand h, struct ck_offload_job job, bool hand, void *stream);
/* moe_out[miss_slot[m]] = out[m] ([H] floats) for m < *n_misses (S: the grid, every slot),
 * after *done (the CPU job's word, device address) is 1 unless done is NULL (the stream has
 * waited); the time it went on written to *resumed (the globaltimer, ns) unless NULL. */
int ck_offload_gather(struct ck_offload_hand h, uint64_t S, uint64_t H, float *moe_out, const uint32_t *done,
		      uint64_t *resumed, void *stream);

/* out[t][H] = sum over j < k in order of moe_out[t * k + j][i] * w[t * k + j], then
 * + sigmoid(gate[t]) * shared[t][i] (sigmoid(v) = 1 / (1 + exp(-v))). As moe_forward. */
int ck_moe_combine(const float *moe_out, const float *w, const float *shared, const float *gate, uint64_t T,
		   uint64_t k, uint64_t H, float *out, void *stream);

/* --- element-wise and row operations (kernels/ops.cu) ----------------------------------- */

/* x[t][s * H + i] = embedding row ids[t] (F32, F16 or BF16 [V][H], widened) for each of hc
 * copies s. */
int ck_embed(const void *table, enum ck_dtype dt, const int32_t *ids, uint64_t T, uint64_t H, uint64_t hc,
	     float *x, void *stream);

/* Zero-centred RMSNorm over `rows` rows of n values (x row stride xs, y row stride ys), in
 * groups of `group` values (group == n: the whole row): y = (x * r) * w1p[i % wn] with
 * r = 1 / sqrtf(sum(x^2) / group + eps), i the index in the row (wn = n: a weight per value
 * of the row; wn = group: the same weights for every group). x and y may alias. w1p (in every
 * norm below too) must be a weight no kernel writes: it is read before the kernel waits for
 * the one before it. */
int ck_rmsnorm(const float *x, uint64_t xs, const float *w1p, uint64_t wn, float *y, uint64_t ys, uint64_t rows,
	       uint64_t n, uint64_t group, float eps, void *stream);

/* ck_rmsnorm(x, xs, w1p, group, y, ys, rows, n, group, eps) then ck_rope(y, tokens, heads,
 * group, rot, pos, ...) in one launch, the same bits: each group of a row is one head vector,
 * `heads` of them per token, normed with the same weights, then rotated (rot < 2: no rotation;
 * rot at most group). */
int ck_rmsnorm_rope(const float *x, uint64_t xs, const float *w1p, float *y, uint64_t ys, uint64_t rows, uint64_t n,
		    uint64_t group, float eps, uint64_t heads, uint64_t rot, const int64_t *pos, const float *inv_freq,
		    void *stream);

/* NeoX RoPE in place on the first rot dims of each of `heads` vectors of hd floats per row
 * (row stride heads * hd): pairs (i, i + rot/2), angle pos[t] * inv_freq[i] in fp32. With
 * pos NULL, every row uses position pos0 + t * pos_step. */
int ck_rope(float *v, uint64_t T, uint64_t heads, uint64_t hd, uint64_t rot, const int64_t *pos, int64_t pos0,
	    int64_t pos_step, const float *inv_freq, void *stream);

/* act [rows][2I] (gate | up) -> out [rows][I] = silu(gate) * up; out must not overlap act. */
int ck_swiglu(const float *act, uint64_t rows, uint64_t I, float *out, void *stream);

/* x[i] += y[i] for i < n. */
int ck_add(float *x, const float *y, uint64_t n, void *stream);

/* ck_add(x, add, rows * n) then ck_rmsnorm(x, n, w1p, n, y, n, rows, n, n, eps) in one launch,
 * the same bits (the residual add and the next norm of a decode step). */
int ck_add_rmsnorm(float *x, const float *add, const float *w1p, float *y, uint64_t rows, uint64_t n, float eps,
		   void *stream);

/* ck_moe_combine(moe_out, mw, shared, gate, rows, k, n, out) then ck_add_rmsnorm(x, out, w1p, y,
 * rows, n, eps) in one launch (one per 65535 rows), the same bits; y NULL: the residual add
 * alone (ck_add). */
int ck_moe_combine_add_rmsnorm(const float *moe_out, const float *mw, const float *shared, const float *gate,
			       uint64_t k, float *x, const float *w1p, float *y, uint64_t rows, uint64_t n, float eps,
			       void *stream);

/* out[t][h * hd + i] = att[t][h * hd + i] * sigmoid(qg[t][h * 2 hd + hd + i]): the attention
 * output gate (q_proj gives per head [query | gate]). */
int ck_attn_gate(const float *att, const float *qg, uint64_t T, uint64_t nq, uint64_t hd, float *out,
		 void *stream);

/* Copy rows: dst[r][0..n) = src[idx[r]][0..n) (strides in floats), for r < rows; idx is a
 * device array. */
int ck_gather_rows(const float *src, uint64_t src_stride, const int32_t *idx, uint64_t rows, uint64_t n,
		   float *dst, uint64_t dst_stride, void *stream);

/* --- hyper-connections, qwen4_exp (kernels/ops.cu) -------------------------------------- */

/* low[i] = silu(low[i] / hc) for i < n. */
int ck_hc_low_act(float *low, uint64_t n, float hc, void *stream);
/* mixed[t][i] = (sum over s < hc in order of sigmoid(mix[t][s H + i]) * xn[t][s H + i]) / hc. */
int ck_hc_combine(const float *mix, const float *xn, uint64_t T, uint64_t H, uint64_t hc, float *mixed,
		  void *stream);
/* inj[i] = 2 sigmoid(inj[i] / hc). */
int ck_hc_inject_act(float *inj, uint64_t n, float hc, void *stream);
/* X[t][s H + i] += out[t][i] * inj[t][s]. */
int ck_hc_add_injected(float *X, const float *out, const float *inj, uint64_t T, uint64_t H, uint64_t hc,
		       void *stream);
/* ck_hc_add_injected then ck_rmsnorm of every stream (X [T][hc H], w1p [hc H], y [T][hc H],
 * group H) in one launch, the same bits: the next mixer's norm takes the last block's
 * injection with it. */
int ck_hc_add_rmsnorm(float *X, const float *out, const float *inj, const float *w1p, float *y, uint64_t T, uint64_t H,
		      uint64_t hc, float eps, void *stream);

/* --- attention (kernels/attention.cu) --------------------------------------------------- */

enum ck_kv_dtype { CK_KV_BF16, CK_KV_F32, CK_KV_INT8 };

/* Where one attention layer's rows are inside a page (byte offsets, as the CPU backend's
 * struct kv_layout): K and V [page_tokens][nkv * hd] in the KV dtype; INT8: one float scale
 * per 32 values [page_tokens][nkv * hd / 32] at k_scale / v_scale; QSA: raw indexer keys
 * [page_tokens][idh] float at idx_keys and pooled block keys [page_tokens / ratio][idh]
 * float at blocks. */
struct ck_kv_layer {
	enum ck_kv_dtype dtype;
	uint64_t nkv, hd;
	uint64_t k, v, k_scale, v_scale, idx_keys, blocks;
};

/* Store every row's K and V ([T][nkv * hd] each) at its position in its item's pages:
 * BF16 round-to-nearest-even, F32 as is, INT8 per group of 32: scale = amax / 127,
 * q = lrintf(x / scale) (0 where the scale is 0). As the CPU's kv_store. */
int ck_kv_store(const struct ck_step *st, const struct ck_kv_layer *l, const float *k, const float *v,
		void *stream);

/* Causal GQA attention of every row over its item's cached keys 0..pos (the row's own
 * included; ck_kv_store ran first): per query head h (KV head h / (nq / nkv)), scores
 * q . k / sqrt(hd) in fp32, softmax (max, exp(s - max), sum in key order), values summed in
 * key order weighted by exp / sum. q [T][nq][hd]; out [T][nq][hd]. sel (QSA): NULL, or
 * [T][sel_stride] bytes, key j visible to row t only where sel[t * sel_stride + j] != 0.
 * As the CPU's attn_heads (before its output gate; ck_attn_gate applies that).
 * head_dim <= 256, nq / nkv <= 16. Keys are taken in chunks of 256 (fixed: the chunk size
 * depends on nothing else), each chunk gets its own max, sum and weighted values, and the
 * chunks are folded in key order (online-softmax rescaling). With ws the chunks of a row
 * run on separate thread blocks (flash-decoding) and a second kernel folds them; with ws
 * NULL (or a context beyond what ws holds) one block folds its row's chunks itself. Both
 * paths give the same bits, so a row's result depends on nothing but the row.
 * Rows with st->grouped set (prefill chunks) go to the tensor cores instead where the cache
 * is BF16, head_dim is 64, 128 or 256 and 64 % (nq / nkv) == 0 (kernels/attention-flash.cu:
 * keys in blocks of 32 from key 0, Q and P split into BF16 halves; its own fixed order, so
 * again a row's result depends on nothing but the row and its sequence).
 * ws: ck_attention_ws_bytes(T, nq, hd, max_ctx) bytes of device memory for steps of at
 * most T rows and positions below max_ctx, or NULL; it holds at most 8192 row-chunks of
 * partials (rows beyond that are done in several passes over ws, in stream order). */
size_t ck_attention_ws_bytes(uint64_t T, uint64_t nq, uint64_t hd, uint64_t max_ctx);
int ck_attention(const struct ck_step *st, const struct ck_kv_layer *l, const float *q, uint64_t nq,
		 const uint8_t *sel, uint64_t sel_stride, float *out, void *ws, void *stream);

/* QSA: store each row's raw indexer key (idx [T][row_stride], the key at column key_col,
 * idh floats) in its page (idx_keys field). */
int ck_qsa_store_keys(const struct ck_step *st, const struct ck_kv_layer *l, const float *idx, uint64_t row_stride,
		      uint64_t key_col, uint64_t idh, void *stream);
/* QSA: for each item, every block of `ratio` tokens that its new rows completed (blocks b
 * with len <= (b + 1) ratio - 1 < len + n): the mean of its raw keys (sum in token order /
 * ratio), zero-centred RMSNorm with k_norm1p (eps), RoPE at the block's first position
 * (rot dims of idh), written to the blocks field. As qsa_update_blocks. */
int ck_qsa_update_blocks(const struct ck_step *st, const struct ck_kv_layer *l, uint64_t idh, uint64_t ratio,
			 const float *k_norm1p, float eps, uint64_t rot, const float *inv_freq, void *stream);
/* QSA: for each row t (iq [T][ni][idh], normed and rotated), nb = (pos + 1) / ratio complete
 * blocks, block score = (sum over heads h in order of max(0, q_h . key_b)) / sqrt(idh); sel
 * [T][sel_stride] = 1 for the unfinished tail [nb ratio, pos] and for the tokens of the best
 * min(topk, nb) blocks (highest first, lower index on a tie), 0 elsewhere up to pos. As
 * qsa_select (scores bit-identical: the same sums in the same order; a NaN score counts
 * as the largest, where the CPU's loop would skip it).
 * ws: ck_qsa_select_ws_bytes(T, max_ctx, ratio) bytes of device memory (each row's block
 * scores: the top-k is a radix select over them, as contexts reach 2^18 / ratio blocks). */
size_t ck_qsa_select_ws_bytes(uint64_t T, uint64_t max_ctx, uint64_t ratio);
int ck_qsa_select(const struct ck_step *st, const struct ck_kv_layer *l, const float *iq, uint64_t ni,
		  uint64_t idh, uint64_t ratio, uint64_t topk, uint8_t *sel, uint64_t sel_stride, void *ws,
		  void *stream);

/* --- Gated DeltaNet (kernels/gdn.cu) ---------------------------------------------------- */

/* A sequence's GDN state block (ck_step.gdn_state[i]) holds, for each GDN layer slot in
 * order, the conv window [K - 1][C] (oldest first) then S [nv][dk][dv]:
 * ck_gdn_state_floats() floats per layer. */
struct ck_gdn_shape {
	uint64_t nk, nv, dk, dv, K; /* key heads, value heads, head dims, conv kernel */
	uint64_t C;                 /* 2 nk dk + nv dv */
};
uint64_t ck_gdn_state_floats(const struct ck_gdn_shape *g);

/* Causal depthwise conv over [window | the item's rows of qkv [T][C]] with w [C][K], then
 * silu, into conv [T][C]; each item's window then holds its last K - 1 inputs (as the CPU's
 * conv_rows), and each block of st->gdn_keep the window after its row (the CPU's
 * keep_windows). slot: the layer's index among the GDN layers. */
int ck_gdn_conv(const struct ck_step *st, const struct ck_gdn_shape *g, int slot, const float *qkv, const float *w,
		float *conv, void *stream);
/* beta[t][h] = sigmoid(b[t][h]); g[t][h] = neg_a[h] * softplus(a[t][h] + dt_bias[h]), softplus
 * as torch (linear above 20: x > 20 ? x : log1pf(expf(x))). */
int ck_gdn_gates(const float *b, const float *a, const float *neg_a, const float *dt_bias, uint64_t T, uint64_t nv,
		 float *beta, float *g, void *stream);
/* The gated delta rule per (item, value head) over the item's rows in order, as the CPU's
 * head_recurrent: q, k of key head h / (nv / nk) l2-normalised (x / sqrtf(sum x^2 + 1e-6)),
 * q scaled by 1 / sqrtf(dk); S *= exp(g); mem = S^T k; d = beta (v - mem); S += k d^T;
 * o = S^T q. conv [T][C] holds q | k | v per row (q and k are normalised in place: conv is
 * spent); o [T][nv * dv]. Every item runs this recurrent form token by token, prefill items
 * too (the CPU's chunked prefill agrees to ~1e-6 relative), so a row's bits do not depend on
 * how its sequence's tokens were cut into steps; dk <= 256. S after each row with a block in
 * st->gdn_keep is also written there. */
int ck_gdn_recurrent(const struct ck_step *st, const struct ck_gdn_shape *g, int slot, float *conv,
		     const float *beta, const float *gg, float *o, void *stream);
/* Gated RMSNorm per head of dv: o = (norm_w[i] * (o * r)) * act(z), r = 1 / sqrtf(mean(o^2) +
 * eps), act = sigmoid if gate_sigmoid else silu. o, z [T][nv * dv]. */
int ck_gdn_gated_norm(float *o, const float *z, const float *norm_w, uint64_t T, uint64_t nv, uint64_t dv,
		      float eps, bool gate_sigmoid, void *stream);

/* A decode step's GDN core (every item one row, no kept states) in two launches instead of
 * six, the same bits as ck_gdn_conv, ck_gdn_gates, ck_gdn_recurrent and ck_gdn_gated_norm
 * in that order: the conv outputs, the windows moved on (by the thread that read each) and
 * the gates, then the recurrence with q and k normalised inside and each head's gated norm
 * done by the last of its blocks. o [T][nv dv] gets the normed output; conv [T][C] and beta, g [T][nv] are
 * scratch (conv holds q and k unnormalised); count [T][nv] must be zeros and is left so.
 * -cudaErrorInvalidValue for a step with more rows than items or with kept states. */
struct ck_gdn_decode_args {
	const float *qkv, *conv_w;         /* [T][C], [C][K] */
	const float *b, *a;                /* [T][nv] */
	const float *neg_a, *dt_bias;      /* [nv] */
	const float *z, *norm_w;           /* [T][nv dv], [dv] */
	float eps;
	bool gate_sigmoid;
	float *conv, *beta, *g, *o;
	uint32_t *count;
	void *z_ready; /* a cudaEvent_t the stream waits for before the kernel that reads z, or NULL */
};
int ck_gdn_decode(const struct ck_step *st, const struct ck_gdn_shape *g, int slot, const struct ck_gdn_decode_args *d,
		  void *stream);

/* --- PLE, qwen4_exp (kernels/ops.cu) ---------------------------------------------------- */

/* Per row t and stream s (hh = hc H): key [T][hh] normed per stream of H with norm_key,
 * q = X normed per stream with norm_query, g = <key_s, q_s> / sqrt(H),
 * g = sqrt(max(|g|, 1e-6)) sign(g), gv[t][s H + i] = sigmoid(g) val[t][i]; gvn = gv normed
 * per stream with norm_conv. key is overwritten with its normed value. H at most
 * CK_PLE_HIDDEN_MAX (a stream's values stay in one block's registers). */
#define CK_PLE_HIDDEN_MAX 6144
int ck_ple_gate(float *key, const float *X, const float *val, const float *norm_key, const float *norm_query,
		const float *norm_conv, uint64_t T, uint64_t H, uint64_t hc, float eps, float *gv, float *gvn,
		void *stream);
/* Dilated causal depthwise conv (kernel K, dilation dil) over [window | gvn rows] per item,
 * X[t][ch] += gv[t][ch] + silu(acc); windows ((K - 1) dil rows of hh, oldest first) in
 * ck_step.ple_state[i] + slot * (K - 1) dil hh move on, and each block of st->ple_keep gets
 * the window after its row. As the CPU's ple conv_rows and keep_windows. */
int ck_ple_conv(const struct ck_step *st, int slot, const float *gv, const float *gvn, const float *w, uint64_t hh,
		uint64_t K, uint64_t dil, float *X, void *stream);

/* --- sampling (kernels/sample.cu): the device's half of capy_sampler_mode ------------- */

enum ck_sample_mode { CK_SAMPLE_NONE, CK_SAMPLE_GREEDY, CK_SAMPLE_TOP_K };
#define CK_SAMPLE_CAP 2048
struct ck_sample_row {
	float temperature;
	int32_t top_k;        /* 2 .. CK_SAMPLE_CAP / 2 */
	int32_t mode;         /* enum ck_sample_mode */
	int32_t first;        /* the lowest id the row may give: 0, or its mask's lowest allowed id */
	const uint32_t *mask; /* NULL: every id; else [ceil(V / 32)] words, bit id % 32 of word
			       * id / 32 set: id allowed (constrain/mask.h), in device memory */
};
/* status 0: greedy holds the first index of the row's maximum (GREEDY), or v/id[0..n) every
 * token with v = logit / temperature among the top_k largest, ties included, and within 40
 * of the largest v (TOP_K), in no particular order; 1: more than CK_SAMPLE_CAP of those
 * (ties), the host needs the row. NaN logits are never listed nor chosen, except as the host
 * sampler does: greedy gives first when logits[first] is NaN or no other is a number. With a
 * mask, the ids it does not allow are left out entirely (as if their logit were -inf: the
 * host's capy_sampler_next_masked). */
struct ck_sample_out {
	int32_t status, n, greedy, pad;
	float v[CK_SAMPLE_CAP];
	int32_t id[CK_SAMPLE_CAP];
};
/* Row i < m of logits [m][V] with rows[i]'s mode into out[i]; with heads (NULL: none), each
 * row's status, n and greedy also into heads[i] (only those: memory the host reads without a
 * copy, e.g. page-locked, whose lists stay unwritten). */
int ck_sample(const float *logits, uint64_t m, uint64_t V, const struct ck_sample_row *rows,
	      struct ck_sample_out *out, struct ck_sample_out *heads, void *stream);

/* --- tensor parallelism (kernels/tp.cu): the all-reduce of libcore/tp/tp.h ------------- */

/* The payloads, as enum capy_tp_payload numbers them. */
enum { CK_TP_FP32, CK_TP_FP16_SHIFT, CK_TP_BF16 };
#define CK_TP_ID_BYTES 128 /* an NCCL unique id */

/* One rank's encoded rows: rows x n payload elements, then a shift a row (bytes). */
size_t ck_tp_block_bytes(int payload, uint64_t rows, uint64_t n);
/* Rows x[rows][n] (row stride ld) encoded as the receivers read them (capy_tp_encode_row's
 * values) into block, ck_tp_block_bytes of device memory. */
int ck_tp_encode(int payload, const float *x, uint64_t rows, uint64_t n, uint64_t ld, void *block, void *stream);
/* out[row][i] (row stride ld) = the sum over ranks blocks, laid one after another in gathered,
 * in rank order: capy_tp_reduce_row's bits (NaN: a NaN). */
int ck_tp_reduce(int payload, const void *gathered, int ranks, uint64_t rows, uint64_t n, float *out, uint64_t ld,
		 void *stream);

/* NCCL, loaded with dlopen (libnccl.so.2) when needed. A failure returns -1 (-cudaError for
 * ck_tp_allreduce) with the reason in why. */
struct ck_tp_comm;
/* A new unique id, for rank 0 to hand to the others (libcore/tp/tp.h's id file). */
int ck_tp_unique_id(uint8_t id[CK_TP_ID_BYTES], char *why, size_t why_size);
/* This thread's current device as rank `rank` of `ranks` (blocks until every rank has joined). */
int ck_tp_comm_open(struct ck_tp_comm **out, const uint8_t id[CK_TP_ID_BYTES], int ranks, int rank, char *why,
		    size_t why_size);
void ck_tp_comm_close(struct ck_tp_comm *c);
/* Device workspace of ck_tp_allreduce: a block of each rank's. */
size_t ck_tp_ws_bytes(int payload, uint64_t rows, uint64_t n, int ranks);
/* x[rows][n] (stride ld) replaced by the all-reduce of every rank's x with the payload, the same
 * bits on every rank; on stream, capturable in a CUDA graph (every rank must call it with the
 * same shape). */
int ck_tp_allreduce(struct ck_tp_comm *c, int payload, float *x, uint64_t rows, uint64_t n, uint64_t ld, void *ws,
		    void *stream, char *why, size_t why_size);

#ifdef __cplusplus
}
#endif

#endif
