/* checkpoint.c - a Hugging Face checkpoint directory: config, quantization config and
 * the tensors of all its safetensors files (single file or sharded with an index). */
#include "ckpt.h"
#include "../util/file.h"
#include "../util/json.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#define CONFIG_MAX (64u << 20)

static int cmp_name(const void *a, const void *b)
{
	return strcmp(((const struct capy_st_tensor *)a)->name, ((const struct capy_st_tensor *)b)->name);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int read_json(const char *dir, const char *name, bool required, cJSON **out,
		     struct capy_err *err)
{
	char *path = capy_path_join(dir, name), *text;
	size_t len;
	int rc;

	*out = NULL;
	if (!path)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	if (!required && access(path, F_OK) < 0) {
		free(path);
		return 0;
	}
	rc = capy_read_file(path, CONFIG_MAX, &text, &len, err);
	if (rc == 0) {
		char what[4200];
		snprintf(what, sizeof(what), "'%s'", path);
		rc = capy_json_parse(text, len, what, out, err);
		free(text);
	}
	free(path);
	return rc;
}

static int add_file(struct capy_ckpt *ck, const char *name, struct capy_err *err)
{
	struct capy_ckpt_file *f;
	struct stat st;
	void *p = realloc(ck->files, (ck->nfiles + 1) * sizeof(*ck->files));

	if (!p)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	ck->files = p;
	f = &ck->files[ck->nfiles];
	memset(f, 0, sizeof(*f));
	f->fd = -1;
	f->name = strdup(name);
	f->path = capy_path_join(ck->dir, name);
	ck->nfiles++;
	if (!f->name || !f->path)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	f->fd = open(f->path, O_RDONLY | O_CLOEXEC);
	if (f->fd < 0)
		return capy_err_errno(err, errno, "cannot open '%s'", f->path);
	if (fstat(f->fd, &st) < 0)
		return capy_err_errno(err, errno, "cannot stat '%s'", f->path);
	if (!S_ISREG(st.st_mode))
		return capy_err_set(err, CAPY_EIO, "'%s' is not a regular file", f->path);
	f->size = (uint64_t)st.st_size;
	return 0;
}

/* The shard names listed by the index, in sorted order, without duplicates. */
static int index_files(struct capy_ckpt *ck, const cJSON *index, const char *ipath, struct capy_err *err)
{
	const cJSON *map = cJSON_GetObjectItemCaseSensitive(index, "weight_map"), *e;
	char **names;
	size_t n = 0;
	int rc = 0;

	if (!cJSON_IsObject(map))
		return capy_err_set(err, CAPY_EFORMAT, "'%s' has no weight_map object", ipath);
	names = calloc((size_t)cJSON_GetArraySize(map) + 1, sizeof(*names));
	if (!names)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	cJSON_ArrayForEach(e, map) {
		if (!cJSON_IsString(e)) {
			free(names);
			return capy_err_set(err, CAPY_EFORMAT, "'%s': weight_map entry '%s' is not a file name",
					    ipath, e->string);
		}
		if (strchr(e->valuestring, '/') || !strcmp(e->valuestring, "..")) {
			free(names);
			return capy_err_set(err, CAPY_EFORMAT, "'%s': weight_map entry '%s' names '%s' outside the directory",
					    ipath, e->string, e->valuestring);
		}
		names[n++] = e->valuestring;
	}
	qsort(names, n, sizeof(*names), cmp_str);
	for (size_t i = 0; i < n && rc == 0; i++)
		if (i == 0 || strcmp(names[i], names[i - 1]))
			rc = add_file(ck, names[i], err);
	free(names);
	return rc;
}

static int dir_files(struct capy_ckpt *ck, struct capy_err *err)
{
	DIR *d = opendir(ck->dir);
	struct dirent *de;
	char **names = NULL;
	size_t n = 0;
	int rc = 0;

	if (!d)
		return capy_err_errno(err, errno, "cannot open directory '%s'", ck->dir);
	while ((de = readdir(d))) {
		size_t len = strlen(de->d_name);
		char **p;
		if (len < 12 || strcmp(de->d_name + len - 12, ".safetensors") || de->d_name[0] == '.')
			continue;
		p = realloc(names, (n + 1) * sizeof(*names));
		if (!p || !(p[n] = strdup(de->d_name))) {
			names = p ? p : names;
			rc = capy_err_set(err, CAPY_ENOMEM, "out of memory");
			break;
		}
		names = p;
		n++;
	}
	closedir(d);
	if (rc == 0 && n == 0)
		rc = capy_err_set(err, CAPY_EFORMAT, "'%s' has no *.safetensors files", ck->dir);
	if (names)
		qsort(names, n, sizeof(*names), cmp_str);
	for (size_t i = 0; i < n; i++) {
		if (rc == 0)
			rc = add_file(ck, names[i], err);
		free(names[i]);
	}
	free(names);
	return rc;
}

static int load_quant(struct capy_ckpt *ck, struct capy_err *err)
{
	cJSON *hq;
	int rc = read_json(ck->dir, "hf_quant_config.json", false, &hq, err);

	if (rc < 0)
		return rc;
	if (hq) {
		cJSON *q = cJSON_DetachItemFromObjectCaseSensitive(hq, "quantization");
		cJSON_Delete(hq);
		if (!cJSON_IsObject(q)) {
			cJSON_Delete(q);
			return capy_err_set(err, CAPY_EFORMAT,
					    "'%s/hf_quant_config.json' has no quantization object", ck->dir);
		}
		ck->quant = q;
		ck->quant_source = strdup("hf_quant_config.json");
		return 0;
	}
	const cJSON *qc = cJSON_GetObjectItemCaseSensitive(ck->config, "quantization_config");
	if (cJSON_IsObject(qc)) {
		ck->quant = cJSON_Duplicate(qc, 1);
		ck->quant_source = strdup("config.json quantization_config");
	}
	return 0;
}

static int check_index(struct capy_ckpt *ck, const cJSON *index, const char *ipath, struct capy_err *err)
{
	const cJSON *map = cJSON_GetObjectItemCaseSensitive(index, "weight_map"), *e;

	cJSON_ArrayForEach(e, map) {
		const struct capy_st_tensor *t = capy_ckpt_find(ck, e->string);
		if (!t)
			return capy_err_set(err, CAPY_EFORMAT, "'%s' lists tensor '%s' in '%s', which has no such tensor",
					    ipath, e->string, e->valuestring);
		if (strcmp(ck->files[t->file].name, e->valuestring))
			return capy_err_set(err, CAPY_EFORMAT, "'%s' lists tensor '%s' in '%s', but it is in '%s'",
					    ipath, e->string, e->valuestring, ck->files[t->file].name);
	}
	for (size_t i = 0; i < ck->ntensors; i++)
		if (!cJSON_GetObjectItemCaseSensitive(map, ck->tensors[i].name))
			return capy_err_set(err, CAPY_EFORMAT, "tensor '%s' in '%s' is missing from '%s'",
					    ck->tensors[i].name, ck->files[ck->tensors[i].file].path, ipath);
	return 0;
}

int capy_ckpt_open(struct capy_ckpt **out, const char *dir, struct capy_err *err)
{
	struct capy_ckpt *ck = calloc(1, sizeof(*ck));
	cJSON *index = NULL;
	char *ipath = NULL;
	const cJSON *mt, *tc;
	struct stat st;
	size_t total = 0, k = 0;
	int rc;

	if (!ck)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	ck->dir = strdup(dir);
	if (!ck->dir) {
		rc = capy_err_set(err, CAPY_ENOMEM, "out of memory");
		goto fail;
	}
	if (stat(dir, &st) < 0) {
		rc = capy_err_errno(err, errno, "cannot open checkpoint directory '%s'", dir);
		goto fail;
	}
	if (!S_ISDIR(st.st_mode)) {
		rc = capy_err_set(err, CAPY_EIO, "'%s' is not a directory", dir);
		goto fail;
	}
	if ((rc = read_json(dir, "config.json", true, &ck->config, err)) < 0)
		goto fail;
	if (!cJSON_IsObject(ck->config)) {
		rc = capy_err_set(err, CAPY_EFORMAT, "'%s/config.json' is not a JSON object", dir);
		goto fail;
	}
	mt = cJSON_GetObjectItemCaseSensitive(ck->config, "model_type");
	if (!cJSON_IsString(mt)) {
		rc = capy_err_set(err, CAPY_EFORMAT, "'%s/config.json' has no model_type", dir);
		goto fail;
	}
	ck->family = mt->valuestring;
	tc = cJSON_GetObjectItemCaseSensitive(ck->config, "text_config");
	ck->text = cJSON_IsObject(tc) ? tc : ck->config;
	if ((rc = load_quant(ck, err)) < 0)
		goto fail;

	if ((rc = read_json(dir, "model.safetensors.index.json", false, &index, err)) < 0)
		goto fail;
	ipath = capy_path_join(dir, "model.safetensors.index.json");
	rc = index ? index_files(ck, index, ipath, err) : dir_files(ck, err);
	if (rc < 0)
		goto fail;

	ck->metadata = calloc(ck->nfiles + 1, sizeof(*ck->metadata));
	if (!ck->metadata) {
		rc = capy_err_set(err, CAPY_ENOMEM, "out of memory");
		goto fail;
	}
	struct capy_st_header *hdrs = calloc(ck->nfiles + 1, sizeof(*hdrs));
	if (!hdrs) {
		rc = capy_err_set(err, CAPY_ENOMEM, "out of memory");
		goto fail;
	}
	for (size_t i = 0; i < ck->nfiles; i++) {
		rc = capy_st_read_header(ck->files[i].path, ck->files[i].fd, ck->files[i].size, &hdrs[i], err);
		if (rc < 0)
			break;
		total += hdrs[i].ntensors;
	}
	if (rc == 0) {
		ck->tensors = calloc(total + 1, sizeof(*ck->tensors));
		if (!ck->tensors)
			rc = capy_err_set(err, CAPY_ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < ck->nfiles; i++) {
		if (rc == 0) {
			for (size_t j = 0; j < hdrs[i].ntensors; j++) {
				ck->tensors[k] = hdrs[i].tensors[j];
				ck->tensors[k++].file = (int)i;
			}
			hdrs[i].ntensors = 0; /* names moved */
			ck->metadata[i] = hdrs[i].metadata;
			hdrs[i].metadata = NULL;
		}
		capy_st_header_release(&hdrs[i]);
	}
	free(hdrs);
	ck->ntensors = k;
	if (rc < 0)
		goto fail;
	qsort(ck->tensors, ck->ntensors, sizeof(*ck->tensors), cmp_name);
	for (size_t i = 1; i < ck->ntensors; i++) {
		if (!strcmp(ck->tensors[i].name, ck->tensors[i - 1].name)) {
			rc = capy_err_set(err, CAPY_EFORMAT, "tensor '%s' appears in both '%s' and '%s'",
					  ck->tensors[i].name, ck->files[ck->tensors[i - 1].file].path,
					  ck->files[ck->tensors[i].file].path);
			goto fail;
		}
	}
	if (index && (rc = check_index(ck, index, ipath, err)) < 0)
		goto fail;
	cJSON_Delete(index);
	free(ipath);
	*out = ck;
	return 0;
fail:
	cJSON_Delete(index);
	free(ipath);
	capy_ckpt_close(ck);
	return rc;
}

void capy_ckpt_close(struct capy_ckpt *ck)
{
	if (!ck)
		return;
	for (size_t i = 0; i < ck->nfiles; i++) {
		if (ck->files[i].fd >= 0)
			close(ck->files[i].fd);
		free(ck->files[i].name);
		free(ck->files[i].path);
		if (ck->metadata)
			cJSON_Delete(ck->metadata[i]);
	}
	for (size_t i = 0; i < ck->ntensors; i++)
		free(ck->tensors[i].name);
	free(ck->files);
	free(ck->tensors);
	free(ck->metadata);
	cJSON_Delete(ck->config);
	cJSON_Delete(ck->quant);
	free(ck->quant_source);
	free(ck->dir);
	free(ck);
}

const struct capy_st_tensor *capy_ckpt_find(const struct capy_ckpt *ck, const char *name)
{
	size_t lo = 0, hi = ck->ntensors;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int c = strcmp(ck->tensors[mid].name, name);
		if (!c)
			return &ck->tensors[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

int capy_ckpt_read(const struct capy_ckpt *ck, const struct capy_st_tensor *t, uint64_t off,
		   void *buf, size_t len, struct capy_err *err)
{
	const struct capy_ckpt_file *f = &ck->files[t->file];

	if (off + len > t->bytes)
		CAPY_BUG("read past tensor '%s'", t->name);
	return capy_pread_full(f->fd, buf, len, t->offset + off, f->path, err);
}
