/* attention-flash.cu - causal GQA attention of prefill rows on the tensor cores (flash
 * attention over the paged BF16 cache), for the rows whose item has at least
 * CK_GROUPED_MIN_ROWS rows in the step; attention.cu's kernels take the others.
 *
 * A block takes BM query vectors of one item and one KV head: BM / G consecutive rows x
 * the G query heads that share the KV head. It walks the item's keys in blocks of FA_BK from
 * key 0, in order, with the online softmax: per block S = Q K^T (Q split into BF16 hi and lo
 * halves, as mma.cuh splits activations; K exact in BF16), the row max, P = exp(S - max),
 * the rescaled running sum and P V (P split the same way). Every reduction has a fixed order
 * (the MMAs in k order, the row max and sums over a row's four lanes by the same shuffles),
 * and a vector's key blocks are absolute ([0, FA_BK), [FA_BK, 2 FA_BK), ...), so a vector's
 * result depends only on its own row and its sequence's cache: not on the tile, the other
 * rows of the step or how the prompt was chunked. Against the CPU (and attention.cu) the
 * order differs: within a stated tolerance (docs/cuda.md).
 *
 * QSA: with a selection, a key is visible to a row only where its byte is set, and a key
 * block that no row of the tile selects is skipped whole.
 *
 * Speed, none of it changing a bit: the next key block's K and V are copied (cp.async) while
 * the current one is used; 8 warps share each K/V block; blocks wholly below the tile's first
 * position skip the causal mask; a warp skips the rescale of its accumulators when every
 * factor is exactly 1; a block's page address costs one division, not one a key row; the
 * tiles with the most keys are launched first. */
#include "mma.cuh"

#include <math.h>

/* A block's shape is chosen per GPU by its shared memory (fa_launch): BM query vectors (BM /
 * 16 warps) and ST K/V buffers (2: the next block loads while this one is used). 128 x 2
 * needs 198 KiB at head_dim 256 (Hopper: 227 KiB a block); 64 x 1, 99 KiB, fits the 99 KiB
 * of sm_120 (RTX 50). The shape changes no bit: a vector's result does not depend on its tile. */
#define FA_BM_MIN 64  /* the smallest BM: fa_ok's G must divide it */
#define FA_BK 32      /* keys per step: the online softmax's blocks (part of the numerics) */
#define FA_PAD 8      /* BF16 elements past each shared row: ldmatrix without bank conflicts */

struct fa_args {
	struct ck_step st;
	struct ck_kv_layer l;
	const float *q;
	uint64_t nq, G, rows;  /* rows: BM / G rows per block */
	const uint8_t *sel;
	uint64_t sel_stride;
	float scale;
	float *out;
};

static __device__ __forceinline__ void ldsm_x4(uint32_t r[4], const void *p)
{
	const unsigned s = (unsigned)__cvta_generic_to_shared(p);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(s));
}

static __device__ __forceinline__ void ldsm_x4_t(uint32_t r[4], const void *p)
{
	const unsigned s = (unsigned)__cvta_generic_to_shared(p);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
		     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		     : "r"(s));
}

/* Whether key block kb adds anything to the tile: always without a selection; with one,
 * where some row of the tile selects one of its keys (a block nobody sees is skipped whole,
 * which is exact: it would rescale by 1 and add zeros). Block-wide: every thread calls it. */
template <int NT>
static __device__ __forceinline__ bool fa_block_seen(const struct fa_args &a, uint64_t kb, uint64_t nrows,
						      uint64_t t0, uint64_t first)
{
	if (!a.sel)
		return true;
	const uint64_t key0 = kb * FA_BK;
	int any = 0;
	for (int i = threadIdx.x; i < (int)(nrows * FA_BK); i += NT) {
		const uint64_t r = (uint64_t)i / FA_BK, key = key0 + (uint64_t)i % FA_BK;
		any |= key <= first + r && a.sel[(t0 + r) * a.sel_stride + key];
	}
	return __syncthreads_or(any) != 0;
}

/* The first key block from kb on that the tile sees, or nkb. */
template <int NT>
static __device__ __forceinline__ uint64_t fa_next_block(const struct fa_args &a, uint64_t kb, uint64_t nkb,
							  uint64_t nrows, uint64_t t0, uint64_t first)
{
	while (kb < nkb && !fa_block_seen<NT>(a, kb, nrows, t0, first))
		kb++;
	return kb;
}

/* Start copying key block kb's K and V rows into K/V stage buffers (zeros past the tile's
 * last position). page_tokens >= FA_BK (fa_ok), so a block spans at most two pages: one
 * division a block, not one a row. */
template <int HD, int NT>
static __device__ __forceinline__ void fa_load_block(const struct fa_args &a, const uint32_t *bt, uint64_t kvh,
						      uint64_t kb, uint64_t last, uint16_t *Ks, uint16_t *Vs)
{
	constexpr int RS = HD + FA_PAD, CH = HD / 8;
	const uint32_t P = (uint32_t)a.st.page_tokens, key0 = (uint32_t)(kb * FA_BK);
	const uint32_t p0 = key0 / P, o0 = key0 - p0 * P;
	const uint64_t kv_row = a.l.nkv * HD * 2;
	const uint8_t *page0 = a.st.pages + (uint64_t)bt[p0] * a.st.page_bytes + kvh * HD * 2;
	const uint8_t *page1 = o0 + FA_BK > P && key0 + (P - o0) <= last
				       ? a.st.pages + (uint64_t)bt[p0 + 1] * a.st.page_bytes + kvh * HD * 2
				       : page0;
	for (int i = threadIdx.x; i < FA_BK * CH; i += NT) {
		const uint32_t kk = (uint32_t)i / CH, ch = (uint32_t)i % CH, o = o0 + kk;
		const bool ok = key0 + kk <= last;
		const uint8_t *row = (o < P ? page0 + (uint64_t)o * kv_row : page1 + (uint64_t)(o - P) * kv_row) + ch * 16;
		if (!ok)
			row = page0 + ch * 16; /* not read (a zero-byte copy); any valid address */
		mma_cp16(Ks + kk * RS + ch * 8, row + a.l.k, ok);
		mma_cp16(Vs + kk * RS + ch * 8, row + a.l.v, ok);
	}
	mma_cp_commit();
}

template <int HD, int BM, int ST>
static __global__ void __launch_bounds__(BM * 2, 1) k_flash(struct fa_args a)
{
	ck_grid_enter();
	constexpr int RS = HD + FA_PAD; /* shared row stride, elements */
	extern __shared__ __align__(16) uint16_t fsm[];
	constexpr int NT = BM * 2; /* threads: a warp per 16 vectors */
	uint16_t *Qh = fsm, *Ql = Qh + BM * RS, *Kst = Ql + BM * RS, *Vst = Kst + ST * FA_BK * RS;
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
	const uint64_t item = blockIdx.y / a.l.nkv, kvh = blockIdx.y % a.l.nkv;
	const int64_t n = a.st.n[item];
	/* the tiles with the most keys first: the causal grid's long blocks do not trail */
	const uint64_t tile = gridDim.x - 1 - blockIdx.x;

	if (n < CK_GROUPED_MIN_ROWS || tile * a.rows >= (uint64_t)n)
		return; /* uniform: attention.cu has the item, or the tile is past its rows */
	const uint64_t r0 = tile * a.rows, t0 = (uint64_t)a.st.t0[item] + r0;
	const uint64_t nrows = (uint64_t)n - r0 < a.rows ? (uint64_t)n - r0 : a.rows;
	const uint64_t len = (uint64_t)a.st.len[item], first = len + r0, last = first + nrows - 1;
	const uint32_t *bt = a.st.block_table + a.st.bt_off[item];
	const uint32_t G = (uint32_t)a.G;

	/* Q: vector v = (row v / G, head v % G), split into hi and lo. */
	for (int i = tid; i < BM * HD / 2; i += NT) {
		const uint32_t v = (uint32_t)i / (HD / 2), d = ((uint32_t)i % (HD / 2)) * 2;
		const uint64_t r = v / G, h = kvh * G + v % G;
		float2 f = make_float2(0.0f, 0.0f);
		if (r < nrows)
			f = *(const float2 *)(a.q + ((t0 + r) * a.nq + h) * HD + d);
		uint32_t hi, lo;
		mma_split2(f.x, f.y, &hi, &lo);
		*(uint32_t *)(Qh + v * RS + d) = hi;
		*(uint32_t *)(Ql + v * RS + d) = lo;
	}

	/* This lane's two vectors (rows g and g + 8 of its warp's 16): position and row. */
	int64_t vpos[2];
	uint64_t vrow[2];
	bool vok[2];
	for (int h = 0; h < 2; h++) {
		const uint64_t v = (uint64_t)warp * 16 + g + 8 * h, r = v / G;
		vok[h] = r < nrows;
		vrow[h] = t0 + (vok[h] ? r : 0);
		vpos[h] = (int64_t)(first + (vok[h] ? r : 0));
	}
	float O[HD / 8][4], M[2] = { -INFINITY, -INFINITY }, L[2] = { 0.0f, 0.0f };
#pragma unroll
	for (int j = 0; j < HD / 8; j++)
		for (int q = 0; q < 4; q++)
			O[j][q] = 0.0f;

	const uint64_t nkb = last / FA_BK + 1;
	uint64_t kb = fa_next_block<NT>(a, 0, nkb, nrows, t0, first);
	int stage = 0;
	if (kb < nkb)
		fa_load_block<HD, NT>(a, bt, kvh, kb, last, Kst, Vst);
	while (kb < nkb) {
		uint64_t next = nkb;
		if constexpr (ST == 2) { /* the next block's copies go out before this one is used */
			next = fa_next_block<NT>(a, kb + 1, nkb, nrows, t0, first);
			if (next < nkb) {
				fa_load_block<HD, NT>(a, bt, kvh, next, last, Kst + (stage ^ 1) * FA_BK * RS,
						      Vst + (stage ^ 1) * FA_BK * RS);
				mma_cp_wait<1>();
			} else {
				mma_cp_wait<0>();
			}
		} else {
			mma_cp_wait<0>();
		}
		__syncthreads();
		const uint16_t *Ks = Kst + stage * FA_BK * RS, *Vs = Vst + stage * FA_BK * RS;
		const uint64_t key0 = kb * FA_BK;

		/* S = Q K^T for the warp's 16 vectors x FA_BK keys: 4 tiles of 8 keys. */
		float S[4][4];
#pragma unroll
		for (int j = 0; j < 4; j++)
			for (int q = 0; q < 4; q++)
				S[j][q] = 0.0f;
#pragma unroll
		for (int d0 = 0; d0 < HD; d0 += 16) {
			uint32_t ah[4], al[4], b[2][4];
			const int arow = warp * 16 + (lane % 16), acol = d0 + (lane / 16) * 8;
			ldsm_x4(ah, Qh + arow * RS + acol);
			ldsm_x4(al, Ql + arow * RS + acol);
#pragma unroll
			for (int jj = 0; jj < 2; jj++) { /* keys jj*16 .. +15: two n8 tiles */
				const int krow = jj * 16 + (lane % 8) + (lane / 16) * 8, kcol = d0 + ((lane / 8) % 2) * 8;
				ldsm_x4(b[jj], Ks + krow * RS + kcol);
			}
#pragma unroll
			for (int j = 0; j < 4; j++) {
				const uint32_t b0 = b[j / 2][(j % 2) * 2], b1 = b[j / 2][(j % 2) * 2 + 1];
				mma_bf16(S[j], ah[0], ah[1], ah[2], ah[3], b0, b1);
				mma_bf16(S[j], al[0], al[1], al[2], al[3], b0, b1);
			}
		}

		/* Scale, mask, the block's row max; the running max, the rescale factor. A block
		 * wholly before the tile's first position is visible to every vector: no mask
		 * (padding vectors past the tile's rows then score 0; their output is not written). */
		float mb[2] = { -INFINITY, -INFINITY }, alpha[2], Mn[2];
		if (!a.sel && key0 + FA_BK - 1 <= first) {
#pragma unroll
			for (int j = 0; j < 4; j++)
#pragma unroll
				for (int q = 0; q < 4; q++) {
					S[j][q] = __fmul_rn(S[j][q], a.scale);
					mb[q / 2] = fmaxf(mb[q / 2], S[j][q]);
				}
		} else {
#pragma unroll
			for (int j = 0; j < 4; j++)
#pragma unroll
				for (int q = 0; q < 4; q++) {
					const int h = q / 2;
					const uint64_t key = key0 + j * 8 + 2 * c + (q & 1);
					bool vis = vok[h] && (int64_t)key <= vpos[h];
					if (vis && a.sel)
						vis = a.sel[vrow[h] * a.sel_stride + key] != 0;
					S[j][q] = vis ? __fmul_rn(S[j][q], a.scale) : -INFINITY;
					mb[h] = fmaxf(mb[h], S[j][q]);
				}
		}
#pragma unroll
		for (int h = 0; h < 2; h++) {
			mb[h] = fmaxf(mb[h], __shfl_xor_sync(CK_FULL, mb[h], 1));
			mb[h] = fmaxf(mb[h], __shfl_xor_sync(CK_FULL, mb[h], 2));
			Mn[h] = fmaxf(M[h], mb[h]);
			alpha[h] = Mn[h] == -INFINITY ? 1.0f : expf(__fsub_rn(M[h], Mn[h]));
		}
		/* P = exp(S - max) as BF16 hi/lo A fragments (two n8 tiles of S make one k16). */
		float rs[2] = { 0.0f, 0.0f };
		uint32_t ph[2][4], pl[2][4];
#pragma unroll
		for (int j = 0; j < 4; j++) {
			float p[4];
#pragma unroll
			for (int q = 0; q < 4; q++) {
				const int h = q / 2;
				p[q] = S[j][q] == -INFINITY ? 0.0f : expf(__fsub_rn(S[j][q], Mn[h]));
				rs[h] = __fadd_rn(rs[h], p[q]);
			}
			/* tile j: keys (j % 2) * 8 of the k16 j / 2: a0a1 / a2a3 (rows g / g + 8) for
			 * the first 8 keys, a4a5 / a6a7 for the next 8 */
			mma_split2(p[0], p[1], &ph[j / 2][(j % 2) * 2], &pl[j / 2][(j % 2) * 2]);
			mma_split2(p[2], p[3], &ph[j / 2][(j % 2) * 2 + 1], &pl[j / 2][(j % 2) * 2 + 1]);
		}
#pragma unroll
		for (int h = 0; h < 2; h++) {
			rs[h] = __fadd_rn(rs[h], __shfl_xor_sync(CK_FULL, rs[h], 1));
			rs[h] = __fadd_rn(rs[h], __shfl_xor_sync(CK_FULL, rs[h], 2));
			L[h] = __fadd_rn(__fmul_rn(L[h], alpha[h]), rs[h]);
			M[h] = Mn[h];
		}
		/* Once the running maxima settle most blocks rescale by exactly 1: skip that
		 * (x * 1 is x), warp-uniformly. */
		if (__any_sync(CK_FULL, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
			for (int j = 0; j < HD / 8; j++) {
				O[j][0] = __fmul_rn(O[j][0], alpha[0]);
				O[j][1] = __fmul_rn(O[j][1], alpha[0]);
				O[j][2] = __fmul_rn(O[j][2], alpha[1]);
				O[j][3] = __fmul_rn(O[j][3], alpha[1]);
			}
		}
		/* O += P V: per k16 of keys, per pair of n8 dim tiles, V^T fragments by ldmatrix.trans. */
#pragma unroll
		for (int kk = 0; kk < 2; kk++) {
			/* the A registers in mma order: a0a1 (g, keys 0-7), a2a3 (g+8, 0-7), a4a5 (g, 8-15), a6a7 */
			const uint32_t h0 = ph[kk][0], h1 = ph[kk][1], h2 = ph[kk][2], h3 = ph[kk][3];
			const uint32_t l0 = pl[kk][0], l1 = pl[kk][1], l2 = pl[kk][2], l3 = pl[kk][3];
#pragma unroll
			for (int nd = 0; nd < HD / 8; nd += 2) {
				uint32_t b[4];
				const int vrow_ = kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8, vcol = nd * 8 + (lane / 16) * 8;
				ldsm_x4_t(b, Vs + vrow_ * RS + vcol);
				mma_bf16(O[nd], h0, h1, h2, h3, b[0], b[1]);
				mma_bf16(O[nd], l0, l1, l2, l3, b[0], b[1]);
				mma_bf16(O[nd + 1], h0, h1, h2, h3, b[2], b[3]);
				mma_bf16(O[nd + 1], l0, l1, l2, l3, b[2], b[3]);
			}
		}
		__syncthreads(); /* the next copies into this stage wait for every warp */
		if constexpr (ST == 2) {
			stage ^= 1;
		} else {
			next = fa_next_block<NT>(a, kb + 1, nkb, nrows, t0, first);
			if (next < nkb)
				fa_load_block<HD, NT>(a, bt, kvh, next, last, Kst, Vst);
		}
		kb = next;
	}

	/* out = O / L (0 for a vector that saw no key, as the CPU). */
#pragma unroll
	for (int h = 0; h < 2; h++) {
		if (!vok[h])
			continue;
		const uint64_t v = (uint64_t)warp * 16 + g + 8 * h, head = kvh * G + v % G;
		float *o = a.out + (vrow[h] * a.nq + head) * HD;
#pragma unroll
		for (int j = 0; j < HD / 8; j++) {
			const int d = j * 8 + 2 * c;
			const float x0 = L[h] > 0 ? __fdiv_rn(O[j][2 * h], L[h]) : 0.0f;
			const float x1 = L[h] > 0 ? __fdiv_rn(O[j][2 * h + 1], L[h]) : 0.0f;
			*(float2 *)(o + d) = make_float2(x0, x1);
		}
	}
}

/* Whether the flash kernel takes this layer's prefill rows. */
bool fa_ok(const struct ck_step *st, const struct ck_kv_layer *l, uint64_t nq)
{
	const uint64_t G = nq / l->nkv, hd = l->hd;

	return st->n_grouped && l->dtype == CK_KV_BF16 && (hd == 64 || hd == 128 || hd == 256) && FA_BM_MIN % G == 0 &&
	       st->page_tokens >= FA_BK && st->max_pos < (INT64_C(1) << 31) &&
	       (l->k | l->v | st->page_bytes | (uint64_t)(uintptr_t)st->pages) % 16 == 0;
}

static size_t fa_smem(int hd, int bm, int st)
{
	return (size_t)(2 * bm + 2 * st * FA_BK) * (hd + FA_PAD) * 2;
}

template <int HD, int BM, int ST>
static int fa_launch_shape(struct fa_args *a, cudaStream_t stream)
{
	const size_t smem = fa_smem(HD, BM, ST);
	a->rows = BM / a->G;
	const uint64_t tiles = (a->st.max_item_n + a->rows - 1) / a->rows;
	const dim3 grid((unsigned)tiles, (unsigned)(a->st.n_items * a->l.nkv), 1);

	cudaFuncSetAttribute(k_flash<HD, BM, ST>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
	ck_launch(k_flash<HD, BM, ST>, grid, BM * 2, smem, stream, *a);
	return ck_launched();
}

static size_t fa_smem_cap; /* 0, or a smaller budget than the GPU's (ck_set_flash_smem) */

extern "C" void ck_set_flash_smem(size_t bytes)
{
	fa_smem_cap = bytes;
}

/* The largest shape whose shared memory the GPU gives a block: 128 x 2, 64 x 2, 64 x 1. */
template <int HD>
static int fa_launch(struct fa_args *a, cudaStream_t stream)
{
	int dev = 0, optin = 0;

	cudaGetDevice(&dev);
	cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
	if (fa_smem_cap && fa_smem_cap < (size_t)optin)
		optin = (int)fa_smem_cap;
	if ((size_t)optin >= fa_smem(HD, 128, 2))
		return fa_launch_shape<HD, 128, 2>(a, stream);
	if ((size_t)optin >= fa_smem(HD, 64, 2))
		return fa_launch_shape<HD, 64, 2>(a, stream);
	return fa_launch_shape<HD, 64, 1>(a, stream);
}

int fa_attention(const struct ck_step *st, const struct ck_kv_layer *l, const float *q, uint64_t nq,
		 const uint8_t *sel, uint64_t sel_stride, float *out, cudaStream_t stream)
{
	struct fa_args a = {};

	a.st = *st;
	a.l = *l;
	a.q = q;
	a.nq = nq;
	a.G = nq / l->nkv;
	a.sel = sel;
	a.sel_stride = sel_stride;
	a.scale = 1.0f / sqrtf((float)l->hd);
	a.out = out;
	switch (l->hd) {
	case 64:
		return fa_launch<64>(&a, stream);
	case 128:
		return fa_launch<128>(&a, stream);
	default:
		return fa_launch<256>(&a, stream);
	}
}
