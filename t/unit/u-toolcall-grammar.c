/* u-toolcall-grammar.c - the tool-call grammar (libcore/text/toolcall-grammar.h): the exact
 * bytes the templates write are accepted, other names, missing required parameters, values
 * against their schemas and values holding the closing tag are refused; the named, opened,
 * reasoning and parallel shapes; allowed tools, with free text (tool_choice allowed_tools);
 * errors naming the tool and the place in its schema; and
 * random walks over each grammar parse back (output parser, toolcall.c) into calls of an
 * allowed tool with JSON arguments holding the required keys. */
#include "test.h"
#include "constrain/grammar.h"
#include "text/outparse.h"
#include "text/toolcall-grammar.h"
#include "util/rng.h"

static const char TOOLS[] =
	"[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
	"\"properties\":{\"city\":{\"type\":\"string\"},\"unit\":{\"type\":\"string\",\"enum\":[\"c\",\"f\"]},"
	"\"days\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":7},\"code\":{\"type\":\"string\",\"maxLength\":3},"
	"\"tags\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/tag\"},\"maxItems\":2}},"
	"\"required\":[\"city\"],\"$defs\":{\"tag\":{\"enum\":[\"x\",\"y\"]}}}}},"
	"{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"parameters\":{\"type\":\"object\","
	"\"properties\":{}}}}]";

static struct capy_grammar *grammar(const struct capy_call_grammar_opts *o)
{
	struct capy_grammar *g = NULL;
	struct capy_err err = { 0 };
	char *text = NULL;

	CHECK_MSG(capy_call_grammar(TOOLS, strlen(TOOLS), o, &text, &err) == 0, "%s", err.msg);
	if (text)
		CHECK_MSG(capy_grammar_compile(text, strlen(text), "root", &g, &err) == 0, "%s\n%s", err.msg, text);
	free(text);
	return g;
}

static bool whole(const struct capy_grammar *g, const char *doc)
{
	struct capy_grammar_state *st = NULL;
	struct capy_err err = { 0 };
	bool ok;

	if (!g || capy_grammar_state_new(g, &st, &err) < 0)
		return false;
	ok = capy_grammar_feed(st, doc, strlen(doc)) == strlen(doc) && capy_grammar_accepting(st);
	capy_grammar_state_free(st);
	return ok;
}

#define ACCEPTS(g, doc) CHECK_MSG(whole(g, doc), "refused: %s", doc)
#define REFUSES(g, doc) CHECK_MSG(!whole(g, doc), "accepted: %s", doc)

static void test_xml(void)
{
	struct capy_call_grammar_opts o = { .syntax = CAPY_CALL_XML };
	struct capy_grammar *g = grammar(&o);

	ACCEPTS(g, "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>");
	ACCEPTS(g, "<tool_call>\n<function=get_weather>\n<parameter=city>\na <b> c\nd</p>\n</parameter>\n"
		   "<parameter=unit>\nf\n</parameter>\n<parameter=days>\n7\n</parameter>\n<parameter=code>\nab\n"
		   "</parameter>\n<parameter=tags>\n[\"x\", \"y\"]\n</parameter>\n</function>\n</tool_call>");
	ACCEPTS(g, "<tool_call>\n<function=get_time>\n</function>\n</tool_call>");
	REFUSES(g, "<tool_call>\n<function=get_stock>\n</function>\n</tool_call>");
	REFUSES(g, "<tool_call>\n<function=get_weather>\n</function>\n</tool_call>"); /* city is required */
	REFUSES(g, "<tool_call>\n<function=get_weather>\n<parameter=city>\na</parameter>\nb\n</parameter>\n"
		   "</function>\n</tool_call>");
	REFUSES(g, "<tool_call>\n<function=get_weather>\n<parameter=city>\nx\n</parameter>\n<parameter=days>\n8\n"
		   "</parameter>\n</function>\n</tool_call>");
	REFUSES(g, "<tool_call>\n<function=get_weather>\n<parameter=city>\nx\n</parameter>\n<parameter=unit>\nk\n"
		   "</parameter>\n</function>\n</tool_call>");
	REFUSES(g, "<tool_call>\n<function=get_weather>\n<parameter=city>\nx\n</parameter>\n<parameter=code>\nabcd\n"
		   "</parameter>\n</function>\n</tool_call>");
	REFUSES(g, "<tool_call>\n<function=get_weather>\n<parameter=city>\nx\n</parameter>\n<parameter=tags>\n[\"z\"]\n"
		   "</parameter>\n</function>\n</tool_call>");
	/* one call only without parallel */
	REFUSES(g, "<tool_call>\n<function=get_time>\n</function>\n</tool_call>\n<tool_call>\n<function=get_time>\n"
		   "</function>\n</tool_call>");
	capy_grammar_free(g);

	o.parallel = true;
	g = grammar(&o);
	ACCEPTS(g, "<tool_call>\n<function=get_time>\n</function>\n</tool_call>\n<tool_call>\n<function=get_time>\n"
		   "</function>\n</tool_call>");
	capy_grammar_free(g);

	o = (struct capy_call_grammar_opts){ .syntax = CAPY_CALL_XML, .only = "get_weather" };
	g = grammar(&o);
	REFUSES(g, "<tool_call>\n<function=get_time>\n</function>\n</tool_call>");
	ACCEPTS(g, "<tool_call>\n<function=get_weather>\n<parameter=city>\nx\n</parameter>\n</function>\n</tool_call>");
	capy_grammar_free(g);
	o.opened = true; /* after a forced "<tool_call>\n<function=get_weather>\n" */
	g = grammar(&o);
	ACCEPTS(g, "<parameter=city>\nx\n</parameter>\n</function>\n</tool_call>");
	capy_grammar_free(g);
	o = (struct capy_call_grammar_opts){ .syntax = CAPY_CALL_XML, .reasoning = true };
	g = grammar(&o);
	ACCEPTS(g, "let me see: <b>x</b> </thin\n</think>\n\n<tool_call>\n<function=get_time>\n</function>\n</tool_call>");
	REFUSES(g, "a</think>b</think>\n\n<tool_call>\n<function=get_time>\n</function>\n</tool_call>");
	/* a call ends reasoning too (the parser's rule), so reasoning never holds <tool_call> */
	ACCEPTS(g, "hmm\n\n<tool_call>\n<function=get_time>\n</function>\n</tool_call>");
	ACCEPTS(g, "</think><tool_call>\n<function=get_time>\n</function>\n</tool_call>");
	REFUSES(g, "a <tool_call> b</think>\n\n<tool_call>\n<function=get_time>\n</function>\n</tool_call>");
	capy_grammar_free(g);
}

static void test_hermes(void)
{
	struct capy_call_grammar_opts o = { .syntax = CAPY_CALL_HERMES };
	struct capy_grammar *g = grammar(&o);

	ACCEPTS(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": 3}}\n</tool_call>");
	ACCEPTS(g, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>");
	REFUSES(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>");
	REFUSES(g, "<tool_call>\n{\"name\": \"get_stock\", \"arguments\": {}}\n</tool_call>");
	capy_grammar_free(g);
	o.only = "get_weather";
	o.opened = true; /* after a forced <tool_call>\n{"name": "get_weather", "arguments": */
	g = grammar(&o);
	ACCEPTS(g, "{\"city\": \"Oslo\"}}\n</tool_call>");
	REFUSES(g, "{}}\n</tool_call>");
	capy_grammar_free(g);
}

static void error_with(const char *tools, const struct capy_call_grammar_opts *o, const char *want)
{
	struct capy_err err = { 0 };
	char *text = NULL;
	int rc = capy_call_grammar(tools, strlen(tools), o, &text, &err);

	CHECK_MSG(rc < 0 && !text && strstr(err.msg, want), "got %d '%s', wanted '%s'", rc, err.msg, want);
	free(text);
}

static void test_errors(void)
{
	const char *bad = "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
			  "\"properties\":{\"a\":{\"type\":\"integer\",\"not\":{\"const\":1}}}}}}]";
	const char *strict_names[] = { "f" };
	struct capy_call_grammar_opts xml = { .syntax = CAPY_CALL_XML, .strict = strict_names, .n_strict = 1 };
	struct capy_call_grammar_opts hermes = { .syntax = CAPY_CALL_HERMES, .all_strict = true };
	struct capy_call_grammar_opts relaxed = { .syntax = CAPY_CALL_XML };
	struct capy_err err = { 0 };
	char *text = NULL;

	error_with(bad, &xml, "tool 'f': schema: /properties/a/not: ");
	error_with(bad, &hermes, "tool 'f': schema: /properties/a/not: ");
	CHECK(capy_call_grammar(bad, strlen(bad), &relaxed, &text, &err) == 0); /* relaxed: ignored */
	free(text);
	error_with("[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]", &xml, "tool 'a b': the name cannot");
	error_with("[{\"type\":\"function\",\"function\":{\"name\":\"a\\u0001b\"}}]", &hermes,
		   "tool 'a\\x01b': the name cannot be written in the hermes call syntax"); /* the parser would not read it */
	error_with("{}", &xml, "tools: not a list");
	error_with("[{\"type\":\"function\",\"function\":{\"name\":\"get_\xff\"}}]", &hermes,
		   "tools[0]: the function name is not valid UTF-8"); /* (found by fuzz-toolcall-grammar) */
	struct capy_call_grammar_opts nl = { .syntax = CAPY_CALL_XML, .only = "a\nb" };
	error_with(TOOLS, &nl, "tools: no function 'a\\nb'"); /* one line (found by fuzz-toolcall-grammar) */
	struct capy_call_grammar_opts only = { .syntax = CAPY_CALL_XML, .only = "zzz" };
	error_with(TOOLS, &only, "no function 'zzz'");
	error_with("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"properties\":{\"a\":"
		   "{\"type\":\"integer\",\"minimum\":\"x\"}}}}}]", &relaxed, "tool 'f': schema: /properties/a");
}

#define TIME_CALL "<tool_call>\n<function=get_time>\n</function>\n</tool_call>"
#define WEATHER_CALL "<tool_call>\n<function=get_weather>\n<parameter=city>\nx\n</parameter>\n</function>\n</tool_call>"

/* allowed_tools: calls of the listed tools only; with free_text (its mode auto) the answer may
 * be text with no call at all, reasoning first, and a call (or parallel ones) may end it,
 * "<tool_call>" appearing only as the start of an allowed call. */
static void test_allowed(void)
{
	static const char *const time_only[] = { "get_time" }, *const nothing[] = { "get_stock" };
	struct capy_call_grammar_opts o = { .syntax = CAPY_CALL_XML, .allowed = time_only, .n_allowed = 1 };
	struct capy_grammar *g = grammar(&o);

	ACCEPTS(g, TIME_CALL);
	REFUSES(g, WEATHER_CALL);
	REFUSES(g, "an answer");
	capy_grammar_free(g);
	o.free_text = true;
	g = grammar(&o);
	ACCEPTS(g, "");
	ACCEPTS(g, "Just an answer: <b>bold</b>, a < sign, </think> and <tool_cal x");
	REFUSES(g, "an answer ending in <tool_cal"); /* never inside a tag's start: stricter than the parser */
	ACCEPTS(g, "Let me look.\n\n" TIME_CALL);
	ACCEPTS(g, TIME_CALL);
	REFUSES(g, "Let me look.\n\n" WEATHER_CALL);
	REFUSES(g, "a <tool_call> b");
	REFUSES(g, TIME_CALL " and text after it");
	REFUSES(g, TIME_CALL "\n" TIME_CALL); /* one call without parallel */
	capy_grammar_free(g);
	o.parallel = o.reasoning = true;
	g = grammar(&o);
	ACCEPTS(g, "hmm</think>\n\nThe answer.");
	ACCEPTS(g, "hmm, cut short");
	ACCEPTS(g, "hmm</think>\n\n" TIME_CALL "\n" TIME_CALL);
	ACCEPTS(g, "hmm\n\n" TIME_CALL); /* a call ends reasoning too */
	REFUSES(g, "hmm</think>\n\n" WEATHER_CALL);
	capy_grammar_free(g);
	o = (struct capy_call_grammar_opts){ .syntax = CAPY_CALL_HERMES, .allowed = time_only, .n_allowed = 1,
					     .free_text = true };
	g = grammar(&o);
	ACCEPTS(g, "Sure.\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>");
	REFUSES(g, "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"x\"}}\n</tool_call>");
	capy_grammar_free(g);
	o.allowed = nothing;
	error_with(TOOLS, &o, "tools: none of the allowed tools is defined");
}

/* XML string parameters written raw hold their string keywords: pattern (a search, as
 * JSON Schema reads it, or anchored), format, enum, minLength/maxLength; never the value's
 * end "</parameter>" inside, and "<" only where an enum value has it. */
static void test_xml_raw_keywords(void)
{
	static const char tools[] =
		"[{\"type\":\"function\",\"function\":{\"name\":\"book\",\"parameters\":{\"type\":\"object\","
		"\"properties\":{\"code\":{\"type\":\"string\",\"pattern\":\"^[A-Z]{3}-[0-9]{2}$\"},"
		"\"day\":{\"type\":\"string\",\"format\":\"date\"},\"mail\":{\"type\":\"string\",\"format\":\"email\"},"
		"\"tag\":{\"type\":\"string\",\"enum\":[\"a<b>\",\"x y\",\"no</parameter>\"]},"
		"\"note\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":4},"
		"\"any\":{\"type\":\"string\",\"pattern\":\"ab\"},"
		"\"free\":{\"type\":\"string\",\"format\":\"uri\",\"description\":\"d\"}},"
		"\"required\":[\"code\"]}}}]";
	struct capy_call_grammar_opts o = { .syntax = CAPY_CALL_XML };
	struct capy_err err = { 0 };
	struct capy_grammar *g = NULL;
	char *text = NULL;

	CHECK_MSG(capy_call_grammar(tools, strlen(tools), &o, &text, &err) == 0, "%s", err.msg);
	if (text)
		CHECK_MSG(capy_grammar_compile(text, strlen(text), "root", &g, &err) == 0, "%s", err.msg);
	free(text);
#define CALL(params) "<tool_call>\n<function=book>\n<parameter=code>\nABC-12\n</parameter>\n" params \
		     "</function>\n</tool_call>"
#define P(k, v) "<parameter=" k ">\n" v "\n</parameter>\n"
	ACCEPTS(g, CALL(""));
	REFUSES(g, "<tool_call>\n<function=book>\n<parameter=code>\nabc-12\n</parameter>\n</function>\n</tool_call>");
	REFUSES(g, "<tool_call>\n<function=book>\n<parameter=code>\nABC-123\n</parameter>\n</function>\n</tool_call>");
	ACCEPTS(g, CALL(P("day", "2024-02-29")));
	REFUSES(g, CALL(P("day", "2023-02-29")));
	REFUSES(g, CALL(P("day", "\"2024-02-29\""))); /* raw: no quotes */
	ACCEPTS(g, CALL(P("mail", "a.b@example.org")));
	REFUSES(g, CALL(P("mail", "a.b")));
	ACCEPTS(g, CALL(P("tag", "a<b>")));
	ACCEPTS(g, CALL(P("tag", "x y")));
	REFUSES(g, CALL(P("tag", "x")));
	REFUSES(g, CALL(P("tag", "no</parameter>")));
	ACCEPTS(g, CALL(P("note", "\"q\"")));
	REFUSES(g, CALL(P("note", "q")));
	REFUSES(g, CALL(P("note", "qqqqq")));
	REFUSES(g, CALL(P("note", "q<")));
	ACCEPTS(g, CALL(P("any", "xx ab yy\nzz"))); /* unanchored: a search */
	REFUSES(g, CALL(P("any", "a b")));
	REFUSES(g, CALL(P("any", "ab </parameter> ab")));
	ACCEPTS(g, CALL(P("free", "http://x/?a=<b>"))); /* a format the compiler does not hold: free text */
#undef P
#undef CALL
	capy_grammar_free(g);
	/* strict: pattern with a length is refused, naming the place */
	struct capy_call_grammar_opts strict = { .syntax = CAPY_CALL_XML, .all_strict = true };
	error_with("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
		   "\"properties\":{\"s\":{\"type\":\"string\",\"pattern\":\"^a+$\",\"maxLength\":3}}}}}]",
		   &strict, "tool 'f': schema: /properties/s: \"maxLength\" together with \"pattern\" is not supported");
	error_with("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
		   "\"properties\":{\"s\":{\"type\":\"string\",\"pattern\":\"^<$\"}}}}}]",
		   &strict, "tool 'f': schema: /properties/s/pattern: pattern: a class of characters that cannot be written here at offset 1");
}

/* A random text of grammar g: printable ASCII and newlines; past 40 bytes it leans to
 * writing a closer whole (a tag, a quote, a bracket) where one fits, so that walks end. NULL
 * when one runs past the limit. */
static char *walk(const struct capy_grammar *g, struct capy_rng *rng)
{
	static const char *const closers[] = { "\n</parameter>\n", "</function>\n</tool_call>", "\"", "]", "}",
					       "0", "}\n</tool_call>" };
	struct capy_grammar_state *st = NULL, *nx = NULL;
	struct capy_err err = { 0 };
	char *out = malloc(4001), allowed[128];
	size_t n = 0;

	if (!out || capy_grammar_state_new(g, &st, &err) < 0 || capy_grammar_state_new(g, &nx, &err) < 0)
		goto fail;
	while (n < 3950) {
		int k = 0;
		bool closed = false;
		if (capy_grammar_finished(st) || (capy_grammar_accepting(st) && capy_rng_uniform(rng) < 0.3))
			break;
		if (n > 40 && capy_rng_uniform(rng) < 0.5) {
			size_t first = capy_rng_next(rng) % ARRAY_SIZE(closers);
			for (size_t i = 0; i < ARRAY_SIZE(closers) && !closed; i++) {
				const char *cl = closers[(first + i) % ARRAY_SIZE(closers)];
				if (capy_grammar_state_copy(nx, st, &err) < 0)
					goto fail;
				if (capy_grammar_feed(nx, cl, strlen(cl)) == strlen(cl)) {
					memcpy(out + n, cl, strlen(cl));
					n += strlen(cl);
					closed = true;
				}
			}
		}
		if (!closed) {
			for (int c = 9; c < 127; c++)
				if ((c == '\n' || c >= 32) && capy_grammar_step(nx, st, (unsigned char)c) == 1)
					allowed[k++] = (char)c;
			if (!k)
				goto fail;
			char c = allowed[capy_rng_next(rng) % (uint64_t)k];
			capy_grammar_step(nx, st, (unsigned char)c);
			out[n++] = c;
		}
		struct capy_grammar_state *t = st;
		st = nx;
		nx = t;
	}
	if (!capy_grammar_accepting(st))
		goto fail;
	out[n] = 0;
	capy_grammar_state_free(st);
	capy_grammar_state_free(nx);
	return out;
fail:
	capy_grammar_state_free(st);
	capy_grammar_state_free(nx);
	free(out);
	return NULL;
}

static void walks(enum capy_call_syntax syntax)
{
	struct capy_call_grammar_opts o = { .syntax = syntax, .parallel = true };
	struct capy_outparse_opts po = { .flags = CAPY_OUTPARSE_HOLD_CALLS, .tools_json = TOOLS };
	struct capy_grammar *g = grammar(&o);
	struct capy_rng rng;
	int done = 0;

	capy_rng_seed(&rng, 11 + (uint64_t)syntax);
	for (int i = 0; g && i < 200; i++) {
		struct capy_outparse_result r = { 0 };
		struct capy_err err = { 0 };
		char *text = walk(g, &rng);
		if (!text)
			continue;
		done++;
		CHECK_MSG(capy_outparse_parse(text, strlen(text), &po, &r, &err) == 0, "%s", err.msg);
		CHECK_MSG(r.n_calls >= 1 && r.content_len == 0, "%zu calls, content '%s' from\n%s", r.n_calls,
			  r.content ? r.content : "", text);
		for (size_t c = 0; c < r.n_calls; c++) {
			struct capy_outparse_call *call = &r.calls[c];
			cJSON *a = cJSON_ParseWithLength(call->arguments, call->arguments_len);
			bool weather = !strcmp(call->name, "get_weather");
			CHECK_MSG(!call->unknown && call->status == CAPY_OUTPARSE_CALL_OK, "%s", text);
			CHECK_MSG(cJSON_IsObject(a), "arguments %s from\n%s", call->arguments, text);
			if (weather) {
				const cJSON *d = cJSON_GetObjectItemCaseSensitive(a, "days");
				const cJSON *u = cJSON_GetObjectItemCaseSensitive(a, "unit");
				const cJSON *code = cJSON_GetObjectItemCaseSensitive(a, "code");
				CHECK_MSG(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(a, "city")), "%s", call->arguments);
				CHECK_MSG(!d || (cJSON_IsNumber(d) && d->valuedouble >= 1 && d->valuedouble <= 7), "%s",
					  call->arguments);
				CHECK_MSG(!u || (cJSON_IsString(u) && strchr("cf", u->valuestring[0]) && !u->valuestring[1]),
					  "%s", call->arguments);
				CHECK_MSG(!code || (cJSON_IsString(code) && strlen(code->valuestring) <= 3), "%s",
					  call->arguments);
			} else {
				CHECK_MSG(!strcmp(call->name, "get_time") && cJSON_GetArraySize(a) == 0, "%s %s",
					  call->name, call->arguments);
			}
			cJSON_Delete(a);
		}
		capy_outparse_result_release(&r);
		free(text);
	}
	CHECK_MSG(done >= 150, "%s: only %d of 200 walks ended", syntax == CAPY_CALL_XML ? "xml" : "hermes", done);
	capy_grammar_free(g);
}

static void test_walks(void)
{
	walks(CAPY_CALL_XML);
	walks(CAPY_CALL_HERMES);
}

int main(void)
{
	RUN(test_xml);
	RUN(test_hermes);
	RUN(test_errors);
	RUN(test_allowed);
	RUN(test_xml_raw_keywords);
	RUN(test_walks);
	return test_summary();
}
