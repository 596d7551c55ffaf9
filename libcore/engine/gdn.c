/* gdn.c - Gated DeltaNet: projections, the causal depthwise conv with its window, and
 * the gated delta rule, recurrent for decode and chunked (64 tokens) for prefill, both
 * in fp32 and algebraically equal; then the gated RMSNorm and out_proj.
 *
 * Per value head j (reading key head j / (nv / nk)), with q, k l2-normalised and q
 * scaled by dk^-1/2, beta = sigmoid(b) and g = -exp(A_log) softplus(a + dt_bias):
 *	S = S exp(g_t);  d = beta_t (v_t - S^T k_t);  S += k_t d^T;  o_t = S^T q_t
 * The chunked form solves the same recurrence for a chunk at once through a unit
 * lower-triangular system (forward substitution), as transformers' reference does.
 */
#include "engine-impl.h"

#include <math.h>

#define CHUNK 64

struct gdn_job {
	struct capy_engine *e;
	const struct gdn_w *w;
	struct gdn_state *st;
	const float *conv;  /* [T][C] conv output after silu: q | k | v */
	const float *beta;  /* [T][nv] */
	const float *g;     /* [T][nv] */
	const float *z;     /* [T][nv * dv] */
	uint64_t T;
	bool recurrent;
	float *o;           /* [T][nv * dv] */
};

static void l2norm_scaled(const float *x, float *y, uint64_t n, float scale)
{
	float ss = 0, r;

	for (uint64_t i = 0; i < n; i++)
		ss += x[i] * x[i];
	r = 1.0f / sqrtf(ss + 1e-6f);
	for (uint64_t i = 0; i < n; i++)
		y[i] = (x[i] * r) * scale;
}

static void head_recurrent(const struct gdn_job *j, uint64_t head, float *qk /* [2][dk] */)
{
	const struct capy_model_config *c = &j->e->c;
	uint64_t dk = c->linear_key_head_dim, dv = c->linear_value_head_dim, nv = c->linear_value_heads;
	uint64_t nk = c->linear_key_heads, kh = head / (nv / nk), C = 2 * nk * dk + nv * dv;
	float *S = j->st->S + head * dk * dv, *q = qk, *k = qk + dk;
	const float qscale = 1.0f / sqrtf((float)dk);

	for (uint64_t t = 0; t < j->T; t++) {
		const float *row = j->conv + t * C, *v = row + 2 * nk * dk + head * dv;
		float decay = expf(j->g[t * nv + head]), beta = j->beta[t * nv + head];
		float *o = j->o + t * nv * dv + head * dv;
		l2norm_scaled(row + kh * dk, q, dk, 1.0f);
		for (uint64_t i = 0; i < dk; i++)
			q[i] *= qscale;
		l2norm_scaled(row + nk * dk + kh * dk, k, dk, 1.0f);
		for (uint64_t i = 0; i < dk * dv; i++)
			S[i] *= decay;
		for (uint64_t x = 0; x < dv; x++) {
			float mem = 0, d;
			for (uint64_t y = 0; y < dk; y++)
				mem += S[y * dv + x] * k[y];
			d = (v[x] - mem) * beta;
			for (uint64_t y = 0; y < dk; y++)
				S[y * dv + x] += k[y] * d;
		}
		for (uint64_t x = 0; x < dv; x++) {
			float acc = 0;
			for (uint64_t y = 0; y < dk; y++)
				acc += S[y * dv + x] * q[y];
			o[x] = acc;
		}
	}
}

/* Floats of per-thread workspace the chunked form needs. */
uint64_t gdn_chunk_floats(const struct capy_model_config *c)
{
	uint64_t dk = c->linear_key_head_dim, dv = c->linear_value_head_dim;

	return 4 * CHUNK * dk + 3 * CHUNK * dv + 3 * CHUNK * CHUNK + 2 * CHUNK + dv;
}

static void head_chunked(const struct gdn_job *j, uint64_t head, float *ws)
{
	const struct capy_model_config *c = &j->e->c;
	uint64_t dk = c->linear_key_head_dim, dv = c->linear_value_head_dim, nv = c->linear_value_heads;
	uint64_t nk = c->linear_key_heads, kh = head / (nv / nk), C = 2 * nk * dk + nv * dv;
	float *S = j->st->S + head * dk * dv;
	float *Q = ws, *K = Q + CHUNK * dk, *KB = K + CHUNK * dk, *KC = KB + CHUNK * dk; /* [CHUNK][dk] */
	float *VB = KC + CHUNK * dk, *U = VB + CHUNK * dv, *VN = U + CHUNK * dv;      /* [CHUNK][dv] */
	float *L = VN + CHUNK * dv, *UT = L + CHUNK * CHUNK, *IA = UT + CHUNK * CHUNK;  /* [CHUNK][CHUNK] */
	float *cum = IA + CHUNK * CHUNK, *beta = cum + CHUNK;
	const float qscale = 1.0f / sqrtf((float)dk);

	for (uint64_t t0 = 0; t0 < j->T; t0 += CHUNK) {
		uint64_t n = CAPY_MIN(CHUNK, j->T - t0);
		float run = 0, last;

		/* Padding rows (n..CHUNK) are zero and have g = 0, as in the reference. */
		memset(ws, 0, (4 * CHUNK * dk + 3 * CHUNK * dv) * sizeof(float));
		for (uint64_t i = 0; i < CHUNK; i++) {
			if (i < n) {
				const float *row = j->conv + (t0 + i) * C;
				l2norm_scaled(row + kh * dk, Q + i * dk, dk, 1.0f);
				for (uint64_t y = 0; y < dk; y++)
					Q[i * dk + y] *= qscale;
				l2norm_scaled(row + nk * dk + kh * dk, K + i * dk, dk, 1.0f);
				beta[i] = j->beta[(t0 + i) * nv + head];
				run += j->g[(t0 + i) * nv + head];
				for (uint64_t y = 0; y < dk; y++)
					KB[i * dk + y] = K[i * dk + y] * beta[i];
				for (uint64_t x = 0; x < dv; x++)
					VB[i * dv + x] = row[2 * nk * dk + head * dv + x] * beta[i];
			}
			cum[i] = run;
		}
		last = cum[CHUNK - 1];
		/* Decays between positions, the UT system and the intra-chunk attention. */
		for (uint64_t i = 0; i < CHUNK; i++) {
			for (uint64_t m = 0; m < CHUNK; m++) {
				float kk = 0, qk = 0;
				L[i * CHUNK + m] = m <= i ? expf(cum[i] - cum[m]) : 0;
				for (uint64_t y = 0; y < dk; y++) {
					kk += KB[i * dk + y] * K[m * dk + y];
					qk += Q[i * dk + y] * K[m * dk + y];
				}
				UT[i * CHUNK + m] = kk * L[i * CHUNK + m];
				IA[i * CHUNK + m] = qk * L[i * CHUNK + m];
			}
		}
		/* Forward substitution with the unit lower-triangular (I + strict lower UT):
		 * U = solve(v * beta), KC = solve(k * beta * exp(cum)). */
		for (uint64_t i = 0; i < CHUNK; i++) {
			float ec = expf(cum[i]);
			for (uint64_t x = 0; x < dv; x++) {
				float acc = VB[i * dv + x];
				for (uint64_t m = 0; m < i; m++)
					acc -= UT[i * CHUNK + m] * U[m * dv + x];
				U[i * dv + x] = acc;
			}
			for (uint64_t y = 0; y < dk; y++) {
				float acc = KB[i * dk + y] * ec;
				for (uint64_t m = 0; m < i; m++)
					acc -= UT[i * CHUNK + m] * KC[m * dk + y];
				KC[i * dk + y] = acc;
			}
		}
		/* v_new = U - KC S; out = (q exp(cum)) S + IA v_new. */
		for (uint64_t i = 0; i < CHUNK; i++) {
			float ec = expf(cum[i]);
			for (uint64_t x = 0; x < dv; x++) {
				float acc = 0;
				for (uint64_t y = 0; y < dk; y++)
					acc += KC[i * dk + y] * S[y * dv + x];
				VN[i * dv + x] = U[i * dv + x] - acc;
			}
			if (i >= n)
				continue;
			for (uint64_t x = 0; x < dv; x++) {
				float inter = 0, intra = 0;
				for (uint64_t y = 0; y < dk; y++)
					inter += (Q[i * dk + y] * ec) * S[y * dv + x];
				for (uint64_t m = 0; m <= i; m++)
					intra += IA[i * CHUNK + m] * VN[m * dv + x];
				j->o[(t0 + i) * nv * dv + head * dv + x] = inter + intra;
			}
		}
		/* S = S exp(last) + (k exp(last - cum))^T v_new. */
		for (uint64_t y = 0; y < dk; y++) {
			for (uint64_t x = 0; x < dv; x++) {
				float acc = 0;
				for (uint64_t m = 0; m < CHUNK; m++)
					acc += (K[m * dk + y] * expf(last - cum[m])) * VN[m * dv + x];
				S[y * dv + x] = S[y * dv + x] * expf(last) + acc;
			}
		}
	}
}

static void gdn_heads(void *p, uint64_t b, uint64_t end, int ith)
{
	const struct gdn_job *j = p;
	float *ws = j->e->s.gdn_buf + (uint64_t)ith * j->e->s.gdn_buf_floats;

	for (uint64_t h = b; h < end; h++) {
		if (j->recurrent)
			head_recurrent(j, h, ws);
		else
			head_chunked(j, h, ws);
	}
}

/* Gated RMSNorm per head: w * norm(o) * act(z), act = silu (or sigmoid for qwen4_exp configs
 * that ask for it). */
static void gated_norm(const struct capy_engine *e, const struct gdn_w *w, float *o, const float *z, uint64_t T)
{
	const struct capy_model_config *c = &e->c;
	uint64_t dv = c->linear_value_head_dim, heads = T * c->linear_value_heads;
	float eps = (float)c->rms_norm_eps;

	for (uint64_t h = 0; h < heads; h++) {
		float *x = o + h * dv, ss = 0, r;
		const float *g = z + h * dv;
		for (uint64_t i = 0; i < dv; i++)
			ss += x[i] * x[i];
		r = 1.0f / sqrtf(ss / (float)dv + eps);
		for (uint64_t i = 0; i < dv; i++) {
			float act = c->output_gate_sigmoid ? sigmoidf_(g[i]) : silu(g[i]);
			x[i] = (w->norm[i] * (x[i] * r)) * act;
		}
	}
}

void gdn_forward(struct capy_engine *e, struct capy_seq *s, const struct layer_w *l, const float *xn,
		 uint64_t T, float *out)
{
	const struct capy_model_config *c = &e->c;
	const struct gdn_w *w = &l->gdn;
	struct gdn_state *st = &s->gdn[l->gdn_slot];
	uint64_t nv = c->linear_value_heads, dv = c->linear_value_head_dim, K = c->linear_conv_kernel;
	uint64_t C = 2 * c->linear_key_heads * c->linear_key_head_dim + nv * dv;
	float *qkv = e->s.big1, *conv = e->s.big2, *z = e->s.big3, *ba = e->s.tmp, *o = e->s.mix;
	float *bb = ba, *aa = ba + T * nv, *beta = aa + T * nv, *g = beta + T * nv;
	struct gdn_job job = { e, w, st, conv, beta, g, z, T, T == 1 && s->len > 0, o };

	par_linear(e, &w->qkv, xn, T, qkv);
	par_linear(e, &w->z, xn, T, z);
	par_linear(e, &w->b, xn, T, bb);
	par_linear(e, &w->a, xn, T, aa);
	/* Causal depthwise conv over [window | new inputs], then silu. */
	for (uint64_t t = 0; t < T; t++) {
		for (uint64_t ch = 0; ch < C; ch++) {
			float acc = 0;
			for (uint64_t i = 0; i < K; i++) {
				int64_t src = (int64_t)t - (int64_t)(K - 1) + (int64_t)i;
				float x = src >= 0 ? qkv[(uint64_t)src * C + ch] : st->conv[(uint64_t)(src + (int64_t)K - 1) * C + ch];
				acc += w->conv[ch * K + i] * x;
			}
			conv[t * C + ch] = silu(acc);
		}
	}
	/* Keep the last K - 1 inputs as the window. */
	for (uint64_t i = 0; i < K - 1; i++) {
		int64_t src = (int64_t)T - (int64_t)(K - 1) + (int64_t)i;
		if (src >= 0)
			memcpy(st->conv + i * C, qkv + (uint64_t)src * C, C * sizeof(float));
		else
			memmove(st->conv + i * C, st->conv + (uint64_t)(src + (int64_t)K - 1) * C, C * sizeof(float));
	}
	for (uint64_t t = 0; t < T * nv; t++) {
		beta[t] = sigmoidf_(bb[t]);
		g[t] = w->neg_a[t % nv] * softplusf_(aa[t] + w->dt_bias[t % nv]);
	}
	par_for(e, nv, gdn_heads, &job);
	gated_norm(e, w, o, z, T);
	par_linear(e, &w->out, o, T, out);
}
