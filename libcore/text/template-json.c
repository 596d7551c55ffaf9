/* template-json.c - JSON to template values and back, keeping what Python's json keeps.
 *
 * cJSON holds every number as a double, which loses 12345678901234567890 and the int/float
 * kind that Python's json.dumps prints ("1" vs "1.0"), and a chat prompt must reproduce those
 * bytes exactly. So this file has its own small reader: integers that fit int64 stay int64,
 * larger ones keep their digits, floats are read with strtod, keys keep insertion order. The
 * writer is json.dumps: ", " and ": " separators by default, Python float repr, ensure_ascii off
 * unless asked.
 */
#include "text/jinja-impl.h"

#include <math.h>
#include <utf8proc.h>

#define JSON_MAX_DEPTH 512

struct jreader {
	struct jarena *a;
	const char *s;
	size_t len, pos;
	const char *what;
	struct capy_err *err;
	jmp_buf fail; /* both parse errors and arena failures land here */
	bool parse_error;
	struct jbuf tmp;
};

CAPY_NORETURN CAPY_PRINTF(2, 3) static void jr_fail(struct jreader *r, const char *fmt, ...)
{
	char msg[256];
	size_t line = 1, col = 1, i;
	va_list ap;

	for (i = 0; i < r->pos && i < r->len; i++) {
		if (r->s[i] == '\n') {
			line++;
			col = 1;
		} else if (((unsigned char)r->s[i] & 0xc0) != 0x80) {
			col++;
		}
	}
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	capy_err_set(r->err, CAPY_EFORMAT, "%s:%zu:%zu: %s", r->what, line, col, msg);
	r->parse_error = true;
	longjmp(r->fail, 1);
}

static void jr_ws(struct jreader *r)
{
	while (r->pos < r->len && (r->s[r->pos] == ' ' || r->s[r->pos] == '\t' ||
				   r->s[r->pos] == '\n' || r->s[r->pos] == '\r'))
		r->pos++;
}

static bool jr_word(struct jreader *r, const char *w)
{
	size_t n = strlen(w);

	if (r->len - r->pos >= n && !memcmp(r->s + r->pos, w, n)) {
		r->pos += n;
		return true;
	}
	return false;
}

static int jr_hex4(struct jreader *r)
{
	int v;

	if (r->len - r->pos < 4)
		jr_fail(r, "truncated \\u escape");
	v = ju_hex(r->s + r->pos, 4);
	if (v < 0)
		jr_fail(r, "invalid \\u escape");
	r->pos += 4;
	return v;
}

static struct capy_tval *jr_string(struct jreader *r, bool as_key, const char **key, size_t *klen)
{
	char enc[4];

	r->tmp.len = 0;
	r->pos++; /* the opening quote */
	for (;;) {
		unsigned char c;

		if (r->pos >= r->len)
			jr_fail(r, "unterminated string");
		c = (unsigned char)r->s[r->pos];
		if (c == '"') {
			r->pos++;
			break;
		}
		if (c < 0x20)
			jr_fail(r, "control character in string");
		if (c == '\\') {
			int32_t cp;

			if (++r->pos >= r->len)
				jr_fail(r, "unterminated string");
			switch (r->s[r->pos++]) {
			case '"': jb_putc(&r->tmp, '"'); continue;
			case '\\': jb_putc(&r->tmp, '\\'); continue;
			case '/': jb_putc(&r->tmp, '/'); continue;
			case 'b': jb_putc(&r->tmp, '\b'); continue;
			case 'f': jb_putc(&r->tmp, '\f'); continue;
			case 'n': jb_putc(&r->tmp, '\n'); continue;
			case 'r': jb_putc(&r->tmp, '\r'); continue;
			case 't': jb_putc(&r->tmp, '\t'); continue;
			case 'u': break;
			default: r->pos--; jr_fail(r, "invalid escape");
			}
			cp = jr_hex4(r);
			if (cp >= 0xd800 && cp < 0xdc00) {
				size_t save = r->pos;

				if (jr_word(r, "\\u")) {
					int lo = jr_hex4(r);

					if (lo >= 0xdc00 && lo < 0xe000)
						cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
					else
						r->pos = save;
				}
			}
			if (cp >= 0xd800 && cp < 0xe000)
				cp = 0xfffd; /* a lone surrogate has no UTF-8 form */
			jb_put(&r->tmp, enc, ju_encode(cp, enc));
		} else if (c < 0x80) {
			jb_putc(&r->tmp, (char)c);
			r->pos++;
		} else {
			utf8proc_int32_t cp;
			utf8proc_ssize_t n = utf8proc_iterate((const utf8proc_uint8_t *)r->s + r->pos,
							      (utf8proc_ssize_t)(r->len - r->pos), &cp);

			if (n <= 0)
				jr_fail(r, "invalid UTF-8 in string");
			jb_put(&r->tmp, r->s + r->pos, (size_t)n);
			r->pos += (size_t)n;
		}
	}
	if (r->tmp.failed)
		jr_fail(r, "out of memory");
	if (as_key) {
		*key = ja_strndup(r->a, r->tmp.p ? r->tmp.p : "", r->tmp.len);
		*klen = r->tmp.len;
		return NULL;
	}
	return jv_str(r->a, r->tmp.p ? r->tmp.p : "", r->tmp.len);
}

static struct capy_tval *jr_number(struct jreader *r)
{
	size_t start = r->pos;
	bool is_float = false;
	char buf[64];
	const char *lex;
	size_t n;

	if (r->s[r->pos] == '-')
		r->pos++;
	if (r->pos < r->len && r->s[r->pos] == '0') {
		r->pos++;
	} else if (r->pos < r->len && r->s[r->pos] >= '1' && r->s[r->pos] <= '9') {
		while (r->pos < r->len && r->s[r->pos] >= '0' && r->s[r->pos] <= '9')
			r->pos++;
	} else {
		if (jr_word(r, "Infinity"))
			return jv_float(r->a, -INFINITY);
		jr_fail(r, "invalid number");
	}
	if (r->pos < r->len && r->s[r->pos] == '.') {
		is_float = true;
		r->pos++;
		if (r->pos >= r->len || r->s[r->pos] < '0' || r->s[r->pos] > '9')
			jr_fail(r, "invalid number");
		while (r->pos < r->len && r->s[r->pos] >= '0' && r->s[r->pos] <= '9')
			r->pos++;
	}
	if (r->pos < r->len && (r->s[r->pos] == 'e' || r->s[r->pos] == 'E')) {
		is_float = true;
		r->pos++;
		if (r->pos < r->len && (r->s[r->pos] == '+' || r->s[r->pos] == '-'))
			r->pos++;
		if (r->pos >= r->len || r->s[r->pos] < '0' || r->s[r->pos] > '9')
			jr_fail(r, "invalid number");
		while (r->pos < r->len && r->s[r->pos] >= '0' && r->s[r->pos] <= '9')
			r->pos++;
	}
	n = r->pos - start;
	lex = ja_strndup(r->a, r->s + start, n);
	if (is_float)
		return jv_float(r->a, strtod(lex, NULL));
	if (n < sizeof(buf)) {
		char *end;
		long long v;

		errno = 0;
		v = strtoll(lex, &end, 10);
		if (!errno && *end == '\0')
			return jv_int(r->a, v);
	}
	{
		struct capy_tval *v = jv_str_own(r->a, lex, n);

		v->kind = JK_BIGINT;
		return v;
	}
}

static struct capy_tval *jr_value(struct jreader *r, int depth)
{
	struct capy_tval *v;

	jr_ws(r);
	if (r->pos >= r->len)
		jr_fail(r, "unexpected end of input");
	if (depth > JSON_MAX_DEPTH)
		jr_fail(r, "nested deeper than %d levels", JSON_MAX_DEPTH);
	switch (r->s[r->pos]) {
	case '{':
		v = jv_new(r->a, JK_DICT);
		r->pos++;
		jr_ws(r);
		if (r->pos < r->len && r->s[r->pos] == '}') {
			r->pos++;
			return v;
		}
		for (;;) {
			const char *key;
			size_t klen;
			struct capy_tval *item;

			jr_ws(r);
			if (r->pos >= r->len || r->s[r->pos] != '"')
				jr_fail(r, "expected a string key");
			jr_string(r, true, &key, &klen);
			jr_ws(r);
			if (r->pos >= r->len || r->s[r->pos] != ':')
				jr_fail(r, "expected ':'");
			r->pos++;
			item = jr_value(r, depth + 1);
			jd_set(r->a, v, key, klen, item);
			jr_ws(r);
			if (r->pos < r->len && r->s[r->pos] == ',') {
				r->pos++;
				continue;
			}
			if (r->pos < r->len && r->s[r->pos] == '}') {
				r->pos++;
				return v;
			}
			jr_fail(r, "expected ',' or '}'");
		}
	case '[':
		v = jv_list(r->a, 0);
		r->pos++;
		jr_ws(r);
		if (r->pos < r->len && r->s[r->pos] == ']') {
			r->pos++;
			return v;
		}
		for (;;) {
			jv_push(r->a, v, jr_value(r, depth + 1));
			jr_ws(r);
			if (r->pos < r->len && r->s[r->pos] == ',') {
				r->pos++;
				continue;
			}
			if (r->pos < r->len && r->s[r->pos] == ']') {
				r->pos++;
				return v;
			}
			jr_fail(r, "expected ',' or ']'");
		}
	case '"':
		return jr_string(r, false, NULL, NULL);
	case 't':
		if (jr_word(r, "true"))
			return &jv_true;
		break;
	case 'f':
		if (jr_word(r, "false"))
			return &jv_false;
		break;
	case 'n':
		if (jr_word(r, "null"))
			return &jv_none;
		break;
	case 'N':
		if (jr_word(r, "NaN"))
			return jv_float(r->a, NAN);
		break;
	case 'I':
		if (jr_word(r, "Infinity"))
			return jv_float(r->a, INFINITY);
		break;
	default:
		if (r->s[r->pos] == '-' || (r->s[r->pos] >= '0' && r->s[r->pos] <= '9'))
			return jr_number(r);
	}
	jr_fail(r, "unexpected character '%c'", r->s[r->pos]);
}

int jv_parse_json(struct jarena *a, const char *text, size_t len, const char *what,
		  struct capy_tval **out, struct capy_err *err)
{
	struct jreader r = { .a = a, .s = text, .len = len, .what = what ? what : "json", .err = err };
	jmp_buf *saved = a->fail;
	volatile int rc = 0;

	a->fail = &r.fail;
	if (setjmp(r.fail)) {
		if (r.parse_error)
			rc = CAPY_EFORMAT;
		else
			rc = capy_err_set(err, CAPY_ENOMEM, "%s: out of memory", r.what);
		goto out;
	}
	*out = jr_value(&r, 0);
	jr_ws(&r);
	if (r.pos != r.len)
		jr_fail(&r, "trailing characters after the value");
out:
	a->fail = saved;
	jb_free(&r.tmp);
	return rc;
}

/* --- writer ----------------------------------------------------------------------------- */

static void jw_str(struct jbuf *b, const char *s, size_t len, bool ascii)
{
	size_t i;

	jb_putc(b, '"');
	for (i = 0; i < len;) {
		unsigned char c = (unsigned char)s[i];
		int32_t cp;
		size_t n;

		switch (c) {
		case '"': jb_puts(b, "\\\""); i++; continue;
		case '\\': jb_puts(b, "\\\\"); i++; continue;
		case '\n': jb_puts(b, "\\n"); i++; continue;
		case '\r': jb_puts(b, "\\r"); i++; continue;
		case '\t': jb_puts(b, "\\t"); i++; continue;
		case '\b': jb_puts(b, "\\b"); i++; continue;
		case '\f': jb_puts(b, "\\f"); i++; continue;
		}
		if (c < 0x20 || (ascii && c == 0x7f)) {
			jb_printf(b, "\\u%04x", c);
			i++;
			continue;
		}
		if (c < 0x80 || !ascii) {
			jb_putc(b, (char)c);
			i++;
			continue;
		}
		n = ju_decode(s, len, i, &cp);
		if (cp >= 0x10000) {
			cp -= 0x10000;
			jb_printf(b, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
		} else {
			jb_printf(b, "\\u%04x", cp);
		}
		i += n;
	}
	jb_putc(b, '"');
}

static void jw_newline(struct jbuf *b, const struct jjson_opts *o, int level)
{
	int i;

	jb_putc(b, '\n');
	for (i = 0; i < o->indent * level; i++)
		jb_putc(b, ' ');
}

static int jw_cmp_entry(const void *x, const void *y)
{
	const struct jentry *a = *(const struct jentry *const *)x, *b = *(const struct jentry *const *)y;
	int c = memcmp(a->key, b->key, CAPY_MIN(a->klen, b->klen));

	return c ? c : (a->klen > b->klen) - (a->klen < b->klen);
}

static int jw_value(struct jbuf *b, const struct capy_tval *v, const struct jjson_opts *o,
		    int level, const struct capy_tval **bad)
{
	char num[32];
	size_t i;

	if (level > JSON_MAX_DEPTH) {
		*bad = v;
		return -1;
	}
	switch (v->kind) {
	case JK_NONE:
		jb_puts(b, "null");
		return 0;
	case JK_BOOL:
		jb_puts(b, v->b ? "true" : "false");
		return 0;
	case JK_INT:
	case JK_BIGINT:
		jv_write(b, v, false);
		return 0;
	case JK_FLOAT:
		if (isnan(v->f))
			jb_puts(b, "NaN");
		else if (isinf(v->f))
			jb_puts(b, v->f < 0 ? "-Infinity" : "Infinity");
		else {
			jv_float_repr(v->f, num);
			jb_puts(b, num);
		}
		return 0;
	case JK_STR:
		jw_str(b, v->str.s, v->str.len, o->ensure_ascii);
		return 0;
	case JK_LIST:
		if (!v->list.n) {
			jb_puts(b, "[]");
			return 0;
		}
		jb_putc(b, '[');
		for (i = 0; i < v->list.n; i++) {
			if (i)
				jb_puts(b, o->item_sep);
			if (o->indent >= 0)
				jw_newline(b, o, level + 1);
			if (jw_value(b, v->list.v[i], o, level + 1, bad))
				return -1;
		}
		if (o->indent >= 0)
			jw_newline(b, o, level);
		jb_putc(b, ']');
		return 0;
	case JK_DICT: {
		const struct jentry **order;

		if (!v->dict.n) {
			jb_puts(b, "{}");
			return 0;
		}
		order = malloc(v->dict.n * sizeof(*order));
		if (!order) {
			b->failed = true;
			return 0;
		}
		for (i = 0; i < v->dict.n; i++)
			order[i] = &v->dict.e[i];
		if (o->sort_keys)
			qsort(order, v->dict.n, sizeof(*order), jw_cmp_entry);
		jb_putc(b, '{');
		for (i = 0; i < v->dict.n; i++) {
			if (i)
				jb_puts(b, o->item_sep);
			if (o->indent >= 0)
				jw_newline(b, o, level + 1);
			jw_str(b, order[i]->key, order[i]->klen, o->ensure_ascii);
			jb_puts(b, o->key_sep);
			if (jw_value(b, order[i]->val, o, level + 1, bad)) {
				free(order);
				return -1;
			}
		}
		free(order);
		if (o->indent >= 0)
			jw_newline(b, o, level);
		jb_putc(b, '}');
		return 0;
	}
	default:
		*bad = v;
		return -1;
	}
}

int jv_to_json(struct jbuf *b, const struct capy_tval *v, const struct jjson_opts *o,
	       const struct capy_tval **bad)
{
	return jw_value(b, v, o, 0, bad);
}
