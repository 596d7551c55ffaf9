/* api-models.c - the small bodies: GET /v1/models and POST /v1/messages/count_tokens. */
#include "serve/api-impl.h"

#include <time.h>

void capy_api_models_body(const char *model_id, int64_t created, int64_t max_context,
			  struct capy_buf *b)
{
	time_t t = (time_t)created;
	struct tm tm;
	char when[32] = "1970-01-01T00:00:00Z";
	size_t n = strlen(model_id);

	if (gmtime_r(&t, &tm))
		strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
	capy_buf_puts(b, "{\"object\":\"list\",\"data\":[{\"id\":");
	capy_buf_json_str(b, model_id, n);
	capy_buf_printf(b, ",\"object\":\"model\",\"created\":%" PRId64 ",\"owned_by\":\"capy\"", created);
	if (max_context > 0)
		capy_buf_printf(b, ",\"max_model_len\":%" PRId64, max_context);
	capy_buf_puts(b, ",\"type\":\"model\",\"display_name\":");
	capy_buf_json_str(b, model_id, n);
	capy_buf_printf(b, ",\"created_at\":\"%s\"}],\"has_more\":false,\"first_id\":", when);
	capy_buf_json_str(b, model_id, n);
	capy_buf_puts(b, ",\"last_id\":");
	capy_buf_json_str(b, model_id, n);
	capy_buf_putc(b, '}');
}

void capy_api_count_tokens_body(int64_t input_tokens, struct capy_buf *b)
{
	capy_buf_printf(b, "{\"input_tokens\":%" PRId64 "}", input_tokens);
}
