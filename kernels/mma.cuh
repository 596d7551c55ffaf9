// mma.cuh - tensor-core building blocks shared by linear-mma.cu and moe-grouped.cu (CUDA C++,
// private to kernels/): the BF16 m16n8k16 MMA, the k order every MMA product of capy follows,
// and the split of an fp32 activation into two BF16 halves.
//
// The k order. A step is 32 consecutive elements of k. In the MMA fragments (PTX ISA,
// "Matrix fragments for mma.m16n8k16"), lane (g = lane / 4, c = lane % 4) holds, of the A
// operand (16 rows x 16 k), rows g and g + 8 at k 2c, 2c+1, 2c+8, 2c+9, and of the B operand
// (16 k x 8 columns) column g at the same four k. A dot product does not care which physical
// element sits at which k of the MMA, as long as A and B agree: so lane (g, c) loads the 8
// consecutive elements 8c .. 8c+7 of its row of the step (one 16-byte load of BF16 weights,
// one 32-byte load of fp32 activations) and gives the first four to the step's first MMA and
// the last four to its second. Weights are the A operand (their rows are the outputs),
// activations the B operand (a column per token); every kernel that multiplies through here
// uses this order, so an output element gets the same chain of MMAs, in the same order, from
// every kernel, whatever the tile around it.
//
// The split. Weights are BF16 already (exact). An fp32 activation a is a_hi = bf16(a) plus
// a_lo = bf16(a - a_hi) (the difference is exact), so x . w is accumulated as the MMAs of
// the hi halves and of the lo halves: the products are exact in fp32 and what is lost is
// a's bits past the 16th (~2^-17 relative), against 2^-8 for one BF16 rounding.
#ifndef CAPY_KERNELS_MMA_CUH
#define CAPY_KERNELS_MMA_CUH

#include "ck-common.cuh"

#define MMA_STEP 32 // elements of k per step

// c += a . b over one k16 (fp32 accumulate).
static __device__ __forceinline__ void mma_bf16(float c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
						uint32_t b0, uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
		     "{%0,%1,%2,%3};\n"
		     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
		     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Two floats as packed BF16 hi halves and lo halves (element 0 in the low 16 bits).
static __device__ __forceinline__ void mma_split2(float f0, float f1, uint32_t *hi, uint32_t *lo)
{
	const __nv_bfloat162 h = __floats2bfloat162_rn(f0, f1);
	const float r0 = __fsub_rn(f0, __low2float(h)), r1 = __fsub_rn(f1, __high2float(h));
	const __nv_bfloat162 l = __floats2bfloat162_rn(r0, r1);

	*hi = *(const uint32_t *)&h;
	*lo = *(const uint32_t *)&l;
}

// A lane's 8 activations of a step as the B registers of the step's two MMAs: hi[0..1] and
// lo[0..1] for the first, hi[2..3] and lo[2..3] for the second.
static __device__ __forceinline__ void mma_split8(const float f[8], uint32_t hi[4], uint32_t lo[4])
{
	for (int q = 0; q < 4; q++)
		mma_split2(f[2 * q], f[2 * q + 1], &hi[q], &lo[q]);
}

// One step of one 16x8 tile with fp32 activations: wg, wg8 are the lane's 8 weights of rows
// g and g + 8. The order (first MMA hi, lo, second MMA hi, lo) is part of the numerics.
static __device__ __forceinline__ void mma_step_split(float c[4], uint4 wg, uint4 wg8, const uint32_t hi[4],
						      const uint32_t lo[4])
{
	mma_bf16(c, wg.x, wg8.x, wg.y, wg8.y, hi[0], hi[1]);
	mma_bf16(c, wg.x, wg8.x, wg.y, wg8.y, lo[0], lo[1]);
	mma_bf16(c, wg.z, wg8.z, wg.w, wg8.w, hi[2], hi[3]);
	mma_bf16(c, wg.z, wg8.z, wg.w, wg8.w, lo[2], lo[3]);
}

// One step with activations that are exact in BF16 (xb: the lane's 8 of its column).
static __device__ __forceinline__ void mma_step_exact(float c[4], uint4 wg, uint4 wg8, uint4 xb)
{
	mma_bf16(c, wg.x, wg8.x, wg.y, wg8.y, xb.x, xb.y);
	mma_bf16(c, wg.z, wg8.z, wg.w, wg8.w, xb.z, xb.w);
}

// cp.async of 16 bytes, zero-filled where !valid (src is not read then).
static __device__ __forceinline__ void mma_cp16(void *smem, const void *src, bool valid)
{
	const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(valid ? 16 : 0));
}

static __device__ __forceinline__ void mma_cp_commit(void)
{
	asm volatile("cp.async.commit_group;\n" ::);
}

template <int N>
static __device__ __forceinline__ void mma_cp_wait(void)
{
	asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

#endif
