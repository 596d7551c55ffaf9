/* mask.c - token masks (see mask.h): the vocabulary trie, the lazily built table of grammar
 * states and their byte transitions, the depth-first walk, and the cache of masks. */
#include "mask.h"
#include "grammar.h"
#include "../text/tokenizer.h"

#define MAX_TOKEN_BYTES 65535

enum { KIND_NONE, KIND_TEXT, KIND_STOP };

enum {
	NODE_STARTS_CHAR = 1 << 0, /* the node's byte begins a character (read from the root) */
	NODE_VALID = 1 << 1,       /* all of the subtree is well-formed UTF-8, whole or cut short */
	NODE_NON_ASCII = 1 << 2,   /* the subtree holds bytes >= 0x80 */
};

/* A trie node. Nodes are in depth-first order, node 0 the root (no byte), and one more at the
 * end whose first_tok is the number of tokens; so a node spells tok[first_tok .. the next
 * node's first_tok), and its subtree's tokens are tok[first_tok .. node[skip].first_tok). */
struct node {
	uint32_t skip;      /* the first node after the node's subtree */
	uint32_t first_tok;
	uint16_t depth;     /* bytes from the root */
	uint8_t byte;       /* the byte on the edge into the node */
	uint8_t flags;      /* NODE_* */
};

struct capy_token_trie {
	uint32_t n_ids, nnodes, max_depth;
	struct node *node;   /* [nnodes + 1] */
	uint64_t (*ascii)[2]; /* [nnodes] the ASCII bytes of the node's subtree, its own included */
	int32_t *tok;        /* token ids by node */
	uint32_t ntok;
	uint32_t *all_text;  /* [capy_mask_words(n_ids)] every token of the trie */
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

/* What well-formed UTF-8 allows after the bytes so far: continuation bytes still due and the
 * range of the next one (Unicode's table 3-7: no overlong forms, surrogates or code points past
 * U+10FFFF), as the grammar's own reader does. */
struct utf8_pos {
	uint8_t left, lo, hi;
};

/* The position after byte b, or false when b cannot come here. */
static bool utf8_next(struct utf8_pos *p, uint8_t b)
{
	if (p->left) {
		if (b < p->lo || b > p->hi)
			return false;
		*p = (struct utf8_pos){ (uint8_t)(p->left - 1), 0x80, 0xbf };
		return true;
	}
	if (b < 0x80)
		return true;
	if (b >= 0xc2 && b <= 0xdf)
		*p = (struct utf8_pos){ 1, 0x80, 0xbf };
	else if (b >= 0xe0 && b <= 0xef)
		*p = (struct utf8_pos){ 2, b == 0xe0 ? 0xa0 : 0x80, b == 0xed ? 0x9f : 0xbf };
	else if (b >= 0xf0 && b <= 0xf4)
		*p = (struct utf8_pos){ 3, b == 0xf0 ? 0x90 : 0x80, b == 0xf4 ? 0x8f : 0xbf };
	else
		return false;
	return true;
}

/* Per node: the ASCII bytes of its subtree, whether it holds others, whether it is all
 * well-formed UTF-8 (read from the root), and whether the node starts a character. */
static int summarize(struct capy_token_trie *t)
{
	struct utf8_pos *at = malloc(((size_t)t->max_depth + 2) * sizeof(*at));
	uint32_t *parent = malloc((size_t)t->nnodes * sizeof(*parent)), *open = malloc(((size_t)t->max_depth + 2) * sizeof(*open));

	if (!at || !parent || !open || !(t->ascii = calloc(t->nnodes, sizeof(*t->ascii)))) {
		free(at);
		free(parent);
		free(open);
		return CAPY_ENOMEM;
	}
	at[0] = (struct utf8_pos){ 0, 0, 0 };
	open[0] = 0;
	for (uint32_t i = 1; i < t->nnodes; i++) {
		struct node *n = &t->node[i];
		struct utf8_pos p = at[n->depth - 1];
		parent[i] = open[n->depth - 1];
		open[n->depth] = i;
		n->flags = (uint8_t)((p.left ? 0 : NODE_STARTS_CHAR) | (n->byte >= 0x80 ? NODE_NON_ASCII : 0) | NODE_VALID);
		if (!utf8_next(&p, n->byte))
			n->flags &= (uint8_t)~NODE_VALID;
		at[n->depth] = p;
	}
	/* children before parents: a subtree's summary goes up to the node above it */
	t->node[0].flags = NODE_VALID;
	for (uint32_t i = t->nnodes - 1; i > 0; i--) {
		struct node *n = &t->node[i], *up = &t->node[parent[i]];
		if (n->byte < 0x80)
			t->ascii[i][n->byte / 64] |= 1ull << (n->byte % 64);
		t->ascii[parent[i]][0] |= t->ascii[i][0];
		t->ascii[parent[i]][1] |= t->ascii[i][1];
		up->flags |= n->flags & NODE_NON_ASCII;
		if (!(n->flags & NODE_VALID))
			up->flags &= (uint8_t)~NODE_VALID;
	}
	free(at);
	free(parent);
	free(open);
	return 0;
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
	t->node = calloc(total + 1, sizeof(*t->node));
	t->tok = malloc(((size_t)n + 1) * sizeof(*t->tok));
	if (!t->node || !t->tok)
		return CAPY_ENOMEM;
	uint32_t node = 1;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t cp = i ? common_prefix(&s[i - 1], &s[i]) : 0;
		for (uint32_t d = cp; d < s[i].len; d++, node++) {
			t->node[node].byte = (uint8_t)s[i].bytes[d];
			t->node[node].depth = (uint16_t)(d + 1);
		}
		t->tok[i] = s[i].id;
		t->node[node].first_tok++; /* counts for now, of the node node - 1 */
		t->max_depth = CAPY_MAX(t->max_depth, s[i].len);
	}
	/* counts to starts: node i + 1 held node i's count */
	for (uint32_t i = 1; i <= t->nnodes; i++)
		t->node[i].first_tok += t->node[i - 1].first_tok;
	/* a node's subtree ends at the next node no deeper than it */
	uint32_t *open = malloc(((size_t)t->max_depth + 2) * sizeof(uint32_t)), nopen = 0;
	if (!open)
		return CAPY_ENOMEM;
	for (uint32_t i = 0; i < t->nnodes; i++) {
		while (nopen && t->node[open[nopen - 1]].depth >= t->node[i].depth)
			t->node[open[--nopen]].skip = i;
		open[nopen++] = i;
	}
	while (nopen)
		t->node[open[--nopen]].skip = t->nnodes;
	free(open);
	return summarize(t);
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
	t->ntok = n;
	t->all_text = calloc(capy_mask_words(n_ids), sizeof(uint32_t));
	if (!t->all_text || (rc = build_nodes(t, s, n)) < 0) {
		rc = capy_err_set(err, CAPY_ENOMEM, "out of memory for the trie of %" PRIu32 " tokens", n);
		goto fail;
	}
	for (uint32_t i = 0; i < n; i++)
		t->all_text[(uint32_t)s[i].id / 32] |= 1u << ((uint32_t)s[i].id % 32);
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
	free(t->node);
	free(t->ascii);
	free(t->all_text);
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
	int32_t cached;       /* its mask's slot in the cache, or -1 */
	bool accepting, finished;
	int8_t closed;        /* every character >= U+0080 leads back here: 1, 0, -1 not known */
	uint64_t loops[2];    /* ASCII bytes known to lead back here */
	uint64_t leaves[2];   /* ASCII bytes known to lead elsewhere (or nowhere) */
};

/* Subtrees with fewer tokens are walked rather than checked for a loop. */
#define MIN_LOOP_TOKENS 2

struct capy_mask {
	const struct capy_token_trie *t;
	const struct capy_grammar *g;
	struct capy_mask_opts o;
	size_t words;
	struct dstate *st;
	int32_t *next; /* [cap][256] the state after each byte: a state, UNKNOWN or DEAD */
	uint32_t nst, cap;
	uint32_t *index; /* open addressing over st by hash: state + 1, 0 empty */
	uint32_t nindex;
	struct capy_grammar_state *scratch;  /* where the next state is stepped into */
	int32_t *path;                       /* [max_depth + 1] the walk's states by depth */
	uint32_t *runs;                      /* allowed tokens as [from, to) pairs, in trie order */
	uint32_t nruns, runcap;
	struct capy_grammar_state **level;   /* [max_depth + 1] the same, for the walk without states */
	/* the cache of masks: slot i is masks[i * words ...], for state owner[i] */
	uint32_t *masks;
	int32_t *owner;
	uint32_t *count;
	uint32_t nslots, nused, hand;
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
	m->o.cached_masks = m->o.cached_masks ? m->o.cached_masks : 512;
	m->o.max_states = m->o.max_states ? m->o.max_states : 32768;
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
	for (uint32_t i = 0; i < m->nst; i++)
		capy_grammar_state_free(m->st[i].s);
	m->nst = 0;
	if (m->index)
		memset(m->index, 0, m->nindex * sizeof(*m->index));
	for (uint32_t i = 0; i < m->nslots; i++)
		m->owner[i] = -1;
	m->nused = m->hand = 0;
}

void capy_mask_free(struct capy_mask *m)
{
	if (!m)
		return;
	drop_states(m);
	free(m->st);
	free(m->next);
	free(m->index);
	capy_grammar_state_free(m->scratch);
	if (m->level)
		for (uint32_t i = 0; i <= m->t->max_depth; i++)
			capy_grammar_state_free(m->level[i]);
	free(m->level);
	free(m->path);
	free(m->runs);
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

/* Room for one more state and its transitions. */
static bool state_room(struct capy_mask *m)
{
	if (m->nst < m->cap)
		return true;
	uint32_t cap = m->cap ? 2 * m->cap : 256;
	struct dstate *st = realloc(m->st, cap * sizeof(*st));
	if (st)
		m->st = st;
	int32_t *next = st ? realloc(m->next, (size_t)cap * 256 * sizeof(*next)) : NULL;
	if (!next)
		return false;
	m->next = next;
	m->cap = cap;
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
	if (!state_room(m))
		return NOMEM;
	struct dstate *d = &m->st[m->nst];
	*d = (struct dstate){ .hash = hash, .cached = -1, .accepting = capy_grammar_accepting(m->scratch),
			      .finished = capy_grammar_finished(m->scratch), .closed = -1 };
	if (capy_grammar_state_clone(m->scratch, &d->s, NULL) < 0)
		return NOMEM;
	for (int b = 0; b < 256; b++)
		m->next[(size_t)m->nst * 256 + b] = UNKNOWN;
	m->index[h] = ++m->nst;
	return (int32_t)(m->nst - 1);
}

/* The state after byte b from state q, learnt and remembered: a state, DEAD, FULL, NOMEM. */
static int32_t transition(struct capy_mask *m, int32_t q, uint8_t b)
{
	int32_t to = m->next[(size_t)q * 256 + b];

	if (to != UNKNOWN)
		return to;
	int r = capy_grammar_step(m->scratch, m->st[q].s, b);
	to = r < 0 ? NOMEM : r ? intern(m) : DEAD;
	if (to >= 0 || to == DEAD)
		m->next[(size_t)q * 256 + b] = to;
	return to;
}

/* The tokens of nodes [from, to) are allowed: a run of tokens in trie order (the walk meets
 * them in that order, so runs only grow at the end). False when out of memory. */
static bool allow(struct capy_mask *m, uint32_t from, uint32_t to)
{
	uint32_t a = m->t->node[from].first_tok, b = m->t->node[to].first_tok;

	if (a == b)
		return true;
	if (m->nruns && m->runs[2 * m->nruns - 1] == a) {
		m->runs[2 * m->nruns - 1] = b;
		return true;
	}
	if (m->nruns == m->runcap) {
		uint32_t cap = m->runcap ? 2 * m->runcap : 1024, *r = realloc(m->runs, (size_t)cap * 2 * sizeof(*r));
		if (!r)
			return false;
		m->runs = r;
		m->runcap = cap;
	}
	m->runs[2 * m->nruns] = a;
	m->runs[2 * m->nruns + 1] = b;
	m->nruns++;
	return true;
}

static void set_range(const int32_t *tok, uint32_t from, uint32_t to, uint32_t *bits)
{
	for (uint32_t k = from; k < to; k++)
		bits[(uint32_t)tok[k] / 32] |= 1u << ((uint32_t)tok[k] % 32);
}

static void clear_range(const int32_t *tok, uint32_t from, uint32_t to, uint32_t *bits)
{
	for (uint32_t k = from; k < to; k++)
		bits[(uint32_t)tok[k] / 32] &= ~(1u << ((uint32_t)tok[k] % 32));
}

/* The runs as bits by id: setting the allowed tokens, or, when they are most of the
 * vocabulary (inside a string), copying every token and clearing the refused ones. */
static void runs_to_bits(const struct capy_mask *m, uint32_t *bits)
{
	const struct capy_token_trie *t = m->t;
	uint64_t allowed = 0;

	for (uint32_t r = 0; r < m->nruns; r++)
		allowed += m->runs[2 * r + 1] - m->runs[2 * r];
	if (2 * allowed <= t->ntok) {
		memset(bits, 0, m->words * sizeof(uint32_t));
		for (uint32_t r = 0; r < m->nruns; r++)
			set_range(t->tok, m->runs[2 * r], m->runs[2 * r + 1], bits);
		return;
	}
	memcpy(bits, t->all_text, m->words * sizeof(uint32_t));
	uint32_t at = 0;
	for (uint32_t r = 0; r < m->nruns; r++) {
		clear_range(t->tok, at, m->runs[2 * r], bits);
		at = m->runs[2 * r + 1];
	}
	clear_range(t->tok, at, t->ntok, bits);
}

/* Whether every character from U+0080 on leads from q back to q: the same state after each
 * of them (capy_grammar_state_uniform), and that state q. 1, 0, or FULL / NOMEM. */
static int closed(struct capy_mask *m, int32_t q)
{
	if (m->st[q].closed < 0) {
		if (!capy_grammar_state_uniform(m->st[q].s, 0x80, 0x10ffff)) {
			m->st[q].closed = 0;
		} else {
			int32_t lead = transition(m, q, 0xc2), to = lead >= 0 ? transition(m, lead, 0x80) : lead;
			if (to < DEAD)
				return to;
			m->st[q].closed = to == q;
		}
	}
	return m->st[q].closed;
}

/* Whether every byte of the subtree of node i keeps the walk in state q, so that all of its
 * tokens are allowed (each ASCII byte leads back to q, and each character from U+0080 on, when
 * the subtree is well-formed UTF-8 from a character's start). 1, 0, or FULL / NOMEM. */
static int loops_over(struct capy_mask *m, int32_t q, uint32_t i)
{
	const struct capy_token_trie *t = m->t;
	const struct node *n = &t->node[i];
	struct dstate *d = &m->st[q];

	if ((n->flags & (NODE_STARTS_CHAR | NODE_VALID)) != (NODE_STARTS_CHAR | NODE_VALID) ||
	    t->node[n->skip].first_tok - n->first_tok < MIN_LOOP_TOKENS)
		return 0;
	for (int w = 0; w < 2; w++) {
		uint64_t want = t->ascii[i][w];
		if (want & d->leaves[w])
			return 0;
		for (uint64_t unknown = want & ~d->loops[w]; unknown; unknown &= unknown - 1) {
			int b = w * 64 + __builtin_ctzll(unknown);
			int32_t to = transition(m, q, (uint8_t)b);
			if (to < DEAD)
				return to;
			d = &m->st[q]; /* transition may have moved the states */
			if (to != q) {
				d->leaves[w] |= 1ull << (b % 64);
				return 0;
			}
			d->loops[w] |= 1ull << (b % 64);
		}
	}
	return n->flags & NODE_NON_ASCII ? closed(m, q) : 1;
}

/* The walk over known states: a table lookup per node, the grammar stepped only on bytes
 * no walk has tried from that state yet; a subtree whose bytes all lead back to the same state
 * is allowed whole without walking it (inside a JSON string, most of the vocabulary). Not from
 * a state inside a character: the trie's notion of where characters start would be off by
 * the pending bytes. 0, FULL or NOMEM. */
static int walk_states(struct capy_mask *m, int32_t q0)
{
	const struct capy_token_trie *t = m->t;
	const bool aligned = !capy_grammar_state_pending(m->st[q0].s);
	int32_t *path = m->path;
	uint32_t i = 1;

	m->nruns = 0;
	path[0] = q0;
	while (i < t->nnodes) {
		const struct node *n = &t->node[i];
		const int32_t q = path[n->depth - 1];
		int32_t to = m->next[(size_t)q * 256 + n->byte];
		if (to == UNKNOWN && (to = transition(m, q, n->byte)) < DEAD)
			return to;
		m->stats.nodes++;
		if (to == DEAD) {
			i = n->skip;
			continue;
		}
		if (aligned && (to == q || n->byte >= 0x80)) {
			int r = loops_over(m, q, i);
			if (r < 0)
				return r;
			if (r) {
				m->stats.subtrees++;
				if (!allow(m, i, n->skip))
					return NOMEM;
				i = n->skip;
				continue;
			}
		}
		path[n->depth] = to;
		if (!allow(m, i, i + 1))
			return NOMEM;
		i++;
	}
	return 0;
}

/* The walk stepping the grammar at every node, one scratch state per depth: no states kept
 * (the reference, and the way on when the states fill up within one walk). */
static int walk_steps(struct capy_mask *m, const struct capy_grammar_state *s)
{
	const struct capy_token_trie *t = m->t;
	uint32_t i = 1;

	m->nruns = 0;
	for (uint32_t d = 0; d <= t->max_depth; d++)
		if (!m->level[d] && capy_grammar_state_new(m->g, &m->level[d], NULL) < 0)
			return NOMEM;
	if (capy_grammar_state_copy(m->level[0], s, NULL) < 0)
		return NOMEM;
	while (i < t->nnodes) {
		const struct node *n = &t->node[i];
		int r = capy_grammar_step(m->level[n->depth], m->level[n->depth - 1], n->byte);
		if (r < 0)
			return NOMEM;
		m->stats.nodes++;
		if (!r) {
			i = n->skip;
			continue;
		}
		if (!allow(m, i, i + 1))
			return NOMEM;
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

/* Room for one more cached mask: the slots grow to the cap, then the oldest goes (round
 * robin). The slot to use, or -1 when out of memory (the mask is then not kept: slower, not
 * wrong). */
static int64_t cache_slot(struct capy_mask *m)
{
	if (m->nused == m->nslots && m->nslots < m->o.cached_masks) {
		uint32_t n = CAPY_MIN(CAPY_MAX(2 * m->nslots, 16), m->o.cached_masks);
		uint32_t *masks = realloc(m->masks, (size_t)n * m->words * sizeof(uint32_t));
		if (masks)
			m->masks = masks;
		int32_t *owner = masks ? realloc(m->owner, n * sizeof(*owner)) : NULL;
		if (owner)
			m->owner = owner;
		uint32_t *count = owner ? realloc(m->count, n * sizeof(*count)) : NULL;
		if (!count)
			return -1;
		m->count = count;
		for (uint32_t i = m->nslots; i < n; i++)
			m->owner[i] = -1;
		m->nslots = n;
	}
	if (m->nused < m->nslots)
		return m->nused++;
	uint32_t slot = m->hand;
	m->hand = (m->hand + 1) % m->nslots;
	if (m->owner[slot] >= 0)
		m->st[m->owner[slot]].cached = -1;
	return slot;
}

/* Keep the mask of state q in the cache. */
static void cache_put(struct capy_mask *m, int32_t q, const uint32_t *bits, uint32_t n)
{
	int64_t slot = cache_slot(m);

	if (slot < 0)
		return;
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
		if (walk_steps(m, s) < 0)
			return nomem(err);
		runs_to_bits(m, bits);
		return finish(m, capy_grammar_accepting(s), capy_grammar_finished(s), bits, err);
	}
	if ((q = state_of(m, s)) < 0)
		return nomem(err);
	if (m->st[q].cached >= 0 && !(m->o.flags & CAPY_MASK_NO_CACHE)) {
		m->stats.hits++;
		memcpy(bits, m->masks + (size_t)m->st[q].cached * m->words, m->words * sizeof(uint32_t));
		return (int)m->count[m->st[q].cached];
	}
	rc = walk_states(m, q);
	if (rc == FULL) { /* this walk alone met too many states: start again without them */
		drop_states(m);
		m->stats.resets++;
		rc = walk_steps(m, s);
		if (rc == 0 && (q = state_of(m, s)) < 0)
			rc = NOMEM;
	}
	if (rc < 0)
		return nomem(err);
	runs_to_bits(m, bits);
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
