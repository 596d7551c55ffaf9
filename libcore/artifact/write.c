/* write.c - writing a .capy artifact: declare, lay out, write regions, finish.
 *
 * The directory holds every region's offset, and the data starts after the
 * directory, so the layout is fixed in two steps: the directory is first rendered
 * with the widest possible numbers to reserve its space, then regions are placed
 * after it. finish() renders the real directory into the reserved space.
 */
#include "artifact.h"
#include "../util/file.h"
#include "../util/hash.h"
#include "../util/json.h"

#include <fcntl.h>
#include <sys/statvfs.h>

#define WIDE_NUMBER 9007199254740991ull /* 2^53 - 1: the widest exact JSON integer */

enum item_kind { ITEM_FILE, ITEM_TENSOR, ITEM_STACK };

struct item {
	enum item_kind kind;
	int idx;
};

struct wfile {
	char *name;
	uint64_t bytes, offset, xxh3;
};

struct wtensor {
	struct capy_tensor_info info;
	char *name;
	cJSON *sources;
};

struct wstack {
	char *name;
	uint64_t count, offset, stride;
	int ntensors;
	int tensors[4];
};

struct capy_artifact_writer {
	struct capy_outfile out;
	struct wfile *files;
	size_t nfiles;
	struct wtensor *tensors;
	size_t ntensors;
	struct wstack *stacks;
	size_t nstacks;
	struct item *items;
	size_t nitems;
	cJSON *model, *provenance;
	uint64_t data_offset, total, payload;
	bool laid_out;
	bool sparse;    /* tensor data is not written (capy_aw_set_sparse) */
};

static int grow(void **p, size_t n, size_t size, struct capy_err *err)
{
	/* Capacity is 8, then doubles each time n reaches a power of two. */
	if (n && (n < 8 || (n & (n - 1))))
		return 0;
	void *q = realloc(*p, (n ? 2 * n : 8) * size);
	if (!q)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	*p = q;
	return 0;
}

static int add_item(struct capy_artifact_writer *w, enum item_kind kind, int idx, struct capy_err *err)
{
	if (grow((void **)&w->items, w->nitems, sizeof(*w->items), err) < 0)
		return -1;
	w->items[w->nitems++] = (struct item){ kind, idx };
	return 0;
}

int capy_aw_new(struct capy_artifact_writer **out, const char *path, struct capy_err *err)
{
	struct capy_artifact_writer *w = calloc(1, sizeof(*w));

	if (!w)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	if (capy_outfile_open(&w->out, path, err) < 0) {
		free(w);
		return err ? err->code : CAPY_EIO;
	}
	*out = w;
	return 0;
}

int capy_aw_add_file(struct capy_artifact_writer *w, const char *name, uint64_t bytes,
		     struct capy_err *err)
{
	if (w->laid_out)
		CAPY_BUG("file added after layout");
	if (grow((void **)&w->files, w->nfiles, sizeof(*w->files), err) < 0)
		return err->code;
	w->files[w->nfiles] = (struct wfile){ .name = strdup(name), .bytes = bytes };
	if (!w->files[w->nfiles].name)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	if (add_item(w, ITEM_FILE, (int)w->nfiles, err) < 0)
		return err->code;
	return (int)w->nfiles++;
}

int capy_aw_add_stack(struct capy_artifact_writer *w, const char *name, uint64_t count,
		      struct capy_err *err)
{
	if (w->laid_out)
		CAPY_BUG("stack added after layout");
	if (!count)
		return capy_err_set(err, CAPY_EINVAL, "expert stack '%s' has no experts", name);
	if (grow((void **)&w->stacks, w->nstacks, sizeof(*w->stacks), err) < 0)
		return err->code;
	w->stacks[w->nstacks] = (struct wstack){ .name = strdup(name), .count = count };
	if (!w->stacks[w->nstacks].name)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	if (add_item(w, ITEM_STACK, (int)w->nstacks, err) < 0)
		return err->code;
	return (int)w->nstacks++;
}

int capy_aw_add_tensor(struct capy_artifact_writer *w, const char *name, enum capy_dtype dtype,
		       int ndim, const uint64_t *shape, uint32_t nparts, const uint64_t *parts,
		       int stack, cJSON *sources, struct capy_err *err)
{
	struct capy_tensor_info info = { .name = NULL, .dtype = dtype, .ndim = ndim, .stack = stack };
	struct wstack *s = NULL;
	struct wtensor *t;
	uint64_t sum = 0;
	int rc;

	if (w->laid_out)
		CAPY_BUG("tensor added after layout");
	if (ndim < 0 || ndim > CAPY_MAX_DIMS) {
		rc = capy_err_set(err, CAPY_EINVAL, "tensor '%s' has %d dimensions", name, ndim);
		goto fail;
	}
	memcpy(info.shape, shape, sizeof(*shape) * (size_t)ndim);
	if (dtype == CAPY_DT_NVFP4) {
		info.nparts = nparts ? nparts : 1;
		if (info.nparts > CAPY_MAX_PARTS || ndim < 2) {
			rc = capy_err_set(err, CAPY_EINVAL, "tensor '%s': %u parts / %d dimensions", name, nparts, ndim);
			goto fail;
		}
		for (uint32_t i = 0; i < info.nparts; i++) {
			info.parts[i] = nparts ? parts[i] : shape[ndim - 2];
			sum += info.parts[i];
		}
		if (sum != shape[ndim - 2]) {
			rc = capy_err_set(err, CAPY_EINVAL, "tensor '%s': parts do not add up to %" PRIu64 " rows",
					  name, shape[ndim - 2]);
			goto fail;
		}
	}
	if (capy_tensor_bytes(dtype, ndim, shape, info.nparts, &info.bytes, &info.slice_bytes,
			      &info.nslices) < 0) {
		rc = capy_err_set(err, CAPY_EINVAL, "tensor '%s': invalid %s shape", name, capy_dtype_name(dtype));
		goto fail;
	}
	if (stack >= 0) {
		if ((size_t)stack >= w->nstacks)
			CAPY_BUG("stack %d does not exist", stack);
		s = &w->stacks[stack];
		if (ndim < 1 || shape[0] != s->count) {
			rc = capy_err_set(err, CAPY_EINVAL, "tensor '%s' does not have %" PRIu64
					  " experts along its first dimension", name, s->count);
			goto fail;
		}
		if (s->ntensors == (int)ARRAY_SIZE(s->tensors)) {
			rc = capy_err_set(err, CAPY_EINVAL, "expert stack '%s' is full", s->name);
			goto fail;
		}
	}
	if ((rc = grow((void **)&w->tensors, w->ntensors, sizeof(*w->tensors), err)) < 0)
		goto fail;
	if (stack < 0 && (rc = add_item(w, ITEM_TENSOR, (int)w->ntensors, err)) < 0)
		goto fail;
	t = &w->tensors[w->ntensors];
	t->info = info;
	t->sources = sources;
	t->name = strdup(name);
	if (!t->name) {
		t->sources = NULL;
		if (stack < 0)
			w->nitems--;
		rc = capy_err_set(err, CAPY_ENOMEM, "out of memory");
		goto fail;
	}
	t->info.name = t->name;
	if (s)
		s->tensors[s->ntensors++] = (int)w->ntensors;
	return (int)w->ntensors++;
fail:
	cJSON_Delete(sources);
	return rc;
}

static cJSON *u64_array(const uint64_t *v, int n)
{
	cJSON *a = cJSON_CreateArray();

	for (int i = 0; a && i < n; i++)
		cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[i]));
	return a;
}

/* Render the directory; with wide, every number that depends on the layout or the
 * data is replaced by the widest value it can take. NULL on OOM. */
static char *render_dir(struct capy_artifact_writer *w, bool wide)
{
	cJSON *root = cJSON_CreateObject(), *arr, *o;
	char hex[17];
	char *text;

#define NUM(v) ((double)(wide ? WIDE_NUMBER : (v)))
#define HEX(v) (capy_hash_hex(wide ? UINT64_MAX : (v), hex), hex)
	cJSON_AddStringToObject(root, "format", "capy");
	cJSON_AddNumberToObject(root, "version", CAPY_ARTIFACT_VERSION);
	cJSON_AddItemReferenceToObject(root, "model", w->model);
	arr = cJSON_AddArrayToObject(root, "files");
	for (size_t i = 0; i < w->nfiles; i++) {
		o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "name", w->files[i].name);
		cJSON_AddNumberToObject(o, "offset", NUM(w->files[i].offset));
		cJSON_AddNumberToObject(o, "bytes", (double)w->files[i].bytes);
		cJSON_AddStringToObject(o, "xxh3", HEX(w->files[i].xxh3));
		cJSON_AddItemToArray(arr, o);
	}
	arr = cJSON_AddArrayToObject(root, "tensors");
	for (size_t i = 0; i < w->ntensors; i++) {
		const struct capy_tensor_info *t = &w->tensors[i].info;
		o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "name", t->name);
		cJSON_AddStringToObject(o, "dtype", capy_dtype_name(t->dtype));
		cJSON_AddItemToObject(o, "shape", u64_array(t->shape, t->ndim));
		cJSON_AddNumberToObject(o, "offset", NUM(t->offset));
		cJSON_AddNumberToObject(o, "bytes", (double)t->bytes);
		if (t->stack >= 0)
			cJSON_AddNumberToObject(o, "stride", NUM(t->stride));
		cJSON_AddStringToObject(o, "xxh3", HEX(t->xxh3));
		if (t->dtype == CAPY_DT_NVFP4 && t->nparts > 1)
			cJSON_AddItemToObject(o, "parts", u64_array(t->parts, (int)t->nparts));
		if (w->tensors[i].sources)
			cJSON_AddItemReferenceToObject(o, "source", w->tensors[i].sources);
		cJSON_AddItemToArray(arr, o);
	}
	arr = cJSON_AddArrayToObject(root, "expert_stacks");
	for (size_t i = 0; i < w->nstacks; i++) {
		const struct wstack *s = &w->stacks[i];
		cJSON *names;
		o = cJSON_CreateObject();
		cJSON_AddStringToObject(o, "name", s->name);
		cJSON_AddNumberToObject(o, "count", (double)s->count);
		cJSON_AddNumberToObject(o, "offset", NUM(s->offset));
		cJSON_AddNumberToObject(o, "stride", NUM(s->stride));
		names = cJSON_AddArrayToObject(o, "tensors");
		for (int j = 0; j < s->ntensors; j++)
			cJSON_AddItemToArray(names, cJSON_CreateString(w->tensors[s->tensors[j]].name));
		cJSON_AddItemToArray(arr, o);
	}
	if (w->provenance)
		cJSON_AddItemReferenceToObject(root, "provenance", w->provenance);
#undef NUM
#undef HEX
	text = cJSON_PrintUnformatted(root);
	cJSON_Delete(root);
	return text;
}

int capy_aw_layout(struct capy_artifact_writer *w, cJSON *model, cJSON *provenance,
		   struct capy_err *err)
{
	uint64_t pos;
	char *text;
	int rc;

	if (w->laid_out)
		CAPY_BUG("layout twice");
	w->model = model;
	w->provenance = provenance;
	for (size_t i = 0; i < w->nstacks; i++) {
		struct wstack *s = &w->stacks[i];
		uint64_t in = 0;
		if (!s->ntensors)
			return capy_err_set(err, CAPY_EINVAL, "expert stack '%s' has no tensors", s->name);
		for (int j = 0; j < s->ntensors; j++) {
			in = CAPY_ALIGN_UP(in, CAPY_ARTIFACT_SUBALIGN);
			in += w->tensors[s->tensors[j]].info.slice_bytes;
		}
		s->stride = CAPY_ALIGN_UP(in, CAPY_ARTIFACT_ALIGN);
	}
	text = render_dir(w, true);
	if (!text)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory rendering the directory");
	w->data_offset = CAPY_ALIGN_UP(CAPY_ARTIFACT_HEADER_BYTES + strlen(text), CAPY_ARTIFACT_ALIGN);
	free(text);

	pos = w->data_offset;
	for (size_t i = 0; i < w->nitems; i++) {
		const struct item *it = &w->items[i];
		if (it->kind == ITEM_FILE) {
			w->files[it->idx].offset = pos;
			pos = CAPY_ALIGN_UP(pos + w->files[it->idx].bytes, CAPY_ARTIFACT_ALIGN);
			w->payload += w->files[it->idx].bytes;
		} else if (it->kind == ITEM_TENSOR) {
			struct capy_tensor_info *t = &w->tensors[it->idx].info;
			t->offset = pos;
			pos = CAPY_ALIGN_UP(pos + t->bytes, CAPY_ARTIFACT_ALIGN);
			w->payload += t->bytes;
		} else {
			struct wstack *s = &w->stacks[it->idx];
			uint64_t in = 0;
			s->offset = pos;
			for (int j = 0; j < s->ntensors; j++) {
				struct capy_tensor_info *t = &w->tensors[s->tensors[j]].info;
				in = CAPY_ALIGN_UP(in, CAPY_ARTIFACT_SUBALIGN);
				t->offset = pos + in;
				t->stride = s->stride;
				in += t->slice_bytes;
				w->payload += t->bytes;
			}
			pos += s->count * s->stride;
		}
	}
	w->total = pos;
	w->laid_out = true;

	rc = capy_outfile_truncate(&w->out, w->total, err);
	if (rc < 0)
		return rc;
	/* Check the free space now so a disk too small fails at once, not hours later.
	 * (Not posix_fallocate: on ext4 writing into preallocated, unwritten extents
	 * measured 10-25 % slower than letting delayed allocation place the data.) */
	{
		struct statvfs vfs;
		if (!w->sparse && fstatvfs(w->out.fd, &vfs) == 0 &&
		    (uint64_t)vfs.f_bavail * vfs.f_frsize < w->total)
			return capy_err_errno(err, ENOSPC, "'%s' needs %" PRIu64 " bytes, the file system has %" PRIu64
					      " free", w->out.path, w->total, (uint64_t)vfs.f_bavail * vfs.f_frsize);
	}
	return 0;
}

void capy_aw_set_sparse(struct capy_artifact_writer *w)
{
	if (w->laid_out)
		CAPY_BUG("sparse after layout");
	w->sparse = true;
}

uint64_t capy_aw_file_offset(const struct capy_artifact_writer *w, int file)
{
	return w->files[file].offset;
}

const struct capy_tensor_info *capy_aw_tensor(const struct capy_artifact_writer *w, int tensor)
{
	return &w->tensors[tensor].info;
}

uint64_t capy_aw_total_bytes(const struct capy_artifact_writer *w)
{
	return w->total;
}

uint64_t capy_aw_payload_bytes(const struct capy_artifact_writer *w)
{
	return w->payload;
}

int capy_aw_pwrite(struct capy_artifact_writer *w, uint64_t offset, const void *buf, size_t len,
		   struct capy_err *err)
{
	if (!w->laid_out || offset < w->data_offset || offset + len > w->total)
		CAPY_BUG("write of %zu bytes at %" PRIu64 " outside the data area", len, offset);
	return capy_pwrite_full(w->out.fd, buf, len, offset, w->out.path, err);
}

void capy_aw_set_file_xxh3(struct capy_artifact_writer *w, int file, uint64_t h)
{
	w->files[file].xxh3 = h;
}

void capy_aw_set_tensor_xxh3(struct capy_artifact_writer *w, int tensor, uint64_t h)
{
	w->tensors[tensor].info.xxh3 = h;
}

const char *capy_aw_tmp_path(const struct capy_artifact_writer *w)
{
	return w->out.tmp_path;
}

static void put_u32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void free_writer(struct capy_artifact_writer *w)
{
	for (size_t i = 0; i < w->nfiles; i++)
		free(w->files[i].name);
	for (size_t i = 0; i < w->ntensors; i++) {
		free(w->tensors[i].name);
		cJSON_Delete(w->tensors[i].sources);
	}
	for (size_t i = 0; i < w->nstacks; i++)
		free(w->stacks[i].name);
	free(w->files);
	free(w->tensors);
	free(w->stacks);
	free(w->items);
	cJSON_Delete(w->model);
	cJSON_Delete(w->provenance);
	free(w);
}

int capy_aw_finish(struct capy_artifact_writer *w, struct capy_err *err)
{
	uint8_t hdr[CAPY_ARTIFACT_HEADER_BYTES] = { 0 };
	char *text;
	size_t len;
	int rc;

	if (!w->laid_out)
		CAPY_BUG("finish before layout");
	text = render_dir(w, false);
	if (!text) {
		rc = capy_err_set(err, CAPY_ENOMEM, "out of memory rendering the directory");
		goto fail;
	}
	len = strlen(text);
	if (CAPY_ARTIFACT_HEADER_BYTES + len > w->data_offset)
		CAPY_BUG("directory (%zu bytes) outgrew its reserved space", len);
	rc = capy_pwrite_full(w->out.fd, text, len, CAPY_ARTIFACT_HEADER_BYTES, w->out.path, err);
	if (rc < 0) {
		free(text);
		goto fail;
	}
	memcpy(hdr, capy_artifact_magic, 8);
	put_u32(hdr + 8, CAPY_ARTIFACT_VERSION);
	put_u32(hdr + 12, CAPY_ARTIFACT_HEADER_BYTES);
	put_u64(hdr + 16, CAPY_ARTIFACT_HEADER_BYTES);
	put_u64(hdr + 24, len);
	put_u64(hdr + 32, w->data_offset);
	put_u64(hdr + 40, w->total);
	put_u64(hdr + 48, capy_xxh3(text, len));
	put_u64(hdr + 56, capy_xxh3(hdr, 56));
	free(text);
	rc = capy_pwrite_full(w->out.fd, hdr, sizeof(hdr), 0, w->out.path, err);
	if (rc < 0)
		goto fail;
	rc = capy_outfile_commit(&w->out, err);
	free_writer(w);
	return rc;
fail:
	capy_aw_abort(w);
	return rc;
}

void capy_aw_abort(struct capy_artifact_writer *w)
{
	if (!w)
		return;
	capy_outfile_abort(&w->out);
	free_writer(w);
}
