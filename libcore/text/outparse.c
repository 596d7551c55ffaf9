/* outparse.c - the output parser's driver: the API, the byte loop, events, the tentative
 * region of a tool call, and collecting events into a result (see outparse-impl.h).
 *
 * Decisions taken where the reference parsers differ or say nothing:
 * - vLLM also ends reasoning at `<tool_call>`; here that happens only once the call is
 *   certain, so a `<tool_call>` mentioned in prose inside reasoning stays reasoning.
 * - A call to a function not in tools is reported (vLLM does) with `unknown` set, so the
 *   server can decide; its arguments have no schema and are typed by JSON decoding.
 * - Streaming commits at `<function=NAME>` so that long string arguments (file contents)
 *   stream; a call that breaks later cannot be taken back, so it is closed with valid JSON
 *   and flagged. CAPY_OUTPARSE_HOLD_CALLS gives all-or-nothing calls instead.
 * - Decoded argument values are copied verbatim rather than re-printed (cJSON would round
 *   numbers through double); string values are escaped with non-ASCII kept as is, like
 *   Python's json.dumps(ensure_ascii=False) that vLLM uses.
 */
#include "outparse-impl.h"

#define TOOL_CALL_LEN 11 /* strlen("<tool_call>") */

/* Bytes parsed again after rollbacks are bounded by this many times the input (plus a
 * little), so output made of many unclosed `<tool_call>`s cannot take quadratic time. Past
 * it, a rolled-back region is text as it stands. The count depends only on the bytes, so
 * the chunking still does not matter. */
#define REPARSE_FACTOR 8
#define REPARSE_SLACK 65536

int op_tag_match(const struct capy_outparse *p, const char *const *tags, int n)
{
	bool prefix = false;

	for (int i = 0; i < n; i++) {
		size_t len = strlen(tags[i]);

		if (!len || (size_t)p->ntag > len || memcmp(tags[i], p->tag, (size_t)p->ntag))
			continue;
		if ((size_t)p->ntag == len)
			return i;
		prefix = true;
	}
	return prefix ? -1 : -2;
}

/* --- events ----------------------------------------------------------------------------- */

static void deliver(struct capy_outparse *p, struct capy_outparse_event *ev)
{
	int rc;

	if (p->failed)
		return;
	if (ev->type >= CAPY_OUTPARSE_CALL_START) {
		ev->index = p->call.index;
		ev->id = p->call.id;
		ev->name = p->call.name.p ? p->call.name.p : "";
		ev->unknown = p->call.unknown;
	}
	rc = p->cb ? p->cb(p->ud, ev) : 0;
	if (rc < 0)
		p->failed = rc;
}

/* Send an event, or queue it while the call it belongs to is tentative. */
void op_emit(struct capy_outparse *p, struct capy_outparse_event *ev)
{
	struct op_qev *q;

	if (!p->tentative) {
		deliver(p, ev);
		return;
	}
	if (p->nq == p->capq) {
		size_t cap = p->capq ? p->capq * 2 : 8;
		struct op_qev *nq = realloc(p->queue, cap * sizeof(*nq));

		if (!nq) {
			p->failed = CAPY_ENOMEM;
			return;
		}
		p->queue = nq;
		p->capq = cap;
	}
	q = &p->queue[p->nq++];
	q->type = ev->type;
	q->status = ev->status;
	op_buf_init(&q->text, &p->failed);
	if (ev->len)
		op_buf_add(&q->text, ev->text, ev->len);
}

void op_flush_out(struct capy_outparse *p)
{
	struct capy_outparse_event ev = { .type = p->out_type };

	if (!p->out.n)
		return;
	ev.text = p->out.p;
	ev.len = p->out.n;
	op_emit(p, &ev);
	p->out.n = 0;
}

/* The buffer for text of event type t, sending what another type left there. */
struct op_buf *op_out(struct capy_outparse *p, enum capy_outparse_event_type t)
{
	if (p->out.n && p->out_type != t)
		op_flush_out(p);
	p->out_type = t;
	return &p->out;
}

static void drop_queue(struct capy_outparse *p)
{
	for (size_t i = 0; i < p->nq; i++)
		op_buf_release(&p->queue[i].text);
	p->nq = 0;
}

/* --- the tentative region of a tool call ------------------------------------------------ */

/* The call is certain: what preceded `<tool_call>` is over, and queued events go out. */
void op_resolve(struct capy_outparse *p)
{
	op_chan_close(p, p->origin);
	if (p->origin == OP_REASONING)
		p->stats.reasoning = CAPY_OUTPARSE_REASONING_BY_TOOL_CALL;
	p->tentative = false;
	p->raw.n = 0;
	for (size_t i = 0; i < p->nq; i++) {
		struct capy_outparse_event ev = {
			.type = p->queue[i].type,
			.status = p->queue[i].status,
			.text = p->queue[i].text.p,
			.len = p->queue[i].text.n,
		};

		deliver(p, &ev);
	}
	drop_queue(p);
}

/* The `<tool_call>` was not a call: it is text of the mode it appeared in, and the bytes
 * after it are parsed again. */
void op_rollback(struct capy_outparse *p, enum capy_outparse_call_status why)
{
	struct op_buf again;

	p->stats = p->snap;
	if (why == CAPY_OUTPARSE_CALL_TRUNCATED)
		p->stats.n_truncated_tool_calls++;
	else
		p->stats.n_malformed_tool_calls++;
	drop_queue(p);
	if (p->out_type == CAPY_OUTPARSE_CALL_ARGS)
		p->out.n = 0;
	p->tentative = false;
	p->mode = p->origin;
	p->ntag = 0;
	op_call_reset(&p->call);
	for (int i = 0; i < TOOL_CALL_LEN; i++)
		op_chan_byte(p, (uint8_t)p->raw.p[i]);
	op_buf_init(&again, &p->failed);
	op_buf_add(&again, p->raw.p + TOOL_CALL_LEN, p->raw.n - TOOL_CALL_LEN);
	p->raw.n = 0;
	if (p->n_reparsed > REPARSE_FACTOR * p->n_input + REPARSE_SLACK) {
		/* enough: the rest of a region is plain text, not parsed again */
		for (size_t i = 0; i < again.n; i++)
			op_chan_byte(p, (uint8_t)again.p[i]);
	} else {
		p->n_reparsed += again.n;
		op_refeed(p, again.p, again.n);
	}
	op_buf_release(&again);
}

/* --- the byte loop ---------------------------------------------------------------------- */

/* Parse s[0..n) again before anything not yet parsed. Inside a tentative region the bytes
 * are the last ones recorded (a literal `</parameter>` and what followed it): they are
 * taken off the record, which they will join again. */
void op_refeed(struct capy_outparse *p, const char *s, size_t n)
{
	struct op_buf nb;

	if (!n || p->failed)
		return;
	if (p->tentative) {
		if (p->raw.n < n || memcmp(p->raw.p + p->raw.n - n, s, n))
			CAPY_BUG("refeed of bytes that are not the last recorded");
		p->raw.n -= n;
	}
	if (p->refeed_pos == p->refeed.n) {
		p->refeed.n = p->refeed_pos = 0;
		op_buf_add(&p->refeed, s, n);
		return;
	}
	if (p->refeed_pos >= n) {
		/* room where parsed bytes were: no copy of the rest */
		p->refeed_pos -= n;
		memcpy(p->refeed.p + p->refeed_pos, s, n);
		return;
	}
	op_buf_init(&nb, &p->failed);
	op_buf_add(&nb, s, n);
	op_buf_add(&nb, p->refeed.p + p->refeed_pos, p->refeed.n - p->refeed_pos);
	if (p->failed) {
		op_buf_release(&nb);
		return;
	}
	op_buf_release(&p->refeed);
	p->refeed = nb;
	p->refeed_pos = 0;
}

static void process(struct capy_outparse *p, uint8_t c)
{
	if (p->tentative)
		op_buf_addc(&p->raw, (char)c);
	if (p->mode == OP_CALL)
		op_call_byte(p, c);
	else
		op_text_byte(p, c);
}

static void drain(struct capy_outparse *p)
{
	while (!p->failed && p->refeed_pos < p->refeed.n)
		process(p, (uint8_t)p->refeed.p[p->refeed_pos++]);
	p->refeed.n = p->refeed_pos = 0;
}

static int check(struct capy_outparse *p, struct capy_err *err)
{
	if (!p->failed)
		return 0;
	if (p->failed == CAPY_ENOMEM)
		return capy_err_set(err, CAPY_ENOMEM, "output parser: out of memory");
	return capy_err_set(err, p->failed, "output parser: event callback failed (%s)",
			    capy_err_name(p->failed));
}

/* A parser that failed stays failed; one that finished takes nothing more. */
static int start(struct capy_outparse *p, capy_outparse_cb cb, void *ud, struct capy_err *err)
{
	if (p->failed)
		return check(p, err);
	if (p->finished)
		return capy_err_set(err, CAPY_EINVAL, "output parser: used after finish");
	p->cb = cb;
	p->ud = ud;
	return 0;
}

int capy_outparse_feed(struct capy_outparse *p, const char *chunk, size_t len,
		       capy_outparse_cb cb, void *ud, struct capy_err *err)
{
	int rc = start(p, cb, ud, err);

	if (rc < 0)
		return rc;
	for (size_t i = 0; i < len && !p->failed; i++) {
		p->n_input++;
		process(p, (uint8_t)chunk[i]);
		drain(p);
	}
	op_flush_out(p);
	return check(p, err);
}

int capy_outparse_finish(struct capy_outparse *p, capy_outparse_cb cb, void *ud,
			 struct capy_err *err)
{
	int rc = start(p, cb, ud, err);

	if (rc < 0)
		return rc;
	/* a call cut short may give bytes back to parse, which may open another call */
	while (!p->failed && p->mode == OP_CALL) {
		op_call_finish(p);
		drain(p);
	}
	if (!p->failed)
		op_text_finish(p);
	op_flush_out(p);
	p->finished = true;
	return check(p, err);
}

/* --- life cycle ------------------------------------------------------------------------- */

int capy_outparse_new(struct capy_outparse **out, const struct capy_outparse_opts *opts,
		      struct capy_err *err)
{
	static const struct capy_outparse_opts none = { 0 };
	const char *prefix;
	struct capy_outparse *p;
	int rc;

	*out = NULL;
	if (!opts)
		opts = &none;
	prefix = opts->id_prefix ? opts->id_prefix : "call_";
	if (strlen(prefix) >= sizeof(p->id_prefix))
		return capy_err_set(err, CAPY_EINVAL, "output parser: id prefix longer than %zu bytes",
				    sizeof(p->id_prefix) - 1);
	p = calloc(1, sizeof(*p));
	if (!p)
		return capy_err_set(err, CAPY_ENOMEM, "output parser: out of memory");
	rc = op_tools_parse(&p->tools, opts->tools_json,
			    opts->tools_json && !opts->tools_len ? strlen(opts->tools_json) : opts->tools_len,
			    err);
	if (rc < 0) {
		free(p);
		return rc;
	}
	p->flags = opts->flags;
	memcpy(p->id_prefix, prefix, strlen(prefix) + 1);
	p->id_base = opts->id_base;
	p->mode = opts->flags & CAPY_OUTPARSE_THINK_OPEN ? OP_REASONING : OP_CONTENT;
	p->at_output_start = true;
	for (int i = 0; i < 2; i++) {
		op_buf_init(&p->chan[i].ws, &p->failed);
		p->chan[i].at_start = true;
	}
	if (opts->flags & CAPY_OUTPARSE_CONTINUE) /* the text so far is the prompt's */
		p->chan[p->mode == OP_REASONING ? 0 : 1].at_start = false;
	op_buf_init(&p->out, &p->failed);
	op_buf_init(&p->raw, &p->failed);
	op_buf_init(&p->refeed, &p->failed);
	op_call_init(&p->call, &p->failed);
	*out = p;
	return 0;
}

const struct capy_outparse_stats *capy_outparse_stats(const struct capy_outparse *p)
{
	return &p->stats;
}

void capy_outparse_free(struct capy_outparse *p)
{
	if (!p)
		return;
	op_tools_release(&p->tools);
	for (int i = 0; i < 2; i++)
		op_buf_release(&p->chan[i].ws);
	op_buf_release(&p->out);
	op_buf_release(&p->raw);
	op_buf_release(&p->refeed);
	op_call_release(&p->call);
	drop_queue(p);
	free(p->queue);
	free(p);
}

/* --- collecting a whole response -------------------------------------------------------- */

static int append(char **s, size_t *len, const char *t, size_t n)
{
	char *ns = realloc(*s, *len + n + 1);

	if (!ns)
		return CAPY_ENOMEM;
	memcpy(ns + *len, t, n);
	*len += n;
	ns[*len] = '\0';
	*s = ns;
	return 0;
}

int capy_outparse_collect(void *ud, const struct capy_outparse_event *ev)
{
	struct capy_outparse_result *r = ud;
	struct capy_outparse_call *c;

	switch (ev->type) {
	case CAPY_OUTPARSE_REASONING:
		return append(&r->reasoning, &r->reasoning_len, ev->text, ev->len);
	case CAPY_OUTPARSE_CONTENT:
		return append(&r->content, &r->content_len, ev->text, ev->len);
	case CAPY_OUTPARSE_CALL_START:
		c = realloc(r->calls, (r->n_calls + 1) * sizeof(*c));
		if (!c)
			return CAPY_ENOMEM;
		r->calls = c;
		c = &r->calls[r->n_calls++];
		memset(c, 0, sizeof(*c));
		c->id = strdup(ev->id);
		c->name = strdup(ev->name);
		c->unknown = ev->unknown;
		if (!c->id || !c->name)
			return CAPY_ENOMEM;
		return append(&c->arguments, &c->arguments_len, "", 0);
	case CAPY_OUTPARSE_CALL_ARGS:
		if (!r->n_calls)
			return CAPY_EINVAL;
		c = &r->calls[r->n_calls - 1];
		return append(&c->arguments, &c->arguments_len, ev->text, ev->len);
	case CAPY_OUTPARSE_CALL_END:
		if (!r->n_calls)
			return CAPY_EINVAL;
		r->calls[r->n_calls - 1].status = ev->status;
		return 0;
	}
	return CAPY_EINVAL;
}

void capy_outparse_result_release(struct capy_outparse_result *res)
{
	free(res->reasoning);
	free(res->content);
	for (size_t i = 0; i < res->n_calls; i++) {
		free(res->calls[i].id);
		free(res->calls[i].name);
		free(res->calls[i].arguments);
	}
	free(res->calls);
	memset(res, 0, sizeof(*res));
}

int capy_outparse_parse(const char *text, size_t len, const struct capy_outparse_opts *opts,
			struct capy_outparse_result *res, struct capy_err *err)
{
	struct capy_outparse *p;
	int rc;

	memset(res, 0, sizeof(*res));
	rc = capy_outparse_new(&p, opts, err);
	if (rc < 0)
		return rc;
	rc = capy_outparse_feed(p, text, len, capy_outparse_collect, res, err);
	if (!rc)
		rc = capy_outparse_finish(p, capy_outparse_collect, res, err);
	res->stats = p->stats;
	capy_outparse_free(p);
	if (rc < 0)
		capy_outparse_result_release(res);
	return rc;
}
