/* u-template.c - unit tests for libcore/text: JSON values, the Jinja engine, chat rendering. */
#include "test.h"
#include "text/chat.h"

static char *render_lim(const char *src, const char *vars_json, const struct capy_tmpl_limits *lim,
			int *rc, struct capy_err *err)
{
	struct capy_tdoc *doc = capy_tdoc_new();
	struct capy_tval *vars = NULL;
	struct capy_tmpl *t = NULL;
	char *out = NULL;

	capy_err_clear(err);
	*rc = 0;
	if (vars_json)
		*rc = capy_tdoc_parse_json(doc, vars_json, strlen(vars_json), "vars", &vars, err);
	if (!*rc)
		*rc = capy_tmpl_compile(src, strlen(src), "t", &t, err);
	if (!*rc)
		*rc = capy_tmpl_render(t, vars, lim, &out, NULL, err);
	capy_tmpl_free(t);
	capy_tdoc_free(doc);
	return out;
}

/* Render and compare with the expected text; the message shows both. */
#define CHECK_RENDER(src, vars, want)                                                              \
	do {                                                                                       \
		struct capy_err e_;                                                                \
		int rc_;                                                                           \
		char *out_ = render_lim((src), (vars), NULL, &rc_, &e_);                           \
		CHECK_MSG(rc_ == 0 && out_ && !strcmp(out_, (want)), "%s -> rc %d '%s' (%s), want '%s'", \
			  (src), rc_, out_ ? out_ : "", e_.msg, (want));                            \
		free(out_);                                                                        \
	} while (0)

#define CHECK_RENDER_ERR(src, vars, code, want)                                                    \
	do {                                                                                       \
		struct capy_err e_;                                                                \
		int rc_;                                                                           \
		char *out_ = render_lim((src), (vars), NULL, &rc_, &e_);                           \
		CHECK_MSG(rc_ == (code) && !out_ && !strcmp(e_.msg, (want)), "%s -> rc %d '%s', want %d '%s'", \
			  (src), rc_, e_.msg, (code), (want));                                       \
		free(out_);                                                                        \
	} while (0)

static void check_json(const char *in, const char *want)
{
	struct capy_err err = { 0 };
	struct capy_tdoc *doc = capy_tdoc_new();
	struct capy_tval *v;
	char *out = NULL;
	int rc = capy_tdoc_parse_json(doc, in, strlen(in), "in", &v, &err);

	if (!rc)
		rc = capy_tval_to_json(v, &out, NULL, &err);
	CHECK_MSG(!rc && !strcmp(out, want), "%s -> '%s' (%s), want '%s'", in, out ? out : "", err.msg,
		  want);
	free(out);
	capy_tdoc_free(doc);
}

static void check_json_err(const char *in, const char *want)
{
	struct capy_err err = { 0 };
	struct capy_tdoc *doc = capy_tdoc_new();
	struct capy_tval *v;
	int rc = capy_tdoc_parse_json(doc, in, strlen(in), "in", &v, &err);

	CHECK_MSG(rc == CAPY_EFORMAT && !strcmp(err.msg, want), "%s -> %d '%s', want '%s'", in, rc,
		  err.msg, want);
	capy_tdoc_free(doc);
}

static void test_json_numbers(void)
{
	check_json("[1, -0, 1.0, 1.50, 1e2, 1E-7, 1e16, 1e15, 0.1, -0.0, 123456789.125]",
		   "[1, 0, 1.0, 1.5, 100.0, 1e-07, 1e+16, 1000000000000000.0, 0.1, -0.0, 123456789.125]");
	check_json("[12345678901234567890, -99999999999999999999, 9007199254740993, 9223372036854775807]",
		   "[12345678901234567890, -99999999999999999999, 9007199254740993, 9223372036854775807]");
	check_json("[1.7976931348623157e308, 5e-324, 0.30000000000000004, 2.5e-5, 1e22]",
		   "[1.7976931348623157e+308, 5e-324, 0.30000000000000004, 2.5e-05, 1e+22]");
	check_json("[NaN, Infinity, -Infinity]", "[NaN, Infinity, -Infinity]");
}

static void test_json_strings_and_order(void)
{
	check_json("{\"b\": 1, \"a\": {\"z\": [], \"y\": {}}, \"b\": 2}",
		   "{\"b\": 2, \"a\": {\"z\": [], \"y\": {}}}");
	check_json("\"\\u00e9\\n\\t\\\"\\\\\\/\\u0001\\u007f\\u2028\\ud83d\\ude00\"",
		   "\"é\\n\\t\\\"\\\\/\\u0001\x7f\xe2\x80\xa8😀\"");
	check_json("\"\\ud800x\"", "\"\xef\xbf\xbdx\"");
	check_json(" true ", "true");
}

static void test_json_errors(void)
{
	check_json_err("{\"a\": 1,}", "in:1:9: expected a string key");
	check_json_err("[1,\n 2,\n 03]", "in:3:3: expected ',' or ']'");
	check_json_err("[1] x", "in:1:5: trailing characters after the value");
	check_json_err("\"a\nb\"", "in:1:3: control character in string");
	check_json_err("\"\xff\"", "in:1:2: invalid UTF-8 in string");
	check_json_err("", "in:1:1: unexpected end of input");
	{
		char deep[2000];

		memset(deep, '[', sizeof(deep) - 1);
		deep[sizeof(deep) - 1] = '\0';
		check_json_err(deep, "in:1:514: nested deeper than 512 levels");
	}
}

static void test_values_api(void)
{
	struct capy_err err = { 0 };
	struct capy_tdoc *doc = capy_tdoc_new();
	struct capy_tval *d = capy_tval_dict(doc), *l = capy_tval_list(doc);
	char *out = NULL;
	size_t len;
	int i;

	CHECK_EQ_INT(capy_tval_push(doc, l, capy_tval_int(doc, -3)), 0);
	CHECK_EQ_INT(capy_tval_push(doc, l, capy_tval_float(doc, 2.0)), 0);
	CHECK_EQ_INT(capy_tval_push(doc, l, capy_tval_none(doc)), 0);
	CHECK_EQ_INT(capy_tval_set(doc, d, "list", l), 0);
	CHECK_EQ_INT(capy_tval_set(doc, d, "s", capy_tval_str(doc, "x\"y", 3)), 0);
	CHECK_EQ_INT(capy_tval_set(doc, d, "t", capy_tval_bool(doc, true)), 0);
	/* more than 8 keys switches the dict to its hash index */
	for (i = 0; i < 40; i++) {
		char key[16];

		snprintf(key, sizeof(key), "k%d", i);
		CHECK_EQ_INT(capy_tval_set(doc, d, key, capy_tval_int(doc, i)), 0);
	}
	CHECK_EQ_INT(capy_tval_set(doc, d, "s", capy_tval_str(doc, "new", 3)), 0);
	CHECK_STR(capy_tval_strv(capy_tval_get(d, "s"), &len), "new");
	CHECK_EQ_INT(len, 3);
	CHECK(capy_tval_get(d, "k39") != NULL);
	CHECK(capy_tval_get(d, "k40") == NULL);
	CHECK_EQ_INT(capy_tval_len(l), 3);
	CHECK(capy_tval_at(l, 3) == NULL);
	CHECK_EQ_INT(capy_tval_push(doc, d, l), -1);
	CHECK_EQ_INT(capy_tval_to_json(l, &out, &len, &err), 0);
	CHECK_STR(out, "[-3, 2.0, null]");
	free(out);
	capy_tdoc_free(doc);
}

static void test_values_walk(void)
{
	static const char text[] = "{\"a\": 1, \"b\": 2.5, \"c\": 12345678901234567890, \"d\": true, "
				   "\"e\": null, \"f\": \"s\", \"g\": [1], \"h\": {}}";
	static const enum capy_tval_kind kinds[] = {
		CAPY_TVAL_INT, CAPY_TVAL_FLOAT, CAPY_TVAL_INT, CAPY_TVAL_BOOL,
		CAPY_TVAL_NONE, CAPY_TVAL_STR, CAPY_TVAL_LIST, CAPY_TVAL_DICT,
	};
	struct capy_err err = { 0 };
	struct capy_tdoc *doc = capy_tdoc_new();
	struct capy_tval *v = NULL, *e;
	const char *key;
	size_t klen, i;
	int64_t n = 0;

	CHECK_EQ_INT(capy_tdoc_parse_json(doc, text, strlen(text), "t", &v, &err), 0);
	CHECK_EQ_INT(capy_tval_dict_len(v), ARRAY_SIZE(kinds));
	for (i = 0; i < ARRAY_SIZE(kinds); i++) {
		key = capy_tval_dict_entry(v, i, &klen, &e);
		CHECK(key && klen == 1 && key[0] == (char)('a' + i));
		CHECK_EQ_INT(capy_tval_kind(e), kinds[i]);
	}
	CHECK(capy_tval_dict_entry(v, i, &klen, &e) == NULL);
	CHECK_EQ_INT(capy_tval_intv(capy_tval_get(v, "a"), &n), 0);
	CHECK_EQ_INT(n, 1);
	CHECK_EQ_INT(capy_tval_intv(capy_tval_get(v, "b"), &n), -1);
	CHECK_EQ_INT(capy_tval_intv(capy_tval_get(v, "c"), &n), -1);
	CHECK(capy_tval_numv(capy_tval_get(v, "b")) == 2.5);
	CHECK(capy_tval_numv(capy_tval_get(v, "c")) > 1e19);
	CHECK(isnan(capy_tval_numv(capy_tval_get(v, "f"))));
	CHECK(capy_tval_boolv(capy_tval_get(v, "d")));
	CHECK(!capy_tval_boolv(capy_tval_get(v, "a")));
	CHECK_EQ_INT(capy_tval_kind(NULL), CAPY_TVAL_OTHER);
	CHECK_EQ_INT(capy_tval_dict_len(capy_tval_get(v, "g")), 0);
	capy_tdoc_free(doc);
}

static void test_engine_features(void)
{
	const char *vars = "{\"m\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\"}],"
			   " \"d\": {\"b\": 1, \"a\": 2.0}, \"n\": null, \"big\": 12345678901234567890}";

	CHECK_RENDER("{{ 'a' ~ 1 ~ none ~ true ~ q }}", vars, "a1NoneTrue");
	CHECK_RENDER("{{ m[0].role }}{{ m[1].content }}|{{ m[5] }}|{{ d.zz }}", vars, "user||");
	CHECK_RENDER("{{ d }}{{ [1, 'x', (2,)] }}", vars, "{'b': 1, 'a': 2.0}[1, 'x', (2,)]");
	CHECK_RENDER("{{ d|tojson }}|{{ big|tojson }}|{{ 'é<'|tojson }}", vars,
		     "{\"b\": 1, \"a\": 2.0}|12345678901234567890|\"é<\"");
	CHECK_RENDER("{% for k, v in d|items %}{{ k }}={{ v }},{% endfor %}", vars, "b=1,a=2.0,");
	CHECK_RENDER("{% for x in [1, 2, 3] %}{{ loop.index }}{{ loop.first }}{{ loop.last }}"
		     "{{ loop.revindex }}{{ loop.previtem }}{{ loop.nextitem }};{% endfor %}",
		     NULL, "1TrueFalse32;2FalseFalse213;3FalseTrue12;");
	CHECK_RENDER("{% for x in range(9) %}{% if x == 1 %}{% continue %}{% elif x == 4 %}"
		     "{% break %}{% endif %}{{ x }}{% endfor %}", NULL, "023");
	CHECK_RENDER("{{ [1, 2, 3][::-1] }}{{ 'abc'[1:] }}{{ 'héllo'[-4:-2] }}", NULL, "[3, 2, 1]bcél");
	CHECK_RENDER("{% set ns = namespace(n=0) %}{% macro inc(by=1) %}{% set ns.n = ns.n + by %}"
		     "{% endmacro %}{{ inc() }}{{ inc(by=5) }}{{ ns.n }}", NULL, "6");
	CHECK_RENDER("{% macro f(a, b='B') %}{{ a }}{{ b }}{% endmacro %}{{ f(1) }}{{ f(1, b=2) }}"
		     "{{ f('x')|upper }}", NULL, "1B12XB");
	CHECK_RENDER("{{ x is defined }}{{ n is none }}{{ d is mapping }}{{ 'a' is string }}"
		     "{{ m is iterable }}{{ true is true }}{{ 0 is false }}", vars,
		     "FalseTrueTrueTrueTrueTrueFalse");
	CHECK_RENDER("{{ ' x '|trim }}{{ [1, 2]|length }}{{ 'ab'|upper }}{{ [3, 1]|sort|join(',') }}"
		     "{{ q|default('dflt') }}{{ '5'|int + 1 }}{{ 2.5|round }}", NULL,
		     "x2AB1,3dflt62.0");
	CHECK_RENDER("{{ 'a,b'.split(',')[-1] }}{{ 'xhix'.strip('x') }}{{ '\\nq\\n'.lstrip('\\n') }}"
		     "{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith('x') }}{{ 'a-b'.replace('-', '+') }}",
		     NULL, "bhiq\nTrueFalsea+b");
	CHECK_RENDER("{{ 7 // 2 }} {{ -7 % 3 }} {{ 1 / 4 }} {{ 2 ** 10 }} {{ 'a' if 0 else 'b' }}"
		     " {{ 1 in [1] }} {{ 'x' not in 'abc' }}", NULL, "3 2 0.25 1024 b True True");
	CHECK_RENDER("a  {{- ' b ' -}}  c\n  {%- if true %}  d{% endif %}", NULL, "a b c  d");
	CHECK_RENDER("x\n    {% if true %}\n    y\n    {% endif %}\nz\n", NULL, "x\n    y\nz");
	CHECK_RENDER("{% raw %}{{ x }}{% endraw %}{# c #}|", NULL, "{{ x }}|");
	CHECK_RENDER("{% set x %} a {{ 1 }} {% endset %}[{{ x }}]", NULL, "[ a 1 ]");
	CHECK_RENDER("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}", NULL, "1");
	CHECK_RENDER("{{ 1e20 }} {{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e-5 }}", NULL,
		     "1e+20 1.0 0.30000000000000004 1e-05");
}

static void test_engine_errors(void)
{
	CHECK_RENDER_ERR("{{ 1 +", NULL, CAPY_EFORMAT,
			 "t:1:1: unexpected end of template, expected '}}'");
	CHECK_RENDER_ERR("a\n{% if x %}", NULL, CAPY_EFORMAT,
			 "t:2:4: unexpected end of template, expected 'endif'");
	CHECK_RENDER_ERR("{% endif %}", NULL, CAPY_EFORMAT, "t:1:4: unexpected 'endif'");
	CHECK_RENDER_ERR("{% break %}", NULL, CAPY_EFORMAT, "t:1:4: 'break' outside of a loop");
	CHECK_RENDER_ERR("{{ x|bogus }}", NULL, CAPY_EFORMAT, "t:1:6: no filter named 'bogus'");
	CHECK_RENDER_ERR("{% include 'x' %}", NULL, CAPY_EFORMAT, "t:1:4: 'include' is not supported");
	CHECK_RENDER_ERR("\n {{ a.b }}", NULL, CAPY_EFORMAT, "t:2:6: 'a' is undefined");
	CHECK_RENDER_ERR("{{ 1 + 'a' }}", NULL, CAPY_EFORMAT,
			 "t:1:6: unsupported operand type(s) for +: 'int' and 'str'");
	CHECK_RENDER_ERR("{{ raise_exception('No user query found in messages.') }}", NULL,
			 CAPY_EINVAL, "No user query found in messages.");
	CHECK_RENDER_ERR("{{ x|tojson }}", NULL, CAPY_EFORMAT,
			 "t:1:6: Object of type Undefined is not JSON serializable");
	CHECK_RENDER_ERR("{{ 9223372036854775807 + 1 }}", NULL, CAPY_EFORMAT,
			 "t:1:24: integer overflow in '+'");
	/* found by fuzz-template: 8 hex digits overflowed a signed shift */
	CHECK_RENDER_ERR("{{ '\\Uffffffff' }}", NULL, CAPY_EFORMAT,
			 "t:1:5: invalid \\U escape in string literal");
	CHECK_RENDER_ERR("{{ '\\U00110000' }}", NULL, CAPY_EFORMAT,
			 "t:1:5: invalid \\U escape in string literal");
	CHECK_RENDER("{{ '\\U0001F600\\u00e9\\x41' }}", NULL, "😀éA");
	CHECK_RENDER_ERR("{{ '\xff' }}", NULL, CAPY_EFORMAT,
			 "t: template is not valid UTF-8 or has a NUL byte");
}

static void test_limits(void)
{
	struct capy_tmpl_limits lim = { .max_steps = 1000 };
	struct capy_err err;
	char *out;
	int rc;

	out = render_lim("{% for i in range(10000) %}{{ i }}{% endfor %}", NULL, &lim, &rc, &err);
	CHECK(!out && rc == CAPY_EFORMAT);
	CHECK_CONTAINS(err.msg, "step limit exceeded (1000 steps)");
	lim = (struct capy_tmpl_limits){ .max_output = 100 };
	out = render_lim("{% for i in range(1000) %}{{ i }}{% endfor %}", NULL, &lim, &rc, &err);
	CHECK(!out && rc == CAPY_EFORMAT);
	CHECK_CONTAINS(err.msg, "rendered output exceeds 100 bytes");
	lim = (struct capy_tmpl_limits){ .max_memory = 1 << 20 };
	out = render_lim("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}"
			 "{% set ns.l = ns.l + [i] %}{% endfor %}", NULL, &lim, &rc, &err);
	CHECK(!out && rc == CAPY_EFORMAT);
	CHECK_CONTAINS(err.msg, "template memory limit exceeded (1048576 bytes)");
	lim = (struct capy_tmpl_limits){ .max_depth = 5 };
	out = render_lim("{% macro f(n) %}{% if n %}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(4) }}",
			 NULL, &lim, &rc, &err);
	CHECK(out && rc == 0);
	free(out);
	out = render_lim("{% macro f(n) %}{% if n %}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}",
			 NULL, &lim, &rc, &err);
	CHECK(!out && rc == CAPY_EFORMAT);
	CHECK_CONTAINS(err.msg, "macro calls nested deeper than 5");
}

static const char chat_tmpl[] =
	"{% for m in messages %}<{{ m.role }}>{{ m.content }}"
	"{% for c in m.tool_calls or [] %}[{{ c.function.name }} {{ c.function.arguments|tojson }}]"
	"{% endfor %}{% endfor %}{% if add_generation_prompt %}<gen>{% endif %}"
	"|{{ tools|tojson }}|{{ documents }}|{{ eos_token }}|{{ bos_token is defined }}|{{ think }}";

static void test_chat_render(void)
{
	static const char config[] = "{\"bos_token\": null, \"eos_token\": {\"content\": \"</s>\"},"
				     " \"additional_special_tokens\": [\"<a>\"]}";
	const char *msgs = "[{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", "
			   "\"content\": \"\", \"tool_calls\": [{\"function\": {\"name\": \"f\", "
			   "\"arguments\": \"{\\\"x\\\":1.0,\\\"y\\\":[1,2]}\"}}]}]";
	struct capy_chat_opts opts = { .tokenizer_config = config,
				       .tokenizer_config_len = sizeof(config) - 1 };
	struct capy_err err = { 0 };
	struct capy_tmpl *t;
	char *out = NULL;
	size_t len;

	CHECK_EQ_INT(capy_tmpl_compile(chat_tmpl, strlen(chat_tmpl), "chat", &t, &err), 0);
	CHECK_EQ_INT(capy_chat_render(t, msgs, "[{\"name\": \"f\"}]", "{\"think\": false}", true,
				      &opts, &out, &len, &err), 0);
	CHECK_STR(out, "<user>hi<assistant>[f {\"x\": 1.0, \"y\": [1, 2]}]<gen>|[{\"name\": \"f\"}]"
		       "|None|</s>|False|False");
	CHECK_EQ_INT(len, strlen(out));
	free(out);
	opts.keep_string_arguments = true;
	CHECK_EQ_INT(capy_chat_render(t, msgs, NULL, NULL, false, &opts, &out, NULL, &err), 0);
	CHECK_STR(out, "<user>hi<assistant>[f \"{\\\"x\\\":1.0,\\\"y\\\":[1,2]}\"]|null|None|</s>|False|");
	free(out);
	CHECK_EQ_INT(capy_chat_render(t, "[{\"role\": \"assistant\", \"tool_calls\": [{\"function\": "
				      "{\"name\": \"f\", \"arguments\": \"{bad\"}}]}]",
				      NULL, NULL, false, NULL, &out, NULL, &err), CAPY_EINVAL);
	CHECK_STR(err.msg, "messages[0].tool_calls[0] arguments:1:2: expected a string key");
	CHECK_EQ_INT(capy_chat_render(t, "{}", NULL, NULL, false, NULL, &out, NULL, &err), CAPY_EINVAL);
	CHECK_EQ_INT(capy_chat_render(t, "[]", NULL, "{\"messages\": 1}", false, NULL, &out, NULL, &err),
		     CAPY_EINVAL);
	CHECK_CONTAINS(err.msg, "'messages' is set by the request itself");
	CHECK_EQ_INT(capy_chat_render(t, "[", NULL, NULL, false, NULL, &out, NULL, &err), CAPY_EFORMAT);
	CHECK_STR(err.msg, "messages:1:2: unexpected end of input");
	CHECK(out == NULL);
	capy_tmpl_free(t);
}

int main(void)
{
	RUN(test_json_numbers);
	RUN(test_json_strings_and_order);
	RUN(test_json_errors);
	RUN(test_values_api);
	RUN(test_values_walk);
	RUN(test_engine_features);
	RUN(test_engine_errors);
	RUN(test_limits);
	RUN(test_chat_render);
	return test_summary();
}
