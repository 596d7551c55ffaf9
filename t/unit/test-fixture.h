/* test-fixture.h - a committed fixture checkpoint converted into an artifact for a unit test
 * (after test.h). The artifact's file is unlinked at once: the open mapping keeps it. */
#ifndef CAPY_TEST_FIXTURE_H
#define CAPY_TEST_FIXTURE_H

#include "artifact/artifact.h"
#include "convert/convert.h"

#include <string.h>
#include <unistd.h>

static inline struct capy_artifact *test_open_fixture(const char *name)
{
	char model[4096], out[256];
	struct capy_convert_opts o = { 0 };
	struct capy_convert_stats st;
	struct capy_err err = { 0 };
	struct capy_artifact *a = NULL;

	test_fixture_path(name, model, sizeof(model));
	const char *base = strrchr(name, '/');

	snprintf(out, sizeof(out), "/tmp/capy-unit-%d-%s.capy", (int)getpid(), base ? base + 1 : name);
	o.model_dir = model;
	o.out_path = out;
	o.threads = 1;
	CHECK_EQ_INT(capy_convert(&o, &st, &err), 0);
	CHECK_MSG(capy_artifact_open(&a, out, &err) == 0, "%s", err.msg);
	unlink(out);
	return a;
}

#endif
