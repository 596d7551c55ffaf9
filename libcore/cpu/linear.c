/* linear.c - capy_linear: describing a weight matrix, preparing activations, dispatching rows. */
#include "cpu-impl.h"

#include <math.h>

static size_t plain_size(enum capy_dtype dt)
{
	switch (dt) {
	case CAPY_DT_F32:
		return 4;
	case CAPY_DT_F16:
	case CAPY_DT_BF16:
		return 2;
	default:
		return 0;
	}
}

static int init_nvfp4(struct capy_linear *w, uint32_t nparts, const uint64_t *parts,
		      struct capy_err *err)
{
	struct capy_nvfp4_layout l;
	const uint8_t *rec = w->data;
	uint64_t n = w->n, k = w->k, sum = 0;
	uint32_t np = nparts ? nparts : 1;

	if (k % 16)
		return capy_err_set(err, CAPY_EINVAL, "linear: NVFP4 k = %" PRIu64
				    " is not a multiple of 16", k);
	if (k > CAPY_LINEAR_NVFP4_MAX_K)
		return capy_err_set(err, CAPY_EINVAL, "linear: NVFP4 k = %" PRIu64 " is above %u, the "
				    "largest k whose int64 block sums cannot overflow", k,
				    CAPY_LINEAR_NVFP4_MAX_K);
	if (np > CAPY_MAX_PARTS)
		return capy_err_set(err, CAPY_EINVAL, "linear: %u parts, at most %d supported", np,
				    CAPY_MAX_PARTS);
	if (nparts && !parts)
		return capy_err_set(err, CAPY_EINVAL, "linear: %u parts but no part sizes", np);
	for (uint32_t p = 0; p < np; p++) {
		uint64_t rows = nparts ? parts[p] : n;
		if (!rows || capy_add_overflow(sum, rows, &sum))
			return capy_err_set(err, CAPY_EINVAL, "linear: part %u has %" PRIu64 " rows", p,
					    rows);
		w->part_rows[p] = rows;
	}
	if (sum != n)
		return capy_err_set(err, CAPY_EINVAL, "linear: parts add up to %" PRIu64
				    " rows, the matrix has %" PRIu64, sum, n);
	if (capy_nvfp4_layout(n, k, np, &l) < 0)
		return capy_err_set(err, CAPY_EINVAL, "linear: NVFP4 [%" PRIu64 ", %" PRIu64
				    "] is too large", n, k);
	w->nparts = np;
	w->codes = rec + l.codes_off;
	w->scales = rec + l.scales_off;
	memcpy(w->scale2, rec + l.globals_off, 4 * np);
	memcpy(w->input_scale, rec + l.globals_off + 4 * np, 4 * np);
	for (uint32_t p = 0; p < np; p++) {
		float s2 = w->scale2[p], is = w->input_scale[p];
		if (!isfinite(s2))
			return capy_err_set(err, CAPY_EINVAL, "linear: part %u: weight_scale_2 %g is not "
					    "finite", p, (double)s2);
		/* vLLM's gs = 1/input_scale must be finite too. */
		if (!isfinite(is) || is < 0 || (is > 0 && !isfinite(1.0f / is)))
			return capy_err_set(err, CAPY_EINVAL, "linear: part %u: input_scale %g is not a "
					    "usable scale", p, (double)is);
	}
	return 0;
}

int capy_linear_init(struct capy_linear *w, enum capy_dtype dt, uint64_t n, uint64_t k,
		     uint32_t nparts, const uint64_t *parts, const void *data, struct capy_err *err)
{
	uint64_t nk;

	memset(w, 0, sizeof(*w));
	w->dtype = dt;
	w->n = n;
	w->k = k;
	w->data = data;
	if (dt != CAPY_DT_NVFP4 && !plain_size(dt))
		return capy_err_set(err, CAPY_EINVAL, "linear: unsupported weight dtype %s",
				    capy_dtype_name(dt) ? capy_dtype_name(dt) : "(invalid)");
	if (!n || !k)
		return capy_err_set(err, CAPY_EINVAL, "linear: empty matrix [%" PRIu64 ", %" PRIu64 "]",
				    n, k);
	if (!data)
		return capy_err_set(err, CAPY_EINVAL, "linear: no weight data");
	if (dt == CAPY_DT_NVFP4)
		return init_nvfp4(w, nparts, parts, err);
	if (capy_mul_overflow(n, k, &nk) || nk > SIZE_MAX / 4)
		return capy_err_set(err, CAPY_EINVAL, "linear: [%" PRIu64 ", %" PRIu64 "] is too large",
				    n, k);
	return 0;
}

/* The distinct input scales of w's parts, in part order; part_var maps parts to them. */
static uint32_t variants(const struct capy_linear *w, uint8_t *part_var, float *var_scale)
{
	uint32_t nvar = 0;

	for (uint32_t p = 0; p < w->nparts; p++) {
		uint32_t v = 0;
		while (v < nvar && capy_f32_bits(var_scale[v]) != capy_f32_bits(w->input_scale[p]))
			v++;
		if (v == nvar)
			var_scale[nvar++] = w->input_scale[p];
		part_var[p] = (uint8_t)v;
	}
	return nvar;
}

#define HEADER_BYTES CAPY_ALIGN_UP(sizeof(struct capy_linear_input), 64)

size_t capy_linear_input_bytes(const struct capy_linear *w, uint64_t m)
{
	uint8_t part_var[CAPY_MAX_PARTS];
	float var_scale[CAPY_MAX_PARTS];
	uint64_t rows, chunks, q, gs, total;

	if (w->dtype != CAPY_DT_NVFP4)
		return HEADER_BYTES + 63;
	rows = (uint64_t)variants(w, part_var, var_scale) * m; /* <= 8 * m */
	chunks = (w->k + CAPY_NV_CHUNK - 1) / CAPY_NV_CHUNK;
	if (m > UINT64_MAX / 8 || capy_mul_overflow(rows, chunks * CAPY_NV_CHUNK_BYTES, &q) ||
	    capy_mul_overflow(rows, 4, &gs) || capy_add_overflow(q, gs, &total) ||
	    capy_add_overflow(total, HEADER_BYTES + 63, &total) || total > SIZE_MAX)
		return SIZE_MAX;
	return (size_t)total;
}

/* The header of m rows prepared for w in workspace; NVFP4: where the chunks and scales go. */
static struct capy_linear_input *input_layout(const struct capy_linear *w, const float *x, uint64_t m,
					      void *workspace)
{
	struct capy_linear_input *p = (void *)CAPY_ALIGN_UP((uintptr_t)workspace, 64);

	memset(p, 0, sizeof(*p));
	p->dtype = w->dtype;
	p->x = x;
	p->m = m;
	p->k = w->k;
	if (w->dtype != CAPY_DT_NVFP4)
		return p;
	p->nvar = variants(w, p->part_var, p->var_scale);
	p->nchunks = (w->k + CAPY_NV_CHUNK - 1) / CAPY_NV_CHUNK;
	p->q = (uint8_t *)p + HEADER_BYTES;
	p->gs = (float *)(p->q + p->nvar * m * p->nchunks * CAPY_NV_CHUNK_BYTES);
	return p;
}

void capy_linear_prepare(const struct capy_linear *w, const float *x, uint64_t m, void *workspace,
			 struct capy_linear_input **in)
{
	struct capy_linear_input *p = input_layout(w, x, m, workspace);
	const struct capy_cpu_kernels *kern;
	uint64_t qrow = p->nchunks * CAPY_NV_CHUNK_BYTES;

	*in = p;
	if (w->dtype != CAPY_DT_NVFP4)
		return;
	kern = capy_cpu_kernels();
	for (uint32_t v = 0; v < p->nvar; v++)
		for (uint64_t i = 0; i < m; i++)
			kern->nvfp4_prep(x + i * w->k, w->k, p->var_scale[v], p->q + (v * m + i) * qrow,
					 &p->gs[v * m + i]);
}

/* The input's shape and activation scales are those of w (a copy of the struct is fine). */
static bool prepared_for(const struct capy_linear_input *in, const struct capy_linear *w)
{
	if (in->dtype != w->dtype || in->k != w->k)
		return false;
	for (uint32_t p = 0; w->dtype == CAPY_DT_NVFP4 && p < w->nparts; p++)
		if (in->part_var[p] >= in->nvar ||
		    capy_f32_bits(in->var_scale[in->part_var[p]]) != capy_f32_bits(w->input_scale[p]))
			return false;
	return true;
}

void capy_linear_rows(const struct capy_linear *w, const struct capy_linear_input *in, float *y,
		      uint64_t r0, uint64_t r1)
{
	const struct capy_cpu_kernels *kern = capy_cpu_kernels();
	uint64_t begin = 0, qrow = in->nchunks * CAPY_NV_CHUNK_BYTES;

	if (r0 > r1 || r1 > w->n)
		CAPY_BUG("capy_linear_rows: rows [%" PRIu64 ", %" PRIu64 ") of %" PRIu64, r0, r1, w->n);
	if (!prepared_for(in, w))
		CAPY_BUG("capy_linear_rows: the input was prepared for another matrix");
	if (r0 == r1 || !in->m)
		return;
	if (w->dtype != CAPY_DT_NVFP4) {
		kern->plain(w, in->x, in->m, y, r0, r1);
		return;
	}
	/* Each part's rows with its own weight_scale_2 and its input_scale's activation. */
	for (uint32_t p = 0; p < w->nparts; p++) {
		uint64_t end = begin + w->part_rows[p], lo = CAPY_MAX(r0, begin), hi = CAPY_MIN(r1, end);
		uint32_t v = in->part_var[p];
		if (lo < hi)
			kern->nvfp4(w, in->q + v * in->m * qrow, in->gs + v * in->m, in->m, in->nchunks,
				    w->scale2[p], y, lo, hi);
		begin = end;
	}
}

/* The first part of each variant: where a variant's rows are read from in the hand-over. */
static void variant_parts(const struct capy_linear_input *p, uint32_t nparts, uint32_t *first)
{
	for (uint32_t part = nparts; part-- > 0;)
		first[p->part_var[part]] = part;
}

int capy_linear_prepare_quantized(const struct capy_linear *w, const struct capy_nvfp4_rows *q, const uint32_t *rows,
				  uint64_t m, void *workspace, struct capy_linear_input **in, struct capy_err *err)
{
	const uint64_t k = w->k, nb = k / 16;
	struct capy_linear_input *p;
	uint32_t first[CAPY_MAX_PARTS];
	uint64_t qrow;

	if (w->dtype != CAPY_DT_NVFP4)
		return capy_err_set(err, CAPY_EINVAL, "linear: quantized rows given for a %s matrix (NVFP4 only)",
				    capy_dtype_name(w->dtype) ? capy_dtype_name(w->dtype) : "(invalid)");
	p = input_layout(w, NULL, m, workspace);
	qrow = p->nchunks * CAPY_NV_CHUNK_BYTES;
	variant_parts(p, w->nparts, first);
	*in = p;
	for (uint32_t v = 0; v < p->nvar; v++)
		for (uint64_t i = 0; i < m; i++) {
			const uint64_t src = first[v] * q->ld + (rows ? rows[i] : i);
			const int8_t *qa = q->qa + src * k;
			const int32_t *sa = q->sa + src * nb;
			uint8_t *dst = p->q + (v * m + i) * qrow;
			if (nb % 16)
				memset(dst + (p->nchunks - 1) * CAPY_NV_CHUNK_BYTES, 0, CAPY_NV_CHUNK_BYTES);
			for (uint64_t b = 0; b < nb; b++) {
				uint8_t *c = dst + (b / 16) * CAPY_NV_CHUNK_BYTES;
				unsigned d = (unsigned)(b % 16);
				int32_t sum = 0, nc;
				if (sa[b] < -(15 << 14) || sa[b] > (15 << 14))
					return capy_err_set(err, CAPY_EFORMAT, "linear: quantized row %" PRIu64
							    " (part %u): block %" PRIu64 " has scale %" PRId32
							    ", outside +-%d", src % q->ld, first[v], b, sa[b], 15 << 14);
				for (unsigned e = 0; e < 16; e++) {
					int8_t a = qa[b * 16 + e];
					if (a < -12 || a > 12)
						return capy_err_set(err, CAPY_EFORMAT, "linear: quantized row %" PRIu64
								    " (part %u): element %" PRIu64 " is %d, outside "
								    "[-12, 12]", src % q->ld, first[v], b * 16 + e, a);
					c[capy_nv_slot(d, e)] = (uint8_t)a;
					sum += a;
				}
				nc = -12 * sum;
				memcpy(c + CAPY_NV_NC + 4 * d, &nc, 4);
				memcpy(c + CAPY_NV_SA + 4 * d, &sa[b], 4);
			}
			p->gs[v * m + i] = q->gs[src];
		}
	return 0;
}

void capy_linear_quantize_rows(const struct capy_linear *w, const float *x, uint64_t m, void *workspace, int8_t *qa,
			       int32_t *sa, float *gs, uint64_t ld)
{
	const uint64_t k = w->k, nb = k / 16;
	struct capy_linear_input *p;
	uint64_t qrow;

	if (w->dtype != CAPY_DT_NVFP4)
		CAPY_BUG("capy_linear_quantize_rows: a %s matrix", capy_dtype_name(w->dtype));
	capy_linear_prepare(w, x, m, workspace, &p);
	qrow = p->nchunks * CAPY_NV_CHUNK_BYTES;
	for (uint32_t part = 0; part < w->nparts; part++) {
		const uint32_t v = p->part_var[part];
		for (uint64_t i = 0; i < m; i++) {
			const uint8_t *src = p->q + (v * m + i) * qrow;
			const uint64_t dst = part * ld + i;
			for (uint64_t b = 0; b < nb; b++) {
				const uint8_t *c = src + (b / 16) * CAPY_NV_CHUNK_BYTES;
				unsigned d = (unsigned)(b % 16);
				for (unsigned e = 0; e < 16; e++)
					qa[dst * k + b * 16 + e] = (int8_t)c[capy_nv_slot(d, e)];
				memcpy(&sa[dst * nb + b], c + CAPY_NV_SA + 4 * d, 4);
			}
			gs[dst] = p->gs[v * m + i];
		}
	}
}
