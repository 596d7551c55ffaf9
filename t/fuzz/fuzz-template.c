/* fuzz-template.c - libFuzzer target: arbitrary template source, compiled and rendered against a
 * fixed chat context with small limits. Any crash, leak, sanitizer report or hang is a bug; a
 * template error or an exceeded limit is the expected outcome for most inputs.
 *
 *	make fuzz && t/fuzz/run.sh 300 template
 *
 * Seeds (t/fuzz/corpus/template/) are links to the real templates and the feature cases of
 * t/jinja/; the dictionary is t/fuzz/template.dict.
 */
#include "text/chat.h"

static const char context[] =
	"{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"},"
	" {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"hé\"}, {\"type\": \"image\"}]},"
	" {\"role\": \"assistant\", \"content\": \"<think>\\nr\\n</think>\\n\\nok\", \"tool_calls\":"
	"  [{\"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1.5, \"b\": [null, true, \"x\"]}}}]},"
	" {\"role\": \"tool\", \"content\": \"res\"}],"
	" \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\":"
	"  {\"type\": \"object\", \"properties\": {\"a\": {\"maximum\": 12345678901234567890}}}}}],"
	" \"add_generation_prompt\": true, \"enable_thinking\": false, \"eos_token\": \"<|im_end|>\"}";

static struct capy_tdoc *doc;
static struct capy_tval *vars;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct capy_tmpl_limits lim = {
		.max_steps = 200000, .max_output = 1 << 20, .max_memory = 64 << 20, .max_depth = 32,
	};
	struct capy_err err;
	struct capy_tmpl *t;
	char *out;

	if (!doc) {
		doc = capy_tdoc_new();
		if (!doc || capy_tdoc_parse_json(doc, context, sizeof(context) - 1, "context", &vars,
						 &err) < 0)
			abort();
	}
	if (capy_tmpl_compile((const char *)data, size, "fuzz", &t, &err) < 0)
		return 0;
	if (capy_tmpl_render(t, vars, &lim, &out, NULL, &err) == 0)
		free(out);
	capy_tmpl_free(t);
	return 0;
}
