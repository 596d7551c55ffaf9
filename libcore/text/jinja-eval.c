/* jinja-eval.c - the template interpreter: statements, expressions, scopes, macros.
 *
 * Scopes follow jinja2: a for loop body gets a fresh scope each iteration (a `set` inside does
 * not survive the iteration, hence namespace()), `if` opens none, a macro body sees its
 * arguments, then the template's top-level variables as they are when it is called, then the
 * caller's variables and the globals. Every node evaluated and every loop iteration costs a step;
 * steps, output bytes, arena bytes and macro nesting are all bounded.
 */
#include "text/jinja-impl.h"

#include <math.h>

struct jframe {
	struct jframe *parent;
	struct capy_tval *vars; /* JK_DICT */
};

enum { FLOW_NEXT, FLOW_BREAK, FLOW_CONTINUE };

void jfail(struct jrender *r, const struct jnode *n, const char *fmt, ...)
{
	char msg[768];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (n)
		capy_err_set(r->err, CAPY_EFORMAT, "%s:%u:%u: %s", r->t->name, n->line, n->col, msg);
	else
		capy_err_set(r->err, CAPY_EFORMAT, "%s: %s", r->t->name, msg);
	r->errored = true;
	longjmp(r->fail, 1);
}

void jinja_step(struct jrender *r, const struct jnode *n)
{
	if (++r->steps > r->max_steps)
		jfail(r, n, "template step limit exceeded (%" PRIu64 " steps)", r->max_steps);
}

static void check_out(struct jrender *r, const struct jnode *n)
{
	if (r->out->failed)
		jfail(r, n, "rendered output exceeds %zu bytes", r->out->limit);
}

/* --- scopes ----------------------------------------------------------------------------- */

static struct jframe *frame_new(struct jrender *r, struct jframe *parent)
{
	struct jframe *f = ja_alloc(r->a, sizeof(*f));

	f->parent = parent;
	f->vars = jv_new(r->a, JK_DICT);
	return f;
}

static void frame_clear(struct jframe *f)
{
	struct jdict *d = &f->vars->dict;

	d->n = 0;
	if (d->index)
		memset(d->index, 0, d->index_cap * sizeof(*d->index));
}

/* name is a string of the syntax tree or a literal: it outlives the render. */
static void frame_set(struct jrender *r, struct jframe *f, const char *name,
		      struct capy_tval *v)
{
	jd_set_key(r->a, f->vars, name, strlen(name), v, false);
}

/* NULL when the name is nowhere (then it is undefined). */
static struct capy_tval *lookup(struct jrender *r, const char *name)
{
	size_t len = strlen(name);
	struct jframe *f;
	int g;

	for (f = r->cur; f; f = f->parent) {
		struct capy_tval *v = jd_get(f->vars, name, len);

		if (v)
			return v;
	}
	g = jinja_global_index(name);
	if (g >= 0) {
		struct capy_tval *v = jv_new(r->a, JK_FUNC);

		v->func = g;
		return v;
	}
	return NULL;
}

/* --- values ----------------------------------------------------------------------------- */

struct capy_tval *jinja_to_str(struct jrender *r, const struct capy_tval *v)
{
	struct jbuf *b = &r->scratch;

	if (v->kind == JK_STR)
		return (struct capy_tval *)v;
	b->len = 0;
	b->limit = r->out->limit;
	jv_write(b, v, false);
	if (b->failed)
		jfail(r, NULL, "string too large");
	return jv_str(r->a, b->p ? b->p : "", b->len);
}

static bool is_num(const struct capy_tval *v)
{
	return v->kind == JK_BOOL || v->kind == JK_INT || v->kind == JK_FLOAT ||
	       v->kind == JK_BIGINT;
}

bool jinja_equal(const struct capy_tval *x, const struct capy_tval *y)
{
	size_t i;

	if (is_num(x) && is_num(y)) {
		if (x->kind == JK_BIGINT || y->kind == JK_BIGINT) {
			if (x->kind == JK_BIGINT && y->kind == JK_BIGINT)
				return !strcmp(x->str.s, y->str.s);
			if (x->kind == JK_FLOAT || y->kind == JK_FLOAT)
				return jv_num(x) == jv_num(y);
			return false; /* a big integer never equals one that fits int64 */
		}
		if (x->kind != JK_FLOAT && y->kind != JK_FLOAT)
			return (x->kind == JK_BOOL ? x->b : x->i) == (y->kind == JK_BOOL ? y->b : y->i);
		return jv_num(x) == jv_num(y);
	}
	if (x->kind != y->kind)
		return false;
	switch (x->kind) {
	case JK_UNDEF:
	case JK_NONE:
		return true;
	case JK_STR:
		return x->str.len == y->str.len && !memcmp(x->str.s, y->str.s, x->str.len);
	case JK_LIST:
		if (x->tuple != y->tuple || x->list.n != y->list.n)
			return false;
		for (i = 0; i < x->list.n; i++)
			if (!jinja_equal(x->list.v[i], y->list.v[i]))
				return false;
		return true;
	case JK_DICT:
		if (x->dict.n != y->dict.n)
			return false;
		for (i = 0; i < x->dict.n; i++) {
			struct capy_tval *o = jd_get(y, x->dict.e[i].key, x->dict.e[i].klen);

			if (!o || !jinja_equal(x->dict.e[i].val, o))
				return false;
		}
		return true;
	case JK_MACRO:
		return x->macro == y->macro;
	case JK_FUNC:
		return x->func == y->func;
	default:
		return x == y;
	}
}

int jinja_compare(struct jrender *r, const struct jnode *n, const struct capy_tval *x,
		  const struct capy_tval *y)
{
	size_t i;

	if (is_num(x) && is_num(y)) {
		if (x->kind != JK_FLOAT && y->kind != JK_FLOAT && x->kind != JK_BIGINT &&
		    y->kind != JK_BIGINT) {
			int64_t a = x->kind == JK_BOOL ? x->b : x->i, b = y->kind == JK_BOOL ? y->b : y->i;

			return (a > b) - (a < b);
		}
		return (jv_num(x) > jv_num(y)) - (jv_num(x) < jv_num(y));
	}
	if (x->kind == JK_STR && y->kind == JK_STR) {
		int c = memcmp(x->str.s, y->str.s, CAPY_MIN(x->str.len, y->str.len));

		return c ? (c > 0) - (c < 0) : (x->str.len > y->str.len) - (x->str.len < y->str.len);
	}
	if (x->kind == JK_LIST && y->kind == JK_LIST && x->tuple == y->tuple) {
		for (i = 0; i < x->list.n && i < y->list.n; i++) {
			if (!jinja_equal(x->list.v[i], y->list.v[i]))
				return jinja_compare(r, n, x->list.v[i], y->list.v[i]);
		}
		return (x->list.n > y->list.n) - (x->list.n < y->list.n);
	}
	jfail(r, n, "'<' not supported between instances of '%s' and '%s'", jv_type_name(x),
	      jv_type_name(y));
}

bool jinja_contains(struct jrender *r, const struct jnode *n, struct capy_tval *hay,
		    struct capy_tval *needle)
{
	size_t i;

	switch (hay->kind) {
	case JK_STR:
		if (needle->kind != JK_STR)
			jfail(r, n, "'in <string>' requires string as left operand, not %s",
			      jv_type_name(needle));
		return !needle->str.len ||
		       memmem(hay->str.s, hay->str.len, needle->str.s, needle->str.len);
	case JK_LIST:
		for (i = 0; i < hay->list.n; i++)
			if (jinja_equal(hay->list.v[i], needle))
				return true;
		return false;
	case JK_DICT:
		return needle->kind == JK_STR && jd_get(hay, needle->str.s, needle->str.len);
	case JK_UNDEF:
		return false;
	default:
		jfail(r, n, "argument of type '%s' is not iterable", jv_type_name(hay));
	}
}

struct capy_tval *jinja_iter(struct jrender *r, const struct jnode *n, struct capy_tval *v)
{
	struct capy_tval *l;
	size_t i;

	switch (v->kind) {
	case JK_LIST:
		return v;
	case JK_UNDEF:
		return jv_list(r->a, 0);
	case JK_DICT:
		l = jv_list(r->a, v->dict.n);
		for (i = 0; i < v->dict.n; i++)
			jv_push(r->a, l, jv_str_own(r->a, v->dict.e[i].key, v->dict.e[i].klen));
		return l;
	case JK_STR:
		l = jv_list(r->a, v->str.len);
		for (i = 0; i < v->str.len;) {
			int32_t c;
			size_t k = ju_decode(v->str.s, v->str.len, i, &c);

			jv_push(r->a, l, jv_str(r->a, v->str.s + i, k));
			i += k;
		}
		return l;
	default:
		jfail(r, n, "'%s' object is not iterable", jv_type_name(v));
	}
}

static const char *undef_name(const struct jnode *n)
{
	return n && n->type == E_NAME ? n->name : NULL;
}

CAPY_NORETURN static void fail_undefined(struct jrender *r, const struct jnode *n,
					 const struct jnode *obj)
{
	const char *name = undef_name(obj);

	if (name)
		jfail(r, n, "'%s' is undefined", name);
	if (obj && obj->type == E_ATTR)
		jfail(r, n, "'%s' is undefined", obj->name);
	jfail(r, n, "undefined value used");
}

struct capy_tval *jinja_getattr(struct jrender *r, const struct jnode *n, struct capy_tval *obj,
				const char *name)
{
	struct capy_tval *v;
	const struct capy_tval *items;
	size_t i, len;

	switch (obj->kind) {
	case JK_UNDEF:
		fail_undefined(r, n, n ? n->a : NULL);
	case JK_DICT:
	case JK_NS:
		v = jd_get(obj, name, strlen(name));
		return v ? v : &jv_undef;
	case JK_LOOP:
		items = obj->loop.items;
		i = obj->loop.index;
		len = items->list.n;
		if (!strcmp(name, "index"))
			return jv_int(r->a, (int64_t)i + 1);
		if (!strcmp(name, "index0"))
			return jv_int(r->a, (int64_t)i);
		if (!strcmp(name, "revindex"))
			return jv_int(r->a, (int64_t)(len - i));
		if (!strcmp(name, "revindex0"))
			return jv_int(r->a, (int64_t)(len - i - 1));
		if (!strcmp(name, "first"))
			return jv_bool(i == 0);
		if (!strcmp(name, "last"))
			return jv_bool(i + 1 == len);
		if (!strcmp(name, "length"))
			return jv_int(r->a, (int64_t)len);
		if (!strcmp(name, "previtem"))
			return i ? items->list.v[i - 1] : &jv_undef;
		if (!strcmp(name, "nextitem"))
			return i + 1 < len ? items->list.v[i + 1] : &jv_undef;
		if (!strcmp(name, "depth"))
			return jv_int(r->a, 1);
		if (!strcmp(name, "depth0"))
			return jv_int(r->a, 0);
		return &jv_undef;
	default:
		return &jv_undef;
	}
}

/* Python's slice.indices(): clamp start/stop for a sequence of length len. */
static void slice_indices(struct jrender *r, const struct jnode *n, const struct capy_tval *s,
			  int64_t len, int64_t *start, int64_t *stop, int64_t *step)
{
	const struct capy_tval *parts[3];
	int64_t v[3];
	int k;

	parts[0] = s->list.v[0];
	parts[1] = s->list.v[1];
	parts[2] = s->list.v[2];
	for (k = 0; k < 3; k++) {
		const struct capy_tval *p = parts[k];

		if (p->kind == JK_NONE)
			continue;
		if (p->kind != JK_INT && p->kind != JK_BOOL)
			jfail(r, n, "slice indices must be integers or None");
		v[k] = p->kind == JK_BOOL ? p->b : p->i;
	}
	*step = parts[2]->kind == JK_NONE ? 1 : v[2];
	if (*step == 0)
		jfail(r, n, "slice step cannot be zero");
	for (k = 0; k < 2; k++) {
		int64_t *out = k ? stop : start;

		if (parts[k]->kind == JK_NONE) {
			*out = *step < 0 ? (k ? -1 : len - 1) : (k ? len : 0);
			continue;
		}
		*out = v[k];
		if (*out < 0) {
			*out += len;
			if (*out < 0)
				*out = *step < 0 ? -1 : 0;
		} else if (*out >= len) {
			*out = *step < 0 ? len - 1 : len;
		}
	}
}

static struct capy_tval *do_slice(struct jrender *r, const struct jnode *n, struct capy_tval *obj,
				  struct capy_tval *s)
{
	int64_t start, stop, step, i;

	if (obj->kind == JK_LIST) {
		struct capy_tval *l = jv_list(r->a, 0);

		slice_indices(r, n, s, (int64_t)obj->list.n, &start, &stop, &step);
		for (i = start; step > 0 ? i < stop : i > stop; i += step)
			jv_push(r->a, l, obj->list.v[i]);
		l->tuple = obj->tuple;
		return l;
	}
	if (obj->kind == JK_STR) {
		struct capy_tval *chars = jinja_iter(r, n, obj);
		char *p = ja_alloc(r->a, obj->str.len + 1);
		size_t o = 0;

		slice_indices(r, n, s, (int64_t)chars->list.n, &start, &stop, &step);
		for (i = start; step > 0 ? i < stop : i > stop; i += step) {
			memcpy(p + o, chars->list.v[i]->str.s, chars->list.v[i]->str.len);
			o += chars->list.v[i]->str.len;
		}
		return jv_str_own(r->a, p, o);
	}
	if (obj->kind == JK_UNDEF)
		fail_undefined(r, n, n->a);
	jfail(r, n, "'%s' object is not subscriptable", jv_type_name(obj));
}

struct capy_tval *jinja_getitem(struct jrender *r, const struct jnode *n, struct capy_tval *obj,
				struct capy_tval *key)
{
	int64_t i, len;

	if (key->kind == JK_LIST && key->tuple && key->list.n == 3 && n && n->b &&
	    n->b->type == E_SLICE)
		return do_slice(r, n, obj, key);
	switch (obj->kind) {
	case JK_UNDEF:
		fail_undefined(r, n, n ? n->a : NULL);
	case JK_DICT:
	case JK_NS:
		if (key->kind == JK_STR) {
			struct capy_tval *v = jd_get(obj, key->str.s, key->str.len);

			return v ? v : &jv_undef;
		}
		return &jv_undef;
	case JK_LOOP:
		return key->kind == JK_STR ? jinja_getattr(r, n, obj, key->str.s) : &jv_undef;
	case JK_LIST:
	case JK_STR:
		if (key->kind != JK_INT && key->kind != JK_BOOL)
			return &jv_undef;
		i = key->kind == JK_BOOL ? key->b : key->i;
		if (obj->kind == JK_LIST) {
			len = (int64_t)obj->list.n;
			if (i < 0)
				i += len;
			return i >= 0 && i < len ? obj->list.v[i] : &jv_undef;
		} else {
			struct capy_tval *chars = jinja_iter(r, n, obj);

			len = (int64_t)chars->list.n;
			if (i < 0)
				i += len;
			return i >= 0 && i < len ? chars->list.v[i] : &jv_undef;
		}
	default:
		return &jv_undef;
	}
}

/* --- arithmetic ------------------------------------------------------------------------- */

static bool is_intlike(const struct capy_tval *v)
{
	return v->kind == JK_INT || v->kind == JK_BOOL;
}

static int64_t ival(const struct capy_tval *v)
{
	return v->kind == JK_BOOL ? v->b : v->i;
}

static struct capy_tval *repeat(struct jrender *r, const struct jnode *n, struct capy_tval *seq,
				int64_t times)
{
	int64_t k;

	if (times < 0)
		times = 0;
	if (seq->kind == JK_STR) {
		struct capy_tval *s;
		char *p;

		if (times && seq->str.len > r->out->limit / (uint64_t)times)
			jfail(r, n, "string repetition too large");
		p = ja_alloc(r->a, seq->str.len * (size_t)times + 1);
		for (k = 0; k < times; k++)
			memcpy(p + seq->str.len * (size_t)k, seq->str.s, seq->str.len);
		s = jv_str_own(r->a, p, seq->str.len * (size_t)times);
		return s;
	} else {
		struct capy_tval *l = jv_list(r->a, 0);
		size_t i;

		if (times && seq->list.n > (1u << 24) / (uint64_t)times)
			jfail(r, n, "list repetition too large");
		for (k = 0; k < times; k++)
			for (i = 0; i < seq->list.n; i++)
				jv_push(r->a, l, seq->list.v[i]);
		l->tuple = seq->tuple;
		return l;
	}
}

static struct capy_tval *binary(struct jrender *r, const struct jnode *n, int op,
				struct capy_tval *x, struct capy_tval *y)
{
	static const char *names[] = { "", "+", "-", "*", "/", "//", "%", "**" };
	int64_t a, b, res;

	if (x->kind == JK_UNDEF)
		fail_undefined(r, n, n->a);
	if (y->kind == JK_UNDEF)
		fail_undefined(r, n, n->b);
	if (x->kind == JK_BIGINT || y->kind == JK_BIGINT)
		jfail(r, n, "arithmetic on integers beyond 64 bits is not supported");
	if (op == OP_ADD && x->kind == JK_STR && y->kind == JK_STR) {
		char *p = ja_alloc(r->a, x->str.len + y->str.len + 1);

		memcpy(p, x->str.s, x->str.len);
		memcpy(p + x->str.len, y->str.s, y->str.len);
		return jv_str_own(r->a, p, x->str.len + y->str.len);
	}
	if (op == OP_ADD && x->kind == JK_LIST && y->kind == JK_LIST && x->tuple == y->tuple) {
		struct capy_tval *l = jv_list(r->a, x->list.n + y->list.n);
		size_t i;

		for (i = 0; i < x->list.n; i++)
			jv_push(r->a, l, x->list.v[i]);
		for (i = 0; i < y->list.n; i++)
			jv_push(r->a, l, y->list.v[i]);
		l->tuple = x->tuple;
		return l;
	}
	if (op == OP_MUL && (x->kind == JK_STR || x->kind == JK_LIST) && is_intlike(y))
		return repeat(r, n, x, ival(y));
	if (op == OP_MUL && (y->kind == JK_STR || y->kind == JK_LIST) && is_intlike(x))
		return repeat(r, n, y, ival(x));
	if (op == OP_MOD && x->kind == JK_STR)
		jfail(r, n, "'%%' string formatting is not supported");
	if (!is_num(x) || !is_num(y))
		jfail(r, n, "unsupported operand type(s) for %s: '%s' and '%s'", names[op],
		      jv_type_name(x), jv_type_name(y));
	if (is_intlike(x) && is_intlike(y) && op != OP_DIV) {
		a = ival(x);
		b = ival(y);
		switch (op) {
		case OP_ADD:
			if (__builtin_add_overflow(a, b, &res))
				goto overflow;
			return jv_int(r->a, res);
		case OP_SUB:
			if (__builtin_sub_overflow(a, b, &res))
				goto overflow;
			return jv_int(r->a, res);
		case OP_MUL:
			if (__builtin_mul_overflow(a, b, &res))
				goto overflow;
			return jv_int(r->a, res);
		case OP_FLOORDIV:
		case OP_MOD:
			if (!b)
				jfail(r, n, "integer division or modulo by zero");
			if (a == INT64_MIN && b == -1)
				goto overflow;
			res = a / b;
			if ((a % b) && ((a < 0) != (b < 0)))
				res--;
			return jv_int(r->a, op == OP_FLOORDIV ? res : a - res * b);
		case OP_POW:
			if (b >= 0) {
				int64_t acc = 1;

				for (; b; b--) {
					if (__builtin_mul_overflow(acc, a, &acc))
						goto overflow;
					if (acc == 0 || acc == 1)
						break;
				}
				return jv_int(r->a, acc);
			}
			return jv_float(r->a, pow((double)a, (double)b));
		}
	}
	{
		double fa = jv_num(x), fb = jv_num(y), q;

		switch (op) {
		case OP_ADD: return jv_float(r->a, fa + fb);
		case OP_SUB: return jv_float(r->a, fa - fb);
		case OP_MUL: return jv_float(r->a, fa * fb);
		case OP_DIV:
			if (fb == 0)
				jfail(r, n, "division by zero");
			return jv_float(r->a, fa / fb);
		case OP_FLOORDIV:
		case OP_MOD: {
			/* Python's float divmod */
			double mod, div, fdiv;

			if (fb == 0)
				jfail(r, n, "float division or modulo by zero");
			mod = fmod(fa, fb);
			div = (fa - mod) / fb;
			if (mod) {
				if ((fb < 0) != (mod < 0)) {
					mod += fb;
					div -= 1.0;
				}
			} else {
				mod = copysign(0.0, fb);
			}
			if (div) {
				fdiv = floor(div);
				if (div - fdiv > 0.5)
					fdiv += 1.0;
			} else {
				fdiv = copysign(0.0, fa / fb);
			}
			return jv_float(r->a, op == OP_MOD ? mod : fdiv);
		}
		default:
			if (fa == 0 && fb < 0)
				jfail(r, n, "0.0 cannot be raised to a negative power");
			q = pow(fa, fb);
			if (isnan(q) && !isnan(fa) && !isnan(fb))
				jfail(r, n, "complex results are not supported");
			return jv_float(r->a, q);
		}
	}
overflow:
	jfail(r, n, "integer overflow in '%s'", names[op]);
}

/* --- expressions ------------------------------------------------------------------------ */

static struct capy_tval *eval(struct jrender *r, const struct jnode *n);

static void eval_args(struct jrender *r, const struct jnode *n, struct jargs *a)
{
	uint32_t i;

	a->npos = n->nargs;
	a->nkw = n->nkw;
	a->kwn = n->kwn;
	a->pos = n->nargs ? ja_alloc(r->a, n->nargs * sizeof(*a->pos)) : NULL;
	a->kwv = n->nkw ? ja_alloc(r->a, n->nkw * sizeof(*a->kwv)) : NULL;
	for (i = 0; i < n->nargs; i++)
		a->pos[i] = eval(r, n->args[i]);
	for (i = 0; i < n->nkw; i++)
		a->kwv[i] = eval(r, n->kwv[i]);
}

/* Bind a value to a name, or unpack it over a tuple of names. */
static void assign(struct jrender *r, struct jframe *f, const struct jnode *target,
		   struct capy_tval *v)
{
	uint32_t i;

	if (target->type == E_NAME) {
		frame_set(r, f, target->name, v);
		return;
	}
	v = jinja_iter(r, target, v);
	if (v->list.n != target->nargs)
		jfail(r, target, "%s values to unpack (expected %u, got %zu)",
		      v->list.n > target->nargs ? "too many" : "not enough", target->nargs,
		      v->list.n);
	for (i = 0; i < target->nargs; i++)
		frame_set(r, f, target->args[i]->name, v->list.v[i]);
}


static int exec(struct jrender *r, const struct jnode *n);

/* Run a block with its output captured as a string (macro bodies, set and filter blocks):
 * the text is written to the output as usual, then cut back off. */
static struct capy_tval *capture(struct jrender *r, const struct jnode *body)
{
	size_t mark = r->out->len;
	struct capy_tval *s;

	exec(r, body);
	s = jv_str(r->a, r->out->p ? r->out->p + mark : "", r->out->len - mark);
	r->out->len = mark;
	if (r->out->p)
		r->out->p[mark] = '\0';
	return s;
}

struct capy_tval *jinja_call_macro(struct jrender *r, const struct jnode *n,
				   const struct jnode *m, struct jargs *args)
{
	struct jframe *saved = r->cur, *f;
	struct capy_tval *varargs = jv_list(r->a, 0), *kwargs = jv_new(r->a, JK_DICT), *res;
	uint32_t i, k;

	varargs->tuple = true;
	if (++r->depth > r->max_depth)
		jfail(r, n, "macro calls nested deeper than %u", r->max_depth);
	f = frame_new(r, r->root);
	for (i = 0; i < args->npos; i++) {
		if (i < m->nkw)
			frame_set(r, f, m->kwn[i], args->pos[i]);
		else
			jv_push(r->a, varargs, args->pos[i]);
	}
	for (i = 0; i < args->nkw; i++) {
		for (k = 0; k < m->nkw; k++)
			if (!strcmp(args->kwn[i], m->kwn[k]))
				break;
		if (k == m->nkw)
			jd_set(r->a, kwargs, args->kwn[i], strlen(args->kwn[i]), args->kwv[i]);
		else if (k < args->npos)
			jfail(r, n, "macro '%s' got multiple values for argument '%s'", m->name,
			      m->kwn[k]);
		else
			frame_set(r, f, m->kwn[k], args->kwv[i]);
	}
	r->cur = f;
	/* Defaults are evaluated at call time, in the macro's scope. */
	for (k = 0; k < m->nkw; k++) {
		if (jd_get(f->vars, m->kwn[k], strlen(m->kwn[k])))
			continue;
		frame_set(r, f, m->kwn[k], m->kwv[k] ? eval(r, m->kwv[k]) : &jv_undef);
	}
	frame_set(r, f, "varargs", varargs);
	frame_set(r, f, "kwargs", kwargs);
	res = capture(r, m->b);
	r->cur = saved;
	r->depth--;
	return res;
}

static struct capy_tval *call(struct jrender *r, const struct jnode *n)
{
	const struct jnode *callee = n->a;
	struct capy_tval *fn;
	struct jargs args;

	if (callee->type == E_ATTR) {
		struct capy_tval *obj = eval(r, callee->a);

		if (obj->kind == JK_UNDEF)
			fail_undefined(r, n, callee->a);
		if (obj->kind == JK_NS) {
			fn = jinja_getattr(r, callee, obj, callee->name);
		} else {
			eval_args(r, n, &args);
			return jinja_method(r, n, obj, callee->name, &args);
		}
	} else {
		fn = eval(r, callee);
	}
	eval_args(r, n, &args);
	if (fn->kind == JK_MACRO)
		return jinja_call_macro(r, n, fn->macro, &args);
	if (fn->kind == JK_FUNC)
		return jinja_call_global(r, n, fn->func, &args);
	if (fn->kind == JK_UNDEF)
		fail_undefined(r, n, callee);
	jfail(r, n, "'%s' object is not callable", jv_type_name(fn));
}

static struct capy_tval *compare(struct jrender *r, const struct jnode *n)
{
	struct capy_tval *left = eval(r, n->a);
	uint32_t i;

	for (i = 0; i < n->nargs; i++) {
		struct capy_tval *right = eval(r, n->args[i]);
		bool ok;

		switch (n->ops[i]) {
		case OP_EQ: ok = jinja_equal(left, right); break;
		case OP_NE: ok = !jinja_equal(left, right); break;
		case OP_LT: ok = jinja_compare(r, n, left, right) < 0; break;
		case OP_LE: ok = jinja_compare(r, n, left, right) <= 0; break;
		case OP_GT: ok = jinja_compare(r, n, left, right) > 0; break;
		case OP_GE: ok = jinja_compare(r, n, left, right) >= 0; break;
		case OP_IN: ok = jinja_contains(r, n, right, left); break;
		default: ok = !jinja_contains(r, n, right, left); break;
		}
		if (!ok)
			return &jv_false;
		left = right;
	}
	return &jv_true;
}

static struct capy_tval *eval(struct jrender *r, const struct jnode *n)
{
	struct capy_tval *x, *y;
	struct jargs args;
	uint32_t i;

	jinja_step(r, n);
	switch (n->type) {
	case E_CONST:
		return n->val;
	case E_NAME:
		x = lookup(r, n->name);
		return x ? x : &jv_undef;
	case E_ATTR:
		return jinja_getattr(r, n, eval(r, n->a), n->name);
	case E_ITEM:
		x = eval(r, n->a);
		return jinja_getitem(r, n, x, eval(r, n->b));
	case E_SLICE:
		x = jv_list(r->a, 3);
		x->tuple = true;
		jv_push(r->a, x, n->a ? eval(r, n->a) : &jv_none);
		jv_push(r->a, x, n->b ? eval(r, n->b) : &jv_none);
		jv_push(r->a, x, n->c ? eval(r, n->c) : &jv_none);
		return x;
	case E_CALL:
		return call(r, n);
	case E_FILTER:
		x = eval(r, n->a);
		eval_args(r, n, &args);
		return jinja_filter(r, n, n->name, x, &args);
	case E_TEST:
		x = eval(r, n->a);
		eval_args(r, n, &args);
		return jv_bool(jinja_test(r, n, n->name, x, &args) != n->neg);
	case E_NEG:
	case E_POS:
		x = eval(r, n->a);
		if (x->kind == JK_UNDEF)
			fail_undefined(r, n, n->a);
		if (x->kind == JK_FLOAT)
			return n->type == E_NEG ? jv_float(r->a, -x->f) : x;
		if (!is_intlike(x))
			jfail(r, n, "bad operand type for unary %c: '%s'", n->type == E_NEG ? '-' : '+',
			      jv_type_name(x));
		if (n->type == E_POS)
			return jv_int(r->a, ival(x));
		if (ival(x) == INT64_MIN)
			jfail(r, n, "integer overflow in '-'");
		return jv_int(r->a, -ival(x));
	case E_NOT:
		return jv_bool(!jv_truthy(eval(r, n->a)));
	case E_AND:
		x = eval(r, n->a);
		return jv_truthy(x) ? eval(r, n->b) : x;
	case E_OR:
		x = eval(r, n->a);
		return jv_truthy(x) ? x : eval(r, n->b);
	case E_BIN:
		x = eval(r, n->a);
		y = eval(r, n->b);
		return binary(r, n, n->op, x, y);
	case E_CONCAT: {
		struct capy_tval **parts = ja_alloc(r->a, n->nargs * sizeof(*parts));
		size_t len = 0, o = 0;
		char *p;

		for (i = 0; i < n->nargs; i++) {
			parts[i] = jinja_to_str(r, eval(r, n->args[i]));
			len += parts[i]->str.len;
		}
		if (len > r->out->limit)
			jfail(r, n, "string too large");
		p = ja_alloc(r->a, len + 1);
		for (i = 0; i < n->nargs; i++) {
			memcpy(p + o, parts[i]->str.s, parts[i]->str.len);
			o += parts[i]->str.len;
		}
		return jv_str_own(r->a, p, len);
	}
	case E_CMP:
		return compare(r, n);
	case E_COND:
		if (jv_truthy(eval(r, n->b)))
			return eval(r, n->a);
		return n->c ? eval(r, n->c) : &jv_undef;
	case E_LIST:
	case E_TUPLE:
		x = jv_list(r->a, n->nargs);
		x->tuple = n->type == E_TUPLE;
		for (i = 0; i < n->nargs; i++)
			jv_push(r->a, x, eval(r, n->args[i]));
		return x;
	case E_DICT:
		x = jv_new(r->a, JK_DICT);
		for (i = 0; i < n->nargs; i++) {
			struct capy_tval *k = eval(r, n->args[i]);

			if (k->kind != JK_STR)
				jfail(r, n->args[i], "dict keys other than strings are not supported");
			jd_set(r->a, x, k->str.s, k->str.len, eval(r, n->kwv[i]));
		}
		return x;
	case E_INPUT:
		return r->input;
	default:
		CAPY_BUG("template: expression node %d", n->type);
	}
}

/* --- statements ------------------------------------------------------------------------- */

static void emit_text(struct jrender *r, const struct jnode *n, const struct capy_tval *v)
{
	if (v->kind == JK_STR) {
		jb_put(r->out, v->str.s, v->str.len);
	} else {
		/* str() straight into the output */
		jv_write(r->out, v, false);
	}
	check_out(r, n);
}

static int exec_for(struct jrender *r, const struct jnode *n)
{
	struct capy_tval *items = jinja_iter(r, n->b, eval(r, n->b)), *loop;
	struct jframe *outer = r->cur, *f;
	size_t i;

	if (n->c) {
		/* "for x in xs if cond": filter first, so loop.length counts what is left */
		struct capy_tval *kept = jv_list(r->a, 0);

		f = frame_new(r, outer);
		r->cur = f;
		for (i = 0; i < items->list.n; i++) {
			jinja_step(r, n);
			frame_clear(f);
			assign(r, f, n->a, items->list.v[i]);
			if (jv_truthy(eval(r, n->c)))
				jv_push(r->a, kept, items->list.v[i]);
		}
		r->cur = outer;
		items = kept;
	}
	if (!items->list.n) {
		if (n->e)
			return exec(r, n->e);
		return FLOW_NEXT;
	}
	loop = jv_new(r->a, JK_LOOP);
	loop->loop.items = items;
	f = frame_new(r, outer);
	r->cur = f;
	for (i = 0; i < items->list.n; i++) {
		int flow;

		jinja_step(r, n);
		frame_clear(f);
		loop->loop.index = i;
		assign(r, f, n->a, items->list.v[i]);
		frame_set(r, f, "loop", loop);
		flow = exec(r, n->d);
		if (flow == FLOW_BREAK)
			break;
	}
	r->cur = outer;
	return FLOW_NEXT;
}

static void exec_set(struct jrender *r, const struct jnode *target, struct capy_tval *v)
{
	if (target->type == E_ATTR) {
		struct capy_tval *ns = lookup(r, target->a->name);

		if (!ns || ns->kind != JK_NS)
			jfail(r, target, "cannot assign attribute on non-namespace object");
		jd_set(r->a, ns, target->name, strlen(target->name), v);
		return;
	}
	assign(r, r->cur, target, v);
}

static struct capy_tval *apply_filters(struct jrender *r, const struct jnode *chain,
				       struct capy_tval *in)
{
	struct capy_tval *saved = r->input, *v;

	r->input = in;
	v = eval(r, chain);
	r->input = saved;
	return v;
}

static int exec(struct jrender *r, const struct jnode *n)
{
	struct capy_tval *v;
	uint32_t i;

	jinja_step(r, n);
	switch (n->type) {
	case N_BLOCK:
		for (i = 0; i < n->nargs; i++) {
			int flow = exec(r, n->args[i]);

			if (flow != FLOW_NEXT)
				return flow;
		}
		return FLOW_NEXT;
	case N_TEXT:
		emit_text(r, n, n->val);
		return FLOW_NEXT;
	case N_OUTPUT:
		emit_text(r, n, eval(r, n->a));
		return FLOW_NEXT;
	case N_IF:
		if (jv_truthy(eval(r, n->a)))
			return exec(r, n->b);
		return n->c ? exec(r, n->c) : FLOW_NEXT;
	case N_FOR:
		return exec_for(r, n);
	case N_SET:
		exec_set(r, n->a, eval(r, n->b));
		return FLOW_NEXT;
	case N_SETBLOCK:
		v = capture(r, n->b);
		if (n->c)
			v = apply_filters(r, n->c, v);
		exec_set(r, n->a, v);
		return FLOW_NEXT;
	case N_FILTERBLOCK:
		v = apply_filters(r, n->c, capture(r, n->b));
		emit_text(r, n, v);
		return FLOW_NEXT;
	case N_WITH: {
		struct jframe *outer = r->cur, *f = frame_new(r, outer);
		int flow;

		/* the values are evaluated in the outer scope */
		for (i = 0; i < n->nkw; i++)
			frame_set(r, f, n->kwn[i], eval(r, n->kwv[i]));
		r->cur = f;
		flow = exec(r, n->b);
		r->cur = outer;
		return flow;
	}
	case N_MACRO:
		v = jv_new(r->a, JK_MACRO);
		v->macro = n;
		frame_set(r, r->cur, n->name, v);
		return FLOW_NEXT;
	case N_BREAK:
		return FLOW_BREAK;
	case N_CONTINUE:
		return FLOW_CONTINUE;
	default:
		CAPY_BUG("template: statement node %d", n->type);
	}
}

int jinja_render(struct jrender *r, const struct capy_tval *vars)
{
	struct jframe *callers;

	r->a->fail = &r->fail;
	if (setjmp(r->fail)) {
		r->a->fail = NULL;
		if (r->raised)
			return CAPY_EINVAL;
		if (r->errored)
			return CAPY_EFORMAT;
		if (r->a->over_limit)
			return capy_err_set(r->err, CAPY_EFORMAT,
					    "%s: template memory limit exceeded (%zu bytes)",
					    r->t->name, r->a->limit);
		return capy_err_set(r->err, CAPY_ENOMEM, "%s: out of memory while rendering",
				    r->t->name);
	}
	/* The caller's variables are read-only; top-level `set`s go to a frame above them. */
	callers = ja_alloc(r->a, sizeof(*callers));
	callers->vars = vars && vars->kind == JK_DICT ? (struct capy_tval *)vars :
							 jv_new(r->a, JK_DICT);
	r->root = frame_new(r, callers);
	r->cur = r->root;
	exec(r, r->t->root);
	r->a->fail = NULL;
	return 0;
}
