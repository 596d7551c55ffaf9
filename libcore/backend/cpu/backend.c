/* backend.c - the CPU backend: creation (binding the weights, scratch sized for a step),
 * its table of operations, and the weight bytes a decode step reads. */
#include "cpu-impl.h"

#include <math.h>

static void ws_need(const struct capy_linear *l, void *p)
{
	struct cpu_engine *e = p;
	size_t need = capy_linear_input_bytes(l, e->s.tmax);

	if (need > e->s.lin_ws_bytes)
		e->s.lin_ws_bytes = need;
}

static int alloc_scratch(struct cpu_engine *e, struct capy_err *err)
{
	const struct capy_model_config *c = &e->c;
	struct scratch *s = &e->s;
	uint64_t T = s->tmax, H = c->hidden_size, hh = H * (c->hc_count ? c->hc_count : 1);
	uint64_t k = c->n_experts_per_tok ? c->n_experts_per_tok : 1, I = c->moe_intermediate_size;
	bool ok;

	e->wide = capy_widest_row(c);
	/* The activation workspace must fit the largest input any matrix gets. */
	capy_weights_each_linear(&e->w, c, ws_need, e);
	capy_weights_each_mtp_linear(&e->w, c, ws_need, e);
	if (e->w.mtp.present) {
		s->mtp_cat = calloc(T * 2 * H, sizeof(float));
		s->mtp_row = calloc(c->vocab_size, sizeof(float));
		if (!s->mtp_cat || !s->mtp_row)
			return capy_err_set(err, CAPY_ENOMEM, "out of memory for the MTP head's scratch");
	}
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
	s->ple_hist = calloc(16 + T, sizeof(int32_t));
	s->pos = calloc(T, sizeof(uint64_t));
	s->item_of = calloc(T, sizeof(uint32_t));
	s->ids = calloc(T, sizeof(int32_t));
	s->gdn_buf_floats = gdn_chunk_floats(c);
	s->gdn_buf = calloc((size_t)e->nth * s->gdn_buf_floats, sizeof(float));
	ok = s->x && s->xn && s->blk && s->out && s->inj && s->mix && s->tmp && s->big1 && s->big2 && s->big3 &&
	     s->logits_tmp && s->lin_ws && s->moe_out && s->moe_ids && s->moe_w && s->moe_rows && s->moe_count &&
	     s->moe_active && s->moe_first && s->ple_emb && s->ple_hist && s->pos && s->item_of && s->ids &&
	     s->gdn_buf;
	return ok ? 0 : capy_err_set(err, CAPY_ENOMEM, "out of memory for the engine's scratch buffers");
}

static void free_scratch(struct scratch *s, int nth)
{
	void *p[] = { s->x, s->xn, s->blk, s->out, s->inj, s->mix, s->tmp, s->big1, s->big2, s->big3,
		      s->logits_tmp, s->lin_ws, s->moe_out, s->moe_ids, s->moe_w, s->moe_rows, s->moe_count,
		      s->moe_active, s->moe_first, s->ple_emb, s->ple_hist, s->pos, s->item_of, s->ids,
		      s->gdn_buf, s->attn_scores, s->sel, s->logits_rows, s->mtp_cat, s->mtp_row };

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
	free(s->tp_x);
	for (int r = 0; r < CAPY_TP_MAX_RANKS; r++)
		free(s->tp_part[r]);
}

static void cpu_close(struct capy_engine *core);


static int cpu_open(struct capy_engine *core, struct capy_err *err)
{
	struct cpu_engine *e = calloc(1, sizeof(*e));
	int rc;

	if (!e)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	core->be = e;
	e->core = core;
	e->a = core->a;
	e->c = core->c;
	e->opts = core->opts;
	if ((rc = capy_pool_new(&e->pool, e->opts.threads, err)) < 0)
		goto fail;
	e->nth = capy_pool_size(e->pool);
	e->s.tmax = core->step_tokens;
	if ((rc = capy_weights_bind(&e->w, e->a, &e->c, err)) < 0 ||
	    (e->opts.mtp && (rc = capy_weights_bind_mtp(&e->w, e->a, &e->c, err)) < 0) ||
	    (rc = alloc_scratch(e, err)) < 0 || (rc = cpu_pages_layout(e, err)) < 0 || (rc = tp_open(e, err)) < 0)
		goto fail;
	e->rot = capy_rope_dims(&e->c);
	e->rope_inv_freq = calloc(e->rot / 2 + 1, sizeof(float));
	if (!e->rope_inv_freq) {
		rc = capy_err_set(err, CAPY_ENOMEM, "out of memory");
		goto fail;
	}
	capy_rope_inv_freq(&e->c, e->rope_inv_freq);
	return 0;
fail:
	cpu_close(core);
	return rc;
}

static void cpu_close(struct capy_engine *core)
{
	struct cpu_engine *e = core->be;

	if (!e)
		return;
	capy_weights_release(&e->w);
	free_scratch(&e->s, e->nth);
	cpu_pages_release(e);
	free(e->rope_inv_freq);
	capy_pool_free(e->pool);
	free(e);
	core->be = NULL;
}

static int cpu_threads(const struct capy_engine *core)
{
	return ((const struct cpu_engine *)core->be)->nth;
}

static uint64_t cpu_weight_bytes(const struct capy_engine *core)
{
	const struct cpu_engine *e = core->be;

	return capy_weights_decode_bytes(&e->w, &e->c);
}

const struct capy_backend_ops capy_backend_cpu = {
	.name = "cpu",
	.open = cpu_open,
	.close = cpu_close,
	.threads = cpu_threads,
	.weight_bytes = cpu_weight_bytes,
	.page_bytes = cpu_page_bytes,
	.pages_reserve = cpu_pages_reserve,
	.pages_release = cpu_pages_give_back,
	.tp = true,
	.page_copy = cpu_page_copy,
	.state_bytes = cpu_state_bytes,
	.state_new = cpu_state_new,
	.state_copy = cpu_state_copy,
	.state_free = cpu_state_free,
	.page_read = cpu_page_read,
	.page_write = cpu_page_write,
	.state_io_bytes = cpu_state_io_bytes,
	.state_read = cpu_state_read,
	.state_write = cpu_state_write,
	.step = cpu_step,
	.keeps_states = true,
	.mtp = cpu_mtp,
};
