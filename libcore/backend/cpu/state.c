/* state.c - the CPU backend's memory for sequences: the layout and storage of the
 * attention-cache pages, the recurrent state (Gated DeltaNet states and conv windows, PLE
 * context and conv windows), and the attention scratch that grows with the longest context. */
#include "cpu-impl.h"

#define KV_GROUP 32 /* INT8 KV: one scale per 32 values */

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

/* The shared layout (capy_kv_page_layout), 64-byte aligned. */
int cpu_pages_layout(struct cpu_engine *e, struct capy_err *err)
{
	int rc;

	e->kv_row = e->c.n_kv_heads * e->c.head_dim * kv_elem(e->opts.kv);
	if (!(e->lay = calloc((size_t)e->w.n_kv + 1, sizeof(*e->lay))))
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	/* The MTP head's attention layer (kv_slot n_kv) keeps its rows beside the main layers'. */
	if ((rc = capy_kv_page_layout(&e->c, e->opts.kv, e->w.n_kv + (e->w.mtp.present ? 1 : 0), 64, e->lay, &e->P,
				      &e->page_bytes, err)) < 0)
		return rc;
	e->core->page_tokens = e->P;
	return 0;
}

uint64_t cpu_page_bytes(const struct capy_engine *core)
{
	return ((const struct cpu_engine *)core->be)->page_bytes;
}

int cpu_pages_reserve(struct capy_engine *core, uint32_t n, struct capy_err *err)
{
	struct cpu_engine *e = core->be;

	if (n > e->pages_cap) {
		uint32_t cap = e->pages_cap ? e->pages_cap : 64;
		uint8_t **p;
		while (cap < n)
			cap *= 2;
		if (!(p = realloc(e->pages, (size_t)cap * sizeof(*p))))
			return capy_err_set(err, CAPY_ENOMEM, "out of memory for the page table");
		e->pages = p;
		e->pages_cap = cap;
	}
	for (; e->pages_have < n; e->pages_have++)
		if (!(e->pages[e->pages_have] = aligned_alloc(64, e->page_bytes)))
			return capy_err_set(err, CAPY_ENOMEM, "out of memory for attention cache page %" PRIu32
					    " (%" PRIu64 " bytes)", e->pages_have, e->page_bytes);
	return 0;
}

/* The pages above n go back to the allocator (a long conversation's cache, once it ended). */
uint32_t cpu_pages_give_back(struct capy_engine *core, uint32_t n)
{
	struct cpu_engine *e = core->be;

	while (e->pages_have > n)
		free(e->pages[--e->pages_have]);
	return e->pages_have;
}

void cpu_page_copy(struct capy_engine *core, uint32_t dst, uint32_t src)
{
	struct cpu_engine *e = core->be;

	memcpy(e->pages[dst], e->pages[src], e->page_bytes);
}

void cpu_pages_release(struct cpu_engine *e)
{
	for (uint32_t i = 0; i < e->pages_have; i++)
		free(e->pages[i]);
	free(e->pages);
	free(e->lay);
}

/* Make the attention scratch hold a context of n tokens. */
int cpu_attn_reserve(struct cpu_engine *e, uint64_t n, struct capy_err *err)
{
	const struct capy_model_config *c = &e->c;
	uint64_t cap = e->s.attn_cap ? e->s.attn_cap : 256, group = c->n_heads / c->n_kv_heads;
	uint64_t ratio = c->indexer_compress_ratio ? c->indexer_compress_ratio : 1;
	float *scores;

	if (n <= e->s.attn_cap)
		return 0;
	while (cap < n)
		cap *= 2;
	/* Per thread: scores over the context for each query head of a KV group, then a key row
	 * and the group's accumulators (QSA scores reuse the same space). */
	e->s.attn_stride = group * cap + (group + 1) * c->head_dim + cap / ratio + 1;
	if (!(scores = realloc(e->s.attn_scores, (size_t)e->nth * e->s.attn_stride * sizeof(float))))
		return capy_err_set(err, CAPY_ENOMEM, "out of memory for attention scratch");
	e->s.attn_scores = scores;
	if (c->family == CAPY_FAMILY_QWEN4_EXP) {
		uint8_t *sel = realloc(e->s.sel, e->s.tmax * cap);
		if (!sel)
			return capy_err_set(err, CAPY_ENOMEM, "out of memory for attention scratch");
		e->s.sel = sel;
	}
	e->s.attn_cap = cap;
	return 0;
}

uint64_t cpu_state_bytes(const struct capy_engine *core)
{
	const struct cpu_engine *e = core->be;
	const struct capy_model_config *c = &e->c;

	return sizeof(struct cpu_state) + (uint64_t)e->w.n_gdn * (gdn_conv_floats(c) + gdn_s_floats(c)) * sizeof(float) +
	       (uint64_t)e->w.n_ple * (sizeof(struct ple_state) + ple_conv_floats(c) * sizeof(float));
}

void cpu_state_free(struct capy_engine *core, void *p)
{
	struct cpu_engine *e = core->be;
	struct cpu_state *st = p;

	if (!st)
		return;
	for (int i = 0; st->gdn && i < e->w.n_gdn; i++) {
		free(st->gdn[i].conv);
		free(st->gdn[i].S);
	}
	for (int i = 0; st->ple && i < e->w.n_ple; i++)
		free(st->ple[i].conv);
	free(st->gdn);
	free(st->ple);
	free(st);
}

int cpu_state_new(struct capy_engine *core, void **out, struct capy_err *err)
{
	struct cpu_engine *e = core->be;
	const struct capy_model_config *c = &e->c;
	struct cpu_state *st = calloc(1, sizeof(*st));
	bool ok = st;

	if (ok) {
		st->gdn = calloc((size_t)e->w.n_gdn + 1, sizeof(*st->gdn));
		st->ple = calloc((size_t)e->w.n_ple + 1, sizeof(*st->ple));
		ok = st->gdn && st->ple;
	}
	for (int i = 0; ok && i < e->w.n_gdn; i++) {
		st->gdn[i].conv = calloc(gdn_conv_floats(c) + 1, sizeof(float));
		st->gdn[i].S = calloc(gdn_s_floats(c), sizeof(float));
		ok = st->gdn[i].conv && st->gdn[i].S;
	}
	for (int i = 0; ok && i < e->w.n_ple; i++) {
		st->ple[i].conv = calloc(ple_conv_floats(c) + 1, sizeof(float));
		ok = st->ple[i].conv != NULL;
		for (uint64_t j = 0; j + 1 < c->ngram_size; j++)
			st->ple[i].ctx[j] = (int32_t)c->eos_ids[0]; /* the context starts as EOS */
	}
	if (!ok) {
		cpu_state_free(core, st);
		return capy_err_set(err, CAPY_ENOMEM, "out of memory for a sequence's recurrent state");
	}
	*out = st;
	return 0;
}

void cpu_state_copy(struct capy_engine *core, void *dst, const void *src)
{
	struct cpu_engine *e = core->be;
	const struct capy_model_config *c = &e->c;
	struct cpu_state *d = dst;
	const struct cpu_state *s = src;

	for (int i = 0; i < e->w.n_gdn; i++) {
		memcpy(d->gdn[i].conv, s->gdn[i].conv, gdn_conv_floats(c) * sizeof(float));
		memcpy(d->gdn[i].S, s->gdn[i].S, gdn_s_floats(c) * sizeof(float));
	}
	for (int i = 0; i < e->w.n_ple; i++) {
		memcpy(d->ple[i].ctx, s->ple[i].ctx, sizeof(d->ple[i].ctx));
		memcpy(d->ple[i].conv, s->ple[i].conv, ple_conv_floats(c) * sizeof(float));
	}
}

int cpu_page_read(struct capy_engine *core, uint32_t id, void *dst, struct capy_err *err)
{
	struct cpu_engine *e = core->be;

	(void)err;
	memcpy(dst, e->pages[id], e->page_bytes);
	return 0;
}

int cpu_page_write(struct capy_engine *core, uint32_t id, const void *src, struct capy_err *err)
{
	struct cpu_engine *e = core->be;

	(void)err;
	memcpy(e->pages[id], src, e->page_bytes);
	return 0;
}

/* The state packed as: per GDN layer its conv window then S; per PLE layer its 16 context
 * ids then its conv window (the floats as stored, so a round trip is bitwise). */
uint64_t cpu_state_io_bytes(const struct capy_engine *core)
{
	const struct cpu_engine *e = core->be;
	const struct capy_model_config *c = &e->c;

	return (uint64_t)e->w.n_gdn * (gdn_conv_floats(c) + gdn_s_floats(c)) * sizeof(float) +
	       (uint64_t)e->w.n_ple * (sizeof(((struct ple_state *)0)->ctx) + ple_conv_floats(c) * sizeof(float));
}

int cpu_state_read(struct capy_engine *core, const void *p, void *dst, struct capy_err *err)
{
	struct cpu_engine *e = core->be;
	const struct capy_model_config *c = &e->c;
	const struct cpu_state *s = p;
	uint8_t *o = dst;

	(void)err;
	for (int i = 0; i < e->w.n_gdn; i++) {
		memcpy(o, s->gdn[i].conv, gdn_conv_floats(c) * sizeof(float));
		o += gdn_conv_floats(c) * sizeof(float);
		memcpy(o, s->gdn[i].S, gdn_s_floats(c) * sizeof(float));
		o += gdn_s_floats(c) * sizeof(float);
	}
	for (int i = 0; i < e->w.n_ple; i++) {
		memcpy(o, s->ple[i].ctx, sizeof(s->ple[i].ctx));
		o += sizeof(s->ple[i].ctx);
		memcpy(o, s->ple[i].conv, ple_conv_floats(c) * sizeof(float));
		o += ple_conv_floats(c) * sizeof(float);
	}
	return 0;
}

int cpu_state_write(struct capy_engine *core, void *p, const void *src, struct capy_err *err)
{
	struct cpu_engine *e = core->be;
	const struct capy_model_config *c = &e->c;
	struct cpu_state *d = p;
	const uint8_t *in = src;

	(void)err;
	for (int i = 0; i < e->w.n_gdn; i++) {
		memcpy(d->gdn[i].conv, in, gdn_conv_floats(c) * sizeof(float));
		in += gdn_conv_floats(c) * sizeof(float);
		memcpy(d->gdn[i].S, in, gdn_s_floats(c) * sizeof(float));
		in += gdn_s_floats(c) * sizeof(float);
	}
	for (int i = 0; i < e->w.n_ple; i++) {
		memcpy(d->ple[i].ctx, in, sizeof(d->ple[i].ctx));
		in += sizeof(d->ple[i].ctx);
		memcpy(d->ple[i].conv, in, ple_conv_floats(c) * sizeof(float));
		in += ple_conv_floats(c) * sizeof(float);
	}
	return 0;
}
