/* err.c - errors with context (see err.h). */
#include "err.h"

static void vset(struct capy_err *err, int code, const char *fmt, va_list ap)
{
	err->code = code;
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
}

int capy_err_set(struct capy_err *err, int code, const char *fmt, ...)
{
	va_list ap;

	if (!err)
		return code;
	va_start(ap, fmt);
	vset(err, code, fmt, ap);
	va_end(ap);
	return code;
}

void capy_err_one_line(char *out, size_t cap, const char *s)
{
	size_t n = 0;

	for (; *s && n + 5 < cap; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch >= 0x20)
			out[n++] = (char)ch;
		else
			n += (size_t)snprintf(out + n, cap - n, ch == '\n' ? "\\n" : ch == '\t' ? "\\t" : "\\x%02x", ch);
	}
	if (cap)
		out[n] = 0;
}

int capy_err_errno(struct capy_err *err, int errnum, const char *fmt, ...)
{
	int code = CAPY_EIO;
	va_list ap;
	size_t len;

	if (errnum == ENOSPC || errnum == EFBIG || errnum == EDQUOT)
		code = CAPY_ENOSPC;
	else if (errnum == ENOMEM)
		code = CAPY_ENOMEM;
	if (!err)
		return code;
	va_start(ap, fmt);
	vset(err, code, fmt, ap);
	va_end(ap);
	len = strlen(err->msg);
	snprintf(err->msg + len, sizeof(err->msg) - len, ": %s", strerror(errnum));
	return code;
}

int capy_err_prefix(struct capy_err *err, const char *fmt, ...)
{
	char prefix[CAPY_ERR_MSG_MAX], old[CAPY_ERR_MSG_MAX];
	va_list ap;

	if (!err)
		return CAPY_EINVAL;
	va_start(ap, fmt);
	vsnprintf(prefix, sizeof(prefix), fmt, ap);
	va_end(ap);
	memcpy(old, err->msg, sizeof(old));
	/* Truncation keeps the start of the message, which names the subject. */
	size_t n = strnlen(prefix, sizeof(err->msg) - 3);
	memcpy(err->msg, prefix, n);
	memcpy(err->msg + n, ": ", 2);
	size_t room = sizeof(err->msg) - n - 3;
	size_t m = strnlen(old, room);
	memcpy(err->msg + n + 2, old, m);
	err->msg[n + 2 + m] = '\0';
	return err->code;
}

const char *capy_err_name(int code)
{
	switch (code) {
	case CAPY_OK: return "ok";
	case CAPY_EIO: return "io error";
	case CAPY_EFORMAT: return "format error";
	case CAPY_EINVAL: return "invalid argument";
	case CAPY_ENOMEM: return "out of memory";
	case CAPY_ENOSPC: return "no space";
	case CAPY_ECANCELED: return "canceled";
	case CAPY_EUNSUPPORTED: return "unsupported";
	case CAPY_ECHECKSUM: return "checksum mismatch";
	case CAPY_EBUSY: return "busy";
	}
	return "unknown error";
}

void capy_bug_fl(const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "BUG: %s:%d: ", file, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	abort();
}
