/* mtp.c - the MTP head on the GPU (engine.h capy_engine_mtp; the CPU's is libcore/backend/cpu/
 * mtp.c, the oracle): per row
 *
 *	u = fc([norm_emb(embed(token)) | norm_hidden(hidden)])
 *	g = norm(layer(u))                                      qwen3_5, qwen3_5_moe, qwen3_next
 *	g = norm(mixer(layer(hc_count copies of u)))            qwen4_exp (capy's layout, docs/spec.md)
 *	logits = lm_head(g)
 *
 * as host orchestration of the main model's kernels. The rows are staged as a step of one item
 * at the rows' positions (cu_stage), so the head's layer runs through cu_layer_plain (qwen4_exp:
 * cu_layer_hc) exactly as a main layer would, its attention reading and writing the head's own
 * rows (kv_slot after the main layers'; QSA's keys and block summaries with them) of the
 * sequence's pages. Launched eagerly (no graph): a call is one head row per chained draft, or
 * the rows a window or a prompt piece left to catch up on.
 *
 * lm_head over a draft vocabulary runs only the vocabulary's rows (ck_linear_rows), each logit
 * the bits of the whole lm_head's; where that kernel does not take the matrix (not BF16, or
 * unaligned) the whole product is computed and the vocabulary's logits picked on the host. */
#include "cuda-impl.h"

#include <stdlib.h>
#include <string.h>

/* The draft vocabulary on the device, on the stream before lm_head: uploaded only when it
 * differs from the one there (a drafter passes the same list to every call). *on_dev false
 * where it cannot go there (more ids than the vocabulary, which the plan's buffer holds:
 * duplicates): the host picks them from the whole row instead. */
static int ids_upload(struct cuda_engine *e, const int32_t *ids, uint64_t n, bool *on_dev, struct capy_err *err)
{
	struct cu_scratch *s = &e->s;
	cudaError_t r;

	*on_dev = n <= e->c.vocab_size;
	if (!*on_dev || (n == s->mtp_ids_n && !memcmp(ids, s->mtp_ids_host, n * sizeof(*ids))))
		return 0;
	s->mtp_ids_n = 0;
	if ((r = cudaMemcpyAsync(s->mtp_ids, ids, n * sizeof(*ids), cudaMemcpyHostToDevice, e->stream)) != cudaSuccess)
		return cu_err(err, r, "uploading the draft vocabulary");
	memcpy(s->mtp_ids_host, ids, n * sizeof(*ids));
	s->mtp_ids_n = n;
	return 0;
}

/* qwen4_exp: fc's rows u (in blk) copied into every stream of x, as the main model's
 * embedding is (ck_embed), then the layer on the streams, the head's mixer into blk and its
 * norm: g in xn. */
static int head_rows_hc(struct cuda_engine *e, struct capy_err *err)
{
	const struct cu_mtp *m = &e->mtp;
	struct cu_scratch *s = &e->s;
	const uint64_t T = e->step.T, H = e->c.hidden_size, hc = e->c.hc_count;
	cudaError_t cr;
	int rc;

	for (uint64_t k = 0; k < hc; k++)
		if ((cr = cudaMemcpy2DAsync(s->x + k * H, hc * H * sizeof(float), s->blk, H * sizeof(float), H * sizeof(float),
					    T, cudaMemcpyDeviceToDevice, e->stream)) != cudaSuccess)
			return cu_err(err, cr, "the MTP head's streams");
	if ((rc = cu_layer_hc(e, &m->layer, false, true, err)) < 0 ||
	    (rc = cu_hc_mix(e, &m->mixer, s->x, T, s->blk, NULL, true, err)) < 0)
		return rc;
	TRY(ck_rmsnorm(s->blk, H, m->norm, H, s->xn, H, T, H, H, (float)e->c.rms_norm_eps, e->stream), "MTP norm");
	return 0;
}

/* Embedding and hidden states normed and concatenated (the order of vLLM's glue), fc, then
 * the head's layer: g = norm(layer(...)) of every row in xn. */
static int head_rows(struct cuda_engine *e, const struct capy_mtp_rows *r, struct capy_err *err)
{
	const struct cu_mtp *m = &e->mtp;
	struct cu_scratch *s = &e->s;
	const uint64_t T = r->n, H = e->c.hidden_size;
	const float eps = (float)e->c.rms_norm_eps;
	float *cat = s->big1; /* [T][2H]: the plan sizes big1 for it */
	cudaError_t cr;
	int rc;

	if ((rc = cu_stage(e, e->batch, &r->pos, err)) < 0)
		return rc;
	/* out is free until the layer's mixer writes it */
	if ((cr = cudaMemcpyAsync(s->out, r->hidden, T * H * sizeof(float), cudaMemcpyHostToDevice, e->stream)) !=
	    cudaSuccess)
		return cu_err(err, cr, "uploading the MTP head's hidden states");
	TRY(ck_embed(e->embed, e->embed_dtype, e->step.ids, T, H, 1, s->x, e->stream), "MTP embedding");
	TRY(ck_rmsnorm(s->x, H, m->norm_emb, H, cat, 2 * H, T, H, H, eps, e->stream), "MTP embedding norm");
	TRY(ck_rmsnorm(s->out, H, m->norm_hidden, H, cat + H, 2 * H, T, H, H, eps, e->stream), "MTP hidden norm");
	if (e->c.family == CAPY_FAMILY_QWEN4_EXP)
		return (rc = cu_linear(e, &m->fc, cat, T, s->blk, err)) < 0 ? rc : head_rows_hc(e, err);
	if ((rc = cu_linear(e, &m->fc, cat, T, s->x, err)) < 0)
		return rc;
	TRY(ck_rmsnorm(s->x, H, m->layer.in_norm, H, s->xn, H, T, H, H, eps, e->stream), "MTP input norm");
	return cu_layer_plain(e, &m->layer, m->norm, err);
}

/* lm_head of g's rows [first, first + m) into the logits buffer (m rows of width floats), then
 * to the host: rows of r->logits from row `o` on. The copy synchronizes the stream. */
static int logits_chunk(struct cuda_engine *e, const struct capy_mtp_rows *r, uint64_t first, uint64_t m, uint64_t o,
			bool on_dev, struct capy_err *err)
{
	struct cu_scratch *s = &e->s;
	const uint64_t H = e->c.hidden_size, V = e->c.vocab_size, W = r->ids ? r->n_ids : V, width = on_dev ? W : V;
	const float *g = s->xn + first * H;
	cudaError_t cr;

	/* ck_linear directly (not cu_linear's GEMMs for prompt-sized steps): the numerics
	 * ck_linear_rows reproduces, so a logit is the same bits with and without a vocabulary */
	if (on_dev)
		TRY(ck_linear_rows(&e->lm_head, g, m, s->mtp_ids, W, s->logits, W, e->stream), "MTP lm_head rows");
	else
		TRY(ck_linear(&e->lm_head, g, m, s->logits, s->lin_ws, e->stream), "MTP lm_head");
	if ((cr = cudaMemcpyAsync(s->logits_host, s->logits, m * width * sizeof(float), cudaMemcpyDeviceToHost,
				  e->stream)) != cudaSuccess ||
	    (cr = cudaStreamSynchronize(e->stream)) != cudaSuccess)
		return cu_err(err, cr, "copying the MTP head's logits");
	if (on_dev || !r->ids) {
		memcpy(r->logits + o * W, s->logits_host, m * W * sizeof(float));
		return 0;
	}
	for (uint64_t t = 0; t < m; t++)
		for (uint64_t i = 0; i < W; i++)
			r->logits[(o + t) * W + i] = s->logits_host[t * V + (uint64_t)r->ids[i]];
	return 0;
}

/* The last row's g and the logits asked for (the last row's, or every row's), in chunks of the
 * logits buffer. Ends with the stream synchronized, as a step does. */
static int head_out(struct cuda_engine *e, const struct capy_mtp_rows *r, struct capy_err *err)
{
	struct cu_scratch *s = &e->s;
	const uint64_t T = r->n, H = e->c.hidden_size, first = r->all_logits ? 0 : T - 1;
	bool on_dev = false;
	cudaError_t cr;
	int rc;

	if (r->g && (cr = cudaMemcpyAsync(r->g, s->xn + (T - 1) * H, H * sizeof(float), cudaMemcpyDeviceToHost,
					  e->stream)) != cudaSuccess)
		return cu_err(err, cr, "copying the MTP head's output");
	if (!r->logits) {
		if ((cr = cudaStreamSynchronize(e->stream)) != cudaSuccess)
			return cu_err(err, cr, "the MTP head");
		return 0;
	}
	if (r->ids && ck_linear_rows_ok(&e->lm_head, s->xn) && (rc = ids_upload(e, r->ids, r->n_ids, &on_dev, err)) < 0)
		return rc;
	/* in chunks of the logits buffer's logits_rows rows of V floats (a row over the draft
	 * vocabulary on the device is at most V: ids_upload) */
	for (uint64_t t = first; t < T; t += s->logits_rows)
		if ((rc = logits_chunk(e, r, t, CAPY_MIN(s->logits_rows, T - t), t - first, on_dev, err)) < 0)
			return rc;
	return 0;
}

int cu_mtp(struct capy_engine *core, const struct capy_mtp_rows *r, struct capy_err *err)
{
	struct cuda_engine *e = core->be;
	/* no states: the head's rows keep none (cu_stage stages no kept blocks for them, and
	 * cu_prompt_item gives a call of CK_GROUPED_MIN_ROWS rows or more the prompt paths) */
	struct capy_batch_item item = { .seq = r->seq, .tokens = r->tokens, .n = r->n, .t0 = 0 };
	struct capy_batch b = { &item, 1, r->n };
	int rc;

	if (!e->mtp.present)
		return capy_err_set(err, CAPY_EINVAL, "cuda: the engine has no MTP head bound");
	cu_use_device(e);
	e->batch = &b; /* the blocks read the step's items (which rows take the prompt paths) */
	if ((rc = head_rows(e, r, err)) == 0)
		rc = head_out(e, r, err);
	e->batch = NULL;
	return rc;
}
