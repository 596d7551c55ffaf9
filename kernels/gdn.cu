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

/* beta and g of one entry i of [T][nv] (ck_gdn_gates' formula). */
static __device__ __forceinline__ void gdn_gate_one(uint64_t i, const float *b, const float *a, const float *neg_a,
						    const float *dt_bias, uint64_t nv, float *beta, float *g)
{
	const uint64_t h = i % nv;
	const float x = a[i] + dt_bias[h];

	beta[i] = sigmoid_(b[i]);
	/* torch's softplus, threshold 20, as the CPU's softplusf_ */
	g[i] = neg_a[h] * (x > 20.0f ? x : log1pf(expf(x)));
}

/* --- conv ------------------------------------------------------------------------------ */

/* One block per row t, threads over channels: out = silu(sum over i < K in order of
 * w[ch][i] * x_i), x_i the input K - 1 - i rows back, from the item's rows or (before its
 * first row) from its window. Reads the window only; gdn_conv_window moves it on after. */
struct gdn_gate_args {
	const float *b, *a, *neg_a, *dt_bias;
	uint64_t N, nv; /* N = T nv entries, 0: none */
	float *beta, *g;
};

static __global__ void gdn_conv_out(const int32_t *item, const int64_t *t0, float *const *state, uint64_t slot_off,
				    const float *qkv, const float *w, uint64_t C, uint32_t K, float *conv,
				    struct gdn_gate_args ga, bool move)
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
		/* ck_gdn_decode (one row an item): this thread is the only one that reads this
		 * channel's window, so it moves it on itself (gdn_window_after's result for the
		 * row: entries 1 .. K - 2, then the row), from values it has just read. */
		if (move && K >= 2) {
			float *wm = state[it] + slot_off;
			for (uint32_t i = 0; i + 2 < K; i++)
				wm[(uint64_t)i * C + ch] = win[(uint64_t)(i + 1) * C + ch];
			wm[(uint64_t)(K - 2) * C + ch] = qkv[t * C + ch];
		}
	}
	/* ck_gdn_decode: the gates too, over the whole grid (they need only in_proj's rows) */
	const uint64_t nthr = (uint64_t)gridDim.x * gridDim.y * blockDim.x;
	for (uint64_t i = ((uint64_t)blockIdx.x * gridDim.y + blockIdx.y) * blockDim.x + threadIdx.x; i < ga.N; i += nthr)
		gdn_gate_one(i, ga.b, ga.a, ga.neg_a, ga.dt_bias, ga.nv, ga.beta, ga.g);
}

/* The window after an item's row t (the last W inputs of [old window | rows 0 .. t]) into dst,
 * one channel: entry i is row t + 1 - W + i, or (before the item's first row) old entry
 * t + 1 + i. With dst == old (the window moving on) walking i upwards reads every old entry
 * before it is overwritten (the CPU's memmove). */
static __device__ __forceinline__ void gdn_window_after(float *dst, const float *old, const float *rows, int64_t t,
							 uint32_t W, uint64_t C, uint64_t ch)
{
	for (uint32_t i = 0; i < W; i++) {
		int64_t src = t + 1 - (int64_t)W + (int64_t)i;
		dst[(uint64_t)i * C + ch] = src >= 0 ? rows[(uint64_t)src * C + ch] : old[(uint64_t)(src + (int64_t)W) * C + ch];
	}
}

/* One thread per (item, channel): the window becomes the last K - 1 inputs of [window | rows].
 * keep_states (keep: [T] blocks or NULL entries, ck_step.gdn_keep): first, before the window
 * moves on, the window after each kept row into that row's block (the CPU's keep_windows). */
static __global__ void gdn_conv_window(const int64_t *t0, const int64_t *n, float *const *state, float *const *keep,
				       uint64_t slot_off, const float *qkv, uint64_t C, uint32_t K)
{
	ck_grid_enter();
	const uint32_t it = blockIdx.x;
	const uint64_t ch = (uint64_t)blockIdx.y * blockDim.x + threadIdx.x;
	float *win = state[it] + slot_off;
	const int64_t nn = n[it];
	const uint64_t first = (uint64_t)t0[it];
	const float *rows = qkv + first * C;

	if (ch >= C)
		return;
	for (int64_t t = 0; keep && t + 1 < nn; t++)
		if (keep[first + (uint64_t)t])
			gdn_window_after(keep[first + (uint64_t)t] + slot_off, win, rows, t, K - 1, C, ch);
	gdn_window_after(win, win, rows, nn - 1, K - 1, C, ch);
}

#define GDN_CONV_THREADS 256

/* The conv outputs (and, with ga.N, the gates) of every row: one launch. */
static int gdn_conv_launch(const struct ck_step *st, const struct ck_gdn_shape *g, uint64_t slot_off, const float *qkv,
			   const float *w, float *conv, const struct gdn_gate_args *ga, bool move, cudaStream_t s)
{
	const uint64_t gy = (g->C + GDN_CONV_THREADS - 1) / GDN_CONV_THREADS;

	ck_launch(gdn_conv_out, dim3((unsigned)st->T, (unsigned)(gy < 65535 ? gy : 65535)), GDN_CONV_THREADS, 0, s,
		  st->item, st->t0, st->gdn_state, slot_off, qkv, w, g->C, (uint32_t)g->K, conv, *ga, move);
	return ck_launched();
}

extern "C" int ck_gdn_conv(const struct ck_step *st, const struct ck_gdn_shape *g, int slot, const float *qkv,
			   const float *w, float *conv, void *stream)
{
	cudaStream_t s = (cudaStream_t)stream;
	const uint64_t slot_off = (uint64_t)slot * ck_gdn_state_floats(g);
	const struct gdn_gate_args none = {};
	int rc;

	if (st->T == 0 || st->n_items == 0)
		return 0;
	/* Two kernels in stream order: every conv output has read the old window before any
	 * window is rewritten. */
	if ((rc = gdn_conv_launch(st, g, slot_off, qkv, w, conv, &none, false, s)))
		return rc;
	if (g->K < 2)
		return 0;
	ck_launch(gdn_conv_window, dim3(st->n_items, (unsigned)((g->C + GDN_CONV_THREADS - 1) / GDN_CONV_THREADS)),
		  GDN_CONV_THREADS, 0, s, st->t0, st->n, st->gdn_state, st->gdn_keep, slot_off, qkv, g->C, (uint32_t)g->K);
	return ck_launched();
}

/* --- gates ----------------------------------------------------------------------------- */

static __global__ void gdn_gates_k(const float *b, const float *a, const float *neg_a, const float *dt_bias,
				   uint64_t N, uint64_t nv, float *beta, float *g)
{
	ck_grid_enter();
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += (uint64_t)gridDim.x * blockDim.x)
		gdn_gate_one(i, b, a, neg_a, dt_bias, nv, beta, g);
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

/* Values a thread of the gated norm keeps in registers (dv <= 256: every model). */
#define GDN_NORM_REG 2

/* A warp holds 4 columns x of S for all dk rows: lane = 8 x + r, and lane r of a column owns
 * the rows 32 j + 4 r + u (u < 4, j < JJ), so a column's sums over dk are 8 per-lane partials
 * added with three xor shuffles, with no barrier: the only thing a token waits for is its own
 * column's previous token. Four warps a block (16 columns), one block per (item, 16 columns)
 * along x and value head along y: a prompt item of the real shapes is 1024 warps, enough for
 * the GPU to hide each token's chain of dependent steps behind the other warps'.
 *
 * A token's inputs (normalised q and k of the head, the warp's 4 v, beta, g) come through a
 * ring of GDN_STAGES slots of shared memory per warp, filled by cp.async GDN_STAGES - 1
 * tokens ahead: a prompt chunk's conv rows are far larger than L2.
 *
 * The order of every sum is fixed by the item's data alone (batch invariant): a lane's
 * partial over its rows as 4 chains (u) added (0 + 1) + (2 + 3) in j order, then the xor
 * butterfly. VEC: q and k in 16-byte pieces (dk % 32 == 0, C % 4 == 0: the real models);
 * otherwise 4-byte copies and row guards. */
#define GDN_WARPS 4
#define GDN_LANES 8  /* lanes per column */
#define GDN_WCOLS (32 / GDN_LANES)
#define GDN_COLS (GDN_WARPS * GDN_WCOLS)  /* columns per block */
#define GDN_STAGES 8

/* Floats of one ring slot: q [dk] | k [dk] | v [GDN_WCOLS] | beta | g, rounded up to 16 bytes. */
static __host__ __device__ __forceinline__ uint32_t gdn_slot_floats(uint32_t dk)
{
	return (2 * dk + GDN_WCOLS + 2 + 3) / 4 * 4;
}

static __device__ __forceinline__ void gdn_cp(float *dst, const float *src, int bytes, bool valid)
{
	const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
	if (bytes == 16)
		asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 16 : 0));
	else
		asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 4 : 0));
}

/* One token's inputs into a slot, spread over the warp's lanes; one commit group. vn: how
 * many of the warp's columns exist. */
template <bool VEC>
static __device__ __forceinline__ void gdn_fetch(float *slot, const float *row, uint64_t qoff, uint64_t koff,
						 uint64_t vcol0, uint32_t vn, uint32_t dk, const float *beta,
						 const float *gg, uint32_t lane, bool valid)
{
	if (VEC) {
		for (uint32_t c = lane; c < dk / 2; c += 32) { /* dk / 4 pieces of q, then of k */
			const bool isk = c >= dk / 4;
			const uint32_t e = 4 * (isk ? c - dk / 4 : c);
			gdn_cp(slot + (isk ? dk : 0) + e, row + (isk ? koff : qoff) + e, 16, valid);
		}
	} else {
		for (uint32_t c = lane; c < 2 * dk; c += 32) {
			const bool isk = c >= dk;
			gdn_cp(slot + c, row + (isk ? koff + (c - dk) : qoff + c), 4, valid);
		}
	}
	if (lane < GDN_WCOLS)
		gdn_cp(slot + 2 * dk + lane, row + vcol0 + lane, 4, valid && lane < vn);
	else if (lane == GDN_WCOLS)
		gdn_cp(slot + 2 * dk + GDN_WCOLS, beta, 4, valid);
	else if (lane == GDN_WCOLS + 1)
		gdn_cp(slot + 2 * dk + GDN_WCOLS + 1, gg, 4, valid);
	asm volatile("cp.async.commit_group;\n" ::);
}

/* The four per-u chains of a lane, then its column's lanes. */
static __device__ __forceinline__ float gdn_sum(const float p[4])
{
	float t = (p[0] + p[1]) + (p[2] + p[3]);
#pragma unroll
	for (int off = 1; off < GDN_LANES; off <<= 1)
		t += __shfl_xor_sync(0xffffffffu, t, off);
	return t;
}

/* Row groups of 32 a column lane holds: 1, 2, 4 or 8 (dk <= 256). */
static unsigned gdn_jj(uint64_t dk)
{
	const uint64_t jj = (dk + 4 * GDN_LANES - 1) / (4 * GDN_LANES);

	return jj <= 1 ? 1 : jj <= 2 ? 2 : jj <= 4 ? 4 : 8;
}

/* q and k of one (row, key head) l2-normalised (x / sqrtf(sum x^2 + 1e-6)), q also times
 * 1 / sqrtf(dk), held as the recurrence holds them: lane r of a column's 8 the rows
 * 32 j + 4 r + u (zeros past dk). The sums as gdn_sum's: per u over j in order, then the
 * lanes. The prefill's gdn_qk_norm_k and the decode kernel both call this: the same bits. */
template <int JJ>
static __device__ __forceinline__ void gdn_qk_normalize(float (&q)[JJ][4], float (&k)[JJ][4], uint32_t dk)
{
	float pq[4] = { 0, 0, 0, 0 }, pk[4] = { 0, 0, 0, 0 };

#pragma unroll
	for (int j = 0; j < JJ; j++)
#pragma unroll
		for (int u = 0; u < 4; u++) {
			pq[u] = __fmaf_rn(q[j][u], q[j][u], pq[u]);
			pk[u] = __fmaf_rn(k[j][u], k[j][u], pk[u]);
		}
	const float rq = 1.0f / sqrtf(gdn_sum(pq) + 1e-6f), rk = 1.0f / sqrtf(gdn_sum(pk) + 1e-6f);
	const float qscale = 1.0f / sqrtf((float)dk);
#pragma unroll
	for (int j = 0; j < JJ; j++)
#pragma unroll
		for (int u = 0; u < 4; u++) {
			q[j][u] = __fmul_rn(__fmul_rn(q[j][u], rq), qscale);
			k[j][u] = __fmul_rn(k[j][u], rk);
		}
}

/* Prompt rows: q and k of every (row, key head) normalised in place before the recurrence
 * (conv is spent), 8 lanes a pair (16 pairs a block of 128). */
template <int JJ, bool VEC>
static __global__ __launch_bounds__(128) void gdn_qk_norm_k(float *conv, uint64_t C, uint64_t pairs, uint32_t nk,
							    uint32_t dk)
{
	ck_grid_enter();
	const uint32_t r = threadIdx.x % GDN_LANES;
	const uint64_t p = (uint64_t)blockIdx.x * (128 / GDN_LANES) + threadIdx.x / GDN_LANES;
	const bool live = p < pairs; /* every lane takes part in the shuffles */
	const uint64_t t = live ? p / nk : 0, kh = live ? p % nk : 0;
	float *q = conv + t * C + kh * dk, *k = conv + t * C + (nk + kh) * dk;
	float qv[JJ][4], kv[JJ][4];

#pragma unroll
	for (int j = 0; j < JJ; j++) {
		const uint32_t y = 4 * GDN_LANES * j + 4 * r;
		if (VEC) { /* dk % 32 == 0: every row there, 16-byte aligned */
			const float4 a = live ? *(const float4 *)(q + y) : make_float4(0, 0, 0, 0);
			const float4 b = live ? *(const float4 *)(k + y) : make_float4(0, 0, 0, 0);
			qv[j][0] = a.x, qv[j][1] = a.y, qv[j][2] = a.z, qv[j][3] = a.w;
			kv[j][0] = b.x, kv[j][1] = b.y, kv[j][2] = b.z, kv[j][3] = b.w;
		} else {
#pragma unroll
			for (int u = 0; u < 4; u++) {
				qv[j][u] = live && y + u < dk ? q[y + u] : 0.0f;
				kv[j][u] = live && y + u < dk ? k[y + u] : 0.0f;
			}
		}
	}
	gdn_qk_normalize<JJ>(qv, kv, dk);
#pragma unroll
	for (int j = 0; j < JJ; j++) {
		const uint32_t y = 4 * GDN_LANES * j + 4 * r;
		if (VEC) {
			if (live) {
				*(float4 *)(q + y) = make_float4(qv[j][0], qv[j][1], qv[j][2], qv[j][3]);
				*(float4 *)(k + y) = make_float4(kv[j][0], kv[j][1], kv[j][2], kv[j][3]);
			}
		} else {
#pragma unroll
			for (int u = 0; u < 4; u++)
				if (live && y + u < dk) {
					q[y + u] = qv[j][u];
					k[y + u] = kv[j][u];
				}
		}
	}
}

/* Gated RMSNorm of one (row, head) of dv by a block of 128 threads: the sum of squares as
 * per-thread strided partials, an xor butterfly per warp, then the 4 warps in order;
 * o = (norm_w[i] * (o * r)) * act(z). Loads through L2: in the decode kernel other blocks
 * wrote this row. */
static __device__ __forceinline__ void gdn_gated_norm_row(float *xr, const float *zr, const float *norm_w, uint32_t dv,
							  float eps, bool gate_sigmoid)
{
	__shared__ float red[4];
	float ss = 0, r, xv[GDN_NORM_REG], zv[GDN_NORM_REG], nw[GDN_NORM_REG];
	const bool regs = dv <= GDN_NORM_REG * 128; /* one round trip (longer heads read twice) */

	if (regs) {
#pragma unroll
		for (int j = 0; j < GDN_NORM_REG; j++)
			if (threadIdx.x + 128 * j < dv) {
				nw[j] = norm_w[threadIdx.x + 128 * j];
				xv[j] = __ldcg(xr + threadIdx.x + 128 * j);
				zv[j] = __ldcg(zr + threadIdx.x + 128 * j);
			}
#pragma unroll
		for (int j = 0; j < GDN_NORM_REG; j++)
			if (threadIdx.x + 128 * j < dv)
				ss = __fmaf_rn(xv[j], xv[j], ss);
	} else {
		for (uint32_t i = threadIdx.x; i < dv; i += 128) {
			const float x = __ldcg(xr + i);
			ss = __fmaf_rn(x, x, ss);
		}
	}
	for (int off = 16; off; off >>= 1)
		ss += __shfl_xor_sync(0xffffffffu, ss, off);
	if (threadIdx.x % 32 == 0)
		red[threadIdx.x / 32] = ss;
	__syncthreads();
	ss = ((red[0] + red[1]) + red[2]) + red[3];
	r = 1.0f / sqrtf(ss / (float)dv + eps);
	if (regs) {
#pragma unroll
		for (int j = 0; j < GDN_NORM_REG; j++)
			if (threadIdx.x + 128 * j < dv) {
				const float act = gate_sigmoid ? sigmoid_(zv[j]) : silu_(zv[j]);
				xr[threadIdx.x + 128 * j] = __fmul_rn(__fmul_rn(nw[j], __fmul_rn(xv[j], r)), act);
			}
	} else {
		/* each thread rewrites only the elements it read itself */
		for (uint32_t i = threadIdx.x; i < dv; i += 128) {
			const float x = __ldcg(xr + i), zz = __ldcg(zr + i);
			const float act = gate_sigmoid ? sigmoid_(zz) : silu_(zz);
			xr[i] = __fmul_rn(__fmul_rn(norm_w[i], __fmul_rn(x, r)), act);
		}
	}
	__syncthreads(); /* red is reused by the block's next row */
}

/* A lane's part of a head's S [dk][dv] (the rows and column it holds) to S. */
template <int JJ>
static __device__ __forceinline__ void gdn_store_state(float *S, const float (&s)[JJ][4], uint32_t r, uint32_t x, bool act,
						       uint32_t dk, uint32_t dv)
{
#pragma unroll
	for (int j = 0; j < JJ; j++)
#pragma unroll
		for (int u = 0; u < 4; u++) {
			const uint32_t y = 4 * GDN_LANES * j + 4 * r + u;
			if (act && y < dk)
				S[(uint64_t)y * dv + x] = s[j][u];
		}
}

/* What the decode kernel (DEC) does besides the recurrence: the gated norm of each (item,
 * head) by the last of its blocks to finish (count[item][head] counts them and is left 0). */
struct gdn_dec_args {
	const float *z, *norm_w;
	uint32_t *count;
	float eps;
	bool gate_sigmoid;
};

/* KEEP (keep_states steps only, so decode steps run the kernel without it): S after each
 * token with a block in keep (ck_step.gdn_keep) is written there too. DEC (ck_gdn_decode):
 * q and k normalised here (gdn_qk_normalize) from the raw conv rows, and gdn_dec_args. */
template <int JJ, bool VEC, bool KEEP, bool DEC>
static __global__ __launch_bounds__(GDN_WARPS * 32) void gdn_recurrent_k(
	const int64_t *t0s, const int64_t *ns, float *const *state, float *const *keep, uint64_t s_off, const float *conv,
	const float *beta, const float *gg, float *o, uint32_t nk, uint32_t nv, uint32_t dk, uint32_t dv, uint64_t C,
	struct gdn_dec_args da)
{
	extern __shared__ __align__(16) float gdn_ring[];
	const uint32_t lane = threadIdx.x % 32, r = lane % GDN_LANES, wi = threadIdx.x / 32, SL = gdn_slot_floats(dk);
	const uint32_t ncb = (dv + GDN_COLS - 1) / GDN_COLS, it = blockIdx.x / ncb, head = blockIdx.y;
	const uint32_t x0 = (blockIdx.x % ncb) * GDN_COLS + wi * GDN_WCOLS, xc = lane / GDN_LANES, x = x0 + xc;
	const bool act = x < dv;
	const int64_t n = ns[it];
	const uint64_t first = (uint64_t)t0s[it];
	const uint32_t kh = head / (nv / nk);
	const uint64_t qoff = (uint64_t)kh * dk, koff = (uint64_t)nk * dk + (uint64_t)kh * dk;
	const uint64_t vcol0 = 2 * (uint64_t)nk * dk + (uint64_t)head * dv + x0;
	float *S = state[it] + s_off + (uint64_t)head * dk * dv, *ring = gdn_ring + (uint64_t)wi * GDN_STAGES * SL;
	float s[JJ][4];

	/* The step's metadata and S before the wait for the kernel before (the conv, or the q/k
	 * norm): the metadata was uploaded before the step, and S was last written by this
	 * layer's recurrence in an earlier step (or by a copy before this one), which completed
	 * before the kernel before could start, let alone let this one start (PDL: a kernel
	 * signals the next only after its own wait). The loads run under that kernel's tail. */
	if (n <= 0)
		return;
#pragma unroll
	for (int j = 0; j < JJ; j++)
#pragma unroll
		for (int u = 0; u < 4; u++) {
			const uint32_t y = 4 * GDN_LANES * j + 4 * r + u;
			s[j][u] = act && y < dk ? S[(uint64_t)y * dv + x] : 0.0f;
		}
	ck_grid_enter();
	const uint32_t vn = dv > x0 ? dv - x0 : 0;
	for (int64_t p = 0; p < GDN_STAGES - 1; p++) {
		const uint64_t t = first + (uint64_t)(p < n ? p : 0);
		gdn_fetch<VEC>(ring + (uint64_t)p * SL, conv + t * C, qoff, koff, vcol0, vn, dk, beta + t * nv + head,
			       gg + t * nv + head, lane, p < n);
	}
	for (int64_t i = 0; i < n; i++) {
		const uint64_t t = first + (uint64_t)i;
		{ /* token i + STAGES - 1 into the slot token i - 1 used (every lane is done with it) */
			const int64_t p = i + GDN_STAGES - 1;
			const uint64_t tp = first + (uint64_t)(p < n ? p : i);
			gdn_fetch<VEC>(ring + (uint64_t)(p % GDN_STAGES) * SL, conv + tp * C, qoff, koff, vcol0, vn, dk,
				       beta + tp * nv + head, gg + tp * nv + head, lane, p < n);
		}
		asm volatile("cp.async.wait_group %0;\n" ::"n"(GDN_STAGES - 1));
		__syncwarp();
		const float *sl = ring + (uint64_t)(i % GDN_STAGES) * SL;
		float q[JJ][4], k[JJ][4];
#pragma unroll
		for (int j = 0; j < JJ; j++) {
			const uint32_t y = 4 * GDN_LANES * j + 4 * r;
			if (VEC) {
				const float4 q4 = *(const float4 *)(sl + y), k4 = *(const float4 *)(sl + dk + y);
				q[j][0] = q4.x, q[j][1] = q4.y, q[j][2] = q4.z, q[j][3] = q4.w;
				k[j][0] = k4.x, k[j][1] = k4.y, k[j][2] = k4.z, k[j][3] = k4.w;
			} else {
#pragma unroll
				for (int u = 0; u < 4; u++) {
					q[j][u] = y + u < dk ? sl[y + u] : 0.0f;
					k[j][u] = y + u < dk ? sl[dk + y + u] : 0.0f;
				}
			}
		}
		if (DEC)
			gdn_qk_normalize<JJ>(q, k, dk);
		const float v = act ? sl[2 * dk + xc] : 0.0f, bt = sl[2 * dk + GDN_WCOLS];
		const float decay = expf(sl[2 * dk + GDN_WCOLS + 1]);
		float pm[4] = { 0, 0, 0, 0 }, po[4] = { 0, 0, 0, 0 };
		/* S *= exp(g); mem = S^T k */
#pragma unroll
		for (int j = 0; j < JJ; j++)
#pragma unroll
			for (int u = 0; u < 4; u++) {
				s[j][u] *= decay;
				pm[u] += s[j][u] * k[j][u];
			}
		const float d = (v - gdn_sum(pm)) * bt;
		/* S += k d^T; o = S^T q */
#pragma unroll
		for (int j = 0; j < JJ; j++)
#pragma unroll
			for (int u = 0; u < 4; u++) {
				s[j][u] += k[j][u] * d;
				po[u] += s[j][u] * q[j][u];
			}
		const float out = gdn_sum(po);
		if (r == 0 && act)
			o[t * nv * dv + (uint64_t)head * dv + x] = out;
		if (KEEP && keep[t])
			gdn_store_state<JJ>(keep[t] + s_off + (uint64_t)head * dk * dv, s, r, x, act, dk, dv);
		__syncwarp(); /* the slot is read by every lane before the next fetch rewrites it */
	}
	asm volatile("cp.async.wait_group 0;\n" ::);
	gdn_store_state<JJ>(S, s, r, x, act, dk, dv);
	if (!DEC)
		return;
	/* The last of the head's ncb blocks to finish norms its rows: the block's o stores, then
	 * one device-scope fence and the count (cooperative groups' grid barrier's pattern). */
	__shared__ bool last;
	__syncthreads();
	if (threadIdx.x == 0) {
		uint32_t *cnt = da.count + (uint64_t)it * nv + head;
		__threadfence();
		last = atomicAdd(cnt, 1u) == ncb - 1;
		if (last)
			*cnt = 0;
		__threadfence();
	}
	__syncthreads();
	if (!last)
		return;
	for (int64_t i = 0; i < n; i++) {
		const uint64_t row = (first + (uint64_t)i) * nv * dv + (uint64_t)head * dv;
		gdn_gated_norm_row(o + row, da.z + row, da.norm_w, dv, da.eps, da.gate_sigmoid);
	}
}

template <int JJ>
static void gdn_launch_jj(bool vec, bool dec, dim3 grid, cudaStream_t s, const struct ck_step *st, uint64_t s_off,
			  const float *conv, const float *beta, const float *gg, float *o, const struct ck_gdn_shape *g,
			  const struct gdn_dec_args *da)
{
	const uint32_t nk = (uint32_t)g->nk, nv = (uint32_t)g->nv, dk = (uint32_t)g->dk, dv = (uint32_t)g->dv;
	const size_t smem = (size_t)GDN_WARPS * GDN_STAGES * gdn_slot_floats(dk) * sizeof(float);
	const bool keep = st->gdn_keep != NULL;
	decltype(&gdn_recurrent_k<JJ, true, true, false>) k =
		dec   ? (vec ? gdn_recurrent_k<JJ, true, false, true> : gdn_recurrent_k<JJ, false, false, true>)
		: vec ? (keep ? gdn_recurrent_k<JJ, true, true, false> : gdn_recurrent_k<JJ, true, false, false>)
		      : (keep ? gdn_recurrent_k<JJ, false, true, false> : gdn_recurrent_k<JJ, false, false, false>);

	if (smem > 48 * 1024) /* dk > 180 */
		cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
	ck_launch(k, grid, GDN_WARPS * 32, smem, s, st->t0, st->n, st->gdn_state, st->gdn_keep, s_off, conv, beta, gg, o, nk,
		  nv, dk, dv, g->C, *da);
}

/* The recurrence over every item (dec: the decode kernel, its q and k normalised inside). */
static int gdn_recurrence(const struct ck_step *st, const struct ck_gdn_shape *g, int slot, bool dec, const float *conv,
			  const float *beta, const float *gg, float *o, const struct gdn_dec_args *da, cudaStream_t s)
{
	const uint64_t s_off = (uint64_t)slot * ck_gdn_state_floats(g) + (g->K - 1) * g->C;
	const uint64_t ncb = (g->dv + GDN_COLS - 1) / GDN_COLS;
	const dim3 grid((unsigned)(ncb * st->n_items), (unsigned)g->nv); /* x: no 65535 limit on items */
	const bool vec = g->dk % 32 == 0 && g->C % 4 == 0 && (uintptr_t)conv % 16 == 0;

	/* Row groups of 32 per column: the smallest instantiated JJ with 32 JJ >= dk. */
	switch (gdn_jj(g->dk)) {
	case 1:
		gdn_launch_jj<1>(vec, dec, grid, s, st, s_off, conv, beta, gg, o, g, da);
		break;
	case 2:
		gdn_launch_jj<2>(vec, dec, grid, s, st, s_off, conv, beta, gg, o, g, da);
		break;
	case 4:
		gdn_launch_jj<4>(vec, dec, grid, s, st, s_off, conv, beta, gg, o, g, da);
		break;
	default:
		gdn_launch_jj<8>(vec, dec, grid, s, st, s_off, conv, beta, gg, o, g, da);
		break;
	}
	return ck_launched();
}

extern "C" int ck_gdn_recurrent(const struct ck_step *st, const struct ck_gdn_shape *g, int slot, float *conv,
				const float *beta, const float *gg, float *o, void *stream)
{
	cudaStream_t s = (cudaStream_t)stream;
	const uint64_t pairs = st->T * g->nk, blocks = (pairs + 128 / GDN_LANES - 1) / (128 / GDN_LANES);
	const struct gdn_dec_args none = {};
	int rc;

	if (st->T == 0 || st->n_items == 0)
		return 0;
	if (g->dk > 256 || g->nv > 65535)
		return -(int)cudaErrorInvalidValue; /* no model has them */
	const bool vec = g->dk % 32 == 0 && g->C % 4 == 0 && (uintptr_t)conv % 16 == 0;
	decltype(&gdn_qk_norm_k<1, false>) nk = NULL;
	switch (gdn_jj(g->dk)) {
	case 1:
		nk = vec ? gdn_qk_norm_k<1, true> : gdn_qk_norm_k<1, false>;
		break;
	case 2:
		nk = vec ? gdn_qk_norm_k<2, true> : gdn_qk_norm_k<2, false>;
		break;
	case 4:
		nk = vec ? gdn_qk_norm_k<4, true> : gdn_qk_norm_k<4, false>;
		break;
	default:
		nk = vec ? gdn_qk_norm_k<8, true> : gdn_qk_norm_k<8, false>;
		break;
	}
	ck_launch(nk, (unsigned)blocks, 128, 0, s, conv, g->C, pairs, (uint32_t)g->nk, (uint32_t)g->dk);
	if ((rc = ck_launched()))
		return rc;
	return gdn_recurrence(st, g, slot, false, conv, beta, gg, o, &none, s);
}

extern "C" int ck_gdn_decode(const struct ck_step *st, const struct ck_gdn_shape *g, int slot,
			     const struct ck_gdn_decode_args *d, void *stream)
{
	cudaStream_t s = (cudaStream_t)stream;
	const struct gdn_gate_args ga = { d->b, d->a, d->neg_a, d->dt_bias, st->T * g->nv, g->nv, d->beta, d->g };
	const struct gdn_dec_args da = { d->z, d->norm_w, d->count, d->eps, d->gate_sigmoid };
	int rc;

	if (st->T == 0 || st->n_items == 0)
		return 0;
	if (st->T != st->n_items || st->gdn_keep || g->dk > 256 || g->nv > 65535)
		return -(int)cudaErrorInvalidValue; /* one row an item, no kept states: the general path */
	if ((rc = gdn_conv_launch(st, g, (uint64_t)slot * ck_gdn_state_floats(g), d->qkv, d->conv_w, d->conv, &ga, true, s)))
		return rc;
	if (d->z_ready && (rc = -(int)cudaStreamWaitEvent(s, (cudaEvent_t)d->z_ready, 0)))
		return rc;
	return gdn_recurrence(st, g, slot, true, d->conv, d->beta, d->g, d->o, &da, s);
}

/* --- gated RMSNorm ---------------------------------------------------------------------- */

/* One block of 4 warps per (row, head), as the decode kernel's last block does it. */
static __global__ __launch_bounds__(128) void gdn_gated_norm_k(float *o, const float *z, const float *norm_w,
							       uint32_t dv, float eps, bool gate_sigmoid)
{
	ck_grid_enter();
	gdn_gated_norm_row(o + (uint64_t)blockIdx.x * dv, z + (uint64_t)blockIdx.x * dv, norm_w, dv, eps, gate_sigmoid);
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
