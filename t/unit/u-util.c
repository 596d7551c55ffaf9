/* u-util.c - unit tests for libcore/util: errors, parsing, hashing, JSON, pool, buffers. */
#include "test.h"
#include "util/buf.h"
#include "util/err.h"
#include "util/hash.h"
#include "util/json.h"
#include "util/parse.h"
#include "util/rng.h"
#include "util/thread.h"

#include <stdatomic.h>

static void test_err(void)
{
	struct capy_err err = { 0 };

	CHECK_EQ_INT(capy_err_set(&err, CAPY_EFORMAT, "tensor '%s' is bad", "x"), CAPY_EFORMAT);
	CHECK_STR(err.msg, "tensor 'x' is bad");
	capy_err_prefix(&err, "'%s'", "m.capy");
	CHECK_STR(err.msg, "'m.capy': tensor 'x' is bad");
	CHECK_EQ_INT(capy_err_errno(&err, ENOSPC, "cannot write"), CAPY_ENOSPC);
	CHECK_CONTAINS(err.msg, "No space left");
	CHECK_EQ_INT(capy_err_set(NULL, CAPY_EIO, "x"), CAPY_EIO);
}

static void test_parse(void)
{
	struct capy_err err = { 0 };
	int64_t i;
	uint64_t u;
	double d;

	CHECK_EQ_INT(capy_parse_i64("42", 0, 100, &i, &err), 0);
	CHECK_EQ_INT(i, 42);
	CHECK(capy_parse_i64("42x", 0, 100, &i, &err) < 0);
	CHECK(capy_parse_i64("", 0, 100, &i, &err) < 0);
	CHECK(capy_parse_i64("101", 0, 100, &i, &err) < 0);
	CHECK_CONTAINS(err.msg, "out of range");
	CHECK(capy_parse_u64("-1", 10, &u, &err) < 0);
	CHECK_EQ_INT(capy_parse_double("0.5", 0, 1, &d, &err), 0);
	CHECK(d == 0.5);
	CHECK(capy_parse_double("nan", 0, 1, &d, &err) < 0);
	CHECK_EQ_INT(capy_parse_size("8G", &u, &err), 0);
	CHECK_EQ_U64(u, 8ull << 30);
	CHECK_EQ_INT(capy_parse_size("16KiB", &u, &err), 0);
	CHECK_EQ_U64(u, 16384);
	CHECK(capy_parse_size("3Q", &u, &err) < 0);
}

static void test_hash(void)
{
	struct capy_hasher *h = capy_hasher_new();
	char buf[4096], hex[17];
	uint64_t back;

	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (char)(i * 7);
	capy_hasher_update(h, buf, 1000);
	capy_hasher_update(h, buf + 1000, sizeof(buf) - 1000);
	CHECK_EQ_U64(capy_hasher_digest(h), capy_xxh3(buf, sizeof(buf)));
	/* XXH3-64 of the empty input, from the xxHash reference. */
	CHECK_EQ_U64(capy_xxh3("", 0), 0x2D06800538D394C2ull);
	capy_hash_hex(0x00ab, hex);
	CHECK_STR(hex, "00000000000000ab");
	CHECK_EQ_INT(capy_hash_parse(hex, &back), 0);
	CHECK_EQ_U64(back, 0xab);
	CHECK(capy_hash_parse("00000000000000aG", &back) < 0);
	capy_hasher_free(h);
}

static void test_json(void)
{
	struct capy_err err = { 0 };
	const char *text = "{\"a\": 9007199254740992, \"b\": 1.5, \"c\": -3, \"s\": \"x\"}";
	cJSON *root;
	uint64_t u;
	int64_t i;

	CHECK_EQ_INT(capy_json_parse(text, strlen(text), "t", &root, &err), 0);
	CHECK_EQ_INT(capy_json_get_u64(root, "a", true, &u, "t", &err), 0);
	CHECK_EQ_U64(u, 9007199254740992ull);
	CHECK(capy_json_get_u64(root, "b", true, &u, "t", &err) < 0);
	CHECK_CONTAINS(err.msg, "'b'");
	CHECK(capy_json_get_u64(root, "c", true, &u, "t", &err) < 0);
	CHECK_EQ_INT(capy_json_get_i64(root, "c", true, &i, "t", &err), 0);
	CHECK_EQ_INT(i, -3);
	CHECK_EQ_INT(capy_json_get_u64(root, "zz", false, &u, "t", &err), 1);
	CHECK(capy_json_get_u64(root, "zz", true, &u, "t", &err) < 0);
	CHECK_CONTAINS(err.msg, "missing field 'zz'");
	cJSON_Delete(root);
	CHECK(capy_json_parse("{\n  \"a\": }", 10, "'x.json'", &root, &err) < 0);
	CHECK_CONTAINS(err.msg, "line 2");
}

struct pool_ctx {
	_Atomic uint64_t sum;
	int seen[8];
};

static void pool_fn(void *p, int ith, int nth)
{
	struct pool_ctx *c = p;
	uint64_t b, e, s = 0;

	capy_slice(1000, ith, nth, &b, &e);
	for (uint64_t i = b; i < e; i++)
		s += i;
	atomic_fetch_add(&c->sum, s);
	c->seen[ith]++;
}

static void test_pool(void)
{
	struct capy_err err = { 0 };
	struct capy_pool *pool;
	struct pool_ctx c = { 0 };

	CHECK_EQ_INT(capy_pool_new(&pool, 3, &err), 0);
	for (int r = 0; r < 50; r++)
		capy_pool_run(pool, pool_fn, &c);
	CHECK_EQ_U64(atomic_load(&c.sum), 50ull * 999 * 1000 / 2);
	CHECK_EQ_INT(c.seen[0] + c.seen[1] + c.seen[2], 150);
	capy_pool_free(pool);
}

static void test_rng(void)
{
	struct capy_rng a, b;
	double m = 0, v = 0;

	capy_rng_seed(&a, 7);
	capy_rng_seed(&b, 7);
	CHECK_EQ_U64(capy_rng_next(&a), capy_rng_next(&b));
	for (int i = 0; i < 100000; i++) {
		double x = capy_rng_normal(&a);
		m += x;
		v += x * x;
	}
	m /= 100000;
	v = v / 100000 - m * m;
	CHECK(fabs(m) < 0.02);
	CHECK(fabs(v - 1) < 0.03);
}

static void test_buf(void)
{
	struct capy_buf b = { 0 };
	char *p;
	size_t n;

	capy_buf_puts(&b, "data: ");
	capy_buf_printf(&b, "{\"n\":%d}", 42);
	CHECK_STR(b.data, "data: {\"n\":42}");
	capy_buf_reset(&b);
	CHECK_EQ_U64(b.len, 0);
	capy_buf_json_str(&b, "a\"b\\c\n\x01\xc3\xa9", 9);
	CHECK_STR(b.data, "\"a\\\"b\\\\c\\n\\u0001\xc3\xa9\"");
	capy_buf_reset(&b);
	for (int i = 0; i < 10000; i++)
		capy_buf_putc(&b, (char)('a' + i % 26));
	CHECK_EQ_U64(b.len, 10000);
	CHECK(!b.oom && b.data[10000] == 0 && b.data[9999] == 'a' + 9999 % 26);
	p = capy_buf_detach(&b, &n);
	CHECK(p && n == 10000 && !b.data && !b.len);
	free(p);
	CHECK(capy_buf_reserve(&b, SIZE_MAX) < 0 && b.oom);
	capy_buf_puts(&b, "x"); /* ignored after a failure */
	CHECK_EQ_U64(b.len, 0);
	capy_buf_release(&b);
}

int main(void)
{
	RUN(test_err);
	RUN(test_parse);
	RUN(test_hash);
	RUN(test_json);
	RUN(test_pool);
	RUN(test_rng);
	RUN(test_buf);
	return test_summary();
}
