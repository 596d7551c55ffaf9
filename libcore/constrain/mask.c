/* mask.c - token masks (see mask.h): the vocabulary trie, the lazily built table of grammar
 * states and their byte transitions, the depth-first walk, and the cache of masks. */
#include "mask.h"
#include "grammar.h"
#include "../text/tokenizer.h"

#define MAX_TOKEN_BYTES 65535

enum { KIND_NONE, KIND_TEXT, KIND_STOP };

struct capy_token_trie {
	uint32_t n_ids, nnodes, max_depth;
	/* nodes in depth-first order; node 0 is the root (no byte) */
	uint8_t *byte;       /* [nnodes] the byte on the edge into the node */
	uint16_t *depth;     /* [nnodes] bytes from the root */
	uint32_t *skip;      /* [nnodes] the first node after the node's subtree */
	uint32_t *first_tok; /* [nnodes + 1] the node spells tok[first_tok[i] .. first_tok[i + 1]) */
	int32_t *tok;        /* token ids by node */
	/* per id: what it is, and its bytes text[text_off[id] .. text_off[id + 1]) */
	uint8_t *kind;       /* [n_ids] KIND_* */
	uint32_t *text_off;  /* [n_ids + 1] */
	char *text;
	int32_t *stop;
	uint32_t nstop;
};

/* --- the trie ------------------------------------------------------------------------------- */

struct sorted_tok {
	const char *bytes;
	uint32_t len;
	int32_t id;
};

static int cmp_tok(const void *a, const void *b)
{
	const struct sorted_tok *x = a, *y = b;
	uint32_t n = CAPY_MIN(x->len, y->len);
	int c = n ? memcmp(x->bytes, y->bytes, n) : 0;

	if (c)
		return c;
	if (x->len != y->len)
		return x->len < y->len ? -1 : 1; /* a prefix first: its node exists before its extensions */
	return x->id < y->id ? -1 : x->id > y->id;
}

static uint32_t common_prefix(const struct sorted_tok *a, const struct sorted_tok *b)
{
	uint32_t n = CAPY_MIN(a->len, b->len), i = 0;

	while (i < n && a->bytes[i] == b->bytes[i])
		i++;
	return i;
}

/* Nodes from the sorted tokens: each token adds the nodes past its common prefix with the one
 * before, so nodes come out in depth-first order, and each token belongs to the last node made
 * (its own last byte, or the previous token's when both spell the same bytes). */
static int build_nodes(struct capy_token_trie *t, const struct sorted_tok *s, uint32_t n)
{
	uint64_t total = 1;

	for (uint32_t i = 0; i < n; i++)
		total += s[i].len - (i ? common_prefix(&s[i - 1], &s[i]) : 0);
	if (total > UINT32_MAX - 1)
		return CAPY_EINVAL;
	t->nnodes = (uint32_t)total;
	t->byte = calloc(total, 1);
	t->depth = calloc(total, sizeof(*t->depth));
	t->skip = calloc(total, sizeof(*t->skip));
	t->first_tok = calloc(total + 1, sizeof(*t->first_tok));
	t->tok = malloc(((size_t)n + 1) * sizeof(*t->tok));
	if (!t->byte || !t->depth || !t->skip || !t->first_tok || !t->tok)
		return CAPY_ENOMEM;
	uint32_t node = 1;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t cp = i ? common_prefix(&s[i - 1], &s[i]) : 0;
		for (uint32_t d = cp; d < s[i].len; d++, node++) {
			t->byte[node] = (uint8_t)s[i].bytes[d];
			t->depth[node] = (uint16_t)(d + 1);
		}
		t->tok[i] = s[i].id;
		t->first_tok[node]++; /* counts for now, of the node node - 1 */
		t->max_depth = CAPY_MAX(t->max_depth, s[i].len);
	}
	/* counts to starts: first_tok[i + 1] held node i's count */
	for (uint32_t i = 1; i <= t->nnodes; i++)
		t->first_tok[i] += t->first_tok[i - 1];
	/* a node's subtree ends at the next node no deeper than it */
	uint32_t *open = malloc(((size_t)t->max_depth + 2) * sizeof(uint32_t)), nopen = 0;
	if (!open)
		return CAPY_ENOMEM;
	for (uint32_t i = 0; i < t->nnodes; i++) {
		while (nopen && t->depth[open[nopen - 1]] >= t->depth[i])
			t->skip[open[--nopen]] = i;
		open[nopen++] = i;
	}
	while (nopen)
		t->skip[open[--nopen]] = t->nnodes;
	free(open);
	return 0;
}

static int add_stops(struct capy_token_trie *t, const int32_t *stop, size_t n_stop, struct capy_err *err)
{
	if (n_stop && !(t->stop = malloc(n_stop * sizeof(*stop))))
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	for (size_t i = 0; i < n_stop; i++) {
		if (stop[i] < 0 || (uint32_t)stop[i] >= t->n_ids)
			return capy_err_set(err, CAPY_EINVAL, "stop token %" PRId32 " is outside the vocabulary of %" PRIu32,
					    stop[i], t->n_ids);
		t->kind[stop[i]] = KIND_STOP;
		t->stop[t->nstop++] = stop[i];
	}
	return 0;
}

/* The texts copied, one pool; kind says which ids are text. */
static int copy_texts(struct capy_token_trie *t, const struct capy_token_text *text, struct capy_err *err)
{
	uint64_t total = 0;

	for (uint32_t i = 0; i < t->n_ids; i++) {
		if (!text[i].bytes || !text[i].len || t->kind[i] == KIND_STOP)
			continue;
		if (text[i].len > MAX_TOKEN_BYTES)
			return capy_err_set(err, CAPY_EINVAL, "token %" PRIu32 " is %zu bytes long (at most %d)", i,
					    text[i].len, MAX_TOKEN_BYTES);
		t->kind[i] = KIND_TEXT;
		total += text[i].len;
	}
	if (total > UINT32_MAX || !(t->text = malloc(total + 1)))
		return capy_err_set(err, CAPY_ENOMEM, "out of memory for %" PRIu64 " bytes of tokens", total);
	total = 0;
	for (uint32_t i = 0; i < t->n_ids; i++) {
		t->text_off[i] = (uint32_t)total;
		if (t->kind[i] == KIND_TEXT) {
			memcpy(t->text + total, text[i].bytes, text[i].len);
			total += text[i].len;
		}
	}
	t->text_off[t->n_ids] = (uint32_t)total;
	return 0;
}

int capy_token_trie_new(struct capy_token_trie **out, const struct capy_token_text *text, uint32_t n_ids,
			const int32_t *stop, size_t n_stop, struct capy_err *err)
{
	struct capy_token_trie *t = calloc(1, sizeof(*t));
	struct sorted_tok *s = NULL;
	uint32_t n = 0;
	int rc;

	*out = NULL;
	if (!t)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	t->n_ids = n_ids;
	t->kind = calloc((size_t)n_ids + 1, 1);
	t->text_off = calloc((size_t)n_ids + 1, sizeof(*t->text_off));
	if (!t->kind || !t->text_off) {
		rc = capy_err_set(err, CAPY_ENOMEM, "out of memory");
		goto fail;
	}
	if ((rc = add_stops(t, stop, n_stop, err)) < 0 || (rc = copy_texts(t, text, err)) < 0)
		goto fail;
	if (!(s = malloc(((size_t)n_ids + 1) * sizeof(*s)))) {
		rc = capy_err_set(err, CAPY_ENOMEM, "out of memory");
		goto fail;
	}
	for (uint32_t i = 0; i < n_ids; i++)
		if (t->kind[i] == KIND_TEXT)
			s[n++] = (struct sorted_tok){ t->text + t->text_off[i], t->text_off[i + 1] - t->text_off[i], (int32_t)i };
	qsort(s, n, sizeof(*s), cmp_tok);
	if ((rc = build_nodes(t, s, n)) < 0) {
		capy_err_set(err, rc, "out of memory for the trie of %" PRIu32 " tokens", n);
		goto fail;
	}
	free(s);
	*out = t;
	return 0;
fail:
	free(s);
	capy_token_trie_free(t);
	return rc;
}

static bool listed(const int32_t *ids, size_t n, int32_t id)
{
	for (size_t i = 0; i < n; i++)
		if (ids[i] == id)
			return true;
	return false;
}

int capy_token_trie_from_tokenizer(struct capy_token_trie **out, const struct capy_tokenizer *tok, uint32_t n_ids,
				   const int32_t *stop, size_t n_stop, const int32_t *text_ids, size_t n_text,
				   struct capy_err *err)
{
	struct capy_token_text *text = calloc((size_t)n_ids + 1, sizeof(*text));
	int32_t limit = capy_tokenizer_id_limit(tok);
	int rc;

	*out = NULL;
	if (!text)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	for (int32_t id = 0; id < limit && (uint32_t)id < n_ids; id++) {
		if (capy_tokenizer_is_added(tok, id) && !listed(text_ids, n_text, id))
			continue;
		text[id].bytes = capy_tokenizer_piece_bytes(tok, id, &text[id].len);
	}
	rc = capy_token_trie_new(out, text, n_ids, stop, n_stop, err);
	free(text);
	return rc;
}

void capy_token_trie_free(struct capy_token_trie *t)
{
	if (!t)
		return;
	free(t->byte);
	free(t->depth);
	free(t->skip);
	free(t->first_tok);
	free(t->tok);
	free(t->kind);
	free(t->text_off);
	free(t->text);
	free(t->stop);
	free(t);
}

uint32_t capy_token_trie_ids(const struct capy_token_trie *t)
{
	return t->n_ids;
}

/* --- the masker ----------------------------------------------------------------------------- */

enum { UNKNOWN = -1, DEAD = -2, FULL = -3, NOMEM = -4 }; /* transitions, and why there is none */

/* A grammar state met by some walk, with what is known of it. */
struct dstate {
	struct capy_grammar_state *s;
	uint64_t hash;
	int32_t *next;  /* [256] the state after each byte: a state, UNKNOWN or DEAD */
	int32_t cached; /* its mask's slot in the cache, or -1 */
	bool accepting, finished;
};

struct capy_mask {
	const struct capy_token_trie *t;
	const struct capy_grammar *g;
	struct capy_mask_opts o;
	size_t words;
	struct dstate *st;
	uint32_t nst, cap;
	uint32_t *index; /* open addressing over st by hash: state + 1, 0 empty */
	uint32_t nindex;
	struct capy_grammar_state *scratch;  /* where the next state is stepped into */
	int32_t *path;                       /* [max_depth + 1] the walk's states by depth */
	struct capy_grammar_state **level;   /* [max_depth + 1] the same, for the walk without states */
	/* the cache of masks: slot i is masks[i * words ...], for state owner[i] */
	uint32_t *masks;
	int32_t *owner;
	uint32_t *count;
	uint32_t nslots, hand;
	struct capy_mask_stats stats;
};

int capy_mask_new(struct capy_mask **out, const struct capy_token_trie *t, const struct capy_grammar *g,
		  const struct capy_mask_opts *o, struct capy_err *err)
{
	struct capy_mask *m = calloc(1, sizeof(*m));

	*out = NULL;
	if (!m)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	m->t = t;
	m->g = g;
	m->o = o ? *o : (struct capy_mask_opts){ 0 };
	m->o.cached_masks = m->o.cached_masks ? m->o.cached_masks : 128;
	m->o.max_states = m->o.max_states ? m->o.max_states : 16384;
	m->words = capy_mask_words(t->n_ids);
	m->path = malloc(((size_t)t->max_depth + 1) * sizeof(*m->path));
	m->level = calloc((size_t)t->max_depth + 1, sizeof(*m->level));
	if (!m->path || !m->level || capy_grammar_state_new(g, &m->scratch, err) < 0) {
		capy_mask_free(m);
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	}
	*out = m;
	return 0;
}

/* Forget every state, and so every cached mask (their keys). */
static void drop_states(struct capy_mask *m)
{
	for (uint32_t i = 0; i < m->nst; i++) {
		capy_grammar_state_free(m->st[i].s);
		free(m->st[i].next);
	}
	m->nst = 0;
	if (m->index)
		memset(m->index, 0, m->nindex * sizeof(*m->index));
	for (uint32_t i = 0; i < m->nslots; i++)
		m->owner[i] = -1;
}

void capy_mask_free(struct capy_mask *m)
{
	if (!m)
		return;
	drop_states(m);
	free(m->st);
	free(m->index);
	capy_grammar_state_free(m->scratch);
	if (m->level)
		for (uint32_t i = 0; i <= m->t->max_depth; i++)
			capy_grammar_state_free(m->level[i]);
	free(m->level);
	free(m->path);
	free(m->masks);
	free(m->owner);
	free(m->count);
	free(m);
}

/* Room in the index for one more state (kept at most half full). */
static bool index_room(struct capy_mask *m)
{
	if (2 * (m->nst + 1) <= m->nindex)
		return true;
	uint32_t n = m->nindex ? 2 * m->nindex : 1024, *ix = calloc(n, sizeof(*ix));
	if (!ix)
		return false;
	for (uint32_t i = 0; i < m->nst; i++) {
		uint32_t h = (uint32_t)m->st[i].hash & (n - 1);
		while (ix[h])
			h = (h + 1) & (n - 1);
		ix[h] = i + 1;
	}
	free(m->index);
	m->index = ix;
	m->nindex = n;
	return true;
}

/* The state equal to m->scratch, kept (as a compact clone) if it is new: its number, FULL
 * when max_states are kept already, NOMEM. */
static int32_t intern(struct capy_mask *m)
{
	uint64_t hash = capy_grammar_state_hash(m->scratch);

	if (!index_room(m))
		return NOMEM;
	uint32_t h = (uint32_t)hash & (m->nindex - 1);
	for (; m->index[h]; h = (h + 1) & (m->nindex - 1)) {
		const struct dstate *d = &m->st[m->index[h] - 1];
		if (d->hash == hash && capy_grammar_state_equal(d->s, m->scratch))
			return (int32_t)(m->index[h] - 1);
	}
	if (m->nst >= m->o.max_states)
		return FULL;
	if (m->nst == m->cap) {
		uint32_t cap = m->cap ? 2 * m->cap : 256;
		struct dstate *st = realloc(m->st, cap * sizeof(*st));
		if (!st)
			return NOMEM;
		m->st = st;
		m->cap = cap;
	}
	struct dstate *d = &m->st[m->nst];
	*d = (struct dstate){ NULL, hash, malloc(256 * sizeof(int32_t)), -1, capy_grammar_accepting(m->scratch),
			      capy_grammar_finished(m->scratch) };
	if (!d->next || capy_grammar_state_clone(m->scratch, &d->s, NULL) < 0) {
		free(d->next);
		return NOMEM;
	}
	for (int b = 0; b < 256; b++)
		d->next[b] = UNKNOWN;
	m->index[h] = ++m->nst;
	return (int32_t)(m->nst - 1);
}

/* The state after byte b from state q, learnt and remembered: a state, DEAD, FULL, NOMEM. */
static int32_t transition(struct capy_mask *m, int32_t q, uint8_t b)
{
	int r = capy_grammar_step(m->scratch, m->st[q].s, b);
	int32_t to = r < 0 ? NOMEM : r ? intern(m) : DEAD;

	if (to >= 0 || to == DEAD)
		m->st[q].next[b] = to;
	return to;
}

static void set_tokens(const struct capy_token_trie *t, uint32_t node, uint32_t *bits)
{
	for (uint32_t k = t->first_tok[node]; k < t->first_tok[node + 1]; k++)
		bits[(uint32_t)t->tok[k] / 32] |= 1u << ((uint32_t)t->tok[k] % 32);
}

/* The walk over known states: a table lookup per node, the grammar stepped only on bytes
 * no walk has tried from that state yet. 0, FULL or NOMEM. */
static int walk_states(struct capy_mask *m, int32_t q0, uint32_t *bits)
{
	const struct capy_token_trie *t = m->t;
	int32_t *path = m->path;
	uint32_t i = 1;

	path[0] = q0;
	while (i < t->nnodes) {
		const uint32_t d = t->depth[i];
		const int32_t q = path[d - 1];
		int32_t to = m->st[q].next[t->byte[i]];
		if (to == UNKNOWN && (to = transition(m, q, t->byte[i])) < DEAD)
			return to;
		m->stats.nodes++;
		if (to == DEAD) {
			i = t->skip[i];
			continue;
		}
		path[d] = to;
		set_tokens(t, i, bits);
		i++;
	}
	return 0;
}

/* The walk stepping the grammar at every node, one scratch state per depth: no states kept
 * (the reference, and the way on when the states fill up within one walk). */
static int walk_steps(struct capy_mask *m, const struct capy_grammar_state *s, uint32_t *bits)
{
	const struct capy_token_trie *t = m->t;
	uint32_t i = 1;

	for (uint32_t d = 0; d <= t->max_depth; d++)
		if (!m->level[d] && capy_grammar_state_new(m->g, &m->level[d], NULL) < 0)
			return NOMEM;
	if (capy_grammar_state_copy(m->level[0], s, NULL) < 0)
		return NOMEM;
	while (i < t->nnodes) {
		const uint32_t d = t->depth[i];
		int r = capy_grammar_step(m->level[d], m->level[d - 1], t->byte[i]);
		if (r < 0)
			return NOMEM;
		m->stats.nodes++;
		if (!r) {
			i = t->skip[i];
			continue;
		}
		set_tokens(t, i, bits);
		i++;
	}
	return 0;
}

/* The number of s as a kept state (kept now if new; the states are dropped and started
 * again when full): >= 0, or NOMEM. */
static int32_t state_of(struct capy_mask *m, const struct capy_grammar_state *s)
{
	if (capy_grammar_state_copy(m->scratch, s, NULL) < 0)
		return NOMEM;
	int32_t q = intern(m);
	if (q == FULL) {
		drop_states(m);
		m->stats.resets++;
		q = intern(m);
	}
	return q;
}

static uint32_t count_bits(const uint32_t *bits, size_t words)
{
	uint32_t n = 0;

	for (size_t i = 0; i < words; i++)
		n += (uint32_t)__builtin_popcount(bits[i]);
	return n;
}

/* Keep the mask of state q in the cache, in the next slot round (the oldest goes). */
static void cache_put(struct capy_mask *m, int32_t q, const uint32_t *bits, uint32_t n)
{
	if (!m->masks) {
		m->masks = malloc((size_t)m->o.cached_masks * m->words * sizeof(uint32_t));
		m->owner = malloc(m->o.cached_masks * sizeof(*m->owner));
		m->count = malloc(m->o.cached_masks * sizeof(*m->count));
		if (!m->masks || !m->owner || !m->count) {
			free(m->masks);
			free(m->owner);
			free(m->count);
			m->masks = NULL;
			m->owner = NULL;
			m->count = NULL;
			return; /* no cache: slower, not wrong */
		}
		m->nslots = m->o.cached_masks;
		for (uint32_t i = 0; i < m->nslots; i++)
			m->owner[i] = -1;
	}
	uint32_t slot = m->hand;
	m->hand = (m->hand + 1) % m->nslots;
	if (m->owner[slot] >= 0 && (uint32_t)m->owner[slot] < m->nst)
		m->st[m->owner[slot]].cached = -1;
	memcpy(m->masks + (size_t)slot * m->words, bits, m->words * sizeof(uint32_t));
	m->owner[slot] = q;
	m->count[slot] = n;
	m->st[q].cached = (int32_t)slot;
}

static int finish(struct capy_mask *m, bool accepting, bool finished, uint32_t *bits, struct capy_err *err)
{
	if (accepting)
		for (uint32_t i = 0; i < m->t->nstop; i++)
			bits[(uint32_t)m->t->stop[i] / 32] |= 1u << ((uint32_t)m->t->stop[i] % 32);
	uint32_t n = count_bits(bits, m->words);
	if (!n && !finished)
		return capy_err_set(err, CAPY_EFORMAT, "grammar: a dead end: no token of the vocabulary can go on from here, "
				    "and the grammar is not finished");
	return (int)n;
}

static int nomem(struct capy_err *err)
{
	return capy_err_set(err, CAPY_ENOMEM, "out of memory computing a token mask");
}

int capy_mask_compute(struct capy_mask *m, const struct capy_grammar_state *s, uint32_t *bits,
		      struct capy_err *err)
{
	int32_t q;
	int rc;

	m->stats.masks++;
	if (m->o.flags & CAPY_MASK_NO_DFA) {
		memset(bits, 0, m->words * sizeof(uint32_t));
		if (walk_steps(m, s, bits) < 0)
			return nomem(err);
		return finish(m, capy_grammar_accepting(s), capy_grammar_finished(s), bits, err);
	}
	if ((q = state_of(m, s)) < 0)
		return nomem(err);
	if (m->st[q].cached >= 0 && !(m->o.flags & CAPY_MASK_NO_CACHE)) {
		m->stats.hits++;
		memcpy(bits, m->masks + (size_t)m->st[q].cached * m->words, m->words * sizeof(uint32_t));
		return (int)m->count[m->st[q].cached];
	}
	memset(bits, 0, m->words * sizeof(uint32_t));
	rc = walk_states(m, q, bits);
	if (rc == FULL) { /* this walk alone met too many states: start again without them */
		drop_states(m);
		m->stats.resets++;
		memset(bits, 0, m->words * sizeof(uint32_t));
		rc = walk_steps(m, s, bits);
		if (rc == 0 && (q = state_of(m, s)) < 0)
			rc = NOMEM;
	}
	if (rc < 0)
		return nomem(err);
	rc = finish(m, m->st[q].accepting, m->st[q].finished, bits, err);
	if (rc >= 0 && !(m->o.flags & CAPY_MASK_NO_CACHE))
		cache_put(m, q, bits, (uint32_t)rc);
	return rc;
}

int capy_mask_advance(const struct capy_token_trie *t, struct capy_grammar_state *s, int32_t id,
		      struct capy_err *err)
{
	if (id < 0 || (uint32_t)id >= t->n_ids || t->kind[id] == KIND_NONE)
		return capy_err_set(err, CAPY_EINVAL, "grammar: token %" PRId32 " is not text the grammar can read", id);
	if (t->kind[id] == KIND_STOP) {
		if (!capy_grammar_accepting(s))
			return capy_err_set(err, CAPY_EINVAL, "grammar: stop token %" PRId32 " before the grammar is complete",
					    id);
		return 0;
	}
	size_t n = t->text_off[id + 1] - t->text_off[id];
	size_t took = capy_grammar_feed(s, t->text + t->text_off[id], n);
	if (took != n)
		return capy_err_set(err, CAPY_EINVAL, "grammar: token %" PRId32 " refused at its byte %zu", id, took);
	return 1;
}

void capy_mask_stats(const struct capy_mask *m, struct capy_mask_stats *out)
{
	*out = m->stats;
	out->states = m->nst;
}
