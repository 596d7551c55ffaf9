// mma-tile.cuh - the tiled tensor-core GEMM behind prefill-sized linears (linear-mma.cu) and
// the grouped routed experts (moe-grouped.cu): a block computes a tile of TBM weight rows x
// TBN activation rows, k streamed in steps of MMA_STEP through a ring of shared-memory stages
// filled by cp.async. CUDA C++, private to kernels/.
//
// Two kinds, one mainloop:
// - plain (GROUPED false): BF16 weights [n][k], fp32 activations [m][k], each split into BF16
//   hi and lo halves when its fragment is read (mma.cuh). Optionally in KS slices of k whose
//   partial sums are added in slice order, exactly as the skinny kernel adds its warps' sums:
//   an output element is the same bits from either kernel.
// - grouped (GROUPED true): NVFP4 weights of one expert, dequantized per step into shared
//   memory as BF16 that hold w * Sw exactly (a 2*e2m1 value times the block scale * 2^9:
//   at most 6 significant bits); activations are the slots' quantized rows as BF16 that hold
//   a * Sa exactly, gathered through a list of slots. Every product is then exact in fp32 and
//   only the fp32 sums round (the CPU sums the same products exactly in int64): the result,
//   scaled as nv_finish scales the integer sum, is within a few fp32 ulps of the CPU's.
#ifndef CAPY_KERNELS_MMA_TILE_CUH
#define CAPY_KERNELS_MMA_TILE_CUH

#include "linear-impl.h"
#include "mma.cuh"

#define TBM 128       // weight rows per block
#define TBN 128       // activation rows per block
#define TSTAGES 3     // cp.async ring depth
#define TTHREADS 256  // 8 warps: 2 along the weight rows (64 each) x 4 along the activations (32 each)

struct tile_args {
	const uint8_t *w;   // plain: BF16 [n][k]; grouped: expert 0's NVFP4 record
	uint64_t w_stride;  // grouped: bytes between the experts' records
	uint64_t n, k;
	uint32_t nparts;    // row tiles never straddle a part (each part has its own scales)
	uint64_t part_end[CK_MAX_PARTS];
	uint64_t codes_off, scales_off, globals_off;
	const void *x;      // plain: fp32 [m][k]; grouped: BF16 [nparts][S][k]
	uint64_t m;         // plain: activation rows
	uint64_t S;         // grouped: slots
	const int32_t *tiles;    // grouped: [*ntiles][3] = expert, first index into list, rows
	const int32_t *list;     // grouped: slot ids, by expert
	const uint32_t *ntiles;  // grouped: device count of tiles
	const float *gs;         // grouped: [nparts][S] the slots' global activation scales
	float *y;           // plain: y[row of x][n]; grouped: y[slot][n]
	uint64_t ldy;
	int ks;             // plain: slices of k
};

static inline size_t tile_smem_bytes(bool grouped)
{
	return grouped ? (size_t)(2 * TBM * MMA_STEP * 2 + TSTAGES * TBN * MMA_STEP * 2)
		       : (size_t)(TSTAGES * TBM * MMA_STEP * 2 + TSTAGES * TBN * MMA_STEP * 4);
}

// Row tiles of a matrix: per part, ceil(rows / TBM).
static inline uint64_t tile_row_tiles(const struct tile_args *a)
{
	uint64_t t = 0, start = 0;

	for (uint32_t p = 0; p < a->nparts; p++) {
		t += (a->part_end[p] - start + TBM - 1) / TBM;
		start = a->part_end[p];
	}
	return t;
}

// Eight 2*e2m1 codes (one 32-bit word) times the block scale as eight exact BF16 (4 words).
static __device__ __forceinline__ void tile_dequant8(uint32_t cw, int32_t sw, uint32_t out[4])
{
	uint32_t q[2];

	decode8(cw, &q[0], &q[1]);
	for (int h = 0; h < 2; h++)
		for (int e = 0; e < 4; e += 2) {
			const int v0 = (int)(int8_t)(q[h] >> (8 * e)), v1 = (int)(int8_t)(q[h] >> (8 * e + 8));
			const uint32_t b0 = __float_as_uint(__int2float_rn(v0 * sw)) >> 16;
			const uint32_t b1 = __float_as_uint(__int2float_rn(v1 * sw)) >> 16;
			out[2 * h + e / 2] = b0 | (b1 << 16);
		}
}

// nv_finish for an fp32 sum of the exact products.
static __device__ __forceinline__ float tile_finish(float acc, float s2, float gs)
{
	if (isnan(gs))
		return __uint_as_float(0x7fc00000);
	return __double2float_rn(__dmul_rn(__dmul_rn((double)acc, 0x1p-20), __ddiv_rn((double)s2, (double)gs)));
}

template <bool GROUPED, bool SLICED>
static __global__ void __launch_bounds__(TTHREADS) k_tile(struct tile_args a)
{
	ck_grid_enter();
	extern __shared__ __align__(16) uint8_t smem[];
	constexpr int WBUF = GROUPED ? 2 : TSTAGES;
	uint16_t *Ws = (uint16_t *)smem;                         // [WBUF][TBM][MMA_STEP]
	uint8_t *Xs = smem + (size_t)WBUF * TBM * MMA_STEP * 2;  // [TSTAGES][TBN][MMA_STEP] fp32 or BF16
	constexpr int XES = GROUPED ? 2 : 4;
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
	const int wm = warp & 1, wn = warp >> 1;
	const uint64_t k = a.k, nsteps = k / MMA_STEP;
	uint64_t row0 = 0, row_end = 0, tok0 = 0, cnt;
	uint32_t part = 0;
	int32_t expert = 0, lstart = 0;

	{
		uint64_t bx = blockIdx.x, start = 0;
		bool found = false;
#pragma unroll
		for (int p = 0; p < CK_MAX_PARTS; p++) {
			if (p >= (int)a.nparts || found)
				continue;
			const uint64_t tp = (a.part_end[p] - start + TBM - 1) / TBM;
			if (bx < tp) {
				part = (uint32_t)p;
				row0 = start + bx * TBM;
				row_end = a.part_end[p];
				found = true;
			} else {
				bx -= tp;
				start = a.part_end[p];
			}
		}
		if (!found)
			return;
	}
	if (GROUPED) {
		if (blockIdx.y >= *a.ntiles)
			return;
		expert = a.tiles[3 * blockIdx.y];
		lstart = a.tiles[3 * blockIdx.y + 1];
		cnt = (uint64_t)a.tiles[3 * blockIdx.y + 2];
	} else {
		tok0 = (uint64_t)blockIdx.y * TBN;
		if (tok0 >= a.m)
			return;
		cnt = a.m - tok0 < TBN ? a.m - tok0 : TBN;
	}
	const uint8_t *rec = a.w + (GROUPED ? (uint64_t)expert * a.w_stride : 0);

	// What this thread copies in every stage: activation chunks of 16 bytes (4 of fp32, 2 of
	// BF16) and, plain, 2 weight chunks; grouped, one half step (16 weights) of one row.
	constexpr int XCH = GROUPED ? 2 : 4, XPR = MMA_STEP * XES / 16; // chunks per thread, per row
	const uint8_t *xsrc[XCH];
	bool xval[XCH];
	int xrow[XCH];
	const int xcol = tid % XPR;
#pragma unroll
	for (int i = 0; i < XCH; i++) {
		const int r = tid / XPR + i * (TTHREADS / XPR);
		xrow[i] = r;
		xval[i] = (uint64_t)r < cnt;
		if (GROUPED) {
			const uint64_t slot = xval[i] ? (uint64_t)a.list[lstart + r] : 0;
			xsrc[i] = (const uint8_t *)a.x + (((uint64_t)part * a.S + slot) * k) * 2 + xcol * 16;
		} else {
			xsrc[i] = (const uint8_t *)a.x + ((xval[i] ? tok0 + r : 0) * k) * 4 + xcol * 16;
		}
	}
	const uint8_t *wsrc[2];
	bool wval[2];
	int wrow[2];
#pragma unroll
	for (int i = 0; i < 2; i++) {
		const int r = GROUPED ? tid / 2 : tid / 4 + i * 64;
		wrow[i] = r;
		wval[i] = row0 + r < row_end;
		if (GROUPED)
			wsrc[i] = rec + a.codes_off + (wval[i] ? row0 + r : 0) * (k / 2) + (tid & 1) * 8;
		else
			wsrc[i] = rec + (wval[i] ? row0 + r : 0) * k * 2 + (tid % 4) * 16;
	}
	const uint8_t *ssrc = rec + a.scales_off + (wval[0] ? row0 + wrow[0] : 0) * (k / 16) + (tid & 1);

	auto load_x = [&](int slot, uint64_t s) {
		uint8_t *dst = Xs + (size_t)slot * TBN * MMA_STEP * XES;
#pragma unroll
		for (int i = 0; i < XCH; i++)
			mma_cp16(dst + xrow[i] * MMA_STEP * XES + xcol * 16, xsrc[i] + s * MMA_STEP * XES, xval[i]);
	};
	auto load_w = [&](int slot, uint64_t s) { // plain
		uint8_t *dst = (uint8_t *)(Ws + (size_t)slot * TBM * MMA_STEP);
#pragma unroll
		for (int i = 0; i < 2; i++)
			mma_cp16(dst + wrow[i] * MMA_STEP * 2 + (tid % 4) * 16, wsrc[i] + s * MMA_STEP * 2, wval[i]);
	};
	// grouped: a step's 16 codes and scale of this thread's half row, dequantized into Ws[buf]
	uint2 cw = make_uint2(0, 0);
	int32_t sw = 0;
	auto fetch_codes = [&](uint64_t s) {
		if (wval[0]) {
			cw = __ldg((const uint2 *)(wsrc[0] + s * 16));
			sw = scale_int(__ldg(ssrc + s * 2));
		} else {
			cw = make_uint2(0, 0);
			sw = 0;
		}
	};
	auto store_codes = [&](int buf) {
		uint32_t o[8];
		tile_dequant8(cw.x, sw, o);
		tile_dequant8(cw.y, sw, o + 4);
		uint4 *dst = (uint4 *)(Ws + (size_t)buf * TBM * MMA_STEP + wrow[0] * MMA_STEP + (tid & 1) * 16);
		dst[0] = make_uint4(o[0], o[1], o[2], o[3]);
		dst[1] = make_uint4(o[4], o[5], o[6], o[7]);
	};

	float acc[4][4][4], tot[SLICED ? 4 : 1][SLICED ? 4 : 1][4];
#pragma unroll
	for (int mi = 0; mi < 4; mi++)
#pragma unroll
		for (int ni = 0; ni < 4; ni++)
#pragma unroll
			for (int q = 0; q < 4; q++) {
				acc[mi][ni][q] = 0.0f;
				if (SLICED)
					tot[SLICED ? mi : 0][SLICED ? ni : 0][q] = 0.0f;
			}
	int slice = 0;
	uint64_t bound = SLICED ? nsteps / (uint64_t)a.ks : nsteps;

	if (GROUPED) {
		fetch_codes(0);
		store_codes(0);
	}
#pragma unroll
	for (int s = 0; s < TSTAGES - 1; s++) {
		if ((uint64_t)s < nsteps) {
			load_x(s, (uint64_t)s);
			if (!GROUPED)
				load_w(s, (uint64_t)s);
		}
		mma_cp_commit();
	}
	for (uint64_t s = 0; s < nsteps; s++) {
		mma_cp_wait<TSTAGES - 2>();
		__syncthreads();
		const uint64_t pre = s + TSTAGES - 1;
		if (pre < nsteps) {
			load_x((int)(pre % TSTAGES), pre);
			if (!GROUPED)
				load_w((int)(pre % TSTAGES), pre);
		}
		mma_cp_commit();
		if (GROUPED && s + 1 < nsteps)
			fetch_codes(s + 1);
		if (SLICED && s == bound) { // a slice ends: fold its sum in slice order
#pragma unroll
			for (int mi = 0; mi < 4; mi++)
#pragma unroll
				for (int ni = 0; ni < 4; ni++)
#pragma unroll
					for (int q = 0; q < 4; q++) {
						float &t = tot[SLICED ? mi : 0][SLICED ? ni : 0][q];
						t = slice == 0 ? acc[mi][ni][q] : __fadd_rn(t, acc[mi][ni][q]);
						acc[mi][ni][q] = 0.0f;
					}
			slice++;
			bound = nsteps * (uint64_t)(slice + 1) / (uint64_t)a.ks;
		}
		const int xs = (int)(s % TSTAGES), wb = GROUPED ? (int)(s & 1) : xs;
		const uint16_t *W = Ws + (size_t)wb * TBM * MMA_STEP;
		const uint8_t *X = Xs + (size_t)xs * TBN * MMA_STEP * XES;
		uint32_t bh[4][4], bl[4][4];
		uint4 xb[4];
#pragma unroll
		for (int ni = 0; ni < 4; ni++) {
			const int tr = wn * 32 + ni * 8 + g;
			if (GROUPED) {
				xb[ni] = *(const uint4 *)(X + (tr * MMA_STEP + 8 * c) * 2);
			} else {
				// the two halves in an order by row parity: no bank conflicts
				const float *xp = (const float *)X + tr * MMA_STEP + 8 * c;
				const int h0 = g & 1;
				const float4 f0 = *(const float4 *)(xp + 4 * h0), f1 = *(const float4 *)(xp + 4 * (1 - h0));
				const float4 lo4 = h0 ? f1 : f0, hi4 = h0 ? f0 : f1;
				const float f[8] = { lo4.x, lo4.y, lo4.z, lo4.w, hi4.x, hi4.y, hi4.z, hi4.w };
				mma_split8(f, bh[ni], bl[ni]);
			}
		}
#pragma unroll
		for (int mi = 0; mi < 4; mi++) {
			const int ar = wm * 64 + mi * 16 + g;
			const uint4 wg = *(const uint4 *)(W + ar * MMA_STEP + 8 * c);
			const uint4 wg8 = *(const uint4 *)(W + (ar + 8) * MMA_STEP + 8 * c);
#pragma unroll
			for (int ni = 0; ni < 4; ni++) {
				if (GROUPED)
					mma_step_exact(acc[mi][ni], wg, wg8, xb[ni]);
				else
					mma_step_split(acc[mi][ni], wg, wg8, bh[ni], bl[ni]);
			}
		}
		if (GROUPED && s + 1 < nsteps)
			store_codes((int)((s + 1) & 1));
	}
	mma_cp_wait<0>();

	const float s2 = GROUPED ? ((const float *)(rec + a.globals_off))[part] : 0.0f;
#pragma unroll
	for (int mi = 0; mi < 4; mi++)
#pragma unroll
		for (int ni = 0; ni < 4; ni++) {
			const uint64_t r = row0 + wm * 64 + mi * 16 + g;
			const int tl = wn * 32 + ni * 8 + 2 * c;
#pragma unroll
			for (int q = 0; q < 4; q++) {
				const uint64_t rr = r + (q >= 2 ? 8 : 0);
				const int t = tl + (q & 1);
				float v = acc[mi][ni][q];
				if (SLICED && a.ks > 1)
					v = __fadd_rn(tot[SLICED ? mi : 0][SLICED ? ni : 0][q], v);
				if (rr >= row_end || (uint64_t)t >= cnt)
					continue;
				if (GROUPED) {
					const uint64_t slot = (uint64_t)a.list[lstart + t];
					a.y[slot * a.ldy + rr] = tile_finish(v, s2, a.gs[(uint64_t)part * a.S + slot]);
				} else {
					a.y[(tok0 + t) * a.ldy + rr] = v;
				}
			}
		}
}

#endif
