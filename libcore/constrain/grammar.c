/* grammar.c - GBNF: the parser (rules of alternatives of elements; groups and repetitions
 * become rules of their own), the left-recursion check, and the byte-level pushdown
 * matcher of grammar.h. */
#include "grammar.h"

#include <stdlib.h>
#include <string.h>

enum { E_END, E_CHARS, E_RULE }; /* E_END closes an alternative */

#define MAX_RULES 100000 /* rules of a grammar, the ones repetitions make included */
#define MAX_DEPTH 8192   /* rules that can start one another in a chain (the matcher recurses on it) */

struct elem {
	uint8_t type, neg;
	uint32_t a, n; /* E_CHARS: ranges [a, a + n) of g->ranges; E_RULE: rule a */
};

struct seq {
	struct elem *e;
	uint32_t n, cap;
};

struct rule {
	char *name;
	struct seq *alts;
	uint32_t nalts, cap;
	bool defined;
	size_t where; /* source offset of its definition or first use */
};

struct capy_grammar {
	struct rule *rules;
	uint32_t nrules, cap, root;
	uint32_t *ranges; /* pairs lo, hi */
	uint32_t nranges, rcap;
	/* compiled: every alternative's elements, E_END-terminated, in one array */
	struct elem *elems;
	uint32_t nelems;
	uint32_t *alt_start, *rule_alt0, *rule_nalts; /* per alternative / per rule */
};

/* --- building ------------------------------------------------------------------------------ */

struct parser {
	struct capy_grammar *g;
	const char *name; /* the grammar's file in errors ("f.gbnf:3:7: ..."), or NULL */
	const char *src;
	size_t len, pos;
	struct capy_err *err;
	int rc;
	unsigned depth;
	/* every repeated rule and where: repeating what can be empty is refused once all rules
	 * are known (its ways to match nothing multiply with every copy) */
	struct rep {
		uint32_t rule;
		size_t at;
	} *reps;
	uint32_t nreps, repcap;
};

static void where(const struct parser *p, size_t off, unsigned *line, unsigned *col)
{
	*line = 1;
	*col = 1;
	for (size_t i = 0; i < off && i < p->len; i++) {
		if (p->src[i] == '\n') {
			++*line;
			*col = 1;
		} else {
			++*col;
		}
	}
}

static int fail_at(struct parser *p, size_t off, const char *what)
{
	unsigned line, col;

	if (p->rc)
		return p->rc;
	where(p, off, &line, &col);
	if (p->name)
		p->rc = capy_err_set(p->err, CAPY_EFORMAT, "%s:%u:%u: %s", p->name, line, col, what);
	else
		p->rc = capy_err_set(p->err, CAPY_EFORMAT, "grammar: line %u, column %u: %s", line, col, what);
	return p->rc;
}

static bool grow(void **p, uint32_t *cap, uint32_t need, size_t size)
{
	if (need <= *cap)
		return true;
	uint32_t c = *cap ? *cap : 8;
	while (c < need)
		c *= 2;
	void *q = realloc(*p, (size_t)c * size);
	if (!q)
		return false;
	*p = q;
	*cap = c;
	return true;
}

static int oom(struct parser *p)
{
	if (!p->rc)
		p->rc = capy_err_set(p->err, CAPY_ENOMEM, "out of memory");
	return p->rc;
}

static int seq_push(struct parser *p, struct seq *s, struct elem e)
{
	if (!grow((void **)&s->e, &s->cap, s->n + 1, sizeof(*s->e)))
		return oom(p);
	s->e[s->n++] = e;
	return 0;
}

static int64_t new_rule(struct parser *p, const char *name, size_t nlen, size_t at)
{
	struct capy_grammar *g = p->g;

	if (g->nrules >= MAX_RULES)
		return fail_at(p, at, "grammar too large: more than 100000 rules (repetitions count as rules)");
	if (!grow((void **)&g->rules, &g->cap, g->nrules + 1, sizeof(*g->rules)))
		return oom(p);
	struct rule *r = &g->rules[g->nrules];
	memset(r, 0, sizeof(*r));
	if (!(r->name = malloc(nlen + 1)))
		return oom(p);
	memcpy(r->name, name, nlen);
	r->name[nlen] = 0;
	r->where = at;
	return g->nrules++;
}

static int64_t rule_of(struct parser *p, const char *name, size_t nlen, size_t at)
{
	for (uint32_t i = 0; i < p->g->nrules; i++)
		if (strlen(p->g->rules[i].name) == nlen && !memcmp(p->g->rules[i].name, name, nlen))
			return i;
	return new_rule(p, name, nlen, at);
}

/* A rule made for a group or a repetition, named after its place in the source. */
static int64_t anon_rule(struct parser *p, size_t at)
{
	char name[48];
	unsigned line, col;

	where(p, at, &line, &col);
	int n = snprintf(name, sizeof(name), "(the group or repetition at %u:%u)", line, col);
	int64_t r = new_rule(p, name, (size_t)n, at);
	if (r >= 0)
		p->g->rules[r].defined = true;
	return r;
}

static struct seq *add_alt(struct parser *p, uint32_t rule)
{
	struct rule *r = &p->g->rules[rule];

	if (!grow((void **)&r->alts, &r->cap, r->nalts + 1, sizeof(*r->alts))) {
		oom(p);
		return NULL;
	}
	memset(&r->alts[r->nalts], 0, sizeof(struct seq));
	return &r->alts[r->nalts++];
}

static int64_t add_ranges(struct parser *p, const uint32_t *lohi, uint32_t n)
{
	struct capy_grammar *g = p->g;

	if (!grow((void **)&g->ranges, &g->rcap, 2 * (g->nranges + n) + 2, sizeof(uint32_t)))
		return oom(p);
	memcpy(g->ranges + 2 * g->nranges, lohi, 2 * n * sizeof(uint32_t));
	g->nranges += n;
	return g->nranges - n;
}

/* --- the parser ---------------------------------------------------------------------------- */

static int peek(const struct parser *p)
{
	return p->pos < p->len ? (unsigned char)p->src[p->pos] : -1;
}

static void skip_space(struct parser *p, bool newlines)
{
	while (p->pos < p->len) {
		char c = p->src[p->pos];
		if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
			p->pos++;
		} else if (c == '#') {
			while (p->pos < p->len && p->src[p->pos] != '\n')
				p->pos++;
		} else {
			break;
		}
	}
}

static bool name_char(int c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* One UTF-8 character of the source (the grammar text itself may hold any character). */
static int src_char(struct parser *p, uint32_t *cp)
{
	const unsigned char *s = (const unsigned char *)p->src + p->pos;
	size_t left = p->len - p->pos;
	unsigned n = s[0] < 0x80 ? 1 : s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc0 ? 2 : 0;

	if (!n || n > left)
		return fail_at(p, p->pos, "invalid UTF-8 in the grammar");
	*cp = n == 1 ? s[0] : s[0] & (0x7f >> n);
	for (unsigned i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return fail_at(p, p->pos, "invalid UTF-8 in the grammar");
		*cp = (*cp << 6) | (s[i] & 0x3f);
	}
	p->pos += n;
	return 0;
}

static int hex(struct parser *p, unsigned digits, uint32_t *cp)
{
	*cp = 0;
	for (unsigned i = 0; i < digits; i++) {
		int c = peek(p);
		int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
		if (v < 0)
			return fail_at(p, p->pos, "expected a hexadecimal digit");
		*cp = *cp * 16 + (uint32_t)v;
		p->pos++;
	}
	return 0;
}

/* A character of a literal or a class, escapes resolved. */
static int lit_char(struct parser *p, uint32_t *cp)
{
	if (peek(p) != '\\')
		return src_char(p, cp);
	size_t at = p->pos++;
	switch (peek(p)) {
	case 'x':
		p->pos++;
		return hex(p, 2, cp);
	case 'u':
		p->pos++;
		return hex(p, 4, cp);
	case 'U':
		p->pos++;
		return hex(p, 8, cp);
	case 'n':
		*cp = '\n';
		break;
	case 'r':
		*cp = '\r';
		break;
	case 't':
		*cp = '\t';
		break;
	case '\\': case '"': case '[': case ']': case '-': case '^': case '/': case '\'':
		*cp = (uint32_t)peek(p);
		break;
	default:
		return fail_at(p, at, "unknown escape");
	}
	p->pos++;
	return 0;
}

static int parse_alternates(struct parser *p, uint32_t rule, bool nested);

/* x{m,n} (n = UINT32_MAX: no bound) as elements appended to s: m copies, then x* or nested
 * optionals. x* is R ::= x R | (empty); x? is R ::= x | (empty). */
static int repeat(struct parser *p, struct seq *s, struct elem x, uint32_t m, uint32_t n, size_t at)
{
	if (x.type == E_RULE && n > 1) {
		if (!grow((void **)&p->reps, &p->repcap, p->nreps + 1, sizeof(*p->reps)))
			return oom(p);
		p->reps[p->nreps++] = (struct rep){ x.a, at };
	}
	for (uint32_t i = 0; i < m; i++)
		if (seq_push(p, s, x))
			return p->rc;
	if (n == m)
		return 0;
	int64_t r = anon_rule(p, at);
	if (r < 0)
		return p->rc;
	if (n == UINT32_MAX) {
		struct seq *a = add_alt(p, (uint32_t)r);
		if (!a || seq_push(p, a, x) || seq_push(p, a, (struct elem){ E_RULE, 0, (uint32_t)r, 0 }) || !add_alt(p, (uint32_t)r))
			return p->rc ? p->rc : oom(p);
		return seq_push(p, s, (struct elem){ E_RULE, 0, (uint32_t)r, 0 });
	}
	/* n - m optional copies: R ::= x R' | (empty), R' likewise, ... */
	int64_t cur = r;
	for (uint32_t i = m; i < n; i++) {
		int64_t next = i + 1 < n ? anon_rule(p, at) : -1;
		if (i + 1 < n && next < 0)
			return p->rc;
		struct seq *a = add_alt(p, (uint32_t)cur);
		if (!a || seq_push(p, a, x) ||
		    (next >= 0 && seq_push(p, a, (struct elem){ E_RULE, 0, (uint32_t)next, 0 })) || !add_alt(p, (uint32_t)cur))
			return p->rc ? p->rc : oom(p);
		cur = next;
	}
	return seq_push(p, s, (struct elem){ E_RULE, 0, (uint32_t)r, 0 });
}

static int number(struct parser *p, uint32_t *v)
{
	if (peek(p) < '0' || peek(p) > '9')
		return fail_at(p, p->pos, "expected a number");
	*v = 0;
	while (peek(p) >= '0' && peek(p) <= '9') {
		*v = *v * 10 + (uint32_t)(peek(p) - '0');
		p->pos++;
		if (*v > 4096)
			return fail_at(p, p->pos, "repetition count above 4096");
	}
	return 0;
}

static int parse_sequence(struct parser *p, struct seq *s, bool nested)
{
	for (;;) {
		int c = peek(p);
		size_t at = p->pos;
		struct elem x;
		if (c < 0 || c == '|' || c == ')' || c == '\n' || c == '\r')
			return 0;
		if (c == '"') { /* a literal: one element per character */
			p->pos++;
			uint32_t start = s->n;
			while (peek(p) != '"') {
				uint32_t cp, lohi[2];
				if (peek(p) < 0)
					return fail_at(p, at, "unterminated literal");
				if (lit_char(p, &cp))
					return p->rc;
				lohi[0] = lohi[1] = cp;
				int64_t ri = add_ranges(p, lohi, 1);
				if (ri < 0 || seq_push(p, s, (struct elem){ E_CHARS, 0, (uint32_t)ri, 1 }))
					return p->rc;
			}
			p->pos++;
			if (s->n - start != 1) { /* a repetition applies to the whole literal: make it a rule */
				const int op = peek(p);
				if (op > 0 && strchr("*+?{", op)) {
					int64_t r = anon_rule(p, at);
					struct seq *a;
					if (r < 0 || !(a = add_alt(p, (uint32_t)r)))
						return p->rc ? p->rc : oom(p);
					for (uint32_t i = start; i < s->n; i++)
						if (seq_push(p, a, s->e[i]))
							return p->rc;
					s->n = start;
					x = (struct elem){ E_RULE, 0, (uint32_t)r, 0 };
					goto have_x;
				}
				skip_space(p, nested);
				continue;
			}
			x = s->e[--s->n];
		} else if (c == '[') {
			uint32_t buf[256], nr = 0;
			bool neg = false;
			p->pos++;
			if (peek(p) == '^') {
				neg = true;
				p->pos++;
			}
			while (peek(p) != ']') {
				uint32_t lo, hi;
				if (peek(p) < 0)
					return fail_at(p, at, "unterminated character class");
				if (lit_char(p, &lo))
					return p->rc;
				hi = lo;
				if (peek(p) == '-' && p->pos + 1 < p->len && p->src[p->pos + 1] != ']') {
					p->pos++;
					if (lit_char(p, &hi))
						return p->rc;
					if (hi < lo)
						return fail_at(p, at, "a range runs backwards");
				}
				if (nr == 128)
					return fail_at(p, at, "more than 128 ranges in a character class");
				buf[2 * nr] = lo;
				buf[2 * nr + 1] = hi;
				nr++;
			}
			p->pos++;
			int64_t ri = add_ranges(p, buf, nr);
			if (ri < 0)
				return p->rc;
			x = (struct elem){ E_CHARS, neg, (uint32_t)ri, nr };
		} else if (c == '.') {
			p->pos++;
			x = (struct elem){ E_CHARS, 1, 0, 0 }; /* no range excluded: any character */
		} else if (c == '(') {
			p->pos++;
			if (++p->depth > 200)
				return fail_at(p, at, "groups nested too deep");
			int64_t r = anon_rule(p, at);
			if (r < 0)
				return p->rc;
			skip_space(p, true);
			if (parse_alternates(p, (uint32_t)r, true))
				return p->rc;
			if (peek(p) != ')')
				return fail_at(p, at, "unclosed parenthesis");
			p->pos++;
			p->depth--;
			x = (struct elem){ E_RULE, 0, (uint32_t)r, 0 };
		} else if (name_char(c)) {
			size_t n0 = p->pos;
			while (name_char(peek(p)))
				p->pos++;
			int64_t r = rule_of(p, p->src + n0, p->pos - n0, n0);
			if (r < 0)
				return p->rc;
			x = (struct elem){ E_RULE, 0, (uint32_t)r, 0 };
		} else if (c == '<') {
			return fail_at(p, at, "token references (<...>) are not supported");
		} else {
			return fail_at(p, at, "unexpected character");
		}
	have_x:
		/* a repetition applies to x */
		c = peek(p);
		if (c == '*' || c == '+' || c == '?') {
			p->pos++;
			if (repeat(p, s, x, c == '+', c == '?' ? 1 : UINT32_MAX, at))
				return p->rc;
		} else if (c == '{') {
			uint32_t m, n;
			p->pos++;
			if (number(p, &m))
				return p->rc;
			n = m;
			if (peek(p) == ',') {
				p->pos++;
				n = UINT32_MAX;
				if (peek(p) != '}' && number(p, &n))
					return p->rc;
			}
			if (peek(p) != '}')
				return fail_at(p, p->pos, "expected }");
			if (n < m)
				return fail_at(p, at, "{m,n} with n < m");
			p->pos++;
			if (repeat(p, s, x, m, n, at))
				return p->rc;
		} else if (seq_push(p, s, x)) {
			return p->rc;
		}
		skip_space(p, nested);
	}
}

static int parse_alternates(struct parser *p, uint32_t rule, bool nested)
{
	for (;;) {
		struct seq *a = add_alt(p, rule);
		if (!a)
			return p->rc;
		struct seq tmp = { 0 };
		if (parse_sequence(p, &tmp, nested)) {
			free(tmp.e);
			return p->rc;
		}
		/* the rule's alternatives may have moved while parsing (groups add rules, not alts
		 * of this rule, but realloc of rules moves them): store through the index */
		p->g->rules[rule].alts[p->g->rules[rule].nalts - 1] = tmp;
		if (peek(p) != '|')
			return 0;
		p->pos++;
		skip_space(p, true);
	}
}

static int parse_grammar(struct parser *p)
{
	for (;;) {
		skip_space(p, true);
		if (peek(p) < 0)
			return 0;
		size_t n0 = p->pos;
		while (name_char(peek(p)))
			p->pos++;
		if (p->pos == n0)
			return fail_at(p, n0, "expected a rule name");
		int64_t r = rule_of(p, p->src + n0, p->pos - n0, n0);
		if (r < 0)
			return p->rc;
		if (p->g->rules[r].defined)
			return fail_at(p, n0, "rule defined twice");
		p->g->rules[r].defined = true;
		p->g->rules[r].where = n0;
		skip_space(p, false);
		if (p->len - p->pos < 3 || memcmp(p->src + p->pos, "::=", 3))
			return fail_at(p, p->pos, "expected ::=");
		p->pos += 3;
		skip_space(p, true);
		if (parse_alternates(p, (uint32_t)r, false))
			return p->rc;
		if (peek(p) == ')')
			return fail_at(p, p->pos, "unmatched )");
	}
}

/* --- checks and the compiled form ------------------------------------------------------------ */

/* Rules that can match the empty string (to a fixpoint). */
static void nullable(const struct capy_grammar *g, bool *nul)
{
	bool changed = true;

	memset(nul, 0, g->nrules);
	while (changed) {
		changed = false;
		for (uint32_t r = 0; r < g->nrules; r++) {
			if (nul[r])
				continue;
			for (uint32_t a = 0; a < g->rules[r].nalts && !nul[r]; a++) {
				const struct seq *s = &g->rules[r].alts[a];
				uint32_t i = 0;
				while (i < s->n && s->e[i].type == E_RULE && nul[s->e[i].a])
					i++;
				if (i == s->n) {
					nul[r] = true;
					changed = true;
				}
			}
		}
	}
}

/* Depth-first over "r can start with s" edges: a rule on the current path again is left
 * recursion. mark: 0 unseen, 1 on the path, 2 done. A path longer than MAX_DEPTH returns
 * -2 (the matcher expands such chains recursively too). */
static int64_t left_rec(const struct capy_grammar *g, const bool *nul, uint8_t *mark, uint32_t r, unsigned depth)
{
	if (depth > MAX_DEPTH)
		return -2;
	mark[r] = 1;
	for (uint32_t a = 0; a < g->rules[r].nalts; a++) {
		const struct seq *s = &g->rules[r].alts[a];
		for (uint32_t i = 0; i < s->n && s->e[i].type == E_RULE; i++) {
			uint32_t t = s->e[i].a;
			if (mark[t] == 1)
				return t;
			if (!mark[t]) {
				int64_t x = left_rec(g, nul, mark, t, depth + 1);
				if (x != -1)
					return x;
			}
			if (!nul[t])
				break;
		}
	}
	mark[r] = 2;
	return -1;
}

static int flatten(struct capy_grammar *g)
{
	uint32_t nalt = 0, ne = 0;

	for (uint32_t r = 0; r < g->nrules; r++)
		for (uint32_t a = 0; a < g->rules[r].nalts; a++) {
			nalt++;
			ne += g->rules[r].alts[a].n + 1;
		}
	g->elems = malloc((size_t)ne * sizeof(*g->elems) + 1);
	g->alt_start = malloc((size_t)nalt * sizeof(uint32_t) + 1);
	g->rule_alt0 = malloc((size_t)g->nrules * sizeof(uint32_t) + 1);
	g->rule_nalts = malloc((size_t)g->nrules * sizeof(uint32_t) + 1);
	if (!g->elems || !g->alt_start || !g->rule_alt0 || !g->rule_nalts)
		return -1;
	nalt = 0;
	for (uint32_t r = 0; r < g->nrules; r++) {
		g->rule_alt0[r] = nalt;
		g->rule_nalts[r] = g->rules[r].nalts;
		for (uint32_t a = 0; a < g->rules[r].nalts; a++) {
			const struct seq *s = &g->rules[r].alts[a];
			g->alt_start[nalt++] = g->nelems;
			if (s->n)
				memcpy(g->elems + g->nelems, s->e, s->n * sizeof(*s->e));
			g->nelems += s->n;
			g->elems[g->nelems++] = (struct elem){ E_END, 0, 0, 0 };
		}
	}
	return 0;
}

void capy_grammar_free(struct capy_grammar *g)
{
	if (!g)
		return;
	for (uint32_t r = 0; r < g->nrules; r++) {
		for (uint32_t a = 0; a < g->rules[r].nalts; a++)
			free(g->rules[r].alts[a].e);
		free(g->rules[r].alts);
		free(g->rules[r].name);
	}
	free(g->rules);
	free(g->ranges);
	free(g->elems);
	free(g->alt_start);
	free(g->rule_alt0);
	free(g->rule_nalts);
	free(g);
}

int capy_grammar_compile(const char *src, size_t len, const char *root, struct capy_grammar **out,
			 struct capy_err *err)
{
	return capy_grammar_compile_named(src, len, root, NULL, out, err);
}

int capy_grammar_compile_named(const char *src, size_t len, const char *root, const char *name,
			       struct capy_grammar **out, struct capy_err *err)
{
	struct capy_grammar *g = calloc(1, sizeof(*g));
	struct parser p = { g, name, src, len, 0, err, 0, 0, NULL, 0, 0 };
	const char *who = name ? name : "grammar";

	*out = NULL;
	if (!g)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	if (parse_grammar(&p) < 0)
		goto fail;
	int64_t r = -1;
	for (uint32_t i = 0; i < g->nrules; i++) {
		if (!g->rules[i].defined) {
			char what[160];
			snprintf(what, sizeof(what), "rule '%.100s' is used but never defined", g->rules[i].name);
			fail_at(&p, g->rules[i].where, what);
			goto fail;
		}
		if (!strcmp(g->rules[i].name, root ? root : "root"))
			r = i;
	}
	if (r < 0) {
		p.rc = capy_err_set(err, CAPY_EFORMAT, "%s: no rule '%s'", who, root ? root : "root");
		goto fail;
	}
	g->root = (uint32_t)r;
	{
		bool *nul = malloc(g->nrules + 1);
		uint8_t *mark = calloc(g->nrules + 1, 1);
		int64_t bad = -1;
		if (!nul || !mark) {
			free(nul);
			free(mark);
			p.rc = capy_err_set(err, CAPY_ENOMEM, "out of memory");
			goto fail;
		}
		nullable(g, nul);
		for (uint32_t i = 0; i < p.nreps; i++)
			if (nul[p.reps[i].rule]) {
				free(nul);
				free(mark);
				fail_at(&p, p.reps[i].at, "a repetition of something that can match nothing");
				goto fail;
			}
		for (uint32_t i = 0; i < g->nrules && bad == -1; i++)
			if (!mark[i])
				bad = left_rec(g, nul, mark, i, 0);
		free(nul);
		free(mark);
		if (bad == -2) {
			p.rc = capy_err_set(err, CAPY_EFORMAT, "%s: rules nest more than %d deep", who, MAX_DEPTH);
			goto fail;
		}
		if (bad >= 0) {
			char what[300];
			snprintf(what, sizeof(what), "rule '%.150s' is left-recursive (directly or through rules that can be empty)",
				 g->rules[bad].name);
			fail_at(&p, g->rules[bad].where, what);
			goto fail;
		}
	}
	if (flatten(g) < 0) {
		p.rc = capy_err_set(err, CAPY_ENOMEM, "out of memory");
		goto fail;
	}
	free(p.reps);
	*out = g;
	return 0;
fail:
	free(p.reps);
	capy_grammar_free(g);
	return p.rc ? p.rc : -1;
}

/* --- the matcher ---------------------------------------------------------------------------- */

struct stk {
	uint32_t off, len;
};

struct stackset {
	uint32_t *pool;
	uint32_t npool, pcap;
	struct stk *s;
	uint32_t n, cap;
	uint32_t *slot; /* open addressing over s by content hash: index + 1, 0 empty */
	uint32_t nslot;
};

#define MAX_STACKS 65536 /* partial parses a state may hold; more refuses the byte */

/* A partial UTF-8 character: its bits so far, the bytes to come (0: none pending) and the
 * code points it can still become. */
struct pend {
	uint32_t cp, left, lo, hi;
};

struct capy_grammar_state {
	const struct capy_grammar *g;
	struct stackset cur, next, todo;
	uint32_t *work; /* one stack being built */
	uint32_t wlen, wcap;
	struct pend pend;
};

static uint32_t stack_hash(const uint32_t *v, uint32_t n)
{
	uint32_t h = 2166136261u ^ n;

	for (uint32_t i = 0; i < n; i++)
		h = (h ^ v[i]) * 16777619u;
	return h;
}

static void set_clear(struct stackset *ss)
{
	ss->n = ss->npool = 0;
	if (ss->slot)
		memset(ss->slot, 0, ss->nslot * sizeof(uint32_t));
}

/* Make room in the hash index for one more stack (kept at most half full). */
static bool set_rehash(struct stackset *ss)
{
	if (2 * (ss->n + 1) <= ss->nslot)
		return true;
	uint32_t ns = ss->nslot ? 2 * ss->nslot : 64, *sl = calloc(ns, sizeof(uint32_t));
	if (!sl)
		return false;
	for (uint32_t i = 0; i < ss->n; i++) {
		uint32_t h = stack_hash(ss->pool + ss->s[i].off, ss->s[i].len) & (ns - 1);
		while (sl[h])
			h = (h + 1) & (ns - 1);
		sl[h] = i + 1;
	}
	free(ss->slot);
	ss->slot = sl;
	ss->nslot = ns;
	return true;
}

/* The slot of stack v in the index: where it is, or the empty slot where it would go. */
static uint32_t set_slot(const struct stackset *ss, const uint32_t *v, uint32_t n)
{
	uint32_t h = stack_hash(v, n) & (ss->nslot - 1);

	for (; ss->slot[h]; h = (h + 1) & (ss->nslot - 1)) {
		const struct stk *k = &ss->s[ss->slot[h] - 1];
		if (k->len == n && (!n || !memcmp(ss->pool + k->off, v, n * sizeof(uint32_t))))
			break;
	}
	return h;
}

/* Add a stack unless the set holds it already: 0, 1 when the set is at MAX_STACKS (the
 * byte is then refused), -1 out of memory. */
static int set_add(struct stackset *ss, const uint32_t *v, uint32_t n)
{
	if (!set_rehash(ss))
		return -1;
	uint32_t h = set_slot(ss, v, n);
	if (ss->slot[h])
		return 0;
	if (ss->n >= MAX_STACKS)
		return 1;
	if (!grow((void **)&ss->pool, &ss->pcap, ss->npool + n + 1, sizeof(uint32_t)) ||
	    !grow((void **)&ss->s, &ss->cap, ss->n + 1, sizeof(*ss->s)))
		return -1;
	if (n)
		memcpy(ss->pool + ss->npool, v, n * sizeof(uint32_t));
	ss->s[ss->n] = (struct stk){ ss->npool, n };
	ss->slot[h] = ++ss->n;
	ss->npool += n;
	return 0;
}

/* dst becomes a copy of src, index included (slot numbers are positions in s, so the index
 * copies as it is). */
static int set_copy(struct stackset *dst, const struct stackset *src)
{
	if (!grow((void **)&dst->pool, &dst->pcap, src->npool + 1, sizeof(uint32_t)) ||
	    !grow((void **)&dst->s, &dst->cap, src->n + 1, sizeof(*dst->s)))
		return -1;
	if (dst->nslot != src->nslot) {
		uint32_t *sl = malloc(src->nslot * sizeof(uint32_t) + 1);
		if (!sl)
			return -1;
		free(dst->slot);
		dst->slot = sl;
		dst->nslot = src->nslot;
	}
	if (src->npool)
		memcpy(dst->pool, src->pool, src->npool * sizeof(uint32_t));
	if (src->n)
		memcpy(dst->s, src->s, src->n * sizeof(*src->s));
	if (src->nslot)
		memcpy(dst->slot, src->slot, src->nslot * sizeof(uint32_t));
	dst->npool = src->npool;
	dst->n = src->n;
	return 0;
}

static bool work_push(struct capy_grammar_state *st, uint32_t x)
{
	if (!grow((void **)&st->work, &st->wcap, st->wlen + 1, sizeof(uint32_t))) {
		return false;
	}
	st->work[st->wlen++] = x;
	return true;
}

/* A copy of the work stack plus one more position, queued for expansion. */
static bool todo_push(struct capy_grammar_state *st, uint32_t extra)
{
	struct stackset *t = &st->todo;
	uint32_t n = st->wlen + 1;

	if (!grow((void **)&t->pool, &t->pcap, t->npool + n, sizeof(uint32_t)) ||
	    !grow((void **)&t->s, &t->cap, t->n + 1, sizeof(*t->s))) {
		return false;
	}
	if (st->wlen)
		memcpy(t->pool + t->npool, st->work, st->wlen * sizeof(uint32_t));
	t->pool[t->npool + st->wlen] = extra;
	t->s[t->n++] = (struct stk){ t->npool, n };
	t->npool += n;
	return true;
}

/* Expand the work stack until each way of going on has a character class on top (or is
 * empty: accepting), adding those stacks to out. A rule becomes each of its alternatives (all
 * but the first queued); a finished alternative returns to what lies below it. Iterative:
 * chains of rules that can be empty may be long. Consumes the work stack. Returns 0, 1 when
 * out is full (MAX_STACKS), -1 out of memory. */
static int expand(struct capy_grammar_state *st, struct stackset *out)
{
	const struct capy_grammar *g = st->g;
	struct stackset *t = &st->todo;
	bool first = true;
	int rc;

	t->n = t->npool = 0;
	while (first || t->n) {
		if (!first) { /* the next queued way */
			const struct stk k = t->s[--t->n];
			st->wlen = 0;
			if (!grow((void **)&st->work, &st->wcap, k.len, sizeof(uint32_t))) {
				return -1;
			}
			memcpy(st->work, t->pool + k.off, k.len * sizeof(uint32_t));
			st->wlen = k.len;
			t->npool = k.off;
		}
		first = false;
		for (;;) {
			if (!st->wlen) {
				if ((rc = set_add(out, st->work, 0)))
					return rc;
				break;
			}
			uint32_t top = st->work[st->wlen - 1];
			const struct elem *e = &g->elems[top];
			if (e->type == E_CHARS) {
				if ((rc = set_add(out, st->work, st->wlen)))
					return rc;
				break;
			}
			st->wlen--;
			if (e->type == E_END)
				continue;
			/* the continuation after the rule, unless it is an alternative's end (a tail call:
			 * the stack does not grow with right recursion) */
			if (g->elems[top + 1].type != E_END && !work_push(st, top + 1))
				return -1;
			const uint32_t a0 = g->rule_alt0[e->a];
			for (uint32_t a = 1; a < g->rule_nalts[e->a]; a++)
				if (!todo_push(st, g->alt_start[a0 + a]))
					return -1;
			if (!work_push(st, g->alt_start[a0]))
				return -1;
		}
	}
	return 0;
}

static bool class_has(const struct capy_grammar *g, const struct elem *e, uint32_t cp)
{
	bool in = false;

	for (uint32_t i = 0; i < e->n && !in; i++)
		in = cp >= g->ranges[2 * (e->a + i)] && cp <= g->ranges[2 * (e->a + i) + 1];
	return in != (e->neg != 0);
}

/* The first code point of [lo, hi] that none of the class's ranges holds (hi + 1: none). */
static uint64_t first_outside(const struct capy_grammar *g, const struct elem *e, uint32_t lo, uint32_t hi)
{
	uint64_t cur = lo;

	while (cur <= hi) {
		bool covered = false;
		for (uint32_t i = 0; i < e->n; i++)
			if (g->ranges[2 * (e->a + i)] <= cur && g->ranges[2 * (e->a + i) + 1] >= cur) {
				cur = (uint64_t)g->ranges[2 * (e->a + i) + 1] + 1;
				covered = true;
				break;
			}
		if (!covered)
			break;
	}
	return cur;
}

/* Whether some range of the class's meets [lo, hi]. */
static bool ranges_meet(const struct capy_grammar *g, const struct elem *e, uint32_t lo, uint32_t hi)
{
	for (uint32_t i = 0; i < e->n; i++)
		if (g->ranges[2 * (e->a + i)] <= hi && g->ranges[2 * (e->a + i) + 1] >= lo)
			return true;
	return false;
}

/* Whether some code point of [lo, hi] is in the class. */
static bool class_meets(const struct capy_grammar *g, const struct elem *e, uint32_t lo, uint32_t hi)
{
	return e->neg ? first_outside(g, e, lo, hi) <= hi : ranges_meet(g, e, lo, hi);
}

/* Whether every code point of [lo, hi] is in the class. */
static bool class_covers(const struct capy_grammar *g, const struct elem *e, uint32_t lo, uint32_t hi)
{
	return e->neg ? !ranges_meet(g, e, lo, hi) : first_outside(g, e, lo, hi) > hi;
}

int capy_grammar_state_new(const struct capy_grammar *g, struct capy_grammar_state **out, struct capy_err *err)
{
	struct capy_grammar_state *st = calloc(1, sizeof(*st));
	bool ok = true;

	*out = NULL;
	if (!st)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	st->g = g;
	for (uint32_t a = 0; ok && a < g->rule_nalts[g->root]; a++) {
		st->wlen = 0;
		ok = work_push(st, g->alt_start[g->rule_alt0[g->root] + a]) && expand(st, &st->cur) == 0;
	}
	if (!ok) {
		capy_grammar_state_free(st);
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	}
	*out = st;
	return 0;
}

void capy_grammar_state_free(struct capy_grammar_state *s)
{
	if (!s)
		return;
	free(s->cur.pool);
	free(s->cur.s);
	free(s->cur.slot);
	free(s->next.pool);
	free(s->next.s);
	free(s->next.slot);
	free(s->todo.pool);
	free(s->todo.s);
	free(s->work);
	free(s);
}

int capy_grammar_state_copy(struct capy_grammar_state *dst, const struct capy_grammar_state *src,
			    struct capy_err *err)
{
	dst->g = src->g;
	if (set_copy(&dst->cur, &src->cur) < 0)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	dst->pend = src->pend;
	return 0;
}

int capy_grammar_state_clone(const struct capy_grammar_state *src, struct capy_grammar_state **out,
			     struct capy_err *err)
{
	struct capy_grammar_state *st = calloc(1, sizeof(*st));

	*out = NULL;
	if (!st)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	if (capy_grammar_state_copy(st, src, err) < 0) {
		capy_grammar_state_free(st);
		return CAPY_ENOMEM;
	}
	*out = st;
	return 0;
}

/* Some stack's top admits a code point of [lo, hi]. */
static bool can_start(const struct capy_grammar *g, const struct stackset *ss, uint32_t lo, uint32_t hi)
{
	for (uint32_t i = 0; i < ss->n; i++) {
		const struct stk *k = &ss->s[i];
		if (k->len && class_meets(g, &g->elems[ss->pool[k->off + k->len - 1]], lo, hi))
			return true;
	}
	return false;
}

/* Read one whole character: to becomes the stacks of from that admit it, stepped and
 * expanded (st lends its work buffers). 1 read, 0 refused, -1 out of memory. */
static int read_char(struct capy_grammar_state *st, const struct stackset *from, struct stackset *to, uint32_t cp)
{
	const struct capy_grammar *g = st->g;

	set_clear(to);
	for (uint32_t i = 0; i < from->n; i++) {
		const struct stk k = from->s[i];
		if (!k.len)
			continue;
		uint32_t top = from->pool[k.off + k.len - 1];
		if (!class_has(g, &g->elems[top], cp))
			continue;
		st->wlen = 0;
		if (!grow((void **)&st->work, &st->wcap, k.len, sizeof(uint32_t))) {
			return -1;
		}
		memcpy(st->work, from->pool + k.off, (k.len - 1) * sizeof(uint32_t));
		st->wlen = k.len - 1;
		if (!work_push(st, top + 1))
			return -1;
		int rc = expand(st, to);
		if (rc)
			return rc < 0 ? -1 : 0;
	}
	return to->n > 0;
}

/* The partial character after byte b, UTF-8 rules only (whether the grammar admits it is the
 * caller's question): 0 refused, 1 still partial (*out), 2 a whole character (*cp). */
static int utf8_step(const struct pend *in, unsigned char b, struct pend *out, uint32_t *cp)
{
	if (!in->left) {
		if (b < 0x80) {
			*cp = b;
			return 2;
		}
		unsigned more = b >= 0xc2 && b <= 0xdf ? 1 : b >= 0xe0 && b <= 0xef ? 2 : b >= 0xf0 && b <= 0xf4 ? 3 : 0;
		if (!more)
			return 0; /* not a UTF-8 lead byte */
		uint32_t bits = b & (0x3f >> more), lo = bits << (6 * more), hi = lo | ((1u << (6 * more)) - 1);
		/* the smallest code point of each length, and no surrogates or beyond U+10FFFF */
		const uint32_t min[4] = { 0, 0x80, 0x800, 0x10000 };
		lo = lo < min[more] ? min[more] : lo;
		hi = hi > 0x10ffff ? 0x10ffff : hi;
		if (lo > hi)
			return 0;
		*out = (struct pend){ bits, more, lo, hi };
		return 1;
	}
	if ((b & 0xc0) != 0x80)
		return 0;
	uint32_t c = (in->cp << 6) | (b & 0x3f), left = in->left - 1;
	uint32_t lo = c << (6 * left), hi = lo | ((1u << (6 * left)) - 1);
	lo = lo < in->lo ? in->lo : lo;
	hi = hi > in->hi ? in->hi : hi;
	if (lo > hi)
		return 0;
	if (!left) {
		if (c >= 0xd800 && c <= 0xdfff)
			return 0;
		*cp = c;
		return 2;
	}
	if (lo >= 0xd800 && hi <= 0xdfff) /* only surrogates left */
		return 0;
	*out = (struct pend){ c, left, lo, hi };
	return 1;
}

/* One byte, in place: 1 read, 0 refused, -1 out of memory (the state unchanged but by 1). */
static int read_byte(struct capy_grammar_state *st, unsigned char b)
{
	struct pend p;
	uint32_t cp;
	int r = utf8_step(&st->pend, b, &p, &cp);

	if (r == 1) {
		if (!can_start(st->g, &st->cur, p.lo, p.hi))
			return 0;
		st->pend = p;
		return 1;
	}
	if (r == 0 || (r = read_char(st, &st->cur, &st->next, cp)) <= 0)
		return r;
	struct stackset t = st->cur;
	st->cur = st->next;
	st->next = t;
	st->pend = (struct pend){ 0 };
	return 1;
}

size_t capy_grammar_feed(struct capy_grammar_state *s, const char *bytes, size_t n)
{
	size_t i = 0;

	while (i < n && read_byte(s, (unsigned char)bytes[i]) > 0)
		i++;
	return i;
}

int capy_grammar_step(struct capy_grammar_state *dst, const struct capy_grammar_state *src, unsigned char b)
{
	struct pend p;
	uint32_t cp;
	int r = utf8_step(&src->pend, b, &p, &cp);

	dst->g = src->g;
	if (r == 0)
		return 0;
	if (r == 1) {
		if (!can_start(src->g, &src->cur, p.lo, p.hi))
			return 0;
		if (set_copy(&dst->cur, &src->cur) < 0)
			return CAPY_ENOMEM;
		dst->pend = p;
		return 1;
	}
	r = read_char(dst, &src->cur, &dst->cur, cp);
	if (r < 0)
		return CAPY_ENOMEM;
	dst->pend = (struct pend){ 0 };
	return r;
}

bool capy_grammar_state_pending(const struct capy_grammar_state *s)
{
	return s->pend.left != 0;
}

bool capy_grammar_state_uniform(const struct capy_grammar_state *s, uint32_t lo, uint32_t hi)
{
	if (s->pend.left)
		return false;
	for (uint32_t i = 0; i < s->cur.n; i++) {
		const struct stk *k = &s->cur.s[i];
		if (!k->len)
			continue;
		const struct elem *e = &s->g->elems[s->cur.pool[k->off + k->len - 1]];
		if (class_meets(s->g, e, lo, hi) && !class_covers(s->g, e, lo, hi))
			return false;
	}
	return true;
}

bool capy_grammar_accepting(const struct capy_grammar_state *s)
{
	if (s->pend.left)
		return false;
	for (uint32_t i = 0; i < s->cur.n; i++)
		if (!s->cur.s[i].len)
			return true;
	return false;
}

bool capy_grammar_finished(const struct capy_grammar_state *s)
{
	for (uint32_t i = 0; i < s->cur.n; i++)
		if (s->cur.s[i].len)
			return false;
	return !s->pend.left;
}

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	return x ^ (x >> 33);
}

uint64_t capy_grammar_state_hash(const struct capy_grammar_state *s)
{
	uint64_t h = mix64(((uint64_t)s->pend.cp << 32 | s->pend.left) ^ mix64((uint64_t)s->pend.lo << 32 | s->pend.hi));

	/* a sum: the set's order (which depends on the path that led to it) does not count */
	for (uint32_t i = 0; i < s->cur.n; i++)
		h += mix64((uint64_t)stack_hash(s->cur.pool + s->cur.s[i].off, s->cur.s[i].len) << 32 | s->cur.s[i].len);
	return h;
}

bool capy_grammar_state_equal(const struct capy_grammar_state *a, const struct capy_grammar_state *b)
{
	if (a->g != b->g || a->cur.n != b->cur.n || memcmp(&a->pend, &b->pend, sizeof(a->pend)))
		return false;
	for (uint32_t i = 0; i < a->cur.n; i++) {
		const uint32_t *v = a->cur.pool + a->cur.s[i].off;
		if (!b->cur.nslot || !b->cur.slot[set_slot(&b->cur, v, a->cur.s[i].len)])
			return false;
	}
	return true;
}
