/* test.h - a minimal C unit-test harness: CHECK macros and a summary line.
 *
 * A test file defines static void test_*(void) functions and a main() that runs
 * them with RUN(test_x) and returns test_summary(). Failures print file:line and
 * the expression; the last line is always "N passed, M failed".
 */
#ifndef CAPY_TEST_H
#define CAPY_TEST_H

#include "core.h"
#include "util/file.h"
#include "util/json.h"

#include <math.h>

static int test_passed, test_failed;
static const char *test_current = "";

#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (cond) {                                                                        \
			test_passed++;                                                             \
		} else {                                                                           \
			test_failed++;                                                             \
			fprintf(stderr, "FAIL %s (%s:%d): %s\n", test_current, __FILE__, __LINE__, \
				#cond);                                                            \
		}                                                                                  \
	} while (0)

#define CHECK_MSG(cond, ...)                                                                       \
	do {                                                                                       \
		if (cond) {                                                                        \
			test_passed++;                                                             \
		} else {                                                                           \
			test_failed++;                                                             \
			fprintf(stderr, "FAIL %s (%s:%d): %s: ", test_current, __FILE__, __LINE__, \
				#cond);                                                            \
			fprintf(stderr, __VA_ARGS__);                                              \
			fputc('\n', stderr);                                                       \
		}                                                                                  \
	} while (0)

#define CHECK_EQ_INT(a, b)                                                                         \
	CHECK_MSG((long long)(a) == (long long)(b), "%lld != %lld", (long long)(a), (long long)(b))
#define CHECK_EQ_U64(a, b)                                                                         \
	CHECK_MSG((uint64_t)(a) == (uint64_t)(b), "%" PRIu64 " != %" PRIu64, (uint64_t)(a),        \
		  (uint64_t)(b))
#define CHECK_STR(a, b)                                                                            \
	CHECK_MSG(!strcmp((a), (b)), "\"%s\" != \"%s\"", (a), (b))
#define CHECK_CONTAINS(hay, needle)                                                                \
	CHECK_MSG(strstr((hay), (needle)) != NULL, "\"%s\" does not contain \"%s\"", (hay), (needle))

#define RUN(fn)                                                                                    \
	do {                                                                                       \
		test_current = #fn;                                                                \
		fn();                                                                              \
	} while (0)

/* The first index of the largest of n logits (greedy decoding in tests). */
static inline int32_t test_argmax(const float *l, uint64_t n)
{
	uint64_t b = 0;

	for (uint64_t i = 1; i < n; i++)
		if (l[i] > l[b])
			b = i;
	return (int32_t)b;
}

static inline int test_summary(void)
{
	printf("%d passed, %d failed\n", test_passed, test_failed);
	return test_failed ? 1 : 0;
}

/* The path of a committed fixture: $CAPY_SRCDIR/t/fixtures/<name> (the tests run from the
 * source tree when CAPY_SRCDIR is unset). */
static inline const char *test_fixture_path(const char *name, char *buf, size_t size)
{
	const char *dir = getenv("CAPY_SRCDIR");

	/* share/... (the trained models) is a path from the source root; the rest is in t/fixtures */
	snprintf(buf, size, strncmp(name, "share/", 6) ? "%s/t/fixtures/%s" : "%s/%s", dir ? dir : ".", name);
	return buf;
}

/* A committed JSON fixture, parsed; NULL after printing the reason. */
static inline cJSON *test_fixture_json(const char *name)
{
	struct capy_err err = { 0 };
	char path[4096], *text;
	size_t len;
	cJSON *json = NULL;

	test_fixture_path(name, path, sizeof(path));
	if (capy_read_file(path, 64u << 20, &text, &len, &err) < 0)
		goto fail;
	if (capy_json_parse(text, len, path, &json, &err) < 0) {
		free(text);
		goto fail;
	}
	free(text);
	return json;
fail:
	fprintf(stderr, "%s\n", err.msg);
	return NULL;
}

#endif
