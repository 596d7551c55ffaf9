/* families.c - what each model family's checkpoint holds and what the artifact
 * stores for it: the plan, built from the text config (docs/artifact.md, "Names"). */
#include "convert-impl.h"

#include <math.h>

#define NAME_MAX_LEN 512

struct ctx {
	struct plan *p;
	const char *sp; /* source prefix of the current block, e.g. "model.language_model.layers.3." */
	const char *op; /* artifact prefix, e.g. "layers.3." */
	int rc;
};

static void *grow(void *ptr, size_t n, size_t *cap, size_t size)
{
	if (n < *cap)
		return ptr;
	*cap = *cap ? 2 * *cap : 64;
	return realloc(ptr, *cap * size);
}

static char *fmt(const char *f, ...)
{
	char buf[NAME_MAX_LEN];
	va_list ap;

	va_start(ap, f);
	vsnprintf(buf, sizeof(buf), f, ap);
	va_end(ap);
	return strdup(buf);
}

static bool ck_has(const struct plan *p, const char *name)
{
	return p->ck && capy_ckpt_find(p->ck, name);
}

/* Add a source; returns its index or -1 (error set in c). */
static int src(struct ctx *c, enum src_kind kind, char *name, int ndim, const uint64_t *shape,
	       bool optional)
{
	struct plan *p = c->p;
	struct plan_src *s;
	void *q;

	if (c->rc < 0 || !name) {
		free(name);
		if (c->rc == 0)
			c->rc = capy_err_set(p->err, CAPY_ENOMEM, "out of memory");
		return -1;
	}
	q = grow(p->srcs, p->nsrcs, &p->cap_srcs, sizeof(*p->srcs));
	if (!q) {
		free(name);
		c->rc = capy_err_set(p->err, CAPY_ENOMEM, "out of memory");
		return -1;
	}
	p->srcs = q;
	s = &p->srcs[p->nsrcs];
	memset(s, 0, sizeof(*s));
	s->name = name;
	s->kind = kind;
	s->ndim = ndim;
	s->optional = optional;
	for (int i = 0; i < ndim && i < CAPY_MAX_DIMS; i++)
		s->shape[i] = shape[i];
	return (int)p->nsrcs++;
}

static struct plan_out *out(struct ctx *c, char *name, int ndim, const uint64_t *shape, uint32_t nslices,
			    uint32_t per_slice, int stack, char *note)
{
	struct plan *p = c->p;
	struct plan_out *o;
	void *q;

	if (c->rc < 0 || !name || !note) {
		free(name);
		free(note);
		if (c->rc == 0)
			c->rc = capy_err_set(p->err, CAPY_ENOMEM, "out of memory");
		return NULL;
	}
	q = grow(p->outs, p->nouts, &p->cap_outs, sizeof(*p->outs));
	if (!q)
		goto oom;
	p->outs = q;
	o = &p->outs[p->nouts];
	memset(o, 0, sizeof(*o));
	o->bands = calloc((size_t)nslices * per_slice, sizeof(*o->bands));
	if (!o->bands)
		goto oom;
	o->name = name;
	o->source_note = note;
	o->ndim = ndim;
	for (int i = 0; i < ndim; i++)
		o->shape[i] = shape[i];
	o->nslices = nslices;
	o->per_slice = per_slice;
	o->stack = stack;
	o->aw = -1;
	o->rand_std = 0.02;
	p->nouts++;
	return o;
oom:
	free(name);
	free(note);
	c->rc = capy_err_set(p->err, CAPY_ENOMEM, "out of memory");
	return NULL;
}

/* Outputs live in a growing array: take pointers only after the last out() of a group. */
static struct plan_out *last_out(struct ctx *c, int back)
{
	return &c->p->outs[c->p->nouts - 1 - (size_t)back];
}

#define SHAPE(...) ((const uint64_t[]){ __VA_ARGS__ })
#define NDIM(...) ((int)(sizeof((uint64_t[]){ __VA_ARGS__ }) / sizeof(uint64_t)))

/* One tensor copied as it is: name sp+sfx -> op+sfx. */
static struct plan_out *plain_n(struct ctx *c, const char *sfx, int ndim, const uint64_t *shape,
				double mean, double std, bool optional)
{
	int s = src(c, SRC_PLAIN, fmt("%s%s", c->sp, sfx), ndim, shape, optional);
	struct plan_out *o;

	if (s < 0)
		return NULL;
	o = out(c, fmt("%s%s", c->op, sfx), ndim, shape, 1, 1, -1, strdup(c->p->srcs[s].name));
	if (!o)
		return NULL;
	o->bands[0] = (struct band){ s, 0, 0, ndim ? shape[0] : 1, 0 };
	o->rand_mean = mean;
	o->rand_std = std;
	return o;
}

#define plain(c, sfx, mean, std, ...) plain_n((c), (sfx), NDIM(__VA_ARGS__), SHAPE(__VA_ARGS__), (mean), (std), false)

/* A weight matrix [n, k] (BF16 or NVFP4) copied as it is. */
static struct plan_out *linear(struct ctx *c, const char *sfx, uint64_t n, uint64_t k)
{
	int s = src(c, SRC_LINEAR, fmt("%s%s", c->sp, sfx), 2, SHAPE(n, k), false);
	struct plan_out *o;

	if (s < 0)
		return NULL;
	o = out(c, fmt("%s%s", c->op, sfx), 2, SHAPE(n, k), 1, 1, -1, strdup(c->p->srcs[s].name));
	if (o) {
		o->linear = true;
		o->bands[0] = (struct band){ s, 0, 0, n, 0 };
	}
	return o;
}

/* gate and up projections [i, h] fused into one [2i, h] matrix (gate rows first). */
static void gate_up(struct ctx *c, const char *gate_sfx, const char *up_sfx, const char *out_sfx,
		    uint64_t i, uint64_t h)
{
	int g = src(c, SRC_LINEAR, fmt("%s%s", c->sp, gate_sfx), 2, SHAPE(i, h), false);
	int u = src(c, SRC_LINEAR, fmt("%s%s", c->sp, up_sfx), 2, SHAPE(i, h), false);
	struct plan_out *o;

	if (g < 0 || u < 0)
		return;
	o = out(c, fmt("%s%s", c->op, out_sfx), 2, SHAPE(2 * i, h), 1, 2, -1,
		fmt("%s + %s", c->p->srcs[g].name, c->p->srcs[u].name));
	if (!o)
		return;
	o->linear = true;
	o->bands[0] = (struct band){ g, 0, 0, i, 0 };
	o->bands[1] = (struct band){ u, 0, 0, i, 1 };
	if (c->rc == 0)
		plan_note(c->p, "gate_proj and up_proj fused into gate_up_proj (gate rows first)");
}

static int add_stack(struct ctx *c, char *name, uint64_t count)
{
	struct plan *p = c->p;
	void *q;

	if (c->rc < 0 || !name) {
		free(name);
		return -1;
	}
	q = grow(p->stacks, p->nstacks, &p->cap_stacks, sizeof(*p->stacks));
	if (!q) {
		free(name);
		c->rc = capy_err_set(p->err, CAPY_ENOMEM, "out of memory");
		return -1;
	}
	p->stacks = q;
	p->stacks[p->nstacks] = (struct plan_stack){ name, count, -1 };
	return (int)p->nstacks++;
}

/* Routed experts, per expert or fused as published, into one expert stack. */
static void experts(struct ctx *c, uint64_t e, uint64_t i, uint64_t h)
{
	char probe[NAME_MAX_LEN];
	struct plan_out *gu, *dn;
	int stack;
	bool fused;

	snprintf(probe, sizeof(probe), "%smlp.experts.gate_up_proj", c->sp);
	fused = ck_has(c->p, probe);
	stack = add_stack(c, fmt("%smlp.experts", c->op), e);
	if (stack < 0)
		return;
	gu = out(c, fmt("%smlp.experts.gate_up_proj", c->op), 3, SHAPE(e, 2 * i, h), (uint32_t)e,
		 fused ? 2 : 2, stack,
		 fused ? fmt("%smlp.experts.gate_up_proj", c->sp) :
			 fmt("%smlp.experts.*.gate_proj.weight + %smlp.experts.*.up_proj.weight", c->sp, c->sp));
	dn = out(c, fmt("%smlp.experts.down_proj", c->op), 3, SHAPE(e, h, i), (uint32_t)e, 1, stack,
		 fused ? fmt("%smlp.experts.down_proj", c->sp) : fmt("%smlp.experts.*.down_proj.weight", c->sp));
	if (!gu || !dn)
		return;
	gu = last_out(c, 1);
	dn = last_out(c, 0);
	gu->linear = dn->linear = true;
	gu->quantize = dn->quantize = true;
	plan_note(c->p, "routed experts stored expert by expert (gate_up_proj then down_proj), "
		  "one contiguous range per expert");
	if (fused) {
		int sgu = src(c, SRC_STACKED, fmt("%smlp.experts.gate_up_proj", c->sp), 3, SHAPE(e, 2 * i, h), false);
		int sdn = src(c, SRC_STACKED, fmt("%smlp.experts.down_proj", c->sp), 3, SHAPE(e, h, i), false);
		if (sgu < 0 || sdn < 0)
			return;
		for (uint32_t x = 0; x < e; x++) {
			gu->bands[2 * x] = (struct band){ sgu, x, 0, i, 0 };
			gu->bands[2 * x + 1] = (struct band){ sgu, x, i, i, 1 };
			dn->bands[x] = (struct band){ sdn, x, 0, h, 0 };
		}
		return;
	}
	for (uint32_t x = 0; x < e; x++) {
		int g = src(c, SRC_LINEAR, fmt("%smlp.experts.%u.gate_proj.weight", c->sp, x), 2, SHAPE(i, h), false);
		int u = src(c, SRC_LINEAR, fmt("%smlp.experts.%u.up_proj.weight", c->sp, x), 2, SHAPE(i, h), false);
		int d = src(c, SRC_LINEAR, fmt("%smlp.experts.%u.down_proj.weight", c->sp, x), 2, SHAPE(h, i), false);
		if (g < 0 || u < 0 || d < 0)
			return;
		gu->bands[2 * x] = (struct band){ g, 0, 0, i, 0 };
		gu->bands[2 * x + 1] = (struct band){ u, 0, 0, i, 1 };
		dn->bands[x] = (struct band){ d, 0, 0, h, 0 };
	}
}

static void attention(struct ctx *c, bool qsa)
{
	const struct capy_model_config *m = &c->p->cfg;
	uint64_t h = m->hidden_size, hd = m->head_dim;

	linear(c, "self_attn.q_proj.weight", m->n_heads * hd * 2, h);
	linear(c, "self_attn.k_proj.weight", m->n_kv_heads * hd, h);
	linear(c, "self_attn.v_proj.weight", m->n_kv_heads * hd, h);
	linear(c, "self_attn.o_proj.weight", h, m->n_heads * hd);
	plain(c, "self_attn.q_norm.weight", 0, 0.02, hd);
	plain(c, "self_attn.k_norm.weight", 0, 0.02, hd);
	if (qsa) {
		uint64_t ih = m->indexer_head_dim;
		linear(c, "self_attn.indexer.index_qk_proj.weight", (m->indexer_n_heads + m->indexer_kv_heads) * ih, h);
		plain(c, "self_attn.indexer.q_layernorm.weight", 0, 0.02, ih);
		plain(c, "self_attn.indexer.k_layernorm.weight", 0, 0.02, ih);
	}
}

/* Qwen3-Next's fused projections, de-interleaved from per-key-head groups into the
 * qwen3_5 layout: in_proj_qkv = [q heads | k heads | v heads], in_proj_z, in_proj_b, in_proj_a. */
static void gdn_next_projections(struct ctx *c)
{
	const struct capy_model_config *m = &c->p->cfg;
	uint64_t h = m->hidden_size, nk = m->linear_key_heads, dk = m->linear_key_head_dim;
	uint64_t r = m->linear_value_heads / nk, dv = m->linear_value_head_dim, nv = m->linear_value_heads;
	uint64_t grp = 2 * dk + 2 * r * dv;
	int qkvz = src(c, SRC_LINEAR, fmt("%slinear_attn.in_proj_qkvz.weight", c->sp), 2, SHAPE(nk * grp, h), false);
	int ba = src(c, SRC_LINEAR, fmt("%slinear_attn.in_proj_ba.weight", c->sp), 2, SHAPE(nk * 2 * r, h), false);
	struct plan_out *qkv, *z, *b, *a;

	if (qkvz < 0 || ba < 0)
		return;
	qkv = out(c, fmt("%slinear_attn.in_proj_qkv.weight", c->op), 2, SHAPE(2 * nk * dk + nv * dv, h), 1,
		  (uint32_t)(3 * nk), -1, strdup(c->p->srcs[qkvz].name));
	z = out(c, fmt("%slinear_attn.in_proj_z.weight", c->op), 2, SHAPE(nv * dv, h), 1, (uint32_t)nk, -1,
		strdup(c->p->srcs[qkvz].name));
	b = out(c, fmt("%slinear_attn.in_proj_b.weight", c->op), 2, SHAPE(nv, h), 1, (uint32_t)nk, -1,
		strdup(c->p->srcs[ba].name));
	a = out(c, fmt("%slinear_attn.in_proj_a.weight", c->op), 2, SHAPE(nv, h), 1, (uint32_t)nk, -1,
		strdup(c->p->srcs[ba].name));
	if (!qkv || !z || !b || !a)
		return;
	qkv = last_out(c, 3);
	z = last_out(c, 2);
	b = last_out(c, 1);
	a = last_out(c, 0);
	qkv->linear = z->linear = b->linear = a->linear = true;
	for (uint32_t g = 0; g < nk; g++) {
		qkv->bands[g] = (struct band){ qkvz, 0, g * grp, dk, 0 };
		qkv->bands[nk + g] = (struct band){ qkvz, 0, g * grp + dk, dk, 0 };
		qkv->bands[2 * nk + g] = (struct band){ qkvz, 0, g * grp + 2 * dk, r * dv, 0 };
		z->bands[g] = (struct band){ qkvz, 0, g * grp + 2 * dk + r * dv, r * dv, 0 };
		b->bands[g] = (struct band){ ba, 0, g * 2 * r, r, 0 };
		a->bands[g] = (struct band){ ba, 0, g * 2 * r + r, r, 0 };
	}
	if (c->rc == 0)
		plan_note(c->p, "in_proj_qkvz/in_proj_ba de-interleaved from key-head groups into "
			  "in_proj_qkv, in_proj_z, in_proj_b, in_proj_a");
}

static void gdn(struct ctx *c)
{
	const struct capy_model_config *m = &c->p->cfg;
	uint64_t h = m->hidden_size, nv = m->linear_value_heads, dv = m->linear_value_head_dim;
	uint64_t conv = 2 * m->linear_key_heads * m->linear_key_head_dim + nv * dv;
	struct plan_out *o;

	if (m->family == CAPY_FAMILY_QWEN3_NEXT) {
		gdn_next_projections(c);
	} else {
		linear(c, "linear_attn.in_proj_qkv.weight", conv, h);
		linear(c, "linear_attn.in_proj_z.weight", nv * dv, h);
		linear(c, "linear_attn.in_proj_b.weight", nv, h);
		linear(c, "linear_attn.in_proj_a.weight", nv, h);
	}
	plain(c, "linear_attn.conv1d.weight", 0, 0.3, conv, 1, m->linear_conv_kernel);
	o = plain(c, "linear_attn.A_log", log(8.0), 0.5, nv);
	(void)o;
	plain(c, "linear_attn.dt_bias", 1.0, 0.1, nv);
	plain(c, "linear_attn.norm.weight", 1.0, 0.02, dv);
	linear(c, "linear_attn.out_proj.weight", h, nv * dv);
}

static void moe(struct ctx *c)
{
	const struct capy_model_config *m = &c->p->cfg;
	uint64_t h = m->hidden_size, si = m->shared_expert_intermediate_size;

	plain(c, "mlp.gate.weight", 0, 0.02, m->n_experts, h);
	experts(c, m->n_experts, m->moe_intermediate_size, h);
	gate_up(c, "mlp.shared_expert.gate_proj.weight", "mlp.shared_expert.up_proj.weight",
		"mlp.shared_expert.gate_up_proj.weight", si, h);
	linear(c, "mlp.shared_expert.down_proj.weight", h, si);
	plain(c, "mlp.shared_expert_gate.weight", 0, 0.02, 1, h);
}

static void dense_mlp(struct ctx *c, uint64_t inter)
{
	uint64_t h = c->p->cfg.hidden_size;

	gate_up(c, "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.gate_up_proj.weight", inter, h);
	linear(c, "mlp.down_proj.weight", h, inter);
}

static void hyper_connection(struct ctx *c, const char *name, bool combine)
{
	const struct capy_model_config *m = &c->p->cfg;
	uint64_t hh = m->hc_count * m->hidden_size, r = m->hc_lowrank;
	char sfx[128];

	snprintf(sfx, sizeof(sfx), "%s.hc_norm.weight", name);
	plain(c, sfx, 0, 0.02, hh);
	snprintf(sfx, sizeof(sfx), "%s.input_mix_weight_down.weight", name);
	linear(c, sfx, r, hh);
	snprintf(sfx, sizeof(sfx), "%s.input_mix_weight_up.weight", name);
	linear(c, sfx, hh, r);
	if (combine) {
		snprintf(sfx, sizeof(sfx), "%s.block_inject_weight.weight", name);
		linear(c, sfx, m->hc_count, hh);
	}
}

/* A PLE layer: hashed n-gram tables (stored in shards by save_pretrained), projections,
 * norms and the dilated conv. The hash buffers, when present, must hold what the
 * config implies. */
static void ple(struct ctx *c, uint64_t ple_index, int64_t *bufs)
{
	const struct capy_model_config *m = &c->p->cfg;
	uint64_t hh = m->hc_count * m->hidden_size, d = m->ple_embed_dim, hd = capy_ple_head_dim(m);
	uint64_t heads = (m->ngram_size - 1) * m->heads_per_ngram, rows = capy_ple_table_rows(m, ple_index);
	uint64_t *voc = malloc(sizeof(*voc) * (ple_index + 1) * heads);
	char probe[NAME_MAX_LEN];
	struct plan_out *o;
	int s;

	if (!voc || !rows) {
		free(voc);
		c->rc = capy_err_set(c->p->err, CAPY_ENOMEM, "out of memory");
		return;
	}
	snprintf(probe, sizeof(probe), "%sple.ple_embedding.ngram_embedding.weight", c->sp);
	if (!c->p->ck || ck_has(c->p, probe)) {
		s = src(c, SRC_PLAIN, strdup(probe), 2, SHAPE(rows, hd), false);
		o = out(c, fmt("%sple.ple_embedding.ngram_embedding.weight", c->op), 2, SHAPE(rows, hd), 1, 1, -1,
			strdup(probe));
		if (o && s >= 0)
			o->bands[0] = (struct band){ s, 0, 0, rows, 0 };
	} else {
		uint64_t n = m->split_ngram_parts, sum = 0;
		o = out(c, fmt("%sple.ple_embedding.ngram_embedding.weight", c->op), 2, SHAPE(rows, hd), 1,
			(uint32_t)n, -1, fmt("%sple.ple_embedding.ngram_embedding.shard_*.weight", c->sp));
		for (uint64_t i = 0; o && i < n && c->rc == 0; i++) {
			const struct capy_st_tensor *t;
			snprintf(probe, sizeof(probe), "%sple.ple_embedding.ngram_embedding.shard_%" PRIu64 ".weight",
				 c->sp, i);
			t = capy_ckpt_find(c->p->ck, probe);
			uint64_t r = t && t->ndim == 2 ? t->shape[0] : 0;
			s = src(c, SRC_PLAIN, strdup(probe), 2, SHAPE(r, hd), false);
			if (s >= 0)
				o->bands[i] = (struct band){ s, 0, 0, r, 0 };
			sum += r;
		}
		if (c->rc == 0 && sum != rows && sum) {
			char first[NAME_MAX_LEN];
			snprintf(first, sizeof(first), "%sple.ple_embedding.ngram_embedding.shard_0.weight", c->sp);
			c->rc = capy_err_set(c->p->err, CAPY_EFORMAT,
					     "PLE shards '%s'... hold %" PRIu64 " rows; config.json implies %" PRIu64,
					     first, sum, rows);
		}
		if (c->rc == 0)
			plan_note(c->p, "PLE n-gram table shards concatenated along rows");
	}
	if (o)
		o->rand_std = 0.02;
	/* Hash buffers: multipliers, per-head vocab sizes and offsets. */
	capy_ple_head_vocabs(m, (ple_index + 1) * heads, voc);
	capy_ple_multipliers(m, ple_index, bufs);
	for (uint64_t j = 0, off = 0; j < heads; j++) {
		bufs[m->ngram_size + j] = (int64_t)voc[ple_index * heads + j];
		bufs[m->ngram_size + heads + j] = (int64_t)off;
		off += voc[ple_index * heads + j];
	}
	free(voc);
	o = plain_n(c, "ple.ple_embedding.layer_multipliers", 1, SHAPE(m->ngram_size), 0, 0, true);
	if (o)
		c->p->srcs[o->bands[0].src].expect_i64 = bufs;
	o = plain_n(c, "ple.ple_embedding.ngram_heads_vocab_sizes", 1, SHAPE(heads), 0, 0, true);
	if (o)
		c->p->srcs[o->bands[0].src].expect_i64 = bufs + m->ngram_size;
	o = plain_n(c, "ple.ple_embedding.ngram_heads_offsets", 1, SHAPE(heads), 0, 0, true);
	if (o)
		c->p->srcs[o->bands[0].src].expect_i64 = bufs + m->ngram_size + heads;
	linear(c, "ple.key_proj.weight", hh, d);
	linear(c, "ple.value_proj.weight", m->hidden_size, d);
	plain(c, "ple.norm_key.weight", 0, 0.02, hh);
	plain(c, "ple.norm_query.weight", 0, 0.02, hh);
	plain(c, "ple.norm_conv.weight", 0, 0.02, hh);
	plain(c, "ple.conv1d.weight", 0, 0.2, hh, 1, m->ple_conv_kernel);
}

/* One decoder layer at c->sp / c->op. An MTP layer has no PLE (qwen4_exp puts PLE on
 * linear-attention layers only). */
static void decoder_layer(struct ctx *c, uint64_t i, bool mtp, int64_t *ple_bufs, uint64_t *ple_index)
{
	const struct capy_model_config *m = &c->p->cfg;
	enum capy_layer_type t = mtp ? capy_mtp_layer_type(m) : (enum capy_layer_type)m->layer_types[i];
	bool q4 = m->family == CAPY_FAMILY_QWEN4_EXP;

	if (q4 && !mtp && m->ple_layer[i])
		ple(c, (*ple_index)++, ple_bufs);
	if (!q4) {
		plain(c, "input_layernorm.weight", 0, 0.02, m->hidden_size);
		plain(c, "post_attention_layernorm.weight", 0, 0.02, m->hidden_size);
	} else {
		hyper_connection(c, "attn_hyper_connection", true);
		hyper_connection(c, "mlp_hyper_connection", true);
	}
	if (t == CAPY_LAYER_LINEAR)
		gdn(c);
	else
		attention(c, t == CAPY_LAYER_QSA);
	if (m->family == CAPY_FAMILY_QWEN3_5)
		dense_mlp(c, m->intermediate_size);
	else if (mtp || m->moe_layer[i])
		moe(c);
	else
		dense_mlp(c, m->intermediate_size);
}

/* MTP tensors: mtp.fc, the norms and mtp.layers.* (a full-attention decoder layer each, with
 * the main layers' hyper-connection mixers on qwen4_exp), and on qwen4_exp the head's own
 * final mixer mtp.hyper_connection_mixer (no block_inject_weight, as the model's). qwen4_exp's
 * config and transformers say nothing of its head: this is capy's layout, docs/spec.md. */
static void mtp_block(struct ctx *c)
{
	struct plan *p = c->p;
	uint64_t h = p->cfg.hidden_size;

	c->sp = "mtp.";
	c->op = "mtp.";
	linear(c, "fc.weight", h, 2 * h);
	plain(c, "pre_fc_norm_embedding.weight", 0, 0.02, h);
	plain(c, "pre_fc_norm_hidden.weight", 0, 0.02, h);
	plain(c, "norm.weight", 0, 0.02, h);
	for (uint64_t i = 0; i < p->mtp_layers && c->rc == 0; i++) {
		char sp[64];
		snprintf(sp, sizeof(sp), "mtp.layers.%" PRIu64 ".", i);
		c->sp = c->op = sp;
		decoder_layer(c, i, true, NULL, NULL);
	}
	if (p->cfg.family == CAPY_FAMILY_QWEN4_EXP) {
		c->sp = c->op = "mtp.";
		hyper_connection(c, "hyper_connection_mixer", false);
	}
}

/* Tensors kept as published under a name prefix (vision). */
static void verbatim(struct ctx *c, const char *prefix, const char *out_prefix)
{
	const struct capy_ckpt *ck = c->p->ck;
	size_t plen = strlen(prefix);

	for (size_t i = 0; i < ck->ntensors && c->rc == 0; i++) {
		const struct capy_st_tensor *t = &ck->tensors[i];
		size_t n = strlen(t->name);
		struct plan_out *o;
		int s;
		if (strncmp(t->name, prefix, plen))
			continue;
		if (is_nvfp4_aux(t->name))
			continue; /* consumed with its NVFP4 weight */
		c->sp = "";
		c->op = "";
		if (t->dtype == CAPY_ST_U8 && t->ndim == 2 && n > 7 && !strcmp(t->name + n - 7, ".weight")) {
			uint64_t rows = t->shape[0], cols = t->shape[1] * 2;
			s = src(c, SRC_LINEAR, strdup(t->name), 2, SHAPE(rows, cols), false);
			o = out(c, fmt("%s%s", out_prefix, t->name + plen), 2, SHAPE(rows, cols), 1, 1, -1, strdup(t->name));
			if (o && s >= 0) {
				o->linear = true;
				o->bands[0] = (struct band){ s, 0, 0, rows, 0 };
			}
			continue;
		}
		s = src(c, SRC_PLAIN, strdup(t->name), -1, NULL, false);
		o = out(c, fmt("%s%s", out_prefix, t->name + plen), t->ndim, t->shape, 1, 1, -1, strdup(t->name));
		if (o && s >= 0)
			o->bands[0] = (struct band){ s, 0, 0, t->ndim ? t->shape[0] : 1, 0 };
	}
}

static uint64_t count_mtp_layers(const struct plan *p)
{
	uint64_t n = 0;
	char name[128];

	for (;;) {
		snprintf(name, sizeof(name), "mtp.layers.%" PRIu64 ".", n);
		bool found = false;
		for (size_t i = 0; i < p->ck->ntensors && !found; i++)
			found = !strncmp(p->ck->tensors[i].name, name, strlen(name));
		if (!found)
			return n;
		n++;
	}
}

static bool ck_has_prefix(const struct capy_ckpt *ck, const char *prefix)
{
	size_t n = strlen(prefix);

	for (size_t i = 0; ck && i < ck->ntensors; i++)
		if (!strncmp(ck->tensors[i].name, prefix, n))
			return true;
	return false;
}

/* PLE hash buffers stay alive with the plan (expect_i64 points into them). */
static int64_t ple_buffers[CAPY_MAX_LAYERS][3 * 64];

int plan_build(struct plan *p, const struct capy_ckpt *ck, struct capy_err *err)
{
	struct ctx c = { p, "", "", 0 };
	const struct capy_model_config *m = &p->cfg;
	uint64_t ple_index = 0, h = m->hidden_size;
	char sp[128], op[64];
	const char *base;

	p->ck = ck;
	p->err = err;
	p->transforms = cJSON_CreateArray();
	if (!p->transforms)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	if (m->family == CAPY_FAMILY_QWEN4_EXP &&
	    (m->ngram_size + 2 * (m->ngram_size - 1) * m->heads_per_ngram) > ARRAY_SIZE(ple_buffers[0]))
		return capy_err_set(err, CAPY_EUNSUPPORTED, "PLE with %" PRIu64 " n-gram heads is not supported",
				    (m->ngram_size - 1) * m->heads_per_ngram);
	/* Multimodal wrappers keep the text model under model.language_model. */
	base = ck && !capy_ckpt_find(ck, "model.language_model.embed_tokens.weight") &&
			capy_ckpt_find(ck, "model.embed_tokens.weight") ? "model." :
	       m->family == CAPY_FAMILY_QWEN3_NEXT && (!ck || capy_ckpt_find(ck, "model.embed_tokens.weight")) ?
			"model." : "model.language_model.";
	p->sp = base;

	c.sp = base;
	c.op = "";
	plain(&c, "embed_tokens.weight", 0, 0.02, m->vocab_size, h);
	for (uint64_t i = 0; i < m->n_layers && c.rc == 0; i++) {
		snprintf(sp, sizeof(sp), "%slayers.%" PRIu64 ".", base, i);
		snprintf(op, sizeof(op), "layers.%" PRIu64 ".", i);
		c.sp = sp;
		c.op = op;
		decoder_layer(&c, i, false, ple_buffers[i], &ple_index);
	}
	c.sp = base;
	c.op = "";
	if (m->family == CAPY_FAMILY_QWEN4_EXP)
		hyper_connection(&c, "hyper_connection_mixer", false);
	else
		plain(&c, "norm.weight", 0, 0.02, h);
	c.sp = "";
	if (!m->tie_word_embeddings || ck_has(p, "lm_head.weight"))
		linear(&c, "lm_head.weight", m->vocab_size, h);

	/* The checkpoint's mtp.* say there is a head, and mtp.layers.N how many layers it has (the
	 * artifact's mtp_num_hidden_layers): qwen4_exp configs have no field for it. Every tensor
	 * is checked for name and shape, and one the head does not have is refused. */
	if (ck && ck_has_prefix(ck, "mtp.")) {
		p->mtp_layers = count_mtp_layers(p);
		if (!p->mtp_layers)
			p->mtp_layers = m->mtp_layers ? m->mtp_layers : 1;
		mtp_block(&c);
	}
	if (ck && p->vision && c.rc == 0)
		verbatim(&c, "model.visual.", "visual.");
	return c.rc;
}
