/* nvfp4-avx2.c - NVFP4 (W4A4) with AVX2 + FMA + F16C.
 *
 * The scheme of nvfp4-avx512.c on 256-bit registers: a 128-element chunk is two halves of
 * 4 blocks (32 code bytes); the byte dot products go through vpmaddubsw + vpmaddwd. The last,
 * partial chunk is copied into zero-padded buffers (AVX2 has no byte-masked load).
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
	if (nb % 8)
		memset(q + (nchunks - 1) * CAPY_NV_CHUNK_BYTES, 0, CAPY_NV_CHUNK_BYTES);
	for (uint64_t b = 0; b < nb; b++) {
		__m256 x0 = _mm256_loadu_ps(x + b * 16), x1 = _mm256_loadu_ps(x + b * 16 + 8);
		__m256 a0 = _mm256_and_ps(x0, absm), a1 = _mm256_and_ps(x1, absm), mx;
		__m256i q0, q1, n0, n1;
		uint8_t *c = q + (b / 8) * CAPY_NV_CHUNK_BYTES, sc;
		unsigned j = (unsigned)(b % 8);
		int32_t vals[16], sum = 0, nc[2] = { 0, 0 }, sa[2] = { 0, 0 };
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
		for (unsigned t = 0; t < 8; t++) {
			c[8 * j + t] = (uint8_t)(int8_t)vals[2 * t];
			c[64 + 8 * j + t] = (uint8_t)(int8_t)vals[2 * t + 1];
			sum += vals[2 * t] + vals[2 * t + 1];
		}
		nc[0] = -12 * sum;
		sa[0] = capy_nv_scale_int(sc);
		memcpy(c + 128 + 8 * j, nc, 8);
		memcpy(c + 192 + 8 * j, sa, 8);
	}
	*gs = !_mm256_testz_si256(bad, bad) || !isfinite(g) ? NAN : g;
}

/* --- weights -------------------------------------------------------------------------------- */

#define RT 16
#define GMAX 4
#define PREFETCH 2048 /* see nvfp4-avx512.c */

INLINE T256 void unpack(__m256i v, __m256i *lo, __m256i *hi)
{
	const __m256i lut = _mm256_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0,
					     12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0);
	const __m256i m0f = _mm256_set1_epi8(0x0f);

	*lo = _mm256_shuffle_epi8(lut, _mm256_and_si256(v, m0f));
	*hi = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v, 4), m0f));
}

/* A chunk's 8 E4M3 bytes -> S of blocks 0-3 and 4-7 as qwords (low dwords; see
 * nvfp4-avx512.c). */
INLINE T256 void wscale(const uint8_t *sb, __m256i *s0, __m256i *s1)
{
	__m128i h = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)sb)), d;

	h = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7f)), 7),
			 _mm_slli_epi16(_mm_and_si128(h, _mm_set1_epi16(0x80)), 8));
	__m256i i = _mm256_cvttps_epi32(_mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(0x1p17f)));
	d = _mm256_castsi256_si128(i);
	*s0 = _mm256_cvtepi32_epi64(d);
	*s1 = _mm256_cvtepi32_epi64(_mm256_extracti128_si256(i, 1));
}

/* Half h of one activation row's chunk a against the unpacked weights. */
INLINE T256 __m256i step(__m256i acc, __m256i wlo, __m256i whi, __m256i sw, const uint8_t *a)
{
	__m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(wlo, _mm256_load_si256((const __m256i *)a)),
				     _mm256_maddubs_epi16(whi, _mm256_load_si256((const __m256i *)(a + 64))));
	__m256i t = _mm256_add_epi32(_mm256_madd_epi16(p, _mm256_set1_epi16(1)),
				     _mm256_load_si256((const __m256i *)(a + 128)));

	t = _mm256_add_epi32(t, _mm256_srli_epi64(t, 32));
	t = _mm256_mullo_epi32(t, _mm256_load_si256((const __m256i *)(a + 192)));
	return _mm256_add_epi64(acc, _mm256_mul_epi32(t, sw));
}

INLINE T256 int64_t hsum64(__m256i v)
{
	__m128i s = _mm_add_epi64(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));

	return _mm_cvtsi128_si64(s) + _mm_extract_epi64(s, 1);
}

/* All halves of one chunk (code bytes cw, scale bytes sw) with data in them. */
INLINE T256 void chunk(__m256i *acc, const uint8_t *cw, const uint8_t *sw, const uint8_t *a,
		       uint64_t qrow, int halves, const int G)
{
	__m256i s[2];

	wscale(sw, &s[0], &s[1]);
	for (int h = 0; h < halves; h++) {
		__m256i wlo, whi;
		unpack(_mm256_loadu_si256((const __m256i *)(cw + 32 * h)), &wlo, &whi);
#pragma GCC unroll 4
		for (int g = 0; g < G; g++)
			acc[g] = step(acc[g], wlo, whi, s[h], a + g * qrow + 32 * h);
	}
}

INLINE T256 void row(const struct capy_linear *w, const uint8_t *q, uint64_t qrow,
		     const double *f, uint64_t i0, const int G, float *y, uint64_t r)
{
	const uint64_t k = w->k, nb = k / 16, full = nb / 8, rest = nb % 8;
	const uint8_t *cw = w->codes + r * (k / 2), *sw = w->scales + r * nb;
	const uint8_t *a = q + i0 * qrow;
	__m256i acc[GMAX];
	uint64_t c = 0;

#pragma GCC unroll 4
	for (int g = 0; g < G; g++)
		acc[g] = _mm256_setzero_si256();
	for (; c < full; c++) {
		_mm_prefetch((const char *)(cw + c * 64 + PREFETCH), _MM_HINT_T0);
		if (!(c & 7))
			_mm_prefetch((const char *)(sw + c * 8 + PREFETCH / 8), _MM_HINT_T0);
		chunk(acc, cw + c * 64, sw + c * 8, a + c * CAPY_NV_CHUNK_BYTES, qrow, 2, G);
	}
	if (rest) {
		uint8_t codes[64] = { 0 }, scales[8] = { 0 };
		memcpy(codes, cw + c * 64, rest * 8);
		memcpy(scales, sw + c * 8, rest);
		chunk(acc, codes, scales, a + c * CAPY_NV_CHUNK_BYTES, qrow, rest > 4 ? 2 : 1, G);
	}
#pragma GCC unroll 4
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
