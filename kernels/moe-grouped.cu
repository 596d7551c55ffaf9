/* moe-grouped.cu - the routed experts of prefill rows as grouped GEMMs on the tensor cores:
 * the step's grouped slots (slot s = t * k + j, row t flagged) are counted per expert, laid
 * out by expert in tiles of up to TBN slots, and each (row tile of the expert's matrix, slot
 * tile) is one block of mma-tile.cuh's grouped kernel, the weights dequantized in the kernel.
 * Where a slot lands in its tile changes nothing (each output element depends only on its
 * own slot's row and the weights), so the atomics that place slots leave the results
 * deterministic. The numerics are those of mma-tile.cuh (within a few fp32 ulps of the CPU),
 * not the exact W4A4 of the decode path: which path a row takes is decided by its own item
 * (CK_GROUPED_MIN_ROWS), never by the other rows of the step. */
#include "mma-tile.cuh"
#include "moe-grouped.h"

#include <string.h>

#define PLAN_THREADS 1024

/* cnt[e] += 1 for every grouped slot of expert e. */
static __global__ void k_count(const int32_t *ids, const uint8_t *grouped, uint64_t T, uint64_t k, int32_t *cnt)
{
	ck_grid_enter();
	const uint64_t s = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;

	if (s < T * k && grouped[s / k])
		atomicAdd(&cnt[ids[s]], 1);
}

/* One block: the experts' first list index (exclusive prefix of cnt, also the fill cursors)
 * and their tiles of up to TBN slots, in expert order. Thread t covers a run of experts. */
static __global__ void __launch_bounds__(PLAN_THREADS)
	k_plan(const int32_t *cnt, uint64_t E, int32_t *cursor, int32_t *tiles, uint32_t *ntiles)
{
	ck_grid_enter();
	__shared__ int32_t s_slots[PLAN_THREADS / 32], s_tiles[PLAN_THREADS / 32];
	const unsigned tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	const uint64_t per = (E + PLAN_THREADS - 1) / PLAN_THREADS, e0 = tid * per, e1 = e0 + per < E ? e0 + per : E;
	int32_t slots = 0, nt = 0;

	for (uint64_t e = e0; e < e1; e++) {
		slots += cnt[e];
		nt += (cnt[e] + TBN - 1) / TBN;
	}
	/* exclusive scan over the threads: within the warp, then over the warps */
	int32_t is = slots, it = nt;
	for (int o = 1; o < 32; o <<= 1) {
		const int32_t a = __shfl_up_sync(CK_FULL, is, o), b = __shfl_up_sync(CK_FULL, it, o);
		if (lane >= (unsigned)o) {
			is += a;
			it += b;
		}
	}
	if (lane == 31) {
		s_slots[warp] = is;
		s_tiles[warp] = it;
	}
	__syncthreads();
	if (warp == 0) {
		int32_t a = lane < PLAN_THREADS / 32 ? s_slots[lane] : 0, b = lane < PLAN_THREADS / 32 ? s_tiles[lane] : 0;
		for (int o = 1; o < 32; o <<= 1) {
			const int32_t a2 = __shfl_up_sync(CK_FULL, a, o), b2 = __shfl_up_sync(CK_FULL, b, o);
			if (lane >= (unsigned)o) {
				a += a2;
				b += b2;
			}
		}
		if (lane < PLAN_THREADS / 32) {
			s_slots[lane] = a;
			s_tiles[lane] = b;
		}
	}
	__syncthreads();
	int32_t so = is - slots + (warp ? s_slots[warp - 1] : 0), to = it - nt + (warp ? s_tiles[warp - 1] : 0);
	for (uint64_t e = e0; e < e1; e++) {
		cursor[e] = so;
		for (int32_t r = 0; r < cnt[e]; r += TBN) {
			tiles[3 * to] = (int32_t)e;
			tiles[3 * to + 1] = so + r;
			tiles[3 * to + 2] = cnt[e] - r < TBN ? cnt[e] - r : TBN;
			to++;
		}
		so += cnt[e];
	}
	if (tid == PLAN_THREADS - 1)
		*ntiles = (uint32_t)to;
}

/* list[cursor[e]++] = s for every grouped slot s of expert e. */
static __global__ void k_fill(const int32_t *ids, const uint8_t *grouped, uint64_t T, uint64_t k, int32_t *cursor,
			      int32_t *list)
{
	ck_grid_enter();
	const uint64_t s = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;

	if (s < T * k && grouped[s / k])
		list[atomicAdd(&cursor[ids[s]], 1)] = (int32_t)s;
}

bool moe_grouped_ok(const struct lin_mat *w)
{
	const uint64_t codes = (uint64_t)(uintptr_t)w->data + w->codes_off;

	return w->dtype == CK_NVFP4 && w->k % MMA_STEP == 0 && codes % 8 == 0 && w->stride % 8 == 0;
}

uint64_t moe_grouped_max_tiles(uint64_t slots, uint64_t E)
{
	return (slots + TBN - 1) / TBN + E;
}

size_t moe_grouped_ws_bytes(const struct lin_mat *gu, const struct lin_mat *dn, uint64_t S, uint64_t E)
{
	const uint64_t xq = CAPY_MAX_U64(gu->nparts * gu->k, dn->nparts * dn->k) * S * 2;
	const uint64_t parts = gu->nparts > dn->nparts ? gu->nparts : dn->nparts;

	return (size_t)(256 + ck_align_up(xq, 256) + ck_align_up(parts * S * 4, 256) + 2 * ck_align_up(E * 4, 256) +
			ck_align_up(S * 4, 256) + ck_align_up(moe_grouped_max_tiles(S, E) * 12, 256) + 256);
}

struct moe_grouped_ws moe_grouped_carve(const struct lin_mat *gu, const struct lin_mat *dn, uint64_t S, uint64_t E,
					void *ws)
{
	struct moe_grouped_ws g;
	uint8_t *p = (uint8_t *)ck_align_up((uint64_t)(uintptr_t)ws, 256);
	const uint64_t xq = CAPY_MAX_U64(gu->nparts * gu->k, dn->nparts * dn->k) * S * 2;
	const uint64_t parts = gu->nparts > dn->nparts ? gu->nparts : dn->nparts;

	g.xb = (uint16_t *)p;
	p += ck_align_up(xq, 256);
	g.gs = (float *)p;
	p += ck_align_up(parts * S * 4, 256);
	g.cnt = (int32_t *)p;
	p += ck_align_up(E * 4, 256);
	g.cursor = (int32_t *)p;
	p += ck_align_up(E * 4, 256);
	g.list = (int32_t *)p;
	p += ck_align_up(S * 4, 256);
	g.tiles = (int32_t *)p;
	p += ck_align_up(moe_grouped_max_tiles(S, E) * 12, 256);
	g.ntiles = (uint32_t *)p;
	return g;
}

int moe_grouped_plan(struct moe_grouped_ws *g, const int32_t *ids, const uint8_t *grouped, uint64_t T, uint64_t k,
		     uint64_t E, cudaStream_t st)
{
	const uint64_t S = T * k;
	cudaError_t r;
	int rc;

	if ((r = cudaMemsetAsync(g->cnt, 0, E * 4, st)) != cudaSuccess)
		return -(int)r;
	ck_launch(k_count, (unsigned)((S + 255) / 256), 256, 0, st, ids, grouped, T, k, g->cnt);
	if ((rc = ck_launched()))
		return rc;
	ck_launch(k_plan, 1, PLAN_THREADS, 0, st, g->cnt, E, g->cursor, g->tiles, g->ntiles);
	if ((rc = ck_launched()))
		return rc;
	ck_launch(k_fill, (unsigned)((S + 255) / 256), 256, 0, st, ids, grouped, T, k, g->cursor, g->list);
	return ck_launched();
}

int moe_grouped_linear(const struct moe_grouped_ws *g, const struct lin_mat *w, const struct lin_act *a,
		       uint64_t S, uint64_t Sg, uint64_t E, float *y, uint64_t ldy, cudaStream_t st)
{
	struct tile_args t;
	const size_t smem = tile_smem_bytes(true);

	memset(&t, 0, sizeof(t));
	t.w = w->data;
	t.w_stride = w->stride;
	t.n = w->n;
	t.k = w->k;
	t.nparts = w->nparts;
	for (uint32_t p = 0; p < w->nparts; p++)
		t.part_end[p] = w->part_end[p];
	t.codes_off = w->codes_off;
	t.scales_off = w->scales_off;
	t.globals_off = w->globals_off;
	t.x = a->xb;
	t.S = S;
	t.tiles = g->tiles;
	t.list = g->list;
	t.ntiles = g->ntiles;
	t.gs = a->gs;
	t.y = y;
	t.ldy = ldy;
	t.ks = 1;
	const uint64_t gy = moe_grouped_max_tiles(Sg, E);
	const dim3 grid((unsigned)tile_row_tiles(&t), (unsigned)(gy > 65535 ? 65535 : gy), 1);
	cudaFuncSetAttribute(k_tile<true, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
	ck_launch(k_tile<true, false>, grid, TTHREADS, smem, st, t);
	return ck_launched();
}
