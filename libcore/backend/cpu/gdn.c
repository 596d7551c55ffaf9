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
#include "cpu-impl.h"

#include <math.h>

#define CHUNK 64

struct gdn_job {
	struct cpu_engine *e;
	const struct capy_gdn_w *w;
	struct gdn_state *st;
	const float *conv;  /* [T][C] conv output after silu: q | k | v */
	const float *beta;  /* [T][nv] */
	const float *g;     /* [T][nv] */
	const float *z;     /* [T][nv * dv] */
	uint64_t T;
	bool recurrent;
	float *o;           /* [T][nv * dv] */
	int slot;           /* the layer's index among the GDN states */
	void *const *keep;  /* keep_states: the state after each token but the last, or NULL */
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

CAPY_HOT static void head_recurrent(const struct gdn_job *j, uint64_t head, float *qk /* [2][dk], then [dv] */)
{
	const struct capy_model_config *c = &j->e->c;
	uint64_t dk = c->linear_key_head_dim, dv = c->linear_value_head_dim, nv = c->linear_value_heads;
	uint64_t nk = c->linear_key_heads, kh = head / (nv / nk), C = 2 * nk * dk + nv * dv;
	float *S = j->st->S + head * dk * dv, *q = qk, *k = qk + dk, *mem = qk + 2 * dk;
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
		/* mem = S^T k, d = beta (v - mem), S += k d^T, o = S^T q: row-wise (axpy) so the
		 * inner loops run along contiguous rows of S. */
		for (uint64_t x = 0; x < dv; x++)
			mem[x] = 0;
		for (uint64_t y = 0; y < dk; y++) {
			const float *Sy = S + y * dv;
			float ky = k[y];
			for (uint64_t x = 0; x < dv; x++)
				mem[x] += Sy[x] * ky;
		}
		for (uint64_t x = 0; x < dv; x++)
			mem[x] = (v[x] - mem[x]) * beta;
		for (uint64_t x = 0; x < dv; x++)
			o[x] = 0;
		for (uint64_t y = 0; y < dk; y++) {
			float *Sy = S + y * dv;
			float ky = k[y], qy = q[y];
			for (uint64_t x = 0; x < dv; x++) {
				Sy[x] += ky * mem[x];
				o[x] += Sy[x] * qy;
			}
		}
		if (j->keep && t + 1 < j->T)
			memcpy(((struct cpu_state *)j->keep[t])->gdn[j->slot].S + head * dk * dv, S, dk * dv * sizeof(float));
	}
}

/* Floats of per-thread workspace the chunked form needs. */
uint64_t gdn_chunk_floats(const struct capy_model_config *c)
{
	uint64_t dk = c->linear_key_head_dim, dv = c->linear_value_head_dim;

	return 4 * CHUNK * dk + 3 * CHUNK * dv + 3 * CHUNK * CHUNK + 4 * CHUNK + dv + 2 * dk;
}

CAPY_HOT static void head_chunked(const struct gdn_job *j, uint64_t head, float *ws)
{
	const struct capy_model_config *c = &j->e->c;
	uint64_t dk = c->linear_key_head_dim, dv = c->linear_value_head_dim, nv = c->linear_value_heads;
	uint64_t nk = c->linear_key_heads, kh = head / (nv / nk), C = 2 * nk * dk + nv * dv;
	float *S = j->st->S + head * dk * dv;
	float *Q = ws, *K = Q + CHUNK * dk, *KB = K + CHUNK * dk, *KC = KB + CHUNK * dk; /* [CHUNK][dk] */
	float *VB = KC + CHUNK * dk, *U = VB + CHUNK * dv, *VN = U + CHUNK * dv;      /* [CHUNK][dv] */
	float *UT = VN + CHUNK * dv, *IA = UT + CHUNK * CHUNK;                           /* [CHUNK][CHUNK] */
	float *cum = IA + CHUNK * CHUNK, *beta = cum + CHUNK, *ec = beta + CHUNK, *el = ec + CHUNK;
	float *row_out = el + CHUNK; /* [dv] */
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
			ec[i] = expf(cum[i]);
			el[i] = expf(last - cum[i]);
			for (uint64_t m = 0; m < CHUNK; m++) {
				float dec;
				const float *km = K + m * dk;
				if (m > i) {
					UT[i * CHUNK + m] = IA[i * CHUNK + m] = 0;
					continue;
				}
				dec = expf(cum[i] - cum[m]);
				UT[i * CHUNK + m] = dot16(KB + i * dk, km, dk) * dec;
				IA[i * CHUNK + m] = dot16(Q + i * dk, km, dk) * dec;
			}
		}
		/* Forward substitution with the unit lower-triangular (I + strict lower UT):
		 * U = solve(v * beta), KC = solve(k * beta * exp(cum)). */
		for (uint64_t i = 0; i < CHUNK; i++) {
			float *u = U + i * dv, *kc = KC + i * dk;
			for (uint64_t x = 0; x < dv; x++)
				u[x] = VB[i * dv + x];
			for (uint64_t y = 0; y < dk; y++)
				kc[y] = KB[i * dk + y] * ec[i];
			for (uint64_t m = 0; m < i; m++) {
				float l = UT[i * CHUNK + m];
				const float *um = U + m * dv, *km = KC + m * dk;
				for (uint64_t x = 0; x < dv; x++)
					u[x] -= l * um[x];
				for (uint64_t y = 0; y < dk; y++)
					kc[y] -= l * km[y];
			}
		}
		/* v_new = U - KC S; out = (q exp(cum)) S + IA v_new (row by row, along S's rows). */
		for (uint64_t i = 0; i < CHUNK; i++) {
			float *vn = VN + i * dv, *o = row_out;
			for (uint64_t x = 0; x < dv; x++)
				vn[x] = U[i * dv + x];
			for (uint64_t y = 0; y < dk; y++) {
				const float *Sy = S + y * dv;
				float coef = KC[i * dk + y];
				for (uint64_t x = 0; x < dv; x++)
					vn[x] -= coef * Sy[x];
			}
			if (i >= n)
				continue;
			for (uint64_t x = 0; x < dv; x++)
				o[x] = 0;
			for (uint64_t y = 0; y < dk; y++) {
				const float *Sy = S + y * dv;
				float coef = Q[i * dk + y] * ec[i];
				for (uint64_t x = 0; x < dv; x++)
					o[x] += coef * Sy[x];
			}
			for (uint64_t m = 0; m <= i; m++) {
				const float *vm = VN + m * dv;
				float coef = IA[i * CHUNK + m];
				for (uint64_t x = 0; x < dv; x++)
					o[x] += coef * vm[x];
			}
			memcpy(j->o + (t0 + i) * nv * dv + head * dv, o, dv * sizeof(float));
		}
		/* S = S exp(last) + (k exp(last - cum))^T v_new. */
		{
			float dl = expf(last);
			for (uint64_t x = 0; x < dk * dv; x++)
				S[x] *= dl;
			for (uint64_t m = 0; m < CHUNK; m++) {
				const float *vm = VN + m * dv;
				for (uint64_t y = 0; y < dk; y++) {
					float coef = K[m * dk + y] * el[m];
					float *Sy = S + y * dv;
					for (uint64_t x = 0; x < dv; x++)
						Sy[x] += coef * vm[x];
				}
			}
		}
	}
}

/* One (sequence, value head) per work unit: the job's arrays cover all rows of the step,
 * each unit sees its sequence's rows and state. One token after a history runs the
 * recurrent form, anything else the chunked one, except a verification (keep_states): its
 * tokens run the recurrent form one by one, as one-token steps would, since the two forms
 * differ in the last bits (and only the recurrent one passes through each token's state). */
static void gdn_heads(void *p, uint64_t b, uint64_t end, int ith)
{
	const struct gdn_job *j = p;
	const struct capy_model_config *c = &j->e->c;
	uint64_t nv = c->linear_value_heads, dv = c->linear_value_head_dim;
	uint64_t C = 2 * c->linear_key_heads * c->linear_key_head_dim + nv * dv;
	float *ws = j->e->s.gdn_buf + (uint64_t)ith * j->e->s.gdn_buf_floats;

	for (uint64_t u = b; u < end; u++) {
		const struct capy_batch_item *it = &j->e->batch->items[u / nv];
		uint64_t h = u % nv, t0 = it->t0;
		struct gdn_job sub = *j;
		sub.st = &seq_state(it->seq)->gdn[j->slot];
		sub.conv = j->conv + t0 * C;
		sub.beta = j->beta + t0 * nv;
		sub.g = j->g + t0 * nv;
		sub.z = j->z + t0 * nv * dv;
		sub.o = j->o + t0 * nv * dv;
		sub.T = it->n;
		sub.keep = it->states;
		sub.recurrent = (it->n == 1 && it->seq->len > 0) || it->states;
		if (sub.recurrent)
			head_recurrent(&sub, h, ws);
		else
			head_chunked(&sub, h, ws);
	}
}

/* Gated RMSNorm per head: w * norm(o) * act(z), act = silu (or sigmoid for qwen4_exp configs
 * that ask for it). */
static void gated_norm(const struct cpu_engine *e, const struct capy_gdn_w *w, float *o, const float *z, uint64_t T)
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

/* keep_states: the window after each token t < T - 1 (the last K - 1 inputs of [window |
 * rows 0..t]) into the kept state of t, before the window moves on. */
static void keep_windows(void *const *keep, int slot, const struct gdn_state *st, const float *qkv, uint64_t T,
			 uint64_t C, uint64_t K)
{
	for (uint64_t t = 0; t + 1 < T; t++) {
		float *win = ((struct cpu_state *)keep[t])->gdn[slot].conv;
		for (uint64_t i = 0; i < K - 1; i++) {
			int64_t src = (int64_t)t + 1 - (int64_t)(K - 1) + (int64_t)i;
			const float *from = src >= 0 ? qkv + (uint64_t)src * C : st->conv + (uint64_t)(src + (int64_t)K - 1) * C;
			memcpy(win + i * C, from, C * sizeof(float));
		}
	}
}

/* Causal depthwise conv of one sequence's rows over [window | new inputs], then silu; the
 * window keeps the last K - 1 inputs. */
static void conv_rows(const struct capy_gdn_w *w, struct gdn_state *st, const float *qkv, uint64_t T, uint64_t C,
		      uint64_t K, float *conv)
{
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
	for (uint64_t i = 0; i < K - 1; i++) {
		int64_t src = (int64_t)T - (int64_t)(K - 1) + (int64_t)i;
		if (src >= 0)
			memcpy(st->conv + i * C, qkv + (uint64_t)src * C, C * sizeof(float));
		else
			memmove(st->conv + i * C, st->conv + (uint64_t)(src + (int64_t)K - 1) * C, C * sizeof(float));
	}
}

void gdn_forward(struct cpu_engine *e, const struct capy_layer_w *l, const float *xn, uint64_t T, float *out)
{
	const struct capy_model_config *c = &e->c;
	const struct capy_batch *bt = e->batch;
	const struct capy_gdn_w *w = &l->gdn;
	uint64_t nv = c->linear_value_heads, dv = c->linear_value_head_dim, K = c->linear_conv_kernel;
	uint64_t C = 2 * c->linear_key_heads * c->linear_key_head_dim + nv * dv;
	float *qkv = e->s.big1, *conv = e->s.big2, *z = e->s.big3, *ba = e->s.tmp, *o = e->s.mix;
	float *bb = ba, *aa = ba + T * nv, *beta = aa + T * nv, *g = beta + T * nv;
	struct gdn_job job = { e, w, NULL, conv, beta, g, z, T, false, o, l->gdn_slot, NULL };

	par_linear(e, &w->qkv, xn, T, qkv);
	par_linear(e, &w->z, xn, T, z);
	par_linear(e, &w->b, xn, T, bb);
	par_linear(e, &w->a, xn, T, aa);
	for (size_t i = 0; i < bt->n_items; i++) {
		const struct capy_batch_item *it = &bt->items[i];
		struct gdn_state *st = &seq_state(it->seq)->gdn[l->gdn_slot];
		if (it->states)
			keep_windows(it->states, l->gdn_slot, st, qkv + it->t0 * C, it->n, C, K);
		conv_rows(w, st, qkv + it->t0 * C, it->n, C, K, conv + it->t0 * C);
	}
	for (uint64_t t = 0; t < T * nv; t++) {
		beta[t] = sigmoidf_(bb[t]);
		g[t] = w->neg_a[t % nv] * softplusf_(aa[t] + w->dt_bias[t % nv]);
	}
	par_for_work(e, bt->n_items * nv, T * nv * c->linear_key_head_dim * dv * 4, gdn_heads, &job);
	gated_norm(e, w, o, z, T);
	if (e->tp.ranks > 1)
		tp_linear(e, &w->out, o, T, out, &e->tp.gdn_v_heads, e->c.linear_value_head_dim);
	else
		par_linear(e, &w->out, o, T, out);
}
