/* config.c - parsing, checking and normalizing the text model configuration. */
#include "config.h"
#include "../util/json.h"

#include <math.h>

static const char *const family_names[] = { "qwen3_5", "qwen3_5_moe", "qwen3_next", "qwen4_exp" };
static const char *const layer_names[] = { "linear_attention", "full_attention",
					   "qwen_sparse_attention" };

const char *capy_family_name(enum capy_family f)
{
	return (unsigned)f < ARRAY_SIZE(family_names) ? family_names[f] : "?";
}

enum capy_layer_type capy_mtp_layer_type(const struct capy_model_config *c)
{
	return c->family == CAPY_FAMILY_QWEN4_EXP ? CAPY_LAYER_QSA : CAPY_LAYER_FULL;
}

int capy_family_parse(const char *name, enum capy_family *out)
{
	for (size_t i = 0; i < ARRAY_SIZE(family_names); i++) {
		if (!strcmp(name, family_names[i])) {
			*out = (enum capy_family)i;
			return 0;
		}
	}
	return -1;
}

const char *capy_layer_type_name(enum capy_layer_type t)
{
	return (unsigned)t < ARRAY_SIZE(layer_names) ? layer_names[t] : "?";
}

struct reader {
	const cJSON *obj;
	const char *what;
	struct capy_err *err;
	int rc;
};

/* Read an unsigned field, keeping def when absent; after an error further reads do nothing. */
static uint64_t u64f(struct reader *r, const char *key, uint64_t def)
{
	uint64_t v = def;

	if (r->rc >= 0 && capy_json_get_u64(r->obj, key, false, &v, r->what, r->err) < 0)
		r->rc = r->err ? r->err->code : CAPY_EFORMAT;
	return v;
}

static double dblf(struct reader *r, const cJSON *obj, const char *key, double def)
{
	double v = def;

	if (r->rc >= 0 && obj && capy_json_get_double(obj, key, false, &v, r->what, r->err) < 0)
		r->rc = r->err ? r->err->code : CAPY_EFORMAT;
	return v;
}

static bool boolf(struct reader *r, const char *key, bool def)
{
	bool v = def;

	if (r->rc >= 0 && capy_json_get_bool(r->obj, key, false, &v, r->what, r->err) < 0)
		r->rc = r->err ? r->err->code : CAPY_EFORMAT;
	return v;
}

#define BAD(...) capy_err_set(err, CAPY_EFORMAT, __VA_ARGS__)

static int parse_int_list(const cJSON *arr, int64_t *out, int max, int *n, const char *key,
			  const char *what, struct capy_err *err)
{
	const cJSON *it;

	*n = 0;
	if (cJSON_IsNumber(arr)) {
		if (capy_json_i64(arr, &out[0]) < 0)
			return BAD("%s: field '%s' is not an integer", what, key);
		*n = 1;
		return 0;
	}
	if (!cJSON_IsArray(arr))
		return BAD("%s: field '%s' is not a list of integers", what, key);
	cJSON_ArrayForEach(it, arr) {
		if (*n == max)
			return BAD("%s: field '%s' has more than %d entries", what, key, max);
		if (capy_json_i64(it, &out[*n]) < 0)
			return BAD("%s: field '%s' is not a list of integers", what, key);
		(*n)++;
	}
	return 0;
}

static int parse_layer_types(struct capy_model_config *c, const cJSON *text, const char *what,
			     struct capy_err *err)
{
	const cJSON *lt = cJSON_GetObjectItemCaseSensitive(text, "layer_types"), *it;
	uint64_t interval = 4, i = 0;

	if (!lt || cJSON_IsNull(lt)) {
		if (capy_json_get_u64(text, "full_attention_interval", false, &interval, what, err) < 0)
			return err->code;
		if (!interval)
			return BAD("%s: full_attention_interval is 0", what);
		for (i = 0; i < c->n_layers; i++)
			c->layer_types[i] = (i + 1) % interval ? CAPY_LAYER_LINEAR :
				c->family == CAPY_FAMILY_QWEN4_EXP ? CAPY_LAYER_QSA : CAPY_LAYER_FULL;
		return 0;
	}
	if (!cJSON_IsArray(lt))
		return BAD("%s: layer_types is not a list", what);
	if ((uint64_t)cJSON_GetArraySize(lt) != c->n_layers)
		return BAD("%s: layer_types has %d entries for %" PRIu64 " layers", what,
			   cJSON_GetArraySize(lt), c->n_layers);
	cJSON_ArrayForEach(it, lt) {
		const char *s = cJSON_IsString(it) ? it->valuestring : "";
		if (!strcmp(s, "linear_attention") || !strcmp(s, "mamba") || !strcmp(s, "conv"))
			c->layer_types[i] = CAPY_LAYER_LINEAR;
		else if (!strcmp(s, "full_attention") || !strcmp(s, "attention"))
			c->layer_types[i] = c->family == CAPY_FAMILY_QWEN4_EXP ? CAPY_LAYER_QSA : CAPY_LAYER_FULL;
		else if (!strcmp(s, "qwen_sparse_attention") && c->family == CAPY_FAMILY_QWEN4_EXP)
			c->layer_types[i] = CAPY_LAYER_QSA;
		else
			return BAD("%s: layer_types[%" PRIu64 "] is '%s', not a layer type of %s", what, i, s,
				   capy_family_name(c->family));
		i++;
	}
	return 0;
}

static int parse_rope(struct capy_model_config *c, struct reader *r, const cJSON *text)
{
	const cJSON *rp = cJSON_GetObjectItemCaseSensitive(text, "rope_parameters");
	const cJSON *rs = cJSON_GetObjectItemCaseSensitive(text, "rope_scaling");
	/* qwen4_exp skips the "partial_rotary_factor = 0.25" default of its parents. */
	double partial_def = c->family == CAPY_FAMILY_QWEN4_EXP ? 1.0 : 0.25;

	if (rp && !cJSON_IsObject(rp) && !cJSON_IsNull(rp))
		return capy_err_set(r->err, CAPY_EFORMAT, "%s: rope_parameters is not an object", r->what);
	if (!cJSON_IsObject(rp))
		rp = cJSON_IsObject(rs) ? rs : NULL;
	c->rope_theta = dblf(r, text, "rope_theta", 10000.0);
	c->rope_theta = dblf(r, rp, "rope_theta", c->rope_theta);
	c->partial_rotary_factor = dblf(r, text, "partial_rotary_factor", partial_def);
	c->partial_rotary_factor = dblf(r, rp, "partial_rotary_factor", c->partial_rotary_factor);
	c->mrope_section[0] = 11;
	c->mrope_section[1] = 11;
	c->mrope_section[2] = 10;
	if (rp) {
		const cJSON *ms = cJSON_GetObjectItemCaseSensitive(rp, "mrope_section"), *it;
		const cJSON *mi = cJSON_GetObjectItemCaseSensitive(rp, "mrope_interleaved");
		int i = 0;
		const cJSON *type = cJSON_GetObjectItemCaseSensitive(rp, "rope_type");
		if (cJSON_IsString(type) && strcmp(type->valuestring, "default"))
			return capy_err_set(r->err, CAPY_EUNSUPPORTED, "%s: rope_type '%s' is not supported",
					    r->what, type->valuestring);
		if (cJSON_IsArray(ms)) {
			if (cJSON_GetArraySize(ms) != 3)
				return capy_err_set(r->err, CAPY_EFORMAT, "%s: mrope_section needs 3 entries",
						    r->what);
			cJSON_ArrayForEach(it, ms)
				if (capy_json_u64(it, &c->mrope_section[i++]) < 0)
					return capy_err_set(r->err, CAPY_EFORMAT,
							    "%s: mrope_section is not a list of integers", r->what);
		}
		c->mrope_interleaved = cJSON_IsTrue(mi);
	}
	if (r->rc < 0)
		return r->rc;
	if (!(c->rope_theta > 0) || !(c->partial_rotary_factor > 0) || c->partial_rotary_factor > 1)
		return capy_err_set(r->err, CAPY_EFORMAT, "%s: rope_theta %g / partial_rotary_factor %g out of range",
				    r->what, c->rope_theta, c->partial_rotary_factor);
	return 0;
}

/* Limits far above any real model that keep every size computation exact and every
 * derived table (PLE primes) quick to build, whatever a config.json says. */
#define DIM_MAX (1ull << 24)
#define VOCAB_MAX (1ull << 27)
#define NGRAM_BASE_MAX 10000000000ull
#define NGRAM_HEADS_MAX 64

static int check_bounds(const struct capy_model_config *c, const char *what, struct capy_err *err)
{
	const struct {
		const char *name;
		uint64_t v, max;
	} f[] = {
		{ "vocab_size", c->vocab_size, VOCAB_MAX },
		{ "hidden_size", c->hidden_size, DIM_MAX },
		{ "num_attention_heads", c->n_heads, 4096 },
		{ "num_key_value_heads", c->n_kv_heads, 4096 },
		{ "head_dim", c->head_dim, 65536 },
		{ "linear_conv_kernel_dim", c->linear_conv_kernel, 64 },
		{ "linear_key_head_dim", c->linear_key_head_dim, 65536 },
		{ "linear_value_head_dim", c->linear_value_head_dim, 65536 },
		{ "linear_num_key_heads", c->linear_key_heads, 4096 },
		{ "linear_num_value_heads", c->linear_value_heads, 4096 },
		{ "intermediate_size", c->intermediate_size, DIM_MAX },
		{ "num_experts", c->n_experts, 65536 },
		{ "moe_intermediate_size", c->moe_intermediate_size, DIM_MAX },
		{ "shared_expert_intermediate_size", c->shared_expert_intermediate_size, DIM_MAX },
		{ "hc_count", c->hc_count, 64 },
		{ "hc_lowrank", c->hc_lowrank, DIM_MAX },
		{ "ple_embed_dim", c->ple_embed_dim, DIM_MAX },
		{ "ple_conv_kernel_size", c->ple_conv_kernel, 64 },
		{ "ngram_size", c->ngram_size, 16 },
		{ "heads_per_ngram", c->heads_per_ngram, NGRAM_HEADS_MAX },
		{ "ngram_vocab_size_base", c->ngram_vocab_size_base, NGRAM_BASE_MAX },
		{ "make_ngram_vocab_size_divisible_by", c->ngram_vocab_divisor, 1u << 20 },
		{ "split_ngram_parts", c->split_ngram_parts, 1u << 16 },
		{ "indexer_n_heads", c->indexer_n_heads, 4096 },
		{ "indexer_kv_heads", c->indexer_kv_heads, 4096 },
		{ "indexer_head_dim", c->indexer_head_dim, 65536 },
		{ "indexer_budget", c->indexer_budget, 1u << 30 },
		{ "indexer_compress_ratio", c->indexer_compress_ratio, 1u << 20 },
		{ "mtp_num_hidden_layers", c->mtp_layers, 64 },
	};

	for (size_t i = 0; i < ARRAY_SIZE(f); i++)
		if (f[i].v > f[i].max)
			return BAD("%s: %s %" PRIu64 " is beyond capy's limit %" PRIu64, what, f[i].name, f[i].v,
				   f[i].max);
	if ((c->ngram_size ? c->ngram_size - 1 : 0) * c->heads_per_ngram > NGRAM_HEADS_MAX)
		return BAD("%s: more than %d PLE n-gram heads", what, NGRAM_HEADS_MAX);
	return 0;
}

static int check(const struct capy_model_config *c, const char *what, struct capy_err *err)
{
	uint64_t rot = (uint64_t)(c->head_dim * c->partial_rotary_factor);
	int rc = check_bounds(c, what, err);

	if (rc < 0)
		return rc;

	if (!c->vocab_size || !c->hidden_size || !c->n_layers || !c->n_heads || !c->n_kv_heads ||
	    !c->head_dim || !c->linear_key_heads || !c->linear_value_heads || !c->linear_key_head_dim ||
	    !c->linear_value_head_dim || !c->linear_conv_kernel)
		return BAD("%s: a model dimension is 0", what);
	if (c->n_layers > CAPY_MAX_LAYERS)
		return BAD("%s: %" PRIu64 " layers, at most %d supported", what, c->n_layers, CAPY_MAX_LAYERS);
	if (c->n_heads / c->n_kv_heads > 64)
		return BAD("%s: %" PRIu64 " query heads per key-value head, at most 64 supported", what,
			   c->n_heads / c->n_kv_heads);
	if (c->n_heads % c->n_kv_heads)
		return BAD("%s: num_attention_heads %" PRIu64 " is not a multiple of num_key_value_heads %" PRIu64,
			   what, c->n_heads, c->n_kv_heads);
	if (c->linear_value_heads % c->linear_key_heads)
		return BAD("%s: linear_num_value_heads %" PRIu64 " is not a multiple of linear_num_key_heads %" PRIu64,
			   what, c->linear_value_heads, c->linear_key_heads);
	if (rot % 2)
		return BAD("%s: rotary dimension %" PRIu64 " is odd", what, rot);
	if (c->family != CAPY_FAMILY_QWEN3_5) {
		if (!c->n_experts || !c->n_experts_per_tok || c->n_experts_per_tok > c->n_experts)
			return BAD("%s: num_experts_per_tok %" PRIu64 " must be in [1, num_experts %" PRIu64 "]",
				   what, c->n_experts_per_tok, c->n_experts);
		if (!c->moe_intermediate_size || !c->shared_expert_intermediate_size)
			return BAD("%s: moe_intermediate_size and shared_expert_intermediate_size must be > 0", what);
	}
	for (uint64_t i = 0; i < c->n_layers; i++)
		if (!c->moe_layer[i] && !c->intermediate_size)
			return BAD("%s: layer %" PRIu64 " has a dense MLP but intermediate_size is 0", what, i);
	if (c->family == CAPY_FAMILY_QWEN4_EXP) {
		bool any_qsa = false, any_ple = false;
		if (c->hc_count < 2 || !c->hc_lowrank)
			return BAD("%s: hc_count must be > 1 and hc_lowrank > 0", what);
		for (uint64_t i = 0; i < c->n_layers; i++) {
			any_qsa |= c->layer_types[i] == CAPY_LAYER_QSA;
			any_ple |= c->ple_layer[i];
			if (c->ple_layer[i] && c->layer_types[i] != CAPY_LAYER_LINEAR)
				return BAD("%s: PLE on layer %" PRIu64 ", which is not a linear_attention layer",
					   what, i + 1);
		}
		if (any_qsa) {
			if (!c->indexer_n_heads || !c->indexer_kv_heads || !c->indexer_head_dim ||
			    !c->indexer_budget || !c->indexer_compress_ratio)
				return BAD("%s: qwen_sparse_attention layers need indexer_n_heads, indexer_kv_heads, "
					   "indexer_head_dim, indexer_budget and indexer_compress_ratio", what);
			if (c->indexer_kv_heads != 1)
				return BAD("%s: indexer_kv_heads must be 1", what);
			if (c->indexer_budget % c->indexer_compress_ratio)
				return BAD("%s: indexer_budget is not a multiple of indexer_compress_ratio", what);
			if (rot > c->indexer_head_dim)
				return BAD("%s: rotary dimension %" PRIu64 " exceeds indexer_head_dim %" PRIu64,
					   what, rot, c->indexer_head_dim);
		}
		if (any_ple) {
			uint64_t heads = (c->ngram_size - 1) * c->heads_per_ngram;
			if (c->ngram_size < 2 || !heads || !c->ple_embed_dim || c->ple_embed_dim % heads)
				return BAD("%s: ple_embed_dim %" PRIu64 " must be a positive multiple of the %" PRIu64
					   " n-gram heads", what, c->ple_embed_dim, heads);
			if (!c->n_eos)
				return BAD("%s: eos_token_id must be set when PLE layers are enabled", what);
			if (!c->ngram_vocab_size_base || !c->ngram_vocab_divisor || !c->split_ngram_parts ||
			    !c->ple_conv_kernel)
				return BAD("%s: a PLE size field is 0", what);
		}
	}
	return 0;
}

int capy_model_config_parse(struct capy_model_config *c, const char *family_name,
			    const cJSON *text, const char *what, struct capy_err *err)
{
	struct reader r = { text, what, err, 0 };
	bool next, moe, q4;
	const cJSON *it;
	int rc;

	memset(c, 0, sizeof(*c));
	if (capy_family_parse(family_name, &c->family) < 0)
		return capy_err_set(err, CAPY_EUNSUPPORTED,
				    "%s: model_type '%s' is not supported (qwen4_exp, qwen3_5, qwen3_5_moe, qwen3_next)",
				    what, family_name);
	if (!cJSON_IsObject(text))
		return BAD("%s: the text config is not an object", what);
	next = c->family == CAPY_FAMILY_QWEN3_NEXT;
	q4 = c->family == CAPY_FAMILY_QWEN4_EXP;
	moe = c->family != CAPY_FAMILY_QWEN3_5;

	c->vocab_size = u64f(&r, "vocab_size", next ? 151936 : 248320);
	c->hidden_size = u64f(&r, "hidden_size", c->family == CAPY_FAMILY_QWEN3_5 ? 4096 : 2048);
	c->n_layers = u64f(&r, "num_hidden_layers",
			   c->family == CAPY_FAMILY_QWEN3_5 ? 32 : next ? 48 : 40);
	c->n_heads = u64f(&r, "num_attention_heads", 16);
	c->n_kv_heads = u64f(&r, "num_key_value_heads", c->family == CAPY_FAMILY_QWEN3_5 ? 4 : 2);
	c->head_dim = u64f(&r, "head_dim", 256);
	c->rms_norm_eps = dblf(&r, text, "rms_norm_eps", 1e-6);
	c->linear_conv_kernel = u64f(&r, "linear_conv_kernel_dim", 4);
	c->linear_key_head_dim = u64f(&r, "linear_key_head_dim", 128);
	c->linear_value_head_dim = u64f(&r, "linear_value_head_dim", 128);
	c->linear_key_heads = u64f(&r, "linear_num_key_heads", 16);
	c->linear_value_heads = u64f(&r, "linear_num_value_heads", 32);
	c->intermediate_size = u64f(&r, "intermediate_size",
				    c->family == CAPY_FAMILY_QWEN3_5 ? 12288 : next ? 5632 : 0);
	if (moe) {
		c->n_experts = u64f(&r, "num_experts", c->family == CAPY_FAMILY_QWEN3_5_MOE ? 256 : 512);
		c->n_experts_per_tok = u64f(&r, "num_experts_per_tok",
					    c->family == CAPY_FAMILY_QWEN3_5_MOE ? 8 : 10);
		c->moe_intermediate_size = u64f(&r, "moe_intermediate_size", 512);
		c->shared_expert_intermediate_size = u64f(&r, "shared_expert_intermediate_size", 512);
		/* qwen3_5_moe always renormalizes the top-k weights; it has no such field. */
		c->norm_topk_prob = c->family == CAPY_FAMILY_QWEN3_5_MOE ? true : boolf(&r, "norm_topk_prob", true);
		c->decoder_sparse_step = next ? u64f(&r, "decoder_sparse_step", 1) : 1;
		if (!c->decoder_sparse_step)
			return BAD("%s: decoder_sparse_step is 0", what);
	}
	c->tie_word_embeddings = boolf(&r, "tie_word_embeddings", false);
	if (q4) {
		c->hc_count = u64f(&r, "hc_count", 4);
		c->hc_lowrank = u64f(&r, "hc_lowrank", 320);
		c->ple_embed_dim = u64f(&r, "ple_embed_dim", c->hidden_size);
		c->ple_conv_kernel = u64f(&r, "ple_conv_kernel_size", 4);
		c->ngram_size = u64f(&r, "ngram_size", 3);
		c->heads_per_ngram = u64f(&r, "heads_per_ngram", 8);
		c->ngram_vocab_size_base = u64f(&r, "ngram_vocab_size_base", 20000000);
		c->ngram_vocab_divisor = u64f(&r, "make_ngram_vocab_size_divisible_by", 128);
		c->ngram_seed = u64f(&r, "seed", 1234);
		c->split_ngram_parts = u64f(&r, "split_ngram_parts", 512);
		c->indexer_n_heads = u64f(&r, "indexer_n_heads", 0);
		c->indexer_kv_heads = u64f(&r, "indexer_kv_heads", 0);
		c->indexer_head_dim = u64f(&r, "indexer_head_dim", 0);
		c->indexer_budget = u64f(&r, "indexer_budget", 0);
		c->indexer_compress_ratio = u64f(&r, "indexer_compress_ratio", 0);
	}
	if (r.rc < 0)
		return r.rc;
	{
		const char *act = "silu", *gate = NULL;
		if (capy_json_get_string(text, "hidden_act", false, &act, what, err) < 0 ||
		    (q4 && capy_json_get_string(text, "output_gate_type", false, &gate, what, err) < 0))
			return err ? err->code : CAPY_EFORMAT;
		if (strcmp(act, "silu"))
			return capy_err_set(err, CAPY_EUNSUPPORTED, "%s: hidden_act '%s' is not supported", what, act);
		if (gate && strcmp(gate, "silu") && strcmp(gate, "sigmoid"))
			return BAD("%s: output_gate_type '%s' is not silu or sigmoid", what, gate);
		c->output_gate_sigmoid = gate && !strcmp(gate, "sigmoid");
	}
	if (c->n_layers > CAPY_MAX_LAYERS)
		return BAD("%s: %" PRIu64 " layers, at most %d supported", what, c->n_layers, CAPY_MAX_LAYERS);
	if ((rc = parse_layer_types(c, text, what, err)) < 0)
		return rc;
	if ((rc = parse_rope(c, &r, text)) < 0)
		return rc;

	/* Which layers use the MoE block (qwen3_next can make some dense). */
	for (uint64_t i = 0; i < c->n_layers; i++)
		c->moe_layer[i] = moe && (i + 1) % c->decoder_sparse_step == 0;
	it = cJSON_GetObjectItemCaseSensitive(text, "mlp_only_layers");
	if (next && it && !cJSON_IsNull(it)) {
		int64_t ids[CAPY_MAX_LAYERS];
		int n;
		if ((rc = parse_int_list(it, ids, CAPY_MAX_LAYERS, &n, "mlp_only_layers", what, err)) < 0)
			return rc;
		for (int i = 0; i < n; i++) {
			if (ids[i] < 0 || (uint64_t)ids[i] >= c->n_layers)
				return BAD("%s: mlp_only_layers entry %" PRId64 " is not a layer", what, ids[i]);
			c->moe_layer[ids[i]] = false;
		}
	}
	it = cJSON_GetObjectItemCaseSensitive(text, "ple_layer_ids");
	if (q4 && it && !cJSON_IsNull(it)) {
		int64_t ids[CAPY_MAX_LAYERS];
		int n;
		if ((rc = parse_int_list(it, ids, CAPY_MAX_LAYERS, &n, "ple_layer_ids", what, err)) < 0)
			return rc;
		for (int i = 0; i < n; i++) {
			if (ids[i] < 1 || (uint64_t)ids[i] > c->n_layers)
				return BAD("%s: ple_layer_ids entry %" PRId64 " is not in [1, %" PRIu64 "]", what,
					   ids[i], c->n_layers);
			c->ple_layer[ids[i] - 1] = true;
		}
	}
	it = cJSON_GetObjectItemCaseSensitive(text, "eos_token_id");
	if (it && !cJSON_IsNull(it) &&
	    (rc = parse_int_list(it, c->eos_ids, CAPY_MAX_EOS, &c->n_eos, "eos_token_id", what, err)) < 0)
		return rc;
	c->bos_id = c->pad_id = -1;
	if (capy_json_get_i64(text, "bos_token_id", false, &c->bos_id, what, err) < 0 ||
	    capy_json_get_i64(text, "pad_token_id", false, &c->pad_id, what, err) < 0)
		return err ? err->code : CAPY_EFORMAT;
	{
		uint64_t m = 0;
		if (capy_json_get_u64(text, "mtp_num_hidden_layers", false, &m, what, err) < 0 ||
		    capy_json_get_u64(text, "num_nextn_predict_layers", false, &m, what, err) < 0)
			return err ? err->code : CAPY_EFORMAT;
		c->mtp_layers = m;
	}
	return check(c, what, err);
}

static void add_u64_list(cJSON *o, const char *key, const uint64_t *v, int n)
{
	cJSON *a = cJSON_AddArrayToObject(o, key);

	for (int i = 0; a && i < n; i++)
		cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[i]));
}

cJSON *capy_model_config_json(const struct capy_model_config *c)
{
	cJSON *o = cJSON_CreateObject(), *a;

	if (!o)
		return NULL;
#define U(k, v) capy_json_add_u64(o, k, v)
	cJSON_AddStringToObject(o, "model_type", capy_family_name(c->family));
	U("vocab_size", c->vocab_size);
	U("hidden_size", c->hidden_size);
	U("num_hidden_layers", c->n_layers);
	a = cJSON_AddArrayToObject(o, "layer_types");
	for (uint64_t i = 0; i < c->n_layers; i++)
		cJSON_AddItemToArray(a, cJSON_CreateString(capy_layer_type_name(c->layer_types[i])));
	U("num_attention_heads", c->n_heads);
	U("num_key_value_heads", c->n_kv_heads);
	U("head_dim", c->head_dim);
	a = cJSON_AddObjectToObject(o, "rope_parameters");
	cJSON_AddStringToObject(a, "rope_type", "default");
	cJSON_AddNumberToObject(a, "rope_theta", c->rope_theta);
	cJSON_AddNumberToObject(a, "partial_rotary_factor", c->partial_rotary_factor);
	add_u64_list(a, "mrope_section", c->mrope_section, 3);
	cJSON_AddBoolToObject(a, "mrope_interleaved", c->mrope_interleaved);
	cJSON_AddNumberToObject(o, "rms_norm_eps", c->rms_norm_eps);
	U("linear_conv_kernel_dim", c->linear_conv_kernel);
	U("linear_key_head_dim", c->linear_key_head_dim);
	U("linear_value_head_dim", c->linear_value_head_dim);
	U("linear_num_key_heads", c->linear_key_heads);
	U("linear_num_value_heads", c->linear_value_heads);
	U("intermediate_size", c->intermediate_size);
	if (c->family != CAPY_FAMILY_QWEN3_5) {
		cJSON *ml = cJSON_AddArrayToObject(o, "mlp_only_layers");
		U("num_experts", c->n_experts);
		U("num_experts_per_tok", c->n_experts_per_tok);
		U("moe_intermediate_size", c->moe_intermediate_size);
		U("shared_expert_intermediate_size", c->shared_expert_intermediate_size);
		cJSON_AddBoolToObject(o, "norm_topk_prob", c->norm_topk_prob);
		U("decoder_sparse_step", c->decoder_sparse_step);
		for (uint64_t i = 0; i < c->n_layers; i++)
			if (!c->moe_layer[i] && (i + 1) % c->decoder_sparse_step == 0)
				cJSON_AddItemToArray(ml, cJSON_CreateNumber((double)i));
	}
	if (c->family == CAPY_FAMILY_QWEN4_EXP) {
		cJSON *pl = cJSON_AddArrayToObject(o, "ple_layer_ids");
		for (uint64_t i = 0; i < c->n_layers; i++)
			if (c->ple_layer[i])
				cJSON_AddItemToArray(pl, cJSON_CreateNumber((double)(i + 1)));
		U("hc_count", c->hc_count);
		U("hc_lowrank", c->hc_lowrank);
		U("ple_embed_dim", c->ple_embed_dim);
		U("ple_conv_kernel_size", c->ple_conv_kernel);
		U("ngram_size", c->ngram_size);
		U("heads_per_ngram", c->heads_per_ngram);
		U("ngram_vocab_size_base", c->ngram_vocab_size_base);
		U("make_ngram_vocab_size_divisible_by", c->ngram_vocab_divisor);
		U("seed", c->ngram_seed);
		U("split_ngram_parts", c->split_ngram_parts);
		U("indexer_n_heads", c->indexer_n_heads);
		U("indexer_kv_heads", c->indexer_kv_heads);
		U("indexer_head_dim", c->indexer_head_dim);
		U("indexer_budget", c->indexer_budget);
		U("indexer_compress_ratio", c->indexer_compress_ratio);
		cJSON_AddStringToObject(o, "output_gate_type", c->output_gate_sigmoid ? "sigmoid" : "silu");
	}
	cJSON_AddStringToObject(o, "hidden_act", "silu");
	a = cJSON_AddArrayToObject(o, "eos_token_id");
	for (int i = 0; i < c->n_eos; i++)
		cJSON_AddItemToArray(a, cJSON_CreateNumber((double)c->eos_ids[i]));
	if (c->bos_id >= 0)
		cJSON_AddNumberToObject(o, "bos_token_id", (double)c->bos_id);
	else
		cJSON_AddNullToObject(o, "bos_token_id");
	if (c->pad_id >= 0)
		cJSON_AddNumberToObject(o, "pad_token_id", (double)c->pad_id);
	else
		cJSON_AddNullToObject(o, "pad_token_id");
	cJSON_AddBoolToObject(o, "tie_word_embeddings", c->tie_word_embeddings);
	U("mtp_num_hidden_layers", c->mtp_layers);
#undef U
	return o;
}

/* --- PLE hashing parameters ------------------------------------------------------ */

static bool is_prime(uint64_t v)
{
	if (v < 2)
		return false;
	if (v % 2 == 0)
		return v == 2;
	for (uint64_t d = 3; d * d <= v; d += 2)
		if (v % d == 0)
			return false;
	return true;
}

void capy_ple_head_vocabs(const struct capy_model_config *c, uint64_t n, uint64_t *out)
{
	/* Head i's vocabulary is the (i + 1)-th prime above ngram_vocab_size_base - 1. */
	uint64_t p = c->ngram_vocab_size_base - 1;

	for (uint64_t i = 0; i < n; i++) {
		p++;
		while (!is_prime(p))
			p++;
		out[i] = p;
	}
}

static uint64_t splitmix(uint64_t v)
{
	v += 0x9E3779B97F4A7C15ull;
	v = (v ^ (v >> 30)) * 0xBF58476D1CE4E5B9ull;
	v = (v ^ (v >> 27)) * 0x94D049BB133111EBull;
	return v ^ (v >> 31);
}

void capy_ple_multipliers(const struct capy_model_config *c, uint64_t ple_index, int64_t *out)
{
	uint64_t max_long = (uint64_t)INT64_MAX;
	uint64_t mult_max = max_long / (c->vocab_size ? c->vocab_size : 1);
	uint64_t half = mult_max / 2 ? mult_max / 2 : 1;
	uint64_t base = c->ngram_seed + 10007ull * ple_index;

	for (uint64_t i = 0; i < c->ngram_size; i++) {
		uint64_t v = base + 0x9E3779B97F4A7C15ull * (i + 1);
		out[i] = (int64_t)(2 * (splitmix(v) % half) + 1);
	}
}

uint64_t capy_ple_table_rows(const struct capy_model_config *c, uint64_t ple_index)
{
	uint64_t heads = (c->ngram_size - 1) * c->heads_per_ngram, total = 0;
	uint64_t n = (ple_index + 1) * heads;
	uint64_t *v = malloc(n * sizeof(*v));

	if (!v)
		return 0;
	capy_ple_head_vocabs(c, n, v);
	for (uint64_t h = 0; h < heads; h++)
		total += v[ple_index * heads + h];
	free(v);
	return CAPY_ALIGN_UP(total, c->ngram_vocab_divisor);
}

uint64_t capy_ple_head_dim(const struct capy_model_config *c)
{
	return c->ple_embed_dim / ((c->ngram_size - 1) * c->heads_per_ngram);
}
