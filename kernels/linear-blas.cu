/* linear-blas.cu - the BF16 linears of prompt rows through cuBLASLt (capy-kernels.h: ck_gemm).
 *
 * The activations are fp32 and the CPU multiplies them with the BF16 weights exactly, so a
 * single BF16 GEMM (activations rounded to 8 bits) would be far off. As in mma.cuh, each
 * activation is split into a BF16 hi half and the BF16 rounding of the rest (lo), and
 * y = x_hi W^T + x_lo W^T is two GEMMs on the tensor cores with fp32 accumulation, the second
 * adding to the first (beta = 1): every product is exact, only the fp32 sums round.
 *
 * cuBLASLt is loaded with dlopen when the CUDA backend opens (libcublasLt.so.13 is 540 MB and
 * the binaries run without a GPU): where it is missing, ck_blas_open fails and the backend
 * keeps its own tiled kernel for every row.
 *
 * Determinism: one algorithm per matrix shape (n, k), chosen once by cuBLASLt's heuristic for
 * the step's largest row count, with reductions across k-splits forbidden, and used for every
 * row count it accepts: a row's result is then the same whatever the other rows of its GEMM
 * (u-cuda-linear checks it), run to run, and the first prompt of a shape pays the heuristic
 * once. A row count the algorithm refuses gets the heuristic's own choice for that count. */
#include "capy-kernels.h"
#include "ck-common.cuh"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#define GEMM_PLANS 64
#define GEMM_LT_WS ((size_t)32 << 20) /* cuBLASLt's own workspace, at the head of ws */

struct gemm_plan {
	uint64_t n, k, ldy;
	cublasLtMatmulDesc_t desc;
	cublasLtMatrixLayout_t a;
	cublasLtMatmulAlgo_t algo;
	bool used;
};

struct ck_blas {
	void *lib;
	cublasLtHandle_t h;
	uint64_t max_m; /* the row count algorithms are chosen for */
	struct gemm_plan plans[GEMM_PLANS];
	unsigned next; /* the slot a new shape takes when all are used */
#define LT_FN(ret, name, args) ret(*name) args;
#include "linear-blas-fns.h"
#undef LT_FN
};

extern "C" size_t ck_gemm_ws_bytes(uint64_t k, uint64_t m)
{
	return m >= CK_GROUPED_MIN_ROWS ? GEMM_LT_WS + 4 * (size_t)m * (size_t)k + 256 : 0;
}

extern "C" bool ck_gemm_supported(const struct ck_linear *w)
{
	/* 16-byte rows for the weights and both halves; nothing else is a plain BF16 matrix */
	return w->dtype == CK_BF16 && w->k % 8 == 0 && w->n % 4 == 0 && (uintptr_t)w->data % 16 == 0;
}

extern "C" int ck_blas_open(struct ck_blas **out, uint64_t max_m, char *why, size_t why_size)
{
	struct ck_blas *b = (struct ck_blas *)calloc(1, sizeof(*b));

	*out = NULL;
	if (!b) {
		snprintf(why, why_size, "out of memory");
		return -1;
	}
	b->lib = dlopen("libcublasLt.so.13", RTLD_NOW | RTLD_LOCAL);
	if (!b->lib) {
		snprintf(why, why_size, "%s", dlerror());
		free(b);
		return -1;
	}
#define LT_FN(ret, name, args)                                                          \
	if (!(*(void **)&b->name = dlsym(b->lib, #name))) {                            \
		snprintf(why, why_size, "libcublasLt.so.13 lacks %s", #name);          \
		dlclose(b->lib);                                                        \
		free(b);                                                                \
		return -1;                                                              \
	}
#include "linear-blas-fns.h"
#undef LT_FN
	if (b->cublasLtCreate(&b->h) != CUBLAS_STATUS_SUCCESS) {
		snprintf(why, why_size, "cublasLtCreate failed");
		dlclose(b->lib);
		free(b);
		return -1;
	}
	b->max_m = max_m < CK_GROUPED_MIN_ROWS ? CK_GROUPED_MIN_ROWS : max_m;
	*out = b;
	return 0;
}

static void plan_drop(struct ck_blas *b, struct gemm_plan *p)
{
	if (!p->used)
		return;
	b->cublasLtMatrixLayoutDestroy(p->a);
	b->cublasLtMatmulDescDestroy(p->desc);
	p->used = false;
}

extern "C" void ck_blas_close(struct ck_blas *b)
{
	if (!b)
		return;
	for (int i = 0; i < GEMM_PLANS; i++)
		plan_drop(b, &b->plans[i]);
	b->cublasLtDestroy(b->h);
	dlclose(b->lib);
	free(b);
}

/* The heuristic's first algorithm for m rows (b, c: the layouts of x and y for m rows). */
static bool heuristic(struct ck_blas *b, struct gemm_plan *p, cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc,
		      cublasLtMatmulAlgo_t *algo)
{
	cublasLtMatmulPreference_t pref;
	cublasLtMatmulHeuristicResult_t res;
	int found = 0;
	size_t ws = GEMM_LT_WS;
	uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_NONE;

	if (b->cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS)
		return false;
	b->cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
	b->cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &scheme, sizeof(scheme));
	const bool ok = b->cublasLtMatmulAlgoGetHeuristic(b->h, p->desc, p->a, lb, lc, lc, pref, 1, &res, &found) ==
				CUBLAS_STATUS_SUCCESS &&
			found >= 1;
	b->cublasLtMatmulPreferenceDestroy(pref);
	if (ok)
		*algo = res.algo;
	return ok;
}

/* Layouts of x (BF16 halves, k x m) and y (fp32, n x m, ld ldy), column-major. */
static bool layouts(struct ck_blas *b, uint64_t n, uint64_t k, uint64_t m, uint64_t ldy, cublasLtMatrixLayout_t *lb,
		    cublasLtMatrixLayout_t *lc)
{
	if (b->cublasLtMatrixLayoutCreate(lb, CUDA_R_16BF, k, m, (int64_t)k) != CUBLAS_STATUS_SUCCESS)
		return false;
	if (b->cublasLtMatrixLayoutCreate(lc, CUDA_R_32F, n, m, (int64_t)ldy) != CUBLAS_STATUS_SUCCESS) {
		b->cublasLtMatrixLayoutDestroy(*lb);
		return false;
	}
	return true;
}

/* The plan of a matrix shape: found, or made (its algorithm chosen for max_m rows). */
static struct gemm_plan *plan_of(struct ck_blas *b, uint64_t n, uint64_t k, uint64_t ldy)
{
	for (int i = 0; i < GEMM_PLANS; i++) {
		struct gemm_plan *p = &b->plans[i];
		if (p->used && p->n == n && p->k == k && p->ldy == ldy)
			return p;
	}
	struct gemm_plan *p = &b->plans[b->next++ % GEMM_PLANS];
	plan_drop(b, p);
	const cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
	/* column-major: y^T [n][m] (ld ldy) = op(W [k][n], T) x^T [k][m] */
	if (b->cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS)
		return NULL;
	b->cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof(opT));
	b->cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof(opN));
	if (b->cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, k, n, (int64_t)k) != CUBLAS_STATUS_SUCCESS) {
		b->cublasLtMatmulDescDestroy(p->desc);
		return NULL;
	}
	p->used = true;
	cublasLtMatrixLayout_t lb, lc;
	bool ok = layouts(b, n, k, b->max_m, ldy, &lb, &lc);
	if (ok) {
		ok = heuristic(b, p, lb, lc, &p->algo);
		b->cublasLtMatrixLayoutDestroy(lb);
		b->cublasLtMatrixLayoutDestroy(lc);
	}
	if (!ok) {
		plan_drop(b, p);
		return NULL;
	}
	p->n = n, p->k = k, p->ldy = ldy;
	return p;
}

/* x [m][k] fp32 -> hi [m][k], lo [m][k] BF16 (hi = bf16(x), lo = bf16(x - hi), as mma_split2). */
static __global__ void k_split(const float *x, uint64_t N, __nv_bfloat16 *hi, __nv_bfloat16 *lo)
{
	ck_grid_enter();
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < N; i += (uint64_t)gridDim.x * blockDim.x) {
		const float f = x[i];
		const __nv_bfloat16 h = __float2bfloat16_rn(f);
		hi[i] = h;
		lo[i] = __float2bfloat16_rn(__fsub_rn(f, __bfloat162float(h)));
	}
}

/* y = W x for x's BF16 halves already split in ws (the hi halves, then the lo halves added:
 * stream order orders the two). */
static int gemm_halves(struct ck_blas *b, const struct ck_linear *w, const __nv_bfloat16 *hi,
		       const __nv_bfloat16 *lo, uint64_t m, float *y, uint64_t ldy, void *ws, cudaStream_t st)
{
	const float one = 1.0f, zero = 0.0f;
	struct gemm_plan *p;
	cublasLtMatrixLayout_t lb, lc;
	cublasLtMatmulHeuristicResult_t chk;
	cublasLtMatmulAlgo_t algo;
	int rc = 0;

	if (!ck_gemm_supported(w) || ldy % 4 || !(p = plan_of(b, w->n, w->k, ldy)))
		return -(int)cudaErrorNotSupported;
	if (!layouts(b, w->n, w->k, m, ldy, &lb, &lc))
		return -(int)cudaErrorNotSupported;
	algo = p->algo;
	if (b->cublasLtMatmulAlgoCheck(b->h, p->desc, p->a, lb, lc, lc, &algo, &chk) != CUBLAS_STATUS_SUCCESS &&
	    !heuristic(b, p, lb, lc, &algo)) {
		rc = -(int)cudaErrorNotSupported;
		goto out;
	}
	if (b->cublasLtMatmul(b->h, p->desc, &one, w->data, p->a, hi, lb, &zero, y, lc, y, lc, &algo, ws, GEMM_LT_WS,
			      st) != CUBLAS_STATUS_SUCCESS ||
	    b->cublasLtMatmul(b->h, p->desc, &one, w->data, p->a, lo, lb, &one, y, lc, y, lc, &algo, ws, GEMM_LT_WS,
			      st) != CUBLAS_STATUS_SUCCESS)
		rc = -(int)cudaErrorLaunchFailure;
out:
	b->cublasLtMatrixLayoutDestroy(lb);
	b->cublasLtMatrixLayoutDestroy(lc);
	return rc;
}

/* x [m][k] into its BF16 halves after ws's cuBLASLt workspace (ck_gemm_ws_bytes). */
static int split_x(const float *x, uint64_t N, void *ws, cudaStream_t st, __nv_bfloat16 **hi, __nv_bfloat16 **lo)
{
	const uint64_t blocks = (N + 255) / 256;

	*hi = (__nv_bfloat16 *)((uint8_t *)ws + GEMM_LT_WS);
	*lo = *hi + N;
	ck_launch(k_split, (unsigned)(blocks < 65536 ? blocks : 65536), 256, 0, st, x, N, *hi, *lo);
	return ck_launched();
}

extern "C" int ck_gemm_multi(struct ck_blas *b, const struct ck_linear *const *w, int nw, const float *x, uint64_t m,
			     float *const *y, void *ws, void *stream)
{
	cudaStream_t st = (cudaStream_t)stream;
	const uint64_t k = w[0]->k;
	__nv_bfloat16 *hi, *lo;
	int rc;

	if (!m)
		return 0;
	if (m < CK_GROUPED_MIN_ROWS || m > b->max_m)
		return -(int)cudaErrorNotSupported;
	for (int j = 0; j < nw; j++)
		if (w[j]->k != k || !ck_gemm_supported(w[j]))
			return -(int)cudaErrorNotSupported;
	/* one split of x for every matrix over it (the split is the same whoever reads it) */
	if ((rc = split_x(x, m * k, ws, st, &hi, &lo)))
		return rc;
	for (int j = 0; j < nw; j++)
		if ((rc = gemm_halves(b, w[j], hi, lo, m, y[j], w[j]->n, ws, st)))
			return rc;
	return 0;
}

extern "C" int ck_gemm(struct ck_blas *b, const struct ck_linear *w, const float *x, uint64_t m, float *y,
		       uint64_t ldy, void *ws, void *stream)
{
	cudaStream_t st = (cudaStream_t)stream;
	__nv_bfloat16 *hi, *lo;
	int rc;

	if (!m)
		return 0;
	if (!ck_gemm_supported(w) || m < CK_GROUPED_MIN_ROWS || m > b->max_m || ldy % 4)
		return -(int)cudaErrorNotSupported;
	if ((rc = split_x(x, m * w->k, ws, st, &hi, &lo)))
		return rc;
	return gemm_halves(b, w, hi, lo, m, y, ldy, ws, st);
}
