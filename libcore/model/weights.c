/* weights.c - binding an artifact's tensors to the per-layer structures every backend
 * reads, checking every name, dtype and shape the configuration implies. Matrices stay in
 * the mapped file; norms, conv kernels and gate parameters are copied to fp32 (small). */
#include "weights.h"
#include "../quant/floats.h"
#include "../quant/nvfp4.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <math.h>

struct binder {
	const struct capy_artifact *a;
	const struct capy_model_config *c;
	struct capy_weights *w;
	struct capy_err *err;
	int rc;
};

static const struct capy_tensor_info *find(struct binder *b, const char *fmt, ...) CAPY_PRINTF(2, 3);

static const struct capy_tensor_info *find(struct binder *b, const char *fmt, ...)
{
	char name[512];
	const struct capy_tensor_info *t;
	va_list ap;

	if (b->rc < 0)
		return NULL;
	va_start(ap, fmt);
	vsnprintf(name, sizeof(name), fmt, ap);
	va_end(ap);
	t = capy_artifact_find(b->a, name);
	if (!t)
		b->rc = capy_err_set(b->err, CAPY_EFORMAT, "'%s': tensor '%s' is missing", b->a->path, name);
	return t;
}

static bool shape_is(struct binder *b, const struct capy_tensor_info *t, int ndim, const uint64_t *shape)
{
	bool ok = t->ndim == ndim;

	for (int i = 0; ok && i < ndim; i++)
		ok = t->shape[i] == shape[i];
	if (!ok && b->rc == 0)
		b->rc = capy_err_set(b->err, CAPY_EFORMAT, "'%s': tensor '%s' has an unexpected shape for this config",
				     b->a->path, t->name);
	return ok;
}

#define SHAPE(...) ((const uint64_t[]){ __VA_ARGS__ })
#define NDIM(...) ((int)(sizeof((uint64_t[]){ __VA_ARGS__ }) / sizeof(uint64_t)))

static float *own(struct binder *b, uint64_t n)
{
	struct capy_weights *w = b->w;
	float *p;

	if (b->rc < 0)
		return NULL;
	if (w->nowned == ARRAY_SIZE(w->owned)) {
		b->rc = capy_err_set(b->err, CAPY_EUNSUPPORTED, "too many small tensors");
		return NULL;
	}
	p = calloc(n ? n : 1, sizeof(float));
	if (!p) {
		b->rc = capy_err_set(b->err, CAPY_ENOMEM, "out of memory");
		return NULL;
	}
	w->owned[w->nowned++] = p;
	return p;
}

static bool float_dtype(enum capy_dtype dt)
{
	return dt == CAPY_DT_F32 || dt == CAPY_DT_F16 || dt == CAPY_DT_BF16;
}

/* A small float tensor of n values copied to fp32; with one_plus, stored as 1 + w. */
static float *vec(struct binder *b, uint64_t n, bool one_plus, const char *name)
{
	const struct capy_tensor_info *t = find(b, "%s", name);
	uint64_t count = 1;
	float *p;

	if (!t)
		return NULL;
	for (int i = 0; i < t->ndim; i++)
		count *= t->shape[i];
	if (!float_dtype(t->dtype) || count != n) {
		b->rc = capy_err_set(b->err, CAPY_EFORMAT, "'%s': tensor '%s' should hold %" PRIu64 " floats",
				     b->a->path, name, n);
		return NULL;
	}
	p = own(b, n);
	if (!p)
		return NULL;
	capy_floats_to_f32(capy_artifact_data(b->a, t->offset), t->dtype, n, p); /* a float dtype: checked */
	if (one_plus)
		for (uint64_t i = 0; i < n; i++)
			p[i] = 1.0f + p[i];
	return p;
}

static void linear_at(struct binder *b, struct capy_linear *l, const struct capy_tensor_info *t,
		      uint64_t slice, uint64_t n, uint64_t k)
{
	if (b->rc < 0)
		return;
	if (!float_dtype(t->dtype) && t->dtype != CAPY_DT_NVFP4) {
		b->rc = capy_err_set(b->err, CAPY_EFORMAT, "'%s': tensor '%s' is %s, not a weight type",
				     b->a->path, t->name, capy_dtype_name(t->dtype));
		return;
	}
	b->rc = capy_linear_init(l, t->dtype, n, k, t->dtype == CAPY_DT_NVFP4 ? t->nparts : 0, t->parts,
				 capy_artifact_data(b->a, capy_tensor_slice_offset(t, slice)), b->err);
	if (b->rc < 0) {
		capy_err_prefix(b->err, "'%s': tensor '%s'", b->a->path, t->name);
		return;
	}
}

static void linear(struct binder *b, struct capy_linear *l, uint64_t n, uint64_t k, const char *name)
{
	const struct capy_tensor_info *t = find(b, "%s", name);

	if (t && shape_is(b, t, 2, SHAPE(n, k)))
		linear_at(b, l, t, 0, n, k);
}

static void bind_attention(struct binder *b, struct capy_attn_w *a, const char *p, bool qsa)
{
	const struct capy_model_config *c = b->c;
	uint64_t h = c->hidden_size, hd = c->head_dim;
	char n[512];

#define NAME(sfx) (snprintf(n, sizeof(n), "%s%s", p, sfx), n)
	linear(b, &a->q, c->n_heads * hd * 2, h, NAME("self_attn.q_proj.weight"));
	linear(b, &a->k, c->n_kv_heads * hd, h, NAME("self_attn.k_proj.weight"));
	linear(b, &a->v, c->n_kv_heads * hd, h, NAME("self_attn.v_proj.weight"));
	linear(b, &a->o, h, c->n_heads * hd, NAME("self_attn.o_proj.weight"));
	a->q_norm = vec(b, hd, true, NAME("self_attn.q_norm.weight"));
	a->k_norm = vec(b, hd, true, NAME("self_attn.k_norm.weight"));
	a->qsa = qsa;
	if (qsa) {
		uint64_t ih = c->indexer_head_dim;
		linear(b, &a->idx_qk, (c->indexer_n_heads + c->indexer_kv_heads) * ih, h,
		       NAME("self_attn.indexer.index_qk_proj.weight"));
		a->idx_q_norm = vec(b, ih, true, NAME("self_attn.indexer.q_layernorm.weight"));
		a->idx_k_norm = vec(b, ih, true, NAME("self_attn.indexer.k_layernorm.weight"));
	}
}

static void bind_gdn(struct binder *b, struct capy_gdn_w *g, const char *p)
{
	const struct capy_model_config *c = b->c;
	uint64_t h = c->hidden_size, nv = c->linear_value_heads, dv = c->linear_value_head_dim;
	uint64_t conv = 2 * c->linear_key_heads * c->linear_key_head_dim + nv * dv;
	char n[512];

	linear(b, &g->qkv, conv, h, NAME("linear_attn.in_proj_qkv.weight"));
	linear(b, &g->z, nv * dv, h, NAME("linear_attn.in_proj_z.weight"));
	linear(b, &g->b, nv, h, NAME("linear_attn.in_proj_b.weight"));
	linear(b, &g->a, nv, h, NAME("linear_attn.in_proj_a.weight"));
	linear(b, &g->out, h, nv * dv, NAME("linear_attn.out_proj.weight"));
	g->conv = vec(b, conv * c->linear_conv_kernel, false, NAME("linear_attn.conv1d.weight"));
	g->neg_a = vec(b, nv, false, NAME("linear_attn.A_log"));
	g->dt_bias = vec(b, nv, false, NAME("linear_attn.dt_bias"));
	g->norm = vec(b, dv, false, NAME("linear_attn.norm.weight"));
	if (g->neg_a)
		for (uint64_t i = 0; i < nv; i++)
			g->neg_a[i] = -expf(g->neg_a[i]);
}

static void bind_mlp(struct binder *b, struct capy_mlp_w *m, const char *p, const char *mod, uint64_t inter)
{
	uint64_t h = b->c->hidden_size;
	char n[512];

	snprintf(n, sizeof(n), "%s%s.gate_up_proj.weight", p, mod);
	linear(b, &m->gate_up, 2 * inter, h, n);
	snprintf(n, sizeof(n), "%s%s.down_proj.weight", p, mod);
	linear(b, &m->down, h, inter, n);
}

static void bind_moe(struct binder *b, struct capy_moe_w *m, const char *p)
{
	const struct capy_model_config *c = b->c;
	uint64_t h = c->hidden_size, e = c->n_experts, i = c->moe_intermediate_size;
	const struct capy_tensor_info *gu, *dn;
	char n[512];

	linear(b, &m->router, e, h, NAME("mlp.gate.weight"));
	gu = find(b, "%smlp.experts.gate_up_proj", p);
	dn = find(b, "%smlp.experts.down_proj", p);
	if (!gu || !dn || !shape_is(b, gu, 3, SHAPE(e, 2 * i, h)) || !shape_is(b, dn, 3, SHAPE(e, h, i)))
		return;
	m->gate_up = calloc(e, sizeof(*m->gate_up));
	m->down = calloc(e, sizeof(*m->down));
	if (!m->gate_up || !m->down) {
		b->rc = capy_err_set(b->err, CAPY_ENOMEM, "out of memory");
		return;
	}
	b->w->owned_linears[b->w->nowned_linears++] = m->gate_up;
	b->w->owned_linears[b->w->nowned_linears++] = m->down;
	for (uint64_t x = 0; x < e; x++) {
		linear_at(b, &m->gate_up[x], gu, x, 2 * i, h);
		linear_at(b, &m->down[x], dn, x, h, i);
	}
	bind_mlp(b, &m->shared, p, "mlp.shared_expert", c->shared_expert_intermediate_size);
	linear(b, &m->shared_gate, 1, h, NAME("mlp.shared_expert_gate.weight"));
}

static void bind_hc(struct binder *b, struct capy_hc_w *hc, const char *p, const char *mod, bool inject)
{
	const struct capy_model_config *c = b->c;
	uint64_t hh = c->hc_count * c->hidden_size;
	char n[512];

	snprintf(n, sizeof(n), "%s%s.hc_norm.weight", p, mod);
	hc->norm = vec(b, hh, true, n);
	snprintf(n, sizeof(n), "%s%s.input_mix_weight_down.weight", p, mod);
	linear(b, &hc->down, c->hc_lowrank, hh, n);
	snprintf(n, sizeof(n), "%s%s.input_mix_weight_up.weight", p, mod);
	linear(b, &hc->up, hh, c->hc_lowrank, n);
	hc->has_inject = inject;
	if (inject) {
		snprintf(n, sizeof(n), "%s%s.block_inject_weight.weight", p, mod);
		linear(b, &hc->inject, c->hc_count, hh, n);
	}
}

static void bind_ple(struct binder *b, struct capy_ple_w *pl, const char *p, uint64_t index)
{
	const struct capy_model_config *c = b->c;
	uint64_t hh = c->hc_count * c->hidden_size, heads = (c->ngram_size - 1) * c->heads_per_ngram;
	const struct capy_tensor_info *t;
	uint64_t *voc, off = 0;
	char n[512];

	pl->index = index;
	pl->hd = capy_ple_head_dim(c);
	pl->rows = capy_ple_table_rows(c, index);
	t = find(b, "%sple.ple_embedding.ngram_embedding.weight", p);
	if (!t || !shape_is(b, t, 2, SHAPE(pl->rows, pl->hd)))
		return;
	if (!float_dtype(t->dtype)) {
		b->rc = capy_err_set(b->err, CAPY_EFORMAT, "'%s': tensor '%s' is not a float table", b->a->path, t->name);
		return;
	}
	pl->table = capy_artifact_data(b->a, t->offset);
	pl->table_offset = t->offset;
	pl->table_dtype = t->dtype;
	voc = malloc((index + 1) * heads * sizeof(*voc));
	if (!voc) {
		b->rc = capy_err_set(b->err, CAPY_ENOMEM, "out of memory");
		return;
	}
	capy_ple_head_vocabs(c, (index + 1) * heads, voc);
	for (uint64_t j = 0; j < heads; j++) {
		pl->vocab[j] = voc[index * heads + j];
		pl->offset[j] = off;
		off += pl->vocab[j];
	}
	free(voc);
	capy_ple_multipliers(c, index, pl->mult);
	linear(b, &pl->key, hh, c->ple_embed_dim, NAME("ple.key_proj.weight"));
	linear(b, &pl->value, c->hidden_size, c->ple_embed_dim, NAME("ple.value_proj.weight"));
	pl->norm_key = vec(b, hh, true, NAME("ple.norm_key.weight"));
	pl->norm_query = vec(b, hh, true, NAME("ple.norm_query.weight"));
	pl->norm_conv = vec(b, hh, true, NAME("ple.norm_conv.weight"));
	pl->conv = vec(b, hh * c->ple_conv_kernel, false, NAME("ple.conv1d.weight"));
}
#undef NAME

/* A decoder layer's two norms (not qwen4_exp, whose layers mix hyper-connection streams). */
static void bind_layer_norms(struct binder *b, struct capy_layer_w *l, const char *p)
{
	char n[512];

	snprintf(n, sizeof(n), "%sinput_layernorm.weight", p);
	l->in_norm = vec(b, b->c->hidden_size, true, n);
	snprintf(n, sizeof(n), "%spost_attention_layernorm.weight", p);
	l->post_norm = vec(b, b->c->hidden_size, true, n);
}

int capy_weights_bind(struct capy_weights *w, const struct capy_artifact *a, const struct capy_model_config *c,
		      struct capy_err *err)
{
	struct binder b = { a, c, w, err, 0 };
	const struct capy_tensor_info *t;
	bool q4 = c->family == CAPY_FAMILY_QWEN4_EXP;
	uint64_t ple_index = 0;

	w->layers = calloc(c->n_layers, sizeof(*w->layers));
	if (!w->layers)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	t = find(&b, "embed_tokens.weight");
	if (t && shape_is(&b, t, 2, SHAPE(c->vocab_size, c->hidden_size))) {
		if (!float_dtype(t->dtype))
			b.rc = capy_err_set(err, CAPY_EUNSUPPORTED, "'%s': embed_tokens.weight is %s", a->path,
					    capy_dtype_name(t->dtype));
		w->embed = capy_artifact_data(a, t->offset);
		w->embed_dtype = t->dtype;
	}
	for (uint64_t i = 0; i < c->n_layers && b.rc == 0; i++) {
		struct capy_layer_w *l = &w->layers[i];
		char p[64];
		snprintf(p, sizeof(p), "layers.%" PRIu64 ".", i);
		l->type = (enum capy_layer_type)c->layer_types[i];
		l->moe = c->moe_layer[i];
		l->kv_slot = l->gdn_slot = l->ple_slot = -1;
		if (!q4) {
			bind_layer_norms(&b, l, p);
		} else {
			bind_hc(&b, &l->hc_attn, p, "attn_hyper_connection", true);
			bind_hc(&b, &l->hc_mlp, p, "mlp_hyper_connection", true);
			if (c->ple_layer[i]) {
				l->has_ple = true;
				l->ple_slot = w->n_ple++;
				bind_ple(&b, &l->ple, p, ple_index++);
			}
		}
		if (l->type == CAPY_LAYER_LINEAR) {
			l->gdn_slot = w->n_gdn++;
			bind_gdn(&b, &l->gdn, p);
		} else {
			l->kv_slot = w->n_kv++;
			bind_attention(&b, &l->attn, p, l->type == CAPY_LAYER_QSA);
		}
		if (l->moe)
			bind_moe(&b, &l->moe_w, p);
		else
			bind_mlp(&b, &l->mlp, p, "mlp", c->intermediate_size);
	}
	if (q4)
		bind_hc(&b, &w->hc_final, "", "hyper_connection_mixer", false);
	else
		w->final_norm = vec(&b, c->hidden_size, true, "norm.weight");
	if (c->tie_word_embeddings && !capy_artifact_find(a, "lm_head.weight"))
		linear(&b, &w->lm_head, c->vocab_size, c->hidden_size, "embed_tokens.weight");
	else
		linear(&b, &w->lm_head, c->vocab_size, c->hidden_size, "lm_head.weight");
	if (b.rc < 0)
		capy_weights_release(w);
	return b.rc;
}

/* Whether a's head was kept as published (capy-convert before capy knew qwen4_exp's head
 * stored its tensors unchecked, experts per expert): binding it would name a missing tensor
 * where the fix is to convert again. */
static bool mtp_as_published(const struct capy_artifact *a)
{
	const cJSON *r = cJSON_GetObjectItemCaseSensitive(a->provenance, "recipe");
	const cJSON *m = cJSON_GetObjectItemCaseSensitive(r, "mtp");

	return cJSON_IsString(m) && !strcmp(m->valuestring, "as-published");
}

int capy_weights_bind_mtp(struct capy_weights *w, const struct capy_artifact *a, const struct capy_model_config *c,
			  struct capy_err *err)
{
	struct binder b = { a, c, w, err, 0 };
	struct capy_mtp_w *m = &w->mtp;
	struct capy_layer_w *l = &m->layer;
	const char *p = "mtp.layers.0.";
	bool q4 = c->family == CAPY_FAMILY_QWEN4_EXP;
	uint64_t H = c->hidden_size;

	if (!capy_artifact_find(a, "mtp.fc.weight"))
		return capy_err_set(err, CAPY_EUNSUPPORTED, "'%s' has no MTP head (no mtp.* tensors)", a->path);
	if (mtp_as_published(a))
		return capy_err_set(err, CAPY_EUNSUPPORTED, "'%s': its MTP head was kept as published, unchecked (a "
				    "capy-convert older than capy's qwen4_exp head): convert the checkpoint again", a->path);
	if (c->mtp_layers != 1)
		return capy_err_set(err, CAPY_EUNSUPPORTED, "'%s': the config declares %" PRIu64 " MTP layers (capy runs "
				    "exactly one)", a->path, c->mtp_layers);
	memset(m, 0, sizeof(*m));
	linear(&b, &m->fc, H, 2 * H, "mtp.fc.weight");
	m->norm_emb = vec(&b, H, true, "mtp.pre_fc_norm_embedding.weight");
	m->norm_hidden = vec(&b, H, true, "mtp.pre_fc_norm_hidden.weight");
	m->norm = vec(&b, H, true, "mtp.norm.weight");
	l->type = capy_mtp_layer_type(c);
	l->moe = c->family != CAPY_FAMILY_QWEN3_5;
	l->kv_slot = w->n_kv;
	l->gdn_slot = l->ple_slot = -1;
	if (q4) {
		bind_hc(&b, &l->hc_attn, p, "attn_hyper_connection", true);
		bind_hc(&b, &l->hc_mlp, p, "mlp_hyper_connection", true);
	} else {
		bind_layer_norms(&b, l, p);
	}
	bind_attention(&b, &l->attn, p, l->type == CAPY_LAYER_QSA);
	if (l->moe)
		bind_moe(&b, &l->moe_w, p);
	else
		bind_mlp(&b, &l->mlp, p, "mlp", c->intermediate_size);
	if (q4)
		bind_hc(&b, &m->mixer, "mtp.", "hyper_connection_mixer", false);
	if (b.rc < 0) {
		memset(m, 0, sizeof(*m)); /* what it owns is in w->owned*, freed by capy_weights_release */
		capy_err_prefix(err, "MTP head");
		return b.rc;
	}
	m->present = true;
	return 0;
}

void capy_weights_release(struct capy_weights *w)
{

	for (size_t i = 0; i < w->nowned; i++)
		free(w->owned[i]);
	for (size_t i = 0; i < w->nowned_linears; i++)
		free(w->owned_linears[i]);
	free(w->layers);
	memset(w, 0, sizeof(*w));
}

static void each_mlp(const struct capy_mlp_w *m, void (*fn)(const struct capy_linear *, void *), void *ctx)
{
	fn(&m->gate_up, ctx);
	fn(&m->down, ctx);
}

static void each_hc(const struct capy_hc_w *h, void (*fn)(const struct capy_linear *, void *), void *ctx)
{
	fn(&h->down, ctx);
	fn(&h->up, ctx);
	if (h->has_inject)
		fn(&h->inject, ctx);
}

/* The mixer's and the MLP's matrices of one layer. */
static void each_layer_linear(const struct capy_layer_w *l, const struct capy_model_config *c,
			      void (*fn)(const struct capy_linear *l, void *ctx), void *ctx)
{
	if (l->type == CAPY_LAYER_LINEAR) {
		const struct capy_linear *g[] = { &l->gdn.qkv, &l->gdn.z, &l->gdn.b, &l->gdn.a, &l->gdn.out };
		for (size_t j = 0; j < ARRAY_SIZE(g); j++)
			fn(g[j], ctx);
	} else {
		const struct capy_linear *g[] = { &l->attn.q, &l->attn.k, &l->attn.v, &l->attn.o };
		for (size_t j = 0; j < ARRAY_SIZE(g); j++)
			fn(g[j], ctx);
		if (l->attn.qsa)
			fn(&l->attn.idx_qk, ctx);
	}
	if (l->moe) {
		fn(&l->moe_w.router, ctx);
		for (uint64_t x = 0; x < c->n_experts; x++) {
			fn(&l->moe_w.gate_up[x], ctx);
			fn(&l->moe_w.down[x], ctx);
		}
		each_mlp(&l->moe_w.shared, fn, ctx);
		fn(&l->moe_w.shared_gate, ctx);
	} else {
		each_mlp(&l->mlp, fn, ctx);
	}
}

void capy_weights_each_mtp_linear(const struct capy_weights *w, const struct capy_model_config *c,
				  void (*fn)(const struct capy_linear *l, void *ctx), void *ctx)
{
	if (!w->mtp.present)
		return;
	fn(&w->mtp.fc, ctx);
	if (c->family == CAPY_FAMILY_QWEN4_EXP) {
		each_hc(&w->mtp.layer.hc_attn, fn, ctx);
		each_hc(&w->mtp.layer.hc_mlp, fn, ctx);
		each_hc(&w->mtp.mixer, fn, ctx);
	}
	each_layer_linear(&w->mtp.layer, c, fn, ctx);
}

void capy_weights_each_linear(const struct capy_weights *w, const struct capy_model_config *c,
			      void (*fn)(const struct capy_linear *l, void *ctx), void *ctx)
{
	bool q4 = c->family == CAPY_FAMILY_QWEN4_EXP;

	for (uint64_t i = 0; i < c->n_layers; i++) {
		const struct capy_layer_w *l = &w->layers[i];
		if (q4) {
			each_hc(&l->hc_attn, fn, ctx);
			each_hc(&l->hc_mlp, fn, ctx);
		}
		if (l->has_ple) {
			fn(&l->ple.key, ctx);
			fn(&l->ple.value, ctx);
		}
		each_layer_linear(l, c, fn, ctx);
	}
	if (q4)
		each_hc(&w->hc_final, fn, ctx);
	fn(&w->lm_head, ctx);
}

/* PLE n-gram hashing: the rule of the CPU backend's ple.c header comment. */
static int64_t pymod(int64_t a, int64_t m)
{
	int64_t r = a % m;
	return r < 0 ? r + m : r;
}

void capy_ple_row(const struct capy_ple_w *pl, uint64_t row, float *out)
{
	/* the table's dtype was checked a float one when it was bound */
	capy_floats_to_f32(pl->table + row * pl->hd * capy_dtype_size(pl->table_dtype), pl->table_dtype, pl->hd, out);
}

uint64_t capy_weights_touch_ple(const struct capy_weights *w, const struct capy_model_config *c)
{
	volatile uint8_t sink = 0;
	uint64_t pages = 0;

	for (uint64_t i = 0; w->n_ple && i < c->n_layers; i++) {
		const struct capy_ple_w *pl = &w->layers[i].ple;
		if (!w->layers[i].has_ple || !pl->table)
			continue;
		const uint64_t bytes = pl->rows * pl->hd * capy_dtype_size(pl->table_dtype);
		for (uint64_t o = 0; o < bytes; o += 4096, pages++)
			sink ^= pl->table[o];
	}
	(void)sink;
	return pages;
}

void capy_ple_ngram_rows(const struct capy_model_config *c, const struct capy_ple_w *pl, const int32_t *hist,
			 uint64_t p, uint64_t *out)
{
	uint64_t n = c->ngram_size, hpn = c->heads_per_ngram;
	int64_t eos = c->eos_ids[0], tok[16];

	/* tok[s]: the token s positions back, or EOS where that crosses an EOS or the start. */
	tok[0] = hist[p];
	for (uint64_t s = 1; s < n; s++) {
		bool ok = p >= s;
		for (uint64_t q = p - s; ok && q < p; q++)
			ok = hist[q] != eos;
		tok[s] = ok ? hist[p - s] : eos;
	}
	for (uint64_t order = 2; order <= n; order++) {
		uint64_t mixed = (uint64_t)tok[0] * (uint64_t)pl->mult[0];
		for (uint64_t s = 1; s < order; s++)
			mixed ^= (uint64_t)tok[s] * (uint64_t)pl->mult[s];
		for (uint64_t h = 0; h < hpn; h++) {
			uint64_t head = (order - 2) * hpn + h;
			out[head] = (uint64_t)pymod((int64_t)mixed, (int64_t)pl->vocab[head]) + pl->offset[head];
		}
	}
}

static uint64_t linear_bytes(const struct capy_linear *l)
{
	if (l->dtype == CAPY_DT_NVFP4) {
		struct capy_nvfp4_layout lay;
		capy_nvfp4_layout(l->n, l->k, l->nparts ? l->nparts : 1, &lay);
		return lay.slice_bytes;
	}
	return l->n * l->k * capy_dtype_size(l->dtype);
}

static uint64_t hc_bytes(const struct capy_hc_w *h)
{
	return linear_bytes(&h->down) + linear_bytes(&h->up) + (h->has_inject ? linear_bytes(&h->inject) : 0);
}

uint64_t capy_weights_decode_bytes(const struct capy_weights *w, const struct capy_model_config *c)
{
	uint64_t b = linear_bytes(&w->lm_head);
	bool q4 = c->family == CAPY_FAMILY_QWEN4_EXP;

	if (q4)
		b += hc_bytes(&w->hc_final);
	for (uint64_t i = 0; i < c->n_layers; i++) {
		const struct capy_layer_w *l = &w->layers[i];
		if (q4)
			b += hc_bytes(&l->hc_attn) + hc_bytes(&l->hc_mlp);
		if (l->has_ple)
			b += linear_bytes(&l->ple.key) + linear_bytes(&l->ple.value) +
			     (c->ngram_size - 1) * c->heads_per_ngram * l->ple.hd * capy_dtype_size(l->ple.table_dtype);
		if (l->attn.qsa)
			b += linear_bytes(&l->attn.idx_qk);
		if (l->type == CAPY_LAYER_LINEAR)
			b += linear_bytes(&l->gdn.qkv) + linear_bytes(&l->gdn.z) + linear_bytes(&l->gdn.b) +
			     linear_bytes(&l->gdn.a) + linear_bytes(&l->gdn.out);
		else
			b += linear_bytes(&l->attn.q) + linear_bytes(&l->attn.k) + linear_bytes(&l->attn.v) +
			     linear_bytes(&l->attn.o);
		if (l->moe)
			b += linear_bytes(&l->moe_w.router) + c->n_experts_per_tok *
				(linear_bytes(&l->moe_w.gate_up[0]) + linear_bytes(&l->moe_w.down[0])) +
			     linear_bytes(&l->moe_w.shared.gate_up) + linear_bytes(&l->moe_w.shared.down);
		else
			b += linear_bytes(&l->mlp.gate_up) + linear_bytes(&l->mlp.down);
	}
	return b;
}

uint64_t capy_widest_row(const struct capy_model_config *c)
{
	uint64_t hd = c->head_dim, w = c->hidden_size * (c->hc_count ? c->hc_count : 1);
	uint64_t conv = 2 * c->linear_key_heads * c->linear_key_head_dim + c->linear_value_heads * c->linear_value_head_dim;
	uint64_t v[] = { w, conv, c->n_heads * 2 * hd, 4 * c->linear_value_heads, c->n_experts,
			 2 * c->moe_intermediate_size, 2 * c->shared_expert_intermediate_size,
			 2 * c->intermediate_size, (c->indexer_n_heads + 1) * c->indexer_head_dim,
			 c->hc_lowrank, c->ple_embed_dim };

	for (size_t i = 0; i < ARRAY_SIZE(v); i++)
		w = CAPY_MAX(w, v[i]);
	return w;
}

uint64_t capy_rope_dims(const struct capy_model_config *c)
{
	return (uint64_t)((double)c->head_dim * c->partial_rotary_factor);
}

void capy_rope_inv_freq(const struct capy_model_config *c, float *out)
{
	uint64_t rot = capy_rope_dims(c);

	/* Each step in float32, as transformers computes it. */
	for (uint64_t i = 0; i < rot / 2; i++) {
		float ex = (float)(2 * i) / (float)rot;
		out[i] = 1.0f / powf((float)c->rope_theta, ex);
	}
}
