/* moe.cu - the sparse MoE block on the GPU: the router (softmax, top k), the routed experts and
 * the weighted combine with the gated shared expert, as libcore/backend/cpu/moe.c computes them.
 *
 * The experts run as one pass per stage over all slots (slot s = t * k + j uses expert ids[s]):
 * quantize every slot's input (NVFP4; each expert's own input_scale, read from its record),
 * gate_up for every slot, SwiGLU, quantize, down (for a decode step's few slots each stage is
 * one kernel whose blocks quantize their slot's row themselves: lin_nvfp4_fq). Each stage is
 * linear.cu's kernel with the weights of row s taken from expert ids[s]'s record, so a slot's
 * output is exactly ck_linear's function applied to that one row (bit-identical to the CPU
 * for NVFP4). Slots that share an expert re-read its weights (from L2 mostly): right for
 * decode, where few slots share one.
 * The slots of prefill rows run as grouped GEMMs instead (moe-grouped.cu). */
#include "moe-grouped.h"
#include "moe-combine.cuh"
#include "ck-common.cuh"

#include <math.h>

#define FULL CK_FULL

/* --- router ------------------------------------------------------------------------------- */

#define RTHREADS 128

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
	ck_grid_enter();
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
			if (ck_beats(bv, bx, ov, ox)) {
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
				if (ck_beats(bv, bx, s_v[q], s_x[q])) {
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
 * kernel's, a chain of dependent instructions of one warp (ncu, when each round was five
 * shuffle steps of value and index and lane 0 sorted the choices: ~3000 instructions at ~6
 * cycles each, 11.5 us for E = 256, k = 8). */
#define RW_J 32
#define RW_KMAX 32 /* up to this k, lane n holds choice n in registers */

/* A probability as a key whose unsigned order is the value's (0: taken or NaN, never chosen;
 * the magnitude's bits, so -0 ties with +0 as the CPU's comparisons have it). */
static __device__ __forceinline__ uint32_t route_key(float v)
{
	return v >= 0 ? (__float_as_uint(v) & 0x7fffffffu) + 1 : 0;
}

/* The work of k_route_warp for one row into out_ids, out_w from o on (dry: into shared
 * scratch, nothing global written). */
template <int NJ>
static __device__ __forceinline__ void route_warp_body(const float *l, uint64_t E, uint64_t k, bool norm,
						       int32_t *out_ids, float *out_w, uint64_t o, bool dry)
{
	__shared__ __align__(16) float p[32 * NJ];
	__shared__ float s_sum;
	__shared__ int32_t s_id[RW_KMAX];
	__shared__ int32_t d_id[RW_KMAX];
	__shared__ float d_w[RW_KMAX];
	const unsigned lane = threadIdx.x;
	const bool local = k <= RW_KMAX;
	int32_t *ids = dry ? d_id : out_ids;
	float *wout = dry ? d_w : out_w;
	float mx = -INFINITY, v[NJ], top = 0, my_w = 0;
	int32_t my_id = 0;

#pragma unroll
	for (int j = 0; j < NJ; j++) {
		uint64_t x = lane + 32 * (uint64_t)j;
		v[j] = x < E ? l[x] : -INFINITY;
		mx = fmaxf(mx, v[j]);
	}
	for (int off = 16; off; off >>= 1)
		mx = fmaxf(mx, __shfl_xor_sync(FULL, mx, off));
	/* The exps (a double-precision exp each) in a loop over the shared copy unrolled four times:
	 * four copies of their code, not NJ (decode runs this kernel once a layer and fetches its
	 * code cold), and four independent chains in flight. */
#pragma unroll
	for (int j = 0; j < NJ; j++)
		if (lane + 32 * (uint64_t)j < E)
			p[lane + 32 * j] = v[j];
#pragma unroll 4
	for (uint64_t x = lane; x < E; x += 32)
		p[x] = cpu_expf(__fsub_rn(p[x], mx));
	__syncwarp();
	if (lane == 0) {
		/* The adds in ascending order; the next eight values are loaded while the current
		 * eight are added, so the chain is the adds' latency, not the loads'. */
		float sum = 0;
		uint64_t x = 0;
		float4 a = make_float4(0, 0, 0, 0), b = a;
		if (E >= 8) {
			a = *(const float4 *)&p[0];
			b = *(const float4 *)&p[4];
		}
		for (; x + 8 <= E; x += 8) {
			const float q[8] = { a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w };
			if (x + 16 <= E) {
				a = *(const float4 *)&p[x + 8];
				b = *(const float4 *)&p[x + 12];
			}
#pragma unroll
			for (int u = 0; u < 8; u++)
				sum = __fadd_rn(sum, q[u]);
		}
		for (; x < E; x++)
			sum = __fadd_rn(sum, p[x]);
		s_sum = sum;
	}
	__syncwarp();
	const float sum = s_sum;
#pragma unroll 4
	for (uint64_t x = lane; x < E; x += 32)
		p[x] = __fdiv_rn(p[x], sum);
	__syncwarp();
#pragma unroll
	for (int j = 0; j < NJ; j++)
		v[j] = lane + 32 * (uint64_t)j < E ? p[lane + 32 * j] : -1.0f;
	for (uint64_t n = 0; n < k; n++) {
		/* the lane's best (its lowest index among its largest), then the warp's largest key
		 * and the lowest index holding it: two reductions instead of five shuffle rounds */
		uint32_t bk = 0;
		int bj = 0;
#pragma unroll
		for (int j = 0; j < NJ; j++) {
			const uint32_t kj = route_key(v[j]);
			if (kj > bk) {
				bk = kj;
				bj = j;
			}
		}
		const uint32_t mk = __reduce_max_sync(FULL, bk);
		const uint32_t bx = __reduce_min_sync(FULL, mk && bk == mk ? lane + 32u * (uint32_t)bj : 0xffffffffu);
		const int best = mk ? (int)bx : 0; /* none left: the CPU's loop leaves best at 0 */
		const float wn = mk ? __uint_as_float(mk - 1) : -1.0f;
#pragma unroll
		for (int j = 0; j < NJ; j++)
			if (mk && lane + 32u * (uint32_t)j == bx)
				v[j] = -1.0f; /* taken */
		top = __fadd_rn(top, wn);
		if (local && n == lane) {
			my_id = best;
			my_w = wn;
		} else if (!local && lane == 0) {
			ids[o + n] = best;
			wout[o + n] = wn;
		}
	}
	if (!local) {
		if (lane == 0)
			route_finish(ids + o, wout + o, k, norm, top);
		return;
	}
	/* route_finish in registers: lane n divides its weight and goes to its place in the
	 * insertion sort by id, which is stable: the choices with a lower id, and those with the
	 * same id chosen before it. */
	if (lane < k)
		s_id[lane] = my_id;
	__syncwarp();
	if (lane < k) {
		uint32_t r = 0;
		for (uint32_t m = 0; m < (uint32_t)k; m++) {
			const int32_t o = s_id[m];
			r += o < my_id || (o == my_id && m < lane);
		}
		ids[o + r] = my_id;
		wout[o + r] = norm ? __fdiv_rn(my_w, top) : my_w;
	}
}

/* The same as one function of its own, for the warm-up below: a call runs the same code at
 * the same addresses each time. */
template <int NJ>
static __device__ __noinline__ void route_warp_call(const float *l, uint64_t E, uint64_t k, bool norm, int32_t *out_ids,
						    float *out_w, uint64_t o, bool dry)
{
	route_warp_body<NJ>(l, E, k, norm, out_ids, out_w, o, dry);
}

/* WARM (an experiment, ck_set_route_warm; not measured yet): the block first runs the row's
 * work dry on whatever the logits buffer holds before its wait (read, never written), which
 * fetches the code into the instruction caches while the block would wait anyway, then runs it
 * on the row. Decode runs the router once a layer, and a kernel that runs once a layer starts
 * with its code cold (Nsight Compute found half the stalls of the old MoE fold waiting for
 * instructions). Without WARM the body is inlined, as before. */
template <int NJ, bool WARM>
static __global__ void __launch_bounds__(32)
	k_route_warp(const float *logits, uint64_t E, uint64_t k, bool norm, int32_t *ids, float *wout)
{
	if (WARM) {
		if (k <= RW_KMAX)
			route_warp_call<NJ>(logits + blockIdx.x * E, E, k, norm, NULL, NULL, 0, true);
		ck_grid_enter();
		route_warp_call<NJ>(logits + blockIdx.x * E, E, k, norm, ids, wout, blockIdx.x * k, false);
	} else {
		ck_grid_enter();
		route_warp_body<NJ>(logits + blockIdx.x * E, E, k, norm, ids, wout, blockIdx.x * k, false);
	}
}

static int route_warm;

extern "C" void ck_set_route_warm(int on)
{
	route_warm = on;
}

template <int NJ>
static void route_warp_launch(unsigned T, cudaStream_t st, const float *logits, uint64_t E, uint64_t k, bool norm,
			      int32_t *ids, float *w)
{
	if (route_warm)
		ck_launch(k_route_warp<NJ, true>, T, 32, 0, st, logits, E, k, norm, ids, w);
	else
		ck_launch(k_route_warp<NJ, false>, T, 32, 0, st, logits, E, k, norm, ids, w);
}

extern "C" int ck_moe_route(const float *logits, uint64_t T, uint64_t E, uint64_t k, bool norm_topk, int32_t *ids,
			    float *w, void *stream)
{
	if (!T || !k)
		return 0;
	/* Registers for the experts each lane holds: as few as E needs. */
	if (E <= 32 * 8)
		route_warp_launch<8>((unsigned)T, (cudaStream_t)stream, logits, E, k, norm_topk, ids, w);
	else if (E <= 32 * 16)
		route_warp_launch<16>((unsigned)T, (cudaStream_t)stream, logits, E, k, norm_topk, ids, w);
	else if (E <= 32 * RW_J)
		route_warp_launch<RW_J>((unsigned)T, (cudaStream_t)stream, logits, E, k, norm_topk, ids, w);
	else
		ck_launch(k_route, (unsigned)T, RTHREADS, E * sizeof(float), (cudaStream_t)stream, logits, E, k, norm_topk, ids, w);
	return ck_launched();
}

/* --- experts ------------------------------------------------------------------------------ */

/* h[s][i] = silu(act[s][i]) * act[s][I + i], silu(v) = v / (1 + exp(-v)) as the CPU's. */
static __global__ void k_swiglu(const float *act, uint64_t rows, uint64_t I, float *h)
{
	ck_grid_enter();
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
	size_t q = 0, qd = 0, g = 0;

	if (gu.dtype == CK_NVFP4)
		q = lin_act_bytes(&gu, slots);
	if (dn.dtype == CK_NVFP4)
		qd = lin_act_bytes(&dn, slots);
	if (moe_grouped_ok(&gu) && moe_grouped_ok(&dn))
		g = moe_grouped_ws_bytes(&gu, &dn, slots, gate_up->E);
	return (size_t)(256 + ck_align_up(slots * 2 * I * 4, 256) + ck_align_up(slots * I * 4, 256)) + (q > qd ? q : qd) +
	       g;
}

/* One NVFP4 stage (gate_up or down) of every slot: the exact slots through lin_nvfp4, the
 * grouped ones (if any) through moe-grouped.cu. x row of slot s: x + (s / xdiv) * ldx. */
static int nvfp4_stage(const struct lin_mat *w, const float *x, uint64_t ldx, uint64_t xdiv, uint64_t S, uint64_t k,
		       const uint8_t *grouped, uint64_t n_grouped, uint64_t T, struct moe_grouped_ws *g, uint64_t E,
		       void *qws, float *y, uint64_t ldy, cudaStream_t st)
{
	struct lin_act a = lin_act_carve(w, S, qws);
	int rc;

	if (n_grouped < T) { /* exact slots */
		a.sel = n_grouped ? grouped : NULL;
		a.sel_div = k;
		a.sel_val = 0;
		if ((rc = lin_quantize(w, x, ldx, xdiv, &a, st)) || (rc = lin_nvfp4(w, &a, y, ldy, st)))
			return rc;
	}
	if (!n_grouped)
		return 0;
	struct lin_act b = a;
	b.xb = g->xb;
	b.gs = g->gs;
	b.sel = grouped;
	b.sel_div = k;
	b.sel_val = 1;
	if ((rc = lin_quantize(w, x, ldx, xdiv, &b, st)))
		return rc;
	return moe_grouped_linear(g, w, &b, S, n_grouped * k, E, y, ldy, st);
}

extern "C" int ck_moe_experts(const struct ck_expert_stack *gate_up, const struct ck_expert_stack *down,
			      const float *x, uint64_t T, uint64_t k, const int32_t *ids, const uint8_t *grouped,
			      uint64_t n_grouped, float *out, void *ws, void *stream)
{
	cudaStream_t st = (cudaStream_t)stream;
	const uint64_t S = T * k, H = gate_up->first.k, I = gate_up->first.n / 2, E = gate_up->E;
	struct lin_mat gu = lin_mat_of(&gate_up->first, gate_up->first.data, gate_up->stride, ids);
	struct lin_mat dn = lin_mat_of(&down->first, down->first.data, down->stride, ids);
	struct moe_ws m = moe_carve(S, I, ws);
	struct moe_grouped_ws g;
	size_t q = 0, qd = 0;
	int rc;

	if (!S)
		return 0;
	if (!grouped || !moe_grouped_ok(&gu) || !moe_grouped_ok(&dn))
		n_grouped = 0;
	if (gu.dtype == CK_NVFP4)
		q = lin_act_bytes(&gu, S);
	if (dn.dtype == CK_NVFP4)
		qd = lin_act_bytes(&dn, S);
	if (n_grouped) {
		g = moe_grouped_carve(&gu, &dn, S, E, (uint8_t *)m.q + (q > qd ? q : qd));
		if ((rc = moe_grouped_plan(&g, ids, grouped, T, k, E, st)))
			return rc;
	}
	/* A decode step's few slots: each stage one kernel that quantizes its own input
	 * (lin_nvfp4_fq), the same bits. */
	if (!n_grouped && lin_nvfp4_fq_ok(&gu, x, S) && lin_nvfp4_fq_ok(&dn, m.act, S)) {
		if ((rc = lin_nvfp4_fq(&gu, x, H, k, false, S, m.act, 2 * I, st)))
			return rc;
		return lin_nvfp4_fq(&dn, m.act, 2 * I, 1, true, S, out, H, st);
	}
	/* gate_up: slot s reads x[s / k]. */
	if (gu.dtype == CK_NVFP4) {
		if ((rc = nvfp4_stage(&gu, x, H, k, S, k, grouped, n_grouped, T, &g, E, m.q, m.act, 2 * I, st)))
			return rc;
	} else if ((rc = lin_plain(&gu, x, k, S, m.act, 2 * I, st))) {
		return rc;
	}
	if (dn.dtype == CK_NVFP4 && !n_grouped) { /* decode: SwiGLU inside the quantization */
		struct lin_act a = lin_act_carve(&dn, S, m.q);
		a.swiglu = true;
		if ((rc = lin_quantize(&dn, m.act, 2 * I, 1, &a, st)))
			return rc;
		return lin_nvfp4(&dn, &a, out, H, st);
	}
	ck_launch(k_swiglu, (unsigned)((S * I + 255) / 256), 256, 0, st, m.act, S, I, m.h);
	if ((rc = ck_launched()))
		return rc;
	if (dn.dtype == CK_NVFP4)
		return nvfp4_stage(&dn, m.h, I, 1, S, k, grouped, n_grouped, T, &g, E, m.q, out, H, st);
	return lin_plain(&dn, m.h, 1, S, out, H, st);
}

/* --- combine ------------------------------------------------------------------------------ */

/* out[t][i] = (0 + sum over j in order of moe_out[t k + j][i] * w[t k + j]) + sigmoid(gate[t])
 * shared[t][i], each operation rounded as the CPU's (no contraction). */
static __global__ void k_combine(struct moe_term m, uint64_t T, uint64_t H, float *out)
{
	ck_grid_enter();
	const uint64_t e = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;

	if (e < T * H)
		out[e] = moe_term_at(m, e / H, H, e % H);
}

extern "C" int ck_moe_combine(const float *moe_out, const float *w, const float *shared, const float *gate,
			      uint64_t T, uint64_t k, uint64_t H, float *out, void *stream)
{
	if (!T || !H)
		return 0;
	const struct moe_term m = { moe_out, w, shared, gate, k };

	ck_launch(k_combine, (unsigned)((T * H + 255) / 256), 256, 0, (cudaStream_t)stream, m, T, H, out);
	return ck_launched();
}
