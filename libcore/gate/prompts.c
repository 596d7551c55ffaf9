/* prompts.c - the fixed prompts of capy-gate references (gate-impl.h), and their rendering. */
#include "gate-impl.h"
#include "../model/assets.h"

/* Prose with a number, code and punctuation: every family's tokenizer splits it differently. */
const char gate_text_prompt[] =
	"The capybara is the largest living rodent. It lives near rivers and lakes in South America, "
	"where groups of 10 to 20 graze together.\nint main(void) { return 0; }\n";

#define CALCULATOR                                                                                            \
	"{\"type\": \"function\", \"function\": {\"name\": \"calculator\", \"description\": \"Evaluate an "    \
	"arithmetic expression and return its value.\", \"parameters\": {\"type\": \"object\", \"properties\": " \
	"{\"expression\": {\"type\": \"string\", \"description\": \"The expression, for example 12 * (3 + 4)\"}}, " \
	"\"required\": [\"expression\"]}}}"

const struct gate_chat gate_chats[] = {
	{ "chat-tool",
	  "{\"messages\": [{\"role\": \"system\", \"content\": \"You are a helpful assistant.\"}, "
	  "{\"role\": \"user\", \"content\": \"What is 128 * 46?\"}], \"tools\": [" CALCULATOR "]}" },
	{ "chat-tool-result",
	  "{\"messages\": [{\"role\": \"user\", \"content\": \"What is 128 * 46?\"}, "
	  "{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"id\": \"call_0\", \"type\": \"function\", "
	  "\"function\": {\"name\": \"calculator\", \"arguments\": \"{\\\"expression\\\": \\\"128 * 46\\\"}\"}}]}, "
	  "{\"role\": \"tool\", \"tool_call_id\": \"call_0\", \"content\": \"5888\"}], \"tools\": [" CALCULATOR "]}" },
};
const size_t gate_n_chats = ARRAY_SIZE(gate_chats);

int gate_render_chat(const struct capy_gate *g, const cJSON *chat, char **out, size_t *len, struct capy_err *err)
{
	const cJSON *messages = cJSON_GetObjectItemCaseSensitive(chat, "messages"),
		    *tools = cJSON_GetObjectItemCaseSensitive(chat, "tools");
	struct capy_chat_opts co = { g->as->tokenizer_config, g->as->tokenizer_config_len, false, NULL };
	char *m = NULL, *t = NULL;
	int rc;

	if (!g->as->tmpl)
		return capy_err_set(err, CAPY_EUNSUPPORTED, "'%s' has no chat template", g->model_path);
	if (!cJSON_IsArray(messages) || (tools && !cJSON_IsArray(tools)))
		return capy_err_set(err, CAPY_EFORMAT, "a chat needs a list 'messages' (and 'tools' a list)");
	m = cJSON_PrintUnformatted(messages);
	if (tools)
		t = cJSON_PrintUnformatted(tools);
	if (!m || (tools && !t))
		rc = capy_err_set(err, CAPY_ENOMEM, "out of memory");
	else
		rc = capy_chat_render(g->as->tmpl, m, t, NULL, true, &co, out, len, err);
	free(m);
	free(t);
	return rc;
}
