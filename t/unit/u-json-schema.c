/* u-json-schema.c - the JSON Schema compiler (libcore/constrain/json-schema.h): schemas
 * compiled to grammars that accept the documents the schema allows and refuse the others
 * (fed to the matcher byte by byte), each keyword of the subset, whitespace and length
 * limits, recursion through $ref, errors that name the JSON pointer, regexes alone
 * (capy_regex_to_gbnf) and strings written raw (opts.raw), and every schema of the
 * corpus t/fixtures/schemas compiling in strict mode (relaxed for those that list a keyword
 * we cannot hold). */
#include "test.h"
#include "constrain/grammar.h"
#include "constrain/json-schema.h"
#include "util/buf.h"

#include <dirent.h>

static const struct capy_schema_opts strict = { .strict = true }, relaxed = { 0 };

static struct capy_grammar *compile_with(const char *schema, const struct capy_schema_opts *opts)
{
	struct capy_grammar *g = NULL;
	struct capy_err err = { 0 };

	CHECK_MSG(capy_json_schema_compile(schema, strlen(schema), opts, &g, &err) == 0, "%s: %s", schema, err.msg);
	return g;
}

static struct capy_grammar *compile(const char *schema)
{
	return compile_with(schema, &strict);
}

/* How many bytes of doc the grammar takes, and whether all of it is a whole document. */
static size_t feed(const struct capy_grammar *g, const char *doc, size_t n, bool *whole)
{
	struct capy_grammar_state *st = NULL;
	struct capy_err err = { 0 };

	if (capy_grammar_state_new(g, &st, &err) < 0) {
		CHECK_MSG(0, "%s", err.msg);
		*whole = false;
		return 0;
	}
	size_t k = capy_grammar_feed(st, doc, n);
	*whole = k == n && capy_grammar_accepting(st);
	capy_grammar_state_free(st);
	return k;
}

static void accepts(const struct capy_grammar *g, const char *doc)
{
	bool whole;
	size_t k = g ? feed(g, doc, strlen(doc), &whole) : 0;

	CHECK_MSG(g && whole, "'%s' refused at byte %zu", doc, k);
}

static void refuses(const struct capy_grammar *g, const char *doc)
{
	bool whole = false;

	if (g)
		feed(g, doc, strlen(doc), &whole);
	CHECK_MSG(g && !whole, "'%s' accepted", doc);
}

/* The schema is refused with a message holding want. */
static void error_with(const char *schema, const struct capy_schema_opts *opts, const char *want)
{
	char *gbnf = NULL;
	struct capy_err err = { 0 };
	int rc = capy_json_schema_to_gbnf(schema, strlen(schema), opts, &gbnf, &err);

	CHECK_MSG(rc < 0 && !gbnf && strstr(err.msg, want), "%s: got %d \"%s\", wanted \"%s\"", schema, rc, err.msg, want);
	CHECK_MSG(!strchr(err.msg, '\n'), "a message of one line: %s", err.msg);
	free(gbnf);
}

static void test_types(void)
{
	struct capy_grammar *g;

	if ((g = compile("{\"type\": \"string\"}"))) {
		accepts(g, "\"\"");
		accepts(g, "\"a \\\"b\\\" \\\\ \\n \\u00e9 caf\xc3\xa9\"");
		refuses(g, "\"tab\there\"");  /* a raw control character */
		refuses(g, "\"\\ud83d\\ude00\""); /* surrogate escapes: write the character */
		refuses(g, "\"\\x41\"");
		refuses(g, "12");
		capy_grammar_free(g);
	}
	if ((g = compile("{\"type\": \"integer\"}"))) {
		accepts(g, "0");
		accepts(g, "-42");
		accepts(g, "1234567890123456");
		refuses(g, "12345678901234567"); /* 17 digits: more than we let a model write */
		refuses(g, "01");
		refuses(g, "1.5");
		capy_grammar_free(g);
	}
	if ((g = compile("{\"type\": \"number\"}"))) {
		accepts(g, "-0.5e-10");
		accepts(g, "3");
		accepts(g, "2.25E+2");
		refuses(g, "1e100"); /* three exponent digits could overflow a double */
		refuses(g, ".5");
		refuses(g, "NaN");
		capy_grammar_free(g);
	}
	if ((g = compile("{\"type\": [\"boolean\", \"null\"]}"))) {
		accepts(g, "true");
		accepts(g, "null");
		refuses(g, "\"true\"");
		capy_grammar_free(g);
	}
	if ((g = compile("{}"))) {
		accepts(g, "{\"any\": [1, {\"x\": null}], \"b\": \"c\"}");
		accepts(g, "\"s\"");
		capy_grammar_free(g);
	}
	if ((g = compile("true"))) {
		accepts(g, "[]");
		capy_grammar_free(g);
	}
}

static void test_objects(void)
{
	struct capy_grammar *g;

	g = compile("{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}, \"b\": {\"type\": \"string\"},"
		    " \"c\": {\"type\": \"boolean\"}}, \"required\": [\"b\"]}");
	accepts(g, "{\"b\": \"x\"}");
	accepts(g, "{\"a\": 1, \"b\": \"x\", \"c\": true}");
	accepts(g, "{\"b\": \"x\", \"c\": false}");
	refuses(g, "{}");                           /* b is required */
	refuses(g, "{\"b\": \"x\", \"a\": 1}");      /* the order of properties */
	refuses(g, "{\"b\": \"x\", \"d\": 1}");      /* no additionalProperties: no other keys */
	refuses(g, "{\"a\": 1, \"a\": 2, \"b\": \"x\"}");
	refuses(g, "{\"b\": \"x\",}");
	capy_grammar_free(g);
	g = compile("{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}, \"additionalProperties\": true}");
	accepts(g, "{\"a\": 1, \"b\": [true]}");
	accepts(g, "{\"zz\": {}, \"ab\": 2}");
	accepts(g, "{\"\": 0}");
	refuses(g, "{\"a\": 1, \"a\": 2}"); /* another key is not a listed one */
	refuses(g, "{\"x\": 1, \"a\": 2}");  /* listed ones come first */
	refuses(g, "{\"\\u0061\": \"x\"}");   /* not "a" spelled with an escape either */
	capy_grammar_free(g);
	g = compile("{\"properties\": {\"ab\": {}, \"a\": {}}, \"additionalProperties\": {\"type\": \"integer\"}}");
	accepts(g, "{\"abc\": 1, \"b\": 2}");
	accepts(g, "{\"ab\": \"s\", \"x\\\"y\": 3}");
	refuses(g, "{\"abc\": \"s\"}");
	refuses(g, "{\"q\": 1, \"a\": 1}");
	capy_grammar_free(g);
	/* {"type": "object"} alone: any object; properties {}: only the empty one */
	g = compile("{\"type\": \"object\"}");
	accepts(g, "{\"k\": [1, 2]}");
	capy_grammar_free(g);
	g = compile("{\"type\": \"object\", \"properties\": {}}");
	accepts(g, "{}");
	refuses(g, "{\"k\": 1}");
	capy_grammar_free(g);
	/* a required name that properties does not list: a member with any value, last */
	g = compile("{\"properties\": {\"a\": {\"type\": \"string\"}}, \"required\": [\"a\", \"z\"]}");
	accepts(g, "{\"a\": \"\", \"z\": [null]}");
	refuses(g, "{\"a\": \"\"}");
	capy_grammar_free(g);
	/* names that need escapes, and non-ASCII ones */
	g = compile("{\"properties\": {\"q\\\"t\": {\"const\": 1}, \"caf\xc3\xa9\": {\"const\": 2}, \"a/b~c\": {\"const\": 3}},"
		    " \"required\": [\"q\\\"t\", \"caf\xc3\xa9\", \"a/b~c\"]}");
	accepts(g, "{\"q\\\"t\": 1, \"caf\xc3\xa9\": 2, \"a/b~c\": 3}");
	capy_grammar_free(g);
	/* a property whose schema is false must not appear, even with other keys allowed */
	g = compile("{\"properties\": {\"x\": false, \"y\": {}}, \"additionalProperties\": true}");
	accepts(g, "{\"y\": 1, \"z\": 2}");
	refuses(g, "{\"x\": 1}");
	capy_grammar_free(g);
}

static void test_whitespace(void)
{
	struct capy_grammar *g = compile("{\"properties\": {\"a\": {\"type\": \"array\"}}, \"required\": [\"a\"]}");
	struct capy_schema_opts compact = { .strict = true, .compact = true };
	char doc[128];

	accepts(g, "{\"a\":[]}");
	accepts(g, "{ \"a\" : [ 1 , 2 ] }");
	accepts(g, "{\n  \"a\": [\n\t\t1\n  ]\n}");
	refuses(g, "{  \"a\": []}");   /* two spaces */
	refuses(g, "{\n\n\"a\": []}"); /* two newlines */
	refuses(g, " {\"a\": []}");    /* nothing before the document */
	refuses(g, "{\"a\": []} ");    /* or after it */
	snprintf(doc, sizeof(doc), "{\n%32s\"a\": []}", "");
	accepts(g, doc);
	snprintf(doc, sizeof(doc), "{\n%33s\"a\": []}", "");
	refuses(g, doc); /* an indent of 33 */
	capy_grammar_free(g);
	g = compile_with("{\"properties\": {\"a\": {\"type\": \"array\"}}, \"required\": [\"a\"]}", &compact);
	accepts(g, "{\"a\":[1,{\"b\":2}]}");
	refuses(g, "{\"a\": []}");
	refuses(g, "{\"a\":[1, 2]}");
	capy_grammar_free(g);
}

/* A prefix renames every rule (the root too), so two schemas' grammars embed side by side
 * in one grammar and each still matches exactly what it did alone. */
static void test_prefix(void)
{
	const char *a = "{\"properties\": {\"n\": {\"type\": \"integer\", \"minimum\": 3}}, \"required\": [\"n\"]}";
	const char *b = "{\"type\": \"array\", \"items\": {\"enum\": [\"x\", \"y\"]}, \"maxItems\": 2}";
	struct capy_schema_opts pa = { .strict = true, .prefix = "a-" }, pb = { .strict = true, .prefix = "b-" };
	char *ga = NULL, *gb = NULL;
	struct capy_grammar *g = NULL;
	struct capy_err err = { 0 };
	struct capy_buf text = { 0 };

	CHECK(capy_json_schema_to_gbnf(a, strlen(a), &pa, &ga, &err) == 0);
	CHECK(capy_json_schema_to_gbnf(b, strlen(b), &pb, &gb, &err) == 0);
	if (!ga || !gb)
		goto out;
	CHECK(!strncmp(ga, "a-root ::= ", 11));
	/* every rule defined is a prefixed one */
	for (const char *line = ga; *line; line = strchr(line, '\n') + 1) {
		CHECK_MSG(!strncmp(line, "a-", 2), "an unprefixed rule: %.40s", line);
		if (!strchr(line, '\n'))
			break;
	}
	capy_buf_printf(&text, "root ::= a-root \" \" b-root\n%s%s", ga, gb);
	CHECK_MSG(capy_grammar_compile(text.data, text.len, "root", &g, &err) == 0, "%s", err.msg);
	accepts(g, "{\"n\": 3} [\"x\", \"y\"]");
	accepts(g, "{\"n\":12} []");
	refuses(g, "{\"n\": 2} []");
	refuses(g, "{\"n\": 3} [\"x\", \"y\", \"x\"]");
	capy_grammar_free(g);
	g = compile_with(a, &pa); /* compiled straight: the root is a-root */
	accepts(g, "{\"n\": 4}");
	capy_grammar_free(g);
out:
	capy_buf_release(&text);
	free(ga);
	free(gb);
}

static void test_strings(void)
{
	struct capy_grammar *g = compile("{\"type\": \"string\", \"minLength\": 2, \"maxLength\": 3}");
	char *doc = malloc(6002);

	accepts(g, "\"ab\"");
	accepts(g, "\"\\n\xc3\xa9\\u0041\""); /* three characters, however they are written */
	refuses(g, "\"a\"");
	refuses(g, "\"abcd\"");
	capy_grammar_free(g);
	/* lengths beyond the grammar compiler's counts are split into blocks */
	g = compile("{\"type\": \"string\", \"minLength\": 5000, \"maxLength\": 5003}");
	for (size_t n = 4999; n <= 5004 && doc; n++) {
		doc[0] = '"';
		memset(doc + 1, 'x', n);
		doc[n + 1] = '"';
		doc[n + 2] = 0;
		if (n >= 5000 && n <= 5003)
			accepts(g, doc);
		else
			refuses(g, doc);
	}
	capy_grammar_free(g);
	g = compile("{\"type\": \"string\", \"maxLength\": 524288}");
	accepts(g, "\"short\"");
	capy_grammar_free(g);
	free(doc);
}

static void test_formats(void)
{
	struct capy_grammar *g = compile("{\"type\": \"string\", \"format\": \"date\"}");

	accepts(g, "\"2024-02-29\"");
	accepts(g, "\"2000-02-29\"");
	accepts(g, "\"1999-12-31\"");
	accepts(g, "\"0001-01-01\"");
	refuses(g, "\"2023-02-29\"");
	refuses(g, "\"1900-02-29\"");
	refuses(g, "\"2024-04-31\"");
	refuses(g, "\"0000-01-01\"");
	refuses(g, "\"2024-13-01\"");
	capy_grammar_free(g);
	g = compile("{\"format\": \"date-time\"}");
	accepts(g, "\"2026-12-01T08:30:00Z\"");
	accepts(g, "\"2026-12-01T23:59:59.123456789+05:30\"");
	refuses(g, "\"2026-12-01 08:30:00Z\"");
	refuses(g, "\"2026-12-01T24:00:00Z\"");
	refuses(g, "\"2026-12-01T08:30:00\""); /* RFC 3339 asks for the offset */
	capy_grammar_free(g);
	g = compile("{\"type\": \"string\", \"format\": \"time\"}");
	accepts(g, "\"08:30:00-01:00\"");
	refuses(g, "\"8:30:00Z\"");
	capy_grammar_free(g);
	g = compile("{\"type\": \"string\", \"format\": \"uuid\"}");
	accepts(g, "\"123e4567-e89b-12d3-A456-426614174000\"");
	refuses(g, "\"123e4567e89b12d3a456426614174000\"");
	capy_grammar_free(g);
	g = compile("{\"type\": \"string\", \"format\": \"email\"}");
	accepts(g, "\"first.last+tag@mail.example.org\"");
	refuses(g, "\"no-at-sign\"");
	refuses(g, "\"a@\"");
	capy_grammar_free(g);
	g = compile("{\"type\": \"string\", \"format\": \"ipv4\"}");
	accepts(g, "\"192.168.0.255\"");
	refuses(g, "\"256.1.1.1\"");
	refuses(g, "\"01.1.1.1\"");
	capy_grammar_free(g);
	/* formats we do not know are annotations */
	g = compile("{\"type\": \"string\", \"format\": \"uri\"}");
	accepts(g, "\"anything\"");
	capy_grammar_free(g);
}

static void test_patterns(void)
{
	struct capy_grammar *g = compile("{\"type\": \"string\", \"pattern\": \"^wf_[a-z0-9-]{6,}$\"}");

	accepts(g, "\"wf_abc-123\"");
	refuses(g, "\"wf_abc\"");
	refuses(g, "\"xwf_abcdefg\"");
	capy_grammar_free(g);
	g = compile("{\"pattern\": \"ab+c\"}"); /* unanchored: anything around it */
	accepts(g, "\"xxabbbc yy\"");
	accepts(g, "\"abc\"");
	refuses(g, "\"ac\"");
	capy_grammar_free(g);
	g = compile("{\"pattern\": \"^(?:\\\\d{3}-)?\\\\d{4}$|^none$\"}");
	accepts(g, "\"555-1234\"");
	accepts(g, "\"1234\"");
	accepts(g, "\"none\"");
	refuses(g, "\"55-1234\"");
	capy_grammar_free(g);
	/* characters a JSON string escapes: the regex sees them decoded */
	g = compile("{\"pattern\": \"^say \\\"[^\\\"]*\\\"\\\\.$\"}");
	accepts(g, "\"say \\\"hi\\\".\"");
	refuses(g, "\"say \\\"h\\\"i\\\".\"");
	capy_grammar_free(g);
	g = compile("{\"pattern\": \"^[\\\\w.]+\\\\s\\\\S$\"}");
	accepts(g, "\"a.b_1 x\"");
	refuses(g, "\"a.b_1 \xc3\xa9\""); /* \S is ASCII here */
	capy_grammar_free(g);
	g = compile("{\"pattern\": \"^.{2}$\"}");
	accepts(g, "\"\xc3\xa9\\\"\"");
	refuses(g, "\"a\\n\""); /* . is not a line terminator */
	capy_grammar_free(g);
	error_with("{\"pattern\": \"^(?=a)\"}", &strict, "schema: /pattern: pattern: lookahead is not supported");
	error_with("{\"pattern\": \"(a)\\\\1\"}", &strict, "backreferences are not supported");
	error_with("{\"pattern\": \"\\\\bword\"}", &strict, "word boundaries");
	error_with("{\"pattern\": \"a^b\"}", &strict, "supported only at the ends");
	error_with("{\"pattern\": \"(a*)+\"}", &strict, "a repetition of something that can match the empty string");
	error_with("{\"pattern\": \"(ab\"}", &strict, "unclosed group");
	/* relaxed: a pattern we cannot translate leaves any string */
	g = compile_with("{\"type\": \"string\", \"pattern\": \"^(?!x)\"}", &relaxed);
	accepts(g, "\"x\"");
	capy_grammar_free(g);
}

/* A regex alone (capy_regex_to_gbnf) as a grammar; NULL and a failed check on an error. */
static struct capy_grammar *regex(const char *re)
{
	struct capy_grammar *g = NULL;
	struct capy_err err = { 0 };
	char *gbnf = NULL;

	CHECK_MSG(capy_regex_to_gbnf(re, strlen(re), &gbnf, &err) == 0, "%s: %s", re, err.msg);
	if (gbnf)
		CHECK_MSG(capy_grammar_compile(gbnf, strlen(gbnf), "root", &g, &err) == 0, "%s: %s\n%s", re, err.msg, gbnf);
	free(gbnf);
	return g;
}

/* The regex is refused with exactly this message. */
static void regex_error(const char *re, size_t len, int code, const char *want)
{
	char *gbnf = NULL;
	struct capy_err err = { 0 };
	int rc = capy_regex_to_gbnf(re, len, &gbnf, &err);

	CHECK_MSG(rc == code && !gbnf && !strcmp(err.msg, want), "%s: got %d \"%s\", wanted %d \"%s\"", re, rc, err.msg,
		  code, want);
	free(gbnf);
}

/* Regexes alone: matched whole, the text raw (quotes, backslashes and controls as they are),
 * errors naming the offset. */
static void test_regex(void)
{
	struct capy_grammar *g = regex("ab+c");

	accepts(g, "abbbc");
	refuses(g, "xabc"); /* whole, not a search */
	refuses(g, "abcx");
	refuses(g, "\"abc\"");
	capy_grammar_free(g);
	g = regex("^(?:\\d{3}-)?\\d{4}$|none");
	accepts(g, "555-1234");
	accepts(g, "1234");
	accepts(g, "none");
	refuses(g, "none!");
	capy_grammar_free(g);
	g = regex("say \"[^\"]*\"\\.\\\\[\\n\\t]");
	accepts(g, "say \"hi\".\\\n");
	refuses(g, "say \\\"hi\\\".\\\n");
	capy_grammar_free(g);
	g = regex("[^a]\xc3\xa9+.?");
	accepts(g, "\n\xc3\xa9\xc3\xa9");
	accepts(g, "<\xc3\xa9<");
	refuses(g, "a\xc3\xa9");
	capy_grammar_free(g);
	g = regex("");
	accepts(g, "");
	refuses(g, "a");
	capy_grammar_free(g);
	regex_error("a(?=b)", 6, CAPY_EUNSUPPORTED, "regex: lookahead is not supported at offset 1");
	regex_error("x(a*)+", 6, CAPY_EUNSUPPORTED,
		    "regex: a repetition of something that can match the empty string is not supported at offset 1");
	regex_error("ab(c", 4, CAPY_EFORMAT, "regex: unclosed group at offset 4");
	regex_error("a\\p{L}", 6, CAPY_EUNSUPPORTED, "regex: Unicode property escapes (\\p, \\P) are not supported at offset 2");
	regex_error("(a)\\1", 5, CAPY_EUNSUPPORTED, "regex: backreferences are not supported at offset 4");
	regex_error("a^b", 3, CAPY_EUNSUPPORTED, "regex: an anchor (^ or $) is supported only at the ends of the pattern at offset 1");
	regex_error("[b-a]", 5, CAPY_EFORMAT, "regex: a range runs backwards at offset 4");
	regex_error("a\0b", 3, CAPY_EFORMAT, "regex: a NUL byte at offset 1");
}

/* Strings written raw (opts.raw): the characters themselves, every string keyword held;
 * raw_stop's text never inside (its first character never written but in enum values). */
static void test_raw_strings(void)
{
	static const struct capy_schema_opts raw = { .strict = true, .raw = true },
					     xml = { .strict = true, .raw = true, .raw_stop = "</parameter>" },
					     relaxed_xml = { .raw = true, .raw_stop = "</parameter>" };
	struct capy_grammar *g = compile_with("{\"type\": \"string\", \"pattern\": \"^[a-z]+ \\\"q\\\"$\"}", &raw);

	accepts(g, "abc \"q\"");
	refuses(g, "\"abc \\\"q\\\"\"");
	capy_grammar_free(g);
	g = compile_with("{\"type\": \"string\", \"pattern\": \"a.b\"}", &xml); /* a search: anything around */
	accepts(g, "x a-b y\n");
	refuses(g, "a<b");
	refuses(g, "a-b <");
	capy_grammar_free(g);
	g = compile_with("{\"type\": \"string\", \"format\": \"date\"}", &xml);
	accepts(g, "2024-02-29");
	refuses(g, "2023-02-29");
	refuses(g, "\"2024-02-29\"");
	capy_grammar_free(g);
	g = compile_with("{\"enum\": [\"x y\", \"a</parameter>b\", \"q\\\"<r\", 3]}", &xml);
	accepts(g, "x y");
	accepts(g, "q\"<r");
	refuses(g, "a</parameter>b");
	refuses(g, "3");
	capy_grammar_free(g);
	g = compile_with("{\"type\": \"string\", \"minLength\": 2, \"maxLength\": 3}", &xml);
	accepts(g, "a\"\n");
	refuses(g, "a");
	refuses(g, "abcd");
	refuses(g, "a<");
	capy_grammar_free(g);
	g = compile_with("{\"type\": \"string\", \"maxLength\": 0}", &xml);
	accepts(g, "");
	refuses(g, "a");
	capy_grammar_free(g);
	g = compile_with("{\"type\": [\"string\", \"integer\"], \"maxLength\": 2}", &raw); /* its strings */
	accepts(g, "ab");
	refuses(g, "abc");
	capy_grammar_free(g);
	g = compile_with("{\"anyOf\": [{\"const\": \"a\"}, {\"pattern\": \"^b+$\"}]}", &xml);
	accepts(g, "a");
	accepts(g, "bbb");
	refuses(g, "ab");
	capy_grammar_free(g);
	g = compile_with("{\"type\": \"string\"}", &raw);
	accepts(g, "any \"<text>\"\n\\");
	capy_grammar_free(g);
	error_with("{\"type\": \"integer\"}", &xml, "schema: (root): a value written as raw text must be a string");
	error_with("{\"type\": \"string\", \"pattern\": \"^<b>$\"}", &xml,
		   "schema: /pattern: pattern: a class of characters that cannot be written here at offset 1");
	g = compile_with("{\"type\": \"string\", \"pattern\": \"^<b>$\"}", &relaxed_xml); /* relaxed: any raw text */
	accepts(g, "b>");
	capy_grammar_free(g);
}

static void test_numbers(void)
{
	struct capy_grammar *g = compile("{\"type\": \"integer\", \"minimum\": 0}");

	accepts(g, "0");
	accepts(g, "9999999999999999");
	refuses(g, "-1");
	capy_grammar_free(g);
	g = compile("{\"type\": \"integer\", \"exclusiveMinimum\": 0, \"maximum\": 9007199254740991}");
	accepts(g, "1");
	accepts(g, "9007199254740991");
	refuses(g, "0");
	refuses(g, "9007199254740992");
	capy_grammar_free(g);
	g = compile("{\"type\": \"integer\", \"minimum\": -15, \"maximum\": 120}");
	for (int v = -20; v <= 130; v++) {
		char doc[16];
		snprintf(doc, sizeof(doc), "%d", v);
		if (v >= -15 && v <= 120)
			accepts(g, doc);
		else
			refuses(g, doc);
	}
	refuses(g, "-0");
	capy_grammar_free(g);
	g = compile("{\"type\": \"integer\", \"minimum\": 2.5, \"exclusiveMaximum\": 7}"); /* 3..6 */
	accepts(g, "3");
	accepts(g, "6");
	refuses(g, "2");
	refuses(g, "7");
	capy_grammar_free(g);
	g = compile("{\"type\": \"number\", \"minimum\": 0, \"maximum\": 1}");
	accepts(g, "0");
	accepts(g, "0.25");
	accepts(g, "1");
	refuses(g, "1.5");
	refuses(g, "1.0001");
	refuses(g, "-0.1");
	refuses(g, "2e-1"); /* bounded numbers have no exponent */
	capy_grammar_free(g);
	g = compile("{\"type\": \"number\", \"exclusiveMinimum\": -2, \"exclusiveMaximum\": 0}");
	accepts(g, "-1.999");
	accepts(g, "-0.5");
	accepts(g, "-1");
	refuses(g, "-2");
	refuses(g, "0");
	refuses(g, "-0.0");
	capy_grammar_free(g);
	g = compile("{\"type\": \"number\", \"minimum\": 0, \"exclusiveMinimum\": true}"); /* draft 4 */
	accepts(g, "0.5");
	refuses(g, "0");
	capy_grammar_free(g);
	error_with("{\"type\": \"integer\", \"minimum\": 5, \"maximum\": 4}", &strict, "no integer lies within minimum/maximum");
	error_with("{\"type\": \"number\", \"maximum\": 0.5}", &strict,
		   "schema: /maximum: a bound of a number that is not an integer is not supported");
}

static void test_arrays(void)
{
	struct capy_grammar *g = compile("{\"type\": \"array\", \"items\": {\"type\": \"integer\"}, \"minItems\": 1, \"maxItems\": 3}");

	accepts(g, "[1]");
	accepts(g, "[1, 2, 3]");
	refuses(g, "[]");
	refuses(g, "[1, 2, 3, 4]");
	refuses(g, "[\"a\"]");
	capy_grammar_free(g);
	g = compile("{\"prefixItems\": [{\"type\": \"string\"}, {\"type\": \"integer\"}], \"items\": false}");
	accepts(g, "[]");
	accepts(g, "[\"a\"]");
	accepts(g, "[\"a\", 1]");
	refuses(g, "[\"a\", 1, 2]");
	refuses(g, "[1]");
	capy_grammar_free(g);
	g = compile("{\"items\": [{\"const\": \"x\"}], \"additionalItems\": {\"type\": \"boolean\"}, \"minItems\": 2}");
	accepts(g, "[\"x\", true]");
	accepts(g, "[\"x\", true, false]");
	refuses(g, "[\"x\"]");
	refuses(g, "[\"x\", 1]");
	capy_grammar_free(g);
	g = compile("{\"type\": \"array\", \"maxItems\": 0}");
	accepts(g, "[]");
	refuses(g, "[1]");
	capy_grammar_free(g);
	g = compile("{\"type\": \"array\", \"items\": {\"type\": \"null\"}, \"minItems\": 300, \"maxItems\": 5000}");
	{
		char *doc = malloc(6 * 5001 + 3);
		size_t n = 0;
		doc[n++] = '[';
		for (int i = 0; i < 5000; i++)
			n += (size_t)snprintf(doc + n, 8, "%snull", i ? "," : "");
		doc[n++] = ']';
		doc[n] = 0;
		accepts(g, doc);
		memcpy(doc + n - 1, ",null]", 7);
		refuses(g, doc);
		free(doc);
	}
	capy_grammar_free(g);
}

static void test_values_and_combinations(void)
{
	struct capy_grammar *g = compile("{\"enum\": [\"red\", 7, null, {\"a\": [1]}]}");

	accepts(g, "\"red\"");
	accepts(g, "7");
	accepts(g, "null");
	accepts(g, "{\"a\":[1]}");
	refuses(g, "\"blue\"");
	capy_grammar_free(g);
	g = compile("{\"type\": \"string\", \"enum\": [\"a\", 1]}"); /* values of the wrong type go */
	accepts(g, "\"a\"");
	refuses(g, "1");
	capy_grammar_free(g);
	g = compile("{\"anyOf\": [{\"type\": \"string\"}, {\"type\": \"integer\", \"minimum\": 10}]}");
	accepts(g, "\"s\"");
	accepts(g, "12");
	refuses(g, "5");
	capy_grammar_free(g);
	/* keywords beside anyOf apply to every branch */
	g = compile("{\"type\": \"object\", \"properties\": {\"kind\": {\"type\": \"string\"}}, \"required\": [\"kind\"],"
		    " \"oneOf\": [{\"properties\": {\"kind\": {\"const\": \"a\"}}}, {\"properties\": {\"kind\": {\"const\": \"b\"}}}]}");
	accepts(g, "{\"kind\": \"a\"}");
	accepts(g, "{\"kind\": \"b\"}");
	refuses(g, "{\"kind\": \"c\"}");
	refuses(g, "{}");
	capy_grammar_free(g);
	g = compile("{\"allOf\": [{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}, \"required\": [\"a\"]},"
		    " {\"properties\": {\"b\": {\"type\": \"string\"}, \"a\": {\"minimum\": 0}}, \"required\": [\"b\"]}]}");
	accepts(g, "{\"a\": 1, \"b\": \"x\"}");
	refuses(g, "{\"a\": -1, \"b\": \"x\"}");
	refuses(g, "{\"a\": 1}");
	capy_grammar_free(g);
	g = compile("{\"allOf\": [{\"enum\": [1, 2, 3]}, {\"enum\": [2, 3, 4]}, {\"not_a_keyword\": 1}]}");
	accepts(g, "2");
	accepts(g, "3");
	refuses(g, "1");
	capy_grammar_free(g);
	error_with("{\"allOf\": [{\"type\": \"string\"}, {\"type\": \"integer\"}]}", &strict, "allOf: no type satisfies");
}

static void test_refs(void)
{
	struct capy_grammar *g = compile(
		"{\"$defs\": {\"node\": {\"type\": \"object\", \"properties\": {\"value\": {\"type\": \"integer\"},"
		" \"children\": {\"type\": \"array\", \"items\": {\"$ref\": \"#/$defs/node\"}}}, \"required\": [\"value\"],"
		" \"additionalProperties\": false}}, \"$ref\": \"#/$defs/node\"}");

	accepts(g, "{\"value\": 1}");
	accepts(g, "{\"value\": 1, \"children\": [{\"value\": 2, \"children\": [{\"value\": 3, \"children\": []}]}, {\"value\": 4}]}");
	refuses(g, "{\"value\": 1, \"children\": [{\"children\": []}]}");
	capy_grammar_free(g);
	/* definitions (draft 7), a ref with a sibling assertion, and # (the root) */
	g = compile("{\"definitions\": {\"s\": {\"type\": \"string\"}}, \"type\": \"object\","
		    " \"properties\": {\"name\": {\"$ref\": \"#/definitions/s\", \"maxLength\": 2, \"description\": \"x\"},"
		    " \"next\": {\"$ref\": \"#\"}}}");
	accepts(g, "{\"name\": \"ab\", \"next\": {\"next\": {}}}");
	refuses(g, "{\"name\": \"abc\"}");
	refuses(g, "{\"name\": 1}");
	capy_grammar_free(g);
	/* a linked list through anyOf with null */
	g = compile("{\"$defs\": {\"list\": {\"anyOf\": [{\"type\": \"null\"}, {\"type\": \"array\", \"prefixItems\": [{\"type\": \"integer\"},"
		    " {\"$ref\": \"#/$defs/list\"}], \"items\": false, \"minItems\": 2}]}}, \"$ref\": \"#/$defs/list\"}");
	accepts(g, "[1, [2, [3, null]]]");
	refuses(g, "[1, [2]]");
	capy_grammar_free(g);
	error_with("{\"$defs\": {\"a\": {\"anyOf\": [{\"$ref\": \"#/$defs/a\"}, {\"type\": \"null\"}]}}, \"$ref\": \"#/$defs/a\"}",
		   &strict, "comes back to itself without reading anything");
	error_with("{\"$ref\": \"#/$defs/missing\"}", &strict, "schema: /$ref: $ref \"#/$defs/missing\" points at nothing");
	error_with("{\"$ref\": \"other.json#/x\"}", &strict, "only local JSON pointers");
	error_with("{\"$defs\": {\"a\": {\"allOf\": [{\"$ref\": \"#/$defs/a\"}]}}, \"$ref\": \"#/$defs/a\"}", &strict, "deep");
}

static void test_errors(void)
{
	struct capy_grammar *g;

	error_with("{\"properties\": {\"x\": {\"not\": {\"type\": \"string\"}}}}", &strict,
		   "schema: /properties/x/not: keyword \"not\" is not supported");
	error_with("{\"type\": \"array\", \"items\": {\"uniqueItems\": true}}", &strict,
		   "schema: /items/uniqueItems: keyword \"uniqueItems\" is not supported");
	error_with("{\"type\": \"object\", \"patternProperties\": {\"^x\": {}}}", &strict, "keyword \"patternProperties\"");
	error_with("{\"type\": \"strng\"}", &strict, "schema: /type: \"type\" must be one of");
	error_with("{\"properties\": {\"a\\nb\": {\"type\": 1}}}", &strict, "schema: /properties/a\\nb/type:"); /* one line */
	error_with("{\"type\": \"string\", \"minLength\": -1}", &strict, "schema: /minLength: \"minLength\" must be a non-negative integer");
	error_with("{\"properties\": {\"a\": 5}}", &strict, "schema: /properties/a: a schema must be an object or a boolean");
	error_with("false", &strict, "schema: (root): the schema false matches nothing");
	error_with("{\"type\": ", &strict, "schema: invalid JSON");
	error_with("{\"properties\": {\"a\": {}}, \"required\": [\"b\"], \"additionalProperties\": false}", &strict,
		   "schema: /required: property \"b\" is required, but additionalProperties is false");
	error_with("{\"enum\": [1], \"type\": \"string\"}", &strict, "no value of enum has an allowed type");
	/* relaxed: the same keywords are ignored (the grammar accepts more) */
	g = compile_with("{\"properties\": {\"x\": {\"type\": \"string\", \"not\": {\"const\": \"a\"}}}, \"required\": [\"x\"]}", &relaxed);
	accepts(g, "{\"x\": \"a\"}");
	capy_grammar_free(g);
	g = compile("{\"type\": \"array\", \"uniqueItems\": false}"); /* asks nothing: fine in strict mode */
	accepts(g, "[1, 1]");
	capy_grammar_free(g);
	/* hostile input: depth, size */
	{
		char deep[1024] = "";
		size_t n = 0;
		for (int i = 0; i < 70; i++)
			n += (size_t)snprintf(deep + n, sizeof(deep) - n, "{\"items\":");
		n += (size_t)snprintf(deep + n, sizeof(deep) - n, "{}");
		for (int i = 0; i < 70; i++)
			deep[n++] = '}';
		deep[n] = 0;
		error_with(deep, &strict, "nested more than 64 deep");
	}
	{
		size_t big = (4u << 20) + 1;
		char *text = malloc(big + 1);
		memset(text, ' ', big);
		text[0] = '{';
		text[big - 1] = '}';
		text[big] = 0;
		error_with(text, &strict, "schema: too large");
		free(text);
	}
}

/* Every schema of the corpus compiles; those listed in relaxed.txt need relaxed mode (and
 * strict mode must refuse them, naming a keyword). */
static void test_corpus(void)
{
	char dir[4096], path[8192], *list = NULL;
	size_t len = 0;
	struct capy_err err = { 0 };
	int count = 0;

	test_fixture_path("schemas", dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s/relaxed.txt", dir);
	if (capy_read_file(path, 1 << 16, &list, &len, &err) < 0)
		list = NULL;
	DIR *d = opendir(dir);
	CHECK_MSG(d != NULL, "cannot open %s", dir);
	for (struct dirent *e; d && (e = readdir(d));) {
		size_t n = strlen(e->d_name);
		char *text;
		if (n < 6 || strcmp(e->d_name + n - 5, ".json"))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (capy_read_file(path, 1 << 20, &text, &len, &err) < 0) {
			CHECK_MSG(0, "%s", err.msg);
			continue;
		}
		bool needs_relaxed = list && strstr(list, e->d_name);
		struct capy_grammar *g = NULL;
		int rc = capy_json_schema_compile(text, len, needs_relaxed ? &relaxed : &strict, &g, &err);
		CHECK_MSG(rc == 0, "%s: %s", e->d_name, err.msg);
		capy_grammar_free(g);
		if (needs_relaxed) {
			rc = capy_json_schema_compile(text, len, &strict, &g, &err);
			CHECK_MSG(rc == CAPY_EUNSUPPORTED && strstr(err.msg, "is not supported"),
				  "%s: listed in relaxed.txt, yet strict mode says %d \"%s\"", e->d_name, rc, err.msg);
			capy_grammar_free(g);
		}
		free(text);
		count++;
	}
	if (d)
		closedir(d);
	CHECK_MSG(count >= 50, "only %d schemas in the corpus", count);
	free(list);
}

int main(void)
{
	RUN(test_types);
	RUN(test_objects);
	RUN(test_whitespace);
	RUN(test_prefix);
	RUN(test_strings);
	RUN(test_formats);
	RUN(test_patterns);
	RUN(test_regex);
	RUN(test_raw_strings);
	RUN(test_numbers);
	RUN(test_arrays);
	RUN(test_values_and_combinations);
	RUN(test_refs);
	RUN(test_errors);
	RUN(test_corpus);
	return test_summary();
}
