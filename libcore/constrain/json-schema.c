/* json-schema.c - JSON Schema to GBNF (json-schema.h): the walk over a schema, the keywords
 * each type reads, objects (properties in order, optional ones skippable, other keys after
 * them), arrays, $ref targets as rules of their own (so recursion works), and the API.
 *
 * DESIGN: a schema is first normalized (a $ref with assertions beside it, and allOf, merged
 * into one schema: json-schema-merge.c); anyOf/oneOf then becomes alternatives, with the
 * keywords beside it merged into each branch; enum/const become literals; else each allowed
 * type gives an alternative built from the keywords of that type. A $ref alone is a rule
 * named once per target: a recursive schema refers to its own rule. A $ref loop that reads
 * no character on the way (a schema that is its own anyOf branch) is refused: the grammar
 * would be left-recursive. */
#include "json-schema-impl.h"
#include "grammar.h"
#include "util/json.h"

#include <math.h>

#define MAX_PROPERTIES 1000 /* of one object (the matcher's rule chains grow with them) */
#define MAX_TUPLE 256       /* prefixItems of one array */

/* --- keywords ----------------------------------------------------------------------------------- */

enum kw_kind { KW_SUPPORTED, KW_UNSUPPORTED };

static const struct keyword {
	const char *name;
	enum kw_kind kind;
} keywords[] = {
	{ "$ref", KW_SUPPORTED },
	{ "additionalItems", KW_SUPPORTED },
	{ "additionalProperties", KW_SUPPORTED },
	{ "allOf", KW_SUPPORTED },
	{ "anyOf", KW_SUPPORTED },
	{ "const", KW_SUPPORTED },
	{ "enum", KW_SUPPORTED },
	{ "exclusiveMaximum", KW_SUPPORTED },
	{ "exclusiveMinimum", KW_SUPPORTED },
	{ "format", KW_SUPPORTED },
	{ "items", KW_SUPPORTED },
	{ "maxItems", KW_SUPPORTED },
	{ "maxLength", KW_SUPPORTED },
	{ "maximum", KW_SUPPORTED },
	{ "minItems", KW_SUPPORTED },
	{ "minLength", KW_SUPPORTED },
	{ "minimum", KW_SUPPORTED },
	{ "oneOf", KW_SUPPORTED },
	{ "pattern", KW_SUPPORTED },
	{ "prefixItems", KW_SUPPORTED },
	{ "properties", KW_SUPPORTED },
	{ "required", KW_SUPPORTED },
	{ "type", KW_SUPPORTED },
	/* assertions a grammar of this kind cannot hold (or that we have not written) */
	{ "$dynamicRef", KW_UNSUPPORTED },
	{ "$recursiveRef", KW_UNSUPPORTED },
	{ "contains", KW_UNSUPPORTED },
	{ "dependencies", KW_UNSUPPORTED },
	{ "dependentRequired", KW_UNSUPPORTED },
	{ "dependentSchemas", KW_UNSUPPORTED },
	{ "if", KW_UNSUPPORTED },
	{ "maxProperties", KW_UNSUPPORTED },
	{ "minProperties", KW_UNSUPPORTED },
	{ "multipleOf", KW_UNSUPPORTED },
	{ "not", KW_UNSUPPORTED },
	{ "patternProperties", KW_UNSUPPORTED },
	{ "propertyNames", KW_UNSUPPORTED },
	{ "unevaluatedItems", KW_UNSUPPORTED },
	{ "unevaluatedProperties", KW_UNSUPPORTED },
	{ "uniqueItems", KW_UNSUPPORTED },
};

static const struct keyword *keyword(const char *key)
{
	for (size_t i = 0; i < ARRAY_SIZE(keywords); i++)
		if (!strcmp(keywords[i].name, key))
			return &keywords[i];
	return NULL;
}

bool js_keyword_is_annotation(const char *key)
{
	return !keyword(key);
}

/* An unsupported keyword whose value asks nothing (uniqueItems false, minProperties 0, ...). */
static bool asks_nothing(const cJSON *v)
{
	const char *k = v->string;

	if (!strcmp(k, "uniqueItems"))
		return cJSON_IsFalse(v);
	if (!strcmp(k, "minProperties"))
		return cJSON_IsNumber(v) && v->valuedouble <= 0;
	if (!strcmp(k, "unevaluatedProperties") || !strcmp(k, "unevaluatedItems") || !strcmp(k, "propertyNames"))
		return cJSON_IsTrue(v);
	return false;
}

/* Strict mode refuses the assertions we cannot hold; relaxed mode ignores them. */
static int check_keywords(struct js_ctx *c, const cJSON *s, const char *ptr)
{
	const cJSON *it;

	if (!c->opts->strict)
		return 0;
	cJSON_ArrayForEach(it, s) {
		const struct keyword *k = keyword(it->string);
		if (k && k->kind == KW_UNSUPPORTED && !asks_nothing(it)) {
			char at[JS_PTR_MAX];
			js_ptr_push(at, sizeof(at), ptr, it->string);
			return js_fail(c, CAPY_EUNSUPPORTED, at, "keyword \"%s\" is not supported", it->string);
		}
	}
	return 0;
}

/* Whether s asserts anything besides the keywords skip1 and skip2. */
static bool asserts_besides(const cJSON *s, const char *skip1, const char *skip2)
{
	const cJSON *it;

	cJSON_ArrayForEach(it, s)
		if (keyword(it->string) && strcmp(it->string, skip1) && strcmp(it->string, skip2))
			return true;
	return false;
}

static const cJSON *get(const cJSON *s, const char *key)
{
	return cJSON_GetObjectItemCaseSensitive(s, key);
}

/* A non-negative integer keyword: 1 when absent. */
static int get_count(struct js_ctx *c, const cJSON *s, const char *key, const char *ptr, uint64_t *out)
{
	const cJSON *v = get(s, key);

	if (!v)
		return 1;
	if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) || floor(v->valuedouble) != v->valuedouble) {
		char at[JS_PTR_MAX];
		js_ptr_push(at, sizeof(at), ptr, key);
		return js_fail(c, CAPY_EFORMAT, at, "\"%s\" must be a non-negative integer", key);
	}
	*out = v->valuedouble >= 1e18 ? JS_UNBOUNDED - 1 : (uint64_t)v->valuedouble;
	return 0;
}

/* --- the walk ----------------------------------------------------------------------------------- */

static const char *visit(struct js_ctx *c, const cJSON *s, const char *ptr);

/* The rule of a subschema at parent/key (or parent/key/index when index >= 0). */
static const char *visit_at(struct js_ctx *c, const cJSON *s, const char *parent, const char *key, int index)
{
	char at[JS_PTR_MAX];

	if (index >= 0)
		js_ptr_index(at, sizeof(at), parent, key, index);
	else
		js_ptr_push(at, sizeof(at), parent, key);
	return visit(c, s, at);
}

/* A subschema read inside a container (after its "{" or "["): a $ref loop through it reads. */
static const char *visit_inside(struct js_ctx *c, const cJSON *s, const char *parent, const char *key, int index)
{
	c->level++;
	const char *r = visit_at(c, s, parent, key, index);
	c->level--;
	return r;
}

static const char *rule_of(struct js_ctx *c, const char *hint, struct capy_buf *body)
{
	const char *r = js_rule(c, hint, body);

	capy_buf_release(body);
	return r;
}

/* The last token of a JSON pointer, for a rule's name. */
static const char *hint_of(const char *ptr)
{
	const char *slash = strrchr(ptr, '/');

	return slash ? slash + 1 : ptr;
}

/* --- strings ------------------------------------------------------------------------------------ */

static const struct format {
	const char *name;
	enum js_prim rule, raw; /* as a JSON string, as raw text */
} formats[] = {
	{ "date", P_DATE_STR, P_DATE }, { "time", P_TIME_STR, P_TIME }, { "date-time", P_DATE_TIME_STR, P_DATE_TIME },
	{ "uuid", P_UUID_STR, P_UUID }, { "email", P_EMAIL_STR, P_EMAIL }, { "ipv4", P_IPV4_STR, P_IPV4 },
};

static const struct format *format_of(const cJSON *s)
{
	const cJSON *f = get(s, "format");

	for (size_t i = 0; cJSON_IsString(f) && i < ARRAY_SIZE(formats); i++)
		if (!strcmp(f->valuestring, formats[i].name))
			return &formats[i];
	return NULL; /* other formats are annotations (as JSON Schema's default says) */
}

bool capy_json_schema_any_string(const cJSON *s)
{
	static const char *const holding[] = { "enum", "const", "pattern", "minLength", "maxLength",
						"anyOf", "oneOf", "allOf", "$ref" };

	for (size_t i = 0; i < ARRAY_SIZE(holding); i++)
		if (get(s, holding[i]))
			return false;
	return !format_of(s);
}

/* Two string keywords that we cannot hold together: strict refuses, relaxed keeps the first. */
static int string_conflict(struct js_ctx *c, const cJSON *s, const char *ptr, const char *kept)
{
	static const char *const lengths[] = { "minLength", "maxLength" };

	for (size_t i = 0; i < ARRAY_SIZE(lengths); i++)
		if (get(s, lengths[i]) && c->opts->strict)
			return js_fail(c, CAPY_EUNSUPPORTED, ptr, "\"%s\" together with \"%s\" is not supported", lengths[i], kept);
	return 0;
}

/* Any string: JSON's, or any raw text (without the raw stop's first character). */
static const char *any_string(struct js_ctx *c)
{
	struct capy_buf body = { 0 };

	if (!c->opts->raw)
		return js_prim(c, P_STRING);
	const char *ch = js_string_char(c);
	if (!ch)
		return NULL;
	capy_buf_printf(&body, "%s*", ch);
	const char *name = js_rule(c, "raw-string", &body);
	capy_buf_release(&body);
	return name;
}

/* A string's rule: JSON text with its quotes, or with opts->raw the characters themselves. */
static const char *string_rule(struct js_ctx *c, const cJSON *s, const char *ptr)
{
	const struct format *f = format_of(s);
	const cJSON *pattern = get(s, "pattern");
	const char *quote = c->opts->raw ? "" : "\"\\\"\"";
	uint64_t lo = 0, hi = JS_UNBOUNDED;
	int a, b;

	if (f && (pattern && c->opts->strict))
		return js_fail_null(c, CAPY_EUNSUPPORTED, ptr, "\"format\" together with \"pattern\" is not supported");
	if (f)
		return string_conflict(c, s, ptr, "format") ? NULL : js_prim(c, c->opts->raw ? f->raw : f->rule);
	if (pattern) {
		char at[JS_PTR_MAX];
		js_ptr_push(at, sizeof(at), ptr, "pattern");
		if (!cJSON_IsString(pattern))
			return js_fail_null(c, CAPY_EFORMAT, at, "\"pattern\" must be a string");
		if (string_conflict(c, s, ptr, "pattern"))
			return NULL;
		const char *r = js_pattern_rule(c, pattern->valuestring, at, false);
		if (r || c->opts->strict || c->rc != CAPY_EUNSUPPORTED)
			return r;
		/* relaxed: a pattern we cannot translate leaves any string */
		c->rc = 0;
		capy_err_clear(c->err);
		return any_string(c);
	}
	if ((a = get_count(c, s, "minLength", ptr, &lo)) < 0 || (b = get_count(c, s, "maxLength", ptr, &hi)) < 0)
		return NULL;
	if (a && b)
		return any_string(c);
	if (lo > hi)
		return js_fail_null(c, CAPY_EFORMAT, ptr, "minLength is above maxLength");
	struct capy_buf body = { 0 };
	capy_buf_puts(&body, quote);
	if (js_repeat(c, &body, js_string_char(c), lo, hi)) {
		capy_buf_release(&body);
		return NULL;
	}
	capy_buf_printf(&body, " %s", *quote || hi ? quote : "\"\""); /* raw and empty: a rule needs a body */
	return rule_of(c, "string", &body);
}

/* --- arrays ------------------------------------------------------------------------------------- */

/* ( "," ws item ws ){lo,hi} appended to body. */
static int more_items(struct js_ctx *c, struct capy_buf *body, const char *item, uint64_t lo, uint64_t hi)
{
	struct capy_buf one = { 0 };

	if (!hi)
		return 0;
	capy_buf_printf(&one, "\",\" ws %s ws", item);
	const char *more = rule_of(c, "more", &one);
	return more ? js_repeat(c, body, more, lo, hi) : c->rc;
}

/* The schema of the items after the tuple: items (after prefixItems) or additionalItems
 * (after items as a list); NULL when any item may follow. */
static const cJSON *rest_items(const cJSON *s, const cJSON **tuple)
{
	const cJSON *prefix = get(s, "prefixItems"), *items = get(s, "items");

	if (cJSON_IsArray(prefix)) {
		*tuple = prefix;
		return items;
	}
	if (cJSON_IsArray(items)) {
		*tuple = items;
		return get(s, "additionalItems");
	}
	*tuple = NULL;
	return items;
}

/* The tuple's items i.. as what follows item i - 1: ( "," ws P_i ws <the rest> ), optional
 * from index lo on. */
static const char *tuple_tail(struct js_ctx *c, const cJSON *tuple, const char *tkey, int i, int k, const char *rest,
			      uint64_t lo, uint64_t hi, const char *ptr)
{
	struct capy_buf body = { 0 };

	if ((uint64_t)i >= hi)
		return "\"\"";
	if (i == k) { /* after the tuple: the rest items, if any */
		if (!rest || hi == (uint64_t)k)
			return "\"\"";
		if (more_items(c, &body, rest, lo > (uint64_t)k ? lo - k : 0, hi == JS_UNBOUNDED ? hi : hi - k)) {
			capy_buf_release(&body);
			return NULL;
		}
		return body.data ? rule_of(c, "rest", &body) : "\"\"";
	}
	const char *item = visit_inside(c, cJSON_GetArrayItem(tuple, i), ptr, tkey, i);
	const char *next = item ? tuple_tail(c, tuple, tkey, i + 1, k, rest, lo, hi, ptr) : NULL;
	if (!next)
		return NULL;
	capy_buf_printf(&body, "( \",\" ws %s ws %s )%s", item, next, (uint64_t)i >= lo ? "?" : "");
	return rule_of(c, "tuple", &body);
}

static const char *array_rule(struct js_ctx *c, const cJSON *s, const char *ptr)
{
	const cJSON *tuple, *rest = rest_items(s, &tuple);
	const char *rkey = tuple && get(s, "prefixItems") ? "items" : tuple ? "additionalItems" : "items";
	uint64_t lo = 0, hi = JS_UNBOUNDED;
	struct capy_buf body = { 0 };

	if (!js_prim(c, P_WS) || get_count(c, s, "minItems", ptr, &lo) < 0 || get_count(c, s, "maxItems", ptr, &hi) < 0)
		return NULL;
	if (lo > hi)
		return js_fail_null(c, CAPY_EFORMAT, ptr, "minItems is above maxItems");
	if (rest && !cJSON_IsObject(rest) && !cJSON_IsBool(rest))
		return visit_at(c, rest, ptr, rkey, -1); /* (reports the malformed schema) */
	int k = tuple ? cJSON_GetArraySize(tuple) : 0;
	if (k > MAX_TUPLE)
		return js_fail_null(c, CAPY_EUNSUPPORTED, ptr, "more than %d prefixItems", MAX_TUPLE);
	uint64_t most = cJSON_IsFalse(rest) ? (uint64_t)k : hi;
	if (lo > most)
		return js_fail_null(c, CAPY_EFORMAT, ptr, "minItems asks for more items than the schema allows");
	const char *rest_rule = cJSON_IsFalse(rest) ? NULL : rest ? visit_inside(c, rest, ptr, rkey, -1) : js_prim(c, P_VALUE);
	if (!cJSON_IsFalse(rest) && !rest_rule)
		return NULL;
	const char *first = NULL, *after = NULL;
	if (!k && !rest_rule) { /* nothing may be in it */
		most = 0;
		first = after = "\"\"";
	} else if (k) {
		const char *tkey = tuple == get(s, "prefixItems") ? "prefixItems" : "items";
		first = visit_inside(c, cJSON_GetArrayItem(tuple, 0), ptr, tkey, 0);
		after = first ? tuple_tail(c, tuple, tkey, 1, k, rest_rule, lo, most, ptr) : NULL;
	} else {
		struct capy_buf more = { 0 };
		first = rest_rule;
		if (more_items(c, &more, rest_rule, lo ? lo - 1 : 0, most == JS_UNBOUNDED ? most : most - 1)) {
			capy_buf_release(&more);
			return NULL;
		}
		after = more.data ? rule_of(c, "items", &more) : "\"\"";
	}
	if (!first || !after)
		return NULL;
	if (most == 0)
		capy_buf_puts(&body, "\"[\" ws \"]\"");
	else
		capy_buf_printf(&body, "\"[\" ws ( %s ws %s )%s \"]\"", first, after, lo ? "" : "?");
	return rule_of(c, "array", &body);
}

/* --- objects ------------------------------------------------------------------------------------- */

#define MAX_KEY_TRIE 1024    /* bytes of a property name when other keys must differ from it */
#define MAX_KEY_BRANCHES 100 /* names going on differently after a shared start, then */

struct prop {
	const char *name; /* as in the schema */
	const char *kv;   /* the rule of "name" ws ":" ws value ws; NULL: the name must not appear */
	bool required;
};

/* The key strings that are none of names[0..n) (JSON string contents, as written between the
 * quotes), after the opening quote and the `depth` bytes they share: a trie, a rule a node.
 * At a node a key may end (unless a name ends there), go on with a character no name has
 * next (then anything may follow), or follow a name's next character. A backslash is never
 * taken while a name could still match: its escape could spell that name's next character. */
static const char *other_keys(struct js_ctx *c, const char **names, const size_t *lens, size_t n, size_t depth,
			      const char *ptr)
{
	struct capy_buf body = { 0 }, cls = { 0 };
	const char **sub = malloc(n * sizeof(*sub)), *sep = "", *r = NULL;
	size_t *sublen = malloc(n * sizeof(*sublen)), children = 0;
	bool ends = false;

	if (!sub || !sublen) {
		js_oom(c);
		goto out;
	}
	capy_buf_puts(&cls, "[^\"\\\\\\x00-\\x1f");
	for (size_t i = 0; i < n; i++)
		ends |= lens[i] == depth;
	if (!ends) {
		capy_buf_puts(&body, "\"\\\"\"");
		sep = " | ";
	}
	for (size_t i = 0; i < n; i++) { /* each distinct next character: a child */
		uint32_t cp;
		unsigned k = lens[i] > depth ? js_utf8_next(names[i] + depth, lens[i] - depth, &cp) : 0;
		bool seen = false;
		if (!k || names[i][depth] == '\\')
			continue;
		for (size_t j = 0; j < i && !seen; j++)
			seen = lens[j] >= depth + k && !memcmp(names[j] + depth, names[i] + depth, k);
		if (seen)
			continue;
		size_t m = 0;
		for (size_t j = i; j < n; j++)
			if (lens[j] >= depth + k && !memcmp(names[j] + depth, names[i] + depth, k)) {
				sub[m] = names[j];
				sublen[m++] = lens[j];
			}
		if (++children > MAX_KEY_BRANCHES) { /* (a class holds at most 128 ranges) */
			js_fail(c, CAPY_EUNSUPPORTED, ptr, "more than %d property names go on differently after the same "
				"start, beside additionalProperties", MAX_KEY_BRANCHES);
			goto out;
		}
		const char *child = other_keys(c, sub, sublen, m, depth + k, ptr);
		if (!child)
			goto out;
		capy_buf_puts(&body, sep);
		js_literal(&body, names[i] + depth, k);
		capy_buf_printf(&body, " %s", child);
		js_class_char(&cls, cp);
		sep = " | ";
	}
	capy_buf_printf(&body, "%s%s] %s* \"\\\"\"", sep, cls.data, js_prim(c, P_CHAR));
	r = js_rule(c, "other-key", &body);
out:
	free(sub);
	free(sublen);
	capy_buf_release(&cls);
	capy_buf_release(&body);
	return r;
}

/* The rule of one member: key ws ":" ws value ws. */
static const char *member_rule(struct js_ctx *c, const char *key_rule, const char *value)
{
	struct capy_buf body = { 0 };

	capy_buf_printf(&body, "%s ws \":\" ws %s ws", key_rule, value);
	return rule_of(c, "kv", &body);
}

/* A key as JSON text: what the model writes, quotes included. */
static void json_key(struct capy_buf *b, const char *name)
{
	capy_buf_json_str(b, name, strlen(name));
}

static const char *known_member(struct js_ctx *c, const char *name, const char *value)
{
	struct capy_buf key = { 0 }, lit = { 0 };
	const char *r = NULL;

	json_key(&key, name);
	js_literal(&lit, key.data, key.len);
	if (key.oom || lit.oom)
		js_oom(c);
	else
		r = member_rule(c, lit.data, value);
	capy_buf_release(&key);
	capy_buf_release(&lit);
	return r;
}

/* Members of other keys: a key that is no property's name, and the additionalProperties value. */
static const char *extra_member(struct js_ctx *c, const struct prop *p, size_t n, const char *value, const char *ptr)
{
	struct capy_buf *keys = calloc(n + 1, sizeof(*keys)), open = { 0 };
	const char **names = malloc((n + 1) * sizeof(*names)), *rest = NULL, *key = NULL;
	size_t *lens = malloc((n + 1) * sizeof(*lens));
	bool ok = keys && names && lens;

	for (size_t i = 0; ok && i < n; i++) {
		json_key(&keys[i], p[i].name);
		ok = !keys[i].oom;
		names[i] = keys[i].data + 1; /* between the quotes */
		lens[i] = keys[i].len - 2;
		if (ok && lens[i] > MAX_KEY_TRIE) {
			js_fail(c, CAPY_EUNSUPPORTED, ptr, "a property name longer than %d bytes beside additionalProperties",
				MAX_KEY_TRIE);
			goto out;
		}
	}
	if (!ok) {
		js_oom(c);
		goto out;
	}
	if ((rest = other_keys(c, names, lens, n, 0, ptr))) {
		capy_buf_printf(&open, "\"\\\"\" %s", rest);
		key = rule_of(c, "other-key", &open);
	}
out:
	for (size_t i = 0; keys && i < n; i++)
		capy_buf_release(&keys[i]);
	free(keys);
	free(names);
	free(lens);
	return key ? member_rule(c, key, value) : NULL;
}

/* The members: required ones present, optional ones skippable, in order, then other keys
 * (extra, any number) if allowed. Built from the end: first is what may come when nothing is
 * written yet and the properties from i on remain, then the same after something (a comma
 * first); "" stands for nothing. Returns first for i = 0, as a rule (or ""). */
static const char *members_rule(struct js_ctx *c, const struct prop *p, size_t n, const char *extra)
{
	struct capy_buf body = { 0 };
	const char *first = "", *then = "";

	if (extra) {
		capy_buf_printf(&body, "( \",\" ws %s )*", extra);
		if (!(then = rule_of(c, "extra", &body)))
			return NULL;
		capy_buf_printf(&body, "( %s %s )?", extra, then);
		if (!(first = rule_of(c, "extra", &body)))
			return NULL;
	}
	for (size_t i = n; i-- > 0;) {
		if (!p[i].kv)
			continue;
		if (p[i].required)
			capy_buf_printf(&body, "%s %s", p[i].kv, then);
		else if (*first)
			capy_buf_printf(&body, "%s %s | %s", p[i].kv, then, first);
		else
			capy_buf_printf(&body, "( %s %s )?", p[i].kv, then);
		const char *f = rule_of(c, "first", &body);
		if (!f)
			return NULL;
		if (i) { /* (nothing comes before the first property) */
			if (p[i].required)
				capy_buf_printf(&body, "\",\" ws %s %s", p[i].kv, then);
			else
				capy_buf_printf(&body, "( \",\" ws %s )? %s", p[i].kv, then);
			if (!(then = rule_of(c, "then", &body)))
				return NULL;
		}
		first = f;
	}
	return first;
}

static bool listed(const cJSON *list, const char *name)
{
	const cJSON *it;

	cJSON_ArrayForEach(it, list)
		if (cJSON_IsString(it) && !strcmp(it->valuestring, name))
			return true;
	return false;
}

static int add_prop(struct js_ctx *c, struct prop *p, size_t *n, const char *name, const char *at)
{
	if (*n == MAX_PROPERTIES)
		return js_fail(c, CAPY_EUNSUPPORTED, at, "more than %d properties", MAX_PROPERTIES);
	if (!js_utf8_valid(name, strlen(name)))
		return js_fail(c, CAPY_EFORMAT, at, "a property name is not valid UTF-8");
	p[*n] = (struct prop){ name, NULL, false };
	++*n;
	return 0;
}

/* The listed properties: each name once, a value schema each (false: must not appear). */
static int read_properties(struct js_ctx *c, const cJSON *props, const cJSON *req, const char *ptr, struct prop *p,
			   size_t *n)
{
	const cJSON *it;
	char at[JS_PTR_MAX];

	js_ptr_push(at, sizeof(at), ptr, "properties");
	cJSON_ArrayForEach(it, props) {
		for (size_t j = 0; j < *n; j++)
			if (!strcmp(p[j].name, it->string))
				return js_fail(c, CAPY_EFORMAT, at, "property \"%.100s\" is listed twice", it->string);
		if (add_prop(c, p, n, it->string, at))
			return c->rc;
		struct prop *q = &p[*n - 1];
		q->required = listed(req, it->string);
		if (cJSON_IsFalse(it)) {
			if (q->required)
				return js_fail(c, CAPY_EFORMAT, at, "property \"%.100s\" is required, but its schema is false",
					       it->string);
			continue;
		}
		const char *value = visit_inside(c, it, at, it->string, -1);
		if (!value || !(q->kv = known_member(c, it->string, value)))
			return c->rc;
	}
	return 0;
}

/* Required names that properties does not list: members at the end, with the value
 * additionalProperties gives (any value when it gives none). */
static int add_unlisted_required(struct js_ctx *c, const cJSON *req, const cJSON *extra, const char *extra_value,
				 const char *ptr, struct prop *p, size_t *n)
{
	const cJSON *it;
	char at[JS_PTR_MAX];

	js_ptr_push(at, sizeof(at), ptr, "required");
	cJSON_ArrayForEach(it, req) {
		bool known = false;
		if (!cJSON_IsString(it))
			return js_fail(c, CAPY_EFORMAT, at, "\"required\" must list strings");
		for (size_t j = 0; j < *n && !known; j++)
			known = !strcmp(p[j].name, it->valuestring);
		if (known)
			continue;
		if (cJSON_IsFalse(extra))
			return js_fail(c, CAPY_EFORMAT, at, "property \"%.100s\" is required, but additionalProperties is false "
				       "and properties does not list it", it->valuestring);
		const char *value = extra_value ? extra_value : js_prim(c, P_VALUE);
		if (add_prop(c, p, n, it->valuestring, at))
			return c->rc;
		p[*n - 1].required = true;
		if (!value || !(p[*n - 1].kv = known_member(c, it->valuestring, value)))
			return c->rc;
	}
	return 0;
}

static const char *object_rule(struct js_ctx *c, const cJSON *s, const char *ptr)
{
	const cJSON *props = get(s, "properties"), *req = get(s, "required"), *extra = get(s, "additionalProperties");
	const char *extra_value = NULL, *extra_kv = NULL, *members = NULL;
	struct capy_buf body = { 0 };
	size_t n = 0;

	if (props && !cJSON_IsObject(props))
		return js_fail_null(c, CAPY_EFORMAT, ptr, "\"properties\" must be an object");
	if (req && !cJSON_IsArray(req))
		return js_fail_null(c, CAPY_EFORMAT, ptr, "\"required\" must be an array");
	if (extra && !cJSON_IsBool(extra) && !cJSON_IsObject(extra))
		return visit_at(c, extra, ptr, "additionalProperties", -1); /* (reports it) */
	if (!js_prim(c, P_WS))
		return NULL;
	/* absent: no other keys when properties lists some, any when it does not (llama.cpp reads
	 * it so: a model should write the keys it is shown, not invent others) */
	bool others = extra ? !cJSON_IsFalse(extra) : !props;
	if (!props && !req && others && !cJSON_IsObject(extra))
		return js_prim(c, P_OBJECT);
	if (others && !(extra_value = cJSON_IsObject(extra) ? visit_inside(c, extra, ptr, "additionalProperties", -1)
							   : js_prim(c, P_VALUE)))
		return NULL;
	struct prop *p = malloc((MAX_PROPERTIES + 1) * sizeof(*p));
	if (!p)
		return js_oom_null(c);
	if (!read_properties(c, props, req, ptr, p, &n) &&
	    !add_unlisted_required(c, req, extra, cJSON_IsObject(extra) ? extra_value : NULL, ptr, p, &n) &&
	    (!others || (extra_kv = extra_member(c, p, n, extra_value, ptr))))
		members = members_rule(c, p, n, extra_kv);
	free(p);
	if (!members)
		return NULL;
	capy_buf_printf(&body, "\"{\" ws %s%s\"}\"", members, *members ? " " : "");
	return rule_of(c, "object", &body);
}

/* --- types, values and combinations --------------------------------------------------------------- */

enum { T_NULL = 1, T_BOOLEAN = 2, T_OBJECT = 4, T_ARRAY = 8, T_NUMBER = 16, T_STRING = 32, T_INTEGER = 64, T_ALL = 127 };

static const char *const type_names[] = { "null", "boolean", "object", "array", "number", "string", "integer" };

/* The types a schema allows: its "type", else those its keywords are about, else all. */
static int types_of(struct js_ctx *c, const cJSON *s, const char *ptr, unsigned *bits)
{
	static const struct {
		const char *key;
		unsigned type;
	} implied[] = {
		{ "properties", T_OBJECT },   { "required", T_OBJECT },	      { "additionalProperties", T_OBJECT },
		{ "items", T_ARRAY },	      { "prefixItems", T_ARRAY },     { "minItems", T_ARRAY },
		{ "maxItems", T_ARRAY },      { "minLength", T_STRING },      { "maxLength", T_STRING },
		{ "pattern", T_STRING },      { "minimum", T_NUMBER },	      { "maximum", T_NUMBER },
		{ "exclusiveMinimum", T_NUMBER }, { "exclusiveMaximum", T_NUMBER },
	};
	const cJSON *t = get(s, "type"), *it;
	char at[JS_PTR_MAX];

	*bits = 0;
	if (!t) {
		for (size_t i = 0; i < ARRAY_SIZE(implied); i++)
			if (get(s, implied[i].key))
				*bits |= implied[i].type;
		if (format_of(s))
			*bits |= T_STRING;
		if (!*bits)
			*bits = T_ALL;
		return 0;
	}
	js_ptr_push(at, sizeof(at), ptr, "type");
	for (it = cJSON_IsArray(t) ? t->child : t; it; it = cJSON_IsArray(t) ? it->next : NULL) {
		unsigned bit = 0;
		for (unsigned i = 0; cJSON_IsString(it) && i < ARRAY_SIZE(type_names); i++)
			if (!strcmp(it->valuestring, type_names[i]))
				bit = 1u << i;
		if (!bit)
			return js_fail(c, CAPY_EFORMAT, at, "\"type\" must be one of null, boolean, object, array, number, string, "
				       "integer, or a list of them");
		*bits |= bit;
	}
	if (!*bits)
		return js_fail(c, CAPY_EFORMAT, at, "an empty list of types matches nothing");
	return 0;
}

static const char *number_rule(struct js_ctx *c, const cJSON *s, bool integer, const char *ptr)
{
	struct js_bounds b;
	int r = js_bounds_read(c, s, integer, ptr, &b);

	if (r < 0)
		return NULL;
	if (r > 0)
		return js_prim(c, integer ? P_INTEGER : P_NUMBER);
	return js_number_rule(c, &b, integer, ptr);
}

static const char *type_rule(struct js_ctx *c, const cJSON *s, unsigned type, const char *ptr)
{
	switch (type) {
	case T_NULL:
		return js_prim(c, P_NULL);
	case T_BOOLEAN:
		return js_prim(c, P_BOOLEAN);
	case T_OBJECT:
		return object_rule(c, s, ptr);
	case T_ARRAY:
		return array_rule(c, s, ptr);
	case T_NUMBER:
	case T_INTEGER:
		return number_rule(c, s, type == T_INTEGER, ptr);
	default:
		return string_rule(c, s, ptr);
	}
}

/* alternatives names[0..n) as one rule (or the one name). */
static const char *either(struct js_ctx *c, const char *hint, const char **names, size_t n)
{
	struct capy_buf body = { 0 };

	if (n == 1)
		return names[0];
	for (size_t i = 0; i < n; i++)
		capy_buf_printf(&body, "%s%s", i ? " | " : "", names[i]);
	return rule_of(c, hint, &body);
}

static const char *typed_rule(struct js_ctx *c, const cJSON *s, const char *ptr)
{
	const char *alts[7];
	size_t n = 0;
	unsigned bits;

	if (types_of(c, s, ptr, &bits))
		return NULL;
	if (c->opts->raw) { /* only its strings can be written raw */
		if (!(bits & T_STRING))
			return js_fail_null(c, CAPY_EUNSUPPORTED, ptr, "a value written as raw text must be a string");
		return string_rule(c, s, ptr);
	}
	if (bits == T_ALL && !get(s, "type"))
		return js_prim(c, P_VALUE); /* no keyword of any type */
	if (bits & T_NUMBER)
		bits &= ~T_INTEGER; /* the numbers within the same bounds hold the integers */
	for (unsigned t = 1; t <= T_INTEGER; t <<= 1)
		if (bits & t && !(alts[n++] = type_rule(c, s, t, ptr)))
			return NULL;
	return either(c, hint_of(ptr), alts, n);
}

/* The JSON type bit of a value (integral numbers count as integers too). */
static unsigned value_type(const cJSON *v)
{
	if (cJSON_IsNull(v))
		return T_NULL;
	if (cJSON_IsBool(v))
		return T_BOOLEAN;
	if (cJSON_IsObject(v))
		return T_OBJECT;
	if (cJSON_IsArray(v))
		return T_ARRAY;
	if (cJSON_IsString(v))
		return T_STRING;
	return floor(v->valuedouble) == v->valuedouble ? T_NUMBER | T_INTEGER : T_NUMBER;
}

/* No number in v is infinite (cJSON would write it as null). */
static bool finite_numbers(const cJSON *v)
{
	const cJSON *it, *list = cJSON_IsArray(v) || cJSON_IsObject(v) ? v : NULL;

	if (cJSON_IsNumber(v))
		return isfinite(v->valuedouble);
	cJSON_ArrayForEach(it, list)
		if (!finite_numbers(it))
			return false;
	return true;
}

/* enum/const: each value as its JSON text (keys and spacing as cJSON writes them), those of
 * an allowed type; the schema's other keywords are not applied to them. */
static const char *values_rule(struct js_ctx *c, const cJSON *s, const char *ptr)
{
	const cJSON *one = get(s, "const"), *list = get(s, "enum");
	struct capy_buf body = { 0 };
	unsigned bits = T_ALL;
	const char *sep = "";

	if (!one && !cJSON_IsArray(list))
		return js_fail_null(c, CAPY_EFORMAT, ptr, "\"enum\" must be an array");
	if (get(s, "type") && types_of(c, s, ptr, &bits))
		return NULL;
	if (c->opts->raw)
		bits &= T_STRING;
	for (const cJSON *v = one ? one : list->child; v; v = one ? NULL : v->next) {
		if (!(value_type(v) & bits))
			continue;
		if (c->opts->raw) { /* the string itself, unless it holds the raw text's end */
			if (c->opts->raw_stop && *c->opts->raw_stop && strstr(v->valuestring, c->opts->raw_stop))
				continue;
			if (!js_utf8_valid(v->valuestring, strlen(v->valuestring))) {
				capy_buf_release(&body);
				return js_fail_null(c, CAPY_EFORMAT, ptr, "a value of %s is not valid UTF-8", one ? "const" : "enum");
			}
			capy_buf_puts(&body, sep);
			js_literal(&body, v->valuestring, strlen(v->valuestring));
			sep = " | ";
			continue;
		}
		char *text = cJSON_PrintUnformatted(v);
		if (!text) {
			capy_buf_release(&body);
			return js_oom_null(c);
		}
		if (!js_utf8_valid(text, strlen(text)) || !finite_numbers(v)) {
			cJSON_free(text);
			capy_buf_release(&body);
			return js_fail_null(c, CAPY_EFORMAT, ptr, "a value of %s is not valid UTF-8 or not a finite number",
					    one ? "const" : "enum");
		}
		capy_buf_puts(&body, sep);
		js_literal(&body, text, strlen(text));
		cJSON_free(text);
		sep = " | ";
	}
	if (!body.len)
		return js_fail_null(c, CAPY_EFORMAT, ptr, "no value of %s has an allowed type", one ? "const" : "enum");
	return rule_of(c, one ? "const" : "enum", &body);
}

/* anyOf/oneOf (oneOf read as anyOf): one alternative per branch, with the keywords beside it
 * merged into each branch. */
static const char *choice_rule(struct js_ctx *c, const cJSON *s, const char *key, const char *ptr)
{
	const cJSON *list = get(s, key), *it;
	char at[JS_PTR_MAX];
	const char **alts;
	size_t n = 0;

	js_ptr_push(at, sizeof(at), ptr, key);
	if (!cJSON_IsArray(list) || !cJSON_GetArraySize(list))
		return js_fail_null(c, CAPY_EFORMAT, at, "\"%s\" must be a non-empty array of schemas", key);
	if (!(alts = malloc((size_t)cJSON_GetArraySize(list) * sizeof(*alts))))
		return js_oom_null(c);
	bool beside = asserts_besides(s, key, key);
	cJSON_ArrayForEach(it, list) {
		char bp[JS_PTR_MAX];
		js_ptr_index(bp, sizeof(bp), at, NULL, (int)n);
		const cJSON *branch = beside ? js_branch(c, s, key, it) : it;
		if (!branch || !(alts[n++] = visit(c, branch, bp)))
			break;
	}
	const char *out = c->rc ? NULL : either(c, hint_of(ptr), alts, n);
	free(alts);
	return out;
}

/* The rule of the $ref target (one per target, made on first use). */
static const char *ref_rule(struct js_ctx *c, const cJSON *ref, const char *ptr)
{
	const cJSON *target = js_resolve(c, ref, ptr);

	if (!target)
		return NULL;
	for (uint32_t i = 0; i < c->nrefs; i++) {
		struct js_ref *r = &c->refs[i];
		if (r->target != target)
			continue;
		if (r->open && r->open_level == c->level)
			return js_fail_null(c, CAPY_EUNSUPPORTED, ptr,
				       "$ref \"%.200s\" comes back to itself without reading anything (left recursion)",
				       ref->valuestring);
		return r->name;
	}
	if (!js_grow(&c->refs, &c->refcap, c->nrefs, sizeof(*c->refs)))
		return js_oom_null(c);
	const char *name = js_reserve(c, cJSON_IsString(ref) ? hint_of(ref->valuestring) : "ref");
	if (!name)
		return NULL;
	uint32_t idx = c->nrefs++;
	c->refs[idx] = (struct js_ref){ target, name, c->level, true };
	const char *body = visit(c, target, cJSON_IsString(ref) && ref->valuestring[1] ? ref->valuestring + 1 : "");
	c->refs[idx].open = false;
	if (!body || js_define(c, name, body))
		return NULL;
	return name;
}

static const char *visit(struct js_ctx *c, const cJSON *s, const char *ptr)
{
	const char *r = NULL;

	if (c->rc)
		return NULL;
	if (cJSON_IsTrue(s))
		return js_prim(c, P_VALUE);
	if (cJSON_IsFalse(s))
		return js_fail_null(c, CAPY_EFORMAT, ptr, "the schema false matches nothing");
	if (!cJSON_IsObject(s))
		return js_fail_null(c, CAPY_EFORMAT, ptr, "a schema must be an object or a boolean");
	if (++c->work > JS_MAX_WORK)
		return js_fail_null(c, CAPY_EUNSUPPORTED, ptr, "too complex: more than %d schemas to visit", JS_MAX_WORK);
	if (c->depth >= JS_MAX_DEPTH)
		return js_fail_null(c, CAPY_EUNSUPPORTED, ptr, "nested more than %d deep", JS_MAX_DEPTH);
	if (check_keywords(c, s, ptr))
		return NULL;
	c->depth++;
	const cJSON *ref = get(s, "$ref");
	if (ref && !asserts_besides(s, "$ref", "$ref")) {
		r = ref_rule(c, ref, ptr);
	} else if (ref || get(s, "allOf")) {
		const cJSON *n = js_normalize(c, s, ptr);
		r = !n ? NULL : n == s ? NULL : visit(c, n, ptr);
	} else if (get(s, "anyOf")) {
		r = choice_rule(c, s, "anyOf", ptr);
	} else if (get(s, "oneOf")) {
		r = choice_rule(c, s, "oneOf", ptr);
	} else if (get(s, "const") || get(s, "enum")) {
		r = values_rule(c, s, ptr);
	} else {
		r = typed_rule(c, s, ptr);
	}
	c->depth--;
	return c->rc ? NULL : r;
}

/* --- the API ------------------------------------------------------------------------------------- */

int capy_json_schema_tree_to_gbnf(const cJSON *schema, const struct capy_schema_opts *opts, char **gbnf_out,
				  struct capy_err *err)
{
	static const struct capy_schema_opts defaults = { 0 };
	struct js_ctx c = { .opts = opts ? opts : &defaults, .err = err, .root = schema };

	*gbnf_out = NULL;
	if (c.opts->raw && c.opts->raw_stop && *c.opts->raw_stop &&
	    !js_utf8_next(c.opts->raw_stop, strlen(c.opts->raw_stop), &c.raw_stop_cp))
		return capy_err_set(err, CAPY_EINVAL, "schema: raw_stop is not valid UTF-8");
	const char *root = visit(&c, schema, "");
	if (root)
		*gbnf_out = js_text(&c, root);
	js_ctx_release(&c);
	return *gbnf_out ? 0 : c.rc ? c.rc : CAPY_ENOMEM;
}

int capy_json_schema_to_gbnf(const char *schema_json, size_t len, const struct capy_schema_opts *opts, char **gbnf_out,
			     struct capy_err *err)
{
	cJSON *tree = NULL;

	*gbnf_out = NULL;
	if (len > JS_MAX_INPUT)
		return capy_err_set(err, CAPY_EUNSUPPORTED, "schema: too large: %zu bytes (the limit is %u)", len, JS_MAX_INPUT);
	if (capy_json_parse(schema_json, len, "schema", &tree, err) < 0)
		return err ? err->code : CAPY_EFORMAT;
	int rc = capy_json_schema_tree_to_gbnf(tree, opts, gbnf_out, err);
	cJSON_Delete(tree);
	return rc;
}

int capy_json_schema_compile(const char *schema_json, size_t len, const struct capy_schema_opts *opts,
			     struct capy_grammar **out, struct capy_err *err)
{
	char *gbnf;
	int rc = capy_json_schema_to_gbnf(schema_json, len, opts, &gbnf, err);

	*out = NULL;
	if (rc < 0)
		return rc;
	char root[128];
	snprintf(root, sizeof(root), "%sroot", opts && opts->prefix ? opts->prefix : "");
	rc = capy_grammar_compile(gbnf, strlen(gbnf), root, out, err);
	if (rc < 0)
		capy_err_prefix(err, "schema: the grammar it made");
	free(gbnf);
	return rc;
}
