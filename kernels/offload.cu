/* offload.cu - the GPU's side of expert offload (libcore/backend/cuda/offload.c): per MoE
 * layer, the routed slots split by where their expert is, the misses handed over to the CPU
 * through page-locked memory the kernel writes directly (no copy node, no host wait), and
 * the CPU's results gathered back into the slots' rows. */
#include "capy-kernels.h"
#include "ck-common.cuh"

#define HTHREADS 1024

/* One block. Slot s = t * k + j of row t, expert id = ids[s]:
 * - prompt rows (grouped[t]): gids[s] = id, sids[s] = -1 (the grouped GEMMs read every
 *   expert where it is held; the exact kernels skip negative ids);
 * - exact rows: sids[s] = slot_of[id] (-1 when not resident), gids[s] = -1; with hand, each
 *   miss (slot_of[id] < 0) appended in slot order to the hand-over list (expert, slot, row)
 *   and its row of x copied, the count written last, after a system-wide fence.
 * route[s] = id for every slot (the expert cache's view of the step). */
static __global__ void __launch_bounds__(HTHREADS)
	k_handoff(const int32_t *ids, const uint8_t *grouped, const float *x, uint64_t T, uint64_t k, uint64_t H,
		  const int32_t *slot_of, int32_t *sids, int32_t *gids, int32_t *route, struct ck_offload_hand h,
		  struct ck_offload_job job, bool hand)
{
	ck_grid_enter();
	extern __shared__ uint32_t rowmiss[]; /* [(T + 31) / 32] bits: rows with a miss */
	__shared__ uint32_t s_n;
	const unsigned tid = threadIdx.x, lane = tid & 31;
	const uint64_t S = T * k, words = (T + 31) / 32;

	for (uint64_t w = tid; w < words; w += HTHREADS)
		rowmiss[w] = 0;
	for (uint64_t s = tid; s < S; s += HTHREADS) {
		const int32_t id = ids[s];
		const bool g = grouped && grouped[s / k];
		route[s] = id;
		sids[s] = g ? -1 : slot_of[id];
		gids[s] = g ? id : -1;
	}
	__syncthreads();
	if (hand && tid < 32) { /* the list in slot order: one warp, 32 slots a round */
		uint32_t n = 0;
		for (uint64_t c0 = 0; c0 < S; c0 += 32) {
			const uint64_t s = c0 + lane;
			const int32_t id = s < S ? ids[s] : 0;
			const bool miss = s < S && !(grouped && grouped[s / k]) && slot_of[id] < 0;
			const uint32_t b = __ballot_sync(CK_FULL, miss);
			if (miss) {
				const uint32_t at = n + __popc(b & ((1u << lane) - 1));
				h.expert[at] = id;
				h.miss_slot[at] = (uint32_t)s;
				h.x_row[at] = (uint32_t)(s / k);
				atomicOr(&rowmiss[s / k / 32], 1u << (s / k % 32));
			}
			n += __popc(b);
		}
		if (lane == 0)
			s_n = n;
	}
	__syncthreads();
	if (!hand)
		return;
	for (uint64_t e = tid; e < T * H; e += HTHREADS) {
		const uint64_t t = e / H;
		if (rowmiss[t / 32] >> (t % 32) & 1)
			h.x[e] = x[e];
	}
	__threadfence_system();
	__syncthreads();
	if (tid == 0) {
		*h.n_misses = s_n;
		if (job.n_misses) {
			*(volatile uint32_t *)job.n_misses = s_n;
			*(volatile uint32_t *)job.done = s_n ? 0u : 1u;
			__threadfence_system();
			if (s_n)
				*(volatile uint32_t *)job.req = 1u;
		}
		__threadfence_system();
	}
}

extern "C" int ck_offload_handoff(const int32_t *ids, const uint8_t *grouped, const float *x, uint64_t T, uint64_t k,
				  uint64_t H, const int32_t *slot_of, int32_t *sids, int32_t *gids, int32_t *route,
				  struct ck_offload_hand h, struct ck_offload_job job, bool hand, void *stream)
{
	if (!T || !k)
		return 0;
	ck_launch(k_handoff, 1, HTHREADS, (size_t)(T + 31) / 32 * 4, (cudaStream_t)stream, ids, grouped, x, T, k, H,
		  slot_of, sids, gids, route, h, job, hand);
	return ck_launched();
}

/* Block m: miss m's result row into its slot's row of moe_out, for m below the count the
 * CPU was given (read from the hand-over area; the grid is sized for every slot). */
static __global__ void k_gather(struct ck_offload_hand h, uint64_t H, float *moe_out)
{
	ck_grid_enter();
	const uint32_t m = blockIdx.x;

	if (m >= *(volatile uint32_t *)h.n_misses)
		return;
	const float *src = h.out + (uint64_t)m * H;
	float *dst = moe_out + (uint64_t)h.miss_slot[m] * H;
	for (uint64_t i = threadIdx.x; i < H; i += blockDim.x)
		dst[i] = src[i];
}

extern "C" int ck_offload_gather(struct ck_offload_hand h, uint64_t S, uint64_t H, float *moe_out, void *stream)
{
	if (!S)
		return 0;
	ck_launch(k_gather, (unsigned)S, 256, 0, (cudaStream_t)stream, h, H, moe_out);
	return ck_launched();
}
