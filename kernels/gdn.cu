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
		  st->t0, st->n, st->gdn_state, st->gdn_keep, slot_off, qkv, g->C, (uint32_t)g->K);
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

/* q and k of every row and key head l2-normalised in place (x / sqrtf(sum x^2 + 1e-6), as
 * l2norm_scaled), q also times 1 / sqrtf(dk): the recurrence then reads them as it uses them.
 * One block of 4 warps per (row, key head), the sum of squares as per-thread strided partials,
 * an xor butterfly per warp, then the 4 warps in order. */
#define GDN_NORM_REG 2 /* values a thread keeps in registers (dk, dv <= 256: every model) */
static __global__ __launch_bounds__(128) void gdn_qk_norm_k(float *conv, uint64_t C, uint32_t nk, uint32_t dk)
{
	ck_grid_enter();
	__shared__ float red[2][4];
	const uint64_t t = blockIdx.x;
	const uint32_t kh = blockIdx.y, lane = threadIdx.x % 32, w = threadIdx.x / 32;
	float *q = conv + t * C + (uint64_t)kh * dk, *k = conv + t * C + (uint64_t)(nk + kh) * dk;
	float sq = 0, sk = 0, qv[GDN_NORM_REG], kv[GDN_NORM_REG];
	/* one round trip: the values stay in registers (longer heads read them twice) */
	const bool regs = dk <= GDN_NORM_REG * 128;

	if (regs) {
#pragma unroll
		for (int j = 0; j < GDN_NORM_REG; j++)
			if (threadIdx.x + 128 * j < dk) {
				qv[j] = q[threadIdx.x + 128 * j];
				kv[j] = k[threadIdx.x + 128 * j];
			}
#pragma unroll
		for (int j = 0; j < GDN_NORM_REG; j++)
			if (threadIdx.x + 128 * j < dk) {
				sq += qv[j] * qv[j];
				sk += kv[j] * kv[j];
			}
	} else {
		for (uint32_t i = threadIdx.x; i < dk; i += 128) {
			sq += q[i] * q[i];
			sk += k[i] * k[i];
		}
	}
	for (int off = 16; off; off >>= 1) {
		sq += __shfl_xor_sync(0xffffffffu, sq, off);
		sk += __shfl_xor_sync(0xffffffffu, sk, off);
	}
	if (lane == 0) {
		red[0][w] = sq;
		red[1][w] = sk;
	}
	__syncthreads();
	const float rq = 1.0f / sqrtf(((red[0][0] + red[0][1]) + red[0][2]) + red[0][3] + 1e-6f);
	const float rk = 1.0f / sqrtf(((red[1][0] + red[1][1]) + red[1][2]) + red[1][3] + 1e-6f);
	const float qscale = 1.0f / sqrtf((float)dk);
	if (regs) {
#pragma unroll
		for (int j = 0; j < GDN_NORM_REG; j++)
			if (threadIdx.x + 128 * j < dk) {
				q[threadIdx.x + 128 * j] = (qv[j] * rq) * qscale;
				k[threadIdx.x + 128 * j] = kv[j] * rk;
			}
		return;
	}
	for (uint32_t i = threadIdx.x; i < dk; i += 128) { /* each thread rewrites what it read */
		q[i] = (q[i] * rq) * qscale;
		k[i] = k[i] * rk;
	}
}

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

/* KEEP (keep_states steps only, so decode steps run the kernel without it): S after each
 * token with a block in keep (ck_step.gdn_keep) is written there too. */
template <int JJ, bool VEC, bool KEEP>
static __global__ __launch_bounds__(GDN_WARPS * 32) void gdn_recurrent_k(
	const int64_t *t0s, const int64_t *ns, float *const *state, float *const *keep, uint64_t s_off, const float *conv,
	const float *beta, const float *gg, float *o, uint32_t nk, uint32_t nv, uint32_t dk, uint32_t dv, uint64_t C)
{
	ck_grid_enter();
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

	if (n <= 0)
		return;
#pragma unroll
	for (int j = 0; j < JJ; j++)
#pragma unroll
		for (int u = 0; u < 4; u++) {
			const uint32_t y = 4 * GDN_LANES * j + 4 * r + u;
			s[j][u] = act && y < dk ? S[(uint64_t)y * dv + x] : 0.0f;
		}
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
}

template <int JJ>
static void gdn_launch_jj(bool vec, dim3 grid, cudaStream_t s, const struct ck_step *st, uint64_t s_off,
			  const float *conv, const float *beta, const float *gg, float *o, const struct ck_gdn_shape *g)
{
	const uint32_t nk = (uint32_t)g->nk, nv = (uint32_t)g->nv, dk = (uint32_t)g->dk, dv = (uint32_t)g->dv;
	const size_t smem = (size_t)GDN_WARPS * GDN_STAGES * gdn_slot_floats(dk) * sizeof(float);
	const bool keep = st->gdn_keep != NULL;
	decltype(&gdn_recurrent_k<JJ, true, true>) k =
		vec ? (keep ? gdn_recurrent_k<JJ, true, true> : gdn_recurrent_k<JJ, true, false>)
		    : (keep ? gdn_recurrent_k<JJ, false, true> : gdn_recurrent_k<JJ, false, false>);

	if (smem > 48 * 1024) /* dk > 180 */
		cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
	ck_launch(k, grid, GDN_WARPS * 32, smem, s, st->t0, st->n, st->gdn_state, st->gdn_keep, s_off, conv, beta, gg, o, nk,
		  nv, dk, dv, g->C);
}

extern "C" int ck_gdn_recurrent(const struct ck_step *st, const struct ck_gdn_shape *g, int slot, float *conv,
				const float *beta, const float *gg, float *o, void *stream)
{
	cudaStream_t s = (cudaStream_t)stream;
	const uint64_t s_off = (uint64_t)slot * ck_gdn_state_floats(g) + (g->K - 1) * g->C;
	const uint64_t ncb = (g->dv + GDN_COLS - 1) / GDN_COLS;
	const dim3 grid((unsigned)(ncb * st->n_items), (unsigned)g->nv); /* x: no 65535 limit on items */
	const bool vec = g->dk % 32 == 0 && g->C % 4 == 0 && (uintptr_t)conv % 16 == 0;
	const uint64_t jj = (g->dk + 4 * GDN_LANES - 1) / (4 * GDN_LANES);
	int rc;

	if (st->T == 0 || st->n_items == 0)
		return 0;
	if (g->nk > 65535)
		return -(int)cudaErrorInvalidValue;
	ck_launch(gdn_qk_norm_k, dim3((unsigned)st->T, (unsigned)g->nk), 128, 0, s, conv, g->C, (uint32_t)g->nk,
		  (uint32_t)g->dk);
	if ((rc = ck_launched()))
		return rc;
	/* Row groups of 32 per column: the smallest instantiated JJ with 32 JJ >= dk. */
	if (jj <= 1)
		gdn_launch_jj<1>(vec, grid, s, st, s_off, conv, beta, gg, o, g);
	else if (jj <= 2)
		gdn_launch_jj<2>(vec, grid, s, st, s_off, conv, beta, gg, o, g);
	else if (jj <= 4)
		gdn_launch_jj<4>(vec, grid, s, st, s_off, conv, beta, gg, o, g);
	else if (jj <= 8)
		gdn_launch_jj<8>(vec, grid, s, st, s_off, conv, beta, gg, o, g);
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
	__shared__ float red[4];
	float *xr = o + (uint64_t)blockIdx.x * dv;
	const float *zr = z + (uint64_t)blockIdx.x * dv;
	float ss = 0, r, xv[GDN_NORM_REG], zv[GDN_NORM_REG], nw[GDN_NORM_REG];
	/* one round trip, the weights read under the wait (longer heads read the values twice) */
	const bool regs = dv <= GDN_NORM_REG * 128;

#pragma unroll
	for (int j = 0; j < GDN_NORM_REG; j++)
		if (regs && threadIdx.x + 128 * j < dv)
			nw[j] = norm_w[threadIdx.x + 128 * j];
	ck_grid_enter();
	if (regs) {
#pragma unroll
		for (int j = 0; j < GDN_NORM_REG; j++)
			if (threadIdx.x + 128 * j < dv) {
				xv[j] = xr[threadIdx.x + 128 * j];
				zv[j] = zr[threadIdx.x + 128 * j];
			}
#pragma unroll
		for (int j = 0; j < GDN_NORM_REG; j++)
			if (threadIdx.x + 128 * j < dv)
				ss += xv[j] * xv[j];
	} else {
		for (uint32_t i = threadIdx.x; i < dv; i += 128)
			ss += xr[i] * xr[i];
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
				float act = gate_sigmoid ? sigmoid_(zv[j]) : silu_(zv[j]);
				xr[threadIdx.x + 128 * j] = (nw[j] * (xv[j] * r)) * act;
			}
		return;
	}
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
