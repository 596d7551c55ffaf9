/* moe.cu - the sparse MoE block on the GPU: the router (softmax, top k), the routed experts and
 * the weighted combine with the gated shared expert, as libcore/backend/cpu/moe.c computes them.
 *
 * The experts run as one pass per stage over all slots (slot s = t * k + j uses expert ids[s]):
 * quantize every slot's input (NVFP4; each expert's own input_scale, read from its record),
 * gate_up for every slot, SwiGLU, quantize, down. Each stage is linear.cu's kernel with the
 * weights of row s taken from expert ids[s]'s record, so a slot's output is exactly ck_linear's
 * function applied to that one row (bit-identical to the CPU for NVFP4). Slots that share an
 * expert re-read its weights (from L2 mostly); grouping slots by expert for prefill is left
 * for later. */
#include "linear-impl.h"
#include "ck-common.cuh"

#include <math.h>

#define FULL CK_FULL

/* --- router ------------------------------------------------------------------------------- */

#define RTHREADS 128

/* Candidate (v2, x2) beats (v1, x1): a valid one (x >= 0) beats none, a larger value beats a
 * smaller, and on equal values the lower index wins (the CPU's first maximum). */
static __device__ __forceinline__ bool beats(float v1, int x1, float v2, int x2)
{
	if (x2 < 0)
		return false;
	if (x1 < 0)
		return true;
	return v2 > v1 || (v2 == v1 && x2 < x1);
}

/* A row's chosen experts, in the order they were chosen: their weights renormalized by their
 * sum (when norm), then sorted by ascending expert id (insertion sort, as the CPU). */
static __device__ void route_finish(int32_t *id, float *w, uint64_t k, bool norm, float top)
{
	if (norm)
		for (uint64_t n = 0; n < k; n++)
			w[n] = __fdiv_rn(w[n], top);
	for (uint64_t a = 1; a < k; a++)
		for (uint64_t b = a; b > 0 && id[b - 1] > id[b]; b--) {
			int32_t ti = id[b];
			float tw = w[b];
			id[b] = id[b - 1];
			w[b] = w[b - 1];
			id[b - 1] = ti;
			w[b - 1] = tw;
		}
}

/* One block per row: max (exact in any order), exp, the sum in ascending order on one thread,
 * the divisions, then k rounds of a block argmax over the untaken experts, as route(). */
static __global__ void __launch_bounds__(RTHREADS)
	k_route(const float *logits, uint64_t E, uint64_t k, bool norm, int32_t *ids, float *wout)
{
	extern __shared__ float p[]; /* [E] */
	__shared__ float s_v[RTHREADS / 32];
	__shared__ int s_x[RTHREADS / 32];
	__shared__ float s_mx, s_sum;
	const uint64_t t = blockIdx.x;
	const unsigned tid = threadIdx.x, lane = tid & 31, wid = tid / 32;
	const float *l = logits + t * E;
	int32_t *id = ids + t * k;
	float *w = wout + t * k, mx = -INFINITY, top = 0;

	for (uint64_t x = tid; x < E; x += RTHREADS)
		mx = fmaxf(mx, l[x]);
	for (int off = 16; off; off >>= 1)
		mx = fmaxf(mx, __shfl_xor_sync(FULL, mx, off));
	if (lane == 0)
		s_v[wid] = mx;
	__syncthreads();
	if (tid == 0) {
		float m = s_v[0];
		for (int q = 1; q < RTHREADS / 32; q++)
			m = fmaxf(m, s_v[q]);
		s_mx = m;
	}
	__syncthreads();
	mx = s_mx;
	for (uint64_t x = tid; x < E; x += RTHREADS)
		p[x] = cpu_expf(__fsub_rn(l[x], mx));
	__syncthreads();
	if (tid == 0) {
		float sum = 0;
		for (uint64_t x = 0; x < E; x++)
			sum = __fadd_rn(sum, p[x]);
		s_sum = sum;
	}
	__syncthreads();
	for (uint64_t x = tid; x < E; x += RTHREADS)
		p[x] = __fdiv_rn(p[x], s_sum);
	__syncthreads();

	for (uint64_t n = 0; n < k; n++) {
		float bv = 0;
		int bx = -1;
		for (uint64_t x = tid; x < E; x += RTHREADS)
			if (p[x] >= 0 && (bx < 0 || p[x] > bv)) {
				bv = p[x];
				bx = (int)x;
			}
		for (int off = 16; off; off >>= 1) {
			float ov = __shfl_xor_sync(FULL, bv, off);
			int ox = __shfl_xor_sync(FULL, bx, off);
			if (beats(bv, bx, ov, ox)) {
				bv = ov;
				bx = ox;
			}
		}
		if (lane == 0) {
			s_v[wid] = bv;
			s_x[wid] = bx;
		}
		__syncthreads();
		if (tid == 0) {
			int best;
			for (int q = 1; q < RTHREADS / 32; q++)
				if (beats(bv, bx, s_v[q], s_x[q])) {
					bv = s_v[q];
					bx = s_x[q];
				}
			best = bx < 0 ? 0 : bx; /* none left: the CPU's loop leaves best at 0 */
			id[n] = best;
			w[n] = p[best];
			top = __fadd_rn(top, p[best]);
			p[best] = -1; /* taken */
		}
		__syncthreads();
	}
	if (tid == 0) {
		route_finish(id, w, k, norm, top);
	}
}

/* The same function for E <= 32 * RW_J experts with one warp per row and no block barriers:
 * each lane holds experts lane + 32 j in registers; the sum runs on lane 0 in ascending
 * order over a shared copy (the CPU's order, so the same bits); each of the k rounds is a
 * warp argmax with the CPU's tie rule. Decode routes one row per layer: its latency is the
 * kernel's. */
#define RW_J 32
template <int NJ>
static __global__ void __launch_bounds__(32)
	k_route_warp(const float *logits, uint64_t E, uint64_t k, bool norm, int32_t *ids, float *wout)
{
	__shared__ float p[32 * NJ];
	__shared__ float s_sum;
	const uint64_t t = blockIdx.x;
	const unsigned lane = threadIdx.x;
	const float *l = logits + t * E;
	int32_t *id = ids + t * k;
	float *w = wout + t * k, mx = -INFINITY, v[NJ], top = 0;

#pragma unroll
	for (int j = 0; j < NJ; j++) {
		uint64_t x = lane + 32 * (uint64_t)j;
		v[j] = x < E ? l[x] : -INFINITY;
		mx = fmaxf(mx, v[j]);
	}
	for (int off = 16; off; off >>= 1)
		mx = fmaxf(mx, __shfl_xor_sync(FULL, mx, off));
#pragma unroll
	for (int j = 0; j < NJ; j++) {
		uint64_t x = lane + 32 * (uint64_t)j;
		if (x < E)
			p[x] = v[j] = cpu_expf(__fsub_rn(v[j], mx));
	}
	__syncwarp();
	if (lane == 0) {
		/* Eight loads ahead of the dependent adds; the adds stay in ascending order. */
		float sum = 0;
		uint64_t x = 0;
		for (; x + 8 <= E; x += 8) {
			float q[8];
			for (int u = 0; u < 8; u++)
				q[u] = p[x + u];
			for (int u = 0; u < 8; u++)
				sum = __fadd_rn(sum, q[u]);
		}
		for (; x < E; x++)
			sum = __fadd_rn(sum, p[x]);
		s_sum = sum;
	}
	__syncwarp();
	const float sum = s_sum;
#pragma unroll
	for (int j = 0; j < NJ; j++)
		v[j] = lane + 32 * (uint64_t)j < E ? __fdiv_rn(v[j], sum) : -1.0f;
	for (uint64_t n = 0; n < k; n++) {
		float bv = 0;
		int bx = -1;
#pragma unroll
		for (int j = 0; j < NJ; j++)
			if (v[j] >= 0 && (bx < 0 || v[j] > bv)) {
				bv = v[j];
				bx = (int)(lane + 32 * j);
			}
		for (int off = 16; off; off >>= 1) {
			float ov = __shfl_xor_sync(FULL, bv, off);
			int ox = __shfl_xor_sync(FULL, bx, off);
			if (beats(bv, bx, ov, ox)) {
				bv = ov;
				bx = ox;
			}
		}
		const int best = bx < 0 ? 0 : bx; /* none left: the CPU's loop leaves best at 0 */
#pragma unroll
		for (int j = 0; j < NJ; j++)
			if ((int)(lane + 32 * j) == best)
				v[j] = -1.0f; /* taken */
		if (lane == 0) {
			id[n] = best;
			w[n] = bx < 0 ? -1.0f : bv;
			top = __fadd_rn(top, w[n]);
		}
	}
	if (lane == 0) {
		route_finish(id, w, k, norm, top);
	}
}

extern "C" int ck_moe_route(const float *logits, uint64_t T, uint64_t E, uint64_t k, bool norm_topk, int32_t *ids,
			    float *w, void *stream)
{
	if (!T || !k)
		return 0;
	/* Registers for the experts each lane holds: as few as E needs. */
	if (E <= 32 * 8)
		k_route_warp<8><<<(unsigned)T, 32, 0, (cudaStream_t)stream>>>(logits, E, k, norm_topk, ids, w);
	else if (E <= 32 * 16)
		k_route_warp<16><<<(unsigned)T, 32, 0, (cudaStream_t)stream>>>(logits, E, k, norm_topk, ids, w);
	else if (E <= 32 * RW_J)
		k_route_warp<RW_J><<<(unsigned)T, 32, 0, (cudaStream_t)stream>>>(logits, E, k, norm_topk, ids, w);
	else
		k_route<<<(unsigned)T, RTHREADS, E * sizeof(float), (cudaStream_t)stream>>>(logits, E, k, norm_topk, ids, w);
	return ck_launched();
}

/* --- experts ------------------------------------------------------------------------------ */

/* h[s][i] = silu(act[s][i]) * act[s][I + i], silu(v) = v / (1 + exp(-v)) as the CPU's. */
static __global__ void k_swiglu(const float *act, uint64_t rows, uint64_t I, float *h)
{
	const uint64_t e = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;

	if (e < rows * I) {
		const uint64_t s = e / I, i = e % I;
		const float g = act[s * 2 * I + i], u = act[s * 2 * I + I + i];
		h[e] = __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, cpu_expf(-g))), u);
	}
}

struct moe_ws {
	float *act, *h;
	void *q;
};

static struct moe_ws moe_carve(uint64_t S, uint64_t I, void *ws)
{
	struct moe_ws m;
	uint8_t *p = (uint8_t *)ck_align_up((uint64_t)(uintptr_t)ws, 256);

	m.act = (float *)p;
	p += ck_align_up(S * 2 * I * 4, 256);
	m.h = (float *)p;
	p += ck_align_up(S * I * 4, 256);
	m.q = p;
	return m;
}

extern "C" size_t ck_moe_ws_bytes(const struct ck_expert_stack *gate_up, const struct ck_expert_stack *down,
				  uint64_t slots)
{
	const uint64_t I = gate_up->first.n / 2;
	struct lin_mat gu = lin_mat_of(&gate_up->first, gate_up->first.data, gate_up->stride, NULL);
	struct lin_mat dn = lin_mat_of(&down->first, down->first.data, down->stride, NULL);
	size_t q = 0, qd = 0;

	if (gu.dtype == CK_NVFP4)
		q = lin_act_bytes(&gu, slots);
	if (dn.dtype == CK_NVFP4)
		qd = lin_act_bytes(&dn, slots);
	return (size_t)(256 + ck_align_up(slots * 2 * I * 4, 256) + ck_align_up(slots * I * 4, 256)) + (q > qd ? q : qd);
}

extern "C" int ck_moe_experts(const struct ck_expert_stack *gate_up, const struct ck_expert_stack *down,
			      const float *x, uint64_t T, uint64_t k, const int32_t *ids, float *out, void *ws,
			      void *stream)
{
	cudaStream_t st = (cudaStream_t)stream;
	const uint64_t S = T * k, H = gate_up->first.k, I = gate_up->first.n / 2;
	struct lin_mat gu = lin_mat_of(&gate_up->first, gate_up->first.data, gate_up->stride, ids);
	struct lin_mat dn = lin_mat_of(&down->first, down->first.data, down->stride, ids);
	struct moe_ws m = moe_carve(S, I, ws);
	int rc;

	if (!S)
		return 0;
	/* gate_up: slot s reads x[s / k]. */
	if (gu.dtype == CK_NVFP4) {
		struct lin_act a = lin_act_carve(&gu, S, m.q);
		if ((rc = lin_quantize(&gu, x, H, k, &a, st)) || (rc = lin_nvfp4(&gu, &a, m.act, 2 * I, st)))
			return rc;
	} else if ((rc = lin_plain(&gu, x, k, S, m.act, 2 * I, st))) {
		return rc;
	}
	k_swiglu<<<(unsigned)((S * I + 255) / 256), 256, 0, st>>>(m.act, S, I, m.h);
	if ((rc = ck_launched()))
		return rc;
	if (dn.dtype == CK_NVFP4) {
		struct lin_act a = lin_act_carve(&dn, S, m.q);
		if ((rc = lin_quantize(&dn, m.h, I, 1, &a, st)) || (rc = lin_nvfp4(&dn, &a, out, H, st)))
			return rc;
		return 0;
	}
	return lin_plain(&dn, m.h, 1, S, out, H, st);
}

/* --- combine ------------------------------------------------------------------------------ */

/* out[t][i] = (0 + sum over j in order of moe_out[t k + j][i] * w[t k + j]) + sigmoid(gate[t])
 * shared[t][i], each operation rounded as the CPU's (no contraction). */
static __global__ void k_combine(const float *moe_out, const float *w, const float *shared, const float *gate,
				 uint64_t T, uint64_t k, uint64_t H, float *out)
{
	const uint64_t e = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;

	if (e < T * H) {
		const uint64_t t = e / H, i = e % H;
		float o = 0.0f;
		for (uint64_t j = 0; j < k; j++)
			o = __fadd_rn(o, __fmul_rn(moe_out[(t * k + j) * H + i], w[t * k + j]));
		if (shared) {
			const float g = __fdiv_rn(1.0f, __fadd_rn(1.0f, cpu_expf(-gate[t])));
			o = __fadd_rn(o, __fmul_rn(g, shared[e]));
		}
		out[e] = o;
	}
}

extern "C" int ck_moe_combine(const float *moe_out, const float *w, const float *shared, const float *gate,
			      uint64_t T, uint64_t k, uint64_t H, float *out, void *stream)
{
	if (!T || !H)
		return 0;
	k_combine<<<(unsigned)((T * H + 255) / 256), 256, 0, (cudaStream_t)stream>>>(moe_out, w, shared, gate, T, k,
										       H, out);
	return ck_launched();
}

/* --- decode: the routed experts and their combine in two kernels ----------------------------- */

/* A warp's W4A4 product of weight row r (of a record laid out as w says, codes 8-byte
 * aligned) with an activation quantized into qa [k] / sa [k / 16]: the int64 sum of
 * k_nvfp4 (lane l takes blocks l, l + 32, ...; integer sums are exact in any order), then the
 * same final scaling, so the same bits. */
static __device__ __forceinline__ float warp_nvfp4_row(const struct lin_mat &w, const uint8_t *rec, uint64_t r,
							const int8_t *qa, const int32_t *sa, float gs)
{
	const unsigned lane = threadIdx.x & 31;
	const uint64_t k = w.k, nb = k / 16;
	const uint8_t *codes = rec + w.codes_off + r * (k / 2), *scales = rec + w.scales_off + r * nb;
	uint32_t p = 0;
	long long acc = 0;

	while (p + 1 < w.nparts && r >= w.part_end[p])
		p++;
	for (uint64_t b = lane; b < nb; b += 32) {
		const uint2 c = __ldg((const uint2 *)(codes + b * 8));
		uint32_t wv[4];
		decode8(c.x, &wv[0], &wv[1]);
		decode8(c.y, &wv[2], &wv[3]);
		const uint4 av = *(const uint4 *)(qa + b * 16);
		int dot = __dp4a((int)wv[0], (int)av.x, 0);
		dot = __dp4a((int)wv[1], (int)av.y, dot);
		dot = __dp4a((int)wv[2], (int)av.z, dot);
		dot = __dp4a((int)wv[3], (int)av.w, dot);
		acc += (long long)(dot * sa[b]) * scale_int(scales[b]);
	}
	for (int off = 16; off; off >>= 1)
		acc += __shfl_xor_sync(FULL, acc, off);
	return nv_finish(acc, ((const float *)(rec + w.globals_off))[p], gs);
}

/* Shared memory of one quantized row per part: codes, then block scales, 16-byte aligned. */
static __host__ __device__ uint64_t qrow_bytes(uint64_t k)
{
	return ck_align_up(k, 16) + ck_align_up(k / 16 * 4, 16);
}

/* Slot s = blockIdx.y: x[s / k] quantized in shared memory for every part of expert ids[s]'s
 * gate_up (lin_quant_row, as k_quant), then warp w of block b computes gate row i = b * 8 + w
 * and up row I + i and writes h[s][i] = silu(gate) * up (k_swiglu's formula). */
static __global__ void __launch_bounds__(256)
	k_moe_gate_up(struct lin_mat gu, const float *x, uint64_t ktop, const int32_t *ids, uint64_t I, float *h)
{
	extern __shared__ __align__(16) uint8_t qs[];
	__shared__ float s_gs[CK_MAX_PARTS];
	const uint64_t s = blockIdx.y, H = gu.k, qb = qrow_bytes(H);
	const uint8_t *rec = gu.data + (uint64_t)ids[s] * gu.stride;
	const uint64_t i = (uint64_t)blockIdx.x * 8 + (threadIdx.x >> 5);

	for (unsigned p = 0; p < gu.nparts; p++)
		lin_quant_row(&gu, rec, x + (s / ktop) * H, p, (int8_t *)(qs + p * qb),
			      (int32_t *)(qs + p * qb + ck_align_up(H, 16)), &s_gs[p]);
	__syncthreads();
	if (i >= I)
		return;
	float g = 0, u = 0;
	for (int half = 0; half < 2; half++) {
		const uint64_t r = i + (half ? I : 0);
		uint32_t p = 0;
		while (p + 1 < gu.nparts && r >= gu.part_end[p])
			p++;
		const float v = warp_nvfp4_row(gu, rec, r, (const int8_t *)(qs + p * qb),
					       (const int32_t *)(qs + p * qb + ck_align_up(H, 16)), s_gs[p]);
		if (half)
			u = v;
		else
			g = v;
	}
	if ((threadIdx.x & 31) == 0)
		h[s * I + i] = __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, cpu_expf(-g))), u);
}

/* Token t = blockIdx.y: its k slots' h quantized in shared memory for their down experts,
 * then warp w of block b computes output row r = b * 8 + w: each slot's down row (in slot
 * order) times its routing weight, summed as k_combine sums, plus the gated shared expert. */
static __global__ void __launch_bounds__(256)
	k_moe_down_combine(struct lin_mat dn, const float *h, uint64_t ktop, const int32_t *ids, const float *wts,
			   const float *shared, const float *gate, float *out)
{
	extern __shared__ __align__(16) uint8_t qs[];
	__shared__ float s_gs[16 * CK_MAX_PARTS];
	const uint64_t t = blockIdx.y, H = dn.n, I = dn.k, qb = qrow_bytes(I);
	const uint64_t r = (uint64_t)blockIdx.x * 8 + (threadIdx.x >> 5);

	for (uint64_t j = 0; j < ktop; j++) {
		const uint8_t *rec = dn.data + (uint64_t)ids[t * ktop + j] * dn.stride;
		for (unsigned p = 0; p < dn.nparts; p++) {
			uint8_t *q = qs + (j * dn.nparts + p) * qb;
			lin_quant_row(&dn, rec, h + (t * ktop + j) * I, p, (int8_t *)q, (int32_t *)(q + ck_align_up(I, 16)),
				      &s_gs[j * dn.nparts + p]);
		}
	}
	__syncthreads();
	if (r >= H)
		return;
	float o = 0.0f;
	for (uint64_t j = 0; j < ktop; j++) {
		const uint8_t *rec = dn.data + (uint64_t)ids[t * ktop + j] * dn.stride;
		uint32_t p = 0;
		while (p + 1 < dn.nparts && r >= dn.part_end[p])
			p++;
		const uint8_t *q = qs + (j * dn.nparts + p) * qb;
		const float d = warp_nvfp4_row(dn, rec, r, (const int8_t *)q, (const int32_t *)(q + ck_align_up(I, 16)),
					       s_gs[j * dn.nparts + p]);
		o = __fadd_rn(o, __fmul_rn(d, wts[t * ktop + j]));
	}
	if (shared) {
		const float g = __fdiv_rn(1.0f, __fadd_rn(1.0f, cpu_expf(-gate[t])));
		o = __fadd_rn(o, __fmul_rn(g, shared[t * H + r]));
	}
	if ((threadIdx.x & 31) == 0)
		out[t * H + r] = o;
}

/* The fused kernels take NVFP4 stacks whose codes are 8-byte aligned in every expert, up to
 * 16 experts a token, for steps of a few tokens (each block quantizes its own inputs again:
 * cheap for a decode step, wasteful for a prompt). */
static bool moe_fusable(const struct lin_mat &gu, const struct lin_mat &dn, uint64_t T, uint64_t k)
{
	const uint64_t c1 = (uint64_t)(uintptr_t)gu.data + gu.codes_off, c2 = (uint64_t)(uintptr_t)dn.data + dn.codes_off;

	return gu.dtype == CK_NVFP4 && dn.dtype == CK_NVFP4 && T <= 8 && k <= 16 && c1 % 8 == 0 && c2 % 8 == 0 &&
	       gu.stride % 8 == 0 && dn.stride % 8 == 0 && gu.k % 16 == 0 && dn.k % 16 == 0 &&
	       gu.nparts * qrow_bytes(gu.k) <= 48 * 1024 && k * dn.nparts * qrow_bytes(dn.k) <= 48 * 1024;
}

extern "C" int ck_moe_forward(const struct ck_expert_stack *gate_up, const struct ck_expert_stack *down,
			      const float *x, uint64_t T, uint64_t k, const int32_t *ids, const float *w,
			      const float *shared, const float *gate, float *moe_out, float *out, void *ws, void *stream)
{
	cudaStream_t st = (cudaStream_t)stream;
	struct lin_mat gu = lin_mat_of(&gate_up->first, gate_up->first.data, gate_up->stride, NULL);
	struct lin_mat dn = lin_mat_of(&down->first, down->first.data, down->stride, NULL);
	const uint64_t I = gate_up->first.n / 2, H = down->first.n;
	int rc;

	if (!T)
		return 0;
	if (!moe_fusable(gu, dn, T, k)) {
		if ((rc = ck_moe_experts(gate_up, down, x, T, k, ids, moe_out, ws, stream)))
			return rc;
		return ck_moe_combine(moe_out, w, shared, gate, T, k, H, out, stream);
	}
	struct moe_ws m = moe_carve(T * k, I, ws);
	k_moe_gate_up<<<dim3((unsigned)((I + 7) / 8), (unsigned)(T * k)), 256, (size_t)(gu.nparts * qrow_bytes(gu.k)), st>>>(
		gu, x, k, ids, I, m.h);
	if ((rc = ck_launched()))
		return rc;
	k_moe_down_combine<<<dim3((unsigned)((H + 7) / 8), (unsigned)T), 256, (size_t)(k * dn.nparts * qrow_bytes(dn.k)),
			     st>>>(dn, m.h, k, ids, w, shared, gate, out);
	return ck_launched();
}
