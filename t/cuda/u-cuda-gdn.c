/* u-cuda-gdn.c - the Gated DeltaNet kernels (kernels/gdn.cu) against C references that mirror
 * the CPU backend (libcore/backend/cpu/gdn.c): conv_rows, the gate loop of gdn_forward,
 * head_recurrent, head_chunked and gated_norm. Steps of several items (decode rows, fresh
 * prompts, continued prefills, fewer rows than the conv window), the state in layer slot 1
 * of 2, outputs poisoned, and every item run alone too: its results must not change by a
 * bit with the items batched with it. */
#include "test.h"

#include "cuda-test.h"

#include <string.h>

#define CHUNK 64 /* head_chunked's chunk */

static float silu_ref(float x)
{
	return x / (1.0f + expf(-x));
}

static float sigmoid_ref(float x)
{
	return 1.0f / (1.0f + expf(-x));
}

/* --- C references, mirroring libcore/backend/cpu/gdn.c ---------------------------------- */

/* conv_rows: one item's T rows over [window | rows], then the window moves on. */
static void ref_conv(float *win, const float *qkv, uint64_t T, uint64_t C, uint64_t K, const float *w, float *conv)
{
	for (uint64_t t = 0; t < T; t++)
		for (uint64_t ch = 0; ch < C; ch++) {
			float acc = 0;
			for (uint64_t i = 0; i < K; i++) {
				int64_t src = (int64_t)t - (int64_t)(K - 1) + (int64_t)i;
				float x = src >= 0 ? qkv[(uint64_t)src * C + ch] : win[(uint64_t)(src + (int64_t)K - 1) * C + ch];
				acc += w[ch * K + i] * x;
			}
			conv[t * C + ch] = silu_ref(acc);
		}
	for (uint64_t i = 0; i + 1 < K; i++) {
		int64_t src = (int64_t)T - (int64_t)(K - 1) + (int64_t)i;
		if (src >= 0)
			memcpy(win + i * C, qkv + (uint64_t)src * C, C * sizeof(float));
		else
			memmove(win + i * C, win + (uint64_t)(src + (int64_t)K - 1) * C, C * sizeof(float));
	}
}

static void l2norm_scaled(const float *x, float *y, uint64_t n, float scale)
{
	float ss = 0, r;

	for (uint64_t i = 0; i < n; i++)
		ss += x[i] * x[i];
	r = 1.0f / sqrtf(ss + 1e-6f);
	for (uint64_t i = 0; i < n; i++)
		y[i] = (x[i] * r) * scale;
}

/* head_recurrent: value head `head` of one item's T rows; S [dk][dv] of that head; conv, beta,
 * g, o start at the item's first row. */
static void ref_recurrent(const struct ck_gdn_shape *g, uint64_t head, float *S, const float *conv, const float *beta,
			  const float *gg, uint64_t T, float *o_all)
{
	uint64_t dk = g->dk, dv = g->dv, nv = g->nv, nk = g->nk, kh = head / (nv / nk), C = g->C;
	float *q = malloc(dk * sizeof(float)), *k = malloc(dk * sizeof(float)), *mem = malloc(dv * sizeof(float));
	const float qscale = 1.0f / sqrtf((float)dk);

	for (uint64_t t = 0; t < T; t++) {
		const float *row = conv + t * C, *v = row + 2 * nk * dk + head * dv;
		float decay = expf(gg[t * nv + head]), b = beta[t * nv + head];
		float *o = o_all + t * nv * dv + head * dv;
		l2norm_scaled(row + kh * dk, q, dk, 1.0f);
		for (uint64_t i = 0; i < dk; i++)
			q[i] *= qscale;
		l2norm_scaled(row + nk * dk + kh * dk, k, dk, 1.0f);
		for (uint64_t i = 0; i < dk * dv; i++)
			S[i] *= decay;
		for (uint64_t x = 0; x < dv; x++)
			mem[x] = 0;
		for (uint64_t y = 0; y < dk; y++)
			for (uint64_t x = 0; x < dv; x++)
				mem[x] += S[y * dv + x] * k[y];
		for (uint64_t x = 0; x < dv; x++)
			mem[x] = (v[x] - mem[x]) * b;
		for (uint64_t x = 0; x < dv; x++)
			o[x] = 0;
		for (uint64_t y = 0; y < dk; y++)
			for (uint64_t x = 0; x < dv; x++) {
				S[y * dv + x] += k[y] * mem[x];
				o[x] += S[y * dv + x] * q[y];
			}
	}
	free(q);
	free(k);
	free(mem);
}

/* dot16 of libcore/backend/cpu/cpu-impl.h: 16 lanes, then a fixed tree. */
static float dot16_ref(const float *a, const float *b, uint64_t n)
{
	float lane[16] = { 0 };
	uint64_t i = 0;

	for (; i + 16 <= n; i += 16)
		for (int l = 0; l < 16; l++)
			lane[l] += a[i + (uint64_t)l] * b[i + (uint64_t)l];
	for (; i < n; i++)
		lane[i % 16] += a[i] * b[i];
	for (int w = 8; w >= 1; w /= 2)
		for (int l = 0; l < w; l++)
			lane[l] += lane[l + w];
	return lane[0];
}

/* head_chunked: the CPU's prefill form (chunks of 64, forward substitution), to measure how
 * far the GPU's recurrent prefill is from what the CPU backend computes. */
static void ref_chunked(const struct ck_gdn_shape *g, uint64_t head, float *S, const float *conv, const float *beta_all,
			const float *gg, uint64_t T, float *o_all)
{
	uint64_t dk = g->dk, dv = g->dv, nv = g->nv, nk = g->nk, kh = head / (nv / nk), C = g->C;
	uint64_t wsf = 4 * CHUNK * dk + 3 * CHUNK * dv + 3 * CHUNK * CHUNK + 4 * CHUNK + dv + 2 * dk;
	float *ws = calloc(wsf, sizeof(float));
	float *Q = ws, *K = Q + CHUNK * dk, *KB = K + CHUNK * dk, *KC = KB + CHUNK * dk;
	float *VB = KC + CHUNK * dk, *U = VB + CHUNK * dv, *VN = U + CHUNK * dv;
	float *UT = VN + CHUNK * dv, *IA = UT + CHUNK * CHUNK;
	float *cum = IA + CHUNK * CHUNK, *beta = cum + CHUNK, *ec = beta + CHUNK, *el = ec + CHUNK;
	float *row_out = el + CHUNK;
	const float qscale = 1.0f / sqrtf((float)dk);

	for (uint64_t t0 = 0; t0 < T; t0 += CHUNK) {
		uint64_t n = T - t0 < CHUNK ? T - t0 : CHUNK;
		float run = 0, last;

		memset(ws, 0, (4 * CHUNK * dk + 3 * CHUNK * dv) * sizeof(float));
		for (uint64_t i = 0; i < CHUNK; i++) {
			if (i < n) {
				const float *row = conv + (t0 + i) * C;
				l2norm_scaled(row + kh * dk, Q + i * dk, dk, 1.0f);
				for (uint64_t y = 0; y < dk; y++)
					Q[i * dk + y] *= qscale;
				l2norm_scaled(row + nk * dk + kh * dk, K + i * dk, dk, 1.0f);
				beta[i] = beta_all[(t0 + i) * nv + head];
				run += gg[(t0 + i) * nv + head];
				for (uint64_t y = 0; y < dk; y++)
					KB[i * dk + y] = K[i * dk + y] * beta[i];
				for (uint64_t x = 0; x < dv; x++)
					VB[i * dv + x] = row[2 * nk * dk + head * dv + x] * beta[i];
			}
			cum[i] = run;
		}
		last = cum[CHUNK - 1];
		for (uint64_t i = 0; i < CHUNK; i++) {
			ec[i] = expf(cum[i]);
			el[i] = expf(last - cum[i]);
			for (uint64_t m = 0; m < CHUNK; m++) {
				float dec;
				if (m > i) {
					UT[i * CHUNK + m] = IA[i * CHUNK + m] = 0;
					continue;
				}
				dec = expf(cum[i] - cum[m]);
				UT[i * CHUNK + m] = dot16_ref(KB + i * dk, K + m * dk, dk) * dec;
				IA[i * CHUNK + m] = dot16_ref(Q + i * dk, K + m * dk, dk) * dec;
			}
		}
		for (uint64_t i = 0; i < CHUNK; i++) {
			float *u = U + i * dv, *kc = KC + i * dk;
			for (uint64_t x = 0; x < dv; x++)
				u[x] = VB[i * dv + x];
			for (uint64_t y = 0; y < dk; y++)
				kc[y] = KB[i * dk + y] * ec[i];
			for (uint64_t m = 0; m < i; m++) {
				float l = UT[i * CHUNK + m];
				for (uint64_t x = 0; x < dv; x++)
					u[x] -= l * U[m * dv + x];
				for (uint64_t y = 0; y < dk; y++)
					kc[y] -= l * KC[m * dk + y];
			}
		}
		for (uint64_t i = 0; i < CHUNK; i++) {
			float *vn = VN + i * dv, *o = row_out;
			for (uint64_t x = 0; x < dv; x++)
				vn[x] = U[i * dv + x];
			for (uint64_t y = 0; y < dk; y++)
				for (uint64_t x = 0; x < dv; x++)
					vn[x] -= KC[i * dk + y] * S[y * dv + x];
			if (i >= n)
				continue;
			for (uint64_t x = 0; x < dv; x++)
				o[x] = 0;
			for (uint64_t y = 0; y < dk; y++) {
				float coef = Q[i * dk + y] * ec[i];
				for (uint64_t x = 0; x < dv; x++)
					o[x] += coef * S[y * dv + x];
			}
			for (uint64_t m = 0; m <= i; m++)
				for (uint64_t x = 0; x < dv; x++)
					o[x] += IA[i * CHUNK + m] * VN[m * dv + x];
			memcpy(o_all + (t0 + i) * nv * dv + head * dv, o, dv * sizeof(float));
		}
		{
			float dl = expf(last);
			for (uint64_t x = 0; x < dk * dv; x++)
				S[x] *= dl;
			for (uint64_t m = 0; m < CHUNK; m++)
				for (uint64_t y = 0; y < dk; y++) {
					float coef = K[m * dk + y] * el[m];
					for (uint64_t x = 0; x < dv; x++)
						S[y * dv + x] += coef * VN[m * dv + x];
				}
		}
	}
	free(ws);
}

/* gated_norm over `heads` vectors of dv. */
static void ref_gated_norm(float *o, const float *z, const float *w, uint64_t heads, uint64_t dv, float eps, bool sig)
{
	for (uint64_t h = 0; h < heads; h++) {
		float *x = o + h * dv, ss = 0, r;
		const float *gz = z + h * dv;
		for (uint64_t i = 0; i < dv; i++)
			ss += x[i] * x[i];
		r = 1.0f / sqrtf(ss / (float)dv + eps);
		for (uint64_t i = 0; i < dv; i++) {
			float act = sig ? sigmoid_ref(gz[i]) : silu_ref(gz[i]);
			x[i] = (w[i] * (x[i] * r)) * act;
		}
	}
}

/* --- steps on the device -------------------------------------------------------------- */

#define MAX_ITEMS 8
#define SLOTS 2
#define SLOT 1 /* the layer slot under test; slot 0 must stay untouched */

struct hstep {
	uint32_t n_items;
	uint64_t T;
	int64_t t0[MAX_ITEMS], n[MAX_ITEMS], len[MAX_ITEMS];
};

struct dstep {
	struct ck_step st;
	void *item, *t0, *n, *len, *ptrs;
};

static void hstep_init(struct hstep *h, uint32_t n_items, const int64_t *n, const int64_t *len)
{
	h->n_items = n_items;
	h->T = 0;
	for (uint32_t i = 0; i < n_items; i++) {
		h->t0[i] = (int64_t)h->T;
		h->n[i] = n[i];
		h->len[i] = len[i];
		h->T += (uint64_t)n[i];
	}
}

static void dstep_make(struct dstep *d, const struct hstep *h, float *const *dev_states)
{
	int32_t *item = malloc(h->T * sizeof(int32_t) + 1);

	for (uint32_t i = 0; i < h->n_items; i++)
		for (int64_t r = 0; r < h->n[i]; r++)
			item[h->t0[i] + r] = (int32_t)i;
	memset(&d->st, 0, sizeof(d->st));
	d->item = dev_from(item, h->T * sizeof(int32_t));
	d->t0 = dev_from(h->t0, h->n_items * sizeof(int64_t));
	d->n = dev_from(h->n, h->n_items * sizeof(int64_t));
	d->len = dev_from(h->len, h->n_items * sizeof(int64_t));
	d->ptrs = dev_from(dev_states, h->n_items * sizeof(float *));
	d->st.T = h->T;
	d->st.n_items = h->n_items;
	d->st.item = d->item;
	d->st.t0 = d->t0;
	d->st.n = d->n;
	d->st.len = d->len;
	d->st.gdn_state = d->ptrs;
	free(item);
}

static void dstep_free(struct dstep *d)
{
	CUDA_OK(cudaFree(d->item));
	CUDA_OK(cudaFree(d->t0));
	CUDA_OK(cudaFree(d->n));
	CUDA_OK(cudaFree(d->len));
	CUDA_OK(cudaFree(d->ptrs));
}

static float *fdup(const float *x, size_t n)
{
	float *y = malloc(n * sizeof(float) + 1);

	memcpy(y, x, n * sizeof(float));
	return y;
}

/* --- the cases -------------------------------------------------------------------------- */

struct shape_case {
	const char *name;
	struct ck_gdn_shape g;
};

static struct ck_gdn_shape shape(uint64_t nk, uint64_t nv, uint64_t dk, uint64_t dv, uint64_t K)
{
	struct ck_gdn_shape g = { nk, nv, dk, dv, K, 2 * nk * dk + nv * dv };

	return g;
}

/* Items: decode rows (n 1 after a history), a one-token prompt, a fresh prompt, a continued
 * prefill over two chunks of 64 and a bit, fewer rows than the window (n < K - 1 at len > 0),
 * another decode row. len 0 items start from a zero state, as a new sequence does. */
static const int64_t ITEM_N[] = { 1, 1, 37, 130, 2, 1 };
static const int64_t ITEM_LEN[] = { 57, 0, 0, 12, 5, 200 };
#define N_ITEMS 6

static bool is_decode(int64_t n, int64_t len)
{
	return n == 1 && len > 0; /* where the CPU runs head_recurrent; else head_chunked */
}

static void test_step(const struct shape_case *sc, uint64_t seed)
{
	const struct ck_gdn_shape *g = &sc->g;
	const uint64_t C = g->C, K = g->K, nv = g->nv, dk = g->dk, dv = g->dv, SF = ck_gdn_state_floats(g);
	const uint64_t W = (K - 1) * C, HV = nv * dv, SS = nv * dk * dv, BF = SLOTS * SF;
	struct hstep h;
	struct dstep ds;
	float *st0[N_ITEMS], *rst[N_ITEMS], *cst[N_ITEMS], *gst[N_ITEMS], *gconv_st[N_ITEMS], *dst[N_ITEMS];
	float *qkv, *wc, *rconv, *gconv, *cv, *beta, *gg, *ro, *co, *go;
	float *dqkv, *dw, *dconv, *dcv, *dbeta, *dg, *dout;
	double conv_err, o_dec = 0, s_dec = 0, o_pre = 0, s_pre = 0, o_chk = 0, s_chk = 0;
	size_t win_bits = 0, other_bits = 0, inv_bits = 0;

	CHECK_EQ_U64(SF, (K - 1) * C + SS); /* state.c: gdn_conv_floats + gdn_s_floats */
	hstep_init(&h, N_ITEMS, ITEM_N, ITEM_LEN);
	for (int i = 0; i < N_ITEMS; i++) {
		st0[i] = malloc(BF * sizeof(float));
		test_fill(st0[i], BF, seed * 1000 + (uint64_t)i, 1.0f);
		if (h.len[i] == 0)
			memset(st0[i] + SLOT * SF, 0, SF * sizeof(float));
		dst[i] = dev_from(st0[i], BF * sizeof(float));
	}
	dstep_make(&ds, &h, dst);

	/* conv: outputs, then windows moved on (bitwise: they are copies), nothing else touched */
	qkv = malloc(h.T * C * sizeof(float));
	wc = malloc(C * K * sizeof(float));
	rconv = malloc(h.T * C * sizeof(float));
	gconv = malloc(h.T * C * sizeof(float));
	test_fill(qkv, h.T * C, seed * 7 + 1, 1.0f);
	test_fill(wc, C * K, seed * 7 + 2, 0.5f);
	for (int i = 0; i < N_ITEMS; i++) {
		rst[i] = fdup(st0[i], BF);
		ref_conv(rst[i] + SLOT * SF, qkv + h.t0[i] * C, (uint64_t)h.n[i], C, K, wc, rconv + h.t0[i] * C);
	}
	dqkv = dev_from(qkv, h.T * C * sizeof(float));
	dw = dev_from(wc, C * K * sizeof(float));
	dconv = dev_from(NULL, h.T * C * sizeof(float));
	CK_OK(ck_gdn_conv(&ds.st, g, SLOT, dqkv, dw, dconv, NULL));
	dev_to(gconv, dconv, h.T * C * sizeof(float));
	conv_err = rel_err(gconv, rconv, h.T * C);
	CHECK_MSG(conv_err < 1e-6, "%s conv rel_err %.3g", sc->name, conv_err);
	for (int i = 0; i < N_ITEMS; i++) {
		gconv_st[i] = malloc(BF * sizeof(float));
		dev_to(gconv_st[i], dst[i], BF * sizeof(float));
		win_bits += bits_differ(gconv_st[i] + SLOT * SF, rst[i] + SLOT * SF, W);
		other_bits += bits_differ(gconv_st[i], st0[i], SLOT * SF) +
			      bits_differ(gconv_st[i] + SLOT * SF + W, st0[i] + SLOT * SF + W, SF - W);
	}
	CHECK_MSG(win_bits == 0, "%s conv windows: %zu values differ", sc->name, win_bits);
	CHECK_MSG(other_bits == 0, "%s conv touched %zu values outside the windows", sc->name, other_bits);

	/* the recurrent rule from the original states, on fresh inputs: q/k/v of scale 1,
	 * beta in (0, 1), g in (-0.2, 0] */
	cv = malloc(h.T * C * sizeof(float));
	beta = malloc(h.T * nv * sizeof(float));
	gg = malloc(h.T * nv * sizeof(float));
	ro = malloc(h.T * HV * sizeof(float));
	co = malloc(h.T * HV * sizeof(float));
	go = malloc(h.T * HV * sizeof(float));
	test_fill(cv, h.T * C, seed * 7 + 3, 1.0f);
	test_fill(beta, h.T * nv, seed * 7 + 4, 1.0f);
	test_fill(gg, h.T * nv, seed * 7 + 5, 1.0f);
	for (uint64_t i = 0; i < h.T * nv; i++) {
		beta[i] = 0.5f + 0.49f * beta[i];
		gg[i] = -0.1f * (gg[i] + 1.0f);
	}
	for (int i = 0; i < N_ITEMS; i++) {
		CUDA_OK(cudaMemcpy(dst[i], st0[i], BF * sizeof(float), cudaMemcpyHostToDevice));
		memcpy(rst[i], st0[i], BF * sizeof(float));
		cst[i] = fdup(st0[i], BF);
	}
	dcv = dev_from(cv, h.T * C * sizeof(float));
	dbeta = dev_from(beta, h.T * nv * sizeof(float));
	dg = dev_from(gg, h.T * nv * sizeof(float));
	dout = dev_from(NULL, h.T * HV * sizeof(float));
	CK_OK(ck_gdn_recurrent(&ds.st, g, SLOT, dcv, dbeta, dg, dout, NULL));
	dev_to(go, dout, h.T * HV * sizeof(float));
	for (int i = 0; i < N_ITEMS; i++) {
		uint64_t t0 = (uint64_t)h.t0[i], n = (uint64_t)h.n[i];
		float *rS = rst[i] + SLOT * SF + W, *cS = cst[i] + SLOT * SF + W, *gS;
		double eo, es;
		gst[i] = malloc(BF * sizeof(float));
		dev_to(gst[i], dst[i], BF * sizeof(float));
		gS = gst[i] + SLOT * SF + W;
		for (uint64_t hd = 0; hd < nv; hd++) {
			ref_recurrent(g, hd, rS + hd * dk * dv, cv + t0 * C, beta + t0 * nv, gg + t0 * nv, n, ro + t0 * HV);
			ref_chunked(g, hd, cS + hd * dk * dv, cv + t0 * C, beta + t0 * nv, gg + t0 * nv, n, co + t0 * HV);
		}
		eo = rel_err(go + t0 * HV, ro + t0 * HV, n * HV);
		es = rel_err(gS, rS, SS);
		if (is_decode(h.n[i], h.len[i])) {
			o_dec = fmax(o_dec, eo);
			s_dec = fmax(s_dec, es);
		} else {
			o_pre = fmax(o_pre, eo);
			s_pre = fmax(s_pre, es);
			o_chk = fmax(o_chk, rel_err(go + t0 * HV, co + t0 * HV, n * HV));
			s_chk = fmax(s_chk, rel_err(gS, cS, SS));
		}
		other_bits += bits_differ(gst[i], st0[i], SLOT * SF + W);
	}
	CHECK_MSG(o_dec < 2e-6 && s_dec < 2e-6, "%s decode vs recurrent: o %.3g S %.3g", sc->name, o_dec, s_dec);
	/* the C chunked and recurrent forms agree to ~4e-7 on these inputs (measured on the CPU) */
	CHECK_MSG(o_pre < 1e-5 && s_pre < 1e-5, "%s prefill vs recurrent: o %.3g S %.3g", sc->name, o_pre, s_pre);
	CHECK_MSG(o_chk < 2e-5 && s_chk < 2e-5, "%s prefill vs chunked: o %.3g S %.3g", sc->name, o_chk, s_chk);
	CHECK_MSG(other_bits == 0, "%s recurrent touched %zu values outside S", sc->name, other_bits);

	/* batch invariance: each item alone (its rows at t0 0, its own copy of the state) gives
	 * the same bits as in the step */
	for (int i = 0; i < N_ITEMS; i++) {
		uint64_t t0 = (uint64_t)h.t0[i], n = (uint64_t)h.n[i];
		struct hstep h1;
		struct dstep d1;
		float *ds1 = dev_from(st0[i], BF * sizeof(float)), *b1 = malloc(BF * sizeof(float));
		float *dq1 = dev_from(qkv + t0 * C, n * C * sizeof(float)), *dc1 = dev_from(NULL, n * C * sizeof(float));
		float *dv1 = dev_from(cv + t0 * C, n * C * sizeof(float)), *do1 = dev_from(NULL, n * HV * sizeof(float));
		float *dbe1 = dev_from(beta + t0 * nv, n * nv * sizeof(float)), *dg1 = dev_from(gg + t0 * nv, n * nv * sizeof(float));
		float *c1 = malloc(n * C * sizeof(float)), *o1 = malloc(n * HV * sizeof(float));
		hstep_init(&h1, 1, &h.n[i], &h.len[i]);
		dstep_make(&d1, &h1, &ds1);
		CK_OK(ck_gdn_conv(&d1.st, g, SLOT, dq1, dw, dc1, NULL));
		CK_OK(ck_gdn_recurrent(&d1.st, g, SLOT, dv1, dbe1, dg1, do1, NULL));
		dev_to(c1, dc1, n * C * sizeof(float));
		dev_to(o1, do1, n * HV * sizeof(float));
		dev_to(b1, ds1, BF * sizeof(float));
		inv_bits += bits_differ(c1, gconv + t0 * C, n * C) + bits_differ(o1, go + t0 * HV, n * HV) +
			    bits_differ(b1 + SLOT * SF, gconv_st[i] + SLOT * SF, W) +
			    bits_differ(b1 + SLOT * SF + W, gst[i] + SLOT * SF + W, SS);
		dstep_free(&d1);
		CUDA_OK(cudaFree(ds1));
		CUDA_OK(cudaFree(dq1));
		CUDA_OK(cudaFree(dc1));
		CUDA_OK(cudaFree(dv1));
		CUDA_OK(cudaFree(do1));
		CUDA_OK(cudaFree(dbe1));
		CUDA_OK(cudaFree(dg1));
		free(b1);
		free(c1);
		free(o1);
	}
	CHECK_MSG(inv_bits == 0, "%s batch invariance: %zu values differ", sc->name, inv_bits);

	printf("gdn step %-5s seed %" PRIu64 " (items n 1,1,37,130,2,1): conv %.2e, windows %zu bits off; "
	       "vs recurrent ref: decode o %.2e S %.2e, prefill o %.2e S %.2e; vs chunked (CPU prefill): o %.2e S %.2e; "
	       "alone vs batched %zu bits off\n",
	       sc->name, seed, conv_err, win_bits, o_dec, s_dec, o_pre, s_pre, o_chk, s_chk, inv_bits);

	dstep_free(&ds);
	for (int i = 0; i < N_ITEMS; i++) {
		CUDA_OK(cudaFree(dst[i]));
		free(st0[i]);
		free(rst[i]);
		free(cst[i]);
		free(gst[i]);
		free(gconv_st[i]);
	}
	CUDA_OK(cudaFree(dqkv));
	CUDA_OK(cudaFree(dw));
	CUDA_OK(cudaFree(dconv));
	CUDA_OK(cudaFree(dcv));
	CUDA_OK(cudaFree(dbeta));
	CUDA_OK(cudaFree(dg));
	CUDA_OK(cudaFree(dout));
	free(qkv);
	free(wc);
	free(rconv);
	free(gconv);
	free(cv);
	free(beta);
	free(gg);
	free(ro);
	free(co);
	free(go);
}

/* beta = sigmoid(b), g = neg_a softplus(a + dt_bias), with some arguments past softplus's
 * threshold of 20 and some far below 0. */
static void test_gates(const struct shape_case *sc, uint64_t seed)
{
	const uint64_t nv = sc->g.nv, T = 173, N = T * nv;
	float *b = malloc(N * sizeof(float)), *a = malloc(N * sizeof(float)), *na = malloc(nv * sizeof(float));
	float *dtb = malloc(nv * sizeof(float)), *rb = malloc(N * sizeof(float)), *rg = malloc(N * sizeof(float));
	float *gb = malloc(N * sizeof(float)), *gq = malloc(N * sizeof(float));
	float *db, *da, *dna, *ddt, *dbeta, *dg;
	double eb, eg;

	test_fill(b, N, seed * 11 + 1, 8.0f);
	test_fill(a, N, seed * 11 + 2, 16.0f);
	test_fill(na, nv, seed * 11 + 3, 1.0f);
	test_fill(dtb, nv, seed * 11 + 4, 8.0f);
	for (uint64_t h = 0; h < nv; h++)
		na[h] = -expf(na[h]); /* -exp(A_log) */
	for (uint64_t t = 0; t < N; t++) {
		float x = a[t] + dtb[t % nv];
		rb[t] = sigmoid_ref(b[t]);
		rg[t] = na[t % nv] * (x > 20.0f ? x : log1pf(expf(x)));
	}
	db = dev_from(b, N * sizeof(float));
	da = dev_from(a, N * sizeof(float));
	dna = dev_from(na, nv * sizeof(float));
	ddt = dev_from(dtb, nv * sizeof(float));
	dbeta = dev_from(NULL, N * sizeof(float));
	dg = dev_from(NULL, N * sizeof(float));
	CK_OK(ck_gdn_gates(db, da, dna, ddt, T, nv, dbeta, dg, NULL));
	dev_to(gb, dbeta, N * sizeof(float));
	dev_to(gq, dg, N * sizeof(float));
	eb = rel_err(gb, rb, N);
	eg = rel_err(gq, rg, N);
	CHECK_MSG(eb < 1e-6 && eg < 1e-6, "%s gates: beta %.3g g %.3g", sc->name, eb, eg);
	printf("gdn gates %-5s seed %" PRIu64 " (T %" PRIu64 ", nv %" PRIu64 "): beta %.2e, g %.2e\n", sc->name, seed,
	       T, nv, eb, eg);
	CUDA_OK(cudaFree(db));
	CUDA_OK(cudaFree(da));
	CUDA_OK(cudaFree(dna));
	CUDA_OK(cudaFree(ddt));
	CUDA_OK(cudaFree(dbeta));
	CUDA_OK(cudaFree(dg));
	free(b);
	free(a);
	free(na);
	free(dtb);
	free(rb);
	free(rg);
	free(gb);
	free(gq);
}

/* The gated RMSNorm, both gate activations; rows of very different scales. */
static void test_gated_norm(const struct shape_case *sc, uint64_t seed)
{
	const uint64_t nv = sc->g.nv, dv = sc->g.dv, T = 41, N = T * nv * dv;
	const float eps = 1e-6f;
	float *o = malloc(N * sizeof(float)), *z = malloc(N * sizeof(float)), *w = malloc(dv * sizeof(float));
	float *r = malloc(N * sizeof(float)), *got = malloc(N * sizeof(float));
	float *dz, *dw, *dout;

	test_fill(o, N, seed * 13 + 1, 1.0f);
	test_fill(z, N, seed * 13 + 2, 4.0f);
	test_fill(w, dv, seed * 13 + 3, 0.5f);
	for (uint64_t i = 0; i < dv; i++)
		w[i] += 1.0f;
	for (uint64_t hd = 0; hd < T * nv; hd++)
		for (uint64_t i = 0; i < dv; i++)
			o[hd * dv + i] *= (float)(1u << (hd % 7)) / 8.0f;
	dz = dev_from(z, N * sizeof(float));
	dw = dev_from(w, dv * sizeof(float));
	for (int sig = 0; sig < 2; sig++) {
		double e;
		dout = dev_from(o, N * sizeof(float));
		memcpy(r, o, N * sizeof(float));
		ref_gated_norm(r, z, w, T * nv, dv, eps, sig);
		CK_OK(ck_gdn_gated_norm(dout, dz, dw, T, nv, dv, eps, sig, NULL));
		dev_to(got, dout, N * sizeof(float));
		e = rel_err(got, r, N);
		CHECK_MSG(e < 1e-6, "%s gated norm (%s): %.3g", sc->name, sig ? "sigmoid" : "silu", e);
		printf("gdn gated_norm %-5s seed %" PRIu64 " (T %" PRIu64 ", nv %" PRIu64 ", dv %" PRIu64 ", %s): %.2e\n",
		       sc->name, seed, T, nv, dv, sig ? "sigmoid" : "silu", e);
		CUDA_OK(cudaFree(dout));
	}
	CUDA_OK(cudaFree(dz));
	CUDA_OK(cudaFree(dw));
	free(o);
	free(z);
	free(w);
	free(r);
	free(got);
}

/* ck_gdn_decode against the four kernels it fuses (ck_gdn_conv, ck_gdn_gates,
 * ck_gdn_recurrent, ck_gdn_gated_norm), bitwise: the output, the gates and every state
 * value, over two steps in a row (its block counters must be left at zero), both gate
 * activations; a fresh one-token prompt among the decode rows. A step with more rows than
 * items is refused. */
static const int64_t DEC_LEN[] = { 57, 0, 3, 200, 1 };
#define DEC_ITEMS 5

static void test_decode(const struct shape_case *sc, uint64_t seed)
{
	const struct ck_gdn_shape *g = &sc->g;
	const uint64_t C = g->C, K = g->K, nv = g->nv, dv = g->dv, SF = ck_gdn_state_floats(g), BF = SLOTS * SF;
	const uint64_t T = DEC_ITEMS, HV = nv * dv;
	const int64_t ones[DEC_ITEMS] = { 1, 1, 1, 1, 1 };
	const bool sig = seed % 2 == 0;
	struct hstep h;
	struct dstep da, db;
	float *sa[DEC_ITEMS], *sb[DEC_ITEMS];
	float *qkv = malloc(T * C * sizeof(float)), *wc = malloc(C * K * sizeof(float)), *z = malloc(T * HV * sizeof(float));
	float *b = malloc(T * nv * sizeof(float)), *a = malloc(T * nv * sizeof(float)), *na = malloc(nv * sizeof(float));
	float *dtb = malloc(nv * sizeof(float)), *nw = malloc(dv * sizeof(float)), *st = malloc(BF * sizeof(float));
	float *ha = malloc(BF * sizeof(float)), *hb = malloc(BF * sizeof(float));
	float *ra = malloc(T * HV * sizeof(float)), *rb = malloc(T * HV * sizeof(float));
	float *ga = malloc(T * nv * sizeof(float)), *gb = malloc(T * nv * sizeof(float));
	size_t o_bits = 0, gate_bits = 0, state_bits = 0;
	uint32_t cnt[DEC_ITEMS * 64];

	CHECK(nv <= 64);
	hstep_init(&h, DEC_ITEMS, ones, DEC_LEN);
	for (int i = 0; i < DEC_ITEMS; i++) {
		test_fill(st, BF, seed * 100 + (uint64_t)i, 1.0f);
		if (h.len[i] == 0)
			memset(st + SLOT * SF, 0, SF * sizeof(float));
		sa[i] = dev_from(st, BF * sizeof(float));
		sb[i] = dev_from(st, BF * sizeof(float));
	}
	dstep_make(&da, &h, sa);
	dstep_make(&db, &h, sb);
	test_fill(wc, C * K, seed * 17 + 2, 0.5f);
	test_fill(na, nv, seed * 17 + 3, 1.0f);
	test_fill(dtb, nv, seed * 17 + 4, 2.0f);
	test_fill(nw, dv, seed * 17 + 5, 0.5f);
	for (uint64_t i = 0; i < nv; i++)
		na[i] = -expf(na[i]);
	float *dw = dev_from(wc, C * K * sizeof(float)), *dna = dev_from(na, nv * sizeof(float));
	float *ddt = dev_from(dtb, nv * sizeof(float)), *dnw = dev_from(nw, dv * sizeof(float));
	float *dqkv = dev_from(NULL, T * C * sizeof(float)), *dz = dev_from(NULL, T * HV * sizeof(float));
	float *db_ = dev_from(NULL, T * nv * sizeof(float)), *da_ = dev_from(NULL, T * nv * sizeof(float));
	float *conv_a = dev_from(NULL, T * C * sizeof(float)), *conv_b = dev_from(NULL, T * C * sizeof(float));
	float *beta_a = dev_from(NULL, T * nv * sizeof(float)), *beta_b = dev_from(NULL, T * nv * sizeof(float));
	float *g_a = dev_from(NULL, T * nv * sizeof(float)), *g_b = dev_from(NULL, T * nv * sizeof(float));
	float *o_a = dev_from(NULL, T * HV * sizeof(float)), *o_b = dev_from(NULL, T * HV * sizeof(float));
	uint32_t *dcnt;
	CUDA_OK(cudaMalloc((void **)&dcnt, sizeof(cnt)));
	CUDA_OK(cudaMemset(dcnt, 0, sizeof(cnt)));

	for (int step = 0; step < 2; step++) {
		test_fill(qkv, T * C, seed * 17 + 10 + (uint64_t)step, 1.0f);
		test_fill(z, T * HV, seed * 17 + 20 + (uint64_t)step, 3.0f);
		test_fill(b, T * nv, seed * 17 + 30 + (uint64_t)step, 4.0f);
		test_fill(a, T * nv, seed * 17 + 40 + (uint64_t)step, 4.0f);
		CUDA_OK(cudaMemcpy(dqkv, qkv, T * C * sizeof(float), cudaMemcpyHostToDevice));
		CUDA_OK(cudaMemcpy(dz, z, T * HV * sizeof(float), cudaMemcpyHostToDevice));
		CUDA_OK(cudaMemcpy(db_, b, T * nv * sizeof(float), cudaMemcpyHostToDevice));
		CUDA_OK(cudaMemcpy(da_, a, T * nv * sizeof(float), cudaMemcpyHostToDevice));
		CK_OK(ck_gdn_conv(&da.st, g, SLOT, dqkv, dw, conv_a, NULL));
		CK_OK(ck_gdn_gates(db_, da_, dna, ddt, T, nv, beta_a, g_a, NULL));
		CK_OK(ck_gdn_recurrent(&da.st, g, SLOT, conv_a, beta_a, g_a, o_a, NULL));
		CK_OK(ck_gdn_gated_norm(o_a, dz, dnw, T, nv, dv, 1e-6f, sig, NULL));
		const struct ck_gdn_decode_args d = { .qkv = dqkv, .conv_w = dw, .b = db_, .a = da_, .neg_a = dna,
						      .dt_bias = ddt, .z = dz, .norm_w = dnw, .eps = 1e-6f,
						      .gate_sigmoid = sig, .conv = conv_b, .beta = beta_b, .g = g_b,
						      .o = o_b, .count = dcnt, .z_ready = NULL };
		CK_OK(ck_gdn_decode(&db.st, g, SLOT, &d, NULL));
		dev_to(ra, o_a, T * HV * sizeof(float));
		dev_to(rb, o_b, T * HV * sizeof(float));
		o_bits += bits_differ(rb, ra, T * HV);
		dev_to(ga, beta_a, T * nv * sizeof(float));
		dev_to(gb, beta_b, T * nv * sizeof(float));
		gate_bits += bits_differ(gb, ga, T * nv);
		dev_to(ga, g_a, T * nv * sizeof(float));
		dev_to(gb, g_b, T * nv * sizeof(float));
		gate_bits += bits_differ(gb, ga, T * nv);
		for (int i = 0; i < DEC_ITEMS; i++) {
			dev_to(ha, sa[i], BF * sizeof(float));
			dev_to(hb, sb[i], BF * sizeof(float));
			state_bits += bits_differ(hb, ha, BF);
		}
		dev_to(cnt, dcnt, sizeof(cnt));
		for (uint64_t i = 0; i < T * nv; i++)
			CHECK_MSG(cnt[i] == 0, "%s decode: counter %" PRIu64 " left at %u", sc->name, i, cnt[i]);
	}
	CHECK_MSG(o_bits == 0 && gate_bits == 0 && state_bits == 0,
		  "%s fused decode against the four kernels: %zu output, %zu gate, %zu state values differ", sc->name,
		  o_bits, gate_bits, state_bits);
	printf("gdn decode %-5s seed %" PRIu64 " (%d items, %s): fused = unfused, %zu / %zu / %zu bits differ\n",
	       sc->name, seed, DEC_ITEMS, sig ? "sigmoid" : "silu", o_bits, gate_bits, state_bits);
	{ /* a prompt row among them: the general path's */
		const int64_t two[2] = { 2, 1 }, len2[2] = { 0, 4 };
		struct hstep h2;
		struct dstep d2;
		const struct ck_gdn_decode_args d = { .qkv = dqkv, .conv_w = dw, .b = db_, .a = da_, .neg_a = dna,
						      .dt_bias = ddt, .z = dz, .norm_w = dnw, .eps = 1e-6f,
						      .conv = conv_b, .beta = beta_b, .g = g_b, .o = o_b, .count = dcnt };
		hstep_init(&h2, 2, two, len2);
		dstep_make(&d2, &h2, sb);
		CHECK_MSG(ck_gdn_decode(&d2.st, g, SLOT, &d, NULL) == -(int)cudaErrorInvalidValue,
			  "%s decode took a step of 3 rows in 2 items", sc->name);
		dstep_free(&d2);
	}
	dstep_free(&da);
	dstep_free(&db);
	for (int i = 0; i < DEC_ITEMS; i++) {
		CUDA_OK(cudaFree(sa[i]));
		CUDA_OK(cudaFree(sb[i]));
	}
	void *dev[] = { dw, dna, ddt, dnw, dqkv, dz, db_, da_, conv_a, conv_b, beta_a, beta_b, g_a, g_b, o_a, o_b, dcnt };
	for (size_t i = 0; i < sizeof(dev) / sizeof(dev[0]); i++)
		CUDA_OK(cudaFree(dev[i]));
	void *host[] = { qkv, wc, z, b, a, na, dtb, nw, st, ha, hb, ra, rb, ga, gb };
	for (size_t i = 0; i < sizeof(host) / sizeof(host[0]); i++)
		free(host[i]);
}

static struct shape_case cases[3];

static void test_all(void)
{
	for (int c = 0; c < 3; c++)
		for (uint64_t seed = 1; seed <= 2; seed++) {
			test_step(&cases[c], seed);
			test_gates(&cases[c], seed);
			test_gated_norm(&cases[c], seed);
			test_decode(&cases[c], seed);
		}
}

int main(void)
{
	if (!test_gpu_init())
		return 1;
	/* tiny as the fixtures; odd: dk not a multiple of 32 (padded rows), dv not a multiple of
	 * 32 (a partial column block), 3 value heads per key head, K 3; real: Qwen3.5 / Next */
	cases[0] = (struct shape_case){ "tiny", shape(2, 4, 16, 16, 4) };
	cases[1] = (struct shape_case){ "odd", shape(1, 3, 24, 40, 3) };
	cases[2] = (struct shape_case){ "real", shape(16, 32, 128, 128, 4) };
	RUN(test_all);
	return test_summary();
}
