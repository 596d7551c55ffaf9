/* toolcall.c - the tool-call states of the output parser: Qwen XML calls, streamed, and
 * hermes JSON calls, taken whole.
 *
 * XML grammar (WS = ASCII whitespace, skipped between tags):
 *	<tool_call> WS <function=NAME> WS { <parameter=KEY> VALUE </parameter> WS }
 *	</function> WS </tool_call>
 * NAME and KEY: 1..256 bytes, no whitespace, control bytes or <>"'{}=. VALUE: any bytes; its
 * `</parameter>` is the first one followed by WS and `<parameter=`, `</function>` or
 * `</tool_call>` (vLLM's rule: values often hold code with XML in it). One leading and one
 * trailing newline of VALUE are the template's and are dropped.
 *
 * Hermes: <tool_call> WS {"name": NAME, "arguments": {...}} WS </tool_call>, any member order,
 * "parameters" accepted for "arguments" (the first of the two counts), arguments also as a
 * string holding a JSON object or null (= {}). The object is checked by the strict scanner
 * and the arguments copied verbatim. Streaming commits when the first "name" member is
 * complete and valid; from then on an arguments object streams as it is scanned, cut only
 * where the scanner says closers can end it (inside string values, after whole values), so
 * that a call breaking later is closed with exactly those closers. Arguments that came before
 * the name go out at the commit; string and null forms when they are complete.
 */
#include "outparse-impl.h"

#include <cjson/cJSON.h>

enum {
	C_OPEN,       /* after <tool_call>: WS, then <function= or { */
	C_OPEN_TAG,   /* matching <function= */
	C_FNAME,
	C_BODY,       /* between parameters */
	C_BODY_TAG,
	C_PNAME,
	C_VSTART,     /* first byte of a value: a newline there is dropped */
	C_VALUE,
	C_VTAG,       /* matching </parameter> inside a value */
	C_CLOSE_LOOK, /* after </parameter>: is it the real end? */
	C_LOOK_TAG,
	C_AFTER_FUNC, /* after </function>: WS, then </tool_call> */
	C_AF_TAG,
	C_HERMES,     /* inside the JSON object */
	C_H_AFTER,
	C_H_TAG,
};

static const char TOOL_CALL[] = "<tool_call>";
static const char *const open_tags[] = { "<function=" };
static const char *const body_tags[] = { "<parameter=", "</function>", "</tool_call>" };
static const char *const value_tags[] = { "</parameter>" };
static const char *const end_tags[] = { "</tool_call>" };
enum { B_PARAM, B_FUNC_END, B_CALL_END };

void op_call_init(struct op_call *c, int *failed)
{
	memset(c, 0, sizeof(*c));
	op_buf_init(&c->name, failed);
	op_buf_init(&c->pname, failed);
	op_buf_init(&c->vbuf, failed);
	op_buf_init(&c->look, failed);
}

void op_call_reset(struct op_call *c)
{
	struct op_buf name = c->name, pname = c->pname, vbuf = c->vbuf, look = c->look;

	memset(c, 0, sizeof(*c));
	c->name = name;
	c->pname = pname;
	c->vbuf = vbuf;
	c->look = look;
	c->name.n = c->pname.n = c->vbuf.n = c->look.n = 0;
}

void op_call_release(struct op_call *c)
{
	op_buf_release(&c->name);
	op_buf_release(&c->pname);
	op_buf_release(&c->vbuf);
	op_buf_release(&c->look);
}

static bool name_byte_ok(uint8_t c)
{
	return c > 0x20 && c != 0x7f && !strchr("<>\"'{}=", c);
}

static struct op_buf *args(struct capy_outparse *p)
{
	return op_out(p, CAPY_OUTPARSE_CALL_ARGS);
}

static void call_event(struct capy_outparse *p, enum capy_outparse_event_type type,
		       enum capy_outparse_call_status status)
{
	struct capy_outparse_event ev = { .type = type, .status = status };

	op_flush_out(p);
	op_emit(p, &ev);
}

static void call_start(struct capy_outparse *p)
{
	struct op_call *c = &p->call;

	c->tool = op_tools_find(&p->tools, c->name.p);
	c->unknown = !c->tool;
	if (c->unknown)
		p->stats.n_unknown_tool_calls++;
	c->index = p->stats.n_tool_calls;
	snprintf(c->id, sizeof(c->id), "%s%u", p->id_prefix, p->id_base + (unsigned)c->index);
	call_event(p, CAPY_OUTPARSE_CALL_START, CAPY_OUTPARSE_CALL_OK);
	p->stats.n_tool_calls++;
}

void op_call_begin(struct capy_outparse *p)
{
	op_flush_out(p);
	p->tentative = true;
	p->origin = p->mode;
	p->snap = p->stats;
	p->raw.n = 0;
	op_buf_add(&p->raw, TOOL_CALL, sizeof(TOOL_CALL) - 1);
	p->mode = OP_CALL;
	op_call_reset(&p->call);
	p->call.state = C_OPEN;
}

/* --- parameters ------------------------------------------------------------------------- */

static void param_begin(struct capy_outparse *p)
{
	struct op_call *c = &p->call;
	struct op_buf *a = args(p);

	c->in_param = true;
	c->ptypes = op_tool_param_types(c->tool, c->pname.p, c->pname.n);
	c->pstream = c->ptypes == OP_T_STRING;
	c->nl = false;
	c->vbuf.n = 0;
	if (c->pstream) {
		op_buf_adds(a, c->n_params ? ", \"" : "\"");
		op_put_text(a, c->pname.p, c->pname.n, true, &p->stats.n_invalid_utf8);
		op_buf_add(a, "\": \"", 4);
	}
}

static void value_emit(struct capy_outparse *p, uint8_t b)
{
	struct op_call *c = &p->call;

	if (c->pstream)
		op_u8_push(&c->u8, b, args(p), true, &p->stats.n_invalid_utf8);
	else
		op_buf_addc(&c->vbuf, (char)b);
}

/* A value byte; a newline is held, since the value's last one is dropped. */
static void value_text(struct capy_outparse *p, uint8_t b)
{
	struct op_call *c = &p->call;

	if (c->nl)
		value_emit(p, '\n');
	c->nl = b == '\n';
	if (!c->nl)
		value_emit(p, b);
}

static void param_end(struct capy_outparse *p)
{
	struct op_call *c = &p->call;
	struct op_buf *a = args(p);

	c->nl = false;
	if (c->pstream) {
		op_u8_flush(&c->u8, a, true, &p->stats.n_invalid_utf8);
		op_buf_addc(a, '"');
	} else {
		op_buf_adds(a, c->n_params ? ", \"" : "\"");
		op_put_text(a, c->pname.p, c->pname.n, true, &p->stats.n_invalid_utf8);
		op_buf_add(a, "\": ", 3);
		op_param_convert(c->ptypes, c->vbuf.p, c->vbuf.n, a, &p->stats.n_invalid_utf8);
	}
	c->in_param = false;
	c->n_params++;
}

static void hermes_args_close(struct capy_outparse *p);

static void args_close(struct capy_outparse *p)
{
	struct op_call *c = &p->call;

	if (c->state >= C_HERMES) {
		hermes_args_close(p);
		return;
	}
	if (c->in_param)
		param_end(p);
	if (c->args_open)
		op_buf_addc(args(p), '}');
	c->args_open = false;
}

/* --- ending a call ---------------------------------------------------------------------- */

static void end_call(struct capy_outparse *p, enum capy_outparse_call_status status)
{
	args_close(p);
	call_event(p, CAPY_OUTPARSE_CALL_END, status);
	if (status == CAPY_OUTPARSE_CALL_MALFORMED)
		p->stats.n_malformed_tool_calls++;
	else if (status == CAPY_OUTPARSE_CALL_TRUNCATED)
		p->stats.n_truncated_tool_calls++;
	if (p->tentative)
		op_resolve(p);
	op_call_reset(&p->call);
	p->mode = OP_CONTENT;
	op_chan_close(p, OP_CONTENT);
}

/* The call broke at bytes s[0..n), which are not part of it. Before it is committed, the
 * whole call is text again; after, it is closed and s is parsed as content. */
static void call_fail(struct capy_outparse *p, enum capy_outparse_call_status why, const char *s,
		      size_t n)
{
	if (p->tentative) {
		op_rollback(p, why);
		return;
	}
	end_call(p, why);
	op_refeed(p, s, n);
}

/* <function=NAME> is complete: the call is certain (unless calls are held). */
static void header_done(struct capy_outparse *p)
{
	struct op_call *c = &p->call;
	struct op_buf fixed;

	if (!c->name.n) {
		call_fail(p, CAPY_OUTPARSE_CALL_MALFORMED, NULL, 0);
		return;
	}
	op_buf_init(&fixed, &p->failed);
	op_put_text(&fixed, c->name.p, c->name.n, false, &p->stats.n_invalid_utf8);
	c->name.n = 0;
	if (fixed.p)
		op_buf_add(&c->name, fixed.p, fixed.n);
	op_buf_release(&fixed);
	if (p->failed)
		return;
	if (!(p->flags & CAPY_OUTPARSE_HOLD_CALLS))
		op_resolve(p);
	call_start(p);
	op_buf_addc(args(p), '{');
	c->args_open = true;
	c->state = C_BODY;
}

/* A structural tag between parameters (after </parameter> or at the body's top). */
static void body_tag(struct capy_outparse *p, int which)
{
	struct op_call *c = &p->call;

	switch (which) {
	case B_PARAM:
		c->pname.n = 0;
		c->state = C_PNAME;
		break;
	case B_FUNC_END:
		args_close(p);
		c->state = C_AFTER_FUNC;
		break;
	case B_CALL_END: /* </function> is missing */
		args_close(p);
		call_fail(p, CAPY_OUTPARSE_CALL_MALFORMED, NULL, 0);
		break;
	}
}

/* The `</parameter>` held was literal text of the value after all. */
static void look_fail(struct capy_outparse *p, const char *extra, size_t n)
{
	struct op_call *c = &p->call;
	struct op_buf again;

	for (const char *s = value_tags[0]; *s; s++)
		value_text(p, (uint8_t)*s);
	op_buf_init(&again, &p->failed);
	op_buf_add(&again, c->look.p, c->look.n);
	op_buf_add(&again, extra, n);
	c->look.n = 0;
	c->state = C_VALUE;
	op_refeed(p, again.p, again.n);
	op_buf_release(&again);
}

/* --- hermes ----------------------------------------------------------------------------- */

enum h_args { HA_NONE, HA_OBJECT, HA_STRING, HA_NULL, HA_BAD };

static bool is_args_key(const char *key, size_t len)
{
	return (len == 9 && !memcmp(key, "arguments", 9)) ||
	       (len == 10 && !memcmp(key, "parameters", 10));
}

/* Scanner callbacks: they only take notes; the state machine acts after the byte. */
static void hermes_begin(void *ud, const char *key, size_t key_len, size_t start, uint8_t first)
{
	struct op_call *c = &((struct capy_outparse *)ud)->call;

	if (!is_args_key(key, key_len) || c->h_args != HA_NONE)
		return;
	c->h_args_start = start;
	c->h_args = first == '{' ? HA_OBJECT : first == '"' ? HA_STRING : first == 'n' ? HA_NULL
										    : HA_BAD;
	c->h_in_args = true;
	c->vbuf.n = 0;
	op_buf_addc(&c->vbuf, (char)first);
}

static void hermes_member(void *ud, const char *key, size_t key_len, size_t start, size_t end)
{
	struct op_call *c = &((struct capy_outparse *)ud)->call;

	if (key_len == 4 && !memcmp(key, "name", 4) && !c->name_end) {
		c->name_start = start;
		c->name_end = end;
	}
	if (c->h_in_args) {
		c->h_in_args = false;
		c->h_complete = true;
		c->vbuf.n = end - start; /* a number ends at the byte after it */
	}
}

/* A JSON string value (its text) decoded; NULL if it is not a string. Caller frees. */
static char *decode_string(const char *s, size_t n)
{
	cJSON *v = cJSON_ParseWithLength(s, n);
	char *out = NULL;

	if (cJSON_IsString(v))
		out = strdup(v->valuestring);
	cJSON_Delete(v);
	return out;
}

static bool valid_name(const char *s)
{
	size_t n = strlen(s);

	if (!n || n > OP_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!name_byte_ok((uint8_t)s[i]))
			return false;
	return true;
}

/* The first "name" member is complete (the call is still tentative, so its bytes are in
 * p->raw): start the call, or give it up. */
static bool hermes_start(struct capy_outparse *p)
{
	struct op_call *c = &p->call;
	char *name = decode_string(p->raw.p + c->h_start + c->name_start,
				   c->name_end - c->name_start);

	if (!name || !valid_name(name)) {
		free(name);
		call_fail(p, CAPY_OUTPARSE_CALL_MALFORMED, NULL, 0);
		return false;
	}
	c->name.n = 0;
	op_put_text(&c->name, name, strlen(name), false, &p->stats.n_invalid_utf8);
	free(name);
	if (!(p->flags & CAPY_OUTPARSE_HOLD_CALLS))
		op_resolve(p);
	call_start(p);
	c->h_named = true;
	return true;
}

/* Arguments held as a JSON string: the object it holds, trimmed and checked, goes out. */
static bool send_string_args(struct capy_outparse *p)
{
	struct op_call *c = &p->call;
	char *text = decode_string(c->vbuf.p, c->vbuf.n);
	const char *a = text;
	size_t n = text ? strlen(text) : 0;
	bool ok;

	while (n && op_is_ws((uint8_t)a[n - 1]))
		n--;
	while (n && op_is_ws((uint8_t)a[0]))
		a++, n--;
	ok = n && a[0] == '{' && op_json_valid(a, n);
	if (ok)
		op_put_text(args(p), a, n, false, &p->stats.n_invalid_utf8);
	free(text);
	return ok;
}

/* Send what of the arguments is certain. Arguments of the wrong kind are not JSON errors:
 * the object goes on, and the call ends malformed at its close. */
static void hermes_send(struct capy_outparse *p)
{
	struct op_call *c = &p->call;
	struct op_buf *a;
	size_t upto = c->vbuf.n;

	if (!c->h_named || c->h_sent_all)
		return;
	switch (c->h_args) {
	case HA_OBJECT:
		if (!c->h_complete) {
			if (c->js.safe_pos <= c->h_args_start + c->h_sent)
				return;
			upto = c->js.safe_pos - c->h_args_start;
			c->h_close_len = op_jscan_closers(&c->js, 1, c->h_close);
		}
		a = args(p);
		for (size_t i = c->h_sent; i < upto; i++)
			op_u8_push(&c->u8, (uint8_t)c->vbuf.p[i], a, false, &p->stats.n_invalid_utf8);
		c->h_sent = upto;
		if (!c->h_complete)
			return;
		op_u8_flush(&c->u8, a, false, &p->stats.n_invalid_utf8);
		break;
	case HA_STRING:
		if (!c->h_complete)
			return;
		if (!send_string_args(p)) {
			c->h_args = HA_BAD;
			return;
		}
		break;
	case HA_NULL:
		if (!c->h_complete)
			return;
		op_buf_adds(args(p), "{}");
		break;
	default:
		return;
	}
	c->h_sent_all = true;
}

/* The call ends, well formed or not: what was sent becomes one JSON object. */
static void hermes_args_close(struct capy_outparse *p)
{
	struct op_call *c = &p->call;
	struct op_buf *a;

	if (!c->h_named || c->h_sent_all)
		return;
	a = args(p);
	if (c->h_args == HA_OBJECT && c->h_sent) {
		op_u8_flush(&c->u8, a, false, &p->stats.n_invalid_utf8);
		op_buf_add(a, c->h_close, (size_t)c->h_close_len);
	} else {
		op_buf_adds(a, "{}");
	}
	c->h_sent_all = true;
}

/* A byte of the JSON object. */
static void hermes_byte(struct capy_outparse *p, uint8_t b)
{
	struct op_call *c = &p->call;
	int m;

	if (c->h_in_args)
		op_buf_addc(&c->vbuf, (char)b);
	m = op_jscan_byte(&c->js, b);
	if (m < 0) {
		call_fail(p, CAPY_OUTPARSE_CALL_MALFORMED, (const char *)&b, 1);
		return;
	}
	if (c->name_end && !c->h_named && !hermes_start(p))
		return;
	hermes_send(p);
	if (m == 1)
		c->state = C_H_AFTER;
}

/* </tool_call> after the object. */
static void hermes_done(struct capy_outparse *p)
{
	if (!p->call.h_named || p->call.h_args == HA_BAD) {
		call_fail(p, CAPY_OUTPARSE_CALL_MALFORMED, NULL, 0);
		return;
	}
	end_call(p, CAPY_OUTPARSE_CALL_OK);
}

/* --- the state machine ------------------------------------------------------------------ */

static void start_tag(struct capy_outparse *p, uint8_t c, int state)
{
	p->tag[0] = (char)c;
	p->ntag = 1;
	p->call.state = state;
}

/* Append c to the held tag and match; on a full match the tag is consumed. */
static int tag_step(struct capy_outparse *p, uint8_t c, const char *const *tags, int n)
{
	int m;

	p->tag[p->ntag++] = (char)c;
	m = op_tag_match(p, tags, n);
	if (m >= 0)
		p->ntag = 0;
	return m;
}

static void name_byte(struct capy_outparse *p, struct op_buf *name, uint8_t c)
{
	if (name_byte_ok(c) && name->n < OP_NAME_MAX) {
		op_buf_addc(name, (char)c);
		return;
	}
	if (p->call.state == C_FNAME) {
		call_fail(p, CAPY_OUTPARSE_CALL_MALFORMED, NULL, 0);
	} else {
		/* a broken <parameter=KEY: after the commit, it goes back as text */
		struct op_buf again;

		op_buf_init(&again, &p->failed);
		op_buf_add(&again, body_tags[B_PARAM], strlen(body_tags[B_PARAM]));
		op_buf_add(&again, name->p, name->n);
		op_buf_addc(&again, (char)c);
		call_fail(p, CAPY_OUTPARSE_CALL_MALFORMED, again.p, again.n);
		op_buf_release(&again);
	}
}

void op_call_byte(struct capy_outparse *p, uint8_t b)
{
	struct op_call *c = &p->call;
	char held[sizeof(p->tag)];
	int m, n;

	switch (c->state) {
	case C_OPEN:
		if (op_is_ws(b))
			return;
		if (b == '<') {
			start_tag(p, b, C_OPEN_TAG);
		} else if (b == '{') {
			op_jscan_init(&c->js);
			c->js.begin = hermes_begin;
			c->js.member = hermes_member;
			c->js.ud = p;
			c->h_start = p->raw.n - 1;
			c->state = C_HERMES;
			hermes_byte(p, b);
		} else {
			call_fail(p, CAPY_OUTPARSE_CALL_MALFORMED, NULL, 0);
		}
		return;
	case C_OPEN_TAG:
		m = tag_step(p, b, open_tags, 1);
		if (m >= 0)
			c->state = C_FNAME;
		else if (m == -2)
			call_fail(p, CAPY_OUTPARSE_CALL_MALFORMED, NULL, 0);
		return;
	case C_FNAME:
		if (b == '>')
			header_done(p);
		else
			name_byte(p, &c->name, b);
		return;
	case C_BODY:
	case C_AFTER_FUNC:
		if (op_is_ws(b))
			return;
		if (b == '<')
			start_tag(p, b, c->state == C_BODY ? C_BODY_TAG : C_AF_TAG);
		else
			call_fail(p, CAPY_OUTPARSE_CALL_MALFORMED, (const char *)&b, 1);
		return;
	case C_BODY_TAG:
	case C_LOOK_TAG:
		m = tag_step(p, b, body_tags, 3);
		if (m == -1)
			return;
		if (m >= 0) {
			if (c->state == C_LOOK_TAG) {
				c->look.n = 0;
				param_end(p);
			}
			body_tag(p, m);
			return;
		}
		n = p->ntag;
		memcpy(held, p->tag, (size_t)n);
		p->ntag = 0;
		if (c->state == C_LOOK_TAG)
			look_fail(p, held, (size_t)n);
		else
			call_fail(p, CAPY_OUTPARSE_CALL_MALFORMED, held, (size_t)n);
		return;
	case C_PNAME:
		if (b == '>') {
			param_begin(p);
			c->state = C_VSTART;
		} else {
			name_byte(p, &c->pname, b);
		}
		return;
	case C_VSTART:
		c->state = C_VALUE;
		if (b == '\n')
			return;
		/* fall through */
	case C_VALUE:
		if (b == '<')
			start_tag(p, b, C_VTAG);
		else
			value_text(p, b);
		return;
	case C_VTAG:
		m = tag_step(p, b, value_tags, 1);
		if (m >= 0) {
			c->look.n = 0;
			c->state = C_CLOSE_LOOK;
		} else if (m == -2) {
			/* literal text; the last byte may start a tag again */
			n = p->ntag;
			p->ntag = 0;
			c->state = C_VALUE;
			for (int i = 0; i < n - 1; i++)
				value_text(p, (uint8_t)p->tag[i]);
			op_call_byte(p, b);
		}
		return;
	case C_CLOSE_LOOK:
		if (op_is_ws(b))
			op_buf_addc(&c->look, (char)b);
		else if (b == '<')
			start_tag(p, b, C_LOOK_TAG);
		else
			look_fail(p, (const char *)&b, 1);
		return;
	case C_AF_TAG:
	case C_H_TAG:
		m = tag_step(p, b, end_tags, 1);
		if (m >= 0 && c->state == C_H_TAG) {
			hermes_done(p);
		} else if (m >= 0) {
			end_call(p, CAPY_OUTPARSE_CALL_OK);
		} else if (m == -2) {
			n = p->ntag;
			memcpy(held, p->tag, (size_t)n);
			p->ntag = 0;
			call_fail(p, CAPY_OUTPARSE_CALL_MALFORMED, held, (size_t)n);
		}
		return;
	case C_HERMES:
		hermes_byte(p, b);
		return;
	case C_H_AFTER:
		if (op_is_ws(b))
			return;
		if (b == '<')
			start_tag(p, b, C_H_TAG);
		else
			call_fail(p, CAPY_OUTPARSE_CALL_MALFORMED, (const char *)&b, 1);
		return;
	}
	CAPY_BUG("tool call state %d", c->state);
}

/* The output ended inside a call. A committed one keeps what it has: a value cut short ends
 * where the output does (a partial `</parameter>` is its text), a complete one waiting for
 * its lookahead is closed, a partial parameter name is dropped. */
void op_call_finish(struct capy_outparse *p)
{
	struct op_call *c = &p->call;
	int n = p->ntag;

	p->ntag = 0;
	if (p->tentative) {
		op_rollback(p, CAPY_OUTPARSE_CALL_TRUNCATED);
		return;
	}
	if (c->state == C_VTAG)
		for (int i = 0; i < n; i++)
			value_text(p, (uint8_t)p->tag[i]);
	end_call(p, CAPY_OUTPARSE_CALL_TRUNCATED);
}
