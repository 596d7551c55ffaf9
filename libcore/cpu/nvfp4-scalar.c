/* nvfp4-scalar.c - NVFP4 (W4A4) in plain C: activation preparation by the reference rule itself
 * (capy_nvfp4_quantize_act) and the exact integer row sums. See cpu-impl.h for the layout. */
#include "cpu-impl.h"
#include "../quant/nvfp4.h"

#include <math.h>

const int8_t capy_nv_code2[16] = { 0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12 };

void capy_nvfp4_prep_scalar(CAPY_PREP_ARGS)
{
	const uint64_t nb = k / 16, nchunks = (k + CAPY_NV_CHUNK - 1) / CAPY_NV_CHUNK;
	float is = input_scale, amax = 0;
	bool bad = false;

	for (uint64_t j = 0; j < k; j++) {
		bad |= !isfinite(x[j]);
		amax = fmaxf(amax, fabsf(x[j]));
	}
	if (is == 0)
		is = capy_nvfp4_weight_scale2(amax);
	*gs = 1.0f / is;
	if (bad || !isfinite(*gs))
		*gs = NAN;
	if (nb % 16)
		memset(q + (nchunks - 1) * CAPY_NV_CHUNK_BYTES, 0, CAPY_NV_CHUNK_BYTES);
	for (uint64_t b = 0; b < nb; b++) {
		uint8_t codes[8], sc, *c = q + (b / 16) * CAPY_NV_CHUNK_BYTES;
		unsigned d = (unsigned)(b % 16);
		int32_t sum = 0, nc, sa;

		capy_nvfp4_quantize_act(x + b * 16, 16, is, codes, &sc);
		for (unsigned e = 0; e < 16; e++) {
			int8_t a = capy_nv_code2[(codes[e / 2] >> (4 * (e & 1))) & 15];
			c[capy_nv_slot(d, e)] = (uint8_t)a;
			sum += a;
		}
		nc = -12 * sum;
		sa = capy_nv_scale_int(sc);
		memcpy(c + CAPY_NV_NC + 4 * d, &nc, 4);
		memcpy(c + CAPY_NV_SA + 4 * d, &sa, 4);
	}
}

/* The definition in linear.h, one product at a time (it reads only the a and S_a of the layout,
 * so the layout's bias terms are checked by the vector kernels agreeing with this one). */
void capy_nvfp4_scalar(CAPY_NVFP4_ARGS)
{
	const uint64_t k = w->k, n = w->n, nb = k / 16, qrow = nchunks * CAPY_NV_CHUNK_BYTES;

	for (uint64_t r = r0; r < r1; r++) {
		const uint8_t *cw = w->codes + r * (k / 2), *sw = w->scales + r * nb;
		for (uint64_t i = 0; i < m; i++) {
			const uint8_t *a = q + i * qrow;
			int64_t acc = 0;
			for (uint64_t b = 0; b < nb; b++) {
				const uint8_t *c = a + (b / 16) * CAPY_NV_CHUNK_BYTES;
				unsigned d = (unsigned)(b % 16);
				int32_t dot = 0, sa;
				for (unsigned e = 0; e < 16; e++) {
					uint8_t byte = cw[b * 8 + e / 2];
					dot += (int8_t)c[capy_nv_slot(d, e)] *
					       capy_nv_code2[(byte >> (4 * (e & 1))) & 15];
				}
				memcpy(&sa, c + CAPY_NV_SA + 4 * d, 4);
				acc += (int64_t)dot * sa * capy_nv_scale_int(sw[b]);
			}
			y[i * n + r] = capy_nv_finish(acc, capy_nv_factor(scale2, gs[i]));
		}
	}
}
