/* u-safetensors.c - the safetensors header reader: valid files and every way a header
 * can be wrong, each with a message that names the file, tensor and offset. */
#include "test.h"
#include "ckpt/ckpt.h"

/* A file image: 8-byte length, the header JSON, then data_len bytes. */
static uint8_t *image(const char *json, uint64_t data_len, uint64_t *size)
{
	uint64_t n = strlen(json);
	uint8_t *b = calloc(1, 8 + n + data_len + 1);

	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)(n >> (8 * i));
	memcpy(b + 8, json, n);
	*size = 8 + n + data_len;
	return b;
}

static int parse(const char *json, uint64_t data_len, struct capy_st_header *h, struct capy_err *err)
{
	uint64_t size;
	uint8_t *b = image(json, data_len, &size);
	int rc = capy_st_parse(b, size, size, "f.safetensors", h, err);

	free(b);
	return rc;
}

static void expect_fail(const char *json, uint64_t data_len, const char *needle)
{
	struct capy_st_header h;
	struct capy_err err = { 0 };
	int rc = parse(json, data_len, &h, &err);

	CHECK_MSG(rc == CAPY_EFORMAT, "'%s' parsed (rc %d)", json, rc);
	CHECK_CONTAINS(err.msg, "f.safetensors");
	CHECK_CONTAINS(err.msg, needle);
}

static void test_valid(void)
{
	struct capy_st_header h;
	struct capy_err err = { 0 };
	const char *json = "{\"__metadata__\": {\"format\": \"pt\"}, "
			   "\"b\": {\"dtype\": \"BF16\", \"shape\": [2, 3], \"data_offsets\": [16, 28]}, "
			   "\"a\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}, "
			   "\"s\": {\"dtype\": \"F32\", \"shape\": [], \"data_offsets\": [28, 32]}, "
			   "\"z\": {\"dtype\": \"U8\", \"shape\": [0, 5], \"data_offsets\": [32, 32]}}";

	CHECK_EQ_INT(parse(json, 32, &h, &err), 0);
	CHECK_EQ_INT(h.ntensors, 4);
	CHECK_STR(h.tensors[0].name, "a");
	CHECK_EQ_U64(h.tensors[0].offset, h.data_start);
	CHECK_STR(h.tensors[1].name, "b");
	CHECK_EQ_INT(h.tensors[1].ndim, 2);
	CHECK_EQ_U64(h.tensors[1].bytes, 12);
	CHECK_EQ_INT(h.tensors[2].ndim, 0);
	CHECK(h.metadata != NULL);
	capy_st_header_release(&h);
}

static void test_bad(void)
{
	struct capy_st_header h;
	struct capy_err err = { 0 };
	uint8_t tiny[4] = { 1, 2, 3, 4 }, big[16] = { 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0 };

	CHECK(capy_st_parse(tiny, 4, 4, "f.safetensors", &h, &err) == CAPY_EFORMAT);
	CHECK_CONTAINS(err.msg, "too short");
	CHECK(capy_st_parse(big, 16, 16, "f.safetensors", &h, &err) == CAPY_EFORMAT);
	CHECK_CONTAINS(err.msg, "exceeds");
	big[0] = 100;
	big[1] = big[2] = big[3] = 0;
	CHECK(capy_st_parse(big, 16, 16, "f.safetensors", &h, &err) == CAPY_EFORMAT);
	CHECK_CONTAINS(err.msg, "runs past the end");

	expect_fail("[1, 2]", 0, "not a JSON object");
	expect_fail("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]", 4, "invalid JSON");
	expect_fail("{\"a\": {\"dtype\": \"Q4\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 4, "unknown dtype 'Q4'");
	expect_fail("{\"a\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4, "'a' has no dtype");
	expect_fail("{\"a\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 4]}}", 4, "bad dimension");
	expect_fail("{\"a\": {\"dtype\": \"F32\", \"shape\": [1.5], \"data_offsets\": [0, 4]}}", 4, "bad dimension");
	expect_fail("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0]}}", 4, "data_offsets");
	expect_fail("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 4]}}", 4, "need 8 bytes");
	expect_fail("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 0]}}", 4, "end before");
	expect_fail("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [8, 12]}}", 4, "past the end");
	expect_fail("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, "
		    "\"b\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [2, 6]}}", 8, "overlaps");
	expect_fail("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}", 8, "unused bytes");
	expect_fail("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", 9, "belong to no tensor");
	expect_fail("{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, "
		    "\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}", 8, "appears twice");
	expect_fail("{\"__metadata__\": {\"k\": 1}}", 0, "is not a string");
	expect_fail("{\"a\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296, 4294967296], "
		    "\"data_offsets\": [0, 4]}}", 4, "overflows");
}

int main(void)
{
	RUN(test_valid);
	RUN(test_bad);
	return test_summary();
}
