/* toolcall-grammar.h - a GBNF grammar (constrain/grammar.h) of the model's own tool-call
 * syntax for a request's tools: what tool_choice required / named and strict tools hold the
 * output to (issue 11). The inverse of the output parser (toolcall.c): every text the grammar
 * accepts parses back into calls of the allowed tools with arguments the tool's schema accepts
 * (where the schema compiler enforces it: constrain/json-schema.h; limits below).
 *
 *	struct capy_call_grammar_opts o = { .syntax = CAPY_CALL_XML, .only = "get_weather" };
 *	char *gbnf;
 *	capy_call_grammar(tools_json, len, &o, &gbnf, &err);   // rule root
 *
 * XML (Qwen3.5 templates), exactly the bytes the template writes for a call:
 *	<tool_call>\n<function=NAME>\n{<parameter=KEY>\nVALUE\n</parameter>\n}</function>\n</tool_call>
 * with the parameters in the schema's order, required ones present, optional ones each may be
 * absent, no others. A value is raw text where the parameter's types are exactly "string" (as
 * the parser reads it), held to its string keywords (pattern, format, enum/const, lengths:
 * the schema compiled with capy_schema_opts.raw, so no '<' but in enum/const values), else
 * any text without "</parameter>"; raw text as well where a union holds "string" (the other
 * branches' bounds are not held). Other values are JSON that the parameter's schema accepts (the tool's $defs
 * and definitions kept in reach of its $refs).
 * Hermes (other templates): <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>,
 * ARGS JSON that the parameters schema accepts. Calls are separated by "\n".
 * With free_text (tool_choice allowed_tools in mode auto) the calls are optional and may
 * follow free text: [reasoning] content [calls], where neither holds "<tool_call>" (the
 * parser would read a call there), so that a call, if any, is of an allowed tool.
 *
 * Errors (one line; nothing printed): "tools: ..." for tools JSON that is not a list of
 * functions, "tool 'NAME': schema: <JSON pointer>: <what>" for a schema the compiler refuses
 * (strict mode for the tools named in strict, relaxed for the others), or a name the call
 * syntax cannot write so that the parser reads it back (either syntax: whitespace, controls,
 * <>"'{}=, more than 256 bytes, invalid UTF-8).
 */
#ifndef CAPY_TEXT_TOOLCALL_GRAMMAR_H
#define CAPY_TEXT_TOOLCALL_GRAMMAR_H

#include "../util/err.h"

#include <stdbool.h>
#include <stddef.h>

enum capy_call_syntax {
	CAPY_CALL_HERMES, /* {"name": ..., "arguments": {...}} inside <tool_call> */
	CAPY_CALL_XML,    /* <function=NAME><parameter=KEY>... (Qwen3.5) */
};

struct capy_call_grammar_opts {
	enum capy_call_syntax syntax;
	const char *only;    /* the one function that may be called (tool_choice named); NULL: any */
	const char *const *strict; /* tools whose schemas compile in strict mode (strict: true) */
	size_t n_strict;
	bool all_strict;     /* every tool strict */
	bool reasoning;      /* the output starts inside <think>: free text, "</think>\n\n" first */
	/* The output continues a start already written: "<tool_call>\n", and with only the
	 * function's own opening too ("<function=NAME>\n", or {"name": "NAME", "arguments": ). */
	bool opened;
	bool parallel;       /* more calls may follow the first */
	/* The tools that may be called, by name (tool_choice allowed_tools); NULL: every one. */
	const char *const *allowed;
	size_t n_allowed;
	/* Free text first, calls optional (allowed_tools in mode auto; not with opened). */
	bool free_text;
};

/* tools_json: [{"type":"function","function":{"name":..., "parameters":{...}}}, ...] (the
 * normalized tools of a request); *gbnf_out malloc'd, NUL-terminated, with a rule `root`. */
int capy_call_grammar(const char *tools_json, size_t len, const struct capy_call_grammar_opts *o, char **gbnf_out,
		      struct capy_err *err);

/* A grammar whose rule `root` is rule `inner` of gbnf (a grammar without rules named root or
 * think-raw: prefixed JSON Schema output, say), after free reasoning text and "</think>\n\n"
 * when reasoning (the prompt opened <think>). *out malloc'd. */
int capy_grammar_reasoning_first(const char *gbnf, const char *inner, bool reasoning, char **out, struct capy_err *err);

#endif
