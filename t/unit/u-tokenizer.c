/* u-tokenizer.c - unit tests for libcore/text/tokenizer: loading errors, BPE rules, UTF-8
 * handling, the streaming decoder, lookups, regex translation and concurrent use.
 * Token-for-token agreement with Hugging Face is tested in t/t2000-*.bats and t/t2001-*.bats. */
#include "test.h"
#include "text/tokenizer-impl.h"
#include "util/file.h"

#include <pthread.h>

static struct capy_tokenizer *load_str(const char *json, struct capy_err *err)
{
	struct capy_tokenizer *tok = NULL;

	capy_err_clear(err);
	capy_tokenizer_new(&tok, json, strlen(json), err);
	return tok;
}

static struct capy_tokenizer *load_file(const char *path)
{
	struct capy_err err = { 0 };
	struct capy_tokenizer *tok = NULL;
	char *data;
	size_t len;

	if (capy_read_file(path, 1 << 24, &data, &len, &err) < 0 ||
	    capy_tokenizer_new(&tok, data, len, &err) < 0)
		fprintf(stderr, "%s\n", err.msg);
	if (tok)
		free(data);
	return tok;
}

/* encode and render the ids as "1 2 3" */
static const char *enc(const struct capy_tokenizer *tok, const char *text, unsigned flags)
{
	static char buf[1024];
	struct capy_tokens ids = { 0 };
	struct capy_err err = { 0 };
	size_t n = 0;

	buf[0] = '\0';
	if (capy_tokenizer_encode(tok, text, strlen(text), flags, &ids, &err) < 0) {
		snprintf(buf, sizeof(buf), "error: %.900s", err.msg);
		return buf;
	}
	for (size_t i = 0; i < ids.n && n < sizeof(buf) - 16; i++)
		n += (size_t)snprintf(buf + n, sizeof(buf) - n, i ? " %d" : "%d", ids.ids[i]);
	capy_tokens_release(&ids);
	return buf;
}

#define MODEL_HEAD "{\"model\": {\"type\": \"BPE\", "

static void test_load_errors(void)
{
	static const struct { const char *json; int code; const char *msg; } cases[] = {
		{ "{", CAPY_EFORMAT, "invalid JSON" },
		{ "[]", CAPY_EFORMAT, "not a JSON object" },
		{ "{\"version\": \"2.0\"}", CAPY_EFORMAT, "version" },
		{ "{}", CAPY_EFORMAT, "model is missing" },
		{ "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", CAPY_EUNSUPPORTED,
		  "model type 'WordPiece'" },
		{ MODEL_HEAD "\"vocab\": {\"a\": 0}}}", CAPY_EFORMAT, "missing vocab/merges" },
		{ MODEL_HEAD "\"vocab\": {\"a\": 0}, \"merges\": [\"a b\"]}}", CAPY_EFORMAT,
		  "merges[0]: 'b' is not in the vocabulary" },
		{ MODEL_HEAD "\"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}}", CAPY_EFORMAT,
		  "merges[0]: 'ab' is not in the vocabulary" },
		{ MODEL_HEAD "\"vocab\": {\"a\": 0}, \"merges\": [\"a  a\"]}}", CAPY_EFORMAT,
		  "two tokens separated by one space" },
		{ MODEL_HEAD "\"vocab\": {\"a\": 0, \"aa\": 1}, \"merges\": [[\"a\", \"a\"], \"a a\"]}}",
		  CAPY_EFORMAT, "merges[1] is not a pair" },
		{ MODEL_HEAD "\"vocab\": {\"a\": -1}, \"merges\": []}}", CAPY_EFORMAT, "id is not" },
		{ MODEL_HEAD "\"vocab\": {\"a\": 99999999}, \"merges\": []}}", CAPY_EUNSUPPORTED, "id" },
		{ MODEL_HEAD "\"dropout\": 0.5, \"vocab\": {}, \"merges\": []}}", CAPY_EUNSUPPORTED,
		  "dropout" },
		{ MODEL_HEAD "\"vocab\": {}, \"merges\": []}, \"normalizer\": {\"type\": \"Lowercase\"}}",
		  CAPY_EUNSUPPORTED, "normalizer type 'Lowercase'" },
		{ MODEL_HEAD "\"vocab\": {}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"Metaspace\"}}",
		  CAPY_EUNSUPPORTED, "pre-tokenizer type 'Metaspace'" },
		{ MODEL_HEAD "\"vocab\": {}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"Sequence\", "
		  "\"pretokenizers\": [{\"type\": \"ByteLevel\"}, {\"type\": \"ByteLevel\"}]}}",
		  CAPY_EUNSUPPORTED, "pre_tokenizer.pretokenizers[1]: a pre-tokenizer after ByteLevel" },
		{ MODEL_HEAD "\"vocab\": {}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"Split\", "
		  "\"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\", \"invert\": false}}",
		  CAPY_EFORMAT, "pre_tokenizer: " },
		{ MODEL_HEAD "\"vocab\": {}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"Split\", "
		  "\"pattern\": {\"Regex\": \"[a[b]]\"}, \"behavior\": \"Isolated\", \"invert\": false}}",
		  CAPY_EUNSUPPORTED, "nested character class" },
		{ MODEL_HEAD "\"vocab\": {}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"Split\", "
		  "\"pattern\": {\"Regex\": \"[\\\\S]\"}, \"behavior\": \"Isolated\", \"invert\": false}}",
		  CAPY_EUNSUPPORTED, "'\\S' inside a character class" },
		{ MODEL_HEAD "\"vocab\": {}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"Split\", "
		  "\"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Sideways\", \"invert\": false}}",
		  CAPY_EFORMAT, "behavior 'Sideways'" },
		{ MODEL_HEAD "\"vocab\": {}, \"merges\": []}, \"decoder\": {\"type\": \"WordPiece\"}}",
		  CAPY_EUNSUPPORTED, "decoder type 'WordPiece'" },
		{ MODEL_HEAD "\"vocab\": {}, \"merges\": []}, \"added_tokens\": [{\"id\": 0}]}",
		  CAPY_EFORMAT, "added_tokens[0] is not a string" },
		{ MODEL_HEAD "\"vocab\": {\"\\ud800\": 0}, \"merges\": []}}", CAPY_EFORMAT,
		  "invalid JSON" }, /* a lone surrogate, which serde_json refuses too */
	};
	struct capy_err err;

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct capy_tokenizer *tok = load_str(cases[i].json, &err);
		CHECK_MSG(!tok && err.code == cases[i].code, "case %zu: code %d, '%s'", i, err.code,
			  err.msg);
		CHECK_CONTAINS(err.msg, cases[i].msg);
		capy_tokenizer_free(tok);
	}
	/* the JSON text itself must be UTF-8, as HF reads it into a Rust String */
	CHECK(capy_tokenizer_new(&(struct capy_tokenizer *){ NULL }, "{\"x\": \"\xff\"}", 11, &err) ==
	      CAPY_EFORMAT);
	CHECK_CONTAINS(err.msg, "not valid UTF-8 at byte offset 7");
}

/* A character-level BPE: leftmost lowest rank first, the last rank of a repeated merge wins,
 * byte fallback, unknown tokens fused or not, ignore_merges. */
static void test_bpe_rules(void)
{
	static const struct { const char *model, *text, *ids; } cases[] = {
		{ "\"vocab\": {\"a\": 0, \"b\": 1, \"c\": 2, \"ab\": 3, \"bc\": 4, \"abc\": 5}, "
		  "\"merges\": [\"b c\", \"a b\", \"ab c\"]", "abc", "0 4" }, /* b c: rank 0 */
		{ "\"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, \"merges\": [\"a b\"]", "abab", "2 2" },
		{ "\"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": []", "xa", "0" }, /* no unk: dropped */
		{ "\"vocab\": {\"a\": 0, \"aa\": 1}, \"merges\": [[\"a\", \"a\"], [\"a\", \"a\"]]",
		  "aaa", "1 0" },
		{ "\"unk_token\": \"?\", \"byte_fallback\": true, \"vocab\": {\"?\": 0, \"a\": 1, "
		  "\"<0xC3>\": 2, \"<0xA9>\": 3, \"<0x78>\": 4}, \"merges\": []", "a\xc3\xa9x", "1 2 3 4" },
		{ "\"unk_token\": \"?\", \"byte_fallback\": true, \"vocab\": {\"?\": 0, \"a\": 1, "
		  "\"<0xC3>\": 2}, \"merges\": []", "a\xe2\x82\xac", "1 0" }, /* no bytes for €: unk */
		{ "\"unk_token\": \"?\", \"fuse_unk\": true, \"vocab\": {\"?\": 0, \"a\": 1}, "
		  "\"merges\": []", "xyzaxy", "0 1 0" },
		{ "\"unk_token\": \"?\", \"vocab\": {\"?\": 0, \"a\": 1}, \"merges\": []", "xyzaxy",
		  "0 0 0 1 0 0" },
		/* an unk token missing from the vocabulary fails only when needed, as in HF */
		{ "\"unk_token\": \"?\", \"vocab\": {\"a\": 1}, \"merges\": []", "a", "1" },
		{ "\"unk_token\": \"?\", \"vocab\": {\"a\": 1}, \"merges\": []", "b",
		  "error: unk token '?' is not in the vocabulary" },
		/* ignore_merges: a word in the vocabulary is taken whole */
		{ "\"ignore_merges\": true, \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2, \"abb\": 3}, "
		  "\"merges\": [\"a b\"]", "abb", "3" },
	};
	struct capy_err err;

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		char json[512];
		snprintf(json, sizeof(json), MODEL_HEAD "%s}}", cases[i].model);
		struct capy_tokenizer *tok = load_str(json, &err);
		CHECK_MSG(tok, "case %zu: %s", i, err.msg);
		if (tok)
			CHECK_STR(enc(tok, cases[i].text, 0), cases[i].ids);
		capy_tokenizer_free(tok);
	}
}

/* Without a decoder HF joins the token strings with spaces; unknown ids are skipped. */
static void test_decode_plain(void)
{
	struct capy_err err;
	struct capy_tokenizer *tok = load_str(MODEL_HEAD "\"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, "
					      "\"merges\": [\"a b\"]}}", &err);
	char *text;
	size_t len;

	CHECK(tok);
	if (!tok)
		return;
	CHECK_EQ_INT(capy_tokenizer_decode(tok, (int32_t[]){ 2, 1, 99, -1 }, 4, 0, &text, &len, &err),
		     0);
	CHECK_STR(text, "ab b");
	free(text);
	capy_tokenizer_free(tok);
}

static void test_utf8(void)
{
	static const struct { const char *in; size_t len; const char *out; size_t held; } cases[] = {
		{ "A\xF0\x80\x80" "B", 5, "A\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD" "B", 0 },
		{ "\xE1\x80" "A", 3, "\xEF\xBF\xBD" "A", 0 },
		{ "\xED\xA0\x80", 3, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD", 0 },
		{ "\xC0\xAF", 2, "\xEF\xBF\xBD\xEF\xBF\xBD", 0 },
		{ "\xF4\x90\x80\x80", 4,
		  "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD", 0 },
		{ "ok\xE2\x82", 4, "ok", 2 },     /* could still become U+20AC: held */
		{ "ok\xF0\x9F\x98", 5, "ok", 3 },
		{ "\xFF\xE2\x82", 3, "\xEF\xBF\xBD", 2 },
	};
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct tok_buf b = { 0 }, whole = { 0 };
		size_t held = 99;
		CHECK_EQ_INT(tok_utf8_lossy(&b, cases[i].in, cases[i].len, true, &held), 0);
		CHECK_MSG(b.len == strlen(cases[i].out) && !memcmp(b.p, cases[i].out, b.len),
			  "case %zu", i);
		CHECK_EQ_INT(held, cases[i].held);
		/* without holding, a cut sequence is one U+FFFD */
		CHECK_EQ_INT(tok_utf8_lossy(&whole, cases[i].in, cases[i].len, false, NULL), 0);
		CHECK_EQ_INT(whole.len, b.len + (cases[i].held ? 3 : 0));
		tok_buf_release(&b);
		tok_buf_release(&whole);
	}
	CHECK_EQ_INT(tok_utf8_valid_prefix("ab\xC3\xA9\xC3", 5), 4);
	CHECK(tok_is_white_space(0x85) && tok_is_white_space(0x3000) && !tok_is_white_space(0x180E));
	CHECK(!tok_is_white_space(0xFEFF) && !tok_is_white_space(0x200B));
}

static void test_bytelevel(void)
{
	struct capy_tokenizer *tok = load_file("t/text/mini/bytelevel-plain.json");
	struct capy_tokens ids = { 0 };
	struct capy_err err = { 0 };
	const char *p;
	size_t len, total = 0;
	char out[64];

	CHECK(tok);
	if (!tok)
		return;
	/* invalid UTF-8 fails with the offset, or becomes U+FFFD */
	CHECK_EQ_INT(capy_tokenizer_encode(tok, "ab\xff", 3, 0, &ids, &err), CAPY_EFORMAT);
	CHECK_STR(err.msg, "text is not valid UTF-8 at byte offset 2");
	CHECK_EQ_INT(ids.n, 0);
	CHECK_EQ_INT(capy_tokenizer_encode(tok, "ab\xff", 3, CAPY_TOK_LOSSY, &ids, &err), 0);
	CHECK_EQ_INT(ids.n, 5); /* a, b and the three bytes of U+FFFD */
	/* encoding appends */
	CHECK_EQ_INT(capy_tokenizer_encode(tok, "\xF0\x9F\x98\x80!", 5, 0, &ids, &err), 0);
	CHECK_EQ_INT(ids.n, 10);

	/* the streaming decoder holds back the emoji until its last byte */
	struct capy_detok *d = capy_detok_new(tok, 0);
	for (size_t i = 5; i < 9; i++) {
		CHECK_EQ_INT(capy_detok_feed(d, ids.ids[i], &p, &len), 0);
		CHECK_EQ_INT(len, i < 8 ? 0 : 4);
		memcpy(out + total, p, len);
		total += len;
	}
	CHECK(total == 4 && !memcmp(out, "\xF0\x9F\x98\x80", 4));
	/* a dangling lead byte comes out as U+FFFD at the flush, as decode makes it */
	CHECK_EQ_INT(capy_detok_feed(d, ids.ids[5], &p, &len), 0);
	CHECK_EQ_INT(len, 0);
	CHECK_EQ_INT(capy_detok_flush(d, &p, &len), 0);
	CHECK(len == 3 && !memcmp(p, "\xEF\xBF\xBD", 3));
	CHECK_EQ_INT(capy_detok_feed(d, ids.ids[5], &p, &len), 0);
	capy_detok_reset(d);
	CHECK_EQ_INT(capy_detok_flush(d, &p, &len), 0);
	CHECK_EQ_INT(len, 0);
	capy_detok_free(d);

	/* lookups */
	CHECK_EQ_INT(capy_tokenizer_token_id(tok, "\xC4\xA0", 2), 32); /* "Ġ" is the space byte */
	p = capy_tokenizer_piece(tok, 32, &len);
	CHECK(p && len == 2 && !memcmp(p, "\xC4\xA0", 2));
	p = capy_tokenizer_piece_bytes(tok, 32, &len);
	CHECK(p && len == 1 && *p == ' ');
	CHECK(!capy_tokenizer_piece(tok, capy_tokenizer_id_limit(tok), &len));
	CHECK(!capy_tokenizer_piece(tok, -5, &len));
	CHECK_EQ_INT(capy_tokenizer_added_id(tok, "<s>"), -1);
	capy_tokens_release(&ids);
	capy_tokenizer_free(tok);
}

static void test_added_lookups(void)
{
	struct capy_tokenizer *tok = load_file("t/text/mini/bytelevel.json");
	int32_t s, mask, hello;

	CHECK(tok);
	if (!tok)
		return;
	s = capy_tokenizer_added_id(tok, "<s>");
	mask = capy_tokenizer_added_id(tok, "<mask>");
	hello = capy_tokenizer_added_id(tok, "hello");
	CHECK(s >= 256 && mask >= 256 && hello >= 256);
	CHECK(capy_tokenizer_is_special(tok, s) && capy_tokenizer_is_added(tok, s));
	CHECK(!capy_tokenizer_is_special(tok, hello) && capy_tokenizer_is_added(tok, hello));
	CHECK(!capy_tokenizer_is_added(tok, 65));
	/* "é" is a byte-level character, so the added token takes that vocabulary id */
	CHECK_EQ_INT(capy_tokenizer_added_id(tok, "\xC3\xA9"), 0xE9);
	/* recognised or not */
	char want[32];
	snprintf(want, sizeof(want), "%d", s);
	CHECK_STR(enc(tok, "<s>", CAPY_TOK_PARSE_ADDED), want);
	CHECK(strcmp(enc(tok, "<s>", CAPY_TOK_PARSE_PLAIN), want));
	/* "hello" is in the vocabulary too: as an added token it is cut out before ByteLevel adds
	 * its prefix space, as plain text it gets one */
	snprintf(want, sizeof(want), "%d", hello);
	CHECK_STR(enc(tok, "hello", CAPY_TOK_PARSE_PLAIN), want);
	snprintf(want, sizeof(want), "32 %d", hello);
	CHECK_STR(enc(tok, "hello", CAPY_TOK_PARSE_SPECIAL), want);
	CHECK_EQ_INT(capy_tokenizer_vocab_size(tok), (size_t)capy_tokenizer_id_limit(tok));
	capy_tokenizer_free(tok);
}

static void test_regex_translation(void)
{
	static const struct { const char *re; const char *subject; bool match; } cases[] = {
		{ "^\\s$", "\xC2\x85", true },          /* U+0085 is White_Space */
		{ "^\\s$", "\xE1\xA0\x8E", false },     /* U+180E is not (PCRE2 says it is) */
		{ "^\\S$", "\xE1\xA0\x8E", true },
		{ "^[^\\s]$", "\xE1\xA0\x8E", true },
		{ "^\\p{L}$", "\xE1\xB2\x89", true },    /* U+1C89, Unicode 16.0 */
		{ "^[\\p{L}]$", "\xF0\xB1\x8D\x90", true }, /* U+31350, Unicode 15.0 */
		{ "^\\P{L}$", "\xE1\xB2\x89", false },
		{ "^\\p{letter}$", "a", true },
		{ "^\\h+$", "09afAF", true },            /* Ruby: hex digit */
		{ "^\\h$", " ", false },
		{ "^\\v$", "\x0B", true },
		{ "^\\v$", "\n", false },
		{ "^\\u00e9$", "\xC3\xA9", true },
		{ "^(?m:a.b)$", "a\nb", true },          /* Ruby's m is dot-all */
		{ "^a.b$", "a\nb", false },
		{ "^\\d$", "\xD9\xA3", true },
		{ "(?i:'s)", "'\xC5\xBF", true },         /* ſ folds to s */
	};
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct capy_err err = { 0 };
		pcre2_code *re;
		pcre2_match_data *md;
		int rc = tok_regex_compile(cases[i].re, strlen(cases[i].re), false, &re, "t", &err);
		CHECK_MSG(rc == 0, "%s: %s", cases[i].re, err.msg);
		if (rc)
			continue;
		md = pcre2_match_data_create_from_pattern(re, NULL);
		rc = pcre2_match(re, (PCRE2_SPTR)cases[i].subject, strlen(cases[i].subject), 0, 0, md,
				 NULL);
		CHECK_MSG((rc >= 0) == cases[i].match, "case %zu: %s", i, cases[i].re);
		pcre2_match_data_free(md);
		pcre2_code_free(re);
	}
}

struct worker {
	const struct capy_tokenizer *tok;
	const char *text;
	size_t len;
	struct capy_tokens ids;
	int rc;
};

static void *work(void *arg)
{
	struct worker *w = arg;
	struct capy_err err = { 0 };

	for (int i = 0; i < 20 && !w->rc; i++) {
		w->ids.n = 0;
		w->rc = capy_tokenizer_encode(w->tok, w->text, w->len, CAPY_TOK_PARSE_ADDED, &w->ids,
					      &err);
	}
	return NULL;
}

/* Encoding from several threads at once gives each the same ids as encoding alone. */
static void test_threads(void)
{
	struct capy_tokenizer *tok = load_file("t/text/mini/bytelevel.json");
	struct capy_tokens alone = { 0 };
	struct capy_err err = { 0 };
	struct worker w[4];
	pthread_t th[4];
	char text[4096];
	size_t n = 0;

	if (!tok)
		return;
	while (n + 40 < sizeof(text))
		n += (size_t)snprintf(text + n, sizeof(text) - n, " the thing %zu <s>hello</s>\t", n);
	CHECK_EQ_INT(capy_tokenizer_encode(tok, text, n, CAPY_TOK_PARSE_ADDED, &alone, &err), 0);
	for (int i = 0; i < 4; i++) {
		w[i] = (struct worker){ .tok = tok, .text = text, .len = n };
		pthread_create(&th[i], NULL, work, &w[i]);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		CHECK_EQ_INT(w[i].rc, 0);
		CHECK(w[i].ids.n == alone.n && !memcmp(w[i].ids.ids, alone.ids, alone.n * sizeof(int32_t)));
		capy_tokens_release(&w[i].ids);
	}
	capy_tokens_release(&alone);
	capy_tokenizer_free(tok);
}

int main(void)
{
	RUN(test_load_errors);
	RUN(test_bpe_rules);
	RUN(test_decode_plain);
	RUN(test_utf8);
	RUN(test_bytelevel);
	RUN(test_added_lookups);
	RUN(test_regex_translation);
	RUN(test_threads);
	return test_summary();
}
