/* fuzz-artifact.c - libFuzzer target: arbitrary bytes as a .capy artifact. Accepted
 * artifacts are walked completely (lookups, slice offsets, checksum verification),
 * which must stay inside the input. */
#include "artifact/artifact.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct capy_artifact *a;
	struct capy_err err = { 0 };

	if (capy_artifact_parse(&a, data, size, "fuzz.capy", &err) < 0) {
		if (!err.msg[0])
			__builtin_trap();
		return 0;
	}
	for (size_t i = 0; i < a->ntensors; i++) {
		const struct capy_tensor_info *t = &a->tensors[i];
		if (capy_artifact_find(a, t->name) != t)
			__builtin_trap();
		for (uint64_t s = 0; s < t->nslices && s < 4; s++)
			if (capy_tensor_slice_offset(t, s) + t->slice_bytes > size)
				__builtin_trap();
	}
	capy_artifact_verify(a, 1, NULL, NULL, &err);
	capy_artifact_close(a);
	return 0;
}
