/* outparse-impl.h - internals of the output parser, shared by outparse*.c, reasoning.c and
 * toolcall*.c. Not a public header.
 *
 * DESIGN. Every byte goes through op_process(), one at a time, to the state machine of the
 * current mode: text (reasoning or content, reasoning.c) or a tool call (toolcall.c). Bytes
 * that might start a tag are held in p->tag until they match or cannot. When a state finds
 * that held bytes were not what it hoped, it pushes them back with op_refeed() to be parsed
 * again in the new state; every such step consumes something, so parsing always moves on.
 *
 * A `<tool_call>` opens a tentative region: its raw bytes are recorded, its events queued, and
 * the stats saved. It is committed (the recording dropped, queued events sent) at the call's
 * header when streaming, or at its end with CAPY_OUTPARSE_HOLD_CALLS; if it fails before, it
 * is rolled back: stats restored, `<tool_call>` written as text of the mode it came from, and
 * the recorded bytes after it parsed again. Decisions depend only on bytes, never on where a
 * chunk ended, which is what makes any chunking give the same result.
 *
 * Text leaves through p->out, one pending delta of one event type, sent at the end of each
 * feed and before any other event.
 */
#ifndef CAPY_TEXT_OUTPARSE_IMPL_H
#define CAPY_TEXT_OUTPARSE_IMPL_H

#include "outparse.h"

/* A growable byte buffer. An allocation failure leaves it unchanged and stores CAPY_ENOMEM
 * in *failed (which must be set), so state machines need not check every append. */
struct op_buf {
	char *p;
	size_t n, cap;
	int *failed;
};

void op_buf_init(struct op_buf *b, int *failed);
void op_buf_add(struct op_buf *b, const void *data, size_t n);
static inline void op_buf_addc(struct op_buf *b, char c)
{
	if (b->n + 2 <= b->cap) {
		b->p[b->n++] = c;
		b->p[b->n] = '\0';
	} else {
		op_buf_add(b, &c, 1);
	}
}
static inline void op_buf_adds(struct op_buf *b, const char *s)
{
	op_buf_add(b, s, strlen(s));
}
void op_buf_release(struct op_buf *b);

/* UTF-8 repair: bytes in, valid UTF-8 out. A sequence is held until complete; a byte that
 * cannot continue or start one becomes U+FFFD (one per maximal invalid subpart, as Unicode
 * recommends). json: also escape for the inside of a JSON string. *bad counts U+FFFDs. */
struct op_u8 {
	uint8_t b[4];
	uint8_t n, need;
};

void op_u8_push(struct op_u8 *u, uint8_t c, struct op_buf *out, bool json, int *bad);
void op_u8_flush(struct op_u8 *u, struct op_buf *out, bool json, int *bad);
/* A whole string through a fresh op_u8. */
void op_put_text(struct op_buf *out, const char *s, size_t n, bool json, int *bad);

/* An incremental, strict (RFC 8259) JSON scanner. It reports where each member value of a
 * top-level object begins and ends (offsets of the bytes fed), and says where the bytes fed so
 * far could be cut and closed, which is how a hermes call's arguments stream verbatim. */
#define OP_JSON_MAX_DEPTH 128

struct op_jscan {
	size_t pos; /* bytes fed */
	int state, sub;
	bool in_key;
	bool high_surrogate; /* the last thing in the string is a \uD800-\uDBFF escape, which a
			      * low surrogate escape must follow (lone ones are refused) */
	/* the last place the bytes fed could be cut and closed (see op_jscan_closers) */
	size_t safe_pos;     /* bytes fed up to it; 0: none yet */
	int safe_depth;
	bool safe_in_string;
	unsigned uval;       /* value of the \u escape being read */
	int depth;
	uint8_t stack[OP_JSON_MAX_DEPTH];
	char key[32];    /* raw bytes of the current top-level key (truncated) */
	size_t key_len;  /* full length, may exceed sizeof(key) */
	size_t val_start;
	/* a top-level member's value begins with byte first at offset start */
	void (*begin)(void *ud, const char *key, size_t key_len, size_t start, uint8_t first);
	/* a top-level member's value is complete: bytes [start, end) */
	void (*member)(void *ud, const char *key, size_t key_len, size_t start, size_t end);
	void *ud;
};

void op_jscan_init(struct op_jscan *j);
/* 1: this byte completed the top-level value; 0: go on; -1: not JSON. After 1, only
 * whitespace is accepted. A top-level number completes only at op_jscan_end(). */
int op_jscan_byte(struct op_jscan *j, uint8_t c);
/* End of input: 0 when exactly one complete value was fed, -1 otherwise. */
int op_jscan_end(struct op_jscan *j);
/* The bytes fed up to j->safe_pos, the last place where they could be cut, become valid JSON
 * by appending closers for the containers nested deeper than min_depth. Such places are inside
 * a string value (after whole characters and escapes, not between surrogate escapes) and
 * just after `{`, `[` or a complete value; never inside a key, a number or a literal, or after
 * `,` or `:`. Writes the closers (a `"`, then `]`/`}` innermost first) to buf, which needs
 * OP_JSON_MAX_DEPTH + 2 bytes, and returns their length; -1 when there is no such place. */
int op_jscan_closers(const struct op_jscan *j, int min_depth, char *buf);
/* Is s exactly one JSON value, with optional whitespace around it? */
bool op_json_valid(const char *s, size_t n);
bool op_is_ws(int c);

/* Tool schemas, from the request's tools array. */
enum op_type {
	OP_T_STRING = 1 << 0,
	OP_T_NUMBER = 1 << 1,
	OP_T_INTEGER = 1 << 2,
	OP_T_BOOLEAN = 1 << 3,
	OP_T_OBJECT = 1 << 4,
	OP_T_ARRAY = 1 << 5,
	OP_T_NULL = 1 << 6,
};
/* The JSON types a schema allows, as the XML parameters are typed (OP_T_*): "type" (a name or
 * a list), the union of anyOf/oneOf branches, else the types of enum or const; 0 when it
 * does not say. The tool-call grammar (toolcall-grammar.c) writes values the same way. */
struct cJSON;
unsigned op_schema_types(const struct cJSON *schema);

struct op_param {
	char *name;
	unsigned types; /* enum op_type bits; 0: unknown */
};

struct op_tool {
	char *name;
	struct op_param *params;
	size_t n_params;
};

struct op_tools {
	struct op_tool *v;
	size_t n;
};

int op_tools_parse(struct op_tools *t, const char *json, size_t len, struct capy_err *err);
void op_tools_release(struct op_tools *t);
const struct op_tool *op_tools_find(const struct op_tools *t, const char *name);
unsigned op_tool_param_types(const struct op_tool *tool, const char *name, size_t len);
/* Append the JSON value for a buffered parameter value raw[0..n) of the given types. */
void op_param_convert(unsigned types, const char *raw, size_t n, struct op_buf *out, int *bad);

/* The parser. */
enum op_mode { OP_REASONING, OP_CONTENT, OP_CALL };

struct op_chan {
	bool at_start;     /* nothing written since the last boundary: drop whitespace */
	struct op_buf ws;  /* whitespace held: dropped if a boundary follows */
	struct op_u8 u8;
};

struct op_qev {
	enum capy_outparse_event_type type;
	enum capy_outparse_call_status status;
	struct op_buf text;
};

#define OP_NAME_MAX 256

struct op_call {
	int state;
	struct op_buf name;  /* function name, repaired to UTF-8 */
	int index;           /* position among this output's calls */
	char id[96];
	const struct op_tool *tool;
	bool unknown;
	bool args_open;      /* "{" sent, "}" not yet */
	int n_params;
	/* the current parameter */
	bool in_param;
	struct op_buf pname;
	unsigned ptypes;
	bool pstream;        /* string: streamed as it comes; else buffered in vbuf */
	bool nl;             /* a newline held: dropped if it is the value's last byte */
	struct op_buf vbuf;
	struct op_u8 u8;
	struct op_buf look;  /* whitespace after a </parameter> that may be literal */
	/* hermes: the arguments value's bytes are kept in vbuf */
	struct op_jscan js;
	size_t h_start;      /* offset of the JSON object in p->raw */
	size_t name_start, name_end; /* span of the first "name" value in the object, 0/0: none */
	bool h_named;        /* that name was taken: the call has started */
	int h_args;          /* enum h_args in toolcall.c: what the arguments value is */
	bool h_in_args;      /* the bytes being scanned belong to the arguments value */
	size_t h_args_start; /* offset of the arguments value in the object */
	bool h_complete;     /* the arguments value is complete */
	bool h_sent_all;     /* the whole arguments object has been sent */
	size_t h_sent;       /* bytes of vbuf sent as CALL_ARGS */
	char h_close[OP_JSON_MAX_DEPTH + 2]; /* what makes the sent bytes a whole object */
	int h_close_len;
};

struct capy_outparse {
	unsigned flags;
	char id_prefix[65];
	unsigned id_base;
	struct op_tools tools;

	enum op_mode mode;
	bool at_output_start;  /* nothing but whitespace so far: `<think>` may open reasoning */
	char tag[16];          /* bytes held while they may be a tag */
	int ntag;
	struct op_chan chan[2]; /* [0] reasoning, [1] content */

	struct op_buf out;     /* pending delta of event type out_type */
	enum capy_outparse_event_type out_type;

	struct op_call call;

	bool tentative;
	enum op_mode origin;
	struct op_buf raw;
	struct capy_outparse_stats snap;
	struct op_qev *queue;
	size_t nq, capq;

	struct op_buf refeed;
	size_t refeed_pos;
	uint64_t n_input;    /* bytes fed */
	uint64_t n_reparsed; /* bytes given back by rollbacks to parse again */

	capy_outparse_cb cb;
	void *ud;
	int failed;
	bool finished;
	struct capy_outparse_stats stats;
};

/* outparse.c */
void op_emit(struct capy_outparse *p, struct capy_outparse_event *ev);
void op_flush_out(struct capy_outparse *p);
struct op_buf *op_out(struct capy_outparse *p, enum capy_outparse_event_type type);
void op_refeed(struct capy_outparse *p, const char *s, size_t n);
void op_resolve(struct capy_outparse *p);
void op_rollback(struct capy_outparse *p, enum capy_outparse_call_status why);
/* Match the held tag bytes (c already appended) against tags: the index of a full match,
 * -1 while a prefix of one, -2 when none can match. */
int op_tag_match(const struct capy_outparse *p, const char *const *tags, int n);

/* reasoning.c */
void op_text_byte(struct capy_outparse *p, uint8_t c);
void op_chan_byte(struct capy_outparse *p, uint8_t c);
void op_chan_close(struct capy_outparse *p, enum op_mode m);
void op_text_finish(struct capy_outparse *p);

/* toolcall.c */
void op_call_begin(struct capy_outparse *p);
void op_call_byte(struct capy_outparse *p, uint8_t c);
void op_call_finish(struct capy_outparse *p);
void op_call_init(struct op_call *c, int *failed);
void op_call_reset(struct op_call *c);
void op_call_release(struct op_call *c);

#endif
