/* server.c - capy-serve's server: routes on the HTTP layer, error bodies in each API's shape,
 * /health, /v1/models, /metrics (Prometheus text), and request counts from the log lines. */
#include "serve-impl.h"
#include "../constrain/mask.h"
#include "../util/json.h"

#include <math.h>
#include <time.h>

enum capy_api serve_api_of_path(const char *path)
{
	if (!strncmp(path, "/v1/messages", 12))
		return !strcmp(path, "/v1/messages/count_tokens") ? CAPY_API_COUNT_TOKENS : CAPY_API_MESSAGES;
	if (!strcmp(path, "/v1/responses"))
		return CAPY_API_RESPONSES;
	if (!strcmp(path, "/v1/completions"))
		return CAPY_API_COMPLETIONS;
	return CAPY_API_CHAT;
}

static void error_body(void *arg, const char *path, int status, const char *message, struct capy_buf *out)
{
	struct capy_api_error e = { 0 };

	(void)arg;
	capy_api_error_set(&e, status, NULL, "%s", message);
	if (status == 401)
		e.code = "invalid_api_key"; /* OpenAI's code (its shape only: Anthropic's has none) */
	capy_api_error_body(serve_api_of_path(path), &e, out);
}

/* Count the finished request (path, status) and pass the line on. */
static void log_line(void *arg, const char *line, size_t len)
{
	struct capy_server *srv = arg;
	cJSON *j = cJSON_ParseWithLength(line, len);
	const cJSON *path = cJSON_GetObjectItemCaseSensitive(j, "path");
	const cJSON *status = cJSON_GetObjectItemCaseSensitive(j, "status");

	if (cJSON_IsString(path) && cJSON_IsNumber(status)) {
		static const char *const known[] = { "/v1/chat/completions", "/v1/completions", "/v1/responses",
						     "/v1/messages", "/v1/messages/count_tokens", "/v1/models",
						     "/health", "/metrics" };
		const char *ep = "other"; /* unknown paths are not a label each */
		for (size_t k = 0; k < ARRAY_SIZE(known); k++)
			if (!strcmp(path->valuestring, known[k]))
				ep = known[k];
		if (!strncmp(path->valuestring, "/v1/models/", 11))
			ep = "/v1/models/{id}";
		pthread_mutex_lock(&srv->mu);
		size_t i = 0;
		while (i < srv->n_counts && (strcmp(srv->counts[i].endpoint, ep) || srv->counts[i].status != status->valueint))
			i++;
		if (i == srv->n_counts && i < ARRAY_SIZE(srv->counts)) {
			snprintf(srv->counts[i].endpoint, sizeof(srv->counts[i].endpoint), "%s", ep);
			srv->counts[i].status = status->valueint;
			srv->n_counts++;
		}
		if (i < srv->n_counts)
			srv->counts[i].n++;
		pthread_mutex_unlock(&srv->mu);
	}
	cJSON_Delete(j);
	if (srv->o.log)
		srv->o.log(srv->o.log_arg, line, len);
}

bool capy_server_failed(const struct capy_server *srv)
{
	struct capy_sched_stats st;

	capy_sched_stats(srv->sched, &st);
	return st.failed;
}

static void health(struct capy_http_exchange *x, void *arg)
{
	struct capy_server *srv = arg;
	struct capy_sched_stats st;
	char body[256];

	capy_sched_stats(srv->sched, &st);
	if (st.failed) {
		capy_http_respond(x, 503, NULL, "{\"status\":\"failed\"}", 19);
		return;
	}
	snprintf(body, sizeof(body), "{\"status\":\"ok\",\"model\":\"%s\",\"active\":%" PRIu64 ",\"queued\":%" PRIu64 "}",
		 srv->model_id, st.active, st.queued);
	capy_http_respond(x, 200, NULL, body, strlen(body));
}

static void models(struct capy_http_exchange *x, void *arg)
{
	struct capy_server *srv = arg;
	const char *path = capy_http_path(x);
	struct capy_buf b = { 0 };

	if (!strncmp(path, "/v1/models/", 11)) {
		cJSON *m;
		char *text;
		if (strcmp(path + 11, srv->model_id)) {
			struct capy_api_error e = { 0 };
			capy_api_error_set(&e, 404, NULL, "the model '%s' does not exist (this server has '%s')", path + 11,
					   srv->model_id);
			e.code = "model_not_found";
			e.type = "invalid_request_error";
			capy_api_error_body(CAPY_API_CHAT, &e, &b);
			capy_http_respond(x, 404, NULL, b.data, b.len);
			capy_buf_release(&b);
			return;
		}
		m = cJSON_CreateObject();
		cJSON_AddStringToObject(m, "id", srv->model_id);
		cJSON_AddStringToObject(m, "object", "model");
		cJSON_AddNumberToObject(m, "created", (double)srv->created);
		cJSON_AddStringToObject(m, "owned_by", "capy");
		cJSON_AddNumberToObject(m, "max_model_len", (double)capy_sched_options(srv->sched)->max_context);
		text = cJSON_PrintUnformatted(m);
		cJSON_Delete(m);
		if (!text) {
			capy_http_respond_error(x, 500, "out of memory");
			return;
		}
		capy_http_respond(x, 200, NULL, text, strlen(text));
		free(text);
		return;
	}
	capy_api_models_body(srv->model_id, srv->created, (int64_t)capy_sched_options(srv->sched)->max_context, &b);
	if (b.oom)
		capy_http_respond_error(x, 500, "out of memory");
	else
		capy_http_respond(x, 200, NULL, b.data, b.len);
	capy_buf_release(&b);
}

static void metric(struct capy_buf *b, const char *name, const char *type, const char *help, double v)
{
	capy_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
}

/* The context cache's tiers: hits and the tokens they served by tier, the lower tiers'
 * sizes and moves (with --host-cache-mib or --disk-cache-dir). */
static void tier_metrics(struct capy_buf *b, const struct capy_sched_stats *st)
{
	static const char *const tiers[] = { "device", "host", "disk" };
	const struct capy_kvstore_stats *k = &st->kv;

	capy_buf_puts(b, "# HELP capy_cache_tier_hits_total Requests that found a cached prefix, by the tier it came from.\n"
			 "# TYPE capy_cache_tier_hits_total counter\n");
	for (int t = 0; t < 3; t++)
		capy_buf_printf(b, "capy_cache_tier_hits_total{tier=\"%s\"} %" PRIu64 "\n", tiers[t],
				st->tier_hits[CAPY_KV_TIER_DEVICE + t]);
	capy_buf_puts(b, "# HELP capy_cache_tier_tokens_total Prompt tokens served from the cache, by tier.\n"
			 "# TYPE capy_cache_tier_tokens_total counter\n");
	for (int t = 0; t < 3; t++)
		capy_buf_printf(b, "capy_cache_tier_tokens_total{tier=\"%s\"} %" PRIu64 "\n", tiers[t],
				st->tier_cached_tokens[CAPY_KV_TIER_DEVICE + t]);
	if (!st->tiers)
		return;
	capy_buf_puts(b, "# HELP capy_cache_demotions_total Cache entries moved down into a tier (device to host, host "
			 "or device to disk).\n# TYPE capy_cache_demotions_total counter\n");
	capy_buf_printf(b, "capy_cache_demotions_total{tier=\"host\"} %" PRIu64 "\n", k->demoted_host);
	capy_buf_printf(b, "capy_cache_demotions_total{tier=\"disk\"} %" PRIu64 "\n", k->demoted_disk);
	metric(b, "capy_cache_host_bytes", "gauge", "Bytes the host-RAM tier holds.", (double)k->host_bytes);
	metric(b, "capy_cache_host_entries", "gauge", "Entries in the host-RAM tier.", (double)k->host_entries);
	metric(b, "capy_cache_disk_bytes", "gauge", "Bytes of the disk tier's entry files.", (double)k->disk_bytes);
	metric(b, "capy_cache_disk_entries", "gauge", "Entry files in the disk tier.", (double)k->disk_entries);
	metric(b, "capy_cache_disk_written_bytes_total", "counter", "Bytes of entry files written.",
	       (double)k->disk_written_bytes);
	metric(b, "capy_cache_disk_read_bytes_total", "counter", "Bytes of entry files read to restore.",
	       (double)k->disk_read_bytes);
	metric(b, "capy_cache_dropped_total", "counter", "Entries evicted from the last tier (or too large for it).",
	       (double)k->dropped);
	metric(b, "capy_cache_refused_total", "counter", "Disk entries refused (corrupt, truncated, foreign) and removed.",
	       (double)k->refused);
	metric(b, "capy_cache_restore_seconds_total", "counter", "Time restoring entries from the host and disk tiers.",
	       k->restore_s);
}

/* Expert offload (an engine that keeps some routed experts in host RAM): the GPU's expert
 * cache and what the routed (token, expert) pairs found there. */
static void offload_metrics(struct capy_buf *b, const struct capy_offload_stats *o)
{
	metric(b, "capy_expert_slots", "gauge", "Routed-expert slots on the GPU.", (double)o->slots);
	metric(b, "capy_expert_slots_lent", "gauge",
	       "Expert slots an elastic attention cache holds pages in now (given back when its contexts end).",
	       (double)o->slots_lent);
	metric(b, "capy_expert_resident", "gauge", "Routed experts resident in those slots.", (double)o->resident);
	metric(b, "capy_expert_hits_total", "counter", "Routed (token, expert) pairs whose expert was resident.",
	       (double)o->hits);
	metric(b, "capy_expert_misses_total", "counter", "Routed (token, expert) pairs computed on the CPU.",
	       (double)o->misses);
	metric(b, "capy_expert_streamed_total", "counter",
	       "Routed (token, expert) pairs of prompt pieces that read their expert from host memory.",
	       (double)o->streamed);
	metric(b, "capy_expert_loads_total", "counter", "Experts copied into slots.", (double)o->loads);
	metric(b, "capy_expert_evictions_total", "counter", "Experts evicted from slots.", (double)o->evictions);
	metric(b, "capy_expert_cpu_threads", "gauge", "CPU threads computing the experts not resident.",
	       (double)o->cpu_threads);
	metric(b, "capy_expert_policy_switches_total", "counter",
	       "Times the adaptive expert cache policy changed between whole layers and spread slots.",
	       (double)o->policy_switches);
	metric(b, "capy_expert_cpu_jobs_total", "counter", "MoE layers of decode steps whose misses the CPU computed.",
	       (double)o->jobs);
	metric(b, "capy_expert_cpu_bytes_total", "counter", "Expert bytes those CPU jobs read.", (double)o->job_bytes);
	metric(b, "capy_expert_cpu_seconds_total", "counter", "Time the CPU spent on those jobs.", o->job_seconds);
	metric(b, "capy_expert_gpu_wait_seconds_total", "counter",
	       "Time the GPU waited for those jobs, from its request to going on with the results.", o->wait_seconds);
}

/* The same counts by the drafter that filled the window (the totals above are their sums). */
static void spec_metrics(struct capy_buf *b, const struct capy_sched_stats *st)
{
	static const struct {
		const char *name, *help;
	} m[] = {
		{ "capy_spec_source_windows_total", "Speculative verification windows, by the drafter that filled them." },
		{ "capy_spec_source_drafted_tokens_total", "Draft tokens verified, by drafter." },
		{ "capy_spec_source_accepted_tokens_total", "Draft tokens the model agreed with, by drafter." },
	};
	uint64_t all[3] = { st->spec_windows, st->spec_drafted, st->spec_accepted };
	uint64_t mtp[3] = { st->spec_mtp_windows, st->spec_mtp_drafted, st->spec_mtp_accepted };

	for (int i = 0; i < 3; i++)
		capy_buf_printf(b, "# HELP %s %s\n# TYPE %s counter\n%s{source=\"mtp\"} %" PRIu64 "\n%s{source=\"ngram\"} %"
				PRIu64 "\n", m[i].name, m[i].help, m[i].name, m[i].name, mtp[i], m[i].name, all[i] - mtp[i]);
	metric(b, "capy_spec_mtp_seconds_total", "counter", "Time the MTP head ran (drafts, and its rows of prompts).",
	       st->spec_mtp_s);
}

static void metrics(struct capy_http_exchange *x, void *arg)
{
	struct capy_server *srv = arg;
	struct capy_sched_stats st;
	struct capy_buf b = { 0 };

	capy_sched_stats(srv->sched, &st);
	capy_buf_puts(&b, "# HELP capy_requests_total Requests answered, by endpoint and HTTP status.\n"
			  "# TYPE capy_requests_total counter\n");
	pthread_mutex_lock(&srv->mu);
	for (size_t i = 0; i < srv->n_counts; i++)
		capy_buf_printf(&b, "capy_requests_total{endpoint=\"%s\",status=\"%d\"} %" PRIu64 "\n", srv->counts[i].endpoint,
				srv->counts[i].status, srv->counts[i].n);
	pthread_mutex_unlock(&srv->mu);
	metric(&b, "capy_prompt_tokens_total", "counter", "Prompt tokens of requests that ran.", (double)st.prompt_tokens);
	metric(&b, "capy_cached_prompt_tokens_total", "counter", "Prompt tokens served from the prefix cache.",
	       (double)st.cached_tokens);
	metric(&b, "capy_prefill_tokens_total", "counter", "Prompt tokens computed.", (double)st.prefill_tokens);
	metric(&b, "capy_generated_tokens_total", "counter", "Tokens generated.", (double)st.generated_tokens);
	metric(&b, "capy_prefill_seconds_total", "counter", "Engine time in steps that read prompts.", st.prefill_s);
	metric(&b, "capy_decode_seconds_total", "counter", "Engine time in steps that only generated.", st.decode_s);
	metric(&b, "capy_prefill_tokens_per_second", "gauge", "Prompt tokens computed per second of prefill steps.",
	       st.prefill_s > 0 ? (double)st.prefill_tokens / st.prefill_s : 0);
	metric(&b, "capy_decode_tokens_per_second", "gauge", "Tokens generated per second of engine time (all steps).",
	       st.decode_s > 0 ? (double)st.generated_tokens / (st.decode_s + st.prefill_s) : 0);
	metric(&b, "capy_engine_steps_total", "counter", "Engine steps run.", (double)st.steps);
	metric(&b, "capy_token_masks_total", "counter", "Token masks of constrained requests.", (double)st.masks);
	metric(&b, "capy_token_mask_seconds_total", "counter", "Time computing token masks (mostly during the steps).",
	       st.mask_s);
	metric(&b, "capy_token_mask_wait_seconds_total", "counter",
	       "Time constrained requests waited for their token masks after the step (the latency they added).",
	       st.mask_wait_s);
	metric(&b, "capy_spec_windows_total", "counter", "Speculative verification windows (step items with drafts).",
	       (double)st.spec_windows);
	metric(&b, "capy_spec_drafted_tokens_total", "counter", "Draft tokens verified.", (double)st.spec_drafted);
	metric(&b, "capy_spec_accepted_tokens_total", "counter", "Draft tokens the model agreed with (given out unless "
	       "the answer ended first).", (double)st.spec_accepted);
	spec_metrics(&b, &st);
	metric(&b, "capy_queue_depth", "gauge", "Requests waiting for a place in the batch.", (double)st.queued);
	metric(&b, "capy_active_sequences", "gauge", "Requests in the batch.", (double)st.active);
	metric(&b, "capy_cache_bytes", "gauge", "Bytes the prefix cache holds (snapshots and pages).", (double)st.cache_bytes);
	metric(&b, "capy_cache_entries", "gauge", "Conversations in the prefix cache.", (double)st.cache_entries);
	metric(&b, "capy_cache_snapshots", "gauge", "Recurrent-state snapshots in the prefix cache.",
	       (double)st.cache_snapshots);
	metric(&b, "capy_cache_lookups_total", "counter", "Requests that looked in the prefix cache.",
	       (double)st.cache_lookups);
	metric(&b, "capy_cache_hits_total", "counter", "Requests that found a cached prefix.", (double)st.cache_hits);
	metric(&b, "capy_cache_hit_ratio", "gauge", "Share of prompt tokens served from the prefix cache.",
	       st.prompt_tokens ? (double)st.cached_tokens / (double)st.prompt_tokens : 0);
	tier_metrics(&b, &st);
	metric(&b, "capy_kv_pages", "gauge", "Attention-cache pages in use.", (double)st.kv_pages);
	metric(&b, "capy_kv_pages_held", "gauge",
	       "Attention-cache pages the engine holds storage for (an elastic cache: some from the expert slots).",
	       (double)st.kv_pages_held);
	metric(&b, "capy_kv_page_bytes", "gauge", "Bytes of one attention-cache page.", (double)st.page_bytes);
	metric(&b, "capy_kv_leased_pages", "gauge", "Attention-cache pages the running requests' KV leases reserve.",
	       (double)st.kv_leased_pages);
	metric(&b, "capy_kv_lease_waits_total", "counter", "Admissions deferred until a KV lease fit --kv-budget-mib.",
	       (double)st.kv_lease_waits);
	if (st.offloading)
		offload_metrics(&b, &st.offload);
	metric(&b, "capy_engine_failed", "gauge", "1 after an engine-wide failure.", st.failed ? 1 : 0);
	if (b.oom)
		capy_http_respond_error(x, 500, "out of memory");
	else
		capy_http_respond(x, 200, "text/plain; version=0.0.4; charset=utf-8", b.data, b.len);
	capy_buf_release(&b);
}

/* The trie of the vocabulary for constrained requests. Added tokens that are not special
 * (<tool_call>, <think>, ...) are text: the tool-call grammar writes them, and a model writes
 * them as those single tokens. */
static int build_trie(struct capy_server *srv, struct capy_err *err)
{
	uint32_t vocab = (uint32_t)capy_engine_config(srv->e)->vocab_size;
	int32_t *text = malloc(vocab * sizeof(int32_t));
	size_t n = 0;
	int rc;

	if (!text)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	for (uint32_t id = 0; id < vocab; id++)
		if (capy_tokenizer_is_added(srv->as->tok, (int32_t)id) && !capy_tokenizer_is_special(srv->as->tok, (int32_t)id))
			text[n++] = (int32_t)id;
	rc = capy_token_trie_from_tokenizer(&srv->trie, srv->as->tok, vocab, srv->as->eos, (size_t)srv->as->n_eos, text,
					    n, err);
	free(text);
	if (rc < 0)
		capy_err_prefix(err, "the vocabulary's trie for structured output");
	return rc;
}

int capy_server_start(struct capy_server **out, const struct capy_server_opts *o, struct capy_engine *e,
		      struct capy_sched *sched, const struct capy_assets *as, struct capy_err *err)
{
	struct capy_server *srv = calloc(1, sizeof(*srv));
	struct capy_http_opts ho = { 0 };
	int rc;

	if (!srv)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	srv->o = *o;
	srv->e = e;
	srv->sched = sched;
	srv->as = as;
	srv->created = (int64_t)time(NULL);
	srv->model_id = strdup(o->model_id ? o->model_id : "capy");
	srv->im_start = as->tok ? capy_tokenizer_added_id(as->tok, "<|im_start|>") : -1;
	srv->limits.max_messages = o->max_messages;
	srv->limits.max_tools = o->max_tools;
	/* max_tokens above the context or --max-tokens is clamped, not refused: agents ask for
	 * 32,000 whatever the server's context is. */
	pthread_mutex_init(&srv->mu, NULL);
	if (!srv->model_id || !(srv->special_doc = capy_tdoc_new())) {
		rc = capy_err_set(err, CAPY_ENOMEM, "out of memory");
		goto fail;
	}
	if (!as->tok || !as->tmpl) {
		rc = capy_err_set(err, CAPY_EINVAL, "the model has no %s (give one with %s)",
				  as->tok ? "chat template" : "tokenizer", as->tok ? "--chat-template" : "--tokenizer");
		goto fail;
	}
	if (as->tokenizer_config) {
		struct capy_tval *cfg;
		if ((rc = capy_tdoc_parse_json(srv->special_doc, as->tokenizer_config, as->tokenizer_config_len,
					       "tokenizer_config.json", &cfg, err)) < 0 ||
		    (rc = capy_chat_special_tokens(srv->special_doc, cfg, &srv->special, err)) < 0)
			goto fail;
	}
	if ((rc = build_trie(srv, err)) < 0)
		goto fail;
	static const char *const gen_post = "POST";
	const struct capy_http_route routes[] = {
		{ "/v1/chat/completions", gen_post, serve_chat, srv, false },
		{ "/v1/completions", gen_post, serve_completions, srv, false },
		{ "/v1/responses", gen_post, serve_responses, srv, false },
		{ "/v1/messages/count_tokens", gen_post, serve_count_tokens, srv, false },
		{ "/v1/messages", gen_post, serve_messages, srv, false },
		{ "/v1/models", "GET,HEAD", models, srv, false },
		{ "/v1/models/*", "GET,HEAD", models, srv, false },
		{ "/health", "GET,HEAD", health, srv, true },
		{ "/metrics", "GET,HEAD", metrics, srv, true },
	};
	ho.host = o->host;
	ho.port = o->port;
	ho.routes = routes;
	ho.n_routes = ARRAY_SIZE(routes);
	ho.api_keys = o->api_keys;
	ho.n_api_keys = o->n_api_keys;
	ho.max_body = o->max_body;
	ho.max_connections = o->max_connections;
	ho.request_timeout_ms = o->request_timeout_ms;
	ho.idle_timeout_ms = o->idle_timeout_ms;
	ho.error_body = error_body;
	ho.error_arg = srv;
	ho.log = log_line;
	ho.log_arg = srv;
	if ((rc = capy_http_start(&srv->http, &ho, err)) < 0)
		goto fail;
	*out = srv;
	return 0;
fail:
	capy_token_trie_free(srv->trie);
	capy_tdoc_free(srv->special_doc);
	free(srv->model_id);
	pthread_mutex_destroy(&srv->mu);
	free(srv);
	return rc;
}

int capy_server_port(const struct capy_server *srv)
{
	return capy_http_port(srv->http);
}

void capy_server_quiesce(struct capy_server *srv)
{
	capy_http_quiesce(srv->http);
}

void capy_server_stop(struct capy_server *srv, double timeout_s)
{
	if (!srv)
		return;
	capy_http_stop(srv->http, timeout_s);
	capy_token_trie_free(srv->trie);
	capy_tdoc_free(srv->special_doc);
	free(srv->model_id);
	pthread_mutex_destroy(&srv->mu);
	free(srv);
}
