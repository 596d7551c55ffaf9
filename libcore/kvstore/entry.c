/* entry.c - a context-cache entry: its identity, taken from and given back to the engine,
 * and its file format (kvstore.h, docs/kv-cache.md). Integers are little-endian. */
#include "kvstore.h"
#include "../util/file.h"
#include "../util/hash.h"

#include <fcntl.h>
#include <unistd.h>
#include <zstd.h>

#define HEADER_BYTES 104       /* the fixed header; its checksum at 96 */
#define SECTION_BYTES 40       /* one row of the section table */
#define CODEC_ZSTD 1
#define MAX_SNAPS 4096
#define MAX_TOKENS (1ull << 26)  /* above any context: bounds what a header can make us allocate */
#define MAX_RATIO 65536          /* raw bytes per stored byte no zstd frame exceeds (RLE blocks: 32768) */

const char *capy_kv_tier_name(enum capy_kv_tier t)
{
	static const char *names[] = { "none", "device", "host", "disk" };
	return (unsigned)t < ARRAY_SIZE(names) ? names[t] : "?";
}

const char *capy_kv_section_name(uint32_t type)
{
	static const char *names[] = { "?", "tokens", "positions", "pages", "state" };
	return type < ARRAY_SIZE(names) ? names[type] : "?";
}

uint64_t capy_kv_model_id(const struct capy_artifact *a)
{
	struct capy_hasher *h = capy_hasher_new();
	uint64_t id;

	if (!h) /* out of memory: an identity no entry has, so none is taken for this model */
		return 0;
	for (size_t i = 0; i < a->ntensors; i++)
		capy_hasher_update(h, &a->tensors[i].xxh3, sizeof(a->tensors[i].xxh3));
	for (size_t i = 0; i < a->nfiles; i++)
		capy_hasher_update(h, &a->files[i].xxh3, sizeof(a->files[i].xxh3));
	id = capy_hasher_digest(h);
	capy_hasher_free(h);
	return id;
}

int capy_kv_ident_of(const struct capy_engine *e, struct capy_kv_ident *out, struct capy_err *err)
{
	const struct capy_model_config *c = capy_engine_config(e);

	if (!capy_engine_can_export(e))
		return capy_err_set(err, CAPY_EUNSUPPORTED, "the %s backend cannot move cached state to host memory",
				    capy_engine_device(e));
	memset(out, 0, sizeof(*out));
	out->model = capy_kv_model_id(capy_engine_artifact(e));
	out->family = (uint32_t)c->family;
	out->n_layers = (uint32_t)c->n_layers;
	for (uint64_t i = 0; i < c->n_layers; i++)
		out->n_kv_layers += c->layer_types[i] != CAPY_LAYER_LINEAR;
	out->kv_dtype = (uint32_t)capy_engine_kv_dtype(e);
	out->page_tokens = capy_engine_page_tokens(e);
	out->page_bytes = capy_engine_page_bytes(e);
	out->state_bytes = capy_engine_state_io_bytes(e);
	snprintf(out->backend, sizeof(out->backend), "%s", capy_engine_device(e));
	return 0;
}

static const char *dtype_name(uint32_t d)
{
	static const char *names[] = { "bf16", "f32", "int8" };
	return d < ARRAY_SIZE(names) ? names[d] : "?";
}

int capy_kv_ident_check(const struct capy_kv_ident *want, const struct capy_kv_ident *got, char *why, size_t size)
{
	char a[17], b[17];

	if (got->model != want->model) {
		capy_hash_hex(got->model, a);
		capy_hash_hex(want->model, b);
		snprintf(why, size, "another model's entry: model %s (this one is %s)", a, b);
	} else if (got->family != want->family || got->n_layers != want->n_layers || got->n_kv_layers != want->n_kv_layers) {
		snprintf(why, size, "family %" PRIu32 " with %" PRIu32 " layers (%" PRIu32 " attention), expected %" PRIu32
			 " with %" PRIu32 " (%" PRIu32 ")", got->family, got->n_layers, got->n_kv_layers, want->family,
			 want->n_layers, want->n_kv_layers);
	} else if (got->kv_dtype != want->kv_dtype) {
		snprintf(why, size, "KV dtype %s, this engine keeps %s", dtype_name(got->kv_dtype), dtype_name(want->kv_dtype));
	} else if (strncmp(got->backend, want->backend, sizeof(got->backend))) {
		snprintf(why, size, "taken on the %.16s backend, this one is %.16s", got->backend, want->backend);
	} else if (got->page_tokens != want->page_tokens || got->page_bytes != want->page_bytes ||
		   got->state_bytes != want->state_bytes) {
		snprintf(why, size, "pages of %" PRIu64 " tokens / %" PRIu64 " bytes and states of %" PRIu64
			 " bytes, expected %" PRIu64 " / %" PRIu64 " / %" PRIu64, got->page_tokens, got->page_bytes,
			 got->state_bytes, want->page_tokens, want->page_bytes, want->state_bytes);
	} else {
		return 0;
	}
	return -1;
}

uint64_t capy_kv_entry_pages(const struct capy_kv_entry *en)
{
	return (en->n_tokens + en->id.page_tokens - 1) / en->id.page_tokens;
}

uint64_t capy_kv_entry_bytes(const struct capy_kv_entry *en)
{
	return en->n_tokens * sizeof(int32_t) + en->n_snaps * (sizeof(uint64_t) + en->id.state_bytes) +
	       capy_kv_entry_pages(en) * en->id.page_bytes;
}

void capy_kv_entry_free(struct capy_kv_entry *en)
{
	if (!en)
		return;
	free(en->tokens);
	free(en->snap_pos);
	free(en->pages);
	free(en->states);
	free(en);
}

/* An entry of n tokens and s snapshots with its arrays allocated (pages and states only
 * when `payload`). */
static int entry_alloc(struct capy_kv_entry **out, const struct capy_kv_ident *id, uint64_t n, uint32_t s, bool payload,
		       struct capy_err *err)
{
	struct capy_kv_entry *en = calloc(1, sizeof(*en));
	uint64_t pages = (n + id->page_tokens - 1) / id->page_tokens, pb, sb;

	if (en) {
		en->id = *id;
		en->n_tokens = n;
		en->n_snaps = s;
		en->tokens = malloc(n * sizeof(int32_t) + 1);
		en->snap_pos = malloc(s * sizeof(uint64_t) + 1);
	}
	if (en && payload && !capy_mul_overflow(pages, id->page_bytes, &pb) && !capy_mul_overflow(s, id->state_bytes, &sb)) {
		en->pages = malloc(pb + 1);
		en->states = malloc(sb + 1);
	}
	if (!en || !en->tokens || !en->snap_pos || (payload && (!en->pages || !en->states))) {
		capy_kv_entry_free(en);
		return capy_err_set(err, CAPY_ENOMEM, "out of memory for a cache entry of %" PRIu64 " tokens", n);
	}
	*out = en;
	return 0;
}

int capy_kv_entry_capture(struct capy_kv_entry **out, const struct capy_kv_ident *id, const struct capy_seq *holder,
			  const struct capy_snapshot *sn, struct capy_err *err)
{
	uint64_t n = capy_snapshot_len(sn);
	struct capy_kv_entry *en;
	int rc;

	if (!n || n > capy_seq_len(holder))
		return capy_err_set(err, CAPY_EINVAL, "a snapshot at %" PRIu64 " tokens is not inside a holder of %" PRIu64, n,
				    capy_seq_len(holder));
	if ((rc = entry_alloc(&en, id, n, 1, true, err)) < 0)
		return rc;
	memcpy(en->tokens, capy_seq_tokens(holder), n * sizeof(int32_t));
	en->snap_pos[0] = n;
	if ((rc = capy_seq_export_pages(holder, n, en->pages, err)) < 0 || (rc = capy_snapshot_export(sn, en->states, err)) < 0) {
		capy_kv_entry_free(en);
		return rc;
	}
	*out = en;
	return 0;
}

int capy_kv_entry_restore(const struct capy_kv_entry *en, uint32_t snap, struct capy_engine *e, struct capy_seq **out,
			  struct capy_err *err)
{
	if (snap >= en->n_snaps || !en->pages)
		return capy_err_set(err, CAPY_EINVAL, "no snapshot %" PRIu32 " in a cache entry of %" PRIu32, snap, en->n_snaps);
	/* The pages of [0, pos) are the first ones of the entry's: the same bytes. */
	return capy_seq_import(e, en->tokens, en->snap_pos[snap], en->pages, en->states + snap * en->id.state_bytes, out, err);
}

/* --- the file ----------------------------------------------------------------------------- */

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 0; i < 4; i++)
		v |= (uint32_t)p[i] << (8 * i);
	return v;
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

/* The header checksum: XXH3-64 of the header before it and the section table after it. */
static uint64_t header_sum(const uint8_t *hdr, const uint8_t *table, size_t table_bytes)
{
	struct capy_hasher *h = capy_hasher_new();
	uint64_t v;

	if (!h)
		return 0;
	capy_hasher_update(h, hdr, 96);
	capy_hasher_update(h, table, table_bytes);
	v = capy_hasher_digest(h);
	capy_hasher_free(h);
	return v;
}

static void encode_header(uint8_t *p, const struct capy_kv_ident *id, uint64_t n_tokens, uint32_t n_snaps, uint32_t n_sec)
{
	memset(p, 0, HEADER_BYTES);
	memcpy(p, CAPY_KV_MAGIC, 8);
	put32(p + 8, CAPY_KV_VERSION);
	put32(p + 12, n_sec);
	put64(p + 16, id->model);
	put32(p + 24, id->family);
	put32(p + 28, id->n_layers);
	put32(p + 32, id->n_kv_layers);
	put32(p + 36, id->kv_dtype);
	put64(p + 40, id->page_tokens);
	put64(p + 48, id->page_bytes);
	put64(p + 56, id->state_bytes);
	memcpy(p + 64, id->backend, 16);
	put64(p + 80, n_tokens);
	put32(p + 88, n_snaps);
}

int capy_kv_entry_write(const struct capy_kv_entry *en, const char *path, int level, uint64_t *file_bytes,
			struct capy_err *err)
{
	uint32_t n_sec = 3 + en->n_snaps;
	size_t table_bytes = (size_t)n_sec * SECTION_BYTES;
	uint8_t hdr[HEADER_BYTES], *table = calloc(n_sec, SECTION_BYTES);
	const void *raw[3 + MAX_SNAPS];
	uint64_t raw_len[3 + MAX_SNAPS], off = HEADER_BYTES + table_bytes;
	void *buf = NULL;
	size_t cap = 0;
	struct capy_outfile o = { .fd = -1 };
	int rc;

	if (!table)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	if (en->n_snaps > MAX_SNAPS || !en->pages) {
		free(table);
		return capy_err_set(err, CAPY_EINVAL, "'%s': an entry of %" PRIu32 " snapshots cannot be written", path,
				    en->n_snaps);
	}
	raw[0] = en->tokens, raw_len[0] = en->n_tokens * sizeof(int32_t);
	raw[1] = en->snap_pos, raw_len[1] = en->n_snaps * sizeof(uint64_t);
	raw[2] = en->pages, raw_len[2] = capy_kv_entry_pages(en) * en->id.page_bytes;
	for (uint32_t i = 0; i < en->n_snaps; i++)
		raw[3 + i] = en->states + i * en->id.state_bytes, raw_len[3 + i] = en->id.state_bytes;
	if ((rc = capy_outfile_open(&o, path, err)) < 0) {
		free(table);
		return rc;
	}
	/* Little-endian hosts only (x86-64, arm64): ids and positions are written as they are
	 * in memory. */
	for (uint32_t i = 0; i < n_sec; i++) {
		size_t bound = ZSTD_compressBound(raw_len[i]), z;
		uint8_t *row = table + (size_t)i * SECTION_BYTES;
		if (bound > cap) {
			void *nb = realloc(buf, bound);
			if (!nb) {
				rc = capy_err_set(err, CAPY_ENOMEM, "out of memory compressing '%s'", path);
				goto fail;
			}
			buf = nb;
			cap = bound;
		}
		z = ZSTD_compress(buf, cap, raw[i], raw_len[i], level);
		if (ZSTD_isError(z)) {
			rc = capy_err_set(err, CAPY_EIO, "'%s': zstd: %s", path, ZSTD_getErrorName(z));
			goto fail;
		}
		put32(row, i < 3 ? (uint32_t)(i + 1) : CAPY_KV_SEC_STATE);
		put32(row + 4, CODEC_ZSTD);
		put64(row + 8, raw_len[i]);
		put64(row + 16, z);
		put64(row + 24, off);
		put64(row + 32, capy_xxh3(raw[i], raw_len[i]));
		if ((rc = capy_pwrite_full(o.fd, buf, z, off, o.tmp_path, err)) < 0)
			goto fail;
		off += z;
	}
	encode_header(hdr, &en->id, en->n_tokens, en->n_snaps, n_sec);
	put64(hdr + 96, header_sum(hdr, table, table_bytes));
	if ((rc = capy_pwrite_full(o.fd, hdr, HEADER_BYTES, 0, o.tmp_path, err)) < 0 ||
	    (rc = capy_pwrite_full(o.fd, table, table_bytes, HEADER_BYTES, o.tmp_path, err)) < 0 ||
	    (rc = capy_outfile_commit(&o, err)) < 0)
		goto fail;
	free(buf);
	free(table);
	if (file_bytes)
		*file_bytes = off;
	return 0;
fail:
	capy_outfile_abort(&o);
	free(buf);
	free(table);
	return rc;
}

void capy_kv_file_info_free(struct capy_kv_file_info *fi)
{
	if (!fi)
		return;
	free(fi->sections);
	fi->sections = NULL;
}

/* The header and section table of the open file, checked for structure. */
static int read_header(int fd, const char *path, struct capy_kv_file_info *fi, struct capy_err *err)
{
	uint8_t hdr[HEADER_BYTES], *table;
	size_t table_bytes;
	uint64_t off, pages;
	int rc;

	if (fi->file_bytes < HEADER_BYTES)
		return capy_err_set(err, CAPY_EFORMAT, "'%s': truncated: %" PRIu64 " bytes, the header alone is %d", path,
				    fi->file_bytes, HEADER_BYTES);
	if ((rc = capy_pread_full(fd, hdr, HEADER_BYTES, 0, path, err)) < 0)
		return rc;
	if (memcmp(hdr, CAPY_KV_MAGIC, 8))
		return capy_err_set(err, CAPY_EFORMAT, "'%s': not a context-cache entry (bad magic at offset 0)", path);
	fi->version = get32(hdr + 8);
	if (fi->version != CAPY_KV_VERSION)
		return capy_err_set(err, CAPY_EUNSUPPORTED, "'%s': entry format version %" PRIu32 ", this build reads %d", path,
				    fi->version, CAPY_KV_VERSION);
	fi->n_sections = get32(hdr + 12);
	fi->id.model = get64(hdr + 16);
	fi->id.family = get32(hdr + 24);
	fi->id.n_layers = get32(hdr + 28);
	fi->id.n_kv_layers = get32(hdr + 32);
	fi->id.kv_dtype = get32(hdr + 36);
	fi->id.page_tokens = get64(hdr + 40);
	fi->id.page_bytes = get64(hdr + 48);
	fi->id.state_bytes = get64(hdr + 56);
	memcpy(fi->id.backend, hdr + 64, 16);
	fi->id.backend[15] = 0;
	fi->n_tokens = get64(hdr + 80);
	fi->n_snaps = get32(hdr + 88);
	fi->header_xxh3 = get64(hdr + 96);
	if (!fi->n_snaps || fi->n_snaps > MAX_SNAPS || fi->n_sections != 3 + fi->n_snaps)
		return capy_err_set(err, CAPY_EFORMAT, "'%s': %" PRIu32 " sections for %" PRIu32 " snapshots (offset 12)", path,
				    fi->n_sections, fi->n_snaps);
	table_bytes = (size_t)fi->n_sections * SECTION_BYTES;
	if (fi->file_bytes < HEADER_BYTES + table_bytes)
		return capy_err_set(err, CAPY_EFORMAT, "'%s': truncated: %" PRIu64 " bytes, the section table ends at %zu", path,
				    fi->file_bytes, HEADER_BYTES + table_bytes);
	if (!(table = malloc(table_bytes)) || !(fi->sections = calloc(fi->n_sections, sizeof(*fi->sections)))) {
		free(table);
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	}
	if ((rc = capy_pread_full(fd, table, table_bytes, HEADER_BYTES, path, err)) < 0) {
		free(table);
		return rc;
	}
	if (header_sum(hdr, table, table_bytes) != fi->header_xxh3) {
		free(table);
		return capy_err_set(err, CAPY_ECHECKSUM, "'%s': header checksum mismatch (offset 96)", path);
	}
	if (!fi->id.page_tokens || !fi->id.page_bytes || !fi->n_tokens || fi->n_tokens > MAX_TOKENS) {
		free(table);
		return capy_err_set(err, CAPY_EFORMAT, "'%s': an entry of %" PRIu64 " tokens in pages of %" PRIu64 " (offset 40)",
				    path, fi->n_tokens, fi->id.page_tokens);
	}
	pages = (fi->n_tokens + fi->id.page_tokens - 1) / fi->id.page_tokens;
	uint64_t pages_raw;
	if (capy_mul_overflow(pages, fi->id.page_bytes, &pages_raw)) {
		free(table);
		return capy_err_set(err, CAPY_EFORMAT, "'%s': %" PRIu64 " pages of %" PRIu64 " bytes (offset 48)", path, pages,
				    fi->id.page_bytes);
	}
	off = HEADER_BYTES + table_bytes;
	fi->raw_bytes = 0;
	for (uint32_t i = 0; i < fi->n_sections; i++) {
		struct capy_kv_section_info *s = &fi->sections[i];
		const uint8_t *row = table + (size_t)i * SECTION_BYTES;
		uint32_t want_type = i < 3 ? i + 1 : CAPY_KV_SEC_STATE;
		uint64_t want_raw = i == 0 ? fi->n_tokens * 4 : i == 1 ? (uint64_t)fi->n_snaps * 8 :
				    i == 2 ? pages_raw : fi->id.state_bytes;
		s->type = get32(row);
		s->raw = get64(row + 8);
		s->stored = get64(row + 16);
		s->offset = get64(row + 24);
		s->xxh3 = get64(row + 32);
		if (s->type != want_type || get32(row + 4) != CODEC_ZSTD || s->raw != want_raw || s->offset != off) {
			free(table);
			return capy_err_set(err, CAPY_EFORMAT, "'%s': section %" PRIu32 " (%s): type %" PRIu32 ", %" PRIu64
					    " bytes at %" PRIu64 ", expected %s of %" PRIu64 " bytes at %" PRIu64, path, i,
					    capy_kv_section_name(want_type), s->type, s->raw, s->offset,
					    capy_kv_section_name(want_type), want_raw, off);
		}
		if (s->raw / MAX_RATIO > s->stored) { /* no zstd frame of that size holds so much */
			free(table);
			return capy_err_set(err, CAPY_EFORMAT, "'%s': section %" PRIu32 " (%s): %" PRIu64 " bytes cannot be stored in %"
					    PRIu64, path, i, capy_kv_section_name(s->type), s->raw, s->stored);
		}
		if (capy_add_overflow(off, s->stored, &off) || off > fi->file_bytes) {
			free(table);
			return capy_err_set(err, CAPY_EFORMAT, "'%s': truncated: %" PRIu64 " bytes, section %" PRIu32
					    " (%s) ends at %" PRIu64, path, fi->file_bytes, i, capy_kv_section_name(s->type),
					    s->offset + s->stored);
		}
		fi->raw_bytes += s->raw;
	}
	free(table);
	if (off != fi->file_bytes)
		return capy_err_set(err, CAPY_EFORMAT, "'%s': %" PRIu64 " bytes after the last section (offset %" PRIu64 ")",
				    path, fi->file_bytes - off, off);
	return 0;
}

/* Section i into dst (its raw bytes), decompressed and checked. */
static int read_section(int fd, const char *path, const struct capy_kv_section_info *s, uint32_t i, void *dst,
			struct capy_err *err)
{
	void *z = malloc(s->stored + 1);
	size_t got;
	int rc;

	if (!z)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory reading '%s'", path);
	if ((rc = capy_pread_full(fd, z, s->stored, s->offset, path, err)) < 0) {
		free(z);
		return rc;
	}
	got = ZSTD_decompress(dst, s->raw, z, s->stored);
	free(z);
	if (ZSTD_isError(got))
		return capy_err_set(err, CAPY_EFORMAT, "'%s': section %" PRIu32 " (%s) at offset %" PRIu64 ": zstd: %s", path, i,
				    capy_kv_section_name(s->type), s->offset, ZSTD_getErrorName(got));
	if (got != s->raw)
		return capy_err_set(err, CAPY_EFORMAT, "'%s': section %" PRIu32 " (%s): %zu bytes, the table says %" PRIu64,
				    path, i, capy_kv_section_name(s->type), got, s->raw);
	if (capy_xxh3(dst, s->raw) != s->xxh3)
		return capy_err_set(err, CAPY_ECHECKSUM, "'%s': section %" PRIu32 " (%s) checksum mismatch", path, i,
				    capy_kv_section_name(s->type));
	return 0;
}

int capy_kv_entry_read(const char *path, const struct capy_kv_ident *want, int flags, struct capy_kv_entry **out,
		       struct capy_kv_file_info *info, struct capy_err *err)
{
	struct capy_kv_file_info fi = { 0 };
	struct capy_kv_entry *en = NULL;
	bool payload = !(flags & CAPY_KV_READ_TOKENS);
	char why[256];
	int fd, rc;

	if (out)
		*out = NULL;
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return capy_err_errno(err, errno, "cannot open '%s'", path);
	if ((rc = capy_file_size(path, &fi.file_bytes, err)) < 0 || (rc = read_header(fd, path, &fi, err)) < 0)
		goto done;
	if (want && capy_kv_ident_check(want, &fi.id, why, sizeof(why)) < 0) {
		rc = capy_err_set(err, CAPY_EINVAL, "'%s': %s", path, why);
		goto done;
	}
	if ((rc = entry_alloc(&en, &fi.id, fi.n_tokens, fi.n_snaps, payload, err)) < 0)
		goto done;
	if ((rc = read_section(fd, path, &fi.sections[0], 0, en->tokens, err)) < 0 ||
	    (rc = read_section(fd, path, &fi.sections[1], 1, en->snap_pos, err)) < 0)
		goto done;
	for (uint32_t i = 0; i < fi.n_snaps; i++)
		if (!en->snap_pos[i] || en->snap_pos[i] > fi.n_tokens || (i && en->snap_pos[i] <= en->snap_pos[i - 1]) ||
		    (i + 1 == fi.n_snaps && en->snap_pos[i] != fi.n_tokens)) {
			rc = capy_err_set(err, CAPY_EFORMAT, "'%s': snapshot %" PRIu32 " at %" PRIu64 " in an entry of %" PRIu64
					  " tokens", path, i, en->snap_pos[i], fi.n_tokens);
			goto done;
		}
	if (payload) {
		if ((rc = read_section(fd, path, &fi.sections[2], 2, en->pages, err)) < 0)
			goto done;
		for (uint32_t i = 0; i < fi.n_snaps; i++)
			if ((rc = read_section(fd, path, &fi.sections[3 + i], 3 + i, en->states + i * fi.id.state_bytes, err)) < 0)
				goto done;
	}
done:
	close(fd);
	if (rc < 0 || !out)
		capy_kv_entry_free(en);
	else
		*out = en;
	if (info)
		*info = fi;
	else
		capy_kv_file_info_free(&fi);
	return rc;
}
