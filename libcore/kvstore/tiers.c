/* tiers.c - the host-RAM and disk tiers of the context cache (kvstore.h): entries demoted
 * from the device tier, least recently used first out of each tier into the next, looked
 * up by the longest matching prefix; the disk directory indexed at open. */
#include "kvstore.h"
#include "../util/file.h"
#include "../util/hash.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_DISK_BYTES (1ull << 30)
#define DEFAULT_ZSTD_LEVEL 1

struct host_ent {
	struct capy_kv_entry *en;
	uint64_t used;               /* tick of the last insert or hit */
};

/* What the index keeps of an entry file: enough to match prompts without reading it. */
struct disk_ent {
	char *path;
	int32_t *tokens;
	uint64_t n_tokens, *snap_pos, file_bytes, used;
	uint32_t n_snaps;
};

struct capy_kvstore {
	struct capy_engine *e;
	struct capy_kv_ident id;
	struct capy_kvstore_opts o;
	char *dir;
	struct host_ent *host;
	size_t n_host, cap_host;
	struct disk_ent *disk;
	size_t n_disk, cap_disk;
	uint64_t tick;
	struct capy_kvstore_stats st;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int grow(void **arr, size_t *cap, size_t need, size_t elem, struct capy_err *err)
{
	size_t c = *cap ? *cap : 16;
	void *p;

	if (need <= *cap)
		return 0;
	while (c < need)
		c *= 2;
	if (!(p = realloc(*arr, c * elem)))
		return capy_err_set(err, CAPY_ENOMEM, "out of memory for the context cache's index");
	*arr = p;
	*cap = c;
	return 0;
}

/* --- disk ------------------------------------------------------------------------------ */

static void disk_ent_free(struct disk_ent *d)
{
	free(d->path);
	free(d->tokens);
	free(d->snap_pos);
}

/* Forget index entry i (and remove its file when `unlink_it`). */
static void disk_remove(struct capy_kvstore *kv, size_t i, bool unlink_it)
{
	struct disk_ent *d = &kv->disk[i];

	if (unlink_it)
		unlink(d->path);
	kv->st.disk_bytes -= d->file_bytes;
	disk_ent_free(d);
	kv->disk[i] = kv->disk[--kv->n_disk];
}

static void refuse(struct capy_kvstore *kv, const char *path, const struct capy_err *why)
{
	kv->st.refused++;
	unlink(path);
	if (kv->o.refused)
		kv->o.refused(kv->o.ud, path, why->msg);
}

/* Evict the least recently used files until the directory is within its budget. */
static void disk_shrink(struct capy_kvstore *kv)
{
	while (kv->st.disk_bytes > kv->o.disk_bytes && kv->n_disk) {
		size_t lru = 0;
		for (size_t i = 1; i < kv->n_disk; i++)
			if (kv->disk[i].used < kv->disk[lru].used)
				lru = i;
		disk_remove(kv, lru, true);
		kv->st.dropped++;
	}
}

/* Index the file at path (already checked) as the most recently used unless `used` says. */
static int disk_add(struct capy_kvstore *kv, char *path, struct capy_kv_entry *toks, uint64_t file_bytes, uint64_t used,
		    struct capy_err *err)
{
	struct disk_ent *d;
	int rc;

	for (size_t i = 0; i < kv->n_disk; i++)
		if (!strcmp(kv->disk[i].path, path)) /* rewritten: the old row goes */
			disk_remove(kv, i, false);
	if ((rc = grow((void **)&kv->disk, &kv->cap_disk, kv->n_disk + 1, sizeof(*kv->disk), err)) < 0)
		return rc;
	d = &kv->disk[kv->n_disk++];
	*d = (struct disk_ent){ path, toks->tokens, toks->n_tokens, toks->snap_pos, file_bytes, used, toks->n_snaps };
	toks->tokens = NULL;
	toks->snap_pos = NULL;
	kv->st.disk_bytes += file_bytes;
	return 0;
}

/* An entry's file name: the XXH3-64 of its token ids (the same prefix is one file). */
static char *entry_path(const struct capy_kvstore *kv, const struct capy_kv_entry *en)
{
	char hex[17], name[40];

	capy_hash_hex(capy_xxh3(en->tokens, en->n_tokens * sizeof(int32_t)), hex);
	snprintf(name, sizeof(name), "%s%s", hex, CAPY_KV_SUFFIX);
	return capy_path_join(kv->dir, name);
}

/* Demote an entry to disk (it stays the caller's). */
static int to_disk(struct capy_kvstore *kv, struct capy_kv_entry *en, struct capy_err *err)
{
	uint64_t bytes;
	char *path;
	int rc;

	if (!kv->dir) {
		kv->st.dropped++;
		return 0;
	}
	if (!(path = entry_path(kv, en)))
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	if ((rc = capy_kv_entry_write(en, path, kv->o.zstd_level, &bytes, err)) < 0) {
		free(path);
		return rc;
	}
	kv->st.disk_written_bytes += bytes;
	kv->st.demoted_disk++;
	if (bytes > kv->o.disk_bytes) { /* larger than the whole tier */
		unlink(path);
		free(path);
		kv->st.dropped++;
		return 0;
	}
	/* the index keeps the entry's ids: the entry gives them up and gets copies back */
	struct capy_kv_entry ids = { .n_tokens = en->n_tokens, .n_snaps = en->n_snaps };
	if (!(ids.tokens = malloc(en->n_tokens * sizeof(int32_t))) || !(ids.snap_pos = malloc(en->n_snaps * sizeof(uint64_t)))) {
		free(ids.tokens);
		free(path);
		return capy_err_set(err, CAPY_ENOMEM, "out of memory for the context cache's index");
	}
	memcpy(ids.tokens, en->tokens, en->n_tokens * sizeof(int32_t));
	memcpy(ids.snap_pos, en->snap_pos, en->n_snaps * sizeof(uint64_t));
	if ((rc = disk_add(kv, path, &ids, bytes, ++kv->tick, err)) < 0) {
		free(ids.tokens);
		free(ids.snap_pos);
		free(path);
		return rc;
	}
	disk_shrink(kv);
	return 0;
}

static int cmp_used(const void *a, const void *b)
{
	const struct disk_ent *x = a, *y = b;
	return x->used < y->used ? -1 : x->used > y->used;
}

/* Leftover temporary files of an interrupted write: ".<name>.capykv.tmp.XXXXXX". */
static bool is_temp(const char *name)
{
	return name[0] == '.' && strstr(name, CAPY_KV_SUFFIX ".tmp.");
}

static bool is_entry(const char *name)
{
	size_t n = strlen(name), s = strlen(CAPY_KV_SUFFIX);
	return name[0] != '.' && n > s && !strcmp(name + n - s, CAPY_KV_SUFFIX);
}

/* Index the directory: every entry file of this engine, ordered by modification time;
 * the rest refused and removed. */
static int disk_index(struct capy_kvstore *kv, struct capy_err *err)
{
	DIR *d;
	struct dirent *de;
	int rc = 0;

	if (mkdir(kv->dir, 0777) < 0 && errno != EEXIST)
		return capy_err_errno(err, errno, "cannot create the disk cache directory '%s'", kv->dir);
	if (!(d = opendir(kv->dir)))
		return capy_err_errno(err, errno, "cannot read the disk cache directory '%s'", kv->dir);
	while (rc == 0 && (de = readdir(d))) {
		struct capy_kv_entry *en;
		struct capy_kv_file_info fi;
		struct capy_err why = { 0 };
		struct stat sb;
		char *path;
		if (!is_entry(de->d_name) && !is_temp(de->d_name))
			continue;
		if (!(path = capy_path_join(kv->dir, de->d_name))) {
			rc = capy_err_set(err, CAPY_ENOMEM, "out of memory");
			break;
		}
		if (is_temp(de->d_name)) {
			unlink(path);
			free(path);
			continue;
		}
		if (capy_kv_entry_read(path, &kv->id, CAPY_KV_READ_TOKENS, &en, &fi, &why) < 0) {
			if (why.code == CAPY_ENOMEM)
				rc = capy_err_set(err, CAPY_ENOMEM, "%s", why.msg);
			else
				refuse(kv, path, &why);
			capy_kv_file_info_free(&fi);
			free(path);
			continue;
		}
		capy_kv_file_info_free(&fi);
		/* nanoseconds of the modification time order the index until ticks take over */
		uint64_t mt = stat(path, &sb) == 0 ? (uint64_t)sb.st_mtim.tv_sec * 1000000000u + (uint64_t)sb.st_mtim.tv_nsec : 0;
		if ((rc = disk_add(kv, path, en, fi.file_bytes, mt, err)) < 0)
			free(path);
		capy_kv_entry_free(en);
	}
	closedir(d);
	if (rc < 0)
		return rc;
	if (kv->n_disk)
		qsort(kv->disk, kv->n_disk, sizeof(*kv->disk), cmp_used);
	for (size_t i = 0; i < kv->n_disk; i++)
		kv->disk[i].used = ++kv->tick;
	disk_shrink(kv);
	return 0;
}

/* --- host ------------------------------------------------------------------------------ */

static void host_remove(struct capy_kvstore *kv, size_t i)
{
	kv->st.host_bytes -= capy_kv_entry_bytes(kv->host[i].en);
	capy_kv_entry_free(kv->host[i].en);
	memmove(kv->host + i, kv->host + i + 1, (kv->n_host - i - 1) * sizeof(*kv->host));
	kv->n_host--;
}

/* Move the least recently used host entries to disk until the tier fits its budget. */
static int host_shrink(struct capy_kvstore *kv, struct capy_err *err)
{
	int rc = 0;

	while (kv->st.host_bytes > kv->o.host_bytes && kv->n_host) {
		size_t lru = 0;
		for (size_t i = 1; i < kv->n_host; i++)
			if (kv->host[i].used < kv->host[lru].used)
				lru = i;
		if (rc == 0)
			rc = to_disk(kv, kv->host[lru].en, err);
		host_remove(kv, lru);
	}
	return rc;
}

int capy_kvstore_open(struct capy_kvstore **out, struct capy_engine *e, const struct capy_kvstore_opts *opts,
		      struct capy_err *err)
{
	struct capy_kvstore *kv = calloc(1, sizeof(*kv));
	int rc;

	if (!kv)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	kv->e = e;
	kv->o = *opts;
	if (!kv->o.zstd_level)
		kv->o.zstd_level = DEFAULT_ZSTD_LEVEL;
	if (kv->o.disk_dir && !kv->o.disk_bytes)
		kv->o.disk_bytes = DEFAULT_DISK_BYTES;
	if ((rc = capy_kv_ident_of(e, &kv->id, err)) < 0)
		goto fail;
	if (opts->disk_dir) {
		if (!(kv->dir = strdup(opts->disk_dir))) {
			rc = capy_err_set(err, CAPY_ENOMEM, "out of memory");
			goto fail;
		}
		kv->o.disk_dir = kv->dir;
		if ((rc = disk_index(kv, err)) < 0)
			goto fail;
	}
	*out = kv;
	return 0;
fail:
	capy_kvstore_close(kv);
	return rc;
}

void capy_kvstore_close(struct capy_kvstore *kv)
{
	if (!kv)
		return;
	/* Oldest first, so the directory's modification times keep the LRU order. */
	kv->o.host_bytes = 0;
	host_shrink(kv, NULL);
	for (size_t i = 0; i < kv->n_disk; i++)
		disk_ent_free(&kv->disk[i]);
	free(kv->disk);
	free(kv->host);
	free(kv->dir);
	free(kv);
}

static bool same_tokens(const struct capy_kv_entry *a, const struct capy_kv_entry *b)
{
	return a->n_tokens == b->n_tokens && !memcmp(a->tokens, b->tokens, a->n_tokens * sizeof(int32_t));
}

int capy_kvstore_put(struct capy_kvstore *kv, const struct capy_seq *holder, const struct capy_snapshot *sn,
		     struct capy_err *err)
{
	struct capy_kv_entry *en;
	int rc;

	if ((rc = capy_kv_entry_capture(&en, &kv->id, holder, sn, err)) < 0)
		return rc;
	if (!kv->o.host_bytes || capy_kv_entry_bytes(en) > kv->o.host_bytes) {
		rc = to_disk(kv, en, err);
		capy_kv_entry_free(en);
		return rc;
	}
	for (size_t i = 0; i < kv->n_host; i++)
		if (same_tokens(kv->host[i].en, en)) { /* restored from here and evicted again */
			kv->host[i].used = ++kv->tick;
			capy_kv_entry_free(en);
			return 0;
		}
	if ((rc = grow((void **)&kv->host, &kv->cap_host, kv->n_host + 1, sizeof(*kv->host), err)) < 0) {
		capy_kv_entry_free(en);
		return rc;
	}
	kv->host[kv->n_host++] = (struct host_ent){ en, ++kv->tick };
	kv->st.host_bytes += capy_kv_entry_bytes(en);
	kv->st.demoted_host++;
	return host_shrink(kv, err);
}

static uint64_t common_prefix(const int32_t *a, const int32_t *b, uint64_t n)
{
	uint64_t i = 0;

	while (i < n && a[i] == b[i])
		i++;
	return i;
}

/* The last snapshot position of pos[0..k) at most m (0: none). */
static uint32_t best_snap(const uint64_t *pos, uint32_t k, uint64_t m, uint64_t *len)
{
	for (uint32_t i = k; i-- > 0;)
		if (pos[i] <= m) {
			*len = pos[i];
			return i;
		}
	*len = 0;
	return 0;
}

int capy_kvstore_lookup(struct capy_kvstore *kv, const int32_t *prompt, uint64_t n, uint64_t limit, uint64_t min_len,
			struct capy_seq **out, uint64_t *cached, enum capy_kv_tier *tier, struct capy_err *err)
{
	*out = NULL;
	*cached = 0;
	*tier = CAPY_KV_TIER_NONE;
	for (;;) {
		uint64_t best = min_len, len;
		size_t bi = SIZE_MAX;
		uint32_t bs = 0, s;
		bool on_disk = false;
		int rc;
		for (size_t i = 0; i < kv->n_host; i++) {
			const struct capy_kv_entry *en = kv->host[i].en;
			uint64_t m = common_prefix(en->tokens, prompt, CAPY_MIN(CAPY_MIN(en->n_tokens, n), limit));
			s = best_snap(en->snap_pos, en->n_snaps, m, &len);
			if (len > best)
				best = len, bi = i, bs = s;
		}
		for (size_t i = 0; i < kv->n_disk; i++) {
			const struct disk_ent *d = &kv->disk[i];
			uint64_t m = common_prefix(d->tokens, prompt, CAPY_MIN(CAPY_MIN(d->n_tokens, n), limit));
			s = best_snap(d->snap_pos, d->n_snaps, m, &len);
			if (len > best)
				best = len, bi = i, bs = s, on_disk = true;
		}
		if (bi == SIZE_MAX)
			return 0;
		double t0 = now_s();
		if (!on_disk) {
			if ((rc = capy_kv_entry_restore(kv->host[bi].en, bs, kv->e, out, err)) < 0)
				return rc;
			kv->host[bi].used = ++kv->tick;
			kv->st.host_hits++;
			kv->st.host_restored_tokens += best;
			*tier = CAPY_KV_TIER_HOST;
		} else {
			struct disk_ent *d = &kv->disk[bi];
			struct capy_kv_entry *en;
			struct capy_err why = { 0 };
			if (capy_kv_entry_read(d->path, &kv->id, 0, &en, NULL, &why) < 0) {
				if (why.code == CAPY_ENOMEM)
					return capy_err_set(err, CAPY_ENOMEM, "%s", why.msg);
				refuse(kv, d->path, &why);
				disk_remove(kv, bi, false);
				continue; /* the next best, if any */
			}
			rc = capy_kv_entry_restore(en, bs, kv->e, out, err);
			capy_kv_entry_free(en);
			if (rc < 0)
				return rc;
			utimensat(AT_FDCWD, d->path, NULL, 0); /* most recently used, across restarts too */
			d->used = ++kv->tick;
			kv->st.disk_hits++;
			kv->st.disk_restored_tokens += best;
			kv->st.disk_read_bytes += d->file_bytes;
			*tier = CAPY_KV_TIER_DISK;
		}
		kv->st.restore_s += now_s() - t0;
		*cached = best;
		return 0;
	}
}

void capy_kvstore_stats(const struct capy_kvstore *kv, struct capy_kvstore_stats *st)
{
	*st = kv->st;
	st->host_entries = kv->n_host;
	st->disk_entries = kv->n_disk;
}

bool capy_kvstore_has_disk(const struct capy_kvstore *kv)
{
	return kv->dir != NULL;
}
