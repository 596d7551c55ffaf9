/* ckpt.h - reading Hugging Face checkpoints: safetensors files (single or sharded
 * with an index), config.json and the quantization config.
 *
 *	struct capy_ckpt *ck;
 *	if (capy_ckpt_open(&ck, "Qwen3.6-35B-A3B/", &err) < 0)
 *		die("%s", err.msg);
 *	const struct capy_st_tensor *t = capy_ckpt_find(ck, "lm_head.weight");
 *	capy_ckpt_read(ck, t, 0, buf, t->bytes, &err);
 *
 * Every safetensors header is validated like the reference reader does: the header
 * length fits the file, each tensor's dtype is known, its byte range matches
 * shape x dtype and lies in the data buffer, and the ranges tile the buffer exactly
 * (no gap, no overlap, nothing after the last). Errors name the file, tensor and
 * byte offset. Tensor data is read with pread on demand, never loaded whole.
 */
#ifndef CAPY_CKPT_H
#define CAPY_CKPT_H

#include "../artifact/artifact.h"

#include <cjson/cJSON.h>

#define CAPY_ST_MAX_HEADER 100000000u /* the reference reader's limit */

enum capy_st_dtype {
	CAPY_ST_BOOL, CAPY_ST_U8, CAPY_ST_I8, CAPY_ST_F8_E5M2, CAPY_ST_F8_E4M3, CAPY_ST_I16,
	CAPY_ST_U16, CAPY_ST_F16, CAPY_ST_BF16, CAPY_ST_I32, CAPY_ST_U32, CAPY_ST_F32,
	CAPY_ST_F64, CAPY_ST_I64, CAPY_ST_U64, CAPY_ST_COUNT
};

const char *capy_st_dtype_name(enum capy_st_dtype dt);
/* The artifact dtype with the same bytes, or -1 for types capy does not store. */
int capy_st_dtype_to_capy(enum capy_st_dtype dt);

struct capy_st_tensor {
	char *name;
	enum capy_st_dtype dtype;
	int ndim;
	uint64_t shape[CAPY_MAX_DIMS];
	uint64_t offset; /* absolute offset in its file */
	uint64_t bytes;
	int file;        /* index into the checkpoint's files */
};

/* A parsed safetensors header. */
struct capy_st_header {
	struct capy_st_tensor *tensors; /* sorted by offset */
	size_t ntensors;
	uint64_t data_start;            /* 8 + header length */
	cJSON *metadata;                /* __metadata__ or NULL */
};

/* Parse and validate the first bytes of a safetensors file. buf holds at least the
 * 8-byte length and the header it announces (the caller reads them); file_size is the
 * whole file's size; what names the file in errors. */
int capy_st_parse(const uint8_t *buf, size_t len, uint64_t file_size, const char *what,
		  struct capy_st_header *out, struct capy_err *err);
/* Read the header of path (header bytes only). */
int capy_st_read_header(const char *path, int fd, uint64_t file_size, struct capy_st_header *out,
			struct capy_err *err);
void capy_st_header_release(struct capy_st_header *h);

struct capy_ckpt_file {
	char *name; /* relative to the directory */
	char *path;
	int fd;
	uint64_t size;
};

struct capy_ckpt {
	char *dir;
	cJSON *config;       /* config.json */
	const cJSON *text;   /* the text config: config.text_config or config itself */
	const char *family;  /* config.json model_type */
	cJSON *quant;        /* hf_quant_config.json "quantization", or config.quantization_config; NULL */
	char *quant_source;  /* which file the quantization config came from */
	struct capy_ckpt_file *files; /* safetensors files, in index order */
	size_t nfiles;
	struct capy_st_tensor *tensors; /* all tensors, sorted by name */
	size_t ntensors;
	cJSON **metadata;    /* per file */
};

int capy_ckpt_open(struct capy_ckpt **out, const char *dir, struct capy_err *err);
void capy_ckpt_close(struct capy_ckpt *ck);

const struct capy_st_tensor *capy_ckpt_find(const struct capy_ckpt *ck, const char *name);
/* Read len bytes at offset off within tensor t. */
int capy_ckpt_read(const struct capy_ckpt *ck, const struct capy_st_tensor *t, uint64_t off,
		   void *buf, size_t len, struct capy_err *err);

#endif
