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

/* One block per (item, column block) along x and value head along y, 4 warps: lane c owns
 * column x of S (32 columns per block, so several blocks share a head and a decoding item
 * still fills the GPU), warp w owns rows [w R, w R + R) of that column, in registers for all
 * the item's rows (4 R >= dk; rows past dk are zero). The columns of S are independent in
 * the rule (mem, d, the update and o are per column), only q and k are shared: each block
 * normalises them itself. The reductions over dk: per thread in row order, then the 4
 * warps' partials in warp order through shared memory; the q/k sums of squares by one warp
 * each (strided partials, then an xor butterfly). All of it depends on the item's data
 * only, so results are batch invariant. */
#define GDN_WARPS 4
#define GDN_COLS 32

template <int R>
static __global__ __launch_bounds__(GDN_WARPS * 32) void gdn_recurrent_k(
	const int64_t *t0s, const int64_t *ns, float *const *state, uint64_t s_off, const float *conv,
	const float *beta, const float *gg, float *o, uint32_t nk, uint32_t nv, uint32_t dk, uint32_t dv, uint64_t C)
{
	ck_grid_enter();
	__shared__ float sq[GDN_WARPS * R], sk[GDN_WARPS * R]; /* raw q, k of the row, zero past dk */
	__shared__ float red_m[GDN_WARPS][GDN_COLS], red_o[GDN_WARPS][GDN_COLS];
	__shared__ float rn[2]; /* 1 / |q|, 1 / |k| */
	const uint32_t c = threadIdx.x % 32, wi = threadIdx.x / 32;
	const uint32_t ncb = (dv + GDN_COLS - 1) / GDN_COLS, it = blockIdx.x / ncb, head = blockIdx.y;
	const uint32_t x = (blockIdx.x % ncb) * GDN_COLS + c;
	const bool act = x < dv;
	const int64_t n = ns[it];
	const uint64_t first = (uint64_t)t0s[it];
	const uint32_t kh = head / (nv / nk);
	const uint64_t qoff = (uint64_t)kh * dk, koff = (uint64_t)nk * dk + (uint64_t)kh * dk;
	const uint64_t voff = 2 * (uint64_t)nk * dk + (uint64_t)head * dv + x;
	const float qscale = 1.0f / sqrtf((float)dk);
	float *S = state[it] + s_off + (uint64_t)head * dk * dv;
	float s[R];

	if (n <= 0) /* block-uniform: no barrier is skipped by part of the block */
		return;
#pragma unroll
	for (int j = 0; j < R; j++) {
		uint32_t y = wi * R + j;
		s[j] = act && y < dk ? S[(uint64_t)y * dv + x] : 0.0f;
	}
	for (int64_t r = 0; r < n; r++) {
		const uint64_t t = first + (uint64_t)r;
		const float *row = conv + t * C;
		const float v = act ? row[voff] : 0.0f;
		const float b = beta[t * nv + head], decay = expf(gg[t * nv + head]);
		float pm = 0, po = 0, mem, d, rq, rk;

		/* The previous row's last barrier has passed: every use of sq, sk, rn is done. */
		for (uint32_t i = threadIdx.x; i < GDN_WARPS * R; i += blockDim.x) {
			sq[i] = i < dk ? row[qoff + i] : 0.0f;
			sk[i] = i < dk ? row[koff + i] : 0.0f;
		}
		__syncthreads();
		if (wi < 2) {
			const float *src = wi ? sk : sq;
			float ss = 0;
			for (uint32_t i = c; i < dk; i += 32)
				ss += src[i] * src[i];
			for (int off = 16; off; off >>= 1)
				ss += __shfl_xor_sync(0xffffffffu, ss, off);
			if (c == 0)
				rn[wi] = 1.0f / sqrtf(ss + 1e-6f);
		}
		__syncthreads();
		rq = rn[0];
		rk = rn[1];
		/* S *= exp(g); mem = S^T k (k = k_raw r_k, as l2norm_scaled) */
#pragma unroll
		for (int j = 0; j < R; j++) {
			s[j] *= decay;
			pm += s[j] * (sk[wi * R + j] * rk);
		}
		red_m[wi][c] = pm;
		__syncthreads();
		mem = red_m[0][c];
#pragma unroll
		for (int w = 1; w < GDN_WARPS; w++)
			mem += red_m[w][c];
		d = (v - mem) * b;
		/* S += k d^T; o = S^T q (q = (q_raw r_q) dk^-1/2, as head_recurrent) */
#pragma unroll
		for (int j = 0; j < R; j++) {
			float ky = sk[wi * R + j] * rk, qy = (sq[wi * R + j] * rq) * qscale;
			s[j] += ky * d;
			po += s[j] * qy;
		}
		red_o[wi][c] = po;
		__syncthreads();
		if (wi == 0 && act) {
			float out = red_o[0][c];
#pragma unroll
			for (int w = 1; w < GDN_WARPS; w++)
				out += red_o[w][c];
			o[t * nv * dv + (uint64_t)head * dv + x] = out;
		}
	}
#pragma unroll
	for (int j = 0; j < R; j++) {
		uint32_t y = wi * R + j;
		if (act && y < dk)
			S[(uint64_t)y * dv + x] = s[j];
	}
}

extern "C" int ck_gdn_recurrent(const struct ck_step *st, const struct ck_gdn_shape *g, int slot, const float *conv,
				const float *beta, const float *gg, float *o, void *stream)
{
	cudaStream_t s = (cudaStream_t)stream;
	const uint64_t s_off = (uint64_t)slot * ck_gdn_state_floats(g) + (g->K - 1) * g->C;
	const uint64_t ncb = (g->dv + GDN_COLS - 1) / GDN_COLS;
	const dim3 grid((unsigned)(ncb * st->n_items), (unsigned)g->nv); /* x: no 65535 limit on items */
	const unsigned threads = GDN_WARPS * 32;
	const uint32_t nk = (uint32_t)g->nk, nv = (uint32_t)g->nv, dk = (uint32_t)g->dk, dv = (uint32_t)g->dv;

	if (st->T == 0 || st->n_items == 0)
		return 0;
	/* Rows per warp: the smallest instantiated R with 4 R >= dk. */
	if (dk <= 4 * 4)
		ck_launch(gdn_recurrent_k<4>, grid, threads, 0, s, st->t0, st->n, st->gdn_state, s_off, conv, beta, gg, o, nk,
							    nv, dk, dv, g->C);
	else if (dk <= 4 * 8)
		ck_launch(gdn_recurrent_k<8>, grid, threads, 0, s, st->t0, st->n, st->gdn_state, s_off, conv, beta, gg, o, nk,
							    nv, dk, dv, g->C);
	else if (dk <= 4 * 16)
		ck_launch(gdn_recurrent_k<16>, grid, threads, 0, s, st->t0, st->n, st->gdn_state, s_off, conv, beta, gg, o,
							     nk, nv, dk, dv, g->C);
	else if (dk <= 4 * 32)
		ck_launch(gdn_recurrent_k<32>, grid, threads, 0, s, st->t0, st->n, st->gdn_state, s_off, conv, beta, gg, o,
							     nk, nv, dk, dv, g->C);
	else if (dk <= 4 * 64)
		ck_launch(gdn_recurrent_k<64>, grid, threads, 0, s, st->t0, st->n, st->gdn_state, s_off, conv, beta, gg, o,
							     nk, nv, dk, dv, g->C);
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
