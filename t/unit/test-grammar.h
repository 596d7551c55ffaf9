/* test-grammar.h - grammars for the unit tests of constrain/: compiled from a string or from a
 * file of t/fixtures/grammars, a failure counted as a failed check (NULL returned). */
#ifndef CAPY_TEST_GRAMMAR_H
#define CAPY_TEST_GRAMMAR_H

#include "test.h"
#include "constrain/grammar.h"

static inline struct capy_grammar *compile_str(const char *src)
{
	struct capy_grammar *g = NULL;
	struct capy_err err = { 0 };

	CHECK_MSG(capy_grammar_compile(src, strlen(src), "root", &g, &err) == 0, "%s", err.msg);
	return g;
}

static inline struct capy_grammar *compile_file(const char *name)
{
	char path[512], rel[128], *text = NULL;
	size_t len = 0;
	struct capy_grammar *g = NULL;
	struct capy_err err = { 0 };

	snprintf(rel, sizeof(rel), "grammars/%s", name);
	if (capy_read_file(test_fixture_path(rel, path, sizeof(path)), 1 << 20, &text, &len, &err) < 0) {
		CHECK_MSG(0, "%s", err.msg);
		return NULL;
	}
	CHECK_MSG(capy_grammar_compile(text, len, "root", &g, &err) == 0, "%s: %s", name, err.msg);
	free(text);
	return g;
}

#endif
