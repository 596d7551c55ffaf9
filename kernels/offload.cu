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
		if (job.requested)
			*(volatile uint64_t *)job.requested = ck_globaltimer();
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
 * CPU was given (read from the hand-over area; the grid is sized for every slot). The rows
 * are in host memory: every read crosses PCIe (a microsecond or two each), so the count, the
 * slot and up to GATHER_LOADS values a thread are all requested before any is used (a row
 * beyond the count is read and dropped), one round trip where a loop of dependent loads
 * took one a value. With done, each block's thread 0 first waits for the CPU's done word
 * (an acquire at system scope; the block's barrier orders the other threads' reads after
 * it): the kernel is the wait, with no stream memory operation or second stream between
 * the CPU's results and the combine. V: float4 (rows 16-byte aligned) or float. */
#define GATHER_THREADS 256
#define GATHER_LOADS 4
template <typename V>
static __global__ void __launch_bounds__(GATHER_THREADS)
	k_gather(struct ck_offload_hand h, uint64_t H, float *moe_out, const uint32_t *done, uint64_t *resumed)
{
	ck_grid_enter();
	const uint32_t m = blockIdx.x;
	const uint64_t n = H * sizeof(float) / sizeof(V);

	if (done) {
		if (threadIdx.x == 0) {
			uint32_t d;
			for (;;) {
				asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(d) : "l"(done) : "memory");
				if (d)
					break;
				__nanosleep(64);
			}
		}
		__syncthreads();
	}
	if (resumed && m == 0 && threadIdx.x == 0)
		*(volatile uint64_t *)resumed = ck_globaltimer();
	const uint32_t count = *(volatile uint32_t *)h.n_misses, slot = h.miss_slot[m];
	const V *src = (const V *)(h.out + (uint64_t)m * H);
	for (uint64_t i0 = threadIdx.x; i0 < n; i0 += GATHER_LOADS * GATHER_THREADS) {
		V v[GATHER_LOADS];
#pragma unroll
		for (int u = 0; u < GATHER_LOADS; u++)
			if (i0 + u * GATHER_THREADS < n)
				v[u] = src[i0 + u * GATHER_THREADS];
		if (m >= count)
			return;
		V *dst = (V *)(moe_out + (uint64_t)slot * H);
#pragma unroll
		for (int u = 0; u < GATHER_LOADS; u++)
			if (i0 + u * GATHER_THREADS < n)
				dst[i0 + u * GATHER_THREADS] = v[u];
	}
}

extern "C" int ck_offload_gather(struct ck_offload_hand h, uint64_t S, uint64_t H, float *moe_out, const uint32_t *done,
				 uint64_t *resumed, void *stream)
{
	if (!S)
		return 0;
	if (H % 4 == 0 && (uintptr_t)h.out % 16 == 0 && (uintptr_t)moe_out % 16 == 0)
		ck_launch(k_gather<float4>, (unsigned)S, GATHER_THREADS, 0, (cudaStream_t)stream, h, H, moe_out, done, resumed);
	else
		ck_launch(k_gather<float>, (unsigned)S, GATHER_THREADS, 0, (cudaStream_t)stream, h, H, moe_out, done, resumed);
	return ck_launched();
}
