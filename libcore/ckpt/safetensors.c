/* safetensors.c - parsing and validating safetensors headers. */
#include "ckpt.h"
#include "../util/file.h"
#include "../util/json.h"

#include <unistd.h>

static const struct {
	const char *name;
	uint8_t size;
	int capy;
} st_types[CAPY_ST_COUNT] = {
	[CAPY_ST_BOOL] = { "BOOL", 1, CAPY_DT_BOOL },
	[CAPY_ST_U8] = { "U8", 1, CAPY_DT_U8 },
	[CAPY_ST_I8] = { "I8", 1, CAPY_DT_I8 },
	[CAPY_ST_F8_E5M2] = { "F8_E5M2", 1, -1 },
	[CAPY_ST_F8_E4M3] = { "F8_E4M3", 1, CAPY_DT_F8_E4M3 },
	[CAPY_ST_I16] = { "I16", 2, CAPY_DT_I16 },
	[CAPY_ST_U16] = { "U16", 2, -1 },
	[CAPY_ST_F16] = { "F16", 2, CAPY_DT_F16 },
	[CAPY_ST_BF16] = { "BF16", 2, CAPY_DT_BF16 },
	[CAPY_ST_I32] = { "I32", 4, CAPY_DT_I32 },
	[CAPY_ST_U32] = { "U32", 4, -1 },
	[CAPY_ST_F32] = { "F32", 4, CAPY_DT_F32 },
	[CAPY_ST_F64] = { "F64", 8, -1 },
	[CAPY_ST_I64] = { "I64", 8, CAPY_DT_I64 },
	[CAPY_ST_U64] = { "U64", 8, -1 },
};

const char *capy_st_dtype_name(enum capy_st_dtype dt)
{
	return (unsigned)dt < CAPY_ST_COUNT ? st_types[dt].name : "?";
}

int capy_st_dtype_to_capy(enum capy_st_dtype dt)
{
	return (unsigned)dt < CAPY_ST_COUNT ? st_types[dt].capy : -1;
}

static int cmp_offset(const void *a, const void *b)
{
	const struct capy_st_tensor *x = a, *y = b;
	if (x->offset != y->offset)
		return x->offset < y->offset ? -1 : 1;
	return x->bytes < y->bytes ? -1 : x->bytes > y->bytes;
}

void capy_st_header_release(struct capy_st_header *h)
{
	for (size_t i = 0; i < h->ntensors; i++)
		free(h->tensors[i].name);
	free(h->tensors);
	cJSON_Delete(h->metadata);
	memset(h, 0, sizeof(*h));
}

#define BAD(...) capy_err_set(err, CAPY_EFORMAT, __VA_ARGS__)

static int parse_entry(const cJSON *e, struct capy_st_tensor *t, uint64_t data_start,
		       uint64_t data_len, const char *what, struct capy_err *err)
{
	const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(e, "dtype");
	const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
	const cJSON *offs = cJSON_GetObjectItemCaseSensitive(e, "data_offsets"), *d;
	uint64_t numel = 1, begin, end, need;
	int i;

	if (!cJSON_IsObject(e))
		return BAD("'%s': tensor '%s': header entry is not an object", what, t->name);
	if (!cJSON_IsString(dtype))
		return BAD("'%s': tensor '%s' has no dtype", what, t->name);
	for (i = 0; i < CAPY_ST_COUNT; i++)
		if (!strcmp(dtype->valuestring, st_types[i].name))
			break;
	if (i == CAPY_ST_COUNT)
		return BAD("'%s': tensor '%s' has unknown dtype '%s'", what, t->name, dtype->valuestring);
	t->dtype = (enum capy_st_dtype)i;
	if (!cJSON_IsArray(shape))
		return BAD("'%s': tensor '%s' has no shape", what, t->name);
	t->ndim = 0;
	cJSON_ArrayForEach(d, shape) {
		if (t->ndim == CAPY_MAX_DIMS)
			return BAD("'%s': tensor '%s' has more than %d dimensions", what, t->name,
				   CAPY_MAX_DIMS);
		if (capy_json_u64(d, &t->shape[t->ndim]) < 0)
			return BAD("'%s': tensor '%s' has a bad dimension in its shape", what, t->name);
		if (capy_mul_overflow(numel, t->shape[t->ndim], &numel))
			return BAD("'%s': tensor '%s': shape overflows", what, t->name);
		t->ndim++;
	}
	if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 ||
	    capy_json_u64(cJSON_GetArrayItem(offs, 0), &begin) < 0 ||
	    capy_json_u64(cJSON_GetArrayItem(offs, 1), &end) < 0)
		return BAD("'%s': tensor '%s' has no valid data_offsets", what, t->name);
	if (end < begin)
		return BAD("'%s': tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] end before they begin",
			   what, t->name, begin, end);
	if (capy_mul_overflow(numel, st_types[t->dtype].size, &need) || end - begin != need)
		return BAD("'%s': tensor '%s': %" PRIu64 " %s elements need %" PRIu64
			   " bytes, data_offsets [%" PRIu64 ", %" PRIu64 "] hold %" PRIu64, what, t->name, numel,
			   st_types[t->dtype].name, need, begin, end, end - begin);
	if (end > data_len)
		return BAD("'%s': tensor '%s': data_offsets end %" PRIu64 " (file offset %" PRIu64
			   ") is past the end of the file (%" PRIu64 " data bytes)", what, t->name, end,
			   data_start + end, data_len);
	t->offset = data_start + begin;
	t->bytes = need;
	return 0;
}

static int cmp_tensor_name(const void *a, const void *b)
{
	return strcmp((*(struct capy_st_tensor *const *)a)->name, (*(struct capy_st_tensor *const *)b)->name);
}

static int check_unique(const struct capy_st_header *h, const char *what, struct capy_err *err)
{
	struct capy_st_tensor **v = malloc((h->ntensors + 1) * sizeof(*v));
	int rc = 0;

	if (!v)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	for (size_t i = 0; i < h->ntensors; i++)
		v[i] = &h->tensors[i];
	qsort(v, h->ntensors, sizeof(*v), cmp_tensor_name);
	for (size_t i = 1; i < h->ntensors && rc == 0; i++)
		if (!strcmp(v[i]->name, v[i - 1]->name))
			rc = BAD("'%s': tensor '%s' appears twice in the header", what, v[i]->name);
	free(v);
	return rc;
}

int capy_st_parse(const uint8_t *buf, size_t len, uint64_t file_size, const char *what,
		  struct capy_st_header *out, struct capy_err *err)
{
	uint64_t hlen = 0, data_len, pos;
	cJSON *root;
	const cJSON *e;
	size_t n = 0;
	int rc;

	memset(out, 0, sizeof(*out));
	if (file_size < 8 || len < 8)
		return BAD("'%s' is not a safetensors file: %" PRIu64 " bytes, too short for the header length",
			   what, file_size);
	for (int i = 7; i >= 0; i--)
		hlen = hlen << 8 | buf[i];
	if (hlen > CAPY_ST_MAX_HEADER)
		return BAD("'%s': header length %" PRIu64 " at offset 0 exceeds the %u-byte limit", what,
			   hlen, CAPY_ST_MAX_HEADER);
	if (hlen > file_size - 8)
		return BAD("'%s': header length %" PRIu64 " at offset 0 runs past the end of the file (%" PRIu64
			   " bytes)", what, hlen, file_size);
	if (len < 8 + hlen)
		return BAD("'%s': header is truncated", what);
	if (hlen < 2 || buf[8] != '{')
		return BAD("'%s': header at offset 8 is not a JSON object", what);
	{
		char jwhat[4200];
		snprintf(jwhat, sizeof(jwhat), "'%s': safetensors header", what);
		rc = capy_json_parse((const char *)buf + 8, hlen, jwhat, &root, err);
		if (rc < 0)
			return rc;
	}
	if (!cJSON_IsObject(root)) {
		cJSON_Delete(root);
		return BAD("'%s': header at offset 8 is not a JSON object", what);
	}
	out->data_start = 8 + hlen;
	data_len = file_size - out->data_start;
	out->tensors = calloc((size_t)cJSON_GetArraySize(root) + 1, sizeof(*out->tensors));
	if (!out->tensors) {
		cJSON_Delete(root);
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	}
	cJSON_ArrayForEach(e, root) {
		struct capy_st_tensor *t;
		if (!strcmp(e->string, "__metadata__")) {
			const cJSON *m;
			if (!cJSON_IsObject(e)) {
				rc = BAD("'%s': __metadata__ is not an object", what);
				goto fail;
			}
			cJSON_ArrayForEach(m, e) {
				if (!cJSON_IsString(m)) {
					rc = BAD("'%s': __metadata__ value '%s' is not a string", what, m->string);
					goto fail;
				}
			}
			out->metadata = cJSON_Duplicate(e, 1);
			continue;
		}
		t = &out->tensors[n];
		t->name = strdup(e->string);
		if (!t->name) {
			rc = capy_err_set(err, CAPY_ENOMEM, "out of memory");
			goto fail;
		}
		n++;
		out->ntensors = n;
		rc = parse_entry(e, t, out->data_start, data_len, what, err);
		if (rc < 0)
			goto fail;
	}
	cJSON_Delete(root);
	root = NULL;
	if ((rc = check_unique(out, what, err)) < 0)
		goto fail;
	qsort(out->tensors, n, sizeof(*out->tensors), cmp_offset);
	/* The ranges must tile the data buffer: no gap, no overlap, nothing left over. */
	pos = out->data_start;
	for (size_t i = 0; i < n; i++) {
		const struct capy_st_tensor *t = &out->tensors[i];
		if (t->offset < pos) {
			rc = BAD("'%s': tensor '%s' at file offset %" PRIu64 " overlaps the previous tensor",
				 what, t->name, t->offset);
			goto fail;
		}
		if (t->offset > pos) {
			rc = BAD("'%s': %" PRIu64 " unused bytes at file offset %" PRIu64 " before tensor '%s'",
				 what, t->offset - pos, pos, t->name);
			goto fail;
		}
		pos = t->offset + t->bytes;
	}
	if (pos != file_size) {
		rc = BAD("'%s': %" PRIu64 " bytes after the last tensor at file offset %" PRIu64
			 " belong to no tensor", what, file_size - pos, pos);
		goto fail;
	}
	return 0;
fail:
	cJSON_Delete(root);
	capy_st_header_release(out);
	return rc;
}

int capy_st_read_header(const char *path, int fd, uint64_t file_size, struct capy_st_header *out,
			struct capy_err *err)
{
	uint8_t lenbuf[8];
	uint64_t hlen = 0;
	uint8_t *buf;
	int rc;

	if (file_size < 8)
		return BAD("'%s' is not a safetensors file: %" PRIu64 " bytes, too short for the header length",
			   path, file_size);
	rc = capy_pread_full(fd, lenbuf, 8, 0, path, err);
	if (rc < 0)
		return rc;
	for (int i = 7; i >= 0; i--)
		hlen = hlen << 8 | lenbuf[i];
	if (hlen > CAPY_ST_MAX_HEADER || hlen > file_size - 8)
		return capy_st_parse(lenbuf, 8, file_size, path, out, err);
	buf = malloc(8 + hlen);
	if (!buf)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory reading the header of '%s'", path);
	rc = capy_pread_full(fd, buf, 8 + hlen, 0, path, err);
	if (rc == 0)
		rc = capy_st_parse(buf, 8 + hlen, file_size, path, out, err);
	free(buf);
	return rc;
}
