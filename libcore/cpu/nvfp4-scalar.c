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
	if (nb % 8)
		memset(q + (nchunks - 1) * CAPY_NV_CHUNK_BYTES, 0, CAPY_NV_CHUNK_BYTES);
	for (uint64_t b = 0; b < nb; b++) {
		uint8_t codes[8], sc, *c = q + (b / 8) * CAPY_NV_CHUNK_BYTES;
		unsigned j = (unsigned)(b % 8);
		int32_t sum = 0, nc[2], sa[2];

		capy_nvfp4_quantize_act(x + b * 16, 16, is, codes, &sc);
		for (unsigned t = 0; t < 8; t++) {
			int8_t lo = capy_nv_code2[codes[t] & 15], hi = capy_nv_code2[codes[t] >> 4];
			c[8 * j + t] = (uint8_t)lo;
			c[64 + 8 * j + t] = (uint8_t)hi;
			sum += lo + hi;
		}
		nc[0] = -12 * sum;
		nc[1] = 0;
		sa[0] = capy_nv_scale_int(sc);
		sa[1] = 0;
		memcpy(c + 128 + 8 * j, nc, 8);
		memcpy(c + 192 + 8 * j, sa, 8);
	}
}

void capy_nvfp4_scalar(CAPY_NVFP4_ARGS)
{
	const uint64_t k = w->k, n = w->n, nb = k / 16, qrow = nchunks * CAPY_NV_CHUNK_BYTES;

	for (uint64_t r = r0; r < r1; r++) {
		const uint8_t *cw = w->codes + r * (k / 2), *sw = w->scales + r * nb;
		for (uint64_t i = 0; i < m; i++) {
			const uint8_t *a = q + i * qrow;
			int64_t acc = 0;
			for (uint64_t b = 0; b < nb; b++) {
				const uint8_t *c = a + (b / 8) * CAPY_NV_CHUNK_BYTES;
				unsigned j = (unsigned)(b % 8);
				int32_t dot = 0, sa;
				for (unsigned t = 0; t < 8; t++) {
					uint8_t byte = cw[b * 8 + t];
					dot += (int8_t)c[8 * j + t] * capy_nv_code2[byte & 15] +
					       (int8_t)c[64 + 8 * j + t] * capy_nv_code2[byte >> 4];
				}
				memcpy(&sa, c + 192 + 8 * j, 4);
				acc += (int64_t)dot * sa * capy_nv_scale_int(sw[b]);
			}
			y[i * n + r] = capy_nv_finish(acc, capy_nv_factor(scale2, gs[i]));
		}
	}
}
