/* tok-regex.c - compile tokenizer.json regexes (written for Oniguruma) with PCRE2.
 *
 * HF runs Split patterns with Oniguruma in its Ruby syntax. The two engines agree on the syntax
 * real tokenizers use, but not on every class: PCRE2 10.42 knows Unicode 14.0 and counts
 * U+180E as \s, Oniguruma 6.9.10 knows Unicode 16.0 and follows White_Space. So class escapes
 * are rewritten into explicit classes completed with the code points from tok-unicode.c, and
 * the few escapes whose meaning differs are translated:
 *   \s \S          [White_Space] / its complement (U+180E excluded)
 *   \p{X} for X in L M N Nd P S Lu Ll Lt Lm Lo Z (and long names), \d, \w
 *                  PCRE2's class + the code points Unicode 15.0-16.0 added to it
 *   \h \H          Ruby's hex digit (PCRE2: horizontal space)
 *   \v             vertical tab (PCRE2: a class)
 *   \uHHHH         \x{HHHH}
 *   (?m)           Ruby's dot-all is PCRE2's (?s); ^ and $ always match at lines (MULTILINE)
 * A negated class escape inside [...] (such as [\S]) or a nested class cannot be expressed this
 * way and is refused as unsupported.
 */
#include "tokenizer-impl.h"

struct xlate {
	struct tok_buf out;
	const char *what;
	struct capy_err *err;
};

static const struct tok_class_extra *extra(const char *name)
{
	for (size_t i = 0; i < tok_n_class_extras; i++)
		if (!strcmp(tok_class_extras[i].name, name))
			return &tok_class_extras[i];
	return NULL;
}

static int put(struct xlate *x, const char *s, size_t len)
{
	if (tok_buf_add(&x->out, s, len) < 0)
		return capy_err_set(x->err, CAPY_ENOMEM, "out of memory");
	return 0;
}

static int puts_(struct xlate *x, const char *s)
{
	return put(x, s, strlen(s));
}

/* The body of a class (no brackets): PCRE2's part and the extra ranges. */
static int put_class_body(struct xlate *x, const struct tok_class_extra *e)
{
	char tmp[48];

	if (puts_(x, e->pcre) < 0)
		return CAPY_ENOMEM;
	for (size_t i = 0; i < e->n; i++) {
		int n = e->ranges[i][0] == e->ranges[i][1] ?
				snprintf(tmp, sizeof(tmp), "\\x{%x}", e->ranges[i][0]) :
				snprintf(tmp, sizeof(tmp), "\\x{%x}-\\x{%x}", e->ranges[i][0],
					 e->ranges[i][1]);
		if (put(x, tmp, (size_t)n) < 0)
			return CAPY_ENOMEM;
	}
	return 0;
}

static int put_class(struct xlate *x, const struct tok_class_extra *e, bool negated, bool in_class,
		     const char *token)
{
	if (in_class) {
		if (negated)
			return capy_err_set(x->err, CAPY_EUNSUPPORTED,
					    "%s: '%s' inside a character class is not supported",
					    x->what, token);
		return put_class_body(x, e);
	}
	if (puts_(x, negated ? "[^" : "[") < 0 || put_class_body(x, e) < 0 || puts_(x, "]") < 0)
		return CAPY_ENOMEM;
	return 0;
}

/* Map a \p{...} name to a completed class, NULL to leave it to PCRE2. Both engines compare
 * property names loosely: case, spaces, '_' and '-' do not matter. */
static const struct tok_class_extra *property(const char *name, size_t len)
{
	static const char *const names[][2] = {
		{ "l", "L" }, { "letter", "L" }, { "m", "M" }, { "mark", "M" },
		{ "combiningmark", "M" }, { "n", "N" }, { "number", "N" }, { "nd", "Nd" },
		{ "decimalnumber", "Nd" }, { "digit", "Nd" }, { "p", "P" }, { "punctuation", "P" },
		{ "punct", "P" }, { "s", "S" }, { "symbol", "S" }, { "lu", "Lu" },
		{ "uppercaseletter", "Lu" }, { "ll", "Ll" }, { "lowercaseletter", "Ll" },
		{ "lt", "Lt" }, { "titlecaseletter", "Lt" }, { "lm", "Lm" }, { "modifierletter", "Lm" },
		{ "lo", "Lo" }, { "otherletter", "Lo" }, { "z", "Z" }, { "separator", "Z" },
	};
	char key[32];
	size_t n = 0;

	for (size_t i = 0; i < len; i++) {
		char c = name[i];
		if (c == '_' || c == '-' || c == ' ')
			continue;
		if (n + 1 >= sizeof(key))
			return NULL;
		key[n++] = (char)(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
	}
	key[n] = '\0';
	for (size_t i = 0; i < ARRAY_SIZE(names); i++)
		if (!strcmp(names[i][0], key))
			return extra(names[i][1]);
	return NULL;
}

static int translate(struct xlate *x, const char *p, size_t len)
{
	bool in_class = false;
	size_t i = 0;

	while (i < len) {
		char c = p[i];

		if (c == '\\') {
			if (i + 1 >= len)
				return capy_err_set(x->err, CAPY_EFORMAT,
						    "%s: pattern ends with a backslash", x->what);
			char e = p[i + 1];
			const char *cls = NULL;
			bool neg = false;
			switch (e) {
			case 's': cls = "s"; break;
			case 'S': cls = "s"; neg = true; break;
			case 'd': cls = "Nd"; break;
			case 'D': cls = "Nd"; neg = true; break;
			case 'w': cls = "w"; break;
			case 'W': cls = "w"; neg = true; break;
			}
			if (cls) {
				char tok[3] = { '\\', e, 0 };
				int rc = put_class(x, extra(cls), neg, in_class, tok);
				if (rc < 0)
					return rc;
				i += 2;
				continue;
			}
			if ((e == 'p' || e == 'P') && i + 2 < len && p[i + 2] == '{') {
				const char *end = memchr(p + i + 3, '}', len - i - 3);
				if (!end)
					return capy_err_set(x->err, CAPY_EFORMAT,
							    "%s: unterminated \\%c{ at offset %zu",
							    x->what, e, i);
				const char *name = p + i + 3;
				bool caret = name < end && *name == '^';
				const struct tok_class_extra *ex =
					property(name + caret, (size_t)(end - name) - caret);
				size_t n = (size_t)(end - p) + 1 - i;
				if (ex) {
					char tok[64];
					snprintf(tok, sizeof(tok), "%.*s", (int)CAPY_MIN(n, 60),
						 p + i);
					int rc = put_class(x, ex, (e == 'P') != caret, in_class,
							   tok);
					if (rc < 0)
						return rc;
				} else if (put(x, p + i, n) < 0) {
					return CAPY_ENOMEM;
				}
				i += n;
				continue;
			}
			if (e == 'h' || e == 'H') {
				if (in_class && e == 'H')
					return capy_err_set(x->err, CAPY_EUNSUPPORTED,
							    "%s: '\\H' inside a character class is "
							    "not supported", x->what);
				if (puts_(x, in_class ? "0-9a-fA-F" :
					  e == 'h' ? "[0-9a-fA-F]" : "[^0-9a-fA-F]") < 0)
					return CAPY_ENOMEM;
				i += 2;
				continue;
			}
			if (e == 'v') {
				if (puts_(x, "\\x{0b}") < 0)
					return CAPY_ENOMEM;
				i += 2;
				continue;
			}
			if (e == 'u' && i + 6 <= len) {
				char tmp[16];
				bool hex = true;
				for (int k = 2; k < 6; k++)
					hex = hex && strchr("0123456789abcdefABCDEF", p[i + k]) &&
					      p[i + k];
				if (hex) {
					int n = snprintf(tmp, sizeof(tmp), "\\x{%.4s}", p + i + 2);
					if (put(x, tmp, (size_t)n) < 0)
						return CAPY_ENOMEM;
					i += 6;
					continue;
				}
			}
			/* Any other escape means the same in both; copy it with a whole
			 * UTF-8 character after the backslash. */
			size_t n = 2;
			while (i + n < len && ((uint8_t)p[i + n] & 0xC0) == 0x80)
				n++;
			if (put(x, p + i, n) < 0)
				return CAPY_ENOMEM;
			i += n;
			continue;
		}
		if (in_class) {
			if (c == ']') {
				in_class = false;
			} else if (c == '[') {
				if (i + 1 < len && p[i + 1] == ':') {
					const char *end = NULL;
					for (size_t k = i + 2; k + 1 < len; k++)
						if (p[k] == ':' && p[k + 1] == ']') {
							end = p + k + 2;
							break;
						}
					if (end) {
						if (put(x, p + i, (size_t)(end - p) - i) < 0)
							return CAPY_ENOMEM;
						i = (size_t)(end - p);
						continue;
					}
				}
				return capy_err_set(x->err, CAPY_EUNSUPPORTED,
						    "%s: nested character class at offset %zu is not "
						    "supported", x->what, i);
			} else if (c == '&' && i + 1 < len && p[i + 1] == '&') {
				return capy_err_set(x->err, CAPY_EUNSUPPORTED,
						    "%s: class intersection '&&' is not supported",
						    x->what);
			}
			if (put(x, &c, 1) < 0)
				return CAPY_ENOMEM;
			i++;
			continue;
		}
		if (c == '[') {
			in_class = true;
			if (put(x, &c, 1) < 0)
				return CAPY_ENOMEM;
			i++;
			/* "^" and a leading "]" belong to the class opening */
			if (i < len && p[i] == '^' && put(x, p + i++, 1) < 0)
				return CAPY_ENOMEM;
			if (i < len && p[i] == ']' && put(x, "\\]", 2) < 0)
				return CAPY_ENOMEM;
			if (i < len && p[i] == ']')
				i++;
			continue;
		}
		if (c == '(' && i + 2 < len && p[i + 1] == '?') {
			/* Inline options: Ruby's m is PCRE2's s. */
			size_t k = i + 2;
			while (k < len && strchr("imx-", p[k]) && p[k])
				k++;
			if (k > i + 2 && k < len && (p[k] == ')' || p[k] == ':')) {
				if (puts_(x, "(?") < 0)
					return CAPY_ENOMEM;
				for (size_t j = i + 2; j < k; j++)
					if (put(x, p[j] == 'm' ? "s" : p + j, 1) < 0)
						return CAPY_ENOMEM;
				i = k;
				continue;
			}
		}
		if (put(x, &c, 1) < 0)
			return CAPY_ENOMEM;
		i++;
	}
	if (in_class)
		return capy_err_set(x->err, CAPY_EFORMAT, "%s: unterminated character class",
				    x->what);
	return 0;
}

static int compile(struct xlate *x, uint32_t opts, const char *shown, size_t shown_len,
		   pcre2_code **out)
{
	int errcode;
	PCRE2_SIZE erroff;
	pcre2_code *re;

	re = pcre2_compile((PCRE2_SPTR)(x->out.p ? x->out.p : ""), x->out.len, opts, &errcode,
			   &erroff, NULL);
	tok_buf_release(&x->out);
	if (!re) {
		PCRE2_UCHAR msg[160];
		pcre2_get_error_message(errcode, msg, sizeof(msg));
		return capy_err_set(x->err, CAPY_EFORMAT, "%s: regex '%.*s': %s", x->what,
				    (int)CAPY_MIN(shown_len, 200), shown, (const char *)msg);
	}
	/* Without JIT (not built in, or out of executable memory) pcre2_match interprets. */
	pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
	*out = re;
	return 0;
}

int tok_regex_compile(const char *pattern, size_t len, bool literal, pcre2_code **out,
		      const char *what, struct capy_err *err)
{
	struct xlate x = { .what = what, .err = err };
	int rc;

	*out = NULL;
	if (literal) {
		if (put(&x, pattern, len) < 0)
			return CAPY_ENOMEM;
		return compile(&x, PCRE2_UTF | PCRE2_LITERAL, pattern, len, out);
	}
	rc = translate(&x, pattern, len);
	if (rc < 0) {
		tok_buf_release(&x.out);
		return rc;
	}
	return compile(&x, PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, pattern, len, out);
}

int tok_regex_compile_class(const char *name, pcre2_code **out, const char *what,
			    struct capy_err *err)
{
	struct xlate x = { .what = what, .err = err };
	const struct tok_class_extra *e = extra(name);

	*out = NULL;
	if (!e)
		CAPY_BUG("no character class '%s'", name);
	if (put_class(&x, e, false, false, name) < 0) {
		tok_buf_release(&x.out);
		return CAPY_ENOMEM;
	}
	return compile(&x, PCRE2_UTF | PCRE2_UCP, name, strlen(name), out);
}
