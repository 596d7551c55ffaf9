/* template.h - a Jinja template engine for chat templates, and the JSON value model it renders.
 *
 * The engine implements the part of Jinja2 that Hugging Face chat templates use, configured as
 * transformers configures jinja2 (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
 * loop controls, its own `tojson`, the globals raise_exception and strftime_now), so that a
 * template renders the same bytes as transformers' apply_chat_template. Unsupported features
 * (template inheritance, include/import, call blocks, `%` formatting of strings) fail with an
 * error at compile or render time rather than rendering something different.
 *
 * Values (struct capy_tval) come from JSON and keep what Python's json.loads keeps: key insertion
 * order, the int/float kind of numbers, integers of any size (exact, as their digits) and the
 * float value (printed as Python's repr). Values live in a struct capy_tdoc, an arena freed at
 * once; a value is never freed alone and is immutable once rendered from.
 *
 *	struct capy_tdoc *doc = capy_tdoc_new();
 *	struct capy_tval *vars = capy_tval_dict(doc);
 *	capy_tval_set(doc, vars, "messages", msgs);		(msgs from capy_tdoc_parse_json)
 *	capy_tmpl_compile(src, len, "chat_template", &t, &err);
 *	capy_tmpl_render(t, vars, NULL, &out, &out_len, &err);	(free(out) afterwards)
 *
 * Errors: template syntax and runtime errors fail with CAPY_EFORMAT and a message
 * "<name>:<line>:<column>: <what>" (1-based, columns in characters). raise_exception(msg) fails
 * with CAPY_EINVAL and err->msg set to msg verbatim (cut at CAPY_ERR_MSG_MAX - 1 bytes): the
 * template rejected its input. Exceeding a limit (steps, output, memory, depth) fails with
 * CAPY_EFORMAT naming the limit, so a hostile template can neither hang nor exhaust the stack.
 *
 * Thread-safety: a compiled template is read-only while rendering and may be rendered from many
 * threads at once; a capy_tdoc belongs to one thread while it is being built.
 */
#ifndef CAPY_TEXT_TEMPLATE_H
#define CAPY_TEXT_TEMPLATE_H

#include "../util/err.h"

struct capy_tdoc;
struct capy_tval;
struct capy_tmpl;

/* --- values ----------------------------------------------------------------------------- */

/* A new empty arena of values; NULL on OOM. capy_tdoc_free(NULL) does nothing. */
struct capy_tdoc *capy_tdoc_new(void);
void capy_tdoc_free(struct capy_tdoc *doc);

/* Parse JSON text (RFC 8259, plus NaN/Infinity/-Infinity as Python accepts them) into values in
 * doc. Duplicate keys keep the first position and the last value, as Python dicts do. Lone
 * UTF-16 surrogates in \u escapes become U+FFFD. `what` names the input in messages; the error
 * gives line:column. Nesting deeper than 512 levels is refused. */
int capy_tdoc_parse_json(struct capy_tdoc *doc, const char *text, size_t len, const char *what,
			 struct capy_tval **out, struct capy_err *err);

/* Constructors; each returns NULL on OOM. Strings are copied and must be UTF-8. */
struct capy_tval *capy_tval_none(struct capy_tdoc *doc);
struct capy_tval *capy_tval_bool(struct capy_tdoc *doc, bool b);
struct capy_tval *capy_tval_int(struct capy_tdoc *doc, int64_t i);
struct capy_tval *capy_tval_float(struct capy_tdoc *doc, double f);
struct capy_tval *capy_tval_str(struct capy_tdoc *doc, const char *s, size_t len);
struct capy_tval *capy_tval_list(struct capy_tdoc *doc);
struct capy_tval *capy_tval_dict(struct capy_tdoc *doc);

/* Append to a list / set a key of a dict (replacing an existing key in place); -1 on OOM or
 * when the container has the wrong kind. */
int capy_tval_push(struct capy_tdoc *doc, struct capy_tval *list, struct capy_tval *v);
int capy_tval_set(struct capy_tdoc *doc, struct capy_tval *dict, const char *key,
		  struct capy_tval *v);

/* Look a key up in a dict (NULL if absent or not a dict); list length and item (NULL out of
 * range or not a list); a string's bytes (NULL if not a string). */
struct capy_tval *capy_tval_get(const struct capy_tval *dict, const char *key);
size_t capy_tval_len(const struct capy_tval *list);
struct capy_tval *capy_tval_at(const struct capy_tval *list, size_t i);
const char *capy_tval_strv(const struct capy_tval *v, size_t *len);

/* What a value holds, for walking a parsed JSON document. Integers too big for int64 are
 * CAPY_TVAL_INT (capy_tval_intv fails on them, capy_tval_numv approximates them); values only
 * templates make (undefined, macros, namespaces) are CAPY_TVAL_OTHER. */
enum capy_tval_kind {
	CAPY_TVAL_OTHER,
	CAPY_TVAL_NONE,
	CAPY_TVAL_BOOL,
	CAPY_TVAL_INT,
	CAPY_TVAL_FLOAT,
	CAPY_TVAL_STR,
	CAPY_TVAL_LIST,
	CAPY_TVAL_DICT,
};
enum capy_tval_kind capy_tval_kind(const struct capy_tval *v); /* NULL: CAPY_TVAL_OTHER */
bool capy_tval_boolv(const struct capy_tval *v);	/* false unless a true bool */
/* An integer that fits int64; -1 for anything else (floats included). */
int capy_tval_intv(const struct capy_tval *v, int64_t *out);
/* A number (int, big int or float) as a double; NaN for anything else. */
double capy_tval_numv(const struct capy_tval *v);
/* A dict's entries in insertion order: the number of keys, and the key (NUL-terminated; *klen
 * its length) and value of entry i (NULL out of range or not a dict). */
size_t capy_tval_dict_len(const struct capy_tval *dict);
const char *capy_tval_dict_entry(const struct capy_tval *dict, size_t i, size_t *klen,
				 struct capy_tval **val);

/* Serialize like Python json.dumps(v, ensure_ascii=False) with the default separators
 * ", " and ": "; *out is malloc'd and NUL-terminated. Fails (CAPY_EINVAL) on values JSON cannot
 * hold (undefined, macros, namespaces). */
int capy_tval_to_json(const struct capy_tval *v, char **out, size_t *len, struct capy_err *err);

/* --- templates -------------------------------------------------------------------------- */

/* Limits for one render; a zero field takes the default shown. */
struct capy_tmpl_limits {
	uint64_t max_steps;  /* evaluated nodes and loop iterations: 50,000,000 */
	size_t max_output;   /* bytes of rendered text: 64 MiB */
	size_t max_memory;   /* bytes of values made while rendering: 512 MiB */
	unsigned max_depth;  /* nested macro calls and expression evaluation: 256 */
};

/* Compile template source (UTF-8; "\r\n" and "\r" count as "\n"; one trailing newline is
 * dropped, as jinja2 does). `name` prefixes error messages. *out is freed with capy_tmpl_free. */
int capy_tmpl_compile(const char *src, size_t len, const char *name, struct capy_tmpl **out,
		      struct capy_err *err);
void capy_tmpl_free(struct capy_tmpl *t);

/* Render with the variables of dict `vars` (NULL: none) on top of the globals namespace(),
 * range(), dict(), raise_exception() and strftime_now(). *out is malloc'd, NUL-terminated, and
 * *out_len (if not NULL) its length. `lim` may be NULL. */
int capy_tmpl_render(const struct capy_tmpl *t, const struct capy_tval *vars,
		     const struct capy_tmpl_limits *lim, char **out, size_t *out_len,
		     struct capy_err *err);

#endif
