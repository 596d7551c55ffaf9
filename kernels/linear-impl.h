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
	/* BF16 on the tensor cores only: each matrix's epilogue (enum ck_epilogue; ep[0] for one
	 * matrix) with its divisor (ck_linear_multi_ep). */
	uint32_t ep[LIN_MULTI];
	float ep_div;
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
	/* Instead of qa and sa: each quantized value as the BF16 that holds 2*e2m1 * Sa exactly,
	 * [nparts][m][k] (the grouped experts' activations, moe-grouped.cu). */
	uint16_t *xb;
	/* The rows to quantize are [gate | up] rows of 2k values and the input is their SwiGLU
	 * (lin_quantize's ldx is then 2k): the experts' down input without its own pass. */
	bool swiglu;
	/* Only rows i with sel[i / sel_div] == sel_val (sel NULL: every row), for quantizing
	 * and for lin_nvfp4: the slots of a step split between the exact and grouped experts. */
	const uint8_t *sel;
	uint64_t sel_div;
	uint8_t sel_val;
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
/* Decode experts in one kernel a stage: y[i][r] for i < m from x rows (row i: x + (i / xdiv) *
 * ldx; swiglu: [gate | up] rows whose SwiGLU is the input), each block quantizing its row
 * itself; the bits of lin_quantize then lin_nvfp4. Only for the stacks lin_nvfp4_fq_ok takes
 * (NVFP4 with ids, k a multiple of 32 up to 4096, 16-byte aligned codes and rows). */
bool lin_nvfp4_fq_ok(const struct lin_mat *w, const float *x, uint64_t m);
int lin_nvfp4_fq(const struct lin_mat *w, const float *x, uint64_t ldx, uint64_t xdiv, bool swiglu, uint64_t m,
		 float *y, uint64_t ldy, cudaStream_t st);
/* Warps per row of a plain matrix of n rows of k elements of es bytes (from n and k alone). */
int lin_slices(uint64_t n, uint64_t k, uint64_t es);
/* Plain weights: y[i][r] = x[i / xdiv] . W_i[r] for i < m (x row stride k, y row stride ldy). */
int lin_plain(const struct lin_mat *w, const float *x, uint64_t xdiv, uint64_t m, float *y, uint64_t ldy,
	      cudaStream_t st);

/* BF16 on the tensor cores (linear-mma.cu): whether w (with x) can go there (BF16, one
 * matrix or a multi set, k a multiple of 32, 16-byte aligned), the slices of k it uses, and
 * y[i][r] = x[i] . W[r] for i < m (x row stride k, y row stride ldy; a multi set writes its
 * own outputs). The same bits for an element whatever m is. */
bool lin_mma_ok(const struct lin_mat *w, const float *x);
int lin_mma_slices(uint64_t n, uint64_t k);
int lin_mma(const struct lin_mat *w, const float *x, uint64_t m, float *y, uint64_t ldy, cudaStream_t st);
/* lin_mma with swiglu: x rows are [gate | up] rows of 2k floats and the input is their SwiGLU
 * (ck_swiglu's bits), for one matrix and rows the skinny kernel takes (lin_mma_swiglu_ok). */
bool lin_mma_swiglu_ok(const struct lin_mat *w, const float *x, uint64_t m);
int lin_mma_x(const struct lin_mat *w, const float *x, bool swiglu, uint64_t m, float *y, uint64_t ldy, cudaStream_t st);
/* Whether lin_mma runs w over m rows as the skinny kernel, the one that applies epilogues. */
bool lin_mma_ep_ok(const struct lin_mat *w, const float *x, uint64_t m);

/* float expf as the CPU's libm gives it, as near as the device can: exp in double, rounded
 * once to float (correctly rounded except for values within ~2^-29 of a rounding midpoint,
 * where glibc's expf, itself accurate to 0.502 ulp, may round the other way). */
static __device__ __forceinline__ float cpu_expf(float x)
{
	return __double2float_rn(exp((double)x));
}

/* An E4M3 byte as the integer value * 2^9 (capy_nv_scale_int; 0x7f reads as 480). */
static __device__ __forceinline__ int32_t scale_int(uint32_t s)
{
	uint32_t e = (s >> 3) & 15, mm = s & 7;
	int32_t v = (int32_t)(e ? (8 + mm) << (e - 1) : mm);

	return (s & 0x80) ? -v : v;
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

#endif
