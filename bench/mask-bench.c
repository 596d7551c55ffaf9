/* mask-bench - the time of a token mask (libcore/constrain/mask.h) per generated token, while
 * a grammar walks through documents token by token as a model would write them.
 *
 *	mask-bench TOKENIZER.json GRAMMAR.gbnf DOC... [--vocab N] [--rounds R] [--cache M] [--states S]
 *
 * Each DOC is tokenized (added tokens as plain text) and replayed: before each token the mask
 * of the grammar's state is computed (and must hold the token), then the token is read. Times
 * are per mask, median / p90 / p99 / max over every token of every document, in four settings:
 *   first     a new masker for every document: no state or mask known yet (a new request)
 *   no-cache  CAPY_MASK_NO_CACHE, one masker throughout: every mask a walk of the trie, the
 *             grammar's states and transitions known after the first round (the steady cost
 *             of a walk)
 *   warm      the default masker, one throughout, rounds after the first: masks come from its
 *             cache (the steady state of a server answering similar requests)
 *   steps     CAPY_MASK_NO_DFA, the first document once: the grammar stepped at every trie
 *             node, no shortcut (the reference the others are checked against in u-mask)
 * --cache M keeps M masks, --states S grammar states (capy_mask_opts.cached_masks and
 * max_states; default the library's).
 * --vocab N grows the vocabulary to N ids with tokens made by joining two random word-like
 * tokens of it (letters, spaces, whole characters from U+0080 on; at most 32 bytes): a stand-in for a
 * larger BPE vocabulary such as Qwen3.5's 248k, which is not available here, whose new tokens
 * are mostly words and other scripts. One thread; pin it with taskset.
 *
 *	mask-bench TOKENIZER.json --compile FILE... [--vocab N] [--rounds R]
 *
 * The compile time of each FILE, a JSON Schema (strict, relaxed where strict refuses it) or,
 * when it is a JSON list, a request's normalized tools (the XML tool-call grammar of them all,
 * as tool_choice required makes it): schema to GBNF text, the text compiled to the automaton,
 * and the first mask from the start state with a new masker (nothing known yet): what a new
 * request pays before its first token. Medians over R rounds (default 5), each from scratch. */
#include "constrain/grammar.h"
#include "constrain/json-schema.h"
#include "constrain/mask.h"
#include "text/tokenizer.h"
#include "text/toolcall-grammar.h"
#include "tool/tool.h"
#include "util/file.h"
#include "util/rng.h"

#include <math.h>
#include <time.h>

struct doc {
	const char *name;
	struct capy_tokens ids;
};

struct vocab {
	struct capy_token_text *text;
	uint32_t n_ids;
	int32_t stop[2];
	size_t n_stop;
	char *grown; /* the bytes of the joined tokens */
};

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Letters, spaces and bytes from 0x80 on only: what a larger vocabulary mostly adds (words,
 * other scripts), rather than new runs of punctuation. */
static bool wordlike(const struct capy_token_text *t)
{
	unsigned more = 0;

	for (size_t i = 0; i < t->len; i++) {
		unsigned char c = (unsigned char)t->bytes[i];
		if (c < 0x80 && (more || (c != ' ' && !((c | 0x20) >= 'a' && (c | 0x20) <= 'z'))))
			return false;
		if (c >= 0x80 && (c & 0xc0) == 0x80 && !more--)
			return false;
		if (c >= 0xc0)
			more = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : 1;
	}
	return !more; /* whole characters only: two of them joined are still well-formed */
}

/* The tokenizer's text tokens (added ones left out), stop tokens, and joined tokens up to n. */
static void make_vocab(const struct capy_tokenizer *tok, uint32_t want, struct vocab *v)
{
	uint32_t limit = (uint32_t)capy_tokenizer_id_limit(tok), n_text = 0, *text_ids;
	const char *stops[] = { "<|im_end|>", "<|endoftext|>" };
	struct capy_rng r;

	v->n_ids = want > limit ? want : limit;
	v->text = calloc(v->n_ids, sizeof(*v->text));
	text_ids = malloc(limit * sizeof(*text_ids));
	if (!v->text || !text_ids)
		capy_die("out of memory");
	for (uint32_t id = 0; id < limit; id++) {
		if (capy_tokenizer_is_added(tok, (int32_t)id))
			continue;
		v->text[id].bytes = capy_tokenizer_piece_bytes(tok, (int32_t)id, &v->text[id].len);
		if (v->text[id].bytes && v->text[id].len && wordlike(&v->text[id]))
			text_ids[n_text++] = id;
	}
	for (size_t i = 0; i < ARRAY_SIZE(stops); i++) {
		int32_t id = capy_tokenizer_added_id(tok, stops[i]);
		if (id >= 0)
			v->stop[v->n_stop++] = id;
	}
	if (v->n_ids == limit || !n_text) {
		free(text_ids);
		return;
	}
	capy_rng_seed(&r, 1);
	size_t cap = (size_t)(v->n_ids - limit) * 32, off = 0;
	if (!(v->grown = malloc(cap)))
		capy_die("out of memory");
	for (uint32_t id = limit; id < v->n_ids; id++) {
		const struct capy_token_text *a = &v->text[text_ids[capy_rng_next(&r) % n_text]];
		const struct capy_token_text *b = &v->text[text_ids[capy_rng_next(&r) % n_text]];
		size_t n = CAPY_MIN(a->len + b->len, 32);
		memcpy(v->grown + off, a->bytes, CAPY_MIN(a->len, n));
		if (n > a->len)
			memcpy(v->grown + off + a->len, b->bytes, n - a->len);
		v->text[id] = (struct capy_token_text){ v->grown + off, n };
		off += n;
	}
	free(text_ids);
}

struct timing {
	double *us;
	size_t n, cap;
};

static void add_time(struct timing *t, double us)
{
	if (t->n == t->cap) {
		t->cap = t->cap ? 2 * t->cap : 4096;
		if (!(t->us = realloc(t->us, t->cap * sizeof(double))))
			capy_die("out of memory");
	}
	t->us[t->n++] = us;
}

static void report(const char *what, struct timing *t, const struct capy_mask_stats *st)
{
	double sum = 0;

	qsort(t->us, t->n, sizeof(double), cmp_double);
	for (size_t i = 0; i < t->n; i++)
		sum += t->us[i];
	printf("%-9s %8zu masks  median %8.2f us  p90 %8.2f  p99 %8.2f  max %9.2f  mean %8.2f", what, t->n,
	       t->us[t->n / 2], t->us[t->n * 90 / 100], t->us[t->n * 99 / 100], t->us[t->n - 1], sum / (double)t->n);
	if (st)
		printf("  (hits %" PRIu64 ", nodes/mask %.0f, subtrees/mask %.0f, states %" PRIu32 ", resets %" PRIu64 ")",
		       st->hits, (double)st->nodes / (double)st->masks, (double)st->subtrees / (double)st->masks, st->states,
		       st->resets);
	printf("\n");
	t->n = 0;
}

/* One pass over a document: time each mask, check it holds the next token, read the token. */
static void replay(struct capy_mask *m, const struct capy_token_trie *t, const struct capy_grammar *g,
		   const struct doc *d, uint32_t *bits, struct timing *tm)
{
	struct capy_grammar_state *s;
	struct capy_err err = { 0 };

	if (capy_grammar_state_new(g, &s, &err) < 0)
		capy_die("%s", err.msg);
	for (size_t i = 0; i < d->ids.n; i++) {
		double t0 = now_us();
		int n = capy_mask_compute(m, s, bits, &err);
		add_time(tm, now_us() - t0);
		if (n < 0)
			capy_die("%s: token %zu: %s", d->name, i, err.msg);
		if (!capy_mask_has(bits, d->ids.ids[i]))
			capy_die("%s: token %zu (id %" PRId32 ") is not in the mask of %d tokens", d->name, i, d->ids.ids[i], n);
		if (capy_mask_advance(t, s, d->ids.ids[i], &err) < 0)
			capy_die("%s: token %zu: %s", d->name, i, err.msg);
	}
	if (!capy_grammar_accepting(s))
		capy_die("%s: the grammar does not accept the whole document", d->name);
	capy_grammar_state_free(s);
}

static uint32_t opt_cache, opt_states;

static struct capy_mask *masker(const struct capy_token_trie *t, const struct capy_grammar *g, unsigned flags)
{
	struct capy_mask_opts o = { .cached_masks = opt_cache, .max_states = opt_states, .flags = flags };
	struct capy_mask *m;
	struct capy_err err = { 0 };

	if (capy_mask_new(&m, t, g, &o, &err) < 0)
		capy_die("%s", err.msg);
	return m;
}

/* One masker throughout: a first round untimed (what it learns stays), then rounds timed. */
static void steady(const char *what, const struct capy_token_trie *t, const struct capy_grammar *g, unsigned flags,
		   const struct doc *docs, size_t ndocs, long rounds, uint32_t *bits, struct timing *tm)
{
	struct capy_mask *m = masker(t, g, flags);
	struct capy_mask_stats st;

	for (long r = 0; r < rounds; r++) {
		if (r == 1)
			tm->n = 0;
		for (size_t i = 0; i < ndocs; i++)
			replay(m, t, g, &docs[i], bits, tm);
	}
	capy_mask_stats(m, &st);
	report(what, tm, &st);
	capy_mask_free(m);
}

/* FILE as GBNF text: a tools list's call grammar, else a schema's (strict when it can). */
static char *file_gbnf(const char *name, const char *text, size_t len, const char **how)
{
	static const struct capy_schema_opts strict = { .strict = true }, relaxed = { 0 };
	struct capy_err err = { 0 };
	char *gbnf = NULL;
	size_t i = 0;

	while (i < len && strchr(" \t\r\n", text[i]))
		i++;
	if (i < len && text[i] == '[') {
		struct capy_call_grammar_opts o = { .syntax = CAPY_CALL_XML };
		*how = "tools";
		if (capy_call_grammar(text, len, &o, &gbnf, &err) < 0)
			capy_die("%s: %s", name, err.msg);
		return gbnf;
	}
	*how = "strict";
	if (capy_json_schema_to_gbnf(text, len, &strict, &gbnf, &err) == CAPY_EUNSUPPORTED) {
		*how = "relaxed";
		capy_json_schema_to_gbnf(text, len, &relaxed, &gbnf, &err);
	}
	if (!gbnf)
		capy_die("%s: %s", name, err.msg);
	return gbnf;
}

static double median(double *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return v[n / 2];
}

/* --compile: per file, the three steps from its text to a first mask, timed. */
static void compile_bench(const struct capy_token_trie *t, char **files, size_t nfiles, long rounds)
{
	double *step[4], *total = malloc(nfiles * sizeof(double));
	uint32_t *bits = malloc(capy_mask_words(capy_token_trie_ids(t)) * sizeof(uint32_t));
	struct capy_err err = { 0 };

	for (int k = 0; k < 4; k++)
		if (!(step[k] = malloc((size_t)rounds * sizeof(double))))
			capy_die("out of memory");
	if (!bits || !total)
		capy_die("out of memory");
	printf("%-44s %8s %8s %10s %10s %10s %10s %7s\n", "file", "bytes", "gbnf", "to gbnf us", "compile us",
	       "1st mask", "total us", "allowed");
	for (size_t f = 0; f < nfiles; f++) {
		const char *how = "";
		size_t len, glen = 0;
		char *text;
		int allowed = 0;
		if (capy_read_file(files[f], 1u << 26, &text, &len, &err) < 0)
			capy_die("%s", err.msg);
		for (long r = 0; r < rounds; r++) {
			struct capy_grammar *g;
			struct capy_grammar_state *s;
			struct capy_mask *m;
			double t0 = now_us();
			char *gbnf = file_gbnf(files[f], text, len, &how);
			double t1 = now_us();
			if (capy_grammar_compile(gbnf, strlen(gbnf), "root", &g, &err) < 0)
				capy_die("%s: the grammar: %s", files[f], err.msg);
			double t2 = now_us();
			if (capy_mask_new(&m, t, g, NULL, &err) < 0 || capy_grammar_state_new(g, &s, &err) < 0 ||
			    (allowed = capy_mask_compute(m, s, bits, &err)) < 0)
				capy_die("%s: %s", files[f], err.msg);
			double t3 = now_us();
			step[0][r] = t1 - t0, step[1][r] = t2 - t1, step[2][r] = t3 - t2, step[3][r] = t3 - t0;
			glen = strlen(gbnf);
			capy_grammar_state_free(s);
			capy_mask_free(m);
			capy_grammar_free(g);
			free(gbnf);
		}
		const char *base = strrchr(files[f], '/');
		char name[64];
		if (strcmp(how, "strict"))
			snprintf(name, sizeof(name), "%s (%s)", base ? base + 1 : files[f], how);
		else
			snprintf(name, sizeof(name), "%s", base ? base + 1 : files[f]);
		double m0 = median(step[0], (size_t)rounds), m1 = median(step[1], (size_t)rounds);
		double m2 = median(step[2], (size_t)rounds), m3 = median(step[3], (size_t)rounds);
		printf("%-44s %8zu %8zu %10.1f %10.1f %10.1f %10.1f %7d\n", name, len, glen, m0, m1, m2, m3, allowed);
		total[f] = m3;
		free(text);
	}
	qsort(total, nfiles, sizeof(double), cmp_double);
	printf("%zu files: total median %.1f us, p90 %.1f, max %.1f\n", nfiles, total[nfiles / 2], total[nfiles * 9 / 10],
	       total[nfiles - 1]);
	for (int k = 0; k < 4; k++)
		free(step[k]);
	free(total);
	free(bits);
}

int cmd_main(int argc, char **argv)
{
	struct capy_err err = { 0 };
	struct capy_tokenizer *tok;
	struct capy_grammar *g;
	struct capy_token_trie *t;
	struct capy_mask *m;
	struct capy_mask_stats st;
	struct timing tm = { 0 };
	struct vocab v = { 0 };
	struct doc docs[64];
	const char *files[3] = { 0 };
	size_t ndocs = 0, nfiles = 0, ntok = 0, ncompile = 0;
	char *text, **compile = calloc((size_t)argc, sizeof(char *));
	size_t len;
	long vocab = 0, rounds = 0;
	bool compiling = false;
	double t0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--vocab") && i + 1 < argc)
			vocab = strtol(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
			rounds = strtol(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--cache") && i + 1 < argc)
			opt_cache = (uint32_t)strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--states") && i + 1 < argc)
			opt_states = (uint32_t)strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--compile"))
			compiling = true;
		else if (compiling && nfiles == 1 && compile)
			compile[ncompile++] = argv[i];
		else if (nfiles < 2)
			files[nfiles++] = argv[i];
		else if (ndocs < ARRAY_SIZE(docs))
			docs[ndocs++] = (struct doc){ argv[i], { 0 } };
	}
	if (!rounds)
		rounds = compiling ? 5 : 3;
	if ((compiling ? nfiles != 1 || !ncompile : nfiles < 2 || !ndocs) || rounds < 2 || vocab < 0 || vocab > INT32_MAX) {
		fprintf(stderr, "usage: mask-bench TOKENIZER.json GRAMMAR.gbnf DOC... [--vocab N] [--rounds R>=2] [--cache M] [--states S]\n"
			"   or: mask-bench TOKENIZER.json --compile FILE... [--vocab N] [--rounds R>=2]\n");
		return CAPY_EXIT_USAGE;
	}
	if (capy_read_file(files[0], 1u << 30, &text, &len, &err) < 0 || capy_tokenizer_new(&tok, text, len, &err) < 0)
		capy_die("%s", err.msg);
	free(text);
	if (compiling) {
		make_vocab(tok, (uint32_t)vocab, &v);
		t0 = now_us();
		if (capy_token_trie_new(&t, v.text, v.n_ids, v.stop, v.n_stop, &err) < 0)
			capy_die("%s", err.msg);
		printf("vocabulary %" PRIu32 " ids, trie built in %.1f ms; %zu files, %ld rounds\n", v.n_ids,
		       (now_us() - t0) / 1e3, ncompile, rounds);
		compile_bench(t, compile, ncompile, rounds);
		capy_token_trie_free(t);
		free(v.text);
		free(v.grown);
		free(compile);
		capy_tokenizer_free(tok);
		return CAPY_EXIT_OK;
	}
	free(compile);
	if (capy_read_file(files[1], 1u << 24, &text, &len, &err) < 0 ||
	    capy_grammar_compile_named(text, len, "root", files[1], &g, &err) < 0)
		capy_die("%s", err.msg);
	free(text);
	for (size_t i = 0; i < ndocs; i++) {
		if (capy_read_file(docs[i].name, 1u << 26, &text, &len, &err) < 0 ||
		    capy_tokenizer_encode(tok, text, len, 0, &docs[i].ids, &err) < 0)
			capy_die("%s", err.msg);
		free(text);
		ntok += docs[i].ids.n;
	}
	make_vocab(tok, (uint32_t)vocab, &v);
	t0 = now_us();
	if (capy_token_trie_new(&t, v.text, v.n_ids, v.stop, v.n_stop, &err) < 0)
		capy_die("%s", err.msg);
	printf("vocabulary %" PRIu32 " ids, trie built in %.1f ms; %zu documents, %zu tokens; %ld rounds\n", v.n_ids,
	       (now_us() - t0) / 1e3, ndocs, ntok, rounds);
	uint32_t *bits = malloc(capy_mask_words(v.n_ids) * sizeof(uint32_t));
	if (!bits)
		capy_die("out of memory");

	struct capy_mask_stats sum = { 0 };
	for (long r = 0; r < rounds; r++)
		for (size_t i = 0; i < ndocs; i++) {
			m = masker(t, g, 0);
			replay(m, t, g, &docs[i], bits, &tm);
			capy_mask_stats(m, &st);
			sum.masks += st.masks;
			sum.nodes += st.nodes;
			sum.hits += st.hits;
			sum.subtrees += st.subtrees;
			sum.states = CAPY_MAX(sum.states, st.states);
			capy_mask_free(m);
		}
	report("first", &tm, &sum);

	steady("no-cache", t, g, CAPY_MASK_NO_CACHE, docs, ndocs, rounds, bits, &tm);
	steady("warm", t, g, 0, docs, ndocs, rounds, bits, &tm);

	m = masker(t, g, CAPY_MASK_NO_DFA);
	replay(m, t, g, &docs[0], bits, &tm);
	capy_mask_stats(m, &st);
	report("steps", &tm, &st);
	capy_mask_free(m);

	free(bits);
	free(tm.us);
	for (size_t i = 0; i < ndocs; i++)
		capy_tokens_release(&docs[i].ids);
	free(v.text);
	free(v.grown);
	capy_token_trie_free(t);
	capy_grammar_free(g);
	capy_tokenizer_free(tok);
	return CAPY_EXIT_OK;
}
