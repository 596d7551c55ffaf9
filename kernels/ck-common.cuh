// ck-common.cuh - what the kernels of kernels/*.cu share: launch shapes, the launch check,
// widening of stored floats, the activations in the CPU backend's formulas, and a block-wide
// sum in a fixed order. CUDA C++; included only by kernels/*.cu.
#ifndef CAPY_CK_COMMON_CUH
#define CAPY_CK_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "capy-kernels.h"

#define CK_BLOCK 256
#define CK_FULL 0xffffffffu /* every lane of a warp */
#define CK_MAX_GRID_X 65535u

// Blocks of CK_BLOCK threads for n elements, capped (grid-stride loops cover the rest).
static inline unsigned ck_blocks(uint64_t n)
{
	uint64_t b = (n + CK_BLOCK - 1) / CK_BLOCK;
	return (unsigned)(b < 1 ? 1 : b > 4096 ? 4096 : b);
}

// 0, or the launch error negated (the entry points' return convention).
static inline int ck_launched(void)
{
	cudaError_t e = cudaGetLastError();
	return e == cudaSuccess ? 0 : -(int)e;
}

// Programmatic dependent launch (sm_90 and later): every kernel is launched allowed to start
// while the kernel before it in the stream finishes, and begins with ck_grid_enter(), which
// waits until that kernel has completed and its writes are visible, then lets the next kernel
// be launched. A step is a chain of ~160 short kernels; this hides most of the gap between
// them (launch, ramp-up) without changing what any kernel computes. Every kernel launched by
// ck_launch must call ck_grid_enter() before it reads or writes memory another kernel uses.
// ck_set_dependent_launch(0) turns it off (launches as plain <<<>>>), for measurement.
extern int ck_dependent_launch;

// The GPU's nanosecond clock (for reports: the kernel trace, expert offload's hand-off times).
__device__ __forceinline__ unsigned long long ck_globaltimer(void)
{
	unsigned long long t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

// The kernel trace (ck_trace_start, a measurement knob of TRACE=1 builds: CK_TRACE): the
// buffer, NULL while off. Each .cu file has its own copy of the variable (no relocatable
// device code), set by the setter it registers with ops.cu at load time.
#ifdef CK_TRACE
static __device__ struct ck_trace_buf *ck_trace_dev;

static int ck_trace_set_here(struct ck_trace_buf *b)
{
	return cudaMemcpyToSymbol(ck_trace_dev, &b, sizeof(b)) == cudaSuccess ? 0 : -1;
}

static const int ck_trace_registered __attribute__((used)) = ck_trace_register(ck_trace_set_here);

// One record: the two times and clocks, the launch shape (grid 0: a block's leaving) and the
// kernel's name.
static __device__ __noinline__ void ck_trace_put(struct ck_trace_buf *tb, unsigned long long t0, unsigned long long t1,
						 long long c0, long long c1, unsigned grid, unsigned block, const char *name)
{
	unsigned i = atomicAdd(&tb->n, 1u);

	if (i >= tb->cap)
		return;
	struct ck_trace_rec *r = &tb->rec[i];
	r->t_start = t0;
	r->t_ready = t1;
	r->clk_start = c0;
	r->clk_ready = c1;
	r->grid = grid;
	r->block = block;
	int j = 0;
	for (; j < (int)sizeof(r->name) - 1 && name[j]; j++)
		r->name[j] = name[j];
	r->name[j] = 0;
}

// Thread 0 of block 0, tracing: when it started, when its wait returned, the launch shape.
static __device__ __forceinline__ void ck_trace_note(struct ck_trace_buf *tb, unsigned long long t0, long long c0,
						     const char *name)
{
	ck_trace_put(tb, t0, ck_globaltimer(), c0, clock64(), gridDim.x * gridDim.y * gridDim.z,
		     blockDim.x * blockDim.y * blockDim.z, name);
}
#endif

// Every kernel calls ck_grid_enter() (a macro, for the kernel's name in the trace). Tracing,
// it also declares a guard whose destructor records, when block 0's thread 0 leaves the scope
// ck_grid_enter() was called in (the kernel's end, mostly), a second record (grid 0): the
// block's own time, apart from the grid's completion that the next kernel waits for.
#ifdef CK_TRACE
struct ck_trace_leave {
	const char *name;
	struct ck_trace_buf *tb;
	__device__ ~ck_trace_leave()
	{
		if (tb) {
			const unsigned long long t = ck_globaltimer();
			const long long c = clock64();
			ck_trace_put(tb, t, t, c, c, 0, 0, name);
		}
	}
};
#define ck_grid_enter() struct ck_trace_leave ck_trace_leave_ = { __func__, ck_grid_enter_named(__func__) }
#else
#define ck_grid_enter() ck_grid_enter_named(__func__)
#endif

__device__ __forceinline__ struct ck_trace_buf *ck_grid_enter_named(const char *name)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#ifdef CK_TRACE
	struct ck_trace_buf *tb = NULL;
	unsigned long long t0 = 0;
	long long c0 = 0;

	if ((blockIdx.x | blockIdx.y | blockIdx.z | threadIdx.x | threadIdx.y | threadIdx.z) == 0 && (tb = ck_trace_dev)) {
		t0 = ck_globaltimer();
		c0 = clock64();
	}
#endif
	asm volatile("griddepcontrol.wait;" ::: "memory");
	asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#ifdef CK_TRACE
	if (tb)
		ck_trace_note(tb, t0, c0, name);
	return tb;
#endif
#endif
	(void)name;
	return NULL;
}

// ck_launch in clusters of `cluster` blocks along x (sm_90 and later; 0 or 1: no cluster): the
// blocks of a cluster run at once and read each other's shared memory.
template <typename... KernelArgs, typename... Args>
static inline void ck_launch_cluster(unsigned cluster, void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem,
				     cudaStream_t st, Args &&...args)
{
	cudaLaunchAttribute attr[2];
	attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
	attr[0].val.programmaticStreamSerializationAllowed = ck_dependent_launch ? 1 : 0;
	attr[1].id = cudaLaunchAttributeClusterDimension;
	attr[1].val.clusterDim.x = cluster;
	attr[1].val.clusterDim.y = 1;
	attr[1].val.clusterDim.z = 1;
	cudaLaunchConfig_t cfg = {};
	cfg.gridDim = grid;
	cfg.blockDim = block;
	cfg.dynamicSmemBytes = smem;
	cfg.stream = st;
	cfg.attrs = attr;
	cfg.numAttrs = cluster > 1 ? 2 : 1;
	cudaLaunchKernelEx(&cfg, kernel, static_cast<Args &&>(args)...); /* errors: ck_launched() */
}

template <typename... KernelArgs, typename... Args>
static inline void ck_launch(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t st,
			     Args &&...args)
{
	ck_launch_cluster(0, kernel, grid, block, smem, st, static_cast<Args &&>(args)...);
}

static inline uint64_t ck_align_up(uint64_t x, uint64_t a)
{
	return (x + a - 1) / a * a;
}

// Element i of a stored float array of dtype dt (enum ck_dtype: F32, F16, BF16), widened.
__device__ __forceinline__ float ck_widen(const void *p, int dt, uint64_t i)
{
	if (dt == CK_F32)
		return ((const float *)p)[i];
	if (dt == CK_BF16)
		return __uint_as_float((uint32_t)((const uint16_t *)p)[i] << 16);
	return __half2float(((const __half *)p)[i]);
}

// The CPU backend's silu and sigmoid (libcore/backend/cpu/ops.c), unfused.
__device__ __forceinline__ float ck_silu(float x)
{
	return __fdiv_rn(x, __fadd_rn(1.0f, expf(-x)));
}

__device__ __forceinline__ float ck_sigmoid(float x)
{
	return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x)));
}

// The hyper-connection mixers' activations (the CPU's hc_mix): the low-rank path's
// silu(v / hc) and the injection weight 2 sigmoid(v / hc). Their own kernels (ops.cu) and the
// decode GEMV's epilogue (linear-mma.cu) share them, so either gives the same bits.
__device__ __forceinline__ float ck_hc_low(float v, float hc)
{
	return ck_silu(__fdiv_rn(v, hc));
}

__device__ __forceinline__ float ck_hc_inject(float v, float hc)
{
	return __fmul_rn(2.0f, ck_sigmoid(__fdiv_rn(v, hc)));
}

// v through epilogue ep (enum ck_epilogue) with its divisor d.
__device__ __forceinline__ float ck_epilogue_apply(float v, uint32_t ep, float d)
{
	return ep == CK_EP_HC_LOW ? ck_hc_low(v, d) : ep == CK_EP_HC_INJECT ? ck_hc_inject(v, d) : v;
}

// Candidate (v2, x2) beats (v1, x1): a valid one (x >= 0) beats none, a larger value beats a
// smaller, and on equal values the lower index wins (the CPU's first maximum). The router's
// top k (moe.cu) and the sampler's maximum (sample.cu) both pick by it.
__device__ __forceinline__ bool ck_beats(float v1, int x1, float v2, int x2)
{
	if (x2 < 0)
		return false;
	if (x1 < 0)
		return true;
	return v2 > v1 || (v2 == v1 && x2 < x1);
}

// Sum of v over the block (blockDim.x a multiple of 32, at most 1024), the same tree for
// every block: within warps by shuffles, then the warps' sums by warp 0. Every thread gets
// the total; it ends with a barrier, so `red` may be reused at once.
__device__ __forceinline__ float ck_block_sum(float v, float *red)
{
	unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;

	for (int o = 16; o > 0; o >>= 1)
		v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
	if (lane == 0)
		red[warp] = v;
	__syncthreads();
	if (warp == 0) {
		v = lane < nw ? red[lane] : 0.0f;
		for (int o = 16; o > 0; o >>= 1)
			v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
		if (lane == 0)
			red[0] = v;
	}
	__syncthreads();
	v = red[0];
	__syncthreads();
	return v;
}

#endif
