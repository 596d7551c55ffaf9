/* u-cuda-attention.c - the attention kernels (kernels/attention.cu) against a plain C
 * reference that mirrors the CPU backend (libcore/backend/cpu/attention.c: kv_store,
 * kv_next, attn_heads, qsa_block, qsa_update_blocks, qsa_select; state.c: cpu_pages_layout;
 * ops.c: rmsnorm_1p, rope_apply).
 *
 * Every case builds a pool of attention-cache pages whose ids are shuffled (a wrong page
 * lookup reads or writes someone else's rows), fills the cache of several items up to
 * their len on the host, runs a step mixing a prefill with decode rows, and checks:
 * the stored bytes bitwise (the whole pool: nothing else may change), attention within
 * 1e-5 relative, the split (ws) and unsplit (ws NULL) paths bitwise equal, each item's
 * rows bitwise equal to the same item run alone (batch invariance); for QSA the stored
 * keys bitwise, the pooled blocks within 1e-5, the selection masks equal.
 */
#include "test.h"
#include "cuda-test.h"
#include "quant/floats.h"

#include <string.h>

#define KV_GROUP 32
#define MAX_ITEMS 8

struct item_spec {
	uint64_t n, len; /* n rows at positions len .. len + n - 1 */
};

struct qsa_spec {
	uint64_t idh, ratio, ni, budget, rot;
};

/* One attention layer's page layout, as cpu_pages_layout makes it for one KV layer. */
struct layout {
	struct ck_kv_layer l;
	uint64_t P, kv_row, page_bytes;
	bool qsa;
	struct qsa_spec q;
};

static uint64_t align_up(uint64_t x, uint64_t a)
{
	return (x + a - 1) / a * a;
}

static uint64_t kv_elem(enum ck_kv_dtype dt)
{
	return dt == CK_KV_F32 ? 4 : dt == CK_KV_BF16 ? 2 : 1;
}

static void make_layout(struct layout *L, enum ck_kv_dtype dt, uint64_t nkv, uint64_t hd, const struct qsa_spec *q)
{
	uint64_t n = nkv * hd, off = 0, P = 64;

	memset(L, 0, sizeof(*L));
	L->qsa = q != NULL;
	if (q) {
		L->q = *q;
		P = align_up(P, q->ratio);
	}
	L->P = P;
	L->kv_row = n * kv_elem(dt);
	L->l.dtype = dt;
	L->l.nkv = nkv;
	L->l.hd = hd;
	L->l.k = off;
	off = align_up(off + P * L->kv_row, 64);
	L->l.v = off;
	off = align_up(off + P * L->kv_row, 64);
	if (dt == CK_KV_INT8) {
		L->l.k_scale = off;
		off = align_up(off + P * (n / KV_GROUP) * sizeof(float), 64);
		L->l.v_scale = off;
		off = align_up(off + P * (n / KV_GROUP) * sizeof(float), 64);
	}
	if (q) {
		L->l.idx_keys = off;
		off = align_up(off + P * q->idh * sizeof(float), 64);
		L->l.blocks = off;
		off = align_up(off + (P / q->ratio) * q->idh * sizeof(float), 64);
	}
	L->page_bytes = off;
}

/* A step over a page pool: host arrays, their device copies and the ck_step. */
struct step {
	uint64_t T;
	uint32_t n_items;
	struct item_spec it[MAX_ITEMS];
	int64_t pos[4096], t0[MAX_ITEMS], n[MAX_ITEMS], len[MAX_ITEMS];
	int32_t item[4096], ids[4096];
	uint32_t bt_off[MAX_ITEMS];
	void *d_pos, *d_item, *d_ids, *d_t0, *d_n, *d_len, *d_bt_off;
	struct ck_step st;
};

struct pool {
	struct layout L;
	uint32_t npages;
	uint32_t *bt;    /* host block tables of all items, concatenated */
	uint32_t bt_len;
	uint8_t *host;   /* the reference's pages */
	uint8_t *dev;
	uint32_t *d_bt;
};

static uint64_t rng_u64(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Pages for every item's len + n tokens, ids shuffled, plus two spare pages nobody owns;
 * everything starts as the same poison bytes on both sides. */
static void pool_init(struct pool *p, const struct layout *L, const struct item_spec *it, uint32_t n_items,
		      uint32_t *bt_off, uint64_t seed)
{
	uint64_t s = seed * 0x2545f4914f6cdd1dull + 7;
	uint32_t need = 0;

	p->L = *L;
	for (uint32_t i = 0; i < n_items; i++)
		need += (uint32_t)((it[i].len + it[i].n + L->P - 1) / L->P);
	p->npages = need + 2;
	p->bt_len = need;
	uint32_t *perm = malloc(p->npages * sizeof(*perm));
	for (uint32_t i = 0; i < p->npages; i++)
		perm[i] = i;
	for (uint32_t i = p->npages - 1; i > 0; i--) {
		uint32_t j = (uint32_t)(rng_u64(&s) % (i + 1)), x = perm[i];
		perm[i] = perm[j];
		perm[j] = x;
	}
	p->bt = malloc((need ? need : 1) * sizeof(*p->bt));
	memcpy(p->bt, perm, need * sizeof(*p->bt));
	free(perm);
	uint32_t off = 0;
	for (uint32_t i = 0; i < n_items; i++) {
		bt_off[i] = off;
		off += (uint32_t)((it[i].len + it[i].n + L->P - 1) / L->P);
	}
	size_t bytes = (size_t)p->npages * L->page_bytes;
	p->host = malloc(bytes);
	memset(p->host, 0xa5, bytes);
	p->dev = NULL;
	p->d_bt = dev_from(p->bt, p->bt_len * sizeof(uint32_t));
}

static void pool_upload(struct pool *p)
{
	p->dev = dev_from(p->host, (size_t)p->npages * p->L.page_bytes);
}

static void pool_free(struct pool *p)
{
	free(p->bt);
	free(p->host);
	CUDA_OK(cudaFree(p->dev));
	CUDA_OK(cudaFree(p->d_bt));
}

/* A step over items it[0..n_items) (their block tables at bt_off), with device copies. */
static void step_init(struct step *s, const struct item_spec *it, uint32_t n_items, const uint32_t *bt_off,
		      const struct pool *p)
{
	int64_t max_pos = 0;

	memset(s, 0, sizeof(*s));
	s->n_items = n_items;
	for (uint32_t i = 0; i < n_items; i++) {
		s->it[i] = it[i];
		s->t0[i] = (int64_t)s->T;
		s->n[i] = (int64_t)it[i].n;
		s->len[i] = (int64_t)it[i].len;
		s->bt_off[i] = bt_off[i];
		for (uint64_t r = 0; r < it[i].n; r++) {
			s->pos[s->T] = (int64_t)(it[i].len + r);
			s->item[s->T] = (int32_t)i;
			s->ids[s->T] = 0;
			if (s->pos[s->T] > max_pos)
				max_pos = s->pos[s->T];
			s->T++;
		}
	}
	s->d_pos = dev_from(s->pos, s->T * sizeof(int64_t));
	s->d_item = dev_from(s->item, s->T * sizeof(int32_t));
	s->d_ids = dev_from(s->ids, s->T * sizeof(int32_t));
	s->d_t0 = dev_from(s->t0, n_items * sizeof(int64_t));
	s->d_n = dev_from(s->n, n_items * sizeof(int64_t));
	s->d_len = dev_from(s->len, n_items * sizeof(int64_t));
	s->d_bt_off = dev_from(s->bt_off, n_items * sizeof(uint32_t));
	s->st = (struct ck_step){
		.T = s->T,
		.n_items = n_items,
		.ids = s->d_ids,
		.pos = s->d_pos,
		.item = s->d_item,
		.t0 = s->d_t0,
		.n = s->d_n,
		.len = s->d_len,
		.bt_off = s->d_bt_off,
		.block_table = p->d_bt,
		.pages = p->dev,
		.page_bytes = p->L.page_bytes,
		.page_tokens = p->L.P,
		.max_pos = max_pos,
	};
}

static void step_free(struct step *s)
{
	void *d[] = { s->d_pos, s->d_item, s->d_ids, s->d_t0, s->d_n, s->d_len, s->d_bt_off };
	for (size_t i = 0; i < sizeof(d) / sizeof(d[0]); i++)
		CUDA_OK(cudaFree(d[i]));
}

/* --- the C reference ------------------------------------------------------------------ */

/* page_field / page_row of cpu-impl.h, over the host pool. */
static uint8_t *ref_field(const struct pool *p, uint32_t bt_off, uint64_t pos, uint64_t field, uint64_t row,
			  uint64_t i)
{
	return p->host + (size_t)p->bt[bt_off + pos / p->L.P] * p->L.page_bytes + field + i * row;
}

static uint8_t *ref_row(const struct pool *p, uint32_t bt_off, uint64_t pos, uint64_t field, uint64_t row)
{
	return ref_field(p, bt_off, pos, field, row, pos % p->L.P);
}

/* kv_store: token pos's K or V row x [nkv][hd]. */
static void ref_kv_store(struct pool *p, uint32_t bt_off, bool is_k, uint64_t pos, const float *x)
{
	const struct ck_kv_layer *l = &p->L.l;
	uint64_t n = l->nkv * l->hd;
	uint8_t *row = ref_row(p, bt_off, pos, is_k ? l->k : l->v, p->L.kv_row);

	switch (l->dtype) {
	case CK_KV_F32:
		memcpy(row, x, n * sizeof(float));
		break;
	case CK_KV_BF16:
		for (uint64_t i = 0; i < n; i++)
			((uint16_t *)row)[i] = capy_f32_to_bf16(x[i]);
		break;
	case CK_KV_INT8: {
		float *scales = (float *)ref_row(p, bt_off, pos, is_k ? l->k_scale : l->v_scale,
						 (n / KV_GROUP) * sizeof(float));
		int8_t *q = (int8_t *)row;
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

/* kv_next: one head's row of token pos, widened. */
static void ref_kv_get(const struct pool *p, uint32_t bt_off, bool is_k, uint64_t pos, uint64_t head, float *out)
{
	const struct ck_kv_layer *l = &p->L.l;
	uint64_t hd = l->hd, n = l->nkv * hd;
	const uint8_t *row = ref_row(p, bt_off, pos, is_k ? l->k : l->v, p->L.kv_row);

	switch (l->dtype) {
	case CK_KV_F32:
		memcpy(out, row + head * hd * sizeof(float), hd * sizeof(float));
		break;
	case CK_KV_BF16:
		for (uint64_t i = 0; i < hd; i++)
			out[i] = capy_bf16_to_f32(((const uint16_t *)row)[head * hd + i]);
		break;
	case CK_KV_INT8: {
		const float *scales = (const float *)ref_row(p, bt_off, pos, is_k ? l->k_scale : l->v_scale,
							     (n / KV_GROUP) * sizeof(float)) + head * hd / KV_GROUP;
		for (uint64_t i = 0; i < hd; i++)
			out[i] = (float)((const int8_t *)row)[head * hd + i] * scales[i / KV_GROUP];
		break;
	}
	}
}

/* attn_heads without the output gate: per (row, KV head), scores in key order, softmax,
 * values in key order. */
static void ref_attention(const struct pool *p, const struct step *s, const float *q, uint64_t nq, const uint8_t *sel,
			  uint64_t sel_stride, float *out)
{
	uint64_t hd = p->L.l.hd, nkv = p->L.l.nkv, group = nq / nkv, cap = (uint64_t)s->st.max_pos + 1;
	float *scores = malloc(group * cap * sizeof(float)), *kbuf = malloc(hd * sizeof(float));
	float *acc = malloc(group * hd * sizeof(float));
	const float scale = 1.0f / sqrtf((float)hd);

	for (uint64_t t = 0; t < s->T; t++) {
		uint64_t pos = (uint64_t)s->pos[t];
		uint32_t bo = s->bt_off[s->item[t]];
		const uint8_t *sl = sel ? sel + t * sel_stride : NULL;
		for (uint64_t kvh = 0; kvh < nkv; kvh++) {
			float mx[16], sum[16];
			for (uint64_t g = 0; g < group; g++) {
				mx[g] = -INFINITY;
				sum[g] = 0;
			}
			for (uint64_t k = 0; k <= pos; k++) {
				if (sl && !sl[k]) {
					for (uint64_t g = 0; g < group; g++)
						scores[g * cap + k] = -INFINITY;
					continue;
				}
				ref_kv_get(p, bo, true, k, kvh, kbuf);
				for (uint64_t g = 0; g < group; g++) {
					const float *qh = q + (t * nq + kvh * group + g) * hd;
					float d = 0;
					for (uint64_t i = 0; i < hd; i++)
						d += qh[i] * kbuf[i];
					scores[g * cap + k] = d * scale;
					mx[g] = fmaxf(mx[g], d * scale);
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
			for (uint64_t k = 0; k <= pos; k++) {
				if (sl && !sl[k])
					continue;
				ref_kv_get(p, bo, false, k, kvh, kbuf);
				for (uint64_t g = 0; g < group; g++) {
					float w = scores[g * cap + k] / sum[g];
					for (uint64_t i = 0; i < hd; i++)
						acc[g * hd + i] += w * kbuf[i];
				}
			}
			for (uint64_t g = 0; g < group; g++)
				memcpy(out + (t * nq + kvh * group + g) * hd, acc + g * hd, hd * sizeof(float));
		}
	}
	free(scores);
	free(kbuf);
	free(acc);
}

/* qsa_block: block blk's pooled key row (in pool bytes `base`: the host's or a copy of the
 * device's). */
static float *ref_block(const struct pool *p, uint8_t *base, uint32_t bt_off, uint64_t blk)
{
	uint64_t ratio = p->L.q.ratio, ih = p->L.q.idh, first = blk * ratio;

	return (float *)(base + (size_t)p->bt[bt_off + first / p->L.P] * p->L.page_bytes + p->L.l.blocks +
			 ((first % p->L.P) / ratio) * ih * sizeof(float));
}

/* qsa_update_blocks with rmsnorm_1p and rope_apply. */
static void ref_qsa_update(struct pool *p, uint32_t bt_off, uint64_t from, uint64_t to, const float *knorm, float eps,
			   const float *inv_freq)
{
	uint64_t ih = p->L.q.idh, ratio = p->L.q.ratio, half = p->L.q.rot / 2;

	for (uint64_t b = from / ratio; (b + 1) * ratio <= to; b++) {
		float *blk = ref_block(p, p->host, bt_off, b), ss = 0, r;
		uint64_t start = b * ratio;
		for (uint64_t i = 0; i < ih; i++) {
			float sum = 0;
			for (uint64_t t = 0; t < ratio; t++)
				sum += ((const float *)ref_row(p, bt_off, start + t, p->L.l.idx_keys, ih * sizeof(float)))[i];
			blk[i] = sum / (float)ratio;
		}
		for (uint64_t i = 0; i < ih; i++)
			ss += blk[i] * blk[i];
		r = 1.0f / sqrtf(ss / (float)ih + eps);
		for (uint64_t i = 0; i < ih; i++)
			blk[i] = (blk[i] * r) * knorm[i];
		for (uint64_t i = 0; i < half; i++) {
			float ang = (float)start * inv_freq[i], c = cosf(ang), sn = sinf(ang);
			float x1 = blk[i], x2 = blk[i + half];
			blk[i] = x1 * c - x2 * sn;
			blk[i + half] = x2 * c + x1 * sn;
		}
	}
}

/* qsa_select over the block keys in `base`. */
static void ref_qsa_select(const struct pool *p, uint8_t *base, const struct step *s, const float *iq, uint64_t topk,
			   uint8_t *sel, uint64_t stride)
{
	uint64_t ih = p->L.q.idh, ni = p->L.q.ni, ratio = p->L.q.ratio;
	float *scores = malloc(((uint64_t)s->st.max_pos / ratio + 1) * sizeof(float));
	const float inv = 1.0f / sqrtf((float)ih);

	for (uint64_t t = 0; t < s->T; t++) {
		uint64_t pos = (uint64_t)s->pos[t], nb = (pos + 1) / ratio;
		uint32_t bo = s->bt_off[s->item[t]];
		uint8_t *sl = sel + t * stride;
		memset(sl, 0, pos + 1);
		for (uint64_t k = nb * ratio; k <= pos; k++)
			sl[k] = 1;
		for (uint64_t blk = 0; blk < nb; blk++) {
			const float *kb = ref_block(p, base, bo, blk);
			float sum = 0;
			for (uint64_t h = 0; h < ni; h++) {
				const float *qh = iq + (t * ni + h) * ih;
				float d = 0;
				for (uint64_t i = 0; i < ih; i++)
					d += qh[i] * kb[i];
				sum += d > 0 ? d : 0;
			}
			scores[blk] = sum * inv;
		}
		for (uint64_t c = 0; c < (topk < nb ? topk : nb); c++) {
			uint64_t best = UINT64_MAX;
			for (uint64_t blk = 0; blk < nb; blk++)
				if (scores[blk] != -INFINITY && (best == UINT64_MAX || scores[blk] > scores[best]))
					best = blk;
			scores[best] = -INFINITY;
			memset(sl + best * ratio, 1, ratio);
		}
	}
	free(scores);
}

/* --- cases ---------------------------------------------------------------------------- */

static const char *dt_name(enum ck_kv_dtype dt)
{
	return dt == CK_KV_F32 ? "f32" : dt == CK_KV_BF16 ? "bf16" : "int8";
}

static float *rand_buf(size_t n, uint64_t seed, float scale)
{
	float *x = malloc((n ? n : 1) * sizeof(float));
	test_fill(x, n, seed, scale);
	return x;
}

/* Pool bytes differing between host and device, outside the QSA block rows; the block
 * rows' floats are compared within a relative tolerance (RoPE's cosf / sinf differ in the
 * last bits between CUDA and glibc). */
static size_t pool_diff(const struct pool *p, const uint8_t *dev, double *blk_err)
{
	size_t bad = 0;
	uint64_t b0 = p->L.l.blocks, b1 = p->L.qsa ? b0 + (p->L.P / p->L.q.ratio) * p->L.q.idh * sizeof(float) : 0;

	*blk_err = 0;
	for (uint32_t pg = 0; pg < p->npages; pg++) {
		const uint8_t *h = p->host + (size_t)pg * p->L.page_bytes, *d = dev + (size_t)pg * p->L.page_bytes;
		for (uint64_t i = 0; i < p->L.page_bytes; i++) {
			if (p->L.qsa && i >= b0 && i < b1)
				continue;
			bad += h[i] != d[i];
		}
		if (p->L.qsa) {
			for (uint64_t i = b0; i + 4 <= b1; i += 4) {
				float a, b;
				memcpy(&a, h + i, 4);
				memcpy(&b, d + i, 4);
				if (memcmp(&a, &b, 4) == 0)
					continue;
				double e = fabs((double)a - b) / (fabs((double)a) > 1e-3 ? fabs((double)a) : 1e-3);
				if (isnan(e) || e > *blk_err)
					*blk_err = isnan(e) ? INFINITY : e;
			}
		}
	}
	return bad;
}

struct acase {
	const char *name;
	enum ck_kv_dtype dt;
	uint64_t nkv, hd, nq;
	const struct qsa_spec *qsa;
	uint32_t n_items;
	struct item_spec it[MAX_ITEMS];
};

static float *dev_f(const float *x, size_t n)
{
	return dev_from(x, n * sizeof(float));
}

/* Mark the step's rows of items with >= CK_GROUPED_MIN_ROWS rows as the engine's stage()
 * does, so ck_attention gives them to the flash kernel where it can. Returns the device
 * flags (to free). */
static uint8_t *step_group(struct step *s)
{
	uint8_t fl[4096];
	uint64_t ng = 0, mx = 0;

	for (uint64_t t = 0; t < s->T && t < sizeof(fl); t++) {
		fl[t] = s->n[s->item[t]] >= CK_GROUPED_MIN_ROWS;
		ng += fl[t];
	}
	for (uint32_t i = 0; i < s->n_items; i++)
		mx = (uint64_t)s->n[i] > mx ? (uint64_t)s->n[i] : mx;
	uint8_t *d = dev_from(fl, s->T);
	s->st.grouped = d;
	s->st.n_grouped = ng;
	s->st.max_item_n = mx;
	return d;
}

/* The prefill rows on the tensor cores (BF16 cache, head_dim 64/128/256): against the
 * reference within 2e-5, the other rows bitwise as before, each item alone bitwise as in the
 * mixed step, and an item's rows in two chunks (two steps over the same cache) bitwise as in
 * one. Returns the worst relative error over the flash rows, or -1 where no row is flash. */
static double flash_checks(const struct acase *c, const struct pool *p, struct step *s, const uint32_t *bt_off,
			   const struct layout *L, const float *d_q, const float *q, const uint8_t *d_sel,
			   const uint8_t *sel, uint64_t stride, void *d_ws, const float *o1, const float *ref,
			   uint64_t seed)
{
	const uint64_t nq = c->nq, hd = c->hd, on = s->T * nq * hd;
	bool any = false;
	double worst = 0;

	(void)q;
	(void)sel;
	if (c->dt != CK_KV_BF16 || (hd != 64 && hd != 128 && hd != 256) || 64 % (nq / c->nkv))
		return -1;
	for (uint32_t i = 0; i < c->n_items; i++)
		any |= c->it[i].n >= CK_GROUPED_MIN_ROWS;
	if (!any)
		return -1;
	uint8_t *dfl = step_group(s);
	float *o3 = malloc(on * sizeof(float)), *d_o3 = dev_from(NULL, on * sizeof(float));
	CK_OK(ck_attention(&s->st, &L->l, d_q, nq, d_sel, stride, d_o3, d_ws, NULL));
	dev_to(o3, d_o3, on * sizeof(float));
	for (uint32_t i = 0; i < c->n_items; i++) {
		size_t off = (size_t)s->t0[i] * nq * hd, m = c->it[i].n * nq * hd;
		if (c->it[i].n >= CK_GROUPED_MIN_ROWS) {
			double e = rel_err(o3 + off, ref + off, m);
			CHECK_MSG(e < 2e-5, "%s seed %" PRIu64 " item %u flash: rel err %g", c->name, seed, i, e);
			worst = e > worst ? e : worst;
		} else {
			size_t b = bits_differ(o3 + off, o1 + off, m);
			CHECK_MSG(b == 0, "%s seed %" PRIu64 " item %u: %zu floats changed beside flash rows", c->name,
				  seed, i, b);
		}
	}
	for (uint32_t i = 0; i < c->n_items; i++) {
		const struct item_spec *it = &c->it[i];
		size_t off = (size_t)s->t0[i] * nq * hd, m = it->n * nq * hd;
		struct step *s1 = calloc(1, sizeof(*s1));
		float *oi = malloc(m * sizeof(float)), *d_oi = dev_from(NULL, m * sizeof(float));
		step_init(s1, it, 1, &bt_off[i], p);
		uint8_t *f1 = step_group(s1);
		CK_OK(ck_attention(&s1->st, &L->l, d_q + off, nq, d_sel ? d_sel + (uint64_t)s->t0[i] * stride : NULL,
				   stride, d_oi, d_ws, NULL));
		dev_to(oi, d_oi, m * sizeof(float));
		size_t b = bits_differ(oi, o3 + off, m);
		CHECK_MSG(b == 0, "%s seed %" PRIu64 " item %u alone (flash): %zu floats differ", c->name, seed, i, b);
		step_free(s1);
		CUDA_OK(cudaFree(f1));
		if (it->n >= 2 * CK_GROUPED_MIN_ROWS) { /* two chunks: rows [0, h) then [h, n) */
			const uint64_t h = it->n / 2;
			const struct item_spec a[2] = { { h, it->len }, { it->n - h, it->len + h } };
			for (int part = 0; part < 2; part++) {
				step_init(s1, &a[part], 1, &bt_off[i], p);
				f1 = step_group(s1);
				const uint64_t r = part ? h : 0;
				CK_OK(ck_attention(&s1->st, &L->l, d_q + off + r * nq * hd, nq,
						   d_sel ? d_sel + ((uint64_t)s->t0[i] + r) * stride : NULL, stride,
						   d_oi + r * nq * hd, d_ws, NULL));
				step_free(s1);
				CUDA_OK(cudaFree(f1));
			}
			dev_to(oi, d_oi, m * sizeof(float));
			b = bits_differ(oi, o3 + off, m);
			CHECK_MSG(b == 0, "%s seed %" PRIu64 " item %u in two chunks (flash): %zu floats differ", c->name,
				  seed, i, b);
		}
		free(s1);
		free(oi);
		CUDA_OK(cudaFree(d_oi));
	}
	s->st.grouped = NULL;
	s->st.n_grouped = 0;
	CUDA_OK(cudaFree(dfl));
	CUDA_OK(cudaFree(d_o3));
	free(o3);
	return worst;
}

static void run_case(const struct acase *c, uint64_t seed)
{
	const uint64_t nkv = c->nkv, hd = c->hd, nq = c->nq, n = nkv * hd;
	const struct qsa_spec *qs = c->qsa;
	const float eps = 1e-6f;
	struct layout L;
	struct pool p;
	struct step *s = calloc(1, sizeof(*s)), *s1 = calloc(1, sizeof(*s1));
	uint32_t bt_off[MAX_ITEMS];
	uint64_t rs = seed * 1000003;
	float *knorm = NULL, *inv_freq = NULL, *d_knorm = NULL, *d_inv = NULL;
	char items[256] = "";

	make_layout(&L, c->dt, nkv, hd, qs);
	pool_init(&p, &L, c->it, c->n_items, bt_off, seed);
	if (qs) {
		knorm = rand_buf(qs->idh, rs++, 0.5f);
		for (uint64_t i = 0; i < qs->idh; i++)
			knorm[i] += 1.0f;
		inv_freq = malloc(qs->rot / 2 * sizeof(float) + 1);
		for (uint64_t i = 0; i < qs->rot / 2; i++)
			inv_freq[i] = (float)pow(10000.0, -2.0 * (double)i / (double)qs->rot);
		d_knorm = dev_f(knorm, qs->idh);
		d_inv = dev_f(inv_freq, qs->rot / 2);
	}

	/* The cache before the step: every item's positions below its len, on the host. */
	for (uint32_t i = 0; i < c->n_items; i++) {
		uint64_t len = c->it[i].len;
		float *kh = rand_buf(len * n, rs++, 1.0f), *vh = rand_buf(len * n, rs++, 1.0f);
		for (uint64_t pos = 0; pos < len; pos++) {
			ref_kv_store(&p, bt_off[i], true, pos, kh + pos * n);
			ref_kv_store(&p, bt_off[i], false, pos, vh + pos * n);
		}
		free(kh);
		free(vh);
		if (qs) {
			float *raw = rand_buf(len * qs->idh, rs++, 1.0f);
			for (uint64_t pos = 0; pos < len; pos++)
				memcpy(ref_row(&p, bt_off[i], pos, L.l.idx_keys, qs->idh * sizeof(float)), raw + pos * qs->idh,
				       qs->idh * sizeof(float));
			free(raw);
			ref_qsa_update(&p, bt_off[i], 0, len, knorm, eps, inv_freq);
		}
		snprintf(items + strlen(items), sizeof(items) - strlen(items), "%s%" PRIu64 "@%" PRIu64,
			 i ? "," : "", c->it[i].n, len);
	}
	pool_upload(&p);
	step_init(s, c->it, c->n_items, bt_off, &p);
	const uint64_t T = s->T, max_ctx = (uint64_t)s->st.max_pos + 1;

	/* ck_kv_store (+ the QSA keys and blocks) against the reference: the whole pool. */
	float *k = rand_buf(T * n, rs++, 1.0f), *v = rand_buf(T * n, rs++, 1.0f);
	float *d_k = dev_f(k, T * n), *d_v = dev_f(v, T * n);
	CK_OK(ck_kv_store(&s->st, &L.l, d_k, d_v, NULL));
	for (uint64_t t = 0; t < T; t++) {
		ref_kv_store(&p, bt_off[s->item[t]], true, (uint64_t)s->pos[t], k + t * n);
		ref_kv_store(&p, bt_off[s->item[t]], false, (uint64_t)s->pos[t], v + t * n);
	}
	float *idx = NULL, *d_idx = NULL;
	if (qs) {
		uint64_t w = (qs->ni + 1) * qs->idh;
		idx = rand_buf(T * w, rs++, 1.0f);
		d_idx = dev_f(idx, T * w);
		CK_OK(ck_qsa_store_keys(&s->st, &L.l, d_idx, w, qs->ni * qs->idh, qs->idh, NULL));
		CK_OK(ck_qsa_update_blocks(&s->st, &L.l, qs->idh, qs->ratio, d_knorm, eps, qs->rot, d_inv, NULL));
		for (uint64_t t = 0; t < T; t++)
			memcpy(ref_row(&p, bt_off[s->item[t]], (uint64_t)s->pos[t], L.l.idx_keys, qs->idh * sizeof(float)),
			       idx + t * w + qs->ni * qs->idh, qs->idh * sizeof(float));
		for (uint32_t i = 0; i < c->n_items; i++)
			ref_qsa_update(&p, bt_off[i], c->it[i].len, c->it[i].len + c->it[i].n, knorm, eps, inv_freq);
	}
	size_t pool_bytes = (size_t)p.npages * L.page_bytes;
	uint8_t *dpool = malloc(pool_bytes);
	double blk_err = 0;
	dev_to(dpool, p.dev, pool_bytes);
	size_t pool_bad = pool_diff(&p, dpool, &blk_err);
	CHECK_MSG(pool_bad == 0, "%s seed %" PRIu64 ": %zu pool bytes differ", c->name, seed, pool_bad);
	/* The pooled keys are rotated with CUDA's cosf/sinf, which differ from glibc's in the last
	 * bits at large angles: 1.2e-5 was seen on the H200, so the bound is 5e-5. */
	CHECK_MSG(blk_err < 5e-5, "%s seed %" PRIu64 ": QSA block keys rel err %g", c->name, seed, blk_err);

	/* QSA selection: the reference over the device's block keys (bit-identical scores). */
	uint8_t *sel = NULL, *d_sel = NULL;
	uint64_t stride = align_up(max_ctx, 16), n_sel = 0;
	if (qs) {
		uint64_t topk = qs->budget / qs->ratio;
		float *iq = rand_buf(T * qs->ni * qs->idh, rs++, 1.0f);
		uint8_t *ref_sel = malloc(T * stride), *ws_sel;
		if (c->n_items > 1) /* all scores 0 for item 1's first row: ties everywhere */
			memset(iq + (uint64_t)s->t0[1] * qs->ni * qs->idh, 0, qs->ni * qs->idh * sizeof(float));
		float *d_iq = dev_f(iq, T * qs->ni * qs->idh);
		d_sel = dev_from(NULL, T * stride);
		ws_sel = dev_from(NULL, ck_qsa_select_ws_bytes(T, max_ctx, qs->ratio));
		CK_OK(ck_qsa_select(&s->st, &L.l, d_iq, qs->ni, qs->idh, qs->ratio, topk, d_sel, stride, ws_sel, NULL));
		sel = malloc(T * stride);
		dev_to(sel, d_sel, T * stride);
		memset(ref_sel, 0xff, T * stride);
		ref_qsa_select(&p, dpool, s, iq, topk, ref_sel, stride);
		size_t diff = 0;
		for (uint64_t i = 0; i < T * stride; i++) {
			diff += sel[i] != ref_sel[i];
			n_sel += sel[i] == 1;
		}
		CHECK_MSG(diff == 0, "%s seed %" PRIu64 ": %zu selection bytes differ", c->name, seed, diff);
		free(iq);
		free(ref_sel);
		CUDA_OK(cudaFree(d_iq));
		CUDA_OK(cudaFree(ws_sel));
	}

	/* Attention: split (ws) and unsplit (NULL) paths, against the reference. */
	size_t on = T * nq * hd, ws_bytes = ck_attention_ws_bytes(T, nq, hd, max_ctx);
	float *q = rand_buf(on, rs++, 2.0f), *ref = malloc(on * sizeof(float));
	float *o1 = malloc(on * sizeof(float)), *o2 = malloc(on * sizeof(float)), *oi = malloc(on * sizeof(float));
	float *d_q = dev_f(q, on), *d_o1 = dev_from(NULL, on * sizeof(float)), *d_o2 = dev_from(NULL, on * sizeof(float));
	void *d_ws = ws_bytes ? dev_from(NULL, ws_bytes) : NULL;
	CK_OK(ck_attention(&s->st, &L.l, d_q, nq, d_sel, stride, d_o1, d_ws, NULL));
	CK_OK(ck_attention(&s->st, &L.l, d_q, nq, d_sel, stride, d_o2, NULL, NULL));
	dev_to(o1, d_o1, on * sizeof(float));
	dev_to(o2, d_o2, on * sizeof(float));
	ref_attention(&p, s, q, nq, sel, stride, ref);
	double worst = 0;
	size_t split_bits = bits_differ(o1, o2, on), inv_bits = 0;
	for (uint32_t i = 0; i < c->n_items; i++) {
		size_t off = (size_t)s->t0[i] * nq * hd, m = c->it[i].n * nq * hd;
		double e = rel_err(o1 + off, ref + off, m);
		CHECK_MSG(e < 1e-5, "%s seed %" PRIu64 " item %u: rel err %g", c->name, seed, i, e);
		if (!(e <= worst))
			worst = e;
	}
	CHECK_MSG(split_bits == 0, "%s seed %" PRIu64 ": split and unsplit differ in %zu floats", c->name, seed,
		  split_bits);

	/* Batch invariance: each item alone gives its rows of the mixed step, bit for bit. */
	for (uint32_t i = 0; i < c->n_items; i++) {
		size_t off = (size_t)s->t0[i] * nq * hd, m = c->it[i].n * nq * hd;
		float *d_oi = dev_from(NULL, m * sizeof(float));
		step_init(s1, &c->it[i], 1, &bt_off[i], &p);
		CK_OK(ck_attention(&s1->st, &L.l, d_q + off, nq, d_sel ? d_sel + (uint64_t)s->t0[i] * stride : NULL, stride,
				   d_oi, d_ws, NULL));
		dev_to(oi, d_oi, m * sizeof(float));
		size_t b = bits_differ(oi, o1 + off, m);
		CHECK_MSG(b == 0, "%s seed %" PRIu64 " item %u alone: %zu floats differ", c->name, seed, i, b);
		inv_bits += b;
		step_free(s1);
		CUDA_OK(cudaFree(d_oi));
	}
	double fworst = flash_checks(c, &p, s, bt_off, &L, d_q, q, d_sel, sel, stride, d_ws, o1, ref, seed);
	printf("%-14s %-4s hd %3" PRIu64 " nq %2" PRIu64 " nkv %" PRIu64 " items %s seed %" PRIu64
	       ": store %s, attn rel err %.2e, split==unsplit %s, alone==batched %s", c->name, dt_name(c->dt), hd, nq,
	       nkv, items, seed, pool_bad ? "DIFF" : "ok", worst, split_bits ? "NO" : "yes", inv_bits ? "NO" : "yes");
	if (fworst >= 0)
		printf(", flash rel err %.2e", fworst);
	if (qs)
		printf(", blocks rel err %.1e, %" PRIu64 " keys selected", blk_err, n_sel);
	printf("\n");

	free(k);
	free(v);
	free(idx);
	free(q);
	free(ref);
	free(o1);
	free(o2);
	free(oi);
	free(sel);
	free(dpool);
	free(knorm);
	free(inv_freq);
	void *d[] = { d_k, d_v, d_idx, d_knorm, d_inv, d_sel, d_q, d_o1, d_o2, d_ws };
	for (size_t i = 0; i < sizeof(d) / sizeof(d[0]); i++)
		CUDA_OK(cudaFree(d[i]));
	step_free(s);
	pool_free(&p);
	free(s);
	free(s1);
}

static const struct qsa_spec qsa4 = { .idh = 32, .ratio = 4, .ni = 2, .budget = 32, .rot = 16 };
static const struct qsa_spec qsa3 = { .idh = 64, .ratio = 3, .ni = 4, .budget = 24, .rot = 32 };

#define MIXED { 70, 0 }, { 1, 300 }, { 5, 130 }

static void run_all(const struct acase *cs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		for (uint64_t seed = 1; seed <= 2; seed++)
			run_case(&cs[i], seed);
}

/* The tiny fixture's shapes, every KV dtype; a page boundary inside an item's rows. */
static void test_tiny(void)
{
	static const struct acase cs[] = {
		{ "tiny", CK_KV_BF16, 2, 32, 4, NULL, 3, { MIXED } },
		{ "tiny", CK_KV_F32, 2, 32, 4, NULL, 3, { MIXED } },
		{ "tiny", CK_KV_INT8, 2, 32, 4, NULL, 3, { MIXED } },
		{ "tiny", CK_KV_BF16, 2, 64, 4, NULL, 4, { MIXED, { 3, 62 } } },
		{ "tiny", CK_KV_F32, 2, 64, 4, NULL, 4, { MIXED, { 3, 62 } } },
		{ "tiny", CK_KV_INT8, 2, 64, 4, NULL, 4, { MIXED, { 3, 62 } } },
		{ "odd-hd", CK_KV_BF16, 2, 48, 6, NULL, 3, { MIXED } },
		{ "odd-hd", CK_KV_F32, 2, 48, 6, NULL, 3, { MIXED } },
	};
	run_all(cs, sizeof(cs) / sizeof(cs[0]));
}

/* Qwen3.5-like: head_dim 256, 16 query heads on 2 KV heads, with a long decode row. */
static void test_qwen35(void)
{
	static const struct acase cs[] = {
		{ "qwen35", CK_KV_BF16, 2, 256, 16, NULL, 4, { MIXED, { 1, 5000 } } },
		{ "qwen35", CK_KV_F32, 2, 256, 16, NULL, 4, { MIXED, { 1, 5000 } } },
		{ "qwen35", CK_KV_INT8, 2, 256, 16, NULL, 4, { MIXED, { 1, 5000 } } },
	};
	run_all(cs, sizeof(cs) / sizeof(cs[0]));
}

/* Long contexts: decode rows of ~20 chunks, rows at a chunk boundary (255, 256), and a
 * prefill whose row-chunks exceed what ws holds (ck_attention makes several passes). */
static void test_long(void)
{
	static const struct acase cs[] = {
		{ "long-decode", CK_KV_BF16, 1, 128, 8, NULL, 3, { { 1, 5000 }, { 1, 4097 }, { 2, 255 } } },
		{ "long-decode", CK_KV_INT8, 1, 128, 8, NULL, 3, { { 1, 5000 }, { 1, 4097 }, { 2, 255 } } },
		{ "long-prefill", CK_KV_F32, 2, 64, 4, NULL, 2, { { 512, 4000 }, { 1, 300 } } },
		{ "long-prefill", CK_KV_BF16, 2, 64, 4, NULL, 2, { { 512, 4000 }, { 1, 300 } } },
		{ "long-prefill", CK_KV_BF16, 2, 256, 16, NULL, 2, { { 300, 2000 }, { 1, 300 } } },
		{ "long-prefill", CK_KV_BF16, 4, 128, 8, NULL, 2, { { 97, 1000 }, { 40, 33 } } },
	};
	run_all(cs, sizeof(cs) / sizeof(cs[0]));
}

/* QSA (qwen4_exp): keys, pooled blocks, top-k selection (with an all-tie row) and the
 * masked attention; ratio 3 makes pages of 66 tokens. */
static void test_qsa(void)
{
	static const struct acase cs[] = {
		{ "qsa-r4", CK_KV_BF16, 2, 64, 4, &qsa4, 5, { MIXED, { 1, 5000 }, { 3, 126 } } },
		{ "qsa-r4", CK_KV_INT8, 2, 64, 4, &qsa4, 5, { MIXED, { 1, 5000 }, { 3, 126 } } },
		{ "qsa-r3", CK_KV_F32, 2, 32, 4, &qsa3, 4, { MIXED, { 2, 700 } } },
	};
	run_all(cs, sizeof(cs) / sizeof(cs[0]));
}

int main(void)
{
	if (!test_gpu_init())
		return 77;
	RUN(test_tiny);
	RUN(test_qwen35);
	RUN(test_long);
	RUN(test_qsa);
	return test_summary();
}
