/* textout.c - generated tokens to a response's text events: streaming detokenization
 * (whole UTF-8 characters only, special tokens dropped), stop strings (text that could
 * still become one is held back; the match and what follows are cut), then the output
 * parser (reasoning, content, tool calls) or, for raw completions, the text as content. */
#include "serve.h"

struct capy_textout {
	struct capy_detok *dt;
	struct capy_outparse *op;      /* NULL: raw text as CONTENT events */
	char **stop;
	size_t n_stop, max_stop;
	char *hold;                    /* text not yet passed on (could start a stop string) */
	size_t n_hold, cap_hold;
	int stopped;                   /* index + 1 of the stop string that matched, or 0 */
	bool finished;
};

void capy_textout_free(struct capy_textout *t)
{
	if (!t)
		return;
	capy_detok_free(t->dt);
	capy_outparse_free(t->op);
	for (size_t i = 0; i < t->n_stop; i++)
		free(t->stop[i]);
	free(t->stop);
	free(t->hold);
	free(t);
}

int capy_textout_new(struct capy_textout **out, const struct capy_textout_opts *o, struct capy_err *err)
{
	struct capy_textout *t = calloc(1, sizeof(*t));
	int rc;

	if (!t)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	if (!(t->dt = capy_detok_new(o->tok, CAPY_TOK_SKIP_SPECIAL)))
		goto oom;
	if (o->parse && (rc = capy_outparse_new(&t->op, &o->parse_opts, err)) < 0) {
		capy_textout_free(t);
		return rc;
	}
	if (o->n_stop && !(t->stop = calloc(o->n_stop, sizeof(*t->stop))))
		goto oom;
	for (size_t i = 0; i < o->n_stop; i++) {
		if (!o->stop[i][0])
			continue; /* an empty stop string never matches */
		if (!(t->stop[t->n_stop] = strdup(o->stop[i])))
			goto oom;
		t->max_stop = CAPY_MAX(t->max_stop, strlen(o->stop[i]));
		t->n_stop++;
	}
	*out = t;
	return 0;
oom:
	capy_textout_free(t);
	return capy_err_set(err, CAPY_ENOMEM, "out of memory");
}

static int emit(struct capy_textout *t, const char *s, size_t n, capy_outparse_cb cb, void *ud, struct capy_err *err)
{
	if (!n)
		return 0;
	if (t->op)
		return capy_outparse_feed(t->op, s, n, cb, ud, err);
	struct capy_outparse_event ev = { .type = CAPY_OUTPARSE_CONTENT, .len = n, .index = -1 };
	char *copy = strndup(s, n); /* the event's text is NUL-terminated */
	int rc;
	if (!copy)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	ev.text = copy;
	rc = cb(ud, &ev);
	free(copy);
	return rc;
}

/* Where the earliest stop string starts in the held text (and which), or n_hold. */
static size_t find_stop(const struct capy_textout *t, int *which)
{
	size_t best = t->n_hold;

	for (size_t i = 0; i < t->n_stop; i++) {
		const char *p = memmem(t->hold, t->n_hold, t->stop[i], strlen(t->stop[i]));
		if (p && (size_t)(p - t->hold) < best) {
			best = (size_t)(p - t->hold);
			*which = (int)i + 1;
		}
	}
	return best;
}

/* How much of the held text can go on: all but a tail that is a proper prefix of some stop
 * string, kept whole at UTF-8 character starts. */
static size_t safe_len(const struct capy_textout *t)
{
	size_t keep = 0;

	for (size_t i = 0; i < t->n_stop; i++) {
		size_t ls = strlen(t->stop[i]);
		for (size_t k = CAPY_MIN(ls - 1, t->n_hold); k > keep; k--)
			if (!memcmp(t->hold + t->n_hold - k, t->stop[i], k)) {
				keep = k;
				break;
			}
	}
	return t->n_hold - keep;
}

int capy_textout_token(struct capy_textout *t, int32_t id, capy_outparse_cb cb, void *ud, bool *stopped,
		       struct capy_err *err)
{
	const char *piece;
	size_t n, cut;
	int which = 0, rc;

	*stopped = t->stopped != 0;
	if (t->stopped || t->finished)
		return 0;
	if (capy_detok_feed(t->dt, id, &piece, &n) < 0)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	if (!t->n_stop)
		return emit(t, piece, n, cb, ud, err);
	if (t->n_hold + n + 1 > t->cap_hold) {
		size_t cap = 2 * (t->n_hold + n + 1);
		char *h = realloc(t->hold, cap);
		if (!h)
			return capy_err_set(err, CAPY_ENOMEM, "out of memory");
		t->hold = h;
		t->cap_hold = cap;
	}
	memcpy(t->hold + t->n_hold, piece, n);
	t->n_hold += n;
	cut = find_stop(t, &which);
	if (which) {
		t->stopped = which;
		*stopped = true;
		rc = emit(t, t->hold, cut, cb, ud, err);
		t->n_hold = 0;
		return rc;
	}
	cut = safe_len(t);
	if ((rc = emit(t, t->hold, cut, cb, ud, err)) < 0)
		return rc;
	memmove(t->hold, t->hold + cut, t->n_hold - cut);
	t->n_hold -= cut;
	return 0;
}

int capy_textout_feed_text(struct capy_textout *t, const char *s, size_t n, capy_outparse_cb cb, void *ud,
			   struct capy_err *err)
{
	return emit(t, s, n, cb, ud, err);
}

int capy_textout_finish(struct capy_textout *t, capy_outparse_cb cb, void *ud, struct capy_err *err)
{
	const char *piece;
	size_t n;
	int rc;

	if (t->finished)
		return 0;
	t->finished = true;
	if (!t->stopped) {
		capy_detok_flush(t->dt, &piece, &n);
		if ((rc = emit(t, t->hold, t->n_hold, cb, ud, err)) < 0 || (rc = emit(t, piece, n, cb, ud, err)) < 0)
			return rc;
		t->n_hold = 0;
	}
	return t->op ? capy_outparse_finish(t->op, cb, ud, err) : 0;
}

const char *capy_textout_stop_string(const struct capy_textout *t)
{
	return t->stopped ? t->stop[t->stopped - 1] : NULL;
}

const struct capy_outparse_stats *capy_textout_parse_stats(const struct capy_textout *t)
{
	return t->op ? capy_outparse_stats(t->op) : NULL;
}
