/* buf.h - a growable byte buffer for building texts (JSON bodies, SSE events, logs).
 *
 *	struct capy_buf b = { 0 };
 *	capy_buf_puts(&b, "data: ");
 *	capy_buf_printf(&b, "{\"n\":%d}", 3);
 *	if (b.oom)
 *		return CAPY_ENOMEM;		(one check at the end: appends after a failure do nothing)
 *	send(b.data, b.len);
 *	capy_buf_release(&b);
 *
 * data is always NUL-terminated (once anything was appended, or after capy_buf_reserve), so
 * it can be handed to string functions; the text itself may hold NUL bytes (use len).
 * Thread-safety: a buffer belongs to one thread at a time.
 */
#ifndef CAPY_UTIL_BUF_H
#define CAPY_UTIL_BUF_H

#include "../core.h"

struct capy_buf {
	char *data;
	size_t len, cap;
	bool oom; /* an allocation failed: the content is incomplete */
};

/* Make room for n more bytes (and the NUL); -1 (and oom set) on failure. */
int capy_buf_reserve(struct capy_buf *b, size_t n);
void capy_buf_add(struct capy_buf *b, const void *p, size_t n);
void capy_buf_puts(struct capy_buf *b, const char *s);
void capy_buf_putc(struct capy_buf *b, char c);
CAPY_PRINTF(2, 3) void capy_buf_printf(struct capy_buf *b, const char *fmt, ...);
/* s as a JSON string literal (quotes included): ", \ and control characters escaped, other
 * bytes (UTF-8) as they are. */
void capy_buf_json_str(struct capy_buf *b, const char *s, size_t n);
/* Forget the content, keep the memory. */
static inline void capy_buf_reset(struct capy_buf *b)
{
	b->len = 0;
	b->oom = false;
	if (b->data)
		b->data[0] = 0;
}
/* Hand the bytes over (malloc'd, NUL-terminated; NULL if nothing was appended); b is empty. */
char *capy_buf_detach(struct capy_buf *b, size_t *len);
void capy_buf_release(struct capy_buf *b);

#endif
