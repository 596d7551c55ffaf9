/* plan.c - the memory plan (plan.h): the CUDA backend's allocation sizes as pure functions of
 * the artifact, the configuration and the options, the host's memory, and the plan that
 * splits a GPU's budget between the fixed parts and routed-expert slots. */
#include "plan.h"
#include "../engine/backend.h"
#include "../model/weights.h"
#include "../util/parse.h"

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define MIB 1048576.0

/* --- what the backend uploads -------------------------------------------------------------- */

bool capy_plan_host_only(const struct capy_tensor_info *t)
{
	return strstr(t->name, "ple_embedding.ngram_embedding") != NULL;
}

bool capy_plan_is_mtp(const char *name)
{
	return !strncmp(name, "mtp.", 4);
}

static int range_cmp(const void *a, const void *b)
{
	const struct capy_plan_range *x = a, *y = b;
	return x->off < y->off ? -1 : x->off > y->off;
}

int capy_plan_ranges(const struct capy_artifact *a, bool experts, bool mtp, struct capy_plan_range **out, size_t *nout,
		     uint64_t *bytes, struct capy_err *err)
{
	struct capy_plan_range *r = calloc(a->ntensors + 1, sizeof(*r));
	size_t n = 0, m = 0;
	uint64_t total = 0;

	if (!r)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	for (size_t i = 0; i < a->ntensors; i++) {
		const struct capy_tensor_info *t = &a->tensors[i];
		/* A strided tensor's range ends with its last slice, not at nslices * stride. */
		uint64_t len = t->nslices > 1 ? (t->nslices - 1) * (t->stride ? t->stride : t->slice_bytes) + t->slice_bytes
					      : t->bytes;
		if (capy_plan_host_only(t) || !len || (!experts && capy_plan_is_expert(t)) ||
		    (!mtp && capy_plan_is_mtp(t->name)))
			continue;
		r[n].off = t->offset;
		r[n++].len = len;
	}
	qsort(r, n, sizeof(*r), range_cmp);
	for (size_t i = 0; i < n; i++) {
		if (m && r[i].off <= r[m - 1].off + r[m - 1].len) {
			uint64_t end = CAPY_MAX(r[m - 1].off + r[m - 1].len, r[i].off + r[i].len);
			r[m - 1].len = end - r[m - 1].off;
			continue;
		}
		r[m++] = r[i];
	}
	for (size_t i = 0; i < m; i++)
		total += CAPY_ALIGN_UP(r[i].len, CAPY_PLAN_ALIGN);
	*out = r;
	*nout = m;
	*bytes = total;
	return 0;
}

uint64_t capy_plan_small_floats(const struct capy_model_config *c)
{
	uint64_t H = c->hidden_size, hh = (c->hc_count ? c->hc_count : 1) * H, per = 0;
	uint64_t conv = 2 * c->linear_key_heads * c->linear_key_head_dim + c->linear_value_heads * c->linear_value_head_dim;

	per += 2 * H + 2 * c->head_dim + 2 * c->indexer_head_dim;
	per += conv * c->linear_conv_kernel + 2 * c->linear_value_heads + c->linear_value_head_dim;
	per += 2 * hh + 3 * hh + hh * c->ple_conv_kernel;
	return (c->n_layers + 1) * (per + 64 * 16) + H + hh + 64 * 4;
}

void capy_plan_layer_counts(const struct capy_model_config *c, int *n_kv, int *n_gdn, int *n_ple)
{
	*n_kv = *n_gdn = *n_ple = 0;
	for (uint64_t i = 0; i < c->n_layers; i++) {
		if (c->layer_types[i] == CAPY_LAYER_LINEAR)
			++*n_gdn;
		else
			++*n_kv;
		/* model/weights binds PLE on qwen4_exp only */
		if (c->family == CAPY_FAMILY_QWEN4_EXP && c->ple_layer[i])
			++*n_ple;
	}
}

/* --- recurrent state ----------------------------------------------------------------------- */

/* kernels/gdn.cu ck_gdn_state_floats: the conv window [(K - 1) x C] and the delta-rule state
 * [nv][dk][dv]. */
uint64_t capy_plan_gdn_floats(const struct capy_model_config *c)
{
	uint64_t C = 2 * c->linear_key_heads * c->linear_key_head_dim + c->linear_value_heads * c->linear_value_head_dim;

	return (c->linear_conv_kernel - 1) * C + c->linear_value_heads * c->linear_key_head_dim * c->linear_value_head_dim;
}

uint64_t capy_plan_ple_floats(const struct capy_model_config *c)
{
	return (c->ple_conv_kernel ? c->ple_conv_kernel - 1 : 0) * c->ngram_size * c->hc_count * c->hidden_size;
}

uint64_t capy_plan_state_floats(const struct capy_model_config *c)
{
	int n_kv, n_gdn, n_ple;

	capy_plan_layer_counts(c, &n_kv, &n_gdn, &n_ple);
	return (uint64_t)n_gdn * (n_gdn ? capy_plan_gdn_floats(c) : 0) + (uint64_t)n_ple * capy_plan_ple_floats(c);
}

/* --- the kernels' workspaces (transcribed from kernels/; the backend checks them) ---------- */

static uint64_t al(uint64_t x)
{
	return CAPY_ALIGN_UP(x, 256);
}

/* kernels/linear.cu lin_act_bytes: m rows of NVFP4 activations per part (codes, block scales,
 * global scales) and 256 bytes of slack. */
static uint64_t act_bytes(uint32_t nparts, uint64_t k, uint64_t m)
{
	uint64_t rows = (uint64_t)(nparts ? nparts : 1) * m;

	return al(rows * k) + al(rows * (k / 16) * 4) + al(rows * 4) + 256;
}

static uint64_t last_dim(const struct capy_tensor_info *t, int back)
{
	return t->ndim > back ? t->shape[t->ndim - 1 - back] : 0;
}

/* The matrices the backend binds (model/weights): the text model's, and the MTP head's with
 * mtp; never vision's. */
static bool bound(const struct capy_tensor_info *t, bool mtp)
{
	return (mtp || !capy_plan_is_mtp(t->name)) && strncmp(t->name, "visual.", 7);
}

/* kernels/moe-grouped.cu moe_grouped_ok: NVFP4, k a multiple of the MMA step (32), codes and
 * records 8-byte aligned (the device copy keeps the artifact's offsets modulo 256). */
static bool grouped_ok(const struct capy_tensor_info *t)
{
	uint64_t stride = t->nslices > 1 ? (t->stride ? t->stride : t->slice_bytes) : 0;

	return t->dtype == CAPY_DT_NVFP4 && last_dim(t, 0) % 32 == 0 && t->offset % 8 == 0 && stride % 8 == 0;
}

/* kernels/moe.cu ck_moe_ws_bytes for S slots (T x k) of one layer's stacks. */
static uint64_t moe_ws(const struct capy_tensor_info *gu, const struct capy_tensor_info *dn, uint64_t S)
{
	uint64_t I = last_dim(gu, 1) / 2, q = 0, qd = 0, g = 0, E = gu->shape[0];
	uint32_t pg = gu->nparts ? gu->nparts : 1, pd = dn->nparts ? dn->nparts : 1;

	if (gu->dtype == CAPY_DT_NVFP4)
		q = act_bytes(pg, last_dim(gu, 0), S);
	if (dn->dtype == CAPY_DT_NVFP4)
		qd = act_bytes(pd, last_dim(dn, 0), S);
	if (grouped_ok(gu) && grouped_ok(dn)) {
		/* moe_grouped_ws_bytes; TBN = 128 activation rows per tile (mma-tile.cuh) */
		uint64_t xq = CAPY_MAX(pg * last_dim(gu, 0), pd * last_dim(dn, 0)) * S * 2;
		uint64_t parts = CAPY_MAX(pg, pd), tiles = (S + 127) / 128 + E;
		g = 256 + al(xq) + al(parts * S * 4) + 2 * al(E * 4) + al(S * 4) + al(tiles * 12) + 256;
	}
	return 256 + al(S * 2 * I * 4) + al(S * I * 4) + CAPY_MAX(q, qd) + g;
}

/* ck_moe_ws_bytes of the expert stack whose tensors are <prefix>mlp.experts.* (0 if none). */
static uint64_t stack_ws(const struct capy_artifact *a, const char *prefix, uint64_t S)
{
	char n1[96], n2[96];
	const struct capy_tensor_info *gu, *dn;

	snprintf(n1, sizeof(n1), "%smlp.experts.gate_up_proj", prefix);
	snprintf(n2, sizeof(n2), "%smlp.experts.down_proj", prefix);
	gu = capy_artifact_find(a, n1);
	dn = capy_artifact_find(a, n2);
	return gu && dn && gu->ndim == 3 && dn->ndim == 3 ? moe_ws(gu, dn, S) : 0;
}

void capy_plan_scratch(struct capy_plan_scratch *s, const struct capy_artifact *a, const struct capy_model_config *c,
		       uint64_t T, bool mtp)
{
	uint64_t H = c->hidden_size, hh = H * (c->hc_count ? c->hc_count : 1), wide = capy_widest_row(c);
	uint64_t k = c->n_experts_per_tok ? c->n_experts_per_tok : 1, V = c->vocab_size, lr = CAPY_MIN(T, 64);
	int n_kv, n_gdn, n_ple;

	capy_plan_layer_counts(c, &n_kv, &n_gdn, &n_ple);
	memset(s, 0, sizeof(*s));
	s->T = T;
	s->logits_rows = lr;
	/* ck_linear_ws_bytes: every bound NVFP4 matrix (an expert stack's slices share a shape) */
	for (size_t i = 0; i < a->ntensors; i++) {
		const struct capy_tensor_info *t = &a->tensors[i];
		if (t->dtype == CAPY_DT_NVFP4 && bound(t, mtp))
			s->lin_ws = CAPY_MAX(s->lin_ws, act_bytes(t->nparts, last_dim(t, 0), T));
		/* ck_gemm_ws_bytes: cuBLASLt's 32 MiB and the BF16 hi and lo halves of T rows */
		if (t->dtype == CAPY_DT_BF16 && t->ndim == 2 && bound(t, mtp) && T >= 16)
			s->lin_ws = CAPY_MAX(s->lin_ws, (32ull << 20) + 4 * T * last_dim(t, 0) + 256);
	}
	/* the first MoE layer's stacks, as the backend sizes it (every MoE layer has one shape),
	 * and the MTP head's (the same shape in every known checkpoint; the larger, whatever) */
	for (uint64_t i = 0; i < c->n_layers; i++) {
		char prefix[32];
		if (!c->moe_layer[i])
			continue;
		snprintf(prefix, sizeof(prefix), "layers.%" PRIu64 ".", i);
		s->moe_ws = stack_ws(a, prefix, T * k);
		break;
	}
	if (mtp)
		s->moe_ws = CAPY_MAX(s->moe_ws, stack_ws(a, "mtp.layers.0.", T * k));
	s->x = s->xn = T * hh * 4;
	s->blk = s->out = T * H * 4;
	s->inj = T * (c->hc_count + 1) * 4;
	s->mix = s->tmp = s->big1 = s->big2 = s->big3 = T * wide * 4;
	if (mtp) /* the MTP head's [embedding | hidden] rows are in big1 */
		s->big1 = T * CAPY_MAX(wide, 2 * H) * 4;
	s->mtp_ids = mtp ? V * 4 : 0;
	s->gdn_count = n_gdn ? T * c->linear_value_heads * 4 : 0;
	s->moe_out = T * k * H * 4;
	s->moe_w = s->moe_ids = T * k * 4;
	s->ple_emb = (uint64_t)n_ple * T * c->ple_embed_dim * 4;
	s->rows = lr * hh * 4;
	s->hid = lr * H * 4;
	s->logits = lr * V * 4;
	s->row_idx = lr * 4;
	s->smp_rows = s->host_smp_rows = lr * CAPY_PLAN_SAMPLE_ROW_BYTES;
	s->smp_out = s->host_smp_out = lr * CAPY_PLAN_SAMPLE_OUT_BYTES;
	/* one mask per row a chunk samples (constrained requests: uploaded from the pinned copy
	 * before the sampling kernel) */
	s->smp_mask = s->host_smp_mask = lr * ((V + 31) / 32) * 4;
	s->device = s->x + s->xn + s->blk + s->out + s->inj + s->mix + s->tmp + s->big1 + s->big2 + s->big3 +
		    s->moe_out + s->moe_w + s->moe_ids + s->ple_emb + s->rows + s->hid + s->logits + s->row_idx +
		    s->lin_ws + s->moe_ws + s->smp_rows + s->smp_out + s->smp_mask + s->mtp_ids +
		    s->gdn_count;
	s->host_logits = lr * V * 4;
	s->host_row_idx = lr * 4;
	s->host_ple = (uint64_t)n_ple * T * c->ple_embed_dim * 4 + 16;
	s->host = s->host_logits + s->host_row_idx + s->host_smp_rows + s->host_smp_out + s->host_smp_mask + s->host_ple;
}

uint64_t capy_plan_context_cap(uint64_t have, uint64_t ctx)
{
	uint64_t cap = have ? have : 1024;

	while (cap < ctx)
		cap *= 2;
	return cap;
}

/* kernels/attention.cu ck_attention_ws_bytes (keys in chunks of 256, at most 8192 row-chunks
 * of partials) and, on qwen4_exp, ck_qsa_select_ws_bytes (a float per key block per row). */
uint64_t capy_plan_attn_ws(const struct capy_model_config *c, uint64_t T, uint64_t cap)
{
	uint64_t nch = (cap + 255) / 256, slots = CAPY_MIN(T * nch, 8192), ws;

	ws = nch <= 1 ? 0 : slots * c->n_heads * (c->head_dim + 2) * 4;
	if (c->family == CAPY_FAMILY_QWEN4_EXP) {
		uint64_t q = T * (cap / c->indexer_compress_ratio) * 4;
		ws = CAPY_MAX(ws, q ? q : 4);
	}
	return ws;
}

uint64_t capy_plan_sel_bytes(const struct capy_model_config *c, uint64_t T, uint64_t cap)
{
	return c->family == CAPY_FAMILY_QWEN4_EXP ? T * cap : 0;
}

/* --- host memory --------------------------------------------------------------------------- */

int capy_host_mem_parse(const char *text, uint64_t *available)
{
	const char *p = strstr(text, "MemAvailable:");
	char *end;
	unsigned long long kb;

	if (!p)
		return -1;
	p += strlen("MemAvailable:");
	while (*p == ' ' || *p == '\t')
		p++;
	if (*p < '0' || *p > '9')
		return -1;
	errno = 0;
	kb = strtoull(p, &end, 10);
	if (errno || end == p || strncmp(end, " kB", 3) || kb > UINT64_MAX / 1024)
		return -1;
	*available = (uint64_t)kb * 1024;
	return 0;
}

int capy_host_mem_read(struct capy_host_mem *h, struct capy_err *err)
{
	const char *path = getenv("CAPY_MEMINFO"), *lock = getenv("CAPY_MEMLOCK");
	struct rlimit rl;
	FILE *f;

	if (!path || !*path)
		path = "/proc/meminfo";
	memset(h, 0, sizeof(*h));
	snprintf(h->meminfo, sizeof(h->meminfo), "%s", path);
	h->available = CAPY_PLAN_UNKNOWN;
	/* /proc files have no size to read by: read what comes (the line is near the top). */
	if ((f = fopen(path, "r"))) {
		char text[16384];
		size_t len = fread(text, 1, sizeof(text) - 1, f);
		fclose(f);
		text[len] = 0;
		if (capy_host_mem_parse(text, &h->available) < 0)
			return capy_err_set(err, CAPY_EFORMAT, "'%s': no MemAvailable line in kB", path);
	}
	if (lock && *lock) {
		struct capy_err e2 = { 0 };
		if (!strcmp(lock, "unlimited"))
			h->memlock = CAPY_PLAN_UNKNOWN;
		else if (capy_parse_size(lock, &h->memlock, &e2) < 0)
			return capy_err_set(err, CAPY_EFORMAT, "CAPY_MEMLOCK: %s", e2.msg);
	} else if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
		h->memlock = rl.rlim_cur == RLIM_INFINITY ? CAPY_PLAN_UNKNOWN : (uint64_t)rl.rlim_cur;
	} else {
		h->memlock = 0;
	}
	return 0;
}

/* --- expert offload's buffers ------------------------------------------------------------- */

static uint64_t moe_k(const struct capy_model_config *c)
{
	return c->n_experts_per_tok ? c->n_experts_per_tok : 1;
}

uint64_t capy_plan_offload_dev(const struct capy_artifact *a, const struct capy_model_config *c, uint64_t T)
{
	return al(a->nstacks * c->n_experts * 4) + 2 * al(T * moe_k(c) * 4);
}

void capy_plan_offload_hand(struct capy_plan_hand *h, const struct capy_artifact *a, const struct capy_model_config *c,
			    uint64_t T)
{
	const uint64_t S = T * moe_k(c), H = c->hidden_size;

	h->n_misses = 0;
	h->expert = al(4);
	h->miss_slot = h->expert + al(S * 4);
	h->x_row = h->miss_slot + al(S * 4);
	h->x = h->x_row + al(S * 4);
	h->out = h->x + al(T * H * 4);
	h->route = h->out + al(S * H * 4);
	h->job = h->route + al(a->nstacks * S * 4);
	h->bytes = h->job + a->nstacks * CAPY_PLAN_JOB_BYTES;
}

uint64_t capy_plan_offload_host(const struct capy_artifact *a, const struct capy_model_config *c, uint64_t T)
{
	struct capy_plan_hand h;

	capy_plan_offload_hand(&h, a, c, T);
	return h.bytes;
}

/* --- the plan ------------------------------------------------------------------------------ */

int capy_plan_compute(struct capy_plan *p, const struct capy_artifact *a, const struct capy_model_config *c,
		      const struct capy_plan_opts *o, const struct capy_host_mem *h, struct capy_err *err)
{
	struct capy_plan_range *r = NULL;
	struct capy_kv_fields *lay;
	struct capy_plan_scratch s;
	uint64_t resident;
	size_t n;
	int n_kv, n_gdn, n_ple, rc;

	memset(p, 0, sizeof(*p));
	p->o = *o;
	p->family = c->family;
	p->has_mtp = capy_artifact_find(a, "mtp.fc.weight") != NULL;
	p->mtp = o->mtp && p->has_mtp;
	if (!p->o.max_seqs)
		p->o.max_seqs = 1;
	if (!p->o.step_tokens)
		p->o.step_tokens = 512;
	if (h) {
		p->host = *h;
	} else {
		p->host.available = CAPY_PLAN_UNKNOWN;
		p->host.memlock = CAPY_PLAN_UNKNOWN;
	}
	if ((rc = capy_plan_ranges(a, false, p->mtp, &r, &n, &p->weights, err)) < 0)
		return rc;
	free(r);
	if ((rc = capy_plan_ranges(a, true, p->mtp, &r, &n, &p->weights_all, err)) < 0)
		return rc;
	free(r);
	p->small = capy_plan_small_floats(c) * 4 + (capy_rope_dims(c) / 2 + 1) * 4;

	capy_plan_layer_counts(c, &n_kv, &n_gdn, &n_ple);
	n_kv += p->mtp; /* the head's layer has its rows in every page, after the main layers' */
	if (!(lay = calloc((size_t)n_kv + 1, sizeof(*lay))))
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	rc = capy_kv_page_layout(c, p->o.kv, n_kv, CAPY_PLAN_ALIGN, lay, &p->page_tokens, &p->page_bytes, err);
	free(lay);
	if (rc < 0)
		return rc;
	if (p->o.max_context)
		p->pages = capy_kv_pages_needed(p->o.max_seqs * p->o.max_context, p->o.max_seqs, p->page_tokens);
	p->kv = p->pages * p->page_bytes;
	p->pages_held = p->pages;
	p->state_bytes = capy_plan_state_floats(c) * 4;
	/* each sequence's own state and the ones a verification window keeps (engine.c's kept) */
	p->states = p->o.max_seqs * (1 + p->o.kept_states) * p->state_bytes;
	capy_plan_scratch(&s, a, c, p->o.step_tokens, p->mtp);
	p->scratch = s.device;
	p->mask_rows = s.logits_rows;
	p->masks = s.smp_mask;
	p->host_staging = s.host;
	p->context_cap = capy_plan_context_cap(0, p->o.max_context);
	p->context = capy_plan_attn_ws(c, p->o.step_tokens, p->context_cap) +
		     capy_plan_sel_bytes(c, p->o.step_tokens, p->context_cap);
	p->fixed = p->weights + p->small + p->kv + p->states + p->scratch + p->context;

	/* The MTP head's stack only with the head (an engine without it neither uploads it nor,
	 * offloading, keeps it in host RAM: offload.c). */
	for (size_t i = 0; i < a->nstacks; i++) {
		if (!p->mtp && capy_plan_is_mtp(a->stacks[i].name))
			continue;
		p->moe_layers++;
		p->experts += a->stacks[i].count;
		p->expert_bytes += a->stacks[i].count * a->stacks[i].stride;
		p->slot_bytes = CAPY_MAX(p->slot_bytes, a->stacks[i].stride);
	}
	/* All resident: the device tensors in one upload, as without a plan. Otherwise the fixed
	 * parts, then as many slots as the rest holds (a slot of the largest stride is at least
	 * any expert's record, so slots == experts implies everything fitted above). */
	resident = p->fixed - p->weights + p->weights_all;
	p->device_resident = resident;
	const bool capped = p->o.expert_slots < 0 || (p->o.expert_slots > 0 && (uint64_t)p->o.expert_slots < p->experts);
	if (!p->experts || ((!p->o.gpu_mem || resident <= p->o.gpu_mem) && !capped)) {
		p->all_resident = true;
		p->slots = p->experts;
		p->device = resident;
	} else {
		p->offload_dev = capy_plan_offload_dev(a, c, p->o.step_tokens);
		p->fixed += p->offload_dev;
		const uint64_t held = capy_kv_pages_needed(p->o.max_seqs * CAPY_MIN(p->o.max_context, CAPY_PLAN_KV_HELD),
							   p->o.max_seqs, p->page_tokens);
		p->elastic = held < p->pages;
		p->pages_held = p->elastic ? held : p->pages;
		/* the slots count from the fixed parts with only the held pages */
		const uint64_t grown = (p->pages - p->pages_held) * p->page_bytes, fixed = p->fixed - grown;
		p->slots = p->experts;
		if (p->o.gpu_mem)
			p->slots = fixed < p->o.gpu_mem && p->slot_bytes ? CAPY_MIN(p->experts, (p->o.gpu_mem - fixed) / p->slot_bytes)
									 : 0;
		if (p->o.expert_slots < 0)
			p->slots = 0;
		else if (p->o.expert_slots > 0)
			p->slots = CAPY_MIN(p->slots, (uint64_t)p->o.expert_slots);
		p->pool = p->slots * p->slot_bytes;
		if (p->elastic)
			p->pool = p->pages_held * p->page_bytes + CAPY_MAX(p->pool, grown);
		p->device = (p->elastic ? fixed - p->pages_held * p->page_bytes : fixed) + p->pool;
		p->host_experts = p->expert_bytes;
		p->host_staging += capy_plan_offload_host(a, c, p->o.step_tokens);
	}
	p->host_need = p->host_experts + p->host_staging;
	p->pinned = !p->host_experts || p->host.memlock == CAPY_PLAN_UNKNOWN || p->host.memlock >= p->host_experts;
	return 0;
}

static double mib(uint64_t b)
{
	return (double)b / MIB;
}

/* "unlimited" or "<n> MiB" */
static const char *limit_str(char *buf, size_t n, uint64_t v)
{
	if (v == CAPY_PLAN_UNKNOWN)
		snprintf(buf, n, "unlimited");
	else
		snprintf(buf, n, "%.1f MiB", mib(v));
	return buf;
}

int capy_plan_check(const struct capy_plan *p, struct capy_err *err)
{
	const char *budget = p->o.budget ? p->o.budget : "--gpu-mem";
	char lim[32];

	if (p->o.gpu_mem && p->fixed > p->o.gpu_mem)
		return capy_err_set(err, CAPY_ENOMEM,
				    "%s %.1f MiB is too small: the fixed parts need %.1f MiB (weights %.1f, attention cache "
				    "%.1f for %" PRIu64 " x %" PRIu64 " tokens, recurrent states %.1f, step buffers %.1f for "
				    "%" PRIu64 " tokens, attention workspace %.1f) before any routed expert",
				    budget, mib(p->o.gpu_mem), mib(p->fixed), mib(p->weights + p->small), mib(p->kv),
				    p->o.max_seqs, p->o.max_context, mib(p->states), mib(p->scratch), p->o.step_tokens,
				    mib(p->context));
	if (p->host.available != CAPY_PLAN_UNKNOWN && p->host_need > p->host.available)
		return capy_err_set(err, CAPY_ENOMEM,
				    "not enough host RAM: %.1f MiB needed (routed experts %.1f, staging buffers %.1f), "
				    "%.1f MiB free (MemAvailable in '%s'), page-locked limit %s (RLIMIT_MEMLOCK)",
				    mib(p->host_need), mib(p->host_experts), mib(p->host_staging), mib(p->host.available),
				    p->host.meminfo, limit_str(lim, sizeof(lim), p->host.memlock));
	return 0;
}

static const char *kv_name(enum capy_kv_dtype kv)
{
	return kv == CAPY_KV_F32 ? "f32" : kv == CAPY_KV_INT8 ? "int8" : "bf16";
}

/* One row of the table: a part, its MiB and its exact bytes, and a note. */
CAPY_PRINTF(4, 5) static void row(struct capy_buf *b, const char *part, uint64_t bytes, const char *fmt, ...)
{
	char note[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(note, sizeof(note), fmt, ap);
	va_end(ap);
	capy_buf_printf(b, "  %-20s %10.1f %14" PRIu64 "%s%s\n", part, mib(bytes), bytes, *note ? "  " : "", note);
}

void capy_plan_format(const struct capy_plan *p, const char *what, struct capy_buf *b)
{
	const char *budget = p->o.budget ? p->o.budget : "--gpu-mem";
	char lim[32];

	capy_buf_printf(b, "memory plan of %s (%s) on one GPU", what, capy_family_name(p->family));
	if (p->o.gpu_mem)
		capy_buf_printf(b, " with %s %.1f MiB\n", budget, mib(p->o.gpu_mem));
	else if (p->all_resident)
		capy_buf_printf(b, " (no %s: everything resident)\n", budget);
	else
		capy_buf_printf(b, " (no %s; the routed-expert slots capped at %" PRIu64 ")\n", budget, p->slots);
	capy_buf_printf(b, "  %" PRIu64 " sequence%s of %" PRIu64 " tokens, steps of %" PRIu64 " tokens, KV cache %s\n",
			p->o.max_seqs, p->o.max_seqs == 1 ? "" : "s", p->o.max_context, p->o.step_tokens,
			kv_name(p->o.kv));
	capy_buf_printf(b, "device memory                 MiB          bytes\n");
	row(b, "weights (non-expert)", p->weights, "%s",
	    p->mtp ? "with the MTP head (mtp.*)" : p->has_mtp ? "without the MTP head (mtp.*: --spec mtp)" : "");
	row(b, "small vectors", p->small, "%s", "");
	if (p->elastic)
		row(b, "attention cache", p->kv,
		    "%" PRIu64 " pages of %" PRIu64 " tokens, %" PRIu64 " bytes each; elastic: %" PRIu64
		    " held, the rest taken from the slots as contexts grow",
		    p->pages, p->page_tokens, p->page_bytes, p->pages_held);
	else
		row(b, "attention cache", p->kv, "%" PRIu64 " pages of %" PRIu64 " tokens, %" PRIu64 " bytes each", p->pages,
		    p->page_tokens, p->page_bytes);
	if (p->o.kept_states)
		row(b, "recurrent states", p->states, "%" PRIu64 " x (1 + %" PRIu64 " kept for drafts) x %" PRIu64 " bytes",
		    p->o.max_seqs, p->o.kept_states, p->state_bytes);
	else
		row(b, "recurrent states", p->states, "%" PRIu64 " x %" PRIu64 " bytes", p->o.max_seqs, p->state_bytes);
	row(b, "step buffers", p->scratch, "%" PRIu64 " tokens; token masks %" PRIu64 " x %" PRIu64 " bytes",
	    p->o.step_tokens, p->mask_rows, p->mask_rows ? p->masks / p->mask_rows : 0);
	row(b, "attention workspace", p->context, "%" PRIu64 " tokens of context", p->context_cap);
	row(b, "fixed parts", p->fixed, "%s", "");
	if (!p->experts)
		row(b, "routed experts", 0, "none (a dense model)");
	else if (p->all_resident)
		row(b, "routed experts", p->weights_all - p->weights,
		    "all %" PRIu64 " experts resident (%" PRIu64 " layers, slots of %" PRIu64 " bytes)", p->experts,
		    p->moe_layers, p->slot_bytes);
	else {
		row(b, "offload buffers", p->offload_dev, "slot maps of %" PRIu64 " layers, the step's slot ids", p->moe_layers);
		row(b, "routed-expert slots", p->slots * p->slot_bytes,
		    "%" PRIu64 " slots of %" PRIu64 " bytes: %" PRIu64 " of %" PRIu64 " experts resident", p->slots,
		    p->slot_bytes, p->slots, p->experts);
		if (p->elastic) /* the rows above count the whole cache in the fixed parts */
			row(b, "KV shared with slots", p->kv - p->pages_held * p->page_bytes,
			    "the attention cache beyond the held pages (not counted again in the total)");
	}
	if (p->o.gpu_mem)
		row(b, "total", p->device, "of %.1f MiB", mib(p->o.gpu_mem));
	else
		row(b, "total", p->device, "%s", "");
	capy_buf_printf(b, "host memory                   MiB          bytes\n");
	if (p->host_experts && p->pinned)
		row(b, "routed experts", p->host_experts, "page-locked (RLIMIT_MEMLOCK %s)",
		    limit_str(lim, sizeof(lim), p->host.memlock));
	else if (p->host_experts)
		row(b, "routed experts", p->host_experts,
		    "mapped artifact (not page-locked, slower): RLIMIT_MEMLOCK %s is below that",
		    limit_str(lim, sizeof(lim), p->host.memlock));
	else
		row(b, "routed experts", 0, "none (all on the GPU)");
	row(b, "staging buffers", p->host_staging, "page-locked%s", p->all_resident ? "" : ", with the CPU experts' hand-over");
	if (p->host.available != CAPY_PLAN_UNKNOWN)
		row(b, "needed", p->host_need, "of %.1f MiB available (MemAvailable in %s)", mib(p->host.available),
		    p->host.meminfo);
	else
		row(b, "needed", p->host_need, "(available RAM unknown: no %s)", p->host.meminfo);
}

void capy_plan_summary(const struct capy_plan *p, char *buf, size_t size)
{
	char experts[160];

	if (!p->experts)
		snprintf(experts, sizeof(experts), "no routed experts");
	else if (p->all_resident)
		snprintf(experts, sizeof(experts), "routed experts %.1f MiB: all %" PRIu64 " resident",
			 mib(p->weights_all - p->weights), p->experts);
	else
		snprintf(experts, sizeof(experts),
			 "%" PRIu64 " expert slots of %.3f MiB: %" PRIu64 " of %" PRIu64 " experts resident, the rest %s",
			 p->slots, mib(p->slot_bytes), p->slots, p->experts,
			 p->pinned ? "page-locked in host RAM" : "in the mapped artifact (not page-locked, slower)");
	char kv[96] = "";
	if (p->elastic)
		snprintf(kv, sizeof(kv), ", elastic: %" PRIu64 " held, the rest shared with the slots", p->pages_held);
	snprintf(buf, size,
		 "plan: %.1f MiB fixed (weights %.1f%s, attention cache %.1f = %" PRIu64 " pages%s, states %.1f, step "
		 "buffers %.1f, attention workspace %.1f) + %s; %.1f MiB in all",
		 mib(p->fixed), mib(p->weights + p->small), p->mtp ? " with the MTP head" : "", mib(p->kv), p->pages, kv,
		 mib(p->states),
		 mib(p->scratch), mib(p->context), experts, mib(p->device));
}
