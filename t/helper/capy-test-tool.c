/* capy-test-tool - expose libcore internals to the shell tests (after git's test-tool).
 *
 *	capy-test-tool tokenize [options] TOKENIZER.json[.zst] < lines
 *	capy-test-tool detokenize [--skip-special] TOKENIZER.json[.zst] < lines of ids
 *	capy-test-tool check-golden TOKENIZER.json[.zst] GOLDEN.json[l]
 *	capy-test-tool render TEMPLATE CASE.json [TOKENIZER_CONFIG.json]
 *	capy-test-tool render-template TEMPLATE [VARS.json]
 *	capy-test-tool json FILE
 *	capy-test-tool json-schema [--strict] [--compact] SCHEMA.json
 *	capy-test-tool schema-walk [--strict] [--seed N] [--count K] SCHEMA.json
 *
 * tokenize encodes each input line (raw, or hex-encoded bytes with --hex; with --whole all of
 * stdin is one text) and prints its ids. With --decode it adds, tab-separated, the hex of
 * decode(ids) and of decode(ids, skip special), after checking that the streaming decoder, fed
 * one id at a time, gives the same bytes. A text that fails prints "error: <message>" in place
 * of the ids (the exit status stays 0).
 *
 * check-golden reads {"text": ..., "ids": [...]} objects (a JSON array or one per line), encodes
 * each text recognising added tokens, reports the ones whose ids differ and exits 1 if any do.
 *
 *	capy-test-tool logits MODEL.capy IDS_FILE [--threads N] [--isa NAME] [--kv f32|bf16|int8]
 *		[--step] [--out FILE]
 *
 * logits runs the ids (whitespace-separated) through the model, all at once (chunked prefill)
 * or with --step one token at a time (decode), and prints "xxh3 <hex>" of all the logits (float32,
 * [n][vocab]); --out writes them raw. --isa forces a CPU path (scalar, avx2, avx512).
 *
 * render renders a chat case: {"messages": [...], "tools": [...], "kwargs": {...},
 * "add_generation_prompt": true, "keep_string_arguments": false}; render-template renders a
 * template with the variables of a JSON object; json reads JSON and writes it back as Python's
 * json.dumps(ensure_ascii=False) would. Their output goes to stdout byte for byte (no newline
 * added); errors to stderr with exit 1.
 *
 * json-schema prints the GBNF grammar of a JSON schema (libcore/constrain/json-schema.h),
 * after checking that the grammar compiles. schema-walk writes K (default 100) documents
 * drawn from that grammar, each followed by a NUL byte: a random walk over the matcher that,
 * at each step, takes one of the bytes it allows among printable ASCII, newline, tab and
 * three UTF-8 lead bytes (then every continuation byte), any other byte only when none of
 * those fits, and stops when the text is a whole document and a coin says so. Past 200 bytes it prefers the
 * bytes that close strings, arrays and objects (and backslashes, for patterns that end in an
 * escaped quote), so that documents end; one that has not
 * ended after 100000 bytes is an error (exit 1), as is a state that allows no byte and is
 * not a whole document.
 */
#include "text/tokenizer.h"
#include "tool/tool.h"
#include "artifact/artifact.h"
#include "cpu/linear.h"
#include "engine/engine.h"
#include "util/hash.h"
#include "util/parse.h"
#include "util/file.h"
#include "util/json.h"
#include "text/chat.h"
#include "constrain/grammar.h"
#include "constrain/json-schema.h"
#include "util/buf.h"
#include "util/rng.h"

#include <zstd.h>

#define INPUT_MAX_BYTES (256u << 20)

static char *slurp(const char *path, size_t *len)
{
	struct capy_err err = { 0 };
	char *buf;

	if (capy_read_file(path, INPUT_MAX_BYTES, &buf, len, &err) < 0)
		capy_die("%s", err.msg);
	return buf;
}

static struct capy_tmpl *compile(const char *path)
{
	struct capy_err err = { 0 };
	struct capy_tmpl *t;
	size_t len;
	char *src = slurp(path, &len);

	if (capy_tmpl_compile(src, len, path, &t, &err) < 0)
		capy_die("%s", err.msg);
	free(src);
	return t;
}

static struct capy_tval *parse(struct capy_tdoc *doc, const char *path)
{
	struct capy_err err = { 0 };
	struct capy_tval *v;
	size_t len;
	char *text = slurp(path, &len);

	if (capy_tdoc_parse_json(doc, text, len, path, &v, &err) < 0)
		capy_die("%s", err.msg);
	free(text);
	return v;
}

static int emit(char *out, size_t len)
{
	size_t n = fwrite(out, 1, len, stdout);

	free(out);
	if (n != len || fflush(stdout))
		capy_die("cannot write the output");
	return CAPY_EXIT_OK;
}

static bool flag(const struct capy_tval *c, const char *key, bool def)
{
	const struct capy_tval *v = capy_tval_get(c, key);
	char *json = NULL;
	bool res = def;

	if (v && !capy_tval_to_json(v, &json, NULL, NULL))
		res = !strcmp(json, "true") ? true : !strcmp(json, "false") ? false : def;
	free(json);
	return res;
}

static int cmd_render(int argc, char **argv)
{
	struct capy_err err = { 0 };
	struct capy_tdoc *doc = capy_tdoc_new();
	struct capy_tmpl *t;
	struct capy_tval *c, *special = NULL;
	struct capy_chat_opts opts = { 0 };
	size_t len;
	char *out;

	if (argc < 3 || argc > 4)
		capy_die("usage: render TEMPLATE CASE.json [TOKENIZER_CONFIG.json]");
	t = compile(argv[1]);
	c = parse(doc, argv[2]);
	if (argc == 4 && capy_chat_special_tokens(doc, parse(doc, argv[3]), &special, &err) < 0)
		capy_die("%s", err.msg);
	opts.keep_string_arguments = flag(c, "keep_string_arguments", false);
	if (capy_chat_render_values(t, doc, capy_tval_get(c, "messages"), capy_tval_get(c, "tools"),
				    capy_tval_get(c, "kwargs"), special,
				    flag(c, "add_generation_prompt", false), &opts, &out, &len,
				    &err) < 0)
		capy_die("%s", err.msg);
	capy_tmpl_free(t);
	capy_tdoc_free(doc);
	return emit(out, len);
}

static int cmd_render_template(int argc, char **argv)
{
	struct capy_err err = { 0 };
	struct capy_tdoc *doc = capy_tdoc_new();
	struct capy_tmpl *t;
	struct capy_tval *vars = NULL;
	size_t len;
	char *out;

	if (argc < 2 || argc > 3)
		capy_die("usage: render-template TEMPLATE [VARS.json]");
	t = compile(argv[1]);
	if (argc == 3)
		vars = parse(doc, argv[2]);
	if (capy_tmpl_render(t, vars, NULL, &out, &len, &err) < 0)
		capy_die("%s", err.msg);
	capy_tmpl_free(t);
	capy_tdoc_free(doc);
	return emit(out, len);
}

static int cmd_json(int argc, char **argv)
{
	struct capy_err err = { 0 };
	struct capy_tdoc *doc = capy_tdoc_new();
	size_t len;
	char *out;

	if (argc != 2)
		capy_die("usage: json FILE");
	if (capy_tval_to_json(parse(doc, argv[1]), &out, &len, &err) < 0)
		capy_die("%s", err.msg);
	capy_tdoc_free(doc);
	return emit(out, len);
}

static int load_tokenizer(const char *path, struct capy_tokenizer **tok)
{
	struct capy_err err = { 0 };
	char *data;
	size_t len;
	size_t n = strlen(path);

	if (capy_read_file(path, (size_t)1 << 30, &data, &len, &err) < 0)
		capy_die("%s", err.msg);
	if (n > 4 && !strcmp(path + n - 4, ".zst")) {
		unsigned long long size = ZSTD_getFrameContentSize(data, len);
		char *raw;
		if (size == ZSTD_CONTENTSIZE_ERROR || size == ZSTD_CONTENTSIZE_UNKNOWN || size > (1u << 30))
			capy_die("'%s': not a zstd frame with a known size", path);
		raw = malloc(size + 1);
		if (!raw)
			capy_die("out of memory");
		size_t got = ZSTD_decompress(raw, size, data, len);
		if (ZSTD_isError(got) || got != size)
			capy_die("'%s': %s", path, ZSTD_isError(got) ? ZSTD_getErrorName(got) : "short");
		free(data);
		data = raw;
		len = size;
	}
	if (capy_tokenizer_new(tok, data, len, &err) < 0)
		capy_die("'%s': %s", path, err.msg);
	free(data);
	return 0;
}

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static size_t unhex(char *s, size_t len)
{
	size_t n = 0;

	for (size_t i = 0; i + 1 < len; i += 2) {
		int hi = hexval(s[i]), lo = hexval(s[i + 1]);
		if (hi < 0 || lo < 0)
			capy_die("bad hex input");
		s[n++] = (char)(hi << 4 | lo);
	}
	return n;
}

static void put_hex(const char *s, size_t len)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < len; i++) {
		putchar(digits[(uint8_t)s[i] >> 4]);
		putchar(digits[(uint8_t)s[i] & 15]);
	}
}

/* decode(ids, flags) through capy_tokenizer_decode and through the streaming decoder */
static void decode_checked(const struct capy_tokenizer *tok, const struct capy_tokens *ids,
			   unsigned flags)
{
	struct capy_err err = { 0 };
	struct capy_detok *d = capy_detok_new(tok, flags);
	char *text, *streamed = NULL;
	size_t len, slen = 0, plen;
	const char *piece;

	if (!d)
		capy_die("out of memory");
	if (capy_tokenizer_decode(tok, ids->ids, ids->n, flags, &text, &len, &err) < 0)
		capy_die("%s", err.msg);
	for (size_t i = 0; i <= ids->n; i++) {
		if (i < ids->n ? capy_detok_feed(d, ids->ids[i], &piece, &plen) :
				 capy_detok_flush(d, &piece, &plen))
			capy_die("out of memory");
		/* a piece never ends inside a UTF-8 sequence */
		if (plen && ((uint8_t)piece[plen - 1] & 0xC0) == 0xC0)
			capy_die("streaming decoder emitted a partial character");
		streamed = realloc(streamed, slen + plen + 1);
		if (!streamed)
			capy_die("out of memory");
		memcpy(streamed + slen, piece, plen);
		slen += plen;
	}
	if (slen != len || memcmp(streamed, text, len))
		capy_die("streaming decode differs from decode");
	put_hex(text, len);
	free(text);
	free(streamed);
	capy_detok_free(d);
}

/* All of stdin into *buf (getline's calling convention); -1 on a read error. */
static ssize_t read_all(char **buf, size_t *cap)
{
	size_t len = 0, n;

	for (;;) {
		if (len + 4096 > *cap) {
			*cap = *cap ? *cap * 2 : 65536;
			*buf = realloc(*buf, *cap);
			if (!*buf)
				capy_die("out of memory");
		}
		n = fread(*buf + len, 1, *cap - len, stdin);
		len += n;
		if (n == 0)
			return ferror(stdin) ? -1 : (ssize_t)len;
	}
}

static int cmd_tokenize(int argc, char **argv)
{
	static const char *const usage[] = {
		"capy-test-tool tokenize [<options>] <tokenizer.json> < lines", NULL };
	bool hex = false, decode = false, lossy = false, whole = false;
	const char *parse = "all";
	const struct capy_opt opts[] = {
		CAPY_OPT_FLAG(0, "hex", &hex, "input lines are hex-encoded bytes"),
		CAPY_OPT_FLAG(0, "whole", &whole, "all of stdin is one text"),
		CAPY_OPT_FLAG(0, "decode", &decode, "also print decode and decode skipping specials"),
		CAPY_OPT_FLAG(0, "lossy", &lossy, "replace invalid UTF-8 instead of failing"),
		CAPY_OPT_STRING(0, "parse", &parse, "all|plain|special|none",
				"added tokens to recognise (plain: not the special ones)"),
		CAPY_OPT_END(),
	};
	struct capy_tokenizer *tok;
	unsigned flags = 0;
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;

	if (capy_opt_parse(argc, argv, usage, opts) != 1)
		capy_usage_error(usage, opts, "need one tokenizer file");
	if (!strcmp(parse, "all"))
		flags = CAPY_TOK_PARSE_ADDED;
	else if (!strcmp(parse, "plain"))
		flags = CAPY_TOK_PARSE_PLAIN;
	else if (!strcmp(parse, "special"))
		flags = CAPY_TOK_PARSE_SPECIAL;
	else if (strcmp(parse, "none"))
		capy_usage_error(usage, opts, "--parse must be all, plain, special or none");
	if (lossy)
		flags |= CAPY_TOK_LOSSY;
	load_tokenizer(argv[0], &tok);
	while ((n = whole ? read_all(&line, &cap) : getline(&line, &cap, stdin)) >= 0) {
		struct capy_tokens ids = { 0 };
		struct capy_err err = { 0 };
		size_t len = (size_t)n;

		if (!whole && len && line[len - 1] == '\n')
			len--;
		if (hex)
			len = unhex(line, len);
		if (capy_tokenizer_encode(tok, line, len, flags, &ids, &err) < 0) {
			printf("error: %s\n", err.msg);
			continue;
		}
		for (size_t i = 0; i < ids.n; i++)
			printf(i ? " %d" : "%d", ids.ids[i]);
		if (decode) {
			putchar('\t');
			decode_checked(tok, &ids, 0);
			putchar('\t');
			decode_checked(tok, &ids, CAPY_TOK_SKIP_SPECIAL);
		}
		putchar('\n');
		capy_tokens_release(&ids);
		if (whole)
			break;
	}
	free(line);
	capy_tokenizer_free(tok);
	return fflush(stdout) ? CAPY_EXIT_FAIL : 0;
}

static int cmd_detokenize(int argc, char **argv)
{
	static const char *const usage[] = {
		"capy-test-tool detokenize [--skip-special] <tokenizer.json> < lines of ids", NULL };
	bool skip = false;
	const struct capy_opt opts[] = {
		CAPY_OPT_FLAG(0, "skip-special", &skip, "drop special tokens"),
		CAPY_OPT_END(),
	};
	struct capy_tokenizer *tok;
	char *line = NULL;
	size_t cap = 0;

	if (capy_opt_parse(argc, argv, usage, opts) != 1)
		capy_usage_error(usage, opts, "need one tokenizer file");
	load_tokenizer(argv[0], &tok);
	while (getline(&line, &cap, stdin) >= 0) {
		struct capy_tokens ids = { 0 };
		struct capy_err err = { 0 };
		char *p = line, *end, *text;
		size_t len;

		for (;;) {
			long v = strtol(p, &end, 10);
			if (end == p)
				break;
			if (ids.n == ids.cap) {
				ids.cap = ids.cap ? 2 * ids.cap : 64;
				ids.ids = realloc(ids.ids, ids.cap * sizeof(*ids.ids));
				if (!ids.ids)
					capy_die("out of memory");
			}
			ids.ids[ids.n++] = (int32_t)v;
			p = end;
		}
		if (capy_tokenizer_decode(tok, ids.ids, ids.n, skip ? CAPY_TOK_SKIP_SPECIAL : 0, &text,
					  &len, &err) < 0)
			capy_die("%s", err.msg);
		fwrite(text, 1, len, stdout);
		putchar('\n');
		free(text);
		capy_tokens_release(&ids);
	}
	free(line);
	capy_tokenizer_free(tok);
	return fflush(stdout) ? CAPY_EXIT_FAIL : 0;
}

static int check_case(const struct capy_tokenizer *tok, const cJSON *c, size_t idx)
{
	const cJSON *text = cJSON_GetObjectItemCaseSensitive(c, "text");
	const cJSON *want = cJSON_GetObjectItemCaseSensitive(c, "ids"), *it;
	struct capy_tokens ids = { 0 };
	struct capy_err err = { 0 };
	size_t k = 0;
	bool same;

	if (!cJSON_IsString(text) || !cJSON_IsArray(want))
		capy_die("golden case %zu: needs \"text\" and \"ids\"", idx);
	if (capy_tokenizer_encode(tok, text->valuestring, strlen(text->valuestring),
				  CAPY_TOK_PARSE_ADDED, &ids, &err) < 0) {
		printf("case %zu: error: %s\n", idx, err.msg);
		return 1;
	}
	same = (size_t)cJSON_GetArraySize(want) == ids.n;
	cJSON_ArrayForEach(it, want) {
		int64_t v;
		if (same && (capy_json_i64(it, &v) < 0 || k >= ids.n || v != ids.ids[k]))
			same = false;
		k++;
	}
	if (!same) {
		char *shown = cJSON_PrintUnformatted(text);
		printf("case %zu: ids differ for %s\n  ours:", idx, shown ? shown : "?");
		for (k = 0; k < ids.n; k++)
			printf(" %d", ids.ids[k]);
		printf("\n");
		free(shown);
	}
	capy_tokens_release(&ids);
	return !same;
}

static int cmd_check_golden(int argc, char **argv)
{
	struct capy_tokenizer *tok;
	struct capy_err err = { 0 };
	size_t len, n = 0, bad = 0;
	char *data;
	cJSON *root;

	if (argc != 3)
		capy_die("usage: capy-test-tool check-golden <tokenizer.json> <golden.json[l]>");
	load_tokenizer(argv[1], &tok);
	if (capy_read_file(argv[2], (size_t)1 << 30, &data, &len, &err) < 0)
		capy_die("%s", err.msg);
	if (len && data[0] == '[') {
		const cJSON *c;
		if (capy_json_parse(data, len, argv[2], &root, &err) < 0)
			capy_die("%s", err.msg);
		cJSON_ArrayForEach(c, root)
			bad += (size_t)check_case(tok, c, n++);
		cJSON_Delete(root);
	} else {
		for (char *p = data, *nl; p < data + len; p = nl + 1) {
			nl = memchr(p, '\n', (size_t)(data + len - p));
			if (!nl)
				nl = data + len;
			if (nl == p)
				continue;
			if (capy_json_parse(p, (size_t)(nl - p), argv[2], &root, &err) < 0)
				capy_die("%s", err.msg);
			bad += (size_t)check_case(tok, root, n++);
			cJSON_Delete(root);
		}
	}
	printf("%zu cases, %zu mismatches\n", n, bad);
	free(data);
	capy_tokenizer_free(tok);
	return bad || !n ? CAPY_EXIT_FAIL : 0;
}

static int cmd_logits(int argc, char **argv)
{
	const char *out_path = NULL;
	struct capy_engine_opts o = { .threads = 1, .kv = CAPY_KV_F32 };
	struct capy_artifact *a;
	struct capy_engine *e;
	struct capy_seq *s;
	struct capy_err err = { 0 };
	struct capy_tokens ids = { 0 };
	bool step = false;
	uint64_t V;
	float *lg;
	char *text;
	size_t len;

	if (argc < 3)
		capy_die("usage: logits MODEL IDS_FILE [--threads N] [--isa NAME] [--kv T] [--step] [--out FILE]");
	for (int i = 3; i < argc; i++) {
		int64_t v;
		if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
			if (capy_parse_i64(argv[++i], 1, 256, &v, &err) < 0)
				capy_die("--threads: %s", err.msg);
			o.threads = (int)v;
		} else if (!strcmp(argv[i], "--isa") && i + 1 < argc) {
			const char *n = argv[++i];
			enum capy_isa isa = !strcmp(n, "scalar") ? CAPY_ISA_SCALAR : !strcmp(n, "avx2") ? CAPY_ISA_AVX2 : CAPY_ISA_AVX512;
			if (capy_isa_set(isa) < 0) {
				printf("skip: this CPU has no %s\n", n);
				return 0;
			}
		} else if (!strcmp(argv[i], "--kv") && i + 1 < argc) {
			const char *n = argv[++i];
			o.kv = !strcmp(n, "bf16") ? CAPY_KV_BF16 : !strcmp(n, "int8") ? CAPY_KV_INT8 : CAPY_KV_F32;
		} else if (!strcmp(argv[i], "--step")) {
			step = true;
		} else if (!strcmp(argv[i], "--out") && i + 1 < argc) {
			out_path = argv[++i];
		} else {
			capy_die("logits: unknown argument '%s'", argv[i]);
		}
	}
	text = slurp(argv[2], &len);
	if (capy_tokens_parse(text, len, argv[2], &ids, &err) < 0)
		capy_die("%s", err.msg);
	free(text);
	if (capy_artifact_open(&a, argv[1], &err) < 0 || capy_engine_new(&e, a, &o, &err) < 0 ||
	    capy_seq_new(e, &s, &err) < 0)
		capy_die("%s", err.msg);
	V = capy_engine_config(e)->vocab_size;
	lg = malloc(ids.n * V * sizeof(float));
	if (!lg)
		capy_die("out of memory");
	if (step) {
		for (size_t i = 0; i < ids.n; i++)
			if (capy_engine_forward(e, s, ids.ids + i, 1, lg + i * V, false, &err) < 0)
				capy_die("%s", err.msg);
	} else if (capy_engine_forward(e, s, ids.ids, ids.n, lg, true, &err) < 0) {
		capy_die("%s", err.msg);
	}
	{
		char hex[17];
		capy_hash_hex(capy_xxh3(lg, ids.n * V * sizeof(float)), hex);
		printf("xxh3 %s\n", hex);
	}
	if (out_path) {
		FILE *f = fopen(out_path, "wb");
		if (!f || fwrite(lg, sizeof(float), ids.n * V, f) != ids.n * V || fclose(f))
			capy_die("cannot write '%s'", out_path);
	}
	free(lg);
	capy_tokens_release(&ids);
	capy_seq_free(s);
	capy_engine_free(e);
	capy_artifact_close(a);
	return 0;
}

static struct capy_grammar *schema_grammar(const char *path, const struct capy_schema_opts *opts, char **gbnf)
{
	struct capy_err err = { 0 };
	struct capy_grammar *g;
	size_t len;
	char *text = slurp(path, &len);

	if (capy_json_schema_to_gbnf(text, len, opts, gbnf, &err) < 0)
		capy_die("%s: %s", path, err.msg);
	if (capy_grammar_compile(*gbnf, strlen(*gbnf), "root", &g, &err) < 0)
		capy_die("%s: %s", path, err.msg);
	free(text);
	return g;
}

/* Options shared by json-schema and schema-walk; returns the index of the schema argument. */
static int schema_options(int argc, char **argv, struct capy_schema_opts *opts, uint64_t *seed, uint64_t *count)
{
	struct capy_err err = { 0 };
	int i = 1;

	for (; i < argc - 1; i++) {
		if (!strcmp(argv[i], "--strict"))
			opts->strict = true;
		else if (!strcmp(argv[i], "--compact"))
			opts->compact = true;
		else if (seed && !strcmp(argv[i], "--seed") && i + 2 < argc && !capy_parse_u64(argv[i + 1], UINT64_MAX, seed, &err))
			i++;
		else if (count && !strcmp(argv[i], "--count") && i + 2 < argc && !capy_parse_u64(argv[i + 1], 1000000, count, &err))
			i++;
		else
			break;
	}
	if (i != argc - 1)
		capy_die("usage: %s [--strict] [--compact]%s SCHEMA.json", argv[0], seed ? " [--seed N] [--count K]" : "");
	return i;
}

static int cmd_json_schema(int argc, char **argv)
{
	struct capy_schema_opts opts = { 0 };
	char *gbnf;
	int i = schema_options(argc, argv, &opts, NULL, NULL);

	capy_grammar_free(schema_grammar(argv[i], &opts, &gbnf));
	return emit(gbnf, strlen(gbnf));
}

#define WALK_SOFT_LEN 200
#define WALK_HARD_LEN 100000

/* The weight of byte b as the next byte of a document of len bytes (before knowing whether the
 * grammar allows it); 0: not a candidate. */
static double walk_weight(unsigned b, size_t len, unsigned pending)
{
	static const unsigned char leads[] = { 0xc3, 0xe2, 0xf0 };

	if (pending)
		return b >= 0x80 && b <= 0xbf;
	if (!((b >= 0x20 && b < 0x7f) || b == '\n' || b == '\t' || memchr(leads, (int)b, sizeof(leads))))
		return 0;
	if (len > WALK_SOFT_LEN) /* toward the end: close strings first, then the rest */
		return b == '"' ? 400 : b == ']' || b == '}' ? 100 : b == '\\' ? 20 : 1;
	return b == ' ' || b == '\n' || b == '\t' ? 0.2 : 1;
}

/* One document drawn from the grammar into out (see the comment at the top). A refused byte
 * leaves the state as it was, so candidates are tried on the state itself, drawn by weight
 * without replacement until one is taken: the byte taken follows the weights of the allowed
 * bytes. */
static void walk_one(const struct capy_grammar *g, struct capy_rng *rng, struct capy_buf *out)
{
	struct capy_grammar_state *st;
	struct capy_err err = { 0 };
	double weight[256];
	unsigned pending = 0; /* continuation bytes still to come */

	if (capy_grammar_state_new(g, &st, &err) < 0)
		capy_die("%s", err.msg);
	capy_buf_reset(out);
	for (;;) {
		double total = 0;
		for (unsigned b = 0; b < 256; b++)
			total += weight[b] = walk_weight(b, out->len, pending);
		if (capy_grammar_accepting(st) && capy_rng_uniform(rng) < (out->len > WALK_SOFT_LEN ? 0.9 : 0.3))
			break;
		if (out->len >= WALK_HARD_LEN)
			capy_die("schema-walk: no end after %d bytes", WALK_HARD_LEN);
		int taken = -1;
		while (taken < 0 && total > 0) {
			double pick = capy_rng_uniform(rng) * total;
			unsigned b = 0;
			while (b < 255 && (pick -= weight[b]) >= 0)
				b++;
			if (weight[b] <= 0) /* rounding ran past the last candidate */
				for (b = 255; weight[b] <= 0; b--)
					;
			if (capy_grammar_feed(st, (const char *)&(char){ (char)b }, 1) == 1)
				taken = (int)b;
			total -= weight[b];
			weight[b] = 0;
			if (total < 1e-9)
				total = 0;
		}
		unsigned from = (unsigned)(capy_rng_next(rng) & 0xff);
		for (unsigned i = 0; taken < 0 && i < 256; i++) { /* a byte outside the candidates (a const's) */
			unsigned b = (from + i) & 0xff;
			if (!walk_weight(b, out->len, pending) && capy_grammar_feed(st, (const char *)&(char){ (char)b }, 1) == 1)
				taken = (int)b;
		}
		if (taken < 0) {
			if (capy_grammar_accepting(st))
				break;
			capy_die("schema-walk: stuck after %zu bytes: %.*s", out->len, (int)out->len, out->data);
		}
		capy_buf_putc(out, (char)taken);
		pending = pending ? pending - 1 : taken >= 0xf0 ? 3 : taken >= 0xe0 ? 2 : taken >= 0xc0 ? 1 : 0;
	}
	capy_grammar_state_free(st);
}

static int cmd_schema_walk(int argc, char **argv)
{
	struct capy_schema_opts opts = { 0 };
	uint64_t seed = 1, count = 100;
	struct capy_buf doc = { 0 };
	struct capy_rng rng;
	char *gbnf;
	int i = schema_options(argc, argv, &opts, &seed, &count);
	struct capy_grammar *g = schema_grammar(argv[i], &opts, &gbnf);

	capy_rng_seed(&rng, seed);
	for (uint64_t k = 0; k < count; k++) {
		walk_one(g, &rng, &doc);
		if (doc.oom || fwrite(doc.data ? doc.data : "", 1, doc.len, stdout) != doc.len || fputc(0, stdout) == EOF)
			capy_die("cannot write the output");
	}
	capy_buf_release(&doc);
	capy_grammar_free(g);
	free(gbnf);
	return fflush(stdout) ? CAPY_EXIT_FAIL : CAPY_EXIT_OK;
}

int cmd_main(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*fn)(int argc, char **argv);
	} cmds[] = {
		{ "check-golden", cmd_check_golden },
		{ "detokenize", cmd_detokenize },
		{ "json", cmd_json },
		{ "json-schema", cmd_json_schema },
		{ "logits", cmd_logits },
		{ "render", cmd_render },
		{ "render-template", cmd_render_template },
		{ "schema-walk", cmd_schema_walk },
		{ "tokenize", cmd_tokenize },
	};
	size_t i;

	if (argc < 2) {
		fprintf(stderr, "usage: capy-test-tool <command> [<args>]\n");
		return CAPY_EXIT_USAGE;
	}
	for (i = 0; i < ARRAY_SIZE(cmds); i++)
		if (!strcmp(argv[1], cmds[i].name))
			return cmds[i].fn(argc - 1, argv + 1);
	fprintf(stderr, "capy-test-tool: unknown command '%s'\n", argv[1]);
	return CAPY_EXIT_USAGE;
}
