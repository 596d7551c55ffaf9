/* chat.c - chat prompts: the template context transformers builds, over the template engine. */
#include "text/chat.h"
#include "text/jinja-impl.h"

static const char *const special_names[] = {
	"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token",
};

/* A token as tokenizer_config.json writes it: a string or {"content": "...", ...}. */
static struct capy_tval *token_text(struct capy_tval *v)
{
	if (v && v->kind == JK_DICT)
		v = jd_get(v, "content", 7);
	return v && v->kind == JK_STR ? v : NULL;
}

int capy_chat_special_tokens(struct capy_tdoc *doc, const struct capy_tval *config,
			     struct capy_tval **out, struct capy_err *err)
{
	struct capy_tval *map, *extra;
	size_t i;

	*out = NULL;
	if (!config || config->kind != JK_DICT)
		return capy_err_set(err, CAPY_EFORMAT, "tokenizer config: not a JSON object");
	map = capy_tval_dict(doc);
	if (!map)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	for (i = 0; i < ARRAY_SIZE(special_names); i++) {
		struct capy_tval *tok = token_text(capy_tval_get(config, special_names[i]));

		if (tok && capy_tval_set(doc, map, special_names[i], tok))
			return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	}
	extra = capy_tval_get(config, "additional_special_tokens");
	if (extra && extra->kind == JK_LIST && extra->list.n) {
		struct capy_tval *l = capy_tval_list(doc);

		if (!l)
			return capy_err_set(err, CAPY_ENOMEM, "out of memory");
		for (i = 0; i < extra->list.n; i++) {
			struct capy_tval *tok = token_text(extra->list.v[i]);

			if (tok && capy_tval_push(doc, l, tok))
				return capy_err_set(err, CAPY_ENOMEM, "out of memory");
		}
		if (capy_tval_set(doc, map, "additional_special_tokens", l))
			return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	}
	*out = map;
	return 0;
}

static struct capy_tval *dict_copy(struct jarena *a, const struct capy_tval *d)
{
	struct capy_tval *c = jv_new(a, JK_DICT);
	uint32_t i;

	for (i = 0; i < d->dict.n; i++)
		jd_set(a, c, d->dict.e[i].key, d->dict.e[i].klen, d->dict.e[i].val);
	return c;
}

/* vLLM's rule: an assistant tool call's function.arguments, if a string, is parsed as JSON;
 * null or "" becomes {}. Returns the message itself or a changed copy. */
static int parse_arguments(struct jarena *a, struct capy_tval *msg, size_t idx,
			   struct capy_tval **out, struct capy_err *err)
{
	struct capy_tval *role = jd_get(msg, "role", 4), *calls = jd_get(msg, "tool_calls", 10);
	struct capy_tval *ncalls;
	size_t i;

	*out = msg;
	if (!role || role->kind != JK_STR || strcmp(role->str.s, "assistant") || !calls ||
	    calls->kind != JK_LIST)
		return 0;
	ncalls = jv_list(a, calls->list.n);
	for (i = 0; i < calls->list.n; i++) {
		struct capy_tval *call = calls->list.v[i], *fn, *args, *parsed;
		char what[96];
		int rc;

		fn = call->kind == JK_DICT ? jd_get(call, "function", 8) : NULL;
		if (!fn || fn->kind != JK_DICT) {
			jv_push(a, ncalls, call);
			continue;
		}
		args = jd_get(fn, "arguments", 9);
		if (args && jv_truthy(args) && args->kind != JK_STR) {
			jv_push(a, ncalls, call);
			continue;
		}
		if (args && jv_truthy(args)) {
			snprintf(what, sizeof(what), "messages[%zu].tool_calls[%zu] arguments", idx, i);
			rc = jv_parse_json(a, args->str.s, args->str.len, what, &parsed, err);
			if (rc == CAPY_EFORMAT) {
				/* the request is wrong, not the template */
				rc = CAPY_EINVAL;
				if (err)
					err->code = rc;
			}
			if (rc < 0)
				return rc;
		} else {
			parsed = jv_new(a, JK_DICT);
		}
		fn = dict_copy(a, fn);
		jd_set(a, fn, "arguments", 9, parsed);
		call = dict_copy(a, call);
		jd_set(a, call, "function", 8, fn);
		jv_push(a, ncalls, call);
	}
	*out = dict_copy(a, msg);
	jd_set(a, *out, "tool_calls", 10, ncalls);
	return 0;
}

int capy_chat_render_values(const struct capy_tmpl *t, struct capy_tdoc *doc,
			    const struct capy_tval *messages, const struct capy_tval *tools,
			    const struct capy_tval *kwargs, const struct capy_tval *special,
			    bool add_generation_prompt, const struct capy_chat_opts *opts, char **out,
			    size_t *out_len, struct capy_err *err)
{
	static const char *const reserved[] = {
		"messages", "tools", "documents", "add_generation_prompt",
	};
	struct jarena *a = &doc->arena;
	struct capy_tval *vars, *msgs;
	jmp_buf fail, *saved = a->fail;
	size_t i, k;
	int rc;

	*out = NULL;
	if (!messages || messages->kind != JK_LIST)
		return capy_err_set(err, CAPY_EINVAL, "messages: expected a JSON array");
	if (tools && tools->kind != JK_LIST && tools->kind != JK_NONE)
		return capy_err_set(err, CAPY_EINVAL, "tools: expected a JSON array");
	if (kwargs && kwargs->kind != JK_DICT && kwargs->kind != JK_NONE)
		return capy_err_set(err, CAPY_EINVAL, "chat template kwargs: expected a JSON object");
	a->fail = &fail;
	if (setjmp(fail)) {
		a->fail = saved;
		return capy_err_set(err, CAPY_ENOMEM, "out of memory building the chat context");
	}
	msgs = (struct capy_tval *)messages;
	if (!opts || !opts->keep_string_arguments) {
		msgs = jv_list(a, messages->list.n);
		for (i = 0; i < messages->list.n; i++) {
			struct capy_tval *m = messages->list.v[i];

			if (m->kind == JK_DICT) {
				rc = parse_arguments(a, m, i, &m, err);
				if (rc < 0) {
					a->fail = saved;
					return rc;
				}
			}
			jv_push(a, msgs, m);
		}
	}
	vars = jv_new(a, JK_DICT);
	jd_set(a, vars, "messages", 8, msgs);
	jd_set(a, vars, "tools", 5, tools ? (struct capy_tval *)tools : &jv_none);
	jd_set(a, vars, "documents", 9, &jv_none);
	jd_set(a, vars, "add_generation_prompt", 21, jv_bool(add_generation_prompt));
	if (special && special->kind == JK_DICT)
		for (i = 0; i < special->dict.n; i++)
			jd_set(a, vars, special->dict.e[i].key, special->dict.e[i].klen,
			       special->dict.e[i].val);
	if (kwargs && kwargs->kind == JK_DICT) {
		for (i = 0; i < kwargs->dict.n; i++) {
			for (k = 0; k < ARRAY_SIZE(reserved); k++)
				if (!strcmp(kwargs->dict.e[i].key, reserved[k])) {
					a->fail = saved;
					return capy_err_set(err, CAPY_EINVAL,
							    "chat template kwargs: '%s' is set by the request itself",
							    reserved[k]);
				}
			jd_set(a, vars, kwargs->dict.e[i].key, kwargs->dict.e[i].klen,
			       kwargs->dict.e[i].val);
		}
	}
	a->fail = saved;
	return capy_tmpl_render(t, vars, opts ? opts->limits : NULL, out, out_len, err);
}

int capy_chat_render(const struct capy_tmpl *t, const char *messages_json, const char *tools_json,
		     const char *kwargs_json, bool add_generation_prompt,
		     const struct capy_chat_opts *opts, char **out, size_t *out_len,
		     struct capy_err *err)
{
	struct capy_tdoc *doc = capy_tdoc_new();
	struct capy_tval *messages, *tools = NULL, *kwargs = NULL, *special = NULL, *config;
	int rc;

	*out = NULL;
	if (!doc)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	rc = capy_tdoc_parse_json(doc, messages_json, strlen(messages_json), "messages", &messages,
				  err);
	if (!rc && tools_json)
		rc = capy_tdoc_parse_json(doc, tools_json, strlen(tools_json), "tools", &tools, err);
	if (!rc && kwargs_json)
		rc = capy_tdoc_parse_json(doc, kwargs_json, strlen(kwargs_json), "kwargs", &kwargs,
					  err);
	if (!rc && opts && opts->tokenizer_config) {
		rc = capy_tdoc_parse_json(doc, opts->tokenizer_config, opts->tokenizer_config_len,
					  "tokenizer config", &config, err);
		if (!rc)
			rc = capy_chat_special_tokens(doc, config, &special, err);
	}
	if (!rc)
		rc = capy_chat_render_values(t, doc, messages, tools, kwargs, special,
					     add_generation_prompt, opts, out, out_len, err);
	capy_tdoc_free(doc);
	return rc;
}
