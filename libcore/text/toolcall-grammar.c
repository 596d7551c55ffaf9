/* toolcall-grammar.c - the grammar of the model's tool-call syntax for a request's tools
 * (toolcall-grammar.h): the call frame written here as GBNF, values by the JSON Schema
 * compiler (each with a rule prefix of its own, so that their rules live side by side).
 */
#include "toolcall-grammar.h"
#include "outparse-impl.h"
#include "tokenizer-impl.h"
#include "constrain/json-schema.h"
#include "util/buf.h"
#include "util/json.h"

#define NAME_MAX_BYTES 256 /* what the parser takes as a function or parameter name */
#define VALUE_END "</parameter>" /* where an XML value ends: never inside one */

struct gen {
	const struct capy_call_grammar_opts *o;
	struct capy_buf g;   /* the grammar */
	struct capy_err *err;
};

/* s as a GBNF literal. */
static void lit(struct capy_buf *b, const char *s, size_t n)
{
	capy_buf_putc(b, '"');
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\')
			capy_buf_printf(b, "\\%c", c);
		else if (c == '\n')
			capy_buf_puts(b, "\\n");
		else if (c < 0x20 || c == 0x7f)
			capy_buf_printf(b, "\\x%02X", c);
		else
			capy_buf_putc(b, (char)c);
	}
	capy_buf_putc(b, '"');
}

static void litz(struct capy_buf *b, const char *s)
{
	lit(b, s, strlen(s));
}

/* rule ::= text that never holds "<TAG" for any of the tags (each after the '<': "/parameter>",
 * "tool_call>"; no two starting with the same byte) and does not end inside one: a '<' is
 * followed by a byte that leaves every tag, each step of a tag by one that is not its next
 * byte (nor '<', which starts over). Stricter than the parser, never looser. */
static void no_tags_rule(struct capy_buf *b, const char *rule, const char *const *tags, size_t n_tags)
{
	capy_buf_printf(b, "%s ::= ( [^<] | \"<\"+ ( [^<", rule);
	for (size_t t = 0; t < n_tags; t++)
		capy_buf_putc(b, tags[t][0]);
	capy_buf_puts(b, "]");
	for (size_t t = 0; t < n_tags; t++) {
		const char *tag = tags[t];
		size_t n = strlen(tag);
		capy_buf_printf(b, " | \"%c\" ", tag[0]);
		for (size_t i = 1; i < n; i++) {
			if (i + 1 < n)
				capy_buf_printf(b, "( [^%c<] | \"%c\" ", tag[i], tag[i]);
			else
				capy_buf_printf(b, "[^%c<]", tag[i]);
		}
		for (size_t i = 1; i + 1 < n; i++)
			capy_buf_puts(b, " )");
	}
	capy_buf_puts(b, " ) )*\n");
}

static void no_tag_rule(struct capy_buf *b, const char *rule, const char *tag)
{
	no_tags_rule(b, rule, &tag, 1);
}

/* Reasoning as the parser reads it: text without "</think>" or "<tool_call>" (a call ends it
 * too). */
static void reasoning_rule(struct capy_buf *b)
{
	static const char *const tags[] = { "/think>", "tool_call>" };

	no_tags_rule(b, "think-raw", tags, ARRAY_SIZE(tags));
}

/* Names go into the grammar as literals, which must be UTF-8 (the parser would repair them
 * anyway, and then read another name). */
static bool utf8_ok(const char *s)
{
	return tok_utf8_valid_prefix(s, strlen(s)) == strlen(s);
}

/* A name the output parser reads (toolcall.c, in either syntax): 1..256 bytes of UTF-8, no
 * whitespace, controls or <>"'{}=. */
static bool name_ok(const char *s)
{
	size_t n = strlen(s);

	if (!n || n > NAME_MAX_BYTES || !utf8_ok(s))
		return false;
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c <= 0x20 || c == 0x7f || strchr("<>\"'{}=", c))
			return false;
	}
	return true;
}

static bool is_strict(const struct gen *G, const char *name)
{
	if (G->o->all_strict)
		return true;
	for (size_t i = 0; i < G->o->n_strict; i++)
		if (G->o->strict[i] && !strcmp(G->o->strict[i], name))
			return true;
	return false;
}

/* The compiler's message "schema: <pointer>: <what>" for tool name, with the pointer made
 * one into the tool's parameters (under is the parameter's place there, or ""). */
static int schema_error(struct gen *G, int rc, const char *name, const char *under, const struct capy_err *e)
{
	const char *m = e->msg, *rest;
	char ptr[256] = "";

	if (!strncmp(m, "schema: ", 8)) {
		m += 8;
		rest = strstr(m, ": ");
		if (rest) {
			size_t k = (size_t)(rest - m);
			if (strncmp(m, "(root)", k))
				snprintf(ptr, sizeof(ptr), "%.*s", (int)CAPY_MIN(k, sizeof(ptr) - 1), m);
			m = rest + 2;
		}
	}
	if (!*under && !*ptr)
		return capy_err_set(G->err, rc, "tool '%s': schema: (root): %s", name, m);
	return capy_err_set(G->err, rc, "tool '%s': schema: %s%s: %s", name, under, ptr, m);
}

/* The GBNF of schema with every rule prefixed (its root `<prefix>root`), appended; raw: its
 * strings as XML values carry them (the characters themselves, never the value's end). */
static int add_schema(struct gen *G, const cJSON *schema, const char *prefix, const char *tool, const char *under,
		      bool raw)
{
	struct capy_schema_opts so = { .strict = is_strict(G, tool), .prefix = prefix, .raw = raw,
				       .raw_stop = raw ? VALUE_END : NULL };
	struct capy_err e = { 0 };
	char *text = NULL;
	int rc = capy_json_schema_tree_to_gbnf(schema, &so, &text, &e);

	if (rc < 0)
		return schema_error(G, rc, tool, under, &e);
	capy_buf_puts(&G->g, text);
	free(text);
	return 0;
}

/* The schema of one parameter with the tool's $defs and definitions beside it, so that its
 * $refs ("#/$defs/x") still reach them: a new object (the caller deletes it). */
static cJSON *param_schema(const cJSON *root, const cJSON *ps)
{
	cJSON *s = cJSON_Duplicate(ps, true);
	static const char *const keep[] = { "$defs", "definitions" };

	if (!s || !cJSON_IsObject(s))
		return s;
	for (size_t i = 0; i < ARRAY_SIZE(keep); i++) {
		const cJSON *d = cJSON_GetObjectItemCaseSensitive(root, keep[i]);
		if (d && !cJSON_GetObjectItemCaseSensitive(s, keep[i]))
			cJSON_AddItemToObject(s, keep[i], cJSON_Duplicate(d, true));
	}
	return s;
}

static bool allowed(const struct capy_call_grammar_opts *o, const char *name)
{
	if (o->only && strcmp(o->only, name))
		return false;
	for (size_t i = 0; o->allowed && i < o->n_allowed; i++)
		if (o->allowed[i] && !strcmp(o->allowed[i], name))
			return true;
	return !o->allowed;
}

static bool listed(const cJSON *list, const char *key)
{
	const cJSON *v;

	cJSON_ArrayForEach(v, list)
		if (cJSON_IsString(v) && !strcmp(v->valuestring, key))
			return true;
	return false;
}

/* XML: t<i>-body ::= the parameters, then "</function>\n</tool_call>". */
static int xml_tool(struct gen *G, int ti, const char *name, const cJSON *params)
{
	const cJSON *props = cJSON_GetObjectItemCaseSensitive(params, "properties");
	const cJSON *req = cJSON_GetObjectItemCaseSensitive(params, "required");
	const cJSON *ps;
	struct capy_buf body = { 0 };
	char pre[48], under[300];
	int k = 0, rc = 0;

	/* the whole schema once, for its errors (keywords at its top included) */
	snprintf(pre, sizeof(pre), "t%d-all-", ti);
	{
		struct capy_schema_opts so = { .strict = is_strict(G, name), .prefix = pre };
		struct capy_err e = { 0 };
		char *text = NULL;
		if ((rc = capy_json_schema_tree_to_gbnf(params, &so, &text, &e)) < 0)
			return schema_error(G, rc, name, "", &e);
		free(text);
	}
	capy_buf_printf(&body, "t%d-body ::=", ti);
	if (!cJSON_IsObject(props))
		props = NULL;
	cJSON_ArrayForEach(ps, props) {
		const char *key = ps->string;
		bool required = listed(req, key);
		unsigned types = op_schema_types(ps);

		if (!name_ok(key)) {
			if (!required)
				continue; /* optional: left out, since it cannot be written */
			rc = capy_err_set(G->err, CAPY_EUNSUPPORTED, "tool '%s': schema: /properties/%s: the parameter "
					  "name cannot be written in the XML call syntax", name, key);
			break;
		}
		capy_buf_printf(&body, " %st%d-p%d%s", required ? "" : "( ", ti, k, required ? "" : " )?");
		capy_buf_printf(&G->g, "t%d-p%d ::= ", ti, k);
		lit(&G->g, "<parameter=", 11);
		capy_buf_puts(&G->g, " ");
		litz(&G->g, key);
		capy_buf_puts(&G->g, " \">\\n\" ");
		if ((types & OP_T_STRING) && (types != OP_T_STRING || capy_json_schema_any_string(ps))) {
			/* raw text, read back as a string (in a union with string: whatever parses
			 * as another allowed type becomes that, the rest a string); the other
			 * branches' keywords are not held */
			capy_buf_puts(&G->g, "xml-raw \"\\n</parameter>\\n\"\n");
		} else {
			/* JSON by the schema, or a string's keywords held on its raw text */
			cJSON *sch = param_schema(params, ps);
			if (!sch) {
				rc = capy_err_set(G->err, CAPY_ENOMEM, "out of memory");
				break;
			}
			capy_buf_printf(&G->g, "t%d-p%d-root \"\\n</parameter>\\n\"\n", ti, k);
			snprintf(pre, sizeof(pre), "t%d-p%d-", ti, k);
			snprintf(under, sizeof(under), "/properties/%s", key);
			rc = add_schema(G, sch, pre, name, under, types == OP_T_STRING);
			cJSON_Delete(sch);
			if (rc < 0)
				break;
		}
		k++;
	}
	capy_buf_puts(&body, " \"</function>\\n</tool_call>\"\n");
	if (rc == 0)
		capy_buf_add(&G->g, body.data, body.len);
	capy_buf_release(&body);
	if (rc < 0)
		return rc;
	capy_buf_printf(&G->g, "t%d ::= \"<function=\" ", ti);
	litz(&G->g, name);
	capy_buf_puts(&G->g, " \">\\n\" ");
	capy_buf_printf(&G->g, "t%d-body\n", ti);
	return 0;
}

/* Hermes: t<i>-body ::= ARGS "}\n</tool_call>"; t<i> ::= {"name": "NAME", "arguments": body. */
static int hermes_tool(struct gen *G, int ti, const char *name, const cJSON *params)
{
	struct capy_buf js = { 0 };
	char pre[32];
	int rc;

	snprintf(pre, sizeof(pre), "t%d-", ti);
	if ((rc = add_schema(G, params, pre, name, "", false)) < 0)
		return rc;
	capy_buf_printf(&G->g, "t%d-body ::= t%d-root \"}\\n</tool_call>\"\n", ti, ti);
	capy_buf_puts(&js, "{\"name\": ");
	capy_buf_json_str(&js, name, strlen(name));
	capy_buf_puts(&js, ", \"arguments\": ");
	capy_buf_printf(&G->g, "t%d ::= ", ti);
	lit(&G->g, js.data, js.len);
	capy_buf_printf(&G->g, " t%d-body\n", ti);
	capy_buf_release(&js);
	return js.oom ? capy_err_set(G->err, CAPY_ENOMEM, "out of memory") : 0;
}

int capy_grammar_reasoning_first(const char *gbnf, const char *inner, bool reasoning, char **out, struct capy_err *err)
{
	struct capy_buf b = { 0 };

	capy_buf_printf(&b, "root ::= %s%s\n", reasoning ? "think-raw \"</think>\" \"\\n\"{0,2} " : "", inner);
	if (reasoning)
		reasoning_rule(&b);
	capy_buf_puts(&b, gbnf);
	if (b.oom) {
		capy_buf_release(&b);
		*out = NULL;
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	}
	*out = capy_buf_detach(&b, NULL);
	return 0;
}

int capy_call_grammar(const char *tools_json, size_t len, const struct capy_call_grammar_opts *o, char **gbnf_out,
		      struct capy_err *err)
{
	struct gen G = { .o = o, .err = err };
	cJSON *tools = NULL;
	const cJSON *t;
	struct capy_buf alts = { 0 };
	int rc, n = 0, only_ti = -1;
	bool xml = o->syntax == CAPY_CALL_XML;

	*gbnf_out = NULL;
	if ((rc = capy_json_parse(tools_json, len, "tools", &tools, err)) < 0)
		return rc;
	if (!cJSON_IsArray(tools)) {
		rc = capy_err_set(err, CAPY_EINVAL, "tools: not a list");
		goto out;
	}
	cJSON_ArrayForEach(t, tools) {
		const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
		const cJSON *nm = cJSON_GetObjectItemCaseSensitive(fn, "name");
		const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
		cJSON *empty = NULL;
		int ti = n++;

		if (!cJSON_IsString(nm)) {
			rc = capy_err_set(err, CAPY_EINVAL, "tools[%d]: no function name", ti);
			goto out;
		}
		if (!utf8_ok(nm->valuestring)) {
			rc = capy_err_set(err, CAPY_EINVAL, "tools[%d]: the function name is not valid UTF-8", ti);
			goto out;
		}
		if (!allowed(o, nm->valuestring))
			continue;
		if (!name_ok(nm->valuestring)) { /* the parser would not read the call back */
			rc = capy_err_set(err, CAPY_EUNSUPPORTED, "tool '%s': the name cannot be written in the %s call "
					  "syntax", nm->valuestring, xml ? "XML" : "hermes");
			goto out;
		}
		if (!params && !(params = empty = cJSON_Parse("{\"type\":\"object\",\"properties\":{}}"))) {
			rc = capy_err_set(err, CAPY_ENOMEM, "out of memory");
			goto out;
		}
		rc = xml ? xml_tool(&G, ti, nm->valuestring, params) : hermes_tool(&G, ti, nm->valuestring, params);
		cJSON_Delete(empty);
		if (rc < 0)
			goto out;
		capy_buf_printf(&alts, "%st%d", alts.len ? " | " : "", ti);
		if (only_ti < 0)
			only_ti = ti;
	}
	if (!alts.len) {
		rc = o->only	  ? capy_err_set(err, CAPY_EINVAL, "tools: no function '%s'", o->only)
		     : o->allowed ? capy_err_set(err, CAPY_EINVAL, "tools: none of the allowed tools is defined")
				  : capy_err_set(err, CAPY_EINVAL, "tools: none");
		goto out;
	}
	/* the frame: [reasoning] call ("\n" call)* */
	capy_buf_printf(&G.g, "call ::= \"<tool_call>\\n\" ( %s )\n", alts.data);
	no_tag_rule(&G.g, "xml-raw", "/parameter>");
	if (o->free_text) /* content as the parser reads it: a <tool_call> there would be a call */
		no_tag_rule(&G.g, "content-raw", "tool_call>");
	reasoning_rule(&G.g);
	{
		struct capy_buf root = { 0 };
		capy_buf_puts(&root, "root ::= ");
		if (o->free_text) /* text, then calls if any; a call ends reasoning too */
			capy_buf_puts(&root, o->reasoning ? "think-raw ( \"</think>\" content-raw )? ( " : "content-raw ( ");
		else if (o->reasoning && !o->opened) /* a call ends reasoning too, as the parser has it */
			capy_buf_puts(&root, "think-raw ( \"</think>\" \"\\n\"{0,2} )? ");
		if (!o->opened || o->free_text)
			capy_buf_puts(&root, "call");
		else if (o->only)
			capy_buf_printf(&root, "t%d-body", only_ti);
		else
			capy_buf_printf(&root, "( %s )", alts.data);
		if (o->parallel)
			capy_buf_puts(&root, " ( \"\\n\" call )*");
		capy_buf_puts(&root, o->free_text ? " )?\n" : "\n");
		capy_buf_add(&root, G.g.data, G.g.len);
		capy_buf_release(&G.g);
		G.g = root;
	}
	if (G.g.oom || alts.oom) {
		rc = capy_err_set(err, CAPY_ENOMEM, "out of memory");
		goto out;
	}
	*gbnf_out = capy_buf_detach(&G.g, NULL);
	rc = 0;
out:
	if (rc < 0 && err) { /* the request's names are in it: one line, whatever they hold */
		char line[CAPY_ERR_MSG_MAX];
		capy_err_one_line(line, sizeof(line), err->msg);
		memcpy(err->msg, line, sizeof(line));
	}
	capy_buf_release(&G.g);
	capy_buf_release(&alts);
	cJSON_Delete(tools);
	return rc;
}
