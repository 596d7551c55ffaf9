/* fuzz-safetensors.c - libFuzzer target: arbitrary bytes as a safetensors file. */
#include "ckpt/ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct capy_st_header h;
	struct capy_err err = { 0 };

	if (capy_st_parse(data, size, size, "fuzz.safetensors", &h, &err) == 0) {
		/* Every accepted tensor lies inside the input. */
		for (size_t i = 0; i < h.ntensors; i++)
			if (h.tensors[i].offset + h.tensors[i].bytes > size)
				__builtin_trap();
		capy_st_header_release(&h);
	} else if (!err.msg[0]) {
		__builtin_trap(); /* a refusal always says why */
	}
	return 0;
}
