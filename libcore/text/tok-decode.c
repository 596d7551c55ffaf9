/* tok-decode.c - ids back to text (HF decode and a streaming decoder), and vocabulary lookups. */
#include "tokenizer-impl.h"

static bool has_piece(const struct capy_tokenizer *tok, int32_t id)
{
	return id >= 0 && id < tok->n_ids && (tok->id_flags[id] & TOK_ID_HAS_PIECE);
}

/* HF decode drops ids without a token and, when asked, special tokens. */
static bool kept(const struct capy_tokenizer *tok, int32_t id, unsigned flags)
{
	return has_piece(tok, id) &&
	       !((flags & CAPY_TOK_SKIP_SPECIAL) && (tok->id_flags[id] & TOK_ID_SPECIAL));
}

int capy_tokenizer_decode(const struct capy_tokenizer *tok, const int32_t *ids, size_t n,
			  unsigned flags, char **out, size_t *out_len, struct capy_err *err)
{
	struct tok_buf raw = { 0 }, text = { 0 };
	bool first = true;
	int rc = 0;

	*out = NULL;
	*out_len = 0;
	for (size_t i = 0; i < n && rc >= 0; i++) {
		int32_t id = ids[i];
		if (!kept(tok, id, flags))
			continue;
		if (tok->decoder == TOK_DEC_BYTELEVEL) {
			rc = tok_buf_add(&raw, tok->pool + tok->bytes_off[id], tok->bytes_len[id]);
		} else {
			/* no decoder: HF joins the token strings with spaces */
			if (!first)
				rc = tok_buf_add(&text, " ", 1);
			if (rc >= 0)
				rc = tok_buf_add(&text, tok->pool + tok->piece_off[id],
						 tok->piece_len[id]);
		}
		first = false;
	}
	if (rc >= 0 && tok->decoder == TOK_DEC_BYTELEVEL)
		rc = tok_utf8_lossy(&text, raw.p ? raw.p : "", raw.len, false, NULL);
	if (rc >= 0)
		rc = tok_buf_reserve(&text, 0); /* a buffer even for empty text */
	tok_buf_release(&raw);
	if (rc < 0) {
		tok_buf_release(&text);
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	}
	text.p[text.len] = '\0';
	*out = text.p;
	*out_len = text.len;
	return 0;
}

struct capy_detok {
	const struct capy_tokenizer *tok;
	unsigned flags;
	bool first;
	struct tok_buf pending; /* the start of a character not yet complete (at most 3 bytes) */
	struct tok_buf out;
};

struct capy_detok *capy_detok_new(const struct capy_tokenizer *tok, unsigned flags)
{
	struct capy_detok *d = calloc(1, sizeof(*d));

	if (!d)
		return NULL;
	d->tok = tok;
	d->flags = flags;
	d->first = true;
	if (tok_buf_reserve(&d->out, 64) < 0 || tok_buf_reserve(&d->pending, 64) < 0) {
		capy_detok_free(d);
		return NULL;
	}
	return d;
}

/*
 * Converting pending bytes up to the last character that could still be completed gives the
 * same text as converting everything at once: U+FFFD replaces a maximal invalid subsequence,
 * and whether a sequence is invalid is known as soon as it stops being a valid prefix.
 */
int capy_detok_feed(struct capy_detok *d, int32_t id, const char **text, size_t *len)
{
	const struct capy_tokenizer *tok = d->tok;
	size_t held;
	int rc = 0;

	d->out.len = 0;
	if (kept(tok, id, d->flags)) {
		if (tok->decoder == TOK_DEC_BYTELEVEL) {
			rc = tok_buf_add(&d->pending, tok->pool + tok->bytes_off[id], tok->bytes_len[id]);
			if (rc >= 0)
				rc = tok_utf8_lossy(&d->out, d->pending.p, d->pending.len, true, &held);
			if (rc >= 0) {
				memmove(d->pending.p, d->pending.p + d->pending.len - held, held);
				d->pending.len = held;
			}
		} else {
			if (!d->first)
				rc = tok_buf_add(&d->out, " ", 1);
			if (rc >= 0)
				rc = tok_buf_add(&d->out, tok->pool + tok->piece_off[id],
						 tok->piece_len[id]);
		}
		d->first = false;
	}
	*text = d->out.p;
	*len = rc < 0 ? 0 : d->out.len;
	return rc < 0 ? CAPY_ENOMEM : 0;
}

int capy_detok_flush(struct capy_detok *d, const char **text, size_t *len)
{
	int rc;

	d->out.len = 0;
	rc = tok_utf8_lossy(&d->out, d->pending.p, d->pending.len, false, NULL);
	d->pending.len = 0;
	*text = d->out.p;
	*len = rc < 0 ? 0 : d->out.len;
	return rc < 0 ? CAPY_ENOMEM : 0;
}

void capy_detok_reset(struct capy_detok *d)
{
	d->pending.len = 0;
	d->out.len = 0;
	d->first = true;
}

void capy_detok_free(struct capy_detok *d)
{
	if (!d)
		return;
	tok_buf_release(&d->pending);
	tok_buf_release(&d->out);
	free(d);
}

size_t capy_tokenizer_vocab_size(const struct capy_tokenizer *tok)
{
	return tok->vocab_size;
}

int32_t capy_tokenizer_id_limit(const struct capy_tokenizer *tok)
{
	return tok->n_ids;
}

const char *capy_tokenizer_piece(const struct capy_tokenizer *tok, int32_t id, size_t *len)
{
	if (!has_piece(tok, id))
		return NULL;
	*len = tok->piece_len[id];
	return tok->pool + tok->piece_off[id];
}

const char *capy_tokenizer_piece_bytes(const struct capy_tokenizer *tok, int32_t id, size_t *len)
{
	if (!has_piece(tok, id))
		return NULL;
	*len = tok->bytes_len[id];
	return tok->pool + tok->bytes_off[id];
}

int32_t capy_tokenizer_token_id(const struct capy_tokenizer *tok, const char *piece, size_t len)
{
	int32_t id = tok_strmap_get(&tok->added, piece, len);

	return id >= 0 ? id : tok_strmap_get(&tok->vocab, piece, len);
}

int32_t capy_tokenizer_added_id(const struct capy_tokenizer *tok, const char *content)
{
	return tok_strmap_get(&tok->added, content, strlen(content));
}

bool capy_tokenizer_is_special(const struct capy_tokenizer *tok, int32_t id)
{
	return id >= 0 && id < tok->n_ids && (tok->id_flags[id] & TOK_ID_SPECIAL);
}

bool capy_tokenizer_is_added(const struct capy_tokenizer *tok, int32_t id)
{
	return id >= 0 && id < tok->n_ids && (tok->id_flags[id] & TOK_ID_ADDED);
}
