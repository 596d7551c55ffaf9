/* tok-model.c - the BPE model from tokenizer.json (models/bpe/serialization.rs, model.rs), the
 * ByteLevel alphabet, and the per-id tables.
 *
 * A repeated vocabulary key keeps its last id and a repeated merge its last rank, as HF's hash
 * maps do; merges come as "a b" strings (a "#version" line skipped) or ["a", "b"] pairs.
 */
#include "tokenizer-impl.h"
#include "../util/json.h"

/* --- model ---------------------------------------------------------------------------------- */

static int load_vocab(struct capy_tokenizer *tok, const cJSON *vocab, struct tok_vocab_entry **out,
		      size_t *n_out, struct capy_err *err)
{
	const cJSON *it;
	size_t n = 0, count = 0;
	struct tok_vocab_entry *v;

	if (!cJSON_IsObject(vocab))
		return capy_err_set(err, CAPY_EFORMAT, TOK_WHAT ": model.vocab is not an object");
	cJSON_ArrayForEach(it, vocab)
		count++;
	v = malloc((count ? count : 1) * sizeof(*v));
	if (!v || tok_strmap_init(&tok->vocab, count, &tok->pool) < 0) {
		free(v);
		return tok_oom(err);
	}
	cJSON_ArrayForEach(it, vocab) {
		uint64_t id = 0;
		size_t len;
		if (tok_utf8_valid_prefix(it->string, strlen(it->string)) != strlen(it->string)) {
			free(v);
			return capy_err_set(err, CAPY_EFORMAT,
					    TOK_WHAT ": model.vocab key #%zu is not valid UTF-8", n);
		}
		if (capy_json_u64(it, &id) < 0 || id > TOK_MAX_ID) {
			free(v);
			return capy_err_set(err, id > TOK_MAX_ID ? CAPY_EUNSUPPORTED : CAPY_EFORMAT,
					    TOK_WHAT ": model.vocab['%.100s']: id is not an integer in "
					    "[0, %d]", it->string, TOK_MAX_ID);
		}
		len = strlen(it->string);
		if (tok_pool_add(tok, it->string, len, &v[n].off) < 0 ||
		    tok_strmap_put(&tok->vocab, v[n].off, len, (int32_t)id) < 0) {
			free(v);
			return tok_oom(err);
		}
		v[n].len = (uint32_t)len;
		v[n].id = (int32_t)id;
		n++;
	}
	*out = v;
	*n_out = n;
	return 0;
}

/* One merge: "a b" (exactly one space) or ["a", "b"]. */
static int merge_parts(const cJSON *m, bool legacy, size_t idx, const char **a, size_t *alen,
		       const char **b, size_t *blen, struct capy_err *err)
{
	char where[64];

	snprintf(where, sizeof(where), "model.merges[%zu]", idx);
	if (legacy) {
		const char *s, *sp;
		if (tok_json_string(m, where, &s, err) < 0)
			return CAPY_EFORMAT;
		sp = strchr(s, ' ');
		if (!sp || strchr(sp + 1, ' '))
			return capy_err_set(err, CAPY_EFORMAT,
					    TOK_WHAT ": %s: '%.100s' is not two tokens separated by one "
					    "space", where, s);
		*a = s;
		*alen = (size_t)(sp - s);
		*b = sp + 1;
		*blen = strlen(sp + 1);
		return 0;
	}
	if (!cJSON_IsArray(m) || cJSON_GetArraySize(m) != 2)
		return capy_err_set(err, CAPY_EFORMAT, TOK_WHAT ": %s is not a pair of strings", where);
	if (tok_json_string(cJSON_GetArrayItem(m, 0), where, a, err) < 0 ||
	    tok_json_string(cJSON_GetArrayItem(m, 1), where, b, err) < 0)
		return CAPY_EFORMAT;
	*alen = strlen(*a);
	*blen = strlen(*b);
	return 0;
}

static int load_merges(struct capy_tokenizer *tok, const cJSON *merges, struct capy_err *err)
{
	const cJSON *m;
	size_t count = 0, idx = 0;
	uint32_t rank = 0;
	bool legacy;
	struct tok_buf joined = { 0 };
	int rc = 0;

	if (!cJSON_IsArray(merges))
		return capy_err_set(err, CAPY_EFORMAT, TOK_WHAT ": model.merges is not a list");
	legacy = merges->child && cJSON_IsString(merges->child);
	cJSON_ArrayForEach(m, merges)
		count++;
	if (tok_mergemap_init(&tok->merges, count) < 0)
		return tok_oom(err);
	cJSON_ArrayForEach(m, merges) {
		const char *a = NULL, *b = NULL;
		size_t alen = 0, blen = 0, plen = tok->subword_prefix_len;
		int32_t ida, idb, idn;

		if (legacy && cJSON_IsString(m) && !strncmp(m->valuestring, "#version", 8)) {
			idx++;
			continue;
		}
		if ((rc = merge_parts(m, legacy, idx, &a, &alen, &b, &blen, err)) < 0)
			break;
		ida = tok_strmap_get(&tok->vocab, a, alen);
		idb = tok_strmap_get(&tok->vocab, b, blen);
		if (ida < 0 || idb < 0) {
			rc = capy_err_set(err, CAPY_EFORMAT,
					  TOK_WHAT ": model.merges[%zu]: '%.*s' is not in the vocabulary",
					  idx, (int)CAPY_MIN(ida < 0 ? alen : blen, 100),
					  ida < 0 ? a : b);
			break;
		}
		if (blen < plen) {
			rc = capy_err_set(err, CAPY_EFORMAT,
					  TOK_WHAT ": model.merges[%zu]: '%.*s' is shorter than the "
					  "continuing_subword_prefix", idx, (int)CAPY_MIN(blen, 100), b);
			break;
		}
		joined.len = 0;
		if (tok_buf_add(&joined, a, alen) < 0 || tok_buf_add(&joined, b + plen, blen - plen) < 0) {
			rc = tok_oom(err);
			break;
		}
		idn = tok_strmap_get(&tok->vocab, joined.p, joined.len);
		if (idn < 0) {
			rc = capy_err_set(err, CAPY_EFORMAT,
					  TOK_WHAT ": model.merges[%zu]: '%.*s' is not in the vocabulary",
					  idx, (int)CAPY_MIN(joined.len, 100), joined.p);
			break;
		}
		if (tok_mergemap_put(&tok->merges, ida, idb, rank++, idn) < 0) {
			rc = tok_oom(err);
			break;
		}
		idx++;
	}
	tok_buf_release(&joined);
	return rc;
}

int tok_load_model(struct capy_tokenizer *tok, const cJSON *model, struct tok_vocab_entry **vocab,
		   size_t *n_vocab, struct capy_err *err)
{
	const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
	const char *type;
	int rc;

	if (!cJSON_IsObject(model))
		return capy_err_set(err, CAPY_EFORMAT, TOK_WHAT ": model is missing or not an object");
	type = tok_json_type(model);
	if (type && strcmp(type, "BPE"))
		return capy_err_set(err, CAPY_EUNSUPPORTED,
				    TOK_WHAT ": model type '%s' is not supported (only BPE)", type);
	if (dropout && !cJSON_IsNull(dropout)) {
		if (!cJSON_IsNumber(dropout) || !(dropout->valuedouble >= 0) ||
		    dropout->valuedouble > 1)
			return capy_err_set(err, CAPY_EFORMAT,
					    TOK_WHAT ": model.dropout must be between 0 and 1");
		if (dropout->valuedouble > 0)
			return capy_err_set(err, CAPY_EUNSUPPORTED,
					    TOK_WHAT ": model.dropout > 0 (random merges) is not supported");
	}
	if ((rc = tok_json_opt_string(model, "unk_token", "model", &tok->unk_token, err)) < 0 ||
	    (rc = tok_json_opt_string(model, "continuing_subword_prefix", "model",
				      &tok->subword_prefix, err)) < 0 ||
	    (rc = tok_json_opt_string(model, "end_of_word_suffix", "model", &tok->word_suffix,
				      err)) < 0 ||
	    (rc = tok_json_bool(model, "fuse_unk", "model", &tok->fuse_unk, err)) < 0 ||
	    (rc = tok_json_bool(model, "byte_fallback", "model", &tok->byte_fallback, err)) < 0 ||
	    (rc = tok_json_bool(model, "ignore_merges", "model", &tok->ignore_merges, err)) < 0)
		return rc;
	/* an empty prefix or suffix changes nothing (Qwen's files have "") */
	tok->subword_prefix_len = tok->subword_prefix ? strlen(tok->subword_prefix) : 0;
	tok->word_suffix_len = tok->word_suffix ? strlen(tok->word_suffix) : 0;
	if (!tok->subword_prefix_len) {
		free(tok->subword_prefix);
		tok->subword_prefix = NULL;
	}
	if (!tok->word_suffix_len) {
		free(tok->word_suffix);
		tok->word_suffix = NULL;
	}
	if (!cJSON_GetObjectItemCaseSensitive(model, "vocab") ||
	    !cJSON_GetObjectItemCaseSensitive(model, "merges"))
		return capy_err_set(err, CAPY_EFORMAT, TOK_WHAT ": model: missing vocab/merges");
	if ((rc = load_vocab(tok, cJSON_GetObjectItemCaseSensitive(model, "vocab"), vocab, n_vocab,
			     err)) < 0)
		return rc;
	if ((rc = load_merges(tok, cJSON_GetObjectItemCaseSensitive(model, "merges"), err)) < 0)
		return rc;
	tok->unk_id = -1;
	if (tok->unk_token) {
		int32_t id = tok_strmap_get(&tok->vocab, tok->unk_token, strlen(tok->unk_token));
		tok->unk_id = id >= 0 ? id : -2;
	}
	for (int b = 0; b < 256; b++) {
		char name[8];
		snprintf(name, sizeof(name), "<0x%02X>", b);
		tok->byte_fallback_id[b] = tok_strmap_get(&tok->vocab, name, strlen(name));
	}
	return 0;
}
/* --- ByteLevel alphabet ---------------------------------------------------------------------- */

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the others for
 * U+0100 onwards in byte order. */
static uint32_t byte_char(int b)
{
	int n = 0;

	if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))
		return (uint32_t)b;
	for (int i = 0; i < b; i++)
		if (!((i >= 0x21 && i <= 0x7E) || (i >= 0xA1 && i <= 0xAC) || (i >= 0xAE && i <= 0xFF)))
			n++;
	return 256 + (uint32_t)n;
}

void tok_setup_byte_level(struct capy_tokenizer *tok)
{
	tok->bl_fast = !tok->subword_prefix && !tok->word_suffix;
	for (int b = 0; b < 256; b++) {
		tok->bl_char_len[b] = (uint8_t)tok_utf8_encode(byte_char(b), tok->bl_char[b]);
		tok->bl_id[b] = tok_strmap_get(&tok->vocab, tok->bl_char[b], tok->bl_char_len[b]);
		if (tok->bl_id[b] < 0)
			tok->bl_fast = false;
	}
}

/* ByteLevel decoding of one token: every character back to its byte, or, if a character is not
 * in the alphabet, the token's own bytes. char_byte maps U+0000..U+0143 to a byte or -1. */
static int bytelevel_decode(const struct capy_tokenizer *tok, const int16_t *char_byte,
			    uint32_t off, uint32_t len, struct tok_buf *b)
{
	b->len = 0;
	for (uint32_t i = 0; i < len;) {
		uint32_t cp;
		int n = tok_utf8_next(tok->pool + off + i, &cp);
		int byte = cp < 0x144 ? char_byte[cp] : -1;
		if (byte < 0) {
			b->len = 0;
			return tok_buf_add(b, tok->pool + off, len);
		}
		char c = (char)byte;
		if (tok_buf_add(b, &c, 1) < 0)
			return CAPY_ENOMEM;
		i += (uint32_t)n;
	}
	return 0;
}
/* --- per-id tables ---------------------------------------------------------------------------- */

int tok_build_ids(struct capy_tokenizer *tok, const struct tok_vocab_entry *v, size_t n_v,
		  const struct tok_added_def *a, size_t n_a, struct capy_err *err)
{
	int32_t max = -1;
	struct tok_buf b = { 0 };
	int16_t char_byte[0x144];
	int rc = 0;

	for (int c = 0; c < 0x144; c++)
		char_byte[c] = -1;
	for (int k = 0; k < 256; k++)
		char_byte[byte_char(k)] = (int16_t)k;

	for (size_t i = 0; i < n_v; i++)
		max = CAPY_MAX(max, v[i].id);
	for (size_t i = 0; i < n_a; i++)
		max = CAPY_MAX(max, a[i].id);
	tok->n_ids = max + 1;
	tok->piece_off = calloc((size_t)tok->n_ids + 1, sizeof(uint32_t));
	tok->piece_len = calloc((size_t)tok->n_ids + 1, sizeof(uint32_t));
	tok->bytes_off = calloc((size_t)tok->n_ids + 1, sizeof(uint32_t));
	tok->bytes_len = calloc((size_t)tok->n_ids + 1, sizeof(uint32_t));
	tok->id_flags = calloc((size_t)tok->n_ids + 1, 1);
	if (!tok->piece_off || !tok->piece_len || !tok->bytes_off || !tok->bytes_len || !tok->id_flags)
		return tok_oom(err);
	/* vocab_r is built from the final map: an id whose key was redefined has no piece */
	for (size_t i = 0; i < n_v; i++) {
		if (tok_strmap_get(&tok->vocab, tok->pool + v[i].off, v[i].len) != v[i].id)
			continue;
		tok->piece_off[v[i].id] = v[i].off;
		tok->piece_len[v[i].id] = v[i].len;
		tok->id_flags[v[i].id] |= TOK_ID_HAS_PIECE;
	}
	/* added tokens take precedence for id -> token; the last definition sets the flags */
	for (size_t i = 0; i < n_a; i++) {
		int32_t id = a[i].id;
		uint8_t *f;
		if (id < 0)
			continue;
		f = &tok->id_flags[id];
		*f = (uint8_t)((*f & TOK_ID_SPECIAL) | TOK_ID_ADDED | TOK_ID_HAS_PIECE);
		if (a[i].special)
			*f |= TOK_ID_SPECIAL;
		if (a[i].lstrip)
			*f |= TOK_ID_LSTRIP;
		if (a[i].rstrip)
			*f |= TOK_ID_RSTRIP;
		if (a[i].single_word)
			*f |= TOK_ID_SINGLE_WORD;
		rc = tok_pool_add(tok, a[i].content, strlen(a[i].content), &tok->piece_off[id]);
		if (rc < 0)
			return tok_oom(err);
		tok->piece_len[id] = (uint32_t)strlen(a[i].content);
	}
	/* special is a property of the content (HF's special_tokens_set), for any id with it */
	for (size_t i = 0; i < n_a; i++) {
		if (!a[i].special || !*a[i].content)
			continue;
		int32_t id = tok_strmap_get(&tok->added, a[i].content, strlen(a[i].content));
		if (id >= 0)
			tok->id_flags[id] |= TOK_ID_SPECIAL;
	}
	tok->vocab_size = tok->vocab.n;
	for (size_t i = 0; i <= tok->added.mask; i++) {
		const struct tok_strmap_entry *e = &tok->added.slots[i];
		if (e->id >= 0 && tok_strmap_get(&tok->vocab, tok->pool + e->off, e->len) < 0)
			tok->vocab_size++;
	}
	for (int32_t id = 0; id < tok->n_ids; id++) {
		if (!(tok->id_flags[id] & TOK_ID_HAS_PIECE))
			continue;
		uint32_t off = tok->piece_off[id], len = tok->piece_len[id];
		if (tok->decoder == TOK_DEC_BYTELEVEL) {
			if (bytelevel_decode(tok, char_byte, off, len, &b) < 0 ||
			    tok_pool_add(tok, b.p ? b.p : "", b.len, &tok->bytes_off[id]) < 0) {
				rc = tok_oom(err);
				break;
			}
			tok->bytes_len[id] = (uint32_t)b.len;
		} else {
			tok->bytes_off[id] = off;
			tok->bytes_len[id] = len;
		}
	}
	tok_buf_release(&b);
	return rc;
}
