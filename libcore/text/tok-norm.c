/* tok-norm.c - Unicode normalizers (NFC, NFD, NFKC, NFKD) as HF applies them.
 *
 * utf8proc does the work. HF normalizes with Unicode 9.0 tables, utf8proc with 15.0; by Unicode's
 * stability policy the two agree on text made of characters assigned by 9.0. A character assigned
 * later is, for HF, an unassigned starter that nothing composes with or reorders around, so the
 * text is cut at such characters (those utf8proc could touch are listed in tok-unicode.c) and
 * each run between them is normalized alone.
 */
#include "tokenizer-impl.h"

#include <utf8proc.h>

static bool is_late(uint32_t cp)
{
	size_t lo = 0, hi = tok_n_late_norm;

	if (cp < tok_late_norm[0][0])
		return false;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (cp < tok_late_norm[mid][0])
			hi = mid;
		else if (cp > tok_late_norm[mid][1])
			lo = mid + 1;
		else
			return true;
	}
	return false;
}

/* Text that this form cannot change: for NFC every character below U+0300 (no decomposition
 * survives recomposition there and nothing composes with them from below), else ASCII. */
static bool unchanged(enum tok_norm_kind kind, const char *s, size_t len)
{
	uint8_t limit = kind == TOK_NFC ? 0xCC : 0x80;

	for (size_t i = 0; i < len; i++)
		if ((uint8_t)s[i] >= limit)
			return false;
	return true;
}

static int map_run(enum tok_norm_kind kind, const char *s, size_t len, struct tok_buf *out,
		   struct capy_err *err)
{
	static const utf8proc_option_t opts[] = {
		[TOK_NFC] = UTF8PROC_STABLE | UTF8PROC_COMPOSE,
		[TOK_NFD] = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE,
		[TOK_NFKC] = UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT,
		[TOK_NFKD] = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT,
	};
	utf8proc_uint8_t *dst = NULL;
	utf8proc_ssize_t n;

	if (!len)
		return 0;
	n = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)len, &dst, opts[kind]);
	if (n < 0) {
		free(dst);
		return capy_err_set(err, n == UTF8PROC_ERROR_NOMEM ? CAPY_ENOMEM : CAPY_EFORMAT,
				    "normalizer: %s", utf8proc_errmsg(n));
	}
	int rc = tok_buf_add(out, dst, (size_t)n);
	free(dst);
	return rc < 0 ? capy_err_set(err, CAPY_ENOMEM, "out of memory") : 0;
}

static int apply(enum tok_norm_kind kind, const char *s, size_t len, struct tok_buf *out,
		 struct capy_err *err)
{
	size_t run = 0, i = 0;

	out->len = 0;
	while (i < len) {
		uint32_t cp;
		int n = tok_utf8_next(s + i, &cp);
		if (is_late(cp)) {
			int rc = map_run(kind, s + run, i - run, out, err);
			if (rc < 0)
				return rc;
			if (tok_buf_add(out, s + i, (size_t)n) < 0)
				return capy_err_set(err, CAPY_ENOMEM, "out of memory");
			run = i + (size_t)n;
		}
		i += (size_t)n;
	}
	return map_run(kind, s + run, len - run, out, err);
}

int tok_normalize(const struct capy_tokenizer *tok, const char *s, size_t len, const char **res,
		  size_t *res_len, struct tok_buf bufs[2], struct capy_err *err)
{
	int which = 0;

	*res = s;
	*res_len = len;
	for (size_t k = 0; k < tok->n_norms; k++) {
		if (unchanged(tok->norms[k], *res, *res_len))
			continue;
		int rc = apply(tok->norms[k], *res, *res_len, &bufs[which], err);
		if (rc < 0)
			return rc;
		*res = bufs[which].p ? bufs[which].p : "";
		*res_len = bufs[which].len;
		which ^= 1;
	}
	return 0;
}
