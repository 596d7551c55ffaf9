/* blocks.c - the blocks of a layer on the GPU, each the CPU backend's block (libcore/backend/
 * cpu: attention.c, gdn.c, moe.c, hc.c, ple.c) as a sequence of kernels on the step's stream:
 * gated attention with its KV pages and the QSA indexer, Gated DeltaNet, the SwiGLU MLP and
 * the MoE block, the hyper-connection mixer and PLE. Buffers are the step's scratch (the
 * same roles as the CPU's); every kernel runs over all rows of the step at once. */
#include "cuda-impl.h"

/* Rows of the step by kind: runs of decoding (or short, or verification) items through
 * ck_linear(_multi), whose numerics are shared by every row, and each prompt item
 * (cu_prompt_item) on its own through cuBLASLt's GEMMs where the matrix allows, so no row's result
 * depends on the other items of its step. Only for linears over all rows of the step. */
static int by_rows(struct cuda_engine *e, int nw, const struct ck_linear *const *w, const float *x, float *const *y,
		   struct capy_err *err)
{
	const struct capy_batch *b = e->batch;
	const uint64_t k = w[0]->k;
	uint64_t run0 = 0, run_n = 0;

	for (size_t i = 0; i <= b->n_items; i++) {
		const struct capy_batch_item *it = i < b->n_items ? &b->items[i] : NULL;
		const bool big = it && cu_prompt_item(it);
		if ((big || !it) && run_n) { /* the run of small items before this one */
			const float *xr = x + run0 * k;
			float *yr[4];
			for (int j = 0; j < nw; j++)
				yr[j] = y[j] + run0 * w[j]->n;
			if (nw == 1)
				TRY(ck_linear(w[0], xr, run_n, yr[0], e->s.lin_ws, e->stream), "linear");
			else
				TRY(ck_linear_multi(w, nw, xr, run_n, yr, e->s.lin_ws, e->stream), "linear");
			run_n = 0;
		}
		if (!it)
			break;
		if (!big) {
			if (!run_n)
				run0 = it->t0;
			run_n += it->n;
			continue;
		}
		bool all_gemm = nw > 1;
		for (int j = 0; j < nw; j++)
			all_gemm = all_gemm && ck_gemm_supported(w[j]);
		if (all_gemm) { /* x split into its halves once for the nw GEMMs */
			float *yr[4];
			for (int j = 0; j < nw; j++)
				yr[j] = y[j] + it->t0 * w[j]->n;
			TRY(ck_gemm_multi(e->blas, w, nw, x + it->t0 * k, it->n, yr, e->s.lin_ws, e->stream),
			    "linears (cuBLASLt)");
			continue;
		}
		for (int j = 0; j < nw; j++) {
			const float *xr = x + it->t0 * k;
			float *yr = y[j] + it->t0 * w[j]->n;
			if (ck_gemm_supported(w[j]))
				TRY(ck_gemm(e->blas, w[j], xr, it->n, yr, w[j]->n, e->s.lin_ws, e->stream), "linear (cuBLASLt)");
			else
				TRY(ck_linear(w[j], xr, it->n, yr, e->s.lin_ws, e->stream), "linear");
		}
	}
	return 0;
}

static bool gemm_step(const struct cuda_engine *e, uint64_t m)
{
	return e->blas && e->batch && m == e->step.T && e->step.n_grouped;
}

int cu_linear(struct cuda_engine *e, const struct ck_linear *w, const float *x, uint64_t m, float *y,
	      struct capy_err *err)
{
	if (gemm_step(e, m) && w->dtype == CK_BF16)
		return by_rows(e, 1, &w, x, &y, err);
	TRY(ck_linear(w, x, m, y, e->s.lin_ws, e->stream), "linear");
	return 0;
}

#define LIN(w, x, m, y)                                                 \
	do {                                                            \
		int rc_ = cu_linear(e, (w), (x), (m), (y), err);       \
		if (rc_ < 0)                                            \
			return rc_;                                     \
	} while (0)

/* MULTI(x, m, LINS(&w1, &w2, ...), OUTS(y1, y2, ...)): matrices over the same input x in one
 * launch, each result the bits ck_linear gives alone (for prompt items: cu_linear's GEMMs). */
static int multi(struct cuda_engine *e, const float *x, uint64_t m, int n, const struct ck_linear *const *w,
		 float *const *y, struct capy_err *err)
{
	if (gemm_step(e, m) && n <= 4 && w[0]->dtype == CK_BF16)
		return by_rows(e, n, w, x, y, err);
	TRY(ck_linear_multi(w, n, x, m, y, e->s.lin_ws, e->stream), "linear");
	return 0;
}

#define MULTI(x, m, W, Y)                                                               \
	do {                                                                            \
		const struct ck_linear *const *w_ = (W);                                \
		float *const *y_ = (Y);                                                 \
		int rc_ = multi(e, (x), (m), (int)(sizeof(Y) / sizeof(float *)), w_, y_, err); \
		if (rc_ < 0)                                                            \
			return rc_;                                                     \
	} while (0)
#define LINS(...) ((const struct ck_linear *[]){ __VA_ARGS__ })
#define OUTS(...) ((float *[]){ __VA_ARGS__ })

/* The side stream (cuda-impl.h), each 0 or a CUDA error negated (TRY's convention): fork makes
 * it wait for what the main stream enqueued so far; done marks the end of its work; join makes
 * the main stream wait for that. */
static int side_fork(struct cuda_engine *e)
{
	cudaError_t r = cudaEventRecord(e->ev_fork, e->stream);

	return -(int)(r != cudaSuccess ? r : cudaStreamWaitEvent(e->side, e->ev_fork, 0));
}

static int side_done(struct cuda_engine *e)
{
	return -(int)cudaEventRecord(e->ev_join, e->side);
}

static int side_join(struct cuda_engine *e)
{
	return -(int)cudaStreamWaitEvent(e->stream, e->ev_join, 0);
}

int cu_attention(struct cuda_engine *e, const struct cu_layer *l, const float *xn, float *out, struct capy_err *err)
{
	const struct capy_model_config *c = &e->c;
	const struct cu_attn *a = &l->attn;
	const struct ck_step *st = &e->step;
	const struct ck_kv_layer *kv = &e->kv[l->h->kv_slot];
	uint64_t T = st->T, hd = c->head_dim, nq = c->n_heads, nkv = c->n_kv_heads;
	float *qg = e->s.big1, *k = e->s.big2, *v = e->s.big3, *q = e->s.tmp, *att = e->s.mix;
	float eps = (float)c->rms_norm_eps;
	const uint8_t *sel = NULL;
	void *s = e->stream;

	if (PART(CU_ATT_IN))
		MULTI(xn, T, LINS(&a->q, &a->k, &a->v), OUTS(qg, k, v));
	/* q: per head the first hd of [query | gate], normed into q; k normed in place. */
	if (PART(CU_ATT_CORE)) { /* each normed and rotated in one launch */
		TRY(ck_rmsnorm_rope(qg, 2 * hd, a->q_norm, q, hd, T * nq, hd, hd, eps, nq, e->rot, st->pos, e->inv_freq, s),
		    "q norm and rope");
		TRY(ck_rmsnorm_rope(k, hd, a->k_norm, k, hd, T * nkv, hd, hd, eps, nkv, e->rot, st->pos, e->inv_freq, s),
		    "k norm and rope");
	}
	if (PART(CU_ATT_KV))
		TRY(ck_kv_store(st, kv, k, v, s), "kv store");
	if (a->qsa) {
		uint64_t ih = c->indexer_head_dim, ni = c->indexer_n_heads, w = (ni + 1) * ih, ratio = c->indexer_compress_ratio;
		float *idx = e->s.big2, *iq = e->s.big3; /* k and v are in the cache now */
		LIN(&a->idx_qk, xn, T, idx);
		TRY(ck_qsa_store_keys(st, kv, idx, w, ni * ih, ih, s), "qsa keys");
		if (e->rot <= ih) {
			TRY(ck_rmsnorm_rope(idx, w, a->idx_q_norm, iq, ni * ih, T, ni * ih, ih, eps, ni, e->rot, st->pos,
					    e->inv_freq, s),
			    "qsa q norm and rope");
		} else {
			TRY(ck_rmsnorm(idx, w, a->idx_q_norm, ih, iq, ni * ih, T, ni * ih, ih, eps, s), "qsa q norm");
			TRY(ck_rope(iq, T, ni, ih, e->rot, st->pos, 0, 0, e->inv_freq, s), "qsa q rope");
		}
		TRY(ck_qsa_update_blocks(st, kv, ih, ratio, a->idx_k_norm, eps, e->rot, e->inv_freq, s), "qsa blocks");
		TRY(ck_qsa_select(st, kv, iq, ni, ih, ratio, c->indexer_budget / ratio, e->s.sel, e->s.sel_cap, e->s.attn_ws, s),
		    "qsa select");
		sel = e->s.sel;
	}
	if (PART(CU_ATT_ATTN))
		TRY(ck_attention(st, kv, q, nq, sel, e->s.sel_cap, att, e->s.attn_ws, s), "attention");
	if (PART(CU_ATT_GATE))
		TRY(ck_attn_gate(att, qg, T, nq, hd, q, s), "attention gate");
	if (PART(CU_ATT_OUT))
		LIN(&a->o, q, T, out);
	return 0;
}

int cu_gdn(struct cuda_engine *e, const struct cu_layer *l, const float *xn, float *out, struct capy_err *err)
{
	const struct capy_model_config *c = &e->c;
	const struct cu_gdn *w = &l->gdn;
	const struct ck_step *st = &e->step;
	uint64_t T = st->T, nv = c->linear_value_heads, dv = c->linear_value_head_dim;
	float *qkv = e->s.big1, *conv = e->s.big2, *z = e->s.big3, *ba = e->s.tmp, *o = e->s.mix;
	float *bb = ba, *aa = ba + T * nv, *beta = aa + T * nv, *g = beta + T * nv;
	int slot = l->h->gdn_slot;
	void *s = e->stream;

	/* Decode rows: the output gate's projection z (needed only by the gated norm) on the side
	 * stream, beside the rest of the in_proj and the conv, gates and recurrence; it writes z
	 * (big3), which the main stream does not touch before the join; z is plain (no lin_ws). */
	const bool fork = PART(CU_GDN_IN) && (e->fork & CU_FORK_GDN_Z) && !gemm_step(e, T) &&
			  !ck_linear_ws_bytes(&w->z, T);
	if (fork) {
		TRY(side_fork(e), "forking the gdn gate");
		TRY(ck_linear(&w->z, xn, T, z, e->s.lin_ws, e->side), "gdn gate");
		TRY(side_done(e), "joining the gdn gate");
		MULTI(xn, T, LINS(&w->qkv, &w->b, &w->a), OUTS(qkv, bb, aa));
	} else if (PART(CU_GDN_IN)) {
		MULTI(xn, T, LINS(&w->qkv, &w->z, &w->b, &w->a), OUTS(qkv, z, bb, aa));
	}
	if (PART(CU_GDN_CORE) && !e->no_fuse && T == st->n_items && !st->gdn_keep) {
		/* decode rows: conv, gates, recurrence and gated norm in two kernels, the same bits */
		const struct ck_gdn_decode_args d = { .qkv = qkv, .conv_w = w->conv, .b = bb, .a = aa,
						      .neg_a = w->neg_a, .dt_bias = w->dt_bias, .z = z,
						      .norm_w = w->norm, .eps = (float)c->rms_norm_eps,
						      .gate_sigmoid = c->output_gate_sigmoid, .conv = conv,
						      .beta = beta, .g = g, .o = o, .count = e->s.gdn_count,
						      .z_ready = fork ? (void *)e->ev_join : NULL };
		TRY(ck_gdn_decode(st, &e->gdn, slot, &d, s), "gdn decode"); /* joins the gate's fork */
	} else {
		if (PART(CU_GDN_CORE))
			TRY(ck_gdn_conv(st, &e->gdn, slot, qkv, w->conv, conv, s), "gdn conv");
		if (PART(CU_GDN_CORE))
			TRY(ck_gdn_gates(bb, aa, w->neg_a, w->dt_bias, T, nv, beta, g, s), "gdn gates");
		if (PART(CU_GDN_CORE))
			TRY(ck_gdn_recurrent(st, &e->gdn, slot, conv, beta, g, o, s), "gdn recurrence");
		if (fork)
			TRY(side_join(e), "joining the gdn gate");
		if (PART(CU_GDN_CORE))
			TRY(ck_gdn_gated_norm(o, z, w->norm, T, nv, dv, (float)c->rms_norm_eps, c->output_gate_sigmoid,
						  s),
			    "gdn norm");
	}
	if (PART(CU_GDN_OUT))
		LIN(&w->out, o, T, out);
	return 0;
}

/* SwiGLU MLP: gate_up into act, silu(gate) * up into mid, down into out. */
static int mlp(struct cuda_engine *e, const struct cu_mlp *m, const float *xn, uint64_t T, float *out, float *act,
	       float *mid, struct capy_err *err)
{
	LIN(&m->gate_up, xn, T, act);
	TRY(ck_swiglu(act, T, m->gate_up.n / 2, mid, e->stream), "swiglu");
	LIN(&m->down, mid, T, out);
	return 0;
}

int cu_ffn(struct cuda_engine *e, const struct cu_layer *l, const float *xn, float *out, bool fold, struct capy_err *err)
{
	const struct capy_model_config *c = &e->c;
	const struct cu_moe *m = &l->moe;
	uint64_t T = e->step.T, k = c->n_experts_per_tok;
	struct cu_scratch *sc = &e->s;

	if (!l->h->moe)
		return mlp(e, &l->mlp, xn, T, out, sc->big1, sc->big2, err);
	/* Decode rows: the shared expert (gate_up and gate, then its SwiGLU inside its down
	 * projection's loads) on the side stream while the router and the routed experts run on
	 * the main one: it reads xn and writes big3, big2 and tmp, which nothing on the main stream
	 * touches before the join; its matrices are plain (no use of the shared lin_ws). */
	const bool fused_shared = PART(CU_SHARED) && !gemm_step(e, T) && ck_linear_swiglu_ok(&m->shared.down, sc->big3, T);
	const bool fork = fused_shared && PART(CU_MOE_IN) && (e->fork & CU_FORK_SHARED) &&
			  !ck_linear_ws_bytes(&m->shared.gate_up, T) && !ck_linear_ws_bytes(&m->shared_gate, T);
	if (fork) {
		const struct ck_linear *sw[] = { &m->shared.gate_up, &m->shared_gate };
		float *sy[] = { sc->big3, sc->big2 };
		TRY(side_fork(e), "forking the shared expert");
		TRY(ck_linear_multi(sw, 2, xn, T, sy, e->s.lin_ws, e->side), "shared expert");
		TRY(ck_linear_swiglu(&m->shared.down, sc->big3, T, sc->tmp, e->side), "shared expert");
		TRY(side_done(e), "joining the shared expert");
		TRY(ck_linear(&m->router, xn, T, sc->big1, e->s.lin_ws, e->stream), "router");
	} else if (PART(CU_MOE_IN)) {
		/* The router, the shared expert's gate_up and its gate read the same input. */
		MULTI(xn, T, LINS(&m->router, &m->shared.gate_up, &m->shared_gate), OUTS(sc->big1, sc->big3, sc->big2));
	}
	if (PART(CU_ROUTE))
		TRY(ck_moe_route(sc->big1, T, c->n_experts, k, c->norm_topk_prob, sc->moe_ids, sc->moe_w, e->stream), "router");
	if (PART(CU_EXPERTS) && e->off) {
		int rc = cu_offload_experts(e, l, xn, err);
		if (rc < 0)
			return rc;
	} else if (PART(CU_EXPERTS))
		TRY(ck_moe_experts(&m->gate_up, &m->down, xn, T, k, sc->moe_ids, e->step.grouped, e->step.n_grouped, sc->moe_out,
				   sc->moe_ws, e->stream),
		    "experts");
	if (fork) {
		TRY(side_join(e), "joining the shared expert");
	} else if (fused_shared) {
		TRY(ck_linear_swiglu(&m->shared.down, sc->big3, T, sc->tmp, e->stream), "shared expert");
	} else if (PART(CU_SHARED)) {
		TRY(ck_swiglu(sc->big3, T, m->shared.gate_up.n / 2, sc->mix, e->stream), "swiglu");
		LIN(&m->shared.down, sc->mix, T, sc->tmp);
	}
	if (fold && PART(CU_COMBINE))
		return 1; /* the caller adds it with its residual add (cu_ffn_fold) */
	if (PART(CU_COMBINE))
		TRY(ck_moe_combine(sc->moe_out, sc->moe_w, sc->tmp, sc->big2, T, k, c->hidden_size, out, e->stream), "moe combine");
	return 0;
}

int cu_ffn_fold(struct cuda_engine *e, const float *next_norm, struct capy_err *err)
{
	struct cu_scratch *sc = &e->s;
	const struct capy_model_config *c = &e->c;

	TRY(ck_moe_combine_add_rmsnorm(sc->moe_out, sc->moe_w, sc->tmp, sc->big2, c->n_experts_per_tok, sc->x, next_norm,
				       next_norm ? sc->xn : NULL, e->step.T, c->hidden_size, (float)c->rms_norm_eps,
				       e->stream),
	    "moe combine, residual and norm");
	return 0;
}

int cu_hc_mix(struct cuda_engine *e, const struct cu_hc *h, float *X, uint64_t T, float *mixed, float *inj,
	      bool pending, struct capy_err *err)
{
	const struct capy_model_config *c = &e->c;
	uint64_t H = c->hidden_size, hc = c->hc_count, hh = hc * H, r = c->hc_lowrank;
	float *low = e->s.big1, *mix = e->s.big2, *xn = e->s.xn;
	const struct ck_linear *w[2] = { &h->down, &h->inject };
	const enum ck_epilogue ep[2] = { CK_EP_HC_LOW, CK_EP_HC_INJECT };
	const int nw = inj ? 2 : 1;
	void *s = e->stream;

	if (pending)
		TRY(ck_hc_add_rmsnorm(X, e->s.out, e->s.inj, h->norm, xn, T, H, hc, (float)c->rms_norm_eps, s),
		    "injection and hc norm");
	else
		TRY(ck_rmsnorm(X, hh, h->norm, hh, xn, hh, T, hh, H, (float)c->rms_norm_eps, s), "hc norm");
	if (!gemm_step(e, T) && ck_linear_multi_ep_ok(w, nw, xn, T)) {
		/* decode rows: the activations in the GEMV's epilogue (the same bits) */
		TRY(ck_linear_multi_ep(w, nw, xn, T, (float *[]){ low, inj }, ep, (float)hc, s), "hc down");
	} else {
		if (inj)
			MULTI(xn, T, LINS(&h->down, &h->inject), OUTS(low, inj));
		else
			LIN(&h->down, xn, T, low);
		TRY(ck_hc_low_act(low, T * r, (float)hc, s), "hc low");
		if (inj)
			TRY(ck_hc_inject_act(inj, T * hc, (float)hc, s), "hc inject");
	}
	LIN(&h->up, low, T, mix);
	TRY(ck_hc_combine(mix, xn, T, H, hc, mixed, s), "hc combine");
	return 0;
}

int cu_ple(struct cuda_engine *e, const struct cu_layer *l, float *X, struct capy_err *err)
{
	const struct capy_model_config *c = &e->c;
	const struct cu_ple *p = &l->ple;
	uint64_t T = e->step.T, H = c->hidden_size, hc = c->hc_count, hh = hc * H;
	const float *emb = e->s.ple_emb + (uint64_t)l->h->ple_slot * e->s.tmax * c->ple_embed_dim;
	float *key = e->s.big1, *val = e->s.big2, *gv = e->s.tmp, *gvn = e->s.mix;
	void *s = e->stream;

	MULTI(emb, T, LINS(&p->key, &p->value), OUTS(key, val));
	TRY(ck_ple_gate(key, X, val, p->norm_key, p->norm_query, p->norm_conv, T, H, hc, (float)c->rms_norm_eps, gv, gvn, s),
	    "ple gate");
	TRY(ck_ple_conv(&e->step, l->h->ple_slot, gv, gvn, p->conv, hh, c->ple_conv_kernel, c->ngram_size, X, s),
	    "ple conv");
	return 0;
}
