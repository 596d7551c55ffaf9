/* tok-added.c - finding added tokens in text, as HF's AddedVocabulary::find_matches does. */
#include "tokenizer-impl.h"

static int cmp_pattern(const void *a, const void *b)
{
	const struct tok_pattern *x = a, *y = b;

	if ((uint8_t)x->text[0] != (uint8_t)y->text[0])
		return (uint8_t)x->text[0] - (uint8_t)y->text[0];
	if (x->len != y->len)
		return x->len > y->len ? -1 : 1;
	return 0;
}

/* Sort patterns so that, for each first byte, the longest comes first; equal lengths keep the
 * given order (insertion sort: stable, and the lists are short). */
int tok_matcher_build(struct tok_matcher *m, struct tok_pattern *pats, size_t n)
{
	size_t k = 0;

	m->pats = pats;
	m->n = n;
	for (size_t i = 1; i < n; i++) {
		struct tok_pattern p = pats[i];
		size_t j = i;
		while (j > 0 && cmp_pattern(&pats[j - 1], &p) > 0) {
			pats[j] = pats[j - 1];
			j--;
		}
		pats[j] = p;
	}
	for (int b = 0; b <= 256; b++) {
		while (k < n && (uint8_t)pats[k].text[0] < b)
			k++;
		m->first[b] = (uint32_t)k;
	}
	return 0;
}

void tok_matcher_release(struct tok_matcher *m)
{
	free(m->pats);
	m->pats = NULL;
	m->n = 0;
}

const struct tok_pattern *tok_matcher_find(const struct tok_matcher *m, const char *s, size_t len,
					   size_t from, size_t *start)
{
	for (size_t i = from; i < len; i++) {
		uint8_t b = (uint8_t)s[i];
		for (uint32_t k = m->first[b]; k < m->first[b + 1]; k++) {
			const struct tok_pattern *p = &m->pats[k];
			if (p->len <= len - i && !memcmp(s + i, p->text, p->len)) {
				*start = i;
				return p;
			}
		}
	}
	return NULL;
}

/* Rust regex's \w (Unicode), tested on the character before or after a single_word match. */
static bool is_word_char(const struct capy_tokenizer *tok, struct tok_ctx *c, const char *s,
			 size_t len)
{
	return pcre2_match(tok->word_char, (PCRE2_SPTR)s, len, 0, PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK,
			   c->md, c->mctx) >= 0;
}

static size_t prev_char(const char *s, size_t i)
{
	do
		i--;
	while (i > 0 && ((uint8_t)s[i] & 0xC0) == 0x80);
	return i;
}

/* Start of the run of White_Space that ends s[0..end). */
static size_t trailing_space_start(const char *s, size_t end)
{
	while (end > 0) {
		size_t p = prev_char(s, end);
		uint32_t cp;
		tok_utf8_next(s + p, &cp);
		if (!tok_is_white_space(cp))
			break;
		end = p;
	}
	return end;
}

/* End of the run of White_Space that starts at s[from]. */
static size_t leading_space_end(const char *s, size_t len, size_t from)
{
	while (from < len) {
		uint32_t cp;
		int n = tok_utf8_next(s + from, &cp);
		if (!tok_is_white_space(cp))
			break;
		from += (size_t)n;
	}
	return from;
}

int tok_split_added(struct tok_ctx *c, const struct tok_matcher *m, const char *s, size_t len,
		    tok_piece_fn fn)
{
	const struct capy_tokenizer *tok = c->tok;
	size_t pos = 0, start_offset = 0, start, stop;
	const struct tok_pattern *p;
	int rc;

	while ((p = tok_matcher_find(m, s, len, pos, &start))) {
		uint8_t f = tok->id_flags[p->id];
		stop = start + p->len;
		pos = stop; /* the search resumes after the match as found, whatever is stripped */
		if (!(c->flags & (f & TOK_ID_SPECIAL ? CAPY_TOK_PARSE_SPECIAL : CAPY_TOK_PARSE_PLAIN)))
			continue;
		if (f & TOK_ID_SINGLE_WORD) {
			bool start_space = start == 0 ||
					   !is_word_char(tok, c, s + prev_char(s, start),
							 start - prev_char(s, start));
			bool stop_space = stop == len || !is_word_char(tok, c, s + stop, len - stop);
			if (!start_space || !stop_space)
				continue;
		}
		if (f & TOK_ID_LSTRIP)
			start = CAPY_MAX(trailing_space_start(s, start), start_offset);
		if (f & TOK_ID_RSTRIP)
			stop = leading_space_end(s, len, stop);
		if (start_offset < start && (rc = fn(c, s + start_offset, start - start_offset)) < 0)
			return rc;
		if ((rc = tok_emit(c, p->id)) < 0)
			return rc;
		start_offset = stop;
	}
	if (start_offset < len)
		return fn(c, s + start_offset, len - start_offset);
	return 0;
}
