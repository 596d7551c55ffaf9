/* plan.c - building blocks of a conversion plan and its resolution against a
 * checkpoint: presence, shapes, dtypes, NVFP4 scales, the quantization config. */
#include "convert-impl.h"
#include "../quant/floats.h"
#include "../util/json.h"

#include <fnmatch.h>
#include <math.h>

void shape_str(char *buf, size_t n, int ndim, const uint64_t *shape)
{
	size_t len = 0;

	len += (size_t)snprintf(buf + len, n - len, "[");
	for (int i = 0; i < ndim && len < n; i++)
		len += (size_t)snprintf(buf + len, n - len, i ? ", %" PRIu64 : "%" PRIu64, shape[i]);
	if (len < n)
		snprintf(buf + len, n - len, "]");
}

void plan_release(struct plan *p)
{
	for (size_t i = 0; i < p->nsrcs; i++)
		free(p->srcs[i].name);
	for (size_t i = 0; i < p->nouts; i++) {
		free(p->outs[i].name);
		free(p->outs[i].bands);
		free(p->outs[i].source_note);
	}
	for (size_t i = 0; i < p->nstacks; i++)
		free(p->stacks[i].name);
	free(p->srcs);
	free(p->outs);
	free(p->stacks);
	cJSON_Delete(p->transforms);
	memset(p, 0, sizeof(*p));
}

#define BAD(...) capy_err_set(err, CAPY_EFORMAT, __VA_ARGS__)

static bool is_visual(const char *name)
{
	return !strncmp(name, "model.visual.", 13);
}

void plan_note(struct plan *p, const char *what)
{
	const cJSON *it;

	cJSON_ArrayForEach(it, p->transforms)
		if (!strcmp(it->valuestring, what))
			return;
	cJSON_AddItemToArray(p->transforms, cJSON_CreateString(what));
}

static int read_scalar(const struct plan *p, const struct capy_st_tensor *t, float *out,
		       struct capy_err *err)
{
	uint64_t n = 1;
	int rc;

	for (int i = 0; i < t->ndim; i++)
		n *= t->shape[i];
	if (t->dtype != CAPY_ST_F32 || n != 1)
		return BAD("tensor '%s' must be a float32 scalar, it is %s with %" PRIu64 " elements",
			   t->name, capy_st_dtype_name(t->dtype), n);
	rc = capy_ckpt_read(p->ck, t, 0, out, 4, err);
	if (rc < 0)
		return rc;
	if (!isfinite(*out) || !(*out > 0))
		return BAD("tensor '%s' in '%s' at offset %" PRIu64 " is %g; an NVFP4 scale must be finite and > 0",
			   t->name, p->ck->files[t->file].path, t->offset, (double)*out);
	return 0;
}

static const struct capy_st_tensor *use(const struct plan *p, bool *used, const char *name)
{
	const struct capy_st_tensor *t = capy_ckpt_find(p->ck, name);

	if (t)
		used[t - p->ck->tensors] = true;
	return t;
}

static int resolve_linear(struct plan *p, struct plan_src *s, bool *used, struct capy_err *err)
{
	char base[1024], nm[1100], want[96], have[96];
	uint64_t n = s->shape[0], k = s->shape[1];
	size_t len = strlen(s->name);
	int rc, dt;

	if (s->w->dtype != CAPY_ST_U8) {
		dt = capy_st_dtype_to_capy(s->w->dtype);
		if (dt != CAPY_DT_BF16 && dt != CAPY_DT_F16 && dt != CAPY_DT_F32)
			return capy_err_set(err, CAPY_EUNSUPPORTED,
					    "tensor '%s' in '%s' is %s; weights must be BF16, F16, F32 or NVFP4",
					    s->name, p->ck->files[s->w->file].path, capy_st_dtype_name(s->w->dtype));
		if (s->w->ndim != 2 || s->w->shape[0] != n || s->w->shape[1] != k) {
			shape_str(want, sizeof(want), 2, s->shape);
			shape_str(have, sizeof(have), s->w->ndim, s->w->shape);
			return BAD("tensor '%s' in '%s' has shape %s, expected %s", s->name,
				   p->ck->files[s->w->file].path, have, want);
		}
		s->dtype = (enum capy_dtype)dt;
		return 0;
	}
	/* NVIDIA ModelOpt NVFP4: X.weight (U8 codes) with X.weight_scale, X.weight_scale_2, X.input_scale. */
	if (len < 7 || strcmp(s->name + len - 7, ".weight") || len - 7 >= sizeof(base))
		return BAD("tensor '%s' is U8 but not an NVFP4 weight", s->name);
	memcpy(base, s->name, len - 7);
	base[len - 7] = 0;
	if (k % 16)
		return BAD("tensor '%s' is NVFP4 but its input dimension %" PRIu64 " is not a multiple of 16",
			   s->name, k);
	if (s->w->ndim != 2 || s->w->shape[0] != n || s->w->shape[1] != k / 2) {
		uint64_t w2[2] = { n, k / 2 };
		shape_str(want, sizeof(want), 2, w2);
		shape_str(have, sizeof(have), s->w->ndim, s->w->shape);
		return BAD("NVFP4 tensor '%s' in '%s' has shape %s, expected %s (packed codes of [%" PRIu64
			   ", %" PRIu64 "])", s->name, p->ck->files[s->w->file].path, have, want, n, k);
	}
	snprintf(nm, sizeof(nm), "%s.weight_scale", base);
	s->scale = use(p, used, nm);
	if (!s->scale)
		return BAD("tensor '%s' is U8 (NVFP4 codes) but '%s' is missing", s->name, nm);
	if (s->scale->dtype != CAPY_ST_F8_E4M3 || s->scale->ndim != 2 || s->scale->shape[0] != n ||
	    s->scale->shape[1] != k / 16) {
		uint64_t w2[2] = { n, k / 16 };
		shape_str(want, sizeof(want), 2, w2);
		shape_str(have, sizeof(have), s->scale->ndim, s->scale->shape);
		return BAD("tensor '%s' is %s %s, expected F8_E4M3 %s", nm,
			   capy_st_dtype_name(s->scale->dtype), have, want);
	}
	snprintf(nm, sizeof(nm), "%s.weight_scale_2", base);
	s->scale2 = use(p, used, nm);
	if (!s->scale2)
		return BAD("tensor '%s' is U8 (NVFP4 codes) but '%s' is missing", s->name, nm);
	if ((rc = read_scalar(p, s->scale2, &s->scale2_v, err)) < 0)
		return rc;
	snprintf(nm, sizeof(nm), "%s.input_scale", base);
	s->iscale = use(p, used, nm);
	if (s->iscale && (rc = read_scalar(p, s->iscale, &s->iscale_v, err)) < 0)
		return rc;
	s->nvfp4 = true;
	s->dtype = CAPY_DT_NVFP4;
	return 0;
}

static int resolve_src(struct plan *p, struct plan_src *s, bool *used, struct capy_err *err)
{
	char want[96], have[96];
	int dt;

	s->w = use(p, used, s->name);
	if (!s->w) {
		if (s->optional)
			return 0;
		return BAD("tensor '%s' is missing from '%s' (a %s model with this config.json needs it)",
			   s->name, p->ck->dir, capy_family_name(p->cfg.family));
	}
	s->present = true;
	if (s->kind == SRC_LINEAR)
		return resolve_linear(p, s, used, err);
	if (s->w->dtype == CAPY_ST_U8 && s->kind == SRC_STACKED)
		return capy_err_set(err, CAPY_EUNSUPPORTED,
				    "tensor '%s' is a fused NVFP4 expert tensor; capy reads ModelOpt's per-expert layout",
				    s->name);
	dt = capy_st_dtype_to_capy(s->w->dtype);
	if (dt < 0)
		return capy_err_set(err, CAPY_EUNSUPPORTED, "tensor '%s' in '%s' has dtype %s, which capy does not store",
				    s->name, p->ck->files[s->w->file].path, capy_st_dtype_name(s->w->dtype));
	if (s->kind == SRC_STACKED && dt != CAPY_DT_BF16 && dt != CAPY_DT_F16 && dt != CAPY_DT_F32)
		return capy_err_set(err, CAPY_EUNSUPPORTED, "tensor '%s' is %s; expert weights must be BF16, F16 or F32",
				    s->name, capy_st_dtype_name(s->w->dtype));
	s->dtype = (enum capy_dtype)dt;
	/* Norms, conv kernels, A_log and the like are floats; only the PLE hash buffers are integers. */
	if (s->ndim >= 0 && !s->expect_i64 && dt != CAPY_DT_BF16 && dt != CAPY_DT_F16 && dt != CAPY_DT_F32)
		return capy_err_set(err, CAPY_EFORMAT, "tensor '%s' in '%s' is %s; it must be BF16, F16 or F32",
				    s->name, p->ck->files[s->w->file].path, capy_st_dtype_name(s->w->dtype));
	if (s->ndim >= 0) {
		bool ok = s->w->ndim == s->ndim;
		for (int i = 0; ok && i < s->ndim; i++)
			ok = s->w->shape[i] == s->shape[i];
		/* A scalar may be stored as [] or [1]. */
		if (!ok && s->ndim == 0 && s->w->ndim == 1 && s->w->shape[0] == 1)
			ok = true;
		if (!ok) {
			shape_str(want, sizeof(want), s->ndim, s->shape);
			shape_str(have, sizeof(have), s->w->ndim, s->w->shape);
			return BAD("tensor '%s' in '%s' has shape %s, expected %s", s->name,
				   p->ck->files[s->w->file].path, have, want);
		}
	} else {
		s->ndim = s->w->ndim;
		memcpy(s->shape, s->w->shape, sizeof(s->shape[0]) * (size_t)s->ndim);
	}
	if (s->expect_i64) {
		uint64_t n = s->shape[0];
		int64_t v[64];
		int rc;
		if (s->dtype != CAPY_DT_I64 || n > 64)
			return BAD("tensor '%s' must be I64 with at most 64 values", s->name);
		if ((rc = capy_ckpt_read(p->ck, s->w, 0, v, n * 8, err)) < 0)
			return rc;
		for (uint64_t i = 0; i < n; i++)
			if (v[i] != s->expect_i64[i])
				return BAD("tensor '%s' holds %" PRId64 " at index %" PRIu64 "; config.json implies %" PRId64,
					   s->name, v[i], i, s->expect_i64[i]);
	}
	return 0;
}

static const char *quant_list(const cJSON *q, const char **key)
{
	*key = "exclude_modules";
	if (cJSON_GetObjectItemCaseSensitive(q, *key))
		return *key;
	*key = "ignore";
	return cJSON_GetObjectItemCaseSensitive(q, *key) ? *key : NULL;
}

/* Cross-check NVFP4 tensors with hf_quant_config.json / quantization_config. */
static int check_quant(struct plan *p, struct capy_err *err)
{
	const cJSON *q = p->ck->quant, *algo, *gs, *list, *pat;
	const char *src = p->ck->quant_source, *key;
	const struct plan_src *first = NULL;
	uint64_t group;

	for (size_t i = 0; i < p->nsrcs && !first; i++)
		if (p->srcs[i].nvfp4)
			first = &p->srcs[i];
	if (!q) {
		if (first)
			return BAD("tensor '%s' is NVFP4 but '%s' has no hf_quant_config.json or quantization_config",
				   first->name, p->ck->dir);
		return 0;
	}
	algo = cJSON_GetObjectItemCaseSensitive(q, "quant_algo");
	if (!cJSON_IsString(algo))
		return BAD("'%s' (%s) has no quant_algo", p->ck->dir, src);
	if (!strstr(algo->valuestring, "NVFP4"))
		return capy_err_set(err, CAPY_EUNSUPPORTED, "%s: quant_algo '%s' is not supported (NVFP4 is)",
				    src, algo->valuestring);
	if (!first)
		return BAD("%s says quant_algo %s, but no tensor in '%s' is NVFP4", src, algo->valuestring,
			   p->ck->dir);
	gs = cJSON_GetObjectItemCaseSensitive(q, "group_size");
	if (gs && (capy_json_u64(gs, &group) < 0 || group != 16))
		return capy_err_set(err, CAPY_EUNSUPPORTED, "%s: group_size must be 16 for NVFP4", src);
	if (!quant_list(q, &key))
		return 0;
	list = cJSON_GetObjectItemCaseSensitive(q, key);
	if (!cJSON_IsArray(list))
		return BAD("%s: %s is not a list", src, key);
	for (size_t i = 0; i < p->nsrcs; i++) {
		const struct plan_src *s = &p->srcs[i];
		char module[1024];
		size_t len;
		if (!s->nvfp4)
			continue;
		len = strlen(s->name) - 7; /* ".weight" */
		snprintf(module, sizeof(module), "%.*s", (int)len, s->name);
		cJSON_ArrayForEach(pat, list) {
			if (cJSON_IsString(pat) && !fnmatch(pat->valuestring, module, 0))
				return BAD("tensor '%s' is NVFP4, but %s excludes '%s' from quantization (%s entry '%s')",
					   s->name, src, module, key, pat->valuestring);
		}
	}
	return 0;
}

static int resolve_out(struct plan *p, struct plan_out *o, struct capy_err *err)
{
	const struct plan_src *s0 = &p->srcs[o->bands[0].src];
	int part_src[CAPY_MAX_PARTS];

	o->dtype = s0->dtype;
	for (uint32_t b = 0; b < o->per_slice * o->nslices; b++) {
		const struct plan_src *s = &p->srcs[o->bands[b].src];
		if (s->dtype != s0->dtype)
			return BAD("'%s' would fuse '%s' (%s) with '%s' (%s); they must have the same dtype",
				   o->name, s0->name, capy_dtype_name(s0->dtype), s->name, capy_dtype_name(s->dtype));
	}
	if (o->quantize && p->quantize_experts && o->dtype != CAPY_DT_NVFP4)
		o->dtype = CAPY_DT_NVFP4;
	if (o->dtype != CAPY_DT_NVFP4)
		return 0;
	/* Parts: bands of slice 0 grouped by their part number, in order. */
	o->nparts = 0;
	for (uint32_t b = 0; b < o->per_slice; b++) {
		const struct band *bd = &o->bands[b];
		if (bd->part == o->nparts) {
			if (o->nparts == CAPY_MAX_PARTS)
				return BAD("'%s' has more than %d parts", o->name, CAPY_MAX_PARTS);
			part_src[o->nparts] = bd->src;
			o->parts[o->nparts++] = 0;
		} else if (bd->part != o->nparts - 1) {
			CAPY_BUG("'%s': band parts out of order", o->name);
		} else if (s0->nvfp4 && bd->src != part_src[bd->part]) {
			return BAD("'%s': one NVFP4 part would mix '%s' and '%s'", o->name,
				   p->srcs[part_src[bd->part]].name, p->srcs[bd->src].name);
		}
		o->parts[bd->part] += bd->rows;
	}
	return 0;
}

int plan_resolve(struct plan *p, struct capy_err *err)
{
	bool *used = calloc(p->ck->ntensors + 1, sizeof(*used));
	int rc = 0;

	if (!used)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	for (size_t i = 0; i < p->nsrcs && rc == 0; i++)
		rc = resolve_src(p, &p->srcs[i], used, err);
	for (size_t i = 0; i < p->ck->ntensors && rc == 0; i++) {
		const struct capy_st_tensor *t = &p->ck->tensors[i];
		if (used[i] || (!p->vision && is_visual(t->name)))
			continue;
		if (is_nvfp4_aux(t->name))
			rc = BAD("tensor '%s' in '%s' belongs to no NVFP4 weight this model needs", t->name,
				 p->ck->files[t->file].path);
		else
			rc = BAD("unexpected tensor '%s' in '%s' (not part of a %s model with this config.json)",
				 t->name, p->ck->files[t->file].path, capy_family_name(p->cfg.family));
	}
	free(used);
	if (rc == 0)
		rc = check_quant(p, err);
	for (size_t i = 0; i < p->nouts && rc == 0; i++)
		rc = resolve_out(p, &p->outs[i], err);
	return rc;
}

void plan_resolve_synthetic(struct plan *p)
{
	for (size_t i = 0; i < p->nouts; i++) {
		struct plan_out *o = &p->outs[i];
		const struct plan_src *s = &p->srcs[o->bands[0].src];
		o->dtype = s->kind == SRC_PLAIN && s->expect_i64 ? CAPY_DT_I64 : CAPY_DT_BF16;
		if (o->quantize && p->quantize_experts) {
			o->dtype = CAPY_DT_NVFP4;
			o->nparts = 0;
			for (uint32_t b = 0; b < o->per_slice; b++) {
				if (o->bands[b].part == o->nparts)
					o->parts[o->nparts++] = 0;
				o->parts[o->bands[b].part] += o->bands[b].rows;
			}
		}
	}
}
