/* tok-load.c - capy_tokenizer_new: read tokenizer.json and build the tokenizer.
 *
 * Field by field this follows HF's deserializers (tokenizer/serialization.rs and the
 * normalizer, pre-tokenizer and decoder ones): unknown keys are ignored, absent optional fields
 * take HF's defaults. The model is read by tok-model.c, added tokens by tok-added.c.
 */
#include "tokenizer-impl.h"
#include "../util/json.h"

/* GPT-2's pre-tokenizer regex, which HF's ByteLevel uses when use_regex is true. */
static const char GPT2_REGEX[] =
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* --- helpers for tok-*.c ------------------------------------------------------------------- */

int tok_pool_add(struct capy_tokenizer *tok, const char *s, size_t len, uint32_t *off)
{
	if (tok->pool_len + len + 1 > UINT32_MAX)
		return CAPY_ENOMEM;
	if (tok->pool_len + len + 1 > tok->pool_cap) {
		size_t cap = tok->pool_cap ? tok->pool_cap : 1 << 16;
		while (cap < tok->pool_len + len + 1)
			cap *= 2;
		char *p = realloc(tok->pool, cap);
		if (!p)
			return CAPY_ENOMEM;
		tok->pool = p;
		tok->pool_cap = cap;
	}
	if (len)
		memcpy(tok->pool + tok->pool_len, s, len);
	tok->pool[tok->pool_len + len] = '\0';
	*off = (uint32_t)tok->pool_len;
	tok->pool_len += len + 1;
	return 0;
}

int tok_oom(struct capy_err *err)
{
	return capy_err_set(err, CAPY_ENOMEM, "out of memory");
}

/* A JSON string that must be valid UTF-8 (serde_json refuses lone surrogates; cJSON keeps them). */
int tok_json_string(const cJSON *it, const char *path, const char **out, struct capy_err *err)
{
	if (!cJSON_IsString(it) || !it->valuestring)
		return capy_err_set(err, CAPY_EFORMAT, TOK_WHAT ": %s is not a string", path);
	size_t len = strlen(it->valuestring);
	if (tok_utf8_valid_prefix(it->valuestring, len) != len)
		return capy_err_set(err, CAPY_EFORMAT, TOK_WHAT ": %s is not valid UTF-8", path);
	*out = it->valuestring;
	return 0;
}

/* An optional field: absent or null leaves *out alone. */
int tok_json_bool(const cJSON *obj, const char *key, const char *path, bool *out,
		  struct capy_err *err)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);

	if (!it || cJSON_IsNull(it))
		return 0;
	if (!cJSON_IsBool(it))
		return capy_err_set(err, CAPY_EFORMAT, TOK_WHAT ": %s.%s is not a boolean", path, key);
	*out = cJSON_IsTrue(it);
	return 0;
}

int tok_json_opt_string(const cJSON *obj, const char *key, const char *path, char **out,
			struct capy_err *err)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
	const char *s;
	char where[160];

	if (!it || cJSON_IsNull(it))
		return 0;
	snprintf(where, sizeof(where), "%s.%s", path, key);
	if (tok_json_string(it, where, &s, err) < 0)
		return CAPY_EFORMAT;
	*out = strdup(s);
	return *out ? 0 : tok_oom(err);
}

const char *tok_json_type(const cJSON *obj)
{
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(obj, "type");

	return cJSON_IsString(t) ? t->valuestring : NULL;
}

/* --- normalizer ------------------------------------------------------------------------------ */

static int load_normalizer(struct capy_tokenizer *tok, const cJSON *n, const char *path,
			   struct capy_err *err)
{
	static const struct { const char *name; enum tok_norm_kind kind; } forms[] = {
		{ "NFC", TOK_NFC }, { "NFD", TOK_NFD }, { "NFKC", TOK_NFKC }, { "NFKD", TOK_NFKD },
	};
	const char *type;

	if (!n || cJSON_IsNull(n))
		return 0;
	if (!cJSON_IsObject(n) || !(type = tok_json_type(n)))
		return capy_err_set(err, CAPY_EFORMAT, TOK_WHAT ": %s has no type", path);
	if (!strcmp(type, "Sequence")) {
		const cJSON *list = cJSON_GetObjectItemCaseSensitive(n, "normalizers"), *it;
		char where[160];
		int i = 0, rc;
		if (!cJSON_IsArray(list))
			return capy_err_set(err, CAPY_EFORMAT, TOK_WHAT ": %s.normalizers is not a list",
					    path);
		cJSON_ArrayForEach(it, list) {
			snprintf(where, sizeof(where), "%s.normalizers[%d]", path, i++);
			if ((rc = load_normalizer(tok, it, where, err)) < 0)
				return rc;
		}
		return 0;
	}
	for (size_t i = 0; i < ARRAY_SIZE(forms); i++) {
		if (strcmp(type, forms[i].name))
			continue;
		enum tok_norm_kind *p = realloc(tok->norms, (tok->n_norms + 1) * sizeof(*p));
		if (!p)
			return tok_oom(err);
		tok->norms = p;
		tok->norms[tok->n_norms++] = forms[i].kind;
		return 0;
	}
	return capy_err_set(err, CAPY_EUNSUPPORTED, TOK_WHAT ": %s: normalizer type '%s' is not supported",
			    path, type);
}

/* --- pre-tokenizer --------------------------------------------------------------------------- */

static int add_pretok(struct capy_tokenizer *tok, struct tok_pretok *pt, struct capy_err *err)
{
	struct tok_pretok *p = realloc(tok->pretoks, (tok->n_pretoks + 1) * sizeof(*p));
	uint32_t caps;

	if (!p) {
		pcre2_code_free(pt->re);
		return tok_oom(err);
	}
	tok->pretoks = p;
	tok->pretoks[tok->n_pretoks++] = *pt;
	if (pt->re && !pcre2_pattern_info(pt->re, PCRE2_INFO_CAPTURECOUNT, &caps) &&
	    caps > tok->max_captures)
		tok->max_captures = caps;
	return 0;
}

static int load_split(struct capy_tokenizer *tok, const cJSON *n, const char *path,
		      struct capy_err *err)
{
	static const char *const behaviors[] = {
		[TOK_SPLIT_REMOVED] = "Removed",
		[TOK_SPLIT_ISOLATED] = "Isolated",
		[TOK_SPLIT_MERGED_PREV] = "MergedWithPrevious",
		[TOK_SPLIT_MERGED_NEXT] = "MergedWithNext",
		[TOK_SPLIT_CONTIGUOUS] = "Contiguous",
	};
	const cJSON *pat = cJSON_GetObjectItemCaseSensitive(n, "pattern");
	const cJSON *beh = cJSON_GetObjectItemCaseSensitive(n, "behavior");
	const cJSON *inv = cJSON_GetObjectItemCaseSensitive(n, "invert");
	const cJSON *re = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
	const cJSON *str = cJSON_GetObjectItemCaseSensitive(pat, "String");
	struct tok_pretok pt = { .kind = TOK_PRE_SPLIT };
	char where[200];
	const char *p;
	size_t i;
	int rc;

	if (!cJSON_IsObject(pat) || (!re == !str))
		return capy_err_set(err, CAPY_EFORMAT,
				    TOK_WHAT ": %s.pattern must be {\"Regex\": ...} or {\"String\": ...}",
				    path);
	snprintf(where, sizeof(where), "%s.pattern.%s", path, re ? "Regex" : "String");
	if (tok_json_string(re ? re : str, where, &p, err) < 0)
		return CAPY_EFORMAT;
	if (!cJSON_IsString(beh))
		return capy_err_set(err, CAPY_EFORMAT, TOK_WHAT ": %s.behavior is not a string", path);
	for (i = 0; i < ARRAY_SIZE(behaviors); i++)
		if (!strcmp(beh->valuestring, behaviors[i]))
			break;
	if (i == ARRAY_SIZE(behaviors))
		return capy_err_set(err, CAPY_EFORMAT, TOK_WHAT ": %s.behavior '%s' is not a split behavior",
				    path, beh->valuestring);
	pt.behavior = (enum tok_split_behavior)i;
	if (!cJSON_IsBool(inv))
		return capy_err_set(err, CAPY_EFORMAT, TOK_WHAT ": %s.invert is not a boolean", path);
	pt.invert = cJSON_IsTrue(inv);
	if ((rc = tok_regex_compile(p, strlen(p), !re, &pt.re, TOK_WHAT, err)) < 0)
		return capy_err_prefix(err, "%s", path);
	return add_pretok(tok, &pt, err);
}

static int load_pretok(struct capy_tokenizer *tok, const cJSON *n, const char *path,
		       struct capy_err *err)
{
	const char *type;
	int rc;

	if (!n || cJSON_IsNull(n))
		return 0;
	if (!cJSON_IsObject(n) || !(type = tok_json_type(n)))
		return capy_err_set(err, CAPY_EFORMAT, TOK_WHAT ": %s has no type", path);
	if (tok->byte_level)
		return capy_err_set(err, CAPY_EUNSUPPORTED,
				    TOK_WHAT ": %s: a pre-tokenizer after ByteLevel is not supported", path);
	if (!strcmp(type, "Sequence")) {
		const cJSON *list = cJSON_GetObjectItemCaseSensitive(n, "pretokenizers"), *it;
		char where[160];
		int i = 0;
		if (!cJSON_IsArray(list))
			return capy_err_set(err, CAPY_EFORMAT,
					    TOK_WHAT ": %s.pretokenizers is not a list", path);
		cJSON_ArrayForEach(it, list) {
			snprintf(where, sizeof(where), "%s.pretokenizers[%d]", path, i++);
			if ((rc = load_pretok(tok, it, where, err)) < 0)
				return rc;
		}
		return 0;
	}
	if (!strcmp(type, "Split"))
		return load_split(tok, n, path, err);
	if (!strcmp(type, "ByteLevel")) {
		struct tok_pretok pt = { .kind = TOK_PRE_BYTELEVEL };
		bool use_regex = true;
		if (tok_json_bool(n, "add_prefix_space", path, &pt.add_prefix_space, err) < 0 ||
		    tok_json_bool(n, "use_regex", path, &use_regex, err) < 0)
			return CAPY_EFORMAT;
		if (use_regex && (rc = tok_regex_compile(GPT2_REGEX, strlen(GPT2_REGEX), false,
							 &pt.re, TOK_WHAT, err)) < 0)
			return rc;
		tok->byte_level = true;
		return add_pretok(tok, &pt, err);
	}
	return capy_err_set(err, CAPY_EUNSUPPORTED,
			    TOK_WHAT ": %s: pre-tokenizer type '%s' is not supported", path, type);
}
static int load_decoder(struct capy_tokenizer *tok, const cJSON *d, struct capy_err *err)
{
	const char *type;

	tok->decoder = TOK_DEC_NONE;
	if (!d || cJSON_IsNull(d))
		return 0;
	if (!cJSON_IsObject(d) || !(type = tok_json_type(d)))
		return capy_err_set(err, CAPY_EFORMAT, TOK_WHAT ": decoder has no type");
	if (!strcmp(type, "ByteLevel")) {
		tok->decoder = TOK_DEC_BYTELEVEL;
		return 0;
	}
	return capy_err_set(err, CAPY_EUNSUPPORTED, TOK_WHAT ": decoder type '%s' is not supported", type);
}

int capy_tokenizer_new(struct capy_tokenizer **out, const char *json, size_t len,
		       struct capy_err *err)
{
	struct capy_tokenizer *tok;
	struct tok_vocab_entry *vocab = NULL;
	struct tok_added_def *added = NULL;
	size_t n_vocab = 0, n_added = 0, valid;
	const cJSON *version;
	cJSON *root = NULL;
	int rc;

	*out = NULL;
	/* HF reads the file into a Rust String */
	valid = tok_utf8_valid_prefix(json, len);
	if (valid != len)
		return capy_err_set(err, CAPY_EFORMAT, TOK_WHAT ": not valid UTF-8 at byte offset %zu",
				    valid);
	if ((rc = capy_json_parse(json, len, TOK_WHAT, &root, err)) < 0)
		return rc;
	tok = calloc(1, sizeof(*tok));
	if (tok && !(tok->scratch = tok_scratch_pool_new())) {
		free(tok);
		tok = NULL;
	}
	if (!tok) {
		cJSON_Delete(root);
		return tok_oom(err);
	}
	rc = CAPY_EFORMAT;
	if (!cJSON_IsObject(root)) {
		capy_err_set(err, CAPY_EFORMAT, TOK_WHAT ": not a JSON object");
		goto fail;
	}
	version = cJSON_GetObjectItemCaseSensitive(root, "version");
	if (version && !(cJSON_IsString(version) && !strcmp(version->valuestring, "1.0"))) {
		capy_err_set(err, CAPY_EFORMAT, TOK_WHAT ": unknown tokenizer version");
		goto fail;
	}
	if ((rc = tok_load_model(tok, cJSON_GetObjectItemCaseSensitive(root, "model"), &vocab,
				 &n_vocab, err)) < 0 ||
	    (rc = load_normalizer(tok, cJSON_GetObjectItemCaseSensitive(root, "normalizer"),
				  "normalizer", err)) < 0 ||
	    (rc = load_pretok(tok, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"),
			      "pre_tokenizer", err)) < 0 ||
	    (rc = load_decoder(tok, cJSON_GetObjectItemCaseSensitive(root, "decoder"), err)) < 0 ||
	    (rc = tok_read_added(cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), &added,
				 &n_added, err)) < 0 ||
	    (rc = tok_build_added(tok, added, n_added, tok->vocab.n, err)) < 0 ||
	    (rc = tok_build_ids(tok, vocab, n_vocab, added, n_added, err)) < 0)
		goto fail;
	if (tok->byte_level)
		tok_setup_byte_level(tok);
	for (size_t i = 0; i < n_added; i++) {
		/* single_word tests the neighbours with Rust regex's \w (Unicode 16.0) */
		if (added[i].id >= 0 && added[i].single_word && !tok->word_char &&
		    (rc = tok_regex_compile_class("rust_w", &tok->word_char, TOK_WHAT, err)) < 0)
			goto fail;
	}
	/* the pool no longer moves: patterns can point into it */
	tok_matcher_finish(tok, &tok->raw_matcher);
	tok_matcher_finish(tok, &tok->norm_matcher);
	free(vocab);
	free(added);
	cJSON_Delete(root);
	*out = tok;
	return 0;
fail:
	free(vocab);
	free(added);
	cJSON_Delete(root);
	capy_tokenizer_free(tok);
	return rc;
}

void capy_tokenizer_free(struct capy_tokenizer *tok)
{
	if (!tok)
		return;
	for (size_t i = 0; i < tok->n_pretoks; i++)
		pcre2_code_free(tok->pretoks[i].re);
	free(tok->pretoks);
	pcre2_code_free(tok->word_char);
	tok_matcher_release(&tok->raw_matcher);
	tok_matcher_release(&tok->norm_matcher);
	tok_strmap_release(&tok->vocab);
	tok_strmap_release(&tok->added);
	tok_mergemap_release(&tok->merges);
	free(tok->norms);
	free(tok->unk_token);
	free(tok->subword_prefix);
	free(tok->word_suffix);
	free(tok->piece_off);
	free(tok->piece_len);
	free(tok->bytes_off);
	free(tok->bytes_len);
	free(tok->id_flags);
	free(tok->pool);
	tok_scratch_pool_free(tok->scratch);
	free(tok);
}
