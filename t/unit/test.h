/* test.h - a minimal C unit-test harness: CHECK macros and a summary line.
 *
 * A test file defines static void test_*(void) functions and a main() that runs
 * them with RUN(test_x) and returns test_summary(). Failures print file:line and
 * the expression; the last line is always "N passed, M failed".
 */
#ifndef CAPY_TEST_H
#define CAPY_TEST_H

#include "core.h"

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

static inline int test_summary(void)
{
	printf("%d passed, %d failed\n", test_passed, test_failed);
	return test_failed ? 1 : 0;
}

#endif
