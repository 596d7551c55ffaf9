/* tp.c - the CPU backend's simulation of tensor parallelism (opts.tp > 1; libcore/tp/tp.h,
 * docs/tp.md): N ranks in one process. What the split leaves whole on each rank (column-
 * parallel linears, heads, norms, routers, mixers) gives every rank the same bits as one
 * rank, so it runs once; what it cuts into sums (o_proj, GDN out_proj, the MLPs' down, the
 * routed experts by id with the shared expert's slice) runs once per rank on that rank's
 * share, and the ranks' partial sums are reduced as the all-reduce would (tp_reduce). A rank's
 * share of a linear's input columns is the input with the other columns zero: a zero adds
 * exactly nothing, and the split's boundaries are multiples of 16 (a whole NVFP4 block, a
 * whole lane group of the plain kernels), so it is the sum a rank holding only its slice
 * computes. */
#include "cpu-impl.h"

/* A row-parallel weight must take k = units x unit_cols inputs, split at multiples of 16. */
static int check(const struct cpu_engine *e, const struct capy_linear *w, const struct capy_tp_range *units,
		 uint64_t unit_cols, const char *what, uint64_t layer, struct capy_err *err)
{
	if (w->k != units->n * unit_cols)
		return capy_err_set(err, CAPY_EUNSUPPORTED, "--tp: layer %" PRIu64 "'s %s takes %" PRIu64 " inputs, not %" PRIu64
				    " x %" PRIu64, layer, what, w->k, units->n, unit_cols);
	if ((units->per * unit_cols) % 16)
		return capy_err_set(err, CAPY_EUNSUPPORTED,
				    "--tp %d: layer %" PRIu64 "'s %s would split at %" PRIu64 " inputs a rank, not a multiple of 16",
				    e->tp.ranks, layer, what, units->per * unit_cols);
	return 0;
}

int tp_open(struct cpu_engine *e, struct capy_err *err)
{
	const struct capy_model_config *c = &e->c;
	int rc;

	if (e->opts.tp <= 1) {
		e->tp.ranks = 1;
		return 0;
	}
	if ((rc = capy_tp_split(&e->tp, c, e->opts.tp, err)) < 0)
		return rc;
	if (e->opts.tp_payload < CAPY_TP_FP32 || e->opts.tp_payload > CAPY_TP_BF16)
		return capy_err_set(err, CAPY_EINVAL, "--tp-payload: payload %d", e->opts.tp_payload);
	for (uint64_t li = 0; li < c->n_layers; li++) {
		const struct capy_layer_w *l = &e->w.layers[li];
		if (l->type == CAPY_LAYER_LINEAR)
			rc = check(e, &l->gdn.out, &e->tp.gdn_v_heads, c->linear_value_head_dim, "out_proj", li, err);
		else
			rc = check(e, &l->attn.o, &e->tp.heads, c->head_dim, "o_proj", li, err);
		if (rc == 0 && l->moe)
			rc = check(e, &l->moe_w.shared.down, &e->tp.shared, 1, "shared expert's down_proj", li, err);
		else if (rc == 0)
			rc = check(e, &l->mlp.down, &e->tp.mlp, 1, "down_proj", li, err);
		if (rc < 0)
			return rc;
	}
	struct scratch *s = &e->s;
	if (!(s->tp_x = calloc(s->tmax * e->wide, sizeof(float))))
		return capy_err_set(err, CAPY_ENOMEM, "out of memory for the tensor-parallel simulation");
	for (int r = 0; r < e->tp.ranks; r++)
		if (!(s->tp_part[r] = calloc(s->tmax * c->hidden_size, sizeof(float))))
			return capy_err_set(err, CAPY_ENOMEM, "out of memory for the tensor-parallel simulation");
	return 0;
}

void tp_partials(struct cpu_engine *e, const struct capy_linear *w, const float *x, uint64_t T,
		 const struct capy_tp_range *units, uint64_t unit_cols)
{
	const uint64_t K = w->k;
	float *xr = e->s.tp_x;

	for (int r = 0; r < e->tp.ranks; r++) {
		const uint64_t lo = capy_tp_lo(units, r) * unit_cols, hi = capy_tp_hi(units, r) * unit_cols;
		memset(xr, 0, T * K * sizeof(float));
		for (uint64_t t = 0; t < T; t++)
			memcpy(xr + t * K + lo, x + t * K + lo, (hi - lo) * sizeof(float));
		par_linear(e, w, xr, T, e->s.tp_part[r]);
	}
}

void tp_reduce(struct cpu_engine *e, uint64_t T, uint64_t n, float *y)
{
	for (uint64_t t = 0; t < T; t++) {
		const float *p[CAPY_TP_MAX_RANKS];
		for (int r = 0; r < e->tp.ranks; r++)
			p[r] = e->s.tp_part[r] + t * n;
		/* fp32 unless told (opts.tp_payload 0): fp16-shift prompt rows changed greedy
		 * continuations of the NVFP4 models (docs/tp.md) */
		capy_tp_reduce_row((enum capy_tp_payload)e->opts.tp_payload, p, e->tp.ranks, n, y + t * n);
	}
}

void tp_linear(struct cpu_engine *e, const struct capy_linear *w, const float *x, uint64_t T, float *y,
	       const struct capy_tp_range *units, uint64_t unit_cols)
{
	tp_partials(e, w, x, T, units, unit_cols);
	tp_reduce(e, T, w->n, y);
}
