/* tok-norm.c - Unicode normalizers (NFC, NFD, NFKC, NFKD) as HF applies them.
 *
 * utf8proc does the work. HF normalizes with Unicode 9.0 tables, utf8proc with 15.0; by Unicode's
 * stability policy the two agree on text made of characters assigned by 9.0. A character assigned
 * later is, for HF, an unassigned starter that nothing composes with or reorders around, so the
 * text is cut at such characters (those utf8proc could touch are listed in tok-unicode.c) and
 * the pieces between them are normalized alone.
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

/*
 * A character this form leaves alone whatever surrounds it: a starter (combining class 0) with
 * no decomposition that applies and that never comes second in a composition. Text can be cut
 * before such a character and each side normalized alone, so only the few "dirty" stretches
 * (from the last such character before a change to the next one after) go to utf8proc.
 */
static bool inert(enum tok_norm_kind kind, uint32_t cp)
{
	const utf8proc_property_t *p;

	if (cp < 0x80)
		return true;
	if (cp >= 0x1100 && cp <= 0x11FF) /* Hangul jamo compose algorithmically */
		return false;
	if (cp >= 0xAC00 && cp <= 0xD7A3) /* and syllables decompose so */
		return kind == TOK_NFC || kind == TOK_NFKC;
	p = utf8proc_get_property((utf8proc_int32_t)cp);
	if (p->combining_class || p->comp_exclusion)
		return false;
	if (p->decomp_seqindex != UINT16_MAX && (p->decomp_type == 0 || kind >= TOK_NFKC))
		return false;
	return p->comb_index == UINT16_MAX || p->comb_index < 0x8000;
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

/* Normalize s into out; returns 1 if s is unchanged (out is then not written). */
static int apply(enum tok_norm_kind kind, const char *s, size_t len, struct tok_buf *out,
		 struct capy_err *err)
{
	size_t i = 0, copied = 0, boundary = 0, dirty = SIZE_MAX;
	int rc;

	out->len = 0;
	while (i < len) {
		uint32_t cp;
		int n;
		if ((uint8_t)s[i] < 0x80) {
			cp = (uint8_t)s[i];
			n = 1;
		} else {
			n = tok_utf8_next(s + i, &cp);
		}
		/* U+11A7 is no trailing consonant, but utf8proc before 2.11 composes it into a
		 * preceding LV syllable (utf8proc PR #317); for everyone else it is inert */
		bool late = cp >= 0x80 && (is_late(cp) || cp == 0x11A7);
		if (late || inert(kind, cp)) {
			if (dirty != SIZE_MAX) {
				/* normalize the stretch [dirty, i) after the clean text before it */
				if (tok_buf_add(out, s + copied, dirty - copied) < 0)
					return capy_err_set(err, CAPY_ENOMEM, "out of memory");
				if ((rc = map_run(kind, s + dirty, i - dirty, out, err)) < 0)
					return rc;
				copied = i;
				dirty = SIZE_MAX;
			}
			/* a character HF does not know is a starter nothing combines with:
			 * utf8proc must not see it, so a stretch may begin right after it */
			boundary = late ? i + (size_t)n : i;
		} else if (dirty == SIZE_MAX) {
			dirty = boundary;
		}
		i += (size_t)n;
	}
	if (dirty == SIZE_MAX && !copied)
		return 1;
	if (tok_buf_add(out, s + copied, (dirty == SIZE_MAX ? len : dirty) - copied) < 0)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	if (dirty != SIZE_MAX && (rc = map_run(kind, s + dirty, len - dirty, out, err)) < 0)
		return rc;
	return 0;
}

int tok_normalize(const struct capy_tokenizer *tok, const char *s, size_t len, const char **res,
		  size_t *res_len, struct tok_buf bufs[2], struct capy_err *err)
{
	int which = 0;

	*res = s;
	*res_len = len;
	for (size_t k = 0; k < tok->n_norms; k++) {
		int rc = apply(tok->norms[k], *res, *res_len, &bufs[which], err);
		if (rc < 0)
			return rc;
		if (rc == 1)
			continue;
		*res = bufs[which].p ? bufs[which].p : "";
		*res_len = bufs[which].len;
		which ^= 1;
	}
	return 0;
}
