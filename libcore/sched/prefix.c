/* prefix.c - the prefix cache: entries of shared attention-cache pages with snapshots of the
 * recurrent state along them, looked up by the longest matching prompt prefix, evicted
 * least recently used first (see sched-impl.h). */
#include "sched-impl.h"
#include "../util/log.h"

struct psnap {
	struct capy_snapshot *sn;
	uint64_t used;               /* tick of the last insert or hit */
	float *mtp_hidden;           /* [hidden_size] for an MTP drafter resuming here, or NULL */
};

struct prefix_entry {
	struct capy_seq *holder;     /* pages and ids of [0, len); no recurrent state */
	struct psnap *snaps;         /* ascending position */
	size_t n_snaps, cap_snaps;
	struct prefix_entry **owner; /* the live request's handle, or NULL */
	struct prefix_entry *prev, *next;
};

struct prefix_cache {
	struct capy_engine *e;
	struct capy_kvstore *kv;     /* the lower tiers, or NULL */
	uint64_t budget, tick;
	struct prefix_entry *head;
	uint32_t *page_refs;         /* [cap_refs] holders referencing each page id */
	uint32_t cap_refs;
	uint64_t distinct_pages, snap_bytes, n_entries, n_snaps;
};

/* What a snapshot costs the budget: its state, and the hidden state kept beside it. */
static uint64_t psnap_bytes(const struct prefix_cache *pc, const struct psnap *p)
{
	return capy_snapshot_bytes(p->sn) + (p->mtp_hidden ? capy_engine_config(pc->e)->hidden_size * sizeof(float) : 0);
}

static void psnap_free(struct psnap *p)
{
	capy_snapshot_free(p->sn);
	free(p->mtp_hidden);
}

int prefix_new(struct prefix_cache **out, struct capy_engine *e, uint64_t budget, struct capy_kvstore *kv,
	       struct capy_err *err)
{
	struct prefix_cache *pc = calloc(1, sizeof(*pc));

	if (!pc)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	pc->e = e;
	pc->kv = kv;
	pc->budget = budget;
	*out = pc;
	return 0;
}

/* Count (or uncount) the pages of a holder among the cache's distinct pages. */
static int account(struct prefix_cache *pc, const struct capy_seq *h, int sign, struct capy_err *err)
{
	uint64_t n;
	const uint32_t *pages = capy_seq_page_ids(h, &n);

	for (uint64_t i = 0; i < n; i++) {
		uint32_t id = pages[i];
		if (id >= pc->cap_refs) {
			uint32_t cap = pc->cap_refs ? pc->cap_refs : 256, *p;
			while (cap <= id)
				cap *= 2;
			if (!(p = realloc(pc->page_refs, (size_t)cap * sizeof(*p)))) {
				while (i--) /* undo, so the counts stay right */
					if (--pc->page_refs[pages[i]] == 0)
						pc->distinct_pages--;
				return capy_err_set(err, CAPY_ENOMEM, "out of memory for the prefix cache");
			}
			memset(p + pc->cap_refs, 0, (size_t)(cap - pc->cap_refs) * sizeof(*p));
			pc->page_refs = p;
			pc->cap_refs = cap;
		}
		if (sign > 0 && pc->page_refs[id]++ == 0)
			pc->distinct_pages++;
		else if (sign < 0 && --pc->page_refs[id] == 0)
			pc->distinct_pages--;
	}
	return 0;
}

static void drop_holder(struct prefix_cache *pc, struct prefix_entry *en)
{
	if (!en->holder)
		return;
	account(pc, en->holder, -1, NULL);
	capy_seq_free(en->holder);
	en->holder = NULL;
}

/* Make h (a new holder sequence) the entry's; the old one goes. */
static int set_holder(struct prefix_cache *pc, struct prefix_entry *en, struct capy_seq *h, struct capy_err *err)
{
	int rc = account(pc, h, +1, err);

	if (rc < 0) {
		capy_seq_free(h);
		return rc;
	}
	drop_holder(pc, en);
	en->holder = h;
	return 0;
}

static void free_entry(struct prefix_cache *pc, struct prefix_entry *en)
{
	for (size_t i = 0; i < en->n_snaps; i++) {
		pc->snap_bytes -= psnap_bytes(pc, &en->snaps[i]);
		psnap_free(&en->snaps[i]);
	}
	pc->n_snaps -= en->n_snaps;
	drop_holder(pc, en);
	if (en->owner)
		*en->owner = NULL;
	if (en->prev)
		en->prev->next = en->next;
	else
		pc->head = en->next;
	if (en->next)
		en->next->prev = en->prev;
	pc->n_entries--;
	free(en->snaps);
	free(en);
}

void prefix_free(struct prefix_cache *pc)
{
	if (!pc)
		return;
	/* With a disk tier, what the cache holds is kept for the next start: demoted, oldest
	 * entries first (the head is the newest). */
	if (pc->kv && capy_kvstore_has_disk(pc->kv)) {
		struct prefix_entry *en = pc->head;
		while (en && en->next)
			en = en->next;
		for (; en; en = en->prev)
			for (size_t i = 0; en->holder && i < en->n_snaps; i++) {
				struct capy_err err = { 0 };
				if (capy_kvstore_put(pc->kv, en->holder, en->snaps[i].sn, &err) < 0)
					capy_log_warn("context cache: keeping %" PRIu64 " tokens: %s",
						      capy_snapshot_len(en->snaps[i].sn), err.msg);
			}
	}
	while (pc->head)
		free_entry(pc, pc->head);
	free(pc->page_refs);
	free(pc);
}

static uint64_t cache_bytes(const struct prefix_cache *pc)
{
	return pc->snap_bytes + pc->distinct_pages * capy_engine_page_bytes(pc->e);
}

/* Drop the least recently used snapshot; an entry left without any goes too, unless a
 * request still extends it; one that keeps some is cut back to its last. */
static void evict_one(struct prefix_cache *pc)
{
	struct prefix_entry *best = NULL;
	size_t bi = 0;

	for (struct prefix_entry *en = pc->head; en; en = en->next)
		for (size_t i = 0; i < en->n_snaps; i++)
			if (!best || en->snaps[i].used < best->snaps[bi].used) {
				best = en;
				bi = i;
			}
	if (!best) { /* only live entries without snapshots: their pages */
		for (struct prefix_entry *en = pc->head; en; en = en->next)
			drop_holder(pc, en);
		return;
	}
	/* Demoted rather than dropped: the snapshot with its prefix's pages and ids. */
	if (pc->kv && best->holder) {
		struct capy_err err = { 0 };
		if (capy_kvstore_put(pc->kv, best->holder, best->snaps[bi].sn, &err) < 0)
			capy_log_warn("context cache: demoting %" PRIu64 " tokens: %s",
				      capy_snapshot_len(best->snaps[bi].sn), err.msg);
	}
	pc->snap_bytes -= psnap_bytes(pc, &best->snaps[bi]);
	psnap_free(&best->snaps[bi]);
	memmove(best->snaps + bi, best->snaps + bi + 1, (best->n_snaps - bi - 1) * sizeof(*best->snaps));
	best->n_snaps--;
	pc->n_snaps--;
	if (best->owner)
		return;
	if (!best->n_snaps) {
		free_entry(pc, best);
		return;
	}
	uint64_t last = capy_snapshot_len(best->snaps[best->n_snaps - 1].sn);
	struct capy_seq *h;
	if (best->holder && last < capy_seq_len(best->holder) && capy_seq_share(best->holder, last, &h, NULL) == 0)
		set_holder(pc, best, h, NULL);
}

static void shrink(struct prefix_cache *pc)
{
	while (cache_bytes(pc) > pc->budget && (pc->n_snaps || pc->distinct_pages))
		evict_one(pc);
}

void prefix_make_room(struct prefix_cache *pc, uint64_t max_pages)
{
	while (pc->distinct_pages > max_pages && (pc->n_snaps || pc->distinct_pages))
		evict_one(pc);
}

int prefix_insert(struct prefix_cache *pc, struct prefix_entry **entry, const struct capy_seq *seq,
		  const float *mtp_hidden, struct capy_err *err)
{
	struct prefix_entry *en = *entry;
	struct capy_snapshot *sn;
	float *hid = NULL;
	size_t hbytes = capy_engine_config(pc->e)->hidden_size * sizeof(float);
	struct capy_seq *h;
	uint64_t len = capy_seq_len(seq);
	int rc;

	if (!len || !pc->budget)
		return 0;
	if (en && en->n_snaps && capy_snapshot_len(en->snaps[en->n_snaps - 1].sn) == len)
		return 0; /* already there */
	if (!en) {
		if (!(en = calloc(1, sizeof(*en))))
			return capy_err_set(err, CAPY_ENOMEM, "out of memory for the prefix cache");
		en->next = pc->head;
		if (pc->head)
			pc->head->prev = en;
		pc->head = en;
		pc->n_entries++;
		en->owner = entry;
		*entry = en;
	}
	if (en->n_snaps == en->cap_snaps) {
		size_t cap = en->cap_snaps ? 2 * en->cap_snaps : 4;
		struct psnap *p = realloc(en->snaps, cap * sizeof(*p));
		if (!p)
			return capy_err_set(err, CAPY_ENOMEM, "out of memory for the prefix cache");
		en->snaps = p;
		en->cap_snaps = cap;
	}
	/* Out of memory for the hidden state, the snapshot goes in without it (no MTP there). */
	if (mtp_hidden && (hid = malloc(hbytes)))
		memcpy(hid, mtp_hidden, hbytes);
	if ((rc = capy_snapshot_take(seq, &sn, err)) < 0) {
		free(hid);
		return rc;
	}
	if ((rc = capy_seq_share(seq, len, &h, err)) < 0 || (rc = set_holder(pc, en, h, err)) < 0) {
		capy_snapshot_free(sn);
		free(hid);
		return rc;
	}
	en->snaps[en->n_snaps++] = (struct psnap){ sn, ++pc->tick, hid };
	pc->n_snaps++;
	pc->snap_bytes += psnap_bytes(pc, &en->snaps[en->n_snaps - 1]);
	shrink(pc);
	return 0;
}

void prefix_detach(struct prefix_cache *pc, struct prefix_entry **entry)
{
	struct prefix_entry *en = *entry;

	if (!en)
		return;
	en->owner = NULL;
	*entry = NULL;
	if (!en->n_snaps)
		free_entry(pc, en);
}

static uint64_t common_prefix(const int32_t *a, const int32_t *b, uint64_t n)
{
	uint64_t i = 0;

	while (i < n && a[i] == b[i])
		i++;
	return i;
}

/* The entry and snapshot with the longest usable prefix of prompt (NULL: none). */
static struct prefix_entry *best_match(const struct prefix_cache *pc, const int32_t *prompt, uint64_t n, uint64_t limit,
				       size_t *bi, uint64_t *best_len)
{
	struct prefix_entry *best = NULL;

	*bi = 0;
	*best_len = 0;
	for (struct prefix_entry *en = pc->head; en; en = en->next) {
		uint64_t m;
		if (!en->holder || !en->n_snaps)
			continue;
		m = common_prefix(capy_seq_tokens(en->holder), prompt,
				  CAPY_MIN(CAPY_MIN(capy_seq_len(en->holder), n), limit));
		for (size_t i = en->n_snaps; i-- > 0;) {
			uint64_t p = capy_snapshot_len(en->snaps[i].sn);
			if (p <= m) {
				if (p > *best_len) {
					best = en;
					*bi = i;
					*best_len = p;
				}
				break;
			}
		}
	}
	return best;
}

uint64_t prefix_match(const struct prefix_cache *pc, const int32_t *prompt, uint64_t n, uint64_t limit)
{
	size_t bi;
	uint64_t len;

	best_match(pc, prompt, n, limit, &bi, &len);
	return len;
}

int prefix_lookup(struct prefix_cache *pc, const int32_t *prompt, uint64_t n, uint64_t limit,
		  struct capy_seq **out, uint64_t *cached, enum capy_kv_tier *tier, float *mtp_hidden, bool *mtp_ok,
		  struct capy_err *err)
{
	size_t bi;
	uint64_t best_len;
	struct prefix_entry *best;
	struct capy_seq *s;
	int rc;

	*out = NULL;
	*cached = 0;
	*tier = CAPY_KV_TIER_NONE;
	*mtp_ok = false;
	best = best_match(pc, prompt, n, limit, &bi, &best_len);
	/* A longer prefix in a lower tier is worth its copy: each token of it saves a prefill. */
	if (pc->kv && (rc = capy_kvstore_lookup(pc->kv, prompt, n, limit, best_len, out, cached, tier, err)) < 0)
		return rc;
	if (*out || !best)
		return 0;
	if ((rc = capy_seq_share(best->holder, best_len, &s, err)) < 0)
		return rc;
	if ((rc = capy_seq_restore(s, best->snaps[bi].sn, err)) < 0) {
		capy_seq_free(s);
		return rc;
	}
	best->snaps[bi].used = ++pc->tick;
	if (best->snaps[bi].mtp_hidden) {
		memcpy(mtp_hidden, best->snaps[bi].mtp_hidden, capy_engine_config(pc->e)->hidden_size * sizeof(float));
		*mtp_ok = true;
	}
	*out = s;
	*cached = best_len;
	*tier = CAPY_KV_TIER_DEVICE;
	return 0;
}

void prefix_stats(const struct prefix_cache *pc, struct prefix_stats *st)
{
	st->bytes = cache_bytes(pc);
	st->entries = pc->n_entries;
	st->snapshots = pc->n_snaps;
	st->pages = pc->distinct_pages;
}
