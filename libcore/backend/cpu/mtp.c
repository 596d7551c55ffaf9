/* mtp.c - the MTP head on the CPU (engine.h capy_engine_mtp): per row,
 *
 *	u = fc([norm_emb(embed(token)) | norm_hidden(hidden)])
 *	g = norm(layer(u))                                       qwen3_5, qwen3_5_moe, qwen3_next
 *	g = norm(mixer(layer(hc_count copies of u)))             qwen4_exp (capy's layout, docs/spec.md)
 *	logits = lm_head(g)
 *
 * where layer is the head's full-attention (qwen4_exp: QSA) decoder layer, run by the same code
 * as the main model's (cpu_layer_forward, cpu_layer_hc) on a batch of one item, so its attention
 * reads and writes the head's own rows (kv_slot after the main layers', QSA's keys and block
 * summaries with them) of the sequence's pages at the rows' positions. qwen4_exp's streams
 * start as the main model's do from its embedding, and are collapsed by the head's own mixer as
 * the model's are by its final one. The linears are batch-invariant, so a row's result does not
 * depend on how many rows share the call. */
#include "cpu-impl.h"

int cpu_mtp(struct capy_engine *core, const struct capy_mtp_rows *r, struct capy_err *err)
{
	struct cpu_engine *e = core->be;
	const struct capy_mtp_w *m = &e->w.mtp;
	struct scratch *sc = &e->s;
	uint64_t T = r->n, H = e->c.hidden_size, V = e->c.vocab_size, W = r->ids ? r->n_ids : V;
	float eps = (float)e->c.rms_norm_eps, *g = sc->blk;
	bool q4 = e->c.family == CAPY_FAMILY_QWEN4_EXP;
	struct capy_batch_item item = { .seq = r->seq, .tokens = r->tokens, .n = T, .t0 = 0 };
	struct capy_batch b = { &item, 1, T };
	int rc;

	if (!m->present)
		return capy_err_set(err, CAPY_EINVAL, "the engine has no MTP head bound");
	for (uint64_t t = 0; t < T; t++) {
		sc->pos[t] = r->pos + t;
		sc->item_of[t] = 0;
		sc->ids[t] = r->tokens[t];
	}
	if ((rc = cpu_attn_reserve(e, r->pos + T, err)) < 0)
		return rc;
	cpu_embed(e, sc->ids, T, sc->x); /* qwen4_exp: each row already in hc_count streams; the first is read */
	for (uint64_t t = 0; t < T; t++) { /* [embedding | hidden], the order of vLLM's glue */
		rmsnorm_1p(sc->x + t * H * (q4 ? e->c.hc_count : 1), m->norm_emb, sc->mtp_cat + t * 2 * H, H, H, eps);
		rmsnorm_1p(r->hidden + t * H, m->norm_hidden, sc->mtp_cat + t * 2 * H + H, H, H, eps);
	}
	e->batch = &b;
	if (q4) {
		par_linear(e, &m->fc, sc->mtp_cat, T, sc->blk);
		cpu_streams(e, sc->blk, T, sc->x);
		rc = cpu_layer_hc(e, &m->layer, T, err);
	} else {
		par_linear(e, &m->fc, sc->mtp_cat, T, sc->x);
		rc = cpu_layer_forward(e, &m->layer, T, err);
	}
	e->batch = NULL;
	if (rc < 0)
		return rc;
	if (q4)
		hc_mix(e, &m->mixer, sc->x, T, g, NULL, sc->xn); /* g is blk: the layer is done with it */
	for (uint64_t t = 0; t < T; t++)
		rmsnorm_1p(q4 ? g + t * H : sc->x + t * H, m->norm, g + t * H, H, H, eps);
	if (r->g)
		memcpy(r->g, g + (T - 1) * H, H * sizeof(float));
	if (!r->logits)
		return 0;
	for (uint64_t t = r->all_logits ? 0 : T - 1, o = 0; t < T; t++, o++) {
		float *dst = r->logits + o * W;
		if (!r->ids) {
			par_linear(e, &e->w.lm_head, g + t * H, 1, dst);
			continue;
		}
		par_linear_ids(e, &e->w.lm_head, g + t * H, r->ids, r->n_ids, sc->mtp_row);
		for (uint64_t i = 0; i < r->n_ids; i++)
			dst[i] = sc->mtp_row[r->ids[i]];
	}
	return 0;
}
