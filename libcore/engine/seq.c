/* seq.c - sequences: token history, block tables of shared attention-cache pages,
 * recurrent state through the backend, sharing, snapshots, checkpoint and truncate. */
#include "engine-impl.h"

int capy_seq_new(struct capy_engine *e, struct capy_seq **out, struct capy_err *err)
{
	struct capy_seq *s = calloc(1, sizeof(*s));
	int rc;

	if (!s)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory for a sequence");
	s->e = e;
	if ((rc = e->ops->state_new(e, &s->state, err)) < 0) {
		free(s);
		return rc;
	}
	s->state_valid = true;
	*out = s;
	return 0;
}

static void drop_pages_from(struct capy_seq *s, uint64_t keep)
{
	while (s->n_pages > keep)
		engine_page_drop(s->e, s->pages[--s->n_pages]);
}

void capy_seq_free(struct capy_seq *s)
{
	if (!s)
		return;
	drop_pages_from(s, 0);
	engine_pages_trim(s->e);
	if (s->state)
		s->e->ops->state_free(s->e, s->state);
	capy_snapshot_free(s->checkpoint);
	for (uint64_t i = 0; i < s->kept_cap; i++)
		s->e->ops->state_free(s->e, s->kept[i]);
	free(s->kept);
	free(s->pages);
	free(s->tokens);
	free(s);
}

uint64_t capy_seq_len(const struct capy_seq *s)
{
	return s->len;
}

const int32_t *capy_seq_tokens(const struct capy_seq *s)
{
	return s->tokens;
}

const uint32_t *capy_seq_page_ids(const struct capy_seq *s, uint64_t *n)
{
	*n = s->n_pages;
	return s->pages;
}

static int grow_pages(struct capy_seq *s, uint64_t need, struct capy_err *err)
{
	uint64_t cap = s->pages_cap ? s->pages_cap : 8;
	uint32_t *p;

	if (need <= s->pages_cap)
		return 0;
	while (cap < need)
		cap *= 2;
	if (!(p = realloc(s->pages, cap * sizeof(*p))))
		return capy_err_set(err, CAPY_ENOMEM, "out of memory for a block table of %" PRIu64 " pages", need);
	s->pages = p;
	s->pages_cap = cap;
	return 0;
}

int seq_reserve_history(struct capy_seq *s, uint64_t n, struct capy_err *err)
{
	uint64_t need = s->len + n, cap = s->tokens_cap ? s->tokens_cap : 256;
	int32_t *t;

	if (need <= s->tokens_cap)
		return 0;
	while (cap < need)
		cap *= 2;
	if (!(t = realloc(s->tokens, cap * sizeof(*t))))
		return capy_err_set(err, CAPY_ENOMEM, "out of memory for a history of %" PRIu64 " tokens", need);
	s->tokens = t;
	s->tokens_cap = cap;
	return 0;
}

int seq_make_writable(struct capy_seq *s, uint64_t n, struct capy_err *err)
{
	return seq_make_writable_at(s, s->len, n, err);
}

int seq_make_writable_at(struct capy_seq *s, uint64_t from, uint64_t n, struct capy_err *err)
{
	struct capy_engine *e = s->e;
	uint64_t P = e->page_tokens, first = from / P, last = (from + n - 1) / P;
	int rc;

	if ((rc = grow_pages(s, last + 1, err)) < 0)
		return rc;
	for (uint64_t i = first; i <= last; i++) {
		uint32_t id;
		if (i < s->n_pages && e->page_ref[s->pages[i]] == 1)
			continue;
		if ((rc = engine_page_alloc(e, &id, err)) < 0)
			return rc;
		if (i < s->n_pages) { /* shared: copy before writing */
			e->ops->page_copy(e, id, s->pages[i]);
			engine_page_drop(e, s->pages[i]);
			s->pages[i] = id;
		} else {
			s->pages[s->n_pages++] = id;
		}
	}
	return 0;
}

int capy_seq_share(const struct capy_seq *s, uint64_t n, struct capy_seq **out, struct capy_err *err)
{
	struct capy_engine *e = s->e;
	uint64_t np = (n + e->page_tokens - 1) / e->page_tokens;
	struct capy_seq *d;
	int rc;

	if (n > s->len)
		return capy_err_set(err, CAPY_EINVAL, "cannot share %" PRIu64 " tokens of a sequence of %" PRIu64, n, s->len);
	if (!(d = calloc(1, sizeof(*d))))
		return capy_err_set(err, CAPY_ENOMEM, "out of memory for a sequence");
	d->e = e;
	if ((rc = grow_pages(d, np, err)) < 0 || (rc = seq_reserve_history(d, n, err)) < 0) {
		capy_seq_free(d);
		return rc;
	}
	for (uint64_t i = 0; i < np; i++) {
		engine_page_hold(e, s->pages[i]);
		d->pages[d->n_pages++] = s->pages[i];
	}
	if (n)
		memcpy(d->tokens, s->tokens, n * sizeof(int32_t));
	d->len = n;
	*out = d;
	return 0;
}

int capy_seq_fork(const struct capy_seq *s, struct capy_seq **out, struct capy_err *err)
{
	struct capy_seq *d;
	int rc;

	if (!s->state_valid)
		return capy_err_set(err, CAPY_EINVAL, "a sequence without recurrent state cannot be forked");
	if ((rc = capy_seq_share(s, s->len, &d, err)) < 0)
		return rc;
	if ((rc = s->e->ops->state_new(s->e, &d->state, err)) < 0) {
		capy_seq_free(d);
		return rc;
	}
	s->e->ops->state_copy(s->e, d->state, s->state);
	d->state_valid = true;
	*out = d;
	return 0;
}

int capy_snapshot_take(const struct capy_seq *s, struct capy_snapshot **out, struct capy_err *err)
{
	struct capy_engine *e = s->e;
	struct capy_snapshot *sn;
	int rc;

	if (!s->state_valid)
		return capy_err_set(err, CAPY_EINVAL, "a sequence without recurrent state cannot be snapshot");
	if (!(sn = calloc(1, sizeof(*sn))))
		return capy_err_set(err, CAPY_ENOMEM, "out of memory for a snapshot");
	sn->e = e;
	if ((rc = e->ops->state_new(e, &sn->state, err)) < 0) {
		free(sn);
		return rc;
	}
	e->ops->state_copy(e, sn->state, s->state);
	sn->len = s->len;
	*out = sn;
	return 0;
}

void capy_snapshot_free(struct capy_snapshot *sn)
{
	if (!sn)
		return;
	sn->e->ops->state_free(sn->e, sn->state);
	free(sn);
}

uint64_t capy_snapshot_len(const struct capy_snapshot *sn)
{
	return sn->len;
}

uint64_t capy_snapshot_bytes(const struct capy_snapshot *sn)
{
	return sn->e->ops->state_bytes(sn->e);
}

int capy_seq_restore(struct capy_seq *s, const struct capy_snapshot *sn, struct capy_err *err)
{
	if (sn->e != s->e)
		return capy_err_set(err, CAPY_EINVAL, "the snapshot belongs to another engine");
	if (sn->len != s->len)
		return capy_err_set(err, CAPY_EINVAL, "a snapshot at %" PRIu64 " tokens does not fit a sequence of %" PRIu64,
				    sn->len, s->len);
	if (!s->state) {
		int rc = s->e->ops->state_new(s->e, &s->state, err);
		if (rc < 0)
			return rc;
	}
	s->e->ops->state_copy(s->e, s->state, sn->state);
	s->state_valid = true;
	return 0;
}

int capy_seq_checkpoint(struct capy_seq *s, struct capy_err *err)
{
	struct capy_snapshot *sn;
	int rc;

	if ((rc = capy_snapshot_take(s, &sn, err)) < 0)
		return rc;
	capy_snapshot_free(s->checkpoint);
	s->checkpoint = sn;
	return 0;
}

int capy_seq_truncate(struct capy_seq *s, uint64_t n, struct capy_err *err)
{
	uint64_t P = s->e->page_tokens;
	bool kept = n > s->kept_base && n <= s->kept_base + s->kept_n;

	if (n == s->len)
		return 0;
	if (!kept && (!s->checkpoint || s->checkpoint->len != n))
		return capy_err_set(err, CAPY_EINVAL, "cannot cut a sequence of %" PRIu64 " tokens back to %" PRIu64
				    " (no checkpoint or kept state there)", s->len, n);
	drop_pages_from(s, (n + P - 1) / P);
	s->len = n;
	s->kept_n = 0;
	if (kept) { /* the step that kept it left the sequence's state valid */
		s->e->ops->state_copy(s->e, s->state, s->kept[n - s->kept_base - 1]);
		return 0;
	}
	return capy_seq_restore(s, s->checkpoint, err);
}

bool capy_engine_can_export(const struct capy_engine *e)
{
	const struct capy_backend_ops *o = e->ops;

	return o->page_read && o->page_write && o->state_io_bytes && o->state_read && o->state_write;
}

uint64_t capy_engine_state_io_bytes(const struct capy_engine *e)
{
	return capy_engine_can_export(e) ? e->ops->state_io_bytes(e) : 0;
}

const struct capy_artifact *capy_engine_artifact(const struct capy_engine *e)
{
	return e->a;
}

enum capy_kv_dtype capy_engine_kv_dtype(const struct capy_engine *e)
{
	return e->opts.kv;
}

static int no_export(const struct capy_engine *e, struct capy_err *err)
{
	return capy_err_set(err, CAPY_EUNSUPPORTED, "the %s backend cannot move cached state to host memory", e->ops->name);
}

int capy_seq_export_pages(const struct capy_seq *s, uint64_t n, void *dst, struct capy_err *err)
{
	struct capy_engine *e = s->e;
	uint64_t P = e->page_tokens, np = (n + P - 1) / P, pb = e->ops->page_bytes(e);
	int rc;

	if (!capy_engine_can_export(e))
		return no_export(e, err);
	if (n > s->len || np > s->n_pages)
		return capy_err_set(err, CAPY_EINVAL, "cannot export %" PRIu64 " tokens of a sequence of %" PRIu64, n, s->len);
	for (uint64_t i = 0; i < np; i++)
		if ((rc = e->ops->page_read(e, s->pages[i], (uint8_t *)dst + i * pb, err)) < 0)
			return rc;
	return 0;
}

int capy_snapshot_export(const struct capy_snapshot *sn, void *dst, struct capy_err *err)
{
	if (!capy_engine_can_export(sn->e))
		return no_export(sn->e, err);
	return sn->e->ops->state_read(sn->e, sn->state, dst, err);
}

int capy_seq_import(struct capy_engine *e, const int32_t *ids, uint64_t n, const void *pages, const void *state,
		    struct capy_seq **out, struct capy_err *err)
{
	uint64_t P = e->page_tokens, np = (n + P - 1) / P, pb = e->ops->page_bytes(e);
	struct capy_seq *s;
	int rc;

	if (!capy_engine_can_export(e))
		return no_export(e, err);
	if ((rc = capy_seq_new(e, &s, err)) < 0)
		return rc;
	if (n && ((rc = seq_reserve_history(s, n, err)) < 0 || (rc = seq_make_writable(s, n, err)) < 0))
		goto fail;
	for (uint64_t i = 0; i < np; i++)
		if ((rc = e->ops->page_write(e, s->pages[i], (const uint8_t *)pages + i * pb, err)) < 0)
			goto fail;
	if ((rc = e->ops->state_write(e, s->state, state, err)) < 0)
		goto fail;
	if (n)
		memcpy(s->tokens, ids, n * sizeof(*ids));
	s->len = n;
	*out = s;
	return 0;
fail:
	capy_seq_free(s);
	return rc;
}
