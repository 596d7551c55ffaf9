/* nvfp4.c - NVFP4 quantization rules (see nvfp4.h). */
#include "nvfp4.h"
#include "floats.h"

#include <math.h>

const float capy_e2m1_values[16] = { 0, 0.5f, 1, 1.5f, 2, 3, 4, 6,
				     -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6 };

uint8_t capy_e2m1_code(float x)
{
	static const float bounds[7] = { 0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f };
	uint8_t sign = x < 0 ? 8 : 0, ord = 0;
	float a = fabsf(x);

	/* The index of the first bound >= a, then one up where a sits exactly on a bound
	 * whose upper neighbour has the even mantissa (0.75 -> 1.0, 1.75 -> 2.0, 3.5 -> 4.0). */
	while (ord < 7 && bounds[ord] < a)
		ord++;
	if (a == 0.75f || a == 1.75f || a == 3.5f)
		ord++;
	return (uint8_t)(sign | ord);
}

float capy_nvfp4_weight_scale2(float amax)
{
	float s = amax / 2688.0f; /* 6 * 448 */
	return s > 0 ? s : 1.0f;
}

void capy_nvfp4_quantize(const float *w, uint64_t n, uint64_t k, float scale2, uint8_t *codes,
			 uint8_t *scales)
{
	const float denom = 6.0f * scale2;

	for (uint64_t r = 0; r < n; r++) {
		const float *row = w + r * k;
		uint8_t *crow = codes + r * (k / 2), *srow = scales + r * (k / 16);
		for (uint64_t b = 0; b < k / 16; b++) {
			const float *blk = row + b * 16;
			float amax = 0, ps, d;
			for (int i = 0; i < 16; i++)
				amax = fmaxf(amax, fabsf(blk[i]));
			ps = amax / denom;
			if (ps == 0)
				ps = 1.0f;
			srow[b] = capy_f32_to_e4m3(ps);
			d = capy_e4m3_to_f32(srow[b]) * scale2;
			for (int i = 0; i < 16; i += 2) {
				uint8_t lo = capy_e2m1_code(blk[i] / d), hi = capy_e2m1_code(blk[i + 1] / d);
				crow[b * 8 + (uint64_t)i / 2] = (uint8_t)(hi << 4 | lo);
			}
		}
	}
}

void capy_nvfp4_quantize_act(const float *x, uint64_t k, float input_scale, uint8_t *codes,
			     uint8_t *scales)
{
	const float gs = 1.0f / input_scale, inv_gs = 1.0f / gs, sixth = (float)(1.0 / 6.0);

	for (uint64_t b = 0; b < k / 16; b++) {
		const float *blk = x + b * 16;
		float amax = 0, s, t, out_scale;
		for (int i = 0; i < 16; i++)
			amax = fmaxf(amax, fabsf(blk[i]));
		s = gs * (amax * sixth);
		if (s > 448.0f)
			s = 448.0f;
		scales[b] = capy_f32_to_e4m3(s);
		s = capy_e4m3_to_f32(scales[b]);
		t = s * inv_gs;
		out_scale = t == 0 ? 0.0f : 1.0f / t;
		for (int i = 0; i < 16; i += 2) {
			float v0 = fminf(fmaxf(blk[i] * out_scale, -6.0f), 6.0f);
			float v1 = fminf(fmaxf(blk[i + 1] * out_scale, -6.0f), 6.0f);
			codes[b * 8 + (uint64_t)i / 2] = (uint8_t)(capy_e2m1_code(v1) << 4 | capy_e2m1_code(v0));
		}
	}
}
