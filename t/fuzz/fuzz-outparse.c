/* fuzz-outparse.c - libFuzzer target for the output parser (libcore/text/outparse).
 *
 * Input: byte 0 picks the flags and tools, bytes 1..8 seed the chunking, the rest is model
 * output. The output is parsed in one piece and again cut where the seed says (and byte by
 * byte when short); the two event logs and stats must be equal, and every event must pass
 * the checks of outparse-check.h (valid UTF-8 text, valid JSON arguments, call order).
 * Anything else aborts.
 */
#include "../helper/outparse-check.h"
#include "util/rng.h"

static const char TOOLS[] =
	"[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
	"\"properties\":{\"s\":{\"type\":\"string\"},\"i\":{\"type\":\"integer\"},"
	"\"o\":{\"type\":\"object\"},\"u\":{\"type\":[\"string\",\"null\"]}}}}},"
	"{\"name\":\"g\",\"input_schema\":{\"properties\":{\"a\":{\"type\":\"array\"}}}}]";

static void compare(const struct rec *a, const struct capy_outparse_stats *sa, const struct rec *b,
		    const struct capy_outparse_stats *sb)
{
	if (a->bad || b->bad || strcmp(a->log.p, b->log.p) || !same_stats(sa, sb))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct capy_outparse_opts o = { 0 };
	struct capy_outparse_stats s1, s2;
	struct capy_rng rng;
	struct rec r1, r2;
	uint64_t seed = 0;
	size_t cuts[16], n = 0;
	const char *text;
	size_t len;

	if (size < 9)
		return 0;
	o.flags = data[0] & 7;
	o.tools_json = data[0] & 8 ? TOOLS : NULL;
	memcpy(&seed, data + 1, 8);
	text = (const char *)data + 9;
	len = size - 9;

	capy_rng_seed(&rng, seed);
	if (len)
		n = capy_rng_next(&rng) % ARRAY_SIZE(cuts);
	for (size_t i = 0; i < n; i++)
		cuts[i] = capy_rng_next(&rng) % (len + 1);
	for (size_t i = 1; i < n; i++)
		for (size_t j = i; j && cuts[j - 1] > cuts[j]; j--) {
			size_t t = cuts[j];
			cuts[j] = cuts[j - 1];
			cuts[j - 1] = t;
		}

	if (run_one(text, len, &o, &r1, &s1) < 0 || run_cuts(text, len, &o, cuts, n, &r2, &s2) < 0)
		abort();
	compare(&r1, &s1, &r2, &s2);
	rec_release(&r2);
	if (len <= 256) {
		if (run_bytes(text, len, &o, &r2, &s2) < 0)
			abort();
		compare(&r1, &s1, &r2, &s2);
		rec_release(&r2);
	}
	rec_release(&r1);
	return 0;
}
