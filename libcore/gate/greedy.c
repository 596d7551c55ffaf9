/* greedy.c - capy-gate's greedy stage: chat requests at temperature 0 through capy-serve, run
 * with its production flags, answering with the reference's texts (gate.h). */
#include "gate-impl.h"
#include "../util/file.h"

#include <time.h>
#include <unistd.h>

#define GREEDY_FILE "greedy.json"
#define GREEDY_MAX_TOKENS 64
#define GREEDY_PATH "/v1/chat/completions"
/* --profile agent is what docs/serving.md tells people to run an agent with */
static const char *const default_serve_args[] = { "--profile", "agent" };

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The texts of a chat completion: content, reasoning, each call's name and arguments, the
 * finish reason (the call ids are random, so not kept). NULL when the body is not one. */
static cJSON *answer_of(const char *body, size_t len)
{
	cJSON *resp = cJSON_ParseWithLength(body, len), *out = NULL, *calls;
	const cJSON *choice, *msg, *c;

	if (!resp)
		return NULL;
	choice = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(resp, "choices"), 0);
	msg = cJSON_GetObjectItemCaseSensitive(choice, "message");
	if (!cJSON_IsObject(msg) || !(out = cJSON_CreateObject()))
		goto done;
	static const char *const fields[] = { "content", "reasoning_content" };
	for (size_t i = 0; i < ARRAY_SIZE(fields); i++) {
		const cJSON *f = cJSON_GetObjectItemCaseSensitive(msg, fields[i]);
		if (!cJSON_AddItemToObject(out, fields[i],
					   cJSON_IsString(f) ? cJSON_CreateString(f->valuestring) : cJSON_CreateNull()))
			goto fail;
	}
	if (!(calls = cJSON_AddArrayToObject(out, "tool_calls")))
		goto fail;
	cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(msg, "tool_calls")) {
		const cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function"),
			    *name = cJSON_GetObjectItemCaseSensitive(fn, "name"),
			    *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
		cJSON *call = cJSON_CreateObject();
		if (!call || !cJSON_AddItemToArray(calls, call) ||
		    !cJSON_AddStringToObject(call, "name", cJSON_IsString(name) ? name->valuestring : "") ||
		    !cJSON_AddStringToObject(call, "arguments", cJSON_IsString(args) ? args->valuestring : ""))
			goto fail;
	}
	c = cJSON_GetObjectItemCaseSensitive(choice, "finish_reason");
	if (!cJSON_AddStringToObject(out, "finish_reason", cJSON_IsString(c) ? c->valuestring : ""))
		goto fail;
	goto done;
fail:
	cJSON_Delete(out);
	out = NULL;
done:
	cJSON_Delete(resp);
	return out;
}

/* The first field of two answers that differs: its name, the byte where, both texts. */
static bool answers_differ(const cJSON *got, const cJSON *ref, char *out, size_t cap)
{
	static const char *const fields[] = { "content", "reasoning_content", "tool_calls", "finish_reason" };

	for (size_t i = 0; i < ARRAY_SIZE(fields); i++) {
		const cJSON *a = cJSON_GetObjectItemCaseSensitive(got, fields[i]),
			    *b = cJSON_GetObjectItemCaseSensitive(ref, fields[i]);
		char *ta = a ? (cJSON_IsString(a) ? strdup(a->valuestring) : cJSON_PrintUnformatted(a))
			     : strdup("(absent)");
		char *tb = b ? (cJSON_IsString(b) ? strdup(b->valuestring) : cJSON_PrintUnformatted(b))
			     : strdup("(absent)");
		bool differ = !ta || !tb || strcmp(ta, tb);
		if (differ) {
			size_t at = 0, la = ta ? strlen(ta) : 0, lb = tb ? strlen(tb) : 0;
			char ea[600], eb[600];
			while (at < la && at < lb && ta[at] == tb[at])
				at++;
			/* from a little before the difference, so that it reads in context */
			size_t from = at > 20 ? at - 20 : 0;
			gate_excerpt(ea, sizeof(ea), ta ? ta + from : "", la - CAPY_MIN(from, la), 120);
			gate_excerpt(eb, sizeof(eb), tb ? tb + from : "", lb - CAPY_MIN(from, lb), 120);
			snprintf(out, cap, "%s differs at byte %zu: \"%s%s\", reference \"%s%s\"", fields[i], at,
				 from ? "..." : "", ea, from ? "..." : "", eb);
		}
		free(ta);
		free(tb);
		if (differ)
			return true;
	}
	return false;
}

/* The reference recorded now: the built-in chats as request bodies. */
static cJSON *fresh_reference(struct capy_err *err)
{
	cJSON *root = cJSON_CreateObject(), *args, *list;

	if (!root || !(args = cJSON_AddArrayToObject(root, "serve_args")) ||
	    !(list = cJSON_AddArrayToObject(root, "requests")))
		goto oom;
	for (size_t i = 0; i < ARRAY_SIZE(default_serve_args); i++)
		if (!cJSON_AddItemToArray(args, cJSON_CreateString(default_serve_args[i])))
			goto oom;
	for (size_t i = 0; i < gate_n_chats; i++) {
		cJSON *req = cJSON_CreateObject(), *body = NULL;
		if (!req || !cJSON_AddItemToArray(list, req))
			goto oom_req;
		if (capy_json_parse(gate_chats[i].body, strlen(gate_chats[i].body), gate_chats[i].name, &body, err) < 0)
			CAPY_BUG("built-in chat '%s': %s", gate_chats[i].name, err->msg);
		if (!cJSON_AddStringToObject(req, "name", gate_chats[i].name) ||
		    !cJSON_AddStringToObject(req, "path", GREEDY_PATH) || !cJSON_AddItemToObject(req, "body", body)) {
			cJSON_Delete(body);
			goto oom;
		}
		if (!cJSON_AddStringToObject(body, "model", "capy-gate") ||
		    !cJSON_AddNumberToObject(body, "temperature", 0) ||
		    !cJSON_AddNumberToObject(body, "max_tokens", GREEDY_MAX_TOKENS) ||
		    !cJSON_AddFalseToObject(body, "stream"))
			goto oom;
		continue;
oom_req:
		cJSON_Delete(req);
		goto oom;
	}
	return root;
oom:
	cJSON_Delete(root);
	capy_err_set(err, CAPY_ENOMEM, "out of memory");
	return NULL;
}

/* The server's argv: the reference's flags (its production flags), then the gate's own. */
static int server_argv(struct capy_gate *g, const cJSON *serve_args, char ***out, struct capy_err *err)
{
	size_t n = (size_t)cJSON_GetArraySize(serve_args), k = 0;
	char **argv = calloc(n + 16, sizeof(char *));
	static char threads[24], gpu[24];
	const cJSON *a;

	if (!argv)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	argv[k++] = (char *)"capy-serve";
	argv[k++] = (char *)g->model_path;
	cJSON_ArrayForEach(a, serve_args) {
		if (!cJSON_IsString(a)) {
			free(argv);
			return gate_bad_ref(g, err, GREEDY_FILE, "field 'serve_args[%zu]': a string is needed", k - 2);
		}
		argv[k++] = a->valuestring;
	}
	argv[k++] = (char *)"--host";
	argv[k++] = (char *)"127.0.0.1";
	argv[k++] = (char *)"--port";
	argv[k++] = (char *)"0";
	argv[k++] = (char *)"--model-id";
	argv[k++] = (char *)"capy-gate";
	argv[k++] = (char *)"--device";
	argv[k++] = (char *)(g->device ? g->device : "cpu");
	if (g->device && strcmp(g->device, "cpu")) {
		snprintf(gpu, sizeof(gpu), "%d", g->gpu);
		argv[k++] = (char *)"--gpu";
		argv[k++] = gpu;
	}
	if (g->threads > 0) {
		snprintf(threads, sizeof(threads), "%d", g->threads);
		argv[k++] = (char *)"--threads";
		argv[k++] = threads;
	}
	argv[k] = NULL;
	*out = argv;
	return 0;
}

int capy_gate_greedy(struct capy_gate *g, struct capy_gate_report *r, struct capy_err *err)
{
	struct capy_gate_server srv = { 0 };
	cJSON *root = NULL, *list, *req;
	char **argv = NULL, *log = NULL;
	size_t i = 0, failed = 0;
	double busy = 0;
	int rc;

	if (g->record)
		root = fresh_reference(err);
	else if (gate_read_json(g, GREEDY_FILE, &root, err) < 0)
		return CAPY_EFORMAT;
	if (!root)
		return err->code;
	list = cJSON_GetObjectItemCaseSensitive(root, "requests");
	if (!cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(root, "serve_args"))) {
		rc = gate_bad_ref(g, err, GREEDY_FILE, "field 'serve_args': a list of capy-serve flags is needed");
		goto done;
	}
	if (!cJSON_IsArray(list) || !cJSON_GetArraySize(list)) {
		rc = gate_bad_ref(g, err, GREEDY_FILE, "field 'requests': a non-empty list is needed");
		goto done;
	}
	cJSON_ArrayForEach(req, list) {
		const cJSON *path = cJSON_GetObjectItemCaseSensitive(req, "path"),
			    *body = cJSON_GetObjectItemCaseSensitive(req, "body");
		if (!cJSON_IsString(path) || *path->valuestring != '/' || strpbrk(path->valuestring, " \r\n") ||
		    !cJSON_IsObject(body)) {
			rc = gate_bad_ref(g, err, GREEDY_FILE,
					  "field 'requests[%zu]': a 'path' (/...) and an object 'body' are needed", i);
			goto done;
		}
		if (!g->record && !cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(req, "answer"))) {
			rc = gate_bad_ref(g, err, GREEDY_FILE, "field 'requests[%zu].answer': an object is needed", i);
			goto done;
		}
		i++;
	}
	if ((rc = server_argv(g, cJSON_GetObjectItemCaseSensitive(root, "serve_args"), &argv, err)) < 0)
		goto done;
	if (!(log = capy_path_join(g->tmp_dir, "capy-serve.log"))) {
		rc = capy_err_set(err, CAPY_ENOMEM, "out of memory");
		goto done;
	}
	if ((rc = capy_gate_server_start(&srv, g->serve_bin, argv, log, 120, err)) < 0)
		goto done;
	i = 0;
	r->verdict = g->record ? CAPY_GATE_RECORDED : CAPY_GATE_PASS;
	cJSON_ArrayForEach(req, list) {
		const cJSON *path = cJSON_GetObjectItemCaseSensitive(req, "path"),
			    *name = cJSON_GetObjectItemCaseSensitive(req, "name");
		const char *nm = cJSON_IsString(name) ? name->valuestring : "?";
		struct capy_gate_response resp;
		char *body = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(req, "body")), why[3000];
		cJSON *ans;
		double t0 = now();

		if (!body) {
			rc = capy_err_set(err, CAPY_ENOMEM, "out of memory");
			break;
		}
		rc = capy_gate_http_post(srv.port, path->valuestring, body, strlen(body), 600, &resp, err);
		free(body);
		if (rc < 0) {
			capy_err_prefix(err, "request '%s'", nm);
			break;
		}
		busy += now() - t0;
		ans = resp.status == 200 ? answer_of(resp.body, resp.len) : NULL;
		if (!ans) {
			char ex[400];
			gate_excerpt(ex, sizeof(ex), resp.body, resp.len, 300);
			snprintf(why, sizeof(why), "request '%s': status %d, not a chat completion: %s", nm,
				 resp.status, ex);
			capy_gate_response_release(&resp);
			if (g->record) {
				rc = capy_err_set(err, CAPY_EIO, "%s", why);
				break;
			}
			if (!failed++)
				snprintf(r->line, sizeof(r->line), "%s", why);
			i++;
			continue;
		}
		capy_gate_response_release(&resp);
		if (g->record) {
			cJSON_DeleteItemFromObjectCaseSensitive(req, "answer");
			cJSON_AddItemToObject(req, "answer", ans);
		} else {
			if (answers_differ(ans, cJSON_GetObjectItemCaseSensitive(req, "answer"), why, sizeof(why)) &&
			    !failed++)
				snprintf(r->line, sizeof(r->line), "request '%s': %s", nm, why);
			cJSON_Delete(ans);
		}
		i++;
	}
	{
		int st = capy_gate_server_stop(&srv, 30);
		if (rc == 0 && st != 0)
			rc = capy_err_set(err, CAPY_EIO, "'%s' exited with status %d on SIGTERM (its log: '%s')",
					  g->serve_bin, st, log);
	}
	if (rc < 0)
		goto done;
	g->timing.greedy_s = busy;
	if (g->record && (rc = gate_write_json(g, GREEDY_FILE, root, err)) < 0)
		goto done;
	if (failed) {
		size_t n = strlen(r->line);
		r->verdict = CAPY_GATE_FAIL;
		if (failed > 1)
			snprintf(r->line + n, sizeof(r->line) - n, "; %zu of %zu answers differ", failed, i);
	} else {
		snprintf(r->line, sizeof(r->line), "%zu answers through capy-serve %s", i,
			 g->record ? "recorded" : "equal");
	}
done:
	capy_gate_server_stop(&srv, 5);
	if (log && rc == 0)
		unlink(log); /* kept for a look when something went wrong */
	free(log);
	free(argv);
	cJSON_Delete(root);
	return rc;
}
