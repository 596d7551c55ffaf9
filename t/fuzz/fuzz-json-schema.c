/* fuzz-json-schema.c - libFuzzer target for the JSON Schema compiler (libcore/constrain/
 * json-schema.h).
 *
 * Input: one byte of options (bit 0 strict, bit 1 compact, bit 2 raw strings with the XML
 * stop "</parameter>"), a schema, then (after the first NUL byte, if any) a document. A
 * schema must compile or be refused with a one-line message starting "schema: " (never
 * crash, hang or leak); the grammar text of one that compiles must itself compile (the
 * compiler writes only grammars the grammar compiler takes), and a document the grammar
 * accepts whole must be JSON that cJSON parses (unless it might nest deeper than cJSON's
 * limit), or in raw mode text without the stop. Anything else aborts.
 *
 *	make fuzz && t/fuzz/run.sh 300 json-schema
 *
 * Seeds (t/fuzz/corpus/json-schema/) are small schemas of t/fixtures/schemas and of the unit
 * test, each with a document it accepts.
 */
#include "constrain/grammar.h"
#include "constrain/json-schema.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static void check(bool ok)
{
	if (!ok)
		abort();
}

/* Brackets and braces in s: more than cJSON's nesting limit could be why it refuses. */
static size_t opens(const char *s, size_t n)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++)
		k += s[i] == '[' || s[i] == '{';
	return k;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	struct capy_schema_opts opts = { .strict = data[0] & 1, .compact = data[0] & 2, .raw = data[0] & 4,
					 .raw_stop = "</parameter>" };
	const char *src = (const char *)data + 1, *nul = memchr(src, 0, size - 1);
	size_t slen = nul ? (size_t)(nul - src) : size - 1, dlen = nul ? size - 1 - slen - 1 : 0;
	const char *doc = nul ? nul + 1 : "";
	struct capy_err err = { 0 };
	struct capy_grammar *g = NULL;
	struct capy_grammar_state *st = NULL;
	char *gbnf = NULL;

	if (capy_json_schema_to_gbnf(src, slen, &opts, &gbnf, &err) < 0) {
		check(!gbnf && !strncmp(err.msg, "schema: ", 8) && !strchr(err.msg, '\n'));
		return 0;
	}
	if (capy_grammar_compile(gbnf, strlen(gbnf), "root", &g, &err) < 0) {
		check(strstr(err.msg, "memory") != NULL); /* out of memory is the only excuse */
		free(gbnf);
		return 0;
	}
	check(capy_grammar_state_new(g, &st, &err) == 0);
	size_t took = capy_grammar_feed(st, doc, dlen);
	if (opts.raw && took == dlen && capy_grammar_accepting(st)) {
		char *z = strndup(doc, dlen);
		check(z && (strlen(z) < dlen || !strstr(z, opts.raw_stop))); /* (a NUL ends strstr's view) */
		free(z);
	} else if (took == dlen && capy_grammar_accepting(st) && opens(doc, dlen) < CJSON_NESTING_LIMIT) {
		cJSON *j = cJSON_ParseWithLength(doc, dlen);
		check(j != NULL);
		cJSON_Delete(j);
	}
	capy_grammar_state_free(st);
	capy_grammar_free(g);
	free(gbnf);
	return 0;
}
