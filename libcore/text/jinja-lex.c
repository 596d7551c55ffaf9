/* jinja-lex.c - the template lexer: normalized source to tokens.
 *
 * It follows jinja2's rules with trim_blocks and lstrip_blocks on: "-" in a tag strips all
 * whitespace on that side, "+" keeps it, a block or comment tag alone on its line takes the
 * line's leading spaces, the newline after "%}" or "#}" goes, and "{% raw %}" keeps its own.
 */
#include "text/jinja-impl.h"

void jp_line_col(const char *src, size_t len, size_t pos, uint32_t *line, uint32_t *col)
{
	size_t i;

	*line = 1;
	*col = 1;
	for (i = 0; i < pos && i < len; i++) {
		if (src[i] == '\n') {
			(*line)++;
			*col = 1;
		} else if (((unsigned char)src[i] & 0xc0) != 0x80) {
			(*col)++;
		}
	}
}

void jp_fail(struct jparser *p, size_t pos, const char *fmt, ...)
{
	char msg[512];
	uint32_t line, col;
	va_list ap;

	jp_line_col(p->src, p->len, pos, &line, &col);
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	capy_err_set(p->err, CAPY_EFORMAT, "%s:%u:%u: %s", p->t->name, line, col, msg);
	p->failed = true;
	longjmp(p->fail, 1);
}

static struct jtok *emit(struct jparser *p, int type, size_t pos)
{
	struct jtok *t;

	if (p->ntok == p->cap) {
		size_t ncap = p->cap ? p->cap * 2 : 256;
		struct jtok *n = ja_alloc(p->a, ncap * sizeof(*n));

		if (p->ntok)
			memcpy(n, p->toks, p->ntok * sizeof(*n));
		p->toks = n;
		p->cap = ncap;
	}
	t = &p->toks[p->ntok++];
	t->type = (uint8_t)type;
	t->pos = pos;
	return t;
}

/* Length of the Python whitespace run (\s+) at i, 0 if none. */
static size_t ws_run(const char *s, size_t len, size_t i)
{
	size_t start = i;

	while (i < len) {
		int32_t c;
		size_t n = ju_decode(s, len, i, &c);

		if (!ju_isspace(c))
			break;
		i += n;
	}
	return i - start;
}

/* Length of text [0, n) without its trailing Python whitespace (str.rstrip()). */
static size_t rstrip_len(const char *s, size_t n)
{
	while (n > 0) {
		size_t k = n - 1;
		int32_t c;

		while (k > 0 && ((unsigned char)s[k] & 0xc0) == 0x80)
			k--;
		ju_decode(s, n, k, &c);
		if (!ju_isspace(c))
			break;
		n = k;
	}
	return n;
}

/* Emit text [start, end) as data, applying the whitespace control of the tag that follows:
 * sign '-' strips all trailing whitespace; otherwise lstrip_blocks removes the spaces that
 * precede a block or comment tag on its own line. */
static void emit_data(struct jparser *p, size_t start, size_t end, char sign, bool lstrip)
{
	const char *s = p->src + start;
	size_t n = end - start;

	if (sign == '-') {
		n = rstrip_len(s, n);
	} else if (sign != '+' && lstrip) {
		size_t l = n;

		while (l > 0 && s[l - 1] != '\n')
			l--;
		if ((l > 0 || start == 0 || p->src[start - 1] == '\n') && l < n &&
		    ws_run(s, n, l) == n - l)
			n = l;
	}
	if (n)
		emit(p, T_DATA, start)->val = jv_str(p->a, s, n);
}

static bool at(const struct jparser *p, size_t i, const char *w)
{
	size_t n = strlen(w);

	return i <= p->len && p->len - i >= n && !memcmp(p->src + i, w, n);
}

/* After a block end "%}" (or "#}"): trim_blocks drops one newline. Returns the new position. */
static size_t block_suffix(const struct jparser *p, size_t i, char sign)
{
	if (sign == '-')
		return i + ws_run(p->src, p->len, i);
	if (sign != '+' && i < p->len && p->src[i] == '\n')
		return i + 1;
	return i;
}

/* Match "{%[-+]? \s* word \s* [-+]?%}" at i: returns the position just after "%}" (0 if no
 * match) and the signs inside the opening and closing delimiters. */
static size_t match_word_tag(const struct jparser *p, size_t i, const char *word, char *open_sign,
			     char *close_sign)
{
	size_t j = i + 2, n = strlen(word);

	*open_sign = *close_sign = 0;
	if (!at(p, i, "{%"))
		return 0;
	if (j < p->len && (p->src[j] == '-' || p->src[j] == '+'))
		*open_sign = p->src[j++];
	j += ws_run(p->src, p->len, j);
	if (!at(p, j, word))
		return 0;
	j += n;
	j += ws_run(p->src, p->len, j);
	if (at(p, j, "-%}") || at(p, j, "+%}"))
		*close_sign = p->src[j++];
	if (!at(p, j, "%}"))
		return 0;
	return j + 2;
}

/* A string literal: Python's unicode-escape rules (unknown escapes stay as written). */
static size_t lex_string(struct jparser *p, size_t i)
{
	char q = p->src[i], enc[4];
	struct jbuf b = { 0 };
	size_t j = i + 1;
	struct jtok *t;

	for (;;) {
		char c;

		if (j >= p->len) {
			jb_free(&b);
			jp_fail(p, i, "unterminated string literal");
		}
		c = p->src[j];
		if (c == q)
			break;
		if (c != '\\' || j + 1 >= p->len) {
			jb_putc(&b, c);
			j++;
			continue;
		}
		c = p->src[j + 1];
		j += 2;
		switch (c) {
		case '\n': break;
		case '\\': jb_putc(&b, '\\'); break;
		case '\'': jb_putc(&b, '\''); break;
		case '"': jb_putc(&b, '"'); break;
		case 'a': jb_putc(&b, '\a'); break;
		case 'b': jb_putc(&b, '\b'); break;
		case 'f': jb_putc(&b, '\f'); break;
		case 'n': jb_putc(&b, '\n'); break;
		case 'r': jb_putc(&b, '\r'); break;
		case 't': jb_putc(&b, '\t'); break;
		case 'v': jb_putc(&b, '\v'); break;
		case 'x':
		case 'u':
		case 'U': {
			size_t n = c == 'x' ? 2 : c == 'u' ? 4 : 8;
			int32_t v = j + n <= p->len ? ju_hex(p->src + j, n) : -1;

			if (v < 0 || v > 0x10ffff) {
				jb_free(&b);
				jp_fail(p, j - 2, "invalid \\%c escape in string literal", c);
			}
			if (v >= 0xd800 && v < 0xe000)
				v = 0xfffd;
			jb_put(&b, enc, ju_encode(v, enc));
			j += n;
			break;
		}
		default:
			if (c >= '0' && c <= '7') {
				int32_t v = c - '0';
				int k;

				for (k = 0; k < 2 && j < p->len && p->src[j] >= '0' && p->src[j] <= '7'; k++)
					v = v * 8 + (p->src[j++] - '0');
				jb_put(&b, enc, ju_encode(v, enc));
			} else {
				jb_putc(&b, '\\');
				jb_putc(&b, c);
			}
		}
	}
	if (b.failed) {
		jb_free(&b);
		jp_fail(p, i, "out of memory");
	}
	t = emit(p, T_STRING, i);
	t->val = jv_str(p->a, b.p ? b.p : "", b.len);
	jb_free(&b);
	return j + 1;
}

static bool isdig(char c)
{
	return c >= '0' && c <= '9';
}

/* Digits with single underscores between them ("1_000"); returns the end. */
static size_t digits(const struct jparser *p, size_t j)
{
	while (j < p->len && isdig(p->src[j])) {
		j++;
		if (j + 1 < p->len && p->src[j] == '_' && isdig(p->src[j + 1]))
			j++;
	}
	return j;
}

static size_t lex_number(struct jparser *p, size_t i)
{
	size_t j = digits(p, i), k;
	bool is_float = false;
	char buf[128];
	size_t n = 0, m;
	struct jtok *t;

	/* 0x / 0o / 0b literals */
	if (p->src[i] == '0' && j == i + 1 && j < p->len && strchr("xXoObB", p->src[j]) &&
	    p->src[j] != '\0') {
		int base = strchr("xX", p->src[j]) ? 16 : strchr("oO", p->src[j]) ? 8 : 2;
		uint64_t v = 0;
		bool any = false;

		for (k = j + 1; k < p->len; k++) {
			int d;

			if (p->src[k] == '_')
				continue;
			d = ju_hex(p->src + k, 1);
			if (d < 0 || d >= base)
				break;
			if (v > (UINT64_MAX >> 4) || v * (uint64_t)base + (uint64_t)d > INT64_MAX)
				jp_fail(p, i, "integer literal too large");
			v = v * (uint64_t)base + (uint64_t)d;
			any = true;
		}
		if (any) {
			emit(p, T_INT, i)->val = jv_int(p->a, (int64_t)v);
			return k;
		}
	}
	if (j + 1 < p->len && p->src[j] == '.' && isdig(p->src[j + 1])) {
		is_float = true;
		j = digits(p, j + 1);
	}
	if (j < p->len && (p->src[j] == 'e' || p->src[j] == 'E')) {
		k = j + 1;
		if (k < p->len && (p->src[k] == '+' || p->src[k] == '-'))
			k++;
		if (k < p->len && isdig(p->src[k])) {
			is_float = true;
			j = digits(p, k);
		}
	}
	for (m = i; m < j; m++)
		if (p->src[m] != '_' && n < sizeof(buf) - 1)
			buf[n++] = p->src[m];
	buf[n] = '\0';
	if (n >= sizeof(buf) - 1)
		jp_fail(p, i, "number literal too long");
	if (is_float) {
		t = emit(p, T_FLOAT, i);
		t->val = jv_float(p->a, strtod(buf, NULL));
	} else {
		long long v;
		char *end;

		errno = 0;
		v = strtoll(buf, &end, 10);
		t = emit(p, T_INT, i);
		if (errno || *end) {
			size_t z = 0;

			while (buf[z] == '0' && buf[z + 1])
				z++;
			t->val = jv_str(p->a, buf + z, n - z);
			t->val->kind = JK_BIGINT;
		} else {
			t->val = jv_int(p->a, v);
		}
	}
	return j;
}

static const char *const ops2[] = { "//", "**", "==", "!=", ">=", "<=" };
static const char ops1[] = "+-*/%~[](){}><=.:|,;";

/* Tokens inside {{ }} or {% %}; returns the position after the closing tag. */
static size_t lex_tag(struct jparser *p, size_t open, size_t i, bool block)
{
	char stack[PARSE_MAX_DEPTH];
	int depth = 0;

	for (;;) {
		char c;
		size_t k;

		if (i >= p->len)
			jp_fail(p, open, "unexpected end of template, expected '%s'",
			      block ? "%}" : "}}");
		if (!depth) {
			if (block && (at(p, i, "-%}") || at(p, i, "+%}"))) {
				emit(p, T_BLOCK_END, i);
				return block_suffix(p, i + 3, p->src[i]);
			}
			if (block && at(p, i, "%}")) {
				emit(p, T_BLOCK_END, i);
				return block_suffix(p, i + 2, 0);
			}
			if (!block && at(p, i, "-}}")) {
				emit(p, T_VAR_END, i);
				return i + 3 + ws_run(p->src, p->len, i + 3);
			}
			if (!block && at(p, i, "}}")) {
				emit(p, T_VAR_END, i);
				return i + 2;
			}
		}
		k = ws_run(p->src, p->len, i);
		if (k) {
			i += k;
			continue;
		}
		c = p->src[i];
		if (isdig(c)) {
			i = lex_number(p, i);
			continue;
		}
		if (c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
			size_t j = i + 1;
			struct jtok *t;

			while (j < p->len && (p->src[j] == '_' || isdig(p->src[j]) ||
					      (p->src[j] >= 'a' && p->src[j] <= 'z') ||
					      (p->src[j] >= 'A' && p->src[j] <= 'Z')))
				j++;
			t = emit(p, T_NAME, i);
			t->s = ja_strndup(p->a, p->src + i, j - i);
			i = j;
			continue;
		}
		if (c == '\'' || c == '"') {
			i = lex_string(p, i);
			continue;
		}
		for (k = 0; k < ARRAY_SIZE(ops2); k++)
			if (at(p, i, ops2[k]))
				break;
		if (k < ARRAY_SIZE(ops2)) {
			struct jtok *t = emit(p, T_OP, i);

			memcpy(t->op, ops2[k], 2);
			i += 2;
			continue;
		}
		if (c && strchr(ops1, c)) {
			struct jtok *t = emit(p, T_OP, i);

			t->op[0] = c;
			if (c == '(' || c == '[' || c == '{') {
				if (depth >= PARSE_MAX_DEPTH)
					jp_fail(p, i, "brackets nested too deeply");
				stack[depth++] = c == '(' ? ')' : c == '[' ? ']' : '}';
			} else if (c == ')' || c == ']' || c == '}') {
				if (!depth)
					jp_fail(p, i, "unexpected '%c'", c);
				if (stack[--depth] != c)
					jp_fail(p, i, "unexpected '%c', expected '%c'", c, stack[depth]);
			}
			i++;
			continue;
		}
		jp_fail(p, i, "unexpected character '%c'", c);
	}
}

void jinja_lex(struct jparser *p)
{
	size_t i = 0;

	while (i < p->len) {
		const char *hit = NULL;
		size_t j, k;
		char kind, sign = 0;

		for (j = i; j + 1 < p->len; j++) {
			if (p->src[j] == '{' && strchr("{%#", p->src[j + 1]) && p->src[j + 1]) {
				hit = p->src + j;
				break;
			}
		}
		if (!hit) {
			emit_data(p, i, p->len, 0, false);
			break;
		}
		kind = p->src[j + 1];
		k = j + 2;
		if (k < p->len && (p->src[k] == '-' || p->src[k] == '+'))
			sign = p->src[k++];
		if (kind == '%') {
			char osign, csign;
			size_t end = match_word_tag(p, j, "raw", &osign, &csign);

			if (end && csign != '+') {
				size_t r, rend = 0;

				/* "{% raw %}" keeps the newline after it (jinja2 has no block
				 * suffix there); "-%}" strips the whitespace. */
				emit_data(p, i, j, sign, true);
				if (csign == '-')
					end += ws_run(p->src, p->len, end);
				for (r = end; r + 1 < p->len; r++) {
					if (p->src[r] == '{' && p->src[r + 1] == '%' &&
					    (rend = match_word_tag(p, r, "endraw", &osign, &csign)))
						break;
				}
				if (!rend)
					jp_fail(p, j, "missing end of raw directive");
				emit_data(p, end, r, osign, true);
				i = block_suffix(p, rend, csign);
				continue;
			}
		}
		emit_data(p, i, j, sign, kind != '{');
		if (kind == '#') {
			bool closed = false;

			for (; k + 1 < p->len; k++) {
				if ((p->src[k] == '-' || p->src[k] == '+') && at(p, k + 1, "#}")) {
					k = block_suffix(p, k + 3, p->src[k]);
					closed = true;
					break;
				}
				if (at(p, k, "#}")) {
					k = block_suffix(p, k + 2, 0);
					closed = true;
					break;
				}
			}
			if (!closed)
				jp_fail(p, j, "missing end of comment tag");
			i = k;
			continue;
		}
		emit(p, kind == '%' ? T_BLOCK_BEGIN : T_VAR_BEGIN, j);
		i = lex_tag(p, j, k, kind == '%');
	}
	emit(p, T_EOF, p->len);
}
