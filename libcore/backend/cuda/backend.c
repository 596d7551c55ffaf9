/* backend.c - the CUDA backend: opening it on a device (the weights copied, the step's
 * buffers sized for e->step_tokens tokens, the page layout), its table of operations.
 * The device memory it takes is counted in device_bytes and checked against --gpu-mem. */
#include "cuda-impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ws_need {
	const struct cuda_engine *e;
	size_t bytes;
};

static void lin_ws(const struct capy_linear *l, void *p)
{
	struct ws_need *n = p;
	struct ck_linear d = { 0 };

	d.dtype = l->dtype == CAPY_DT_NVFP4 ? CK_NVFP4 : CK_BF16;
	d.n = l->n;
	d.k = l->k;
	d.nparts = l->nparts;
	for (uint32_t i = 0; i < l->nparts && i < CK_MAX_PARTS; i++) {
		d.part_rows[i] = l->part_rows[i];
		d.scale2[i] = l->scale2[i];
		d.input_scale[i] = l->input_scale[i];
	}
	n->bytes = CAPY_MAX(n->bytes, ck_linear_ws_bytes(&d, n->e->s.tmax));
	if (d.dtype == CK_BF16)
		n->bytes = CAPY_MAX(n->bytes, ck_gemm_ws_bytes(d.k, n->e->s.tmax));
}

struct dev_alloc {
	void **p;
	size_t bytes;
};

/* The kernels' own workspace figures must not exceed the plan's (offload/plan.c transcribes
 * them): a mismatch means the two disagree, and is refused rather than written past. */
static int ws_agrees(uint64_t planned, uint64_t kernels, const char *what, struct capy_err *err)
{
	if (kernels <= planned)
		return 0;
	return capy_err_set(err, CAPY_EUNSUPPORTED,
			    "cuda: the memory plan gives the %s %" PRIu64 ", the kernels ask for %" PRIu64
			    " (libcore/offload/plan.c and kernels/ disagree)",
			    what, planned, kernels);
}

/* The plan's copies of the GPU sampler's record sizes (it is built without kernels/). */
_Static_assert(sizeof(struct ck_sample_row) == CAPY_PLAN_SAMPLE_ROW_BYTES, "offload/plan.h: ck_sample_row");
_Static_assert(sizeof(struct ck_sample_out) == CAPY_PLAN_SAMPLE_OUT_BYTES, "offload/plan.h: ck_sample_out");

/* The step's buffers, sized by the memory plan (capy_plan_scratch). */
static int alloc_scratch(struct cuda_engine *e, struct capy_err *err)
{
	const struct capy_model_config *c = &e->c;
	struct cu_scratch *s = &e->s;
	uint64_t T = s->tmax, k = c->n_experts_per_tok ? c->n_experts_per_tok : 1;
	struct capy_plan_scratch ps;
	struct ws_need need = { e, 0 };
	cudaError_t rc;
	int prc;

	capy_plan_scratch(&ps, e->a, c, T, e->plan.mtp);
	capy_weights_each_linear(&e->hw, c, lin_ws, &need);
	capy_weights_each_mtp_linear(&e->hw, c, lin_ws, &need);
	if ((prc = ws_agrees(ps.lin_ws, need.bytes, "linears' workspace (bytes)", err)) < 0)
		return prc;
	for (uint64_t i = 0; i < c->n_layers; i++)
		if (e->layers[i].h->moe) {
			need.bytes = ck_moe_ws_bytes(&e->layers[i].moe.gate_up, &e->layers[i].moe.down, T * k);
			if ((prc = ws_agrees(ps.moe_ws, need.bytes, "routed experts' workspace (bytes)", err)) < 0)
				return prc;
			break;
		}
	if (e->mtp.present && e->mtp.layer.h->moe &&
	    (prc = ws_agrees(ps.moe_ws, ck_moe_ws_bytes(&e->mtp.layer.moe.gate_up, &e->mtp.layer.moe.down, T * k),
			     "MTP head's routed experts' workspace (bytes)", err)) < 0)
		return prc;
	s->lin_ws_bytes = ps.lin_ws;
	s->moe_ws_bytes = ps.moe_ws;
	s->logits_rows = ps.logits_rows;
	struct dev_alloc d[] = {
		{ (void **)&s->x, ps.x },	  { (void **)&s->xn, ps.xn },
		{ (void **)&s->blk, ps.blk },	  { (void **)&s->out, ps.out },
		{ (void **)&s->inj, ps.inj },	  { (void **)&s->mix, ps.mix },
		{ (void **)&s->tmp, ps.tmp },	  { (void **)&s->big1, ps.big1 },
		{ (void **)&s->big2, ps.big2 },	  { (void **)&s->big3, ps.big3 },
		{ (void **)&s->moe_out, ps.moe_out }, { (void **)&s->moe_w, ps.moe_w },
		{ (void **)&s->moe_ids, ps.moe_ids }, { (void **)&s->ple_emb, ps.ple_emb },
		{ (void **)&s->rows, ps.rows },	  { (void **)&s->hid, ps.hid },
		{ (void **)&s->logits, ps.logits }, { (void **)&s->row_idx, ps.row_idx },
		{ &s->lin_ws, ps.lin_ws },	  { &s->moe_ws, ps.moe_ws },
		{ (void **)&s->smp_rows, ps.smp_rows }, { (void **)&s->smp_out, ps.smp_out },
		{ (void **)&s->smp_mask, ps.smp_mask }, { (void **)&s->mtp_ids, ps.mtp_ids },
		{ (void **)&s->gdn_count, ps.gdn_count },
	};
	for (size_t i = 0; i < ARRAY_SIZE(d); i++) {
		if ((rc = cudaMalloc(d[i].p, d[i].bytes ? d[i].bytes : 16)) != cudaSuccess)
			return capy_err_set(err, CAPY_ENOMEM, "cuda: %" PRIu64 " MiB for the step's buffers: %s",
					    (uint64_t)d[i].bytes >> 20, cudaGetErrorString(rc));
		e->device_bytes += d[i].bytes;
	}
	if ((rc = cudaMemset(s->gdn_count, 0, ps.gdn_count)) != cudaSuccess) /* ck_gdn_decode keeps them 0 */
		return cu_err(err, rc, "clearing the GDN counters");
	if ((rc = cudaMallocHost((void **)&s->logits_host, ps.host_logits)) != cudaSuccess ||
	    (rc = cudaMallocHost((void **)&s->row_idx_host, ps.host_row_idx)) != cudaSuccess ||
	    (rc = cudaMallocHost((void **)&s->smp_rows_host, ps.host_smp_rows)) != cudaSuccess ||
	    (rc = cudaMallocHost((void **)&s->smp_out_host, ps.host_smp_out)) != cudaSuccess ||
	    (rc = cudaMallocHost((void **)&s->smp_mask_host, ps.host_smp_mask)) != cudaSuccess ||
	    (rc = cudaMallocHost((void **)&s->ple_host, ps.host_ple)) != cudaSuccess)
		return cu_err(err, rc, "allocating pinned host buffers");
	s->row_dst = calloc(s->logits_rows, sizeof(*s->row_dst));
	s->row_smp = calloc(s->logits_rows, sizeof(*s->row_smp));
	s->row_tok = calloc(s->logits_rows, sizeof(*s->row_tok));
	s->row_mask = calloc(s->logits_rows, sizeof(*s->row_mask));
	s->hist = calloc(16 + T, sizeof(*s->hist));
	s->mtp_ids_host = ps.mtp_ids ? malloc(ps.mtp_ids) : NULL;
	if (!s->row_dst || !s->row_smp || !s->row_tok || !s->row_mask || !s->hist || (ps.mtp_ids && !s->mtp_ids_host))
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	return 0;
}

static void free_scratch(struct cu_scratch *s)
{
	void *d[] = { s->x, s->xn, s->blk, s->out, s->inj, s->mix, s->tmp, s->big1, s->big2, s->big3, s->moe_out,
		      s->moe_w, s->moe_ids, s->ple_emb, s->rows, s->hid, s->logits, s->row_idx, s->lin_ws, s->moe_ws,
		      s->attn_ws, s->sel, s->meta_dev, s->smp_rows, s->smp_out, s->smp_mask, s->mtp_ids, s->gdn_count };

	for (size_t i = 0; i < ARRAY_SIZE(d); i++)
		cudaFree(d[i]);
	cudaFreeHost(s->logits_host);
	cudaFreeHost(s->row_idx_host);
	cudaFreeHost(s->smp_rows_host);
	cudaFreeHost(s->smp_out_host);
	cudaFreeHost(s->smp_mask_host);
	cudaFreeHost(s->ple_host);
	cudaFreeHost(s->meta_host);
	free(s->row_dst);
	free(s->row_smp);
	free(s->row_tok);
	free(s->row_mask);
	free(s->hist);
	free(s->mtp_ids_host);
	memset(s, 0, sizeof(*s));
}

static void cu_close(struct capy_engine *core);

/* CAPY_CUDA_TRACE=FILE (a measurement knob, docs/cuda.md): the kernel trace of the engine's
 * life, written as a table when it closes (bench/trace-summary.py reads it). */
static int trace_open(struct cuda_engine *e, struct capy_err *err)
{
	const char *f = getenv("CAPY_CUDA_TRACE"), *cap = getenv("CAPY_CUDA_TRACE_CAP");

	if (!f || !*f)
		return 0;
	e->trace_cap = cap ? (uint32_t)strtoul(cap, NULL, 10) : 1u << 20;
	e->trace_file = f;
	return cu_check(err, ck_trace_start(e->trace_cap), "CAPY_CUDA_TRACE (a build with TRACE=1 records the trace)");
}

static void trace_close(struct cuda_engine *e)
{
	struct ck_trace_rec *r;
	uint32_t n = 0;
	FILE *fp;

	if (!e->trace_file || !(r = malloc((size_t)e->trace_cap * sizeof(*r))))
		return;
	if (!ck_trace_stop(r, e->trace_cap, &n) && (fp = fopen(e->trace_file, "w"))) {
		fprintf(fp, "# kernels %" PRIu32 " (%" PRIu32 " recorded)\nname\tgrid\tblock\tstart_ns\tready_ns\tstart_clk\tready_clk\n",
			n, CAPY_MIN(n, e->trace_cap));
		for (uint32_t i = 0; i < n && i < e->trace_cap; i++)
			fprintf(fp, "%s\t%u\t%u\t%llu\t%llu\t%lld\t%lld\n", r[i].name, r[i].grid, r[i].block, r[i].t_start,
				r[i].t_ready, r[i].clk_start, r[i].clk_ready);
		fclose(fp);
	}
	free(r);
}

/* The memory plan (offload/plan.h) on this device's budget: --gpu-mem, or the memory free on
 * the device when none is given or less is free. Refuses, with the numbers, what does not
 * fit and what the RAM guard stops; a plan with routed experts left in host RAM offloads (offload.c). */
static int cu_plan(struct cuda_engine *e, struct capy_err *err)
{
	struct capy_plan_opts po = { 0 };
	struct capy_host_mem h;
	size_t free_b = 0, total_b = 0;
	cudaError_t r;
	int rc;

	if ((r = cudaMemGetInfo(&free_b, &total_b)) != cudaSuccess)
		return cu_err(err, r, "reading the device's free memory");
	po.gpu_mem = e->opts.gpu_mem;
	po.budget = "--gpu-mem";
	if (!po.gpu_mem || po.gpu_mem > free_b) {
		po.gpu_mem = free_b;
		snprintf(e->budget, sizeof(e->budget), "cuda:%d's free memory", e->device);
		po.budget = e->budget;
	}
	po.max_context = e->opts.max_context;
	po.max_seqs = e->opts.max_seqs;
	po.kept_states = e->opts.kept_states;
	po.step_tokens = e->s.tmax;
	po.kv = e->opts.kv;
	po.expert_slots = e->opts.expert_slots;
	po.mtp = e->opts.mtp;
	if ((rc = capy_host_mem_read(&h, err)) < 0 || (rc = capy_plan_compute(&e->plan, e->a, &e->c, &po, &h, err)) < 0 ||
	    (rc = capy_plan_check(&e->plan, err)) < 0)
		return capy_err_prefix(err, "cuda");
	return 0;
}

/* The MTP head runs where every routed expert is resident: its layer's experts through the
 * offload's CPU path (its stack, its slots, its hand-over) are not built. */
static int mtp_check(const struct cuda_engine *e, struct capy_err *err)
{
	if (!e->opts.mtp || e->plan.all_resident)
		return 0;
	return capy_err_set(err, CAPY_EUNSUPPORTED,
			    "cuda: the MTP head with expert offload (routed experts in host RAM) is not built yet: give "
			    "--gpu-mem room for every expert (--plan --spec mtp says how much), or leave --spec mtp out");
}

/* Shapes the kernels are built for beyond what the artifact checks. */
static int shape_check(const struct cuda_engine *e, struct capy_err *err)
{
	if (e->hw.n_ple && e->c.hidden_size > CK_PLE_HIDDEN_MAX)
		return capy_err_set(err, CAPY_EUNSUPPORTED,
				    "cuda: the PLE gate is built for hidden_size up to %d, the model has %" PRIu64
				    " (run it with --device cpu)",
				    CK_PLE_HIDDEN_MAX, e->c.hidden_size);
	return 0;
}

static int cu_open(struct capy_engine *core, struct capy_err *err)
{
	struct cuda_engine *e = calloc(1, sizeof(*e));
	const struct capy_model_config *c;
	int n_dev = 0, rc;
	cudaError_t r;

	if (!e)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	core->be = e;
	e->core = core;
	e->a = core->a;
	e->c = core->c;
	e->opts = core->opts;
	c = &e->c;
	e->s.tmax = core->step_tokens;
	if ((r = cudaGetDeviceCount(&n_dev)) != cudaSuccess || n_dev == 0) {
		rc = capy_err_set(err, CAPY_EUNSUPPORTED, "cuda: no CUDA device (%s)",
				  r == cudaSuccess ? "none found" : cudaGetErrorString(r));
		goto fail;
	}
	if (e->opts.gpu < 0 || e->opts.gpu >= n_dev) {
		rc = capy_err_set(err, CAPY_EINVAL, "cuda: --gpu %d: this machine has %d CUDA device%s", e->opts.gpu, n_dev,
				  n_dev == 1 ? "" : "s");
		goto fail;
	}
	e->device = e->opts.gpu;
	{
		const char *g = getenv("CAPY_CUDA_GRAPHS");
		e->no_graphs = g && !strcmp(g, "0");
		e->no_window_graphs = g && !strcmp(g, "decode");
		const char *p = getenv("CAPY_CUDA_PDL");
		ck_set_dependent_launch(!(p && !strcmp(p, "0")));
		const char *wr = getenv("CAPY_CUDA_WARM");
		ck_set_route_warm(wr && !strcmp(wr, "1"));
		e->skip = cu_skip_parse(getenv("CAPY_CUDA_SKIP"));
		const char *fu = getenv("CAPY_CUDA_FUSE");
		e->no_fuse = fu && !strcmp(fu, "0");
		const char *fs = getenv("CAPY_CUDA_FLASH_SMEM");
		ck_set_flash_smem(fs ? (size_t)strtoull(fs, NULL, 10) : 0);
		const char *f = getenv("CAPY_CUDA_FORK");
		e->fork = f ? (unsigned)strtoul(f, NULL, 10) & CU_FORK_ALL : CU_FORK_ALL;
	}
	if ((r = cudaSetDevice(e->device)) != cudaSuccess || (r = cudaStreamCreate(&e->stream)) != cudaSuccess ||
	    (r = cudaStreamCreateWithFlags(&e->side, cudaStreamNonBlocking)) != cudaSuccess ||
	    (r = cudaEventCreateWithFlags(&e->ev_fork, cudaEventDisableTiming)) != cudaSuccess ||
	    (r = cudaEventCreateWithFlags(&e->ev_join, cudaEventDisableTiming)) != cudaSuccess ||
	    (r = cudaEventCreateWithFlags(&e->ev_upload, cudaEventDisableTiming)) != cudaSuccess ||
	    (r = cudaEventCreateWithFlags(&e->ev_rows, cudaEventDisableTiming)) != cudaSuccess) {
		rc = cu_err(err, r, "opening the device");
		goto fail;
	}
	if ((rc = trace_open(e, err)) < 0 || (rc = cu_plan(e, err)) < 0 || (rc = capy_weights_bind(&e->hw, e->a, c, err)) < 0 ||
	    (e->opts.mtp && (rc = capy_weights_bind_mtp(&e->hw, e->a, c, err)) < 0) || (rc = mtp_check(e, err)) < 0 || (rc = shape_check(e, err)) < 0 ||
	    (rc = cu_weights_upload(e, err)) < 0 || (rc = cu_offload_open(e, err)) < 0 || (rc = alloc_scratch(e, err)) < 0 ||
	    (rc = cu_pages_layout(e, err)) < 0)
		goto fail;
	/* the PLE tables' pages mapped now, not one fault a row in each decode step (the host's
	 * gather sits between a step's two graphs); CAPY_CUDA_PLE_TOUCH=0 leaves them to fault */
	const char *pt = getenv("CAPY_CUDA_PLE_TOUCH");
	if (!(pt && !strcmp(pt, "0")))
		capy_weights_touch_ple(&e->hw, c);
	e->gdn.nk = c->linear_key_heads;
	e->gdn.nv = c->linear_value_heads;
	e->gdn.dk = c->linear_key_head_dim;
	e->gdn.dv = c->linear_value_head_dim;
	e->gdn.K = c->linear_conv_kernel;
	e->gdn.C = 2 * e->gdn.nk * e->gdn.dk + e->gdn.nv * e->gdn.dv;
	e->gdn_floats = e->hw.n_gdn ? capy_plan_gdn_floats(c) : 0;
	if (e->hw.n_gdn && (rc = ws_agrees(e->gdn_floats, ck_gdn_state_floats(&e->gdn), "GDN state (floats)", err)) < 0)
		goto fail;
	e->ple_floats = capy_plan_ple_floats(c);
	if (e->hw.n_ple && (rc = capy_pool_new(&e->ple_pool, e->opts.threads, err)) < 0)
		goto fail;
	{ /* without cuBLASLt the tiled kernel takes prompt rows too (same results within 1e-6) */
		char why[256];
		const char *g = getenv("CAPY_CUDA_GEMM");
		if (!(g && !strcmp(g, "0")) && ck_blas_open(&e->blas, e->s.tmax, why, sizeof(why)) < 0)
			e->blas = NULL;
	}
	/* inv_freq[i] = 1 / theta^(2i / rot), each step in float32 as transformers computes it
	 * (the CPU backend's table, uploaded). */
	e->rot = capy_rope_dims(c);
	{
		float *f = calloc(e->rot / 2 + 1, sizeof(float));
		if (!f) {
			rc = capy_err_set(err, CAPY_ENOMEM, "out of memory");
			goto fail;
		}
		capy_rope_inv_freq(c, f);
		r = cudaMalloc((void **)&e->inv_freq, (e->rot / 2 + 1) * sizeof(float));
		e->device_bytes += (e->rot / 2 + 1) * sizeof(float);
		if (r == cudaSuccess)
			r = cudaMemcpy(e->inv_freq, f, (e->rot / 2 + 1) * sizeof(float), cudaMemcpyHostToDevice);
		free(f);
		if (r != cudaSuccess) {
			rc = cu_err(err, r, "copying the RoPE table");
			goto fail;
		}
	}
	/* Taken so far: the plan's weights, small vectors and step buffers, to the byte (the
	 * plan printed at start is what this engine allocates). */
	const uint64_t planned = e->plan.small + e->plan.scratch +
				 (e->plan.all_resident ? e->plan.weights_all
						       : e->plan.weights + e->plan.offload_dev + e->plan.pool);
	if (e->device_bytes != planned) {
		rc = capy_err_set(err, CAPY_EUNSUPPORTED,
				  "cuda: %" PRIu64 " bytes allocated, the memory plan says %" PRIu64
				  " (libcore/offload/plan.c and the backend disagree)",
				  e->device_bytes, planned);
		goto fail;
	}
	if (e->opts.gpu_mem && e->device_bytes > e->opts.gpu_mem) {
		rc = capy_err_set(err, CAPY_ENOMEM,
				  "cuda: the model needs %" PRIu64 " MiB of device memory (weights %" PRIu64
				  " MiB, step buffers for %" PRIu64 " tokens the rest): more than --gpu-mem %" PRIu64 " MiB",
				  e->device_bytes >> 20, e->weights_dev_bytes >> 20, e->s.tmax, e->opts.gpu_mem >> 20);
		goto fail;
	}
	return 0;
fail:
	cu_close(core);
	return rc;
}

static void cu_close(struct capy_engine *core)
{
	struct cuda_engine *e = core->be;

	if (!e)
		return;
	cu_use_device(e);
	if (e->stream)
		cudaStreamSynchronize(e->stream);
	trace_close(e);
	for (int i = 0; i < CU_GRAPHS; i++)
		for (int p = 0; p < 2; p++)
			if (e->graphs[i].exec[p])
				cudaGraphExecDestroy(e->graphs[i].exec[p]);
	free_scratch(&e->s);
	cu_offload_close(e);
	capy_pool_free(e->ple_pool);
	ck_blas_close(e->blas);
	cu_weights_release(e);
	capy_weights_release(&e->hw);
	cudaFree(e->pages);
	cudaFree(e->inv_freq);
	free(e->kv);
	if (e->ev_join)
		cudaEventDestroy(e->ev_join);
	if (e->ev_upload)
		cudaEventDestroy(e->ev_upload);
	if (e->ev_rows)
		cudaEventDestroy(e->ev_rows);
	if (e->ev_fork)
		cudaEventDestroy(e->ev_fork);
	if (e->side)
		cudaStreamDestroy(e->side);
	if (e->stream)
		cudaStreamDestroy(e->stream);
	free(e);
	core->be = NULL;
}

static int cu_threads(const struct capy_engine *core)
{
	const struct cuda_engine *e = core->be;

	return e->ple_pool ? capy_pool_size(e->ple_pool) : 1;
}

static uint64_t cu_weight_bytes(const struct capy_engine *core)
{
	const struct cuda_engine *e = core->be;

	return capy_weights_decode_bytes(&e->hw, &e->c);
}

static void cu_describe(const struct capy_engine *core, char *buf, size_t size)
{
	const struct cuda_engine *e = core->be;
	struct cudaDeviceProp p;
	size_t free_b = 0, total_b = 0;

	if (cudaGetDeviceProperties(&p, e->device) != cudaSuccess)
		snprintf(p.name, sizeof(p.name), "?");
	cudaMemGetInfo(&free_b, &total_b);
	snprintf(buf, size,
		 "cuda:%d %s (sm_%d%d): %" PRIu64 " MiB taken (weights %" PRIu64 " MiB, attention cache %" PRIu64
		 " MiB = %" PRIu32 " pages of %" PRIu64 " tokens, step buffers for %" PRIu64 " tokens the rest)%s%s; %zu of %zu MiB free",
		 e->device, p.name, p.major, p.minor, e->device_bytes >> 20, e->weights_dev_bytes >> 20,
		 (uint64_t)e->pages_cap * e->page_bytes >> 20, e->pages_cap, e->P, e->s.tmax,
		 e->opts.gpu_mem ? ", --gpu-mem " : "", e->opts.gpu_mem ? "set" : "", free_b >> 20, total_b >> 20);
}

static void cu_plan_line(const struct capy_engine *core, char *buf, size_t size)
{
	const struct cuda_engine *e = core->be;
	struct capy_offload_stats st;
	size_t n;

	capy_plan_summary(&e->plan, buf, size);
	n = strlen(buf);
	if (!e->plan.pinned && cu_offload_stats(core, &st) && n < size) /* which view of the mapping the GPU has */
		snprintf(buf + n, size - n, "; the GPU reads it %s",
			 st.host == CAPY_OFFLOAD_HOST_PAGEABLE ? "as pageable memory (HMM)" : "registered with the driver");
}

const struct capy_backend_ops capy_backend_cuda = {
	.describe = cu_describe,
	.plan = cu_plan_line,
	.offload_stats = cu_offload_stats,
	.name = "cuda",
	.open = cu_open,
	.close = cu_close,
	.threads = cu_threads,
	.weight_bytes = cu_weight_bytes,
	.page_bytes = cu_page_bytes,
	.pages_reserve = cu_pages_reserve,
	.pages_release = cu_pages_release,
	.pages_elastic = cu_pages_elastic,
	.page_copy = cu_page_copy,
	.state_bytes = cu_state_bytes,
	.state_new = cu_state_new,
	.state_copy = cu_state_copy,
	.state_free = cu_state_free,
	.page_read = cu_page_read,
	.page_write = cu_page_write,
	.state_io_bytes = cu_state_io_bytes,
	.state_read = cu_state_read,
	.state_write = cu_state_write,
	.step = cu_step,
	.samples = true,
	.keeps_states = true, /* ck_step.gdn_keep / ple_keep, and the PLE contexts in ple_rows */
	.mtp = cu_mtp,
};
