/* capy-gen-scripted - capy-gen built for tests of what it prints about an engine that only a
 * GPU has (expert offload's counts): the same program with the scripted backend
 * (scripted-backend.c) available as --device script. With CAPY_SCRIPT set to a script file,
 * that device is the default. Never installed. */
#include "scripted-backend.h"

#define cmd_main gen_cmd_main
#include "../../cmd/capy-gen.c"
#undef cmd_main

int cmd_main(int argc, char **argv)
{
	const char *script = getenv("CAPY_SCRIPT");

	if (capy_scripted_backend_register() < 0)
		capy_die("cannot register the scripted backend");
	if (script && *script) {
		opt_device = "script";
		opt_backend_arg = script;
	}
	return gen_cmd_main(argc, argv);
}
