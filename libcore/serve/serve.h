/* serve.h - capy-serve's server: the API endpoints on the HTTP layer, requests rendered
 * and tokenized, run by the scheduler, their tokens turned back into each API's response.
 *
 * Text output (struct capy_textout): what a response's tokens become, in order —
 * streaming detokenization (whole UTF-8 characters, special tokens dropped), stop strings
 * (text that could still become one is held back; the first match ends the answer and is
 * cut with what follows), then the output parser of text/outparse.h (reasoning, content,
 * tool calls), or for raw completions the text itself as CONTENT events.
 *
 * Thread-safety: a textout belongs to one thread at a time.
 */
#ifndef CAPY_SERVE_H
#define CAPY_SERVE_H

#include "../text/outparse.h"
#include "../text/tokenizer.h"

struct capy_textout;

struct capy_textout_opts {
	const struct capy_tokenizer *tok;
	const char *const *stop;       /* stop strings (copied; empty ones ignored) */
	size_t n_stop;
	bool parse;                    /* false: raw text (completions) */
	struct capy_outparse_opts parse_opts;
};

int capy_textout_new(struct capy_textout **out, const struct capy_textout_opts *o, struct capy_err *err);
void capy_textout_free(struct capy_textout *t);
/* The next generated token; events go to cb. *stopped tells that a stop string matched (the
 * answer is over: later tokens are ignored). Returns 0 or the callback's / an error code. */
int capy_textout_token(struct capy_textout *t, int32_t id, capy_outparse_cb cb, void *ud, bool *stopped,
		       struct capy_err *err);
/* Text that is part of the answer without being generated (a forced start, such as an
 * opened tool call): parsed like output, not checked against stop strings. */
int capy_textout_feed_text(struct capy_textout *t, const char *s, size_t n, capy_outparse_cb cb, void *ud,
			   struct capy_err *err);
/* The answer is over: held text goes out (unless a stop string ended it), the parser
 * closes what is open. Once. */
int capy_textout_finish(struct capy_textout *t, capy_outparse_cb cb, void *ud, struct capy_err *err);
/* The stop string that matched, or NULL. */
const char *capy_textout_stop_string(const struct capy_textout *t);
/* The output parser's counts (NULL for raw text). */
const struct capy_outparse_stats *capy_textout_parse_stats(const struct capy_textout *t);

#endif
