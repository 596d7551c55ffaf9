/* convert-impl.h - the conversion plan, private to libcore/convert.
 *
 * A plan lists the source tensors a family needs (with the shapes its config
 * implies) and the artifact tensors made from them. An output slice is a list of
 * row bands, each a run of rows of one source matrix; fusing gate and up, stacking
 * experts, de-interleaving Qwen3-Next's projections and concatenating PLE shards are
 * all just different band lists. Bands carry the NVFP4 part they belong to, so
 * fused NVFP4 matrices keep each source's own global and input scales.
 */
#ifndef CAPY_CONVERT_IMPL_H
#define CAPY_CONVERT_IMPL_H

#include "convert.h"
#include "../ckpt/ckpt.h"
#include "../model/config.h"

enum src_kind {
	SRC_PLAIN,   /* any stored dtype, copied bytes */
	SRC_LINEAR,  /* a [N, K] weight: BF16/F16/F32, or ModelOpt NVFP4 (weight + scales) */
	SRC_STACKED, /* a fused [E, N, K] expert tensor as published (plain dtypes) */
};

struct plan_src {
	char *name;
	enum src_kind kind;
	int ndim;
	uint64_t shape[CAPY_MAX_DIMS];
	bool optional;
	/* resolved */
	bool present;
	bool nvfp4;
	enum capy_dtype dtype; /* of the stored values (NVFP4 for quads) */
	const struct capy_st_tensor *w, *scale, *scale2, *iscale;
	float scale2_v, iscale_v; /* NVFP4 scalars (iscale_v 0 = none) */
	const int64_t *expect_i64; /* optional exact content check (PLE buffers) */
};

struct band {
	int src;
	uint32_t src_slice; /* along dim 0 of a SRC_STACKED source */
	uint64_t row0, rows;
	uint8_t part;
};

struct plan_out {
	char *name;
	int ndim;
	uint64_t shape[CAPY_MAX_DIMS];
	int stack;           /* index into plan.stacks, or -1 */
	bool linear;         /* a weight matrix (may be NVFP4) */
	bool quantize;       /* routed expert: quantized when the plan says so */
	uint32_t nslices;    /* 1, or the number of experts */
	uint32_t per_slice;  /* bands per slice */
	struct band *bands;  /* nslices * per_slice */
	char *source_note;   /* source names/patterns for the directory */
	/* resolved */
	enum capy_dtype dtype;
	uint32_t nparts;
	uint64_t parts[CAPY_MAX_PARTS];
	int aw;              /* writer tensor index */
	double rand_std;     /* synthetic: std of the random values (0: constant rand_mean) */
	double rand_mean;
};

struct plan_stack {
	char *name;
	uint64_t count;
	int aw;
};

struct plan {
	struct capy_model_config cfg;
	const struct capy_ckpt *ck;  /* NULL for synthetic */
	const char *sp;              /* source prefix of text tensors ("model.language_model.") */
	struct plan_src *srcs;
	size_t nsrcs, cap_srcs;
	struct plan_out *outs;
	size_t nouts, cap_outs;
	struct plan_stack *stacks;
	size_t nstacks, cap_stacks;
	bool quantize_experts;
	bool vision;
	uint64_t mtp_layers;
	cJSON *transforms;           /* descriptions for provenance.recipe */
	struct capy_err *err;
};

/* Build the plan of a family from its config; ck may be NULL (synthetic), in which
 * case per-expert sources are assumed and nothing is resolved. */
int plan_build(struct plan *p, const struct capy_ckpt *ck, struct capy_err *err);
void plan_release(struct plan *p);

/* Resolve every source in the checkpoint, check shapes/dtypes/scales and the
 * quantization config, and fix each output's dtype and parts; fails on missing,
 * extra or inconsistent tensors. */
int plan_resolve(struct plan *p, struct capy_err *err);

/* Output dtype and parts for a synthetic artifact (BF16, NVFP4 experts if asked). */
void plan_resolve_synthetic(struct plan *p);

/* Shape as "[a, b, c]". */
void shape_str(char *buf, size_t n, int ndim, const uint64_t *shape);

/* Record a transformation in provenance.recipe.transforms (once). */
void plan_note(struct plan *p, const char *what);

static inline bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);
	return n >= m && !strcmp(s + n - m, suffix);
}

/* True for the scale tensors of a ModelOpt NVFP4 weight. */
static inline bool is_nvfp4_aux(const char *name)
{
	return ends_with(name, ".weight_scale") || ends_with(name, ".weight_scale_2") ||
	       ends_with(name, ".input_scale");
}

/* --- synthetic weights (synthetic.c) --- */

struct synth_tables; /* random-value tables shared by all threads */

int synth_tables_new(struct synth_tables **out, uint64_t seed, struct capy_err *err);
void synth_tables_free(struct synth_tables *t);
/* Fill buf with slice `slice` of output o (its artifact layout, slice_bytes long). */
void synth_fill(const struct synth_tables *t, const struct plan *p, const struct plan_out *o,
		uint64_t slice, const struct capy_tensor_info *ti, uint8_t *buf, uint64_t offset,
		uint64_t len);

#endif
