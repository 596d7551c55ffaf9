/* sched.c - continuous batching on an engine thread: the request queue, admission, the
 * composition of each step (one token per generating request, prompt pieces of the others),
 * sampling, the prefix cache's snapshots, cancellation and shutdown (see sched.h). */
#include "sched-impl.h"
#include "../constrain/grammar.h"
#include "../constrain/mask.h"
#include "../constrain/mask-ahead.h"
#include "../spec/spec.h"
#include "../util/log.h"

#include <math.h>
#include <pthread.h>
#include <time.h>

#define MAX_STOP_IDS 16

enum phase { QUEUED, PREFILL, DECODE };

struct req {
	uint64_t id;
	struct capy_gen_request r;
	int32_t *prompt;
	int32_t stop[MAX_STOP_IDS];
	enum phase phase;
	struct capy_seq *seq;
	struct capy_sampler *smp;
	float *logits;
	int32_t next;                 /* the sampled token the next step feeds */
	int32_t sampled;              /* the step's pick, where the step samples (no logprobs) */
	uint64_t generated, cached, max_new;
	enum capy_kv_tier tier;       /* where the cached prefix came from */
	uint64_t lease;               /* KV reserved up to this position (engine thread) */
	struct prefix_entry *entry;
	/* constrained (r.grammar): this request's masker (its caches are per grammar and not
	 * thread-safe, so never shared), the grammar state of the output so far, and the job
	 * computing the mask of that state while the step runs (it owns the masker meanwhile) */
	struct capy_mask *mask;
	struct capy_grammar_state *gstate;
	struct capy_mask_ahead *ahead;
	double mask_s, mask_wait_s, mask_wait_max_s;
	/* the step's mask (step_mask, asked for by the engine once the step is under way): what
	 * the job gave, kept for next_token */
	struct capy_sched *sched;
	const uint32_t *mask_bits;
	int mask_rc;
	struct capy_err mask_err;
	/* speculative decoding (opts.spec_draft_tokens; NULL ngram: this request decodes one
	 * token per step): the drafter of its prompt and output, the step's window [next, drafts]
	 * and its logits rows, how many drafts the step carries (0: a one-token item), what the
	 * acceptance gave, and the counts; mtp (NULL: no MTP drafts) follows the sequence, and
	 * mtp_window says the step's drafts are the head's */
	struct capy_ngram *ngram;
	struct capy_mtp *mtp;
	bool mtp_window;
	int32_t *window, *accepted;
	float *rows;
	uint64_t n_drafts;
	uint64_t spec_windows, spec_drafted, spec_accepted;
	uint64_t spec_mtp_windows, spec_mtp_drafted, spec_mtp_accepted;
	bool cancel;                  /* asked for (under the mutex) */
	double t_submit, t_start, t_prefilled;
	bool cancel_seen;             /* the engine thread's copy of cancel */
	struct req *qnext;            /* the queue */
	struct req *aprev, *anext;    /* every request not yet ended (under the mutex) */
};

struct capy_sched {
	struct capy_engine *e;
	struct capy_sched_opts o;
	uint64_t vocab, step_tokens;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct req *q_head, *q_tail;  /* waiting, in order (under the mutex) */
	uint64_t n_queued;
	struct req *all;              /* not ended (under the mutex) */
	bool closing, failed, joined;
	double deadline;
	uint64_t next_id;
	struct capy_sched_stats st;   /* under the mutex */
	struct capy_mask_pool *masks; /* the workers of the requests' mask jobs */
	/* engine thread only */
	struct req **active;
	size_t n_active;
	size_t rr;                    /* round-robin start among prompt readers */
	struct prefix_cache *pc;
	struct capy_step_item *items;
	struct req **item_req;
	float *lp_work;               /* [vocab] log-probabilities */
	int32_t *draft_ids;           /* MTP's draft vocabulary (opts.spec_draft_ids, copied) */
	float *mtp_hidden;            /* [hidden_size] a cached prefix's MTP hidden state (start) */
	char fail_msg[CAPY_ERR_MSG_MAX + 32];
};

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* --- requests -------------------------------------------------------------------------------- */

static void free_req(struct req *q)
{
	if (!q)
		return;
	capy_seq_free(q->seq);
	capy_sampler_free(q->smp);
	capy_mask_ahead_free(q->ahead); /* first: it may be computing with the masker and the state */
	capy_mask_free(q->mask);
	capy_grammar_state_free(q->gstate);
	capy_grammar_free(q->r.grammar);
	capy_ngram_free(q->ngram);
	capy_mtp_free(q->mtp);
	free(q->window);
	free(q->accepted);
	free(q->rows);
	free(q->logits);
	free(q->prompt);
	free(q);
}

static void unlink_all(struct capy_sched *s, struct req *q)
{
	if (q->aprev)
		q->aprev->anext = q->anext;
	else
		s->all = q->anext;
	if (q->anext)
		q->anext->aprev = q->aprev;
}

/* The head's time into the scheduler's statistics. */
static void count_mtp_time(struct capy_sched *s, double t)
{
	pthread_mutex_lock(&s->mu);
	s->st.spec_mtp_s += t;
	pthread_mutex_unlock(&s->mu);
}

/* Before a snapshot of q: the head run over every position but the last, so the pages the
 * cache shares hold its rows, and the last position's hidden state to keep with the snapshot
 * (NULL: no MTP drafter, or it failed; the snapshot then resumes without MTP drafts). */
static const float *mtp_for_snapshot(struct capy_sched *s, struct req *q)
{
	struct capy_err err = { 0 };
	double t = 0;
	int rc;

	if (!q->mtp)
		return NULL;
	rc = capy_mtp_catch_up(q->mtp, &t, &err);
	count_mtp_time(s, t);
	return rc < 0 ? NULL : capy_mtp_pending(q->mtp);
}

/* The END event, the answer's snapshot for the cache, and the request is gone. Engine thread. */
static void finish(struct capy_sched *s, struct req *q, enum capy_gen_finish why, int32_t stop_token,
		   const char *error)
{
	double t = now();
	struct capy_gen_event ev = { .type = CAPY_GEN_END, .id = q->id, .cached_tokens = q->cached, .cache_tier = q->tier };

	if (s->pc && q->seq && why != CAPY_FINISH_ERROR) {
		struct capy_err err = { 0 };
		if (prefix_insert(s->pc, &q->entry, q->seq, mtp_for_snapshot(s, q), &err) < 0)
			capy_log_warn("prefix cache: %s", err.msg);
	}
	if (s->pc)
		prefix_detach(s->pc, &q->entry);
	ev.finish = why;
	ev.stop_token = stop_token;
	ev.error = error;
	ev.prompt_tokens = q->r.n_prompt;
	ev.generated_tokens = q->generated;
	ev.queue_s = (q->t_start ? q->t_start : t) - q->t_submit;
	ev.prefill_s = q->t_start ? (q->t_prefilled ? q->t_prefilled : t) - q->t_start : 0;
	ev.decode_s = q->t_prefilled ? t - q->t_prefilled : 0;
	ev.mask_s = q->mask_s;
	ev.mask_wait_s = q->mask_wait_s;
	ev.mask_wait_max_s = q->mask_wait_max_s;
	ev.spec_windows = q->spec_windows;
	ev.spec_drafted = q->spec_drafted;
	ev.spec_accepted = q->spec_accepted;
	ev.spec_mtp_windows = q->spec_mtp_windows;
	ev.spec_mtp_drafted = q->spec_mtp_drafted;
	ev.spec_mtp_accepted = q->spec_mtp_accepted;
	q->r.cb(q->r.ud, &ev);
	pthread_mutex_lock(&s->mu);
	unlink_all(s, q);
	s->st.generated_tokens += q->generated;
	pthread_mutex_unlock(&s->mu);
	free_req(q);
}

static void remove_active(struct capy_sched *s, size_t i)
{
	memmove(s->active + i, s->active + i + 1, (s->n_active - i - 1) * sizeof(*s->active));
	s->n_active--;
}

/* --- KV leases (sched.h: kv_lease_window, kv_pages) --- */

/* The lease of a request at length len: a window beyond it, never past what it can reach. */
static uint64_t lease_for(const struct capy_sched *s, const struct req *q, uint64_t len)
{
	uint64_t end = q->r.n_prompt + q->max_new, w = s->o.kv_lease_window;

	return w ? CAPY_MIN(len + w, end) : end;
}

/* Pages of a lease: those beyond the cached prefix the request shares with the prefix cache
 * (counted there). */
static uint64_t lease_pages(const struct capy_sched *s, uint64_t lease, uint64_t cached)
{
	uint64_t P = capy_engine_page_tokens(s->e);

	return (lease + P - 1) / P - cached / P;
}

static uint64_t leased_pages(const struct capy_sched *s)
{
	uint64_t n = 0;

	for (size_t i = 0; i < s->n_active; i++)
		n += lease_pages(s, s->active[i]->lease, s->active[i]->cached);
	return n;
}

/* Whether `extra` more leased pages fit kv_pages, after the prefix cache gave way. Unless
 * `must` (the pages will be written anyway), the cache is left alone when even emptying it
 * would not make room. */
static bool lease_room(struct capy_sched *s, uint64_t extra, bool must)
{
	uint64_t leased = leased_pages(s) + extra;
	struct prefix_stats ps = { 0 };

	if (!s->o.kv_pages)
		return true;
	if (leased > s->o.kv_pages && !must)
		return false;
	if (s->pc) {
		prefix_make_room(s->pc, leased < s->o.kv_pages ? s->o.kv_pages - leased : 0);
		prefix_stats(s->pc, &ps);
	}
	return leased + ps.pages <= s->o.kv_pages;
}

/* Enter the batch: the longest cached prefix, or a fresh sequence; START. */
static int start(struct capy_sched *s, struct req *q, struct capy_err *err)
{
	uint64_t cached = 0;
	enum capy_kv_tier tier = CAPY_KV_TIER_NONE;
	int rc;
	bool mtp_ok = false;
	struct capy_gen_event ev = { .type = CAPY_GEN_START, .id = q->id };

	q->t_start = now();
	if (s->pc) {
		if ((rc = prefix_lookup(s->pc, q->prompt, q->r.n_prompt, q->r.n_prompt - 1, &q->seq, &cached, &tier,
					s->mtp_hidden, &mtp_ok, err)) < 0)
			return rc;
		pthread_mutex_lock(&s->mu);
		s->st.cache_lookups++;
		s->st.cache_hits += cached > 0;
		s->st.tier_hits[tier] += cached > 0;
		s->st.tier_cached_tokens[tier] += cached;
		pthread_mutex_unlock(&s->mu);
	}
	if (!q->seq && (rc = capy_seq_new(s->e, &q->seq, err)) < 0)
		return rc;
	if ((rc = capy_sampler_new(&q->smp, s->vocab, &q->r.sampling, err)) < 0)
		return rc;
	capy_sampler_prompt(q->smp, q->prompt, q->r.n_prompt);
	if (!(q->logits = malloc(s->vocab * sizeof(float))))
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	if (q->r.grammar) {
		if ((rc = capy_mask_new(&q->mask, q->r.trie, q->r.grammar, NULL, err)) < 0 ||
		    (rc = capy_grammar_state_new(q->r.grammar, &q->gstate, err)) < 0 ||
		    (rc = capy_mask_ahead_new(&q->ahead, s->masks, q->mask, (uint32_t)s->vocab, err)) < 0)
			return rc;
		capy_mask_ahead_start(q->ahead, q->gstate); /* the first mask, while the prompt is read */
	}
	/* Drafts for what can take them: a grammar's mask would be needed at every draft
	 * position, logprobs at every accepted one (neither is done yet). */
	if (s->o.spec_draft_tokens && !q->r.grammar && q->r.top_logprobs < 0) {
		uint64_t K = s->o.spec_draft_tokens;
		if (!(q->window = malloc((K + 1) * sizeof(int32_t))) || !(q->accepted = malloc((K + 1) * sizeof(int32_t))) ||
		    !(q->rows = malloc((K + 1) * s->vocab * sizeof(float))))
			return capy_err_set(err, CAPY_ENOMEM, "out of memory");
		if ((s->o.spec_sources & CAPY_SPEC_NGRAM) &&
		    ((rc = capy_ngram_new(&q->ngram, s->o.spec_ngram_min, err)) < 0 ||
		     (rc = capy_ngram_add(q->ngram, q->prompt, q->r.n_prompt, err)) < 0))
			return rc;
		/* The head needs its rows of every position before the one it drafts from, and the
		 * main model's hidden states of those it has not run: a cached prefix has them
		 * when its snapshot was taken from a request that drafted with the head (sched.h). */
		if ((s->o.spec_sources & CAPY_SPEC_MTP) && (!cached || mtp_ok)) {
			const struct capy_sampler_params *sp = &q->r.sampling;
			if ((rc = capy_mtp_new(&q->mtp, s->e, q->seq, s->draft_ids, s->o.spec_n_draft_ids, err)) < 0 ||
			    (cached && (rc = capy_mtp_resume(q->mtp, cached - 1, s->mtp_hidden, err)) < 0))
				return rc;
			/* Sampling: drafts drawn from the head's distribution at the request's
			 * temperature, verified with their q (as capy-gen does); greedy: its argmax. */
			if (sp->temperature > 0 && sp->top_k != 1 &&
			    (rc = capy_mtp_sample(q->mtp, sp->temperature, sp->seed ^ 0x6d74702d64726166ull, K, err)) < 0)
				return rc;
		}
	}
	q->cached = cached;
	q->tier = tier;
	q->lease = lease_for(s, q, q->r.n_prompt);
	q->phase = PREFILL;
	pthread_mutex_lock(&s->mu);
	s->st.prompt_tokens += q->r.n_prompt;
	s->st.cached_tokens += cached;
	s->st.requests++;
	pthread_mutex_unlock(&s->mu);
	ev.cached_tokens = cached;
	ev.cache_tier = tier;
	q->r.cb(q->r.ud, &ev);
	return 0;
}

/* Where the next prompt piece of q ends: the prompt's end, one chunk on, or the next
 * snapshot position, whichever comes first — all of them the request's own. */
static uint64_t piece_end(const struct capy_sched *s, const struct req *q)
{
	uint64_t pos = capy_seq_len(q->seq), end = CAPY_MIN(q->r.n_prompt, pos + s->o.prefill_chunk);
	uint64_t iv = s->o.snapshot_interval, next_iv = (pos / iv + 1) * iv;

	if (q->r.snapshot_at > pos && q->r.snapshot_at < end)
		end = q->r.snapshot_at;
	if (s->pc && next_iv < end)
		end = next_iv;
	return end;
}

static bool is_snapshot_point(const struct capy_sched *s, const struct req *q, uint64_t pos)
{
	return pos == q->r.n_prompt || pos == q->r.snapshot_at || pos % s->o.snapshot_interval == 0;
}

/* log-softmax of the raw logits, the chosen token's value and the n most likely. */
static void logprobs(struct capy_sched *s, const float *logits, int32_t tok, int n, float *lp_tok, int32_t *ids,
		     float *lps)
{
	uint64_t V = s->vocab;
	float mx = -INFINITY, *lp = s->lp_work;
	double sum = 0;

	for (uint64_t i = 0; i < V; i++)
		mx = fmaxf(mx, logits[i]);
	for (uint64_t i = 0; i < V; i++)
		sum += exp((double)(logits[i] - mx));
	for (uint64_t i = 0; i < V; i++)
		lp[i] = (float)((double)(logits[i] - mx) - log(sum));
	*lp_tok = lp[tok];
	for (int k = 0; k < n; k++) {
		int64_t best = -1;
		for (uint64_t i = 0; i < V; i++) {
			bool taken = false;
			for (int j = 0; j < k && !taken; j++)
				taken = (uint64_t)ids[j] == i;
			if (!taken && (best < 0 || lp[i] > lp[best]))
				best = (int64_t)i;
		}
		ids[k] = (int32_t)best;
		lps[k] = lp[best];
	}
}

/* The mask's times, into the request's and the scheduler's totals. */
static void count_mask(struct capy_sched *s, struct req *q, const struct capy_mask_timing *t)
{
	q->mask_s += t->compute_s;
	q->mask_wait_s += t->wait_s;
	q->mask_wait_max_s = CAPY_MAX(q->mask_wait_max_s, t->wait_s);
	pthread_mutex_lock(&s->mu);
	s->st.masks++;
	s->st.mask_s += t->compute_s;
	s->st.mask_wait_s += t->wait_s;
	pthread_mutex_unlock(&s->mu);
}

/* A constrained request's mask for the step (engine.h's step-item mask, called once the step
 * is under way): the mask of the grammar's state, started when the state was reached, so
 * mostly computed while the step ran; what the job gave is kept for constrained_token. */
static const uint32_t *step_mask(void *ud)
{
	struct req *q = ud;
	struct capy_mask_timing t;

	q->mask_err = (struct capy_err){ 0 };
	q->mask_rc = capy_mask_ahead_wait(q->ahead, &q->mask_bits, &t, &q->mask_err);
	count_mask(q->sched, q, &t);
	return q->mask_rc > 0 ? q->mask_bits : NULL;
}

/* A constrained request's token: the step's masked draw (or, for a request with
 * log-probabilities, whose row is here, the mask and the draw here), the state advanced.
 * 1: *tok goes on; 0: the request ends (*tok a stop token taken where the grammar accepts, or
 * -1 when the grammar is finished and nothing may follow); < 0: a dead end or a failure, msg
 * says which (never a hang: the request ends with it). */
static int constrained_token(struct req *q, int32_t *tok, char *msg, size_t cap)
{
	struct capy_err err = { 0 };
	int rc;

	if (q->r.top_logprobs >= 0)
		*tok = step_mask(q) ? capy_sampler_next_masked(q->smp, q->logits, q->mask_bits) : -1;
	else
		*tok = q->sampled;
	if (q->mask_rc < 0) {
		snprintf(msg, cap, "the output's grammar: %s", q->mask_err.msg);
		return q->mask_rc;
	}
	if (q->mask_rc == 0) {
		*tok = -1;
		return 0;
	}
	if (*tok < 0) {
		snprintf(msg, cap, "the output's grammar: no token can continue");
		return CAPY_EFORMAT;
	}
	if ((rc = capy_mask_advance(q->r.trie, q->gstate, *tok, &err)) < 0) {
		snprintf(msg, cap, "the output's grammar: %s", err.msg);
		return rc;
	}
	return rc; /* 0: a stop token */
}

/* The drafter learns each token once it is given out. Out of memory, the request goes on
 * without drafts (its tokens are the same). */
static void feed_drafter(struct req *q, int32_t tok)
{
	struct capy_err err = { 0 };

	if (q->ngram && capy_ngram_add(q->ngram, &tok, 1, &err) < 0) {
		capy_log_warn("request %" PRIu64 ": no more drafts: %s", q->id, err.msg);
		capy_ngram_free(q->ngram);
		q->ngram = NULL;
	}
}

/* The MTP drafter failed (out of memory, or the engine refused its rows): the request goes
 * on without MTP drafts (its tokens are the same). */
static void drop_mtp(struct req *q, const struct capy_err *err)
{
	capy_log_warn("request %" PRIu64 ": no more MTP drafts: %s", q->id, err->msg);
	capy_mtp_free(q->mtp);
	q->mtp = NULL;
}

/* Where q's step item of the tokens at [pos, pos + n) puts their hidden states for the MTP
 * head (NULL: no MTP drafter). */
static float *mtp_hidden(struct req *q, uint64_t pos, uint64_t n)
{
	struct capy_err err = { 0 };
	float *h;

	if (!q->mtp)
		return NULL;
	if (!(h = capy_mtp_hidden_at(q->mtp, pos, n, &err)))
		drop_mtp(q, &err);
	return h;
}

/* After a step gave q its logits: the next token, and whether the request goes on. */
static void next_token(struct capy_sched *s, struct req *q, size_t ai)
{
	struct capy_gen_event ev = { .type = CAPY_GEN_TOKEN, .id = q->id, .cached_tokens = q->cached };
	int32_t top_ids[CAPY_GEN_MAX_TOP_LOGPROBS];
	float top_lp[CAPY_GEN_MAX_TOP_LOGPROBS], lp_tok = 0;
	float *raw = NULL;
	int32_t tok;
	int n_top = q->r.top_logprobs;
	char msg[CAPY_ERR_MSG_MAX + 64];

	if (n_top >= 0) { /* the model's distribution, before the sampler changes the logits */
		raw = s->lp_work + s->vocab;
		memcpy(raw, q->logits, s->vocab * sizeof(float));
	}
	if (q->r.grammar) {
		switch (constrained_token(q, &tok, msg, sizeof(msg))) {
		case 1:
			break;
		case 0: /* a stop token where the grammar accepts, or nothing can follow */
			remove_active(s, ai);
			finish(s, q, tok >= 0 ? CAPY_FINISH_STOP_TOKEN : CAPY_FINISH_GRAMMAR, tok, NULL);
			return;
		default:
			remove_active(s, ai);
			finish(s, q, CAPY_FINISH_ERROR, 0, msg);
			return;
		}
	} else {
		tok = n_top >= 0 ? capy_sampler_next(q->smp, q->logits) : q->sampled;
	}
	for (size_t i = 0; i < q->r.n_stop_ids; i++)
		if (q->stop[i] == tok) {
			remove_active(s, ai);
			finish(s, q, CAPY_FINISH_STOP_TOKEN, tok, NULL);
			return;
		}
	if (raw)
		logprobs(s, raw, tok, n_top, &lp_tok, top_ids, top_lp);
	ev.token = tok;
	ev.index = q->generated++;
	ev.logprob = lp_tok;
	ev.n_top = n_top > 0 ? n_top : 0;
	ev.top_ids = top_ids;
	ev.top_logprobs = top_lp;
	if (q->r.cb(q->r.ud, &ev)) {
		remove_active(s, ai);
		finish(s, q, CAPY_FINISH_STOPPED, 0, NULL);
		return;
	}
	feed_drafter(q, tok);
	if (q->r.grammar && capy_grammar_finished(q->gstate)) { /* done: no need to wait for a stop id */
		remove_active(s, ai);
		finish(s, q, CAPY_FINISH_GRAMMAR, 0, NULL);
		return;
	}
	if (q->generated >= q->max_new || capy_seq_len(q->seq) + 1 >= s->o.max_context) {
		remove_active(s, ai);
		finish(s, q, CAPY_FINISH_LENGTH, 0, NULL);
		return;
	}
	if (capy_seq_len(q->seq) + 1 > q->lease) { /* the answer reached the end of its lease */
		q->lease = lease_for(s, q, capy_seq_len(q->seq) + 1);
		lease_room(s, 0, true);
	}
	q->next = tok;
	q->phase = DECODE;
	if (q->r.grammar) /* the next mask, while the engine computes the logits it will mask */
		capy_mask_ahead_start(q->ahead, q->gstate);
}

/* --- speculative windows (opts.spec_draft_tokens) --- */

/* q's drafts for this step into q->window[1..]: never more than the tokens it may still give
 * (max_new_tokens, the context) leave room for after the window's own token; 0: none. With
 * both drafters, the n-gram draft when it fills all k (its match is then long), else the
 * head's k drafts (as capy-gen's --spec mtp+ngram). */
static uint64_t draft(struct capy_sched *s, struct req *q)
{
	uint64_t len = capy_seq_len(q->seq), k = s->o.spec_draft_tokens, left = q->max_new - q->generated, n = 0;
	struct capy_err err = { 0 };
	double t = 0;

	q->mtp_window = false;
	if ((!q->ngram && !q->mtp) || left <= 1 || len + 2 >= s->o.max_context)
		return 0;
	k = CAPY_MIN(k, left - 1);
	k = CAPY_MIN(k, s->o.max_context - 2 - len); /* the window ends where one token per step would */
	if (q->ngram)
		n = capy_ngram_draft(q->ngram, k, q->window + 1, NULL);
	if (!q->mtp || n == k)
		return n;
	if (capy_mtp_draft(q->mtp, q->next, k, q->window + 1, &t, &err) < 0) {
		drop_mtp(q, &err); /* it may have written over the n-gram draft */
		return q->ngram ? capy_ngram_draft(q->ngram, k, q->window + 1, NULL) : 0;
	}
	count_mtp_time(s, t);
	q->mtp_window = true;
	return k;
}

/* After q's window ran from length len: the accepted tokens, each given out as next_token
 * gives one (stop ids, the callback, max_new_tokens, the context), then the sequence cut back
 * to what one token per step would hold at that point — the last token given out not yet run
 * — so the prefix cache and the next step see the same history either way. */
static void window_tokens(struct capy_sched *s, struct req *q, size_t ai, uint64_t len)
{
	struct capy_gen_event ev = { .type = CAPY_GEN_TOKEN, .id = q->id, .cached_tokens = q->cached };
	uint64_t k = q->n_drafts, m, j;
	enum capy_gen_finish why = CAPY_FINISH_LENGTH;
	bool ends = false;
	int32_t tok = 0;
	struct capy_err err = { 0 };
	char msg[CAPY_ERR_MSG_MAX + 64];

	/* The head's sampled drafts come with their distributions; n-gram and argmax drafts are
	 * point masses (and so are sampled ones whose drafter was dropped since: the point-mass
	 * rule is exact for any draft, it only accepts less often). */
	m = capy_spec_accept_q(q->smp, q->rows, s->vocab, q->window + 1, k,
			       q->mtp_window && q->mtp ? capy_mtp_q(q->mtp) : NULL, q->accepted);
	q->spec_windows++;
	q->spec_drafted += k;
	q->spec_accepted += m - 1;
	if (q->mtp_window) {
		q->spec_mtp_windows++;
		q->spec_mtp_drafted += k;
		q->spec_mtp_accepted += m - 1;
	}
	pthread_mutex_lock(&s->mu);
	s->st.spec_windows++;
	s->st.spec_drafted += k;
	s->st.spec_accepted += m - 1;
	if (q->mtp_window) {
		s->st.spec_mtp_windows++;
		s->st.spec_mtp_drafted += k;
		s->st.spec_mtp_accepted += m - 1;
	}
	pthread_mutex_unlock(&s->mu);
	for (j = 0;; j++) {
		tok = q->accepted[j];
		for (size_t i = 0; i < q->r.n_stop_ids && !ends; i++)
			if (q->stop[i] == tok) {
				why = CAPY_FINISH_STOP_TOKEN;
				ends = true;
			}
		if (ends)
			break;
		ev.token = tok;
		ev.index = q->generated++;
		if (q->r.cb(q->r.ud, &ev)) {
			why = CAPY_FINISH_STOPPED;
			ends = true;
			break;
		}
		feed_drafter(q, tok);
		if (q->generated >= q->max_new || len + 1 + j + 1 >= s->o.max_context) {
			ends = true;
			break;
		}
		if (j + 1 == m)
			break;
	}
	/* The window's token and accepted[0 .. j) are run; accepted[j] is not. */
	if (len + 1 + j < capy_seq_len(q->seq) && capy_seq_truncate(q->seq, len + 1 + j, &err) < 0) {
		snprintf(msg, sizeof(msg), "cutting a speculative window back: %s", err.msg);
		remove_active(s, ai);
		finish(s, q, CAPY_FINISH_ERROR, 0, msg);
		return;
	}
	if (ends) {
		remove_active(s, ai);
		finish(s, q, why, why == CAPY_FINISH_STOP_TOKEN ? tok : 0, NULL);
		return;
	}
	/* After an n-gram window the head runs over its accepted positions now, so a long run of
	 * n-gram windows does not pile up hidden states (an MTP draft would run them anyway). */
	if (q->mtp && !q->mtp_window) {
		double t = 0;
		if (capy_mtp_catch_up(q->mtp, &t, &err) < 0)
			drop_mtp(q, &err);
		count_mtp_time(s, t);
	}
	if (capy_seq_len(q->seq) + 1 > q->lease) {
		q->lease = lease_for(s, q, capy_seq_len(q->seq) + 1);
		lease_room(s, 0, true);
	}
	q->next = tok;
	q->phase = DECODE;
}

/* --- the engine thread ----------------------------------------------------------------------- */

static void fail_all(struct capy_sched *s, const char *msg)
{
	struct req *q;

	while (s->n_active) {
		q = s->active[s->n_active - 1];
		s->n_active--;
		finish(s, q, CAPY_FINISH_ERROR, 0, msg);
	}
	pthread_mutex_lock(&s->mu);
	s->failed = s->st.failed = true;
	pthread_mutex_unlock(&s->mu);
}

/* The step picks q's next token (where the backend can, next to the logits; a constrained
 * request's with its grammar's mask, step_mask), unless q asks for log-probabilities: those
 * need the whole row on the host. */
static void wants_token(struct capy_step_item *it, struct req *q)
{
	if (q->r.top_logprobs >= 0) {
		it->logits = q->logits;
		return;
	}
	it->sampler = q->smp;
	it->token = &q->sampled;
	if (q->r.grammar) {
		q->mask_rc = capy_err_set(&q->mask_err, CAPY_EINVAL, "the step asked for no mask"); /* until it does */
		it->mask = step_mask;
		it->mask_ud = q;
	}
}

/* One step: decode tokens first, then prompt pieces in turn while they fit whole. */
static void run_step(struct capy_sched *s)
{
	struct capy_err err = { 0 };
	size_t n = 0, np = 0;
	uint64_t total = 0;
	bool reading = false;
	double t0;
	int rc;

	for (size_t i = 0; i < s->n_active; i++) {
		struct req *q = s->active[i];
		if (q->phase != DECODE)
			continue;
		if ((q->n_drafts = draft(s, q))) {
			uint64_t end = capy_seq_len(q->seq) + q->n_drafts + 1;
			q->window[0] = q->next;
			s->items[n] = (struct capy_step_item){ .seq = q->seq, .tokens = q->window, .n = q->n_drafts + 1,
							       .logits = q->rows, .all_logits = true, .keep_states = true };
			/* after the draft: it took the hidden states given so far */
			s->items[n].hidden = mtp_hidden(q, end - q->n_drafts - 1, q->n_drafts + 1);
			if (end > q->lease) { /* the window writes past the lease: extend it first */
				q->lease = lease_for(s, q, end);
				lease_room(s, 0, true);
			}
		} else {
			s->items[n] = (struct capy_step_item){ .seq = q->seq, .tokens = &q->next, .n = 1,
							       .hidden = mtp_hidden(q, capy_seq_len(q->seq), 1) };
			wants_token(&s->items[n], q);
		}
		s->item_req[n++] = q;
		total += s->items[n - 1].n;
	}
	for (size_t k = 0; k < s->n_active; k++) {
		struct req *q = s->active[(s->rr + k) % s->n_active];
		uint64_t pos, end;
		if (q->phase != PREFILL)
			continue;
		np++;
		pos = capy_seq_len(q->seq);
		end = piece_end(s, q);
		if (total + (end - pos) > s->step_tokens)
			continue;
		s->items[n] = (struct capy_step_item){ .seq = q->seq, .tokens = q->prompt + pos, .n = end - pos,
						       .hidden = mtp_hidden(q, pos, end - pos) };
		if (end == q->r.n_prompt)
			wants_token(&s->items[n], q);
		s->item_req[n++] = q;
		total += end - pos;
		reading = true;
	}
	if (np)
		s->rr++;
	if (!n)
		return;
	t0 = now();
	rc = capy_engine_step(s->e, s->items, n, &err);
	pthread_mutex_lock(&s->mu);
	s->st.steps++;
	if (reading)
		s->st.prefill_s += now() - t0;
	else
		s->st.decode_s += now() - t0;
	for (size_t i = 0; i < n; i++)
		if (s->item_req[i]->phase == PREFILL)
			s->st.prefill_tokens += s->items[i].n;
	pthread_mutex_unlock(&s->mu);
	if (rc < 0) {
		snprintf(s->fail_msg, sizeof(s->fail_msg), "the engine failed: %s", err.msg);
		capy_log_error("%s", s->fail_msg);
		fail_all(s, s->fail_msg);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		struct req *q = s->item_req[i];
		uint64_t pos = capy_seq_len(q->seq);
		size_t ai = 0;
		while (ai < s->n_active && s->active[ai] != q)
			ai++;
		if (q->phase == PREFILL) {
			if (q->mtp) { /* the head over the piece's rows, so only its last hidden state waits */
				double t = 0;
				if (capy_mtp_catch_up(q->mtp, &t, &err) < 0)
					drop_mtp(q, &err);
				count_mtp_time(s, t);
			}
			if (s->pc && is_snapshot_point(s, q, pos) &&
			    prefix_insert(s->pc, &q->entry, q->seq, q->mtp ? capy_mtp_pending(q->mtp) : NULL, &err) < 0)
				capy_log_warn("prefix cache: %s", err.msg);
			if (pos < q->r.n_prompt)
				continue;
			q->t_prefilled = now();
		} else if (q->n_drafts) {
			window_tokens(s, q, ai, pos - q->n_drafts - 1);
			continue;
		}
		next_token(s, q, ai);
	}
}

/* Take cancellations and new requests (under the mutex), then start the new ones. */
static bool admit(struct capy_sched *s)
{
	struct req *start_list[64], *q;
	size_t n_start = 0;
	bool shutdown_now, closing;

	pthread_mutex_lock(&s->mu);
	for (;;) {
		closing = s->closing;
		shutdown_now = closing && now() >= s->deadline;
		while (!closing && !s->failed && s->q_head && s->n_active + n_start < (size_t)s->o.max_concurrency &&
		       n_start < ARRAY_SIZE(start_list)) {
			q = s->q_head;
			s->q_head = q->qnext;
			if (!s->q_head)
				s->q_tail = NULL;
			s->n_queued--;
			start_list[n_start++] = q;
		}
		if (s->n_active || n_start || s->q_head || closing)
			break;
		pthread_cond_wait(&s->cv, &s->mu);
	}
	/* Read the cancel flags while holding the mutex. */
	for (size_t i = 0; i < s->n_active; i++)
		s->active[i]->cancel_seen = s->active[i]->cancel;
	for (size_t i = 0; i < n_start; i++)
		start_list[i]->cancel_seen = start_list[i]->cancel;
	s->st.queued = s->n_queued;
	pthread_mutex_unlock(&s->mu);

	for (size_t i = s->n_active; i-- > 0;)
		if (s->active[i]->cancel_seen) {
			q = s->active[i];
			remove_active(s, i);
			finish(s, q, CAPY_FINISH_CANCELLED, 0, NULL);
		}
	for (size_t i = 0; i < n_start; i++) {
		struct capy_err err = { 0 };
		q = start_list[i];
		if (q->cancel_seen) {
			finish(s, q, CAPY_FINISH_CANCELLED, 0, NULL);
			continue;
		}
		/* Its lease (beyond what it will share with the prefix cache) must fit, unless
		 * nothing runs (then it goes anyway: someone must). Else it and those after it go
		 * back to the head of the queue, in order. */
		uint64_t shared = s->pc ? prefix_match(s->pc, q->prompt, q->r.n_prompt, q->r.n_prompt - 1) : 0;
		if (!lease_room(s, lease_pages(s, lease_for(s, q, q->r.n_prompt), shared), !s->n_active) && s->n_active) {
			pthread_mutex_lock(&s->mu);
			for (size_t j = n_start; j-- > i;) {
				start_list[j]->qnext = s->q_head;
				s->q_head = start_list[j];
				if (!s->q_tail)
					s->q_tail = start_list[j];
				s->n_queued++;
			}
			s->st.kv_lease_waits++;
			s->st.queued = s->n_queued;
			pthread_mutex_unlock(&s->mu);
			break;
		}
		if (start(s, q, &err) < 0) {
			finish(s, q, CAPY_FINISH_ERROR, 0, err.msg);
			continue;
		}
		s->active[s->n_active++] = q;
	}
	if (closing) {
		/* Nothing new starts while closing: the queue ends now, the batch at the deadline. */
		pthread_mutex_lock(&s->mu);
		while ((q = s->q_head)) {
			s->q_head = q->qnext;
			s->n_queued--;
			pthread_mutex_unlock(&s->mu);
			finish(s, q, CAPY_FINISH_SHUTDOWN, 0, NULL);
			pthread_mutex_lock(&s->mu);
		}
		s->q_tail = NULL;
		pthread_mutex_unlock(&s->mu);
		if (shutdown_now)
			while (s->n_active) {
				q = s->active[--s->n_active];
				finish(s, q, CAPY_FINISH_SHUTDOWN, 0, NULL);
			}
		return s->n_active > 0;
	}
	if (s->failed) {
		pthread_mutex_lock(&s->mu);
		while ((q = s->q_head)) {
			s->q_head = q->qnext;
			s->n_queued--;
			pthread_mutex_unlock(&s->mu);
			finish(s, q, CAPY_FINISH_ERROR, 0, s->fail_msg);
			pthread_mutex_lock(&s->mu);
		}
		s->q_tail = NULL;
		pthread_mutex_unlock(&s->mu);
	}
	return true;
}

static void update_stats(struct capy_sched *s)
{
	struct prefix_stats ps = { 0 };
	struct capy_kvstore_stats ks = { 0 };
	struct capy_offload_stats os = { 0 };
	bool offloading = capy_engine_offload_stats(s->e, &os); /* this thread owns the engine */

	if (s->pc)
		prefix_stats(s->pc, &ps);
	if (s->o.kvstore)
		capy_kvstore_stats(s->o.kvstore, &ks);
	pthread_mutex_lock(&s->mu);
	s->st.offloading = offloading;
	s->st.offload = os;
	s->st.kv = ks;
	s->st.active = s->n_active;
	s->st.cache_bytes = ps.bytes;
	s->st.cache_entries = ps.entries;
	s->st.cache_snapshots = ps.snapshots;
	s->st.kv_pages = capy_engine_pages_used(s->e);
	s->st.kv_pages_held = capy_engine_pages_held(s->e);
	s->st.kv_leased_pages = leased_pages(s);
	pthread_mutex_unlock(&s->mu);
}

static void *engine_thread(void *arg)
{
	struct capy_sched *s = arg;

	while (admit(s)) {
		run_step(s);
		update_stats(s);
	}
	update_stats(s);
	return NULL;
}

/* --- the public side --------------------------------------------------------------------------- */

int capy_sched_new(struct capy_sched **out, struct capy_engine *e, const struct capy_sched_opts *opts,
		   struct capy_err *err)
{
	struct capy_sched *s = calloc(1, sizeof(*s));
	int rc;

	if (!s)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	s->e = e;
	if (opts)
		s->o = *opts;
	if (s->o.max_concurrency <= 0)
		s->o.max_concurrency = 8;
	if (!s->o.max_queue)
		s->o.max_queue = 256;
	if (!s->o.max_context)
		s->o.max_context = 32768;
	if (!s->o.prefill_chunk)
		s->o.prefill_chunk = 256;
	if (!s->o.snapshot_interval)
		s->o.snapshot_interval = 4096;
	if (!s->o.mask_threads)
		s->o.mask_threads = 2;
	if (!s->o.spec_ngram_min)
		s->o.spec_ngram_min = 2;
	if (!s->o.spec_sources)
		s->o.spec_sources = CAPY_SPEC_NGRAM;
	s->vocab = capy_engine_config(e)->vocab_size;
	s->step_tokens = capy_engine_step_tokens(e);
	if (s->o.spec_draft_tokens && !capy_engine_keeps_states(e)) {
		rc = capy_err_set(err, CAPY_EUNSUPPORTED, "the %s backend cannot verify drafts (speculative decoding)",
				  capy_engine_device(e));
		free(s);
		return rc;
	}
	if (s->o.spec_draft_tokens && (s->o.spec_sources & CAPY_SPEC_MTP) && !capy_engine_has_mtp(e)) {
		free(s);
		return capy_err_set(err, CAPY_EINVAL, "MTP drafts need an engine opened with its MTP head");
	}
	if (s->o.spec_draft_tokens && s->o.spec_draft_ids) {
		if (!s->o.spec_n_draft_ids) {
			free(s);
			return capy_err_set(err, CAPY_EINVAL, "an empty draft vocabulary");
		}
		for (uint64_t i = 0; i < s->o.spec_n_draft_ids; i++)
			if (s->o.spec_draft_ids[i] < 0 || (uint64_t)s->o.spec_draft_ids[i] >= s->vocab) {
				rc = capy_err_set(err, CAPY_EINVAL, "draft vocabulary id %" PRId32 " is outside [0, %" PRIu64 ")",
						  s->o.spec_draft_ids[i], s->vocab);
				free(s);
				return rc;
			}
		if (!(s->draft_ids = malloc(s->o.spec_n_draft_ids * sizeof(int32_t)))) {
			free(s);
			return capy_err_set(err, CAPY_ENOMEM, "out of memory");
		}
		memcpy(s->draft_ids, s->o.spec_draft_ids, s->o.spec_n_draft_ids * sizeof(int32_t));
	}
	s->o.spec_draft_ids = s->draft_ids; /* the caller's array may go */
	if (s->step_tokens < s->o.prefill_chunk + (uint64_t)s->o.max_concurrency * (s->o.spec_draft_tokens + 1)) {
		rc = capy_err_set(err, CAPY_EINVAL, "an engine step of %" PRIu64 " tokens cannot hold a prompt piece of %"
				  PRIu64 " and %d decoding requests of %" PRIu64 " tokens", s->step_tokens,
				  s->o.prefill_chunk, s->o.max_concurrency, s->o.spec_draft_tokens + 1);
		free(s->draft_ids);
		free(s);
		return rc;
	}
	s->active = calloc((size_t)s->o.max_concurrency, sizeof(*s->active));
	s->items = calloc((size_t)s->o.max_concurrency, sizeof(*s->items));
	s->item_req = calloc((size_t)s->o.max_concurrency, sizeof(*s->item_req));
	s->lp_work = malloc(2 * s->vocab * sizeof(float));
	s->mtp_hidden = malloc(capy_engine_config(e)->hidden_size * sizeof(float));
	if (!s->active || !s->items || !s->item_req || !s->lp_work || !s->mtp_hidden) {
		rc = capy_err_set(err, CAPY_ENOMEM, "out of memory");
		goto fail;
	}
	if (s->o.cache_bytes && (rc = prefix_new(&s->pc, e, s->o.cache_bytes, s->o.kvstore, err)) < 0)
		goto fail;
	s->st.tiers = s->pc && s->o.kvstore;
	if (s->o.mask_threads > 0 && (rc = capy_mask_pool_new(&s->masks, s->o.mask_threads, err)) < 0)
		goto fail;
	s->st.page_bytes = capy_engine_page_bytes(e);
	/* The slots and threads from the start, before any step (no engine thread yet). */
	s->st.offloading = capy_engine_offload_stats(e, &s->st.offload);
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	if ((rc = pthread_create(&s->thread, NULL, engine_thread, s))) {
		rc = capy_err_errno(err, rc, "cannot start the engine thread");
		pthread_mutex_destroy(&s->mu);
		pthread_cond_destroy(&s->cv);
		goto fail;
	}
	*out = s;
	return 0;
fail:
	capy_mask_pool_free(s->masks);
	prefix_free(s->pc);
	free(s->active);
	free(s->items);
	free(s->item_req);
	free(s->lp_work);
	free(s->draft_ids);
	free(s->mtp_hidden);
	free(s);
	return rc;
}

void capy_sched_stop(struct capy_sched *s, double drain_s)
{
	if (s->joined)
		return;
	pthread_mutex_lock(&s->mu);
	s->closing = true;
	s->deadline = now() + (drain_s > 0 ? drain_s : 0);
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	pthread_join(s->thread, NULL);
	s->joined = true;
}

void capy_sched_free(struct capy_sched *s, double drain_s)
{
	if (!s)
		return;
	capy_sched_stop(s, drain_s);
	capy_mask_pool_free(s->masks); /* the requests, and their jobs, are gone with the engine thread */
	prefix_free(s->pc);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	free(s->active);
	free(s->items);
	free(s->item_req);
	free(s->lp_work);
	free(s->draft_ids);
	free(s->mtp_hidden);
	free(s);
}

int capy_sched_submit(struct capy_sched *s, const struct capy_gen_request *r, uint64_t *id, struct capy_err *err)
{
	struct req *q;
	int rc = 0;

	if (!r->n_prompt)
		return capy_err_set(err, CAPY_EINVAL, "the prompt is empty");
	if (r->n_prompt >= s->o.max_context)
		return capy_err_set(err, CAPY_EINVAL, "the prompt of %zu tokens leaves no room in the context of %" PRIu64
				    " tokens", r->n_prompt, s->o.max_context);
	if (r->n_stop_ids > MAX_STOP_IDS)
		return capy_err_set(err, CAPY_EINVAL, "more than %d stop ids", MAX_STOP_IDS);
	if (r->top_logprobs > CAPY_GEN_MAX_TOP_LOGPROBS)
		return capy_err_set(err, CAPY_EINVAL, "top_logprobs above %d", CAPY_GEN_MAX_TOP_LOGPROBS);
	if (!r->cb)
		return capy_err_set(err, CAPY_EINVAL, "no callback");
	if (r->grammar && (!r->trie || capy_token_trie_ids(r->trie) != s->vocab))
		return capy_err_set(err, CAPY_EINVAL, "a grammar needs the token trie of the model's vocabulary of %"
				    PRIu64 " ids", s->vocab);
	for (size_t i = 0; i < r->n_prompt; i++)
		if (r->prompt[i] < 0 || (uint64_t)r->prompt[i] >= s->vocab)
			return capy_err_set(err, CAPY_EINVAL, "token id %" PRId32 " at position %zu is outside the vocabulary "
					    "[0, %" PRIu64 ")", r->prompt[i], i, s->vocab);
	if (!(q = calloc(1, sizeof(*q))) || !(q->prompt = malloc(r->n_prompt * sizeof(int32_t)))) {
		free(q);
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	}
	q->r = *r;
	q->sched = s;
	memcpy(q->prompt, r->prompt, r->n_prompt * sizeof(int32_t));
	q->r.prompt = q->prompt;
	if (r->n_stop_ids)
		memcpy(q->stop, r->stop_ids, r->n_stop_ids * sizeof(int32_t));
	q->r.stop_ids = q->stop;
	q->max_new = s->o.max_context - r->n_prompt;
	if (r->max_new_tokens && r->max_new_tokens < q->max_new)
		q->max_new = r->max_new_tokens;
	q->t_submit = now();
	pthread_mutex_lock(&s->mu);
	if (s->closing || s->failed)
		rc = capy_err_set(err, CAPY_EBUSY, s->failed ? "the engine has failed" : "the server is shutting down");
	else if (s->n_queued >= s->o.max_queue)
		rc = capy_err_set(err, CAPY_EBUSY, "the queue is full (%" PRIu64 " waiting)", s->n_queued);
	if (rc == 0) {
		q->id = ++s->next_id;
		*id = q->id;
		if (s->q_tail)
			s->q_tail->qnext = q;
		else
			s->q_head = q;
		s->q_tail = q;
		s->n_queued++;
		q->anext = s->all;
		if (s->all)
			s->all->aprev = q;
		s->all = q;
		pthread_cond_signal(&s->cv);
	}
	pthread_mutex_unlock(&s->mu);
	if (rc < 0) {
		q->r.grammar = NULL; /* refused: the grammar stays the caller's */
		free_req(q);
	}
	return rc;
}

void capy_sched_cancel(struct capy_sched *s, uint64_t id)
{
	pthread_mutex_lock(&s->mu);
	for (struct req *q = s->all; q; q = q->anext)
		if (q->id == id) {
			q->cancel = true;
			pthread_cond_signal(&s->cv);
			break;
		}
	pthread_mutex_unlock(&s->mu);
}

void capy_sched_stats(struct capy_sched *s, struct capy_sched_stats *out)
{
	pthread_mutex_lock(&s->mu);
	*out = s->st;
	pthread_mutex_unlock(&s->mu);
}

const struct capy_sched_opts *capy_sched_options(const struct capy_sched *s)
{
	return &s->o;
}
