/* json-schema-impl.h - what the JSON Schema compiler's files share (libcore/constrain only):
 * the compiling context, the rules being written, and the pieces each file provides.
 *
 * A schema becomes rules of GBNF text. Each visit of a schema returns the name of a rule
 * (or of a shared primitive such as json-string) matching exactly its JSON values, with no
 * whitespace before or after: containers put `ws` between their tokens themselves. */
#ifndef CAPY_CONSTRAIN_JSON_SCHEMA_IMPL_H
#define CAPY_CONSTRAIN_JSON_SCHEMA_IMPL_H

#include "json-schema.h"
#include "../util/buf.h"

#include <cjson/cJSON.h>

#define JS_MAX_RULES 90000    /* rules of the grammar, those the grammar compiler makes for groups and
				 repetitions included (its own limit is 100000) */
#define JS_MAX_DEPTH 64       /* schemas nested in schemas */
#define JS_MAX_INPUT (4u << 20)
#define JS_MAX_WORK 200000    /* schemas visited, merged ones and $ref targets included */
#define JS_UNBOUNDED UINT64_MAX
#define JS_PTR_MAX 512        /* a JSON pointer in a message; longer ones end in "..." */

struct js_rule {
	char *name, *body; /* body NULL: reserved for a $ref target still being compiled */
	uint32_t hash;
};

struct js_ref {
	const cJSON *target;
	const char *name;
	unsigned open_level; /* containers entered when it began; 0 once compiled */
	bool open;
};

struct js_ctx {
	const struct capy_schema_opts *opts;
	struct capy_err *err;
	int rc;
	const cJSON *root;
	struct js_rule *rules;
	uint32_t nrules, cap;
	uint64_t implied; /* rules the grammar compiler will make for our groups and repetitions */
	uint32_t *by_body; /* open addressing over rules by body: index + 1, 0 empty */
	uint32_t nslots;
	uint64_t prims;    /* the primitives written so far, one bit each */
	struct js_ref *refs;
	uint32_t nrefs, refcap;
	cJSON **temps;     /* schemas made by merging, freed at the end */
	uint32_t ntemps, tempcap;
	unsigned depth, level, work, merge_nest;
	uint32_t raw_stop_cp; /* opts->raw: the character raw strings never hold, 0 none */
	bool regex;           /* capy_regex_to_gbnf: errors "regex: ..." without a pointer */
};

/* --- json-schema-gbnf.c: rules and text ------------------------------------------------------ */

/* Record the first error: "schema: <pointer>: <message>"; returns the code. */
CAPY_PRINTF(4, 5) int js_fail(struct js_ctx *c, int code, const char *ptr, const char *fmt, ...);
int js_oom(struct js_ctx *c);
/* The same for functions that return a rule name: NULL. */
CAPY_PRINTF(4, 5) const char *js_fail_null(struct js_ctx *c, int code, const char *ptr, const char *fmt, ...);
const char *js_oom_null(struct js_ctx *c);
/* dst = parent + "/" + key escaped (~0, ~1); index: key then the number i (key NULL: only i). */
void js_ptr_push(char *dst, size_t cap, const char *parent, const char *key);
void js_ptr_index(char *dst, size_t cap, const char *parent, const char *key, int i);
/* Room in *arr (of *cap items of size bytes) for item number n (doubling); false when out of
 * memory (the array is then as it was). */
bool js_grow(void *arr, uint32_t *cap, uint32_t n, size_t size);
/* The value of a hexadecimal digit, -1 for another character. */
int js_hex_digit(int ch);
/* One UTF-8 character of s (n > 0 bytes): its length, 0 if invalid (overlong, surrogate...). */
unsigned js_utf8_next(const char *s, size_t n, uint32_t *cp);
bool js_utf8_valid(const char *s, size_t n);
/* A rule with this body (an existing one if the body is the same); its name, owned by c, or
 * NULL (error set). hint: a readable part for the name. */
const char *js_rule(struct js_ctx *c, const char *hint, const struct capy_buf *body);
/* A name reserved now and defined later by js_define (for $ref targets, which may recurse). */
const char *js_reserve(struct js_ctx *c, const char *hint);
int js_define(struct js_ctx *c, const char *name, const char *body_name);
/* The grammar text: root first. */
char *js_text(struct js_ctx *c, const char *root_name);
void js_ctx_release(struct js_ctx *c);

enum js_prim {
	P_NONE, P_WS, P_VALUE, P_OBJECT, P_MEMBER, P_ARRAY, P_STRING, P_CHAR, P_HEX4, P_NUMBER,
	P_INTEGER, P_FRAC, P_FRAC_NONZERO, P_BOOLEAN, P_NULL, P_DATE, P_YEAR, P_LEAP_YEAR, P_TIME, P_DATE_TIME,
	P_UUID, P_EMAIL, P_LABEL, P_IPV4, P_OCTET, P_DATE_STR, P_TIME_STR, P_DATE_TIME_STR,
	P_UUID_STR, P_EMAIL_STR, P_IPV4_STR, P_COUNT
};
/* The primitive's rule (written with those it uses on first use); its name. */
const char *js_prim(struct js_ctx *c, enum js_prim p);
/* One character of a string as the grammar writes it: JSON's (an escape or a character a
 * string holds raw), or with opts->raw any character but raw_stop_cp. A rule name. */
const char *js_string_char(struct js_ctx *c);

/* s (n bytes of UTF-8) as a GBNF literal "..." */
void js_literal(struct capy_buf *b, const char *s, size_t n);
/* One code point as it may stand inside a GBNF character class. */
void js_class_char(struct capy_buf *b, uint32_t cp);
/* atom repeated m..n times (n JS_UNBOUNDED: no bound), appended to b; big counts are split
 * into blocks so that the grammar compiler's limits (counts up to 4096, rules) hold. atom is
 * one element: a rule name, a class or a parenthesized group. */
int js_repeat(struct js_ctx *c, struct capy_buf *b, const char *atom, uint64_t m, uint64_t n);

/* --- json-schema-num.c: numbers with bounds --------------------------------------------------- */

/* The bounds of a number schema, integral values only (a schema with others is refused). */
struct js_bounds {
	bool has_lo, lo_excl, has_hi, hi_excl;
	int64_t lo, hi;
};
/* Read minimum/maximum/exclusive* of schema s into b; integer: round them to integers.
 * Returns 1 when there are none, 0 when b holds some, < 0 on error (pointer ptr). */
int js_bounds_read(struct js_ctx *c, const cJSON *s, bool integer, const char *ptr, struct js_bounds *b);
/* The rule of the integers (integer) or numbers within b. */
const char *js_number_rule(struct js_ctx *c, const struct js_bounds *b, bool integer, const char *ptr);

/* --- json-schema-merge.c: $ref and allOf ---------------------------------------------------------- */

/* The schema a local $ref (the "$ref" member of the schema at ptr) points at; in relaxed mode
 * a $ref we cannot follow is the schema true. NULL after an error. */
const cJSON *js_resolve(struct js_ctx *c, const cJSON *ref, const char *ptr);
/* s with the target of a $ref at its top and the branches of an allOf merged into one schema
 * (s itself when it has neither); NULL after an error. */
const cJSON *js_normalize(struct js_ctx *c, const cJSON *s, const char *ptr);
const cJSON *js_true_schema(struct js_ctx *c);
/* s without its member key, and with allOf: [branch] (for an anyOf/oneOf branch that the
 * keywords beside the anyOf apply to as well). */
const cJSON *js_branch(struct js_ctx *c, const cJSON *s, const char *key, const cJSON *branch);

/* --- json-schema.c ------------------------------------------------------------------------------ */

/* A keyword that only annotates (title, description, ...) or that the compiler does not
 * know (JSON Schema ignores those). */
bool js_keyword_is_annotation(const char *key);

/* --- json-schema-regex.c: pattern ------------------------------------------------------------- */

/* The rule of the strings whose content the ECMA regex matches: JSON strings (quotes
 * included), or with opts->raw the characters themselves; search semantics (unanchored ends
 * match anything) unless whole (every alternative anchored). NULL after an error naming ptr. */
const char *js_pattern_rule(struct js_ctx *c, const char *pattern, const char *ptr, bool whole);

#endif
