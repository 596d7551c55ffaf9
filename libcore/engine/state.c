/* state.c - per-sequence state: allocation and growth of the attention caches, the
 * recurrent states, fork, checkpoint and truncate. */
#include "engine-impl.h"

static size_t kv_elem(enum capy_kv_dtype kv)
{
	return kv == CAPY_KV_F32 ? 4 : kv == CAPY_KV_BF16 ? 2 : 1;
}

static uint64_t gdn_conv_floats(const struct capy_model_config *c)
{
	return (c->linear_conv_kernel - 1) *
	       (2 * c->linear_key_heads * c->linear_key_head_dim + c->linear_value_heads * c->linear_value_head_dim);
}

static uint64_t gdn_s_floats(const struct capy_model_config *c)
{
	return c->linear_value_heads * c->linear_key_head_dim * c->linear_value_head_dim;
}

static uint64_t ple_conv_floats(const struct capy_model_config *c)
{
	return (c->ple_conv_kernel - 1) * c->ngram_size * c->hc_count * c->hidden_size;
}

static void *grow(void *p, size_t bytes, int *rc)
{
	void *q = realloc(p, bytes ? bytes : 1);

	if (!q)
		*rc = -1;
	return q ? q : p;
}

/* Make room for `need` tokens in every attention cache (and the engine's per-context scratch). */
int seq_reserve(struct capy_seq *s, uint64_t need, struct capy_err *err)
{
	struct capy_engine *e = s->e;
	const struct capy_model_config *c = &e->c;
	uint64_t n = c->n_kv_heads * c->head_dim, cap = s->cap ? s->cap : 64;
	size_t el = kv_elem(e->opts.kv);
	int rc = 0;

	if (need <= s->cap && need <= e->s.attn_cap)
		return 0;
	while (cap < need)
		cap *= 2;
	if (cap > s->cap) {
		for (int i = 0; i < e->n_kv; i++) {
			struct kv_state *kv = &s->kv[i];
			kv->k = grow(kv->k, cap * n * el, &rc);
			kv->v = grow(kv->v, cap * n * el, &rc);
			if (e->opts.kv == CAPY_KV_INT8) {
				kv->k_scale = grow(kv->k_scale, cap * (n / 32) * sizeof(float), &rc);
				kv->v_scale = grow(kv->v_scale, cap * (n / 32) * sizeof(float), &rc);
			}
			if (c->family == CAPY_FAMILY_QWEN4_EXP) {
				uint64_t ih = c->indexer_head_dim;
				kv->idx_keys = grow(kv->idx_keys, cap * ih * sizeof(float), &rc);
				kv->blocks = grow(kv->blocks, (cap / c->indexer_compress_ratio + 1) * ih * sizeof(float), &rc);
			}
		}
		if (rc < 0)
			return capy_err_set(err, CAPY_ENOMEM, "out of memory growing the KV cache to %" PRIu64 " tokens", cap);
		s->cap = cap;
	}
	if (cap > e->s.attn_cap) {
		/* Per thread: scores over the context for each query head of a KV group, then a key row
		 * and the group's accumulators (QSA scores reuse the same space). */
		uint64_t group = c->n_heads / c->n_kv_heads;
		e->s.attn_stride = group * cap + (group + 1) * c->head_dim + cap / (c->indexer_compress_ratio ? c->indexer_compress_ratio : 1) + 1;
		e->s.attn_scores = grow(e->s.attn_scores, (size_t)e->nth * e->s.attn_stride * sizeof(float), &rc);
		if (c->family == CAPY_FAMILY_QWEN4_EXP)
			e->s.sel = grow(e->s.sel, e->s.tmax * cap, &rc);
		if (rc < 0)
			return capy_err_set(err, CAPY_ENOMEM, "out of memory for attention scratch");
		e->s.attn_cap = cap;
	}
	return 0;
}

static void free_recurrent(struct capy_engine *e, struct gdn_state *g, struct ple_state *p)
{
	for (int i = 0; g && i < e->n_gdn; i++) {
		free(g[i].conv);
		free(g[i].S);
	}
	for (int i = 0; p && i < e->n_ple; i++)
		free(p[i].conv);
	free(g);
	free(p);
}

static int alloc_recurrent(struct capy_engine *e, struct gdn_state **g, struct ple_state **p)
{
	const struct capy_model_config *c = &e->c;
	bool ok;

	*g = calloc((size_t)e->n_gdn + 1, sizeof(**g));
	*p = calloc((size_t)e->n_ple + 1, sizeof(**p));
	ok = *g && *p;
	for (int i = 0; ok && i < e->n_gdn; i++) {
		(*g)[i].conv = calloc(gdn_conv_floats(c) + 1, sizeof(float));
		(*g)[i].S = calloc(gdn_s_floats(c), sizeof(float));
		ok = (*g)[i].conv && (*g)[i].S;
	}
	for (int i = 0; ok && i < e->n_ple; i++) {
		(*p)[i].conv = calloc(ple_conv_floats(c) + 1, sizeof(float));
		ok = (*p)[i].conv != NULL;
		for (uint64_t j = 0; j < c->ngram_size - 1; j++)
			(*p)[i].ctx[j] = (int32_t)c->eos_ids[0]; /* the context starts as EOS */
	}
	if (!ok) {
		free_recurrent(e, *g, *p);
		*g = NULL;
		*p = NULL;
		return -1;
	}
	return 0;
}

static void copy_recurrent(const struct capy_engine *e, struct gdn_state *dg, struct ple_state *dp,
			   const struct gdn_state *sg, const struct ple_state *sp)
{
	const struct capy_model_config *c = &e->c;

	for (int i = 0; i < e->n_gdn; i++) {
		memcpy(dg[i].conv, sg[i].conv, gdn_conv_floats(c) * sizeof(float));
		memcpy(dg[i].S, sg[i].S, gdn_s_floats(c) * sizeof(float));
	}
	for (int i = 0; i < e->n_ple; i++) {
		memcpy(dp[i].ctx, sp[i].ctx, sizeof(dp[i].ctx));
		memcpy(dp[i].conv, sp[i].conv, ple_conv_floats(c) * sizeof(float));
	}
}

int capy_seq_new(struct capy_engine *e, struct capy_seq **out, struct capy_err *err)
{
	struct capy_seq *s = calloc(1, sizeof(*s));

	if (!s)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	s->e = e;
	s->kv = calloc((size_t)e->n_kv + 1, sizeof(*s->kv));
	if (!s->kv || alloc_recurrent(e, &s->gdn, &s->ple) < 0) {
		capy_seq_free(s);
		return capy_err_set(err, CAPY_ENOMEM, "out of memory for a sequence");
	}
	if (seq_reserve(s, e->opts.max_tokens ? e->opts.max_tokens : 256, err) < 0) {
		capy_seq_free(s);
		return err ? err->code : CAPY_ENOMEM;
	}
	*out = s;
	return 0;
}

void capy_seq_free(struct capy_seq *s)
{
	if (!s)
		return;
	for (int i = 0; s->kv && i < s->e->n_kv; i++) {
		free(s->kv[i].k);
		free(s->kv[i].v);
		free(s->kv[i].k_scale);
		free(s->kv[i].v_scale);
		free(s->kv[i].idx_keys);
		free(s->kv[i].blocks);
	}
	free(s->kv);
	free_recurrent(s->e, s->gdn, s->ple);
	free_recurrent(s->e, s->snap.gdn, s->snap.ple);
	free(s);
}

uint64_t capy_seq_len(const struct capy_seq *s)
{
	return s->len;
}

int capy_seq_fork(const struct capy_seq *s, struct capy_seq **out, struct capy_err *err)
{
	const struct capy_engine *e = s->e;
	const struct capy_model_config *c = &e->c;
	uint64_t n = c->n_kv_heads * c->head_dim;
	size_t el = kv_elem(e->opts.kv);
	struct capy_seq *d;
	int rc = capy_seq_new(s->e, &d, err);

	if (rc < 0)
		return rc;
	if ((rc = seq_reserve(d, s->cap, err)) < 0) {
		capy_seq_free(d);
		return rc;
	}
	for (int i = 0; i < e->n_kv; i++) {
		memcpy(d->kv[i].k, s->kv[i].k, s->len * n * el);
		memcpy(d->kv[i].v, s->kv[i].v, s->len * n * el);
		if (e->opts.kv == CAPY_KV_INT8) {
			memcpy(d->kv[i].k_scale, s->kv[i].k_scale, s->len * (n / 32) * sizeof(float));
			memcpy(d->kv[i].v_scale, s->kv[i].v_scale, s->len * (n / 32) * sizeof(float));
		}
		if (c->family == CAPY_FAMILY_QWEN4_EXP) {
			memcpy(d->kv[i].idx_keys, s->kv[i].idx_keys, s->len * c->indexer_head_dim * sizeof(float));
			memcpy(d->kv[i].blocks, s->kv[i].blocks, s->kv[i].nblocks * c->indexer_head_dim * sizeof(float));
			d->kv[i].nblocks = s->kv[i].nblocks;
		}
	}
	copy_recurrent(e, d->gdn, d->ple, s->gdn, s->ple);
	d->len = s->len;
	*out = d;
	return 0;
}

int capy_seq_checkpoint(struct capy_seq *s, struct capy_err *err)
{
	if (!s->snap.gdn && alloc_recurrent(s->e, &s->snap.gdn, &s->snap.ple) < 0)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory for a checkpoint");
	copy_recurrent(s->e, s->snap.gdn, s->snap.ple, s->gdn, s->ple);
	s->snap.len = s->len;
	s->snap.valid = true;
	return 0;
}

int capy_seq_truncate(struct capy_seq *s, uint64_t n, struct capy_err *err)
{
	const struct capy_model_config *c = &s->e->c;

	if (n == s->len)
		return 0;
	if (!s->snap.valid || s->snap.len != n)
		return capy_err_set(err, CAPY_EINVAL, "cannot cut a sequence of %" PRIu64 " tokens back to %" PRIu64
				    " (no checkpoint there)", s->len, n);
	copy_recurrent(s->e, s->gdn, s->ple, s->snap.gdn, s->snap.ple);
	for (int i = 0; i < s->e->n_kv && c->family == CAPY_FAMILY_QWEN4_EXP; i++)
		s->kv[i].nblocks = n / c->indexer_compress_ratio;
	s->len = n;
	return 0;
}
