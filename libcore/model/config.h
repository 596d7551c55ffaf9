/* config.h - the text model's configuration, for all four families.
 *
 * capy_model_config_parse() reads a Hugging Face text config (config.json's
 * text_config, or the whole object for qwen3_next) or the normalized copy in an
 * artifact's directory, applying the transformers 5.17 defaults of the family to
 * absent fields and checking the architecture's invariants. capy_model_config_json()
 * writes the normalized form: every field explicit (docs/artifact.md, "model").
 */
#ifndef CAPY_MODEL_CONFIG_H
#define CAPY_MODEL_CONFIG_H

#include "../util/err.h"

#include <cjson/cJSON.h>

#define CAPY_MAX_LAYERS 256
#define CAPY_MAX_EOS 8

enum capy_family {
	CAPY_FAMILY_QWEN3_5,     /* dense hybrid (Qwen3.5/3.6/3.8-27B) */
	CAPY_FAMILY_QWEN3_5_MOE, /* hybrid MoE (Qwen3.6-35B-A3B) */
	CAPY_FAMILY_QWEN3_NEXT,  /* hybrid MoE, fused GDN projections (Qwen3-Next-80B-A3B) */
	CAPY_FAMILY_QWEN4_EXP,   /* hybrid MoE + QSA + hyper-connections + PLE (Qwen3.8-Flash-Next) */
};

enum capy_layer_type {
	CAPY_LAYER_LINEAR, /* Gated DeltaNet */
	CAPY_LAYER_FULL,   /* gated full attention */
	CAPY_LAYER_QSA,    /* gated attention with the QSA block indexer (qwen4_exp) */
};

struct capy_model_config {
	enum capy_family family;
	uint64_t vocab_size, hidden_size, n_layers;
	uint8_t layer_types[CAPY_MAX_LAYERS];
	/* attention */
	uint64_t n_heads, n_kv_heads, head_dim;
	double rope_theta, partial_rotary_factor, rms_norm_eps;
	uint64_t mrope_section[3];
	bool mrope_interleaved;
	/* Gated DeltaNet */
	uint64_t linear_conv_kernel, linear_key_head_dim, linear_value_head_dim;
	uint64_t linear_key_heads, linear_value_heads;
	/* MLP / MoE */
	uint64_t intermediate_size;          /* dense MLP (qwen3_5, qwen3_next dense layers) */
	uint64_t n_experts, n_experts_per_tok, moe_intermediate_size, shared_expert_intermediate_size;
	bool norm_topk_prob;
	uint64_t decoder_sparse_step;
	bool moe_layer[CAPY_MAX_LAYERS];     /* derived: layer uses the MoE block */
	/* qwen4_exp */
	uint64_t hc_count, hc_lowrank;
	bool ple_layer[CAPY_MAX_LAYERS];     /* derived from ple_layer_ids (one-indexed) */
	uint64_t ple_embed_dim, ple_conv_kernel, ngram_size, heads_per_ngram;
	uint64_t ngram_vocab_size_base, ngram_vocab_divisor, ngram_seed, split_ngram_parts;
	uint64_t indexer_n_heads, indexer_kv_heads, indexer_head_dim, indexer_budget,
		indexer_compress_ratio;
	bool output_gate_sigmoid;            /* GDN output gate: sigmoid instead of silu */
	/* tokens */
	int64_t eos_ids[CAPY_MAX_EOS];
	int n_eos;
	int64_t bos_id, pad_id; /* -1 when unset */
	bool tie_word_embeddings;
	uint64_t mtp_layers;    /* MTP decoder layers: the config's field, or (an artifact's
				 * config, and qwen4_exp's, which has no field) what capy-convert
				 * found under mtp.layers.N of the checkpoint */
};

/* family_name is config.json's model_type; text is the text config object. what
 * names the source in errors ("'dir/config.json'"). */
int capy_model_config_parse(struct capy_model_config *c, const char *family_name,
			    const cJSON *text, const char *what, struct capy_err *err);

/* The normalized form; NULL on OOM. */
cJSON *capy_model_config_json(const struct capy_model_config *c);

const char *capy_family_name(enum capy_family f);
int capy_family_parse(const char *name, enum capy_family *out);
const char *capy_layer_type_name(enum capy_layer_type t);
/* The type of an MTP decoder layer: full attention; on qwen4_exp, whose attention layers all
 * carry the QSA indexer, attention with it (docs/spec.md "MTP drafts": capy's layout). */
enum capy_layer_type capy_mtp_layer_type(const struct capy_model_config *c);

/* PLE: the prime vocabulary sizes of the first n n-gram heads (numbered across all PLE
 * layers in order) and a layer's hash multipliers, derived exactly as transformers does. */
void capy_ple_head_vocabs(const struct capy_model_config *c, uint64_t n, uint64_t *out);
void capy_ple_multipliers(const struct capy_model_config *c, uint64_t ple_index, int64_t *out);
/* Rows of a PLE layer's n-gram table (padded to the divisor; 0 on OOM) and its columns. */
uint64_t capy_ple_table_rows(const struct capy_model_config *c, uint64_t ple_index);
uint64_t capy_ple_head_dim(const struct capy_model_config *c);

#endif
