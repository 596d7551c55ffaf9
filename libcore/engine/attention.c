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
#include "engine-impl.h"
#include "../quant/floats.h"

#include <math.h>

#define KV_GROUP 32 /* INT8 KV: one scale per 32 values */

static void kv_store(const struct capy_engine *e, struct kv_state *kv, bool is_k, uint64_t pos,
		     const float *x /* [nkv][hd] */)
{
	uint64_t n = e->c.n_kv_heads * e->c.head_dim;
	void *base = is_k ? kv->k : kv->v;

	switch (e->opts.kv) {
	case CAPY_KV_F32:
		memcpy((float *)base + pos * n, x, n * sizeof(float));
		break;
	case CAPY_KV_BF16:
		for (uint64_t i = 0; i < n; i++)
			((uint16_t *)base)[pos * n + i] = capy_f32_to_bf16(x[i]);
		break;
	case CAPY_KV_INT8: {
		float *scales = (is_k ? kv->k_scale : kv->v_scale) + pos * (n / KV_GROUP);
		int8_t *q = (int8_t *)base + pos * n;
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

/* One head's row of the cache at pos, widened to fp32. */
static void kv_load(const struct capy_engine *e, const struct kv_state *kv, bool is_k, uint64_t pos,
		    uint64_t head, float *out)
{
	uint64_t hd = e->c.head_dim, n = e->c.n_kv_heads * hd, off = pos * n + head * hd;
	const void *base = is_k ? kv->k : kv->v;

	switch (e->opts.kv) {
	case CAPY_KV_F32:
		memcpy(out, (const float *)base + off, hd * sizeof(float));
		break;
	case CAPY_KV_BF16:
		for (uint64_t i = 0; i < hd; i++)
			out[i] = capy_bf16_to_f32(((const uint16_t *)base)[off + i]);
		break;
	case CAPY_KV_INT8: {
		const float *scales = (is_k ? kv->k_scale : kv->v_scale) + off / KV_GROUP;
		const int8_t *q = (const int8_t *)base + off;
		for (uint64_t i = 0; i < hd; i++)
			out[i] = (float)q[i] * scales[i / KV_GROUP];
		break;
	}
	}
}

struct attn_job {
	struct capy_engine *e;
	struct capy_seq *s;
	const struct layer_w *l;
	struct kv_state *kv;
	const float *q;        /* [T][nq][hd] normed + rotated */
	const float *gate;     /* [T][nq * 2 * hd] (the raw q_proj output) */
	const uint8_t *sel;    /* QSA: [T][cap] key allowed, or NULL for causal */
	uint64_t T, p0, sel_stride;
	float *out;            /* [T][nq * hd] */
};

/* One (token, KV head) per item: each cached key and value row is widened once and used by
 * all the query heads that share it (GQA). Per query head the order is fixed: scores in key
 * order, softmax, values accumulated in key order. */
CAPY_HOT static void attn_heads(void *p, uint64_t b, uint64_t end, int ith)
{
	struct attn_job *j = p;
	const struct capy_model_config *c = &j->e->c;
	uint64_t hd = c->head_dim, nq = c->n_heads, nkv = c->n_kv_heads, group = nq / nkv;
	float *scores = j->e->s.attn_scores + (uint64_t)ith * j->e->s.attn_stride;
	float *kbuf = scores + group * j->e->s.attn_cap, *acc = kbuf + hd;
	const float scale = 1.0f / sqrtf((float)hd);

	for (uint64_t item = b; item < end; item++) {
		uint64_t t = item / nkv, kvh = item % nkv, pos = j->p0 + t;
		const uint8_t *sel = j->sel ? j->sel + t * j->sel_stride : NULL;
		float mx[64], sum[64];

		for (uint64_t g = 0; g < group; g++) {
			mx[g] = -INFINITY;
			sum[g] = 0;
		}
		for (uint64_t k = 0; k <= pos; k++) {
			if (sel && !sel[k]) {
				for (uint64_t g = 0; g < group; g++)
					scores[g * j->e->s.attn_cap + k] = -INFINITY;
				continue;
			}
			kv_load(j->e, j->kv, true, k, kvh, kbuf);
			for (uint64_t g = 0; g < group; g++) {
				const float *q = j->q + (t * nq + kvh * group + g) * hd;
				float sc = dot16(q, kbuf, hd) * scale;
				scores[g * j->e->s.attn_cap + k] = sc;
				mx[g] = fmaxf(mx[g], sc);
			}
		}
		for (uint64_t g = 0; g < group; g++) {
			float *sg = scores + g * j->e->s.attn_cap;
			for (uint64_t k = 0; k <= pos; k++) {
				sg[k] = sg[k] == -INFINITY ? 0 : expf(sg[k] - mx[g]);
				sum[g] += sg[k];
			}
		}
		memset(acc, 0, group * hd * sizeof(float));
		for (uint64_t k = 0; k <= pos; k++) {
			if (sel && !sel[k])
				continue;
			kv_load(j->e, j->kv, false, k, kvh, kbuf);
			for (uint64_t g = 0; g < group; g++) {
				float w = scores[g * j->e->s.attn_cap + k] / sum[g];
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

/* QSA: pool, norm and rotate every block that the new tokens completed. */
static void qsa_update_blocks(struct capy_engine *e, struct kv_state *kv, const struct attn_w *a, uint64_t len)
{
	const struct capy_model_config *c = &e->c;
	uint64_t ih = c->indexer_head_dim, ratio = c->indexer_compress_ratio;

	for (; (kv->nblocks + 1) * ratio <= len; kv->nblocks++) {
		float *blk = kv->blocks + kv->nblocks * ih;
		uint64_t start = kv->nblocks * ratio;
		for (uint64_t i = 0; i < ih; i++) {
			float s = 0;
			for (uint64_t t = 0; t < ratio; t++)
				s += kv->idx_keys[(start + t) * ih + i];
			blk[i] = s / (float)ratio;
		}
		rmsnorm_1p(blk, a->idx_k_norm, blk, ih, ih, (float)c->rms_norm_eps);
		rope_apply(e, blk, start);
	}
}

struct qsa_job {
	struct capy_engine *e;
	const struct kv_state *kv;
	const float *iq;  /* [T][ni][ih] normed + rotated */
	uint64_t T, p0, stride;
	uint8_t *sel;
};

static void qsa_select(void *p, uint64_t b, uint64_t end, int ith)
{
	struct qsa_job *j = p;
	const struct capy_model_config *c = &j->e->c;
	uint64_t ih = c->indexer_head_dim, ni = c->indexer_n_heads, ratio = c->indexer_compress_ratio;
	uint64_t topk = c->indexer_budget / ratio;
	float *scores = j->e->s.attn_scores + (uint64_t)ith * j->e->s.attn_stride;
	const float inv = 1.0f / sqrtf((float)ih);

	for (uint64_t t = b; t < end; t++) {
		uint64_t pos = j->p0 + t, nb = (pos + 1) / ratio;
		uint8_t *sel = j->sel + t * j->stride;
		memset(sel, 0, pos + 1);
		for (uint64_t k = nb * ratio; k <= pos; k++)
			sel[k] = 1; /* the unfinished tail */
		for (uint64_t blk = 0; blk < nb; blk++) {
			float s = 0;
			for (uint64_t h = 0; h < ni; h++) {
				const float *q = j->iq + (t * ni + h) * ih, *k = j->kv->blocks + blk * ih;
				float d = 0;
				for (uint64_t i = 0; i < ih; i++)
					d += q[i] * k[i];
				s += d > 0 ? d : 0;
			}
			scores[blk] = s * inv;
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

int attention_forward(struct capy_engine *e, struct capy_seq *s, const struct layer_w *l,
		      const float *xn, uint64_t T, float *out, struct capy_err *err)
{
	const struct capy_model_config *c = &e->c;
	const struct attn_w *a = &l->attn;
	struct kv_state *kv = &s->kv[l->kv_slot];
	uint64_t hd = c->head_dim, nq = c->n_heads, nkv = c->n_kv_heads, p0 = s->len;
	float *qg = e->s.big1, *k = e->s.big2, *v = e->s.big3, *q = e->s.tmp, *att = e->s.mix;
	float eps = (float)c->rms_norm_eps;
	struct attn_job job = { e, s, l, kv, q, qg, NULL, T, p0, 0, att };

	(void)err;
	par_linear(e, &a->q, xn, T, qg);
	par_linear(e, &a->k, xn, T, k);
	par_linear(e, &a->v, xn, T, v);
	for (uint64_t t = 0; t < T; t++) {
		for (uint64_t h = 0; h < nq; h++) {
			float *dst = q + (t * nq + h) * hd;
			rmsnorm_1p(qg + t * nq * 2 * hd + h * 2 * hd, a->q_norm, dst, hd, hd, eps);
			rope_apply(e, dst, p0 + t);
		}
		for (uint64_t h = 0; h < nkv; h++) {
			float *kh = k + (t * nkv + h) * hd;
			rmsnorm_1p(kh, a->k_norm, kh, hd, hd, eps);
			rope_apply(e, kh, p0 + t);
		}
		kv_store(e, kv, true, p0 + t, k + t * nkv * hd);
		kv_store(e, kv, false, p0 + t, v + t * nkv * hd);
	}
	if (a->qsa) {
		uint64_t ih = c->indexer_head_dim, ni = c->indexer_n_heads, w = (ni + 1) * ih;
		float *idx = e->s.big2; /* k and v are in the cache now */
		struct qsa_job qj = { e, kv, e->s.big3, T, p0, s->cap, e->s.sel };
		par_linear(e, &a->idx_qk, xn, T, idx);
		for (uint64_t t = 0; t < T; t++) {
			memcpy(kv->idx_keys + (p0 + t) * ih, idx + t * w + ni * ih, ih * sizeof(float));
			for (uint64_t h = 0; h < ni; h++) {
				float *dst = e->s.big3 + (t * ni + h) * ih;
				rmsnorm_1p(idx + t * w + h * ih, a->idx_q_norm, dst, ih, ih, eps);
				rope_apply(e, dst, p0 + t);
			}
		}
		qsa_update_blocks(e, kv, a, p0 + T);
		par_for(e, T, qsa_select, &qj);
		job.sel = e->s.sel;
		job.sel_stride = s->cap;
	}
	par_for(e, T * nkv, attn_heads, &job);
	par_linear(e, &a->o, att, T, out);
	return 0;
}
