/* parse.h - strict number parsing (atoi and atof are banned).
 *
 * The whole string must be a number; leading/trailing junk, overflow, an empty
 * string or a value outside [min, max] fail with a message naming the text.
 */
#ifndef CAPY_UTIL_PARSE_H
#define CAPY_UTIL_PARSE_H

#include "err.h"

int capy_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out, struct capy_err *err);
int capy_parse_u64(const char *s, uint64_t max, uint64_t *out, struct capy_err *err);
int capy_parse_double(const char *s, double min, double max, double *out, struct capy_err *err);

/* Parse a size with an optional binary suffix: "64", "16K", "8M", "2G", "1T" (powers of 1024). */
int capy_parse_size(const char *s, uint64_t *out, struct capy_err *err);

#endif
