/* log.h - leveled logging through a callback the tool installs.
 *
 * The library reports progress and warnings through capy_log_*; it never writes
 * to a stream itself. Tools install a sink with capy_log_set() (libcore/tool's
 * default prints "capy-<tool>: <level>: <msg>" to stderr). The level is checked
 * before the arguments are formatted, so a disabled debug log costs a compare.
 *
 * Thread-safety: capy_log_set/capy_log_set_level are for start-up; logging itself
 * may be called from any thread (the sink must cope).
 */
#ifndef CAPY_UTIL_LOG_H
#define CAPY_UTIL_LOG_H

#include "../core.h"

enum capy_log_level {
	CAPY_LOG_ERROR = 0,
	CAPY_LOG_WARN = 1,
	CAPY_LOG_INFO = 2,
	CAPY_LOG_DEBUG = 3,
};

typedef void (*capy_log_fn)(enum capy_log_level level, const char *msg, void *ud);

extern enum capy_log_level capy_log_level_now;

void capy_log_set(capy_log_fn fn, void *ud);
void capy_log_set_level(enum capy_log_level level);

/* Parse "error|warn|info|debug"; returns -1 if unknown. */
int capy_log_parse_level(const char *s);
const char *capy_log_level_name(enum capy_log_level level);

CAPY_PRINTF(2, 3) void capy_log_emit(enum capy_log_level level, const char *fmt, ...);

#define capy_log(level, ...)                                                                       \
	do {                                                                                       \
		if ((level) <= capy_log_level_now)                                                 \
			capy_log_emit((level), __VA_ARGS__);                                       \
	} while (0)
#define capy_log_error(...) capy_log(CAPY_LOG_ERROR, __VA_ARGS__)
#define capy_log_warn(...) capy_log(CAPY_LOG_WARN, __VA_ARGS__)
#define capy_log_info(...) capy_log(CAPY_LOG_INFO, __VA_ARGS__)
#define capy_log_debug(...) capy_log(CAPY_LOG_DEBUG, __VA_ARGS__)

#endif
