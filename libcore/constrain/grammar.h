/* grammar.h - GBNF grammars (llama.cpp's syntax, so existing grammars work) compiled to a
 * pushdown automaton that reads UTF-8 bytes: the first piece of structured output (issue 11).
 *
 *	struct capy_grammar *g;
 *	struct capy_grammar_state *s;
 *	capy_grammar_compile(text, len, "root", &g, &err);   // errors name line:column
 *	capy_grammar_state_new(g, &s, &err);
 *	size_t ok = capy_grammar_feed(s, bytes, n);          // bytes the grammar allows, in order
 *	bool done = capy_grammar_accepting(s);              // a whole sentence so far
 *
 * Syntax: `name ::= alternatives` rules (a rule ends at a newline outside parentheses, and
 * may continue on the next lines after `::=` or `|`), sequences of "literals" (escapes \n \r
 * \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH), [character classes] with ranges and [^negation],
 * `.` (any character), rule names, ( groups ), and the repetitions * + ? {m} {m,} {m,n};
 * `#` comments. Characters are Unicode code points; the automaton reads UTF-8 byte by byte
 * and refuses a byte that no allowed character can start or continue. Refused when compiling,
 * with the place: left recursion (the automaton expands rules depth first), a repetition of
 * something that can match nothing (its empty matches would multiply), counts above 4096,
 * more than 100000 rules (repetitions make rules), chains of rules more than 8192 deep.
 * Limit: a state holds at most 65536 partial parses; a grammar ambiguous enough to need more
 * (say `root ::= x root "!"?` with x able to match any text) refuses the byte that would. Such
 * grammars also cost time growing with the input (the parses grow with it): llama.cpp's
 * grammars and JSON ones stay at a few parses.
 *
 * The state is a set of stacks of grammar positions (each stack one way to have read the
 * input so far), each stack's top a character class; reading a character keeps the stacks
 * whose top admits it, with the top stepped past and its rules expanded again. */
#ifndef CAPY_GRAMMAR_H
#define CAPY_GRAMMAR_H

#include "../util/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct capy_grammar;
struct capy_grammar_state;

int capy_grammar_compile(const char *src, size_t len, const char *root, struct capy_grammar **out,
			 struct capy_err *err);
/* The same, errors naming the source as a compiler does: "f.gbnf:3:7: unknown escape" (and
 * "f.gbnf: no rule 'root'" where there is no place); name NULL is capy_grammar_compile. */
int capy_grammar_compile_named(const char *src, size_t len, const char *root, const char *name,
			       struct capy_grammar **out, struct capy_err *err);
void capy_grammar_free(struct capy_grammar *g);

int capy_grammar_state_new(const struct capy_grammar *g, struct capy_grammar_state **out, struct capy_err *err);
void capy_grammar_state_free(struct capy_grammar_state *s);
/* dst becomes a copy of src (same grammar). */
int capy_grammar_state_copy(struct capy_grammar_state *dst, const struct capy_grammar_state *src,
			    struct capy_err *err);

/* A new state equal to src holding only its contents (compact: none of the scratch buffers
 * that stepping grows), for keeping many states. */
int capy_grammar_state_clone(const struct capy_grammar_state *src, struct capy_grammar_state **out,
			     struct capy_err *err);

/* Read bytes in order while the grammar allows them; returns how many it took. A refused byte
 * leaves the state as it was before that byte. */
size_t capy_grammar_feed(struct capy_grammar_state *s, const char *bytes, size_t n);
/* dst becomes src after one more byte, src unchanged: 1 read, 0 refused (dst then holds
 * nothing useful), CAPY_ENOMEM. dst keeps its buffers from call to call, so stepping into
 * the same scratch state allocates nothing once it has grown: a search over continuations
 * (token masks) pushes a state per byte and pops it by reusing the slot. dst != src; both
 * of one grammar. */
int capy_grammar_step(struct capy_grammar_state *dst, const struct capy_grammar_state *src, unsigned char byte);
/* The state's contents (its set of stacks in any order, and a pending partial character)
 * hashed and compared: equal states read exactly the same continuations, so what is computed
 * from one (a token mask) holds for the other. */
uint64_t capy_grammar_state_hash(const struct capy_grammar_state *s);
bool capy_grammar_state_equal(const struct capy_grammar_state *a, const struct capy_grammar_state *b);
/* Part of a UTF-8 character has been read, and the rest is due. */
bool capy_grammar_state_pending(const struct capy_grammar_state *s);
/* No character is pending and each stack reads either every code point of [lo, hi] or none:
 * the state after any one of them is then the same (a token mask uses it to pass over every
 * token of a subtree at once). */
bool capy_grammar_state_uniform(const struct capy_grammar_state *s, uint32_t lo, uint32_t hi);
/* The bytes read so far form a whole sentence (no partial UTF-8 character pending). */
bool capy_grammar_accepting(const struct capy_grammar_state *s);
/* Nothing can follow: the only way on is to stop (accepting) or there is none at all. */
bool capy_grammar_finished(const struct capy_grammar_state *s);

#endif
