/* http-auth.c - API keys: "Authorization: Bearer <key>" or "x-api-key: <key>".
 *
 * The keys are kept as SHA-256 digests and a presented key is hashed before it is compared,
 * so the comparison is of two 32-byte strings whatever the lengths: it reveals neither where
 * the first differing byte is nor how long a key is. Every key and both headers are always
 * examined, with no early exit.
 */
#include "http-impl.h"

#include <nettle/sha2.h>
#include <strings.h>

static void digest(const char *s, size_t n, uint8_t out[32])
{
	struct sha256_ctx ctx;

	sha256_init(&ctx);
	sha256_update(&ctx, n, (const uint8_t *)s);
	sha256_digest(&ctx, SHA256_DIGEST_SIZE, out);
}

int http_auth_init(struct capy_http *h, const char *const *keys, size_t n, struct capy_err *err)
{
	h->n_keys = 0;
	if (!n)
		return 0;
	if (!keys)
		return capy_err_set(err, CAPY_EINVAL, "n_api_keys is %zu but api_keys is NULL", n);
	for (size_t i = 0; i < n; i++) {
		if (!keys[i] || !keys[i][0])
			return capy_err_set(err, CAPY_EINVAL, "API key %zu is empty", i + 1);
		for (const char *p = keys[i]; *p; p++)
			if ((unsigned char)*p <= ' ' || *p == 0x7f)
				return capy_err_set(err, CAPY_EINVAL,
						    "API key %zu contains a space or a control "
						    "character",
						    i + 1);
	}
	if (!(h->keys = calloc(n, sizeof(*h->keys))))
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++)
		digest(keys[i], strlen(keys[i]), h->keys[i]);
	h->n_keys = n;
	return 0;
}

static bool is_space(char c)
{
	return c == ' ' || c == '\t';
}

/* The credential of a header value, trimmed; for Authorization, after "Bearer " (any case). */
static void credential(const char *v, bool bearer, const char **p, size_t *n)
{
	const char *end;

	*p = NULL;
	*n = 0;
	if (!v)
		return;
	while (is_space(*v))
		v++;
	if (bearer) {
		if (strncasecmp(v, "bearer", 6) || !is_space(v[6]))
			return;
		v += 6;
		while (is_space(*v))
			v++;
	}
	end = v + strlen(v);
	while (end > v && is_space(end[-1]))
		end--;
	*p = v;
	*n = (size_t)(end - v);
}

/* 1 when the 32 bytes of a and b are equal, else 0, in time independent of the bytes */
static unsigned ct_equal32(const uint8_t *a, const uint8_t *b)
{
	volatile unsigned diff = 0;

	for (int i = 0; i < 32; i++)
		diff |= (unsigned)(a[i] ^ b[i]);
	return ((diff - 1u) >> 8) & 1u; /* diff is 0..255: 1 only for 0 */
}

bool http_auth_check(const struct capy_http *h, const char *authorization, const char *x_api_key)
{
	const char *cred[2];
	size_t len[2];
	bool have[2];
	unsigned ok = 0;

	credential(authorization, true, &cred[0], &len[0]);
	credential(x_api_key, false, &cred[1], &len[1]);
	for (int c = 0; c < 2; c++) {
		uint8_t d[32];
		unsigned any = 0;

		have[c] = cred[c] && len[c];
		digest(have[c] ? cred[c] : "", have[c] ? len[c] : 0, d);
		for (size_t i = 0; i < h->n_keys; i++)
			any |= ct_equal32(d, h->keys[i]);
		ok |= any & (unsigned)have[c];
	}
	return ok != 0;
}
