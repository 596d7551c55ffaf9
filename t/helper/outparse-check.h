/* outparse-check.h - records the output parser's events for tests and the fuzzer: adjacent
 * deltas of one kind merged into a text log, and every event checked on the way (order,
 * non-empty valid UTF-8 text, each call's arguments one valid JSON object).
 */
#ifndef CAPY_T_OUTPARSE_CHECK_H
#define CAPY_T_OUTPARSE_CHECK_H

#include "core.h"
#include "text/outparse.h"
#include "text/outparse-impl.h" /* op_json_valid, the strict JSON checker, as an oracle */

#include <cjson/cJSON.h>
#include <utf8proc.h>

struct sb {
	char *p;
	size_t n, cap;
};

static inline void sb_add(struct sb *b, const void *s, size_t n)
{
	if (b->n + n + 1 > b->cap) {
		b->cap = (b->n + n + 1) * 2;
		b->p = realloc(b->p, b->cap);
		if (!b->p)
			abort();
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = '\0';
}

static inline void sb_fmt(struct sb *b, const char *fmt, ...)
{
	char tmp[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	sb_add(b, tmp, (size_t)CAPY_MIN(n, (int)sizeof(tmp) - 1));
}

/* The event stream with adjacent deltas of one kind merged, as text, plus checks on every
 * event: order, non-empty valid UTF-8, NUL-terminated, each call's arguments valid JSON. */
struct rec {
	struct sb log;
	int last_type;        /* type of the last merged item, -1 at start */
	struct sb args;       /* arguments of the open call */
	int open_call;        /* index of the open call, -1 if none */
	int n_starts;
	int bad;              /* violated invariants */
	int stop_at_call;     /* return CAPY_ECANCELED at the first CALL_START */
};

static inline void rec_init(struct rec *r)
{
	memset(r, 0, sizeof(*r));
	r->last_type = -1;
	r->open_call = -1;
	sb_add(&r->log, "", 0);
}

static inline void rec_release(struct rec *r)
{
	free(r->log.p);
	free(r->args.p);
}

static inline bool valid_utf8(const char *s, size_t n)
{
	utf8proc_int32_t cp;

	while (n) {
		utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &cp);

		if (k <= 0)
			return false;
		s += k;
		n -= (size_t)k;
	}
	return true;
}

static inline bool json_ok(const char *s, size_t n)
{
	cJSON *v = cJSON_ParseWithLength(s, n);
	bool ok = v && cJSON_IsObject(v) && op_json_valid(s, n);

	cJSON_Delete(v);
	return ok;
}

static inline int rec_cb(void *ud, const struct capy_outparse_event *ev)
{
	static const char tags[] = "RCSAE";
	struct rec *r = ud;
	bool text = ev->type != CAPY_OUTPARSE_CALL_START && ev->type != CAPY_OUTPARSE_CALL_END;

	if (text && (!ev->len || ev->text[ev->len] || !valid_utf8(ev->text, ev->len)))
		r->bad++;
	switch (ev->type) {
	case CAPY_OUTPARSE_REASONING:
	case CAPY_OUTPARSE_CONTENT:
		if (r->open_call >= 0)
			r->bad++;
		break;
	case CAPY_OUTPARSE_CALL_START:
		if (r->open_call >= 0 || ev->index != r->n_starts)
			r->bad++;
		if (r->stop_at_call)
			return CAPY_ECANCELED;
		r->open_call = ev->index;
		r->n_starts++;
		r->args.n = 0;
		sb_fmt(&r->log, "\n[S %d %s %s%s]", ev->index, ev->id, ev->name,
		       ev->unknown ? " unknown" : "");
		r->last_type = ev->type;
		return 0;
	case CAPY_OUTPARSE_CALL_ARGS:
		if (r->open_call != ev->index)
			r->bad++;
		sb_add(&r->args, ev->text, ev->len);
		break;
	case CAPY_OUTPARSE_CALL_END:
		if (r->open_call != ev->index || !json_ok(r->args.p ? r->args.p : "", r->args.n))
			r->bad++;
		r->open_call = -1;
		sb_fmt(&r->log, "\n[E %d %d]", ev->index, (int)ev->status);
		r->last_type = ev->type;
		return 0;
	}
	if (r->last_type != (int)ev->type) {
		sb_fmt(&r->log, "\n%c:", tags[ev->type]);
		r->last_type = ev->type;
	}
	sb_add(&r->log, ev->text, ev->len);
	return 0;
}

/* Parse text cut at the given offsets (sorted); fills the log and stats. */
static inline int run_cuts(const char *text, size_t len, const struct capy_outparse_opts *o,
		    const size_t *cuts, size_t ncuts, struct rec *r, struct capy_outparse_stats *st)
{
	struct capy_err err = { 0 };
	struct capy_outparse *p;
	size_t at = 0;
	int rc;

	rec_init(r);
	if (st)
		memset(st, 0, sizeof(*st));
	rc = capy_outparse_new(&p, o, &err);
	if (rc < 0)
		return rc;
	for (size_t i = 0; i <= ncuts && !rc; i++) {
		size_t end = i < ncuts ? cuts[i] : len;

		rc = capy_outparse_feed(p, text + at, end - at, rec_cb, r, &err);
		at = end;
	}
	if (!rc)
		rc = capy_outparse_finish(p, rec_cb, r, &err);
	if (r->open_call >= 0)
		r->bad++;
	if (st)
		*st = *capy_outparse_stats(p);
	capy_outparse_free(p);
	return rc;
}

static inline int run_one(const char *text, size_t len, const struct capy_outparse_opts *o, struct rec *r,
		   struct capy_outparse_stats *st)
{
	return run_cuts(text, len, o, NULL, 0, r, st);
}

static inline int run_bytes(const char *text, size_t len, const struct capy_outparse_opts *o,
		     struct rec *r, struct capy_outparse_stats *st)
{
	size_t *cuts = malloc((len + 1) * sizeof(*cuts));
	int rc;

	for (size_t i = 0; i < len; i++)
		cuts[i] = i;
	rc = run_cuts(text, len, o, cuts, len ? len - 1 : 0, r, st);
	free(cuts);
	return rc;
}

static inline bool same_stats(const struct capy_outparse_stats *a, const struct capy_outparse_stats *b)
{
	return a->n_tool_calls == b->n_tool_calls &&
	       a->n_malformed_tool_calls == b->n_malformed_tool_calls &&
	       a->n_truncated_tool_calls == b->n_truncated_tool_calls &&
	       a->n_unknown_tool_calls == b->n_unknown_tool_calls &&
	       a->n_invalid_utf8 == b->n_invalid_utf8 && a->reasoning == b->reasoning;
}

#endif
