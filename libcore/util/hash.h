/* hash.h - XXH3-64 checksums (libxxhash, inlined), whole-buffer and streaming.
 *
 * Artifact tensors and embedded files carry an XXH3-64 (seed 0) of their logical
 * bytes, written as 16 lower-case hex digits.
 */
#ifndef CAPY_UTIL_HASH_H
#define CAPY_UTIL_HASH_H

#include "err.h"

uint64_t capy_xxh3(const void *data, size_t len);

struct capy_hasher; /* streaming XXH3-64 */

struct capy_hasher *capy_hasher_new(void); /* NULL on OOM */
void capy_hasher_update(struct capy_hasher *h, const void *data, size_t len);
uint64_t capy_hasher_digest(const struct capy_hasher *h);
void capy_hasher_reset(struct capy_hasher *h);
void capy_hasher_free(struct capy_hasher *h);

/* "0123456789abcdef" form; buf must hold 17 bytes. */
void capy_hash_hex(uint64_t h, char buf[17]);
/* Parse 16 hex digits; -1 if malformed. */
int capy_hash_parse(const char *s, uint64_t *out);

#endif
