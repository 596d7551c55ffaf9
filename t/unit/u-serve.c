/* u-serve.c - capy-serve's text output: detokenized tokens through stop strings and the
 * output parser, on the fixtures' tokenizer: every split of the text into tokens gives the
 * same events; a stop string ends the text where it starts, also across tokens and UTF-8
 * characters; held text comes out at the end; raw mode passes text as content. */
#include "test.h"
#include "serve/serve.h"
#include "util/buf.h"

static struct capy_tokenizer *tok;

struct collect {
	struct capy_buf reasoning, content, calls;
	int n_events;
};

static int on_ev(void *ud, const struct capy_outparse_event *ev)
{
	struct collect *c = ud;

	c->n_events++;
	switch (ev->type) {
	case CAPY_OUTPARSE_REASONING:
		capy_buf_add(&c->reasoning, ev->text, ev->len);
		break;
	case CAPY_OUTPARSE_CONTENT:
		capy_buf_add(&c->content, ev->text, ev->len);
		break;
	case CAPY_OUTPARSE_CALL_START:
		capy_buf_printf(&c->calls, "[%s:", ev->name);
		break;
	case CAPY_OUTPARSE_CALL_ARGS:
		capy_buf_add(&c->calls, ev->text, ev->len);
		break;
	case CAPY_OUTPARSE_CALL_END:
		capy_buf_puts(&c->calls, "]");
		break;
	}
	return 0;
}

static void release(struct collect *c, const char *stop)
{
	free((char *)stop);
	capy_buf_release(&c->reasoning);
	capy_buf_release(&c->content);
	capy_buf_release(&c->calls);
}

static void setup(void)
{
	char path[4096], *json;
	size_t len;
	struct capy_err err = { 0 };

	test_fixture_path("qwen3_5_moe/tokenizer.json", path, sizeof(path));
	CHECK_EQ_INT(capy_read_file(path, 1u << 24, &json, &len, &err), 0);
	CHECK_MSG(capy_tokenizer_new(&tok, json, len, &err) == 0, "%s", err.msg);
	free(json);
}

/* Run text (encoded) through a textout; *stop_out gets the matched stop string. */
static void run(const char *text, const char *const *stops, size_t n_stops, bool parse, struct collect *c,
		const char **stop_out, int *stopped_at)
{
	struct capy_err err = { 0 };
	struct capy_tokens ids = { 0 };
	struct capy_textout *t;
	struct capy_textout_opts o = { tok, stops, n_stops, parse, { CAPY_OUTPARSE_THINK_OPEN, NULL, 0, NULL, 0 } };
	bool stopped = false;

	memset(c, 0, sizeof(*c));
	*stopped_at = -1;
	CHECK_EQ_INT(capy_tokenizer_encode(tok, text, strlen(text), CAPY_TOK_PARSE_ADDED, &ids, &err), 0);
	CHECK_EQ_INT(capy_textout_new(&t, &o, &err), 0);
	for (size_t i = 0; i < ids.n; i++) {
		CHECK_EQ_INT(capy_textout_token(t, ids.ids[i], on_ev, c, &stopped, &err), 0);
		if (stopped && *stopped_at < 0)
			*stopped_at = (int)i;
	}
	CHECK_EQ_INT(capy_textout_finish(t, on_ev, c, &err), 0);
	*stop_out = capy_textout_stop_string(t) ? strdup(capy_textout_stop_string(t)) : NULL;
	capy_textout_free(t);
	capy_tokens_release(&ids);
}

static void test_parse_and_stop(void)
{
	static const char *const stops[] = { "STOP", "lo w" };
	struct collect c;
	const char *stop;
	int at;

	run("plan it\n</think>\n\nHello world", NULL, 0, true, &c, &stop, &at);
	CHECK_STR(c.reasoning.data, "plan it");
	CHECK_STR(c.content.data, "Hello world");
	CHECK(!stop && at < 0);
	release(&c, stop);

	/* "lo w" spans tokens; what precedes it is kept, the rest is cut. */
	run("plan\n</think>\n\nHello world and more", stops, 2, true, &c, &stop, &at);
	CHECK_STR(c.content.data, "Hel");
	CHECK(stop && !strcmp(stop, "lo w"));
	CHECK(at >= 0);
	release(&c, stop);

	/* A stop string inside the reasoning ends everything there. */
	run("think STOP now</think>answer", stops, 2, true, &c, &stop, &at);
	CHECK_STR(c.reasoning.data, "think");
	CHECK(!c.content.data || !c.content.len);
	CHECK(stop && !strcmp(stop, "STOP"));
	release(&c, stop);

	/* Text that only looked like the start of a stop string comes out at the end. */
	run("x</think>ends with lo", stops, 2, true, &c, &stop, &at);
	CHECK_STR(c.content.data, "ends with lo");
	CHECK(!stop);
	release(&c, stop);
}

static void test_tool_call(void)
{
	struct collect c;
	const char *stop;
	int at;

	run("ok</think>\n\nLet me look.\n\n<tool_call>\n<function=read>\n<parameter=path>\n/tmp/a b\n</parameter>\n"
	    "</function>\n</tool_call>", NULL, 0, true, &c, &stop, &at);
	CHECK_STR(c.reasoning.data, "ok");
	CHECK_STR(c.content.data, "Let me look.");
	CHECK_STR(c.calls.data, "[read:{\"path\": \"/tmp/a b\"}]");
	release(&c, stop);
}

static void test_raw_and_utf8(void)
{
	static const char *const stops[] = { "\xc3\xa9t" }; /* "ét" */
	struct collect c;
	const char *stop;
	int at;

	/* Raw: the text itself, tags included. */
	run("a <think> b </think> caf\xc3\xa9 \xf0\x9f\x98\x80!", NULL, 0, false, &c, &stop, &at);
	CHECK_STR(c.content.data, "a <think> b </think> caf\xc3\xa9 \xf0\x9f\x98\x80!");
	release(&c, stop);
	run("un \xc3\xa9t\xc3\xa9 chaud", stops, 1, false, &c, &stop, &at);
	CHECK_STR(c.content.data, "un ");
	CHECK(stop != NULL);
	release(&c, stop);
	/* Special tokens do not reach the text. */
	run("hi<|im_end|>", NULL, 0, false, &c, &stop, &at);
	CHECK_STR(c.content.data, "hi");
	release(&c, stop);
}

int main(void)
{
	RUN(setup);
	if (tok) {
		RUN(test_parse_and_stop);
		RUN(test_tool_call);
		RUN(test_raw_and_utf8);
	}
	capy_tokenizer_free(tok);
	return test_summary();
}
