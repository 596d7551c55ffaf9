/* nvfp4-avx2.c - NVFP4 (W4A4) with AVX2 + FMA + F16C.
 *
 * The scheme of nvfp4-avx512.c on 256-bit registers: a 256-element chunk is two halves of
 * 8 blocks (64 code bytes, the low and high 32 bytes of each prepared part); the byte dot
 * products go through vpmaddubsw + vpaddw + vpmaddwd. The last, partial chunk is copied into
 * zero-padded buffers (AVX2 has no byte-masked load).
 */
#include "cpu-impl.h"
#include "../quant/nvfp4.h"

#include <immintrin.h>
#include <math.h>

#define T256 __attribute__((target("avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))

/* --- activations ---------------------------------------------------------------------------- */

INLINE T256 __m256i e2m1_index(__m256 av)
{
	const __m256i one = _mm256_set1_epi32(1);
	__m256i idx = _mm256_setzero_si256();

#define STEP(bound, pred)                                                                          \
	idx = _mm256_add_epi32(idx, _mm256_and_si256(one, _mm256_castps_si256(_mm256_cmp_ps(      \
					   av, _mm256_set1_ps(bound), pred))))
	STEP(0.25f, _CMP_GT_OQ);
	STEP(0.75f, _CMP_GE_OQ);
	STEP(1.25f, _CMP_GT_OQ);
	STEP(1.75f, _CMP_GE_OQ);
	STEP(2.5f, _CMP_GT_OQ);
	STEP(3.5f, _CMP_GE_OQ);
	STEP(5.0f, _CMP_GT_OQ);
#undef STEP
	return idx;
}

void T256 capy_nvfp4_prep_avx2(CAPY_PREP_ARGS)
{
	const uint64_t nb = k / 16, nchunks = (k + CAPY_NV_CHUNK - 1) / CAPY_NV_CHUNK;
	const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
	const __m256i inf = _mm256_set1_epi32(0x7f7fffff);
	const __m256i mags = _mm256_setr_epi32(0, 1, 2, 3, 4, 6, 8, 12);
	float is = input_scale, g, inv_g;
	__m256i bad = _mm256_setzero_si256();

	if (is == 0) {
		__m256 mx = _mm256_setzero_ps();
		for (uint64_t j = 0; j < k; j += 8)
			mx = _mm256_max_ps(mx, _mm256_and_ps(_mm256_loadu_ps(x + j), absm));
		float m8[8], amax = 0;
		_mm256_storeu_ps(m8, mx);
		for (int t = 0; t < 8; t++)
			amax = fmaxf(amax, m8[t]);
		is = capy_nvfp4_weight_scale2(amax);
	}
	g = 1.0f / is;
	inv_g = 1.0f / g;
	if (nb % 16)
		memset(q + (nchunks - 1) * CAPY_NV_CHUNK_BYTES, 0, CAPY_NV_CHUNK_BYTES);
	for (uint64_t b = 0; b < nb; b++) {
		__m256 x0 = _mm256_loadu_ps(x + b * 16), x1 = _mm256_loadu_ps(x + b * 16 + 8);
		__m256 a0 = _mm256_and_ps(x0, absm), a1 = _mm256_and_ps(x1, absm), mx;
		__m256i q0, q1, n0, n1;
		uint8_t *c = q + (b / 16) * CAPY_NV_CHUNK_BYTES, sc;
		unsigned d = (unsigned)(b % 16);
		int32_t vals[16], sum = 0, nc, sa;
		float m8[8], amax = 0, mul;

		bad = _mm256_or_si256(bad, _mm256_cmpgt_epi32(_mm256_castps_si256(a0), inf));
		bad = _mm256_or_si256(bad, _mm256_cmpgt_epi32(_mm256_castps_si256(a1), inf));
		mx = _mm256_max_ps(a0, a1);
		_mm256_storeu_ps(m8, mx);
		for (int t = 0; t < 8; t++)
			amax = fmaxf(amax, m8[t]);
		sc = capy_nv_act_scale(amax, g, inv_g, &mul);
		/* fminf(fmaxf(x * mul, -6), 6): see nvfp4-avx512.c. */
		x0 = _mm256_mul_ps(x0, _mm256_set1_ps(mul));
		x1 = _mm256_mul_ps(x1, _mm256_set1_ps(mul));
		x0 = _mm256_min_ps(_mm256_max_ps(x0, _mm256_set1_ps(-6.0f)), _mm256_set1_ps(6.0f));
		x1 = _mm256_min_ps(_mm256_max_ps(x1, _mm256_set1_ps(-6.0f)), _mm256_set1_ps(6.0f));
		q0 = _mm256_permutevar8x32_epi32(mags, e2m1_index(_mm256_and_ps(x0, absm)));
		q1 = _mm256_permutevar8x32_epi32(mags, e2m1_index(_mm256_and_ps(x1, absm)));
		n0 = _mm256_castps_si256(_mm256_cmp_ps(x0, _mm256_setzero_ps(), _CMP_LT_OQ));
		n1 = _mm256_castps_si256(_mm256_cmp_ps(x1, _mm256_setzero_ps(), _CMP_LT_OQ));
		q0 = _mm256_sub_epi32(_mm256_xor_si256(q0, n0), n0);
		q1 = _mm256_sub_epi32(_mm256_xor_si256(q1, n1), n1);
		_mm256_storeu_si256((__m256i *)vals, q0);
		_mm256_storeu_si256((__m256i *)(vals + 8), q1);
		for (unsigned e = 0; e < 16; e++) {
			c[capy_nv_slot(d, e)] = (uint8_t)(int8_t)vals[e];
			sum += vals[e];
		}
		nc = -12 * sum;
		sa = capy_nv_scale_int(sc);
		memcpy(c + CAPY_NV_NC + 4 * d, &nc, 4);
		memcpy(c + CAPY_NV_SA + 4 * d, &sa, 4);
	}
	*gs = !_mm256_testz_si256(bad, bad) || !isfinite(g) ? NAN : g;
}

/* --- weights -------------------------------------------------------------------------------- */

/* Row-tile height and the largest group of activation rows one pass keeps in registers: per row
 * one accumulator, next to the 4 weight registers, the 2 scale registers and the constant. */
#define RT 16
#define GMAX 8
#define PREFETCH 2048 /* see nvfp4-avx512.c */

/* Half a chunk's weights, arranged as the activations (cpu-impl.h): b + 12 of the low and high
 * nibbles of the even and the odd dwords of 64 code bytes (8 blocks), block d in dword d. */
struct half {
	__m256i w[4];      /* against parts e0..e3 */
	__m256i sw0, sw1;  /* S_w of blocks 0, 2, 4, 6 and 1, 3, 5, 7 in the low dwords of qwords */
};

INLINE T256 void arrange(const uint8_t *cw, const uint8_t *sb, struct half *h)
{
	const __m256i lut = _mm256_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0,
					     12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0);
	const __m256i m0f = _mm256_set1_epi8(0x0f);
	__m256 y0 = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)cw));
	__m256 y1 = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)(cw + 32)));
	/* vshufps picks dwords 0 and 2 (1 and 3) of each 128-bit lane of y0 then y1: blocks in the
	 * order 0 1 4 5 | 2 3 6 7; vpermq puts the 64-bit pairs back in block order. */
	__m256i ev = _mm256_permute4x64_epi64(_mm256_castps_si256(_mm256_shuffle_ps(y0, y1, 0x88)), 0xd8);
	__m256i od = _mm256_permute4x64_epi64(_mm256_castps_si256(_mm256_shuffle_ps(y0, y1, 0xdd)), 0xd8);
	__m128i s = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)sb));
	__m256i sw;

	h->w[0] = _mm256_shuffle_epi8(lut, _mm256_and_si256(ev, m0f));
	h->w[1] = _mm256_shuffle_epi8(lut, _mm256_and_si256(od, m0f));
	h->w[2] = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(ev, 4), m0f));
	h->w[3] = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(od, 4), m0f));
	/* E4M3 -> S through F16: see nvfp4-avx512.c. */
	s = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(s, _mm_set1_epi16(0x7f)), 7),
			 _mm_slli_epi16(_mm_and_si128(s, _mm_set1_epi16(0x80)), 8));
	sw = _mm256_cvttps_epi32(_mm256_mul_ps(_mm256_cvtph_ps(s), _mm256_set1_ps(0x1p17f)));
	h->sw0 = sw;
	h->sw1 = _mm256_srli_epi64(sw, 32);
}

/* Half a chunk of one activation row (a: the chunk plus 32 for the high half) against h: the
 * 8 exact block sums in 8 dwords, times S_a, times S_w into 4 int64. */
INLINE T256 __m256i step(__m256i acc, const struct half *h, const uint8_t *a)
{
	__m256i p0 = _mm256_maddubs_epi16(h->w[0], _mm256_load_si256((const __m256i *)a));
	__m256i p1 = _mm256_maddubs_epi16(h->w[1], _mm256_load_si256((const __m256i *)(a + 64)));
	__m256i p2 = _mm256_maddubs_epi16(h->w[2], _mm256_load_si256((const __m256i *)(a + 128)));
	__m256i p3 = _mm256_maddubs_epi16(h->w[3], _mm256_load_si256((const __m256i *)(a + 192)));
	/* 8 products of at most 24 * 12 per int16: no overflow. */
	__m256i p = _mm256_add_epi16(_mm256_add_epi16(p0, p1), _mm256_add_epi16(p2, p3));
	__m256i t = _mm256_add_epi32(_mm256_madd_epi16(p, _mm256_set1_epi16(1)),
				     _mm256_load_si256((const __m256i *)(a + CAPY_NV_NC)));

	t = _mm256_mullo_epi32(t, _mm256_load_si256((const __m256i *)(a + CAPY_NV_SA)));
	acc = _mm256_add_epi64(acc, _mm256_mul_epi32(t, h->sw0));
	return _mm256_add_epi64(acc, _mm256_mul_epi32(_mm256_srli_epi64(t, 32), h->sw1));
}

INLINE T256 int64_t hsum64(__m256i v)
{
	__m128i s = _mm_add_epi64(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));

	return _mm_cvtsi128_si64(s) + _mm_extract_epi64(s, 1);
}

/* The halves of one chunk (code bytes cw, scale bytes sw) that have data in them. */
INLINE T256 void chunk(__m256i *acc, const uint8_t *cw, const uint8_t *sw, const uint8_t *a,
		       uint64_t qrow, int halves, const int G)
{
	for (int hf = 0; hf < halves; hf++) {
		struct half h;
		arrange(cw + 64 * hf, sw + 8 * hf, &h);
#pragma GCC unroll 8
		for (int g = 0; g < G; g++)
			acc[g] = step(acc[g], &h, a + g * qrow + 32 * hf);
	}
}

INLINE T256 void row(const struct capy_linear *w, const uint8_t *q, uint64_t qrow,
		     const double *f, uint64_t i0, const int G, float *y, uint64_t r)
{
	const uint64_t k = w->k, nb = k / 16, full = nb / 16, rest = nb % 16;
	const uint8_t *cw = w->codes + r * (k / 2), *sw = w->scales + r * nb;
	const uint8_t *a = q + i0 * qrow;
	__m256i acc[GMAX];
	uint64_t c = 0;

#pragma GCC unroll 8
	for (int g = 0; g < G; g++)
		acc[g] = _mm256_setzero_si256();
	for (; c < full; c++) {
		_mm_prefetch((const char *)(cw + c * 128 + PREFETCH), _MM_HINT_T0);
		_mm_prefetch((const char *)(cw + c * 128 + 64 + PREFETCH), _MM_HINT_T0);
		if (!(c & 3))
			_mm_prefetch((const char *)(sw + c * 16 + PREFETCH / 8), _MM_HINT_T0);
		chunk(acc, cw + c * 128, sw + c * 16, a + c * CAPY_NV_CHUNK_BYTES, qrow, 2, G);
	}
	if (rest) {
		/* Codes past the row read as 0 (b + 12 = 12) against prepared zeros. */
		uint8_t codes[128] = { 0 }, scales[16] = { 0 };
		memcpy(codes, cw + c * 128, rest * 8);
		memcpy(scales, sw + c * 16, rest);
		chunk(acc, codes, scales, a + c * CAPY_NV_CHUNK_BYTES, qrow, rest > 8 ? 2 : 1, G);
	}
#pragma GCC unroll 8
	for (int g = 0; g < G; g++)
		y[(i0 + g) * w->n + r] = capy_nv_finish(hsum64(acc[g]), f[g]);
}

#define NV_T T256
#define NV_ROW row
#define NV_ROWS rows
#include "nvfp4-impl.h"

void capy_nvfp4_avx2(CAPY_NVFP4_ARGS)
{
	rows(w, q, gs, m, nchunks, scale2, y, r0, r1);
}
