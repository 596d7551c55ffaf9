/* cleanup.c - remove a registered temporary file when a signal ends the program. */
#include "tool.h"

#include <signal.h>
#include <unistd.h>

static char cleanup_path[4096];
static volatile sig_atomic_t cleanup_armed;

static void on_signal(int sig)
{
	if (cleanup_armed)
		unlink(cleanup_path);
	/* Re-raise with the default action so the exit status says which signal. */
	signal(sig, SIG_DFL);
	raise(sig);
}

void capy_cleanup_on_signal(const char *path)
{
	static bool installed;

	cleanup_armed = 0;
	if (!path)
		return;
	snprintf(cleanup_path, sizeof(cleanup_path), "%s", path);
	if (!installed) {
		struct sigaction sa;
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_signal;
		sigemptyset(&sa.sa_mask);
		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGTERM, &sa, NULL);
		sigaction(SIGHUP, &sa, NULL);
		installed = true;
	}
	cleanup_armed = 1;
}
