/* nvfp4-avx512-impl.h - the AVX-512 NVFP4 row kernel, included by nvfp4-avx512.c once per dot
 * product instruction. It expects NV_T (the target attribute), NV_STEP (one activation row's
 * chunk) and NV_NAME(x) (a name suffix), and defines row_<suffix> and, through nvfp4-impl.h,
 * the driver rows_<suffix>. */

/* y for weight row r and activation rows i0 .. i0+G-1 (f: their global factors). */
INLINE NV_T void NV_NAME(row)(const struct capy_linear *w, const uint8_t *q, uint64_t qrow,
			      const double *f, uint64_t i0, const int G, float *y, uint64_t r)
{
	const uint64_t k = w->k, nb = k / 16, full = nb / 16, rest = nb % 16;
	const uint8_t *cw = w->codes + r * (k / 2), *sw = w->scales + r * nb;
	const uint8_t *a = q + i0 * qrow;
	__m512i acc[GMAX];
	struct wchunk wc;
	uint64_t c = 0;

#pragma GCC unroll 8
	for (int g = 0; g < G; g++)
		acc[g] = _mm512_setzero_si512();
	for (; c < full; c++) {
		_mm_prefetch((const char *)(cw + c * 128 + PREFETCH), _MM_HINT_T0);
		_mm_prefetch((const char *)(cw + c * 128 + 64 + PREFETCH), _MM_HINT_T0);
		if (!(c & 3))
			_mm_prefetch((const char *)(sw + c * 16 + PREFETCH / 8), _MM_HINT_T0);
		arrange(_mm512_loadu_si512(cw + c * 128), _mm512_loadu_si512(cw + c * 128 + 64),
			_mm_loadu_si128((const __m128i *)(sw + c * 16)), &wc);
#pragma GCC unroll 8
		for (int g = 0; g < G; g++)
			acc[g] = NV_STEP(acc[g], &wc, a + g * qrow + c * CAPY_NV_CHUNK_BYTES);
	}
	if (rest) {
		/* Codes and scales past the row load as 0 (b + 12 = 12, S_w = 0) against prepared
		 * zeros. rest * 8 code bytes: up to 64 in the first register, the others in the
		 * second. */
		uint64_t cb = rest * 8;
		__mmask64 m0 = cb >= 64 ? ~0ull : (1ull << cb) - 1;
		__mmask64 m1 = cb > 64 ? (1ull << (cb - 64)) - 1 : 0;
		arrange(_mm512_maskz_loadu_epi8(m0, cw + c * 128),
			_mm512_maskz_loadu_epi8(m1, cw + c * 128 + 64),
			_mm_maskz_loadu_epi8((__mmask16)((1u << rest) - 1), sw + c * 16), &wc);
#pragma GCC unroll 8
		for (int g = 0; g < G; g++)
			acc[g] = NV_STEP(acc[g], &wc, a + g * qrow + c * CAPY_NV_CHUNK_BYTES);
	}
#pragma GCC unroll 8
	for (int g = 0; g < G; g++)
		y[(i0 + g) * w->n + r] = capy_nv_finish(_mm512_reduce_add_epi64(acc[g]), f[g]);
}

#define NV_ROW NV_NAME(row)
#define NV_ROWS NV_NAME(rows)
#include "nvfp4-impl.h"
#undef NV_ROW
#undef NV_ROWS
