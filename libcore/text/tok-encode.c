/* tok-encode.c - capy_tokenizer_encode: the stages of HF's encode, wired together. */
#include "tokenizer-impl.h"

#include <pthread.h>

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
	int rc = tok_normalize(tok, s, len, &n, &nlen, c->s->norm, c->err);

	if (rc < 0)
		return rc;
	if (tok->norm_matcher.n && (c->flags & CAPY_TOK_PARSE_ADDED))
		return tok_split_added(c, &tok->norm_matcher, n, nlen, tok_pretokenize);
	return tok_pretokenize(c, n, nlen);
}

/* --- the scratch pool ---------------------------------------------------------------------- */

struct tok_scratch_pool {
	pthread_mutex_t lock;
	struct tok_scratch *free;
};

struct tok_scratch_pool *tok_scratch_pool_new(void)
{
	struct tok_scratch_pool *p = calloc(1, sizeof(*p));

	if (p && pthread_mutex_init(&p->lock, NULL)) {
		free(p);
		return NULL;
	}
	return p;
}

static void scratch_free(struct tok_scratch *s)
{
	pcre2_match_data_free(s->md);
	pcre2_match_context_free(s->mctx);
	pcre2_jit_stack_free(s->jit_stack);
	tok_buf_release(&s->norm[0]);
	tok_buf_release(&s->norm[1]);
	tok_buf_release(&s->prefixed);
	tok_buf_release(&s->model);
	tok_buf_release(&s->key);
	tok_buf_release(&s->lossy);
	free(s->spans);
	free(s->syms);
	free(s->heap);
	free(s->heap_id);
	free(s);
}

void tok_scratch_pool_free(struct tok_scratch_pool *p)
{
	if (!p)
		return;
	while (p->free) {
		struct tok_scratch *s = p->free;
		p->free = s->next;
		scratch_free(s);
	}
	pthread_mutex_destroy(&p->lock);
	free(p);
}

static struct tok_scratch *scratch_get(const struct capy_tokenizer *tok)
{
	struct tok_scratch_pool *p = tok->scratch;
	struct tok_scratch *s;

	pthread_mutex_lock(&p->lock);
	s = p->free;
	if (s)
		p->free = s->next;
	pthread_mutex_unlock(&p->lock);
	if (s)
		return s;
	/* calloc: the word cache's pages are only touched as it fills */
	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->md = pcre2_match_data_create(tok->max_captures + 1, NULL);
	s->mctx = pcre2_match_context_create(NULL);
	/* The default JIT stack (32 KiB on the machine stack) is too small for some patterns on
	 * long runs; give it room to grow on the heap. */
	s->jit_stack = pcre2_jit_stack_create(32 << 10, 64 << 20, NULL);
	if (!s->md || !s->mctx || !s->jit_stack) {
		scratch_free(s);
		return NULL;
	}
	pcre2_jit_stack_assign(s->mctx, NULL, s->jit_stack);
	return s;
}

/* Back to the pool; buffers grown for an unusually long text are given back to the system. */
static void scratch_put(const struct capy_tokenizer *tok, struct tok_scratch *s)
{
	struct tok_buf *bufs[] = { &s->norm[0], &s->norm[1], &s->prefixed, &s->model, &s->key,
				   &s->lossy };

	for (size_t i = 0; i < ARRAY_SIZE(bufs); i++)
		if (bufs[i]->cap > (1u << 20))
			tok_buf_release(bufs[i]);
	if (s->cap_spans > (1u << 16)) {
		free(s->spans);
		s->spans = NULL;
		s->cap_spans = 0;
	}
	if (s->cap_syms > (1u << 16)) {
		free(s->syms);
		free(s->heap);
		free(s->heap_id);
		s->syms = NULL;
		s->heap = NULL;
		s->heap_id = NULL;
		s->cap_syms = s->cap_heap = 0;
	}
	s->n_spans = 0;
	pthread_mutex_lock(&tok->scratch->lock);
	s->next = tok->scratch->free;
	tok->scratch->free = s;
	pthread_mutex_unlock(&tok->scratch->lock);
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
	c = (struct tok_ctx){ .tok = tok, .flags = flags, .out = out, .err = err };
	if (!(c.s = scratch_get(tok)))
		return capy_err_set(err, CAPY_ENOMEM, "out of memory");
	if (valid < len) {
		c.s->lossy.len = 0;
		if ((rc = tok_utf8_lossy(&c.s->lossy, text, len, false, NULL)) < 0) {
			rc = capy_err_set(err, rc, "out of memory");
			goto done;
		}
		text = c.s->lossy.p;
		len = c.s->lossy.len;
	}
	if (tok->raw_matcher.n && (flags & CAPY_TOK_PARSE_ADDED))
		rc = tok_split_added(&c, &tok->raw_matcher, text, len, normalized_piece);
	else
		rc = normalized_piece(&c, text, len);
done:
	if (rc < 0)
		out->n = n0;
	scratch_put(tok, c.s);
	return rc;
}
