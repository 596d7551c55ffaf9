/* u-mask.c - token masks (libcore/constrain/mask.h) against a brute-force reference (each
 * token's bytes fed into a copy of the state) on llama.cpp's grammars, over a synthetic
 * vocabulary with UTF-8 characters split across tokens, prefixes of other tokens, empty and
 * duplicate tokens, and over the fixture tokenizer; random walks through the grammars with
 * every cache setting; never an empty mask before the grammar is finished; masks computed
 * ahead on worker threads equal to those computed in place. */
#include "test-grammar.h"
#include "constrain/mask.h"
#include "constrain/mask-ahead.h"
#include "text/tokenizer.h"
#include "util/rng.h"

/* The synthetic vocabulary: the 256 single bytes first (so a byte-level grammar never runs
 * out of tokens), then these, then two stop tokens, then ids with no token at all. */
static const char *const words[] = {
	"{", "}", "[", "]", "\"", "\":", "\",", "{\"", "\"}", "\"]", " ", "  ", "\n", "\n  ", "\n\n", ", ",
	"true", "tr", "t", "null", "nul", "false", "fa", "1", "12", "123", "0", "-1", ".5", "e+", "E", "abc",
	"ab", "a\"", "a\\", "\\n", "\\u00e9", "\\u", "x\"}", ": ", "- ", "- one\n", "\n- ", "one", "o",
	"\xc3\xa9",             /* é whole */
	"caf\xc3",              /* café split: "caf" + the lead byte */
	"\xa9 ",                /* ... and its continuation with a space */
	"\xe2\x82",             /* € in two pieces */
	"\x82\xac",             /* a continuation pair (valid only after \xe2) */
	"\xac\"",
	"\xf0\x9f\x98\x80",     /* 😀 */
	"\xf0\x9f", "\x98\x80", /* ... split in halves */
	"\xe3\x81\x93\xe3\x82\x93", "\xe3\x81", "\x93", /* こん, and こ split */
	"\xed\xa0\x80",         /* a surrogate: never valid UTF-8 */
	"\xc0\xaf",             /* an overlong form */
	"1+2", "=", "x", "(", ")", "*", "+",
	"",                     /* empty: never allowed (it would not move the grammar) */
	"abc",                  /* a duplicate of an earlier token's bytes: both allowed alike */
};
#define N_WORDS ((uint32_t)ARRAY_SIZE(words))
#define STOP0 (256 + N_WORDS)
#define N_IDS (256 + N_WORDS + 2 + 7) /* seven ids without a token (a model's padding rows) */

static struct capy_token_trie *synthetic_trie(void)
{
	static char bytes[256];
	struct capy_token_text text[N_IDS] = { { 0 } };
	int32_t stop[2] = { STOP0, STOP0 + 1 };
	struct capy_token_trie *t = NULL;
	struct capy_err err = { 0 };

	for (int i = 0; i < 256; i++) {
		bytes[i] = (char)i;
		text[i] = (struct capy_token_text){ &bytes[i], 1 };
	}
	for (uint32_t i = 0; i < N_WORDS; i++)
		text[256 + i] = (struct capy_token_text){ words[i], strlen(words[i]) };
	text[STOP0] = (struct capy_token_text){ "<|im_end|>", 10 }; /* text, but a stop token wins */
	CHECK_MSG(capy_token_trie_new(&t, text, N_IDS, stop, 2, &err) == 0, "%s", err.msg);
	return t;
}

/* What a token should be: text read whole from a copy of s, a stop token when accepting. */
struct ref_vocab {
	const char *bytes[N_IDS > 1024 ? N_IDS : 1024];
	size_t len[N_IDS > 1024 ? N_IDS : 1024];
	bool stop[N_IDS > 1024 ? N_IDS : 1024];
	uint32_t n_ids;
};

static uint32_t reference(const struct ref_vocab *v, const struct capy_grammar *g, const struct capy_grammar_state *s,
			  uint32_t *bits)
{
	struct capy_grammar_state *c = NULL;
	uint32_t n = 0;

	memset(bits, 0, capy_mask_words(v->n_ids) * sizeof(uint32_t));
	capy_grammar_state_new(g, &c, NULL);
	for (uint32_t id = 0; id < v->n_ids; id++) {
		bool ok;
		if (v->stop[id]) {
			ok = capy_grammar_accepting(s);
		} else if (!v->bytes[id] || !v->len[id]) {
			ok = false;
		} else {
			capy_grammar_state_copy(c, s, NULL);
			ok = capy_grammar_feed(c, v->bytes[id], v->len[id]) == v->len[id];
		}
		if (ok) {
			bits[id / 32] |= 1u << (id % 32);
			n++;
		}
	}
	capy_grammar_state_free(c);
	return n;
}

static void synthetic_ref(struct ref_vocab *v)
{
	static char bytes[256];

	memset(v, 0, sizeof(*v));
	v->n_ids = N_IDS;
	for (int i = 0; i < 256; i++) {
		bytes[i] = (char)i;
		v->bytes[i] = &bytes[i];
		v->len[i] = 1;
	}
	for (uint32_t i = 0; i < N_WORDS; i++) {
		v->bytes[256 + i] = words[i];
		v->len[256 + i] = strlen(words[i]);
	}
	v->stop[STOP0] = v->stop[STOP0 + 1] = true;
}

/* The first id of bits where the reference and the mask differ, or -1. */
static int64_t first_difference(const uint32_t *a, const uint32_t *b, uint32_t n_ids)
{
	for (uint32_t id = 0; id < n_ids; id++)
		if (capy_mask_has(a, (int32_t)id) != capy_mask_has(b, (int32_t)id))
			return id;
	return -1;
}

/* A random allowed id, text over stop tokens three times in four while there is text. */
static int32_t pick(struct capy_rng *r, const uint32_t *bits, const struct ref_vocab *v)
{
	uint32_t n = 0, text = 0;

	for (uint32_t id = 0; id < v->n_ids; id++)
		if (capy_mask_has(bits, (int32_t)id)) {
			n++;
			text += !v->stop[id];
		}
	bool want_text = text && (text == n || capy_rng_next(r) % 4);
	uint32_t k = (uint32_t)(capy_rng_next(r) % (want_text ? text : n - text));
	for (uint32_t id = 0; id < v->n_ids; id++)
		if (capy_mask_has(bits, (int32_t)id) && v->stop[id] != want_text && !k--)
			return (int32_t)id;
	return -1;
}

/* Random walks through g: at each step every masker (default, no mask cache, tiny caches that
 * fill up, no state table) must give the reference's mask, never empty before the end. */
static uint64_t walked_subtrees; /* subtrees the default maskers allowed whole */

static void walks(const char *what, const struct capy_grammar *g, const struct capy_token_trie *t,
		  const struct ref_vocab *v, int n_walks, int steps)
{
	const struct capy_mask_opts opts[4] = {
		{ 0 }, { .flags = CAPY_MASK_NO_CACHE }, { .cached_masks = 2, .max_states = 6 }, { .flags = CAPY_MASK_NO_DFA },
	};
	struct capy_mask *m[4] = { NULL };
	size_t nwords = capy_mask_words(v->n_ids);
	uint32_t *want = calloc(nwords, 4), *got = calloc(nwords, 4);
	struct capy_err err = { 0 };
	int bad = 0, compared = 0;

	for (int k = 0; k < 4; k++)
		CHECK_MSG(capy_mask_new(&m[k], t, g, &opts[k], &err) == 0, "%s", err.msg);
	for (int w = 0; w < n_walks && !bad; w++) {
		struct capy_rng r;
		struct capy_grammar_state *s = NULL;
		capy_rng_seed(&r, (uint64_t)w * 7919 + 1);
		capy_grammar_state_new(g, &s, NULL);
		for (int step = 0; step < steps && !bad; step++) {
			uint32_t n = reference(v, g, s, want);
			compared++;
			for (int k = 0; k < 4 && !bad; k++) {
				int rc = capy_mask_compute(m[k], s, got, &err);
				int64_t diff = first_difference(want, got, v->n_ids);
				if (rc != (int)n || diff >= 0) {
					CHECK_MSG(0, "%s: walk %d step %d masker %d: %d tokens (want %u), first difference at id %" PRId64 "; %s",
						  what, w, step, k, rc, n, diff, rc < 0 ? err.msg : "");
					bad = 1;
				}
			}
			if (!n) { /* empty only at the very end */
				CHECK_MSG(capy_grammar_finished(s), "%s: an empty mask before the grammar is finished", what);
				break;
			}
			int32_t id = pick(&r, want, v);
			int rc = capy_mask_advance(t, s, id, &err);
			if (rc <= 0) {
				CHECK_MSG(rc == 0 && v->stop[id], "%s: advance by %d: %s", what, id, err.msg);
				break;
			}
		}
		capy_grammar_state_free(s);
	}
	CHECK_MSG(!bad, "%s", what);
	struct capy_mask_stats st[4];
	for (int k = 0; k < 4; k++)
		capy_mask_stats(m[k], &st[k]);
	walked_subtrees += st[0].subtrees;
	/* the walks went somewhere; the default masker met states again, the tiny one overflowed */
	CHECK_MSG(compared >= 2 * n_walks && st[0].hits > 0 && st[1].hits == 0 && st[2].resets > 0, "%s: %d masks, %" PRIu64
		  " hits, %" PRIu64 " resets", what, compared, st[0].hits, st[2].resets);
	for (int k = 0; k < 4; k++)
		capy_mask_free(m[k]);
	free(want);
	free(got);
}

static void test_synthetic(void)
{
	static const char *const files[] = { "json.gbnf", "json_arr.gbnf", "list.gbnf", "arithmetic.gbnf",
					     "japanese.gbnf", "chess.gbnf", "c.gbnf" };
	static struct ref_vocab v;
	struct capy_token_trie *t = synthetic_trie();
	struct capy_grammar *g;

	if (!t)
		return;
	walked_subtrees = 0;
	synthetic_ref(&v);
	CHECK_EQ_INT(capy_token_trie_ids(t), N_IDS);
	for (size_t i = 0; i < ARRAY_SIZE(files); i++)
		if ((g = compile_file(files[i]))) {
			walks(files[i], g, t, &v, 12, 60);
			capy_grammar_free(g);
		}
	/* characters split across tokens, classes of non-ASCII, a bounded repetition */
	if ((g = compile_str("root ::= [\\u00e0-\\u00ff\\u20ac]+ (\" \" [a-z]{1,3})?"))) {
		walks("utf8 class", g, t, &v, 20, 12);
		capy_grammar_free(g);
	}
	if ((g = compile_str("root ::= \"caf\" \"\\u00e9\" \" \"? | \"\\u20ac\" | [\\U0001F600] \"!\""))) {
		walks("split characters", g, t, &v, 20, 6);
		capy_grammar_free(g);
	}
	CHECK_MSG(walked_subtrees > 0, "no subtree was allowed whole");
	capy_token_trie_free(t);
}

/* The first masks of json.gbnf, spelled out. */
static void test_json_start(void)
{
	struct capy_token_trie *t = synthetic_trie();
	struct capy_grammar *g = compile_file("json.gbnf");
	struct capy_grammar_state *s = NULL;
	struct capy_mask *m = NULL;
	struct capy_err err = { 0 };
	uint32_t bits[(N_IDS + 31) / 32];
	int32_t open_quote = -1, abc = -1, abc2 = -1;

	if (!t || !g)
		goto out;
	for (uint32_t i = 0; i < N_WORDS; i++) {
		if (!strcmp(words[i], "{\""))
			open_quote = (int32_t)(256 + i);
		if (!strcmp(words[i], "abc") && abc < 0)
			abc = (int32_t)(256 + i);
		else if (!strcmp(words[i], "abc"))
			abc2 = (int32_t)(256 + i);
	}
	capy_grammar_state_new(g, &s, NULL);
	capy_mask_new(&m, t, g, NULL, &err);
	CHECK_EQ_INT(capy_mask_compute(m, s, bits, &err), 3); /* the byte "{", the word "{" and "{\"" */
	CHECK(capy_mask_has(bits, '{') && capy_mask_has(bits, open_quote) && !capy_mask_has(bits, STOP0));
	CHECK_EQ_INT(capy_mask_advance(t, s, open_quote, &err), 1);
	CHECK(capy_mask_compute(m, s, bits, &err) > 0);
	CHECK(capy_mask_has(bits, abc) && capy_mask_has(bits, abc2) && capy_mask_has(bits, '"'));
	CHECK(!capy_mask_has(bits, '\n')); /* no control characters in a string */
	CHECK(!capy_mask_has(bits, 256 + N_WORDS - 2)); /* the empty token */
	for (uint32_t id = STOP0 + 2; id < N_IDS; id++)
		CHECK(!capy_mask_has(bits, (int32_t)id)); /* no token at all */
	capy_grammar_feed(s, "a\":1}", 5);
	CHECK(capy_grammar_accepting(s) && !capy_grammar_finished(s)); /* ws may follow */
	CHECK(capy_mask_compute(m, s, bits, &err) > 0 && capy_mask_has(bits, STOP0) && capy_mask_has(bits, STOP0 + 1));
	CHECK(capy_mask_has(bits, ' ') && !capy_mask_has(bits, '{'));
	CHECK_EQ_INT(capy_mask_advance(t, s, STOP0, &err), 0);
	struct capy_mask_stats st;
	capy_mask_stats(m, &st);
	CHECK(st.masks == 3 && st.hits == 0 && st.states > 3 && st.nodes > 0);
	CHECK(capy_mask_compute(m, s, bits, &err) > 0);
	capy_mask_stats(m, &st);
	CHECK_EQ_INT(st.hits, 1);
out:
	capy_mask_free(m);
	capy_grammar_state_free(s);
	capy_grammar_free(g);
	capy_token_trie_free(t);
}

static void test_dead_end_and_finish(void)
{
	struct capy_token_text text[4] = { { "x", 1 }, { "xy", 2 }, { "z", 1 }, { NULL, 0 } };
	int32_t stop = 3;
	struct capy_token_trie *t = NULL, *t_nostop = NULL, *t_bad = NULL;
	struct capy_grammar *g = compile_str("root ::= \"x\" \"y\" | \"z\"");
	struct capy_grammar_state *s = NULL;
	struct capy_mask *m = NULL, *m2 = NULL;
	struct capy_err err = { 0 };
	uint32_t bits[1];

	if (!g)
		return;
	CHECK(capy_token_trie_new(&t, text, 4, &stop, 1, &err) == 0);
	CHECK(capy_token_trie_new(&t_nostop, text, 4, NULL, 0, &err) == 0);
	capy_grammar_state_new(g, &s, NULL);
	capy_mask_new(&m, t, g, NULL, &err);
	capy_mask_new(&m2, t_nostop, g, NULL, &err);
	CHECK_EQ_INT(capy_mask_compute(m, s, bits, &err), 3);
	CHECK_EQ_INT(bits[0], 0x7);
	capy_mask_advance(t, s, 0, &err); /* "x": only "y" may follow, and no token spells it */
	CHECK_EQ_INT(capy_mask_compute(m, s, bits, &err), CAPY_EFORMAT);
	CHECK_CONTAINS(err.msg, "dead end");
	CHECK_EQ_INT(capy_mask_advance(t, s, 2, &err), CAPY_EINVAL);
	CHECK_CONTAINS(err.msg, "token 2 refused at its byte 0");
	capy_grammar_state_free(s);
	capy_grammar_state_new(g, &s, NULL);
	capy_mask_advance(t, s, 1, &err); /* "xy": finished */
	CHECK(capy_grammar_finished(s));
	CHECK_EQ_INT(capy_mask_compute(m, s, bits, &err), 1); /* the stop token only */
	CHECK_EQ_INT(bits[0], 0x8);
	CHECK_EQ_INT(capy_mask_compute(m2, s, bits, &err), 0); /* nothing: the caller stops */
	CHECK_EQ_INT(capy_mask_advance(t, s, 3, &err), 0);
	CHECK_EQ_INT(capy_mask_advance(t, s, 9, &err), CAPY_EINVAL);
	/* a stop token before the grammar is complete */
	capy_grammar_state_free(s);
	capy_grammar_state_new(g, &s, NULL);
	CHECK_EQ_INT(capy_mask_advance(t, s, 3, &err), CAPY_EINVAL);
	CHECK_EQ_INT(capy_token_trie_new(&t_bad, text, 2, &stop, 1, &err), CAPY_EINVAL); /* stop 3 of 2 ids */
	CHECK(!t_bad);
	capy_mask_free(m);
	capy_mask_free(m2);
	capy_grammar_state_free(s);
	capy_grammar_free(g);
	capy_token_trie_free(t);
	capy_token_trie_free(t_nostop);
}

/* The fixture tokenizer: its byte-level vocabulary, added tokens out unless listed, the
 * mask against the reference on walks through json.gbnf. */
static void test_tokenizer(void)
{
	static struct ref_vocab v;
	char path[512], *json = NULL;
	size_t len;
	struct capy_tokenizer *tok = NULL;
	struct capy_token_trie *t = NULL, *t_think = NULL;
	struct capy_grammar *g = NULL;
	struct capy_err err = { 0 };

	if (capy_read_file(test_fixture_path("qwen3_5_moe/tokenizer.json", path, sizeof(path)), 1 << 24, &json, &len,
			   &err) < 0 ||
	    capy_tokenizer_new(&tok, json, len, &err) < 0) {
		CHECK_MSG(0, "%s", err.msg);
		free(json);
		return;
	}
	int32_t im_end = capy_tokenizer_added_id(tok, "<|im_end|>"), think = capy_tokenizer_added_id(tok, "<think>");
	uint32_t n_ids = (uint32_t)capy_tokenizer_id_limit(tok) + 35; /* the model's padding rows too */
	CHECK(im_end >= 0 && think >= 0 && n_ids <= ARRAY_SIZE(v.bytes));
	CHECK(capy_token_trie_from_tokenizer(&t, tok, n_ids, &im_end, 1, NULL, 0, &err) == 0);
	CHECK(capy_token_trie_from_tokenizer(&t_think, tok, n_ids, &im_end, 1, &think, 1, &err) == 0);
	memset(&v, 0, sizeof(v));
	v.n_ids = n_ids;
	for (int32_t id = 0; id < capy_tokenizer_id_limit(tok); id++)
		if (!capy_tokenizer_is_added(tok, id))
			v.bytes[id] = capy_tokenizer_piece_bytes(tok, id, &v.len[id]);
	v.stop[im_end] = true;
	walked_subtrees = 0;
	if ((g = compile_file("json.gbnf"))) {
		walks("json.gbnf, fixture tokenizer", g, t, &v, 8, 80);
		capy_grammar_free(g);
	}
	CHECK_MSG(walked_subtrees > 0, "no subtree was allowed whole"); /* the shortcut was tried */
	if ((g = compile_str("root ::= \"<think>\" [a-z ]* \"</think>\"?"))) {
		struct capy_grammar_state *s = NULL;
		struct capy_mask *m = NULL, *mt = NULL;
		uint32_t *bits = calloc(capy_mask_words(n_ids), 4);
		capy_grammar_state_new(g, &s, NULL);
		capy_mask_new(&m, t, g, NULL, &err);
		capy_mask_new(&mt, t_think, g, NULL, &err);
		CHECK(capy_mask_compute(m, s, bits, &err) > 0 && !capy_mask_has(bits, think) &&
		      capy_mask_has(bits, capy_tokenizer_token_id(tok, "<", 1)));
		CHECK(capy_mask_compute(mt, s, bits, &err) > 0 && capy_mask_has(bits, think));
		CHECK_EQ_INT(capy_mask_advance(t_think, s, think, &err), 1);
		CHECK(capy_grammar_accepting(s));
		capy_mask_free(m);
		capy_mask_free(mt);
		capy_grammar_state_free(s);
		capy_grammar_free(g);
		free(bits);
	}
	capy_token_trie_free(t);
	capy_token_trie_free(t_think);
	capy_tokenizer_free(tok);
	free(json);
}


/* Masks computed ahead (mask-ahead.h) on pools of 0, 1 and 3 workers: four random walks at
 * once through json.gbnf, each walk's next mask started before the others are waited for, and
 * every result equal to capy_mask_compute's in place; a job started twice, or freed in
 * flight; a dead end's error carried to the wait; a wait before any start refused. */
static void test_ahead(void)
{
	static const int threads[] = { 0, 1, 3 };
	static struct ref_vocab v;
	struct capy_token_text small[3] = { { "x", 1 }, { "xy", 2 }, { "z", 1 } };
	struct capy_token_trie *t = synthetic_trie(), *ts = NULL;
	struct capy_grammar *g = compile_file("json.gbnf"), *dead = compile_str("root ::= \"x\" \"y\" | \"z\"");
	size_t nwords = capy_mask_words(N_IDS);
	uint32_t *want = calloc(nwords, 4);
	struct capy_err err = { 0 };
	int bad = 0;

	synthetic_ref(&v);
	CHECK(capy_token_trie_new(&ts, small, 3, NULL, 0, &err) == 0);
	for (size_t p = 0; t && ts && g && dead && p < ARRAY_SIZE(threads); p++) {
		struct capy_mask_pool *pool = NULL;
		struct capy_mask *m[4] = { NULL }, *ref = NULL;
		struct capy_mask_ahead *a[4] = { NULL };
		struct capy_grammar_state *s[4] = { NULL };
		struct capy_rng r[4];
		bool live[4];
		int waits = 0;
		CHECK_MSG(capy_mask_pool_new(&pool, threads[p], &err) == 0, "%s", err.msg);
		capy_mask_new(&ref, t, g, NULL, &err);
		for (int k = 0; k < 4; k++) {
			capy_mask_new(&m[k], t, g, NULL, &err);
			CHECK_MSG(capy_mask_ahead_new(&a[k], pool, m[k], N_IDS, &err) == 0, "%s", err.msg);
			capy_grammar_state_new(g, &s[k], NULL);
			capy_rng_seed(&r[k], (uint64_t)k * 31 + p);
			live[k] = true;
			capy_mask_ahead_start(a[k], s[k]);
			capy_mask_ahead_start(a[k], s[k]); /* again, queued or running: one result */
		}
		for (int step = 0; step < 40 && !bad; step++)
			for (int k = 0; k < 4 && !bad; k++) {
				const uint32_t *got;
				struct capy_mask_timing tm;
				if (!live[k])
					continue;
				int n = capy_mask_ahead_wait(a[k], &got, &tm, &err), nref = capy_mask_compute(ref, s[k], want, &err);
				waits++;
				if (n != nref || memcmp(got, want, nwords * 4) || tm.compute_s < 0 || tm.wait_s < 0) {
					CHECK_MSG(0, "pool of %d: walk %d step %d: %d tokens ahead, %d in place", threads[p], k,
						  step, n, nref);
					bad = 1;
					break;
				}
				int32_t id = n > 0 ? pick(&r[k], want, &v) : -1;
				if (id < 0 || capy_mask_advance(t, s[k], id, &err) <= 0) {
					live[k] = false;
					continue;
				}
				capy_mask_ahead_start(a[k], s[k]);
			}
		CHECK_MSG(waits > 40, "pool of %d: %d masks", threads[p], waits);
		capy_mask_ahead_start(a[0], s[0]);
		for (int k = 0; k < 4; k++) /* a[0] in flight, the others done */
			capy_mask_ahead_free(a[k]);
		/* "x", then only "y" could follow and no token spells it: a dead end */
		struct capy_mask *md = NULL;
		struct capy_mask_ahead *ad = NULL;
		struct capy_grammar_state *sd = NULL;
		const uint32_t *bits;
		capy_mask_new(&md, ts, dead, NULL, &err);
		capy_mask_ahead_new(&ad, pool, md, 3, &err);
		capy_grammar_state_new(dead, &sd, NULL);
		CHECK_EQ_INT(capy_mask_ahead_wait(ad, &bits, NULL, &err), CAPY_EINVAL);
		capy_mask_ahead_start(ad, sd);
		CHECK_EQ_INT(capy_mask_ahead_wait(ad, &bits, NULL, &err), 3);
		CHECK_EQ_INT(bits[0], 0x7);
		CHECK_EQ_INT(capy_mask_advance(ts, sd, 0, &err), 1);
		capy_mask_ahead_start(ad, sd);
		err.msg[0] = 0;
		CHECK_EQ_INT(capy_mask_ahead_wait(ad, &bits, NULL, &err), CAPY_EFORMAT);
		CHECK_CONTAINS(err.msg, "dead end");
		capy_mask_ahead_free(ad);
		capy_mask_free(md);
		capy_grammar_state_free(sd);
		for (int k = 0; k < 4; k++) {
			capy_mask_free(m[k]);
			capy_grammar_state_free(s[k]);
		}
		capy_mask_free(ref);
		capy_mask_pool_free(pool);
	}
	free(want);
	capy_grammar_free(g);
	capy_grammar_free(dead);
	capy_token_trie_free(t);
	capy_token_trie_free(ts);
}

int main(void)
{
	RUN(test_synthetic);
	RUN(test_json_start);
	RUN(test_dead_end_and_finish);
	RUN(test_tokenizer);
	RUN(test_ahead);
	return test_summary();
}
