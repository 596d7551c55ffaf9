/* plain-impl.h - the row/panel driver of the plain-weight kernels, included by plain-avx2.c and
 * plain-avx512.c after their tile(). It expects PLAIN_T (the target attribute), PLAIN_M (the
 * largest tile height in activation rows) and PLAIN_ENTRY (the name of the entry point).
 *
 * Blocking: RP weight rows x MP activation rows stay in L2 while their tiles (4 weight rows x
 * PLAIN_M activation rows, or single rows and columns at the edges) are computed. The
 * blocking only changes which elements share loads, never an element's summation order. */

#define RP 32
#define MP 64

INLINE PLAIN_T void rows(const struct capy_linear *w, const float *x, uint64_t m, float *y,
			 uint64_t r0, uint64_t r1, enum capy_dtype dt)
{
	for (uint64_t rp = r0; rp < r1; rp += RP) {
		uint64_t rpe = CAPY_MIN(rp + RP, r1);
		for (uint64_t ip = 0; ip < m; ip += MP) {
			uint64_t ipe = CAPY_MIN(ip + MP, m);
			for (uint64_t r = rp; r < rpe; r += 4) {
				uint64_t i = ip;
				if (r + 4 <= rpe) {
					for (; i + PLAIN_M <= ipe; i += PLAIN_M)
						tile(w, x, y, r, i, dt, 4, PLAIN_M);
					for (; i < ipe; i++)
						tile(w, x, y, r, i, dt, 4, 1);
					continue;
				}
				for (uint64_t rr = r; rr < rpe; rr++) {
					for (i = ip; i + PLAIN_M <= ipe; i += PLAIN_M)
						tile(w, x, y, rr, i, dt, 1, PLAIN_M);
					for (; i < ipe; i++)
						tile(w, x, y, rr, i, dt, 1, 1);
				}
			}
		}
	}
}

static PLAIN_T void rows_f32(CAPY_PLAIN_ARGS)
{
	rows(w, x, m, y, r0, r1, CAPY_DT_F32);
}

static PLAIN_T void rows_f16(CAPY_PLAIN_ARGS)
{
	rows(w, x, m, y, r0, r1, CAPY_DT_F16);
}

static PLAIN_T void rows_bf16(CAPY_PLAIN_ARGS)
{
	rows(w, x, m, y, r0, r1, CAPY_DT_BF16);
}

void PLAIN_ENTRY(CAPY_PLAIN_ARGS)
{
	if (w->dtype == CAPY_DT_F32)
		rows_f32(w, x, m, y, r0, r1);
	else if (w->dtype == CAPY_DT_F16)
		rows_f16(w, x, m, y, r0, r1);
	else
		rows_bf16(w, x, m, y, r0, r1);
}
