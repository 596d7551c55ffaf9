/* floats.c - F16 and FP8 E4M3 conversions (see floats.h). */
#include "floats.h"

#include <math.h>

float capy_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;

	if (e == 0x1f)
		return capy_f32_from_bits(sign | 0x7f800000 | (m << 13));
	if (e == 0) {
		float v = ldexpf((float)m, -24); /* subnormal: m * 2^-24, exact */
		return sign ? -v : v;
	}
	return capy_f32_from_bits(sign | ((e + 112) << 23) | (m << 13));
}

uint16_t capy_f32_to_f16(float f)
{
	uint32_t u = capy_f32_bits(f), sign = (u >> 16) & 0x8000, a = u & 0x7fffffff;

	if (a > 0x7f800000)
		return (uint16_t)(sign | 0x7e00);
	if (a >= 0x477ff000) /* rounds to >= 65536: infinity */
		return (uint16_t)(sign | 0x7c00);
	if (a < 0x38800000) { /* below 2^-14: subnormal half, m = RNE(|f| * 2^24) */
		float v = fabsf(f) * 16777216.0f; /* exact: a power-of-two scale */
		return (uint16_t)(sign | (uint32_t)nearbyintf(v));
	}
	/* Normal: re-bias the exponent and round the mantissa from 23 to 10 bits. */
	uint32_t r = a - (112u << 23);
	r += 0xfff + ((r >> 13) & 1);
	return (uint16_t)(sign | (r >> 13));
}

float capy_e4m3_to_f32(uint8_t v)
{
	uint32_t e = (v >> 3) & 0xf, m = v & 7;
	float x;

	if (e == 15 && m == 7)
		return NAN;
	x = e ? ldexpf(1.0f + (float)m / 8.0f, (int)e - 7) : ldexpf((float)m, -9);
	return (v & 0x80) ? -x : x;
}

uint8_t capy_f32_to_e4m3(float f)
{
	uint32_t u = capy_f32_bits(f), sign = (u >> 24) & 0x80, a = u & 0x7fffffff;
	uint32_t e, keep, rest;

	if (a >= 0x43f00000) /* >= 480, Inf or NaN */
		return (uint8_t)(sign | 0x7f);
	if (a < 0x3c800000) { /* below 2^-6: subnormal, m = RNE(|f| * 2^9) in 0..8 */
		float v = capy_f32_from_bits(a) * 512.0f;
		return (uint8_t)(sign | (uint32_t)nearbyintf(v));
	}
	e = (a >> 23) - 127 + 7;
	keep = (a >> 20) & 7;
	rest = a & 0xfffff;
	if (rest > 0x80000 || (rest == 0x80000 && (keep & 1))) {
		if (++keep == 8) {
			keep = 0;
			e++;
		}
	}
	return (uint8_t)(sign | (e << 3) | keep);
}

int capy_floats_to_f32(const void *p, enum capy_dtype dt, uint64_t n, float *out)
{
	const uint16_t *h = p;

	switch (dt) {
	case CAPY_DT_F32:
		memcpy(out, p, n * sizeof(float));
		return 0;
	case CAPY_DT_BF16:
		for (uint64_t i = 0; i < n; i++)
			out[i] = capy_bf16_to_f32(h[i]);
		return 0;
	case CAPY_DT_F16:
		for (uint64_t i = 0; i < n; i++)
			out[i] = capy_f16_to_f32(h[i]);
		return 0;
	default:
		return -1;
	}
}
