/* tokenizer-impl.h - the tokenizer's internals, shared by libcore/text/tok-*.c only.
 *
 * DESIGN. Encoding follows HF's pipeline stage by stage so that each stage can be checked
 * against the Rust source:
 *   1. added tokens that are not "normalized" are cut out of the raw text (tok-added.c);
 *   2. each remaining piece is normalized (tok-norm.c), then normalized added tokens are cut out;
 *   3. each remaining piece goes through the pre-tokenizers (tok-pretok.c, regexes in tok-regex.c);
 *   4. each resulting word is merged by BPE (tok-bpe.c) into ids.
 * The model works on "model-space" strings, the vocabulary's own spelling: with a ByteLevel
 * pre-tokenizer every byte b is spelt as the character bytes_char(b) ("Ġ" for a space).
 * Stages 1-3 never copy text they do not change. All working memory (match data, buffers, the
 * BPE heap, the word cache) is a struct tok_scratch borrowed from the tokenizer's pool for the
 * call, so the hot loop does not allocate and a warm call allocates nothing.
 */
#ifndef CAPY_TEXT_TOKENIZER_IMPL_H
#define CAPY_TEXT_TOKENIZER_IMPL_H

#include "tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <cjson/cJSON.h>
#include <pcre2.h>

/* Largest id we accept (ids index flat arrays). */
#define TOK_MAX_ID ((1 << 24) - 1)

/* --- growable byte buffer ------------------------------------------------------------------ */

struct tok_buf {
	char *p;
	size_t len, cap;
};

int tok_buf_reserve(struct tok_buf *b, size_t extra);
int tok_buf_add(struct tok_buf *b, const void *data, size_t len);
void tok_buf_release(struct tok_buf *b);

/* --- UTF-8 (tok-utf8.c) --------------------------------------------------------------------- */

/* Length of the valid UTF-8 prefix of s (== len when all of s is valid). */
size_t tok_utf8_valid_prefix(const char *s, size_t len);
/* Append s with each maximal invalid subsequence replaced by U+FFFD (Unicode's "maximal subpart"
 * practice, as Rust's String::from_utf8_lossy). If `hold` is true, a trailing sequence that is
 * incomplete but could still become valid is not converted: its length is returned in *held. */
int tok_utf8_lossy(struct tok_buf *out, const char *s, size_t len, bool hold, size_t *held);
/* Decode one code point of valid UTF-8 at s; returns its length. */
int tok_utf8_next(const char *s, uint32_t *cp);
int tok_utf8_encode(uint32_t cp, char out[4]);
/* Unicode White_Space (Rust char::is_whitespace, regex \s). */
bool tok_is_white_space(uint32_t cp);

/* --- hash maps (tok-vocab.c) ------------------------------------------------------------------ */

/* Byte string -> id. Keys are offsets into a pool that may move while the map is filled. */
struct tok_strmap_entry {
	uint64_t hash;
	uint32_t off, len;
	int32_t id; /* -1: empty slot */
};

struct tok_strmap {
	struct tok_strmap_entry *slots; /* open addressing */
	size_t mask, n;
	char *const *base;              /* the pool */
};

int tok_strmap_init(struct tok_strmap *m, size_t expected, char *const *base);
/* Insert the pool string at off, or overwrite its id (HF's maps keep the last value). */
int tok_strmap_put(struct tok_strmap *m, uint32_t off, size_t len, int32_t id);
int32_t tok_strmap_get(const struct tok_strmap *m, const char *key, size_t len);
void tok_strmap_release(struct tok_strmap *m);

/* (left id, right id) -> (rank, merged id). */
struct tok_merge_slot {
	uint64_t key; /* TOK_PAIR_EMPTY when free */
	uint32_t rank;
	int32_t id;
};
#define TOK_PAIR_EMPTY UINT64_MAX

struct tok_mergemap {
	struct tok_merge_slot *slots;
	size_t mask, n;
	unsigned shift;
};

int tok_mergemap_init(struct tok_mergemap *m, size_t expected);
int tok_mergemap_put(struct tok_mergemap *m, int32_t a, int32_t b, uint32_t rank, int32_t id);
void tok_mergemap_release(struct tok_mergemap *m);

static inline uint64_t tok_pair_key(int32_t a, int32_t b)
{
	return (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
}

static inline const struct tok_merge_slot *tok_mergemap_get(const struct tok_mergemap *m,
							    int32_t a, int32_t b)
{
	uint64_t key = tok_pair_key(a, b);
	size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> m->shift);

	for (;; i = (i + 1) & m->mask) {
		const struct tok_merge_slot *s = &m->slots[i];
		if (s->key == key)
			return s;
		if (s->key == TOK_PAIR_EMPTY)
			return NULL;
	}
}

/* --- regexes (tok-regex.c) ---------------------------------------------------------------- */

/* Compile an Oniguruma (Ruby syntax) pattern for PCRE2, or a literal string. */
int tok_regex_compile(const char *pattern, size_t len, bool literal, pcre2_code **out,
		      const char *what, struct capy_err *err);

/* Compile the completed class tok_class_extras[name] alone, as "[...]". */
int tok_regex_compile_class(const char *name, pcre2_code **out, const char *what,
			    struct capy_err *err);

struct tok_class_extra {
	const char *name;            /* "L", "M", "N", "Nd", "s", "w", ... */
	const char *pcre;            /* PCRE2 class body these complete ("\\p{L}") */
	const uint32_t (*ranges)[2]; /* code points Oniguruma adds */
	size_t n;
};

extern const struct tok_class_extra tok_class_extras[];
extern const size_t tok_n_class_extras;
extern const uint32_t (*const tok_late_norm)[2];
extern const size_t tok_n_late_norm;

/* --- word cache (tok-bpe.c) --------------------------------------------------------------- */

/* Most words recur; a cache of word -> ids skips BPE for them. It lives in the per-call scratch
 * (below), so lookups take no lock. Entries live in an arena; when it is full the cache starts
 * again empty. */
#define TOK_CACHE_SLOTS 32768       /* a power of two */
#define TOK_CACHE_ARENA (1u << 20)  /* bytes of keys and ids */
#define TOK_CACHE_MAX_WORD 255

struct tok_cache_slot {
	uint64_t hash; /* 0: empty */
	uint32_t off;  /* the key, then the ids (4-byte aligned), in the arena */
	uint16_t len, n_ids;
};

struct tok_word_cache {
	size_t used, n;
	struct tok_cache_slot slots[TOK_CACHE_SLOTS];
	char arena[TOK_CACHE_ARENA];
};

/* --- the tokenizer ---------------------------------------------------------------------------- */

enum tok_norm_kind { TOK_NFC, TOK_NFD, TOK_NFKC, TOK_NFKD };

enum tok_split_behavior {
	TOK_SPLIT_REMOVED,
	TOK_SPLIT_ISOLATED,
	TOK_SPLIT_MERGED_PREV,
	TOK_SPLIT_MERGED_NEXT,
	TOK_SPLIT_CONTIGUOUS,
};

enum tok_pretok_kind { TOK_PRE_SPLIT, TOK_PRE_BYTELEVEL };

struct tok_pretok {
	enum tok_pretok_kind kind;
	pcre2_code *re; /* Split pattern, or ByteLevel's GPT-2 regex when use_regex */
	enum tok_split_behavior behavior;
	bool invert;
	bool add_prefix_space;
};

/* One added-token pattern. Several patterns may share an id (HF keeps repeats). */
struct tok_pattern {
	const char *text; /* what is matched: the content, normalized if the token is */
	uint32_t len;
	int32_t id;
};

/* Leftmost-longest matcher over a small set of literal patterns (HF uses Aho-Corasick). */
struct tok_matcher {
	struct tok_pattern *pats; /* sorted by first byte, then longest first, then given order */
	size_t n;
	uint32_t first[257];      /* pats[first[b] .. first[b+1]) start with byte b */
};

/* Per-id flags. */
enum {
	TOK_ID_ADDED = 1 << 0,
	TOK_ID_SPECIAL = 1 << 1,
	TOK_ID_LSTRIP = 1 << 2,
	TOK_ID_RSTRIP = 1 << 3,
	TOK_ID_SINGLE_WORD = 1 << 4,
	TOK_ID_HAS_PIECE = 1 << 5,
};

struct capy_tokenizer {
	/* strings: model-space pieces, decoded bytes and added-token contents, all in pool */
	char *pool;
	size_t pool_len, pool_cap;

	int32_t n_ids;           /* largest id + 1 */
	uint32_t *piece_off;     /* [n_ids] token string (added content or vocab key) */
	uint32_t *piece_len;
	uint32_t *bytes_off;     /* [n_ids] what the decoder makes of the token alone */
	uint32_t *bytes_len;
	uint8_t *id_flags;       /* [n_ids] TOK_ID_* */
	size_t vocab_size;       /* HF get_vocab_size(with_added_tokens=True) */

	struct tok_strmap vocab; /* model-space string -> id (BPE vocabulary only) */
	struct tok_strmap added; /* added-token content -> id */
	struct tok_mergemap merges;

	/* BPE options */
	int32_t unk_id;          /* -1: none; -2: named but missing (encoding fails like HF) */
	char *unk_token;
	bool fuse_unk, byte_fallback, ignore_merges;
	char *subword_prefix;    /* continuing_subword_prefix, or NULL */
	size_t subword_prefix_len;
	char *word_suffix;       /* end_of_word_suffix, or NULL */
	size_t word_suffix_len;
	int32_t byte_fallback_id[256]; /* id of "<0xAB>", -1 if absent */

	/* ByteLevel: byte -> model-space character, and its id when it is a vocabulary entry */
	bool byte_level;
	char bl_char[256][2];
	uint8_t bl_char_len[256];
	int32_t bl_id[256];      /* -1 when the single character is not in the vocabulary */
	bool bl_fast;            /* every bl_id is set and no prefix/suffix: the word fast path */

	enum tok_norm_kind *norms;
	size_t n_norms;

	struct tok_pretok *pretoks;
	size_t n_pretoks;
	uint32_t max_captures;   /* for match data */

	struct tok_matcher raw_matcher;  /* added tokens with normalized=false */
	struct tok_matcher norm_matcher; /* added tokens with normalized=true */
	pcre2_code *word_char;   /* Rust regex \w, for single_word tokens; NULL if none */

	enum { TOK_DEC_NONE, TOK_DEC_BYTELEVEL } decoder;

	struct tok_scratch_pool *scratch; /* mutable behind the pointer: it has its own lock */
};

/* --- loading (tok-load.c, tok-model.c, tok-added.c) ---------------------------------------- */

#define TOK_WHAT "tokenizer.json"

/* JSON access with errors naming the field path; absent or null optional fields are left alone. */
int tok_oom(struct capy_err *err);
int tok_json_string(const cJSON *it, const char *path, const char **out, struct capy_err *err);
int tok_json_bool(const cJSON *obj, const char *key, const char *path, bool *out,
		  struct capy_err *err);
int tok_json_opt_string(const cJSON *obj, const char *key, const char *path, char **out,
			struct capy_err *err);
const char *tok_json_type(const cJSON *obj);
/* Copy a string into the pool (NUL-terminated); *off is where. The pool may move. */
int tok_pool_add(struct capy_tokenizer *tok, const char *s, size_t len, uint32_t *off);

/* One model.vocab entry, in file order. */
struct tok_vocab_entry {
	uint32_t off, len; /* the key, in the pool */
	int32_t id;
};

/* One added_tokens entry; id is assigned by tok_build_added (-1: ignored, as HF ignores it). */
struct tok_added_def {
	const char *content;
	bool single_word, lstrip, rstrip, normalized, special;
	int32_t id;
};

int tok_load_model(struct capy_tokenizer *tok, const cJSON *model, struct tok_vocab_entry **vocab,
		   size_t *n_vocab, struct capy_err *err);
void tok_setup_byte_level(struct capy_tokenizer *tok);
int tok_read_added(const cJSON *list, struct tok_added_def **out, size_t *n_out,
		   struct capy_err *err);
int tok_build_added(struct capy_tokenizer *tok, struct tok_added_def *a, size_t n, size_t vocab_n,
		    struct capy_err *err);
/* The per-id arrays: pieces, decoded bytes, flags; vocab_size. */
int tok_build_ids(struct capy_tokenizer *tok, const struct tok_vocab_entry *v, size_t n_v,
		  const struct tok_added_def *a, size_t n_a, struct capy_err *err);
/* Point the patterns into the pool (they hold offsets while it may move) and sort them. */
void tok_matcher_finish(struct capy_tokenizer *tok, struct tok_matcher *m);

/* --- encoding context (one per call) ------------------------------------------------------ */

struct tok_symbol {
	int32_t id;
	int32_t prev, next;
	bool alive;
};

struct tok_span {
	uint32_t start, end;
	bool match;
};

/* The working memory of one encoding call. A tokenizer keeps the ones calls have finished with
 * (tok-encode.c), so a call allocates nothing once its sizes have been seen and the word cache
 * stays warm from call to call; each is used by one thread at a time. */
struct tok_scratch {
	struct tok_scratch *next;  /* in the pool's free list */
	pcre2_match_data *md;
	pcre2_match_context *mctx;
	pcre2_jit_stack *jit_stack;
	struct tok_buf norm[2];    /* normalization results */
	struct tok_buf prefixed;   /* ByteLevel add_prefix_space copy */
	struct tok_buf model;      /* model-space word */
	struct tok_buf key;        /* vocabulary lookups with prefix/suffix */
	struct tok_buf lossy;      /* the input with invalid UTF-8 replaced */
	struct tok_span *spans;    /* split results, stacked by pre-tokenizer depth */
	size_t n_spans, cap_spans;
	struct tok_symbol *syms;
	size_t cap_syms;
	uint64_t *heap;            /* (rank << 32 | pos) */
	int32_t *heap_id;
	size_t cap_heap;
	struct tok_word_cache cache;
};

struct tok_scratch_pool;
struct tok_scratch_pool *tok_scratch_pool_new(void);
void tok_scratch_pool_free(struct tok_scratch_pool *p);

struct tok_ctx {
	const struct capy_tokenizer *tok;
	unsigned flags;
	struct capy_tokens *out;
	struct capy_err *err;
	struct tok_scratch *s;
};

int tok_emit(struct tok_ctx *c, int32_t id);

/* Stage 2-4 entry points. */
/* Normalize s; *res is s itself when nothing changes, else points into one of bufs. */
int tok_normalize(const struct capy_tokenizer *tok, const char *s, size_t len, const char **res,
		  size_t *res_len, struct tok_buf bufs[2], struct capy_err *err);
int tok_pretokenize(struct tok_ctx *c, const char *s, size_t len);
int tok_bpe_word(struct tok_ctx *c, const char *s, size_t len);

/* Added tokens. */
int tok_matcher_build(struct tok_matcher *m, struct tok_pattern *pats, size_t n);
void tok_matcher_release(struct tok_matcher *m);
/* Leftmost-longest match at or after `from`; returns the pattern or NULL. */
const struct tok_pattern *tok_matcher_find(const struct tok_matcher *m, const char *s, size_t len,
					   size_t from, size_t *start);
typedef int (*tok_piece_fn)(struct tok_ctx *c, const char *s, size_t len);
/* HF find_matches + split: emit added-token ids and pass the text between them to fn. */
int tok_split_added(struct tok_ctx *c, const struct tok_matcher *m, const char *s, size_t len,
		    tok_piece_fn fn);

#endif
