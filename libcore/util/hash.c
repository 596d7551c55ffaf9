/* hash.c - XXH3-64 through libxxhash, inlined so no shared library is needed at run time. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "hash.h"

uint64_t capy_xxh3(const void *data, size_t len)
{
	return XXH3_64bits(data, len);
}

struct capy_hasher {
	XXH3_state_t st;
};

struct capy_hasher *capy_hasher_new(void)
{
	struct capy_hasher *h = aligned_alloc(64, CAPY_ALIGN_UP(sizeof(*h), 64));

	if (h)
		XXH3_64bits_reset(&h->st);
	return h;
}

void capy_hasher_update(struct capy_hasher *h, const void *data, size_t len)
{
	XXH3_64bits_update(&h->st, data, len);
}

uint64_t capy_hasher_digest(const struct capy_hasher *h)
{
	return XXH3_64bits_digest(&h->st);
}

void capy_hasher_reset(struct capy_hasher *h)
{
	XXH3_64bits_reset(&h->st);
}

void capy_hasher_free(struct capy_hasher *h)
{
	free(h);
}

void capy_hash_hex(uint64_t h, char buf[17])
{
	snprintf(buf, 17, "%016" PRIx64, h);
}

int capy_hash_parse(const char *s, uint64_t *out)
{
	uint64_t v = 0;

	for (int i = 0; i < 16; i++) {
		char c = s[i];
		unsigned d;
		if (c >= '0' && c <= '9')
			d = (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			d = (unsigned)(c - 'a' + 10);
		else
			return -1;
		v = v << 4 | d;
	}
	if (s[16])
		return -1;
	*out = v;
	return 0;
}
