/* api-error.c - API errors: the struct, the type names by status, each API's error body. */
#include "serve/api-impl.h"

int capy_api_error_set(struct capy_api_error *err, int status, const char *param,
		       const char *fmt, ...)
{
	va_list ap;

	if (!err)
		return status < 500 ? CAPY_EINVAL : CAPY_EIO;
	err->status = status;
	err->type = NULL;
	err->code = NULL;
	snprintf(err->param, sizeof(err->param), "%s", param ? param : "");
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	return status < 500 ? CAPY_EINVAL : CAPY_EIO;
}

/* Anthropic's types are documented per status (errors page); OpenAI's by the SDK's error
 * classes, whose names the types follow. */
const char *api_error_type(enum capy_api api, const struct capy_api_error *e)
{
	int s = e->status;

	if (e->type)
		return e->type;
	if (api == CAPY_API_MESSAGES || api == CAPY_API_COUNT_TOKENS) {
		switch (s) {
		case 401: return "authentication_error";
		case 403: return "permission_error";
		case 404: return "not_found_error";
		case 413: return "request_too_large";
		case 429: return "rate_limit_error";
		case 503:
		case 529: return "overloaded_error";
		default: return s >= 500 ? "api_error" : "invalid_request_error";
		}
	}
	switch (s) {
	case 401: return "authentication_error";
	case 403: return "permission_error";
	case 404: return "not_found_error";
	case 429: return "rate_limit_error";
	default: return s >= 500 ? "server_error" : "invalid_request_error";
	}
}

static void error_openai(const struct capy_api_error *e, const char *type, struct capy_buf *b)
{
	capy_buf_puts(b, "{\"message\":");
	capy_buf_json_str(b, e->msg, strlen(e->msg));
	capy_buf_puts(b, ",\"type\":");
	capy_buf_json_str(b, type, strlen(type));
	capy_buf_puts(b, ",\"param\":");
	if (e->param[0])
		capy_buf_json_str(b, e->param, strlen(e->param));
	else
		capy_buf_puts(b, "null");
	capy_buf_puts(b, ",\"code\":");
	if (e->code)
		capy_buf_json_str(b, e->code, strlen(e->code));
	else
		capy_buf_puts(b, "null");
	capy_buf_putc(b, '}');
}

void api_error_object_openai(const struct capy_api_error *e, struct capy_buf *b)
{
	error_openai(e, api_error_type(CAPY_API_CHAT, e), b);
}

void api_error_object_anthropic(const struct capy_api_error *e, struct capy_buf *b)
{
	const char *type = api_error_type(CAPY_API_MESSAGES, e);

	capy_buf_puts(b, "{\"type\":\"error\",\"error\":{\"type\":");
	capy_buf_json_str(b, type, strlen(type));
	capy_buf_puts(b, ",\"message\":");
	capy_buf_json_str(b, e->msg, strlen(e->msg));
	capy_buf_puts(b, "}}");
}

void capy_api_error_body(enum capy_api api, const struct capy_api_error *err, struct capy_buf *b)
{
	if (api == CAPY_API_MESSAGES || api == CAPY_API_COUNT_TOKENS) {
		api_error_object_anthropic(err, b);
		return;
	}
	capy_buf_puts(b, "{\"error\":");
	api_error_object_openai(err, b);
	capy_buf_putc(b, '}');
}
