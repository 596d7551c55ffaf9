/* artifact.h - the .capy container: open (mmap + validate), look up, verify, write.
 *
 * The format is specified in docs/artifact.md. Reading:
 *
 *	struct capy_artifact *a;
 *	if (capy_artifact_open(&a, "m.capy", &err) < 0)
 *		die("%s", err.msg);
 *	const struct capy_tensor_info *t = capy_artifact_find(a, "layers.0.mlp.gate.weight");
 *	const uint16_t *w = capy_artifact_data(a, t->offset);   // BF16, t->shape
 *	capy_artifact_close(a);
 *
 * Opening validates the structure in O(tensors) and reads no tensor data; verify
 * recomputes the checksums. Writing goes through struct capy_artifact_writer: declare
 * every region first, let it lay out the file, write the regions (from any threads,
 * in any order), then finish, which writes the directory and header and renames the
 * temporary file into place.
 */
#ifndef CAPY_ARTIFACT_H
#define CAPY_ARTIFACT_H

#include "../util/err.h"

#include <cjson/cJSON.h>

#define CAPY_ARTIFACT_VERSION 1
#define CAPY_ARTIFACT_HEADER_BYTES 64
#define CAPY_ARTIFACT_ALIGN 4096
#define CAPY_ARTIFACT_SUBALIGN 64
#define CAPY_MAX_DIMS 8
#define CAPY_MAX_PARTS 8

extern const uint8_t capy_artifact_magic[8];

enum capy_dtype {
	CAPY_DT_F32,
	CAPY_DT_F16,
	CAPY_DT_BF16,
	CAPY_DT_F8_E4M3,
	CAPY_DT_I8,
	CAPY_DT_U8,
	CAPY_DT_I16,
	CAPY_DT_I32,
	CAPY_DT_I64,
	CAPY_DT_BOOL,
	CAPY_DT_NVFP4,
	CAPY_DT_COUNT
};

/* "F32", "BF16", ... as in docs/artifact.md (the safetensors spelling for plain types). */
const char *capy_dtype_name(enum capy_dtype dt);
/* -1 if unknown. */
int capy_dtype_parse(const char *name, enum capy_dtype *out);
/* Bytes per element; 0 for NVFP4 (see capy_nvfp4_layout). */
size_t capy_dtype_size(enum capy_dtype dt);

/* Where the parts of one NVFP4 slice (an [n, k] matrix record) live; docs/artifact.md. */
struct capy_nvfp4_layout {
	uint64_t n, k;
	uint32_t parts;
	uint64_t codes_off, codes_bytes;
	uint64_t scales_off, scales_bytes;
	uint64_t globals_off; /* parts float32 weight_scale_2, then parts float32 input_scale */
	uint64_t slice_bytes;
};

/* Fails (-1) if k is not a positive multiple of 16, n is 0, parts is outside
 * [1, CAPY_MAX_PARTS] or the sizes overflow. */
int capy_nvfp4_layout(uint64_t n, uint64_t k, uint32_t parts, struct capy_nvfp4_layout *out);

/* Logical bytes of a tensor and of one slice along dimension 0 (the whole tensor for rank < 1
 * plain tensors and for 2-D NVFP4). Returns -1 on an invalid shape or overflow. */
int capy_tensor_bytes(enum capy_dtype dt, int ndim, const uint64_t *shape, uint32_t parts,
		      uint64_t *bytes, uint64_t *slice_bytes, uint64_t *nslices);

struct capy_tensor_info {
	const char *name;
	enum capy_dtype dtype;
	int ndim;
	uint64_t shape[CAPY_MAX_DIMS];
	uint64_t offset;      /* first byte */
	uint64_t bytes;       /* logical bytes (all slices) */
	uint64_t stride;      /* distance between slices along dim 0; 0 = packed */
	uint64_t slice_bytes; /* bytes of one slice (== bytes when nslices == 1) */
	uint64_t nslices;
	uint32_t nparts;      /* NVFP4: number of parts (>= 1); 0 otherwise */
	uint64_t parts[CAPY_MAX_PARTS];
	uint64_t xxh3;
	int stack;            /* index into expert_stacks, or -1 */
};

struct capy_file_info {
	const char *name;
	uint64_t offset, bytes, xxh3;
};

struct capy_expert_stack {
	const char *name;
	uint64_t count, offset, stride;
	int ntensors;
	int tensors[4]; /* indexes into the tensor table */
};

struct capy_artifact {
	const char *path;
	const uint8_t *base; /* the mapped file */
	uint64_t size;
	uint64_t data_offset;
	cJSON *dir;
	const char *family;
	const cJSON *config; /* model.config */
	const cJSON *provenance;
	struct capy_tensor_info *tensors;
	size_t ntensors;
	struct capy_file_info *files;
	size_t nfiles;
	struct capy_expert_stack *stacks;
	size_t nstacks;
	int *by_name; /* tensor indexes sorted by name */
	void *map_;   /* owned mapping, NULL when parsed from memory */
};

/* Map and validate path. */
int capy_artifact_open(struct capy_artifact **out, const char *path, struct capy_err *err);
/* Validate an artifact held in memory (the bytes must outlive the result). `what` names it. */
int capy_artifact_parse(struct capy_artifact **out, const uint8_t *data, uint64_t size,
			const char *what, struct capy_err *err);
void capy_artifact_close(struct capy_artifact *a);

/* Whether a holds the tensor table only, no tensor data (written with capy-convert
 * --layout-only; provenance "layout_only": true): its tensors read as zeros, so only a memory
 * plan may use it. */
bool capy_artifact_layout_only(const struct capy_artifact *a);

/* NULL when absent. O(log tensors). */
const struct capy_tensor_info *capy_artifact_find(const struct capy_artifact *a, const char *name);
const struct capy_file_info *capy_artifact_file(const struct capy_artifact *a, const char *name);

static inline const void *capy_artifact_data(const struct capy_artifact *a, uint64_t offset)
{
	return a->base + offset;
}

/* Offset of slice i of t. */
static inline uint64_t capy_tensor_slice_offset(const struct capy_tensor_info *t, uint64_t i)
{
	return t->offset + i * (t->stride ? t->stride : t->slice_bytes);
}

/* Recompute every checksum (files and tensors) with nthreads threads; report progress
 * (bytes) through cb if given. Fails with CAPY_ECHECKSUM naming the first bad region. */
typedef void (*capy_progress_fn)(void *ud, uint64_t bytes);
int capy_artifact_verify(const struct capy_artifact *a, int nthreads, capy_progress_fn cb,
			 void *ud, struct capy_err *err);

/* --- writing ------------------------------------------------------------------- */

struct capy_artifact_writer;

/* Start an artifact at path (written to a temporary name until finish). */
int capy_aw_new(struct capy_artifact_writer **out, const char *path, struct capy_err *err);

/* Declare an embedded file of `bytes` bytes; returns its index (>= 0) or an error. */
int capy_aw_add_file(struct capy_artifact_writer *w, const char *name, uint64_t bytes,
		     struct capy_err *err);

/* Declare a tensor; stack < 0 for a contiguous tensor, else the expert stack it joins
 * (its slices then interleave with the stack's other tensors). nparts/parts only for
 * NVFP4 (nparts 0 means one part). sources (may be NULL) is a cJSON array of names,
 * taken over. Returns the tensor index. */
int capy_aw_add_tensor(struct capy_artifact_writer *w, const char *name, enum capy_dtype dtype,
		       int ndim, const uint64_t *shape, uint32_t nparts, const uint64_t *parts,
		       int stack, cJSON *sources, struct capy_err *err);

/* Declare an expert stack of count experts; returns its index. Tensors join it with
 * capy_aw_add_tensor(..., stack, ...); their shape[0] must equal count. */
int capy_aw_add_stack(struct capy_artifact_writer *w, const char *name, uint64_t count,
		      struct capy_err *err);

/* Fix the layout: the directory space and every offset. model and provenance (cJSON
 * objects) are taken over. After this, offsets can be queried and data written. */
int capy_aw_layout(struct capy_artifact_writer *w, cJSON *model, cJSON *provenance,
		   struct capy_err *err);

/* The tensors' data will not be written (a layout-only artifact, for memory plans): the file
 * still gets its full size, as a sparse file whose holes read as zeros, and the check for
 * free disk space is skipped. Call before capy_aw_layout. */
void capy_aw_set_sparse(struct capy_artifact_writer *w);

uint64_t capy_aw_file_offset(const struct capy_artifact_writer *w, int file);
const struct capy_tensor_info *capy_aw_tensor(const struct capy_artifact_writer *w, int tensor);
uint64_t capy_aw_total_bytes(const struct capy_artifact_writer *w);
/* Sum of the logical bytes of all files and tensors (what must be written). */
uint64_t capy_aw_payload_bytes(const struct capy_artifact_writer *w);

/* Write bytes at an absolute offset (thread-safe for disjoint ranges). */
int capy_aw_pwrite(struct capy_artifact_writer *w, uint64_t offset, const void *buf, size_t len,
		   struct capy_err *err);
void capy_aw_set_file_xxh3(struct capy_artifact_writer *w, int file, uint64_t h);
void capy_aw_set_tensor_xxh3(struct capy_artifact_writer *w, int tensor, uint64_t h);

/* The temporary file's path (for clean-up on signals), valid until finish/abort. */
const char *capy_aw_tmp_path(const struct capy_artifact_writer *w);

/* Write the directory and header, fsync, rename into place, free w. On failure the
 * temporary file is removed and w freed. */
int capy_aw_finish(struct capy_artifact_writer *w, struct capy_err *err);
/* Remove the temporary file and free w. */
void capy_aw_abort(struct capy_artifact_writer *w);

#endif
