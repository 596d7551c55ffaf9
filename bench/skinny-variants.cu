// bench/skinny-variants.cu - how the skinny BF16 tensor-core kernel (kernels/linear-mma.cu)
// should load its weights at decode: three load schemes of the same arithmetic, timed on
// decode shapes against the copy bandwidth, and checked bit for bit against each other.
//   A: __ldg 16 bytes per lane, a warp instruction = 8 rows x 64 bytes (the kernel as it is)
//   B: the same with ld.global.nc.L1::no_allocate.L2::256B (no L1 pollution, 256-byte L2 fetch)
//   C: cp.async of 512 contiguous bytes per row per warp instruction into shared memory, the
//      fragments then read from there
// Build: nvcc -O3 -std=c++17 -arch=sm_90 -Ikernels bench/skinny-variants.cu -o skinny-variants
#include "mma.cuh"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define G8 8 // steps per group

template <int V>
static __device__ __forceinline__ uint4 ldw(const uint8_t *p)
{
	if (V == 0)
		return __ldg((const uint4 *)p);
	uint4 r;
	asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
		     : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
		     : "l"(p));
	return r;
}

static __device__ __forceinline__ void xload(const float *xr, bool ok, uint64_t s, uint32_t hi[4], uint32_t lo[4])
{
	float f[8] = { 0, 0, 0, 0, 0, 0, 0, 0 };
	if (ok) {
		const float4 a = *(const float4 *)(xr + s * 32), b = *(const float4 *)(xr + s * 32 + 4);
		f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
	}
	mma_split8(f, hi, lo);
}

// m <= 8 tokens, KS = 1: warp = 16 rows.
template <int V>
__global__ void __launch_bounds__(256) kv(const uint8_t *w, const float *x, uint64_t n, uint64_t k, uint64_t m,
					   float *y)
{
	extern __shared__ __align__(16) uint8_t sm[];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
	const uint64_t r0 = ((uint64_t)blockIdx.x * 8 + warp) * 16;
	if (r0 >= n)
		return;
	const uint64_t nsteps = k / 32, ra = r0 + g, rb = r0 + g + 8;
	const bool xv = (uint64_t)g < m;
	const float *xr = x + (xv ? g : 0) * k + c * 8;
	float acc[4] = { 0, 0, 0, 0 };
	if (V < 2) {
		const uint8_t *wa = w + ra * k * 2 + c * 16, *wb = w + rb * k * 2 + c * 16;
		for (uint64_t s = 0; s < nsteps; s += G8) {
			uint4 A[G8], B[G8];
#pragma unroll
			for (int u = 0; u < G8; u++) {
				A[u] = ldw<V>(wa + (s + u) * 64);
				B[u] = ldw<V>(wb + (s + u) * 64);
			}
#pragma unroll
			for (int u = 0; u < G8; u++) {
				uint32_t hi[4], lo[4];
				xload(xr, xv, s + u, hi, lo);
				mma_step_split(acc, A[u], B[u], hi, lo);
			}
		}
	} else {
		constexpr int RS = 576; // bytes per staged row: 512 + 64 (no bank conflicts)
		uint8_t *buf = sm + warp * 16 * RS;
		for (uint64_t s = 0; s < nsteps; s += G8) {
#pragma unroll
			for (int r = 0; r < 16; r++)
				mma_cp16(buf + r * RS + lane * 16, w + (r0 + r) * k * 2 + s * 64 + lane * 16, true);
			mma_cp_commit();
			mma_cp_wait<0>();
			__syncwarp();
#pragma unroll
			for (int u = 0; u < G8; u++) {
				const uint4 A = *(const uint4 *)(buf + g * RS + u * 64 + c * 16);
				const uint4 B = *(const uint4 *)(buf + (g + 8) * RS + u * 64 + c * 16);
				uint32_t hi[4], lo[4];
				xload(xr, xv, s + u, hi, lo);
				mma_step_split(acc, A, B, hi, lo);
			}
			__syncwarp();
		}
	}
	for (int q = 0; q < 4; q++) {
		const uint64_t r = q >= 2 ? rb : ra, t = 2 * c + (q & 1);
		if (t < m)
			y[t * n + r] = acc[q];
	}
}

__global__ void copyk(const uint4 *a, uint4 *b, uint64_t n)
{
	for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n; i += (uint64_t)gridDim.x * blockDim.x)
		b[i] = a[i];
}

int main()
{
	const uint64_t shapes[][2] = { { 248320, 2048 }, { 12352, 2048 }, { 2048, 4096 }, { 8192, 2048 } };
	const size_t maxb = 248320ull * 2048 * 2;
	uint8_t *w;
	float *x, *y[3];
	cudaMalloc(&w, maxb);
	cudaMalloc(&x, 8 * 4096 * 4);
	for (int i = 0; i < 3; i++)
		cudaMalloc(&y[i], 8 * 248320 * 4);
	{
		std::vector<uint16_t> h(maxb / 2);
		uint32_t st = 1;
		for (auto &v : h) {
			st = st * 1664525u + 1013904223u;
			v = (uint16_t)(0x3c00 + ((st >> 16) & 0x3ff)) ^ ((st >> 8) & 0x8000);
		}
		cudaMemcpy(w, h.data(), maxb, cudaMemcpyHostToDevice);
		std::vector<float> hx(8 * 4096);
		for (size_t i = 0; i < hx.size(); i++)
			hx[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
		cudaMemcpy(x, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice);
	}
	cudaEvent_t e0, e1;
	cudaEventCreate(&e0);
	cudaEventCreate(&e1);
	float ms;
	{
		uint8_t *b2;
		cudaMalloc(&b2, maxb);
		copyk<<<132 * 8, 256>>>((const uint4 *)w, (uint4 *)b2, maxb / 16);
		cudaEventRecord(e0);
		for (int i = 0; i < 10; i++)
			copyk<<<132 * 8, 256>>>((const uint4 *)w, (uint4 *)b2, maxb / 16);
		cudaEventRecord(e1);
		cudaEventSynchronize(e1);
		cudaEventElapsedTime(&ms, e0, e1);
		printf("copy: %.0f GB/s\n", 2.0 * maxb * 10 / (ms * 1e-3) / 1e9);
		cudaFree(b2);
	}
	cudaFuncSetAttribute(kv<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, 8 * 16 * 576);
	for (auto &sh : shapes)
		for (uint64_t m : { 1ull, 8ull }) {
			const uint64_t n = sh[0], k = sh[1], blocks = (n / 16 + 7) / 8;
			float t[3];
			for (int v = 0; v < 3; v++) {
				const size_t smem = v == 2 ? 8 * 16 * 576 : 0;
				auto run = [&]() {
					if (v == 0)
						kv<0><<<blocks, 256, smem>>>(w, x, n, k, m, y[v]);
					else if (v == 1)
						kv<1><<<blocks, 256, smem>>>(w, x, n, k, m, y[v]);
					else
						kv<2><<<blocks, 256, smem>>>(w, x, n, k, m, y[v]);
				};
				run();
				cudaEventRecord(e0);
				for (int i = 0; i < 20; i++)
					run();
				cudaEventRecord(e1);
				cudaEventSynchronize(e1);
				cudaEventElapsedTime(&ms, e0, e1);
				t[v] = ms / 20 * 1e3f;
			}
			std::vector<float> a(m * n), b(m * n);
			cudaMemcpy(a.data(), y[0], m * n * 4, cudaMemcpyDeviceToHost);
			size_t bad = 0;
			for (int v = 1; v < 3; v++) {
				cudaMemcpy(b.data(), y[v], m * n * 4, cudaMemcpyDeviceToHost);
				bad += memcmp(a.data(), b.data(), m * n * 4) != 0;
			}
			const double bytes = (double)n * k * 2;
			printf("n %6lu k %5lu m %lu: A %7.1f us %5.0f GB/s | B %7.1f us %5.0f GB/s | C %7.1f us %5.0f GB/s %s (%s)\n",
			       (unsigned long)n, (unsigned long)k, (unsigned long)m, t[0], bytes / t[0] / 1e3, t[1],
			       bytes / t[1] / 1e3, t[2], bytes / t[2] / 1e3, bad ? "DIFFER" : "same bits",
			       cudaGetErrorString(cudaGetLastError()));
		}
	return 0;
}
