/* forward.c - the CPU backend's step: the tokens of every sequence of a batch through every
 * layer, embedding to logits. Token rows of all sequences are stacked, so each linear runs
 * once over all of them (the weights are read once per step); attention, the Gated DeltaNet
 * recurrence, conv windows and PLE run per sequence on its rows.
 *
 *	qwen3_5, qwen3_5_moe, qwen3_next:
 *		x += mixer(RMSNorm(x)); x += mlp_or_moe(RMSNorm(x)); logits = lm_head(RMSNorm(x))
 *	qwen4_exp (streams X, hc copies of the embedding):
 *		X += PLE(X) (some layers); X += mixer(hc_mix(X)) (x) inj; X += moe(hc_mix(X)) (x) inj;
 *		logits = lm_head(hc_mix_final(X))
 */
#include "cpu-impl.h"

#include <math.h>

void cpu_streams(const struct cpu_engine *e, const float *u, uint64_t T, float *X)
{
	uint64_t H = e->c.hidden_size, hc = e->c.hc_count;

	for (uint64_t t = T; t-- > 0;) /* backwards: u may be X's first rows */
		for (uint64_t s = hc; s-- > 0;)
			memmove(X + (t * hc + s) * H, u + t * H, H * sizeof(float));
}

void cpu_embed(const struct cpu_engine *e, const int32_t *ids, uint64_t T, float *x)
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

static int mixer(struct cpu_engine *e, const struct capy_layer_w *l, const float *in, uint64_t T, float *out,
		 struct capy_err *err)
{
	if (l->type == CAPY_LAYER_LINEAR) {
		gdn_forward(e, l, in, T, out);
		return 0;
	}
	return attention_forward(e, l, in, T, out, err);
}

static void ffn(struct cpu_engine *e, const struct capy_layer_w *l, const float *in, uint64_t T, float *out)
{
	if (l->moe)
		moe_forward(e, &l->moe_w, in, T, out);
	else
		mlp_forward(e, &l->mlp, in, T, out, e->s.big1);
}

/* Logits of the rows that want them: the final norm (or mixer) over just those rows,
 * gathered (every row's result is the same as if all rows had gone through), then lm_head:
 * once over all the last-token rows of the step (its weights are read once), and once per
 * item that wants the logits of all its tokens. */
static int logits_out(struct cpu_engine *e, const struct capy_batch *b, struct capy_err *err)
{
	const struct capy_model_config *c = &e->c;
	struct scratch *sc = &e->s;
	bool q4 = c->family == CAPY_FAMILY_QWEN4_EXP;
	uint64_t H = c->hidden_size, hh = H * (q4 ? c->hc_count : 1), V = c->vocab_size, m = 0, n_last = 0;
	float eps = (float)c->rms_norm_eps, *rows = sc->xn, *hid = sc->blk;
	const struct capy_batch_item *only = NULL;

	/* Last-token rows first, then the all-logits items' rows. */
	for (int pass = 0; pass < 2; pass++)
		for (size_t i = 0; i < b->n_items; i++) {
			const struct capy_batch_item *it = &b->items[i];
			if (!it->logits || it->all_logits != (pass == 1))
				continue;
			for (uint64_t t = pass ? 0 : it->n - 1; t < it->n; t++)
				memmove(rows + (m++) * hh, sc->x + (it->t0 + t) * hh, hh * sizeof(float));
			if (!pass) {
				n_last++;
				only = it;
			}
		}
	if (!m)
		return 0;
	if (q4)
		hc_mix(e, &e->w.hc_final, rows, m, hid, NULL, sc->tmp);
	else
		for (uint64_t t = 0; t < m; t++)
			rmsnorm_1p(rows + t * H, e->w.final_norm, hid + t * H, H, H, eps);
	if (n_last == 1) {
		par_linear(e, &e->w.lm_head, hid, 1, only->logits);
	} else if (n_last > 1) {
		if (n_last > sc->logits_rows_cap) {
			float *p = realloc(sc->logits_rows, n_last * V * sizeof(float));
			if (!p)
				return capy_err_set(err, CAPY_ENOMEM, "out of memory for the logits of %" PRIu64 " sequences",
						    n_last);
			sc->logits_rows = p;
			sc->logits_rows_cap = n_last;
		}
		par_linear(e, &e->w.lm_head, hid, n_last, sc->logits_rows);
		m = 0;
		for (size_t i = 0; i < b->n_items; i++)
			if (b->items[i].logits && !b->items[i].all_logits)
				memcpy(b->items[i].logits, sc->logits_rows + (m++) * V, V * sizeof(float));
	}
	m = n_last;
	for (size_t i = 0; i < b->n_items; i++) {
		const struct capy_batch_item *it = &b->items[i];
		if (!it->logits || !it->all_logits)
			continue;
		par_linear(e, &e->w.lm_head, hid + m * H, it->n, it->logits);
		m += it->n;
	}
	return 0;
}

int cpu_layer_forward(struct cpu_engine *e, const struct capy_layer_w *l, uint64_t T, struct capy_err *err)
{
	struct scratch *sc = &e->s;
	uint64_t H = e->c.hidden_size;
	float eps = (float)e->c.rms_norm_eps;
	int rc;

	for (uint64_t t = 0; t < T; t++)
		rmsnorm_1p(sc->x + t * H, l->in_norm, sc->xn + t * H, H, H, eps);
	if ((rc = mixer(e, l, sc->xn, T, sc->out, err)) < 0)
		return rc;
	for (uint64_t j = 0; j < T * H; j++)
		sc->x[j] += sc->out[j];
	for (uint64_t t = 0; t < T; t++)
		rmsnorm_1p(sc->x + t * H, l->post_norm, sc->xn + t * H, H, H, eps);
	ffn(e, l, sc->xn, T, sc->out);
	for (uint64_t j = 0; j < T * H; j++)
		sc->x[j] += sc->out[j];
	return 0;
}

int cpu_layer_hc(struct cpu_engine *e, const struct capy_layer_w *l, uint64_t T, struct capy_err *err)
{
	struct scratch *sc = &e->s;
	uint64_t H = e->c.hidden_size, hc = e->c.hc_count;
	int rc;

	if (l->has_ple && (rc = ple_forward(e, l, sc->x, T, err)) < 0)
		return rc;
	hc_mix(e, &l->hc_attn, sc->x, T, sc->blk, sc->inj, sc->xn);
	if ((rc = mixer(e, l, sc->blk, T, sc->out, err)) < 0)
		return rc;
	add_injected(sc->x, sc->out, sc->inj, T, H, hc);
	hc_mix(e, &l->hc_mlp, sc->x, T, sc->blk, sc->inj, sc->xn);
	ffn(e, l, sc->blk, T, sc->out);
	add_injected(sc->x, sc->out, sc->inj, T, H, hc);
	return 0;
}

/* The MTP head's input of the items that ask: what lm_head reads of their rows (the final
 * norm, or qwen4_exp's final mixer), the same per-row arithmetic as logits_out's. */
static void hidden_out(struct cpu_engine *e, const struct capy_batch *b)
{
	const struct capy_model_config *c = &e->c;
	struct scratch *sc = &e->s;
	bool q4 = c->family == CAPY_FAMILY_QWEN4_EXP;
	uint64_t H = c->hidden_size, hh = H * (q4 ? c->hc_count : 1);

	for (size_t i = 0; i < b->n_items; i++) {
		const struct capy_batch_item *it = &b->items[i];
		if (!it->hidden)
			continue;
		if (q4) {
			hc_mix(e, &e->w.hc_final, sc->x + it->t0 * hh, it->n, it->hidden, NULL, sc->xn);
			continue;
		}
		for (uint64_t t = 0; t < it->n; t++)
			rmsnorm_1p(sc->x + (it->t0 + t) * H, e->w.final_norm, it->hidden + t * H, H, H,
				   (float)c->rms_norm_eps);
	}
}

int cpu_step(struct capy_engine *core, const struct capy_batch *b, struct capy_err *err)
{
	struct cpu_engine *e = core->be;
	const struct capy_model_config *c = &e->c;
	struct scratch *sc = &e->s;
	bool q4 = c->family == CAPY_FAMILY_QWEN4_EXP;
	uint64_t T = b->n_tokens, ctx = 0;
	int rc;

	for (size_t i = 0; i < b->n_items; i++) {
		const struct capy_batch_item *it = &b->items[i];
		for (uint64_t t = 0; t < it->n; t++) {
			sc->pos[it->t0 + t] = it->seq->len + t;
			sc->item_of[it->t0 + t] = (uint32_t)i;
			sc->ids[it->t0 + t] = it->tokens[t];
		}
		ctx = CAPY_MAX(ctx, it->seq->len + it->n);
	}
	if ((rc = cpu_attn_reserve(e, ctx, err)) < 0)
		return rc;
	e->batch = b;
	cpu_embed(e, sc->ids, T, sc->x);
	for (uint64_t i = 0; i < c->n_layers; i++) {
		const struct capy_layer_w *l = &e->w.layers[i];
		if ((rc = q4 ? cpu_layer_hc(e, l, T, err) : cpu_layer_forward(e, l, T, err)) < 0)
			return rc;
	}
	hidden_out(e, b);
	rc = logits_out(e, b, err);
	e->batch = NULL;
	return rc;
}
