/* tok-added.c - added tokens: reading them as AddedVocabulary::add_tokens does, and finding them
 * in text as AddedVocabulary::find_matches does.
 *
 * Ids are assigned as add_tokens does rather than read from "id": the vocabulary's id if the
 * content is in it, else the next id after the vocabulary.
 */
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
			   c->s->md, c->s->mctx) >= 0;
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

/* --- reading added_tokens ------------------------------------------------------------------ */

static bool same_token(const struct tok_added_def *a, const struct tok_added_def *b)
{
	return !strcmp(a->content, b->content) && a->single_word == b->single_word &&
	       a->lstrip == b->lstrip && a->rstrip == b->rstrip && a->normalized == b->normalized &&
	       a->special == b->special;
}

int tok_read_added(const cJSON *list, struct tok_added_def **out, size_t *n_out,
		   struct capy_err *err)
{
	const cJSON *it;
	size_t n = 0;
	struct tok_added_def *a;

	*out = NULL;
	*n_out = 0;
	if (!list || cJSON_IsNull(list))
		return 0;
	if (!cJSON_IsArray(list))
		return capy_err_set(err, CAPY_EFORMAT, TOK_WHAT ": added_tokens is not a list");
	a = calloc((size_t)cJSON_GetArraySize(list) + 1, sizeof(*a));
	if (!a)
		return tok_oom(err);
	cJSON_ArrayForEach(it, list) {
		char where[48];
		snprintf(where, sizeof(where), "added_tokens[%zu]", n);
		/* HF's AddedToken::default: only normalized is true */
		a[n].normalized = true;
		if (!cJSON_IsObject(it) ||
		    tok_json_string(cJSON_GetObjectItemCaseSensitive(it, "content"), where,
				    &a[n].content, err) < 0 ||
		    tok_json_bool(it, "single_word", where, &a[n].single_word, err) < 0 ||
		    tok_json_bool(it, "lstrip", where, &a[n].lstrip, err) < 0 ||
		    tok_json_bool(it, "rstrip", where, &a[n].rstrip, err) < 0 ||
		    tok_json_bool(it, "normalized", where, &a[n].normalized, err) < 0 ||
		    tok_json_bool(it, "special", where, &a[n].special, err) < 0) {
			free(a);
			if (!cJSON_IsObject(it))
				return capy_err_set(err, CAPY_EFORMAT, TOK_WHAT ": %s is not an object",
						    where);
			return CAPY_EFORMAT;
		}
		n++;
	}
	*out = a;
	*n_out = n;
	return 0;
}

/* AddedVocabulary::add_tokens with every token of the file at once, then refresh_added_tokens:
 * patterns are the special tokens (first occurrence of each content) then the others, split by
 * their own "normalized" flag; the flags used when matching are those of the id's last
 * definition. */
int tok_build_added(struct capy_tokenizer *tok, struct tok_added_def *a, size_t n, size_t vocab_n,
		    struct capy_err *err)
{
	struct tok_added_def **special = calloc(n + 1, sizeof(*special));
	struct tok_added_def **plain = calloc(n + 1, sizeof(*plain));
	struct tok_pattern *raw = calloc(n + 1, sizeof(*raw)), *norm = calloc(n + 1, sizeof(*norm));
	size_t n_special = 0, n_plain = 0, n_raw = 0, n_norm = 0;
	int32_t next_id = (int32_t)CAPY_MIN(vocab_n, (size_t)TOK_MAX_ID + 1);
	struct tok_buf nb[2] = { { 0 } };
	struct tok_strmap special_set = { 0 }; /* content -> index in special[] */
	int rc = 0;

	if (!special || !plain || !raw || !norm || tok_strmap_init(&tok->added, n, &tok->pool) < 0 ||
	    tok_strmap_init(&special_set, n, &tok->pool) < 0) {
		rc = tok_oom(err);
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		size_t len = strlen(a[i].content);
		uint32_t off;
		if (!a[i].special || !len || tok_strmap_get(&special_set, a[i].content, len) >= 0)
			continue;
		if (tok_pool_add(tok, a[i].content, len, &off) < 0 ||
		    tok_strmap_put(&special_set, off, len, (int32_t)n_special) < 0) {
			rc = tok_oom(err);
			goto out;
		}
		special[n_special++] = &a[i];
	}
	for (size_t i = 0; i < n; i++) {
		size_t len = strlen(a[i].content);
		bool dup = false;
		uint32_t off;
		int32_t id;

		a[i].id = -1;
		if (!len)
			continue;
		/* HF ignores a token equal in every field to one already added; only contents
		 * seen before can be (the scan is rare) */
		id = tok_strmap_get(&tok->added, a[i].content, len);
		for (size_t k = 0; id >= 0 && k < i && !dup; k++)
			dup = a[k].id >= 0 && same_token(&a[k], &a[i]);
		if (dup)
			continue;
		if (id < 0)
			id = tok_strmap_get(&tok->vocab, a[i].content, len);
		if (id < 0) {
			if (next_id > TOK_MAX_ID) {
				rc = capy_err_set(err, CAPY_EUNSUPPORTED, TOK_WHAT ": too many ids");
				goto out;
			}
			id = next_id++;
		}
		a[i].id = id;
		if (tok_pool_add(tok, a[i].content, len, &off) < 0 ||
		    tok_strmap_put(&tok->added, off, len, id) < 0) {
			rc = tok_oom(err);
			goto out;
		}
		if (tok_strmap_get(&special_set, a[i].content, len) < 0)
			plain[n_plain++] = &a[i];
	}
	/* The patterns, in HF's order: special tokens, then the others. */
	for (size_t i = 0; i < n_special + n_plain; i++) {
		struct tok_added_def *t = i < n_special ? special[i] : plain[i - n_special];
		size_t len = strlen(t->content);
		int32_t id = tok_strmap_get(&tok->added, t->content, len);
		const char *text = t->content;
		size_t tlen = len;
		uint32_t off;

		if (t->normalized &&
		    (rc = tok_normalize(tok, t->content, len, &text, &tlen, nb, err)) < 0)
			goto out;
		if (!tlen)
			continue;
		if (tok_pool_add(tok, text, tlen, &off) < 0) {
			rc = tok_oom(err);
			goto out;
		}
		struct tok_pattern *p = t->normalized ? &norm[n_norm++] : &raw[n_raw++];
		p->text = (const char *)(uintptr_t)off; /* an offset until the pool stops moving */
		p->len = (uint32_t)tlen;
		p->id = id;
	}
	tok->raw_matcher.pats = raw;
	tok->raw_matcher.n = n_raw;
	tok->norm_matcher.pats = norm;
	tok->norm_matcher.n = n_norm;
	raw = norm = NULL;
out:
	free(special);
	free(plain);
	free(raw);
	free(norm);
	tok_buf_release(&nb[0]);
	tok_buf_release(&nb[1]);
	tok_strmap_release(&special_set);
	return rc;
}

void tok_matcher_finish(struct capy_tokenizer *tok, struct tok_matcher *m)
{
	for (size_t i = 0; i < m->n; i++)
		m->pats[i].text = tok->pool + (uintptr_t)m->pats[i].text;
	tok_matcher_build(m, m->pats, m->n);
}
