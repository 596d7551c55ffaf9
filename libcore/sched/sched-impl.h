/* sched-impl.h - the prefix cache the scheduler keeps (prefix.c). Include only inside
 * libcore/sched/ (and its unit test).
 *
 * An entry is one conversation's token history as far as it was cached: a holder sequence
 * (attention-cache pages and token ids, no recurrent state) and the snapshots of the
 * recurrent state taken at positions along it. A request that runs keeps extending the
 * entry it created (live); a later request resumes at the best snapshot of any entry whose
 * tokens match its prompt that far. Memory counted against the budget: the snapshots and the
 * distinct pages the holders reference.
 */
#ifndef CAPY_SCHED_IMPL_H
#define CAPY_SCHED_IMPL_H

#include "sched.h"
#include "../kvstore/kvstore.h"

struct prefix_cache;
struct prefix_entry;

/* kv (may be NULL: none) takes what the cache evicts (its host and disk tiers) and is looked
 * up after it; it stays the caller's. */
int prefix_new(struct prefix_cache **out, struct capy_engine *e, uint64_t budget, struct capy_kvstore *kv,
	       struct capy_err *err);
void prefix_free(struct prefix_cache *pc);

/* The longest usable prefix of prompt[0..n) ending at most at `limit` tokens, in the cache
 * or its lower tiers (the faster on a tie): *out is a new sequence at that length with its
 * recurrent state restored, *cached its length and *tier where it was found; with nothing
 * usable *out is NULL, *cached 0 and *tier CAPY_KV_TIER_NONE. *mtp_ok says whether the
 * snapshot was inserted with an MTP hidden state (the prefix cache itself only, not its
 * tiers); then mtp_hidden (hidden_size floats) gets it. */
int prefix_lookup(struct prefix_cache *pc, const int32_t *prompt, uint64_t n, uint64_t limit,
		  struct capy_seq **out, uint64_t *cached, enum capy_kv_tier *tier, float *mtp_hidden, bool *mtp_ok,
		  struct capy_err *err);

/* The length prefix_lookup would find in the cache itself (not its lower tiers), without
 * taking it. */
uint64_t prefix_match(const struct prefix_cache *pc, const int32_t *prompt, uint64_t n, uint64_t limit);

/* Cache seq's state at its current length. *entry is the caller's handle on the entry its
 * sequence extends: NULL the first time (an entry is made and *entry set); the cache sets it
 * back to NULL if it evicts the entry. May evict other snapshots to stay within the budget.
 * mtp_hidden (NULL: none) is the main model's hidden state at the last position, given when
 * seq's pages hold the MTP head's rows of every position before it (spec.h capy_mtp_pending):
 * kept with the snapshot, a request resuming there drafts with the head (capy_mtp_resume). */
int prefix_insert(struct prefix_cache *pc, struct prefix_entry **entry, const struct capy_seq *seq,
		  const float *mtp_hidden, struct capy_err *err);
/* Evict (demote) until the cache's distinct pages are at most max_pages: room for the KV
 * leases of requests (sched.c). */
void prefix_make_room(struct prefix_cache *pc, uint64_t max_pages);
/* The caller's sequence is done with *entry (it will not be extended any more). */
void prefix_detach(struct prefix_cache *pc, struct prefix_entry **entry);

struct prefix_stats {
	uint64_t bytes, entries, snapshots, pages;
};
void prefix_stats(const struct prefix_cache *pc, struct prefix_stats *st);

#endif
