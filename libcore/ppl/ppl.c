/* ppl.c - perplexity in sliding windows (ppl.h). */
#include "ppl.h"
#include "../engine/engine.h"

#include <math.h>

int capy_ppl_run(struct capy_engine *e, const int32_t *ids, uint64_t n, const struct capy_ppl_opts *o,
		 struct capy_ppl_result *out, struct capy_err *err)
{
	uint64_t ctx = o->ctx, stride = o->stride ? o->stride : o->ctx, V, prev_end = 0;
	size_t cap = 0;
	float *logits;
	int rc = 0;

	memset(out, 0, sizeof(*out));
	if (ctx < 2 || stride > ctx)
		return capy_err_set(err, CAPY_EINVAL,
				    "ppl: ctx %" PRIu64 " and stride %" PRIu64 " (need 2 <= ctx, stride <= ctx)", ctx,
				    stride);
	if (n < 2)
		return capy_err_set(err, CAPY_EINVAL, "ppl: %" PRIu64 " tokens; at least 2 are needed", n);
	V = capy_engine_config(e)->vocab_size;
	logits = malloc((size_t)CAPY_MIN(ctx, n) * V * sizeof(float));
	if (!logits)
		return capy_err_set(err, CAPY_ENOMEM, "ppl: out of memory for %" PRIu64 " rows of logits",
				    CAPY_MIN(ctx, n));
	out->tokens = n;
	for (uint64_t begin = 0; prev_end < n; begin += stride) {
		uint64_t end = CAPY_MIN(begin + ctx, n), first = CAPY_MAX(prev_end, begin + 1);
		struct capy_ppl_window *w;
		struct capy_seq *s;

		if (out->n_windows == cap) {
			struct capy_ppl_window *p = realloc(out->windows, (cap = cap ? 2 * cap : 16) * sizeof(*p));
			if (!p) {
				rc = capy_err_set(err, CAPY_ENOMEM, "ppl: out of memory");
				break;
			}
			out->windows = p;
		}
		if ((rc = capy_seq_new(e, &s, err)) < 0)
			break;
		rc = capy_engine_forward(e, s, ids + begin, end - begin, logits, true, err);
		capy_seq_free(s);
		if (rc < 0)
			break;
		w = &out->windows[out->n_windows++];
		*w = (struct capy_ppl_window){ .begin = begin, .end = end, .scored = end - first };
		for (uint64_t t = first; t < end; t++) {
			const float *l = logits + (t - 1 - begin) * V;
			double mx = -INFINITY, z = 0, nll;
			uint64_t best = 0;
			for (uint64_t v = 0; v < V; v++) {
				if (l[v] > mx)
					mx = l[v];
				if (l[v] > l[best])
					best = v;
			}
			for (uint64_t v = 0; v < V; v++)
				z += exp(l[v] - mx);
			nll = -((double)l[ids[t]] - mx - log(z));
			if (o->tok_nll)
				o->tok_nll[t] = nll;
			w->nll_sum += nll;
			if (o->argmax_counts)
				o->argmax_counts[best]++;
		}
		out->nll_sum += w->nll_sum;
		out->scored += w->scored;
		prev_end = end;
		if (o->progress)
			o->progress(o->ud, end, n, out->nll_sum, out->scored);
		if (end == n)
			break;
	}
	free(logits);
	if (rc < 0)
		capy_ppl_result_release(out);
	return rc;
}

void capy_ppl_result_release(struct capy_ppl_result *r)
{
	free(r->windows);
	memset(r, 0, sizeof(*r));
}

double capy_ppl_window_nll(const struct capy_ppl_window *w)
{
	return w->scored ? w->nll_sum / (double)w->scored : 0.0;
}

int capy_ppl_format_nll(char *buf, size_t size, double nll)
{
	return snprintf(buf, size, "%.9g", nll);
}

int capy_ppl_format_window(char *buf, size_t size, const struct capy_ppl_window *w)
{
	char nll[32];

	capy_ppl_format_nll(nll, sizeof(nll), capy_ppl_window_nll(w));
	return snprintf(buf, size,
			"{\"begin\": %" PRIu64 ", \"end\": %" PRIu64 ", \"scored\": %" PRIu64 ", \"nll\": %s}",
			w->begin, w->end, w->scored, nll);
}

int capy_ppl_format_summary(char *buf, size_t size, const struct capy_ppl_result *r, uint64_t ctx, uint64_t stride)
{
	return snprintf(buf, size, "ppl %.6f over %" PRIu64 " tokens (ctx %" PRIu64 ", stride %" PRIu64 ")",
			exp(r->nll_sum / (double)r->scored), r->scored, ctx, stride);
}
