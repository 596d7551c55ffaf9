/* u-artifact.c - writing an artifact, opening it, and refusing every damaged variant
 * with the exact reason. */
#include "test.h"
#include "artifact/artifact.h"
#include "util/file.h"
#include "util/hash.h"

#include <unistd.h>

static char path[256];
static uint8_t *img;
static uint64_t img_size;

static void put_u64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_u64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* Recompute both checksums after the directory was edited. */
static void reseal(uint8_t *b)
{
	put_u64(b + 48, capy_xxh3(b + 64, get_u64(b + 24)));
	put_u64(b + 56, capy_xxh3(b, 56));
}

static void write_sample(void)
{
	struct capy_artifact_writer *w;
	struct capy_err err = { 0 };
	uint64_t s1[] = { 4, 8 }, s2[] = { 3, 32, 16 }, s3[] = { 3, 16, 32 }, s4[] = { 2 };
	uint64_t parts[] = { 16, 16 };
	uint8_t buf[65536];
	int f, t1, t2, t3, t4, st;
	cJSON *model = cJSON_CreateObject();

	cJSON_AddStringToObject(model, "family", "qwen3_5_moe");
	cJSON_AddObjectToObject(model, "config");
	snprintf(path, sizeof(path), "/tmp/u-artifact-%d.capy", (int)getpid());
	CHECK_EQ_INT(capy_aw_new(&w, path, &err), 0);
	f = capy_aw_add_file(w, "tokenizer.json", 5, &err);
	t1 = capy_aw_add_tensor(w, "a", CAPY_DT_BF16, 2, s1, 0, NULL, -1, NULL, &err);
	st = capy_aw_add_stack(w, "experts", 3, &err);
	t2 = capy_aw_add_tensor(w, "experts.gate_up", CAPY_DT_NVFP4, 3, s2, 2, parts, st, NULL, &err);
	t3 = capy_aw_add_tensor(w, "experts.down", CAPY_DT_NVFP4, 3, s3, 0, NULL, st, NULL, &err);
	t4 = capy_aw_add_tensor(w, "s", CAPY_DT_F32, 1, s4, 0, NULL, -1, NULL, &err);
	CHECK(f >= 0 && t1 >= 0 && st >= 0 && t2 >= 0 && t3 >= 0 && t4 >= 0);
	/* A part list that does not add up is refused. */
	CHECK(capy_aw_add_tensor(w, "bad", CAPY_DT_NVFP4, 2, s1, 2, parts, -1, NULL, &err) < 0);
	CHECK_CONTAINS(err.msg, "parts do not add up");
	capy_err_clear(&err);
	CHECK_EQ_INT(capy_aw_layout(w, model, NULL, &err), 0);

	CHECK_EQ_INT(capy_aw_pwrite(w, capy_aw_file_offset(w, f), "hello", 5, &err), 0);
	capy_aw_set_file_xxh3(w, f, capy_xxh3("hello", 5));
	for (int t = t1; t <= t4; t++) {
		const struct capy_tensor_info *ti = capy_aw_tensor(w, t);
		struct capy_hasher *h;
		if (t == t1 || t == t4)
			continue;
		h = capy_hasher_new();
		for (uint64_t e = 0; e < ti->nslices; e++) {
			for (uint64_t i = 0; i < ti->slice_bytes; i++)
				buf[i] = (uint8_t)(t * 31 + e * 7 + i);
			capy_aw_pwrite(w, capy_tensor_slice_offset(ti, e), buf, ti->slice_bytes, &err);
			capy_hasher_update(h, buf, ti->slice_bytes);
		}
		capy_aw_set_tensor_xxh3(w, t, capy_hasher_digest(h));
		capy_hasher_free(h);
	}
	for (int i = 0; i < 64; i++)
		buf[i] = (uint8_t)i;
	capy_aw_pwrite(w, capy_aw_tensor(w, t1)->offset, buf, 64, &err);
	capy_aw_set_tensor_xxh3(w, t1, capy_xxh3(buf, 64));
	capy_aw_pwrite(w, capy_aw_tensor(w, t4)->offset, buf, 8, &err);
	capy_aw_set_tensor_xxh3(w, t4, capy_xxh3(buf, 8));
	CHECK_EQ_INT(capy_aw_finish(w, &err), 0);
	CHECK_MSG(!err.msg[0], "%s", err.msg);
}

static void test_roundtrip(void)
{
	struct capy_err err = { 0 };
	struct capy_artifact *a;
	const struct capy_tensor_info *t;
	struct capy_nvfp4_layout l;

	CHECK_EQ_INT(capy_artifact_open(&a, path, &err), 0);
	if (!a)
		return;
	CHECK_STR(a->family, "qwen3_5_moe");
	CHECK_EQ_INT(a->ntensors, 4);
	CHECK_EQ_INT(a->nstacks, 1);
	t = capy_artifact_find(a, "experts.gate_up");
	CHECK(t && t->dtype == CAPY_DT_NVFP4 && t->nparts == 2 && t->parts[1] == 16 && t->stack == 0);
	capy_nvfp4_layout(32, 16, 2, &l);
	CHECK_EQ_U64(l.codes_bytes, 256);
	CHECK_EQ_U64(l.scales_off, 256);
	CHECK_EQ_U64(l.globals_off, 320);
	CHECK_EQ_U64(l.slice_bytes, 384);
	CHECK_EQ_U64(t->slice_bytes, 384);
	CHECK_EQ_U64(t->offset % 4096, 0);
	CHECK_EQ_U64(a->stacks[0].stride, 4096);
	t = capy_artifact_find(a, "experts.down");
	CHECK(t && t->offset == a->stacks[0].offset + 384);
	CHECK(capy_artifact_find(a, "nope") == NULL);
	CHECK(capy_artifact_file(a, "tokenizer.json") != NULL);
	CHECK(!memcmp(capy_artifact_data(a, capy_artifact_file(a, "tokenizer.json")->offset), "hello", 5));
	CHECK_EQ_INT(capy_artifact_verify(a, 2, NULL, NULL, &err), 0);
	capy_artifact_close(a);
	CHECK_EQ_INT(capy_read_file(path, 1u << 30, (char **)&img, NULL, &err), 0);
	capy_file_size(path, &img_size, &err);
}

static void expect_refused(const uint8_t *b, uint64_t size, const char *needle)
{
	struct capy_err err = { 0 };
	struct capy_artifact *a = NULL;
	int rc = capy_artifact_parse(&a, b, size, "x.capy", &err);

	CHECK_MSG(rc < 0, "accepted, expected: %s", needle);
	if (rc == 0)
		capy_artifact_close(a);
	CHECK_CONTAINS(err.msg, "x.capy");
	CHECK_CONTAINS(err.msg, needle);
}

/* A copy of the image whose directory text has `from` replaced by `to`. */
static uint8_t *edit_dir(const char *from, const char *to)
{
	uint8_t *b = malloc(img_size);
	uint64_t dlen = get_u64(img + 24), data_off = get_u64(img + 32);
	char *dir = calloc(1, dlen + 1), *hit, *nd;
	size_t nlen;

	memcpy(b, img, img_size);
	memcpy(dir, img + 64, dlen);
	hit = strstr(dir, from);
	CHECK_MSG(hit != NULL, "'%s' not in the directory", from);
	if (!hit) {
		free(dir);
		return b;
	}
	nlen = dlen - strlen(from) + strlen(to);
	nd = calloc(1, nlen + 1);
	snprintf(nd, nlen + 1, "%.*s%s%s", (int)(hit - dir), dir, to, hit + strlen(from));
	CHECK(64 + nlen <= data_off);
	memset(b + 64, 0, data_off - 64);
	memcpy(b + 64, nd, nlen);
	put_u64(b + 24, nlen);
	reseal(b);
	free(dir);
	free(nd);
	return b;
}

static void test_refused(void)
{
	uint8_t *b;
	struct capy_err err = { 0 };
	struct capy_artifact *a;
	uint64_t off;

	if (!img)
		return;
	expect_refused(img, 40, "shorter than the 64-byte header");
	expect_refused(img, img_size - 1, "truncated");
	b = malloc(img_size + 10);
	memcpy(b, img, img_size);
	memset(b + img_size, 0, 10);
	expect_refused(b, img_size + 10, "unexpected bytes");
	b[0] = 'X';
	expect_refused(b, img_size, "bad magic");
	memcpy(b, img, img_size);
	b[30] ^= 1;
	expect_refused(b, img_size, "header checksum");
	memcpy(b, img, img_size);
	b[70] ^= 1;
	expect_refused(b, img_size, "directory checksum");
	memcpy(b, img, img_size);
	b[8] = 2;
	reseal(b);
	expect_refused(b, img_size, "version 2");
	free(b);

	b = edit_dir("\"dtype\":\"BF16\"", "\"dtype\":\"Q4_K\"");
	expect_refused(b, img_size, "unknown dtype 'Q4_K'");
	free(b);
	b = edit_dir("\"shape\":[4,8]", "\"shape\":[4,9]");
	expect_refused(b, img_size, "its BF16 shape needs 72");
	free(b);
	b = edit_dir("\"name\":\"s\"", "\"name\":\"a\"");
	expect_refused(b, img_size, "'a' appears twice");
	free(b);
	b = edit_dir("\"format\":\"capy\"", "\"format\":\"gguf\"");
	expect_refused(b, img_size, "format is 'gguf'");
	free(b);
	b = edit_dir("\"parts\":[16,16]", "\"parts\":[16,15]");
	expect_refused(b, img_size, "parts do not add up");
	free(b);
	b = edit_dir("\"tensors\":[\"experts.gate_up\",\"experts.down\"]", "\"tensors\":[\"experts.down\",\"experts.gate_up\"]");
	expect_refused(b, img_size, "does not match expert stack");
	free(b);

	/* Move tensor "s" onto "a": overlapping regions. */
	CHECK_EQ_INT(capy_artifact_parse(&a, img, img_size, "x.capy", &err), 0);
	{
		char from[64], to[64];
		snprintf(from, sizeof(from), "\"offset\":%" PRIu64, capy_artifact_find(a, "s")->offset);
		snprintf(to, sizeof(to), "\"offset\":%" PRIu64, capy_artifact_find(a, "a")->offset);
		off = capy_artifact_find(a, "s")->offset;
		capy_artifact_close(a);
		b = edit_dir(from, to);
		expect_refused(b, img_size, "overlaps");
		free(b);
		snprintf(to, sizeof(to), "\"offset\":%" PRIu64, img_size);
		b = edit_dir(from, to);
		expect_refused(b, img_size, "outside the data area");
		free(b);
		snprintf(to, sizeof(to), "\"offset\":%" PRIu64, off + 8);
		b = edit_dir(from, to);
		expect_refused(b, img_size, "not 4096-aligned");
		free(b);
	}

	/* Damaged tensor data opens fine (structure) but fails verify, naming the tensor. */
	b = malloc(img_size);
	memcpy(b, img, img_size);
	CHECK_EQ_INT(capy_artifact_parse(&a, b, img_size, "x.capy", &err), 0);
	b[capy_artifact_find(a, "experts.down")->offset + 2 * 4096 + 3] ^= 0x10;
	CHECK_EQ_INT(capy_artifact_verify(a, 1, NULL, NULL, &err), CAPY_ECHECKSUM);
	CHECK_CONTAINS(err.msg, "tensor 'experts.down'");
	capy_artifact_close(a);
	free(b);
}

int main(void)
{
	RUN(write_sample);
	RUN(test_roundtrip);
	RUN(test_refused);
	unlink(path);
	free(img);
	return test_summary();
}
