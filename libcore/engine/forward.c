/* forward.c - the engine: creation (binding, scratch), and the forward pass that runs
 * a chunk of tokens through every layer, embedding to logits.
 *
 *	qwen3_5, qwen3_5_moe, qwen3_next:
 *		x += mixer(RMSNorm(x)); x += mlp_or_moe(RMSNorm(x)); logits = lm_head(RMSNorm(x))
 *	qwen4_exp (streams X, hc copies of the embedding):
 *		X += PLE(X) (some layers); X += mixer(hc_mix(X)) (x) inj; X += moe(hc_mix(X)) (x) inj;
 *		logits = lm_head(hc_mix_final(X))
 */
#include "engine-impl.h"

#include <math.h>

#define TMAX 512 /* tokens per forward chunk; a multiple of the GDN chunk (64) */

static uint64_t widest(const struct capy_model_config *c)
{
	uint64_t hd = c->head_dim, w = c->hidden_size * (c->hc_count ? c->hc_count : 1);
	uint64_t conv = 2 * c->linear_key_heads * c->linear_key_head_dim + c->linear_value_heads * c->linear_value_head_dim;
	uint64_t v[] = { w, conv, c->n_heads * 2 * hd, 4 * c->linear_value_heads, c->n_experts,
			 2 * c->moe_intermediate_size, 2 * c->shared_expert_intermediate_size,
			 2 * c->intermediate_size, (c->indexer_n_heads + 1) * c->indexer_head_dim,
			 c->hc_lowrank, c->ple_embed_dim };

	for (size_t i = 0; i < ARRAY_SIZE(v); i++)
		w = CAPY_MAX(w, v[i]);
	return w;
}

static int alloc_scratch(struct capy_engine *e, struct capy_err *err)
{
	const struct capy_model_config *c = &e->c;
	struct scratch *s = &e->s;
	uint64_t T = s->tmax, H = c->hidden_size, hh = H * (c->hc_count ? c->hc_count : 1);
	uint64_t k = c->n_experts_per_tok ? c->n_experts_per_tok : 1, I = c->moe_intermediate_size;
	bool ok;

	e->wide = widest(c);
	s->x = calloc(T * hh, sizeof(float));
	s->xn = calloc(T * hh, sizeof(float));
	s->blk = calloc(T * H, sizeof(float));
	s->out = calloc(T * H, sizeof(float));
	s->inj = calloc(T * (c->hc_count + 1), sizeof(float));
	s->mix = calloc(T * e->wide, sizeof(float));
	s->tmp = calloc(T * e->wide, sizeof(float));
	s->big1 = calloc(T * e->wide, sizeof(float));
	s->big2 = calloc(T * e->wide, sizeof(float));
	s->big3 = calloc(T * e->wide, sizeof(float));
	s->logits_tmp = calloc(CAPY_MAX(c->vocab_size, c->n_experts), sizeof(float));
	s->lin_ws = aligned_alloc(64, CAPY_ALIGN_UP(s->lin_ws_bytes + 64, 64));
	s->moe_out = calloc(T * k * H + 1, sizeof(float));
	s->moe_act_th = calloc((size_t)e->nth, sizeof(float *));
	s->moe_x_th = calloc((size_t)e->nth, sizeof(float *));
	s->lin_ws_th = calloc((size_t)e->nth, sizeof(void *));
	ok = s->moe_act_th && s->moe_x_th && s->lin_ws_th;
	for (int i = 0; ok && i < e->nth; i++) {
		s->moe_act_th[i] = calloc(T * 2 * I + 1, sizeof(float));
		s->moe_x_th[i] = calloc(T * CAPY_MAX(H, I) + 1, sizeof(float));
		s->lin_ws_th[i] = aligned_alloc(64, CAPY_ALIGN_UP(s->lin_ws_bytes + 64, 64));
		ok = s->moe_act_th[i] && s->moe_x_th[i] && s->lin_ws_th[i];
	}
	if (!ok)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory for the engine's scratch buffers");
	s->moe_ids = calloc(T * k, sizeof(int32_t));
	s->moe_w = calloc(T * k, sizeof(float));
	s->moe_rows = calloc(T * k, sizeof(int32_t));
	s->moe_count = calloc(c->n_experts + 1, sizeof(uint64_t));
	s->moe_active = calloc(c->n_experts + 1, sizeof(int32_t));
	s->moe_first = calloc(c->n_experts + 2, sizeof(uint64_t));
	s->ple_emb = calloc(T * (c->ple_embed_dim + 1), sizeof(float));
	s->gdn_buf_floats = gdn_chunk_floats(c);
	s->gdn_buf = calloc((size_t)e->nth * s->gdn_buf_floats, sizeof(float));
	ok = s->x && s->xn && s->blk && s->out && s->inj && s->mix && s->tmp && s->big1 && s->big2 && s->big3 &&
	     s->logits_tmp && s->lin_ws && s->moe_out && s->moe_ids && s->moe_w && s->moe_rows && s->moe_count &&
	     s->moe_active && s->moe_first && s->ple_emb && s->gdn_buf;
	return ok ? 0 : capy_err_set(err, CAPY_ENOMEM, "out of memory for the engine's scratch buffers");
}

static void free_scratch(struct scratch *s, int nth)
{
	void *p[] = { s->x, s->xn, s->blk, s->out, s->inj, s->mix, s->tmp, s->big1, s->big2, s->big3,
		      s->logits_tmp, s->lin_ws, s->moe_out, s->moe_ids, s->moe_w, s->moe_rows, s->moe_count,
		      s->moe_active, s->moe_first, s->ple_emb, s->gdn_buf, s->attn_scores, s->sel };

	for (size_t i = 0; i < ARRAY_SIZE(p); i++)
		free(p[i]);
	for (int i = 0; i < nth; i++) {
		if (s->moe_act_th)
			free(s->moe_act_th[i]);
		if (s->moe_x_th)
			free(s->moe_x_th[i]);
		if (s->lin_ws_th)
			free(s->lin_ws_th[i]);
	}
	free(s->moe_act_th);
	free(s->moe_x_th);
	free(s->lin_ws_th);
}

int capy_engine_new(struct capy_engine **out, const struct capy_artifact *a,
		    const struct capy_engine_opts *opts, struct capy_err *err)
{
	struct capy_engine *e = calloc(1, sizeof(*e));
	char what[4200];
	int rc;

	if (!e)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	e->a = a;
	if (opts)
		e->opts = *opts;
	snprintf(what, sizeof(what), "'%s': model.config", a->path);
	if ((rc = capy_model_config_parse(&e->c, a->family, a->config, what, err)) < 0)
		goto fail;
	if ((rc = capy_pool_new(&e->pool, e->opts.threads, err)) < 0)
		goto fail;
	e->nth = capy_pool_size(e->pool);
	e->s.tmax = TMAX;
	if ((rc = weights_bind(e, err)) < 0 || (rc = alloc_scratch(e, err)) < 0)
		goto fail;
	e->rot = (uint64_t)((double)e->c.head_dim * e->c.partial_rotary_factor);
	e->rope_inv_freq = calloc(e->rot / 2 + 1, sizeof(float));
	if (!e->rope_inv_freq) {
		rc = capy_err_set(err, CAPY_ENOMEM, "out of memory");
		goto fail;
	}
	/* inv_freq[i] = 1 / theta^(2i / rot), each step in float32 as transformers computes it. */
	for (uint64_t i = 0; i < e->rot / 2; i++) {
		float ex = (float)(2 * i) / (float)e->rot;
		e->rope_inv_freq[i] = 1.0f / powf((float)e->c.rope_theta, ex);
	}
	*out = e;
	return 0;
fail:
	capy_engine_free(e);
	return rc;
}

void capy_engine_free(struct capy_engine *e)
{
	if (!e)
		return;
	weights_release(e);
	free_scratch(&e->s, e->nth);
	free(e->rope_inv_freq);
	capy_pool_free(e->pool);
	free(e);
}

const struct capy_model_config *capy_engine_config(const struct capy_engine *e)
{
	return &e->c;
}

int capy_engine_threads(const struct capy_engine *e)
{
	return e->nth;
}

static uint64_t linear_bytes(const struct capy_linear *l)
{
	if (l->dtype == CAPY_DT_NVFP4) {
		struct capy_nvfp4_layout lay;
		capy_nvfp4_layout(l->n, l->k, l->nparts ? l->nparts : 1, &lay);
		return lay.slice_bytes;
	}
	return l->n * l->k * capy_dtype_size(l->dtype);
}

uint64_t capy_engine_weight_bytes(const struct capy_engine *e)
{
	const struct capy_model_config *c = &e->c;
	uint64_t b = linear_bytes(&e->w.lm_head);

	for (uint64_t i = 0; i < c->n_layers; i++) {
		const struct layer_w *l = &e->w.layers[i];
		if (l->type == CAPY_LAYER_LINEAR)
			b += linear_bytes(&l->gdn.qkv) + linear_bytes(&l->gdn.z) + linear_bytes(&l->gdn.b) +
			     linear_bytes(&l->gdn.a) + linear_bytes(&l->gdn.out);
		else
			b += linear_bytes(&l->attn.q) + linear_bytes(&l->attn.k) + linear_bytes(&l->attn.v) +
			     linear_bytes(&l->attn.o);
		if (l->moe)
			b += linear_bytes(&l->moe_w.router) + c->n_experts_per_tok *
				(linear_bytes(&l->moe_w.gate_up[0]) + linear_bytes(&l->moe_w.down[0])) +
			     linear_bytes(&l->moe_w.shared.gate_up) + linear_bytes(&l->moe_w.shared.down);
		else
			b += linear_bytes(&l->mlp.gate_up) + linear_bytes(&l->mlp.down);
	}
	return b;
}

static void embed(const struct capy_engine *e, const int32_t *ids, uint64_t T, float *x)
{
	const struct capy_model_config *c = &e->c;
	uint64_t H = c->hidden_size, hc = c->family == CAPY_FAMILY_QWEN4_EXP ? c->hc_count : 1;
	size_t es = capy_dtype_size(e->w.embed_dtype);

	for (uint64_t t = 0; t < T; t++) {
		float *row = x + t * H * hc;
		to_f32((const uint8_t *)e->w.embed + (uint64_t)ids[t] * H * es, e->w.embed_dtype, H, row);
		for (uint64_t s = 1; s < hc; s++)
			memcpy(row + s * H, row, H * sizeof(float));
	}
}

static void add_injected(float *X, const float *out, const float *inj, uint64_t T, uint64_t H, uint64_t hc)
{
	for (uint64_t t = 0; t < T; t++)
		for (uint64_t s = 0; s < hc; s++)
			for (uint64_t i = 0; i < H; i++)
				X[(t * hc + s) * H + i] += out[t * H + i] * inj[t * hc + s];
}

static int mixer(struct capy_engine *e, struct capy_seq *s, const struct layer_w *l, const float *in, uint64_t T,
		 float *out, struct capy_err *err)
{
	if (l->type == CAPY_LAYER_LINEAR) {
		gdn_forward(e, s, l, in, T, out);
		return 0;
	}
	return attention_forward(e, s, l, in, T, out, err);
}

static void ffn(struct capy_engine *e, const struct layer_w *l, const float *in, uint64_t T, float *out)
{
	if (l->moe)
		moe_forward(e, &l->moe_w, in, T, out);
	else
		mlp_forward(e, &l->mlp, in, T, out, e->s.big1);
}

static int forward_chunk(struct capy_engine *e, struct capy_seq *s, const int32_t *ids, uint64_t T,
			 float *logits, bool all_logits, bool last_chunk, struct capy_err *err)
{
	const struct capy_model_config *c = &e->c;
	struct scratch *sc = &e->s;
	bool q4 = c->family == CAPY_FAMILY_QWEN4_EXP;
	uint64_t H = c->hidden_size, hc = q4 ? c->hc_count : 1, V = c->vocab_size;
	float eps = (float)c->rms_norm_eps;
	int rc;

	if ((rc = seq_reserve(s, s->len + T, err)) < 0)
		return rc;
	embed(e, ids, T, sc->x);
	for (uint64_t i = 0; i < c->n_layers; i++) {
		const struct layer_w *l = &e->w.layers[i];
		if (q4) {
			if (l->has_ple && (rc = ple_forward(e, s, l, ids, sc->x, T, err)) < 0)
				return rc;
			hc_mix(e, &l->hc_attn, sc->x, T, sc->blk, sc->inj, sc->xn);
			if ((rc = mixer(e, s, l, sc->blk, T, sc->out, err)) < 0)
				return rc;
			add_injected(sc->x, sc->out, sc->inj, T, H, hc);
			hc_mix(e, &l->hc_mlp, sc->x, T, sc->blk, sc->inj, sc->xn);
			ffn(e, l, sc->blk, T, sc->out);
			add_injected(sc->x, sc->out, sc->inj, T, H, hc);
			continue;
		}
		for (uint64_t t = 0; t < T; t++)
			rmsnorm_1p(sc->x + t * H, l->in_norm, sc->xn + t * H, H, H, eps);
		if ((rc = mixer(e, s, l, sc->xn, T, sc->out, err)) < 0)
			return rc;
		for (uint64_t j = 0; j < T * H; j++)
			sc->x[j] += sc->out[j];
		for (uint64_t t = 0; t < T; t++)
			rmsnorm_1p(sc->x + t * H, l->post_norm, sc->xn + t * H, H, H, eps);
		ffn(e, l, sc->xn, T, sc->out);
		for (uint64_t j = 0; j < T * H; j++)
			sc->x[j] += sc->out[j];
	}
	s->len += T;
	if (!all_logits && !last_chunk)
		return 0;
	/* The final hidden state of the tokens whose logits are wanted, into blk. */
	if (q4)
		hc_mix(e, &e->w.hc_final, sc->x, T, sc->blk, NULL, sc->xn);
	else
		for (uint64_t t = 0; t < T; t++)
			rmsnorm_1p(sc->x + t * H, e->w.final_norm, sc->blk + t * H, H, H, eps);
	if (all_logits)
		par_linear(e, &e->w.lm_head, sc->blk, T, logits);
	else
		par_linear(e, &e->w.lm_head, sc->blk + (T - 1) * H, 1, logits);
	(void)V;
	return 0;
}

int capy_engine_forward(struct capy_engine *e, struct capy_seq *s, const int32_t *tokens, uint64_t n,
			float *logits, bool all_logits, struct capy_err *err)
{
	uint64_t V = e->c.vocab_size;
	int rc;

	if (!n)
		return capy_err_set(err, CAPY_EINVAL, "no tokens to run");
	for (uint64_t i = 0; i < n; i++)
		if (tokens[i] < 0 || (uint64_t)tokens[i] >= V)
			return capy_err_set(err, CAPY_EINVAL, "token id %" PRId32 " at position %" PRIu64
					    " is outside the vocabulary [0, %" PRIu64 ")", tokens[i], i, V);
	for (uint64_t done = 0; done < n;) {
		uint64_t T = CAPY_MIN(e->s.tmax, n - done);
		rc = forward_chunk(e, s, tokens + done, T, all_logits ? logits + done * V : logits, all_logits,
				   done + T == n, err);
		if (rc < 0)
			return rc;
		done += T;
	}
	return 0;
}
