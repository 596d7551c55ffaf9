/* convert.c - running a conversion plan: lay out the artifact, then write every
 * file, tensor and expert stack from a pool of threads, each item streamed in
 * bounded chunks, hashed as it is written.
 *
 * Work items are taken largest first from a shared counter, so the threads stay
 * busy; an item's bytes are produced in order by one thread, which is what lets
 * its checksum be computed while streaming. Memory per thread: one I/O chunk,
 * plus, when quantizing, one expert matrix in float32.
 */
#include "convert-impl.h"
#include "../quant/floats.h"
#include "../quant/nvfp4.h"
#include "../util/file.h"
#include "../util/hash.h"
#include "../util/json.h"
#include "../util/thread.h"

#include <libgen.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#define CHUNK (8u << 20)

/* Files kept byte-for-byte when the checkpoint has them. */
static const char *const kept_files[] = {
	"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
	"chat_template.jinja", "chat_template.json", "special_tokens_map.json", "hf_quant_config.json",
	"preprocessor_config.json", "video_preprocessor_config.json",
};

enum job_kind { JOB_FILE, JOB_TENSOR, JOB_STACK };

struct job {
	enum job_kind kind;
	int idx; /* file index in run.files, output index, or stack index */
	uint64_t bytes;
};

struct run {
	struct plan *p;
	struct capy_artifact_writer *w;
	const struct capy_convert_opts *o;
	const struct synth_tables *synth; /* non-NULL for synthetic artifacts */
	char **file_paths;
	const char **file_names; /* as stored in the artifact */
	int *file_aw;
	size_t nfiles;
	struct job *jobs;
	size_t njobs;
	_Atomic size_t next;
	_Atomic int failed;
	pthread_mutex_t mu;
	struct capy_err err;
	int rc;
};

struct sink {
	struct run *r;
	uint64_t off;
	struct capy_hasher *h;
	struct capy_err *err;
};

struct worker {
	uint8_t *buf;     /* CHUNK bytes */
	float *fbuf;      /* quantization: a slice in float32 */
	uint8_t *qbuf;    /* quantization: codes and scales of a slice */
	size_t fcap, qcap;
	struct capy_hasher *h[4];
	struct capy_err err;
};

static const uint8_t zeros[4096];

static int sink_write(struct sink *s, const void *buf, size_t len)
{
	int rc;

	if (!len)
		return 0;
	if (s->h)
		capy_hasher_update(s->h, buf, len);
	rc = capy_aw_pwrite(s->r->w, s->off, buf, len, s->err);
	if (rc < 0)
		return rc;
	s->off += len;
	if (s->r->o->progress)
		s->r->o->progress(s->r->o->progress_ud, len);
	return 0;
}

static int sink_pad(struct sink *s, uint64_t target)
{
	while (s->off < target) {
		size_t n = (size_t)CAPY_MIN(target - s->off, sizeof(zeros));
		int rc = sink_write(s, zeros, n);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* --- reading source rows ------------------------------------------------------ */

static uint64_t src_row_bytes(const struct plan_src *s, const struct capy_st_tensor *t)
{
	if (s->kind == SRC_STACKED)
		return t->shape[2] * (t->bytes / (t->shape[0] * t->shape[1] * t->shape[2]));
	if (t->ndim == 0)
		return t->bytes;
	return t->shape[0] ? t->bytes / t->shape[0] : 0;
}

static uint64_t src_slice_bytes(const struct plan_src *s, const struct capy_st_tensor *t)
{
	return s->kind == SRC_STACKED ? t->bytes / t->shape[0] : 0;
}

/* Copy rows [b->row0, +rows) of tensor t (the weight, or an NVFP4 weight's scales). */
static int copy_rows(struct sink *s, struct worker *wk, const struct plan_src *src,
		     const struct capy_st_tensor *t, uint64_t row_bytes, const struct band *b, bool scales)
{
	uint64_t off = b->src_slice * src_slice_bytes(src, t) + b->row0 * row_bytes;
	uint64_t len = b->rows * row_bytes;
	const struct capy_ckpt *ck = s->r->p->ck;
	int rc;

	while (len) {
		size_t n = (size_t)CAPY_MIN(len, CHUNK);
		if ((rc = capy_ckpt_read(ck, t, off, wk->buf, n, s->err)) < 0)
			return rc;
		if (scales) {
			for (size_t i = 0; i < n; i++)
				if (capy_e4m3_is_nan(wk->buf[i]))
					return capy_err_set(s->err, CAPY_EFORMAT,
							    "tensor '%s' in '%s' has a NaN block scale at file offset %" PRIu64,
							    t->name, ck->files[t->file].path, t->offset + off + i);
		}
		if ((rc = sink_write(s, wk->buf, n)) < 0)
			return rc;
		off += n;
		len -= n;
	}
	return 0;
}

static int write_plain_slice(struct sink *s, struct worker *wk, const struct plan_out *o, uint64_t slice)
{
	const struct plan *p = s->r->p;

	for (uint32_t i = 0; i < o->per_slice; i++) {
		const struct band *b = &o->bands[slice * o->per_slice + i];
		const struct plan_src *src = &p->srcs[b->src];
		int rc = copy_rows(s, wk, src, src->w, src_row_bytes(src, src->w), b, false);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static void put_f32(uint8_t *dst, float v)
{
	uint32_t u = capy_f32_bits(v);
	for (int i = 0; i < 4; i++)
		dst[i] = (uint8_t)(u >> (8 * i));
}

static int write_globals(struct sink *s, const struct capy_nvfp4_layout *l, const float *s2,
			 const float *is)
{
	uint8_t g[8 * CAPY_MAX_PARTS];
	int rc;

	for (uint32_t i = 0; i < l->parts; i++) {
		put_f32(g + 4 * i, s2[i]);
		put_f32(g + 4 * (l->parts + i), is[i]);
	}
	if ((rc = sink_write(s, g, 8 * l->parts)) < 0)
		return rc;
	return 0;
}

/* An NVFP4 slice from ModelOpt NVFP4 sources: codes, scales, then each part's scalars. */
static int write_nvfp4_slice(struct sink *s, struct worker *wk, const struct plan_out *o,
			     uint64_t slice, const struct capy_nvfp4_layout *l)
{
	const struct plan *p = s->r->p;
	uint64_t start = s->off;
	float s2[CAPY_MAX_PARTS], is[CAPY_MAX_PARTS];
	int rc;

	for (int pass = 0; pass < 2; pass++) {
		for (uint32_t i = 0; i < o->per_slice; i++) {
			const struct band *b = &o->bands[slice * o->per_slice + i];
			const struct plan_src *src = &p->srcs[b->src];
			rc = pass == 0 ? copy_rows(s, wk, src, src->w, l->k / 2, b, false)
				       : copy_rows(s, wk, src, src->scale, l->k / 16, b, true);
			if (rc < 0)
				return rc;
			s2[b->part] = src->scale2_v;
			is[b->part] = src->iscale_v;
		}
		if ((rc = sink_pad(s, start + (pass == 0 ? l->scales_off : l->globals_off))) < 0)
			return rc;
	}
	if ((rc = write_globals(s, l, s2, is)) < 0)
		return rc;
	return sink_pad(s, start + l->slice_bytes);
}

static int grow_buf(void **p, size_t *cap, size_t need, struct capy_err *err)
{
	void *q;

	if (need <= *cap)
		return 0;
	q = realloc(*p, need);
	if (!q)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory (%zu bytes for quantization)", need);
	*p = q;
	*cap = need;
	return 0;
}

/* A BF16/F16/F32 slice quantized to NVFP4 with ModelOpt's rule, one weight_scale_2 per part
 * (per source matrix, as ModelOpt would have quantized them separately). */
static int write_quantized_slice(struct sink *s, struct worker *wk, const struct plan_out *o,
				 uint64_t slice, const struct capy_nvfp4_layout *l)
{
	const struct plan *p = s->r->p;
	uint64_t n = l->n, k = l->k, row = 0, start = s->off;
	float s2[CAPY_MAX_PARTS], is[CAPY_MAX_PARTS] = { 0 };
	uint8_t *codes, *scales;
	int rc;

	if ((rc = grow_buf((void **)&wk->fbuf, &wk->fcap, n * k * sizeof(float), s->err)) < 0 ||
	    (rc = grow_buf((void **)&wk->qbuf, &wk->qcap, n * k / 2 + n * k / 16, s->err)) < 0)
		return rc;
	codes = wk->qbuf;
	scales = wk->qbuf + n * k / 2;
	for (uint32_t i = 0; i < o->per_slice; i++) {
		const struct band *b = &o->bands[slice * o->per_slice + i];
		const struct plan_src *src = &p->srcs[b->src];
		uint64_t rb = src_row_bytes(src, src->w), es = capy_dtype_size(src->dtype);
		uint64_t off = b->src_slice * src_slice_bytes(src, src->w) + b->row0 * rb;
		for (uint64_t r = 0; r < b->rows;) {
			uint64_t nr = CAPY_MIN(b->rows - r, CAPY_MAX(1, CHUNK / rb));
			if ((rc = capy_ckpt_read(p->ck, src->w, off + r * rb, wk->buf, nr * rb, s->err)) < 0)
				return rc;
			if (capy_floats_to_f32(wk->buf, src->dtype, nr * rb / es, wk->fbuf + (row + r) * k) < 0)
				return capy_err_set(s->err, CAPY_EFORMAT, "tensor '%s': %s values cannot be quantized to NVFP4",
						    src->name, capy_dtype_name(src->dtype));
			r += nr;
		}
		row += b->rows;
	}
	row = 0;
	for (uint32_t part = 0; part < o->nparts; part++) {
		uint64_t rows = o->parts[part];
		float amax = 0;
		for (uint64_t i = row * k; i < (row + rows) * k; i++) {
			float a = fabsf(wk->fbuf[i]);
			if (!isfinite(a))
				return capy_err_set(s->err, CAPY_EFORMAT, "'%s' (expert %" PRIu64 ") holds %g at row %" PRIu64
						    ", which cannot be quantized", o->name, slice, (double)wk->fbuf[i], i / k);
			amax = fmaxf(amax, a);
		}
		s2[part] = capy_nvfp4_weight_scale2(amax);
		capy_nvfp4_quantize(wk->fbuf + row * k, rows, k, s2[part], codes + row * k / 2, scales + row * k / 16);
		row += rows;
	}
	if ((rc = sink_write(s, codes, n * k / 2)) < 0 || (rc = sink_pad(s, start + l->scales_off)) < 0 ||
	    (rc = sink_write(s, scales, n * k / 16)) < 0 || (rc = sink_pad(s, start + l->globals_off)) < 0 ||
	    (rc = write_globals(s, l, s2, is)) < 0)
		return rc;
	return sink_pad(s, start + l->slice_bytes);
}

static int write_synthetic_slice(struct sink *s, struct worker *wk, const struct plan_out *o,
				 uint64_t slice, const struct capy_tensor_info *ti)
{
	/* A plan slice is one expert of a stack, or the whole of any other tensor. */
	uint64_t bytes = o->stack >= 0 ? ti->slice_bytes : ti->bytes;

	for (uint64_t off = 0; off < bytes; off += CHUNK) {
		uint64_t n = CAPY_MIN(CHUNK, bytes - off);
		int rc;
		synth_fill(s->r->synth, s->r->p, o, slice, ti, wk->buf, off, n);
		if ((rc = sink_write(s, wk->buf, n)) < 0)
			return rc;
	}
	return 0;
}

static int write_slice(struct sink *s, struct worker *wk, const struct plan_out *o, uint64_t slice)
{
	const struct capy_tensor_info *ti = capy_aw_tensor(s->r->w, o->aw);
	const struct plan_src *src0 = &s->r->p->srcs[o->bands[0].src];
	struct capy_nvfp4_layout l;

	if (s->r->synth)
		return write_synthetic_slice(s, wk, o, slice, ti);
	if (o->dtype != CAPY_DT_NVFP4)
		return write_plain_slice(s, wk, o, slice);
	if (capy_nvfp4_layout(o->shape[o->ndim - 2], o->shape[o->ndim - 1], o->nparts, &l) < 0)
		CAPY_BUG("'%s': bad NVFP4 layout", o->name);
	if (src0->nvfp4)
		return write_nvfp4_slice(s, wk, o, slice, &l);
	return write_quantized_slice(s, wk, o, slice, &l);
}

/* --- jobs ------------------------------------------------------------------------ */

static int run_file(struct run *r, struct worker *wk, int f)
{
	const char *path = r->file_paths[f];
	int aw = r->file_aw[f];
	struct sink s = { r, capy_aw_file_offset(r->w, aw), wk->h[0], &wk->err };
	struct capy_map m;
	int rc;

	capy_hasher_reset(wk->h[0]);
	if ((rc = capy_map_open(&m, path, &wk->err)) < 0)
		return rc;
	rc = sink_write(&s, m.data, m.size);
	capy_map_close(&m);
	if (rc == 0)
		capy_aw_set_file_xxh3(r->w, aw, capy_hasher_digest(wk->h[0]));
	return rc;
}

static int run_tensor(struct run *r, struct worker *wk, const struct plan_out *o)
{
	const struct capy_tensor_info *ti = capy_aw_tensor(r->w, o->aw);
	struct sink s = { r, ti->offset, wk->h[0], &wk->err };
	int rc;

	capy_hasher_reset(wk->h[0]);
	rc = write_slice(&s, wk, o, 0);
	if (rc < 0)
		return capy_err_prefix(&wk->err, "writing '%s'", o->name);
	capy_aw_set_tensor_xxh3(r->w, o->aw, capy_hasher_digest(wk->h[0]));
	return 0;
}

static int run_stack(struct run *r, struct worker *wk, int stack)
{
	const struct plan_out *members[4];
	int n = 0, rc;

	for (size_t i = 0; i < r->p->nouts && n < 4; i++)
		if (r->p->outs[i].stack == stack)
			members[n++] = &r->p->outs[i];
	for (int m = 0; m < n; m++)
		capy_hasher_reset(wk->h[m]);
	for (uint64_t e = 0; e < r->p->stacks[stack].count; e++) {
		for (int m = 0; m < n; m++) {
			const struct capy_tensor_info *ti = capy_aw_tensor(r->w, members[m]->aw);
			struct sink s = { r, capy_tensor_slice_offset(ti, e), wk->h[m], &wk->err };
			if ((rc = write_slice(&s, wk, members[m], e)) < 0)
				return capy_err_prefix(&wk->err, "writing expert %" PRIu64 " of '%s'", e,
						       members[m]->name);
			if (atomic_load(&r->failed))
				return CAPY_ECANCELED;
		}
	}
	for (int m = 0; m < n; m++)
		capy_aw_set_tensor_xxh3(r->w, members[m]->aw, capy_hasher_digest(wk->h[m]));
	return 0;
}

static void worker_main(void *arg, int ith, int nth)
{
	struct run *r = arg;
	struct worker wk = { 0 };
	size_t i;
	int rc = 0;

	(void)ith;
	(void)nth;
	wk.buf = malloc(CHUNK);
	for (int j = 0; j < 4; j++)
		wk.h[j] = capy_hasher_new();
	if (!wk.buf || !wk.h[0] || !wk.h[1] || !wk.h[2] || !wk.h[3])
		rc = capy_err_set(&wk.err, CAPY_ENOMEM, "out of memory");
	while (rc == 0 && !atomic_load(&r->failed) && (i = atomic_fetch_add(&r->next, 1)) < r->njobs) {
		const struct job *j = &r->jobs[i];
		if (j->kind == JOB_FILE)
			rc = run_file(r, &wk, j->idx);
		else if (j->kind == JOB_TENSOR)
			rc = run_tensor(r, &wk, &r->p->outs[j->idx]);
		else
			rc = run_stack(r, &wk, j->idx);
	}
	if (rc < 0 && rc != CAPY_ECANCELED) {
		pthread_mutex_lock(&r->mu);
		if (!atomic_load(&r->failed)) {
			r->err = wk.err;
			r->rc = rc;
			atomic_store(&r->failed, 1);
		}
		pthread_mutex_unlock(&r->mu);
	}
	free(wk.buf);
	free(wk.fbuf);
	free(wk.qbuf);
	for (int j = 0; j < 4; j++)
		capy_hasher_free(wk.h[j]);
}

static int cmp_job(const void *a, const void *b)
{
	const struct job *x = a, *y = b;
	if (x->bytes != y->bytes)
		return x->bytes > y->bytes ? -1 : 1;
	if (x->kind != y->kind)
		return x->kind < y->kind ? -1 : 1;
	return x->idx - y->idx;
}

/* --- declaring the artifact ------------------------------------------------------- */

static int declare(struct run *r, struct capy_convert_stats *st, struct capy_err *err)
{
	struct plan *p = r->p;
	int rc;

	for (size_t i = 0; i < r->nfiles; i++) {
		uint64_t size;
		rc = capy_file_size(r->file_paths[i], &size, err);
		if (rc == 0)
			rc = capy_aw_add_file(r->w, r->file_names[i], size, err);
		if (rc < 0)
			return rc;
		r->file_aw[i] = rc;
		st->files++;
		st->file_bytes += size;
	}
	for (size_t i = 0; i < p->nouts; i++) {
		struct plan_out *o = &p->outs[i];
		cJSON *srcs = cJSON_CreateArray();
		int stack = -1;
		if (!srcs)
			return capy_err_set(err, CAPY_ENOMEM, "out of memory");
		cJSON_AddItemToArray(srcs, cJSON_CreateString(o->source_note));
		if (o->stack >= 0) {
			struct plan_stack *ps = &p->stacks[o->stack];
			if (ps->aw < 0 && (ps->aw = capy_aw_add_stack(r->w, ps->name, ps->count, err)) < 0) {
				cJSON_Delete(srcs);
				return ps->aw;
			}
			stack = ps->aw;
		}
		rc = capy_aw_add_tensor(r->w, o->name, o->dtype, o->ndim, o->shape,
					o->dtype == CAPY_DT_NVFP4 ? o->nparts : 0, o->parts, stack,
					r->synth ? (cJSON_Delete(srcs), NULL) : srcs, err);
		if (rc < 0)
			return rc;
		o->aw = rc;
		st->tensors++;
		if (o->dtype == CAPY_DT_NVFP4) {
			st->nvfp4_tensors++;
			if (o->quantize && p->quantize_experts && (r->synth || !p->srcs[o->bands[0].src].nvfp4))
				st->quantized_tensors++;
		}
	}
	return 0;
}

static int make_jobs(struct run *r, struct capy_err *err)
{
	struct plan *p = r->p;
	size_t n = 0;

	r->jobs = calloc(r->nfiles + p->nouts + p->nstacks + 1, sizeof(*r->jobs));
	if (!r->jobs)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	for (size_t i = 0; i < r->nfiles; i++)
		r->jobs[n++] = (struct job){ JOB_FILE, (int)i, 0 };
	for (size_t i = 0; i < p->nouts && !r->o->layout_only; i++)
		if (p->outs[i].stack < 0)
			r->jobs[n++] = (struct job){ JOB_TENSOR, (int)i, capy_aw_tensor(r->w, p->outs[i].aw)->bytes };
	for (size_t i = 0; i < p->nstacks && !r->o->layout_only; i++) {
		uint64_t b = 0;
		for (size_t j = 0; j < p->nouts; j++)
			if (p->outs[j].stack == (int)i)
				b += capy_aw_tensor(r->w, p->outs[j].aw)->bytes;
		r->jobs[n++] = (struct job){ JOB_STACK, (int)i, b };
	}
	r->njobs = n;
	qsort(r->jobs, n, sizeof(*r->jobs), cmp_job);
	return 0;
}

static cJSON *provenance(const struct run *r, const char *source_dir)
{
	const struct plan *p = r->p;
	cJSON *pv = cJSON_CreateObject(), *src, *files, *recipe;
	char *copy = source_dir ? strdup(source_dir) : NULL;

	cJSON_AddStringToObject(pv, "converter", "capy-convert " CAPY_VERSION);
	src = cJSON_AddObjectToObject(pv, "source");
	if (copy) {
		size_t n = strlen(copy);
		while (n > 1 && copy[n - 1] == '/')
			copy[--n] = 0;
		cJSON_AddStringToObject(src, "dir", basename(copy));
	}
	free(copy);
	files = cJSON_AddArrayToObject(src, "files");
	for (size_t i = 0; p->ck && i < p->ck->nfiles; i++) {
		cJSON *f = cJSON_CreateObject();
		cJSON_AddStringToObject(f, "name", p->ck->files[i].name);
		capy_json_add_u64(f, "bytes", p->ck->files[i].size);
		cJSON_AddItemToArray(files, f);
	}
	for (size_t i = 0; i < r->nfiles; i++) {
		cJSON *f = cJSON_CreateObject();
		uint64_t size = 0;
		capy_file_size(r->file_paths[i], &size, NULL);
		cJSON_AddStringToObject(f, "name", r->file_names[i]);
		capy_json_add_u64(f, "bytes", size);
		cJSON_AddItemToArray(files, f);
	}
	recipe = cJSON_AddObjectToObject(pv, "recipe");
	cJSON_AddStringToObject(recipe, "experts", p->quantize_experts ? "nvfp4-modelopt" : "as-published");
	cJSON_AddBoolToObject(recipe, "vision", p->vision);
	cJSON_AddStringToObject(recipe, "mtp", !p->mtp_layers ? "none" : "checked");
	cJSON_AddItemReferenceToObject(recipe, "transforms", p->transforms);
	if (r->o->layout_only)
		cJSON_AddBoolToObject(pv, "layout_only", true);
	if (r->synth) {
		cJSON *sy = cJSON_AddObjectToObject(pv, "synthetic");
		char *c = strdup(r->o->config_path);
		capy_json_add_u64(sy, "seed", r->o->seed);
		cJSON_AddStringToObject(sy, "config", c ? basename(c) : "?");
		free(c);
	}
	return pv;
}

static void progress_nop(void *ud, uint64_t n)
{
	(void)ud;
	(void)n;
}

/* Shared by convert and synthetic once the plan is resolved. */
static int execute(struct run *r, const char *source_dir, struct capy_convert_stats *st,
		   struct capy_err *err)
{
	const struct capy_convert_opts *o = r->o;
	struct capy_pool *pool = NULL;
	cJSON *model;
	int rc;

	rc = capy_aw_new(&r->w, o->out_path, err);
	if (rc < 0)
		return rc;
	if (o->on_tmp_file)
		o->on_tmp_file(capy_aw_tmp_path(r->w), o->tmp_ud);
	if (o->layout_only)
		capy_aw_set_sparse(r->w);
	if ((rc = declare(r, st, err)) < 0)
		goto fail;
	model = cJSON_CreateObject();
	cJSON_AddStringToObject(model, "family", capy_family_name(r->p->cfg.family));
	r->p->cfg.mtp_layers = r->p->mtp_layers;
	cJSON_AddItemToObject(model, "config", capy_model_config_json(&r->p->cfg));
	if ((rc = capy_aw_layout(r->w, model, provenance(r, source_dir), err)) < 0)
		goto fail;
	st->bytes = capy_aw_total_bytes(r->w);
	/* layout only: the embedded files are all that is written */
	st->payload_bytes = o->layout_only ? st->file_bytes : capy_aw_payload_bytes(r->w);
	if ((rc = make_jobs(r, err)) < 0)
		goto fail;
	if (o->on_start)
		o->on_start(st->payload_bytes, o->progress_ud);
	if ((rc = capy_pool_new(&pool, o->threads, err)) < 0)
		goto fail;
	st->threads = capy_pool_size(pool);
	pthread_mutex_init(&r->mu, NULL);
	capy_pool_run(pool, worker_main, r);
	capy_pool_free(pool);
	pthread_mutex_destroy(&r->mu);
	if (atomic_load(&r->failed)) {
		rc = r->rc;
		if (err)
			*err = r->err;
		goto fail;
	}
	rc = capy_aw_finish(r->w, err);
	r->w = NULL;
	if (o->on_tmp_file)
		o->on_tmp_file(NULL, o->tmp_ud);
	return rc;
fail:
	capy_aw_abort(r->w);
	r->w = NULL;
	if (o->on_tmp_file)
		o->on_tmp_file(NULL, o->tmp_ud);
	return rc;
}

static int add_path(struct run *r, char *path, const char *name, struct capy_err *err)
{
	if (access(path, R_OK) < 0) {
		int rc = capy_err_errno(err, errno, "cannot read '%s'", path);
		free(path);
		return rc;
	}
	r->file_paths[r->nfiles] = path;
	r->file_names[r->nfiles++] = name;
	return 0;
}

/* The kept files present in dir; config_path, if given, stands in for dir's config.json. */
static int collect_files(struct run *r, const char *dir, const char *config_path, struct capy_err *err)
{
	size_t n = ARRAY_SIZE(kept_files);
	int rc;

	r->file_paths = calloc(n, sizeof(*r->file_paths));
	r->file_names = calloc(n, sizeof(*r->file_names));
	r->file_aw = calloc(n, sizeof(*r->file_aw));
	if (!r->file_paths || !r->file_names || !r->file_aw)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		bool is_config = !strcmp(kept_files[i], "config.json");
		char *path = is_config && config_path ? strdup(config_path) : capy_path_join(dir, kept_files[i]);
		if (!path)
			return capy_err_set(err, CAPY_ENOMEM, "out of memory");
		if (access(path, F_OK) < 0) {
			/* Without the tokenizer no capy tool could use the artifact. */
			bool required = is_config || (!config_path && !strcmp(kept_files[i], "tokenizer.json"));
			free(path);
			if (required)
				return capy_err_set(err, CAPY_EIO, "'%s/%s' is missing (capy needs it)", dir, kept_files[i]);
			continue;
		}
		if ((rc = add_path(r, path, kept_files[i], err)) < 0)
			return rc;
	}
	return 0;
}

static void free_run(struct run *r)
{
	for (size_t i = 0; i < r->nfiles; i++)
		free(r->file_paths[i]);
	free(r->file_paths);
	free(r->file_names);
	free(r->file_aw);
	free(r->jobs);
}

int capy_convert(const struct capy_convert_opts *o, struct capy_convert_stats *st,
		 struct capy_err *err)
{
	struct capy_convert_opts opts = *o;
	struct run r = { .o = &opts };
	struct plan p = { 0 };
	struct capy_ckpt *ck = NULL;
	char what[4200];
	int rc;

	memset(st, 0, sizeof(*st));
	if (!opts.progress)
		opts.progress = progress_nop;
	if ((rc = capy_ckpt_open(&ck, o->model_dir, err)) < 0)
		return rc;
	snprintf(what, sizeof(what), "'%s/config.json'", o->model_dir);
	if ((rc = capy_model_config_parse(&p.cfg, ck->family, ck->text, what, err)) < 0)
		goto out;
	p.quantize_experts = o->quantize_experts;
	p.vision = o->vision;
	if ((rc = plan_build(&p, ck, err)) < 0 || (rc = plan_resolve(&p, err)) < 0)
		goto out;
	for (size_t i = 0; i < ck->ntensors; i++)
		if (!o->vision && !strncmp(ck->tensors[i].name, "model.visual.", 13))
			st->skipped_vision++;
	if (o->quantize_experts && p.cfg.family == CAPY_FAMILY_QWEN3_5) {
		rc = capy_err_set(err, CAPY_EINVAL, "--quantize-experts: '%s' is a dense model without routed experts",
				  o->model_dir);
		goto out;
	}
	r.p = &p;
	if ((rc = collect_files(&r, o->model_dir, NULL, err)) < 0)
		goto out;
	rc = execute(&r, o->model_dir, st, err);
out:
	free_run(&r);
	plan_release(&p);
	capy_ckpt_close(ck);
	return rc;
}

int capy_synthetic(const struct capy_convert_opts *o, struct capy_convert_stats *st,
		   struct capy_err *err)
{
	struct capy_convert_opts opts = *o;
	struct run r = { .o = &opts };
	struct plan p = { 0 };
	struct synth_tables *tables = NULL;
	cJSON *config = NULL;
	const cJSON *mt, *tc;
	char *text = NULL, *dir = NULL, *copy;
	char what[4200];
	size_t len;
	int rc;

	memset(st, 0, sizeof(*st));
	if (!opts.progress)
		opts.progress = progress_nop;
	snprintf(what, sizeof(what), "'%s'", o->config_path);
	if ((rc = capy_read_file(o->config_path, 64u << 20, &text, &len, err)) < 0)
		return rc;
	rc = capy_json_parse(text, len, what, &config, err);
	free(text);
	if (rc < 0)
		return rc;
	mt = cJSON_GetObjectItemCaseSensitive(config, "model_type");
	tc = cJSON_GetObjectItemCaseSensitive(config, "text_config");
	if (!cJSON_IsString(mt)) {
		rc = capy_err_set(err, CAPY_EFORMAT, "%s has no model_type", what);
		goto out;
	}
	if ((rc = capy_model_config_parse(&p.cfg, mt->valuestring, cJSON_IsObject(tc) ? tc : config, what, err)) < 0)
		goto out;
	if (o->quantize_experts && p.cfg.family == CAPY_FAMILY_QWEN3_5) {
		rc = capy_err_set(err, CAPY_EINVAL, "--quantize-experts: %s describes a dense model without routed experts",
				  what);
		goto out;
	}
	p.quantize_experts = o->quantize_experts;
	p.mtp_layers = 0;
	if ((rc = plan_build(&p, NULL, err)) < 0)
		goto out;
	plan_resolve_synthetic(&p);
	if ((rc = synth_tables_new(&tables, o->seed, err)) < 0)
		goto out;
	copy = strdup(o->config_path);
	dir = copy ? strdup(dirname(copy)) : NULL;
	free(copy);
	if (!dir) {
		rc = capy_err_set(err, CAPY_ENOMEM, "out of memory");
		goto out;
	}
	r.p = &p;
	r.synth = tables;
	/* The config itself (kept as config.json) and any tokenizer/template files beside it. */
	if ((rc = collect_files(&r, dir, o->config_path, err)) < 0)
		goto out;
	rc = execute(&r, NULL, st, err);
out:
	free(dir);
	free_run(&r);
	plan_release(&p);
	synth_tables_free(tables);
	cJSON_Delete(config);
	return rc;
}
