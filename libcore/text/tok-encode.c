/* tok-encode.c - capy_tokenizer_encode: the stages of HF's encode, wired together. */
#include "tokenizer-impl.h"

void capy_tokens_release(struct capy_tokens *t)
{
	free(t->ids);
	t->ids = NULL;
	t->n = t->cap = 0;
}

int tok_emit(struct tok_ctx *c, int32_t id)
{
	struct capy_tokens *o = c->out;

	if (CAPY_UNLIKELY(o->n == o->cap)) {
		size_t cap = o->cap ? o->cap * 2 : 256;
		int32_t *p = realloc(o->ids, cap * sizeof(*p));
		if (!p)
			return capy_err_set(c->err, CAPY_ENOMEM, "out of memory");
		o->ids = p;
		o->cap = cap;
	}
	o->ids[o->n++] = id;
	return 0;
}

/* Stage 2: normalize a piece between raw added tokens, then cut out normalized added tokens. */
static int normalized_piece(struct tok_ctx *c, const char *s, size_t len)
{
	const struct capy_tokenizer *tok = c->tok;
	const char *n;
	size_t nlen;
	int rc = tok_normalize(tok, s, len, &n, &nlen, c->norm, c->err);

	if (rc < 0)
		return rc;
	if (tok->norm_matcher.n && (c->flags & CAPY_TOK_PARSE_ADDED))
		return tok_split_added(c, &tok->norm_matcher, n, nlen, tok_pretokenize);
	return tok_pretokenize(c, n, nlen);
}

static void ctx_release(struct tok_ctx *c)
{
	tok_cache_put(c->tok->caches, c->cache);
	pcre2_match_data_free(c->md);
	pcre2_match_context_free(c->mctx);
	pcre2_jit_stack_free(c->jit_stack);
	tok_buf_release(&c->norm[0]);
	tok_buf_release(&c->norm[1]);
	tok_buf_release(&c->prefixed);
	tok_buf_release(&c->model);
	tok_buf_release(&c->key);
	tok_buf_release(&c->lossy);
	free(c->spans);
	free(c->syms);
	free(c->heap);
	free(c->heap_id);
}

static int ctx_init(struct tok_ctx *c, const struct capy_tokenizer *tok, unsigned flags,
		    struct capy_tokens *out, struct capy_err *err)
{
	memset(c, 0, sizeof(*c));
	c->tok = tok;
	c->flags = flags;
	c->out = out;
	c->err = err;
	c->md = pcre2_match_data_create(tok->max_captures + 1, NULL);
	c->mctx = pcre2_match_context_create(NULL);
	/* The default JIT stack (32 KiB on the machine stack) is too small for some patterns on
	 * long runs; give it room to grow on the heap. */
	c->jit_stack = pcre2_jit_stack_create(32 << 10, 64 << 20, NULL);
	if (!c->md || !c->mctx || !c->jit_stack)
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	pcre2_jit_stack_assign(c->mctx, NULL, c->jit_stack);
	c->cache = tok_cache_get(tok->caches);
	return 0;
}

int capy_tokenizer_encode(const struct capy_tokenizer *tok, const char *text, size_t len,
			  unsigned flags, struct capy_tokens *out, struct capy_err *err)
{
	struct tok_ctx c;
	size_t n0 = out->n, valid;
	int rc;

	if (len > UINT32_MAX / 2)
		return capy_err_set(err, CAPY_EINVAL, "text of %zu bytes is too long to encode", len);
	valid = tok_utf8_valid_prefix(text, len);
	if (valid < len && !(flags & CAPY_TOK_LOSSY))
		return capy_err_set(err, CAPY_EFORMAT, "text is not valid UTF-8 at byte offset %zu",
				    valid);
	if ((rc = ctx_init(&c, tok, flags, out, err)) < 0)
		goto done;
	if (valid < len) {
		if ((rc = tok_utf8_lossy(&c.lossy, text, len, false, NULL)) < 0) {
			rc = capy_err_set(err, rc, "out of memory");
			goto done;
		}
		text = c.lossy.p;
		len = c.lossy.len;
	}
	if (tok->raw_matcher.n && (flags & CAPY_TOK_PARSE_ADDED))
		rc = tok_split_added(&c, &tok->raw_matcher, text, len, normalized_piece);
	else
		rc = normalized_piece(&c, text, len);
done:
	if (rc < 0)
		out->n = n0;
	ctx_release(&c);
	return rc;
}
