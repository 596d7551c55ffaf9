/* engine.c - the model-independent engine: creating it on a backend, the page pool of the
 * attention cache, and the step (checks, pages made writable, the backend's pass, the
 * sequences advanced). */
#include "engine-impl.h"
#include "../sample/sample.h"
#include "../tp/tp.h"

#define DEFAULT_STEP_TOKENS 512
#define DEFAULT_PAGE_TOKENS 64
#define MAX_BACKENDS 8

#ifdef CAPY_HAVE_CUDA
static const struct capy_backend_ops *backends[MAX_BACKENDS] = { &capy_backend_cpu, &capy_backend_cuda };
#else
static const struct capy_backend_ops *backends[MAX_BACKENDS] = { &capy_backend_cpu };
#endif

const struct capy_backend_ops *capy_backend_find(const char *name)
{
	for (size_t i = 0; i < MAX_BACKENDS && backends[i]; i++)
		if (!strcmp(backends[i]->name, name))
			return backends[i];
	return NULL;
}

int capy_backend_add(const struct capy_backend_ops *ops)
{
	for (size_t i = 0; i < MAX_BACKENDS; i++) {
		if (backends[i] && strcmp(backends[i]->name, ops->name))
			continue;
		backends[i] = ops;
		return 0;
	}
	return -1;
}

int capy_kv_page_layout(const struct capy_model_config *c, enum capy_kv_dtype kv, int n_kv, uint64_t align,
			struct capy_kv_fields *lay, uint64_t *P_out, uint64_t *page_bytes, struct capy_err *err)
{
	uint64_t n = c->n_kv_heads * c->head_dim, off = 0, P = 64;
	uint64_t row = n * (kv == CAPY_KV_F32 ? 4 : kv == CAPY_KV_BF16 ? 2 : 1);
	bool qsa = c->family == CAPY_FAMILY_QWEN4_EXP;

	if (qsa)
		P = CAPY_ALIGN_UP(P, c->indexer_compress_ratio);
	if (P > (1u << 20))
		return capy_err_set(err, CAPY_EUNSUPPORTED, "indexer_compress_ratio %" PRIu64 " is too large",
				    c->indexer_compress_ratio);
	for (int i = 0; i < n_kv; i++) {
		struct capy_kv_fields *l = &lay[i];
		memset(l, 0, sizeof(*l));
		l->k = off;
		off = CAPY_ALIGN_UP(off + P * row, align);
		l->v = off;
		off = CAPY_ALIGN_UP(off + P * row, align);
		if (kv == CAPY_KV_INT8) {
			l->k_scale = off;
			off = CAPY_ALIGN_UP(off + P * (n / 32) * sizeof(float), align);
			l->v_scale = off;
			off = CAPY_ALIGN_UP(off + P * (n / 32) * sizeof(float), align);
		}
		if (qsa) {
			l->idx_keys = off;
			off = CAPY_ALIGN_UP(off + P * c->indexer_head_dim * sizeof(float), align);
			l->blocks = off;
			off = CAPY_ALIGN_UP(off + (P / c->indexer_compress_ratio) * c->indexer_head_dim * sizeof(float), align);
		}
	}
	*P_out = P;
	*page_bytes = off ? off : align;
	return 0;
}

int capy_kv_dtype_parse(const char *name)
{
	static const char *const names[] = { [CAPY_KV_BF16] = "bf16", [CAPY_KV_F32] = "f32", [CAPY_KV_INT8] = "int8" };

	for (size_t i = 0; i < ARRAY_SIZE(names); i++)
		if (!strcmp(name, names[i]))
			return (int)i;
	return -1;
}

bool capy_engine_device_available(const char *name)
{
	return capy_backend_find(name) != NULL;
}

int capy_engine_new(struct capy_engine **out, const struct capy_artifact *a,
		    const struct capy_engine_opts *opts, struct capy_err *err)
{
	struct capy_engine *e = calloc(1, sizeof(*e));
	const char *dev;
	char what[4200];
	int rc;

	if (!e)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	e->a = a;
	if (opts)
		e->opts = *opts;
	if (capy_artifact_layout_only(a)) {
		free(e);
		return capy_err_set(err, CAPY_EINVAL, "'%s' holds no weights (capy-convert --layout-only): only --plan reads it",
				    a->path);
	}
	dev = e->opts.device ? e->opts.device : "cpu";
	if (!(e->ops = capy_backend_find(dev))) {
		free(e);
		return capy_err_set(err, CAPY_EINVAL, "device '%s' is not available in this build (cpu is)", dev);
	}
	e->step_tokens = e->opts.step_tokens ? e->opts.step_tokens : DEFAULT_STEP_TOKENS;
	e->page_tokens = DEFAULT_PAGE_TOKENS;
	snprintf(what, sizeof(what), "'%s': model.config", a->path);
	if ((rc = capy_model_config_parse(&e->c, a->family, a->config, what, err)) < 0) {
		free(e);
		return rc;
	}
	if (e->opts.tp > 1 && !e->ops->tp) {
		rc = capy_err_set(err, CAPY_EUNSUPPORTED,
				  "--tp %d: tensor parallelism on the %s backend is not built yet (docs/tp.md; the CPU "
				  "simulates it)",
				  e->opts.tp, e->ops->name);
		free(e);
		return rc;
	}
	if (e->opts.mtp && !e->ops->mtp) {
		rc = capy_err_set(err, CAPY_EUNSUPPORTED, "the %s backend has no MTP head yet (--spec mtp: use the CPU)",
				  e->ops->name);
		free(e);
		return rc;
	}
	if ((rc = e->ops->open(e, err)) < 0) {
		free(e);
		return rc;
	}
	*out = e;
	return 0;
}

void capy_engine_free(struct capy_engine *e)
{
	if (!e)
		return;
	e->ops->close(e);
	free(e->page_ref);
	free(e->free_bits);
	free(e->sample_logits);
	free(e);
}

const struct capy_model_config *capy_engine_config(const struct capy_engine *e)
{
	return &e->c;
}

int capy_engine_threads(const struct capy_engine *e)
{
	return e->ops->threads(e);
}

const char *capy_engine_device(const struct capy_engine *e)
{
	return e->ops->name;
}

uint64_t capy_engine_step_tokens(const struct capy_engine *e)
{
	return e->step_tokens;
}

uint64_t capy_engine_page_tokens(const struct capy_engine *e)
{
	return e->page_tokens;
}

uint64_t capy_engine_page_bytes(const struct capy_engine *e)
{
	return e->ops->page_bytes(e);
}

uint64_t capy_engine_pages_used(const struct capy_engine *e)
{
	return e->pages_used;
}

uint64_t capy_engine_state_bytes(const struct capy_engine *e)
{
	return e->ops->state_bytes(e);
}

bool capy_engine_keeps_states(const struct capy_engine *e)
{
	return e->ops->keeps_states;
}

uint64_t capy_engine_weight_bytes(const struct capy_engine *e)
{
	return e->ops->weight_bytes(e);
}

int capy_engine_reserve(struct capy_engine *e, uint64_t tokens, uint64_t sequences, struct capy_err *err)
{
	uint64_t n = capy_kv_pages_needed(tokens, sequences, e->page_tokens);
	uint32_t most = e->ops->pages_elastic ? e->ops->pages_elastic(e) : 0;
	int rc;

	if (n > UINT32_MAX - 1)
		return capy_err_set(err, CAPY_EINVAL, "attention cache: %" PRIu64 " pages are too many", n);
	if (most) { /* elastic: the plan holds it; storage comes as sequences grow */
		if (n > most)
			return capy_err_set(err, CAPY_ENOMEM,
					    "attention cache: %" PRIu64 " pages for %" PRIu64 " tokens over %" PRIu64
					    " sequences, and the memory plan holds %" PRIu32,
					    n, tokens, sequences, most);
		return 0;
	}
	if (n > e->reserved_pages)
		e->reserved_pages = (uint32_t)n;
	if (n <= e->storage_pages)
		return 0;
	if ((rc = e->ops->pages_reserve(e, (uint32_t)n, err)) < 0)
		return rc;
	e->storage_pages = (uint32_t)n;
	return 0;
}

uint64_t capy_engine_pages_held(const struct capy_engine *e)
{
	return e->storage_pages;
}

void capy_engine_describe(const struct capy_engine *e, char *buf, size_t size)
{
	size_t n;

	if (e->ops->describe)
		e->ops->describe(e, buf, size);
	else
		snprintf(buf, size, "%s, %d threads", e->ops->name, e->ops->threads(e));
	n = strlen(buf);
	if (e->opts.tp > 1 && n < size)
		snprintf(buf + n, size - n, ", %d tensor-parallel ranks simulated (%s payloads)", e->opts.tp,
			 capy_tp_payload_name((enum capy_tp_payload)e->opts.tp_payload));
}

bool capy_engine_plan_line(const struct capy_engine *e, char *buf, size_t size)
{
	if (size)
		buf[0] = 0;
	if (!e->ops->plan)
		return false;
	e->ops->plan(e, buf, size);
	return true;
}

const char *capy_offload_host_name(enum capy_offload_host h)
{
	return h == CAPY_OFFLOAD_HOST_PAGEABLE	  ? "mapped artifact (pageable)"
	       : h == CAPY_OFFLOAD_HOST_REGISTERED ? "mapped artifact (registered)"
						   : "page-locked copy";
}

bool capy_engine_offload_stats(const struct capy_engine *e, struct capy_offload_stats *st)
{
	struct capy_offload_stats tmp;

	memset(&tmp, 0, sizeof(tmp));
	if (!e->ops->offload_stats || !e->ops->offload_stats(e, &tmp))
		return false;
	if (st)
		*st = tmp;
	return true;
}

/* --- the page pool ------------------------------------------------------------------------ */

static void mark_free(struct capy_engine *e, uint32_t id)
{
	e->free_bits[id / 64] |= 1ull << (id % 64);
	e->n_free++;
	if (id / 64 < e->free_lo)
		e->free_lo = id / 64;
}

/* A new id at the top of the pool (none is free) into *id: storage for it, room in the
 * tables. */
static int page_grow(struct capy_engine *e, uint32_t *id, struct capy_err *err)
{
	uint32_t n = e->n_pages;
	int rc;

	if (n == UINT32_MAX - 1)
		return capy_err_set(err, CAPY_ENOMEM, "attention cache: out of page ids");
	if (n + 1 > e->storage_pages) {
		if ((rc = e->ops->pages_reserve(e, n + 1, err)) < 0)
			return rc;
		e->storage_pages = n + 1;
	}
	if (n == e->pages_cap) {
		uint32_t cap = n ? 2 * n : 64;
		uint32_t *ref = realloc(e->page_ref, (size_t)cap * sizeof(*ref));
		uint64_t *fb;
		if (ref)
			e->page_ref = ref;
		fb = ref ? realloc(e->free_bits, (size_t)cap / 64 * sizeof(*fb)) : NULL;
		if (!fb)
			return capy_err_set(err, CAPY_ENOMEM, "out of memory for the page table");
		memset(fb + e->pages_cap / 64, 0, (size_t)(cap - e->pages_cap) / 64 * sizeof(*fb));
		e->free_bits = fb;
		e->pages_cap = cap;
	}
	e->n_pages = n + 1;
	*id = n;
	return 0;
}

int engine_page_alloc(struct capy_engine *e, uint32_t *id, struct capy_err *err)
{
	int rc;

	if (!e->n_free) {
		if ((rc = page_grow(e, id, err)) < 0)
			return rc;
	} else {
		while (!e->free_bits[e->free_lo]) /* n_free > 0: a set bit lies ahead */
			e->free_lo++;
		const uint64_t w = e->free_bits[e->free_lo];
		*id = e->free_lo * 64 + (uint32_t)__builtin_ctzll(w);
		e->free_bits[e->free_lo] = w & (w - 1);
		e->n_free--;
	}
	e->page_ref[*id] = 1;
	e->pages_used++;
	return 0;
}

void engine_page_hold(struct capy_engine *e, uint32_t id)
{
	e->page_ref[id]++;
}

void engine_page_drop(struct capy_engine *e, uint32_t id)
{
	if (!e->page_ref[id])
		CAPY_BUG("page %" PRIu32 " released twice", id);
	if (--e->page_ref[id])
		return;
	e->pages_used--;
	mark_free(e, id);
	/* free ids at the top leave the pool */
	while (e->n_pages && !e->page_ref[e->n_pages - 1]) {
		const uint32_t t = e->n_pages - 1;
		e->free_bits[t / 64] &= ~(1ull << (t % 64));
		e->n_free--;
		e->n_pages = t;
	}
}

/* Only a surplus of 64 pages and a quarter of what stays goes back: a sequence forked and
 * freed every step (a draft, a probe) must not free and take the same storage each time. */
#define TRIM_MIN_PAGES 64

void engine_pages_trim(struct capy_engine *e)
{
	const uint32_t keep = CAPY_MAX(e->n_pages, e->reserved_pages);

	if (e->ops->pages_release && e->storage_pages >= keep + CAPY_MAX(TRIM_MIN_PAGES, keep / 4))
		e->storage_pages = e->ops->pages_release(e, keep);
}

/* --- steps --------------------------------------------------------------------------------- */

static int check_item(const struct capy_engine *e, const struct capy_step_item *it, size_t i,
		      struct capy_err *err)
{
	uint64_t V = e->c.vocab_size;

	if (!it->seq || it->seq->e != e)
		return capy_err_set(err, CAPY_EINVAL, "step item %zu: not a sequence of this engine", i);
	if (!it->n)
		return capy_err_set(err, CAPY_EINVAL, "no tokens to run");
	if (!it->seq->state_valid)
		return capy_err_set(err, CAPY_EINVAL, "a sequence shared at %" PRIu64 " tokens has no recurrent "
				    "state yet (restore a snapshot first)", it->seq->len);
	for (uint64_t t = 0; t < it->n; t++)
		if (it->tokens[t] < 0 || (uint64_t)it->tokens[t] >= V)
			return capy_err_set(err, CAPY_EINVAL, "token id %" PRId32 " at position %" PRIu64
					    " is outside the vocabulary [0, %" PRIu64 ")", it->tokens[t], t, V);
	if (it->keep_states && !e->ops->keeps_states)
		return capy_err_set(err, CAPY_EUNSUPPORTED, "the %s backend cannot keep per-token states "
				    "(speculative verification)", e->ops->name);
	if (it->hidden && !e->opts.mtp)
		return capy_err_set(err, CAPY_EINVAL, "step item %zu: hidden states need an engine with its MTP head", i);
	if (it->keep_states && !it->seq->len)
		return capy_err_set(err, CAPY_EINVAL, "step item %zu: keep_states needs a sequence with a history", i);
	return 0;
}

/* Room for the states a keep_states item keeps (one per token but the last), made once and
 * reused by the sequence's later verification steps. */
static int seq_kept_reserve(struct capy_seq *s, uint64_t n, struct capy_err *err)
{
	struct capy_engine *e = s->e;
	int rc;

	if (n <= s->kept_cap)
		return 0;
	void **p = realloc(s->kept, n * sizeof(*p));
	if (!p)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory for %" PRIu64 " kept states", n);
	s->kept = p;
	for (; s->kept_cap < n; s->kept_cap++)
		if ((rc = e->ops->state_new(e, &s->kept[s->kept_cap], err)) < 0)
			return rc;
	return 0;
}

int32_t capy_step_sample(const struct capy_batch_item *it, float *row)
{
	const uint32_t *bits;

	if (!it->mask)
		return capy_sampler_next(it->sampler, row);
	bits = it->mask(it->mask_ud);
	return bits ? capy_sampler_next_masked(it->sampler, row, bits) : -1;
}

/* A backend that does not sample: items with a sampler get a row of the engine's own buffer
 * (kept between steps), for their logits when the caller wants none. */
static int host_sampling_rows(struct capy_engine *e, struct capy_batch_item *bi, size_t n, struct capy_err *err)
{
	uint64_t V = e->c.vocab_size;
	size_t need = 0;

	for (size_t i = 0; i < n; i++)
		need += bi[i].sampler != NULL;
	if (need > e->sample_rows) {
		float *p = realloc(e->sample_logits, need * V * sizeof(float));
		if (!p)
			return capy_err_set(err, CAPY_ENOMEM, "out of memory for %zu rows of logits", need);
		e->sample_logits = p;
		e->sample_rows = need;
	}
	for (size_t i = 0, r = 0; i < n; i++) {
		if (!bi[i].sampler)
			continue;
		if (!bi[i].logits)
			bi[i].logits = e->sample_logits + r * V;
		r++;
	}
	return 0;
}

/* ... and are sampled from that row (a copy of the caller's last row where it has logits, so
 * they stay the model's). */
static void host_sample(struct capy_engine *e, const struct capy_batch_item *bi, const struct capy_step_item *items,
			size_t n)
{
	uint64_t V = e->c.vocab_size;

	for (size_t i = 0, r = 0; i < n; i++) {
		if (!bi[i].sampler)
			continue;
		float *row = e->sample_logits + r++ * V;
		if (items[i].logits)
			memcpy(row, items[i].logits + (items[i].all_logits ? (items[i].n - 1) * V : 0), V * sizeof(float));
		*bi[i].token = capy_step_sample(&bi[i], row);
	}
}

int capy_engine_step(struct capy_engine *e, const struct capy_step_item *items, size_t n_items,
		     struct capy_err *err)
{
	struct capy_batch_item stack[64], *bi = stack;
	struct capy_batch b = { NULL, n_items, 0 };
	int rc = 0;

	if (!n_items)
		return capy_err_set(err, CAPY_EINVAL, "an empty step");
	for (size_t i = 0; i < n_items; i++) {
		if ((rc = check_item(e, &items[i], i, err)) < 0)
			return rc;
		for (size_t j = 0; j < i; j++)
			if (items[j].seq == items[i].seq)
				return capy_err_set(err, CAPY_EINVAL, "step items %zu and %zu are the same sequence", j, i);
		b.n_tokens += items[i].n;
	}
	if (b.n_tokens > e->step_tokens)
		return capy_err_set(err, CAPY_EINVAL, "a step of %" PRIu64 " tokens is more than the engine's %" PRIu64,
				    b.n_tokens, e->step_tokens);
	if (n_items > ARRAY_SIZE(stack) && !(bi = calloc(n_items, sizeof(*bi))))
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	/* Pages and history first: after the backend's pass nothing can fail. */
	for (size_t i = 0, t0 = 0; i < n_items; i++) {
		const struct capy_step_item *it = &items[i];
		if ((rc = seq_make_writable(it->seq, it->n, err)) < 0 || (rc = seq_reserve_history(it->seq, it->n, err)) < 0)
			goto out;
		if (it->keep_states && (rc = seq_kept_reserve(it->seq, it->n - 1, err)) < 0)
			goto out;
		bi[i] = (struct capy_batch_item){ .seq = it->seq, .tokens = it->tokens, .n = it->n, .t0 = t0,
						  .logits = it->logits, .all_logits = it->all_logits,
						  .sampler = it->sampler, .token = it->token,
						  .states = it->keep_states ? it->seq->kept : NULL,
						  .mask = it->mask, .mask_ud = it->mask_ud, .hidden = it->hidden };
		if (it->sampler && !it->token) {
			rc = capy_err_set(err, CAPY_EINVAL, "step item %zu: a sampler but nowhere for its token", i);
			goto out;
		}
		if (it->mask && !it->sampler) {
			rc = capy_err_set(err, CAPY_EINVAL, "step item %zu: a token mask but no sampler", i);
			goto out;
		}
		t0 += it->n;
	}
	b.items = bi;
	if (!e->ops->samples && (rc = host_sampling_rows(e, bi, n_items, err)) < 0)
		goto out;
	if ((rc = e->ops->step(e, &b, err)) < 0)
		goto out;
	if (!e->ops->samples)
		host_sample(e, bi, items, n_items);
	for (size_t i = 0; i < n_items; i++) {
		struct capy_seq *s = items[i].seq;
		memcpy(s->tokens + s->len, items[i].tokens, items[i].n * sizeof(int32_t));
		s->kept_base = s->len;
		s->kept_n = items[i].keep_states ? items[i].n : 0;
		s->len += items[i].n;
	}
out:
	if (bi != stack)
		free(bi);
	return rc;
}

int capy_engine_forward(struct capy_engine *e, struct capy_seq *s, const int32_t *tokens, uint64_t n,
			float *logits, bool all_logits, struct capy_err *err)
{
	return capy_engine_forward_hidden(e, s, tokens, n, logits, all_logits, NULL, err);
}

int capy_engine_forward_hidden(struct capy_engine *e, struct capy_seq *s, const int32_t *tokens, uint64_t n,
			       float *logits, bool all_logits, float *hidden, struct capy_err *err)
{
	uint64_t V = e->c.vocab_size;
	int rc;

	if (!n)
		return capy_err_set(err, CAPY_EINVAL, "no tokens to run");
	for (uint64_t i = 0; i < n; i++)
		if (tokens[i] < 0 || (uint64_t)tokens[i] >= V)
			return capy_err_set(err, CAPY_EINVAL, "token id %" PRId32 " at position %" PRIu64
					    " is outside the vocabulary [0, %" PRIu64 ")", tokens[i], i, V);
	for (uint64_t done = 0; done < n;) {
		uint64_t T = CAPY_MIN(e->step_tokens, n - done);
		bool last = done + T == n;
		struct capy_step_item it = { .seq = s, .tokens = tokens + done, .n = T, .logits = NULL, .all_logits = all_logits,
					     .hidden = hidden ? hidden + done * e->c.hidden_size : NULL };
		if (all_logits)
			it.logits = logits + done * V;
		else if (last)
			it.logits = logits;
		if ((rc = capy_engine_step(e, &it, 1, err)) < 0)
			return rc;
		done += T;
	}
	return 0;
}

bool capy_engine_has_mtp(const struct capy_engine *e)
{
	return e->opts.mtp;
}

/* Checked once, then run in pieces of at most step_tokens rows (each piece's rows attend over
 * the earlier pieces' rows in the pages). */
int capy_engine_mtp(struct capy_engine *e, const struct capy_mtp_rows *r, struct capy_err *err)
{
	uint64_t V = e->c.vocab_size, H = e->c.hidden_size, W = r->ids ? r->n_ids : V;
	struct capy_seq *s = r->seq;
	int rc;

	if (!e->opts.mtp)
		return capy_err_set(err, CAPY_EINVAL, "the engine was opened without its MTP head");
	/* Past the length: a chain of drafts, at most a window's reach. */
	if (!s || s->e != e || !r->n || r->pos > s->len + e->step_tokens)
		return capy_err_set(err, CAPY_EINVAL, "MTP rows at %" PRIu64 " (%" PRIu64 " of them) of a sequence of %"
				    PRIu64 " tokens", r->pos, r->n, s ? s->len : 0);
	if (r->ids && !r->n_ids)
		return capy_err_set(err, CAPY_EINVAL, "an empty draft vocabulary");
	for (uint64_t t = 0; t < r->n; t++)
		if (r->tokens[t] < 0 || (uint64_t)r->tokens[t] >= V)
			return capy_err_set(err, CAPY_EINVAL, "MTP token id %" PRId32 " is outside the vocabulary [0, %" PRIu64
					    ")", r->tokens[t], V);
	for (uint64_t i = 0; r->ids && i < r->n_ids; i++)
		if (r->ids[i] < 0 || (uint64_t)r->ids[i] >= V)
			return capy_err_set(err, CAPY_EINVAL, "draft vocabulary id %" PRId32 " is outside [0, %" PRIu64 ")",
					    r->ids[i], V);
	for (uint64_t done = 0; done < r->n;) {
		uint64_t T = CAPY_MIN(e->step_tokens, r->n - done);
		bool last = done + T == r->n;
		struct capy_mtp_rows piece = *r;
		piece.pos = r->pos + done;
		piece.n = T;
		piece.hidden = r->hidden + done * H;
		piece.tokens = r->tokens + done;
		piece.g = last ? r->g : NULL;
		piece.logits = !r->logits ? NULL : r->all_logits ? r->logits + done * W : last ? r->logits : NULL;
		if ((rc = seq_make_writable_at(s, piece.pos, T, err)) < 0 || (rc = e->ops->mtp(e, &piece, err)) < 0)
			return rc;
		done += T;
	}
	return 0;
}
