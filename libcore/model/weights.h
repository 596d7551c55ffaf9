/* weights.h - a model's weights bound by name: every tensor the configuration implies,
 * checked for name, dtype and shape, gathered into per-layer structures that every backend
 * reads. Matrices are described in place (struct capy_linear: pointers into the mapped
 * artifact); norms, conv kernels and gate parameters are copied to fp32 (small), norms stored
 * as 1 + w. A backend that keeps its weights elsewhere (a GPU) copies the structure and
 * swaps the pointers.
 */
#ifndef CAPY_MODEL_WEIGHTS_H
#define CAPY_MODEL_WEIGHTS_H

#include "config.h"
#include "../artifact/artifact.h"
#include "../cpu/linear.h"


struct capy_attn_w {
	struct capy_linear q, k, v, o; /* q: [nq * 2 * hd, H], per head [query | gate] */
	float *q_norm, *k_norm;        /* [hd], stored as 1 + w */
	bool qsa;
	struct capy_linear idx_qk;     /* [(ni + 1) * idh, H]: ni query heads, then the key */
	float *idx_q_norm, *idx_k_norm; /* [idh], 1 + w */
};

struct capy_gdn_w {
	struct capy_linear qkv, z, b, a, out;
	float *conv;    /* [C][K] depthwise kernel */
	float *neg_a;   /* [nv] -exp(A_log) */
	float *dt_bias; /* [nv] */
	float *norm;    /* [dv] plain weight of the gated norm */
};

struct capy_mlp_w {
	struct capy_linear gate_up, down; /* gate_up [2I, H]: gate rows then up rows */
};

struct capy_moe_w {
	struct capy_linear router;        /* [E, H] */
	struct capy_linear *gate_up;      /* [E] slices of the expert stack */
	struct capy_linear *down;         /* [E] */
	struct capy_mlp_w shared;
	struct capy_linear shared_gate;   /* [1, H] */
};

struct capy_hc_w {
	float *norm;                      /* [hc * H], 1 + w, normalized per stream of H */
	struct capy_linear down, up, inject; /* inject absent in the final mixer */
	bool has_inject;
};

struct capy_ple_w {
	uint64_t index;                   /* among the PLE layers */
	const uint8_t *table;             /* [rows][hd] in the mapped artifact */
	enum capy_dtype table_dtype;
	uint64_t table_offset, rows, hd;
	int64_t mult[16];                 /* hash multipliers, ngram_size of them */
	uint64_t vocab[64], offset[64];   /* per n-gram head */
	struct capy_linear key, value;
	float *norm_key, *norm_query, *norm_conv; /* [hc * H], 1 + w */
	float *conv;                      /* [hc * H][K], dilation ngram_size */
};

struct capy_layer_w {
	enum capy_layer_type type;
	bool moe, has_ple;
	float *in_norm, *post_norm;       /* [H], 1 + w (not qwen4_exp) */
	struct capy_attn_w attn;
	struct capy_gdn_w gdn;
	struct capy_mlp_w mlp;
	struct capy_moe_w moe_w;
	struct capy_hc_w hc_attn, hc_mlp;      /* qwen4_exp */
	struct capy_ple_w ple;
	int kv_slot, gdn_slot, ple_slot;  /* index into the sequence's per-kind state, or -1 */
};

/* The MTP head (docs/spec.md "MTP drafts"): row t at position t takes h (the main model's
 * hidden state after its final norm, or the head's own output when chaining) and e = embed(the
 * token at t + 1); u = fc([norm_emb(e) | norm_hidden(h)]) and
 *
 *	qwen3_5, qwen3_5_moe, qwen3_next:  g = norm(layer(u))
 *	qwen4_exp (capy's layout; h the output of the model's final mixer):
 *		g = norm(mixer(layer(hc_count copies of u)))   the layer's hc mixers, QSA, no PLE
 *
 * and the logits are lm_head(g). */
struct capy_mtp_w {
	bool present;                     /* bound by capy_weights_bind_mtp */
	struct capy_linear fc;            /* [H, 2H] */
	float *norm_emb, *norm_hidden, *norm; /* [H], 1 + w */
	struct capy_layer_w layer;        /* one full-attention (qwen4_exp: QSA) decoder layer; kv_slot
					   * after the main ones */
	struct capy_hc_w mixer;           /* qwen4_exp: mtp.hyper_connection_mixer, no inject */
};

struct capy_weights {
	const void *embed;                /* [V][H] */
	enum capy_dtype embed_dtype;
	float *final_norm;                /* [H], 1 + w (not qwen4_exp) */
	struct capy_hc_w hc_final;             /* qwen4_exp */
	struct capy_linear lm_head;
	struct capy_layer_w *layers;
	int n_kv, n_gdn, n_ple;           /* layers with each kind of state */
	struct capy_mtp_w mtp;
	float *owned[4096];               /* fp32 copies to free */
	size_t nowned;
	struct capy_linear *owned_linears[2 * CAPY_MAX_LAYERS];
	size_t nowned_linears;
};

/* Bind every tensor of a (whose configuration is c) into w; on failure w holds nothing to
 * release and err names the artifact and the tensor. */
int capy_weights_bind(struct capy_weights *w, const struct capy_artifact *a, const struct capy_model_config *c,
		      struct capy_err *err);
void capy_weights_release(struct capy_weights *w);

/* Bind the MTP head mtp.* of a (after capy_weights_bind): mtp.fc, mtp.pre_fc_norm_embedding,
 * mtp.pre_fc_norm_hidden, mtp.norm and mtp.layers.0 (a full-attention layer with the family's
 * MLP: dense for qwen3_5, MoE for the others; on qwen4_exp a QSA layer with its two hc mixers,
 * and mtp.hyper_connection_mixer). Its layer's kv_slot is w->n_kv: the caller gives it a place
 * in the attention-cache pages after the main layers'. Fails (w unchanged but for what
 * capy_weights_release frees) for an artifact without a head, or with one capy does not run. */
int capy_weights_bind_mtp(struct capy_weights *w, const struct capy_artifact *a, const struct capy_model_config *c,
			  struct capy_err *err);
/* Call fn on every matrix of the bound MTP head (nothing when none is bound). */
void capy_weights_each_mtp_linear(const struct capy_weights *w, const struct capy_model_config *c,
				  void (*fn)(const struct capy_linear *l, void *ctx), void *ctx);

/* Call fn on every matrix of w (each expert of a stack once). */
void capy_weights_each_linear(const struct capy_weights *w, const struct capy_model_config *c,
			      void (*fn)(const struct capy_linear *l, void *ctx), void *ctx);

/* What a decode step reads: every matrix once, k of each layer's experts, and, of the PLE
 * tables, one token's rows (not the embedding row, which is tiny). */
uint64_t capy_weights_decode_bytes(const struct capy_weights *w, const struct capy_model_config *c);

/* The widest activation row a step's scratch must hold (floats): the streams, the widest
 * projection, the router's logits, the experts' gate_up. */
uint64_t capy_widest_row(const struct capy_model_config *c);

/* RoPE: the rotated dims of a head (head_dim * partial_rotary_factor), and their inverse
 * frequencies inv_freq[i] = 1 / theta^(2i / rot), i < rot / 2. */
uint64_t capy_rope_dims(const struct capy_model_config *c);
void capy_rope_inv_freq(const struct capy_model_config *c, float *out);

/* Row `row` (below pl->rows) of a PLE n-gram table, its pl->hd values widened to fp32. */
void capy_ple_row(const struct capy_ple_w *pl, uint64_t row, float *out);

/* Reads one byte of every 4 KiB page of each PLE n-gram table, so the mapped artifact's
 * pages are in this process's page table before a step reads its rows: a decode row's rows
 * otherwise land on pages never touched, one page fault each (bench/ple-fault-bench: a
 * token's 64 rows of four Flash-Next tables 240-730 us untouched, 40-58 us touched). The
 * tables become resident in the page cache (which the kernel may still reclaim: a reclaimed
 * page faults again, nothing fails). Returns the pages read. */
uint64_t capy_weights_touch_ple(const struct capy_weights *w, const struct capy_model_config *c);

/* PLE: the table row of every n-gram head (orders 2..ngram_size, heads_per_ngram each) for
 * the token at index p of hist, where hist[0 .. p] are the token ids up to it (the
 * sequence's saved context first): the n-grams ending at it, not crossing an EOS, padded
 * with EOS at the start, hashed per head with the layer's multipliers modulo the head's
 * vocabulary, plus the head's offset into the table. */
void capy_ple_ngram_rows(const struct capy_model_config *c, const struct capy_ple_w *pl, const int32_t *hist,
			 uint64_t p, uint64_t *out);

#endif
