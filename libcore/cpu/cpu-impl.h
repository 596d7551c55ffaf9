/* cpu-impl.h - private to libcore/cpu: the prepared-activation layout and the per-ISA kernel table.
 *
 * NVFP4 activations are prepared in chunks of 256 elements (16 blocks, the 128 code bytes of two
 * AVX-512 registers). A chunk is 384 bytes, six 64-byte parts; dword d of every part belongs to
 * block d of the chunk:
 *
 *	e0[64]  int8   bytes 4d..4d+3: a = 2*e2m1 of block d's elements 0, 2, 4, 6 (the low
 *	               nibbles of its code bytes 0-3)
 *	e1[64]  int8   elements 8, 10, 12, 14 (low nibbles of code bytes 4-7)
 *	e2[64]  int8   elements 1, 3, 5, 7 (high nibbles of code bytes 0-3)
 *	e3[64]  int8   elements 9, 11, 13, 15 (high nibbles of code bytes 4-7)
 *	nc[16]  int32  -12 * (sum of the 16 a of block d)
 *	sa[16]  int32  the block's E4M3 scale as an integer (value * 2^9)
 *
 * Why: the kernels turn a row's weight codes into b + 12 (unsigned, 0..24) once and arrange them
 * the same way (even dwords of the code bytes into e0/e2, odd ones into e1/e3); then for every
 * activation row the unsigned x signed byte dot products of the four parts (vpdpbusd, or
 * vpmaddubsw + vpaddw + vpmaddwd) land one whole block in one dword, with no horizontal adds.
 * Starting from nc removes the 12 * sum(a) the unsigned weights add. The per-activation-row cost
 * of a chunk is then the dot products, one vpmulld by S_a (|block sum * S_a| < 2^30) and two
 * vpmuldq by S_w into int64: the arrangement work is per weight row, shared by all the
 * activation rows of a group. Elements and blocks past k are zero in every part, so a partial
 * last chunk adds nothing. AVX2 takes a chunk as two halves of 8 blocks (the low and high 32
 * bytes of each part).
 *
 * Workspace: the header (struct capy_linear_input) at a 64-byte boundary, then the chunks
 * [nvar][m][nchunks], then gs [nvar][m] (vLLM's float global scale 1/input_scale of each row and
 * variant; NaN for a row with Inf or NaN).
 */
#ifndef CAPY_CPU_IMPL_H
#define CAPY_CPU_IMPL_H

#include "linear.h"
#include "../quant/floats.h"

#define CAPY_NV_CHUNK 256 /* elements per chunk */
#define CAPY_NV_CHUNK_BYTES 384
#define CAPY_NV_NC 256 /* offsets of nc and sa in a chunk */
#define CAPY_NV_SA 320

/* Where element e (0..15) of block d (0..15) of a chunk goes: see above. */
static inline unsigned capy_nv_slot(unsigned d, unsigned e)
{
	unsigned part = (e & 1) * 2 + ((e >> 3) & 1);

	return 64 * part + 4 * d + ((e >> 1) & 3);
}

struct capy_linear_input {
	enum capy_dtype dtype;
	const float *x; /* [m][k], the caller's */
	uint64_t m, k;
	uint64_t nchunks; /* NVFP4: chunks per row */
	uint32_t nvar;    /* NVFP4: distinct input scales */
	uint8_t part_var[CAPY_MAX_PARTS];
	float var_scale[CAPY_MAX_PARTS]; /* input_scale of each variant; 0 = dynamic */
	uint8_t *q;                      /* [nvar][m][nchunks] chunks, 64-byte aligned */
	float *gs;                       /* [nvar][m] */
};

/* One ISA's kernels. */
struct capy_cpu_kernels {
	/* y[i][r] for r in [r0, r1), i < m, plain weights. */
	void (*plain)(const struct capy_linear *w, const float *x, uint64_t m, float *y, uint64_t r0,
		      uint64_t r1);
	/* Quantize one row x[k] with input_scale (0: dynamic) into its chunks at q; *gs gets
	 * vLLM's global scale, or NaN (see above). */
	void (*nvfp4_prep)(const float *x, uint64_t k, float input_scale, uint8_t *q, float *gs);
	/* y[i][r] for r in [r0, r1) (all in one part with weight_scale_2 scale2) and i < m, from
	 * the rows' chunks (q, row i at q + i * nchunks * 256) and global scales gs[i]. */
	void (*nvfp4)(const struct capy_linear *w, const uint8_t *q, const float *gs, uint64_t m,
		      uint64_t nchunks, float scale2, float *y, uint64_t r0, uint64_t r1);
};

/* The kernels of the current ISA (capy_isa_set / capy_isa_best). */
const struct capy_cpu_kernels *capy_cpu_kernels(void);

#define CAPY_PLAIN_ARGS                                                                            \
	const struct capy_linear *w, const float *x, uint64_t m, float *y, uint64_t r0, uint64_t r1
#define CAPY_PREP_ARGS const float *x, uint64_t k, float input_scale, uint8_t *q, float *gs
#define CAPY_NVFP4_ARGS                                                                            \
	const struct capy_linear *w, const uint8_t *q, const float *gs, uint64_t m,                \
		uint64_t nchunks, float scale2, float *y, uint64_t r0, uint64_t r1

void capy_plain_scalar(CAPY_PLAIN_ARGS);
void capy_plain_avx2(CAPY_PLAIN_ARGS);
void capy_plain_avx512(CAPY_PLAIN_ARGS);
void capy_nvfp4_prep_scalar(CAPY_PREP_ARGS);
void capy_nvfp4_prep_avx2(CAPY_PREP_ARGS);
void capy_nvfp4_prep_avx512(CAPY_PREP_ARGS);
void capy_nvfp4_scalar(CAPY_NVFP4_ARGS);
void capy_nvfp4_avx2(CAPY_NVFP4_ARGS);
void capy_nvfp4_avx512(CAPY_NVFP4_ARGS);
void capy_nvfp4_avx512_vnni(CAPY_NVFP4_ARGS);

/* 2*e2m1 of a 4-bit code: an integer in [-12, 12]. */
extern const int8_t capy_nv_code2[16];

/* An E4M3 byte as a signed integer S with value = S * 2^-9: |S| = mant << exp, mant 0..15 (the
 * implicit bit included), exp 0..14. 0x7f (NaN) reads as 15 << 14, i.e. 480; the vector
 * kernels get the same from their F16 conversion. */
static inline int32_t capy_nv_scale_int(uint8_t s)
{
	uint32_t e = (s >> 3) & 15, m = s & 7;
	int32_t v = (int32_t)(e ? (8 + m) << (e - 1) : m);

	return (s & 0x80) ? -v : v;
}

/* The per-block scalar half of vLLM's activation rule (capy_nvfp4_quantize_act, same float
 * operations in the same order): the block's E4M3 scale byte from its amax, and the factor the
 * elements are multiplied by before rounding to E2M1. For a finite row with a finite gs the
 * byte is never NaN, so S * 2^-9 is exactly capy_e4m3_to_f32(byte). */
static inline uint8_t capy_nv_act_scale(float amax, float gs, float inv_gs, float *mul)
{
	const float sixth = (float)(1.0 / 6.0);
	float s = gs * (amax * sixth), t;
	uint8_t sc;

	if (s > 448.0f)
		s = 448.0f;
	sc = capy_f32_to_e4m3(s);
	t = (float)capy_nv_scale_int(sc) * 0x1p-9f * inv_gs;
	*mul = t == 0 ? 0.0f : 1.0f / t;
	return sc;
}

/* The output of one row: the exact int64 block sum scaled by the part's and the row's global
 * factors; see linear.h for why this order. */
static inline float capy_nv_finish(int64_t acc, double factor)
{
	return (float)(((double)acc * 0x1p-20) * factor);
}

static inline double capy_nv_factor(float scale2, float gs)
{
	return (double)scale2 / (double)gs;
}

#endif
