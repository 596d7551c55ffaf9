/* jinja-parse.c - the template parser: tokens to a syntax tree.
 *
 * Recursive descent with jinja2's operator precedence (or < and < not < comparisons < + - <
 * ~ < * / // % < ** < unary < postfix < filters and tests); its depth is bounded so that deeply
 * nested input fails instead of exhausting the stack.
 */
#include "text/jinja-impl.h"

static struct jtok *cur(struct jparser *p)
{
	return &p->toks[p->i];
}

static struct jtok *peek(struct jparser *p, size_t ahead)
{
	return &p->toks[CAPY_MIN(p->i + ahead, p->ntok - 1)];
}

static bool is_op(const struct jtok *t, const char *op)
{
	return t->type == T_OP && !strcmp(t->op, op);
}

static bool is_name(const struct jtok *t, const char *name)
{
	return t->type == T_NAME && !strcmp(t->s, name);
}

static const char *describe(const struct jtok *t)
{
	switch (t->type) {
	case T_EOF: return "end of template";
	case T_DATA: return "template data";
	case T_VAR_BEGIN: return "{{";
	case T_VAR_END: return "}}";
	case T_BLOCK_BEGIN: return "{%";
	case T_BLOCK_END: return "%}";
	case T_NAME: return t->s;
	case T_STRING: return "string";
	case T_INT: return "integer";
	case T_FLOAT: return "float";
	default: return t->op;
	}
}

static void expect_op(struct jparser *p, const char *op)
{
	if (!is_op(cur(p), op))
		jp_fail(p, cur(p)->pos, "expected '%s', got '%s'", op, describe(cur(p)));
	p->i++;
}

static const char *expect_name(struct jparser *p)
{
	if (cur(p)->type != T_NAME)
		jp_fail(p, cur(p)->pos, "expected a name, got '%s'", describe(cur(p)));
	return p->toks[p->i++].s;
}

static void expect_type(struct jparser *p, int type, const char *what)
{
	if (cur(p)->type != type)
		jp_fail(p, cur(p)->pos, "expected %s, got '%s'", what, describe(cur(p)));
	p->i++;
}

static struct jnode *node(struct jparser *p, int type, size_t pos)
{
	struct jnode *n = ja_alloc(p->a, sizeof(*n));

	n->type = (uint8_t)type;
	jp_line_col(p->src, p->len, pos, &n->line, &n->col);
	return n;
}

/* A growable array of node pointers while parsing. */
struct nvec {
	struct jnode **v;
	uint32_t n, cap;
	const char **names;
};

static void nv_push(struct jparser *p, struct nvec *nv, struct jnode *n, const char *name)
{
	if (nv->n == nv->cap) {
		uint32_t cap = nv->cap ? nv->cap * 2 : 4;
		struct jnode **v = ja_alloc(p->a, cap * sizeof(*v));
		const char **names = ja_alloc(p->a, cap * sizeof(*names));

		if (nv->n) {
			memcpy(v, nv->v, nv->n * sizeof(*v));
			memcpy(names, nv->names, nv->n * sizeof(*names));
		}
		nv->v = v;
		nv->names = names;
		nv->cap = cap;
	}
	nv->names[nv->n] = name;
	nv->v[nv->n++] = n;
}

static void enter(struct jparser *p)
{
	if (++p->depth > PARSE_MAX_DEPTH)
		jp_fail(p, cur(p)->pos, "expression nested too deeply");
}

static struct jnode *parse_expr(struct jparser *p, bool condexpr);
static struct jnode *parse_unary(struct jparser *p, bool with_filter);
static struct jnode *parse_primary(struct jparser *p);
static struct jnode *parse_postfix(struct jparser *p, struct jnode *n);

static struct jnode *parse_tuple(struct jparser *p, bool condexpr, bool explicit_parens)
{
	size_t pos = cur(p)->pos;
	struct nvec items = { 0 };
	bool comma = false;
	struct jnode *n;

	for (;;) {
		struct jtok *t = cur(p);

		if (items.n)
			expect_op(p, ",");
		t = cur(p);
		if (t->type == T_VAR_END || t->type == T_BLOCK_END || is_op(t, ")") ||
		    (items.n && (is_name(t, "if") || is_name(t, "recursive") || is_name(t, "in"))))
			break;
		nv_push(p, &items, parse_expr(p, condexpr), NULL);
		if (is_op(cur(p), ","))
			comma = true;
		else
			break;
	}
	if (!comma && items.n == 1)
		return items.v[0];
	if (!items.n && !explicit_parens)
		jp_fail(p, pos, "expected an expression, got '%s'", describe(cur(p)));
	n = node(p, E_TUPLE, pos);
	n->args = items.v;
	n->nargs = items.n;
	return n;
}

/* Positional and keyword arguments "(a, b, k=v)"; the current token is "(". */
static void parse_call_args(struct jparser *p, struct jnode *n)
{
	struct nvec pos = { 0 }, kw = { 0 };

	expect_op(p, "(");
	while (!is_op(cur(p), ")")) {
		if (pos.n || kw.n) {
			expect_op(p, ",");
			if (is_op(cur(p), ")"))
				break;
		}
		if (is_op(cur(p), "*") || is_op(cur(p), "**"))
			jp_fail(p, cur(p)->pos, "*args and **kwargs in calls are not supported");
		if (cur(p)->type == T_NAME && is_op(peek(p, 1), "=")) {
			const char *name = cur(p)->s;

			p->i += 2;
			nv_push(p, &kw, parse_expr(p, true), name);
		} else {
			if (kw.n)
				jp_fail(p, cur(p)->pos, "positional argument follows keyword argument");
			nv_push(p, &pos, parse_expr(p, true), NULL);
		}
	}
	p->i++;
	n->args = pos.v;
	n->nargs = pos.n;
	n->kwn = kw.names;
	n->kwv = kw.v;
	n->nkw = kw.n;
}

/* "name" or "name(args)" after "|"; input is n's a. */
static struct jnode *parse_filter(struct jparser *p, struct jnode *in)
{
	size_t pos = cur(p)->pos;
	struct jnode *f = node(p, E_FILTER, pos);
	const char *name = expect_name(p);

	if (is_op(cur(p), "."))
		jp_fail(p, pos, "dotted filter names are not supported");
	if (!jinja_filter_known(name))
		jp_fail(p, pos, "no filter named '%s'", name);
	f->name = name;
	f->a = in;
	if (is_op(cur(p), "("))
		parse_call_args(p, f);
	return f;
}

static struct jnode *parse_test(struct jparser *p, struct jnode *in)
{
	size_t pos = cur(p)->pos;
	struct jnode *t = node(p, E_TEST, pos);
	struct jtok *c;

	t->a = in;
	if (is_name(cur(p), "not")) {
		p->i++;
		t->neg = true;
	}
	t->name = expect_name(p);
	if (!jinja_test_known(t->name))
		jp_fail(p, pos, "no test named '%s'", t->name);
	c = cur(p);
	if (is_op(c, "(")) {
		parse_call_args(p, t);
	} else if ((c->type == T_NAME || c->type == T_STRING || c->type == T_INT ||
		    c->type == T_FLOAT || is_op(c, "[") || is_op(c, "{")) &&
		   !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
		struct jnode *arg;

		if (is_name(c, "is"))
			jp_fail(p, c->pos, "you cannot chain multiple tests with 'is'");
		arg = parse_postfix(p, parse_primary(p));
		t->args = ja_alloc(p->a, sizeof(*t->args));
		t->args[0] = arg;
		t->nargs = 1;
	}
	return t;
}

/* A call of callee n; the current token is "(". Errors point at the callee. */
static struct jnode *parse_call(struct jparser *p, struct jnode *n)
{
	struct jnode *c = node(p, E_CALL, cur(p)->pos);

	c->a = n;
	c->line = n->line;
	c->col = n->col;
	parse_call_args(p, c);
	return c;
}

static struct jnode *parse_filter_expr(struct jparser *p, struct jnode *n)
{
	for (;;) {
		if (is_op(cur(p), "|")) {
			p->i++;
			n = parse_filter(p, n);
		} else if (is_name(cur(p), "is")) {
			p->i++;
			n = parse_test(p, n);
		} else if (is_op(cur(p), "(")) {
			n = parse_call(p, n);
		} else {
			return n;
		}
	}
}

static struct jnode *parse_subscript_arg(struct jparser *p)
{
	size_t pos = cur(p)->pos;
	struct jnode *parts[3] = { 0 };
	int k = 0;

	if (!is_op(cur(p), ":")) {
		parts[0] = parse_expr(p, true);
		if (!is_op(cur(p), ":"))
			return parts[0];
	}
	/* a slice: [start]:[stop][:[step]] */
	while (is_op(cur(p), ":") && k < 2) {
		p->i++;
		k++;
		if (!is_op(cur(p), ":") && !is_op(cur(p), "]") && !is_op(cur(p), ","))
			parts[k] = parse_expr(p, true);
	}
	{
		struct jnode *s = node(p, E_SLICE, pos);

		s->a = parts[0];
		s->b = parts[1];
		s->c = parts[2];
		return s;
	}
}

static struct jnode *parse_postfix(struct jparser *p, struct jnode *n)
{
	for (;;) {
		struct jtok *t = cur(p);

		if (is_op(t, ".")) {
			struct jtok *a = peek(p, 1);
			struct jnode *x;

			p->i += 2;
			if (a->type == T_NAME) {
				x = node(p, E_ATTR, t->pos);
				x->a = n;
				x->name = a->s;
			} else if (a->type == T_INT) {
				struct jnode *k = node(p, E_CONST, a->pos);

				k->val = a->val;
				x = node(p, E_ITEM, t->pos);
				x->a = n;
				x->b = k;
			} else {
				jp_fail(p, a->pos, "expected name or number after '.'");
			}
			n = x;
		} else if (is_op(t, "[")) {
			struct jnode *x = node(p, E_ITEM, t->pos);

			p->i++;
			x->a = n;
			x->b = parse_subscript_arg(p);
			if (is_op(cur(p), ","))
				jp_fail(p, cur(p)->pos, "tuple subscripts are not supported");
			expect_op(p, "]");
			n = x;
		} else if (is_op(t, "(")) {
			n = parse_call(p, n);
		} else {
			return n;
		}
	}
}

static struct jnode *parse_primary(struct jparser *p)
{
	struct jtok *t = cur(p);
	struct jnode *n;

	enter(p);
	switch (t->type) {
	case T_NAME:
		p->i++;
		if (!strcmp(t->s, "true") || !strcmp(t->s, "True") || !strcmp(t->s, "false") ||
		    !strcmp(t->s, "False")) {
			n = node(p, E_CONST, t->pos);
			n->val = jv_bool(t->s[0] == 't' || t->s[0] == 'T');
		} else if (!strcmp(t->s, "none") || !strcmp(t->s, "None")) {
			n = node(p, E_CONST, t->pos);
			n->val = &jv_none;
		} else {
			n = node(p, E_NAME, t->pos);
			n->name = t->s;
		}
		break;
	case T_STRING: {
		struct jbuf b = { 0 };

		n = node(p, E_CONST, t->pos);
		n->val = t->val;
		if (peek(p, 1)->type == T_STRING) {
			/* adjacent literals concatenate, as in Python */
			while (cur(p)->type == T_STRING) {
				jb_put(&b, cur(p)->val->str.s, cur(p)->val->str.len);
				p->i++;
			}
			n->val = jv_str(p->a, b.p ? b.p : "", b.len);
			jb_free(&b);
		} else {
			p->i++;
		}
		break;
	}
	case T_INT:
	case T_FLOAT:
		p->i++;
		n = node(p, E_CONST, t->pos);
		n->val = t->val;
		break;
	case T_OP:
		if (is_op(t, "(")) {
			p->i++;
			n = parse_tuple(p, true, true);
			expect_op(p, ")");
			if (n->type == E_TUPLE)
				n->neg = true; /* marks an explicit tuple, printed "(a, b)" */
			break;
		}
		if (is_op(t, "[") || is_op(t, "{")) {
			bool dict = t->op[0] == '{';
			struct nvec keys = { 0 }, vals = { 0 };

			p->i++;
			n = node(p, dict ? E_DICT : E_LIST, t->pos);
			while (!is_op(cur(p), dict ? "}" : "]")) {
				if (keys.n) {
					expect_op(p, ",");
					if (is_op(cur(p), dict ? "}" : "]"))
						break;
				}
				nv_push(p, &keys, parse_expr(p, true), NULL);
				if (dict) {
					expect_op(p, ":");
					nv_push(p, &vals, parse_expr(p, true), NULL);
				}
			}
			p->i++;
			n->args = keys.v;
			n->nargs = keys.n;
			n->kwv = vals.v;
			n->nkw = vals.n;
			break;
		}
		/* fall through */
	default:
		jp_fail(p, t->pos, "unexpected '%s'", describe(t));
	}
	p->depth--;
	return n;
}

static struct jnode *parse_unary(struct jparser *p, bool with_filter)
{
	struct jtok *t = cur(p);
	struct jnode *n;

	enter(p);
	if (is_op(t, "-") || is_op(t, "+")) {
		p->i++;
		n = node(p, t->op[0] == '-' ? E_NEG : E_POS, t->pos);
		n->a = parse_unary(p, false);
	} else {
		n = parse_primary(p);
	}
	n = parse_postfix(p, n);
	if (with_filter)
		n = parse_filter_expr(p, n);
	p->depth--;
	return n;
}

static struct jnode *binop(struct jparser *p, int op, size_t pos, struct jnode *l,
			   struct jnode *r)
{
	struct jnode *n = node(p, E_BIN, pos);

	n->op = (uint8_t)op;
	n->a = l;
	n->b = r;
	return n;
}

static struct jnode *parse_pow(struct jparser *p)
{
	struct jnode *n = parse_unary(p, true);

	while (is_op(cur(p), "**")) {
		size_t pos = cur(p)->pos;

		p->i++;
		n = binop(p, OP_POW, pos, n, parse_unary(p, true));
	}
	return n;
}

static struct jnode *parse_math2(struct jparser *p)
{
	struct jnode *n = parse_pow(p);

	for (;;) {
		struct jtok *t = cur(p);
		int op = is_op(t, "*") ? OP_MUL : is_op(t, "/") ? OP_DIV :
			 is_op(t, "//") ? OP_FLOORDIV : is_op(t, "%") ? OP_MOD : 0;

		if (!op)
			return n;
		p->i++;
		n = binop(p, op, t->pos, n, parse_pow(p));
	}
}

static struct jnode *parse_concat(struct jparser *p)
{
	struct jnode *first = parse_math2(p), *n;
	struct nvec items = { 0 };

	if (!is_op(cur(p), "~"))
		return first;
	n = node(p, E_CONCAT, cur(p)->pos);
	nv_push(p, &items, first, NULL);
	while (is_op(cur(p), "~")) {
		p->i++;
		nv_push(p, &items, parse_math2(p), NULL);
	}
	n->args = items.v;
	n->nargs = items.n;
	return n;
}

static struct jnode *parse_math1(struct jparser *p)
{
	struct jnode *n = parse_concat(p);

	for (;;) {
		struct jtok *t = cur(p);
		int op = is_op(t, "+") ? OP_ADD : is_op(t, "-") ? OP_SUB : 0;

		if (!op)
			return n;
		p->i++;
		n = binop(p, op, t->pos, n, parse_concat(p));
	}
}

static struct jnode *parse_compare(struct jparser *p)
{
	size_t pos = cur(p)->pos;
	struct jnode *first = parse_math1(p), *n;
	struct nvec operands = { 0 };
	uint8_t ops[64];

	for (;;) {
		struct jtok *t = cur(p);
		int op = is_op(t, "==") ? OP_EQ : is_op(t, "!=") ? OP_NE : is_op(t, "<") ? OP_LT :
			 is_op(t, "<=") ? OP_LE : is_op(t, ">") ? OP_GT : is_op(t, ">=") ? OP_GE : 0;

		if (op) {
			p->i++;
		} else if (is_name(t, "in")) {
			p->i++;
			op = OP_IN;
		} else if (is_name(t, "not") && is_name(peek(p, 1), "in")) {
			p->i += 2;
			op = OP_NOTIN;
		} else {
			break;
		}
		if (operands.n >= ARRAY_SIZE(ops))
			jp_fail(p, t->pos, "comparison chain too long");
		ops[operands.n] = (uint8_t)op;
		nv_push(p, &operands, parse_math1(p), NULL);
	}
	if (!operands.n)
		return first;
	n = node(p, E_CMP, pos);
	n->a = first;
	n->args = operands.v;
	n->nargs = operands.n;
	n->ops = ja_alloc(p->a, operands.n);
	memcpy(n->ops, ops, operands.n);
	return n;
}

static struct jnode *parse_not(struct jparser *p)
{
	if (is_name(cur(p), "not")) {
		struct jnode *n = node(p, E_NOT, cur(p)->pos);

		p->i++;
		enter(p);
		n->a = parse_not(p);
		p->depth--;
		return n;
	}
	return parse_compare(p);
}

/* "a or b" (is_or) over "a and b" over "not a". */
static struct jnode *parse_bool(struct jparser *p, bool is_or)
{
	struct jnode *n = is_or ? parse_bool(p, false) : parse_not(p);

	while (is_name(cur(p), is_or ? "or" : "and")) {
		struct jnode *x = node(p, is_or ? E_OR : E_AND, cur(p)->pos);

		p->i++;
		x->a = n;
		x->b = is_or ? parse_bool(p, false) : parse_not(p);
		n = x;
	}
	return n;
}

static struct jnode *parse_expr(struct jparser *p, bool condexpr)
{
	struct jnode *n;

	enter(p);
	n = parse_bool(p, true);
	while (condexpr && is_name(cur(p), "if")) {
		struct jnode *c = node(p, E_COND, cur(p)->pos);

		p->i++;
		c->a = n;
		c->b = parse_bool(p, true);
		if (is_name(cur(p), "else")) {
			p->i++;
			c->c = parse_expr(p, true);
		}
		n = c;
	}
	p->depth--;
	return n;
}

/* --- statements ------------------------------------------------------------------------- */

static struct jnode *parse_block(struct jparser *p, const char *const *ends);

/* An assignment target: a name, names separated by commas, or ns.attr (with_ns). */
static struct jnode *parse_target(struct jparser *p, bool with_ns)
{
	size_t pos = cur(p)->pos;
	struct nvec names = { 0 };
	struct jnode *n;

	for (;;) {
		struct jnode *x = node(p, E_NAME, cur(p)->pos);

		x->name = expect_name(p);
		if (with_ns && is_op(cur(p), ".")) {
			struct jnode *attr = node(p, E_ATTR, cur(p)->pos);

			p->i++;
			attr->a = x;
			attr->name = expect_name(p);
			return attr;
		}
		nv_push(p, &names, x, NULL);
		if (!is_op(cur(p), ","))
			break;
		p->i++;
	}
	if (names.n == 1)
		return names.v[0];
	n = node(p, E_TUPLE, pos);
	n->args = names.v;
	n->nargs = names.n;
	return n;
}

static void end_tag(struct jparser *p)
{
	expect_type(p, T_BLOCK_END, "'%}'");
}

/* After parse_block stopped at "{% name": consume "name %}". */
static const char *take_end(struct jparser *p)
{
	const char *name = expect_name(p);

	end_tag(p);
	return name;
}

/* The body of the statement whose tag is at pos. */
static struct jnode *body(struct jparser *p, size_t pos, const char *const *ends)
{
	p->open_pos = pos;
	return parse_block(p, ends);
}

static struct jnode *parse_stmt(struct jparser *p)
{
	struct jtok *t = cur(p);
	const char *kw;
	struct jnode *n;

	if (t->type != T_NAME)
		jp_fail(p, t->pos, "tag name expected");
	kw = t->s;
	p->i++;
	p->open_pos = t->pos;
	if (!strcmp(kw, "if")) {
		static const char *const ends[] = { "endif", "elif", "else", NULL };
		struct jnode *top = node(p, N_IF, t->pos), *x = top;

		for (;;) {
			const char *e;

			x->a = parse_tuple(p, false, false);
			end_tag(p);
			x->b = body(p, t->pos, ends);
			e = expect_name(p);
			if (!strcmp(e, "elif")) {
				x->c = node(p, N_IF, p->toks[p->i - 1].pos);
				x = x->c;
				continue;
			}
			end_tag(p);
			if (!strcmp(e, "else")) {
				static const char *const endif[] = { "endif", NULL };

				x->c = body(p, t->pos, endif);
				take_end(p);
			}
			return top;
		}
	}
	if (!strcmp(kw, "for")) {
		static const char *const ends[] = { "endfor", "else", NULL };
		static const char *const endfor[] = { "endfor", NULL };

		n = node(p, N_FOR, t->pos);
		n->a = parse_target(p, false);
		if (!is_name(cur(p), "in"))
			jp_fail(p, cur(p)->pos, "expected 'in', got '%s'", describe(cur(p)));
		p->i++;
		n->b = parse_tuple(p, false, false);
		if (is_name(cur(p), "if")) {
			p->i++;
			n->c = parse_expr(p, true);
		}
		if (is_name(cur(p), "recursive"))
			jp_fail(p, cur(p)->pos, "recursive loops are not supported");
		end_tag(p);
		p->loops++;
		n->d = body(p, t->pos, ends);
		p->loops--;
		if (!strcmp(take_end(p), "else")) {
			n->e = body(p, t->pos, endfor);
			take_end(p);
		}
		return n;
	}
	if (!strcmp(kw, "set")) {
		struct jnode *target = parse_target(p, true);

		if (is_op(cur(p), "=")) {
			p->i++;
			n = node(p, N_SET, t->pos);
			n->a = target;
			n->b = parse_tuple(p, true, false);
			end_tag(p);
			return n;
		} else {
			static const char *const ends[] = { "endset", NULL };

			n = node(p, N_SETBLOCK, t->pos);
			n->a = target;
			if (is_op(cur(p), "|")) {
				struct jnode *f = node(p, E_INPUT, cur(p)->pos);

				while (is_op(cur(p), "|")) {
					p->i++;
					f = parse_filter(p, f);
				}
				n->c = f;
			}
			end_tag(p);
			n->b = body(p, t->pos, ends);
			take_end(p);
			return n;
		}
	}
	if (!strcmp(kw, "macro")) {
		static const char *const ends[] = { "endmacro", NULL };
		struct nvec params = { 0 };
		bool have_default = false;

		n = node(p, N_MACRO, t->pos);
		n->name = expect_name(p);
		expect_op(p, "(");
		while (!is_op(cur(p), ")")) {
			struct jnode *def = NULL;
			const char *name;

			if (params.n)
				expect_op(p, ",");
			name = expect_name(p);
			if (is_op(cur(p), "=")) {
				p->i++;
				def = parse_expr(p, true);
				have_default = true;
			} else if (have_default) {
				jp_fail(p, cur(p)->pos, "non-default argument follows default argument");
			}
			nv_push(p, &params, def, name);
		}
		p->i++;
		end_tag(p);
		n->kwn = params.names;
		n->kwv = params.v;
		n->nkw = params.n;
		{
			unsigned loops = p->loops;

			p->loops = 0;
			n->b = body(p, t->pos, ends);
			p->loops = loops;
		}
		take_end(p);
		return n;
	}
	if (!strcmp(kw, "break") || !strcmp(kw, "continue")) {
		n = node(p, kw[0] == 'b' ? N_BREAK : N_CONTINUE, t->pos);
		if (!p->loops)
			jp_fail(p, t->pos, "'%s' outside of a loop", kw);
		end_tag(p);
		return n;
	}
	if (!strcmp(kw, "filter")) {
		static const char *const ends[] = { "endfilter", NULL };
		struct jnode *f = node(p, E_INPUT, cur(p)->pos);

		n = node(p, N_FILTERBLOCK, t->pos);
		do {
			if (is_op(cur(p), "|"))
				p->i++;
			f = parse_filter(p, f);
		} while (is_op(cur(p), "|"));
		n->c = f;
		end_tag(p);
		n->b = body(p, t->pos, ends);
		take_end(p);
		return n;
	}
	if (!strcmp(kw, "with")) {
		static const char *const ends[] = { "endwith", NULL };
		struct nvec targets = { 0 };

		n = node(p, N_WITH, t->pos);
		while (cur(p)->type != T_BLOCK_END) {
			const char *name;

			if (targets.n)
				expect_op(p, ",");
			name = expect_name(p);
			expect_op(p, "=");
			nv_push(p, &targets, parse_expr(p, true), name);
		}
		end_tag(p);
		n->kwn = targets.names;
		n->kwv = targets.v;
		n->nkw = targets.n;
		n->b = body(p, t->pos, ends);
		take_end(p);
		return n;
	}
	if (!strcmp(kw, "generation")) {
		/* transformers' {% generation %} marks assistant text for masks; it renders
		 * its body unchanged. */
		static const char *const ends[] = { "endgeneration", NULL };

		end_tag(p);
		n = body(p, t->pos, ends);
		take_end(p);
		return n;
	}
	if (!strcmp(kw, "call") || !strcmp(kw, "include") || !strcmp(kw, "import") ||
	    !strcmp(kw, "from") || !strcmp(kw, "extends") || !strcmp(kw, "block") ||
	    !strcmp(kw, "do") || !strcmp(kw, "autoescape"))
		jp_fail(p, t->pos, "'%s' is not supported", kw);
	jp_fail(p, t->pos, "unknown tag '%s'", kw);
}

/* Statements until "{% <one of ends>" (left unconsumed after the "{%"), or the end of the
 * template when ends is NULL. */
static struct jnode *parse_block(struct jparser *p, const char *const *ends)
{
	struct jnode *blk = node(p, N_BLOCK, cur(p)->pos);
	struct nvec stmts = { 0 };
	size_t start = p->open_pos;

	enter(p);
	for (;;) {
		struct jtok *t = cur(p);

		if (t->type == T_EOF) {
			if (ends)
				jp_fail(p, start, "unexpected end of template, expected '%s'", ends[0]);
			break;
		}
		if (t->type == T_DATA) {
			struct jnode *x = node(p, N_TEXT, t->pos);

			x->val = t->val;
			nv_push(p, &stmts, x, NULL);
			p->i++;
		} else if (t->type == T_VAR_BEGIN) {
			struct jnode *x = node(p, N_OUTPUT, t->pos);

			p->i++;
			x->a = parse_tuple(p, true, false);
			expect_type(p, T_VAR_END, "'}}'");
			nv_push(p, &stmts, x, NULL);
		} else if (t->type == T_BLOCK_BEGIN) {
			struct jtok *name = peek(p, 1);
			const char *const *e;

			if (ends && name->type == T_NAME)
				for (e = ends; *e; e++)
					if (!strcmp(name->s, *e)) {
						p->i++;
						goto done;
					}
			if (name->type == T_NAME &&
			    (!strncmp(name->s, "end", 3) || !strcmp(name->s, "elif") ||
			     !strcmp(name->s, "else")))
				jp_fail(p, name->pos, "unexpected '%s'%s%s%s", name->s,
				      ends ? ", expected '" : "", ends ? ends[0] : "", ends ? "'" : "");
			p->i++;
			nv_push(p, &stmts, parse_stmt(p), NULL);
		} else {
			jp_fail(p, t->pos, "unexpected '%s'", describe(t));
		}
	}
done:
	p->depth--;
	blk->args = stmts.v;
	blk->nargs = stmts.n;
	return blk;
}

int jinja_parse(struct capy_tmpl *t, struct capy_err *err)
{
	struct jparser p = { .t = t, .a = &t->arena, .src = t->src, .len = t->len, .err = err };

	t->arena.fail = &p.fail;
	if (setjmp(p.fail)) {
		t->arena.fail = NULL;
		if (p.failed)
			return CAPY_EFORMAT;
		return capy_err_set(err, CAPY_ENOMEM, "%s: out of memory while compiling", t->name);
	}
	jinja_lex(&p);
	t->root = parse_block(&p, NULL);
	t->arena.fail = NULL;
	return 0;
}
