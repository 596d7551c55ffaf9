/* tp.h - tensor parallelism's model-independent half (issue 14; docs/tp.md): how a model's
 * layers split over N ranks, and how the ranks' partial sums are reduced, payload and order,
 * so that a backend (the CPU's simulation of N ranks now, NCCL on GPUs later) computes
 * exactly what is written here.
 *
 *	struct capy_tp_split sp;
 *	if (capy_tp_split(&sp, &config, 2, &err) < 0)
 *		die("%s", err.msg);
 *	rank r: attention heads [sp.heads.lo(r), ...), its share of o_proj's columns, ...
 *	capy_tp_reduce_row(CAPY_TP_FP32, parts, 2, H, out);   // the all-reduce every rank gets
 *
 * The split (Megatron's): attention and GDN heads, the dense MLP's and the shared expert's
 * intermediate columns and lm_head's vocabulary rows in N contiguous equal ranges; routed
 * experts by id in N contiguous ranges. Column-parallel linears (q, k, v, gate_up, the GDN
 * projections) and lm_head (gathered) give every output element whole on one rank: the same
 * bits as one rank. Row-parallel ones (o_proj, GDN out_proj, the MLPs' down, and each rank's
 * routed experts with its share of the shared expert) give every rank a partial sum of each
 * output element, which the all-reduce adds: that, and the payload's rounding, is where N
 * ranks differ from one.
 *
 * Payloads, per row (one token's hidden vector: a row's result never depends on the other
 * rows of the step, so batching stays invariant):
 * - CAPY_TP_FP32: the partials as they are, added in rank order in fp32 (for 2 ranks a + b,
 *   which is what NCCL's ring computes, in either order: fp32 addition commutes).
 * - CAPY_TP_FP16_SHIFT: each rank's row scaled by a power of two 2^s chosen from its own
 *   largest magnitude (so that it lies in [2^14, 2^15): the top of fp16's normal range with
 *   room for nothing to overflow), rounded to fp16 (saturating at +-65504; NaN and Inf
 *   stay), sent with s; the receiver scales back by 2^-s (exact) and adds the ranks in order
 *   in fp32. Every rank, the sender included, adds the rounded rows, so all ranks agree.
 *   Half the bytes of fp32, 11 significant bits relative to the row's largest element.
 * - CAPY_TP_BF16: what an engine that reduces in BF16 computes (NCCL's bf16 sum): each
 *   partial rounded to bf16, every partial sum rounded to bf16 again. Only for comparison:
 *   where the partials nearly cancel, the error is large against the result (docs/tp.md).
 */
#ifndef CAPY_TP_H
#define CAPY_TP_H

#include "../model/config.h"
#include "../util/err.h"

#include <stddef.h>
#include <stdint.h>

#define CAPY_TP_MAX_RANKS 8

enum capy_tp_payload {
	CAPY_TP_FP32,
	CAPY_TP_FP16_SHIFT,
	CAPY_TP_BF16,
};

/* "fp32", "fp16-shift", "bf16" to the payload; -1 for anything else. */
int capy_tp_payload_parse(const char *name);
const char *capy_tp_payload_name(enum capy_tp_payload p);

/* A dimension of n split into contiguous parts of per (the last one may be shorter; per =
 * 0: not split, every rank holds all of it). */
struct capy_tp_range {
	uint64_t n, per;
};

static inline uint64_t capy_tp_lo(const struct capy_tp_range *r, int rank)
{
	return r->per ? (uint64_t)rank * r->per : 0;
}

static inline uint64_t capy_tp_hi(const struct capy_tp_range *r, int rank)
{
	return r->per ? ((uint64_t)rank + 1) * r->per < r->n ? ((uint64_t)rank + 1) * r->per : r->n : r->n;
}

struct capy_tp_split {
	int ranks;
	struct capy_tp_range heads;        /* attention query heads (o_proj's columns: head_dim each) */
	struct capy_tp_range kv_heads;     /* their key/value heads (per = 0: fewer than the ranks,
					    * every rank holds all of them) */
	struct capy_tp_range gdn_v_heads;  /* GDN value heads (out_proj's columns: linear_value_head_dim each) */
	struct capy_tp_range gdn_k_heads;
	struct capy_tp_range mlp;          /* the dense MLP's intermediate columns */
	struct capy_tp_range shared;       /* the shared expert's intermediate columns */
	struct capy_tp_range experts;      /* routed experts by id */
	struct capy_tp_range vocab;        /* lm_head's rows (ceil(V / N) a rank: gathered, not summed) */
};

/* The split of model c over ranks (1..CAPY_TP_MAX_RANKS). Fails with CAPY_EINVAL naming the
 * dimension and the rank count when a dimension the split cuts into sums is not a multiple
 * of it (the vocabulary may be: lm_head's rows are gathered). What the split leaves whole
 * (norms, embeddings, routers, the QSA indexer, the hyper-connection mixers, PLE) every rank
 * computes alike. */
int capy_tp_split(struct capy_tp_split *sp, const struct capy_model_config *c, int ranks, struct capy_err *err);

/* Which rank holds routed expert x. */
static inline int capy_tp_expert_rank(const struct capy_tp_split *sp, uint64_t x)
{
	return (int)(x / sp->experts.per);
}

/* One payload row: a rank's n partial sums as the receivers get them back (in place):
 * fp32 unchanged, fp16-shift rounded as above, bf16 rounded to bf16. */
void capy_tp_encode_row(enum capy_tp_payload p, float *row, size_t n);
/* The fp16-shift exponent s of a row whose largest magnitude is amax (0 for a row of zeros,
 * NaN or Inf only). */
int capy_tp_fp16_shift(float amax);

/* The all-reduce of one row: out[i] = the sum of parts[0..ranks)[i] with payload p, added
 * in rank order (bf16: each partial sum rounded). The parts other than out (which may be
 * parts[0]) are left unchanged. */
void capy_tp_reduce_row(enum capy_tp_payload p, const float *const *parts, int ranks, size_t n, float *out);

/* The NCCL unique id's hand-over between processes, or hosts sharing a directory (docs/tp.md,
 * the launch): rank 0 publishes the id's n bytes into path (written beside it and renamed into
 * place, so a reader never sees part of one); every other rank waits for the file, up to
 * timeout_s seconds, and reads it. A file of another size is refused, naming it. The path
 * must be new to each run: a file left by an earlier run is read as this run's id. */
int capy_tp_id_publish(const char *path, const uint8_t *id, size_t n, struct capy_err *err);
int capy_tp_id_wait(const char *path, uint8_t *id, size_t n, double timeout_s, struct capy_err *err);

#endif
