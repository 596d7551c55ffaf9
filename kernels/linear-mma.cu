/* linear-mma.cu - BF16 linears on the tensor cores: y = x W^T with W BF16 [n][k] and fp32
 * activations split into BF16 halves (mma.cuh). Two kernels of identical numerics:
 *
 * - skinny, for few activation rows (decode): a warp owns 16 weight rows and one of KS slices
 *   of k, streams them from global memory (16-byte loads, 4 steps ahead) and applies each
 *   step to up to 32 activation rows (NB tiles of 8); the slices' sums meet in shared memory
 *   and are added in slice order.
 * - tiled (mma-tile.cuh), for many rows (prefill): 128 x 128 tiles through shared memory;
 *   the same steps, the same chain of MMAs per element and the same slices folded in order.
 * - skinny over listed rows (ck_linear_rows, at the end): the skinny kernel's arithmetic for
 *   the rows of a list only (the MTP head's draft vocabulary of lm_head).
 *
 * KS comes from n and k alone, and which kernel runs changes no bits: an element depends on
 * its own activation row and W only, never on m or on the other rows (batch invariance). */
#include "mma-tile.cuh"

#include <cooperative_groups.h>

#include <string.h>

namespace cg = cooperative_groups;

#define SK_WARPS 8  /* warps per block, or KS where more slices than that share a tile */
#define SK_MAX_KS 32 /* slices in one block; more in clusters (k_skinny_wide) */
#define SK_MAX_CLUSTER 8 /* blocks a cluster (the portable limit) */
#define SK_BW(KS) ((KS) > SK_WARPS ? (KS) : SK_WARPS)
#define SK_STEPS 8 /* steps loaded ahead per warp: 512 contiguous bytes of each of its rows */

struct skinny_args {
	const float *x;
	uint64_t m, k;
	uint32_t nmat, swiglu; /* swiglu: x rows are [gate | up] of 2k, the input their SwiGLU */
	const uint8_t *w[LIN_MULTI];
	uint64_t n[LIN_MULTI], tile_end[LIN_MULTI], ldy[LIN_MULTI];
	float *y[LIN_MULTI];
	uint32_t ep[LIN_MULTI]; /* enum ck_epilogue of each matrix, with divisor ep_div */
	float ep_div;
};

/* A lane's 8 activations of step s of row xr (zeros for a row past m); with swiglu (a row of
 * [gate | up], up k floats on) each is silu(gate) * up as ck_swiglu computes it. */
static __device__ __forceinline__ void sk_load_x(const float *xr, bool valid, uint64_t s, uint32_t hi[4],
						 uint32_t lo[4], bool swiglu = false, uint64_t k = 0)
{
	float f[8] = { 0, 0, 0, 0, 0, 0, 0, 0 };

	if (valid) {
		const float4 a = *(const float4 *)(xr + s * MMA_STEP), b = *(const float4 *)(xr + s * MMA_STEP + 4);
		f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
		if (swiglu) {
			const float4 c = *(const float4 *)(xr + k + s * MMA_STEP), d = *(const float4 *)(xr + k + s * MMA_STEP + 4);
			const float u[8] = { c.x, c.y, c.z, c.w, d.x, d.y, d.z, d.w };
#pragma unroll
			for (int e = 0; e < 8; e++)
				f[e] = __fmul_rn(ck_silu(f[e]), u[e]);
		}
	}
	mma_split8(f, hi, lo);
}

/* 16 weight bytes, without L1 allocation (the weights are read once) and with a 128-byte L2
 * fetch hint. bench/skinny-variants.cu measured the 256-byte hint fastest on the 248320 x 2048
 * lm_head alone (4.3 TB/s against 2.7 for __ldg), but inside a decode step, with every warp of
 * the GPU streaming at once, the 256-byte fetches outran the L2 (ncu: 1.3-1.5x the matrix
 * bytes read from DRAM) and the step took 1.356 ms against 1.296 with 128 bytes, 1.40 with no
 * hint (CAPY_CUDA_SKIP-style A/B runs on the Qwen3.5-MoE 8-layer shape, batch 1). */
static __device__ __forceinline__ uint4 sk_ldw(const uint8_t *p)
{
	uint4 r;
	asm volatile("ld.global.nc.L1::no_allocate.L2::128B.v4.u32 {%0,%1,%2,%3}, [%4];\n"
		     : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
		     : "l"(p));
	return r;
}

/* The matrix of a tile of a combined launch: its weights, rows, output and epilogue (constant
 * indices: the arrays stay in the parameter space). */
struct sk_mat {
	const uint8_t *w;
	uint64_t n, ldy, r0;
	float *y;
	uint32_t ep;
	bool live;
};

static __device__ __forceinline__ struct sk_mat sk_find(const struct skinny_args &a, uint64_t tile)
{
	struct sk_mat m = { a.w[0], 0, 0, 0, NULL, CK_EP_NONE, false };
	uint64_t start = 0;

#pragma unroll
	for (int j = 0; j < LIN_MULTI; j++) {
		if (j >= (int)a.nmat || m.live)
			continue;
		if (tile < a.tile_end[j]) {
			m.w = a.w[j];
			m.n = a.n[j];
			m.y = a.y[j];
			m.ldy = a.ldy[j];
			m.ep = a.ep[j];
			m.r0 = (tile - start) * 16;
			m.live = true;
		} else {
			start = a.tile_end[j];
		}
	}
	return m;
}

/* A warp's part of a tile in k_skinny_wide (k_skinny keeps the same loop written out: as this
 * function it compiled to 4-20 more registers there): its two weight rows a lane reads (wa,
 * wb; va, vb: inside the matrix) over steps [s0, s1) of k, applied to NB groups of 8
 * activation rows (xr, xv) into
 * acc, step after step in order. Batches of SK_STEPS steps are loaded at once, so a warp's
 * time is a few L2 round trips, not one a step; the rest one step at a time. PF0: one group (decode
 * in blocks of 8 warps), whose activations are loaded with each batch of weights (wider
 * blocks cannot spare the registers). (Loading a short last batch at once instead of single
 * steps raised the registers and slowed every GEMV of a decode step by 1-5 %.) */
template <int NB, bool PF0>
static __device__ __forceinline__ void sk_slice(float (&acc)[NB][4], const uint8_t *wa, const uint8_t *wb, bool va,
						bool vb, const float *const (&xr)[NB], const bool (&xv)[NB], uint64_t s0,
						uint64_t s1, bool swiglu, uint64_t k)
{
	const bool PF = PF0 && !swiglu;
	uint64_t s = s0;

	for (; s + SK_STEPS <= s1; s += SK_STEPS) {
		uint4 A[SK_STEPS], B[SK_STEPS];
		float4 X[PF0 ? SK_STEPS : 1][2];
#pragma unroll
		for (int u = 0; u < SK_STEPS; u++) {
			A[u] = va ? sk_ldw(wa + (s + u) * MMA_STEP * 2) : make_uint4(0, 0, 0, 0);
			B[u] = vb ? sk_ldw(wb + (s + u) * MMA_STEP * 2) : make_uint4(0, 0, 0, 0);
			if (PF) {
				const float4 z = make_float4(0, 0, 0, 0);
				X[PF0 ? u : 0][0] = xv[0] ? *(const float4 *)(xr[0] + (s + u) * MMA_STEP) : z;
				X[PF0 ? u : 0][1] = xv[0] ? *(const float4 *)(xr[0] + (s + u) * MMA_STEP + 4) : z;
			}
		}
#pragma unroll
		for (int u = 0; u < SK_STEPS; u++) {
#pragma unroll
			for (int nb = 0; nb < NB; nb++) {
				uint32_t hi[4], lo[4];
				if (PF) {
					const float4 a = X[PF0 ? u : 0][0], b = X[PF0 ? u : 0][1];
					const float f[8] = { a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w };
					mma_split8(f, hi, lo);
				} else {
					sk_load_x(xr[nb], xv[nb], s + u, hi, lo, swiglu, k);
				}
				mma_step_split(acc[nb], A[u], B[u], hi, lo);
			}
		}
	}
	for (; s < s1; s++) {
		const uint4 A = va ? sk_ldw(wa + s * MMA_STEP * 2) : make_uint4(0, 0, 0, 0);
		const uint4 B = vb ? sk_ldw(wb + s * MMA_STEP * 2) : make_uint4(0, 0, 0, 0);
#pragma unroll
		for (int nb = 0; nb < NB; nb++) {
			uint32_t hi[4], lo[4];
			sk_load_x(xr[nb], xv[nb], s, hi, lo, swiglu, k);
			mma_step_split(acc[nb], A, B, hi, lo);
		}
	}
}

/* An element's result into y through its epilogue: fragment element q of lane (g, c), in the
 * group of 8 activation rows that starts at row tok0. */
static __device__ __forceinline__ void sk_store(const struct skinny_args &a, const struct sk_mat &mt, uint64_t tok0,
						int q, int g, int c, float v)
{
	const uint64_t r = mt.r0 + g + (q >= 2 ? 8 : 0), t = tok0 + 2 * c + (q & 1);

	if (mt.live && r < mt.n && t < a.m)
		mt.y[t * mt.ldy + r] = ck_epilogue_apply(v, mt.ep, a.ep_div);
}

/* EP: the launch has epilogues (a separate instantiation: the epilogue's registers slowed
 * every plain GEMV of a decode step by 1-5 % when they were always there).
 *
 * XM, for decode rows (one group of at most 8) in blocks of 8 warps: a block of 8 warps that
 * holds a batch of 8 steps of 8 activation rows in registers needs 186 of them, so one block
 * runs per multiprocessor and a GEMV of several waves (the GDN in_proj's 772 blocks) runs its
 * waves one after another, each wave's loads issued when the one before has exited. Two
 * blocks an SM overlap one block's loads with the other's arithmetic and exit:
 * - SK_X_ONE: one activation row, no SwiGLU (a batch-1 decode step). The batch's activations
 *   are 256 floats, 8 a lane: each lane loads its 8 with the batch's weights, and the lanes
 *   that need them at a step take them by shuffles (lane (g, c) reads step u from lane
 *   4u + c; the g > 0 columns are zero, as for any row past m): 128 registers.
 * - SK_X_HALF: 2 to 8 rows (and SwiGLU inputs): batches of 4 steps instead of 8, 126
 *   registers. The same steps in the same order, only loaded 4 at a time.
 * - SK_X_REGS: 8 steps a batch, one block an SM: 9-32 rows (NB 2 and 4), and blocks of 16
 *   warps (16 slices), which run one an SM whatever their registers.
 * -10 % a batch-1 step and -6 to -8 % a batch-8 step (docs/perf.md); the same floats through
 * the same split and MMAs: the same bits. (2 to 8 rows copied by cp.async into shared memory,
 * 8 KB a warp, freed the registers too but made a batch-8 step 40 % slower: not kept.) */
enum { SK_X_REGS, SK_X_ONE, SK_X_HALF };
#define SK_MIN_BLOCKS(KS, XM) ((XM) && SK_BW(KS) == SK_WARPS ? 2 : 0) /* 0: none (1 changed the registers) */
template <int NB, int KS, bool EP, int XM = SK_X_REGS>
static __global__ void __launch_bounds__(SK_BW(KS) * 32, SK_MIN_BLOCKS(KS, XM)) k_skinny(struct skinny_args a)
{
	constexpr bool X1 = XM == SK_X_ONE;
	constexpr int ST = XM == SK_X_HALF ? SK_STEPS / 2 : SK_STEPS;
	__shared__ float part[KS > 1 ? SK_BW(KS) : 1][NB][4][32];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3, slice = warp % KS;
	const uint64_t tile = (uint64_t)blockIdx.x * (SK_BW(KS) / KS) + (uint64_t)(warp / KS);
	const uint64_t k = a.k, nsteps = k / MMA_STEP;
	const uint64_t s0 = nsteps * (uint64_t)slice / KS, s1 = nsteps * (uint64_t)(slice + 1) / KS;
	const uint8_t *w = a.w[0];
	uint64_t n = 0, ldy = 0, r0 = 0, start = 0;
	uint32_t ep = CK_EP_NONE;
	float *y = NULL;
	bool live = false;

	/* the matrix of this tile (constant indices: the arrays stay in the parameter space) */
#pragma unroll
	for (int j = 0; j < LIN_MULTI; j++) {
		if (j >= (int)a.nmat || live)
			continue;
		if (tile < a.tile_end[j]) {
			w = a.w[j];
			n = a.n[j];
			y = a.y[j];
			ldy = a.ldy[j];
			ep = a.ep[j];
			r0 = (tile - start) * 16;
			live = true;
		} else {
			start = a.tile_end[j];
		}
	}
	if (KS == 1 && !live)
		return;
	const uint64_t ra = r0 + g, rb = r0 + g + 8;
	const bool va = live && ra < n, vb = live && rb < n;
	const uint8_t *wa = w + (va ? ra : 0) * k * 2 + c * 16, *wb = w + (vb ? rb : 0) * k * 2 + c * 16;
	const uint64_t ngroups = (a.m + 8 * NB - 1) / (8 * NB);

	/* (Loading a warp's first batch of weight steps before this wait was tried: the 248320-row
	 * lm_head, whose batches then live across the loop, took 564 us a step against 351.) */
	ck_grid_enter();
	for (uint64_t tg = blockIdx.y; tg < ngroups; tg += gridDim.y) {
		float acc[NB][4];
		const float *xr[NB];
		bool xv[NB];
#pragma unroll
		for (int nb = 0; nb < NB; nb++) {
			const uint64_t tok = tg * 8 * NB + nb * 8 + g;
			xv[nb] = tok < a.m;
			xr[nb] = a.x + (xv[nb] ? tok : 0) * (a.swiglu ? 2 * k : k) + c * 8;
			for (int q = 0; q < 4; q++)
				acc[nb][q] = 0.0f;
		}
		if (live) {
			uint64_t s = s0;
			for (; s + ST <= s1; s += ST) {
				/* decode (one tile of 8 rows) in blocks of 8 warps: the group's activations
				 * loaded with its weights, so no step waits on an L2 round trip of its own
				 * (wider blocks cannot spare the registers) */
				constexpr bool PF0 = NB == 1 && KS <= SK_WARPS && !X1;
				const bool PF = PF0 && !a.swiglu;
				uint4 A[ST], B[ST];
				float4 X[PF0 ? ST : 1][2];
				uint32_t xh[4], xl[4]; /* X1: the split of this lane's 8 floats of the batch */
#pragma unroll
				for (int u = 0; u < ST; u++) {
					A[u] = va ? sk_ldw(wa + (s + u) * MMA_STEP * 2) : make_uint4(0, 0, 0, 0);
					B[u] = vb ? sk_ldw(wb + (s + u) * MMA_STEP * 2) : make_uint4(0, 0, 0, 0);
					if (PF) {
						const float4 z = make_float4(0, 0, 0, 0);
						X[PF0 ? u : 0][0] = xv[0] ? *(const float4 *)(xr[0] + (s + u) * MMA_STEP) : z;
						X[PF0 ? u : 0][1] = xv[0] ? *(const float4 *)(xr[0] + (s + u) * MMA_STEP + 4) : z;
					}
				}
				if constexpr (X1) {
					/* floats 8 lane .. 8 lane + 7 of the batch: step lane / 4, those of c = lane % 4 */
					const float4 p = *(const float4 *)(a.x + s * MMA_STEP + lane * 8);
					const float4 q = *(const float4 *)(a.x + s * MMA_STEP + lane * 8 + 4);
					const float f[8] = { p.x, p.y, p.z, p.w, q.x, q.y, q.z, q.w };
					mma_split8(f, xh, xl);
				}
#pragma unroll
				for (int u = 0; u < ST; u++)
#pragma unroll
					for (int nb = 0; nb < NB; nb++) {
						uint32_t hi[4], lo[4];
						if constexpr (X1) {
#pragma unroll
							for (int q = 0; q < 4; q++) {
								const uint32_t h = __shfl_sync(0xffffffffu, xh[q], 4 * u + c);
								const uint32_t l = __shfl_sync(0xffffffffu, xl[q], 4 * u + c);
								hi[q] = g ? 0u : h;
								lo[q] = g ? 0u : l;
							}
						} else if (PF) {
							const float4 a = X[PF0 ? u : 0][0], b = X[PF0 ? u : 0][1];
							const float f[8] = { a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w };
							mma_split8(f, hi, lo);
						} else {
							sk_load_x(xr[nb], xv[nb], s + u, hi, lo, a.swiglu, k);
						}
						mma_step_split(acc[nb], A[u], B[u], hi, lo);
					}
			}
			for (; s < s1; s++) {
				const uint4 A = va ? sk_ldw(wa + s * MMA_STEP * 2) : make_uint4(0, 0, 0, 0);
				const uint4 B = vb ? sk_ldw(wb + s * MMA_STEP * 2) : make_uint4(0, 0, 0, 0);
#pragma unroll
				for (int nb = 0; nb < NB; nb++) {
					uint32_t hi[4], lo[4];
					sk_load_x(xr[nb], xv[nb], s, hi, lo, a.swiglu, k);
					mma_step_split(acc[nb], A, B, hi, lo);
				}
			}
		}
		if (KS > 1) {
#pragma unroll
			for (int nb = 0; nb < NB; nb++)
				for (int q = 0; q < 4; q++)
					part[KS > 1 ? warp : 0][nb][q][lane] = acc[nb][q];
			__syncthreads();
			if (slice == 0)
#pragma unroll
				for (int nb = 0; nb < NB; nb++)
					for (int q = 0; q < 4; q++) {
						float sum = part[KS > 1 ? warp : 0][nb][q][lane];
						for (int p = 1; p < KS; p++)
							sum = __fadd_rn(sum, part[KS > 1 ? warp + p : 0][nb][q][lane]);
						acc[nb][q] = sum;
					}
			__syncthreads();
		}
		if (live && slice == 0)
#pragma unroll
			for (int nb = 0; nb < NB; nb++)
				for (int q = 0; q < 4; q++) {
					const uint64_t r = q >= 2 ? rb : ra, t = tg * 8 * NB + nb * 8 + 2 * c + (q & 1);
					if (r < n && t < a.m)
						y[t * ldy + r] = EP ? ck_epilogue_apply(acc[nb][q], ep, a.ep_div) : acc[nb][q];
				}
	}
}

/* Matrices of few tiles and long rows (the hyper-connection mixers' 10240-long inputs), where
 * even 32 slices in one block leave most multiprocessors idle: a tile's KS = 8 x CL slices run
 * in a cluster of CL blocks of 8 warps, one slice a warp, so its rows stream through CL
 * multiprocessors. The slices' sums meet in the cluster's shared memory and the first block
 * adds them in slice order, as k_skinny adds its warps' (and the tiled kernel its slices'). */
static __global__ void __launch_bounds__(SK_WARPS * 32) k_skinny_wide(struct skinny_args a)
{
	__shared__ float part[SK_WARPS][4][32];
	cg::cluster_group cl = cg::this_cluster();
	const unsigned rank = cl.block_rank(), ncl = cl.num_blocks();
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
	const uint64_t ks = (uint64_t)ncl * SK_WARPS, slice = (uint64_t)rank * SK_WARPS + (uint64_t)warp;
	const uint64_t k = a.k, nsteps = k / MMA_STEP, s0 = nsteps * slice / ks, s1 = nsteps * (slice + 1) / ks;
	const struct sk_mat mt = sk_find(a, blockIdx.x / ncl);
	const uint64_t ra = mt.r0 + g, rb = mt.r0 + g + 8;
	const bool va = mt.live && ra < mt.n, vb = mt.live && rb < mt.n;
	const uint8_t *wa = mt.w + (va ? ra : 0) * k * 2 + c * 16, *wb = mt.w + (vb ? rb : 0) * k * 2 + c * 16;
	const uint64_t ngroups = (a.m + 7) / 8;

	ck_grid_enter();
	for (uint64_t tg = blockIdx.y; tg < ngroups; tg += gridDim.y) {
		const uint64_t tok = tg * 8 + g;
		const bool xv[1] = { tok < a.m };
		const float *const xr[1] = { a.x + (xv[0] ? tok : 0) * (a.swiglu ? 2 * k : k) + c * 8 };
		float acc[1][4] = { { 0.0f, 0.0f, 0.0f, 0.0f } };

		if (mt.live)
			sk_slice<1, true>(acc, wa, wb, va, vb, xr, xv, s0, s1, a.swiglu, k);
#pragma unroll
		for (int q = 0; q < 4; q++)
			part[warp][q][lane] = acc[0][q];
		cl.sync();
		if (rank == 0 && warp < 4) { /* warp q adds fragment element q of every lane */
			const int q = warp;
			float sum = part[0][q][lane];
			for (unsigned r = 0; r < ncl; r++) {
				const float *src = cl.map_shared_rank(&part[0][0][0], r);
				float v[SK_WARPS];
#pragma unroll
				for (int w = 0; w < SK_WARPS; w++)
					v[w] = src[(w * 4 + q) * 32 + lane];
#pragma unroll
				for (int w = 0; w < SK_WARPS; w++)
					if (r || w)
						sum = __fadd_rn(sum, v[w]);
			}
			sk_store(a, mt, tg * 8, q, g, c, sum);
		}
		cl.sync(); /* every block's part read before it is written again or the block ends */
	}
}

/* Slices of k per 16-row tile, from n and k alone: enough tiles x slices to keep every
 * multiprocessor streaming (~4k warps, few round trips each), each slice at least SK_STEPS
 * steps, at most 32 in one block. Where 32 are not enough (few tiles of long rows: the rule
 * ran out of slices), one batch of SK_STEPS steps a slice, 8 slices a block, up to
 * SK_MAX_CLUSTER blocks a tile (k_skinny_wide). */
int lin_mma_slices(uint64_t n, uint64_t k)
{
	const uint64_t tiles = (n + 15) / 16, nsteps = k / MMA_STEP;
	int ks = 1;

	while (ks < SK_MAX_KS && tiles * (uint64_t)ks < 4096 && nsteps >= (uint64_t)(2 * ks * SK_STEPS))
		ks *= 2;
	if (ks == SK_MAX_KS) {
		const uint64_t cl = (nsteps + SK_WARPS * SK_STEPS - 1) / (SK_WARPS * SK_STEPS);
		ks = SK_WARPS * (int)(cl < SK_MAX_CLUSTER ? cl : SK_MAX_CLUSTER);
	}
	return ks;
}

bool lin_mma_ok(const struct lin_mat *w, const float *x)
{
	if (w->dtype != CK_BF16 || w->ids || w->k % MMA_STEP || (uint64_t)(uintptr_t)x % 16)
		return false;
	if (w->nmulti) {
		for (uint32_t j = 0; j < w->nmulti; j++)
			if ((uint64_t)(uintptr_t)w->mdata[j] % 16)
				return false;
		return true;
	}
	return (uint64_t)(uintptr_t)w->data % 16 == 0;
}

template <int NB, bool EP, int XM = SK_X_REGS>
static void launch_skinny_nb(int ks, dim3 grid, const struct skinny_args *a, cudaStream_t st)
{
	switch (ks) {
	case 1:
		ck_launch(k_skinny<NB, 1, EP, XM>, grid, SK_WARPS * 32, 0, st, *a);
		break;
	case 2:
		ck_launch(k_skinny<NB, 2, EP, XM>, grid, SK_WARPS * 32, 0, st, *a);
		break;
	case 4:
		ck_launch(k_skinny<NB, 4, EP, XM>, grid, SK_WARPS * 32, 0, st, *a);
		break;
	case 8:
		ck_launch(k_skinny<NB, 8, EP, XM>, grid, SK_WARPS * 32, 0, st, *a);
		break;
	default: /* 16: more slices than a block of 8 warps: NB 1 only (launch_skinny); not halved
		  * (a block of 16 warps runs one an SM anyway) */
		ck_launch(k_skinny<1, 16, EP, XM == SK_X_HALF ? SK_X_REGS : XM>, grid, 16 * 32, 0, st, *a);
		break;
	}
}

template <bool EP>
static void launch_skinny_ep(int nb, int ks, dim3 grid, const struct skinny_args *a, cudaStream_t st)
{
	if (nb == 1 && a->m == 1 && !a->swiglu)
		launch_skinny_nb<1, EP, SK_X_ONE>(ks, grid, a, st);
	else if (nb == 1)
		launch_skinny_nb<1, EP, SK_X_HALF>(ks, grid, a, st);
	else if (nb == 2)
		launch_skinny_nb<2, EP>(ks, grid, a, st);
	else
		launch_skinny_nb<4, EP>(ks, grid, a, st);
}

static int launch_skinny(const struct skinny_args *a, int ks, cudaStream_t st)
{
	/* Tokens per pass: a speed choice only (an element's chain does not depend on it). */
	const int nb = ks > SK_WARPS || a->m <= 8 ? 1 : a->m <= 16 ? 2 : 4;
	const bool wide = ks > 16;
	const uint64_t bw = wide ? SK_WARPS : SK_BW(ks), tiles = a->tile_end[a->nmat - 1];
	const uint64_t gx = (tiles * (uint64_t)ks + bw - 1) / bw;
	const uint64_t ngroups = (a->m + 8 * (uint64_t)nb - 1) / (8 * (uint64_t)nb), want = (4 * 132 + gx - 1) / gx;
	uint64_t gy = ngroups < want ? ngroups : want;

	gy = gy < 1 ? 1 : gy > 65535 ? 65535 : gy;
	const dim3 grid((unsigned)gx, (unsigned)gy, 1);
	bool ep = false;

	for (uint32_t j = 0; j < a->nmat; j++)
		ep |= a->ep[j] != CK_EP_NONE;
	if (wide)
		ck_launch_cluster((unsigned)(ks / SK_WARPS), k_skinny_wide, grid, SK_WARPS * 32, 0, st, *a);
	else if (ep)
		launch_skinny_ep<true>(nb, ks, grid, a, st);
	else
		launch_skinny_ep<false>(nb, ks, grid, a, st);
	return ck_launched();
}

static int launch_tiled(const uint8_t *w, uint64_t n, uint64_t k, const float *x, uint64_t m, float *y, uint64_t ldy,
			cudaStream_t st)
{
	struct tile_args a;
	const size_t smem = tile_smem_bytes(false);

	memset(&a, 0, sizeof(a));
	a.w = w;
	a.n = n;
	a.k = k;
	a.nparts = 1;
	a.part_end[0] = n;
	a.x = x;
	a.m = m;
	a.y = y;
	a.ldy = ldy;
	a.ks = lin_mma_slices(n, k);
	const dim3 grid((unsigned)tile_row_tiles(&a), (unsigned)((m + TBN - 1) / TBN), 1);
	if (a.ks > 1) {
		cudaFuncSetAttribute(k_tile<false, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
		ck_launch(k_tile<false, true>, grid, TTHREADS, smem, st, a);
	} else {
		cudaFuncSetAttribute(k_tile<false, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
		ck_launch(k_tile<false, false>, grid, TTHREADS, smem, st, a);
	}
	return ck_launched();
}

/* The tiled kernel where it fills the GPU (the choice changes no bits, only the time). */
static bool use_tiled(uint64_t n, uint64_t m)
{
	return m >= 128 && (((n + TBM - 1) / TBM) * ((m + TBN - 1) / TBN) >= 66 || m >= 1024);
}

bool lin_mma_swiglu_ok(const struct lin_mat *w, const float *x, uint64_t m)
{
	return !w->nmulti && lin_mma_ok(w, x) && !use_tiled((w->n + 15) / 16 * 16, m);
}

/* Rows of w's 16-row tiles (each matrix of a multi set starts a tile), as lin_mma_x counts them. */
static uint64_t tile_rows(const struct lin_mat *w)
{
	uint64_t tiles = 0;

	for (uint32_t j = 0; j < (w->nmulti ? w->nmulti : 1); j++)
		tiles += ((w->nmulti ? w->mend[j] - (j ? w->mend[j - 1] : 0) : w->n) + 15) / 16;
	return tiles * 16;
}

bool lin_mma_ep_ok(const struct lin_mat *w, const float *x, uint64_t m)
{
	return lin_mma_ok(w, x) && !use_tiled(tile_rows(w), m);
}

int lin_mma(const struct lin_mat *w, const float *x, uint64_t m, float *y, uint64_t ldy, cudaStream_t st)
{
	return lin_mma_x(w, x, false, m, y, ldy, st);
}

int lin_mma_x(const struct lin_mat *w, const float *x, bool swiglu, uint64_t m, float *y, uint64_t ldy, cudaStream_t st)
{
	struct skinny_args a;
	const uint32_t nmat = w->nmulti ? w->nmulti : 1;
	uint64_t tiles = 0, rows_before = 0;
	int ks = -1, rc;

	if (!m)
		return 0;
	memset(&a, 0, sizeof(a));
	a.x = x;
	a.m = m;
	a.k = w->k;
	a.nmat = nmat;
	a.swiglu = swiglu;
	a.ep_div = w->ep_div;
	for (uint32_t j = 0; j < nmat; j++) {
		const uint64_t n = w->nmulti ? w->mend[j] - rows_before : w->n;
		const int kj = lin_mma_slices(n, w->k);
		a.w[j] = w->nmulti ? w->mdata[j] : w->data;
		a.n[j] = n;
		a.y[j] = w->nmulti ? w->my[j] : y;
		a.ldy[j] = w->nmulti ? w->mldy[j] : ldy;
		a.ep[j] = w->ep[j];
		tiles += (n + 15) / 16;
		a.tile_end[j] = tiles;
		rows_before = w->nmulti ? w->mend[j] : 0;
		if (ks >= 0 && kj != ks)
			return -(int)cudaErrorInvalidValue; /* the caller combines only matrices that agree */
		ks = kj;
	}
	if (swiglu && (nmat > 1 || use_tiled(tiles * 16, m)))
		return -(int)cudaErrorInvalidValue; /* lin_mma_swiglu_ok */
	if (use_tiled(tiles * 16, m)) {
		for (uint32_t j = 0; j < nmat; j++)
			if ((rc = launch_tiled(a.w[j], a.n[j], a.k, x, m, a.y[j], a.ldy[j], st)))
				return rc;
		return 0;
	}
	return launch_skinny(&a, ks, st);
}

/* --- some rows of a matrix: the MTP head's draft vocabulary (ck_linear_rows) ------------- */

struct rows_args {
	const float *x;
	const uint8_t *w;
	const int32_t *rows;
	uint64_t m, k, nr, ldy;
	float *y;
};

/* y[t][i] = x[t] . W[rows[i]]: k_skinny's arithmetic for each element, only the weight rows
 * of a tile come through rows[] instead of one after another. A warp owns 16 of the rows and
 * one of the KS slices of k the whole matrix has (lin_mma_slices(n, k): so the slices, and
 * each slice's chain of steps, are the ones k_skinny gives the row), streams them, applies
 * each step to 8 activation rows at a time (mma_step_split, as k_skinny), and the slices'
 * sums are added in slice order. An element is then the bits of ck_linear's, wherever its row
 * sits in the MMA tile (the tensor cores compute each element of a tile alike). */
template <int KS>
static __global__ void __launch_bounds__(SK_BW(KS) * 32) k_skinny_rows(struct rows_args a)
{
	ck_grid_enter();
	__shared__ float part[KS > 1 ? SK_BW(KS) : 1][4][32];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3, slice = warp % KS;
	const uint64_t r0 = ((uint64_t)blockIdx.x * (SK_BW(KS) / KS) + (uint64_t)(warp / KS)) * 16;
	const uint64_t nsteps = a.k / MMA_STEP, s0 = nsteps * (uint64_t)slice / KS, s1 = nsteps * (uint64_t)(slice + 1) / KS;
	const uint64_t ia = r0 + g, ib = r0 + g + 8;
	const bool va = ia < a.nr, vb = ib < a.nr;
	const uint8_t *wa = a.w + (va ? (uint64_t)a.rows[ia] : 0) * a.k * 2 + c * 16;
	const uint8_t *wb = a.w + (vb ? (uint64_t)a.rows[ib] : 0) * a.k * 2 + c * 16;

	if (KS == 1 && r0 >= a.nr)
		return;
	for (uint64_t tg = blockIdx.y; tg * 8 < a.m; tg += gridDim.y) {
		const uint64_t tok = tg * 8 + g;
		const float *xr = a.x + (tok < a.m ? tok : 0) * a.k + c * 8;
		float acc[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
		for (uint64_t s = s0; s < s1; s++) {
			const uint4 A = va ? sk_ldw(wa + s * MMA_STEP * 2) : make_uint4(0, 0, 0, 0);
			const uint4 B = vb ? sk_ldw(wb + s * MMA_STEP * 2) : make_uint4(0, 0, 0, 0);
			uint32_t hi[4], lo[4];
			sk_load_x(xr, tok < a.m, s, hi, lo);
			mma_step_split(acc, A, B, hi, lo);
		}
		if (KS > 1) {
			for (int q = 0; q < 4; q++)
				part[KS > 1 ? warp : 0][q][lane] = acc[q];
			__syncthreads();
			if (slice == 0)
				for (int q = 0; q < 4; q++) {
					float sum = part[KS > 1 ? warp : 0][q][lane];
					for (int p = 1; p < KS; p++)
						sum = __fadd_rn(sum, part[KS > 1 ? warp + p : 0][q][lane]);
					acc[q] = sum;
				}
			__syncthreads();
		}
		if (slice == 0)
			for (int q = 0; q < 4; q++) {
				const uint64_t i = q >= 2 ? ib : ia, t = tg * 8 + 2 * c + (q & 1);
				if (i < a.nr && t < a.m)
					a.y[t * a.ldy + i] = acc[q];
			}
	}
}

extern "C" bool ck_linear_rows_ok(const struct ck_linear *w, const float *x)
{
	const struct lin_mat lm = lin_mat_of(w, w->data, 0, NULL);

	return lin_mma_ok(&lm, x) && lin_mma_slices(w->n, w->k) <= 16; /* not k_skinny_wide's */
}

extern "C" int ck_linear_rows(const struct ck_linear *w, const float *x, uint64_t m, const int32_t *rows, uint64_t nr,
			      float *y, uint64_t ldy, void *stream)
{
	const cudaStream_t st = (cudaStream_t)stream;
	const struct rows_args a = { x, (const uint8_t *)w->data, rows, m, w->k, nr, ldy, y };
	const int ks = lin_mma_slices(w->n, w->k);
	const uint64_t bw = SK_BW(ks), gx = ((nr + 15) / 16 * (uint64_t)ks + bw - 1) / bw, groups = (m + 7) / 8;
	const dim3 grid((unsigned)gx, (unsigned)(groups < 65535 ? groups : 65535), 1);

	if (!ck_linear_rows_ok(w, x))
		return -(int)cudaErrorInvalidValue;
	if (!m || !nr)
		return 0;
	switch (ks) {
	case 1:
		ck_launch(k_skinny_rows<1>, grid, (unsigned)bw * 32, 0, st, a);
		break;
	case 2:
		ck_launch(k_skinny_rows<2>, grid, (unsigned)bw * 32, 0, st, a);
		break;
	case 4:
		ck_launch(k_skinny_rows<4>, grid, (unsigned)bw * 32, 0, st, a);
		break;
	case 8:
		ck_launch(k_skinny_rows<8>, grid, (unsigned)bw * 32, 0, st, a);
		break;
	default:
		ck_launch(k_skinny_rows<16>, grid, (unsigned)bw * 32, 0, st, a);
		break;
	}
	return ck_launched();
}
