/* u-sched.c - the scheduler on the qwen3_5_moe and qwen4_exp fixtures: a request gives the
 * tokens the engine gives it directly, alone or with seven others at once (greedy and
 * seeded sampling), a cached prefix resumes exactly where the engine would, stop ids,
 * max_new_tokens, the context limit, cancellation, a full queue, shutdown, the prefix
 * cache's budget, and constrained requests (a grammar over a trie of the vocabulary: every
 * token allowed, the end when the grammar is complete, a dead end reported as an error; the
 * same tokens with the masks computed during the steps as after them), and speculative
 * decoding (n-gram drafts verified in the step: the greedy tokens of one token per step, under
 * load too, every ending exact, drafts accepted on a repeating prompt: on capy-tiny). */
#include "test.h"
#include "test-fixture.h"
#include "artifact/artifact.h"
#include "convert/convert.h"
#include "engine/engine.h"
#include "sched/sched.h"
#include "constrain/grammar.h"
#include "constrain/mask.h"

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#define MAXTOK 64

struct result {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool started, ended;
	int32_t tokens[MAXTOK];
	int n;
	uint64_t cached, id;
	enum capy_gen_finish finish;
	int32_t stop_token;
	double mask_s, mask_wait_s;
	int stop_after;          /* return nonzero on this token index (-1: never) */
	int events;
};

static int on_event(void *ud, const struct capy_gen_event *ev)
{
	struct result *r = ud;
	int stop = 0;

	pthread_mutex_lock(&r->mu);
	r->events++;
	if (ev->type == CAPY_GEN_START) {
		r->started = true;
		r->cached = ev->cached_tokens;
	} else if (ev->type == CAPY_GEN_TOKEN) {
		if (r->n < MAXTOK)
			r->tokens[r->n++] = ev->token;
		stop = r->stop_after >= 0 && (int)ev->index == r->stop_after;
	} else {
		r->ended = true;
		r->finish = ev->finish;
		r->stop_token = ev->stop_token;
		r->cached = ev->cached_tokens;
		r->mask_s = ev->mask_s;
		r->mask_wait_s = ev->mask_wait_s;
		pthread_cond_broadcast(&r->cv);
	}
	pthread_mutex_unlock(&r->mu);
	return stop;
}

static void result_init(struct result *r)
{
	memset(r, 0, sizeof(*r));
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);
	r->stop_after = -1;
}

/* Wait (at most 20 s) for the END event. */
static bool wait_end(struct result *r)
{
	struct timespec ts;
	bool ok;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 20;
	pthread_mutex_lock(&r->mu);
	while (!r->ended)
		if (pthread_cond_timedwait(&r->cv, &r->mu, &ts))
			break;
	ok = r->ended;
	pthread_mutex_unlock(&r->mu);
	return ok;
}

static struct capy_artifact *art;
static struct capy_engine *eng;
static uint64_t V;

static void make_prompt(int32_t *p, uint64_t n, int seed)
{
	for (uint64_t i = 0; i < n; i++)
		p[i] = (int32_t)((seed * 131 + i * 17 + 3) % 520);
}

/* The engine run directly: the prompt in pieces cut at `cuts` (ascending, ending at n), then
 * greedy or seeded decoding of `gen` tokens. */
static void reference(const int32_t *prompt, uint64_t n, const uint64_t *cuts, int n_cuts, int gen,
		      const struct capy_sampler_params *sp, int32_t *out)
{
	struct capy_err err = { 0 };
	struct capy_seq *s;
	struct capy_sampler *smp;
	float *l = malloc(V * 4);
	uint64_t at = 0;

	capy_seq_new(eng, &s, &err);
	capy_sampler_new(&smp, V, sp, &err);
	capy_sampler_prompt(smp, prompt, n);
	for (int c = 0; c < n_cuts; c++) {
		CHECK_EQ_INT(capy_engine_forward(eng, s, prompt + at, cuts[c] - at, l, false, &err), 0);
		at = cuts[c];
	}
	for (int i = 0; i < gen; i++) {
		out[i] = capy_sampler_next(smp, l);
		if (i + 1 < gen)
			capy_engine_forward(eng, s, &out[i], 1, l, false, &err);
	}
	capy_sampler_free(smp);
	capy_seq_free(s);
	free(l);
}

static struct capy_sched *sched_new(uint64_t cache, int conc, uint64_t queue)
{
	struct capy_err err = { 0 };
	struct capy_sched *s = NULL;
	struct capy_sched_opts o = { .max_concurrency = conc, .max_context = 400, .prefill_chunk = 64,
				     .cache_bytes = cache, .snapshot_interval = 128, .max_queue = queue };

	CHECK_MSG(capy_sched_new(&s, eng, &o, &err) == 0, "%s", err.msg);
	return s;
}

static uint64_t submit(struct capy_sched *s, const int32_t *p, uint64_t n, uint64_t max_new,
		       const struct capy_sampler_params *sp, struct result *r)
{
	struct capy_err err = { 0 };
	struct capy_gen_request q = { p, n, *sp, max_new, NULL, 0, -1, 0, on_event, r, NULL, NULL };
	uint64_t id = 0;

	CHECK_MSG(capy_sched_submit(s, &q, &id, &err) == 0, "%s", err.msg);
	r->id = id;
	return id;
}

static void setup(void)
{
	struct capy_err err = { 0 };

	art = test_open_fixture("qwen4_exp");
	CHECK_EQ_INT(capy_engine_new(&eng, art, &(struct capy_engine_opts){ .threads = 2, .step_tokens = 64 + 8 },
				     &err), 0);
	V = capy_engine_config(eng)->vocab_size;
}

/* Eight requests at once (prompts of 1 to 150 tokens, some longer than a piece) each give the
 * tokens the engine gives them alone, greedy and with a seed; so does one alone. */
static void test_concurrent_equals_alone(void)
{
	static const uint64_t plen[8] = { 10, 150, 1, 64, 65, 33, 129, 7 };
	struct capy_sched *s = sched_new(0, 8, 16);
	struct result r[8];
	int32_t prompt[8][160], ref[8][12];

	for (int pass = 0; pass < 2; pass++) {
		struct capy_sampler_params sp = { 0 };
		if (pass) {
			sp.temperature = 0.9f;
			sp.top_p = 0.95f;
			sp.top_k = 40;
		}
		for (int q = 0; q < 8; q++) {
			uint64_t cuts[4];
			int nc = 0;
			make_prompt(prompt[q], plen[q], q);
			for (uint64_t at = 64; at < plen[q]; at += 64)
				cuts[nc++] = at;
			cuts[nc++] = plen[q];
			sp.seed = 1000 + (uint64_t)q;
			reference(prompt[q], plen[q], cuts, nc, 12, &sp, ref[q]);
			result_init(&r[q]);
		}
		for (int q = 0; q < 8; q++) {
			sp.seed = 1000 + (uint64_t)q;
			submit(s, prompt[q], plen[q], 12, &sp, &r[q]);
		}
		for (int q = 0; q < 8; q++) {
			CHECK(wait_end(&r[q]));
			CHECK_EQ_INT(r[q].finish, CAPY_FINISH_LENGTH);
			CHECK_EQ_INT(r[q].n, 12);
			CHECK_MSG(!memcmp(r[q].tokens, ref[q], sizeof(ref[q])), "pass %d: request %d differs under load", pass, q);
		}
		/* Alone. */
		result_init(&r[1]);
		sp.seed = 1001;
		submit(s, prompt[1], plen[1], 12, &sp, &r[1]);
		CHECK(wait_end(&r[1]));
		CHECK(!memcmp(r[1].tokens, ref[1], sizeof(ref[1])));
	}
	capy_sched_free(s, 1);
	CHECK_EQ_U64(capy_engine_pages_used(eng), 0);
}

/* A second request whose prompt extends the first one's resumes at the first one's end of
 * prompt (or its answer), and gives exactly what the engine gives for that cut. */
static void test_prefix_cache(void)
{
	struct capy_sched *s = sched_new(64u << 20, 4, 16);
	struct capy_sampler_params sp = { 0 };
	struct capy_sched_stats st;
	struct result r;
	int32_t p[300], ref[8];
	uint64_t cuts[8];

	make_prompt(p, 300, 5);
	result_init(&r);
	submit(s, p, 100, 8, &sp, &r);
	CHECK(wait_end(&r));
	CHECK_EQ_U64(r.cached, 0);
	/* The same 100 tokens then 50 others: the snapshot at 100 (end of the first prompt). */
	result_init(&r);
	submit(s, p, 150, 8, &sp, &r);
	CHECK(wait_end(&r));
	CHECK_EQ_U64(r.cached, 100);
	/* Its pieces: [100, 128) (the snapshot interval) and [128, 150). */
	cuts[0] = 64;
	cuts[1] = 100;
	cuts[2] = 128;
	cuts[3] = 150;
	reference(p, 150, cuts, 4, 8, &sp, ref);
	CHECK_MSG(!memcmp(r.tokens, ref, sizeof(ref)), "a cache hit resumed differently from the engine");
	/* 300 tokens: the second prompt's end (150) is the best snapshot (128 is one too). */
	result_init(&r);
	submit(s, p, 300, 8, &sp, &r);
	CHECK(wait_end(&r));
	CHECK_EQ_U64(r.cached, 150);
	/* An unrelated prompt finds nothing. */
	make_prompt(p, 50, 9);
	result_init(&r);
	submit(s, p, 50, 2, &sp, &r);
	CHECK(wait_end(&r));
	CHECK_EQ_U64(r.cached, 0);
	capy_sched_stats(s, &st);
	CHECK_EQ_U64(st.cache_lookups, 4);
	CHECK_EQ_U64(st.cache_hits, 2);
	CHECK_EQ_U64(st.requests, 4);
	CHECK_EQ_U64(st.cached_tokens, 250);
	CHECK(st.cache_bytes > 0 && st.cache_snapshots > 0 && st.cache_entries > 0);
	capy_sched_free(s, 1);
	CHECK_EQ_U64(capy_engine_pages_used(eng), 0);
}

/* A budget smaller than one snapshot keeps nothing; one of a few snapshots stays within. */
static void test_cache_budget(void)
{
	struct capy_sampler_params sp = { 0 };
	struct capy_sched_stats st;
	struct result r;
	int32_t p[200];
	uint64_t snap = capy_engine_state_bytes(eng);
	struct capy_sched *s = sched_new(snap / 2, 2, 16);

	make_prompt(p, 200, 3);
	result_init(&r);
	submit(s, p, 200, 4, &sp, &r);
	CHECK(wait_end(&r));
	capy_sched_stats(s, &st);
	CHECK_EQ_U64(st.cache_snapshots, 0);
	CHECK(st.cache_bytes <= snap / 2);
	capy_sched_free(s, 1);

	s = sched_new(3 * snap + 8 * capy_engine_page_bytes(eng), 2, 16);
	for (int i = 0; i < 4; i++) {
		make_prompt(p, 200, 20 + i);
		result_init(&r);
		submit(s, p, 200, 4, &sp, &r);
		CHECK(wait_end(&r));
		capy_sched_stats(s, &st);
		CHECK_MSG(st.cache_bytes <= 3 * snap + 8 * capy_engine_page_bytes(eng), "%" PRIu64, st.cache_bytes);
	}
	CHECK(st.cache_snapshots >= 1 && st.cache_snapshots <= 3);
	capy_sched_free(s, 1);
	CHECK_EQ_U64(capy_engine_pages_used(eng), 0);
}

static void test_endings(void)
{
	struct capy_sched *s = sched_new(0, 2, 16);
	struct capy_sampler_params sp = { 0 };
	struct capy_err err = { 0 };
	struct result r, r2;
	int32_t p[400], ref[8];
	uint64_t cut = 20, id;

	make_prompt(p, 400, 7);
	reference(p, 20, &cut, 1, 8, &sp, ref);
	/* A stop id: the fourth token ends the answer and is not delivered. */
	struct capy_gen_request q = { p, 20, sp, 0, &ref[3], 1, -1, 0, on_event, &r, NULL, NULL };
	result_init(&r);
	CHECK_EQ_INT(capy_sched_submit(s, &q, &id, &err), 0);
	CHECK(wait_end(&r));
	CHECK_EQ_INT(r.finish, CAPY_FINISH_STOP_TOKEN);
	CHECK_EQ_INT(r.stop_token, ref[3]);
	CHECK(r.n <= 3);
	/* The callback stops it after two tokens. */
	result_init(&r);
	r.stop_after = 1;
	submit(s, p, 20, 0, &sp, &r);
	CHECK(wait_end(&r));
	CHECK_EQ_INT(r.finish, CAPY_FINISH_STOPPED);
	CHECK_EQ_INT(r.n, 2);
	/* The context limit (400): a 395-token prompt gets at most 5 tokens. */
	result_init(&r);
	submit(s, p, 395, 100, &sp, &r);
	CHECK(wait_end(&r));
	CHECK_EQ_INT(r.finish, CAPY_FINISH_LENGTH);
	CHECK_EQ_INT(r.n, 5);
	/* Refused: empty, too long, bad ids, bad top_logprobs. */
	q = (struct capy_gen_request){ p, 400, sp, 0, NULL, 0, -1, 0, on_event, &r, NULL, NULL };
	CHECK(capy_sched_submit(s, &q, &id, &err) == CAPY_EINVAL);
	CHECK_CONTAINS(err.msg, "leaves no room");
	q.n_prompt = 0;
	CHECK(capy_sched_submit(s, &q, &id, &err) == CAPY_EINVAL);
	int32_t bad[2] = { 1, (int32_t)V };
	q = (struct capy_gen_request){ bad, 2, sp, 0, NULL, 0, -1, 0, on_event, &r, NULL, NULL };
	CHECK(capy_sched_submit(s, &q, &id, &err) == CAPY_EINVAL);
	q = (struct capy_gen_request){ p, 2, sp, 0, NULL, 0, 21, 0, on_event, &r, NULL, NULL };
	CHECK(capy_sched_submit(s, &q, &id, &err) == CAPY_EINVAL);
	/* Cancel: a long answer cancelled after it started. */
	result_init(&r);
	submit(s, p, 20, 300, &sp, &r);
	while (true) {
		pthread_mutex_lock(&r.mu);
		bool go = r.n >= 1 || r.ended;
		pthread_mutex_unlock(&r.mu);
		if (go)
			break;
		usleep(1000);
	}
	capy_sched_cancel(s, r.id);
	CHECK(wait_end(&r));
	CHECK_EQ_INT(r.finish, CAPY_FINISH_CANCELLED);
	CHECK(r.n < 300);
	capy_sched_cancel(s, 999999); /* unknown: ignored */
	/* Logprobs come with the tokens. */
	result_init(&r2);
	q = (struct capy_gen_request){ p, 20, sp, 3, NULL, 0, 5, 0, on_event, &r2, NULL, NULL };
	CHECK_EQ_INT(capy_sched_submit(s, &q, &id, &err), 0);
	CHECK(wait_end(&r2));
	CHECK(!memcmp(r2.tokens, ref, 3 * sizeof(int32_t)));
	capy_sched_free(s, 1);
}

/* A full queue refuses; shutdown ends what is running and what waits. */
static void test_queue_and_shutdown(void)
{
	struct capy_sched *s = sched_new(0, 1, 4);
	struct capy_sampler_params sp = { 0 };
	struct capy_err err = { 0 };
	struct result r[6];
	int32_t p[20];
	uint64_t id;
	int refused = 0;
	bool accepted[6];

	make_prompt(p, 20, 1);
	for (int i = 0; i < 6; i++) {
		struct capy_gen_request q = { p, 20, sp, 350, NULL, 0, -1, 0, on_event, &r[i], NULL, NULL };
		result_init(&r[i]);
		accepted[i] = capy_sched_submit(s, &q, &id, &err) == 0;
		refused += !accepted[i];
	}
	CHECK(refused >= 1);
	CHECK_CONTAINS(err.msg, "the queue is full");
	/* Stopped, the scheduler refuses and still answers stats. */
	capy_sched_stop(s, 0.05);
	struct capy_gen_request q = { p, 20, sp, 3, NULL, 0, -1, 0, on_event, &r[0], NULL, NULL };
	CHECK(capy_sched_submit(s, &q, &id, &err) == CAPY_EBUSY);
	CHECK_CONTAINS(err.msg, "shutting down");
	capy_sched_free(s, 0);
	for (int i = 0; i < 6; i++) {
		if (!accepted[i])
			continue;
		CHECK(r[i].ended);
		CHECK(r[i].finish == CAPY_FINISH_SHUTDOWN || r[i].finish == CAPY_FINISH_LENGTH);
	}
	CHECK_EQ_U64(capy_engine_pages_used(eng), 0);
}

/* A vocabulary where id b < 256 is the byte b (so every text can be spelled), or, with gap,
 * all but 'x'; the others no text. */
static struct capy_token_trie *byte_trie(bool gap, const int32_t *stop, size_t n_stop)
{
	struct capy_token_text *t = calloc(V, sizeof(*t));
	static char bytes[256];
	struct capy_token_trie *tr = NULL;
	struct capy_err err = { 0 };

	for (int b = 0; b < 256; b++) {
		bytes[b] = (char)b;
		if (b && (!gap || b != 'x'))
			t[b] = (struct capy_token_text){ &bytes[b], 1 };
	}
	CHECK_MSG(capy_token_trie_new(&tr, t, (uint32_t)V, stop, n_stop, &err) == 0, "%s", err.msg);
	free(t);
	return tr;
}

static struct capy_grammar *gbnf(const char *text)
{
	struct capy_grammar *g = NULL;
	struct capy_err err = { 0 };

	CHECK_MSG(capy_grammar_compile(text, strlen(text), "root", &g, &err) == 0, "%s", err.msg);
	return g;
}

/* Constrained requests, two at once beside a free one, seeded and with logprobs: the tokens
 * spell a sentence of the grammar and the request ends with it (CAPY_FINISH_GRAMMAR); an
 * accepting grammar that could go on ends at a stop id; a state no token continues ends the
 * request with an error, and the scheduler serves on. */
static void test_constrained(void)
{
	struct capy_sched *s = sched_new(0, 4, 16);
	struct capy_sampler_params sp = { .temperature = 1.0f, .seed = 3 };
	int32_t stop = 300, p[40];
	struct capy_token_trie *tr = byte_trie(false, &stop, 1), *gap = byte_trie(true, &stop, 1);
	struct capy_err err = { 0 };
	struct result r[4];
	uint64_t id;
	char text[MAXTOK + 1];

	make_prompt(p, 40, 5);
	for (int i = 0; i < 4; i++)
		result_init(&r[i]);
	struct capy_gen_request q[4] = {
		{ p, 40, sp, 50, &stop, 1, -1, 0, on_event, &r[0], gbnf("root ::= \"ab\" [0-9]{3} (\"!\" | \"?\")"), tr },
		{ p, 30, sp, 50, &stop, 1, 3, 0, on_event, &r[1], gbnf("root ::= [a-c]+"), tr },
		{ p, 20, sp, 8, &stop, 1, -1, 0, on_event, &r[2], NULL, NULL },
		{ p, 10, sp, 50, &stop, 1, -1, 0, on_event, &r[3], gbnf("root ::= \"a\" \"x\""), gap },
	};
	for (int i = 0; i < 4; i++)
		CHECK_MSG(capy_sched_submit(s, &q[i], &id, &err) == 0, "%s", err.msg);
	for (int i = 0; i < 4; i++)
		CHECK(wait_end(&r[i]));
	for (int i = 0; i < r[0].n; i++)
		text[i] = (char)r[0].tokens[i];
	text[r[0].n] = 0;
	CHECK_EQ_INT(r[0].finish, CAPY_FINISH_GRAMMAR);
	CHECK_MSG(r[0].n == 6 && !strncmp(text, "ab", 2) && strspn(text + 2, "0123456789") == 3 &&
		  (text[5] == '!' || text[5] == '?'), "'%s'", text);
	/* [a-c]+ accepts after every letter: it ends at the stop id or max_new_tokens */
	CHECK(r[1].finish == CAPY_FINISH_STOP_TOKEN || r[1].finish == CAPY_FINISH_LENGTH);
	CHECK(r[1].n >= 1);
	for (int i = 0; i < r[1].n; i++)
		CHECK_MSG(r[1].tokens[i] >= 'a' && r[1].tokens[i] <= 'c', "token %d", r[1].tokens[i]);
	CHECK_EQ_INT(r[2].finish, CAPY_FINISH_LENGTH);
	CHECK_EQ_INT(r[2].n, 8);
	CHECK_EQ_INT(r[3].finish, CAPY_FINISH_ERROR);
	CHECK_EQ_INT(r[3].n, 1); /* "a", then no token spells "x" */
	/* without a trie of the vocabulary a grammar is refused, and stays the caller's */
	struct capy_gen_request bad = { p, 10, sp, 5, NULL, 0, -1, 0, on_event, &r[0], gbnf("root ::= \"a\""), NULL };
	CHECK_EQ_INT(capy_sched_submit(s, &bad, &id, &err), CAPY_EINVAL);
	capy_grammar_free(bad.grammar);
	capy_sched_free(s, 5.0);
	capy_token_trie_free(tr);
	capy_token_trie_free(gap);
	CHECK_EQ_U64(capy_engine_pages_used(eng), 0);
}

/* Four constrained requests at once (seeded, temperature 1) beside a free one give the same
 * tokens whether their masks are computed after each step (mask_threads < 0) or during it by
 * one or four workers; the masks are counted and timed (waited no longer than computed, in
 * place, where the wait holds the computing); a constrained request cancelled with its next
 * mask in flight ends cleanly. */
static void test_constrained_ahead(void)
{
	static const int threads[] = { -1, 1, 4 };
	static const char *const grammar = "root ::= \"{\" ( kv ( \",\" kv ){0,3} )? \"}\"\n"
					   "kv ::= \"\\\"\" [a-z]{1,6} \"\\\":\" [0-9]{1,3}";
	int32_t stop = 300, p[30], first[5][MAXTOK];
	int nfirst[5];
	struct capy_token_trie *tr = byte_trie(false, &stop, 1);
	struct capy_err err = { 0 };

	make_prompt(p, 30, 11);
	for (size_t t = 0; t < ARRAY_SIZE(threads); t++) {
		struct capy_sched *s = NULL;
		struct capy_sched_opts o = { .max_concurrency = 6, .max_context = 400, .prefill_chunk = 64,
					     .mask_threads = threads[t] };
		struct capy_sched_stats st;
		struct result r[6];
		uint64_t id, tokens = 0;
		CHECK_MSG(capy_sched_new(&s, eng, &o, &err) == 0, "%s", err.msg);
		for (int i = 0; i < 6; i++) {
			struct capy_sampler_params sp = { .temperature = 1.0f, .seed = 10 + (uint64_t)i };
			struct capy_gen_request q = { p, 10 + 4 * (size_t)i, sp, i == 5 ? 300 : 60, &stop, 1, -1, 0, on_event,
						      &r[i], i == 4 ? NULL : gbnf(i == 5 ? "root ::= [a-z]{300}" : grammar),
						      i == 4 ? NULL : tr };
			result_init(&r[i]);
			CHECK_MSG(capy_sched_submit(s, &q, &id, &err) == 0, "%s", err.msg);
			r[i].id = id;
		}
		for (int i = 0; i < 5; i++) {
			CHECK(wait_end(&r[i]));
			if (t == 0) {
				memcpy(first[i], r[i].tokens, sizeof(first[i]));
				nfirst[i] = r[i].n;
			} else {
				CHECK_MSG(r[i].n == nfirst[i] && !memcmp(r[i].tokens, first[i], (size_t)r[i].n * 4),
					  "mask_threads %d: request %d gave other tokens", threads[t], i);
			}
			if (i < 4) {
				CHECK_EQ_INT(r[i].finish, CAPY_FINISH_GRAMMAR);
				CHECK(r[i].mask_s > 0 && r[i].mask_wait_s > 0);
				CHECK(threads[t] >= 0 || r[i].mask_wait_s >= r[i].mask_s);
				tokens += (uint64_t)r[i].n;
			}
		}
		capy_sched_cancel(s, r[5].id); /* generating, a mask in flight or about to be */
		CHECK(wait_end(&r[5]));
		CHECK(r[5].finish == CAPY_FINISH_CANCELLED);
		capy_sched_stats(s, &st);
		CHECK_MSG(st.masks >= tokens && st.mask_s > 0, "%" PRIu64 " masks for %" PRIu64 " tokens", st.masks, tokens);
		capy_sched_free(s, 5.0);
	}
	capy_token_trie_free(tr);
	CHECK_EQ_U64(capy_engine_pages_used(eng), 0);
}

/* KV leases: with kv_pages bounding leases and the prefix cache's pages together, a request
 * with a large max_new_tokens reserves its prompt plus the window, and another conversation's
 * cached prefix stays; without a window (its whole max_new_tokens reserved) the cache gives
 * way and that conversation is read again. */
static void test_kv_lease_window(void)
{
	int32_t a[140], b[10];

	make_prompt(a, 140, 21);
	make_prompt(b, 10, 22);
	for (int pass = 0; pass < 2; pass++) {
		struct capy_err err = { 0 };
		struct capy_sched *s = NULL;
		struct capy_sched_stats st;
		struct capy_sampler_params sp = { 0 };
		struct result r;
		uint64_t P = capy_engine_page_tokens(eng);
		/* the cache will hold a's 134 tokens: 3 pages of 64; b's lease is 1 page with the
		 * window (10 + 16 tokens), 5 without it (10 + 300) */
		struct capy_sched_opts o = { .max_concurrency = 2, .max_context = 400, .prefill_chunk = 64,
					     .cache_bytes = 64u << 20, .snapshot_interval = 128,
					     .kv_lease_window = pass ? 0 : 16, .kv_pages = 5 };
		CHECK_EQ_U64(P, 64);
		CHECK_MSG(capy_sched_new(&s, eng, &o, &err) == 0, "%s", err.msg);
		result_init(&r);
		submit(s, a, 130, 4, &sp, &r);
		CHECK(wait_end(&r));
		capy_sched_stats(s, &st);
		CHECK(st.cache_entries >= 1);
		result_init(&r);
		r.stop_after = 2;
		submit(s, b, 10, 300, &sp, &r);
		CHECK(wait_end(&r));
		CHECK_EQ_INT(r.finish, CAPY_FINISH_STOPPED);
		result_init(&r);
		submit(s, a, 140, 2, &sp, &r); /* a's next turn */
		CHECK(wait_end(&r));
		if (pass == 0)
			CHECK_EQ_U64(r.cached, 130);
		else
			CHECK_EQ_U64(r.cached, 0);
		capy_sched_free(s, 5);
	}
	/* Two leases of 2 pages under a bound of 2: the second request waits for the first. */
	struct capy_err err = { 0 };
	struct capy_sched *s = NULL;
	struct capy_sched_stats st;
	struct capy_sampler_params sp = { 0 };
	struct result x, y;
	struct capy_sched_opts o = { .max_concurrency = 2, .max_context = 400, .prefill_chunk = 64,
				     .cache_bytes = 64u << 20, .snapshot_interval = 128, .kv_lease_window = 16,
				     .kv_pages = 2 };
	int32_t px[70], py[70], ref[20];

	make_prompt(px, 70, 31);
	make_prompt(py, 70, 32);
	CHECK(capy_sched_new(&s, eng, &o, &err) == 0);
	result_init(&x);
	result_init(&y);
	submit(s, px, 70, 20, &sp, &x);
	submit(s, py, 70, 20, &sp, &y);
	CHECK(wait_end(&x) && wait_end(&y));
	CHECK_EQ_INT(x.finish, CAPY_FINISH_LENGTH);
	CHECK_EQ_INT(y.finish, CAPY_FINISH_LENGTH);
	capy_sched_stats(s, &st);
	CHECK(st.kv_lease_waits >= 1);
	reference(py, 70, (const uint64_t[]){ 64, 70 }, 2, 20, &sp, ref);
	CHECK(!memcmp(y.tokens, ref, sizeof(ref)));
	capy_sched_free(s, 5);
}

/* A prompt that repeats a period of 7 ids (the drafter finds matches at once). */
static void periodic_prompt(int32_t *p, uint64_t n, int seed)
{
	for (uint64_t i = 0; i < n; i++)
		p[i] = (int32_t)((seed * 37 + (i % 7) * 61 + 5) % 520);
}

/* Speculative decoding: with n-gram drafts, MTP drafts (capy-tiny's trained head) and both,
 * greedy requests give the tokens of one token per step bit for bit, alone and four at once;
 * max_new_tokens, stop ids, a stopping callback and the context limit end the answer exactly
 * where they would without drafts, also inside a window; seeded sampling reproduces itself
 * alone and under load; logprobs requests run without windows; the windows are counted by
 * the drafter that filled them. */
static void test_spec(void)
{
	struct capy_err err = { 0 };
	struct capy_engine *e2 = NULL;
	struct capy_sched *s = NULL;
	struct capy_sched_stats st;
	struct capy_sampler_params sp = { 0 };
	struct result r[4];
	int32_t prompt[4][120], ref[4][40];
	static const uint64_t plen[4] = { 70, 21, 100, 9 };
	uint64_t id;

	if (!capy_engine_keeps_states(eng))
		return;
	/* The scheduler's step must hold a prompt piece and a window per decoding request. */
	CHECK(capy_sched_new(&s, eng, &(struct capy_sched_opts){ .max_concurrency = 8, .prefill_chunk = 64,
								 .spec_draft_tokens = 4 }, &err) == CAPY_EINVAL);
	CHECK_CONTAINS(err.msg, "decoding requests of 5 tokens");
	/* MTP drafts need an engine opened with its head. */
	CHECK(capy_sched_new(&s, eng, &(struct capy_sched_opts){ .max_concurrency = 2, .prefill_chunk = 64,
								 .spec_draft_tokens = 1, .spec_sources = CAPY_SPEC_MTP },
			     &err) == CAPY_EINVAL);
	CHECK_CONTAINS(err.msg, "MTP head");
	/* capy-tiny (a trained model: it continues a repeating prompt, so drafts hit) */
	struct capy_artifact *tiny = test_open_fixture("share/models/capy-tiny");
	CHECK(tiny != NULL);
	if (!tiny)
		return;
	CHECK_EQ_INT(capy_engine_new(&e2, tiny, &(struct capy_engine_opts){ .threads = 2, .step_tokens = 64 + 4 * 5,
								       .mtp = true }, &err), 0);
	struct capy_engine *saved = eng;
	uint64_t saved_v = V;
	eng = e2; /* reference() runs on this engine */
	V = capy_engine_config(e2)->vocab_size;
	for (int q = 0; q < 4; q++) {
		if (q == 3)
			make_prompt(prompt[q], plen[q], q);
		else
			periodic_prompt(prompt[q], plen[q], q);
		uint64_t cuts[2] = { 64, plen[q] };
		int nc = plen[q] > 64 ? 2 : 1;
		if (nc == 1)
			cuts[0] = plen[q];
		reference(prompt[q], plen[q], cuts, nc, 40, &sp, ref[q]);
	}
	static const unsigned sources[3] = { CAPY_SPEC_NGRAM, CAPY_SPEC_MTP, CAPY_SPEC_MTP | CAPY_SPEC_NGRAM };
	for (int src = 0; src < 3; src++) {
		sp = (struct capy_sampler_params){ 0 };
		CHECK_MSG(capy_sched_new(&s, e2, &(struct capy_sched_opts){ .max_concurrency = 4, .max_context = 400,
									    .prefill_chunk = 64, .spec_draft_tokens = 4,
									    .spec_sources = sources[src] }, &err) == 0,
			  "%s", err.msg);
		for (int pass = 0; pass < 2; pass++) { /* four at once, then each alone */
			for (int q = 0; q < 4; q++) {
				result_init(&r[q]);
				submit(s, prompt[q], plen[q], 40, &sp, &r[q]);
				if (pass)
					CHECK(wait_end(&r[q]));
			}
			for (int q = 0; q < 4; q++) {
				CHECK(wait_end(&r[q]));
				CHECK_EQ_INT(r[q].finish, CAPY_FINISH_LENGTH);
				CHECK_EQ_INT(r[q].n, 40);
				CHECK_MSG(!memcmp(r[q].tokens, ref[q], sizeof(ref[q])), "sources %u pass %d: request %d differs with "
					  "drafts", sources[src], pass, q);
			}
		}
		capy_sched_stats(s, &st);
		CHECK(st.spec_windows > 0);
		CHECK(st.spec_accepted > 0);
		CHECK(st.spec_accepted <= st.spec_drafted);
		CHECK(st.spec_mtp_accepted <= st.spec_mtp_drafted);
		if (sources[src] == CAPY_SPEC_NGRAM)
			CHECK_EQ_U64(st.spec_mtp_windows, 0);
		else /* the head's drafts are accepted on capy-tiny too */
			CHECK(st.spec_mtp_windows > 0 && st.spec_mtp_accepted > 0 && st.spec_mtp_s > 0);
		if (sources[src] == CAPY_SPEC_MTP)
			CHECK_EQ_U64(st.spec_mtp_windows, st.spec_windows);
		/* max_new_tokens exactly, wherever it falls in a window. */
		for (uint64_t n = 1; n <= 9; n++) {
			result_init(&r[0]);
			submit(s, prompt[0], plen[0], n, &sp, &r[0]);
			CHECK(wait_end(&r[0]));
			CHECK_EQ_INT(r[0].finish, CAPY_FINISH_LENGTH);
			CHECK_EQ_U64((uint64_t)r[0].n, n);
			CHECK(!memcmp(r[0].tokens, ref[0], n * sizeof(int32_t)));
		}
		/* A stop id: the answer ends before its first occurrence. */
		for (int j = 2; j < 12; j += 3) {
			int first = 0;
			while (ref[0][first] != ref[0][j])
				first++;
			struct capy_gen_request g = { prompt[0], plen[0], sp, 40, &ref[0][j], 1, -1, 0, on_event, &r[0], NULL, NULL };
			result_init(&r[0]);
			CHECK_EQ_INT(capy_sched_submit(s, &g, &id, &err), 0);
			CHECK(wait_end(&r[0]));
			CHECK_EQ_INT(r[0].finish, CAPY_FINISH_STOP_TOKEN);
			CHECK_EQ_INT(r[0].n, first);
			CHECK(!memcmp(r[0].tokens, ref[0], (size_t)first * sizeof(int32_t)));
		}
		/* The callback stops it: nothing after the token it stopped on. */
		for (int j = 0; j < 7; j += 2) {
			result_init(&r[0]);
			r[0].stop_after = j;
			submit(s, prompt[0], plen[0], 40, &sp, &r[0]);
			CHECK(wait_end(&r[0]));
			CHECK_EQ_INT(r[0].finish, CAPY_FINISH_STOPPED);
			CHECK_EQ_INT(r[0].n, j + 1);
			CHECK(!memcmp(r[0].tokens, ref[0], (size_t)(j + 1) * sizeof(int32_t)));
		}
		/* The context limit (400): a 393-token repeating prompt gets 7 tokens, as without drafts. */
		{
			int32_t lp[393], lref[7];
			periodic_prompt(lp, 393, 0);
			uint64_t cuts[7] = { 64, 128, 192, 256, 320, 384, 393 };
			reference(lp, 393, cuts, 7, 7, &sp, lref);
			result_init(&r[0]);
			submit(s, lp, 393, 100, &sp, &r[0]);
			CHECK(wait_end(&r[0]));
			CHECK_EQ_INT(r[0].finish, CAPY_FINISH_LENGTH);
			CHECK_EQ_INT(r[0].n, 7);
			CHECK(!memcmp(r[0].tokens, lref, sizeof(lref)));
		}
		/* Logprobs: the same tokens, no windows. */
		capy_sched_stats(s, &st);
		uint64_t windows = st.spec_windows;
		struct capy_gen_request g = { prompt[0], plen[0], sp, 20, NULL, 0, 2, 0, on_event, &r[0], NULL, NULL };
		result_init(&r[0]);
		CHECK_EQ_INT(capy_sched_submit(s, &g, &id, &err), 0);
		CHECK(wait_end(&r[0]));
		CHECK(!memcmp(r[0].tokens, ref[0], 20 * sizeof(int32_t)));
		capy_sched_stats(s, &st);
		CHECK_EQ_U64(st.spec_windows, windows);
		/* Seeded sampling: alone and under load the same tokens (the request's own stream). */
		int32_t seeded[4][40];
		sp.temperature = 0.8f;
		sp.top_k = 20;
		for (int pass = 0; pass < 2; pass++) {
			for (int q = 0; q < 4; q++) {
				sp.seed = 77 + (uint64_t)q;
				result_init(&r[q]);
				submit(s, prompt[q], plen[q], 40, &sp, &r[q]);
				if (pass)
					CHECK(wait_end(&r[q]));
			}
			for (int q = 0; q < 4; q++) {
				CHECK(wait_end(&r[q]));
				CHECK_EQ_INT(r[q].n, 40);
				if (!pass)
					memcpy(seeded[q], r[q].tokens, sizeof(seeded[q]));
				else
					CHECK_MSG(!memcmp(seeded[q], r[q].tokens, sizeof(seeded[q])), "seeded request %d: load changed it", q);
			}
		}
		capy_sched_free(s, 1);
		s = NULL;
	}
	/* The prefix cache: a second turn resumes at the first's answer snapshot, a third at its
	 * prompt's, both with MTP drafts (the head's rows in the shared pages, the hidden state of
	 * the last cached position kept with the snapshot), and the three give the tokens of the
	 * same turns on a scheduler without drafts (the same cuts, so the same bits). */
	int32_t turns[2][3][40], p2[131], p3[100];
	uint64_t mtp_turn[3] = { 0 };
	for (int with = 0; with < 2; with++) {
		struct capy_sched_stats before;
		sp = (struct capy_sampler_params){ 0 };
		CHECK_MSG(capy_sched_new(&s, e2, &(struct capy_sched_opts){ .max_concurrency = 4, .max_context = 400,
									    .prefill_chunk = 64, .cache_bytes = 64u << 20,
									    .spec_draft_tokens = with ? 4 : 0,
									    .spec_sources = CAPY_SPEC_MTP }, &err) == 0,
			  "%s", err.msg);
		for (int t = 0; t < 3; t++) {
			const int32_t *pt = t == 0 ? prompt[0] : t == 1 ? p2 : p3;
			uint64_t n = t == 0 ? plen[0] : t == 1 ? 131 : 100;
			if (t == 1) { /* the first turn, its answer, a new message */
				memcpy(p2, prompt[0], 70 * sizeof(int32_t));
				memcpy(p2 + 70, turns[with][0], 40 * sizeof(int32_t));
				memcpy(p2 + 110, prompt[1], 21 * sizeof(int32_t));
			} else if (t == 2) { /* the first turn's prompt, then another message */
				memcpy(p3, prompt[0], 70 * sizeof(int32_t));
				memcpy(p3 + 70, prompt[2], 30 * sizeof(int32_t));
			}
			capy_sched_stats(s, &before);
			result_init(&r[0]);
			submit(s, pt, n, 40, &sp, &r[0]);
			CHECK(wait_end(&r[0]));
			CHECK_EQ_INT(r[0].n, 40);
			CHECK_EQ_U64(r[0].cached, t == 0 ? 0 : t == 1 ? 109 : 70);
			memcpy(turns[with][t], r[0].tokens, sizeof(turns[with][t]));
			capy_sched_stats(s, &st);
			if (with) {
				mtp_turn[t] = st.spec_mtp_accepted - before.spec_mtp_accepted;
				CHECK_MSG(st.spec_mtp_windows > before.spec_mtp_windows, "turn %d: no MTP windows", t);
			}
		}
		capy_sched_free(s, 1);
		s = NULL;
	}
	CHECK(!memcmp(turns[0], turns[1], sizeof(turns[0])));
	printf("MTP drafts accepted on a fresh turn and two resumed from the cache: %" PRIu64 ", %" PRIu64 ", %" PRIu64
	       "\n", mtp_turn[0], mtp_turn[1], mtp_turn[2]);
	CHECK(mtp_turn[1] > 0 && mtp_turn[2] > 0);
	CHECK_EQ_U64(capy_engine_pages_used(e2), 0);
	eng = saved;
	V = saved_v;
	capy_engine_free(e2);
	capy_artifact_close(tiny);
}

int main(void)
{
	RUN(setup);
	if (eng) {
		RUN(test_concurrent_equals_alone);
		RUN(test_prefix_cache);
		RUN(test_cache_budget);
		RUN(test_kv_lease_window);
		RUN(test_endings);
		RUN(test_queue_and_shutdown);
		RUN(test_constrained);
		RUN(test_constrained_ahead);
		RUN(test_spec);
	}
	capy_engine_free(eng);
	capy_artifact_close(art);
	return test_summary();
}
