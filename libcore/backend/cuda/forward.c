/* forward.c - the CUDA backend's step: the step's metadata staged and uploaded at once, the
 * layers' kernels enqueued on one stream in the CPU backend's order (libcore/backend/cpu/
 * forward.c), then the logits of the rows that want them, in chunks, copied back. The copy
 * of the logits is the step's only synchronization. */
#include "cuda-impl.h"
#include "../../quant/floats.h"
#include "../../sample/sample.h"

#include <stdlib.h>
#include <string.h>

/* Carve n bytes (8-aligned) at *off of the metadata block; the device address of the same
 * place is returned through dev. */
static void *carve(struct cuda_engine *e, size_t *off, size_t n, void **dev)
{
	size_t o = CAPY_ALIGN_UP(*off, 8);

	*off = o + n;
	*dev = e->s.meta_dev + o;
	return e->s.meta_host + o;
}

static size_t meta_need(const struct capy_batch *b)
{
	size_t n = b->n_tokens * (4 + 8 + 4 + 4 + 1 + 2 * 8) + b->n_items * (3 * 8 + 4 + 2 * 8) + 64 * 8;

	for (size_t i = 0; i < b->n_items; i++)
		n += (b->items[i].seq->n_pages + 1) * 4;
	return n;
}

static int meta_reserve(struct cuda_engine *e, size_t need, struct capy_err *err)
{
	struct cu_scratch *s = &e->s;
	size_t cap = s->meta_bytes ? s->meta_bytes : 1 << 16;
	cudaError_t rc;

	if (need <= s->meta_bytes)
		return 0;
	while (cap < need)
		cap *= 2;
	if ((rc = cudaStreamSynchronize(e->stream)) != cudaSuccess)
		return cu_err(err, rc, "the previous step");
	cudaFree(s->meta_dev);
	cudaFreeHost(s->meta_host);
	e->gen++;
	s->meta_dev = s->meta_host = NULL;
	s->meta_bytes = 0;
	if ((rc = cudaMalloc((void **)&s->meta_dev, cap)) != cudaSuccess ||
	    (rc = cudaMallocHost((void **)&s->meta_host, cap)) != cudaSuccess)
		return cu_err(err, rc, "allocating the step's metadata");
	s->meta_bytes = cap;
	return 0;
}

/* The PLE part of a state's device block (after every GDN slot), as ck_step.ple_state wants it. */
static float *ple_part(const struct cuda_engine *e, const struct cu_state *cs)
{
	return cs->dev ? cs->dev + (uint64_t)e->hw.n_gdn * e->gdn_floats : NULL;
}

/* Whether an item keeps states after some of its rows (keep_states, with more than one row). */
static bool item_keeps(const struct capy_batch_item *it)
{
	return it->states && it->n > 1;
}

/* keep_states: per row of the step, the GDN and PLE parts of the state block that receives
 * its sequence's state after it (ck_step.gdn_keep, ple_keep); NULL for the other rows. Only
 * for steps that keep some, so decode steps (and their captured graphs) carry none. */
static void stage_keep(struct cuda_engine *e, const struct capy_batch *b, size_t *off)
{
	struct ck_step *st = &e->step;
	bool any = false;
	void *d;

	for (size_t i = 0; i < b->n_items; i++)
		any |= item_keeps(&b->items[i]);
	if (!any)
		return;
	float **gdn = carve(e, off, b->n_tokens * sizeof(float *), &d);
	st->gdn_keep = d;
	float **ple = carve(e, off, b->n_tokens * sizeof(float *), &d);
	st->ple_keep = d;
	memset(gdn, 0, b->n_tokens * sizeof(float *));
	memset(ple, 0, b->n_tokens * sizeof(float *));
	for (size_t i = 0; i < b->n_items; i++) {
		const struct capy_batch_item *it = &b->items[i];
		for (uint64_t t = 0; item_keeps(it) && t + 1 < it->n; t++) {
			const struct cu_state *ks = it->states[t];
			gdn[it->t0 + t] = ks->dev;
			ple[it->t0 + t] = ple_part(e, ks);
		}
	}
}

/* The step's rows and items, block tables and state pointers, in one upload. The previous
 * step has finished with the staging copy (its logits copy synchronized the stream). */
int cu_stage(struct cuda_engine *e, const struct capy_batch *b, const uint64_t *first, struct capy_err *err)
{
	struct ck_step *st = &e->step;
	size_t off = 0, bt_total = 0;
	uint64_t T = b->n_tokens, ni = b->n_items, max_pos = 0;
	void *d;
	int rc;

	if ((rc = meta_reserve(e, meta_need(b), err)) < 0)
		return rc;
	memset(st, 0, sizeof(*st));
	st->T = T;
	st->n_items = (uint32_t)ni;
	int32_t *ids = carve(e, &off, T * 4, &d);
	st->ids = d;
	int64_t *pos = carve(e, &off, T * 8, &d);
	st->pos = d;
	int32_t *item = carve(e, &off, T * 4, &d);
	st->item = d;
	int64_t *t0 = carve(e, &off, ni * 8, &d);
	st->t0 = d;
	int64_t *n = carve(e, &off, ni * 8, &d);
	st->n = d;
	int64_t *len = carve(e, &off, ni * 8, &d);
	st->len = d;
	uint32_t *bt_off = carve(e, &off, ni * 4, &d);
	st->bt_off = d;
	float **gdn = carve(e, &off, ni * sizeof(float *), &d);
	st->gdn_state = d;
	float **ple = carve(e, &off, ni * sizeof(float *), &d);
	st->ple_state = d;
	for (size_t i = 0; i < ni; i++)
		bt_total += b->items[i].seq->n_pages;
	uint8_t *grouped = carve(e, &off, T, &d);
	st->grouped = d;
	/* Before the block table, whose size grows with the contexts: every array a captured
	 * step was given sits where it was for the next step of its shape. */
	stage_keep(e, b, &off);
	uint32_t *bt = carve(e, &off, (bt_total + 1) * 4, &d);
	st->block_table = d;
	bt_total = 0;
	for (size_t i = 0; i < ni; i++) {
		const struct capy_batch_item *it = &b->items[i];
		const struct cu_state *cs = it->seq->state;
		const bool big = cu_prompt_item(it);
		const uint64_t p0 = first ? first[i] : it->seq->len;
		st->n_grouped += big ? it->n : 0;
		st->max_item_n = CAPY_MAX(st->max_item_n, it->n);
		for (uint64_t t = 0; t < it->n; t++) {
			grouped[it->t0 + t] = big;
			ids[it->t0 + t] = it->tokens[t];
			pos[it->t0 + t] = (int64_t)(p0 + t);
			item[it->t0 + t] = (int32_t)i;
		}
		t0[i] = (int64_t)it->t0;
		n[i] = (int64_t)it->n;
		len[i] = (int64_t)p0; /* the kernels' name for the position of the item's first row */
		bt_off[i] = (uint32_t)bt_total;
		memcpy(bt + bt_total, it->seq->pages, it->seq->n_pages * 4);
		bt_total += it->seq->n_pages;
		gdn[i] = cs->dev;
		ple[i] = ple_part(e, cs);
		max_pos = CAPY_MAX(max_pos, p0 + it->n - 1);
	}
	if ((rc = cu_context_reserve(e, max_pos + 1, err)) < 0)
		return rc;
	st->pages = e->pages;
	st->page_bytes = e->page_bytes;
	st->page_tokens = e->P;
	/* Grids are sized for the context the buffers hold, not for this step's longest row
	 * (the kernels skip what lies past each row's position), so that a captured step stays
	 * valid as sequences grow. */
	st->max_pos = (int64_t)e->s.sel_cap - 1;
	cudaError_t r = cudaMemcpyAsync(e->s.meta_dev, e->s.meta_host, off, cudaMemcpyHostToDevice, e->stream);
	if (r != cudaSuccess)
		return cu_err(err, r, "uploading the step");
	return 0;
}

/* PLE: every PLE layer's n-gram rows for every row of the step, hashed and gathered on the
 * host from the mapped table (never loaded whole) by the engine's threads, each a range of
 * an item's rows, uploaded at once. Each sequence's token context moves on. */
struct ple_job {
	const struct capy_model_config *c;
	const struct capy_ple_w *pl;
	const int32_t *hist;   /* the item's context then its tokens */
	float *emb;            /* the item's first row */
	uint64_t n, ctx, bad;  /* bad: 1 + the first row index beyond the table, 0 if none */
};

static void ple_gather(void *ctx, int ith, int nth)
{
	struct ple_job *j = ctx;
	const struct capy_ple_w *pl = j->pl;
	const uint64_t heads = j->ctx * j->c->heads_per_ngram, dim = j->c->ple_embed_dim;
	uint64_t rows[64], t0 = j->n * (uint64_t)ith / (uint64_t)nth, t1 = j->n * (uint64_t)(ith + 1) / (uint64_t)nth;

	for (uint64_t t = t0; t < t1; t++) {
		float *row = j->emb + t * dim;
		capy_ple_ngram_rows(j->c, pl, j->hist, j->ctx + t, rows);
		for (uint64_t h = 0; h < heads; h++) {
			if (rows[h] >= pl->rows) { /* racy but only ever set to a bad row's id */
				__atomic_store_n(&j->bad, rows[h] + 1, __ATOMIC_RELAXED);
				return;
			}
			capy_ple_row(pl, rows[h], row + h * pl->hd);
		}
	}
}

/* After an item's rows of PLE slot `slot` are gathered from j's context: the contexts its
 * kept states resume from, and the sequence's own moved on. */
static int ple_item_done(const struct capy_batch_item *it, uint32_t slot, const struct ple_job *j,
			 struct capy_err *err)
{
	int32_t *sctx = ((struct cu_state *)it->seq->state)->ple_ctx[slot];

	if (j->bad)
		return capy_err_set(err, CAPY_EFORMAT, "PLE row %" PRIu64 " beyond the table's %" PRIu64, j->bad - 1,
				    j->pl->rows);
	/* keep_states: the context after row t is the ids hist[t + 1 .. t + ctx] */
	for (uint64_t t = 0; item_keeps(it) && t + 1 < it->n; t++)
		memcpy(((struct cu_state *)it->states[t])->ple_ctx[slot], j->hist + t + 1, j->ctx * sizeof(int32_t));
	memcpy(sctx, j->hist + it->n, j->ctx * sizeof(int32_t));
	return 0;
}

static int ple_upload(struct cuda_engine *e, uint32_t slot, uint64_t T, struct capy_err *err)
{
	const uint64_t dim = e->c.ple_embed_dim, off = (uint64_t)slot * e->s.tmax * dim;
	cudaError_t r = cudaMemcpyAsync(e->s.ple_emb + off, e->s.ple_host + off, T * dim * sizeof(float),
					cudaMemcpyHostToDevice, e->stream);

	return r == cudaSuccess ? 0 : cu_err(err, r, "uploading PLE rows");
}

static int ple_rows(struct cuda_engine *e, const struct capy_batch *b, struct capy_err *err)
{
	const struct capy_model_config *c = &e->c;
	uint64_t ctx = c->ngram_size - 1, dim = c->ple_embed_dim;
	int32_t *hist = e->s.hist;
	int rc;

	if (!e->hw.n_ple || !PART(CU_PLE_HOST))
		return 0;
	for (uint64_t li = 0; li < c->n_layers; li++) {
		const struct capy_layer_w *l = &e->hw.layers[li];
		if (!l->has_ple)
			continue;
		float *emb = e->s.ple_host + (uint64_t)l->ple_slot * e->s.tmax * dim;
		for (size_t i = 0; i < b->n_items; i++) {
			const struct capy_batch_item *it = &b->items[i];
			struct ple_job j = { c, &l->ple, hist, emb + it->t0 * dim, it->n, ctx, 0 };
			memcpy(hist, ((struct cu_state *)it->seq->state)->ple_ctx[l->ple_slot], ctx * sizeof(int32_t));
			memcpy(hist + ctx, it->tokens, it->n * sizeof(int32_t));
			/* threads only where they pay: a prompt chunk, not a decoding row */
			if (it->n >= 64)
				capy_pool_run(e->ple_pool, ple_gather, &j);
			else
				ple_gather(&j, 0, 1);
			if ((rc = ple_item_done(it, l->ple_slot, &j, err)) < 0)
				return rc;
		}
		if ((rc = ple_upload(e, l->ple_slot, b->n_tokens, err)) < 0)
			return rc;
	}
	return 0;
}

/* The chunk's token masks (structured output), asked for now: its layers and lm_head are
 * enqueued and the GPU is still running them, so a mask computed on another thread during
 * the step is joined in that time, never before the step was launched. */
static void join_masks(struct cuda_engine *e, uint64_t m)
{
	struct cu_scratch *s = &e->s;

	for (uint64_t i = 0; i < m; i++) {
		struct cu_row_mask *k = &s->row_mask[i];
		if (!k->fn)
			continue;
		k->bits = k->fn(k->ud);
		k->first = k->bits ? (int32_t)capy_sampler_mask_first(k->bits, e->c.vocab_size) : -1;
		k->none = k->first < 0; /* no token for this row */
	}
}

/* Which rows of a chunk the device samples (capy_sampler_mode), into the pinned row table,
 * the masks of those with one into the pinned mask rows (*masked: how many rows of them to
 * upload); returns how many. Which side samples never changes the token, only the time. */
static uint64_t sample_plan(struct cuda_engine *e, uint64_t m, uint64_t *masked)
{
	struct cu_scratch *s = &e->s;
	const uint64_t W = (e->c.vocab_size + 31) / 32;
	uint64_t n = 0;

	*masked = 0;
	for (uint64_t i = 0; i < m; i++) {
		struct ck_sample_row *r = &s->smp_rows_host[i];
		const struct cu_row_mask *mk = &s->row_mask[i];
		float temp = 0;
		int k = 0;
		enum capy_sample_mode mode = s->row_smp[i] && !mk->none ? capy_sampler_mode(s->row_smp[i], &temp, &k)
									: CAPY_SAMPLE_HOST;
		*r = (struct ck_sample_row){ temp, k, CK_SAMPLE_NONE, 0, NULL };
		if (mode == CAPY_SAMPLE_GREEDY)
			r->mode = CK_SAMPLE_GREEDY;
		else if (mode == CAPY_SAMPLE_TOP_K && k <= CK_SAMPLE_CAP / 2 && m > 1)
			r->mode = CK_SAMPLE_TOP_K; /* one row: copying it is cheaper (sample.cu) */
		if (r->mode != CK_SAMPLE_NONE && mk->fn) {
			memcpy(s->smp_mask_host + i * W, mk->bits, W * 4);
			r->mask = s->smp_mask + i * W;
			r->first = mk->first;
			*masked = i + 1;
		}
		n += r->mode != CK_SAMPLE_NONE;
	}
	return n;
}

/* One chunk of logits rows: gathered residual rows, the final norm (or mixer), lm_head; the
 * rows with a sampler the device can serve are sampled there (a few KB back instead of the
 * row), the others' logits copied back into their destinations and sampled on the host. */
static int logits_chunk(struct cuda_engine *e, const int32_t *idx_dev, uint64_t m, struct capy_err *err)
{
	const struct capy_model_config *c = &e->c;
	bool q4 = c->family == CAPY_FAMILY_QWEN4_EXP;
	uint64_t H = c->hidden_size, hh = H * (q4 ? c->hc_count : 1), V = c->vocab_size, W = (V + 31) / 32, on_dev, masked;
	struct cu_scratch *s = &e->s;
	bool any_host = false;
	cudaError_t r;
	int rc;

	TRY(ck_gather_rows(s->x, hh, idx_dev, m, hh, s->rows, hh, e->stream), "gathering rows");
	if (q4) {
		if ((rc = cu_hc_mix(e, &e->hc_final, s->rows, m, s->hid, NULL, false, err)) < 0)
			return rc;
	} else {
		TRY(ck_rmsnorm(s->rows, H, e->final_norm, H, s->hid, H, m, H, H, (float)c->rms_norm_eps, e->stream), "final norm");
	}
	if (PART(CU_LM_HEAD) && (rc = cu_linear(e, &e->lm_head, s->hid, m, s->logits, err)) < 0)
		return rc;
	join_masks(e, m);
	if ((on_dev = sample_plan(e, m, &masked))) {
		/* From fixed pinned buffers, on the side stream while lm_head runs (the host does not
		 * wait): in the main stream the copies sat between lm_head and the sampling kernel,
		 * and a row's mask (31 KB at a 248k vocabulary) made a decode step ~1 % slower. The
		 * side stream's work of the step before was joined by its own step. */
		if (masked && (r = cudaMemcpyAsync(s->smp_mask, s->smp_mask_host, masked * W * 4, cudaMemcpyHostToDevice,
						   e->side)) != cudaSuccess)
			return cu_err(err, r, "uploading the token masks");
		if ((r = cudaMemcpyAsync(s->smp_rows, s->smp_rows_host, m * sizeof(*s->smp_rows), cudaMemcpyHostToDevice,
					 e->side)) != cudaSuccess ||
		    (r = cudaEventRecord(e->ev_upload, e->side)) != cudaSuccess ||
		    (r = cudaStreamWaitEvent(e->stream, e->ev_upload, 0)) != cudaSuccess)
			return cu_err(err, r, "uploading the sampling rows");
		/* A greedy row's answer is its record's head: without a top-k row the kernel writes the
		 * heads into the page-locked records itself (no copy between the step and the host's
		 * wake-up), and the 16 KB lists of a record stay on the device. */
		bool lists = false;
		for (uint64_t i = 0; i < m; i++)
			lists |= s->smp_rows_host[i].mode == CK_SAMPLE_TOP_K;
		TRY(ck_sample(s->logits, m, V, s->smp_rows, s->smp_out, lists ? NULL : s->smp_out_host, e->stream),
		    "sampling");
		if (lists && (r = cudaMemcpyAsync(s->smp_out_host, s->smp_out, m * sizeof(*s->smp_out), cudaMemcpyDeviceToHost,
						  e->stream)) != cudaSuccess)
			return cu_err(err, r, "the sampled tokens");
	}
	/* The rows the host needs: the caller's, and those sampled there. (A device row whose ties
	 * overflow its list is known only after the copy; it comes back on its own below.) */
	for (uint64_t i = 0; i < m; i++)
		any_host |= s->row_dst[i] ||
			    (s->row_smp[i] && !s->row_mask[i].none && s->smp_rows_host[i].mode == CK_SAMPLE_NONE);
	if (any_host && (r = cudaMemcpyAsync(s->logits_host, s->logits, m * V * sizeof(float), cudaMemcpyDeviceToHost,
					     e->stream)) != cudaSuccess)
		return cu_err(err, r, "copying the logits");
	if ((r = cudaStreamSynchronize(e->stream)) != cudaSuccess)
		return cu_err(err, r, "the step");
	for (uint64_t i = 0; i < m; i++) {
		const struct ck_sample_out *o = &s->smp_out_host[i];
		const struct ck_sample_row *sr = &s->smp_rows_host[i];
		const struct cu_row_mask *mk = &s->row_mask[i];
		float *row = s->logits_host + i * V;
		if (!any_host && sr->mode != CK_SAMPLE_NONE && o->status) { /* ties past the device's list: this row comes now */
			if ((r = cudaMemcpy(row, s->logits + i * V, V * sizeof(float), cudaMemcpyDeviceToHost)) != cudaSuccess)
				return cu_err(err, r, "copying the logits");
		}
		if (s->row_dst[i])
			memcpy(s->row_dst[i], row, V * sizeof(float));
		if (!s->row_smp[i])
			continue;
		if (mk->none)
			*s->row_tok[i] = -1; /* no mask, or nothing allowed: no draw */
		else if (sr->mode == CK_SAMPLE_GREEDY && !o->status)
			*s->row_tok[i] = capy_sampler_take(s->row_smp[i], o->greedy);
		else if (sr->mode == CK_SAMPLE_TOP_K && !o->status)
			*s->row_tok[i] = capy_sampler_next_top_masked(s->row_smp[i], o->v, o->id, (uint64_t)o->n, sr->first);
		else if (mk->fn) /* a copy: the caller's stay raw */
			*s->row_tok[i] = capy_sampler_next_masked(s->row_smp[i], row, mk->bits);
		else
			*s->row_tok[i] = capy_sampler_next(s->row_smp[i], row);
	}
	return 0;
}

/* A chunk's row indexes, from the pinned list (reused by the next chunk only after this one's
 * synchronization), on the side stream: in the main stream the copy sat between the step's
 * last layer and the gather, a copy's latency on every step's critical path. */
static int rows_upload(struct cuda_engine *e, uint64_t m, struct capy_err *err)
{
	cudaError_t r;

	if ((r = cudaMemcpyAsync(e->s.row_idx, e->s.row_idx_host, m * 4, cudaMemcpyHostToDevice, e->side)) != cudaSuccess ||
	    (r = cudaEventRecord(e->ev_rows, e->side)) != cudaSuccess ||
	    (r = cudaStreamWaitEvent(e->stream, e->ev_rows, 0)) != cudaSuccess)
		return cu_err(err, r, "uploading row indexes");
	return 0;
}

/* The rows that want logits or a token (each item's last row, or all its rows), in chunks of
 * the logits buffer. Row indexes go up in their own small upload per chunk. */
static int logits_out(struct cuda_engine *e, const struct capy_batch *b, struct capy_err *err)
{
	uint64_t L = e->s.logits_rows, V = e->c.vocab_size, m = 0;
	struct cu_scratch *s = &e->s;
	int32_t *idx = s->row_idx_host;
	cudaError_t r;
	int rc;

	for (size_t i = 0; i < b->n_items; i++) {
		const struct capy_batch_item *it = &b->items[i];
		if (!it->logits && !it->sampler)
			continue;
		for (uint64_t t = it->all_logits && it->logits ? 0 : it->n - 1; t < it->n; t++) {
			bool last = t + 1 == it->n;
			idx[m] = (int32_t)(it->t0 + t);
			s->row_dst[m] = it->logits ? it->logits + (it->all_logits ? t * V : 0) : NULL;
			s->row_smp[m] = last ? it->sampler : NULL;
			s->row_mask[m] = (struct cu_row_mask){ .fn = last ? it->mask : NULL, .ud = it->mask_ud };
			s->row_tok[m++] = last ? it->token : NULL;
			if (m == L) {
				if ((rc = rows_upload(e, m, err)) < 0 || (rc = logits_chunk(e, s->row_idx, m, err)) < 0)
					return rc;
				m = 0;
			}
		}
	}
	if (m)
		return (rc = rows_upload(e, m, err)) < 0 ? rc : logits_chunk(e, s->row_idx, m, err);
	/* No logits wanted: the step still ends finished, so its staging buffers are free. */
	if ((r = cudaStreamSynchronize(e->stream)) != cudaSuccess)
		return cu_err(err, r, "the step");
	return 0;
}

int cu_layer_plain(struct cuda_engine *e, const struct cu_layer *l, const float *next_norm, struct capy_err *err)
{
	const struct capy_model_config *c = &e->c;
	struct cu_scratch *s = &e->s;
	uint64_t H = c->hidden_size, T = e->step.T;
	float eps = (float)c->rms_norm_eps;
	void *st = e->stream;
	int rc;

	rc = l->h->type == CAPY_LAYER_LINEAR ? cu_gdn(e, l, s->xn, s->out, err) : cu_attention(e, l, s->xn, s->out, err);
	if (rc < 0)
		return rc;
	if (PART(CU_NORM))
		TRY(ck_add_rmsnorm(s->x, s->out, l->post_norm, s->xn, T, H, eps, st), "residual and post norm");
	/* The MoE combine folded into the residual add and the next norm. */
	if ((rc = cu_ffn(e, l, s->xn, s->out, PART(CU_NORM), err)) < 0)
		return rc;
	if (rc == 1)
		return cu_ffn_fold(e, next_norm, err);
	if (next_norm && PART(CU_NORM))
		TRY(ck_add_rmsnorm(s->x, s->out, next_norm, s->xn, T, H, eps, st), "residual and input norm");
	else if (!next_norm)
		TRY(ck_add(s->x, s->out, T * H, st), "residual");
	return 0;
}

int cu_layer_hc(struct cuda_engine *e, const struct cu_layer *l, bool pending, bool defer, struct capy_err *err)
{
	const struct capy_model_config *c = &e->c;
	struct cu_scratch *s = &e->s;
	uint64_t H = c->hidden_size, hc = c->hc_count, T = e->step.T;
	void *st = e->stream;
	int rc;

	if (l->h->has_ple) { /* PLE reads the streams whole */
		if (pending)
			TRY(ck_hc_add_injected(s->x, s->out, s->inj, T, H, hc, st), "injection");
		pending = false;
		if ((rc = cu_ple(e, l, s->x, err)) < 0)
			return rc;
	}
	if ((rc = cu_hc_mix(e, &l->hc_attn, s->x, T, s->blk, s->inj, pending, err)) < 0)
		return rc;
	rc = l->h->type == CAPY_LAYER_LINEAR ? cu_gdn(e, l, s->blk, s->out, err) : cu_attention(e, l, s->blk, s->out, err);
	if (rc < 0)
		return rc;
	if ((rc = cu_hc_mix(e, &l->hc_mlp, s->x, T, s->blk, s->inj, true, err)) < 0 ||
	    (rc = cu_ffn(e, l, s->blk, s->out, false, err)) < 0)
		return rc;
	if (!defer)
		TRY(ck_hc_add_injected(s->x, s->out, s->inj, T, H, hc, st), "injection");
	return 0;
}

/* The final-normed hidden states of the items that ask (the MTP head's input): the final norm
 * of their rows into xn (free once the layers are done), the same ck_rmsnorm as the logits
 * rows' (so lm_head reads these bits), copied to the host; logits_out's synchronization ends
 * the copies. Nothing for steps where no item asks. qwen4_exp: the final mixer of every row of
 * the step into blk (free too; its xn and big buffers are scratch), once, as a linear over all
 * the step's rows is run (cu_linear's paths per item), so a row's bits are lm_head's input's
 * where the logits rows take the same path: one-row items always, prompt items up to the
 * cuBLASLt sums of a gathered chunk of another size. */
static int hidden_out(struct cuda_engine *e, const struct capy_batch *b, struct capy_err *err)
{
	const uint64_t H = e->c.hidden_size;
	const bool q4 = e->c.family == CAPY_FAMILY_QWEN4_EXP;
	float *hid = q4 ? e->s.blk : e->s.xn;
	bool any = false;
	cudaError_t r;
	int rc;

	for (size_t i = 0; i < b->n_items; i++)
		any |= b->items[i].hidden != NULL;
	if (!any)
		return 0;
	if (q4 && (rc = cu_hc_mix(e, &e->hc_final, e->s.x, b->n_tokens, hid, NULL, false, err)) < 0)
		return rc;
	for (size_t i = 0; i < b->n_items; i++) {
		const struct capy_batch_item *it = &b->items[i];
		if (!it->hidden)
			continue;
		if (!q4)
			TRY(ck_rmsnorm(e->s.x + it->t0 * H, H, e->final_norm, H, hid + it->t0 * H, H, it->n, H, H,
				       (float)e->c.rms_norm_eps, e->stream),
			    "final norm of the hidden states");
		if ((r = cudaMemcpyAsync(it->hidden, hid + it->t0 * H, it->n * H * sizeof(float), cudaMemcpyDeviceToHost,
					 e->stream)) != cudaSuccess)
			return cu_err(err, r, "copying the hidden states");
	}
	return 0;
}

/* Where a step splits in two (cu_step): the first PLE layer, whose rows the host gathers while
 * the GPU runs the layers before it; the number of layers for a model without PLE. */
static uint64_t ple_split(const struct cuda_engine *e)
{
	for (uint64_t i = 0; e->hw.n_ple && i < e->c.n_layers; i++)
		if (e->hw.layers[i].has_ple)
			return i;
	return e->c.n_layers;
}

/* Part 0 of a step (the embedding and the layers before ple_split) or part 1 (the rest),
 * enqueued on the stream (no copies, no synchronization: what a CUDA graph can hold). */
static int layers(struct cuda_engine *e, int part, struct capy_err *err)
{
	const struct capy_model_config *c = &e->c;
	struct cu_scratch *s = &e->s;
	bool q4 = c->family == CAPY_FAMILY_QWEN4_EXP;
	uint64_t H = c->hidden_size, hc = q4 ? c->hc_count : 1, T = e->step.T, split = ple_split(e);
	uint64_t lo = part ? split : 0, hi = part ? c->n_layers : split;
	float eps = (float)c->rms_norm_eps;
	void *st = e->stream;
	int rc;

	if (!part) {
		TRY(ck_embed(e->embed, e->embed_dtype, e->step.ids, T, H, hc, s->x, st), "embedding");
		if (!q4)
			TRY(ck_rmsnorm(s->x, H, e->layers[0].in_norm, H, s->xn, H, T, H, H, eps, st), "input norm");
	}
	for (uint64_t i = lo; i < hi; i++) {
		/* the input norm is done: after the embedding, or with the last residual add */
		const float *next_norm = i + 1 < c->n_layers ? e->layers[i + 1].in_norm : NULL;
		if ((rc = q4 ? cu_layer_hc(e, &e->layers[i], i > 0, i + 1 < c->n_layers, err)
			     : cu_layer_plain(e, &e->layers[i], next_norm, err)) < 0)
			return rc;
	}
	return e->off && hi == c->n_layers ? cu_offload_layers_end(e, err) : 0;
}

/* Whether a step can replay a captured graph: decode rows (one token an item) and
 * speculative verification windows (items that keep states), no prompt chunk, and with
 * windows few enough items for the shape to name each one's rows (not with expert offload:
 * its hand-offs are planned for decode rows). */
static bool graphable(const struct cuda_engine *e, const struct capy_batch *b)
{
	bool windows = false;

	for (size_t i = 0; i < b->n_items; i++) {
		if (b->items[i].n == 1)
			continue;
		if (!item_keeps(&b->items[i]))
			return false;
		windows = true;
	}
	return !windows || (b->n_items <= CU_GRAPH_ITEMS && !e->off && !e->no_window_graphs);
}

/* Decode steps and verification windows replay a captured graph of each part of layers(), one
 * pair per shape of the step (rows, items, each window's rows) and buffer generation: one
 * launch instead of hundreds. A shape is captured the first time it runs; the oldest capture
 * makes room. Every host-side choice layers() makes follows from the shape, and every array
 * it hands the kernels is at the same place in the step's metadata for the same shape
 * (cu_stage). Part 1 runs in the same step as part 0, so it finds part 0's entry. */
static int layers_graphed(struct cuda_engine *e, const struct capy_batch *b, int part, struct capy_err *err)
{
	struct cu_graph *g = NULL, *old = &e->graphs[0];
	cudaGraph_t graph = NULL;
	uint16_t rows[CU_GRAPH_ITEMS] = { 0 };
	cudaError_t r;
	int rc;

	if (part && ple_split(e) == e->c.n_layers)
		return 0; /* no PLE: part 0 was the whole step */
	if (e->no_graphs || !graphable(e, b))
		return layers(e, part, err);
	for (size_t i = 0; i < b->n_items && i < CU_GRAPH_ITEMS; i++)
		rows[i] = (uint16_t)b->items[i].n;
	for (int i = 0; i < CU_GRAPHS; i++) {
		struct cu_graph *x = &e->graphs[i];
		if ((x->exec[0] || x->exec[1]) && x->gen == e->gen && x->T == e->step.T && x->n_items == e->step.n_items &&
		    !memcmp(x->rows, rows, sizeof(rows))) {
			g = x;
			break;
		}
		if (!(x->exec[0] || x->exec[1]) || x->used < old->used)
			old = x;
	}
	if (!g) {
		for (int p = 0; p < 2; p++)
			if (old->exec[p])
				cudaGraphExecDestroy(old->exec[p]);
		memset(old, 0, sizeof(*old));
		old->T = e->step.T;
		old->n_items = e->step.n_items;
		memcpy(old->rows, rows, sizeof(rows));
		old->gen = e->gen;
		g = old;
	}
	if (!g->exec[part]) {
		if ((r = cudaStreamBeginCapture(e->stream, cudaStreamCaptureModeRelaxed)) != cudaSuccess)
			return cu_err(err, r, "capturing a decode step");
		rc = layers(e, part, err);
		r = cudaStreamEndCapture(e->stream, &graph);
		if (rc < 0) {
			if (graph)
				cudaGraphDestroy(graph);
			return rc;
		}
		if (r != cudaSuccess)
			return cu_err(err, r, "capturing a decode step");
		r = cudaGraphInstantiate(&g->exec[part], graph, 0);
		cudaGraphDestroy(graph);
		if (r != cudaSuccess) {
			g->exec[part] = NULL;
			return cu_err(err, r, "instantiating a decode step");
		}
	}
	g->used = ++e->steps;
	if ((r = cudaGraphLaunch(g->exec[part], e->stream)) != cudaSuccess)
		return cu_err(err, r, "a decode step");
	return 0;
}

int cu_step(struct capy_engine *core, const struct capy_batch *b, struct capy_err *err)
{
	struct cuda_engine *e = core->be;
	int rc;

	cu_use_device(e);
	e->batch = b;
	if (e->off && (rc = cu_offload_before_step(e, err)) < 0)
		return rc;
	/* the PLE rows are gathered while the GPU runs part 0: the host's page faults in the
	 * mapped table and the hashing no longer stand between one step and the next */
	if ((rc = cu_stage(e, b, NULL, err)) < 0 || (rc = layers_graphed(e, b, 0, err)) < 0 ||
	    (rc = ple_rows(e, b, err)) < 0 || (rc = layers_graphed(e, b, 1, err)) < 0)
		return rc;
	if ((rc = hidden_out(e, b, err)) < 0 || (rc = logits_out(e, b, err)) < 0)
		return rc;
	return e->off ? cu_offload_after_step(e, err) : 0;
}

unsigned cu_skip_parse(const char *list)
{
	static const struct {
		const char *name;
		unsigned part;
	} parts[] = {
		{ "norm", CU_NORM },	     { "route", CU_ROUTE },	    { "experts", CU_EXPERTS },
		{ "moe_in", CU_MOE_IN },     { "shared", CU_SHARED },	    { "combine", CU_COMBINE },
		{ "gdn_in", CU_GDN_IN },     { "gdn_core", CU_GDN_CORE },   { "gdn_out", CU_GDN_OUT },
		{ "att_in", CU_ATT_IN },     { "att_core", CU_ATT_CORE },   { "att_out", CU_ATT_OUT },
		{ "lm_head", CU_LM_HEAD },   { "att_kv", CU_ATT_KV },	    { "att_attn", CU_ATT_ATTN },
		{ "att_gate", CU_ATT_GATE }, { "ple_host", CU_PLE_HOST },
	};
	unsigned skip = 0;

	for (const char *p = list; p && *p;) {
		size_t n = strcspn(p, ",");
		for (size_t i = 0; i < ARRAY_SIZE(parts); i++)
			if (strlen(parts[i].name) == n && !strncmp(p, parts[i].name, n))
				skip |= parts[i].part;
		p += n + (p[n] == ',');
	}
	return skip;
}
