/* cpu-impl.h - the CPU backend's private structures: bound weights, the layout of the
 * attention-cache pages, per-sequence recurrent state, scratch buffers and the helpers the
 * per-block files share. Include only inside libcore/backend/cpu/. */
#ifndef CAPY_BACKEND_CPU_IMPL_H
#define CAPY_BACKEND_CPU_IMPL_H

#include "../../engine/backend.h"
#include "../../model/weights.h"
#include "../../cpu/linear.h"
#include "../../util/thread.h"
#include "../../tp/tp.h"

/* --- engine ------------------------------------------------------------------------ */

struct scratch {
	uint64_t tmax;                    /* tokens per step */
	float *x, *xn;                    /* [tmax][hc * H]: residual (streams), normed input */
	float *blk, *out;                 /* [tmax][H]: block input (qwen4_exp), block output */
	float *inj;                       /* [tmax][hc] stream injection weights */
	float *mix, *tmp;                 /* [tmax][wide] */
	float *big1, *big2, *big3;        /* [tmax][max projection width] */
	float *logits_tmp;
	float *attn_scores;               /* [threads][attn_stride]: per query head of a KV group
					   * scores over the context, then rows of scratch */
	uint64_t attn_stride;
	uint8_t *sel;                     /* QSA: [tmax][attn_cap] keys each query may see */
	uint64_t attn_cap;                /* context the attention scratch holds */
	void *lin_ws;                     /* linear-input workspace */
	size_t lin_ws_bytes;
	float *moe_out;                   /* [tmax][topk][H] */
	float **moe_act_th;               /* per thread [tmax][2I] */
	float **moe_x_th;                 /* per thread [tmax][max(H, I)]: gathered rows, outputs */
	void **lin_ws_th;                 /* per thread linear-input workspace */
	int32_t *moe_ids;                 /* [tmax][topk] */
	float *moe_w;                     /* [tmax][topk] */
	int32_t *moe_rows;                /* [tmax * topk] token slots grouped by expert */
	uint64_t *moe_count;              /* [E] */
	int32_t *moe_active;              /* [E] experts with tokens */
	uint64_t *moe_first;              /* [E + 1] */
	float *ple_emb;                   /* [tmax][ple_dim] */
	int32_t *ple_hist;                /* [16 + tmax] a sequence's n-gram context and tokens */
	float *gdn_buf;                   /* chunked GDN workspace per thread */
	size_t gdn_buf_floats;
	uint64_t *pos;                    /* [tmax] position of each token row in its sequence */
	uint32_t *item_of;                /* [tmax] the batch item of each token row */
	int32_t *ids;                     /* [tmax] the token ids of the step */
	float *logits_rows;               /* [logits_rows_cap][V] last-token logits of several items */
	uint64_t logits_rows_cap;
	float *mtp_cat;                   /* MTP head: [tmax][2H] the normed embedding and hidden state */
	float *mtp_row;                   /* [V] one row of lm_head outputs, of which the draft ids are read */
	float *tp_x;                      /* tensor-parallel simulation: [tmax][wide] a rank's input */
	float *tp_part[CAPY_TP_MAX_RANKS]; /* [tmax][H] each rank's partial sums */
};

struct cpu_engine {
	struct capy_engine *core;
	const struct capy_artifact *a;
	struct capy_model_config c;
	struct capy_engine_opts opts;
	struct capy_weights w;
	struct capy_pool *pool;
	int nth;
	struct scratch s;
	uint64_t wide;                    /* widest activation row (floats) */
	int artifact_fd;                  /* for PLE table reads */
	float *rope_inv_freq;             /* [rot / 2] */
	uint64_t rot;                     /* rotary dims of attention heads */
	/* attention-cache pages */
	uint64_t P;                       /* tokens per page */
	uint64_t kv_row;                  /* bytes of one token's K (or V) row of one layer */
	struct capy_kv_fields *lay;            /* [n_kv] */
	uint64_t page_bytes;
	uint8_t **pages;                  /* [pages_cap] */
	uint32_t pages_cap, pages_have;
	const struct capy_batch *batch;   /* the step being run */
	struct capy_tp_split tp;          /* opts.tp > 1: the simulated ranks (tp.c); else ranks 1 */
};

/* --- sequence state ------------------------------------------------------------------- */

struct gdn_state {
	float *conv;                      /* [K - 1][C] previous conv inputs, oldest first */
	float *S;                         /* [nv][dk][dv] */
};

struct ple_state {
	int32_t ctx[16];                  /* previous ngram_size - 1 token ids, oldest first */
	float *conv;                      /* [(K - 1) * dil][hc * H] previous conv inputs */
};

/* A sequence's recurrent state (struct capy_seq.state). */
struct cpu_state {
	struct gdn_state *gdn;            /* [n_gdn] */
	struct ple_state *ple;            /* [n_ple] */
};

static inline struct cpu_state *seq_state(const struct capy_seq *s)
{
	return s->state;
}

/* Row `i` (of `row` bytes) of the field at byte offset `field` (a struct capy_kv_fields member)
 * in the page holding position pos of s: i is pos's row in its page for per-token fields. */
static inline uint8_t *page_field(const struct cpu_engine *e, const struct capy_seq *s, uint64_t pos,
				  uint64_t field, uint64_t row, uint64_t i)
{
	return e->pages[s->pages[pos / e->P]] + field + i * row;
}

/* Token pos's row of a per-token field. */
static inline uint8_t *page_row(const struct cpu_engine *e, const struct capy_seq *s, uint64_t pos,
				uint64_t field, uint64_t row)
{
	return page_field(e, s, pos, field, row, pos % e->P);
}

/* --- shared helpers (ops.c) ------------------------------------------------------------ */

/* Hot loops are built for AVX-512, AVX2 and baseline x86-64, picked at load time. The math is
 * the same in every version: the loops are element-wise or use dot16's explicit lanes, and
 * -std=c17 keeps the compiler from contracting into FMAs, so results are bit-identical
 * whichever version runs. */
#if defined(__x86_64__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define CAPY_HOT __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CAPY_HOT
#endif

/* Dot product with 16 fixed lanes summed pairwise at the end: the same order on every ISA,
 * and one the compiler can vectorize. */
static inline float dot16(const float *a, const float *b, uint64_t n)
{
	float lane[16] = { 0 };
	uint64_t i = 0;

	for (; i + 16 <= n; i += 16)
		for (int l = 0; l < 16; l++)
			lane[l] += a[i + (uint64_t)l] * b[i + (uint64_t)l];
	for (; i < n; i++)
		lane[i % 16] += a[i] * b[i];
	for (int w = 8; w >= 1; w /= 2)
		for (int l = 0; l < w; l++)
			lane[l] += lane[l + w];
	return lane[0];
}

/* Run fn over [0, n) split in contiguous slices over the engine's threads; ith is the
 * thread's index (for per-thread scratch). */
typedef void (*range_fn)(void *ctx, uint64_t begin, uint64_t end, int ith);
void par_for(struct cpu_engine *e, uint64_t n, range_fn fn, void *ctx);
/* Work (multiply-adds, roughly) below which one thread does it all: handing it to the others
 * costs more (a pool round trip is 10-60 us on a VM). Results never depend on the split. */
#define CPU_SMALL_WORK (1u << 17)
/* par_for, on the calling thread alone when `work` is below CPU_SMALL_WORK. */
void par_for_work(struct cpu_engine *e, uint64_t n, uint64_t work, range_fn fn, void *ctx);

/* y[m][w->n] = x[m][w->k] W^T over all threads (rows split). */
void par_linear(struct cpu_engine *e, const struct capy_linear *w, const float *x, uint64_t m, float *y);

/* Zero-centred RMSNorm: y = x * rsqrt(mean(x^2) + eps) * w1p (w1p = 1 + w), over groups of
 * `group` values (group == n: the whole row); fp32. x and y may alias. */
void rmsnorm_1p(const float *x, const float *w1p, float *y, uint64_t n, uint64_t group, float eps);
float silu(float x);
float sigmoidf_(float x);
float softplusf_(float x);
void rope_apply(const struct cpu_engine *e, float *v, uint64_t pos);

/* Widen n values of dtype dt at p to fp32. */
void to_f32(const void *p, enum capy_dtype dt, uint64_t n, float *out);

/* Per-block steps (attention.c, gdn.c, moe.c, hc.c, ple.c): each reads the block input xn
 * [T][H] (or the streams for PLE/HC) and writes the block output. */
int attention_forward(struct cpu_engine *e, const struct capy_layer_w *l, const float *xn, uint64_t T,
		      float *out, struct capy_err *err);
void gdn_forward(struct cpu_engine *e, const struct capy_layer_w *l, const float *xn, uint64_t T, float *out);
void mlp_forward(struct cpu_engine *e, const struct capy_mlp_w *m, const float *xn, uint64_t T, float *out,
		 float *act);

/* tp.c: the tensor-parallel simulation (e->tp.ranks > 1). The ranks' partial sums of a
 * row-parallel linear into s.tp_part (rank r: the input columns of its units of the split
 * range, unit_cols each, the others zero); their all-reduce into y [T][n] with each row's
 * payload; both (tp_linear). tp_open checks the model against the split. */
int tp_open(struct cpu_engine *e, struct capy_err *err);
void tp_partials(struct cpu_engine *e, const struct capy_linear *w, const float *x, uint64_t T,
		 const struct capy_tp_range *units, uint64_t unit_cols);
void tp_reduce(struct cpu_engine *e, uint64_t T, uint64_t n, float *y);
void tp_linear(struct cpu_engine *e, const struct capy_linear *w, const float *x, uint64_t T, float *y,
	       const struct capy_tp_range *units, uint64_t unit_cols);
void moe_forward(struct cpu_engine *e, const struct capy_moe_w *m, const float *xn, uint64_t T, float *out);
/* Hyper-connection mixer: from the streams X [T][hc*H] the block input mixed [T][H] and,
 * with inject, the per-stream injection weights inj [T][hc]. */
void hc_mix(struct cpu_engine *e, const struct capy_hc_w *h, const float *X, uint64_t T, float *mixed,
	    float *inj, float *xn_tmp);
int ple_forward(struct cpu_engine *e, const struct capy_layer_w *l, float *X, uint64_t T, struct capy_err *err);

/* gdn.c */
uint64_t gdn_chunk_floats(const struct capy_model_config *c);

/* state.c: page layout and storage, recurrent state, and the attention scratch for a context
 * of n tokens; the backend operations of the same names. */
int cpu_pages_layout(struct cpu_engine *e, struct capy_err *err);
void cpu_pages_release(struct cpu_engine *e);
int cpu_attn_reserve(struct cpu_engine *e, uint64_t n, struct capy_err *err);
uint64_t cpu_page_bytes(const struct capy_engine *core);
int cpu_pages_reserve(struct capy_engine *core, uint32_t n, struct capy_err *err);
uint32_t cpu_pages_give_back(struct capy_engine *core, uint32_t n);
void cpu_page_copy(struct capy_engine *core, uint32_t dst, uint32_t src);
uint64_t cpu_state_bytes(const struct capy_engine *core);
int cpu_state_new(struct capy_engine *core, void **out, struct capy_err *err);
void cpu_state_copy(struct capy_engine *core, void *dst, const void *src);
/* To and from host bytes, for the context cache's tiers (engine/backend.h). */
int cpu_page_read(struct capy_engine *core, uint32_t id, void *dst, struct capy_err *err);
int cpu_page_write(struct capy_engine *core, uint32_t id, const void *src, struct capy_err *err);
uint64_t cpu_state_io_bytes(const struct capy_engine *core);
int cpu_state_read(struct capy_engine *core, const void *st, void *dst, struct capy_err *err);
int cpu_state_write(struct capy_engine *core, void *st, const void *src, struct capy_err *err);
void cpu_state_free(struct capy_engine *core, void *st);

/* forward.c: the backend's step; the embedding rows of ids into x [T][hc * H]; one decoder
 * layer (not qwen4_exp) on the residual rows s.x [T][H] in place; one qwen4_exp layer (PLE if
 * it has one, each block between its hc mixers) on the streams s.x [T][hc * H] in place; rows
 * u [T][H] copied into every stream of X [T][hc * H], as the embedding is (u may be X). */
int cpu_step(struct capy_engine *core, const struct capy_batch *b, struct capy_err *err);
void cpu_embed(const struct cpu_engine *e, const int32_t *ids, uint64_t T, float *x);
int cpu_layer_forward(struct cpu_engine *e, const struct capy_layer_w *l, uint64_t T, struct capy_err *err);
int cpu_layer_hc(struct cpu_engine *e, const struct capy_layer_w *l, uint64_t T, struct capy_err *err);
void cpu_streams(const struct cpu_engine *e, const float *u, uint64_t T, float *X);

/* mtp.c: the MTP head's rows (backend op mtp). */
int cpu_mtp(struct capy_engine *core, const struct capy_mtp_rows *r, struct capy_err *err);

/* ops.c: y = x W^T for one row x, only the rows W[ids[i]] (y is [w->n]; other elements are
 * left as they are), over all threads; each element the bits par_linear gives. */
void par_linear_ids(struct cpu_engine *e, const struct capy_linear *w, const float *x, const int32_t *ids,
		    uint64_t n_ids, float *y);

#endif
