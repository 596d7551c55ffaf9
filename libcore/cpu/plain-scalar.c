/* plain-scalar.c - F32/F16/BF16 weights in plain C: the fallback path and the baseline of the tests.
 *
 * Each output element sums its k products in 8 interleaved partial sums (element j into sum
 * j % 8, multiply then add: x86-64-v2 has no FMA), then adds the partial sums in a fixed tree.
 */
#include "cpu-impl.h"

static inline float widen(const void *row, uint64_t j, enum capy_dtype dt)
{
	uint16_t h;

	if (dt == CAPY_DT_F32)
		return ((const float *)row)[j];
	memcpy(&h, (const uint16_t *)row + j, 2);
	return dt == CAPY_DT_F16 ? capy_f16_to_f32(h) : capy_bf16_to_f32(h);
}

static inline float dot(const void *wrow, const float *x, uint64_t k, enum capy_dtype dt)
{
	float s[8] = { 0 };

	for (uint64_t j = 0; j < k; j++)
		s[j & 7] += x[j] * widen(wrow, j, dt);
	return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]));
}

void capy_plain_scalar(CAPY_PLAIN_ARGS)
{
	const uint64_t k = w->k, n = w->n;
	const size_t row_bytes = (w->dtype == CAPY_DT_F32 ? 4 : 2) * k;

	for (uint64_t r = r0; r < r1; r++) {
		const void *wrow = (const uint8_t *)w->data + r * row_bytes;
		for (uint64_t i = 0; i < m; i++) {
			const float *xr = x + i * k;
			float *out = &y[i * n + r];
			switch (w->dtype) {
			case CAPY_DT_F32:
				*out = dot(wrow, xr, k, CAPY_DT_F32);
				break;
			case CAPY_DT_F16:
				*out = dot(wrow, xr, k, CAPY_DT_F16);
				break;
			default:
				*out = dot(wrow, xr, k, CAPY_DT_BF16);
				break;
			}
		}
	}
}
