/* plain-impl.h - the row/panel driver of the plain-weight kernels, included by plain-avx2.c and
 * plain-avx512.c after their tile(). It expects PLAIN_T (the target attribute), PLAIN_R and
 * PLAIN_M (the tile for m >= PLAIN_M: weight rows x activation rows), PLAIN_R_FEW (the weight
 * rows of the tiles of 2 and 1 activation rows used when m < PLAIN_M: more weight rows share
 * each activation load there) and PLAIN_ENTRY (the name of the entry point).
 *
 * Blocking: RP weight rows x MP activation rows stay in L2 while their tiles (PLAIN_R weight rows
 * x PLAIN_M activation rows; at the edges narrower ones, down to single rows and columns) are
 * computed. The blocking and the tile shape only change which elements share loads, never an
 * element's summation order. */

#define RP 32
#define MP 64

/* Activation rows [i, ipe) against R weight rows from r: tiles of PLAIN_M rows, then 2, then 1. */
#define TILE_COLUMN(R)                                                                             \
	do {                                                                                       \
		uint64_t i_ = ip;                                                                  \
		for (; i_ + PLAIN_M <= ipe; i_ += PLAIN_M)                                         \
			tile(w, x, y, rr, i_, dt, (R), PLAIN_M);                                   \
		if (PLAIN_M > 2)                                                                   \
			for (; i_ + 2 <= ipe; i_ += 2)                                             \
				tile(w, x, y, rr, i_, dt, (R), 2);                                 \
		for (; i_ < ipe; i_++)                                                             \
			tile(w, x, y, rr, i_, dt, (R), 1);                                         \
	} while (0)

INLINE PLAIN_T void rows(const struct capy_linear *w, const float *x, uint64_t m, float *y,
			 uint64_t r0, uint64_t r1, enum capy_dtype dt)
{
	for (uint64_t rp = r0; rp < r1; rp += RP) {
		uint64_t rpe = CAPY_MIN(rp + RP, r1);
		for (uint64_t ip = 0; ip < m; ip += MP) {
			uint64_t ipe = CAPY_MIN(ip + MP, m), rr = rp;
			if (ipe - ip >= PLAIN_M)
				for (; rr + PLAIN_R <= rpe; rr += PLAIN_R)
					TILE_COLUMN(PLAIN_R);
			else
				for (; rr + PLAIN_R_FEW <= rpe; rr += PLAIN_R_FEW)
					TILE_COLUMN(PLAIN_R_FEW);
			for (; rr < rpe; rr++)
				TILE_COLUMN(1);
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
