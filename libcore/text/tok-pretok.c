/* tok-pretok.c - pre-tokenizers: Split (regex or string, five behaviours, invert) and ByteLevel.
 *
 * HF applies a Sequence one pre-tokenizer at a time to every piece; each piece is independent,
 * so here a piece goes through the whole chain depth-first and reaches BPE as soon as it is cut.
 * Empty pieces are dropped at every step, as PreTokenizedString::split does.
 */
#include "tokenizer-impl.h"

static int push_span(struct tok_ctx *c, size_t start, size_t end, bool match)
{
	if (c->s->n_spans == c->s->cap_spans) {
		size_t cap = c->s->cap_spans ? c->s->cap_spans * 2 : 256;
		struct tok_span *p = realloc(c->s->spans, cap * sizeof(*p));
		if (!p)
			return capy_err_set(c->err, CAPY_ENOMEM, "out of memory");
		c->s->spans = p;
		c->s->cap_spans = cap;
	}
	c->s->spans[c->s->n_spans++] = (struct tok_span){ (uint32_t)start, (uint32_t)end, match };
	return 0;
}

static int regex_error(struct tok_ctx *c, int rc)
{
	PCRE2_UCHAR msg[160];

	pcre2_get_error_message(rc, msg, sizeof(msg));
	return capy_err_set(c->err, rc == PCRE2_ERROR_NOMEMORY ? CAPY_ENOMEM : CAPY_EFORMAT,
			    "pre-tokenizer regex: %s", (const char *)msg);
}

/*
 * The matches of re in s as (gap, match) spans covering s, with the iteration rules of the onig
 * crate's find_iter: search from the end of the last match; an empty match right where the
 * last match ended is refused and the search moves on by one character.
 */
static int find_matches(struct tok_ctx *c, const pcre2_code *re, const char *s, size_t len)
{
	PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->s->md);
	size_t last_end = 0, prev = 0;
	long last_match_end = -1;
	int rc;

	while (last_end <= len) {
		rc = pcre2_match(re, (PCRE2_SPTR)s, len, last_end, PCRE2_NO_UTF_CHECK, c->s->md, c->s->mctx);
		if (rc == PCRE2_ERROR_NOMATCH)
			break;
		if (rc < 0)
			return regex_error(c, rc);
		size_t ms = ov[0], me = ov[1];
		if (ms == me && last_match_end == (long)me) {
			if (last_end < len) {
				uint32_t cp;
				last_end += (size_t)tok_utf8_next(s + last_end, &cp);
			} else {
				last_end++;
			}
			continue;
		}
		last_end = me;
		last_match_end = (long)me;
		if (prev != ms && (rc = push_span(c, prev, ms, false)) < 0)
			return rc;
		if ((rc = push_span(c, ms, me, true)) < 0)
			return rc;
		prev = me;
	}
	if (prev != len && (rc = push_span(c, prev, len, false)) < 0)
		return rc;
	return 0;
}

/* Fold spans[base..] in place by behaviour (NormalizedString::split); returns the new count. */
static size_t fold(struct tok_span *sp, size_t n, enum tok_split_behavior behavior)
{
	size_t k = 0;
	bool prev_match = false;

	switch (behavior) {
	case TOK_SPLIT_ISOLATED:
	case TOK_SPLIT_REMOVED:
		return n;
	case TOK_SPLIT_CONTIGUOUS:
		for (size_t i = 0; i < n; i++) {
			bool m = sp[i].match;
			if (m == prev_match && k)
				sp[k - 1].end = sp[i].end;
			else
				sp[k++] = sp[i];
			prev_match = m;
		}
		break;
	case TOK_SPLIT_MERGED_PREV:
		for (size_t i = 0; i < n; i++) {
			bool m = sp[i].match;
			if (m && !prev_match && k)
				sp[k - 1].end = sp[i].end;
			else
				sp[k++] = sp[i];
			prev_match = m;
		}
		break;
	case TOK_SPLIT_MERGED_NEXT:
		/* HF folds from the end; do the same into the top of the array, then move down. */
		k = n;
		for (size_t i = n; i-- > 0;) {
			bool m = sp[i].match;
			if (m && !prev_match && k < n)
				sp[k].start = sp[i].start;
			else
				sp[--k] = sp[i];
			prev_match = m;
		}
		memmove(sp, sp + k, (n - k) * sizeof(*sp));
		k = n - k;
		break;
	}
	for (size_t i = 0; i < k; i++)
		sp[i].match = false; /* nothing is removed after a merge */
	return k;
}

static int run(struct tok_ctx *c, size_t depth, const char *s, size_t len);

static int split_and_run(struct tok_ctx *c, size_t depth, const pcre2_code *re, bool invert,
			 enum tok_split_behavior behavior, const char *s, size_t len)
{
	size_t base = c->s->n_spans, n;
	int rc = find_matches(c, re, s, len);

	if (rc < 0)
		return rc;
	n = c->s->n_spans - base;
	if (invert)
		for (size_t i = 0; i < n; i++)
			c->s->spans[base + i].match = !c->s->spans[base + i].match;
	n = fold(c->s->spans + base, n, behavior);
	c->s->n_spans = base + n;
	for (size_t i = 0; i < n; i++) {
		/* re-read: deeper levels may move the array */
		struct tok_span sp = c->s->spans[base + i];
		if (behavior == TOK_SPLIT_REMOVED && sp.match)
			continue;
		if ((rc = run(c, depth + 1, s + sp.start, sp.end - sp.start)) < 0)
			return rc;
	}
	c->s->n_spans = base;
	return 0;
}

static int run(struct tok_ctx *c, size_t depth, const char *s, size_t len)
{
	const struct capy_tokenizer *tok = c->tok;
	const struct tok_pretok *pt;

	if (!len)
		return 0;
	if (depth == tok->n_pretoks)
		return tok_bpe_word(c, s, len);
	pt = &tok->pretoks[depth];
	if (pt->kind == TOK_PRE_SPLIT)
		return split_and_run(c, depth, pt->re, pt->invert, pt->behavior, s, len);

	/* ByteLevel (always the last pre-tokenizer; its byte mapping happens in tok-bpe.c) */
	if (pt->add_prefix_space && s[0] != ' ') {
		c->s->prefixed.len = 0;
		if (tok_buf_add(&c->s->prefixed, " ", 1) < 0 || tok_buf_add(&c->s->prefixed, s, len) < 0)
			return capy_err_set(c->err, CAPY_ENOMEM, "out of memory");
		s = c->s->prefixed.p;
		len = c->s->prefixed.len;
	}
	if (pt->re)
		return split_and_run(c, depth, pt->re, false, TOK_SPLIT_ISOLATED, s, len);
	return run(c, depth + 1, s, len);
}

int tok_pretokenize(struct tok_ctx *c, const char *s, size_t len)
{
	return run(c, 0, s, len);
}
