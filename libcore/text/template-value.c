/* template-value.c - the template engine's arena, buffers and values (str/repr as Python). */
#include "text/jinja-impl.h"
#include "util/hash.h"

#include <math.h>
#include <utf8proc.h>

/* --- arena ------------------------------------------------------------------------------ */

struct jchunk {
	struct jchunk *next;
	size_t size;
	max_align_t data[];
};

#define JA_CHUNK (64 * 1024)

void ja_init(struct jarena *a, size_t limit)
{
	memset(a, 0, sizeof(*a));
	a->limit = limit;
}

void ja_release(struct jarena *a)
{
	struct jchunk *c = a->chunks, *next;

	for (; c; c = next) {
		next = c->next;
		free(c);
	}
	a->chunks = NULL;
	a->cur = NULL;
	a->left = a->total = 0;
}

static void *ja_fail(struct jarena *a, bool limit)
{
	a->over_limit = limit;
	if (a->fail)
		longjmp(*a->fail, 1);
	return NULL;
}

void *ja_alloc(struct jarena *a, size_t n)
{
	void *p;

	n = CAPY_ALIGN_UP(n ? n : 1, 16);
	if (n > a->left) {
		/* Big requests get a chunk of their own so the current one keeps its space. */
		size_t size = n > JA_CHUNK / 4 ? n : JA_CHUNK;
		struct jchunk *c;

		if (size > SIZE_MAX / 2 || (a->limit && a->total + size > a->limit))
			return ja_fail(a, true);
		c = malloc(sizeof(*c) + size);
		if (!c)
			return ja_fail(a, false);
		c->size = size;
		a->total += size;
		if (size == n && a->chunks) {
			c->next = a->chunks->next;
			a->chunks->next = c;
			memset(c->data, 0, n);
			return c->data;
		}
		c->next = a->chunks;
		a->chunks = c;
		a->cur = (char *)c->data;
		a->left = size;
	}
	p = a->cur;
	a->cur += n;
	a->left -= n;
	memset(p, 0, n);
	return p;
}

char *ja_strndup(struct jarena *a, const char *s, size_t n)
{
	char *p = ja_alloc(a, n + 1);

	if (p) {
		if (n)
			memcpy(p, s, n);
		p[n] = '\0';
	}
	return p;
}

/* --- buffers ---------------------------------------------------------------------------- */

void jb_put(struct jbuf *b, const void *s, size_t n)
{
	if (b->failed || !n)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		char *p;

		while (cap < b->len + n + 1) {
			if (cap > SIZE_MAX / 4) {
				b->failed = true;
				return;
			}
			cap *= 2;
		}
		if (b->limit && b->len + n > b->limit) {
			b->failed = true;
			return;
		}
		p = realloc(b->p, cap);
		if (!p) {
			b->failed = true;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	if (b->limit && b->len + n > b->limit) {
		b->failed = true;
		return;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

void jb_putc(struct jbuf *b, char c)
{
	jb_put(b, &c, 1);
}

void jb_puts(struct jbuf *b, const char *s)
{
	jb_put(b, s, strlen(s));
}

void jb_printf(struct jbuf *b, const char *fmt, ...)
{
	char tmp[256];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n > 0)
		jb_put(b, tmp, CAPY_MIN((size_t)n, sizeof(tmp) - 1));
}

void jb_free(struct jbuf *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

/* --- UTF-8 ------------------------------------------------------------------------------ */

size_t ju_decode(const char *s, size_t len, size_t i, int32_t *cp)
{
	utf8proc_int32_t c;
	utf8proc_ssize_t n = utf8proc_iterate((const utf8proc_uint8_t *)s + i,
					      (utf8proc_ssize_t)(len - i), &c);

	if (n <= 0) {
		/* Invalid bytes: one at a time, as U+FFFD. Inputs are validated, so only
		 * slicing inside a character could get here. */
		*cp = 0xfffd;
		return 1;
	}
	*cp = c;
	return (size_t)n;
}

size_t ju_encode(int32_t cp, char out[4])
{
	utf8proc_ssize_t n = utf8proc_encode_char(cp, (utf8proc_uint8_t *)out);

	return n > 0 ? (size_t)n : 0;
}

size_t ju_count(const char *s, size_t len)
{
	size_t n = 0, i;

	for (i = 0; i < len; i++)
		n += ((unsigned char)s[i] & 0xc0) != 0x80;
	return n;
}

int32_t ju_hex(const char *s, size_t n)
{
	uint32_t v = 0;
	size_t i;

	for (i = 0; i < n; i++) {
		char c = s[i];

		if (v > (UINT32_MAX >> 4))
			return -1;
		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= (uint32_t)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v |= (uint32_t)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v |= (uint32_t)(c - 'A' + 10);
		else
			return -1;
	}
	/* "\Uffffffff" is no code point; callers treat -1 as invalid */
	return v > INT32_MAX ? -1 : (int32_t)v;
}

bool ju_valid(const char *s, size_t len)
{
	size_t i = 0;

	while (i < len) {
		utf8proc_int32_t c;
		utf8proc_ssize_t n = utf8proc_iterate((const utf8proc_uint8_t *)s + i,
						      (utf8proc_ssize_t)(len - i), &c);

		if (n <= 0)
			return false;
		i += (size_t)n;
	}
	return true;
}

bool ju_isspace(int32_t c)
{
	return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
	       c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
	       c == 0x202f || c == 0x205f || c == 0x3000;
}

/* --- values ----------------------------------------------------------------------------- */

struct capy_tval jv_undef = { .kind = JK_UNDEF };
struct capy_tval jv_none = { .kind = JK_NONE };
struct capy_tval jv_true = { .kind = JK_BOOL, .b = true };
struct capy_tval jv_false = { .kind = JK_BOOL, .b = false };

struct capy_tval *jv_bool(bool b)
{
	return b ? &jv_true : &jv_false;
}

struct capy_tval *jv_new(struct jarena *a, int kind)
{
	struct capy_tval *v = ja_alloc(a, sizeof(*v));

	if (v)
		v->kind = (uint8_t)kind;
	return v;
}

struct capy_tval *jv_int(struct jarena *a, int64_t i)
{
	struct capy_tval *v = jv_new(a, JK_INT);

	if (v)
		v->i = i;
	return v;
}

struct capy_tval *jv_float(struct jarena *a, double f)
{
	struct capy_tval *v = jv_new(a, JK_FLOAT);

	if (v)
		v->f = f;
	return v;
}

struct capy_tval *jv_str_own(struct jarena *a, const char *s, size_t len)
{
	struct capy_tval *v = jv_new(a, JK_STR);

	if (v) {
		v->str.s = s;
		v->str.len = len;
	}
	return v;
}

struct capy_tval *jv_str(struct jarena *a, const char *s, size_t len)
{
	char *p = ja_strndup(a, s, len);

	return p ? jv_str_own(a, p, len) : NULL;
}

struct capy_tval *jv_list(struct jarena *a, size_t cap)
{
	struct capy_tval *v = jv_new(a, JK_LIST);

	if (v && cap) {
		v->list.v = ja_alloc(a, cap * sizeof(*v->list.v));
		if (!v->list.v)
			return NULL;
		v->list.cap = cap;
	}
	return v;
}

static bool jv_grow(struct jarena *a, void **p, size_t *cap, size_t need, size_t size)
{
	size_t ncap = *cap ? *cap * 2 : 4;
	void *np;

	if (need <= *cap)
		return true;
	while (ncap < need)
		ncap *= 2;
	if (ncap > SIZE_MAX / size)
		return false;
	np = ja_alloc(a, ncap * size);
	if (!np)
		return false;
	if (*cap)
		memcpy(np, *p, *cap * size);
	*p = np;
	*cap = ncap;
	return true;
}

void jv_push(struct jarena *a, struct capy_tval *list, struct capy_tval *v)
{
	void *p = list->list.v;

	if (!jv_grow(a, &p, &list->list.cap, list->list.n + 1, sizeof(*list->list.v)))
		return;
	list->list.v = p;
	list->list.v[list->list.n++] = v;
}

/* Dicts stay a plain array while small; past 8 keys an open-addressing index over the array
 * keeps lookups O(1), so a request with thousands of keys cannot make rendering quadratic. */
static uint32_t jd_slot(const struct jdict *d, const char *key, size_t klen, bool *found)
{
	uint32_t mask = d->index_cap - 1;
	uint32_t h = (uint32_t)capy_xxh3(key, klen) & mask;

	for (;; h = (h + 1) & mask) {
		uint32_t e = d->index[h];

		if (!e) {
			*found = false;
			return h;
		}
		if (d->e[e - 1].klen == klen && !memcmp(d->e[e - 1].key, key, klen)) {
			*found = true;
			return h;
		}
	}
}

static bool jd_reindex(struct jarena *a, struct jdict *d)
{
	uint32_t cap = 32, i;
	bool found;

	while (cap < d->n * 2 + 2)
		cap *= 2;
	d->index = ja_alloc(a, cap * sizeof(*d->index));
	if (!d->index)
		return false;
	d->index_cap = cap;
	for (i = 0; i < d->n; i++)
		d->index[jd_slot(d, d->e[i].key, d->e[i].klen, &found)] = i + 1;
	return true;
}

static struct jentry *jd_find(const struct jdict *d, const char *key, size_t klen)
{
	uint32_t i;
	bool found;

	if (d->index) {
		i = jd_slot(d, key, klen, &found);
		return found ? &d->e[d->index[i] - 1] : NULL;
	}
	for (i = 0; i < d->n; i++)
		if (d->e[i].klen == klen && !memcmp(d->e[i].key, key, klen))
			return &d->e[i];
	return NULL;
}

struct capy_tval *jd_get(const struct capy_tval *d, const char *key, size_t klen)
{
	struct jentry *e;

	if (!d || (d->kind != JK_DICT && d->kind != JK_NS))
		return NULL;
	e = jd_find(&d->dict, key, klen);
	return e ? e->val : NULL;
}

void jd_set(struct jarena *a, struct capy_tval *dv, const char *key, size_t klen,
	    struct capy_tval *v)
{
	jd_set_key(a, dv, key, klen, v, true);
}

void jd_set_key(struct jarena *a, struct capy_tval *dv, const char *key, size_t klen,
		struct capy_tval *v, bool copy_key)
{
	struct jdict *d = &dv->dict;
	struct jentry *e = jd_find(d, key, klen);
	size_t cap = d->cap;
	void *p = d->e;
	char *k;

	if (e) {
		e->val = v;
		return;
	}
	if (d->n >= UINT32_MAX / 4 || !jv_grow(a, &p, &cap, d->n + 1, sizeof(*d->e)))
		return;
	k = copy_key ? ja_strndup(a, key, klen) : (char *)key;
	if (!k)
		return;
	d->e = p;
	d->cap = (uint32_t)cap;
	d->e[d->n].key = k;
	d->e[d->n].klen = klen;
	d->e[d->n].val = v;
	d->n++;
	if (d->n > 8 && (!d->index || d->n * 2 > d->index_cap)) {
		jd_reindex(a, d);
	} else if (d->index) {
		bool found;

		d->index[jd_slot(d, k, klen, &found)] = d->n;
	}
}

/* --- printing --------------------------------------------------------------------------- */

/* Python repr of a float: the shortest digits that read back to the same double, in fixed
 * notation when the decimal exponent is in [-4, 16), else as d.ddde+XX. */
void jv_float_repr(double f, char buf[32])
{
	char tmp[40], digits[24];
	int prec, exp10, decpt, n = 0, i, o = 0;
	const char *p;

	if (isnan(f)) {
		snprintf(buf, 32, "nan");
		return;
	}
	if (isinf(f)) {
		snprintf(buf, 32, f < 0 ? "-inf" : "inf");
		return;
	}
	if (f == 0) {
		snprintf(buf, 32, signbit(f) ? "-0.0" : "0.0");
		return;
	}
	for (prec = 1; prec <= 17; prec++) {
		snprintf(tmp, sizeof(tmp), "%.*e", prec - 1, f);
		if (strtod(tmp, NULL) == f)
			break;
	}
	p = tmp;
	if (*p == '-')
		buf[o++] = *p++;
	for (; *p && *p != 'e'; p++)
		if (*p != '.')
			digits[n++] = *p;
	while (n > 1 && digits[n - 1] == '0')
		n--;
	digits[n] = '\0';
	exp10 = (int)strtol(p + 1, NULL, 10);
	decpt = exp10 + 1;
	if (decpt > 16 || decpt <= -4) {
		buf[o++] = digits[0];
		if (n > 1) {
			buf[o++] = '.';
			for (i = 1; i < n; i++)
				buf[o++] = digits[i];
		}
		snprintf(buf + o, 32 - (size_t)o, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
		return;
	}
	if (decpt <= 0) {
		buf[o++] = '0';
		buf[o++] = '.';
		for (i = 0; i < -decpt; i++)
			buf[o++] = '0';
		for (i = 0; i < n; i++)
			buf[o++] = digits[i];
	} else if (decpt >= n) {
		for (i = 0; i < n; i++)
			buf[o++] = digits[i];
		for (i = n; i < decpt; i++)
			buf[o++] = '0';
		buf[o++] = '.';
		buf[o++] = '0';
	} else {
		for (i = 0; i < n; i++) {
			if (i == decpt)
				buf[o++] = '.';
			buf[o++] = digits[i];
		}
	}
	buf[o] = '\0';
}

static bool ju_printable(int32_t c)
{
	if (c == ' ')
		return true;
	switch (utf8proc_category(c)) {
	case UTF8PROC_CATEGORY_CC:
	case UTF8PROC_CATEGORY_CF:
	case UTF8PROC_CATEGORY_CS:
	case UTF8PROC_CATEGORY_CO:
	case UTF8PROC_CATEGORY_CN:
	case UTF8PROC_CATEGORY_ZL:
	case UTF8PROC_CATEGORY_ZP:
	case UTF8PROC_CATEGORY_ZS:
		return false;
	default:
		return true;
	}
}

static void jv_write_str_repr(struct jbuf *b, const char *s, size_t len)
{
	char q = '\'';
	size_t i;

	if (memchr(s, '\'', len) && !memchr(s, '"', len))
		q = '"';
	jb_putc(b, q);
	for (i = 0; i < len;) {
		int32_t c;
		size_t n = ju_decode(s, len, i, &c);

		if (c == q || c == '\\') {
			jb_putc(b, '\\');
			jb_putc(b, (char)c);
		} else if (c == '\n') {
			jb_puts(b, "\\n");
		} else if (c == '\r') {
			jb_puts(b, "\\r");
		} else if (c == '\t') {
			jb_puts(b, "\\t");
		} else if (c < 0x80 ? (c < 0x20 || c == 0x7f) : !ju_printable(c)) {
			if (c <= 0xff)
				jb_printf(b, "\\x%02x", c);
			else if (c <= 0xffff)
				jb_printf(b, "\\u%04x", c);
			else
				jb_printf(b, "\\U%08x", c);
		} else {
			jb_put(b, s + i, n);
		}
		i += n;
	}
	jb_putc(b, q);
}

void jv_write(struct jbuf *b, const struct capy_tval *v, bool repr)
{
	char num[32];
	size_t i;

	switch (v->kind) {
	case JK_UNDEF:
		if (repr)
			jb_puts(b, "Undefined");
		break;
	case JK_NONE:
		jb_puts(b, "None");
		break;
	case JK_BOOL:
		jb_puts(b, v->b ? "True" : "False");
		break;
	case JK_INT:
		jb_printf(b, "%" PRId64, v->i);
		break;
	case JK_BIGINT:
		jb_put(b, v->str.s, v->str.len);
		break;
	case JK_FLOAT:
		jv_float_repr(v->f, num);
		jb_puts(b, num);
		break;
	case JK_STR:
		if (repr)
			jv_write_str_repr(b, v->str.s, v->str.len);
		else
			jb_put(b, v->str.s, v->str.len);
		break;
	case JK_LIST:
		jb_putc(b, v->tuple ? '(' : '[');
		for (i = 0; i < v->list.n; i++) {
			if (i)
				jb_puts(b, ", ");
			jv_write(b, v->list.v[i], true);
		}
		if (v->tuple && v->list.n == 1)
			jb_putc(b, ',');
		jb_putc(b, v->tuple ? ')' : ']');
		break;
	case JK_NS:
		jb_puts(b, "<Namespace ");
		/* fall through */
	case JK_DICT:
		jb_putc(b, '{');
		for (i = 0; i < v->dict.n; i++) {
			if (i)
				jb_puts(b, ", ");
			jv_write_str_repr(b, v->dict.e[i].key, v->dict.e[i].klen);
			jb_puts(b, ": ");
			jv_write(b, v->dict.e[i].val, true);
		}
		jb_putc(b, '}');
		if (v->kind == JK_NS)
			jb_putc(b, '>');
		break;
	case JK_MACRO:
		jb_printf(b, "<Macro '%s'>", v->macro->name);
		break;
	case JK_FUNC:
		jb_printf(b, "<function %s>", jinja_global_name(v->func));
		break;
	case JK_LOOP:
		jb_printf(b, "<LoopContext %zu/%zu>", v->loop.index + 1, v->loop.items->list.n);
		break;
	}
}

bool jv_truthy(const struct capy_tval *v)
{
	switch (v->kind) {
	case JK_UNDEF:
	case JK_NONE:
		return false;
	case JK_BOOL:
		return v->b;
	case JK_INT:
		return v->i != 0;
	case JK_BIGINT:
		return true; /* never zero: zero fits an int64 */
	case JK_FLOAT:
		return v->f != 0;
	case JK_STR:
		return v->str.len != 0;
	case JK_LIST:
		return v->list.n != 0;
	case JK_DICT:
		return v->dict.n != 0;
	default:
		return true;
	}
}

double jv_num(const struct capy_tval *v)
{
	switch (v->kind) {
	case JK_BOOL:
		return v->b;
	case JK_INT:
		return (double)v->i;
	case JK_BIGINT:
		return strtod(v->str.s, NULL);
	case JK_FLOAT:
		return v->f;
	default:
		return 0;
	}
}

const char *jv_type_name(const struct capy_tval *v)
{
	static const char *names[] = {
		"undefined", "NoneType", "bool", "int", "int", "float", "str",
		"list", "dict", "Namespace", "Macro", "function", "LoopContext",
	};

	if (v->kind == JK_LIST && v->tuple)
		return "tuple";
	return names[v->kind];
}
