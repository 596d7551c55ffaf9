/* fuzz-hfconfig.c - libFuzzer target: arbitrary bytes as a model config.json. The first
 * byte picks the family; accepted configs go through normalization (and must parse back
 * to the same normalized form) and through the conversion plan of a synthetic model. */
#include "convert/convert-impl.h"
#include "util/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const families[] = { "qwen3_5", "qwen3_5_moe", "qwen3_next", "qwen4_exp", "llama" };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct capy_err err = { 0 };
	struct capy_model_config c, c2;
	cJSON *root, *norm;
	char *a, *b;

	if (size < 1)
		return 0;
	if (capy_json_parse((const char *)data + 1, size - 1, "fuzz", &root, &err) < 0)
		return 0;
	if (capy_model_config_parse(&c, families[data[0] % 5], root, "fuzz", &err) == 0) {
		struct plan p = { 0 };
		norm = capy_model_config_json(&c);
		if (capy_model_config_parse(&c2, families[data[0] % 5], norm, "norm", &err) < 0)
			__builtin_trap();
		a = cJSON_PrintUnformatted(norm);
		cJSON *n2 = capy_model_config_json(&c2);
		b = cJSON_PrintUnformatted(n2);
		if (strcmp(a, b))
			__builtin_trap();
		free(a);
		free(b);
		cJSON_Delete(n2);
		cJSON_Delete(norm);
		/* Keep plans small enough to build many per second. */
		if (c.n_layers * (c.n_experts + 1) < 4096) {
			p.cfg = c;
			if (plan_build(&p, NULL, &err) == 0)
				plan_resolve_synthetic(&p);
			plan_release(&p);
		}
	}
	cJSON_Delete(root);
	return 0;
}
