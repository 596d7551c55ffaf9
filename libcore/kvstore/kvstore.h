/* kvstore.h - the context cache's host-RAM and disk tiers, and the disk entry format.
 *
 * The device tier is the scheduler's prefix cache (sched/prefix.c): pages and snapshots the
 * engine holds. What it evicts is demoted here instead of dropped — to host RAM, and what
 * host RAM evicts to a directory on disk — and a prompt that matches a demoted prefix is
 * restored from the fastest tier that holds it, without a new prefill:
 *
 *	struct capy_kvstore *kv;
 *	capy_kvstore_open(&kv, engine, &(struct capy_kvstore_opts){ .host_bytes = 1 << 30,
 *			  .disk_dir = "/var/cache/capy", .disk_bytes = 16ull << 30 }, &err);
 *	capy_kvstore_put(kv, holder, snapshot, &err);		(the device tier evicts it)
 *	capy_kvstore_lookup(kv, prompt, n, n - 1, 0, &seq, &cached, &tier, &err);
 *
 * An entry is one cached prefix: its token ids, the attention-cache pages of [0, n) as the
 * engine holds them (capy_seq_export_pages: the cache dtype and the backend's page layout),
 * and the recurrent state of snapshots along it (the last at n). Its identity (the model,
 * dtype, layout and backend) must match the engine's to be restored. On disk an entry is
 * one file (docs/kv-cache.md): header, section table, zstd-compressed sections each with
 * the XXH3-64 of its uncompressed bytes; written under a temporary name, fsync'ed and
 * renamed; a file that is not a valid entry of this engine is refused with the reason (the
 * opts.refused callback gets it) and removed. The directory is indexed at open, so a
 * restarted server finds what an earlier one left; its total size is kept under
 * disk_bytes, least recently used first (the index orders by modification time, which a
 * hit refreshes).
 *
 * Thread-safety: a kvstore belongs to the engine's thread, like the engine; stats are a
 * copy (the scheduler hands them out under its own lock).
 */
#ifndef CAPY_KVSTORE_H
#define CAPY_KVSTORE_H

#include "../engine/engine.h"

enum capy_kv_tier {
	CAPY_KV_TIER_NONE,
	CAPY_KV_TIER_DEVICE, /* the prefix cache (the engine's own memory: VRAM or its RAM) */
	CAPY_KV_TIER_HOST,
	CAPY_KV_TIER_DISK,
};

/* "none", "device", "host", "disk". */
const char *capy_kv_tier_name(enum capy_kv_tier t);

/* What an entry must match to be restored into an engine. */
struct capy_kv_ident {
	uint64_t model;       /* capy_kv_model_id of the artifact */
	uint32_t family;      /* enum capy_family */
	uint32_t n_layers, n_kv_layers;
	uint32_t kv_dtype;    /* enum capy_kv_dtype */
	uint64_t page_tokens, page_bytes, state_bytes;
	char backend[16];     /* NUL-padded backend name: page layouts and states are per backend */
};

/* The artifact's identity: XXH3-64 over the checksums of its tensors and embedded files
 * (which cover every byte of its weights, tokenizer and configuration). */
uint64_t capy_kv_model_id(const struct capy_artifact *a);
/* The identity of entries taken from e; fails if its backend cannot export. */
int capy_kv_ident_of(const struct capy_engine *e, struct capy_kv_ident *out, struct capy_err *err);
/* 0 if got matches want; else -1 with what differs ("model 0123... (expected ...)") in why. */
int capy_kv_ident_check(const struct capy_kv_ident *want, const struct capy_kv_ident *got, char *why, size_t size);

struct capy_kv_entry {
	struct capy_kv_ident id;
	uint64_t n_tokens;
	int32_t *tokens;      /* [n_tokens] */
	uint32_t n_snaps;
	uint64_t *snap_pos;   /* [n_snaps] ascending, the last = n_tokens */
	uint8_t *pages;       /* ceil(n_tokens / page_tokens) pages of page_bytes */
	uint8_t *states;      /* [n_snaps][state_bytes] */
};

/* Pages of the entry, and its bytes in host memory (ids, positions, pages, states). */
uint64_t capy_kv_entry_pages(const struct capy_kv_entry *en);
uint64_t capy_kv_entry_bytes(const struct capy_kv_entry *en);
void capy_kv_entry_free(struct capy_kv_entry *en);
/* The first capy_snapshot_len(sn) tokens of holder (which holds at least those) with sn. */
int capy_kv_entry_capture(struct capy_kv_entry **out, const struct capy_kv_ident *id, const struct capy_seq *holder,
			  const struct capy_snapshot *sn, struct capy_err *err);
/* A new sequence of e at snapshot snap of the entry (its tokens up to there, its pages and
 * recurrent state), bitwise the state it was captured from. */
int capy_kv_entry_restore(const struct capy_kv_entry *en, uint32_t snap, struct capy_engine *e,
			  struct capy_seq **out, struct capy_err *err);

/* --- the disk format (docs/kv-cache.md) ------------------------------------------------- */

#define CAPY_KV_MAGIC "CAPYKV\r\n" /* 8 bytes */
#define CAPY_KV_VERSION 1
#define CAPY_KV_SUFFIX ".capykv"

enum capy_kv_section_type {
	CAPY_KV_SEC_TOKENS = 1,    /* int32 ids [n_tokens] */
	CAPY_KV_SEC_POSITIONS = 2, /* uint64 snapshot positions [n_snaps] */
	CAPY_KV_SEC_PAGES = 3,     /* the attention-cache pages */
	CAPY_KV_SEC_STATE = 4,     /* one per snapshot, in order: its recurrent state */
};

/* "tokens", "positions", "pages", "state". */
const char *capy_kv_section_name(uint32_t type);

struct capy_kv_section_info {
	uint32_t type;
	uint64_t raw, stored, offset, xxh3; /* uncompressed and stored bytes; checksum of raw */
};

/* An entry file's header and section table, as read. */
struct capy_kv_file_info {
	uint32_t version;
	struct capy_kv_ident id;
	uint64_t n_tokens;
	uint32_t n_snaps, n_sections;
	struct capy_kv_section_info *sections;
	uint64_t file_bytes, raw_bytes, header_xxh3;
};
void capy_kv_file_info_free(struct capy_kv_file_info *fi);

/* Write en to path atomically (temp file, fsync, rename, fsync of the directory), its
 * sections compressed at zstd level `level`; *file_bytes (may be NULL) gets the size. */
int capy_kv_entry_write(const struct capy_kv_entry *en, const char *path, int level, uint64_t *file_bytes,
			struct capy_err *err);

enum capy_kv_read_flags {
	CAPY_KV_READ_TOKENS = 1, /* only the tokens and positions (pages and states left NULL) */
};

/* Read and check an entry file: magic, version, header checksum, the section table against
 * the file's size, every section read decompressed to its stated size and checked against
 * its checksum; with want, the identity too. Fails with CAPY_EFORMAT (not an entry, a
 * truncated or inconsistent one), CAPY_EUNSUPPORTED (another version), CAPY_ECHECKSUM
 * (the header or a section: named), CAPY_EINVAL (another model's: what differs), CAPY_EIO.
 * info (may be NULL) is filled as far as the header was read. */
int capy_kv_entry_read(const char *path, const struct capy_kv_ident *want, int flags, struct capy_kv_entry **out,
		       struct capy_kv_file_info *info, struct capy_err *err);

/* --- the tiers ------------------------------------------------------------------------ */

struct capy_kvstore_opts {
	uint64_t host_bytes;       /* host-RAM tier budget; 0: none (device evictions go to disk) */
	const char *disk_dir;      /* disk tier directory (created if missing); NULL: none */
	uint64_t disk_bytes;       /* its budget (0 with a directory: 1 GiB) */
	int zstd_level;            /* 0: 1 (the KV rows compress little at any level) */
	/* An entry file refused (at open, or when a lookup reads it) and removed: the tool logs. */
	void (*refused)(void *ud, const char *path, const char *why);
	void *ud;
};

struct capy_kvstore_stats {
	uint64_t host_bytes, host_entries, disk_bytes, disk_entries;
	uint64_t host_hits, disk_hits;                 /* lookups restored from each tier */
	uint64_t host_restored_tokens, disk_restored_tokens;
	uint64_t demoted_host, demoted_disk;           /* entries moved into each tier */
	uint64_t dropped;                              /* evicted from the last tier (or too large) */
	uint64_t disk_written_bytes, disk_read_bytes;  /* file bytes */
	uint64_t refused;                              /* disk entries refused and removed */
	double restore_s;                              /* time spent restoring (both tiers) */
};

struct capy_kvstore;

/* Open the tiers for e (whose backend must export); indexes disk_dir. */
int capy_kvstore_open(struct capy_kvstore **out, struct capy_engine *e, const struct capy_kvstore_opts *opts,
		      struct capy_err *err);
/* Write the host tier to disk (if there is one) so a restart finds it; then free. */
void capy_kvstore_close(struct capy_kvstore *kv);
/* Demote: the first capy_snapshot_len(sn) tokens of holder with sn go to the host tier (or
 * to disk without one), evicting that tier's least recently used down the line. */
int capy_kvstore_put(struct capy_kvstore *kv, const struct capy_seq *holder, const struct capy_snapshot *sn,
		     struct capy_err *err);
/* The longest snapshot of any host or disk entry that matches prompt[0..n) and ends at
 * most at limit tokens and beyond min_len: *out a new sequence restored there, *cached its
 * length, *tier where it came from (the host on a tie); nothing: *out NULL, *cached 0. An
 * entry file refused on reading is removed and the lookup goes on with the rest. */
int capy_kvstore_lookup(struct capy_kvstore *kv, const int32_t *prompt, uint64_t n, uint64_t limit, uint64_t min_len,
			struct capy_seq **out, uint64_t *cached, enum capy_kv_tier *tier, struct capy_err *err);
void capy_kvstore_stats(const struct capy_kvstore *kv, struct capy_kvstore_stats *st);
/* Whether it has a disk tier (what is put there survives a restart). */
bool capy_kvstore_has_disk(const struct capy_kvstore *kv);

#endif
