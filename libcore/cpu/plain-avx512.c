/* plain-avx512.c - F32/F16/BF16 weights with AVX-512 F+BW+VL (16 float lanes).
 *
 * Summation order of one output element, whatever the tile it is computed in: lane l of one
 * accumulator takes elements j = l (mod 16) in increasing j with FMA (the last, partial chunk
 * through a zero-masked load), then the 16 lanes are added in a fixed tree (hsum). Tiles of
 * up to 4 weight rows x 4 activation rows only share loads; each element keeps its own
 * accumulator, so a row's result depends neither on the row range, nor on m (driver: plain-impl.h).
 *
 * The weights are widened exactly (F16 with vcvtph2ps, BF16 by a 16-bit shift) and the
 * activations stay float32: vdpbf16ps would round x to BF16 and change the numbers against the
 * float32 reference, so it is not used.
 *
 * The functions carry target attributes (the library is built for x86-64-v2); the dispatcher in
 * isa.c calls them only when the CPU has AVX-512.
 */
#include "cpu-impl.h"

#include <immintrin.h>

#define T512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")))
#define INLINE static inline __attribute__((always_inline))


INLINE T512 __m512 load_w(const void *row, uint64_t j, enum capy_dtype dt, __mmask16 mk)
{
	if (dt == CAPY_DT_F32)
		return _mm512_maskz_loadu_ps(mk, (const float *)row + j);
	__m256i h = _mm256_maskz_loadu_epi16(mk, (const uint16_t *)row + j);
	if (dt == CAPY_DT_F16)
		return _mm512_cvtph_ps(h);
	return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

INLINE T512 float hsum(__m512 v)
{
	__m256 a = _mm256_add_ps(_mm512_castps512_ps256(v),
				 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
	__m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));

	b = _mm_add_ps(b, _mm_movehl_ps(b, b));
	b = _mm_add_ss(b, _mm_movehdup_ps(b));
	return _mm_cvtss_f32(b);
}

/* y for weight rows r..r+R-1 and activation rows i..i+M-1. */
INLINE T512 void tile(const struct capy_linear *w, const float *x, float *y, uint64_t r,
		      uint64_t i, enum capy_dtype dt, const int R, const int M)
{
	const uint64_t k = w->k, n = w->n;
	const size_t row_bytes = (dt == CAPY_DT_F32 ? 4 : 2) * k;
	const uint8_t *wr = (const uint8_t *)w->data + r * row_bytes;
	const float *xr = x + i * k;
	__m512 acc[4][4], wv[4];
	uint64_t j = 0;

#pragma GCC unroll 4
	for (int a = 0; a < R; a++)
#pragma GCC unroll 4
		for (int b = 0; b < M; b++)
			acc[a][b] = _mm512_setzero_ps();
	for (; j + 16 <= k; j += 16) {
#pragma GCC unroll 4
		for (int a = 0; a < R; a++)
			wv[a] = load_w(wr + a * row_bytes, j, dt, 0xffff);
#pragma GCC unroll 4
		for (int b = 0; b < M; b++) {
			__m512 xv = _mm512_loadu_ps(xr + b * k + j);
#pragma GCC unroll 4
			for (int a = 0; a < R; a++)
				acc[a][b] = _mm512_fmadd_ps(wv[a], xv, acc[a][b]);
		}
	}
	if (j < k) {
		__mmask16 mk = (__mmask16)((1u << (k - j)) - 1);
#pragma GCC unroll 4
		for (int a = 0; a < R; a++)
			wv[a] = load_w(wr + a * row_bytes, j, dt, mk);
#pragma GCC unroll 4
		for (int b = 0; b < M; b++) {
			__m512 xv = _mm512_maskz_loadu_ps(mk, xr + b * k + j);
#pragma GCC unroll 4
			for (int a = 0; a < R; a++)
				acc[a][b] = _mm512_fmadd_ps(wv[a], xv, acc[a][b]);
		}
	}
#pragma GCC unroll 4
	for (int b = 0; b < M; b++)
#pragma GCC unroll 4
		for (int a = 0; a < R; a++)
			y[(i + b) * n + r + a] = hsum(acc[a][b]);
}

#define PLAIN_T T512
#define PLAIN_R 4
#define PLAIN_M 4
#define PLAIN_R_FEW 4
#define PLAIN_ENTRY capy_plain_avx512
#include "plain-impl.h"
