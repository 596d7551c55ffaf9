/* fuzz-toolcall-grammar.c - libFuzzer target for the tool-call grammar builder
 * (libcore/text/toolcall-grammar.h), the grammar capy-serve holds forced calls to.
 *
 * Input: a byte of options (bit 0 the XML syntax, else hermes; 1 parallel calls; 2 the start
 * is forced, "opened"; 3 the output begins inside <think>; 4 every tool strict; 5 the first
 * tool strict; 6 free text first, calls optional, as allowed_tools in mode auto; 7 only the
 * first tool allowed, as an allowed_tools list), the tools JSON, then after a NUL byte the one
 * tool that may be called (as tool_choice names it; empty: any), then after a second NUL bytes
 * that steer a walk through the grammar. Checks, aborting otherwise:
 * - the builder makes a grammar or refuses in one line, never crashing, hanging or leaking;
 * - a grammar it makes compiles, or is refused only by the grammar compiler's size limits;
 * - a text the walk completes, after the start capy-serve forces, parses back (the output
 *   parser, toolcall.c) into well-formed calls of known tools, of the named or allowed ones
 *   where those are given, one call unless parallel ones are allowed, each with a JSON object
 *   of arguments, and no content beside them (with free text: content, and no call, too).
 *
 *	make fuzz && t/fuzz/run.sh 300 toolcall-grammar
 *
 * Seeds (t/fuzz/corpus/toolcall-grammar/) are small tool lists in both syntaxes, with and
 * without a named tool, and captured tools.
 */
#include "constrain/grammar.h"
#include "text/outparse.h"
#include "text/toolcall-grammar.h"
#include "util/buf.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#define WALK_MAX 2048

static void check(bool ok)
{
	if (!ok)
		abort();
}

/* Texts that end what is open (a value, a call, reasoning), tried when the steering runs out. */
static const char *const closers[] = {
	"\n</parameter>\n", "</function>\n</tool_call>", "}\n</tool_call>", "\"", "]", "}", "0", "</think>\n\n",
	"<tool_call>\n", "<function=", ">\n", "\": ",
};

/* One step of the walk: the steering byte picks one of the ASCII bytes the grammar allows
 * next (tab, newline, printable), into out; false when none is allowed. */
static bool step(struct capy_grammar_state *st, struct capy_grammar_state *nx, uint8_t pick, struct capy_buf *out)
{
	char allowed[128];
	int k = 0;

	for (int c = 9; c < 127; c++)
		if ((c == '\t' || c == '\n' || c >= 32) && capy_grammar_step(nx, st, (unsigned char)c) == 1)
			allowed[k++] = (char)c;
	if (!k)
		return false;
	char c = allowed[pick % k];
	capy_buf_putc(out, c);
	return capy_grammar_feed(st, &c, 1) == 1;
}

/* A walk through g steered by the bytes of steer, closed with the closers where it can be;
 * whether it ended accepting (its text in out). */
static bool walk(const struct capy_grammar *g, const uint8_t *steer, size_t n, struct capy_buf *out)
{
	struct capy_grammar_state *st = NULL, *nx = NULL;
	bool ok = false;

	check(capy_grammar_state_new(g, &st, NULL) == 0 && capy_grammar_state_new(g, &nx, NULL) == 0);
	for (size_t i = 0; i < n && out->len < WALK_MAX; i++) {
		if (capy_grammar_finished(st) || (capy_grammar_accepting(st) && steer[i] == 0xff))
			break;
		if (!step(st, nx, steer[i], out))
			goto done;
	}
	for (int round = 0; round < 64 && !capy_grammar_accepting(st); round++) {
		bool closed = false;
		for (size_t c = 0; c < sizeof(closers) / sizeof(*closers) && !closed; c++) {
			size_t len = strlen(closers[c]);
			check(capy_grammar_state_copy(nx, st, NULL) == 0);
			if (capy_grammar_feed(nx, closers[c], len) == len) {
				capy_buf_add(out, closers[c], len);
				check(capy_grammar_feed(st, closers[c], len) == len);
				closed = true;
			}
		}
		if (!closed && !step(st, nx, (uint8_t)round, out))
			break;
	}
	ok = capy_grammar_accepting(st);
done:
	capy_grammar_state_free(st);
	capy_grammar_state_free(nx);
	return ok;
}

/* The start capy-serve writes into the prompt before an opened grammar (generate.c). */
static void forced_start(struct capy_buf *b, const struct capy_call_grammar_opts *o)
{
	capy_buf_puts(b, "<tool_call>\n");
	if (!o->only)
		return;
	if (o->syntax == CAPY_CALL_XML) {
		capy_buf_printf(b, "<function=%s>\n", o->only);
	} else {
		capy_buf_puts(b, "{\"name\": ");
		capy_buf_json_str(b, o->only, strlen(o->only));
		capy_buf_puts(b, ", \"arguments\": ");
	}
}

static void parses_back(const char *tools, size_t tools_len, const struct capy_call_grammar_opts *o, const char *text)
{
	struct capy_outparse_opts po = { .flags = CAPY_OUTPARSE_HOLD_CALLS, .tools_json = tools, .tools_len = tools_len };
	struct capy_outparse_result r = { 0 };
	struct capy_err err = { 0 };

	if (o->reasoning && !o->opened)
		po.flags |= CAPY_OUTPARSE_THINK_OPEN;
	check(capy_outparse_parse(text, strlen(text), &po, &r, &err) == 0);
	check((r.n_calls >= 1 || o->free_text) && (o->parallel || r.n_calls <= 1) && (r.content_len == 0 || o->free_text));
	for (size_t c = 0; c < r.n_calls; c++) {
		const struct capy_outparse_call *call = &r.calls[c];
		cJSON *args = cJSON_ParseWithLength(call->arguments, call->arguments_len);
		check(!call->unknown && call->status == CAPY_OUTPARSE_CALL_OK && cJSON_IsObject(args));
		check(!o->only || !strcmp(call->name, o->only));
		check(!o->allowed || !strcmp(call->name, o->allowed[0]));
		cJSON_Delete(args);
	}
	capy_outparse_result_release(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	const char *tools = (const char *)data + 1, *end = (const char *)data + size;
	const char *nul = memchr(tools, 0, (size_t)(end - tools));
	size_t tools_len = nul ? (size_t)(nul - tools) : (size_t)(end - tools);
	const char *name = nul ? nul + 1 : end, *nul2 = nul ? memchr(name, 0, (size_t)(end - name)) : NULL;
	const uint8_t *steer = nul2 ? (const uint8_t *)nul2 + 1 : (const uint8_t *)end;
	char *only = nul && nul2 && nul2 > name ? strndup(name, (size_t)(nul2 - name)) : NULL;
	char *first = NULL;
	const char *strict[1] = { NULL }, *allowed[1] = { NULL };
	struct capy_call_grammar_opts o = { .syntax = data[0] & 1 ? CAPY_CALL_XML : CAPY_CALL_HERMES,
					    .parallel = data[0] & 2, .opened = data[0] & 4, .reasoning = data[0] & 8,
					    .all_strict = data[0] & 16, .only = only, .strict = strict,
					    .free_text = (data[0] & 64) && !(data[0] & 4) };
	struct capy_err err = { 0 };
	struct capy_grammar *g = NULL;
	char *gbnf = NULL;

	if (data[0] & (32 | 128)) { /* the first tool's name: strict, the one allowed */
		cJSON *t = cJSON_ParseWithLength(tools, tools_len);
		const cJSON *nm = cJSON_GetObjectItemCaseSensitive(
			cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(t, 0), "function"), "name");
		if (cJSON_IsString(nm) && (first = strdup(nm->valuestring))) {
			if (data[0] & 32)
				strict[0] = first, o.n_strict = 1;
			if (data[0] & 128)
				allowed[0] = first, o.allowed = allowed, o.n_allowed = 1;
		}
		cJSON_Delete(t);
	}
	if (capy_call_grammar(tools, tools_len, &o, &gbnf, &err) < 0) {
		check(!gbnf && err.msg[0] && !strchr(err.msg, '\n'));
		goto out;
	}
	if (capy_grammar_compile(gbnf, strlen(gbnf), "root", &g, &err) < 0) {
		check(strstr(err.msg, "too large") || strstr(err.msg, " deep") || strstr(err.msg, "memory"));
		goto out;
	}
	struct capy_buf text = { 0 };
	if (o.opened)
		forced_start(&text, &o);
	size_t start = text.len;
	if (walk(g, steer, (size_t)((const uint8_t *)end - steer), &text) && (text.len > start || o.free_text) &&
	    !text.oom)
		parses_back(tools, tools_len, &o, text.data ? text.data : ""); /* free text may be empty */
	capy_buf_release(&text);
out:
	capy_grammar_free(g);
	free(gbnf);
	free(only);
	free(first);
	return 0;
}
