/* buf.c - the growable byte buffer of buf.h. */
#include "buf.h"

int capy_buf_reserve(struct capy_buf *b, size_t n)
{
	size_t need, cap;
	char *p;

	if (b->oom)
		return -1;
	if (capy_add_overflow(b->len, n, &need) || capy_add_overflow(need, 1, &need)) {
		b->oom = true;
		return -1;
	}
	if (need <= b->cap)
		return 0;
	cap = b->cap ? b->cap : 64;
	while (cap < need)
		cap = cap > SIZE_MAX / 2 ? need : cap * 2;
	if (!(p = realloc(b->data, cap))) {
		b->oom = true;
		return -1;
	}
	if (!b->data)
		p[0] = 0;
	b->data = p;
	b->cap = cap;
	return 0;
}

void capy_buf_add(struct capy_buf *b, const void *p, size_t n)
{
	if (capy_buf_reserve(b, n) < 0)
		return;
	if (n)
		memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = 0;
}

void capy_buf_puts(struct capy_buf *b, const char *s)
{
	capy_buf_add(b, s, strlen(s));
}

void capy_buf_putc(struct capy_buf *b, char c)
{
	capy_buf_add(b, &c, 1);
}

void capy_buf_printf(struct capy_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0) {
		b->oom = true;
		return;
	}
	if (capy_buf_reserve(b, (size_t)n) < 0)
		return;
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

void capy_buf_json_str(struct capy_buf *b, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	size_t run = 0;

	capy_buf_putc(b, '"');
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		const char *esc = NULL;
		char u[7];
		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		capy_buf_add(b, s + run, i - run);
		run = i + 1;
		switch (c) {
		case '"': esc = "\\\""; break;
		case '\\': esc = "\\\\"; break;
		case '\n': esc = "\\n"; break;
		case '\r': esc = "\\r"; break;
		case '\t': esc = "\\t"; break;
		case '\b': esc = "\\b"; break;
		case '\f': esc = "\\f"; break;
		default:
			memcpy(u, "\\u00", 4);
			u[4] = hex[c >> 4];
			u[5] = hex[c & 15];
			u[6] = 0;
			esc = u;
		}
		capy_buf_puts(b, esc);
	}
	capy_buf_add(b, s + run, n - run);
	capy_buf_putc(b, '"');
}

char *capy_buf_detach(struct capy_buf *b, size_t *len)
{
	char *p = b->data;

	if (len)
		*len = b->len;
	b->data = NULL;
	b->len = b->cap = 0;
	b->oom = false;
	return p;
}

void capy_buf_release(struct capy_buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
	b->oom = false;
}
