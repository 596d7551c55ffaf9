/* tok-ids.c - token ids written as text (whitespace-separated numbers), as tools read them. */
#include "tokenizer.h"
#include "../util/parse.h"

#include <ctype.h>

int capy_tokens_parse(const char *text, size_t len, const char *what, struct capy_tokens *out,
		      struct capy_err *err)
{
	size_t i = 0, start_n = out->n;

	while (i < len) {
		char num[24];
		size_t n = 0;
		int64_t v;

		while (i < len && isspace((unsigned char)text[i]))
			i++;
		if (i == len)
			break;
		while (i < len && !isspace((unsigned char)text[i])) {
			if (n == sizeof(num) - 1) {
				out->n = start_n;
				return capy_err_set(err, CAPY_EFORMAT, "%s: token %zu: '%.*s...' is not an id", what,
						    out->n - start_n, (int)n, num);
			}
			num[n++] = text[i++];
		}
		num[n] = 0;
		if (capy_parse_i64(num, 0, INT32_MAX, &v, err) < 0) {
			size_t at = out->n - start_n;
			out->n = start_n;
			return capy_err_prefix(err, "%s: token %zu", what, at);
		}
		if (out->n == out->cap) {
			size_t cap = out->cap ? 2 * out->cap : 256;
			int32_t *p = realloc(out->ids, cap * sizeof(*p));
			if (!p) {
				out->n = start_n;
				return capy_err_set(err, CAPY_ENOMEM, "out of memory reading %s", what);
			}
			out->ids = p;
			out->cap = cap;
		}
		out->ids[out->n++] = (int32_t)v;
	}
	return 0;
}
