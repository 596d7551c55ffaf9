/* tok-bpe.c - the BPE model: one pre-tokenized word to ids (HF BPE::merge_word + Word::merge_all).
 *
 * Merging repeatedly applies the lowest-ranked merge among adjacent symbol pairs, leftmost first,
 * with a binary heap of (rank, position) entries exactly like HF's: stale entries are skipped
 * when the pair at their position no longer produces the same id. All memory is scratch kept in
 * the context, grown when a longer word arrives.
 */
#include "tokenizer-impl.h"
#include "../util/hash.h"

static int grow_scratch(struct tok_ctx *c, size_t n)
{
	if (n > c->s->cap_syms) {
		size_t cap = c->s->cap_syms ? c->s->cap_syms : 64;
		while (cap < n)
			cap *= 2;
		struct tok_symbol *s = realloc(c->s->syms, cap * sizeof(*s));
		if (!s)
			return capy_err_set(c->err, CAPY_ENOMEM, "out of memory");
		c->s->syms = s;
		c->s->cap_syms = cap;
	}
	/* at most one entry per pair at first, then at most two more per merge */
	if (3 * n > c->s->cap_heap) {
		size_t cap = c->s->cap_heap ? c->s->cap_heap : 192;
		while (cap < 3 * n)
			cap *= 2;
		uint64_t *h = realloc(c->s->heap, cap * sizeof(*h));
		if (!h)
			return capy_err_set(c->err, CAPY_ENOMEM, "out of memory");
		c->s->heap = h;
		int32_t *hi = realloc(c->s->heap_id, cap * sizeof(*hi));
		if (!hi)
			return capy_err_set(c->err, CAPY_ENOMEM, "out of memory");
		c->s->heap_id = hi;
		c->s->cap_heap = cap;
	}
	return 0;
}

/* --- a min-heap of (rank << 32 | pos) with the merged id alongside ------------------------ */

static void heap_push(struct tok_ctx *c, size_t *n, uint64_t key, int32_t id)
{
	size_t i = (*n)++;

	while (i > 0) {
		size_t parent = (i - 1) / 2;
		if (c->s->heap[parent] <= key)
			break;
		c->s->heap[i] = c->s->heap[parent];
		c->s->heap_id[i] = c->s->heap_id[parent];
		i = parent;
	}
	c->s->heap[i] = key;
	c->s->heap_id[i] = id;
}

static void heap_pop(struct tok_ctx *c, size_t *n, uint64_t *key, int32_t *id)
{
	uint64_t last;
	int32_t last_id;
	size_t i = 0;

	*key = c->s->heap[0];
	*id = c->s->heap_id[0];
	last = c->s->heap[--*n];
	last_id = c->s->heap_id[*n];
	for (;;) {
		size_t child = 2 * i + 1;
		if (child >= *n)
			break;
		if (child + 1 < *n && c->s->heap[child + 1] < c->s->heap[child])
			child++;
		if (c->s->heap[child] >= last)
			break;
		c->s->heap[i] = c->s->heap[child];
		c->s->heap_id[i] = c->s->heap_id[child];
		i = child;
	}
	c->s->heap[i] = last;
	c->s->heap_id[i] = last_id;
}

static void push_pair(struct tok_ctx *c, size_t *n, int32_t pos)
{
	const struct tok_symbol *s = c->s->syms;
	const struct tok_merge_slot *m = tok_mergemap_get(&c->tok->merges, s[pos].id,
							  s[s[pos].next].id);

	if (m)
		heap_push(c, n, (uint64_t)m->rank << 32 | (uint32_t)pos, m->id);
}

static int merge_and_emit(struct tok_ctx *c, size_t n_syms)
{
	const struct tok_mergemap *merges = &c->tok->merges;
	struct tok_symbol *s = c->s->syms;
	size_t n = 0;
	int rc;

	if (n_syms > 1) {
		for (size_t i = 0; i + 1 < n_syms; i++)
			push_pair(c, &n, (int32_t)i);
		while (n) {
			uint64_t key;
			int32_t id;
			heap_pop(c, &n, &key, &id);
			int32_t pos = (int32_t)(uint32_t)key;
			int32_t next = s[pos].next;
			if (!s[pos].alive || next < 0)
				continue;
			const struct tok_merge_slot *m = tok_mergemap_get(merges, s[pos].id, s[next].id);
			if (!m || m->id != id)
				continue; /* an expired entry */
			s[pos].id = id;
			s[pos].next = s[next].next;
			s[next].alive = false;
			if (s[pos].next >= 0)
				s[s[pos].next].prev = pos;
			if (s[pos].prev >= 0)
				push_pair(c, &n, s[pos].prev);
			if (s[pos].next >= 0)
				push_pair(c, &n, pos);
		}
	}
	for (size_t i = 0; i < n_syms; i++)
		if (s[i].alive && (rc = tok_emit(c, s[i].id)) < 0)
			return rc;
	return 0;
}

static void add_symbol(struct tok_ctx *c, size_t *n, int32_t id)
{
	struct tok_symbol *s = &c->s->syms[*n];

	s->id = id;
	s->prev = (int32_t)*n - 1;
	s->next = -1;
	s->alive = true;
	if (*n)
		c->s->syms[*n - 1].next = (int32_t)*n;
	(*n)++;
}

/* Look up prefix? + s + suffix?, as merge_word builds it. */
static int32_t lookup_piece(struct tok_ctx *c, const char *s, size_t len, bool first, bool last)
{
	const struct capy_tokenizer *tok = c->tok;
	struct tok_buf *k = &c->s->key;

	if ((first || !tok->subword_prefix) && (!last || !tok->word_suffix))
		return tok_strmap_get(&tok->vocab, s, len);
	k->len = 0;
	if ((!first && tok->subword_prefix &&
	     tok_buf_add(k, tok->subword_prefix, tok->subword_prefix_len) < 0) ||
	    tok_buf_add(k, s, len) < 0 ||
	    (last && tok->word_suffix && tok_buf_add(k, tok->word_suffix, tok->word_suffix_len) < 0))
		return -3;
	return tok_strmap_get(&tok->vocab, k->p, k->len);
}

/* The general initial segmentation of merge_word: one symbol per character, with byte fallback,
 * unknown-token fusing and prefix/suffix exactly as HF. m is a model-space string. */
static int initial_symbols(struct tok_ctx *c, const char *m, size_t len, size_t *n_syms)
{
	const struct capy_tokenizer *tok = c->tok;
	int32_t unk = -1; /* pending unknown-token symbol */
	size_t n = 0;

	for (size_t i = 0; i < len;) {
		uint32_t cp;
		size_t clen = (size_t)tok_utf8_next(m + i, &cp);
		bool first = i == 0, last = i + clen == len;
		int32_t id = lookup_piece(c, m + i, clen, first, last);
		if (id == -3)
			return capy_err_set(c->err, CAPY_ENOMEM, "out of memory");
		if (id >= 0) {
			if (unk >= 0)
				add_symbol(c, &n, unk);
			unk = -1;
			add_symbol(c, &n, id);
			i += clen;
			continue;
		}
		if (tok->byte_fallback) {
			/* the bytes of the piece as looked up, prefix and suffix included */
			const char *p = m + i;
			size_t plen = clen;
			if ((!first && tok->subword_prefix) || (last && tok->word_suffix)) {
				p = c->s->key.p;
				plen = c->s->key.len;
			}
			bool all = true;
			for (size_t k = 0; k < plen; k++)
				all = all && tok->byte_fallback_id[(uint8_t)p[k]] >= 0;
			if (all) {
				if (grow_scratch(c, n + plen + (len - i)) < 0)
					return CAPY_ENOMEM;
				for (size_t k = 0; k < plen; k++)
					add_symbol(c, &n, tok->byte_fallback_id[(uint8_t)p[k]]);
				i += clen;
				continue;
			}
		}
		if (tok->unk_token) {
			if (tok->unk_id < 0 && !(unk >= 0 && tok->fuse_unk))
				return capy_err_set(c->err, CAPY_EFORMAT,
						    "unk token '%s' is not in the vocabulary",
						    tok->unk_token);
			if (unk >= 0 && !tok->fuse_unk)
				add_symbol(c, &n, unk);
			if (!(unk >= 0 && tok->fuse_unk))
				unk = tok->unk_id;
		}
		i += clen;
	}
	if (unk >= 0)
		add_symbol(c, &n, unk);
	*n_syms = n;
	return 0;
}

static int bpe_word(struct tok_ctx *c, const char *s, size_t len);

static void cache_clear(struct tok_word_cache *cache)
{
	memset(cache->slots, 0, sizeof(cache->slots));
	cache->used = cache->n = 0;
}

int tok_bpe_word(struct tok_ctx *c, const char *s, size_t len)
{
	struct tok_word_cache *cache = &c->s->cache;
	struct tok_cache_slot *slot;
	size_t n0 = c->out->n, n, need, i;
	uint64_t h;
	int rc;

	if (len > TOK_CACHE_MAX_WORD)
		return bpe_word(c, s, len);
	h = capy_xxh3(s, len) | 1;
	/* linear probing; the table is kept at most half full */
	for (i = h & (TOK_CACHE_SLOTS - 1);; i = (i + 1) & (TOK_CACHE_SLOTS - 1)) {
		slot = &cache->slots[i];
		if (!slot->hash)
			break;
		if (slot->hash == h && slot->len == len && !memcmp(cache->arena + slot->off, s, len)) {
			const int32_t *ids = (const int32_t *)(const void *)(cache->arena + slot->off +
									     CAPY_ALIGN_UP(len, 4));
			for (size_t k = 0; k < slot->n_ids; k++)
				if ((rc = tok_emit(c, ids[k])) < 0)
					return rc;
			return 0;
		}
	}
	if ((rc = bpe_word(c, s, len)) < 0)
		return rc;
	n = c->out->n - n0;
	need = CAPY_ALIGN_UP(len, 4) + n * sizeof(int32_t);
	if (n > UINT16_MAX || need > TOK_CACHE_ARENA / 64)
		return 0;
	/* full: start again rather than track what to evict */
	if (cache->used + need > TOK_CACHE_ARENA || cache->n >= TOK_CACHE_SLOTS / 2) {
		cache_clear(cache);
		slot = &cache->slots[h & (TOK_CACHE_SLOTS - 1)];
	}
	cache->n++;
	slot->hash = h;
	slot->off = (uint32_t)cache->used;
	slot->len = (uint16_t)len;
	slot->n_ids = (uint16_t)n;
	memcpy(cache->arena + cache->used, s, len);
	memcpy(cache->arena + cache->used + CAPY_ALIGN_UP(len, 4), c->out->ids + n0,
	       n * sizeof(int32_t));
	cache->used += need;
	return 0;
}

/* BPE::tokenize_with_cache without the cache: one word to ids. */
static int bpe_word(struct tok_ctx *c, const char *s, size_t len)
{
	const struct capy_tokenizer *tok = c->tok;
	const char *m = s;
	size_t mlen = len, n = 0;
	int rc;

	if (tok->byte_level && tok->bl_fast && !tok->ignore_merges) {
		/* every byte is one known symbol */
		if ((rc = grow_scratch(c, len)) < 0)
			return rc;
		for (size_t i = 0; i < len; i++)
			add_symbol(c, &n, tok->bl_id[(uint8_t)s[i]]);
		return merge_and_emit(c, n);
	}
	if (tok->byte_level) {
		c->s->model.len = 0;
		if (tok_buf_reserve(&c->s->model, 2 * len) < 0)
			return capy_err_set(c->err, CAPY_ENOMEM, "out of memory");
		for (size_t i = 0; i < len; i++) {
			uint8_t b = (uint8_t)s[i];
			memcpy(c->s->model.p + c->s->model.len, tok->bl_char[b], tok->bl_char_len[b]);
			c->s->model.len += tok->bl_char_len[b];
		}
		m = c->s->model.p;
		mlen = c->s->model.len;
	}
	if (tok->ignore_merges) {
		int32_t id = tok_strmap_get(&tok->vocab, m, mlen);
		if (id >= 0)
			return tok_emit(c, id);
	}
	/* byte fallback may turn one character into 4 symbols (more with a prefix) */
	if ((rc = grow_scratch(c, mlen + 1)) < 0)
		return rc;
	if ((rc = initial_symbols(c, m, mlen, &n)) < 0)
		return rc;
	return merge_and_emit(c, n);
}
