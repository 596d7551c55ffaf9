// moe-combine.cuh - the MoE block's output for one element: the routed experts' outputs
// weighted in order, then the gated shared expert, rounded step by step as moe_forward
// (libcore/backend/cpu/moe.c). moe.cu's combine and ops.cu's combine folded into the residual
// add and norm both compute it here, so the two give the same bits. CUDA C++; kernels/ only.
#ifndef CAPY_MOE_COMBINE_CUH
#define CAPY_MOE_COMBINE_CUH

#include "linear-impl.h" /* cpu_expf */

#include <stdint.h>

struct moe_term {
	const float *out, *w, *shared, *gate; /* out [T * k][H], w [T * k]; shared [T][H] or NULL, gate [T] */
	uint64_t k;
};

// The shared expert's gate of row t, sigmoid(gate[t]) (0 without a shared expert).
__device__ __forceinline__ float moe_term_gate(const struct moe_term &m, uint64_t t)
{
	return m.shared ? __fdiv_rn(1.0f, __fadd_rn(1.0f, cpu_expf(-m.gate[t]))) : 0.0f;
}

// out[t][i] = (0 + sum over j < k of out[t k + j][i] * w[t k + j]) + g * shared[t][i], with g
// moe_term_gate(m, t) (a row's elements share it: computed once).
__device__ __forceinline__ float moe_term_with(const struct moe_term &m, uint64_t t, uint64_t H, uint64_t i, float g)
{
	float o = 0.0f;

	for (uint64_t j = 0; j < m.k; j++)
		o = __fadd_rn(o, __fmul_rn(m.out[(t * m.k + j) * H + i], m.w[t * m.k + j]));
	if (m.shared)
		o = __fadd_rn(o, __fmul_rn(g, m.shared[t * H + i]));
	return o;
}

__device__ __forceinline__ float moe_term_at(const struct moe_term &m, uint64_t t, uint64_t H, uint64_t i)
{
	return moe_term_with(m, t, H, i, moe_term_gate(m, t));
}

#endif
