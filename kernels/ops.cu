// ops.cu - element-wise and row kernels of the CUDA backend: embedding, RMSNorm, RoPE, SwiGLU,
// residual adds, the attention output gate, row gathers, the qwen4_exp hyper-connection
// mixers and the PLE gate and conv. Each mirrors a loop of the CPU backend (libcore/backend/
// cpu/ops.c, hc.c, ple.c, forward.c) in fp32; reductions run in a fixed order per row (a block
// per row, a tree of fixed shape), never with atomics, so results do not depend on the batch.
#include "capy-kernels.h"
#include "ck-common.cuh"
#include "moe-combine.cuh"
#include "mma.cuh" /* cp.async */

namespace {

__global__ void embed_kernel(const void *table, int dt, const int32_t *ids, uint64_t T, uint64_t H, uint64_t hc,
			     float *x)
{
	ck_grid_enter();
	uint64_t t = blockIdx.y;
	for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < H; i += (uint64_t)gridDim.x * blockDim.x) {
		float v = ck_widen(table, dt, (uint64_t)ids[t] * H + i);
		for (uint64_t s = 0; s < hc; s++)
			x[(t * hc + s) * H + i] = v;
	}
}

/* A head vector's NeoX RoPE pair (i, i + half), as rope_kernel and rmsnorm_kernel's ROPE apply it. */
__device__ __forceinline__ void rope_pair(float *vh, uint64_t i, uint64_t half, int64_t p, const float *inv_freq)
{
	float ang = __fmul_rn((float)p, inv_freq[i]);
	float c = cosf(ang), s = sinf(ang);
	float x1 = vh[i], x2 = vh[i + half];
	vh[i] = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
	vh[i + half] = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
}

struct rope_term {
	const int64_t *pos;
	const float *inv_freq;
	uint64_t rot, heads, row0; /* row0: the launch's first row in the whole (launches of 65535 rows) */
};

// One block per (row, group): the sum of squares in a fixed tree, then the scaling. The
// weights are indexed by the value's place in the row (per_value) or in its group.
/* ADD: x += add first (the residual add, as add_kernel), then the norm of the sum; each thread
 * reads back only what it wrote. The same reduction either way, so add then norm in one
 * launch gives the bits of ck_add then ck_rmsnorm. MOE: the added term is the MoE block's
 * output (moe-combine.cuh), as moe.cu's combine computes it; y NULL: the add alone. ROPE: each
 * normed group (head vector (row0 + r) * groups + g, of token that / heads) is then rotated as
 * rope_kernel rotates it. Each fusion changes no bits.
 *
 * A decode row is one block, and its time is a chain of memory round trips: so a thread's
 * values (at most NORM_REG of them: every shape the models have) stay in registers between
 * the sum and the scaling, every load is issued before the first is used, and the weights,
 * which no kernel writes, are loaded before the wait for the kernel before (under its tail).
 * Longer groups take the loop below it, with the same order of operations. */
#define NORM_REG 8
/* The MoE fold's register path: a thread's elements (a decode row of 2048 or 2560 values over
 * 512 threads: 4 or 5) and their experts (top-8 or top-10) loaded at once. */
#define MOE_REG 5
#define MOE_KMAX 10

/* v[e] = x[i_e] + the MoE block's output at i_e for the thread's elements i_e = tid + e bd
 * (< group <= MOE_REG bd), moe_term_with's operations in its order, with every load issued before the first
 * add (a chain of round trips otherwise: the experts' loop is not pipelined by the compiler),
 * and the shared expert's gate (a double-precision exp) computed under them. */
__device__ __forceinline__ void moe_fold_row(const float *xr, const struct moe_term &m, uint64_t r, uint64_t xs,
					     uint32_t g0, uint32_t group, uint32_t tid, uint32_t bd, float *v)
{
	float o[MOE_REG][MOE_KMAX], wk[MOE_KMAX], sh[MOE_REG];

#pragma unroll
	for (int j = 0; j < MOE_KMAX; j++)
		wk[j] = j < (int)m.k ? m.w[r * m.k + j] : 0.0f;
#pragma unroll
	for (int e = 0; e < MOE_REG; e++) {
		const uint32_t i = tid + e * bd;
		if (i >= group)
			continue;
		v[e] = xr[i];
		sh[e] = m.shared ? m.shared[r * xs + g0 + i] : 0.0f;
#pragma unroll
		for (int j = 0; j < MOE_KMAX; j++)
			o[e][j] = j < (int)m.k ? m.out[(r * m.k + j) * xs + g0 + i] : 0.0f;
	}
	const float g = moe_term_gate(m, r);
#pragma unroll
	for (int e = 0; e < MOE_REG; e++) {
		if (tid + e * bd >= group)
			continue;
		float t = 0.0f;
#pragma unroll
		for (int j = 0; j < MOE_KMAX; j++)
			if (j < (int)m.k)
				t = __fadd_rn(t, __fmul_rn(o[e][j], wk[j]));
		if (m.shared)
			t = __fadd_rn(t, __fmul_rn(g, sh[e]));
		v[e] = __fadd_rn(v[e], t);
	}
}

/* The hyper-connection injection as an added term (hc_add_kernel's): the block's output row
 * times the stream's weight, the stream being the launch's group (blockIdx.y). */
struct hc_term {
	const float *out, *inj;
};

template <bool ADD, bool MOE = false, bool ROPE = false, bool HC = false>
__global__ void rmsnorm_kernel(float *x, uint64_t xs, const float *add, const float *w, bool per_value, float *y,
			       uint64_t ys, uint32_t group, float eps, struct moe_term moe, struct rope_term rope,
			       struct hc_term hct)
{
	__shared__ float red[1024 / 32];
	const uint64_t r = blockIdx.x;
	const uint32_t g0 = blockIdx.y * group, bd = blockDim.x, tid = threadIdx.x;
	float *xr = x + r * xs + g0;
	const float *wr = per_value ? w + g0 : w;
	float *yr = y ? y + r * ys + g0 : NULL;
	float ss = 0, rs;

	if (group <= NORM_REG * bd) {
		float v[NORM_REG], wv[NORM_REG];
#pragma unroll
		for (int j = 0; j < NORM_REG; j++)
			if (tid + j * bd < group && y)
				wv[j] = wr[tid + j * bd];
		ck_grid_enter();
		if (MOE && ADD && group <= MOE_REG * bd && moe.k <= MOE_KMAX) {
			moe_fold_row(xr, moe, r, xs, g0, group, tid, bd, v); /* its loads at once */
		} else {
			const float g = MOE ? moe_term_gate(moe, r) : HC ? hct.inj[r * gridDim.y + blockIdx.y] : 0.0f;
#pragma unroll
			for (int j = 0; j < NORM_REG; j++) {
				const uint32_t i = tid + j * bd;
				if (i < group)
					v[j] = xr[i];
				if (ADD && i < group)
					v[j] = __fadd_rn(v[j], MOE  ? moe_term_with(moe, r, xs, g0 + i, g)
							       : HC ? __fmul_rn(hct.out[r * group + i], g)
								    : add[r * xs + g0 + i]);
			}
		}
#pragma unroll
		for (int j = 0; j < NORM_REG; j++) {
			const uint32_t i = tid + j * bd;
			if (i >= group)
				break;
			if (ADD)
				xr[i] = v[j];
			ss = __fadd_rn(ss, __fmul_rn(v[j], v[j]));
		}
		if (!y)
			return; /* the residual add alone (the last layer's) */
		ss = ck_block_sum(ss, red);
		rs = 1.0f / sqrtf(ss / (float)group + eps);
#pragma unroll
		for (int j = 0; j < NORM_REG; j++)
			if (tid + j * bd < group)
				yr[tid + j * bd] = __fmul_rn(__fmul_rn(v[j], rs), wv[j]);
	} else {
		ck_grid_enter();
		const float hw = HC ? hct.inj[r * gridDim.y + blockIdx.y] : 0.0f;
		for (uint32_t i = tid; i < group; i += bd) {
			float v = xr[i];
			if (ADD) {
				v = __fadd_rn(v, MOE  ? moe_term_at(moe, r, xs, g0 + i)
						 : HC ? __fmul_rn(hct.out[r * group + i], hw)
						      : add[r * xs + g0 + i]);
				xr[i] = v;
			}
			ss = __fadd_rn(ss, __fmul_rn(v, v));
		}
		if (!y)
			return;
		ss = ck_block_sum(ss, red);
		rs = 1.0f / sqrtf(ss / (float)group + eps);
		for (uint32_t i = tid; i < group; i += bd)
			yr[i] = __fmul_rn(__fmul_rn(xr[i], rs), wr[i]);
	}
	if (ROPE) {
		const uint64_t hv = (rope.row0 + r) * gridDim.y + blockIdx.y, half = rope.rot / 2;
		__syncthreads(); /* the normed vector, all of it */
		for (uint64_t i = tid; i < half; i += bd)
			rope_pair(yr, i, half, rope.pos[hv / rope.heads], rope.inv_freq);
	}
}

/* The MoE combine + residual add + norm of a decode row with small code: the block copies the
 * row's k expert outputs, its residual and its shared expert's output into shared memory with
 * cp.async (one rolled loop: every copy in flight at once, as the register form's loads are,
 * in a few instructions), then each element takes moe_term_with's operations in its order and
 * the sum of squares rmsnorm_kernel's, so the bits are the same. The register form unrolls 5 x
 * 10 guarded loads and three code paths, and a kernel that runs once a layer fetches its code
 * cold. Shared memory: [k + 2][group] floats, rows 0..k-1 the experts, k the residual, k + 1
 * the shared expert. */
__global__ void __launch_bounds__(1024) k_moe_norm_staged(float *x, uint64_t xs, const float *w, float *y,
							  uint64_t ys, uint32_t group, float eps, struct moe_term moe)
{
	extern __shared__ __align__(16) float st[];
	__shared__ float red[1024 / 32], s_w[MOE_KMAX];
	const uint64_t r = blockIdx.x;
	const uint32_t bd = blockDim.x, tid = threadIdx.x, k = (uint32_t)moe.k;
	const uint32_t rows = k + 1 + (moe.shared ? 1 : 0), c4 = group / 4;
	float *xr = x + r * xs;
	float wv[NORM_REG], v[NORM_REG], ss = 0;

#pragma unroll
	for (int e = 0; e < NORM_REG; e++)
		if (tid + e * bd < group && y)
			wv[e] = w[tid + e * bd];
	ck_grid_enter();
#pragma unroll 1
	for (uint32_t c = tid; c < rows * c4; c += bd) {
		const uint32_t q = c / c4, o = (c % c4) * 4;
		const float *src = q < k ? moe.out + (r * k + q) * xs + o : q == k ? xr + o : moe.shared + r * xs + o;
		mma_cp16(st + (uint64_t)q * group + o, src, true);
	}
	mma_cp_commit();
	if (tid < k)
		s_w[tid] = moe.w[r * k + tid];
	const float g = moe_term_gate(moe, r);
	mma_cp_wait<0>();
	__syncthreads();
#pragma unroll
	for (int e = 0; e < NORM_REG; e++) {
		const uint32_t i = tid + e * bd;
		if (i >= group)
			break;
		float t = 0.0f;
#pragma unroll 1
		for (uint32_t j = 0; j < k; j++)
			t = __fadd_rn(t, __fmul_rn(st[(uint64_t)j * group + i], s_w[j]));
		if (moe.shared)
			t = __fadd_rn(t, __fmul_rn(g, st[(uint64_t)(k + 1) * group + i]));
		v[e] = __fadd_rn(st[(uint64_t)k * group + i], t);
		xr[i] = v[e];
		ss = __fadd_rn(ss, __fmul_rn(v[e], v[e]));
	}
	if (!y)
		return;
	ss = ck_block_sum(ss, red);
	const float rs = 1.0f / sqrtf(ss / (float)group + eps);
	float *yr = y + r * ys;
#pragma unroll
	for (int e = 0; e < NORM_REG; e++)
		if (tid + e * bd < group)
			yr[tid + e * bd] = __fmul_rn(__fmul_rn(v[e], rs), wv[e]);
}

__global__ void rope_kernel(float *v, uint64_t heads, uint64_t hd, uint64_t rot, const int64_t *pos, int64_t pos0,
			    int64_t pos_step, const float *inv_freq)
{
	ck_grid_enter();
	uint64_t t = blockIdx.x, half = rot / 2;
	int64_t p = pos ? pos[t] : pos0 + (int64_t)t * pos_step;

	for (uint64_t j = threadIdx.x; j < heads * half; j += blockDim.x) {
		uint64_t h = j / half, i = j % half;
		rope_pair(v + (t * heads + h) * hd, i, half, p, inv_freq);
	}
}

__global__ void swiglu_wide_kernel(const float *act, uint64_t I, float *out)
{
	ck_grid_enter();
	uint64_t r = blockIdx.y;
	for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < I; i += (uint64_t)gridDim.x * blockDim.x)
		out[r * I + i] = __fmul_rn(ck_silu(act[r * 2 * I + i]), act[r * 2 * I + I + i]);
}

__global__ void add_kernel(float *x, const float *y, uint64_t n)
{
	ck_grid_enter();
	for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x)
		x[i] = __fadd_rn(x[i], y[i]);
}

__global__ void attn_gate_kernel(const float *att, const float *qg, uint64_t nq, uint64_t hd, float *out)
{
	ck_grid_enter();
	uint64_t t = blockIdx.y;
	for (uint64_t j = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; j < nq * hd; j += (uint64_t)gridDim.x * blockDim.x) {
		uint64_t h = j / hd, i = j % hd;
		out[t * nq * hd + j] = __fmul_rn(att[t * nq * hd + j], ck_sigmoid(qg[t * nq * 2 * hd + h * 2 * hd + hd + i]));
	}
}

__global__ void gather_kernel(const float *src, uint64_t ss, const int32_t *idx, uint64_t n, float *dst, uint64_t ds)
{
	ck_grid_enter();
	uint64_t r = blockIdx.y;
	const float *s = src + (uint64_t)idx[r] * ss;
	for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x)
		dst[r * ds + i] = s[i];
}

__global__ void hc_low_kernel(float *low, uint64_t n, float hc)
{
	ck_grid_enter();
	for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x)
		low[i] = ck_hc_low(low[i], hc);
}

__global__ void hc_combine_kernel(const float *mix, const float *xn, uint64_t H, uint64_t hc, float *mixed)
{
	ck_grid_enter();
	uint64_t t = blockIdx.y;
	for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < H; i += (uint64_t)gridDim.x * blockDim.x) {
		float acc = 0;
		for (uint64_t s = 0; s < hc; s++)
			acc = __fadd_rn(acc, __fmul_rn(ck_sigmoid(mix[(t * hc + s) * H + i]), xn[(t * hc + s) * H + i]));
		mixed[t * H + i] = __fdiv_rn(acc, (float)hc);
	}
}

__global__ void hc_inject_kernel(float *inj, uint64_t n, float hc)
{
	ck_grid_enter();
	for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x)
		inj[i] = ck_hc_inject(inj[i], hc);
}

__global__ void hc_add_kernel(float *X, const float *out, const float *inj, uint64_t H, uint64_t hc)
{
	ck_grid_enter();
	uint64_t t = blockIdx.y;
	for (uint64_t j = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; j < hc * H; j += (uint64_t)gridDim.x * blockDim.x) {
		uint64_t s = j / H, i = j % H;
		X[t * hc * H + j] = __fadd_rn(X[t * hc * H + j], __fmul_rn(out[t * H + i], inj[t * hc + s]));
	}
}

// One block per (row, stream): the two norms (fixed trees), the gate's dot product, the
// gated value and its norm, as the CPU's ple_forward loop.
#define PLE_REG (CK_PLE_HIDDEN_MAX / 512) /* a thread's values of a stream at most (2560 over 256 threads: 10) */
__global__ void __launch_bounds__(512) ple_gate_kernel(float *key, const float *X, const float *val, const float *nk,
						       const float *nq, const float *nc, uint64_t H, uint64_t hc, float eps,
						       float *gv, float *gvn)
{
	__shared__ float red[512 / 32];
	const uint64_t t = blockIdx.x, s = blockIdx.y, hh = hc * H, off = t * hh + s * H, bd = blockDim.x;
	float *k = key + off;
	const float *x = X + off;
	float ssk = 0, ssq = 0, kv[PLE_REG], xv[PLE_REG], wk[PLE_REG], wq[PLE_REG], wc[PLE_REG];

	/* A thread's values and weights in registers, every load issued before the first use (the
	 * weights before the wait): the loop form's chain of round trips was the kernel's time. The
	 * operations and their order are the loop's: the same bits. */
#pragma unroll
	for (int j = 0; j < PLE_REG; j++) {
		const uint64_t i = threadIdx.x + j * bd;
		if (i < H) {
			wk[j] = nk[s * H + i];
			wq[j] = nq[s * H + i];
			wc[j] = nc[s * H + i];
		}
	}
	ck_grid_enter();
#pragma unroll
	for (int j = 0; j < PLE_REG; j++) {
		const uint64_t i = threadIdx.x + j * bd;
		if (i < H) {
			kv[j] = k[i];
			xv[j] = x[i];
		}
	}
#pragma unroll
	for (int j = 0; j < PLE_REG; j++)
		if (threadIdx.x + j * bd < H) {
			ssk = __fadd_rn(ssk, __fmul_rn(kv[j], kv[j]));
			ssq = __fadd_rn(ssq, __fmul_rn(xv[j], xv[j]));
		}
	ssk = ck_block_sum(ssk, red);
	ssq = ck_block_sum(ssq, red);
	const float rk = 1.0f / sqrtf(ssk / (float)H + eps), rq = 1.0f / sqrtf(ssq / (float)H + eps);
	float dot = 0;
#pragma unroll
	for (int j = 0; j < PLE_REG; j++)
		if (threadIdx.x + j * bd < H) {
			const float kn = __fmul_rn(__fmul_rn(kv[j], rk), wk[j]);
			const float qn = __fmul_rn(__fmul_rn(xv[j], rq), wq[j]);
			dot = __fadd_rn(dot, __fmul_rn(kn, qn));
			kv[j] = kn;
		}
	dot = ck_block_sum(dot, red);
	float vv[PLE_REG], ssv = 0, g = __fdiv_rn(dot, sqrtf((float)H));
	g = __fmul_rn(sqrtf(fmaxf(fabsf(g), 1e-6f)), g > 0 ? 1.0f : g < 0 ? -1.0f : 0.0f);
	const float sg = ck_sigmoid(g);
#pragma unroll
	for (int j = 0; j < PLE_REG; j++) {
		const uint64_t i = threadIdx.x + j * bd;
		if (i < H) {
			k[i] = kv[j]; /* the normed key, as the loop form wrote it */
			vv[j] = __fmul_rn(sg, val[t * H + i]);
			gv[off + i] = vv[j];
			ssv = __fadd_rn(ssv, __fmul_rn(vv[j], vv[j]));
		}
	}
	ssv = ck_block_sum(ssv, red);
	const float rv = 1.0f / sqrtf(ssv / (float)H + eps);
#pragma unroll
	for (int j = 0; j < PLE_REG; j++) {
		const uint64_t i = threadIdx.x + j * bd;
		if (i < H)
			gvn[off + i] = __fmul_rn(__fmul_rn(vv[j], rv), wc[j]);
	}
}

// The window after an item's row t (the last win inputs of [old window | rows 0 .. t], oldest
// first) into dst, one channel: entry i is row t + 1 - win + i, or (before the item's first
// row) old entry t + 1 + i. With dst == old (the window moving on) entries are moved up in
// increasing order, so each old entry is read before it is overwritten.
__device__ __forceinline__ void ple_window_after(float *dst, const float *old, const float *rows, int64_t t, uint64_t win,
						 uint64_t hh, uint64_t ch)
{
	for (uint64_t i = 0; i < win; i++) {
		int64_t src = t + 1 - (int64_t)win + (int64_t)i;
		dst[i * hh + ch] = src >= 0 ? rows[(uint64_t)src * hh + ch] : old[(uint64_t)(src + (int64_t)win) * hh + ch];
	}
}

// One thread per (item, channel): the item's rows in order, then its window moves on. The
// window is read for every row before it is rewritten, by the same thread; keep_states (keep:
// ck_step.ple_keep) first writes the window after each kept row into that row's block.
__global__ void ple_conv_kernel(const int64_t *t0s, const int64_t *ns, float *const *states, float *const *keep,
				int slot, const float *gv, const float *gvn, const float *w, uint64_t hh, uint64_t K,
				uint64_t dil, float *X)
{
	ck_grid_enter();
	uint32_t item = blockIdx.y;
	uint64_t ch = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x, win = (K - 1) * dil;
	if (ch >= hh)
		return;
	uint64_t t0 = (uint64_t)t0s[item], n = (uint64_t)ns[item];
	float *st = states[item] + (uint64_t)slot * win * hh;
	for (uint64_t t = 0; t < n; t++) {
		float acc = 0;
		for (uint64_t j = 0; j < K; j++) {
			int64_t src = (int64_t)t - (int64_t)((K - 1 - j) * dil);
			float x = src >= 0 ? gvn[(t0 + (uint64_t)src) * hh + ch] : st[(uint64_t)(src + (int64_t)win) * hh + ch];
			acc = __fadd_rn(acc, __fmul_rn(w[ch * K + j], x));
		}
		uint64_t o = (t0 + t) * hh + ch;
		X[o] = __fadd_rn(X[o], __fadd_rn(gv[o], ck_silu(acc)));
	}
	for (uint64_t t = 0; keep && t + 1 < n; t++)
		if (keep[t0 + t])
			ple_window_after(keep[t0 + t] + (uint64_t)slot * win * hh, st, gvn + t0 * hh, (int64_t)t, win, hh, ch);
	ple_window_after(st, st, gvn + t0 * hh, (int64_t)n - 1, win, hh, ch);
}

} // namespace

int ck_dependent_launch = 1;

extern "C" {

void ck_set_dependent_launch(int on)
{
	ck_dependent_launch = on;
}

/* The kernel files' setters of their trace buffer (ck-common.cuh), registered while the
 * program loads; the trace buffer while on. */
static int (*trace_setters[32])(struct ck_trace_buf *);
static int trace_nsetters;
static struct ck_trace_buf *trace_buf;

int ck_trace_register(int (*set)(struct ck_trace_buf *b))
{
	if (trace_nsetters < (int)(sizeof(trace_setters) / sizeof(trace_setters[0])))
		trace_setters[trace_nsetters++] = set;
	return 0;
}

static int trace_set_all(struct ck_trace_buf *b)
{
	for (int i = 0; i < trace_nsetters; i++)
		if (trace_setters[i](b) < 0)
			return ck_launched() ? ck_launched() : -(int)cudaErrorInvalidSymbol;
	return 0;
}

int ck_trace_start(uint32_t cap)
{
	struct ck_trace_buf h = { 0, cap };
	cudaError_t rc;

	if (trace_buf)
		return 0;
	if ((rc = cudaMalloc((void **)&trace_buf, sizeof(h) + (size_t)cap * sizeof(struct ck_trace_rec))) != cudaSuccess ||
	    (rc = cudaMemcpy(trace_buf, &h, sizeof(h), cudaMemcpyHostToDevice)) != cudaSuccess) {
		cudaFree(trace_buf);
		trace_buf = NULL;
		return -(int)rc;
	}
	return trace_set_all(trace_buf);
}

int ck_trace_stop(struct ck_trace_rec *recs, uint32_t cap, uint32_t *n)
{
	struct ck_trace_buf h;
	cudaError_t rc;
	int r;

	*n = 0;
	if (!trace_buf)
		return 0;
	if ((rc = cudaDeviceSynchronize()) != cudaSuccess ||
	    (rc = cudaMemcpy(&h, trace_buf, sizeof(h), cudaMemcpyDeviceToHost)) != cudaSuccess)
		return -(int)rc;
	*n = h.n;
	uint32_t got = h.n < h.cap ? h.n : h.cap;
	if (got > cap)
		got = cap;
	if (got && (rc = cudaMemcpy(recs, trace_buf->rec, got * sizeof(*recs), cudaMemcpyDeviceToHost)) != cudaSuccess)
		return -(int)rc;
	r = trace_set_all(NULL);
	cudaFree(trace_buf);
	trace_buf = NULL;
	return r;
}

int ck_embed(const void *table, enum ck_dtype dt, const int32_t *ids, uint64_t T, uint64_t H, uint64_t hc, float *x,
	     void *stream)
{
	if (!T)
		return 0;
	ck_launch(embed_kernel, dim3(ck_blocks(H), (unsigned)T), CK_BLOCK, 0, (cudaStream_t)stream, table, dt, ids, T, H, hc, x);
	return ck_launched();
}

/* Threads per row from the group alone: the block sum's order (and so the bits) must not
 * depend on how many rows the step has. Wide blocks for long groups, so one decode row is not
 * a long chain on one multiprocessor. */
static unsigned norm_threads(uint64_t group)
{
	return group >= 4096 ? 1024 : group >= 1024 ? 512 : CK_BLOCK;
}

int ck_rmsnorm(const float *x, uint64_t xs, const float *w1p, uint64_t wn, float *y, uint64_t ys, uint64_t rows,
	       uint64_t n, uint64_t group, float eps, void *stream)
{
	if (!rows)
		return 0;
	for (uint64_t r0 = 0; r0 < rows; r0 += CK_MAX_GRID_X) {
		uint64_t nr = rows - r0 < CK_MAX_GRID_X ? rows - r0 : CK_MAX_GRID_X;
		ck_launch(rmsnorm_kernel<false>, dim3((unsigned)nr, (unsigned)(n / group)), norm_threads(group), 0,
					(cudaStream_t)stream, (float *)x + r0 * xs, xs, (const float *)NULL, w1p, wn == n && n != group,
								y + r0 * ys, ys, (uint32_t)group, eps, moe_term{}, rope_term{}, hc_term{});
	}
	return ck_launched();
}

int ck_add_rmsnorm(float *x, const float *add, const float *w1p, float *y, uint64_t rows, uint64_t n, float eps,
		   void *stream)
{
	if (!rows)
		return 0;
	for (uint64_t r0 = 0; r0 < rows; r0 += CK_MAX_GRID_X) {
		uint64_t nr = rows - r0 < CK_MAX_GRID_X ? rows - r0 : CK_MAX_GRID_X;
		ck_launch(rmsnorm_kernel<true>, dim3((unsigned)nr, 1), norm_threads(n), 0, (cudaStream_t)stream, 
			x + r0 * n, n, add + r0 * n, w1p, true, y + r0 * n, n, (uint32_t)n, eps, moe_term{}, rope_term{}, hc_term{});
	}
	return ck_launched();
}

int ck_moe_combine_add_rmsnorm(const float *moe_out, const float *mw, const float *shared, const float *gate,
			       uint64_t k, float *x, const float *w1p, float *y, uint64_t rows, uint64_t n, float eps,
			       void *stream)
{
	if (!rows)
		return 0;
	const uint64_t threads = norm_threads(n), smem = (k + 2) * n * sizeof(float);
	/* The staged form where its rows fit it and the device grants its shared memory (an H100
	 * gives a block up to 227 KB, an RTX 50 card 99 KB); the register form otherwise. */
	bool staged = ((uintptr_t)moe_out | (uintptr_t)x | (uintptr_t)shared) % 16 == 0 && n % 4 == 0 &&
		      k <= MOE_KMAX && n <= NORM_REG * threads;
	if (staged && cudaFuncSetAttribute(k_moe_norm_staged, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) !=
			      cudaSuccess) {
		cudaGetLastError(); /* not a launch error: the register form runs */
		staged = false;
	}
	for (uint64_t r0 = 0; r0 < rows; r0 += CK_MAX_GRID_X) {
		uint64_t nr = rows - r0 < CK_MAX_GRID_X ? rows - r0 : CK_MAX_GRID_X;
		const struct moe_term m = { moe_out + r0 * k * n, mw + r0 * k, shared ? shared + r0 * n : NULL, gate + r0, k };
		if (staged)
			ck_launch(k_moe_norm_staged, dim3((unsigned)nr, 1), (unsigned)threads, smem, (cudaStream_t)stream,
				  x + r0 * n, n, w1p, y ? y + r0 * n : NULL, n, (uint32_t)n, eps, m);
		else
			ck_launch(rmsnorm_kernel<true, true>, dim3((unsigned)nr, 1), (unsigned)threads, 0,
				  (cudaStream_t)stream, x + r0 * n, n, (const float *)NULL, w1p, true, y ? y + r0 * n : NULL,
				  n, (uint32_t)n, eps, m, rope_term{}, hc_term{});
	}
	return ck_launched();
}

int ck_rmsnorm_rope(const float *x, uint64_t xs, const float *w1p, float *y, uint64_t ys, uint64_t rows, uint64_t n,
		    uint64_t group, float eps, uint64_t heads, uint64_t rot, const int64_t *pos, const float *inv_freq,
		    void *stream)
{
	if (!rows)
		return 0;
	if (rot > group)
		return -(int)cudaErrorInvalidValue;
	for (uint64_t r0 = 0; r0 < rows; r0 += CK_MAX_GRID_X) {
		uint64_t nr = rows - r0 < CK_MAX_GRID_X ? rows - r0 : CK_MAX_GRID_X;
		const struct rope_term rt = { pos, inv_freq, rot, heads, r0 };
		ck_launch(rmsnorm_kernel<false, false, true>, dim3((unsigned)nr, (unsigned)(n / group)), norm_threads(group),
			  0, (cudaStream_t)stream, (float *)x + r0 * xs, xs, (const float *)NULL, w1p, false, y + r0 * ys, ys,
			  (uint32_t)group, eps, moe_term{}, rt, hc_term{});
	}
	return ck_launched();
}

int ck_rope(float *v, uint64_t T, uint64_t heads, uint64_t hd, uint64_t rot, const int64_t *pos, int64_t pos0,
	    int64_t pos_step, const float *inv_freq, void *stream)
{
	if (!T || rot < 2)
		return 0;
	ck_launch(rope_kernel, (unsigned)T, CK_BLOCK, 0, (cudaStream_t)stream, v, heads, hd, rot, pos, pos0, pos_step, inv_freq);
	return ck_launched();
}

int ck_swiglu(const float *act, uint64_t rows, uint64_t I, float *out, void *stream)
{
	if (!rows)
		return 0;
	ck_launch(swiglu_wide_kernel, dim3(ck_blocks(I), (unsigned)rows), CK_BLOCK, 0, (cudaStream_t)stream, act, I, out);
	return ck_launched();
}

int ck_add(float *x, const float *y, uint64_t n, void *stream)
{
	if (!n)
		return 0;
	ck_launch(add_kernel, ck_blocks(n), CK_BLOCK, 0, (cudaStream_t)stream, x, y, n);
	return ck_launched();
}

int ck_attn_gate(const float *att, const float *qg, uint64_t T, uint64_t nq, uint64_t hd, float *out, void *stream)
{
	if (!T)
		return 0;
	ck_launch(attn_gate_kernel, dim3(ck_blocks(nq * hd), (unsigned)T), CK_BLOCK, 0, (cudaStream_t)stream, att, qg, nq, hd, out);
	return ck_launched();
}

int ck_gather_rows(const float *src, uint64_t src_stride, const int32_t *idx, uint64_t rows, uint64_t n, float *dst,
		   uint64_t dst_stride, void *stream)
{
	if (!rows)
		return 0;
	ck_launch(gather_kernel, dim3(ck_blocks(n), (unsigned)rows), CK_BLOCK, 0, (cudaStream_t)stream, src, src_stride, idx, n, dst,
												  dst_stride);
	return ck_launched();
}

int ck_hc_low_act(float *low, uint64_t n, float hc, void *stream)
{
	if (!n)
		return 0;
	ck_launch(hc_low_kernel, ck_blocks(n), CK_BLOCK, 0, (cudaStream_t)stream, low, n, hc);
	return ck_launched();
}

int ck_hc_combine(const float *mix, const float *xn, uint64_t T, uint64_t H, uint64_t hc, float *mixed, void *stream)
{
	if (!T)
		return 0;
	ck_launch(hc_combine_kernel, dim3(ck_blocks(H), (unsigned)T), CK_BLOCK, 0, (cudaStream_t)stream, mix, xn, H, hc, mixed);
	return ck_launched();
}

int ck_hc_inject_act(float *inj, uint64_t n, float hc, void *stream)
{
	if (!n)
		return 0;
	ck_launch(hc_inject_kernel, ck_blocks(n), CK_BLOCK, 0, (cudaStream_t)stream, inj, n, hc);
	return ck_launched();
}

int ck_hc_add_injected(float *X, const float *out, const float *inj, uint64_t T, uint64_t H, uint64_t hc, void *stream)
{
	if (!T)
		return 0;
	ck_launch(hc_add_kernel, dim3(ck_blocks(hc * H), (unsigned)T), CK_BLOCK, 0, (cudaStream_t)stream, X, out, inj, H, hc);
	return ck_launched();
}

int ck_hc_add_rmsnorm(float *X, const float *out, const float *inj, const float *w1p, float *y, uint64_t T, uint64_t H,
		      uint64_t hc, float eps, void *stream)
{
	if (!T)
		return 0;
	for (uint64_t r0 = 0; r0 < T; r0 += CK_MAX_GRID_X) {
		const uint64_t nr = T - r0 < CK_MAX_GRID_X ? T - r0 : CK_MAX_GRID_X, hh = hc * H;
		const struct hc_term h = { out + r0 * H, inj + r0 * hc };
		ck_launch(rmsnorm_kernel<true, false, false, true>, dim3((unsigned)nr, (unsigned)hc), norm_threads(H), 0,
			  (cudaStream_t)stream, X + r0 * hh, hh, (const float *)NULL, w1p, true, y + r0 * hh, hh, (uint32_t)H,
			  eps, moe_term{}, rope_term{}, h);
	}
	return ck_launched();
}

int ck_ple_gate(float *key, const float *X, const float *val, const float *norm_key, const float *norm_query,
		const float *norm_conv, uint64_t T, uint64_t H, uint64_t hc, float eps, float *gv, float *gvn, void *stream)
{
	/* CK_BLOCK threads up to 3072 values a stream, then as many as it takes (from H alone: the
	 * block sums' order, so the bits, never depend on the step) */
	const uint64_t threads = H <= PLE_REG * CK_BLOCK ? CK_BLOCK : (H + PLE_REG * 32 - 1) / (PLE_REG * 32) * 32;

	if (!T)
		return 0;
	if (H > CK_PLE_HIDDEN_MAX)
		return -(int)cudaErrorInvalidValue; /* the backend refuses such a model at open */
	ck_launch(ple_gate_kernel, dim3((unsigned)T, (unsigned)hc), (unsigned)threads, 0, (cudaStream_t)stream,
		key, X, val, norm_key, norm_query, norm_conv, H, hc, eps, gv, gvn);
	return ck_launched();
}

int ck_ple_conv(const struct ck_step *st, int slot, const float *gv, const float *gvn, const float *w, uint64_t hh,
		uint64_t K, uint64_t dil, float *X, void *stream)
{
	if (!st->n_items)
		return 0;
	ck_launch(ple_conv_kernel, dim3((unsigned)((hh + CK_BLOCK - 1) / CK_BLOCK), st->n_items), CK_BLOCK, 0, (cudaStream_t)stream, 
		st->t0, st->n, st->ple_state, st->ple_keep, slot, gv, gvn, w, hh, K, dil, X);
	return ck_launched();
}

} // extern "C"
