/* jinja-impl.h - internals shared by the template engine's files (libcore/text/jinja-*.c,
 * template-*.c, chat.c); not a public header.
 *
 * DESIGN. Everything a compile or a render makes lives in one arena (struct jarena), freed at
 * once; values carry no reference counts, so namespaces may refer to themselves and an error can
 * leave from any depth with longjmp (jfail) without a cleanup path. The arena counts the bytes it
 * takes and fails past its limit, which bounds what a hostile template can allocate.
 */
#ifndef CAPY_TEXT_JINJA_IMPL_H
#define CAPY_TEXT_JINJA_IMPL_H

#include "core.h"
#include "text/template.h"

#include <setjmp.h>

/* --- arena ------------------------------------------------------------------------------ */

struct jchunk;

struct jarena {
	struct jchunk *chunks;
	char *cur;
	size_t left;
	size_t total; /* bytes taken from malloc */
	size_t limit; /* 0: none */
	jmp_buf *fail; /* where to go on OOM or limit; NULL: ja_alloc returns NULL */
	bool over_limit; /* the failure was the limit, not malloc */
};

void ja_init(struct jarena *a, size_t limit);
void ja_release(struct jarena *a);
void *ja_alloc(struct jarena *a, size_t n); /* zeroed, 16-byte aligned */
char *ja_strndup(struct jarena *a, const char *s, size_t n);

/* A growable byte buffer in plain heap memory (the output, JSON text, scratch strings). */
struct jbuf {
	char *p;
	size_t len, cap;
	size_t limit; /* 0: none */
	bool failed;  /* OOM or limit: further appends are dropped */
};

void jb_put(struct jbuf *b, const void *s, size_t n);
void jb_putc(struct jbuf *b, char c);
void jb_puts(struct jbuf *b, const char *s);
CAPY_PRINTF(2, 3) void jb_printf(struct jbuf *b, const char *fmt, ...);
void jb_free(struct jbuf *b);

/* --- values ----------------------------------------------------------------------------- */

enum jkind {
	JK_UNDEF, JK_NONE, JK_BOOL, JK_INT, JK_BIGINT, JK_FLOAT, JK_STR,
	JK_LIST, JK_DICT, JK_NS, JK_MACRO, JK_FUNC, JK_LOOP,
};

struct jentry {
	const char *key;
	size_t klen;
	struct capy_tval *val;
};

struct jdict {
	struct jentry *e;
	uint32_t n, cap;
	uint32_t *index; /* open addressing over e[], entry+1 (0 = empty); NULL while small */
	uint32_t index_cap;
};

struct jnode;

struct capy_tval {
	uint8_t kind;
	bool tuple; /* a list that Python would hold as a tuple: repr "(1, 2)" */
	union {
		bool b;
		int64_t i;
		double f;
		struct {
			const char *s; /* NUL-terminated; for JK_BIGINT the decimal digits */
			size_t len;
		} str;
		struct {
			struct capy_tval **v;
			size_t n, cap;
		} list;
		struct jdict dict; /* JK_DICT and JK_NS */
		const struct jnode *macro;
		int func;
		struct {
			struct capy_tval *items; /* a list */
			size_t index;		 /* 0-based */
			struct capy_tval *cyc;	 /* loop itself, for loop.cycle */
		} loop;
	};
};

struct capy_tdoc {
	struct jarena arena;
};

extern struct capy_tval jv_undef, jv_none, jv_true, jv_false;

struct capy_tval *jv_new(struct jarena *a, int kind);
struct capy_tval *jv_int(struct jarena *a, int64_t i);
struct capy_tval *jv_float(struct jarena *a, double f);
struct capy_tval *jv_str(struct jarena *a, const char *s, size_t len); /* copies */
struct capy_tval *jv_str_own(struct jarena *a, const char *s, size_t len); /* s in arena */
struct capy_tval *jv_list(struct jarena *a, size_t cap);
void jv_push(struct jarena *a, struct capy_tval *list, struct capy_tval *v);
struct capy_tval *jv_bool(bool b);

struct capy_tval *jd_get(const struct capy_tval *d, const char *key, size_t klen);
void jd_set(struct jarena *a, struct capy_tval *d, const char *key, size_t klen,
	    struct capy_tval *v);
/* The same; with copy_key false the key must outlive the dict (names in the syntax tree). */
void jd_set_key(struct jarena *a, struct capy_tval *d, const char *key, size_t klen,
		struct capy_tval *v, bool copy_key);

/* Python's repr of a float ("1.0", "1e+16", "inf", "nan"); buf holds 32 bytes. */
void jv_float_repr(double f, char buf[32]);
/* str(v) as Python prints it (undefined: ""), appended to b; repr(v) when `repr`. */
void jv_write(struct jbuf *b, const struct capy_tval *v, bool repr);
/* Python truthiness. */
bool jv_truthy(const struct capy_tval *v);
/* A big integer as a double (for comparisons and float arithmetic). */
double jv_num(const struct capy_tval *v);

/* json.dumps; -1 (with *bad set to the offending value) if a value has no JSON form. */
struct jjson_opts {
	bool ensure_ascii, sort_keys;
	int indent; /* < 0: none */
	const char *item_sep, *key_sep;
};
int jv_to_json(struct jbuf *b, const struct capy_tval *v, const struct jjson_opts *o,
	       const struct capy_tval **bad);
int jv_parse_json(struct jarena *a, const char *text, size_t len, const char *what,
		  struct capy_tval **out, struct capy_err *err);

/* UTF-8 helpers. */
size_t ju_decode(const char *s, size_t len, size_t i, int32_t *cp); /* bytes used, >= 1 */
size_t ju_encode(int32_t cp, char out[4]);
size_t ju_count(const char *s, size_t len); /* code points */
bool ju_valid(const char *s, size_t len);
int32_t ju_hex(const char *s, size_t n); /* n hex digits; -1 if one is not */
bool ju_isspace(int32_t cp); /* Python str.isspace() */

/* --- syntax tree ------------------------------------------------------------------------ */

enum jnode_type {
	/* statements */
	N_BLOCK, N_TEXT, N_OUTPUT, N_IF, N_FOR, N_SET, N_SETBLOCK, N_MACRO, N_BREAK, N_CONTINUE,
	N_FILTERBLOCK, N_WITH,
	/* expressions */
	E_CONST, E_NAME, E_ATTR, E_ITEM, E_SLICE, E_CALL, E_FILTER, E_TEST, E_NEG, E_POS, E_NOT,
	E_BIN, E_AND, E_OR, E_CONCAT, E_CMP, E_COND, E_LIST, E_TUPLE, E_DICT, E_INPUT,
};

enum jop {
	OP_ADD = 1, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW,
	OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN,
};

struct jnode {
	uint8_t type, op;
	bool neg;	/* E_TEST: "is not" */
	uint32_t line, col;
	struct jnode *a, *b, *c, *d, *e;
	struct jnode **args; /* block statements, positional arguments, list items, dict keys */
	uint32_t nargs;
	const char **kwn; /* keyword names (calls, macro parameters) */
	struct jnode **kwv; /* keyword values, macro defaults (may be NULL), dict values */
	uint32_t nkw;
	uint8_t *ops; /* E_CMP: one per operand in args */
	const char *name;
	struct capy_tval *val; /* E_CONST, N_TEXT */
};

struct capy_tmpl {
	struct jarena arena;
	struct jnode *root;
	const char *name;
	const char *src; /* normalized source, for columns */
	size_t len;
};

/* Parse normalized source into t->root; errors through `err` with line:column. */
int jinja_parse(struct capy_tmpl *t, struct capy_err *err);

/* --- lexer and parser state (jinja-lex.c, jinja-parse.c) ------------------------------- */

#define PARSE_MAX_DEPTH 200

enum jtok_type {
	T_EOF, T_DATA, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END,
	T_NAME, T_STRING, T_INT, T_FLOAT, T_OP,
};

struct jtok {
	uint8_t type;
	char op[3];
	size_t pos;
	const char *s; /* names (NUL-terminated in the arena) */
	struct capy_tval *val; /* data, strings, numbers */
};

struct jparser {
	struct capy_tmpl *t;
	struct jarena *a;
	const char *src;
	size_t len;
	struct jtok *toks;
	size_t ntok, cap, i;
	unsigned depth;
	size_t open_pos; /* the tag whose body is being parsed, for "expected 'endfor'" */
	unsigned loops; /* enclosing for loops in the current macro, for break/continue */
	struct capy_err *err;
	jmp_buf fail;
	bool failed;
};

/* Tokenize p->src into p->toks (ending with T_EOF); fails through jp_fail. */
void jinja_lex(struct jparser *p);
/* 1-based line and column (in characters) of a byte offset. */
void jp_line_col(const char *src, size_t len, size_t pos, uint32_t *line, uint32_t *col);
/* Leave the compile with "<name>:<line>:<col>: msg" for the byte offset pos. */
CAPY_NORETURN CAPY_PRINTF(3, 4) void jp_fail(struct jparser *p, size_t pos, const char *fmt, ...);

/* --- rendering -------------------------------------------------------------------------- */

struct jframe;

struct jrender {
	const struct capy_tmpl *t;
	struct jarena *a;
	struct jbuf *out;
	struct jframe *root, *cur;
	jmp_buf fail;
	struct capy_err *err;
	uint64_t steps, max_steps;
	unsigned depth, max_depth;
	struct capy_tval *input; /* the value E_INPUT stands for (filter blocks) */
	struct jbuf scratch; /* reused for str(); freed when the render ends */
	bool raised;  /* raise_exception() was called */
	bool errored; /* jfail() was called */
};

/* Render r->t with the caller's variables; r->a, r->out, r->err and the limits are set. */
int jinja_render(struct jrender *r, const struct capy_tval *vars);

/* Leave the render with "<name>:<line>:<col>: msg" (n may be NULL). */
CAPY_NORETURN CAPY_PRINTF(3, 4) void jfail(struct jrender *r, const struct jnode *n,
					   const char *fmt, ...);
const char *jv_type_name(const struct capy_tval *v);

/* Built-ins (jinja-filters.c): each returns the result or fails through jfail. */
struct jargs {
	struct capy_tval **pos;
	uint32_t npos;
	const char **kwn;
	struct capy_tval **kwv;
	uint32_t nkw;
};
struct capy_tval *jinja_filter(struct jrender *r, const struct jnode *n, const char *name,
			       struct capy_tval *in, struct jargs *args);
bool jinja_test(struct jrender *r, const struct jnode *n, const char *name, struct capy_tval *in,
		struct jargs *args);
struct capy_tval *jinja_method(struct jrender *r, const struct jnode *n, struct capy_tval *obj,
			       const char *name, struct jargs *args);
bool jinja_filter_known(const char *name);
bool jinja_test_known(const char *name);
/* Helpers shared by the built-ins (jinja-methods.c). Arguments: position i or keyword name. */
struct capy_tval *js_arg(const struct jargs *a, uint32_t i, const char *name,
			 struct capy_tval *def);
void js_no_more_args(struct jrender *r, const struct jnode *n, const struct jargs *a,
		     uint32_t npos, const char *const *kw, const char *what);
int64_t js_int_arg(struct jrender *r, const struct jnode *n, struct capy_tval *v,
		   const char *what);
struct capy_tval *js_str_arg(struct jrender *r, const struct jnode *n, struct capy_tval *v,
			     const char *what);
struct capy_tval *js_need_str(struct jrender *r, const struct jnode *n, struct capy_tval *v);

/* A string built in the render's arena. */
struct sbuild {
	struct jrender *r;
	char *p;
	size_t len, cap;
};

void js_sb_put(struct sbuild *b, const char *s, size_t n);
void js_sb_cp(struct sbuild *b, int32_t c);
struct capy_tval *js_sb_done(struct sbuild *b);

enum { CASE_UPPER, CASE_LOWER, CASE_TITLE, CASE_CAPITALIZE };

bool js_is_cased(int32_t c);
bool js_cp_lower(int32_t c);
bool js_cp_upper(int32_t c);
bool js_str_all(const struct capy_tval *s, bool (*pred)(int32_t), bool need_cased);
struct capy_tval *js_strip(struct jrender *r, struct capy_tval *s, const struct capy_tval *chars,
			   bool left, bool right);
struct capy_tval *js_recase(struct jrender *r, struct capy_tval *s, int mode);
struct capy_tval *js_str_replace(struct jrender *r, struct capy_tval *s, struct capy_tval *old,
				 struct capy_tval *new, int64_t count);
struct capy_tval *js_split(struct jrender *r, const struct jnode *n, struct capy_tval *s,
			   struct capy_tval *sep, int64_t maxsplit, bool from_right);
struct capy_tval *js_splitlines(struct jrender *r, struct capy_tval *s, bool keepends);

/* Global functions: index for JK_FUNC values, -1 if unknown. */
int jinja_global_index(const char *name);
const char *jinja_global_name(int fn);
struct capy_tval *jinja_call_global(struct jrender *r, const struct jnode *n, int fn,
				    struct jargs *args);

/* Helpers the built-ins share with the evaluator. */
struct capy_tval *jinja_getattr(struct jrender *r, const struct jnode *n, struct capy_tval *obj,
				const char *name);
struct capy_tval *jinja_getitem(struct jrender *r, const struct jnode *n, struct capy_tval *obj,
				struct capy_tval *key);
bool jinja_equal(const struct capy_tval *x, const struct capy_tval *y);
int jinja_compare(struct jrender *r, const struct jnode *n, const struct capy_tval *x,
		  const struct capy_tval *y); /* <0, 0, >0; fails on incomparable types */
bool jinja_contains(struct jrender *r, const struct jnode *n, struct capy_tval *hay,
		    struct capy_tval *needle);
/* Iterate: a list of the items (dict: keys; string: characters; undefined: empty). */
struct capy_tval *jinja_iter(struct jrender *r, const struct jnode *n, struct capy_tval *v);
struct capy_tval *jinja_to_str(struct jrender *r, const struct capy_tval *v);
struct capy_tval *jinja_call_macro(struct jrender *r, const struct jnode *n,
				   const struct jnode *macro, struct jargs *args);
void jinja_step(struct jrender *r, const struct jnode *n);

#endif
