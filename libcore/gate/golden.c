/* golden.c - capy-gate's golden stage: greedy ids of fixed prompts, through the engine, equal to
 * the reference's (gate.h). */
#include "gate-impl.h"
#include "../engine/engine.h"
#include "../model/assets.h"
#include "../sample/sample.h"

#include <time.h>

#define GOLDEN_FILE "golden.json"
#define GOLDEN_N_PREDICT 16

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* n greedy ids after the prompt (end-of-sequence ids included: the ids, not the answer, are
 * compared), one step per id as capy-gen runs them; the time of the prompt and of the rest
 * added to the totals. */
static int generate(struct capy_gate *g, const int32_t *prompt, size_t n_prompt, size_t n, int32_t *out,
		    double *prefill_s, double *decode_s, struct capy_err *err)
{
	uint64_t V = capy_engine_config(g->e)->vocab_size;
	struct capy_sampler *smp = NULL;
	struct capy_seq *s = NULL;
	float *logits = malloc(V * sizeof(float));
	double t0, t1;
	int32_t next;
	int rc;

	if (!logits)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	if ((rc = capy_sampler_new(&smp, V, &(struct capy_sampler_params){ .temperature = 0 }, err)) < 0 ||
	    (rc = capy_seq_new(g->e, &s, err)) < 0)
		goto done;
	t0 = now();
	if ((rc = capy_engine_forward(g->e, s, prompt, n_prompt, logits, false, err)) < 0)
		goto done;
	t1 = now();
	*prefill_s += t1 - t0;
	next = capy_sampler_next(smp, logits);
	for (size_t i = 0; i < n; i++) {
		int32_t id = next;
		struct capy_step_item it = { .seq = s, .tokens = &id, .n = 1, .sampler = smp, .token = &next };
		out[i] = id;
		if (i + 1 < n && (rc = capy_engine_step(g->e, &it, 1, err)) < 0)
			goto done;
	}
	*decode_s += now() - t1;
done:
	capy_seq_free(s);
	capy_sampler_free(smp);
	free(logits);
	return rc;
}

/* A prompt's ids now: its text tokenized, or its chat rendered and tokenized. */
static int prompt_ids(struct capy_gate *g, const cJSON *p, size_t i, struct capy_tokens *ids, struct capy_err *err)
{
	const cJSON *text = cJSON_GetObjectItemCaseSensitive(p, "text"),
		    *chat = cJSON_GetObjectItemCaseSensitive(p, "chat");
	char *rendered = NULL;
	size_t len;
	int rc;

	if (!g->as->tok)
		return capy_err_set(err, CAPY_EUNSUPPORTED, "'%s' has no tokenizer", g->model_path);
	if (cJSON_IsString(text)) {
		rc = capy_tokenizer_encode(g->as->tok, text->valuestring, strlen(text->valuestring), 0, ids, err);
	} else if (cJSON_IsObject(chat)) {
		if ((rc = gate_render_chat(g, chat, &rendered, &len, err)) < 0) {
			if (rc == CAPY_EFORMAT)
				return gate_bad_ref(g, err, GOLDEN_FILE, "field 'prompts[%zu].chat': %s", i, err->msg);
			return rc;
		}
		rc = capy_tokenizer_encode(g->as->tok, rendered, len, CAPY_TOK_PARSE_ADDED, ids, err);
		free(rendered);
	} else {
		return gate_bad_ref(g, err, GOLDEN_FILE,
				    "field 'prompts[%zu]': a 'text' string or a 'chat' object is needed", i);
	}
	return rc;
}

/* The first position where a and b differ (the shorter length when one is a prefix). */
static size_t first_diff(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
	size_t i = 0;

	while (i < na && i < nb && a[i] == b[i])
		i++;
	return i;
}

static void describe_diff(char *out, size_t cap, const char *name, const char *what, const int32_t *got, size_t ngot,
			  const int32_t *ref, size_t nref)
{
	size_t i = first_diff(got, ngot, ref, nref);
	char g[24] = "(end)", r[24] = "(end)";

	if (i < ngot)
		snprintf(g, sizeof(g), "%" PRId32, got[i]);
	if (i < nref)
		snprintf(r, sizeof(r), "%" PRId32, ref[i]);
	snprintf(out, cap, "prompt '%s': %s differ at position %zu: %s, reference %s (%zu and %zu ids)", name, what, i,
		 g, r, ngot, nref);
}

static cJSON *new_prompt(const char *name, const char *text, const char *chat_body, struct capy_err *err)
{
	cJSON *p = cJSON_CreateObject(), *chat = NULL;

	if (!p || !cJSON_AddStringToObject(p, "name", name))
		goto oom;
	if (text && !cJSON_AddStringToObject(p, "text", text))
		goto oom;
	if (chat_body) {
		if (capy_json_parse(chat_body, strlen(chat_body), name, &chat, err) < 0)
			CAPY_BUG("built-in chat '%s': %s", name, err->msg);
		if (!cJSON_AddItemToObject(p, "chat", chat))
			goto oom;
	}
	return p;
oom:
	cJSON_Delete(chat);
	cJSON_Delete(p);
	return NULL;
}

/* The reference recorded now: the built-in prompts, their ids and greedy ids. */
static cJSON *fresh_reference(struct capy_err *err)
{
	cJSON *root = cJSON_CreateObject(), *list, *p;

	if (!root || !cJSON_AddNumberToObject(root, "n_predict", GOLDEN_N_PREDICT) ||
	    !(list = cJSON_AddArrayToObject(root, "prompts")))
		goto oom;
	if (!(p = new_prompt("text", gate_text_prompt, NULL, err)) || !cJSON_AddItemToArray(list, p))
		goto oom;
	for (size_t i = 0; i < gate_n_chats; i++)
		if (!(p = new_prompt(gate_chats[i].name, NULL, gate_chats[i].body, err)) ||
		    !cJSON_AddItemToArray(list, p))
			goto oom;
	return root;
oom:
	cJSON_Delete(root);
	capy_err_set(err, CAPY_ENOMEM, "out of memory");
	return NULL;
}

/* What the prompts add up to. */
struct golden_run {
	int64_t n_predict;
	size_t prompts, generated, failed; /* prompts seen, run, differing */
	double prefill_s, decode_s;
	uint64_t prefilled, decoded;
};

/* Record the ids into the prompt's object. */
static int record_ids(cJSON *p, const int32_t *prompt, size_t n_prompt, const int32_t *out, size_t n,
		      struct capy_err *err)
{
	cJSON *a = gate_ids_json(prompt, n_prompt), *b = gate_ids_json(out, n);

	cJSON_DeleteItemFromObjectCaseSensitive(p, "prompt_ids");
	cJSON_DeleteItemFromObjectCaseSensitive(p, "ids");
	if (a && b && cJSON_AddItemToObject(p, "prompt_ids", a)) {
		a = NULL;
		if (cJSON_AddItemToObject(p, "ids", b))
			return 0;
	}
	cJSON_Delete(a);
	cJSON_Delete(b);
	return capy_err_set(err, CAPY_ENOMEM, "out of memory");
}

/* One prompt: its ids now against the reference's, then its greedy ids (or, recording, both
 * written into p). The first difference of the stage goes to r->line. */
static int one_prompt(struct capy_gate *g, cJSON *p, struct golden_run *run, struct capy_gate_report *r,
		      struct capy_err *err)
{
	const cJSON *name = cJSON_GetObjectItemCaseSensitive(p, "name");
	const char *nm = cJSON_IsString(name) ? name->valuestring : "?";
	size_t n = (size_t)run->n_predict, i = run->prompts++, n_ref_prompt = 0, n_ref_out = 0;
	int32_t *ref_prompt = NULL, *ref_out = NULL, *out = NULL;
	struct capy_tokens ids = { 0 };
	char what[64];
	int rc;

	if ((rc = prompt_ids(g, p, i, &ids, err)) < 0)
		return rc;
	if (!g->record) {
		snprintf(what, sizeof(what), "prompts[%zu].prompt_ids", i);
		rc = gate_json_ids(g, GOLDEN_FILE, cJSON_GetObjectItemCaseSensitive(p, "prompt_ids"), what, &ref_prompt,
				   &n_ref_prompt, err);
		snprintf(what, sizeof(what), "prompts[%zu].ids", i);
		if (rc == 0)
			rc = gate_json_ids(g, GOLDEN_FILE, cJSON_GetObjectItemCaseSensitive(p, "ids"), what, &ref_out,
					   &n_ref_out, err);
		if (rc < 0)
			goto done;
		if (ids.n != n_ref_prompt || memcmp(ids.ids, ref_prompt, ids.n * sizeof(int32_t))) {
			/* the tokenizer or the template moved: the ids after would differ for that
			 * reason alone, so they are not run */
			if (!run->failed++)
				describe_diff(r->line, sizeof(r->line), nm, "prompt ids", ids.ids, ids.n, ref_prompt,
					      n_ref_prompt);
			goto done;
		}
	}
	if (!(out = malloc(n * sizeof(int32_t)))) {
		rc = capy_err_set(err, CAPY_ENOMEM, "out of memory");
		goto done;
	}
	if ((rc = generate(g, ids.ids, ids.n, n, out, &run->prefill_s, &run->decode_s, err)) < 0)
		goto done;
	run->generated++;
	run->prefilled += ids.n;
	run->decoded += n;
	if (g->record)
		rc = record_ids(p, ids.ids, ids.n, out, n, err);
	else if ((n != n_ref_out || memcmp(out, ref_out, n * sizeof(int32_t))) && !run->failed++)
		describe_diff(r->line, sizeof(r->line), nm, "greedy ids", out, n, ref_out, n_ref_out);
done:
	free(out);
	free(ref_prompt);
	free(ref_out);
	capy_tokens_release(&ids);
	return rc;
}

int capy_gate_golden(struct capy_gate *g, struct capy_gate_report *r, struct capy_err *err)
{
	struct golden_run run = { .n_predict = GOLDEN_N_PREDICT };
	cJSON *root = NULL, *list, *p;
	int rc = 0;

	if (g->record)
		root = fresh_reference(err);
	else if (gate_read_json(g, GOLDEN_FILE, &root, err) < 0)
		return CAPY_EFORMAT;
	if (!root)
		return err->code;
	if (!g->record && (capy_json_get_i64(root, "n_predict", true, &run.n_predict, GOLDEN_FILE, NULL) < 0 ||
			   run.n_predict < 1 || run.n_predict > 1 << 20))
		rc = gate_bad_ref(g, err, GOLDEN_FILE, "field 'n_predict': an integer 1..1048576 is needed");
	list = cJSON_GetObjectItemCaseSensitive(root, "prompts");
	if (!rc && (!cJSON_IsArray(list) || !cJSON_GetArraySize(list)))
		rc = gate_bad_ref(g, err, GOLDEN_FILE, "field 'prompts': a non-empty list is needed");
	r->verdict = g->record ? CAPY_GATE_RECORDED : CAPY_GATE_PASS;
	if (!rc)
		cJSON_ArrayForEach(p, list)
			if ((rc = one_prompt(g, p, &run, r, err)) < 0)
				break;
	if (!rc && g->record)
		rc = gate_write_json(g, GOLDEN_FILE, root, err);
	cJSON_Delete(root);
	if (rc < 0)
		return rc;
	if (run.prefill_s > 0)
		g->timing.prefill_tok_s = (double)run.prefilled / run.prefill_s;
	/* the last id of each prompt needs no step */
	if (run.decode_s > 0 && run.decoded > run.generated)
		g->timing.decode_tok_s = (double)(run.decoded - run.generated) / run.decode_s;
	if (run.failed) {
		size_t n = strlen(r->line);
		r->verdict = CAPY_GATE_FAIL;
		if (run.failed > 1)
			snprintf(r->line + n, sizeof(r->line) - n, "; %zu of %zu prompts differ", run.failed,
				 run.prompts);
	} else {
		snprintf(r->line, sizeof(r->line), "%zu prompts, %" PRIu64 " greedy ids %s", run.prompts, run.decoded,
			 g->record ? "recorded" : "equal");
	}
	return 0;
}
