/* json-schema-merge.c - $ref resolution and allOf: a schema whose top holds a $ref (with other
 * assertions beside it) or an allOf becomes one schema with the same meaning, its keywords
 * combined (types intersected, properties merged, bounds tightened, anyOf branches crossed).
 * Merged schemas are new cJSON objects that point into the original tree (cJSON references),
 * kept in the context until the end. */
#include "json-schema-impl.h"

#define MAX_CROSS 256 /* anyOf branches an allOf may multiply into */

static cJSON *temp(struct js_ctx *c, cJSON *item)
{
	if (!item) {
		js_oom(c);
		return NULL;
	}
	if (!js_grow(&c->temps, &c->tempcap, c->ntemps, sizeof(*c->temps))) {
		cJSON_Delete(item);
		js_oom(c);
		return NULL;
	}
	c->temps[c->ntemps++] = item;
	return item;
}

const cJSON *js_true_schema(struct js_ctx *c)
{
	return temp(c, cJSON_CreateTrue());
}

static bool oom(struct js_ctx *c)
{
	js_oom(c);
	return false;
}

/* --- $ref ---------------------------------------------------------------------------------------- */

/* One reference token of a JSON pointer in a URI fragment: %XX, ~0 and ~1 decoded. */
static bool pointer_token(const char *s, size_t n, char *out, size_t cap)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++) {
		char ch = s[i];
		if (ch == '%' && i + 2 < n && js_hex_digit(s[i + 1]) >= 0 && js_hex_digit(s[i + 2]) >= 0) {
			ch = (char)(js_hex_digit(s[i + 1]) * 16 + js_hex_digit(s[i + 2]));
			i += 2;
		} else if (ch == '~' && i + 1 < n && (s[i + 1] == '0' || s[i + 1] == '1')) {
			ch = s[++i] == '0' ? '~' : '/';
		} else if (ch == '~') {
			return false;
		}
		if (k + 1 >= cap)
			return false;
		out[k++] = ch;
	}
	out[k] = 0;
	return true;
}

const cJSON *js_resolve(struct js_ctx *c, const cJSON *ref, const char *ptr)
{
	char at[JS_PTR_MAX], token[256];

	js_ptr_push(at, sizeof(at), ptr, "$ref");
	if (!cJSON_IsString(ref)) {
		js_fail(c, CAPY_EFORMAT, at, "\"$ref\" must be a string");
		return NULL;
	}
	const char *s = ref->valuestring;
	if (s[0] != '#' || (s[1] && s[1] != '/')) {
		if (!c->opts->strict)
			return js_true_schema(c); /* relaxed: any value */
		js_fail(c, CAPY_EUNSUPPORTED, at, "$ref \"%.200s\" is not supported (only local JSON pointers: \"#/...\")", s);
		return NULL;
	}
	const cJSON *node = c->root;
	for (const char *p = s + 1; *p == '/';) {
		const char *end = strchr(p + 1, '/');
		size_t n = end ? (size_t)(end - p - 1) : strlen(p + 1);
		if (!pointer_token(p + 1, n, token, sizeof(token))) {
			js_fail(c, CAPY_EFORMAT, at, "$ref \"%.200s\": a malformed JSON pointer", s);
			return NULL;
		}
		if (cJSON_IsArray(node)) {
			char *e;
			long i = strtol(token, &e, 10);
			node = *token && !*e && i >= 0 ? cJSON_GetArrayItem(node, (int)i) : NULL;
		} else {
			node = cJSON_IsObject(node) ? cJSON_GetObjectItemCaseSensitive(node, token) : NULL;
		}
		if (!node) {
			js_fail(c, CAPY_EFORMAT, at, "$ref \"%.200s\" points at nothing", s);
			return NULL;
		}
		p += n + 1;
	}
	if (!cJSON_IsObject(node) && !cJSON_IsBool(node)) {
		js_fail(c, CAPY_EFORMAT, at, "$ref \"%.200s\" is not a schema", s);
		return NULL;
	}
	return node;
}

/* --- building merged schemas ------------------------------------------------------------------- */

/* A new object holding (references to) s's members but `skip`. */
static cJSON *without(struct js_ctx *c, const cJSON *s, const char *skip)
{
	cJSON *o = temp(c, cJSON_CreateObject());
	const cJSON *it;

	if (!o)
		return NULL;
	cJSON_ArrayForEach(it, s)
		if (strcmp(it->string, skip) && !cJSON_AddItemReferenceToObject(o, it->string, (cJSON *)it)) {
			js_oom(c);
			return NULL;
		}
	return o;
}

const cJSON *js_branch(struct js_ctx *c, const cJSON *s, const char *key, const cJSON *branch)
{
	cJSON *o = without(c, s, key), *all = o ? cJSON_AddArrayToObject(o, "allOf") : NULL;

	if (!all || !cJSON_AddItemReferenceToArray(all, (cJSON *)branch)) {
		js_oom(c);
		return NULL;
	}
	return o;
}

static bool put_ref(struct js_ctx *c, cJSON *o, const char *key, const cJSON *v)
{
	if (cJSON_AddItemReferenceToObject(o, key, (cJSON *)v))
		return true;
	js_oom(c);
	return false;
}

/* {"allOf": [a, b]} (references), owned by o once added. */
static cJSON *both(struct js_ctx *c, const cJSON *a, const cJSON *b)
{
	cJSON *o = cJSON_CreateObject(), *list = cJSON_AddArrayToObject(o, "allOf");

	if (!o || !list || !cJSON_AddItemReferenceToArray(list, (cJSON *)a) || !cJSON_AddItemReferenceToArray(list, (cJSON *)b)) {
		cJSON_Delete(o);
		js_oom(c);
		return NULL;
	}
	return o;
}

static bool put_new(struct js_ctx *c, cJSON *o, const char *key, cJSON *v)
{
	if (v && cJSON_AddItemToObject(o, key, v))
		return true;
	cJSON_Delete(v);
	js_oom(c);
	return false;
}

/* additionalProperties / additionalItems of both: false wins, true gives way, two schemas
 * both apply. absent stays absent (the compiler reads absence its own way). */
static bool merge_additional(struct js_ctx *c, cJSON *o, const char *key, const cJSON *a, const cJSON *b)
{
	if (!a || !b || cJSON_IsFalse(b) || cJSON_IsTrue(a))
		return put_ref(c, o, key, b ? b : a);
	if (cJSON_IsFalse(a) || cJSON_IsTrue(b))
		return put_ref(c, o, key, a);
	return put_new(c, o, key, both(c, a, b));
}

/* A property of one side alone, seen from the other side (its additionalProperties). */
static bool merge_lone_property(struct js_ctx *c, cJSON *props, const cJSON *v, const cJSON *other_extra)
{
	if (cJSON_IsFalse(other_extra))
		return true; /* the other side forbids it: it cannot appear */
	if (!other_extra || cJSON_IsTrue(other_extra))
		return put_ref(c, props, v->string, v);
	return put_new(c, props, v->string, both(c, v, other_extra));
}

static bool merge_properties(struct js_ctx *c, cJSON *o, const cJSON *a, const cJSON *b)
{
	const cJSON *pa = cJSON_GetObjectItemCaseSensitive(a, "properties"), *pb = cJSON_GetObjectItemCaseSensitive(b, "properties");
	const cJSON *xa = cJSON_GetObjectItemCaseSensitive(a, "additionalProperties");
	const cJSON *xb = cJSON_GetObjectItemCaseSensitive(b, "additionalProperties");
	const cJSON *it;

	if (!pa && !pb)
		return true;
	cJSON *props = cJSON_AddObjectToObject(o, "properties");
	if (!props)
		return oom(c);
	cJSON_ArrayForEach(it, pa) {
		const cJSON *other = cJSON_GetObjectItemCaseSensitive(pb, it->string);
		if (other ? !put_new(c, props, it->string, both(c, it, other)) : !merge_lone_property(c, props, it, xb))
			return false;
	}
	cJSON_ArrayForEach(it, pb)
		if (!cJSON_GetObjectItemCaseSensitive(pa, it->string) && !merge_lone_property(c, props, it, xa))
			return false;
	return true;
}

static bool merge_required(struct js_ctx *c, cJSON *o, const cJSON *a, const cJSON *b)
{
	cJSON *req = cJSON_AddArrayToObject(o, "required");
	const cJSON *it;

	if (!req)
		return oom(c);
	cJSON_ArrayForEach(it, a)
		if (!cJSON_AddItemReferenceToArray(req, (cJSON *)it))
			return oom(c);
	cJSON_ArrayForEach(it, b) {
		bool seen = false;
		const cJSON *x;
		cJSON_ArrayForEach(x, a)
			seen |= cJSON_Compare(x, it, true);
		if (!seen && !cJSON_AddItemReferenceToArray(req, (cJSON *)it))
			return oom(c);
	}
	return true;
}

static const char *const type_names[] = { "null", "boolean", "object", "array", "number", "string", "integer" };

/* The type names of a "type" value as bits (integer implied by number); all bits when absent. */
static unsigned type_bits(const cJSON *t)
{
	unsigned bits = 0;
	const cJSON *it;

	if (!t)
		return 0x7f;
	if (cJSON_IsString(t)) {
		for (unsigned i = 0; i < ARRAY_SIZE(type_names); i++)
			if (!strcmp(t->valuestring, type_names[i]))
				bits |= 1u << i;
	}
	const cJSON *list = cJSON_IsArray(t) ? t : NULL;
	cJSON_ArrayForEach(it, list)
		bits |= cJSON_IsString(it) ? type_bits(it) : 0;
	return bits & (1u << 4) ? bits | (1u << 6) : bits;
}

static bool merge_type(struct js_ctx *c, cJSON *o, const cJSON *a, const cJSON *b, const char *ptr)
{
	unsigned bits = type_bits(a) & type_bits(b);
	cJSON *list;

	if (!bits) {
		js_fail(c, CAPY_EFORMAT, ptr, "allOf: no type satisfies all of its schemas");
		return false;
	}
	if (!(list = cJSON_CreateArray()))
		return oom(c);
	for (unsigned i = 0; i < ARRAY_SIZE(type_names); i++) {
		bool covered = i == 6 && bits & (1u << 4); /* integer, with number there */
		if (bits & (1u << i) && !covered && !cJSON_AddItemToArray(list, cJSON_CreateString(type_names[i]))) {
			cJSON_Delete(list);
			return oom(c);
		}
	}
	return put_new(c, o, "type", list);
}

static bool lists_values(const cJSON *s)
{
	return cJSON_GetObjectItemCaseSensitive(s, "const") || cJSON_GetObjectItemCaseSensitive(s, "enum");
}

/* Whether side s allows value v by its const/enum (true when it has neither). */
static bool values_allow(const cJSON *s, const cJSON *v)
{
	const cJSON *one = cJSON_GetObjectItemCaseSensitive(s, "const"), *list = cJSON_GetObjectItemCaseSensitive(s, "enum"), *x;

	if (one)
		return cJSON_Compare(one, v, true);
	if (!list)
		return true;
	cJSON_ArrayForEach(x, list)
		if (cJSON_Compare(x, v, true))
			return true;
	return false;
}

/* enum/const of both sides: the values of one that the other allows. */
static bool merge_values(struct js_ctx *c, cJSON *o, const cJSON *a, const cJSON *b, const char *ptr)
{
	const cJSON *from = lists_values(a) ? a : b, *other = from == a ? b : a;
	const cJSON *one = cJSON_GetObjectItemCaseSensitive(from, "const"), *list = cJSON_GetObjectItemCaseSensitive(from, "enum");
	cJSON *out = cJSON_AddArrayToObject(o, "enum");

	if (!out)
		return oom(c);
	for (const cJSON *v = one ? one : cJSON_IsArray(list) ? list->child : NULL; v; v = one ? NULL : v->next)
		if (values_allow(from, v) && values_allow(other, v) && !cJSON_AddItemReferenceToArray(out, (cJSON *)v))
			return oom(c);
	if (!cJSON_GetArraySize(out)) {
		js_fail(c, CAPY_EFORMAT, ptr, "allOf: no value of enum/const satisfies all of its schemas");
		return false;
	}
	return true;
}

static bool is_lower_bound(const char *k)
{
	return !strcmp(k, "minimum") || !strcmp(k, "exclusiveMinimum") || !strcmp(k, "minLength") || !strcmp(k, "minItems");
}

static bool is_upper_bound(const char *k)
{
	return !strcmp(k, "maximum") || !strcmp(k, "exclusiveMaximum") || !strcmp(k, "maxLength") || !strcmp(k, "maxItems");
}

/* The anyOf/oneOf choices of both sides crossed: each branch of one with each of the other. */
static const cJSON *choices(const cJSON *s)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(s, "anyOf");

	return x ? x : cJSON_GetObjectItemCaseSensitive(s, "oneOf");
}

static bool merge_choices(struct js_ctx *c, cJSON *o, const cJSON *a, const cJSON *b, const char *ptr)
{
	const cJSON *ca = choices(a), *cb = choices(b), *x, *y;

	if (!ca || !cb)
		return put_ref(c, o, "anyOf", ca ? ca : cb);
	if ((size_t)cJSON_GetArraySize(ca) * (size_t)cJSON_GetArraySize(cb) > MAX_CROSS) {
		js_fail(c, CAPY_EUNSUPPORTED, ptr, "allOf: more than %d combinations of anyOf/oneOf branches", MAX_CROSS);
		return false;
	}
	cJSON *list = cJSON_AddArrayToObject(o, "anyOf");
	if (!list)
		return oom(c);
	cJSON_ArrayForEach(x, ca)
		cJSON_ArrayForEach(y, cb) {
			cJSON *pair = both(c, x, y);
			if (!pair)
				return false;
			if (!cJSON_AddItemToArray(list, pair)) {
				cJSON_Delete(pair);
				return oom(c);
			}
		}
	return true;
}

/* One keyword both sides have (not the ones merged as a group). */
static bool merge_keyword(struct js_ctx *c, cJSON *o, const char *k, const cJSON *va, const cJSON *vb, const char *ptr)
{
	if (cJSON_IsNumber(va) && cJSON_IsNumber(vb) && (is_lower_bound(k) || is_upper_bound(k))) {
		bool take_a = is_lower_bound(k) ? va->valuedouble >= vb->valuedouble : va->valuedouble <= vb->valuedouble;
		return put_ref(c, o, k, take_a ? va : vb);
	}
	if (!strcmp(k, "items") && !cJSON_IsArray(va) && !cJSON_IsArray(vb))
		return put_new(c, o, k, both(c, va, vb));
	if (!strcmp(k, "additionalProperties") || !strcmp(k, "additionalItems"))
		return merge_additional(c, o, k, va, vb);
	if (cJSON_Compare(va, vb, true))
		return put_ref(c, o, k, va);
	if (!strcmp(k, "pattern") || !strcmp(k, "format") || !strcmp(k, "items") || !strcmp(k, "prefixItems") ||
	    !strcmp(k, "exclusiveMinimum") || !strcmp(k, "exclusiveMaximum")) {
		char at[JS_PTR_MAX];
		js_ptr_push(at, sizeof(at), ptr, "allOf");
		js_fail(c, CAPY_EUNSUPPORTED, at, "schemas with different \"%s\" cannot be merged", k);
		return false;
	}
	return put_ref(c, o, k, va); /* an assertion we refuse or ignore later: one side is enough */
}

static bool grouped(const char *k)
{
	static const char *const keys[] = { "properties", "required", "type", "enum", "const", "anyOf", "oneOf",
					     "$defs", "definitions" };

	for (size_t i = 0; i < ARRAY_SIZE(keys); i++)
		if (!strcmp(k, keys[i]))
			return true;
	return false;
}

/* a and b (normalized: no $ref or allOf at the top) as one schema. */
static const cJSON *merge(struct js_ctx *c, const cJSON *a, const cJSON *b, const char *ptr)
{
	const cJSON *it;

	if (cJSON_IsTrue(a) || cJSON_IsFalse(b))
		return b;
	if (cJSON_IsTrue(b) || cJSON_IsFalse(a))
		return a;
	cJSON *o = temp(c, cJSON_CreateObject());
	if (!o)
		return NULL;
	cJSON_ArrayForEach(it, a) {
		const cJSON *other = cJSON_GetObjectItemCaseSensitive(b, it->string);
		if (grouped(it->string) || js_keyword_is_annotation(it->string))
			continue;
		if (other ? !merge_keyword(c, o, it->string, it, other, ptr) : !put_ref(c, o, it->string, it))
			return NULL;
	}
	cJSON_ArrayForEach(it, b)
		if (!grouped(it->string) && !js_keyword_is_annotation(it->string) &&
		    !cJSON_GetObjectItemCaseSensitive(a, it->string) && !put_ref(c, o, it->string, it))
			return NULL;
	const cJSON *ra = cJSON_GetObjectItemCaseSensitive(a, "required"), *rb = cJSON_GetObjectItemCaseSensitive(b, "required");
	const cJSON *ta = cJSON_GetObjectItemCaseSensitive(a, "type"), *tb = cJSON_GetObjectItemCaseSensitive(b, "type");
	bool values = lists_values(a) || lists_values(b);
	if (!merge_properties(c, o, a, b) || ((ra || rb) && !merge_required(c, o, ra, rb)) ||
	    ((ta || tb) && !merge_type(c, o, ta, tb, ptr)) || (values && !merge_values(c, o, a, b, ptr)) ||
	    ((choices(a) || choices(b)) && !merge_choices(c, o, a, b, ptr)))
		return NULL;
	return o;
}

/* --- normalizing ------------------------------------------------------------------------------ */

#define MAX_MERGE_NEST 64

const cJSON *js_normalize(struct js_ctx *c, const cJSON *s, const char *ptr)
{
	const cJSON *x = s, *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");

	if (!cJSON_IsObject(s))
		return s;
	if (++c->work > JS_MAX_WORK) {
		js_fail(c, CAPY_EUNSUPPORTED, ptr, "too complex: more than %d schemas to visit", JS_MAX_WORK);
		return NULL;
	}
	if (c->merge_nest >= MAX_MERGE_NEST) {
		js_fail(c, CAPY_EUNSUPPORTED, ptr, "$ref and allOf nest more than %d deep (a recursive $ref inside allOf?)",
			MAX_MERGE_NEST);
		return NULL;
	}
	c->merge_nest++;
	if (ref) {
		const cJSON *target = js_resolve(c, ref, ptr), *rest = target ? without(c, s, "$ref") : NULL;
		const cJSON *t = rest ? js_normalize(c, target, ptr) : NULL;
		const cJSON *r = t ? js_normalize(c, rest, ptr) : NULL;
		x = r ? merge(c, t, r, ptr) : NULL;
	}
	const cJSON *all = x ? cJSON_GetObjectItemCaseSensitive(x, "allOf") : NULL, *it;
	if (all) {
		char at[JS_PTR_MAX];
		int i = 0;
		js_ptr_push(at, sizeof(at), ptr, "allOf");
		if (!cJSON_IsArray(all)) {
			js_fail(c, CAPY_EFORMAT, at, "\"allOf\" must be an array of schemas");
			x = NULL;
		} else {
			x = without(c, x, "allOf");
		}
		cJSON_ArrayForEach(it, all) {
			char bp[JS_PTR_MAX];
			js_ptr_index(bp, sizeof(bp), at, NULL, i++);
			if (!x)
				break;
			if (!cJSON_IsObject(it) && !cJSON_IsBool(it)) {
				js_fail(c, CAPY_EFORMAT, bp, "a schema must be an object or a boolean");
				x = NULL;
				break;
			}
			const cJSON *n = js_normalize(c, it, bp);
			x = n ? merge(c, x, n, bp) : NULL;
		}
	}
	c->merge_nest--;
	return x;
}
