/* cuda-test.h - what the GPU tests share (after test.h): checked CUDA calls, device buffers
 * filled from host arrays, deterministic random data, and comparisons with a stated
 * tolerance. The tests run only where a GPU is (make test-cuda); they are compiled
 * everywhere nvcc is. */
#ifndef CAPY_CUDA_TEST_H
#define CAPY_CUDA_TEST_H

#include "capy-kernels.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>

/* A CUDA call that must succeed: a failure is reported and ends the test program (the
 * device state is unknown after it). */
#define CUDA_OK(call)                                                                               \
	do {                                                                                        \
		cudaError_t rc_ = (call);                                                           \
		if (rc_ != cudaSuccess) {                                                           \
			fprintf(stderr, "FATAL %s:%d: %s: %s\n", __FILE__, __LINE__, #call,          \
				cudaGetErrorString(rc_));                                           \
			exit(1);                                                                    \
		}                                                                                   \
	} while (0)

/* A kernel entry point (returns 0 or -cudaError) that must succeed, then a synchronize so a
 * fault is reported at the kernel that caused it. */
#define CK_OK(call)                                                                                 \
	do {                                                                                        \
		int ck_rc_ = (call);                                                                \
		if (ck_rc_ != 0) {                                                                  \
			fprintf(stderr, "FATAL %s:%d: %s: %s\n", __FILE__, __LINE__, #call,          \
				cudaGetErrorString((cudaError_t)-ck_rc_));                          \
			exit(1);                                                                    \
		}                                                                                   \
		CUDA_OK(cudaDeviceSynchronize());                                                   \
	} while (0)

/* Device copy of n bytes of host memory (or n bytes of 0xff poison when src is NULL, so
 * unwritten outputs show up as NaN). */
static inline void *dev_from(const void *src, size_t n)
{
	void *d = NULL;

	CUDA_OK(cudaMalloc(&d, n ? n : 1));
	if (src)
		CUDA_OK(cudaMemcpy(d, src, n, cudaMemcpyHostToDevice));
	else
		CUDA_OK(cudaMemset(d, 0xff, n ? n : 1));
	return d;
}

static inline void dev_to(void *dst, const void *d, size_t n)
{
	CUDA_OK(cudaMemcpy(dst, d, n, cudaMemcpyDeviceToHost));
}

/* Deterministic xorshift random numbers: uniform in [-1, 1). */
static inline float test_rand(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return (float)((*s >> 40) & 0xffffff) / (float)(1 << 23) - 1.0f;
}

static inline void test_fill(float *x, size_t n, uint64_t seed, float scale)
{
	uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;

	for (size_t i = 0; i < n; i++)
		x[i] = test_rand(&s) * scale;
}

/* ||a - b|| / ||b|| (in double); NaN anywhere gives +inf. */
static inline double rel_err(const float *a, const float *b, size_t n)
{
	double num = 0, den = 0;

	for (size_t i = 0; i < n; i++) {
		if (isnan(a[i]) || isnan(b[i]))
			return INFINITY;
		num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
		den += (double)b[i] * b[i];
	}
	return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Elements whose bits differ. */
static inline size_t bits_differ(const float *a, const float *b, size_t n)
{
	size_t d = 0;

	for (size_t i = 0; i < n; i++)
		d += memcmp(&a[i], &b[i], sizeof(float)) != 0;
	return d;
}

/* The GPU the tests use: $CAPY_GPU or 0. Returns false (after saying why) if none. */
static inline bool test_gpu_init(void)
{
	const char *g = getenv("CAPY_GPU");
	int n = 0;

	if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
		fprintf(stderr, "no CUDA device\n");
		return false;
	}
	CUDA_OK(cudaSetDevice(g ? (int)strtol(g, NULL, 10) : 0));
	return true;
}

#endif
