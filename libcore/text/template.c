/* template.c - the public template API: value documents, compile, render. */
#include "text/jinja-impl.h"

#include <math.h>

#define DEFAULT_STEPS 50000000ull
#define DEFAULT_OUTPUT (64u << 20)
#define DEFAULT_MEMORY (512u << 20)
#define DEFAULT_DEPTH 64

struct capy_tdoc *capy_tdoc_new(void)
{
	struct capy_tdoc *doc = calloc(1, sizeof(*doc));

	if (doc)
		ja_init(&doc->arena, 0);
	return doc;
}

void capy_tdoc_free(struct capy_tdoc *doc)
{
	if (!doc)
		return;
	ja_release(&doc->arena);
	free(doc);
}

int capy_tdoc_parse_json(struct capy_tdoc *doc, const char *text, size_t len, const char *what,
			 struct capy_tval **out, struct capy_err *err)
{
	return jv_parse_json(&doc->arena, text, len, what, out, err);
}

struct capy_tval *capy_tval_none(struct capy_tdoc *doc)
{
	return &jv_none;
}

struct capy_tval *capy_tval_bool(struct capy_tdoc *doc, bool b)
{
	return jv_bool(b);
}

struct capy_tval *capy_tval_int(struct capy_tdoc *doc, int64_t i)
{
	return jv_int(&doc->arena, i);
}

struct capy_tval *capy_tval_float(struct capy_tdoc *doc, double f)
{
	return jv_float(&doc->arena, f);
}

struct capy_tval *capy_tval_str(struct capy_tdoc *doc, const char *s, size_t len)
{
	return jv_str(&doc->arena, s, len);
}

struct capy_tval *capy_tval_list(struct capy_tdoc *doc)
{
	return jv_list(&doc->arena, 0);
}

struct capy_tval *capy_tval_dict(struct capy_tdoc *doc)
{
	return jv_new(&doc->arena, JK_DICT);
}

int capy_tval_push(struct capy_tdoc *doc, struct capy_tval *list, struct capy_tval *v)
{
	size_t n;

	if (!list || !v || list->kind != JK_LIST)
		return -1;
	n = list->list.n;
	jv_push(&doc->arena, list, v);
	return list->list.n == n + 1 ? 0 : -1;
}

int capy_tval_set(struct capy_tdoc *doc, struct capy_tval *dict, const char *key,
		  struct capy_tval *v)
{
	size_t len = strlen(key);

	if (!dict || !v || dict->kind != JK_DICT)
		return -1;
	jd_set(&doc->arena, dict, key, len, v);
	return jd_get(dict, key, len) == v ? 0 : -1;
}

struct capy_tval *capy_tval_get(const struct capy_tval *dict, const char *key)
{
	return dict && dict->kind == JK_DICT ? jd_get(dict, key, strlen(key)) : NULL;
}

size_t capy_tval_len(const struct capy_tval *list)
{
	return list && list->kind == JK_LIST ? list->list.n : 0;
}

struct capy_tval *capy_tval_at(const struct capy_tval *list, size_t i)
{
	return list && list->kind == JK_LIST && i < list->list.n ? list->list.v[i] : NULL;
}

const char *capy_tval_strv(const struct capy_tval *v, size_t *len)
{
	if (!v || v->kind != JK_STR)
		return NULL;
	if (len)
		*len = v->str.len;
	return v->str.s;
}

enum capy_tval_kind capy_tval_kind(const struct capy_tval *v)
{
	if (!v)
		return CAPY_TVAL_OTHER;
	switch (v->kind) {
	case JK_NONE: return CAPY_TVAL_NONE;
	case JK_BOOL: return CAPY_TVAL_BOOL;
	case JK_INT:
	case JK_BIGINT: return CAPY_TVAL_INT;
	case JK_FLOAT: return CAPY_TVAL_FLOAT;
	case JK_STR: return CAPY_TVAL_STR;
	case JK_LIST: return CAPY_TVAL_LIST;
	case JK_DICT: return CAPY_TVAL_DICT;
	default: return CAPY_TVAL_OTHER;
	}
}

bool capy_tval_boolv(const struct capy_tval *v)
{
	return v && v->kind == JK_BOOL && v->b;
}

int capy_tval_intv(const struct capy_tval *v, int64_t *out)
{
	if (!v || v->kind != JK_INT)
		return -1;
	*out = v->i;
	return 0;
}

double capy_tval_numv(const struct capy_tval *v)
{
	if (v && (v->kind == JK_INT || v->kind == JK_BIGINT || v->kind == JK_FLOAT))
		return jv_num(v);
	return NAN;
}

size_t capy_tval_dict_len(const struct capy_tval *dict)
{
	return dict && dict->kind == JK_DICT ? dict->dict.n : 0;
}

const char *capy_tval_dict_entry(const struct capy_tval *dict, size_t i, size_t *klen,
				 struct capy_tval **val)
{
	if (!dict || dict->kind != JK_DICT || i >= dict->dict.n)
		return NULL;
	if (klen)
		*klen = dict->dict.e[i].klen;
	if (val)
		*val = dict->dict.e[i].val;
	return dict->dict.e[i].key;
}

int capy_tval_to_json(const struct capy_tval *v, char **out, size_t *len, struct capy_err *err)
{
	struct jjson_opts o = { .indent = -1, .item_sep = ", ", .key_sep = ": " };
	const struct capy_tval *bad = NULL;
	struct jbuf b = { 0 };

	*out = NULL;
	if (jv_to_json(&b, v, &o, &bad) < 0) {
		jb_free(&b);
		return capy_err_set(err, CAPY_EINVAL, "a value of type '%s' has no JSON form",
				    jv_type_name(bad));
	}
	jb_put(&b, "", 0);
	if (b.failed || (!b.p && !(b.p = calloc(1, 1)))) {
		jb_free(&b);
		return capy_err_set(err, CAPY_ENOMEM, "out of memory writing JSON");
	}
	*out = b.p;
	if (len)
		*len = b.len;
	return 0;
}

int capy_tmpl_compile(const char *src, size_t len, const char *name, struct capy_tmpl **out,
		      struct capy_err *err)
{
	struct capy_tmpl *t = calloc(1, sizeof(*t));
	char *norm;
	size_t i, o = 0;
	int rc;

	*out = NULL;
	if (!t)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory compiling a template");
	ja_init(&t->arena, 0);
	t->name = ja_strndup(&t->arena, name ? name : "template", strlen(name ? name : "template"));
	norm = ja_alloc(&t->arena, len + 1);
	if (!t->name || !norm) {
		capy_tmpl_free(t);
		return capy_err_set(err, CAPY_ENOMEM, "out of memory compiling a template");
	}
	/* jinja2 reads "\r\n" and "\r" as "\n" and drops one trailing newline. */
	for (i = 0; i < len; i++) {
		if (src[i] == '\r') {
			norm[o++] = '\n';
			if (i + 1 < len && src[i + 1] == '\n')
				i++;
		} else {
			norm[o++] = src[i];
		}
	}
	if (o && norm[o - 1] == '\n')
		o--;
	norm[o] = '\0';
	if (memchr(norm, '\0', o) || !ju_valid(norm, o)) {
		rc = capy_err_set(err, CAPY_EFORMAT, "%s: template is not valid UTF-8 or has a NUL byte",
				  t->name);
		capy_tmpl_free(t);
		return rc;
	}
	t->src = norm;
	t->len = o;
	rc = jinja_parse(t, err);
	if (rc < 0) {
		capy_tmpl_free(t);
		return rc;
	}
	*out = t;
	return 0;
}

void capy_tmpl_free(struct capy_tmpl *t)
{
	if (!t)
		return;
	ja_release(&t->arena);
	free(t);
}

int capy_tmpl_render(const struct capy_tmpl *t, const struct capy_tval *vars,
		     const struct capy_tmpl_limits *lim, char **out, size_t *out_len,
		     struct capy_err *err)
{
	struct jarena arena;
	struct jbuf buf = { 0 };
	struct jrender *r = calloc(1, sizeof(*r));
	int rc;

	*out = NULL;
	if (out_len)
		*out_len = 0;
	if (!r)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory rendering a template");
	ja_init(&arena, lim && lim->max_memory ? lim->max_memory : DEFAULT_MEMORY);
	buf.limit = lim && lim->max_output ? lim->max_output : DEFAULT_OUTPUT;
	r->t = t;
	r->a = &arena;
	r->out = &buf;
	r->err = err;
	r->max_steps = lim && lim->max_steps ? lim->max_steps : DEFAULT_STEPS;
	r->max_depth = lim && lim->max_depth ? lim->max_depth : DEFAULT_DEPTH;
	rc = jinja_render(r, vars);
	jb_free(&r->scratch);
	ja_release(&arena);
	free(r);
	if (rc < 0) {
		jb_free(&buf);
		return rc;
	}
	if (!buf.p && !(buf.p = calloc(1, 1)))
		return capy_err_set(err, CAPY_ENOMEM, "out of memory rendering a template");
	*out = buf.p;
	if (out_len)
		*out_len = buf.len;
	return 0;
}
