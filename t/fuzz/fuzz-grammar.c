/* fuzz-grammar.c - libFuzzer target for the GBNF compiler and matcher (libcore/constrain/
 * grammar.h).
 *
 * Input: a grammar, then (after the first NUL byte, if any) a text to read. A grammar must
 * compile or give an error naming a place (never crash, hang or leak); a compiled one is fed
 * the text: it takes at most the text's length, and a fresh state fed the taken prefix takes
 * all of it and ends in the same accepting/finished state, as does a copy made halfway.
 * Anything else aborts.
 *
 *	make fuzz && t/fuzz/run.sh 300 grammar
 *
 * Seeds (t/fuzz/corpus/grammar/) are llama.cpp's grammars of t/fixtures/grammars, each with a
 * text it accepts.
 */
#include "constrain/grammar.h"

#include <stdlib.h>
#include <string.h>

static void check(bool ok)
{
	if (!ok)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *src = (const char *)data, *nul = memchr(data, 0, size);
	size_t glen = nul ? (size_t)(nul - src) : size, tlen = nul ? size - glen - 1 : 0;
	const char *text = nul ? nul + 1 : "";
	struct capy_grammar *g = NULL;
	struct capy_grammar_state *a = NULL, *b = NULL, *c = NULL;
	struct capy_err err = { 0 };

	if (capy_grammar_compile(src, glen, "root", &g, &err) < 0) {
		check(g == NULL && (!strncmp(err.msg, "grammar: ", 9) || strstr(err.msg, "memory")));
		return 0;
	}
	check(capy_grammar_state_new(g, &a, &err) == 0 && capy_grammar_state_new(g, &b, &err) == 0 &&
	      capy_grammar_state_new(g, &c, &err) == 0);
	size_t half = capy_grammar_feed(a, text, tlen / 2);
	check(half <= tlen / 2);
	check(capy_grammar_state_copy(c, a, &err) == 0);
	size_t took = half == tlen / 2 ? half + capy_grammar_feed(a, text + half, tlen - half) : half;
	check(took <= tlen);
	check(capy_grammar_feed(b, text, took) == took);
	check(capy_grammar_accepting(a) == capy_grammar_accepting(b) && capy_grammar_finished(a) == capy_grammar_finished(b));
	check(capy_grammar_feed(c, text + half, took - half) == took - half);
	check(capy_grammar_accepting(c) == capy_grammar_accepting(a));
	capy_grammar_state_free(a);
	capy_grammar_state_free(b);
	capy_grammar_state_free(c);
	capy_grammar_free(g);
	return 0;
}
