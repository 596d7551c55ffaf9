/* outparse-json.c - byte buffers, UTF-8 repair, JSON string escaping and an incremental JSON
 * scanner for the output parser.
 *
 * utf8proc validates whole strings but cannot say whether a cut sequence may still become
 * valid, and cJSON neither parses incrementally nor rejects all invalid JSON (it takes "01"
 * and "1."), so these small machines are written here.
 */
#include "outparse-impl.h"

void op_buf_init(struct op_buf *b, int *failed)
{
	b->p = NULL;
	b->n = b->cap = 0;
	b->failed = failed;
}

void op_buf_add(struct op_buf *b, const void *data, size_t n)
{
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 64;
		char *np;

		while (cap < b->n + n + 1)
			cap *= 2;
		np = realloc(b->p, cap);
		if (!np) {
			*b->failed = CAPY_ENOMEM;
			return;
		}
		b->p = np;
		b->cap = cap;
	}
	if (n)
		memcpy(b->p + b->n, data, n);
	b->n += n;
	b->p[b->n] = '\0';
}

void op_buf_release(struct op_buf *b)
{
	free(b->p);
	b->p = NULL;
	b->n = b->cap = 0;
}

bool op_is_ws(int c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* --- UTF-8 ------------------------------------------------------------------------------ */

static const char FFFD[] = "\xEF\xBF\xBD";

/* Length of the sequence a lead byte starts; 0 if it cannot start one (C0, C1 and F5..FF
 * would only give overlong or out-of-range code points). */
static int u8_need(uint8_t c)
{
	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
		return 2;
	if (c >= 0xE0 && c <= 0xEF)
		return 3;
	if (c >= 0xF0 && c <= 0xF4)
		return 4;
	return 0;
}

/* May c be byte number pos (1..3) of a sequence led by lead? The second byte's range rules
 * out overlong forms (E0, F0), surrogates (ED) and code points over U+10FFFF (F4). */
static bool u8_cont_ok(uint8_t lead, int pos, uint8_t c)
{
	if (pos == 1) {
		switch (lead) {
		case 0xE0: return c >= 0xA0 && c <= 0xBF;
		case 0xED: return c >= 0x80 && c <= 0x9F;
		case 0xF0: return c >= 0x90 && c <= 0xBF;
		case 0xF4: return c >= 0x80 && c <= 0x8F;
		}
	}
	return (c & 0xC0) == 0x80;
}

static void put_ascii(struct op_buf *out, uint8_t c, bool json)
{
	static const char hex[] = "0123456789abcdef";
	char esc[7];

	if (!json || (c >= 0x20 && c != '"' && c != '\\')) {
		op_buf_addc(out, (char)c);
		return;
	}
	switch (c) {
	case '"': op_buf_add(out, "\\\"", 2); return;
	case '\\': op_buf_add(out, "\\\\", 2); return;
	case '\n': op_buf_add(out, "\\n", 2); return;
	case '\r': op_buf_add(out, "\\r", 2); return;
	case '\t': op_buf_add(out, "\\t", 2); return;
	case '\b': op_buf_add(out, "\\b", 2); return;
	case '\f': op_buf_add(out, "\\f", 2); return;
	}
	memcpy(esc, "\\u00", 4);
	esc[4] = hex[c >> 4];
	esc[5] = hex[c & 15];
	op_buf_add(out, esc, 6);
}

void op_u8_flush(struct op_u8 *u, struct op_buf *out, bool json, int *bad)
{
	if (u->n) {
		op_buf_add(out, FFFD, 3);
		(*bad)++;
		u->n = 0;
	}
}

void op_u8_push(struct op_u8 *u, uint8_t c, struct op_buf *out, bool json, int *bad)
{
	int need;

	if (u->n) {
		if (u8_cont_ok(u->b[0], u->n, c)) {
			u->b[u->n++] = c;
			if (u->n == u->need) {
				op_buf_add(out, u->b, u->n);
				u->n = 0;
			}
			return;
		}
		op_u8_flush(u, out, json, bad);
	}
	need = u8_need(c);
	if (need == 1) {
		put_ascii(out, c, json);
	} else if (!need) {
		op_buf_add(out, FFFD, 3);
		(*bad)++;
	} else {
		u->b[0] = c;
		u->n = 1;
		u->need = (uint8_t)need;
	}
}

void op_put_text(struct op_buf *out, const char *s, size_t n, bool json, int *bad)
{
	struct op_u8 u = { 0 };

	for (size_t i = 0; i < n; i++)
		op_u8_push(&u, (uint8_t)s[i], out, json, bad);
	op_u8_flush(&u, out, json, bad);
}

/* --- JSON scanner ----------------------------------------------------------------------- */

enum {
	JS_VALUE,     /* a value must come (whitespace first is fine) */
	JS_OBJ_FIRST, /* after '{': a key or '}' */
	JS_OBJ_KEY,   /* after ',' in an object: a key */
	JS_COLON,
	JS_OBJ_NEXT,  /* after a member: ',' or '}' */
	JS_ARR_FIRST, /* after '[': a value or ']' */
	JS_ARR_NEXT,
	JS_STRING,
	JS_ESC,
	JS_UHEX,      /* sub: hex digits seen */
	JS_NUMBER,    /* sub: enum num */
	JS_LITERAL,   /* sub: index into lit */
	JS_DONE,
	JS_ERR,
};

enum num { N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_EXP, N_EXP_SIGN, N_EXP_DIGITS };

static const char *const literals[] = { "true", "false", "null" };

void op_jscan_init(struct op_jscan *j)
{
	memset(j, 0, sizeof(*j));
	j->state = JS_VALUE;
}

static bool num_can_end(int sub)
{
	return sub == N_ZERO || sub == N_INT || sub == N_FRAC || sub == N_EXP_DIGITS;
}

static bool in_top_object(const struct op_jscan *j)
{
	return j->depth == 1 && j->stack[0] == '{';
}

/* A value ended; end is the offset just past it. */
static int value_done(struct op_jscan *j, size_t end)
{
	if (!j->depth) {
		j->state = JS_DONE;
		return 1;
	}
	if (in_top_object(j) && j->member)
		j->member(j->ud, j->key, j->key_len, j->val_start, end);
	j->state = j->stack[j->depth - 1] == '{' ? JS_OBJ_NEXT : JS_ARR_NEXT;
	return 0;
}

static int push(struct op_jscan *j, uint8_t c)
{
	if (j->depth == OP_JSON_MAX_DEPTH)
		return -1;
	j->stack[j->depth++] = c;
	j->state = c == '{' ? JS_OBJ_FIRST : JS_ARR_FIRST;
	return 0;
}

static int start_value(struct op_jscan *j, uint8_t c)
{
	if (in_top_object(j)) {
		j->val_start = j->pos;
		if (j->begin)
			j->begin(j->ud, j->key, j->key_len, j->pos, c);
	}
	switch (c) {
	case '{':
	case '[':
		return push(j, c);
	case '"':
		j->state = JS_STRING;
		j->in_key = false;
		return 0;
	case 't':
	case 'f':
	case 'n':
		j->state = JS_LITERAL;
		j->sub = c == 't' ? 0 : c == 'f' ? 1 : 2;
		j->sub = j->sub << 8 | 1; /* literal index << 8 | chars matched */
		return 0;
	}
	if (c == '-' || (c >= '0' && c <= '9')) {
		j->state = JS_NUMBER;
		j->sub = c == '-' ? N_MINUS : c == '0' ? N_ZERO : N_INT;
		return 0;
	}
	return -1;
}

/* The next number state after c, or -1 when c cannot continue the number. */
static int num_step(int sub, uint8_t c)
{
	bool digit = c >= '0' && c <= '9';

	switch (sub) {
	case N_MINUS: return c == '0' ? N_ZERO : digit ? N_INT : -1;
	case N_ZERO: return c == '.' ? N_DOT : (c == 'e' || c == 'E') ? N_EXP : -1;
	case N_INT: return digit ? N_INT : c == '.' ? N_DOT : (c == 'e' || c == 'E') ? N_EXP : -1;
	case N_DOT: return digit ? N_FRAC : -1;
	case N_FRAC: return digit ? N_FRAC : (c == 'e' || c == 'E') ? N_EXP : -1;
	case N_EXP: return (c == '+' || c == '-') ? N_EXP_SIGN : digit ? N_EXP_DIGITS : -1;
	case N_EXP_SIGN:
	case N_EXP_DIGITS: return digit ? N_EXP_DIGITS : -1;
	}
	return -1;
}

/* Remember the place after the first end bytes when the state allows a cut there. */
static void mark_safe(struct op_jscan *j, size_t end)
{
	switch (j->state) {
	case JS_STRING:
		if (j->in_key || j->high_surrogate)
			return;
		break;
	case JS_OBJ_FIRST:
	case JS_ARR_FIRST:
	case JS_OBJ_NEXT:
	case JS_ARR_NEXT:
		break;
	default:
		return;
	}
	j->safe_pos = end;
	j->safe_depth = j->depth;
	j->safe_in_string = j->state == JS_STRING;
}

static int step(struct op_jscan *j, uint8_t c)
{
	int next;

	switch (j->state) {
	case JS_VALUE:
		return op_is_ws(c) ? 0 : start_value(j, c);
	case JS_OBJ_FIRST:
	case JS_OBJ_KEY:
		if (op_is_ws(c))
			return 0;
		if (c == '"') {
			j->state = JS_STRING;
			j->in_key = true;
			if (in_top_object(j))
				j->key_len = 0;
			return 0;
		}
		if (c == '}' && j->state == JS_OBJ_FIRST) {
			j->depth--;
			return value_done(j, j->pos + 1);
		}
		return -1;
	case JS_COLON:
		if (op_is_ws(c))
			return 0;
		if (c != ':')
			return -1;
		j->state = JS_VALUE;
		return 0;
	case JS_OBJ_NEXT:
	case JS_ARR_NEXT:
		if (op_is_ws(c))
			return 0;
		if (c == ',') {
			j->state = j->state == JS_OBJ_NEXT ? JS_OBJ_KEY : JS_VALUE;
			return 0;
		}
		if (c != (j->state == JS_OBJ_NEXT ? '}' : ']'))
			return -1;
		j->depth--;
		return value_done(j, j->pos + 1);
	case JS_ARR_FIRST:
		if (op_is_ws(c))
			return 0;
		if (c == ']') {
			j->depth--;
			return value_done(j, j->pos + 1);
		}
		return start_value(j, c);
	case JS_STRING:
		/* a high surrogate escape must be followed by a low one: strict parsers (cJSON,
		 * serde_json) refuse lone surrogates, so they are not JSON here either */
		if (j->high_surrogate && c != '\\')
			return -1;
		if (c == '"') {
			if (j->in_key) {
				j->state = JS_COLON;
				return 0;
			}
			return value_done(j, j->pos + 1);
		}
		if (c < 0x20)
			return -1;
		if (c == '\\')
			j->state = JS_ESC;
		if (j->in_key && in_top_object(j)) {
			if (j->key_len < sizeof(j->key))
				j->key[j->key_len] = (char)c;
			j->key_len++;
		}
		return 0;
	case JS_ESC:
		if (j->in_key && in_top_object(j)) {
			if (j->key_len < sizeof(j->key))
				j->key[j->key_len] = (char)c;
			j->key_len++;
		}
		if (j->high_surrogate && c != 'u')
			return -1;
		if (c == 'u') {
			j->state = JS_UHEX;
			j->sub = 0;
			j->uval = 0;
			return 0;
		}
		if (!strchr("\"\\/bfnrt", c) || !c)
			return -1;
		j->state = JS_STRING;
		return 0;
	case JS_UHEX:
		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))
			return -1;
		if (j->in_key && in_top_object(j)) {
			if (j->key_len < sizeof(j->key))
				j->key[j->key_len] = (char)c;
			j->key_len++;
		}
		j->uval = j->uval << 4 | (unsigned)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
		if (++j->sub == 4) {
			bool low = j->uval >= 0xDC00 && j->uval <= 0xDFFF;

			if (low != j->high_surrogate)
				return -1;
			j->state = JS_STRING;
			j->high_surrogate = j->uval >= 0xD800 && j->uval <= 0xDBFF;
		}
		return 0;
	case JS_NUMBER:
		next = num_step(j->sub, c);
		if (next >= 0) {
			j->sub = next;
			return 0;
		}
		if (!num_can_end(j->sub))
			return -1;
		/* c is not part of the number: finish it, then c in the new state */
		if (value_done(j, j->pos) == 1)
			return op_is_ws(c) ? 1 : -1;
		mark_safe(j, j->pos);
		return step(j, c);
	case JS_LITERAL: {
		const char *lit = literals[j->sub >> 8];
		int i = j->sub & 0xff;

		if (c != (uint8_t)lit[i])
			return -1;
		j->sub++;
		if (!lit[i + 1])
			return value_done(j, j->pos + 1);
		return 0;
	}
	case JS_DONE:
		return op_is_ws(c) ? 0 : -1;
	}
	return -1;
}

int op_jscan_byte(struct op_jscan *j, uint8_t c)
{
	int r;

	if (j->state == JS_ERR)
		return -1;
	r = step(j, c);
	j->pos++;
	if (r < 0)
		j->state = JS_ERR;
	else
		mark_safe(j, j->pos);
	return r;
}

int op_jscan_end(struct op_jscan *j)
{
	if (j->state == JS_NUMBER && !j->depth && num_can_end(j->sub))
		j->state = JS_DONE;
	return j->state == JS_DONE ? 0 : -1;
}

int op_jscan_closers(const struct op_jscan *j, int min_depth, char *buf)
{
	int n = 0;

	/* the stack below safe_depth is as it was then: every pop since made a safe place */
	if (!j->safe_pos)
		return -1;
	if (j->safe_in_string)
		buf[n++] = '"';
	for (int d = j->safe_depth - 1; d >= min_depth; d--)
		buf[n++] = j->stack[d] == '{' ? '}' : ']';
	return n;
}

bool op_json_valid(const char *s, size_t n)
{
	struct op_jscan j;

	op_jscan_init(&j);
	for (size_t i = 0; i < n; i++)
		if (op_jscan_byte(&j, (uint8_t)s[i]) < 0)
			return false;
	return !op_jscan_end(&j);
}
