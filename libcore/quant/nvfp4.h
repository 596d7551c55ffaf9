/* nvfp4.h - NVFP4 numerics: E2M1 codes, NVIDIA ModelOpt's weight quantization rule and
 * the per-block activation quantization of W4A4 (DESIGN §5, docs/artifact.md).
 *
 * A code is 4 bits: bit 3 the sign, bits 0-2 the magnitude index into
 * {0, 0.5, 1, 1.5, 2, 3, 4, 6}. Element 2j of a row is the low nibble of byte j.
 * Every function computes in float32 in the same order as the reference Python
 * (ModelOpt's NVFP4QTensor for weights, vLLM's NVFP4 emulation for activations), so
 * the results are bit-identical to it (t/fixtures/nvfp4_vectors.json).
 */
#ifndef CAPY_QUANT_NVFP4_H
#define CAPY_QUANT_NVFP4_H

#include "../core.h"

extern const float capy_e2m1_values[16];

/* The E2M1 code of an already scaled value x (ModelOpt's rule): thresholds
 * 0.25/0.75/1.25/1.75/2.5/3.5/5 with ties to the even mantissa, saturating at 6; the
 * sign bit is set for x < 0, so small negatives give code 8 (-0). */
uint8_t capy_e2m1_code(float x);

/* ModelOpt's per-tensor weight scale: amax / (6 * 448); an all-zero tensor gets 1.0
 * (ModelOpt's newer releases; the older rule would divide by zero). */
float capy_nvfp4_weight_scale2(float amax);

/* Quantize an [n, k] float32 matrix (k % 16 == 0) with scale2: block scales
 * e4m3(block_amax / (6 * scale2)) (0 -> 1.0), codes e2m1(w / (scale * scale2)).
 * codes: n*k/2 bytes; scales: n*k/16 bytes. */
void capy_nvfp4_quantize(const float *w, uint64_t n, uint64_t k, float scale2, uint8_t *codes,
			 uint8_t *scales);

/* W4A4 activation quantization of one row x[k] with a calibrated input_scale
 * (vLLM's emulation): gs = 1/input_scale, s = e4m3(min(gs * (amax * 1/6), 448)),
 * q = e2m1(clamp(x * (1 / (s * (1/gs))), -6, 6)). Writes k/2 code bytes and k/16
 * scale bytes. */
void capy_nvfp4_quantize_act(const float *x, uint64_t k, float input_scale, uint8_t *codes,
			     uint8_t *scales);

/* Value of element i of a packed code row. */
static inline float capy_nvfp4_code_value(const uint8_t *codes, uint64_t i)
{
	uint8_t b = codes[i / 2];
	return capy_e2m1_values[(i & 1) ? b >> 4 : b & 15];
}

#endif
