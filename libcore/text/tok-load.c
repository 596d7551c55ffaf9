/* tok-load.c - capy_tokenizer_new: read tokenizer.json and build the tables.
 *
 * Field by field this follows HF's deserializers (tokenizer/serialization.rs,
 * models/bpe/serialization.rs and model.rs, added_vocabulary.rs): unknown top-level keys are
 * ignored, a repeated vocabulary key keeps its last id, a repeated merge its last rank, and
 * added-token ids are assigned the way AddedVocabulary::add_tokens does (the vocabulary's id if
 * the content is in it, else the next id after the vocabulary) rather than read from "id".
 */
#include "tokenizer-impl.h"
#include "../util/json.h"

#define WHAT "tokenizer.json"

/* GPT-2's pre-tokenizer regex, which HF's ByteLevel uses when use_regex is true. */
static const char GPT2_REGEX[] =
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";


static int tok_pool_add(struct capy_tokenizer *tok, const char *s, size_t len, uint32_t *off)
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

static int oom(struct capy_err *err)
{
	return capy_err_set(err, CAPY_ENOMEM, "out of memory");
}

/* A JSON string that must be valid UTF-8 (serde_json refuses lone surrogates; cJSON keeps them). */
static int get_string(const cJSON *it, const char *path, const char **out, struct capy_err *err)
{
	if (!cJSON_IsString(it) || !it->valuestring)
		return capy_err_set(err, CAPY_EFORMAT, WHAT ": %s is not a string", path);
	size_t len = strlen(it->valuestring);
	if (tok_utf8_valid_prefix(it->valuestring, len) != len)
		return capy_err_set(err, CAPY_EFORMAT, WHAT ": %s is not valid UTF-8", path);
	*out = it->valuestring;
	return 0;
}

/* An optional field: absent or null leaves *out alone. */
static int opt_bool(const cJSON *obj, const char *key, const char *path, bool *out,
		    struct capy_err *err)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);

	if (!it || cJSON_IsNull(it))
		return 0;
	if (!cJSON_IsBool(it))
		return capy_err_set(err, CAPY_EFORMAT, WHAT ": %s.%s is not a boolean", path, key);
	*out = cJSON_IsTrue(it);
	return 0;
}

static int opt_string(const cJSON *obj, const char *key, const char *path, char **out,
		      struct capy_err *err)
{
	const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
	const char *s;
	char where[160];

	if (!it || cJSON_IsNull(it))
		return 0;
	snprintf(where, sizeof(where), "%s.%s", path, key);
	if (get_string(it, where, &s, err) < 0)
		return CAPY_EFORMAT;
	*out = strdup(s);
	return *out ? 0 : oom(err);
}

static const char *type_of(const cJSON *obj)
{
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(obj, "type");

	return cJSON_IsString(t) ? t->valuestring : NULL;
}

/* --- normalizer -------------------------------------------------------------------------------- */

static int load_normalizer(struct capy_tokenizer *tok, const cJSON *n, const char *path,
			   struct capy_err *err)
{
	static const struct { const char *name; enum tok_norm_kind kind; } forms[] = {
		{ "NFC", TOK_NFC }, { "NFD", TOK_NFD }, { "NFKC", TOK_NFKC }, { "NFKD", TOK_NFKD },
	};
	const char *type;

	if (!n || cJSON_IsNull(n))
		return 0;
	if (!cJSON_IsObject(n) || !(type = type_of(n)))
		return capy_err_set(err, CAPY_EFORMAT, WHAT ": %s has no type", path);
	if (!strcmp(type, "Sequence")) {
		const cJSON *list = cJSON_GetObjectItemCaseSensitive(n, "normalizers"), *it;
		char where[160];
		int i = 0, rc;
		if (!cJSON_IsArray(list))
			return capy_err_set(err, CAPY_EFORMAT, WHAT ": %s.normalizers is not a list",
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
			return oom(err);
		tok->norms = p;
		tok->norms[tok->n_norms++] = forms[i].kind;
		return 0;
	}
	return capy_err_set(err, CAPY_EUNSUPPORTED, WHAT ": %s: normalizer type '%s' is not supported",
			    path, type);
}

/* --- pre-tokenizer ------------------------------------------------------------------------------ */

static int add_pretok(struct capy_tokenizer *tok, struct tok_pretok *pt, struct capy_err *err)
{
	struct tok_pretok *p = realloc(tok->pretoks, (tok->n_pretoks + 1) * sizeof(*p));
	uint32_t caps;

	if (!p) {
		pcre2_code_free(pt->re);
		return oom(err);
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
				    WHAT ": %s.pattern must be {\"Regex\": ...} or {\"String\": ...}",
				    path);
	snprintf(where, sizeof(where), "%s.pattern.%s", path, re ? "Regex" : "String");
	if (get_string(re ? re : str, where, &p, err) < 0)
		return CAPY_EFORMAT;
	if (!cJSON_IsString(beh))
		return capy_err_set(err, CAPY_EFORMAT, WHAT ": %s.behavior is not a string", path);
	for (i = 0; i < ARRAY_SIZE(behaviors); i++)
		if (!strcmp(beh->valuestring, behaviors[i]))
			break;
	if (i == ARRAY_SIZE(behaviors))
		return capy_err_set(err, CAPY_EFORMAT, WHAT ": %s.behavior '%s' is not a split behavior",
				    path, beh->valuestring);
	pt.behavior = (enum tok_split_behavior)i;
	if (!cJSON_IsBool(inv))
		return capy_err_set(err, CAPY_EFORMAT, WHAT ": %s.invert is not a boolean", path);
	pt.invert = cJSON_IsTrue(inv);
	if ((rc = tok_regex_compile(p, strlen(p), !re, &pt.re, WHAT, err)) < 0)
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
	if (!cJSON_IsObject(n) || !(type = type_of(n)))
		return capy_err_set(err, CAPY_EFORMAT, WHAT ": %s has no type", path);
	if (tok->byte_level)
		return capy_err_set(err, CAPY_EUNSUPPORTED,
				    WHAT ": %s: a pre-tokenizer after ByteLevel is not supported", path);
	if (!strcmp(type, "Sequence")) {
		const cJSON *list = cJSON_GetObjectItemCaseSensitive(n, "pretokenizers"), *it;
		char where[160];
		int i = 0;
		if (!cJSON_IsArray(list))
			return capy_err_set(err, CAPY_EFORMAT,
					    WHAT ": %s.pretokenizers is not a list", path);
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
		if (opt_bool(n, "add_prefix_space", path, &pt.add_prefix_space, err) < 0 ||
		    opt_bool(n, "use_regex", path, &use_regex, err) < 0)
			return CAPY_EFORMAT;
		if (use_regex && (rc = tok_regex_compile(GPT2_REGEX, strlen(GPT2_REGEX), false,
							 &pt.re, WHAT, err)) < 0)
			return rc;
		tok->byte_level = true;
		return add_pretok(tok, &pt, err);
	}
	return capy_err_set(err, CAPY_EUNSUPPORTED,
			    WHAT ": %s: pre-tokenizer type '%s' is not supported", path, type);
}

/* --- model ---------------------------------------------------------------------------------- */

struct vocab_entry {
	uint32_t off, len;
	int32_t id;
};

static int load_vocab(struct capy_tokenizer *tok, const cJSON *vocab, struct vocab_entry **out,
		      size_t *n_out, struct capy_err *err)
{
	const cJSON *it;
	size_t n = 0, count = 0;
	struct vocab_entry *v;

	if (!cJSON_IsObject(vocab))
		return capy_err_set(err, CAPY_EFORMAT, WHAT ": model.vocab is not an object");
	cJSON_ArrayForEach(it, vocab)
		count++;
	v = malloc((count ? count : 1) * sizeof(*v));
	if (!v || tok_strmap_init(&tok->vocab, count, &tok->pool) < 0) {
		free(v);
		return oom(err);
	}
	cJSON_ArrayForEach(it, vocab) {
		uint64_t id = 0;
		size_t len;
		if (tok_utf8_valid_prefix(it->string, strlen(it->string)) != strlen(it->string)) {
			free(v);
			return capy_err_set(err, CAPY_EFORMAT,
					    WHAT ": model.vocab key #%zu is not valid UTF-8", n);
		}
		if (capy_json_u64(it, &id) < 0 || id > TOK_MAX_ID) {
			free(v);
			return capy_err_set(err, id > TOK_MAX_ID ? CAPY_EUNSUPPORTED : CAPY_EFORMAT,
					    WHAT ": model.vocab['%.100s']: id is not an integer in "
					    "[0, %d]", it->string, TOK_MAX_ID);
		}
		len = strlen(it->string);
		if (tok_pool_add(tok, it->string, len, &v[n].off) < 0 ||
		    tok_strmap_put(&tok->vocab, v[n].off, len, (int32_t)id) < 0) {
			free(v);
			return oom(err);
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
		if (get_string(m, where, &s, err) < 0)
			return CAPY_EFORMAT;
		sp = strchr(s, ' ');
		if (!sp || strchr(sp + 1, ' '))
			return capy_err_set(err, CAPY_EFORMAT,
					    WHAT ": %s: '%.100s' is not two tokens separated by one "
					    "space", where, s);
		*a = s;
		*alen = (size_t)(sp - s);
		*b = sp + 1;
		*blen = strlen(sp + 1);
		return 0;
	}
	if (!cJSON_IsArray(m) || cJSON_GetArraySize(m) != 2)
		return capy_err_set(err, CAPY_EFORMAT, WHAT ": %s is not a pair of strings", where);
	if (get_string(cJSON_GetArrayItem(m, 0), where, a, err) < 0 ||
	    get_string(cJSON_GetArrayItem(m, 1), where, b, err) < 0)
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
		return capy_err_set(err, CAPY_EFORMAT, WHAT ": model.merges is not a list");
	legacy = merges->child && cJSON_IsString(merges->child);
	cJSON_ArrayForEach(m, merges)
		count++;
	if (tok_mergemap_init(&tok->merges, count) < 0)
		return oom(err);
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
					  WHAT ": model.merges[%zu]: '%.*s' is not in the vocabulary",
					  idx, (int)CAPY_MIN(ida < 0 ? alen : blen, 100),
					  ida < 0 ? a : b);
			break;
		}
		if (blen < plen) {
			rc = capy_err_set(err, CAPY_EFORMAT,
					  WHAT ": model.merges[%zu]: '%.*s' is shorter than the "
					  "continuing_subword_prefix", idx, (int)CAPY_MIN(blen, 100), b);
			break;
		}
		joined.len = 0;
		if (tok_buf_add(&joined, a, alen) < 0 || tok_buf_add(&joined, b + plen, blen - plen) < 0) {
			rc = oom(err);
			break;
		}
		idn = tok_strmap_get(&tok->vocab, joined.p, joined.len);
		if (idn < 0) {
			rc = capy_err_set(err, CAPY_EFORMAT,
					  WHAT ": model.merges[%zu]: '%.*s' is not in the vocabulary",
					  idx, (int)CAPY_MIN(joined.len, 100), joined.p);
			break;
		}
		if (tok_mergemap_put(&tok->merges, ida, idb, rank++, idn) < 0) {
			rc = oom(err);
			break;
		}
		idx++;
	}
	tok_buf_release(&joined);
	return rc;
}

static int load_model(struct capy_tokenizer *tok, const cJSON *model, struct vocab_entry **vocab,
		      size_t *n_vocab, struct capy_err *err)
{
	const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
	const char *type;
	int rc;

	if (!cJSON_IsObject(model))
		return capy_err_set(err, CAPY_EFORMAT, WHAT ": model is missing or not an object");
	type = type_of(model);
	if (type && strcmp(type, "BPE"))
		return capy_err_set(err, CAPY_EUNSUPPORTED,
				    WHAT ": model type '%s' is not supported (only BPE)", type);
	if (dropout && !cJSON_IsNull(dropout)) {
		if (!cJSON_IsNumber(dropout) || !(dropout->valuedouble >= 0) ||
		    dropout->valuedouble > 1)
			return capy_err_set(err, CAPY_EFORMAT,
					    WHAT ": model.dropout must be between 0 and 1");
		if (dropout->valuedouble > 0)
			return capy_err_set(err, CAPY_EUNSUPPORTED,
					    WHAT ": model.dropout > 0 (random merges) is not supported");
	}
	if ((rc = opt_string(model, "unk_token", "model", &tok->unk_token, err)) < 0 ||
	    (rc = opt_string(model, "continuing_subword_prefix", "model", &tok->subword_prefix,
			     err)) < 0 ||
	    (rc = opt_string(model, "end_of_word_suffix", "model", &tok->word_suffix, err)) < 0 ||
	    (rc = opt_bool(model, "fuse_unk", "model", &tok->fuse_unk, err)) < 0 ||
	    (rc = opt_bool(model, "byte_fallback", "model", &tok->byte_fallback, err)) < 0 ||
	    (rc = opt_bool(model, "ignore_merges", "model", &tok->ignore_merges, err)) < 0)
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
		return capy_err_set(err, CAPY_EFORMAT, WHAT ": model: missing vocab/merges");
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

static void setup_byte_level(struct capy_tokenizer *tok)
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

/* --- added tokens ------------------------------------------------------------------------------ */

struct added {
	const char *content;
	bool single_word, lstrip, rstrip, normalized, special;
	int32_t id;
};

static bool same_token(const struct added *a, const struct added *b)
{
	return !strcmp(a->content, b->content) && a->single_word == b->single_word &&
	       a->lstrip == b->lstrip && a->rstrip == b->rstrip && a->normalized == b->normalized &&
	       a->special == b->special;
}

static int read_added(const cJSON *list, struct added **out, size_t *n_out, struct capy_err *err)
{
	const cJSON *it;
	size_t n = 0;
	struct added *a;

	*out = NULL;
	*n_out = 0;
	if (!list || cJSON_IsNull(list))
		return 0;
	if (!cJSON_IsArray(list))
		return capy_err_set(err, CAPY_EFORMAT, WHAT ": added_tokens is not a list");
	a = calloc((size_t)cJSON_GetArraySize(list) + 1, sizeof(*a));
	if (!a)
		return oom(err);
	cJSON_ArrayForEach(it, list) {
		char where[48];
		snprintf(where, sizeof(where), "added_tokens[%zu]", n);
		/* HF's AddedToken::default: only normalized is true */
		a[n].normalized = true;
		if (!cJSON_IsObject(it) ||
		    get_string(cJSON_GetObjectItemCaseSensitive(it, "content"), where, &a[n].content,
			       err) < 0 ||
		    opt_bool(it, "single_word", where, &a[n].single_word, err) < 0 ||
		    opt_bool(it, "lstrip", where, &a[n].lstrip, err) < 0 ||
		    opt_bool(it, "rstrip", where, &a[n].rstrip, err) < 0 ||
		    opt_bool(it, "normalized", where, &a[n].normalized, err) < 0 ||
		    opt_bool(it, "special", where, &a[n].special, err) < 0) {
			free(a);
			if (!cJSON_IsObject(it))
				return capy_err_set(err, CAPY_EFORMAT, WHAT ": %s is not an object",
						    where);
			return CAPY_EFORMAT;
		}
		n++;
	}
	*out = a;
	*n_out = n;
	return 0;
}

/* AddedVocabulary::add_tokens with every token of the file at once, then refresh_added_tokens:
 * patterns are the special tokens (first occurrence of each content) then the others, split by
 * their own "normalized" flag; the flags used when matching are those of the id's last
 * definition. */
static int build_added(struct capy_tokenizer *tok, struct added *a, size_t n, size_t vocab_n,
		       struct capy_err *err)
{
	struct added **special = calloc(n + 1, sizeof(*special)), **plain = calloc(n + 1, sizeof(*plain));
	struct tok_pattern *raw = calloc(2 * n + 1, sizeof(*raw)), *norm = calloc(2 * n + 1, sizeof(*norm));
	size_t n_special = 0, n_plain = 0, n_raw = 0, n_norm = 0;
	int32_t next_id = (int32_t)CAPY_MIN(vocab_n, (size_t)TOK_MAX_ID + 1);
	struct tok_buf nb[2] = { { 0 } };
	int rc = 0;

	if (!special || !plain || !raw || !norm || tok_strmap_init(&tok->added, n, &tok->pool) < 0) {
		rc = oom(err);
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		if (!a[i].special || !*a[i].content)
			continue;
		bool seen = false;
		for (size_t k = 0; k < n_special && !seen; k++)
			seen = !strcmp(special[k]->content, a[i].content);
		if (!seen)
			special[n_special++] = &a[i];
	}
	for (size_t i = 0; i < n; i++) {
		size_t len = strlen(a[i].content);
		bool dup = false, is_special = false;
		uint32_t off;
		int32_t id;

		a[i].id = -1;
		if (!len)
			continue;
		for (size_t k = 0; k < i && !dup; k++)
			dup = a[k].id >= 0 && same_token(&a[k], &a[i]);
		if (dup)
			continue;
		id = tok_strmap_get(&tok->added, a[i].content, len);
		if (id < 0)
			id = tok_strmap_get(&tok->vocab, a[i].content, len);
		if (id < 0) {
			if (next_id > TOK_MAX_ID) {
				rc = capy_err_set(err, CAPY_EUNSUPPORTED, WHAT ": too many ids");
				goto out;
			}
			id = next_id++;
		}
		a[i].id = id;
		if (tok_pool_add(tok, a[i].content, len, &off) < 0 ||
		    tok_strmap_put(&tok->added, off, len, id) < 0) {
			rc = oom(err);
			goto out;
		}
		for (size_t k = 0; k < n_special && !is_special; k++)
			is_special = !strcmp(special[k]->content, a[i].content);
		if (!is_special)
			plain[n_plain++] = &a[i];
	}
	/* The patterns, in HF's order: special tokens, then the others. */
	for (size_t i = 0; i < n_special + n_plain; i++) {
		struct added *t = i < n_special ? special[i] : plain[i - n_special];
		size_t len = strlen(t->content);
		int32_t id = tok_strmap_get(&tok->added, t->content, len);
		const char *text = t->content;
		size_t tlen = len;
		uint32_t off;

		if (t->normalized &&
		    (rc = tok_normalize(tok, t->content, len, &text, &tlen, nb, err)) < 0)
			goto out;
		if (!tlen)
			continue;
		if (tok_pool_add(tok, text, tlen, &off) < 0) {
			rc = oom(err);
			goto out;
		}
		struct tok_pattern *p = t->normalized ? &norm[n_norm++] : &raw[n_raw++];
		p->text = (const char *)(uintptr_t)off; /* an offset until the pool stops moving */
		p->len = (uint32_t)tlen;
		p->id = id;
	}
	tok->raw_matcher.pats = raw;
	tok->raw_matcher.n = n_raw;
	tok->norm_matcher.pats = norm;
	tok->norm_matcher.n = n_norm;
	raw = norm = NULL;
out:
	free(special);
	free(plain);
	free(raw);
	free(norm);
	tok_buf_release(&nb[0]);
	tok_buf_release(&nb[1]);
	return rc;
}

/* --- putting it together --------------------------------------------------------------------------- */

static int build_ids(struct capy_tokenizer *tok, const struct vocab_entry *v, size_t n_v,
		     const struct added *a, size_t n_a, struct capy_err *err)
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
		return oom(err);
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
			return oom(err);
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
				rc = oom(err);
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

static int load_decoder(struct capy_tokenizer *tok, const cJSON *d, struct capy_err *err)
{
	const char *type;

	tok->decoder = TOK_DEC_NONE;
	if (!d || cJSON_IsNull(d))
		return 0;
	if (!cJSON_IsObject(d) || !(type = type_of(d)))
		return capy_err_set(err, CAPY_EFORMAT, WHAT ": decoder has no type");
	if (!strcmp(type, "ByteLevel")) {
		tok->decoder = TOK_DEC_BYTELEVEL;
		return 0;
	}
	return capy_err_set(err, CAPY_EUNSUPPORTED, WHAT ": decoder type '%s' is not supported", type);
}

static void fix_pattern_pointers(struct capy_tokenizer *tok, struct tok_matcher *m)
{
	for (size_t i = 0; i < m->n; i++)
		m->pats[i].text = tok->pool + (uintptr_t)m->pats[i].text;
	tok_matcher_build(m, m->pats, m->n);
}

int capy_tokenizer_new(struct capy_tokenizer **out, const char *json, size_t len,
		       struct capy_err *err)
{
	struct capy_tokenizer *tok;
	struct vocab_entry *vocab = NULL;
	struct added *added = NULL;
	size_t n_vocab = 0, n_added = 0, valid;
	const cJSON *version;
	cJSON *root = NULL;
	int rc;

	*out = NULL;
	/* HF reads the file into a Rust String */
	valid = tok_utf8_valid_prefix(json, len);
	if (valid != len)
		return capy_err_set(err, CAPY_EFORMAT, WHAT ": not valid UTF-8 at byte offset %zu",
				    valid);
	if ((rc = capy_json_parse(json, len, WHAT, &root, err)) < 0)
		return rc;
	tok = calloc(1, sizeof(*tok));
	if (tok && !(tok->caches = tok_cache_pool_new())) {
		free(tok);
		tok = NULL;
	}
	if (!tok) {
		cJSON_Delete(root);
		return oom(err);
	}
	rc = CAPY_EFORMAT;
	if (!cJSON_IsObject(root)) {
		capy_err_set(err, CAPY_EFORMAT, WHAT ": not a JSON object");
		goto fail;
	}
	version = cJSON_GetObjectItemCaseSensitive(root, "version");
	if (version && !(cJSON_IsString(version) && !strcmp(version->valuestring, "1.0"))) {
		capy_err_set(err, CAPY_EFORMAT, WHAT ": unknown tokenizer version");
		goto fail;
	}
	if ((rc = load_model(tok, cJSON_GetObjectItemCaseSensitive(root, "model"), &vocab, &n_vocab,
			     err)) < 0 ||
	    (rc = load_normalizer(tok, cJSON_GetObjectItemCaseSensitive(root, "normalizer"),
				  "normalizer", err)) < 0 ||
	    (rc = load_pretok(tok, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"),
			      "pre_tokenizer", err)) < 0 ||
	    (rc = load_decoder(tok, cJSON_GetObjectItemCaseSensitive(root, "decoder"), err)) < 0 ||
	    (rc = read_added(cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), &added,
			     &n_added, err)) < 0 ||
	    (rc = build_added(tok, added, n_added, tok->vocab.n, err)) < 0 ||
	    (rc = build_ids(tok, vocab, n_vocab, added, n_added, err)) < 0)
		goto fail;
	if (tok->byte_level)
		setup_byte_level(tok);
	for (size_t i = 0; i < n_added; i++) {
		/* single_word tests the neighbours with Rust regex's \w (Unicode 16.0) */
		if (added[i].id >= 0 && added[i].single_word && !tok->word_char &&
		    (rc = tok_regex_compile_class("rust_w", &tok->word_char, WHAT, err)) < 0)
			goto fail;
	}
	/* the pool no longer moves: patterns can point into it */
	fix_pattern_pointers(tok, &tok->raw_matcher);
	fix_pattern_pointers(tok, &tok->norm_matcher);
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
	tok_cache_pool_free(tok->caches);
	free(tok);
}
