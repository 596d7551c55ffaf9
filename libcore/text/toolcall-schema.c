/* toolcall-schema.c - the request's tools, reduced to what typing XML arguments needs: each
 * function's name and, per parameter, the set of JSON types its schema allows.
 */
#include "outparse-impl.h"
#include "util/json.h"

static unsigned type_bit(const char *s)
{
	static const struct { const char *name; unsigned bit; } types[] = {
		{ "string", OP_T_STRING },   { "number", OP_T_NUMBER }, { "integer", OP_T_INTEGER },
		{ "boolean", OP_T_BOOLEAN }, { "object", OP_T_OBJECT }, { "array", OP_T_ARRAY },
		{ "null", OP_T_NULL },
	};

	for (size_t i = 0; i < ARRAY_SIZE(types); i++)
		if (!strcmp(s, types[i].name))
			return types[i].bit;
	return 0;
}

static unsigned value_bit(const cJSON *v)
{
	if (cJSON_IsString(v))
		return OP_T_STRING;
	if (cJSON_IsNumber(v))
		return OP_T_NUMBER;
	if (cJSON_IsBool(v))
		return OP_T_BOOLEAN;
	if (cJSON_IsNull(v))
		return OP_T_NULL;
	if (cJSON_IsArray(v))
		return OP_T_ARRAY;
	return cJSON_IsObject(v) ? OP_T_OBJECT : 0;
}

/* The types a JSON schema allows: "type" (a name or a list), the union of anyOf/oneOf
 * branches, else the types of "enum" values or of "const". 0 when it does not say. */
static unsigned schema_types(const cJSON *s, int depth)
{
	const cJSON *t, *list, *it;
	unsigned m = 0;

	if (!cJSON_IsObject(s) || depth > 8)
		return 0;
	t = cJSON_GetObjectItemCaseSensitive(s, "type");
	if (cJSON_IsString(t))
		m |= type_bit(t->valuestring);
	list = cJSON_IsArray(t) ? t : NULL;
	cJSON_ArrayForEach(it, list)
		if (cJSON_IsString(it))
			m |= type_bit(it->valuestring);
	cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(s, "anyOf"))
		m |= schema_types(it, depth + 1);
	cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(s, "oneOf"))
		m |= schema_types(it, depth + 1);
	if (!m) {
		cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(s, "enum"))
			m |= value_bit(it);
		t = cJSON_GetObjectItemCaseSensitive(s, "const");
		if (t)
			m |= value_bit(t);
	}
	return m;
}

unsigned op_schema_types(const cJSON *schema)
{
	return schema_types(schema, 0);
}

static int add_tool(struct op_tools *t, const char *name, const cJSON *schema)
{
	const cJSON *props = cJSON_GetObjectItemCaseSensitive(schema, "properties"), *it;
	struct op_tool *tool = &t->v[t->n];
	size_t n = 0;

	memset(tool, 0, sizeof(*tool));
	tool->name = strdup(name);
	if (!tool->name)
		return CAPY_ENOMEM;
	t->n++;
	if (!cJSON_IsObject(props))
		return 0;
	cJSON_ArrayForEach(it, props)
		n++;
	tool->params = calloc(n ? n : 1, sizeof(*tool->params));
	if (!tool->params)
		return CAPY_ENOMEM;
	cJSON_ArrayForEach(it, props) {
		struct op_param *pa = &tool->params[tool->n_params];

		pa->name = strdup(it->string ? it->string : "");
		if (!pa->name)
			return CAPY_ENOMEM;
		pa->types = schema_types(it, 0);
		tool->n_params++;
	}
	return 0;
}

/* One element of tools: OpenAI chat {"type":"function","function":{name,parameters}},
 * Responses {"type":"function",name,parameters} or Anthropic {name,input_schema}. Tools of
 * another type without a name (built-in ones such as {"type":"web_search"}) are skipped. */
static int parse_tool(struct op_tools *t, const cJSON *item, int i, struct capy_err *err)
{
	const cJSON *fn = cJSON_GetObjectItemCaseSensitive(item, "function");
	const cJSON *src = cJSON_IsObject(fn) ? fn : item, *name, *schema, *type;

	if (!cJSON_IsObject(item))
		return capy_err_set(err, CAPY_EFORMAT, "tools[%d]: not an object", i);
	name = cJSON_GetObjectItemCaseSensitive(src, "name");
	if (!cJSON_IsString(name) || !name->valuestring[0]) {
		type = cJSON_GetObjectItemCaseSensitive(item, "type");
		if (cJSON_IsString(type) && strcmp(type->valuestring, "function"))
			return 0;
		return capy_err_set(err, CAPY_EFORMAT, "tools[%d]: missing function 'name'", i);
	}
	if (op_tools_find(t, name->valuestring))
		return 0; /* the first definition wins */
	schema = cJSON_GetObjectItemCaseSensitive(src, "parameters");
	if (!schema)
		schema = cJSON_GetObjectItemCaseSensitive(src, "input_schema");
	if (add_tool(t, name->valuestring, schema) < 0)
		return capy_err_set(err, CAPY_ENOMEM, "tools: out of memory");
	return 0;
}

int op_tools_parse(struct op_tools *t, const char *json, size_t len, struct capy_err *err)
{
	cJSON *root, *it;
	int rc = 0, i = 0;

	memset(t, 0, sizeof(*t));
	if (!json)
		return 0;
	if (capy_json_parse(json, len, "tools", &root, err) < 0)
		return err ? err->code : CAPY_EFORMAT;
	if (!cJSON_IsArray(root)) {
		cJSON_Delete(root);
		return capy_err_set(err, CAPY_EFORMAT, "tools: not a JSON array");
	}
	t->v = calloc((size_t)cJSON_GetArraySize(root) + 1, sizeof(*t->v));
	if (!t->v) {
		cJSON_Delete(root);
		return capy_err_set(err, CAPY_ENOMEM, "tools: out of memory");
	}
	cJSON_ArrayForEach(it, root) {
		rc = parse_tool(t, it, i++, err);
		if (rc < 0)
			break;
	}
	cJSON_Delete(root);
	if (rc < 0)
		op_tools_release(t);
	return rc;
}

void op_tools_release(struct op_tools *t)
{
	for (size_t i = 0; i < t->n; i++) {
		for (size_t k = 0; k < t->v[i].n_params; k++)
			free(t->v[i].params[k].name);
		free(t->v[i].params);
		free(t->v[i].name);
	}
	free(t->v);
	memset(t, 0, sizeof(*t));
}

const struct op_tool *op_tools_find(const struct op_tools *t, const char *name)
{
	for (size_t i = 0; i < t->n; i++)
		if (!strcmp(t->v[i].name, name))
			return &t->v[i];
	return NULL;
}

unsigned op_tool_param_types(const struct op_tool *tool, const char *name, size_t len)
{
	for (size_t i = 0; tool && i < tool->n_params; i++)
		if (strlen(tool->params[i].name) == len && !memcmp(tool->params[i].name, name, len))
			return tool->params[i].types;
	return 0;
}

/* The type of a valid JSON value from its text: integer when a number has no fraction or
 * exponent. */
static unsigned json_text_type(const char *s, size_t n)
{
	switch (s[0]) {
	case '{': return OP_T_OBJECT;
	case '[': return OP_T_ARRAY;
	case '"': return OP_T_STRING;
	case 't':
	case 'f': return OP_T_BOOLEAN;
	case 'n': return OP_T_NULL;
	}
	for (size_t i = 0; i < n; i++)
		if (s[i] == '.' || s[i] == 'e' || s[i] == 'E')
			return OP_T_NUMBER;
	return OP_T_NUMBER | OP_T_INTEGER;
}

void op_param_convert(unsigned types, const char *raw, size_t n, struct op_buf *out, int *bad)
{
	struct op_buf fixed;
	const char *s;
	size_t len;
	bool as_json = false;

	/* repair UTF-8 first, so a decoded value is copied out valid */
	op_buf_init(&fixed, out->failed);
	op_put_text(&fixed, raw, n, false, bad);
	s = fixed.p ? fixed.p : "";
	len = fixed.n;
	if (types != OP_T_STRING) {
		size_t a = 0, b = len;

		while (a < b && op_is_ws((uint8_t)s[a]))
			a++;
		while (b > a && op_is_ws((uint8_t)s[b - 1]))
			b--;
		if (a < b && op_json_valid(s + a, b - a)) {
			/* with "string" in a union, decode only to another allowed type */
			as_json = !(types & OP_T_STRING) || (json_text_type(s + a, b - a) & types & ~OP_T_STRING);
			if (as_json)
				op_buf_add(out, s + a, b - a);
		}
	}
	if (!as_json) {
		op_buf_addc(out, '"');
		op_put_text(out, s, len, true, bad);
		op_buf_addc(out, '"');
	}
	op_buf_release(&fixed);
}
