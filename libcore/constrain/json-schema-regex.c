/* json-schema-regex.c - a schema's "pattern" (an ECMA-262 regular expression) as the grammar
 * of the JSON strings whose content it matches.
 *
 * The subset: literals and escapes (\n \t \r \f \v \0 \xHH \uHHHH \cX, escaped punctuation),
 * classes [...] [^...] with ranges, \d \w \s and their negations, `.`, groups ( ), (?: ) and
 * (?<name> ), alternation, the quantifiers ? * + {m} {m,} {m,n} (lazy forms too: the
 * language is the same), ^ at the start and $ at the end of a top-level alternative. A side
 * without its anchor matches anything, as a search does. Refused, with the construction
 * named: lookaround, backreferences, word boundaries, \p{...}, anchors elsewhere, and a
 * repetition of something that can match the empty string (the grammar compiler refuses
 * those). The class escapes are ASCII (\d is [0-9]); their negations and `.` never match a
 * line terminator or, for \D \W \S, a non-ASCII character: Python's and ECMA's Unicode
 * classes differ there, and the narrower choice satisfies both.
 *
 * The regex matches the decoded string, the grammar reads JSON text: a `"`, a `\` or a
 * control character the regex allows is written as its JSON escape. With opts->raw the
 * grammar reads the characters themselves (no quotes, no escapes; never the raw stop's
 * first character), and capy_regex_to_gbnf gives a regex alone that grammar, matched whole. */
#include "json-schema-impl.h"

#define RX_MAX_NODES 20000
#define RX_MAX_NEST 32
#define RX_MAX_COUNT 100000
#define CP_MAX 0x10ffff

enum { RX_CHARS, RX_CAT, RX_ALT, RX_REPEAT };

struct rx_node {
	int type;
	uint32_t r0, nr;      /* RX_CHARS: ranges [r0, r0 + nr) of rx->ranges, positive and sorted */
	int32_t kid, next;    /* first child, next sibling (-1: none) */
	uint64_t m, n;        /* RX_REPEAT */
	bool anchor_start, anchor_end; /* a top-level alternative's anchors */
	size_t at;            /* where it starts in the source (errors found when writing) */
};

struct rx {
	struct js_ctx *c;
	const char *src, *ptr;
	size_t len, pos;
	struct rx_node *nodes;
	uint32_t nnodes, ncap;
	uint32_t (*ranges)[2];
	uint32_t nranges, rcap;
	unsigned nest;
};

static int rx_fail_at(struct rx *x, int code, const char *what, size_t at)
{
	return js_fail(x->c, code, x->ptr, "%s%s at offset %zu", x->c->regex ? "" : "pattern: ", what, at);
}

static int rx_fail(struct rx *x, int code, const char *what)
{
	return rx_fail_at(x, code, what, x->pos);
}

static int32_t new_node(struct rx *x, int type)
{
	if (x->nnodes >= RX_MAX_NODES)
		return rx_fail(x, CAPY_EUNSUPPORTED, "too large");
	if (!js_grow(&x->nodes, &x->ncap, x->nnodes, sizeof(*x->nodes)))
		return js_oom(x->c);
	x->nodes[x->nnodes] = (struct rx_node){ .type = type, .kid = -1, .next = -1, .at = x->pos };
	return (int32_t)x->nnodes++;
}

static int add_range(struct rx *x, uint32_t lo, uint32_t hi)
{
	if (!js_grow(&x->ranges, &x->rcap, x->nranges, sizeof(*x->ranges)))
		return js_oom(x->c);
	x->ranges[x->nranges][0] = lo;
	x->ranges[x->nranges][1] = hi;
	x->nranges++;
	return 0;
}

static int cmp_range(const void *a, const void *b)
{
	const uint32_t *p = a, *q = b;

	return p[0] < q[0] ? -1 : p[0] > q[0];
}

/* Sort and merge ranges [r0, end), complement them when neg: a node's final set. ascii: keep
 * only ASCII (a negated class holding \d \w \s: Unicode's digits, letters and spaces would
 * be in it for ECMA and not for Python). */
static int finish_set(struct rx *x, int32_t node, uint32_t r0, bool neg, bool ascii)
{
	uint32_t n = x->nranges - r0, w = r0;

	qsort(x->ranges + r0, n, sizeof(*x->ranges), cmp_range);
	for (uint32_t i = r0; i < r0 + n; i++) {
		if (w > r0 && x->ranges[i][0] <= x->ranges[w - 1][1] + 1) {
			if (x->ranges[i][1] > x->ranges[w - 1][1])
				x->ranges[w - 1][1] = x->ranges[i][1];
		} else {
			x->ranges[w][0] = x->ranges[i][0];
			x->ranges[w][1] = x->ranges[i][1];
			w++;
		}
	}
	x->nranges = w;
	if (neg) { /* the gaps, appended after the set, then moved down over it */
		uint32_t end = w, from = 0;
		for (uint32_t i = r0; i < end; i++) {
			if (x->ranges[i][0] > from && add_range(x, from, x->ranges[i][0] - 1))
				return x->c->rc;
			from = x->ranges[i][1] + 1;
		}
		if (from <= CP_MAX && add_range(x, from, CP_MAX))
			return x->c->rc;
		memmove(x->ranges + r0, x->ranges + end, (x->nranges - end) * sizeof(*x->ranges));
		x->nranges -= end - r0;
	}
	while (ascii && x->nranges > r0 && x->ranges[x->nranges - 1][0] >= 0x80)
		x->nranges--;
	if (ascii && x->nranges > r0 && x->ranges[x->nranges - 1][1] >= 0x80)
		x->ranges[x->nranges - 1][1] = 0x7f;
	x->nodes[node].r0 = r0;
	x->nodes[node].nr = x->nranges - r0;
	return 0;
}

static int peek(const struct rx *x)
{
	return x->pos < x->len ? (unsigned char)x->src[x->pos] : -1;
}

static int src_char(struct rx *x, uint32_t *cp)
{
	unsigned k = js_utf8_next(x->src + x->pos, x->len - x->pos, cp);

	if (!k)
		return rx_fail(x, CAPY_EFORMAT, "invalid UTF-8");
	x->pos += k;
	return 0;
}

static int hex_digits(struct rx *x, unsigned n, uint32_t *v)
{
	*v = 0;
	for (unsigned i = 0; i < n; i++) {
		int d = js_hex_digit(peek(x));
		if (d < 0)
			return rx_fail(x, CAPY_EFORMAT, "expected a hexadecimal digit");
		*v = *v * 16 + (uint32_t)d;
		x->pos++;
	}
	return 0;
}

/* The ranges of a class escape (\d \w \s and negations) after the backslash, added; 1 when
 * the letter is not one. */
static int class_escape(struct rx *x, int letter)
{
	static const uint32_t digit[][2] = { { '0', '9' } };
	static const uint32_t word[][2] = { { '0', '9' }, { 'A', 'Z' }, { '_', '_' }, { 'a', 'z' } };
	static const uint32_t space[][2] = { { '\t', '\r' }, { ' ', ' ' } };
	const uint32_t(*set)[2];
	size_t n;

	switch (letter | 0x20) {
	case 'd':
		set = digit, n = ARRAY_SIZE(digit);
		break;
	case 'w':
		set = word, n = ARRAY_SIZE(word);
		break;
	case 's':
		set = space, n = ARRAY_SIZE(space);
		break;
	default:
		return 1;
	}
	if (letter >= 'a') {
		for (size_t i = 0; i < n; i++)
			if (add_range(x, set[i][0], set[i][1]))
				return x->c->rc;
		return 0;
	}
	/* negated: the printable ASCII outside the set (Python's and ECMA's sets agree there) */
	for (uint32_t a = 0x20; a < 0x80; a++) {
		bool in = false;
		for (size_t i = 0; i < n; i++)
			in |= a >= set[i][0] && a <= set[i][1];
		if (!in && add_range(x, a, a))
			return x->c->rc;
	}
	return 0;
}

/* An escaped character after the backslash (not a class escape). */
static int escaped_char(struct rx *x, uint32_t *cp, bool in_class)
{
	int ch = peek(x);

	if (ch < 0)
		return rx_fail(x, CAPY_EFORMAT, "a backslash at the end");
	x->pos++;
	switch (ch) {
	case 'n': *cp = '\n'; return 0;
	case 'r': *cp = '\r'; return 0;
	case 't': *cp = '\t'; return 0;
	case 'f': *cp = '\f'; return 0;
	case 'v': *cp = '\v'; return 0;
	case '0': *cp = 0; return 0;
	case 'x': return hex_digits(x, 2, cp);
	case 'u':
		if (hex_digits(x, 4, cp))
			return x->c->rc;
		if (*cp >= 0xd800 && *cp <= 0xdfff)
			return rx_fail(x, CAPY_EUNSUPPORTED, "a surrogate escape is not supported");
		return 0;
	case 'c': {
		int l = peek(x);
		if (!((l >= 'a' && l <= 'z') || (l >= 'A' && l <= 'Z')))
			return rx_fail(x, CAPY_EFORMAT, "\\c needs a letter");
		x->pos++;
		*cp = (uint32_t)(l & 0x1f);
		return 0;
	}
	case 'b':
		if (in_class) {
			*cp = '\b';
			return 0;
		}
		/* fall through */
	case 'B':
		x->pos--;
		return rx_fail(x, CAPY_EUNSUPPORTED, "word boundaries (\\b, \\B) are not supported");
	case 'p': case 'P':
		x->pos--;
		return rx_fail(x, CAPY_EUNSUPPORTED, "Unicode property escapes (\\p, \\P) are not supported");
	case 'k':
		x->pos--;
		return rx_fail(x, CAPY_EUNSUPPORTED, "backreferences are not supported");
	default:
		if (ch >= '1' && ch <= '9') {
			x->pos--;
			return rx_fail(x, CAPY_EUNSUPPORTED, "backreferences are not supported");
		}
		if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9')) {
			x->pos--;
			return rx_fail(x, CAPY_EUNSUPPORTED, "unknown escape");
		}
		x->pos--;
		return src_char(x, cp); /* escaped punctuation stands for itself */
	}
}

static int32_t chars_node(struct rx *x, uint32_t lo, uint32_t hi)
{
	int32_t n = new_node(x, RX_CHARS);
	uint32_t r0 = x->nranges;

	if (n < 0 || add_range(x, lo, hi) || finish_set(x, n, r0, false, false))
		return -1;
	return n;
}

static int32_t parse_class(struct rx *x)
{
	int32_t node = new_node(x, RX_CHARS);
	uint32_t r0 = x->nranges;
	bool neg = false, shorthand = false;

	if (node < 0)
		return -1;
	x->pos++; /* [ */
	if (peek(x) == '^') {
		neg = true;
		x->pos++;
	}
	while (peek(x) != ']') {
		uint32_t lo, hi;
		if (peek(x) < 0)
			return rx_fail(x, CAPY_EFORMAT, "unterminated character class");
		if (peek(x) == '\\') {
			x->pos++;
			int r = class_escape(x, peek(x));
			if (r < 0)
				return -1;
			if (!r) {
				x->pos++;
				shorthand = true;
				continue;
			}
			if (escaped_char(x, &lo, true))
				return -1;
		} else if (src_char(x, &lo)) {
			return -1;
		}
		hi = lo;
		if (peek(x) == '-' && x->pos + 1 < x->len && x->src[x->pos + 1] != ']') {
			x->pos++;
			if (peek(x) == '\\') {
				x->pos++;
				if (class_escape(x, peek(x)) <= 0)
					return rx_fail(x, CAPY_EFORMAT, "a class escape cannot end a range");
				if (escaped_char(x, &hi, true))
					return -1;
			} else if (src_char(x, &hi)) {
				return -1;
			}
			if (hi < lo)
				return rx_fail(x, CAPY_EFORMAT, "a range runs backwards");
		}
		if (add_range(x, lo, hi))
			return -1;
	}
	x->pos++;
	if (finish_set(x, node, r0, neg, neg && shorthand))
		return -1;
	return node;
}

static int32_t parse_alt(struct rx *x, bool top);

static int32_t parse_group(struct rx *x)
{
	const char *s = x->src + x->pos + 1, *end = x->src + x->len; /* after the ( */

	if (s < end && *s == '?') { /* (errors point at the parenthesis) */
		if (end - s >= 2 && s[1] == ':') {
			x->pos += 2;
		} else if (end - s >= 2 && (s[1] == '=' || s[1] == '!')) {
			return rx_fail(x, CAPY_EUNSUPPORTED, "lookahead is not supported");
		} else if (end - s >= 3 && s[1] == '<' && (s[2] == '=' || s[2] == '!')) {
			return rx_fail(x, CAPY_EUNSUPPORTED, "lookbehind is not supported");
		} else if (end - s >= 2 && s[1] == '<') { /* a named group: only a group here */
			const char *close = memchr(s, '>', (size_t)(end - s));
			if (!close)
				return rx_fail(x, CAPY_EFORMAT, "unterminated group name");
			x->pos += (size_t)(close - s) + 1;
		} else {
			return rx_fail(x, CAPY_EUNSUPPORTED, "this (? group is not supported");
		}
	}
	x->pos++; /* ( */
	if (++x->nest > RX_MAX_NEST)
		return rx_fail(x, CAPY_EUNSUPPORTED, "groups nested too deep");
	int32_t n = parse_alt(x, false);
	x->nest--;
	if (n < 0)
		return -1;
	if (peek(x) != ')')
		return rx_fail(x, CAPY_EFORMAT, "unclosed group");
	x->pos++;
	return n;
}

static int32_t parse_atom_at(struct rx *x)
{
	int ch = peek(x);
	uint32_t cp;

	switch (ch) {
	case '(':
		return parse_group(x);
	case '[':
		return parse_class(x);
	case '.': {
		int32_t n = new_node(x, RX_CHARS);
		uint32_t r0 = x->nranges;
		x->pos++;
		/* anything but the line terminators \n \r U+2028 U+2029 */
		if (n < 0 || add_range(x, '\n', '\n') || add_range(x, '\r', '\r') || add_range(x, 0x2028, 0x2029) ||
		    finish_set(x, n, r0, true, false))
			return -1;
		return n;
	}
	case '\\': {
		x->pos++;
		int32_t n = new_node(x, RX_CHARS);
		uint32_t r0 = x->nranges;
		if (n < 0)
			return -1;
		int r = class_escape(x, peek(x));
		if (r < 0)
			return -1;
		if (!r) {
			x->pos++;
		} else if (escaped_char(x, &cp, false) || add_range(x, cp, cp)) {
			return -1;
		}
		return finish_set(x, n, r0, false, false) ? -1 : n;
	}
	case '*': case '+': case '?':
		return rx_fail(x, CAPY_EFORMAT, "nothing to repeat");
	case '^': case '$':
		return rx_fail(x, CAPY_EUNSUPPORTED, "an anchor (^ or $) is supported only at the ends of the pattern");
	default:
		if (src_char(x, &cp))
			return -1;
		return chars_node(x, cp, cp);
	}
}

/* An atom, its place in the source where it begins (a literal's node is made after it). */
static int32_t parse_atom(struct rx *x)
{
	size_t at = x->pos;
	int32_t n = parse_atom_at(x);

	if (n >= 0)
		x->nodes[n].at = at;
	return n;
}

/* {m}, {m,}, {m,n} at pos: 1 and the counts if there is one (else pos unchanged, 0: a
 * literal brace, as ECMA reads it). */
static int parse_braces(struct rx *x, uint64_t *m, uint64_t *n)
{
	size_t p = x->pos + 1;
	uint64_t v[2] = { 0, 0 };
	bool comma = false, digits[2] = { false, false };

	for (; p < x->len && x->src[p] != '}'; p++) {
		char ch = x->src[p];
		if (ch == ',' && !comma) {
			comma = true;
		} else if (ch >= '0' && ch <= '9') {
			v[comma] = v[comma] * 10 + (uint64_t)(ch - '0');
			digits[comma] = true;
			if (v[comma] > RX_MAX_COUNT)
				return rx_fail(x, CAPY_EUNSUPPORTED, "a repetition count above 100000");
		} else {
			return 0;
		}
	}
	if (p >= x->len || !digits[0])
		return 0;
	*m = v[0];
	*n = !comma ? v[0] : digits[1] ? v[1] : JS_UNBOUNDED;
	if (*n < *m)
		return rx_fail(x, CAPY_EFORMAT, "{m,n} with n < m");
	x->pos = p + 1;
	return 1;
}

static int32_t parse_quantified(struct rx *x)
{
	int32_t atom = parse_atom(x);
	uint64_t m = 0, n = 0;
	int ch = peek(x), r = 0;

	if (atom < 0)
		return -1;
	if (ch == '*' || ch == '+' || ch == '?') {
		x->pos++;
		m = ch == '+';
		n = ch == '?' ? 1 : JS_UNBOUNDED;
	} else if (ch == '{' && (r = parse_braces(x, &m, &n)) != 0) {
		if (r < 0)
			return -1;
	} else {
		return atom;
	}
	if (peek(x) == '?') /* lazy: the same strings */
		x->pos++;
	if (peek(x) == '*' || peek(x) == '+' || (peek(x) == '{' && x->pos + 1 < x->len && x->src[x->pos + 1] >= '0' &&
						 x->src[x->pos + 1] <= '9'))
		return rx_fail(x, CAPY_EFORMAT, "nothing to repeat");
	int32_t rep = new_node(x, RX_REPEAT);
	if (rep < 0)
		return -1;
	x->nodes[rep].kid = atom;
	x->nodes[rep].at = x->nodes[atom].at;
	x->nodes[rep].m = m;
	x->nodes[rep].n = n;
	return rep;
}

static void append_kid(struct rx *x, int32_t parent, int32_t *last, int32_t kid)
{
	if (*last < 0)
		x->nodes[parent].kid = kid;
	else
		x->nodes[*last].next = kid;
	*last = kid;
}

/* A sequence up to | or ) or the end; at the top level, ^ may open it and $ close it. */
static int32_t parse_cat(struct rx *x, bool top)
{
	int32_t cat = new_node(x, RX_CAT), last = -1;

	if (cat < 0)
		return -1;
	if (top && peek(x) == '^') {
		x->pos++;
		x->nodes[cat].anchor_start = true;
	}
	for (;;) {
		int ch = peek(x);
		if (ch < 0 || ch == '|' || ch == ')')
			break;
		if (top && ch == '$' && (x->pos + 1 == x->len || x->src[x->pos + 1] == '|')) {
			x->pos++;
			x->nodes[cat].anchor_end = true;
			break;
		}
		int32_t q = parse_quantified(x);
		if (q < 0)
			return -1;
		append_kid(x, cat, &last, q);
	}
	return cat;
}

static int32_t parse_alt(struct rx *x, bool top)
{
	int32_t alt = new_node(x, RX_ALT), last = -1;

	if (alt < 0)
		return -1;
	for (;;) {
		int32_t cat = parse_cat(x, top);
		if (cat < 0)
			return -1;
		append_kid(x, alt, &last, cat);
		if (peek(x) != '|')
			return alt;
		x->pos++;
	}
}

/* --- checks and writing ------------------------------------------------------------------------ */

static bool nullable(const struct rx *x, int32_t n)
{
	const struct rx_node *d = &x->nodes[n];

	switch (d->type) {
	case RX_CHARS:
		return false;
	case RX_REPEAT:
		return d->m == 0 || nullable(x, d->kid);
	case RX_CAT:
		for (int32_t k = d->kid; k >= 0; k = x->nodes[k].next)
			if (!nullable(x, k))
				return false;
		return true;
	default:
		for (int32_t k = d->kid; k >= 0; k = x->nodes[k].next)
			if (nullable(x, k))
				return true;
		return false;
	}
}

static bool set_has(const struct rx *x, const struct rx_node *d, uint32_t cp)
{
	for (uint32_t i = d->r0; i < d->r0 + d->nr; i++)
		if (cp >= x->ranges[i][0] && cp <= x->ranges[i][1])
			return true;
	return false;
}

/* The JSON escapes of the characters of the set a string cannot hold raw (", \ and the
 * controls), as alternatives appended to b: "\\" and a class of the short forms' letters,
 * then "\\u000" or "\\u001" and a class of last digits; the count of alternatives. */
static unsigned put_escapes(const struct rx *x, const struct rx_node *d, struct capy_buf *b)
{
	static const char short_form[] = { ['\b'] = 'b', ['\f'] = 'f', ['\n'] = 'n', ['\r'] = 'r', ['\t'] = 't',
					   ['"'] = '"', ['\\'] = '\\' };
	struct capy_buf cls = { 0 };
	unsigned n = 0;

	for (uint32_t cp = 0; cp < sizeof(short_form); cp++)
		if (short_form[cp] && set_has(x, d, cp))
			js_class_char(&cls, (unsigned char)short_form[cp]);
	if (cls.len) {
		capy_buf_printf(b, " \"\\\\\" [%s]", cls.data);
		n++;
	}
	for (uint32_t high = 0; high < 2; high++) {
		capy_buf_reset(&cls);
		for (uint32_t low = 0; low < 16; low++) {
			uint32_t cp = high * 16 + low;
			if ((cp >= sizeof(short_form) || !short_form[cp]) && set_has(x, d, cp))
				js_class_char(&cls, (uint32_t)"0123456789abcdef"[low]);
		}
		if (cls.len) {
			capy_buf_printf(b, "%s \"\\\\u00%u\" [%s]", n ? " |" : "", (unsigned)high, cls.data);
			n++;
		}
	}
	capy_buf_release(&cls);
	return n;
}

/* A set of characters as JSON text: a class of those a string holds raw, and escapes for
 * the others; with opts->raw, a class of them all (less the surrogates, which are not
 * characters, and the raw stop's first character). False when nothing is left of the set. */
static bool put_set(const struct rx *x, const struct rx_node *d, struct capy_buf *b)
{
	static const uint32_t json_gaps[][2] = { { 0, 0x1f }, { '"', '"' }, { '\\', '\\' }, { 0xd800, 0xdfff } };
	const bool raw = x->c->opts->raw;
	const uint32_t stop = x->c->raw_stop_cp ? x->c->raw_stop_cp : 0xd800;
	const uint32_t raw_gaps[][2] = { { 0xd800, 0xdfff }, { stop, stop } };
	const uint32_t(*gaps)[2] = raw ? raw_gaps : json_gaps;
	const size_t ngaps = raw ? ARRAY_SIZE(raw_gaps) : ARRAY_SIZE(json_gaps);
	struct capy_buf cls = { 0 }, esc = { 0 };
	uint32_t nraw = 0, raw_cp = 0;

	for (uint32_t i = d->r0; i < d->r0 + d->nr; i++) { /* the raw part: the ranges less the gaps */
		uint32_t a = x->ranges[i][0], hi = x->ranges[i][1];
		while (a <= hi) {
			bool skipped = false;
			for (size_t g = 0; g < ngaps; g++)
				if (a >= gaps[g][0] && a <= gaps[g][1]) {
					a = gaps[g][1] + 1;
					skipped = true;
				}
			if (skipped || a > hi)
				continue;
			uint32_t e = hi;
			for (size_t g = 0; g < ngaps; g++)
				if (gaps[g][0] > a && gaps[g][0] - 1 < e)
					e = gaps[g][0] - 1;
			js_class_char(&cls, a);
			if (e > a) {
				capy_buf_putc(&cls, '-');
				js_class_char(&cls, e);
			}
			raw_cp = a;
			nraw += e - a + 1;
			a = e + 1;
		}
	}
	unsigned nesc = raw ? 0 : put_escapes(x, d, &esc);
	bool group = (nraw > 0) + nesc > 1;
	capy_buf_puts(b, group ? " (" : "");
	if (nraw == 1 && raw_cp < 0x80) {
		char ch = (char)raw_cp;
		capy_buf_putc(b, ' ');
		js_literal(b, &ch, 1);
	} else if (nraw) {
		capy_buf_printf(b, " [%s]", cls.data);
	}
	if (nesc)
		capy_buf_printf(b, "%s%s", nraw ? " |" : "", esc.data);
	capy_buf_puts(b, group ? " )" : "");
	capy_buf_release(&cls);
	capy_buf_release(&esc);
	return nraw + nesc > 0;
}

static int put_node(struct rx *x, int32_t n, struct capy_buf *b);

/* The node as one grammar element (a rule of its own unless it is one already). */
static const char *node_atom(struct rx *x, int32_t n, struct capy_buf *tmp)
{
	capy_buf_reset(tmp);
	if (put_node(x, n, tmp))
		return NULL;
	if (x->nodes[n].type == RX_CHARS && tmp->data && !strchr(tmp->data + 1, ' '))
		return tmp->data + 1; /* a single class or literal */
	return js_rule(x->c, "pattern", tmp);
}

static int put_node(struct rx *x, int32_t n, struct capy_buf *b)
{
	const struct rx_node *d = &x->nodes[n];

	switch (d->type) {
	case RX_CHARS:
		if (!d->nr || !put_set(x, d, b))
			return rx_fail_at(x, CAPY_EUNSUPPORTED, d->nr ? "a class of characters that cannot be written here"
							       : "a class that matches nothing", d->at);
		return 0;
	case RX_REPEAT: {
		if (d->n > 1 && nullable(x, d->kid))
			return rx_fail_at(x, CAPY_EUNSUPPORTED,
					  "a repetition of something that can match the empty string is not supported", d->at);
		struct capy_buf tmp = { 0 };
		const char *atom = node_atom(x, d->kid, &tmp);
		int rc = atom ? js_repeat(x->c, b, atom, d->m, d->n) : x->c->rc;
		capy_buf_release(&tmp);
		return rc;
	}
	case RX_CAT:
		if (d->kid < 0) {
			capy_buf_puts(b, " \"\"");
			return 0;
		}
		for (int32_t k = d->kid; k >= 0; k = x->nodes[k].next)
			if (put_node(x, k, b))
				return x->c->rc;
		return 0;
	default:
		if (x->nodes[d->kid].next < 0)
			return put_node(x, d->kid, b);
		capy_buf_puts(b, " (");
		for (int32_t k = d->kid; k >= 0; k = x->nodes[k].next) {
			if (k != d->kid)
				capy_buf_puts(b, " |");
			if (put_node(x, k, b))
				return x->c->rc;
		}
		capy_buf_puts(b, " )");
		return 0;
	}
}

const char *js_pattern_rule(struct js_ctx *c, const char *pattern, const char *ptr, bool whole)
{
	struct rx x = { .c = c, .src = pattern, .ptr = ptr, .len = strlen(pattern) };
	struct capy_buf body = { 0 };
	const char *name = NULL, *any = js_string_char(c), *quote = c->opts->raw ? "" : "\"\\\"\" ";
	int32_t top = parse_alt(&x, true);

	if (top < 0 || !any)
		goto out;
	if (x.pos < x.len) {
		rx_fail(&x, CAPY_EFORMAT, "unmatched )");
		goto out;
	}
	/* "\"" ( each alternative, with anything before and after where it is not anchored ) "\"" */
	capy_buf_printf(&body, "%s(", quote);
	for (int32_t k = x.nodes[top].kid; k >= 0; k = x.nodes[k].next) {
		if (k != x.nodes[top].kid)
			capy_buf_puts(&body, " |");
		if (!x.nodes[k].anchor_start && !whole)
			capy_buf_printf(&body, " %s*", any);
		if (put_node(&x, k, &body))
			goto out;
		if (!x.nodes[k].anchor_end && !whole)
			capy_buf_printf(&body, " %s*", any);
	}
	capy_buf_printf(&body, " )%s%s", *quote ? " " : "", *quote ? "\"\\\"\"" : "");
	name = js_rule(c, "pattern", &body);
out:
	capy_buf_release(&body);
	free(x.nodes);
	free(x.ranges);
	return name;
}

int capy_regex_to_gbnf(const char *re, size_t len, char **gbnf_out, struct capy_err *err)
{
	static const struct capy_schema_opts raw = { .raw = true };
	struct js_ctx c = { .opts = &raw, .err = err, .regex = true };
	const char *nul = memchr(re, 0, len), *root;
	char *src;

	*gbnf_out = NULL;
	if (nul)
		return capy_err_set(err, CAPY_EFORMAT, "regex: a NUL byte at offset %zu", (size_t)(nul - re));
	if (len > JS_MAX_INPUT)
		return capy_err_set(err, CAPY_EUNSUPPORTED, "regex: too large: %zu bytes (the limit is %u)", len, JS_MAX_INPUT);
	if (!(src = malloc(len + 1)))
		return capy_err_set(err, CAPY_ENOMEM, "regex: out of memory");
	memcpy(src, re, len);
	src[len] = 0;
	if ((root = js_pattern_rule(&c, src, "", true)))
		*gbnf_out = js_text(&c, root);
	js_ctx_release(&c);
	free(src);
	return *gbnf_out ? 0 : c.rc ? c.rc : CAPY_ENOMEM;
}
