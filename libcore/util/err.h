/* err.h - errors with context, filled by the library and reported by the tools.
 *
 * libcore never prints and never exits. A function that can fail returns 0 on
 * success or a negative CAPY_E* code, and fills a caller-owned struct capy_err
 * whose message is complete enough to print as-is:
 *
 *	struct capy_err err = {0};
 *	if (capy_artifact_open(&a, path, &err) < 0)
 *		die("%s", err.msg);
 *
 * Messages follow git's style: lower-case, no full stop, the error first, the
 * subject quoted. Context is added on the way up with capy_err_prefix():
 *	"'m.capy': tensor 'layers.3.mlp.gate.weight': shape [8, 64], expected [8, 32]"
 *
 * Every function accepts err == NULL and then only returns the code.
 * Thread-safety: a struct capy_err belongs to one thread at a time.
 */
#ifndef CAPY_UTIL_ERR_H
#define CAPY_UTIL_ERR_H

#include "../core.h"

enum capy_err_code {
	CAPY_OK = 0,
	CAPY_EIO = -1,       /* a system call failed (open, read, write, mmap, ...) */
	CAPY_EFORMAT = -2,   /* an input file or request is malformed or inconsistent */
	CAPY_EINVAL = -3,    /* an argument or option value is invalid (caller's mistake) */
	CAPY_ENOMEM = -4,    /* an allocation failed */
	CAPY_ENOSPC = -5,    /* the disk is full or a file size limit was hit */
	CAPY_ECANCELED = -6, /* the work was interrupted on request */
	CAPY_EUNSUPPORTED = -7, /* valid input that this build cannot handle */
	CAPY_ECHECKSUM = -8, /* stored data does not match its checksum */
	CAPY_EBUSY = -9,     /* a queue or capacity limit is full: try again later */
};

#define CAPY_ERR_MSG_MAX 1024

struct capy_err {
	int code;
	char msg[CAPY_ERR_MSG_MAX];
};

/* Set the error; returns code so that `return capy_err_set(...)` works. */
CAPY_PRINTF(3, 4) int capy_err_set(struct capy_err *err, int code, const char *fmt, ...);

/* Set a system-call error: the message gets ": <strerror(errnum)>" appended and
 * the code is CAPY_ENOSPC for ENOSPC/EFBIG/EDQUOT, CAPY_ENOMEM for ENOMEM, else CAPY_EIO. */
CAPY_PRINTF(3, 4) int capy_err_errno(struct capy_err *err, int errnum, const char *fmt, ...);

/* Prepend "<context>: " to the current message; returns the current code. */
CAPY_PRINTF(2, 3) int capy_err_prefix(struct capy_err *err, const char *fmt, ...);

/* s as a message shows it, into out[cap]: its control characters written as \n, \t or \xHH, so
 * that a message quoting text from a request or a file stays one line; cut to fit. */
void capy_err_one_line(char *out, size_t cap, const char *s);

/* The name of a code ("io error", "format error", ...). */
const char *capy_err_name(int code);

static inline void capy_err_clear(struct capy_err *err)
{
	if (err) {
		err->code = 0;
		err->msg[0] = '\0';
	}
}

#endif
