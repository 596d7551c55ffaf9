/* attention.c - gated full attention with partial RoPE and a KV cache, and the QSA
 * block indexer of qwen4_exp that restricts each query to the best key blocks.
 *
 * Per token: q_proj gives, per head, the query and an output gate; q and k get a
 * zero-centred RMSNorm per head, then RoPE on their first rot dims; softmax(q k^T / sqrt(d))
 * over the visible keys in fp32 weights the values; the result times sigmoid(gate) goes
 * through o_proj. QSA: the indexer's single key head is averaged over blocks of
 * `compress_ratio` consecutive tokens, normed and rotated at the block's first position;
 * a query scores each complete block as sum over indexer heads of relu(q . k) / sqrt(d),
 * keeps the best `budget / ratio` blocks and always the unfinished tail.
 */
#include "cpu-impl.h"
#include "../../quant/floats.h"

#include <math.h>

#define KV_GROUP 32 /* INT8 KV: one scale per 32 values */

/* Store token pos's K (or V) row x [nkv][hd] of KV layer `slot` into s's page. */
static void kv_store(const struct cpu_engine *e, const struct capy_seq *s, int slot, bool is_k, uint64_t pos,
		     const float *x)
{
	const struct capy_kv_fields *lay = &e->lay[slot];
	uint64_t n = e->c.n_kv_heads * e->c.head_dim;
	void *row = page_row(e, s, pos, is_k ? lay->k : lay->v, e->kv_row);

	switch (e->opts.kv) {
	case CAPY_KV_F32:
		memcpy(row, x, n * sizeof(float));
		break;
	case CAPY_KV_BF16:
		for (uint64_t i = 0; i < n; i++)
			((uint16_t *)row)[i] = capy_f32_to_bf16(x[i]);
		break;
	case CAPY_KV_INT8: {
		float *scales = (float *)page_row(e, s, pos, is_k ? lay->k_scale : lay->v_scale,
						  (n / KV_GROUP) * sizeof(float));
		int8_t *q = row;
		for (uint64_t g = 0; g < n / KV_GROUP; g++) {
			float amax = 0, sc;
			for (uint64_t i = g * KV_GROUP; i < (g + 1) * KV_GROUP; i++)
				amax = fmaxf(amax, fabsf(x[i]));
			sc = amax / 127.0f;
			scales[g] = sc;
			for (uint64_t i = g * KV_GROUP; i < (g + 1) * KV_GROUP; i++)
				q[i] = (int8_t)(sc > 0 ? lrintf(x[i] / sc) : 0);
		}
		break;
	}
	}
}

/* Walks a sequence's K or V rows of one layer in token order, page by page (one division
 * per page, not per row). */
struct kv_cursor {
	const struct cpu_engine *e;
	const struct capy_seq *s;
	uint64_t field, scale_field, r;
	const uint8_t *page;
};

static void kv_cursor_init(struct kv_cursor *kc, const struct cpu_engine *e, const struct capy_seq *s, int slot,
			   bool is_k)
{
	const struct capy_kv_fields *lay = &e->lay[slot];

	kc->e = e;
	kc->s = s;
	kc->field = is_k ? lay->k : lay->v;
	kc->scale_field = is_k ? lay->k_scale : lay->v_scale;
	kc->r = e->P;
	kc->page = NULL;
}

/* One head's row of token pos, widened to fp32. pos goes up by one with each call to
 * kv_next, or skipped rows are counted with kc->r++. */
static void kv_next(struct kv_cursor *kc, uint64_t pos, uint64_t head, float *out)
{
	const struct cpu_engine *e = kc->e;
	uint64_t hd = e->c.head_dim, n = e->c.n_kv_heads * hd;

	if (kc->r >= e->P) { /* a new page (or rows were skipped past the end of one) */
		kc->page = e->pages[kc->s->pages[pos / e->P]];
		kc->r = pos % e->P;
	}
	switch (e->opts.kv) {
	case CAPY_KV_F32:
		memcpy(out, kc->page + kc->field + kc->r * e->kv_row + head * hd * sizeof(float), hd * sizeof(float));
		break;
	case CAPY_KV_BF16: {
		const uint16_t *h = (const uint16_t *)(kc->page + kc->field + kc->r * e->kv_row) + head * hd;
		for (uint64_t i = 0; i < hd; i++)
			out[i] = capy_bf16_to_f32(h[i]);
		break;
	}
	case CAPY_KV_INT8: {
		const int8_t *q = (const int8_t *)(kc->page + kc->field + kc->r * e->kv_row) + head * hd;
		const float *scales = (const float *)(kc->page + kc->scale_field + kc->r * (n / KV_GROUP) * sizeof(float)) +
				      head * hd / KV_GROUP;
		for (uint64_t i = 0; i < hd; i++)
			out[i] = (float)q[i] * scales[i / KV_GROUP];
		break;
	}
	}
	kc->r++;
}

struct attn_job {
	struct cpu_engine *e;
	const struct capy_layer_w *l;
	const float *q;        /* [T][nq][hd] normed + rotated */
	const float *gate;     /* [T][nq * 2 * hd] (the raw q_proj output) */
	const uint8_t *sel;    /* QSA: [T][attn_cap] key allowed, or NULL for causal */
	float *out;            /* [T][nq * hd] */
};

/* One (token, KV head) per item: each cached key and value row is widened once and used by
 * all the query heads that share it (GQA). Per query head the order is fixed: scores in key
 * order, softmax, values accumulated in key order. */
CAPY_HOT static void attn_heads(void *p, uint64_t b, uint64_t end, int ith)
{
	struct attn_job *j = p;
	struct cpu_engine *e = j->e;
	const struct capy_model_config *c = &e->c;
	uint64_t hd = c->head_dim, nq = c->n_heads, nkv = c->n_kv_heads, group = nq / nkv, cap = e->s.attn_cap;
	float *scores = e->s.attn_scores + (uint64_t)ith * e->s.attn_stride;
	float *kbuf = scores + group * cap, *acc = kbuf + hd;
	const float scale = 1.0f / sqrtf((float)hd);

	for (uint64_t item = b; item < end; item++) {
		uint64_t t = item / nkv, kvh = item % nkv, pos = e->s.pos[t];
		const struct capy_seq *s = e->batch->items[e->s.item_of[t]].seq;
		const uint8_t *sel = j->sel ? j->sel + t * cap : NULL;
		struct kv_cursor kc;
		float mx[64], sum[64];

		for (uint64_t g = 0; g < group; g++) {
			mx[g] = -INFINITY;
			sum[g] = 0;
		}
		kv_cursor_init(&kc, e, s, j->l->kv_slot, true);
		for (uint64_t k = 0; k <= pos; k++) {
			if (sel && !sel[k]) {
				kc.r++; /* keep the cursor in step */
				for (uint64_t g = 0; g < group; g++)
					scores[g * cap + k] = -INFINITY;
				continue;
			}
			kv_next(&kc, k, kvh, kbuf);
			for (uint64_t g = 0; g < group; g++) {
				const float *q = j->q + (t * nq + kvh * group + g) * hd;
				float sc = dot16(q, kbuf, hd) * scale;
				scores[g * cap + k] = sc;
				mx[g] = fmaxf(mx[g], sc);
			}
		}
		for (uint64_t g = 0; g < group; g++) {
			float *sg = scores + g * cap;
			for (uint64_t k = 0; k <= pos; k++) {
				sg[k] = sg[k] == -INFINITY ? 0 : expf(sg[k] - mx[g]);
				sum[g] += sg[k];
			}
		}
		memset(acc, 0, group * hd * sizeof(float));
		kv_cursor_init(&kc, e, s, j->l->kv_slot, false);
		for (uint64_t k = 0; k <= pos; k++) {
			if (sel && !sel[k]) {
				kc.r++;
				continue;
			}
			kv_next(&kc, k, kvh, kbuf);
			for (uint64_t g = 0; g < group; g++) {
				float w = scores[g * cap + k] / sum[g];
				float *ag = acc + g * hd;
				for (uint64_t i = 0; i < hd; i++)
					ag[i] += w * kbuf[i];
			}
		}
		for (uint64_t g = 0; g < group; g++) {
			uint64_t h = kvh * group + g;
			float *o = j->out + (t * nq + h) * hd;
			const float *gate = j->gate + t * nq * 2 * hd + h * 2 * hd + hd;
			for (uint64_t i = 0; i < hd; i++)
				o[i] = acc[g * hd + i] * sigmoidf_(gate[i]);
		}
	}
}

/* QSA: a pooled block key's row in the pages (block blk covers tokens [blk r, (blk + 1) r)). */
static float *qsa_block(const struct cpu_engine *e, const struct capy_seq *s, int slot, uint64_t blk)
{
	uint64_t ratio = e->c.indexer_compress_ratio, ih = e->c.indexer_head_dim, first = blk * ratio;

	return (float *)page_field(e, s, first, e->lay[slot].blocks, ih * sizeof(float), (first % e->P) / ratio);
}

/* QSA: pool, norm and rotate every block that tokens [from, to) of s completed. */
static void qsa_update_blocks(struct cpu_engine *e, const struct capy_seq *s, const struct capy_layer_w *l,
			      uint64_t from, uint64_t to)
{
	const struct capy_model_config *c = &e->c;
	uint64_t ih = c->indexer_head_dim, ratio = c->indexer_compress_ratio;
	int slot = l->kv_slot;

	for (uint64_t b = from / ratio; (b + 1) * ratio <= to; b++) {
		float *blk = qsa_block(e, s, slot, b);
		uint64_t start = b * ratio;
		for (uint64_t i = 0; i < ih; i++) {
			float sum = 0;
			for (uint64_t t = 0; t < ratio; t++)
				sum += ((const float *)page_row(e, s, start + t, e->lay[slot].idx_keys, ih * sizeof(float)))[i];
			blk[i] = sum / (float)ratio;
		}
		rmsnorm_1p(blk, l->attn.idx_k_norm, blk, ih, ih, (float)c->rms_norm_eps);
		rope_apply(e, blk, start);
	}
}

struct qsa_job {
	struct cpu_engine *e;
	const struct capy_layer_w *l;
	const float *iq;  /* [T][ni][ih] normed + rotated */
	uint8_t *sel;
};

static void qsa_select(void *p, uint64_t b, uint64_t end, int ith)
{
	struct qsa_job *j = p;
	struct cpu_engine *e = j->e;
	const struct capy_model_config *c = &e->c;
	uint64_t ih = c->indexer_head_dim, ni = c->indexer_n_heads, ratio = c->indexer_compress_ratio;
	uint64_t topk = c->indexer_budget / ratio, cap = e->s.attn_cap;
	float *scores = e->s.attn_scores + (uint64_t)ith * e->s.attn_stride;
	const float inv = 1.0f / sqrtf((float)ih);

	for (uint64_t t = b; t < end; t++) {
		uint64_t pos = e->s.pos[t], nb = (pos + 1) / ratio;
		const struct capy_seq *s = e->batch->items[e->s.item_of[t]].seq;
		uint8_t *sel = j->sel + t * cap;
		memset(sel, 0, pos + 1);
		for (uint64_t k = nb * ratio; k <= pos; k++)
			sel[k] = 1; /* the unfinished tail */
		for (uint64_t blk = 0; blk < nb; blk++) {
			const float *kb = qsa_block(e, s, j->l->kv_slot, blk);
			float sum = 0;
			for (uint64_t h = 0; h < ni; h++) {
				const float *q = j->iq + (t * ni + h) * ih;
				float d = 0;
				for (uint64_t i = 0; i < ih; i++)
					d += q[i] * kb[i];
				sum += d > 0 ? d : 0;
			}
			scores[blk] = sum * inv;
		}
		/* The best min(topk, nb) blocks: highest score first, the lower index on a tie. */
		for (uint64_t n = 0; n < CAPY_MIN(topk, nb); n++) {
			uint64_t best = UINT64_MAX;
			for (uint64_t blk = 0; blk < nb; blk++)
				if (scores[blk] != -INFINITY && (best == UINT64_MAX || scores[blk] > scores[best]))
					best = blk;
			scores[best] = -INFINITY;
			memset(sel + best * ratio, 1, ratio);
		}
	}
}

int attention_forward(struct cpu_engine *e, const struct capy_layer_w *l, const float *xn, uint64_t T, float *out,
		      struct capy_err *err)
{
	const struct capy_model_config *c = &e->c;
	const struct capy_batch *bt = e->batch;
	const struct capy_attn_w *a = &l->attn;
	uint64_t hd = c->head_dim, nq = c->n_heads, nkv = c->n_kv_heads;
	float *qg = e->s.big1, *k = e->s.big2, *v = e->s.big3, *q = e->s.tmp, *att = e->s.mix;
	float eps = (float)c->rms_norm_eps;
	struct attn_job job = { e, l, q, qg, NULL, att };

	(void)err;
	par_linear(e, &a->q, xn, T, qg);
	par_linear(e, &a->k, xn, T, k);
	par_linear(e, &a->v, xn, T, v);
	for (uint64_t t = 0; t < T; t++) {
		const struct capy_seq *s = bt->items[e->s.item_of[t]].seq;
		uint64_t pos = e->s.pos[t];
		for (uint64_t h = 0; h < nq; h++) {
			float *dst = q + (t * nq + h) * hd;
			rmsnorm_1p(qg + t * nq * 2 * hd + h * 2 * hd, a->q_norm, dst, hd, hd, eps);
			rope_apply(e, dst, pos);
		}
		for (uint64_t h = 0; h < nkv; h++) {
			float *kh = k + (t * nkv + h) * hd;
			rmsnorm_1p(kh, a->k_norm, kh, hd, hd, eps);
			rope_apply(e, kh, pos);
		}
		kv_store(e, s, l->kv_slot, true, pos, k + t * nkv * hd);
		kv_store(e, s, l->kv_slot, false, pos, v + t * nkv * hd);
	}
	if (a->qsa) {
		uint64_t ih = c->indexer_head_dim, ni = c->indexer_n_heads, w = (ni + 1) * ih;
		float *idx = e->s.big2; /* k and v are in the cache now */
		struct qsa_job qj = { e, l, e->s.big3, e->s.sel };
		par_linear(e, &a->idx_qk, xn, T, idx);
		for (uint64_t t = 0; t < T; t++) {
			const struct capy_seq *s = bt->items[e->s.item_of[t]].seq;
			uint64_t pos = e->s.pos[t];
			memcpy(page_row(e, s, pos, e->lay[l->kv_slot].idx_keys, ih * sizeof(float)), idx + t * w + ni * ih,
			       ih * sizeof(float));
			for (uint64_t h = 0; h < ni; h++) {
				float *dst = e->s.big3 + (t * ni + h) * ih;
				rmsnorm_1p(idx + t * w + h * ih, a->idx_q_norm, dst, ih, ih, eps);
				rope_apply(e, dst, pos);
			}
		}
		/* from the item's first row's position: the sequence's length in a step, anywhere for
		 * the MTP head's rows (which rewrite the head's blocks they complete) */
		for (size_t i = 0; i < bt->n_items; i++)
			qsa_update_blocks(e, bt->items[i].seq, l, e->s.pos[bt->items[i].t0],
					  e->s.pos[bt->items[i].t0] + bt->items[i].n);
		par_for_work(e, T, T * (e->s.pos[T - 1] / c->indexer_compress_ratio + 1) * ni * ih, qsa_select, &qj);
		job.sel = e->s.sel;
	}
	uint64_t work = 0;
	for (uint64_t t = 0; t < T; t++)
		work += (e->s.pos[t] + 1) * 2 * nq * hd;
	par_for_work(e, T * nkv, work, attn_heads, &job);
	if (e->tp.ranks > 1)
		tp_linear(e, &a->o, att, T, out, &e->tp.heads, e->c.head_dim);
	else
		par_linear(e, &a->o, att, T, out);
	return 0;
}
