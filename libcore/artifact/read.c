/* read.c - opening a .capy artifact: map it, check the header, parse the directory
 * and validate every region in O(tensors), without touching tensor data. */
#include "artifact.h"
#include "../util/file.h"
#include "../util/hash.h"
#include "../util/json.h"
#include "../util/thread.h"

#include <stdatomic.h>
#include <sys/mman.h>

const uint8_t capy_artifact_magic[8] = { 'C', 'A', 'P', 'Y', 'A', 'R', 'T', 0 };

static uint32_t get_u32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64(const uint8_t *p)
{
	return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32;
}

struct region {
	uint64_t begin, end;
	const char *kind, *name;
};

static int cmp_region(const void *a, const void *b)
{
	const struct region *x = a, *y = b;
	return x->begin < y->begin ? -1 : x->begin > y->begin;
}

static const struct capy_artifact *sort_ctx;

static int cmp_name(const void *a, const void *b)
{
	return strcmp(sort_ctx->tensors[*(const int *)a].name, sort_ctx->tensors[*(const int *)b].name);
}

#define BAD(...) capy_err_set(err, CAPY_EFORMAT, __VA_ARGS__)

static int check_header(struct capy_artifact *a, const char *what, struct capy_err *err)
{
	const uint8_t *h = a->base;
	uint64_t dir_off, dir_bytes, file_bytes;

	if (a->size < CAPY_ARTIFACT_HEADER_BYTES)
		return BAD("'%s' is not a capy artifact: %" PRIu64 " bytes, shorter than the %d-byte header",
			   what, a->size, CAPY_ARTIFACT_HEADER_BYTES);
	if (memcmp(h, capy_artifact_magic, 8))
		return BAD("'%s' is not a capy artifact (bad magic at offset 0)", what);
	if (get_u64(h + 56) != capy_xxh3(h, 56))
		return BAD("'%s': header checksum mismatch (bytes 0-63 are damaged)", what);
	if (get_u32(h + 8) != CAPY_ARTIFACT_VERSION)
		return BAD("'%s': artifact version %u, this build reads version %d", what, get_u32(h + 8),
			   CAPY_ARTIFACT_VERSION);
	if (get_u32(h + 12) != CAPY_ARTIFACT_HEADER_BYTES)
		return BAD("'%s': header size %u at offset 12, expected %d", what, get_u32(h + 12),
			   CAPY_ARTIFACT_HEADER_BYTES);
	dir_off = get_u64(h + 16);
	dir_bytes = get_u64(h + 24);
	a->data_offset = get_u64(h + 32);
	file_bytes = get_u64(h + 40);
	if (file_bytes != a->size) {
		if (a->size < file_bytes)
			return BAD("'%s' is truncated: %" PRIu64 " bytes, the header says %" PRIu64, what,
				   a->size, file_bytes);
		return BAD("'%s' has %" PRIu64 " unexpected bytes after offset %" PRIu64, what,
			   a->size - file_bytes, file_bytes);
	}
	if (dir_off != CAPY_ARTIFACT_HEADER_BYTES)
		return BAD("'%s': directory offset %" PRIu64 " at offset 16, expected %d", what, dir_off,
			   CAPY_ARTIFACT_HEADER_BYTES);
	if (dir_bytes > a->size - dir_off || a->data_offset % CAPY_ARTIFACT_ALIGN ||
	    a->data_offset < dir_off + dir_bytes || a->data_offset > a->size)
		return BAD("'%s': directory (%" PRIu64 " bytes) and data offset %" PRIu64
			   " do not fit the file", what, dir_bytes, a->data_offset);
	if (get_u64(h + 48) != capy_xxh3(h + dir_off, dir_bytes))
		return BAD("'%s': directory checksum mismatch (bytes %" PRIu64 "-%" PRIu64 " are damaged)",
			   what, dir_off, dir_off + dir_bytes - 1);
	return capy_json_parse((const char *)h + dir_off, dir_bytes, what, &a->dir, err);
}

static int get_hash(const cJSON *o, uint64_t *out, const char *what, const char *name,
		    struct capy_err *err)
{
	const cJSON *h = cJSON_GetObjectItemCaseSensitive(o, "xxh3");

	if (!cJSON_IsString(h) || capy_hash_parse(h->valuestring, out) < 0)
		return BAD("'%s': '%s' has no valid xxh3 checksum", what, name);
	return 0;
}

static int get_shape(const cJSON *arr, struct capy_tensor_info *t, const char *what,
		     struct capy_err *err)
{
	const cJSON *d;
	int n = 0;

	if (!cJSON_IsArray(arr))
		return BAD("'%s': tensor '%s' has no shape", what, t->name);
	cJSON_ArrayForEach(d, arr) {
		if (n == CAPY_MAX_DIMS)
			return BAD("'%s': tensor '%s' has more than %d dimensions", what, t->name,
				   CAPY_MAX_DIMS);
		if (capy_json_u64(d, &t->shape[n]) < 0)
			return BAD("'%s': tensor '%s' has a bad dimension", what, t->name);
		n++;
	}
	t->ndim = n;
	return 0;
}

static int parse_tensor(const cJSON *o, struct capy_tensor_info *t, const char *what,
			struct capy_err *err)
{
	const cJSON *parts;
	const char *name = NULL, *dtype;
	uint64_t bytes, slice_bytes, nslices, sum = 0;
	int rc;

	if (!cJSON_IsObject(o) || capy_json_get_string(o, "name", true, &name, what, err) < 0)
		return BAD("'%s': a tensor entry has no name", what);
	t->name = name;
	t->stack = -1;
	if ((rc = capy_json_get_string(o, "dtype", true, &dtype, what, err)) < 0)
		return capy_err_prefix(err, "tensor '%s'", name);
	if (capy_dtype_parse(dtype, &t->dtype) < 0)
		return BAD("'%s': tensor '%s' has unknown dtype '%s'", what, name, dtype);
	if ((rc = get_shape(cJSON_GetObjectItemCaseSensitive(o, "shape"), t, what, err)) < 0)
		return rc;
	if (capy_json_get_u64(o, "offset", true, &t->offset, what, err) < 0 ||
	    capy_json_get_u64(o, "bytes", true, &t->bytes, what, err) < 0 ||
	    capy_json_get_u64(o, "stride", false, &t->stride, what, err) < 0)
		return capy_err_prefix(err, "tensor '%s'", name);
	if ((rc = get_hash(o, &t->xxh3, what, name, err)) < 0)
		return rc;
	parts = cJSON_GetObjectItemCaseSensitive(o, "parts");
	if (t->dtype == CAPY_DT_NVFP4) {
		t->nparts = 1;
		t->parts[0] = t->ndim >= 2 ? t->shape[t->ndim - 2] : 0;
		if (parts) {
			const cJSON *p;
			t->nparts = 0;
			if (!cJSON_IsArray(parts))
				return BAD("'%s': tensor '%s' has bad parts", what, name);
			cJSON_ArrayForEach(p, parts) {
				if (t->nparts == CAPY_MAX_PARTS || capy_json_u64(p, &t->parts[t->nparts]) < 0)
					return BAD("'%s': tensor '%s' has bad parts", what, name);
				sum += t->parts[t->nparts++];
			}
			if (!t->nparts || t->ndim < 2 || sum != t->shape[t->ndim - 2])
				return BAD("'%s': tensor '%s': parts do not add up to its rows", what, name);
		}
	} else if (parts) {
		return BAD("'%s': tensor '%s' has parts but is not NVFP4", what, name);
	}
	if (capy_tensor_bytes(t->dtype, t->ndim, t->shape, t->nparts, &bytes, &slice_bytes,
			      &nslices) < 0)
		return BAD("'%s': tensor '%s' has an invalid %s shape", what, name, dtype);
	if (bytes != t->bytes)
		return BAD("'%s': tensor '%s' is %" PRIu64 " bytes, its %s shape needs %" PRIu64, what,
			   name, t->bytes, dtype, bytes);
	t->slice_bytes = slice_bytes;
	t->nslices = nslices;
	return 0;
}

static int parse_files(struct capy_artifact *a, const char *what, struct capy_err *err)
{
	const cJSON *arr = cJSON_GetObjectItemCaseSensitive(a->dir, "files"), *o;
	size_t i = 0;

	if (!cJSON_IsArray(arr))
		return BAD("'%s': directory has no files list", what);
	a->nfiles = (size_t)cJSON_GetArraySize(arr);
	a->files = calloc(a->nfiles + 1, sizeof(*a->files));
	if (!a->files)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	cJSON_ArrayForEach(o, arr) {
		struct capy_file_info *f = &a->files[i++];
		if (!cJSON_IsObject(o) || capy_json_get_string(o, "name", true, &f->name, what, err) < 0)
			return BAD("'%s': a file entry has no name", what);
		if (capy_json_get_u64(o, "offset", true, &f->offset, what, err) < 0 ||
		    capy_json_get_u64(o, "bytes", true, &f->bytes, what, err) < 0)
			return capy_err_prefix(err, "file '%s'", f->name);
		if (get_hash(o, &f->xxh3, what, f->name, err) < 0)
			return err->code;
	}
	return 0;
}

static int parse_stacks(struct capy_artifact *a, const char *what, struct capy_err *err)
{
	const cJSON *arr = cJSON_GetObjectItemCaseSensitive(a->dir, "expert_stacks"), *o;
	size_t i = 0;

	if (!arr)
		return 0;
	if (!cJSON_IsArray(arr))
		return BAD("'%s': expert_stacks is not a list", what);
	a->nstacks = (size_t)cJSON_GetArraySize(arr);
	a->stacks = calloc(a->nstacks + 1, sizeof(*a->stacks));
	if (!a->stacks)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	cJSON_ArrayForEach(o, arr) {
		struct capy_expert_stack *s = &a->stacks[i];
		const cJSON *names, *n;
		uint64_t in = 0;

		if (!cJSON_IsObject(o) || capy_json_get_string(o, "name", true, &s->name, what, err) < 0)
			return BAD("'%s': an expert stack has no name", what);
		if (capy_json_get_u64(o, "count", true, &s->count, what, err) < 0 ||
		    capy_json_get_u64(o, "offset", true, &s->offset, what, err) < 0 ||
		    capy_json_get_u64(o, "stride", true, &s->stride, what, err) < 0)
			return capy_err_prefix(err, "expert stack '%s'", s->name);
		if (!s->count || !s->stride || s->offset % CAPY_ARTIFACT_ALIGN ||
		    s->stride % CAPY_ARTIFACT_ALIGN)
			return BAD("'%s': expert stack '%s' has a bad count, offset or stride", what, s->name);
		names = cJSON_GetObjectItemCaseSensitive(o, "tensors");
		if (!cJSON_IsArray(names) || !cJSON_GetArraySize(names))
			return BAD("'%s': expert stack '%s' lists no tensors", what, s->name);
		cJSON_ArrayForEach(n, names) {
			const struct capy_tensor_info *ct;
			struct capy_tensor_info *t;
			if (s->ntensors == (int)ARRAY_SIZE(s->tensors) || !cJSON_IsString(n))
				return BAD("'%s': expert stack '%s' has a bad tensor list", what, s->name);
			ct = capy_artifact_find(a, n->valuestring);
			if (!ct)
				return BAD("'%s': expert stack '%s' lists unknown tensor '%s'", what, s->name,
					   n->valuestring);
			t = &a->tensors[ct - a->tensors];
			if (t->stack >= 0)
				return BAD("'%s': tensor '%s' is in two expert stacks", what, t->name);
			in = CAPY_ALIGN_UP(in, CAPY_ARTIFACT_SUBALIGN);
			if (t->ndim < 1 || t->shape[0] != s->count || t->stride != s->stride ||
			    t->offset != s->offset + in)
				return BAD("'%s': tensor '%s' does not match expert stack '%s' (count %" PRIu64
					   ", stride %" PRIu64 ", offset %" PRIu64 ")", what, t->name,
					   s->name, s->count, s->stride, s->offset + in);
			in += t->slice_bytes;
			t->stack = (int)i;
			s->tensors[s->ntensors++] = (int)(t - a->tensors);
		}
		if (in > s->stride)
			return BAD("'%s': expert stack '%s': an expert needs %" PRIu64
				   " bytes, stride is %" PRIu64, what, s->name, in, s->stride);
		i++;
	}
	return 0;
}

static int check_regions(struct capy_artifact *a, const char *what, struct capy_err *err)
{
	size_t n = 0, cap = a->nfiles + a->ntensors + a->nstacks;
	struct region *r = calloc(cap + 1, sizeof(*r));
	uint64_t count_bytes;
	int rc = 0;

	if (!r)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	for (size_t i = 0; i < a->nfiles; i++)
		r[n++] = (struct region){ a->files[i].offset, a->files[i].offset + a->files[i].bytes,
					  "file", a->files[i].name };
	for (size_t i = 0; i < a->ntensors; i++) {
		const struct capy_tensor_info *t = &a->tensors[i];
		if (t->stride && t->stack < 0) {
			rc = BAD("'%s': tensor '%s' has a stride but is in no expert stack", what, t->name);
			goto out;
		}
		if (t->stack < 0)
			r[n++] = (struct region){ t->offset, t->offset + t->bytes, "tensor", t->name };
	}
	for (size_t i = 0; i < a->nstacks; i++) {
		const struct capy_expert_stack *s = &a->stacks[i];
		if (capy_mul_overflow(s->count, s->stride, &count_bytes) ||
		    capy_add_overflow(s->offset, count_bytes, &count_bytes)) {
			rc = BAD("'%s': expert stack '%s' overflows", what, s->name);
			goto out;
		}
		r[n++] = (struct region){ s->offset, count_bytes, "expert stack", s->name };
	}
	for (size_t i = 0; i < n; i++) {
		if (r[i].end < r[i].begin || r[i].begin < a->data_offset || r[i].end > a->size) {
			rc = BAD("'%s': %s '%s' at offset %" PRIu64 " lies outside the data area [%" PRIu64
				 ", %" PRIu64 ")", what, r[i].kind, r[i].name, r[i].begin, a->data_offset,
				 a->size);
			goto out;
		}
		if (r[i].begin % CAPY_ARTIFACT_ALIGN) {
			rc = BAD("'%s': %s '%s' at offset %" PRIu64 " is not 4096-aligned", what, r[i].kind,
				 r[i].name, r[i].begin);
			goto out;
		}
	}
	qsort(r, n, sizeof(*r), cmp_region);
	for (size_t i = 1; i < n; i++) {
		if (r[i].begin < r[i - 1].end) {
			rc = BAD("'%s': %s '%s' at offset %" PRIu64 " overlaps %s '%s'", what, r[i].kind,
				 r[i].name, r[i].begin, r[i - 1].kind, r[i - 1].name);
			goto out;
		}
	}
out:
	free(r);
	return rc;
}

static int parse_dir(struct capy_artifact *a, const char *what, struct capy_err *err)
{
	const cJSON *arr, *o, *model;
	const char *format;
	uint64_t version;
	size_t i = 0;
	int rc;

	if (!cJSON_IsObject(a->dir))
		return BAD("'%s': the directory is not a JSON object", what);
	if (capy_json_get_string(a->dir, "format", true, &format, what, err) < 0)
		return err->code;
	if (strcmp(format, "capy"))
		return BAD("'%s': directory format is '%s', expected 'capy'", what, format);
	if (capy_json_get_u64(a->dir, "version", true, &version, what, err) < 0)
		return err->code;
	if (version != CAPY_ARTIFACT_VERSION)
		return BAD("'%s': directory version %" PRIu64 ", expected %d", what, version,
			   CAPY_ARTIFACT_VERSION);
	model = cJSON_GetObjectItemCaseSensitive(a->dir, "model");
	if (!cJSON_IsObject(model))
		return BAD("'%s': directory has no model object", what);
	if (capy_json_get_string(model, "family", true, &a->family, what, err) < 0)
		return err->code;
	a->config = cJSON_GetObjectItemCaseSensitive(model, "config");
	if (!cJSON_IsObject(a->config))
		return BAD("'%s': model has no config object", what);
	a->provenance = cJSON_GetObjectItemCaseSensitive(a->dir, "provenance");
	if ((rc = parse_files(a, what, err)) < 0)
		return rc;

	arr = cJSON_GetObjectItemCaseSensitive(a->dir, "tensors");
	if (!cJSON_IsArray(arr))
		return BAD("'%s': directory has no tensors list", what);
	a->ntensors = (size_t)cJSON_GetArraySize(arr);
	a->tensors = calloc(a->ntensors + 1, sizeof(*a->tensors));
	a->by_name = calloc(a->ntensors + 1, sizeof(*a->by_name));
	if (!a->tensors || !a->by_name)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	cJSON_ArrayForEach(o, arr) {
		if ((rc = parse_tensor(o, &a->tensors[i], what, err)) < 0)
			return rc;
		a->by_name[i] = (int)i;
		i++;
	}
	sort_ctx = a; /* qsort has no context argument; opening is not concurrent with itself */
	qsort(a->by_name, a->ntensors, sizeof(*a->by_name), cmp_name);
	for (i = 1; i < a->ntensors; i++)
		if (!strcmp(a->tensors[a->by_name[i]].name, a->tensors[a->by_name[i - 1]].name))
			return BAD("'%s': tensor '%s' appears twice", what, a->tensors[a->by_name[i]].name);
	if ((rc = parse_stacks(a, what, err)) < 0)
		return rc;
	return check_regions(a, what, err);
}

int capy_artifact_parse(struct capy_artifact **out, const uint8_t *data, uint64_t size,
			const char *what, struct capy_err *err)
{
	struct capy_artifact *a = calloc(1, sizeof(*a));
	int rc;

	if (!a)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	a->base = data;
	a->size = size;
	a->path = what;
	rc = check_header(a, what, err);
	if (rc == 0)
		rc = parse_dir(a, what, err);
	if (rc < 0) {
		capy_artifact_close(a);
		return rc;
	}
	*out = a;
	return 0;
}

int capy_artifact_open(struct capy_artifact **out, const char *path, struct capy_err *err)
{
	struct capy_map *m = calloc(1, sizeof(*m));
	char *p = strdup(path);
	int rc;

	if (!m || !p) {
		free(m);
		free(p);
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	}
	rc = capy_map_open(m, path, err);
	if (rc < 0) {
		free(m);
		free(p);
		return rc;
	}
	rc = capy_artifact_parse(out, m->data, m->size, p, err);
	if (rc < 0) {
		capy_map_close(m);
		free(m);
		free(p);
		return rc;
	}
	(*out)->map_ = m;
	return 0;
}

void capy_artifact_close(struct capy_artifact *a)
{
	if (!a)
		return;
	if (a->map_) {
		capy_map_close(a->map_);
		free(a->map_);
		free((char *)a->path);
	}
	cJSON_Delete(a->dir);
	free(a->tensors);
	free(a->files);
	free(a->stacks);
	free(a->by_name);
	free(a);
}

const struct capy_tensor_info *capy_artifact_find(const struct capy_artifact *a, const char *name)
{
	size_t lo = 0, hi = a->ntensors;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int c = strcmp(a->tensors[a->by_name[mid]].name, name);
		if (!c)
			return &a->tensors[a->by_name[mid]];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

const struct capy_file_info *capy_artifact_file(const struct capy_artifact *a, const char *name)
{
	for (size_t i = 0; i < a->nfiles; i++)
		if (!strcmp(a->files[i].name, name))
			return &a->files[i];
	return NULL;
}

/* --- verify ------------------------------------------------------------------- */

struct verify_ctx {
	const struct capy_artifact *a;
	_Atomic size_t next;
	_Atomic int failed;
	size_t nitems;
	capy_progress_fn cb;
	void *ud;
	struct capy_err *errs; /* one per thread */
	size_t *bad;           /* per thread: index of the first bad item, or SIZE_MAX */
};

#define VERIFY_CHUNK (8u << 20)

/* Hash bytes [off, off + n) of the artifact. For a mapped file, drop the pages from this
 * process afterwards (they stay in the page cache), so verifying a 100 GB artifact does not
 * show 100 GB resident. */
static void hash_range(const struct capy_artifact *a, struct capy_hasher *h, uint64_t off, uint64_t n)
{
	capy_hasher_update(h, a->base + off, n);
	if (a->map_) {
		uint64_t b = CAPY_ALIGN_UP(off, 4096), e = (off + n) & ~(uint64_t)4095;
		if (e > b)
			madvise((void *)(a->base + b), e - b, MADV_DONTNEED);
	}
}

static void verify_worker(void *p, int ith, int nth)
{
	struct verify_ctx *c = p;
	const struct capy_artifact *a = c->a;
	struct capy_hasher *h = capy_hasher_new();
	size_t i;

	(void)nth;
	c->bad[ith] = SIZE_MAX;
	if (!h) {
		capy_err_set(&c->errs[ith], CAPY_ENOMEM, "out of memory");
		atomic_store(&c->failed, 1);
		return;
	}
	while (!atomic_load(&c->failed) && (i = atomic_fetch_add(&c->next, 1)) < c->nitems) {
		uint64_t want, got;
		const char *kind, *name;
		capy_hasher_reset(h);
		if (i < a->nfiles) {
			const struct capy_file_info *f = &a->files[i];
			for (uint64_t o = 0; o < f->bytes; o += VERIFY_CHUNK) {
				uint64_t n = CAPY_MIN(VERIFY_CHUNK, f->bytes - o);
				hash_range(a, h, f->offset + o, n);
				if (c->cb)
					c->cb(c->ud, n);
			}
			want = f->xxh3;
			kind = "file";
			name = f->name;
		} else {
			const struct capy_tensor_info *t = &a->tensors[i - a->nfiles];
			for (uint64_t s = 0; s < t->nslices || (s == 0 && !t->nslices); s++) {
				uint64_t base = capy_tensor_slice_offset(t, s), len = t->nslices ? t->slice_bytes : 0;
				for (uint64_t o = 0; o < len; o += VERIFY_CHUNK) {
					uint64_t n = CAPY_MIN(VERIFY_CHUNK, len - o);
					hash_range(a, h, base + o, n);
					if (c->cb)
						c->cb(c->ud, n);
				}
			}
			want = t->xxh3;
			kind = "tensor";
			name = t->name;
		}
		got = capy_hasher_digest(h);
		if (got != want) {
			uint64_t off = i < a->nfiles ? a->files[i].offset : a->tensors[i - a->nfiles].offset;
			capy_err_set(&c->errs[ith], CAPY_ECHECKSUM,
				     "'%s': %s '%s' at offset %" PRIu64 " is damaged: checksum %016" PRIx64
				     ", expected %016" PRIx64, a->path, kind, name, off, got, want);
			c->bad[ith] = i;
			atomic_store(&c->failed, 1);
		}
	}
	capy_hasher_free(h);
}

int capy_artifact_verify(const struct capy_artifact *a, int nthreads, capy_progress_fn cb,
			 void *ud, struct capy_err *err)
{
	struct verify_ctx c = { .a = a, .nitems = a->nfiles + a->ntensors, .cb = cb, .ud = ud };
	struct capy_pool *pool;
	int rc, nth;

	rc = capy_pool_new(&pool, nthreads, err);
	if (rc < 0)
		return rc;
	nth = capy_pool_size(pool);
	c.errs = calloc((size_t)nth, sizeof(*c.errs));
	c.bad = calloc((size_t)nth, sizeof(*c.bad));
	if (!c.errs || !c.bad) {
		free(c.errs);
		free(c.bad);
		capy_pool_free(pool);
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	}
	capy_pool_run(pool, verify_worker, &c);
	capy_pool_free(pool);
	rc = 0;
	/* Report the damaged region that comes first in the table, whichever thread saw it. */
	size_t best = SIZE_MAX;
	for (int t = 0; t < nth; t++) {
		if (c.errs[t].code && (c.bad[t] < best || (best == SIZE_MAX && !rc))) {
			best = c.bad[t];
			rc = c.errs[t].code;
			if (err)
				*err = c.errs[t];
		}
	}
	free(c.errs);
	free(c.bad);
	return rc;
}

bool capy_artifact_layout_only(const struct capy_artifact *a)
{
	const cJSON *v = a->provenance ? cJSON_GetObjectItemCaseSensitive(a->provenance, "layout_only") : NULL;

	return cJSON_IsTrue(v);
}
