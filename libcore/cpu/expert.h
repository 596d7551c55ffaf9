/* expert.h - one routed expert of a MoE layer on the CPU: y = down(SwiGLU(gate_up(x))) over the
 * rows (tokens) routed to it, exactly as the CPU backend's MoE block computes it. Shared by
 * the CPU backend (libcore/backend/cpu/moe.c) and the offloading engine's expert workers
 * (libcore/offload/cpu-experts.h), so that an expert computed on either gives the same bits.
 *
 *	void *ws = aligned_alloc(64, CAPY_ALIGN_UP(capy_expert_ws_bytes(gu, dn, m), 64));
 *	capy_linear_prepare(gu, x, m, ws, &in);          // or capy_linear_prepare_quantized
 *	capy_expert_rows(gu, dn, in, m, act, ws, y);
 *
 * gate_up is [2I, H] (the I gate rows, then the I up rows), down [H, I]. Every value is
 * bit-identical whatever m is and whichever rows come with it (linear.h), so the caller may
 * group an expert's rows as it likes.
 */
#ifndef CAPY_CPU_EXPERT_H
#define CAPY_CPU_EXPERT_H

#include "linear.h"

#include <math.h>

/* silu(x) = x * sigmoid(x), in this form and float precision everywhere on the CPU. */
static inline float capy_silu(float x)
{
	return x / (1.0f + expf(-x));
}

/* SwiGLU in place over rows of [gate | up] (2 * inter values each): silu(gate) * up, the
 * results packed as rows of inter values (row r at act + r * inter). */
void capy_swiglu_rows(float *act, uint64_t rows, uint64_t inter);

/* Workspace bytes capy_expert_rows needs for m rows (the larger prepared input of the two
 * matrices, plus 64 for the alignment); SIZE_MAX on overflow. */
size_t capy_expert_ws_bytes(const struct capy_linear *gate_up, const struct capy_linear *down, uint64_t m);

/* y [m][H] for the m rows prepared for gate_up in *in (which may lie in ws: it is read
 * before ws is reused); act is [m][2I] floats of scratch, ws capy_expert_ws_bytes(m) bytes.
 * The matrices must agree (gate_up.n == 2 * down.k, the caller checks). */
void capy_expert_rows(const struct capy_linear *gate_up, const struct capy_linear *down,
		      const struct capy_linear_input *in, uint64_t m, float *act, void *ws, float *y);

#endif
