/* expert.c - one routed expert: gate_up, SwiGLU, down (see expert.h). */
#include "expert.h"

void capy_swiglu_rows(float *act, uint64_t rows, uint64_t inter)
{
	for (uint64_t r = 0; r < rows; r++) {
		float *row = act + r * 2 * inter;
		for (uint64_t i = 0; i < inter; i++)
			row[i] = capy_silu(row[i]) * row[inter + i];
		if (r)
			memmove(act + r * inter, row, inter * sizeof(float));
	}
}

size_t capy_expert_ws_bytes(const struct capy_linear *gate_up, const struct capy_linear *down, uint64_t m)
{
	size_t a = capy_linear_input_bytes(gate_up, m), b = capy_linear_input_bytes(down, m);

	if (a == SIZE_MAX || b == SIZE_MAX)
		return SIZE_MAX;
	return CAPY_MAX(a, b) + 64;
}

void capy_expert_rows(const struct capy_linear *gate_up, const struct capy_linear *down,
		      const struct capy_linear_input *in, uint64_t m, float *act, void *ws, float *y)
{
	struct capy_linear_input *din;

	capy_linear_rows(gate_up, in, act, 0, gate_up->n);
	capy_swiglu_rows(act, m, gate_up->n / 2);
	capy_linear_prepare(down, act, m, ws, &din);
	capy_linear_rows(down, din, y, 0, down->n);
}
