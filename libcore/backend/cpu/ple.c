/* ple.c - qwen4_exp Per-Layer Embedding: hashed n-gram embeddings injected into every
 * hyper-connection stream of a layer.
 *
 * For each token, the n-grams ending at it (orders 2..ngram_size, not crossing an EOS,
 * padded with EOS at the start) are hashed per head: (t0 m0) ^ (t1 m1) ^ ... in wrapping
 * int64, modulo the head's prime vocabulary, plus the head's offset into the layer's
 * table. The rows (read from the mapped artifact, never loaded whole) are concatenated
 * to one embedding e. Then, per stream s:
 *	gate_s = <RMSNorm(key_proj e)_s, RMSNorm(X)_s> / sqrt(H);  gate = sign * sqrt(max(|gate|, 1e-6))
 *	v_s    = sigmoid(gate_s) value_proj(e)
 *	X_s   += v_s + silu(dilated causal depthwise conv(RMSNorm(v)))_s
 * The token context (previous ngram_size - 1 ids) and the conv window are per-sequence state.
 */
#include "cpu-impl.h"

#include <math.h>

/* The n-gram embeddings of one sequence's rows, from its token context; the context moves on. */
static int ngram_rows(struct cpu_engine *e, const struct capy_ple_w *pl, struct ple_state *st, const int32_t *ids,
		      uint64_t T, float *emb, struct capy_err *err)
{
	const struct capy_model_config *c = &e->c;
	uint64_t ctx = c->ngram_size - 1, heads = ctx * c->heads_per_ngram, hd = pl->hd, dim = c->ple_embed_dim;
	int32_t *hist = e->s.ple_hist;
	uint64_t rows[64];

	memcpy(hist, st->ctx, ctx * sizeof(int32_t));
	memcpy(hist + ctx, ids, T * sizeof(int32_t));
	for (uint64_t t = 0; t < T; t++) {
		capy_ple_ngram_rows(c, pl, hist, ctx + t, rows);
		for (uint64_t h = 0; h < heads; h++) {
			if (rows[h] >= pl->rows)
				return capy_err_set(err, CAPY_EFORMAT, "PLE row %" PRIu64 " beyond the table's %" PRIu64,
						    rows[h], pl->rows);
			capy_ple_row(pl, rows[h], emb + t * dim + h * hd);
		}
	}
	memcpy(st->ctx, hist + T, ctx * sizeof(int32_t));
	return 0;
}

/* keep_states: each token's context (the last ngram_size - 1 ids of [context | ids 0..t])
 * into the kept state of t < T - 1, before the sequence's own context moves on. */
static void keep_contexts(const struct cpu_engine *e, void *const *keep, int slot, const struct ple_state *st,
			  const int32_t *ids, uint64_t T)
{
	uint64_t ctx = e->c.ngram_size - 1;

	for (uint64_t t = 0; t + 1 < T; t++) {
		int32_t *k = ((struct cpu_state *)keep[t])->ple[slot].ctx;
		for (uint64_t i = 0; i < ctx; i++) {
			int64_t src = (int64_t)t + 1 - (int64_t)ctx + (int64_t)i;
			k[i] = src >= 0 ? ids[src] : st->ctx[src + (int64_t)ctx];
		}
	}
}

/* ... and each token's conv window (the last (K - 1) dil inputs of [window | rows 0..t]),
 * before the sequence's own window moves on. */
static void keep_windows(const struct cpu_engine *e, void *const *keep, int slot, const struct ple_state *st,
			 const float *gvn, uint64_t T)
{
	const struct capy_model_config *c = &e->c;
	uint64_t hh = c->hc_count * c->hidden_size, win = (c->ple_conv_kernel - 1) * c->ngram_size;

	for (uint64_t t = 0; t + 1 < T; t++) {
		float *k = ((struct cpu_state *)keep[t])->ple[slot].conv;
		for (uint64_t i = 0; i < win; i++) {
			int64_t src = (int64_t)t + 1 - (int64_t)win + (int64_t)i;
			const float *from = src >= 0 ? gvn + (uint64_t)src * hh : st->conv + (uint64_t)(src + (int64_t)win) * hh;
			memcpy(k + i * hh, from, hh * sizeof(float));
		}
	}
}

/* Dilated causal depthwise conv of one sequence's rows over [window | new normed values],
 * silu, added with gv into X; the window keeps the last (K - 1) * dil inputs. */
static void conv_rows(const struct cpu_engine *e, const struct capy_ple_w *pl, struct ple_state *st, const float *gv,
		      const float *gvn, uint64_t T, float *X)
{
	const struct capy_model_config *c = &e->c;
	uint64_t hh = c->hc_count * c->hidden_size, K = c->ple_conv_kernel, dil = c->ngram_size, win = (K - 1) * dil;

	for (uint64_t t = 0; t < T; t++) {
		for (uint64_t ch = 0; ch < hh; ch++) {
			float acc = 0;
			for (uint64_t j = 0; j < K; j++) {
				int64_t src = (int64_t)t - (int64_t)((K - 1 - j) * dil);
				float x = src >= 0 ? gvn[(uint64_t)src * hh + ch] : st->conv[(uint64_t)(src + (int64_t)win) * hh + ch];
				acc += pl->conv[ch * K + j] * x;
			}
			X[t * hh + ch] += gv[t * hh + ch] + silu(acc);
		}
	}
	for (uint64_t i = 0; i < win; i++) {
		int64_t src = (int64_t)T - (int64_t)win + (int64_t)i;
		if (src >= 0)
			memcpy(st->conv + i * hh, gvn + (uint64_t)src * hh, hh * sizeof(float));
		else
			memmove(st->conv + i * hh, st->conv + (uint64_t)(src + (int64_t)win) * hh, hh * sizeof(float));
	}
}

int ple_forward(struct cpu_engine *e, const struct capy_layer_w *l, float *X, uint64_t T, struct capy_err *err)
{
	const struct capy_model_config *c = &e->c;
	const struct capy_batch *bt = e->batch;
	const struct capy_ple_w *pl = &l->ple;
	uint64_t H = c->hidden_size, hc = c->hc_count, hh = hc * H, dim = c->ple_embed_dim;
	float *emb = e->s.ple_emb, *key = e->s.big1, *val = e->s.big2, *q = e->s.big3, *gv = e->s.tmp;
	float *gvn = e->s.mix;
	const float sq = (float)sqrt((double)H);
	float eps = (float)c->rms_norm_eps;
	int rc;

	for (size_t i = 0; i < bt->n_items; i++) {
		const struct capy_batch_item *it = &bt->items[i];
		struct ple_state *st = &seq_state(it->seq)->ple[l->ple_slot];
		if (it->states)
			keep_contexts(e, it->states, l->ple_slot, st, it->tokens, it->n);
		if ((rc = ngram_rows(e, pl, st, it->tokens, it->n, emb + it->t0 * dim, err)) < 0)
			return rc;
	}
	par_linear(e, &pl->key, emb, T, key);
	par_linear(e, &pl->value, emb, T, val);
	for (uint64_t t = 0; t < T; t++) {
		float *k = key + t * hh, *qq = q + t * hh;
		rmsnorm_1p(k, pl->norm_key, k, hh, H, eps);
		rmsnorm_1p(X + t * hh, pl->norm_query, qq, hh, H, eps);
		for (uint64_t st_i = 0; st_i < hc; st_i++) {
			float g = 0, sg;
			for (uint64_t i = 0; i < H; i++)
				g += k[st_i * H + i] * qq[st_i * H + i];
			g = g / sq;
			g = sqrtf(fmaxf(fabsf(g), 1e-6f)) * (g > 0 ? 1.0f : g < 0 ? -1.0f : 0.0f);
			sg = sigmoidf_(g);
			for (uint64_t i = 0; i < H; i++)
				gv[t * hh + st_i * H + i] = sg * val[t * H + i];
		}
		rmsnorm_1p(gv + t * hh, pl->norm_conv, gvn + t * hh, hh, H, eps);
	}
	for (size_t i = 0; i < bt->n_items; i++) {
		const struct capy_batch_item *it = &bt->items[i];
		struct ple_state *st = &seq_state(it->seq)->ple[l->ple_slot];
		if (it->states)
			keep_windows(e, it->states, l->ple_slot, st, gvn + it->t0 * hh, it->n);
		conv_rows(e, pl, st, gv + it->t0 * hh, gvn + it->t0 * hh, it->n, X + it->t0 * hh);
	}
	return 0;
}
