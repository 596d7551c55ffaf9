/* state.c - the CUDA backend's memory for sequences: the attention-cache pages (one device
 * allocation, page id p at p * page_bytes, laid out per KV layer as the CPU backend lays
 * them out), each sequence's recurrent state (a device block: GDN conv windows and states,
 * then PLE conv windows; the PLE token contexts on the host), and the QSA selection mask
 * that grows with the longest context. */
#include "cuda-impl.h"

#include <stdlib.h>
#include <string.h>

/* The shared layout (capy_kv_page_layout), 256-byte aligned, as the kernels' descriptors; with
 * the MTP head, its layer's rows after the main layers' (its kv_slot is n_kv). */
int cu_pages_layout(struct cuda_engine *e, struct capy_err *err)
{
	const struct capy_model_config *c = &e->c;
	const int n_kv = e->hw.n_kv + (e->hw.mtp.present ? 1 : 0);
	struct capy_kv_fields *f = calloc((size_t)n_kv + 1, sizeof(*f));
	int rc;

	if (!f || !(e->kv = calloc((size_t)n_kv + 1, sizeof(*e->kv)))) {
		free(f);
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	}
	rc = capy_kv_page_layout(c, e->opts.kv, n_kv, 256, f, &e->P, &e->page_bytes, err);
	for (int i = 0; rc == 0 && i < n_kv; i++) {
		struct ck_kv_layer *l = &e->kv[i];
		l->dtype = e->opts.kv == CAPY_KV_F32 ? CK_KV_F32 : e->opts.kv == CAPY_KV_INT8 ? CK_KV_INT8 : CK_KV_BF16;
		l->nkv = c->n_kv_heads;
		l->hd = c->head_dim;
		l->k = f[i].k;
		l->v = f[i].v;
		l->k_scale = f[i].k_scale;
		l->v_scale = f[i].v_scale;
		l->idx_keys = f[i].idx_keys;
		l->blocks = f[i].blocks;
	}
	free(f);
	e->core->page_tokens = e->P;
	/* the pages the plan counted (its attention cache, and the elastic one's share of the slots) */
	if (rc == 0 && (e->page_bytes != e->plan.page_bytes || e->P != e->plan.page_tokens))
		rc = capy_err_set(err, CAPY_EUNSUPPORTED,
				  "cuda: attention-cache pages of %" PRIu64 " bytes, the memory plan's of %" PRIu64
				  " (libcore/offload/plan.c and the backend disagree)",
				  e->page_bytes, e->plan.page_bytes);
	return rc;
}

uint64_t cu_page_bytes(const struct capy_engine *core)
{
	return ((const struct cuda_engine *)core->be)->page_bytes;
}

/* Storage for page ids [0, n): the pool grows by doubling into a new allocation holding
 * the old pages (steps never run meanwhile, so no kernel holds the old address). */
int cu_pages_reserve(struct capy_engine *core, uint32_t n, struct capy_err *err)
{
	struct cuda_engine *e = core->be;
	uint32_t cap = e->pages_cap ? e->pages_cap : 64;
	uint8_t *p;
	cudaError_t rc;

	cu_use_device(e);
	if (cu_offload_elastic(e))
		return cu_offload_pages(e, n, err);
	if (n <= e->pages_cap)
		return 0;
	while (cap < n)
		cap *= 2;
	if (e->opts.gpu_mem && e->device_bytes + (uint64_t)(cap - e->pages_cap) * e->page_bytes > e->opts.gpu_mem)
		cap = n; /* no headroom for doubling: just what is asked */
	if (e->opts.gpu_mem && e->device_bytes + (uint64_t)(cap - e->pages_cap) * e->page_bytes > e->opts.gpu_mem)
		return capy_err_set(err, CAPY_ENOMEM,
				    "cuda: %" PRIu32 " attention-cache pages (%" PRIu64 " MiB) do not fit --gpu-mem %" PRIu64
				    " MiB with %" PRIu64 " MiB in use",
				    n, (uint64_t)n * e->page_bytes >> 20, e->opts.gpu_mem >> 20, e->device_bytes >> 20);
	if ((rc = cudaMalloc((void **)&p, (uint64_t)cap * e->page_bytes)) != cudaSuccess)
		return capy_err_set(err, CAPY_ENOMEM, "cuda: %" PRIu32 " attention-cache pages (%" PRIu64 " MiB): %s", cap,
				    (uint64_t)cap * e->page_bytes >> 20, cudaGetErrorString(rc));
	if (e->pages_cap &&
	    (rc = cudaMemcpy(p, e->pages, (uint64_t)e->pages_cap * e->page_bytes, cudaMemcpyDeviceToDevice)) != cudaSuccess) {
		cudaFree(p);
		return cu_err(err, rc, "moving the attention cache");
	}
	cudaFree(e->pages);
	e->gen++; /* captured steps hold the old address */
	e->device_bytes += (uint64_t)(cap - e->pages_cap) * e->page_bytes;
	e->pages = p;
	e->pages_cap = cap;
	return 0;
}

/* Only an elastic cache gives storage back (its slots return to the expert cache); the
 * others keep what they took, as capy_engine_reserve promised. */
uint32_t cu_pages_release(struct capy_engine *core, uint32_t n)
{
	struct cuda_engine *e = core->be;

	cu_use_device(e);
	return cu_offload_elastic(e) ? cu_offload_pages_release(e, n) : e->pages_cap;
}

uint32_t cu_pages_elastic(const struct capy_engine *core)
{
	return cu_offload_pages_max(core->be);
}

void cu_page_copy(struct capy_engine *core, uint32_t dst, uint32_t src)
{
	struct cuda_engine *e = core->be;

	cu_use_device(e);
	/* Ordered on the step stream: a step enqueued after it sees the copy. */
	cudaMemcpyAsync(e->pages + (uint64_t)dst * e->page_bytes, e->pages + (uint64_t)src * e->page_bytes, e->page_bytes,
			cudaMemcpyDeviceToDevice, e->stream);
}

static uint64_t state_floats(const struct cuda_engine *e)
{
	return (uint64_t)e->hw.n_gdn * e->gdn_floats + (uint64_t)e->hw.n_ple * e->ple_floats;
}

uint64_t cu_state_bytes(const struct capy_engine *core)
{
	const struct cuda_engine *e = core->be;

	return sizeof(struct cu_state) + state_floats(e) * sizeof(float) + (uint64_t)e->hw.n_ple * 16 * sizeof(int32_t);
}

void cu_state_free(struct capy_engine *core, void *p)
{
	struct cu_state *st = p;

	if (!st)
		return;
	cu_use_device(core->be);
	cudaFree(st->dev);
	free(st->ple_ctx);
	free(st);
}

int cu_state_new(struct capy_engine *core, void **out, struct capy_err *err)
{
	struct cuda_engine *e = core->be;
	struct cu_state *st = calloc(1, sizeof(*st));
	uint64_t n = state_floats(e);
	cudaError_t rc;

	cu_use_device(e);
	if (!st || !(st->ple_ctx = calloc((size_t)e->hw.n_ple + 1, sizeof(*st->ple_ctx)))) {
		free(st);
		return capy_err_set(err, CAPY_ENOMEM, "out of memory for a sequence's recurrent state");
	}
	if (n && (rc = cudaMalloc((void **)&st->dev, n * sizeof(float))) != cudaSuccess) {
		cu_state_free(core, st);
		return capy_err_set(err, CAPY_ENOMEM, "cuda: %" PRIu64 " MiB for a sequence's recurrent state: %s",
				    n * sizeof(float) >> 20, cudaGetErrorString(rc));
	}
	/* A fresh sequence: zero windows and states (ordered before any later step). */
	if (n && (rc = cudaMemsetAsync(st->dev, 0, n * sizeof(float), e->stream)) != cudaSuccess) {
		cu_state_free(core, st);
		return cu_err(err, rc, "clearing a sequence's state");
	}
	for (int i = 0; i < e->hw.n_ple; i++)
		for (uint64_t j = 0; j + 1 < e->c.ngram_size; j++)
			st->ple_ctx[i][j] = (int32_t)e->c.eos_ids[0]; /* the context starts as EOS */
	*out = st;
	return 0;
}

void cu_state_copy(struct capy_engine *core, void *dst, const void *src)
{
	struct cuda_engine *e = core->be;
	struct cu_state *d = dst;
	const struct cu_state *s = src;
	uint64_t n = state_floats(e);

	cu_use_device(e);
	if (n)
		cudaMemcpyAsync(d->dev, s->dev, n * sizeof(float), cudaMemcpyDeviceToDevice, e->stream);
	memcpy(d->ple_ctx, s->ple_ctx, (size_t)e->hw.n_ple * sizeof(*d->ple_ctx));
}

/* What grows with the longest context of a step: the attention kernel's workspace (shared
 * with the QSA selection's, which runs before it) and the QSA mask ([tmax][cap] bytes), for
 * contexts up to ctx tokens; sized by the memory plan (offload/plan.h), which must cover what
 * the kernels ask for. */
int cu_context_reserve(struct cuda_engine *e, uint64_t ctx, struct capy_err *err)
{
	const struct capy_model_config *c = &e->c;
	uint64_t cap;
	bool qsa = c->family == CAPY_FAMILY_QWEN4_EXP;
	size_t ws, kws;
	uint8_t *p = NULL;
	void *w = NULL;
	cudaError_t rc;

	if (ctx <= e->s.sel_cap)
		return 0;
	cap = capy_plan_context_cap(e->s.sel_cap, ctx);
	ws = capy_plan_attn_ws(c, e->s.tmax, cap);
	kws = ck_attention_ws_bytes(e->s.tmax, c->n_heads, c->head_dim, cap);
	if (qsa)
		kws = CAPY_MAX(kws, ck_qsa_select_ws_bytes(e->s.tmax, cap, c->indexer_compress_ratio));
	if (kws > ws)
		return capy_err_set(err, CAPY_EUNSUPPORTED,
				    "cuda: the memory plan gives attention over %" PRIu64 " tokens %zu bytes, the kernels "
				    "ask for %zu (libcore/offload/plan.c and kernels/ disagree)",
				    cap, ws, kws);
	/* The old buffers may still be read by the previous step's kernels. */
	if ((rc = cudaStreamSynchronize(e->stream)) != cudaSuccess)
		return cu_err(err, rc, "the previous step");
	if ((qsa && (rc = cudaMalloc((void **)&p, capy_plan_sel_bytes(c, e->s.tmax, cap))) != cudaSuccess) ||
	    (rc = cudaMalloc(&w, ws ? ws : 16)) != cudaSuccess) {
		cudaFree(p);
		return capy_err_set(err, CAPY_ENOMEM, "cuda: %" PRIu64 " MiB for attention over %" PRIu64 " tokens: %s",
				    (uint64_t)(ws + (qsa ? e->s.tmax * cap : 0)) >> 20, cap, cudaGetErrorString(rc));
	}
	cudaFree(e->s.sel);
	cudaFree(e->s.attn_ws);
	e->gen++;
	e->device_bytes += ws + (qsa ? e->s.tmax * cap : 0) - e->s.attn_ws_bytes - (qsa ? e->s.tmax * e->s.sel_cap : 0);
	e->s.sel = p;
	e->s.attn_ws = w;
	e->s.attn_ws_bytes = ws;
	e->s.sel_cap = cap;
	return 0;
}

/* The context cache's tiers: copies ordered on the step stream (after every step enqueued
 * before them) and waited for, so the host bytes are complete (read) or no longer needed
 * (write) when these return. */
int cu_page_read(struct capy_engine *core, uint32_t id, void *dst, struct capy_err *err)
{
	struct cuda_engine *e = core->be;
	cudaError_t rc;

	cu_use_device(e);
	if ((rc = cudaMemcpyAsync(dst, e->pages + (uint64_t)id * e->page_bytes, e->page_bytes, cudaMemcpyDeviceToHost,
				  e->stream)) != cudaSuccess ||
	    (rc = cudaStreamSynchronize(e->stream)) != cudaSuccess)
		return cu_err(err, rc, "reading an attention-cache page");
	return 0;
}

int cu_page_write(struct capy_engine *core, uint32_t id, const void *src, struct capy_err *err)
{
	struct cuda_engine *e = core->be;
	cudaError_t rc;

	cu_use_device(e);
	if ((rc = cudaMemcpyAsync(e->pages + (uint64_t)id * e->page_bytes, src, e->page_bytes, cudaMemcpyHostToDevice,
				  e->stream)) != cudaSuccess ||
	    (rc = cudaStreamSynchronize(e->stream)) != cudaSuccess)
		return cu_err(err, rc, "writing an attention-cache page");
	return 0;
}

/* Packed as: the device block's floats, then the PLE contexts (16 ids per PLE layer). */
uint64_t cu_state_io_bytes(const struct capy_engine *core)
{
	const struct cuda_engine *e = core->be;

	return state_floats(e) * sizeof(float) + (uint64_t)e->hw.n_ple * 16 * sizeof(int32_t);
}

int cu_state_read(struct capy_engine *core, const void *p, void *dst, struct capy_err *err)
{
	struct cuda_engine *e = core->be;
	const struct cu_state *s = p;
	uint64_t n = state_floats(e);
	cudaError_t rc;

	cu_use_device(e);
	if (n && ((rc = cudaMemcpyAsync(dst, s->dev, n * sizeof(float), cudaMemcpyDeviceToHost, e->stream)) != cudaSuccess ||
		  (rc = cudaStreamSynchronize(e->stream)) != cudaSuccess))
		return cu_err(err, rc, "reading a recurrent state");
	memcpy((uint8_t *)dst + n * sizeof(float), s->ple_ctx, (size_t)e->hw.n_ple * sizeof(*s->ple_ctx));
	return 0;
}

int cu_state_write(struct capy_engine *core, void *p, const void *src, struct capy_err *err)
{
	struct cuda_engine *e = core->be;
	struct cu_state *d = p;
	uint64_t n = state_floats(e);
	cudaError_t rc;

	cu_use_device(e);
	if (n && ((rc = cudaMemcpyAsync(d->dev, src, n * sizeof(float), cudaMemcpyHostToDevice, e->stream)) != cudaSuccess ||
		  (rc = cudaStreamSynchronize(e->stream)) != cudaSuccess))
		return cu_err(err, rc, "writing a recurrent state");
	memcpy(d->ple_ctx, (const uint8_t *)src + n * sizeof(float), (size_t)e->hw.n_ple * sizeof(*d->ple_ctx));
	return 0;
}
