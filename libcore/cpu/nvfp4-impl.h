/* nvfp4-impl.h - the row driver of the NVFP4 kernels, included by nvfp4-avx2.c and (per dot
 * product instruction) by nvfp4-avx512-impl.h after their row function. It expects NV_T (the
 * target attribute), NV_ROW (y for one weight row and G activation rows, G a constant), NV_ROWS
 * (the name of the driver to define), GMAX (at most 8) and RT.
 *
 * Rows go in tiles of RT weight rows; for each group of up to GMAX activation rows a tile's rows
 * are computed one after another, so the tile's codes are read from memory once and the group's
 * prepared chunks stay in L1/L2. The order does not touch any element's value (integer sums). */

static NV_T void NV_ROWS(CAPY_NVFP4_ARGS)
{
	const uint64_t qrow = nchunks * CAPY_NV_CHUNK_BYTES;
	double f[GMAX];

	for (uint64_t rt = r0; rt < r1; rt += RT) {
		uint64_t rte = CAPY_MIN(rt + RT, r1);
		for (uint64_t i0 = 0; i0 < m; i0 += GMAX) {
			int G = (int)CAPY_MIN(GMAX, m - i0);
			for (int g = 0; g < G; g++)
				f[g] = capy_nv_factor(scale2, gs[i0 + g]);
			for (uint64_t r = rt; r < rte; r++) {
				switch (G) {
				case 1: NV_ROW(w, q, qrow, f, i0, 1, y, r); break;
				case 2: NV_ROW(w, q, qrow, f, i0, 2, y, r); break;
				case 3: NV_ROW(w, q, qrow, f, i0, 3, y, r); break;
#if GMAX > 4
				case 4: NV_ROW(w, q, qrow, f, i0, 4, y, r); break;
				case 5: NV_ROW(w, q, qrow, f, i0, 5, y, r); break;
				case 6: NV_ROW(w, q, qrow, f, i0, 6, y, r); break;
				case 7: NV_ROW(w, q, qrow, f, i0, 7, y, r); break;
#endif
				default: NV_ROW(w, q, qrow, f, i0, GMAX, y, r); break;
				}
			}
		}
	}
}
