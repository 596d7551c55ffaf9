/* mask.h - token masks for constrained decoding: which tokens of a vocabulary a grammar
 * (constrain/grammar.h) can read next, as a bitmask the sampler applies (sample/sample.h).
 *
 *	struct capy_token_trie *t;     // once per tokenizer, shared by every grammar
 *	struct capy_mask *m;           // once per grammar (and sequence: not thread-safe)
 *	capy_token_trie_from_tokenizer(&t, tok, vocab, eos, n_eos, NULL, 0, &err);
 *	capy_mask_new(&m, t, g, NULL, &err);
 *	uint32_t *bits = calloc(capy_mask_words(vocab), sizeof(uint32_t));
 *	while (!capy_grammar_finished(st)) {
 *		if (capy_mask_compute(m, st, bits, &err) < 0) die(...);   // a dead end is an error
 *		id = capy_sampler_next_masked(smp, logits, bits);
 *		if (capy_mask_advance(t, st, id, &err) == 0) break;       // a stop token
 *		... next logits ...
 *	}
 *
 * A token is allowed when the grammar reads all of its bytes, in order, from the state (a
 * token may end inside a UTF-8 character: the next token must then finish it). Stop tokens
 * (the caller's list: <|im_end|>, <|endoftext|>) are allowed exactly when the state is
 * accepting. Tokens with no bytes, and added tokens (special or not) that the caller does not
 * list as text, are never allowed. A state that is neither finished nor able to go on with any
 * token is reported as an error, never as an empty mask: with a byte-level vocabulary (every
 * single byte is a token) it cannot happen, since the grammar refuses a byte that leads
 * nowhere; a vocabulary that cannot spell some byte can reach one.
 *
 * How: the vocabulary is a byte trie laid out in depth-first order (each node its byte, its
 * depth and where its subtree ends), walked from the state with the grammar stepping one byte
 * per node; a refused byte skips the node's whole subtree. Grammar states met on the way are
 * kept (interned by contents) with a table of their transitions by byte, so walking a node is
 * a table lookup once the grammar has been through that state: in effect a DFA built lazily
 * from the pushdown automaton, shared by every mask of that capy_mask. Where every byte of a
 * subtree leads back to the same state (the bytes of a string's content, digits of a number:
 * known per state from its transitions, and for characters from U+0080 on from the grammar's
 * classes), the whole subtree is allowed without walking it. Whole masks are cached
 * too, by state: JSON-like grammars come back to the same states all the time. Both caches are
 * bounded (capy_mask_opts); when the states fill up they are dropped and built again.
 */
#ifndef CAPY_CONSTRAIN_MASK_H
#define CAPY_CONSTRAIN_MASK_H

#include "../util/err.h"

struct capy_grammar;
struct capy_grammar_state;
struct capy_tokenizer;
struct capy_token_trie;
struct capy_mask;

/* uint32 words of a mask of n_ids tokens; bit id % 32 of word id / 32 is token id. */
static inline size_t capy_mask_words(uint32_t n_ids)
{
	return ((size_t)n_ids + 31) / 32;
}

static inline bool capy_mask_has(const uint32_t *bits, int32_t id)
{
	return (bits[(uint32_t)id / 32] >> ((uint32_t)id % 32)) & 1;
}

/* One token's text for capy_token_trie_new; bytes NULL: not text (never allowed). */
struct capy_token_text {
	const char *bytes;
	size_t len;
};

/* A trie of n_ids tokens' texts (copied) and the stop tokens (ids below n_ids, not read as
 * text even when they have some). Read-only once built: any number of threads and masks may
 * share it. CAPY_EINVAL for a stop id out of range or a token longer than 65535 bytes. */
int capy_token_trie_new(struct capy_token_trie **out, const struct capy_token_text *text, uint32_t n_ids,
			const int32_t *stop, size_t n_stop, struct capy_err *err);
/* From a tokenizer: each id's bytes (capy_tokenizer_piece_bytes). n_ids is the model's
 * vocabulary (the logits' width; ids the tokenizer lacks are never allowed). Added tokens are
 * left out unless listed in text_ids, then read as their bytes like any other. */
int capy_token_trie_from_tokenizer(struct capy_token_trie **out, const struct capy_tokenizer *tok, uint32_t n_ids,
				   const int32_t *stop, size_t n_stop, const int32_t *text_ids, size_t n_text,
				   struct capy_err *err);
void capy_token_trie_free(struct capy_token_trie *t);
uint32_t capy_token_trie_ids(const struct capy_token_trie *t);

enum capy_mask_flags {
	CAPY_MASK_NO_CACHE = 1 << 0, /* compute every mask (the state cache still works) */
	CAPY_MASK_NO_DFA = 1 << 1,   /* step the grammar at every node: no state cache (slow; a reference) */
};

struct capy_mask_opts {
	uint32_t cached_masks; /* whole masks kept, each capy_mask_words(n_ids) words (0: 512) */
	uint32_t max_states;   /* grammar states kept, about 1.2 KB each (0: 32768) */
	unsigned flags;        /* enum capy_mask_flags */
};

/* A masker of grammar g over trie t (both must outlive it); o NULL: the defaults. */
int capy_mask_new(struct capy_mask **out, const struct capy_token_trie *t, const struct capy_grammar *g,
		  const struct capy_mask_opts *o, struct capy_err *err);
void capy_mask_free(struct capy_mask *m);

/* The tokens allowed from state s (of m's grammar) into bits[capy_mask_words(n_ids)]. Returns
 * how many (> 0); 0 only when the grammar is finished and there are no stop tokens (the
 * caller must stop); CAPY_EFORMAT when no token can go on and the grammar is not finished (a
 * dead end); CAPY_ENOMEM. */
int capy_mask_compute(struct capy_mask *m, const struct capy_grammar_state *s, uint32_t *bits,
		      struct capy_err *err);

/* Read token id into s after it was sampled from a mask: 1 read; 0 id is a stop token taken
 * where the grammar is accepting (s unchanged: generation ends); CAPY_EINVAL when the grammar
 * refuses it (it was not in the mask: s is then left part-way and must not be used). */
int capy_mask_advance(const struct capy_token_trie *t, struct capy_grammar_state *s, int32_t id,
		      struct capy_err *err);

struct capy_mask_stats {
	uint64_t masks;  /* capy_mask_compute calls */
	uint64_t hits;   /* answered from the cache of masks */
	uint64_t nodes;  /* trie nodes walked, over all walks */
	uint64_t subtrees; /* subtrees allowed whole without walking them (their bytes loop) */
	uint64_t resets; /* times the states filled up and were dropped */
	uint32_t states; /* grammar states kept now */
};
void capy_mask_stats(const struct capy_mask *m, struct capy_mask_stats *out);

#endif
