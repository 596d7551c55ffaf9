/* dtype.c - element types, their sizes and the NVFP4 record layout (docs/artifact.md). */
#include "artifact.h"

static const struct {
	const char *name;
	size_t size;
} dtypes[CAPY_DT_COUNT] = {
	[CAPY_DT_F32] = { "F32", 4 },     [CAPY_DT_F16] = { "F16", 2 },
	[CAPY_DT_BF16] = { "BF16", 2 },   [CAPY_DT_F8_E4M3] = { "F8_E4M3", 1 },
	[CAPY_DT_I8] = { "I8", 1 },       [CAPY_DT_U8] = { "U8", 1 },
	[CAPY_DT_I16] = { "I16", 2 },     [CAPY_DT_I32] = { "I32", 4 },
	[CAPY_DT_I64] = { "I64", 8 },     [CAPY_DT_BOOL] = { "BOOL", 1 },
	[CAPY_DT_NVFP4] = { "NVFP4", 0 },
};

const char *capy_dtype_name(enum capy_dtype dt)
{
	return (unsigned)dt < CAPY_DT_COUNT ? dtypes[dt].name : "?";
}

int capy_dtype_parse(const char *name, enum capy_dtype *out)
{
	for (int i = 0; i < CAPY_DT_COUNT; i++) {
		if (!strcmp(name, dtypes[i].name)) {
			*out = (enum capy_dtype)i;
			return 0;
		}
	}
	return -1;
}

size_t capy_dtype_size(enum capy_dtype dt)
{
	return (unsigned)dt < CAPY_DT_COUNT ? dtypes[dt].size : 0;
}

int capy_nvfp4_layout(uint64_t n, uint64_t k, uint32_t parts, struct capy_nvfp4_layout *out)
{
	uint64_t nk;

	if (!n || !k || k % 16 || !parts || parts > CAPY_MAX_PARTS)
		return -1;
	if (capy_mul_overflow(n, k, &nk) || nk > (UINT64_MAX / 4))
		return -1;
	out->n = n;
	out->k = k;
	out->parts = parts;
	out->codes_off = 0;
	out->codes_bytes = nk / 2;
	out->scales_off = CAPY_ALIGN_UP(out->codes_bytes, CAPY_ARTIFACT_SUBALIGN);
	out->scales_bytes = nk / 16;
	out->globals_off = CAPY_ALIGN_UP(out->scales_off + out->scales_bytes, CAPY_ARTIFACT_SUBALIGN);
	out->slice_bytes = CAPY_ALIGN_UP(out->globals_off + 8ull * parts, CAPY_ARTIFACT_SUBALIGN);
	return 0;
}

int capy_tensor_bytes(enum capy_dtype dt, int ndim, const uint64_t *shape, uint32_t parts,
		      uint64_t *bytes, uint64_t *slice_bytes, uint64_t *nslices)
{
	uint64_t n = 1, lead = 1;

	if (ndim < 0 || ndim > CAPY_MAX_DIMS || (unsigned)dt >= CAPY_DT_COUNT)
		return -1;
	if (dt == CAPY_DT_NVFP4) {
		struct capy_nvfp4_layout l;
		if (ndim < 2)
			return -1;
		for (int i = 0; i < ndim - 2; i++)
			if (capy_mul_overflow(lead, shape[i], &lead))
				return -1;
		if (capy_nvfp4_layout(shape[ndim - 2], shape[ndim - 1], parts ? parts : 1, &l) < 0)
			return -1;
		if (capy_mul_overflow(lead, l.slice_bytes, bytes))
			return -1;
		/* A slice along dim 0 covers all matrices below it. */
		*nslices = ndim > 2 ? shape[0] : 1;
		*slice_bytes = *nslices ? *bytes / *nslices : 0;
		return *nslices ? 0 : -1;
	}
	for (int i = 0; i < ndim; i++)
		if (capy_mul_overflow(n, shape[i], &n))
			return -1;
	if (capy_mul_overflow(n, dtypes[dt].size, bytes))
		return -1;
	*nslices = ndim >= 1 ? shape[0] : 1;
	*slice_bytes = *nslices ? *bytes / *nslices : *bytes;
	return 0;
}
