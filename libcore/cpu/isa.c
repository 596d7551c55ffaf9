/* isa.c - which instruction set the kernels use: detection at run time and the override. */
#include "cpu-impl.h"

#include <cpuid.h>
#include <stdatomic.h>

static const char *const isa_names[CAPY_ISA_COUNT] = {
	[CAPY_ISA_SCALAR] = "scalar",
	[CAPY_ISA_AVX2] = "avx2",
	[CAPY_ISA_AVX512] = "avx512",
	[CAPY_ISA_AVX512_VNNI] = "avx512-vnni",
};

/* AVX-512 with and without VNNI share everything but the NVFP4 dot product. */
static const struct capy_cpu_kernels isa_kernels[CAPY_ISA_COUNT] = {
	[CAPY_ISA_SCALAR] = { capy_plain_scalar, capy_nvfp4_prep_scalar, capy_nvfp4_scalar },
	[CAPY_ISA_AVX2] = { capy_plain_avx2, capy_nvfp4_prep_avx2, capy_nvfp4_avx2 },
	[CAPY_ISA_AVX512] = { capy_plain_avx512, capy_nvfp4_prep_avx512, capy_nvfp4_avx512 },
	[CAPY_ISA_AVX512_VNNI] = { capy_plain_avx512, capy_nvfp4_prep_avx512,
				   capy_nvfp4_avx512_vnni },
};

/* -1 until first use; then the ISA in force. Detection is idempotent, so a race between two
 * first callers stores the same value twice. */
static atomic_int current_isa = -1;

/* CPUID.1:ECX.F16C; clang 14's __builtin_cpu_supports does not know "f16c". */
static bool has_f16c(void)
{
	unsigned a, b, c, d;

	return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}

/* __builtin_cpu_supports also checks that the OS saves the AVX / AVX-512 state (XCR0). */
static enum capy_isa detect(void)
{
	__builtin_cpu_init();
	if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !has_f16c())
		return CAPY_ISA_SCALAR;
	if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
	    !__builtin_cpu_supports("avx512vl"))
		return CAPY_ISA_AVX2;
	if (!__builtin_cpu_supports("avx512vnni"))
		return CAPY_ISA_AVX512;
	return CAPY_ISA_AVX512_VNNI;
}

enum capy_isa capy_isa_best(void)
{
	static atomic_int best = -1;
	int b = atomic_load_explicit(&best, memory_order_relaxed);

	if (b < 0) {
		b = (int)detect();
		atomic_store_explicit(&best, b, memory_order_relaxed);
	}
	return (enum capy_isa)b;
}

int capy_isa_set(enum capy_isa isa)
{
	if ((int)isa < 0 || isa >= CAPY_ISA_COUNT || isa > capy_isa_best())
		return -1;
	atomic_store(&current_isa, (int)isa);
	return 0;
}

enum capy_isa capy_isa_get(void)
{
	int cur = atomic_load_explicit(&current_isa, memory_order_relaxed);

	if (cur < 0) {
		cur = (int)capy_isa_best();
		atomic_store_explicit(&current_isa, cur, memory_order_relaxed);
	}
	return (enum capy_isa)cur;
}

const char *capy_isa_name(enum capy_isa isa)
{
	return (int)isa >= 0 && isa < CAPY_ISA_COUNT ? isa_names[isa] : "unknown";
}

const struct capy_cpu_kernels *capy_cpu_kernels(void)
{
	return &isa_kernels[capy_isa_get()];
}
