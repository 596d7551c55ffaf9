/* floats.h - small float formats: BF16, F16 and FP8 E4M3 (float8_e4m3fn), to and from float32.
 *
 * Conversions to the narrow formats round to nearest, ties to even. E4M3 follows
 * PyTorch's float8_e4m3fn cast exactly: no infinities, magnitudes from 480 up (and
 * NaN, Inf) become NaN (0x7F with the sign), 464 rounds down to 448.
 */
#ifndef CAPY_QUANT_FLOATS_H
#define CAPY_QUANT_FLOATS_H

#include "../core.h"
#include "../artifact/artifact.h"

static inline uint32_t capy_f32_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static inline float capy_f32_from_bits(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static inline float capy_bf16_to_f32(uint16_t h)
{
	return capy_f32_from_bits((uint32_t)h << 16);
}

/* Round to nearest even; NaN stays NaN (quiet). */
static inline uint16_t capy_f32_to_bf16(float f)
{
	uint32_t u = capy_f32_bits(f);

	if ((u & 0x7fffffff) > 0x7f800000)
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fff + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

float capy_f16_to_f32(uint16_t h);
uint16_t capy_f32_to_f16(float f);

/* n values of a float dtype (F32, BF16, F16; p 2-byte aligned) widened exactly to float32.
 * -1 for any other dtype (nothing written). */
int capy_floats_to_f32(const void *p, enum capy_dtype dt, uint64_t n, float *out);

float capy_e4m3_to_f32(uint8_t v);
uint8_t capy_f32_to_e4m3(float f);

static inline bool capy_e4m3_is_nan(uint8_t v)
{
	return (v & 0x7f) == 0x7f;
}

#endif
