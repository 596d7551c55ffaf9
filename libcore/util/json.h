/* json.h - strict accessors over cJSON trees, with errors that name the field.
 *
 * cJSON keeps numbers as doubles; these helpers accept an integer only if it is
 * integral and exactly representable (|v| <= 2^53), so offsets and sizes read
 * back exactly. `what` names the object for messages ("'config.json'").
 */
#ifndef CAPY_UTIL_JSON_H
#define CAPY_UTIL_JSON_H

#include "err.h"

#include <cjson/cJSON.h>

/* Parse text (not necessarily NUL-terminated) into a tree; the error gives line:column. */
int capy_json_parse(const char *text, size_t len, const char *what, cJSON **out, struct capy_err *err);

/* Field access. `required` false: a missing field leaves *out untouched and returns 1. */
int capy_json_get_u64(const cJSON *obj, const char *key, bool required, uint64_t *out,
		      const char *what, struct capy_err *err);
int capy_json_get_i64(const cJSON *obj, const char *key, bool required, int64_t *out,
		      const char *what, struct capy_err *err);
int capy_json_get_double(const cJSON *obj, const char *key, bool required, double *out,
			 const char *what, struct capy_err *err);
int capy_json_get_bool(const cJSON *obj, const char *key, bool required, bool *out,
		       const char *what, struct capy_err *err);
/* The string stays owned by the tree. */
int capy_json_get_string(const cJSON *obj, const char *key, bool required, const char **out,
			 const char *what, struct capy_err *err);

/* A JSON number item as an exact unsigned/signed integer. */
int capy_json_u64(const cJSON *item, uint64_t *out);
int capy_json_i64(const cJSON *item, int64_t *out);

/* Add an exact integer (must be <= 2^53) to an object; NULL on OOM. */
cJSON *capy_json_add_u64(cJSON *obj, const char *key, uint64_t v);

#endif
