/* opt.c - table-driven option parsing and --help (see tool.h). */
#include "tool.h"
#include "../util/parse.h"

static void opt_name(char *buf, size_t n, const struct capy_opt *o)
{
	if (o->long_name)
		snprintf(buf, n, "--%s", o->long_name);
	else
		snprintf(buf, n, "-%c", o->short_name);
}

void capy_opt_usage(FILE *f, const char *const *usage, const struct capy_opt *opts)
{
	for (int i = 0; usage && usage[i]; i++)
		fprintf(f, "%s%s\n", i ? "   or: " : "usage: ", usage[i]);
	for (const struct capy_opt *o = opts; o && o->kind != CAPY_OPTK_END; o++) {
		char left[96];
		int len = 0;

		if (o->kind == CAPY_OPTK_GROUP) {
			fprintf(f, "\n%s\n", o->help);
			continue;
		}
		if (o == opts)
			fputc('\n', f);
		len += snprintf(left + len, sizeof(left) - (size_t)len, "    ");
		if (o->short_name)
			len += snprintf(left + len, sizeof(left) - (size_t)len, "-%c%s", o->short_name,
					o->long_name ? ", " : "");
		if (o->long_name)
			len += snprintf(left + len, sizeof(left) - (size_t)len, "--%s", o->long_name);
		if (o->argh)
			len += snprintf(left + len, sizeof(left) - (size_t)len, " <%s>", o->argh);
		if (len < 30)
			fprintf(f, "%-30s%s\n", left, o->help);
		else
			fprintf(f, "%s\n%-30s%s\n", left, "", o->help);
	}
}

void capy_usage_error(const char *const *usage, const struct capy_opt *opts, const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fprintf(stderr, "%s: error: ", capy_tool_name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	capy_opt_usage(stderr, usage, opts);
	exit(CAPY_EXIT_USAGE);
}

static int set_value(const struct capy_opt *o, const char *arg, struct capy_err *err)
{
	switch (o->kind) {
	case CAPY_OPTK_STRING:
		*(const char **)o->value = arg;
		return 0;
	case CAPY_OPTK_INT: {
		int64_t v;
		if (capy_parse_i64(arg, (int64_t)o->min, (int64_t)o->max, &v, err) < 0)
			return -1;
		*(int64_t *)o->value = v;
		return 0;
	}
	case CAPY_OPTK_DOUBLE:
		return capy_parse_double(arg, o->min, o->max, (double *)o->value, err);
	case CAPY_OPTK_SIZE:
		return capy_parse_size(arg, (uint64_t *)o->value, err);
	default:
		CAPY_BUG("option kind %d takes no value", o->kind);
	}
}

static bool takes_value(const struct capy_opt *o)
{
	return o->kind == CAPY_OPTK_STRING || o->kind == CAPY_OPTK_INT ||
	       o->kind == CAPY_OPTK_DOUBLE || o->kind == CAPY_OPTK_SIZE;
}

static const struct capy_opt *find_long(const struct capy_opt *opts, const char *name, size_t len)
{
	for (const struct capy_opt *o = opts; o->kind != CAPY_OPTK_END; o++)
		if (o->long_name && strlen(o->long_name) == len && !strncmp(o->long_name, name, len))
			return o;
	return NULL;
}

static const struct capy_opt *find_short(const struct capy_opt *opts, int c)
{
	for (const struct capy_opt *o = opts; o->kind != CAPY_OPTK_END; o++)
		if (o->short_name == c && o->kind != CAPY_OPTK_GROUP)
			return o;
	return NULL;
}

int capy_opt_parse(int argc, char **argv, const char *const *usage, const struct capy_opt *opts)
{
	struct capy_err err = { 0 };
	int npos = 0;
	bool only_pos = false;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const struct capy_opt *o;
		const char *val = NULL;
		char name[128];

		if (only_pos || a[0] != '-' || !a[1]) {
			argv[npos++] = argv[i];
			continue;
		}
		if (!strcmp(a, "--")) {
			only_pos = true;
			continue;
		}
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			capy_opt_usage(stdout, usage, opts);
			exit(CAPY_EXIT_OK);
		}
		if (!strcmp(a, "--version")) {
			printf("%s %s\n", capy_tool_name, CAPY_VERSION);
			exit(CAPY_EXIT_OK);
		}
		if (a[1] == '-') {
			const char *eq = strchr(a + 2, '=');
			size_t len = eq ? (size_t)(eq - (a + 2)) : strlen(a + 2);
			o = find_long(opts, a + 2, len);
			if (!o)
				capy_usage_error(usage, opts, "unknown option '%.*s'", (int)len + 2, a);
			if (eq) {
				if (!takes_value(o))
					capy_usage_error(usage, opts, "option '--%s' takes no value",
							 o->long_name);
				val = eq + 1;
			}
		} else {
			o = find_short(opts, a[1]);
			if (!o)
				capy_usage_error(usage, opts, "unknown option '%s'", a);
			if (a[2]) {
				if (!takes_value(o))
					capy_usage_error(usage, opts, "unknown option '%s'", a);
				val = a + 2;
			}
		}
		opt_name(name, sizeof(name), o);
		if (!takes_value(o)) {
			*(bool *)o->value = true;
			continue;
		}
		if (!val) {
			if (i + 1 >= argc)
				capy_usage_error(usage, opts, "option '%s' needs a value", name);
			val = argv[++i];
		}
		if (set_value(o, val, &err) < 0)
			capy_usage_error(usage, opts, "option '%s': %s", name, err.msg);
	}
	argv[npos] = NULL;
	return npos;
}
