/* api-prompt.c - continue_final_message: the rendered prompt cut after the last message. */
#include "serve/api-impl.h"

/* Python's str.strip() for the whitespace chat text holds (ASCII and the Unicode spaces a
 * template would not add are left alone: an approximation). */
static bool ws(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* The last occurrence of needle in hay, or NULL (memrchr for strings). */
static const char *find_last(const char *hay, size_t n, const char *needle, size_t m)
{
	size_t i;

	if (m > n)
		return NULL;
	for (i = n - m + 1; i-- > 0;)
		if (!memcmp(hay + i, needle, m))
			return hay + i;
	return NULL;
}

/* transformers' apply_chat_template(continue_final_message=True): find the last occurrence
 * of the final message's stripped text; keep what follows it only as far as the text
 * itself went (its trailing whitespace survives only where the template kept it). */
int capy_api_continue_final(const struct capy_api_request *req, char *prompt, size_t *len,
			    struct capy_api_error *err)
{
	const struct capy_tval *last = capy_tval_at(req->messages, capy_tval_len(req->messages) - 1);
	size_t n, a = 0, b, cut;
	const char *text = capy_tval_strv(capy_tval_get(last, "content"), &n), *at;

	if (!text)
		return capy_api_error_set(err, 400, "messages",
					  "the final message has no text to continue");
	b = n;
	while (a < n && ws(text[a]))
		a++;
	while (b > a && ws(text[b - 1]))
		b--;
	if (a == b)
		return 0; /* "" is found at the very end: nothing is cut */
	at = find_last(prompt, *len, text + a, b - a);
	if (!at)
		return capy_api_error_set(err, 400, "messages",
					  "the final message does not appear in the rendered prompt, so it cannot be continued");
	cut = (size_t)(at - prompt);
	if (*len - cut >= n - a && !memcmp(at, text, n - a) && !a)
		cut += n; /* the template kept the text as it was */
	else
		cut += b - a;
	prompt[cut] = '\0';
	*len = cut;
	return 0;
}
