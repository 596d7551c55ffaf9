/* weights.c - the model's weights in device memory. The tensors of the mapped artifact are
 * copied range by range (the PLE n-gram tables stay on the host: they are read by rows),
 * then the host binding (model/weights) is translated: every matrix to a kernel descriptor
 * (struct ck_linear) over the device copy, every small fp32 vector to a device copy. */
#include "cuda-impl.h"

#include <stdlib.h>
#include <string.h>

int cu_err(struct capy_err *err, cudaError_t rc, const char *what)
{
	return capy_err_set(err, rc == cudaErrorMemoryAllocation ? CAPY_ENOMEM : CAPY_EIO, "cuda: %s: %s", what,
			    cudaGetErrorString(rc));
}

int cu_check(struct capy_err *err, int rc, const char *what)
{
	return rc ? cu_err(err, (cudaError_t)-rc, what) : 0;
}

/* The byte ranges of the device tensors (offload/plan.h: the memory plan counts the same
 * ranges; the routed experts only when all are resident, the MTP head's only with it), copied
 * into one allocation. */
static int upload_spans(struct cuda_engine *e, struct capy_err *err)
{
	const struct capy_artifact *a = e->a;
	struct capy_plan_range *r;
	struct cu_span *sp;
	size_t m;
	uint64_t total;
	cudaError_t rc;
	int prc;

	if ((prc = capy_plan_ranges(a, e->plan.all_resident, e->plan.mtp, &r, &m, &total, err)) < 0)
		return prc;
	sp = calloc(m + 1, sizeof(*sp));
	if (!sp) {
		free(r);
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < m; i++) {
		sp[i].off = r[i].off;
		sp[i].len = r[i].len;
	}
	free(r);
	e->spans = sp;
	e->nspans = m;
	if ((rc = cudaMalloc((void **)&e->weights_dev, total ? total : 256)) != cudaSuccess)
		return capy_err_set(err, CAPY_ENOMEM, "cuda: %" PRIu64 " MiB of device memory for the weights: %s",
				    total >> 20, cudaGetErrorString(rc));
	e->weights_dev_bytes = total;
	e->device_bytes += total;
	total = 0;
	for (size_t i = 0; i < m; i++) {
		sp[i].dev = e->weights_dev + total;
		if ((rc = cudaMemcpy(sp[i].dev, a->base + sp[i].off, sp[i].len, cudaMemcpyHostToDevice)) != cudaSuccess)
			return cu_err(err, rc, "copying the weights to the device");
		total += CAPY_ALIGN_UP(sp[i].len, CAPY_PLAN_ALIGN);
	}
	return 0;
}

/* The device address of host pointer p into the mapped artifact (a device tensor). */
static const void *dev_of(const struct cuda_engine *e, const void *p)
{
	uint64_t off = (uint64_t)((const uint8_t *)p - e->a->base);
	size_t lo = 0, hi = e->nspans;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (e->spans[mid].off + e->spans[mid].len <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == e->nspans || off < e->spans[lo].off)
		CAPY_BUG("cuda: weight at offset %" PRIu64 " is not on the device", off);
	return e->spans[lo].dev + (off - e->spans[lo].off);
}

struct ck_linear cu_lin_at(const struct capy_linear *l, const void *data)
{
	struct ck_linear d;

	memset(&d, 0, sizeof(d));
	d.n = l->n;
	d.k = l->k;
	d.dtype = l->dtype == CAPY_DT_F32 ? CK_F32 : l->dtype == CAPY_DT_F16 ? CK_F16
						 : l->dtype == CAPY_DT_BF16 ? CK_BF16 : CK_NVFP4;
	d.data = data;
	if (l->dtype == CAPY_DT_NVFP4) {
		struct capy_nvfp4_layout lay;
		capy_nvfp4_layout(l->n, l->k, l->nparts, &lay);
		d.nparts = l->nparts;
		d.codes_off = lay.codes_off;
		d.scales_off = lay.scales_off;
		d.globals_off = lay.globals_off;
		for (uint32_t p = 0; p < l->nparts; p++) {
			d.part_rows[p] = l->part_rows[p];
			d.scale2[p] = l->scale2[p];
			d.input_scale[p] = l->input_scale[p];
		}
	}
	return d;
}

static struct ck_linear lin(const struct cuda_engine *e, const struct capy_linear *l)
{
	return cu_lin_at(l, dev_of(e, l->data));
}

/* A device copy of n floats of the binding; NULL (and err set) when out of device memory. */
static const float *vec(struct cuda_engine *e, const float *h, uint64_t n, struct capy_err *err, int *rc)
{
	float *d;
	cudaError_t r;

	if (*rc < 0 || !h)
		return NULL;
	if (e->small_used + n > e->small_cap) {
		*rc = capy_err_set(err, CAPY_EUNSUPPORTED, "cuda: the small weights outgrew their buffer");
		return NULL;
	}
	d = e->small_dev + e->small_used;
	e->small_used += CAPY_ALIGN_UP(n, 64);
	if ((r = cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice)) != cudaSuccess)
		*rc = cu_err(err, r, "copying small weights");
	return d;
}

static void hc(struct cuda_engine *e, struct cu_hc *d, const struct capy_hc_w *h, struct capy_err *err, int *rc)
{
	uint64_t hh = e->c.hc_count * e->c.hidden_size;

	d->norm = vec(e, h->norm, hh, err, rc);
	d->down = lin(e, &h->down);
	d->up = lin(e, &h->up);
	d->has_inject = h->has_inject;
	if (h->has_inject)
		d->inject = lin(e, &h->inject);
}

static struct ck_expert_stack stack(const struct cuda_engine *e, const struct capy_linear *x)
{
	struct ck_expert_stack s;

	s.first = lin(e, &x[0]);
	s.E = e->c.n_experts;
	s.stride = s.E > 1 ? (uint64_t)((const uint8_t *)x[1].data - (const uint8_t *)x[0].data) : 0;
	return s;
}

/* One decoder layer's matrices as kernel descriptors and its vectors copied (*rc < 0 and err
 * set on a failure). */
static void layer_upload(struct cuda_engine *e, struct cu_layer *l, const struct capy_layer_w *h, struct capy_err *err,
			 int *rc)
{
	const struct capy_model_config *c = &e->c;
	uint64_t H = c->hidden_size, hd = c->head_dim, hh = (c->hc_count ? c->hc_count : 1) * H;
	uint64_t conv = 2 * c->linear_key_heads * c->linear_key_head_dim + c->linear_value_heads * c->linear_value_head_dim;

	l->h = h;
	l->in_norm = vec(e, h->in_norm, H, err, rc);
	l->post_norm = vec(e, h->post_norm, H, err, rc);
	if (c->family == CAPY_FAMILY_QWEN4_EXP) {
		hc(e, &l->hc_attn, &h->hc_attn, err, rc);
		hc(e, &l->hc_mlp, &h->hc_mlp, err, rc);
	}
	if (h->has_ple) {
		l->ple.key = lin(e, &h->ple.key);
		l->ple.value = lin(e, &h->ple.value);
		l->ple.norm_key = vec(e, h->ple.norm_key, hh, err, rc);
		l->ple.norm_query = vec(e, h->ple.norm_query, hh, err, rc);
		l->ple.norm_conv = vec(e, h->ple.norm_conv, hh, err, rc);
		l->ple.conv = vec(e, h->ple.conv, hh * c->ple_conv_kernel, err, rc);
	}
	if (h->type == CAPY_LAYER_LINEAR) {
		const struct capy_gdn_w *g = &h->gdn;
		l->gdn.qkv = lin(e, &g->qkv);
		l->gdn.z = lin(e, &g->z);
		l->gdn.b = lin(e, &g->b);
		l->gdn.a = lin(e, &g->a);
		l->gdn.out = lin(e, &g->out);
		l->gdn.conv = vec(e, g->conv, conv * c->linear_conv_kernel, err, rc);
		l->gdn.neg_a = vec(e, g->neg_a, c->linear_value_heads, err, rc);
		l->gdn.dt_bias = vec(e, g->dt_bias, c->linear_value_heads, err, rc);
		l->gdn.norm = vec(e, g->norm, c->linear_value_head_dim, err, rc);
	} else {
		const struct capy_attn_w *at = &h->attn;
		l->attn.q = lin(e, &at->q);
		l->attn.k = lin(e, &at->k);
		l->attn.v = lin(e, &at->v);
		l->attn.o = lin(e, &at->o);
		l->attn.q_norm = vec(e, at->q_norm, hd, err, rc);
		l->attn.k_norm = vec(e, at->k_norm, hd, err, rc);
		l->attn.qsa = at->qsa;
		if (at->qsa) {
			l->attn.idx_qk = lin(e, &at->idx_qk);
			l->attn.idx_q_norm = vec(e, at->idx_q_norm, c->indexer_head_dim, err, rc);
			l->attn.idx_k_norm = vec(e, at->idx_k_norm, c->indexer_head_dim, err, rc);
		}
	}
	if (h->moe) {
		const struct capy_moe_w *m = &h->moe_w;
		l->moe.router = lin(e, &m->router);
		if (e->plan.all_resident) { /* else offload.c gives the experts' stacks */
			l->moe.gate_up = stack(e, m->gate_up);
			l->moe.down = stack(e, m->down);
		}
		l->moe.shared.gate_up = lin(e, &m->shared.gate_up);
		l->moe.shared.down = lin(e, &m->shared.down);
		l->moe.shared_gate = lin(e, &m->shared_gate);
	} else {
		l->mlp.gate_up = lin(e, &h->mlp.gate_up);
		l->mlp.down = lin(e, &h->mlp.down);
	}
}

/* The MTP head (bound with opts.mtp; its tensors are device tensors then: the plan's mtp). */
static void mtp_upload(struct cuda_engine *e, struct capy_err *err, int *rc)
{
	const struct capy_mtp_w *h = &e->hw.mtp;
	struct cu_mtp *m = &e->mtp;
	uint64_t H = e->c.hidden_size;

	m->fc = lin(e, &h->fc);
	m->norm_emb = vec(e, h->norm_emb, H, err, rc);
	m->norm_hidden = vec(e, h->norm_hidden, H, err, rc);
	m->norm = vec(e, h->norm, H, err, rc);
	layer_upload(e, &m->layer, &h->layer, err, rc);
	if (e->c.family == CAPY_FAMILY_QWEN4_EXP)
		hc(e, &m->mixer, &h->mixer, err, rc);
	m->present = *rc == 0;
}

int cu_weights_upload(struct cuda_engine *e, struct capy_err *err)
{
	const struct capy_model_config *c = &e->c;
	const struct capy_weights *w = &e->hw;
	cudaError_t r;
	int rc = 0;

	if ((rc = upload_spans(e, err)) < 0)
		return rc;
	e->small_cap = capy_plan_small_floats(c);
	if ((r = cudaMalloc((void **)&e->small_dev, e->small_cap * sizeof(float))) != cudaSuccess)
		return cu_err(err, r, "allocating small weights");
	e->device_bytes += e->small_cap * sizeof(float);
	if (!(e->layers = calloc(c->n_layers, sizeof(*e->layers))))
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	e->embed = dev_of(e, w->embed);
	e->embed_dtype = w->embed_dtype == CAPY_DT_F32 ? CK_F32 : w->embed_dtype == CAPY_DT_F16 ? CK_F16 : CK_BF16;
	e->lm_head = lin(e, &w->lm_head);
	if (c->family == CAPY_FAMILY_QWEN4_EXP)
		hc(e, &e->hc_final, &w->hc_final, err, &rc);
	else
		e->final_norm = vec(e, w->final_norm, c->hidden_size, err, &rc);
	for (uint64_t i = 0; i < c->n_layers && rc == 0; i++)
		layer_upload(e, &e->layers[i], &w->layers[i], err, &rc);
	if (w->mtp.present && rc == 0)
		mtp_upload(e, err, &rc);
	return rc;
}

void cu_weights_release(struct cuda_engine *e)
{
	cudaFree(e->weights_dev);
	cudaFree(e->small_dev);
	free(e->spans);
	free(e->layers);
	e->weights_dev = NULL;
	e->small_dev = NULL;
	e->spans = NULL;
	e->layers = NULL;
}
