/* json.c - strict accessors over cJSON trees (see json.h). */
#include "json.h"

#include <math.h>

#define JSON_EXACT_MAX 9007199254740992.0 /* 2^53 */

int capy_json_parse(const char *text, size_t len, const char *what, cJSON **out, struct capy_err *err)
{
	const char *end = NULL;
	cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);

	if (!root) {
		size_t off = end && end >= text ? (size_t)(end - text) : 0;
		int line = 1, col = 1;
		for (size_t i = 0; i < off && i < len; i++) {
			if (text[i] == '\n') {
				line++;
				col = 1;
			} else {
				col++;
			}
		}
		return capy_err_set(err, CAPY_EFORMAT, "%s: invalid JSON at line %d, column %d (byte %zu)",
				    what, line, col, off);
	}
	*out = root;
	return 0;
}

int capy_json_u64(const cJSON *item, uint64_t *out)
{
	double v;

	if (!cJSON_IsNumber(item))
		return -1;
	v = item->valuedouble;
	if (!(v >= 0) || v > JSON_EXACT_MAX || floor(v) != v)
		return -1;
	*out = (uint64_t)v;
	return 0;
}

int capy_json_i64(const cJSON *item, int64_t *out)
{
	double v;

	if (!cJSON_IsNumber(item))
		return -1;
	v = item->valuedouble;
	if (!(fabs(v) <= JSON_EXACT_MAX) || floor(v) != v)
		return -1;
	*out = (int64_t)v;
	return 0;
}

static const cJSON *field(const cJSON *obj, const char *key, bool required, const char *what,
			  struct capy_err *err, int *rc)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);

	*rc = 0;
	if (!it || cJSON_IsNull(it)) {
		*rc = required ? capy_err_set(err, CAPY_EFORMAT, "%s: missing field '%s'", what, key) : 1;
		return NULL;
	}
	return it;
}

int capy_json_get_u64(const cJSON *obj, const char *key, bool required, uint64_t *out,
		      const char *what, struct capy_err *err)
{
	int rc;
	const cJSON *it = field(obj, key, required, what, err, &rc);

	if (!it)
		return rc;
	if (capy_json_u64(it, out) < 0)
		return capy_err_set(err, CAPY_EFORMAT, "%s: field '%s' is not a non-negative integer",
				    what, key);
	return 0;
}

int capy_json_get_i64(const cJSON *obj, const char *key, bool required, int64_t *out,
		      const char *what, struct capy_err *err)
{
	int rc;
	const cJSON *it = field(obj, key, required, what, err, &rc);

	if (!it)
		return rc;
	if (capy_json_i64(it, out) < 0)
		return capy_err_set(err, CAPY_EFORMAT, "%s: field '%s' is not an integer", what, key);
	return 0;
}

int capy_json_get_double(const cJSON *obj, const char *key, bool required, double *out,
			 const char *what, struct capy_err *err)
{
	int rc;
	const cJSON *it = field(obj, key, required, what, err, &rc);

	if (!it)
		return rc;
	if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble))
		return capy_err_set(err, CAPY_EFORMAT, "%s: field '%s' is not a number", what, key);
	*out = it->valuedouble;
	return 0;
}

int capy_json_get_bool(const cJSON *obj, const char *key, bool required, bool *out,
		       const char *what, struct capy_err *err)
{
	int rc;
	const cJSON *it = field(obj, key, required, what, err, &rc);

	if (!it)
		return rc;
	if (!cJSON_IsBool(it))
		return capy_err_set(err, CAPY_EFORMAT, "%s: field '%s' is not true or false", what, key);
	*out = cJSON_IsTrue(it);
	return 0;
}

int capy_json_get_string(const cJSON *obj, const char *key, bool required, const char **out,
			 const char *what, struct capy_err *err)
{
	int rc;
	const cJSON *it = field(obj, key, required, what, err, &rc);

	if (!it)
		return rc;
	if (!cJSON_IsString(it))
		return capy_err_set(err, CAPY_EFORMAT, "%s: field '%s' is not a string", what, key);
	*out = it->valuestring;
	return 0;
}

cJSON *capy_json_add_u64(cJSON *obj, const char *key, uint64_t v)
{
	if ((double)v > JSON_EXACT_MAX)
		CAPY_BUG("integer %" PRIu64 " does not fit a JSON number exactly", v);
	return cJSON_AddNumberToObject(obj, key, (double)v);
}
