/* u-grammar.c - the GBNF compiler and matcher (libcore/constrain/grammar.h): llama.cpp's own
 * grammars (t/fixtures/grammars) accept what they describe and refuse the rest at the first
 * wrong byte, repetitions and classes, UTF-8 split across reads, and errors that name the
 * line and column. */
#include "test-grammar.h"

#include <string.h>

/* How many bytes of s the grammar takes from the start, and whether all of s is a sentence. */
static size_t run(const struct capy_grammar *g, const char *s, bool *whole)
{
	struct capy_grammar_state *st = NULL;
	struct capy_err err = { 0 };
	size_t n = strlen(s), k;

	if (capy_grammar_state_new(g, &st, &err) < 0) {
		CHECK_MSG(0, "%s", err.msg);
		return 0;
	}
	k = capy_grammar_feed(st, s, n);
	*whole = k == n && capy_grammar_accepting(st);
	capy_grammar_state_free(st);
	return k;
}

static void accepts(const struct capy_grammar *g, const char *what, const char *s)
{
	bool whole;
	size_t k = run(g, s, &whole);

	CHECK_MSG(whole, "%s: \"%s\" refused at byte %zu", what, s, k);
}

/* s is refused exactly at byte `at` (at == strlen: every byte taken, but not a whole sentence). */
static void refuses(const struct capy_grammar *g, const char *what, const char *s, size_t at)
{
	bool whole;
	size_t k = run(g, s, &whole);

	CHECK_MSG(!whole && k == at, "%s: \"%s\" taken up to %zu (expected %zu), whole %d", what, s, k, at, whole);
}

static void test_json(void)
{
	struct capy_grammar *g = compile_file("json.gbnf");

	if (!g)
		return;
	accepts(g, "json", "{}");
	accepts(g, "json", "{\"a\": [1, 2.5e3, -0.25, \"x\\u00e9\\n\", true, null], \"b\": {\"c\": false}}");
	accepts(g, "json", "{\"k\": \"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"}");
	accepts(g, "json", "{\n  \"a\": 1\n}");
	refuses(g, "json", "{\"a\": }", 6);
	refuses(g, "json", "{'a': 1}", 1);
	refuses(g, "json", "{\"a\": 01}", 7);
	refuses(g, "json", "{\"a\": \"\x01\"}", 7);          /* control characters are not string content */
	refuses(g, "json", "{\"a\": tru", 9);                  /* a prefix: every byte fits, not a sentence */
	refuses(g, "json", "{\"a\": \"\\q\"}", 8);
	refuses(g, "json", "{\"k\": \"\xc3\x28\"}", 8);         /* a broken UTF-8 sequence */
	refuses(g, "json", "{\"k\": \"\xed\xa0\x80\"}", 8);     /* a surrogate */
	refuses(g, "json", "{\"k\": \"\xe0\x80\xaf\"}", 8);     /* an overlong form */
	capy_grammar_free(g);
	g = compile_file("json_arr.gbnf");
	if (g) {
		accepts(g, "json_arr", "[\n{\"a\": 1},\n{\"b\": [2]}]");
		refuses(g, "json_arr", "[{}]", 1); /* its arrays open with a newline */
		capy_grammar_free(g);
	}
}

static void test_llama_grammars(void)
{
	struct capy_grammar *g;

	if ((g = compile_file("arithmetic.gbnf"))) {
		accepts(g, "arithmetic", "1+2*x=y\n");
		accepts(g, "arithmetic", "(a+b) = c\n12 = 3\n");
		refuses(g, "arithmetic", "(a + b) = c\n", 4); /* no space after an operator */
		refuses(g, "arithmetic", "1++2=3\n", 2);
		capy_grammar_free(g);
	}
	if ((g = compile_file("list.gbnf"))) {
		accepts(g, "list", "- one\n- two items\n");
		refuses(g, "list", "- one\n\n", 6);
		refuses(g, "list", "- a\xe2\x80\xa8\n", 5); /* U+2028 is excluded: refused at its last byte */
		capy_grammar_free(g);
	}
	if ((g = compile_file("japanese.gbnf"))) {
		accepts(g, "japanese", "\xe3\x81\x93\xe3\x82\x93\xe3\x81\xab\xe3\x81\xa1\xe3\x81\xaf \xe4\xb8\x96\xe7\x95\x8c");
		refuses(g, "japanese", "abc", 0);
		capy_grammar_free(g);
	}
	if ((g = compile_file("chess.gbnf"))) {
		accepts(g, "chess", "1. e4 e5\n2. Nf3 Nc6\n3. Bb5 a6\n");
		refuses(g, "chess", "1. e9", 4);
		capy_grammar_free(g);
	}
	if ((g = compile_file("c.gbnf"))) {
		accepts(g, "c", "int main(){int x = 1;while(x<10){x = x+1;}return x;}");
		refuses(g, "c", "int main() {", 10); /* this grammar has no space before { */
		capy_grammar_free(g);
	}
}

static void test_syntax(void)
{
	struct capy_grammar *g;

	if ((g = compile_str("root ::= [a]{2,3} \"b\"?"))) {
		accepts(g, "{2,3}", "aa");
		accepts(g, "{2,3}", "aaab");
		refuses(g, "{2,3}", "a", 1);
		refuses(g, "{2,3}", "aaaa", 3);
		capy_grammar_free(g);
	}
	if ((g = compile_str("root ::= \"ab\"{2} x\nx ::= [^a-c0-9] . # any then one more\n"))) {
		accepts(g, "literal{2}", "ababzq");
		refuses(g, "literal{2}", "abab1q", 4);
		capy_grammar_free(g);
	}
	if ((g = compile_str("root ::= ( \"x\" |\n  \"y\" \"z\"+ )* end\nend ::= \"!\"\n"))) {
		accepts(g, "group", "xyzzx!");
		accepts(g, "group", "!");
		refuses(g, "group", "xy!", 2);
		capy_grammar_free(g);
	}
	if ((g = compile_str("root ::= \"ok\""))) {
		struct capy_grammar_state *st = NULL, *cp = NULL;
		struct capy_err err = { 0 };
		capy_grammar_state_new(g, &st, &err);
		capy_grammar_state_new(g, &cp, &err);
		CHECK(capy_grammar_feed(st, "o", 1) == 1 && !capy_grammar_accepting(st) && !capy_grammar_finished(st));
		CHECK(capy_grammar_state_copy(cp, st, &err) == 0);
		CHECK(capy_grammar_feed(st, "k", 1) == 1 && capy_grammar_accepting(st) && capy_grammar_finished(st));
		CHECK(capy_grammar_feed(st, "k", 1) == 0);
		CHECK(capy_grammar_feed(cp, "x", 1) == 0 && capy_grammar_feed(cp, "k", 1) == 1); /* the copy is at "o" */
		capy_grammar_state_free(st);
		capy_grammar_state_free(cp);
		capy_grammar_free(g);
	}
	/* a character split over two reads */
	if ((g = compile_str("root ::= [\\u00e0-\\u00ff]+"))) {
		struct capy_grammar_state *st = NULL;
		struct capy_err err = { 0 };
		capy_grammar_state_new(g, &st, &err);
		CHECK(capy_grammar_feed(st, "\xc3", 1) == 1 && !capy_grammar_accepting(st));
		CHECK(capy_grammar_feed(st, "\xa9", 1) == 1 && capy_grammar_accepting(st));
		CHECK(capy_grammar_feed(st, "\xc2", 1) == 0); /* U+0080..U+00BF cannot be in the class */
		capy_grammar_state_free(st);
		capy_grammar_free(g);
	}
}

/* capy_grammar_step: the same states as feeding, src untouched, and states equal by contents
 * (hash included) however they were reached. */
static void test_step(void)
{
	struct capy_grammar *g = compile_file("json.gbnf");
	struct capy_grammar_state *fed = NULL, *a = NULL, *b = NULL, *c = NULL;
	const char *doc = "{\"k\": [1, \"caf\xc3\xa9\"], \"n\": null}";
	struct capy_err err = { 0 };
	bool same = true;

	if (!g)
		return;
	capy_grammar_state_new(g, &fed, &err);
	capy_grammar_state_new(g, &a, &err);
	capy_grammar_state_new(g, &b, &err);
	for (size_t i = 0; doc[i]; i++) {
		struct capy_grammar_state *t;
		CHECK(capy_grammar_step(b, a, (unsigned char)doc[i]) == 1);
		CHECK(capy_grammar_feed(fed, doc + i, 1) == 1);
		same = same && capy_grammar_state_equal(b, fed) && capy_grammar_state_hash(b) == capy_grammar_state_hash(fed) &&
		       capy_grammar_accepting(b) == capy_grammar_accepting(fed);
		t = a, a = b, b = t;
	}
	CHECK(same && capy_grammar_accepting(a));
	CHECK(capy_grammar_step(b, a, '}') == 0);                 /* refused */
	CHECK(capy_grammar_state_clone(a, &c, &err) == 0 && capy_grammar_state_equal(c, a));
	CHECK(capy_grammar_step(b, c, ' ') == 1 && capy_grammar_state_equal(c, a)); /* src untouched */
	CHECK(!capy_grammar_state_equal(b, a));
	/* two ways to one state: after "[1" and after "[2" the stacks are the same */
	capy_grammar_state_free(a);
	capy_grammar_state_free(b);
	capy_grammar_state_new(g, &a, &err);
	capy_grammar_state_new(g, &b, &err);
	capy_grammar_feed(a, "{\"a\": [1", 8);
	capy_grammar_feed(b, "{\"a\": [2", 8);
	CHECK(capy_grammar_state_equal(a, b) && capy_grammar_state_hash(a) == capy_grammar_state_hash(b));
	capy_grammar_feed(b, "\xc3", 1); /* a pending character is part of the state */
	CHECK(capy_grammar_feed(a, "\xc3", 1) == 0);
	capy_grammar_state_free(fed);
	capy_grammar_state_free(a);
	capy_grammar_state_free(b);
	capy_grammar_state_free(c);
	capy_grammar_free(g);
}

static void error_at(const char *src, const char *want)
{
	struct capy_grammar *g = NULL;
	struct capy_err err = { 0 };

	CHECK(capy_grammar_compile(src, strlen(src), "root", &g, &err) < 0 && !g);
	CHECK_MSG(strstr(err.msg, want) != NULL, "for %s: got \"%s\", wanted \"%s\"", src, err.msg, want);
}

static void test_errors(void)
{
	error_at("root ::= \"a\" (b", "line 1, column 14: unclosed parenthesis");
	error_at("root ::= \"a\" (b\nb ::= \"c\"", "line 2, column 3: unexpected character"); /* newlines do not end a group */
	error_at("root ::= x\n", "line 1, column 10: rule 'x' is used but never defined");
	error_at("root ::= \"a\"\nroot ::= \"b\"", "line 2, column 1: rule defined twice");
	error_at("a ::= \"x\"\nroot ::= a\n  a ::= \"y\"", "line 3, column 3: rule defined twice");
	error_at("root ::= root \"a\" | \"b\"", "rule 'root' is left-recursive");
	error_at("root ::= x \"a\"\nx ::= \"\" | root", "left-recursive");
	error_at("root ::= (\"a\"?)*", "line 1, column 10: a repetition of something that can match nothing");
	error_at("root ::= x{2,5} \"b\"\nx ::= \"a\" | \"\"", "line 1, column 10: a repetition of something that can match nothing");
	error_at("root ::= [a]{4097}", "repetition count above 4096");
	error_at("root ::= \"\\q\"", "line 1, column 11: unknown escape");
	error_at("root ::= [z-a]", "line 1, column 10: a range runs backwards");
	error_at("root ::= \"abc", "line 1, column 10: unterminated literal");
	error_at("root = \"a\"", "line 1, column 6: expected ::=");
	error_at("root ::= [a]{3,1}", "{m,n} with n < m");
	error_at("x ::= \"a\"", "no rule 'root'");
	error_at("root ::= \"a\" )", "unmatched )");
	/* named: file:line:column */
	struct capy_grammar *g = NULL;
	struct capy_err err = { 0 };
	CHECK(capy_grammar_compile_named("root ::= \"a\"\nx ::= [b", 21, "root", "g.gbnf", &g, &err) < 0 && !g);
	CHECK_STR(err.msg, "g.gbnf:2:7: unterminated character class");
	CHECK(capy_grammar_compile_named("x ::= \"a\"", 9, "root", "g.gbnf", &g, &err) < 0);
	CHECK_STR(err.msg, "g.gbnf: no rule 'root'");
}

int main(void)
{
	RUN(test_json);
	RUN(test_llama_grammars);
	RUN(test_syntax);
	RUN(test_step);
	RUN(test_errors);
	return test_summary();
}
