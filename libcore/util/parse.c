/* parse.c - strict number parsing (see parse.h). */
#include "parse.h"

#include <math.h>

int capy_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out, struct capy_err *err)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (!*s || *end || end == s)
		return capy_err_set(err, CAPY_EINVAL, "'%s' is not an integer", s);
	if (errno == ERANGE || v < min || v > max)
		return capy_err_set(err, CAPY_EINVAL, "'%s' is out of range [%" PRId64 ", %" PRId64 "]",
				    s, min, max);
	*out = v;
	return 0;
}

int capy_parse_u64(const char *s, uint64_t max, uint64_t *out, struct capy_err *err)
{
	char *end;
	unsigned long long v;

	errno = 0;
	if (*s == '-' || !*s)
		return capy_err_set(err, CAPY_EINVAL, "'%s' is not a non-negative integer", s);
	v = strtoull(s, &end, 10);
	if (*end || end == s)
		return capy_err_set(err, CAPY_EINVAL, "'%s' is not a non-negative integer", s);
	if (errno == ERANGE || v > max)
		return capy_err_set(err, CAPY_EINVAL, "'%s' is out of range [0, %" PRIu64 "]", s, max);
	*out = v;
	return 0;
}

int capy_parse_double(const char *s, double min, double max, double *out, struct capy_err *err)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (!*s || *end || end == s || isnan(v))
		return capy_err_set(err, CAPY_EINVAL, "'%s' is not a number", s);
	if (errno == ERANGE || v < min || v > max)
		return capy_err_set(err, CAPY_EINVAL, "'%s' is out of range [%g, %g]", s, min, max);
	*out = v;
	return 0;
}

int capy_parse_size(const char *s, uint64_t *out, struct capy_err *err)
{
	char *end;
	unsigned long long v;
	unsigned shift = 0;

	errno = 0;
	if (*s == '-' || !*s)
		return capy_err_set(err, CAPY_EINVAL, "'%s' is not a size", s);
	v = strtoull(s, &end, 10);
	if (end == s || errno == ERANGE)
		return capy_err_set(err, CAPY_EINVAL, "'%s' is not a size", s);
	switch (*end) {
	case '\0': break;
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	case 't': case 'T': shift = 40; end++; break;
	default: return capy_err_set(err, CAPY_EINVAL, "'%s' is not a size", s);
	}
	if (*end == 'i' || *end == 'B')
		end += *end == 'i' ? 1 : 0;
	if (*end == 'B')
		end++;
	if (*end)
		return capy_err_set(err, CAPY_EINVAL, "'%s' is not a size", s);
	if (shift && v > (UINT64_MAX >> shift))
		return capy_err_set(err, CAPY_EINVAL, "'%s' is too large", s);
	*out = (uint64_t)v << shift;
	return 0;
}
