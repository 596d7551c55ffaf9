/* linear-impl.h - private to kernels/: the launchers behind ck_linear that moe.cu reuses for the
 * routed experts (CUDA C++). A matrix here is either one matrix (ids NULL) or a stack of
 * matrices of one shape, where activation row i uses the record data + ids[i] * stride. */
#ifndef CAPY_KERNELS_LINEAR_IMPL_H
#define CAPY_KERNELS_LINEAR_IMPL_H

#include "capy-kernels.h"

#include <cuda_runtime.h>

/* Where the weights of activation row i are. */
#define LIN_MULTI 4

struct lin_mat {
	enum ck_dtype dtype;
	const uint8_t *data;
	uint64_t stride;    /* bytes between records of a stack */
	const int32_t *ids; /* NULL: one matrix for every row; else row i uses record ids[i] */
	uint64_t n, k;
	/* NVFP4: */
	uint32_t nparts;
	uint64_t part_end[CK_MAX_PARTS]; /* row where part p ends (prefix sums of part_rows) */
	uint64_t codes_off, scales_off, globals_off;
	/* Plain weights only: several matrices of the same dtype and k over the same input in one
	 * launch (nmulti of them; 0: just this one). Rows [mend[j-1], mend[j]) of the combined
	 * matrix are the rows of matrix j (data mdata[j]), written to my[j] with row stride
	 * mldy[j]; each element is computed exactly as it would be alone. */
	uint32_t nmulti;
	int ks;                          /* warps per row they all get alone (k_slices) */
	const uint8_t *mdata[LIN_MULTI];
	uint64_t mend[LIN_MULTI], mldy[LIN_MULTI];
	float *my[LIN_MULTI];
};

/* NVFP4 activations quantized for rows [0, m), one copy per part p (with that part's
 * input_scale): codes qa [nparts][m][k] int8 (a = 2*e2m1), block scales sa [nparts][m][k/16]
 * int32 (value * 2^9), global scales gs [nparts][m] (vLLM's 1/input_scale, NaN for a row
 * that holds Inf/NaN or has no finite scale). */
struct lin_act {
	int8_t *qa;
	int32_t *sa;
	float *gs;
	uint64_t m;
};

struct lin_mat lin_mat_of(const struct ck_linear *w, const void *data, uint64_t stride, const int32_t *ids);

/* Bytes lin_act_carve needs for m rows of w (with 256 bytes of slack for the alignment). */
size_t lin_act_bytes(const struct lin_mat *w, uint64_t m);
/* Lay out a lin_act in ws. */
struct lin_act lin_act_carve(const struct lin_mat *w, uint64_t m, void *ws);

/* Quantize rows i < a->m: row i is x + (i / xdiv) * ldx, each part with its input_scale read
 * from row i's record. */
int lin_quantize(const struct lin_mat *w, const float *x, uint64_t ldx, uint64_t xdiv, const struct lin_act *a,
		 cudaStream_t st);
/* y[i][r] (row stride ldy) for i < a->m from the quantized rows. */
int lin_nvfp4(const struct lin_mat *w, const struct lin_act *a, float *y, uint64_t ldy, cudaStream_t st);
/* Warps per row of a plain matrix of n rows of k elements of es bytes (from n and k alone). */
int lin_slices(uint64_t n, uint64_t k, uint64_t es);
/* Plain weights: y[i][r] = x[i / xdiv] . W_i[r] for i < m (x row stride k, y row stride ldy). */
int lin_plain(const struct lin_mat *w, const float *x, uint64_t xdiv, uint64_t m, float *y, uint64_t ldy,
	      cudaStream_t st);

/* --- NVFP4 arithmetic shared by linear.cu and moe.cu (the same bits in both) --- */

/* An E4M3 byte as the integer value * 2^9 (capy_nv_scale_int; 0x7f reads as 480). */
static __device__ __forceinline__ int32_t scale_int(uint32_t s)
{
	uint32_t e = (s >> 3) & 15, mm = s & 7;
	int32_t v = (int32_t)(e ? (8 + mm) << (e - 1) : mm);

	return (s & 0x80) ? -v : v;
}

/* capy_f32_to_e4m3: round to nearest even, saturating to NaN (0x7f) from 480 up. */
static __device__ __forceinline__ uint32_t f32_to_e4m3(float f)
{
	uint32_t u = __float_as_uint(f), sign = (u >> 24) & 0x80, a = u & 0x7fffffff, e, keep, rest;

	if (a >= 0x43f00000)
		return sign | 0x7f;
	if (a < 0x3c800000) /* subnormal: RNE(|f| * 2^9), exact scaling */
		return sign | (uint32_t)rintf(__fmul_rn(__uint_as_float(a), 512.0f));
	e = (a >> 23) - 127 + 7;
	keep = (a >> 20) & 7;
	rest = a & 0xfffff;
	if (rest > 0x80000 || (rest == 0x80000 && (keep & 1))) {
		if (++keep == 8) {
			keep = 0;
			e++;
		}
	}
	return sign | (e << 3) | keep;
}

/* 2 * e2m1 of x by capy_e2m1_code's rule (ties to the even mantissa), as a signed integer. */
static __device__ __forceinline__ int e2m1_a(float x)
{
	float a = fabsf(x);
	int ord = (0.25f < a) + (0.75f < a) + (1.25f < a) + (1.75f < a) + (2.5f < a) + (3.5f < a) + (5.0f < a);
	int mag;

	if (a == 0.75f || a == 1.75f || a == 3.5f)
		ord++;
	mag = ord < 4 ? ord : (2 + (ord & 1)) << ((ord >> 1) - 1); /* 0 1 2 3 4 6 8 12 */
	return x < 0 ? -mag : mag;
}

/* Eight weight codes (one 32-bit word, element 2t in the low nibble of byte t, so nibble i is
 * element i) to 2*e2m1 as int8, two words of four: the nibbles are byte_perm selectors into a
 * table of magnitudes and one of their negatives, and the sign bit picks between them. */
static __device__ __forceinline__ void decode8(uint32_t c, uint32_t *w0, uint32_t *w1)
{
	const uint32_t P0 = 0x03020100u, P1 = 0x0c080604u; /* 0 1 2 3 | 4 6 8 12 */
	const uint32_t N0 = 0xfdfeff00u, N1 = 0xf4f8fafcu; /* 0 -1 -2 -3 | -4 -6 -8 -12 */
	uint32_t lo = c & 0x7777u, hi = (c >> 16) & 0x7777u;
	uint32_t pl = __byte_perm(P0, P1, lo), nl = __byte_perm(N0, N1, lo);
	uint32_t ph = __byte_perm(P0, P1, hi), nh = __byte_perm(N0, N1, hi);

	*w0 = __byte_perm(pl, nl, 0x3210u | ((c >> 1) & 0x4444u));
	*w1 = __byte_perm(ph, nh, 0x3210u | ((c >> 17) & 0x4444u));
}

/* The CPU's capy_nv_finish(acc, capy_nv_factor(scale2, gs)); NaN rows give the CPU's NaN (the
 * device would give another NaN bit pattern). */
static __device__ __forceinline__ float nv_finish(long long acc, float s2, float gs)
{
	double f;

	if (isnan(gs))
		return __uint_as_float(0x7fc00000);
	f = __ddiv_rn((double)s2, (double)gs);
	return __double2float_rn(__dmul_rn(__dmul_rn(__ll2double_rn(acc), 0x1p-20), f));
}

/* Quantize one row xr [k] for part p of the matrix whose record is rec, with the block's
 * threads (blockDim.x a multiple of 32, at most 1024): the row's amax and Inf/NaN flag (for
 * the dynamic scale), then a thread per 16-block: codes qa [k] (2 * e2m1, int8), scales sa
 * [k / 16] (value * 2^9) and *gs (vLLM's 1 / input_scale, NaN for a row that holds Inf/NaN).
 * The float operations of capy_nvfp4_quantize_act, each rounded as there. qa may be global or
 * shared memory (16-byte aligned). Every thread of the block must call it. */
static __device__ __forceinline__ void lin_quant_row(const struct lin_mat *wp, const uint8_t *rec, const float *xr,
						     unsigned p, int8_t *qa, int32_t *sa, float *gs_out)
{
	const struct lin_mat &w = *wp;
	const uint64_t k = w.k, nb = k / 16;
	const unsigned tid = threadIdx.x, nt = blockDim.x;
	const float sixth = (float)(1.0 / 6.0);
	__shared__ float s_amax[32];
	__shared__ int s_bad[32];
	float amax = 0, is, gs, inv_gs;
	int bad = 0;

	/* fmaxf is exact and ignores NaN, so any order gives the CPU's row amax. */
	for (uint64_t j = tid; j < k; j += nt) {
		float v = xr[j];
		bad |= !isfinite(v);
		amax = fmaxf(amax, fabsf(v));
	}
	for (int off = 16; off; off >>= 1) {
		amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
		bad |= __shfl_xor_sync(0xffffffffu, bad, off);
	}
	if ((tid & 31) == 0) {
		s_amax[tid / 32] = amax;
		s_bad[tid / 32] = bad;
	}
	__syncthreads();
	amax = s_amax[0];
	bad = s_bad[0];
	for (unsigned q = 1; q < nt / 32; q++) {
		amax = fmaxf(amax, s_amax[q]);
		bad |= s_bad[q];
	}
	__syncthreads(); /* s_amax may be reused by the next call */

	is = ((const float *)(rec + w.globals_off))[w.nparts + p];
	if (is == 0) { /* dynamic: capy_nvfp4_weight_scale2(amax) */
		is = __fdiv_rn(amax, 2688.0f);
		if (!(is > 0))
			is = 1.0f;
	}
	gs = __fdiv_rn(1.0f, is);
	inv_gs = __fdiv_rn(1.0f, gs);
	if (tid == 0)
		*gs_out = (bad || !isfinite(gs)) ? __uint_as_float(0x7fc00000) : gs;

	for (uint64_t b = tid; b < nb; b += nt) {
		const float *blk = xr + b * 16;
		float v[16], bam = 0, s, t, os;
		uint32_t sc, word[4] = { 0, 0, 0, 0 };
		int32_t si;
		for (int e = 0; e < 16; e++) {
			v[e] = blk[e];
			bam = fmaxf(bam, fabsf(v[e]));
		}
		s = __fmul_rn(gs, __fmul_rn(bam, sixth));
		if (s > 448.0f)
			s = 448.0f;
		sc = f32_to_e4m3(s);
		si = scale_int(sc);
		/* e4m3_to_f32(sc) is exactly si * 2^-9 wherever the result matters (finite rows
		 * with a finite gs never give the NaN byte). */
		t = __fmul_rn(__fmul_rn((float)si, 0x1p-9f), inv_gs);
		os = t == 0 ? 0.0f : __fdiv_rn(1.0f, t);
		for (int e = 0; e < 16; e++) {
			float q = fminf(fmaxf(__fmul_rn(v[e], os), -6.0f), 6.0f);
			word[e / 4] |= ((uint32_t)e2m1_a(q) & 0xff) << (8 * (e % 4));
		}
		*(uint4 *)(qa + b * 16) = make_uint4(word[0], word[1], word[2], word[3]);
		sa[b] = si;
	}
}

/* float expf as the CPU's libm gives it, as near as the device can: exp in double, rounded
 * once to float (correctly rounded except for values within ~2^-29 of a rounding midpoint,
 * where glibc's expf, itself accurate to 0.502 ulp, may round the other way). */
static __device__ __forceinline__ float cpu_expf(float x)
{
	return __double2float_rn(exp((double)x));
}

#endif
