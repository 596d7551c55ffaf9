/* assets.h - the text side of a model: tokenizer, chat template, special-token and
 * generation defaults, loaded from an artifact's embedded files or from loose files
 * (tokenizer.json, a template), so tools can tokenize and render before any weights load.
 *
 *	struct capy_assets as = { 0 };
 *	if (capy_assets_from_artifact(&as, artifact, &err) < 0) die(...);
 *	capy_tokenizer_encode(as.tok, ...);
 *	capy_assets_release(&as);
 */
#ifndef CAPY_MODEL_ASSETS_H
#define CAPY_MODEL_ASSETS_H

#include "../artifact/artifact.h"
#include "../text/tokenizer.h"
#include "../text/chat.h"

#define CAPY_ASSETS_MAX_EOS 8

struct capy_assets {
	struct capy_tokenizer *tok;       /* NULL when no tokenizer was given */
	struct capy_tmpl *tmpl;           /* NULL when no chat template was found */
	char *tokenizer_config;           /* tokenizer_config.json text, or NULL */
	size_t tokenizer_config_len;
	/* Ids that end generation: generation_config.json eos_token_id, else config.json's. */
	int32_t eos[CAPY_ASSETS_MAX_EOS];
	int n_eos;
	/* generation_config.json sampling defaults (NAN / -1 when absent). */
	double temperature, top_p, min_p, repetition_penalty;
	int64_t top_k;
};

/* From the files embedded in an artifact (tokenizer.json, tokenizer_config.json,
 * chat_template.jinja or tokenizer_config.json's chat_template, generation_config.json). */
int capy_assets_from_artifact(struct capy_assets *as, const struct capy_artifact *a, struct capy_err *err);

/* From loose files; any path may be NULL. */
int capy_assets_from_files(struct capy_assets *as, const char *tokenizer_json, const char *template_path,
			   const char *tokenizer_config, struct capy_err *err);

void capy_assets_release(struct capy_assets *as);

/* Take over what extra has (tokenizer, template, tokenizer_config text) in place of as's own
 * (files given on a command line over an artifact's); extra is released. */
void capy_assets_override(struct capy_assets *as, struct capy_assets *extra);

/* True if id ends generation. */
bool capy_assets_is_eos(const struct capy_assets *as, int32_t id);

#endif
