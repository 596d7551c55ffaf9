/* sample.cu - the device's half of sampling (libcore/sample/sample.h, capy_sampler_mode):
 * per row of logits, the first index of the maximum (greedy), or every token that can be
 * among the top k after temperature (top-k sampling), so that the host draws from a few
 * thousand candidates instead of copying the whole row back. The host's sampler then picks
 * exactly the token it would pick from the whole row.
 *
 * Top-k: v = logit / temperature (one IEEE division, as the host), each v mapped to an
 * unsigned key in v's order; the k-th largest key is found by a radix select over the key's
 * bits (11, 11 and 10 bits: a histogram of the row per level, only as many levels as it takes
 * for the keys above the cut to fit the output), then every token at or above the cut, ties
 * included, is listed. The list's order depends on timing (a shared counter), the host sorts
 * it by (v, id), so the result does not. A row with a token mask (structured output) reads it
 * beside the logits and leaves out the ids it does not allow, which is what the host's masked
 * sampler does by setting their logits to -inf. A greedy row is spread over SG_BLOCKS blocks
 * (k_greedy_part), then reduced; a top-k row is one block: the row was just written by lm_head
 * and is read from L2. That block is the limit: a top-k row costs ~150 us on the H200 against
 * ~50 for copying the row to the host, so the backend uses it only for chunks of several rows
 * (forward.c); spreading it over many blocks too is what would make it cheap. */
#include "ck-common.cuh"

#include <math.h>

#define SM_THREADS 1024
#define SM_BINS 2048
#define SM_MASK_SMEM (36 * 1024) /* dynamic shared memory for a mask row, within the 48 KB default */
#define SG_BLOCKS 64   /* blocks a greedy row is spread over (at most CK_SAMPLE_CAP: their maxima in v, id) */
#define SG_THREADS 256

static __device__ __forceinline__ uint32_t order_key(float v)
{
	uint32_t u = __float_as_uint(v);
	return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* The block's best (value, index) by ck_beats; every thread gets it. */
static __device__ void block_best(float *v, int *x, float *sv, int *sx)
{
	const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

	for (int o = 16; o; o >>= 1) {
		float ov = __shfl_xor_sync(CK_FULL, *v, o);
		int ox = __shfl_xor_sync(CK_FULL, *x, o);
		if (ck_beats(*v, *x, ov, ox)) {
			*v = ov;
			*x = ox;
		}
	}
	if (lane == 0) {
		sv[warp] = *v;
		sx[warp] = *x;
	}
	__syncthreads();
	*v = sv[0];
	*x = sx[0];
	for (unsigned w = 1; w < blockDim.x / 32; w++)
		if (ck_beats(*v, *x, sv[w], sx[w])) {
			*v = sv[w];
			*x = sx[w];
		}
	__syncthreads();
}

/* Warp 0: the bin (of nb, counted from the top) where the count from the top first reaches
 * need, and how many lie in the bins above it. */
static __device__ void find_bin(const uint32_t *hist, int nb, uint32_t need, int *bin, uint32_t *above)
{
	const unsigned lane = threadIdx.x;
	const int per = nb / 32;
	uint32_t mine = 0, before;

	for (int j = 0; j < per; j++)
		mine += hist[nb - 1 - (int)lane * per - j];
	before = mine; /* inclusive scan over the lanes, top bins first */
	for (int o = 1; o < 32; o <<= 1) {
		uint32_t t = __shfl_up_sync(CK_FULL, before, o);
		if ((int)lane >= o)
			before += t;
	}
	before -= mine; /* exclusive */
	unsigned hit = __ballot_sync(CK_FULL, before < need && before + mine >= need);
	if (!hit) { /* fewer than need in the whole row: everything is in (bin -1) */
		uint32_t all = mine;
		for (int o = 16; o; o >>= 1)
			all += __shfl_xor_sync(CK_FULL, all, o);
		if (lane == 0) {
			*bin = -1;
			*above = all;
		}
		return;
	}
	if ((int)lane == __ffs(hit) - 1) {
		uint32_t c = before;
		int b = nb - 1 - (int)lane * per;
		for (int j = 0; j < per; j++, b--) {
			if (c + hist[b] >= need)
				break;
			c += hist[b];
		}
		*bin = b;
		*above = c;
	}
}

/* Whether row mask mk (NULL: none) allows id i. */
static __device__ __forceinline__ bool allowed(const uint32_t *mk, uint64_t i)
{
	return !mk || ((mk[i >> 5] >> (i & 31)) & 1);
}

/* Greedy's step: v at id i, if allowed, replaces the best so far when larger (or when nothing
 * was taken yet and it equals -inf); NaN never does. */
static __device__ __forceinline__ void greedy_take(float v, uint32_t ok, int i, float *bv, int *bx)
{
	if (ok && (v > *bv || (*bx < 0 && v == *bv))) {
		*bv = v;
		*bx = i;
	}
}

/* Greedy rows over SG_BLOCKS blocks each, block y a slice of the row: the slice's first maximum
 * (its float4 groups, then its share of the ids past the last whole group) into out->v[y],
 * out->id[y], which k_sample's greedy branch then reduces. One block per row read the row's 1 MB
 * (248k ids) from one multiprocessor: 11 us of a decode step at batch 1, 20 with a mask (H100
 * kernel trace). The maximum with the lowest id among equals is the same whatever the slices
 * (ck_beats orders every candidate the same way), so the split changes no token. Every load is
 * unconditional, so a thread's loads do not wait on the comparisons before them, and each
 * thread visits its ids in increasing order: the first maximum stays first. */
static __global__ void __launch_bounds__(SG_THREADS)
	k_greedy_part(const float *logits, uint64_t V, const struct ck_sample_row *rows, struct ck_sample_out *out)
{
	ck_grid_enter();
	__shared__ float sv[SG_THREADS / 32];
	__shared__ int sx[SG_THREADS / 32];
	const struct ck_sample_row p = rows[blockIdx.x];
	const float *l = logits + blockIdx.x * V;
	const uint32_t *mk = p.mask;
	const unsigned tid = threadIdx.x, y = blockIdx.y;

	if (p.mode != CK_SAMPLE_GREEDY)
		return;
	const uint64_t head = ((uintptr_t)l & 15) == 0 ? V / 4 : 0, tail = V - 4 * head; /* float4 groups; the rest */
	const uint64_t g0 = head * y / SG_BLOCKS, g1 = head * (y + 1) / SG_BLOCKS;
	const uint64_t t0 = 4 * head + tail * y / SG_BLOCKS, t1 = 4 * head + tail * (y + 1) / SG_BLOCKS;
	float bv = -INFINITY;
	int bx = -1;
#pragma unroll 4
	for (uint64_t j = g0 + tid; j < g1; j += SG_THREADS) {
		const float4 x = ((const float4 *)l)[j];
		const uint32_t w = mk ? mk[j >> 3] >> ((j & 7) * 4) : 0xFu;
		greedy_take(x.x, w & 1, (int)(4 * j), &bv, &bx);
		greedy_take(x.y, w & 2, (int)(4 * j + 1), &bv, &bx);
		greedy_take(x.z, w & 4, (int)(4 * j + 2), &bv, &bx);
		greedy_take(x.w, w & 8, (int)(4 * j + 3), &bv, &bx);
	}
	for (uint64_t i = t0 + tid; i < t1; i += SG_THREADS)
		greedy_take(l[i], allowed(mk, i), (int)i, &bv, &bx);
	block_best(&bv, &bx, sv, sx);
	if (tid == 0) {
		out[blockIdx.x].v[y] = bv;
		out[blockIdx.x].id[y] = bx;
	}
}

/* A row's answer: its record's head, and the copy the host reads where there is one. */
static __device__ void sample_head(struct ck_sample_out *o, struct ck_sample_out *h, int32_t status, int32_t n,
				   int32_t greedy)
{
	o->status = status;
	o->n = n;
	o->greedy = greedy;
	if (h) {
		h->status = status;
		h->n = n;
		h->greedy = greedy;
	}
}

static __global__ void __launch_bounds__(SM_THREADS)
	k_sample(const float *logits, uint64_t V, const struct ck_sample_row *rows, struct ck_sample_out *out,
		 struct ck_sample_out *heads, bool stage_mask)
{
	ck_grid_enter();
	extern __shared__ uint32_t s_mask[]; /* stage_mask: the row's mask, ceil(V / 32) words */
	__shared__ uint32_t hist[SM_BINS];
	__shared__ float sv[SM_THREADS / 32];
	__shared__ int sx[SM_THREADS / 32];
	__shared__ int s_bin;
	__shared__ uint32_t s_above, s_n;
	const struct ck_sample_row p = rows[blockIdx.x];
	const float *l = logits + blockIdx.x * V;
	struct ck_sample_out *o = out + blockIdx.x, *h = heads ? heads + blockIdx.x : NULL;
	const unsigned tid = threadIdx.x;

	if (p.mode == CK_SAMPLE_NONE)
		return;
	if (p.mode == CK_SAMPLE_GREEDY) { /* the slices' maxima (k_greedy_part), by warp 0 */
		if (tid >= 32)
			return;
		float bv = -INFINITY;
		int bx = -1;
		for (unsigned q = tid; q < SG_BLOCKS; q += 32)
			if (ck_beats(bv, bx, o->v[q], o->id[q])) {
				bv = o->v[q];
				bx = o->id[q];
			}
		for (int off = 16; off; off >>= 1) {
			float ov = __shfl_xor_sync(CK_FULL, bv, off);
			int ox = __shfl_xor_sync(CK_FULL, bx, off);
			if (ck_beats(bv, bx, ov, ox)) {
				bv = ov;
				bx = ox;
			}
		}
		if (tid == 0) {
			/* The host's loop starts at first (0, or the lowest allowed id) and takes only
			 * larger values: a NaN there, or a row of NaN, leaves it at first. */
			sample_head(o, h, 0, 0, (bx < 0 || isnan(l[p.first])) ? p.first : bx);
		}
		return;
	}
	/* Top k. The row's mask read into shared memory at once (every thread's words in one
	 * round trip) for the passes below. */
	const uint32_t *mk = p.mask;
	if (mk && stage_mask) {
		constexpr int PER = (SM_MASK_SMEM / 4 + SM_THREADS - 1) / SM_THREADS;
		const uint64_t W = (V + 31) / 32;
		uint32_t word[PER];
#pragma unroll
		for (int r = 0; r < PER; r++) /* every load issued before the first store */
			if (tid + (uint64_t)r * SM_THREADS < W)
				word[r] = mk[tid + (uint64_t)r * SM_THREADS];
#pragma unroll
		for (int r = 0; r < PER; r++)
			if (tid + (uint64_t)r * SM_THREADS < W)
				s_mask[tid + (uint64_t)r * SM_THREADS] = word[r];
		__syncthreads();
		mk = s_mask;
	}

	float mx = -INFINITY;
	int mxx = -1;
	uint32_t prefix = 0, need = (uint32_t)p.top_k, above_total = 0;
	int shift = 21, bits = 11;
	for (int level = 0; level < 3; level++) {
		for (unsigned b = tid; b < SM_BINS; b += SM_THREADS)
			hist[b] = 0;
		__syncthreads();
		for (uint64_t i = tid; i < V; i += SM_THREADS) {
			float v = __fdiv_rn(l[i], p.temperature);
			if (isnan(v) || !allowed(mk, i))
				continue;
			uint32_t key = order_key(v);
			if (level == 0 && ck_beats(mx, mxx, v, (int)i)) {
				mx = v;
				mxx = (int)i;
			}
			if (level == 0 || (key >> (shift + bits)) == prefix)
				atomicAdd(&hist[(key >> shift) & ((1u << bits) - 1)], 1u); /* integer counts: order-free */
		}
		__syncthreads();
		if (tid < 32)
			find_bin(hist, 1 << bits, need, &s_bin, &s_above);
		__syncthreads();
		if (s_bin < 0) { /* the row has fewer than k tokens (only at level 0): take all */
			above_total = s_above;
			shift = 32;
			break;
		}
		prefix = (prefix << bits) | (uint32_t)s_bin;
		above_total += s_above;
		need -= s_above;
		if (above_total + hist[s_bin] <= CK_SAMPLE_CAP || level == 2)
			break;
		/* Too many in the bin: look inside it with the next bits. */
		shift = level == 0 ? 10 : 0;
		bits = level == 0 ? 11 : 10;
		__syncthreads();
	}
	const uint32_t cut = shift == 32 ? 0 : prefix << shift, total = above_total + (s_bin < 0 ? 0 : hist[s_bin]);
	if (total > CK_SAMPLE_CAP) { /* ties beyond the output: the host takes the whole row */
		if (tid == 0)
			sample_head(o, h, 1, 0, 0);
		return;
	}
	block_best(&mx, &mxx, sv, sx);
	const float floor_v = __fsub_rn(mx, 40.0f); /* the host's candidates: within e^-40 */
	if (tid == 0)
		s_n = 0;
	__syncthreads();
	for (uint64_t i = tid; i < V; i += SM_THREADS) {
		float v = __fdiv_rn(l[i], p.temperature);
		if (isnan(v) || order_key(v) < cut || !(v >= floor_v) || !allowed(mk, i))
			continue;
		uint32_t at = atomicAdd(&s_n, 1u);
		o->v[at] = v;
		o->id[at] = (int32_t)i;
	}
	__syncthreads();
	if (tid == 0)
		sample_head(o, h, 0, (int32_t)s_n, 0);
}

extern "C" int ck_sample(const float *logits, uint64_t m, uint64_t V, const struct ck_sample_row *rows,
			 struct ck_sample_out *out, struct ck_sample_out *heads, void *stream)
{
	if (!m)
		return 0;
	/* A mask row that fits beside the static arrays is staged in shared memory (248k ids: 31 KB). */
	const size_t mask_bytes = (V + 31) / 32 * 4;
	const bool stage = mask_bytes <= SM_MASK_SMEM;
	ck_launch(k_greedy_part, dim3((unsigned)m, SG_BLOCKS), SG_THREADS, 0, (cudaStream_t)stream, logits, V, rows, out);
	ck_launch(k_sample, (unsigned)m, SM_THREADS, stage ? mask_bytes : 0, (cudaStream_t)stream, logits, V, rows, out, heads, stage);
	return ck_launched();
}
