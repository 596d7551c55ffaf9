/* tool.h - what the capy-* programs share: main(), option tables, usage, exit
 * codes, the progress bar and clean-up of temporary files on signals.
 *
 * This is the only part of libcore allowed to print or exit. A program is one
 * file cmd/capy-foo.c defining
 *
 *	int cmd_main(int argc, char **argv);
 *
 * which parses its options with capy_opt_parse() and returns an exit status.
 * Adding a program: write cmd/capy-foo.c, add it to PROGRAMS in the Makefile,
 * write man/man1/capy-foo.1 (its SYNOPSIS must match --help), add t/ tests and
 * a .gitignore line.
 */
#ifndef CAPY_TOOL_H
#define CAPY_TOOL_H

#include "../util/err.h"

enum capy_exit {
	CAPY_EXIT_OK = 0,
	CAPY_EXIT_FAIL = 1,  /* the work failed, or a documented negative verdict */
	CAPY_EXIT_USAGE = 2, /* bad usage */
};

extern const char *capy_tool_name;

int cmd_main(int argc, char **argv);

/* "capy-foo: error: <msg>" on stderr, then exit(1). */
CAPY_NORETURN CAPY_PRINTF(1, 2) void capy_die(const char *fmt, ...);
/* "capy-foo: error: <msg>" on stderr. */
CAPY_PRINTF(1, 2) void capy_error(const char *fmt, ...);
/* "capy-foo: warning: <msg>" on stderr. */
CAPY_PRINTF(1, 2) void capy_warning(const char *fmt, ...);

/* --- option tables ------------------------------------------------------- */

enum capy_opt_kind {
	CAPY_OPTK_END = 0,
	CAPY_OPTK_GROUP,  /* a heading in --help */
	CAPY_OPTK_FLAG,   /* bool *, set to true */
	CAPY_OPTK_STRING, /* const char **; repeated use keeps the last */
	CAPY_OPTK_INT,    /* int64_t *, within [min, max] */
	CAPY_OPTK_DOUBLE, /* double *, within [min, max] */
	CAPY_OPTK_SIZE,   /* uint64_t *, with K/M/G/T suffixes */
};

struct capy_opt {
	enum capy_opt_kind kind;
	int short_name;        /* 0 for none */
	const char *long_name; /* without the dashes; NULL for none */
	void *value;
	const char *argh; /* placeholder in --help, e.g. "file" */
	const char *help;
	double min, max;
};

#define CAPY_OPT_GROUP(h) { CAPY_OPTK_GROUP, 0, NULL, NULL, NULL, (h), 0, 0 }
#define CAPY_OPT_FLAG(s, l, v, h) { CAPY_OPTK_FLAG, (s), (l), (v), NULL, (h), 0, 0 }
#define CAPY_OPT_STRING(s, l, v, a, h) { CAPY_OPTK_STRING, (s), (l), (v), (a), (h), 0, 0 }
#define CAPY_OPT_INT(s, l, v, a, h, lo, hi) { CAPY_OPTK_INT, (s), (l), (v), (a), (h), (lo), (hi) }
#define CAPY_OPT_DOUBLE(s, l, v, a, h, lo, hi) { CAPY_OPTK_DOUBLE, (s), (l), (v), (a), (h), (lo), (hi) }
#define CAPY_OPT_SIZE(s, l, v, a, h) { CAPY_OPTK_SIZE, (s), (l), (v), (a), (h), 0, 0 }
#define CAPY_OPT_END() { CAPY_OPTK_END, 0, NULL, NULL, NULL, NULL, 0, 0 }

/*
 * Parse argv against opts. Options and positional arguments may be mixed;
 * "--" ends the options. -h/--help prints the usage to stdout and exits 0;
 * --version prints the version and exits 0; an unknown option or a bad value
 * prints the error and the usage to stderr and exits 2. Returns the number of
 * positional arguments, which are moved to argv[0..n).
 *
 * usage is NULL-terminated; its first line is printed after "usage: ".
 */
int capy_opt_parse(int argc, char **argv, const char *const *usage, const struct capy_opt *opts);

/* Print the usage and options (to stdout for help, stderr for errors). */
void capy_opt_usage(FILE *f, const char *const *usage, const struct capy_opt *opts);

/* Report a usage error (message, then the usage) and exit 2. */
CAPY_NORETURN CAPY_PRINTF(3, 4) void capy_usage_error(const char *const *usage,
						      const struct capy_opt *opts, const char *fmt, ...);

/* --- progress ---------------------------------------------------------------- */

/* A progress bar on stderr, drawn only when stderr is a terminal (or CAPY_PROGRESS=1),
 * at most ten times a second; safe to advance from several threads. */
struct capy_progress;

struct capy_progress *capy_progress_new(const char *label, uint64_t total_bytes);
void capy_progress_add(struct capy_progress *p, uint64_t bytes);
/* Finish the bar (prints the final line) and free it. */
void capy_progress_done(struct capy_progress *p);

/* --- clean-up on signals -------------------------------------------------- */

/* While registered, SIGINT/SIGTERM/SIGHUP remove path before the program exits.
 * One path at a time; pass NULL to unregister. */
void capy_cleanup_on_signal(const char *path);

/* "1.50 GiB": bytes in binary units, two decimals. */
void capy_human_bytes(char *buf, size_t n, double bytes);

/* Monotonic seconds. */
double capy_now(void);

/* Peak resident set size of this process in bytes (0 if unknown). */
uint64_t capy_peak_rss(void);

/* --device, --gpu and --gpu-mem of the tools that run a model: the device must be a backend
 * of this build (a usage error names the ones there are); the values go into the engine's
 * options (struct capy_engine_opts). */
struct capy_engine_opts;
void capy_device_opts(const char *const *usage, const struct capy_opt *opts, const char *device, int64_t gpu,
		      uint64_t gpu_mem, struct capy_engine_opts *eo);

/* --expert-slots and --expert-cpu-threads of the same tools (cuda, expert offload): slots is
 * --expert-slots' value (-1: not given; the option takes N >= 0), threads
 * --expert-cpu-threads' (NULL: not given). Sets eo's expert_slots (not given: 0, the budget
 * decides; 0: CAPY_EXPERT_SLOTS_NONE, every routed expert on the host; else at most N) and
 * expert_threads; a bad thread count is a usage error naming the option. The CPU backend
 * ignores both, as it does --gpu-mem. */
void capy_expert_opts(const char *const *usage, const struct capy_opt *opts, int64_t slots, const char *threads,
		      struct capy_engine_opts *eo);

/* --tp N and --tp-payload NAME (tensor parallelism, docs/tp.md; tp 0: not given, payload
 * NULL: fp32) into eo; a bad payload is a usage error naming it. */
void capy_tp_opts(const char *const *usage, const struct capy_opt *opts, int64_t tp, const char *payload,
		  struct capy_engine_opts *eo);

/* --plan: the memory plan of the CUDA backend for the artifact at model (offload/plan.h),
 * computed without a GPU, printed to stdout; then the refusal, if the plan cannot start, on
 * stderr. Returns the exit status (0, or 1 with the refusal). Exits 1 on an unreadable model. */
struct capy_plan_opts;
int capy_plan_print(const char *model, const struct capy_plan_opts *po);
/* The engine's plan line on stderr ("capy-foo: plan: ..."), for engines that have one. */
struct capy_engine;
void capy_plan_log(const struct capy_engine *e);
/* After a run, for an engine that offloads routed experts (capy_engine_offload_stats), one
 * line of its counts on stderr ("capy-foo: expert offload: ..."), misses per token over the
 * `tokens` the run counts (`what` names them, e.g. "generated token"); nothing otherwise. */
void capy_offload_log(const struct capy_engine *e, uint64_t tokens, const char *what);

#endif
