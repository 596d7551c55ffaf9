/* assets.c - tokenizer, chat template and generation defaults of a model (see assets.h). */
#include "assets.h"
#include "../util/file.h"
#include "../util/json.h"

#include <math.h>

#define TEXT_MAX (256u << 20)

static void defaults(struct capy_assets *as)
{
	memset(as, 0, sizeof(*as));
	as->temperature = as->top_p = as->min_p = as->repetition_penalty = NAN;
	as->top_k = -1;
}

static void add_eos(struct capy_assets *as, const cJSON *v)
{
	const cJSON *it;
	int64_t id;

	if (cJSON_IsNumber(v) && capy_json_i64(v, &id) == 0 && as->n_eos < CAPY_ASSETS_MAX_EOS) {
		as->eos[as->n_eos++] = (int32_t)id;
		return;
	}
	cJSON_ArrayForEach(it, v)
		add_eos(as, it);
}

static int load_generation_config(struct capy_assets *as, const char *text, size_t len, const char *what,
				  struct capy_err *err)
{
	cJSON *g;
	int rc = capy_json_parse(text, len, what, &g, err);

	if (rc < 0)
		return rc;
	add_eos(as, cJSON_GetObjectItemCaseSensitive(g, "eos_token_id"));
	capy_json_get_double(g, "temperature", false, &as->temperature, what, NULL);
	capy_json_get_double(g, "top_p", false, &as->top_p, what, NULL);
	capy_json_get_double(g, "min_p", false, &as->min_p, what, NULL);
	capy_json_get_double(g, "repetition_penalty", false, &as->repetition_penalty, what, NULL);
	capy_json_get_i64(g, "top_k", false, &as->top_k, what, NULL);
	/* transformers decodes greedily when do_sample is false, whatever the temperature says. */
	if (cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(g, "do_sample")))
		as->temperature = 0;
	cJSON_Delete(g);
	return 0;
}

/* The template inside tokenizer_config.json: a string, or a list of {name, template} of
 * which "default" is used. NULL if none. */
static const char *config_template(const cJSON *cfg)
{
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template"), *it;

	if (cJSON_IsString(t))
		return t->valuestring;
	cJSON_ArrayForEach(it, t) {
		const cJSON *n = cJSON_GetObjectItemCaseSensitive(it, "name");
		const cJSON *s = cJSON_GetObjectItemCaseSensitive(it, "template");
		if (cJSON_IsString(n) && !strcmp(n->valuestring, "default") && cJSON_IsString(s))
			return s->valuestring;
	}
	return NULL;
}

static int compile_template(struct capy_assets *as, const char *src, size_t len, const char *name,
			    struct capy_err *err)
{
	return capy_tmpl_compile(src, len, name, &as->tmpl, err);
}

int capy_assets_from_artifact(struct capy_assets *as, const struct capy_artifact *a, struct capy_err *err)
{
	const struct capy_file_info *tj = capy_artifact_file(a, "tokenizer.json");
	const struct capy_file_info *tc = capy_artifact_file(a, "tokenizer_config.json");
	const struct capy_file_info *ct = capy_artifact_file(a, "chat_template.jinja");
	const struct capy_file_info *gc = capy_artifact_file(a, "generation_config.json");
	const cJSON *cfg_eos = cJSON_GetObjectItemCaseSensitive(a->config, "eos_token_id");
	char what[4200];
	int rc;

	defaults(as);
	if (tj && (rc = capy_tokenizer_new(&as->tok, capy_artifact_data(a, tj->offset), tj->bytes, err)) < 0)
		return capy_err_prefix(err, "'%s'", a->path);
	if (tc) {
		as->tokenizer_config = malloc(tc->bytes + 1);
		if (!as->tokenizer_config) {
			capy_assets_release(as);
			return capy_err_set(err, CAPY_ENOMEM, "out of memory");
		}
		memcpy(as->tokenizer_config, capy_artifact_data(a, tc->offset), tc->bytes);
		as->tokenizer_config[tc->bytes] = 0;
		as->tokenizer_config_len = tc->bytes;
	}
	if (ct) {
		snprintf(what, sizeof(what), "%s:chat_template.jinja", a->path);
		rc = compile_template(as, capy_artifact_data(a, ct->offset), ct->bytes, what, err);
	} else if (as->tokenizer_config) {
		cJSON *cfg = cJSON_ParseWithLength(as->tokenizer_config, as->tokenizer_config_len);
		const char *src = cfg ? config_template(cfg) : NULL;
		snprintf(what, sizeof(what), "%s:tokenizer_config.json:chat_template", a->path);
		rc = src ? compile_template(as, src, strlen(src), what, err) : 0;
		cJSON_Delete(cfg);
	} else {
		rc = 0;
	}
	if (rc == 0 && gc) {
		snprintf(what, sizeof(what), "'%s': generation_config.json", a->path);
		rc = load_generation_config(as, capy_artifact_data(a, gc->offset), gc->bytes, what, err);
	}
	if (rc == 0 && !as->n_eos)
		add_eos(as, cfg_eos);
	if (rc < 0)
		capy_assets_release(as);
	return rc;
}

int capy_assets_from_files(struct capy_assets *as, const char *tokenizer_json, const char *template_path,
			   const char *tokenizer_config, struct capy_err *err)
{
	char *text = NULL;
	size_t len;
	int rc = 0;

	defaults(as);
	if (tokenizer_json) {
		if ((rc = capy_read_file(tokenizer_json, TEXT_MAX, &text, &len, err)) < 0)
			return rc;
		rc = capy_tokenizer_new(&as->tok, text, len, err);
		free(text);
		if (rc < 0) {
			capy_err_prefix(err, "'%s'", tokenizer_json);
			goto fail;
		}
	}
	if (tokenizer_config &&
	    (rc = capy_read_file(tokenizer_config, TEXT_MAX, &as->tokenizer_config, &as->tokenizer_config_len, err)) < 0)
		goto fail;
	if (template_path) {
		if ((rc = capy_read_file(template_path, TEXT_MAX, &text, &len, err)) < 0)
			goto fail;
		rc = compile_template(as, text, len, template_path, err);
		free(text);
		if (rc < 0)
			goto fail;
	} else if (as->tokenizer_config) {
		cJSON *cfg = cJSON_ParseWithLength(as->tokenizer_config, as->tokenizer_config_len);
		const char *src = cfg ? config_template(cfg) : NULL;
		rc = src ? compile_template(as, src, strlen(src), tokenizer_config, err) : 0;
		cJSON_Delete(cfg);
		if (rc < 0)
			goto fail;
	}
	return 0;
fail:
	capy_assets_release(as);
	return rc;
}

void capy_assets_release(struct capy_assets *as)
{
	capy_tokenizer_free(as->tok);
	capy_tmpl_free(as->tmpl);
	free(as->tokenizer_config);
	as->tok = NULL;
	as->tmpl = NULL;
	as->tokenizer_config = NULL;
}

bool capy_assets_is_eos(const struct capy_assets *as, int32_t id)
{
	for (int i = 0; i < as->n_eos; i++)
		if (as->eos[i] == id)
			return true;
	return false;
}

void capy_assets_override(struct capy_assets *as, struct capy_assets *extra)
{
	if (extra->tok) {
		capy_tokenizer_free(as->tok);
		as->tok = extra->tok;
		extra->tok = NULL;
	}
	if (extra->tmpl) {
		capy_tmpl_free(as->tmpl);
		as->tmpl = extra->tmpl;
		extra->tmpl = NULL;
	}
	if (extra->tokenizer_config) {
		free(as->tokenizer_config);
		as->tokenizer_config = extra->tokenizer_config;
		as->tokenizer_config_len = extra->tokenizer_config_len;
		extra->tokenizer_config = NULL;
	}
	capy_assets_release(extra);
}
