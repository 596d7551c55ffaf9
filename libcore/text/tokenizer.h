/* tokenizer.h - Hugging Face tokenizer.json (byte-level BPE) in C, token for token like the
 * `tokenizers` library (Rust 0.22.2, the version behind @anush008/tokenizers@0.6.0).
 *
 * A tokenizer is built from the bytes of a tokenizer.json held in memory and is then read-only:
 * every function below that takes a const tokenizer may be called from several threads at once.
 *
 *	struct capy_err err = {0};
 *	struct capy_tokenizer *tok;
 *	struct capy_tokens ids = {0};
 *	char *text;
 *	size_t text_len;
 *
 *	if (capy_tokenizer_new(&tok, json, json_len, &err) < 0)
 *		die("%s", err.msg);
 *	// "<|im_start|>" in the text becomes one id; pass 0 to treat it as plain text.
 *	if (capy_tokenizer_encode(tok, "<|im_start|>user\nHi", 19, CAPY_TOK_PARSE_ADDED, &ids,
 *				  &err) < 0)
 *		die("%s", err.msg);
 *	if (capy_tokenizer_decode(tok, ids.ids, ids.n, 0, &text, &text_len, &err) < 0)
 *		die("%s", err.msg);
 *	free(text);
 *	capy_tokens_release(&ids);
 *	capy_tokenizer_free(tok);
 *
 * Streaming (generation): feed ids one at a time; text comes out as soon as it is whole UTF-8,
 * and the concatenation of all pieces plus capy_detok_flush() equals capy_tokenizer_decode().
 *
 *	struct capy_detok *d = capy_detok_new(tok, CAPY_TOK_SKIP_SPECIAL);
 *	for (each generated id) {
 *		capy_detok_feed(d, id, &piece, &piece_len);
 *		fwrite(piece, 1, piece_len, stdout);
 *	}
 *	capy_detok_flush(d, &piece, &piece_len);	// U+FFFD for a dangling partial character
 *	fwrite(piece, 1, piece_len, stdout);
 *	capy_detok_free(d);
 *
 * Supported tokenizer.json parts (anything else fails with CAPY_EUNSUPPORTED naming it):
 *   normalizer     null, NFC, NFD, NFKC, NFKD, Sequence of these
 *   pre_tokenizer  null, Split (Regex or String pattern, all five behaviours, invert),
 *                  ByteLevel (add_prefix_space, use_regex; must come last), Sequence of these
 *   model          BPE: vocab, merges ("a b" strings or ["a", "b"] pairs), unk_token, fuse_unk,
 *                  byte_fallback, ignore_merges, continuing_subword_prefix, end_of_word_suffix;
 *                  dropout must be null or 0
 *   added_tokens   special or not; lstrip, rstrip, single_word, normalized
 *   decoder        null (tokens joined by spaces, as HF does) or ByteLevel
 *   post_processor, truncation, padding: ignored. Encoding never adds template tokens: it is
 *                  HF's encode(text, add_special_tokens=False) (for Qwen both settings agree).
 *
 * Exactness notes (see docs/tokenizer.md):
 *   - Split regexes are written for Oniguruma; they are translated to PCRE2 with the class
 *     escapes (\s, \d, \w, \p{L}, \p{N}, \p{M}, \p{P}, ...) completed to the Unicode 16.0 sets
 *     Oniguruma uses (tok-unicode.c).
 *   - NFC follows HF's Unicode 9.0 tables: characters assigned later are left in place.
 *   - Text must be UTF-8. Invalid input fails with CAPY_EFORMAT and the byte offset, unless
 *     CAPY_TOK_LOSSY is given: then each maximal invalid subsequence becomes U+FFFD, which is
 *     what HF sees when the bytes pass through a standard UTF-8 decoder (Rust from_utf8_lossy,
 *     Node's Buffer.toString, Python's errors="replace"). The Node binding turns a lone
 *     UTF-16 surrogate into U+FFFD too.
 */
#ifndef CAPY_TEXT_TOKENIZER_H
#define CAPY_TEXT_TOKENIZER_H

#include "../util/err.h"

struct capy_tokenizer;
struct capy_detok;

/* A growable id array owned by the caller; start from {0}, free with capy_tokens_release(). */
struct capy_tokens {
	int32_t *ids;
	size_t n, cap;
};

void capy_tokens_release(struct capy_tokens *t);

/* Parse whitespace-separated ids (0 .. INT32_MAX) from len bytes of text and append them to out.
 * `what` names the text in errors ("'ids.txt': token 3: 'x3' is not an integer"); on failure
 * out->n is unchanged. */
int capy_tokens_parse(const char *text, size_t len, const char *what, struct capy_tokens *out,
		      struct capy_err *err);

/* Build a tokenizer from tokenizer.json bytes (need not be NUL-terminated; copied, not kept).
 * On failure *out is NULL and err names the field, e.g.
 * "tokenizer.json: model.merges[17]: 'Ġ x' is not in the vocabulary". */
int capy_tokenizer_new(struct capy_tokenizer **out, const char *json, size_t len,
		       struct capy_err *err);
void capy_tokenizer_free(struct capy_tokenizer *tok);

enum capy_tok_encode_flags {
	CAPY_TOK_PARSE_SPECIAL = 1 << 0, /* added tokens marked "special" in the text become their id */
	CAPY_TOK_PARSE_PLAIN = 1 << 1,   /* so do added tokens not marked special (<think>, ...) */
	CAPY_TOK_LOSSY = 1 << 2,         /* invalid UTF-8 becomes U+FFFD instead of an error */
};
/* HF's default: every added token in the text is recognised. Without CAPY_TOK_PARSE_SPECIAL
 * this is HF's encode_special_tokens=True; with neither, added tokens are plain text. */
#define CAPY_TOK_PARSE_ADDED (CAPY_TOK_PARSE_SPECIAL | CAPY_TOK_PARSE_PLAIN)

/* Encode len bytes of text and append the ids to out. On failure out->n is unchanged. */
int capy_tokenizer_encode(const struct capy_tokenizer *tok, const char *text, size_t len,
			  unsigned flags, struct capy_tokens *out, struct capy_err *err);

enum capy_tok_decode_flags {
	CAPY_TOK_SKIP_SPECIAL = 1 << 0, /* drop added tokens marked "special" (not <think> etc.) */
};

/* Decode ids to text, as HF's decode(ids, skip_special_tokens): unknown ids are skipped, bytes
 * that are not valid UTF-8 become U+FFFD. *out is malloc'd and NUL-terminated (the text may
 * itself contain NUL bytes; use *out_len). */
int capy_tokenizer_decode(const struct capy_tokenizer *tok, const int32_t *ids, size_t n,
			  unsigned flags, char **out, size_t *out_len, struct capy_err *err);

/* Streaming decoder. capy_detok_new returns NULL on OOM. feed and flush point *text at bytes
 * owned by the decoder, valid until its next call; they return 0, or CAPY_ENOMEM. */
struct capy_detok *capy_detok_new(const struct capy_tokenizer *tok, unsigned flags);
int capy_detok_feed(struct capy_detok *d, int32_t id, const char **text, size_t *len);
int capy_detok_flush(struct capy_detok *d, const char **text, size_t *len);
/* Forget pending bytes and start again (a new response on the same decoder). */
void capy_detok_reset(struct capy_detok *d);
void capy_detok_free(struct capy_detok *d);

/* Vocabulary. ids run from 0 to capy_tokenizer_id_limit() - 1 (there may be holes). */
size_t capy_tokenizer_vocab_size(const struct capy_tokenizer *tok); /* HF get_vocab_size(True) */
int32_t capy_tokenizer_id_limit(const struct capy_tokenizer *tok);  /* largest id + 1 */

/* The token string of an id as tokenizer.json spells it ("Ġworld", "<|im_end|>"), like HF's
 * id_to_token; NULL if the id has none. Not NUL-terminated in general: use *len. */
const char *capy_tokenizer_piece(const struct capy_tokenizer *tok, int32_t id, size_t *len);
/* The bytes an id decodes to on its own (" world"); NULL if the id has none. */
const char *capy_tokenizer_piece_bytes(const struct capy_tokenizer *tok, int32_t id, size_t *len);
/* HF token_to_id: added tokens first, then the model vocabulary; -1 if absent. */
int32_t capy_tokenizer_token_id(const struct capy_tokenizer *tok, const char *piece, size_t len);
/* The id of an added token by its content ("<|im_end|>"); -1 if it is not an added token. */
int32_t capy_tokenizer_added_id(const struct capy_tokenizer *tok, const char *content);
bool capy_tokenizer_is_special(const struct capy_tokenizer *tok, int32_t id);
bool capy_tokenizer_is_added(const struct capy_tokenizer *tok, int32_t id);

#endif
