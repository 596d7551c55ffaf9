/* u-kvstore.c - the context cache's lower tiers (libcore/kvstore): a cached prefix taken out
 * of the engine and put back is bitwise what it was (its logits after more tokens are the
 * same bits); the entry file round-trips; every corruption (magic, version, truncation at
 * several offsets, a flipped byte in the header and in each section, another model's entry)
 * is refused with its reason, and the tiers remove such a file; host -> disk demotion, LRU
 * bounds and a reopened directory (a restart) finding its entries. */
#include "test.h"
#include "test-fixture.h"
#include "engine/engine.h"
#include "kvstore/kvstore.h"

#include <dirent.h>
#include <sys/stat.h>

static struct capy_artifact *art;
static struct capy_engine *eng;
static uint64_t V;
static char dir[256];

#define N_PROMPT 150 /* more than two pages of 64 */

static void prompt_ids(int32_t *p, uint64_t n, int salt)
{
	for (uint64_t i = 0; i < n; i++)
		p[i] = (int32_t)((i * 7919u + (uint64_t)salt * 104729u + 3) % V);
}

/* A sequence that read prompt[0..n), and a holder and snapshot of it as the prefix cache
 * keeps them. */
static void cached(const int32_t *p, uint64_t n, struct capy_seq **holder, struct capy_snapshot **sn)
{
	struct capy_err err = { 0 };
	struct capy_seq *s;
	float *lg = malloc(V * sizeof(float));

	CHECK(capy_seq_new(eng, &s, &err) == 0);
	CHECK_MSG(capy_engine_forward(eng, s, p, n, lg, false, &err) == 0, "%s", err.msg);
	CHECK(capy_snapshot_take(s, sn, &err) == 0);
	CHECK(capy_seq_share(s, n, holder, &err) == 0);
	capy_seq_free(s);
	free(lg);
}

/* The logits of `more` tokens after s (consumed). */
static float *continue_seq(struct capy_seq *s, const int32_t *more, uint64_t n)
{
	struct capy_err err = { 0 };
	float *lg = malloc(n * V * sizeof(float));

	CHECK_MSG(capy_engine_forward(eng, s, more, n, lg, true, &err) == 0, "%s", err.msg);
	capy_seq_free(s);
	return lg;
}

/* The device tier's resume: the holder's pages shared, the snapshot restored. */
static struct capy_seq *device_resume(const struct capy_seq *holder, const struct capy_snapshot *sn)
{
	struct capy_err err = { 0 };
	struct capy_seq *s;

	CHECK(capy_seq_share(holder, capy_snapshot_len(sn), &s, &err) == 0);
	CHECK(capy_seq_restore(s, sn, &err) == 0);
	return s;
}

static void test_restore_is_bitwise(void)
{
	struct capy_err err = { 0 };
	struct capy_kv_ident id;
	struct capy_kv_entry *en, *again;
	struct capy_seq *h, *r;
	struct capy_snapshot *sn;
	int32_t p[N_PROMPT], more[9];

	prompt_ids(p, N_PROMPT, 1);
	prompt_ids(more, 9, 2);
	cached(p, N_PROMPT, &h, &sn);
	CHECK(capy_kv_ident_of(eng, &id, &err) == 0);
	CHECK_MSG(capy_kv_entry_capture(&en, &id, h, sn, &err) == 0, "%s", err.msg);
	CHECK_EQ_U64(capy_kv_entry_pages(en), 3);
	CHECK_MSG(capy_kv_entry_restore(en, 0, eng, &r, &err) == 0, "%s", err.msg);
	CHECK_EQ_U64(capy_seq_len(r), N_PROMPT);
	CHECK(!memcmp(capy_seq_tokens(r), p, sizeof(p)));
	/* taken out again, the same bytes */
	struct capy_snapshot *rs;
	CHECK(capy_snapshot_take(r, &rs, &err) == 0);
	CHECK(capy_kv_entry_capture(&again, &id, r, rs, &err) == 0);
	CHECK(!memcmp(again->pages, en->pages, capy_kv_entry_pages(en) * id.page_bytes));
	CHECK(!memcmp(again->states, en->states, id.state_bytes));
	/* and the next tokens' logits are the device tier's, bit for bit */
	float *a = continue_seq(r, more, 9), *b = continue_seq(device_resume(h, sn), more, 9);
	CHECK(!memcmp(a, b, 9 * V * sizeof(float)));
	free(a);
	free(b);
	capy_snapshot_free(rs);
	capy_kv_entry_free(again);
	capy_kv_entry_free(en);
	capy_snapshot_free(sn);
	capy_seq_free(h);
}

static void write_bytes(const char *path, const uint8_t *b, size_t n)
{
	FILE *f = fopen(path, "wb");
	CHECK(f && fwrite(b, 1, n, f) == n);
	fclose(f);
}

static uint8_t *read_bytes(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	uint8_t *b;

	CHECK(f != NULL);
	fseek(f, 0, SEEK_END);
	*n = (size_t)ftell(f);
	rewind(f);
	b = malloc(*n);
	CHECK(fread(b, 1, *n, f) == *n);
	fclose(f);
	return b;
}

static int n_refused;
static char last_refusal[1024];

static void on_refused(void *ud, const char *path, const char *why)
{
	(void)ud;
	(void)path;
	n_refused++;
	snprintf(last_refusal, sizeof(last_refusal), "%s", why);
}

/* bytes[0..n) as an entry file in the tier directory: refused by reading with `want_code`
 * and a message containing `reason`; then removed by the tiers' index (a restart), or, for
 * a fault in the pages or a state (which the index does not read), by the lookup of
 * `prompt` that reads the file. */
static const int32_t *lookup_prompt;

static void expect_refused(const uint8_t *bytes, size_t n, int want_code, const char *reason)
{
	char path[512];
	struct capy_kv_ident id;
	struct capy_err err = { 0 };
	struct capy_kv_entry *en = NULL;
	struct capy_kvstore *kv;
	struct stat sb;

	snprintf(path, sizeof(path), "%s/bad%s", dir, CAPY_KV_SUFFIX);
	write_bytes(path, bytes, n);
	CHECK(capy_kv_ident_of(eng, &id, &err) == 0);
	CHECK_EQ_INT(capy_kv_entry_read(path, &id, 0, &en, NULL, &err), want_code);
	CHECK(en == NULL);
	CHECK_CONTAINS(err.msg, reason);
	n_refused = 0;
	CHECK_MSG(capy_kvstore_open(&kv, eng, &(struct capy_kvstore_opts){ .disk_dir = dir, .refused = on_refused }, &err) == 0,
		  "%s", err.msg);
	if (!n_refused && (strstr(reason, "(pages)") || strstr(reason, "(state)"))) {
		struct capy_seq *r;
		uint64_t c;
		enum capy_kv_tier t;
		CHECK(stat(path, &sb) == 0);
		CHECK(capy_kvstore_lookup(kv, lookup_prompt, N_PROMPT + 1, N_PROMPT, 0, &r, &c, &t, &err) == 0);
		CHECK(!r && c == 0);
	}
	CHECK_EQ_INT(n_refused, 1);
	CHECK_CONTAINS(last_refusal, reason);
	CHECK(stat(path, &sb) < 0 && errno == ENOENT);
	capy_kvstore_close(kv);
}

static void test_file_round_trip_and_corruption(void)
{
	struct capy_err err = { 0 };
	struct capy_kv_ident id;
	struct capy_kv_entry *en, *back;
	struct capy_kv_file_info fi;
	struct capy_seq *h, *r;
	struct capy_snapshot *sn;
	int32_t p[N_PROMPT + 1], more[5];
	char path[512];
	uint64_t fb;
	size_t n;

	prompt_ids(p, N_PROMPT + 1, 3);
	prompt_ids(more, 5, 4);
	lookup_prompt = p;
	cached(p, N_PROMPT, &h, &sn);
	CHECK(capy_kv_ident_of(eng, &id, &err) == 0);
	CHECK(capy_kv_entry_capture(&en, &id, h, sn, &err) == 0);
	snprintf(path, sizeof(path), "%s/good%s", dir, CAPY_KV_SUFFIX);
	CHECK_MSG(capy_kv_entry_write(en, path, 1, &fb, &err) == 0, "%s", err.msg);
	CHECK_MSG(capy_kv_entry_read(path, &id, 0, &back, &fi, &err) == 0, "%s", err.msg);
	CHECK_EQ_U64(fi.file_bytes, fb);
	CHECK_EQ_U64(back->n_tokens, N_PROMPT);
	CHECK(!memcmp(back->tokens, p, N_PROMPT * sizeof(int32_t)));
	CHECK(!memcmp(back->pages, en->pages, capy_kv_entry_pages(en) * id.page_bytes));
	CHECK(!memcmp(back->states, en->states, id.state_bytes));
	CHECK(capy_kv_entry_restore(back, 0, eng, &r, &err) == 0);
	float *a = continue_seq(r, more, 5), *b = continue_seq(device_resume(h, sn), more, 5);
	CHECK(!memcmp(a, b, 5 * V * sizeof(float)));
	free(a);
	free(b);

	uint8_t *good = read_bytes(path, &n), *bad = malloc(n);
	unlink(path);
	CHECK_EQ_U64(n, fb);
	memcpy(bad, good, n);
	bad[0] ^= 1;
	expect_refused(bad, n, CAPY_EFORMAT, "bad magic");
	memcpy(bad, good, n);
	bad[8] = 2;
	expect_refused(bad, n, CAPY_EUNSUPPORTED, "version 2");
	const size_t cuts[] = { 0, 7, 60, 104, 150, fi.sections[2].offset + 10, n / 2, n - 1 };
	for (size_t i = 0; i < ARRAY_SIZE(cuts); i++)
		expect_refused(good, cuts[i], CAPY_EFORMAT, "truncated");
	memcpy(bad, good, n);
	bad[40] ^= 0x10; /* the page size, in the header: its checksum */
	expect_refused(bad, n, CAPY_ECHECKSUM, "header checksum");
	for (uint32_t s = 0; s < fi.n_sections; s++) {
		char name[64];
		memcpy(bad, good, n);
		bad[fi.sections[s].offset + fi.sections[s].stored / 2] ^= 0x40;
		snprintf(name, sizeof(name), "section %" PRIu32 " (%s)", s, capy_kv_section_name(fi.sections[s].type));
		/* zstd notices some flips itself; the checksum catches the rest */
		struct capy_kv_entry *x = NULL;
		char p2[512];
		snprintf(p2, sizeof(p2), "%s/flip%s", dir, CAPY_KV_SUFFIX);
		write_bytes(p2, bad, n);
		int rc = capy_kv_entry_read(p2, &id, 0, &x, NULL, &err);
		unlink(p2);
		CHECK_MSG(rc == CAPY_ECHECKSUM || rc == CAPY_EFORMAT, "section %u: %d", s, rc);
		expect_refused(bad, n, rc, name);
	}
	/* another model's entry: a well-formed file with another identity */
	struct capy_kv_ident other = id;
	other.model ^= 1;
	en->id = other;
	CHECK(capy_kv_entry_write(en, path, 1, NULL, &err) == 0);
	free(good);
	good = read_bytes(path, &n);
	unlink(path);
	expect_refused(good, n, CAPY_EINVAL, "another model's entry");
	en->id = id;
	free(good);
	free(bad);
	capy_kv_file_info_free(&fi);
	capy_kv_entry_free(back);
	capy_kv_entry_free(en);
	capy_snapshot_free(sn);
	capy_seq_free(h);
}

static size_t count_files(void)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	size_t n = 0;

	while (d && (de = readdir(d)))
		n += strstr(de->d_name, CAPY_KV_SUFFIX) != NULL;
	if (d)
		closedir(d);
	return n;
}

/* Host -> disk demotion, lookups from each tier, the disk's LRU bound, and a restart. */
static void test_tiers(void)
{
	struct capy_err err = { 0 };
	struct capy_kvstore *kv;
	struct capy_kvstore_stats st;
	struct capy_seq *h[3], *r;
	struct capy_snapshot *sn[3];
	int32_t p[3][N_PROMPT + 20];
	uint64_t cached_n;
	enum capy_kv_tier tier;
	struct capy_kv_ident id;

	CHECK(capy_kv_ident_of(eng, &id, &err) == 0);
	for (int i = 0; i < 3; i++) {
		prompt_ids(p[i], N_PROMPT + 20, 10 + i);
		cached(p[i], N_PROMPT, &h[i], &sn[i]);
	}
	uint64_t one = 3 * id.page_bytes + id.state_bytes + N_PROMPT * 4 + 8;
	/* host holds one entry; the disk about two files */
	CHECK_MSG(capy_kvstore_open(&kv, eng, &(struct capy_kvstore_opts){ .host_bytes = one + 100, .disk_dir = dir,
			.disk_bytes = 1 }, &err) == 0, "%s", err.msg);
	CHECK(capy_kvstore_put(kv, h[0], sn[0], &err) == 0);
	capy_kvstore_stats(kv, &st);
	CHECK_EQ_U64(st.host_entries, 1);
	CHECK_EQ_U64(st.disk_entries, 0);
	CHECK(capy_kvstore_put(kv, h[1], sn[1], &err) == 0); /* pushes 0 to disk, which cannot hold it */
	capy_kvstore_stats(kv, &st);
	CHECK_EQ_U64(st.host_entries, 1);
	CHECK_EQ_U64(st.demoted_disk, 1);
	CHECK_EQ_U64(st.disk_entries, 0);
	CHECK_EQ_U64(st.dropped, 1);
	capy_kvstore_close(kv); /* 1 goes to disk, too large again */
	CHECK_EQ_U64(count_files(), 0);

	CHECK(capy_kvstore_open(&kv, eng, &(struct capy_kvstore_opts){ .host_bytes = one + 100, .disk_dir = dir,
			.disk_bytes = 1u << 30 }, &err) == 0);
	for (int i = 0; i < 3; i++)
		CHECK(capy_kvstore_put(kv, h[i], sn[i], &err) == 0);
	capy_kvstore_stats(kv, &st);
	CHECK_EQ_U64(st.host_entries, 1);
	CHECK_EQ_U64(st.disk_entries, 2);
	uint64_t file = st.disk_bytes / 2;
	/* prompt 2 is in host RAM, 0 and 1 on disk; a prompt that goes on past them */
	CHECK(capy_kvstore_lookup(kv, p[2], N_PROMPT + 20, N_PROMPT + 19, 0, &r, &cached_n, &tier, &err) == 0);
	CHECK(r && tier == CAPY_KV_TIER_HOST && cached_n == N_PROMPT);
	float *a = continue_seq(r, p[2] + N_PROMPT, 20), *b = continue_seq(device_resume(h[2], sn[2]), p[2] + N_PROMPT, 20);
	CHECK(!memcmp(a, b, 20 * V * sizeof(float)));
	free(a);
	free(b);
	CHECK(capy_kvstore_lookup(kv, p[0], N_PROMPT + 20, N_PROMPT + 19, 0, &r, &cached_n, &tier, &err) == 0);
	CHECK(r && tier == CAPY_KV_TIER_DISK && cached_n == N_PROMPT);
	a = continue_seq(r, p[0] + N_PROMPT, 20), b = continue_seq(device_resume(h[0], sn[0]), p[0] + N_PROMPT, 20);
	CHECK(!memcmp(a, b, 20 * V * sizeof(float)));
	free(a);
	free(b);
	/* not beyond min_len (the device tier had as much), nor past limit */
	CHECK(capy_kvstore_lookup(kv, p[0], N_PROMPT + 20, N_PROMPT + 19, N_PROMPT, &r, &cached_n, &tier, &err) == 0);
	CHECK(!r && cached_n == 0 && tier == CAPY_KV_TIER_NONE);
	CHECK(capy_kvstore_lookup(kv, p[0], N_PROMPT + 20, N_PROMPT - 1, 0, &r, &cached_n, &tier, &err) == 0);
	CHECK(!r);
	capy_kvstore_close(kv); /* the host entry joins the others on disk */
	CHECK_EQ_U64(count_files(), 3);

	/* a restart with room for two files: the least recently used (1: 0 was hit) goes */
	CHECK(capy_kvstore_open(&kv, eng, &(struct capy_kvstore_opts){ .disk_dir = dir, .disk_bytes = 2 * file + file / 2 },
				&err) == 0);
	capy_kvstore_stats(kv, &st);
	CHECK_EQ_U64(st.disk_entries, 2);
	CHECK_EQ_U64(count_files(), 2);
	CHECK(capy_kvstore_lookup(kv, p[1], N_PROMPT + 20, N_PROMPT + 19, 0, &r, &cached_n, &tier, &err) == 0);
	CHECK(!r);
	for (int i = 0; i < 3; i += 2) {
		CHECK(capy_kvstore_lookup(kv, p[i], N_PROMPT + 20, N_PROMPT + 19, 0, &r, &cached_n, &tier, &err) == 0);
		CHECK(r && tier == CAPY_KV_TIER_DISK && cached_n == N_PROMPT);
		capy_seq_free(r);
	}
	capy_kvstore_close(kv);
	for (int i = 0; i < 3; i++) {
		capy_snapshot_free(sn[i]);
		capy_seq_free(h[i]);
	}
}

static void clear_dir(void)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	char p[600];

	while (d && (de = readdir(d)))
		if (de->d_name[0] != '.' || strstr(de->d_name, ".tmp.")) {
			snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
			unlink(p);
		}
	if (d)
		closedir(d);
}

static void run_on(const char *fixture, enum capy_kv_dtype kv)
{
	struct capy_err err = { 0 };

	art = test_open_fixture(fixture);
	CHECK_MSG(capy_engine_new(&eng, art, &(struct capy_engine_opts){ .threads = 2, .kv = kv }, &err) == 0, "%s",
		  err.msg);
	V = capy_engine_config(eng)->vocab_size;
	RUN(test_restore_is_bitwise);
	clear_dir();
	RUN(test_file_round_trip_and_corruption);
	clear_dir();
	RUN(test_tiers);
	clear_dir();
	capy_engine_free(eng);
	capy_artifact_close(art);
}

int main(void)
{
	snprintf(dir, sizeof(dir), "/tmp/capy-unit-kv-%d", (int)getpid());
	CHECK(mkdir(dir, 0777) == 0);
	run_on("qwen3_5_moe", CAPY_KV_BF16);
	run_on("qwen4_exp", CAPY_KV_INT8); /* QSA keys, PLE state, INT8 scales */
	rmdir(dir);
	return test_summary();
}
