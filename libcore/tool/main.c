/* main.c - the only main(): program name, signals, CAPY_LOG, then cmd_main(). */
#include "tool.h"
#include "../cpu/linear.h"
#include "../util/log.h"

#include <signal.h>

const char *capy_tool_name = "capy";

static void log_to_stderr(enum capy_log_level level, const char *msg, void *ud)
{
	(void)ud;
	fprintf(stderr, "%s: %s: %s\n", capy_tool_name, capy_log_level_name(level), msg);
}

int main(int argc, char **argv)
{
	const char *env, *slash;

	if (argc > 0 && argv[0]) {
		slash = strrchr(argv[0], '/');
		capy_tool_name = slash ? slash + 1 : argv[0];
	}
	/* Data goes to stdout; a closed pipe (capy-foo | head) should end us quietly. */
	signal(SIGPIPE, SIG_DFL);
	/* A file-size limit must surface as EFBIG from write(), not kill us mid-file. */
	signal(SIGXFSZ, SIG_IGN);

	capy_log_set(log_to_stderr, NULL);
	env = getenv("CAPY_LOG");
	if (env && *env) {
		int level = capy_log_parse_level(env);
		if (level < 0) {
			fprintf(stderr, "%s: error: CAPY_LOG='%s' is not one of error, warn, info, debug\n",
				capy_tool_name, env);
			return CAPY_EXIT_USAGE;
		}
		capy_log_set_level((enum capy_log_level)level);
	}
	/* CAPY_ISA: the CPU kernels of an ISA below the best one, for results of another machine
	 * (each ISA has its own summation order; capy-gate sets it to a reference's) */
	env = getenv("CAPY_ISA");
	if (env && *env) {
		int isa;
		for (isa = 0; isa < CAPY_ISA_COUNT && strcmp(env, capy_isa_name((enum capy_isa)isa)); isa++)
			;
		if (isa == CAPY_ISA_COUNT || capy_isa_set((enum capy_isa)isa) < 0) {
			fprintf(stderr, "%s: error: CAPY_ISA='%s' is %s (this CPU's best: %s)\n", capy_tool_name, env,
				isa == CAPY_ISA_COUNT ? "not scalar, avx2, avx512 or avx512-vnni" : "beyond this CPU",
				capy_isa_name(capy_isa_best()));
			return CAPY_EXIT_USAGE;
		}
	}
	return cmd_main(argc, argv);
}
