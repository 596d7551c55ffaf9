/* jinja-filters.c - the template built-ins: filters, tests and the global functions.
 *
 * Each follows jinja2 3.1 (and transformers' tojson), including its argument names, so that
 * `x|tojson(indent=2)` and `round(2, 'floor')` mean the same. Filters nobody uses in chat
 * templates (batch, slice, groupby, truncate, wordwrap, urlencode, xmlattr, ...) are absent and
 * fail at compile time with "no filter named".
 */
#include "text/jinja-impl.h"

#include <math.h>
#include <time.h>
#include <utf8proc.h>

static bool isdig_c(char c)
{
	return c >= '0' && c <= '9';
}

static bool is_num_kind(const struct capy_tval *v)
{
	return v->kind == JK_BOOL || v->kind == JK_INT || v->kind == JK_FLOAT ||
	       v->kind == JK_BIGINT;
}

/* --- arguments -------------------------------------------------------------------------- */

/* Argument `i` by position or `name` by keyword, else def. */
static struct capy_tval *arg(const struct jargs *a, uint32_t i, const char *name,
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

static void no_more_args(struct jrender *r, const struct jnode *n, const struct jargs *a,
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

static int64_t int_arg(struct jrender *r, const struct jnode *n, struct capy_tval *v,
		       const char *what)
{
	if (v->kind == JK_INT)
		return v->i;
	if (v->kind == JK_BOOL)
		return v->b;
	jfail(r, n, "%s must be an integer, not '%s'", what, jv_type_name(v));
}

static struct capy_tval *str_arg(struct jrender *r, const struct jnode *n, struct capy_tval *v,
				 const char *what)
{
	if (v->kind != JK_STR)
		jfail(r, n, "%s must be a string, not '%s'", what, jv_type_name(v));
	return v;
}

static struct capy_tval *need_str(struct jrender *r, const struct jnode *n, struct capy_tval *v)
{
	if (v->kind == JK_UNDEF)
		return jv_str_own(r->a, "", 0);
	return jinja_to_str(r, v);
}

/* --- string helpers --------------------------------------------------------------------- */

struct sbuild {
	struct jrender *r;
	char *p;
	size_t len, cap;
};

static void sb_put(struct sbuild *b, const char *s, size_t n)
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

static void sb_cp(struct sbuild *b, int32_t c)
{
	char enc[4];

	sb_put(b, enc, ju_encode(c, enc));
}

static struct capy_tval *sb_done(struct sbuild *b)
{
	if (!b->p)
		return jv_str_own(b->r->a, "", 0);
	b->p[b->len] = '\0';
	return jv_str_own(b->r->a, b->p, b->len);
}

static bool in_chars(const struct capy_tval *chars, int32_t c)
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
static struct capy_tval *strip(struct jrender *r, struct capy_tval *s,
			       const struct capy_tval *chars, bool left, bool right)
{
	size_t b = 0, e = s->str.len;

	while (left && b < e) {
		int32_t c;
		size_t k = ju_decode(s->str.s, e, b, &c);

		if (!in_chars(chars, c))
			break;
		b += k;
	}
	while (right && e > b) {
		size_t k = e - 1;
		int32_t c;

		while (k > b && ((unsigned char)s->str.s[k] & 0xc0) == 0x80)
			k--;
		ju_decode(s->str.s, e, k, &c);
		if (!in_chars(chars, c))
			break;
		e = k;
	}
	if (b == 0 && e == s->str.len)
		return s;
	return jv_str(r->a, s->str.s + b, e - b);
}

enum { CASE_UPPER, CASE_LOWER, CASE_TITLE, CASE_CAPITALIZE };

static bool is_cased(int32_t c)
{
	return utf8proc_tolower(c) != c || utf8proc_toupper(c) != c ||
	       utf8proc_category(c) == UTF8PROC_CATEGORY_LT;
}

/* Simple (one-to-one) case mappings; Python's special cases such as "ß".upper() == "SS"
 * are not reproduced. */
static struct capy_tval *recase(struct jrender *r, struct capy_tval *s, int mode)
{
	struct sbuild b = { .r = r };
	bool prev_cased = false, first = true;
	size_t i;

	for (i = 0; i < s->str.len;) {
		int32_t c, o;

		i += ju_decode(s->str.s, s->str.len, i, &c);
		if (c == 0xdf && mode != CASE_LOWER && (mode == CASE_UPPER || !prev_cased)) {
			/* Python's full case mapping of "ß"; the others stay simple */
			sb_put(&b, mode == CASE_UPPER ? "SS" : "Ss", 2);
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
			prev_cased = is_cased(c);
			break;
		default:
			o = first ? utf8proc_totitle(c) : utf8proc_tolower(c);
			break;
		}
		first = false;
		sb_cp(&b, o);
	}
	return sb_done(&b);
}

static struct capy_tval *str_replace(struct jrender *r, struct capy_tval *s,
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
				sb_put(&b, new->str.s, new->str.len);
				done++;
			}
			if (i == s->str.len)
				break;
			k = ju_decode(s->str.s, s->str.len, i, &c);
			sb_put(&b, s->str.s + i, k);
			i += k;
		}
		return sb_done(&b);
	}
	while (i <= s->str.len) {
		const char *hit = (count < 0 || done < count) ?
			memmem(s->str.s + i, s->str.len - i, old->str.s, old->str.len) : NULL;

		if (!hit) {
			sb_put(&b, s->str.s + i, s->str.len - i);
			break;
		}
		sb_put(&b, s->str.s + i, (size_t)(hit - (s->str.s + i)));
		sb_put(&b, new->str.s, new->str.len);
		i = (size_t)(hit - s->str.s) + old->str.len;
		done++;
	}
	return sb_done(&b);
}

/* str.split / str.rsplit; sep NULL splits on whitespace runs. */
static struct capy_tval *split(struct jrender *r, const struct jnode *n, struct capy_tval *s,
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

/* Line boundaries of str.splitlines(). */
static size_t line_break(const char *s, size_t len, size_t i)
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

static struct capy_tval *splitlines(struct jrender *r, struct capy_tval *s, bool keepends)
{
	struct capy_tval *l = jv_list(r->a, 0);
	size_t i = 0, start = 0;

	while (i < s->str.len) {
		size_t k = line_break(s->str.s, s->str.len, i);
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
static struct capy_tval *str_format(struct jrender *r, const struct jnode *n,
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
			sb_put(&b, "{", 1);
			i += 2;
			continue;
		}
		if (s[i] == '}' && i + 1 < len && s[i + 1] == '}') {
			sb_put(&b, "}", 1);
			i += 2;
			continue;
		}
		if (s[i] == '}')
			jfail(r, n, "single '}' encountered in format string");
		if (s[i] != '{') {
			sb_put(&b, s + i, 1);
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
			sb_put(&b, sc->p ? sc->p : "", sc->len);
		} else {
			v = jinja_to_str(r, v);
			sb_put(&b, v->str.s, v->str.len);
		}
		i = j + 1;
	}
	return sb_done(&b);
}

/* --- sorting ---------------------------------------------------------------------------- */

struct sort_ctx {
	struct jrender *r;
	const struct jnode *n;
	bool case_sensitive;
};

static struct capy_tval *sort_key(struct sort_ctx *c, struct capy_tval *v)
{
	if (!c->case_sensitive && v->kind == JK_STR)
		return recase(c->r, v, CASE_LOWER);
	return v;
}

/* A stable merge sort of items by keys (the comparison can fail, so no qsort). */
static void merge_sort(struct sort_ctx *c, struct capy_tval **items, struct capy_tval **keys,
		       size_t n, bool reverse)
{
	struct capy_tval **ti, **tk;
	size_t mid = n / 2, i = 0, j = mid, o = 0;

	if (n < 2)
		return;
	merge_sort(c, items, keys, mid, reverse);
	merge_sort(c, items + mid, keys + mid, n - mid, reverse);
	ti = ja_alloc(c->r->a, n * sizeof(*ti));
	tk = ja_alloc(c->r->a, n * sizeof(*tk));
	while (i < mid && j < n) {
		int cmp = jinja_compare(c->r, c->n, keys[j], keys[i]);

		if (reverse ? cmp > 0 : cmp < 0) {
			ti[o] = items[j];
			tk[o++] = keys[j++];
		} else {
			ti[o] = items[i];
			tk[o++] = keys[i++];
		}
	}
	for (; i < mid; i++, o++) {
		ti[o] = items[i];
		tk[o] = keys[i];
	}
	for (; j < n; j++, o++) {
		ti[o] = items[j];
		tk[o] = keys[j];
	}
	memcpy(items, ti, n * sizeof(*ti));
	memcpy(keys, tk, n * sizeof(*tk));
}

/* getattr along "a.b.0" (jinja's make_attrgetter) */
static struct capy_tval *attr_path(struct jrender *r, const struct jnode *n, struct capy_tval *v,
				   struct capy_tval *path)
{
	const char *s, *e;

	if (path->kind == JK_INT)
		return jinja_getitem(r, NULL, v, path);
	str_arg(r, n, path, "attribute");
	for (s = path->str.s;; s = e + 1) {
		char part[256];
		size_t len;
		char *end;
		long long idx;

		e = strchr(s, '.');
		if (!e)
			e = s + strlen(s);
		len = CAPY_MIN((size_t)(e - s), sizeof(part) - 1);
		memcpy(part, s, len);
		part[len] = '\0';
		idx = strtoll(part, &end, 10);
		if (len && !*end && v->kind != JK_DICT)
			v = jinja_getitem(r, NULL, v, jv_int(r->a, idx));
		else if (v->kind == JK_UNDEF)
			jfail(r, n, "'%s' is undefined", part);
		else
			v = jinja_getattr(r, NULL, v, part);
		if (!*e)
			return v;
	}
}

static struct capy_tval *sorted(struct jrender *r, const struct jnode *n, struct capy_tval *seq,
				bool reverse, bool case_sensitive, struct capy_tval *attribute)
{
	struct sort_ctx c = { r, n, case_sensitive };
	struct capy_tval *items = jinja_iter(r, n, seq), *out = jv_list(r->a, items->list.n);
	struct capy_tval **keys = ja_alloc(r->a, (items->list.n + 1) * sizeof(*keys));
	size_t i;

	for (i = 0; i < items->list.n; i++) {
		struct capy_tval *v = items->list.v[i];

		jv_push(r->a, out, v);
		keys[i] = sort_key(&c, attribute ? attr_path(r, n, v, attribute) : v);
	}
	merge_sort(&c, out->list.v, keys, out->list.n, reverse);
	return out;
}

/* --- filters ---------------------------------------------------------------------------- */

typedef struct capy_tval *(*filter_fn)(struct jrender *r, const struct jnode *n,
				       struct capy_tval *in, struct jargs *a);

static struct capy_tval *f_tojson(struct jrender *r, const struct jnode *n, struct capy_tval *in,
				  struct jargs *a)
{
	static const char *const kw[] = { "ensure_ascii", "indent", "separators", "sort_keys", NULL };
	struct capy_tval *ind = arg(a, 1, "indent", &jv_none), *seps = arg(a, 2, "separators", &jv_none);
	struct jjson_opts o = {
		.ensure_ascii = jv_truthy(arg(a, 0, "ensure_ascii", &jv_false)),
		.sort_keys = jv_truthy(arg(a, 3, "sort_keys", &jv_false)),
		.indent = -1, .item_sep = ", ", .key_sep = ": ",
	};
	const struct capy_tval *bad = NULL;
	struct jbuf *b = &r->scratch;

	no_more_args(r, n, a, 4, kw, "tojson");
	if (ind->kind != JK_NONE) {
		int64_t w = int_arg(r, n, ind, "indent");

		o.indent = (int)CAPY_MAX(0, CAPY_MIN(w, 64));
		o.item_sep = ",";
	}
	if (seps->kind != JK_NONE) {
		if (seps->kind != JK_LIST || seps->list.n != 2 || seps->list.v[0]->kind != JK_STR ||
		    seps->list.v[1]->kind != JK_STR)
			jfail(r, n, "tojson separators must be a pair of strings");
		o.item_sep = seps->list.v[0]->str.s;
		o.key_sep = seps->list.v[1]->str.s;
	}
	b->len = 0;
	b->limit = r->out->limit;
	if (jv_to_json(b, in, &o, &bad) < 0)
		jfail(r, n, "Object of type %s is not JSON serializable",
		      bad->kind == JK_UNDEF ? "Undefined" : jv_type_name(bad));
	if (b->failed)
		jfail(r, n, "tojson output too large");
	return jv_str(r->a, b->p ? b->p : "", b->len);
}

static struct capy_tval *f_trim(struct jrender *r, const struct jnode *n, struct capy_tval *in,
				struct jargs *a)
{
	struct capy_tval *chars = arg(a, 0, "chars", &jv_none);

	return strip(r, need_str(r, n, in), chars->kind == JK_NONE ? NULL :
		     str_arg(r, n, chars, "trim chars"), true, true);
}

static int64_t length_of(struct jrender *r, const struct jnode *n, struct capy_tval *v)
{
	switch (v->kind) {
	case JK_STR:
		return (int64_t)ju_count(v->str.s, v->str.len);
	case JK_LIST:
		return (int64_t)v->list.n;
	case JK_DICT:
		return (int64_t)v->dict.n;
	case JK_UNDEF:
		return 0;
	default:
		jfail(r, n, "object of type '%s' has no len()", jv_type_name(v));
	}
}

static struct capy_tval *f_length(struct jrender *r, const struct jnode *n, struct capy_tval *in,
				  struct jargs *a)
{
	return jv_int(r->a, length_of(r, n, in));
}

static struct capy_tval *f_items(struct jrender *r, const struct jnode *n, struct capy_tval *in,
				 struct jargs *a)
{
	struct capy_tval *l;
	size_t i;

	if (in->kind == JK_UNDEF)
		return jv_list(r->a, 0);
	if (in->kind != JK_DICT)
		jfail(r, n, "Can only get item pairs from a mapping.");
	l = jv_list(r->a, in->dict.n);
	for (i = 0; i < in->dict.n; i++) {
		struct capy_tval *pair = jv_list(r->a, 2);

		pair->tuple = true;
		jv_push(r->a, pair, jv_str_own(r->a, in->dict.e[i].key, in->dict.e[i].klen));
		jv_push(r->a, pair, in->dict.e[i].val);
		jv_push(r->a, l, pair);
	}
	return l;
}

static struct capy_tval *f_string(struct jrender *r, const struct jnode *n, struct capy_tval *in,
				  struct jargs *a)
{
	return need_str(r, n, in);
}

static struct capy_tval *f_safe(struct jrender *r, const struct jnode *n, struct capy_tval *in,
				struct jargs *a)
{
	return in;
}

static struct capy_tval *f_join(struct jrender *r, const struct jnode *n, struct capy_tval *in,
				struct jargs *a)
{
	struct capy_tval *sep = need_str(r, n, arg(a, 0, "d", jv_str_own(r->a, "", 0)));
	struct capy_tval *attribute = arg(a, 1, "attribute", NULL);
	struct capy_tval *items = jinja_iter(r, n, in);
	struct sbuild b = { .r = r };
	size_t i;

	for (i = 0; i < items->list.n; i++) {
		struct capy_tval *v = items->list.v[i];

		if (attribute && attribute->kind != JK_NONE)
			v = attr_path(r, n, v, attribute);
		v = need_str(r, n, v);
		if (i)
			sb_put(&b, sep->str.s, sep->str.len);
		sb_put(&b, v->str.s, v->str.len);
	}
	return sb_done(&b);
}

static struct capy_tval *f_default(struct jrender *r, const struct jnode *n, struct capy_tval *in,
				   struct jargs *a)
{
	struct capy_tval *def = arg(a, 0, "default_value", jv_str_own(r->a, "", 0));
	bool boolean = jv_truthy(arg(a, 1, "boolean", &jv_false));

	if (in->kind == JK_UNDEF || (boolean && !jv_truthy(in)))
		return def;
	return in;
}

static struct capy_tval *f_upper(struct jrender *r, const struct jnode *n, struct capy_tval *in,
				 struct jargs *a)
{
	return recase(r, need_str(r, n, in), CASE_UPPER);
}

static struct capy_tval *f_lower(struct jrender *r, const struct jnode *n, struct capy_tval *in,
				 struct jargs *a)
{
	return recase(r, need_str(r, n, in), CASE_LOWER);
}

/* jinja's title filter is not str.title(): words start after "-", whitespace, "(", "{", "[" or
 * "<", and their first character is upper-cased, the rest lower-cased. */
static struct capy_tval *f_title(struct jrender *r, const struct jnode *n, struct capy_tval *in,
				 struct jargs *a)
{
	struct capy_tval *s = need_str(r, n, in);
	struct sbuild b = { .r = r };
	bool start = true;
	size_t i, k;

	for (i = 0; i < s->str.len; i += k) {
		int32_t c;
		bool sep;

		k = ju_decode(s->str.s, s->str.len, i, &c);
		sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || ju_isspace(c);
		if (sep) {
			sb_put(&b, s->str.s + i, k);
		} else {
			struct capy_tval one = { .kind = JK_STR, .str = { s->str.s + i, k } };
			struct capy_tval *o = recase(r, &one, start ? CASE_UPPER : CASE_LOWER);

			sb_put(&b, o->str.s, o->str.len);
		}
		start = sep;
	}
	return sb_done(&b);
}

static struct capy_tval *f_capitalize(struct jrender *r, const struct jnode *n,
				      struct capy_tval *in, struct jargs *a)
{
	return recase(r, need_str(r, n, in), CASE_CAPITALIZE);
}

static struct capy_tval *f_replace(struct jrender *r, const struct jnode *n, struct capy_tval *in,
				   struct jargs *a)
{
	struct capy_tval *old = need_str(r, n, arg(a, 0, "old", &jv_undef));
	struct capy_tval *new = need_str(r, n, arg(a, 1, "new", &jv_undef));
	struct capy_tval *count = arg(a, 2, "count", &jv_none);

	return str_replace(r, need_str(r, n, in), old, new,
			   count->kind == JK_NONE ? -1 : int_arg(r, n, count, "count"));
}

static struct capy_tval *f_first(struct jrender *r, const struct jnode *n, struct capy_tval *in,
				 struct jargs *a)
{
	struct capy_tval *items = jinja_iter(r, n, in);

	return items->list.n ? items->list.v[0] : &jv_undef;
}

static struct capy_tval *f_last(struct jrender *r, const struct jnode *n, struct capy_tval *in,
				struct jargs *a)
{
	struct capy_tval *items = jinja_iter(r, n, in);

	return items->list.n ? items->list.v[items->list.n - 1] : &jv_undef;
}

static struct capy_tval *f_list(struct jrender *r, const struct jnode *n, struct capy_tval *in,
				struct jargs *a)
{
	struct capy_tval *items = jinja_iter(r, n, in), *l = jv_list(r->a, items->list.n);
	size_t i;

	for (i = 0; i < items->list.n; i++)
		jv_push(r->a, l, items->list.v[i]);
	return l;
}

static struct capy_tval *f_reverse(struct jrender *r, const struct jnode *n, struct capy_tval *in,
				   struct jargs *a)
{
	struct capy_tval *items = jinja_iter(r, n, in), *l = jv_list(r->a, items->list.n);
	size_t i;

	for (i = items->list.n; i-- > 0;)
		jv_push(r->a, l, items->list.v[i]);
	if (in->kind == JK_STR) {
		struct sbuild b = { .r = r };

		for (i = 0; i < l->list.n; i++)
			sb_put(&b, l->list.v[i]->str.s, l->list.v[i]->str.len);
		return sb_done(&b);
	}
	return l;
}

/* map(filter, args...) or map(attribute='x', default=d) */
static struct capy_tval *f_map(struct jrender *r, const struct jnode *n, struct capy_tval *in,
			       struct jargs *a)
{
	struct capy_tval *items = jinja_iter(r, n, in), *l = jv_list(r->a, items->list.n);
	struct capy_tval *attribute = arg(a, UINT32_MAX, "attribute", NULL);
	struct capy_tval *def = arg(a, UINT32_MAX, "default", NULL);
	struct jargs rest = { 0 };
	const char *fname = NULL;
	size_t i;

	if (!attribute) {
		if (!a->npos)
			jfail(r, n, "map requires a filter name or attribute=");
		fname = str_arg(r, n, a->pos[0], "map filter")->str.s;
		if (!jinja_filter_known(fname))
			jfail(r, n, "no filter named '%s'", fname);
		rest.pos = a->pos + 1;
		rest.npos = a->npos - 1;
		rest.kwn = a->kwn;
		rest.kwv = a->kwv;
		rest.nkw = a->nkw;
	}
	for (i = 0; i < items->list.n; i++) {
		struct capy_tval *v = items->list.v[i];

		jinja_step(r, n);
		if (attribute) {
			v = attr_path(r, n, v, attribute);
			if (def && v->kind == JK_UNDEF)
				v = def;
		} else {
			v = jinja_filter(r, n, fname, v, &rest);
		}
		jv_push(r->a, l, v);
	}
	return l;
}

/* select/reject/selectattr/rejectattr */
static struct capy_tval *select_common(struct jrender *r, const struct jnode *n,
				       struct capy_tval *in, struct jargs *a, bool by_attr,
				       bool keep)
{
	struct capy_tval *items = jinja_iter(r, n, in), *l = jv_list(r->a, 0);
	uint32_t first = by_attr ? 1 : 0;
	struct capy_tval *attribute = by_attr ? arg(a, 0, NULL, NULL) : NULL;
	const char *tname = NULL;
	struct jargs rest = { 0 };
	size_t i;

	if (by_attr && !attribute)
		jfail(r, n, "selectattr/rejectattr need an attribute");
	if (a->npos > first) {
		tname = str_arg(r, n, a->pos[first], "test name")->str.s;
		if (!jinja_test_known(tname))
			jfail(r, n, "no test named '%s'", tname);
		rest.pos = a->pos + first + 1;
		rest.npos = a->npos - first - 1;
	}
	for (i = 0; i < items->list.n; i++) {
		struct capy_tval *v = items->list.v[i], *probe = v;
		bool ok;

		jinja_step(r, n);
		if (attribute)
			probe = attr_path(r, n, v, attribute);
		ok = tname ? jinja_test(r, n, tname, probe, &rest) : jv_truthy(probe);
		if (ok == keep)
			jv_push(r->a, l, v);
	}
	return l;
}

static struct capy_tval *f_select(struct jrender *r, const struct jnode *n, struct capy_tval *in,
				  struct jargs *a)
{
	return select_common(r, n, in, a, false, true);
}

static struct capy_tval *f_reject(struct jrender *r, const struct jnode *n, struct capy_tval *in,
				  struct jargs *a)
{
	return select_common(r, n, in, a, false, false);
}

static struct capy_tval *f_selectattr(struct jrender *r, const struct jnode *n,
				      struct capy_tval *in, struct jargs *a)
{
	return select_common(r, n, in, a, true, true);
}

static struct capy_tval *f_rejectattr(struct jrender *r, const struct jnode *n,
				      struct capy_tval *in, struct jargs *a)
{
	return select_common(r, n, in, a, true, false);
}

/* Python int(str): optional sign, digits with single underscores, surrounding whitespace. */
static bool parse_pyint(struct capy_tval *s, int64_t *out)
{
	struct capy_tval tmp = *s;
	char buf[64];
	size_t i, n = 0;
	const char *p;
	char *end;

	p = tmp.str.s;
	while (tmp.str.len && ju_isspace((unsigned char)*p)) {
		p++;
		tmp.str.len--;
	}
	while (tmp.str.len && ju_isspace((unsigned char)p[tmp.str.len - 1]))
		tmp.str.len--;
	for (i = 0; i < tmp.str.len && n < sizeof(buf) - 1; i++) {
		if (p[i] == '_' && i > 0 && i + 1 < tmp.str.len && isdig_c(p[i - 1]) &&
		    isdig_c(p[i + 1]))
			continue;
		buf[n++] = p[i];
	}
	buf[n] = '\0';
	if (!n || n >= sizeof(buf) - 1)
		return false;
	for (i = (buf[0] == '-' || buf[0] == '+'); i < n; i++)
		if (!isdig_c(buf[i]))
			return false;
	errno = 0;
	*out = strtoll(buf, &end, 10);
	return !errno && !*end && end != buf;
}

static bool parse_pyfloat(struct capy_tval *s, double *out)
{
	char buf[128];
	size_t b = 0, e = s->str.len, n = 0, i;
	char *end;

	while (b < e && ju_isspace((unsigned char)s->str.s[b]))
		b++;
	while (e > b && ju_isspace((unsigned char)s->str.s[e - 1]))
		e--;
	for (i = b; i < e && n < sizeof(buf) - 1; i++)
		if (s->str.s[i] != '_')
			buf[n++] = s->str.s[i];
	buf[n] = '\0';
	if (!n || n >= sizeof(buf) - 1 || strchr(buf, 'x') || strchr(buf, 'X'))
		return false;
	*out = strtod(buf, &end);
	return !*end;
}

static struct capy_tval *f_int(struct jrender *r, const struct jnode *n, struct capy_tval *in,
			       struct jargs *a)
{
	struct capy_tval *def = arg(a, 0, "default", NULL);
	int64_t v;
	double f;

	switch (in->kind) {
	case JK_INT:
	case JK_BIGINT:
		return in;
	case JK_BOOL:
		return jv_int(r->a, in->b);
	case JK_FLOAT:
		if (!isfinite(in->f) || fabs(in->f) >= 9.2e18)
			jfail(r, n, "cannot convert float %s to integer",
			      isnan(in->f) ? "NaN" : "infinity or beyond 64 bits");
		return jv_int(r->a, (int64_t)in->f);
	case JK_STR:
		if (parse_pyint(in, &v))
			return jv_int(r->a, v);
		if (parse_pyfloat(in, &f) && isfinite(f) && fabs(f) < 9.2e18)
			return jv_int(r->a, (int64_t)f);
		break;
	case JK_UNDEF:
		jfail(r, n, "undefined value used");
	default:
		break;
	}
	return def ? def : jv_int(r->a, 0);
}

static struct capy_tval *f_float(struct jrender *r, const struct jnode *n, struct capy_tval *in,
				 struct jargs *a)
{
	struct capy_tval *def = arg(a, 0, "default", NULL);
	double f;

	switch (in->kind) {
	case JK_INT:
	case JK_BIGINT:
	case JK_BOOL:
		return jv_float(r->a, jv_num(in));
	case JK_FLOAT:
		return in;
	case JK_STR:
		if (parse_pyfloat(in, &f))
			return jv_float(r->a, f);
		break;
	case JK_UNDEF:
		jfail(r, n, "undefined value used");
	default:
		break;
	}
	return def ? def : jv_float(r->a, 0);
}

static struct capy_tval *f_round(struct jrender *r, const struct jnode *n, struct capy_tval *in,
				 struct jargs *a)
{
	int64_t prec = int_arg(r, n, arg(a, 0, "precision", jv_int(r->a, 0)), "precision");
	struct capy_tval *method = arg(a, 1, "method", NULL);
	const char *m = method ? str_arg(r, n, method, "method")->str.s : "common";
	double x, scale;
	char buf[400];

	if (strcmp(m, "common") && strcmp(m, "floor") && strcmp(m, "ceil"))
		jfail(r, n, "method must be common, ceil or floor");
	if (!is_num_kind(in))
		jfail(r, n, "type %s doesn't define __round__ method", jv_type_name(in));
	if (!strcmp(m, "common") && in->kind != JK_FLOAT)
		return in->kind == JK_BOOL ? jv_int(r->a, in->b) : in; /* round(int, n) is int */
	x = jv_num(in);
	if (prec > 300 || prec < -300)
		jfail(r, n, "precision out of range");
	scale = pow(10.0, (double)prec);
	if (!strcmp(m, "floor"))
		return jv_float(r->a, floor(x * scale) / scale);
	if (!strcmp(m, "ceil"))
		return jv_float(r->a, ceil(x * scale) / scale);
	if (!isfinite(x))
		return in;
	if (prec >= 0) {
		/* glibc prints the exact binary value rounded half-to-even, which is what
		 * Python's round() computes. */
		snprintf(buf, sizeof(buf), "%.*f", (int)CAPY_MIN(prec, 340), x);
		return jv_float(r->a, strtod(buf, NULL));
	}
	return jv_float(r->a, nearbyint(x / pow(10.0, (double)-prec)) * pow(10.0, (double)-prec));
}

static struct capy_tval *f_abs(struct jrender *r, const struct jnode *n, struct capy_tval *in,
			       struct jargs *a)
{
	if (in->kind == JK_FLOAT)
		return jv_float(r->a, fabs(in->f));
	if (in->kind == JK_INT) {
		if (in->i == INT64_MIN)
			jfail(r, n, "integer overflow in abs");
		return jv_int(r->a, in->i < 0 ? -in->i : in->i);
	}
	if (in->kind == JK_BOOL)
		return jv_int(r->a, in->b);
	if (in->kind == JK_BIGINT)
		return in->str.s[0] == '-' ? jv_str(r->a, in->str.s + 1, in->str.len - 1) : in;
	jfail(r, n, "bad operand type for abs(): '%s'", jv_type_name(in));
}

static struct capy_tval *f_sort(struct jrender *r, const struct jnode *n, struct capy_tval *in,
				struct jargs *a)
{
	struct capy_tval *attribute = arg(a, 2, "attribute", &jv_none);

	return sorted(r, n, in, jv_truthy(arg(a, 0, "reverse", &jv_false)),
		      jv_truthy(arg(a, 1, "case_sensitive", &jv_false)),
		      attribute->kind == JK_NONE ? NULL : attribute);
}

static struct capy_tval *f_unique(struct jrender *r, const struct jnode *n, struct capy_tval *in,
				  struct jargs *a)
{
	struct sort_ctx c = { r, n, jv_truthy(arg(a, 0, "case_sensitive", &jv_false)) };
	struct capy_tval *attribute = arg(a, 1, "attribute", &jv_none);
	struct capy_tval *items = jinja_iter(r, n, in), *out = jv_list(r->a, 0), *seen = jv_list(r->a, 0);
	size_t i, k;

	for (i = 0; i < items->list.n; i++) {
		struct capy_tval *v = items->list.v[i], *key;

		jinja_step(r, n);
		key = sort_key(&c, attribute->kind == JK_NONE ? v : attr_path(r, n, v, attribute));
		for (k = 0; k < seen->list.n; k++)
			if (jinja_equal(seen->list.v[k], key))
				break;
		if (k < seen->list.n)
			continue;
		jv_push(r->a, seen, key);
		jv_push(r->a, out, v);
	}
	return out;
}

static struct capy_tval *f_dictsort(struct jrender *r, const struct jnode *n,
				    struct capy_tval *in, struct jargs *a)
{
	struct sort_ctx c = { r, n, jv_truthy(arg(a, 0, "case_sensitive", &jv_false)) };
	struct capy_tval *by = arg(a, 1, "by", NULL);
	bool by_value = by && by->kind == JK_STR && !strcmp(by->str.s, "value");
	bool reverse = jv_truthy(arg(a, 2, "reverse", &jv_false));
	struct capy_tval *pairs = f_items(r, n, in, &(struct jargs){ 0 }), **keys;
	size_t i;

	if (in->kind != JK_DICT)
		jfail(r, n, "dictsort needs a mapping");
	keys = ja_alloc(r->a, (pairs->list.n + 1) * sizeof(*keys));
	for (i = 0; i < pairs->list.n; i++)
		keys[i] = sort_key(&c, pairs->list.v[i]->list.v[by_value]);
	merge_sort(&c, pairs->list.v, keys, pairs->list.n, reverse);
	return pairs;
}

static struct capy_tval *minmax(struct jrender *r, const struct jnode *n, struct capy_tval *in,
				struct jargs *a, bool want_max)
{
	struct sort_ctx c = { r, n, jv_truthy(arg(a, 0, "case_sensitive", &jv_false)) };
	struct capy_tval *attribute = arg(a, 1, "attribute", &jv_none);
	struct capy_tval *items = jinja_iter(r, n, in), *best = NULL, *bestk = NULL;
	size_t i;

	for (i = 0; i < items->list.n; i++) {
		struct capy_tval *v = items->list.v[i], *k;

		k = sort_key(&c, attribute->kind == JK_NONE ? v : attr_path(r, n, v, attribute));
		if (!best || (want_max ? jinja_compare(r, n, k, bestk) > 0 :
					 jinja_compare(r, n, k, bestk) < 0)) {
			best = v;
			bestk = k;
		}
	}
	return best ? best : &jv_undef;
}

static struct capy_tval *f_min(struct jrender *r, const struct jnode *n, struct capy_tval *in,
			       struct jargs *a)
{
	return minmax(r, n, in, a, false);
}

static struct capy_tval *f_max(struct jrender *r, const struct jnode *n, struct capy_tval *in,
			       struct jargs *a)
{
	return minmax(r, n, in, a, true);
}

static struct capy_tval *f_sum(struct jrender *r, const struct jnode *n, struct capy_tval *in,
			       struct jargs *a)
{
	struct capy_tval *attribute = arg(a, 0, "attribute", &jv_none);
	struct capy_tval *acc = arg(a, 1, "start", jv_int(r->a, 0));
	struct capy_tval *items = jinja_iter(r, n, in);
	size_t i;

	for (i = 0; i < items->list.n; i++) {
		struct capy_tval *v = items->list.v[i];

		if (attribute->kind != JK_NONE)
			v = attr_path(r, n, v, attribute);
		if (!is_num_kind(acc) || !is_num_kind(v))
			jfail(r, n, "unsupported operand type(s) for +: '%s' and '%s'",
			      jv_type_name(acc), jv_type_name(v));
		if (acc->kind == JK_FLOAT || v->kind == JK_FLOAT)
			acc = jv_float(r->a, jv_num(acc) + jv_num(v));
		else if (acc->kind == JK_BIGINT || v->kind == JK_BIGINT)
			jfail(r, n, "arithmetic on integers beyond 64 bits is not supported");
		else {
			int64_t x = acc->kind == JK_BOOL ? acc->b : acc->i, y = v->kind == JK_BOOL ? v->b : v->i;

			if (__builtin_add_overflow(x, y, &x))
				jfail(r, n, "integer overflow in sum");
			acc = jv_int(r->a, x);
		}
	}
	return acc;
}

static struct capy_tval *f_center(struct jrender *r, const struct jnode *n, struct capy_tval *in,
				  struct jargs *a)
{
	struct capy_tval *s = need_str(r, n, in);
	int64_t width = int_arg(r, n, arg(a, 0, "width", jv_int(r->a, 80)), "width");
	int64_t len = (int64_t)ju_count(s->str.s, s->str.len), pad, left, i;
	struct sbuild b = { .r = r };

	if (width <= len)
		return s;
	if (width > (int64_t)r->out->limit)
		jfail(r, n, "width too large");
	pad = width - len;
	left = pad / 2 + (pad & width & 1); /* Python's str.center */
	for (i = 0; i < left; i++)
		sb_put(&b, " ", 1);
	sb_put(&b, s->str.s, s->str.len);
	for (i = 0; i < pad - left; i++)
		sb_put(&b, " ", 1);
	return sb_done(&b);
}

static struct capy_tval *f_indent(struct jrender *r, const struct jnode *n, struct capy_tval *in,
				  struct jargs *a)
{
	struct capy_tval *w = arg(a, 0, "width", jv_int(r->a, 4)), *ind, *lines;
	bool first = jv_truthy(arg(a, 1, "first", &jv_false));
	bool blank = jv_truthy(arg(a, 2, "blank", &jv_false));
	struct sbuild b = { .r = r };
	struct capy_tval *s = need_str(r, n, in);
	size_t i;

	if (w->kind == JK_STR) {
		ind = w;
	} else {
		int64_t k = int_arg(r, n, w, "width");

		if (k < 0 || k > 1024)
			jfail(r, n, "indent width out of range");
		{
			char *p = ja_alloc(r->a, (size_t)k + 1);

			memset(p, ' ', (size_t)k);
			ind = jv_str_own(r->a, p, (size_t)k);
		}
	}
	/* jinja2 appends "\n" before splitlines() so a trailing newline is kept */
	{
		char *p = ja_alloc(r->a, s->str.len + 2);

		memcpy(p, s->str.s, s->str.len);
		p[s->str.len] = '\n';
		lines = splitlines(r, jv_str_own(r->a, p, s->str.len + 1), false);
	}
	if (first)
		sb_put(&b, ind->str.s, ind->str.len);
	for (i = 0; i < lines->list.n; i++) {
		struct capy_tval *line = lines->list.v[i];

		if (i) {
			sb_put(&b, "\n", 1);
			if (blank || line->str.len)
				sb_put(&b, ind->str.s, ind->str.len);
		}
		sb_put(&b, line->str.s, line->str.len);
	}
	return sb_done(&b);
}

static struct capy_tval *f_escape(struct jrender *r, const struct jnode *n, struct capy_tval *in,
				  struct jargs *a)
{
	struct capy_tval *s = need_str(r, n, in);
	struct sbuild b = { .r = r };
	size_t i;

	for (i = 0; i < s->str.len; i++) {
		switch (s->str.s[i]) {
		case '&': sb_put(&b, "&amp;", 5); break;
		case '<': sb_put(&b, "&lt;", 4); break;
		case '>': sb_put(&b, "&gt;", 4); break;
		case '"': sb_put(&b, "&#34;", 5); break;
		case '\'': sb_put(&b, "&#39;", 5); break;
		default: sb_put(&b, s->str.s + i, 1);
		}
	}
	return sb_done(&b);
}

static struct capy_tval *f_attr(struct jrender *r, const struct jnode *n, struct capy_tval *in,
				struct jargs *a)
{
	struct capy_tval *name = str_arg(r, n, arg(a, 0, "name", &jv_undef), "attribute name");

	if (in->kind == JK_UNDEF)
		jfail(r, n, "undefined value has no attribute '%s'", name->str.s);
	return jinja_getattr(r, NULL, in, name->str.s);
}

static const struct {
	const char *name;
	filter_fn fn;
} filters[] = {
	{ "abs", f_abs },
	{ "attr", f_attr },
	{ "capitalize", f_capitalize },
	{ "center", f_center },
	{ "count", f_length },
	{ "d", f_default },
	{ "default", f_default },
	{ "dictsort", f_dictsort },
	{ "e", f_escape },
	{ "escape", f_escape },
	{ "first", f_first },
	{ "float", f_float },
	{ "indent", f_indent },
	{ "int", f_int },
	{ "items", f_items },
	{ "join", f_join },
	{ "last", f_last },
	{ "length", f_length },
	{ "list", f_list },
	{ "lower", f_lower },
	{ "map", f_map },
	{ "max", f_max },
	{ "min", f_min },
	{ "reject", f_reject },
	{ "rejectattr", f_rejectattr },
	{ "replace", f_replace },
	{ "reverse", f_reverse },
	{ "round", f_round },
	{ "safe", f_safe },
	{ "select", f_select },
	{ "selectattr", f_selectattr },
	{ "sort", f_sort },
	{ "string", f_string },
	{ "sum", f_sum },
	{ "title", f_title },
	{ "tojson", f_tojson },
	{ "trim", f_trim },
	{ "unique", f_unique },
	{ "upper", f_upper },
};

static int filter_index(const char *name)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(filters); i++)
		if (!strcmp(filters[i].name, name))
			return (int)i;
	return -1;
}

bool jinja_filter_known(const char *name)
{
	return filter_index(name) >= 0;
}

struct capy_tval *jinja_filter(struct jrender *r, const struct jnode *n, const char *name,
			       struct capy_tval *in, struct jargs *args)
{
	int i = filter_index(name);

	if (i < 0)
		jfail(r, n, "no filter named '%s'", name);
	jinja_step(r, n);
	return filters[i].fn(r, n, in, args);
}

/* --- tests ------------------------------------------------------------------------------ */

static const char *const tests[] = {
	"!=", "<", "<=", "==", ">", ">=", "boolean", "callable", "defined", "divisibleby", "eq",
	"equalto", "escaped", "even", "false", "filter", "float", "ge", "greaterthan", "gt", "in",
	"integer", "iterable", "le", "lessthan", "lower", "lt", "mapping", "ne", "none", "number",
	"odd", "sameas", "sequence", "string", "test", "true", "undefined", "upper",
};

bool jinja_test_known(const char *name)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(tests); i++)
		if (!strcmp(tests[i], name))
			return true;
	return false;
}

static bool str_all(const struct capy_tval *s, bool (*pred)(int32_t), bool need_cased)
{
	size_t i;
	bool cased = false;

	for (i = 0; i < s->str.len;) {
		int32_t c;

		i += ju_decode(s->str.s, s->str.len, i, &c);
		if (is_cased(c)) {
			cased = true;
			if (!pred(c))
				return false;
		} else if (!need_cased && !pred(c)) {
			return false;
		}
	}
	return need_cased ? cased : s->str.len > 0;
}

static bool cp_lower(int32_t c)
{
	return utf8proc_toupper(c) != c || utf8proc_category(c) == UTF8PROC_CATEGORY_LL;
}

static bool cp_upper(int32_t c)
{
	return utf8proc_tolower(c) != c || utf8proc_category(c) == UTF8PROC_CATEGORY_LU;
}

bool jinja_test(struct jrender *r, const struct jnode *n, const char *name, struct capy_tval *in,
		struct jargs *a)
{
	struct capy_tval *x = arg(a, 0, NULL, &jv_undef);
	int k = in->kind;

	jinja_step(r, n);
	if (!strcmp(name, "defined"))
		return k != JK_UNDEF;
	if (!strcmp(name, "undefined"))
		return k == JK_UNDEF;
	if (!strcmp(name, "none"))
		return k == JK_NONE;
	if (!strcmp(name, "string"))
		return k == JK_STR;
	if (!strcmp(name, "mapping"))
		return k == JK_DICT;
	if (!strcmp(name, "iterable"))
		return k == JK_STR || k == JK_LIST || k == JK_DICT || k == JK_UNDEF;
	if (!strcmp(name, "sequence"))
		return k == JK_STR || k == JK_LIST || k == JK_DICT;
	if (!strcmp(name, "number"))
		return is_num_kind(in);
	if (!strcmp(name, "integer"))
		return k == JK_INT || k == JK_BIGINT;
	if (!strcmp(name, "float"))
		return k == JK_FLOAT;
	if (!strcmp(name, "boolean"))
		return k == JK_BOOL;
	if (!strcmp(name, "true"))
		return k == JK_BOOL && in->b;
	if (!strcmp(name, "false"))
		return k == JK_BOOL && !in->b;
	if (!strcmp(name, "callable"))
		return k == JK_MACRO || k == JK_FUNC;
	if (!strcmp(name, "escaped"))
		return false;
	if (!strcmp(name, "lower"))
		return k == JK_STR && str_all(in, cp_lower, true);
	if (!strcmp(name, "upper"))
		return k == JK_STR && str_all(in, cp_upper, true);
	if (!strcmp(name, "filter"))
		return k == JK_STR && jinja_filter_known(in->str.s);
	if (!strcmp(name, "test"))
		return k == JK_STR && jinja_test_known(in->str.s);
	if (!strcmp(name, "odd") || !strcmp(name, "even")) {
		int64_t v = int_arg(r, n, in, "value");

		return (v & 1) == (name[0] == 'o');
	}
	if (!strcmp(name, "divisibleby")) {
		int64_t v = int_arg(r, n, in, "value"), d = int_arg(r, n, x, "divisor");

		if (!d)
			jfail(r, n, "integer division or modulo by zero");
		return d == -1 || v % d == 0;
	}
	if (!strcmp(name, "sameas"))
		return in == x || (k == x->kind && (k == JK_NONE || k == JK_UNDEF ||
						    (k == JK_BOOL && in->b == x->b)));
	if (!strcmp(name, "in"))
		return jinja_contains(r, n, x, in);
	if (!strcmp(name, "eq") || !strcmp(name, "equalto") || !strcmp(name, "=="))
		return jinja_equal(in, x);
	if (!strcmp(name, "ne") || !strcmp(name, "!="))
		return !jinja_equal(in, x);
	if (!strcmp(name, "lt") || !strcmp(name, "lessthan") || !strcmp(name, "<"))
		return jinja_compare(r, n, in, x) < 0;
	if (!strcmp(name, "le") || !strcmp(name, "<="))
		return jinja_compare(r, n, in, x) <= 0;
	if (!strcmp(name, "gt") || !strcmp(name, "greaterthan") || !strcmp(name, ">"))
		return jinja_compare(r, n, in, x) > 0;
	if (!strcmp(name, "ge") || !strcmp(name, ">="))
		return jinja_compare(r, n, in, x) >= 0;
	jfail(r, n, "no test named '%s'", name);
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
	str_arg(r, n, what, end ? "endswith argument" : "startswith argument");
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
	struct capy_tval *x = arg(a, 0, NULL, NULL);

	if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
		if (!x)
			jfail(r, n, "%s() takes at least 1 argument", name);
		return jv_bool(starts_or_ends(r, n, s, x, name[0] == 'e'));
	}
	if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip")) {
		struct capy_tval *chars = arg(a, 0, "chars", &jv_none);

		return strip(r, s, chars->kind == JK_NONE ? NULL : str_arg(r, n, chars, "chars"),
			     name[0] != 'r', name[0] != 'l');
	}
	if (!strcmp(name, "split") || !strcmp(name, "rsplit")) {
		struct capy_tval *sep = arg(a, 0, "sep", &jv_none);
		struct capy_tval *maxsplit = arg(a, 1, "maxsplit", NULL);

		return split(r, n, s, sep->kind == JK_NONE ? NULL : str_arg(r, n, sep, "sep"),
			     maxsplit ? int_arg(r, n, maxsplit, "maxsplit") : -1, name[0] == 'r');
	}
	if (!strcmp(name, "upper"))
		return recase(r, s, CASE_UPPER);
	if (!strcmp(name, "lower"))
		return recase(r, s, CASE_LOWER);
	if (!strcmp(name, "title"))
		return recase(r, s, CASE_TITLE);
	if (!strcmp(name, "capitalize"))
		return recase(r, s, CASE_CAPITALIZE);
	if (!strcmp(name, "replace")) {
		struct capy_tval *count = arg(a, 2, "count", NULL);

		if (a->npos < 2)
			jfail(r, n, "replace() takes at least 2 arguments");
		return str_replace(r, s, str_arg(r, n, a->pos[0], "old"),
				   str_arg(r, n, a->pos[1], "new"),
				   count ? int_arg(r, n, count, "count") : -1);
	}
	if (!strcmp(name, "format"))
		return str_format(r, n, s, a);
	if (!strcmp(name, "find") || !strcmp(name, "rfind") || !strcmp(name, "index") ||
	    !strcmp(name, "rindex")) {
		int64_t pos;

		if (!x)
			jfail(r, n, "%s() takes at least 1 argument", name);
		pos = find(s, str_arg(r, n, x, "substring"), name[0] == 'r');
		if (pos < 0 && strstr(name, "index"))
			jfail(r, n, "substring not found");
		return jv_int(r->a, pos);
	}
	if (!strcmp(name, "count")) {
		int64_t cnt = 0;
		size_t i = 0;

		if (!x)
			jfail(r, n, "count() takes at least 1 argument");
		str_arg(r, n, x, "substring");
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
				sb_put(&b, s->str.s, s->str.len);
			sb_put(&b, v->str.s, v->str.len);
		}
		return sb_done(&b);
	}
	if (!strcmp(name, "splitlines"))
		return splitlines(r, s, jv_truthy(arg(a, 0, "keepends", &jv_false)));
	if (!strcmp(name, "isdigit"))
		return jv_bool(str_all(s, cp_digit, false));
	if (!strcmp(name, "isalpha"))
		return jv_bool(str_all(s, cp_alpha, false));
	if (!strcmp(name, "isalnum"))
		return jv_bool(str_all(s, cp_alnum, false));
	if (!strcmp(name, "isspace"))
		return jv_bool(str_all(s, cp_space, false));
	if (!strcmp(name, "islower"))
		return jv_bool(str_all(s, cp_lower, true));
	if (!strcmp(name, "isupper"))
		return jv_bool(str_all(s, cp_upper, true));
	if (!strcmp(name, "removeprefix") || !strcmp(name, "removesuffix")) {
		bool end = name[6] == 's';

		if (!x)
			jfail(r, n, "%s() takes exactly one argument", name);
		if (starts_or_ends(r, n, s, str_arg(r, n, x, "affix"), end))
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
		return f_items(r, n, d, a);
	if (!strcmp(name, "keys"))
		return jinja_iter(r, n, d);
	if (!strcmp(name, "values")) {
		l = jv_list(r->a, d->dict.n);
		for (i = 0; i < d->dict.n; i++)
			jv_push(r->a, l, d->dict.e[i].val);
		return l;
	}
	if (!strcmp(name, "get")) {
		struct capy_tval *key = arg(a, 0, NULL, &jv_undef), *v = NULL;

		if (key->kind == JK_STR)
			v = jd_get(d, key->str.s, key->str.len);
		return v ? v : arg(a, 1, NULL, &jv_none);
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

/* --- globals ---------------------------------------------------------------------------- */

static const char *const globals[] = {
	"dict", "namespace", "raise_exception", "range", "strftime_now",
};

int jinja_global_index(const char *name)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(globals); i++)
		if (!strcmp(globals[i], name))
			return (int)i;
	return -1;
}

const char *jinja_global_name(int fn)
{
	return fn >= 0 && (size_t)fn < ARRAY_SIZE(globals) ? globals[fn] : "?";
}

#define MAX_RANGE 100000 /* jinja2's sandbox refuses larger ranges */

struct capy_tval *jinja_call_global(struct jrender *r, const struct jnode *n, int fn,
				    struct jargs *a)
{
	const char *name = jinja_global_name(fn);
	struct capy_tval *v;
	uint32_t i;

	if (!strcmp(name, "raise_exception")) {
		struct capy_tval *msg = need_str(r, n, arg(a, 0, "message", &jv_undef));

		capy_err_set(r->err, CAPY_EINVAL, "%s", msg->str.s);
		r->raised = true;
		longjmp(r->fail, 1);
	}
	if (!strcmp(name, "strftime_now")) {
		struct capy_tval *fmt = str_arg(r, n, arg(a, 0, "format", &jv_undef), "format");
		char out[512];
		struct tm tm;
		time_t now = time(NULL);
		size_t len;

		if (fmt->str.len > 128)
			jfail(r, n, "strftime_now format too long");
		localtime_r(&now, &tm);
		len = strftime(out, sizeof(out), fmt->str.s, &tm);
		return jv_str(r->a, out, len);
	}
	if (!strcmp(name, "range")) {
		int64_t start = 0, stop, step = 1, k, count;

		if (!a->npos || a->npos > 3 || a->nkw)
			jfail(r, n, "range expects 1 to 3 integer arguments");
		stop = int_arg(r, n, a->pos[0], "range argument");
		if (a->npos >= 2) {
			start = stop;
			stop = int_arg(r, n, a->pos[1], "range argument");
		}
		if (a->npos == 3)
			step = int_arg(r, n, a->pos[2], "range argument");
		if (!step)
			jfail(r, n, "range() arg 3 must not be zero");
		count = step > 0 ? (stop > start ? (stop - start - 1) / step + 1 : 0) :
				   (start > stop ? (start - stop - 1) / -step + 1 : 0);
		if (count > MAX_RANGE)
			jfail(r, n, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).",
			      MAX_RANGE);
		v = jv_list(r->a, (size_t)count);
		for (k = 0; k < count; k++)
			jv_push(r->a, v, jv_int(r->a, start + k * step));
		return v;
	}
	/* namespace(mapping?, **kw) and dict(**kw) */
	v = jv_new(r->a, name[0] == 'n' ? JK_NS : JK_DICT);
	if (a->npos > 1)
		jfail(r, n, "%s expected at most 1 positional argument", name);
	if (a->npos) {
		struct capy_tval *init = a->pos[0];

		if (init->kind != JK_DICT && init->kind != JK_NS)
			jfail(r, n, "%s() argument must be a mapping", name);
		for (i = 0; i < init->dict.n; i++)
			jd_set(r->a, v, init->dict.e[i].key, init->dict.e[i].klen, init->dict.e[i].val);
	}
	for (i = 0; i < a->nkw; i++)
		jd_set(r->a, v, a->kwn[i], strlen(a->kwn[i]), a->kwv[i]);
	return v;
}
