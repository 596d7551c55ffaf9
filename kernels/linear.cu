/* linear.cu - y = x W^T for F32/F16/BF16 and NVFP4 (W4A4) weights: ck_linear and the launchers
 * moe.cu shares (linear-impl.h).
 *
 * Both kernels give each warp one weight row and a group of up to MT activation rows: the
 * lanes stream the row (coalesced, 16-byte loads where the alignment allows) and apply every
 * loaded piece to all MT rows, so W is read once per group (and a block's rows stay in L1/L2
 * while its y loop walks the groups). Blocks of 8 warps cover 8 weight rows; grid y spreads
 * the groups when there are too few weight rows to fill the GPU.
 *
 * Plain: lane l owns the chunks of EV = 16 / sizeof(element) consecutive elements at
 * (s * 32 + l) * EV, summed with fmaf in order, then the elements past the last full warp
 * step one by one (j = kfull + l + 32 t), then a fixed xor butterfly over the lanes. The order
 * depends only on the dtype and k (never on m, the group, the alignment or MT), so an element
 * is the same bits whatever batch it came in.
 *
 * NVFP4: the activations are quantized first (k_quant, the float operations of
 * capy_nvfp4_quantize_act one by one with _rn intrinsics, so nvcc can neither contract nor
 * approximate them), then the block dots are exact integers (dp4a on the 2*e2m1 values), the
 * int64 sum of dot * Sa * Sw and the final scaling in IEEE double, as libcore/cpu/linear.h
 * defines it: bit-identical to the CPU, in any order. A decode step's few routed-expert slots
 * take k_nvfp4_fq instead, whose blocks quantize their own row with the same arithmetic. */
#include "linear-impl.h"
#include "ck-common.cuh"

#include <cuda_fp16.h>
#include <string.h>

#define WARPS 8
#define THREADS (WARPS * 32)
#define FULL CK_FULL

/* Enough blocks for every SM several times over (132 SMs on an H200); more activation
 * groups than that loop inside the blocks. */
static dim3 grid_for(uint64_t n, uint64_t ngroups, uint64_t rows_per_block = WARPS)
{
	uint64_t gx = (n + rows_per_block - 1) / rows_per_block, want = (8 * 132 + gx - 1) / gx;
	uint64_t gy = ngroups < want ? ngroups : want;

	if (gy > 65535)
		gy = 65535;
	if (gy < 1)
		gy = 1;
	return dim3((unsigned)gx, (unsigned)gy, 1);
}

struct lin_mat lin_mat_of(const struct ck_linear *w, const void *data, uint64_t stride, const int32_t *ids)
{
	struct lin_mat m;

	memset(&m, 0, sizeof(m));
	m.dtype = w->dtype;
	m.data = (const uint8_t *)data;
	m.stride = stride;
	m.ids = ids;
	m.n = w->n;
	m.k = w->k;
	if (w->dtype == CK_NVFP4) {
		uint64_t end = 0;
		m.nparts = w->nparts ? w->nparts : 1;
		if (m.nparts > CK_MAX_PARTS)
			m.nparts = CK_MAX_PARTS;
		for (uint32_t p = 0; p < m.nparts; p++) {
			end += w->nparts ? w->part_rows[p] : w->n;
			m.part_end[p] = end;
		}
		m.codes_off = w->codes_off;
		m.scales_off = w->scales_off;
		m.globals_off = w->globals_off;
	}
	return m;
}

/* --- NVFP4: activation quantization ------------------------------------------------------ */

size_t lin_act_bytes(const struct lin_mat *w, uint64_t m)
{
	uint64_t rows = (uint64_t)w->nparts * m, nb = w->k / 16;

	return (size_t)(ck_align_up(rows * w->k, 256) + ck_align_up(rows * nb * 4, 256) + ck_align_up(rows * 4, 256) + 256);
}

struct lin_act lin_act_carve(const struct lin_mat *w, uint64_t m, void *ws)
{
	uint64_t rows = (uint64_t)w->nparts * m, nb = w->k / 16;
	uint8_t *p = (uint8_t *)ck_align_up((uint64_t)(uintptr_t)ws, 256);
	struct lin_act a;

	a.qa = (int8_t *)p;
	p += ck_align_up(rows * w->k, 256);
	a.sa = (int32_t *)p;
	p += ck_align_up(rows * nb * 4, 256);
	a.gs = (float *)p;
	a.m = m;
	a.xb = NULL;
	a.swiglu = false;
	a.sel = NULL;
	a.sel_div = 1;
	a.sel_val = 0;
	return a;
}

/* capy_f32_to_e4m3: round to nearest even, saturating to NaN (0x7f) from 480 up. */
static __device__ __forceinline__ uint32_t f32_to_e4m3(float f)
{
	uint32_t u = __float_as_uint(f), sign = (u >> 24) & 0x80, a = u & 0x7fffffff, e, keep, rest;

	if (a >= 0x43f00000)
		return sign | 0x7f;
	if (a < 0x3c800000) /* subnormal: RNE(|f| * 2^9), exact scaling */
		return sign | (uint32_t)rintf(__fmul_rn(__uint_as_float(a), 512.0f));
	e = (a >> 23) - 127 + 7;
	keep = (a >> 20) & 7;
	rest = a & 0xfffff;
	if (rest > 0x80000 || (rest == 0x80000 && (keep & 1))) {
		if (++keep == 8) {
			keep = 0;
			e++;
		}
	}
	return sign | (e << 3) | keep;
}

/* 2 * e2m1 of x by capy_e2m1_code's rule (ties to the even mantissa), as a signed integer. */
static __device__ __forceinline__ int e2m1_a(float x)
{
	float a = fabsf(x);
	int ord = (0.25f < a) + (0.75f < a) + (1.25f < a) + (1.75f < a) + (2.5f < a) + (3.5f < a) + (5.0f < a);
	int mag;

	if (a == 0.75f || a == 1.75f || a == 3.5f)
		ord++;
	mag = ord < 4 ? ord : (2 + (ord & 1)) << ((ord >> 1) - 1); /* 0 1 2 3 4 6 8 12 */
	return x < 0 ? -mag : mag;
}

/* Element j of the row to quantize: x itself, or (swiglu) silu(gate) * up of a [gate | up] row
 * of 2k values, exactly as moe.cu's k_swiglu computes it (so fusing the two changes no bits). */
static __device__ __forceinline__ float swiglu_of(float g, float u)
{
	return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, cpu_expf(-g))), u);
}

static __device__ __forceinline__ float quant_in(const float *xr, uint64_t j, uint64_t k, bool swiglu)
{
	if (!swiglu)
		return xr[j];
	return swiglu_of(xr[j], xr[k + j]);
}

/* The 16 values of block b of the row (quant_in's), in 16-byte loads where xr allows (vec). */
static __device__ __forceinline__ void quant_load16(const float *xr, uint64_t b, uint64_t k, bool swiglu, bool vec,
						    float *v)
{
	if (!vec) {
#pragma unroll
		for (int e = 0; e < 16; e++)
			v[e] = quant_in(xr, b * 16 + e, k, swiglu);
		return;
	}
	float4 g[4];
#pragma unroll
	for (int q = 0; q < 4; q++)
		g[q] = ((const float4 *)(xr + b * 16))[q];
	if (!swiglu) {
#pragma unroll
		for (int q = 0; q < 4; q++) {
			v[4 * q] = g[q].x;
			v[4 * q + 1] = g[q].y;
			v[4 * q + 2] = g[q].z;
			v[4 * q + 3] = g[q].w;
		}
		return;
	}
	float4 u[4];
#pragma unroll
	for (int q = 0; q < 4; q++)
		u[q] = ((const float4 *)(xr + k + b * 16))[q];
#pragma unroll
	for (int q = 0; q < 4; q++) {
		v[4 * q] = swiglu_of(g[q].x, u[q].x);
		v[4 * q + 1] = swiglu_of(g[q].y, u[q].y);
		v[4 * q + 2] = swiglu_of(g[q].z, u[q].z);
		v[4 * q + 3] = swiglu_of(g[q].w, u[q].w);
	}
}

/* Four values of the row from element j on (quant_in's), in one 16-byte load where xr allows. */
static __device__ __forceinline__ void quant_load4(const float *xr, uint64_t j, uint64_t k, bool swiglu, bool vec,
						   float *v)
{
	if (!vec) {
#pragma unroll
		for (int e = 0; e < 4; e++)
			v[e] = quant_in(xr, j + e, k, swiglu);
		return;
	}
	const float4 g = *(const float4 *)(xr + j);
	if (!swiglu) {
		v[0] = g.x, v[1] = g.y, v[2] = g.z, v[3] = g.w;
		return;
	}
	const float4 u = *(const float4 *)(xr + k + j);
	v[0] = swiglu_of(g.x, u.x);
	v[1] = swiglu_of(g.y, u.y);
	v[2] = swiglu_of(g.z, u.z);
	v[3] = swiglu_of(g.w, u.w);
}

#define QTHREADS 128
/* 16-blocks a thread holds in registers: rows up to 16 * QREG * QTHREADS values; one for
 * SwiGLU inputs (an expert's intermediate rows: 512 on the real shapes), whose exps would
 * spill a second */
#define QREG(swiglu) ((swiglu) ? 1 : 2)

/* A 16-block's scale from the magnitude of its largest value (bam), as
 * capy_nvfp4_quantize_act: the E4M3 code as the integer value * 2^9 (si) and the factor the
 * values are multiplied by before rounding to E2M1 (os). gs: the row's global scale, inv_gs
 * its inverse. */
struct quant_scale {
	int32_t si;
	float os;
};

static __device__ __forceinline__ struct quant_scale quant_scale_of(float bam, float gs, float inv_gs)
{
	const float sixth = (float)(1.0 / 6.0);
	struct quant_scale q;
	float s = __fmul_rn(gs, __fmul_rn(bam, sixth)), t;

	if (s > 448.0f)
		s = 448.0f;
	q.si = scale_int(f32_to_e4m3(s));
	/* e4m3_to_f32(sc) is exactly si * 2^-9 wherever the result matters (finite rows
	 * with a finite gs never give the NaN byte). */
	t = __fmul_rn(__fmul_rn((float)q.si, 0x1p-9f), inv_gs);
	q.os = t == 0 ? 0.0f : __fdiv_rn(1.0f, t);
	return q;
}

/* The codes of N values v (N 16 or 4) at element e0 of block b of row `row`. */
template <int N>
static __device__ __forceinline__ void quant_codes(const float *v, uint64_t b, unsigned e0, uint64_t row, uint64_t k,
						   const struct quant_scale &q, const struct lin_act &a)
{
	if (a.xb) { /* 2*e2m1 * Sa: at most 6 significant bits, exact in BF16 */
		uint32_t pk[N / 2];
#pragma unroll
		for (int e = 0; e < N; e += 2) {
			const float q0 = fminf(fmaxf(__fmul_rn(v[e], q.os), -6.0f), 6.0f);
			const float q1 = fminf(fmaxf(__fmul_rn(v[e + 1], q.os), -6.0f), 6.0f);
			pk[e / 2] = (__float_as_uint(__int2float_rn(e2m1_a(q0) * q.si)) >> 16) |
				    (__float_as_uint(__int2float_rn(e2m1_a(q1) * q.si)) & 0xffff0000u);
		}
		uint16_t *dst = a.xb + row * k + b * 16 + e0;
		if constexpr (N == 16) {
			((uint4 *)dst)[0] = make_uint4(pk[0], pk[1], pk[2], pk[3]);
			((uint4 *)dst)[1] = make_uint4(pk[4], pk[5], pk[6], pk[7]);
		} else {
			*(uint2 *)dst = make_uint2(pk[0], pk[1]);
		}
		return;
	}
	uint32_t word[N / 4];
#pragma unroll
	for (int w = 0; w < N / 4; w++)
		word[w] = 0;
#pragma unroll
	for (int e = 0; e < N; e++) {
		const float x = fminf(fmaxf(__fmul_rn(v[e], q.os), -6.0f), 6.0f);
		word[e / 4] |= ((uint32_t)e2m1_a(x) & 0xff) << (8 * (e % 4));
	}
	int8_t *dst = a.qa + row * k + b * 16 + e0;
	if constexpr (N == 16)
		*(uint4 *)dst = make_uint4(word[0], word[1], word[2], word[3]);
	else
		*(uint32_t *)dst = word[0];
}

/* Block b of quantization row `row`: its scale and codes from its 16 values v (gs: the row's
 * global scale, inv_gs its inverse), as capy_nvfp4_quantize_act. */
static __device__ __forceinline__ void quant_block(const float *v, uint64_t b, uint64_t row, uint64_t k, uint64_t nb,
						   float gs, float inv_gs, const struct lin_act &a)
{
	float bam = 0;

	for (int e = 0; e < 16; e++)
		bam = fmaxf(bam, fabsf(v[e]));
	const struct quant_scale q = quant_scale_of(bam, gs, inv_gs);
	quant_codes<16>(v, b, 0, row, k, q, a);
	if (!a.xb)
		a.sa[row * nb + b] = q.si;
}

/* A quarter of block b (its values 4 qq .. 4 qq + 3) by one of the block's four lanes, which
 * are neighbours in a warp: the block's largest magnitude over the four (fmaxf: exact in any
 * order), then the same scale and codes as quant_block's. Every lane of the warp calls it. */
static __device__ __forceinline__ void quant_quarter(const float *v, bool live, uint64_t b, unsigned qq, uint64_t row,
						     uint64_t k, uint64_t nb, float gs, float inv_gs,
						     const struct lin_act &a)
{
	float bam = 0;

	for (int e = 0; e < 4; e++)
		bam = fmaxf(bam, fabsf(v[e]));
	bam = fmaxf(bam, __shfl_xor_sync(FULL, bam, 1));
	bam = fmaxf(bam, __shfl_xor_sync(FULL, bam, 2));
	if (!live)
		return;
	const struct quant_scale q = quant_scale_of(bam, gs, inv_gs);
	quant_codes<4>(v, b, 4 * qq, row, k, q, a);
	if (!a.xb && qq == 0)
		a.sa[row * nb + b] = q.si;
}

/* The row's amax and Inf/NaN flag over the block's NT threads (every thread gets them). */
template <int NT>
static __device__ __forceinline__ void quant_row_amax(float *amax, int *bad)
{
	__shared__ float s_amax[NT / 32];
	__shared__ int s_bad[NT / 32];
	const unsigned tid = threadIdx.x;

	for (int off = 16; off; off >>= 1) {
		*amax = fmaxf(*amax, __shfl_xor_sync(FULL, *amax, off));
		*bad |= __shfl_xor_sync(FULL, *bad, off);
	}
	if ((tid & 31) == 0) {
		s_amax[tid / 32] = *amax;
		s_bad[tid / 32] = *bad;
	}
	__syncthreads();
	*amax = s_amax[0];
	*bad = s_bad[0];
	for (int q = 1; q < NT / 32; q++) {
		*amax = fmaxf(*amax, s_amax[q]);
		*bad |= s_bad[q];
	}
}

/* The row's global scale from its input scale `is` (0: dynamic, capy_nvfp4_weight_scale2(amax)),
 * and its inverse; thread 0 records it in *rec (NaN for a row with Inf/NaN or an unusable
 * scale). */
static __device__ __forceinline__ void quant_row_scale(float is, float amax, int bad, float *rec, float *gs,
						       float *inv_gs)
{
	if (is == 0) {
		is = __fdiv_rn(amax, 2688.0f);
		if (!(is > 0))
			is = 1.0f;
	}
	*gs = __fdiv_rn(1.0f, is);
	*inv_gs = __fdiv_rn(1.0f, *gs);
	if (threadIdx.x == 0)
		*rec = (bad || !isfinite(*gs)) ? __uint_as_float(0x7fc00000) : *gs;
}

/* One block per (row i, part p): the row's amax and Inf/NaN flag (needed for the dynamic
 * scale), then one thread per 16-block. A decode step's quantization is one short block per
 * row whose time is its memory round trips: rows up to 16 * QREG * QTHREADS values keep their
 * blocks in registers (each thread loads its own blocks, all loads issued at once), and a
 * matrix's own input scale (no expert ids) is read before the wait for the kernel before.
 * Longer rows take the loop after it; the arithmetic of both is the same. */
template <bool SWIGLU>
static __global__ void __launch_bounds__(QTHREADS)
	k_quant(struct lin_mat w, const float *x, uint64_t ldx, uint64_t xdiv, struct lin_act a)
{
	const uint64_t i = blockIdx.x, k = w.k, nb = k / 16, row = (uint64_t)blockIdx.y * a.m + i;
	const unsigned p = blockIdx.y, tid = threadIdx.x;
	const float *xr = x + (i / xdiv) * ldx;
	const float is_fixed = w.ids ? 0.0f : ((const float *)(w.data + w.globals_off))[w.nparts + p];
	float amax = 0, gs, inv_gs;
	int bad = 0;

	ck_grid_enter();
	if (a.sel && a.sel[i / a.sel_div] != a.sel_val)
		return; /* the whole block: a row of the other kind */
	constexpr int R = QREG(SWIGLU);
	if (4 * nb <= QTHREADS) {
		/* Short rows (an expert's intermediate rows, 512 values: 32 blocks): four lanes a
		 * block, so every thread works (with SwiGLU, a quarter of the exps each). */
		const uint64_t b = tid / 4;
		const unsigned qq = tid % 4;
		const bool live = b < nb, vec = ((uintptr_t)xr & 15) == 0 && (k & 3) == 0;
		const int32_t id = w.ids ? w.ids[i] : 0;
		float v[4] = { 0, 0, 0, 0 };
		if (live)
			quant_load4(xr, b * 16 + 4 * qq, k, SWIGLU, vec, v);
		if (id < 0)
			return; /* a slot whose expert is not here (expert offload: the CPU computes it) */
		const float is = w.ids ? ((const float *)(w.data + (uint64_t)id * w.stride + w.globals_off))[w.nparts + p]
				       : is_fixed;
		for (int e = 0; e < 4; e++) {
			bad |= !isfinite(v[e]);
			amax = fmaxf(amax, fabsf(v[e]));
		}
		quant_row_amax<QTHREADS>(&amax, &bad);
		quant_row_scale(is, amax, bad, &a.gs[row], &gs, &inv_gs);
		quant_quarter(v, live, b, qq, row, k, nb, gs, inv_gs, a);
		return;
	}
	if (nb <= R * QTHREADS) {
		const bool vec = ((uintptr_t)xr & 15) == 0 && (k & 3) == 0;
		const int32_t id = w.ids ? w.ids[i] : 0;
		float v[R][16];
#pragma unroll
		for (int j = 0; j < R; j++)
			if (tid + QTHREADS * j < nb)
				quant_load16(xr, tid + QTHREADS * j, k, SWIGLU, vec, v[j]);
		if (id < 0)
			return; /* a slot whose expert is not here (expert offload: the CPU computes it) */
		const float is = w.ids ? ((const float *)(w.data + (uint64_t)id * w.stride + w.globals_off))[w.nparts + p]
				       : is_fixed;
		/* fmaxf is exact and ignores NaN, so any order gives the CPU's row amax. */
#pragma unroll
		for (int j = 0; j < R; j++)
			if (tid + QTHREADS * j < nb)
				for (int e = 0; e < 16; e++) {
					bad |= !isfinite(v[j][e]);
					amax = fmaxf(amax, fabsf(v[j][e]));
				}
		quant_row_amax<QTHREADS>(&amax, &bad);
		quant_row_scale(is, amax, bad, &a.gs[row], &gs, &inv_gs);
#pragma unroll
		for (int j = 0; j < R; j++)
			if (tid + QTHREADS * j < nb)
				quant_block(v[j], tid + QTHREADS * j, row, k, nb, gs, inv_gs, a);
		return;
	}
	if (w.ids && w.ids[i] < 0)
		return; /* a slot whose expert is not here (expert offload: the CPU computes it) */
	const uint8_t *rec = w.data + (w.ids ? (uint64_t)w.ids[i] * w.stride : 0);

	for (uint64_t j = tid; j < k; j += QTHREADS) {
		float v = quant_in(xr, j, k, SWIGLU);
		bad |= !isfinite(v);
		amax = fmaxf(amax, fabsf(v));
	}
	quant_row_amax<QTHREADS>(&amax, &bad);
	quant_row_scale(((const float *)(rec + w.globals_off))[w.nparts + p], amax, bad, &a.gs[row], &gs, &inv_gs);
	for (uint64_t b = tid; b < nb; b += QTHREADS) {
		float v[16];
		for (int e = 0; e < 16; e++)
			v[e] = quant_in(xr, b * 16 + e, k, SWIGLU);
		quant_block(v, b, row, k, nb, gs, inv_gs, a);
	}
}

int lin_quantize(const struct lin_mat *w, const float *x, uint64_t ldx, uint64_t xdiv, const struct lin_act *a,
		 cudaStream_t st)
{
	if (!a->m)
		return 0;
	/* SwiGLU inputs in their own instantiation: a decode step runs this kernel's code once,
	 * so code it does not need (the exp of every value) is instruction fetches it waits for */
	if (a->swiglu)
		ck_launch(k_quant<true>, dim3((unsigned)a->m, w->nparts, 1), QTHREADS, 0, st, *w, x, ldx, xdiv, *a);
	else
		ck_launch(k_quant<false>, dim3((unsigned)a->m, w->nparts, 1), QTHREADS, 0, st, *w, x, ldx, xdiv, *a);
	return ck_launched();
}

/* --- NVFP4: the integer dot products ---------------------------------------------------- */

/* The CPU's capy_nv_finish(acc, capy_nv_factor(scale2, gs)); NaN rows give the CPU's NaN (the
 * device would give another NaN bit pattern). */
static __device__ __forceinline__ float nv_finish(long long acc, float s2, float gs)
{
	double f;

	if (isnan(gs))
		return __uint_as_float(0x7fc00000);
	f = __ddiv_rn((double)s2, (double)gs);
	return __double2float_rn(__dmul_rn(__dmul_rn(__ll2double_rn(acc), 0x1p-20), f));
}

/* One 16-block's exact integer dot: its 16 weights (2*e2m1, four words of four int8, from
 * decode8) against 16 quantized activations. */
static __device__ __forceinline__ int nv_dot16(const uint32_t *wv, uint4 av)
{
	int dot = __dp4a((int)wv[0], (int)av.x, 0);

	dot = __dp4a((int)wv[1], (int)av.y, dot);
	dot = __dp4a((int)wv[2], (int)av.z, dot);
	return __dp4a((int)wv[3], (int)av.w, dot);
}

/* VEC 2: two blocks per lane step (16-byte code loads); 1: one block (8 bytes); 0: one block
 * read byte by byte (codes not 8-byte aligned). */
/* RPW weight rows per warp, 32 / RPW lanes each (short rows: a warp per row would leave most
 * lanes one block and the warp's fixed costs for very few bytes); the integer sums are exact,
 * so how the lanes share a row changes no bits. */
template <int MT, int VEC, int RPW>
static __global__ void __launch_bounds__(THREADS) k_nvfp4(struct lin_mat w, struct lin_act a, float *y, uint64_t ldy)
{
	ck_grid_enter();
	constexpr int BPL = VEC == 2 ? 2 : 1, LPR = 32 / RPW;
	const int lane = threadIdx.x & 31, sl = lane % LPR;
	const uint64_t wr = (uint64_t)blockIdx.x * WARPS + (threadIdx.x >> 5), r0 = wr * RPW;
	const uint64_t rr = r0 + (uint64_t)(lane / LPR), r = rr < w.n ? rr : w.n - 1;
	const bool live = rr < w.n;
	const uint64_t k = w.k, nb = k / 16, m = a.m, ngroups = (m + MT - 1) / MT, units = nb / BPL;
	uint32_t p = 0;

	if (r0 >= w.n)
		return; /* a whole warp: nothing below synchronizes the block */
	while (p + 1 < w.nparts && r >= w.part_end[p])
		p++;
	for (uint64_t g = blockIdx.y; g < ngroups; g += gridDim.y) {
		const uint64_t i0 = g * MT, rowbase = (uint64_t)p * m + i0;
		if (MT == 1 && a.sel && a.sel[i0 / a.sel_div] != a.sel_val)
			continue; /* a slot of the grouped experts (moe-grouped.cu) */
		if (MT == 1 && w.ids && w.ids[i0] < 0)
			continue; /* a slot whose expert is not here (expert offload) */
		const uint8_t *rec = w.data + (w.ids ? (uint64_t)w.ids[i0] * w.stride : 0);
		const uint8_t *codes = rec + w.codes_off + r * (k / 2), *scales = rec + w.scales_off + r * nb;
		long long acc[MT];

		for (int i = 0; i < MT; i++)
			acc[i] = 0;
#pragma unroll 2
		for (uint64_t u = sl; u < units; u += LPR) {
			uint32_t cw[2 * BPL], wv[4 * BPL];
			int32_t sw[BPL];
			if (VEC == 2) {
				uint4 c = __ldg((const uint4 *)(codes + u * 16));
				cw[0] = c.x;
				cw[1] = c.y;
				cw[2 * BPL - 2] = c.z;
				cw[2 * BPL - 1] = c.w;
			} else if (VEC == 1) {
				uint2 c = __ldg((const uint2 *)(codes + u * 8));
				cw[0] = c.x;
				cw[1] = c.y;
			} else {
				const uint8_t *c = codes + u * 8;
				cw[0] = c[0] | (uint32_t)c[1] << 8 | (uint32_t)c[2] << 16 | (uint32_t)c[3] << 24;
				cw[1] = c[4] | (uint32_t)c[5] << 8 | (uint32_t)c[6] << 16 | (uint32_t)c[7] << 24;
			}
			for (int bb = 0; bb < BPL; bb++)
				sw[bb] = scale_int(scales[u * BPL + bb]);
			for (int q = 0; q < 2 * BPL; q++)
				decode8(cw[q], &wv[2 * q], &wv[2 * q + 1]);
			for (int i = 0; i < MT; i++) {
				if (i0 + i >= m)
					break;
				const int8_t *qa = a.qa + (rowbase + i) * k;
				const int32_t *sa = a.sa + (rowbase + i) * nb;
				for (int bb = 0; bb < BPL; bb++) {
					const uint64_t b = u * BPL + bb;
					const uint4 av = *(const uint4 *)(qa + b * 16);
					const int dot = nv_dot16(&wv[4 * bb], av);
					/* |dot * Sa| <= 2304 * 245760 < 2^31; the product with Sw in int64. */
					acc[i] += (long long)(dot * sa[b]) * sw[bb];
				}
			}
		}
		for (int i = 0; i < MT; i++)
			for (int off = LPR / 2; off; off >>= 1)
				acc[i] += __shfl_xor_sync(FULL, acc[i], off);
		if (sl == 0 && live) {
			const float s2 = ((const float *)(rec + w.globals_off))[p];
			for (int i = 0; i < MT; i++)
				if (i0 + i < m)
					y[(i0 + i) * ldy + r] = nv_finish(acc[i], s2, a.gs[rowbase + i]);
		}
	}
}

template <int VEC>
static void launch_nvfp4(int mt, dim3 grid, const struct lin_mat *w, const struct lin_act *a, float *y, uint64_t ldy,
			 cudaStream_t st)
{
	switch (mt) {
	case 1:
		if (w->k / 16 <= 64) { /* rows of at most 64 blocks: 4 to a warp (and y for that x) */
			grid = grid_for(w->n, a->m, 4 * WARPS);
			ck_launch(k_nvfp4<1, VEC, 4>, grid, THREADS, 0, st, *w, *a, y, ldy);
		} else {
			ck_launch(k_nvfp4<1, VEC, 1>, grid, THREADS, 0, st, *w, *a, y, ldy);
		}
		break;
	case 2:
		ck_launch(k_nvfp4<2, VEC, 1>, grid, THREADS, 0, st, *w, *a, y, ldy);
		break;
	case 4:
		ck_launch(k_nvfp4<4, VEC, 1>, grid, THREADS, 0, st, *w, *a, y, ldy);
		break;
	default:
		ck_launch(k_nvfp4<8, VEC, 1>, grid, THREADS, 0, st, *w, *a, y, ldy);
		break;
	}
}

/* Activation rows per weight load: a stack (ids) has its own weights per row. */
static int group_rows(const struct lin_mat *w, uint64_t m)
{
	if (w->ids || m <= 1)
		return 1;
	if (m == 2)
		return 2;
	return m <= 4 ? 4 : 8;
}

int lin_nvfp4(const struct lin_mat *w, const struct lin_act *a, float *y, uint64_t ldy, cudaStream_t st)
{
	const int mt = group_rows(w, a->m);
	const uint64_t codes = (uint64_t)(uintptr_t)w->data + w->codes_off, nb = w->k / 16;
	dim3 grid;

	if (!a->m)
		return 0;
	grid = grid_for(w->n, (a->m + mt - 1) / mt);
	/* Rows are k/2 bytes apart: 16-byte loads need k % 32 == 0 and an aligned base (and
	 * stride); 64 blocks per row or more keep all lanes busy with two blocks each. */
	if (codes % 16 == 0 && w->k % 32 == 0 && (!w->ids || w->stride % 16 == 0) && nb >= 64)
		launch_nvfp4<2>(mt, grid, w, a, y, ldy, st);
	else if (codes % 8 == 0 && (!w->ids || w->stride % 8 == 0))
		launch_nvfp4<1>(mt, grid, w, a, y, ldy, st);
	else
		launch_nvfp4<0>(mt, grid, w, a, y, ldy, st);
	return ck_launched();
}

/* --- NVFP4 decode experts: the quantization inside the GEMV -------------------------------- */

/* A decode step's experts are two GEMVs, each after its own quantization kernel: four kernel
 * boundaries a layer for a few microseconds of work each. Here each block takes one slot i
 * (its expert ids[i]) and WARPS * RPW weight rows of one part, and quantizes the slot's input
 * row into shared memory itself, k_quant's arithmetic in its quarter-block form (the same
 * codes, block scales and global scale: the same bits), while the loads of its weights, issued
 * first, are in flight. Every block of a slot repeats the quantization: a few KB from L2 and a
 * few hundred instructions against a launch and a round trip through global memory. */
#define FQ_UNITS 4    /* 16-byte code loads (two 16-blocks each) a lane holds */
#define FQ_KMAX 4096  /* the longest input row the shared copy holds */
#define FQ_QJ (FQ_KMAX / 4 / THREADS) /* quarter-blocks a thread quantizes */

template <int RPW, bool SWIGLU>
static __global__ void __launch_bounds__(THREADS)
	k_nvfp4_fq(struct lin_mat w, const float *x, uint64_t ldx, uint64_t xdiv, float *y, uint64_t ldy)
{
	__shared__ __align__(16) int8_t s_qa[FQ_KMAX];
	__shared__ int32_t s_sa[FQ_KMAX / 16];
	__shared__ float s_gs;
	constexpr int LPR = 32 / RPW;
	const unsigned tid = threadIdx.x, lane = tid & 31, sl = lane % LPR;
	const uint64_t i = blockIdx.y, k = w.k, nb = k / 16, units = nb / 2;
	const uint64_t rb = (uint64_t)blockIdx.x * WARPS * RPW, rr = rb + (tid >> 5) * RPW + lane / LPR;
	const uint64_t r = rr < w.n ? rr : w.n - 1;
	uint32_t p = 0;

	ck_grid_enter();
	const int32_t id = w.ids[i];
	if (id < 0)
		return; /* the whole block: a slot whose expert is not here (expert offload) */
	while (p + 1 < w.nparts && rb >= w.part_end[p])
		p++; /* the host saw to it that no block straddles two parts */
	const uint8_t *rec = w.data + (uint64_t)id * w.stride;
	const uint8_t *codes = rec + w.codes_off + r * (k / 2), *scales = rec + w.scales_off + r * nb;
	uint4 cw[FQ_UNITS];
	uint32_t sw[FQ_UNITS][2];
#pragma unroll
	for (int j = 0; j < FQ_UNITS; j++) {
		const uint64_t u = sl + (uint64_t)j * LPR;
		if (u < units) {
			cw[j] = __ldg((const uint4 *)(codes + u * 16));
			sw[j][0] = __ldg(scales + 2 * u);
			sw[j][1] = __ldg(scales + 2 * u + 1);
		}
	}

	/* The slot's input row, quantized as k_quant does it (rows of one part share it). */
	const float *xr = x + (i / xdiv) * ldx;
	const bool vec = ((uintptr_t)xr & 15) == 0 && (k & 3) == 0;
	float v[FQ_QJ][4], amax = 0, gs, inv_gs;
	int bad = 0;
#pragma unroll
	for (int j = 0; j < FQ_QJ; j++) {
		const uint64_t q = tid + (uint64_t)THREADS * j;
		v[j][0] = v[j][1] = v[j][2] = v[j][3] = 0;
		if (q / 4 < nb)
			quant_load4(xr, 4 * q, k, SWIGLU, vec, v[j]);
#pragma unroll
		for (int e = 0; e < 4; e++) {
			bad |= !isfinite(v[j][e]);
			amax = fmaxf(amax, fabsf(v[j][e]));
		}
	}
	quant_row_amax<THREADS>(&amax, &bad);
	quant_row_scale(((const float *)(rec + w.globals_off))[w.nparts + p], amax, bad, &s_gs, &gs, &inv_gs);
	struct lin_act sh; /* the shared copy as quantization row 0 */
	memset(&sh, 0, sizeof(sh));
	sh.qa = s_qa;
	sh.sa = s_sa;
#pragma unroll
	for (int j = 0; j < FQ_QJ; j++) {
		const uint64_t q = tid + (uint64_t)THREADS * j;
		if ((tid & ~31u) + (uint64_t)THREADS * j < 4 * nb) /* the warp has live lanes: all call it */
			quant_quarter(v[j], q / 4 < nb, q / 4, (unsigned)(q % 4), 0, k, nb, gs, inv_gs, sh);
	}
	__syncthreads();

	long long acc = 0;
#pragma unroll
	for (int j = 0; j < FQ_UNITS; j++) {
		const uint64_t u = sl + (uint64_t)j * LPR;
		if (u < units) {
			const uint32_t c[4] = { cw[j].x, cw[j].y, cw[j].z, cw[j].w };
			uint32_t wv[8];
#pragma unroll
			for (int q = 0; q < 4; q++)
				decode8(c[q], &wv[2 * q], &wv[2 * q + 1]);
#pragma unroll
			for (int bb = 0; bb < 2; bb++) {
				const uint64_t b = 2 * u + bb;
				const uint4 av = *(const uint4 *)(s_qa + b * 16);
				acc += (long long)(nv_dot16(&wv[4 * bb], av) * s_sa[b]) * scale_int(sw[j][bb]);
			}
		}
	}
	for (int off = LPR / 2; off; off >>= 1)
		acc += __shfl_xor_sync(FULL, acc, off);
	if (sl == 0 && rr < w.n)
		y[i * ldy + r] = nv_finish(acc, ((const float *)(rec + w.globals_off))[p], s_gs);
}

/* Weight rows a warp takes in k_nvfp4_fq (0: the fused form does not apply): as many as keep
 * a lane's code loads within FQ_UNITS, so the block count and the repeated quantizations stay
 * few while every lane's loads are issued at once. */
static int fq_rows_per_warp(const struct lin_mat *w, const float *x, uint64_t m)
{
	const uint64_t nb = w->k / 16, units = nb / 2;

	if (w->dtype != CK_NVFP4 || !w->ids || !m || m > 65535 || w->k % 32 || w->k > FQ_KMAX ||
	    ((uintptr_t)w->data + w->codes_off) % 16 || w->stride % 16 || (uintptr_t)x % 16)
		return 0;
	for (int rpw = 8; rpw >= 1; rpw /= 2) {
		bool fits = units <= (uint64_t)FQ_UNITS * (32 / rpw);
		for (uint32_t p = 0; fits && p + 1 < w->nparts; p++)
			fits = w->part_end[p] % ((uint64_t)WARPS * rpw) == 0;
		if (fits)
			return rpw;
	}
	return 0;
}

/* Each block repeats its slot's quantization: worth a launch for a batch-1 step's few slots
 * (H200, Flash-Next 16L: 1280 + 400 blocks, the step -1.5 %), not for many (batch 8, 80
 * slots: 10240 + 3200 blocks, the step +10 %). */
#define FQ_MAX_BLOCKS 2048

bool lin_nvfp4_fq_ok(const struct lin_mat *w, const float *x, uint64_t m)
{
	const uint64_t rows = (uint64_t)WARPS * (uint64_t)fq_rows_per_warp(w, x, m);

	return rows && (w->n + rows - 1) / rows * m <= FQ_MAX_BLOCKS;
}

template <bool SWIGLU>
static void launch_fq(int rpw, dim3 grid, const struct lin_mat *w, const float *x, uint64_t ldx, uint64_t xdiv,
		      float *y, uint64_t ldy, cudaStream_t st)
{
	switch (rpw) {
	case 8:
		ck_launch(k_nvfp4_fq<8, SWIGLU>, grid, THREADS, 0, st, *w, x, ldx, xdiv, y, ldy);
		break;
	case 4:
		ck_launch(k_nvfp4_fq<4, SWIGLU>, grid, THREADS, 0, st, *w, x, ldx, xdiv, y, ldy);
		break;
	case 2:
		ck_launch(k_nvfp4_fq<2, SWIGLU>, grid, THREADS, 0, st, *w, x, ldx, xdiv, y, ldy);
		break;
	default:
		ck_launch(k_nvfp4_fq<1, SWIGLU>, grid, THREADS, 0, st, *w, x, ldx, xdiv, y, ldy);
		break;
	}
}

int lin_nvfp4_fq(const struct lin_mat *w, const float *x, uint64_t ldx, uint64_t xdiv, bool swiglu, uint64_t m,
		 float *y, uint64_t ldy, cudaStream_t st)
{
	const int rpw = fq_rows_per_warp(w, x, m);
	const uint64_t rows = (uint64_t)WARPS * (uint64_t)rpw;

	if (!rpw)
		return (int)cudaErrorInvalidValue;
	const dim3 grid((unsigned)((w->n + rows - 1) / rows), (unsigned)m, 1);
	if (swiglu)
		launch_fq<true>(rpw, grid, w, x, ldx, xdiv, y, ldy, st);
	else
		launch_fq<false>(rpw, grid, w, x, ldx, xdiv, y, ldy, st);
	return ck_launched();
}

/* --- plain weights ----------------------------------------------------------------------- */

template <int DT>
static __device__ __forceinline__ float widen1(const uint8_t *row, uint64_t j)
{
	if (DT == CK_F32)
		return ((const float *)row)[j];
	uint16_t h = ((const uint16_t *)row)[j];
	if (DT == CK_F16)
		return __half2float(__ushort_as_half(h));
	return __uint_as_float((uint32_t)h << 16);
}

/* The EV = 16 / element-size weights of one chunk, widened exactly. */
template <int DT, bool VL>
static __device__ __forceinline__ void load_w(const uint8_t *row, uint64_t j0, float *wf)
{
	constexpr int EV = DT == CK_F32 ? 4 : 8;

	if (VL) {
		const uint4 c = __ldg((const uint4 *)(row + j0 * (DT == CK_F32 ? 4 : 2)));
		const uint32_t q[4] = { c.x, c.y, c.z, c.w };
		for (int e = 0; e < 4; e++) {
			if (DT == CK_F32) {
				wf[e] = __uint_as_float(q[e]);
			} else if (DT == CK_F16) {
				wf[2 * e] = __half2float(__ushort_as_half((unsigned short)(q[e] & 0xffff)));
				wf[2 * e + 1] = __half2float(__ushort_as_half((unsigned short)(q[e] >> 16)));
			} else {
				wf[2 * e] = __uint_as_float(q[e] << 16);
				wf[2 * e + 1] = __uint_as_float(q[e] & 0xffff0000u);
			}
		}
	} else {
		for (int e = 0; e < EV; e++)
			wf[e] = widen1<DT>(row, j0 + e);
	}
}

/* VL: weights and activations are 16-byte aligned for every chunk (vector loads); the
 * arithmetic is the same either way. */
/* KS warps share a row, each over a fixed contiguous share of its 16-byte steps (the last
 * also takes the tail), their sums added in warp order: for matrices too short to give every
 * multiprocessor work with a warp per row (KS depends on n and k only, never on m, so the
 * order of each element's sum is still the batch's business alone). */
template <int DT, int MT, bool VL, int KS>
static __global__ void __launch_bounds__(THREADS)
	k_plain(struct lin_mat w, const float *x, uint64_t xdiv, uint64_t m, float *y, uint64_t ldy)
{
	ck_grid_enter();
	constexpr int EV = DT == CK_F32 ? 4 : 8;
	constexpr uint64_t ES = DT == CK_F32 ? 4 : 2;
	__shared__ float part[KS > 1 ? WARPS : 1][MT];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, slice = warp % KS;
	const uint64_t r = (uint64_t)blockIdx.x * (WARPS / KS) + (uint64_t)(warp / KS);
	const uint64_t k = w.k, nsteps = k / (32 * EV), kfull = nsteps * 32 * EV, ngroups = (m + MT - 1) / MT;
	const uint64_t s0 = nsteps * (uint64_t)slice / KS, s1 = nsteps * (uint64_t)(slice + 1) / KS;
	const bool live = r < w.n;
	const uint8_t *mat = w.data;
	uint64_t rr = r;

	if (KS == 1 && !live)
		return;
	/* Several matrices in one launch: the one row r belongs to, its row there, its output
	 * (selected with constant indices, so the arrays stay in the parameter space). */
	if (w.nmulti) {
		uint64_t start = 0;
		bool found = false;
#pragma unroll
		for (int j = 0; j < LIN_MULTI; j++) {
			if (j >= (int)w.nmulti || found)
				continue;
			if (r < w.mend[j]) {
				mat = w.mdata[j];
				rr = r - start;
				y = w.my[j];
				ldy = w.mldy[j];
				found = true;
			} else {
				start = w.mend[j];
			}
		}
	}
	for (uint64_t g = blockIdx.y; g < ngroups; g += gridDim.y) {
		const uint64_t i0 = g * MT;
		float acc[MT];

		for (int i = 0; i < MT; i++)
			acc[i] = 0.0f;
		if (live) {
			const uint8_t *rec = mat + (w.ids ? (uint64_t)w.ids[i0] * w.stride : 0), *row = rec + rr * k * ES;
			const float *xr[MT];
			for (int i = 0; i < MT; i++)
				xr[i] = x + ((i0 + i < m ? i0 + i : i0) / xdiv) * k;
#pragma unroll 2
			for (uint64_t s = s0; s < s1; s++) {
				const uint64_t j0 = (s * 32 + lane) * EV;
				float wf[EV];
				load_w<DT, VL>(row, j0, wf);
				for (int i = 0; i < MT; i++) {
					if (i0 + i >= m)
						break;
					float xv[EV];
					if (VL) {
						for (int q = 0; q < EV / 4; q++) {
							const float4 f = *(const float4 *)(xr[i] + j0 + 4 * q);
							xv[4 * q] = f.x;
							xv[4 * q + 1] = f.y;
							xv[4 * q + 2] = f.z;
							xv[4 * q + 3] = f.w;
						}
					} else {
						for (int e = 0; e < EV; e++)
							xv[e] = xr[i][j0 + e];
					}
					for (int e = 0; e < EV; e++)
						acc[i] = __fmaf_rn(xv[e], wf[e], acc[i]);
				}
			}
			if (slice == KS - 1)
				for (uint64_t j = kfull + lane; j < k; j += 32) {
					const float wj = widen1<DT>(row, j);
					for (int i = 0; i < MT; i++) {
						if (i0 + i >= m)
							break;
						acc[i] = __fmaf_rn(xr[i][j], wj, acc[i]);
					}
				}
			for (int i = 0; i < MT; i++)
				for (int off = 16; off; off >>= 1)
					acc[i] = __fadd_rn(acc[i], __shfl_xor_sync(FULL, acc[i], off));
		}
		if (KS > 1) {
			if (lane == 0)
				for (int i = 0; i < MT; i++)
					part[warp][i] = acc[i];
			__syncthreads();
			if (live && slice == 0 && lane == 0)
				for (int i = 0; i < MT; i++) {
					float sum = part[warp][i];
					for (int q = 1; q < KS; q++)
						sum = __fadd_rn(sum, part[warp + q][i]);
					acc[i] = sum;
				}
			__syncthreads();
		}
		if (live && slice == 0 && lane == 0)
			for (int i = 0; i < MT; i++)
				if (i0 + i < m)
					y[(i0 + i) * ldy + rr] = acc[i];
	}
}

/* Warps per row: enough rows x slices to fill the GPU (~4k warps), each slice at least two
 * 16-byte steps. From the matrix's n and k alone. */
int lin_slices(uint64_t n, uint64_t k, uint64_t es)
{
	const uint64_t nsteps = k * es / (32 * 16);
	int ks = 1;

	while (ks < 8 && n * (uint64_t)ks < 4096 && nsteps / (uint64_t)(2 * ks) >= 2)
		ks *= 2;
	return ks;
}

template <int DT, bool VL, int KS>
static void launch_plain_ks(int mt, dim3 grid, const struct lin_mat *w, const float *x, uint64_t xdiv, uint64_t m,
			    float *y, uint64_t ldy, cudaStream_t st)
{
	switch (mt) {
	case 1:
		ck_launch(k_plain<DT, 1, VL, KS>, grid, THREADS, 0, st, *w, x, xdiv, m, y, ldy);
		break;
	case 2:
		ck_launch(k_plain<DT, 2, VL, KS>, grid, THREADS, 0, st, *w, x, xdiv, m, y, ldy);
		break;
	case 4:
		ck_launch(k_plain<DT, 4, VL, KS>, grid, THREADS, 0, st, *w, x, xdiv, m, y, ldy);
		break;
	default:
		ck_launch(k_plain<DT, 8, VL, KS>, grid, THREADS, 0, st, *w, x, xdiv, m, y, ldy);
		break;
	}
}

template <int DT, bool VL>
static void launch_plain_mt(int ks, int mt, dim3 grid, const struct lin_mat *w, const float *x, uint64_t xdiv,
			    uint64_t m, float *y, uint64_t ldy, cudaStream_t st)
{
	switch (ks) {
	case 1:
		launch_plain_ks<DT, VL, 1>(mt, grid, w, x, xdiv, m, y, ldy, st);
		break;
	case 2:
		launch_plain_ks<DT, VL, 2>(mt, grid, w, x, xdiv, m, y, ldy, st);
		break;
	case 4:
		launch_plain_ks<DT, VL, 4>(mt, grid, w, x, xdiv, m, y, ldy, st);
		break;
	default:
		launch_plain_ks<DT, VL, 8>(mt, grid, w, x, xdiv, m, y, ldy, st);
		break;
	}
}

template <int DT>
static void launch_plain(bool vl, int ks, int mt, dim3 grid, const struct lin_mat *w, const float *x, uint64_t xdiv,
			 uint64_t m, float *y, uint64_t ldy, cudaStream_t st)
{
	if (vl)
		launch_plain_mt<DT, true>(ks, mt, grid, w, x, xdiv, m, y, ldy, st);
	else
		launch_plain_mt<DT, false>(ks, mt, grid, w, x, xdiv, m, y, ldy, st);
}

int lin_plain(const struct lin_mat *w, const float *x, uint64_t xdiv, uint64_t m, float *y, uint64_t ldy,
	      cudaStream_t st)
{
	const int mt = group_rows(w, m);
	const uint64_t es = w->dtype == CK_F32 ? 4 : 2;
	/* Every chunk starts at a multiple of 16 bytes: W's base, row length and stride, and x's
	 * base and row length (k floats). */
	bool vl = (uint64_t)(uintptr_t)w->data % 16 == 0 && (w->k * es) % 16 == 0 &&
		  (!w->ids || w->stride % 16 == 0) && (uint64_t)(uintptr_t)x % 16 == 0 && w->k % 4 == 0;
	dim3 grid;

	if (!m)
		return 0;
	if (xdiv == 1 && lin_mma_ok(w, x))
		return lin_mma(w, x, m, y, ldy, st);
	for (uint32_t j = 0; j < w->nmulti; j++)
		vl = vl && (uint64_t)(uintptr_t)w->mdata[j] % 16 == 0;
	/* Each matrix of a combined launch gets the slices it would get alone (its own n), so
	 * its bits are the same: combining is only done for matrices that agree on it. */
	const int ks = w->nmulti ? w->ks : lin_slices(w->n, w->k, es);
	grid = grid_for(w->n * (uint64_t)ks, (m + mt - 1) / mt);
	switch (w->dtype) {
	case CK_F32:
		launch_plain<CK_F32>(vl, ks, mt, grid, w, x, xdiv, m, y, ldy, st);
		break;
	case CK_F16:
		launch_plain<CK_F16>(vl, ks, mt, grid, w, x, xdiv, m, y, ldy, st);
		break;
	case CK_BF16:
		launch_plain<CK_BF16>(vl, ks, mt, grid, w, x, xdiv, m, y, ldy, st);
		break;
	default:
		return -(int)cudaErrorInvalidValue;
	}
	return ck_launched();
}

/* --- entry points -------------------------------------------------------------------------- */

extern "C" size_t ck_linear_ws_bytes(const struct ck_linear *w, uint64_t m)
{
	struct lin_mat lm;

	if (w->dtype != CK_NVFP4)
		return 0;
	lm = lin_mat_of(w, w->data, 0, NULL);
	return lin_act_bytes(&lm, m);
}

/* Matrices that may share a launch agree on this: the kernel (tensor cores or not) and its
 * slices of k, so each element keeps the order it has alone. */
static int multi_key(const struct ck_linear *w, const float *x)
{
	const struct lin_mat lm = lin_mat_of(w, w->data, 0, NULL);

	if (lin_mma_ok(&lm, x))
		return 16 + lin_mma_slices(w->n, w->k);
	return lin_slices(w->n, w->k, w->dtype == CK_F32 ? 4 : 2);
}

extern "C" int ck_linear_multi(const struct ck_linear *const *w, int nw, const float *x, uint64_t m, float *const *y,
			       void *ws, void *stream)
{
	bool done[LIN_MULTI] = { false };
	int rc;

	if (nw < 2 || nw > LIN_MULTI) {
		for (int j = 0; j < nw; j++)
			if ((rc = ck_linear(w[j], x, m, y[j], ws, stream)))
				return rc;
		return 0;
	}
	if (!m)
		return 0;
	/* One launch per set of plain matrices that agree on dtype, k and warps per row (so each
	 * element's order is the one it has alone); NVFP4 matrices on their own. */
	for (int j = 0; j < nw; j++) {
		if (done[j])
			continue;
		const uint64_t es = w[j]->dtype == CK_F32 ? 4 : 2;
		if (w[j]->dtype == CK_NVFP4) {
			done[j] = true;
			if ((rc = ck_linear(w[j], x, m, y[j], ws, stream)))
				return rc;
			continue;
		}
		const int key = multi_key(w[j], x);
		struct lin_mat lm = lin_mat_of(w[j], w[j]->data, 0, NULL);
		lm.ks = lin_slices(w[j]->n, w[j]->k, es);
		lm.n = 0;
		for (int q = j; q < nw; q++) {
			if (done[q] || w[q]->dtype != w[j]->dtype || w[q]->k != w[j]->k || multi_key(w[q], x) != key)
				continue;
			done[q] = true;
			lm.mdata[lm.nmulti] = (const uint8_t *)w[q]->data;
			lm.n += w[q]->n;
			lm.mend[lm.nmulti] = lm.n;
			lm.my[lm.nmulti] = y[q];
			lm.mldy[lm.nmulti++] = w[q]->n;
		}
		if ((rc = lin_plain(&lm, x, 1, m, y[j], w[j]->n, (cudaStream_t)stream)))
			return rc;
	}
	return 0;
}

/* The nw matrices as one combined lin_mat (outputs y[j]), if they may share a launch. */
static bool multi_set(const struct ck_linear *const *w, int nw, const float *x, float *const *y, struct lin_mat *lm)
{
	if (nw < 1 || nw > LIN_MULTI || w[0]->dtype == CK_NVFP4)
		return false;
	*lm = lin_mat_of(w[0], w[0]->data, 0, NULL);
	lm->ks = lin_slices(w[0]->n, w[0]->k, w[0]->dtype == CK_F32 ? 4 : 2);
	lm->n = 0;
	for (int q = 0; q < nw; q++) {
		if (w[q]->dtype != w[0]->dtype || w[q]->k != w[0]->k || multi_key(w[q], x) != multi_key(w[0], x))
			return false;
		lm->mdata[lm->nmulti] = (const uint8_t *)w[q]->data;
		lm->n += w[q]->n;
		lm->mend[lm->nmulti] = lm->n;
		lm->my[lm->nmulti] = y ? y[q] : NULL;
		lm->mldy[lm->nmulti++] = w[q]->n;
	}
	return true;
}

extern "C" bool ck_linear_multi_ep_ok(const struct ck_linear *const *w, int nw, const float *x, uint64_t m)
{
	struct lin_mat lm;

	return multi_set(w, nw, x, NULL, &lm) && lin_mma_ep_ok(&lm, x, m);
}

extern "C" int ck_linear_multi_ep(const struct ck_linear *const *w, int nw, const float *x, uint64_t m, float *const *y,
				  const enum ck_epilogue *ep, float d, void *stream)
{
	struct lin_mat lm;

	if (!multi_set(w, nw, x, y, &lm) || !lin_mma_ep_ok(&lm, x, m))
		return -(int)cudaErrorInvalidValue;
	if (!m)
		return 0;
	for (int q = 0; q < nw; q++)
		lm.ep[q] = (uint32_t)ep[q];
	lm.ep_div = d;
	return lin_mma(&lm, x, m, y[0], w[0]->n, (cudaStream_t)stream);
}

extern "C" bool ck_linear_swiglu_ok(const struct ck_linear *w, const float *act, uint64_t m)
{
	const struct lin_mat lm = lin_mat_of(w, w->data, 0, NULL);

	return lin_mma_swiglu_ok(&lm, act, m);
}

extern "C" int ck_linear_swiglu(const struct ck_linear *w, const float *act, uint64_t m, float *y, void *stream)
{
	const struct lin_mat lm = lin_mat_of(w, w->data, 0, NULL);

	if (!m)
		return 0;
	return lin_mma_x(&lm, act, true, m, y, w->n, (cudaStream_t)stream);
}

extern "C" int ck_linear(const struct ck_linear *w, const float *x, uint64_t m, float *y, void *ws, void *stream)
{
	cudaStream_t st = (cudaStream_t)stream;
	struct lin_mat lm = lin_mat_of(w, w->data, 0, NULL);
	struct lin_act a;
	int rc;

	if (!m)
		return 0;
	if (w->dtype != CK_NVFP4)
		return lin_plain(&lm, x, 1, m, y, w->n, st);
	a = lin_act_carve(&lm, m, ws);
	rc = lin_quantize(&lm, x, w->k, 1, &a, st);
	return rc ? rc : lin_nvfp4(&lm, &a, y, w->n, st);
}
