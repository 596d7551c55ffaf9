/* nvfp4-avx512.c - NVFP4 (W4A4) with AVX-512 F+BW+VL, with and without VNNI.
 *
 * Activation preparation: one 16-element block per register, vLLM's rule with the same float
 * operations as capy_nvfp4_quantize_act (the block scale itself goes through the shared scalar
 * capy_nv_act_scale), E2M1 rounding as a count of threshold compares.
 *
 * Row sums, per chunk of 16 blocks (128 code bytes), once per weight row: two vpermt2d take
 * the even and the odd dwords of the code bytes, four vpshufb turn their nibbles into b + 12
 * (the layout of cpu-impl.h: block d in dword d), and the 16 weight scales become integers.
 * Then per activation row: four unsigned x signed byte dot products (vpdpbusd, or vpmaddubsw +
 * vpaddw + vpmaddwd without VNNI) starting from -12 * sum(a) give the 16 exact block sums,
 * vpmulld by the activation scale S_a (|product| < 2^30) and two vpmuldq by the weight scale S_w
 * (even and odd blocks) give exact int64 block terms, added into one int64 accumulator per
 * activation row.
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
	if (nb % 16)
		memset(q + (nchunks - 1) * CAPY_NV_CHUNK_BYTES, 0, CAPY_NV_CHUNK_BYTES);
	for (uint64_t b = 0; b < nb; b++) {
		__m512 xv = _mm512_loadu_ps(x + b * 16), ax = _mm512_abs_ps(xv), v, av;
		__m512i idx = _mm512_setzero_si512(), qv;
		uint8_t *c = q + (b / 16) * CAPY_NV_CHUNK_BYTES + 4 * (b % 16), sc;
		int32_t nc, sa, part[4];
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
		nc = -12 * _mm512_reduce_add_epi32(qv);
		sa = capy_nv_scale_int(sc);
		/* Elements 0 2 4 6 | 8 10 12 14 | 1 3 5 7 | 9 11 13 15: the dwords of parts e0..e3. */
		bytes = _mm_shuffle_epi8(_mm512_cvtepi32_epi8(qv), evenodd);
		_mm_storeu_si128((__m128i *)part, bytes);
		for (int t = 0; t < 4; t++)
			memcpy(c + 64 * t, &part[t], 4);
		memcpy(c + CAPY_NV_NC, &nc, 4);
		memcpy(c + CAPY_NV_SA, &sa, 4);
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

/* One chunk's weights (128 code bytes, 16 blocks) arranged as the activations (cpu-impl.h):
 * b + 12 of the low and high nibbles of the even and the odd dwords, block d in dword d, and
 * S_w of the even and odd blocks in the low dwords of qwords. */
struct wchunk {
	__m512i w[4];
	__m512i sw0, sw1;
};

/* z0, z1: the chunk's code bytes; sb: its 16 E4M3 scale bytes. The scale integers come through
 * F16: the byte's 7 low bits shifted into an F16 exponent and mantissa give value * 2^-8,
 * subnormals included; times 2^17 is S. */
INLINE T512 void arrange(__m512i z0, __m512i z1, __m128i sb, struct wchunk *c)
{
	const __m512i lut = _mm512_broadcast_i32x4(
		_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
	const __m512i m0f = _mm512_set1_epi8(0x0f);
	const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
	const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
	__m512i ev = _mm512_permutex2var_epi32(z0, even, z1), od = _mm512_permutex2var_epi32(z0, odd, z1);
	__m256i h = _mm256_cvtepu8_epi16(sb);
	__m512i d;

	c->w[0] = _mm512_shuffle_epi8(lut, _mm512_and_si512(ev, m0f));
	c->w[1] = _mm512_shuffle_epi8(lut, _mm512_and_si512(od, m0f));
	c->w[2] = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(ev, 4), m0f));
	c->w[3] = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(od, 4), m0f));
	h = _mm256_or_si256(_mm256_slli_epi16(_mm256_and_si256(h, _mm256_set1_epi16(0x7f)), 7),
			    _mm256_slli_epi16(_mm256_and_si256(h, _mm256_set1_epi16(0x80)), 8));
	d = _mm512_cvttps_epi32(_mm512_mul_ps(_mm512_cvtph_ps(h), _mm512_set1_ps(0x1p17f)));
	c->sw0 = d;
	c->sw1 = _mm512_srli_epi64(d, 32);
}

/* The 16 exact block sums t (one per dword), times S_a (|product| < 2^30), times S_w into
 * 8 int64, added to acc. */
INLINE T512 __m512i scale_add(__m512i acc, __m512i t, const uint8_t *a, const struct wchunk *c)
{
	t = _mm512_mullo_epi32(t, _mm512_load_si512(a + CAPY_NV_SA));
	acc = _mm512_add_epi64(acc, _mm512_mul_epi32(t, c->sw0));
	return _mm512_add_epi64(acc, _mm512_mul_epi32(_mm512_srli_epi64(t, 32), c->sw1));
}

/* One activation row's chunk a against the arranged weights. */
INLINE T512 __m512i step_bw(__m512i acc, const struct wchunk *c, const uint8_t *a)
{
	/* 8 products of at most 24 * 12 per int16: no overflow. */
	__m512i p = _mm512_add_epi16(
		_mm512_add_epi16(_mm512_maddubs_epi16(c->w[0], _mm512_load_si512(a)),
				 _mm512_maddubs_epi16(c->w[1], _mm512_load_si512(a + 64))),
		_mm512_add_epi16(_mm512_maddubs_epi16(c->w[2], _mm512_load_si512(a + 128)),
				 _mm512_maddubs_epi16(c->w[3], _mm512_load_si512(a + 192))));
	__m512i t = _mm512_add_epi32(_mm512_madd_epi16(p, _mm512_set1_epi16(1)),
				     _mm512_load_si512(a + CAPY_NV_NC));

	return scale_add(acc, t, a, c);
}

INLINE T512V __m512i step_vnni(__m512i acc, const struct wchunk *c, const uint8_t *a)
{
	__m512i t = _mm512_load_si512(a + CAPY_NV_NC);

	t = _mm512_dpbusd_epi32(t, c->w[0], _mm512_load_si512(a));
	t = _mm512_dpbusd_epi32(t, c->w[1], _mm512_load_si512(a + 64));
	t = _mm512_dpbusd_epi32(t, c->w[2], _mm512_load_si512(a + 128));
	t = _mm512_dpbusd_epi32(t, c->w[3], _mm512_load_si512(a + 192));
	return scale_add(acc, t, a, c);
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
