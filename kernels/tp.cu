/* tp.cu - tensor parallelism's all-reduce on GPUs (issue 14; docs/tp.md): each rank's partial
 * sums encoded into the payload libcore/tp/tp.h defines, gathered from every rank by NCCL, and
 * added in rank order on every rank, so that all ranks hold the same bits, the bits
 * capy_tp_reduce_row computes on the CPU.
 *
 * Why a gather and not NCCL's all-reduce: NCCL sums in the order of its ring or tree, chunk by
 * chunk, which for more than two ranks is not rank order, and it has no payload that keeps
 * fp16's range (the power-of-two shift of each row) nor a way to add BF16 partials as the
 * comparison payload defines. A gather moves the same bytes to each rank as a ring all-reduce
 * does for two ranks (one row of the other rank); the sum is then a small kernel.
 *
 * NCCL is loaded with dlopen when a communicator opens (as cuBLASLt is, linear-blas.cu): the
 * binaries run without it, and only --tp needs it. NVLink multicast (NVLS) is never asked for
 * (no cuMulticastCreate); the device machines set NCCL_NVLS_ENABLE=0 themselves. */
#include "capy-kernels.h"
#include "ck-common.cuh"

#include <dlfcn.h>
#include <math.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TP_THREADS 256

static_assert(sizeof(ncclUniqueId) == CK_TP_ID_BYTES, "NCCL's unique id size");

/* --- the payload's arithmetic: libcore/tp/tp.c's, bit for bit ------------------------------- */

static __device__ __forceinline__ uint16_t tp_f32_to_f16(float f)
{
	const uint32_t u = __float_as_uint(f), sign = (u >> 16) & 0x8000, a = u & 0x7fffffff;

	if (a > 0x7f800000)
		return (uint16_t)(sign | 0x7e00);
	if (a >= 0x477ff000)
		return (uint16_t)(sign | 0x7c00);
	if (a < 0x38800000) /* subnormal half: RNE(|f| * 2^24), exact scaling */
		return (uint16_t)(sign | (uint32_t)__float2uint_rn(__fmul_rn(fabsf(f), 16777216.0f)));
	uint32_t r = a - (112u << 23);
	r += 0xfff + ((r >> 13) & 1);
	return (uint16_t)(sign | (r >> 13));
}

static __device__ __forceinline__ float tp_f16_to_f32(uint16_t h)
{
	const uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;

	if (e == 0x1f)
		return __uint_as_float(sign | 0x7f800000 | (m << 13));
	if (e == 0) {
		const float v = ldexpf((float)m, -24);
		return sign ? -v : v;
	}
	return __uint_as_float(sign | ((e + 112) << 23) | (m << 13));
}

static __device__ __forceinline__ uint16_t tp_f32_to_bf16(float f)
{
	uint32_t u = __float_as_uint(f);

	if ((u & 0x7fffffff) > 0x7f800000)
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fff + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

static __device__ __forceinline__ float tp_bf16_to_f32(uint16_t h)
{
	return __uint_as_float((uint32_t)h << 16);
}

/* capy_tp_fp16_shift */
static __device__ __forceinline__ int tp_shift(float amax)
{
	int e;

	if (!(amax > 0) || !isfinite(amax))
		return 0;
	frexpf(amax, &e);
	const int s = 15 - e;
	return s > 125 ? 125 : s < -112 ? -112 : s;
}

/* A rank's block: rows x n payload elements (4 or 2 bytes), then one int32 shift a row, each
 * part 16-byte aligned. */
static uint64_t tp_elem_bytes(int payload)
{
	return payload == CK_TP_FP32 ? 4 : 2;
}

static uint64_t tp_shifts_at(int payload, uint64_t rows, uint64_t n)
{
	return ck_align_up(rows * n * tp_elem_bytes(payload), 16);
}

extern "C" size_t ck_tp_block_bytes(int payload, uint64_t rows, uint64_t n)
{
	return (size_t)(tp_shifts_at(payload, rows, n) + ck_align_up(rows * 4, 16));
}

/* One block a row: the row's largest finite magnitude (fp16-shift only; max is exact in any
 * order), then each element as the receivers will read it. */
static __global__ void __launch_bounds__(TP_THREADS)
	k_tp_encode(int payload, const float *x, uint64_t n, uint64_t ld, void *block, uint64_t shifts_at)
{
	ck_grid_enter();
	__shared__ float s_max[TP_THREADS / 32];
	const uint64_t row = blockIdx.x;
	const float *xr = x + row * ld;
	int32_t *shifts = (int32_t *)((uint8_t *)block + shifts_at);
	int s = 0;

	if (payload == CK_TP_FP16_SHIFT) {
		float m = 0;
		for (uint64_t i = threadIdx.x; i < n; i += TP_THREADS)
			if (isfinite(xr[i]))
				m = fmaxf(m, fabsf(xr[i]));
		for (int o = 16; o; o >>= 1)
			m = fmaxf(m, __shfl_xor_sync(CK_FULL, m, o));
		if ((threadIdx.x & 31) == 0)
			s_max[threadIdx.x >> 5] = m;
		__syncthreads();
		m = s_max[0];
		for (int w = 1; w < TP_THREADS / 32; w++)
			m = fmaxf(m, s_max[w]);
		s = tp_shift(m);
	}
	if (threadIdx.x == 0)
		shifts[row] = s;
	for (uint64_t i = threadIdx.x; i < n; i += TP_THREADS) {
		const float v = xr[i];
		if (payload == CK_TP_FP32) {
			((float *)block)[row * n + i] = v;
		} else if (payload == CK_TP_BF16) {
			((uint16_t *)block)[row * n + i] = tp_f32_to_bf16(v);
		} else {
			float w = ldexpf(v, s); /* exact: no overflow by the choice of s */
			if (isfinite(w))
				w = fminf(fmaxf(w, -65504.0f), 65504.0f);
			((uint16_t *)block)[row * n + i] = tp_f32_to_f16(w);
		}
	}
}

/* Element i of a row: the ranks' values as received, added in rank order (bf16: each partial
 * sum rounded again), capy_tp_reduce_row's order. */
static __device__ __forceinline__ float tp_sum(int payload, const uint8_t *gathered, uint64_t block_bytes, int ranks,
					       uint64_t shifts_at, uint64_t at, uint64_t row)
{
	float acc = 0;

	for (int r = 0; r < ranks; r++) {
		const uint8_t *b = gathered + (uint64_t)r * block_bytes;
		float v;
		if (payload == CK_TP_FP32) {
			v = ((const float *)b)[at];
		} else if (payload == CK_TP_BF16) {
			v = tp_bf16_to_f32(((const uint16_t *)b)[at]);
		} else {
			const int s = ((const int32_t *)(b + shifts_at))[row];
			v = ldexpf(tp_f16_to_f32(((const uint16_t *)b)[at]), -s);
		}
		acc = r ? __fadd_rn(acc, v) : v;
		if (r && payload == CK_TP_BF16)
			acc = tp_bf16_to_f32(tp_f32_to_bf16(acc));
	}
	return acc;
}

/* out[row][i] for the rows blockIdx.y, + gridDim.y, ... (grid y stops at 65535). */
static __global__ void __launch_bounds__(TP_THREADS)
	k_tp_reduce(int payload, const void *gathered, uint64_t block_bytes, int ranks, uint64_t rows, uint64_t n,
		    uint64_t shifts_at, float *out, uint64_t ld)
{
	ck_grid_enter();
	const uint64_t i = (uint64_t)blockIdx.x * TP_THREADS + threadIdx.x;

	if (i >= n)
		return;
	for (uint64_t row = blockIdx.y; row < rows; row += gridDim.y)
		out[row * ld + i] = tp_sum(payload, (const uint8_t *)gathered, block_bytes, ranks, shifts_at, row * n + i, row);
}

extern "C" int ck_tp_encode(int payload, const float *x, uint64_t rows, uint64_t n, uint64_t ld, void *block,
			    void *stream)
{
	if (!rows || !n)
		return 0;
	ck_launch(k_tp_encode, (unsigned)rows, TP_THREADS, 0, (cudaStream_t)stream, payload, x, n, ld, block,
		  tp_shifts_at(payload, rows, n));
	return ck_launched();
}

extern "C" int ck_tp_reduce(int payload, const void *gathered, int ranks, uint64_t rows, uint64_t n, float *out,
			    uint64_t ld, void *stream)
{
	if (!rows || !n)
		return 0;
	ck_launch(k_tp_reduce, dim3((unsigned)((n + TP_THREADS - 1) / TP_THREADS), (unsigned)(rows < 65535 ? rows : 65535)),
		  TP_THREADS, 0,
		  (cudaStream_t)stream, payload, gathered, (uint64_t)ck_tp_block_bytes(payload, rows, n), ranks, rows, n,
		  tp_shifts_at(payload, rows, n), out, ld);
	return ck_launched();
}

/* --- NCCL ------------------------------------------------------------------------------------ */

struct ck_tp_comm {
	void *lib;
	ncclComm_t comm;
	int ranks, rank;
	ncclResult_t (*GetUniqueId)(ncclUniqueId *);
	ncclResult_t (*CommInitRank)(ncclComm_t *, int, ncclUniqueId, int);
	ncclResult_t (*CommDestroy)(ncclComm_t);
	ncclResult_t (*AllGather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
	const char *(*GetErrorString)(ncclResult_t);
};

/* libnccl.so.2 and the entry points this file uses, into c (its lib NULL on failure). */
static int tp_load(struct ck_tp_comm *c, char *why, size_t why_size)
{
	if (!(c->lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL))) {
		snprintf(why, why_size, "%s", dlerror());
		return -1;
	}
#define TP_SYM(field, name)                                                                  \
	if (!(*(void **)&c->field = dlsym(c->lib, name))) {                                   \
		snprintf(why, why_size, "libnccl.so.2 lacks %s", name);                      \
		dlclose(c->lib);                                                               \
		c->lib = NULL;                                                                 \
		return -1;                                                                     \
	}
	TP_SYM(GetUniqueId, "ncclGetUniqueId")
	TP_SYM(CommInitRank, "ncclCommInitRank")
	TP_SYM(CommDestroy, "ncclCommDestroy")
	TP_SYM(AllGather, "ncclAllGather")
	TP_SYM(GetErrorString, "ncclGetErrorString")
#undef TP_SYM
	return 0;
}

extern "C" int ck_tp_unique_id(uint8_t id[CK_TP_ID_BYTES], char *why, size_t why_size)
{
	struct ck_tp_comm c = {};
	ncclUniqueId u;

	if (tp_load(&c, why, why_size) < 0)
		return -1;
	const ncclResult_t r = c.GetUniqueId(&u);
	if (r != ncclSuccess)
		snprintf(why, why_size, "ncclGetUniqueId: %s", c.GetErrorString(r));
	else
		memcpy(id, &u, CK_TP_ID_BYTES);
	dlclose(c.lib);
	return r == ncclSuccess ? 0 : -1;
}

extern "C" int ck_tp_comm_open(struct ck_tp_comm **out, const uint8_t id[CK_TP_ID_BYTES], int ranks, int rank,
			       char *why, size_t why_size)
{
	struct ck_tp_comm *c = (struct ck_tp_comm *)calloc(1, sizeof(*c));
	ncclUniqueId u;

	*out = NULL;
	if (!c) {
		snprintf(why, why_size, "out of memory");
		return -1;
	}
	if (tp_load(c, why, why_size) < 0) {
		free(c);
		return -1;
	}
	memcpy(&u, id, CK_TP_ID_BYTES);
	const ncclResult_t r = c->CommInitRank(&c->comm, ranks, u, rank);
	if (r != ncclSuccess) {
		snprintf(why, why_size, "ncclCommInitRank (rank %d of %d): %s", rank, ranks, c->GetErrorString(r));
		dlclose(c->lib);
		free(c);
		return -1;
	}
	c->ranks = ranks;
	c->rank = rank;
	*out = c;
	return 0;
}

extern "C" void ck_tp_comm_close(struct ck_tp_comm *c)
{
	if (!c)
		return;
	c->CommDestroy(c->comm);
	dlclose(c->lib);
	free(c);
}

extern "C" size_t ck_tp_ws_bytes(int payload, uint64_t rows, uint64_t n, int ranks)
{
	return (size_t)ranks * ck_tp_block_bytes(payload, rows, n);
}

extern "C" int ck_tp_allreduce(struct ck_tp_comm *c, int payload, float *x, uint64_t rows, uint64_t n, uint64_t ld,
			       void *ws, void *stream, char *why, size_t why_size)
{
	const size_t blk = ck_tp_block_bytes(payload, rows, n);
	uint8_t *mine = (uint8_t *)ws + (size_t)c->rank * blk;
	int rc;

	if (!rows || !n)
		return 0;
	if ((rc = ck_tp_encode(payload, x, rows, n, ld, mine, stream)) < 0) {
		snprintf(why, why_size, "encoding the partial sums: %s", cudaGetErrorString((cudaError_t)-rc));
		return rc;
	}
	/* in place: rank r's block is already at r * blk of the gathered buffer */
	const ncclResult_t r = c->AllGather(mine, ws, blk, ncclUint8, c->comm, (cudaStream_t)stream);
	if (r != ncclSuccess) {
		snprintf(why, why_size, "ncclAllGather of %zu bytes: %s", blk, c->GetErrorString(r));
		return -(int)cudaErrorUnknown;
	}
	if ((rc = ck_tp_reduce(payload, ws, c->ranks, rows, n, x, ld, stream)) < 0)
		snprintf(why, why_size, "adding the ranks' rows: %s", cudaGetErrorString((cudaError_t)-rc));
	return rc;
}
