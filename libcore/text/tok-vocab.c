/* tok-vocab.c - the tokenizer's hash maps: strings -> ids and id pairs -> merges. */
#include "tokenizer-impl.h"
#include "../util/hash.h"

static size_t table_size(size_t expected)
{
	size_t n = 16;

	while (n < expected + expected / 2 + 1) /* load factor <= 2/3 */
		n *= 2;
	return n;
}

int tok_strmap_init(struct tok_strmap *m, size_t expected, char *const *base)
{
	size_t n = table_size(expected);

	m->slots = malloc(n * sizeof(*m->slots));
	if (!m->slots)
		return CAPY_ENOMEM;
	for (size_t i = 0; i < n; i++)
		m->slots[i].id = -1;
	m->mask = n - 1;
	m->n = 0;
	m->base = base;
	return 0;
}

static struct tok_strmap_entry *find_slot(const struct tok_strmap *m, const char *key, size_t len,
					  uint64_t h)
{
	for (size_t i = (size_t)h & m->mask;; i = (i + 1) & m->mask) {
		struct tok_strmap_entry *e = &m->slots[i];
		if (e->id < 0)
			return e;
		if (e->hash == h && e->len == len && !memcmp(*m->base + e->off, key, len))
			return e;
	}
}

static int grow(struct tok_strmap *m)
{
	struct tok_strmap old = *m;

	if (tok_strmap_init(m, (old.mask + 1), old.base) < 0) {
		*m = old;
		return CAPY_ENOMEM;
	}
	for (size_t i = 0; i <= old.mask; i++) {
		struct tok_strmap_entry *e = &old.slots[i];
		if (e->id >= 0) {
			*find_slot(m, *m->base + e->off, e->len, e->hash) = *e;
			m->n++;
		}
	}
	free(old.slots);
	return 0;
}

int tok_strmap_put(struct tok_strmap *m, uint32_t off, size_t len, int32_t id)
{
	const char *key = *m->base + off;
	uint64_t h = capy_xxh3(key, len);
	struct tok_strmap_entry *e;

	if ((m->n + 1) * 3 > (m->mask + 1) * 2 && grow(m) < 0)
		return CAPY_ENOMEM;
	e = find_slot(m, key, len, h);
	if (e->id < 0) {
		e->hash = h;
		e->off = off;
		e->len = (uint32_t)len;
		m->n++;
	}
	e->id = id;
	return 0;
}

int32_t tok_strmap_get(const struct tok_strmap *m, const char *key, size_t len)
{
	if (!m->slots)
		return -1;
	return find_slot(m, key, len, capy_xxh3(key, len))->id;
}

void tok_strmap_release(struct tok_strmap *m)
{
	free(m->slots);
	m->slots = NULL;
	m->n = 0;
}

int tok_mergemap_init(struct tok_mergemap *m, size_t expected)
{
	size_t n = table_size(expected);

	m->slots = malloc(n * sizeof(*m->slots));
	if (!m->slots)
		return CAPY_ENOMEM;
	for (size_t i = 0; i < n; i++)
		m->slots[i].key = TOK_PAIR_EMPTY;
	m->mask = n - 1;
	m->n = 0;
	m->shift = 64 - (unsigned)__builtin_ctzll(n);
	return 0;
}

/* The size is fixed by init (the merge count is known up front); a later duplicate pair
 * overwrites, as HF's HashMap collect does, so the last rank wins. */
int tok_mergemap_put(struct tok_mergemap *m, int32_t a, int32_t b, uint32_t rank, int32_t id)
{
	uint64_t key = tok_pair_key(a, b);
	size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> m->shift);

	for (;; i = (i + 1) & m->mask) {
		struct tok_merge_slot *s = &m->slots[i];
		if (s->key == TOK_PAIR_EMPTY) {
			if ((m->n + 1) * 3 > (m->mask + 1) * 2)
				return CAPY_ENOMEM; /* init was given a wrong count: a bug */
			s->key = key;
			m->n++;
		}
		if (s->key == key) {
			s->rank = rank;
			s->id = id;
			return 0;
		}
	}
}

void tok_mergemap_release(struct tok_mergemap *m)
{
	free(m->slots);
	m->slots = NULL;
}
