/* attention.cu - the attention cache and causal GQA attention of the CUDA backend, and the
 * QSA block indexer: the kernels of the "attention" section of capy-kernels.h.
 *
 * The CPU backend (libcore/backend/cpu/attention.c) is the oracle. Where its result must be
 * reproduced bit for bit (the stored cache rows, the QSA scores and so the selection) the
 * arithmetic is written with explicit round-to-nearest intrinsics (__fadd_rn, __fmul_rn,
 * __fdiv_rn, __fsqrt_rn) so nvcc cannot contract it into FMAs the CPU build (-std=c17,
 * no contraction) does not do. In attention the order differs from the CPU's (chunks,
 * lanes), but it is fixed per output element and explicit intrinsics make the two code
 * paths (split over blocks, or folded in one block) give identical bits.
 */
#include "capy-kernels.h"
#include "ck-common.cuh"

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#define KV_GROUP 32     /* INT8 KV: one scale per 32 values (as the CPU's KV_GROUP) */
#define ATT_CH 256      /* keys per chunk: fixed, so a row's result depends only on the row */
#define ATT_NT 256      /* threads per attention block (the chunk code assumes NT == CH) */
#define ATT_MAXG 16     /* query heads per KV head */
#define ATT_MAXHD 256   /* head_dim */
#define ATT_MJ(gm) ((gm) * ATT_MAXHD / ATT_NT > 0 ? (gm) * ATT_MAXHD / ATT_NT : 1) /* outputs a thread, gm heads */
#define ATT_VK 4        /* keys whose values are loaded at once */
#define ATT_SPLIT_MAX 8192 /* row-chunks of partials ws holds (see ck_attention_ws_bytes) */

static_assert(ATT_NT == ATT_CH, "the chunk prologue gives each thread one key");

__device__ __forceinline__ uint64_t kv_elem_bytes(enum ck_kv_dtype dt)
{
	return dt == CK_KV_F32 ? 4 : dt == CK_KV_BF16 ? 2 : 1;
}

/* capy_f32_to_bf16 (libcore/quant/floats.h): round to nearest even, NaN stays quiet NaN. */
__device__ __forceinline__ uint16_t f32_to_bf16(float f)
{
	uint32_t u = __float_as_uint(f);

	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

/* The page holding token pos of an item whose block table is bt. */
__device__ __forceinline__ uint8_t *page_of(const struct ck_step &st, const uint32_t *bt, uint64_t pos)
{
	return st.pages + (uint64_t)bt[pos / st.page_tokens] * st.page_bytes;
}

/* --- ck_kv_store ------------------------------------------------------------------------ */

/* Block (t, is_v): row t's K (is_v 0) or V row of nkv * hd values into its page row. */
__global__ void kv_store_kernel(struct ck_step st, struct ck_kv_layer l, const float *k, const float *v)
{
	ck_grid_enter();
	uint64_t t = blockIdx.x, n = l.nkv * l.hd;
	bool is_v = blockIdx.y != 0;
	const float *x = (is_v ? v : k) + t * n;
	uint64_t pos = (uint64_t)st.pos[t];
	const uint32_t *bt = st.block_table + st.bt_off[st.item[t]];
	uint8_t *page = page_of(st, bt, pos);
	uint64_t r = pos % st.page_tokens;
	uint8_t *row = page + (is_v ? l.v : l.k) + r * n * kv_elem_bytes(l.dtype);

	switch (l.dtype) {
	case CK_KV_F32:
		for (uint64_t i = threadIdx.x; i < n; i += blockDim.x)
			((float *)row)[i] = x[i];
		break;
	case CK_KV_BF16:
		for (uint64_t i = threadIdx.x; i < n; i += blockDim.x)
			((uint16_t *)row)[i] = f32_to_bf16(x[i]);
		break;
	case CK_KV_INT8: {
		/* One warp per group of 32: the max is exact in any order; scale and quotient are
		 * IEEE divisions and __float2int_rn rounds half to even as lrintf does. */
		float *scales = (float *)(page + (is_v ? l.v_scale : l.k_scale) + r * (n / KV_GROUP) * sizeof(float));
		unsigned lane = threadIdx.x % 32, nw = blockDim.x / 32;
		for (uint64_t g = threadIdx.x / 32; g < n / KV_GROUP; g += nw) {
			float xi = x[g * KV_GROUP + lane], amax = fabsf(xi), sc;
			for (int o = 16; o >= 1; o /= 2)
				amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
			sc = __fdiv_rn(amax, 127.0f);
			if (lane == 0)
				scales[g] = sc;
			((int8_t *)row)[g * KV_GROUP + lane] = (int8_t)(sc > 0 ? __float2int_rn(__fdiv_rn(xi, sc)) : 0);
		}
		break;
	}
	}
}

extern "C" int ck_kv_store(const struct ck_step *st, const struct ck_kv_layer *l, const float *k, const float *v,
			   void *stream)
{
	if (!st->T)
		return 0;
	ck_launch(kv_store_kernel, dim3((unsigned)st->T, 2), 256, 0, (cudaStream_t)stream, *st, *l, k, v);
	return ck_launched();
}

/* --- ck_attention ----------------------------------------------------------------------- */

struct attn_args {
	struct ck_step st;
	struct ck_kv_layer l;
	const float *q;
	uint64_t nq, G;        /* query heads; query heads per KV head */
	uint64_t hs;           /* query heads per block (a divisor of G): one at decode, so that a
	                        * KV head's work spreads over G blocks; no bits depend on it */
	const uint8_t *sel;
	uint64_t sel_stride;
	float scale;           /* 1 / sqrtf(hd), as the CPU computes it */
	float *out;
	float *ws_acc, *ws_ml; /* split: [R][nch][nq][hd] weighted values, [R][nch][nq] (max, sum) */
	uint64_t r0, nch;      /* split: the pass's first row, chunks per row in ws */
	bool skip_grouped;     /* rows with st.grouped set are attention-flash.cu's */
};

/* attention-flash.cu */
bool fa_ok(const struct ck_step *st, const struct ck_kv_layer *l, uint64_t nq);
int fa_attention(const struct ck_step *st, const struct ck_kv_layer *l, const float *q, uint64_t nq,
		 const uint8_t *sel, uint64_t sel_stride, float *out, cudaStream_t stream);

struct attn_smem {
	float q[ATT_MAXG * ATT_MAXHD];
	float p[ATT_MAXG * ATT_CH];    /* scores, then exp(score - chunk max) */
	const uint8_t *page[ATT_CH];   /* the chunk's keys' pages, NULL where not visible */
	uint32_t r[ATT_CH];            /* their rows in the page */
	float m[ATT_MAXG], l[ATT_MAXG]; /* the chunk's max and sum per query head */
	float M[ATT_MAXG], L[ATT_MAXG]; /* one block's fold so far (unsplit path) */
	float alpha[ATT_MAXG], beta[ATT_MAXG];
	int skip[ATT_MAXG];
};

/* One element of a cached K or V row: row is the token's row, sc its scales (INT8) from
 * the KV head's first group, i = kvh * hd + d. INT8 widens as the CPU's kv_next:
 * (float)q * scales[head * hd / 32 + d / 32]. */
template <int DT>
__device__ __forceinline__ float kv_elem(const uint8_t *row, const float *sc, uint64_t i, uint64_t d)
{
	if (DT == CK_KV_F32)
		return ((const float *)row)[i];
	if (DT == CK_KV_BF16)
		return __uint_as_float((uint32_t)((const uint16_t *)row)[i] << 16);
	return __fmul_rn((float)((const int8_t *)row)[i], sc[d / KV_GROUP]);
}

/* The fold of one chunk (chunk max m) into a running (M, L, A): the factors for the old
 * state and for the chunk. Shared by both paths so that they compute identical bits.
 * Returns false for a chunk without a visible key (it adds nothing). */
__device__ __forceinline__ bool fold_factors(float M, float m, float *Mn, float *alpha, float *beta)
{
	if (m == -INFINITY)
		return false;
	*Mn = fmaxf(M, m);
	*alpha = expf(__fsub_rn(M, *Mn)); /* 0 for the first chunk (M = -inf) */
	*beta = expf(__fsub_rn(m, *Mn));
	return true;
}

__device__ __forceinline__ float fold_value(float old, float alpha, float x, float beta)
{
	return __fadd_rn(__fmul_rn(old, alpha), __fmul_rn(x, beta));
}

/* The thread's (head g, dim d) outputs: output j is g * hd + d = tid + j * NT, packed as
 * g << 16 | d (0xffffffff past G * hd). */
template <int MJ>
__device__ __forceinline__ void attn_outputs(uint64_t G, uint64_t hd, uint32_t *gd)
{
#pragma unroll
	for (int j = 0; j < MJ; j++) {
		uint64_t idx = threadIdx.x + (uint64_t)j * ATT_NT;
		gd[j] = idx < G * hd ? (uint32_t)((idx / hd) << 16 | (idx % hd)) : 0xffffffffu;
	}
}

/* Chunk c of row t for KV head kvh: leaves in s.m / s.l the chunk's max and sum of
 * exp(score - max) per query head, and in acc[j] the exp-weighted sum of values for the
 * thread's outputs. Every sum has a fixed order: the dot over lanes then a butterfly, the
 * sum over lanes then a butterfly, values in key order. All threads of the block call it. */
template <int DT, int GM>
__device__ __forceinline__ void attn_chunk(const struct attn_args &a, struct attn_smem &s, uint64_t t, uint64_t kvh,
					   uint64_t pos, const uint32_t *bt, uint64_t c, const uint32_t *gd, float *acc)
{
	const uint64_t hd = a.l.hd, G = a.hs, n = a.l.nkv * hd, eb = kv_elem_bytes(a.l.dtype);
	const uint64_t kv_row = n * eb, sc_row = (n / KV_GROUP) * sizeof(float);
	const uint64_t k0 = c * ATT_CH, nk = min((uint64_t)ATT_CH, pos + 1 - k0);
	const unsigned tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

	if (tid < nk) {
		uint64_t key = k0 + tid;
		bool vis = !a.sel || a.sel[t * a.sel_stride + key];
		s.page[tid] = vis ? page_of(a.st, bt, key) : NULL;
		s.r[tid] = (uint32_t)(key % a.st.page_tokens);
	}
	__syncthreads();

	/* Scores: a warp per key, lanes over the dims, every query head of the group at once. */
	for (uint64_t kk = warp; kk < nk; kk += ATT_NT / 32) {
		const uint8_t *base = s.page[kk];
		if (!base) {
			if (lane < G)
				s.p[lane * ATT_CH + kk] = -INFINITY;
			continue;
		}
		const uint8_t *row = base + a.l.k + s.r[kk] * kv_row;
		const float *sc = (const float *)(base + a.l.k_scale + s.r[kk] * sc_row) + kvh * hd / KV_GROUP;
		float part[GM];
#pragma unroll
		for (int g = 0; g < GM; g++)
			part[g] = 0;
		/* the lane's elements of the key loaded at once, then used in the same order */
		float x[ATT_MAXHD / 32];
#pragma unroll
		for (int i = 0; i < ATT_MAXHD / 32; i++)
			x[i] = lane + 32 * (uint64_t)i < hd ? kv_elem<DT>(row, sc, kvh * hd + lane + 32 * i, lane + 32 * i) : 0.0f;
#pragma unroll
		for (int i = 0; i < ATT_MAXHD / 32; i++) {
			const uint64_t d = lane + 32 * (uint64_t)i;
			if (d >= hd)
				break;
#pragma unroll
			for (int g = 0; g < GM; g++)
				if (g < G)
					part[g] = __fmaf_rn(s.q[g * hd + d], x[i], part[g]);
		}
#pragma unroll
		for (int g = 0; g < GM; g++) {
			if (g < G) {
				float v = part[g];
				for (int o = 16; o >= 1; o /= 2)
					v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
				if (lane == 0)
					s.p[g * ATT_CH + kk] = __fmul_rn(v, a.scale);
			}
		}
	}
	__syncthreads();

	/* Per query head: the chunk's max, then exp(score - max) and their sum. */
	for (uint64_t g = warp; g < G; g += ATT_NT / 32) {
		float *p = s.p + g * ATT_CH, mx = -INFINITY, sum = 0;
		for (uint64_t kk = lane; kk < nk; kk += 32)
			mx = fmaxf(mx, p[kk]);
		for (int o = 16; o >= 1; o /= 2)
			mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
		for (uint64_t kk = lane; kk < nk; kk += 32) {
			float e = p[kk] == -INFINITY ? 0.0f : expf(__fsub_rn(p[kk], mx));
			p[kk] = e;
			sum = __fadd_rn(sum, e);
		}
		for (int o = 16; o >= 1; o /= 2)
			sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, o));
		if (lane == 0) {
			s.m[g] = mx;
			s.l[g] = sum;
		}
	}
	__syncthreads();

	/* Values in key order, weighted by exp(score - max). A thread's outputs share one dim d
	 * (ATT_NT is a multiple of hd), so each key's value is loaded once for all its heads, the
	 * values of ATT_VK keys before any is used; added in key order as before. */
	constexpr int MJ = ATT_MJ(GM);
	const bool one_d = ATT_NT % hd == 0;
	const uint32_t d0 = gd[0] & 0xffff;
#pragma unroll
	for (int j = 0; j < MJ; j++)
		acc[j] = 0;
	if (gd[0] == 0xffffffffu)
		return; /* no outputs: nothing below synchronizes */
	for (uint64_t kk0 = 0; kk0 < nk; kk0 += ATT_VK) {
		float x[ATT_VK][MJ];
#pragma unroll
		for (int u = 0; u < ATT_VK; u++) {
			const uint64_t kk = kk0 + u;
			const uint8_t *base = kk < nk ? s.page[kk] : NULL;
#pragma unroll
			for (int j = 0; j < MJ; j++)
				x[u][j] = 0;
			if (!base)
				continue;
			const uint8_t *row = base + a.l.v + s.r[kk] * kv_row;
			const float *sc = (const float *)(base + a.l.v_scale + s.r[kk] * sc_row) + kvh * hd / KV_GROUP;
			if (one_d) {
				x[u][0] = kv_elem<DT>(row, sc, kvh * hd + d0, d0);
				continue;
			}
#pragma unroll
			for (int j = 0; j < MJ; j++)
				if (gd[j] != 0xffffffffu) {
					uint32_t d = gd[j] & 0xffff;
					x[u][j] = kv_elem<DT>(row, sc, kvh * hd + d, d);
				}
		}
#pragma unroll
		for (int u = 0; u < ATT_VK; u++) {
			const uint64_t kk = kk0 + u;
			if (kk >= nk || !s.page[kk])
				continue;
#pragma unroll
			for (int j = 0; j < MJ; j++) {
				if (gd[j] != 0xffffffffu) {
					uint32_t g = gd[j] >> 16;
					acc[j] = __fmaf_rn(s.p[g * ATT_CH + kk], x[u][one_d ? 0 : j], acc[j]);
				}
			}
		}
	}
}

/* Chunk c of row t's K and V rows of KV head kvh brought into L2, a thread per key, before
 * the block waits for the kernels before it (ck_grid_enter): at decode the cache rows of
 * earlier steps were evicted by the layers' weights since, and one key at a time each read
 * waited a trip to DRAM. Reads only what the host wrote before the step (positions, block
 * tables) and addresses; a prefetch returns nothing, so it cannot see a stale row. */
__device__ __forceinline__ void attn_prefetch(const struct attn_args &a, uint64_t t, uint64_t kvh, uint64_t pos,
					      const uint32_t *bt, uint64_t c)
{
	const uint64_t eb = kv_elem_bytes(a.l.dtype), kv_row = a.l.nkv * a.l.hd * eb, span = a.l.hd * eb;
	const uint64_t k0 = c * ATT_CH, nk = min((uint64_t)ATT_CH, pos + 1 - k0);

	for (uint64_t kk = threadIdx.x; kk < nk; kk += blockDim.x) {
		const uint64_t key = k0 + kk;
		const uint8_t *base = page_of(a.st, bt, key) + (key % a.st.page_tokens) * kv_row + kvh * span;
		for (uint64_t off = 0; off < span; off += 128) {
			asm volatile("prefetch.global.L2 [%0];" ::"l"(base + a.l.k + off));
			asm volatile("prefetch.global.L2 [%0];" ::"l"(base + a.l.v + off));
		}
	}
	(void)t;
}

__device__ __forceinline__ void load_q(const struct attn_args &a, struct attn_smem &s, uint64_t t, uint64_t h0)
{
	const uint64_t hd = a.l.hd;
	const float *q = a.q + (t * a.nq + h0) * hd; /* the block's heads are consecutive */

	for (uint64_t i = threadIdx.x; i < a.hs * hd; i += blockDim.x)
		s.q[i] = q[i];
}

/* Unsplit: block (t, kvh) folds all of row t's chunks in order and writes the output. */
template <int DT, int GM>
__global__ void __launch_bounds__(ATT_NT) attn_unsplit_kernel(struct attn_args a)
{
	__shared__ struct attn_smem s;
	const uint64_t nb = a.nq / a.hs, t = blockIdx.x / nb, h0 = blockIdx.x % nb * a.hs, kvh = h0 / a.G, hd = a.l.hd;
	const uint64_t pos = (uint64_t)a.st.pos[t];
	const uint32_t *bt = a.st.block_table + a.st.bt_off[a.st.item[t]];
	uint32_t gd[ATT_MJ(GM)];
	float acc[ATT_MJ(GM)], A[ATT_MJ(GM)];

	if (a.skip_grouped && a.st.grouped[t])
		return; /* uniform over the block */
	attn_prefetch(a, t, kvh, pos, bt, 0); /* the first chunk: the others pass while it runs */
	ck_grid_enter();
	attn_outputs<ATT_MJ(GM)>(a.hs, hd, gd);
	load_q(a, s, t, h0);
	if (threadIdx.x < a.hs) {
		s.M[threadIdx.x] = -INFINITY;
		s.L[threadIdx.x] = 0;
	}
#pragma unroll
	for (int j = 0; j < ATT_MJ(GM); j++)
		A[j] = 0;
	/* attn_chunk's first __syncthreads orders the stores above before their use. */
	for (uint64_t c = 0; c <= pos / ATT_CH; c++) {
		attn_chunk<DT, GM>(a, s, t, kvh, pos, bt, c, gd, acc);
		if (threadIdx.x < a.hs) {
			unsigned g = threadIdx.x;
			float Mn, al, be;
			s.skip[g] = !fold_factors(s.M[g], s.m[g], &Mn, &al, &be);
			if (!s.skip[g]) {
				s.L[g] = fold_value(s.L[g], al, s.l[g], be);
				s.M[g] = Mn;
				s.alpha[g] = al;
				s.beta[g] = be;
			}
		}
		__syncthreads();
#pragma unroll
		for (int j = 0; j < ATT_MJ(GM); j++) {
			if (gd[j] != 0xffffffffu) {
				uint32_t g = gd[j] >> 16;
				if (!s.skip[g])
					A[j] = fold_value(A[j], s.alpha[g], acc[j], s.beta[g]);
			}
		}
		__syncthreads(); /* the next chunk overwrites s */
	}
#pragma unroll
	for (int j = 0; j < ATT_MJ(GM); j++) {
		if (gd[j] != 0xffffffffu) {
			uint32_t g = gd[j] >> 16, d = gd[j] & 0xffff;
			float L = s.L[g];
			a.out[(t * a.nq + h0 + g) * hd + d] = L > 0 ? __fdiv_rn(A[j], L) : 0.0f;
		}
	}
}

/* Split: block (rr, kvh, c) computes chunk c of row r0 + rr into ws (blocks past the row's
 * last chunk exit). */
template <int DT, int GM>
__global__ void __launch_bounds__(ATT_NT) attn_split_kernel(struct attn_args a)
{
	__shared__ struct attn_smem s;
	const uint64_t c = blockIdx.x % a.nch, rest = blockIdx.x / a.nch;
	const uint64_t nb = a.nq / a.hs, h0 = rest % nb * a.hs, kvh = h0 / a.G, rr = rest / nb, t = a.r0 + rr;
	const uint64_t hd = a.l.hd;
	const uint64_t pos = (uint64_t)a.st.pos[t];
	const uint32_t *bt = a.st.block_table + a.st.bt_off[a.st.item[t]];
	uint32_t gd[ATT_MJ(GM)];
	float acc[ATT_MJ(GM)];

	if (c > pos / ATT_CH || (a.skip_grouped && a.st.grouped[t]))
		return; /* uniform over the block */
	attn_prefetch(a, t, kvh, pos, bt, c);
	ck_grid_enter();
	attn_outputs<ATT_MJ(GM)>(a.hs, hd, gd);
	load_q(a, s, t, h0);
	attn_chunk<DT, GM>(a, s, t, kvh, pos, bt, c, gd, acc);
	const uint64_t slot = (rr * a.nch + c) * a.nq + h0; /* the block's first head */
#pragma unroll
	for (int j = 0; j < ATT_MJ(GM); j++) {
		if (gd[j] != 0xffffffffu) {
			uint32_t g = gd[j] >> 16, d = gd[j] & 0xffff;
			a.ws_acc[(slot + g) * hd + d] = acc[j];
		}
	}
	if (threadIdx.x < a.hs) {
		a.ws_ml[(slot + threadIdx.x) * 2] = s.m[threadIdx.x];
		a.ws_ml[(slot + threadIdx.x) * 2 + 1] = s.l[threadIdx.x];
	}
}

/* Split, second kernel: block (rr, h) folds row r0 + rr's chunks of query head h in chunk
 * order, with the same fold as the unsplit path. */
__global__ void attn_combine_kernel(struct attn_args a)
{
	ck_grid_enter();
	const uint64_t rr = blockIdx.x / a.nq, h = blockIdx.x % a.nq, t = a.r0 + rr, hd = a.l.hd;
	const uint64_t nc = (uint64_t)a.st.pos[t] / ATT_CH + 1;

	if (a.skip_grouped && a.st.grouped[t])
		return;

	for (uint64_t d = threadIdx.x; d < hd; d += blockDim.x) {
		float M = -INFINITY, L = 0, A = 0;
		for (uint64_t c = 0; c < nc; c++) {
			uint64_t slot = (rr * a.nch + c) * a.nq + h;
			float Mn, al, be;
			if (!fold_factors(M, a.ws_ml[slot * 2], &Mn, &al, &be))
				continue;
			L = fold_value(L, al, a.ws_ml[slot * 2 + 1], be);
			A = fold_value(A, al, a.ws_acc[slot * hd + d], be);
			M = Mn;
		}
		a.out[(t * a.nq + h) * hd + d] = L > 0 ? __fdiv_rn(A, L) : 0.0f;
	}
}

extern "C" size_t ck_attention_ws_bytes(uint64_t T, uint64_t nq, uint64_t hd, uint64_t max_ctx)
{
	uint64_t nch = (max_ctx + ATT_CH - 1) / ATT_CH, slots = T * nch;

	if (nch <= 1)
		return 0; /* one chunk per row: never split */
	if (slots > ATT_SPLIT_MAX)
		slots = ATT_SPLIT_MAX;
	return (size_t)(slots * nq * (hd + 2) * sizeof(float));
}

template <int DT, int GM>
static int attention_dt(struct attn_args &a, void *ws, cudaStream_t stream)
{
	const uint64_t T = a.st.T, nch = (uint64_t)a.st.max_pos / ATT_CH + 1;

	if (ws && nch > 1 && nch <= ATT_SPLIT_MAX) {
		/* The host sized ws for at least min(T * nch, ATT_SPLIT_MAX) row-chunks. */
		uint64_t R = ATT_SPLIT_MAX / nch;
		if (R > T)
			R = T;
		a.nch = nch;
		a.ws_acc = (float *)ws;
		a.ws_ml = a.ws_acc + R * nch * a.nq * a.l.hd;
		for (a.r0 = 0; a.r0 < T; a.r0 += R) {
			uint64_t rows = T - a.r0 < R ? T - a.r0 : R;
			unsigned ct = (unsigned)((a.l.hd + 31) / 32 * 32);
			ck_launch(attn_split_kernel<DT, GM>, (unsigned)(rows * (a.nq / a.hs) * nch), ATT_NT, 0, stream, a);
			int rc = ck_launched();
			if (rc)
				return rc;
			ck_launch(attn_combine_kernel, (unsigned)(rows * a.nq), ct, 0, stream, a);
			if ((rc = ck_launched()))
				return rc;
		}
		return 0;
	}
	ck_launch(attn_unsplit_kernel<DT, GM>, (unsigned)(T * (a.nq / a.hs)), ATT_NT, 0, stream, a);
	return ck_launched();
}

/* GM: the most heads a block holds, a compile-time bound, so that the loops over a block's
 * heads are no longer than its heads (they were 16 long, mostly predicated off, and the
 * decode kernel's time went to issuing them). */
template <int DT>
static int attention_hs(struct attn_args &a, void *ws, cudaStream_t stream)
{
	if (a.hs <= 1)
		return attention_dt<DT, 1>(a, ws, stream);
	if (a.hs <= 2)
		return attention_dt<DT, 2>(a, ws, stream);
	if (a.hs <= 4)
		return attention_dt<DT, 4>(a, ws, stream);
	if (a.hs <= 8)
		return attention_dt<DT, 8>(a, ws, stream);
	return attention_dt<DT, ATT_MAXG>(a, ws, stream);
}

extern "C" int ck_attention(const struct ck_step *st, const struct ck_kv_layer *l, const float *q, uint64_t nq,
			    const uint8_t *sel, uint64_t sel_stride, float *out, void *ws, void *stream)
{
	struct attn_args a = {};

	if (!st->T)
		return 0;
	if (!l->nkv || nq % l->nkv || nq / l->nkv > ATT_MAXG || !l->hd || l->hd > ATT_MAXHD)
		return -(int)cudaErrorInvalidValue;
	a.st = *st;
	a.l = *l;
	a.q = q;
	a.nq = nq;
	a.G = nq / l->nkv;
	/* Heads per block: one for a step of few rows (a KV head's work over G blocks: 1.263 ->
	 * 1.235 ms at batch 1 on the Qwen3.5-MoE shape), all G otherwise (each block then reads
	 * its keys once for G heads: at batch 8 over 2000 tokens one head a block took 5.7 ms a
	 * step against 2.45). No bits depend on it. */
	a.hs = st->T * l->nkv < 16 ? 1 : a.G;
	a.sel = sel;
	a.sel_stride = sel_stride;
	a.scale = 1.0f / sqrtf((float)l->hd);
	a.out = out;
	if (fa_ok(st, l, nq)) {
		int rc = fa_attention(st, l, q, nq, sel, sel_stride, out, (cudaStream_t)stream);
		if (rc || st->n_grouped == st->T)
			return rc;
		a.skip_grouped = true;
	}
	switch (l->dtype) {
	case CK_KV_F32:
		return attention_hs<CK_KV_F32>(a, ws, (cudaStream_t)stream);
	case CK_KV_BF16:
		return attention_hs<CK_KV_BF16>(a, ws, (cudaStream_t)stream);
	case CK_KV_INT8:
		return attention_hs<CK_KV_INT8>(a, ws, (cudaStream_t)stream);
	}
	return -(int)cudaErrorInvalidValue;
}

/* --- QSA -------------------------------------------------------------------------------- */

/* Block t: row t's raw indexer key into its page row of the idx_keys field. */
__global__ void qsa_store_keys_kernel(struct ck_step st, struct ck_kv_layer l, const float *idx, uint64_t row_stride,
				      uint64_t key_col, uint64_t idh)
{
	ck_grid_enter();
	uint64_t t = blockIdx.x, pos = (uint64_t)st.pos[t];
	const uint32_t *bt = st.block_table + st.bt_off[st.item[t]];
	float *dst = (float *)(page_of(st, bt, pos) + l.idx_keys + (pos % st.page_tokens) * idh * sizeof(float));
	const float *src = idx + t * row_stride + key_col;

	for (uint64_t i = threadIdx.x; i < idh; i += blockDim.x)
		dst[i] = src[i];
}

extern "C" int ck_qsa_store_keys(const struct ck_step *st, const struct ck_kv_layer *l, const float *idx,
				 uint64_t row_stride, uint64_t key_col, uint64_t idh, void *stream)
{
	if (!st->T)
		return 0;
	ck_launch(qsa_store_keys_kernel, (unsigned)st->T, 128, 0, (cudaStream_t)stream, *st, *l, idx, row_stride, key_col, idh);
	return ck_launched();
}

/* QSA: the pooled key row of block blk (tokens [blk ratio, (blk + 1) ratio)), as qsa_block:
 * in the page of the block's first token, at row (first % page_tokens) / ratio. */
__device__ __forceinline__ float *qsa_block_row(const struct ck_step &st, const struct ck_kv_layer &l,
						const uint32_t *bt, uint64_t idh, uint64_t ratio, uint64_t blk)
{
	uint64_t first = blk * ratio;

	return (float *)(page_of(st, bt, first) + l.blocks + ((first % st.page_tokens) / ratio) * idh * sizeof(float));
}

/* Block (item i, j): the item's j-th block at or after len / ratio, if its new rows
 * completed it. Bit-identical to qsa_update_blocks up to RoPE's cosf / sinf (CUDA's are
 * within 2 ulp, not glibc's). The norm's sum of squares is one thread's, in order. */
__global__ void qsa_update_blocks_kernel(struct ck_step st, struct ck_kv_layer l, uint64_t idh, uint64_t ratio,
					 uint64_t nbmax, const float *k_norm1p, float eps, uint64_t rot,
					 const float *inv_freq)
{
	ck_grid_enter();
	__shared__ float s_r;
	uint64_t i = blockIdx.x / nbmax, j = blockIdx.x % nbmax;
	uint64_t len = (uint64_t)st.len[i], n = (uint64_t)st.n[i], b = len / ratio + j;
	const uint32_t *bt = st.block_table + st.bt_off[i];

	if ((b + 1) * ratio > len + n)
		return; /* uniform over the block */
	float *blk = qsa_block_row(st, l, bt, idh, ratio, b);
	uint64_t first = b * ratio, half = rot / 2;

	for (uint64_t x = threadIdx.x; x < idh; x += blockDim.x) {
		float sum = 0;
		for (uint64_t tt = 0; tt < ratio; tt++) {
			uint64_t tok = first + tt;
			const float *raw = (const float *)(page_of(st, bt, tok) + l.idx_keys +
							   (tok % st.page_tokens) * idh * sizeof(float));
			sum = __fadd_rn(sum, raw[x]);
		}
		blk[x] = __fdiv_rn(sum, (float)ratio);
	}
	__syncthreads();
	if (threadIdx.x == 0) { /* rmsnorm_1p with group = idh */
		float ss = 0;
		for (uint64_t x = 0; x < idh; x++)
			ss = __fadd_rn(ss, __fmul_rn(blk[x], blk[x]));
		s_r = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)idh), eps)));
	}
	__syncthreads();
	for (uint64_t x = threadIdx.x; x < idh; x += blockDim.x)
		blk[x] = __fmul_rn(__fmul_rn(blk[x], s_r), k_norm1p[x]);
	__syncthreads();
	for (uint64_t x = threadIdx.x; x < half; x += blockDim.x) { /* rope_apply at the first position */
		float ang = __fmul_rn((float)first, inv_freq[x]);
		float c = cosf(ang), s = sinf(ang), x1 = blk[x], x2 = blk[x + half];
		blk[x] = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
		blk[x + half] = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
	}
}

extern "C" int ck_qsa_update_blocks(const struct ck_step *st, const struct ck_kv_layer *l, uint64_t idh,
				    uint64_t ratio, const float *k_norm1p, float eps, uint64_t rot,
				    const float *inv_freq, void *stream)
{
	/* An item's n <= T rows complete at most (ratio - 1 + n) / ratio blocks. */
	uint64_t nbmax = (st->T + ratio - 1) / ratio + 1;

	if (!st->T || !st->n_items)
		return 0;
	ck_launch(qsa_update_blocks_kernel, (unsigned)(st->n_items * nbmax), 128, 0, (cudaStream_t)stream, 
		*st, *l, idh, ratio, nbmax, k_norm1p, eps, rot, inv_freq);
	return ck_launched();
}

#define QSA_NT 256
#define QSA_SB 32 /* key blocks per scoring block: one per lane */
#define QSA_SR 8  /* step rows per scoring block: one per warp */

/* Block scores, before the selection: ws[t][b] for every row t of the step and block b < nb
 * of its item, in the CPU's order (each head's dot in dim order, relu, summed over heads in
 * order, times 1 / sqrt(idh); no FMA). Lane b of warp w takes row t = 8 y + w and block
 * 32 x + lane. When the 8 rows belong to one item (a prompt chunk) they share their keys:
 * the 32 block rows and each head's 8 queries go through shared memory, so a key row is
 * read once per 8 rows instead of once per row; otherwise each lane reads its own. */
__global__ void __launch_bounds__(QSA_NT) qsa_scores_kernel(struct ck_step st, struct ck_kv_layer l, const float *iq,
							    uint64_t ni, uint64_t idh, uint64_t ratio, float inv,
							    float *ws, uint64_t nbs)
{
	ck_grid_enter();
	extern __shared__ float qsa_sm[]; /* kb [QSA_SB][idh + 1], qs [QSA_SR][idh] */
	float *kbs = qsa_sm, *qs = qsa_sm + QSA_SB * (idh + 1);
	const unsigned tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
	const uint64_t t0 = (uint64_t)blockIdx.y * QSA_SR, t = t0 + warp, b = (uint64_t)blockIdx.x * QSA_SB + lane;
	const uint64_t tl = t0 + QSA_SR <= st.T ? t0 + QSA_SR - 1 : st.T - 1; /* the tile's last row */
	const bool row_ok = t < st.T;
	const uint64_t pos = row_ok ? (uint64_t)st.pos[t] : 0, nb = row_ok ? (pos + 1) / ratio : 0;
	const bool mine = row_ok && b < nb;
	/* one item for the whole tile: the rows are consecutive positions of it */
	const bool shared = st.item[t0] == st.item[tl];
	const uint64_t nb_tile = ((uint64_t)st.pos[tl] + 1) / ratio;

	if ((uint64_t)blockIdx.x * QSA_SB >= (shared ? nb_tile : nbs))
		return; /* uniform: no block of this chunk exists for any row of the tile */
	const float *kp = NULL;
	if (shared) {
		const uint32_t *bt = st.block_table + st.bt_off[st.item[t0]];
		for (uint64_t e = tid; e < QSA_SB * idh; e += QSA_NT) {
			const uint64_t j = e / idh, i = e % idh, bb = (uint64_t)blockIdx.x * QSA_SB + j;
			kbs[j * (idh + 1) + i] = bb < nb_tile ? qsa_block_row(st, l, bt, idh, ratio, bb)[i] : 0.0f;
		}
		kp = kbs + lane * (idh + 1);
	} else if (mine) {
		kp = qsa_block_row(st, l, st.block_table + st.bt_off[st.item[t]], idh, ratio, b);
	}
	float sum = 0;
	for (uint64_t h = 0; h < ni; h++) {
		if (shared) {
			__syncthreads(); /* the previous head's queries are used up (and, first, the keys are in) */
			for (uint64_t e = tid; e < QSA_SR * idh; e += QSA_NT) {
				const uint64_t r = t0 + e / idh;
				qs[e] = r < st.T ? iq[r * ni * idh + h * idh + e % idh] : 0.0f;
			}
			__syncthreads();
		}
		if (!mine)
			continue;
		const float *q = shared ? qs + warp * idh : iq + t * ni * idh + h * idh;
		float d = 0;
		for (uint64_t i = 0; i < idh; i++)
			d = __fadd_rn(d, __fmul_rn(q[i], kp[i]));
		sum = __fadd_rn(sum, d > 0 ? d : 0.0f);
	}
	if (mine)
		ws[t * nbs + b] = __fmul_rn(sum, inv);
}

/* qsa_scores_kernel's scores for steps of few rows (decode, verification windows): one warp a
 * (row, block), lane h the dot of head h (in dim order, loads issued 8 ahead), then the heads'
 * relu added in order: each row's chain of 16 heads x 128 adds was one lane's, the heads now
 * run side by side. The same operations in the same order, so the same bits. ni <= 32. */
#define QSA_RW 8 /* warps a block */
#define QSA_ROWS_MAX 64 /* steps of at most this many rows take it */
__global__ void __launch_bounds__(QSA_RW * 32) qsa_scores_rows_kernel(struct ck_step st, struct ck_kv_layer l,
								      const float *iq, uint64_t ni, uint64_t idh,
								      uint64_t ratio, float inv, float *ws, uint64_t nbs)
{
	ck_grid_enter();
	const unsigned lane = threadIdx.x % 32;
	const uint64_t t = blockIdx.y, b = (uint64_t)blockIdx.x * QSA_RW + threadIdx.x / 32;
	const uint64_t nb = ((uint64_t)st.pos[t] + 1) / ratio;

	if (b >= nb)
		return; /* uniform in the warp */
	const float *kp = qsa_block_row(st, l, st.block_table + st.bt_off[st.item[t]], idh, ratio, b);
	float d = 0;
	if (lane < ni) {
		const float *q = iq + (t * ni + lane) * idh;
		uint64_t i = 0;
		for (; i + 8 <= idh; i += 8) {
			float qa[8], ka[8];
#pragma unroll
			for (int u = 0; u < 8; u++) {
				qa[u] = q[i + u];
				ka[u] = kp[i + u];
			}
#pragma unroll
			for (int u = 0; u < 8; u++)
				d = __fadd_rn(d, __fmul_rn(qa[u], ka[u]));
		}
		for (; i < idh; i++)
			d = __fadd_rn(d, __fmul_rn(q[i], kp[i]));
	}
	float sum = 0;
	for (uint64_t h = 0; h < ni; h++) {
		const float dh = __shfl_sync(0xffffffffu, d, (int)h);
		sum = __fadd_rn(sum, dh > 0 ? dh : 0.0f);
	}
	if (lane == 0)
		ws[t * nbs + b] = __fmul_rn(sum, inv);
}

/* Block t: the best K = min(topk, nb) of row t's block scores (qsa_scores_kernel) by a radix
 * select on the scores' bits (scores are >= +0, so their bits order as they do), ties at the
 * K-th value to the lower indices; then the mask. */
__global__ void __launch_bounds__(QSA_NT) qsa_select_kernel(struct ck_step st, uint64_t ratio, uint64_t topk,
							    uint8_t *sel, uint64_t sel_stride, float *ws, uint64_t nbs)
{
	ck_grid_enter();
	__shared__ uint32_t hist[256];
	__shared__ uint32_t s_prefix, s_rem, warp_eq[QSA_NT / 32];
	const uint64_t t = blockIdx.x, pos = (uint64_t)st.pos[t], nb = (pos + 1) / ratio;
	const uint64_t K = topk < nb ? topk : nb;
	const unsigned tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
	float *sc = ws + t * nbs;
	uint8_t *srow = sel + t * sel_stride;

	__syncthreads();

	if (K == nb || K == 0) {
		for (uint64_t b = tid; b < nb; b += QSA_NT)
			sc[b] = K ? -1.0f : 0.0f; /* -1 marks a selected block */
	} else {
		/* Radix select, most significant byte first: after the pass at `shift`, prefix
		 * holds the top bytes of the K-th largest key and rem how many keys with exactly
		 * that prefix are still needed. */
		uint32_t prefix = 0, mask = 0, rem = (uint32_t)K;
		for (int shift = 24; shift >= 0; shift -= 8) {
			for (unsigned i = tid; i < 256; i += QSA_NT)
				hist[i] = 0;
			__syncthreads();
			for (uint64_t b = tid; b < nb; b += QSA_NT) {
				uint32_t u = __float_as_uint(sc[b]);
				if ((u & mask) == prefix)
					atomicAdd(&hist[(u >> shift) & 255u], 1u); /* integer counts: order-free */
			}
			__syncthreads();
			if (tid == 0) {
				uint32_t cum = 0;
				for (int d = 255; d >= 0; d--) {
					if (cum + hist[d] >= rem) {
						s_prefix = prefix | (uint32_t)d << shift;
						s_rem = rem - cum;
						break;
					}
					cum += hist[d];
				}
			}
			__syncthreads();
			prefix = s_prefix;
			rem = s_rem;
			mask |= 255u << shift;
		}
		/* prefix is the K-th largest key: take every key above it and the first rem
		 * (lowest index) equal to it, counting the equal ones tile by tile in index order. */
		uint32_t taken = 0;
		for (uint64_t base = 0; base < nb; base += QSA_NT) {
			uint64_t b = base + tid;
			uint32_t u = b < nb ? __float_as_uint(sc[b]) : 0;
			bool eq = b < nb && u == prefix, gt = b < nb && u > prefix;
			uint32_t bal = __ballot_sync(0xffffffffu, eq), before = 0, total = 0;
			if (lane == 0)
				warp_eq[warp] = __popc(bal);
			__syncthreads();
			for (unsigned w = 0; w < QSA_NT / 32; w++) {
				before += w < warp ? warp_eq[w] : 0;
				total += warp_eq[w];
			}
			before += __popc(bal & ((1u << lane) - 1u));
			if (b < nb)
				sc[b] = gt || (eq && taken + before < rem) ? -1.0f : 0.0f;
			taken += total;
			__syncthreads(); /* warp_eq is rewritten by the next tile */
		}
	}
	__syncthreads();
	for (uint64_t k = tid; k <= pos; k += QSA_NT) {
		uint64_t b = k / ratio;
		srow[k] = b >= nb || sc[b] < 0 ? 1 : 0;
	}
}

extern "C" size_t ck_qsa_select_ws_bytes(uint64_t T, uint64_t max_ctx, uint64_t ratio)
{
	size_t n = (size_t)(T * (max_ctx / ratio) * sizeof(float));

	return n ? n : sizeof(float);
}

extern "C" int ck_qsa_select(const struct ck_step *st, const struct ck_kv_layer *l, const float *iq, uint64_t ni,
			     uint64_t idh, uint64_t ratio, uint64_t topk, uint8_t *sel, uint64_t sel_stride, void *ws,
			     void *stream)
{
	if (!st->T)
		return 0;
	const uint64_t nbs = ((uint64_t)st->max_pos + 1) / ratio;
	const size_t smem = (QSA_SB * (idh + 1) + QSA_SR * idh) * sizeof(float);
	int rc;

	if (nbs && st->T <= QSA_ROWS_MAX && ni <= 32) {
		ck_launch(qsa_scores_rows_kernel, dim3((unsigned)((nbs + QSA_RW - 1) / QSA_RW), (unsigned)st->T), QSA_RW * 32, 0,
			  (cudaStream_t)stream, *st, *l, iq, ni, idh, ratio, 1.0f / sqrtf((float)idh), (float *)ws, nbs);
		if ((rc = ck_launched()))
			return rc;
	} else if (nbs) {
		if (smem > 48 * 1024) /* idh > 300: no model; the default limit covers the rest */
			cudaFuncSetAttribute(qsa_scores_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
		ck_launch(qsa_scores_kernel, dim3((unsigned)((nbs + QSA_SB - 1) / QSA_SB), (unsigned)((st->T + QSA_SR - 1) / QSA_SR)),
			  QSA_NT, smem, (cudaStream_t)stream, *st, *l, iq, ni, idh, ratio, 1.0f / sqrtf((float)idh), (float *)ws,
			  nbs);
		if ((rc = ck_launched()))
			return rc;
	}
	ck_launch(qsa_select_kernel, (unsigned)st->T, QSA_NT, 0, (cudaStream_t)stream, *st, ratio, topk, sel, sel_stride,
		  (float *)ws, nbs);
	return ck_launched();
}
