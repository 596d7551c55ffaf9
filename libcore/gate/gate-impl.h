/* gate-impl.h - what the stages of capy-gate share (inside libcore/gate only). */
#ifndef CAPY_GATE_IMPL_H
#define CAPY_GATE_IMPL_H

#include "gate.h"
#include "../util/json.h"

/* The path of a reference file, malloc'd ("DIR/name"); NULL on OOM. */
char *gate_ref_path(const struct capy_gate *g, const char *name);
/* A bad reference: g->bad_ref set and a CAPY_EFORMAT message "'DIR/file': <fmt>". */
CAPY_PRINTF(4, 5) int gate_bad_ref(struct capy_gate *g, struct capy_err *err, const char *file, const char *fmt, ...);
/* Read and parse DIR/file (missing or malformed: gate_bad_ref). */
int gate_read_json(struct capy_gate *g, const char *file, cJSON **out, struct capy_err *err);
/* Read DIR/file as text (missing: gate_bad_ref). */
int gate_read_text(struct capy_gate *g, const char *file, char **out, size_t *len, struct capy_err *err);
/* Write DIR/file atomically (temporary name, then rename). */
int gate_write_file(struct capy_gate *g, const char *file, const char *data, size_t len, struct capy_err *err);
/* Write a tree formatted, with a final newline; the tree is not freed. */
int gate_write_json(struct capy_gate *g, const char *file, const cJSON *tree, struct capy_err *err);
/* The integers of a JSON list field (every item an exact int32); what names the field. */
int gate_json_ids(struct capy_gate *g, const char *file, const cJSON *list, const char *what, int32_t **ids,
		  size_t *n, struct capy_err *err);
/* A JSON list of ids (NULL on OOM). */
cJSON *gate_ids_json(const int32_t *ids, size_t n);
/* s with control characters and quotes escaped, cut at max bytes ("..." after), into out. */
void gate_excerpt(char *out, size_t cap, const char *s, size_t len, size_t max);

/* The fixed prompts --record writes (prompts.c): a plain text, and chats (a request body's
 * "messages" and "tools") that make the template render a tool list, a call and its result. */
struct gate_chat {
	const char *name;
	const char *body; /* JSON: {"messages": [...], "tools": [...]} */
};
extern const char gate_text_prompt[];
extern const struct gate_chat gate_chats[];
extern const size_t gate_n_chats;

/* Render a chat ({"messages", "tools"} object) with the model's template, generation prompt
 * added; *out malloc'd. */
int gate_render_chat(const struct capy_gate *g, const cJSON *chat, char **out, size_t *len, struct capy_err *err);

#endif
