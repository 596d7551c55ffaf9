/* json-schema.h - JSON Schema compiled to a GBNF grammar (grammar.h's syntax, which is
 * llama.cpp's), so that a model can be held to a tool's input_schema or a response_format.
 *
 *	struct capy_schema_opts opts = { .strict = true };
 *	char *gbnf;
 *	if (capy_json_schema_to_gbnf(schema, len, &opts, &gbnf, &err) < 0)
 *		return err.code;          // "schema: /properties/x/not: keyword \"not\" is not supported"
 *	...
 *	struct capy_grammar *g;       // or straight to the automaton:
 *	capy_json_schema_compile(schema, len, &opts, &g, &err);
 *
 * The grammar's rule `root` matches JSON texts the schema accepts. What is enforced and what
 * is relaxed is listed in docs/structured-output.md; in short: type (and type lists), enum,
 * const, properties in their listed order (required ones present, optional ones each may be
 * absent), required, additionalProperties (absent means no other properties, as in
 * llama.cpp; true or a schema lets other keys follow the listed ones), items, prefixItems,
 * items as a list with additionalItems, minItems/maxItems, minLength/maxLength, pattern (an
 * ECMA regex subset), format date, time, date-time, uuid, email, ipv4, integer bounds and
 * integral bounds of numbers, anyOf, oneOf (as anyOf), allOf (merged), $ref to any local
 * JSON pointer (#/$defs/x, #/definitions/x, #; recursion works). Annotations and unknown
 * keywords are ignored, as JSON Schema says. Assertion keywords it cannot express (not,
 * if, uniqueItems, multipleOf, patternProperties, ...) are refused when opts->strict, else
 * ignored (the grammar then accepts more than the schema does).
 *
 * Every text the grammar accepts is valid JSON that the schema accepts (except where a
 * relaxed keyword was ignored, or oneOf branches overlap). The converse does not hold: keys
 * come in the listed order, whitespace between tokens is limited to nothing, one space, or
 * one newline and up to 32 spaces or tabs (so a model cannot spin on whitespace), numbers
 * have at most 16 integer and 16 fraction digits and 2 exponent digits, and \u escapes of
 * surrogates are refused (a string's length is then its character count).
 *
 * Errors are one line, "schema: <JSON pointer>: <what>" (the pointer "(root)" for the
 * top), with CAPY_EFORMAT for a malformed or unsatisfiable schema, CAPY_EUNSUPPORTED for a
 * keyword or construction refused, CAPY_ENOMEM; nothing is printed. Limits against
 * hostile input: 4 MiB of schema, 64 levels of nesting, 90000 rules of grammar.
 * Thread-safety: none needed; calls share nothing.
 */
#ifndef CAPY_CONSTRAIN_JSON_SCHEMA_H
#define CAPY_CONSTRAIN_JSON_SCHEMA_H

#include "../util/err.h"

#include <stdbool.h>
#include <stddef.h>

struct cJSON;
struct capy_grammar;

struct capy_schema_opts {
	bool strict;  /* refuse assertion keywords that cannot be enforced (else ignore them) */
	bool compact; /* no whitespace at all between tokens */
	/* Every rule name starts with this (the root rule is then <prefix>root), so that the
	 * text can be embedded in a larger grammar beside others; NULL or "": none. A prefix
	 * of letters, digits and '-' ending in '-' keeps the names valid and apart. */
	const char *prefix;
	/* Strings written raw, not as JSON: the grammar reads a string's characters themselves,
	 * without quotes or escapes, as a call syntax that carries string parameters as plain
	 * text does (Qwen's XML). Only strings can be written so: a schema that allows no string
	 * is refused, one that allows other types too is held to its strings. */
	bool raw;
	/* With raw: text that never appears inside a string (XML: "</parameter>", where the
	 * value would end). enum/const values holding it are left out, and elsewhere (lengths,
	 * patterns, any string) its first character is never written; NULL: none. */
	const char *raw_stop;
};

/* The schema (JSON text of len bytes) as GBNF text with a rule `root`; *gbnf_out is
 * malloc'd and NUL-terminated (the caller frees it), NULL on failure. opts NULL: defaults
 * (not strict, whitespace allowed). */
int capy_json_schema_to_gbnf(const char *schema_json, size_t len, const struct capy_schema_opts *opts,
			     char **gbnf_out, struct capy_err *err);
/* The same from a parsed schema (the tree is only read). */
int capy_json_schema_tree_to_gbnf(const struct cJSON *schema, const struct capy_schema_opts *opts, char **gbnf_out,
				  struct capy_err *err);
/* The schema compiled to an automaton (capy_grammar_compile of the text above, root `root`). */
int capy_json_schema_compile(const char *schema_json, size_t len, const struct capy_schema_opts *opts,
			     struct capy_grammar **out, struct capy_err *err);

/* Whether the schema leaves every string valid as far as the compiler holds strings: none of
 * enum, const, pattern, a format it enforces, minLength, maxLength, anyOf, oneOf, allOf, $ref
 * at its top. A caller that writes strings its own way (raw XML text, opts.raw) need not
 * compile such a schema: any string will do. */
bool capy_json_schema_any_string(const struct cJSON *schema);

/* A regular expression of the subset `pattern` takes (ECMA-262: docs/structured-output.md) as
 * GBNF text with a rule `root` matching the texts the regex matches whole, as they are (not
 * JSON): as if every alternative were anchored at both ends, so ^ and $ there change
 * nothing. Errors are one line, "regex: <what> at offset N" (N the byte offset in re):
 * CAPY_EFORMAT for a malformed regex, CAPY_EUNSUPPORTED for what the subset refuses
 * (lookaround, backreferences, \b, \p{...}, anchors inside, repeating what can be empty). */
int capy_regex_to_gbnf(const char *re, size_t len, char **gbnf_out, struct capy_err *err);

#endif
