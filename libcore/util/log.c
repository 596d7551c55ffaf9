/* log.c - leveled logging through a callback (see log.h). */
#include "log.h"

enum capy_log_level capy_log_level_now = CAPY_LOG_WARN;
static capy_log_fn log_fn;
static void *log_ud;

void capy_log_set(capy_log_fn fn, void *ud)
{
	log_fn = fn;
	log_ud = ud;
}

void capy_log_set_level(enum capy_log_level level)
{
	capy_log_level_now = level;
}

static const char *const level_names[] = { "error", "warn", "info", "debug" };

int capy_log_parse_level(const char *s)
{
	for (size_t i = 0; i < ARRAY_SIZE(level_names); i++)
		if (!strcmp(s, level_names[i]))
			return (int)i;
	return -1;
}

const char *capy_log_level_name(enum capy_log_level level)
{
	if ((unsigned)level < ARRAY_SIZE(level_names))
		return level_names[level];
	return "?";
}

void capy_log_emit(enum capy_log_level level, const char *fmt, ...)
{
	char msg[2048];
	va_list ap;

	if (!log_fn)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_fn(level, msg, log_ud);
}
