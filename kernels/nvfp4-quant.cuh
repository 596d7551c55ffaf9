// nvfp4-quant.cuh - one activation row's NVFP4 quantization in pieces (capy_nvfp4_quantize_act's
// float operations one by one with _rn intrinsics, so nvcc can neither contract nor approximate
// them): the row's global scale from its input_scale (or amax), then per 16-block the E4M3
// scale and the 2*e2m1 codes. linear.cu's k_quant and moe.cu's router-and-quantize kernel both
// quantize with these, so the two give the same bits. CUDA C++; kernels/ only.
#ifndef CAPY_NVFP4_QUANT_CUH
#define CAPY_NVFP4_QUANT_CUH

#include "linear-impl.h" /* cpu_expf, scale_int */

#include <stdint.h>

/* capy_f32_to_e4m3: round to nearest even, saturating to NaN (0x7f) from 480 up. */
static __device__ __forceinline__ uint32_t f32_to_e4m3(float f)
{
	uint32_t u = __float_as_uint(f), sign = (u >> 24) & 0x80, a = u & 0x7fffffff, e, keep, rest;

	if (a >= 0x43f00000)
		return sign | 0x7f;
	if (a < 0x3c800000) /* subnormal: RNE(|f| * 2^9), exact scaling */
		return sign | (uint32_t)rintf(__fmul_rn(__uint_as_float(a), 512.0f));
	e = (a >> 23) - 127 + 7;
	keep = (a >> 20) & 7;
	rest = a & 0xfffff;
	if (rest > 0x80000 || (rest == 0x80000 && (keep & 1))) {
		if (++keep == 8) {
			keep = 0;
			e++;
		}
	}
	return sign | (e << 3) | keep;
}

/* 2 * e2m1 of x by capy_e2m1_code's rule (ties to the even mantissa), as a signed integer. */
static __device__ __forceinline__ int e2m1_a(float x)
{
	float a = fabsf(x);
	int ord = (0.25f < a) + (0.75f < a) + (1.25f < a) + (1.75f < a) + (2.5f < a) + (3.5f < a) + (5.0f < a);
	int mag;

	if (a == 0.75f || a == 1.75f || a == 3.5f)
		ord++;
	mag = ord < 4 ? ord : (2 + (ord & 1)) << ((ord >> 1) - 1); /* 0 1 2 3 4 6 8 12 */
	return x < 0 ? -mag : mag;
}

/* Element j of the row to quantize: x itself, or (swiglu) silu(gate) * up of a [gate | up] row
 * of 2k values, exactly as moe.cu's k_swiglu computes it (so fusing the two changes no bits).
 * CG: loads that skip the L1 (values other blocks of the running kernel wrote). */
template <bool CG = false>
static __device__ __forceinline__ float quant_in(const float *xr, uint64_t j, uint64_t k, bool swiglu)
{
	if (!swiglu)
		return CG ? __ldcg(xr + j) : xr[j];
	const float g = CG ? __ldcg(xr + j) : xr[j], u = CG ? __ldcg(xr + k + j) : xr[k + j];
	return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, cpu_expf(-g))), u);
}

/* The row's global scale gs = 1 / input_scale and its inverse; input_scale 0 means dynamic:
 * capy_nvfp4_weight_scale2(amax) of the row. */
static __device__ __forceinline__ void nv_row_scale(float is, float amax, float *gs, float *inv_gs)
{
	if (is == 0) {
		is = __fdiv_rn(amax, 2688.0f);
		if (!(is > 0))
			is = 1.0f;
	}
	*gs = __fdiv_rn(1.0f, is);
	*inv_gs = __fdiv_rn(1.0f, *gs);
}

/* What lin_act.gs holds for the row: gs, or NaN for a row with Inf/NaN or no finite scale. */
static __device__ __forceinline__ float nv_row_gs(float gs, int bad)
{
	return (bad || !isfinite(gs)) ? __uint_as_float(0x7fc00000) : gs;
}

/* A 16-block's E4M3 scale as the integer si = value * 2^9 and the factor os its values are
 * multiplied by before rounding to e2m1. */
static __device__ __forceinline__ void nv_block_scale(const float v[16], float gs, float inv_gs, int32_t *si, float *os)
{
	const float sixth = (float)(1.0 / 6.0);
	float bam = 0, s, t;

	for (int e = 0; e < 16; e++)
		bam = fmaxf(bam, fabsf(v[e]));
	s = __fmul_rn(gs, __fmul_rn(bam, sixth));
	if (s > 448.0f)
		s = 448.0f;
	*si = scale_int(f32_to_e4m3(s));
	/* e4m3_to_f32 of the scale byte is exactly si * 2^-9 wherever the result matters (finite
	 * rows with a finite gs never give the NaN byte). */
	t = __fmul_rn(__fmul_rn((float)*si, 0x1p-9f), inv_gs);
	*os = t == 0 ? 0.0f : __fdiv_rn(1.0f, t);
}

/* The block's 16 codes 2*e2m1(v * os) as int8, packed little-endian. */
static __device__ __forceinline__ uint4 nv_block_codes(const float v[16], float os)
{
	uint32_t word[4] = { 0, 0, 0, 0 };

	for (int e = 0; e < 16; e++) {
		const float q = fminf(fmaxf(__fmul_rn(v[e], os), -6.0f), 6.0f);
		word[e / 4] |= ((uint32_t)e2m1_a(q) & 0xff) << (8 * (e % 4));
	}
	return make_uint4(word[0], word[1], word[2], word[3]);
}

#endif
