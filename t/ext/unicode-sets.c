/* unicode-sets.c - print the code point sets that PCRE2 and utf8proc use, for gen-unicode-tables.js.
 *
 * usage: unicode-sets pcre2 PATTERN   ranges of code points the class PATTERN matches, as JSON
 *        unicode-sets nfc-active      code points utf8proc's normalization can change or move
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <utf8proc.h>

static void put_range(int *first, long lo, long hi)
{
	printf("%s[%ld,%ld]", *first ? "" : ",", lo, hi);
	*first = 0;
}

int main(int argc, char **argv)
{
	long start = -1, prev = -2;
	int first = 1, errcode;
	PCRE2_SIZE erroff;
	pcre2_code *re = NULL;
	pcre2_match_data *md = NULL;

	if (argc == 3 && !strcmp(argv[1], "pcre2")) {
		re = pcre2_compile((PCRE2_SPTR)argv[2], PCRE2_ZERO_TERMINATED,
				   PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &errcode, &erroff, NULL);
		if (!re)
			return 2;
		md = pcre2_match_data_create(4, NULL);
	} else if (!(argc == 2 && !strcmp(argv[1], "nfc-active"))) {
		fprintf(stderr, "usage: unicode-sets pcre2 PATTERN | nfc-active\n");
		return 2;
	}
	printf("[");
	for (int32_t c = 0; c <= 0x10ffff; c++) {
		int in;
		if (c >= 0xd800 && c <= 0xdfff)
			continue;
		if (re) {
			uint8_t b[4];
			utf8proc_ssize_t n = utf8proc_encode_char(c, b);
			in = pcre2_match(re, b, (PCRE2_SIZE)n, 0, 0, md, NULL) >= 0;
		} else {
			/* A character normalization may touch: it has a combining class, a
			 * decomposition, or takes part in a composition. */
			const utf8proc_property_t *p = utf8proc_get_property(c);
			in = p->combining_class || p->decomp_seqindex != UINT16_MAX ||
			     p->comb_index != UINT16_MAX || p->comp_exclusion ||
			     (c >= 0x1100 && c <= 0x11ff) || (c >= 0xac00 && c <= 0xd7a3);
		}
		if (in) {
			if (c != prev + 1) {
				if (start >= 0)
					put_range(&first, start, prev);
				start = c;
			}
			prev = c;
		}
	}
	if (start >= 0)
		put_range(&first, start, prev);
	printf("]\n");
	return 0;
}
