/* gdn.cu - Gated DeltaNet on the GPU: the causal depthwise conv with its window, the gates,
 * the gated delta rule (recurrent form, every item token by token) and the gated RMSNorm.
 * The oracle is libcore/backend/cpu/gdn.c; see capy-kernels.h for the contract. */
#include "capy-kernels.h"
#include "ck-common.cuh"

#include <cuda_runtime.h>

/* After a launch: 0, or the launch error as the header's negative cudaError_t. */
static __device__ __forceinline__ float silu_(float x)
{
	return x / (1.0f + expf(-x));
}

static __device__ __forceinline__ float sigmoid_(float x)
{
	return 1.0f / (1.0f + expf(-x));
}

extern "C" uint64_t ck_gdn_state_floats(const struct ck_gdn_shape *g)
{
	return (g->K - 1) * g->C + g->nv * g->dk * g->dv;
}

/* --- conv ------------------------------------------------------------------------------ */

/* One block per row t, threads over channels: out = silu(sum over i < K in order of
 * w[ch][i] * x_i), x_i the input K - 1 - i rows back, from the item's rows or (before its
 * first row) from its window. Reads the window only; gdn_conv_window moves it on after. */
static __global__ void gdn_conv_out(const int32_t *item, const int64_t *t0, float *const *state, uint64_t slot_off,
				    const float *qkv, const float *w, uint64_t C, uint32_t K, float *conv)
{
	ck_grid_enter();
	const uint64_t t = blockIdx.x;
	const int32_t it = item[t];
	const uint64_t first = (uint64_t)t0[it];
	const int64_t tt = (int64_t)(t - first); /* the row's index in its item */
	const float *win = state[it] + slot_off;

	/* Channels are spread over blockIdx.y too: a decode row alone must still fill the GPU. */
	for (uint64_t ch = (uint64_t)blockIdx.y * blockDim.x + threadIdx.x; ch < C; ch += (uint64_t)gridDim.y * blockDim.x) {
		float acc = 0;
		for (uint32_t i = 0; i < K; i++) {
			int64_t src = tt - (int64_t)(K - 1) + (int64_t)i;
			float x = src >= 0 ? qkv[(first + (uint64_t)src) * C + ch]
					   : win[(uint64_t)(src + (int64_t)K - 1) * C + ch];
			acc += w[ch * K + i] * x;
		}
		conv[t * C + ch] = silu_(acc);
	}
}

/* One thread per (item, channel): the window becomes the last K - 1 inputs of [window | rows].
 * Entry i comes from row n - (K - 1) + i, or (n < K - 1) from old entry n + i >= i: walking i
 * upwards reads every old entry before this thread overwrites it (the CPU's memmove). */
static __global__ void gdn_conv_window(const int64_t *t0, const int64_t *n, float *const *state, uint64_t slot_off,
				       const float *qkv, uint64_t C, uint32_t K)
{
	ck_grid_enter();
	const uint32_t it = blockIdx.x;
	const uint64_t ch = (uint64_t)blockIdx.y * blockDim.x + threadIdx.x;
	float *win = state[it] + slot_off;
	const int64_t nn = n[it];
	const uint64_t first = (uint64_t)t0[it];

	if (ch >= C)
		return;
	for (uint32_t i = 0; i + 1 < K; i++) {
		int64_t src = nn - (int64_t)(K - 1) + (int64_t)i;
		win[(uint64_t)i * C + ch] = src >= 0 ? qkv[(first + (uint64_t)src) * C + ch]
						     : win[(uint64_t)(src + (int64_t)K - 1) * C + ch];
	}
}

extern "C" int ck_gdn_conv(const struct ck_step *st, const struct ck_gdn_shape *g, int slot, const float *qkv,
			   const float *w, float *conv, void *stream)
{
	cudaStream_t s = (cudaStream_t)stream;
	const uint64_t slot_off = (uint64_t)slot * ck_gdn_state_floats(g);
	const unsigned threads = 256;
	int rc;

	if (st->T == 0 || st->n_items == 0)
		return 0;
	/* Two kernels in stream order: every conv output has read the old window before any
	 * window is rewritten. */
	ck_launch(gdn_conv_out, dim3((unsigned)st->T, (unsigned)((g->C + threads - 1) / threads < 65535 ? (g->C + threads - 1) / threads : 65535)),
		       threads, 0, s, st->item, st->t0, st->gdn_state, slot_off, qkv, w, g->C, (uint32_t)g->K, conv);
	if ((rc = ck_launched()))
		return rc;
	if (g->K < 2)
		return 0;
	ck_launch(gdn_conv_window, dim3(st->n_items, (unsigned)((g->C + threads - 1) / threads)), threads, 0, s, 
		st->t0, st->n, st->gdn_state, slot_off, qkv, g->C, (uint32_t)g->K);
	return ck_launched();
}

/* --- gates ----------------------------------------------------------------------------- */

static __global__ void gdn_gates_k(const float *b, const float *a, const float *neg_a, const float *dt_bias,
				   uint64_t N, uint64_t nv, float *beta, float *g)
{
	ck_grid_enter();
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += (uint64_t)gridDim.x * blockDim.x) {
		uint64_t h = i % nv;
		float x = a[i] + dt_bias[h];
		beta[i] = sigmoid_(b[i]);
		/* torch's softplus, threshold 20, as the CPU's softplusf_ */
		g[i] = neg_a[h] * (x > 20.0f ? x : log1pf(expf(x)));
	}
}

extern "C" int ck_gdn_gates(const float *b, const float *a, const float *neg_a, const float *dt_bias, uint64_t T,
			    uint64_t nv, float *beta, float *g, void *stream)
{
	const uint64_t N = T * nv;
	const unsigned threads = 256;
	uint64_t blocks = (N + threads - 1) / threads;

	if (N == 0)
		return 0;
	if (blocks > (1u << 20))
		blocks = 1u << 20; /* grid-stride beyond */
	ck_launch(gdn_gates_k, (unsigned)blocks, threads, 0, (cudaStream_t)stream, b, a, neg_a, dt_bias, N, nv, beta, g);
	return ck_launched();
}

/* --- the gated delta rule, recurrent ---------------------------------------------------- */

/* A warp holds 8 columns x of S for all dk rows: lane = 4 x + r, and lane r of a column owns
 * the rows 16 j + 4 r + u (u < 4, j < JJ), so a column's sums over dk are 4 per-lane partials
 * added with two xor shuffles, with no shared memory and no barrier: the only thing a token
 * waits for is its own column's previous token. Four warps a block (32 columns), one block
 * per (item, 32 columns) along x and value head along y, as many warps as columns / 8, so
 * one decoding item still spreads over the GPU. A lane reads its own rows of q and k straight
 * from the conv output, the next row's already in flight while it computes the current one
 * (the loads are what a token would otherwise wait for).
 *
 * The order of every sum is fixed by the item's data alone (batch invariant): a lane's
 * partial over its rows as 4 chains (u) added (0 + 1) + (2 + 3) in j order, then the xor
 * butterfly; the q and k sums of squares the same way. VEC: rows of 16-byte aligned float4s
 * (dk % 16 == 0 and C % 4 == 0, the real models); otherwise scalar loads with row guards. */
#define GDN_WARPS 4
#define GDN_COLS 32 /* columns per block: 8 per warp */

template <int JJ, bool VEC>
struct gdn_row {
	float q[JJ][4], k[JJ][4], v, b, g;
};

template <int JJ, bool VEC>
static __device__ __forceinline__ void gdn_load(gdn_row<JJ, VEC> &d, const float *row, uint64_t qoff, uint64_t koff,
						uint64_t voff, bool act, uint32_t r, uint32_t dk, const float *beta,
						const float *gg)
{
#pragma unroll
	for (int j = 0; j < JJ; j++) {
		const uint32_t y = 16 * j + 4 * r;
		if (VEC) {
			const float4 q4 = __ldg((const float4 *)(row + qoff + y)), k4 = __ldg((const float4 *)(row + koff + y));
			d.q[j][0] = q4.x, d.q[j][1] = q4.y, d.q[j][2] = q4.z, d.q[j][3] = q4.w;
			d.k[j][0] = k4.x, d.k[j][1] = k4.y, d.k[j][2] = k4.z, d.k[j][3] = k4.w;
		} else {
#pragma unroll
			for (int u = 0; u < 4; u++) {
				d.q[j][u] = y + u < dk ? __ldg(row + qoff + y + u) : 0.0f;
				d.k[j][u] = y + u < dk ? __ldg(row + koff + y + u) : 0.0f;
			}
		}
	}
	d.v = act ? __ldg(row + voff) : 0.0f;
	d.b = __ldg(beta);
	d.g = __ldg(gg);
}

/* The four per-u chains of a lane, then its column's four lanes. */
static __device__ __forceinline__ float gdn_sum4(const float p[4])
{
	float t = (p[0] + p[1]) + (p[2] + p[3]);
	t += __shfl_xor_sync(0xffffffffu, t, 1);
	return t + __shfl_xor_sync(0xffffffffu, t, 2);
}

template <int JJ, bool VEC>
static __global__ __launch_bounds__(GDN_WARPS * 32) void gdn_recurrent_k(
	const int64_t *t0s, const int64_t *ns, float *const *state, uint64_t s_off, const float *conv,
	const float *beta, const float *gg, float *o, uint32_t nk, uint32_t nv, uint32_t dk, uint32_t dv, uint64_t C)
{
	ck_grid_enter();
	const uint32_t lane = threadIdx.x % 32, r = lane % 4, wi = threadIdx.x / 32;
	const uint32_t ncb = (dv + GDN_COLS - 1) / GDN_COLS, it = blockIdx.x / ncb, head = blockIdx.y;
	const uint32_t x = (blockIdx.x % ncb) * GDN_COLS + wi * 8 + lane / 4;
	const bool act = x < dv;
	const int64_t n = ns[it];
	const uint64_t first = (uint64_t)t0s[it];
	const uint32_t kh = head / (nv / nk);
	const uint64_t qoff = (uint64_t)kh * dk, koff = (uint64_t)nk * dk + (uint64_t)kh * dk;
	const uint64_t voff = 2 * (uint64_t)nk * dk + (uint64_t)head * dv + (act ? x : 0);
	const float qscale = 1.0f / sqrtf((float)dk);
	float *S = state[it] + s_off + (uint64_t)head * dk * dv;
	float s[JJ][4];
	gdn_row<JJ, VEC> cur, nxt;

	if (n <= 0)
		return;
#pragma unroll
	for (int j = 0; j < JJ; j++)
#pragma unroll
		for (int u = 0; u < 4; u++) {
			const uint32_t y = 16 * j + 4 * r + u;
			s[j][u] = act && y < dk ? S[(uint64_t)y * dv + x] : 0.0f;
		}
	gdn_load<JJ, VEC>(cur, conv + first * C, qoff, koff, voff, act, r, dk, beta + first * nv + head,
			  gg + first * nv + head);
	for (int64_t i = 0; i < n; i++) {
		const uint64_t t = first + (uint64_t)i;
		if (i + 1 < n) /* the next row's loads fly while this row computes */
			gdn_load<JJ, VEC>(nxt, conv + (t + 1) * C, qoff, koff, voff, act, r, dk, beta + (t + 1) * nv + head,
					  gg + (t + 1) * nv + head);
		float pq[4] = { 0, 0, 0, 0 }, pk[4] = { 0, 0, 0, 0 }, pm[4] = { 0, 0, 0, 0 }, po[4] = { 0, 0, 0, 0 };
#pragma unroll
		for (int j = 0; j < JJ; j++)
#pragma unroll
			for (int u = 0; u < 4; u++) {
				pq[u] += cur.q[j][u] * cur.q[j][u];
				pk[u] += cur.k[j][u] * cur.k[j][u];
			}
		const float rq = 1.0f / sqrtf(gdn_sum4(pq) + 1e-6f), rk = 1.0f / sqrtf(gdn_sum4(pk) + 1e-6f);
		const float decay = expf(cur.g);
		/* S *= exp(g); mem = S^T k (k = k_raw r_k, as l2norm_scaled) */
#pragma unroll
		for (int j = 0; j < JJ; j++)
#pragma unroll
			for (int u = 0; u < 4; u++) {
				s[j][u] *= decay;
				pm[u] += s[j][u] * (cur.k[j][u] * rk);
			}
		const float d = (cur.v - gdn_sum4(pm)) * cur.b;
		/* S += k d^T; o = S^T q (q = (q_raw r_q) dk^-1/2, as head_recurrent) */
#pragma unroll
		for (int j = 0; j < JJ; j++)
#pragma unroll
			for (int u = 0; u < 4; u++) {
				s[j][u] += (cur.k[j][u] * rk) * d;
				po[u] += s[j][u] * ((cur.q[j][u] * rq) * qscale);
			}
		const float out = gdn_sum4(po);
		if (r == 0 && act)
			o[t * nv * dv + (uint64_t)head * dv + x] = out;
		cur = nxt;
	}
#pragma unroll
	for (int j = 0; j < JJ; j++)
#pragma unroll
		for (int u = 0; u < 4; u++) {
			const uint32_t y = 16 * j + 4 * r + u;
			if (act && y < dk)
				S[(uint64_t)y * dv + x] = s[j][u];
		}
}

template <int JJ>
static void gdn_launch_jj(bool vec, dim3 grid, cudaStream_t s, const struct ck_step *st, uint64_t s_off,
			  const float *conv, const float *beta, const float *gg, float *o, const struct ck_gdn_shape *g)
{
	const uint32_t nk = (uint32_t)g->nk, nv = (uint32_t)g->nv, dk = (uint32_t)g->dk, dv = (uint32_t)g->dv;

	if (vec)
		ck_launch(gdn_recurrent_k<JJ, true>, grid, GDN_WARPS * 32, 0, s, st->t0, st->n, st->gdn_state, s_off, conv,
			  beta, gg, o, nk, nv, dk, dv, g->C);
	else
		ck_launch(gdn_recurrent_k<JJ, false>, grid, GDN_WARPS * 32, 0, s, st->t0, st->n, st->gdn_state, s_off,
			  conv, beta, gg, o, nk, nv, dk, dv, g->C);
}

extern "C" int ck_gdn_recurrent(const struct ck_step *st, const struct ck_gdn_shape *g, int slot, const float *conv,
				const float *beta, const float *gg, float *o, void *stream)
{
	cudaStream_t s = (cudaStream_t)stream;
	const uint64_t s_off = (uint64_t)slot * ck_gdn_state_floats(g) + (g->K - 1) * g->C;
	const uint64_t ncb = (g->dv + GDN_COLS - 1) / GDN_COLS;
	const dim3 grid((unsigned)(ncb * st->n_items), (unsigned)g->nv); /* x: no 65535 limit on items */
	const bool vec = g->dk % 16 == 0 && g->C % 4 == 0 && (uintptr_t)conv % 16 == 0;
	const uint64_t jj = (g->dk + 15) / 16;

	if (st->T == 0 || st->n_items == 0)
		return 0;
	/* Row groups of 16 per lane set: the smallest instantiated JJ with 16 JJ >= dk. */
	if (jj <= 1)
		gdn_launch_jj<1>(vec, grid, s, st, s_off, conv, beta, gg, o, g);
	else if (jj <= 2)
		gdn_launch_jj<2>(vec, grid, s, st, s_off, conv, beta, gg, o, g);
	else if (jj <= 4)
		gdn_launch_jj<4>(vec, grid, s, st, s_off, conv, beta, gg, o, g);
	else if (jj <= 8)
		gdn_launch_jj<8>(vec, grid, s, st, s_off, conv, beta, gg, o, g);
	else if (jj <= 16)
		gdn_launch_jj<16>(vec, grid, s, st, s_off, conv, beta, gg, o, g);
	else
		return -(int)cudaErrorInvalidValue; /* dk > 256: no model has it */
	return ck_launched();
}

/* --- gated RMSNorm ---------------------------------------------------------------------- */

/* One block of 4 warps per (row, head): the sum of squares as per-thread strided partials,
 * an xor butterfly per warp, then the 4 warps in order. */
static __global__ __launch_bounds__(128) void gdn_gated_norm_k(float *o, const float *z, const float *norm_w,
							       uint32_t dv, float eps, bool gate_sigmoid)
{
	ck_grid_enter();
	__shared__ float red[4];
	float *xr = o + (uint64_t)blockIdx.x * dv;
	const float *zr = z + (uint64_t)blockIdx.x * dv;
	float ss = 0, r;

	for (uint32_t i = threadIdx.x; i < dv; i += 128)
		ss += xr[i] * xr[i];
	for (int off = 16; off; off >>= 1)
		ss += __shfl_xor_sync(0xffffffffu, ss, off);
	if (threadIdx.x % 32 == 0)
		red[threadIdx.x / 32] = ss;
	__syncthreads();
	ss = ((red[0] + red[1]) + red[2]) + red[3];
	r = 1.0f / sqrtf(ss / (float)dv + eps);
	/* each thread rewrites only the elements it read itself */
	for (uint32_t i = threadIdx.x; i < dv; i += 128) {
		float act = gate_sigmoid ? sigmoid_(zr[i]) : silu_(zr[i]);
		xr[i] = (norm_w[i] * (xr[i] * r)) * act;
	}
}

extern "C" int ck_gdn_gated_norm(float *o, const float *z, const float *norm_w, uint64_t T, uint64_t nv, uint64_t dv,
				 float eps, bool gate_sigmoid, void *stream)
{
	if (T * nv == 0)
		return 0;
	ck_launch(gdn_gated_norm_k, (unsigned)(T * nv), 128, 0, (cudaStream_t)stream, o, z, norm_w, (uint32_t)dv, eps,
										gate_sigmoid);
	return ck_launched();
}
