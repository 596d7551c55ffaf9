/* scripted-backend.c - a test backend for the engine that plays a script instead of
 * computing a model: given the conversation so far it picks a reply and forces it, token by
 * token, through the logits (one id far above the rest), then the end-of-turn id. Everything
 * above the engine — scheduler, prefix cache, detokenization, output parsing, the API
 * adapters, HTTP — runs for real on its output. Only test builds register it
 * (capy_backend_add); the shipped tools never do.
 *
 * The script (the engine's backend_arg) is JSON:
 *	{"rules": [{"when_last_user_contains": "<tool_response>", "reply": "Done."}, ...],
 *	 "default": "<tool_call>\n<function=Read>...</tool_call>",
 *	 "token_delay_ms": 0}
 * The first rule whose text occurs in the prompt's last user turn (the text after its last
 * "<|im_start|>user", or the whole prompt without one) gives the reply, else the default. A
 * reply that starts with "<think>\n" loses that opening when the prompt already ends with it;
 * one holding the forced start of a tool call that the prompt ends with (tool_choice required
 * or named) plays on from after it.
 * token_delay_ms slows every step down (tests of disconnects and load).
 *
 * Expert offload (tests of /metrics): with "offload_stats": {"experts": 480, "slots": 40,
 * "resident": 40, "hits": 10, "misses": 3, "streamed": 7, "loads": 40, "evictions": 2,
 * "cpu_threads": 4, "policy_switches": 1} (any field missing is 0) the engine says it offloads and gives those
 * counts, except that every step run adds one hit and one step, so that a test sees the
 * counts read after steps, not only at the start; without it the engine offloads nothing.
 *
 * Failure mode (tests of an engine-wide failure): a rule may carry "fail": "message" instead
 * of a reply; a step that would start playing that rule fails with the message, as a broken
 * device would, and the scheduler then stops the whole engine (/health 503, capy-serve exits
 * 2). Only this test backend can fail on request; the real backends fail only for real.
 *
 * Per sequence the backend keeps the reply it is playing and where it started; it notices a
 * new prompt when the history stops following that reply (as after a prefix-cache hit).
 */
#include "scripted-backend.h"
#include "engine/backend.h"
#include "model/assets.h"
#include "util/json.h"
#include "util/file.h"

#include <time.h>

struct rule {
	char *when, *reply, *fail;
};

struct script {
	struct capy_assets as;
	struct rule *rules;
	size_t n_rules;
	char *fallback;
	long delay_ms;
	int32_t end_id;
	bool offload;
	struct capy_offload_stats off; /* the script's counts, hits and steps grown by the steps */
};

struct play {
	int32_t *reply;  /* the reply's ids, then end_id */
	size_t n, cap;
	uint64_t base;   /* history length where the reply starts */
	bool planned;
};

static char *dup_string(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsString(v) ? strdup(v->valuestring) : NULL;
}

/* A non-negative count of the object, 0 when missing. */
static uint64_t count(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsNumber(v) && v->valuedouble > 0 ? (uint64_t)v->valuedouble : 0;
}

static void script_close(struct capy_engine *e)
{
	struct script *sc = e->be;

	if (!sc)
		return;
	for (size_t i = 0; i < sc->n_rules; i++) {
		free(sc->rules[i].when);
		free(sc->rules[i].reply);
		free(sc->rules[i].fail);
	}
	free(sc->rules);
	free(sc->fallback);
	capy_assets_release(&sc->as);
	free(sc);
	e->be = NULL;
}

static int script_open(struct capy_engine *e, struct capy_err *err)
{
	struct script *sc = calloc(1, sizeof(*sc));
	const char *path = e->opts.backend_arg;
	const cJSON *rules, *r, *d;
	cJSON *root = NULL;
	char *text = NULL;
	size_t len;
	int rc;

	if (!sc)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	e->be = sc;
	if (!path) {
		rc = capy_err_set(err, CAPY_EINVAL, "the script backend needs a script file");
		goto fail;
	}
	if ((rc = capy_assets_from_artifact(&sc->as, e->a, err)) < 0 ||
	    (rc = capy_read_file(path, 1u << 24, &text, &len, err)) < 0 ||
	    (rc = capy_json_parse(text, len, path, &root, err)) < 0)
		goto fail;
	if (!sc->as.tok || !sc->as.n_eos) {
		rc = capy_err_set(err, CAPY_EINVAL, "'%s': the script backend needs a tokenizer and an end id", e->a->path);
		goto fail;
	}
	sc->end_id = sc->as.eos[0];
	rules = cJSON_GetObjectItemCaseSensitive(root, "rules");
	sc->rules = calloc((size_t)cJSON_GetArraySize(rules) + 1, sizeof(*sc->rules));
	if (!sc->rules) {
		rc = capy_err_set(err, CAPY_ENOMEM, "out of memory");
		goto fail;
	}
	cJSON_ArrayForEach(r, rules) {
		struct rule *ru = &sc->rules[sc->n_rules++];
		ru->when = dup_string(r, "when_last_user_contains");
		ru->reply = dup_string(r, "reply");
		ru->fail = dup_string(r, "fail");
		if (!ru->when || (!ru->reply && !ru->fail)) {
			rc = capy_err_set(err, CAPY_EFORMAT,
					  "'%s': rules[%zu] needs when_last_user_contains and reply (or fail)", path,
					  sc->n_rules - 1);
			goto fail;
		}
	}
	sc->fallback = dup_string(root, "default");
	if (!sc->fallback)
		sc->fallback = strdup("");
	d = cJSON_GetObjectItemCaseSensitive(root, "token_delay_ms");
	sc->delay_ms = cJSON_IsNumber(d) ? (long)d->valuedouble : 0;
	d = cJSON_GetObjectItemCaseSensitive(root, "offload_stats");
	if (cJSON_IsObject(d)) {
		sc->offload = true;
		sc->off.experts = count(d, "experts");
		sc->off.slots = count(d, "slots");
		sc->off.resident = count(d, "resident");
		sc->off.hits = count(d, "hits");
		sc->off.misses = count(d, "misses");
		sc->off.streamed = count(d, "streamed");
		sc->off.loads = count(d, "loads");
		sc->off.evictions = count(d, "evictions");
		sc->off.cpu_threads = (int)count(d, "cpu_threads");
		sc->off.policy_switches = count(d, "policy_switches");
	}
	cJSON_Delete(root);
	free(text);
	return 0;
fail:
	cJSON_Delete(root);
	free(text);
	script_close(e);
	return rc;
}

static int script_threads(const struct capy_engine *e)
{
	(void)e;
	return 1;
}

static uint64_t script_zero(const struct capy_engine *e)
{
	(void)e;
	return 64;
}

static int script_pages_reserve(struct capy_engine *e, uint32_t n, struct capy_err *err)
{
	(void)e, (void)n, (void)err;
	return 0;
}

static void script_page_copy(struct capy_engine *e, uint32_t dst, uint32_t src)
{
	(void)e, (void)dst, (void)src;
}

static int script_state_new(struct capy_engine *e, void **out, struct capy_err *err)
{
	(void)e;
	if (!(*out = calloc(1, sizeof(struct play))))
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	return 0;
}

static void script_state_free(struct capy_engine *e, void *st)
{
	struct play *p = st;

	(void)e;
	if (p)
		free(p->reply);
	free(p);
}

static void script_state_copy(struct capy_engine *e, void *dst, const void *src)
{
	struct play *d = dst;
	const struct play *s = src;

	(void)e;
	if (d->cap < s->n) {
		int32_t *r = realloc(d->reply, s->n * sizeof(int32_t));
		if (!r) { /* a copy that cannot hold the reply plans anew */
			d->planned = false;
			return;
		}
		d->reply = r;
		d->cap = s->n;
	}
	if (s->n)
		memcpy(d->reply, s->reply, s->n * sizeof(int32_t));
	d->n = s->n;
	d->base = s->base;
	d->planned = s->planned;
}

/* The rule for a prompt text, or NULL for the default. */
static const struct rule *choose(const struct script *sc, const char *text)
{
	const char *user = NULL, *p = text, *end;
	size_t n;

	while ((p = strstr(p, "<|im_start|>user"))) {
		user = p;
		p++;
	}
	if (!user)
		user = text;
	end = strstr(user, "<|im_end|>");
	n = end ? (size_t)(end - user) : strlen(user);
	for (size_t i = 0; i < sc->n_rules; i++) {
		const char *hit = strstr(user, sc->rules[i].when);
		if (hit && (size_t)(hit - user) < n)
			return &sc->rules[i];
	}
	return NULL;
}

/* A forced tool-call start (capy-serve wrote "<tool_call>\n..." into the prompt's final
 * assistant turn, as tool_choice required / named do) is the reply's own too: the reply plays
 * on from after that text where it holds it (what comes before, reasoning say, was skipped
 * by the forcing), else whole. */
static const char *after_forced(const char *text, const char *reply)
{
	const char *turn = NULL, *p = text, *call, *hit;

	while ((p = strstr(p, "<|im_start|>assistant"))) {
		turn = p;
		p++;
	}
	if (!turn || !(call = strstr(turn, "<tool_call>")) || !(hit = strstr(reply, call)))
		return reply;
	return hit + strlen(call);
}

static int plan(struct script *sc, struct play *pl, const int32_t *hist, uint64_t L, struct capy_err *err)
{
	struct capy_tokens ids = { 0 };
	char *text;
	size_t len;
	const struct rule *ru;
	const char *reply;
	int rc;

	if ((rc = capy_tokenizer_decode(sc->as.tok, hist, L, 0, &text, &len, err)) < 0)
		return rc;
	ru = choose(sc, text);
	if (ru && ru->fail) {
		free(text);
		return capy_err_set(err, CAPY_EIO, "%s", ru->fail);
	}
	reply = ru ? ru->reply : sc->fallback;
	if (len >= 8 && !memcmp(text + len - 8, "<think>\n", 8) && !strncmp(reply, "<think>\n", 8))
		reply += 8;
	reply = after_forced(text, reply);
	free(text);
	if ((rc = capy_tokenizer_encode(sc->as.tok, reply, strlen(reply), CAPY_TOK_PARSE_ADDED, &ids, err)) < 0)
		return rc;
	free(pl->reply);
	pl->reply = realloc(ids.ids, (ids.n + 1) * sizeof(int32_t));
	if (!pl->reply) {
		capy_tokens_release(&ids);
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	}
	pl->reply[ids.n] = sc->end_id;
	pl->n = pl->cap = ids.n + 1;
	pl->base = L;
	pl->planned = true;
	return 0;
}

/* Does the history [base, L) follow the reply being played? */
static bool follows(const struct play *pl, const int32_t *hist, uint64_t L)
{
	if (!pl->planned || L < pl->base || L - pl->base >= pl->n)
		return false;
	return !memcmp(hist + pl->base, pl->reply, (L - pl->base) * sizeof(int32_t));
}

static int script_step(struct capy_engine *e, const struct capy_batch *b, struct capy_err *err)
{
	struct script *sc = e->be;
	uint64_t V = e->c.vocab_size;
	int rc;

	if (sc->delay_ms > 0) {
		struct timespec ts = { sc->delay_ms / 1000, (sc->delay_ms % 1000) * 1000000L };
		nanosleep(&ts, NULL);
	}
	sc->off.steps++;
	sc->off.hits++;
	for (size_t i = 0; i < b->n_items; i++) {
		const struct capy_batch_item *it = &b->items[i];
		struct capy_seq *s = it->seq;
		struct play *pl = s->state;
		uint64_t L = s->len + it->n;
		int32_t *hist;
		if (!it->logits)
			continue;
		if (it->all_logits)
			return capy_err_set(err, CAPY_EUNSUPPORTED, "the script backend gives last-token logits only");
		if (!(hist = malloc(L * sizeof(int32_t))))
			return capy_err_set(err, CAPY_ENOMEM, "out of memory");
		memcpy(hist, s->tokens, s->len * sizeof(int32_t));
		memcpy(hist + s->len, it->tokens, it->n * sizeof(int32_t));
		rc = follows(pl, hist, L) ? 0 : plan(sc, pl, hist, L, err);
		free(hist);
		if (rc < 0)
			return rc;
		for (uint64_t v = 0; v < V; v++)
			it->logits[v] = 0;
		it->logits[pl->reply[L - pl->base]] = 40.0f;
	}
	return 0;
}

static uint64_t script_state_bytes(const struct capy_engine *e)
{
	(void)e;
	return sizeof(struct play);
}

static bool script_offload_stats(const struct capy_engine *e, struct capy_offload_stats *st)
{
	const struct script *sc = e->be;

	if (!sc->offload)
		return false;
	*st = sc->off;
	return true;
}

static const struct capy_backend_ops scripted = {
	.name = "script",
	.open = script_open,
	.close = script_close,
	.threads = script_threads,
	.weight_bytes = script_zero,
	.page_bytes = script_zero,
	.pages_reserve = script_pages_reserve,
	.page_copy = script_page_copy,
	.state_bytes = script_state_bytes,
	.state_new = script_state_new,
	.state_copy = script_state_copy,
	.state_free = script_state_free,
	.offload_stats = script_offload_stats,
	.step = script_step,
};

int capy_scripted_backend_register(void)
{
	return capy_backend_add(&scripted);
}
