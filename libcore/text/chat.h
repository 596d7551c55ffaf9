/* chat.h - render a chat prompt from messages the way transformers' apply_chat_template does.
 *
 * The template sees the variables transformers passes: messages, tools (None when absent),
 * documents (None), add_generation_prompt, the tokenizer's special tokens (bos_token,
 * eos_token, pad_token, unk_token, sep_token, cls_token, mask_token and
 * additional_special_tokens, each only when set in tokenizer_config.json), then the extra
 * request kwargs (enable_thinking, preserve_thinking, ...), which override the special tokens.
 *
 * Tool-call arguments: clients send an assistant message's tool_calls[].function.arguments as
 * a JSON string; vLLM parses it into a dict before rendering (null or "" becomes {}), so a
 * template prints it with tojson (", " separators) rather than raw. capy does the same by
 * default; set keep_string_arguments to pass strings through unchanged, as transformers does.
 * An arguments string that is not valid JSON is then an error (CAPY_EINVAL), as it is in vLLM.
 *
 *	struct capy_chat_opts o = { 0 };	(defaults)
 *	capy_chat_render(t, "[{\"role\":\"user\",\"content\":\"hi\"}]", NULL,
 *			 "{\"enable_thinking\":false}", true, &o, &prompt, &len, &err);
 *
 * Errors as in template.h: CAPY_EINVAL with the template's raise_exception message verbatim,
 * CAPY_EFORMAT for malformed JSON (with line:column) or a template error.
 * Thread-safety: as capy_tmpl_render; the template may be shared between threads.
 */
#ifndef CAPY_TEXT_CHAT_H
#define CAPY_TEXT_CHAT_H

#include "template.h"

struct capy_chat_opts {
	/* tokenizer_config.json (or special_tokens_map.json) text for the special tokens;
	 * NULL: none. */
	const char *tokenizer_config;
	size_t tokenizer_config_len;
	/* false (default): parse assistant tool-call arguments given as JSON strings (vLLM). */
	bool keep_string_arguments;
	const struct capy_tmpl_limits *limits; /* NULL: defaults */
};

/* Render from JSON texts (NUL-terminated): messages (a list), tools (a list or NULL),
 * kwargs (an object or NULL). opts may be NULL. *out is malloc'd and NUL-terminated. */
int capy_chat_render(const struct capy_tmpl *t, const char *messages_json, const char *tools_json,
		     const char *kwargs_json, bool add_generation_prompt,
		     const struct capy_chat_opts *opts, char **out, size_t *out_len,
		     struct capy_err *err);

/* The same from values: tools, kwargs and special (a dict from capy_chat_special_tokens) may
 * be NULL. New values (copies of messages whose arguments get parsed) are made in doc;
 * the inputs are not modified. */
int capy_chat_render_values(const struct capy_tmpl *t, struct capy_tdoc *doc,
			    const struct capy_tval *messages, const struct capy_tval *tools,
			    const struct capy_tval *kwargs, const struct capy_tval *special,
			    bool add_generation_prompt, const struct capy_chat_opts *opts, char **out,
			    size_t *out_len, struct capy_err *err);

/* The special-tokens map of a parsed tokenizer_config.json: string tokens, or the "content" of
 * token objects; null and absent tokens are left out. */
int capy_chat_special_tokens(struct capy_tdoc *doc, const struct capy_tval *config,
			     struct capy_tval **out, struct capy_err *err);

#endif
