/* plain-avx2.c - F32/F16/BF16 weights with AVX2 + FMA + F16C (8 float lanes).
 *
 * The same scheme as plain-avx512.c with 8 lanes: lane l of an element's accumulator takes the
 * elements j = l (mod 8) in increasing j with FMA, then a fixed tree adds the lanes. The last,
 * partial chunk goes through a zero-padded copy (AVX2 has no 16-bit masked load). With four or
 * more activation rows, tiles are 2 weight rows x 4 activation rows (8 accumulators): a weight
 * chunk is widened once for four rows (the widening costs about as much as the FMAs it feeds);
 * 72 GFLOP/s on one core of the dev VM (AVX2 only) against 63 for 4 x 2 tiles. With fewer, 4 weight rows share each
 * activation load (4 x 2, 4 x 1), which is faster there.
 */
#include "cpu-impl.h"

#include <immintrin.h>

#define T256 __attribute__((target("avx2,fma,f16c")))
#define INLINE static inline __attribute__((always_inline))


INLINE T256 __m256 load_w(const void *row, uint64_t j, enum capy_dtype dt)
{
	if (dt == CAPY_DT_F32)
		return _mm256_loadu_ps((const float *)row + j);
	__m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + j));
	if (dt == CAPY_DT_F16)
		return _mm256_cvtph_ps(h);
	return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* Elements [j, k) of a row (fewer than 8), zero-padded to 8. */
INLINE T256 __m256 load_w_tail(const void *row, uint64_t j, uint64_t k, enum capy_dtype dt)
{
	uint8_t buf[32] = { 0 };
	size_t es = dt == CAPY_DT_F32 ? 4 : 2;

	memcpy(buf, (const uint8_t *)row + j * es, (k - j) * es);
	return load_w(buf, 0, dt);
}

INLINE T256 __m256 load_x_tail(const float *x, uint64_t j, uint64_t k)
{
	float buf[8] = { 0 };

	memcpy(buf, x + j, (k - j) * 4);
	return _mm256_loadu_ps(buf);
}

INLINE T256 float hsum(__m256 v)
{
	__m128 b = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));

	b = _mm_add_ps(b, _mm_movehl_ps(b, b));
	b = _mm_add_ss(b, _mm_movehdup_ps(b));
	return _mm_cvtss_f32(b);
}

INLINE T256 void tile(const struct capy_linear *w, const float *x, float *y, uint64_t r,
		      uint64_t i, enum capy_dtype dt, const int R, const int M)
{
	const uint64_t k = w->k, n = w->n;
	const size_t row_bytes = (dt == CAPY_DT_F32 ? 4 : 2) * k;
	const uint8_t *wr = (const uint8_t *)w->data + r * row_bytes;
	const float *xr = x + i * k;
	__m256 acc[4][4], wv[4];
	uint64_t j = 0;

#pragma GCC unroll 4
	for (int a = 0; a < R; a++)
#pragma GCC unroll 4
		for (int b = 0; b < M; b++)
			acc[a][b] = _mm256_setzero_ps();
	for (; j + 8 <= k; j += 8) {
#pragma GCC unroll 4
		for (int a = 0; a < R; a++)
			wv[a] = load_w(wr + a * row_bytes, j, dt);
#pragma GCC unroll 4
		for (int b = 0; b < M; b++) {
			__m256 xv = _mm256_loadu_ps(xr + b * k + j);
#pragma GCC unroll 4
			for (int a = 0; a < R; a++)
				acc[a][b] = _mm256_fmadd_ps(wv[a], xv, acc[a][b]);
		}
	}
	if (j < k) {
#pragma GCC unroll 4
		for (int a = 0; a < R; a++)
			wv[a] = load_w_tail(wr + a * row_bytes, j, k, dt);
#pragma GCC unroll 4
		for (int b = 0; b < M; b++) {
			__m256 xv = load_x_tail(xr + b * k, j, k);
#pragma GCC unroll 4
			for (int a = 0; a < R; a++)
				acc[a][b] = _mm256_fmadd_ps(wv[a], xv, acc[a][b]);
		}
	}
#pragma GCC unroll 4
	for (int b = 0; b < M; b++)
#pragma GCC unroll 4
		for (int a = 0; a < R; a++)
			y[(i + b) * n + r + a] = hsum(acc[a][b]);
}

#define PLAIN_T T256
#define PLAIN_R 2
#define PLAIN_M 4
#define PLAIN_R_FEW 4
#define PLAIN_ENTRY capy_plain_avx2
#include "plain-impl.h"
