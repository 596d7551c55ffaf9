/* u-outparse.c - unit tests for libcore/text/outparse: reasoning split, XML and hermes tool
 * calls, argument typing, streaming with any chunking, truncation, malformed calls, UTF-8.
 */
#include "test.h"
#include "../helper/outparse-check.h"
#include "util/rng.h"

/* One-shot parse into a result (collector), checked against the event log invariants. */
struct res {
	struct capy_outparse_result r;
	int rc;
};

static struct res parse(const char *text, const struct capy_outparse_opts *o)
{
	struct capy_err err = { 0 };
	struct res x;

	x.rc = capy_outparse_parse(text, strlen(text), o, &x.r, &err);
	return x;
}

static const char *str_or(const char *s)
{
	return s ? s : "(null)";
}

/* --- tools used below ------------------------------------------------------------------- */

static const char TOOLS_TYPES[] =
	"[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
	"\"properties\":{\"s\":{\"type\":\"string\"},\"i\":{\"type\":\"integer\"},"
	"\"n\":{\"type\":\"number\"},\"b\":{\"type\":\"boolean\"},\"o\":{\"type\":\"object\"},"
	"\"a\":{\"type\":\"array\"},\"z\":{\"type\":\"null\"},\"u\":{\"type\":[\"string\",\"null\"]},"
	"\"v\":{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\"}]},"
	"\"e\":{\"enum\":[\"x\",\"y\"]},\"any\":{\"description\":\"no type\"}}}}},"
	"{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{"
	"\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}]";

static char *xml_call(const char *fn, const char *key, const char *raw)
{
	struct sb b = { 0 };

	sb_fmt(&b, "<tool_call>\n<function=%s>\n<parameter=%s>\n", fn, key);
	sb_add(&b, raw, strlen(raw));
	sb_fmt(&b, "\n</parameter>\n</function>\n</tool_call>");
	return b.p;
}

/* --- reasoning -------------------------------------------------------------------------- */

static void test_reasoning(void)
{
	struct capy_outparse_opts open = { .flags = CAPY_OUTPARSE_THINK_OPEN }, closed = { 0 };
	struct res x;

	x = parse("Let me think.\nOK.\n</think>\n\nThe answer is 4.", &open);
	CHECK_EQ_INT(x.rc, 0);
	CHECK_STR(str_or(x.r.reasoning), "Let me think.\nOK.");
	CHECK_STR(str_or(x.r.content), "The answer is 4.");
	CHECK_EQ_INT(x.r.stats.reasoning, CAPY_OUTPARSE_REASONING_CLOSED);
	capy_outparse_result_release(&x.r);

	x = parse("\n<think>\nabc  def\n</think>\n\nhi there\n", &closed);
	CHECK_STR(str_or(x.r.reasoning), "abc  def");
	CHECK_STR(str_or(x.r.content), "hi there");
	CHECK_EQ_INT(x.r.stats.reasoning, CAPY_OUTPARSE_REASONING_CLOSED);
	capy_outparse_result_release(&x.r);

	/* the prompt opened <think> and the model repeats it: still one reasoning block */
	x = parse("<think>\nabc</think>x", &open);
	CHECK_STR(str_or(x.r.reasoning), "abc");
	CHECK_STR(str_or(x.r.content), "x");
	capy_outparse_result_release(&x.r);

	/* truncated reasoning stays reasoning, a cut tag included */
	x = parse("still thinking </thi", &open);
	CHECK_STR(str_or(x.r.reasoning), "still thinking </thi");
	CHECK(!x.r.content);
	CHECK_EQ_INT(x.r.stats.reasoning, CAPY_OUTPARSE_REASONING_UNTERMINATED);
	capy_outparse_result_release(&x.r);

	/* empty reasoning (enable_thinking=false style output) */
	x = parse("\n\n</think>\n\nfour", &open);
	CHECK(!x.r.reasoning);
	CHECK_STR(str_or(x.r.content), "four");
	capy_outparse_result_release(&x.r);

	/* no reasoning: </think> and a late <think> are text */
	x = parse("Hello <b>world</b> </think> and <think>x</think>", &closed);
	CHECK(!x.r.reasoning);
	CHECK_STR(str_or(x.r.content), "Hello <b>world</b> </think> and <think>x</think>");
	CHECK_EQ_INT(x.r.stats.reasoning, CAPY_OUTPARSE_REASONING_NONE);
	capy_outparse_result_release(&x.r);

	/* a <think> after text is text even at the start of a line */
	x = parse("a\n<think>b", &closed);
	CHECK_STR(str_or(x.r.content), "a\n<think>b");
	capy_outparse_result_release(&x.r);

	/* inner whitespace is kept, edges trimmed */
	x = parse("  x \n\n y  ", &closed);
	CHECK_STR(str_or(x.r.content), "x \n\n y");
	capy_outparse_result_release(&x.r);

	/* nothing at all */
	x = parse("", &open);
	CHECK(!x.r.reasoning && !x.r.content && !x.r.n_calls);
	CHECK_EQ_INT(x.r.stats.reasoning, CAPY_OUTPARSE_REASONING_UNTERMINATED);
	capy_outparse_result_release(&x.r);
}

/* A continued prefill: the output's leading whitespace belongs to the text it continues. */
static void test_continue(void)
{
	struct capy_outparse_opts cont = { .flags = CAPY_OUTPARSE_CONTINUE }, plain = { 0 };
	struct capy_outparse_opts cont_think = { .flags = CAPY_OUTPARSE_CONTINUE | CAPY_OUTPARSE_THINK_OPEN };
	struct res x;

	x = parse(" jumps over the dog.\n", &cont);
	CHECK_EQ_INT(x.rc, 0);
	CHECK_STR(str_or(x.r.content), " jumps over the dog.");
	capy_outparse_result_release(&x.r);

	x = parse(" jumps over the dog.\n", &plain);
	CHECK_STR(str_or(x.r.content), "jumps over the dog.");
	capy_outparse_result_release(&x.r);

	/* inside reasoning: the reasoning goes on; the answer after </think> is trimmed as usual */
	x = parse(" and more.\n</think>\n\n Answer.", &cont_think);
	CHECK_STR(str_or(x.r.reasoning), " and more.");
	CHECK_STR(str_or(x.r.content), "Answer.");
	capy_outparse_result_release(&x.r);

	/* only the start: a run before a tool call is still trimmed where it touches the tag */
	x = parse("\n\nok \n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", &cont);
	CHECK_STR(str_or(x.r.content), "\n\nok");
	CHECK_EQ_INT(x.r.n_calls, 1);
	capy_outparse_result_release(&x.r);
}

static void test_reasoning_tool_call(void)
{
	struct capy_outparse_opts o = { .flags = CAPY_OUTPARSE_THINK_OPEN, .tools_json = TOOLS_TYPES };
	struct res x;

	/* a call inside reasoning ends it */
	x = parse("I will call it.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
		  "</parameter>\n</function>\n</tool_call>",
		  &o);
	CHECK_STR(str_or(x.r.reasoning), "I will call it.");
	CHECK(!x.r.content);
	CHECK_EQ_INT(x.r.n_calls, 1);
	CHECK_EQ_INT(x.r.stats.reasoning, CAPY_OUTPARSE_REASONING_BY_TOOL_CALL);
	if (x.r.n_calls == 1) {
		CHECK_STR(x.r.calls[0].name, "get_weather");
		CHECK_STR(x.r.calls[0].arguments, "{\"city\": \"Paris\"}");
		CHECK_STR(x.r.calls[0].id, "call_0");
		CHECK(!x.r.calls[0].unknown);
	}
	capy_outparse_result_release(&x.r);

	/* ...but <tool_call> named in prose does not */
	x = parse("Use <tool_call> tags.\n</think>\nDone", &o);
	CHECK_STR(str_or(x.r.reasoning), "Use <tool_call> tags.");
	CHECK_STR(str_or(x.r.content), "Done");
	CHECK_EQ_INT(x.r.n_calls, 0);
	CHECK_EQ_INT(x.r.stats.n_malformed_tool_calls, 1);
	CHECK_EQ_INT(x.r.stats.reasoning, CAPY_OUTPARSE_REASONING_CLOSED);
	capy_outparse_result_release(&x.r);

	/* the same held back until the end: truncated, still reasoning */
	o.flags |= CAPY_OUTPARSE_HOLD_CALLS;
	x = parse("hmm <tool_call>\n<function=get_weather>\n<parameter=ci", &o);
	CHECK_STR(str_or(x.r.reasoning), "hmm <tool_call>\n<function=get_weather>\n<parameter=ci");
	CHECK_EQ_INT(x.r.stats.n_truncated_tool_calls, 1);
	CHECK_EQ_INT(x.r.stats.reasoning, CAPY_OUTPARSE_REASONING_UNTERMINATED);
	capy_outparse_result_release(&x.r);
}

/* --- argument typing -------------------------------------------------------------------- */

static void check_typed(const char *fn, const char *key, const char *raw, const char *want_args)
{
	struct capy_outparse_opts o = { .tools_json = TOOLS_TYPES };
	char *text = xml_call(fn, key, raw);
	struct res x = parse(text, &o);

	CHECK_EQ_INT(x.rc, 0);
	CHECK_MSG(x.r.n_calls == 1 && !strcmp(x.r.calls[0].arguments, want_args),
		  "%s.%s=[%s]: got %s, want %s", fn, key, raw,
		  x.r.n_calls ? x.r.calls[0].arguments : "(no call)", want_args);
	CHECK(!x.r.content);
	free(text);
	capy_outparse_result_release(&x.r);
}

static void test_typing(void)
{
	/* strings stay strings, whatever they look like */
	check_typed("f", "s", "007", "{\"s\": \"007\"}");
	check_typed("f", "s", "1e3", "{\"s\": \"1e3\"}");
	check_typed("f", "s", "true", "{\"s\": \"true\"}");
	check_typed("f", "s", "null", "{\"s\": \"null\"}");
	check_typed("f", "s", "{\"a\": 1}", "{\"s\": \"{\\\"a\\\": 1}\"}");
	check_typed("f", "s", "", "{\"s\": \"\"}");
	check_typed("f", "e", "x", "{\"e\": \"x\"}");
	/* one leading and one trailing newline go, more stay */
	check_typed("f", "s", "line1\n  line2\n", "{\"s\": \"line1\\n  line2\\n\"}");
	check_typed("f", "s", "\nx", "{\"s\": \"\\nx\"}");
	/* escaping: quote, backslash, controls, non-ASCII kept */
	check_typed("f", "s", "a\"b\\c\td\x01\x1f\x7f é€😀",
		    "{\"s\": \"a\\\"b\\\\c\\td\\u0001\\u001f\x7f é€😀\"}");
	/* typed values are JSON-decoded and copied verbatim */
	check_typed("f", "i", "5", "{\"i\": 5}");
	check_typed("f", "i", " 42 ", "{\"i\": 42}");
	check_typed("f", "i", "-0", "{\"i\": -0}");
	check_typed("f", "i", "007", "{\"i\": \"007\"}");
	check_typed("f", "i", "abc", "{\"i\": \"abc\"}");
	check_typed("f", "i", "5.5", "{\"i\": 5.5}");
	check_typed("f", "n", "1e3", "{\"n\": 1e3}");
	check_typed("f", "n", "-0.25E+2", "{\"n\": -0.25E+2}");
	check_typed("f", "n", "1.", "{\"n\": \"1.\"}");
	check_typed("f", "n", "12345678901234567890123", "{\"n\": 12345678901234567890123}");
	check_typed("f", "b", "true", "{\"b\": true}");
	check_typed("f", "b", "True", "{\"b\": \"True\"}");
	check_typed("f", "o", "{\"k\": [1, 2],\n \"a\": {\"b\": null}}",
		    "{\"o\": {\"k\": [1, 2],\n \"a\": {\"b\": null}}}");
	check_typed("f", "o", "{\"k\": 1", "{\"o\": \"{\\\"k\\\": 1\"}");
	check_typed("f", "a", "[1, \"x\"]", "{\"a\": [1, \"x\"]}");
	check_typed("f", "z", "null", "{\"z\": null}");
	/* unions with string: decoded only to another allowed type */
	check_typed("f", "u", "null", "{\"u\": null}");
	check_typed("f", "u", "hello", "{\"u\": \"hello\"}");
	check_typed("f", "u", "5", "{\"u\": \"5\"}");
	check_typed("f", "v", "5", "{\"v\": 5}");
	check_typed("f", "v", "5.5", "{\"v\": \"5.5\"}");
	check_typed("f", "v", "abc", "{\"v\": \"abc\"}");
	/* no type in the schema, unknown parameter, unknown function: decode, else string */
	check_typed("f", "any", "12", "{\"any\": 12}");
	check_typed("f", "any", "hi", "{\"any\": \"hi\"}");
	check_typed("f", "any", "[1,", "{\"any\": \"[1,\"}");
	check_typed("f", "nope", "true", "{\"nope\": true}");
	check_typed("f", "nope", "007", "{\"nope\": \"007\"}");
	check_typed("g", "s", "{\"x\": [true]}", "{\"s\": {\"x\": [true]}}");
	check_typed("g", "s", "007", "{\"s\": \"007\"}");
	/* </parameter> inside a value is text unless a structural tag follows it */
	check_typed("f", "s", "x</parameter>y", "{\"s\": \"x</parameter>y\"}");
	check_typed("f", "s", "a\n</parameter>\nb", "{\"s\": \"a\\n</parameter>\\nb\"}");
	check_typed("f", "s", "a\n</parameter>\n</parameter2>", "{\"s\": \"a\\n</parameter>\\n</parameter2>\"}");
	check_typed("f", "s", "<<tool_call></para", "{\"s\": \"<<tool_call></para\"}");
	check_typed("f", "o", "{\"t\": \"</parameter>\"}", "{\"o\": {\"t\": \"</parameter>\"}}");
}

static void test_params(void)
{
	struct capy_outparse_opts o = { .tools_json = TOOLS_TYPES };
	struct res x;

	/* order as generated; values without newlines; whitespace between tags */
	x = parse("<tool_call><function=f><parameter=i>1</parameter>  <parameter=s>x</parameter>"
		  "<parameter=b>\nfalse\n</parameter></function></tool_call>",
		  &o);
	CHECK_EQ_INT(x.r.n_calls, 1);
	if (x.r.n_calls)
		CHECK_STR(x.r.calls[0].arguments, "{\"i\": 1, \"s\": \"x\", \"b\": false}");
	capy_outparse_result_release(&x.r);

	/* no parameters */
	x = parse("text\n\n<tool_call>\n<function=f>\n</function>\n</tool_call>\n\nafter", &o);
	CHECK_STR(str_or(x.r.content), "textafter");
	CHECK_EQ_INT(x.r.n_calls, 1);
	if (x.r.n_calls) {
		CHECK_STR(x.r.calls[0].arguments, "{}");
		CHECK_EQ_INT(x.r.calls[0].status, CAPY_OUTPARSE_CALL_OK);
	}
	capy_outparse_result_release(&x.r);

	/* ids: prefix and base */
	o.id_prefix = "toolu_";
	o.id_base = 7;
	x = parse("<tool_call>\n<function=f>\n</function>\n</tool_call>\n"
		  "<tool_call>\n<function=get_weather>\n</function>\n</tool_call>",
		  &o);
	CHECK_EQ_INT(x.r.n_calls, 2);
	if (x.r.n_calls == 2) {
		CHECK_STR(x.r.calls[0].id, "toolu_7");
		CHECK_STR(x.r.calls[1].id, "toolu_8");
		CHECK_STR(x.r.calls[1].name, "get_weather");
	}
	capy_outparse_result_release(&x.r);

	/* unknown function: reported, flagged, counted */
	o.id_prefix = NULL;
	o.id_base = 0;
	x = parse("<tool_call>\n<function=rm_rf>\n<parameter=path>\n/\n</parameter>\n</function>\n"
		  "</tool_call>",
		  &o);
	CHECK_EQ_INT(x.r.n_calls, 1);
	CHECK_EQ_INT(x.r.stats.n_unknown_tool_calls, 1);
	if (x.r.n_calls) {
		CHECK(x.r.calls[0].unknown);
		CHECK_STR(x.r.calls[0].name, "rm_rf");
		CHECK_STR(x.r.calls[0].arguments, "{\"path\": \"/\"}");
	}
	capy_outparse_result_release(&x.r);

	/* without tools every name is unknown; NO_TOOL_CALLS makes the tag text */
	x = parse("<tool_call>\n<function=f>\n</function>\n</tool_call>", NULL);
	CHECK(x.r.n_calls == 1 && x.r.calls[0].unknown);
	capy_outparse_result_release(&x.r);
	o.flags = CAPY_OUTPARSE_NO_TOOL_CALLS;
	x = parse("<tool_call>\n<function=f>\n</function>\n</tool_call>", &o);
	CHECK_EQ_INT(x.r.n_calls, 0);
	CHECK_STR(str_or(x.r.content), "<tool_call>\n<function=f>\n</function>\n</tool_call>");
	CHECK_EQ_INT(x.r.stats.n_malformed_tool_calls, 0);
	capy_outparse_result_release(&x.r);
}

/* --- hermes ----------------------------------------------------------------------------- */

static void check_hermes(const char *body, const char *name, const char *want_args)
{
	struct capy_outparse_opts o = { .tools_json = TOOLS_TYPES };
	struct sb b = { 0 };
	struct res x;

	sb_fmt(&b, "<tool_call>\n");
	sb_add(&b, body, strlen(body));
	sb_fmt(&b, "\n</tool_call>");
	for (int hold = 0; hold < 2; hold++) {
		o.flags = hold ? CAPY_OUTPARSE_HOLD_CALLS : 0;
		x = parse(b.p, &o);
		if (name) {
			CHECK_MSG(x.r.n_calls == 1 && !strcmp(x.r.calls[0].name, name) &&
					  !strcmp(x.r.calls[0].arguments, want_args) &&
					  x.r.calls[0].status == CAPY_OUTPARSE_CALL_OK,
				  "[%s]: got %s", body,
				  x.r.n_calls ? x.r.calls[0].arguments : "(no call)");
			CHECK(!x.r.content);
		} else {
			/* never a call (no valid name): all of it is content, and counted */
			CHECK_MSG(!x.r.n_calls && x.r.content && !strcmp(x.r.content, b.p),
				  "[%s]: got %s", body, str_or(x.r.content));
			CHECK_EQ_INT(x.r.stats.n_malformed_tool_calls, 1);
		}
		capy_outparse_result_release(&x.r);
	}
	free(b.p);
}

static void test_hermes(void)
{
	check_hermes("{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"n\": 1.50}}",
		     "get_weather", "{\"city\": \"Paris\", \"n\": 1.50}");
	check_hermes("{\"arguments\": {\"b\":1,\"a\":[]}, \"name\": \"f\"}", "f", "{\"b\":1,\"a\":[]}");
	check_hermes("{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": \\\"\\u00e9\\\"}\"}", "f",
		     "{\"a\": \"\xc3\xa9\"}");
	check_hermes("{\"name\": \"f\", \"parameters\": {\"x\": null}}", "f", "{\"x\": null}");
	check_hermes("{\"name\": \"f\", \"arguments\": null}", "f", "{}");
	check_hermes("{\"name\": \"f\"}", "f", "{}");
	check_hermes("{\"name\": \"f\", \"arguments\": {\"s\": \"</tool_call>\"}}", "f",
		     "{\"s\": \"</tool_call>\"}");
	/* the first of "arguments" and "parameters" counts */
	check_hermes("{\"name\": \"f\", \"parameters\": {\"a\": 1}, \"arguments\": {\"b\": 2}}", "f",
		     "{\"a\": 1}");
	check_hermes("{\"name\": \"f\", \"arguments\": {\"e\": \"\\ud83d\\ude00 \\\"q\\\" \\u00e9\"}}", "f",
		     "{\"e\": \"\\ud83d\\ude00 \\\"q\\\" \\u00e9\"}");
	check_hermes("{\"arguments\": {}}", NULL, NULL);
	check_hermes("{\"name\": 5, \"arguments\": {}}", NULL, NULL);
	check_hermes("{\"name\": \"a b\", \"arguments\": {}}", NULL, NULL);
	check_hermes("{\"arguments\": {\"a\": 1}, \"na", NULL, NULL);

	/* a UTF-8 sequence cut by the end of output: U+FFFD, then the closers */
	struct capy_outparse_opts o = { .tools_json = TOOLS_TYPES };
	struct res x = parse("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"s\": \"\xe2\x82", &o);

	CHECK_EQ_INT(x.r.n_calls, 1);
	if (x.r.n_calls == 1) {
		CHECK_STR(x.r.calls[0].arguments, "{\"s\": \"\xEF\xBF\xBD\"}");
		CHECK_EQ_INT(x.r.calls[0].status, CAPY_OUTPARSE_CALL_TRUNCATED);
	}
	CHECK_EQ_INT(x.r.stats.n_invalid_utf8, 1);
	capy_outparse_result_release(&x.r);
}

/* --- malformed and truncated calls ------------------------------------------------------ */

struct bad_case {
	const char *text;
	/* streaming: content, calls, their args and status; hold: everything is content */
	const char *content;
	int n_calls;
	const char *args;
	int status;
	int n_malformed, n_truncated;
};

static void test_malformed(void)
{
	static const struct bad_case cases[] = {
		/* never a call: text, in both modes */
		{ "<tool_call>hello</tool_call>", "<tool_call>hello</tool_call>", 0, NULL, 0, 1, 0 },
		{ "<tool_call>\n<function=bad name>\n</function>\n</tool_call>",
		  "<tool_call>\n<function=bad name>\n</function>\n</tool_call>", 0, NULL, 0, 1, 0 },
		{ "<tool_call>\n<function=>\n</function>\n</tool_call>",
		  "<tool_call>\n<function=>\n</function>\n</tool_call>", 0, NULL, 0, 1, 0 },
		{ "<tool_call>\n<func", "<tool_call>\n<func", 0, NULL, 0, 0, 1 },
		{ "<tool_call>", "<tool_call>", 0, NULL, 0, 0, 1 },
		/* committed, then broken: closed and flagged; the rest is content */
		{ "<tool_call>\n<function=f>\noops\n<parameter=s>\nx\n</parameter>\n</function>\n</tool_call>",
		  "oops\n<parameter=s>\nx\n</parameter>\n</function>\n</tool_call>", 1, "{}",
		  CAPY_OUTPARSE_CALL_MALFORMED, 1, 0 },
		/* text after </parameter> makes it part of the value: here up to the end */
		{ "<tool_call>\n<function=f>\n<parameter=s>\nx\n</parameter>\noops\n</function>\n</tool_call>",
		  NULL, 1, "{\"s\": \"x\\n</parameter>\\noops\\n</function>\\n</tool_call>\"}",
		  CAPY_OUTPARSE_CALL_TRUNCATED, 0, 1 },
		{ "<tool_call>\n<function=f>\n</function>\nbye", "bye", 1, "{}", CAPY_OUTPARSE_CALL_MALFORMED, 1, 0 },
		{ "<tool_call>\n<function=f>\n<parameter=s>\nx\n</parameter>\n</tool_call>\nok", "ok", 1,
		  "{\"s\": \"x\"}", CAPY_OUTPARSE_CALL_MALFORMED, 1, 0 },
		{ "<tool_call>\n<function=f>\n<parameter=s x>\n1\n</parameter>\n</function>\n</tool_call>",
		  "<parameter=s x>\n1\n</parameter>\n</function>\n</tool_call>", 1, "{}",
		  CAPY_OUTPARSE_CALL_MALFORMED, 1, 0 },
		{ "<tool_call>\n<function=f>\n<foo>", "<foo>", 1, "{}", CAPY_OUTPARSE_CALL_MALFORMED, 1, 0 },
		/* truncated after the commit: kept so far */
		{ "<tool_call>\n<function=f>\n<parameter=s>\nhello wor", NULL, 1, "{\"s\": \"hello wor\"}",
		  CAPY_OUTPARSE_CALL_TRUNCATED, 0, 1 },
		{ "<tool_call>\n<function=f>\n<parameter=s>\nhello\n</para", NULL, 1,
		  "{\"s\": \"hello\\n</para\"}", CAPY_OUTPARSE_CALL_TRUNCATED, 0, 1 },
		{ "<tool_call>\n<function=f>\n<parameter=i>\n12\n</parameter>\n", NULL, 1, "{\"i\": 12}",
		  CAPY_OUTPARSE_CALL_TRUNCATED, 0, 1 },
		{ "<tool_call>\n<function=f>\n<parameter=i>\n[1, 2", NULL, 1, "{\"i\": \"[1, 2\"}",
		  CAPY_OUTPARSE_CALL_TRUNCATED, 0, 1 },
		{ "<tool_call>\n<function=f>\n<parameter=s", NULL, 1, "{}", CAPY_OUTPARSE_CALL_TRUNCATED, 0, 1 },
		{ "<tool_call>\n<function=f>\n</function>\n</tool_c", NULL, 1, "{}",
		  CAPY_OUTPARSE_CALL_TRUNCATED, 0, 1 },
		/* hermes: committed at a valid "name", then broken: closed with what was certain */
		{ "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 01}}\n</tool_call>",
		  "1}}\n</tool_call>", 1, "{}", CAPY_OUTPARSE_CALL_MALFORMED, 1, 0 },
		{ "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"s\": \"x\", \"a\": [1, tru}}\n</tool_call>",
		  "}}\n</tool_call>", 1, "{\"s\": \"x\", \"a\": [1]}", CAPY_OUTPARSE_CALL_MALFORMED, 1, 0 },
		{ "<tool_call>\n{\"name\": \"f\", \"arguments\": [1]}\n</tool_call>", NULL, 1, "{}",
		  CAPY_OUTPARSE_CALL_MALFORMED, 1, 0 },
		{ "<tool_call>\n{\"name\": \"f\", \"arguments\": \"not json\"}\n</tool_call>", NULL, 1, "{}",
		  CAPY_OUTPARSE_CALL_MALFORMED, 1, 0 },
		{ "<tool_call>\n{\"name\": \"f\", \"arguments\": {}} trailing\n</tool_call>",
		  "trailing\n</tool_call>", 1, "{}", CAPY_OUTPARSE_CALL_MALFORMED, 1, 0 },
		{ "<tool_call>\n{\"name\": \"f\", \"arguments\": {}\n</tool_call>", "</tool_call>", 1, "{}",
		  CAPY_OUTPARSE_CALL_MALFORMED, 1, 0 },
		{ "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_cal>x", "</tool_cal>x", 1, "{}",
		  CAPY_OUTPARSE_CALL_MALFORMED, 1, 0 },
		{ "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"s\": \"\\ud83d x\"}}\n</tool_call>",
		  "x\"}}\n</tool_call>", 1, "{\"s\": \"\"}", CAPY_OUTPARSE_CALL_MALFORMED, 1, 0 },
		/* hermes, truncated after the commit: string values and whole values so far */
		{ "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"path\": \"a.c\", \"content\": \"hello wor",
		  NULL, 1, "{\"path\": \"a.c\", \"content\": \"hello wor\"}", CAPY_OUTPARSE_CALL_TRUNCATED, 0, 1 },
		{ "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"s\": \"a\\u00", NULL, 1, "{\"s\": \"a\"}",
		  CAPY_OUTPARSE_CALL_TRUNCATED, 0, 1 },
		{ "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"s\": \"a\\ud83d", NULL, 1, "{\"s\": \"a\"}",
		  CAPY_OUTPARSE_CALL_TRUNCATED, 0, 1 },
		{ "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"s\": \"a\\ud83d\\ude00", NULL, 1,
		  "{\"s\": \"a\\ud83d\\ude00\"}", CAPY_OUTPARSE_CALL_TRUNCATED, 0, 1 },
		{ "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, {\"b\": true},", NULL, 1,
		  "{\"a\": [1, {\"b\": true}]}", CAPY_OUTPARSE_CALL_TRUNCATED, 0, 1 },
		{ "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1, \"ke", NULL, 1, "{\"a\": 1}",
		  CAPY_OUTPARSE_CALL_TRUNCATED, 0, 1 },
		{ "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"n\": 12", NULL, 1, "{}",
		  CAPY_OUTPARSE_CALL_TRUNCATED, 0, 1 },
		{ "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}", NULL, 1, "{}",
		  CAPY_OUTPARSE_CALL_TRUNCATED, 0, 1 },
		{ "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}", NULL, 1, "{\"a\": 1}",
		  CAPY_OUTPARSE_CALL_TRUNCATED, 0, 1 },
		{ "<tool_call>\n{\"name\": \"f\"", NULL, 1, "{}", CAPY_OUTPARSE_CALL_TRUNCATED, 0, 1 },
		/* a new call before the old one closed */
		{ "<tool_call>\n<function=f>\n<tool_call>\n<function=get_weather>\n</function>\n</tool_call>",
		  NULL, 2, "{}", CAPY_OUTPARSE_CALL_OK, 1, 0 },
	};
	struct capy_outparse_opts o = { .tools_json = TOOLS_TYPES };

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		const struct bad_case *k = &cases[i];
		struct res x;

		o.flags = 0;
		x = parse(k->text, &o);
		CHECK_EQ_INT(x.rc, 0);
		CHECK_MSG(!strcmp(str_or(x.r.content), str_or(k->content)), "case %zu: content %s", i,
			  str_or(x.r.content));
		CHECK_MSG((int)x.r.n_calls == k->n_calls, "case %zu: %zu calls", i, x.r.n_calls);
		if (x.r.n_calls && (int)x.r.n_calls == k->n_calls) {
			const struct capy_outparse_call *c = &x.r.calls[x.r.n_calls - 1];

			CHECK_MSG(!strcmp(c->arguments, k->args), "case %zu: args %s", i, c->arguments);
			CHECK_MSG((int)c->status == k->status, "case %zu: status %d", i, c->status);
		}
		CHECK_MSG(x.r.stats.n_malformed_tool_calls == k->n_malformed, "case %zu: malformed %d",
			  i, x.r.stats.n_malformed_tool_calls);
		CHECK_MSG(x.r.stats.n_truncated_tool_calls == k->n_truncated, "case %zu: truncated %d",
			  i, x.r.stats.n_truncated_tool_calls);
		capy_outparse_result_release(&x.r);

		/* held: a broken call is all text; only well-formed calls survive */
		o.flags = CAPY_OUTPARSE_HOLD_CALLS;
		x = parse(k->text, &o);
		if (k->status == CAPY_OUTPARSE_CALL_OK && k->n_calls) {
			CHECK_EQ_INT(x.r.n_calls, 1);
		} else {
			size_t n = strlen(k->text);

			while (n && k->text[n - 1] == '\n')
				n--; /* trimmed */
			CHECK_MSG(!x.r.n_calls && x.r.content_len == n && !memcmp(x.r.content, k->text, n),
				  "hold case %zu: content %s", i, str_or(x.r.content));
		}
		CHECK_EQ_INT(x.r.stats.n_malformed_tool_calls + x.r.stats.n_truncated_tool_calls,
			     k->n_malformed + k->n_truncated);
		capy_outparse_result_release(&x.r);
	}
}

/* Many unclosed calls, each swallowing the rest of the output: the re-parsing after each
 * rollback is bounded, the result is text and does not depend on the chunking. */
static void test_nested_unclosed(void)
{
	static const char *const units[] = {
		"<tool_call>\n<function=f>\n<parameter=s>\nx", /* held: rolled back at the end */
		"<tool_call>{\"a\": \"x",                     /* hermes: always tentative */
	};
	struct capy_rng rng;

	capy_rng_seed(&rng, 9);
	for (size_t u = 0; u < ARRAY_SIZE(units); u++) {
		struct capy_outparse_opts o = { .flags = CAPY_OUTPARSE_HOLD_CALLS, .tools_json = TOOLS_TYPES };
		struct sb b = { 0 };
		struct rec r1, r2;
		struct capy_outparse_stats s1, s2;
		size_t cuts[3];
		struct res x;

		for (int i = 0; i < 5000; i++)
			sb_add(&b, units[u], strlen(units[u]));
		x = parse(b.p, &o);
		CHECK(!x.r.n_calls && x.r.content && !strcmp(x.r.content, b.p));
		CHECK(x.r.stats.n_truncated_tool_calls >= 1);
		capy_outparse_result_release(&x.r);
		for (int k = 0; k < 3; k++)
			cuts[k] = (size_t)(k + 1) * b.n / 4 + capy_rng_next(&rng) % 100;
		run_one(b.p, b.n, &o, &r1, &s1);
		run_cuts(b.p, b.n, &o, cuts, 3, &r2, &s2);
		CHECK(!strcmp(r1.log.p, r2.log.p) && same_stats(&s1, &s2));
		rec_release(&r1);
		rec_release(&r2);
		free(b.p);
	}
}

/* --- UTF-8 ------------------------------------------------------------------------------ */

static void test_utf8(void)
{
	static const struct { const char *in, *out; int bad; } cases[] = {
		{ "a\xff" "b", "a\xEF\xBF\xBD" "b", 1 },
		{ "\xe2\x82\xac", "\xe2\x82\xac", 0 },
		{ "\xe2\x82" "x", "\xEF\xBF\xBD" "x", 1 },            /* maximal subpart: one U+FFFD */
		{ "\xe0\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD", 3 }, /* overlong */
		{ "\xed\xa0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD", 3 }, /* surrogate */
		{ "\xf4\x90\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD", 4 },
		{ "\xf0\x9f\x98" " x", "\xEF\xBF\xBD x", 1 },
		{ "x \xf0\x9f\x98\x80", "x \xf0\x9f\x98\x80", 0 },
		{ "\xc0\xaf", "\xEF\xBF\xBD\xEF\xBF\xBD", 2 },
		{ "x\xe2", "x\xEF\xBF\xBD", 1 },                      /* cut at the end */
		{ "\xe2<b>", "\xEF\xBF\xBD<b>", 1 },
	};
	struct capy_outparse_opts o = { 0 };
	struct rec r1, r2;
	struct capy_outparse_stats s1, s2;

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct res x = parse(cases[i].in, &o);

		CHECK_MSG(!strcmp(str_or(x.r.content), cases[i].out), "case %zu", i);
		CHECK_EQ_INT(x.r.stats.n_invalid_utf8, cases[i].bad);
		capy_outparse_result_release(&x.r);
		/* byte by byte: the same */
		run_one(cases[i].in, strlen(cases[i].in), &o, &r1, &s1);
		run_bytes(cases[i].in, strlen(cases[i].in), &o, &r2, &s2);
		CHECK_STR(r1.log.p, r2.log.p);
		CHECK(same_stats(&s1, &s2));
		CHECK_MSG(r1.bad + r2.bad == 0, "case %zu: %d %d", i, r1.bad, r2.bad);
		rec_release(&r1);
		rec_release(&r2);
	}
}

/* Random bytes as content, reasoning and string argument: whatever the chunking, the output
 * is valid UTF-8, equals the input where the input was valid, and argument strings decode
 * back to the repaired text. */
static void test_utf8_random(void)
{
	struct capy_outparse_opts o = { .flags = CAPY_OUTPARSE_THINK_OPEN, .tools_json = TOOLS_TYPES };
	static const uint8_t pool[] = { 'a', ' ', '\t', '"', '\\', 0x01, 0x1f, 0x7f, 0x80, 0xbf,
					0xc2, 0xa9, 0xe2, 0x82, 0xac, 0xf0, 0x9f, 0x98, 0x80,
					0xed, 0xa0, 0xff, 0xc0, 0xf4, 0x90 };
	struct capy_rng rng;
	int fails = 0;

	capy_rng_seed(&rng, 7);
	for (int it = 0; it < 3000; it++) {
		char val[40], text[200];
		size_t n = 1 + capy_rng_next(&rng) % 30, len;
		struct rec r1, r2;
		struct capy_outparse_stats s1, s2;
		size_t cut[3];
		struct res x;
		struct capy_err err = { 0 };

		for (size_t i = 0; i < n; i++)
			val[i] = (char)pool[capy_rng_next(&rng) % sizeof(pool)];
		val[0] = 'a'; /* no edge whitespace to trim */
		val[n - 1] = 'a';
		val[n] = '\0';
		len = (size_t)snprintf(text, sizeof(text),
				       "%s</think>%s<tool_call>\n<function=f>\n<parameter=s>\n%s\n"
				       "</parameter>\n</function>\n</tool_call>",
				       val, val, val);
		for (int k = 0; k < 3; k++)
			cut[k] = capy_rng_next(&rng) % (len + 1);
		if (cut[0] > cut[1]) { size_t t = cut[0]; cut[0] = cut[1]; cut[1] = t; }
		if (cut[1] > cut[2]) { size_t t = cut[1]; cut[1] = cut[2]; cut[2] = t; }
		if (cut[0] > cut[1]) { size_t t = cut[0]; cut[0] = cut[1]; cut[1] = t; }
		run_one(text, len, &o, &r1, &s1);
		run_cuts(text, len, &o, cut, 3, &r2, &s2);
		if (strcmp(r1.log.p, r2.log.p) || !same_stats(&s1, &s2) || r1.bad || r2.bad)
			fails++;
		rec_release(&r1);
		rec_release(&r2);

		memset(&x, 0, sizeof(x));
		x.rc = capy_outparse_parse(text, len, &o, &x.r, &err);
		if (x.rc || x.r.n_calls != 1 || !x.r.content || !x.r.reasoning) {
			fails++;
		} else {
			cJSON *args = cJSON_Parse(x.r.calls[0].arguments);
			cJSON *s = cJSON_GetObjectItemCaseSensitive(args, "s");

			if (!cJSON_IsString(s) || strcmp(s->valuestring, x.r.content) ||
			    strcmp(x.r.content, x.r.reasoning) || !valid_utf8(x.r.content, x.r.content_len))
				fails++;
			if (valid_utf8(val, n) && strcmp(x.r.content, val))
				fails++;
			cJSON_Delete(args);
		}
		capy_outparse_result_release(&x.r);
	}
	CHECK_EQ_INT(fails, 0);
}

/* --- the JSON checker ------------------------------------------------------------------- */

static void test_json_valid(void)
{
	static const char *const good[] = {
		"{}", " {} ", "[]", "[[[]]]", "0", "-0", "-0.5e+10", "1E3", "\"\"", "\"\\u00e9\\n\"",
		"true", "false", "null", "{\"a\":{\"b\":[1,2,{\"c\":null}]},\"d\":\"\\\\\"}",
		"[1, \"x\", true, null, {}]", "\"é\"", "\"\\ud83d\\ude00\"", "\"\\uD83D\\uDE00x\"",
	};
	static const char *const bad[] = {
		"", " ", "01", "1.", "-", "1e", "1e+", ".5", "+1", "\"\\x\"", "\"a\x01\"", "[1,]",
		"{\"a\":1,}", "{\"a\"}", "{a:1}", "tru", "true false", "[1 2]", "{\"a\":1}}", "\"abc",
		"\"\\u12g4\"", "nul", "[", "NaN", "{,}", "[,1]",
		/* lone surrogates, as cJSON and serde_json refuse them */
		"\"\\ud83d\"", "\"\\ud83dx\"", "\"\\ud83d\\n\"", "\"\\ud83d\\u0041\"", "\"\\ude00\"",
		"\"\\ud83d\\ud83d\"",
	};
	char deep[400];

	for (size_t i = 0; i < ARRAY_SIZE(good); i++)
		CHECK_MSG(op_json_valid(good[i], strlen(good[i])), "%s", good[i]);
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		CHECK_MSG(!op_json_valid(bad[i], strlen(bad[i])), "%s", bad[i]);
	memset(deep, '[', 200);
	memset(deep + 200, ']', 200);
	CHECK(!op_json_valid(deep, 400)); /* deeper than OP_JSON_MAX_DEPTH */
	CHECK(op_json_valid(deep + 100, 200));
}

/* What the strict checker accepts, cJSON parses too, on random JSON-ish strings. */
static void test_json_valid_random(void)
{
	static const char alpha[] = "{}[]:,\"0123456789.-+eE truefalsnul\\";
	struct capy_rng rng;
	int accepted = 0, fails = 0;

	capy_rng_seed(&rng, 11);
	for (int it = 0; it < 300000; it++) {
		char s[16];
		size_t n = 1 + capy_rng_next(&rng) % 10;

		for (size_t i = 0; i < n; i++)
			s[i] = alpha[capy_rng_next(&rng) % (sizeof(alpha) - 1)];
		if (op_json_valid(s, n)) {
			cJSON *v = cJSON_ParseWithLength(s, n);

			accepted++;
			if (!v)
				fails++;
			cJSON_Delete(v);
		}
	}
	CHECK_EQ_INT(fails, 0);
	CHECK(accepted > 1000);
}

/* --- long samples: any chunking gives the same events ----------------------------------- */

static const char TOOLS_A[] =
	"[{\"type\":\"function\",\"function\":{\"name\":\"write_file\",\"parameters\":{\"type\":"
	"\"object\",\"properties\":{\"path\":{\"type\":\"string\"},\"content\":{\"type\":\"string\"}}}}},"
	"{\"type\":\"function\",\"function\":{\"name\":\"edit\",\"parameters\":{\"type\":\"object\","
	"\"properties\":{\"path\":{\"type\":\"string\"},\"edits\":{\"type\":\"array\"},"
	"\"options\":{\"type\":\"object\"},\"count\":{\"type\":\"integer\"}}}}},"
	"{\"type\":\"function\",\"function\":{\"name\":\"search\",\"parameters\":{\"type\":\"object\","
	"\"properties\":{\"query\":{\"type\":\"string\"},\"limit\":{\"type\":\"integer\"}}}}}]";

static const char SAMPLE_A[] =
	"The user wants a file, an edit and a search.\n"
	"I should call the tools one by one \xe2\x80\x94 carefully. \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e too.\n"
	"</think>\n\n"
	"I'll write the files now.\n\n"
	"<tool_call>\n<function=write_file>\n<parameter=path>\nsrc/main.c\n</parameter>\n"
	"<parameter=content>\n#include <stdio.h>\n\nint main(void)\n{\n"
	"\tprintf(\"hi \\\"there\\\"\\n\");\n\treturn 0;\n}\n\n</parameter>\n"
	"</function>\n</tool_call>\n"
	"<tool_call>\n<function=edit>\n<parameter=path>\nREADME.md\n</parameter>\n"
	"<parameter=edits>\n[{\"old\": \"a\", \"new\": \"b\"}, {\"old\": \"</parameter>\", \"new\": \"x\"}]\n"
	"</parameter>\n"
	"<parameter=options>\n{\"dry_run\": false, \"nested\": {\"depth\": 2, \"list\": [1, 2.5, null]}}\n"
	"</parameter>\n<parameter=count>\n3\n</parameter>\n</function>\n</tool_call>\n"
	"<tool_call>\n<function=search>\n<parameter=query>\nhow to parse <xml> in C?\n"
	"line two </parameter> not the end \xf0\x9f\x98\x80\n</parameter>\n"
	"<parameter=limit>\n10\n</parameter>\n</function>\n</tool_call>\n\nDone.";

static const char TOOLS_B[] =
	"[{\"name\":\"get_weather\",\"input_schema\":{\"type\":\"object\",\"properties\":"
	"{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"}}}}]";

static const char SAMPLE_B[] =
	"<think>\nNeed weather for two cities. Use <b>both</b>.\n</think>\n\n"
	"Checking both.\n"
	"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
	"\"celsius\", \"days\": 3}}\n</tool_call>\n"
	"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Z\xc3\xbcrich \\\"Altstadt\\\"\", "
	"\"opts\": {\"hourly\": true, \"fields\": [\"t\", \"rain\"]}}}\n</tool_call>";

static const char SAMPLE_C[] =
	"<tool_call>\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"src/main.c\", "
	"\"content\": \"#include <stdio.h>\\n\\nint main(void)\\n{\\n\\treturn 0;\\n}\\n\"}}\n"
	"</tool_call>";

static void test_sample_a_result(void)
{
	struct capy_outparse_opts o = { .flags = CAPY_OUTPARSE_THINK_OPEN, .tools_json = TOOLS_A };
	struct res x = parse(SAMPLE_A, &o);
	cJSON *a;

	CHECK_EQ_INT(x.rc, 0);
	CHECK_STR(str_or(x.r.reasoning),
		  "The user wants a file, an edit and a search.\n"
		  "I should call the tools one by one \xe2\x80\x94 carefully. \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e too.");
	CHECK_STR(str_or(x.r.content), "I'll write the files now.Done.");
	CHECK_EQ_INT(x.r.n_calls, 3);
	CHECK_EQ_INT(x.r.stats.n_malformed_tool_calls + x.r.stats.n_truncated_tool_calls +
			     x.r.stats.n_unknown_tool_calls + x.r.stats.n_invalid_utf8, 0);
	if (x.r.n_calls != 3)
		goto out;
	CHECK_STR(x.r.calls[0].arguments,
		  "{\"path\": \"src/main.c\", \"content\": \"#include <stdio.h>\\n\\nint main(void)\\n"
		  "{\\n\\tprintf(\\\"hi \\\\\\\"there\\\\\\\"\\\\n\\\");\\n\\treturn 0;\\n}\\n\"}");
	CHECK_STR(x.r.calls[1].arguments,
		  "{\"path\": \"README.md\", \"edits\": [{\"old\": \"a\", \"new\": \"b\"}, {\"old\": "
		  "\"</parameter>\", \"new\": \"x\"}], \"options\": {\"dry_run\": false, \"nested\": "
		  "{\"depth\": 2, \"list\": [1, 2.5, null]}}, \"count\": 3}");
	a = cJSON_Parse(x.r.calls[2].arguments);
	CHECK_STR(str_or(cJSON_GetStringValue(cJSON_GetObjectItem(a, "query"))),
		  "how to parse <xml> in C?\nline two </parameter> not the end \xf0\x9f\x98\x80");
	CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(a, "limit")) == 10);
	cJSON_Delete(a);
	CHECK_STR(x.r.calls[2].name, "search");
	CHECK_STR(x.r.calls[2].id, "call_2");
out:
	capy_outparse_result_release(&x.r);
}

static void test_sample_b_result(void)
{
	struct capy_outparse_opts o = { .tools_json = TOOLS_B };
	struct res x = parse(SAMPLE_B, &o);

	CHECK_STR(str_or(x.r.reasoning), "Need weather for two cities. Use <b>both</b>.");
	CHECK_STR(str_or(x.r.content), "Checking both.");
	CHECK_EQ_INT(x.r.n_calls, 2);
	if (x.r.n_calls == 2) {
		CHECK_STR(x.r.calls[0].arguments,
			  "{\"city\": \"Paris\", \"unit\": \"celsius\", \"days\": 3}");
		CHECK_STR(x.r.calls[1].arguments,
			  "{\"city\": \"Z\xc3\xbcrich \\\"Altstadt\\\"\", \"opts\": {\"hourly\": true, "
			  "\"fields\": [\"t\", \"rain\"]}}");
	}
	capy_outparse_result_release(&x.r);
}

/* Feed text split at every byte into two chunks, byte by byte, and at random cuts; each
 * must give exactly the one-shot events and stats. Returns the number of mismatches. */
static int chunking_mismatches(const char *text, size_t len, const struct capy_outparse_opts *o,
			       struct capy_rng *rng, int n_random)
{
	struct rec ref, r;
	struct capy_outparse_stats sref, s;
	int bad = 0;

	run_one(text, len, o, &ref, &sref);
	bad += ref.bad;
	for (size_t k = 0; k <= len; k++) {
		run_cuts(text, len, o, &k, 1, &r, &s);
		bad += strcmp(ref.log.p, r.log.p) != 0 || !same_stats(&sref, &s) || r.bad;
		rec_release(&r);
	}
	run_bytes(text, len, o, &r, &s);
	bad += strcmp(ref.log.p, r.log.p) != 0 || !same_stats(&sref, &s) || r.bad;
	rec_release(&r);
	for (int it = 0; it < n_random; it++) {
		size_t cuts[8], n = 1 + capy_rng_next(rng) % 8;

		for (size_t i = 0; i < n; i++)
			cuts[i] = capy_rng_next(rng) % (len + 1);
		for (size_t i = 1; i < n; i++)
			for (size_t j = i; j && cuts[j - 1] > cuts[j]; j--) {
				size_t t = cuts[j];
				cuts[j] = cuts[j - 1];
				cuts[j - 1] = t;
			}
		run_cuts(text, len, o, cuts, n, &r, &s);
		bad += strcmp(ref.log.p, r.log.p) != 0 || !same_stats(&sref, &s) || r.bad;
		rec_release(&r);
	}
	rec_release(&ref);
	return bad;
}

static void test_chunking(void)
{
	struct capy_outparse_opts oa = { .flags = CAPY_OUTPARSE_THINK_OPEN, .tools_json = TOOLS_A };
	struct capy_outparse_opts ob = { .tools_json = TOOLS_B };
	struct capy_outparse_opts oc = { .tools_json = TOOLS_A };
	struct capy_rng rng;

	capy_rng_seed(&rng, 3);
	CHECK_EQ_INT(chunking_mismatches(SAMPLE_A, strlen(SAMPLE_A), &oa, &rng, 50), 0);
	CHECK_EQ_INT(chunking_mismatches(SAMPLE_B, strlen(SAMPLE_B), &ob, &rng, 50), 0);
	CHECK_EQ_INT(chunking_mismatches(SAMPLE_C, strlen(SAMPLE_C), &oc, &rng, 50), 0);
	oa.flags |= CAPY_OUTPARSE_HOLD_CALLS;
	ob.flags |= CAPY_OUTPARSE_HOLD_CALLS;
	oc.flags |= CAPY_OUTPARSE_HOLD_CALLS;
	CHECK_EQ_INT(chunking_mismatches(SAMPLE_A, strlen(SAMPLE_A), &oa, &rng, 50), 0);
	CHECK_EQ_INT(chunking_mismatches(SAMPLE_B, strlen(SAMPLE_B), &ob, &rng, 50), 0);
	CHECK_EQ_INT(chunking_mismatches(SAMPLE_C, strlen(SAMPLE_C), &oc, &rng, 50), 0);
}

/* The stream of events as deltas arrive: every prefix of a call's arguments must be a prefix
 * of the final JSON, and deltas must come early: file content streams before the value's end
 * is seen (</parameter> in XML, the closing quote in hermes). */
struct early {
	size_t fed;         /* bytes fed so far */
	size_t first_args;  /* bytes fed when the marker was first in the arguments */
	const char *marker;
	struct sb args;
};

static int early_cb(void *ud, const struct capy_outparse_event *ev)
{
	struct early *e = ud;

	if (ev->type == CAPY_OUTPARSE_CALL_ARGS && ev->index == 0) {
		sb_add(&e->args, ev->text, ev->len);
		if (!e->first_args && strstr(e->args.p, e->marker))
			e->first_args = e->fed;
	}
	return 0;
}

/* Bytes fed when the marker (as the arguments spell it) first reached the call's arguments,
 * feeding byte by byte; 0 when it never did. */
static size_t marker_arrival(const char *text, const struct capy_outparse_opts *o, const char *marker)
{
	struct capy_err err = { 0 };
	struct capy_outparse *p;
	struct early e = { .marker = marker };
	size_t len = strlen(text);

	if (capy_outparse_new(&p, o, &err) < 0)
		return 0;
	for (size_t i = 0; i < len; i++) {
		e.fed = i + 1;
		capy_outparse_feed(p, text + i, 1, early_cb, &e, &err);
	}
	capy_outparse_finish(p, early_cb, &e, &err);
	capy_outparse_free(p);
	free(e.args.p);
	return e.first_args;
}

static void test_streams_early(void)
{
	struct capy_outparse_opts o = { .flags = CAPY_OUTPARSE_THINK_OPEN, .tools_json = TOOLS_A };
	size_t at, got;

	at = (size_t)(strstr(SAMPLE_A, "#include") - SAMPLE_A) + strlen("#include");
	got = marker_arrival(SAMPLE_A, &o, "#include");
	CHECK_MSG(got && got <= at + 1, "XML: %zu, #include ends at %zu", got, at);

	/* hermes: the content string streams too, escapes as soon as they are whole */
	o.flags = 0;
	at = (size_t)(strstr(SAMPLE_C, "int main") - SAMPLE_C) + strlen("int main");
	got = marker_arrival(SAMPLE_C, &o, "\\n\\nint main");
	CHECK_MSG(got == at, "hermes: %zu, int main ends at %zu", got, at);
	at = (size_t)(strstr(SAMPLE_C, "\"path\"") - SAMPLE_C);
	got = marker_arrival(SAMPLE_C, &o, "{");
	CHECK_MSG(got == at, "hermes: { at %zu, \"path\" at %zu", got, at);
	/* held calls send nothing before </tool_call> */
	o.flags = CAPY_OUTPARSE_HOLD_CALLS;
	got = marker_arrival(SAMPLE_C, &o, "{");
	CHECK_EQ_INT(got, strlen(SAMPLE_C));
}

/* Every prefix of the samples, as if the output was cut there: no crash, the same events
 * whatever the chunking, sensible counts. */
static void test_truncation(void)
{
	static const struct { const char *text, *tools; unsigned flags; int n_calls; } samples[] = {
		{ SAMPLE_A, TOOLS_A, CAPY_OUTPARSE_THINK_OPEN, 3 },
		{ SAMPLE_B, TOOLS_B, 0, 2 },
		{ SAMPLE_C, TOOLS_A, 0, 1 },
	};
	struct capy_rng rng;
	int bad = 0, counts = 0, truncated_seen = 0;

	capy_rng_seed(&rng, 5);
	for (size_t si = 0; si < ARRAY_SIZE(samples); si++) {
		for (int hold = 0; hold < 2; hold++) {
			struct capy_outparse_opts o = {
				.flags = samples[si].flags | (hold ? CAPY_OUTPARSE_HOLD_CALLS : 0),
				.tools_json = samples[si].tools,
			};
			size_t len = strlen(samples[si].text);

			for (size_t l = 0; l <= len; l++) {
				struct rec r1, r2, r3;
				struct capy_outparse_stats s1, s2, s3;
				size_t cut = l ? capy_rng_next(&rng) % l : 0;
				const char *t = samples[si].text;

				run_one(t, l, &o, &r1, &s1);
				run_bytes(t, l, &o, &r2, &s2);
				run_cuts(t, l, &o, &cut, 1, &r3, &s3);
				bad += strcmp(r1.log.p, r2.log.p) != 0 || strcmp(r1.log.p, r3.log.p) != 0;
				bad += !same_stats(&s1, &s2) || !same_stats(&s1, &s3);
				bad += r1.bad + r2.bad + r3.bad;
				counts += s1.n_malformed_tool_calls != 0 || s1.n_truncated_tool_calls > 1 ||
					  s1.n_tool_calls > samples[si].n_calls || s1.n_invalid_utf8 > 1;
				counts += l == len && (s1.n_tool_calls != samples[si].n_calls ||
						       s1.n_truncated_tool_calls);
				/* held calls are all-or-nothing */
				counts += hold && strstr(r1.log.p, "[E") && !strstr(r1.log.p, " 0]");
				truncated_seen += s1.n_truncated_tool_calls;
				rec_release(&r1);
				rec_release(&r2);
				rec_release(&r3);
			}
		}
	}
	CHECK_EQ_INT(bad, 0);
	CHECK_EQ_INT(counts, 0);
	CHECK(truncated_seen > 100);
}

/* --- API edges -------------------------------------------------------------------------- */

static void test_tools_json(void)
{
	static const char *const shapes[] = {
		"[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
		"\"properties\":{\"s\":{\"type\":\"string\"}}}}}]",
		"[{\"type\":\"function\",\"name\":\"f\",\"parameters\":{\"properties\":{\"s\":{\"type\":\"string\"}}}}]",
		"[{\"name\":\"f\",\"input_schema\":{\"properties\":{\"s\":{\"type\":\"string\"}}}},"
		"{\"type\":\"web_search\"}]",
	};
	struct capy_outparse_opts o = { 0 };
	struct capy_err err = { 0 };
	struct capy_outparse *p;
	char *text = xml_call("f", "s", "5");

	for (size_t i = 0; i < ARRAY_SIZE(shapes); i++) {
		struct res x;

		o.tools_json = shapes[i];
		x = parse(text, &o);
		CHECK_MSG(x.r.n_calls == 1 && !strcmp(x.r.calls[0].arguments, "{\"s\": \"5\"}") &&
				  !x.r.calls[0].unknown,
			  "shape %zu", i);
		capy_outparse_result_release(&x.r);
	}
	free(text);

	o.tools_json = "{}";
	CHECK_EQ_INT(capy_outparse_new(&p, &o, &err), CAPY_EFORMAT);
	CHECK_STR(err.msg, "tools: not a JSON array");
	o.tools_json = "[{\"type\":\"function\",\"function\":{}}]";
	CHECK_EQ_INT(capy_outparse_new(&p, &o, &err), CAPY_EFORMAT);
	CHECK_STR(err.msg, "tools[0]: missing function 'name'");
	o.tools_json = "[1, 2";
	CHECK_EQ_INT(capy_outparse_new(&p, &o, &err), CAPY_EFORMAT);
	CHECK_CONTAINS(err.msg, "tools: invalid JSON");
	o.tools_json = "[]xyz";
	o.tools_len = 2;
	CHECK_EQ_INT(capy_outparse_new(&p, &o, &err), 0);
	capy_outparse_free(p);
	o.tools_json = NULL;
	o.id_prefix = "0123456789012345678901234567890123456789012345678901234567890123456789";
	CHECK_EQ_INT(capy_outparse_new(&p, &o, &err), CAPY_EINVAL);
	CHECK(!p);
}

static void test_callback_stop(void)
{
	struct capy_outparse_opts o = { .tools_json = TOOLS_TYPES };
	const char *text = "hi <tool_call>\n<function=f>\n</function>\n</tool_call>";
	struct capy_err err = { 0 };
	struct capy_outparse *p;
	struct rec r;

	rec_init(&r);
	r.stop_at_call = 1;
	CHECK_EQ_INT(capy_outparse_new(&p, &o, &err), 0);
	CHECK_EQ_INT(capy_outparse_feed(p, text, strlen(text), rec_cb, &r, &err), CAPY_ECANCELED);
	CHECK_CONTAINS(err.msg, "callback failed");
	CHECK_EQ_INT(capy_outparse_feed(p, "x", 1, rec_cb, &r, &err), CAPY_ECANCELED);
	CHECK_EQ_INT(capy_outparse_finish(p, rec_cb, &r, &err), CAPY_ECANCELED);
	capy_outparse_free(p);
	rec_release(&r);

	CHECK_EQ_INT(capy_outparse_new(&p, NULL, &err), 0);
	CHECK_EQ_INT(capy_outparse_finish(p, NULL, NULL, &err), 0);
	CHECK_EQ_INT(capy_outparse_feed(p, "x", 1, NULL, NULL, &err), CAPY_EINVAL);
	CHECK_EQ_INT(capy_outparse_finish(p, NULL, NULL, &err), CAPY_EINVAL);
	capy_outparse_free(p);
}

int main(void)
{
	RUN(test_reasoning);
	RUN(test_continue);
	RUN(test_reasoning_tool_call);
	RUN(test_typing);
	RUN(test_params);
	RUN(test_hermes);
	RUN(test_malformed);
	RUN(test_nested_unclosed);
	RUN(test_utf8);
	RUN(test_utf8_random);
	RUN(test_json_valid);
	RUN(test_json_valid_random);
	RUN(test_sample_a_result);
	RUN(test_sample_b_result);
	RUN(test_chunking);
	RUN(test_streams_early);
	RUN(test_truncation);
	RUN(test_tools_json);
	RUN(test_callback_stop);
	return test_summary();
}
