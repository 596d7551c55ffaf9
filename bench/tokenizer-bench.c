/* tokenizer-bench - encode (and decode) throughput of capy's tokenizer on one core.
 *
 *	tokenizer-bench TOKENIZER.json TEXT [SECONDS]
 *
 * Loads the tokenizer, encodes TEXT once (a cold word cache: "first"), then again and again for
 * SECONDS (default 3), and prints MB/s (10^6 bytes of input per second) and tokens/s; then the
 * same for decoding the ids. One thread: pin it with taskset to measure one core.
 */
#include "text/tokenizer.h"
#include "tool/tool.h"
#include "util/file.h"

int cmd_main(int argc, char **argv)
{
	struct capy_err err = { 0 };
	struct capy_tokenizer *tok;
	struct capy_tokens ids = { 0 };
	char *json, *text, *out;
	size_t json_len, text_len, out_len, n_ids = 0;
	double seconds = argc > 3 ? strtod(argv[3], NULL) : 3, t0, t, load, first;
	long rounds = 0;

	if (argc < 3) {
		fprintf(stderr, "usage: tokenizer-bench TOKENIZER.json TEXT [SECONDS]\n");
		return CAPY_EXIT_USAGE;
	}
	if (capy_read_file(argv[1], 1u << 30, &json, &json_len, &err) < 0 ||
	    capy_read_file(argv[2], 1u << 30, &text, &text_len, &err) < 0)
		capy_die("%s", err.msg);
	t0 = capy_now();
	if (capy_tokenizer_new(&tok, json, json_len, &err) < 0)
		capy_die("%s", err.msg);
	load = capy_now() - t0;
	t0 = capy_now();
	if (capy_tokenizer_encode(tok, text, text_len, CAPY_TOK_PARSE_ADDED, &ids, &err) < 0)
		capy_die("%s", err.msg);
	first = capy_now() - t0;
	t0 = capy_now();
	do {
		ids.n = 0;
		if (capy_tokenizer_encode(tok, text, text_len, CAPY_TOK_PARSE_ADDED, &ids, &err) < 0)
			capy_die("%s", err.msg);
		rounds++;
		n_ids += ids.n;
	} while ((t = capy_now() - t0) < seconds);
	printf("load      %.3f s\n", load);
	printf("first     %.2f MB/s  (one encode right after loading)\n", (double)text_len / first / 1e6);
	printf("encode    %.2f MB/s  %.0f tokens/s  (%zu bytes -> %zu tokens, %ld rounds)\n",
	       (double)text_len * (double)rounds / t / 1e6, (double)n_ids / t, text_len, ids.n, rounds);
	rounds = 0;
	t0 = capy_now();
	do {
		if (capy_tokenizer_decode(tok, ids.ids, ids.n, 0, &out, &out_len, &err) < 0)
			capy_die("%s", err.msg);
		free(out);
		rounds++;
	} while ((t = capy_now() - t0) < seconds / 2);
	printf("decode    %.2f MB/s  %.0f tokens/s\n", (double)out_len * (double)rounds / t / 1e6,
	       (double)ids.n * (double)rounds / t);
	capy_tokens_release(&ids);
	capy_tokenizer_free(tok);
	free(json);
	free(text);
	return 0;
}
