/* ngram.c - n-gram drafts from a suffix automaton over the token history (see spec.h).
 *
 * The automaton of the history S has one state per set of end positions; a state's strings
 * are suffixes of each other, the longest of len tokens, and its suffix link leads to the
 * state of the longest shorter suffix that ends at more positions. So the state of the whole
 * S (last) links to the state of the longest suffix of S that also ended earlier, and that
 * state's first end position says where its continuation starts. Built online (Blumer et
 * al.): at most 2n states and 3n transitions, O(1) amortised per token. Transitions live in
 * one open-addressing table keyed by (state, token), and in a list per state for the copy a
 * clone takes; room for a whole capy_ngram_add is taken first, so it cannot fail halfway.
 */
#include "spec.h"

#define NONE UINT32_MAX

struct sa_state {
	uint32_t len;      /* the longest string's length */
	uint32_t link;     /* suffix link (NONE: the root's) */
	uint32_t first;    /* the end position (token index) of the first occurrence */
	uint32_t edges;    /* the first of its transitions (NONE: none) */
};

struct sa_edge {
	uint32_t from, to, next; /* next: the next transition of from */
	int32_t token;
};

struct capy_ngram {
	uint64_t min_match;
	int32_t *hist;
	uint64_t n, hist_cap;
	struct sa_state *st;
	uint64_t n_st, st_cap;
	struct sa_edge *ed;
	uint64_t n_ed, ed_cap;
	uint32_t *table;   /* edge indexes, NONE empty; a power of two of slots, under half full */
	uint64_t slots;
	uint32_t last;     /* the state of the whole history */
};

static uint64_t mix(uint32_t state, int32_t token)
{
	uint64_t x = ((uint64_t)state << 32 | (uint32_t)token) + 0x9e3779b97f4a7c15ull;

	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* The slot of (state, token): its edge, or the empty slot where it would go. */
static uint64_t find_slot(const struct capy_ngram *g, uint32_t state, int32_t token)
{
	uint64_t i = mix(state, token) & (g->slots - 1);

	while (g->table[i] != NONE) {
		const struct sa_edge *e = &g->ed[g->table[i]];
		if (e->from == state && e->token == token)
			break;
		i = (i + 1) & (g->slots - 1);
	}
	return i;
}

static uint32_t edge_to(const struct capy_ngram *g, uint32_t state, int32_t token)
{
	uint32_t e = g->table[find_slot(g, state, token)];

	return e == NONE ? NONE : g->ed[e].to;
}

static void edge_add(struct capy_ngram *g, uint32_t from, int32_t token, uint32_t to)
{
	uint64_t slot = find_slot(g, from, token);
	uint32_t id = (uint32_t)g->n_ed++;

	g->ed[id] = (struct sa_edge){ from, to, g->st[from].edges, token };
	g->st[from].edges = id;
	g->table[slot] = id;
}

static uint32_t state_add(struct capy_ngram *g, uint32_t len, uint32_t link, uint32_t first)
{
	uint32_t id = (uint32_t)g->n_st++;

	g->st[id] = (struct sa_state){ len, link, first, NONE };
	return id;
}

/* Room for m more tokens: history, states (2 per token), transitions (3 per token) and a
 * table kept under half full. */
static int reserve(struct capy_ngram *g, uint64_t m, struct capy_err *err)
{
	uint64_t n = g->n + m, need_st = 2 * n + 2, need_ed = 3 * n + 8;

	if (n >= NONE / 4)
		return capy_err_set(err, CAPY_EINVAL, "n-gram drafts: a history of %" PRIu64 " tokens is too long", n);
	if (n > g->hist_cap) {
		uint64_t cap = CAPY_MAX(n, 2 * g->hist_cap);
		int32_t *h = realloc(g->hist, cap * sizeof(*h));
		if (!h)
			goto oom;
		g->hist = h;
		g->hist_cap = cap;
	}
	if (need_st > g->st_cap) {
		uint64_t cap = CAPY_MAX(need_st, 2 * g->st_cap);
		struct sa_state *s = realloc(g->st, cap * sizeof(*s));
		if (!s)
			goto oom;
		g->st = s;
		g->st_cap = cap;
	}
	if (need_ed > g->ed_cap) {
		uint64_t cap = CAPY_MAX(need_ed, 2 * g->ed_cap), slots = 64;
		struct sa_edge *e = realloc(g->ed, cap * sizeof(*e));
		uint32_t *t;
		if (!e)
			goto oom;
		g->ed = e;
		g->ed_cap = cap;
		while (slots < 2 * cap)
			slots *= 2;
		if (!(t = malloc(slots * sizeof(*t))))
			goto oom;
		memset(t, 0xff, slots * sizeof(*t));
		free(g->table);
		g->table = t;
		g->slots = slots;
		for (uint64_t i = 0; i < g->n_ed; i++)
			g->table[find_slot(g, g->ed[i].from, g->ed[i].token)] = (uint32_t)i;
	}
	return 0;
oom:
	return capy_err_set(err, CAPY_ENOMEM, "n-gram drafts: out of memory for a history of %" PRIu64 " tokens", n);
}

int capy_ngram_new(struct capy_ngram **out, uint64_t min_match, struct capy_err *err)
{
	struct capy_ngram *g = calloc(1, sizeof(*g));
	int rc;

	if (!min_match)
		min_match = 1;
	if (!g)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	g->min_match = min_match;
	if ((rc = reserve(g, 64, err)) < 0) {
		capy_ngram_free(g);
		return rc;
	}
	g->last = state_add(g, 0, NONE, 0);
	*out = g;
	return 0;
}

void capy_ngram_free(struct capy_ngram *g)
{
	if (!g)
		return;
	free(g->hist);
	free(g->st);
	free(g->ed);
	free(g->table);
	free(g);
}

uint64_t capy_ngram_len(const struct capy_ngram *g)
{
	return g->n;
}

/* The automaton extended by one token (the online construction). */
static void extend(struct capy_ngram *g, int32_t c)
{
	uint32_t pos = (uint32_t)g->n, cur = state_add(g, g->st[g->last].len + 1, NONE, pos), p = g->last;

	g->hist[g->n++] = c;
	while (p != NONE && edge_to(g, p, c) == NONE) {
		edge_add(g, p, c, cur);
		p = g->st[p].link;
	}
	if (p == NONE) {
		g->st[cur].link = 0;
	} else {
		uint32_t q = edge_to(g, p, c);
		if (g->st[p].len + 1 == g->st[q].len) {
			g->st[cur].link = q;
		} else {
			uint32_t clone = state_add(g, g->st[p].len + 1, g->st[q].link, g->st[q].first);
			for (uint32_t e = g->st[q].edges; e != NONE; e = g->ed[e].next)
				edge_add(g, clone, g->ed[e].token, g->ed[e].to);
			for (; p != NONE; p = g->st[p].link) {
				uint32_t *slot = &g->table[find_slot(g, p, c)];
				if (*slot == NONE || g->ed[*slot].to != q)
					break;
				g->ed[*slot].to = clone;
			}
			g->st[q].link = g->st[cur].link = clone;
		}
	}
	g->last = cur;
}

int capy_ngram_add(struct capy_ngram *g, const int32_t *ids, uint64_t n, struct capy_err *err)
{
	int rc;

	if ((rc = reserve(g, n, err)) < 0)
		return rc;
	for (uint64_t i = 0; i < n; i++)
		extend(g, ids[i]);
	return 0;
}

uint64_t capy_ngram_draft(const struct capy_ngram *g, uint64_t k, int32_t *out, uint64_t *match)
{
	uint32_t link = g->st[g->last].link;
	uint64_t len = link == NONE ? 0 : g->st[link].len, from, n = 0;

	if (match)
		*match = len;
	if (!len || len < g->min_match)
		return 0;
	/* The earliest occurrence ends before the history does: its continuation exists. */
	from = (uint64_t)g->st[link].first + 1;
	for (; n < k && from + n < g->n; n++)
		out[n] = g->hist[from + n];
	return n;
}
