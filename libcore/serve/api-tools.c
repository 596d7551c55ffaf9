/* api-tools.c - tools of the three chat APIs in one shape, and tool_choice.
 *
 * The normalized tool is the OpenAI chat function {type:"function", function:{name,
 * description, parameters}} that the Qwen templates print with tojson; only those keys are
 * kept (strict, cache_control, defer_loading ... would otherwise be printed into the prompt).
 * What each API's other tool types become is written next to the code that decides it.
 */
#include "serve/api-impl.h"

/* {"type":"object","properties":{}}: a function that takes no arguments. OpenAI lets
 * function tools leave parameters out; the templates and the output parser want a schema. */
static struct capy_tval *empty_schema(struct api_parse *p)
{
	struct capy_tval *s = pdict(p);

	pset(p, s, "type", pstrz(p, "object"));
	pset(p, s, "properties", pdict(p));
	return s;
}

/* The parameters of a custom (freeform) tool: one string, "input". */
static struct capy_tval *input_schema(struct api_parse *p)
{
	struct capy_tval *s = pdict(p), *props = pdict(p), *in = pdict(p), *req = plist(p);

	pset(p, in, "type", pstrz(p, "string"));
	pset(p, props, "input", in);
	pset(p, s, "type", pstrz(p, "object"));
	pset(p, s, "properties", props);
	ppush(p, req, pstrz(p, "input"));
	pset(p, s, "required", req);
	return s;
}

static const char *tool_name(struct api_parse *p, const struct capy_tval *obj, const char *at)
{
	const char *name = popt_str(p, obj, "name", at);
	char nat[API_PATH_MAX];

	ppath(nat, at, "name");
	if (!name)
		pfail(p, "missing_required_parameter", nat, "%s is required", nat);
	if (!name[0])
		pfail(p, "invalid_value", nat, "%s must not be empty", nat);
	return name;
}

static void add_tool(struct api_parse *p, const char *name, const char *desc,
		     struct capy_tval *params)
{
	struct capy_api_request *r = p->req;
	struct capy_tval *t = pdict(p), *fn = pdict(p);

	pset(p, fn, "name", pstrz(p, name));
	if (desc)
		pset(p, fn, "description", pstrz(p, desc));
	pset(p, fn, "parameters", params ? params : empty_schema(p));
	pset(p, t, "type", pstrz(p, "function"));
	pset(p, t, "function", fn);
	if (!r->tools)
		r->tools = plist(p);
	ppush(p, r->tools, t);
	r->n_tools++;
}

static struct capy_tval *tools_list(struct api_parse *p, const struct capy_tval *body,
				    const char *key)
{
	struct capy_tval *tools = popt_list(p, body, key, "");
	size_t n = capy_tval_len(tools);

	if (n > p->lim.max_tools)
		pfail(p, "array_above_max_length", key,
		      "%s has %zu tools, more than the limit of %zu", key, n, p->lim.max_tools);
	return tools;
}

/* A function description {name, description?, parameters?} (chat "function", legacy
 * "functions" entries, Responses flat function tools). */
/* strict: true on a tool: a forced call of it is held to its schema in strict mode. */
static void note_strict(struct api_parse *p, const struct capy_tval *obj, const char *name, const char *at)
{
	if (!popt_bool(p, obj, "strict", at, false))
		return;
	if (!p->req->strict_tools)
		p->req->strict_tools = plist(p);
	ppush(p, p->req->strict_tools, pstrz(p, name));
}

static void add_function(struct api_parse *p, const struct capy_tval *fn, const char *at)
{
	const char *name = tool_name(p, fn, at);
	const char *desc = popt_str(p, fn, "description", at);
	struct capy_tval *params = popt_dict(p, fn, "parameters", at);

	add_tool(p, name, desc, params);
	note_strict(p, fn, name, at);
}

/* A custom tool's description, with the grammar of its input when it has one, since the
 * model cannot be held to it: "...\n\nThe input follows this lark grammar:\n<definition>". */
static const char *custom_description(struct api_parse *p, const struct capy_tval *t,
				      const char *at)
{
	const char *desc = popt_str(p, t, "description", at);
	struct capy_tval *fmt = pget(t, "format");
	const char *syntax, *def;

	if (capy_tval_kind(fmt) != CAPY_TVAL_DICT || !str_eq(pget(fmt, "type"), "grammar"))
		return desc;
	syntax = capy_tval_strv(pget(fmt, "syntax"), NULL);
	def = capy_tval_strv(pget(fmt, "definition"), NULL);
	if (!def)
		return desc;
	capy_buf_reset(&p->scratch);
	if (desc && desc[0])
		capy_buf_printf(&p->scratch, "%s\n\n", desc);
	capy_buf_printf(&p->scratch, "The input follows this %s grammar:\n%s",
			syntax ? syntax : "", def);
	if (p->scratch.oom)
		poom(p);
	return capy_tval_strv(pstr(p, p->scratch.data, p->scratch.len), NULL);
}

static struct capy_tval *map_entry(struct api_parse *p, const char *name, const char *type)
{
	struct capy_api_request *r = p->req;
	struct capy_tval *e = pdict(p);

	if (!r->tool_map)
		r->tool_map = pdict(p);
	pset(p, e, "type", pstrz(p, type));
	pset(p, r->tool_map, name, e);
	return e;
}

static void add_custom(struct api_parse *p, const struct capy_tval *t, const char *at)
{
	const char *name = tool_name(p, t, at);

	add_tool(p, name, custom_description(p, t, at), input_schema(p));
	map_entry(p, name, "custom");
}

/* {type:"namespace", name:NS, tools:[function tools]}: each function becomes "NS__NAME"
 * (vLLM's flattening), answered with its own name and namespace NS. */
static void add_namespace(struct api_parse *p, const struct capy_tval *t, const char *at)
{
	const char *ns = tool_name(p, t, at);
	struct capy_tval *tools = popt_list(p, t, "tools", at);
	char lat[API_PATH_MAX], fat[API_PATH_MAX];
	size_t i;

	ppath(lat, at, "tools");
	for (i = 0; i < capy_tval_len(tools); i++) {
		struct capy_tval *fn = capy_tval_at(tools, i), *e;
		const char *type, *name;

		ppath_i(fat, lat, i);
		if (capy_tval_kind(fn) != CAPY_TVAL_DICT)
			pfail(p, "invalid_type", fat, "%s must be an object, not %s", fat, kind_name(fn));
		type = popt_str(p, fn, "type", fat);
		if (type && strcmp(type, "function"))
			continue;
		name = tool_name(p, fn, fat);
		capy_buf_reset(&p->scratch);
		capy_buf_printf(&p->scratch, "%s__%s", ns, name);
		if (p->scratch.oom)
			poom(p);
		name = capy_tval_strv(pstr(p, p->scratch.data, p->scratch.len), NULL);
		add_tool(p, name, popt_str(p, fn, "description", fat),
			 popt_dict(p, fn, "parameters", fat));
		e = map_entry(p, name, "namespace");
		pset(p, e, "namespace", pstrz(p, ns));
		pset(p, e, "name", pstrz(p, capy_tval_strv(pget(fn, "name"), NULL)));
	}
}

void parse_tools_chat(struct api_parse *p, const struct capy_tval *body)
{
	struct capy_tval *tools = tools_list(p, body, "tools");
	char at[API_PATH_MAX], fat[API_PATH_MAX];
	size_t i;

	for (i = 0; i < capy_tval_len(tools); i++) {
		struct capy_tval *t = capy_tval_at(tools, i), *fn;
		const char *type;

		ppath_i(at, "tools", i);
		if (capy_tval_kind(t) != CAPY_TVAL_DICT)
			pfail(p, "invalid_type", at, "%s must be an object, not %s", at, kind_name(t));
		type = popt_str(p, t, "type", at);
		if (type && !strcmp(type, "custom")) {
			/* {type:"custom", custom:{name, description, format}}: a function with
			 * one string parameter "input"; calls come back as function calls. */
			struct capy_tval *c = popt_dict(p, t, "custom", at);

			ppath(fat, at, "custom");
			if (!c)
				pfail(p, "missing_required_parameter", fat, "%s is required", fat);
			add_tool(p, tool_name(p, c, fat), custom_description(p, c, fat),
				 input_schema(p));
			continue;
		}
		if (type && strcmp(type, "function"))
			continue; /* no other type can be called as a function: dropped */
		fn = popt_dict(p, t, "function", at);
		ppath(fat, at, "function");
		if (!fn)
			pfail(p, "missing_required_parameter", fat, "%s is required", fat);
		add_function(p, fn, fat);
	}
	if (!tools) {
		/* the deprecated "functions": the same descriptions */
		tools = tools_list(p, body, "functions");
		for (i = 0; i < capy_tval_len(tools); i++) {
			struct capy_tval *fn = capy_tval_at(tools, i);

			ppath_i(at, "functions", i);
			if (capy_tval_kind(fn) != CAPY_TVAL_DICT)
				pfail(p, "invalid_type", at, "%s must be an object, not %s", at,
				      kind_name(fn));
			add_function(p, fn, at);
		}
	}
}

void parse_tools_responses(struct api_parse *p, const struct capy_tval *body)
{
	struct capy_tval *tools = tools_list(p, body, "tools");
	char at[API_PATH_MAX];
	size_t i;

	for (i = 0; i < capy_tval_len(tools); i++) {
		struct capy_tval *t = capy_tval_at(tools, i);
		const char *type;

		ppath_i(at, "tools", i);
		if (capy_tval_kind(t) != CAPY_TVAL_DICT)
			pfail(p, "invalid_type", at, "%s must be an object, not %s", at, kind_name(t));
		type = popt_str(p, t, "type", at);
		if (!type || !strcmp(type, "function"))
			add_function(p, t, at); /* flat: {type, name, description, parameters} */
		else if (!strcmp(type, "custom"))
			add_custom(p, t, at);
		else if (!strcmp(type, "namespace"))
			add_namespace(p, t, at);
		/* Other types are hosted tools that OpenAI runs itself (web_search, file_search,
		 * code_interpreter, image_generation, mcp, computer_use) or built-ins whose calls
		 * have item types of their own (local_shell, shell, apply_patch, tool_search with
		 * its tool_search_call/_output round): they are dropped. */
	}
}

void parse_tools_messages(struct api_parse *p, const struct capy_tval *body)
{
	struct capy_tval *tools = tools_list(p, body, "tools");
	char at[API_PATH_MAX], sat[API_PATH_MAX];
	size_t i, k;

	for (i = 0; i < capy_tval_len(tools); i++) {
		struct capy_tval *t = capy_tval_at(tools, i), *schema, *copy;
		const char *type;

		ppath_i(at, "tools", i);
		if (capy_tval_kind(t) != CAPY_TVAL_DICT)
			pfail(p, "invalid_type", at, "%s must be an object, not %s", at, kind_name(t));
		type = popt_str(p, t, "type", at);
		schema = popt_dict(p, t, "input_schema", at);
		/* Typed tools without a schema (bash_20250124, text_editor_*, web_search_*,
		 * code_execution_*, ...) are Anthropic's own, defined or run by its servers:
		 * dropped. */
		if ((type && strcmp(type, "custom")) || !schema)
			continue;
		ppath(sat, at, "input_schema");
		/* vLLM's rule: a schema without "type" is an object schema */
		copy = schema;
		if (!capy_tval_get(schema, "type")) {
			copy = pdict(p);
			for (k = 0; k < capy_tval_dict_len(schema); k++) {
				struct capy_tval *v;
				const char *key = capy_tval_dict_entry(schema, k, NULL, &v);

				pset(p, copy, key, v);
			}
			pset(p, copy, "type", pstrz(p, "object"));
		}
		add_tool(p, tool_name(p, t, at), popt_str(p, t, "description", at), copy);
		note_strict(p, t, tool_name(p, t, at), at);
	}
}

static void named_choice(struct api_parse *p, const char *name, const char *at)
{
	char nat[API_PATH_MAX];

	ppath(nat, at, "name");
	if (!name || !name[0])
		pfail(p, "missing_required_parameter", nat, "%s is required", nat);
	p->req->tool_choice = CAPY_API_TOOLS_NAMED;
	p->req->tool_choice_name = name;
}

/* The name of the i-th tool. */
static const char *tool_at(const struct capy_api_request *r, size_t i)
{
	return capy_tval_strv(capy_tval_get(capy_tval_get(capy_tval_at(r->tools, i), "function"), "name"), NULL);
}

/* Add the tools named name (with ns, every function "name__..." of that namespace) to names;
 * none is an error at at. (The tools are parsed before tool_choice.) */
static void allow(struct api_parse *p, struct capy_tval *names, const char *name, bool ns, const char *at)
{
	const struct capy_api_request *r = p->req;
	size_t n = strlen(name), found = 0;

	for (size_t i = 0; i < r->n_tools; i++) {
		const char *t = tool_at(r, i);
		if (ns ? !strncmp(t, name, n) && !strncmp(t + n, "__", 2) : !strcmp(t, name)) {
			ppush(p, names, pstrz(p, t));
			found++;
		}
	}
	if (!found)
		pfail(p, "invalid_value", at, "%s names '%s', which is not among the tools", at, name);
}

/* The names of an allowed_tools list (holder.tools, at is where holder is): function and
 * custom tools by name ({type, name} or chat's {type, function: {name}}), a namespace as
 * each of its functions; hosted types (mcp, image_generation, ...) are dropped, as the
 * tools themselves are. */
static void allowed_list(struct api_parse *p, const struct capy_tval *holder, const char *at)
{
	struct capy_tval *list = popt_list(p, holder, "tools", at), *names = plist(p);
	char lat[API_PATH_MAX], iat[API_PATH_MAX], fat[API_PATH_MAX];

	ppath(lat, at, "tools");
	if (!list)
		pfail(p, "missing_required_parameter", lat, "%s is required", lat);
	if (!capy_tval_len(list))
		pfail(p, "invalid_value", lat, "%s must list at least one tool", lat);
	for (size_t i = 0; i < capy_tval_len(list); i++) {
		struct capy_tval *t = capy_tval_at(list, i), *fn;
		const char *type;

		ppath_i(iat, lat, i);
		if (capy_tval_kind(t) != CAPY_TVAL_DICT)
			pfail(p, "invalid_type", iat, "%s must be an object, not %s", iat, kind_name(t));
		type = popt_str(p, t, "type", iat);
		if (type && strcmp(type, "function") && strcmp(type, "custom") && strcmp(type, "namespace"))
			continue;
		if ((fn = popt_dict(p, t, "function", iat))) {
			ppath(fat, iat, "function");
			allow(p, names, tool_name(p, fn, fat), false, iat);
		} else {
			allow(p, names, tool_name(p, t, iat), type && !strcmp(type, "namespace"), iat);
		}
	}
	if (!capy_tval_len(names))
		pfail(p, "invalid_value", lat, "%s lists no function the model can call", lat);
	p->req->allowed_tools = names;
}

void parse_tool_choice_openai(struct api_parse *p, const struct capy_tval *body, bool responses)
{
	struct capy_api_request *r = p->req;
	struct capy_tval *tc = pget(body, "tool_choice");
	const char *s, *type;

	r->parallel_tool_calls = popt_bool(p, body, "parallel_tool_calls", "", true);
	if (!tc)
		return;
	if ((s = capy_tval_strv(tc, NULL))) {
		if (!strcmp(s, "auto"))
			r->tool_choice = CAPY_API_TOOLS_AUTO;
		else if (!strcmp(s, "none"))
			r->tool_choice = CAPY_API_TOOLS_NONE;
		else if (!strcmp(s, "required"))
			r->tool_choice = CAPY_API_TOOLS_REQUIRED;
		else
			pfail(p, "invalid_value", "tool_choice",
			      "tool_choice must be \"auto\", \"none\", \"required\" or a named tool, not \"%s\"",
			      s);
		return;
	}
	if (capy_tval_kind(tc) != CAPY_TVAL_DICT)
		pfail(p, "invalid_type", "tool_choice", "tool_choice must be a string or an object");
	type = popt_str(p, tc, "type", "tool_choice");
	if (type && !strcmp(type, "function")) {
		struct capy_tval *fn = popt_dict(p, tc, "function", "tool_choice");

		if (fn || !responses)
			named_choice(p, popt_str(p, fn, "name", "tool_choice.function"),
				     "tool_choice.function");
		else
			named_choice(p, popt_str(p, tc, "name", "tool_choice"), "tool_choice");
	} else if (type && !strcmp(type, "custom")) {
		struct capy_tval *c = popt_dict(p, tc, "custom", "tool_choice");

		if (c)
			named_choice(p, popt_str(p, c, "name", "tool_choice.custom"),
				     "tool_choice.custom");
		else
			named_choice(p, popt_str(p, tc, "name", "tool_choice"), "tool_choice");
	} else if (type && !strcmp(type, "allowed_tools")) {
		/* {mode, tools} (Responses) or {allowed_tools: {mode, tools}} (chat): every tool
		 * stays in the prompt (what a cached prefix wants), calls are held to the listed
		 * ones by a grammar (generate.c) */
		struct capy_tval *nested = pget(tc, "allowed_tools");
		bool in = capy_tval_kind(nested) == CAPY_TVAL_DICT;
		const struct capy_tval *holder = in ? nested : tc;
		const char *at = in ? "tool_choice.allowed_tools" : "tool_choice";
		const char *mode = popt_str(p, holder, "mode", at);
		char mat[API_PATH_MAX];

		ppath(mat, at, "mode");
		if (!mode)
			pfail(p, "missing_required_parameter", mat, "%s is required", mat);
		if (strcmp(mode, "required") && strcmp(mode, "auto"))
			pfail(p, "invalid_value", mat, "%s must be auto or required, not '%s'", mat, mode);
		r->tool_choice = !strcmp(mode, "required") ? CAPY_API_TOOLS_REQUIRED : CAPY_API_TOOLS_AUTO;
		allowed_list(p, holder, at);
	} else {
		pfail(p, "invalid_value", "tool_choice.type",
		      "tool_choice.type '%s' is not supported by this server", type ? type : "");
	}
}

void parse_tool_choice_messages(struct api_parse *p, const struct capy_tval *body)
{
	struct capy_api_request *r = p->req;
	struct capy_tval *tc = popt_dict(p, body, "tool_choice", "");
	const char *type;

	if (!tc)
		return;
	type = popt_str(p, tc, "type", "tool_choice");
	if (!type)
		pfail(p, "missing_required_parameter", "tool_choice.type", "tool_choice.type is required");
	if (!strcmp(type, "auto"))
		r->tool_choice = CAPY_API_TOOLS_AUTO;
	else if (!strcmp(type, "any"))
		r->tool_choice = CAPY_API_TOOLS_REQUIRED;
	else if (!strcmp(type, "none"))
		r->tool_choice = CAPY_API_TOOLS_NONE;
	else if (!strcmp(type, "tool"))
		named_choice(p, popt_str(p, tc, "name", "tool_choice"), "tool_choice");
	else
		pfail(p, "invalid_value", "tool_choice.type",
		      "tool_choice.type must be auto, any, tool or none, not '%s'", type);
	r->parallel_tool_calls = !popt_bool(p, tc, "disable_parallel_tool_use", "tool_choice", false);
}

const struct capy_tval *tool_mapped(const struct capy_api_request *req, const char *name)
{
	return capy_tval_get(req->tool_map, name);
}

void finish_tools(struct api_parse *p)
{
	struct capy_api_request *r = p->req;
	struct capy_err e = { 0 };
	size_t i;
	int rc;

	if (r->tool_choice == CAPY_API_TOOLS_REQUIRED && !r->n_tools)
		pfail(p, "invalid_value", "tool_choice", "tool_choice requires a tool call, but there are no tools");
	if (r->tool_choice == CAPY_API_TOOLS_NAMED) {
		for (i = 0; i < r->n_tools; i++) {
			struct capy_tval *fn = capy_tval_get(capy_tval_at(r->tools, i), "function");

			if (str_eq(capy_tval_get(fn, "name"), r->tool_choice_name))
				break;
		}
		if (i == r->n_tools)
			pfail(p, "invalid_value", "tool_choice",
			      "tool_choice names '%s', which is not among the tools", r->tool_choice_name);
	}
	if (!r->tools)
		return;
	rc = capy_tval_to_json(r->tools, &r->tools_json, NULL, &e);
	if (rc == CAPY_ENOMEM)
		poom(p);
	if (rc < 0) /* cannot happen: every value came from JSON */
		pfail(p, NULL, "tools", "tools: %s", e.msg);
}
