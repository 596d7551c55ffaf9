/* json-schema-gbnf.c - the GBNF side of the JSON Schema compiler: rules (named, deduplicated by
 * body), the shared JSON primitives, literals, classes, repetitions within the grammar
 * compiler's limits, errors with their JSON pointer. */
#include "json-schema-impl.h"

#define REPEAT_MAX_COUNT 4096 /* grammar.c refuses larger counts */
#define REPEAT_DIRECT 128     /* optional copies written as x{m,n}: grammar.c makes a rule per copy */
#define REPEAT_BLOCK 64       /* longer runs are counted in blocks of this many */

static int fail_va(struct js_ctx *c, int code, const char *ptr, const char *fmt, va_list ap)
{
	char msg[512], clean_msg[700], clean_ptr[700];

	if (c->rc)
		return c->rc;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	capy_err_one_line(clean_msg, sizeof(clean_msg), msg); /* a schema's names may hold newlines */
	capy_err_one_line(clean_ptr, sizeof(clean_ptr), *ptr ? ptr : "(root)");
	if (c->regex)
		c->rc = capy_err_set(c->err, code, "regex: %s", clean_msg);
	else
		c->rc = capy_err_set(c->err, code, "schema: %s: %s", clean_ptr, clean_msg);
	return c->rc;
}

int js_fail(struct js_ctx *c, int code, const char *ptr, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	int rc = fail_va(c, code, ptr, fmt, ap);
	va_end(ap);
	return rc;
}

const char *js_fail_null(struct js_ctx *c, int code, const char *ptr, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fail_va(c, code, ptr, fmt, ap);
	va_end(ap);
	return NULL;
}

const char *js_oom_null(struct js_ctx *c)
{
	js_oom(c);
	return NULL;
}

int js_oom(struct js_ctx *c)
{
	if (!c->rc)
		c->rc = capy_err_set(c->err, CAPY_ENOMEM, "%s: out of memory", c->regex ? "regex" : "schema");
	return c->rc;
}

void js_ptr_push(char *dst, size_t cap, const char *parent, const char *key)
{
	size_t n = (size_t)snprintf(dst, cap, "%s/", parent);

	if (n >= cap - 4) /* parent filled dst: it ends in "..." already */
		return;
	for (const char *k = key; *k; k++) {
		if (n + 3 >= cap - 4) {
			memcpy(dst + n, "...", 3);
			n += 3;
			break;
		}
		if (*k == '~' || *k == '/') {
			dst[n++] = '~';
			dst[n++] = *k == '~' ? '0' : '1';
		} else {
			dst[n++] = *k;
		}
	}
	dst[n] = 0;
}

void js_ptr_index(char *dst, size_t cap, const char *parent, const char *key, int i)
{
	char k[32];

	snprintf(k, sizeof(k), "%d", i);
	if (key) {
		char tmp[JS_PTR_MAX];
		js_ptr_push(tmp, sizeof(tmp), parent, key);
		js_ptr_push(dst, cap, tmp, k);
	} else {
		js_ptr_push(dst, cap, parent, k);
	}
}

bool js_grow(void *arr, uint32_t *cap, uint32_t n, size_t size)
{
	void **p = arr;

	if (n < *cap)
		return true;
	uint32_t c = *cap ? 2 * *cap : 16;
	void *q = realloc(*p, (size_t)c * size);
	if (!q)
		return false;
	*p = q;
	*cap = c;
	return true;
}

int js_hex_digit(int ch)
{
	return ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
}

unsigned js_utf8_next(const char *s, size_t n, uint32_t *cp)
{
	const unsigned char *u = (const unsigned char *)s;
	unsigned len = u[0] < 0x80 ? 1 : u[0] >= 0xc2 && u[0] <= 0xdf ? 2 : u[0] >= 0xe0 && u[0] <= 0xef ? 3
		       : u[0] >= 0xf0 && u[0] <= 0xf4 ? 4 : 0;
	static const uint32_t min[5] = { 0, 0, 0x80, 0x800, 0x10000 };

	if (!len || len > n)
		return 0;
	*cp = len == 1 ? u[0] : u[0] & (0x7f >> len);
	for (unsigned i = 1; i < len; i++) {
		if ((u[i] & 0xc0) != 0x80)
			return 0;
		*cp = (*cp << 6) | (u[i] & 0x3f);
	}
	if (*cp < min[len] || *cp > 0x10ffff || (*cp >= 0xd800 && *cp <= 0xdfff))
		return 0;
	return len;
}

bool js_utf8_valid(const char *s, size_t n)
{
	uint32_t cp;

	for (size_t i = 0; i < n;) {
		unsigned k = js_utf8_next(s + i, n - i, &cp);
		if (!k)
			return false;
		i += k;
	}
	return true;
}

/* --- rules ------------------------------------------------------------------------------------ */

static uint32_t text_hash(const char *s)
{
	uint32_t h = 2166136261u;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 16777619u;
	return h;
}

/* The index of the rule whose body is body, or -1; *slot: where it would go. */
static int64_t find_body(const struct js_ctx *c, const char *body, uint32_t hash, uint32_t *slot)
{
	uint32_t i = hash & (c->nslots - 1);

	for (; c->by_body[i]; i = (i + 1) & (c->nslots - 1)) {
		const struct js_rule *r = &c->rules[c->by_body[i] - 1];
		if (r->hash == hash && r->body && !strcmp(r->body, body))
			return c->by_body[i] - 1;
	}
	*slot = i;
	return -1;
}

static bool index_grow(struct js_ctx *c)
{
	if (2 * (c->nrules + 1) <= c->nslots)
		return true;
	uint32_t ns = c->nslots ? 2 * c->nslots : 256, *t = calloc(ns, sizeof(*t));
	if (!t)
		return false;
	for (uint32_t r = 0; r < c->nrules; r++) {
		if (!c->rules[r].body)
			continue;
		uint32_t i = c->rules[r].hash & (ns - 1);
		while (t[i])
			i = (i + 1) & (ns - 1);
		t[i] = r + 1;
	}
	free(c->by_body);
	c->by_body = t;
	c->nslots = ns;
	return true;
}

/* A new rule: "<hint, made a rule name>-<index>", so names never clash with each other or
 * with the primitives (whose names end in a letter). */
static int64_t add_rule(struct js_ctx *c, const char *hint)
{
	char name[64];
	size_t n = 0;

	if (c->nrules + c->implied >= JS_MAX_RULES)
		return js_fail(c, CAPY_EUNSUPPORTED, "", "too large: the grammar would need more than %d rules", JS_MAX_RULES);
	if (!js_grow(&c->rules, &c->cap, c->nrules, sizeof(*c->rules)))
		return js_oom(c);
	for (const char *h = hint; *h && n < 32; h++) {
		bool ok = (*h >= 'a' && *h <= 'z') || (*h >= 'A' && *h <= 'Z') || (*h >= '0' && *h <= '9');
		if (ok)
			name[n++] = *h;
		else if (n && name[n - 1] != '-')
			name[n++] = '-';
	}
	while (n && name[n - 1] == '-')
		n--;
	snprintf(name + n, sizeof(name) - n, "%s%u", n ? "-" : "r", c->nrules);
	struct js_rule *r = &c->rules[c->nrules];
	if (!(r->name = strdup(name)))
		return js_oom(c);
	r->body = NULL;
	r->hash = 0;
	return c->nrules++;
}

/* The rules grammar.c makes for a body: one per group and per ?, * or +, n - m for {m,n}
 * (one for {m,}); literals and classes skipped. */
static uint64_t implied_rules(const char *s)
{
	uint64_t n = 0;

	while (*s) {
		if (*s == '"' || *s == '[') {
			char end = *s == '"' ? '"' : ']';
			for (s++; *s && *s != end; s++)
				if (*s == '\\' && s[1])
					s++;
			s += *s != 0;
		} else if (*s == '{') {
			char *e;
			unsigned long long lo = strtoull(s + 1, &e, 10), hi = lo;
			if (*e == ',')
				hi = e[1] == '}' ? lo + 1 : strtoull(e + 1, &e, 10);
			n += hi - lo;
			s++;
		} else {
			n += *s == '(' || *s == '?' || *s == '*' || *s == '+';
			s++;
		}
	}
	return n;
}

static int set_body(struct js_ctx *c, uint32_t r, const char *body, uint32_t hash)
{
	uint32_t slot;

	c->implied += implied_rules(body);
	if (!index_grow(c) || !(c->rules[r].body = strdup(body)))
		return js_oom(c);
	c->rules[r].hash = hash;
	if (find_body(c, body, hash, &slot) < 0)
		c->by_body[slot] = r + 1;
	return 0;
}

const char *js_rule(struct js_ctx *c, const char *hint, const struct capy_buf *body)
{
	uint32_t slot, hash;

	if (c->rc)
		return NULL;
	if (body->oom) {
		js_oom(c);
		return NULL;
	}
	const char *text = body->data ? body->data : "\"\"";
	hash = text_hash(text);
	if (c->nslots) {
		int64_t old = find_body(c, text, hash, &slot);
		if (old >= 0)
			return c->rules[old].name;
	}
	int64_t r = add_rule(c, hint);
	if (r < 0 || set_body(c, (uint32_t)r, text, hash))
		return NULL;
	return c->rules[r].name;
}

const char *js_reserve(struct js_ctx *c, const char *hint)
{
	int64_t r = add_rule(c, hint);

	return r < 0 ? NULL : c->rules[r].name;
}

int js_define(struct js_ctx *c, const char *name, const char *body_name)
{
	for (uint32_t r = c->nrules; r-- > 0;)
		if (c->rules[r].name == name)
			return set_body(c, r, body_name, text_hash(body_name));
	CAPY_BUG("js_define: no reserved rule '%s'", name);
}

static bool name_char(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' ||
	       ch == '_';
}

/* A body with every rule name in it prefixed: names are the words outside "literals",
 * [classes] and {counts} (the only other things the compiler writes are operators). */
static void put_body(struct capy_buf *b, const char *prefix, const char *s)
{
	if (!prefix) {
		capy_buf_puts(b, s);
		return;
	}
	while (*s) {
		const char *from = s;
		if (*s == '"' || *s == '[' || *s == '{') {
			char end = *s == '"' ? '"' : *s == '[' ? ']' : '}';
			for (s++; *s && *s != end; s++)
				if (*s == '\\' && s[1])
					s++;
			s += *s != 0;
		} else if (name_char(*s)) {
			capy_buf_puts(b, prefix);
			while (name_char(*s))
				s++;
		} else {
			s++;
		}
		capy_buf_add(b, from, (size_t)(s - from));
	}
}

char *js_text(struct js_ctx *c, const char *root_name)
{
	const char *pre = c->opts->prefix && *c->opts->prefix ? c->opts->prefix : NULL;
	struct capy_buf b = { 0 };

	capy_buf_printf(&b, "%sroot ::= ", pre ? pre : "");
	put_body(&b, pre, root_name);
	capy_buf_putc(&b, '\n');
	for (uint32_t r = 0; r < c->nrules; r++) {
		put_body(&b, pre, c->rules[r].name);
		capy_buf_puts(&b, " ::= ");
		put_body(&b, pre, c->rules[r].body);
		capy_buf_putc(&b, '\n');
	}
	if (b.oom) {
		capy_buf_release(&b);
		js_oom(c);
		return NULL;
	}
	return capy_buf_detach(&b, NULL);
}

void js_ctx_release(struct js_ctx *c)
{
	for (uint32_t r = 0; r < c->nrules; r++) {
		free(c->rules[r].name);
		free(c->rules[r].body);
	}
	free(c->rules);
	free(c->by_body);
	free(c->refs);
	for (uint32_t i = 0; i < c->ntemps; i++)
		cJSON_Delete(c->temps[i]);
	free(c->temps);
}

/* --- primitives ------------------------------------------------------------------------------- */

#define HEX "[0-9a-fA-F]"
#define HOUR "( [01] [0-9] | \"2\" [0-3] )"

static const struct prim {
	const char *name, *body;
	enum js_prim uses[6]; /* P_NONE ends the list */
} prims[P_COUNT] = {
	/* at most one space, or a newline and an indent of up to 32: a model cannot spin on it */
	[P_WS] = { "ws", "( \" \" | \"\\n\" [ \\t]{0,32} )?", { P_NONE } },
	[P_VALUE] = { "json-value", "json-object | json-array | json-string | json-number | json-boolean | json-null",
		      { P_OBJECT, P_ARRAY, P_STRING, P_NUMBER, P_BOOLEAN, P_NULL } },
	[P_OBJECT] = { "json-object", "\"{\" ws ( json-member ( \",\" ws json-member )* )? \"}\"", { P_WS, P_MEMBER } },
	[P_MEMBER] = { "json-member", "json-string ws \":\" ws json-value ws", { P_WS, P_STRING, P_VALUE } },
	[P_ARRAY] = { "json-array", "\"[\" ws ( json-value ws ( \",\" ws json-value ws )* )? \"]\"", { P_WS, P_VALUE } },
	[P_STRING] = { "json-string", "\"\\\"\" json-char* \"\\\"\"", { P_CHAR } },
	/* no \u escape of a surrogate: the length schemas count would differ from ours */
	[P_CHAR] = { "json-char", "[^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" json-hex4 )", { P_HEX4 } },
	[P_HEX4] = { "json-hex4", "[0-9a-cA-Ce-fE-F] " HEX "{3} | [dD] [0-7] " HEX "{2}", { P_NONE } },
	[P_INTEGER] = { "json-integer", "\"-\"? ( \"0\" | [1-9] [0-9]{0,15} )", { P_NONE } },
	[P_FRAC] = { "json-frac", "\".\" [0-9]{1,16}", { P_NONE } },
	[P_FRAC_NONZERO] = { "json-frac-nonzero", "\".\" [0-9]{0,15} [1-9]", { P_NONE } },
	[P_NUMBER] = { "json-number", "json-integer json-frac? ( [eE] [-+]? [0-9]{1,2} )?", { P_INTEGER, P_FRAC } },
	[P_BOOLEAN] = { "json-boolean", "\"true\" | \"false\"", { P_NONE } },
	[P_NULL] = { "json-null", "\"null\"", { P_NONE } },
	/* years 0001..9999; the days each month has, 29 February in leap years only */
	[P_YEAR] = { "json-year", "[0-9]{3} [1-9] | [0-9]{2} [1-9] \"0\" | [0-9] [1-9] \"00\" | [1-9] \"000\"", { P_NONE } },
	[P_LEAP_YEAR] = { "json-leap-year", "[0-9]{2} ( \"0\" [48] | [2468] [048] | [13579] [26] ) | "
					    "( \"0\" [48] | [2468] [048] | [13579] [26] ) \"00\"", { P_NONE } },
	[P_DATE] = { "json-date",
		     "json-year \"-\" ( ( \"0\" [13578] | \"1\" [02] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] ) | "
		     "( \"0\" [469] | \"11\" ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"30\" ) | "
		     "\"02-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] ) ) | json-leap-year \"-02-29\"",
		     { P_YEAR, P_LEAP_YEAR } },
	[P_TIME] = { "json-time", HOUR " \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,9} )? "
				  "( \"Z\" | [+-] " HOUR " \":\" [0-5] [0-9] )", { P_NONE } },
	[P_DATE_TIME] = { "json-date-time", "json-date \"T\" json-time", { P_DATE, P_TIME } },
	[P_UUID] = { "json-uuid", HEX "{8} \"-\" " HEX "{4} \"-\" " HEX "{4} \"-\" " HEX "{4} \"-\" " HEX "{12}", { P_NONE } },
	[P_EMAIL] = { "json-email", "[A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]{1,64} \"@\" json-label ( \".\" json-label )*",
		      { P_LABEL } },
	[P_LABEL] = { "json-label", "[A-Za-z0-9] [A-Za-z0-9-]{0,62}", { P_NONE } },
	[P_OCTET] = { "json-octet", "\"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9] [0-9] | [0-9]", { P_NONE } },
	[P_IPV4] = { "json-ipv4", "json-octet \".\" json-octet \".\" json-octet \".\" json-octet", { P_OCTET } },
	[P_DATE_STR] = { "json-date-string", "\"\\\"\" json-date \"\\\"\"", { P_DATE } },
	[P_TIME_STR] = { "json-time-string", "\"\\\"\" json-time \"\\\"\"", { P_TIME } },
	[P_DATE_TIME_STR] = { "json-date-time-string", "\"\\\"\" json-date-time \"\\\"\"", { P_DATE_TIME } },
	[P_UUID_STR] = { "json-uuid-string", "\"\\\"\" json-uuid \"\\\"\"", { P_UUID } },
	[P_EMAIL_STR] = { "json-email-string", "\"\\\"\" json-email \"\\\"\"", { P_EMAIL } },
	[P_IPV4_STR] = { "json-ipv4-string", "\"\\\"\" json-ipv4 \"\\\"\"", { P_IPV4 } },
};

const char *js_prim(struct js_ctx *c, enum js_prim p)
{
	const struct prim *pr = &prims[p];

	if (c->rc)
		return NULL;
	if (c->prims & (1ull << p))
		return pr->name;
	c->prims |= 1ull << p;
	int64_t r = add_rule(c, "");
	if (r < 0)
		return NULL;
	free(c->rules[r].name);
	const char *body = p == P_WS && c->opts->compact ? "\"\"" : pr->body;
	/* (added by name, not through js_rule: a primitive is never merged with a look-alike) */
	if (!(c->rules[r].name = strdup(pr->name)) || !(c->rules[r].body = strdup(body))) {
		js_oom(c);
		return NULL;
	}
	c->rules[r].hash = text_hash(body);
	c->implied += implied_rules(body);
	for (unsigned i = 0; i < ARRAY_SIZE(pr->uses) && pr->uses[i]; i++)
		js_prim(c, pr->uses[i]);
	return c->rc ? NULL : pr->name;
}

const char *js_string_char(struct js_ctx *c)
{
	struct capy_buf body = { 0 };

	if (!c->opts->raw)
		return js_prim(c, P_CHAR);
	if (c->raw_stop_cp) {
		capy_buf_puts(&body, "[^");
		js_class_char(&body, c->raw_stop_cp);
		capy_buf_putc(&body, ']');
	} else {
		capy_buf_putc(&body, '.');
	}
	const char *name = js_rule(c, "raw-char", &body);
	capy_buf_release(&body);
	return name;
}

/* --- text ------------------------------------------------------------------------------------- */

void js_literal(struct capy_buf *b, const char *s, size_t n)
{
	capy_buf_putc(b, '"');
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (ch == '"' || ch == '\\') {
			capy_buf_putc(b, '\\');
			capy_buf_putc(b, (char)ch);
		} else if (ch == '\n') {
			capy_buf_puts(b, "\\n");
		} else if (ch < 0x20 || ch == 0x7f) {
			capy_buf_printf(b, "\\x%02x", ch);
		} else {
			capy_buf_putc(b, (char)ch);
		}
	}
	capy_buf_putc(b, '"');
}

void js_class_char(struct capy_buf *b, uint32_t cp)
{
	bool plain = (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9');

	if (plain)
		capy_buf_putc(b, (char)cp);
	else if (cp < 0x10000)
		capy_buf_printf(b, "\\u%04X", (unsigned)cp);
	else
		capy_buf_printf(b, "\\U%08X", (unsigned)cp);
}

/* atom{m,n} in its shortest form (counts within the grammar compiler's limits). */
static void put_count(struct capy_buf *b, const char *atom, uint64_t m, uint64_t n)
{
	if (n == 0)
		return;
	capy_buf_printf(b, " %s", atom);
	if (m == 0 && n == 1)
		capy_buf_putc(b, '?');
	else if (m == 0 && n == JS_UNBOUNDED)
		capy_buf_putc(b, '*');
	else if (m == 1 && n == JS_UNBOUNDED)
		capy_buf_putc(b, '+');
	else if (m == n && m > 1)
		capy_buf_printf(b, "{%" PRIu64 "}", m);
	else if (n == JS_UNBOUNDED)
		capy_buf_printf(b, "{%" PRIu64 ",}", m);
	else if (m != n)
		capy_buf_printf(b, "{%" PRIu64 ",%" PRIu64 "}", m, n);
}

/* A rule of exactly REPEAT_BLOCK atoms; its name. */
static const char *block_of(struct js_ctx *c, const char *atom)
{
	struct capy_buf body = { 0 };

	put_count(&body, atom, REPEAT_BLOCK, REPEAT_BLOCK);
	const char *name = js_rule(c, "block", &body);
	capy_buf_release(&body);
	return name;
}

static int repeat_exactly(struct js_ctx *c, struct capy_buf *b, const char *atom, uint64_t m)
{
	if (m <= REPEAT_MAX_COUNT) {
		put_count(b, atom, m, m);
		return 0;
	}
	const char *blk = block_of(c, atom);
	if (!blk || repeat_exactly(c, b, blk, m / REPEAT_BLOCK))
		return c->rc;
	put_count(b, atom, m % REPEAT_BLOCK, m % REPEAT_BLOCK);
	return 0;
}

int js_repeat(struct js_ctx *c, struct capy_buf *b, const char *atom, uint64_t m, uint64_t n)
{
	if (c->rc)
		return c->rc;
	if (m <= REPEAT_MAX_COUNT && (n == JS_UNBOUNDED || n - m <= REPEAT_DIRECT)) {
		put_count(b, atom, m, n);
		return 0;
	}
	if (m) {
		if (repeat_exactly(c, b, atom, m))
			return c->rc;
		return js_repeat(c, b, atom, 0, n == JS_UNBOUNDED ? n : n - m);
	}
	/* 0..n with n = q blocks + r: fewer than q blocks and a partial one, or q blocks and up
	 * to r more; the two never match the same length */
	uint64_t q = n / REPEAT_BLOCK, r = n % REPEAT_BLOCK;
	const char *blk = block_of(c, atom);
	if (!blk)
		return c->rc;
	capy_buf_puts(b, " (");
	if (js_repeat(c, b, blk, 0, q - 1))
		return c->rc;
	put_count(b, atom, 0, REPEAT_BLOCK - 1);
	capy_buf_puts(b, " |");
	if (repeat_exactly(c, b, blk, q) || js_repeat(c, b, atom, 0, r))
		return c->rc;
	capy_buf_puts(b, " )");
	return 0;
}
