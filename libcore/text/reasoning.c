/* reasoning.c - the text modes of the output parser: reasoning and content, the tags that
 * switch between them (`<think>`, `</think>`, `<tool_call>`), and whitespace trimming.
 *
 * Trimming: the chat template writes newlines around the structure (`<think>\n`,
 * `\n</think>\n\n`, `\n\n<tool_call>`), and renders history with reasoning and content
 * trimmed, so whitespace that touches the start, the end or a tag is dropped: a run of it is
 * held until something else follows. Inner whitespace is kept as generated.
 */
#include "outparse-impl.h"

enum { T_THINK, T_THINK_END, T_TOOL_CALL, T_N };

static const char *const text_tags[T_N] = { "<think>", "</think>", "<tool_call>" };

/* Which tags the current mode knows; an inactive tag is replaced by "" (matches nothing). */
static void active_tags(const struct capy_outparse *p, const char *tags[T_N])
{
	tags[T_THINK] = p->at_output_start ? text_tags[T_THINK] : "";
	tags[T_THINK_END] = p->mode == OP_REASONING ? text_tags[T_THINK_END] : "";
	tags[T_TOOL_CALL] = p->flags & CAPY_OUTPARSE_NO_TOOL_CALLS ? "" : text_tags[T_TOOL_CALL];
}

static struct op_chan *cur_chan(struct capy_outparse *p)
{
	return &p->chan[p->mode == OP_REASONING ? 0 : 1];
}

static enum capy_outparse_event_type cur_type(const struct capy_outparse *p)
{
	return p->mode == OP_REASONING ? CAPY_OUTPARSE_REASONING : CAPY_OUTPARSE_CONTENT;
}

/* A byte of text in the current mode (which is not OP_CALL). */
void op_chan_byte(struct capy_outparse *p, uint8_t c)
{
	struct op_chan *ch = cur_chan(p);
	struct op_buf *out;

	if (op_is_ws(c)) {
		/* an unfinished sequence before it is invalid now: resolve it first */
		if (ch->u8.n)
			op_u8_flush(&ch->u8, op_out(p, cur_type(p)), false, &p->stats.n_invalid_utf8);
		if (!ch->at_start)
			op_buf_addc(&ch->ws, (char)c);
		return;
	}
	out = op_out(p, cur_type(p));
	if (ch->ws.n) {
		op_buf_add(out, ch->ws.p, ch->ws.n);
		ch->ws.n = 0;
	}
	ch->at_start = false;
	op_u8_push(&ch->u8, c, out, false, &p->stats.n_invalid_utf8);
}

/* A boundary: drop held whitespace; the next text starts a new run. */
void op_chan_close(struct capy_outparse *p, enum op_mode m)
{
	struct op_chan *ch = &p->chan[m == OP_REASONING ? 0 : 1];

	if (ch->u8.n)
		op_u8_flush(&ch->u8,
			    op_out(p, m == OP_REASONING ? CAPY_OUTPARSE_REASONING : CAPY_OUTPARSE_CONTENT),
			    false, &p->stats.n_invalid_utf8);
	ch->ws.n = 0;
	ch->at_start = true;
}

static void on_tag(struct capy_outparse *p, int tag)
{
	p->at_output_start = false;
	switch (tag) {
	case T_THINK:
		p->mode = OP_REASONING;
		break;
	case T_THINK_END:
		op_chan_close(p, OP_REASONING);
		p->stats.reasoning = CAPY_OUTPARSE_REASONING_CLOSED;
		p->mode = OP_CONTENT;
		break;
	case T_TOOL_CALL:
		op_call_begin(p);
		break;
	}
}

void op_text_byte(struct capy_outparse *p, uint8_t c)
{
	const char *tags[T_N];
	int m, n;

	active_tags(p, tags);
	if (p->ntag) {
		p->tag[p->ntag++] = (char)c;
		m = op_tag_match(p, tags, T_N);
		if (m >= 0) {
			p->ntag = 0;
			on_tag(p, m);
			return;
		}
		if (m == -1)
			return;
		/* not a tag: what was held is text, and c is looked at afresh */
		n = p->ntag - 1;
		p->ntag = 0;
		p->at_output_start = false;
		for (int i = 0; i < n; i++)
			op_chan_byte(p, (uint8_t)p->tag[i]);
		op_text_byte(p, c);
		return;
	}
	if (c == '<' && (tags[T_THINK][0] || tags[T_THINK_END][0] || tags[T_TOOL_CALL][0])) {
		struct op_chan *ch = cur_chan(p);

		if (ch->u8.n)
			op_u8_flush(&ch->u8, op_out(p, cur_type(p)), false, &p->stats.n_invalid_utf8);
		p->tag[0] = '<';
		p->ntag = 1;
		return;
	}
	if (!op_is_ws(c))
		p->at_output_start = false;
	op_chan_byte(p, c);
}

/* End of output in a text mode: a partial tag is text; trailing whitespace goes. */
void op_text_finish(struct capy_outparse *p)
{
	int n = p->ntag;

	p->ntag = 0;
	for (int i = 0; i < n; i++)
		op_chan_byte(p, (uint8_t)p->tag[i]);
	op_chan_close(p, p->mode);
	if (p->mode == OP_REASONING)
		p->stats.reasoning = CAPY_OUTPARSE_REASONING_UNTERMINATED;
}
