/* capy-test-tool.c - exposes libcore internals to the shell tests (after git's test-tool).
 *
 *	capy-test-tool render TEMPLATE CASE.json [TOKENIZER_CONFIG.json]
 *		render a chat case: {"messages": [...], "tools": [...], "kwargs": {...},
 *		"add_generation_prompt": true, "keep_string_arguments": false}
 *	capy-test-tool render-template TEMPLATE [VARS.json]
 *		render a template with the variables of a JSON object
 *	capy-test-tool json FILE
 *		read JSON and write it back as Python's json.dumps(ensure_ascii=False) would
 *
 * Output goes to stdout byte for byte (no newline added); errors to stderr with exit 1.
 */
#include "tool/tool.h"
#include "text/chat.h"
#include "util/file.h"

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

int cmd_main(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*fn)(int argc, char **argv);
	} cmds[] = {
		{ "json", cmd_json },
		{ "render", cmd_render },
		{ "render-template", cmd_render_template },
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
