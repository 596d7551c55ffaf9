/* nvfp4-avx512.c - NVFP4 (W4A4) with AVX-512 F+BW+VL, with and without VNNI.
 *
 * Activation preparation: one 16-element block per register, vLLM's rule with the same float
 * operations as capy_nvfp4_quantize_act (the block scale itself goes through the shared scalar
 * capy_nv_act_scale), E2M1 rounding as a count of threshold compares.
 *
 * Row sums, per chunk of 8 blocks (64 code bytes): the codes become b + 12 (two vpshufb), the
 * unsigned x signed byte dot products with the prepared activations give one int32 per 4
 * elements (vpdpbusd, or vpmaddubsw + vpmaddwd without VNNI), starting from -12 * sum(a) per
 * block; adding dword pairs gives each block's exact sum in the low dword of a qword, vpmulld by
 * the activation scale S_a (|product| < 2^30) and vpmuldq by the weight scale S_w give exact
 * int64 block terms, added into one int64 accumulator per activation row. The weight scale
 * integers come from the E4M3 bytes through F16 (the byte's 7 low bits shifted into an F16
 * exponent and mantissa is the value * 2^-8, subnormals included), times 2^17, converted.
 *
 * The row kernel is compiled twice from nvfp4-avx512-impl.h (target attributes must be a
 * superset along the inlining chain, so the VNNI variant cannot share the non-VNNI code).
 */
#include "cpu-impl.h"
#include "../quant/nvfp4.h"

#include <immintrin.h>
#include <math.h>

#define T512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")))
#define T512V __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define INLINE static inline __attribute__((always_inline))

/* --- activations ---------------------------------------------------------------------------- */

void T512 capy_nvfp4_prep_avx512(CAPY_PREP_ARGS)
{
	const uint64_t nb = k / 16, nchunks = (k + CAPY_NV_CHUNK - 1) / CAPY_NV_CHUNK;
	const __m512i inf = _mm512_set1_epi32(0x7f800000), one = _mm512_set1_epi32(1);
	const __m512i mags = _mm512_setr_epi32(0, 1, 2, 3, 4, 6, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0);
	const __m128i evenodd = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
	float is = input_scale, g, inv_g;
	__mmask16 bad = 0;

	if (is == 0) {
		__m512 mx = _mm512_setzero_ps();
		for (uint64_t b = 0; b < nb; b++)
			mx = _mm512_max_ps(mx, _mm512_abs_ps(_mm512_loadu_ps(x + b * 16)));
		is = capy_nvfp4_weight_scale2(_mm512_reduce_max_ps(mx));
	}
	g = 1.0f / is;
	inv_g = 1.0f / g;
	if (nb % 8)
		memset(q + (nchunks - 1) * CAPY_NV_CHUNK_BYTES, 0, CAPY_NV_CHUNK_BYTES);
	for (uint64_t b = 0; b < nb; b++) {
		__m512 xv = _mm512_loadu_ps(x + b * 16), ax = _mm512_abs_ps(xv), v, av;
		__m512i idx = _mm512_setzero_si512(), qv;
		uint8_t *c = q + (b / 8) * CAPY_NV_CHUNK_BYTES, sc;
		unsigned j = (unsigned)(b % 8);
		int32_t nc[2] = { 0, 0 }, sa[2] = { 0, 0 };
		__m128i bytes;
		float mul;

		bad |= _mm512_cmp_epi32_mask(_mm512_castps_si512(ax), inf, _MM_CMPINT_NLT);
		sc = capy_nv_act_scale(_mm512_reduce_max_ps(ax), g, inv_g, &mul);
		/* fminf(fmaxf(x * mul, -6), 6): vmaxps returns its second operand for a NaN, as
		 * fmaxf returns the non-NaN one. */
		v = _mm512_mul_ps(xv, _mm512_set1_ps(mul));
		v = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(-6.0f)), _mm512_set1_ps(6.0f));
		av = _mm512_abs_ps(v);
		/* capy_e2m1_code: ties at 0.75, 1.75 and 3.5 go up (even mantissa), the others down. */
		idx = _mm512_mask_add_epi32(idx, _mm512_cmp_ps_mask(av, _mm512_set1_ps(0.25f), _CMP_GT_OQ), idx, one);
		idx = _mm512_mask_add_epi32(idx, _mm512_cmp_ps_mask(av, _mm512_set1_ps(0.75f), _CMP_GE_OQ), idx, one);
		idx = _mm512_mask_add_epi32(idx, _mm512_cmp_ps_mask(av, _mm512_set1_ps(1.25f), _CMP_GT_OQ), idx, one);
		idx = _mm512_mask_add_epi32(idx, _mm512_cmp_ps_mask(av, _mm512_set1_ps(1.75f), _CMP_GE_OQ), idx, one);
		idx = _mm512_mask_add_epi32(idx, _mm512_cmp_ps_mask(av, _mm512_set1_ps(2.5f), _CMP_GT_OQ), idx, one);
		idx = _mm512_mask_add_epi32(idx, _mm512_cmp_ps_mask(av, _mm512_set1_ps(3.5f), _CMP_GE_OQ), idx, one);
		idx = _mm512_mask_add_epi32(idx, _mm512_cmp_ps_mask(av, _mm512_set1_ps(5.0f), _CMP_GT_OQ), idx, one);
		qv = _mm512_permutexvar_epi32(idx, mags);
		qv = _mm512_mask_sub_epi32(qv, _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ),
					   _mm512_setzero_si512(), qv);
		nc[0] = -12 * _mm512_reduce_add_epi32(qv);
		sa[0] = capy_nv_scale_int(sc);
		bytes = _mm_shuffle_epi8(_mm512_cvtepi32_epi8(qv), evenodd);
		_mm_storel_epi64((__m128i *)(c + 8 * j), bytes);
		_mm_storel_epi64((__m128i *)(c + 64 + 8 * j), _mm_unpackhi_epi64(bytes, bytes));
		memcpy(c + 128 + 8 * j, nc, 8);
		memcpy(c + 192 + 8 * j, sa, 8);
	}
	*gs = bad || !isfinite(g) ? NAN : g;
}

/* --- weights -------------------------------------------------------------------------------- */

/* Row-tile height and the largest group of activation rows one pass keeps in registers. */
#define RT 16
#define GMAX 8
/* Software prefetch distance in code bytes (scales: an eighth of it). The hardware prefetcher
 * alone leaves the m = 1 kernel at ~52 % of the read bandwidth, 2 KiB ahead gives ~66 %
 * (1, 4 and 8 KiB: less; docs/perf.md). Prefetches past the matrix never fault. */
#define PREFETCH 2048

/* 64 code bytes -> b + 12 of the low nibbles (even elements) and of the high nibbles. */
INLINE T512 void unpack(__m512i v, __m512i *lo, __m512i *hi)
{
	const __m512i lut = _mm512_broadcast_i32x4(
		_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
	const __m512i m0f = _mm512_set1_epi8(0x0f);

	*lo = _mm512_shuffle_epi8(lut, _mm512_and_si512(v, m0f));
	*hi = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), m0f));
}

/* 8 E4M3 bytes (low half of b) -> 8 qwords whose low dwords are S = value * 2^9. */
INLINE T512 __m512i wscale(__m128i b)
{
	__m128i h = _mm_cvtepu8_epi16(b);
	__m256 f;

	h = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7f)), 7),
			 _mm_slli_epi16(_mm_and_si128(h, _mm_set1_epi16(0x80)), 8));
	f = _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(0x1p17f));
	return _mm512_cvtepi32_epi64(_mm256_cvttps_epi32(f));
}

/* 16 E4M3 bytes -> S of blocks 0-7 and 8-15 (two chunks share the conversion). */
INLINE T512 void wscale16(__m128i b, __m512i *s0, __m512i *s1)
{
	__m256i h = _mm256_cvtepu8_epi16(b);
	__m512i d;

	h = _mm256_or_si256(_mm256_slli_epi16(_mm256_and_si256(h, _mm256_set1_epi16(0x7f)), 7),
			    _mm256_slli_epi16(_mm256_and_si256(h, _mm256_set1_epi16(0x80)), 8));
	d = _mm512_cvttps_epi32(_mm512_mul_ps(_mm512_cvtph_ps(h), _mm512_set1_ps(0x1p17f)));
	*s0 = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(d));
	*s1 = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(d, 1));
}

/* The block sums (pairs of dwords) t, scaled exactly into int64 and added to acc. */
INLINE T512 __m512i scale_add(__m512i acc, __m512i t, __m512i sa, __m512i sw)
{
	t = _mm512_add_epi32(t, _mm512_srli_epi64(t, 32));
	t = _mm512_mullo_epi32(t, sa);
	return _mm512_add_epi64(acc, _mm512_mul_epi32(t, sw));
}

/* One activation row's chunk a against the unpacked weights. */
INLINE T512 __m512i step_bw(__m512i acc, __m512i wlo, __m512i whi, __m512i sw, const uint8_t *a)
{
	__m512i p = _mm512_add_epi16(_mm512_maddubs_epi16(wlo, _mm512_load_si512(a)),
				     _mm512_maddubs_epi16(whi, _mm512_load_si512(a + 64)));
	__m512i t = _mm512_add_epi32(_mm512_madd_epi16(p, _mm512_set1_epi16(1)),
				     _mm512_load_si512(a + 128));

	return scale_add(acc, t, _mm512_load_si512(a + 192), sw);
}

INLINE T512V __m512i step_vnni(__m512i acc, __m512i wlo, __m512i whi, __m512i sw,
			       const uint8_t *a)
{
	__m512i t = _mm512_load_si512(a + 128);

	t = _mm512_dpbusd_epi32(t, wlo, _mm512_load_si512(a));
	t = _mm512_dpbusd_epi32(t, whi, _mm512_load_si512(a + 64));
	return scale_add(acc, t, _mm512_load_si512(a + 192), sw);
}

#define NV_T T512
#define NV_STEP step_bw
#define NV_NAME(x) x##_bw
#include "nvfp4-avx512-impl.h"
#undef NV_T
#undef NV_STEP
#undef NV_NAME

#define NV_T T512V
#define NV_STEP step_vnni
#define NV_NAME(x) x##_vnni
#include "nvfp4-avx512-impl.h"
#undef NV_T
#undef NV_STEP
#undef NV_NAME

void capy_nvfp4_avx512(CAPY_NVFP4_ARGS)
{
	rows_bw(w, q, gs, m, nchunks, scale2, y, r0, r1);
}

void capy_nvfp4_avx512_vnni(CAPY_NVFP4_ARGS)
{
	rows_vnni(w, q, gs, m, nchunks, scale2, y, r0, r1);
}
