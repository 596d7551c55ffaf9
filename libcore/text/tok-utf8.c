/* tok-utf8.c - UTF-8 checks and lossy conversion for the tokenizer, and its byte buffer. */
#include "tokenizer-impl.h"

int tok_buf_reserve(struct tok_buf *b, size_t extra)
{
	size_t need = b->len + extra + 1, cap;
	char *p;

	if (need <= b->cap)
		return 0;
	cap = b->cap ? b->cap : 64;
	while (cap < need)
		cap *= 2;
	p = realloc(b->p, cap);
	if (!p)
		return CAPY_ENOMEM;
	b->p = p;
	b->cap = cap;
	return 0;
}

int tok_buf_add(struct tok_buf *b, const void *data, size_t len)
{
	if (tok_buf_reserve(b, len) < 0)
		return CAPY_ENOMEM;
	if (len)
		memcpy(b->p + b->len, data, len);
	b->len += len;
	b->p[b->len] = '\0';
	return 0;
}

void tok_buf_release(struct tok_buf *b)
{
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
}

/*
 * The well-formed sequences of Unicode Table 3-7: the lead byte fixes the length and the range
 * of the second byte; later bytes are 80..BF. Returns the length (0 for a byte that cannot lead).
 */
static int lead_info(uint8_t b, uint8_t *lo, uint8_t *hi)
{
	*lo = 0x80;
	*hi = 0xBF;
	if (b < 0x80)
		return 1;
	if (b < 0xC2)
		return 0;
	if (b < 0xE0)
		return 2;
	if (b < 0xF0) {
		if (b == 0xE0)
			*lo = 0xA0;
		else if (b == 0xED)
			*hi = 0x9F;
		return 3;
	}
	if (b < 0xF5) {
		if (b == 0xF0)
			*lo = 0x90;
		else if (b == 0xF4)
			*hi = 0x8F;
		return 4;
	}
	return 0;
}

/*
 * Examine the sequence at s[0..len): returns its length if valid, else -(bytes of the maximal
 * subpart, at least 1) if invalid, else 0 if it is a valid but incomplete prefix cut by the end.
 */
static int seq_check(const uint8_t *s, size_t len)
{
	uint8_t lo, hi;
	int n = lead_info(s[0], &lo, &hi);

	if (!n)
		return -1;
	for (int j = 1; j < n; j++) {
		if ((size_t)j >= len)
			return 0;
		if (s[j] < lo || s[j] > hi)
			return -j;
		lo = 0x80;
		hi = 0xBF;
	}
	return n;
}

size_t tok_utf8_valid_prefix(const char *str, size_t len)
{
	const uint8_t *s = (const uint8_t *)str;
	size_t i = 0;

	while (i < len) {
		if (s[i] < 0x80) {
			i++;
			continue;
		}
		int n = seq_check(s + i, len - i);
		if (n <= 0)
			return i;
		i += (size_t)n;
	}
	return len;
}

int tok_utf8_lossy(struct tok_buf *out, const char *str, size_t len, bool hold, size_t *held)
{
	static const char fffd[3] = { (char)0xEF, (char)0xBF, (char)0xBD };
	const uint8_t *s = (const uint8_t *)str;
	size_t i = 0, run = 0;

	if (held)
		*held = 0;
	if (tok_buf_reserve(out, len) < 0)
		return CAPY_ENOMEM;
	while (i < len) {
		if (s[i] < 0x80) {
			i++;
			continue;
		}
		int n = seq_check(s + i, len - i);
		if (n > 0) {
			i += (size_t)n;
			continue;
		}
		if (tok_buf_add(out, str + run, i - run) < 0)
			return CAPY_ENOMEM;
		if (n == 0 && hold) {
			*held = len - i;
			return 0;
		}
		if (tok_buf_add(out, fffd, 3) < 0)
			return CAPY_ENOMEM;
		i += n == 0 ? len - i : (size_t)-n;
		run = i;
	}
	return tok_buf_add(out, str + run, len - run);
}

int tok_utf8_next(const char *str, uint32_t *cp)
{
	const uint8_t *s = (const uint8_t *)str;

	if (s[0] < 0x80) {
		*cp = s[0];
		return 1;
	}
	if (s[0] < 0xE0) {
		*cp = (uint32_t)(s[0] & 0x1F) << 6 | (s[1] & 0x3F);
		return 2;
	}
	if (s[0] < 0xF0) {
		*cp = (uint32_t)(s[0] & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
		return 3;
	}
	*cp = (uint32_t)(s[0] & 0x07) << 18 | (uint32_t)(s[1] & 0x3F) << 12 |
	      (uint32_t)(s[2] & 0x3F) << 6 | (s[3] & 0x3F);
	return 4;
}

int tok_utf8_encode(uint32_t cp, char out[4])
{
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xC0 | cp >> 6);
		out[1] = (char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xE0 | cp >> 12);
		out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
		out[2] = (char)(0x80 | (cp & 0x3F));
		return 3;
	}
	out[0] = (char)(0xF0 | cp >> 18);
	out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
	out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
	out[3] = (char)(0x80 | (cp & 0x3F));
	return 4;
}

bool tok_is_white_space(uint32_t cp)
{
	const struct tok_class_extra *ws = NULL;

	if (cp < 0x80)
		return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
	for (size_t i = 0; i < tok_n_class_extras; i++)
		if (!strcmp(tok_class_extras[i].name, "s"))
			ws = &tok_class_extras[i];
	for (size_t i = 0; ws && i < ws->n; i++)
		if (cp >= ws->ranges[i][0] && cp <= ws->ranges[i][1])
			return true;
	return false;
}
