/* capy-kvdump - inspect the disk tier of the context cache (capy-serve --disk-cache-dir): its
 * entries' token counts, model identity, layers, dtypes, compression and checksums; --verify
 * recomputes every checksum, --tokens decodes the cached prompt with the model's tokenizer. */
#include "tool/tool.h"
#include "artifact/artifact.h"
#include "kvstore/kvstore.h"
#include "model/assets.h"
#include "model/config.h"
#include "util/file.h"
#include "util/hash.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <sys/stat.h>

static const char *const usage[] = {
	"capy-kvdump [--verify] [--json] [--model <model.capy> [--tokens]] <entry.capykv | directory>",
	NULL,
};

static const char *opt_model;
static bool opt_verify, opt_json, opt_tokens;

static const struct capy_opt opts[] = {
	CAPY_OPT_FLAG(0, "verify", &opt_verify, "read every section and check its checksum; exit 1 on any bad entry"),
	CAPY_OPT_FLAG(0, "json", &opt_json, "one JSON array of the entries on standard output"),
	CAPY_OPT_STRING('m', "model", &opt_model, "model", "the artifact: say whether each entry is this model's"),
	CAPY_OPT_FLAG(0, "tokens", &opt_tokens, "decode each entry's cached tokens with --model's tokenizer"),
	CAPY_OPT_END(),
};

static const char *dtype_name(uint32_t d)
{
	static const char *names[] = { "bf16", "f32", "int8" };
	return d < ARRAY_SIZE(names) ? names[d] : "?";
}

static const char *family_name(uint32_t f)
{
	return f <= CAPY_FAMILY_QWEN4_EXP ? capy_family_name((enum capy_family)f) : "?";
}

struct ctx {
	struct capy_tokenizer *tok; /* --tokens */
	uint64_t model;             /* --model's identity (0: none) */
	cJSON *arr;                 /* --json */
	int bad;
};

static char *hex(uint64_t v, char buf[17])
{
	capy_hash_hex(v, buf);
	return buf;
}

/* One entry: its header always; its tokens (and with --verify every section) checked. */
static void dump(struct ctx *c, const char *path)
{
	struct capy_kv_file_info fi = { 0 };
	struct capy_kv_entry *en = NULL;
	struct capy_err err = { 0 };
	char h[17], *text = NULL;
	size_t text_len = 0;
	int rc = capy_kv_entry_read(path, NULL, opt_verify ? 0 : CAPY_KV_READ_TOKENS, &en, &fi, &err);
	bool foreign = c->model && fi.sections && fi.id.model != c->model;

	if (rc < 0) {
		c->bad++;
		capy_error("%s", err.msg);
	}
	if (en && c->tok && capy_tokenizer_decode(c->tok, en->tokens, en->n_tokens, 0, &text, &text_len, &err) < 0)
		capy_error("'%s': %s", path, err.msg);
	if (opt_json) {
		cJSON *o = cJSON_CreateObject(), *secs = cJSON_AddArrayToObject(o, "sections");
		cJSON_AddStringToObject(o, "path", path);
		cJSON_AddBoolToObject(o, "ok", rc == 0);
		if (rc < 0)
			cJSON_AddStringToObject(o, "error", err.msg);
		if (fi.sections) {
			cJSON_AddNumberToObject(o, "version", fi.version);
			cJSON_AddStringToObject(o, "model", hex(fi.id.model, h));
			if (c->model)
				cJSON_AddBoolToObject(o, "this_model", !foreign);
			cJSON_AddStringToObject(o, "family", family_name(fi.id.family));
			cJSON_AddNumberToObject(o, "layers", fi.id.n_layers);
			cJSON_AddNumberToObject(o, "attention_layers", fi.id.n_kv_layers);
			cJSON_AddStringToObject(o, "kv_dtype", dtype_name(fi.id.kv_dtype));
			cJSON_AddStringToObject(o, "state_dtype", "f32");
			cJSON_AddStringToObject(o, "backend", fi.id.backend);
			cJSON_AddNumberToObject(o, "page_tokens", (double)fi.id.page_tokens);
			cJSON_AddNumberToObject(o, "page_bytes", (double)fi.id.page_bytes);
			cJSON_AddNumberToObject(o, "state_bytes", (double)fi.id.state_bytes);
			cJSON_AddNumberToObject(o, "tokens", (double)fi.n_tokens);
			cJSON *pos = cJSON_AddArrayToObject(o, "snapshots");
			for (uint32_t i = 0; en && i < en->n_snaps; i++)
				cJSON_AddItemToArray(pos, cJSON_CreateNumber((double)en->snap_pos[i]));
			cJSON_AddNumberToObject(o, "file_bytes", (double)fi.file_bytes);
			cJSON_AddNumberToObject(o, "raw_bytes", (double)fi.raw_bytes);
			cJSON_AddNumberToObject(o, "ratio", fi.file_bytes ? (double)fi.raw_bytes / (double)fi.file_bytes : 0);
			cJSON_AddStringToObject(o, "header_xxh3", hex(fi.header_xxh3, h));
			for (uint32_t i = 0; i < fi.n_sections; i++) {
				cJSON *s = cJSON_CreateObject();
				cJSON_AddStringToObject(s, "type", capy_kv_section_name(fi.sections[i].type));
				cJSON_AddNumberToObject(s, "raw_bytes", (double)fi.sections[i].raw);
				cJSON_AddNumberToObject(s, "stored_bytes", (double)fi.sections[i].stored);
				cJSON_AddNumberToObject(s, "offset", (double)fi.sections[i].offset);
				cJSON_AddStringToObject(s, "xxh3", hex(fi.sections[i].xxh3, h));
				cJSON_AddItemToArray(secs, s);
			}
		}
		if (en && opt_tokens) {
			cJSON *ids = cJSON_AddArrayToObject(o, "ids");
			for (uint64_t i = 0; i < en->n_tokens; i++)
				cJSON_AddItemToArray(ids, cJSON_CreateNumber(en->tokens[i]));
			if (text)
				cJSON_AddStringToObject(o, "text", text);
		}
		cJSON_AddItemToArray(c->arr, o);
	} else if (fi.sections) {
		printf("%s: %" PRIu64 " tokens, %" PRIu32 " snapshot%s", path, fi.n_tokens, fi.n_snaps, fi.n_snaps == 1 ? "" : "s");
		for (uint32_t i = 0; en && i < en->n_snaps; i++)
			printf("%s%" PRIu64, i ? "," : " at ", en->snap_pos[i]);
		printf("%s\n", rc < 0 ? " (BAD)" : opt_verify ? " (verified)" : "");
		printf("  model %s%s, %s, %" PRIu32 " layers (%" PRIu32 " attention), KV %s, state f32, %s backend\n",
		       hex(fi.id.model, h), c->model ? (foreign ? " (not --model's)" : " (--model's)") : "",
		       family_name(fi.id.family), fi.id.n_layers, fi.id.n_kv_layers, dtype_name(fi.id.kv_dtype), fi.id.backend);
		printf("  pages of %" PRIu64 " tokens (%" PRIu64 " bytes), states of %" PRIu64 " bytes\n", fi.id.page_tokens,
		       fi.id.page_bytes, fi.id.state_bytes);
		printf("  %" PRIu64 " bytes on disk, %" PRIu64 " raw, ratio %.2f; header xxh3 %s\n", fi.file_bytes,
		       fi.raw_bytes, fi.file_bytes ? (double)fi.raw_bytes / (double)fi.file_bytes : 0,
		       hex(fi.header_xxh3, h));
		for (uint32_t i = 0; i < fi.n_sections; i++)
			printf("  section %-2" PRIu32 " %-9s %10" PRIu64 " -> %10" PRIu64 " bytes at %-10" PRIu64 " xxh3 %s\n", i,
			       capy_kv_section_name(fi.sections[i].type), fi.sections[i].raw, fi.sections[i].stored,
			       fi.sections[i].offset, hex(fi.sections[i].xxh3, h));
		if (en && opt_tokens) {
			printf("  ids:");
			for (uint64_t i = 0; i < en->n_tokens; i++)
				printf(" %" PRId32, en->tokens[i]);
			printf("\n");
			if (text)
				printf("  text: %.*s\n", (int)text_len, text);
		}
	}
	if (foreign && !opt_json)
		capy_warning("'%s': another model's entry (model %s)", path, hex(fi.id.model, h));
	free(text);
	capy_kv_entry_free(en);
	capy_kv_file_info_free(&fi);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The entry files of a directory, in name order. */
static void dump_dir(struct ctx *c, const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	char **names = NULL;
	size_t n = 0, cap = 0, sl = strlen(CAPY_KV_SUFFIX);

	if (!d)
		capy_die("cannot read '%s': %s", dir, strerror(errno));
	while ((de = readdir(d))) {
		size_t l = strlen(de->d_name);
		if (de->d_name[0] == '.' || l <= sl || strcmp(de->d_name + l - sl, CAPY_KV_SUFFIX))
			continue;
		if (n == cap && !(names = realloc(names, (cap = cap ? 2 * cap : 64) * sizeof(*names))))
			capy_die("out of memory");
		if (!(names[n++] = capy_path_join(dir, de->d_name)))
			capy_die("out of memory");
	}
	closedir(d);
	qsort(names, n, sizeof(*names), cmp_str);
	for (size_t i = 0; i < n; i++) {
		dump(c, names[i]);
		free(names[i]);
	}
	free(names);
	if (!opt_json)
		fprintf(stderr, "%s: %zu entries in '%s'\n", capy_tool_name, n, dir);
}

int cmd_main(int argc, char **argv)
{
	struct ctx c = { 0 };
	struct capy_artifact *a = NULL;
	struct capy_assets as = { 0 };
	struct capy_err err = { 0 };
	struct stat sb;
	int n = capy_opt_parse(argc, argv, usage, opts);

	if (n != 1)
		capy_usage_error(usage, opts, n ? "one path, please" : "no entry or directory given");
	if (opt_tokens && !opt_model)
		capy_usage_error(usage, opts, "--tokens needs --model (the tokenizer to decode with)");
	if (opt_model) {
		if (capy_artifact_open(&a, opt_model, &err) < 0)
			capy_die("%s", err.msg);
		c.model = capy_kv_model_id(a);
		if (opt_tokens) {
			if (capy_assets_from_artifact(&as, a, &err) < 0)
				capy_die("%s", err.msg);
			if (!(c.tok = as.tok))
				capy_die("'%s' has no tokenizer", opt_model);
		}
	}
	if (opt_json && !(c.arr = cJSON_CreateArray()))
		capy_die("out of memory");
	if (stat(argv[0], &sb) < 0)
		capy_die("cannot open '%s': %s", argv[0], strerror(errno));
	if (S_ISDIR(sb.st_mode))
		dump_dir(&c, argv[0]);
	else
		dump(&c, argv[0]);
	if (opt_json) {
		char *s = cJSON_PrintUnformatted(c.arr);
		if (!s)
			capy_die("out of memory");
		puts(s);
		free(s);
		cJSON_Delete(c.arr);
	}
	if (opt_tokens)
		capy_assets_release(&as);
	capy_artifact_close(a);
	if (c.bad)
		capy_error("%d bad entr%s", c.bad, c.bad == 1 ? "y" : "ies");
	return c.bad ? CAPY_EXIT_FAIL : CAPY_EXIT_OK;
}
