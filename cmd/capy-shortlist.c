/* capy-shortlist - the draft vocabulary for speculative decoding: a priority-ordered list of
 * token ids built from the tokenizer and argmax-count rankings (capy-ppl --argmax-counts). */
#include "tool/tool.h"
#include "artifact/artifact.h"
#include "model/assets.h"
#include "util/file.h"
#include "util/parse.h"

#include <nettle/sha2.h>
#include <unistd.h>

static const char *const usage[] = {
	"capy-shortlist --tokenizer (<model.capy> | <tokenizer.json>) --prefix <n> --count-top <k> --ranking <file> [--extra-ranking <file> --extra-top <m>] --out <file>",
	NULL,
};

static const char *opt_tokenizer, *opt_ranking, *opt_extra, *opt_out;
static int64_t opt_prefix = -1, opt_top = -1, opt_extra_top = -1;

static const struct capy_opt opts[] = {
	CAPY_OPT_STRING(0, "tokenizer", &opt_tokenizer, "model", "artifact or tokenizer.json whose vocabulary is listed"),
	CAPY_OPT_INT(0, "prefix", &opt_prefix, "n", "always include ids 0 .. n-1", 0, 1 << 30),
	CAPY_OPT_INT(0, "count-top", &opt_top, "k", "then the k best ids of --ranking", 0, 1 << 30),
	CAPY_OPT_STRING(0, "ranking", &opt_ranking, "file", "argmax counts: '<id> <count>' lines (capy-ppl --argmax-counts)"),
	CAPY_OPT_STRING(0, "extra-ranking", &opt_extra, "file", "a second ranking, e.g. from another corpus"),
	CAPY_OPT_INT(0, "extra-top", &opt_extra_top, "m", "then the m best ids of --extra-ranking", 0, 1 << 30),
	CAPY_OPT_STRING('o', "out", &opt_out, "file", "where to write the list ('-' for standard output)"),
	CAPY_OPT_END(),
};

struct ranked {
	int32_t id;
	uint64_t count, line;
};

struct ranking {
	struct ranked *v;
	size_t n;
	size_t skipped; /* ids the tokenizer has no token for (e.g. a model's padding rows) */
	char sha[65];
};

/* Most counted first; ties keep the lower id; without counts, the file's order. */
static int cmp_ranked(const void *a, const void *b)
{
	const struct ranked *x = a, *y = b;

	if (x->count != y->count)
		return x->count > y->count ? -1 : 1;
	if (x->line != y->line && x->count == UINT64_MAX)
		return x->line < y->line ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

static void sha256_hex(const char *data, size_t len, char out[65])
{
	struct sha256_ctx ctx;
	uint8_t d[SHA256_DIGEST_SIZE];

	sha256_init(&ctx);
	sha256_update(&ctx, len, (const uint8_t *)data);
	sha256_digest(&ctx, sizeof(d), d);
	for (int i = 0; i < SHA256_DIGEST_SIZE; i++)
		snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void read_ranking(const char *path, int32_t limit, struct ranking *r)
{
	struct capy_err err = { 0 };
	char *text, *line, *save = NULL;
	size_t len, cap = 0;
	uint64_t lineno = 0;
	bool with_counts = false, without = false;

	if (capy_read_file(path, 1u << 30, &text, &len, &err) < 0)
		capy_die("%s", err.msg);
	sha256_hex(text, len, r->sha);
	r->v = NULL;
	r->n = r->skipped = 0;
	for (line = text; line && line <= text + len; line = save) {
		char *nl = memchr(line, '\n', (size_t)(text + len - line)), *f1, *f2, *f3, *ctx = NULL;
		int64_t id;
		uint64_t count = UINT64_MAX;
		save = nl ? nl + 1 : NULL;
		if (nl)
			*nl = 0;
		lineno++;
		f1 = strtok_r(line, " \t\r", &ctx);
		if (!f1 || f1[0] == '#')
			continue;
		f2 = strtok_r(NULL, " \t\r", &ctx);
		f3 = strtok_r(NULL, " \t\r", &ctx);
		if (f3)
			capy_die("'%s' line %" PRIu64 ": expected '<id> <count>', found more fields", path, lineno);
		if (capy_parse_i64(f1, 0, INT32_MAX, &id, &err) < 0)
			capy_die("'%s' line %" PRIu64 ": token id: %s", path, lineno, err.msg);
		if (f2 && capy_parse_u64(f2, UINT64_MAX - 1, &count, &err) < 0)
			capy_die("'%s' line %" PRIu64 ": count: %s", path, lineno, err.msg);
		with_counts |= f2 != NULL;
		without |= f2 == NULL;
		if (with_counts && without)
			capy_die("'%s' line %" PRIu64 ": some lines have counts and some do not", path, lineno);
		if (id >= limit) {
			r->skipped++;
			continue;
		}
		if (r->n == cap && !(r->v = realloc(r->v, (cap = cap ? 2 * cap : 1024) * sizeof(*r->v))))
			capy_die("out of memory");
		r->v[r->n++] = (struct ranked){ (int32_t)id, count, lineno };
	}
	qsort(r->v, r->n, sizeof(*r->v), cmp_ranked);
	free(text);
}

int cmd_main(int argc, char **argv)
{
	struct capy_artifact *a = NULL;
	struct capy_assets as;
	struct capy_err err = { 0 };
	struct ranking main_r, extra_r = { 0 };
	struct capy_outfile of = { .fd = -1 };
	uint8_t *taken;
	int32_t *list, limit;
	size_t n = 0, added = 0, from_prefix = 0, from_top = 0, from_extra = 0;
	FILE *f;
	int npos = capy_opt_parse(argc, argv, usage, opts);

	if (npos)
		capy_usage_error(usage, opts, "unexpected argument '%s'", argv[0]);
	if (!opt_tokenizer || opt_prefix < 0 || opt_top < 0 || !opt_ranking || !opt_out)
		capy_usage_error(usage, opts, "--tokenizer, --prefix, --count-top, --ranking and --out are required");
	if (!!opt_extra != (opt_extra_top >= 0))
		capy_usage_error(usage, opts, "--extra-ranking and --extra-top go together");

	{
		uint8_t magic[8] = { 0 };
		FILE *m = fopen(opt_tokenizer, "rb");
		if (!m)
			capy_die("cannot open '%s': %s", opt_tokenizer, strerror(errno));
		if (fread(magic, 1, 8, m) != 8)
			memset(magic, 0, 8);
		fclose(m);
		if (!memcmp(magic, capy_artifact_magic, 8)) {
			if (capy_artifact_open(&a, opt_tokenizer, &err) < 0 || capy_assets_from_artifact(&as, a, &err) < 0)
				capy_die("%s", err.msg);
		} else if (capy_assets_from_files(&as, opt_tokenizer, NULL, NULL, &err) < 0) {
			capy_die("%s", err.msg);
		}
	}
	if (!as.tok)
		capy_die("'%s' has no tokenizer", opt_tokenizer);
	limit = capy_tokenizer_id_limit(as.tok);
	if (opt_prefix > limit)
		capy_die("--prefix %" PRId64 " is beyond the tokenizer's %" PRId32 " ids", opt_prefix, limit);
	read_ranking(opt_ranking, limit, &main_r);
	if (opt_extra)
		read_ranking(opt_extra, limit, &extra_r);

	taken = calloc((size_t)limit, 1);
	list = malloc((size_t)limit * sizeof(*list));
	if (!taken || !list)
		capy_die("out of memory");
	/* 1. Added tokens (EOS, turn and tool markers): a draft must be able to propose them. */
	for (int32_t id = 0; id < limit; id++)
		if (capy_tokenizer_is_added(as.tok, id) && !taken[id]) {
			taken[id] = 1;
			list[n++] = id;
			added++;
		}
	/* 2. The first ids of the vocabulary (bytes and the most frequent merges in BPE order). */
	for (int32_t id = 0; id < opt_prefix; id++)
		if (!taken[id] && capy_tokenizer_piece(as.tok, id, &(size_t){ 0 })) {
			taken[id] = 1;
			list[n++] = id;
			from_prefix++;
		}
	/* 3. and 4. The best of each ranking that is not listed yet. */
	for (size_t i = 0; i < main_r.n && from_top < (size_t)opt_top; i++)
		if (!taken[main_r.v[i].id]) {
			taken[main_r.v[i].id] = 1;
			list[n++] = main_r.v[i].id;
			from_top++;
		}
	for (size_t i = 0; i < extra_r.n && from_extra < (size_t)opt_extra_top; i++)
		if (!taken[extra_r.v[i].id]) {
			taken[extra_r.v[i].id] = 1;
			list[n++] = extra_r.v[i].id;
			from_extra++;
		}

	if (!strcmp(opt_out, "-")) {
		f = stdout;
	} else {
		if (capy_outfile_open(&of, opt_out, &err) < 0)
			capy_die("%s", err.msg);
		capy_cleanup_on_signal(of.tmp_path);
		f = fdopen(dup(of.fd), "w");
		if (!f)
			capy_die("cannot write '%s': %s", opt_out, strerror(errno));
	}
	fprintf(f, "# capy-shortlist %s: %zu ids in priority order\n", CAPY_VERSION, n);
	fprintf(f, "# tokenizer: %s (%" PRId32 " ids); added tokens: %zu\n", opt_tokenizer, limit, added);
	if (opt_prefix > 0)
		fprintf(f, "# prefix: ids 0..%" PRId64 ": %zu\n", opt_prefix - 1, from_prefix);
	else
		fprintf(f, "# prefix: none\n");
	fprintf(f, "# ranking: %s sha256 %s; count-top %" PRId64 ": %zu; ids without a token skipped: %zu\n",
		opt_ranking, main_r.sha, opt_top, from_top, main_r.skipped);
	if (opt_extra)
		fprintf(f, "# extra-ranking: %s sha256 %s; extra-top %" PRId64 ": %zu; ids without a token skipped: %zu\n",
			opt_extra, extra_r.sha, opt_extra_top, from_extra, extra_r.skipped);
	for (size_t i = 0; i < n; i++)
		fprintf(f, "%" PRId32 "\n", list[i]);
	if (f != stdout) {
		if (fclose(f) != 0)
			capy_die("cannot write '%s': %s", opt_out, strerror(errno));
		if (capy_outfile_commit(&of, &err) < 0)
			capy_die("%s", err.msg);
		capy_cleanup_on_signal(NULL);
	} else if (fflush(stdout) != 0) {
		capy_die("cannot write standard output: %s", strerror(errno));
	}
	free(taken);
	free(list);
	free(main_r.v);
	free(extra_r.v);
	capy_assets_release(&as);
	capy_artifact_close(a);
	return CAPY_EXIT_OK;
}
