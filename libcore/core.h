/* core.h - the first include of every libcore and cmd source file.
 *
 * Standard headers every file needs, a few attributes and helpers, and banned.h.
 * Keep it small: anything specific to one module belongs in that module's header.
 */
#ifndef CAPY_CORE_H
#define CAPY_CORE_H

#define _GNU_SOURCE 1

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CAPY_VERSION "0.1.0"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define CAPY_MIN(a, b) ((a) < (b) ? (a) : (b))
#define CAPY_MAX(a, b) ((a) > (b) ? (a) : (b))
#define CAPY_ALIGN_UP(x, a) ((((x) + (a) - 1) / (a)) * (a))

#define CAPY_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define CAPY_NORETURN __attribute__((noreturn))
#define CAPY_UNUSED __attribute__((unused))
#define CAPY_LIKELY(x) __builtin_expect(!!(x), 1)
#define CAPY_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* An internal invariant is broken: print file:line and abort. Never use it for
 * user input (files, artifacts, HTTP bodies); those get a capy_err. */
#define CAPY_BUG(...) capy_bug_fl(__FILE__, __LINE__, __VA_ARGS__)
CAPY_NORETURN CAPY_PRINTF(3, 4) void capy_bug_fl(const char *file, int line, const char *fmt, ...);

/* Overflow-checked size arithmetic: return true on overflow. */
static inline bool capy_mul_overflow(uint64_t a, uint64_t b, uint64_t *out)
{
	return __builtin_mul_overflow(a, b, out);
}

static inline bool capy_add_overflow(uint64_t a, uint64_t b, uint64_t *out)
{
	return __builtin_add_overflow(a, b, out);
}

#include "banned.h"

#endif
