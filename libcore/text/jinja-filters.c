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

/* --- sorting ---------------------------------------------------------------------------- */

struct sort_ctx {
	struct jrender *r;
	const struct jnode *n;
	bool case_sensitive;
};

static struct capy_tval *sort_key(struct sort_ctx *c, struct capy_tval *v)
{
	if (!c->case_sensitive && v->kind == JK_STR)
		return js_recase(c->r, v, CASE_LOWER);
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
	js_str_arg(r, n, path, "attribute");
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
	struct capy_tval *ind = js_arg(a, 1, "indent", &jv_none), *seps = js_arg(a, 2, "separators", &jv_none);
	struct jjson_opts o = {
		.ensure_ascii = jv_truthy(js_arg(a, 0, "ensure_ascii", &jv_false)),
		.sort_keys = jv_truthy(js_arg(a, 3, "sort_keys", &jv_false)),
		.indent = -1, .item_sep = ", ", .key_sep = ": ",
	};
	const struct capy_tval *bad = NULL;
	struct jbuf *b = &r->scratch;

	js_no_more_args(r, n, a, 4, kw, "tojson");
	if (ind->kind != JK_NONE) {
		int64_t w = js_int_arg(r, n, ind, "indent");

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
	struct capy_tval *chars = js_arg(a, 0, "chars", &jv_none);

	return js_strip(r, js_need_str(r, n, in), chars->kind == JK_NONE ? NULL :
		     js_str_arg(r, n, chars, "trim chars"), true, true);
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
	return js_need_str(r, n, in);
}

static struct capy_tval *f_safe(struct jrender *r, const struct jnode *n, struct capy_tval *in,
				struct jargs *a)
{
	return in;
}

static struct capy_tval *f_join(struct jrender *r, const struct jnode *n, struct capy_tval *in,
				struct jargs *a)
{
	struct capy_tval *sep = js_need_str(r, n, js_arg(a, 0, "d", jv_str_own(r->a, "", 0)));
	struct capy_tval *attribute = js_arg(a, 1, "attribute", NULL);
	struct capy_tval *items = jinja_iter(r, n, in);
	struct sbuild b = { .r = r };
	size_t i;

	for (i = 0; i < items->list.n; i++) {
		struct capy_tval *v = items->list.v[i];

		if (attribute && attribute->kind != JK_NONE)
			v = attr_path(r, n, v, attribute);
		v = js_need_str(r, n, v);
		if (i)
			js_sb_put(&b, sep->str.s, sep->str.len);
		js_sb_put(&b, v->str.s, v->str.len);
	}
	return js_sb_done(&b);
}

static struct capy_tval *f_default(struct jrender *r, const struct jnode *n, struct capy_tval *in,
				   struct jargs *a)
{
	struct capy_tval *def = js_arg(a, 0, "default_value", jv_str_own(r->a, "", 0));
	bool boolean = jv_truthy(js_arg(a, 1, "boolean", &jv_false));

	if (in->kind == JK_UNDEF || (boolean && !jv_truthy(in)))
		return def;
	return in;
}

static struct capy_tval *f_upper(struct jrender *r, const struct jnode *n, struct capy_tval *in,
				 struct jargs *a)
{
	return js_recase(r, js_need_str(r, n, in), CASE_UPPER);
}

static struct capy_tval *f_lower(struct jrender *r, const struct jnode *n, struct capy_tval *in,
				 struct jargs *a)
{
	return js_recase(r, js_need_str(r, n, in), CASE_LOWER);
}

/* jinja's title filter is not str.title(): words start after "-", whitespace, "(", "{", "[" or
 * "<", and their first character is upper-cased, the rest lower-cased. */
static struct capy_tval *f_title(struct jrender *r, const struct jnode *n, struct capy_tval *in,
				 struct jargs *a)
{
	struct capy_tval *s = js_need_str(r, n, in);
	struct sbuild b = { .r = r };
	bool start = true;
	size_t i, k;

	for (i = 0; i < s->str.len; i += k) {
		int32_t c;
		bool sep;

		k = ju_decode(s->str.s, s->str.len, i, &c);
		sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || ju_isspace(c);
		if (sep) {
			js_sb_put(&b, s->str.s + i, k);
		} else {
			struct capy_tval one = { .kind = JK_STR, .str = { s->str.s + i, k } };
			struct capy_tval *o = js_recase(r, &one, start ? CASE_UPPER : CASE_LOWER);

			js_sb_put(&b, o->str.s, o->str.len);
		}
		start = sep;
	}
	return js_sb_done(&b);
}

static struct capy_tval *f_capitalize(struct jrender *r, const struct jnode *n,
				      struct capy_tval *in, struct jargs *a)
{
	return js_recase(r, js_need_str(r, n, in), CASE_CAPITALIZE);
}

static struct capy_tval *f_replace(struct jrender *r, const struct jnode *n, struct capy_tval *in,
				   struct jargs *a)
{
	struct capy_tval *old = js_need_str(r, n, js_arg(a, 0, "old", &jv_undef));
	struct capy_tval *new = js_need_str(r, n, js_arg(a, 1, "new", &jv_undef));
	struct capy_tval *count = js_arg(a, 2, "count", &jv_none);

	return js_str_replace(r, js_need_str(r, n, in), old, new,
			   count->kind == JK_NONE ? -1 : js_int_arg(r, n, count, "count"));
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
			js_sb_put(&b, l->list.v[i]->str.s, l->list.v[i]->str.len);
		return js_sb_done(&b);
	}
	return l;
}

/* map(filter, args...) or map(attribute='x', default=d) */
static struct capy_tval *f_map(struct jrender *r, const struct jnode *n, struct capy_tval *in,
			       struct jargs *a)
{
	struct capy_tval *items = jinja_iter(r, n, in), *l = jv_list(r->a, items->list.n);
	struct capy_tval *attribute = js_arg(a, UINT32_MAX, "attribute", NULL);
	struct capy_tval *def = js_arg(a, UINT32_MAX, "default", NULL);
	struct jargs rest = { 0 };
	const char *fname = NULL;
	size_t i;

	if (!attribute) {
		if (!a->npos)
			jfail(r, n, "map requires a filter name or attribute=");
		fname = js_str_arg(r, n, a->pos[0], "map filter")->str.s;
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
	struct capy_tval *attribute = by_attr ? js_arg(a, 0, NULL, NULL) : NULL;
	const char *tname = NULL;
	struct jargs rest = { 0 };
	size_t i;

	if (by_attr && !attribute)
		jfail(r, n, "selectattr/rejectattr need an attribute");
	if (a->npos > first) {
		tname = js_str_arg(r, n, a->pos[first], "test name")->str.s;
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
	struct capy_tval *def = js_arg(a, 0, "default", NULL);
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
	struct capy_tval *def = js_arg(a, 0, "default", NULL);
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
	int64_t prec = js_int_arg(r, n, js_arg(a, 0, "precision", jv_int(r->a, 0)), "precision");
	struct capy_tval *method = js_arg(a, 1, "method", NULL);
	const char *m = method ? js_str_arg(r, n, method, "method")->str.s : "common";
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
	struct capy_tval *attribute = js_arg(a, 2, "attribute", &jv_none);

	return sorted(r, n, in, jv_truthy(js_arg(a, 0, "reverse", &jv_false)),
		      jv_truthy(js_arg(a, 1, "case_sensitive", &jv_false)),
		      attribute->kind == JK_NONE ? NULL : attribute);
}

static struct capy_tval *f_unique(struct jrender *r, const struct jnode *n, struct capy_tval *in,
				  struct jargs *a)
{
	struct sort_ctx c = { r, n, jv_truthy(js_arg(a, 0, "case_sensitive", &jv_false)) };
	struct capy_tval *attribute = js_arg(a, 1, "attribute", &jv_none);
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
	struct sort_ctx c = { r, n, jv_truthy(js_arg(a, 0, "case_sensitive", &jv_false)) };
	struct capy_tval *by = js_arg(a, 1, "by", NULL);
	bool by_value = by && by->kind == JK_STR && !strcmp(by->str.s, "value");
	bool reverse = jv_truthy(js_arg(a, 2, "reverse", &jv_false));
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
	struct sort_ctx c = { r, n, jv_truthy(js_arg(a, 0, "case_sensitive", &jv_false)) };
	struct capy_tval *attribute = js_arg(a, 1, "attribute", &jv_none);
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
	struct capy_tval *attribute = js_arg(a, 0, "attribute", &jv_none);
	struct capy_tval *acc = js_arg(a, 1, "start", jv_int(r->a, 0));
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
	struct capy_tval *s = js_need_str(r, n, in);
	int64_t width = js_int_arg(r, n, js_arg(a, 0, "width", jv_int(r->a, 80)), "width");
	int64_t len = (int64_t)ju_count(s->str.s, s->str.len), pad, left, i;
	struct sbuild b = { .r = r };

	if (width <= len)
		return s;
	if (width > (int64_t)r->out->limit)
		jfail(r, n, "width too large");
	pad = width - len;
	left = pad / 2 + (pad & width & 1); /* Python's str.center */
	for (i = 0; i < left; i++)
		js_sb_put(&b, " ", 1);
	js_sb_put(&b, s->str.s, s->str.len);
	for (i = 0; i < pad - left; i++)
		js_sb_put(&b, " ", 1);
	return js_sb_done(&b);
}

static struct capy_tval *f_indent(struct jrender *r, const struct jnode *n, struct capy_tval *in,
				  struct jargs *a)
{
	struct capy_tval *w = js_arg(a, 0, "width", jv_int(r->a, 4)), *ind, *lines;
	bool first = jv_truthy(js_arg(a, 1, "first", &jv_false));
	bool blank = jv_truthy(js_arg(a, 2, "blank", &jv_false));
	struct sbuild b = { .r = r };
	struct capy_tval *s = js_need_str(r, n, in);
	size_t i;

	if (w->kind == JK_STR) {
		ind = w;
	} else {
		int64_t k = js_int_arg(r, n, w, "width");

		if (k < 0 || k > 1024)
			jfail(r, n, "indent width out of range");
		{
			char *p = ja_alloc(r->a, (size_t)k + 1);

			memset(p, ' ', (size_t)k);
			ind = jv_str_own(r->a, p, (size_t)k);
		}
	}
	/* jinja2 appends "\n" before js_splitlines() so a trailing newline is kept */
	{
		char *p = ja_alloc(r->a, s->str.len + 2);

		memcpy(p, s->str.s, s->str.len);
		p[s->str.len] = '\n';
		lines = js_splitlines(r, jv_str_own(r->a, p, s->str.len + 1), false);
	}
	if (first)
		js_sb_put(&b, ind->str.s, ind->str.len);
	for (i = 0; i < lines->list.n; i++) {
		struct capy_tval *line = lines->list.v[i];

		if (i) {
			js_sb_put(&b, "\n", 1);
			if (blank || line->str.len)
				js_sb_put(&b, ind->str.s, ind->str.len);
		}
		js_sb_put(&b, line->str.s, line->str.len);
	}
	return js_sb_done(&b);
}

static struct capy_tval *f_escape(struct jrender *r, const struct jnode *n, struct capy_tval *in,
				  struct jargs *a)
{
	struct capy_tval *s = js_need_str(r, n, in);
	struct sbuild b = { .r = r };
	size_t i;

	for (i = 0; i < s->str.len; i++) {
		switch (s->str.s[i]) {
		case '&': js_sb_put(&b, "&amp;", 5); break;
		case '<': js_sb_put(&b, "&lt;", 4); break;
		case '>': js_sb_put(&b, "&gt;", 4); break;
		case '"': js_sb_put(&b, "&#34;", 5); break;
		case '\'': js_sb_put(&b, "&#39;", 5); break;
		default: js_sb_put(&b, s->str.s + i, 1);
		}
	}
	return js_sb_done(&b);
}

static struct capy_tval *f_attr(struct jrender *r, const struct jnode *n, struct capy_tval *in,
				struct jargs *a)
{
	struct capy_tval *name = js_str_arg(r, n, js_arg(a, 0, "name", &jv_undef), "attribute name");

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

bool jinja_test(struct jrender *r, const struct jnode *n, const char *name, struct capy_tval *in,
		struct jargs *a)
{
	struct capy_tval *x = js_arg(a, 0, NULL, &jv_undef);
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
		return k == JK_STR && js_str_all(in, js_cp_lower, true);
	if (!strcmp(name, "upper"))
		return k == JK_STR && js_str_all(in, js_cp_upper, true);
	if (!strcmp(name, "filter"))
		return k == JK_STR && jinja_filter_known(in->str.s);
	if (!strcmp(name, "test"))
		return k == JK_STR && jinja_test_known(in->str.s);
	if (!strcmp(name, "odd") || !strcmp(name, "even")) {
		int64_t v = js_int_arg(r, n, in, "value");

		return (v & 1) == (name[0] == 'o');
	}
	if (!strcmp(name, "divisibleby")) {
		int64_t v = js_int_arg(r, n, in, "value"), d = js_int_arg(r, n, x, "divisor");

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
		struct capy_tval *msg = js_need_str(r, n, js_arg(a, 0, "message", &jv_undef));

		capy_err_set(r->err, CAPY_EINVAL, "%s", msg->str.s);
		r->raised = true;
		longjmp(r->fail, 1);
	}
	if (!strcmp(name, "strftime_now")) {
		struct capy_tval *fmt = js_str_arg(r, n, js_arg(a, 0, "format", &jv_undef), "format");
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
		stop = js_int_arg(r, n, a->pos[0], "range argument");
		if (a->npos >= 2) {
			start = stop;
			stop = js_int_arg(r, n, a->pos[1], "range argument");
		}
		if (a->npos == 3)
			step = js_int_arg(r, n, a->pos[2], "range argument");
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
