/* fuzz-tokenizer.c - libFuzzer target for libcore/text/tokenizer.
 *
 * The first input byte picks what the rest is:
 *   0-3  text, encoded with the Qwen3 tokenizer (flags from the low bits: lossy, added tokens),
 *        then decoded whole, skipping specials, and one id at a time; the streaming decoder must
 *        agree with decode, and with no added tokens recognised decode(encode(text)) must be
 *        the text's NFC form (byte-level BPE loses nothing)
 *   4    little-endian int32 ids to decode, whole and streamed
 *   5+   a tokenizer.json to load; if it loads, it encodes and decodes a fixed text
 * The Qwen3 tokenizer is read from $CAPY_FUZZ_TOKENIZER, else t/text/qwen3/tokenizer.json.zst
 * (run from the repository root). Seeds: t/fuzz/corpus/tokenizer/.
 */
#include "text/tokenizer.h"
#include "text/tokenizer-impl.h"
#include "util/file.h"

#include <zstd.h>

static struct capy_tokenizer *qwen;

static struct capy_tokenizer *load(const char *path)
{
	struct capy_err err = { 0 };
	struct capy_tokenizer *tok = NULL;
	char *data, *raw;
	size_t len;
	unsigned long long size;

	if (capy_read_file(path, 1u << 30, &data, &len, &err) < 0) {
		fprintf(stderr, "fuzz-tokenizer: %s\n", err.msg);
		abort();
	}
	size = ZSTD_getFrameContentSize(data, len);
	if (size != ZSTD_CONTENTSIZE_ERROR && size != ZSTD_CONTENTSIZE_UNKNOWN) {
		raw = malloc(size);
		if (!raw || ZSTD_decompress(raw, size, data, len) != size)
			abort();
		free(data);
		data = raw;
		len = size;
	}
	if (capy_tokenizer_new(&tok, data, len, &err) < 0) {
		fprintf(stderr, "fuzz-tokenizer: %s\n", err.msg);
		abort();
	}
	free(data);
	return tok;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *path = getenv("CAPY_FUZZ_TOKENIZER");

	(void)argc;
	(void)argv;
	qwen = load(path ? path : "t/text/qwen3/tokenizer.json.zst");
	return 0;
}

/* decode whole and streamed; they must agree. Returns the decoded text (malloc'd). */
static char *decode_both(const struct capy_tokenizer *tok, const int32_t *ids, size_t n,
			 unsigned flags, size_t *len)
{
	struct capy_err err = { 0 };
	struct capy_detok *d = capy_detok_new(tok, flags);
	char *text;
	const char *piece;
	size_t plen, slen = 0;

	if (!d || capy_tokenizer_decode(tok, ids, n, flags, &text, len, &err) < 0)
		abort();
	for (size_t i = 0; i <= n; i++) {
		if (i < n ? capy_detok_feed(d, ids[i], &piece, &plen) : capy_detok_flush(d, &piece, &plen))
			abort();
		if (slen + plen > *len || memcmp(text + slen, piece, plen))
			__builtin_trap(); /* the stream says something decode does not */
		slen += plen;
	}
	if (slen != *len)
		__builtin_trap();
	capy_detok_free(d);
	return text;
}

static void text_case(const uint8_t *data, size_t size, unsigned mode)
{
	unsigned flags = (mode & 1 ? CAPY_TOK_LOSSY : 0) | (mode & 2 ? CAPY_TOK_PARSE_ADDED : 0);
	struct capy_tokens ids = { 0 };
	struct capy_err err = { 0 };
	size_t len;
	char *text;

	if (capy_tokenizer_encode(qwen, (const char *)data, size, flags, &ids, &err) < 0) {
		/* only invalid UTF-8 may fail */
		if (err.code != CAPY_EFORMAT || tok_utf8_valid_prefix((const char *)data, size) == size)
			__builtin_trap();
		return;
	}
	text = decode_both(qwen, ids.ids, ids.n, 0, &len);
	if (!(flags & CAPY_TOK_PARSE_ADDED)) {
		struct tok_buf lossy = { 0 }, bufs[2] = { { 0 } };
		const char *norm;
		size_t nlen;
		if (tok_utf8_lossy(&lossy, (const char *)data, size, false, NULL) < 0 ||
		    tok_normalize(qwen, lossy.p ? lossy.p : "", lossy.len, &norm, &nlen, bufs, &err) < 0)
			abort();
		if (nlen != len || memcmp(norm, text, len))
			__builtin_trap(); /* byte-level BPE lost or changed something */
		tok_buf_release(&lossy);
		tok_buf_release(&bufs[0]);
		tok_buf_release(&bufs[1]);
	}
	free(text);
	text = decode_both(qwen, ids.ids, ids.n, CAPY_TOK_SKIP_SPECIAL, &len);
	free(text);
	capy_tokens_release(&ids);
}

static void ids_case(const uint8_t *data, size_t size)
{
	size_t n = size / 4, len;
	int32_t *ids = malloc((n ? n : 1) * sizeof(*ids));
	char *text;

	for (size_t i = 0; i < n; i++) {
		uint32_t v = (uint32_t)data[4 * i] | (uint32_t)data[4 * i + 1] << 8 |
			     (uint32_t)data[4 * i + 2] << 16 | (uint32_t)data[4 * i + 3] << 24;
		/* mostly valid ids, some not */
		ids[i] = v & 0x80000000u ? (int32_t)v : (int32_t)(v % 152000);
	}
	text = decode_both(qwen, ids, n, 0, &len);
	free(text);
	text = decode_both(qwen, ids, n, CAPY_TOK_SKIP_SPECIAL, &len);
	free(text);
	free(ids);
}

static void json_case(const uint8_t *data, size_t size)
{
	static const char sample[] = "Hello, world! <s>x</s> the\tthing 123 caf\xc3\xa9 \xf0\x9f\x98\x80";
	struct capy_tokenizer *tok = NULL;
	struct capy_tokens ids = { 0 };
	struct capy_err err = { 0 };
	size_t len;
	char *text;

	if (capy_tokenizer_new(&tok, (const char *)data, size, &err) < 0) {
		if (tok || !err.msg[0])
			__builtin_trap(); /* a failure must say why and leave nothing */
		return;
	}
	if (capy_tokenizer_encode(tok, sample, sizeof(sample) - 1, CAPY_TOK_PARSE_ADDED, &ids,
				  &err) >= 0) {
		text = decode_both(tok, ids.ids, ids.n, 0, &len);
		free(text);
	}
	capy_tokens_release(&ids);
	capy_tokenizer_free(tok);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	if (data[0] < 4)
		text_case(data + 1, size - 1, data[0]);
	else if (data[0] == 4)
		ids_case(data + 1, size - 1);
	else
		json_case(data + 1, size - 1);
	return 0;
}
