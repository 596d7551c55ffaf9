/* linear.h - the CPU engine's matrix kernels: y = x W^T for weights as stored in a .capy artifact.
 *
 * W is [n, k] (F32, F16, BF16 or NVFP4, docs/artifact.md); x is m rows of k float32; y is
 * [m][n] float32. The engine prepares the activations once per weight matrix and then lets
 * any number of threads compute disjoint row ranges of y:
 *
 *	struct capy_linear w;
 *	if (capy_linear_init(&w, t->dtype, n, k, t->nparts, t->parts, data, &err) < 0)
 *		return err.code;
 *	void *ws = aligned_alloc(64, CAPY_ALIGN_UP(capy_linear_input_bytes(&w, m), 64));
 *	struct capy_linear_input *in;
 *	capy_linear_prepare(&w, x, m, ws, &in);
 *	// on each thread ith of nth:
 *	capy_slice(n, ith, nth, &r0, &r1);
 *	capy_linear_rows(&w, in, y, r0, r1);
 *
 * Numerics (DESIGN §5; the tests in t/unit/u-linear.c prove each claim):
 *
 * - Plain weights: each weight is widened exactly to float32 and multiplied with the float32
 *   activation, accumulated in float32 with FMA (the scalar path: multiply then add). The
 *   activations are never rounded to BF16 (no vdpbf16ps): that would change the numbers
 *   against the float32 reference. Each ISA path has one fixed summation order per output
 *   element, which depends neither on the row range, nor on m, nor on the other rows: an
 *   element is bit-identical whatever the split, the thread count or the batch it came in.
 *   The paths of different ISAs agree to about 1e-7 relative (they differ only in order).
 *
 * - NVFP4 weights (W4A4): each activation row is quantized per 16-block with the part's
 *   input_scale exactly as vLLM's emulation does (capy_nvfp4_quantize_act), or, where
 *   input_scale is 0, with the row's dynamic scale capy_nvfp4_weight_scale2(row amax), i.e.
 *   amax/(6*448). Then with a = 2*e2m1 of the activation, b = 2*e2m1 of the weight (integers in
 *   [-12, 12]) and E4M3 block scales written as integers S = value * 2^9 (0 .. 15*2^14):
 *
 *	acc = sum over blocks j of (sum of the 16 a*b) * Sa_j * Sw_j      exactly, in int64
 *	y   = (float)(((double)acc * 0x1p-20) * ((double)scale_2 / (double)gs))
 *
 *   where gs = 1.0f / input_scale is vLLM's float32 global scale (so the factor 1/gs is the
 *   same s/gs factorization the reference uses) and the operations in the second line are
 *   IEEE double, in that order: int64 -> double, times 2^-20 (exact), scale_2 / gs (one
 *   division), the product, one rounding to float. Everything before is integer arithmetic,
 *   so the result is the same bits on every ISA, every split and thread count, every m,
 *   and on any other device that follows this definition. It equals the exact dequantized
 *   product sum (x_dq W_dq^T in real arithmetic) to within one float rounding.
 *   A row of x holding Inf or NaN gives NaN outputs (quantization would hide it).
 *
 * - The int64 bound: |a*b| <= 144, so a block's sum is at most 2304 in magnitude; |S| <= 15*2^14
 *   (the largest byte, 0x7f, read as 480), so one block adds at most 2304 * 245760^2 < 2^47 and
 *   CAPY_LINEAR_NVFP4_MAX_K / 16 = 2^16 blocks stay below 2^63. capy_linear_init refuses a
 *   larger k.
 *
 * - Several activation rows (batched decode, speculative verification, prefill): the kernels
 *   decode a weight row's codes and scales once, arrange them like the prepared activations
 *   (cpu-impl.h: one whole block per 32-bit lane) and run up to 8 activation rows against them
 *   from registers. What each activation row then costs per 16 blocks is the byte dot products
 *   (4 vpdpbusd) and the exact scale step: vpmulld by S_a (|block sum * S_a| <= 2304 * 245760
 *   < 2^30, exact in int32) and vpmuldq by S_w into the int64 accumulator (< 2^47 per block).
 *   Nothing is rounded before the final double expression, so the result is the definition's
 *   bit for bit. Cheaper stand-ins are weighed in docs/perf.md ("CPU linear
 *   kernels"): a double accumulator is exact only while every partial sum stays below 2^53,
 *   i.e. at most 64 worst-case blocks (2304 * 245760^2 < 2^47) per lane, and its conversions
 *   cost what vpmuldq costs.
 *
 * Thread-safety: capy_linear_rows may run concurrently on disjoint row ranges of one y.
 * Nothing here allocates, locks or starts threads. capy_isa_set is process-wide and not meant
 * to be called while kernels run.
 */
#ifndef CAPY_CPU_LINEAR_H
#define CAPY_CPU_LINEAR_H

#include "../artifact/artifact.h"

/* The instruction sets the kernels are written for, each including the ones before it. */
enum capy_isa {
	CAPY_ISA_SCALAR,      /* plain C, x86-64-v2 */
	CAPY_ISA_AVX2,        /* AVX2 + FMA + F16C */
	CAPY_ISA_AVX512,      /* AVX-512 F + BW + VL (NVFP4 dot products with vpmaddubsw) */
	CAPY_ISA_AVX512_VNNI, /* the same + AVX512-VNNI (NVFP4 dot products with vpdpbusd) */
	CAPY_ISA_COUNT
};

/* The best ISA this CPU (and OS) supports, detected once at run time. */
enum capy_isa capy_isa_best(void);
/* Force a path for all later calls (tests, benchmarks); -1 if the CPU lacks it. The default is
 * capy_isa_best(). */
int capy_isa_set(enum capy_isa isa);
enum capy_isa capy_isa_get(void);
/* "scalar", "avx2", "avx512", "avx512-vnni". */
const char *capy_isa_name(enum capy_isa isa);

/* See the comment on the int64 bound above. */
#define CAPY_LINEAR_NVFP4_MAX_K (1u << 20)

/* A weight matrix W [n, k] as stored in a .capy artifact. The data is borrowed (usually the
 * mapped artifact) and must outlive the struct. */
struct capy_linear {
	enum capy_dtype dtype; /* CAPY_DT_F32, F16, BF16 or NVFP4 */
	uint64_t n, k;
	const void *data; /* plain: row-major n*k elements; NVFP4: the slice record */
	/* NVFP4 only, filled by capy_linear_init from the record: */
	const uint8_t *codes;  /* [n][k/2] */
	const uint8_t *scales; /* [n][k/16] E4M3 */
	uint32_t nparts;
	uint64_t part_rows[CAPY_MAX_PARTS];
	float scale2[CAPY_MAX_PARTS], input_scale[CAPY_MAX_PARTS];
};

/* Describe W. nparts/parts are the tensor's parts (NVFP4; nparts 0 means one part of n rows;
 * ignored for plain dtypes). For NVFP4, data is one slice record (docs/artifact.md) and its
 * global scales are read here: weight_scale_2 must be finite, input_scale finite and >= 0.
 * Fails with CAPY_EINVAL and a message naming the problem on an unsupported dtype, n or k of
 * 0, k not a multiple of 16 or above CAPY_LINEAR_NVFP4_MAX_K (NVFP4), parts not adding up to n,
 * or sizes that overflow. */
int capy_linear_init(struct capy_linear *w, enum capy_dtype dt, uint64_t n, uint64_t k,
		     uint32_t nparts, const uint64_t *parts, const void *data, struct capy_err *err);

/* Activations prepared for one weight matrix (opaque; lives in the caller's workspace). */
struct capy_linear_input;

/* Workspace bytes capy_linear_prepare needs for m rows (any alignment; 64 is best). SIZE_MAX if
 * the size overflows. Plain weights need only a small header: their x is used in place. */
size_t capy_linear_input_bytes(const struct capy_linear *w, uint64_t m);

/* Prepare x [m][k] (float32, row-major) for w in workspace (capy_linear_input_bytes(w, m)
 * bytes). For NVFP4, each row is quantized once per distinct input_scale of w's parts. x must
 * stay valid and unchanged until the last capy_linear_rows call with *in (plain weights read it
 * there). Single-threaded; allocates nothing. */
void capy_linear_prepare(const struct capy_linear *w, const float *x, uint64_t m, void *workspace,
			 struct capy_linear_input **in);

/* Activation rows already quantized for an NVFP4 matrix, in the GPU's format (kernels/
 * linear-impl.h's struct lin_act, what lin_quantize writes): for part p of w and row i,
 *
 *	qa[((p * ld) + i) * k + j]     int8   a = 2*e2m1 of element j (an integer in [-12, 12])
 *	sa[((p * ld) + i) * (k / 16) + b]  int32  block b's E4M3 scale as an integer (value * 2^9)
 *	gs[(p * ld) + i]               float  vLLM's global scale 1/input_scale (dynamic: of the
 *	                                      row's amax); NaN for a row that held Inf or NaN
 *
 * each part quantized with its own input_scale (parts with the same input_scale hold the same
 * rows). This is the hand-over of the offloading engine (docs/offload.md): the GPU quantizes a
 * routed expert's input once and the CPU computes from the same integers, so both sides give
 * the same bits. */
struct capy_nvfp4_rows {
	const int8_t *qa;
	const int32_t *sa;
	const float *gs;
	uint64_t ld; /* rows between one part's rows and the next part's */
};

/* Prepare m rows of q for w (NVFP4 only) in workspace (capy_linear_input_bytes(w, m) bytes):
 * prepared row i is q's row rows[i] (rows NULL: row i). Nothing is quantized again: the
 * integers are rearranged into the kernels' layout, so capy_linear_rows then gives exactly
 * what capy_linear_prepare of the float rows they came from gives. Fails with CAPY_EFORMAT,
 * naming the row, on a value out of range (|a| > 12 or |S| > 15 * 2^14: the int32 and int64
 * bounds of linear.h would not hold) and CAPY_EINVAL on a matrix that is not NVFP4. */
int capy_linear_prepare_quantized(const struct capy_linear *w, const struct capy_nvfp4_rows *q, const uint32_t *rows,
				  uint64_t m, void *workspace, struct capy_linear_input **in, struct capy_err *err);

/* Quantize m float rows x [m][k] for w (NVFP4) into the format above (every part, row i of
 * part p at p * ld + i), exactly as capy_linear_prepare quantizes them (the reference rule of
 * vLLM's emulation, which the GPU's lin_quantize follows too). workspace: as for
 * capy_linear_prepare with m rows. */
void capy_linear_quantize_rows(const struct capy_linear *w, const float *x, uint64_t m, void *workspace, int8_t *qa,
			       int32_t *sa, float *gs, uint64_t ld);

/* y[i][r] = sum_j x[i][j] * W[r][j] for r in [r0, r1) and every i < m; y is [m][n] (ld = n).
 * Writes only those elements. Any split of the rows gives bit-identical y. in must have been
 * prepared for w. */
void capy_linear_rows(const struct capy_linear *w, const struct capy_linear_input *in, float *y,
		      uint64_t r0, uint64_t r1);

#endif
