/* jinja-methods.c - Python's str and dict methods for templates, and the string and argument
 * helpers the filters share (strip, split, case mapping, replace, ...), all counting characters
 * the way Python does.
 */
#include "text/jinja-impl.h"

#include <utf8proc.h>

/* --- arguments -------------------------------------------------------------------------- */

/* Argument `i` by position or `name` by keyword, else def. */
struct capy_tval *js_arg(const struct jargs *a, uint32_t i, const char *name,
			     struct capy_tval *def)
{
	uint32_t k;

	if (i < a->npos)
		return a->pos[i];
	for (k = 0; k < a->nkw; k++)
		if (name && !strcmp(a->kwn[k], name))
			return a->kwv[k];
	return def;
}

void js_no_more_args(struct jrender *r, const struct jnode *n, const struct jargs *a,
			 uint32_t npos, const char *const *kw, const char *what)
{
	uint32_t k;

	if (a->npos > npos)
		jfail(r, n, "%s takes at most %u positional argument(s)", what, npos);
	for (k = 0; k < a->nkw; k++) {
		const char *const *w;

		for (w = kw; w && *w; w++)
			if (!strcmp(*w, a->kwn[k]))
				break;
		if (!w || !*w)
			jfail(r, n, "%s got an unexpected keyword argument '%s'", what, a->kwn[k]);
	}
}

int64_t js_int_arg(struct jrender *r, const struct jnode *n, struct capy_tval *v,
		       const char *what)
{
	if (v->kind == JK_INT)
		return v->i;
	if (v->kind == JK_BOOL)
		return v->b;
	jfail(r, n, "%s must be an integer, not '%s'", what, jv_type_name(v));
}

struct capy_tval *js_str_arg(struct jrender *r, const struct jnode *n, struct capy_tval *v,
				 const char *what)
{
	if (v->kind != JK_STR)
		jfail(r, n, "%s must be a string, not '%s'", what, jv_type_name(v));
	return v;
}

struct capy_tval *js_need_str(struct jrender *r, const struct jnode *n, struct capy_tval *v)
{
	if (v->kind == JK_UNDEF)
		return jv_str_own(r->a, "", 0);
	return jinja_to_str(r, v);
}

/* --- string helpers --------------------------------------------------------------------- */

void js_sb_put(struct sbuild *b, const char *s, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 64;
		char *p;

		while (cap < b->len + n + 1)
			cap *= 2;
		if (cap > b->r->out->limit * 2 + 64)
			jfail(b->r, NULL, "string too large");
		p = ja_alloc(b->r->a, cap);
		if (b->len)
			memcpy(p, b->p, b->len);
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
}

void js_sb_cp(struct sbuild *b, int32_t c)
{
	char enc[4];

	js_sb_put(b, enc, ju_encode(c, enc));
}

struct capy_tval *js_sb_done(struct sbuild *b)
{
	if (!b->p)
		return jv_str_own(b->r->a, "", 0);
	b->p[b->len] = '\0';
	return jv_str_own(b->r->a, b->p, b->len);
}

static bool js_in_chars(const struct capy_tval *chars, int32_t c)
{
	size_t i;

	if (!chars)
		return ju_isspace(c);
	for (i = 0; i < chars->str.len;) {
		int32_t d;

		i += ju_decode(chars->str.s, chars->str.len, i, &d);
		if (c == d)
			return true;
	}
	return false;
}

/* str.strip/lstrip/rstrip with optional chars (NULL: whitespace). */
struct capy_tval *js_strip(struct jrender *r, struct capy_tval *s,
			       const struct capy_tval *chars, bool left, bool right)
{
	size_t b = 0, e = s->str.len;

	while (left && b < e) {
		int32_t c;
		size_t k = ju_decode(s->str.s, e, b, &c);

		if (!js_in_chars(chars, c))
			break;
		b += k;
	}
	while (right && e > b) {
		size_t k = e - 1;
		int32_t c;

		while (k > b && ((unsigned char)s->str.s[k] & 0xc0) == 0x80)
			k--;
		ju_decode(s->str.s, e, k, &c);
		if (!js_in_chars(chars, c))
			break;
		e = k;
	}
	if (b == 0 && e == s->str.len)
		return s;
	return jv_str(r->a, s->str.s + b, e - b);
}

bool js_is_cased(int32_t c)
{
	return utf8proc_tolower(c) != c || utf8proc_toupper(c) != c ||
	       utf8proc_category(c) == UTF8PROC_CATEGORY_LT;
}

/* Simple (one-to-one) case mappings; Python's special cases such as "ß".upper() == "SS"
 * are not reproduced. */
struct capy_tval *js_recase(struct jrender *r, struct capy_tval *s, int mode)
{
	struct sbuild b = { .r = r };
	bool prev_cased = false, first = true;
	size_t i;

	for (i = 0; i < s->str.len;) {
		int32_t c, o;

		i += ju_decode(s->str.s, s->str.len, i, &c);
		if (c == 0xdf && mode != CASE_LOWER && (mode == CASE_UPPER || !prev_cased)) {
			/* Python's full case mapping of "ß"; the others stay simple */
			js_sb_put(&b, mode == CASE_UPPER ? "SS" : "Ss", 2);
			prev_cased = true;
			first = false;
			continue;
		}
		switch (mode) {
		case CASE_UPPER:
			o = utf8proc_toupper(c);
			break;
		case CASE_LOWER:
			o = utf8proc_tolower(c);
			break;
		case CASE_TITLE:
			o = prev_cased ? utf8proc_tolower(c) : utf8proc_totitle(c);
			prev_cased = js_is_cased(c);
			break;
		default:
			o = first ? utf8proc_totitle(c) : utf8proc_tolower(c);
			break;
		}
		first = false;
		js_sb_cp(&b, o);
	}
	return js_sb_done(&b);
}

struct capy_tval *js_str_replace(struct jrender *r, struct capy_tval *s,
				     struct capy_tval *old, struct capy_tval *new, int64_t count)
{
	struct sbuild b = { .r = r };
	size_t i = 0;
	int64_t done = 0;

	if (!old->str.len) {
		/* Python inserts `new` before every character and at the end */
		for (i = 0; i <= s->str.len;) {
			int32_t c;
			size_t k;

			if (count < 0 || done < count) {
				js_sb_put(&b, new->str.s, new->str.len);
				done++;
			}
			if (i == s->str.len)
				break;
			k = ju_decode(s->str.s, s->str.len, i, &c);
			js_sb_put(&b, s->str.s + i, k);
			i += k;
		}
		return js_sb_done(&b);
	}
	while (i <= s->str.len) {
		const char *hit = (count < 0 || done < count) ?
			memmem(s->str.s + i, s->str.len - i, old->str.s, old->str.len) : NULL;

		if (!hit) {
			js_sb_put(&b, s->str.s + i, s->str.len - i);
			break;
		}
		js_sb_put(&b, s->str.s + i, (size_t)(hit - (s->str.s + i)));
		js_sb_put(&b, new->str.s, new->str.len);
		i = (size_t)(hit - s->str.s) + old->str.len;
		done++;
	}
	return js_sb_done(&b);
}

/* str.split / str.rsplit; sep NULL splits on whitespace runs. */
struct capy_tval *js_split(struct jrender *r, const struct jnode *n, struct capy_tval *s,
			       struct capy_tval *sep, int64_t maxsplit, bool from_right)
{
	struct capy_tval *l = jv_list(r->a, 0);
	const char *p = s->str.s;
	size_t len = s->str.len, i;

	if (sep && !sep->str.len)
		jfail(r, n, "empty separator");
	if (!sep) {
		/* Collect words, then join the tail (or head for rsplit) past maxsplit. */
		struct capy_tval *words = jv_list(r->a, 0);
		size_t *starts = NULL, nw = 0, cap = 0;

		for (i = 0; i < len;) {
			int32_t c;
			size_t k = ju_decode(p, len, i, &c), b;

			if (ju_isspace(c)) {
				i += k;
				continue;
			}
			b = i;
			while (i < len) {
				k = ju_decode(p, len, i, &c);
				if (ju_isspace(c))
					break;
				i += k;
			}
			if (nw == cap) {
				size_t *ns = ja_alloc(r->a, (cap ? cap * 2 : 8) * 2 * sizeof(*ns));

				if (nw)
					memcpy(ns, starts, nw * 2 * sizeof(*ns));
				starts = ns;
				cap = cap ? cap * 2 : 8;
			}
			starts[2 * nw] = b;
			starts[2 * nw + 1] = i;
			nw++;
		}
		if (maxsplit < 0 || (size_t)maxsplit + 1 >= nw) {
			for (i = 0; i < nw; i++)
				jv_push(r->a, words, jv_str(r->a, p + starts[2 * i],
							   starts[2 * i + 1] - starts[2 * i]));
			return words;
		}
		if (!from_right) {
			for (i = 0; i < (size_t)maxsplit; i++)
				jv_push(r->a, words, jv_str(r->a, p + starts[2 * i],
							   starts[2 * i + 1] - starts[2 * i]));
			/* the rest runs to the end, trailing whitespace included */
			jv_push(r->a, words, jv_str(r->a, p + starts[2 * maxsplit],
						   len - starts[2 * maxsplit]));
		} else {
			size_t first = nw - (size_t)maxsplit;
			jv_push(r->a, words, jv_str(r->a, p, starts[2 * first - 1]));
			for (i = first; i < nw; i++)
				jv_push(r->a, words, jv_str(r->a, p + starts[2 * i],
							   starts[2 * i + 1] - starts[2 * i]));
		}
		return words;
	}
	if (!from_right) {
		int64_t done = 0;

		i = 0;
		for (;;) {
			const char *hit = (maxsplit < 0 || done < maxsplit) ?
				memmem(p + i, len - i, sep->str.s, sep->str.len) : NULL;

			if (!hit) {
				jv_push(r->a, l, jv_str(r->a, p + i, len - i));
				return l;
			}
			jv_push(r->a, l, jv_str(r->a, p + i, (size_t)(hit - (p + i))));
			i = (size_t)(hit - p) + sep->str.len;
			done++;
		}
	} else {
		struct capy_tval *rev = jv_list(r->a, 0);
		size_t end = len;
		int64_t done = 0;

		for (;;) {
			const char *hit = NULL;
			size_t k;

			if ((maxsplit < 0 || done < maxsplit) && end >= sep->str.len) {
				for (k = end - sep->str.len + 1; k-- > 0;)
					if (!memcmp(p + k, sep->str.s, sep->str.len)) {
						hit = p + k;
						break;
					}
			}
			if (!hit) {
				jv_push(r->a, rev, jv_str(r->a, p, end));
				break;
			}
			jv_push(r->a, rev, jv_str(r->a, hit + sep->str.len,
						  end - (size_t)(hit - p) - sep->str.len));
			end = (size_t)(hit - p);
			done++;
		}
		for (i = rev->list.n; i-- > 0;)
			jv_push(r->a, l, rev->list.v[i]);
		return l;
	}
}

/* Line boundaries of str.js_splitlines(). */
static size_t js_line_break(const char *s, size_t len, size_t i)
{
	int32_t c;
	size_t k = ju_decode(s, len, i, &c);

	if (c == '\r' && i + 1 < len && s[i + 1] == '\n')
		return 2;
	if (c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || (c >= 0x1c && c <= 0x1e) ||
	    c == 0x85 || c == 0x2028 || c == 0x2029)
		return k;
	return 0;
}

struct capy_tval *js_splitlines(struct jrender *r, struct capy_tval *s, bool keepends)
{
	struct capy_tval *l = jv_list(r->a, 0);
	size_t i = 0, start = 0;

	while (i < s->str.len) {
		size_t k = js_line_break(s->str.s, s->str.len, i);
		int32_t c;

		if (!k) {
			i += ju_decode(s->str.s, s->str.len, i, &c);
			continue;
		}
		jv_push(r->a, l, jv_str(r->a, s->str.s + start, i - start + (keepends ? k : 0)));
		i += k;
		start = i;
	}
	if (start < s->str.len)
		jv_push(r->a, l, jv_str(r->a, s->str.s + start, s->str.len - start));
	return l;
}

/* str.format with "{}", "{0}", "{name}", "!r"/"!s" and no format specs. */
static struct capy_tval *js_str_format(struct jrender *r, const struct jnode *n,
				    struct capy_tval *fmt, struct jargs *a)
{
	struct sbuild b = { .r = r };
	const char *s = fmt->str.s;
	size_t len = fmt->str.len, i = 0;
	uint32_t autoidx = 0;

	while (i < len) {
		size_t j, nend;
		struct capy_tval *v = NULL;
		char conv = 's';

		if (s[i] == '{' && i + 1 < len && s[i + 1] == '{') {
			js_sb_put(&b, "{", 1);
			i += 2;
			continue;
		}
		if (s[i] == '}' && i + 1 < len && s[i + 1] == '}') {
			js_sb_put(&b, "}", 1);
			i += 2;
			continue;
		}
		if (s[i] == '}')
			jfail(r, n, "single '}' encountered in format string");
		if (s[i] != '{') {
			js_sb_put(&b, s + i, 1);
			i++;
			continue;
		}
		for (j = i + 1; j < len && s[j] != '}' && s[j] != '!' && s[j] != ':'; j++)
			;
		nend = j;
		if (j < len && s[j] == '!' && j + 1 < len) {
			conv = s[j + 1];
			j += 2;
		}
		if (j >= len || s[j] != '}')
			jfail(r, n, "format specs are not supported in str.format");
		if (nend == i + 1) {
			v = autoidx < a->npos ? a->pos[autoidx] : NULL;
			autoidx++;
		} else if (s[i + 1] >= '0' && s[i + 1] <= '9') {
			size_t idx = strtoul(s + i + 1, NULL, 10);

			v = idx < a->npos ? a->pos[idx] : NULL;
		} else {
			uint32_t k;

			for (k = 0; k < a->nkw; k++)
				if (strlen(a->kwn[k]) == nend - i - 1 &&
				    !memcmp(a->kwn[k], s + i + 1, nend - i - 1))
					v = a->kwv[k];
		}
		if (!v)
			jfail(r, n, "missing argument for format field '%.*s'", (int)(nend - i - 1),
			      s + i + 1);
		if (conv == 'r') {
			struct jbuf *sc = &r->scratch;

			sc->len = 0;
			jv_write(sc, v, true);
			js_sb_put(&b, sc->p ? sc->p : "", sc->len);
		} else {
			v = jinja_to_str(r, v);
			js_sb_put(&b, v->str.s, v->str.len);
		}
		i = j + 1;
	}
	return js_sb_done(&b);
}

bool js_str_all(const struct capy_tval *s, bool (*pred)(int32_t), bool need_cased)
{
	size_t i;
	bool cased = false;

	for (i = 0; i < s->str.len;) {
		int32_t c;

		i += ju_decode(s->str.s, s->str.len, i, &c);
		if (js_is_cased(c)) {
			cased = true;
			if (!pred(c))
				return false;
		} else if (!need_cased && !pred(c)) {
			return false;
		}
	}
	return need_cased ? cased : s->str.len > 0;
}

bool js_cp_lower(int32_t c)
{
	return utf8proc_toupper(c) != c || utf8proc_category(c) == UTF8PROC_CATEGORY_LL;
}

bool js_cp_upper(int32_t c)
{
	return utf8proc_tolower(c) != c || utf8proc_category(c) == UTF8PROC_CATEGORY_LU;
}

/* --- methods ---------------------------------------------------------------------------- */

static bool starts_or_ends(struct jrender *r, const struct jnode *n, struct capy_tval *s,
			   struct capy_tval *what, bool end)
{
	size_t i;

	if (what->kind == JK_LIST && what->tuple) {
		for (i = 0; i < what->list.n; i++)
			if (starts_or_ends(r, n, s, what->list.v[i], end))
				return true;
		return false;
	}
	js_str_arg(r, n, what, end ? "endswith argument" : "startswith argument");
	if (what->str.len > s->str.len)
		return false;
	return !memcmp(s->str.s + (end ? s->str.len - what->str.len : 0), what->str.s,
		       what->str.len);
}

static int64_t find(struct capy_tval *s, struct capy_tval *sub, bool from_right)
{
	const char *hit = NULL;
	size_t k;

	if (sub->str.len > s->str.len)
		return -1;
	if (!from_right) {
		hit = sub->str.len ? memmem(s->str.s, s->str.len, sub->str.s, sub->str.len) : s->str.s;
	} else {
		for (k = s->str.len - sub->str.len + 1; k-- > 0;)
			if (!memcmp(s->str.s + k, sub->str.s, sub->str.len)) {
				hit = s->str.s + k;
				break;
			}
	}
	/* Python counts characters, not bytes */
	return hit ? (int64_t)ju_count(s->str.s, (size_t)(hit - s->str.s)) : -1;
}

static bool cp_digit(int32_t c)
{
	return utf8proc_category(c) == UTF8PROC_CATEGORY_ND;
}

static bool cp_alpha(int32_t c)
{
	int cat = utf8proc_category(c);

	return cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
}

static bool cp_alnum(int32_t c)
{
	int cat = utf8proc_category(c);

	return cp_alpha(c) || (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
}

static bool cp_space(int32_t c)
{
	return ju_isspace(c);
}

static struct capy_tval *str_method(struct jrender *r, const struct jnode *n, struct capy_tval *s,
				    const char *name, struct jargs *a)
{
	struct capy_tval *x = js_arg(a, 0, NULL, NULL);

	if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
		if (!x)
			jfail(r, n, "%s() takes at least 1 argument", name);
		return jv_bool(starts_or_ends(r, n, s, x, name[0] == 'e'));
	}
	if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip")) {
		struct capy_tval *chars = js_arg(a, 0, "chars", &jv_none);

		return js_strip(r, s, chars->kind == JK_NONE ? NULL : js_str_arg(r, n, chars, "chars"),
			     name[0] != 'r', name[0] != 'l');
	}
	if (!strcmp(name, "split") || !strcmp(name, "rsplit")) {
		struct capy_tval *sep = js_arg(a, 0, "sep", &jv_none);
		struct capy_tval *maxsplit = js_arg(a, 1, "maxsplit", NULL);

		return js_split(r, n, s, sep->kind == JK_NONE ? NULL : js_str_arg(r, n, sep, "sep"),
			     maxsplit ? js_int_arg(r, n, maxsplit, "maxsplit") : -1, name[0] == 'r');
	}
	if (!strcmp(name, "upper"))
		return js_recase(r, s, CASE_UPPER);
	if (!strcmp(name, "lower"))
		return js_recase(r, s, CASE_LOWER);
	if (!strcmp(name, "title"))
		return js_recase(r, s, CASE_TITLE);
	if (!strcmp(name, "capitalize"))
		return js_recase(r, s, CASE_CAPITALIZE);
	if (!strcmp(name, "replace")) {
		struct capy_tval *count = js_arg(a, 2, "count", NULL);

		if (a->npos < 2)
			jfail(r, n, "replace() takes at least 2 arguments");
		return js_str_replace(r, s, js_str_arg(r, n, a->pos[0], "old"),
				   js_str_arg(r, n, a->pos[1], "new"),
				   count ? js_int_arg(r, n, count, "count") : -1);
	}
	if (!strcmp(name, "format"))
		return js_str_format(r, n, s, a);
	if (!strcmp(name, "find") || !strcmp(name, "rfind") || !strcmp(name, "index") ||
	    !strcmp(name, "rindex")) {
		int64_t pos;

		if (!x)
			jfail(r, n, "%s() takes at least 1 argument", name);
		pos = find(s, js_str_arg(r, n, x, "substring"), name[0] == 'r');
		if (pos < 0 && strstr(name, "index"))
			jfail(r, n, "substring not found");
		return jv_int(r->a, pos);
	}
	if (!strcmp(name, "count")) {
		int64_t cnt = 0;
		size_t i = 0;

		if (!x)
			jfail(r, n, "count() takes at least 1 argument");
		js_str_arg(r, n, x, "substring");
		if (!x->str.len)
			return jv_int(r->a, (int64_t)ju_count(s->str.s, s->str.len) + 1);
		for (;;) {
			const char *hit = memmem(s->str.s + i, s->str.len - i, x->str.s, x->str.len);

			if (!hit)
				break;
			cnt++;
			i = (size_t)(hit - s->str.s) + x->str.len;
		}
		return jv_int(r->a, cnt);
	}
	if (!strcmp(name, "join")) {
		struct capy_tval *items = jinja_iter(r, n, x ? x : &jv_undef);
		struct sbuild b = { .r = r };
		size_t i;

		for (i = 0; i < items->list.n; i++) {
			struct capy_tval *v = items->list.v[i];

			if (v->kind != JK_STR)
				jfail(r, n, "sequence item %zu: expected str instance, %s found", i,
				      jv_type_name(v));
			if (i)
				js_sb_put(&b, s->str.s, s->str.len);
			js_sb_put(&b, v->str.s, v->str.len);
		}
		return js_sb_done(&b);
	}
	if (!strcmp(name, "splitlines"))
		return js_splitlines(r, s, jv_truthy(js_arg(a, 0, "keepends", &jv_false)));
	if (!strcmp(name, "isdigit"))
		return jv_bool(js_str_all(s, cp_digit, false));
	if (!strcmp(name, "isalpha"))
		return jv_bool(js_str_all(s, cp_alpha, false));
	if (!strcmp(name, "isalnum"))
		return jv_bool(js_str_all(s, cp_alnum, false));
	if (!strcmp(name, "isspace"))
		return jv_bool(js_str_all(s, cp_space, false));
	if (!strcmp(name, "islower"))
		return jv_bool(js_str_all(s, js_cp_lower, true));
	if (!strcmp(name, "isupper"))
		return jv_bool(js_str_all(s, js_cp_upper, true));
	if (!strcmp(name, "removeprefix") || !strcmp(name, "removesuffix")) {
		bool end = name[6] == 's';

		if (!x)
			jfail(r, n, "%s() takes exactly one argument", name);
		if (starts_or_ends(r, n, s, js_str_arg(r, n, x, "affix"), end))
			return jv_str(r->a, s->str.s + (end ? 0 : x->str.len), s->str.len - x->str.len);
		return s;
	}
	jfail(r, n, "'str' object has no attribute '%s'", name);
}

static struct capy_tval *dict_method(struct jrender *r, const struct jnode *n,
				     struct capy_tval *d, const char *name, struct jargs *a)
{
	struct capy_tval *l;
	size_t i;

	if (!strcmp(name, "items"))
		return jinja_filter(r, n, "items", d, a);
	if (!strcmp(name, "keys"))
		return jinja_iter(r, n, d);
	if (!strcmp(name, "values")) {
		l = jv_list(r->a, d->dict.n);
		for (i = 0; i < d->dict.n; i++)
			jv_push(r->a, l, d->dict.e[i].val);
		return l;
	}
	if (!strcmp(name, "get")) {
		struct capy_tval *key = js_arg(a, 0, NULL, &jv_undef), *v = NULL;

		if (key->kind == JK_STR)
			v = jd_get(d, key->str.s, key->str.len);
		return v ? v : js_arg(a, 1, NULL, &jv_none);
	}
	if (!strcmp(name, "pop") || !strcmp(name, "update") || !strcmp(name, "clear") ||
	    !strcmp(name, "setdefault") || !strcmp(name, "popitem"))
		jfail(r, n, "access to attribute '%s' of 'dict' object is unsafe", name);
	jfail(r, n, "'dict' object has no attribute '%s'", name);
}

struct capy_tval *jinja_method(struct jrender *r, const struct jnode *n, struct capy_tval *obj,
			       const char *name, struct jargs *a)
{
	jinja_step(r, n);
	switch (obj->kind) {
	case JK_STR:
		return str_method(r, n, obj, name, a);
	case JK_DICT:
		return dict_method(r, n, obj, name, a);
	case JK_LOOP:
		if (!strcmp(name, "cycle")) {
			if (!a->npos)
				jfail(r, n, "no items for cycling given");
			return a->pos[obj->loop.index % a->npos];
		}
		break;
	case JK_LIST:
		if (!strcmp(name, "append") || !strcmp(name, "pop") || !strcmp(name, "extend") ||
		    !strcmp(name, "insert") || !strcmp(name, "remove") || !strcmp(name, "sort") ||
		    !strcmp(name, "reverse") || !strcmp(name, "clear"))
			jfail(r, n, "access to attribute '%s' of '%s' object is unsafe", name,
			      jv_type_name(obj));
		break;
	default:
		break;
	}
	jfail(r, n, "'%s' object has no attribute '%s'", jv_type_name(obj), name);
}

